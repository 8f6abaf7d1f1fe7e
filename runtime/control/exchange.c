/* SPDX-License-Identifier: BSD-3-Clause */
/* After authentication: segments, endpoints and rkeys each way, then the data connections. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctl.h"
#include "kvl_clock.h"
#include "segments.h"

/* @name is an item of the comma-separated @list. */
static bool listed(const char *list, const char *name)
{
	size_t n = strlen(name);

	for (const char *p = list; n && *p;) {
		const char *e = strchrnul(p, ',');

		if ((size_t)(e - p) == n && memcmp(p, name, n) == 0)
			return true;
		p = *e ? e + 1 : e;
	}
	return false;
}

struct segs_msg {
	struct kvl_control *c;
	struct kvl_ctrl_msg *m;
	unsigned nic; /* RKEYS: their keys on this NIC's device */
};

static void add_seg_desc(void *arg, const struct kvl_local_seg *seg)
{
	struct segs_msg *w = arg;
	struct kvl_seg_desc *d;

	if (w->m->u.segments.n == KVL_CTRL_MAX_SEGS)
		return;
	d = &w->m->u.segments.seg[w->m->u.segments.n++];
	*d = seg->desc;
	if (listed(w->c->bad_len, d->name))
		d->length *= 2; /* fault injection: past the end of its MR */
}

void kvl_ctl_send_segments(struct kvl_control *c, uint32_t p)
{
	struct kvl_ctrl_msg *m = calloc(1, sizeof(*m));
	struct segs_msg w = { .c = c, .m = m };

	if (m == NULL) {
		kvl_ctl_peer_fail(c, p, KVL_ERR_CONN_LOST, "cannot build SEGMENTS: out of memory");
		return;
	}
	m->type = KVL_CTRL_SEGMENTS;
	c->peer[p].segs_version_sent = kvl_segs_visit(&c->rt->segs, add_seg_desc, &w);
	kvl_ctl_send_msg(c, p, m);
	free(m);
	/* and their handles, to a peer on this host: a freed segment leaves both */
	if (c->pub[p].state != KVL_PEER_DEAD)
		kvl_ctl_send_ipc_segs(c, p);
}

void kvl_ctl_send_endpoints(struct kvl_control *c, uint32_t p)
{
	struct kvl_ctrl_msg *m = calloc(1, sizeof(*m));

	if (m == NULL) {
		kvl_ctl_peer_fail(c, p, KVL_ERR_CONN_LOST, "cannot build ENDPOINTS: out of memory");
		return;
	}
	m->type = KVL_CTRL_ENDPOINTS;
	m->u.endpoints.n = c->n_eps;
	memcpy(m->u.endpoints.ep, c->eps, sizeof(c->eps[0]) * c->n_eps);
	kvl_ctl_send_msg(c, p, m);
	free(m);
}

static void add_seg_rkey(void *arg, const struct kvl_local_seg *seg)
{
	struct segs_msg *w = arg;
	struct kvl_ctrl_msg *m = w->m;

	if (m->u.rkeys.n == KVL_CTRL_MAX_SEGS)
		return;
	m->u.rkeys.key[m->u.rkeys.n].seg_id = seg->desc.id;
	m->u.rkeys.key[m->u.rkeys.n].rkey = seg->rkey[w->nic];
	if (listed(w->c->bad_rkey, seg->desc.name))
		m->u.rkeys.key[m->u.rkeys.n].rkey ^= 0x5a; /* the key byte */
	m->u.rkeys.key[m->u.rkeys.n].addr = (uintptr_t)seg->base;
	m->u.rkeys.n++;
}

/* RKEYS for each of our RDMA NICs: where every segment is, and its rkey there. */
void kvl_ctl_send_rkeys(struct kvl_control *c, uint32_t p)
{
	struct kvl_runtime *rt = c->rt;
	struct kvl_ctrl_msg *m = calloc(1, sizeof(*m));

	if (m == NULL)
		return;
	for (unsigned n = 0; n < rt->cfg.n_nics; n++) {
		struct segs_msg w = { .c = c, .m = m, .nic = n };

		if (!kvl_ctl_is_rdma(rt, n))
			continue;
		memset(m, 0, sizeof(*m));
		m->type = KVL_CTRL_RKEYS;
		snprintf(m->u.rkeys.nic, sizeof(m->u.rkeys.nic), "%s", rt->cfg.nics[n].label);
		kvl_segs_visit(&rt->segs, add_seg_rkey, &w);
		kvl_ctl_send_msg(c, p, m);
	}
	free(m);
}

/* Client: both sides know each other; open qp_count data connections from each NIC. */
static void open_data(struct kvl_control *c, uint32_t p)
{
	struct kvl_runtime *rt = c->rt;
	struct peer *pr = &c->peer[p];
	uint32_t idx = 0, ep = 0;
	struct kvl_xconn ipc[KVL_MAX_NICS] = { 0 };

	kvl_ctl_set_state(c, p, KVL_PEER_BINDING);
	for (unsigned n = 0; n < rt->cfg.n_nics; n++) {
		const struct kvl_nic_conf *nc = &rt->cfg.nics[n];
		struct in_addr src;

		/* a peer on this host with its GPU segments exported: one ipc connection on
		 * this NIC's lcore instead of its transport's (given once the count is known) */
		if (kvl_ctl_ipc_conn(c, p, n, &ipc[n])) {
			idx++;
			continue;
		}

		if (kvl_ctl_is_rdma(rt, n)) {
			/* One QP per connection; the server picks its NIC of our label. */
			for (unsigned q = 0; q < nc->qp_count; q++) {
				struct kvl_verbs_addr local;
				struct kvl_ctrl_msg m;
				char err[KVL_VERBS_ERR_LEN];
				struct kvl_verbs_conn *vc;

				if (pr->n_vpend == KVL_PEER_MAX_CONNS) {
					kvl_ctl_peer_fail(c, p, KVL_ERR_CONN_LOST,
							  "too many RDMA connections");
					return;
				}
				vc = kvl_ctl_verbs_conn_new(c, n, &local, err, sizeof(err));
				if (vc == NULL) {
					kvl_ctl_peer_fail(c, p, KVL_ERR_CONN_LOST, "nic.%s: %s",
							  nc->label, err);
					return;
				}
				pr->vpend[pr->n_vpend++] =
					(struct vpend){ .vc = vc, .nic = n, .conn_index = idx };
				kvl_ctl_addr_to_msg(&m, idx++, nc->label, &local);
				kvl_ctl_send_msg(c, p, &m);
			}
			continue;
		}
		if (rt->nic[n].info.transport != KVL_TRANSPORT_TCP || c->dfd[n] < 0)
			continue;
		if (kvl_ctl_netdev_ipv4(nc->device, &src) < 0)
			continue;
		for (unsigned q = 0; q < nc->qp_count; q++) {
			struct pconn *pc = kvl_ctl_pconn_alloc(c);
			char err[KVL_CTRL_TEXT_LEN];
			const struct kvl_endpoint *e = NULL;

			/* The peer's tcp endpoints, round robin. */
			for (uint32_t k = 0; k < pr->n_eps && e == NULL; k++) {
				const struct kvl_endpoint *cand = &pr->eps[(ep + k) % pr->n_eps];

				if (cand->transport == KVL_TRANSPORT_TCP)
					e = cand;
			}
			ep++;
			if (e == NULL) {
				kvl_ctl_peer_fail(c, p, KVL_ERR_CONN_LOST,
						  "the peer offers no tcp data endpoint");
				return;
			}
			if (pc == NULL) {
				kvl_ctl_peer_fail(c, p, KVL_ERR_CONN_LOST,
						  "too many connections in set-up");
				return;
			}
			if (kvl_ctl_start_connect(e->addr, &pc->fd, err, sizeof(err), &src) < 0) {
				kvl_ctl_peer_fail(c, p, KVL_ERR_CONN_LOST,
						  "data connection to %s: %s", e->addr, err);
				return;
			}
			pc->state = PC_CONNECTING;
			pc->nic = n;
			pc->peer = p;
			pc->peer_gen = c->pub[p].gen;
			pc->conn_index = idx++;
			pc->deadline_ns = pr->deadline_ns;
		}
	}
	pr->want_conns = idx;
	pr->bound_conns = 0;
	for (unsigned n = 0; n < rt->cfg.n_nics; n++)
		if (ipc[n].ops != NULL && kvl_ctl_give_to_lcore(c, p, n, ipc[n]) < 0)
			return; /* failed the peer, freed the connection */
	if (idx == 0)
		kvl_ctl_peer_fail(
			c, p, KVL_ERR_CONN_LOST,
			"no local NIC to open data connections from (tcp needs an IPv4 address)");
}

static void maybe_exchanged(struct kvl_control *c, uint32_t p)
{
	struct peer *pr = &c->peer[p];

	if (c->pub[p].state != KVL_PEER_EXCHANGE || !pr->got_segs || !pr->got_eps)
		return;
	/* level 4: the client waits for the peer's IPC_SEGS (its answer to our HOST) */
	if (c->pub[p].initiator && pr->level >= KVL_CTRL_FEATURE_HOST && !pr->got_ipc)
		return;
	if (c->pub[p].initiator)
		open_data(c, p);
	else
		kvl_ctl_set_state(c, p, KVL_PEER_READY);
}

/* After authentication: metadata, RDMA addresses, heartbeats, cancels, errors, goodbye. */
void kvl_ctl_exchange_msg(struct kvl_control *c, uint32_t p, struct kvl_ctrl_msg *m)
{
	struct kvl_peer_pub *pub = &c->pub[p];
	struct peer *pr = &c->peer[p];
	struct kvl_ctrl_msg out;
	int st = pub->state;

	memset(&out, 0, sizeof(out));
	switch (m->type) {
	case KVL_CTRL_SEGMENTS:
		rte_spinlock_lock(&pub->lock);
		pub->n_segs = m->u.segments.n;
		memcpy(pub->seg, m->u.segments.seg, sizeof(pub->seg[0]) * pub->n_segs);
		rte_spinlock_unlock(&pub->lock);
		if (pr->got_segs)
			kvl_ctl_refresh_remote(
				c, p); /* a later SEGMENTS: its RKEYS came just before */
		pr->got_segs = true;
		maybe_exchanged(c, p);
		break;
	case KVL_CTRL_ENDPOINTS:
		pr->n_eps = m->u.endpoints.n;
		memcpy(pr->eps, m->u.endpoints.ep, sizeof(pr->eps[0]) * pr->n_eps);
		pr->got_eps = true;
		maybe_exchanged(c, p);
		break;
	case KVL_CTRL_RKEYS: {
		uint32_t k = 0;

		/* one per NIC of the peer's; a later one (its segments changed) replaces it */
		while (k < pr->n_rkeys && strcmp(pr->rkeys[k].u.rkeys.nic, m->u.rkeys.nic) != 0)
			k++;
		if (k < KVL_CTRL_MAX_EPS) {
			pr->rkeys[k] = *m;
			if (k == pr->n_rkeys)
				pr->n_rkeys++;
		}
		break;
	}
	case KVL_CTRL_QP_INFO:
		if (pub->initiator && st == KVL_PEER_BINDING)
			kvl_ctl_on_qp_info_client(c, p, m);
		else if (!pub->initiator && (st == KVL_PEER_EXCHANGE || st == KVL_PEER_READY))
			kvl_ctl_on_qp_info_server(c, p, m);
		else
			kvl_ctl_peer_fail(c, p, KVL_ERR_PROTOCOL, "QP_INFO in state %s",
					  kvl_peer_state_name(st));
		break;
	case KVL_CTRL_QP_RESYNC:
		kvl_ctl_on_qp_resync(c, p, m);
		break;
	case KVL_CTRL_HEARTBEAT:
		out.type = KVL_CTRL_HEARTBEAT_ACK;
		out.u.heartbeat = m->u.heartbeat;
		kvl_ctl_send_msg(c, p, &out);
		break;
	case KVL_CTRL_REQ_CANCEL:
		__atomic_fetch_add(&c->req_cancels_rx, 1, __ATOMIC_RELAXED);
		KVL_LOG(DEBUG, "peer %u (%s): canceled its request %llu (%s)", p, pub->addr,
			(unsigned long long)m->u.req_cancel.req,
			kvl_status_name((int)m->u.req_cancel.status));
		break;
	case KVL_CTRL_HEARTBEAT_ACK:
		pub->rtt_us = (kvl_now_ns() - m->u.heartbeat.sent_ns) / 1000;
		pub->heartbeats_rx++;
		break;
	case KVL_CTRL_ERROR:
		KVL_LOG(WARNING, "peer %u (%s): error %u: %s", p, pub->addr, m->u.error.code,
			m->u.error.text);
		break;
	case KVL_CTRL_DOCTOR:
		kvl_ctl_on_doctor(c, p, m);
		break;
	case KVL_CTRL_HOST:
		kvl_ctl_on_host(c, p, m);
		break;
	case KVL_CTRL_IPC_SEGS:
		kvl_ctl_on_ipc_segs(c, p, m);
		if (c->pub[p].state == KVL_PEER_EXCHANGE)
			maybe_exchanged(c, p);
		break;
	case KVL_CTRL_BYE:
		/* A clean goodbye: what was in flight with it is canceled, not lost. */
		kvl_ctl_peer_fail(c, p, KVL_ERR_CANCELED, "the peer stopped (BYE)");
		break;
	default:
		kvl_ctl_peer_fail(c, p, KVL_ERR_PROTOCOL, "unexpected %s",
				  kvl_ctrl_type_name(m->type));
		break;
	}
}
