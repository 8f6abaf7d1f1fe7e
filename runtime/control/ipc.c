/* SPDX-License-Identifier: BSD-3-Clause */
/* Same-host peers over the control path: HOST, IPC_SEGS, and the choice of the ipc transport. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ctl.h"
#include "ipc.h"

void kvl_ctl_ipc_init(struct kvl_control *c)
{
	char why[192];

	if (kvl_host_id(c->host_id, why, sizeof(why)) < 0)
		KVL_LOG(WARNING, "%s", why);
	if (kvl_random(&c->incarnation, sizeof(c->incarnation)) < 0 || c->incarnation == 0)
		c->incarnation =
			(uint64_t)getpid() << 32 | 1; /* still differs from the last run's */
}

static void set_why(struct kvl_control *c, uint32_t p, bool ipc, const char *fmt, const char *s)
{
	struct kvl_peer_pub *pub = &c->pub[p];

	rte_spinlock_lock(&pub->lock);
	if (ipc || !pub->ipc) { /* one NIC over ipc: the peer is read over ipc */
		pub->ipc = ipc;
		snprintf(pub->ipc_why, sizeof(pub->ipc_why), fmt, s);
	}
	rte_spinlock_unlock(&pub->lock);
}

/* NIC @nic's decision for peer @p, as kvl_ctl_ipc_conn took it: the peer's why (set_why), and
 * the NIC's own note for /kvlane/nics. */
static void decide(struct kvl_control *c, uint32_t p, unsigned nic, bool ipc, const char *why)
{
	struct kvl_rt_nic *n = &c->rt->nic[nic];

	set_why(c, p, ipc, "%s", why);
	rte_spinlock_lock(&n->ipc_lock);
	n->ipc_opened += ipc;
	snprintf(n->ipc_note, sizeof(n->ipc_note), "peer %s (%s): %s", c->pub[p].name,
		 c->pub[p].addr, why);
	rte_spinlock_unlock(&n->ipc_lock);
}

void kvl_ctl_send_host(struct kvl_control *c, uint32_t p)
{
	struct kvl_ctrl_msg m = { .type = KVL_CTRL_HOST };

	if (c->peer[p].level < KVL_CTRL_FEATURE_HOST) {
		set_why(c, p, false, "%s",
			"the peer does not exchange host identities (an older kvlane): another "
			"host");
		return;
	}
	memcpy(m.u.host.host_id, c->host_id, KVL_HOST_ID_LEN);
	m.u.host.incarnation = c->incarnation;
	m.u.host.pid = (uint32_t)getpid();
	kvl_ctl_send_msg(c, p, &m);
}

void kvl_ctl_send_ipc_segs(struct kvl_control *c, uint32_t p)
{
	struct peer *pr = &c->peer[p];
	struct kvl_ctrl_msg *m;
	char why[160] = "";
	int n = 0;

	if (pr->level < KVL_CTRL_FEATURE_HOST || !pr->got_host)
		return; /* an older peer, or before its HOST: sent once that came */
	m = calloc(1, sizeof(*m));
	if (m == NULL) {
		kvl_ctl_peer_fail(c, p, KVL_ERR_CONN_LOST, "cannot build IPC_SEGS: out of memory");
		return;
	}
	m->type = KVL_CTRL_IPC_SEGS;
	m->u.ipc_segs.incarnation = c->incarnation;
	/* handles go to a peer on this host only: elsewhere they are nothing but a leak */
	if (c->pub[p].same_host == 1)
		n = kvl_ipc_export(c->rt, (uint32_t)c->incarnation, m->u.ipc_segs.seg,
				   KVL_CTRL_MAX_SEGS, why, sizeof(why));
	if (why[0])
		KVL_LOG(INFO, "peer %u: %s", p, why);
	m->u.ipc_segs.n = (uint32_t)n;
	kvl_ctl_send_msg(c, p, m);
	free(m);
}

void kvl_ctl_on_host(struct kvl_control *c, uint32_t p, const struct kvl_ctrl_msg *m)
{
	struct kvl_peer_pub *pub = &c->pub[p];
	struct peer *pr = &c->peer[p];
	bool same;

	if (pr->level < KVL_CTRL_FEATURE_HOST) {
		kvl_ctl_peer_fail(c, p, KVL_ERR_PROTOCOL,
				  "HOST from a peer that did not negotiate it");
		return;
	}
	if (pr->got_host) {
		/* a live connection's peer does not move: a second, different HOST is a lie */
		if (memcmp(pr->host_id, m->u.host.host_id, KVL_HOST_ID_LEN) != 0 ||
		    pr->incarnation != m->u.host.incarnation)
			kvl_ctl_peer_fail(c, p, KVL_ERR_PROTOCOL,
					  "the peer's HOST changed on a live connection");
		return;
	}
	pr->got_host = true;
	memcpy(pr->host_id, m->u.host.host_id, KVL_HOST_ID_LEN);
	pr->incarnation = m->u.host.incarnation;
	pr->pid = m->u.host.pid;
	/* an id of zeros (a host that could not read its own) matches no one, ours included */
	same = kvl_host_id_valid(c->host_id) && kvl_host_id_valid(m->u.host.host_id) &&
	       memcmp(c->host_id, m->u.host.host_id, KVL_HOST_ID_LEN) == 0;
	rte_spinlock_lock(&pub->lock);
	pub->same_host = same ? 1 : 0;
	rte_spinlock_unlock(&pub->lock);
	if (!same)
		set_why(c, p, false, "%s", "another host");
	else if (!pub->initiator)
		set_why(c, p, false, "%s",
			"this side serves: the connecting side chooses how it reads");
	KVL_LOG(INFO, "peer %u (%s): %s", p, pub->addr, same ? "on this host" : "on another host");
	kvl_ctl_send_ipc_segs(c, p);
}

void kvl_ctl_on_ipc_segs(struct kvl_control *c, uint32_t p, const struct kvl_ctrl_msg *m)
{
	struct kvl_peer_pub *pub = &c->pub[p];
	struct peer *pr = &c->peer[p];
	const char *no = NULL;

	if (!pr->got_host) {
		kvl_ctl_peer_fail(c, p, KVL_ERR_PROTOCOL, "IPC_SEGS before HOST");
		return;
	}
	if (m->u.ipc_segs.n > 0 && pub->same_host != 1)
		no = "handles from a peer on another host refused";
	else if (m->u.ipc_segs.incarnation != pr->incarnation)
		no = "handles of a stale incarnation refused (not the one its HOST gave)";
	if (no != NULL) {
		/* nothing of it is kept (no ipc connection uses this peer's table yet) */
		__atomic_fetch_add(&c->ipc_refused, 1, __ATOMIC_RELAXED);
		if (pub->ipc) {
			/* its handles are in use: a peer that now sends such a table is lying */
			kvl_ctl_peer_fail(c, p, KVL_ERR_PROTOCOL, "IPC_SEGS: %s", no);
			return;
		}
		KVL_LOG(WARNING, "peer %u (%s): %s", p, pub->addr, no);
		set_why(c, p, false, "%s", no);
		pr->n_ipc = 0;
	} else {
		pr->n_ipc = m->u.ipc_segs.n;
		for (uint32_t i = 0; i < pr->n_ipc; i++) {
			const struct kvl_ctrl_ipc_seg *g = &m->u.ipc_segs.seg[i];
			struct kvl_ipc_rseg *r = &pr->ipc_seg[i];
			uint32_t flags = 0;

			/* what peers may do with it is what SEGMENTS says */
			for (uint32_t k = 0; k < pub->n_segs; k++)
				if (pub->seg[k].id == g->seg_id)
					flags = pub->seg[k].flags;
			*r = (struct kvl_ipc_rseg){ .id = g->seg_id,
						    .gen = g->seg_gen,
						    .flags = flags,
						    .offset = g->offset,
						    .length = g->length };
			memcpy(r->gpu_uuid, g->gpu_uuid, sizeof(r->gpu_uuid));
			memcpy(r->handle, g->handle, sizeof(r->handle));
		}
	}
	rte_spinlock_lock(&pub->lock);
	pub->ipc_segs = pr->n_ipc;
	rte_spinlock_unlock(&pub->lock);
	if (pr->got_ipc && pub->ipc) {
		/* a later one: the serving side's segments changed; the lcores' tables follow */
		for (uint32_t i = 0; i < pub->n_conns; i++) {
			unsigned nic = pub->conn[i].nic;

			if (nic >= KVL_MAX_NICS || !pr->ipc_nic[nic])
				continue; /* another transport's connection: not its table */
			struct kvl_lcmd cmd = { .type = KVL_LCMD_SET_REMOTE,
						.peer = p,
						.slot = pub->conn[i].slot,
						.gen = pub->conn[i].gen,
						.status = (int32_t)pr->n_ipc };
			struct kvl_ipc_rseg *rs = calloc(KVL_CTRL_MAX_SEGS, sizeof(*rs));

			if (rs == NULL)
				continue;
			memcpy(rs, pr->ipc_seg, sizeof(*rs) * pr->n_ipc);
			cmd.ptr = rs;
			if (kvl_ctl_lcmd(c, nic, &cmd) < 0) {
				free(rs);
				kvl_ctl_peer_fail(c, p, KVL_ERR_CONN_LOST,
						  "nic.%s: its lcore is not taking commands (the "
						  "peer's new GPU segments could not reach it)",
						  c->rt->cfg.nics[nic].label);
				return;
			}
		}
	}
	pr->got_ipc = true;
}

int kvl_ctl_ipc_conn(struct kvl_control *c, uint32_t p, unsigned nic, struct kvl_xconn *x)
{
	struct kvl_peer_pub *pub = &c->pub[p];
	struct peer *pr = &c->peer[p];
	char why[KVL_CTRL_TEXT_LEN] = "", gwhy[KVL_CTRL_TEXT_LEN] = "", err[160];
	struct kvl_ipc_facts f = { .enabled = c->rt->cfg.nics[nic].ipc == KVL_IPC_AUTO,
				   .peer_level = pr->level >= KVL_CTRL_FEATURE_HOST && pr->got_host,
				   .same_host = pub->same_host == 1,
				   .same_process = pr->pid == (uint32_t)getpid(),
				   .n_exported = pr->n_ipc,
				   .local_gpu = true,
				   .access = 1 };
	uint32_t readable = 0;

	/* every GPU the peer exported from must be this NIC's GPU or one it can reach */
	for (uint32_t i = 0; i < pr->n_ipc && f.access == 1 && f.same_host; i++) {
		int a = kvl_ipc_access(c->rt, nic, pr->ipc_seg[i].gpu_uuid, gwhy, sizeof(gwhy));

		if (a == -2) {
			f.local_gpu = false;
			f.gpu_error = gwhy;
			break;
		}
		f.access = a;
	}
	if (!kvl_ipc_usable(&f, why, sizeof(why))) {
		if (f.local_gpu && f.access != 1 && gwhy[0])
			snprintf(why, sizeof(why), "%s", gwhy);
		decide(c, p, nic, false, why);
		return 0;
	}
	/* ipc takes every READ of the peer on this NIC: all it serves must be exported */
	for (uint32_t k = 0; k < pub->n_segs; k++)
		readable += (pub->seg[k].flags & KVL_SEG_REMOTE_READ) != 0;
	if (readable > pr->n_ipc) {
		snprintf(why, sizeof(why),
			 "the peer serves %u readable segments, %u of them exported (GPU): the "
			 "rest is not reachable over ipc",
			 readable, pr->n_ipc);
		decide(c, p, nic, false, why);
		return 0;
	}
	if (kvl_ipc_conn_open(c->rt, nic, pr->ipc_seg, pr->n_ipc, x, err, sizeof(err)) < 0) {
		decide(c, p, nic, false, err);
		return 0;
	}
	pr->ipc_nic[nic] = true;
	decide(c, p, nic, true, "ipc");
	KVL_LOG(INFO, "peer %u (%s): nic.%s reads its %u GPU segments over ipc (CUDA IPC)", p,
		pub->addr, c->rt->cfg.nics[nic].label, pr->n_ipc);
	return 1;
}
