/* SPDX-License-Identifier: BSD-3-Clause */
/* RDMA data connections over the control path: QP addresses, the peer's rkeys, QP resync. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <rte_ring_elem.h>

#include "ctl.h"

bool kvl_ctl_is_rdma(const struct kvl_runtime *rt, unsigned nic)
{
	return rt->nic[nic].vdev != NULL;
}

/* The peer's segments on its RDMA NIC @nic, as a verbs connection addresses them. */
static unsigned remote_segs(struct kvl_control *c, uint32_t p, const char *nic,
			    struct kvl_verbs_rseg *out)
{
	struct peer *pr = &c->peer[p];
	struct kvl_peer_pub *pub = &c->pub[p];
	unsigned n = 0;

	for (uint32_t k = 0; k < pr->n_rkeys; k++) {
		if (strcmp(pr->rkeys[k].u.rkeys.nic, nic) != 0)
			continue;
		rte_spinlock_lock(&pub->lock);
		for (uint32_t i = 0; i < pr->rkeys[k].u.rkeys.n; i++)
			for (uint32_t s = 0; s < pub->n_segs; s++)
				if (pub->seg[s].id == pr->rkeys[k].u.rkeys.key[i].seg_id)
					out[n++] = (struct kvl_verbs_rseg){
						.id = pub->seg[s].id,
						.flags = pub->seg[s].flags,
						.addr = pr->rkeys[k].u.rkeys.key[i].addr,
						.len = pub->seg[s].length,
						.rkey = pr->rkeys[k].u.rkeys.key[i].rkey,
					};
		rte_spinlock_unlock(&pub->lock);
	}
	return n;
}

struct kvl_verbs_conn *kvl_ctl_verbs_conn_new(struct kvl_control *c, unsigned nic,
					      struct kvl_verbs_addr *local, char *err,
					      size_t errlen)
{
	const struct kvl_config *cfg = &c->rt->cfg;
	const struct kvl_cq_moderation_conf *cq = &cfg->cq_moderation;

	return kvl_verbs_conn_new(c->rt->nic[nic].vdev, cfg->nics[nic].queue_depth,
				  cq->signal_every, cq->enable ? cq->count : 0,
				  cq->enable ? cq->period_us : 0, local, err, errlen);
}

void kvl_ctl_addr_to_msg(struct kvl_ctrl_msg *m, uint32_t idx, const char *nic,
			 const struct kvl_verbs_addr *a)
{
	memset(m, 0, sizeof(*m));
	m->type = KVL_CTRL_QP_INFO;
	m->u.qp_info.conn_index = idx;
	snprintf(m->u.qp_info.nic, sizeof(m->u.qp_info.nic), "%s", nic);
	m->u.qp_info.qpn = a->qpn;
	m->u.qp_info.psn = a->psn;
	memcpy(m->u.qp_info.gid, a->gid, 16);
	m->u.qp_info.lid = a->lid;
	m->u.qp_info.mtu = a->mtu;
	m->u.qp_info.gid_type = a->gid_type;
	m->u.qp_info.gid_index = a->gid_index;
	m->u.qp_info.port = a->port;
}

static void msg_to_addr(const struct kvl_ctrl_msg *m, struct kvl_verbs_addr *a)
{
	memset(a, 0, sizeof(*a));
	a->qpn = m->u.qp_info.qpn;
	a->psn = m->u.qp_info.psn;
	memcpy(a->gid, m->u.qp_info.gid, 16);
	a->lid = m->u.qp_info.lid;
	a->mtu = m->u.qp_info.mtu;
	a->gid_type = m->u.qp_info.gid_type;
	a->gid_index = m->u.qp_info.gid_index;
	a->port = m->u.qp_info.port;
}

/* Connect @vc towards what the peer sent, give it the peer's segments, hand it over. The
 * mismatch messages (MTU, GID type) go to the peer too, so both ends log the same words. */
static void verbs_finish(struct kvl_control *c, uint32_t p, unsigned nic, struct kvl_verbs_conn *vc,
			 const struct kvl_ctrl_msg *m)
{
	struct kvl_verbs_rseg rs[KVL_CTRL_MAX_SEGS];
	struct kvl_verbs_addr ra;
	char err[KVL_VERBS_ERR_LEN];
	struct kvl_verbs_addr la;
	unsigned n;
	int slot;

	msg_to_addr(m, &ra);
	if (kvl_verbs_conn_connect(vc, &ra, err, sizeof(err)) < 0) {
		struct kvl_ctrl_msg e = { .type = KVL_CTRL_ERROR };

		e.u.error.code = 1;
		snprintf(e.u.error.text, sizeof(e.u.error.text), "%.*s",
			 (int)sizeof(e.u.error.text) - 1, err);
		kvl_ctl_send_msg(c, p, &e);
		kvl_verbs_conn_free(vc);
		kvl_ctl_peer_fail(c, p, KVL_ERR_CONN_LOST, "nic.%s: %s", c->rt->cfg.nics[nic].label,
				  err);
		return;
	}
	n = remote_segs(c, p, m->u.qp_info.nic, rs);
	kvl_verbs_set_remote(vc, rs, n);
	kvl_verbs_set_resync_timeout(vc, c->rt->cfg.control.peer_timeout_ms);
	kvl_verbs_conn_addrs(vc, &la, &ra);
	slot = kvl_ctl_give_to_lcore(c, p, nic,
				     (struct kvl_xconn){ .ops = &kvl_xport_verbs, .c = vc });
	if (slot >= 0) {
		c->slot[nic][slot].lqpn = la.qpn;
		c->slot[nic][slot].rqpn = ra.qpn;
		snprintf(c->slot[nic][slot].rnic, sizeof(c->slot[0][0].rnic), "%s",
			 m->u.qp_info.nic);
	}
}

/*
 * The peer's segments changed (a segment registered after we connected): give each of its
 * RDMA connections the new table. The lcore owns the connection, so the table travels in a
 * command and the lcore swaps it in between two posts.
 */
void kvl_ctl_refresh_remote(struct kvl_control *c, uint32_t p)
{
	struct kvl_peer_pub *pub = &c->pub[p];
	struct kvl_peer_conn conn[KVL_PEER_MAX_CONNS];
	uint32_t n_conns;

	rte_spinlock_lock(&pub->lock);
	n_conns = pub->n_conns;
	memcpy(conn, pub->conn, sizeof(conn[0]) * n_conns);
	rte_spinlock_unlock(&pub->lock);
	for (uint32_t i = 0; i < n_conns; i++) {
		unsigned nic = conn[i].nic;
		struct kvl_lcmd cmd = { .type = KVL_LCMD_SET_REMOTE,
					.peer = p,
					.slot = conn[i].slot,
					.gen = conn[i].gen };
		struct kvl_verbs_rseg *rs;

		/* an ipc connection there takes IPC_SEGS' tables, not rkeys (control/ipc.c) */
		if (!kvl_ctl_is_rdma(c->rt, nic) || c->peer[p].ipc_nic[nic])
			continue;
		rs = calloc(KVL_CTRL_MAX_SEGS, sizeof(*rs));
		if (rs == NULL)
			continue; /* the old table stays: the new segment is refused, nothing else
				   */
		cmd.status = (int32_t)remote_segs(c, p, c->slot[nic][conn[i].slot].rnic, rs);
		cmd.ptr = rs;
		if (kvl_ctl_lcmd(c, nic, &cmd) < 0) {
			free(rs);
			kvl_ctl_peer_fail(
				c, p, KVL_ERR_CONN_LOST,
				"nic.%s: its lcore is not taking commands (the peer's new "
				"segments could not reach it)",
				c->rt->cfg.nics[nic].label);
			return;
		}
	}
}

/* lcore -> peer: a resync message of the connection in @slot of @nic. */
void kvl_ctl_resync_send(struct kvl_control *c, unsigned nic, const struct kvl_levt *ev)
{
	struct kvl_ctrl_msg m = { .type = KVL_CTRL_QP_RESYNC };

	if (ev->peer >= KVL_MAX_PEERS_RT || !c->slot[nic][ev->slot].used)
		return;
	m.u.qp_resync.kind = ev->rs.kind;
	m.u.qp_resync.dst_qpn = c->slot[nic][ev->slot].rqpn;
	m.u.qp_resync.src_qpn = c->slot[nic][ev->slot].lqpn;
	m.u.qp_resync.psn = ev->rs.psn;
	m.u.qp_resync.echo = ev->rs.echo;
	kvl_ctl_send_msg(c, ev->peer, &m);
}

/* peer -> lcore: find the connection by its two QPNs among this peer's own. */
void kvl_ctl_on_qp_resync(struct kvl_control *c, uint32_t p, const struct kvl_ctrl_msg *m)
{
	struct kvl_peer_pub *pub = &c->pub[p];
	struct kvl_lcmd cmd = { .type = KVL_LCMD_RESYNC, .peer = p };
	unsigned nic = 0;
	bool found = false;

	rte_spinlock_lock(&pub->lock);
	for (uint32_t i = 0; i < pub->n_conns && !found; i++) {
		nic = pub->conn[i].nic;
		cmd.slot = pub->conn[i].slot;
		cmd.gen = pub->conn[i].gen;
		found = kvl_ctl_is_rdma(c->rt, nic) &&
			c->slot[nic][cmd.slot].lqpn == m->u.qp_resync.dst_qpn &&
			c->slot[nic][cmd.slot].rqpn == m->u.qp_resync.src_qpn;
	}
	rte_spinlock_unlock(&pub->lock);
	if (!found) {
		/* A connection closed meanwhile: nothing to restart. */
		__atomic_fetch_add(&c->resync_unroutable, 1, __ATOMIC_RELAXED);
		return;
	}
	cmd.rs =
		(struct kvl_resync){ m->u.qp_resync.kind, m->u.qp_resync.psn, m->u.qp_resync.echo };
	if (kvl_ctl_lcmd(c, nic, &cmd) < 0)
		kvl_ctl_peer_fail(c, p, KVL_ERR_CONN_LOST,
				  "nic.%s: its lcore is not taking commands (a QP_RESYNC could not "
				  "reach it)",
				  c->rt->cfg.nics[nic].label);
}

/* Server: a client's RDMA connection. Use our RDMA NIC of the same label, else the first. */
void kvl_ctl_on_qp_info_server(struct kvl_control *c, uint32_t p, const struct kvl_ctrl_msg *m)
{
	struct kvl_runtime *rt = c->rt;
	struct kvl_verbs_addr local;
	struct kvl_verbs_conn *vc;
	struct kvl_ctrl_msg out;
	char err[KVL_VERBS_ERR_LEN];
	int nic = -1;

	for (unsigned n = 0; n < rt->cfg.n_nics; n++) {
		if (!kvl_ctl_is_rdma(rt, n))
			continue;
		if (nic < 0 || strcmp(rt->cfg.nics[n].label, m->u.qp_info.nic) == 0)
			nic = (int)n;
	}
	if (nic < 0) {
		kvl_ctl_peer_fail(c, p, KVL_ERR_CONN_LOST,
				  "the peer asks for RDMA but we have no RDMA NIC");
		return;
	}
	vc = kvl_ctl_verbs_conn_new(c, (unsigned)nic, &local, err, sizeof(err));
	if (vc == NULL) {
		kvl_ctl_peer_fail(c, p, KVL_ERR_CONN_LOST, "nic.%s: %s", rt->cfg.nics[nic].label,
				  err);
		return;
	}
	kvl_ctl_addr_to_msg(&out, m->u.qp_info.conn_index, rt->cfg.nics[nic].label, &local);
	kvl_ctl_send_msg(c, p, &out);
	verbs_finish(c, p, (unsigned)nic, vc, m);
}

/* Client: the server's answer for one of the RDMA connections we opened. */
void kvl_ctl_on_qp_info_client(struct kvl_control *c, uint32_t p, const struct kvl_ctrl_msg *m)
{
	struct peer *pr = &c->peer[p];

	for (unsigned i = 0; i < pr->n_vpend; i++) {
		if (pr->vpend[i].conn_index != m->u.qp_info.conn_index || pr->vpend[i].vc == NULL)
			continue;
		struct kvl_verbs_conn *vc = pr->vpend[i].vc;

		pr->vpend[i].vc = NULL;
		verbs_finish(c, p, pr->vpend[i].nic, vc, m);
		return;
	}
	kvl_ctl_peer_fail(c, p, KVL_ERR_PROTOCOL, "QP_INFO for a connection we did not open (%u)",
			  m->u.qp_info.conn_index);
}
