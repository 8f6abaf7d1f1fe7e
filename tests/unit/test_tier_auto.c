/* SPDX-License-Identifier: BSD-3-Clause */
/* Unit test: the scheduler's estimates reach the host tier's engine and change its copy method. */
/*
 * The NIC lcore's scheduler stage (lcores/nic_sched.c) with a real tier connection
 * (lcores/xport/xport_tier.c) on KVL_PEER_LOCAL_TIER, whose engine is scripted here: it lands
 * each batch at its next progress and picks the batch's method with the transport's own model
 * (lcores/gpu/xport_cudma_pick.h, the one xport_cudma.c's AUTO runs, at its defaults). A
 * request of 4 steps x 16 blocks of 16 KiB (256 KiB a step) is opened on the tier; the engine
 * role sends each DONE after a virtual compute time. Asserted: before any DONE the engine has
 * no estimate and every batch goes to the gather kernel; with an engine that computes ~nothing
 * (a transfer-bound step) the estimates it receives are the scheduler's own
 * (kvl_sched_estimates: compute per step, exactly 256 KiB a step) and the gather kernel stays;
 * with 1 ms of compute a step the next request's batches go to the copy engine; the tier's
 * counters (/kvlane/tier's batches_copy_engine, batches_gather, est_*) say the same.
 */
#include "fake_xport.h"
#include "kvl_test.h"

#include "../../lcores/nic_io.c"
/* the two stages' private helpers share names: keep the scheduler's apart */
#define do_commands ns_do_commands
#define publish	    ns_publish
#define complete    ns_complete
#include "../../lcores/nic_sched.c"
#undef do_commands
#undef publish
#undef complete

#include "../../lcores/gpu/xport_cudma_pick.h"
#include "kvlane/kvlane.h"
#include "xport_tier.h"

#define SLOT	 (16u << 10)
#define NSLOT	 128u
#define PER_STEP 16u
#define N_STEPS	 4u
#define N_BLK	 (PER_STEP * N_STEPS)
#define POOL_SEG 1u /* the engine's name for the pool */
#define TIER_SEG 7u /* the tier segment's id in the lcores' table */

static struct kvl_nic_io io;
static uint8_t staging[SLOT * NSLOT];
static uint8_t pool[(size_t)SLOT * N_BLK];
static uint64_t budget = (uint64_t)SLOT * NSLOT;
static uint64_t fake_ns = 1000;
static struct kvl_seg_table tab;

static uint64_t fake_clock(void *arg)
{
	(void)arg;
	return fake_ns += 100;
}

/* ---- the scripted engine: a batch per progress, its method by the cudma model ---- */

static struct engine {
	struct kvl_wr q[256];
	unsigned head, tail;	   /* [head, tail) posted, not reaped */
	unsigned launched;	   /* [head, launched) in a batch: land at the next progress */
	unsigned landed;	   /* [head, landed) landed */
	uint64_t compute_ns;	   /* the estimates as last received */
	uint64_t step_bytes;	   /* ... */
	unsigned estimates;	   /* calls of the hook */
	uint64_t on_ce, on_gather; /* batches by method */
	uint64_t batches;
} en;

static const struct kvl_cudma_pick_model model = { 36, 23, 27, 56 }; /* xport_cudma.c's */

static unsigned en_post(void *c, const struct kvl_wr *wr, unsigned n, int *err)
{
	unsigned k;

	(void)c;
	for (k = 0; k < n && en.tail - en.head < 256; k++)
		en.q[en.tail++ % 256] = wr[k];
	if (k < n)
		*err = -EAGAIN;
	return k;
}

static unsigned en_progress(void *c)
{
	unsigned work = 0;

	(void)c;
	for (; en.landed != en.launched; en.landed++, work++) {
		const struct kvl_wr *w = &en.q[en.landed % 256];

		memcpy(w->local, pool + w->remote_off, w->length);
	}
	if (en.launched != en.tail) { /* what came since the last progress: one batch */
		if (kvl_cudma_pick_engine(&model, en.compute_ns, en.step_bytes))
			en.on_ce++;
		else
			en.on_gather++;
		en.batches++;
		en.launched = en.tail;
		work++;
	}
	return work;
}

static unsigned en_reap(void *c, struct kvl_wc *wc, unsigned max)
{
	unsigned n = 0;

	(void)c;
	for (; n < max && en.head != en.landed; n++, en.head++)
		wc[n] = (struct kvl_wc){ .wr_id = en.q[en.head % 256].wr_id,
					 .bytes = en.q[en.head % 256].length,
					 .status = KVL_OK };
	return n;
}

static unsigned en_outstanding(const void *c)
{
	(void)c;
	return en.tail - en.head;
}

static void en_stats(const void *c, struct kvl_xport_stats *out)
{
	(void)c;
	memset(out, 0, sizeof(*out));
	out->qp_posts = en.batches;
}

static void en_fail_all(void *c, int status)
{
	(void)c;
	(void)status;
}

static int en_broken(const void *c)
{
	(void)c;
	return 0;
}

static void en_free(void *c)
{
	(void)c;
}

static const struct kvl_xport_ops en_ops = { .name = "scripted-cudma",
					     .post = en_post,
					     .progress = en_progress,
					     .reap = en_reap,
					     .fail_all = en_fail_all,
					     .broken = en_broken,
					     .outstanding = en_outstanding,
					     .stats = en_stats,
					     .free = en_free };

static void en_estimates(void *c, uint64_t compute_ns, uint64_t step_bytes)
{
	(void)c;
	en.compute_ns = compute_ns;
	en.step_bytes = step_bytes;
	en.estimates++;
}

static void en_methods(const void *c, uint64_t *on_ce, uint64_t *on_gather)
{
	(void)c;
	*on_ce = en.on_ce;
	*on_gather = en.on_gather;
}

/* ---- the NIC lcore and the engine role ---- */

static struct kvl_sched_block blk[N_BLK];
static uint32_t first[N_STEPS + 1], refs[N_BLK];
static uint64_t off[N_BLK];
static struct kvl_nsreq req;

static struct kvl_nic_sched *make(void)
{
	static struct kvl_sched_cfg c;
	struct kvl_nic_sched_cfg nc = { .sched = &c, .staging = staging, .budget = &budget };
	struct kvl_tier_opts o = { .segs = &tab,
				   .staging = staging,
				   .staging_len = sizeof(staging),
				   .engine = { &en_ops, &en },
				   .engine_depth = 256,
				   .dma_seg = POOL_SEG,
				   .dma_base = (uintptr_t)pool,
				   .dma_len = sizeof(pool),
				   .clock = fake_clock,
				   .engine_estimates = en_estimates,
				   .engine_methods = en_methods };
	struct kvl_nic_sched *ns;

	c = (struct kvl_sched_cfg){ .max_requests = 8,
				    .max_blocks_total = 256,
				    .max_xfers = 256,
				    .slot_size = SLOT,
				    .slot_count = NSLOT,
				    .window_min = SLOT,
				    .window_max = 1u << 24,
				    .max_sge = 1,
				    .resize_ns = 1000000000ull };
	tab.seg[TIER_SEG - 1] = (struct kvl_seg){
		.base = pool, .len = sizeof(pool), .id = TIER_SEG, .flags = KVL_SEG_REMOTE_READ
	};
	tab.live[TIER_SEG - 1] = true;
	for (uint32_t i = 0; i < N_BLK; i++) {
		/* scattered on the pool side: nothing merges */
		blk[i] = (struct kvl_sched_block){ .remote_off =
							   (uint64_t)((i * 37u) % N_BLK) * SLOT,
						   .remote_seg = TIER_SEG,
						   .length = SLOT };
		refs[i] = i;
	}
	for (uint32_t k = 0; k <= N_STEPS; k++)
		first[k] = k * PER_STEP;
	for (size_t i = 0; i < sizeof(pool); i++)
		pool[i] = (uint8_t)(i * 131u >> 7);
	CHECK_INT(kvl_nic_io_init(&io, 0, 0, 16), 0);
	ns = kvl_nic_sched_create(&io, &nc);
	CHECK(ns != NULL);
	if (ns == NULL)
		exit(1);
	ns->clock = fake_clock;
	io.watch = kvl_nic_sched_cmd_ring(ns);
	ns->tier = (struct kvl_xconn){ &kvl_xport_tier, kvl_tier_new(&o) };
	CHECK(ns->tier.c != NULL);
	return ns;
}

static void spin(struct kvl_nic_sched *ns, unsigned passes)
{
	for (unsigned i = 0; i < passes; i++) {
		kvl_nic_io_stage(NULL, &io);
		kvl_nic_sched_stage(NULL, ns);
	}
}

/* One request on the tier, its steps DONE @compute_ns (virtual) after their READY; every
 * landed byte checked against the pool. */
static void run_request(struct kvl_nic_sched *ns, uint64_t compute_ns)
{
	struct kvl_nsched_cmd c = { .type = KVL_NSCHED_OPEN, .r = &req };
	struct kvl_sched_event ev[16];
	unsigned ready = 0, ended = 0;

	memset(off, 0xff, sizeof(off));
	req = (struct kvl_nsreq){ .d = { .peer = KVL_PEER_LOCAL_TIER,
					 .user = (uint64_t)(uintptr_t)&req,
					 .blocks = blk,
					 .n_blocks = N_BLK,
					 .n_steps = N_STEPS,
					 .step_first = first,
					 .step_blocks = refs,
					 .dir = KVL_SCHED_PULL,
					 .cls = KVL_SCHED_DECODE },
				  .handle = 5,
				  .open_rc = 1,
				  .off = off };
	CHECK_INT(rte_ring_enqueue_elem(ns->cmd, &c, sizeof(c)), 0);
	for (unsigned round = 0; round < 200 && !ended; round++) {
		unsigned n;

		spin(ns, 1);
		n = rte_ring_sc_dequeue_burst_elem(ns->ev, ev, sizeof(*ev), 16, NULL);
		for (unsigned i = 0; i < n; i++) {
			if (ev[i].type == KVL_SCHED_EV_STEP_READY) {
				struct kvl_nsched_cmd d = { .type = KVL_NSCHED_DONE,
							    .step = ev[i].step,
							    .r = &req };

				CHECK_INT(ev[i].step, ready);
				for (uint32_t j = first[ev[i].step]; j < first[ev[i].step + 1]; j++)
					CHECK(off[j] < sizeof(staging) &&
					      memcmp(staging + off[j], pool + blk[j].remote_off,
						     SLOT) == 0);
				fake_ns += compute_ns; /* the engine computes the step */
				CHECK_INT(rte_ring_enqueue_elem(ns->cmd, &d, sizeof(d)), 0);
				ready++;
			} else {
				CHECK_INT(ev[i].type, KVL_SCHED_EV_REQ_DONE);
				ended++;
			}
		}
	}
	CHECK_INT(req.open_rc, 0);
	CHECK_INT(ready, N_STEPS);
	CHECK_INT(ended, 1);
}

static void test_estimates_pick(void)
{
	struct kvl_nic_sched *ns = make();
	struct kvl_tier_stats st;
	uint64_t tc, sb, ce0, g0;

	/* no DONE yet: no estimate, the gather kernel (AUTO's default) */
	CHECK_INT(kvl_sched_estimates(ns->s, &tc, &sb), 0);
	CHECK_INT(tc, 0);

	/* an engine that computes (almost) nothing: transfer-bound steps, the gather kernel */
	run_request(ns, 0);
	CHECK_INT(kvl_sched_estimates(ns->s, &tc, &sb), N_STEPS);
	CHECK_INT(sb, (uint64_t)PER_STEP * SLOT); /* the bytes a step brings: 256 KiB */
	CHECK(tc > 0);
	CHECK_INT(en.compute_ns, tc); /* the scheduler's own numbers reached the engine */
	CHECK_INT(en.step_bytes, sb);
	CHECK(en.estimates >= 1);
	/* 256 KiB: 9.4 us on the copy engine, 6.0 us through the kernel; compute well under */
	CHECK(tc < 5000);
	CHECK(!kvl_cudma_pick_engine(&model, tc, sb));
	CHECK(en.on_gather > 0);
	CHECK_INT(en.on_ce, 0);
	kvl_tier_stats_read(ns->tier.c, &st);
	CHECK_INT(st.est_compute_ns, tc);
	CHECK_INT(st.est_step_bytes, sb);
	CHECK_INT(st.est_updates, en.estimates);
	CHECK_INT(st.batches_gather, en.on_gather);
	CHECK_INT(st.batches_copy_engine, 0);
	ce0 = en.on_ce;
	g0 = en.on_gather;

	/* 1 ms of compute a step: the transfer hides under it, the copy engine takes it (it
	 * slows the compute less); the first step's batches still have the old estimate */
	run_request(ns, 1000000);
	CHECK(kvl_sched_estimates(ns->s, &tc, &sb) == 2 * N_STEPS);
	CHECK(tc > 100000); /* EWMA 1/8 toward 1 ms */
	CHECK_INT(en.compute_ns, tc);
	CHECK(kvl_cudma_pick_engine(&model, tc, sb));
	run_request(ns, 1000000);
	CHECK(en.on_ce > ce0);
	kvl_tier_stats_read(ns->tier.c, &st);
	CHECK_INT(st.batches_copy_engine, en.on_ce);
	CHECK_INT(st.batches_gather, en.on_gather);
	/* the third request began with the 1 ms estimate: none of it went to the kernel */
	CHECK(en.on_gather - g0 <= N_STEPS); /* at most the second's batches before its DONE */
	CHECK_INT(st.done, 3 * N_STEPS * PER_STEP);

	/* back to a transfer-bound engine: the estimate falls (EWMA 1/8: ~40 DONEs from 1 ms
	 * to under the 9 us threshold), the kernel again */
	for (int i = 0; i < 12; i++)
		run_request(ns, 0);
	g0 = en.on_gather;
	run_request(ns, 0);
	kvl_sched_estimates(ns->s, &tc, &sb);
	CHECK(!kvl_cudma_pick_engine(&model, tc, sb));
	CHECK_INT(en.compute_ns, tc);
	CHECK(en.on_gather > g0);
	ns->tier.ops->free(ns->tier.c);
	ns->tier = (struct kvl_xconn){ 0 };
	kvl_nic_sched_free(ns);
	kvl_nic_io_fini(&io);
}

/* The model alone at the transport's defaults: where the choice flips for 256 KiB a step. */
static void test_model(void)
{
	const uint64_t b = 256u << 10;

	CHECK(!kvl_cudma_pick_engine(&model, 0, b));	   /* no estimate: gather */
	CHECK(!kvl_cudma_pick_engine(&model, 1000000, 0)); /* no bytes: gather */
	CHECK(!kvl_cudma_pick_engine(&model, 1000, b));	   /* transfer-bound: the kernel's rate */
	CHECK(kvl_cudma_pick_engine(&model, 20000, b));	   /* hidden: the engine slows it less */
}

int main(void)
{
	(void)fake_finish; /* fake_xport.h's scripted peer connection: no peer here */
	test_model();
	test_estimates_pick();
	return kvl_test_done("tier_auto");
}
