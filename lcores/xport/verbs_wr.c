/* SPDX-License-Identifier: BSD-3-Clause */
/* Verbs transport, backend 1: WRs through ibv_wr_*, completions through the provider's CQ. */
#include <endian.h>
#include <errno.h>

#include "verbs_priv.h"

/*
 * The started CQE of @c->cqx (ibv_start_poll returned 0), then every next one, within
 * POLL_BUDGET. One CQE per start/end pair, never ibv_next_poll(): rxe's next_poll (rdma-core
 * 44) already consumes and unlocks when it finds the queue empty, and the ibv_end_poll() the
 * man page asks for then moves the consumer index past the producer: the CQ reads as full of
 * garbage. With selective signaling CQEs are few, and a single-threaded CQ takes no lock, so
 * the pair costs little. Out of line: an empty poll never enters it.
 */
static __attribute__((noinline)) unsigned poll_cqx_run(struct kvl_verbs_conn *c, unsigned n)
{
	struct ibv_poll_cq_attr pa = { .comp_mask = 0 };

	do {
		uint64_t seq = c->cqx->wr_id;
		enum ibv_wc_status st = c->cqx->status;
		uint32_t vendor = st == IBV_WC_SUCCESS ? 0 : ibv_wc_read_vendor_err(c->cqx);

		if (seq & RECV_TAG) {
			bool imm = st == IBV_WC_SUCCESS &&
				   ibv_wc_read_opcode(c->cqx) == IBV_WC_RECV_RDMA_WITH_IMM;
			uint32_t v = imm ? ibv_wc_read_imm_data(c->cqx) : 0;
			uint32_t len = imm ? ibv_wc_read_byte_len(c->cqx) : 0;

			ibv_end_poll(c->cqx);
			kvl_verbs_on_recv(c, seq, st, imm, v, len);
		} else {
			ibv_end_poll(c->cqx);
			kvl_verbs_on_cqe(c, seq, kvl_wc_status(st), st == IBV_WC_WR_FLUSH_ERR, st,
					 vendor);
		}
		n++;
	} while (n < POLL_BUDGET && ibv_start_poll(c->cqx, &pa) == 0);
	return n;
}

/* The provider's CQ without the extended interface: ibv_poll_cq, 16 at a time. */
static __attribute__((noinline)) unsigned poll_cq_run(struct kvl_verbs_conn *c, unsigned n)
{
	for (;;) {
		struct ibv_wc wc[16];
		int r = ibv_poll_cq(c->cq, 16, wc);

		for (int i = 0; i < r; i++) {
			if (wc[i].wr_id & RECV_TAG)
				kvl_verbs_on_recv(c, wc[i].wr_id, wc[i].status,
						  wc[i].status == IBV_WC_SUCCESS &&
							  wc[i].opcode == IBV_WC_RECV_RDMA_WITH_IMM,
						  wc[i].imm_data, wc[i].byte_len);
			else
				kvl_verbs_on_cqe(c, wc[i].wr_id, kvl_wc_status(wc[i].status),
						 wc[i].status == IBV_WC_WR_FLUSH_ERR, wc[i].status,
						 wc[i].vendor_err);
		}
		if (r > 0)
			n += (unsigned)r;
		if (r < 16 || n >= POLL_BUDGET)
			return n;
	}
}

/*
 * Completions from the provider's CQ: every completion of a verbs-backend connection, the
 * receives of an mlx5 one. @n: work done so far in this progress call (POLL_BUDGET caps it).
 * An empty CQ costs the provider's start_poll and nothing more.
 */
static inline unsigned poll_provider(struct kvl_verbs_conn *c, unsigned n)
{
	if (c->cqx != NULL) {
		struct ibv_poll_cq_attr pa = { .comp_mask = 0 };

		if (n >= POLL_BUDGET || ibv_start_poll(c->cqx, &pa) != 0)
			return n;
		return poll_cqx_run(c, n);
	}
	return poll_cq_run(c, n);
}

unsigned kvl_verbs_poll_provider(struct kvl_verbs_conn *c, unsigned n)
{
	return poll_provider(c, n);
}

/* The verbs backend's only CQ, polled inline: an empty poll is most of what an idle lcore
 * does. */
static unsigned wr_poll(struct kvl_verbs_conn *c)
{
	c->stats.cq_polls++;
	return poll_provider(c, 0);
}

/* The WRs [from, last] the QP takes, inside one ibv_wr_start/complete: one doorbell. On
 * failure none of them reached the NIC. */
static void wr_post(struct kvl_verbs_conn *c, uint64_t from, uint64_t last, unsigned every)
{
	struct kvl_verbs_batch b;
	uint64_t first = 0;
	int rc;

	kvl_verbs_batch_start(c, &b, from);
	ibv_wr_start(c->qpx);
	for (uint64_t q = from; q <= last; q++) {
		const struct slot *s = &c->ring[q & c->mask];
		bool signaled;

		if (!s->nic)
			continue;
		if (b.nic == 0)
			first = q;
		signaled = kvl_verbs_batch_signal(&b, every, q == last);
		c->qpx->wr_id = q;
		c->qpx->wr_flags = signaled ? IBV_SEND_SIGNALED : 0;
		if (s->op == KVL_OP_READ)
			ibv_wr_rdma_read(c->qpx, s->rkey, s->raddr);
		else if (s->flags & KVL_WR_NOTIFY)
			ibv_wr_rdma_write_imm(c->qpx, s->rkey, s->raddr, htobe32(s->imm));
		else
			ibv_wr_rdma_write(c->qpx, s->rkey, s->raddr);
		ibv_wr_set_sge_list(c->qpx, s->n_sge, s->sg);
		kvl_verbs_batch_took(&b, s, q);
	}
	c->stats.posts++;
	rc = ibv_wr_complete(c->qpx);
	if (rc == 0) {
		kvl_verbs_batch_end(c, &b);
		c->nic_end = b.written + 1;
		c->stats.posted += b.nic;
		c->stats.signaled += b.sig;
		c->stats.doorbells++;
		return;
	}
	/* The whole posting was dropped (QP not in RTS, a WR the provider refused). */
	for (uint64_t q = first; q <= b.written; q++) {
		struct slot *s = &c->ring[q & c->mask];

		if (s->nic) {
			s->nic = false;
			s->status = KVL_ERR_CONN_LOST;
			c->n_refused++;
		}
	}
	c->since_sig = 0;
}

static int wr_arm(struct kvl_verbs_conn *c)
{
	int rc = ibv_req_notify_cq(c->cq, 0);

	return rc != 0 ? -(rc > 0 ? rc : EIO) : 0;
}

/* The provider cleans its CQ of a reset QP's entries itself. */
static void wr_reset(struct kvl_verbs_conn *c)
{
	(void)c;
}

const struct kvl_verbs_ops kvl_verbs_ops_wr = {
	.name = "verbs",
	.post = wr_post,
	.enqueue = kvl_verbs_enqueue_slots,
	.poll = wr_poll,
	.arm = wr_arm,
	.reset = wr_reset,
};
