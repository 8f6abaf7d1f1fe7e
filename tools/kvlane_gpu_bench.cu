/* SPDX-License-Identifier: BSD-3-Clause */
/* GPU path benchmark: paged decode attention fed from a pinned-host KV tier through cudma. */
#include <cuda_runtime.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include <algorithm>
#include <vector>

#include "gpu_attn.cuh"
#include "kvl_clock.h"
#include "gpusig.h"
#include "xport_cudma.h"

#define CK(x)                                                                                  \
	do {                                                                                   \
		cudaError_t ce_ = (x);                                                         \
		if (ce_ != cudaSuccess) {                                                      \
			fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x,             \
				cudaGetErrorString(ce_));                                      \
			exit(1);                                                               \
		}                                                                              \
	} while (0)
#define DIE(...)                                                                               \
	do {                                                                                   \
		fprintf(stderr, __VA_ARGS__);                                                  \
		fprintf(stderr, "\n");                                                         \
		exit(1);                                                                       \
	} while (0)

static const double GB = 1e9;
static const size_t MiB = 1u << 20;

static double cpu_s(void)
{
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	return ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 + ru.ru_stime.tv_sec +
	       ru.ru_stime.tv_usec / 1e6;
}

static double pct(std::vector<double> v, double p)
{
	if (v.empty())
		return NAN;
	std::sort(v.begin(), v.end());
	size_t i = (size_t)(p * (v.size() - 1) + 0.5);
	return v[i];
}

/* Random bf16 in [-1, 1): a hash of the index, so any buffer is reproducible. */
static void fill(void *p, size_t bytes, uint64_t seed)
{
	att_fill_kernel<<<1024, 256>>>((__nv_bfloat16 *)p, bytes / 2, seed);
	CK(cudaGetLastError());
}


/* ---------------- ceilings ---------------- */

struct ceil_t {
	double hbm_copy;     /* D2D cudaMemcpy, (read + written) / s */
	double h2d_big;	     /* one 1 GiB pinned host->device copy */
	double h2d_each[3];  /* 16 KiB, 64 KiB, 2 MiB blocks, one cudaMemcpyAsync each */
};

static const uint32_t UNIT[3] = { 16384, 65536, 2u << 20 };

static double time_events(cudaStream_t st, cudaEvent_t e0, cudaEvent_t e1)
{
	float ms;

	CK(cudaEventSynchronize(e1));
	CK(cudaEventElapsedTime(&ms, e0, e1));
	(void)st;
	return ms / 1e3;
}

static struct ceil_t measure_ceilings(cudaStream_t st)
{
	struct ceil_t c;
	cudaEvent_t e0, e1;
	size_t big = 1ull << 30;
	void *d0, *d1, *h;
	std::vector<double> t;

	CK(cudaEventCreate(&e0));
	CK(cudaEventCreate(&e1));
	CK(cudaMalloc(&d0, 4 * big));
	CK(cudaMalloc(&d1, 4 * big));
	fill(d0, 4 * big, 1);
	CK(cudaDeviceSynchronize());
	for (int i = 0; i < 6; i++) {
		CK(cudaEventRecord(e0, st));
		CK(cudaMemcpyAsync(d1, d0, 4 * big, cudaMemcpyDeviceToDevice, st));
		CK(cudaEventRecord(e1, st));
		t.push_back(time_events(st, e0, e1));
	}
	c.hbm_copy = 2.0 * 4 * big / pct(t, 0.5);
	CK(cudaFree(d1));
	CK(cudaHostAlloc(&h, big, cudaHostAllocMapped));
	memset(h, 1, big);
	t.clear();
	for (int i = 0; i < 6; i++) {
		CK(cudaEventRecord(e0, st));
		CK(cudaMemcpyAsync(d0, h, big, cudaMemcpyHostToDevice, st));
		CK(cudaEventRecord(e1, st));
		t.push_back(time_events(st, e0, e1));
	}
	c.h2d_big = big / pct(t, 0.5);
	for (int u = 0; u < 3; u++) {
		size_t n = (256 * MiB) / UNIT[u];
		std::vector<size_t> perm(n);

		for (size_t i = 0; i < n; i++)
			perm[i] = (i * 7919) % n; /* scattered sources */
		t.clear();
		for (int r = 0; r < 4; r++) {
			CK(cudaEventRecord(e0, st));
			for (size_t i = 0; i < n; i++)
				CK(cudaMemcpyAsync((char *)d0 + i * UNIT[u],
						   (char *)h + perm[i] * UNIT[u], UNIT[u],
						   cudaMemcpyHostToDevice, st));
			CK(cudaEventRecord(e1, st));
			t.push_back(time_events(st, e0, e1));
		}
		c.h2d_each[u] = 256.0 * MiB / pct(t, 0.5);
	}
	CK(cudaFreeHost(h));
	CK(cudaFree(d0));
	CK(cudaEventDestroy(e0));
	CK(cudaEventDestroy(e1));
	return c;
}

/* ---------------- attention: check and standalone speed ---------------- */

static void att_launch(struct att_args a, int B, cudaStream_t st)
{
	dim3 grid(a.splits, ATT_KVH, B);

	att_split_kernel<<<grid, ATT_WARPS * 32, ATT_SMEM, st>>>(a);
	att_reduce_kernel<<<B * ATT_QH, ATT_HD, 0, st>>>(a);
}

struct att_bufs {
	__nv_bfloat16 *q, *out;
	float *po, *pml;
};

static void att_bufs_alloc(struct att_bufs *x, int B, int splits)
{
	CK(cudaMalloc(&x->q, (size_t)B * ATT_QH * ATT_HD * 2));
	CK(cudaMalloc(&x->out, (size_t)B * ATT_QH * ATT_HD * 2));
	CK(cudaMalloc(&x->po, (size_t)B * ATT_QH * splits * ATT_HD * 4));
	CK(cudaMalloc(&x->pml, (size_t)B * ATT_QH * splits * 2 * 4));
}

static struct att_args att_make(const struct att_bufs *x, const uint64_t *table, int nblk,
				int splits, __nv_bfloat16 *out)
{
	struct att_args a;

	a.q = x->q;
	a.table = table;
	a.nblk = nblk;
	a.splits = splits;
	a.part_o = x->po;
	a.part_ml = x->pml;
	a.out = out ? out : x->out;
	a.scale_log2 = (float)(1.0 / sqrt((double)ATT_HD) * 1.4426950408889634);
	return a;
}

/* Float64 reference on the CPU for a small problem; returns ||out - ref|| / ||ref||. */
static double att_check(int B, int nblk, int splits, uint64_t seed)
{
	size_t nb = (size_t)B * nblk, kvb = nb * ATT_BLOCK;
	uint8_t *pool;
	uint64_t *dtab;
	struct att_bufs x;
	std::vector<uint64_t> tab(nb);
	std::vector<uint8_t> hk(kvb);
	std::vector<__nv_bfloat16> hq((size_t)B * ATT_QH * ATT_HD), ho(hq.size());
	std::vector<size_t> perm(nb);
	double num = 0, den = 0;

	CK(cudaMalloc(&pool, kvb));
	CK(cudaMalloc(&dtab, nb * 8));
	att_bufs_alloc(&x, B, splits);
	fill(pool, kvb, seed);
	fill(x.q, hq.size() * 2, seed + 1);
	CK(cudaMemset(x.out, 0xff, hq.size() * 2)); /* NaN poison: every output is written */
	for (size_t i = 0; i < nb; i++)
		perm[i] = (i * 40503 + 17) % nb; /* blocks scattered in the pool */
	for (size_t i = 0; i < nb; i++)
		tab[i] = (uint64_t)(uintptr_t)(pool + perm[i] * ATT_BLOCK);
	CK(cudaMemcpy(dtab, tab.data(), nb * 8, cudaMemcpyHostToDevice));
	att_launch(att_make(&x, dtab, nblk, splits, NULL), B, 0);
	CK(cudaGetLastError());
	CK(cudaDeviceSynchronize());
	CK(cudaMemcpy(hk.data(), pool, kvb, cudaMemcpyDeviceToHost));
	CK(cudaMemcpy(hq.data(), x.q, hq.size() * 2, cudaMemcpyDeviceToHost));
	CK(cudaMemcpy(ho.data(), x.out, ho.size() * 2, cudaMemcpyDeviceToHost));
	for (int b = 0; b < B; b++)
		for (int h = 0; h < ATT_QH; h++) {
			std::vector<const uint8_t *> blk(nblk);
			double r[ATT_HD];

			for (int j = 0; j < nblk; j++)
				blk[j] = hk.data() + perm[(size_t)b * nblk + j] * ATT_BLOCK;
			att_reference(blk.data(), nblk, &hq[((size_t)b * ATT_QH + h) * ATT_HD], h, r);
			for (int i = 0; i < ATT_HD; i++) {
				double got = att_bf2f(ho[((size_t)b * ATT_QH + h) * ATT_HD + i]);

				if (isnan(got))
					return INFINITY;
				num += (got - r[i]) * (got - r[i]);
				den += r[i] * r[i];
			}
		}
	CK(cudaFree(pool));
	CK(cudaFree(dtab));
	CK(cudaFree(x.q));
	CK(cudaFree(x.out));
	CK(cudaFree(x.po));
	CK(cudaFree(x.pml));
	return sqrt(num / den);
}

/* ---------------- the pipeline ---------------- */

enum mode { M_RESIDENT, M_FETCH_ALL, M_ON_DEMAND, M_WINDOW };
static const char *mode_name[] = { "all-resident", "fetch-all", "on-demand(W=1)", "window" };

struct scen {
	const char *name;
	int B, nblk, R, L; /* sequences, blocks each, remote blocks each, layers */
	int splits;
};

struct world {
	struct scen sc;
	size_t slot_bytes;	       /* one layer's remote KV: B * R blocks */
	uint8_t *host;		       /* remote tier: L layers, units permuted */
	uint8_t *res_pool;	       /* resident blocks of every layer */
	uint8_t *res_remote;	       /* the remote blocks, resident too (the floor's copy) */
	std::vector<uint8_t *> slot;   /* staging slots (the window) */
	int wmax;
	uint64_t *tab_res;	       /* [L] tables, all resident */
	uint64_t *tab_slot;	       /* [L][wmax] tables, remote blocks in slot j */
	struct att_bufs x;
	__nv_bfloat16 *out_res, *out_pipe; /* [L] outputs */
	struct kvl_gpusig *sig;
	uint32_t epoch;
	cudaStream_t cst;	       /* the engine's compute stream (one of the two below) */
	cudaStream_t cst_lo, cst_hi;   /* default priority; the device's greatest priority */
	size_t tab_elems;
};

static size_t tab_elems(const struct scen *s)
{
	return (size_t)s->B * s->nblk;
}

static uint64_t *tab_at(uint64_t *t, const struct world *w, int l, int j)
{
	return t + ((size_t)l * w->wmax + j) * w->tab_elems;
}

static void build_tables(struct world *w)
{
	const struct scen *s = &w->sc;
	size_t n = tab_elems(s);
	std::vector<uint64_t> h(n);
	size_t res_per_layer = (size_t)s->B * (s->nblk - s->R) * ATT_BLOCK;

	for (int l = 0; l < s->L; l++) {
		for (int j = -1; j < w->wmax; j++) {
			if (j >= (int)w->slot.size() || (j >= 0 && w->slot[j] == NULL))
				continue;
			for (int b = 0; b < s->B; b++)
				for (int i = 0; i < s->nblk; i++) {
					uint8_t *p;

					if (i < s->R)
						p = (j < 0 ? w->res_remote + l * w->slot_bytes
							   : w->slot[j]) +
						    ((size_t)b * s->R + i) * ATT_BLOCK;
					else
						p = w->res_pool + l * res_per_layer +
						    ((size_t)b * (s->nblk - s->R) + i - s->R) *
							    ATT_BLOCK;
					h[(size_t)b * s->nblk + i] = (uint64_t)(uintptr_t)p;
				}
			CK(cudaMemcpy(j < 0 ? w->tab_res + l * n : tab_at(w->tab_slot, w, l, j),
				      h.data(), n * 8, cudaMemcpyHostToDevice));
		}
	}
}

/* Units of one layer: unit u of the slot comes from host position perm[u]. */
struct units {
	uint32_t size;
	size_t n;
	std::vector<uint32_t> perm;
};

static void world_init(struct world *w, const struct scen *s, int wmax)
{
	size_t res_per_layer = (size_t)s->B * (s->nblk - s->R) * ATT_BLOCK;
	uint8_t *tmp;

	w->sc = *s;
	w->slot_bytes = (size_t)s->B * s->R * ATT_BLOCK;
	w->wmax = wmax;
	w->tab_elems = tab_elems(s);
	int lo, hi;

	CK(cudaDeviceGetStreamPriorityRange(&lo, &hi));
	CK(cudaStreamCreateWithFlags(&w->cst_lo, cudaStreamNonBlocking));
	CK(cudaStreamCreateWithPriority(&w->cst_hi, cudaStreamNonBlocking, hi));
	w->cst = w->cst_lo;
	CK(cudaHostAlloc(&w->host, s->L * w->slot_bytes, cudaHostAllocMapped));
	CK(cudaMalloc(&w->res_pool, res_per_layer * s->L + 1));
	CK(cudaMalloc(&w->res_remote, w->slot_bytes * s->L));
	fill(w->res_pool, res_per_layer * s->L, 11);
	fill(w->res_remote, w->slot_bytes * s->L, 12);
	CK(cudaMalloc(&w->tab_res, w->tab_elems * 8 * s->L));
	CK(cudaMalloc(&w->tab_slot, w->tab_elems * 8 * s->L * wmax));
	att_bufs_alloc(&w->x, s->B, s->splits);
	fill(w->x.q, (size_t)s->B * ATT_QH * ATT_HD * 2, 13);
	CK(cudaMalloc(&w->out_res, (size_t)s->L * s->B * ATT_QH * ATT_HD * 2));
	CK(cudaMalloc(&w->out_pipe, (size_t)s->L * s->B * ATT_QH * ATT_HD * 2));
	(void)tmp;
	w->slot.assign(wmax, NULL);
	char err[256];
	w->sig = kvl_gpusig_new(s->L, err, sizeof(err));
	if (w->sig == NULL)
		DIE("gpusig: %s", err);
	w->epoch = 0;
	CK(cudaDeviceSynchronize());
}

/* Lay the remote KV out in the host tier with units of @u bytes in permuted order. */
static void world_layout(struct world *w, struct units *un, uint32_t u)
{
	const struct scen *s = &w->sc;
	std::vector<uint8_t> lin(w->slot_bytes);

	un->size = u;
	un->n = w->slot_bytes / u;
	un->perm.resize(un->n);
	for (size_t i = 0; i < un->n; i++)
		un->perm[i] = (uint32_t)i;
	srand(42 + u);
	for (size_t i = un->n - 1; i > 0; i--)
		std::swap(un->perm[i], un->perm[(size_t)rand() % (i + 1)]);
	for (int l = 0; l < s->L; l++) {
		CK(cudaMemcpy(lin.data(), w->res_remote + l * w->slot_bytes, w->slot_bytes,
			      cudaMemcpyDeviceToHost));
		for (size_t i = 0; i < un->n; i++)
			memcpy(w->host + l * w->slot_bytes + (size_t)un->perm[i] * u,
			       lin.data() + i * u, u);
	}
}

static int set_slots(struct world *w, int n, struct kvl_cudma_conn *c)
{
	char err[256];

	for (int j = 0; j < w->wmax; j++) {
		if (j < n && w->slot[j] == NULL) {
			if (cudaMalloc(&w->slot[j], w->slot_bytes) != cudaSuccess) {
				cudaGetLastError();
				w->slot[j] = NULL;
				return j;
			}
			if (kvl_cudma_add_local(c, w->slot[j], w->slot_bytes, err, sizeof(err)))
				DIE("%s", err);
		} else if (j >= n && w->slot[j] != NULL) {
			CK(cudaFree(w->slot[j]));
			w->slot[j] = NULL;
		}
	}
	build_tables(w);
	return n;
}

struct result {
	std::vector<double> step, compute;
	double wall, cpu;
	size_t bytes;
	int w_first, w_last;
	double free_min_after_adjust; /* bytes; the reserve check */
	double over_reserve_ms;	      /* time free < reserve before the window shrank */
};

struct pressure {
	bool on;
	int at_step;
	size_t reserve, hog2;
	void *hog2_ptr;
};

/*
 * One run: @steps decode steps of L layers. The engine (this thread, in its engine role)
 * enqueues a whole step ahead of time: per layer, wait READY >= epoch, attention, DONE =
 * epoch; nothing per layer comes back to it. The lcore role (the same thread, in its polling
 * loop) posts each layer's units into a free staging slot, reaps completions, sets READY when a
 * layer has landed and polls DONE to free slots.
 */
static struct result run_mode(struct world *w, enum mode m, const struct units *un,
			      struct kvl_cudma_conn *c, int steps, int W, struct pressure *pr)
{
	const struct scen *s = &w->sc;
	const int L = s->L;
	struct result r = {};
	std::vector<cudaEvent_t> ev_step(steps + 1), ev_c0((size_t)steps * L),
		ev_c1((size_t)steps * L);
	std::vector<int> slot_of((size_t)steps * L, -1);
	std::vector<size_t> landed((size_t)steps * L, 0);
	size_t G = (size_t)steps * L, g_fetch = 0, g_done = 0, g_unit = 0;
	int enq = 0; /* steps enqueued */
	uint32_t ep0 = w->epoch;
	double t0, c0;
	struct kvl_wc wc[256];
	bool draining = false, end_recorded = false;
	size_t g_base = 0;
	double pressure_t = 0;
	/* The scheduler's compute estimate, as sched/ makes it: per layer, from when it could
	 * start (READY seen, the layer before DONE) to its DONE, an EWMA of 1/8; given to the
	 * transport with the layer's bytes (its AUTO method chooses by them). */
	std::vector<double> ready_t((size_t)steps * L, 0);
	double last_done_t = 0, est_compute = 0;

	for (auto &e : ev_step)
		CK(cudaEventCreate(&e));
	for (size_t i = 0; i < G; i++) {
		CK(cudaEventCreate(&ev_c0[i]));
		CK(cudaEventCreate(&ev_c1[i]));
	}
	if (m == M_FETCH_ALL)
		W = L;
	if (m == M_ON_DEMAND)
		W = 1;
	r.w_first = r.w_last = W;
	r.free_min_after_adjust = INFINITY;
	CK(cudaDeviceSynchronize());
	t0 = kvl_now_s();
	c0 = cpu_s();
	double last_t = kvl_now_s();
	size_t last_done = 0;

	while (g_done < G) {
		if (g_done != last_done) {
			last_done = g_done;
			last_t = kvl_now_s();
		} else if (kvl_now_s() - last_t > 10) {
			DIE("stuck: mode %s, %zu of %zu layers done, %zu fetched, %d steps enqueued, "
			    "draining %d, W %d",
			    mode_name[m], g_done, G, g_fetch, enq, draining, W);
		}
		/* engine: keep one step enqueued beyond the one running */
		while (!draining && enq < steps && (size_t)enq * L <= g_done + L) {
			int st = enq;

			CK(cudaEventRecord(ev_step[st], w->cst));
			for (int l = 0; l < L; l++) {
				size_t g = (size_t)st * L + l;
				uint32_t e = ep0 + st + 1;
				const uint64_t *tab;

				if (m == M_RESIDENT) {
					tab = w->tab_res + l * w->tab_elems;
				} else {
					slot_of[g] = (int)((g - g_base) % W);
					tab = tab_at(w->tab_slot, w, l, slot_of[g]);
					if (kvl_gpusig_enqueue_wait(w->sig, l, e, w->cst))
						DIE("enqueue_wait");
				}
				CK(cudaEventRecord(ev_c0[g], w->cst));
				att_launch(att_make(&w->x, tab, s->nblk, s->splits,
						    w->out_pipe + (size_t)l * s->B * ATT_QH * ATT_HD),
					   s->B, w->cst);
				CK(cudaGetLastError());
				CK(cudaEventRecord(ev_c1[g], w->cst));
				if (kvl_gpusig_enqueue_done(w->sig, l, e, w->cst))
					DIE("enqueue_done");
			}
			enq++;
		}
		if (enq == steps && !end_recorded) {
			CK(cudaEventRecord(ev_step[steps], w->cst));
			end_recorded = true;
		}
		/* lcore: fetch */
		while (m != M_RESIDENT && g_fetch < G &&
		       g_fetch < (size_t)std::min(enq, steps) * L) {
			size_t g = g_fetch;
			bool free_slot = m == M_FETCH_ALL ? g_done >= (g / L) * L
							   : g_done + W > g;
			if (!free_slot)
				break;
			int l = (int)(g % L);
			bool full = false;

			while (g_unit < un->n) {
				struct kvl_wr wr = {}; /* n_sge 0, no flags: one local range */

				wr.wr_id = (uint64_t)g << 32 | g_unit;
				wr.local = w->slot[slot_of[g]] + g_unit * un->size;
				wr.remote_off = (uint64_t)l * w->slot_bytes +
						(uint64_t)un->perm[g_unit] * un->size;
				wr.length = un->size;
				wr.remote_seg = 1;
				wr.op = KVL_OP_READ;
				int rc = kvl_cudma_post(c, &wr);
				if (rc == -EAGAIN) {
					full = true;
					break;
				}
				if (rc)
					DIE("post %d", rc);
				g_unit++;
			}
			if (full)
				break;
			g_unit = 0;
			g_fetch++;
		}
		kvl_cudma_progress(c);
		for (unsigned n = kvl_cudma_reap(c, wc, 256); n > 0; n = kvl_cudma_reap(c, wc, 256))
			for (unsigned i = 0; i < n; i++) {
				size_t g = wc[i].wr_id >> 32;

				if (wc[i].status != KVL_OK)
					DIE("transfer failed: status %d", wc[i].status);
				r.bytes += wc[i].bytes;
				if (++landed[g] < un->n)
					continue;
				uint32_t e = ep0 + (uint32_t)(g / L) + 1;
				ready_t[g] = kvl_now_s();
				if (m != M_FETCH_ALL) {
					kvl_gpusig_set_ready(w->sig, (unsigned)(g % L), e);
				} else if (g % L == (size_t)L - 1) {
					/* fetch-all: every layer of the step has landed (in order) */
					for (int l = 0; l < L; l++)
						kvl_gpusig_set_ready(w->sig, l, e);
				}
			}
		/* lcore: DONE frees the layer's slot */
		while (g_done < G && g_done < (size_t)std::min(enq, steps) * L &&
		       kvl_gpusig_is_done(w->sig, (unsigned)(g_done % L),
					  ep0 + (uint32_t)(g_done / L) + 1)) {
			double now = kvl_now_s(), from = std::max(ready_t[g_done], last_done_t);

			if (m != M_RESIDENT && ready_t[g_done] > 0 && now > from) {
				est_compute = est_compute == 0
						      ? now - from
						      : est_compute + (now - from - est_compute) / 8;
				kvl_cudma_set_estimates(c, (uint64_t)(est_compute * 1e9),
							w->slot_bytes);
			}
			last_done_t = now;
			g_done++;
		}
		/* budget: another tenant takes VRAM mid-run; the window must give it back */
		if (pr != NULL && pr->on) {
			size_t fr, tot;

			if (pr->hog2_ptr == NULL && g_done >= (size_t)pr->at_step * L) {
				CK(cudaMalloc(&pr->hog2_ptr, pr->hog2));
				CK(cudaMemset(pr->hog2_ptr, 1, pr->hog2));
				pressure_t = kvl_now_s();
				CK(cudaMemGetInfo(&fr, &tot));
				if (fr < pr->reserve)
					draining = true; /* shrink at the next quiet point */
			}
			if (draining && g_done == g_fetch && g_done == (size_t)enq * L) {
				CK(cudaMemGetInfo(&fr, &tot));
				size_t need = pr->reserve - std::min(fr, pr->reserve);
				int give = (int)((need + w->slot_bytes - 1) / w->slot_bytes);
				W = std::max(1, W - give);
				set_slots(w, W, c);
				g_base = g_done;
				r.w_last = W;
				draining = false;
				r.over_reserve_ms = (kvl_now_s() - pressure_t) * 1e3;
			}
			if (!draining && (g_done % L) == 0) {
				CK(cudaMemGetInfo(&fr, &tot));
				r.free_min_after_adjust = std::min(r.free_min_after_adjust, (double)fr);
			}
		}
	}
	CK(cudaStreamSynchronize(w->cst));
	r.wall = kvl_now_s() - t0;
	r.cpu = cpu_s() - c0;
	for (int st = 1; st < steps; st++) { /* step 0 includes the pipeline's fill */
		float ms;
		double comp = 0;

		CK(cudaEventElapsedTime(&ms, ev_step[st], ev_step[st + 1]));
		r.step.push_back(ms / 1e3);
		for (int l = 0; l < L; l++) {
			float cm;

			CK(cudaEventElapsedTime(&cm, ev_c0[(size_t)st * L + l],
						ev_c1[(size_t)st * L + l]));
			comp += cm / 1e3;
		}
		r.compute.push_back(comp);
	}
	for (auto &e : ev_step)
		CK(cudaEventDestroy(e));
	for (size_t i = 0; i < G; i++) {
		CK(cudaEventDestroy(ev_c0[i]));
		CK(cudaEventDestroy(ev_c1[i]));
	}
	w->epoch = ep0 + steps;
	return r;
}

/* Transfer alone: one step's units (every layer) into the slots, timed on the copy stream. */
static double transfer_only(struct world *w, const struct units *un, struct kvl_cudma_conn *c,
			    int reps)
{
	const int L = w->sc.L;
	cudaEvent_t e0, e1;
	std::vector<double> t;
	struct kvl_wc wc[256];

	CK(cudaEventCreate(&e0));
	CK(cudaEventCreate(&e1));
	for (int r = 0; r < reps; r++) {
		size_t posted = 0, done = 0, total = (size_t)L * un->n;

		CK(cudaEventRecord(e0, kvl_cudma_stream(c)));
		while (done < total) {
			while (posted < total) {
				size_t l = posted / un->n, u = posted % un->n;
				struct kvl_wr wr = {}; /* n_sge 0, no flags: one local range */

				wr.wr_id = posted;
				wr.local = w->slot[l % w->slot.size()] + u * un->size;
				wr.remote_off = l * w->slot_bytes + (uint64_t)un->perm[u] * un->size;
				wr.length = un->size;
				wr.remote_seg = 1;
				wr.op = KVL_OP_READ;
				if (kvl_cudma_post(c, &wr) == -EAGAIN)
					break;
				posted++;
			}
			kvl_cudma_progress(c);
			for (unsigned n = kvl_cudma_reap(c, wc, 256); n > 0;
			     n = kvl_cudma_reap(c, wc, 256))
				for (unsigned i = 0; i < n; i++, done++)
					if (wc[i].status != KVL_OK)
						DIE("transfer failed");
		}
		CK(cudaEventRecord(e1, kvl_cudma_stream(c)));
		t.push_back(time_events(NULL, e0, e1));
	}
	CK(cudaEventDestroy(e0));
	CK(cudaEventDestroy(e1));
	return pct(t, 0.5);
}

/* A transport configuration as the command line names it: see parse_cfg. */
struct cfg {
	char name[32];
	enum kvl_cudma_small how;
	unsigned ctas, depth, ce_share;
	unsigned batch_max; /* cebatch<N>: N copies per cudaMemcpyBatchAsync at most */
	uint64_t ce_min;    /* g...m<KiB>: blocks this long to the copy engine; n: none */
	bool prio; /* the engine's compute stream at the device's greatest priority */
};

static struct kvl_cudma_conn *new_conn(struct world *w, const struct cfg *f)
{
	char err[256];
	struct kvl_cudma_opts o = {};
	struct kvl_cudma_conn *c;

	o.device = 0;
	o.depth = 8192;
	o.small = f->how;
	o.gather_ctas = f->ctas;
	o.gather_depth = f->depth;
	o.ce_share = f->ce_share;
	o.batch_max = f->batch_max;
	o.ce_min = f->ce_min;
	c = kvl_cudma_new(&o, err, sizeof(err));
	if (c == NULL)
		DIE("%s", err);
	if (kvl_cudma_add_remote(c, 1, w->host, w->sc.L * w->slot_bytes, KVL_SEG_REMOTE_READ, err,
				 sizeof(err)))
		DIE("%s", err);
	for (auto p : w->slot)
		if (p && kvl_cudma_add_local(c, p, w->slot_bytes, err, sizeof(err)))
			DIE("%s", err);
	return c;
}

/* The transport's defaults: what sets the staging slots up before a sweep. */
static const struct cfg DEFAULT_CFG = { "gather", KVL_CUDMA_GATHER, 0, 0, 0, 0, 0, false };

/* @w for @s with all its s->L staging slots allocated and registered. */
static void world_with_slots(struct world *w, const struct scen *s)
{
	world_init(w, s, s->L);
	struct kvl_cudma_conn *c0 = new_conn(w, &DEFAULT_CFG);

	set_slots(w, s->L, c0);
	kvl_cudma_free(c0);
}

static bool same_outputs(struct world *w)
{
	size_t n = (size_t)w->sc.L * w->sc.B * ATT_QH * ATT_HD * 2;
	std::vector<uint8_t> a(n), b(n);

	CK(cudaMemcpy(a.data(), w->out_res, n, cudaMemcpyDeviceToHost));
	CK(cudaMemcpy(b.data(), w->out_pipe, n, cudaMemcpyDeviceToHost));
	return memcmp(a.data(), b.data(), n) == 0;
}

/*
 * The window under memory pressure: another tenant leaves room for about 6 slots over the
 * reserve; mid-run it takes 3 slots more. The window must give back enough slots to bring
 * free VRAM back over the reserve, and never grow into it.
 */
static void pressure_run(struct world *w, const struct units *un, int steps, struct ceil_t cl)
{
	const size_t reserve = 1ull << 30;
	struct pressure pr = {};
	size_t fr, tot;
	void *hog1 = NULL;
	int W;

	struct kvl_cudma_conn *c = new_conn(w, &DEFAULT_CFG);
	set_slots(w, 0, c);
	CK(cudaDeviceSynchronize());
	CK(cudaMemGetInfo(&fr, &tot));
	/* the other tenant: all but reserve + 6.5 slots */
	size_t keep = reserve + 13 * w->slot_bytes / 2;
	CK(cudaMalloc(&hog1, fr - keep));
	CK(cudaMemGetInfo(&fr, &tot));
	W = (int)std::min<size_t>(w->sc.L, (fr - std::min(fr, reserve)) / w->slot_bytes);
	set_slots(w, W, c);
	CK(cudaMemGetInfo(&fr, &tot));
	printf("\nwindow under pressure (scenario B, 64K units): reserve %zu MiB, slot %zu MiB; "
	       "budget gives W=%d, free after the window %zu MiB (%s the reserve)\n",
	       reserve / MiB, w->slot_bytes / MiB, W, fr / MiB, fr >= reserve ? "above" : "BELOW");
	pr.on = true;
	pr.at_step = steps / 2;
	pr.reserve = reserve;
	pr.hog2 = 3 * w->slot_bytes;
	struct result r = run_mode(w, M_WINDOW, un, c, steps, W, &pr);
	bool ok = same_outputs(w);
	CK(cudaMemGetInfo(&fr, &tot));
	std::vector<double> before(r.step.begin(), r.step.begin() + steps / 2 - 1),
		after(r.step.begin() + steps / 2 + 1, r.step.end());
	printf("  step %d: a second allocation of %zu MiB; window %d -> %d slots after %.1f ms "
	       "(free under the reserve only in that time, by the other tenant's allocation)\n",
	       pr.at_step, pr.hog2 / MiB, r.w_first, r.w_last, r.over_reserve_ms);
	printf("  free VRAM at layer boundaries outside that time: min %.0f MiB vs reserve %zu "
	       "MiB: %s; step p50 before %.3f ms, after %.3f ms; outputs %s\n",
	       r.free_min_after_adjust / MiB, reserve / MiB,
	       r.free_min_after_adjust >= reserve ? "never below" : "BELOW THE RESERVE",
	       pct(before, 0.5) * 1e3, pct(after, 0.5) * 1e3, ok ? "identical" : "MISMATCH");
	(void)cl;
	CK(cudaFree(pr.hog2_ptr));
	CK(cudaFree(hog1));
	set_slots(w, w->sc.L, c);
	kvl_cudma_free(c);
}

/*
 * A transport configuration from the command line: "cebatch"[<n>] (cudaMemcpyBatchAsync, at
 * most n copies a call; the transport's default without n), "each" (one cudaMemcpyAsync per
 * block), or "g" for the gather kernel followed by any of <n>
 * thread blocks (0: the transport's default), "d"<n> loads in flight per thread, "c"<n>
 * percent of the bytes to the copy engine beside it, "m"<n> blocks of n KiB or more to the
 * copy engine beside it (the transport's default: 32) or "n" none; any may end in "p": the
 * engine's compute stream at the device's greatest priority. "gather" is "g" with defaults.
 * "auto": per batch, the copy engine in calls of 32 or the gather kernel, by the compute
 * estimate run_mode gives the transport (KVL_CUDMA_AUTO).
 */
static bool parse_cfg(const char *a, struct cfg *f)
{
	const char *p = a;

	memset(f, 0, sizeof(*f));
	snprintf(f->name, sizeof(f->name), "%s", a);
	if (strncmp(p, "cebatch", 7) == 0) {
		f->how = KVL_CUDMA_BATCH;
		p += 7;
		if (*p >= '1' && *p <= '9')
			f->batch_max = (unsigned)strtoul(p, (char **)&p, 10);
	} else if (strncmp(p, "auto", 4) == 0) {
		f->how = KVL_CUDMA_AUTO;
		p += 4;
	} else if (strncmp(p, "each", 4) == 0) {
		f->how = KVL_CUDMA_EACH;
		p += 4;
	} else if (strncmp(p, "gather", 6) == 0) {
		f->how = KVL_CUDMA_GATHER;
		p += 6;
	} else if (*p == 'g') {
		f->how = KVL_CUDMA_GATHER;
		f->ctas = (unsigned)strtoul(p + 1, (char **)&p, 10);
		if (*p == 'd')
			f->depth = (unsigned)strtoul(p + 1, (char **)&p, 10);
		if (*p == 'c')
			f->ce_share = (unsigned)strtoul(p + 1, (char **)&p, 10);
		if (*p == 'm') {
			f->ce_min = (uint64_t)strtoul(p + 1, (char **)&p, 10) << 10;
		} else if (*p == 'n') {
			f->ce_min = UINT64_MAX;
			p++;
		}
	} else {
		return false;
	}
	if (*p == 'p') {
		f->prio = true;
		p++;
	}
	return *p == '\0';
}

/* Bytes that differ between two device ranges (the slots against the floor's own copy). */
__global__ void diff_kernel(const uint4 *a, const uint4 *b, size_t n, unsigned long long *bad)
{
	unsigned long long k = 0;

	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x) {
		uint4 x = a[i], y = b[i];

		k += (x.x != y.x) + (x.y != y.y) + (x.z != y.z) + (x.w != y.w);
	}
	if (k)
		atomicAdd(bad, k);
}

static unsigned long long slots_differ(struct world *w)
{
	unsigned long long *bad, h = 0;

	CK(cudaMalloc(&bad, sizeof(*bad)));
	CK(cudaMemset(bad, 0, sizeof(*bad)));
	for (int l = 0; l < w->sc.L; l++)
		diff_kernel<<<528, 256>>>((const uint4 *)w->slot[l],
					  (const uint4 *)(w->res_remote + l * w->slot_bytes),
					  w->slot_bytes / 16, bad);
	CK(cudaGetLastError());
	CK(cudaMemcpy(&h, bad, sizeof(h), cudaMemcpyDeviceToHost));
	CK(cudaFree(bad));
	return h;
}

/* One 1 GiB pinned host->GPU copy, median of 6: the ceiling again, to see it drift. */
static double h2d_big_again(cudaStream_t st)
{
	size_t big = 1ull << 30;
	void *d, *h;
	cudaEvent_t e0, e1;
	std::vector<double> t;

	CK(cudaMalloc(&d, big));
	CK(cudaHostAlloc(&h, big, cudaHostAllocMapped));
	memset(h, 3, big);
	CK(cudaEventCreate(&e0));
	CK(cudaEventCreate(&e1));
	for (int i = 0; i < 6; i++) {
		CK(cudaEventRecord(e0, st));
		CK(cudaMemcpyAsync(d, h, big, cudaMemcpyHostToDevice, st));
		CK(cudaEventRecord(e1, st));
		t.push_back(time_events(st, e0, e1));
	}
	CK(cudaEventDestroy(e0));
	CK(cudaEventDestroy(e1));
	CK(cudaFreeHost(h));
	CK(cudaFree(d));
	return big / pct(t, 0.5);
}

/*
 * The transport alone: scenario B's step (8 layers x 128 MiB, 1 GiB) in 16 KiB, 64 KiB and
 * 2 MiB units from scattered host places, per configuration; the slots are poisoned before
 * and every byte is compared after. Against the 1 GiB copy measured in the same process.
 */
static void xfer_sweep(const std::vector<struct cfg> &cf, int splits, struct ceil_t cl,
		       cudaStream_t st)
{
	struct scen s = { "B 8x4K tok, all remote", 8, 256, 256, 8, splits };
	struct world w;

	world_with_slots(&w, &s);
	printf("\ntransport alone: one step of scenario B (%d layers x %zu MiB = %.2f GiB), "
	       "median of 7; ceiling = the 1 GiB pinned copy, %.1f GB/s\n",
	       s.L, w.slot_bytes / MiB, s.L * w.slot_bytes / 1073741824.0, cl.h2d_big / GB);
	printf("%-4s %-12s %8s %8s %6s %8s %9s %s\n", "unit", "method", "xfer ms", "GB/s",
	       "%ceil", "launches", "ce_shared", "bytes");
	for (int ui = 0; ui < 3; ui++) {
		struct units un;
		const char *uname = UNIT[ui] >= MiB ? "2M" : UNIT[ui] == 65536 ? "64K" : "16K";

		world_layout(&w, &un, UNIT[ui]);
		for (size_t fi = 0; fi < cf.size(); fi++) {
			if (UNIT[ui] >= MiB && fi > 0)
				break; /* over copy_min: the copy engine, one copy each, for all */
			struct kvl_cudma_conn *c = new_conn(&w, &cf[fi]);

			for (int l = 0; l < s.L; l++)
				CK(cudaMemset(w.slot[l], 0xa5, w.slot_bytes));
			CK(cudaDeviceSynchronize());
			double xo = transfer_only(&w, &un, c, 7);
			unsigned long long bad = slots_differ(&w);
			const struct kvl_cudma_stats *k = kvl_cudma_stats(c);
			double gbs = s.L * w.slot_bytes / xo;

			printf("%-4s %-12s %8.3f %8.1f %5.1f%% %8llu %9llu %s\n", uname,
			       UNIT[ui] >= MiB ? "(engine)" : cf[fi].name, xo * 1e3, gbs / GB,
			       100 * gbs / cl.h2d_big, (unsigned long long)k->launches,
			       (unsigned long long)k->ce_shared, bad ? "WRONG" : "all match");
			if (bad)
				DIE("%llu words differ after the transfer", bad);
			kvl_cudma_free(c);
		}
	}
	printf("ceiling again at the end: pinned H2D 1 GiB %.1f GB/s\n", h2d_big_again(st) / GB);
}

/* AUTO: which way its batches went (the copy engine or the gather kernel). */
static void auto_line(struct kvl_cudma_conn *c, const struct cfg *f)
{
	const struct kvl_cudma_stats *k = kvl_cudma_stats(c);

	if (f->how == KVL_CUDMA_AUTO)
		printf("     auto: %llu batches on the copy engine, %llu on the gather kernel "
		       "(by the layer's compute estimate from DONEs against its bytes)\n",
		       (unsigned long long)k->auto_engine, (unsigned long long)k->auto_gather);
}

/*
 * Scenario A (transfer <= compute), window mode, per configuration beside the all-resident
 * run: how much of the transfer is hidden, and what the transfer costs the attention.
 * slow = the step's attention time over the all-resident one's; ovl = 1 - (p50 - comp)/xfer
 * (the attention as slowed counted as compute); ovl* = 1 - (p50 - p50 all-resident)/xfer
 * (a slower attention counted as exposed transfer).
 */
static void overlap_sweep(const std::vector<struct cfg> &cf, int splits, struct ceil_t cl,
			  int steps)
{
	struct scen s = { "A 8x32K tok, 16 blk/seq remote", 8, 2048, 16, 8, splits };
	struct world w;

	world_with_slots(&w, &s);
	printf("\noverlap: scenario A (%s, %zu MiB remote per step), window W=%d, %d steps\n",
	       s.name, s.L * w.slot_bytes / MiB, s.L, steps);
	printf("%-4s %-12s %8s %8s %8s %7s %8s %8s %7s %7s %6s\n", "unit", "method", "p50 ms",
	       "p99 ms", "comp ms", "slow%", "xfer ms", "xferGB/s", "ovl%", "ovl*%", "/floor");
	for (int ui = 0; ui < 3; ui++) {
		struct units un;
		const char *uname = UNIT[ui] >= MiB ? "2M" : UNIT[ui] == 65536 ? "64K" : "16K";

		world_layout(&w, &un, UNIT[ui]);
		w.cst = w.cst_lo;
		struct kvl_cudma_conn *c = new_conn(&w, &DEFAULT_CFG);
		struct result res = run_mode(&w, M_RESIDENT, &un, c, steps, s.L, NULL);
		kvl_cudma_free(c);
		CK(cudaMemcpy(w.out_res, w.out_pipe, (size_t)s.L * s.B * ATT_QH * ATT_HD * 2,
			      cudaMemcpyDeviceToDevice));
		double p50r = pct(res.step, 0.5), compr = pct(res.compute, 0.5);
		double floor_s = std::max(compr, s.L * w.slot_bytes / cl.h2d_big);

		printf("%-4s %-12s %8.3f %8.3f %8.3f %7s %8s %8s %7s %7s %6.2f\n", uname,
		       "resident", p50r * 1e3, pct(res.step, 0.99) * 1e3, compr * 1e3, "-", "-",
		       "-", "-", "-", p50r / floor_s);
		for (size_t fi = 0; fi < cf.size(); fi++) {
			if (UNIT[ui] >= MiB && fi > 0)
				break;
			w.cst = cf[fi].prio ? w.cst_hi : w.cst_lo;
			c = new_conn(&w, &cf[fi]);
			/* auto: its transfer alone measured after the run, with the estimates the
			 * run left, so that it is the transfer of the method the run chose */
			bool is_auto = cf[fi].how == KVL_CUDMA_AUTO;
			double xo = is_auto ? 0 : transfer_only(&w, &un, c, 5);
			struct result r = run_mode(&w, M_WINDOW, &un, c, steps, s.L, NULL);
			if (is_auto)
				xo = transfer_only(&w, &un, c, 5);
			bool ok = same_outputs(&w);
			double p50 = pct(r.step, 0.5), comp = pct(r.compute, 0.5);

			printf("%-4s %-12s %8.3f %8.3f %8.3f %6.1f%% %8.3f %8.1f %6.1f%% %6.1f%% "
			       "%6.2f%s\n",
			       uname, UNIT[ui] >= MiB ? "(engine)" : cf[fi].name, p50 * 1e3,
			       pct(r.step, 0.99) * 1e3, comp * 1e3, 100 * (comp / compr - 1),
			       xo * 1e3, s.L * w.slot_bytes / xo / GB,
			       100 * (1 - std::max(0.0, p50 - comp) / xo),
			       100 * (1 - std::max(0.0, p50 - p50r) / xo), p50 / floor_s,
			       ok ? "" : "  OUTPUT MISMATCH");
			if (!ok)
				DIE("pipelined attention output differs from all-resident");
			auto_line(c, &cf[fi]);
			kvl_cudma_free(c);
		}
	}
	w.cst = w.cst_lo;
}

int main(int argc, char **argv)
{
	int n = 0;
	const char *what = argc > 1 ? argv[1] : "full";
	int quick = strcmp(what, "quick") == 0;
	std::vector<struct cfg> cfgs;
	cudaError_t ce = cudaGetDeviceCount(&n);
	struct cudaDeviceProp prop;
	cudaStream_t st;

	if (ce != cudaSuccess || n == 0) {
		printf("skipped: no usable CUDA device (%s)\n",
		       ce != cudaSuccess ? cudaGetErrorString(ce) : "device count 0");
		return 77;
	}
	setvbuf(stdout, NULL, _IOLBF, 0); /* a killed run still shows what it printed */
	if (strcmp(what, "quick") && strcmp(what, "full") && strcmp(what, "xfer") &&
	    strcmp(what, "overlap"))
		DIE("usage: kvlane-gpu-bench [full|quick|xfer|overlap] [METHOD...]\n"
		    "  METHOD: gather | cebatch[<copies per call>] | each | auto |\n"
		    "          g<ctas>[d<depth>][c<ce%%>][m<KiB to the copy engine>|n][p]");
	for (int i = 2; i < argc; i++) {
		struct cfg f;

		if (!parse_cfg(argv[i], &f))
			DIE("cannot read method %s", argv[i]);
		cfgs.push_back(f);
	}
	if (cfgs.empty()) {
		const char *d[] = { "gather", "g8d8n", "cebatch", "cebatch32", "auto" };

		for (const char *x : d) {
			struct cfg f;

			parse_cfg(x, &f);
			cfgs.push_back(f);
		}
	}
	CK(cudaGetDeviceProperties(&prop, 0));
	CK(cudaFuncSetAttribute(att_split_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
				ATT_SMEM));
	CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
	printf("device: %s, %d SMs, %.0f GiB\n", prop.name, prop.multiProcessorCount,
	       prop.totalGlobalMem / 1073741824.0);

	/* 1. ceilings */
	struct ceil_t cl = measure_ceilings(st);
	printf("ceiling: HBM D2D copy %.0f GB/s (read + write); pinned H2D 1 GiB copy %.1f GB/s; "
	       "one cudaMemcpyAsync per block: 16K %.1f, 64K %.1f, 2M %.1f GB/s\n",
	       cl.hbm_copy / GB, cl.h2d_big / GB, cl.h2d_each[0] / GB, cl.h2d_each[1] / GB,
	       cl.h2d_each[2] / GB);

	/* 2. attention correctness (float64 reference), then speed */
	{
		double e1 = att_check(2, 64, 4, 777), e2 = att_check(1, 37, 3, 778);

		printf("attention check: rel err %.2e (B=2, 1024 tokens, 4 splits), %.2e (B=1, "
		       "592 tokens, 3 splits)\n",
		       e1, e2);
		if (!(e1 < 1e-2 && e2 < 1e-2))
			DIE("attention kernel is wrong");
	}
	/* standalone speed: 8 x 32K tokens, several split counts, rotating 4 layers */
	int best_splits = 16;
	double att_gbs = 0;
	{
		const int B = 8, nblk = 2048, L = 4;
		size_t per = (size_t)B * nblk * ATT_BLOCK;
		uint8_t *pool;
		uint64_t *tab;
		std::vector<uint64_t> h((size_t)B * nblk);
		struct att_bufs x;
		cudaEvent_t e0, e1;

		CK(cudaMalloc(&pool, per * L));
		CK(cudaMalloc(&tab, (size_t)L * B * nblk * 8));
		fill(pool, per * L, 5);
		for (int l = 0; l < L; l++) {
			for (size_t i = 0; i < h.size(); i++)
				h[i] = (uint64_t)(uintptr_t)(pool + l * per + i * ATT_BLOCK);
			CK(cudaMemcpy(tab + (size_t)l * h.size(), h.data(), h.size() * 8,
				      cudaMemcpyHostToDevice));
		}
		att_bufs_alloc(&x, B, 128);
		fill(x.q, (size_t)B * ATT_QH * ATT_HD * 2, 6);
		CK(cudaEventCreate(&e0));
		CK(cudaEventCreate(&e1));
		for (int sp : { 8, 16, 32, 64, 128 }) {
			std::vector<double> t;

			for (int r = 0; r < 12; r++) {
				int l = r % L;

				CK(cudaEventRecord(e0, st));
				att_launch(att_make(&x, tab + (size_t)l * h.size(), nblk, sp, NULL), B,
					   st);
				CK(cudaEventRecord(e1, st));
				t.push_back(time_events(st, e0, e1));
			}
			CK(cudaGetLastError());
			t.erase(t.begin(), t.begin() + 2);
			double gbs = per / pct(t, 0.5);
			printf("attention B=%d T=%d splits=%3d: %.1f us, %.0f GB/s KV read = %.0f%% "
			       "of the HBM copy ceiling\n",
			       B, nblk * ATT_BS, sp, pct(t, 0.5) * 1e6, gbs / GB,
			       100 * gbs / cl.hbm_copy);
			if (gbs > att_gbs)
				att_gbs = gbs, best_splits = sp;
		}
		CK(cudaFree(pool));
		CK(cudaFree(tab));
		CK(cudaFree(x.q));
		CK(cudaFree(x.out));
		CK(cudaFree(x.po));
		CK(cudaFree(x.pml));
	}
	bool att_counts = att_gbs >= 0.8 * cl.hbm_copy;
	printf("attention: best %.0f GB/s = %.0f%% of %.0f GB/s measured: %s\n", att_gbs / GB,
	       100 * att_gbs / cl.hbm_copy, cl.hbm_copy / GB,
	       att_counts ? "counts (>= 80%)" : "BELOW 80%: its pipeline numbers do not count");

	if (strcmp(what, "xfer") == 0) {
		xfer_sweep(cfgs, std::max(1, best_splits / 8), cl, st);
		return 0;
	}
	if (strcmp(what, "overlap") == 0) {
		overlap_sweep(cfgs, best_splits, cl, 16);
		return 0;
	}

	/* 3. pipelines */
	struct scen scens[2] = {
		/* compute-bound: 1/128 of each sequence in the remote tier */
		{ "A 8x32K tok, 16 blk/seq remote", 8, 2048, 16, 8, best_splits },
		/* transfer-bound: all of a shorter context remote */
		{ "B 8x4K tok, all remote", 8, 256, 256, 8, std::max(1, best_splits / 8) },
	};
	int steps = quick ? 6 : 16;
	/* How the transport moves blocks under copy_min (1 MiB): 2 MiB units go to the copy
	 * engine one by one whatever the method. */
	const std::vector<struct cfg> &meth = cfgs;
	printf("\n(methods: gather = the gather kernel with the transport's defaults; g<n>d<k> = "
	       "n blocks, k loads in flight per thread; c<p> = p%% of the bytes on the copy engine "
	       "beside it; p = compute stream at top priority; cebatch = cudaMemcpyBatchAsync on "
	       "the copy engine. xfer = the step's "
	       "transfer alone; floor = max(compute, step bytes at the %.1f GB/s ceiling); ovl = "
	       "1 - exposed/xfer)\n",
	       cl.h2d_big / GB);
	printf("%-34s %-4s %-8s %-14s %2s %8s %8s %8s %8s %7s %8s %8s %6s %8s %6s %4s\n",
	       "scenario", "unit", "method", "mode", "W", "p50 ms", "p99 ms", "comp ms", "expo ms",
	       "ovl%", "xfer ms", "xferGB/s", "%ceil", "floor ms", "/floor", "cpu%");
	for (int si = 0; si < 2; si++) {
		struct world w;
		const struct scen *s = &scens[si];

		world_with_slots(&w, s);
		std::vector<struct units> uns(3);
		for (int ui = 0; ui < 3; ui++) {
			if (w.slot_bytes % UNIT[ui])
				continue;
			struct units *un = &uns[ui];
			const char *uname = UNIT[ui] >= MiB ? "2M" : UNIT[ui] == 65536 ? "64K" : "16K";

			world_layout(&w, un, UNIT[ui]);
			double bytes_step = (double)s->L * w.slot_bytes;
			double ceil_ms = bytes_step / cl.h2d_big * 1e3;
			double comp_res = 0;

			for (int mi = 0; mi < (int)meth.size(); mi++) {
				if (UNIT[ui] >= MiB && mi > 0)
					continue; /* same copies whatever the method */
				w.cst = meth[mi].prio ? w.cst_hi : w.cst_lo;
				struct kvl_cudma_conn *c = new_conn(&w, &meth[mi]);
				double xo = transfer_only(&w, un, c, quick ? 2 : 5);

				for (int m = M_RESIDENT; m <= M_WINDOW; m++) {
					if (m == M_RESIDENT && mi > 0)
						continue;
					size_t fr, tot;
					int W = s->L;

					if (m == M_WINDOW) {
						/* depth from the budget: free VRAM over a 1 GiB reserve,
						 * the slots already held counted in, at most a step */
						size_t reserve = 1ull << 30;

						CK(cudaMemGetInfo(&fr, &tot));
						W = (int)std::min<size_t>(
							s->L, (fr - std::min(fr, reserve)) / w.slot_bytes +
								      w.slot.size());
					}
					struct result res = run_mode(&w, (enum mode)m, un, c, steps, W, NULL);
					if (m == M_RESIDENT)
						CK(cudaMemcpy(w.out_res, w.out_pipe,
							      (size_t)s->L * s->B * ATT_QH * ATT_HD * 2,
							      cudaMemcpyDeviceToDevice));
					bool ok = m == M_RESIDENT || same_outputs(&w);
					double p50 = pct(res.step, 0.5), cmp = pct(res.compute, 0.5);
					if (m == M_RESIDENT)
						comp_res = cmp;
					/* exposed: the step's time beyond its compute */
					double expo = std::max(0.0, p50 - cmp);
					double floor_ms = std::max(comp_res * 1e3, ceil_ms);

					printf("%-34.34s %-4s %-8s %-14s %2d %8.3f %8.3f %8.3f %8.3f ",
					       s->name, uname, m == M_RESIDENT ? "-" : meth[mi].name,
					       mode_name[m], m == M_RESIDENT ? 0 : res.w_first,
					       p50 * 1e3, pct(res.step, 0.99) * 1e3, cmp * 1e3,
					       expo * 1e3);
					if (m == M_RESIDENT)
						printf("%7s %8s %8s %6s ", "-", "-", "-", "-");
					else
						printf("%6.1f%% %8.3f %8.1f %5.0f%% ",
						       100 * (1.0 - expo / xo), xo * 1e3,
						       bytes_step / xo / GB,
						       100 * bytes_step / xo / cl.h2d_big);
					printf("%8.3f %6.2f %4.0f%s\n", floor_ms, p50 * 1e3 / floor_ms,
					       100 * res.cpu / res.wall, ok ? "" : "  OUTPUT MISMATCH");
					if (!ok)
						DIE("pipelined attention output differs from all-resident");
				}
				auto_line(c, &meth[mi]);
				kvl_cudma_free(c);
				w.cst = w.cst_lo;
			}
			if (si == 1 && UNIT[ui] == 65536)
				pressure_run(&w, un, steps, cl);
		}
	}
	printf("\nceilings: HBM D2D copy %.0f GB/s; pinned H2D 1 GiB %.1f GB/s; per-block "
	       "cudaMemcpyAsync 16K %.1f, 64K %.1f, 2M %.1f GB/s; attention %.0f GB/s = %.0f%% of "
	       "HBM (%s)\n",
	       cl.hbm_copy / GB, cl.h2d_big / GB, cl.h2d_each[0] / GB, cl.h2d_each[1] / GB,
	       cl.h2d_each[2] / GB, att_gbs / GB, 100 * att_gbs / cl.hbm_copy,
	       att_counts ? "counts" : "does not count");
	return 0;
}
