/* SPDX-License-Identifier: BSD-3-Clause */
/* Verbs transport, backend 2: mlx5 direct WQEs, doorbells and send-CQ polling (mlx5/). */
#include <errno.h>
#include <stddef.h>
#include <infiniband/mlx5dv.h>
#include <stdio.h>
#include <string.h>

#include "verbs_priv.h"

_Static_assert(sizeof(struct kvl_mlx5_sge) == sizeof(struct ibv_sge) &&
		       offsetof(struct kvl_mlx5_sge, addr) == offsetof(struct ibv_sge, addr) &&
		       offsetof(struct kvl_mlx5_sge, len) == offsetof(struct ibv_sge, length) &&
		       offsetof(struct kvl_mlx5_sge, lkey) == offsetof(struct ibv_sge, lkey),
	       "a slot's ibv_sge list is encoded as kvl_mlx5_sge");

/* The device's shared state of the doorbell register @reg (BlueFlame buffers of @size), made
 * on first use; NULL when the table is full or @reg was seen with another size. */
static struct kvl_mlx5_bf *bf_register(struct kvl_verbs_dev *d, void *reg, uint32_t size)
{
	for (unsigned i = 0; i < d->n_bf; i++)
		if (d->bf[i].reg == reg)
			return d->bf[i].size == size ? &d->bf[i] : NULL;
	if (d->n_bf == MAX_BF_REGS)
		return NULL;
	d->bf[d->n_bf] = (struct kvl_mlx5_bf){ .reg = reg, .size = size };
	return &d->bf[d->n_bf++];
}

/*
 * mlx5 direct backend: a send CQ of its own (the fast path reads it; rdma-core leaves a CQ
 * read through mlx5dv alone) and the QP created through verbs, then read through mlx5dv and
 * checked (kvl_mlx5_hw_from_verbs). Receives stay on c->cq. 0, or -errno with the reason.
 */
int kvl_verbs_mlx5_setup(struct kvl_verbs_conn *c, struct ibv_qp_init_attr_ex *qa, char *err,
			 size_t errlen)
{
	struct kvl_verbs_dev *d = c->d;
	unsigned bbs = kvl_mlx5_wqe_bbs(c->max_sge);
	/* One CQE per WQE at most (flushes included), two windows' worth as for verbs */
	unsigned cqe = 2 * c->depth * bbs;
	char why[KVL_VERBS_ERR_LEN] = "";
	struct kvl_mlx5_hw hw;
	int rc;

	if (cqe > (unsigned)d->max_cqe)
		cqe = (unsigned)d->max_cqe;
	/* On the connection's completion channel too: the lcore arms it itself (kvl_verbs_arm) */
	c->scq = ibv_create_cq(d->ctx, (int)cqe, NULL, c->ch, 0);
	if (c->scq == NULL) {
		rc = -(errno ? errno : EIO);
		kvl_verbs_errf(err, errlen, "%s: mlx5: cannot create a send CQ of %u entries: %s",
			       d->name, cqe, strerror(-rc));
		return rc;
	}
	qa->send_cq = c->scq;
	qa->comp_mask = IBV_QP_INIT_ATTR_PD; /* no ibv_wr_* ops: WQEs are written here */
	qa->send_ops_flags = 0;
	/* Scatter to CQE off: a small READ must land in its buffer, never inside a CQE that
	 * this poller does not copy out (rdma-core's poll would). */
	c->qp = mlx5dv_create_qp(d->ctx, qa,
				 &(struct mlx5dv_qp_init_attr){
					 .comp_mask = MLX5DV_QP_INIT_ATTR_MASK_QP_CREATE_FLAGS,
					 .create_flags = MLX5DV_QP_CREATE_DISABLE_SCATTER_TO_CQE,
				 });
	if (c->qp == NULL) {
		rc = -(errno ? errno : EIO);
		kvl_verbs_errf(err, errlen, "%s: mlx5: cannot create an RC QP of depth %u: %s",
			       d->name, c->depth, strerror(-rc));
		goto undo;
	}
	rc = kvl_mlx5_hw_from_verbs(c->qp, c->scq, &hw, why, sizeof(why));
	if (rc == 0 && hw.sq.wqe_cnt < c->depth * bbs) {
		rc = -ENOTSUP;
		snprintf(why, sizeof(why), "mlx5: SQ of %u WQEBBs cannot hold %u WQEs of %u SGEs",
			 hw.sq.wqe_cnt, c->depth, c->max_sge);
	}
	if (rc == 0) {
		if (d->shut_up_bf)
			hw.sq.bf_size = 0; /* the provider said BlueFlame is off: doorbells only */
		hw.sq.bf = bf_register(d, hw.sq.bf_reg, hw.sq.bf_size);
		if (hw.sq.bf == NULL) {
			rc = -ENOTSUP;
			snprintf(why, sizeof(why),
				 "mlx5: doorbell register %p: %u registers in use already, or seen "
				 "with another BlueFlame size",
				 hw.sq.bf_reg, d->n_bf);
		}
	}
	if (rc == 0) {
		rc = kvl_mlx5_sq_init(&c->sq, &hw.sq);
		if (rc == 0)
			rc = kvl_mlx5_cq_init(&c->dcq, hw.cq_buf, hw.cqe_cnt, hw.cqe_size,
					      hw.cq_dbrec);
		c->dcq.uar = hw.cq_uar;
		c->dcq.cqn = hw.cqn;
		if (rc != 0) {
			kvl_mlx5_sq_fini(&c->sq);
			snprintf(why, sizeof(why), "mlx5: SQ/CQ refused by the fast path: %s",
				 strerror(-rc));
		}
	}
	if (rc != 0) {
		kvl_verbs_errf(err, errlen, "%s: %s", d->name, why);
		goto undo;
	}
	c->be = &kvl_verbs_ops_mlx5;
	return 0;
undo:
	if (c->qp != NULL)
		ibv_destroy_qp(c->qp);
	c->qp = NULL;
	ibv_destroy_cq(c->scq);
	c->scq = NULL;
	return rc;
}

/* After the QP went to RESET: what the CQ still holds belongs to the last incarnation
 * (rdma-core cleans a CQ of a reset QP's entries, but not one read through mlx5dv). */
static void mlx5_reset(struct kvl_verbs_conn *c)
{
	struct kvl_mlx5_cqe_info e[32];
	unsigned got;

	kvl_mlx5_sq_reset(&c->sq);
	/* written, never rung: the SQ forgot them; replays come from the slots */
	c->wqe_end = 0;
	c->enq_end = 0;
	while ((got = kvl_mlx5_cq_poll(&c->dcq, e, 32)) != 0)
		c->stats.reset_discards += got;
}

/* One CQE that is not a plain success (an error, a flush, a format not read here, a stray):
 * decoded in full and handed on as it is. */
static void cqe_other(struct kvl_verbs_conn *c)
{
	struct kvl_mlx5_cqe_info e;
	uint64_t seq;

	kvl_mlx5_cq_take(&c->dcq, &e);
	if ((e.opcode != KVL_MLX5_CQE_REQ && e.opcode != KVL_MLX5_CQE_REQ_ERR) ||
	    kvl_mlx5_sq_complete(&c->sq, e.wqe_counter, &seq) != 0) {
		c->stats.stray_cqes++;
		return;
	}
	if (e.opcode == KVL_MLX5_CQE_REQ && e.status != KVL_OK && seq >= c->done_seq &&
	    seq < c->post_seq) {
		/* A success CQE in a form not read here (data scattered into it, a compressed
		 * block): the request fails rather than completing with bytes that never
		 * arrived, and the QP goes to error so that the rest come back flushed and the two
		 * ends resync. */
		struct ibv_qp_attr a = { .qp_state = IBV_QPS_ERR };

		(void)ibv_modify_qp(c->qp, &a, IBV_QP_STATE);
	}
	kvl_verbs_on_cqe(c, seq, e.status, e.flush,
			 e.opcode == KVL_MLX5_CQE_REQ_ERR
				 ? (uint32_t)kvl_mlx5_syndrome_wc(e.syndrome)
			 : e.status != KVL_OK ? IBV_WC_GENERAL_ERR
					      : IBV_WC_SUCCESS,
			 e.vendor_synd);
}

/*
 * mlx5 direct: send completions straight from the CQ, by owner bit. A CQE names the WQE it
 * completes by its SQ index; the SQ gives back the post sequence number stored there. A run
 * of plain successes is read for its WQE index alone and completes as one (RC completes in
 * order: the newest covers the rest); anything else is decoded in full, in its place.
 */
static __attribute__((noinline)) unsigned poll_direct(struct kvl_verbs_conn *c,
						      const struct kvl_mlx5_cqe64 *cqe)
{
	struct kvl_mlx5_cq *cq = &c->dcq;
	uint64_t seq = 0;
	unsigned n = 0, ok = 0, fast = 0;

	/* @cqe: the first, which mlx5_poll's peek found */
	do {
		uint64_t s;

		n++;
		if (kvl_mlx5_cqe_req_ok(cqe) &&
		    kvl_mlx5_sq_complete(&c->sq, be16toh(cqe->wqe_counter), &s) == 0) {
			cq->cq_ci++;
			seq = s;
			ok++;
			fast++;
			continue;
		}
		/* in order: the successes before it first */
		if (ok != 0)
			kvl_verbs_on_cqes_ok(c, seq, ok);
		ok = 0;
		cqe_other(c);
	} while (n < POLL_BUDGET && (cqe = kvl_mlx5_cq_peek(cq)) != NULL);
	if (ok != 0)
		kvl_verbs_on_cqes_ok(c, seq, ok);
	cq->stats.cqes += fast; /* cqe_other counted its own */
	kvl_mlx5_cq_set_ci(cq);
	return n;
}

/* Send completions by owner bit, then the receives through the provider. */
static unsigned mlx5_poll(struct kvl_verbs_conn *c)
{
	const struct kvl_mlx5_cqe64 *cqe = kvl_mlx5_cq_peek(&c->dcq);

	c->stats.cq_polls++;
	c->dcq.stats.polls++;
	/* an empty send CQ: one owner-byte test, no frame for the CQE loop */
	return kvl_verbs_poll_provider(c, cqe != NULL ? poll_direct(c, cqe) : 0);
}

/*
 * The doorbell for the WQEs written since the last one, [nic_end, wqe_end): the newest made
 * signaled if it is not (the batch's last must make a CQE, or those before it would wait for
 * ever), then the SQ's doorbell record and register.
 */
static void mlx5_ring(struct kvl_verbs_conn *c)
{
	struct kvl_mlx5_sq *sq = &c->sq;

	if (kvl_mlx5_sq_signal_last(sq) == 1) {
		c->stats.signaled++;
		c->since_sig = 0;
	}
	c->stats.posts++;
	kvl_mlx5_sq_ring(sq);
	c->stats.doorbells = sq->stats.doorbells;
	c->stats.bf_copies = sq->stats.bf_copies;
	c->nic_end = c->wqe_end;
}

/*
 * The WRs [from, last] the QP takes as WQEs in the SQ, from their slots (a replay, or
 * requests the one-pass enqueue left to post_range), then one doorbell. The SQ's counters
 * stay in locals over the batch and are committed once (kvl_mlx5_sq_commit).
 */
static void mlx5_post(struct kvl_verbs_conn *c, uint64_t from, uint64_t last, unsigned every)
{
	struct kvl_mlx5_sq *sq = &c->sq;
	struct kvl_verbs_wqes wq = { .e = kvl_mlx5_sq_enc_start(sq),
				     .pi = sq->sq_pi,
				     .room = kvl_mlx5_sq_room(sq) };
	struct kvl_verbs_batch b;
	struct slot *ring = c->ring;
	uint64_t mask = c->mask;

	kvl_verbs_batch_start(c, &b, from);
	for (uint64_t q = from; q <= last; q++) {
		struct slot *s = &ring[q & mask];

		if (s->nic)
			kvl_verbs_mlx5_take(c, &wq, &b, s, q, every, q == last);
	}
	kvl_verbs_batch_end(c, &b);
	if (b.nic == 0)
		return;
	kvl_mlx5_sq_commit(sq, &wq.e, wq.pi, b.nic, b.sig, wq.ctrl, wq.nbb);
	c->wqe_end = b.written + 1;
	c->stats.posted += b.nic;
	c->stats.signaled += b.sig;
	mlx5_ring(c);
}

/* The receive CQ through the provider, the send CQ with its own arm doorbell (the provider's
 * ibv_req_notify_cq would use a consumer index it no longer keeps). */
static int mlx5_arm(struct kvl_verbs_conn *c)
{
	int rc = ibv_req_notify_cq(c->cq, 0);

	if (rc != 0)
		return -(rc > 0 ? rc : EIO);
	kvl_mlx5_cq_arm(&c->dcq);
	return 0;
}

const struct kvl_verbs_ops kvl_verbs_ops_mlx5 = {
	.name = "mlx5",
	.post = mlx5_post,
	.enqueue = kvl_verbs_enqueue_mlx5,
	.ring = mlx5_ring,
	.poll = mlx5_poll,
	.arm = mlx5_arm,
	.reset = mlx5_reset,
};
