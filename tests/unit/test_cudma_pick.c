/* SPDX-License-Identifier: BSD-3-Clause */
/* Unit test of AUTO's copy-method model with measured rates: choice, probes, bad samples. */
#include <string.h>

#include "kvl_test.h"
#include "xport_cudma_pick.h"

/* The transport's fixed model (xport_cudma.c defaults) and the runtime's 16 KiB step: 8 MiB
 * a layer-step, 0.3 ms of attention. By the fixed rates the copy engine fits (0.302 ms of
 * transfer under 0.308 of slowed compute), the gather kernel slows the compute more. */
static const struct kvl_cudma_pick_model fixed = { 36, 23, 27, 56 };
#define COMPUTE 300000u
#define BYTES	(8u << 20)

/* @n samples of @ps picoseconds a byte for one method of class @cls. */
static void feed(struct kvl_cudma_rates *r, unsigned cls, bool engine, uint64_t ps, unsigned n)
{
	for (unsigned i = 0; i < n; i++)
		CHECK(kvl_cudma_rate_sample(r, cls, engine, 1000000, (uint64_t)ps * 1000));
}

/* The choice follows the measured rate once it has enough samples, not before. */
static void test_follows_rates(void)
{
	struct kvl_cudma_rates r;
	bool probe;

	memset(&r, 0, sizeof(r));
	CHECK(kvl_cudma_pick_auto(&r, &fixed, 0, COMPUTE, BYTES, &probe));
	CHECK(!probe);
	/* the copy engine measured at 60 ps a byte under the runtime: 0.50 ms a step */
	feed(&r, 0, true, 60, KVL_CUDMA_RATE_MIN - 1);
	CHECK_INT(r.cls[0].ps[0], 60);
	CHECK(kvl_cudma_pick_auto(&r, &fixed, 0, COMPUTE, BYTES, &probe)); /* too few yet */
	feed(&r, 0, true, 60, 1);
	CHECK(!kvl_cudma_pick_auto(&r, &fixed, 0, COMPUTE, BYTES, &probe));
	CHECK(!probe);
	/* the other class keeps the fixed model */
	CHECK(kvl_cudma_pick_auto(&r, &fixed, 1, COMPUTE, BYTES, &probe));
	/* the gather kernel measured slow too (50 ps: 0.42 ms a step): the copy engine's slower
	 * transfer still loses to it */
	feed(&r, 0, false, 50, KVL_CUDMA_RATE_MIN);
	CHECK(!kvl_cudma_pick_auto(&r, &fixed, 0, COMPUTE, BYTES, &probe));
	/* the copy engine recovers (EWMA 1/8: it takes a few samples) */
	feed(&r, 0, true, 20, 1);
	CHECK_INT(r.cls[0].ps[0], (60 * 7 + 20 + 4) / 8);
	feed(&r, 0, true, 20, 40);
	CHECK(r.cls[0].ps[0] < 25);
	CHECK(kvl_cudma_pick_auto(&r, &fixed, 0, COMPUTE, BYTES, &probe));
	/* no estimate: the gather kernel, and no probe */
	CHECK(!kvl_cudma_pick_auto(&r, &fixed, 0, 0, BYTES, &probe));
	CHECK(!kvl_cudma_pick_auto(&r, &fixed, 0, COMPUTE, 0, &probe));
	CHECK(!probe);
	CHECK(!kvl_cudma_pick_auto(&r, &fixed, KVL_CUDMA_RATE_CLASSES, COMPUTE, BYTES, &probe));
}

/* The method not chosen is probed: every KVL_CUDMA_PROBE_WARM batches while it has too few
 * samples, then every KVL_CUDMA_PROBE_EVERY; one probe at a time, counted. */
static void test_probes(void)
{
	struct kvl_cudma_rates r;
	unsigned engine = 0, probes = 0, first = 0;
	bool probe;

	memset(&r, 0, sizeof(r));
	feed(&r, 0, true, 60, KVL_CUDMA_RATE_MIN); /* the copy engine loses */
	/* the gather kernel is chosen; the engine gets a probe after PROBE_EVERY batches (it has
	 * enough samples) */
	for (unsigned i = 1; i <= 3 * KVL_CUDMA_PROBE_EVERY + 3; i++) {
		bool e = kvl_cudma_pick_auto(&r, &fixed, 0, COMPUTE, BYTES, &probe);

		CHECK(e == probe); /* the engine only as a probe */
		if (probe && first == 0)
			first = i;
		engine += e;
		probes += probe;
	}
	CHECK_INT(first, KVL_CUDMA_PROBE_EVERY + 1);
	CHECK_INT(probes, 3);
	CHECK_INT(engine, 3);
	CHECK_INT(r.probes, 3);
	/* a probe's sample keeps the loser measured: a fast one turns the choice */
	feed(&r, 0, true, 10, 30);
	CHECK(kvl_cudma_pick_auto(&r, &fixed, 0, COMPUTE, BYTES, &probe));

	/* warm-up: the gather kernel never measured, the engine chosen by the fixed model; a
	 * probe of the kernel every PROBE_WARM batches until it has its samples */
	memset(&r, 0, sizeof(r));
	probes = 0;
	for (unsigned i = 1; i <= 4 * (KVL_CUDMA_PROBE_WARM + 1); i++) {
		kvl_cudma_pick_auto(&r, &fixed, 0, COMPUTE, BYTES, &probe);
		probes += probe;
	}
	CHECK_INT(probes, 4);
}

/* Bad samples (0 bytes, 0 time, faster than any link, slower than any link) are refused and
 * counted; the rate, its samples and the choice stay. */
static void test_bad_samples(void)
{
	struct kvl_cudma_rates r, before;
	bool probe;

	memset(&r, 0, sizeof(r));
	feed(&r, 0, true, 60, KVL_CUDMA_RATE_MIN);
	memcpy(&before, &r, sizeof(r));
	CHECK(!kvl_cudma_rate_sample(&r, 0, true, 0, 1000));
	CHECK(!kvl_cudma_rate_sample(&r, 0, true, 1u << 20, 0));
	CHECK(!kvl_cudma_rate_sample(&r, 0, true, 1u << 30, 1));      /* 1 PB/s */
	CHECK(!kvl_cudma_rate_sample(&r, 0, true, 1, 1000000000ull)); /* 1 B/s */
	CHECK(!kvl_cudma_rate_sample(&r, 0, true, 1u << 20, UINT64_MAX));
	CHECK(!kvl_cudma_rate_sample(&r, KVL_CUDMA_RATE_CLASSES, true, 1u << 20, 1000));
	CHECK_INT(r.bad, 6);
	CHECK_INT(r.cls[0].ps[0], before.cls[0].ps[0]);
	CHECK_INT(r.cls[0].samples[0], before.cls[0].samples[0]);
	CHECK(!kvl_cudma_pick_auto(&r, &fixed, 0, COMPUTE, BYTES, &probe));
	/* size classes */
	CHECK_INT(kvl_cudma_rate_class(16384), 0);
	CHECK_INT(kvl_cudma_rate_class(32768), 1);
	CHECK_INT(kvl_cudma_rate_class(0), 0);
}

int main(void)
{
	test_follows_rates();
	test_probes();
	test_bad_samples();
	return kvl_test_done("cudma_pick");
}
