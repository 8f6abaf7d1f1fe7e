/* SPDX-License-Identifier: BSD-3-Clause */
/* Cost per block descriptor of the NIC lcore path (rings, scheduler, posts) on the null transport.
 */
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <rte_eal.h>
#include <rte_lcore.h>
#include <rte_ring.h>
#include <rte_ring_elem.h>

#include "kvl_clock.h"
#include "kvl_perf_counter.h"
#include "nic_io.h"
#include "nic_sched.h"

/*
 * What kvlane-sched-bench measures plus everything around the scheduler on a NIC lcore:
 * requests enter through the command ring, the lcore loop runs its stages (nic_io's, then the
 * scheduler's: budget, commands, step, descriptor -> struct kvl_wr, post, reap, events), events
 * leave through the event ring, and the engine (this same thread, between loop passes) marks
 * each READY step DONE at once and replaces each finished request. The transport is the null
 * one: what is timed is kvlane's own cost. The API's handle checks (runtime/req_api.c) are
 * not in it.
 *
 * Load: 16 KiB blocks, ACTIVE requests at once, LAYERS steps of BLOCKS blocks each, contiguous
 * on the peer within a step (so coalescing can merge a step into one READ).
 */
#define BLOCK  (16u << 10)
#define ACTIVE 64
#define LAYERS 32
#define BLOCKS 4
#define NB     (LAYERS * BLOCKS)
#define SLOTS  16384

static struct kvl_sched_block blk[NB];
static uint32_t first[LAYERS + 1], refs[NB];
static struct kvl_nsreq req[ACTIVE];
static uint64_t off[ACTIVE][NB];
static uint64_t budget = (uint64_t)SLOTS * BLOCK;
static uint8_t *staging;
/*
 * The scheduler's clock in the callgrind child. Under valgrind the code runs some 50x slower,
 * so on the TSC every time-driven action (the 1 ms telemetry snapshot with its per-request
 * rows, window resizes, starvation and deadline checks) would come 50x as often per
 * descriptor as in the timed run and be counted as if it were per-descriptor cost. The child
 * therefore runs a virtual clock that advances, per loop pass, the ns a pass took in the
 * timed run (--ns-per-pass, from the parent): the same time per descriptor, so the same work.
 */
static uint64_t virt_now, virt_step;

static uint64_t virt_clock(void *arg)
{
	(void)arg;
	return virt_now;
}

static void make_load(void)
{
	for (uint32_t l = 0; l < LAYERS; l++) {
		first[l] = l * BLOCKS;
		for (uint32_t k = 0; k < BLOCKS; k++) {
			uint32_t i = l * BLOCKS + k;

			blk[i] =
				(struct kvl_sched_block){ .remote_off = ((uint64_t)l * 64 + 8 + k) *
									BLOCK,
							  .remote_seg = 1,
							  .length = BLOCK };
			refs[i] = i;
		}
	}
	first[LAYERS] = NB;
}

static struct kvl_nic_sched *make(struct kvl_nic_io *io, bool coalesce)
{
	struct kvl_sched_cfg c = {
		.max_requests = ACTIVE * 2,
		.max_blocks_total = ACTIVE * 2 * NB,
		.max_xfers = 4096,
		.slot_size = BLOCK,
		.slot_count = SLOTS,
		.window_min = 256u << 10,
		.window_max = 512u << 20,
		.max_msg = coalesce ? 1u << 20 : 0,
		.max_sge = 1, /* struct kvl_wr has one SGE today */
		.starvation_ns = 100000,
		.resize_ns = 10000000,
	};
	struct kvl_nic_sched_cfg nc = { .sched = &c,
					.staging = staging,
					.nic = coalesce ? 1 : 2,
					.socket = (int)rte_socket_id(),
					.budget = &budget,
					.null_xport = true };

	return kvl_nic_sched_create(io, &nc);
}

static void open_one(struct kvl_nic_sched *ns, unsigned i, uint64_t n)
{
	struct kvl_nsched_cmd c = { .type = KVL_NSCHED_OPEN, .r = &req[i] };

	req[i] = (struct kvl_nsreq){
		.d = { .peer = n % 8,
		       .deadline = 1000000 + n % 1000,
		       .user = (uint64_t)(uintptr_t)&req[i],
		       .blocks = blk,
		       .n_blocks = NB,
		       .n_steps = LAYERS,
		       .step_first = first,
		       .step_blocks = refs,
		       .dir = KVL_SCHED_PULL,
		       .cls = n % 4 == 0 ? KVL_SCHED_PREFILL : KVL_SCHED_DECODE },
		.handle = n + 1,
		.open_rc = 1,
		.off = off[i],
	};
	if (rte_ring_enqueue_elem(ns->cmd, &c, sizeof(c)) != 0)
		abort();
}

struct result {
	uint64_t blocks, descs, requests, passes;
};

/* The measured loop. Not inlined, so that callgrind can count it alone. */
__attribute__((noinline)) static struct result run_loop(struct kvl_lcore *lc,
							struct kvl_nic_sched *ns, uint64_t target)
{
	struct kvl_sched_event ev[64];
	struct kvl_sched_stats st;
	struct result r = { 0 };
	uint64_t opened = 0;

	for (unsigned i = 0; i < ACTIVE; i++)
		open_one(ns, i, opened++);
	while (r.blocks < target) {
		unsigned m;

		kvl_lcore_iterate(lc);
		r.passes++;
		virt_now += virt_step;
		/* The engine: every READY step DONE at once, a finished request replaced. */
		while ((m = rte_ring_sc_dequeue_burst_elem(ns->ev, ev, sizeof(ev[0]), 64, NULL)))
			for (unsigned i = 0; i < m; i++) {
				struct kvl_nsreq *q = (struct kvl_nsreq *)(uintptr_t)ev[i].user;
				struct kvl_nsched_cmd c = { .r = q, .step = ev[i].step };

				if (ev[i].type == KVL_SCHED_EV_STEP_READY) {
					c.type = KVL_NSCHED_DONE;
					while (rte_ring_enqueue_elem(ns->cmd, &c, sizeof(c)))
						kvl_lcore_iterate(lc);
				} else if (ev[i].type == KVL_SCHED_EV_REQ_DONE) {
					r.requests++;
					open_one(ns, (unsigned)(q - req), opened++);
				} else {
					abort(); /* nothing fails on the null transport */
				}
			}
		if ((r.passes & 1023) == 0) {
			kvl_sched_stats(ns->s, &st);
			r.blocks = st.posted_blocks;
			r.descs = st.posted_xfers;
		}
	}
	return r;
}

static void lcore_for(struct kvl_lcore *lc, struct kvl_nic_io *io, struct kvl_nic_sched *ns)
{
	static const bool quit;
	struct kvl_runtime_conf rc = { .idle_policy = KVL_IDLE_POLL };

	kvl_lcore_init(lc, rte_lcore_id(), 0, (int)rte_socket_id(), 0, &rc, rte_get_tsc_hz(),
		       &quit);
	io->take_wc = kvl_nic_sched_take_wc;
	io->take_wc_arg = ns;
	kvl_lcore_add_stage(lc, "nic_io", kvl_nic_io_stage, io);
	kvl_lcore_add_stage(lc, "sched", kvl_nic_sched_stage, ns);
}

static void run_case(struct kvl_nic_io *io, bool coalesce, uint64_t target, int reps, int pfd,
		     double *bps, double *ipb, double *ns_pass)
{
	double best = 1e30;
	struct result r = { 0 };
	uint64_t instr = 0;

	for (int k = 0; k < reps; k++) {
		struct kvl_nic_sched *ns = make(io, coalesce);
		static struct kvl_lcore lc;

		if (ns == NULL) {
			perror("kvl_nic_sched_create");
			exit(1);
		}
		lcore_for(&lc, io, ns);
		kvl_perf_start(pfd);
		double t0 = kvl_now_s();

		r = run_loop(&lc, ns, target);
		double t = kvl_now_s() - t0;
		int64_t ins = kvl_perf_stop(pfd);

		instr = ins > 0 ? (uint64_t)ins : 0;
		if (t < best)
			best = t;
		kvl_nic_sched_free(ns);
	}
	*bps = (double)r.blocks / best;
	*ns_pass = best * 1e9 / (double)r.passes;
	*ipb = pfd >= 0 && instr ? (double)instr / (double)r.blocks : -1;
	printf("coalescing %-3s: %" PRIu64 " blocks in %" PRIu64 " descriptors (%.2f blocks each), "
	       "%" PRIu64 " requests, %" PRIu64 " loop passes, %.1f ns per block, %.2f M blocks/s, "
	       "%.1f ns per descriptor",
	       coalesce ? "on" : "off", r.blocks, r.descs, (double)r.blocks / (double)r.descs,
	       r.requests, r.passes, best * 1e9 / (double)r.blocks, *bps / 1e6,
	       best * 1e9 / (double)r.descs);
	if (*ipb >= 0)
		printf(", %.0f instructions per block", *ipb);
	printf("\n");
}

/* Instructions of run_loop alone, counted by callgrind in a child: perf's fallback. The child's
 * scheduler clock advances @ns_pass per loop pass (virt_clock). */
static double callgrind_ipb(const char *self, uint64_t target, double ns_pass)
{
	char args[256];

	snprintf(args, sizeof(args),
		 "-l 0 --no-huge -m 256 --no-pci --no-telemetry --file-prefix kvl_lb_cg%d "
		 "--log-level=error -- --ns-per-pass %.0f",
		 (int)getpid(), ns_pass < 1 ? 1 : ns_pass);
	return kvl_callgrind_per_block(self, args, target);
}

int main(int argc, char **argv)
{
	static struct kvl_nic_io io;
	uint64_t target = 4000000, inner = 0;
	/* Instructions: perf events where they work, else callgrind (valgrind) unless
	 * --no-callgrind (--callgrind: the same as the default, kept for scripts). */
	int use_callgrind = -1;
	double bps_on, ipb_on, bps_off, ipb_off, ns_on, ns_off;
	int n = rte_eal_init(argc, argv);

	if (n < 0) {
		fprintf(stderr,
			"EAL initialisation failed (try: -l 0 --no-huge -m 256 --no-pci)\n");
		return 1;
	}
	for (int i = n + 1; i < argc; i++) {
		if (strcmp(argv[i], "--callgrind") == 0)
			use_callgrind = 1;
		else if (strcmp(argv[i], "--no-callgrind") == 0)
			use_callgrind = 0;
		else if (strcmp(argv[i], "--blocks") == 0 && i + 1 < argc)
			target = strtoull(argv[++i], NULL, 0);
		else if (strcmp(argv[i], "--inner") == 0 && i + 1 < argc)
			inner = strtoull(argv[++i], NULL, 0);
		else if (strcmp(argv[i], "--ns-per-pass") == 0 && i + 1 < argc)
			virt_step = strtoull(argv[++i], NULL, 0);
		else {
			fprintf(stderr,
				"usage: %s EAL-ARGS -- [--blocks N] [--callgrind | "
				"--no-callgrind] [--inner N [--ns-per-pass NS]]\n",
				argv[0]);
			return 2;
		}
	}
	make_load();
	/* Offsets only: the null transport never touches staging, so none of it is faulted in. */
	staging = malloc((size_t)SLOTS * BLOCK);
	if (staging == NULL || kvl_nic_io_init(&io, 9, (int)rte_socket_id(), 1024) < 0) {
		fprintf(stderr, "out of memory\n");
		return 1;
	}
	if (inner) {
		/* Under callgrind: one coalescing-off run, its block count for the parent. */
		struct kvl_nic_sched *ns = make(&io, false);
		static struct kvl_lcore lc;
		struct result r;

		lcore_for(&lc, &io, ns);
		if (virt_step) {
			virt_now = 1;
			ns->clock = virt_clock;
		}
		double t0 = kvl_now_s();

		r = run_loop(&lc, ns, inner);
		printf("inner blocks=%" PRIu64 " passes=%" PRIu64 " ns_per_block=%.1f\n", r.blocks,
		       r.passes, (kvl_now_s() - t0) * 1e9 / (double)r.blocks);
		return 0;
	}
	int pfd = kvl_perf_open();

	if (use_callgrind < 0)
		use_callgrind = pfd < 0;

	if (pfd < 0)
		printf("perf_event_open(PERF_COUNT_HW_INSTRUCTIONS) refused: no instruction "
		       "count%s\n",
		       use_callgrind ? "; callgrind counts the coalescing-off loop instead"
				     : " (--no-callgrind)");
	printf("lcore path on the null transport: %u KiB blocks, %d requests at once, %d steps x "
	       "%d blocks, batches of %d\n",
	       BLOCK >> 10, ACTIVE, LAYERS, BLOCKS, KVL_NSCHED_BATCH);
	run_case(&io, true, target, 3, pfd, &bps_on, &ipb_on, &ns_on);
	run_case(&io, false, target, 3, pfd, &bps_off, &ipb_off, &ns_off);
	if (ipb_off < 0 && use_callgrind) {
		char self[4096];
		ssize_t len = readlink("/proc/self/exe", self, sizeof(self) - 1);

		self[len > 0 ? len : 0] = '\0';
		ipb_off = callgrind_ipb(len > 0 ? self : argv[0], 400000, ns_off);
		if (ipb_off < 0)
			printf("callgrind run failed: no instruction count\n");
	}
	kvl_nic_io_fini(&io);
	rte_eal_cleanup();
	/* Coalescing off: one block per descriptor, so blocks/s = descriptors/s. */
	printf("both figures: descriptors posted by run_loop (coalescing off, one block each), "
	       "run_loop = the lcore's stages + the engine's ring traffic; desc_per_s over the "
	       "best of 3 timed runs of %" PRIu64 ", instr_per_desc over one callgrind run whose "
	       "scheduler clock advances %.0f ns per loop pass as the timed run did\n",
	       target, ns_off);
	if (ipb_off >= 0)
		printf("at %.1f ns per descriptor that is %.1f instructions per ns\n",
		       1e9 / bps_off, ipb_off * bps_off / 1e9);
	if (ipb_off >= 0)
		printf("desc_per_s=%.0f instr_per_desc=%.0f\n", bps_off, ipb_off);
	else
		printf("desc_per_s=%.0f instr_per_desc=NA\n", bps_off);
	return 0;
}
