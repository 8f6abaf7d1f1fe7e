/* SPDX-License-Identifier: BSD-3-Clause */
/* kvlane-serve-bench: a request trace served four ways (tcp, single, dual, resident), measured. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <math.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <dirent.h>
#include <jansson.h>
#include <kvlane/kvlane.h>
#include <rte_cycles.h>
#include <rte_eal.h>
#include <sys/un.h>

#include "kvl_clock.h"
#include "kvlane_serve_bench.h"
#include "kvlane_serve_trace.h"
#include "xport_tier.h" /* kvl_pace: the tcp sender paces with the tier's own token bucket */

enum mode { M_TCP, M_SINGLE, M_DUAL, M_RESIDENT, N_MODES };
static const char *const mode_name[N_MODES] = { "tcp", "single", "dual", "resident" };

static const struct sb_shape presets[] = {
	{ "llama3-8b", 32, 8, 128, 32, 16060522496ull, 8.03e9, 14336 },
	/* 70B-class KV (80 layers x 8 KV heads x 128); the weights are one GPU's share at TP 8
	 * (no --prefill real: its layers are split over 8 GPUs) */
	{ "llama3-70b", 80, 8, 128, 64, 141107412992ull / 8, 70.6e9 / 8, 0 },
	/* the write-up's 32 x 32 x 128 (MHA, 7B-class weights: Llama 2 7B's MLP) */
	{ "writeup-32x32", 32, 32, 128, 32, 13476839424ull, 6.74e9, 11008 },
	/* CI: tiny, CPU attention */
	{ "tiny", 2, 2, 64, 8, 1u << 20, 1e6, 0 },
};

struct opts {
	const char *trace, *out, *preset, *modes, *sweep, *backend, *idle;
	/* tcp's and single's KV load (--baseline-load): blocking, the decode step that takes a
	 * request in waits for all of its KV (a synchronous KV connector: the write-up's
	 * baseline, vLLM v0's disaggregated prefill receiving before the forward pass), or
	 * background, fetched while the batch decodes (an asynchronous connector). dual
	 * always prefetches: that is what the dual path adds. */
	const char *load;
	bool bg_load;
	/* the prefill: modelled (prompt tokens / --prefill-tok-s on --prefill-gpus, the KV a
	 * pattern), or real (the preset's layers computed on this GPU, one prompt at a time in
	 * arrival order, beside the decode steps: the KV they produce is what moves) */
	const char *prefill;
	bool pf_real;
	/* --prefill real on the decode GPU: decode's stream first (the default), or both at
	 * the default priority (--prefill-priority equal) */
	bool pf_equal;
	/* --prefill-peer: single's and dual's prefill side a process of its own with its own
	 * kvlane runtime, its KV in that process's VRAM (a kvl_seg_alloc_gpu segment on
	 * --prefill-device), read by this side's runtime as a peer's over the control and
	 * data paths (on one host: the ipc transport, GPU to GPU); tcp's prefill in its sender
	 * process, on --prefill-device too */
	bool pf_peer;
	int pf_device;
	struct sb_trace_opts to;
	struct sb_synth sy;
	bool synthetic;
	double link_gbps, prefill_tok_s, slo_ttft_ms;
	unsigned prefill_gpus, max_batch;
	uint64_t budget_mb, host_mb, weight_mb, window_mb, sock_buf_kb;
	unsigned tcp_bufs, fill_threads;
	uint64_t tcp_buf_kb, send_kb; /* tcp: a receive buffer's size, a send() call's */
	unsigned hybrid_idle_us, hybrid_sleep_us; /* the NIC lcore's, with --idle hybrid */
	int eal_argc;
	char **eal_argv;
	bool plot, quiet, calibrate;
};

static struct opts o = {
	.out = "serve-bench-out",
	.preset = "llama3-8b",
	.modes = "tcp,single,dual,resident",
	.backend = "auto",
	.idle = "hybrid",
	.load = "blocking",
	.prefill = "model",
	.to = { .time_scale = 1.0 },
	.sy = { .rate = 2.0, .input_median = 8192, .input_sigma = 0.8, .output = 128, .seed = 1 },
	.link_gbps = 100,
	.slo_ttft_ms = 2000,
	.prefill_gpus = 4,
	.max_batch = 32,
	.budget_mb = 65536,
	.host_mb = 16384,
	.window_mb = 8192,
	/* tcp's receive buffers: 16 of 256 KiB. On the H200 (2026-12-02) 4 of 4 MiB gave 29.3
	 * Gb/s by send() and 32.9 by recv(), 16 of 256 KiB 36.2 and 43.4: the kernel's copy
	 * into a buffer that stays in the cache is faster, at 16x the copy-engine calls */
	.tcp_bufs = 16,
	.tcp_buf_kb = 256,
	.send_kb = 1024,
	/* a serving process's NIC lcore: nap at once after work (the runtime's default spins
	 * 100 us first, which at 12 req/s is most of a core), up to 100 us a nap: the tier's
	 * copies raise no wake-up event, so a landed layer is seen within that */
	.hybrid_idle_us = 0,
	.hybrid_sleep_us = 100,
	.fill_threads = 4,
	.plot = true,
};
static struct sb_shape shape;
static const struct sb_backend *be;
static struct sb_trace tr;
static double calib_flops; /* --calibrate-prefill's GEMM rate, FLOP/s; 0: not run */

/* ---------------- one mode, in a process of its own ---------------- */

enum rstate { R_WAIT, R_LANDING, R_ACTIVE, R_STREAM, R_DONE, R_REFUSED };

struct rq {
	uint32_t id, nb; /* blocks per layer */
	uint64_t bytes, key;
	double prefill_done; /* s from the start */
	enum rstate st;
	unsigned slot;
	uint32_t *cblk; /* own cache: block index per (layer, block) */
	uint32_t *tblk; /* tier: block index in the prefill segment */
	kvl_req_t h;
	uint32_t landed, cur; /* layers landed; the first token's next layer */
	uint32_t ntok;
	double first, last, finish;
	bool delayed, ended;
	uint64_t hash;
	_Atomic int at_prefill; /* its KV sits on the prefill side (tcp, blocking: 2 = its
				 * header has come, its KV waits on the socket for want) */
	_Atomic int want;	/* tcp, blocking: admitted, the receiver may take its KV in */
	double *gaps;
	/* --prefill real: when its prefill began, its GPU seconds, and its KV's checksums
	 * (layers x nb, request order) that every landed block is checked against */
	double prefill_start, prefill_gpu_s;
	uint64_t *sums;
	/* dual, a request whose KV is larger than the whole KV cache: streamed from the tier
	 * each token, one kvlane request per token (two open: the next token's prefetched) */
	bool stream;
	kvl_req_t th[2];  /* token t's request at th[t & 1] */
	uint8_t *pend[2]; /* layers READY for that token, not yet taken in */
	uint32_t tok_open, tok_ended;
};

static struct rq *rq;
static unsigned *order; /* by prefill completion */
static double t0s;
static enum mode cur_mode;

static double now_s(void)
{
	return kvl_now_s() - t0s;
}

static void sleep_until(double t)
{
	double d = t - now_s();

	if (d > 0) {
		struct timespec ts = { (time_t)d, (long)((d - floor(d)) * 1e9) };

		nanosleep(&ts, NULL);
	}
}

/* A stack of free block indices (the decode cache's pages, the prefill segment's). */
struct pool {
	uint32_t *free, n, cap;
	pthread_mutex_t mu;
};

static int pool_init(struct pool *p, uint32_t n)
{
	p->free = malloc((size_t)n * sizeof(uint32_t));
	if (p->free == NULL)
		return -ENOMEM;
	for (uint32_t i = 0; i < n; i++)
		p->free[i] = n - 1 - i;
	p->n = p->cap = n;
	pthread_mutex_init(&p->mu, NULL);
	return 0;
}

static bool pool_take(struct pool *p, uint32_t n, uint32_t *out)
{
	bool ok;

	pthread_mutex_lock(&p->mu);
	ok = p->n >= n;
	for (uint32_t i = 0; ok && i < n; i++)
		out[i] = p->free[--p->n];
	pthread_mutex_unlock(&p->mu);
	return ok;
}

static void pool_give(struct pool *p, const uint32_t *b, uint32_t n)
{
	pthread_mutex_lock(&p->mu);
	for (uint32_t i = 0; i < n; i++)
		p->free[p->n++] = b[i];
	pthread_mutex_unlock(&p->mu);
}

#define SB_BY_BATCH 5

/* What one mode measured. */
struct res {
	uint64_t bad_bytes, checked_bytes, used_bytes, moved_bytes;
	unsigned completed, refused, delayed, twice;
	double busy_s, wall_s, peak_inuse, prefill_cpu_s;
	double link_busy_s; /* tcp: the sender's time with bytes to send */
	uint64_t link_bytes;
	uint64_t steps, batch_sum; /* decode steps, and the requests computed in them */
	/* step time by batch size (1, 2, .., SB_BY_BATCH and more): what a step costs at equal
	 * batch, mode against mode */
	double by_batch_s[SB_BY_BATCH];
	uint64_t by_batch_n[SB_BY_BATCH];
	unsigned streamed; /* requests served streaming through the window */
	/* blocking load: the times computing requests waited for another's KV, and how long */
	unsigned stalls;
	double stall_s;
	/* the decode process's CPU seconds by thread (see cpu_split()) */
	double cpu_total, cpu_loop, cpu_lcore, cpu_lcore_busy, cpu_recv, cpu_other;
	double prefill_fill_s;	 /* of the prefill side's CPU: the pattern fill */
	double link_busy_recv_s; /* tcp: the receiver's time in recv() */
	/* the decode loop's CPU seconds by phase (CLOCK_THREAD_CPUTIME_ID around each), and
	 * the steps' wall time from step_begin to step_end's return beside their GPU time */
	double ph[6];
	double step_wall_s;
};
static struct res R;

/* The decode loop's phases, as loop_phase_s in results.json and "loop" lines. */
enum { PH_ADMIT, PH_POLL, PH_LAUNCH, PH_SYNC, PH_AFTER, PH_IDLE, N_PH };
static const char *const ph_name[N_PH] = { "admit", "poll", "launch", "sync", "after", "idle" };
static double probe_s; /* the backend's weights-only step */
static struct pool cpool, tpool;
static uint32_t bb; /* block bytes */
static uint8_t *tier_base;
static uint32_t tier_seg;
static struct kvl_runtime *rt;
static FILE *vram_log;
static uint64_t staging_mb; /* kvlane's window: --window-mb, or the largest request (single) */
/* blocks of the requests over the KV cache that can stream at once, bounded (admission
 * bounds them by --max-batch slots, not by cache room) */
static uint64_t stream_blocks;

static uint64_t req_key(uint32_t id)
{
	uint64_t x = (o.sy.seed + 1) * 0xD6E8FEB86659FD93ull ^ ((uint64_t)id << 20);

	x ^= x >> 32;
	return x * 0x9E3779B97F4A7C15ull;
}

static uint64_t kv_off(const struct rq *r, uint32_t l, uint32_t b)
{
	return ((uint64_t)l * r->nb + b) * bb;
}

/* A real prefill's end before it has ended (finite: results.json prints it). */
#define PF_PENDING 1e9

/* The prefill model: --prefill-gpus prompts at once, input / prefill_tok_s each. */
static void prefill_schedule(void)
{
	double *busy = calloc(o.prefill_gpus, sizeof(double));

	/* real: one prefill at a time in arrival order; its end is known when it is over */
	for (unsigned i = 0; o.pf_real && i < tr.n; i++)
		rq[i].prefill_done = PF_PENDING;
	for (unsigned i = 0; !o.pf_real && i < tr.n; i++) {
		unsigned g = 0;
		double start;

		for (unsigned k = 1; k < o.prefill_gpus; k++)
			if (busy[k] < busy[g])
				g = k;
		start = fmax(tr.r[i].arrival_ms / 1000.0, busy[g]);
		busy[g] = start + tr.r[i].input / o.prefill_tok_s;
		rq[i].prefill_done = busy[g];
	}
	free(busy);
	order = malloc(tr.n * sizeof(*order));
	for (unsigned i = 0; i < tr.n; i++)
		order[i] = i;
	for (unsigned i = 1; i < tr.n; i++) /* insertion sort: stable, n is small */
		for (unsigned j = i;
		     j > 0 && rq[order[j]].prefill_done < rq[order[j - 1]].prefill_done; j--) {
			unsigned x = order[j];

			order[j] = order[j - 1];
			order[j - 1] = x;
		}
}

/* --prefill real: what the prefill did (the prefill thread's, or the prefill process's as it
 * reported it; the thread's CPU is the prefill side's) */
static double pf_gpu_s, pf_thread_cpu, pf_flops;
static uint64_t pf_tokens;
static unsigned pf_count;

static void *real_prefiller(void *arg);

/* --prefill real in this process, on the decode GPU: always for resident, and for the others
 * unless --prefill-peer gives their prefill side a process (and a GPU) of its own */
static bool pf_here(enum mode m)
{
	return o.pf_real && !(o.pf_peer && m != M_RESIDENT);
}

/* --prefill real in a prefill process (tcp's sender, or single's/dual's kvlane peer) */
static bool pf_away(enum mode m)
{
	return o.pf_real && !pf_here(m);
}

/* One prompt's prefill as the prefill process tells it: over the socket pair (--prefill-peer,
 * single/dual) or in the tcp ring's flags. */
struct pfp_msg {
	uint32_t id, n; /* n = 0: refused (larger than the whole store) */
	double start, done, gpu_s, flops;
};

/* A prefill done (@r's times set), counted in the run's totals. */
static void pf_tally(const struct rq *r, double flops)
{
	pf_gpu_s += r->prefill_gpu_s;
	pf_flops += flops;
	pf_tokens += tr.r[r->id].input;
	pf_count++;
}

/* A prefill the prefill process did: its times into its request, counted. */
static void pf_took(const struct pfp_msg *m)
{
	struct rq *r = &rq[m->id];

	r->prefill_start = m->start;
	r->prefill_gpu_s = m->gpu_s;
	r->prefill_done = m->done;
	pf_tally(r, m->flops);
}

/* ---- tcp: the prefill process and its socket ---- */

struct hdr {
	uint32_t magic, id;
	uint64_t bytes;
};
#define HDR_MAGIC 0x4b565342u /* "KVSB" */

static int send_all(int fd, const void *p, size_t n)
{
	const uint8_t *b = p;

	while (n) {
		ssize_t k = send(fd, b, n, MSG_NOSIGNAL);

		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			return -1;
		b += k;
		n -= (size_t)k;
	}
	return 0;
}

static int recv_all(int fd, void *p, size_t n)
{
	uint8_t *b = p;

	while (n) {
		ssize_t k = recv(fd, b, n, 0);

		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			return -1;
		b += k;
		n -= (size_t)k;
	}
	return 0;
}

/* The prefill side's send ring: its KV leaves through a few reused host chunks (the
 * bounce buffers a prefill GPU's KV goes through on its way to a socket), which a fill thread
 * writes the pattern into in request order, ahead of the sender by the ring's depth (filling
 * them is the model's work, not the link's: its CPU is reported apart). */
#define SCHUNK (4u << 20)
#define SRING  8
static struct {
	uint8_t *buf;
	_Atomic int full;
} sring[SRING];
static double fill_thread_cpu; /* the pattern fill's CPU seconds, either side's */

static double thread_cpu_s(void)
{
	struct timespec c;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c);
	return c.tv_sec + c.tv_nsec / 1e9;
}

/* Fill thread @arg of n_sfill: the chunks c with c % n_sfill == @arg. n_sfill divides SRING,
 * so each ring slot is always filled by the same thread, in order. */
static unsigned n_sfill;
static pthread_mutex_t fill_mu = PTHREAD_MUTEX_INITIALIZER;

static void *prefill_fill(void *arg)
{
	unsigned c = 0, me = (unsigned)(uintptr_t)arg;

	pthread_setname_np(pthread_self(), "sb-fill");
	for (unsigned k = 0; k < tr.n; k++) {
		struct rq *r = &rq[order[k]];

		for (uint64_t off = 0; off < r->bytes; off += SCHUNK, c++) {
			uint64_t n = r->bytes - off < SCHUNK ? r->bytes - off : SCHUNK;
			uint64_t *w = (uint64_t *)sring[c % SRING].buf;

			if (c % n_sfill != me)
				continue;
			while (atomic_load_explicit(&sring[c % SRING].full, memory_order_acquire))
				nanosleep(&(struct timespec){ 0, 20000 }, NULL);
			for (uint64_t i = 0; i < n / 8; i++)
				w[i] = sb_pat_word(r->key, off / 8 + i);
			atomic_store_explicit(&sring[c % SRING].full, 1, memory_order_release);
		}
	}
	pthread_mutex_lock(&fill_mu);
	fill_thread_cpu += thread_cpu_s();
	pthread_mutex_unlock(&fill_mu);
	return NULL;
}

/* Socket buffers of --sock-buf-kb at both ends (0: the kernel's autotuning, as iperf3
 * without -w); FORCE first, which passes net.core.[rw]mem_max where the process may. */
static void sock_bufs(int fd)
{
	int v = (int)(o.sock_buf_kb << 10);

	if (o.sock_buf_kb == 0)
		return;
	if (setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &v, sizeof(v)) < 0)
		setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &v, sizeof(v));
	if (setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &v, sizeof(v)) < 0)
		setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &v, sizeof(v));
}

/*
 * --prefill real, tcp: the prefill's output in host memory shared with the prefill process
 * (mapped before the fork, registered with CUDA after it): a ring of whole requests, which the
 * prefill thread writes each request's KV into and marks ready; the prefill process sends it
 * and gives its room back. The prefill thread is this process's, on its GPU, or with
 * --prefill-peer the prefill process's own, on --prefill-device: then its times come back
 * here through the ring's flags and its checksums through pf_sums (shared too).
 */
struct pf_shared {
	_Atomic uint64_t freed; /* bytes given back by the sender, ring padding included */
	struct {
		_Atomic int ready;
		uint64_t off, span;
		struct pfp_msg m; /* --prefill-peer: the prefill process's times */
	} req[];
};
static struct pf_shared *pf_sh;
static uint8_t *pf_arena;
static uint64_t *pf_sums; /* every request's checksums, shared (rq[].sums point into it) */
static uint64_t pf_arena_len, pf_head; /* pf_head: bytes taken so far, padding included */

/* Room for @bytes contiguous in the ring, waited for: its offset, and the bytes it takes from
 * the ring in *@span (the unused end before a wrap counted too). */
static uint64_t arena_take(uint64_t bytes, uint64_t *span)
{
	uint64_t at = pf_head % pf_arena_len,
		 pad = at + bytes > pf_arena_len ? pf_arena_len - at : 0;

	*span = pad + bytes;
	while (pf_head + *span - atomic_load_explicit(&pf_sh->freed, memory_order_acquire) >
	       pf_arena_len)
		nanosleep(&(struct timespec){ 0, 500000 }, NULL);
	pf_head += *span;
	return pad ? 0 : at;
}

/* The prefill process: each prompt's KV, once its prefill is over, sent over the kernel
 * socket at the link rate from the send ring (--prefill real: from the shared ring the
 * prefill's GPU wrote it into); the acks (control, same connection) read last. */
static int prefill_process(int fd, int stats_fd)
{
	struct kvl_pace pace;
	uint64_t sent = 0, busy_ns = 0;
	unsigned c = 0;
	pthread_t th[SRING], pth;

	/* t0s is the worker's, inherited by fork: both sides read one monotonic clock */
	for (unsigned i = 0; !o.pf_real && i < SRING; i++) {
		sring[i].buf = malloc(SCHUNK);
		if (sring[i].buf == NULL)
			return 1;
		memset(sring[i].buf, 0, SCHUNK);
	}
	for (n_sfill = 1; n_sfill * 2 <= o.fill_threads && n_sfill * 2 <= SRING;)
		n_sfill *= 2;
	if (o.pf_real)
		n_sfill = 0; /* the KV comes from the GPU's prefill */
	for (unsigned i = 0; i < n_sfill; i++)
		pthread_create(&th[i], NULL, prefill_fill, (void *)(uintptr_t)i);
	if (pf_away(M_TCP)) /* this process's GPU computes the KV it sends */
		pthread_create(&pth, NULL, real_prefiller, NULL);
	if (o.link_gbps > 0)
		kvl_pace_init(&pace, (uint64_t)(o.link_gbps * 125e6), 8u << 20, kvl_now_ns());
	for (unsigned k = 0; k < tr.n; k++) {
		struct rq *r = &rq[order[k]];
		struct hdr h = { HDR_MAGIC, r->id, r->bytes };
		uint64_t a;

		if (o.pf_real)
			while (!atomic_load_explicit(&pf_sh->req[r->id].ready,
						     memory_order_acquire))
				nanosleep(&(struct timespec){ 0, 20000 }, NULL);
		else
			sleep_until(r->prefill_done);
		a = kvl_now_ns();
		if (send_all(fd, &h, sizeof(h)) < 0)
			return 1;
		busy_ns += kvl_now_ns() - a;
		for (uint64_t off = 0; off < r->bytes; off += SCHUNK, c++) {
			uint64_t len = r->bytes - off < SCHUNK ? r->bytes - off : SCHUNK;
			const uint8_t *buf = o.pf_real ? pf_arena + pf_sh->req[r->id].off + off
						       : sring[c % SRING].buf;

			while (!o.pf_real &&
			       !atomic_load_explicit(&sring[c % SRING].full, memory_order_acquire))
				nanosleep(&(struct timespec){ 0, 20000 }, NULL);
			for (uint64_t o2 = 0; o2 < len; o2 += o.send_kb << 10) {
				uint32_t n = len - o2 < o.send_kb << 10
						     ? (uint32_t)(len - o2)
						     : (uint32_t)(o.send_kb << 10);

				if (o.link_gbps > 0)
					while (!kvl_pace_take(&pace, n, kvl_now_ns())) {
						uint64_t w = kvl_pace_wait_ns(&pace, kvl_now_ns());
						struct timespec ts = {
							0, (long)(w < 1000000 ? w : 1000000)
						};

						nanosleep(&ts, NULL);
					}
				a = kvl_now_ns(); /* the socket's time only, not the pacing */
				if (send_all(fd, buf + o2, n) < 0)
					return 1;
				busy_ns += kvl_now_ns() - a;
			}
			if (!o.pf_real)
				atomic_store_explicit(&sring[c % SRING].full, 0,
						      memory_order_release);
		}
		if (o.pf_real) /* sent: its room in the ring goes back to the prefill */
			atomic_fetch_add_explicit(&pf_sh->freed, pf_sh->req[r->id].span,
						  memory_order_release);
		sent += r->bytes;
	}
	for (unsigned i = 0; i < n_sfill; i++)
		pthread_join(th[i], NULL);
	if (pf_away(M_TCP))
		pthread_join(pth, NULL);
	for (unsigned k = 0; k < tr.n; k++) {
		uint32_t ack;

		if (recv_all(fd, &ack, sizeof(ack)) < 0)
			return 1;
	}
	dprintf(stats_fd, "%llu %llu %.6f\n", (unsigned long long)sent, (unsigned long long)busy_ns,
		fill_thread_cpu + pf_thread_cpu);
	return 0;
}

/* The receiver's buffers: --tcp-bufs chunks of --tcp-buf-kb (RCHUNK) of pinned host memory (the
 * backend's host_alloc), reused in turn: the socket is read into one while the copy engine
 * empties the others into the KV cache, so no CPU copies the bytes a second time. */
#define RCHUNK	 ((uint32_t)(o.tcp_buf_kb << 10))
#define MAX_RBUF 16
static uint8_t *rbuf[MAX_RBUF];
static unsigned n_rbuf;
static double recv_busy_s, recv_thread_cpu;

static int rbuf_init(void)
{
	n_rbuf = o.tcp_bufs < 2 ? 2 : o.tcp_bufs > MAX_RBUF ? MAX_RBUF : o.tcp_bufs;
	for (unsigned i = 0; i < n_rbuf; i++) {
		rbuf[i] = be->host_alloc(RCHUNK);
		if (rbuf[i] == NULL)
			return -ENOMEM;
	}
	return 0;
}

static void rbuf_fini(void)
{
	for (unsigned i = 0; i < n_rbuf; i++)
		be->host_free(rbuf[i]);
}

/* A received chunk (whole blocks of @r from request offset @off) into its cache blocks, a run
 * of adjacent blocks per copy, queued behind buffer @i. */
static void chunk_upload(struct rq *r, uint64_t off, uint64_t len, unsigned i)
{
	uint32_t k0 = (uint32_t)(off / bb), k1 = (uint32_t)((off + len) / bb);

	for (uint32_t k = k0, e; k < k1; k = e) {
		for (e = k + 1; e < k1 && r->cblk[e] == r->cblk[e - 1] + 1; e++)
			;
		be->upload_async(be->cache() + (uint64_t)r->cblk[k] * bb,
				 rbuf[i] + (uint64_t)(k - k0) * bb, (uint64_t)(e - k) * bb, i);
	}
}

/* The decode side's receiver: each request's KV from the socket into the pinned buffers and
 * on into its KV cache blocks (taken first: with the cache full the socket waits, and so does
 * the sender), then an ack (control, same connection). The request computes only once all of
 * it is in VRAM: fetch-all. In the background load that starts as its header comes; in the
 * blocking load once the decode loop has admitted it (want), while the batch waits: the
 * next request's header waits behind this one's KV (control mixed with data). */
static void *receiver(void *arg)
{
	int fd = (int)(intptr_t)arg;
	unsigned c = 0;

	pthread_setname_np(pthread_self(), "sb-recv");
	for (unsigned k = 0; k < tr.n; k++) {
		struct hdr h;
		struct rq *r;
		bool keep;

		if (recv_all(fd, &h, sizeof(h)) < 0 || h.magic != HDR_MAGIC || h.id >= tr.n ||
		    rq[h.id].bytes != h.bytes) {
			fprintf(stderr,
				"serve-bench: tcp: a bad header from the prefill process\n");
			exit(1);
		}
		r = &rq[h.id];
		if (pf_away(M_TCP))
			pf_took(&pf_sh->req[h.id].m);
		keep = shape.layers * r->nb <= cpool.cap;
		if (keep && !o.bg_load) { /* blocking: the KV stays on the socket until asked, */
			atomic_store(&r->at_prefill, 2);
			while (!atomic_load(&r->want)) /* its cache blocks taken by admission */
				nanosleep(&(struct timespec){ 0, 20000 }, NULL);
		}
		while (keep && o.bg_load && !pool_take(&cpool, shape.layers * r->nb, r->cblk)) {
			r->delayed = true;
			nanosleep(&(struct timespec){ 0, 200000 }, NULL);
		}
		for (uint64_t off = 0; off < h.bytes; off += RCHUNK, c++) {
			uint64_t len = h.bytes - off < RCHUNK ? h.bytes - off : RCHUNK;
			unsigned i = c % n_rbuf;
			uint64_t a;

			be->upload_wait(i); /* its last copy has left it */
			a = kvl_now_ns();
			if (recv_all(fd, rbuf[i], len) < 0) {
				fprintf(stderr, "serve-bench: tcp: receive of request %u failed\n",
					h.id);
				exit(1);
			}
			recv_busy_s += (kvl_now_ns() - a) / 1e9;
			if (keep) /* larger than the whole cache: read off the socket, refused */
				chunk_upload(r, off, len, i);
		}
		for (unsigned i = 0; i < n_rbuf; i++)
			be->upload_wait(i);
		R.moved_bytes += h.bytes;
		if (send_all(fd, &h.id, sizeof(h.id)) < 0)
			exit(1);
		atomic_store(&r->at_prefill, keep ? 1 : -1);
	}
	recv_thread_cpu = thread_cpu_s();
	return NULL;
}

/* ---- single / dual: the prefill side fills this process's host tier ---- */

static double prefill_thread_cpu;

/* Layers [l0, l1) of one request's KV written into its tier blocks (one fill thread's part). */
struct fill_part {
	struct rq *r;
	uint32_t l0, l1;
	double cpu; /* the helper thread's CPU seconds */
};

static void *fill_layers(void *arg)
{
	struct fill_part *f = arg;

	if (f->cpu < 0)
		pthread_setname_np(pthread_self(), "sb-fill");
	for (uint32_t l = f->l0; l < f->l1; l++)
		for (uint32_t b = 0; b < f->r->nb; b++)
			kvl_sb_cpu.fill(tier_base + (uint64_t)f->r->tblk[l * f->r->nb + b] * bb, bb,
					f->r->key, kv_off(f->r, l, b));
	if (f->cpu < 0)
		f->cpu = thread_cpu_s();
	return NULL;
}

/* The prefill side: each request's KV pattern-filled into the tier, in prefill order, as the
 * tier has room; --fill-threads share each request's layers, so that the fill (the prefill's
 * output, the model's work) keeps ahead of what the link carries (one thread fills ~7 GB/s,
 * less than a 100 Gb/s link's worth at high load) and bounds no mode. */
static void *tier_filler(void *arg)
{
	double helpers = 0;

	(void)arg;
	pthread_setname_np(pthread_self(), "sb-fill");
	for (unsigned k = 0; k < tr.n; k++) {
		struct rq *r = &rq[order[k]];
		uint32_t n = shape.layers * r->nb;

		/* filled ahead as the tier has room: admission also waits for prefill_done */
		if (n > tpool.cap) {
			atomic_store(&r->at_prefill, -1); /* larger than the whole tier */
			continue;
		}
		while (!pool_take(&tpool, n, r->tblk)) {
			struct timespec ts = { 0, 500000 };

			nanosleep(&ts, NULL);
		}
		{
			unsigned t = o.fill_threads < shape.layers ? o.fill_threads : shape.layers;
			struct fill_part part[16];
			pthread_t th[16];

			for (unsigned i = 0; i < t; i++)
				part[i] = (struct fill_part){ r, shape.layers * i / t,
							      shape.layers * (i + 1) / t,
							      i ? -1 : 0 };
			for (unsigned i = 1; i < t; i++)
				pthread_create(&th[i], NULL, fill_layers, &part[i]);
			fill_layers(&part[0]);
			for (unsigned i = 1; i < t; i++) {
				pthread_join(th[i], NULL);
				helpers += part[i].cpu;
			}
		}
		atomic_store(&r->at_prefill, 1);
	}
	prefill_thread_cpu = thread_cpu_s() + helpers;
	return NULL;
}

static const char *tel_query(const char *cmd);

/*
 * ---- --prefill-peer: single's and dual's prefill side a process of its own ----
 * Forked before any CUDA, it starts its own kvlane runtime (EAL file prefix "<decode's>-pf",
 * [control] listening on loopback with the run's secret), allocates the prefill side's KV
 * store in VRAM of --prefill-device (kvl_seg_alloc_gpu "prefill-kv", --host-mb of it) and runs
 * the real prefill there, each prompt at its arrival in arrival order, its KV written into
 * blocks of that segment. It tells this process over a socket pair: first where it listens,
 * then per prompt its blocks, times and checksums. This process connects to it as a peer
 * (kvl_connect: on one host the runtime reads it over the ipc transport, GPU to GPU) and PULLs
 * from its segment as single/dual PULL from the local tier; a request's DONE sends its id back,
 * and the prefill process gives its blocks back to its pool.
 */
struct pfp_hello {
	int ok;
	char addr[80];
	char err[600];
};
static int pfp_up[2] = { -1, -1 }, pfp_down[2] = { -1, -1 }; /* child -> parent, back */
static pid_t pfp_child = -1;
static kvl_peer_t pfp_peer;
static uint32_t pfp_rseg;
static pthread_t pfp_th;
static char pfp_secret[600];

static void pfp_free(uint32_t id)
{
	if (send_all(pfp_down[1], &id, sizeof(id)) < 0) {
		fprintf(stderr, "serve-bench: the prefill process is gone\n");
		exit(1);
	}
}

/* The prefill process's thread that gives the DONE requests' blocks back, until EOF. */
static void *pfp_freer(void *arg)
{
	uint32_t id;

	(void)arg;
	while (recv_all(pfp_down[0], &id, sizeof(id)) == 0)
		if (id < tr.n)
			pool_give(&tpool, rq[id].tblk, shape.layers * rq[id].nb);
	return NULL;
}

/* The run's shared secret for the control path (written once, 0600). */
static int pfp_secret_file(void)
{
	FILE *f;

	snprintf(pfp_secret, sizeof(pfp_secret), "%s/prefill-peer.secret", o.out);
	f = fopen(pfp_secret, "w");
	if (f == NULL)
		return -1;
	fprintf(f, "kvlane-serve-bench --prefill-peer: loopback only, made by the bench %d\n",
		(int)getpid());
	return fclose(f) || chmod(pfp_secret, 0600) ? -1 : 0;
}

/* The prefill process: never returns to the bench's code. */
static int pfp_process(void)
{
	static char *argv[64];
	char ini[500], pfx[256] = "";
	struct pfp_hello hi = { 0 };
	struct kvl_start_args a = { 0 };
	struct kvl_runtime *prt = NULL;
	struct kvl_seg_geom g = { 1, 1, (uint32_t)((o.host_mb << 20) / bb), bb };
	struct kvl_segment seg;
	pthread_t fr;
	int argc = 0, stage = 0, rc;
	FILE *f;

	close(pfp_up[0]);
	close(pfp_down[1]);
	/* decode's EAL arguments with a file prefix of its own */
	for (int i = 0; i < o.eal_argc && argc < 60; i++) {
		if (!strcmp(o.eal_argv[i], "--file-prefix") && i + 1 < o.eal_argc) {
			snprintf(pfx, sizeof(pfx), "%s-pf", o.eal_argv[++i]);
			continue;
		}
		argv[argc++] = o.eal_argv[i];
	}
	if (!pfx[0])
		snprintf(pfx, sizeof(pfx), "sbpf%d", (int)getpid());
	argv[argc++] = "--file-prefix";
	argv[argc++] = pfx;
	snprintf(ini, sizeof(ini), "%s/%s-prefill.ini", o.out, mode_name[cur_mode]);
	f = fopen(ini, "w");
	if (f == NULL) {
		snprintf(hi.err, sizeof(hi.err), "%.400s: %s", ini, strerror(errno));
		goto out;
	}
	fprintf(f,
		"[runtime]\nname = serve-bench-prefill\nidle_policy = yield\n[nic.lo]\ndevice = "
		"lo\ntransport = tcp\n[gpu]\nenable = true\ndevice_id = %d\nvram_reserve_mb = "
		"512\n[control]\nlisten = 127.0.0.1:0\nsecret_file = %s\n",
		o.pf_device, pfp_secret);
	fclose(f);
	a = (struct kvl_start_args){ .eal_argc = argc, .eal_argv = argv, .config = ini };
	prt = kvl_start(&a, hi.err, sizeof(hi.err), &stage);
	if (prt == NULL)
		goto out;
	rc = kvl_seg_alloc_gpu(prt, "prefill-kv", &g, KVL_REMOTE_READ, o.pf_device, &seg);
	if (rc < 0) {
		snprintf(hi.err, sizeof(hi.err),
			 "the prefill side's KV store (--host-mb %llu) in VRAM of GPU %d: %s %s",
			 (unsigned long long)o.host_mb, o.pf_device, strerror(-rc),
			 kvl_seg_error());
		goto out;
	}
#ifdef KVL_SB_GPU
	{
		uint32_t max_nb = 0;

		for (unsigned i = 0; i < tr.n; i++)
			if (rq[i].nb > max_nb)
				max_nb = rq[i].nb;
		if (kvl_sb_gpu_use_device(o.pf_device, hi.err, sizeof(hi.err)) < 0 ||
		    kvl_sb_gpu_pf_init(&shape, max_nb * SB_BLOCK_TOKENS, o.sy.seed, false, hi.err,
				       sizeof(hi.err)) < 0)
			goto out;
	}
#endif
	if (pool_init(&tpool, g.blocks) < 0) {
		snprintf(hi.err, sizeof(hi.err), "out of memory");
		goto out;
	}
	hi.ok = 1;
	snprintf(hi.addr, sizeof(hi.addr), "%s", kvl_listen_addr(prt));
out:
	if (send_all(pfp_up[1], &hi, sizeof(hi)) < 0 || !hi.ok)
		return 1;
	/* the trace's time 0 once the decode side is set up (and connected) */
	if (recv_all(pfp_down[0], &t0s, sizeof(t0s)) < 0)
		return 1;
	pthread_create(&fr, NULL, pfp_freer, NULL);
	tier_base = seg.base; /* real_prefiller's single/dual store: this segment's blocks */
	real_prefiller(NULL);
	pthread_join(fr, NULL); /* the decode side has closed its end: the run is over */
#ifdef KVL_SB_GPU
	kvl_sb_gpu_pf_fini();
#endif
	kvl_stop(prt);
	return 0;
}

/* This side: each prompt's blocks, times and checksums as the prefill process sends them. */
static void *pfp_receiver(void *arg)
{
	(void)arg;
	pthread_setname_np(pthread_self(), "sb-pfp-recv");
	for (unsigned k = 0; k < tr.n; k++) {
		struct pfp_msg m;
		struct rq *r;

		if (recv_all(pfp_up[0], &m, sizeof(m)) < 0 || m.id >= tr.n ||
		    (m.n && m.n != shape.layers * rq[m.id].nb)) {
			fprintf(stderr, "serve-bench: the prefill process is gone or sent a bad "
					"message\n");
			exit(1);
		}
		r = &rq[m.id];
		if (m.n && (recv_all(pfp_up[0], r->tblk, (size_t)m.n * 4) < 0 ||
			    recv_all(pfp_up[0], r->sums, (size_t)m.n * 8) < 0)) {
			fprintf(stderr, "serve-bench: the prefill process is gone\n");
			exit(1);
		}
		if (m.n == 0) {
			r->prefill_done = now_s();
			atomic_store(&r->at_prefill, -1);
			continue;
		}
		pf_took(&m);
		atomic_store(&r->at_prefill, 1);
	}
	return NULL;
}

/* Fork the prefill process (before this process touches CUDA). */
static int pfp_fork(void)
{
	if (pfp_secret_file() < 0 || socketpair(AF_UNIX, SOCK_STREAM, 0, pfp_up) < 0 ||
	    socketpair(AF_UNIX, SOCK_STREAM, 0, pfp_down) < 0) {
		fprintf(stderr, "serve-bench: --prefill-peer: %s\n", strerror(errno));
		return -1;
	}
	fflush(NULL);
	pfp_child = fork();
	if (pfp_child == 0)
		_exit(pfp_process());
	close(pfp_up[1]);
	close(pfp_down[0]);
	return pfp_child < 0 ? -1 : 0;
}

/* Connect to the prefill process once it is set up and find its segment. */
static int pfp_connect(char *err, size_t errlen)
{
	struct pfp_hello hi;
	struct kvl_remote_seg rs[16];
	int n;

	if (recv_all(pfp_up[0], &hi, sizeof(hi)) < 0) {
		snprintf(err, errlen, "the prefill process exited while setting up");
		return -1;
	}
	if (!hi.ok) {
		snprintf(err, errlen, "the prefill process: %s", hi.err);
		return -1;
	}
	if (kvl_connect(rt, hi.addr, 20000, &pfp_peer, err, errlen) < 0)
		return -1;
	n = kvl_peer_segments(rt, pfp_peer, rs, 16);
	for (int i = 0; i < n; i++)
		if (!strcmp(rs[i].name, "prefill-kv"))
			pfp_rseg = rs[i].id;
	if (pfp_rseg == 0) {
		snprintf(err, errlen, "the prefill process at %s offers no prefill-kv segment",
			 hi.addr);
		return -1;
	}
	{ /* which transport the runtime reads it with (/kvlane/peers) */
		const char *rep = tel_query("/kvlane/peers");
		const char *t = rep ? strstr(rep, "\"transport_ipc\"") : NULL;

		printf("  %s: the prefill process at %s (GPU %d): /kvlane/peers %.60s\n",
		       mode_name[cur_mode], hi.addr, o.pf_device, t ? t : "(no transport_ipc)");
	}
	return 0;
}

/* @r's KV from the tier as one kvlane request: single, one step of every block; dual, a step
 * per layer. A streamed request opens one per token (@tok >= 0), its events' user carrying
 * the token (user = id | (tok + 1) << 32). */
static int open_tier(struct rq *r, int tok, kvl_req_t *hp)
{
	uint32_t n = shape.layers * r->nb, steps = cur_mode == M_DUAL ? shape.layers : 1;
	struct kvl_req_block *b = calloc(n, sizeof(*b));
	uint32_t *first = calloc(steps + 1, sizeof(uint32_t)), *sb = calloc(n, sizeof(uint32_t));
	struct kvl_req_desc d = { 0 };
	int rc;

	for (uint32_t k = 0; k < n; k++) {
		b[k] = (struct kvl_req_block){ .remote_off = (uint64_t)r->tblk[k] * bb,
					       .remote_seg = o.pf_peer ? pfp_rseg : tier_seg,
					       .length = bb };
		sb[k] = k;
	}
	for (uint32_t s = 0; s <= steps; s++)
		first[s] = s * (n / steps);
	d.blocks = b;
	d.n_blocks = n;
	d.n_steps = steps;
	d.step_first = first;
	d.step_blocks = sb;
	d.user = r->id | (tok >= 0 ? (uint64_t)(tok + 1) << 32 : 0);
	if (cur_mode == M_DUAL) { /* decode before prefill traffic, deadline from the SLO */
		d.cls = KVL_REQ_DECODE;
		d.deadline_us =
			(uint64_t)(fmax(0, o.slo_ttft_ms / 1000.0 -
						   (now_s() - tr.r[r->id].arrival_ms / 1000.0)) *
				   1e6) +
			1;
	} else {
		d.cls = KVL_REQ_PREFILL;
	}
	rc = kvl_req_open(rt, o.pf_peer ? pfp_peer : KVL_PEER_LOCAL_TIER, &d, hp);
	if (rc < 0 && !(rc == -ENOSPC && tok >= 0)) /* a streamed token retries (stream_next) */
		fprintf(stderr, "serve-bench: kvl_req_open(request %u, %u blocks): %s %s\n", r->id,
			n, strerror(-rc), kvl_req_error());
	free(b);
	free(first);
	free(sb);
	return rc;
}

/* A scratch array of @n entries of @size bytes, kept in *@buf and grown as needed (the
 * block lists of one layer, reused by the next call). */
static void *scratch(void **buf, uint32_t *cap, uint32_t n, size_t size)
{
	if (*cap < n) {
		free(*buf);
		*buf = malloc(n * size);
		if (*buf == NULL) {
			fprintf(stderr, "serve-bench: out of memory\n");
			exit(1);
		}
		*cap = n;
	}
	return *buf;
}

/*
 * A prompt's prefill is over (@n blocks; 0: refused, larger than the whole store): told to who
 * reads the prefill side: this process's decode loop (the tier's or the cache's blocks), the
 * tcp sender (the ring's ready flag, @off and @span there), or, in the --prefill-peer
 * process, the decode process (its blocks, times and checksums over the socket pair).
 */
static void pf_publish(struct rq *r, uint32_t n, uint64_t off, uint64_t span, double flops)
{
	struct pfp_msg m = { r->id, n, r->prefill_start, r->prefill_done, r->prefill_gpu_s, flops };

	if (pfp_child == 0) { /* the prefill process */
		if (send_all(pfp_up[1], &m, sizeof(m)) < 0 ||
		    (n && (send_all(pfp_up[1], r->tblk, (size_t)n * 4) < 0 ||
			   send_all(pfp_up[1], r->sums, (size_t)n * 8) < 0))) {
			fprintf(stderr,
				"serve-bench: the prefill process: the decode side is gone\n");
			exit(1);
		}
	} else if (n == 0) {
		atomic_store(&r->at_prefill, -1);
	} else if (cur_mode == M_TCP) {
		pf_sh->req[r->id].off = off;
		pf_sh->req[r->id].span = span;
		pf_sh->req[r->id].m = m;
		atomic_store_explicit(&pf_sh->req[r->id].ready, 1, memory_order_release);
	} else {
		atomic_store(&r->at_prefill, 1);
	}
}

/*
 * --prefill real: each prompt, at its arrival and in arrival order, through the preset's layers
 * on this process's GPU (a stream of its own beside the decode steps), its KV written where
 * the mode's prefill side keeps it: the host tier's blocks (single, dual), the shared ring the
 * tcp sender reads (tcp), the decode side's own cache blocks (resident: prefill and decode on
 * one GPU, nothing moved); in the --prefill-peer process, its VRAM segment's blocks (tier_base
 * is that segment there). It waits for that room as the pattern fill did; pf_publish tells the
 * reader. The KV's checksums, block by block, are what the decode side checks the landed
 * bytes against.
 */
static void *real_prefiller(void *arg)
{
	static void *dbuf;
	static uint32_t dcap;
	char why[512];

	(void)arg;
	pthread_setname_np(pthread_self(), "sb-prefill");
	for (unsigned k = 0; k < tr.n; k++) {
		struct rq *r = &rq[order[k]];
		uint32_t n = shape.layers * r->nb;
		void **d = scratch(&dbuf, &dcap, n, sizeof(void *));
		uint64_t off = 0, span = 0;
		double flops = 0;
		bool tier = cur_mode == M_SINGLE || cur_mode == M_DUAL;
		struct pool *room = tier ? &tpool : &cpool;
		uint32_t *blk = tier ? r->tblk : r->cblk;

		sleep_until(tr.r[r->id].arrival_ms / 1e3);
		if (cur_mode != M_TCP && n > room->cap) { /* larger than the whole tier or cache */
			r->prefill_done = now_s();
			pf_publish(r, 0, 0, 0, 0);
			continue;
		}
		if (cur_mode == M_TCP) {
			off = arena_take(r->bytes, &span);
			for (uint32_t b = 0; b < n; b++)
				d[b] = pf_arena + off + (uint64_t)b * bb;
		} else {
			while (!pool_take(room, n, blk))
				nanosleep(&(struct timespec){ 0, 500000 }, NULL);
			for (uint32_t b = 0; b < n; b++)
				d[b] = (tier ? tier_base : be->cache()) + (uint64_t)blk[b] * bb;
		}
		r->prefill_start = now_s();
#ifdef KVL_SB_GPU
		if (kvl_sb_gpu_pf_run(r->key, tr.r[r->id].input, d, n, bb, r->sums,
				      &r->prefill_gpu_s, why, sizeof(why)) < 0) {
			fprintf(stderr, "serve-bench: %s: request %u: %s\n", mode_name[cur_mode],
				r->id, why);
			exit(1);
		}
		flops = kvl_sb_gpu_pf_flops(tr.r[r->id].input);
#else
		snprintf(why, sizeof(why), "built without CUDA");
		exit(1);
#endif
		r->prefill_done = now_s();
		pf_tally(r, flops);
		pf_publish(r, n, off, span, flops);
	}
	pf_thread_cpu = thread_cpu_s();
	return NULL;
}

/* The request offsets of @r's layer @l blocks (a buffer reused by the next call). */
static const uint64_t *layer_offs(const struct rq *r, uint32_t l)
{
	static void *buf;
	static uint32_t cap;
	uint64_t *off = scratch(&buf, &cap, r->nb, sizeof(uint64_t));

	for (uint32_t b = 0; b < r->nb; b++)
		off[b] = kv_off(r, l, b);
	return off;
}

/* Layer @l of @r at @blk (its blocks' addresses): every byte checked, the block table
 * pointed at them. */
static int take_layer(struct rq *r, uint32_t l, void **blk)
{
	if (o.pf_real) /* the prefill's KV: block by block, its checksum */
		R.bad_bytes += be->verify_sums(blk, r->sums + (uint64_t)l * r->nb, r->nb, bb);
	else
		R.bad_bytes += be->verify(blk, layer_offs(r, l), r->nb, bb, r->key);
	R.checked_bytes += (uint64_t)r->nb * bb;
	return be->table(r->slot, l, blk, r->nb);
}

/* Layer @l of @r has landed at @blk: taken in; all of them make it ACTIVE. */
static int landed(struct rq *r, uint32_t l, void **blk)
{
	if (take_layer(r, l, blk) < 0)
		return -EINVAL;
	r->landed = l + 1;
	if (r->landed == shape.layers)
		r->st = R_ACTIVE;
	return 0;
}

static void **cache_addrs(const struct rq *r, uint32_t l)
{
	static void *buf;
	static uint32_t cap;
	void **a = scratch(&buf, &cap, r->nb, sizeof(void *));

	for (uint32_t b = 0; b < r->nb; b++)
		a[b] = be->cache() + (uint64_t)r->cblk[l * r->nb + b] * bb;
	return a;
}

/* Layer @l's block addresses in the staging window, of kvlane request @h. */
static void **staged_addrs(const struct rq *r, kvl_req_t h, uint32_t l)
{
	static void *buf;
	static uint32_t cap;
	void **a = scratch(&buf, &cap, r->nb, sizeof(void *));

	for (uint32_t b = 0; b < r->nb; b++)
		if (kvl_req_block_addr(rt, h, l * r->nb + b, &a[b]) < 0) {
			fprintf(stderr,
				"serve-bench: block %u of request %u READY with no address\n",
				l * r->nb + b, r->id);
			exit(1);
		}
	return a;
}

static void step_done(const struct rq *r, kvl_req_t h, uint32_t step)
{
	int rc;

	while ((rc = kvl_req_step_done(rt, h, step)) == -EAGAIN)
		;
	if (rc < 0) {
		fprintf(stderr, "serve-bench: step %u of request %u DONE: %s\n", step, r->id,
			strerror(-rc));
		exit(1);
	}
}

/* A streamed request's next token: its KV from the tier again, a step per layer. */
/* A streamed request's next token's kvlane request; with the runtime's pools full for now
 * (-ENOSPC: the previous tokens' requests not yet released) it stays unopened and
 * stream_next tries again. */
static void open_token(struct rq *r)
{
	int rc = open_tier(r, (int)r->tok_open, &r->th[r->tok_open & 1]);

	if (rc == -ENOSPC)
		return;
	if (rc < 0)
		exit(1);
	r->tok_open++;
}

/* A streamed request's next token opens (its prefetch begins) once every layer of the current
 * one has landed, never before: a next token's layer in the window cannot be computed until
 * the current token is, so had it taken the room the current token's next layer needs, the
 * two would wait on each other (one layer over half the window, or streams side by side,
 * stalled that way). And only while fewer than two of its kvlane requests are alive (the
 * previous token's ends with its DONE, after its compute): the block pool and th[] hold two. */
static void stream_next(struct rq *r)
{
	if (r->tok_open == r->ntok ||
	    (r->tok_open == r->ntok + 1 && r->tok_open < tr.r[r->id].output &&
	     r->landed == shape.layers && r->tok_open - r->tok_ended < 2))
		open_token(r); /* the current token (refused for room before), or the next */
}

/* A streamed request's current token takes in the layers READY for it, in order: attention
 * reads them where they landed in the window (no copy into the cache, which cannot hold it),
 * checked there first. */
static void stream_drain(struct rq *r)
{
	uint8_t *p = r->pend[r->ntok & 1];

	while (r->landed < shape.layers && p[r->landed]) {
		uint32_t l = r->landed;

		p[l] = 0;
		if (take_layer(r, l, staged_addrs(r, r->th[r->ntok & 1], l)) < 0)
			exit(1);
		R.moved_bytes += (uint64_t)r->nb * bb;
		r->landed = l + 1;
	}
	stream_next(r);
}

static unsigned *slot_free, n_slot_free;

/* tcp's or resident's @r from its own cache blocks: every layer checked and taken in */
static int take_cache(struct rq *r)
{
	for (uint32_t l = 0; l < shape.layers; l++) {
		/* resident: "already in VRAM": written in place, nothing moved (--prefill real:
		 * the prefill wrote it there) */
		if (cur_mode == M_RESIDENT && !o.pf_real &&
		    be->fill_blocks(cache_addrs(r, l), layer_offs(r, l), r->nb, bb, r->key) < 0)
			return -1;
		if (landed(r, l, cache_addrs(r, l)) < 0)
			return -1;
	}
	return 0;
}

/* Whether some request is in state @st. */
static bool any_in(enum rstate st)
{
	for (unsigned i = 0; i < tr.n; i++)
		if (rq[i].st == st)
			return true;
	return false;
}

/* tcp, blocking: the admitted requests whose KV the receiver has put in the cache join the
 * batch */
static void tcp_landed(void)
{
	for (unsigned i = 0; i < tr.n; i++) {
		struct rq *r = &rq[i];

		if (r->st != R_LANDING || atomic_load(&r->at_prefill) != 1)
			continue;
		if (take_cache(r) < 0)
			exit(1);
	}
}

/* Take @r into the batch if the KV cache has room. 1: admitted, 0: wait, -1: refused. */
static int admit(struct rq *r)
{
	uint32_t n = shape.layers * r->nb;
	bool own = cur_mode == M_TCP || cur_mode == M_RESIDENT;
	/* dual: larger than the whole cache, its KV stays in the tier and streams in through
	 * the window every token; the other modes fetch it all first, so cannot serve it */
	bool stream = n > cpool.cap && cur_mode == M_DUAL;

	if (n > cpool.cap && !stream) {
		/* single, dual: its KV sits in the prefill side's tier, whose room goes back (else
		 * the next request the tier has no room for waits for it forever) */
		if (cur_mode == M_SINGLE || cur_mode == M_DUAL) {
			if (o.pf_peer)
				pfp_free(r->id);
			else
				pool_give(&tpool, r->tblk, n);
		}
		r->st = R_REFUSED;
		R.refused++;
		return -1;
	}
	if (n_slot_free == 0)
		return 0;
	/* tcp, background: the receiver took the blocks and copied the KV in already;
	 * resident with --prefill real: the prefill wrote it into blocks it took */
	if (!stream && (cur_mode != M_TCP || !o.bg_load) &&
	    !(cur_mode == M_RESIDENT && o.pf_real) && !pool_take(&cpool, n, r->cblk)) {
		if (!r->delayed)
			R.delayed++;
		r->delayed = true;
		return 0;
	}
	if (cur_mode == M_TCP && o.bg_load && r->delayed)
		R.delayed++;
	r->slot = slot_free[--n_slot_free];
	if (cur_mode == M_TCP && !o.bg_load) { /* blocking: the receiver takes it in now */
		r->st = R_LANDING;
		atomic_store(&r->want, 1);
		return 1;
	}
	if (stream) {
		r->stream = true;
		r->st = R_STREAM;
		R.streamed++;
		r->pend[0] = calloc(shape.layers, 1);
		r->pend[1] = calloc(shape.layers, 1);
		open_token(r); /* the next once this one has landed (stream_next) */
		return 1;
	}
	if (own)
		return take_cache(r) < 0 ? -1 : 1;
	r->st = R_LANDING;
	if (open_tier(r, -1, &r->h) < 0)
		exit(1);
	return 1;
}

static void finish(struct rq *r)
{
	r->finish = r->last;
	r->hash = be->out_hash(r->slot);
	/* a streamed request's every token read all its KV, each time checked */
	R.used_bytes += r->stream ? r->bytes * tr.r[r->id].output : r->bytes;
	if (r->st == R_DONE)
		R.twice++;
	/* single/dual: every step was DONE as it landed; the DONE event gives the tier back */
	if (!r->stream)
		pool_give(&cpool, r->cblk, shape.layers * r->nb);
	slot_free[n_slot_free++] = r->slot;
	r->st = R_DONE;
	R.completed++;
}

/* Layers [@l0, @l1) of @r from the staging window into its cache blocks: one gather. */
static void gather_layers(const struct rq *r, uint32_t l0, uint32_t l1)
{
	static void *dbuf, *sbuf;
	static uint32_t dcap, scap;
	uint32_t n = (l1 - l0) * r->nb;
	void **dst = scratch(&dbuf, &dcap, n, sizeof(void *));
	void **src = scratch(&sbuf, &scap, n, sizeof(void *));
	int rc;

	for (uint32_t l = l0; l < l1; l++) {
		memcpy(dst + (l - l0) * r->nb, cache_addrs(r, l), r->nb * sizeof(void *));
		memcpy(src + (l - l0) * r->nb, staged_addrs(r, r->h, l), r->nb * sizeof(void *));
	}
	rc = be->gather(dst, src, n, bb);
	if (rc < 0) {
		fprintf(stderr, "serve-bench: gather of request %u's layers %u..%u: %s\n", r->id,
			l0, l1 - 1, strerror(-rc));
		exit(1);
	}
}

static void poll_events(void)
{
	struct kvl_req_event ev[64];
	unsigned n;

	while ((n = kvl_req_poll(rt, ev, 64)) > 0)
		for (unsigned i = 0; i < n; i++) {
			struct rq *r = &rq[(uint32_t)ev[i].user];
			uint32_t tok = (uint32_t)(ev[i].user >> 32); /* streamed: token + 1 */

			if (ev[i].type == KVL_REQ_EV_STEP_READY && tok) {
				/* taken in when its token is the current one */
				r->pend[(tok - 1) & 1][ev[i].step] = 1;
				if (tok - 1 == r->ntok)
					stream_drain(r);
			} else if (ev[i].type == KVL_REQ_EV_STEP_READY) {
				uint32_t l0 = cur_mode == M_DUAL ? ev[i].step : 0,
					 l1 = cur_mode == M_DUAL ? l0 + 1 : shape.layers;

				/* the step's layers from kvlane's staging window into the KV
				 * cache in one gather (one wait), each checked there (the bytes
				 * decode reads), then the step DONE: its window room goes to the
				 * next layers */
				gather_layers(r, l0, l1);
				for (uint32_t l = l0; l < l1; l++)
					if (landed(r, l, cache_addrs(r, l)) < 0)
						exit(1);
				step_done(r, r->h, ev[i].step);
				R.moved_bytes += (uint64_t)(l1 - l0) * r->nb * bb;
			} else if (ev[i].type == KVL_REQ_EV_DONE) {
				if (tok && ++r->tok_ended < tr.r[r->id].output) {
					stream_next(r); /* room for the next token's request */
					continue; /* the streamed request's other tokens still go */
				}
				if (o.pf_peer) /* the prefill process's blocks go back to it */
					pfp_free(r->id);
				else
					pool_give(&tpool, r->tblk, shape.layers * r->nb);
				r->ended = true;
			} else {
				fprintf(stderr, "serve-bench: request %u FAILED: %s\n", r->id,
					kvl_status_name(ev[i].status));
				exit(1);
			}
		}
}

static double used_bytes_now(void)
{
	return (double)(cpool.cap - cpool.n) * bb;
}

static void progress(unsigned done, bool last)
{
	static double next;
	double t = now_s();

	if (o.quiet || (!last && t < next))
		return;
	next = t + 0.5;
	fprintf(stderr, "\r[%s] %u/%u requests done, %.1f s elapsed, ETA %.1f s   %s",
		mode_name[cur_mode], done, tr.n, t, done ? t / done * (tr.n - done) : 0.0,
		last ? "\n" : "");
}

static int write_ini(const char *path)
{
	FILE *f = fopen(path, "w");
	bool gpu = be->device;
	/* blocks over all open requests: as many as the KV cache holds (admission's bound) */
	/* + two open tokens of every request that can stream at once */
	uint64_t slots = (o.budget_mb << 20) / bb + 2 * stream_blocks;

	if (f == NULL)
		return -errno;
	fprintf(f,
		"[runtime]\nname = serve-bench\nidle_policy = %s\nhybrid_idle_us = %u\n"
		"hybrid_sleep_us = %u\n[nic.lo]\ndevice = lo\n"
		"transport = tcp\n[sched]\nstaging_mb = %llu\nbudget_mb = %llu\nslot_kb = %u\n"
		"window_min_kb = %u\nwindow_max_mb = %llu\nmax_blocks = %llu\nmax_requests = %u\n"
		"tier = true\ntier_rate_mbps = %llu\nstaging = %s\n",
		o.idle, o.hybrid_idle_us, o.hybrid_sleep_us, (unsigned long long)staging_mb,
		(unsigned long long)staging_mb, bb >> 10, (bb >> 10) < 4 ? 4 : bb >> 10,
		(unsigned long long)staging_mb,
		(unsigned long long)(slots + 64 < 16777216 ? slots + 64 : 16777216),
		2 * o.max_batch + 8, (unsigned long long)(o.link_gbps * 1000),
		gpu ? "gpu" : "host");
	uint64_t pool_mb =
		((o.host_mb > staging_mb && !o.pf_peer ? o.host_mb : staging_mb) + 64 + 3) & ~3ull;

	/* the pool holds the tier (--host-mb) and tcp's bounce buffers; the INI's check also
	 * counts sched.staging_mb against it although staging = gpu takes VRAM, not the pool
	 * (config.c validate_pool_fits), so it is at least the staging too */
	if (gpu)
		fprintf(f,
			"[memory]\npool_size_mb = %llu\nchunk_size_kb = 4096\nhugepage = false\n"
			"[gpu]\nenable = true\nvram_reserve_mb = 512\n",
			/* --prefill-peer: no tier here, the pool holds the bounce buffers; whole
			 * 4 MiB chunks */
			(unsigned long long)pool_mb);
	/* --prefill-peer: the control path, to connect to the prefill process */
	if (o.pf_peer)
		fprintf(f, "[control]\nlisten = 127.0.0.1:0\nsecret_file = %s\n", pfp_secret);
	return fclose(f) ? -errno : 0;
}

static int start_runtime(char *err, size_t errlen)
{
	char ini[512];
	struct kvl_start_args a = { .eal_argc = o.eal_argc, .eal_argv = o.eal_argv, .config = ini };
	struct kvl_seg_geom g = { 1, 1, (uint32_t)((o.host_mb << 20) / bb), bb };
	struct kvl_segment seg;
	int stage, rc;

	snprintf(ini, sizeof(ini), "%s/%s.ini", o.out, mode_name[cur_mode]);
	if (write_ini(ini) < 0) {
		snprintf(err, errlen, "%s: %s", ini, strerror(errno));
		return -1;
	}
	rt = kvl_start(&a, err, errlen, &stage);
	if (rt == NULL)
		return -1;
	if (o.pf_peer) /* the prefill side's KV is the prefill process's */
		return 0;
	rc = kvl_seg_alloc(rt, "prefill-kv", &g, KVL_REMOTE_READ, &seg);
	if (rc < 0) {
		snprintf(err, errlen, "the prefill side's host tier (%llu MiB): %s",
			 (unsigned long long)o.host_mb, strerror(-rc));
		return -1;
	}
	tier_base = seg.base;
	tier_seg = seg.id;
	return pool_init(&tpool, g.blocks);
}

/* ---- CPU, split by thread ----
 * rusage counts the whole process; the split reads each live thread's utime + stime from
 * /proc/self/task/TID/stat: the decode loop (the main thread), the NIC lcore (EAL's worker
 * thread, single/dual), the tcp receiver and the fill thread (which time themselves on
 * exit), and "other" (what is left: CUDA's and EAL's service threads, the telemetry and
 * VRAM sampler threads). The NIC lcore's loop also counts its cycles busy (a pass that did
 * work) and idle; the busy share is read from the runtime's own telemetry socket
 * (/kvlane/lcores busy_cycles), since a polling loop is on the CPU even when idle. Every
 * figure is taken at the trace's time 0 and at the end, and the difference reported: the
 * set-up (weights, the pinned pool, EAL) is not the run's. */
struct cpu_snap {
	double total, loop, lcore;
	uint64_t busy, idle; /* the NIC lcore's cycles; 0, 0 when unreadable */
};
static struct cpu_snap snap0;

static double stat_cpu_s(const char *path)
{
	char st[1024];
	unsigned long ut = 0, sy = 0;
	FILE *f = fopen(path, "r");
	char *p;

	if (f == NULL)
		return 0;
	if (fgets(st, sizeof(st), f) == NULL)
		st[0] = '\0';
	fclose(f);
	p = strrchr(st, ')'); /* after "pid (comm)": state ppid ... utime stime */
	if (p == NULL ||
	    sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &sy) != 2)
		return 0;
	return (double)(ut + sy) / (double)sysconf(_SC_CLK_TCK);
}

/* The sum over the rows of "@key":[a,b,..] in a column-form telemetry reply. */
/* The sum of array @key of the one command's object in a telemetry reply ({"/cmd": {...}}). */
static uint64_t tel_sum(const char *reply, const char *key)
{
	json_t *root = json_loads(reply, 0, NULL), *a, *v;
	const char *cmd;
	uint64_t sum = 0;
	size_t i;

	if (json_is_object(root))
		json_object_foreach(root, cmd, v)
		{
			a = json_object_get(v, key);
			if (json_is_array(a)) {
				json_t *x;

				json_array_foreach(a, i, x) sum += (uint64_t)json_integer_value(x);
			}
			break;
		}
	json_decref(root);
	return sum;
}

/* The reply to telemetry command @cmd from this process's runtime (a buffer reused by the
 * next call), or NULL. */
static const char *tel_query(const char *cmd)
{
	static char reply[32768];
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	size_t len = strlen(cmd);
	const char *got = NULL;
	int fd;
	ssize_t n;

	if (rt == NULL)
		return NULL;
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s/dpdk_telemetry.v2",
		 rte_eal_get_runtime_dir());
	fd = socket(AF_UNIX, SOCK_SEQPACKET, 0);
	if (fd < 0)
		return NULL;
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0 &&
	    read(fd, reply, sizeof(reply) - 1) > 0 && write(fd, cmd, len) == (ssize_t)len &&
	    (n = read(fd, reply, sizeof(reply) - 1)) > 0) {
		reply[n] = '\0';
		got = reply;
	}
	close(fd);
	return got;
}

/* The NIC lcores' busy and idle cycles from the runtime's telemetry socket. */
static void lcore_cycles(uint64_t *busy, uint64_t *idle)
{
	const char *reply = tel_query("/kvlane/lcores");

	*busy = reply ? tel_sum(reply, "busy_cycles") : 0;
	*idle = reply ? tel_sum(reply, "idle_cycles") : 0;
}

static void snap_take(struct cpu_snap *c)
{
	struct rusage ru;
	DIR *d = opendir("/proc/self/task");
	struct dirent *e;
	long self = (long)getpid();

	getrusage(RUSAGE_SELF, &ru);
	c->total = ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 + ru.ru_stime.tv_sec +
		   ru.ru_stime.tv_usec / 1e6;
	c->loop = c->lcore = 0;
	while (d != NULL && (e = readdir(d)) != NULL) {
		char path[300], comm[64] = "";
		FILE *f;

		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "/proc/self/task/%s/comm", e->d_name);
		f = fopen(path, "r");
		if (f == NULL)
			continue;
		if (fgets(comm, sizeof(comm), f) == NULL)
			comm[0] = '\0';
		fclose(f);
		snprintf(path, sizeof(path), "/proc/self/task/%s/stat", e->d_name);
		if (atol(e->d_name) == self)
			c->loop = stat_cpu_s(path);
		else if (strstr(comm, "worker") != NULL) /* EAL's rte-worker-N / dpdk-worker-N */
			c->lcore += stat_cpu_s(path);
	}
	if (d != NULL)
		closedir(d);
	lcore_cycles(&c->busy, &c->idle);
}

/* The run's CPU by thread, into R (the receiver's and the fill thread's come off "other"
 * once they are joined). */
static void cpu_split(enum mode m)
{
	struct cpu_snap c;
	uint64_t busy, all;

	snap_take(&c);
	R.cpu_total = c.total - snap0.total;
	R.cpu_loop = c.loop - snap0.loop;
	R.cpu_lcore = c.lcore - snap0.lcore;
	R.cpu_other = R.cpu_total - R.cpu_loop - R.cpu_lcore;
	busy = c.busy - snap0.busy;
	all = busy + (c.idle - snap0.idle);
	/* busy cycles over the TSC's rate: the seconds the loop spent on passes with work */
	R.cpu_lcore_busy = (m == M_SINGLE || m == M_DUAL) && all
				   ? busy / (double)rte_get_tsc_hz()
				   : (m == M_SINGLE || m == M_DUAL ? -1 : 0);
}

static double bb_ms(unsigned i)
{
	return R.by_batch_n[i] ? R.by_batch_s[i] / R.by_batch_n[i] * 1e3 : 0;
}

static int write_results(const char *tag)
{
	char p[600];
	FILE *f;

	snprintf(p, sizeof(p), "%s/%s-%s.json", o.out, tag, mode_name[cur_mode]);
	f = fopen(p, "w");
	if (f == NULL)
		return -errno;
	fprintf(f, "{\"mode\": \"%s\", \"requests\": [", mode_name[cur_mode]);
	for (unsigned i = 0, c = 0; i < tr.n; i++) {
		struct rq *r = &rq[i];

		if (r->st != R_DONE)
			continue;
		fprintf(f,
			"%s\n {\"id\": %u, \"input\": %u, \"output\": %u, \"arrival_s\": %.6f, "
			"\"prefill_done_s\": %.6f, \"first_token_s\": %.6f, \"finish_s\": %.6f, "
			"\"kv_bytes\": %llu, \"delayed\": %s, \"out_hash\": \"%016llx\", "
			"\"gaps_ms\": [",
			c++ ? "," : "", r->id, tr.r[i].input, tr.r[i].output,
			tr.r[i].arrival_ms / 1e3, r->prefill_done, r->first, r->finish,
			(unsigned long long)r->bytes, r->delayed ? "true" : "false",
			(unsigned long long)r->hash);
		for (uint32_t k = 0; k + 1 < r->ntok; k++)
			fprintf(f, "%s%.4f", k ? ", " : "", r->gaps[k] * 1e3);
		fprintf(f, "]");
		if (o.pf_real)
			fprintf(f, ", \"prefill_start_s\": %.6f, \"prefill_gpu_s\": %.6f",
				r->prefill_start, r->prefill_gpu_s);
		fprintf(f, "}");
	}
	fprintf(f, "],\n \"refused\": [");
	for (unsigned i = 0, c = 0; i < tr.n; i++)
		if (rq[i].st == R_REFUSED)
			fprintf(f, "%s%u", c++ ? ", " : "", i);
	fprintf(f,
		"],\n \"refused_count\": %u, \"completed\": %u, \"delayed_for_memory\": %u, "
		"\"completed_twice\": %u,\n"
		" \"bytes_checked\": %llu, \"bytes_bad\": %llu, \"bytes_used\": %llu, "
		"\"kv_bytes_moved\": %llu,\n \"wall_s\": %.6f, \"compute_busy_s\": %.6f, "
		"\"peak_kv_bytes\": %.0f, \"kv_budget_bytes\": %llu, \"weight_bytes\": %llu,\n"
		" \"cpu_decode_s\": %.6f, \"cpu_decode_loop_s\": %.6f, \"cpu_nic_lcore_s\": %.6f, "
		"\"cpu_nic_lcore_busy_s\": %.6f, \"cpu_tcp_receiver_s\": %.6f, \"cpu_other_s\": "
		"%.6f,\n \"cpu_prefill_s\": %.6f, \"cpu_prefill_fill_s\": %.6f,\n"
		" \"steps\": %llu, \"batch_sum\": %llu, \"weights_only_step_s\": %.6f, "
		"\"streamed\": %u, \"load_stalls\": %u, \"load_stall_s\": %.6f,\n "
		"\"step_ms_by_batch\": [%.4f, %.4f, %.4f, %.4f, %.4f], "
		"\"steps_by_batch\": [%llu, %llu, %llu, %llu, %llu],\n"
		" \"link_bytes\": %llu, \"link_busy_s\": %.6f, \"recv_busy_s\": %.6f, "
		"\"loop_phase_s\": [%.6f, %.6f, %.6f, %.6f, %.6f, %.6f], \"step_wall_s\": %.6f, "
		"\"vram_series\": \"%s-%s.vram.csv\", \"prefill\": \"%s\", \"prefill_count\": %u, "
		"\"prefill_tokens\": %llu, \"prefill_gpu_s\": %.6f, \"prefill_flops\": %.6g}\n",
		R.refused, R.completed, R.delayed, R.twice, (unsigned long long)R.checked_bytes,
		(unsigned long long)R.bad_bytes, (unsigned long long)R.used_bytes,
		(unsigned long long)R.moved_bytes, R.wall_s, R.busy_s, R.peak_inuse,
		(unsigned long long)(o.budget_mb << 20), (unsigned long long)shape.weight_bytes,
		R.cpu_total, R.cpu_loop, R.cpu_lcore, R.cpu_lcore_busy, R.cpu_recv, R.cpu_other,
		R.prefill_cpu_s, R.prefill_fill_s, (unsigned long long)R.steps,
		(unsigned long long)R.batch_sum, probe_s, R.streamed, R.stalls, R.stall_s, bb_ms(0),
		bb_ms(1), bb_ms(2), bb_ms(3), bb_ms(4), (unsigned long long)R.by_batch_n[0],
		(unsigned long long)R.by_batch_n[1], (unsigned long long)R.by_batch_n[2],
		(unsigned long long)R.by_batch_n[3], (unsigned long long)R.by_batch_n[4],
		(unsigned long long)R.link_bytes, R.link_busy_s, R.link_busy_recv_s, R.ph[0],
		R.ph[1], R.ph[2], R.ph[3], R.ph[4], R.ph[5], R.step_wall_s, tag,
		mode_name[cur_mode], o.prefill, pf_count, (unsigned long long)pf_tokens, pf_gpu_s,
		pf_flops);
	return fclose(f) ? -errno : 0;
}

/* EAL pinned this thread to its main lcore: the decode loop and the prefill thread (created
 * after) may use every core but the NIC lcore's (the second of -l; cpu 1 with "-l 0-1"), as
 * tcp's and resident's threads do, so no mode's threads share a core they need not. */
static void unpin(void)
{
	long n = sysconf(_SC_NPROCESSORS_ONLN);
	cpu_set_t set;

	if (n <= 2)
		return;
	CPU_ZERO(&set);
	for (long c = 0; c < n && c < CPU_SETSIZE; c++)
		if (c != 1)
			CPU_SET(c, &set);
	pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
}

/* --prefill real, tcp: the shared ring (at least --host-mb, and twice the largest request)
 * and its flags, mapped before the fork so that the prefill process sees the same pages. */
static int pf_ring_map(void)
{
	uint64_t big = 0;

	for (unsigned i = 0; i < tr.n; i++)
		if (rq[i].bytes > big)
			big = rq[i].bytes;
	/* twice the largest request at least: a request that does not fit before the ring's
	 * end starts at 0, and with every request at most half the ring that fits once the ring
	 * has drained (arena_take never waits for more room than the ring has) */
	uint64_t nsums = 0;

	pf_arena_len = o.host_mb << 20 > 2 * big ? o.host_mb << 20 : 2 * big;
	for (unsigned i = 0; i < tr.n; i++)
		nsums += (uint64_t)rq[i].nb * shape.layers;
	pf_arena =
		mmap(NULL, pf_arena_len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	pf_sh = mmap(NULL, sizeof(*pf_sh) + tr.n * sizeof(pf_sh->req[0]), PROT_READ | PROT_WRITE,
		     MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	pf_sums = mmap(NULL, nsums * sizeof(uint64_t), PROT_READ | PROT_WRITE,
		       MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (pf_arena == MAP_FAILED || pf_sh == MAP_FAILED || pf_sums == MAP_FAILED) {
		fprintf(stderr, "serve-bench: tcp: the prefill's shared ring of %llu MiB: %s\n",
			(unsigned long long)(pf_arena_len >> 20), strerror(errno));
		pf_arena = NULL;
		return -1;
	}
	nsums = 0;
	for (unsigned i = 0; i < tr.n; i++) { /* the checksums where either process sees them */
		free(rq[i].sums);
		rq[i].sums = pf_sums + nsums;
		nsums += (uint64_t)rq[i].nb * shape.layers;
	}
	pf_head = 0;
	return 0;
}

/* --prefill real: the model's weights on this GPU (after the decode side's: both share it),
 * or, in tcp's prefill process with --prefill-peer, on --prefill-device; the tcp ring
 * registered with CUDA (the prefill's copies into it are DMA). */
static int pf_setup(enum mode m, uint32_t max_nb, char *err, size_t errlen)
{
#ifdef KVL_SB_GPU
	double t = kvl_now_s();

	pf_gpu_s = pf_flops = 0;
	pf_tokens = pf_count = 0;
	if (!pf_here(m) && kvl_sb_gpu_use_device(o.pf_device, err, (unsigned)errlen) < 0)
		return -1;
	/* decode first only where decode's stream is this process's */
	if (kvl_sb_gpu_pf_init(&shape, max_nb * SB_BLOCK_TOKENS, o.sy.seed,
			       pf_here(m) && !o.pf_equal, err, (unsigned)errlen) < 0)
		return -1;
	if (m == M_TCP &&
	    kvl_sb_gpu_host_register(pf_arena, pf_arena_len, err, (unsigned)errlen) < 0)
		return -1;
	if (!o.quiet)
		printf("  %s: prefill (real): %.2f GB of weights on %s, prompts up to %u "
		       "tokens, set up in %.1f s\n",
		       mode_name[m], kvl_sb_gpu_pf_weight_bytes() / 1e9,
		       pf_here(m) ? "this GPU" : "the prefill process's GPU",
		       max_nb * SB_BLOCK_TOKENS, kvl_now_s() - t);
	return 0;
#else
	(void)m;
	(void)max_nb;
	snprintf(err, errlen, "--prefill real: built without CUDA");
	return -1;
#endif
}

/* What the prefill did, where (NULL: this process, on the decode GPU; else where, the GPU's
 * number following). */
static void pf_report(enum mode m, const char *where)
{
	char at[128] = "this GPU";

	if (where)
		snprintf(at, sizeof(at), "%s %d", where, o.pf_device);
	printf("  %s: prefill (real, %s): %u prompts, %llu tokens in %.3f s of GPU: %.1f TFLOP/s, "
	       "%.0f tokens/s\n",
	       mode_name[m], at, pf_count, (unsigned long long)pf_tokens, pf_gpu_s,
	       pf_gpu_s > 0 ? pf_flops / pf_gpu_s / 1e12 : 0.0,
	       pf_gpu_s > 0 ? pf_tokens / pf_gpu_s : 0.0);
}

/* Serve the whole trace in @m; 0 when every request completed once and every byte matched. */
static int run_mode(enum mode m, const char *tag)
{
	char err[1024], p[600];
	uint64_t cache_blocks = (o.budget_mb << 20) / bb;
	uint32_t max_nb = 0;
	pthread_t th, pth;
	int lfd = -1, cfd = -1, stats[2] = { -1, -1 }, go[2] = { -1, -1 };
	pid_t child = -1;
	unsigned done = 0;
	/* tcp's and single's blocking load: no step while an admitted request's KV is on its
	 * way, and one step between two loads (an engine step takes in what is ready at its
	 * start, loads it, then computes) */
	bool blk = !o.bg_load && (m == M_TCP || m == M_SINGLE), gate = false;
	double stall_t = 0; /* when computing requests began to wait for a load; 0: not */

	cur_mode = m;
	memset(&R, 0, sizeof(R));
	rq = calloc(tr.n, sizeof(*rq));
	for (unsigned i = 0; i < tr.n; i++) {
		struct rq *r = &rq[i];

		r->id = i;
		r->nb = (tr.r[i].input + SB_BLOCK_TOKENS - 1) / SB_BLOCK_TOKENS;
		r->bytes = (uint64_t)r->nb * shape.layers * bb;
		r->key = req_key(i);
		r->cblk = malloc((size_t)r->nb * shape.layers * sizeof(uint32_t));
		r->tblk = malloc((size_t)r->nb * shape.layers * sizeof(uint32_t));
		r->gaps = malloc(tr.r[i].output * sizeof(double));
		if (o.pf_real)
			r->sums = malloc((size_t)r->nb * shape.layers * sizeof(uint64_t));
		if (r->nb > max_nb)
			max_nb = r->nb;
	}
	prefill_schedule();
	if (m == M_TCP) {
		struct sockaddr_in a = { .sin_family = AF_INET,
					 .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
		socklen_t al = sizeof(a);

		lfd = socket(AF_INET, SOCK_STREAM, 0);
		if (lfd >= 0)
			sock_bufs(lfd); /* inherited by the accepted socket */
		if (lfd < 0 || bind(lfd, (struct sockaddr *)&a, sizeof(a)) < 0 ||
		    listen(lfd, 1) < 0 || getsockname(lfd, (struct sockaddr *)&a, &al) < 0 ||
		    pipe(stats) < 0 || pipe(go) < 0) {
			perror("serve-bench: tcp listen");
			return 1;
		}
		if (o.pf_real && pf_ring_map() < 0)
			return 1;
		/* before any CUDA: the prefill process is a fork with nothing of the GPU */
		child = fork();
		if (child == 0) {
			int fd = socket(AF_INET, SOCK_STREAM, 0);
			struct pfp_hello hi = { .ok = 1 };

			close(lfd);
			if (fd >= 0)
				sock_bufs(fd);
			if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0) {
				perror("serve-bench: prefill connect");
				_exit(1);
			}
			close(go[1]);
			/* --prefill-peer: the prefill on this process's GPU, set up first */
			if (pf_away(m)) {
				if (pf_setup(m, max_nb, hi.err, sizeof(hi.err)) < 0)
					hi.ok = 0;
				fflush(stdout); /* its set-up line, before the run's */
				if (send_all(fd, &hi, sizeof(hi)) < 0 || !hi.ok)
					_exit(1);
			}
			/* the trace's time 0 comes once the decode side is set up */
			if (read(go[0], &t0s, sizeof(t0s)) != sizeof(t0s))
				_exit(1);
			_exit(prefill_process(fd, stats[1]));
		}
		close(stats[1]);
		close(go[0]);
		cfd = accept(lfd, NULL, NULL);
		if (cfd < 0) {
			perror("serve-bench: accept");
			return 1;
		}
		if (pf_away(m)) {
			struct pfp_hello hi;
			bool gone = recv_all(cfd, &hi, sizeof(hi)) < 0;

			if (gone || !hi.ok) {
				fprintf(stderr, "serve-bench: tcp: the prefill process: %.600s\n",
					gone ? "it exited while setting up" : hi.err);
				return 1;
			}
		}
	}
	if (o.pf_peer && (m == M_SINGLE || m == M_DUAL) && pfp_fork() < 0)
		return 1;
	{
		/* kvlane's window: at least the largest request the cache holds (single takes it
		 * in one step) and one layer of any (a streamed request's step); a request over
		 * the cache streams, so its whole KV never needs the window */
		uint64_t mx = (uint64_t)max_nb * bb, big = 0;
		unsigned n_big = 0;

		for (unsigned i = 0; i < tr.n; i++) {
			uint64_t n = (uint64_t)rq[i].nb * shape.layers;

			if (n <= cache_blocks && n * bb > mx)
				mx = n * bb;
			if (n > cache_blocks) {
				n_big++;
				big = n > big ? n : big;
			}
		}
		/* at most --max-batch of them at once, each at most the largest */
		stream_blocks = (uint64_t)(n_big < o.max_batch ? n_big : o.max_batch) * big;
		staging_mb = (mx + (1u << 20) - 1) >> 20;
		if (staging_mb < o.window_mb)
			staging_mb = o.window_mb;
	}
	if (be->init(&shape, o.max_batch, max_nb, cache_blocks * bb, o.sy.seed, err, sizeof(err)) <
	    0) {
		fprintf(stderr, "serve-bench: %s\n", err);
		return 1;
	}
	probe_s = be->probe_weights();
	if (pf_here(m) && pf_setup(m, max_nb, err, sizeof(err)) < 0) {
		fprintf(stderr, "serve-bench: %s: %s\n", mode_name[m], err);
		return 1;
	}
	if ((m == M_SINGLE || m == M_DUAL) && start_runtime(err, sizeof(err)) < 0) {
		fprintf(stderr, "serve-bench: %s: %s\n", mode_name[m], err);
		return 1;
	}
	if (o.pf_peer && (m == M_SINGLE || m == M_DUAL) && pfp_connect(err, sizeof(err)) < 0) {
		fprintf(stderr, "serve-bench: %s: --prefill-peer: %s\n", mode_name[m], err);
		return 1;
	}
	if (m == M_SINGLE || m == M_DUAL)
		unpin();
	if (pool_init(&cpool, (uint32_t)cache_blocks) < 0)
		return 1;
	slot_free = malloc(o.max_batch * sizeof(unsigned));
	for (unsigned i = 0; i < o.max_batch; i++)
		slot_free[n_slot_free++] = o.max_batch - 1 - i;
	snprintf(p, sizeof(p), "%s/%s-%s.vram.csv", o.out, tag, mode_name[m]);
	vram_log = fopen(p, "w");
	if (vram_log)
		fprintf(vram_log, "t_s,budget_bytes,window_bytes,in_use_bytes,landing_bytes\n");
	if (m == M_TCP && rbuf_init() < 0) {
		fprintf(stderr,
			"serve-bench: tcp: no pinned memory for %u receive buffers of %u "
			"MiB\n",
			o.tcp_bufs, RCHUNK >> 10);
		return 1;
	}
	/* the trace's time 0: after every mode's set-up (weights, cache, EAL, the pinned pool,
	 * the receive buffers), so no arrival is late for it */
	t0s = kvl_now_s() + 0.2;
	snap_take(&snap0); /* the CPU of the run itself, not of the set-up (the pool's pinning) */
	if (m == M_TCP) {
		if (write(go[1], &t0s, sizeof(t0s)) != sizeof(t0s)) {
			fprintf(stderr, "serve-bench: tcp: the prefill process is gone\n");
			return 1;
		}
		pthread_create(&th, NULL, receiver, (void *)(intptr_t)cfd);
	} else if (m != M_RESIDENT && !o.pf_real) {
		pthread_create(&th, NULL, tier_filler, NULL);
	}
	if (o.pf_peer && (m == M_SINGLE || m == M_DUAL)) { /* its time 0, then its reports */
		pf_gpu_s = pf_flops = 0;
		pf_tokens = pf_count = 0;
		if (send_all(pfp_down[1], &t0s, sizeof(t0s)) < 0) {
			fprintf(stderr, "serve-bench: the prefill process is gone\n");
			return 1;
		}
		pthread_create(&pfp_th, NULL, pfp_receiver, NULL);
	} else if (pf_here(m)) {
		pthread_create(&pth, NULL, real_prefiller, NULL);
	}
	sleep_until(0);

	for (unsigned head = 0, seen = 0; done + R.refused < tr.n;) {
		struct rq *batch[1024];
		unsigned nb = 0, moved;
		double t;
		static double last_move;

		/* a run that stops moving says where it stands instead of hanging its caller */
		moved = done + R.refused + head;
		for (unsigned i = 0; i < tr.n; i++)
			moved += rq[i].landed + rq[i].ntok + (atomic_load(&rq[i].at_prefill) != 0);
		if (moved != seen || last_move == 0) {
			seen = moved;
			last_move = now_s();
		} else if (now_s() - last_move > 60 &&
			   (head == tr.n || (o.pf_real ? tr.r[order[head]].arrival_ms / 1e3
						       : rq[order[head]].prefill_done) +
							    60 <
						    now_s())) {
			fprintf(stderr,
				"\nserve-bench: %s: nothing moved for 60 s: %u done, %u refused, "
				"head %u of %u, %u cache blocks free of %u\n",
				mode_name[m], done, R.refused, head, tr.n, cpool.n, cpool.cap);
			return 1;
		}

		double c0 = thread_cpu_s(), c1;

		/* admission, in the order prefills finish (head of line waits for memory) */
		/* blocking: the last load set computes a step first */
		bool may = !blk || (!any_in(R_LANDING) && !(gate && any_in(R_ACTIVE))), loading;

		while (may && head < tr.n) {
			struct rq *r = &rq[order[head]];
			int at = m == M_RESIDENT && !o.pf_real ? 1 : atomic_load(&r->at_prefill);
			int a;

			if (at > 0 && now_s() < r->prefill_done)
				break; /* filled ahead; its prefill is not over yet */

			if (at < 0) {
				r->st = R_REFUSED;
				R.refused++;
				head++;
				continue;
			}
			if (!at)
				break;
			a = admit(r);
			if (a == 0)
				break;
			gate = gate || (blk && a > 0);
			head++;
		}
		c1 = thread_cpu_s();
		R.ph[PH_ADMIT] += c1 - c0;
		c0 = c1;
		if (m == M_SINGLE || m == M_DUAL)
			poll_events();
		for (unsigned i = 0; m == M_DUAL && i < tr.n; i++)
			if (rq[i].st == R_STREAM)
				stream_next(&rq[i]); /* a token refused for room, again */
		if (m == M_TCP && blk)
			tcp_landed();
		for (unsigned i = 0; i < tr.n && nb < o.max_batch; i++) {
			struct rq *r = &rq[i];

			if (r->st == R_ACTIVE || ((r->st == R_LANDING || r->st == R_STREAM) &&
						  m == M_DUAL && r->landed > r->cur))
				batch[nb++] = r;
		}
		loading = blk && any_in(R_LANDING);
		if (loading && nb && stall_t == 0) {
			stall_t = now_s();
			R.stalls++;
		} else if (!loading && stall_t > 0) {
			R.stall_s += now_s() - stall_t;
			stall_t = 0;
		}
		if (loading) /* blocking: the whole batch waits for the KV being loaded */
			nb = 0;
		if (used_bytes_now() > R.peak_inuse)
			R.peak_inuse = used_bytes_now();
		if (nb == 0) {
			struct timespec ts = { 0, 50000 };

			c1 = thread_cpu_s();
			R.ph[PH_POLL] += c1 - c0;
			nanosleep(&ts, NULL);
			R.ph[PH_IDLE] += thread_cpu_s() - c1;
			continue;
		}
		c1 = thread_cpu_s();
		R.ph[PH_POLL] += c1 - c0;
		c0 = c1;
		{
			double w0 = kvl_now_s();

			be->step_begin();
			for (uint32_t l = 0; l < shape.layers; l++) {
				be->weights(l);
				for (unsigned k = 0; k < nb; k++)
					if ((batch[k]->ntok > 0 && !batch[k]->stream) ||
					    (l >= batch[k]->cur && l < batch[k]->landed))
						be->attn(batch[k]->slot, l, batch[k]->nb);
			}
			be->step_submit();
			c1 = thread_cpu_s();
			R.ph[PH_LAUNCH] += c1 - c0;
			c0 = c1;

			double st = be->step_end();
			unsigned bi = nb < SB_BY_BATCH ? nb - 1 : SB_BY_BATCH - 1;

			R.step_wall_s += kvl_now_s() - w0;
			c1 = thread_cpu_s();
			R.ph[PH_SYNC] += c1 - c0;
			c0 = c1;
			R.busy_s += st;
			R.by_batch_s[bi] += st;
			R.by_batch_n[bi]++;
		}
		R.steps++;
		R.batch_sum += nb;
		gate = false;
		t = now_s();
		if (vram_log) {
			double landing = 0;

			for (unsigned i = 0; i < tr.n; i++)
				if (rq[i].st == R_LANDING)
					landing +=
						rq[i].bytes - (double)rq[i].landed * rq[i].nb * bb;
			fprintf(vram_log, "%.6f,%llu,%llu,%.0f,%.0f\n", t,
				(unsigned long long)(o.budget_mb << 20),
				(unsigned long long)(m == M_SINGLE || m == M_DUAL ? staging_mb << 20
										  : 0),
				used_bytes_now(), landing);
		}
		for (unsigned k = 0; k < nb; k++) {
			struct rq *r = batch[k];

			if (r->stream) { /* the layers computed give their window room back */
				for (uint32_t l = r->cur; l < r->landed; l++)
					step_done(r, r->th[r->ntok & 1], l);
				r->cur = r->landed;
				if (r->cur < shape.layers)
					continue;
			} else if (r->ntok == 0 && r->landed < shape.layers) {
				r->cur = r->landed; /* the first token's layers so far */
				continue;
			}
			if (r->ntok == 0)
				r->first = t;
			else
				r->gaps[r->ntok - 1] = t - r->last;
			r->last = t;
			r->cur = shape.layers;
			if (++r->ntok == tr.r[r->id].output) {
				finish(r);
				done++;
			} else if (r->stream) { /* the next token reads it all again (open since
						 * this one landed) */
				r->cur = r->landed = 0;
				stream_drain(r);
			}
		}
		progress(done, false);
		R.ph[PH_AFTER] += thread_cpu_s() - c0;
	}
	/* the bytes the device's verify kernels found unlike the pattern, all of them done */
	R.bad_bytes += be->bad_total();
	/* the last DONE events: every request's staging back */
	while (m == M_SINGLE || m == M_DUAL) {
		bool all = true;

		poll_events();
		for (unsigned i = 0; i < tr.n; i++)
			all = all && (rq[i].st != R_DONE || rq[i].ended);
		if (all)
			break;
	}
	R.wall_s = now_s();
	progress(done, true);
	cpu_split(m);
	if (m == M_TCP) {
		int status;
		struct rusage cru;
		FILE *sf = fdopen(stats[0], "r");
		unsigned long long sb = 0, ns = 0;

		pthread_join(th, NULL);
		rbuf_fini();
		R.cpu_recv = recv_thread_cpu;
		R.cpu_other -= recv_thread_cpu;
		R.link_busy_recv_s = recv_busy_s;
		if (sf == NULL || fscanf(sf, "%llu %llu %lf", &sb, &ns, &R.prefill_fill_s) != 3)
			fprintf(stderr, "serve-bench: no statistics from the prefill process\n");
		wait4(child, &status, 0, &cru);
		R.prefill_cpu_s = cru.ru_utime.tv_sec + cru.ru_utime.tv_usec / 1e6 +
				  cru.ru_stime.tv_sec + cru.ru_stime.tv_usec / 1e6;
		R.link_bytes = sb;
		R.link_busy_s = ns / 1e9;
		if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
			fprintf(stderr, "serve-bench: the prefill process failed\n");
			return 1;
		}
		if (pf_away(m))
			pf_report(m, "in the sender process on GPU");
	} else if (m != M_RESIDENT) {
		if (!o.pf_real)
			pthread_join(th, NULL);
		R.prefill_cpu_s = prefill_thread_cpu;
		R.prefill_fill_s = prefill_thread_cpu; /* all it does is fill the tier */
		R.cpu_other -= prefill_thread_cpu;
		R.cpu_total -= prefill_thread_cpu;
		R.link_bytes = R.moved_bytes;
	}
	if (o.pf_peer && (m == M_SINGLE || m == M_DUAL)) { /* the prefill process's, by rusage */
		int status;
		struct rusage cru;

		pthread_join(pfp_th, NULL);
		close(pfp_down[1]); /* the run is over: the prefill process stops */
		wait4(pfp_child, &status, 0, &cru);
		close(pfp_up[0]);
		R.prefill_cpu_s = cru.ru_utime.tv_sec + cru.ru_utime.tv_usec / 1e6 +
				  cru.ru_stime.tv_sec + cru.ru_stime.tv_usec / 1e6;
		R.prefill_fill_s = R.prefill_cpu_s;
		if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
			fprintf(stderr, "serve-bench: %s: the prefill process failed\n",
				mode_name[m]);
			return 1;
		}
		pf_report(m, "a process of its own read as a peer, on GPU");
	} else if (pf_here(m)) { /* the prefill thread's CPU is the prefill side's, as the
				  * fill's was */
		pthread_join(pth, NULL);
		R.prefill_cpu_s += pf_thread_cpu;
		R.prefill_fill_s = pf_thread_cpu;
		R.cpu_other -= pf_thread_cpu;
		R.cpu_total -= pf_thread_cpu;
		pf_report(m, NULL);
	}
	if (vram_log)
		fclose(vram_log);
	if (write_results(tag) < 0) {
		fprintf(stderr, "serve-bench: cannot write results in %s\n", o.out);
		return 1;
	}
	if (rt)
		kvl_stop(rt);
#ifdef KVL_SB_GPU
	if (pf_here(m)) {
		kvl_sb_gpu_pf_fini();
		if (pf_arena)
			kvl_sb_gpu_host_unregister(pf_arena);
	}
#endif
	be->fini();
	if (R.bad_bytes || R.checked_bytes != R.used_bytes || R.twice ||
	    R.completed + R.refused != tr.n) {
		fprintf(stderr,
			"serve-bench: %s FAILED its checks: %llu bad bytes, %llu checked of %llu "
			"used, "
			"%u completed + %u refused of %u, %u twice\n",
			mode_name[m], (unsigned long long)R.bad_bytes,
			(unsigned long long)R.checked_bytes, (unsigned long long)R.used_bytes,
			R.completed, R.refused, tr.n, R.twice);
		return 1;
	}
	return 0;
}

/* ---------------- the parent: workload, one process per mode, the report ---------------- */

struct sum {
	bool ok;
	double reqps, reqps_all, ttft50, ttft99, tpot50, tpot99, gap50, gap99, cpu_dec, cpu_pre,
		busy, wall;
	double moved_gb, link_gbps, sock_gbps, sock_s, peak_gb;
	/* %% of one core over the run: the decode process by thread, the prefill side's fill */
	double c_loop, c_lcore, c_lcore_busy, c_recv, c_other, c_fill, recv_gbps;
	double steps, mean_batch, step_ms, probe_ms, by_batch_ms[SB_BY_BATCH];
	double ph[N_PH], step_wall_ms; /* the loop's phases, % of one core; a step's wall time */
	unsigned completed, refused, delayed, streamed, stalls;
	double stall_s; /* blocking load: computing requests waiting for another's KV */
	uint64_t *hash; /* per request, 0: not completed */
};

/* CPU %% of the host's cores: the "% of one core" columns over this */
static double host_cores(void)
{
	long n = sysconf(_SC_NPROCESSORS_ONLN);

	return n > 0 ? (double)n : 1.0;
}

static int cmpd(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

static double pct(double *v, unsigned n, double p)
{
	if (n == 0)
		return NAN;
	qsort(v, n, sizeof(double), cmpd);
	return v[(unsigned)fmin(n - 1, floor(p / 100.0 * n))];
}

/* The worker's JSON, read back for the table (the tool's own format: a few fields by name). */
/* A number field of @o, or NAN (missing or not a number: the caller refuses the file). */
static double jnum(const json_t *o, const char *k)
{
	const json_t *v = json_object_get(o, k);

	return json_is_number(v) ? json_number_value(v) : NAN;
}

/* The first @n numbers of array field @k of @o into @out, each x @scale. false: not there. */
static bool jnums(const json_t *o, const char *k, double *out, unsigned n, double scale)
{
	const json_t *a = json_object_get(o, k);

	if (!json_is_array(a) || json_array_size(a) < n)
		return false;
	for (unsigned i = 0; i < n; i++) {
		const json_t *v = json_array_get(a, i);

		if (!json_is_number(v))
			return false;
		out[i] = json_number_value(v) * scale;
	}
	return true;
}

/* One mode's record (write_results' file, through jansson) into @s. */
static int read_sum(const char *path, struct sum *s)
{
	json_error_t je;
	json_t *root = json_load_file(path, 0, &je), *reqs, *r;
	double *ttft, *tpot, *gaps, *fin, a0 = INFINITY;
	unsigned n = 0, ng = 0, cg = 1024;
	int rc = -EINVAL;
	size_t ri;

	memset(s, 0, sizeof(*s));
	if (root == NULL) {
		fprintf(stderr, "serve-bench: %s:%d: %s\n", path, je.line, je.text);
		return -EINVAL;
	}
	reqs = json_object_get(root, "requests");
	ttft = calloc(tr.n + 1, sizeof(double));
	tpot = calloc(tr.n + 1, sizeof(double));
	fin = calloc(tr.n + 1, sizeof(double));
	gaps = malloc(cg * sizeof(double));
	s->hash = calloc(tr.n, sizeof(uint64_t));
	if (!json_is_array(reqs) || json_array_size(reqs) > tr.n || !ttft || !tpot || !fin ||
	    !gaps || !s->hash)
		goto out;
	json_array_foreach(reqs, ri, r)
	{
		double id = jnum(r, "id"), out = jnum(r, "output"), arr = jnum(r, "arrival_s"),
		       first = jnum(r, "first_token_s"), finish = jnum(r, "finish_s");
		const char *h = json_string_value(json_object_get(r, "out_hash"));
		const json_t *g = json_object_get(r, "gaps_ms"), *gv;
		size_t gi;

		if (!(id >= 0 && id < tr.n) || isnan(out) || isnan(arr) || isnan(first) ||
		    isnan(finish) || h == NULL || !json_is_array(g))
			goto out;
		s->hash[(unsigned)id] = strtoull(h, NULL, 16);
		if (s->hash[(unsigned)id] == 0) /* 0 marks "not completed" */
			s->hash[(unsigned)id] = 1;
		ttft[n] = first - arr;
		tpot[n] = out > 1 ? (finish - first) / (out - 1) : 0;
		fin[n++] = finish;
		a0 = fmin(a0, arr);
		json_array_foreach(g, gi, gv)
		{
			if (ng == cg) {
				double *x = realloc(gaps, (cg *= 2) * sizeof(double));

				if (x == NULL)
					goto out;
				gaps = x;
			}
			gaps[ng++] = json_number_value(gv) / 1e3;
		}
	}
	{
		double wall = jnum(root, "wall_s"), st = jnum(root, "steps"),
		       bs = jnum(root, "batch_sum"), moved = jnum(root, "kv_bytes_moved"),
		       lb = jnum(root, "link_bytes"), lbs = jnum(root, "link_busy_s"),
		       rbs = jnum(root, "recv_busy_s"), x;
		/* every number the table needs, as write_results() writes them */
		static const char *const need[] = {
			"completed",	   "delayed_for_memory",   "cpu_decode_s",
			"cpu_prefill_s",   "weights_only_step_s",  "streamed",
			"load_stalls",	   "load_stall_s",	   "compute_busy_s",
			"peak_kv_bytes",   "refused_count",	   "cpu_decode_loop_s",
			"cpu_nic_lcore_s", "cpu_nic_lcore_busy_s", "cpu_tcp_receiver_s",
			"cpu_other_s",	   "cpu_prefill_fill_s",   "step_wall_s",
		};

		for (unsigned i = 0; i < sizeof(need) / sizeof(need[0]); i++)
			if (isnan(jnum(root, need[i])))
				goto out;
		if (!(wall > 0) || isnan(st) || isnan(bs) || isnan(moved) || isnan(lb) ||
		    isnan(lbs) || isnan(rbs) ||
		    !jnums(root, "step_ms_by_batch", s->by_batch_ms, SB_BY_BATCH, 1) ||
		    !jnums(root, "loop_phase_s", s->ph, N_PH, 100 / wall))
			goto out;
		s->wall = wall;
		s->completed = (unsigned)jnum(root, "completed");
		s->refused = (unsigned)jnum(root, "refused_count");
		s->delayed = (unsigned)jnum(root, "delayed_for_memory");
		s->streamed = (unsigned)jnum(root, "streamed");
		s->stalls = (unsigned)jnum(root, "load_stalls");
		s->stall_s = jnum(root, "load_stall_s");
		s->probe_ms = jnum(root, "weights_only_step_s") * 1e3;
		s->cpu_dec = jnum(root, "cpu_decode_s") / wall * 100;
		s->cpu_pre = jnum(root, "cpu_prefill_s") / wall * 100;
		s->c_loop = jnum(root, "cpu_decode_loop_s") / wall * 100;
		s->c_lcore = jnum(root, "cpu_nic_lcore_s") / wall * 100;
		x = jnum(root, "cpu_nic_lcore_busy_s");
		s->c_lcore_busy = x < 0 ? -1 : x / wall * 100;
		s->c_recv = jnum(root, "cpu_tcp_receiver_s") / wall * 100;
		/* /proc counts in clock ticks */
		s->c_other = fmax(0, jnum(root, "cpu_other_s")) / wall * 100;
		s->c_fill = jnum(root, "cpu_prefill_fill_s") / wall * 100;
		s->busy = jnum(root, "compute_busy_s");
		s->step_wall_ms = st > 0 ? jnum(root, "step_wall_s") / st * 1e3 : 0;
		s->steps = st;
		s->mean_batch = st > 0 ? bs / st : 0;
		s->step_ms = st > 0 ? s->busy / st * 1e3 : 0;
		s->busy = s->busy / wall * 100;
		s->moved_gb = moved / 1e9;
		/* the link's load over the run; tcp's socket rate while it had bytes to send */
		s->link_gbps = moved * 8 / wall / 1e9;
		s->sock_gbps = lbs > 0 ? lb * 8 / lbs / 1e9 : 0;
		s->sock_s = lbs;
		s->recv_gbps = rbs > 0 ? moved * 8 / rbs / 1e9 : 0;
		s->peak_gb = jnum(root, "peak_kv_bytes") / 1e9;
	}
	/* completed req/s over the steady window: the 10th to the 90th percentile completion */
	{
		unsigned lo, hi;

		qsort(fin, n, sizeof(double), cmpd);
		lo = n >= 10 ? n / 10 : 0;
		hi = n >= 10 ? n - 1 - n / 10 : n - 1;
		s->reqps = n > 1 && fin[hi] > fin[lo] ? (hi - lo) / (fin[hi] - fin[lo]) : NAN;
		/* and over the whole run, the first arrival to the last completion (vLLM's
		 * benchmark_serving: completed / duration), which bursts of completions (a
		 * blocking load's waves) do not bias */
		s->reqps_all = n && fin[n - 1] > a0 ? n / (fin[n - 1] - a0) : NAN;
	}
	s->ttft50 = pct(ttft, n, 50);
	s->ttft99 = pct(ttft, n, 99);
	s->tpot50 = pct(tpot, n, 50) * 1e3;
	s->tpot99 = pct(tpot, n, 99) * 1e3;
	s->gap50 = pct(gaps, ng, 50) * 1e3;
	s->gap99 = pct(gaps, ng, 99) * 1e3;
	s->ok = true;
	rc = 0;
out:
	if (rc < 0)
		fprintf(stderr, "serve-bench: %s: not a mode's record (a field missing or bad)\n",
			path);
	json_decref(root);
	free(ttft);
	free(tpot);
	free(fin);
	free(gaps);
	return rc;
}

static void usage(const char *p)
{
	fprintf(stderr,
		"usage: %s [EAL-ARGS --] (--trace FILE | --synthetic) [options]\n"
		"  --trace FILE        Mooncake JSON lines: timestamp (ms), input_length, "
		"output_length, hash_ids\n"
		"  --synthetic         Poisson arrivals at --rate, log-normal inputs "
		"(--input-median, --input-sigma),\n"
		"                      --output-len tokens each, --seed\n"
		"  --time-scale X --max-requests N --max-input TOKENS (clip)\n"
		"  --preset llama3-8b|llama3-70b|writeup-32x32|tiny   --modes "
		"tcp,single,dual,resident\n"
		"  --link-gbps G (100; 0: no pacing)  --prefill-tok-s T  --prefill-gpus N  "
		"--max-batch N\n"
		"  --weight-mb M (weights read per step; default the preset's)\n"
		"  --window-mb M (kvlane's staging window, single/dual; at least the largest "
		"request)\n"
		"  --kv-budget-mb M  --host-mb M  --slo-ttft-ms MS  --sweep R1,R2,..  --backend "
		"auto|cpu|gpu\n"
		"  --idle poll|yield|hybrid (the NIC lcore's)  --out DIR  --no-plot  --quiet\n"
		"  --hybrid-idle-us U (hybrid: spin U us after work first; 0)  --hybrid-sleep-us U "
		"(the longest nap; 100)\n"
		"  --sock-buf-kb K (tcp's socket buffers; 0: the kernel's autotuning)  --tcp-bufs "
		"N "
		"(pinned receive buffers, 2..16; 16)\n"
		"  --tcp-buf-kb K (their size, a multiple of the KV block; 256)  --send-kb K "
		"(tcp's "
		"bytes per send() call; 1024)\n"
		"  --fill-threads N (the prefill side's pattern fill of the tier, 1..16; 4)\n"
		"  --baseline-load blocking|background (tcp's and single's KV load: the decode "
		"step that\n"
		"                      takes a request in waits for its KV, as a synchronous "
		"connector; or fetched\n"
		"                      while the batch decodes, as an asynchronous one; dual "
		"always prefetches; blocking)\n"
		"  --calibrate-prefill (time a bf16 GEMM of the preset's width on the GPU once and "
		"use its rate)\n"
		"  --prefill model|real (model: prompt tokens / --prefill-tok-s, the KV a pattern; "
		"real: the preset's\n"
		"                      layers computed on the GPU per prompt, their KV moved and "
		"checked by checksum;\n"
		"                      llama3-8b, writeup-32x32; model)\n"
		"  --prefill-priority decode|equal (real: decode's CUDA stream first, the "
		"prefill's last; or both\n"
		"                      at the default priority; decode)\n"
		"  --prefill-peer (real: single's and dual's prefill side a process of its own, "
		"its KV in its VRAM\n"
		"                      on --prefill-device N (0), read as a kvlane peer's: ipc on "
		"one host;\n"
		"                      tcp's prefill in its sender process on that GPU; "
		"resident's stays here)\n",
		p);
}

/* Option --@opt's value @v, one of @a and @b: *@second whether it is @b; -1 (said why) for
 * anything else. */
static int choice(const char *opt, const char *v, const char *a, const char *b, bool *second)
{
	if (strcmp(v, a) && strcmp(v, b)) {
		fprintf(stderr, "serve-bench: --%s %s: give %s or %s\n", opt, v, a, b);
		return -1;
	}
	*second = !strcmp(v, b);
	return 0;
}

static const struct sb_shape *find_preset(const char *n)
{
	for (unsigned i = 0; i < sizeof(presets) / sizeof(presets[0]); i++)
		if (!strcmp(presets[i].name, n))
			return &presets[i];
	return NULL;
}

static bool mode_on(enum mode m)
{
	const char *p = o.modes;
	size_t l = strlen(mode_name[m]);

	while ((p = strstr(p, mode_name[m])) != NULL) {
		if ((p == o.modes || p[-1] == ',') && (p[l] == 0 || p[l] == ','))
			return true;
		p += l;
	}
	return false;
}

static void params_json(FILE *f)
{
	/* the trace's path as a JSON string (quotes, backslashes, control bytes escaped) */
	json_t *js = json_string(o.trace ? o.trace : "");
	char *trace = js ? json_dumps(js, JSON_ENCODE_ANY) : NULL;

	fprintf(f,
		"{\"preset\": \"%s\", \"layers\": %u, \"kv_heads\": %u, \"head_dim\": %u, "
		"\"q_heads\": %u, \"block_tokens\": %u, \"block_bytes\": %u, "
		"\"kv_bytes_per_token\": %u, "
		"\"weight_bytes\": %llu, \"backend\": \"%s\", \"link_gbps\": %g, \"window_mb\": "
		"%llu, "
		"\"prefill_tok_s\": %g, \"prefill_gpus\": %u, \"max_batch\": %u, \"kv_budget_mb\": "
		"%llu, "
		"\"host_mb\": %llu, \"slo_ttft_ms\": %g, \"trace\": %s, \"synthetic\": %s, "
		"\"rate\": %g, \"input_median\": %g, \"input_sigma\": %g, \"output_len\": %u, "
		"\"seed\": %llu, \"time_scale\": %g, \"max_requests\": %u, \"max_input\": %u, "
		"\"requests\": %u, \"clipped\": %u, \"idle_policy\": \"%s\", \"host_cores\": %.0f, "
		"\"prefill_calibrated_flops\": %.4g, \"sock_buf_kb\": %llu, \"tcp_bufs\": %u, "
		"\"fill_threads\": %u, \"tcp_buf_kb\": %llu, \"send_kb\": %llu, "
		"\"hybrid_idle_us\": %u, \"hybrid_sleep_us\": %u, \"baseline_load\": \"%s\", "
		"\"prefill\": \"%s\", \"prefill_priority\": \"%s\", \"modelled\": \"the link "
		"between the prefill and decode "
		"sides (its rate, --link-gbps, a token bucket)%s\", "
		"\"real\": \"decode compute, the KV copies into the decode side's memory (socket + "
		"CPU copy for tcp; kvlane's scheduler and tier transport for single/dual), every "
		"byte checked\", \"dma_source\": \"the decode process's own host tier (a kvlane "
		"segment, pinned pool with a GPU), filled by a prefill thread\"}",
		shape.name, shape.layers, shape.kv_heads, shape.head_dim, shape.q_heads,
		SB_BLOCK_TOKENS, bb, bb / SB_BLOCK_TOKENS * shape.layers,
		(unsigned long long)shape.weight_bytes, be->name, o.link_gbps,
		(unsigned long long)o.window_mb, o.prefill_tok_s, o.prefill_gpus, o.max_batch,
		(unsigned long long)o.budget_mb, (unsigned long long)o.host_mb, o.slo_ttft_ms,
		trace ? trace : "\"\"", o.synthetic ? "true" : "false", o.sy.rate,
		o.sy.input_median, o.sy.input_sigma, o.sy.output, (unsigned long long)o.sy.seed,
		o.to.time_scale, o.to.max_requests, o.to.max_input, tr.n, tr.clipped, o.idle,
		host_cores(), calib_flops, (unsigned long long)o.sock_buf_kb, o.tcp_bufs,
		o.fill_threads, (unsigned long long)o.tcp_buf_kb, (unsigned long long)o.send_kb,
		o.hybrid_idle_us, o.hybrid_sleep_us, o.load, o.prefill,
		o.pf_equal ? "equal" : "decode",
		o.pf_real ? "; the prefill is real: the preset's layers on the decode GPU, the KV "
			    "they produce is what moves"
			  : "; the prefill time (prompt tokens / prefill_tok_s)");
	free(trace);
	json_decref(js);
}

/* --calibrate-prefill: a bf16 GEMM of 8192 prompt tokens by the preset's width (q heads x
 * head dim, square), timed on the GPU in a child (the parent must not initialise CUDA: it
 * forks the modes), its rate over 2 FLOP per parameter per token = prefill tokens/s per GPU. */
static int calibrate_prefill(void)
{
	uint32_t w = shape.q_heads * shape.head_dim;
	int fd[2], st = 0;
	pid_t pid;

	if (!be->device) {
		fprintf(stderr, "serve-bench: --calibrate-prefill needs the GPU backend (%s)\n",
			be->name);
		return -1;
	}
#ifdef KVL_SB_GPU
	if (pipe(fd) < 0)
		return -1;
	fflush(NULL);
	pid = fork();
	if (pid == 0) {
		char why[256];
		double f = 0;

		close(fd[0]);
		if (kvl_sb_gpu_gemm_rate(8192, w, w, &f, why, sizeof(why)) < 0) {
			fprintf(stderr, "serve-bench: --calibrate-prefill: %s\n", why);
			_exit(1);
		}
		_exit(write(fd[1], &f, sizeof(f)) == sizeof(f) ? 0 : 1);
	}
	close(fd[1]);
	if (read(fd[0], &calib_flops, sizeof(calib_flops)) != sizeof(calib_flops))
		calib_flops = 0;
	close(fd[0]);
	waitpid(pid, &st, 0);
#else
	(void)fd;
	(void)st;
	(void)pid;
	(void)w;
#endif
	if (calib_flops <= 0)
		return -1;
	printf("prefill calibrated: a bf16 GEMM 8192 x %u x %u (the bench's own WMMA tensor-core "
	       "kernel, checked; not cuBLAS) ran at %.1f TFLOP/s: %.0f prompt tokens/s per GPU at "
	       "2 FLOP per parameter per token (%.2fe9 parameters)%s\n",
	       w, w, calib_flops / 1e12, calib_flops / (2 * shape.params), shape.params / 1e9,
	       o.prefill_tok_s > 0 ? "; --prefill-tok-s given, so not used" : "; used");
	if (o.prefill_tok_s <= 0)
		o.prefill_tok_s = calib_flops / (2 * shape.params);
	return 0;
}

/* Sizes that cannot work, refused before anything starts, naming the option to change. */
static int sizes_fit(void)
{
	uint64_t big = 0, layer = 0;
	bool tier = mode_on(M_SINGLE) || mode_on(M_DUAL);

	for (unsigned i = 0; i < tr.n; i++) {
		uint64_t nb = (tr.r[i].input + SB_BLOCK_TOKENS - 1) / SB_BLOCK_TOKENS;

		if (nb * shape.layers * bb > big)
			big = nb * shape.layers * bb;
		if (nb * bb > layer)
			layer = nb * bb;
	}
	if (tier && big > (o.host_mb << 20)) {
		fprintf(stderr,
			"serve-bench: the prefill side's host tier (--host-mb %llu) cannot hold "
			"the "
			"largest request's KV (%llu MiB): raise --host-mb to at least %llu, or "
			"clip "
			"with --max-input\n",
			(unsigned long long)o.host_mb, (unsigned long long)(big >> 20),
			(unsigned long long)((big + (1u << 20) - 1) >> 20));
		return -1;
	}
	if (tier && layer > (o.window_mb << 20) && layer > (o.budget_mb << 20)) {
		fprintf(stderr,
			"serve-bench: one layer of the largest request (%llu MiB) is larger than "
			"kvlane's window (--window-mb %llu): raise --window-mb\n",
			(unsigned long long)(layer >> 20), (unsigned long long)o.window_mb);
		return -1;
	}
	return 0;
}

/* One run of every mode asked for on the current trace; -1 on a failed check. */
static int run_all(const char *tag, double rate, FILE *js, FILE *csv, bool first_run)
{
	struct sum s[N_MODES];
	int rc = 0;
	char p[600];

	snprintf(p, sizeof(p), "%s/%s-trace.jsonl", o.out, tag);
	if (kvl_sb_trace_write(p, &tr) < 0)
		fprintf(stderr, "serve-bench: cannot write %s\n", p);
	for (int m = 0; m < N_MODES; m++) {
		pid_t pid;
		int status;

		s[m].ok = false;
		if (!mode_on(m))
			continue;
		fflush(NULL);
		pid = fork();
		if (pid == 0)
			_exit(run_mode(m, tag));
		waitpid(pid, &status, 0);
		snprintf(p, sizeof(p), "%s/%s-%s.json", o.out, tag, mode_name[m]);
		if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || read_sum(p, &s[m]) < 0) {
			fprintf(stderr, "serve-bench: mode %s failed (%s)\n", mode_name[m], p);
			rc = -1;
			s[m].ok = false;
		}
	}
	printf("\n%s, %u requests, offered %.2f req/s, link %g Gb/s (modelled), backend %s\n",
	       shape.name, tr.n, rate, o.link_gbps, be->name);
	printf("| path | req/s (10-90 %%) | req/s (all) | TTFT p50 s | TTFT p99 s | TPOT p50 ms | "
	       "TPOT p99 ms | gap p99 ms "
	       "| CPU decode %% | CPU prefill %% | compute busy %% | KV GB moved | link load Gb/s "
	       "| "
	       "peak KV GB | refused | delayed "
	       "|\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
	for (int m = 0; m < N_MODES; m++) {
		if (!s[m].ok)
			continue;
		printf("| %s | %.2f | %.2f | %.3f | %.3f | %.2f | %.2f | %.2f | %.0f | %.0f | %.0f "
		       "| "
		       "%.2f | %.1f | %.2f | %u | %u |\n",
		       mode_name[m], s[m].reqps, s[m].reqps_all, s[m].ttft50, s[m].ttft99,
		       s[m].tpot50, s[m].tpot99, s[m].gap99, s[m].cpu_dec, s[m].cpu_pre, s[m].busy,
		       s[m].moved_gb, s[m].link_gbps, s[m].peak_gb, s[m].refused, s[m].delayed);
		fprintf(csv,
			"%s,%g,%s,%.4f,%.4f,%.4f,%.3f,%.3f,%.3f,%.3f,%.1f,%.1f,%.1f,%.3f,%.2f,%.3f,"
			"%u,%u,%u,%.2f,%.2f,%.2f,%.1f,%.1f,%.1f,%.1f,%.1f,%.1f,%.3f,%.3f,%.3f,%u,%."
			"2f,%u,%.3f,%.4f\n",
			tag, rate, mode_name[m], s[m].reqps, s[m].ttft50, s[m].ttft99, s[m].tpot50,
			s[m].tpot99, s[m].gap50, s[m].gap99, s[m].cpu_dec, s[m].cpu_pre, s[m].busy,
			s[m].moved_gb, s[m].link_gbps, s[m].peak_gb, s[m].completed, s[m].refused,
			s[m].delayed, s[m].sock_gbps, s[m].cpu_dec / host_cores(),
			s[m].cpu_pre / host_cores(), s[m].c_loop, s[m].c_lcore, s[m].c_lcore_busy,
			s[m].c_recv, s[m].c_other, s[m].c_fill, s[m].mean_batch, s[m].step_ms,
			s[m].probe_ms, s[m].streamed, s[m].recv_gbps, s[m].stalls, s[m].stall_s,
			s[m].reqps_all);
	}
	if (s[M_TCP].ok && s[M_TCP].sock_s > 0)
		printf("tcp: the socket carried %.2f GB in %.3f s of send() (pacing waits not "
		       "counted): %.2f Gb/s on one connection (iperf3 -P 1 its yardstick); recv() "
		       "%.2f Gb/s into %u pinned %u KiB buffers, %llu KiB a send(); socket buffers "
		       "%s\n",
		       s[M_TCP].moved_gb, s[M_TCP].sock_s, s[M_TCP].sock_gbps, s[M_TCP].recv_gbps,
		       o.tcp_bufs, RCHUNK >> 10, (unsigned long long)o.send_kb,
		       o.sock_buf_kb ? "--sock-buf-kb" : "autotuned");
	/* what each CPU figure holds (% of one core over the run, set-up excluded) */
	printf("cpu, %% of one core over the run: decode = its decode loop (main thread) + NIC "
	       "lcore (rusage; busy: its loop's busy cycles, /kvlane/lcores) + tcp receiver + "
	       "other threads; prefill = pattern fill (the model's work) + moving the bytes\n");
	for (int m = 0; m < N_MODES; m++) {
		char busy[32] = "";

		if (!s[m].ok)
			continue;
		if (m == M_SINGLE || m == M_DUAL)
			snprintf(busy, sizeof(busy),
				 s[m].c_lcore_busy < 0 ? " (busy ?)" : " (busy %.0f)",
				 s[m].c_lcore_busy);
		printf("cpu %s: decode %.0f = loop %.0f + lcore %.0f%s + recv %.0f + other %.0f; "
		       "prefill %.0f = fill %.0f + move %.0f\n",
		       mode_name[m], s[m].cpu_dec, s[m].c_loop, s[m].c_lcore, busy, s[m].c_recv,
		       s[m].c_other, s[m].cpu_pre, s[m].c_fill, s[m].cpu_pre - s[m].c_fill);
	}
	if (s[M_TCP].ok && s[M_DUAL].ok) {
		/* the KV path's CPU, both sides, the fill left out: the NIC lcore by rusage (a
		 * hybrid/poll lcore is on a core while it spins), then by its busy count */
		double t = s[M_TCP].cpu_dec + s[M_TCP].cpu_pre - s[M_TCP].c_fill,
		       d = s[M_DUAL].cpu_dec + s[M_DUAL].cpu_pre - s[M_DUAL].c_fill,
		       db = d - s[M_DUAL].c_lcore + fmax(0, s[M_DUAL].c_lcore_busy);

		printf("cpu dual/tcp, both sides without the fill: %.0f / %.0f = %.2fx (NIC lcore "
		       "by rusage); %.0f / %.0f = %.2fx (NIC lcore by its busy count)\n",
		       d, t, t > 0 ? d / t : NAN, db, t, t > 0 ? db / t : NAN);
	}
	for (int m = 0; m < N_MODES; m++)
		if (s[m].ok)
			printf("steps %s: %.0f, mean batch %.2f, mean step %.2f ms, by batch "
			       "1/2/3/4/5+: %.2f/%.2f/%.2f/%.2f/%.2f ms; weights alone %.2f ms "
			       "(%.2f TB/s of %.2f GB); the batch waited for a load %u times, "
			       "%.3f s\n",
			       mode_name[m], s[m].steps, s[m].mean_batch, s[m].step_ms,
			       s[m].by_batch_ms[0], s[m].by_batch_ms[1], s[m].by_batch_ms[2],
			       s[m].by_batch_ms[3], s[m].by_batch_ms[4], s[m].probe_ms,
			       shape.weight_bytes / (s[m].probe_ms / 1e3) / 1e12,
			       shape.weight_bytes / 1e9, s[m].stalls, s[m].stall_s);
	/* where the decode loop's CPU goes, and whether a step waits on the GPU or on its
	 * launches (wall from step_begin to step_end's return, against the GPU's event time) */
	for (int m = 0; m < N_MODES; m++)
		if (s[m].ok) {
			double sum = 0;

			printf("loop %s: %.0f:", mode_name[m], s[m].c_loop);
			for (int i = 0; i < N_PH; i++) {
				printf("%s %s %.1f", i ? " +" : "", ph_name[i], s[m].ph[i]);
				sum += s[m].ph[i];
			}
			/* the loop's figure is /proc's, in clock ticks: the phases' sum is finer */
			printf(" = %.1f by its own clock (%% of one core); step wall %.3f ms "
			       "against "
			       "GPU %.3f ms\n",
			       sum, s[m].step_wall_ms, s[m].step_ms);
		}
	for (int m = 0; m < N_MODES; m++)
		if (s[m].ok && s[m].streamed)
			printf("stream %s: %u request%s over the %llu MiB KV budget served by "
			       "streaming its KV from the tier through the window every token\n",
			       mode_name[m], s[m].streamed, s[m].streamed == 1 ? "" : "s",
			       (unsigned long long)o.budget_mb);
	if (s[M_DUAL].ok && s[M_RESIDENT].ok) {
		unsigned same = 0, both = 0;

		for (unsigned i = 0; i < tr.n; i++)
			if (s[M_DUAL].hash[i] && s[M_RESIDENT].hash[i]) {
				both++;
				same += s[M_DUAL].hash[i] == s[M_RESIDENT].hash[i];
			}
		printf("outputs: dual equals resident for %u of %u requests served by both\n", same,
		       both);
		if (same != both)
			rc = -1;
	}
	fprintf(js, "%s\n  {\"tag\": \"%s\", \"rate\": %g, \"modes\": [", first_run ? "" : ",", tag,
		rate);
	for (int m = 0, c = 0; m < N_MODES; m++) {
		FILE *f;
		int ch;

		if (!s[m].ok)
			continue;
		snprintf(p, sizeof(p), "%s/%s-%s.json", o.out, tag, mode_name[m]);
		f = fopen(p, "r");
		fprintf(js, "%s\n", c++ ? "," : "");
		while (f && (ch = fgetc(f)) != EOF)
			fputc(ch, js);
		if (f)
			fclose(f);
	}
	fprintf(js, "]}");
	return rc;
}

int main(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "trace", 1, 0, 't' },
		{ "synthetic", 0, 0, 'S' },
		{ "rate", 1, 0, 'r' },
		{ "input-median", 1, 0, 'I' },
		{ "input-sigma", 1, 0, 'G' },
		{ "output-len", 1, 0, 'O' },
		{ "seed", 1, 0, 's' },
		{ "time-scale", 1, 0, 'T' },
		{ "max-requests", 1, 0, 'n' },
		{ "max-input", 1, 0, 'x' },
		{ "preset", 1, 0, 'p' },
		{ "modes", 1, 0, 'm' },
		{ "link-gbps", 1, 0, 'l' },
		{ "prefill-tok-s", 1, 0, 'P' },
		{ "prefill-gpus", 1, 0, 'g' },
		{ "max-batch", 1, 0, 'b' },
		{ "kv-budget-mb", 1, 0, 'B' },
		{ "host-mb", 1, 0, 'H' },
		{ "slo-ttft-ms", 1, 0, 'L' },
		{ "sweep", 1, 0, 'W' },
		{ "backend", 1, 0, 'k' },
		{ "idle", 1, 0, 'i' },
		{ "hybrid-idle-us", 1, 0, 'y' },
		{ "hybrid-sleep-us", 1, 0, 'Y' },
		{ "out", 1, 0, 'o' },
		{ "no-plot", 0, 0, 'N' },
		{ "window-mb", 1, 0, 'V' },
		{ "weight-mb", 1, 0, 'w' },
		{ "quiet", 0, 0, 'q' },
		{ "sock-buf-kb", 1, 0, 'K' },
		{ "tcp-bufs", 1, 0, 'R' },
		{ "tcp-buf-kb", 1, 0, 'U' },
		{ "send-kb", 1, 0, 'Z' },
		{ "calibrate-prefill", 0, 0, 'C' },
		{ "prefill", 1, 0, 'X' },
		{ "prefill-priority", 1, 0, 'J' },
		{ "prefill-peer", 0, 0, 'E' },
		{ "prefill-device", 1, 0, 'D' },
		{ "fill-threads", 1, 0, 'F' },
		{ "baseline-load", 1, 0, 'A' },
		{ "help", 0, 0, 'h' },
		{ 0, 0, 0, 0 },
	};
	const struct sb_shape *ps;
	char err[1024], p[600];
	FILE *js, *csv;
	int c, rc = 0, dash = -1;

	for (int i = 1; i < argc; i++)
		if (!strcmp(argv[i], "--")) {
			dash = i;
			break;
		}
	o.eal_argc = 1;
	o.eal_argv = argv;
	if (dash > 0) { /* EAL's arguments before "--", the tool's after */
		o.eal_argc = dash;
		argv[dash] = argv[0];
		argc -= dash;
		argv += dash;
	}
	while ((c = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
		switch (c) {
		case 't':
			o.trace = optarg;
			break;
		case 'S':
			o.synthetic = true;
			break;
		case 'r':
			o.sy.rate = atof(optarg);
			break;
		case 'I':
			o.sy.input_median = atof(optarg);
			break;
		case 'G':
			o.sy.input_sigma = atof(optarg);
			break;
		case 'O':
			o.sy.output = (uint32_t)atoi(optarg);
			break;
		case 's':
			o.sy.seed = strtoull(optarg, NULL, 0);
			break;
		case 'T':
			o.to.time_scale = atof(optarg);
			break;
		case 'n':
			o.to.max_requests = (unsigned)atoi(optarg);
			break;
		case 'x':
			o.to.max_input = (uint32_t)atoi(optarg);
			break;
		case 'p':
			o.preset = optarg;
			break;
		case 'm':
			o.modes = optarg;
			break;
		case 'l':
			o.link_gbps = atof(optarg);
			break;
		case 'P':
			o.prefill_tok_s = atof(optarg);
			break;
		case 'g':
			o.prefill_gpus = (unsigned)atoi(optarg);
			break;
		case 'b':
			o.max_batch = (unsigned)atoi(optarg);
			break;
		case 'B':
			o.budget_mb = strtoull(optarg, NULL, 0);
			break;
		case 'H':
			o.host_mb = strtoull(optarg, NULL, 0);
			break;
		case 'L':
			o.slo_ttft_ms = atof(optarg);
			break;
		case 'W':
			o.sweep = optarg;
			break;
		case 'k':
			o.backend = optarg;
			break;
		case 'i':
			o.idle = optarg;
			break;
		case 'y':
			o.hybrid_idle_us = (unsigned)strtoul(optarg, NULL, 0);
			break;
		case 'Y':
			o.hybrid_sleep_us = (unsigned)strtoul(optarg, NULL, 0);
			break;
		case 'o':
			o.out = optarg;
			break;
		case 'V':
			o.window_mb = strtoull(optarg, NULL, 0);
			break;
		case 'N':
			o.plot = false;
			break;
		case 'w':
			o.weight_mb = strtoull(optarg, NULL, 0);
			break;
		case 'q':
			o.quiet = true;
			break;
		case 'K':
			o.sock_buf_kb = strtoull(optarg, NULL, 0);
			break;
		case 'R':
			o.tcp_bufs = (unsigned)atoi(optarg);
			break;
		case 'U':
			o.tcp_buf_kb = strtoull(optarg, NULL, 0);
			break;
		case 'Z':
			o.send_kb = strtoull(optarg, NULL, 0);
			break;
		case 'C':
			o.calibrate = true;
			break;
		case 'X':
			o.prefill = optarg;
			if (choice("prefill", optarg, "model", "real", &o.pf_real) < 0)
				return 2;
			break;
		case 'J':
			if (choice("prefill-priority", optarg, "decode", "equal", &o.pf_equal) < 0)
				return 2;
			break;
		case 'E':
			o.pf_peer = true;
			break;
		case 'D':
			o.pf_device = atoi(optarg);
			break;
		case 'F':
			o.fill_threads = (unsigned)atoi(optarg);
			break;
		case 'A':
			o.load = optarg;
			if (choice("baseline-load", optarg, "blocking", "background", &o.bg_load) <
			    0)
				return 2;
			break;
		default:
			usage(argv[0]);
			return c == 'h' ? 0 : 2;
		}
	}
	ps = find_preset(o.preset);
	if (ps == NULL || (!o.trace == !o.synthetic) || o.sy.rate <= 0 || o.sy.output == 0 ||
	    o.sy.input_median < 1 || o.to.time_scale <= 0 || o.link_gbps < 0 ||
	    o.prefill_gpus == 0 || o.max_batch == 0 || o.max_batch > 1024 || o.budget_mb == 0 ||
	    o.host_mb == 0 || o.tcp_bufs < 2 || o.tcp_bufs > MAX_RBUF || o.fill_threads == 0 ||
	    o.fill_threads > 16) {
		if (ps == NULL)
			fprintf(stderr, "serve-bench: unknown --preset %s\n", o.preset);
		else
			fprintf(stderr,
				"serve-bench: give --trace FILE or --synthetic (one of them), "
				"and positive rates, lengths, sizes\n");
		usage(argv[0]);
		return 2;
	}
	shape = *ps;
	if (o.weight_mb) /* the preset's KV shape with another weight traffic per step */
		shape.weight_bytes = o.weight_mb << 20;
	bb = sb_block_bytes(&shape);
	/* a receive buffer holds whole KV blocks (each copied on as one piece) */
	if (o.tcp_buf_kb == 0 || o.tcp_buf_kb > (1u << 20) || (o.tcp_buf_kb << 10) % bb ||
	    o.send_kb == 0 || o.send_kb > (1u << 20) || (o.send_kb << 10) > SCHUNK) {
		fprintf(stderr,
			"serve-bench: --tcp-buf-kb %llu must be a positive multiple of the "
			"preset's "
			"%u KiB KV block (at most 1 GiB) and --send-kb %llu in 1..%u\n",
			(unsigned long long)o.tcp_buf_kb, bb >> 10, (unsigned long long)o.send_kb,
			SCHUNK >> 10);
		return 2;
	}
	be = &kvl_sb_cpu;
#ifdef KVL_SB_GPU
	if (strcmp(o.backend, "cpu") != 0) {
		char why[256];
		int st = 0;
		pid_t pid;

		/* asked in a child: the parent forks the modes' processes, and a process that has
		 * initialised CUDA must not fork one that uses it */
		fflush(NULL);
		pid = fork();
		if (pid == 0) {
			int ok = kvl_sb_gpu_present(why, sizeof(why));

			if (!ok)
				fprintf(stderr, "serve-bench: %s\n", why);
			_exit(ok ? 0 : 1);
		}
		waitpid(pid, &st, 0);
		if (WIFEXITED(st) && WEXITSTATUS(st) == 0)
			be = &kvl_sb_gpu;
		else if (!strcmp(o.backend, "gpu")) {
			fprintf(stderr, "serve-bench: --backend gpu: no usable CUDA GPU\n");
			return 77;
		}
	}
#else
	if (!strcmp(o.backend, "gpu")) {
		fprintf(stderr, "serve-bench: --backend gpu: built without CUDA\n");
		return 77;
	}
#endif
	if (o.pf_real && (!be->device || shape.ffn == 0 || o.calibrate)) {
		fprintf(stderr, "serve-bench: --prefill real %s\n",
			!be->device ? "computes the preset's layers on the GPU: it needs the GPU "
				      "backend (--backend gpu, a CUDA build and a GPU)"
			: o.calibrate
				? "computes the prefill itself: --calibrate-prefill (a rate for "
				  "the "
				  "modelled prefill) does not go with it"
				: "runs a whole model's layers: give --preset llama3-8b or "
				  "writeup-32x32 (llama3-70b's weights here are a TP-8 share, tiny "
				  "is the CPU's)");
		return 2;
	}
	if (o.pf_peer && !o.pf_real) {
		fprintf(stderr, "serve-bench: --prefill-peer runs the real prefill in a process of "
				"its own: give --prefill real with it\n");
		return 2;
	}
	if (o.calibrate && calibrate_prefill() < 0)
		return 1;
	if (o.prefill_tok_s <=
	    0) /* a stated model: 2 FLOP per parameter per token at 400 TFLOP/s */
		o.prefill_tok_s = 400e12 / (2 * shape.params);
	if (o.trace) {
		if (kvl_sb_trace_load(o.trace, &o.to, &tr, err, sizeof(err)) < 0) {
			fprintf(stderr, "serve-bench: %s\n", err);
			return 2;
		}
	} else if (kvl_sb_trace_synth(&o.sy, &o.to, &tr) < 0) {
		fprintf(stderr, "serve-bench: out of memory\n");
		return 1;
	}
	if (sizes_fit() < 0)
		return 2;
	if (mkdir(o.out, 0755) < 0 && errno != EEXIST) {
		fprintf(stderr, "serve-bench: %s: %s\n", o.out, strerror(errno));
		return 1;
	}
	printf("kvlane-serve-bench: %s (%u layers, %u KV heads x %u, bf16, %u-token blocks = %u "
	       "KiB of "
	       "KV per token), weights %.2f GB read per step\n",
	       shape.name, shape.layers, shape.kv_heads, shape.head_dim, SB_BLOCK_TOKENS,
	       bb / SB_BLOCK_TOKENS * shape.layers >> 10, shape.weight_bytes / 1e9);
	if (o.pf_real && o.pf_peer)
		snprintf(p, sizeof(p),
			 "prefill real: the preset's layers computed one prompt at a time in "
			 "arrival order, for tcp, single and dual in a process of their own on GPU "
			 "%d%s, for resident on the decode GPU (--prefill-tok-s and --prefill-gpus "
			 "unused)",
			 o.pf_device,
			 o.pf_device == 0 ? " (the decode GPU: two processes time-share it; stream "
					    "priorities do not reach across processes)"
					  : "");
	else if (o.pf_real)
		snprintf(p, sizeof(p),
			 "prefill real: the preset's layers computed on the decode GPU, one prompt "
			 "at a time in arrival order, %s (--prefill-tok-s and --prefill-gpus "
			 "unused)",
			 o.pf_equal ? "both streams at one priority"
				    : "decode's stream at the highest priority");
	else
		snprintf(p, sizeof(p), "prefill modelled at %.0f tokens/s x %u GPUs",
			 o.prefill_tok_s, o.prefill_gpus);
	printf("workload: %s, %u requests%s; %s; decode max batch %u, KV budget %llu MiB, host "
	       "tier %llu MiB; backend %s\n",
	       o.trace ? o.trace : "synthetic", tr.n, tr.clipped ? " (some inputs clipped)" : "", p,
	       o.max_batch, (unsigned long long)o.budget_mb, (unsigned long long)o.host_mb,
	       be->name);
	if (o.synthetic)
		printf("synthetic: Poisson %.3g req/s, input log-normal median %.0f sigma %.2f, "
		       "output %u tokens, seed %llu\n",
		       o.sy.rate, o.sy.input_median, o.sy.input_sigma, o.sy.output,
		       (unsigned long long)o.sy.seed);
	if (o.pf_real)
		printf("modelled: the link (%g Gb/s token bucket%s); real: the prefill (GEMMs, "
		       "RoPE, causal attention of every layer: the bench's own bf16 tensor-core "
		       "kernels, not cuBLAS or FlashAttention), decode compute, the copies into "
		       "the "
		       "decode side's memory, every block checked against the prefill's checksum\n",
		       o.link_gbps, o.link_gbps > 0 ? "" : " off: PCIe/memory ceiling");
	else
		printf("modelled: the link (%g Gb/s token bucket%s) and the prefill time; real: "
		       "decode compute, the copies into the decode side's memory, every byte "
		       "checked\n",
		       o.link_gbps, o.link_gbps > 0 ? "" : " off: PCIe/memory ceiling");
	printf("tcp and single load a request's KV %s; dual prefetches it through kvlane's "
	       "window, layer by layer\n",
	       o.bg_load ? "in the background, while the batch decodes (an asynchronous "
			   "connector)"
			 : "blocking: the decode step that takes it in waits for all of it (a "
			   "synchronous connector, the write-up's baseline)");
	printf("req/s (10-90 %%): the completions from the 10th to the 90th percentile over their "
	       "time; req/s (all): completed / (last completion - first arrival), as vLLM's "
	       "benchmark_serving\n");
	snprintf(p, sizeof(p), "%s/results.json", o.out);
	js = fopen(p, "w");
	snprintf(p, sizeof(p), "%s/results.csv", o.out);
	csv = fopen(p, "w");
	if (js == NULL || csv == NULL) {
		fprintf(stderr, "serve-bench: cannot write in %s\n", o.out);
		return 1;
	}
	fprintf(csv, "run,offered_rate,mode,req_s,ttft_p50_s,ttft_p99_s,tpot_p50_ms,tpot_p99_ms,"
		     "gap_p50_ms,gap_p99_ms,cpu_decode_pct_core,cpu_prefill_pct_core,"
		     "compute_busy_pct,kv_gb_moved,link_load_gbps,peak_kv_gb,completed,refused,"
		     "delayed,socket_gbps,cpu_decode_pct_host,cpu_prefill_pct_host,"
		     "cpu_decode_loop_pct_core,cpu_nic_lcore_pct_core,cpu_nic_lcore_busy_pct_core,"
		     "cpu_tcp_receiver_pct_core,cpu_other_pct_core,cpu_prefill_fill_pct_core,"
		     "mean_batch,mean_step_ms,weights_only_step_ms,streamed,recv_gbps,load_stalls,"
		     "load_stall_s,req_s_all\n");
	fprintf(js, "{\"params\": ");
	params_json(js);
	fprintf(js, ",\n \"runs\": [");
	if (run_all("main",
		    o.synthetic ? o.sy.rate : tr.n / fmax(1e-3, tr.r[tr.n - 1].arrival_ms / 1e3),
		    js, csv, true) < 0)
		rc = 1;
	if (o.sweep && o.synthetic) {
		char *list = strdup(o.sweep), *save = NULL;
		unsigned k = 0;

		for (char *t = strtok_r(list, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
			char tag[32];

			o.sy.rate = atof(t);
			if (o.sy.rate <= 0)
				continue;
			free(tr.r);
			kvl_sb_trace_synth(&o.sy, &o.to, &tr);
			snprintf(tag, sizeof(tag), "sweep%u", k++);
			if (run_all(tag, o.sy.rate, js, csv, false) < 0)
				rc = 1;
		}
		free(list);
	}
	fprintf(js, "]}\n");
	fclose(js);
	fclose(csv);
	printf("results: %s/results.json, %s/results.csv\n", o.out, o.out);
	if (o.plot) {
		/* the PATH's python3 first; then the system's, which has python3-matplotlib when a
		 * virtualenv or pyenv in front of it does not */
		static const char *const py[] = { "python3", "/usr/bin/python3" };
		const char *dir = getenv("KVL_SERVE_PLOT");
		char cmd[1400];
		int st = -1;

		for (unsigned k = 0; k < 2 && st != 0; k++) {
			snprintf(cmd, sizeof(cmd), "%s '%s' '%s/results.json' '%s' 2>%s", py[k],
				 dir ? dir : KVL_SERVE_PLOT_PY, o.out, o.out,
				 k ? "&1" : "/dev/null");
			st = system(cmd);
		}
		if (st != 0)
			fprintf(stderr, "serve-bench: the plots failed (%s)\n", cmd);
	}
	return rc;
}
