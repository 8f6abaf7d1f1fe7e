/* SPDX-License-Identifier: BSD-3-Clause */
/* Data connections: lcore slots, the TCP DATA_BIND each way, the hand-over to a NIC lcore. */
#include <errno.h>
#include <poll.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <rte_ring_elem.h>

#include "ctl.h"

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
	while (rte_ring_enqueue_elem(c->rt->nic[nic].io->cmd, &cmd, sizeof(cmd)) != 0)
		sched_yield();
	kvl_nic_io_kick(c->rt->nic[nic].io);
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

	if (c->pub[pc->peer].gen != pc->peer_gen) {
		close(pc->fd);
		pc->state = PC_FREE;
		return;
	}
	conn = kvl_tcp_conn_new(pc->fd, &rt->segs.tab, rt->cfg.nics[pc->nic].queue_depth);
	if (conn == NULL) {
		close(pc->fd);
		pc->state = PC_FREE;
		kvl_ctl_peer_fail(c, pc->peer, KVL_ERR_CONN_LOST,
				  "nic.%s: cannot set up a connection: %s",
				  rt->cfg.nics[pc->nic].label, strerror(errno));
		return;
	}
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

void kvl_ctl_pconn_event(struct kvl_control *c, struct pconn *pc, short revents)
{
	int reason;
	struct kvl_ctrl_msg m;
	size_t used;
	ssize_t n;
	int rc, soerr = 0;
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
		memset(&m, 0, sizeof(m));
		m.type = KVL_CTRL_DATA_BIND;
		m.u.data_bind.session_id = c->peer[pc->peer].session_id;
		m.u.data_bind.conn_index = pc->conn_index;
		kvl_auth_data_mac(&c->secret, c->peer[pc->peer].hello.u.hello.nonce,
				  c->peer[pc->peer].challenge.u.challenge.nonce,
				  m.u.data_bind.session_id, pc->conn_index, m.u.data_bind.mac);
		if (kvl_ctl_send_small(pc->fd, &m) < 0) {
			kvl_ctl_peer_fail(c, pc->peer, KVL_ERR_CONN_LOST,
					  "data connection: cannot bind");
			return;
		}
		pc->state = PC_BIND_SENT;
		return;
	}
	if (!(revents & (POLLIN | POLLERR | POLLHUP)))
		return;
	/* Read only what the bind frame needs: data frames may follow right behind it. */
	n = recv(pc->fd, pc->rx + pc->rx_len, sizeof(pc->rx) - pc->rx_len, MSG_PEEK);
	if (n <= 0) {
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return;
		close(pc->fd);
		pc->state = PC_FREE;
		return;
	}
	rc = kvl_ctrl_decode(pc->rx, (size_t)n, &m, &used);
	if (rc == 0 && (size_t)n < sizeof(pc->rx))
		return; /* wait for the rest; MSG_PEEK left it in the socket */
	if (rc <= 0 || recv(pc->fd, pc->rx, used, 0) != (ssize_t)used) {
		close(pc->fd);
		if (pc->state == PC_BIND_SENT)
			kvl_ctl_peer_fail(c, pc->peer, KVL_ERR_PROTOCOL,
					  "data connection: bad bind reply");
		pc->state = PC_FREE;
		return;
	}
	if (pc->state == PC_BIND_SENT) {
		if (m.type != KVL_CTRL_DATA_BIND_OK) {
			close(pc->fd);
			pc->state = PC_FREE;
			kvl_ctl_peer_fail(c, pc->peer, KVL_ERR_CONN_LOST,
					  "data connection refused (%s)",
					  kvl_ctrl_type_name(m.type));
			return;
		}
		hand_over(c, pc);
		return;
	}
	/* Server: find the session and check the proof. */
	reason = KVL_AUTH_BAD_SESSION;
	if (m.type == KVL_CTRL_DATA_BIND) {
		for (uint32_t p = 0; p < KVL_MAX_PEERS_RT; p++) {
			struct peer *pr = &c->peer[p];
			uint8_t mac[KVL_MAC_LEN];
			int st = c->pub[p].state;

			if (c->pub[p].initiator || pr->session_id != m.u.data_bind.session_id ||
			    (st != KVL_PEER_EXCHANGE && st != KVL_PEER_READY))
				continue;
			kvl_auth_data_mac(&c->secret, pr->hello.u.hello.nonce,
					  pr->challenge.u.challenge.nonce, pr->session_id,
					  m.u.data_bind.conn_index, mac);
			if (!kvl_auth_equal(mac, m.u.data_bind.mac)) {
				reason = KVL_AUTH_BAD_MAC; /* a known session, the wrong proof */
				break;
			}
			memset(&m, 0, sizeof(m));
			m.type = KVL_CTRL_DATA_BIND_OK;
			if (kvl_ctl_send_small(pc->fd, &m) < 0)
				break;
			pc->peer = p;
			pc->peer_gen = c->pub[p].gen;
			hand_over(c, pc);
			return;
		}
	}
	__atomic_fetch_add(&c->auth_failures, 1, __ATOMIC_RELAXED);
	memset(&m, 0, sizeof(m));
	m.type = KVL_CTRL_AUTH_FAIL;
	m.u.auth_fail.reason = (uint16_t)reason;
	kvl_ctl_send_small(pc->fd, &m);
	close(pc->fd);
	pc->state = PC_FREE;
}
