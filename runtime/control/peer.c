/* SPDX-License-Identifier: BSD-3-Clause */
/* A peer's state machine on the control thread: its slot, sending, failing, connecting. */
#include <errno.h>
#include <stdarg.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <rte_ring_elem.h>

#include "ctl.h"
#include "kvl_clock.h"

static int queue_msg(struct peer *pr, struct kvl_ctrl_msg *m)
{
	int n;

	if (pr->tx_cap - pr->tx_len < FRAME_MAX) {
		size_t cap = pr->tx_cap ? pr->tx_cap * 2 : 2 * FRAME_MAX;
		uint8_t *t;

		if (cap > 64 * FRAME_MAX)
			return -ENOBUFS; /* the peer stopped reading */
		t = realloc(pr->tx, cap);
		if (t == NULL)
			return -ENOMEM;
		pr->tx = t;
		pr->tx_cap = cap;
	}
	n = kvl_ctrl_encode(m, pr->tx + pr->tx_len, pr->tx_cap - pr->tx_len);
	if (n < 0)
		return n;
	pr->tx_len += (size_t)n;
	return 0;
}

void kvl_ctl_send_msg(struct kvl_control *c, uint32_t p, struct kvl_ctrl_msg *m)
{
	int rc = queue_msg(&c->peer[p], m);

	if (rc < 0)
		kvl_ctl_peer_fail(c, p, KVL_ERR_CONN_LOST, "cannot queue %s: %s",
				  kvl_ctrl_type_name(m->type), strerror(-rc));
}

int kvl_ctl_flush(struct peer *pr)
{
	if (pr->tls_hs)
		return 0; /* nothing of ours goes before TLS is up */
	while (pr->tx_len > 0) {
		ssize_t n = kvl_ctl_send(pr->fd, pr->ssl, pr->tx, pr->tx_len);

		if (n < 0)
			return errno == EAGAIN || errno == EWOULDBLOCK ? 0 : -errno;
		memmove(pr->tx, pr->tx + n, pr->tx_len - (size_t)n);
		pr->tx_len -= (size_t)n;
	}
	return 0;
}

void kvl_ctl_set_state(struct kvl_control *c, uint32_t p, int state)
{
	__atomic_store_n(&c->pub[p].state, state, __ATOMIC_RELEASE);
	if (state == KVL_PEER_READY || state == KVL_PEER_DEAD) {
		struct connect_wait *w = c->peer[p].waiter;

		if (w) {
			pthread_mutex_lock(&c->lock);
			w->done = true;
			w->peer = p;
			w->result = state == KVL_PEER_READY ? 0 : -ECONNREFUSED;
			if (state == KVL_PEER_DEAD)
				snprintf(w->msg, sizeof(w->msg), "%s", c->pub[p].fail_msg);
			pthread_cond_broadcast(&c->cond);
			pthread_mutex_unlock(&c->lock);
			c->peer[p].waiter = NULL;
		}
	}
}

/* Make slot @p a new peer (its previous one is free, or dead with no connection left). */
void kvl_ctl_peer_reset(struct kvl_control *c, uint32_t p, const char *addr, bool initiator)
{
	struct kvl_peer_pub *pub = &c->pub[p];
	struct peer *pr = &c->peer[p];

	{
		/* Counters of the slot's earlier peers stay out of this one's. */
		rte_spinlock_lock(&pub->lock);
		memset(&pub->base, 0, sizeof(pub->base));
		for (unsigned n = 0; n < c->rt->cfg.n_nics; n++)
			if (c->rt->nic[n].io)
				kvl_nic_io_peer_stats(c->rt->nic[n].io, p, &pub->base);
		pub->gen++;
		pub->initiator = initiator;
		snprintf(pub->addr, sizeof(pub->addr), "%s", addr);
		pub->name[0] = '\0';
		pub->n_conns = 0;
		pub->n_segs = 0;
		pub->fail_status = 0;
		pub->fail_msg[0] = '\0';
		pub->last_rx_ns = kvl_now_ns();
		pub->rtt_us = 0;
		pub->heartbeats_rx = 0;
		pub->same_host = -1;
		pub->ipc = false;
		pub->ipc_segs = 0;
		pub->ipc_why[0] = '\0';
		rte_spinlock_unlock(&pub->lock);
		free(pr->tx);
		kvl_ctl_tls_close(pr->ssl); /* NULL unless the slot was never failed */
		memset(pr, 0, sizeof(*pr));
		pr->fd = -1;
	}
}

int kvl_ctl_peer_alloc(struct kvl_control *c, const char *addr, bool initiator)
{
	for (uint32_t p = 0; p < KVL_MAX_PEERS_RT; p++) {
		int st = c->pub[p].state;
		struct peer *pr = &c->peer[p];

		bool owed = false;

		for (unsigned n = 0; n < c->rt->cfg.n_nics; n++)
			owed |= (c->fail_owed[n] >> p) & 1;
		if (owed ||
		    (st != KVL_PEER_FREE && !(st == KVL_PEER_DEAD && !pr->auto_reconnect &&
					      pr->waiter == NULL && c->pub[p].n_conns == 0)))
			continue;
		kvl_ctl_peer_reset(c, p, addr, initiator);
		return (int)p;
	}
	return -ENOSPC;
}

/*
 * Connections that never authenticate are anyone's to open: their warnings are limited to
 * one a second (with the count of those not shown), so they cannot flood the log.
 */
static bool warn_ok(struct kvl_control *c)
{
	uint64_t t = kvl_now_ns();

	if (t - c->warn_ns < 1000000000ull) {
		c->warn_suppressed++;
		return false;
	}
	if (c->warn_suppressed)
		KVL_LOG(WARNING, "%llu more warnings about unauthenticated connections not shown",
			(unsigned long long)c->warn_suppressed);
	c->warn_ns = t;
	c->warn_suppressed = 0;
	return true;
}

static void drop_vpend(struct peer *pr)
{
	for (unsigned i = 0; i < pr->n_vpend; i++)
		if (pr->vpend[i].vc)
			kvl_verbs_conn_free(pr->vpend[i].vc);
	pr->n_vpend = 0;
}

/* Tell every lcore to fail what it has of this peer, and close the control socket. */
void kvl_ctl_peer_fail(struct kvl_control *c, uint32_t p, int status, const char *fmt, ...)
{
	struct kvl_peer_pub *pub = &c->pub[p];
	struct peer *pr = &c->peer[p];
	struct kvl_lcmd cmd = { .type = KVL_LCMD_FAIL_PEER, .peer = p, .status = status };
	va_list ap;

	if (pub->state == KVL_PEER_DEAD || pub->state == KVL_PEER_FREE)
		return;
	rte_spinlock_lock(&pub->lock);
	pub->fail_status = status;
	va_start(ap, fmt);
	vsnprintf(pub->fail_msg, sizeof(pub->fail_msg), fmt, ap);
	va_end(ap);
	rte_spinlock_unlock(&pub->lock);
	if (status == KVL_ERR_CANCELED)
		KVL_LOG(INFO, "peer %u (%s%s%s): %s", p, pub->addr, pub->name[0] ? ", " : "",
			pub->name, pub->fail_msg);
	else if (pub->state >= KVL_PEER_EXCHANGE || pub->initiator || warn_ok(c))
		KVL_LOG(WARNING, "peer %u (%s%s%s): %s", p, pub->addr, pub->name[0] ? ", " : "",
			pub->name, pub->fail_msg);
	/* The lcores know only peers that authenticated (the API reaches READY peers only, and
	 * connections come after the handshake): thousands of wrong proofs cost them nothing. */
	for (unsigned n = 0; n < c->rt->cfg.n_nics; n++) {
		if (c->rt->nic[n].io == NULL ||
		    (pub->state < KVL_PEER_EXCHANGE && pub->n_conns == 0))
			continue;
		if (kvl_ctl_lcmd(c, n, &cmd) < 0)
			c->fail_owed[n] |= 1ull
					   << p; /* sent again each turn (kvl_ctl_lcmd_drain) */
	}
	for (unsigned i = 0; i < MAX_PENDING; i++) {
		if (c->pc[i].state != PC_FREE && c->pc[i].peer == p)
			kvl_ctl_pconn_close(&c->pc[i]);
	}
	drop_vpend(pr);
	if (pr->fd >= 0) {
		struct kvl_ctrl_msg bye = { .type = KVL_CTRL_BYE };

		/* What is queued (an AUTH_FAIL) still goes out; a connection that never
		 * authenticated gets no BYE: nothing more from us. BYE only for a clean end (we
		 * stop, or answer the peer's): the peer fails what it had in flight with us as
		 * canceled. Any other failure (a data connection lost, a missed heartbeat) just
		 * closes, so the peer sees conn-lost, not a stop that did not happen. */
		if (pub->state >= KVL_PEER_EXCHANGE && status == KVL_ERR_CANCELED)
			queue_msg(pr, &bye);
		kvl_ctl_flush(pr);
		kvl_ctl_tls_close(pr->ssl);
		pr->ssl = NULL;
		pr->tls_hs = false;
		close(pr->fd);
		pr->fd = -1;
	}
	pr->retry_ns = kvl_now_ns() + RECONNECT_NS;
	kvl_ctl_set_state(c, p, KVL_PEER_DEAD);
}

void kvl_ctl_peer_connect(struct kvl_control *c, uint32_t p)
{
	struct peer *pr = &c->peer[p];
	char err[KVL_CTRL_TEXT_LEN];
	int rc;

	kvl_ctl_set_state(c, p, KVL_PEER_CONNECTING);
	pr->deadline_ns =
		kvl_now_ns() + (uint64_t)c->rt->cfg.control.connect_timeout_ms * 1000000ull;
	if (pr->waiter && pr->waiter->deadline_ns < pr->deadline_ns)
		pr->deadline_ns = pr->waiter->deadline_ns;
	rc = kvl_ctl_start_connect(c->pub[p].addr, &pr->fd, err, sizeof(err), NULL);
	if (rc < 0)
		kvl_ctl_peer_fail(c, p, KVL_ERR_CONN_LOST, "%s", err);
}
