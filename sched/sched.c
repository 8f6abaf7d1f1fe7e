/* SPDX-License-Identifier: BSD-3-Clause */
/* The scheduler: admission, windows under the budget, picking, coalescing, completions. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "kvlane/kvlane.h"
#include "sched.h"
#include "sched_priv.h"

enum blk_state { B_UNPOSTED = 0, B_INFLIGHT, B_LANDED, B_FREED };
enum stp_state { S_WAIT = 0, S_READY, S_DONE };
enum req_state { R_FREE = 0, R_WAITING, R_ACTIVE, R_ENDED };

/* A block, stored in transfer order (first use, then order inside the step). */
struct blk {
	uint64_t remote_off;
	uint64_t local_off; /* PUSH: given; PULL: slot × slot_size once posted */
	uint32_t remote_seg;
	uint32_t length;
	uint32_t local_seg; /* PUSH: the caller's region (ranges never cross regions) */
	uint32_t first_use; /* the step whose READY waits for it */
	uint32_t last_use;  /* open time only: the peak residency, a block named twice by a step */
	uint32_t ref;	    /* steps not DONE yet that name it: the slot is freed at 0 */
	uint32_t map;	    /* entry i holds where the caller's block i went */
	uint32_t orig;	    /* the caller's index of this block (kvl_sched_step_offsets()) */
	uint32_t slot;
	/* enum blk_state; not a char: a char store may alias anything, and the loops that set it
	 * would reload what they keep in registers. */
	uint32_t state;
	uint32_t spare; /* 64 bytes in all: a block is found with a shift, not a multiply */
};
_Static_assert(sizeof(struct blk) == 64, "a block is 64 bytes");

struct stp {
	int64_t acc; /* open time only: residency difference array */
	uint64_t ready_ns;
	uint32_t ref0; /* into the refs pool */
	uint32_t nref;
	uint32_t pending; /* blocks first used here that have not landed */
	uint8_t state;
};

struct req {
	uint64_t peer, deadline, user;
	uint64_t seq; /* open order: ties in deadline go first come, first served */
	uint64_t open_ns, wait_since, last_done_ns;
	/* inflight_bytes: dest, ended: what is still out (its end event waits for it) */
	uint64_t inflight_bytes, landed_bytes, total_charge;
	uint64_t total_bytes; /* Σ block lengths: what its steps bring (kvl_sched_estimates) */
	uint64_t floor, window;
	uint64_t evicted_bytes;
	uint32_t evicted;
	uint32_t blk0, nblk, stp0, nstp, ref0, nref;
	uint32_t cursor; /* next block to post */
	uint32_t landed, ready_next, ready_emitted, done;
	uint32_t last_slot; /* where its last PULL block went: the next one tries the slot after */
	uint32_t heap_pos;  /* in the runnable heap (or the waiting heap while waiting) */
	uint32_t fifo_prev, fifo_next;
	uint32_t notify_next;
	int32_t status;
	uint16_t gen;
	uint8_t state, dir, cls;
	bool runnable, in_notify, cancel_ev;
	bool dest;  /* PULL into the caller's memory: no slot, charged while in flight only */
	bool slots; /* a PULL into staging: its blocks take slots (one load on the hot path) */
};

struct xrec {
	uint64_t charge, post_ns;
	uint32_t req, first, n, bytes;
	uint32_t gen;
	uint32_t next_free;
	uint16_t req_gen;
	uint16_t nrun;
	bool live;
	struct {
		uint32_t slot, n;
	} run[KVL_SCHED_MAX_SGE]; /* PULL staging runs, freed by themselves if the request ended */
};

/* Priority queue of request indices, with positions kept in the requests. */
struct heap {
	uint32_t *a;
	uint32_t n;
};

struct kvl_sched {
	struct kvl_sched_cfg cfg;
	uint64_t capacity; /* staging bytes */
	uint64_t budget;   /* as set, clamped to capacity */
	uint64_t staged;   /* Σ charges held, orphans included */
	uint64_t orphan;
	uint64_t next_resize;
	uint64_t seq;
	uint64_t sum_floor; /* Σ floor over active requests */
	uint64_t sum_win;   /* Σ window over active requests */
	/* Σ unmet() over active requests: the staging each may still claim to reach its
	 * floor. Every post keeps it free for the others (post_from()). */
	uint64_t unmet;
	uint64_t wait_floor; /* Σ floor over waiting requests */
	uint32_t short_win;  /* active requests whose window is below their floor */
	bool dirty;	     /* windows need recomputing before the next pick */
	bool admit_check;    /* a request opened, one ended or one freed staging: admit? */
	bool floor_only;     /* the floor pass of kvl_sched_step(): no post beyond a floor */

	struct req *req;
	uint32_t req_free;
	struct blk *blk;
	struct stp *stp;
	uint32_t *ref;
	struct kvl_ranges blk_r, stp_r, ref_r;
	struct kvl_slots slots;
	struct xrec *x;
	uint32_t x_free;

	struct heap run;	       /* runnable: priority order */
	struct heap wait;	       /* waiting for admission: priority order */
	uint32_t fifo_head, fifo_tail; /* runnable, by wait_since: the starvation check */
	uint32_t notify_head, notify_tail;
	uint32_t *order; /* rebalance scratch */

	/* estimates: transfer ns per byte (<< 16), compute ns per step per class */
	uint64_t nspb_q16;
	uint64_t compute_ns[KVL_SCHED_CLASSES];
	/* bytes a step brings per class (EWMA at each DONE), the class of the last DONE, and
	 * the DONEs counted: kvl_sched_estimates() */
	uint64_t step_bytes[KVL_SCHED_CLASSES];
	uint8_t est_cls;
	uint64_t est_gen;

	struct kvl_sched_stats st; /* counters; the gauges are filled in by kvl_sched_stats() */
};

#define EWMA_SHIFT 3 /* weight 1/8: follows a change within ~10 samples, ignores one outlier */

/* ---- small helpers ---- */

/* Whether @r's blocks land in staging slots: a PULL without caller-given destinations. */
static inline bool slotted(const struct req *r)
{
	return r->slots;
}

static inline uint64_t charge_of(const struct kvl_sched *s, const struct req *r,
				 const struct blk *b)
{
	/* A PULL block holds a whole slot of staging whatever its length. */
	return slotted(r) ? s->cfg.slot_size : b->length;
}

static inline uint64_t usage(const struct req *r)
{
	return r->inflight_bytes + r->landed_bytes;
}

/* What an active request is promised: its floor, unless the budget shrank below Σ floors. */
static inline uint64_t guaranteed(const struct req *r)
{
	return r->floor < r->window ? r->floor : r->window;
}

/* What it may still take to reach that promise, whatever the others hold. */
static inline uint64_t unmet(const struct req *r)
{
	uint64_t g = guaranteed(r), u = usage(r);

	return g > u ? g - u : 0;
}

static inline bool before(const struct req *a, const struct req *b)
{
	if (a->cls != b->cls)
		return a->cls < b->cls;
	if (a->deadline != b->deadline)
		return a->deadline < b->deadline;
	return a->seq < b->seq;
}

static void heap_swap(struct kvl_sched *s, struct heap *h, uint32_t i, uint32_t j)
{
	uint32_t t = h->a[i];

	h->a[i] = h->a[j];
	h->a[j] = t;
	s->req[h->a[i]].heap_pos = i;
	s->req[h->a[j]].heap_pos = j;
}

static void heap_up(struct kvl_sched *s, struct heap *h, uint32_t i)
{
	while (i > 0) {
		uint32_t p = (i - 1) / 2;

		if (!before(&s->req[h->a[i]], &s->req[h->a[p]]))
			break;
		heap_swap(s, h, i, p);
		i = p;
	}
}

static void heap_down(struct kvl_sched *s, struct heap *h, uint32_t i)
{
	for (;;) {
		uint32_t l = 2 * i + 1, m = i;

		if (l < h->n && before(&s->req[h->a[l]], &s->req[h->a[m]]))
			m = l;
		if (l + 1 < h->n && before(&s->req[h->a[l + 1]], &s->req[h->a[m]]))
			m = l + 1;
		if (m == i)
			return;
		heap_swap(s, h, i, m);
		i = m;
	}
}

static void heap_push(struct kvl_sched *s, struct heap *h, uint32_t ri)
{
	h->a[h->n] = ri;
	s->req[ri].heap_pos = h->n;
	h->n++;
	heap_up(s, h, h->n - 1);
}

static void heap_del(struct kvl_sched *s, struct heap *h, uint32_t ri)
{
	uint32_t i = s->req[ri].heap_pos;

	h->n--;
	if (i != h->n) {
		h->a[i] = h->a[h->n];
		s->req[h->a[i]].heap_pos = i;
		heap_down(s, h, i);
		heap_up(s, h, i);
	}
	s->req[ri].heap_pos = KVL_NONE;
}

static void fifo_del(struct kvl_sched *s, uint32_t ri)
{
	struct req *r = &s->req[ri];

	if (r->fifo_prev != KVL_NONE)
		s->req[r->fifo_prev].fifo_next = r->fifo_next;
	else
		s->fifo_head = r->fifo_next;
	if (r->fifo_next != KVL_NONE)
		s->req[r->fifo_next].fifo_prev = r->fifo_prev;
	else
		s->fifo_tail = r->fifo_prev;
	r->fifo_prev = r->fifo_next = KVL_NONE;
}

/* `now` never goes backwards, so appending keeps the list sorted by wait_since. */
static void fifo_add(struct kvl_sched *s, uint32_t ri, uint64_t now)
{
	struct req *r = &s->req[ri];

	r->wait_since = now;
	r->fifo_next = KVL_NONE;
	r->fifo_prev = s->fifo_tail;
	if (s->fifo_tail != KVL_NONE)
		s->req[s->fifo_tail].fifo_next = ri;
	else
		s->fifo_head = ri;
	s->fifo_tail = ri;
}

/* Keep the runnable set exact: active, a block left to send, and room for it. */
static void update_runnable(struct kvl_sched *s, uint32_t ri, uint64_t now)
{
	struct req *r = &s->req[ri];
	bool want = r->state == R_ACTIVE && r->cursor < r->nblk &&
		    usage(r) + charge_of(s, r, &s->blk[r->blk0 + r->cursor]) <= r->window;

	if (want == r->runnable)
		return;
	r->runnable = want;
	if (want) {
		heap_push(s, &s->run, ri);
		fifo_add(s, ri, now);
	} else {
		heap_del(s, &s->run, ri);
		fifo_del(s, ri);
	}
}

static void notify(struct kvl_sched *s, uint32_t ri)
{
	struct req *r = &s->req[ri];

	if (r->in_notify)
		return;
	r->in_notify = true;
	r->notify_next = KVL_NONE;
	if (s->notify_tail != KVL_NONE)
		s->req[s->notify_tail].notify_next = ri;
	else
		s->notify_head = ri;
	s->notify_tail = ri;
}

/* A landed step not announced yet, and (ready_ahead) room among the announced not DONE. */
static inline bool may_announce(const struct kvl_sched *s, const struct req *r)
{
	return r->ready_emitted < r->ready_next &&
	       (s->cfg.ready_ahead == 0 || r->ready_emitted - r->done < s->cfg.ready_ahead);
}

static struct req *lookup(const struct kvl_sched *s, int id, uint32_t *ri)
{
	if (id < 0)
		return NULL;
	uint32_t i = (uint32_t)id & 0xffff, gen = (uint32_t)id >> 16;

	if (i >= s->cfg.max_requests || s->req[i].state == R_FREE || s->req[i].gen != gen)
		return NULL;
	*ri = i;
	return &s->req[i];
}

static void free_ranges(struct kvl_sched *s, struct req *r)
{
	kvl_ranges_put(&s->blk_r, r->blk0, r->nblk);
	kvl_ranges_put(&s->stp_r, r->stp0, r->nstp);
	kvl_ranges_put(&s->ref_r, r->ref0, r->nref);
	r->nblk = r->nstp = r->nref = 0;
}

/* ---- create / free ---- */

void kvl_sched_free(struct kvl_sched *s)
{
	if (s == NULL)
		return;
	free(s->req);
	free(s->blk);
	free(s->stp);
	free(s->ref);
	free(s->x);
	free(s->run.a);
	free(s->wait.a);
	free(s->order);
	kvl_ranges_fini(&s->blk_r);
	kvl_ranges_fini(&s->stp_r);
	kvl_ranges_fini(&s->ref_r);
	kvl_slots_fini(&s->slots);
	free(s);
}

struct kvl_sched *kvl_sched_create(const struct kvl_sched_cfg *cfg)
{
	struct kvl_sched *s;
	struct kvl_sched_cfg c;

	if (cfg == NULL) {
		errno = EINVAL;
		return NULL;
	}
	c = *cfg;
	if (c.max_steps_total == 0)
		c.max_steps_total = c.max_blocks_total;
	if (c.max_refs_total == 0)
		c.max_refs_total = c.max_blocks_total * 2;
	if (c.max_requests == 0 || c.max_requests > 65536 || c.max_blocks_total == 0 ||
	    c.max_xfers == 0 || c.slot_size == 0 || c.slot_count == 0 || c.window_min == 0 ||
	    c.window_min > c.window_max || c.max_sge == 0 || c.max_sge > KVL_SCHED_MAX_SGE ||
	    c.max_blocks_total > UINT32_MAX / 2) {
		errno = EINVAL;
		return NULL;
	}
	s = calloc(1, sizeof(*s));
	if (s == NULL)
		return NULL;
	s->cfg = c;
	s->capacity = (uint64_t)c.slot_size * c.slot_count;
	s->budget = c.budget && c.budget < s->capacity ? c.budget : s->capacity;
	s->req = calloc(c.max_requests, sizeof(*s->req));
	s->blk = calloc(c.max_blocks_total, sizeof(*s->blk));
	s->stp = calloc(c.max_steps_total, sizeof(*s->stp));
	s->ref = calloc(c.max_refs_total, sizeof(*s->ref));
	s->x = calloc(c.max_xfers, sizeof(*s->x));
	s->run.a = calloc(c.max_requests, sizeof(uint32_t));
	s->wait.a = calloc(c.max_requests, sizeof(uint32_t));
	s->order = calloc(c.max_requests, sizeof(uint32_t));
	if (s->req == NULL || s->blk == NULL || s->stp == NULL || s->ref == NULL || s->x == NULL ||
	    s->run.a == NULL || s->wait.a == NULL || s->order == NULL ||
	    kvl_ranges_init(&s->blk_r, c.max_blocks_total, c.max_requests) ||
	    kvl_ranges_init(&s->stp_r, c.max_steps_total, c.max_requests) ||
	    kvl_ranges_init(&s->ref_r, c.max_refs_total, c.max_requests) ||
	    kvl_slots_init(&s->slots, c.slot_count)) {
		kvl_sched_free(s);
		errno = ENOMEM;
		return NULL;
	}
	for (uint32_t i = 0; i < c.max_requests; i++) {
		s->req[i].gen = 1;
		s->req[i].heap_pos = KVL_NONE;
		s->req[i].notify_next = i + 1 < c.max_requests ? i + 1 : KVL_NONE;
	}
	s->req_free = 0; /* the free list reuses notify_next */
	for (uint32_t i = 0; i < c.max_xfers; i++)
		s->x[i].next_free = i + 1 < c.max_xfers ? i + 1 : KVL_NONE;
	s->x_free = 0;
	s->fifo_head = s->fifo_tail = KVL_NONE;
	s->notify_head = s->notify_tail = KVL_NONE;
	s->dirty = true;
	return s;
}

/* ---- open ---- */

/* 1 ≤ length ≤ window_max, ≤ slot_size for PULL, ≤ max_msg when merging: one bound, so a
 * length is good when length − 1 < it. */
static uint64_t len_bound(const struct kvl_sched *s, const struct kvl_sched_req_desc *d)
{
	uint64_t most = s->cfg.window_max;

	if (d->dir == KVL_SCHED_PULL && !d->dest && s->cfg.slot_size < most)
		most = s->cfg.slot_size;
	if (s->cfg.max_msg && s->cfg.max_msg < most)
		most = s->cfg.max_msg;
	return most;
}

/* The block lengths, checked apart only where open fails before build() (which checks them
 * as it copies): a bad descriptor says -EINVAL before a full pool says -ENOSPC. */
static bool lengths_ok(const struct kvl_sched *s, const struct kvl_sched_req_desc *d)
{
	const uint64_t most = len_bound(s, d);

	for (uint32_t i = 0; i < d->n_blocks; i++)
		if ((uint64_t)d->blocks[i].length - 1 >= most)
			return false;
	return true;
}

/* Copy the descriptor into the pools, in transfer order; -EINVAL leaves the pools as taken. */
static int build(struct kvl_sched *s, struct req *r, const struct kvl_sched_req_desc *d)
{
	struct blk *B = &s->blk[r->blk0];
	struct stp *S = &s->stp[r->stp0];
	uint32_t *R = &s->ref[r->ref0];
	uint32_t next = 0;

	for (uint32_t i = 0; i < d->n_blocks; i++)
		B[i].map = KVL_NONE;
	const uint32_t nb = d->n_blocks, *sb = d->step_blocks;

	for (uint32_t k = 0; k < d->n_steps; k++) {
		uint32_t a = d->step_first[k], e = d->step_first[k + 1], pending = 0;

		for (uint32_t j = a; j < e; j++) {
			uint32_t ob = sb[j], t;

			if (ob >= nb)
				return -EINVAL; /* no such block */
			t = B[ob].map;
			if (t == KVL_NONE) {
				/* First use: its place in the transfer queue is now. */
				t = next++;
				B[ob].map = t;
				B[t].orig = ob;
				B[t].first_use = k;
				B[t].ref = 1;
				pending++;
			} else if (B[t].last_use == k) {
				return -EINVAL; /* named twice by one step */
			} else {
				B[t].ref++;
			}
			B[t].last_use = k;
			R[j] = t;
		}
		S[k] = (struct stp){ .ref0 = r->ref0 + a, .nref = e - a, .pending = pending };
	}
	if (next != d->n_blocks)
		return -EINVAL; /* a block no step needs would sit in staging forever */

	/* The data fields are apart from map/orig/first_use/last_use/ref, so writing block j
	 * never clobbers what is still to be read. */
	uint64_t total = 0, bytes = 0, longest = 0;
	const bool pull = slotted(r);
	const uint32_t ns = d->n_steps;
	const uint64_t most = len_bound(s, d);

	for (uint32_t i = 0; i < nb; i++) {
		const struct kvl_sched_block *in = &d->blocks[i];
		struct blk *b = &B[B[i].map];
		const uint32_t len = in->length, last = b->last_use;
		/* charge_of(): a PULL block holds a whole slot */
		const int64_t c = pull ? (int64_t)s->cfg.slot_size : (int64_t)len;

		if ((uint64_t)len - 1 >= most)
			return -EINVAL; /* lengths_ok() */

		b->remote_off = in->remote_off;
		b->local_off = in->local_off;
		b->local_seg = in->local_seg;
		b->remote_seg = in->remote_seg;
		b->length = len;
		b->state = B_UNPOSTED;
		b->slot = KVL_NONE;
		total += (uint64_t)c;
		bytes += len;
		longest = len > longest ? len : longest;
		S[b->first_use].acc += c;
		if (last + 1 < ns)
			S[last + 1].acc -= c;
	}
	/* Steps run in order, so what must be resident at step k is every block first used at
	 * or before k and last used at or after k: the window can never go below that. */
	int64_t cur = 0, peak = 0;

	for (uint32_t k = 0; k < d->n_steps; k++) {
		cur += S[k].acc;
		if (cur > peak)
			peak = cur;
	}
	r->total_charge = total;
	r->total_bytes = bytes;
	/* dest: what has landed holds nothing here; one block in flight is progress */
	if (r->dest)
		peak = (int64_t)longest;
	r->floor = (uint64_t)peak > s->cfg.window_min ? (uint64_t)peak : s->cfg.window_min;
	if (r->floor > s->cfg.window_max || r->floor > s->capacity)
		return -EINVAL; /* could never be admitted */
	return 0;
}

static int check_desc(const struct kvl_sched_req_desc *d)
{
	if (d == NULL || d->blocks == NULL || d->step_first == NULL || d->step_blocks == NULL ||
	    d->n_blocks == 0 || d->n_steps == 0 || d->step_first[0] != 0 ||
	    (d->dir != KVL_SCHED_PULL && d->dir != KVL_SCHED_PUSH) || d->cls >= KVL_SCHED_CLASSES ||
	    d->dest > 1 || (d->dest && d->dir != KVL_SCHED_PULL))
		return -EINVAL;
	for (uint32_t k = 0; k < d->n_steps; k++)
		if (d->step_first[k + 1] <= d->step_first[k])
			return -EINVAL; /* empty steps, or going backwards */
	return 0; /* the lengths: build(), or lengths_ok() where open fails before it */
}

int kvl_sched_open(struct kvl_sched *s, const struct kvl_sched_req_desc *d, uint64_t now)
{
	int rc = check_desc(d);

	if (rc)
		return rc;
	uint32_t nref = d->step_first[d->n_steps];

	if (s->req_free == KVL_NONE)
		return lengths_ok(s, d) ? -ENOSPC : -EINVAL;
	uint32_t ri = s->req_free;
	struct req *r = &s->req[ri];
	uint16_t gen = r->gen;
	uint32_t free_next = r->notify_next;

	memset(r, 0, sizeof(*r));
	r->gen = gen;
	r->dir = d->dir;
	r->dest = d->dest != 0;
	r->slots = d->dir == KVL_SCHED_PULL && !r->dest;
	r->blk0 = kvl_ranges_get(&s->blk_r, d->n_blocks);
	r->stp0 = kvl_ranges_get(&s->stp_r, d->n_steps);
	r->ref0 = kvl_ranges_get(&s->ref_r, nref);
	r->nblk = r->blk0 == KVL_NONE ? 0 : d->n_blocks;
	r->nstp = r->stp0 == KVL_NONE ? 0 : d->n_steps;
	r->nref = r->ref0 == KVL_NONE ? 0 : nref;
	if (r->blk0 == KVL_NONE || r->stp0 == KVL_NONE || r->ref0 == KVL_NONE) {
		free_ranges(s, r);
		r->notify_next = free_next;
		return lengths_ok(s, d) ? -ENOSPC : -EINVAL;
	}
	rc = build(s, r, d);
	if (rc) {
		free_ranges(s, r);
		r->notify_next = free_next;
		return rc;
	}
	s->req_free = free_next;
	r->peer = d->peer;
	r->deadline = d->deadline;
	r->user = d->user;
	r->cls = d->cls;
	r->seq = s->seq++;
	r->open_ns = r->last_done_ns = now;
	r->last_slot = KVL_NONE;
	r->heap_pos = KVL_NONE;
	r->fifo_prev = r->fifo_next = KVL_NONE;
	r->notify_next = KVL_NONE;
	r->state = R_WAITING;
	heap_push(s, &s->wait, ri);
	s->wait_floor += r->floor;
	s->admit_check = true;
	return (int)((uint32_t)gen << 16 | ri);
}

/* ---- windows ---- */

static int cmp_order(const void *a, const void *b, void *arg)
{
	const struct kvl_sched *s = arg;
	const struct req *x = &s->req[*(const uint32_t *)a], *y = &s->req[*(const uint32_t *)b];

	return before(x, y) ? -1 : before(y, x) ? 1 : 0;
}

/* Depth ≈ ceil(transfer time of a step / compute time of a step) + 1 steps ahead. */
static uint64_t desired(const struct kvl_sched *s, const struct req *r)
{
	uint64_t step_bytes = r->total_charge / r->nstp, depth = 2, w;
	uint64_t tc = s->compute_ns[r->cls];

	if (step_bytes == 0)
		step_bytes = 1;
	if (s->nspb_q16 && tc) {
		uint64_t tx = (step_bytes * s->nspb_q16) >> 16;

		depth = (tx + tc - 1) / tc + 1;
		if (depth > r->nstp)
			depth = r->nstp;
	}
	w = depth > s->cfg.window_max / step_bytes ? s->cfg.window_max : depth * step_bytes;
	if (w > r->total_charge)
		w = r->total_charge; /* a short request needs no more than all of it */
	if (w < r->floor)
		w = r->floor;
	return w < s->cfg.window_max ? w : s->cfg.window_max;
}

/*
 * Admission, then windows: every active request first gets its floor (in priority order, so
 * that when the budget shrank below Σ floors the most urgent keep theirs), then the floors of
 * the requests still waiting are set aside, then each active one gets what it wants beyond
 * its floor, again in priority order. Σ windows ≤ budget − orphans always.
 *
 * Admission counts what the active requests hold, not only their floors: staging landed
 * beyond a floor (taken when there was room, then kept when a window shrank) is not given
 * back until the engine consumes it, so a request admitted into that room could not reach
 * its own floor. Setting the waiting floors aside keeps an active request from taking, as
 * extra window, the room a request waiting for admission will need: if it landed it there,
 * an engine that advances its requests together would wait for one that never gets in.
 */
static void rebalance(struct kvl_sched *s, uint64_t now)
{
	uint64_t avail = s->budget > s->orphan ? s->budget - s->orphan : 0, floors = 0;
	uint64_t held = s->staged; /* staged + Σ max(0, floor − usage): what admission may use */
	uint32_t n = 0;

	for (uint32_t i = 0; i < s->cfg.max_requests; i++) {
		struct req *r = &s->req[i];

		if (r->state != R_ACTIVE)
			continue;
		floors += r->floor;
		held += r->floor > usage(r) ? r->floor - usage(r) : 0;
		s->order[n++] = i;
	}
	/* Strict priority order: a big request at the head is not overtaken forever by small
	 * ones behind it. */
	while (s->wait.n) {
		uint32_t ri = s->wait.a[0];
		struct req *r = &s->req[ri];

		if (floors + r->floor > avail || held + r->floor > s->budget)
			break;
		heap_del(s, &s->wait, ri);
		s->wait_floor -= r->floor;
		r->state = R_ACTIVE;
		floors += r->floor;
		held += r->floor;
		s->order[n++] = ri;
	}
	qsort_r(s->order, n, sizeof(*s->order), cmp_order, s);
	uint64_t left = avail, win = 0;

	for (uint32_t k = 0; k < n; k++) {
		struct req *r = &s->req[s->order[k]];

		r->window = r->floor < left ? r->floor : left;
		left -= r->window;
	}
	left = left > s->wait_floor ? left - s->wait_floor : 0;
	for (uint32_t k = 0; k < n && left; k++) {
		struct req *r = &s->req[s->order[k]];
		uint64_t want = desired(s, r), add;

		if (want <= r->window)
			continue;
		add = want - r->window < left ? want - r->window : left;
		r->window += add;
		left -= add;
	}
	s->unmet = 0;
	s->short_win = 0;
	for (uint32_t k = 0; k < n; k++) {
		struct req *r = &s->req[s->order[k]];

		win += r->window;
		s->unmet += unmet(r);
		s->short_win += r->window < r->floor;
	}
	s->sum_floor = floors;
	s->sum_win = win;
	for (uint32_t k = 0; k < n; k++)
		update_runnable(s, s->order[k], now);
	s->dirty = false;
	s->admit_check = false;
	s->next_resize = now + s->cfg.resize_ns;
}

/*
 * Admission without recomputing every window: a request that fits in what the current
 * windows leave free gets its window at once, its extra only from what the requests still
 * waiting behind it do not need. Only when the others' extras must shrink to make room (or
 * some window is below its floor) does it take the full pass (which also runs every
 * resize_ns anyway).
 */
static void admit(struct kvl_sched *s, uint64_t now)
{
	uint64_t avail = s->budget > s->orphan ? s->budget - s->orphan : 0;

	while (s->wait.n) {
		uint32_t ri = s->wait.a[0];
		struct req *r = &s->req[ri];
		uint64_t room = avail > s->sum_win ? avail - s->sum_win : 0, want, spare;

		if (s->short_win) {
			rebalance(s, now);
			return;
		}
		/* Every window is at least its floor here, so staged + unmet is what the active
		 * requests hold or are promised. */
		if (s->sum_floor + r->floor > avail || s->staged + s->unmet + r->floor > s->budget)
			break;
		if (room < r->floor) {
			rebalance(s, now);
			return;
		}
		heap_del(s, &s->wait, ri);
		s->wait_floor -= r->floor;
		r->state = R_ACTIVE;
		want = desired(s, r);
		spare = room - r->floor > s->wait_floor ? room - r->floor - s->wait_floor : 0;
		r->window = r->floor + (want - r->floor < spare ? want - r->floor : spare);
		s->sum_floor += r->floor;
		s->sum_win += r->window;
		s->unmet += unmet(r);
		update_runnable(s, ri, now);
	}
	s->admit_check = false;
}

void kvl_sched_set_budget(struct kvl_sched *s, uint64_t bytes, uint64_t now)
{
	s->budget = bytes < s->capacity ? bytes : s->capacity;
	rebalance(s, now);
}

/* ---- posting ---- */

/* The next PULL slot: the one after @last when free (a request's blocks then merge), else
 * any; KVL_NONE when none is free. */
static inline uint32_t take_slot(struct kvl_slots *sl, uint32_t last)
{
	if (last != KVL_NONE && kvl_slots_is_free(sl, last + 1)) {
		kvl_slots_take(sl, last + 1);
		return last + 1;
	}
	return kvl_slots_get_any(sl);
}

/* Whether block @b may join the descriptor that ends with block @p, and how. */
enum join { J_NO, J_EXTEND, J_SGE };

static enum join can_join(const struct kvl_sched *s, const struct req *r, const struct blk *p,
			  const struct blk *b, uint32_t total, uint16_t nsge)
{
	if (s->cfg.max_msg == 0 || b->remote_seg != p->remote_seg ||
	    b->remote_off != p->remote_off + p->length || total + b->length > s->cfg.max_msg)
		return J_NO;
	if (!slotted(r)) {
		if (b->local_seg == p->local_seg && b->local_off == p->local_off + p->length)
			return J_EXTEND;
	} else if (p->length == s->cfg.slot_size && kvl_slots_is_free(&s->slots, p->slot + 1)) {
		return J_EXTEND;
	}
	return nsge < s->cfg.max_sge ? J_SGE : J_NO;
}

/* What post_from() tracks while it adds blocks to one descriptor. */
struct post_st {
	uint64_t u, staged, charge;
	uint32_t cur, last, total, nb;
	uint16_t nsge, nrun;
};

/* The limits post_from() checks every block against (see there): fixed while it runs. */
struct post_lim {
	uint64_t win, g, wf, budget, gcap, others, slot_size;
	uint32_t nblk;
	bool pull; /* blocks take staging slots (slotted()) */
	uint8_t op;
};

/* The checks of one block of charge @c: 0 when it fits, 1 beyond the window, 2 beyond the
 * budget (or, in the floor pass, the floor). */
static inline int no_room(const struct post_lim *l, uint64_t u, uint64_t staged, uint64_t c)
{
	if (u + c > l->win)
		return 1;
	return staged + c + l->others + (u + c > l->g ? l->wf : 0) > l->budget || u + c > l->gcap
		       ? 2
		       : 0;
}

/* Merging on: join the blocks after @b to descriptor @o while they may (can_join()) and fit.
 * Out of line, so that the loop of post_from() without merging keeps its state in registers. */
static __attribute__((noinline)) void join_more(struct kvl_sched *s, const struct req *r,
						const struct post_lim *l, struct xrec *x,
						struct kvl_sched_xfer *o, struct blk *b,
						struct post_st *p)
{
	while (p->cur < l->nblk) {
		struct blk *n = b + 1;
		enum join how = can_join(s, r, b, n, p->total, p->nsge);
		uint32_t slot;
		int why;

		if (how == J_NO)
			break;
		uint64_t c = l->pull ? l->slot_size : n->length;

		if ((why = no_room(l, p->u, p->staged, c)) != 0) {
			if (why == 2)
				s->st.last_stop = KVL_SCHED_STOP_BUDGET;
			break;
		}
		if (l->pull) {
			if (how == J_EXTEND) {
				slot = b->slot + 1;
				kvl_slots_take(&s->slots, slot);
				p->last = slot;
				x->run[p->nrun - 1].n++;
			} else {
				slot = take_slot(&s->slots, p->last);
				p->last = slot;
				if (slot == KVL_NONE) {
					s->st.last_stop = KVL_SCHED_STOP_BUDGET;
					break;
				}
				x->run[p->nrun].slot = slot;
				x->run[p->nrun].n = 1;
				p->nrun++;
			}
			n->slot = slot;
			n->local_off = (uint64_t)slot * l->slot_size;
		}
		if (how == J_EXTEND) {
			o->sge[p->nsge - 1].length += n->length;
		} else {
			o->sge[p->nsge].local_off = n->local_off;
			o->sge[p->nsge].length = n->length;
			o->sge[p->nsge].reserved = 0;
			p->nsge++;
		}
		p->total += n->length;
		n->state = B_INFLIGHT;
		p->u += c;
		p->staged += c;
		p->charge += c;
		p->nb++;
		p->cur++;
		b = n;
	}
}

/*
 * Up to @max descriptors from request @ri, in its transfer order. Each block must fit the
 * request's window, and the budget beside what is staged and what every other active request
 * still needs to reach its floor (going beyond its own floor, beside the waiting requests'
 * floors as well: see rebalance()), so that what this request holds beyond its own window
 * (kept across a shrink) never keeps another from its floor; in the floor pass, it must also
 * stay within its own floor. What the others are kept, the window and the floor do not change
 * while this request posts, so they are read once and the loop runs on locals; the
 * counters are written back once at the end.
 */
static unsigned post_from(struct kvl_sched *s, uint32_t ri, struct kvl_sched_xfer *out,
			  unsigned max, uint64_t now)
{
	struct req *r = &s->req[ri];
	const uint64_t g = guaranteed(r), u0 = usage(r);
	const struct post_lim l = {
		.win = r->window,
		.g = g,
		.wf = s->wait_floor,
		.budget = s->budget,
		.gcap = s->floor_only ? g : UINT64_MAX,
		.others = s->unmet - (g > u0 ? g - u0 : 0),
		.slot_size = s->cfg.slot_size,
		.nblk = r->nblk,
		.pull = slotted(r),
		.op = r->dir == KVL_SCHED_PULL ? 2 : 1, /* KVL_OP_READ : KVL_OP_WRITE */
	};
	const int32_t id = (int)((uint32_t)r->gen << 16 | ri);
	struct blk *B = &s->blk[r->blk0];
	uint64_t u = u0, staged = s->staged;
	const uint32_t cur0 = r->cursor;
	uint32_t cur = cur0, last = r->last_slot;
	unsigned cnt = 0;

	while (cnt < max && cur < l.nblk) {
		if (s->x_free == KVL_NONE) {
			s->st.last_stop = KVL_SCHED_STOP_XFERS;
			break;
		}
		uint32_t xi = s->x_free;
		struct xrec *x = &s->x[xi];
		struct kvl_sched_xfer *o = &out[cnt];
		struct blk *b = &B[cur];
		uint64_t c = l.pull ? l.slot_size : b->length;
		int why = no_room(&l, u, staged, c);

		if (why) {
			if (why == 2)
				s->st.last_stop = KVL_SCHED_STOP_BUDGET;
			break;
		}
		uint16_t nrun = 0;

		if (l.pull) {
			uint32_t slot = take_slot(&s->slots, last);

			last = slot;
			if (slot == KVL_NONE) { /* only if staged lost track: stay safe */
				s->st.last_stop = KVL_SCHED_STOP_BUDGET;
				break;
			}
			x->run[0].slot = slot;
			x->run[0].n = 1;
			nrun = 1;
			b->slot = slot;
			b->local_off = (uint64_t)slot * l.slot_size;
		}
		o->sge[0].local_off = b->local_off;
		o->sge[0].length = b->length;
		o->sge[0].reserved = 0;
		b->state = B_INFLIGHT;
		uint64_t charge = c;
		uint32_t total = b->length, nb = 1;
		uint16_t nsge = 1;

		u += c;
		staged += c;
		cur++;
		if (s->cfg.max_msg != 0) { /* merging */
			/* copies, so that nothing of this loop's state has its address taken */
			const struct post_lim lc = l;
			struct post_st p = { .u = u,
					     .staged = staged,
					     .charge = charge,
					     .cur = cur,
					     .last = last,
					     .total = total,
					     .nb = nb,
					     .nsge = nsge,
					     .nrun = nrun };

			join_more(s, r, &lc, x, o, b, &p);
			u = p.u;
			staged = p.staged;
			charge = p.charge;
			cur = p.cur;
			last = p.last;
			total = p.total;
			nb = p.nb;
			nsge = p.nsge;
			nrun = p.nrun;
		}
		s->x_free = x->next_free;
		x->gen++;
		x->live = true;
		x->req = ri;
		x->req_gen = r->gen;
		x->first = cur - nb;
		x->n = nb;
		x->nrun = nrun;
		x->bytes = total;
		x->charge = charge;
		x->post_ns = now;
		o->id = (uint64_t)x->gen << 32 | xi;
		o->peer = r->peer;
		o->req = id;
		o->remote_seg = b->remote_seg;
		o->remote_off = b->remote_off;
		o->length = total;
		o->n_blocks = nb;
		o->n_sge = nsge;
		o->op = l.op;
		o->cls = r->cls;
		o->local_abs = !l.pull;
		cnt++;
	}
	r->cursor = cur;
	r->last_slot = last;
	r->inflight_bytes += u - u0;
	s->staged = staged;
	s->unmet = l.others + (g > u ? g - u : 0);
	s->st.posted_xfers += cnt;
	s->st.posted_blocks += cur - cur0; /* every block posted moved the cursor */
	s->st.xfers_inflight += cnt;
	return cnt;
}

/* After serving @ri: still runnable means it goes to the back of the starvation line. */
static void served(struct kvl_sched *s, uint32_t ri, uint64_t now)
{
	update_runnable(s, ri, now);
	if (s->req[ri].runnable) {
		fifo_del(s, ri);
		fifo_add(s, ri, now);
	}
}

/*
 * The priority order stopped on the budget, but room kept for floors is still there: serve
 * the runnable requests below their floor (in priority order), up to their floor only. Without
 * this, a request whose next post goes beyond its floor would, at the head, keep the ones
 * behind it from the room that was kept for them.
 */
static unsigned floor_pass(struct kvl_sched *s, uint64_t now, struct kvl_sched_xfer *out,
			   unsigned max)
{
	unsigned n = 0, m = 0;

	if (s->unmet == 0)
		return 0;
	for (uint32_t i = 0; i < s->run.n; i++) {
		const struct req *r = &s->req[s->run.a[i]];

		if (usage(r) + charge_of(s, r, &s->blk[r->blk0 + r->cursor]) <= guaranteed(r))
			s->order[m++] = s->run.a[i];
	}
	if (m > 1)
		qsort_r(s->order, m, sizeof(*s->order), cmp_order, s);
	s->floor_only = true;
	for (uint32_t k = 0; k < m && n < max; k++) {
		n += post_from(s, s->order[k], out + n, max - n, now);
		served(s, s->order[k], now);
		if (s->st.last_stop == KVL_SCHED_STOP_XFERS)
			break;
	}
	s->floor_only = false;
	return n;
}

/* ---- eviction: a budget shrunk below what has landed ---- */

/* What @r must still post for its next step to land: the unposted blocks that step uses
 * first. They are next at the cursor (transfer order is first use), and every block of the
 * steps before it has been posted already, since those steps have landed. */
static uint64_t next_need(const struct kvl_sched *s, const struct req *r)
{
	uint64_t need = 0;

	for (uint32_t i = r->cursor; i < r->nblk; i++) {
		const struct blk *b = &s->blk[r->blk0 + i];

		if (b->first_use != r->ready_next)
			break;
		need += charge_of(s, r, b);
	}
	return need;
}

/*
 * The block @q would give up: the tail of what it has posted, if it has landed and no step
 * announced READY names it (its first use is not announced: no earlier step names it), and
 * only while @q holds more than @limit (its window, or what it is promised). NULL otherwise.
 */
static struct blk *victim_block(struct kvl_sched *s, const struct req *q, uint64_t limit)
{
	struct blk *b;

	if (q->state != R_ACTIVE || !slotted(q) || q->cursor == 0 || usage(q) <= limit)
		return NULL;
	b = &s->blk[q->blk0 + q->cursor - 1];
	return b->state == B_LANDED && b->first_use >= q->ready_emitted ? b : NULL;
}

/* Give up @q's tail block: its slot is free, it is next in its transfer queue again, and the
 * step that first uses it (and any landed, unannounced step after) waits for it again. */
static void evict_tail(struct kvl_sched *s, uint32_t qi, uint64_t now)
{
	struct req *q = &s->req[qi];
	struct blk *b = &s->blk[q->blk0 + q->cursor - 1];
	struct stp *S = &s->stp[q->stp0];
	uint64_t c = charge_of(s, q, b);

	s->unmet -= unmet(q);
	kvl_slots_put(&s->slots, b->slot);
	b->state = B_UNPOSTED;
	b->slot = KVL_NONE;
	q->landed_bytes -= c;
	q->landed--;
	q->cursor--;
	s->staged -= c;
	S[b->first_use].pending++;
	while (q->ready_next > b->first_use)
		S[--q->ready_next].state = S_WAIT;
	s->unmet += unmet(q);
	q->evicted++;
	q->evicted_bytes += c;
	s->st.evicted_blocks++;
	s->st.evicted_bytes += c;
	s->admit_check = true;
	update_runnable(s, qi, now);
}

/* Evict until staged + unmet + @extra fits the budget, taking only what requests hold beyond
 * their window (@deep: beyond what they are promised), furthest ahead of its consumption first,
 * from the least urgent on a tie. */
static void evict_until(struct kvl_sched *s, uint64_t extra, bool deep, uint64_t now)
{
	while (s->staged + s->unmet + extra > s->budget) {
		uint32_t best = KVL_NONE;
		uint64_t best_ahead = 0;

		for (uint32_t i = 0; i < s->cfg.max_requests; i++) {
			const struct req *q = &s->req[i];
			const struct blk *b = victim_block(s, q, deep ? guaranteed(q) : q->window);

			if (b == NULL)
				continue;
			uint64_t ahead =
				b->first_use - (q->done < b->first_use ? q->done : b->first_use);

			if (best == KVL_NONE || ahead > best_ahead ||
			    (ahead == best_ahead && before(&s->req[best], q))) {
				best = i;
				best_ahead = ahead;
			}
		}
		if (best == KVL_NONE)
			return; /* the rest is in flight or announced: later */
		evict_tail(s, best, now);
	}
}

/*
 * A request is blocked below its floor when its next step's blocks fit what it is promised
 * (min(floor, window)) but cannot all be posted: staged + their charge + what the others are
 * kept for their floors is over the budget (the post check of post_from()). The head waiting
 * request is blocked when its floor fits beside the active floors but not beside what is held
 * (the admission check). Posts keep staged + Σ unmet floors within the budget, so neither
 * happens until the budget shrinks below what is held (or, for the waiting one, a request
 * admitted alone took extra window before the others came). Then evict until staged + the
 * floors kept fit again: first what requests hold beyond their window (their owners cannot
 * post it again until their window grows), then what they hold beyond their floor (what is
 * left beyond a window may be a PUSH request's, never evicted, while the windows handed the
 * room to another's extra). Owners get it back only from room no floor is kept in, so it
 * does not ping-pong while the budget stays.
 *
 * A request blocked beyond its floor (extra window) evicts nothing: the room comes back as
 * the engine consumes, and window shifts between requests (every resize_ns) would otherwise
 * move blocks back and forth.
 */
static void evict(struct kvl_sched *s, uint64_t now)
{
	uint64_t avail = s->budget > s->orphan ? s->budget - s->orphan : 0, wfloor = 0;
	bool blocked = false;

	for (uint32_t i = 0; i < s->run.n && !blocked; i++) {
		const struct req *r = &s->req[s->run.a[i]];
		uint64_t need = next_need(s, r), own = unmet(r);

		blocked = need && need <= own && s->staged + need + (s->unmet - own) > s->budget;
	}
	if (s->wait.n) {
		const struct req *w = &s->req[s->wait.a[0]];

		if (s->sum_floor + w->floor <= avail &&
		    s->staged + s->unmet + w->floor > s->budget) {
			blocked = true;
			wfloor = w->floor;
		}
	}
	if (!blocked)
		return;
	evict_until(s, wfloor, false, now);
	evict_until(s, wfloor, true, now);
	if (s->wait.n)
		s->admit_check = true;
}

/* evict() when someone is blocked; whether anything went. */
static bool try_evict(struct kvl_sched *s, uint64_t now)
{
	uint64_t before_ev = s->st.evicted_blocks;

	evict(s, now);
	if (s->st.evicted_blocks == before_ev)
		return false;
	if (s->wait.n)
		admit(s, now);
	return true;
}

/* Descriptors in service order; last_stop says why it stopped. */
static unsigned pick(struct kvl_sched *s, uint64_t now, struct kvl_sched_xfer *out, unsigned max)
{
	unsigned n = 0;

	s->st.last_stop = KVL_SCHED_STOP_IDLE;
	/* Whoever has been passed over for starvation_ns gets one descriptor first, oldest
	 * first: one is enough to bound the wait, and keeps priority order for the rest. */
	while (s->cfg.starvation_ns && n < max && s->fifo_head != KVL_NONE &&
	       now - s->req[s->fifo_head].wait_since >= s->cfg.starvation_ns) {
		uint32_t ri = s->fifo_head;
		unsigned k = post_from(s, ri, out + n, 1, now);

		if (k == 0) { /* last_stop says which resource ran out */
			if (s->st.last_stop == KVL_SCHED_STOP_BUDGET)
				n += floor_pass(s, now, out + n, max - n);
			return n;
		}
		n += k;
		s->st.starved_serves++;
		served(s, ri, now);
	}
	while (n < max && s->run.n) {
		uint32_t ri = s->run.a[0];
		unsigned k = post_from(s, ri, out + n, max - n, now);

		n += k;
		served(s, ri, now);
		if (s->req[ri].runnable && n < max) { /* stopped by the budget or max_xfers */
			if (s->st.last_stop == KVL_SCHED_STOP_BUDGET)
				n += floor_pass(s, now, out + n, max - n);
			return n;
		}
		if (k == 0)
			return n;
	}
	if (n == max && (s->run.n || s->fifo_head != KVL_NONE))
		s->st.last_stop = KVL_SCHED_STOP_MAX;
	return n;
}

unsigned kvl_sched_step(struct kvl_sched *s, uint64_t now, struct kvl_sched_xfer *out, unsigned max)
{
	/* Orphans of a request that had gone over its shrunk window can push Σ windows +
	 * orphans over the budget: then the windows are recomputed at once. */
	if (s->dirty || now >= s->next_resize || s->sum_win + s->orphan > s->budget)
		rebalance(s, now);
	else if (s->admit_check)
		admit(s, now);
	/* Cheap tests before evict() scans: only while what is held plus the floors kept (and
	 * the head waiting request's floor) is past the budget can anyone be blocked. Only with
	 * ready_ahead: without it every landed step is announced at once, and what little could
	 * go (blocks of steps not landed whole) would be a matter of timing. */
	if (s->cfg.ready_ahead &&
	    (s->staged + s->unmet > s->budget ||
	     (s->wait.n && s->staged + s->unmet + s->req[s->wait.a[0]].floor > s->budget)))
		try_evict(s, now);
	return pick(s, now, out, max);
}

/* ---- completions, steps, ends ---- */

static void free_block(struct kvl_sched *s, struct req *r, struct blk *b)
{
	/* dest: a landed block holds nothing (its charge went at its completion) */
	uint64_t c = r->dest ? 0 : charge_of(s, r, b);

	if (slotted(r))
		kvl_slots_put(&s->slots, b->slot);
	b->state = B_FREED;
	r->landed_bytes -= c;
	s->staged -= c;
}

static void free_xrec(struct kvl_sched *s, uint32_t xi)
{
	s->x[xi].live = false;
	s->x[xi].next_free = s->x_free;
	s->x_free = xi;
	s->st.xfers_inflight--;
}

/*
 * End a request: free at once what it holds, except staging under its transfers still in
 * flight, which becomes orphaned (counted in staged) until each completion comes back.
 */
static void req_end(struct kvl_sched *s, uint32_t ri, int status)
{
	struct req *r = &s->req[ri];

	if (r->state == R_WAITING) {
		heap_del(s, &s->wait, ri);
		s->wait_floor -= r->floor;
	} else {
		if (r->state == R_ACTIVE) {
			s->unmet -= unmet(r);
			s->short_win -= r->window < r->floor;
		}
		if (r->runnable) {
			heap_del(s, &s->run, ri);
			fifo_del(s, ri);
			r->runnable = false;
		}
		for (uint32_t i = 0; i < r->cursor; i++) {
			struct blk *b = &s->blk[r->blk0 + i];

			if (b->state == B_LANDED)
				free_block(s, r, b);
		}
		s->orphan += r->inflight_bytes;
		if (!r->dest)
			r->inflight_bytes = 0;
		if (r->state == R_ACTIVE) {
			s->sum_floor -= r->floor;
			s->sum_win -= r->window;
		}
	}
	free_ranges(s, r);
	r->state = R_ENDED;
	r->status = status;
	s->admit_check = true;
	notify(s, ri);
}

static void ewma(uint64_t *est, uint64_t sample)
{
	if (*est == 0)
		*est = sample ? sample : 1;
	else
		*est = (uint64_t)((int64_t)*est +
				  ((int64_t)sample - (int64_t)*est) / (1 << EWMA_SHIFT));
}

/* A completion for a request that ended: the staging it pinned is free only now (PUSH records
 * have no runs). */
static __attribute__((noinline, cold)) void complete_late(struct kvl_sched *s, uint32_t xi)
{
	struct xrec *x = &s->x[xi];

	for (uint16_t k = 0; k < x->nrun; k++)
		for (uint32_t j = 0; j < x->run[k].n; j++)
			kvl_slots_put(&s->slots, x->run[k].slot + j);
	s->orphan -= x->charge;
	s->staged -= x->charge;
	s->st.late_completions++;
	s->admit_check = true;
	/* dest: its end is told once the NIC can no longer write the caller's memory */
	struct req *r = &s->req[x->req];

	if (r->gen == x->req_gen && r->state == R_ENDED && r->dest) {
		r->inflight_bytes -= x->charge;
		if (r->inflight_bytes == 0)
			notify(s, x->req);
	}
	free_xrec(s, xi);
}

/* A failed transfer fails its request. */
static __attribute__((noinline, cold)) void complete_failed(struct kvl_sched *s, uint32_t xi,
							    int status)
{
	struct xrec *x = &s->x[xi];
	struct req *r = &s->req[x->req];

	s->st.completed_err++;
	for (uint16_t k = 0; k < x->nrun; k++)
		for (uint32_t j = 0; j < x->run[k].n; j++)
			kvl_slots_put(&s->slots, x->run[k].slot + j);
	for (uint32_t i = 0; i < x->n; i++)
		s->blk[r->blk0 + x->first + i].state = B_FREED;
	s->unmet -= unmet(r); /* req_end() takes it off with the usage as it is now */
	r->inflight_bytes -= x->charge;
	s->unmet += unmet(r);
	s->staged -= x->charge;
	free_xrec(s, xi);
	req_end(s, x->req, status);
}

/* dest blocks landed in the caller's memory: their charge goes now, not at DONE, so the
 * window and the budget bound what is in flight; the window slides at once. Called once the
 * completion counted them landed (the common path, kept free of this case), so it takes the
 * charge back off landed_bytes. Returns 0, for kvl_sched_complete() to return it. */
static __attribute__((noinline, cold)) int landed_dest(struct kvl_sched *s, uint32_t ri,
						       uint64_t charge, uint32_t n, uint64_t now)
{
	struct req *r = &s->req[ri];

	s->unmet -= unmet(r);
	r->landed_bytes -= charge;
	s->staged -= charge;
	s->unmet += unmet(r);
	s->st.dest_blocks += n;
	if (s->wait.n)
		s->admit_check = true;
	update_runnable(s, ri, now);
	return 0;
}

int kvl_sched_complete(struct kvl_sched *s, uint64_t xfer_id, int status, uint64_t now)
{
	uint32_t xi = (uint32_t)xfer_id;

	if (xi >= s->cfg.max_xfers || !s->x[xi].live || s->x[xi].gen != (uint32_t)(xfer_id >> 32))
		return -ENOENT;
	struct xrec *x = &s->x[xi];
	const uint32_t ri = x->req;
	struct req *r = &s->req[ri];

	if (__builtin_expect(r->gen != x->req_gen || r->state != R_ACTIVE, 0)) {
		complete_late(s, xi);
		return 0;
	}
	if (__builtin_expect(status != KVL_OK, 0)) {
		complete_failed(s, xi, status);
		return 0;
	}
	const uint32_t n = x->n, bytes = x->bytes ? x->bytes : 1;
	const uint64_t charge = x->charge, q16 = (now - x->post_ns) << 16;

	s->st.completed_ok++;
	/* Blocks are mostly a power of two long: a shift, not a 64-bit division. */
	ewma(&s->nspb_q16, (bytes & (bytes - 1)) == 0 ? q16 >> __builtin_ctz(bytes) : q16 / bytes);
	struct blk *b = &s->blk[r->blk0 + x->first];
	struct stp *S = &s->stp[r->stp0];

	for (uint32_t i = 0; i < n; i++) {
		b[i].state = B_LANDED;
		S[b[i].first_use].pending--;
	}
	r->inflight_bytes -= charge;
	r->landed_bytes += charge;
	r->landed += n;
	free_xrec(s, xi);
	/* READY in step order: the engine computes in order, and a step's blocks first used
	 * earlier have landed once the steps before it are READY. */
	uint32_t k = r->ready_next;
	const uint32_t nstp = r->nstp;

	if (k < nstp && S[k].pending == 0) {
		do {
			S[k].state = S_READY;
			S[k].ready_ns = now;
			k++;
		} while (k < nstp && S[k].pending == 0);
		r->ready_next = k;
		notify(s, ri);
	}
	if (__builtin_expect(r->dest, 0))
		return landed_dest(s, ri, charge, n, now); /* a tail call: no cost above */
	return 0;
}

int kvl_sched_step_done(struct kvl_sched *s, int id, uint32_t step, uint64_t now)
{
	uint32_t ri;
	struct req *r = lookup(s, id, &ri);

	if (r == NULL)
		return -ENOENT;
	if (r->state == R_ENDED)
		return -EALREADY;
	if (r->state != R_ACTIVE || step >= r->nstp)
		return -EINVAL;
	struct stp *st = &s->stp[r->stp0 + step];

	if (st->state == S_DONE)
		return -EALREADY;
	if (st->state != S_READY || step >= r->ready_emitted)
		return -EINVAL; /* not landed, or landed and not announced yet */
	st->state = S_DONE;
	r->done++;
	/* Compute time: from when it could start (READY, and the previous step DONE). */
	uint64_t start = st->ready_ns > r->last_done_ns ? st->ready_ns : r->last_done_ns;

	ewma(&s->compute_ns[r->cls], now > start ? now - start : 0);
	ewma(&s->step_bytes[r->cls], r->total_bytes / r->nstp);
	s->est_cls = r->cls;
	s->est_gen++;
	r->last_done_ns = now;
	uint64_t before_unmet = unmet(r), freed = 0;
	struct blk *B = &s->blk[r->blk0];
	const uint32_t *R = &s->ref[st->ref0];
	const uint32_t nref = st->nref;

	/* free_block() for each block no later step names, the sums kept on locals */
	if (slotted(r)) {
		uint64_t *word = s->slots.word, *sum = s->slots.sum;
		uint32_t put = 0;

		for (uint32_t j = 0; j < nref; j++) {
			struct blk *b = &B[R[j]];

			if (--b->ref == 0) {
				kvl_slots_set(word, sum, b->slot);
				b->state = B_FREED;
				put++;
			}
		}
		s->slots.nfree += put;
		freed = (uint64_t)put * s->cfg.slot_size;
	} else {
		for (uint32_t j = 0; j < nref; j++) {
			struct blk *b = &B[R[j]];

			if (--b->ref == 0) {
				b->state = B_FREED;
				freed += b->length;
			}
		}
		if (r->dest)
			freed = 0; /* its charges went as the blocks landed */
	}
	r->landed_bytes -= freed;
	s->staged -= freed;
	s->unmet += unmet(r) - before_unmet;
	/* Admission counts what is held: a request waiting on it may fit now. */
	if (s->wait.n && freed != 0)
		s->admit_check = true;
	if (r->done == r->nstp) {
		req_end(s, ri, KVL_OK);
	} else {
		update_runnable(s, ri, now);
		if (r->ready_emitted < r->ready_next)
			notify(s, ri); /* a landed step held back by ready_ahead */
	}
	return 0;
}

int kvl_sched_cancel(struct kvl_sched *s, int id, uint64_t now)
{
	uint32_t ri;
	struct req *r = lookup(s, id, &ri);

	(void)now;
	if (r == NULL)
		return -ENOENT;
	if (r->state == R_ENDED)
		return -EALREADY;
	r->cancel_ev = true;
	s->st.cancels++;
	req_end(s, ri, KVL_ERR_CANCELED);
	return 0;
}

unsigned kvl_sched_poll_events(struct kvl_sched *s, struct kvl_sched_event *ev, unsigned max)
{
	unsigned n = 0;

	while (n < max && s->notify_head != KVL_NONE) {
		uint32_t ri = s->notify_head;
		struct req *r = &s->req[ri];
		struct kvl_sched_event e = {
			.peer = r->peer,
			.user = r->user,
			.req = (int)((uint32_t)r->gen << 16 | ri),
		};

		/* A failed request's unreported READYs are dropped: its blocks are gone. */
		while (n < max && may_announce(s, r) &&
		       (r->state == R_ACTIVE || r->status == KVL_OK)) {
			ev[n] = e;
			ev[n].type = KVL_SCHED_EV_STEP_READY;
			ev[n].step = r->ready_emitted++;
			n++;
		}
		if (r->state == R_ACTIVE) {
			if (may_announce(s, r))
				break; /* out of room: it stays first in line */
		} else if (r->dest && r->inflight_bytes) {
			/* dest: transfers still in flight may write the caller's memory; the
			 * last one's completion puts it back in line (complete_late()) */
			s->notify_head = r->notify_next;
			if (s->notify_head == KVL_NONE)
				s->notify_tail = KVL_NONE;
			r->in_notify = false;
			continue;
		} else {
			if (r->status == KVL_OK && r->ready_emitted < r->ready_next)
				break;
			if (r->cancel_ev) {
				if (n == max)
					break;
				ev[n] = e;
				ev[n].type = KVL_SCHED_EV_PEER_CANCEL;
				n++;
				r->cancel_ev = false;
			}
			if (n == max)
				break;
			ev[n] = e;
			ev[n].type = r->status == KVL_OK ? KVL_SCHED_EV_REQ_DONE
							 : KVL_SCHED_EV_REQ_FAILED;
			ev[n].status = r->status;
			n++;
		}
		s->notify_head = r->notify_next;
		if (s->notify_head == KVL_NONE)
			s->notify_tail = KVL_NONE;
		r->in_notify = false;
		if (r->state == R_ENDED) {
			/* Gone: a stale id or a late completion can no longer reach it. */
			r->state = R_FREE;
			r->gen = r->gen == 0x7fff ? 1 : r->gen + 1;
			r->notify_next = s->req_free;
			s->req_free = ri;
		}
	}
	return n;
}

/* ---- snapshots ---- */

/* A request that has not ended, or NULL. */
static const struct req *live_req(const struct kvl_sched *s, int id)
{
	uint32_t ri;
	const struct req *r = lookup(s, id, &ri);

	return r != NULL && r->state != R_ENDED ? r : NULL;
}

/* Whether block @b of @r has an offset to give: PUSH offsets are the caller's own, posted or
 * not; a PULL block has one from its post until it is freed. */
static inline bool has_offset(const struct req *r, const struct blk *b)
{
	return !slotted(r) || (b->state != B_UNPOSTED && b->state != B_FREED);
}

int kvl_sched_block_offset(const struct kvl_sched *s, int id, uint32_t block, uint64_t *local_off)
{
	const struct req *r = live_req(s, id);

	if (r == NULL)
		return -ENOENT;
	if (block >= r->nblk)
		return -EINVAL;
	const struct blk *b = &s->blk[r->blk0 + s->blk[r->blk0 + block].map];

	if (!has_offset(r, b))
		return -EAGAIN;
	*local_off = b->local_off;
	return 0;
}

int kvl_sched_step_offsets(const struct kvl_sched *s, int id, uint32_t step, uint64_t *off)
{
	const struct req *r = live_req(s, id);

	if (r == NULL)
		return -ENOENT;
	if (step >= r->nstp)
		return -EINVAL;
	const struct stp *st = &s->stp[r->stp0 + step];
	const struct blk *B = &s->blk[r->blk0];
	const uint32_t *R = &s->ref[st->ref0];

	for (uint32_t j = 0; j < st->nref; j++) {
		const struct blk *b = &B[R[j]];

		off[b->orig] = has_offset(r, b) ? b->local_off : UINT64_MAX;
	}
	return 0;
}

void kvl_sched_stats(const struct kvl_sched *s, struct kvl_sched_stats *out)
{
	*out = s->st;
	out->budget = s->budget;
	out->staged = s->staged;
	out->orphan_bytes = s->orphan;
	out->active = out->waiting = out->ended = 0;
	out->windows = 0;
	for (uint32_t i = 0; i < s->cfg.max_requests; i++) {
		const struct req *r = &s->req[i];

		if (r->state == R_ACTIVE) {
			out->active++;
			out->windows += r->window;
		} else if (r->state == R_WAITING) {
			out->waiting++;
		} else if (r->state == R_ENDED) {
			out->ended++;
		}
	}
	out->runnable = s->run.n;
	out->slots = s->slots.n;
	out->slots_free = s->slots.nfree;
	out->xfer_ps_per_byte = (s->nspb_q16 * 1000) >> 16;
	for (int c = 0; c < KVL_SCHED_CLASSES; c++)
		out->compute_ns[c] = s->compute_ns[c];
}

uint64_t kvl_sched_estimates(const struct kvl_sched *s, uint64_t *compute_ns, uint64_t *step_bytes)
{
	*compute_ns = s->compute_ns[s->est_cls];
	*step_bytes = s->step_bytes[s->est_cls];
	return s->est_gen;
}

int kvl_sched_req_info(const struct kvl_sched *s, int id, uint64_t now,
		       struct kvl_sched_req_info *out)
{
	uint32_t ri;
	const struct req *r = lookup(s, id, &ri);

	if (r == NULL)
		return -ENOENT;
	memset(out, 0, sizeof(*out));
	out->id = id;
	out->peer = r->peer;
	out->state = r->state == R_WAITING  ? KVL_SCHED_REQ_WAITING
		     : r->state == R_ACTIVE ? KVL_SCHED_REQ_ACTIVE
					    : KVL_SCHED_REQ_ENDED;
	out->status = r->status;
	out->cls = r->cls;
	out->dir = r->dir;
	out->dest = r->dest;
	out->window = r->state == R_ACTIVE ? r->window : 0;
	out->floor = r->floor;
	out->inflight_bytes = r->inflight_bytes;
	out->landed_bytes = r->landed_bytes;
	out->age_ns = now - r->open_ns;
	out->runnable = r->runnable;
	out->wait_ns = r->runnable ? now - r->wait_since : 0;
	out->blocks = r->nblk;
	out->blocks_posted = r->cursor;
	out->blocks_landed = r->landed;
	out->steps = r->nstp;
	out->steps_ready = r->ready_next;
	out->steps_done = r->done;
	out->steps_announced = r->ready_emitted;
	out->blocks_evicted = r->evicted;
	out->evicted_bytes = r->evicted_bytes;
	return 0;
}

unsigned kvl_sched_req_list(const struct kvl_sched *s, int32_t *ids, unsigned max)
{
	unsigned n = 0;

	for (uint32_t i = 0; i < s->cfg.max_requests; i++) {
		if (s->req[i].state == R_FREE)
			continue;
		if (n < max)
			ids[n] = (int32_t)((uint32_t)s->req[i].gen << 16 | i);
		n++;
	}
	return n;
}
