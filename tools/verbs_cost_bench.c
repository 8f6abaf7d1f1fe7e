/* SPDX-License-Identifier: BSD-3-Clause */
/* CPU cost of the verbs transport: instructions and ns per posted WQE and per polled CQE. */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <sched.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

#include "kvl_clock.h"
#include "kvl_perf_counter.h"
#include "verbs.h"

/*
 * The figures tools/mlx5_model_bench.c gives for the mlx5 fast path alone, for the whole
 * transport (lcores/xport/verbs_*.c) through its public API, on whichever backend the device gets:
 *   post path: kvl_verbs_enqueue + kvl_verbs_flush (checks, the ring, WQEs, the doorbell)
 *   poll path: kvl_verbs_progress (CQ polling, completions) + kvl_verbs_reap
 * Each path runs inside its own never-inlined wrapper (cost_post, cost_poll), so that a
 * clock, a perf counter or callgrind's --toggle-collect sees exactly one path and nothing of
 * the loop around it. Nothing below knows the backend: verbs (ibv_wr_*) on rxe, mlx5 direct
 * on an mlx5 device (or a software one that says it is), as kvl_verbs_open() decides.
 *
 * Instructions are user space only (perf's exclude_kernel, or callgrind): where the doorbell
 * is a system call (rxe) or the NIC is emulated in the kernel, that side is not counted.
 */

#define KIB	     1024u
#define DEPTH	     256u /* requests in flight at most: the queue is kept full */
#define SIGNAL_EVERY 64u  /* the INI default; a post's last WR is signaled anyway */
#define MAX_LEN	     (16u * KIB)
#define BUF_LEN	     ((uint64_t)DEPTH * MAX_LEN)
#define SEG_ID	     1u
#define WC_MAX	     DEPTH
#define WARMUP	     512u
#define IDLE_POLLS   1000u /* empty polls measured apart, nothing in flight */
#define CASE_TIMEOUT 120.0
#define CG_DIV	     8u /* callgrind runs 1/CG_DIV of the requests */
#define ERR_LEN	     KVL_VERBS_ERR_LEN
/* Kept as functions of their own: callgrind toggles on their names, and identical bodies must
 * not be merged (cost_poll / cost_poll_idle). */
#if defined(__clang__)
#define NOT_INLINED __attribute__((noinline, used))
#else
#define NOT_INLINED __attribute__((noipa, used))
#endif
#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

/* Where the two devices come from: RXE_DEV0/1 and RXE_GID0/1 (the rdma suite's VM exports
 * them), each overridden by the command line (--dev0 mlx5_0 ...). */
struct opts {
	const char *dev[2];
	int gid[2];		 /* -1: auto */
	int backend;		 /* enum kvl_verbs_backend */
	const char *backend_arg; /* as given, for the inner run */
	unsigned div;		 /* 1, or 4 with --quick */
	bool force_cg;		 /* --callgrind */
};

static const char *const backend_names[] = { "auto", "mlx5", "verbs" };

/* Two devices of this host (rxe0 <-> rxe1 in the VM), one RC connection between them. */
struct pair {
	struct kvl_verbs_dev *d[2];
	struct kvl_verbs_conn *c[2]; /* c[0] initiates, c[1] is the passive end */
	uint8_t *buf[2];	     /* BUF_LEN each, registered; buf[1] is the remote segment */
	char dev[2][64];
};

/*
 * Opens both devices, registers a buffer on each, connects the two RC QPs and tells side 0
 * about side 1's buffer. Returns 0, 77 with @why when no device was named, or 1 with @why.
 */
static int open_pair(struct pair *p, const struct opts *o, char *why, size_t cap)
{
	struct kvl_verbs_addr addr[2];
	uint32_t rkey[2];
	char err[ERR_LEN];

	memset(p, 0, sizeof(*p));
	if (o->dev[0] == NULL || o->dev[1] == NULL) {
		snprintf(why, cap,
			 "no devices: RXE_DEV0/RXE_DEV1 not set and no --dev0/--dev1 (run it "
			 "inside the rxe VM: meson test --benchmark verbs_cost)");
		return 77;
	}
	for (int i = 0; i < 2; i++) {
		struct kvl_verbs_dev_opts d = { .name = o->dev[i],
						.port = 1,
						.gid_index = o->gid[i],
						.mtu = 4096,
						.backend = o->backend };
		uint64_t ns;

		snprintf(p->dev[i], sizeof(p->dev[i]), "%s", d.name);
		p->d[i] = kvl_verbs_open(&d, err, sizeof(err));
		if (p->d[i] == NULL) {
			snprintf(why, cap, "kvl_verbs_open(%s): %s", d.name, err);
			return 1;
		}
		p->buf[i] = aligned_alloc(4096, BUF_LEN);
		if (p->buf[i] == NULL) {
			snprintf(why, cap, "out of memory");
			return 1;
		}
		memset(p->buf[i], 0, BUF_LEN);
		if (kvl_verbs_reg(p->d[i], p->buf[i], BUF_LEN,
				  KVL_SEG_REMOTE_READ | KVL_SEG_REMOTE_WRITE, &rkey[i], &ns, err,
				  sizeof(err)) != 0) {
			snprintf(why, cap, "kvl_verbs_reg(%s): %s", d.name, err);
			return 1;
		}
		p->c[i] = kvl_verbs_conn_new(p->d[i], DEPTH, SIGNAL_EVERY, 0, 0, &addr[i], err,
					     sizeof(err));
		if (p->c[i] == NULL) {
			snprintf(why, cap, "kvl_verbs_conn_new(%s): %s", d.name, err);
			return 1;
		}
	}
	for (int i = 0; i < 2; i++)
		if (kvl_verbs_conn_connect(p->c[i], &addr[1 - i], err, sizeof(err)) != 0) {
			snprintf(why, cap, "kvl_verbs_conn_connect(%s): %s", p->dev[i], err);
			return 1;
		}
	{
		struct kvl_verbs_rseg s = { SEG_ID, KVL_SEG_REMOTE_READ | KVL_SEG_REMOTE_WRITE,
					    (uintptr_t)p->buf[1], BUF_LEN, rkey[1] };

		if (kvl_verbs_set_remote(p->c[0], &s, 1) != 0) {
			snprintf(why, cap, "kvl_verbs_set_remote failed");
			return 1;
		}
	}
	return 0;
}

static void close_pair(struct pair *p)
{
	for (int i = 0; i < 2; i++) {
		if (p->c[i])
			kvl_verbs_conn_free(p->c[i]);
		if (p->d[i])
			kvl_verbs_close(p->d[i]);
		free(p->buf[i]);
	}
	memset(p, 0, sizeof(*p));
}

/* The post path: checks, the ring, the WQEs, the doorbell (a system call on rxe). */
static NOT_INLINED unsigned cost_post(struct kvl_verbs_conn *c, const struct kvl_wr *w, unsigned n)
{
	n = kvl_verbs_enqueue(c, w, n);
	kvl_verbs_flush(c);
	return n;
}

/* The poll path: the CQ polled (progress's flush finds nothing left), then the reap. */
static NOT_INLINED unsigned cost_poll(struct kvl_verbs_conn *c, struct kvl_wc *wc, unsigned max)
{
	kvl_verbs_progress(c);
	return kvl_verbs_reap(c, wc, max);
}

/* The same body, called only when nothing is in flight: what one empty poll costs. */
static NOT_INLINED unsigned cost_poll_idle(struct kvl_verbs_conn *c, struct kvl_wc *wc,
					   unsigned max)
{
	kvl_verbs_progress(c);
	return kvl_verbs_reap(c, wc, max);
}

static const char *const wrapper_fn[] = { "cost_post", "cost_poll", "cost_poll_idle" };
enum { FN_POST, FN_POLL, FN_IDLE };

/*
 * Over the software ConnectX (tests/unit/fake_verbs.c, which defines fake_nic_stats), the
 * provider calls the transport makes in its own thread (the receive CQ's ibv_start_poll on
 * every poll, ibv_post_recv when a notice came, the read_* of its CQE) run the model's
 * emulation of the NIC, not rdma-core's mlx5 provider: their instructions would say how the
 * model is written. Callgrind toggles collection off inside them (--toggle-collect on a
 * function entered with collection on), so the count is the transport's own code and the
 * inline verbs.h wrappers that call the provider. On rxe the provider is rdma-core's, real
 * user-space work, and stays in the count.
 */
extern void fake_nic_stats(void *out) __attribute__((weak));
static const char *const model_fn[] = { "start_poll_op",      "end_poll_op",
					"next_poll_op",	      "poll_cq_op",
					"post_recv_op",	      "read_opcode_op",
					"read_vendor_err_op", "read_byte_len_op",
					"read_imm_data_op",   "ibv_modify_qp" };

static bool on_model(void)
{
	return fake_nic_stats != NULL;
}

struct bcase {
	uint8_t op;
	uint32_t len;
	unsigned batch;
	unsigned n; /* requests, timed run */
};

static const struct bcase cases[] = {
	{ KVL_OP_WRITE, 64, 16, 16384 },     { KVL_OP_WRITE, 64, 1, 8192 },
	{ KVL_OP_WRITE, MAX_LEN, 16, 4096 }, { KVL_OP_WRITE, MAX_LEN, 1, 2048 },
	{ KVL_OP_READ, 64, 16, 16384 },	     { KVL_OP_READ, 64, 1, 8192 },
	{ KVL_OP_READ, MAX_LEN, 16, 4096 },  { KVL_OP_READ, MAX_LEN, 1, 2048 },
};
#define CASE_SUMMARY 2 /* the last line: WRITE 16 KiB in batches of 16 */

/* What one case counted. ns and ins are sums over the wrapper calls; ins < 0: not counted. */
struct result {
	uint64_t wqes, doorbells, cqes, completed;
	uint64_t post_calls, polls, empty_polls, idle_polls;
	uint64_t post_ns, poll_ns, empty_ns, idle_ns;
	int64_t post_ins, poll_ins, empty_ins, idle_ins;
};

/* Instruction counter read around each wrapper call (perf events), when there is one. */
static int perf_fd = -1;
static int64_t perf_read_cost; /* instructions one read() pair adds */
static uint64_t clock_cost;    /* ns one clock_gettime pair adds */

static int64_t ins_now(void)
{
	return perf_fd >= 0 ? kvl_perf_read(perf_fd) : 0;
}

static const char *op_name(uint8_t op)
{
	return op == KVL_OP_WRITE ? "WRITE" : "READ";
}

/* The source holds a pattern, the destination its complement: a request that moved nothing
 * cannot pass the check that follows the run. */
static void prime(struct pair *p, const struct bcase *k, unsigned span, bool src_too)
{
	uint8_t *src = k->op == KVL_OP_WRITE ? p->buf[0] : p->buf[1];
	uint8_t *dst = k->op == KVL_OP_WRITE ? p->buf[1] : p->buf[0];

	for (uint64_t i = 0; i < (uint64_t)span * k->len; i++) {
		if (src_too)
			src[i] = (uint8_t)(i * 131u + k->len + k->op);
		dst[i] = (uint8_t)~src[i];
	}
}

static bool landed(struct pair *p, const struct bcase *k, unsigned span)
{
	uint8_t *src = k->op == KVL_OP_WRITE ? p->buf[0] : p->buf[1];
	uint8_t *dst = k->op == KVL_OP_WRITE ? p->buf[1] : p->buf[0];

	return memcmp(src, dst, (size_t)span * k->len) == 0;
}

/*
 * @n requests of the case through the connection, the queue kept full: post batches while
 * there is room, then one poll, again. Every completion checked (order, status, bytes).
 * Returns 0, or -1 with the reason printed.
 */
static int stream(struct pair *p, const struct bcase *k, unsigned n, uint64_t *next_id,
		  struct result *r)
{
	struct kvl_verbs_conn *c = p->c[0];
	static struct kvl_wr w[16];
	static struct kvl_wc wc[WC_MAX];
	uint64_t id0 = *next_id, posted = 0, done = 0;
	double deadline = kvl_now_s() + CASE_TIMEOUT;

	*next_id += n;
	while (done < n) {
		uint64_t cq0, t0, t1;
		int64_t i0, i1;
		unsigned got;

		while (posted < n) {
			unsigned b = n - posted < k->batch ? (unsigned)(n - posted) : k->batch;

			if (DEPTH - kvl_verbs_outstanding(c) < b)
				break;
			for (unsigned j = 0; j < b; j++) {
				uint64_t off = ((posted + j) % DEPTH) * k->len;

				w[j] = (struct kvl_wr){ .wr_id = id0 + posted + j,
							.local = p->buf[0] + off,
							.remote_off = off,
							.length = k->len,
							.remote_seg = SEG_ID,
							.op = k->op };
			}
			i0 = ins_now();
			t0 = kvl_now_ns();
			got = cost_post(c, w, b);
			t1 = kvl_now_ns();
			i1 = ins_now();
			r->post_calls++;
			r->post_ns += t1 - t0;
			r->post_ins += i1 - i0;
			if (got != b) {
				fprintf(stderr, "%s %u B: %u of %u taken with room for them\n",
					op_name(k->op), k->len, got, b);
				return -1;
			}
			posted += b;
		}
		cq0 = kvl_verbs_stats(c)->cqes;
		i0 = ins_now();
		t0 = kvl_now_ns();
		got = cost_poll(c, wc, WC_MAX);
		t1 = kvl_now_ns();
		i1 = ins_now();
		r->polls++;
		r->poll_ns += t1 - t0;
		r->poll_ins += i1 - i0;
		if (kvl_verbs_stats(c)->cqes == cq0) {
			r->empty_polls++;
			r->empty_ns += t1 - t0;
			r->empty_ins += i1 - i0;
		}
		for (unsigned j = 0; j < got; j++, done++)
			if (wc[j].wr_id != id0 + done || wc[j].status != KVL_OK ||
			    wc[j].bytes != k->len) {
				fprintf(stderr,
					"%s %u B #%" PRIu64 ": wr_id %" PRIu64 " (expected %" PRIu64
					") status %d bytes %u\n",
					op_name(k->op), k->len, done, wc[j].wr_id, id0 + done,
					wc[j].status, wc[j].bytes);
				return -1;
			}
		if (got == 0) {
			if (kvl_now_s() > deadline) {
				fprintf(stderr, "%s %u B: stuck at %" PRIu64 "/%u completions\n",
					op_name(k->op), k->len, done, n);
				return -1;
			}
			sched_yield(); /* let the kernel's side of a soft device run */
		}
	}
	return 0;
}

/* Empty polls with nothing in flight: the cost the stream's empty polls are charged. */
static void idle(struct pair *p, struct result *r)
{
	struct kvl_wc wc[4];

	for (unsigned i = 0; i < IDLE_POLLS; i++) {
		int64_t i0 = ins_now();
		uint64_t t0 = kvl_now_ns(), t1;

		cost_poll_idle(p->c[0], wc, 4);
		t1 = kvl_now_ns();
		r->idle_ins += ins_now() - i0;
		r->idle_ns += t1 - t0;
	}
	r->idle_polls = IDLE_POLLS;
}

/* Marks the end of a part of the inner run: callgrind dumps its counters when it returns. */
static NOT_INLINED void cost_dump(void)
{
	__asm__ volatile("" ::: "memory");
}

/* One case: warm-up (not counted), the measured stream, the idle polls, the checks. */
static int run_case(struct pair *p, const struct bcase *k, unsigned n, struct result *r, bool dumps)
{
	static uint64_t next_id = 1;
	struct kvl_verbs_conn *c = p->c[0];
	const struct kvl_verbs_stats *st = kvl_verbs_stats(c);
	struct result warm = { 0 };
	unsigned span = n < DEPTH ? n : DEPTH;
	uint64_t cq0, db0, wq0, done0;

	prime(p, k, DEPTH, true);
	if (stream(p, k, WARMUP, &next_id, &warm) != 0)
		return -1;
	if (dumps)
		cost_dump();	  /* dump 2i+1: the warm-up, thrown away */
	prime(p, k, span, false); /* what the warm-up landed is undone: the run must land it */
	memset(r, 0, sizeof(*r));
	cq0 = st->cqes;
	db0 = st->doorbells;
	wq0 = st->posted;
	done0 = st->completed;
	if (stream(p, k, n, &next_id, r) != 0)
		return -1;
	r->cqes = st->cqes - cq0;
	r->doorbells = st->doorbells - db0;
	r->wqes = st->posted - wq0;
	r->completed = st->completed - done0;
	idle(p, r);
	if (dumps)
		cost_dump(); /* dump 2i+2: this case */
	if (!landed(p, k, span)) {
		fprintf(stderr, "%s %u B: the bytes did not land\n", op_name(k->op), k->len);
		return -1;
	}
	if (r->wqes != n || r->completed != n || r->cqes == 0) {
		fprintf(stderr,
			"%s %u B: %" PRIu64 " WQEs, %" PRIu64 " completed, %" PRIu64
			" CQEs for %u requests\n",
			op_name(k->op), k->len, r->wqes, r->completed, r->cqes, n);
		return -1;
	}
	return 0;
}

static unsigned case_n(const struct bcase *k, unsigned div)
{
	return k->n / div < 64 ? 64 : k->n / div;
}

/*
 * The inner run, under callgrind (--inner DIV): every case with n / DIV requests, one dump
 * per part, one line per case for the parent. The wall clock still runs, outside the
 * wrappers: callgrind counts only what runs inside them.
 */
static int inner(const struct opts *o, unsigned div)
{
	struct pair p;
	char why[ERR_LEN + 64];
	int rc = open_pair(&p, o, why, sizeof(why));

	if (rc != 0) {
		fprintf(stderr, "inner: %s\n", why);
		return rc;
	}
	for (unsigned i = 0; i < ARRAY_SIZE(cases); i++) {
		struct result r;

		if (run_case(&p, &cases[i], case_n(&cases[i], div), &r, true) != 0) {
			close_pair(&p);
			return 1;
		}
		printf("inner case=%u wqes=%" PRIu64 " doorbells=%" PRIu64 " cqes=%" PRIu64
		       " completed=%" PRIu64 " polls=%" PRIu64 " empty=%" PRIu64 " idle=%" PRIu64
		       "\n",
		       i, r.wqes, r.doorbells, r.cqes, r.completed, r.polls, r.empty_polls,
		       r.idle_polls);
	}
	close_pair(&p);
	return 0;
}

static void inner_line(const char *l, void *arg)
{
	struct result *r = arg, t = { 0 };
	unsigned i;

	if (sscanf(l,
		   "inner case=%u wqes=%" SCNu64 " doorbells=%" SCNu64 " cqes=%" SCNu64
		   " completed=%" SCNu64 " polls=%" SCNu64 " empty=%" SCNu64 " idle=%" SCNu64,
		   &i, &t.wqes, &t.doorbells, &t.cqes, &t.completed, &t.polls, &t.empty_polls,
		   &t.idle_polls) == 8 &&
	    i < ARRAY_SIZE(cases)) {
		r[i] = t;
		r[i].post_ins = 0; /* seen */
	}
}

/*
 * Instructions by callgrind: this binary again under valgrind (--inner), collecting only
 * inside the wrappers, one dump per part; per case the inclusive instructions of each
 * wrapper and the counts the child printed go into @r. Returns 0, or -1 with @how saying why.
 */
static int by_callgrind(const struct opts *o, unsigned div, struct result *r, char *how, size_t cap)
{
	struct kvl_callgrind cg;
	char self[PATH_MAX], cmd[PATH_MAX + 512];
	ssize_t sl = readlink("/proc/self/exe", self, sizeof(self) - 1);
	int ok = 0;

	if (sl <= 0) {
		snprintf(how, cap, "NA (readlink /proc/self/exe: %s)", strerror(errno));
		return -1;
	}
	self[sl] = 0;
	snprintf(cmd, sizeof(cmd),
		 "%s --dev0 %s --dev1 %s --gid0 %d --gid1 %d --backend %s --inner %u", self,
		 o->dev[0], o->dev[1], o->gid[0], o->gid[1], o->backend_arg, div);
	for (unsigned i = 0; i < ARRAY_SIZE(cases); i++)
		r[i] = (struct result){ .post_ins = -1 };
	{
		const char *toggle[ARRAY_SIZE(wrapper_fn) + ARRAY_SIZE(model_fn)];
		unsigned nt = 0;

		for (unsigned i = 0; i < ARRAY_SIZE(wrapper_fn); i++)
			toggle[nt++] = wrapper_fn[i];
		for (unsigned i = 0; on_model() && i < ARRAY_SIZE(model_fn); i++)
			toggle[nt++] = model_fn[i];
		if (kvl_callgrind_run(&cg, cmd, toggle, nt, "cost_dump", inner_line, r) != 0) {
			snprintf(how, cap, "NA (%.200s)", cg.why);
			kvl_callgrind_end(&cg);
			return -1;
		}
	}
	snprintf(
		how, cap,
		"callgrind (%s), --toggle-collect on cost_post / cost_poll, 1/%u of the requests%s",
		cg.version, div,
		on_model() ? "; the software ConnectX's provider calls (fake_verbs.c) toggled off: "
			     "not counted"
			   : "");
	for (unsigned i = 0; ok == 0 && i < ARRAY_SIZE(cases); i++) {
		char f[sizeof(cg.out) + 16];
		uint64_t incl[ARRAY_SIZE(wrapper_fn)];
		int64_t total;

		kvl_callgrind_file(&cg, 2 * i + 2, f, sizeof(f));
		total = kvl_callgrind_inclusive(f, wrapper_fn, ARRAY_SIZE(wrapper_fn), incl);
		/* all that was collected must sit under the wrappers, or it is not ours */
		if (r[i].post_ins < 0 || total <= 0 ||
		    (uint64_t)total != incl[FN_POST] + incl[FN_POLL] + incl[FN_IDLE]) {
			snprintf(how, cap,
				 "NA (callgrind dump %s: total %" PRId64 ", wrappers %" PRIu64 ")",
				 f, total, incl[FN_POST] + incl[FN_POLL] + incl[FN_IDLE]);
			ok = -1;
			break;
		}
		r[i].post_ins = (int64_t)incl[FN_POST];
		r[i].poll_ins = (int64_t)incl[FN_POLL];
		r[i].idle_ins = (int64_t)incl[FN_IDLE];
		/* the stream's empty polls run the idle polls' path: charged at their cost */
		r[i].empty_ins = r[i].idle_polls ? (int64_t)((double)r[i].idle_ins *
							     (double)r[i].empty_polls /
							     (double)r[i].idle_polls)
						 : 0;
	}
	kvl_callgrind_end(&cg);
	return ok;
}

/* What two back-to-back reads of the clock (and of the counter) add to one measurement. */
static void calibrate(void)
{
	uint64_t best = UINT64_MAX;
	int64_t ibest = INT64_MAX;

	for (int i = 0; i < 1000; i++) {
		int64_t i0 = ins_now();
		uint64_t t0 = kvl_now_ns(), t1 = kvl_now_ns();
		int64_t i1 = ins_now();

		best = t1 - t0 < best ? t1 - t0 : best;
		ibest = i1 - i0 < ibest ? i1 - i0 : ibest;
	}
	clock_cost = best;
	perf_read_cost = perf_fd >= 0 ? ibest : 0;
}

static double per(double v, uint64_t n)
{
	return n ? v / (double)n : 0.0;
}

static const char *fmt_ins(char *b, size_t cap, bool have, double v)
{
	if (have)
		snprintf(b, cap, "%.0f", v);
	else
		snprintf(b, cap, "NA");
	return b;
}

static int usage(const char *self)
{
	fprintf(stderr,
		"usage: %s [--dev0 NAME] [--dev1 NAME] [--gid0 N] [--gid1 N]\n"
		"          [--backend auto|mlx5|verbs] [--callgrind] [--quick]\n"
		"  --dev0/--dev1  the two devices (default: $RXE_DEV0 / $RXE_DEV1); dev0 posts\n"
		"  --gid0/--gid1  their GID indexes (default: $RXE_GID0 / $RXE_GID1, else auto)\n"
		"  --backend      kvl_verbs_dev_opts.backend (default auto)\n"
		"  --callgrind    count instructions with callgrind even where perf events work\n"
		"  --quick        a quarter of the requests\n",
		self);
	return 2;
}

static int parse(int argc, char **argv, struct opts *o, unsigned *inner_div)
{
	const char *g0 = getenv("RXE_GID0"), *g1 = getenv("RXE_GID1");

	*o = (struct opts){ .dev = { getenv("RXE_DEV0"), getenv("RXE_DEV1") },
			    .gid = { g0 ? atoi(g0) : -1, g1 ? atoi(g1) : -1 },
			    .backend = KVL_VERBS_BACKEND_AUTO,
			    .backend_arg = "auto",
			    .div = 1 };
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;

		if (strcmp(a, "--callgrind") == 0) {
			o->force_cg = true;
			continue;
		}
		if (strcmp(a, "--quick") == 0) {
			o->div = 4;
			continue;
		}
		if (v == NULL)
			return usage(argv[0]);
		i++;
		if (strcmp(a, "--dev0") == 0 || strcmp(a, "--dev1") == 0) {
			o->dev[a[5] - '0'] = v;
		} else if (strcmp(a, "--gid0") == 0 || strcmp(a, "--gid1") == 0) {
			o->gid[a[5] - '0'] = atoi(v);
		} else if (strcmp(a, "--backend") == 0) {
			unsigned b = 0;

			while (b < ARRAY_SIZE(backend_names) && strcmp(v, backend_names[b]) != 0)
				b++;
			if (b == ARRAY_SIZE(backend_names))
				return usage(argv[0]);
			o->backend = (int)b;
			o->backend_arg = backend_names[b];
		} else if (strcmp(a, "--inner") == 0) {
			*inner_div = (unsigned)atoi(v) ?: 1;
		} else {
			return usage(argv[0]);
		}
	}
	return 0;
}

int main(int argc, char **argv)
{
	struct result nat[ARRAY_SIZE(cases)], cg[ARRAY_SIZE(cases)];
	struct opts o;
	struct pair p;
	char why[ERR_LEN + 64], how[320], backend[16], note[160];
	unsigned inner_div = 0;
	bool have_ins;
	int rc;

	setvbuf(stdout, NULL, _IOLBF, 0);
	rc = parse(argc, argv, &o, &inner_div);
	if (rc != 0)
		return rc;
	if (inner_div != 0)
		return inner(&o, inner_div);
	rc = open_pair(&p, &o, why, sizeof(why));
	if (rc != 0) {
		printf("verbs_cost: %s: %s\n", rc == 77 ? "skipped" : "failed", why);
		close_pair(&p);
		return rc;
	}
	/* after the first connection: auto may have turned from mlx5 to verbs there */
	snprintf(backend, sizeof(backend), "%s", kvl_verbs_dev_backend(p.d[0]));
	snprintf(note, sizeof(note), "%s", kvl_verbs_dev_backend_note(p.d[0]));
	perf_fd = o.force_cg ? -1 : kvl_perf_open();
	if (perf_fd >= 0 && ioctl(perf_fd, PERF_EVENT_IOC_ENABLE, 0) != 0) {
		close(perf_fd);
		perf_fd = -1;
	}
	calibrate();
	printf("verbs transport (lcores/xport/verbs_*.c) on %s -> %s: backend %s (asked: %s%s%s); "
	       "queue "
	       "%u, "
	       "signal_every %u\n",
	       p.dev[0], p.dev[1], backend, o.backend_arg, note[0] ? "; " : "", note, DEPTH,
	       SIGNAL_EVERY);
	printf("timed run: clock pair %" PRIu64 " ns, subtracted from every timed call\n",
	       clock_cost);
	for (unsigned i = 0; i < ARRAY_SIZE(cases); i++) {
		const struct bcase *k = &cases[i];
		struct result *r = &nat[i];

		if (run_case(&p, k, case_n(k, o.div), r, false) != 0) {
			close_pair(&p);
			return 1;
		}
		r->post_ns -= clock_cost * r->post_calls;
		r->poll_ns -= clock_cost * r->polls;
		r->empty_ns -= clock_cost * r->empty_polls;
		r->idle_ns -= clock_cost * r->idle_polls;
		if (perf_fd >= 0) {
			r->post_ins -= perf_read_cost * (int64_t)r->post_calls;
			r->poll_ins -= perf_read_cost * (int64_t)r->polls;
			r->empty_ins -= perf_read_cost * (int64_t)r->empty_polls;
			r->idle_ins -= perf_read_cost * (int64_t)r->idle_polls;
		}
		printf("  %-5s %5u B batch %2u: %6" PRIu64 " WQEs, %5" PRIu64
		       " doorbells, %5" PRIu64 " CQEs, %6" PRIu64 " polls (%" PRIu64 " empty)\n",
		       op_name(k->op), k->len, k->batch, r->wqes, r->doorbells, r->cqes, r->polls,
		       r->empty_polls);
	}
	close_pair(&p);

	rc = 0;
	if (perf_fd >= 0) {
		snprintf(how, sizeof(how),
			 "perf events (user-space instructions), read around each wrapper call");
		memcpy(cg, nat, sizeof(cg));
		have_ins = true;
	} else {
		printf("perf events: %s; instructions from callgrind (1/%u of the requests)\n",
		       o.force_cg ? "not asked for" : "not available here", CG_DIV * o.div);
		have_ins = by_callgrind(&o, CG_DIV * o.div, cg, how, sizeof(how)) == 0;
		/* a run that broke is a failure; no valgrind at all is said, not hidden */
		if (!have_ins && strstr(how, "valgrind not found") == NULL)
			rc = 1;
	}

	printf("\ninstructions: %s\n", how);
	printf("  user space only: the kernel side (on rxe: the doorbell's system call, the "
	       "requester and responder, CQE writing) is not counted\n");
	printf("  poll = progress + reap on polls that found CQEs; the stream's empty polls are "
	       "charged at the cost of one idle poll each and shown apart; req/CQE: requests "
	       "one CQE completed in the counted run (verbs_ring.c signals a quarter of what is in "
	       "flight, at most signal_every, and a post's last WR)\n");
	printf("ns: wall clock of the same calls in the timed run, with whatever the kernel did "
	       "on this CPU meanwhile (on rxe the post's system call moves the data); for the "
	       "record only: compare instructions\n\n");
	printf("  CQE/poll: CQEs per poll that found any; each such poll also pays what an empty "
	       "one costs, so fewer CQEs per poll means more instructions per CQE at the same "
	       "code; i/CQE+: per CQE beyond that, (busy polls - an empty poll each) / CQEs\n\n");
	printf("%-5s %6s %5s | %10s %8s | %10s %9s %8s | %9s %8s | %7s %8s %7s\n", "op", "bytes",
	       "batch", "post i/WQE", "ns/WQE", "poll i/CQE", "i/request", "ns/CQE", "empty i",
	       "empty ns", "req/CQE", "CQE/poll", "i/CQE+");
	for (unsigned i = 0; i < ARRAY_SIZE(cases); i++) {
		const struct bcase *k = &cases[i];
		const struct result *r = &nat[i], *q = &cg[i];
		double busy = (double)(q->poll_ins - q->empty_ins);
		char a[32], b[32], c[32], d[32], e[32];

		printf("%-5s %6u %5u | %10s %8.0f | %10s %9s %8.0f | %9s %8.0f | %7.1f %8.1f "
		       "%7s\n",
		       op_name(k->op), k->len, k->batch,
		       fmt_ins(a, sizeof(a), have_ins, per((double)q->post_ins, q->wqes)),
		       per((double)r->post_ns, r->wqes),
		       fmt_ins(b, sizeof(b), have_ins, per(busy, q->cqes)),
		       fmt_ins(c, sizeof(c), have_ins, per(busy, q->completed)),
		       per((double)(r->poll_ns - r->empty_ns), r->cqes),
		       fmt_ins(d, sizeof(d), have_ins, per((double)q->idle_ins, q->idle_polls)),
		       per((double)r->idle_ns, r->idle_polls), per((double)q->completed, q->cqes),
		       per((double)q->cqes, q->polls - q->empty_polls),
		       fmt_ins(e, sizeof(e), have_ins,
			       per(busy - (double)(q->polls - q->empty_polls) *
						   per((double)q->idle_ins, q->idle_polls),
				   q->cqes)));
	}
	{
		const struct result *r = &nat[CASE_SUMMARY], *q = &cg[CASE_SUMMARY];
		char a[32], b[32];

		printf("\nsummary: %s %u B in batches of %u\n", op_name(cases[CASE_SUMMARY].op),
		       cases[CASE_SUMMARY].len, cases[CASE_SUMMARY].batch);
		printf("backend=%s instr_per_wqe=%s instr_per_cqe=%s ns_per_wqe=%.0f "
		       "ns_per_cqe=%.0f\n",
		       backend, fmt_ins(a, sizeof(a), have_ins, per((double)q->post_ins, q->wqes)),
		       fmt_ins(b, sizeof(b), have_ins,
			       per((double)(q->poll_ins - q->empty_ins), q->cqes)),
		       per((double)r->post_ns, r->wqes),
		       per((double)(r->poll_ns - r->empty_ns), r->cqes));
	}
	return rc;
}
