/* SPDX-License-Identifier: BSD-3-Clause */
/* Verbs transport, the request ring: checks, batches in posting order, completions, reap. */
#include <endian.h>
#include <errno.h>
#include <string.h>

#include "kvl_clock.h"
#include "verbs_priv.h"

/*
 * Completion, one request at a time (errors, refused requests, fail_all): its kvl_wc, the
 * counters, and where the running byte sums stand (see kvl_verbs_finish_until).
 */
static void finish(struct kvl_verbs_conn *c, uint64_t q, int status)
{
	const struct slot *s = &c->ring[q & c->mask];
	struct kvl_wc *w = &c->wcs[q & c->mask];

	uint32_t len = w->bytes; /* the request's length, as enqueue wrote it */

	w->status = status;
	w->bytes = status == KVL_OK ? len : 0;
	c->n_refused -= !s->nic;
	c->stats.completed++;
	if (status != KVL_OK)
		c->stats.failed[status]++;
	else if (s->op == KVL_OP_WRITE)
		c->stats.bytes_written += len;
	else
		c->stats.bytes_read += len;
	c->sum_done[0] = s->sum[0];
	c->sum_done[1] = s->sum[1];
}

/*
 * Complete every request before @end; those that went to the NIC get @st. The common case,
 * all of them fine and none refused among them, takes no loop: their kvl_wcs were written
 * OK at enqueue, and the bytes they moved are the difference of the running sums the ring
 * keeps per request (bytes written, read, of the requests the QP took, up to and including
 * it).
 */
void kvl_verbs_finish_until(struct kvl_verbs_conn *c, uint64_t end, int st)
{
	if (st == KVL_OK && c->n_refused == 0 && end > c->done_seq) {
		kvl_verbs_finish_ok_run(c, end);
		return;
	}
	for (; c->done_seq < end; c->done_seq++) {
		const struct slot *s = &c->ring[c->done_seq & c->mask];

		finish(c, c->done_seq, s->nic ? st : s->status);
	}
}

/* kvl_verbs_finish_refused() when some are refused. */
void kvl_verbs_finish_refused_run(struct kvl_verbs_conn *c)
{
	while (c->n_refused != 0 && c->done_seq != c->post_seq) {
		const struct slot *s = &c->ring[c->done_seq & c->mask];

		if (s->nic)
			break;
		finish(c, c->done_seq, s->status);
		c->done_seq++;
	}
}

/* Enter PH_DRAIN: the QP is (or is being put) in ERR; every WR it holds comes back flushed. */
void kvl_verbs_start_drain(struct kvl_verbs_conn *c)
{
	if (c->phase == PH_DRAIN)
		return;
	c->phase = PH_DRAIN;
	c->flush_end = c->done_seq;
	c->rq_drain_deadline = kvl_now_ns() + RQ_DRAIN_NS;
	c->drain_deadline = c->rq_drain_deadline - RQ_DRAIN_NS + DRAIN_NS;
	c->stall_since_ns = 0;
}

/*
 * An empty poll with WRs at the NIC: every STALL_POLLS of them, has a completion come since
 * the last look? None for stall_ns: the QP is wedged; in error with it, and resync.
 */
static __attribute__((noinline)) unsigned stall_check(struct kvl_verbs_conn *c)
{
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_ERR };
	uint64_t now;

	if (++c->stall_polls % STALL_POLLS != 0)
		return 0;
	now = kvl_now_ns();
	if (c->stall_since_ns == 0 || c->stall_done_seq != c->done_seq) {
		c->stall_done_seq = c->done_seq;
		c->stall_since_ns = now;
		return 0;
	}
	if (now - c->stall_since_ns < c->stall_ns)
		return 0;
	c->stats.stall_resets++;
	(void)ibv_modify_qp(c->qp, &a, IBV_QP_STATE);
	kvl_verbs_start_drain(c);
	return 1;
}

/*
 * A send completion for the WR at @seq: @st its kvl_status, @flush when the QP was in error
 * already (the WR is kept and posted again), @wc and @vendor what the provider said, for the
 * counters.
 */
void kvl_verbs_on_cqe(struct kvl_verbs_conn *c, uint64_t seq, int st, bool flush, uint32_t wc,
		      uint32_t vendor_err)
{
	if (st == KVL_OK) {
		kvl_verbs_on_cqes_ok(c, seq, 1);
		return;
	}
	c->stats.cqes++;
	/* Stale: a flush of an incarnation that fail_all or a reconnect already accounted for. */
	if (seq < c->done_seq || seq >= c->post_seq)
		return;
	c->stats.errors++;
	if (!flush) {
		c->stats.last_wc_status = wc;
		c->stats.last_vendor_err = vendor_err;
		/* RC reports an error on the oldest unfinished WR: all before it succeeded. This
		 * one alone carries the error; those behind it are flushed and posted again. */
		kvl_verbs_finish_until(c, seq, KVL_OK);
		kvl_verbs_finish_until(c, seq + 1, st);
		kvl_verbs_finish_refused(c);
	}
	/* A flush with no error of ours before it: the QP went down for a reason outside this
	 * side's requests (the peer's responder saw an error, the port died): resync too. */
	kvl_verbs_start_drain(c);
	c->flush_end = seq + 1;
}

/* A receive completed: an immediate (WRITE_WITH_IMM landed), or a flush of the queue. */
void kvl_verbs_on_recv(struct kvl_verbs_conn *c, uint64_t wr_id, enum ibv_wc_status st,
		       bool with_imm, uint32_t imm_be, uint32_t len)
{
	if ((uint32_t)wr_id != c->rq_epoch)
		return; /* flushed before the reset that emptied its queue */
	c->rq_posted--;
	if (st != IBV_WC_SUCCESS) {
		if (st != IBV_WC_WR_FLUSH_ERR)
			c->stats.recv_errors++;
		return; /* a restart refills the queue */
	}
	if (with_imm) {
		if (c->notes_tail - c->notes_head > c->notes_mask) {
			c->stats.notes_dropped++; /* nobody takes them: count, keep the QP going */
		} else {
			c->notes[c->notes_tail++ & c->notes_mask] =
				(struct kvl_note){ be32toh(imm_be), len };
			c->stats.notes++;
		}
	}
	/* Draining: what is posted must come back flushed (rq_drained); a restart refills. */
	if (c->phase == PH_RUN)
		kvl_verbs_post_recvs(c);
}

unsigned kvl_verbs_notes(struct kvl_verbs_conn *c, struct kvl_note *out, unsigned max)
{
	unsigned n = 0;

	for (; n < max && c->notes_head != c->notes_tail; n++)
		out[n] = c->notes[c->notes_head++ & c->notes_mask];
	return n;
}

/*
 * Hand the taken requests [from, post_seq) to the QP in one batch: one doorbell, one
 * signaled WR every signal_every and always the newest. Those below nic_end went to the NIC
 * before (a resync's replay): counted as replayed.
 */
void kvl_verbs_post_range(struct kvl_verbs_conn *c, uint64_t from)
{
	/*
	 * Completions are only learnt at signaled WRs: with few requests in flight a fixed
	 * interval would make the caller wait for a whole window before it may post again (a
	 * window of 16 and signal_every 16 drains the pipe every time). A quarter of what is in
	 * flight keeps it flowing; signal_every caps it for deep queues.
	 */
	uint64_t inflight = c->post_seq - c->done_seq, last = c->post_seq;
	unsigned every =
		inflight / 4 < c->signal_every ? (unsigned)(inflight / 4) : c->signal_every;

	if (every == 0)
		every = 1;
	/* The newest request the QP takes: the batch ends there, signaled. */
	while (last != from && !c->ring[(last - 1) & c->mask].nic)
		last--;
	if (last != from)
		c->be->post(c, from, last - 1, every);
	kvl_verbs_finish_refused(c);
}

unsigned kvl_verbs_progress(struct kvl_verbs_conn *c)
{
	unsigned work;

	if (c == NULL)
		return 0;
	if (c->post_seq != c->nic_end) /* kvl_verbs_flush()'s own first test, without a call */
		kvl_verbs_flush(c);
	work = c->be->poll(c);
	/* After the poll: a reset cleans the CQ, which must not happen inside one. */
	if (c->phase != PH_RUN)
		work += kvl_verbs_resync_step(c);
	else if (work == 0 && c->nic_end > c->done_seq && !c->broken)
		work += stall_check(c);
	else if (work == 0 && c->stall_since_ns != 0 && c->nic_end == c->done_seq)
		c->stall_since_ns = 0; /* nothing out: the next silence starts afresh */
	return work;
}

/* The completions are kvl_wcs in the ring already: one or two copies. Out of line, so that
 * a poll with nothing to reap pays for no frame. */
static __attribute__((noinline)) unsigned reap_copy(struct kvl_verbs_conn *c, struct kvl_wc *wc,
						    unsigned max)
{
	uint64_t ready = c->done_seq - c->reap_seq;
	unsigned n = ready < max ? (unsigned)ready : max;
	unsigned at = (unsigned)(c->reap_seq & c->mask), first = (unsigned)(c->mask + 1) - at;

	if (n == 0)
		return 0;
	if (first > n)
		first = n;
	memcpy(wc, &c->wcs[at], first * sizeof(*wc));
	if (n != first)
		memcpy(wc + first, c->wcs, (n - first) * sizeof(*wc));
	c->reap_seq += n;
	return n;
}

unsigned kvl_verbs_reap(struct kvl_verbs_conn *c, struct kvl_wc *wc, unsigned max)
{
	return c->done_seq == c->reap_seq ? 0 : reap_copy(c, wc, max);
}

unsigned kvl_verbs_outstanding(const struct kvl_verbs_conn *c)
{
	return (unsigned)(c->post_seq - c->reap_seq);
}

void kvl_verbs_fail_all(struct kvl_verbs_conn *c, int status)
{
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_ERR };

	/* A failed connection must read as failed: KVL_OK or a foreign value cannot be it. */
	if (status <= KVL_OK || status >= KVL_STATUS_COUNT)
		status = KVL_ERR_CANCELED;
	/* The NIC stops touching our buffers once the QP is in error; the flushes it then
	 * writes are stale by sequence number and dropped by progress. */
	(void)ibv_modify_qp(c->qp, &a, IBV_QP_STATE);
	c->broken = status;
	c->phase = PH_RUN;
	c->resp_pending = false;
	c->ack_due = false;
	kvl_verbs_finish_until(c, c->post_seq, status);
	c->nic_end = c->post_seq;
}

/* Also KVL_ERR_CONN_LOST when a recovery could not bring the QP back: that connection is as
 * good as failed on purpose, and the lcore should close it the same way. */
int kvl_verbs_failed(const struct kvl_verbs_conn *c)
{
	return c->broken;
}

/* The peer's segment @id: its index, or n_rseg when it advertised none such. */
static unsigned find_rseg(const struct kvl_verbs_conn *c, uint32_t id)
{
	unsigned i = 0;

	while (i < c->n_rseg && c->rseg[i].id != id)
		i++;
	return i;
}

/* The remote range: segment known, allowed and in bounds; its address and rkey. The segment
 * of the last request is tried first, from the connection's copy of it (ids are unique:
 * set_remote refuses twins, and forgets the copy). */
static inline __attribute__((always_inline)) int
remote_check(struct kvl_verbs_conn *c, const struct kvl_wr *w, uint64_t *raddr, uint32_t *rkey)
{
	const struct kvl_verbs_rseg *r = &c->rseg_last;

	if (w->remote_seg != c->rseg_last_id) {
		unsigned i = find_rseg(c, w->remote_seg);

		if (i == c->n_rseg)
			return KVL_ERR_NO_SEGMENT;
		c->rseg_last = c->rseg[i];
		c->rseg_last_id = c->rseg[i].id;
	}
	*raddr = r->addr + w->remote_off;
	*rkey = r->rkey;
	/* kvl_seg_check()'s rules on the QP's copy of the peer's table, without building a
	 * struct kvl_seg for it */
	if (!(r->flags & (w->op == KVL_OP_READ ? KVL_SEG_REMOTE_READ : KVL_SEG_REMOTE_WRITE)))
		return KVL_ERR_ACCESS;
	if (w->remote_off > r->len || w->length > r->len - w->remote_off)
		return KVL_ERR_BOUNDS;
	return KVL_OK;
}

static uint32_t gcd32(uint32_t a, uint32_t b)
{
	while (b != 0) {
		uint32_t t = a % b;

		a = b;
		b = t;
	}
	return a;
}

/*
 * Rewrite @s's SGE list as pieces of one length (the lengths' greatest common divisor), in
 * order, so that a provider that sums num_sge times the first length gets the true total.
 * -E2BIG when that takes more pieces than the QP has SGEs.
 */
static int equal_pieces(const struct kvl_verbs_conn *c, struct slot *s)
{
	struct ibv_sge in[KVL_WR_MAX_SGE];
	uint32_t g = 0, n = 0;

	for (unsigned i = 0; i < s->n_sge; i++)
		g = gcd32(g, s->sg[i].length);
	for (unsigned i = 0; i < s->n_sge; i++)
		n += s->sg[i].length / g;
	if (n > c->max_sge)
		return -E2BIG;
	memcpy(in, s->sg, sizeof(in[0]) * s->n_sge);
	n = 0;
	for (unsigned i = 0; i < s->n_sge; i++)
		for (uint32_t off = 0; off < in[i].length; off += g)
			s->sg[n++] = (struct ibv_sge){ in[i].addr + off, g, in[i].lkey };
	s->n_sge = (uint8_t)n;
	return 0;
}

/* A request of several local ranges: its SGE list checked and resolved into @s. */
static int check_sges(struct kvl_verbs_conn *c, const struct kvl_wr *w, struct slot *s)
{
	uint64_t sum = 0;
	int st = KVL_OK;

	s->n_sge = w->n_sge;
	for (unsigned i = 0; i < w->n_sge; i++) {
		s->sg[i] = (struct ibv_sge){ (uintptr_t)w->sge[i].addr, w->sge[i].length, 0 };
		sum += w->sge[i].length;
		if (w->sge[i].length == 0 && !(w->flags & KVL_WR_CHECKED))
			return KVL_ERR_PROTOCOL;
	}
	if (sum != w->length && !(w->flags & KVL_WR_CHECKED))
		return KVL_ERR_PROTOCOL; /* kvl_post() computes it: a malformed request */
	if (c->d->sge_equal_only && equal_pieces(c, s) != 0)
		return KVL_ERR_TOO_LARGE;
	for (unsigned i = 0; i < s->n_sge && st == KVL_OK; i++)
		st = kvl_verbs_local_check(c, (const void *)(uintptr_t)s->sg[i].addr,
					   s->sg[i].length, &s->sg[i].lkey);
	if (st == KVL_OK)
		st = remote_check(c, w, &s->raddr, &s->rkey);
	return st;
}

/*
 * What the WR would complete with if it never reached the NIC; KVL_OK if it may go. The
 * connection's own state (broken, connected) is the caller's, once per call. What stays
 * here is what only this layer knows: the lkey of the local range (the MRs of this device),
 * the rkey and bounds of the remote one (the table this QP was given), and the device's
 * limits. What kvl_post() proved (KVL_WR_CHECKED: opcode, flags, the SGE list's shape) is
 * not checked again; a kvl_wr from elsewhere is.
 */
static inline __attribute__((always_inline)) int check(struct kvl_verbs_conn *c,
						       const struct kvl_wr *w, struct slot *s,
						       uint32_t max_msg, unsigned max_sge)
{
	int st;

	/* kvl_post() refuses these (KVL_WR_CHECKED); from elsewhere, a malformed request */
	if (!(w->flags & KVL_WR_CHECKED) && ((w->op != KVL_OP_WRITE && w->op != KVL_OP_READ) ||
					     ((w->flags & KVL_WR_NOTIFY) && w->op != KVL_OP_WRITE)))
		return KVL_ERR_PROTOCOL;
	if (w->length > max_msg || w->n_sge > max_sge)
		return KVL_ERR_TOO_LARGE;
	if (w->n_sge > 1)
		return check_sges(c, w, s);
	/* the common case, one local range: checked without the list walk */
	s->n_sge = w->length != 0; /* 0 bytes: no SGE (mlx5 reads a 0-byte one as 2 GiB) */
	s->sg[0].addr = (uintptr_t)w->local;
	s->sg[0].length = w->length;
	st = kvl_verbs_local_check(c, w->local, w->length, &s->sg[0].lkey);
	return st == KVL_OK ? remote_check(c, w, &s->raddr, &s->rkey) : st;
}

/* Request @w at @seq does not go to the NIC: its slot and its completion say why (@st). Out
 * of line: the loop that takes requests keeps only what a taken one needs in registers. */
static __attribute__((noinline)) void refuse(struct kvl_verbs_conn *c, uint64_t seq,
					     const struct kvl_wr *w, int st)
{
	struct slot *s = &c->ring[seq & c->mask];

	s->op = w->op;
	s->flags = w->flags;
	s->imm = w->imm;
	s->nic = false;
	s->status = st;
	s->sum[0] = c->sum_post[0];
	s->sum[1] = c->sum_post[1];
	c->wcs[seq & c->mask] = (struct kvl_wc){ w->wr_id, 0, st };
	c->n_refused++;
}

/*
 * Take @n requests into the ring: checked, each into its slot and its completion. With
 * @wqes (the mlx5 direct backend, a constant in each of the two functions below) each taken
 * request's WQE is written into the SQ in the same pass, from the registers and the slot
 * check() just filled, signaled one in @every as post_range would; the doorbell, and the
 * signal on the newest, wait for the next flush (be->ring). Without, the flush's post_range
 * reads the slots back (the verbs backend, and every replay).
 */
static inline __attribute__((always_inline)) unsigned
enqueue(struct kvl_verbs_conn *c, const struct kvl_wr *wr, unsigned n, const bool wqes)
{
	uint64_t room, seq;
	uint32_t max_msg = c->d->max_msg_sz;
	unsigned max_sge = c->max_sge;
	/* decided once per call: a broken or unconnected QP refuses every request alike */
	int down = c->broken ? c->broken : !c->connected ? KVL_ERR_NO_PEER : KVL_OK;
	/* in locals: the stores into slots could alias them, and would reload them per request */
	struct slot *ring = c->ring;
	struct kvl_wc *wcs = c->wcs;
	uint64_t mask = c->mask;
	/* the SQ encoder over the burst (wqes only) */
	struct kvl_verbs_wqes wq = { 0 };
	struct kvl_verbs_batch b;
	unsigned every = 1;

	/* Resyncing: new requests wait (the lcore keeps them) until both ends run again. */
	if (c->phase != PH_RUN)
		return 0;
	room = c->depth - (c->post_seq - c->reap_seq);
	if (n > room)
		n = (unsigned)room;
	seq = c->post_seq;
	if (wqes) {
		/* post_range's rule, on what will be in flight once these are taken */
		uint64_t inflight = seq + n - c->done_seq;

		every = inflight / 4 < c->signal_every ? (unsigned)(inflight / 4) : c->signal_every;
		if (every == 0)
			every = 1;
		wq.e = kvl_mlx5_sq_enc_start(&c->sq);
		wq.pi = c->sq.sq_pi;
		wq.room = kvl_mlx5_sq_room(&c->sq);
		kvl_verbs_batch_start(c, &b, seq);
	}
	for (unsigned i = 0; i < n; i++, seq++) {
		const struct kvl_wr *w = &wr[i];
		unsigned at = (unsigned)(seq & mask);
		struct slot *s = &ring[at];
		int st = down != KVL_OK ? down : check(c, w, s, max_msg, max_sge);

		if (st != KVL_OK) {
			refuse(c, seq, w, st);
			continue;
		}
		s->op = w->op;
		s->flags = w->flags;
		s->imm = w->imm;
		s->nic = true;
		/* Its completion as it will read unless the NIC says otherwise (finish). */
		wcs[at] = (struct kvl_wc){ w->wr_id, w->length, KVL_OK };
		c->sum_post[w->op == KVL_OP_READ] += w->length;
		s->sum[0] = c->sum_post[0];
		s->sum[1] = c->sum_post[1];
		if (wqes)
			kvl_verbs_mlx5_take(c, &wq, &b, s, seq, every, false);
	}
	c->post_seq = seq;
	if (wqes) {
		c->enq_end = seq;
		kvl_verbs_batch_end(c, &b);
		if (b.nic != 0) {
			kvl_mlx5_sq_commit(&c->sq, &wq.e, wq.pi, b.nic, b.sig, wq.ctrl, wq.nbb);
			c->wqe_end = b.written + 1;
			c->stats.posted += b.nic;
			c->stats.signaled += b.sig;
		}
	}
	kvl_verbs_finish_refused(c);
	return n;
}

unsigned kvl_verbs_enqueue_slots(struct kvl_verbs_conn *c, const struct kvl_wr *wr, unsigned n)
{
	return enqueue(c, wr, n, false);
}

unsigned kvl_verbs_enqueue_mlx5(struct kvl_verbs_conn *c, const struct kvl_wr *wr, unsigned n)
{
	uint64_t written = c->wqe_end > c->nic_end ? c->wqe_end : c->nic_end;

	/* In one pass only where every request before these is in the SQ already or refused
	 * (a replay still owed, or requests the slots-only path took, leave the order to
	 * post_range) and the QP takes requests at all. */
	if ((written != c->post_seq && c->enq_end != c->post_seq) || c->broken || !c->connected)
		return enqueue(c, wr, n, false);
	return enqueue(c, wr, n, true);
}

unsigned kvl_verbs_enqueue(struct kvl_verbs_conn *c, const struct kvl_wr *wr, unsigned n)
{
	return c->be->enqueue(c, wr, n);
}

void kvl_verbs_flush(struct kvl_verbs_conn *c)
{
	if (c->phase != PH_RUN || c->broken || c->post_seq == c->nic_end)
		return;
	/* what enqueue wrote first: the slots after them go on behind */
	if (c->wqe_end > c->nic_end)
		c->be->ring(c);
	if (c->post_seq != c->nic_end)
		kvl_verbs_post_range(c, c->nic_end > c->done_seq ? c->nic_end : c->done_seq);
}

unsigned kvl_verbs_post(struct kvl_verbs_conn *c, const struct kvl_wr *wr, unsigned n)
{
	n = kvl_verbs_enqueue(c, wr, n);
	kvl_verbs_flush(c);
	return n;
}

const struct kvl_verbs_stats *kvl_verbs_stats(const struct kvl_verbs_conn *c)
{
	return &c->stats;
}

enum kvl_qp_state kvl_verbs_conn_state(const struct kvl_verbs_conn *c)
{
	if (c->broken)
		return KVL_QP_FAILED;
	if (!c->connected)
		return KVL_QP_INIT;
	return c->phase == PH_DRAIN  ? KVL_QP_DRAIN
	       : c->phase == PH_WAIT ? KVL_QP_RESYNC
				     : KVL_QP_RTS;
}

const char *kvl_qp_state_name(uint64_t state)
{
	static const char *const names[] = { "INIT", "RTS", "DRAIN", "RESYNC", "FAILED" };

	return state < sizeof(names) / sizeof(names[0]) ? names[state] : "?";
}
