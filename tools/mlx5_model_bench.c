/* SPDX-License-Identifier: BSD-3-Clause */
/* CPU cost of the mlx5 fast path: ns (and instructions) per posted WQE and per polled CQE. */
#include <errno.h>
#include <inttypes.h>
#include <linux/perf_event.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "kvl_clock.h"
#include "kvl_perf_counter.h"
#include "mlx5.h"

/*
 * No NIC here: the SQ, the doorbell record and the doorbell "register" are heap memory, so
 * this measures what the CPU spends (encoding, the barriers, the stores) and not what a real
 * UAR write costs (an uncached / write-combining store to PCIe: add it on hardware).
 */

#define SQ_BBS 256
#define CQES   4096

/* Kept as functions of their own: callgrind collects inside them alone (--toggle-collect). */
#if defined(__clang__)
#define NOT_INLINED __attribute__((noinline, used))
#else
#define NOT_INLINED __attribute__((noipa, used))
#endif

struct meas {
	uint64_t ns;
	int64_t insns;
};

/* One line of the table: a post case (batch, BlueFlame or not) or a poll case (burst). */
struct bcase {
	bool poll;
	unsigned n;	  /* batch (post) or burst (poll) */
	unsigned bf_size; /* post: BlueFlame register size, 0 for the 8-byte doorbell */
	unsigned rounds;  /* post: batches; poll: passes over the whole CQ (x scale) */
};

static const struct bcase cases[] = {
	{ false, 1, 256, 400000 }, { false, 1, 0, 400000 }, { false, 16, 0, 50000 },
	{ false, 64, 0, 12000 },   { true, 1, 0, 50 },	    { true, 16, 0, 100 },
	{ true, 64, 0, 100 },
};
#define NCASES	 (sizeof(cases) / sizeof(cases[0]))
#define CASE_WQE 2 /* the case of the summary line: batches of 16, as the verbs bench */
#define CASE_CQE 5 /* bursts of 16 */

static void start(int fd, struct meas *m)
{
	kvl_perf_start(fd);
	m->ns = kvl_now_ns();
}

static void stop(int fd, struct meas *m)
{
	m->ns = kvl_now_ns() - m->ns;
	m->insns = kvl_perf_stop(fd);
}

static const char *case_name(const struct bcase *k, char *b, size_t cap)
{
	if (k->poll)
		snprintf(b, cap, "poll REQ CQE, burst %u", k->n);
	else
		snprintf(b, cap, "post WRITE, batch %u, %s", k->n,
			 k->bf_size ? "BlueFlame" : "8-byte doorbell");
	return b;
}

/* The post path for @rounds batches: encode, signal the last, ring; the NIC is instant here,
 * so the WQEBBs are given back at once (a few ns, counted). Returns the WQEs posted. */
static NOT_INLINED uint64_t post_rounds(struct kvl_mlx5_sq *sq, struct kvl_mlx5_wqe *w,
					unsigned batch, unsigned rounds)
{
	uint64_t ops = 0, wrid;

	for (unsigned r = 0; r < rounds; r++) {
		uint16_t first = sq->sq_pi;

		for (unsigned i = 0; i < batch; i++) {
			w->wrid = ops++;
			w->raddr += 4096;
			/* one in 16 signaled, as verbs_ring.c's signal_every does it */
			w->flags = (ops & 15) == 0 ? KVL_MLX5_F_SIGNAL : 0;
			if (kvl_mlx5_sq_post(sq, w) != 0)
				abort();
		}
		kvl_mlx5_sq_signal_last(sq);
		kvl_mlx5_sq_ring(sq);
		if (kvl_mlx5_sq_complete(sq, (uint16_t)(sq->sq_pi - 1), &wrid) != 0 ||
		    sq->sq_ci != sq->sq_pi || (uint16_t)(sq->sq_pi - first) != batch)
			abort();
	}
	return ops;
}

/* The poll path over one pass of CQES ready CQEs, @burst at a time. */
static NOT_INLINED void poll_pass(struct kvl_mlx5_cq *cq, struct kvl_mlx5_cqe_info *e,
				  unsigned burst)
{
	for (unsigned got = 0; got < CQES;) {
		unsigned n = kvl_mlx5_cq_poll(cq, e, burst);

		if (n == 0)
			abort();
		got += n;
	}
}

/* Ends a case in the inner run: callgrind dumps its counters when this returns. */
static NOT_INLINED void case_done(void)
{
	__asm__ volatile("" ::: "memory");
}

static uint64_t bench_post(int fd, const struct bcase *k, unsigned rounds, struct meas *m)
{
	static uint8_t sqbuf[SQ_BBS * 64] __attribute__((aligned(64)));
	static uint8_t page[1024] __attribute__((aligned(64)));
	static uint32_t dbrec[2];
	struct kvl_mlx5_sq sq;
	struct kvl_mlx5_sq_attr a = {
		.buf = sqbuf,
		.wqe_cnt = SQ_BBS,
		.qpn = 0x123,
		.dbrec = dbrec,
		.bf_reg = page,
		.bf_size = k->bf_size,
	};
	struct kvl_mlx5_sge sge = { .addr = 0x10000, .lkey = 0x55, .len = 4096 };
	struct kvl_mlx5_wqe w = { .opcode = KVL_MLX5_OP_RDMA_WRITE,
				  .raddr = 0x7f0000000000,
				  .rkey = 0x66,
				  .sge = &sge,
				  .nsge = 1 };
	uint64_t ops;

	if (kvl_mlx5_sq_init(&sq, &a) != 0) {
		fprintf(stderr, "sq init failed\n");
		exit(1);
	}
	start(fd, m);
	ops = post_rounds(&sq, &w, k->n, rounds);
	stop(fd, m);
	kvl_mlx5_sq_fini(&sq);
	return ops;
}

static uint64_t bench_poll(int fd, const struct bcase *k, unsigned passes, struct meas *total)
{
	static uint8_t cqbuf[CQES * 64] __attribute__((aligned(64)));
	static uint32_t dbrec[2];
	struct kvl_mlx5_cq cq;
	struct kvl_mlx5_cqe_info e[64];
	struct meas m;
	uint64_t ops = 0;

	memset(cqbuf, 0, sizeof(cqbuf));
	for (unsigned i = 0; i < CQES; i++)
		cqbuf[i * 64 + 63] = 0xf0;
	if (kvl_mlx5_cq_init(&cq, cqbuf, CQES, 64, dbrec) != 0)
		abort();
	*total = (struct meas){ 0, 0 };
	for (unsigned p = 0; p < passes; p++) {
		/* The NIC's part, not timed: a full pass of REQ CQEs with this pass's owner. */
		for (unsigned i = 0; i < CQES; i++) {
			uint8_t *c = cqbuf + i * 64;
			uint32_t idx = p * CQES + i;

			c[56] = 0x08;
			c[59] = 0x23;
			c[60] = (uint8_t)(idx >> 8);
			c[61] = (uint8_t)idx;
			c[63] = (uint8_t)(p & 1);
		}
		start(fd, &m);
		poll_pass(&cq, e, k->n);
		stop(fd, &m);
		total->ns += m.ns;
		total->insns = m.insns < 0 || total->insns < 0 ? -1 : total->insns + m.insns;
		ops += CQES;
	}
	return ops;
}

static uint64_t run_case(int fd, const struct bcase *k, unsigned scale, unsigned div,
			 struct meas *m)
{
	unsigned rounds = k->rounds * scale / div;

	if (rounds == 0)
		rounds = 1;
	return k->poll ? bench_poll(fd, k, rounds, m) : bench_post(fd, k, rounds, m);
}

/* Under callgrind (--inner): every case at 1/CG_DIV of the rounds, one dump each. */
#define CG_DIV 50

static int inner(void)
{
	for (unsigned i = 0; i < NCASES; i++) {
		struct meas m;
		uint64_t ops = run_case(-1, &cases[i], 1, CG_DIV, &m);

		case_done();
		printf("inner case=%u ops=%" PRIu64 "\n", i, ops);
	}
	return 0;
}

static void cg_line(const char *l, void *arg)
{
	uint64_t *ops = arg, v;
	unsigned i;

	if (sscanf(l, "inner case=%u ops=%" SCNu64, &i, &v) == 2 && i < NCASES)
		ops[i] = v;
}

/* Instructions per op of every case by callgrind: this binary again with --inner, collecting
 * inside post_rounds and poll_pass only. @ipo[i] < 0 where nothing was counted. */
static void by_callgrind(double *ipo, char *how, size_t cap)
{
	static const char *const fn[] = { "post_rounds", "poll_pass" };
	struct kvl_callgrind cg;
	uint64_t ops[NCASES] = { 0 };
	char self[4096], cmd[4200], f[64];
	ssize_t len = readlink("/proc/self/exe", self, sizeof(self) - 1);

	for (unsigned i = 0; i < NCASES; i++)
		ipo[i] = -1;
	self[len > 0 ? len : 0] = 0;
	snprintf(cmd, sizeof(cmd), "%s --inner", self);
	if (len <= 0 || kvl_callgrind_run(&cg, cmd, fn, 2, "case_done", cg_line, ops) != 0) {
		snprintf(how, cap, "NA (%.100s)", len <= 0 ? "readlink /proc/self/exe" : cg.why);
		kvl_callgrind_end(&cg);
		return;
	}
	snprintf(how, cap, "callgrind (%s), 1/%u of the rounds", cg.version, CG_DIV);
	for (unsigned i = 0; i < NCASES; i++) {
		uint64_t incl[2];

		int64_t total;

		kvl_callgrind_file(&cg, i + 1, f, sizeof(f));
		total = kvl_callgrind_inclusive(f, fn, 2, incl);
		/* all that was collected must sit under the two functions, or it is not ours */
		if (total > 0 && (uint64_t)total == incl[0] + incl[1] && ops[i])
			ipo[i] = (double)total / (double)ops[i];
	}
	kvl_callgrind_end(&cg);
}

static const char *fmt_ins(char *b, size_t cap, double v, int decimals)
{
	if (v >= 0)
		snprintf(b, cap, "%.*f", decimals, v);
	else
		snprintf(b, cap, "NA");
	return b;
}

int main(int argc, char **argv)
{
	struct meas m[NCASES];
	uint64_t ops[NCASES];
	double ipo[NCASES], ns[NCASES];
	unsigned scale = 1;
	bool use_cg = false;
	char how[160], name[64], ins[32];
	int fd;

	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--inner") == 0)
			return inner();
		else if (strcmp(argv[i], "--callgrind") == 0)
			use_cg = true;
		else if (atoi(argv[i]) > 0)
			scale = (unsigned)atoi(argv[i]);
		else {
			fprintf(stderr, "usage: %s [SCALE] [--callgrind]\n", argv[0]);
			return 2;
		}
	}
	fd = kvl_perf_open();
	for (unsigned i = 0; i < NCASES; i++) {
		ops[i] = run_case(fd, &cases[i], scale, 1, &m[i]);
		ns[i] = (double)m[i].ns / (double)ops[i];
		ipo[i] = m[i].insns >= 0 ? (double)m[i].insns / (double)ops[i] : -1;
	}
	if (fd >= 0) {
		snprintf(how, sizeof(how), "perf_event_open (user space)");
		close(fd);
	} else if (use_cg) {
		by_callgrind(ipo, how, sizeof(how));
	} else {
		snprintf(how, sizeof(how),
			 "NA (perf events not available here; --callgrind counts them)");
	}
	printf("mlx5 fast path on heap memory (no NIC); instructions: %s\n", how);
	for (unsigned i = 0; i < NCASES; i++)
		printf("%-44s %8.2f ns/op  %6s instructions/op  (%" PRIu64 " ops)\n",
		       case_name(&cases[i], name, sizeof(name)), ns[i],
		       fmt_ins(ins, sizeof(ins), ipo[i], 1), ops[i]);
	/* the summary line, as kvlane-verbs-cost-bench's: batches and bursts of 16 */
	printf("backend=mlx5_model instr_per_wqe=%s ", fmt_ins(ins, sizeof(ins), ipo[CASE_WQE], 0));
	printf("instr_per_cqe=%s ns_per_wqe=%.1f ns_per_cqe=%.1f\n",
	       fmt_ins(ins, sizeof(ins), ipo[CASE_CQE], 0), ns[CASE_WQE], ns[CASE_CQE]);
	return 0;
}
