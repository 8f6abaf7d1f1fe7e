/* SPDX-License-Identifier: BSD-3-Clause */
/* Decode simulation on the CPU: attention over KV pulled by the scheduler, three fetch modes. */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <rte_eal.h>

#include "kvl_clock.h"
#include "kvlane/kvlane.h"

/*
 * kvlane-sim-bench EAL-ARGS -- -c INI [--set S.K=V]... --peer HOST:PORT [--requests R]
 *        [--tokens T] [--layers L] [--rounds N] [--seed S] [--kv-heads H] [--head-dim D]
 *        [--q-per-kv G] [--vram-steps V] [--shrink-steps X] [--sample-ms M]
 *        [--lockstep 0|1] [--admit-together 0|1]
 *
 * One decode token of a batch of R requests: for each layer (one compute step per request),
 * attention of the request's G x H query heads over its T tokens of K and V, where the KV
 * lives on the peer (a `fill = pattern` segment: layers x {K, V} x blocks) and is pulled over
 * the peer's transport by this process's scheduler (kvl_req_*). One compute thread (this one)
 * serves the R requests: the next step computed is a READY one of the least advanced request,
 * marked DONE right after its kernel. Layer l + 1 of a request needs only its own layer l, so
 * a request may run ahead of the others (--lockstep 1 forbids that, as a GPU kernel over the
 * whole batch per layer would; the scheduler does not reserve the others' floors, so that can
 * stall: docs/sim-bench.md). Each round is one token: the requests are opened, every layer of
 * each is computed, the requests end. Three modes, their rounds interleaved (round n runs the
 * modes in a rotated order, so the VM's noise falls on all three alike):
 *   fetch-all  each request is one step holding all its blocks: nothing of a request is
 *              computed before its whole KV has landed;
 *   window-1   a step per layer, with the budget capped at R x (one step): each request's
 *              window is its floor, one step, so a layer is fetched only after the request's
 *              previous one is DONE (on demand);
 *   vram       a step per layer under a budget of R x V steps (a VRAM-sized window: the
 *              scheduler picks the depth from its estimates); after a third of the round's
 *              steps the budget is capped to R x X steps (free VRAM dropped), after two thirds
 *              restored.
 *
 * The kernel reads KV elements as 16-bit fixed point (int16 / 32768): the pattern's bytes read
 * as bf16 would be Inf or NaN often. Its output, and the sum of every 16-bit word it read, are
 * checked after each round against a reference computed in double precision from
 * kvl_pattern_fill() of the same offsets (the data read directly): the numbers count only
 * when every step of every round matched.
 *
 * Times (CLOCK_MONOTONIC): step latency = from the request's previous DONE (or the round's
 * start, before kvl_req_open) to the end of this step's kernel, so it includes the other
 * requests' kernels run meanwhile, as a token would see them; exposed = time the compute
 * thread polled with no READY step to run; compute = time inside the kernel. The
 * link alone is measured once per round, beside the three modes: a fetch-all round with
 * nothing computed (open to every request READY): overlap efficiency = 1 - exposed /
 * (the mode's bytes at that rate).
 * The scheduler is read through this process's own telemetry socket (/kvlane/sched) every
 * --sample-ms by a thread: budget, bytes in use, sum of windows.
 */

#define MAX_REQ	  16
#define MAX_G	  32
#define N_MODES	  3
#define N_PHASES  4 /* vram: before, during, after the shrink; 3: between rounds */
#define MAX_SMPL  (1u << 20)
#define TEL_BYTES 16384

enum { M_FETCH_ALL = 0, M_WINDOW1 = 1, M_VRAM = 2 };
static const char *const mode_name[N_MODES] = { "fetch-all", "window-1", "vram" };
static const char *const phase_name[3] = { "before", "during", "after" };

struct req {
	kvl_req_t h;
	uint32_t ready; /* READY events seen (steps are READY in order) */
	bool ended;
	int status;
};

/* Per-mode results, over all rounds. */
struct mstat {
	uint64_t *lat;	 /* per request step (layer), ns */
	uint8_t *phase;	 /* vram: the phase of each entry of lat */
	uint64_t *first; /* per request and round: latency of layer 0 */
	uint64_t *token; /* per round: start to the last DONE */
	uint32_t n_lat, n_first, n_rounds;
	uint64_t exposed, compute, fetch_wait, bytes;
	uint64_t steps_ok, steps_bad;
	uint64_t phase_ns[3]; /* vram: wall time in each budget phase, over the rounds */
};

/* Telemetry samples, by tag (mode * N_PHASES + phase). */
struct tstat {
	uint64_t n, n_full, sum_win_full, max_in_use, max_windows, min_budget, max_budget;
	uint64_t over_draining, violations, win_over;
	uint64_t evicted; /* blocks evicted between the previous sample and one of this tag */
};

static struct kvl_runtime *rt;
static kvl_peer_t peer;
static struct kvl_remote_seg seg;
static uint32_t n_req = 4, tokens = 256, n_layers, rounds = 100, seed = 1, kv_heads = 8,
		head_dim = 128, qpk, vram_steps = 4, sample_ms = 5;
static double shrink_steps = 1.5;
static bool admit_together = true; /* open a round's requests under a budget of 0 */
static bool lockstep;	 /* no request computes layer l + 1 before every request computed l */
static uint32_t tpb, nb; /* tokens per block, blocks per request, layer and plane */
static uint64_t step_bytes;
static struct req rq[MAX_REQ];

/* Request descriptors: block j = (layer * 2 + plane) * nb + b. */
static struct kvl_req_block *blk[MAX_REQ];
static uint32_t *first_layered, *first_all, *refs;

static float *qv;	  /* [req][layer][h][g][d] */
static float *out;	  /* [req][layer][h][g][d], this round */
static int64_t *sums;	  /* [req][layer], this round */
static float *ref_out;	  /* as out, from the reference */
static int64_t *ref_sums; /* as sums */
static float *score;	  /* [h][g][tokens] */
static float *kf, *vf;	  /* one converted row each */

static struct mstat ms[N_MODES];
static struct tstat ts[N_MODES * N_PHASES + 1]; /* + between rounds */
static volatile int tag = N_MODES * N_PHASES;	/* what the sampler attributes samples to */
static volatile bool sampler_stop;
static volatile uint64_t last_budget;
static uint64_t shrink_cap; /* vram: the budget while free VRAM is low */
static char tel_path[512];
static uint64_t errors, base_budget;

static void usage(const char *p)
{
	fprintf(stderr,
		"usage: %s EAL-ARGS -- -c INI [--set S.K=V]... --peer HOST:PORT [--requests R] "
		"[--tokens T] [--layers L] [--rounds N] [--seed S] [--kv-heads H] [--head-dim D] "
		"[--q-per-kv G (0: calibrate)] [--vram-steps V] [--shrink-steps X] "
		"[--sample-ms M] [--lockstep 0|1] [--admit-together 0|1]\n",
		p);
	exit(2);
}

/* ---- the kernel ---- */

typedef float v4f __attribute__((vector_size(16)));

static inline float dot(const float *a, const float *b, uint32_t n)
{
	v4f s0 = { 0 }, s1 = { 0 }, s2 = { 0 }, s3 = { 0 }, x, y;

	for (uint32_t i = 0; i < n; i += 16) {
		memcpy(&x, a + i, 16);
		memcpy(&y, b + i, 16);
		s0 += x * y;
		memcpy(&x, a + i + 4, 16);
		memcpy(&y, b + i + 4, 16);
		s1 += x * y;
		memcpy(&x, a + i + 8, 16);
		memcpy(&y, b + i + 8, 16);
		s2 += x * y;
		memcpy(&x, a + i + 12, 16);
		memcpy(&y, b + i + 12, 16);
		s3 += x * y;
	}
	s0 = (s0 + s1) + (s2 + s3);
	return (s0[0] + s0[1]) + (s0[2] + s0[3]);
}

static inline void axpy(float *o, float a, const float *x, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++)
		o[i] += a * x[i];
}

/* One row of @n int16 words as floats in [-1, 1); returns the sum of the words. */
static inline int64_t convert(float *f, const int16_t *w, uint32_t n)
{
	int32_t s = 0;

	for (uint32_t i = 0; i < n; i++) {
		f[i] = (float)w[i] * (1.0f / 32768.0f);
		s += w[i];
	}
	return s;
}

/*
 * Decode attention of one request and layer: @g query heads per KV head (GQA), scores of every
 * query against each of the nb x tpb tokens' K, softmax, weighted sum of V. Blocks are
 * [token][kv head][dim] int16. q and o are [h][g][d].
 */
static int64_t attn(const int16_t *const *kb, const int16_t *const *vb, const float *q, float *o,
		    uint32_t g)
{
	const uint32_t H = kv_heads, D = head_dim, T = nb * tpb;
	const float scale = 1.0f / sqrtf((float)D);
	int64_t sum = 0;

	for (uint32_t b = 0; b < nb; b++)
		for (uint32_t t = 0; t < tpb; t++)
			for (uint32_t h = 0; h < H; h++) {
				sum += convert(kf, kb[b] + ((size_t)t * H + h) * D, D);
				for (uint32_t j = 0; j < g; j++)
					score[(h * g + j) * T + b * tpb + t] =
						dot(q + (size_t)(h * g + j) * D, kf, D) * scale;
			}
	for (uint32_t r = 0; r < H * g; r++) {
		float *s = score + (size_t)r * T, m = s[0], z = 0;

		for (uint32_t i = 1; i < T; i++)
			m = s[i] > m ? s[i] : m;
		for (uint32_t i = 0; i < T; i++) {
			s[i] = expf(s[i] - m);
			z += s[i];
		}
		for (uint32_t i = 0; i < T; i++)
			s[i] /= z;
	}
	memset(o, 0, sizeof(float) * H * g * D);
	for (uint32_t b = 0; b < nb; b++)
		for (uint32_t t = 0; t < tpb; t++)
			for (uint32_t h = 0; h < H; h++) {
				sum += convert(vf, vb[b] + ((size_t)t * H + h) * D, D);
				for (uint32_t j = 0; j < g; j++)
					axpy(o + (size_t)(h * g + j) * D,
					     score[(h * g + j) * T + b * tpb + t], vf, D);
			}
	return sum;
}

/* The same in double precision, plainly, on KV made by kvl_pattern_fill(). */
static int64_t attn_ref(const int16_t *k, const int16_t *v, const float *q, float *o, uint32_t g)
{
	const uint32_t H = kv_heads, D = head_dim, T = nb * tpb;
	double *s = calloc(T, sizeof(double)), *acc = calloc(D, sizeof(double));
	int64_t sum = 0;

	for (size_t i = 0; i < (size_t)T * H * D; i++)
		sum += k[i] + v[i];
	for (uint32_t h = 0; h < H; h++)
		for (uint32_t j = 0; j < g; j++) {
			const float *qq = q + (size_t)(h * g + j) * D;
			double m = -INFINITY, z = 0;

			for (uint32_t t = 0; t < T; t++) {
				double d = 0;

				for (uint32_t e = 0; e < D; e++)
					d += (double)qq[e] *
					     (k[((size_t)t * H + h) * D + e] / 32768.0);
				s[t] = d / sqrt((double)D);
				m = s[t] > m ? s[t] : m;
			}
			for (uint32_t t = 0; t < T; t++)
				z += (s[t] = exp(s[t] - m));
			memset(acc, 0, sizeof(double) * D);
			for (uint32_t t = 0; t < T; t++)
				for (uint32_t e = 0; e < D; e++)
					acc[e] += s[t] / z *
						  (v[((size_t)t * H + h) * D + e] / 32768.0);
			for (uint32_t e = 0; e < D; e++)
				o[(size_t)(h * g + j) * D + e] = (float)acc[e];
		}
	free(s);
	free(acc);
	return sum;
}

/* ---- requests ---- */

static size_t qoff(uint32_t i, uint32_t l)
{
	return ((size_t)i * n_layers + l) * kv_heads * qpk * head_dim;
}

static uint64_t lcg(uint64_t *x)
{
	*x = *x * 6364136223846793005ull + 1442695040888963407ull;
	return *x >> 33;
}

static void build(void)
{
	uint32_t per = n_layers * 2 * nb;

	first_layered = calloc(n_layers + 1, sizeof(uint32_t));
	first_all = calloc(2, sizeof(uint32_t));
	refs = calloc(per, sizeof(uint32_t));
	for (uint32_t j = 0; j < per; j++)
		refs[j] = j;
	for (uint32_t l = 0; l <= n_layers; l++)
		first_layered[l] = l * 2 * nb;
	first_all[1] = per;
	for (uint32_t i = 0; i < n_req; i++) {
		blk[i] = calloc(per, sizeof(struct kvl_req_block));
		for (uint32_t l = 0; l < n_layers; l++)
			for (uint32_t p = 0; p < 2; p++)
				for (uint32_t b = 0; b < nb; b++)
					blk[i][(l * 2 + p) * nb + b] = (struct kvl_req_block){
						.remote_off = kvl_block_offset(&seg.geom, l, p,
									       i * nb + b),
						.remote_seg = seg.id,
						.length = seg.geom.block_bytes,
					};
	}
}

static void alloc_compute(uint32_t g)
{
	size_t qn = (size_t)n_req * n_layers * kv_heads * g * head_dim;
	uint64_t x = 0x5eed0000ull + seed;

	free(qv);
	free(out);
	free(ref_out);
	qv = malloc(qn * sizeof(float));
	out = calloc(qn, sizeof(float));
	ref_out = calloc(qn, sizeof(float));
	/* q in [-6, 6): scores with a standard deviation of about 2, so softmax has peaks */
	for (size_t i = 0; i < qn; i++)
		qv[i] = ((float)(lcg(&x) & 0xffffff) / (float)(1 << 24) * 2.0f - 1.0f) * 6.0f;
}

/* The reference of every request and layer, from the pattern itself. */
static void build_refs(void)
{
	size_t elems = (size_t)nb * tpb * kv_heads * head_dim, bb = seg.geom.block_bytes;
	int16_t *k = malloc(elems * 2), *v = malloc(elems * 2);

	for (uint32_t i = 0; i < n_req; i++)
		for (uint32_t l = 0; l < n_layers; l++) {
			for (uint32_t b = 0; b < nb; b++) {
				kvl_pattern_fill((char *)k + b * bb, bb, seed,
						 blk[i][(l * 2) * nb + b].remote_off);
				kvl_pattern_fill((char *)v + b * bb, bb, seed,
						 blk[i][(l * 2 + 1) * nb + b].remote_off);
			}
			ref_sums[i * n_layers + l] =
				attn_ref(k, v, qv + qoff(i, l), ref_out + qoff(i, l), qpk);
		}
	free(k);
	free(v);
}

static int open_all(int mode)
{
	for (uint32_t i = 0; i < n_req; i++) {
		struct kvl_req_desc d = {
			.blocks = blk[i],
			.n_blocks = n_layers * 2 * nb,
			.n_steps = mode == M_FETCH_ALL ? 1 : n_layers,
			.step_first = mode == M_FETCH_ALL ? first_all : first_layered,
			.step_blocks = refs,
			.user = i,
			/* the scheduler's compute estimate is per class: fetch-all's one long step
			 * must not stand for a layer's compute in the other modes' depth */
			.cls = mode == M_FETCH_ALL ? KVL_REQ_PREFILL : KVL_REQ_DECODE,
		};
		int rc;

		rq[i] = (struct req){ 0 };
		rc = kvl_req_open(rt, peer, &d, &rq[i].h);
		if (rc < 0) {
			fprintf(stderr, "kvl_req_open(%u): %s\n", i, strerror(-rc));
			return rc;
		}
	}
	return 0;
}

static void pump(void)
{
	struct kvl_req_event ev[64];
	unsigned n = kvl_req_poll(rt, ev, 64);

	for (unsigned e = 0; e < n; e++) {
		struct req *r = NULL;

		for (uint32_t i = 0; i < n_req; i++)
			if (rq[i].h == ev[e].req)
				r = &rq[i];
		if (r == NULL)
			continue; /* a request of an earlier round; it has ended */
		if (ev[e].type == KVL_REQ_EV_STEP_READY) {
			r->ready = ev[e].step + 1;
		} else {
			r->ended = true;
			r->status = ev[e].type == KVL_REQ_EV_DONE ? 0 : ev[e].status;
			if (r->status) {
				fprintf(stderr, "request %" PRIu64 " failed: %s\n", r->h,
					kvl_status_name(r->status));
				errors++;
			}
		}
	}
}

static int step_done(uint32_t i, uint32_t step)
{
	int rc;

	while ((rc = kvl_req_step_done(rt, rq[i].h, step)) == -EAGAIN)
		;
	if (rc < 0) {
		fprintf(stderr, "kvl_req_step_done(%u, %u): %s\n", i, step, strerror(-rc));
		errors++;
	}
	return rc;
}

/* Where the K and V blocks of (request, layer) are in staging. */
static int addrs(uint32_t i, uint32_t l, const int16_t **kb, const int16_t **vb)
{
	for (uint32_t p = 0; p < 2; p++)
		for (uint32_t b = 0; b < nb; b++) {
			void *a;
			int rc = kvl_req_block_addr(rt, rq[i].h, (l * 2 + p) * nb + b, &a);

			if (rc < 0) {
				fprintf(stderr, "kvl_req_block_addr: %s\n", strerror(-rc));
				errors++;
				return rc;
			}
			(p ? vb : kb)[b] = a;
		}
	return 0;
}

/* Wait for the end events, so the requests' places are free for the next round. */
static int drain(void)
{
	uint64_t t0 = kvl_now_ns();

	for (;;) {
		uint32_t left = 0;

		pump();
		for (uint32_t i = 0; i < n_req; i++)
			left += !rq[i].ended;
		if (left == 0)
			return 0;
		if (kvl_now_ns() - t0 > 10000000000ull) {
			fprintf(stderr, "requests did not end within 10 s\n");
			errors++;
			return -ETIMEDOUT;
		}
	}
}

/* Cap (or lift, UINT64_MAX) the budget and wait until the scheduler runs under it. */
static void set_budget(uint64_t cap, bool wait)
{
	uint64_t want = cap == UINT64_MAX ? base_budget : cap, t0 = kvl_now_ns();

	kvl_req_budget_cap(rt, cap);
	while (wait && last_budget != want && kvl_now_ns() - t0 < 2000000000ull)
		usleep(200);
	if (wait && last_budget != want) {
		fprintf(stderr, "the scheduler's budget is %" PRIu64 ", not %" PRIu64 "\n",
			last_budget, want);
		errors++;
	}
}

static uint64_t mode_cap(int mode)
{
	if (mode == M_FETCH_ALL)
		return UINT64_MAX;
	if (mode == M_WINDOW1)
		return (uint64_t)n_req * step_bytes;
	return (uint64_t)n_req * vram_steps * step_bytes;
}

/* The request to compute next: its next step READY; the least advanced first (with
 * --lockstep 1 only those at the batch's lowest layer). -1: none yet. */
static int pick_next(const uint32_t *nl, uint32_t api_all)
{
	uint32_t lo = UINT32_MAX;
	int pick = -1;

	for (uint32_t i = 0; i < n_req; i++)
		if (nl[i] < lo)
			lo = nl[i];
	for (uint32_t i = 0; i < n_req; i++) {
		uint32_t st = api_all ? 0 : nl[i];

		if (nl[i] >= n_layers || rq[i].ready <= st || (lockstep && nl[i] != lo))
			continue;
		if (pick < 0 || nl[i] < nl[pick])
			pick = (int)i;
	}
	return pick;
}

/* One token of the batch in @mode; @m NULL: not recorded (warm-up). Returns fetch-all's wait
 * (round start to every request READY). */
static uint64_t round_run(int mode, struct mstat *m, uint32_t g)
{
	const int16_t *kb[256], *vb[256];
	const uint32_t total = n_req * n_layers, all = mode == M_FETCH_ALL;
	uint32_t nl[MAX_REQ] = { 0 }, n_done = 0, n_ready_all = 0;
	uint64_t t_prev[MAX_REQ], t_start, t_phase, wait_all = 0, exp_ns = 0, comp_ns = 0;
	int phase = 0;

	/* The requests are opened under a budget of 0 and admitted together when it is set:
	 * one admitted alone would take a window for several steps, and what it has landed is
	 * not given back when the others' admission shrinks it (see docs/sim-bench.md). */
	set_budget(0, admit_together);
	tag = mode * N_PHASES + (mode == M_VRAM ? 0 : 3);
	t_start = kvl_now_ns();
	if (!admit_together)
		set_budget(mode_cap(mode), false);
	if (open_all(mode) < 0) {
		errors++;
		return 0;
	}
	if (admit_together)
		set_budget(mode_cap(mode), false);
	for (uint32_t i = 0; i < n_req; i++)
		t_prev[i] = t_start;
	t_phase = t_start;
	while (n_done < total && !errors) {
		int pick;
		uint32_t i, st;
		uint64_t t0, t_end;

		pump();
		pick = pick_next(nl, all);
		if (pick < 0) {
			t0 = kvl_now_ns();
			for (;;) {
				pump();
				pick = pick_next(nl, all);
				if (pick >= 0 || errors)
					break;
				if (kvl_now_ns() - t0 > 10000000000ull) {
					fprintf(stderr,
						"%s: no READY step within 10 s (%u of %u steps "
						"done)\n",
						mode_name[mode], n_done, total);
					errors++;
					break;
				}
			}
			exp_ns += kvl_now_ns() - t0;
			if (pick < 0)
				break;
		}
		if (all && n_ready_all < n_req) {
			n_ready_all = 0;
			for (uint32_t j = 0; j < n_req; j++)
				n_ready_all += rq[j].ready > 0;
			if (n_ready_all == n_req)
				wait_all = kvl_now_ns() - t_start;
		}
		i = (uint32_t)pick;
		st = all ? 0 : nl[i];
		if (addrs(i, nl[i], kb, vb) < 0)
			break;
		t0 = kvl_now_ns();
		sums[i * n_layers + nl[i]] =
			attn(kb, vb, qv + qoff(i, nl[i]), out + qoff(i, nl[i]), g);
		t_end = kvl_now_ns();
		comp_ns += t_end - t0;
		if (m) {
			m->lat[m->n_lat] = t_end - t_prev[i];
			m->phase[m->n_lat] = (uint8_t)phase;
			m->n_lat++;
			if (nl[i] == 0)
				m->first[m->n_first++] = t_end - t_prev[i];
		}
		nl[i]++;
		n_done++;
		if (!all || nl[i] == n_layers)
			step_done(i, st);
		t_prev[i] = kvl_now_ns();
		if (mode == M_VRAM &&
		    ((phase == 0 && n_done * 3 >= total) ||
		     (phase == 1 && n_done * 3 >= 2 * total)) &&
		    m) {
			m->phase_ns[phase] += kvl_now_ns() - t_phase;
			t_phase = kvl_now_ns();
		}
		if (mode == M_VRAM && phase == 0 && n_done * 3 >= total) {
			phase = 1;
			tag = mode * N_PHASES + 1;
			set_budget(shrink_cap, false);
		} else if (mode == M_VRAM && phase == 1 && n_done * 3 >= 2 * total) {
			phase = 2;
			tag = mode * N_PHASES + 2;
			set_budget(mode_cap(mode), false);
		}
	}
	if (m) {
		uint64_t last = 0;

		for (uint32_t i = 0; i < n_req; i++)
			last = t_prev[i] > last ? t_prev[i] : last;
		m->token[m->n_rounds] = last - t_start;
		if (mode == M_VRAM)
			m->phase_ns[phase] += last - t_phase;
		m->exposed += exp_ns;
		m->compute += comp_ns;
		m->fetch_wait += wait_all;
		m->bytes += (uint64_t)n_req * n_layers * step_bytes;
		m->n_rounds++;
	}
	tag = N_MODES * N_PHASES;
	drain();
	return wait_all;
}

/* The link alone: every request of a fetch-all round READY, nothing computed meanwhile.
 * Returns the ns from the round's start (before kvl_req_open) to the last READY. */
static uint64_t link_probe(void)
{
	uint64_t t0, t = 0;
	uint32_t ready = 0;

	set_budget(0, admit_together);
	t0 = kvl_now_ns();
	if (!admit_together)
		set_budget(UINT64_MAX, false);
	if (open_all(M_FETCH_ALL) < 0) {
		errors++;
		return 0;
	}
	if (admit_together)
		set_budget(UINT64_MAX, false);
	while (ready < n_req && !errors) {
		pump();
		ready = 0;
		for (uint32_t i = 0; i < n_req; i++)
			ready += rq[i].ready > 0;
		if (kvl_now_ns() - t0 > 10000000000ull) {
			fprintf(stderr, "link probe: not READY within 10 s\n");
			errors++;
		}
	}
	t = kvl_now_ns() - t0;
	for (uint32_t i = 0; i < n_req && !errors; i++)
		step_done(i, 0);
	drain();
	return t;
}

/* Every step of the round against the reference. */
static void check_round(struct mstat *m, uint32_t g)
{
	size_t per = (size_t)kv_heads * g * head_dim;

	for (uint32_t i = 0; i < n_req; i++)
		for (uint32_t l = 0; l < n_layers; l++) {
			const float *a = out + qoff(i, l), *b = ref_out + qoff(i, l);
			bool ok = sums[i * n_layers + l] == ref_sums[i * n_layers + l];

			for (size_t e = 0; e < per && ok; e++)
				ok = fabsf(a[e] - b[e]) <= 2e-5f + 1e-4f * fabsf(b[e]);
			if (ok) {
				m->steps_ok++;
			} else {
				if (m->steps_bad++ < 5)
					fprintf(stderr, "MISMATCH request %u layer %u\n", i, l);
			}
		}
}

/* ---- telemetry: this process's own socket ---- */

static int tel_open(void)
{
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	char buf[TEL_BYTES];
	int fd = socket(AF_UNIX, SOCK_SEQPACKET, 0);

	if (fd < 0)
		return -errno;
	if (strlen(tel_path) >= sizeof(a.sun_path)) {
		close(fd);
		return -ENAMETOOLONG;
	}
	memcpy(a.sun_path, tel_path, strlen(tel_path) + 1);
	if (connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0 ||
	    recv(fd, buf, sizeof(buf), 0) <= 0) {
		int e = errno;

		close(fd);
		return -e;
	}
	return fd;
}

static bool tel_u64(const char *js, const char *key, uint64_t *v)
{
	char k[64];
	const char *p;

	snprintf(k, sizeof(k), "\"%s\":", key);
	p = strstr(js, k);
	if (p == NULL)
		return false;
	p += strlen(k);
	while (*p == ' ' || *p == '[')
		p++;
	*v = strtoull(p, NULL, 10);
	return true;
}

struct smpl {
	uint64_t budget, in_use, windows, orphans, active, evicted, evicted_bytes;
};

static int tel_sched(int fd, struct smpl *s)
{
	char buf[TEL_BYTES];
	ssize_t n;

	if (send(fd, "/kvlane/sched", 13, 0) < 0)
		return -errno;
	n = recv(fd, buf, sizeof(buf) - 1, 0);
	if (n <= 0)
		return -EIO;
	buf[n] = 0;
	if (!tel_u64(buf, "budget", &s->budget) || !tel_u64(buf, "in_use", &s->in_use) ||
	    !tel_u64(buf, "windows", &s->windows) || !tel_u64(buf, "orphan_bytes", &s->orphans) ||
	    !tel_u64(buf, "active", &s->active) || !tel_u64(buf, "evicted_blocks", &s->evicted) ||
	    !tel_u64(buf, "evicted_bytes", &s->evicted_bytes))
		return -EPROTO;
	return 0;
}

/* vram samples go by the budget the snapshot ran under (it may be 1 ms old): the shrunk one
 * is "during", the full one "before" until the restore, "after" from then on. */
static int by_budget(int t, uint64_t budget)
{
	const int v = M_VRAM * N_PHASES;

	if (t < v || t > v + 2)
		return t;
	if (budget == shrink_cap)
		return v + 1;
	return t == v + 1 ? v : t;
}

static void *sampler(void *arg)
{
	int fd = *(int *)arg;
	struct smpl prev = { 0 }, s;
	bool have_prev = false;

	while (!sampler_stop) {
		int t0 = tag;

		if (tel_sched(fd, &s) < 0) {
			errors++;
			fprintf(stderr, "telemetry /kvlane/sched failed\n");
			break;
		}
		last_budget = s.budget;
		if (tag == t0) {
			t0 = by_budget(t0, s.budget);
			struct tstat *t = &ts[t0];

			if (t->n == 0 || s.budget < t->min_budget)
				t->min_budget = s.budget;
			if (s.budget > t->max_budget)
				t->max_budget = s.budget;
			t->n++;
			if (s.active == n_req) {
				t->n_full++;
				t->sum_win_full += s.windows;
			}
			if (s.in_use > t->max_in_use)
				t->max_in_use = s.in_use;
			if (s.windows > t->max_windows)
				t->max_windows = s.windows;
			/* Over the budget is allowed only while what landed before a shrink drains:
			 * the budget unchanged since the last sample and in_use growing is not. */
			if (s.in_use > s.budget) {
				if (have_prev && prev.budget == s.budget && s.in_use > prev.in_use)
					t->violations++;
				else
					t->over_draining++;
			}
			if (s.windows + s.orphans > s.budget)
				t->win_over++;
			if (have_prev)
				t->evicted += s.evicted - prev.evicted;
		}
		prev = s;
		have_prev = true;
		usleep(sample_ms * 1000);
	}
	return NULL;
}

/* ---- results ---- */

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/* Nearest-rank percentile of @n values (sorted in place), in ms. */
static double pct(uint64_t *v, uint32_t n, double p)
{
	uint32_t r;

	if (n == 0)
		return NAN;
	qsort(v, n, sizeof(*v), cmp_u64);
	r = (uint32_t)ceil(p / 100.0 * n);
	return v[r ? r - 1 : 0] / 1e6;
}

static double phase_pct(const struct mstat *m, int ph, double p, uint32_t *cnt)
{
	uint64_t *v = malloc(sizeof(uint64_t) * (m->n_lat + 1));
	uint32_t n = 0;
	double r;

	for (uint32_t i = 0; i < m->n_lat; i++)
		if (m->phase[i] == ph)
			v[n++] = m->lat[i];
	r = pct(v, n, p);
	*cnt = n;
	free(v);
	return r;
}

/* Mean of the sum of windows while all requests were active, in steps per request. */
static double win_steps(const struct tstat *t)
{
	return t->n_full ? (double)t->sum_win_full / t->n_full / n_req / step_bytes : NAN;
}

static void tstat_sum(int mode, struct tstat *o)
{
	*o = (struct tstat){ .min_budget = UINT64_MAX };
	for (int ph = 0; ph < N_PHASES; ph++) {
		const struct tstat *t = &ts[mode * N_PHASES + ph];

		o->n += t->n;
		o->n_full += t->n_full;
		o->sum_win_full += t->sum_win_full;
		o->max_in_use = t->max_in_use > o->max_in_use ? t->max_in_use : o->max_in_use;
		o->max_windows = t->max_windows > o->max_windows ? t->max_windows : o->max_windows;
		if (t->n && t->min_budget < o->min_budget)
			o->min_budget = t->min_budget;
		o->max_budget = t->max_budget > o->max_budget ? t->max_budget : o->max_budget;
		o->over_draining += t->over_draining;
		o->violations += t->violations;
		o->win_over += t->win_over;
	}
}

int main(int argc, char **argv)
{
	const char *sets[32], *ini = NULL, *addr = NULL;
	unsigned n_sets = 0;
	int sep = -1, stage, rc, n, tfd;
	char err[4096];
	struct kvl_remote_seg rs[16];
	pthread_t sth;
	uint32_t layers_opt = 0;

	setvbuf(stdout, NULL, _IOLBF, 0);
	for (int i = 1; i < argc; i++)
		if (strcmp(argv[i], "--") == 0) {
			sep = i;
			break;
		}
	if (sep < 0)
		usage(argv[0]);
	for (int i = sep + 1; i < argc; i++) {
		const char *a = argv[i];

		if (i + 1 >= argc)
			usage(argv[0]);
		if (strcmp(a, "-c") == 0)
			ini = argv[++i];
		else if (strcmp(a, "--set") == 0 && n_sets < 32)
			sets[n_sets++] = argv[++i];
		else if (strcmp(a, "--peer") == 0)
			addr = argv[++i];
		else if (strcmp(a, "--requests") == 0)
			n_req = (uint32_t)atoi(argv[++i]);
		else if (strcmp(a, "--tokens") == 0)
			tokens = (uint32_t)atoi(argv[++i]);
		else if (strcmp(a, "--layers") == 0)
			layers_opt = (uint32_t)atoi(argv[++i]);
		else if (strcmp(a, "--rounds") == 0)
			rounds = (uint32_t)atoi(argv[++i]);
		else if (strcmp(a, "--seed") == 0)
			seed = (uint32_t)atoi(argv[++i]);
		else if (strcmp(a, "--kv-heads") == 0)
			kv_heads = (uint32_t)atoi(argv[++i]);
		else if (strcmp(a, "--head-dim") == 0)
			head_dim = (uint32_t)atoi(argv[++i]);
		else if (strcmp(a, "--q-per-kv") == 0)
			qpk = (uint32_t)atoi(argv[++i]);
		else if (strcmp(a, "--vram-steps") == 0)
			vram_steps = (uint32_t)atoi(argv[++i]);
		else if (strcmp(a, "--shrink-steps") == 0)
			shrink_steps = atof(argv[++i]);
		else if (strcmp(a, "--admit-together") == 0)
			admit_together = atoi(argv[++i]) != 0;
		else if (strcmp(a, "--lockstep") == 0)
			lockstep = atoi(argv[++i]) != 0;
		else if (strcmp(a, "--sample-ms") == 0)
			sample_ms = (uint32_t)atoi(argv[++i]);
		else
			usage(argv[0]);
	}
	if (!ini || !addr || n_req == 0 || n_req > MAX_REQ || rounds == 0 || qpk > MAX_G ||
	    head_dim == 0 || head_dim % 16 || kv_heads == 0 || vram_steps == 0 ||
	    shrink_steps < 1.0 || sample_ms == 0)
		usage(argv[0]);

	struct kvl_start_args a = {
		.eal_argc = sep, .eal_argv = argv, .config = ini, .sets = sets, .n_sets = n_sets
	};
	rt = kvl_start(&a, err, sizeof(err), &stage);
	if (rt == NULL) {
		fprintf(stderr, "kvl_start: %s\n", err);
		return stage;
	}
	rc = kvl_connect(rt, addr, 5000, &peer, err, sizeof(err));
	if (rc < 0) {
		fprintf(stderr, "kvl_connect %s: %s\n", addr, err);
		kvl_stop(rt);
		return 1;
	}
	n = kvl_peer_segments(rt, peer, rs, 16);
	if (n <= 0) {
		fprintf(stderr, "the peer offers no segment\n");
		kvl_stop(rt);
		return 1;
	}
	seg = rs[0];
	tpb = seg.geom.block_bytes / (kv_heads * head_dim * 2);
	nb = tpb ? tokens / tpb : 0;
	n_layers = layers_opt ? layers_opt : seg.geom.layers;
	step_bytes = 2ull * nb * seg.geom.block_bytes;
	if (seg.geom.planes != 2 || tpb == 0 ||
	    tpb * kv_heads * head_dim * 2 != seg.geom.block_bytes || nb == 0 ||
	    nb * tpb != tokens || nb > 256 || n_layers > seg.geom.layers || n_layers < 3 ||
	    (uint64_t)n_req * nb > seg.geom.blocks) {
		fprintf(stderr,
			"segment %u x %u x %u x %u B does not fit %u requests of %u tokens "
			"(%u KV heads x %u dims x int16 per token and plane, >= 3 layers)\n",
			seg.geom.layers, seg.geom.planes, seg.geom.blocks, seg.geom.block_bytes,
			n_req, tokens, kv_heads, head_dim);
		kvl_stop(rt);
		return 1;
	}
	printf("sim-bench: peer %s, segment \"%s\" %u layers x K,V x %u blocks x %u B; %u "
	       "requests x %u tokens (%u blocks of %u tokens) x %u layers; step = %" PRIu64
	       " KiB per request\n",
	       addr, seg.name, seg.geom.layers, seg.geom.blocks, seg.geom.block_bytes, n_req,
	       tokens, nb, tpb, n_layers, step_bytes >> 10);

	snprintf(tel_path, sizeof(tel_path), "%s/dpdk_telemetry.v2", rte_eal_get_runtime_dir());
	tfd = tel_open();
	if (tfd < 0) {
		fprintf(stderr, "telemetry socket %s: %s\n", tel_path, strerror(-tfd));
		kvl_stop(rt);
		return 1;
	}
	{
		struct smpl s;

		if (tel_sched(tfd, &s) < 0 || s.budget == 0) {
			fprintf(stderr, "/kvlane/sched: no scheduler ([sched] staging_mb = 0?)\n");
			kvl_stop(rt);
			return 1;
		}
		base_budget = last_budget = s.budget;
	}
	if (base_budget < (uint64_t)n_req * n_layers * step_bytes ||
	    base_budget < (uint64_t)n_req * vram_steps * step_bytes) {
		fprintf(stderr,
			"budget %" PRIu64 " MiB: fetch-all needs %" PRIu64
			" MiB (every request whole at once)\n",
			base_budget >> 20, ((uint64_t)n_req * n_layers * step_bytes) >> 20);
		kvl_stop(rt);
		return 1;
	}
	shrink_cap = (uint64_t)((double)n_req * shrink_steps * (double)step_bytes);
	pthread_create(&sth, NULL, sampler, &tfd);

	build();
	score = malloc(sizeof(float) * kv_heads * MAX_G * nb * tpb);
	kf = malloc(sizeof(float) * head_dim);
	vf = malloc(sizeof(float) * head_dim);
	sums = calloc((size_t)n_req * n_layers, sizeof(int64_t));
	ref_sums = calloc((size_t)n_req * n_layers, sizeof(int64_t));

	/* Calibration: the link alone (fetch-all, nothing computed), then the kernel at 1 and 8
	 * query heads per KV head, so that compute per step comes near transfer per step. */
	uint64_t w = 0, c1 = 0, c8 = 0;
	double tx_step_ns;

	uint64_t probes[5];

	alloc_compute(MAX_G);
	round_run(M_FETCH_ALL, NULL, 1); /* warms the connections and staging */
	for (int r = 0; r < 5; r++)
		probes[r] = link_probe();
	w = (uint64_t)(pct(probes, 5, 50) * 1e6);
	tx_step_ns = (double)w / n_layers / n_req;
	if (open_all(M_FETCH_ALL) == 0) {
		const int16_t *kb[256], *vb[256];

		for (uint32_t i = 0; i < n_req; i++)
			while (rq[i].ready == 0 && !errors)
				pump();
		for (uint32_t l = 0; l < n_layers && !errors; l++) {
			uint64_t t0;

			addrs(0, l, kb, vb);
			t0 = kvl_now_ns();
			attn(kb, vb, qv, out, 1);
			c1 += kvl_now_ns() - t0;
			t0 = kvl_now_ns();
			attn(kb, vb, qv, out, 8);
			c8 += kvl_now_ns() - t0;
		}
		for (uint32_t i = 0; i < n_req; i++)
			step_done(i, 0);
		drain();
	}
	if (errors) {
		kvl_stop(rt);
		return 1;
	}
	{
		double b = ((double)c8 - (double)c1) / 7 / n_layers, a0 = (double)c1 / n_layers - b;
		uint32_t g = b > 0 ? (uint32_t)lround((tx_step_ns - a0) / b) : 1;

		if (qpk == 0)
			qpk = g < 1 ? 1 : g > MAX_G ? MAX_G : g;
		printf("calibration: link alone %.2f ms per request step (%.0f MB/s); kernel %.2f "
		       "ms "
		       "+ %.2f ms per query head per KV head; q-per-kv %u%s -> %.2f ms compute per "
		       "request step\n",
		       tx_step_ns / 1e6, step_bytes / tx_step_ns * 1e3, a0 / 1e6, b / 1e6, qpk,
		       g == qpk ? " (calibrated)" : " (given)", (a0 + b * qpk) / 1e6);
	}
	alloc_compute(qpk);
	build_refs();

	for (int m = 0; m < N_MODES; m++) {
		ms[m].lat = calloc((size_t)rounds * n_req * n_layers, sizeof(uint64_t));
		ms[m].phase = calloc((size_t)rounds * n_req * n_layers, 1);
		ms[m].first = calloc((size_t)rounds * n_req, sizeof(uint64_t));
		ms[m].token = calloc(rounds, sizeof(uint64_t));
	}
	uint64_t t_all = kvl_now_ns(), link_ns = 0, link_bytes = 0;

	for (uint32_t r = 0; r < rounds && !errors; r++) {
		link_ns += link_probe();
		link_bytes += (uint64_t)n_req * n_layers * step_bytes;
		for (int j = 0; j < N_MODES && !errors; j++) {
			int m = (int)((r + j) % N_MODES);

			round_run(m, &ms[m], qpk);
			check_round(&ms[m], qpk);
		}
	}
	t_all = kvl_now_ns() - t_all;
	sampler_stop = true;
	pthread_join(sth, NULL);
	struct smpl fin = { 0 };

	if (tel_sched(tfd, &fin) < 0)
		errors++;
	close(tfd);
	kvl_stop(rt);

	/* ---- report ---- */
	double link_ns_per_byte = (double)link_ns / link_bytes;
	uint64_t bad = 0, viol = 0;
	char js[8192];
	size_t o = 0;

	printf("\n%u rounds per mode (one token of %u requests x %u layers each), %.1f s; link "
	       "alone (a fetch-all round per round, nothing computed): %.0f MB/s = %.2f ms per "
	       "request step\n",
	       rounds, n_req, n_layers, t_all / 1e9, 1e3 / link_ns_per_byte,
	       step_bytes * link_ns_per_byte / 1e6);
	o += snprintf(js + o, sizeof(js) - o,
		      "{\"requests\": %u, \"tokens\": %u, \"layers\": %u, \"step_bytes\": %" PRIu64
		      ", \"q_per_kv\": %u, \"rounds\": %u, \"link_mbps\": %.1f, \"modes\": {",
		      n_req, tokens, n_layers, step_bytes, qpk, rounds, 1e3 / link_ns_per_byte);
	printf("\n%-10s %8s %8s %9s %9s %9s %9s %9s %7s %9s %11s %9s\n", "mode", "step_p50",
	       "step_p99", "first_p50", "token_p50", "compute", "xfer", "exposed", "overlap",
	       "win_steps", "max_in_use", "verified");
	printf("%-10s %8s %8s %9s %9s %9s %9s %9s %7s %9s %11s %9s\n", "", "ms", "ms", "ms", "ms",
	       "ms/step", "ms/step", "ms/step", "eff", "per req", "/budget", "steps");
	for (int m = 0; m < N_MODES; m++) {
		struct mstat *s = &ms[m];
		struct tstat t;
		uint32_t nl = s->n_lat;
		double xfer = s->bytes * link_ns_per_byte, eff = 1 - s->exposed / xfer;
		double p50 = pct(s->lat, nl, 50), p99 = pct(s->lat, nl, 99);
		double f50 = pct(s->first, s->n_first, 50), t50 = pct(s->token, s->n_rounds, 50);

		tstat_sum(m, &t);
		bad += s->steps_bad;
		viol += t.violations + t.win_over;
		printf("%-10s %8.2f %8.2f %9.2f %9.2f %9.3f %9.3f %9.3f %7.2f %9.2f %5.1f/%-5.1f "
		       "%4" PRIu64 "/%" PRIu64 "\n",
		       mode_name[m], p50, p99, f50, t50, s->compute / 1e6 / nl, xfer / 1e6 / nl,
		       s->exposed / 1e6 / nl, eff, win_steps(&t), t.max_in_use / 1048576.0,
		       t.max_budget / 1048576.0, s->steps_ok, s->steps_ok + s->steps_bad);
		o += snprintf(
			js + o, sizeof(js) - o,
			"%s\"%s\": {\"step_p50_ms\": %.3f, \"step_p99_ms\": %.3f, "
			"\"first_step_p50_ms\": %.3f, \"token_p50_ms\": %.3f, "
			"\"compute_ms\": %.1f, \"xfer_alone_ms\": %.1f, \"exposed_ms\": %.1f, "
			"\"overlap_eff\": %.3f, \"win_steps\": %.2f, \"max_in_use\": %" PRIu64
			", \"samples\": %" PRIu64 ", \"over_draining\": %" PRIu64
			", \"violations\": %" PRIu64 ", \"steps_bad\": %" PRIu64,
			m ? ", " : "", mode_name[m], p50, p99, f50, t50, s->compute / 1e6,
			xfer / 1e6, s->exposed / 1e6, eff, win_steps(&t), t.max_in_use, t.n,
			t.over_draining, t.violations + t.win_over, s->steps_bad);
		if (m == M_VRAM) {
			o += snprintf(js + o, sizeof(js) - o, ", \"phases\": {");
			for (int ph = 0; ph < 3; ph++) {
				const struct tstat *p = &ts[M_VRAM * N_PHASES + ph];
				uint32_t cnt;
				double q50 = phase_pct(s, ph, 50, &cnt),
				       q99 = phase_pct(s, ph, 99, &cnt);

				o += snprintf(
					js + o, sizeof(js) - o,
					"%s\"%s\": {\"steps\": %u, \"time_s\": %.3f, \"p50_ms\": "
					"%.3f, \"p99_ms\": %.3f, \"win_steps\": %.2f, "
					"\"min_budget\": %" PRIu64 ", \"max_in_use\": %" PRIu64
					", \"evicted\": %" PRIu64 "}",
					ph ? ", " : "", phase_name[ph], cnt, s->phase_ns[ph] / 1e9,
					q50, q99, win_steps(p), p->min_budget, p->max_in_use,
					p->evicted);
			}
			o += snprintf(js + o, sizeof(js) - o, "}");
		}
		o += snprintf(js + o, sizeof(js) - o, "}");
	}
	printf("\nvram, by the budget in force (%u layers per token: first third %u steps ahead, "
	       "middle third capped at %.1f, last third restored):\n",
	       n_layers, vram_steps, shrink_steps);
	printf("%-8s %6s %8s %8s %8s %9s %11s %11s %8s %8s %8s\n", "phase", "steps", "time_s",
	       "p50_ms", "p99_ms", "win_steps", "budget_MiB", "in_use_max", "samples", "over*",
	       "evicted");
	for (int ph = 0; ph < 3; ph++) {
		const struct tstat *p = &ts[M_VRAM * N_PHASES + ph];
		uint32_t cnt;
		double q50 = phase_pct(&ms[M_VRAM], ph, 50, &cnt),
		       q99 = phase_pct(&ms[M_VRAM], ph, 99, &cnt);

		printf("%-8s %6u %8.2f %8.2f %8.2f %9.2f %5.1f-%-5.1f %11.1f %8" PRIu64 " %8" PRIu64
		       " %8" PRIu64 "\n",
		       phase_name[ph], cnt, ms[M_VRAM].phase_ns[ph] / 1e9, q50, q99, win_steps(p),
		       p->min_budget / 1048576.0, p->max_budget / 1048576.0,
		       p->max_in_use / 1048576.0, p->n, p->over_draining, p->evicted);
	}
	printf("* samples with in_use over a budget that had just shrunk (landed KV is not "
	       "dropped; allowed while it drains). Violations (in_use growing over an unchanged "
	       "budget, or windows + orphans over it): %" PRIu64 "\n",
	       viol);
	viol += ts[N_MODES * N_PHASES].violations + ts[N_MODES * N_PHASES].win_over;
	snprintf(js + o, sizeof(js) - o,
		 "}, \"evicted_blocks\": %" PRIu64 ", \"evicted_bytes\": %" PRIu64
		 ", \"steps_bad\": %" PRIu64 ", \"violations\": %" PRIu64 ", \"errors\": %" PRIu64
		 ", \"result\": \"%s\"}",
		 fin.evicted, fin.evicted_bytes, bad, viol, errors,
		 bad || viol || errors ? "fail" : "ok");
	printf("SIMBENCH %s\n", js);
	return bad || viol || errors ? 1 : 0;
}
