/* SPDX-License-Identifier: BSD-3-Clause */
/* Micro-benchmark of the scheduler alone: a null transport and an engine that never waits. */
#include <errno.h>
#include <inttypes.h>
#include <linux/perf_event.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "kvl_clock.h"
#include "kvl_perf_counter.h"
#include "kvlane/kvlane.h"
#include "sched.h"

/*
 * The shape of the load: 16 KiB blocks, ACTIVE requests at once, each LAYERS compute steps of
 * BLOCKS blocks. A layer's blocks are contiguous on the peer (as kvl_block_offset() lays them
 * out), layers are not, so coalescing can merge up to BLOCKS blocks into one message.
 */
#define BLOCK  (16u << 10)
#define ACTIVE 64
#define LAYERS 32
#define BLOCKS 4
#define NB     (LAYERS * BLOCKS)
#define BATCH  64

struct load {
	struct kvl_sched_block b[NB];
	uint32_t first[LAYERS + 1];
	uint32_t refs[NB];
};

static struct load ld;

static void make_load(void)
{
	for (uint32_t l = 0; l < LAYERS; l++) {
		ld.first[l] = l * BLOCKS;
		for (uint32_t k = 0; k < BLOCKS; k++) {
			uint32_t i = l * BLOCKS + k;

			/* 64 blocks per layer on the peer; this request's 4 start at 8. */
			ld.b[i] = (struct kvl_sched_block){
				.remote_off = ((uint64_t)l * 64 + 8 + k) * BLOCK,
				.remote_seg = 1,
				.length = BLOCK,
			};
			ld.refs[i] = i;
		}
	}
	ld.first[LAYERS] = NB;
}

static struct kvl_sched *make_sched(bool coalesce)
{
	struct kvl_sched_cfg c = {
		.max_requests = ACTIVE * 2,
		.max_blocks_total = ACTIVE * 2 * NB,
		.max_xfers = 4096,
		.slot_size = BLOCK,
		.slot_count = 16384, /* 256 MiB of staging: offsets only, no memory behind them */
		.window_min = 256u << 10,
		.window_max = 512u << 20,
		.max_msg = coalesce ? 1u << 20 : 0,
		.max_sge = coalesce ? 4 : 1,
		.starvation_ns = 100000,
		.resize_ns = 10000000,
	};

	return kvl_sched_create(&c);
}

static int open_one(struct kvl_sched *s, uint64_t now, uint64_t n)
{
	struct kvl_sched_req_desc d = {
		.peer = n % 8,
		.deadline = now + 1000000 + n % 1000,
		.blocks = ld.b,
		.n_blocks = NB,
		.n_steps = LAYERS,
		.step_first = ld.first,
		.step_blocks = ld.refs,
		.dir = KVL_SCHED_PULL,
		.cls = n % 4 == 0 ? KVL_SCHED_PREFILL : KVL_SCHED_DECODE,
	};

	return kvl_sched_open(s, &d, now);
}

struct result {
	uint64_t blocks, descs, requests;
};

/* The measured loop. Not inlined, so that callgrind can count it alone. */
__attribute__((noinline)) static struct result run_loop(struct kvl_sched *s, uint64_t target)
{
	static struct kvl_sched_xfer out[BATCH];
	static struct kvl_sched_event ev[256];
	struct result r = { 0 };
	uint64_t now = 1, opened = 0;

	for (int i = 0; i < ACTIVE; i++)
		if (open_one(s, now, opened++) < 0)
			abort();
	while (r.blocks < target) {
		unsigned n = kvl_sched_step(s, now, out, BATCH);

		/* The null transport: everything posted completes in this iteration. */
		for (unsigned i = 0; i < n; i++) {
			r.blocks += out[i].n_blocks;
			kvl_sched_complete(s, out[i].id, KVL_OK, now);
		}
		r.descs += n;
		unsigned m;

		/* The engine: every READY step is DONE at once; a finished request is replaced. */
		while ((m = kvl_sched_poll_events(s, ev, 256)) > 0)
			for (unsigned i = 0; i < m; i++) {
				if (ev[i].type == KVL_SCHED_EV_STEP_READY)
					kvl_sched_step_done(s, ev[i].req, ev[i].step, now);
				else if (ev[i].type == KVL_SCHED_EV_REQ_DONE) {
					r.requests++;
					if (open_one(s, now, opened++) < 0)
						abort();
				}
			}
		now += 100;
	}
	return r;
}

/* One case: best of @reps runs (the VM is noisy), instructions from perf when allowed. */
static void run_case(bool coalesce, uint64_t target, int reps, int pfd, double *dps, double *ipd)
{
	double best = 1e30;
	struct result r = { 0 };
	uint64_t instr = 0;

	for (int k = 0; k < reps; k++) {
		struct kvl_sched *s = make_sched(coalesce);

		if (s == NULL) {
			perror("kvl_sched_create");
			exit(1);
		}
		kvl_perf_start(pfd);
		double t0 = kvl_now_s();

		r = run_loop(s, target);
		double t = kvl_now_s() - t0;
		int64_t ins = kvl_perf_stop(pfd);

		instr = ins > 0 ? (uint64_t)ins : 0;
		if (t < best)
			best = t;
		kvl_sched_free(s);
	}
	*dps = (double)r.blocks / best;
	*ipd = pfd >= 0 && instr ? (double)instr / (double)r.blocks : -1;
	printf("coalescing %-3s: %" PRIu64 " blocks in %" PRIu64 " descriptors (%.2f blocks each), "
	       "%" PRIu64 " requests, %.1f ns per block, %.2f M blocks/s, %.1f ns per descriptor",
	       coalesce ? "on" : "off", r.blocks, r.descs, (double)r.blocks / (double)r.descs,
	       r.requests, best * 1e9 / (double)r.blocks, *dps / 1e6, best * 1e9 / (double)r.descs);
	if (*ipd >= 0)
		printf(", %.0f instructions per block", *ipd);
	printf("\n");
}

/* Instructions of run_loop alone, counted by callgrind in a child: perf's fallback. */
static double callgrind_ipd(const char *self, uint64_t target)
{
	return kvl_callgrind_per_block(self, "", target);
}

int main(int argc, char **argv)
{
	uint64_t target = 4000000;
	/* Instructions: perf events where they work, else callgrind (valgrind) unless
	 * --no-callgrind (--callgrind: the same as the default, kept for scripts). */
	int use_callgrind = -1;
	double dps_on, ipd_on, dps_off, ipd_off;

	make_load();
	if (argc == 3 && strcmp(argv[1], "--inner") == 0) {
		/* Under callgrind: one coalescing-off run, its block count for the parent. */
		struct kvl_sched *s = make_sched(false);
		struct result r = run_loop(s, strtoull(argv[2], NULL, 0));

		printf("inner blocks=%" PRIu64 "\n", r.blocks);
		kvl_sched_free(s);
		return 0;
	}
	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--callgrind") == 0)
			use_callgrind = 1;
		else if (strcmp(argv[i], "--no-callgrind") == 0)
			use_callgrind = 0;
		else if (strcmp(argv[i], "--blocks") == 0 && i + 1 < argc)
			target = strtoull(argv[++i], NULL, 0);
		else {
			fprintf(stderr, "usage: %s [--blocks N] [--callgrind | --no-callgrind]\n",
				argv[0]);
			return 2;
		}
	}
	int pfd = kvl_perf_open();

	if (use_callgrind < 0)
		use_callgrind = pfd < 0;

	if (pfd < 0)
		printf("perf_event_open(PERF_COUNT_HW_INSTRUCTIONS): %s: no instruction count%s\n",
		       strerror(errno),
		       use_callgrind ? "; callgrind counts the coalescing-off loop instead"
				     : " (--no-callgrind)");
	printf("%u KiB blocks, %d requests at once, %d steps x %d blocks each, batches of %d\n",
	       BLOCK >> 10, ACTIVE, LAYERS, BLOCKS, BATCH);
	run_case(true, target, 3, pfd, &dps_on, &ipd_on);
	run_case(false, target, 3, pfd, &dps_off, &ipd_off);
	if (ipd_off < 0 && use_callgrind) {
		char self[4096];
		ssize_t len = readlink("/proc/self/exe", self, sizeof(self) - 1);

		self[len > 0 ? len : 0] = '\0';
		ipd_off = callgrind_ipd(len > 0 ? self : argv[0], 200000);
		if (ipd_off < 0)
			printf("callgrind run failed: no instruction count\n");
	}
	if (ipd_off >= 0)
		printf("desc_per_s=%.0f instr_per_desc=%.0f\n", dps_off, ipd_off);
	else
		printf("desc_per_s=%.0f instr_per_desc=NA\n", dps_off);
	return 0;
}
