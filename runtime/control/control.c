/* SPDX-License-Identifier: BSD-3-Clause */
/* The control thread: its poll loop and timers, start and stop, the API's calls into it. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <rte_ring_elem.h>

#include "ctl.h"
#include "kvl_clock.h"
#include "staging.h"

static void wake(struct kvl_control *c)
{
	uint64_t one = 1;

	if (write(c->efd, &one, sizeof(one)) < 0) {
		/* The counter is full: the thread is already awake. */
	}
}

/* lcore -> peer: a request of ours that READs from the peer was canceled. The peer holds
 * nothing for one-sided READs, so it only counts it; a dead peer needs no message. */
static void req_cancel_send(struct kvl_control *c, const struct kvl_levt *ev)
{
	struct kvl_ctrl_msg m = { .type = KVL_CTRL_REQ_CANCEL };

	if (ev->peer >= KVL_MAX_PEERS_RT || c->peer[ev->peer].fd < 0 ||
	    __atomic_load_n(&c->pub[ev->peer].state, __ATOMIC_ACQUIRE) != KVL_PEER_READY)
		return;
	m.u.req_cancel.req = ev->req;
	m.u.req_cancel.status = (uint32_t)ev->status;
	kvl_ctl_send_msg(c, ev->peer, &m);
	__atomic_fetch_add(&c->req_cancels_tx, 1, __ATOMIC_RELAXED);
}

static void handle_msg(struct kvl_control *c, uint32_t p, struct kvl_ctrl_msg *m)
{
	struct kvl_peer_pub *pub = &c->pub[p];

	pub->last_rx_ns = kvl_now_ns();
	/* Before authentication only the handshake's own messages are accepted. */
	if (pub->state == KVL_PEER_HANDSHAKE && pub->initiator)
		kvl_ctl_handshake_client(c, p, m);
	else if (pub->state == KVL_PEER_HANDSHAKE)
		kvl_ctl_handshake_server(c, p, m);
	else
		kvl_ctl_exchange_msg(c, p, m);
}

/* What a server tells, in the clear, a client whose [control] tls differs from its own. */
static void tls_error_msg(struct kvl_ctrl_msg *m, bool ours_on)
{
	m->u.error.code = KVL_CTL_ERROR_TLS;
	snprintf(m->u.error.text, sizeof(m->u.error.text),
		 "tls-mismatch: the peer runs [control] tls = %s", ours_on ? "on" : "off");
}

/*
 * A TLS ClientHello (a handshake record: 0x16, then version 3.x) where a kvlane HELLO belongs
 * (the connection's first bytes: no HELLO has come): the peer runs [control] tls = on and we do
 * not. Told in the clear (ERROR tls-mismatch), so that it says so too. The same two bytes after
 * a HELLO are a stranger's garbage, answered as any other: no ERROR before a proof.
 */
static bool tls_mismatch_off(struct kvl_control *c, uint32_t p)
{
	struct peer *pr = &c->peer[p];
	struct kvl_ctrl_msg out = { .type = KVL_CTRL_ERROR };

	if (pr->ssl != NULL || pr->rx_len < 2 || pr->rx[0] != 0x16 || pr->rx[1] != 0x03 ||
	    c->pub[p].state != KVL_PEER_HANDSHAKE || c->pub[p].initiator || pr->hello.type != 0)
		return false;
	__atomic_fetch_add(&c->tls_failures, 1, __ATOMIC_RELAXED);
	tls_error_msg(&out, false);
	kvl_ctl_send_msg(c, p, &out);
	kvl_ctl_peer_fail(c, p, KVL_ERR_PROTOCOL,
			  "TLS mismatch: the peer opened TLS ([control] tls = on there), this side "
			  "has [control] tls = off: set the same [control] tls on both ends");
	return true;
}

static void peer_read(struct kvl_control *c, uint32_t p)
{
	struct peer *pr = &c->peer[p];
	struct kvl_ctrl_msg *m;
	size_t used;
	ssize_t n;
	int rc;

again:
	n = kvl_ctl_recv(pr->fd, pr->ssl, pr->rx + pr->rx_len, sizeof(pr->rx) - pr->rx_len);
	if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) {
		kvl_ctl_peer_fail(c, p,
				  n < 0 && errno == EPROTO ? KVL_ERR_PROTOCOL : KVL_ERR_CONN_LOST,
				  "control connection %s",
				  n == 0	    ? "closed by the peer"
				  : errno == EPROTO ? "sent bad TLS records"
						    : strerror(errno));
		return;
	}
	if (n < 0)
		return;
	pr->rx_len += (size_t)n;
	if (tls_mismatch_off(c, p))
		return;
	m = malloc(sizeof(*m));
	if (m == NULL)
		return;
	while (pr->fd >= 0) {
		rc = kvl_ctrl_decode(pr->rx, pr->rx_len, m, &used);
		if (rc == 0)
			break;
		if (rc == -KVL_CTRL_E_VERSION) {
			/* the header's version: bytes 4-5, little-endian */
			kvl_ctl_peer_fail(
				c, p, KVL_ERR_PROTOCOL,
				"control protocol version %u from the peer, this kvlane speaks %u: "
				"run the same kvlane release on both ends",
				(unsigned)pr->rx[4] | (unsigned)pr->rx[5] << 8, KVL_CTRL_VERSION);
			break;
		}
		if (rc < 0) {
			/* Nothing after a bad frame can be trusted: close this peer only. */
			kvl_ctl_peer_fail(c, p, KVL_ERR_PROTOCOL, "malformed control message: %s",
					  kvl_ctrl_strerror(rc));
			break;
		}
		memmove(pr->rx, pr->rx + used, pr->rx_len - used);
		pr->rx_len -= used;
		handle_msg(c, p, m);
	}
	free(m);
	/* TLS may hold decrypted bytes the socket no longer shows: poll() would not wake. */
	if (pr->fd >= 0 && kvl_ctl_tls_pending(pr->ssl) && pr->rx_len < sizeof(pr->rx))
		goto again;
}

/*
 * [control] tls = on: one step of a control connection's TLS handshake; the kvlane handshake
 * (HELLO ...) starts once it is done. A kvlane HELLO in the clear is a peer with tls = off: it
 * is told so in the clear (ERROR tls-mismatch) before the close.
 */
static void peer_tls(struct kvl_control *c, uint32_t p)
{
	struct peer *pr = &c->peer[p];
	char err[KVL_CTRL_TEXT_LEN];
	int rc = kvl_ctl_tls_step(pr->ssl, &pr->tls_first, &pr->tls_events, err, sizeof(err));

	if (rc == 0)
		return;
	if (rc < 0) {
		__atomic_fetch_add(&c->tls_failures, 1, __ATOMIC_RELAXED);
		kvl_ctl_tls_close(pr->ssl);
		pr->ssl = NULL;
		pr->tls_hs = false;
		if (rc == -EPROTO && !c->pub[p].initiator) {
			struct kvl_ctrl_msg out = { .type = KVL_CTRL_ERROR };

			tls_error_msg(&out, true);
			kvl_ctl_send_msg(c, p, &out);
		}
		kvl_ctl_peer_fail(c, p, rc == -EPROTO ? KVL_ERR_PROTOCOL : KVL_ERR_CONN_LOST, "%s",
				  err);
		return;
	}
	pr->tls_hs = false;
	if (c->pub[p].initiator)
		kvl_ctl_client_hello(c, p);
	if (pr->fd >= 0 && kvl_ctl_tls_pending(pr->ssl))
		peer_read(c, p);
}

static void take_connect_waits(struct kvl_control *c)
{
	pthread_mutex_lock(&c->lock);
	for (unsigned i = 0; i < MAX_CONNECT_WAITS; i++) {
		struct connect_wait *r = c->req[i];
		int p;

		if (r == NULL || r->taken)
			continue;
		r->taken = true;
		p = kvl_ctl_peer_alloc(c, r->addr, true);
		if (p < 0) {
			r->done = true;
			r->result = -ENOSPC;
			snprintf(r->msg, sizeof(r->msg), "no free peer slot (at most %d peers)",
				 KVL_MAX_PEERS_RT);
			pthread_cond_broadcast(&c->cond);
			continue;
		}
		c->peer[p].waiter = r;
		pthread_mutex_unlock(&c->lock);
		kvl_ctl_peer_connect(c, (uint32_t)p);
		pthread_mutex_lock(&c->lock);
	}
	pthread_mutex_unlock(&c->lock);
}

/* "host:port" and "[v6]:port" -> the host part, for matching a peer's source address. */
static void host_of(const char *addr, char *out, size_t len)
{
	const char *colon = strrchr(addr, ':');
	size_t n = colon ? (size_t)(colon - addr) : strlen(addr);

	snprintf(out, len, "%.*s", (int)n, addr);
}

/* The peers the cluster's watch saw leave: one failure path, the heartbeat timeout's. */
static void take_gone(struct kvl_control *c)
{
	struct gone g[MAX_GONE];
	unsigned n;

	pthread_mutex_lock(&c->lock);
	n = c->n_gone;
	memcpy(g, c->gone, n * sizeof(g[0]));
	c->n_gone = 0;
	pthread_mutex_unlock(&c->lock);
	for (unsigned i = 0; i < n; i++) {
		char want[KVL_CTRL_ADDR_LEN], have[KVL_CTRL_ADDR_LEN];

		host_of(g[i].addr, want, sizeof(want));
		for (uint32_t p = 0; p < KVL_MAX_PEERS_RT; p++) {
			struct kvl_peer_pub *pub = &c->pub[p];
			int st = pub->state;
			bool match;

			if (st == KVL_PEER_FREE || st == KVL_PEER_DEAD)
				continue;
			host_of(pub->addr, have, sizeof(have));
			match = pub->initiator
					? strcmp(pub->addr, g[i].addr) == 0
					: g[i].name[0] && strcmp(pub->name, g[i].name) == 0 &&
						  strcmp(have, want) == 0;
			if (match)
				kvl_ctl_peer_fail(c, p, KVL_ERR_PEER_DEAD, "%s", g[i].why);
		}
	}
}

static void take_lcore_events(struct kvl_control *c)
{
	struct kvl_runtime *rt = c->rt;
	struct kvl_levt ev;

	for (unsigned n = 0; n < rt->cfg.n_nics; n++) {
		if (rt->nic[n].io == NULL)
			continue;
		while (rte_ring_dequeue_elem(rt->nic[n].io->evt, &ev, sizeof(ev)) == 0) {
			struct kvl_peer_pub *pub;

			if (ev.slot >= KVL_SLOTS_PER_LCORE)
				continue;
			if (ev.type == KVL_LEVT_RESYNC) {
				kvl_ctl_resync_send(c, n, &ev);
				continue;
			}
			if (ev.type == KVL_LEVT_REQ_CANCEL) {
				req_cancel_send(c, &ev);
				continue;
			}
			if (ev.type != KVL_LEVT_CONN_CLOSED)
				continue;
			c->slot[n][ev.slot].used = false;
			if (ev.peer >= KVL_MAX_PEERS_RT)
				continue;
			pub = &c->pub[ev.peer];
			rte_spinlock_lock(&pub->lock);
			for (uint32_t i = 0; i < pub->n_conns; i++) {
				if (pub->conn[i].nic == n && pub->conn[i].slot == ev.slot) {
					pub->conn[i] = pub->conn[--pub->n_conns];
					break;
				}
			}
			rte_spinlock_unlock(&pub->lock);
			/* A data connection that breaks breaks the peer: its requests already
			 * failed with the status the lcore saw. */
			kvl_ctl_peer_fail(c, ev.peer, ev.status, "data connection lost (%s)",
					  kvl_status_name(ev.status));
		}
	}
}

static void timers(struct kvl_control *c, uint64_t t)
{
	const struct kvl_control_conf *cc = &c->rt->cfg.control;

	for (uint32_t p = 0; p < KVL_MAX_PEERS_RT; p++) {
		struct kvl_peer_pub *pub = &c->pub[p];
		struct peer *pr = &c->peer[p];
		int st = pub->state;

		if (st == KVL_PEER_FREE)
			continue;
		if (st == KVL_PEER_DEAD) {
			/* A configured peer comes back once its connections are gone. */
			if (pr->auto_reconnect && t >= pr->retry_ns && pub->n_conns == 0) {
				char addr[KVL_CTRL_ADDR_LEN];

				snprintf(addr, sizeof(addr), "%s", pub->addr);
				kvl_ctl_peer_reset(c, p, addr, true);
				pr->auto_reconnect = true;
				kvl_ctl_peer_connect(c, p);
			}
			continue;
		}
		if (st < KVL_PEER_READY && st != KVL_PEER_EXCHANGE && t > pr->deadline_ns) {
			kvl_ctl_peer_fail(c, p, KVL_ERR_CONN_LOST, "%s did not finish within %u ms",
					  st == KVL_PEER_CONNECTING  ? "connecting"
					  : st == KVL_PEER_HANDSHAKE ? "the handshake"
								     : "binding data connections",
					  cc->connect_timeout_ms);
			continue;
		}
		if (st >= KVL_PEER_EXCHANGE) {
			if (t - pub->last_rx_ns > (uint64_t)cc->peer_timeout_ms * 1000000ull) {
				kvl_ctl_peer_fail(
					c, p, KVL_ERR_PEER_DEAD,
					"no heartbeat for %u ms (peer_timeout_ms): declared dead",
					cc->peer_timeout_ms);
				continue;
			}
			if (t >= pr->next_hb_ns) {
				struct kvl_ctrl_msg hb = { .type = KVL_CTRL_HEARTBEAT };

				hb.u.heartbeat.seq = ++pr->hb_seq;
				hb.u.heartbeat.sent_ns = t;
				kvl_ctl_send_msg(c, p, &hb);
				pr->next_hb_ns =
					t + (uint64_t)cc->heartbeat_interval_ms * 1000000ull;
			}
			if (pr->segs_version_sent !=
			    __atomic_load_n(&c->rt->segs.version, __ATOMIC_ACQUIRE)) {
				kvl_ctl_send_rkeys(c,
						   p); /* first: the peer joins them on SEGMENTS */
				kvl_ctl_send_segments(c, p);
			}
		}
	}
	for (unsigned i = 0; i < MAX_PENDING; i++) {
		struct pconn *pc = &c->pc[i];

		if (pc->state != PC_FREE && t > pc->deadline_ns) {
			bool ours = pc->state != PC_WAIT_BIND;

			kvl_ctl_pconn_close(pc);
			if (ours)
				kvl_ctl_peer_fail(c, pc->peer, KVL_ERR_CONN_LOST,
						  "data connection set-up timed out");
		}
	}
}

static void accept_control(struct kvl_control *c)
{
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	char addr[KVL_CTRL_ADDR_LEN];
	int fd = accept4(c->lfd, (struct sockaddr *)&ss, &sl, SOCK_NONBLOCK | SOCK_CLOEXEC);
	int p, one = 1;

	uint32_t oldest = UINT32_MAX;
	unsigned preauth = 0;

	if (fd < 0)
		return;
	/* Unauthenticated connections may hold only part of the peer table, so that anyone who
	 * can reach the port cannot lock real peers out: past the cap the oldest one goes. A real
	 * handshake takes a round trip or two; connections that sit silent are what is evicted. */
	for (uint32_t q = 0; q < KVL_MAX_PEERS_RT; q++) {
		if (c->pub[q].state != KVL_PEER_HANDSHAKE || c->pub[q].initiator)
			continue;
		preauth++;
		if (oldest == UINT32_MAX || c->peer[q].deadline_ns < c->peer[oldest].deadline_ns)
			oldest = q;
	}
	if (preauth >= MAX_PREAUTH) {
		__atomic_fetch_add(&c->preauth_evicted, 1, __ATOMIC_RELAXED);
		kvl_ctl_peer_fail(c, oldest, KVL_ERR_CONN_LOST,
				  "evicted: too many unauthenticated connections (%d)",
				  MAX_PREAUTH);
	}
	kvl_ctl_format_addr(&ss, addr, sizeof(addr));
	p = kvl_ctl_peer_alloc(c, addr, false);
	if (p < 0) {
		close(fd);
		return;
	}
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	c->peer[p].fd = fd;
	if (c->tls) {
		c->peer[p].ssl = kvl_ctl_tls_new(c, fd, true, &c->peer[p].tls_first);
		c->peer[p].tls_hs = true;
		c->peer[p].tls_events = POLLIN; /* the client speaks first */
	}
	c->peer[p].deadline_ns =
		kvl_now_ns() + (uint64_t)c->rt->cfg.control.connect_timeout_ms * 1000000ull;
	kvl_ctl_set_state(c, (uint32_t)p, KVL_PEER_HANDSHAKE);
	if (c->tls && c->peer[p].ssl == NULL)
		kvl_ctl_peer_fail(c, (uint32_t)p, KVL_ERR_CONN_LOST, "cannot set up TLS");
}

/*
 * Before taking another data connection: accepted ones that have not bound may hold only
 * MAX_DATA_PREAUTH of the pending slots (the rest is for our own outgoing binds). Past that
 * the one that has sent nothing for longest goes, else the oldest. A real client sends its
 * bind one round trip after the challenge, so a flood must open MAX_DATA_PREAUTH connections
 * within that round trip to push it out.
 */
static void evict_data_preauth(struct kvl_control *c)
{
	struct pconn *victim = NULL;
	unsigned n = 0;

	for (unsigned i = 0; i < MAX_PENDING; i++) {
		struct pconn *pc = &c->pc[i];

		if (pc->state != PC_WAIT_BIND)
			continue;
		n++;
		if (victim == NULL || (pc->rx_len == 0 && victim->rx_len != 0) ||
		    ((pc->rx_len == 0) == (victim->rx_len == 0) &&
		     pc->accepted_ns < victim->accepted_ns))
			victim = pc;
	}
	if (n < MAX_DATA_PREAUTH)
		return;
	__atomic_fetch_add(&c->data_preauth_evicted, 1, __ATOMIC_RELAXED);
	kvl_ctl_pconn_close(victim);
}

static void accept_data(struct kvl_control *c, unsigned nic)
{
	int fd = accept4(c->dfd[nic], NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC), one = 1;
	struct pconn *pc;

	if (fd < 0)
		return;
	evict_data_preauth(c);
	pc = kvl_ctl_pconn_alloc(c);
	if (pc == NULL) {
		close(fd);
		return;
	}
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	pc->fd = fd;
	pc->nic = nic;
	pc->peer = UINT32_MAX;
	pc->accepted_ns = kvl_now_ns();
	pc->deadline_ns = pc->accepted_ns + BIND_TIMEOUT_NS;
	pc->state = PC_WAIT_BIND;
	if (c->tls) {
		/* The challenge goes over TLS, once its handshake is done (bind.c). */
		kvl_tcp_tls_sockopts(fd);
		pc->ssl = kvl_ctl_tls_new(c, fd, true, &pc->tls_first);
		pc->tls_hs = true;
		pc->tls_events = POLLIN;
		if (pc->ssl == NULL)
			kvl_ctl_pconn_close(pc);
		return;
	}
	/* This connection's own nonce: a bind proves the session on this connection only. */
	if (kvl_ctl_pconn_challenge(pc) < 0)
		kvl_ctl_pconn_close(pc);
}

enum { FD_EVENT, FD_LISTEN, FD_DATA, FD_PEER, FD_PENDING };

static void *control_main(void *arg)
{
	struct kvl_control *c = arg;
	struct pollfd pfd[2 + KVL_MAX_NICS + KVL_MAX_PEERS_RT + MAX_PENDING];
	int kind[sizeof(pfd) / sizeof(pfd[0])], who[sizeof(pfd) / sizeof(pfd[0])];

	while (!c->stop) {
		unsigned n = 0;
		int rc;

		pfd[n] = (struct pollfd){ .fd = c->efd, .events = POLLIN };
		kind[n++] = FD_EVENT;
		if (c->lfd >= 0) {
			pfd[n] = (struct pollfd){ .fd = c->lfd, .events = POLLIN };
			kind[n++] = FD_LISTEN;
		}
		for (unsigned i = 0; i < c->rt->cfg.n_nics; i++) {
			if (c->dfd[i] < 0)
				continue;
			pfd[n] = (struct pollfd){ .fd = c->dfd[i], .events = POLLIN };
			who[n] = (int)i;
			kind[n++] = FD_DATA;
		}
		for (uint32_t p = 0; p < KVL_MAX_PEERS_RT; p++) {
			struct peer *pr = &c->peer[p];

			if (pr->fd < 0 || c->pub[p].state == KVL_PEER_FREE)
				continue;
			pfd[n] = (struct pollfd){ .fd = pr->fd, .events = POLLIN };
			if (pr->tls_hs)
				pfd[n].events = pr->tls_events; /* what TLS waits for, only */
			else if (pr->tx_len || c->pub[p].state == KVL_PEER_CONNECTING)
				pfd[n].events |= POLLOUT;
			who[n] = (int)p;
			kind[n++] = FD_PEER;
		}
		for (unsigned i = 0; i < MAX_PENDING; i++) {
			if (c->pc[i].state == PC_FREE)
				continue;
			pfd[n] = (struct pollfd){ .fd = c->pc[i].fd,
						  .events = kvl_ctl_pconn_events(&c->pc[i]) };
			who[n] = (int)i;
			kind[n++] = FD_PENDING;
		}
		rc = poll(pfd, n, 10);
		for (unsigned i = 0; rc > 0 && i < n; i++) {
			short re = pfd[i].revents;

			if (re == 0)
				continue;
			switch (kind[i]) {
			case FD_EVENT: {
				uint64_t v;

				if (read(c->efd, &v, sizeof(v)) < 0) {
					/* nothing to clear */
				}
				break;
			}
			case FD_LISTEN:
				accept_control(c);
				break;
			case FD_DATA:
				accept_data(c, (unsigned)who[i]);
				break;
			case FD_PEER: {
				uint32_t p = (uint32_t)who[i];
				struct peer *pr = &c->peer[p];

				if (pr->tls_hs) {
					peer_tls(c, p);
					break;
				}
				if (c->pub[p].state == KVL_PEER_CONNECTING) {
					int soerr = 0;
					socklen_t sl = sizeof(soerr);

					getsockopt(pr->fd, SOL_SOCKET, SO_ERROR, &soerr, &sl);
					if (soerr) {
						kvl_ctl_peer_fail(c, p, KVL_ERR_CONN_LOST,
								  "connect: %s", strerror(soerr));
					} else if ((re & POLLOUT) && c->tls) {
						pr->ssl = kvl_ctl_tls_new(c, pr->fd, false,
									  &pr->tls_first);
						if (pr->ssl == NULL) {
							kvl_ctl_peer_fail(c, p, KVL_ERR_CONN_LOST,
									  "cannot set up TLS");
							break;
						}
						pr->tls_hs = true;
						peer_tls(c, p); /* the ClientHello */
						break;
					} else if (re & POLLOUT) {
						kvl_ctl_client_hello(c, p);
					}
				}
				if (pr->fd >= 0 && (re & (POLLIN | POLLHUP | POLLERR)))
					peer_read(c, p);
				if (pr->fd >= 0 && pr->tx_len && kvl_ctl_flush(pr) < 0)
					kvl_ctl_peer_fail(c, p, KVL_ERR_CONN_LOST,
							  "control connection: send failed");
				break;
			}
			case FD_PENDING:
				if (c->pc[who[i]].state != PC_FREE)
					kvl_ctl_pconn_event(c, &c->pc[who[i]], re);
				break;
			}
		}
		take_connect_waits(c);
		take_gone(c);
		kvl_ctl_take_doctor(c);
		take_lcore_events(c);
		kvl_ctl_lcmd_drain(c, kvl_now_ns());
		timers(c, kvl_now_ns());
		/* Flush what handling queued, without waiting for POLLOUT. */
		for (uint32_t p = 0; p < KVL_MAX_PEERS_RT; p++)
			if (c->peer[p].fd >= 0 && c->peer[p].tx_len &&
			    c->pub[p].state != KVL_PEER_CONNECTING &&
			    kvl_ctl_flush(&c->peer[p]) < 0)
				kvl_ctl_peer_fail(c, p, KVL_ERR_CONN_LOST,
						  "control connection: send failed");
		if (c->rt->gpu.open)
			kvl_staging_sample(c->rt);
	}
	return NULL;
}

static int open_data_listeners(struct kvl_control *c, char *err, size_t errlen)
{
	struct kvl_runtime *rt = c->rt;

	for (unsigned n = 0; n < KVL_MAX_NICS; n++)
		c->dfd[n] = -1;
	for (unsigned n = 0; n < rt->cfg.n_nics; n++) {
		const struct kvl_nic_conf *nc = &rt->cfg.nics[n];
		struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons(nc->data_port) };
		struct kvl_endpoint *e;
		int fd;

		if (kvl_ctl_is_rdma(rt, n)) {
			e = &c->eps[c->n_eps++];
			snprintf(e->nic, sizeof(e->nic), "%s", nc->label);
			e->transport = KVL_TRANSPORT_VERBS; /* its QPs are set up over QP_INFO */
			continue;
		}
		if (rt->nic[n].info.transport != KVL_TRANSPORT_TCP)
			continue;
		if (kvl_ctl_netdev_ipv4(nc->device, &sa.sin_addr) < 0) {
			snprintf(err, errlen,
				 "nic.%s (%s): the netdev has no IPv4 address; the tcp transport "
				 "listens for data there",
				 nc->label, nc->device);
			return -EADDRNOTAVAIL;
		}
		e = &c->eps[c->n_eps];
		fd = kvl_ctl_listen_on((struct sockaddr_storage *)&sa, sizeof(sa), e->addr,
				       sizeof(e->addr));
		if (fd < 0) {
			snprintf(err, errlen, "nic.%s (%s): cannot listen for data on port %u: %s",
				 nc->label, nc->device, nc->data_port, strerror(-fd));
			return fd;
		}
		c->dfd[n] = fd;
		snprintf(e->nic, sizeof(e->nic), "%s", nc->label);
		e->transport = KVL_TRANSPORT_TCP;
		c->n_eps++;
	}
	return 0;
}

static void control_free(struct kvl_control *c)
{
	if (c->lfd >= 0)
		close(c->lfd);
	for (unsigned n = 0; n < KVL_MAX_NICS; n++)
		if (c->dfd[n] >= 0)
			close(c->dfd[n]);
	for (uint32_t p = 0; p < KVL_MAX_PEERS_RT; p++) {
		kvl_ctl_tls_close(c->peer[p].ssl);
		if (c->peer[p].fd >= 0)
			close(c->peer[p].fd);
		free(c->peer[p].tx);
	}
	for (unsigned i = 0; i < MAX_PENDING; i++)
		if (c->pc[i].state != PC_FREE)
			kvl_ctl_pconn_close(&c->pc[i]);
	kvl_ctl_tls_free(c);
	if (c->efd >= 0)
		close(c->efd);
	memset(&c->secret, 0, sizeof(c->secret));
	pthread_mutex_destroy(&c->lock);
	pthread_cond_destroy(&c->cond);
	free(c);
}

/* Fault injection for tests: segments named in @env are advertised with @what. */
static void fault(char *list, size_t cap, const char *env, const char *what)
{
	const char *v = getenv(env);

	if (v == NULL || v[0] == '\0')
		return;
	snprintf(list, cap, "%s", v);
	KVL_LOG(WARNING,
		"test fault injection: segment(s) \"%s\" are advertised to peers with %s (%s); "
		"never set it outside tests",
		list, what, env);
}

int kvl_control_start(struct kvl_runtime *rt, char *err, size_t errlen)
{
	const struct kvl_control_conf *cc = &rt->cfg.control;
	struct sockaddr_storage ss;
	socklen_t sl;
	struct kvl_control *c;
	int rc;

	if (cc->secret_file[0] == '\0')
		return 0; /* no secret, no control path: a runtime on its own */
	c = calloc(1, sizeof(*c));
	if (c == NULL)
		return -ENOMEM;
	c->rt = rt;
	c->lfd = -1;
	for (unsigned n = 0; n < KVL_MAX_NICS; n++)
		c->dfd[n] = -1;
	c->pub = rt->peers.pub;
	for (uint32_t p = 0; p < KVL_MAX_PEERS_RT; p++) {
		c->peer[p].fd = -1;
		rte_spinlock_init(&c->pub[p].lock);
	}
	pthread_mutex_init(&c->lock, NULL);
	pthread_cond_init(&c->cond, NULL);
	c->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	rc = c->efd < 0 ? -errno : 0;
	if (rc == 0)
		rc = kvl_secret_load(cc->secret_file, &c->secret, cc->secret_group_readable, err,
				     errlen);
	if (rc == 0)
		rc = kvl_ctl_tls_init(c, err, errlen);
	kvl_ctl_ipc_init(c); /* host id, incarnation (issue 20) */
	fault(c->bad_rkey, sizeof(c->bad_rkey), "KVLANE_TEST_BAD_RKEY", "a wrong rkey");
	fault(c->bad_len, sizeof(c->bad_len), "KVLANE_TEST_BAD_LEN", "twice their length");
	if (rc == 0)
		rc = kvl_ctl_resolve(cc->listen, &ss, &sl, err, errlen);
	if (rc == 0) {
		c->lfd = kvl_ctl_listen_on(&ss, sl, c->listen_addr, sizeof(c->listen_addr));
		if (c->lfd < 0) {
			rc = c->lfd;
			snprintf(err, errlen, "control.listen = %s: cannot listen: %s", cc->listen,
				 strerror(-rc));
		}
	}
	if (rc == 0)
		rc = open_data_listeners(c, err, errlen);
	if (rc == 0) {
		rt->ctl = c;
		__atomic_store_n(&rt->peers.on, true, __ATOMIC_RELEASE);
		for (uint32_t i = 0; i < cc->n_peers; i++) {
			int p = kvl_ctl_peer_alloc(c, cc->peers[i], true);

			if (p >= 0) {
				c->peer[p].auto_reconnect = true;
				kvl_ctl_peer_connect(c, (uint32_t)p);
			}
		}
		rc = rte_ctrl_thread_create(&c->thread, "kvl-ctrl", NULL, control_main, c);
		if (rc != 0) {
			snprintf(err, errlen, "cannot start the control thread: %s", strerror(rc));
			rc = -rc;
			__atomic_store_n(&rt->peers.on, false, __ATOMIC_RELEASE);
			rt->ctl = NULL;
		}
	}
	if (rc < 0) {
		control_free(c);
		return rc;
	}
	c->running = true;
	return 0;
}

void kvl_control_stop(struct kvl_runtime *rt)
{
	struct kvl_control *c = rt->ctl;

	if (c == NULL)
		return;
	c->stop = true;
	wake(c);
	pthread_join(c->thread, NULL);
	/* Say goodbye, and cancel what is in flight (the lcores still run). */
	for (uint32_t p = 0; p < KVL_MAX_PEERS_RT; p++)
		kvl_ctl_peer_fail(c, p, KVL_ERR_CANCELED, "this runtime is stopping");
	/* Wake API callers still waiting. */
	pthread_mutex_lock(&c->lock);
	for (unsigned i = 0; i < MAX_CONNECT_WAITS; i++)
		if (c->req[i] && !c->req[i]->done) {
			c->req[i]->done = true;
			c->req[i]->result = -ECANCELED;
			snprintf(c->req[i]->msg, sizeof(c->req[i]->msg), "the runtime stopped");
		}
	kvl_ctl_doctor_cancel(c);
	pthread_cond_broadcast(&c->cond);
	pthread_mutex_unlock(&c->lock);
	__atomic_store_n(&rt->peers.on, false, __ATOMIC_RELEASE);
	rt->ctl = NULL;
	control_free(c);
}

int kvl_control_connect(struct kvl_runtime *rt, const char *addr, unsigned timeout_ms,
			uint32_t *peer, char *err, size_t errlen)
{
	struct kvl_control *c = rt->ctl;
	struct connect_wait r;
	struct timespec ts;
	unsigned slot = MAX_CONNECT_WAITS;
	int rc;

	if (c == NULL) {
		snprintf(err, errlen, "the control path is off: set [control] secret_file");
		return -ENOTSUP;
	}
	memset(&r, 0, sizeof(r));
	snprintf(r.addr, sizeof(r.addr), "%s", addr);
	r.deadline_ns = kvl_now_ns() + (uint64_t)timeout_ms * 1000000ull;
	pthread_mutex_lock(&c->lock);
	for (unsigned i = 0; i < MAX_CONNECT_WAITS; i++)
		if (c->req[i] == NULL) {
			c->req[i] = &r;
			slot = i;
			break;
		}
	if (slot == MAX_CONNECT_WAITS) {
		pthread_mutex_unlock(&c->lock);
		snprintf(err, errlen, "too many connects in progress");
		return -EBUSY;
	}
	wake(c);
	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += (timeout_ms + 1000) / 1000 + 1; /* the thread enforces the real deadline */
	while (!r.done) {
		if (pthread_cond_timedwait(&c->cond, &c->lock, &ts) == ETIMEDOUT && !r.done) {
			r.result = -ETIMEDOUT;
			snprintf(r.msg, sizeof(r.msg), "no answer from the control thread");
			break;
		}
	}
	/* Detach from the peer before our stack frame goes. */
	for (uint32_t p = 0; p < KVL_MAX_PEERS_RT; p++)
		if (c->peer[p].waiter == &r)
			c->peer[p].waiter = NULL;
	c->req[slot] = NULL;
	pthread_mutex_unlock(&c->lock);
	rc = r.result;
	if (rc == 0)
		*peer = r.peer;
	else
		snprintf(err, errlen, "%s: %s", addr, r.msg[0] ? r.msg : strerror(-rc));
	return rc;
}

int kvl_control_peer_gone(struct kvl_runtime *rt, const char *addr, const char *name,
			  const char *why)
{
	struct kvl_control *c = rt->ctl;
	int rc = 0;

	if (c == NULL)
		return -ENOTSUP;
	pthread_mutex_lock(&c->lock);
	if (c->n_gone == MAX_GONE) {
		rc = -ENOBUFS;
	} else {
		struct gone *g = &c->gone[c->n_gone++];

		snprintf(g->addr, sizeof(g->addr), "%s", addr);
		snprintf(g->name, sizeof(g->name), "%s", name);
		snprintf(g->why, sizeof(g->why), "%s", why);
	}
	pthread_mutex_unlock(&c->lock);
	wake(c);
	return rc;
}

void kvl_control_segments_changed(struct kvl_runtime *rt)
{
	if (rt->ctl)
		wake(rt->ctl);
}

bool kvl_control_enabled(const struct kvl_runtime *rt)
{
	return rt->ctl != NULL;
}

const char *kvl_control_listen_addr(const struct kvl_runtime *rt)
{
	return rt->ctl ? rt->ctl->listen_addr : "";
}

void kvl_control_req_cancels(const struct kvl_runtime *rt, uint64_t *tx, uint64_t *rx)
{
	*tx = rt->ctl ? __atomic_load_n(&rt->ctl->req_cancels_tx, __ATOMIC_RELAXED) : 0;
	*rx = rt->ctl ? __atomic_load_n(&rt->ctl->req_cancels_rx, __ATOMIC_RELAXED) : 0;
}

uint64_t kvl_control_auth_failures(const struct kvl_runtime *rt)
{
	return rt->ctl ? __atomic_load_n(&rt->ctl->auth_failures, __ATOMIC_RELAXED) : 0;
}

uint64_t kvl_control_preauth_evicted(const struct kvl_runtime *rt)
{
	return rt->ctl ? __atomic_load_n(&rt->ctl->preauth_evicted, __ATOMIC_RELAXED) : 0;
}

uint64_t kvl_control_data_preauth_evicted(const struct kvl_runtime *rt)
{
	return rt->ctl ? __atomic_load_n(&rt->ctl->data_preauth_evicted, __ATOMIC_RELAXED) : 0;
}

uint64_t kvl_control_tls_failures(const struct kvl_runtime *rt)
{
	return rt->ctl ? __atomic_load_n(&rt->ctl->tls_failures, __ATOMIC_RELAXED) : 0;
}
