/* SPDX-License-Identifier: BSD-3-Clause */
/* The host tier transport: READs of local host segments into staging, by memcpy or an engine. */
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "kvl_clock.h"
#include "xport_tier.h"
#include "treq.h"

#define REAP_BURST 64
/* min_batch: passes an idle engine waits for a batch to gather, at most (xport_tier.h) */
#define IDLE_WAITS 4

/* One engine request (a local range of a READ) from its post here to its completion. */
struct part {
	uintptr_t dst;
	uint64_t off; /* in the engine's remote segment dma_seg */
	uint32_t len;
	uint32_t seq; /* its READ */
	bool done;
};

struct kvl_tier_conn {
	struct kvl_tier_opts o;
	struct kvl_treq *ring;
	uint32_t mask;
	uint32_t head, tail; /* [head, tail): taken, not reaped */
	int failed;	     /* fail_all's status: later READs complete with it */
	/* Engine requests by sequence number: [phead, ptail) handed to the engine (or failed)
	 * and not all completed, [ptail, pend) waiting to be handed over as one batch. */
	struct part *pr;
	uint32_t pmask;
	uint32_t phead, ptail, pend;
	uint64_t pending_bytes, handed_bytes;
	uint32_t pend_seen; /* pend at the last progress: parts posted since then */
	bool was_fresh;	    /* the progress before that had new parts too */
	uint8_t idle_waits; /* progresses the idle engine was kept waiting for min_batch */
	bool busy;	    /* engine copies in flight since busy_since */
	uint64_t busy_since;
	struct kvl_pace pace; /* o.rate_Bps > 0 */
	/* engine-owned destinations: the segment the last one was in (0: none), and the GPU
	 * segments the engine was told of (ids; a table entry never changes while live) */
	uint32_t dest_seg;
	uint64_t told[(KVL_MAX_SEGS + 63) / 64];
	struct kvl_tier_stats st;
};

/* One writer (the lcore); telemetry loads each counter relaxed. */
#define ST_ADD(c, f, v) __atomic_store_n(&(c)->st.f, (c)->st.f + (v), __ATOMIC_RELAXED)
#define ST_SET(c, f, v) __atomic_store_n(&(c)->st.f, (v), __ATOMIC_RELAXED)

static uint64_t now_ns(const struct kvl_tier_conn *c)
{
	return c->o.clock ? c->o.clock(c->o.clock_arg) : kvl_now_ns();
}

/* The bucket's tokens as of @now, leaving it as it is. */
static double pace_tokens(const struct kvl_pace *p, uint64_t now)
{
	double t = p->tokens;

	if (now > p->last_ns)
		t += (double)(now - p->last_ns) * p->rate_Bpns;
	return t > p->burst ? p->burst : t;
}

static void pace_refill(struct kvl_pace *p, uint64_t now)
{
	if (now > p->last_ns) {
		p->tokens = pace_tokens(p, now);
		p->last_ns = now;
	}
}

void kvl_pace_init(struct kvl_pace *p, uint64_t rate_Bps, uint64_t burst, uint64_t now)
{
	p->rate_Bpns = (double)rate_Bps / 1e9;
	p->burst = (double)burst;
	p->quantum = p->burst / 4;
	p->tokens = 0; /* a full bucket at start would let the first burst through at any rate */
	p->last_ns = now;
	p->open = true; /* the first take goes at once, on credit */
}

bool kvl_pace_take(struct kvl_pace *p, uint64_t bytes, uint64_t now)
{
	pace_refill(p, now);
	if (!p->open && p->tokens >= p->quantum)
		p->open = true;
	if (!p->open)
		return false;
	p->tokens -= (double)bytes;
	if (p->tokens < 0)
		p->open = false; /* the run is over: the next opens at a quarter burst */
	return true;
}

/* How long from @now until a take is granted (0: now), leaving the bucket as it is. */
static uint64_t pace_wait(const struct kvl_pace *p, uint64_t now)
{
	double t = pace_tokens(p, now);

	if (p->open || t >= p->quantum || p->rate_Bpns <= 0)
		return 0;
	return (uint64_t)((p->quantum - t) / p->rate_Bpns) + 1;
}

uint64_t kvl_pace_wait_ns(struct kvl_pace *p, uint64_t now)
{
	pace_refill(p, now);
	return pace_wait(p, now);
}

struct kvl_tier_conn *kvl_tier_new(const struct kvl_tier_opts *o)
{
	struct kvl_tier_conn *c;
	unsigned depth = o->depth ? o->depth : 8192;

	if (o->segs == NULL || o->staging == NULL || o->staging_len == 0 ||
	    (depth & (depth - 1)) != 0 || depth > (1u << 24) ||
	    (o->engine.ops != NULL &&
	     (o->engine_depth == 0 || (o->engine_depth & (o->engine_depth - 1)) != 0 ||
	      o->engine_depth > (1u << 24) || o->dma_len == 0 || o->dma_seg == 0))) {
		errno = EINVAL;
		return NULL;
	}
	c = calloc(1, sizeof(*c));
	if (c != NULL)
		c->ring = calloc(depth, sizeof(*c->ring));
	if (c != NULL && c->ring != NULL && o->engine.ops != NULL)
		c->pr = calloc(o->engine_depth, sizeof(*c->pr));
	if (c == NULL || c->ring == NULL || (o->engine.ops != NULL && c->pr == NULL)) {
		if (c != NULL)
			free(c->ring);
		free(c);
		errno = ENOMEM;
		return NULL;
	}
	c->o = *o;
	c->o.depth = depth;
	if (c->o.flush_bytes == 0)
		c->o.flush_bytes = 8ull << 20;
	c->mask = depth - 1;
	c->pmask = o->engine_depth - 1;
	c->st.engine = o->engine.ops != NULL;
	if (o->rate_Bps) /* bursts of one engine batch: pacing adds no per-batch cost */
		kvl_pace_init(&c->pace, o->rate_Bps, c->o.flush_bytes, now_ns(c));
	return c;
}

void kvl_tier_stats_read(const struct kvl_tier_conn *c, struct kvl_tier_stats *out)
{
	const uint64_t *src = (const uint64_t *)&c->st;
	uint64_t *dst = (uint64_t *)out;

	_Static_assert(sizeof(struct kvl_tier_stats) % sizeof(uint64_t) == 0, "u64 words");
	for (size_t i = 0; i < sizeof(*out) / sizeof(uint64_t); i++)
		dst[i] = __atomic_load_n(&src[i], __ATOMIC_RELAXED);
}

static bool in_range(uintptr_t a, uint64_t len, uintptr_t base, uint64_t blen)
{
	return a >= base && a - base <= blen && len <= blen - (a - base);
}

static bool in_staging(const struct kvl_tier_conn *c, const void *p, uint64_t len)
{
	return in_range((uintptr_t)p, len, (uintptr_t)c->o.staging, c->o.staging_len);
}

/* Whether segment @s may take a READ's bytes: host memory for memcpy; GPU memory the engine
 * was told of (once per segment) with an engine. */
static bool dest_usable(struct kvl_tier_conn *c, const struct kvl_seg *s)
{
	uint32_t k = s->id - 1;

	if (c->o.engine.ops == NULL)
		return !(s->flags & KVL_SEG_GPU);
	if (!(s->flags & KVL_SEG_GPU) || c->o.engine_add_local == NULL)
		return false;
	if (!(c->told[k / 64] >> (k % 64) & 1)) {
		if (c->o.engine_add_local(c->o.engine.c, s->base, s->len) < 0)
			return false;
		c->told[k / 64] |= 1ull << (k % 64);
	}
	return true;
}

/*
 * A local range: in staging, or an engine-owned destination (KVL_REQ_ENGINE_DEST, checked
 * against the same table at open) inside one live local segment. The segment of the last
 * destination is tried first: an engine's cache is one segment, so the walk of the table
 * happens once, not per READ.
 */
static bool local_ok(struct kvl_tier_conn *c, const void *p, uint64_t len, bool *dest)
{
	const struct kvl_seg *s;
	uintptr_t a = (uintptr_t)p;

	if (in_staging(c, p, len))
		return true;
	s = kvl_seg_lookup(c->o.segs, c->dest_seg);
	if (s == NULL || !in_range(a, len, (uintptr_t)s->base, s->len)) {
		s = NULL;
		for (uint32_t id = 1; id <= KVL_MAX_SEGS && s == NULL; id++) {
			const struct kvl_seg *t = kvl_seg_lookup(c->o.segs, id);

			if (t != NULL && in_range(a, len, (uintptr_t)t->base, t->len))
				s = t;
		}
	}
	if (s == NULL || !dest_usable(c, s))
		return false;
	c->dest_seg = s->id;
	*dest = true;
	return true;
}

/* The status @wr gets here, and its source address when KVL_OK. */
static int check(struct kvl_tier_conn *c, const struct kvl_wr *wr, uintptr_t *src)
{
	const struct kvl_seg *s;
	uint64_t sum = 0;
	bool dest = false;
	int st;

	if (c->failed)
		return c->failed;
	if (wr->op != KVL_OP_READ || (wr->flags & KVL_WR_NOTIFY))
		return KVL_ERR_ACCESS; /* the tier is read from, never written to, by a request */
	s = kvl_seg_lookup(c->o.segs, wr->remote_seg);
	st = kvl_seg_check(s, wr->remote_off, wr->length, KVL_OP_READ);
	if (st != KVL_OK)
		return st;
	if (s->flags & KVL_SEG_GPU)
		return KVL_ERR_GPU_MEMORY; /* a host tier: VRAM is no source of it */
	*src = (uintptr_t)s->base + wr->remote_off;
	/* the engine reads only what was pinned for it */
	if (c->o.engine.ops != NULL &&
	    (*src < c->o.dma_base || *src - c->o.dma_base > c->o.dma_len ||
	     wr->length > c->o.dma_len - (*src - c->o.dma_base)))
		return KVL_ERR_ACCESS;
	if (wr->n_sge <= 1) {
		if (!local_ok(c, wr->local, wr->length, &dest))
			return KVL_ERR_LOCAL;
	} else {
		if (wr->n_sge > KVL_WR_MAX_SGE)
			return KVL_ERR_LOCAL;
		for (unsigned k = 0; k < wr->n_sge; k++) {
			if (!local_ok(c, wr->sge[k].addr, wr->sge[k].length, &dest))
				return KVL_ERR_LOCAL;
			sum += wr->sge[k].length;
		}
		if (sum != wr->length)
			return KVL_ERR_LOCAL;
	}
	if (dest)
		ST_ADD(c, dest_reads, 1);
	return KVL_OK;
}

/* The engine's requests for one READ, one per local range, queued for the next hand-over. */
static uint16_t queue_parts(struct kvl_tier_conn *c, const struct kvl_wr *wr, uintptr_t src,
			    uint32_t seq)
{
	unsigned n = wr->n_sge > 1 ? wr->n_sge : 1;
	uint64_t off = src - c->o.dma_base;

	for (unsigned k = 0; k < n; k++) {
		struct part *p = &c->pr[c->pend++ & c->pmask];

		p->dst = (uintptr_t)(wr->n_sge > 1 ? wr->sge[k].addr : wr->local);
		p->len = wr->n_sge > 1 ? wr->sge[k].length : wr->length;
		p->off = off;
		p->seq = seq;
		p->done = false;
		off += p->len;
		c->pending_bytes += p->len;
	}
	return (uint16_t)n;
}

/* A part that completed (@status) or can no longer be handed over. */
static void part_done(struct kvl_tier_conn *c, struct part *p, int status)
{
	struct kvl_treq *r = &c->ring[p->seq & c->mask];

	p->done = true;
	r->left--;
	if (status != KVL_OK && r->status == KVL_OK)
		r->status = status;
}

void kvl_tier_set_estimates(struct kvl_tier_conn *c, uint64_t compute_ns, uint64_t step_bytes)
{
	if (c->o.engine.ops == NULL || c->o.engine_estimates == NULL ||
	    (compute_ns == c->st.est_compute_ns && step_bytes == c->st.est_step_bytes))
		return;
	c->o.engine_estimates(c->o.engine.c, compute_ns, step_bytes);
	ST_SET(c, est_compute_ns, compute_ns);
	ST_SET(c, est_step_bytes, step_bytes);
	ST_ADD(c, est_updates, 1);
}

/* Past the parts at the front that are done: their places may be used again. */
static void parts_retire(struct kvl_tier_conn *c)
{
	while (c->phead != c->ptail && c->pr[c->phead & c->pmask].done)
		c->phead++;
}

/* What waits goes to the engine as one batch (its next progress launches it). An engine that
 * refuses for another reason than being full is broken: what waits fails with conn-lost. */
static void hand_over(struct kvl_tier_conn *c)
{
	const struct kvl_xport_ops *ops = c->o.engine.ops;
	struct kvl_wr e[64];

	uint64_t before = c->handed_bytes;

	while (c->ptail != c->pend) {
		unsigned n = c->pend - c->ptail < 64 ? c->pend - c->ptail : 64, taken;
		int err = 0;

		for (unsigned i = 0; i < n; i++) {
			const struct part *p = &c->pr[(c->ptail + i) & c->pmask];

			e[i] = (struct kvl_wr){ .wr_id = c->ptail + i,
						.local = (void *)p->dst,
						.remote_off = p->off,
						.length = p->len,
						.remote_seg = c->o.dma_seg,
						.op = KVL_OP_READ,
						.flags = KVL_WR_CHECKED };
		}
		if (!c->busy) {
			c->busy = true;
			c->busy_since = now_ns(c);
		}
		taken = ops->post(c->o.engine.c, e, n, &err);
		for (unsigned i = 0; i < taken; i++) {
			uint32_t len = c->pr[(c->ptail + i) & c->pmask].len;

			c->handed_bytes += len;
			c->pending_bytes -= len;
		}
		c->ptail += taken;
		ST_ADD(c, copies, taken);
		if (taken == n)
			continue;
		if (err != -EAGAIN) { /* room was kept for them: the engine is broken */
			for (; c->ptail != c->pend; c->ptail++)
				part_done(c, &c->pr[c->ptail & c->pmask], KVL_ERR_CONN_LOST);
			c->pending_bytes = 0;
			ST_ADD(c, engine_errors, 1);
		}
		break;
	}
	if (c->handed_bytes > before) {
		uint64_t small = c->o.min_batch ? c->o.min_batch : 1u << 20;

		ST_ADD(c, handovers, 1);
		ST_ADD(c, handover_small, c->handed_bytes - before < small);
	}
	parts_retire(c);
}

static unsigned tier_post(void *p, const struct kvl_wr *wr, unsigned n, int *err)
{
	struct kvl_tier_conn *c = p;
	const struct kvl_xport_ops *eops = c->o.engine.ops;
	uint64_t t0 = 0, copied = 0;
	unsigned k;

	for (k = 0; k < n; k++) {
		struct kvl_treq *r = &c->ring[c->tail & c->mask];
		unsigned parts = wr[k].n_sge > 1 ? wr[k].n_sge : 1;
		uintptr_t src = 0;
		int st;

		if (c->tail - c->head == c->o.depth ||
		    (eops != NULL && c->pend - c->phead + parts > c->o.engine_depth) ||
		    (c->o.rate_Bps && !kvl_pace_take(&c->pace, wr[k].length, now_ns(c)))) {
			*err = -EAGAIN; /* full, or paced: the scheduler keeps it and posts it again
					 */
			break;
		}
		st = check(c, &wr[k], &src);
		*r = (struct kvl_treq){ .wr_id = wr[k].wr_id, .len = wr[k].length, .status = st };
		if (st == KVL_OK && eops != NULL) {
			r->left = queue_parts(c, &wr[k], src, c->tail);
		} else if (st == KVL_OK) {
			if (t0 == 0)
				t0 = now_ns(c);
			if (wr[k].n_sge <= 1) {
				memcpy(wr[k].local, (const void *)src, wr[k].length);
				copied++;
			} else {
				for (unsigned s = 0; s < wr[k].n_sge; s++) {
					memcpy(wr[k].sge[s].addr, (const void *)src,
					       wr[k].sge[s].length);
					src += wr[k].sge[s].length;
				}
				copied += wr[k].n_sge;
			}
		}
		if (r->status != KVL_OK) {
			ST_ADD(c, refused, 1);
			ST_SET(c, last_refusal, r->status);
		}
		c->tail++;
	}
	if (copied) {
		ST_ADD(c, copy_ns, now_ns(c) - t0);
		ST_ADD(c, copies, copied);
		ST_ADD(c, batches, 1);
	}
	ST_ADD(c, reads, k);
	ST_SET(c, inflight, c->tail - c->head);
	return k;
}

/* The engine's completions into their READs; the busy time once it has nothing in flight. */
static unsigned engine_reap(struct kvl_tier_conn *c)
{
	const struct kvl_xport_ops *ops = c->o.engine.ops;
	struct kvl_wc wc[REAP_BURST];
	unsigned n, total = 0;

	while ((n = ops->reap(c->o.engine.c, wc, REAP_BURST)) > 0) {
		for (unsigned i = 0; i < n; i++) {
			struct part *p = &c->pr[(uint32_t)wc[i].wr_id & c->pmask];

			c->handed_bytes -= p->len;
			part_done(c, p, wc[i].status);
		}
		total += n;
	}
	parts_retire(c);
	if (c->busy && c->handed_bytes == 0) {
		ST_ADD(c, copy_ns, now_ns(c) - c->busy_since);
		c->busy = false;
	}
	if (total) {
		struct kvl_xport_stats es;

		ops->stats(c->o.engine.c, &es);
		ST_SET(c, batches, es.qp_posts);
		if (c->o.engine_methods != NULL) {
			uint64_t ce = 0, g = 0;

			c->o.engine_methods(c->o.engine.c, &ce, &g);
			ST_SET(c, batches_copy_engine, ce);
			ST_SET(c, batches_gather, g);
		}
		if (c->o.engine_counters != NULL) {
			struct kvl_tier_engine_ctr e;
			const uint64_t *src = (const uint64_t *)&e;
			uint64_t *dst = (uint64_t *)&c->st.eng;

			c->o.engine_counters(c->o.engine.c, &e);
			for (size_t i = 0; i < sizeof(e) / sizeof(uint64_t); i++)
				__atomic_store_n(&dst[i], src[i], __ATOMIC_RELAXED);
		}
	}
	return total;
}

/*
 * Whether what waits goes to the engine now. Once flush_bytes of it have gathered, or at once
 * while less than that is in flight: the engine never runs dry, and while it is busy the
 * lcore's passes (a few descriptors each) add up to one batch of about flush_bytes, so the
 * engine's per-batch cost (an event, a cross-stream join) is paid per megabytes, not per pass.
 * With min_batch, "at once" holds only for a first pass (the engine idle, nothing posted the
 * pass before) or a pass that posted nothing (the scheduler has no more for now); while passes
 * keep posting, a batch waits for min_batch, and while the engine is busy with min_batch or
 * more in flight, for flush_bytes. Without that, an engine that drains a pass's worth as fast
 * as passes come got one batch a pass (or one of min_batch), whose cost slowed the passes: a
 * state the run stayed in or not, from call to call (docs/gpu-bench.md, the host KV tier).
 */
static bool hand_now(struct kvl_tier_conn *c)
{
	bool fresh = c->pend != c->pend_seen, streaming = fresh && c->was_fresh;

	c->pend_seen = c->pend;
	c->was_fresh = fresh;
	if (c->ptail == c->pend)
		return false;
	if (c->pending_bytes >= c->o.flush_bytes)
		return true;
	if (c->handed_bytes >= c->o.flush_bytes)
		return false;
	if (c->o.min_batch == 0 || !fresh)
		return true;
	/* busy: the batch grows behind what runs, and goes before flush_bytes only once less
	 * than min_batch is left in flight: handing 2 MiB over whenever that much had gathered
	 * kept the 64 KiB runs in batches of 2.7 MiB on some calls (0.93x the transport alone,
	 * 7.2 MiB and 1.00x on others) */
	if (c->handed_bytes != 0)
		return c->pending_bytes >= c->o.min_batch && c->handed_bytes < c->o.min_batch;
	if (c->pending_bytes >= c->o.min_batch)
		return true;
	/* idle: a first pass goes at once; a trickle waits IDLE_WAITS passes at most */
	if (!streaming || c->idle_waits >= IDLE_WAITS)
		return true;
	c->idle_waits++;
	return false;
}

static unsigned tier_progress(void *p)
{
	struct kvl_tier_conn *c = p;
	unsigned work = 0;

	if (c->o.engine.ops == NULL)
		return 0;
	if (hand_now(c)) {
		hand_over(c);
		c->idle_waits = 0;
		work++;
	}
	work += c->o.engine.ops->progress(c->o.engine.c);
	work += engine_reap(c);
	return work; /* copies in flight or waiting: tier_due says when to look again */
}

/*
 * When the lcore must pass again although the last progress did no work (a copy's end raises
 * no event, so it naps until then): at once while parts wait for an idle engine (hand_now
 * lets them wait a few passes at most); while copies are in flight, when the engine says the
 * oldest should end (at once, for an engine that cannot say); while the pacing refuses READs,
 * when the bucket's next run opens (a quarter of its burst).
 */
static uint64_t tier_due(const void *p)
{
	const struct kvl_tier_conn *c = p;
	const struct kvl_xport_ops *e = c->o.engine.ops;
	uint64_t due = UINT64_MAX, now, w;

	/* called every pass: the clock is read only where something waits */
	if (e != NULL && c->pend != c->phead) {
		if (c->ptail != c->pend && c->handed_bytes == 0)
			return now_ns(c);
		due = e->due ? e->due(c->o.engine.c) : now_ns(c);
	}
	/* READs the bucket refused wait in the scheduler: look again when the next run opens
	 * (an open run grants at once: nothing to wait for) */
	if (c->o.rate_Bps && !c->pace.open) {
		now = now_ns(c);
		w = pace_wait(&c->pace, now);
		if (w > 0 && now + w < due)
			due = now + w;
	}
	return due;
}

static unsigned tier_reap(void *p, struct kvl_wc *wc, unsigned max)
{
	struct kvl_tier_conn *c = p;
	uint64_t ok = 0, bytes = 0;
	unsigned n = kvl_treq_reap(c->ring, c->mask, &c->head, c->tail, wc, max, &ok, &bytes);

	if (n) {
		ST_ADD(c, done, ok);
		ST_ADD(c, bytes, bytes);
		ST_SET(c, inflight, c->tail - c->head);
	}
	return n;
}

static void tier_fail_all(void *p, int status)
{
	struct kvl_tier_conn *c = p;

	if (!c->failed)
		c->failed = status;
	if (c->o.engine.ops != NULL) {
		/* lets what is on the stream land, then completes it with @status; what was
		 * never handed over completes with @status too */
		c->o.engine.ops->fail_all(c->o.engine.c, status);
		engine_reap(c);
		for (; c->ptail != c->pend; c->ptail++)
			part_done(c, &c->pr[c->ptail & c->pmask], status);
		c->pending_bytes = 0;
		parts_retire(c);
	}
}

static int tier_broken(const void *p)
{
	(void)p;
	return 0; /* a broken engine fails its READs with a status; the tier stays routable */
}

static unsigned tier_outstanding(const void *p)
{
	const struct kvl_tier_conn *c = p;

	return c->tail - c->head;
}

static void tier_stats(const void *p, struct kvl_xport_stats *out)
{
	struct kvl_tier_stats s;

	kvl_tier_stats_read(p, &s);
	memset(out, 0, sizeof(*out));
	out->posted_read = s.reads;
	out->done_read = s.done;
	out->bytes_read = s.bytes;
	out->qp_posts = s.batches;
	out->qp_outstanding = s.inflight;
}

static void tier_free(void *p)
{
	struct kvl_tier_conn *c = p;

	if (c == NULL)
		return;
	if (c->o.engine.ops != NULL)
		c->o.engine.ops->free(c->o.engine.c);
	free(c->pr);
	free(c->ring);
	free(c);
}

const struct kvl_xport_ops kvl_xport_tier = {
	.name = "tier",
	.post = tier_post,
	.progress = tier_progress,
	.reap = tier_reap,
	.fail_all = tier_fail_all,
	.broken = tier_broken,
	.outstanding = tier_outstanding,
	.stats = tier_stats,
	.free = tier_free,
	.due = tier_due,
};
