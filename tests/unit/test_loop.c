/* SPDX-License-Identifier: BSD-3-Clause */
/* Unit test of the run-to-completion loop: work accounting, idle policies, stages, stop. */
#include <errno.h>
#include <stdbool.h>

#include "kvl_clock.h"
#include "kvl_test.h"
#include "lcores.h"

/* A fake TSC: every read advances it by `fake_step`, so cycle counts are exact. */
static uint64_t fake_now;
static uint64_t fake_step = 10;

static uint64_t fake_clock(void)
{
	fake_now += fake_step;
	return fake_now;
}

struct script {
	const unsigned *work; /* what the stage returns on each call */
	unsigned n, calls;
};

static unsigned scripted_stage(struct kvl_lcore *lc, void *arg)
{
	struct script *s = arg;

	(void)lc;
	return s->calls < s->n ? s->work[s->calls++] : 0;
}

static bool stop_flag;

/* Sets the stop flag after `stop_after` calls, as the main lcore would. */
static unsigned stopping_stage(struct kvl_lcore *lc, void *arg)
{
	unsigned *left = arg;

	(void)lc;
	if (--*left == 0)
		__atomic_store_n(&stop_flag, true, __ATOMIC_RELAXED);
	return 1;
}

static void setup(struct kvl_lcore *lc, int policy, uint32_t hybrid_idle_us)
{
	struct kvl_runtime_conf rt = {
		.idle_policy = policy,
		.hybrid_idle_us = hybrid_idle_us,
		.hybrid_sleep_us = 1,
	};

	/* 1 MHz fake TSC: one cycle per microsecond keeps hybrid thresholds readable. */
	kvl_lcore_init(lc, 3, 5, 1, 0, &rt, 1000000, &stop_flag);
	lc->clock = fake_clock;
	fake_now = 1000;
	fake_step = 10;
}

static void test_accounting(void)
{
	static const unsigned work[] = { 3, 0, 5, 0, 0 };
	struct script s = { .work = work, .n = 5 };
	struct kvl_lcore lc;
	struct kvl_lcore_stats st;

	setup(&lc, KVL_IDLE_POLL, 0);
	CHECK_INT(kvl_lcore_add_stage(&lc, "scripted", scripted_stage, &s), 0);
	for (int i = 0; i < 5; i++)
		kvl_lcore_iterate(&lc);
	kvl_lcore_stats_read(&lc, &st);
	CHECK_INT(st.iterations, 5);
	CHECK_INT(st.work, 8);
	/* Each iteration reads the clock twice: 10 cycles apart. */
	CHECK_INT(st.busy_cycles, 20);
	CHECK_INT(st.idle_cycles, 30);
	CHECK_INT(st.naps, 0); /* poll never naps */
	CHECK(kvl_lcore_busy_pct(&st) > 39.9 && kvl_lcore_busy_pct(&st) < 40.1);
}

static void test_every_stage_runs(void)
{
	static const unsigned a[] = { 0, 0, 1 }, b[] = { 2, 0, 0 };
	struct script sa = { .work = a, .n = 3 }, sb = { .work = b, .n = 3 };
	struct kvl_lcore lc;
	unsigned w[3];

	setup(&lc, KVL_IDLE_POLL, 0);
	kvl_lcore_add_stage(&lc, "a", scripted_stage, &sa);
	kvl_lcore_add_stage(&lc, "b", scripted_stage, &sb);
	for (int i = 0; i < 3; i++)
		w[i] = kvl_lcore_iterate(&lc);
	CHECK_INT(w[0], 2);
	CHECK_INT(w[1], 0);
	CHECK_INT(w[2], 1);
	CHECK_INT(sa.calls, 3);
	CHECK_INT(sb.calls, 3);
}

static void test_stage_limit(void)
{
	struct kvl_lcore lc;
	struct script s = { 0 };

	setup(&lc, KVL_IDLE_POLL, 0);
	for (int i = 0; i < KVL_MAX_STAGES; i++)
		CHECK_INT(kvl_lcore_add_stage(&lc, "s", scripted_stage, &s), 0);
	CHECK_INT(kvl_lcore_add_stage(&lc, "one too many", scripted_stage, &s), -ENOSPC);
	CHECK_INT(lc.n_stages, KVL_MAX_STAGES);
}

static void test_yield_naps_when_idle(void)
{
	static const unsigned work[] = { 1, 0, 0, 1 };
	struct script s = { .work = work, .n = 4 };
	struct kvl_lcore lc;
	struct kvl_lcore_stats st;

	setup(&lc, KVL_IDLE_YIELD, 0);
	kvl_lcore_add_stage(&lc, "scripted", scripted_stage, &s);
	for (int i = 0; i < 4; i++)
		kvl_lcore_iterate(&lc);
	kvl_lcore_stats_read(&lc, &st);
	CHECK_INT(st.naps, 2); /* one yield per idle iteration, none when busy */
}

static void test_hybrid_waits_before_napping(void)
{
	struct kvl_lcore lc;
	struct kvl_lcore_stats st;
	struct script s = { 0 }; /* always idle */

	/* Nap only after 100 us (= 100 fake cycles) of continuous idleness. */
	setup(&lc, KVL_IDLE_HYBRID, 100);
	CHECK_INT(lc.hybrid_idle_cycles, 100);
	kvl_lcore_add_stage(&lc, "idle", scripted_stage, &s);
	/* Iterations start 20 cycles apart; the idle run starts at the first, so iterations
	 * 0..4 are 0..80 cycles into it and do not nap; 5, 6, 7 (100, 120, 140) do. */
	for (int i = 0; i < 5; i++)
		kvl_lcore_iterate(&lc);
	kvl_lcore_stats_read(&lc, &st);
	CHECK_INT(st.naps, 0);
	for (int i = 0; i < 3; i++)
		kvl_lcore_iterate(&lc);
	kvl_lcore_stats_read(&lc, &st);
	CHECK_INT(st.naps, 3);
}

static void test_hybrid_busy_resets_idle_run(void)
{
	static const unsigned work[] = { 0, 0, 0, 0, 0, 1, 0, 0, 0 };
	struct script s = { .work = work, .n = 9 };
	struct kvl_lcore lc;
	struct kvl_lcore_stats st;

	setup(&lc, KVL_IDLE_HYBRID, 70);
	kvl_lcore_add_stage(&lc, "scripted", scripted_stage, &s);
	for (int i = 0; i < 9; i++)
		kvl_lcore_iterate(&lc);
	kvl_lcore_stats_read(&lc, &st);
	/* Idle run 1: starts at iter 0, naps at iters 4 (80 >= 70). Work at 5 resets; run 2
	 * starts at iter 6, and iters 7, 8 are 20 and 40 cycles in: no nap. */
	CHECK_INT(st.naps, 1);
	CHECK_INT(lc.idle_since != 0, 1);
}

/* A stage that did nothing but has work due in `due_in_ns` from now (kvl_now_ns). */
static int64_t due_in_ns;
static unsigned due_stage(struct kvl_lcore *lc, void *arg)
{
	(void)arg;
	kvl_lcore_due(lc, kvl_now_ns() + (uint64_t)due_in_ns);
	return 0;
}

/* What the lcore asked its sleep for: the bound of each nap. */
static uint32_t slept_us[8];
static unsigned n_slept;
static unsigned record_sleep(void *arg, uint32_t us)
{
	(void)arg;
	if (n_slept < 8)
		slept_us[n_slept] = us;
	n_slept++;
	return 0;
}

/* Work due (a copy in flight) bounds the nap; due within 2 us, no nap at all; a far due time
 * leaves hybrid_sleep_us in charge; and each pass starts with nothing due. */
static void test_hybrid_nap_ends_when_due(void)
{
	struct kvl_runtime_conf rt = { .idle_policy = KVL_IDLE_HYBRID,
				       .hybrid_idle_us = 0,
				       .hybrid_sleep_us = 5000 };
	struct kvl_lcore lc;
	struct kvl_lcore_stats st;

	kvl_lcore_init(&lc, 3, 5, 1, 0, &rt, 1000000, &stop_flag);
	lc.clock = fake_clock;
	lc.sleep = record_sleep;
	CHECK(lc.due_ns == UINT64_MAX);
	kvl_lcore_add_stage(&lc, "due", due_stage, NULL);
	n_slept = 0;
	due_in_ns = 300000;	/* 300 us: the nap ends by then, not after 5000 */
	kvl_lcore_iterate(&lc); /* the idle run starts: no nap yet */
	kvl_lcore_iterate(&lc);
	kvl_lcore_stats_read(&lc, &st);
	CHECK_INT(n_slept, 1);
	CHECK(slept_us[0] <= 300 && slept_us[0] >= 250);
	CHECK_INT(st.naps, 1);
	CHECK_INT(st.naps_due, 1);
	CHECK_INT(st.due_spins, 0);
	CHECK_INT(st.busy_cycles, 0); /* looking is not work */
	due_in_ns = 1000;	      /* 1 us: spin, do not sleep */
	kvl_lcore_iterate(&lc);
	kvl_lcore_stats_read(&lc, &st);
	CHECK_INT(n_slept, 1);
	CHECK_INT(st.naps, 1);
	CHECK_INT(st.due_spins, 1);
	due_in_ns = 60000000000ll; /* a minute away: hybrid_sleep_us bounds it */
	kvl_lcore_iterate(&lc);
	kvl_lcore_stats_read(&lc, &st);
	CHECK_INT(n_slept, 2);
	CHECK_INT(slept_us[1], 5000);
	CHECK_INT(st.naps_due, 1);
	lc.n_stages = 0; /* nothing due any more: the last pass's due time is gone */
	kvl_lcore_iterate(&lc);
	CHECK(lc.due_ns == UINT64_MAX);
	CHECK_INT(n_slept, 3);
	CHECK_INT(slept_us[2], 5000);
	kvl_lcore_due(NULL, 1); /* a stage called outside the loop */
}

static void test_main_stops_on_flag(void)
{
	struct kvl_lcore lc;
	struct kvl_lcore_stats st;
	unsigned left = 7;

	setup(&lc, KVL_IDLE_POLL, 0);
	stop_flag = false;
	kvl_lcore_add_stage(&lc, "stopper", stopping_stage, &left);
	CHECK_INT(kvl_lcore_main(&lc), 0);
	kvl_lcore_stats_read(&lc, &st);
	CHECK_INT(st.iterations, 7);
	CHECK_INT(st.work, 7);
}

static void test_busy_pct_empty(void)
{
	struct kvl_lcore_stats st = { 0 };

	CHECK(kvl_lcore_busy_pct(&st) == 0.0);
}

int main(void)
{
	test_accounting();
	test_every_stage_runs();
	test_stage_limit();
	test_yield_naps_when_idle();
	test_hybrid_waits_before_napping();
	test_hybrid_busy_resets_idle_run();
	test_hybrid_nap_ends_when_due();
	test_main_stops_on_flag();
	test_busy_pct_empty();
	return kvl_test_done("loop");
}
