/* SPDX-License-Identifier: BSD-3-Clause */
/* The scheduler under thousands of random workloads, checked against a model after each call. */
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdlib.h>

#include "kvl_test.h"
#include "kvlane/kvlane.h"
#include "sched.h"

/* Stop at the first broken workload: its seed and number are enough to replay it. */
#define FAIL_IF(cond, ...)                                                                         \
	do {                                                                                       \
		kvl_test_checks++;                                                                 \
		if (cond) {                                                                        \
			kvl_test_failures++;                                                       \
			fprintf(stderr, "workload %u: %s:%d: ", cur_workload, __FILE__, __LINE__); \
			fprintf(stderr, __VA_ARGS__);                                              \
			fputc('\n', stderr);                                                       \
			return false;                                                              \
		}                                                                                  \
	} while (0)

static unsigned cur_workload;
static uint64_t rng;

static uint64_t rnd(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return rng;
}

static uint32_t below(uint32_t n)
{
	return n ? (uint32_t)(rnd() % n) : 0;
}

#define MAXB	 24
#define MAXS	 24
#define MAXR	 12
#define MAXX	 64
#define MAXSLOTS 512
#define SLOT	 16u

enum { UNPOSTED, INFLIGHT, LANDED, FREED };

/* The model of one request: what the scheduler must be doing with it. */
struct mreq {
	struct kvl_sched_block b[MAXB];
	uint32_t first[MAXS + 1], refs[MAXS * 3];
	struct kvl_sched_req_desc d;
	uint32_t order[MAXB]; /* transfer order: first use */
	uint32_t first_use[MAXB];
	uint32_t ref[MAXB];
	uint8_t bst[MAXB];
	uint32_t slot[MAXB];
	uint32_t next;		 /* in order */
	uint32_t ready, done;	 /* ready: STEP_READY events seen (announced) */
	uint32_t xfers[MAXB];	 /* times each block was handed out in a descriptor */
	uint32_t ev[MAXB];	 /* times each block was evicted */
	uint64_t ev_epoch[MAXB]; /* w.epoch and done at its last eviction */
	uint32_t ev_done[MAXB];
	uint32_t evicted;
	bool step_done[MAXS];
	int id;
	bool opened, ended, terminal, peer_cancel, cancelled;
	int want_status; /* what its terminal event must say */
};

struct mx {
	uint64_t id;
	uint32_t r; /* model request */
	uint32_t pos, n;
};

struct world {
	struct kvl_sched_cfg c;
	struct kvl_sched *s;
	struct mreq q[MAXR];
	uint32_t nq;
	struct mx fl[MAXX]; /* in flight */
	uint32_t nfl;
	int owner[MAXSLOTS]; /* shadow staging: model request + 1 holding each slot */
	uint64_t staged, prev_staged, budget;
	uint64_t now;
	/* Lockstep engine: requests are opened in batches (a batch only once the previous one
	 * has ended), and a request's step l is DONE only once every request of the batch has
	 * its step l READY (or DONE, or has no step l), as a GPU kernel per layer over it. */
	bool lockstep;
	uint64_t posted_blocks, evicted; /* this workload's, against the scheduler's stats */
	uint64_t epoch;			 /* counts what may move windows: budget, opens, ends */
};

static struct world w;
static uint64_t n_offsets_checked;
static uint64_t n_calls, n_desc, n_blocks, n_cancel, n_fail, n_done, n_refused, n_starved;
static uint64_t n_floor_pass, n_resv_checked, n_lk_workloads, n_lk_batches, n_lk_done, n_lk_shrinks;
static uint64_t n_lk_drain_budgets, n_re_evicted, n_evicted, n_evict_calls, n_refetched,
	n_evict_workloads, n_lk_evict_workloads;

/* A PULL into staging holds a slot; PUSH and engine-owned destinations (dest) their length. */
static uint64_t charge(const struct mreq *m, uint32_t b)
{
	return m->d.dir == KVL_SCHED_PULL && !m->d.dest ? w.c.slot_size : m->b[b].length;
}

static void gen_req(struct mreq *m, uint32_t idx)
{
	uint32_t nb = 1 + below(MAXB), perm[MAXB], nref = 0, ns = 0;

	memset(m, 0, sizeof(*m));
	for (uint32_t i = 0; i < nb; i++)
		perm[i] = i;
	for (uint32_t i = nb; i > 1; i--) {
		uint32_t j = below(i), t = perm[i - 1];

		perm[i - 1] = perm[j];
		perm[j] = t;
	}
	/* Steps take the blocks in perm order, 1..4 new ones each, sometimes an old one too. */
	for (uint32_t i = 0; i < nb && ns < MAXS;) {
		uint32_t k = 1 + below(4);

		m->first[ns] = nref;
		if (i > 0 && below(4) == 0)
			m->refs[nref++] = perm[below(i)];
		for (uint32_t j = 0; j < k && i < nb; j++)
			m->refs[nref++] = perm[i++];
		ns++;
	}
	m->first[ns] = nref;
	/* Remote offsets follow the transfer order (it is perm order), with gaps at times. */
	uint64_t roff = (uint64_t)idx << 32, loff = (uint64_t)idx << 32;
	bool push = below(3) == 0;

	for (uint32_t i = 0; i < nb; i++) {
		struct kvl_sched_block *b = &m->b[perm[i]];

		b->length = push ? 1 + below(2 * SLOT) : (below(4) ? SLOT : 1 + below(SLOT));
		if (below(5) == 0)
			roff += 1 + below(64);
		if (below(3) == 0)
			loff += 1 + below(64);
		b->remote_off = roff;
		b->remote_seg = 1 + (below(8) == 0);
		b->local_off = loff;
		roff += b->length;
		loff += b->length;
	}
	m->d = (struct kvl_sched_req_desc){ .peer = 1000 + idx,
					    .deadline = below(5000),
					    .user = idx,
					    .blocks = m->b,
					    .n_blocks = nb,
					    .n_steps = ns,
					    .step_first = m->first,
					    .step_blocks = m->refs,
					    .dir = push ? KVL_SCHED_PUSH : KVL_SCHED_PULL,
					    .cls = below(2),
					    /* a third of the PULLs land in the caller's memory */
					    .dest = !push && below(3) == 0 };
	for (uint32_t i = 0; m->d.dest && i < nb; i++)
		m->b[i].local_seg = 1 + below(2);
	/* The model's own transfer order and reference counts. */
	bool seen[MAXB] = { false };
	uint32_t n = 0;

	for (uint32_t k = 0; k < ns; k++)
		for (uint32_t j = m->first[k]; j < m->first[k + 1]; j++) {
			uint32_t b = m->refs[j];

			m->ref[b]++;
			if (!seen[b]) {
				seen[b] = true;
				m->first_use[b] = k;
				m->order[n++] = b;
			}
		}
	m->want_status = KVL_OK;
}

/* What must be resident at once, computed the slow way: the scheduler must refuse more. */
static uint64_t peak(const struct mreq *m)
{
	uint64_t best = 0;

	for (uint32_t k = 0; k < m->d.n_steps; k++) {
		uint64_t sum = 0;

		for (uint32_t b = 0; b < m->d.n_blocks; b++) {
			uint32_t last = 0;

			for (uint32_t kk = 0; kk < m->d.n_steps; kk++)
				for (uint32_t j = m->first[kk]; j < m->first[kk + 1]; j++)
					if (m->refs[j] == b)
						last = kk;
			if (m->first_use[b] <= k && last >= k)
				sum += charge(m, b);
		}
		best = sum > best ? sum : best;
	}
	return best;
}

/* What a request must hold resident to progress: dest holds nothing once landed. */
static uint64_t model_floor(const struct mreq *m)
{
	uint64_t p = 0;

	if (m->d.dest)
		for (uint32_t b = 0; b < m->d.n_blocks; b++)
			p = m->b[b].length > p ? m->b[b].length : p;
	else
		p = peak(m);
	return p > w.c.window_min ? p : w.c.window_min;
}

static void release(struct mreq *m, uint32_t b)
{
	if (m->d.dir == KVL_SCHED_PULL && !m->d.dest)
		w.owner[m->slot[b]] = 0;
	/* dest: a landed block's charge went at its completion */
	if (!(m->d.dest && m->bst[b] == LANDED))
		w.staged -= charge(m, b);
	m->bst[b] = FREED;
}

/* The request ended here: landed blocks go at once, in-flight ones on completion. */
static void model_end(struct mreq *m, int status)
{
	for (uint32_t b = 0; b < m->d.n_blocks; b++)
		if (m->bst[b] == LANDED)
			release(m, b);
	m->ended = true;
	m->want_status = status;
	w.epoch++;
}

static bool check_common(const char *what)
{
	struct kvl_sched_stats st;

	n_calls++;
	kvl_sched_stats(w.s, &st);
	FAIL_IF(st.staged != w.staged, "%s: staged %" PRIu64 " but the model holds %" PRIu64, what,
		st.staged, w.staged);
	/* The hard invariant: never more staged than the budget, except what had landed
	 * before the budget shrank, which may only go down. */
	FAIL_IF(st.staged > st.budget && st.staged > w.prev_staged,
		"%s: staged %" PRIu64 " grew over the budget %" PRIu64 " (was %" PRIu64 ")", what,
		st.staged, st.budget, w.prev_staged);
	FAIL_IF(st.xfers_inflight != w.nfl, "%s: %u in flight, model %u", what, st.xfers_inflight,
		w.nfl);
	w.prev_staged = st.staged;
	return true;
}

/* One descriptor: exactly the request's next blocks in transfer order, within limits, onto
 * staging that nothing else holds. */
static bool check_desc(const struct kvl_sched_xfer *x)
{
	uint32_t r;

	for (r = 0; r < w.nq; r++)
		if (w.q[r].opened && !w.q[r].ended && w.q[r].id == x->req)
			break;
	FAIL_IF(r == w.nq, "descriptor for request %d, not an open one", x->req);
	struct mreq *m = &w.q[r];

	FAIL_IF(x->n_blocks == 0 || m->next + x->n_blocks > m->d.n_blocks,
		"descriptor of %u blocks at %u of %u", x->n_blocks, m->next, m->d.n_blocks);
	FAIL_IF(x->n_sge == 0 || x->n_sge > w.c.max_sge, "%u SGEs", x->n_sge);
	FAIL_IF(x->n_blocks > 1 && (w.c.max_msg == 0 || x->length > w.c.max_msg),
		"merged %u blocks into %u bytes (max_msg %u)", x->n_blocks, x->length, w.c.max_msg);
	FAIL_IF(x->op != (m->d.dir == KVL_SCHED_PULL ? 2 : 1), "op %u", x->op);
	FAIL_IF(x->peer != m->d.peer || x->cls != m->d.cls, "peer or class");
	FAIL_IF(x->local_abs != (m->d.dir == KVL_SCHED_PUSH || m->d.dest), "local_abs %u",
		x->local_abs);
	uint64_t roff = x->remote_off, len = 0;
	uint32_t sg = 0, sg_used = 0;

	for (uint32_t i = 0; i < x->n_blocks; i++) {
		uint32_t b = m->order[m->next + i];

		FAIL_IF(m->bst[b] != UNPOSTED, "block %u sent twice", b);
		FAIL_IF(m->b[b].remote_off != roff || m->b[b].remote_seg != x->remote_seg,
			"block %u (transfer position %u) is not next on the remote side", b,
			m->next + i);
		FAIL_IF(sg >= x->n_sge, "blocks beyond the SGEs");
		uint64_t local = x->sge[sg].local_off + sg_used;

		if (m->d.dir == KVL_SCHED_PUSH || m->d.dest) {
			FAIL_IF(local != m->b[b].local_off, "block %u to or from the wrong place",
				b);
			FAIL_IF(i > 0 && sg_used > 0 &&
					m->b[b].local_seg !=
						m->b[m->order[m->next + i - 1]].local_seg,
				"block %u merged across two local regions", b);
		} else {
			uint32_t slot = (uint32_t)(local / w.c.slot_size);

			FAIL_IF(local % w.c.slot_size || slot >= w.c.slot_count,
				"pull block %u to %" PRIu64, b, local);
			FAIL_IF(w.owner[slot],
				"slot %u given to request %u while request %d holds it", slot, r,
				w.owner[slot] - 1);
			w.owner[slot] = (int)r + 1;
			m->slot[b] = slot;
		}
		m->bst[b] = INFLIGHT;
		/* Exactly once per use: a block goes out again only after an eviction. */
		FAIL_IF(++m->xfers[b] != m->ev[b] + 1, "block %u sent %u times, evicted %u", b,
			m->xfers[b], m->ev[b]);
		n_refetched += m->ev[b] > 0;
		w.posted_blocks++;
		w.staged += charge(m, b);
		sg_used += m->b[b].length;
		FAIL_IF(sg_used > x->sge[sg].length, "SGE %u shorter than its blocks", sg);
		if (sg_used == x->sge[sg].length) {
			sg++;
			sg_used = 0;
		}
		roff += m->b[b].length;
		len += m->b[b].length;
	}
	FAIL_IF(sg != x->n_sge || len != x->length, "SGEs do not add up");
	FAIL_IF(w.nfl == MAXX, "more in flight than max_xfers");
	w.fl[w.nfl++] = (struct mx){ x->id, r, m->next, x->n_blocks };
	m->next += x->n_blocks;
	n_desc++;
	n_blocks += x->n_blocks;
	return true;
}

/*
 * Blocks the scheduler evicted during the last call: its cursor (blocks_posted) went back.
 * Each must have landed (never in flight), belong to a PULL request, be named by no step
 * announced READY and not DONE, and have been held beyond what the request is promised
 * (min(floor, window): what is left plus one block is over it). The model frees them and puts them
 * back in the queue.
 */
static bool sync_evictions(void)
{
	for (uint32_t r = 0; r < w.nq; r++) {
		struct mreq *m = &w.q[r];
		struct kvl_sched_req_info ri;

		if (!m->opened || m->ended)
			continue;
		FAIL_IF(kvl_sched_req_info(w.s, m->id, w.now, &ri) != 0, "info");
		if (ri.blocks_posted < m->next) {
			FAIL_IF(m->d.dir != KVL_SCHED_PULL, "evicted from a PUSH request");
			FAIL_IF(m->d.dest, "evicted from a dest request (nothing staged)");
			FAIL_IF(w.c.ready_ahead == 0, "evicted with ready_ahead 0");
			uint64_t g = ri.floor < ri.window ? ri.floor : ri.window;

			FAIL_IF(ri.inflight_bytes + ri.landed_bytes + w.c.slot_size <= g,
				"request %d: evicted within its floor (%" PRIu64
				" held, floor %" PRIu64 ", window %" PRIu64 ")",
				m->id, ri.inflight_bytes + ri.landed_bytes, ri.floor, ri.window);
			n_evict_calls++;
		}
		for (uint32_t p = ri.blocks_posted; p < m->next; p++) {
			uint32_t b = m->order[p];

			FAIL_IF(m->bst[b] != LANDED, "evicted block %u in state %u (not landed)", b,
				m->bst[b]);
			for (uint32_t k = 0; k < m->ready; k++)
				for (uint32_t j = m->first[k];
				     j < m->first[k + 1] && !m->step_done[k]; j++)
					FAIL_IF(m->refs[j] == b,
						"evicted block %u of step %u, READY", b, k);
			/* No ping-pong: evicted again only once something moved the windows (the
			 * budget, a request opened or ended) or its owner made progress. */
			FAIL_IF(m->ev[b] && m->ev_epoch[b] == w.epoch && m->ev_done[b] == m->done,
				"block %u of request %d evicted again, nothing changed", b, m->id);
			n_re_evicted += m->ev[b] > 0;
			m->ev_epoch[b] = w.epoch;
			m->ev_done[b] = m->done;
			release(m, b);
			m->bst[b] = UNPOSTED;
			m->ev[b]++;
			m->evicted++;
			w.evicted++;
			n_evicted++;
		}
		if (ri.blocks_posted < m->next)
			m->next = ri.blocks_posted;
		FAIL_IF(ri.blocks_evicted != m->evicted, "request %d: %u evicted, model %u", m->id,
			ri.blocks_evicted, m->evicted);
	}
	return true;
}

static int cmp_wait(const void *a, const void *b)
{
	const struct kvl_sched_req_info *x = a, *y = b;

	return x->wait_ns < y->wait_ns ? 1 : x->wait_ns > y->wait_ns ? -1 : 0;
}

static bool do_step(void)
{
	struct kvl_sched_xfer out[32];
	struct kvl_sched_req_info inf[MAXR], starved[MAXR];
	int32_t ids[MAXR];
	unsigned ns = 0, max = below(3) ? 1 + below(4) : 32;
	/* max 0 only admits and recomputes windows (due at this `now`), so the snapshot below
	 * is what the picking sees. */
	FAIL_IF(kvl_sched_step(w.s, w.now, out, 0) != 0, "step with max 0 posted");
	if (!sync_evictions() || !check_common("step 0"))
		return false;
	unsigned nids = kvl_sched_req_list(w.s, ids, MAXR);

	for (unsigned i = 0; i < nids; i++) {
		kvl_sched_req_info(w.s, ids[i], w.now, &inf[i]);
		if (w.c.starvation_ns && inf[i].runnable && inf[i].wait_ns >= w.c.starvation_ns)
			starved[ns++] = inf[i];
	}
	qsort(starved, ns, sizeof(*starved), cmp_wait);
	unsigned n = kvl_sched_step(w.s, w.now, out, max);
	struct kvl_sched_stats st;

	/* A request that is evicted from cannot post in the same call (it is over its window),
	 * so the cursors that went back are evictions only. */
	if (!sync_evictions())
		return false;

	kvl_sched_stats(w.s, &st);
	FAIL_IF(n > max, "step gave %u > %u", n, max);
	/* Whoever was passed over for the bound is served first, oldest first, one each. */
	unsigned k = ns < max ? ns : max, i;

	if (n < k)
		FAIL_IF(st.last_stop != KVL_SCHED_STOP_BUDGET &&
				st.last_stop != KVL_SCHED_STOP_XFERS,
			"%u starved requests, %u served, and no resource ran out", k, n);
	for (i = 0; i < k && i < n; i++) {
		unsigned j;

		for (j = 0; j < ns && starved[j].id != out[i].req; j++)
			;
		if (j == ns || starved[j].wait_ns < starved[i].wait_ns)
			break; /* only the floor pass may come before the starved are served */
		n_starved++;
	}
	for (unsigned d = 0; d < n; d++)
		if (!check_desc(&out[d]))
			return false;
	/* After a budget stop, the room kept for floors goes to the requests below theirs, up
	 * to their floor only, whether or not they were passed over. */
	if (i < k && i < n) {
		FAIL_IF(st.last_stop != KVL_SCHED_STOP_BUDGET &&
				st.last_stop != KVL_SCHED_STOP_XFERS,
			"descriptor %u went to request %d, not to a starved one", i, out[i].req);
		for (; i < n; i++) {
			struct kvl_sched_req_info ri;

			FAIL_IF(kvl_sched_req_info(w.s, out[i].req, w.now, &ri) != 0, "info");
			uint64_t g = ri.floor < ri.window ? ri.floor : ri.window;

			FAIL_IF(ri.inflight_bytes + ri.landed_bytes > g,
				"descriptor %u to request %d (not a starved one) beyond its floor",
				i, out[i].req);
			n_floor_pass++;
		}
	}
	/* Floors are kept free: once a descriptor takes a request beyond its floor, what is
	 * staged plus what every active request still needs to reach its floor, plus the floors
	 * of those waiting for admission, fits the budget. */
	bool beyond = false;
	uint64_t keep = 0;

	nids = kvl_sched_req_list(w.s, ids, MAXR);
	for (unsigned d = 0; d < nids; d++) {
		struct kvl_sched_req_info ri;

		kvl_sched_req_info(w.s, ids[d], w.now, &ri);
		uint64_t g = ri.floor < ri.window ? ri.floor : ri.window,
			 u = ri.inflight_bytes + ri.landed_bytes;

		if (ri.state == KVL_SCHED_REQ_WAITING)
			keep += ri.floor;
		else if (ri.state == KVL_SCHED_REQ_ACTIVE)
			keep += g > u ? g - u : 0;
		if (ri.state == KVL_SCHED_REQ_ACTIVE && u > g)
			for (unsigned e = 0; e < n; e++)
				beyond |= out[e].req == ri.id;
	}
	if (beyond) {
		FAIL_IF(st.staged + keep > st.budget,
			"a post beyond a floor: staged %" PRIu64 " + floors kept %" PRIu64
			" over the budget %" PRIu64,
			st.staged, keep, st.budget);
		n_resv_checked++;
	}
	/* Whoever was given something stays within its window. */
	for (unsigned i = 0; i < n; i++) {
		struct kvl_sched_req_info ri;

		if (i > 0 && out[i].req == out[i - 1].req)
			continue;
		FAIL_IF(kvl_sched_req_info(w.s, out[i].req, w.now, &ri) != 0, "info");
		FAIL_IF(ri.inflight_bytes + ri.landed_bytes > ri.window,
			"request %d holds %" PRIu64 " over its window %" PRIu64, ri.id,
			ri.inflight_bytes + ri.landed_bytes, ri.window);
	}
	FAIL_IF(st.windows + st.orphan_bytes > st.budget && st.windows > 0,
		"windows %" PRIu64 " + orphans %" PRIu64 " over the budget %" PRIu64, st.windows,
		st.orphan_bytes, st.budget);
	return check_common("step");
}

static bool do_complete(bool may_fail)
{
	if (w.nfl == 0)
		return true;
	uint32_t i = below(w.nfl);
	struct mx x = w.fl[i];
	struct mreq *m = &w.q[x.r];
	int status = may_fail && below(40) == 0 ? 1 + (int)below(KVL_STATUS_COUNT - 1) : KVL_OK;

	w.fl[i] = w.fl[--w.nfl];
	FAIL_IF(kvl_sched_complete(w.s, x.id, status, w.now) != 0, "completion refused");
	FAIL_IF(kvl_sched_complete(w.s, x.id, KVL_OK, w.now) != -ENOENT, "completed twice");
	if (m->ended) { /* absorbed: its staging is free only now */
		for (uint32_t j = 0; j < x.n; j++)
			release(m, m->order[x.pos + j]);
	} else if (status != KVL_OK) {
		for (uint32_t j = 0; j < x.n; j++)
			release(m, m->order[x.pos + j]);
		model_end(m, status);
		n_fail++;
	} else {
		for (uint32_t j = 0; j < x.n; j++) {
			m->bst[m->order[x.pos + j]] = LANDED;
			if (m->d.dest) /* in the caller's memory: nothing stays staged */
				w.staged -= charge(m, m->order[x.pos + j]);
		}
	}
	return check_common("complete");
}

/* kvl_sched_step_offsets() writes what kvl_sched_block_offset() says for each block of the
 * step (UINT64_MAX for -EAGAIN), and nothing else. */
static bool step_offsets_agree(const struct mreq *m, int id, uint32_t step)
{
	uint64_t off[MAXB], one;
	bool named[MAXB] = { false };

	for (uint32_t b = 0; b < MAXB; b++)
		off[b] = 0x5a5a5a5a5a5a5a5aull;
	int rc = kvl_sched_step_offsets(w.s, id, step, off);

	FAIL_IF(rc != 0 && rc != -ENOENT, "step_offsets %d", rc);
	for (uint32_t j = m->first[step]; j < m->first[step + 1]; j++) {
		uint32_t b = m->refs[j];
		int rb = kvl_sched_block_offset(w.s, id, b, &one);

		named[b] = true;
		if (rc == -ENOENT) {
			FAIL_IF(rb != -ENOENT, "step_offsets -ENOENT, block_offset %d", rb);
			continue;
		}
		FAIL_IF(rb != 0 && rb != -EAGAIN, "block_offset %d", rb);
		FAIL_IF(off[b] != (rb == 0 ? one : UINT64_MAX),
			"step %u block %u: step_offsets %" PRIx64 ", block_offset %d %" PRIx64,
			step, b, off[b], rb, one);
	}
	for (uint32_t b = 0; b < MAXB; b++)
		FAIL_IF(!named[b] && off[b] != 0x5a5a5a5a5a5a5a5aull,
			"step_offsets wrote block %u, not in step %u", b, step);
	n_offsets_checked++;
	return true;
}

static bool do_events(void)
{
	struct kvl_sched_event ev[16];
	unsigned n = kvl_sched_poll_events(w.s, ev, 1 + below(16));

	for (unsigned i = 0; i < n; i++) {
		uint32_t r;

		for (r = 0; r < w.nq; r++)
			if (w.q[r].opened && !w.q[r].terminal && w.q[r].id == ev[i].req)
				break;
		FAIL_IF(r == w.nq, "event %u for request %d, unknown", ev[i].type, ev[i].req);
		struct mreq *m = &w.q[r];

		FAIL_IF(ev[i].peer != m->d.peer || ev[i].user != m->d.user, "event peer/user");
		switch (ev[i].type) {
		case KVL_SCHED_EV_STEP_READY:
			FAIL_IF(ev[i].step != m->ready, "READY %u, expected %u", ev[i].step,
				m->ready);
			FAIL_IF(m->ended && m->want_status != KVL_OK, "READY after the end");
			for (uint32_t j = m->first[ev[i].step]; j < m->first[ev[i].step + 1]; j++) {
				uint8_t st = m->bst[m->refs[j]];

				FAIL_IF(st != LANDED && st != FREED,
					"step %u READY, block %u not landed", ev[i].step,
					m->refs[j]);
			}
			if (!step_offsets_agree(m, ev[i].req, ev[i].step))
				return false;
			m->ready++;
			break;
		case KVL_SCHED_EV_PEER_CANCEL:
			FAIL_IF(!m->cancelled || m->peer_cancel, "PEER_CANCEL without a cancel");
			m->peer_cancel = true;
			break;
		case KVL_SCHED_EV_REQ_DONE:
		case KVL_SCHED_EV_REQ_FAILED:
			FAIL_IF(!m->ended, "terminal event while it runs");
			/* dest: the NIC may write the caller's memory until its READs are back */
			for (uint32_t b = 0; m->d.dest && b < m->d.n_blocks; b++)
				FAIL_IF(m->bst[b] == INFLIGHT,
					"dest request %d ended with block %u in flight", m->id, b);
			FAIL_IF((ev[i].type == KVL_SCHED_EV_REQ_DONE) != (m->want_status == KVL_OK),
				"DONE/FAILED mismatch");
			FAIL_IF(ev[i].status != m->want_status, "status %d, expected %d",
				ev[i].status, m->want_status);
			FAIL_IF(m->cancelled && !m->peer_cancel,
				"cancelled without PEER_CANCEL first");
			FAIL_IF(m->want_status == KVL_OK && m->ready != m->d.n_steps,
				"DONE before every READY");
			m->terminal = true;
			break;
		default:
			FAIL_IF(1, "event type %u", ev[i].type);
		}
	}
	return check_common("events");
}

/* Every step DONE: each block went out once, plus once more after each of its evictions. */
static bool finished(struct mreq *m)
{
	for (uint32_t b = 0; b < m->d.n_blocks; b++)
		FAIL_IF(m->xfers[b] != m->ev[b] + 1 || m->bst[b] != FREED,
			"request %d done: block %u sent %u times, evicted %u, state %u", m->id, b,
			m->xfers[b], m->ev[b], m->bst[b]);
	m->ended = true;
	m->want_status = KVL_OK;
	w.epoch++;
	n_done++;
	return true;
}

/* The engine finishes one READY step of some request. */
static bool do_step_done(void)
{
	uint32_t start = below(w.nq);

	for (uint32_t t = 0; t < w.nq; t++) {
		struct mreq *m = &w.q[(start + t) % w.nq];

		if (!m->opened || m->ended || m->done == m->ready)
			continue;
		uint32_t k;

		do /* any READY step, not only the oldest */
			k = below(m->ready);
		while (m->step_done[k]);
		FAIL_IF(kvl_sched_step_done(w.s, m->id, k, w.now) != 0, "step_done refused");
		m->step_done[k] = true;
		m->done++;
		for (uint32_t j = m->first[k]; j < m->first[k + 1]; j++)
			if (--m->ref[m->refs[j]] == 0)
				release(m, m->refs[j]);
		if (m->done == m->d.n_steps && !finished(m))
			return false;
		break;
	}
	return check_common("step_done");
}

/* The lockstep engine: DONE, in order, the next step of a request of the batch whose step
 * every other request of the batch has READY too. */
static bool do_step_done_lockstep(void)
{
	uint32_t start = below(w.nq);

	for (uint32_t t = 0; t < w.nq; t++) {
		struct mreq *m = &w.q[(start + t) % w.nq];
		uint32_t l = m->done, o;

		if (!m->opened || m->ended || l == m->ready)
			continue;
		for (o = 0; o < w.nq; o++) {
			const struct mreq *p = &w.q[o];

			if (p->opened && !p->ended && p->done <= l && p->ready <= l &&
			    p->d.n_steps > l)
				break; /* p has not got its step l yet */
		}
		if (o < w.nq)
			continue;
		FAIL_IF(kvl_sched_step_done(w.s, m->id, l, w.now) != 0, "step_done refused");
		m->step_done[l] = true;
		m->done++;
		for (uint32_t j = m->first[l]; j < m->first[l + 1]; j++)
			if (--m->ref[m->refs[j]] == 0)
				release(m, m->refs[j]);
		if (m->done == m->d.n_steps) {
			if (!finished(m))
				return false;
			n_lk_done++;
		}
		break;
	}
	return check_common("step_done");
}

static bool all_terminal(void);

/* A lockstep batch: opened at one `now` with no step in between, once the previous batch has
 * ended, and never more than the staging region can hold at their floors (else a batch that
 * must advance together could never fit). */
static bool do_open_batch(uint32_t to_open)
{
	uint64_t cap = (uint64_t)w.c.slot_size * w.c.slot_count, floors = 0;
	uint32_t k = 1 + below(4);

	if (!all_terminal() || w.nq == to_open)
		return true;
	n_lk_batches++;
	while (k-- && w.nq < to_open) {
		struct mreq *m = &w.q[w.nq];

		gen_req(m, w.nq);
		uint64_t fl = model_floor(m);

		if (floors + fl > cap)
			break;
		int id = (w.epoch++, kvl_sched_open(w.s, &m->d, w.now));

		if (id == -ENOSPC || id == -EINVAL) {
			n_refused += id == -EINVAL;
			break;
		}
		FAIL_IF(id < 0, "open: %d", id);
		floors += fl;
		m->id = id;
		m->opened = true;
		w.nq++;
	}
	return check_common("open batch");
}

static bool do_open(void)
{
	if (w.nq == MAXR)
		return true;
	struct mreq *m = &w.q[w.nq];

	gen_req(m, w.nq);
	int id = (w.epoch++, kvl_sched_open(w.s, &m->d, w.now));

	if (id == -ENOSPC)
		return check_common("open"); /* pools full: try another later */
	if (id == -EINVAL) {
		uint64_t fl = model_floor(m);
		bool big = false;

		for (uint32_t b = 0; b < m->d.n_blocks; b++)
			big |= (w.c.max_msg && m->b[b].length > w.c.max_msg) ||
			       m->b[b].length > w.c.window_max;
		FAIL_IF(!big && fl <= w.c.window_max &&
				fl <= (uint64_t)w.c.slot_size * w.c.slot_count,
			"a valid request refused (floor %" PRIu64 ")", fl);
		n_refused++;
		return check_common("open");
	}
	FAIL_IF(id < 0, "open: %d", id);
	m->id = id;
	m->opened = true;
	w.nq++;
	return check_common("open");
}

static bool do_cancel(void)
{
	uint32_t r = below(w.nq);
	struct mreq *m = &w.q[r];

	if (w.nq == 0 || !m->opened || m->ended)
		return true;
	w.epoch++;
	FAIL_IF(kvl_sched_cancel(w.s, m->id, w.now) != 0, "cancel refused");
	FAIL_IF(kvl_sched_cancel(w.s, m->id, w.now) != -EALREADY, "cancelled twice");
	model_end(m, KVL_ERR_CANCELED);
	m->cancelled = true;
	n_cancel++;
	return check_common("cancel");
}

static bool do_budget(void)
{
	uint64_t cap = (uint64_t)w.c.slot_size * w.c.slot_count;

	w.budget = below(4) == 0 ? cap : below((uint32_t)cap + 1);
	n_lk_shrinks += w.lockstep && w.budget < cap;
	w.epoch++, kvl_sched_set_budget(w.s, w.budget, w.now);
	/* The shrink may leave staged above the budget; it must only go down from here. */
	return check_common("budget");
}

/*
 * The lockstep drain: the budget shrinks to the batch's floors (a PUSH request's holding, if
 * more), at times plus a random part of the rest, and stays there. Whatever the batch landed beyond
 * its windows must be evicted for it to finish (nothing grows the budget back); every request must
 * still end.
 */
static bool drain_lockstep(void)
{
	uint64_t cap = (uint64_t)w.c.slot_size * w.c.slot_count, floors = 0, held;

	for (uint32_t r = 0; r < w.nq; r++) {
		struct kvl_sched_req_info ri;

		if (!w.q[r].opened || w.q[r].ended)
			continue;
		FAIL_IF(kvl_sched_req_info(w.s, w.q[r].id, w.now, &ri) != 0, "info");
		/* A PUSH request's blocks are never evicted: what it holds beyond its floor now
		 * stays until the engine consumes it. */
		held = ri.inflight_bytes + ri.landed_bytes;
		floors += ri.dir == KVL_SCHED_PUSH && held > ri.floor ? held : ri.floor;
	}
	w.budget = floors + (below(2) ? 0 : below((uint32_t)(cap - floors) + 1));
	w.epoch++, kvl_sched_set_budget(w.s, w.budget, w.now);
	n_lk_drain_budgets++;
	return check_common("drain budget");
}

static bool all_terminal(void)
{
	for (uint32_t r = 0; r < w.nq; r++)
		if (!w.q[r].terminal)
			return false;
	return true;
}

/* What the scheduler holds, for a failed workload. */
static void dump(void)
{
	struct kvl_sched_stats st;

	kvl_sched_stats(w.s, &st);
	fprintf(stderr,
		"budget %" PRIu64 " staged %" PRIu64 " orphans %" PRIu64 " windows %" PRIu64
		" in flight %u last_stop %u\n",
		st.budget, st.staged, st.orphan_bytes, st.windows, st.xfers_inflight, st.last_stop);
	for (uint32_t r = 0; r < w.nq; r++) {
		struct kvl_sched_req_info ri;

		if (!w.q[r].opened || w.q[r].terminal ||
		    kvl_sched_req_info(w.s, w.q[r].id, w.now, &ri) != 0)
			continue;
		fprintf(stderr,
			"  req %d dir %u cls %u state %u: floor %" PRIu64 " window %" PRIu64
			" inflight %" PRIu64 " landed %" PRIu64 " blocks %u posted %u steps %u"
			" ready %u announced %u done %u evicted %u runnable %d\n",
			ri.id, ri.dir, ri.cls, ri.state, ri.floor, ri.window, ri.inflight_bytes,
			ri.landed_bytes, ri.blocks, ri.blocks_posted, ri.steps, ri.steps_ready,
			ri.steps_announced, ri.steps_done, ri.blocks_evicted, ri.runnable);
	}
}

static bool workload(void)
{
	struct kvl_sched_cfg *c = &w.c;

	memset(&w, 0, sizeof(w));
	w.lockstep = below(3) == 0;
	c->max_requests = 1 + below(8);
	c->max_blocks_total = 8 + below(64);
	c->max_steps_total = c->max_blocks_total;
	c->max_refs_total = c->max_blocks_total * 2;
	c->max_xfers = 1 + below(MAXX);
	c->slot_size = SLOT;
	c->slot_count = 8 + below(MAXSLOTS - 8);
	c->window_min = SLOT * (1 + below(8));
	c->window_max = c->window_min + SLOT * below(64);
	c->max_msg = below(3) ? SLOT * below(8) : 0;
	c->max_sge = 1 + below(4);
	c->starvation_ns = below(2) ? 200 + below(3000) : 0;
	c->resize_ns = 1 + below(5000);
	c->budget = below(2) ? 0 : SLOT * (1 + below(c->slot_count));
	/* A lockstep engine is announced one step at a time, so what it holds beyond can go. */
	c->ready_ahead = w.lockstep ? 1 : below(4);
	w.s = kvl_sched_create(c);
	FAIL_IF(w.s == NULL, "create");
	w.now = rnd() >> 20;
	w.budget = c->budget ? c->budget : (uint64_t)c->slot_size * c->slot_count;
	uint32_t to_open = 1 + below(MAXR);

	n_lk_workloads += w.lockstep;
	for (int it = 0; it < 400; it++) {
		bool ok = true;
		uint32_t a = below(100);

		w.now += below(300);
		if (a < 8 && w.nq < to_open)
			ok = w.lockstep ? do_open_batch(to_open) : do_open();
		else if (a < 35)
			ok = do_step();
		else if (a < 60)
			ok = do_complete(true);
		else if (a < 72)
			ok = do_events();
		else if (a < 93)
			ok = w.lockstep ? do_step_done_lockstep() : do_step_done();
		else if (a < 94)
			ok = do_cancel();
		else if (a < 97)
			ok = do_budget();
		if (!ok)
			return false;
	}
	/* Drain: no more failures; everything must end. The whole staging region as budget, or
	 * for a lockstep engine a budget shrunk to what its batch needs (see drain_lockstep()). */
	if (w.lockstep ? !drain_lockstep()
		       : (w.epoch++,
			  kvl_sched_set_budget(w.s, (uint64_t)c->slot_size * c->slot_count, w.now),
			  !check_common("drain budget")))
		return false;
	for (int it = 0; it < 20000 && (!all_terminal() || w.nfl); it++) {
		uint64_t batches = n_lk_batches;

		w.now += 50;
		if (!do_step() || !do_complete(false) || !do_events() ||
		    !(w.lockstep ? do_step_done_lockstep() : do_step_done()))
			return false;
		if (w.lockstep && w.nq < to_open && below(2) && it < 10000 &&
		    (!do_open_batch(to_open) || (n_lk_batches != batches && !drain_lockstep())))
			return false;
		while (!w.lockstep && w.nq < to_open && below(2) && it < 10000)
			if (!do_open())
				return false;
	}
	if (!all_terminal())
		dump();
	FAIL_IF(!all_terminal(), "a request never finished (%u requests%s)", w.nq,
		w.lockstep ? ", lockstep engine: deadlock" : "");
	FAIL_IF(w.nfl != 0 || w.staged != 0, "left in flight %u, staged %" PRIu64, w.nfl, w.staged);
	struct kvl_sched_stats st;

	kvl_sched_stats(w.s, &st);
	FAIL_IF(st.evicted_blocks != w.evicted || st.posted_blocks != w.posted_blocks,
		"scheduler: %" PRIu64 " evicted, %" PRIu64 " blocks posted; model %" PRIu64
		", %" PRIu64,
		st.evicted_blocks, st.posted_blocks, w.evicted, w.posted_blocks);
	n_evict_workloads += w.evicted > 0;
	n_lk_evict_workloads += w.lockstep && w.evicted > 0;
	FAIL_IF(st.staged != 0 || st.active || st.waiting || st.ended || st.orphan_bytes,
		"the scheduler still holds something");
	for (uint32_t i = 0; i < MAXSLOTS; i++)
		FAIL_IF(w.owner[i], "slot %u still owned", i);
	kvl_sched_free(w.s);
	return true;
}

int main(void)
{
	const char *env = getenv("KVL_SEED");
	uint64_t seed = env ? strtoull(env, NULL, 0) : 0x5eed2026u;
	unsigned n = getenv("KVL_WORKLOADS") ? (unsigned)atoi(getenv("KVL_WORKLOADS")) : 10000;
	unsigned reqs = 0;

	printf("test_sched_prop: seed %" PRIu64 " (override with KVL_SEED), %u workloads\n", seed,
	       n);
	for (cur_workload = 0; cur_workload < n; cur_workload++) {
		rng = seed * 0x9e3779b97f4a7c15ull + cur_workload + 1;
		if (!workload()) {
			fprintf(stderr, "replay: KVL_SEED=%" PRIu64 ", workload %u\n", seed,
				cur_workload);
			break;
		}
		reqs += w.nq;
	}
	printf("requests %u (done %" PRIu64 ", failed %" PRIu64 ", cancelled %" PRIu64
	       ", refused %" PRIu64 "), descriptors %" PRIu64 ", blocks %" PRIu64
	       ", starved serves checked %" PRIu64 ", calls checked %" PRIu64 "\n",
	       reqs, n_done, n_fail, n_cancel, n_refused, n_desc, n_blocks, n_starved, n_calls);
	printf("lockstep workloads %" PRIu64 " (batches %" PRIu64 ", requests done %" PRIu64
	       ", budget shrinks %" PRIu64 "), floor-pass descriptors %" PRIu64
	       ", posts beyond a floor checked against the kept floors %" PRIu64 "\n",
	       n_lk_workloads, n_lk_batches, n_lk_done, n_lk_shrinks, n_floor_pass, n_resv_checked);
	printf("evictions: %" PRIu64 " blocks in %" PRIu64 " calls (%" PRIu64
	       " of a block evicted before), %" PRIu64
	       " blocks sent again; workloads with evictions %" PRIu64 " (lockstep %" PRIu64
	       ", lockstep drains under a shrunk budget %" PRIu64 ")\n",
	       n_evicted, n_evict_calls, n_re_evicted, n_refetched, n_evict_workloads,
	       n_lk_evict_workloads, n_lk_drain_budgets);
	/* The lockstep drains must have needed eviction somewhere, or they test nothing. A
	 * short run (KVL_WORKLOADS) may not get there. */
	if (n >= 1000 && cur_workload == n)
		CHECK(n_lk_evict_workloads > 0);
	printf("READY steps whose kvl_sched_step_offsets() matched kvl_sched_block_offset(): "
	       "%" PRIu64 "\n",
	       n_offsets_checked);
	CHECK(n == 0 || n_offsets_checked > 0);
	return kvl_test_done("test_sched_prop");
}
