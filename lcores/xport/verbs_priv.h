/* SPDX-License-Identifier: BSD-3-Clause */
/* Private to the verbs transport's files: the device, connection and request state they share. */
#ifndef KVL_LCORES_VERBS_PRIV_H
#define KVL_LCORES_VERBS_PRIV_H

#include <infiniband/verbs.h>
#include <stdbool.h>
#include <stdint.h>

#include "mlx5.h"
#include "sysfs.h"
#include "verbs.h"

/*
 * The verbs transport (verbs.h) in files by job:
 *   verbs_dev.c    the device: open, port, GID choice (sysfs gid_attrs), backend choice
 *   verbs_mr.c     memory registration and the local-range (lkey) lookup
 *   verbs_qp.c     QP and CQ setup, the QP state machine, connect, completion events
 *   verbs_ring.c   the request ring: checks, posting order, completions, reap
 *   verbs_wr.c     backend 1: ibv_wr_* posting and provider CQ polling (any device)
 *   verbs_mlx5.c   backend 2: mlx5 direct WQEs and CQ polling (lcores/xport/mlx5)
 *   verbs_resync.c QP_RESYNC: both ends restart at fresh PSNs after an error
 */

/*
 * Regions registered per device. A fixed table whose entries are never reused lets lcores
 * check local ranges without a lock while the control thread registers more (see n_mr).
 */
#define MAX_MRS 128
/* Doorbell registers the direct backend's QPs of one device ring: at most one per QP. */
#define MAX_BF_REGS 128
/* CQEs handled per progress call: one busy connection cannot hold its lcore. */
#define POLL_BUDGET 64
/*
 * Outstanding RDMA READs per QP, both as initiator and as responder. The peer's responder
 * resources are not exchanged, so both ends cap at ConnectX's limit: an initiator asking for
 * more than the responder has would see its READs rejected (REM_INV_REQ).
 */
#define RD_ATOMIC_MAX 16
#define HOP_LIMIT     64 /* RoCE v2 crosses routers; v1 ignores it */
#define MIN_RNR_TIMER 12 /* 0.64 ms: only SENDs meet RNR, and we post none */
/* The defaults of [nic.*] ack_timeout and retry_count. */
#define ACK_TIMEOUT 15 /* 4.096 us << 15 = 134 ms per try: an emulated or lossy fabric */
/*
 * Transport retries before RETRY_EXC_ERR. Not 7: soft-RoCE (kernel rxe_comp.c) reads
 * retry_cnt 7 as "retry for ever", as the spec does only for rnr_retry, and a dead peer would
 * never be reported. 6 means 6 everywhere: about 0.9 s to detect one at ACK_TIMEOUT.
 */
#define RETRY_CNT 6
#define RNR_RETRY 7 /* 7 = retry for ever */

#define RECV_TAG	 (1ull << 63) /* wr_id of a receive: never a post sequence number */
#define RESYNC_RESEND_NS (100ull * 1000 * 1000)
/*
 * A drain waits for the receive queue's flush too: the flushes say the QP's responder has run
 * in the error state and let go of what the peer sent before. Resetting a QP whose responder
 * is still at work is what soft-RoCE (Linux 6.1's rxe) does not survive: the restarted QP
 * reads RTS yet drops every request the peer sends it (seen in the rdma suite's crossed
 * resync under load: the peer's replays retried to RETRY_EXC, resync after resync). A
 * provider that never flushes receives is waited for this long, then the drain goes on.
 */
#define RQ_DRAIN_NS (250ull * 1000 * 1000)
/*
 * A drain that never ends (a flush the provider never writes, a completion we never saw)
 * fails the connection after this long: bounded, like every other failure.
 */
#define DRAIN_NS (10000ull * 1000 * 1000)
/*
 * The stall watchdog: WRs at the NIC and not one completion for stall_ns. A QP the NIC has
 * given up on says so itself (RETRY_EXC after retry_cnt + 1 ACK timeouts); one that says
 * nothing at all is wedged (soft-RoCE under load: 16 WRITEs outstanding, every packet sent
 * and answered, no CQE and no retransmission for 30 s, rdma e2e). It is put in error, its
 * WRs come back flushed and go again once both ends resync. stall_ns is twice the NIC's own
 * retry bound, at least STALL_MIN_NS; the clock is read once every STALL_POLLS empty polls.
 */
#define STALL_MIN_NS (10000ull * 1000 * 1000)
#define STALL_POLLS  1024u

struct mr_ent {
	uintptr_t base;
	uint64_t len;
	uint32_t lkey;
	struct ibv_mr *mr;
};

struct kvl_verbs_dev {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	char name[64];
	uint8_t port;
	uint8_t link_layer; /* IBV_LINK_LAYER_* */
	int gid_index;
	int gid_type; /* 0 IB, 1 RoCE v1, 2 RoCE v2 */
	union ibv_gid gid;
	uint16_t lid;
	uint8_t mtu; /* enum ibv_mtu: the port's active MTU capped by the options */
	uint32_t max_msg_sz;
	int max_qp_wr, max_cqe, max_sge;
	/* soft-RoCE: rdma-core's rxe ibv_wr_set_sge_list() sums the first SGE's length num_sge
	 * times (fixed upstream, rdma-core PR #1744, not in Debian 12's 44): a list is posted as
	 * equal pieces so that the sum comes out right */
	bool sge_equal_only;
	/* mlx5 direct backend: connections write WQEs into the SQ and poll the send CQ
	 * themselves (lcores/xport/mlx5/mlx5_*.c); verbs calls only set QPs up, change their state
	 * and handle receives. Cleared, with the reason in backend_note, when a connection's setup
	 * found something the fast path does not handle and the backend is auto. */
	bool direct;
	bool shut_up_bf; /* MLX5_SHUT_UP_BF: 8-byte doorbells only (kvl_mlx5_env_check) */
	int backend;	 /* enum kvl_verbs_backend as asked */
	/* written once (at open, or when auto falls back), then published through @note: the
	 * control thread may write it while telemetry reads it */
	char backend_note[KVL_VERBS_ERR_LEN + 16];
	const char *note;
	uint8_t traffic_class, service_level;
	uint16_t pkey_index;
	uint8_t ack_timeout, retry_cnt;
	uint8_t rd_atomic, init_rd_atomic;
	uint32_t max_cq_count, max_cq_period;
	/* mlx5 direct: the doorbell registers (UAR BlueFlame pairs) the device's QPs were given,
	 * each with the one toggle every SQ on it shares (struct kvl_mlx5_bf): rdma-core hands the
	 * same register to several QPs once a context has more than 16. Entries are never
	 * removed (the registers live as long as the context); the control thread adds them
	 * while the lcore rings through those it has, which never move. */
	unsigned n_bf;
	struct kvl_mlx5_bf bf[MAX_BF_REGS];
	/* Entries [0, n_mr) are complete: a registration fills its entry, then publishes it with
	 * a release store of n_mr; lcores load n_mr with acquire. One registering thread. */
	unsigned n_mr;
	struct mr_ent mr[MAX_MRS];
};

/* One request, from post to reap: all it takes to post it again after a resync. */
struct slot {
	uint64_t sum[2]; /* bytes written, read by the requests the QP took, up to this one */
	uint64_t raddr;
	uint32_t rkey, imm; /* the length is its kvl_wc's bytes (c->wcs) until it completes */
	uint8_t op, flags, n_sge;
	bool nic;	/* taken for the QP; otherwise refused here and status is already set */
	int32_t status; /* valid once completed */
	struct ibv_sge sg[KVL_WR_MAX_SGE];
};

/*
 * Where a connection stands after an error. Both QPs of an RC connection must restart
 * together and at fresh PSNs: a QP that restarted alone at its old PSN would have its WRITEs
 * taken by a live peer for duplicates, acknowledged and dropped (IB spec 9.9.2), and a peer
 * in ERR drops everything. So the two ends agree over the control path (KVL_RESYNC_REQ/ACK).
 */
enum phase {
	PH_RUN,	  /* RTS (or never connected) */
	PH_DRAIN, /* QP in ERR: waiting for the flush of every WR it holds */
	PH_WAIT,  /* drained, our REQ sent: waiting for the peer's ACK with its fresh PSN */
};

struct kvl_verbs_conn;

/*
 * A backend: how WRs reach the NIC and send completions come back. Chosen once per
 * connection (kvl_verbs_conn_new); everything above the wire (checks, the ring, signaling,
 * resync, receives) is shared.
 */
struct kvl_verbs_ops {
	const char *name;
	/* Hand the slots [from, last] the QP takes (s->nic) to it as one batch, one doorbell,
	 * signaled one in @every and always at @last; account posts, posted, signaled. */
	void (*post)(struct kvl_verbs_conn *c, uint64_t from, uint64_t last, unsigned every);
	/* kvl_verbs_enqueue: check @n requests into their slots and, where the backend can,
	 * write each one's WQE in the same pass (rung by the next flush: @ring). */
	unsigned (*enqueue)(struct kvl_verbs_conn *c, const struct kvl_wr *wr, unsigned n);
	/* Ring the doorbell for the WQEs enqueue wrote, [nic_end, wqe_end): the newest made
	 * signaled; they become the NIC's (nic_end = wqe_end). NULL: enqueue writes none. */
	void (*ring)(struct kvl_verbs_conn *c);
	/* Poll send and receive completions (at most POLL_BUDGET): the work done. */
	unsigned (*poll)(struct kvl_verbs_conn *c);
	/* Ask for one completion event on each of the connection's CQs: 0 or -errno. */
	int (*arm)(struct kvl_verbs_conn *c);
	/* The QP just went through RESET: forget what its last incarnation left. */
	void (*reset)(struct kvl_verbs_conn *c);
};

extern const struct kvl_verbs_ops kvl_verbs_ops_wr;
extern const struct kvl_verbs_ops kvl_verbs_ops_mlx5;

struct kvl_verbs_conn {
	struct kvl_verbs_dev *d;
	struct ibv_comp_channel *ch; /* completion events, for an lcore that sleeps; or NULL */
	struct ibv_cq_ex *cqx;	     /* NULL when the provider has only ibv_create_cq */
	struct ibv_cq *cq;
	bool armed; /* ibv_req_notify_cq() done, its event not taken yet */
	struct ibv_qp *qp;
	struct ibv_qp_ex *qpx; /* verbs backend */
	/* The backend, chosen once when the QP was made (verbs_wr.c or verbs_mlx5.c): the data
	 * path calls it through these pointers and never asks which it is. */
	const struct kvl_verbs_ops *be;
	/* mlx5 direct backend: the SQ and the send CQ as plain memory; receives stay on @cq,
	 * through verbs (they are rare: one per notice). */
	struct ibv_cq *scq;
	struct kvl_mlx5_sq sq;
	struct kvl_mlx5_cq dcq;
	unsigned depth, signal_every, since_sig;
	unsigned max_sge; /* SGEs per WR: KVL_WR_MAX_SGE, or fewer if the device has fewer */
	/* Receives: one per WRITE_WITH_IMM the peer may have in flight (each consumes one; none
	 * posted would stall the peer on RNR). They carry no buffer: the data lands by RDMA. */
	unsigned rq_depth, rq_posted;
	uint32_t rq_epoch;	/* in the receives' wr_id: flushes of an emptied queue are stale */
	struct kvl_note *notes; /* immediates received, for kvl_verbs_notes() */
	unsigned notes_mask, notes_head, notes_tail;
	struct kvl_verbs_addr local, remote;
	uint8_t path_mtu;
	bool connected;

	/*
	 * Requests: the post sequence number is the WR's wr_id on the QP and (masked) its slot.
	 * reap <= done <= post, post - reap <= depth. [reap, done) waits to be reaped, [done,
	 * post) is in flight (or refused behind one in flight: completions leave in post order).
	 * RC completes in order, so a CQE for seq s also completes every unsignaled WR before s.
	 */
	struct slot *ring;
	struct kvl_wc *wcs; /* by slot: the completion reap hands out */
	uint64_t mask;
	uint64_t post_seq, done_seq, reap_seq;
	uint64_t nic_end; /* seq + 1 of the newest WR given to the QP; it is always signaled */
	/* seq + 1 of the newest WR whose WQE enqueue wrote (be->ring): above nic_end until the
	 * doorbell, when the NIC may not read them yet; 0 after a reset */
	uint64_t wqe_end;
	/* post_seq as the last one-pass enqueue left it: every request below it is in the SQ or
	 * refused, so the next burst may go the same way; 0 after a reset */
	uint64_t enq_end;
	int broken;	    /* fail_all or a failed restart: posts complete at once with this */
	unsigned n_refused; /* slots in [done_seq, post_seq) the QP did not take */
	uint64_t sum_post[2], sum_done[2]; /* the slots' byte sums at post_seq, done_seq */

	/* Resync (see enum phase). Requests the QP flushed stay in [done_seq, post_seq) and
	 * are posted again once both ends run: RDMA WRITE and READ may run twice unharmed. */
	enum phase phase;
	uint64_t flush_end;	    /* seq + 1 of the newest error or flush CQE of this drain */
	uint64_t rq_drain_deadline; /* PH_DRAIN: when to stop waiting for the receive flushes */
	uint64_t drain_deadline;    /* PH_DRAIN: when it fails the connection (DRAIN_NS) */
	/* the stall watchdog (STALL_MIN_NS): done_seq when the silence began, and since when */
	uint64_t stall_done_seq, stall_since_ns, stall_ns;
	unsigned stall_polls;
	bool resp_pending;     /* the peer's REQ came: answer it once drained */
	uint32_t peer_new_psn; /* its fresh PSN */
	uint32_t my_new_psn;   /* PH_WAIT: the PSN our REQ offers */
	bool ack_due;	       /* an ACK to send: ack_psn, echoing ack_echo */
	uint32_t ack_psn, ack_echo;
	bool answered; /* the last REQ we restarted for: a repeat gets the same ACK */
	uint64_t wait_deadline, next_req_ns, resync_timeout_ns;

	struct kvl_verbs_rseg *rseg;
	unsigned n_rseg;
	/* A copy of the peer's segment the last request went to, and its id (UINT64_MAX: none;
	 * set_remote forgets it): a stream stays in one. */
	struct kvl_verbs_rseg rseg_last;
	uint64_t rseg_last_id;
	/* A copy of the region the last local range was in (regions never change once
	 * published); zero-length, so matching nothing, until the first lookup. */
	struct mr_ent mr_last;
	/* posted: WRs given to the QP; completed: requests completed, refused ones included;
	 * errors: error CQEs, flushes included; failed[]: requests by their error status. */
	struct kvl_verbs_stats stats;
};

/* What a backend's post counts over its batch, in locals: written back once, at its end
 * (kvl_verbs_batch_end), not per WQE. */
struct kvl_verbs_batch {
	uint64_t from;	  /* the first slot of the batch */
	uint64_t old_end; /* nic_end before the batch: slots below it are replays */
	uint64_t written; /* the newest slot taken */
	unsigned nic, sig, since_sig, sge_wrs;
};

static inline void kvl_verbs_batch_start(const struct kvl_verbs_conn *c, struct kvl_verbs_batch *b,
					 uint64_t from)
{
	*b = (struct kvl_verbs_batch){ .from = from,
				       .old_end = c->nic_end,
				       .since_sig = c->since_sig };
}

/* Whether the next WR the QP takes is signaled: one in @every, and always the batch's @last. */
static inline bool kvl_verbs_batch_signal(struct kvl_verbs_batch *b, unsigned every, bool last)
{
	bool signaled = ++b->since_sig >= every || last;

	if (signaled) {
		b->since_sig = 0;
		b->sig++;
	}
	return signaled;
}

/* The QP took slot @q. */
static inline void kvl_verbs_batch_took(struct kvl_verbs_batch *b, const struct slot *s, uint64_t q)
{
	b->nic++;
	b->written = q;
	b->sge_wrs += s->n_sge > 1;
}

static inline void kvl_verbs_batch_end(struct kvl_verbs_conn *c, const struct kvl_verbs_batch *b)
{
	c->since_sig = b->since_sig;
	c->stats.sge_wrs += b->sge_wrs;
	/* replays (a resync's) are rare: counted here, not per WQE */
	for (uint64_t q = b->from; q < b->old_end && q <= b->written; q++)
		c->stats.replayed += c->ring[q & c->mask].nic;
}

/*
 * The WQE of slot @s (post sequence number @q) at WQEBB counter @pi: what both the one-pass
 * enqueue and a replay from the slots write. check() made it one the SQ takes (opcode, SGE
 * count, no 0-byte SGE). Returns the WQEBBs it took.
 */
static inline unsigned kvl_verbs_mlx5_put(struct kvl_mlx5_sq_enc *e, uint16_t pi,
					  const struct slot *s, uint64_t q, bool signaled,
					  struct kvl_mlx5_ctrl_seg **ctrl)
{
	return kvl_mlx5_wqe_put(e, pi,
				&(struct kvl_mlx5_wqe){
					.wrid = q,
					.raddr = s->raddr,
					.rkey = s->rkey,
					.imm = s->imm,
					/* same layout (verbs_mlx5.c asserts it) */
					.sge = (const struct kvl_mlx5_sge *)s->sg,
					.nsge = s->n_sge,
					.opcode = s->op == KVL_OP_READ ? KVL_MLX5_OP_RDMA_READ
						  : (s->flags & KVL_WR_NOTIFY)
							  ? KVL_MLX5_OP_RDMA_WRITE_IMM
							  : KVL_MLX5_OP_RDMA_WRITE,
					.flags = signaled ? KVL_MLX5_F_SIGNAL : 0,
				},
				ctrl);
}

/* A batch of WQEs being written, in locals: the encoder, where the next goes, the room left,
 * the newest's control segment and size. */
struct kvl_verbs_wqes {
	struct kvl_mlx5_sq_enc e;
	struct kvl_mlx5_ctrl_seg *ctrl;
	uint16_t pi;
	unsigned room, nbb;
};

/* Slot @s (post sequence number @q) as the batch's next WQE, signaled by @b's rule (@last: it
 * must be). The setup checks make the room test unreachable (the SQ holds depth WQEs of
 * max_sge), but a request must never be left waiting for a CQE: refused then. */
static inline void kvl_verbs_mlx5_take(struct kvl_verbs_conn *c, struct kvl_verbs_wqes *wq,
				       struct kvl_verbs_batch *b, struct slot *s, uint64_t q,
				       unsigned every, bool last)
{
	if (kvl_mlx5_wqe_bbs(s->n_sge) > wq->room) {
		s->nic = false;
		s->status = KVL_ERR_PROTOCOL;
		c->n_refused++;
		c->stats.errors++;
		return;
	}
	wq->nbb = kvl_verbs_mlx5_put(&wq->e, wq->pi, s, q, kvl_verbs_batch_signal(b, every, last),
				     &wq->ctrl);
	wq->pi = (uint16_t)(wq->pi + wq->nbb);
	wq->room -= wq->nbb;
	kvl_verbs_batch_took(b, s, q);
}

/* verbs_dev.c: messages and names */
__attribute__((format(printf, 3, 4))) void kvl_verbs_errf(char *err, size_t errlen, const char *fmt,
							  ...);
void kvl_verbs_err_clear(char *err, size_t errlen);
unsigned kvl_verbs_mtu_bytes(unsigned m);
const char *kvl_verbs_gid_type_name(int t);
const char *kvl_verbs_gid_str(const union ibv_gid *g, char *buf, size_t cap);
bool kvl_verbs_gid_zero(const union ibv_gid *g);
void kvl_verbs_publish_note(struct kvl_verbs_dev *d, const char *text);

/* verbs_mr.c */
int kvl_verbs_local_find(struct kvl_verbs_conn *c, uintptr_t a, uint32_t len, uint32_t *lkey);

/*
 * A local range inside memory registered on this device: its lkey, or KVL_ERR_LOCAL. The
 * region the connection's last range was in is tried first (a stream stays in one), from the
 * connection's own copy of it: regions are never removed nor changed once published.
 */
static inline int kvl_verbs_local_check(struct kvl_verbs_conn *c, const void *p, uint32_t len,
					uint32_t *lkey)
{
	uintptr_t off = (uintptr_t)p - c->mr_last.base; /* wraps to huge when below it */

	if (len == 0) {
		*lkey = 0;
		return KVL_OK; /* touches no memory: no SGE is posted */
	}
	if (off <= c->mr_last.len && len <= c->mr_last.len - off) {
		*lkey = c->mr_last.lkey;
		return KVL_OK;
	}
	return kvl_verbs_local_find(c, (uintptr_t)p, len, lkey);
}

/* verbs_qp.c */
int kvl_verbs_qp_start(struct kvl_verbs_conn *c, char *err, size_t errlen);
uint32_t kvl_verbs_random_psn(void);
void kvl_verbs_post_recvs(struct kvl_verbs_conn *c);

/* verbs_ring.c: what the backends and resync report into */
void kvl_verbs_finish_until(struct kvl_verbs_conn *c, uint64_t end, int st);

/*
 * kvl_verbs_finish_until(@end, KVL_OK) when none is refused and @end > done_seq: no loop.
 * Their kvl_wcs were written OK at enqueue, and the bytes they moved are the difference of
 * the running sums the ring keeps per request (bytes written, read, of the requests the QP
 * took, up to and including it).
 */
static inline void kvl_verbs_finish_ok_run(struct kvl_verbs_conn *c, uint64_t end)
{
	const struct slot *l = &c->ring[(end - 1) & c->mask];

	c->stats.completed += end - c->done_seq;
	c->stats.bytes_written += l->sum[0] - c->sum_done[0];
	c->stats.bytes_read += l->sum[1] - c->sum_done[1];
	c->sum_done[0] = l->sum[0];
	c->sum_done[1] = l->sum[1];
	c->done_seq = end;
}
void kvl_verbs_finish_refused_run(struct kvl_verbs_conn *c);

/* Refused requests at the head have nothing to wait for: complete them (none, mostly). */
static inline void kvl_verbs_finish_refused(struct kvl_verbs_conn *c)
{
	if (c->n_refused != 0)
		kvl_verbs_finish_refused_run(c);
}
void kvl_verbs_start_drain(struct kvl_verbs_conn *c);
void kvl_verbs_on_cqe(struct kvl_verbs_conn *c, uint64_t seq, int st, bool flush, uint32_t wc,
		      uint32_t vendor_err);
/* @n send completions that all succeeded, the newest for the WR at @seq: what @n calls of
 * kvl_verbs_on_cqe(KVL_OK) would do (RC completes in order: the newest covers the others).
 * Inline: a busy poll's one call of it, mostly with nothing refused. */
static inline void kvl_verbs_on_cqes_ok(struct kvl_verbs_conn *c, uint64_t seq, unsigned n)
{
	c->stats.cqes += n;
	/* Stale: a flush of an incarnation that fail_all or a reconnect already accounted for. */
	if (seq < c->done_seq || seq >= c->post_seq)
		return;
	if (c->n_refused == 0) {
		kvl_verbs_finish_ok_run(c, seq + 1);
		return;
	}
	kvl_verbs_finish_until(c, seq + 1, KVL_OK);
	kvl_verbs_finish_refused(c);
}
void kvl_verbs_on_recv(struct kvl_verbs_conn *c, uint64_t wr_id, enum ibv_wc_status st,
		       bool with_imm, uint32_t imm_be, uint32_t len);
void kvl_verbs_post_range(struct kvl_verbs_conn *c, uint64_t from);
/* The backends' enqueue: slots only (a later flush posts them), or slots and WQEs in one
 * pass (verbs_mlx5.c's ring makes them the NIC's). */
unsigned kvl_verbs_enqueue_slots(struct kvl_verbs_conn *c, const struct kvl_wr *wr, unsigned n);
unsigned kvl_verbs_enqueue_mlx5(struct kvl_verbs_conn *c, const struct kvl_wr *wr, unsigned n);

/* verbs_wr.c: the provider's CQ (the verbs backend's only one, the mlx5 one's receives) */
unsigned kvl_verbs_poll_provider(struct kvl_verbs_conn *c, unsigned n);

/* verbs_mlx5.c: make the QP on the direct backend (0, or -errno with the reason) */
int kvl_verbs_mlx5_setup(struct kvl_verbs_conn *c, struct ibv_qp_init_attr_ex *qa, char *err,
			 size_t errlen);

/* verbs_resync.c: after polling, move a drained connection on (the work done) */
unsigned kvl_verbs_resync_step(struct kvl_verbs_conn *c);

#endif /* KVL_LCORES_VERBS_PRIV_H */
