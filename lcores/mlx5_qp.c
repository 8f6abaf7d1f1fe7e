/* SPDX-License-Identifier: BSD-3-Clause */
/* Requests over one mlx5 SQ + CQ: struct kvl_wr in, struct kvl_wc out, errors typed. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "mlx5.h"

/* One request, from post to reap. */
struct kvl_mlx5_req {
	uint64_t wr_id;
	uint32_t length;
	uint8_t op;
	bool nic;	/* given to the SQ; otherwise refused here, status already set */
	int32_t status; /* valid once done */
};

int kvl_mlx5_qp_init(struct kvl_mlx5_qp *qp, const struct kvl_mlx5_sq_attr *sq, void *cq_buf,
		     uint32_t cqe_cnt, uint32_t cqe_size, volatile uint32_t *cq_dbrec,
		     kvl_mlx5_resolve_fn resolve, void *resolve_ctx)
{
	int rc;

	memset(qp, 0, sizeof(*qp));
	if (resolve == NULL)
		return -EINVAL;
	rc = kvl_mlx5_cq_init(&qp->cq, cq_buf, cqe_cnt, cqe_size, cq_dbrec);
	if (rc != 0)
		return rc;
	/* Every WQE given to the NIC may come back as a CQE (flushes do): the CQ must hold as
	 * many as the SQ has WQEBBs, or the NIC could overrun it. */
	if (cqe_cnt < sq->wqe_cnt)
		return -EINVAL;
	rc = kvl_mlx5_sq_init(&qp->sq, sq);
	if (rc != 0)
		return rc;
	/* A request takes at least one WQEBB: the ring never needs more slots than that. */
	qp->depth = sq->wqe_cnt;
	qp->mask = qp->depth - 1;
	qp->ring = calloc(qp->depth, sizeof(*qp->ring));
	if (qp->ring == NULL) {
		kvl_mlx5_sq_fini(&qp->sq);
		return -ENOMEM;
	}
	qp->resolve = resolve;
	qp->resolve_ctx = resolve_ctx;
	return 0;
}

void kvl_mlx5_qp_fini(struct kvl_mlx5_qp *qp)
{
	kvl_mlx5_sq_fini(&qp->sq);
	free(qp->ring);
	qp->ring = NULL;
}

static void finish(struct kvl_mlx5_qp *qp, struct kvl_mlx5_req *r, int status)
{
	r->status = status;
	qp->stats.completed++;
	if (status == KVL_OK) {
		if (r->op == KVL_OP_WRITE)
			qp->stats.bytes_written += r->length;
		else
			qp->stats.bytes_read += r->length;
	} else if (status > 0 && status < KVL_STATUS_COUNT) {
		qp->stats.failed[status]++;
	}
}

/* Complete [done_seq, end) with @status: those the NIC held; refused ones keep theirs. */
static void finish_until(struct kvl_mlx5_qp *qp, uint64_t end, int status)
{
	for (; qp->done_seq < end; qp->done_seq++) {
		struct kvl_mlx5_req *r = &qp->ring[qp->done_seq & qp->mask];

		finish(qp, r, r->nic ? status : r->status);
	}
}

/* Refused requests at the head complete at once: nothing ahead of them is pending. */
static void finish_refused(struct kvl_mlx5_qp *qp)
{
	while (qp->done_seq != qp->post_seq) {
		struct kvl_mlx5_req *r = &qp->ring[qp->done_seq & qp->mask];

		if (r->nic)
			break;
		finish(qp, r, r->status);
		qp->done_seq++;
	}
}

unsigned kvl_mlx5_qp_enqueue(struct kvl_mlx5_qp *qp, const struct kvl_wr *wr, unsigned n)
{
	uint64_t room;
	unsigned i;

	if (qp->recovering)
		return 0;
	room = qp->depth - (qp->post_seq - qp->reap_seq);
	if (n > room)
		n = (unsigned)room;
	for (i = 0; i < n; i++) {
		const struct kvl_wr *w = &wr[i];
		struct kvl_mlx5_req *r = &qp->ring[qp->post_seq & qp->mask];
		struct kvl_mlx5_sge sge;
		struct kvl_mlx5_wqe q = { .wrid = qp->post_seq, .sge = &sge };
		int st = qp->broken;

		if (st == KVL_OK && w->op != KVL_OP_WRITE && w->op != KVL_OP_READ)
			st = KVL_ERR_PROTOCOL;
		if (st == KVL_OK)
			st = qp->resolve(qp->resolve_ctx, w, &sge, &q.raddr, &q.rkey);
		if (st == KVL_OK) {
			if (kvl_mlx5_sq_room(&qp->sq) < kvl_mlx5_wqe_bbs(w->length != 0))
				break; /* SQ full: the caller tries again after progress */
			q.opcode = w->op == KVL_OP_WRITE ? KVL_MLX5_OP_RDMA_WRITE
							 : KVL_MLX5_OP_RDMA_READ;
			/* No SGE for 0 bytes: a 0 byte_count means 2 GiB to the NIC. */
			sge.len = w->length;
			q.nsge = w->length != 0;
			if (kvl_mlx5_sq_post(&qp->sq, &q) != 0)
				st = KVL_ERR_PROTOCOL; /* cannot happen: checked above */
		}
		r->wr_id = w->wr_id;
		r->length = w->length;
		r->op = w->op;
		r->nic = st == KVL_OK;
		r->status = st;
		if (st == KVL_OK) {
			qp->nic_end = qp->post_seq + 1;
			qp->stats.posted++;
		} else {
			qp->stats.refused++;
		}
		qp->post_seq++;
	}
	finish_refused(qp);
	return i;
}

void kvl_mlx5_qp_flush(struct kvl_mlx5_qp *qp)
{
	kvl_mlx5_sq_signal_last(&qp->sq);
	kvl_mlx5_sq_ring(&qp->sq);
}

unsigned kvl_mlx5_qp_post(struct kvl_mlx5_qp *qp, const struct kvl_wr *wr, unsigned n)
{
	unsigned taken = kvl_mlx5_qp_enqueue(qp, wr, n);

	kvl_mlx5_qp_flush(qp);
	return taken;
}

static void on_cqe(struct kvl_mlx5_qp *qp, const struct kvl_mlx5_cqe_info *e)
{
	uint64_t seq;

	qp->stats.cqes++;
	if (e->opcode != KVL_MLX5_CQE_REQ && e->opcode != KVL_MLX5_CQE_REQ_ERR) {
		qp->stats.errors++; /* not a send completion: a CQ shared by mistake */
		return;
	}
	if (kvl_mlx5_sq_complete(&qp->sq, e->wqe_counter, &seq) != 0 || seq < qp->done_seq ||
	    seq >= qp->post_seq) {
		qp->stats.errors++;
		return;
	}
	if (e->status == KVL_OK) {
		finish_until(qp, seq + 1, KVL_OK);
	} else if (e->flush) {
		qp->stats.errors++;
		/* A flush with no error of ours before it: the QP went down for a reason outside
		 * these requests. The unsignaled ones before it are not known to have landed. */
		if (qp->err_cause == 0)
			qp->err_cause = KVL_ERR_CONN_LOST;
		qp->recovering = true;
		finish_until(qp, seq + 1, qp->err_cause);
	} else {
		qp->stats.errors++;
		qp->stats.last_syndrome = e->syndrome;
		qp->stats.last_vendor_synd = e->vendor_synd;
		/* RC reports an error on the oldest unfinished WQE: every one before it landed. */
		finish_until(qp, seq, KVL_OK);
		if (qp->err_cause == 0)
			qp->err_cause = e->status;
		qp->recovering = true;
		finish_until(qp, seq + 1, e->status);
	}
	finish_refused(qp);
	if (qp->recovering && qp->done_seq >= qp->nic_end)
		qp->need_restart = true; /* every WQE accounted for: the QP can be reset */
}

unsigned kvl_mlx5_qp_progress(struct kvl_mlx5_qp *qp, unsigned budget)
{
	struct kvl_mlx5_cqe_info e[32];
	unsigned total = 0;

	while (total < budget) {
		unsigned want = budget - total < 32 ? budget - total : 32;
		unsigned got = kvl_mlx5_cq_poll(&qp->cq, e, want);

		for (unsigned i = 0; i < got; i++)
			on_cqe(qp, &e[i]);
		total += got;
		if (got < want)
			break;
	}
	return total;
}

unsigned kvl_mlx5_qp_reap(struct kvl_mlx5_qp *qp, struct kvl_wc *wc, unsigned max)
{
	unsigned n = 0;

	while (n < max && qp->reap_seq != qp->done_seq) {
		const struct kvl_mlx5_req *r = &qp->ring[qp->reap_seq & qp->mask];

		wc[n].wr_id = r->wr_id;
		wc[n].status = r->status;
		wc[n].bytes = r->status == KVL_OK ? r->length : 0;
		n++;
		qp->reap_seq++;
	}
	return n;
}

unsigned kvl_mlx5_qp_outstanding(const struct kvl_mlx5_qp *qp)
{
	return (unsigned)(qp->post_seq - qp->reap_seq);
}

void kvl_mlx5_qp_restarted(struct kvl_mlx5_qp *qp)
{
	kvl_mlx5_sq_reset(&qp->sq);
	qp->recovering = false;
	qp->need_restart = false;
	qp->err_cause = 0;
	qp->stats.recoveries++;
}

void kvl_mlx5_qp_fail_all(struct kvl_mlx5_qp *qp, int status)
{
	qp->broken = status;
	/* The owner moves the QP to error: its flushes then report @status. */
	if (qp->err_cause == 0)
		qp->err_cause = status;
}
