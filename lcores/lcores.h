/* SPDX-License-Identifier: BSD-3-Clause */
/* Polling lcores: the run-to-completion loop each NIC's lcore runs, and its counters. */
#ifndef KVL_LCORES_H
#define KVL_LCORES_H

#include <stdbool.h>
#include <stdint.h>

#include "topo.h"

#define KVL_MAX_STAGES 8

struct kvl_lcore;

/* A stage polls one source of work (submissions, a CQ, timers) and returns how much it did:
 * 0 means idle. It never blocks. */
typedef unsigned (*kvl_stage_fn)(struct kvl_lcore *lc, void *arg);

struct kvl_stage {
	const char *name;
	kvl_stage_fn fn;
	void *arg;
};

/* Written only by the owning lcore; read by telemetry (relaxed atomics, no locks). */
struct kvl_lcore_stats {
	uint64_t iterations;
	uint64_t busy_cycles; /* cycles of iterations in which some stage did work */
	uint64_t idle_cycles; /* cycles of idle iterations, idle action included */
	uint64_t work;	      /* sum of what the stages returned */
	uint64_t naps;	      /* yields (yield policy) or sleeps (hybrid policy) */
	uint64_t naps_due;    /* hybrid naps cut short to the time a stage said work was due */
	uint64_t due_spins;   /* hybrid idle passes that spun: work due within DUE_SPIN_NS */
};

struct kvl_lcore {
	/* identity, set before launch */
	unsigned lcore_id;
	unsigned cpu;
	int socket;
	int nic;     /* index into the config's NICs */
	bool remote; /* not on its NIC's NUMA node (allow_remote_numa) */
	/* policy */
	int idle_policy; /* enum kvl_idle_policy */
	uint64_t hybrid_idle_cycles;
	uint32_t hybrid_sleep_us;
	uint64_t (*clock)(void); /* rte_rdtsc; tests pass a fake */
	const bool *quit;	 /* set by the main lcore to stop the loop */
	/* loop */
	struct kvl_stage stages[KVL_MAX_STAGES];
	unsigned n_stages;
	uint64_t idle_since; /* clock() when the current idle run began, 0 if busy */
	/* hybrid: sleep until woken (completion events, kicks) or @us; NULL: nap @us */
	unsigned (*sleep)(void *arg, uint32_t us);
	void *sleep_arg;
	/* The soonest kvl_now_ns() by which a stage wants another pass although it did no work
	 * this one: copies in flight on a GPU stream, whose end raises no event to sleep on.
	 * UINT64_MAX (none) at the start of every pass; a hybrid nap ends by it. */
	uint64_t due_ns;
	struct kvl_lcore_stats stats;
};

/* A stage with nothing done now but work due at @t_ns (kvl_now_ns()): the lcore's nap, if it
 * takes one, ends by then. Waiting work is reported this way, not as work done, so a pass that
 * only looked counts as idle. @lc may be NULL (a stage called outside the loop). */
static inline void kvl_lcore_due(struct kvl_lcore *lc, uint64_t t_ns)
{
	if (lc != NULL && t_ns < lc->due_ns)
		lc->due_ns = t_ns;
}

/* Fill @lc for one NIC with the runtime's idle policy (@tsc_hz converts hybrid_idle_us). */
void kvl_lcore_init(struct kvl_lcore *lc, unsigned lcore_id, unsigned cpu, int socket, int nic,
		    const struct kvl_runtime_conf *rt, uint64_t tsc_hz, const bool *quit);

/* Append a stage. Returns 0, or -ENOSPC when KVL_MAX_STAGES are registered. */
int kvl_lcore_add_stage(struct kvl_lcore *lc, const char *name, kvl_stage_fn fn, void *arg);

/* One loop iteration: run every stage once, then the idle action if none did work.
 * Returns the work done. */
unsigned kvl_lcore_iterate(struct kvl_lcore *lc);

/* The lcore entry point (rte_eal_remote_launch): iterate until *quit. */
int kvl_lcore_main(void *arg);

/* A consistent-enough copy of @lc's counters for a reader on another thread. */
void kvl_lcore_stats_read(const struct kvl_lcore *lc, struct kvl_lcore_stats *out);

/* Busy share of the counted cycles, in percent (0 when nothing counted yet). */
double kvl_lcore_busy_pct(const struct kvl_lcore_stats *s);

#endif /* KVL_LCORES_H */
