/* SPDX-License-Identifier: BSD-3-Clause */
/* Data connections: lcore slots, the TCP DATA_BIND each way, the hand-over to a NIC lcore. */
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <rte_ring_elem.h>

#include "ctl.h"
#include "kvl_clock.h"
#include "tcp_vram.h"

static uint32_t slot_take(struct kvl_control *c, unsigned nic)
{
	for (uint32_t s = 0; s < KVL_SLOTS_PER_LCORE; s++) {
		if (!c->slot[nic][s].used) {
			c->slot[nic][s].used = true;
			c->slot[nic][s].gen++;
			return s;
		}
	}
	return UINT32_MAX;
}

int kvl_ctl_lcmd(struct kvl_control *c, unsigned nic, const struct kvl_lcmd *cmd)
{
	int rc = kvl_lcmd_push(c->rt->nic[nic].io->cmd, &c->lcmd[nic], cmd, kvl_now_ns());

	if (rc == 0)
		kvl_nic_io_kick(c->rt->nic[nic].io);
	return rc;
}

void kvl_ctl_lcmd_drain(struct kvl_control *c, uint64_t now_ns)
{
	for (unsigned n = 0; n < c->rt->cfg.n_nics; n++) {
		struct kvl_lcmd_backlog *b = &c->lcmd[n];

		if (c->rt->nic[n].io == NULL)
			continue;
		/* FAIL_PEERs the backlog refused: a dead peer's connections must go. */
		for (uint32_t p = 0; c->fail_owed[n] && p < KVL_MAX_PEERS_RT; p++) {
			struct kvl_lcmd cmd = { .type = KVL_LCMD_FAIL_PEER,
						.peer = p,
						.status = c->pub[p].fail_status };

			if ((c->fail_owed[n] & (1ull << p)) && kvl_ctl_lcmd(c, n, &cmd) == 0)
				c->fail_owed[n] &= ~(1ull << p);
		}
		if (b->n == 0)
			continue;
		if (kvl_lcmd_drain(c->rt->nic[n].io->cmd, b) == 0) {
			kvl_nic_io_kick(c->rt->nic[n].io);
			continue;
		}
		kvl_nic_io_kick(c->rt->nic[n].io);
		if (!b->warned && now_ns - b->since_ns > 1000000000ull) {
			b->warned = true;
			KVL_LOG(WARNING,
				"nic.%s: its lcore has taken no command for %llu ms (%u waiting, "
				"its "
				"ring full): new data connections to it are refused until it does",
				c->rt->cfg.nics[n].label,
				(unsigned long long)((now_ns - b->since_ns) / 1000000), b->n);
		}
	}
}

/* A ready connection (any transport) goes to its NIC's lcore and into the peer's routing
 * list; a client peer is READY once all it opened are there. On failure @x is freed. */
int kvl_ctl_give_to_lcore(struct kvl_control *c, uint32_t p, unsigned nic, struct kvl_xconn x)
{
	struct kvl_peer_pub *pub = &c->pub[p];
	struct kvl_lcmd cmd;
	uint32_t slot = pub->n_conns < KVL_PEER_MAX_CONNS ? slot_take(c, nic) : UINT32_MAX;

	if (slot == UINT32_MAX) {
		x.ops->free(x.c);
		kvl_ctl_peer_fail(c, p, KVL_ERR_CONN_LOST,
				  "no room for another data connection on nic.%s",
				  c->rt->cfg.nics[nic].label);
		return -ENOSPC;
	}
	cmd = (struct kvl_lcmd){ .type = KVL_LCMD_ADD_CONN,
				 .peer = p,
				 .slot = slot,
				 .gen = c->slot[nic][slot].gen,
				 .x = x };
	if (kvl_ctl_lcmd(c, nic, &cmd) < 0) {
		c->slot[nic][slot].used = false;
		x.ops->free(x.c);
		kvl_ctl_peer_fail(
			c, p, KVL_ERR_CONN_LOST,
			"nic.%s: its lcore is not taking commands (ring and backlog full)",
			c->rt->cfg.nics[nic].label);
		return -ENOBUFS;
	}
	rte_spinlock_lock(&pub->lock);
	pub->conn[pub->n_conns++] = (struct kvl_peer_conn){ .nic = (uint16_t)nic,
							    .slot = (uint16_t)slot,
							    .gen = cmd.gen };
	rte_spinlock_unlock(&pub->lock);
	if (pub->initiator) {
		c->peer[p].bound_conns++;
		if (c->peer[p].bound_conns == c->peer[p].want_conns)
			kvl_ctl_set_state(c, p, KVL_PEER_READY);
	}
	return (int)slot;
}

/* A bound TCP data connection: its fd now belongs to the transport, then the lcore. */
static void hand_over(struct kvl_control *c, struct pconn *pc)
{
	struct kvl_runtime *rt = c->rt;
	struct kvl_tcp_conn *conn;
	char why[256];

	if (c->pub[pc->peer].gen != pc->peer_gen) {
		kvl_ctl_pconn_close(pc);
		return;
	}
	conn = pc->ssl ? kvl_tcp_conn_new_tls(pc->fd, pc->ssl, &rt->segs.tab,
					      rt->cfg.nics[pc->nic].queue_depth)
		       : kvl_tcp_conn_new(pc->fd, &rt->segs.tab, rt->cfg.nics[pc->nic].queue_depth);
	if (conn == NULL) {
		kvl_ctl_pconn_close(pc);
		kvl_ctl_peer_fail(c, pc->peer, KVL_ERR_CONN_LOST,
				  "nic.%s: cannot set up a connection: %s",
				  rt->cfg.nics[pc->nic].label, strerror(errno));
		return;
	}
	/* READs into VRAM: its bounce buffers and copier (runtime/tcp_vram.c), where there is
	 * a GPU and the pool to carve them from */
	if (kvl_tcp_vram_attach(rt, pc->nic, conn, why, sizeof(why)) < 0) {
		kvl_tcp_conn_free(conn); /* the fd and the SSL were the connection's */
		pc->ssl = NULL;
		pc->state = PC_FREE;
		kvl_ctl_peer_fail(c, pc->peer, KVL_ERR_GPU_MEMORY, "%s", why);
		return;
	}
	if (pc->ssl && !c->ktls_logged) {
		c->ktls_logged = true;
		KVL_LOG(INFO,
			"tcp data connections over TLS 1.3 (%s); kernel TLS offload: send %s, "
			"receive %s",
			SSL_get_cipher_name(pc->ssl),
			BIO_get_ktls_send(SSL_get_wbio(pc->ssl)) ? "yes" : "no",
			BIO_get_ktls_recv(SSL_get_rbio(pc->ssl)) ? "yes" : "no");
	}
	pc->ssl = NULL; /* the transport's now, with the fd */
	pc->state = PC_FREE;
	kvl_ctl_give_to_lcore(c, pc->peer, pc->nic,
			      (struct kvl_xconn){ .ops = &kvl_xport_tcp, .c = conn });
}

struct pconn *kvl_ctl_pconn_alloc(struct kvl_control *c)
{
	for (unsigned i = 0; i < MAX_PENDING; i++)
		if (c->pc[i].state == PC_FREE) {
			memset(&c->pc[i], 0, sizeof(c->pc[i]));
			return &c->pc[i];
		}
	return NULL;
}

_Static_assert(KVL_PEER_MAX_CONNS <= 32, "bind_mask has a bit per data connection of a peer");

void kvl_ctl_pconn_close(struct pconn *pc)
{
	kvl_ctl_tls_close(pc->ssl);
	pc->ssl = NULL;
	close(pc->fd);
	pc->state = PC_FREE;
}

short kvl_ctl_pconn_events(const struct pconn *pc)
{
	if (pc->state == PC_CONNECTING)
		return POLLOUT;
	return pc->tls_hs ? pc->tls_events : POLLIN;
}

/* Server: this connection's own nonce, so that a bind proves the session on it alone. */
int kvl_ctl_pconn_challenge(struct pconn *pc)
{
	struct kvl_ctrl_msg m;

	memset(&m, 0, sizeof(m));
	m.type = KVL_CTRL_DATA_CHALLENGE;
	if (kvl_random(pc->nonce, KVL_NONCE_LEN) < 0)
		return -EIO;
	memcpy(m.u.data_challenge.nonce, pc->nonce, KVL_NONCE_LEN);
	return kvl_ctl_send_small_tls(pc->fd, pc->ssl, &m);
}

/*
 * Read one frame of a data connection, exactly: the header, then the payload its length names,
 * never a byte more (data frames may follow right behind a bind) and never with MSG_PEEK (a
 * peek under level-triggered poll() returns at once while a partial frame sits in the socket:
 * the control thread would spin on one stray byte). 1 with @m decoded, 0 when more bytes are
 * needed, negative when the connection is closed or carries no valid frame.
 */
static int pconn_read_frame(struct pconn *pc, struct kvl_ctrl_msg *m)
{
	size_t want, used;
	ssize_t n;
	int rc;

again:
	want = KVL_CTRL_HDR_LEN;
	if (pc->rx_len >= KVL_CTRL_HDR_LEN) {
		uint32_t plen = (uint32_t)pc->rx[8] | (uint32_t)pc->rx[9] << 8 |
				(uint32_t)pc->rx[10] << 16 | (uint32_t)pc->rx[11] << 24;

		if (plen > sizeof(pc->rx) - KVL_CTRL_HDR_LEN)
			return -EMSGSIZE; /* no frame of a data port's set-up is this long */
		want = KVL_CTRL_HDR_LEN + plen;
	}
	n = kvl_ctl_recv(pc->fd, pc->ssl, pc->rx + pc->rx_len, want - pc->rx_len);
	if (n == 0)
		return -ECONNRESET;
	if (n < 0)
		return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR ? 0 : -errno;
	pc->rx_len += (size_t)n;
	rc = kvl_ctrl_decode(pc->rx, pc->rx_len, m, &used);
	if (rc < 0)
		return rc;
	/* The header checked out; the rest comes on a later POLLIN, or is inside TLS already
	 * (a record decrypted whole: poll() would not say so). */
	if (rc == 0 && kvl_ctl_tls_pending(pc->ssl))
		goto again;
	if (rc == 0)
		return 0;
	pc->rx_len = 0;
	return 1;
}

/* Client: the server's challenge arrived; prove the session on this connection. */
static void send_bind(struct kvl_control *c, struct pconn *pc)
{
	struct peer *pr = &c->peer[pc->peer];
	struct kvl_ctrl_msg m;

	memset(&m, 0, sizeof(m));
	m.type = KVL_CTRL_DATA_BIND;
	m.u.data_bind.session_id = pr->session_id;
	m.u.data_bind.conn_index = pc->conn_index;
	m.u.data_bind.conn_count = pr->want_conns;
	kvl_auth_data_mac(&c->secret, pr->hello.u.hello.nonce, pr->challenge.u.challenge.nonce,
			  pc->nonce, m.u.data_bind.session_id, pc->conn_index,
			  m.u.data_bind.conn_count, m.u.data_bind.mac);
	if (kvl_ctl_send_small_tls(pc->fd, pc->ssl, &m) < 0) {
		kvl_ctl_peer_fail(c, pc->peer, KVL_ERR_CONN_LOST, "data connection: cannot bind");
		return;
	}
	pc->state = PC_BIND_SENT;
}

/*
 * Server: whether @b binds a connection of a live session: the proof over this connection's
 * nonce verifies, the index is below the count the client announced (the same count in every
 * bind of the session) and not bound yet. The peer's index, or -1 with *@reason set.
 */
static int check_bind(struct kvl_control *c, struct pconn *pc, const struct kvl_ctrl_msg *b,
		      int *reason)
{
	/* An unknown session and a wrong proof for a live one get the same answer: a stranger
	 * learns nothing about which sessions live from the data port. */
	*reason = KVL_AUTH_BAD_MAC;
	for (uint32_t p = 0; p < KVL_MAX_PEERS_RT; p++) {
		struct peer *pr = &c->peer[p];
		uint8_t mac[KVL_MAC_LEN];
		int st = c->pub[p].state;
		uint32_t idx = b->u.data_bind.conn_index, cnt = b->u.data_bind.conn_count;

		if (c->pub[p].initiator || pr->session_id != b->u.data_bind.session_id ||
		    (st != KVL_PEER_EXCHANGE && st != KVL_PEER_READY))
			continue;
		kvl_auth_data_mac(&c->secret, pr->hello.u.hello.nonce,
				  pr->challenge.u.challenge.nonce, pc->nonce, pr->session_id, idx,
				  cnt, mac);
		if (!kvl_auth_equal(mac, b->u.data_bind.mac))
			return -1;
		/* The proof is the client's own (the secret and this connection's nonce): what
		 * it claims is checked against what it claimed before. */
		if (cnt == 0 || cnt > KVL_PEER_MAX_CONNS || idx >= cnt ||
		    (pr->bind_count != 0 && cnt != pr->bind_count) ||
		    (pr->bind_mask & (1u << idx))) {
			*reason = KVL_AUTH_BAD_BIND;
			return -1;
		}
		pr->bind_count = cnt;
		pr->bind_mask |= 1u << idx;
		return (int)p;
	}
	return -1;
}

void kvl_ctl_pconn_event(struct kvl_control *c, struct pconn *pc, short revents)
{
	struct kvl_ctrl_msg m;
	int rc, reason, p, soerr = 0;
	socklen_t sl = sizeof(soerr);

	if (pc->state == PC_CONNECTING) {
		if (!(revents & (POLLOUT | POLLERR | POLLHUP)))
			return;
		getsockopt(pc->fd, SOL_SOCKET, SO_ERROR, &soerr, &sl);
		if (soerr) {
			kvl_ctl_peer_fail(c, pc->peer, KVL_ERR_CONN_LOST, "data connection: %s",
					  strerror(soerr));
			return;
		}
		pc->state = PC_WAIT_CHALLENGE;
		if (c->tls == NULL)
			return;
		kvl_tcp_tls_sockopts(pc->fd);
		pc->ssl = kvl_ctl_tls_new(c, pc->fd, false, &pc->tls_first);
		if (pc->ssl == NULL) {
			kvl_ctl_peer_fail(c, pc->peer, KVL_ERR_CONN_LOST,
					  "data connection: cannot set up TLS");
			return;
		}
		pc->tls_hs = true; /* the ClientHello goes now */
	}
	if (pc->tls_hs) {
		char err[KVL_CTRL_TEXT_LEN];
		bool client = pc->state != PC_WAIT_BIND;

		rc = kvl_ctl_tls_step(pc->ssl, &pc->tls_first, &pc->tls_events, err, sizeof(err));
		if (rc == 0)
			return;
		if (rc < 0) {
			kvl_ctl_pconn_close(pc);
			__atomic_fetch_add(&c->tls_failures, 1, __ATOMIC_RELAXED);
			if (client)
				kvl_ctl_peer_fail(c, pc->peer, KVL_ERR_CONN_LOST,
						  "data connection: %s", err);
			return; /* a stranger on our data port: like a bad frame, closed */
		}
		pc->tls_hs = false;
		if (!client && kvl_ctl_pconn_challenge(pc) < 0) {
			kvl_ctl_pconn_close(pc);
			return;
		}
		if (!kvl_ctl_tls_pending(pc->ssl))
			return;
		revents = POLLIN;
	}
	if (!(revents & (POLLIN | POLLERR | POLLHUP)))
		return;
	rc = pconn_read_frame(pc, &m);
	if (rc == 0)
		return;
	if (rc < 0) {
		bool client = pc->state != PC_WAIT_BIND;

		kvl_ctl_pconn_close(pc);
		if (client)
			kvl_ctl_peer_fail(c, pc->peer, KVL_ERR_PROTOCOL,
					  "data connection: no valid answer to the bind (%s)",
					  rc == -ECONNRESET ? "closed" : "bad frame");
		return;
	}
	switch (pc->state) {
	case PC_WAIT_CHALLENGE:
		if (m.type != KVL_CTRL_DATA_CHALLENGE) {
			kvl_ctl_pconn_close(pc);
			kvl_ctl_peer_fail(c, pc->peer, KVL_ERR_PROTOCOL,
					  "data connection: %s instead of DATA_CHALLENGE (a peer "
					  "of protocol version %d or older?)",
					  kvl_ctrl_type_name(m.type), KVL_CTRL_VERSION - 1);
			return;
		}
		memcpy(pc->nonce, m.u.data_challenge.nonce, KVL_NONCE_LEN);
		send_bind(c, pc);
		return;
	case PC_BIND_SENT:
		if (m.type != KVL_CTRL_DATA_BIND_OK) {
			kvl_ctl_pconn_close(pc);
			kvl_ctl_peer_fail(c, pc->peer, KVL_ERR_CONN_LOST,
					  "data connection refused (%s%s%s)",
					  kvl_ctrl_type_name(m.type),
					  m.type == KVL_CTRL_AUTH_FAIL ? ": " : "",
					  m.type == KVL_CTRL_AUTH_FAIL
						  ? kvl_auth_fail_name(m.u.auth_fail.reason)
						  : "");
			return;
		}
		hand_over(c, pc);
		return;
	default: /* PC_WAIT_BIND */
		break;
	}
	p = m.type == KVL_CTRL_DATA_BIND ? check_bind(c, pc, &m, &reason)
					 : (reason = KVL_AUTH_BAD_MAC, -1);
	if (p >= 0) {
		memset(&m, 0, sizeof(m));
		m.type = KVL_CTRL_DATA_BIND_OK;
		if (kvl_ctl_send_small_tls(pc->fd, pc->ssl, &m) < 0) {
			kvl_ctl_pconn_close(pc);
			return;
		}
		pc->peer = (uint32_t)p;
		pc->peer_gen = c->pub[p].gen;
		hand_over(c, pc);
		return;
	}
	__atomic_fetch_add(&c->auth_failures, 1, __ATOMIC_RELAXED);
	memset(&m, 0, sizeof(m));
	m.type = KVL_CTRL_AUTH_FAIL;
	m.u.auth_fail.reason = (uint16_t)reason;
	kvl_ctl_send_small_tls(pc->fd, pc->ssl, &m);
	kvl_ctl_pconn_close(pc);
}
