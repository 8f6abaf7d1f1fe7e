/* SPDX-License-Identifier: BSD-3-Clause */
/* The NIC lcore's scheduler stage: take requests, step the scheduler, post READs, emit events. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <rte_cycles.h>
#include <rte_errno.h>
#include <rte_malloc.h>
#include <rte_ring.h>
#include <rte_ring_elem.h>

#include "kvl_clock.h"
#include "nic_sched.h"
#include "xport_tier.h"

_Static_assert(sizeof(struct kvl_nsched_cmd) % 4 == 0, "ring elements are multiples of 4 bytes");
_Static_assert(sizeof(struct kvl_sched_event) % 4 == 0, "ring elements are multiples of 4 bytes");

#define CMD_RING 4096
#define EV_BURST 64
/* Snapshots for telemetry: at most this often while busy, and once more when idle. */
#define SNAP_NS 1000000ull

uint64_t kvl_nic_sched_now(const struct kvl_nic_sched *ns)
{
	if (ns->clock != NULL)
		return ns->clock(ns->clock_arg);
	return (uint64_t)(((unsigned __int128)rte_rdtsc() * ns->tsc_mult) >> 32);
}

struct kvl_nic_sched *kvl_nic_sched_create(struct kvl_nic_io *io,
					   const struct kvl_nic_sched_cfg *cfg)
{
	struct kvl_nic_sched *ns;
	uint32_t nx = rte_align32pow2(cfg->sched->max_xfers);
	/* Every request can have all its steps' events and its terminal one waiting. */
	unsigned evs = cfg->sched->max_steps_total ? cfg->sched->max_steps_total
						   : cfg->sched->max_blocks_total;

	evs += 2 * cfg->sched->max_requests;
	ns = rte_zmalloc_socket("kvl_nic_sched", sizeof(*ns), RTE_CACHE_LINE_SIZE, cfg->socket);
	if (ns == NULL)
		ns = rte_zmalloc("kvl_nic_sched", sizeof(*ns), RTE_CACHE_LINE_SIZE);
	if (ns == NULL) {
		errno = ENOMEM;
		return NULL;
	}
	ns->io = io;
	ns->nic = cfg->nic;
	ns->staging = cfg->staging;
	ns->budget = cfg->budget;
	ns->levt = cfg->levt;
	ns->tsc_mult = (uint64_t)(((unsigned __int128)1000000000ull << 32) / rte_get_tsc_hz());
	ns->s = kvl_sched_create(cfg->sched);
	ns->xid = calloc(nx, sizeof(*ns->xid));
	ns->xid_mask = nx - 1;
	ns->byid_mask = rte_align32pow2(cfg->sched->max_requests) - 1;
	ns->byid = calloc(ns->byid_mask + 1, sizeof(*ns->byid));
	ns->cmd = kvl_nic_ring("scmd", cfg->nic, sizeof(struct kvl_nsched_cmd), CMD_RING,
			       cfg->socket, RING_F_SC_DEQ);
	/* The scheduler keeps what the ring cannot take, so its size bounds nothing. */
	ns->ev =
		kvl_nic_ring("sev", cfg->nic, sizeof(struct kvl_sched_event),
			     evs < 65536 ? evs : 65536, cfg->socket, RING_F_SP_ENQ | RING_F_SC_DEQ);
	if (cfg->null_xport) {
		ns->null.c = kvl_null_conn_new(cfg->sched->max_xfers);
		ns->null.ops = ns->null.c ? &kvl_xport_null : NULL;
	}
	if (ns->s == NULL || ns->xid == NULL || ns->byid == NULL || ns->cmd == NULL ||
	    ns->ev == NULL || (cfg->null_xport && ns->null.ops == NULL)) {
		int e = ns->s == NULL ? errno : rte_errno ? rte_errno : ENOMEM;

		kvl_nic_sched_free(ns);
		errno = e;
		return NULL;
	}
	/* Step flags: one entry per step the scheduler can hold, at start (an OPEN takes a
	 * range of them, never memory). Page-aligned: the runtime maps it for CUDA whole. */
	ns->n_flags = cfg->sched->max_steps_total ? cfg->sched->max_steps_total
						  : cfg->sched->max_blocks_total;
	ns->flags = rte_zmalloc_socket("kvl_nsched_flags",
				       (size_t)ns->n_flags * sizeof(struct kvl_nsched_flag), 4096,
				       cfg->socket);
	if (ns->flags == NULL)
		ns->flags = rte_zmalloc("kvl_nsched_flags",
					(size_t)ns->n_flags * sizeof(struct kvl_nsched_flag), 4096);
	ns->flag_held = calloc(ns->n_flags, 1);
	ns->watch = calloc(ns->n_flags, sizeof(*ns->watch));
	if (ns->flags == NULL || ns->flag_held == NULL || ns->watch == NULL) {
		kvl_nic_sched_free(ns);
		errno = ENOMEM;
		return NULL;
	}
	ns->budget_seen = cfg->sched->budget;
	/* Every completion of this NIC takes nic_io's one path; the scheduler's (its tag in
	 * wr_id) are taken out there, so a caller of kvl_poll() never sees one. */
	io->take_wc = kvl_nic_sched_take_wc;
	io->take_wc_arg = ns;
	return ns;
}

void kvl_nic_sched_free(struct kvl_nic_sched *ns)
{
	if (ns == NULL)
		return;
	if (ns->io && ns->io->take_wc_arg == ns) {
		ns->io->take_wc = NULL;
		ns->io->take_wc_arg = NULL;
	}
	if (ns->null.ops)
		ns->null.ops->free(ns->null.c);
	kvl_sched_free(ns->s);
	free(ns->xid);
	free(ns->byid);
	free(ns->flag_held);
	free(ns->watch);
	rte_free(ns->flags);
	rte_ring_free(ns->cmd);
	rte_ring_free(ns->ev);
	rte_free(ns);
}

/* ---- completions ---- */

static void complete(struct kvl_nic_sched *ns, uint64_t wr_id, int status, uint64_t now)
{
	/* An id that is not in flight (never ours) is refused by the scheduler: counted. */
	if (kvl_sched_complete(ns->s, ns->xid[(uint32_t)wr_id & ns->xid_mask], status, now) < 0)
		ns->ct.bad_completions++;
	ns->dirty = true;
}

unsigned kvl_nic_sched_take_wc(void *arg, struct kvl_wc *wc, unsigned n)
{
	struct kvl_nic_sched *ns = arg;
	uint64_t now = 0;
	unsigned keep = 0;

	for (unsigned i = 0; i < n; i++) {
		if (!(wc[i].wr_id & KVL_WR_SCHED_TAG)) {
			wc[keep++] = wc[i];
			continue;
		}
		if (now == 0)
			now = kvl_nic_sched_now(ns);
		complete(ns, wc[i].wr_id, wc[i].status, now);
	}
	return keep;
}

/* ---- posting ---- */

/*
 * The one place a scheduler descriptor becomes a work request, built where it is posted from
 * (pend[]): no further copy before the transport's burst. Several SGEs come only where the
 * NIC's transport takes them (runtime/staging.c sets max_sge).
 */
static inline void xfer_to_wr(const struct kvl_nic_sched *ns, const struct kvl_sched_xfer *x,
			      struct kvl_wr *wr)
{
	/* PULL: offsets in staging; PUSH, and PULL into engine-owned destinations: the caller's
	 * addresses (checked by kvl_req_open), posted as they are, so the transport finds the
	 * lkey of the caller's segment (verbs) or writes there (tcp). */
	uintptr_t base = x->local_abs ? 0 : (uintptr_t)ns->staging;

	wr->wr_id = KVL_WR_SCHED_TAG | (uint32_t)x->id;
	wr->local = (void *)(base + x->sge[0].local_off);
	wr->remote_off = x->remote_off;
	wr->length = x->length;
	wr->remote_seg = x->remote_seg;
	wr->op = x->op;
	wr->flags = 0;
	/* Remote-contiguous blocks landing in scattered slots: one WR, one SGE per run (the
	 * scheduler gives several only where the NIC's transport takes them: sched_cfg()). */
	wr->n_sge = x->n_sge > 1 ? (uint8_t)x->n_sge : 0;
	for (unsigned k = 0; k < wr->n_sge; k++)
		wr->sge[k] = (struct kvl_sge){ (void *)(base + x->sge[k].local_off),
					       x->sge[k].length, 0 };
}

/* The peer's live connections on this NIC, found once per pass (64 slots: cheap). */
struct routes {
	uint8_t n[KVL_MAX_PEERS_RT];
	uint8_t slot[KVL_MAX_PEERS_RT][8];
};

static void find_routes(const struct kvl_nic_io *io, struct routes *rt)
{
	memset(rt->n, 0, sizeof(rt->n));
	for (unsigned i = 0; i < KVL_SLOTS_PER_LCORE; i++) {
		const struct kvl_conn_slot *s = &io->slot[i];

		if (s->x.ops == NULL || s->closing || s->peer >= KVL_MAX_PEERS_RT ||
		    s->x.ops->broken(s->x.c) || rt->n[s->peer] == 8)
			continue;
		rt->slot[s->peer][rt->n[s->peer]++] = (uint8_t)i;
	}
}

/*
 * Post pend[0..n_pend) in order through nic_io's one submission path, runs of one peer as a
 * burst: on the null connection, or on the peer's connections from @ns->rr on (a full or
 * broken one passes the rest of the run to the next). Stops at the first descriptor no
 * connection takes now and keeps it and those after it, in order. Returns how many went.
 */
static unsigned flush(struct kvl_nic_sched *ns, const struct routes *rt)
{
	unsigned i = 0, failed = 0;
	int err;

	while (i < ns->n_pend) {
		uint32_t peer = ns->pend_peer[i];
		unsigned run = 1, k, n, took = 0;

		/* the null connection stands for every peer: all of it is one run */
		while (i + run < ns->n_pend && (ns->null.ops || ns->pend_peer[i + run] == peer))
			run++;
		if (ns->null.ops) {
			took = kvl_nic_io_post(ns->io, &ns->null, &ns->pend[i], run, &err, &failed);
		} else if (peer == KVL_PEER_LOCAL_TIER && ns->tier.ops) {
			took = kvl_nic_io_post(ns->io, &ns->tier, &ns->pend[i], run, &err, &failed);
		} else if ((n = peer < KVL_MAX_PEERS_RT ? rt->n[peer] : 0) == 0) {
			ns->ct.no_conn += run;
			for (k = 0; k < run; k++)
				kvl_nic_io_fail(ns->io, ns->pend[i + k].wr_id, KVL_ERR_NO_PEER);
			failed += run;
			took = run;
		} else {
			/* one descriptor per connection in turn: spread over the peer's QPs */
			for (k = 0; k < n && took < run;) {
				const struct kvl_conn_slot *s =
					&ns->io->slot[rt->slot[peer][ns->rr % n]];

				if (kvl_nic_io_post(ns->io, &s->x, &ns->pend[i + took], 1, &err,
						    &failed) == 1) {
					took++;
					ns->rr++;
					k = 0;
				} else {
					ns->rr++;
					k++;
				}
			}
		}
		i += took;
		if (took < run)
			break;
	}
	ns->ct.post_failed += failed;
	ns->ct.posted += i - failed;
	if (i < ns->n_pend) { /* keep the order: the first refused leads next pass */
		memmove(&ns->pend[0], &ns->pend[i], (ns->n_pend - i) * sizeof(ns->pend[0]));
		memmove(&ns->pend_peer[0], &ns->pend_peer[i],
			(ns->n_pend - i) * sizeof(ns->pend_peer[0]));
	}
	ns->n_pend -= i;
	return i;
}

/* Post what waits, then what the scheduler gives, until a connection is full. */
static unsigned do_posts(struct kvl_nic_sched *ns, uint64_t now)
{
	struct kvl_sched_xfer x[KVL_NSCHED_BATCH];
	struct routes rt;
	unsigned n, work = 0;

	if (ns->null.ops == NULL)
		find_routes(ns->io, &rt);
	if (ns->n_pend) {
		work = flush(ns, &rt);
		if (ns->n_pend) {
			ns->ct.stalled++;
			return work;
		}
	}
	n = kvl_sched_step(ns->s, now, x, KVL_NSCHED_BATCH);
	for (unsigned i = 0; i < n; i++) {
		ns->xid[(uint32_t)x[i].id & ns->xid_mask] = x[i].id;
		xfer_to_wr(ns, &x[i], &ns->pend[i]);
		ns->pend_peer[i] = (uint32_t)x[i].peer;
	}
	ns->n_pend = n;
	if (n) {
		flush(ns, &rt);
		ns->dirty = true;
	}
	return work + n;
}

/* ---- step flags ---- */

/* The GPU's compare (cuStreamWaitValue32 GEQ): cyclic, so no word is ever reset. */
static inline bool reached(uint32_t word, uint32_t epoch)
{
	return (int32_t)(word - epoch) >= 0;
}

/*
 * A range of @n consecutive entries, first fit, with a fresh epoch. Both words start one
 * below it: whatever a previous user left (or writes late: a stream still draining) is an
 * older epoch and satisfies neither the engine's wait nor the lcore's poll, and an entry
 * unused for 2^31 epochs cannot look ahead of the new one. UINT32_MAX: no room.
 */
static uint32_t flag_get(struct kvl_nic_sched *ns, uint32_t n)
{
	uint32_t run = 0, base, epoch;

	for (uint32_t i = 0; i < ns->n_flags; i++) {
		run = ns->flag_held[i] ? 0 : run + 1;
		if (run < n)
			continue;
		base = i + 1 - n;
		epoch = ++ns->flag_epoch;
		for (uint32_t k = base; k <= i; k++) {
			ns->flag_held[k] = 1;
			__atomic_store_n(&ns->flags[k].ready, epoch - 1, __ATOMIC_RELAXED);
			__atomic_store_n(&ns->flags[k].done, epoch - 1, __ATOMIC_RELAXED);
		}
		ns->ct.flags_in_use += n;
		return base;
	}
	return UINT32_MAX;
}

/* The step's blocks have landed (the scheduler saw every completion, and with them the
 * bytes: the NIC's write or the transport's copy is visible before its completion). */
static void flag_ready(struct kvl_nic_sched *ns, struct kvl_nsreq *r, uint32_t step)
{
	/* release: off[] (written just before) and the completions are seen first */
	__atomic_store_n(&ns->flags[r->flag_base + step].ready, r->flag_epoch, __ATOMIC_RELEASE);
	ns->watch[ns->n_watch++] = (struct kvl_nsched_watch){ r, step };
	ns->ct.ready_written++;
}

/*
 * Its end (the scheduler's terminal event, after which it writes none of its words): stop
 * polling its DONEs and give the range back. A failed request's steps not READY yet are
 * released anyway: a stream waiting on them would hang otherwise (the engine hears of the
 * failure from kvl_req_poll and throws those kernels' output away).
 */
static void flag_end(struct kvl_nic_sched *ns, struct kvl_nsreq *r, bool failed)
{
	for (uint32_t i = 0; i < ns->n_watch;)
		if (ns->watch[i].r == r)
			ns->watch[i] = ns->watch[--ns->n_watch];
		else
			i++;
	for (uint32_t k = r->flag_base; k < r->flag_base + r->d.n_steps; k++) {
		if (failed &&
		    !reached(__atomic_load_n(&ns->flags[k].ready, __ATOMIC_RELAXED), r->flag_epoch))
			__atomic_store_n(&ns->flags[k].ready, r->flag_epoch, __ATOMIC_RELEASE);
		ns->flag_held[k] = 0;
	}
	ns->ct.flags_in_use -= r->d.n_steps;
}

/*
 * DONE words of the steps announced READY and not seen DONE (bounded: those only). A DONE is
 * what kvl_req_step_done would have sent. Returns the steps freed. A stream's write wakes no
 * napping lcore (hybrid idle): a DONE is seen within hybrid_sleep_us, one step of compute
 * being far longer; looking at unchanged words is not work (the pass counts as idle).
 */
static unsigned do_flags(struct kvl_nic_sched *ns, uint64_t now)
{
	unsigned seen = 0;

	for (uint32_t i = 0; i < ns->n_watch;) {
		struct kvl_nsched_watch *w = &ns->watch[i];
		const struct kvl_nsreq *r = w->r;

		if (!reached(__atomic_load_n(&ns->flags[r->flag_base + w->step].done,
					     __ATOMIC_ACQUIRE),
			     r->flag_epoch)) {
			i++;
			continue;
		}
		/* refused only when a CANCEL went first: its end event cleans up */
		(void)kvl_sched_step_done(ns->s, r->sched_id, w->step, now);
		ns->ct.done_seen++;
		*w = ns->watch[--ns->n_watch];
		seen++;
	}
	if (seen)
		ns->dirty = true;
	return seen;
}

/* Steps awaited DONE and none seen this pass: look again after an eighth of a step's compute
 * (the scheduler's estimate), so a napping lcore sees a DONE that late at most; before any
 * estimate, hybrid_sleep_us bounds it. */
#define DONE_LOOK_MIN_NS 5000
static void flags_due(const struct kvl_nic_sched *ns, struct kvl_lcore *lc)
{
	uint64_t tc = 0, sb = 0;

	(void)kvl_sched_estimates(ns->s, &tc, &sb);
	if (tc > 0 && lc != NULL) /* due times are kvl_now_ns(), not the scheduler's clock */
		kvl_lcore_due(lc, kvl_now_ns() +
					  (tc / 8 > DONE_LOOK_MIN_NS ? tc / 8 : DONE_LOOK_MIN_NS));
}

/* ---- commands and events ---- */

static unsigned do_commands(struct kvl_nic_sched *ns, uint64_t now)
{
	struct kvl_nsched_cmd c[32];
	unsigned n = rte_ring_dequeue_burst_elem(ns->cmd, c, sizeof(c[0]), 32, NULL);

	for (unsigned i = 0; i < n; i++) {
		struct kvl_nsreq *r = c[i].r;
		int rc;

		switch (c[i].type) {
		case KVL_NSCHED_OPEN: {
			/* d.deadline arrives relative (ns from now; 0: none) */
			struct kvl_sched_req_desc d = r->d;

			d.deadline = d.deadline ? now + d.deadline : UINT64_MAX;
			rc = 0;
			if (r->want_flags) {
				r->flag_base = flag_get(ns, r->d.n_steps);
				r->flag_epoch = ns->flag_epoch;
				if (r->flag_base == UINT32_MAX) {
					rc = -ENOSPC;
					ns->ct.flag_nospc++;
				}
			}
			if (rc == 0)
				rc = kvl_sched_open(ns->s, &d, now);
			r->sched_id = rc;
			if (rc < 0) {
				if (r->want_flags && r->flag_base != UINT32_MAX)
					flag_end(ns, r, false);
				ns->ct.open_failed++;
			} else {
				r->open_ns = now;
				ns->ct.opened++;
				ns->ct.flag_reqs += r->want_flags != 0;
				ns->byid[(uint32_t)rc & ns->byid_mask] = r;
			}
			__atomic_store_n(&r->open_rc, rc < 0 ? rc : 0, __ATOMIC_RELEASE);
			break;
		}
		case KVL_NSCHED_DONE:
			rc = kvl_sched_step_done(ns->s, r->sched_id, c[i].step, now);
			ns->ct.done_cmds++;
			if (rc < 0)
				ns->ct.cmd_errors++; /* the API checked it: never expected */
			break;
		case KVL_NSCHED_CANCEL:
			/* -EALREADY: it ended on its own while the cancel was in the ring */
			(void)kvl_sched_cancel(ns->s, r->sched_id, now);
			ns->ct.cancel_cmds++;
			break;
		default:
			ns->ct.cmd_errors++;
		}
	}
	if (n)
		ns->dirty = true;
	return n;
}

const uint32_t kvl_nsched_lat_bounds_us[KVL_NSCHED_LAT_BUCKETS] = {
	100,   250,    500,    1000,   2500,	5000,	 10000,	  25000,
	50000, 100000, 250000, 500000, 1000000, 2500000, 5000000, 10000000,
};

static void count_latency(struct kvl_nic_sched *ns, uint64_t ns_taken)
{
	unsigned b = 0;

	while (b < KVL_NSCHED_LAT_BUCKETS && ns_taken > kvl_nsched_lat_bounds_us[b] * 1000ull)
		b++;
	ns->ct.lat_hist[b]++;
	ns->ct.lat_sum_ns += ns_taken;
}

static unsigned do_events(struct kvl_nic_sched *ns, uint64_t now)
{
	struct kvl_sched_event ev[EV_BURST];
	unsigned room = rte_ring_free_count(ns->ev), n, out = 0;

	n = kvl_sched_poll_events(ns->s, ev, room < EV_BURST ? room : EV_BURST);
	for (unsigned i = 0; i < n; i++) {
		struct kvl_nsreq *r = (struct kvl_nsreq *)(uintptr_t)ev[i].user;

		if (ev[i].type == KVL_SCHED_EV_REQ_DONE)
			count_latency(ns, now > r->open_ns ? now - r->open_ns : 0);
		if (ev[i].type == KVL_SCHED_EV_STEP_READY) {
			/* Where the step's blocks are, before the engine hears of it. */
			if (kvl_sched_step_offsets(ns->s, ev[i].req, ev[i].step, r->off) < 0)
				for (uint32_t j = r->d.step_first[ev[i].step];
				     j < r->d.step_first[ev[i].step + 1]; j++)
					r->off[r->d.step_blocks[j]] = UINT64_MAX;
			if (r->want_flags)
				flag_ready(ns, r, ev[i].step);
		} else if (r->want_flags && (ev[i].type == KVL_SCHED_EV_REQ_DONE ||
					     ev[i].type == KVL_SCHED_EV_REQ_FAILED)) {
			flag_end(ns, r, ev[i].type == KVL_SCHED_EV_REQ_FAILED);
		} else if (ev[i].type == KVL_SCHED_EV_PEER_CANCEL &&
			   (uint32_t)ev[i].peer == KVL_PEER_LOCAL_TIER) {
			continue; /* this host's tier: no peer to tell */
		} else if (ev[i].type == KVL_SCHED_EV_PEER_CANCEL) {
			struct kvl_levt le = { .type = KVL_LEVT_REQ_CANCEL,
					       .peer = (uint32_t)ev[i].peer,
					       .status = KVL_ERR_CANCELED,
					       .req = r->handle };

			/* Best effort: one-sided READs hold nothing on the peer. */
			if (ns->levt && rte_ring_enqueue_elem(ns->levt, &le, sizeof(le)) == 0)
				ns->ct.peer_cancels++;
			else
				ns->ct.peer_cancels_dropped++;
			continue; /* the engine hears REQ_FAILED(canceled) */
		}
		ev[out++] = ev[i];
	}
	if (out)
		rte_ring_enqueue_burst_elem(ns->ev, ev, sizeof(ev[0]), out, NULL);
	ns->ct.events += n;
	if (n)
		ns->dirty = true;
	return n;
}

static void publish(struct kvl_nic_sched *ns, uint64_t now)
{
	struct kvl_nsched_snap *sn = &ns->snap;
	int32_t ids[KVL_NSCHED_SNAP_RQ];
	unsigned n;

	__atomic_store_n(&sn->seq, sn->seq + 1, __ATOMIC_RELAXED);
	__atomic_thread_fence(__ATOMIC_RELEASE);
	kvl_sched_stats(ns->s, &sn->st);
	sn->ct = ns->ct;
	sn->at_ns = now;
	sn->budget_in = ns->budget_seen;
	n = kvl_sched_req_list(ns->s, ids, KVL_NSCHED_SNAP_RQ);
	if (n > KVL_NSCHED_SNAP_RQ)
		n = KVL_NSCHED_SNAP_RQ;
	sn->n_req = 0;
	for (unsigned i = 0; i < n; i++) {
		const struct kvl_nsreq *r = ns->byid[(uint32_t)ids[i] & ns->byid_mask];

		if (kvl_sched_req_info(ns->s, ids[i], now, &sn->rq[sn->n_req]) < 0)
			continue;
		/* the opener frees @r only after the terminal event, which also ends the id */
		sn->rq_handle[sn->n_req++] = r && r->sched_id == ids[i] ? r->handle : 0;
	}
	__atomic_thread_fence(__ATOMIC_RELEASE);
	__atomic_store_n(&sn->seq, sn->seq + 1, __ATOMIC_RELAXED);
	ns->dirty = false;
	ns->snap_next = now + SNAP_NS;
}

void kvl_nic_sched_read(const struct kvl_nic_sched *ns, struct kvl_nsched_snap *out)
{
	for (;;) {
		uint32_t a = __atomic_load_n(&ns->snap.seq, __ATOMIC_ACQUIRE);

		if (a & 1)
			continue;
		memcpy(out, &ns->snap, sizeof(*out));
		__atomic_thread_fence(__ATOMIC_ACQUIRE);
		if (__atomic_load_n(&ns->snap.seq, __ATOMIC_RELAXED) == a)
			return;
	}
}

unsigned kvl_nic_sched_stage(struct kvl_lcore *lc, void *arg)
{
	struct kvl_nic_sched *ns = arg;
	uint64_t now = kvl_nic_sched_now(ns);
	uint64_t b = __atomic_load_n(ns->budget, __ATOMIC_RELAXED);
	unsigned work = 0;

	if (b != ns->budget_seen) {
		ns->budget_seen = b;
		kvl_sched_set_budget(ns->s, b, now);
		ns->ct.budget_changes++;
		ns->dirty = true;
	}
	work += do_commands(ns, now);
	if (ns->n_watch) {
		unsigned seen = do_flags(ns, now); /* before posting: what a DONE frees goes out */

		if (seen == 0) /* nothing changed: the same steps are still awaited */
			flags_due(ns, lc);
		work += seen;
	}
	if (ns->null.ops) {
		/* its completions take the one completion path, as the peer connections' do */
		struct kvl_wc wc[KVL_NSCHED_BATCH];
		unsigned n = ns->null.ops->reap(ns->null.c, wc, KVL_NSCHED_BATCH);

		if (n)
			kvl_nic_io_complete(ns->io, wc, n);
		work += n;
	}
	work += do_posts(ns, now);
	if (ns->tier.ops) {
		/* launch what was just posted, then take what landed: READY in this same pass */
		struct kvl_wc wc[KVL_NSCHED_BATCH];
		uint64_t tc, sb, gen = kvl_sched_estimates(ns->s, &tc, &sb);
		unsigned n;

		/* what the DONEs measured, before the batch this pass launches: the engine picks
		 * its copy method by them (xport_cudma's AUTO) */
		if (gen != ns->est_gen) {
			ns->est_gen = gen;
			kvl_tier_set_estimates(ns->tier.c, tc, sb);
		}
		work += ns->tier.ops->progress(ns->tier.c);
		if (ns->tier.ops->due)
			kvl_lcore_due(lc, ns->tier.ops->due(ns->tier.c));
		n = ns->tier.ops->reap(ns->tier.c, wc, KVL_NSCHED_BATCH);
		if (n)
			kvl_nic_io_complete(ns->io, wc, n);
		work += n;
	}
	work += do_events(ns, now);
	/* Telemetry: fresh within SNAP_NS while busy, exact once the lcore goes idle. */
	if (ns->dirty && (work == 0 || now >= ns->snap_next))
		publish(ns, now);
	return work;
}

struct rte_ring *kvl_nic_sched_cmd_ring(struct kvl_nic_sched *ns)
{
	return ns->cmd;
}
