/* SPDX-License-Identifier: BSD-3-Clause */
/* The run-to-completion loop: stages report work, cycles are counted busy or idle. */
#include <errno.h>
#include <sched.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>

#include <rte_cycles.h>
#include <rte_pause.h>

#include "kvl_clock.h"
#include "lcores.h"

/* Work due sooner than this is waited for by spinning: a shorter sleep costs about what it
 * saves (a system call and a wake-up). */
#define DUE_SPIN_NS 2000

static uint64_t tsc_clock(void)
{
	return rte_rdtsc();
}

void kvl_lcore_init(struct kvl_lcore *lc, unsigned lcore_id, unsigned cpu, int socket, int nic,
		    const struct kvl_runtime_conf *rt, uint64_t tsc_hz, const bool *quit)
{
	memset(lc, 0, sizeof(*lc));
	lc->lcore_id = lcore_id;
	lc->cpu = cpu;
	lc->socket = socket;
	lc->nic = nic;
	lc->idle_policy = rt->idle_policy;
	lc->hybrid_idle_cycles = tsc_hz * rt->hybrid_idle_us / 1000000;
	lc->hybrid_sleep_us = rt->hybrid_sleep_us;
	lc->clock = tsc_clock;
	lc->quit = quit;
	lc->due_ns = UINT64_MAX;
}

int kvl_lcore_add_stage(struct kvl_lcore *lc, const char *name, kvl_stage_fn fn, void *arg)
{
	if (lc->n_stages == KVL_MAX_STAGES)
		return -ENOSPC;
	lc->stages[lc->n_stages++] = (struct kvl_stage){ .name = name, .fn = fn, .arg = arg };
	return 0;
}

/* Counters have one writer (this lcore): a relaxed store is enough for readers to never see
 * a torn value. */
static inline void bump(uint64_t *c, uint64_t by)
{
	__atomic_store_n(c, *c + by, __ATOMIC_RELAXED);
}

static void idle_action(struct kvl_lcore *lc, uint64_t now)
{
	struct timespec ts;
	uint32_t us;

	switch (lc->idle_policy) {
	case KVL_IDLE_POLL:
		rte_pause();
		return;
	case KVL_IDLE_YIELD:
		sched_yield();
		bump(&lc->stats.naps, 1);
		return;
	case KVL_IDLE_HYBRID:
		if (lc->idle_since == 0) {
			lc->idle_since = now;
			return;
		}
		if (now - lc->idle_since < lc->hybrid_idle_cycles) {
			rte_pause();
			return;
		}
		us = lc->hybrid_sleep_us;
		if (lc->due_ns != UINT64_MAX) {
			/* a copy's end (or other work a stage knows the time of) wakes nothing:
			 * the nap ends when it is due */
			uint64_t t = kvl_now_ns();

			if (lc->due_ns <= t + DUE_SPIN_NS) {
				bump(&lc->stats.due_spins, 1);
				rte_pause();
				return;
			}
			if ((lc->due_ns - t) / 1000 < us) {
				us = (uint32_t)((lc->due_ns - t) / 1000);
				bump(&lc->stats.naps_due, 1);
			}
		}
		bump(&lc->stats.naps, 1);
		if (lc->sleep != NULL) {
			/* On completion channels and kicks: woken at once by what it waits for,
			 * @us only bounds the wait. Work found on the way in counts. */
			if (lc->sleep(lc->sleep_arg, us))
				lc->idle_since = 0;
			return;
		}
		/* Nothing to sleep on: nap a bounded time, the wake-up latency is at most @us. */
		ts.tv_sec = us / 1000000;
		ts.tv_nsec = (long)(us % 1000000) * 1000;
		nanosleep(&ts, NULL);
		return;
	}
}

unsigned kvl_lcore_iterate(struct kvl_lcore *lc)
{
	uint64_t t0 = lc->clock(), t1;
	unsigned work = 0;

	lc->due_ns = UINT64_MAX;
	for (unsigned i = 0; i < lc->n_stages; i++)
		work += lc->stages[i].fn(lc, lc->stages[i].arg);
	if (work) {
		lc->idle_since = 0;
	} else {
		idle_action(lc, t0);
	}
	t1 = lc->clock();
	bump(work ? &lc->stats.busy_cycles : &lc->stats.idle_cycles, t1 - t0);
	bump(&lc->stats.work, work);
	bump(&lc->stats.iterations, 1);
	return work;
}

int kvl_lcore_main(void *arg)
{
	struct kvl_lcore *lc = arg;

	/* A nap bounded by hybrid_sleep_us or by when a copy is due must end near that time: the
	 * default timer slack (50 us) would make a 20 us nap one of 70. */
	if (lc->idle_policy == KVL_IDLE_HYBRID)
		(void)prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);
	while (!__atomic_load_n(lc->quit, __ATOMIC_RELAXED))
		kvl_lcore_iterate(lc);
	return 0;
}

void kvl_lcore_stats_read(const struct kvl_lcore *lc, struct kvl_lcore_stats *out)
{
	out->iterations = __atomic_load_n(&lc->stats.iterations, __ATOMIC_RELAXED);
	out->busy_cycles = __atomic_load_n(&lc->stats.busy_cycles, __ATOMIC_RELAXED);
	out->idle_cycles = __atomic_load_n(&lc->stats.idle_cycles, __ATOMIC_RELAXED);
	out->work = __atomic_load_n(&lc->stats.work, __ATOMIC_RELAXED);
	out->naps = __atomic_load_n(&lc->stats.naps, __ATOMIC_RELAXED);
	out->naps_due = __atomic_load_n(&lc->stats.naps_due, __ATOMIC_RELAXED);
	out->due_spins = __atomic_load_n(&lc->stats.due_spins, __ATOMIC_RELAXED);
}

double kvl_lcore_busy_pct(const struct kvl_lcore_stats *s)
{
	uint64_t total = s->busy_cycles + s->idle_cycles;

	return total ? 100.0 * (double)s->busy_cycles / (double)total : 0.0;
}
