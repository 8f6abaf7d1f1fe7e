/* SPDX-License-Identifier: BSD-3-Clause */
/* Verbs transport, QPs: CQ and QP setup, the RESET..RTS state machine, connect, events. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "kvl_clock.h"
#include "verbs_priv.h"

static int qp_modify(struct kvl_verbs_conn *c, struct ibv_qp_attr *a, int mask, const char *to,
		     char *err, size_t errlen)
{
	int rc = ibv_modify_qp(c->qp, a, mask);
	char gs[INET6_ADDRSTRLEN];

	if (rc == 0)
		return 0;
	if (rc < 0) /* some providers return -1 and set errno */
		rc = errno ? errno : EIO;
	kvl_verbs_errf(err, errlen,
		       "%s: QP 0x%x to %s failed: %s (remote QPN 0x%x, GID %s, path MTU %u, PSN "
		       "0x%x/0x%x)",
		       c->d->name, c->qp->qp_num, to, strerror(rc), c->remote.qpn,
		       kvl_verbs_gid_str((const union ibv_gid *)c->remote.gid, gs, sizeof(gs)),
		       kvl_verbs_mtu_bytes(c->path_mtu), c->local.psn, c->remote.psn);
	return -rc;
}

/* Fill the receive queue (INIT or later; a reset empties it). */
void kvl_verbs_post_recvs(struct kvl_verbs_conn *c)
{
	struct ibv_recv_wr w = { .wr_id = RECV_TAG | c->rq_epoch, .sg_list = NULL, .num_sge = 0 },
			   *bad;

	while (c->rq_posted < c->rq_depth) {
		if (ibv_post_recv(c->qp, &w, &bad) != 0) {
			c->stats.recv_post_errors++;
			return;
		}
		c->rq_posted++;
	}
}

static int qp_to_init(struct kvl_verbs_conn *c, char *err, size_t errlen)
{
	struct ibv_qp_attr a = {
		.qp_state = IBV_QPS_INIT,
		.pkey_index = c->d->pkey_index,
		.port_num = c->d->port,
		/* what the peer may do to us; each segment's MR narrows it */
		.qp_access_flags = IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE,
	};

	int rc = qp_modify(c, &a,
			   IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS,
			   "INIT", err, errlen);

	if (rc == 0) {
		c->rq_posted = 0; /* from RESET: the receive queue is empty */
		c->rq_epoch++;
		kvl_verbs_post_recvs(c);
	}
	return rc;
}

/*
 * RESET -> INIT -> RTR -> RTS towards c->remote, from any state. The PSNs are those of the
 * addresses the two ends exchanged (local.psn out, remote.psn in): a peer that restarts its
 * side with the address it already holds meets us at the same numbers without a new exchange.
 */
int kvl_verbs_qp_start(struct kvl_verbs_conn *c, char *err, size_t errlen)
{
	const struct kvl_verbs_dev *d = c->d;
	struct ibv_qp_attr a;
	int rc;

	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RESET;
	rc = qp_modify(c, &a, IBV_QP_STATE, "RESET", err, errlen);
	if (rc == 0)
		c->be->reset(c);
	if (rc == 0)
		rc = qp_to_init(c, err, errlen);
	if (rc != 0)
		return rc;

	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = c->path_mtu;
	a.dest_qp_num = c->remote.qpn;
	a.rq_psn = c->remote.psn;
	a.max_dest_rd_atomic = d->rd_atomic;
	a.min_rnr_timer = MIN_RNR_TIMER;
	a.ah_attr.port_num = d->port;
	a.ah_attr.sl = d->service_level;
	if (d->link_layer == IBV_LINK_LAYER_ETHERNET) {
		/* RoCE has no LIDs: every packet carries a GRH (v1) or IP header (v2) */
		a.ah_attr.is_global = 1;
		memcpy(a.ah_attr.grh.dgid.raw, c->remote.gid, sizeof(a.ah_attr.grh.dgid.raw));
		a.ah_attr.grh.sgid_index = (uint8_t)d->gid_index;
		a.ah_attr.grh.hop_limit = HOP_LIMIT;
		a.ah_attr.grh.traffic_class = d->traffic_class;
	} else {
		a.ah_attr.dlid = c->remote.lid;
	}
	rc = qp_modify(c, &a,
		       IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
			       IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER,
		       "RTR", err, errlen);
	if (rc != 0)
		return rc;

	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.timeout = d->ack_timeout;
	a.retry_cnt = d->retry_cnt;
	a.rnr_retry = RNR_RETRY;
	a.sq_psn = c->local.psn;
	a.max_rd_atomic = d->init_rd_atomic;
	rc = qp_modify(c, &a,
		       IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
			       IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC,
		       "RTS", err, errlen);
	if (rc != 0)
		return rc;
	c->since_sig = 0;
	return 0;
}

static uint64_t pow2_at_least(uint64_t n)
{
	uint64_t p = 1;

	while (p < n)
		p <<= 1;
	return p;
}

uint32_t kvl_verbs_random_psn(void)
{
	uint32_t v;

	if (getrandom(&v, sizeof(v), GRND_NONBLOCK) != (ssize_t)sizeof(v))
		v = (uint32_t)kvl_now_ns() ^ ((uint32_t)getpid() << 8);
	return v & 0xffffff;
}

/*
 * Moderation coalesces completion *events*: it spares an lcore that arms the CQ and sleeps;
 * a busy poller reads every CQE either way. Selective signaling is what cuts the CQEs.
 */
static void cq_moderate(struct kvl_verbs_conn *c, unsigned count, unsigned period_us,
			struct kvl_msg *note)
{
	const struct kvl_verbs_dev *d = c->d;
	struct ibv_modify_cq_attr ma = { .attr_mask = IBV_CQ_ATTR_MODERATE };
	int rc;

	if (count == 0)
		return;
	if (d->max_cq_count == 0) {
		kvl_msg_add(
			note,
			"%s: CQ moderation not supported (max_cq_count 0): completion events are "
			"not coalesced; selective signaling still cuts CQEs",
			d->name);
		return;
	}
	ma.moderate.cq_count = (uint16_t)(count < d->max_cq_count ? count : d->max_cq_count);
	ma.moderate.cq_period =
		(uint16_t)(period_us < d->max_cq_period ? period_us : d->max_cq_period);
	rc = ibv_modify_cq(c->cq, &ma);
	/* mlx5 direct: the send CQ is a CQ of its own, and its events are the ones that count */
	if (rc == 0 && c->scq != NULL)
		rc = ibv_modify_cq(c->scq, &ma);
	if (rc != 0)
		kvl_msg_add(note, "%s: CQ moderation refused by the device: %s; running without it",
			    d->name, strerror(rc < 0 ? errno : rc));
}

static int make_cq(struct kvl_verbs_conn *c, unsigned cqe, char *err, size_t errlen)
{
	struct ibv_cq_init_attr_ex ca = {
		.cqe = cqe,
		.channel = c->ch,
		.wc_flags = IBV_WC_EX_WITH_IMM |
			    IBV_WC_EX_WITH_BYTE_LEN, /* an unasked field reads NULL */
		.comp_mask = IBV_CQ_INIT_ATTR_MASK_FLAGS,
		.flags = IBV_CREATE_CQ_ATTR_SINGLE_THREADED, /* one lcore: skip the CQ lock */
	};
	int e1;

	c->cqx = ibv_create_cq_ex(c->d->ctx, &ca);
	if (c->cqx == NULL) {
		ca.comp_mask = 0; /* the provider may not know the flag */
		c->cqx = ibv_create_cq_ex(c->d->ctx, &ca);
	}
	if (c->cqx != NULL) {
		c->cq = ibv_cq_ex_to_cq(c->cqx);
		return 0;
	}
	e1 = errno;
	c->cq = ibv_create_cq(c->d->ctx, (int)cqe, NULL, c->ch, 0);
	if (c->cq != NULL)
		return 0;
	kvl_verbs_errf(err, errlen,
		       "%s: cannot create a CQ of %u entries: %s (ibv_create_cq_ex: %s)",
		       c->d->name, cqe, strerror(errno), strerror(e1));
	return -(errno ? errno : EIO);
}

struct kvl_verbs_conn *kvl_verbs_conn_new(struct kvl_verbs_dev *d, unsigned depth,
					  unsigned signal_every, unsigned cq_count,
					  unsigned cq_period_us, struct kvl_verbs_addr *local,
					  char *err, size_t errlen)
{
	struct kvl_verbs_conn *c;
	struct ibv_qp_init_attr_ex qa;
	struct kvl_msg note = { err, errlen, 0 };
	unsigned cqe;
	int rc;

	kvl_verbs_err_clear(err, errlen);
	if (d == NULL || depth == 0 || (int)depth > d->max_qp_wr || (int)depth > d->max_cqe) {
		kvl_verbs_errf(err, errlen,
			       "%s: queue depth %u is outside 1..%d (the device's max_qp_wr %d, "
			       "max_cqe %d)",
			       d ? d->name : "?", depth,
			       d ? (d->max_qp_wr < d->max_cqe ? d->max_qp_wr : d->max_cqe) : 0,
			       d ? d->max_qp_wr : 0, d ? d->max_cqe : 0);
		errno = EINVAL;
		return NULL;
	}
	c = calloc(1, sizeof(*c));
	if (c == NULL)
		goto nomem;
	c->d = d;
	c->rseg_last_id = UINT64_MAX; /* no peer segment seen yet */
	c->depth = depth;
	c->signal_every = signal_every == 0 ? 1 : signal_every > depth ? depth : signal_every;
	c->resync_timeout_ns = 5000ull * 1000 * 1000;
	/* (retry_cnt + 1) ACK timeouts of 4.096 us << ack_timeout: when the NIC would say RETRY_EXC
	 */
	c->stall_ns = 2ull * (d->retry_cnt + 1u) * (4096ull << (d->ack_timeout & 31));
	if (c->stall_ns < STALL_MIN_NS)
		c->stall_ns = STALL_MIN_NS;
	c->max_sge = d->max_sge < KVL_WR_MAX_SGE ? (unsigned)(d->max_sge > 0 ? d->max_sge : 1)
						 : KVL_WR_MAX_SGE;
	c->rq_depth = depth;
	c->notes_mask = (unsigned)pow2_at_least(depth) - 1;
	c->notes = calloc(c->notes_mask + 1, sizeof(*c->notes));
	if (c->notes == NULL)
		goto nomem;
	c->mask = pow2_at_least(depth) - 1;
	c->ring = calloc(c->mask + 1, sizeof(*c->ring));
	c->wcs = calloc(c->mask + 1, sizeof(*c->wcs));
	if (c->ring == NULL || c->wcs == NULL)
		goto nomem;

	/*
	 * Each WR makes at most one CQE, but after kvl_verbs_fail_all() the flushes of one
	 * incarnation may still sit in the CQ while the next one runs: room for two windows.
	 */
	cqe = 2 * (depth + c->rq_depth);
	if (cqe > (unsigned)d->max_cqe)
		cqe = (unsigned)d->max_cqe;
	/* A channel of its own, non-blocking: an lcore in hybrid idle mode sleeps on its fd
	 * (with others, in one epoll set) and takes the events without ever blocking on one.
	 * Without one the lcore naps a bounded time instead. */
	c->ch = ibv_create_comp_channel(d->ctx);
	if (c->ch != NULL &&
	    fcntl(c->ch->fd, F_SETFL, fcntl(c->ch->fd, F_GETFL) | O_NONBLOCK) < 0) {
		ibv_destroy_comp_channel(c->ch);
		c->ch = NULL;
	}
	rc = make_cq(c, cqe, err, errlen);
	if (rc != 0)
		goto fail;

	memset(&qa, 0, sizeof(qa));
	qa.send_cq = c->cq;
	qa.recv_cq = c->cq;
	qa.cap.max_send_wr = depth;
	qa.cap.max_recv_wr = c->rq_depth;
	qa.cap.max_send_sge = c->max_sge;
	qa.cap.max_recv_sge = 1;
	qa.qp_type = IBV_QPT_RC;
	qa.sq_sig_all = 0;
	qa.pd = d->pd;
	if (d->direct) {
		rc = kvl_verbs_mlx5_setup(c, &qa, err, errlen);
		if (rc == 0)
			goto qp_made;
		if (d->backend == KVL_VERBS_BACKEND_MLX5)
			goto fail;
		/* auto: this device's QPs are not what the fast path handles; verbs from now on */
		__atomic_store_n(&d->direct, false, __ATOMIC_RELAXED);
		snprintf(d->backend_note, sizeof(d->backend_note), "%s: verbs", err);
		kvl_verbs_publish_note(d, d->backend_note);
		kvl_verbs_err_clear(err, errlen);
		qa.send_cq = c->cq;
	}
	qa.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
	qa.send_ops_flags = IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_READ |
			    IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM;
	c->qp = ibv_create_qp_ex(d->ctx, &qa);
	if (c->qp == NULL) {
		rc = -(errno ? errno : EIO);
		kvl_verbs_errf(err, errlen,
			       "%s: cannot create an RC QP of depth %u with the ibv_wr_* API: %s",
			       d->name, depth, strerror(-rc));
		goto fail;
	}
	c->qpx = ibv_qp_to_qp_ex(c->qp);
	if (c->qpx == NULL) {
		rc = -EOPNOTSUPP;
		kvl_verbs_errf(err, errlen, "%s: the provider has no ibv_qp_ex for its QPs",
			       d->name);
		goto fail;
	}
	c->be = &kvl_verbs_ops_wr;
qp_made:
	rc = qp_to_init(c, err, errlen);
	if (rc != 0)
		goto fail;

	c->local.qpn = c->qp->qp_num;
	c->local.psn = kvl_verbs_random_psn();
	memcpy(c->local.gid, d->gid.raw, sizeof(c->local.gid));
	c->local.lid = d->link_layer == IBV_LINK_LAYER_INFINIBAND ? d->lid : 0;
	c->local.mtu = d->mtu;
	c->local.gid_type = (uint8_t)d->gid_type;
	c->local.gid_index = (uint8_t)d->gid_index;
	c->local.port = d->port;
	if (local != NULL)
		*local = c->local;
	cq_moderate(c, cq_count, cq_period_us, &note);
	return c;
nomem:
	rc = -ENOMEM;
	kvl_verbs_errf(err, errlen, "%s: out of memory for a connection of depth %u", d->name,
		       depth);
fail:
	kvl_verbs_conn_free(c);
	errno = -rc;
	return NULL;
}

void kvl_verbs_conn_free(struct kvl_verbs_conn *c)
{
	if (c == NULL)
		return;
	if (c->qp != NULL)
		ibv_destroy_qp(c->qp);
	if (c->scq != NULL)
		ibv_destroy_cq(c->scq);
	kvl_mlx5_sq_fini(&c->sq); /* nothing when the SQ was never set up */
	if (c->cq != NULL) {
		kvl_verbs_take_events(c); /* destroying a CQ waits for its events to be acked */
		ibv_destroy_cq(c->cq);
	}
	if (c->ch != NULL)
		ibv_destroy_comp_channel(c->ch);
	free(c->rseg);
	free(c->ring);
	free(c->wcs);
	free(c->notes);
	free(c);
}

int kvl_verbs_conn_connect(struct kvl_verbs_conn *c, const struct kvl_verbs_addr *r, char *err,
			   size_t errlen)
{
	const struct kvl_verbs_dev *d = c->d;
	bool eth = d->link_layer == IBV_LINK_LAYER_ETHERNET;
	char gs[INET6_ADDRSTRLEN];
	int rc;

	kvl_verbs_err_clear(err, errlen);
	if (r == NULL || r->qpn == 0 || r->qpn > 0xffffff || r->psn > 0xffffff) {
		kvl_verbs_errf(err, errlen,
			       "%s: the peer's address is not usable (QPN 0x%x, PSN 0x%x)", d->name,
			       r ? r->qpn : 0, r ? r->psn : 0);
		return -EINVAL;
	}
	if (kvl_verbs_mtu_bytes(r->mtu) == 0) {
		kvl_verbs_errf(err, errlen,
			       "%s: the peer's MTU code %u is not one of 1..5 (256..4096 bytes): "
			       "its address "
			       "is corrupt or from another version",
			       d->name, r->mtu);
		return -EINVAL;
	}
	if (r->gid_type > 2) {
		kvl_verbs_errf(err, errlen,
			       "%s: the peer's GID type %u is unknown (0 IB, 1 RoCE v1, 2 v2)",
			       d->name, r->gid_type);
		return -EINVAL;
	}
	if (eth != (r->gid_type != 0)) {
		kvl_verbs_errf(
			err, errlen,
			"link layers differ: local %s port %u is %s, the peer's port is %s: an RC "
			"connection needs both ends on the same link layer (Ethernet/RoCE or "
			"InfiniBand)",
			d->name, d->port, eth ? "Ethernet (RoCE)" : "InfiniBand",
			r->gid_type ? "Ethernet (RoCE)" : "InfiniBand");
		return -EPROTO;
	}
	if (eth && r->gid_type != d->gid_type) {
		kvl_verbs_errf(
			err, errlen,
			"GID types differ: local %s gid_index %d is %s, the peer's gid_index %u is "
			"%s: "
			"both ends must use the same RoCE version (set gid_index on one side to an "
			"entry of the other's type; show_gids lists them)",
			d->name, d->gid_index, kvl_verbs_gid_type_name(d->gid_type), r->gid_index,
			kvl_verbs_gid_type_name(r->gid_type));
		return -EPROTO;
	}
	if (eth && kvl_verbs_gid_zero((const union ibv_gid *)r->gid)) {
		kvl_verbs_errf(err, errlen,
			       "%s: the peer's GID is all zeros: its gid_index %u is empty",
			       d->name, r->gid_index);
		return -EINVAL;
	}
	if (!eth && r->lid == 0) {
		kvl_verbs_errf(err, errlen,
			       "%s: the peer's LID is 0: no subnet manager has configured its port "
			       "%u (start "
			       "opensm or the switch's SM there)",
			       d->name, r->port);
		return -EPROTO;
	}
	if (c->done_seq < c->nic_end && !c->broken) {
		kvl_verbs_errf(err, errlen,
			       "%s: %llu requests are still on QP 0x%x: reap them, or "
			       "kvl_verbs_fail_all() "
			       "first (a reset would lose their completions)",
			       d->name, (unsigned long long)(c->nic_end - c->done_seq),
			       c->qp->qp_num);
		return -EBUSY;
	}

	c->remote = *r;
	c->path_mtu = r->mtu < d->mtu ? r->mtu : d->mtu;
	c->connected = false;
	rc = kvl_verbs_qp_start(c, err, errlen);
	if (rc != 0)
		return rc;
	c->connected = true;
	c->broken = 0;
	c->phase = PH_RUN;
	c->resp_pending = false;
	c->ack_due = false;
	c->answered = false;
	/* Completions of the last incarnation still in the CQ are stale: by sequence number
	 * they all fall before done_seq and are dropped when polled. */
	if (r->mtu != d->mtu)
		kvl_verbs_errf(err, errlen,
			       "%s: path MTU %u bytes: local side allows %u, the peer (%s) %u; the "
			       "smaller "
			       "is used",
			       d->name, kvl_verbs_mtu_bytes(c->path_mtu),
			       kvl_verbs_mtu_bytes(d->mtu),
			       kvl_verbs_gid_str((const union ibv_gid *)r->gid, gs, sizeof(gs)),
			       kvl_verbs_mtu_bytes(r->mtu));
	return 0;
}

void kvl_verbs_conn_addrs(const struct kvl_verbs_conn *c, struct kvl_verbs_addr *local,
			  struct kvl_verbs_addr *remote)
{
	if (local != NULL)
		*local = c->local;
	if (remote != NULL)
		*remote = c->remote;
}

int kvl_verbs_set_remote(struct kvl_verbs_conn *c, const struct kvl_verbs_rseg *s, unsigned n)
{
	struct kvl_verbs_rseg *copy = NULL;

	if (n != 0 && s == NULL)
		return -EINVAL;
	for (unsigned i = 0; i < n; i++) {
		if (s[i].addr + s[i].len < s[i].addr)
			return -EINVAL; /* wraps: no real mapping does */
		for (unsigned j = 0; j < i; j++)
			if (s[j].id == s[i].id)
				return -EEXIST;
	}
	if (n != 0) {
		copy = malloc(n * sizeof(*copy));
		if (copy == NULL)
			return -ENOMEM;
		memcpy(copy, s, n * sizeof(*copy));
	}
	free(c->rseg);
	c->rseg = copy;
	c->n_rseg = n;
	c->rseg_last_id = UINT64_MAX;
	return 0;
}

/*
 * The completion channel the lcore sleeps on, and arming before it does. mlx5 direct: the
 * receive CQ through the provider, the send CQ with its own arm doorbell (the provider's
 * ibv_req_notify_cq would use a consumer index it no longer keeps); no UAR from mlx5dv for
 * the CQ: no events, and an idle lcore naps for the bounded time instead.
 */
int kvl_verbs_event_fd(const struct kvl_verbs_conn *c)
{
	return c->ch != NULL && (c->scq == NULL || c->dcq.uar != NULL) ? c->ch->fd : -1;
}

int kvl_verbs_arm(struct kvl_verbs_conn *c)
{
	int rc;

	if (kvl_verbs_event_fd(c) < 0)
		return -ENOTSUP;
	if (c->armed)
		return 0;
	rc = c->be->arm(c);
	if (rc != 0)
		return rc;
	c->armed = true;
	c->stats.arms++;
	return 0;
}

unsigned kvl_verbs_take_events(struct kvl_verbs_conn *c)
{
	struct ibv_cq *cq;
	void *ctx;
	unsigned n = 0, ns = 0;

	if (c->ch == NULL)
		return 0;
	while (ibv_get_cq_event(c->ch, &cq, &ctx) == 0) {
		if (c->scq != NULL && cq == c->scq) {
			kvl_mlx5_cq_event(&c->dcq);
			ns++;
		} else {
			n++;
		}
	}
	if (n != 0)
		ibv_ack_cq_events(c->cq, n);
	if (ns != 0)
		ibv_ack_cq_events(c->scq, ns);
	if (n + ns != 0) {
		c->armed = false;
		c->stats.cq_events += n + ns;
	}
	return n + ns;
}

const char *kvl_verbs_qp_state(struct kvl_verbs_conn *c)
{
	static const char *const names[] = {
		[IBV_QPS_RESET] = "RESET", [IBV_QPS_INIT] = "INIT", [IBV_QPS_RTR] = "RTR",
		[IBV_QPS_RTS] = "RTS",	   [IBV_QPS_SQD] = "SQD",   [IBV_QPS_SQE] = "SQE",
		[IBV_QPS_ERR] = "ERR",
	};
	struct ibv_qp_attr a;
	struct ibv_qp_init_attr ia;

	if (c == NULL || c->qp == NULL || ibv_query_qp(c->qp, &a, IBV_QP_STATE, &ia) != 0)
		return "?";
	if ((unsigned)a.qp_state >= sizeof(names) / sizeof(names[0]) || names[a.qp_state] == NULL)
		return "UNKNOWN";
	return names[a.qp_state];
}

int kvl_verbs_qp_path(struct kvl_verbs_conn *c, struct kvl_verbs_qp_path *p)
{
	struct ibv_qp_attr a;
	struct ibv_qp_init_attr ia;
	int rc;

	if (c == NULL || c->qp == NULL)
		return -EINVAL;
	rc = ibv_query_qp(c->qp, &a,
			  IBV_QP_PATH_MTU | IBV_QP_AV | IBV_QP_PKEY_INDEX | IBV_QP_TIMEOUT |
				  IBV_QP_RETRY_CNT,
			  &ia);
	if (rc != 0)
		return -rc;
	p->mtu = 128u << a.path_mtu;
	p->traffic_class = a.ah_attr.grh.traffic_class;
	p->service_level = a.ah_attr.sl;
	p->pkey_index = a.pkey_index;
	p->ack_timeout = a.timeout;
	p->retry_count = a.retry_cnt;
	return 0;
}
