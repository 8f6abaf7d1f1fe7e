/* SPDX-License-Identifier: BSD-3-Clause */
/* The host tier through the whole runtime against the copy-engine transport alone, one table. */
/*
 * kvlane-tier-bench [--reps R] [--mib M]
 *
 * One process, one GPU, the same pinned source for every row: a segment of M MiB (default
 * 1024) carved from the [memory] pool (pinned for CUDA), blocks laid out in scattered order
 * (block i at place perm[i]: nothing merges, on either path).
 *   ceiling    one cudaMemcpyAsync of the whole segment into VRAM (pinned host->GPU);
 *   transport  lcores/gpu/xport_cudma.c alone on this thread, its defaults (as kvlane-gpu-bench
 *              xfer's "gather" row): every block posted, progressed and reaped into a VRAM
 *              buffer, from the first post to the last completion;
 *   runtime    kvl_req_open(KVL_PEER_LOCAL_TIER, ..., KVL_REQ_STEP_FLAGS) -> the NIC lcore's
 *              scheduler -> the tier transport -> the same cudma -> READY words: from the open
 *              to the last step's READY word seen by this thread, which writes each step's DONE
 *              at once (an engine that computes nothing), so the staging (512 MiB) recycles.
 * Per unit (64 KiB, 16 KiB), median of R (default 5) runs, GB/s = 1e9 bytes/s, wall clock
 * (kvl_now_ns) for both paths. /kvlane/tier's byte count is checked against what was asked at
 * the end. Targets (issue 14): runtime >= 0.95 x transport and >= 90% of the ceiling at 64 KiB.
 * Exits 77 without a GPU.
 */
#include <errno.h>
#include <stdint.h>

#include <algorithm>
#include <vector>

#include "gpu_attn.cuh"
#include "gpu_bench.h"
#include "gpu_rt.h"
#include "gpusig.h"
#include "kvl_clock.h"
#include "xport_cudma.h"

#define SLOT_KB		64
#define BLOCKS_PER_STEP 256u

static const double GB = 1e9;

static double ceiling(const void *src, void *dst, size_t len, int reps)
{
	cudaStream_t st;
	cudaEvent_t e0, e1;
	std::vector<double> t;
	float ms;

	CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
	CK(cudaEventCreate(&e0));
	CK(cudaEventCreate(&e1));
	for (int r = 0; r < reps + 1; r++) {
		CK(cudaEventRecord(e0, st));
		CK(cudaMemcpyAsync(dst, src, len, cudaMemcpyHostToDevice, st));
		CK(cudaEventRecord(e1, st));
		CK(cudaEventSynchronize(e1));
		CK(cudaEventElapsedTime(&ms, e0, e1));
		if (r > 0) /* the first warms the mappings */
			t.push_back(ms / 1e3);
	}
	CK(cudaEventDestroy(e0));
	CK(cudaEventDestroy(e1));
	CK(cudaStreamDestroy(st));
	return len / gpu_bench_median(t);
}

struct row {
	double s;	   /* median seconds */
	uint64_t batches;  /* per run */
	uint64_t launches; /* per run (transport) */
};

static struct row transport(const struct kvl_segment *seg, void *dst, uint32_t u,
			    const std::vector<uint32_t> &perm, int reps,
			    enum kvl_cudma_small small = KVL_CUDMA_GATHER, unsigned batch_max = 0,
			    unsigned gather_ctas = 0, unsigned gather_depth = 0)
{
	struct kvl_cudma_opts o;
	struct kvl_cudma_conn *c;
	struct kvl_wc wc[256];
	std::vector<double> t;
	char err[256];
	uint32_t n = (uint32_t)perm.size();
	struct row out;

	memset(&o, 0, sizeof(o));
	o.device = 0;
	o.depth = 8192; /* as the tier's engine (runtime/tier.c) */
	o.small = small;
	o.batch_max = batch_max;
	o.gather_ctas = gather_ctas;
	o.gather_depth = gather_depth;
	c = kvl_cudma_new(&o, err, sizeof(err));
	EXPECT(c != NULL, "cudma: %s", err);
	EXPECT(kvl_cudma_add_remote(c, 1, seg->base, seg->length, KVL_SEG_REMOTE_READ, err,
				    sizeof(err)) == 0,
	       "cudma remote: %s", err);
	EXPECT(kvl_cudma_add_local(c, dst, (uint64_t)n * u, err, sizeof(err)) == 0,
	       "cudma local: %s", err);
	for (int r = 0; r < reps + 1; r++) {
		uint64_t t0 = kvl_now_ns();
		uint32_t posted = 0, done = 0;

		while (done < n) {
			for (; posted < n; posted++) {
				struct kvl_wr wr;

				memset(&wr, 0, sizeof(wr));
				wr.wr_id = posted;
				wr.local = (uint8_t *)dst + (uint64_t)posted * u;
				wr.remote_off = (uint64_t)perm[posted] * u;
				wr.length = u;
				wr.remote_seg = 1;
				wr.op = KVL_OP_READ;
				if (kvl_cudma_post(c, &wr) == -EAGAIN)
					break;
			}
			kvl_cudma_progress(c);
			for (unsigned k = kvl_cudma_reap(c, wc, 256); k > 0;
			     k = kvl_cudma_reap(c, wc, 256))
				for (unsigned i = 0; i < k; i++, done++)
					EXPECT(wc[i].status == KVL_OK, "transport: %s",
					       kvl_status_name(wc[i].status));
		}
		if (r > 0)
			t.push_back((kvl_now_ns() - t0) / 1e9);
	}
	out.s = gpu_bench_median(t);
	out.batches = kvl_cudma_stats(c)->batches / (reps + 1);
	out.launches = kvl_cudma_stats(c)->launches / (reps + 1);
	kvl_cudma_free(c);
	return out;
}

/* A step-flag request of @b's blocks in @steps equal steps, each naming its own blocks in
 * order: @first and @refs are filled for it (steps + 1 and b.size() entries). */
static struct kvl_req_desc step_desc(std::vector<struct kvl_req_block> &b,
				     std::vector<uint32_t> &first, std::vector<uint32_t> &refs,
				     uint32_t steps)
{
	struct kvl_req_desc d;
	uint32_t n = (uint32_t)b.size();

	for (uint32_t i = 0; i < n; i++)
		refs[i] = i;
	for (uint32_t k = 0; k <= steps; k++)
		first[k] = k * (n / steps);
	memset(&d, 0, sizeof(d));
	d.blocks = b.data();
	d.n_blocks = n;
	d.n_steps = steps;
	d.step_first = first.data();
	d.step_blocks = refs.data();
	d.flags = KVL_REQ_STEP_FLAGS;
	return d;
}

static struct row runtime(struct kvl_runtime *rt, const struct kvl_segment *seg, uint32_t u,
			  const std::vector<uint32_t> &perm, int reps)
{
	uint32_t n = (uint32_t)perm.size(), steps = n / BLOCKS_PER_STEP;
	std::vector<struct kvl_req_block> b(n);
	std::vector<uint32_t> first(steps + 1), refs(n);
	std::vector<double> t;
	struct kvl_req_event ev[64];
	struct kvl_req_desc d;
	struct row out;

	for (uint32_t i = 0; i < n; i++) {
		memset(&b[i], 0, sizeof(b[i]));
		b[i].remote_seg = seg->id;
		b[i].remote_off = (uint64_t)perm[i] * u;
		b[i].length = u;
	}
	d = step_desc(b, first, refs, steps);
	for (int r = 0; r < reps + 1; r++) {
		struct kvl_req_flags fl;
		kvl_req_t req;
		uint64_t t0 = kvl_now_ns(), t1;
		bool ended = false;
		int rc = kvl_req_open(rt, KVL_PEER_LOCAL_TIER, &d, &req);

		EXPECT(rc == 0, "kvl_req_open on the tier: %d", rc);
		EXPECT(kvl_req_step_flags(rt, req, &fl) == 0, "step flags");
		for (uint32_t k = 0; k < steps; k++) {
			const volatile uint32_t *rw =
				(const volatile uint32_t *)((const uint8_t *)fl.ready +
							    (size_t)k * fl.stride);
			volatile uint32_t *dw =
				(volatile uint32_t *)((uint8_t *)fl.done + (size_t)k * fl.stride);

			while (!gpu_rt_reached(__atomic_load_n(rw, __ATOMIC_ACQUIRE), fl.epoch)) {
				/* STEP_READY events: drained; a failure ends the run */
				unsigned m = kvl_req_poll(rt, ev, 64);

				for (unsigned i = 0; i < m; i++)
					EXPECT(ev[i].type != KVL_REQ_EV_FAILED,
					       "tier request failed at step %u: %s", k,
					       kvl_status_name(ev[i].status));
			}
			__atomic_store_n(dw, fl.epoch, __ATOMIC_RELEASE);
		}
		t1 = kvl_now_ns();
		while (!ended) {
			unsigned m = kvl_req_poll(rt, ev, 64);

			for (unsigned i = 0; i < m; i++)
				if (ev[i].type == KVL_REQ_EV_FAILED)
					EXPECT(0, "tier request failed: %s",
					       kvl_status_name(ev[i].status));
				else if (ev[i].type == KVL_REQ_EV_DONE)
					ended = true;
		}
		if (r > 0)
			t.push_back((t1 - t0) / 1e9);
	}
	out.s = gpu_bench_median(t);
	out.batches = 0;
	out.launches = 0;
	return out;
}

/* ---- overlap with attention through the runtime: kvlane-tier-bench overlap UNIT_KB ---- */
/*
 * Scenario A of kvlane-gpu-bench (tools/kvlane_gpu_bench.cu, overlap_sweep), with the
 * runtime in place of its own lcore loop: per layer, paged decode attention (tools/
 * gpu_attn.cuh) over 8 sequences x 2048 blocks of 64 KiB (32K tokens), 16 blocks of each
 * sequence from the host tier (8 MiB a layer, in UNIT_KB units placed in scattered order in a
 * pool segment), the rest resident in VRAM. 8 layers a decode step, D decode steps (default
 * 16): one request on KVL_PEER_LOCAL_TIER with KVL_REQ_STEP_FLAGS and D x 8 steps (a step per
 * layer), [sched] slot_kb = UNIT_KB and tier_copy as given (default auto: the scheduler's
 * estimates choose the method per batch). One stream, enqueued whole before the request runs:
 * per layer a wait on its READY word, a wait on "this layer's block addresses are in the
 * patch table" (written by this thread once READY says they landed: kvl_req_block_addr), a
 * kernel copying those 128 addresses into the layer's block table, the attention, its DONE
 * word (by default through kvl_gpusig_lanes: the waits and DONE on side streams, the stream
 * itself waits on events; --sig direct puts them on the stream). The all-resident run is the
 * same stream without the waits, its patch table pointing at a VRAM copy of the tier's
 * blocks; the outputs of the two must be equal bit for bit. Timed by two events a layer
 * around the attention, as kvlane-gpu-bench times it (--events full adds one before the
 * waits, to split the stall from the DONE write; beside the copies it cost 2-8 us a layer).
 *   step    decode step time (8 layers), CUDA events, median over steps 1..D-1;
 *   comp    the attention kernels' time inside it (as slowed by the copies beside it);
 *   xfer    one decode step's 64 MiB by the transport alone (xport_cudma on this thread,
 *           pinned by EAL to core 0), with the method the run's batches took (AUTO's copy
 *           engine: cudaMemcpyBatchAsync in calls of 32; else the gather default);
 *   ovl  = 1 - max(0, step - comp) / xfer;  ovl* = 1 - max(0, step - resident step) / xfer,
 * as kvlane-gpu-bench defines them. /kvlane/tier's batches on each method and the estimates
 * are read back through the telemetry socket. Target (issue 14): ovl >= 95%.
 */
#define OV_B	     8
#define OV_NBLK	     2048
#define OV_R	     16
#define OV_L	     8
#define OV_SPLITS    16 /* kvlane-gpu-bench's best at this shape on the H200 (8 and 16: 287 us) */
#define OV_LAYER     ((size_t)OV_B * OV_R * ATT_BLOCK) /* the tier's bytes a layer: 8 MiB */
#define OV_RES_LAYER ((size_t)OV_B * (OV_NBLK - OV_R) * ATT_BLOCK)
#define OV_OUT	     ((size_t)OV_B * ATT_QH * ATT_HD) /* one layer's output, bf16 */
/* a step not READY by then fails, naming it (the run is killed at 30 s) */
#define OV_LIMIT_S 15.0
#define OV_AHEAD   2 /* decode steps enqueued ahead of the one being filled (ov_stream) */

/*
 * A/B switches of this bench only (the runtime is tuned through its INI):
 *   KVL_TIER_BENCH_ATTN_PRIO=greatest  the engine's stream at the greatest priority, as the
 *                               tier's copy streams now are: the relation of before (both at
 *                               one priority); default: the default (lowest) priority;
 *   KVL_TIER_BENCH_DIAG=1       also the gather kernel alone beside the resident attention,
 *                               by shape (DIAG lines).
 */
static bool ov_attn_greatest;

/*
 * --sig LIST (comma-separated): how the engine's stream meets the step flags, A/B of this
 * bench (the runtime sees the same words written and waited either way):
 *   lanes      (default) through kvl_gpusig_lanes: READY (and in staging the table word)
 *              waited on a side stream, DONE written on another, the engine's stream meets
 *              only events;
 *   direct     the engine's stream waits READY and writes DONE itself
 *              (kvl_gpusig_wait_addr / kvl_gpusig_done_addr);
 *   skip       the engine's thread reads the host READY word as it enqueues a layer and
 *              enqueues no wait when it has landed (an engine that checks on the host, as
 *              vLLM's wait_for_layer_load does); with --dest-ahead N, --enqueue-ahead E < N
 *              makes the thread enqueue late enough for that to happen;
 *   noready    diagnostic bound: no READY wait at all (outputs may differ: reported, not
 *              failed).
 * --events lean (default): no event before a layer's waits; the stall column is then the gap
 * from the previous layer's end (its DONE included) to the attention's start. --events full:
 * one more event there (in the resident run too), stall and "other" (the DONE write) apart.
 */
enum { SIG_LANES = 1, SIG_NOREADY = 2, SIG_SKIP = 4 };

/* The layer's 128 tier blocks (its first OV_R of each sequence) into its block table. */
__global__ static void ov_patch(uint64_t *tab, const uint64_t *src)
{
	unsigned t = blockIdx.x * blockDim.x + threadIdx.x;

	if (t < OV_B * OV_R)
		tab[(t / OV_R) * OV_NBLK + t % OV_R] = src[t];
}

struct ov_world {
	uint32_t unit, per_kv, n_units; /* unit bytes, units a 64 KiB block, units a layer */
	uint32_t steps;			/* decode steps */
	bool dest;			/* --dest engine: KVL_REQ_ENGINE_DEST into cache */
	uint8_t *res_pool;		/* resident blocks [L][B][NBLK - R] */
	uint8_t *res_remote;		/* the tier's blocks in VRAM too, [L][B][R] */
	uint64_t *tab;			/* device block tables [L][B][NBLK] (staging: patched) */
	uint64_t *tab_res;		/* dest: the resident run's, built whole [L][B][NBLK] */
	uint64_t *tabs;			/* dest: per layer-step, built once [steps * L][B][NBLK] */
	uint8_t *cache;			/* dest: the engine's KV cache [steps * L][B * R][64 KiB] */
	/* --dest-ahead N > 0: a request per decode step, N open ahead, landing in a ring of
	 * ring = N + 1 decode steps' places of the cache; fls[d]: decode step d's flags */
	uint32_t ring;
	const struct kvl_req_flags *fls;
	uint64_t *patch_res, *patch_res_dev; /* mapped [L][B * R]: the resident run's */
	uint64_t *patch, *patch_dev;	     /* mapped [steps * L][B * R]: the runtime run's */
	volatile uint32_t *filled;	     /* mapped [steps * L], 64 bytes apart */
	uint32_t *filled_dev;
	__nv_bfloat16 *q, *out_res, *out_pipe; /* [L][B][32][128]; out_pipe [steps][L]... */
	float *po, *pml;
	cudaStream_t st;
	unsigned sig;			/* SIG_* */
	bool lean;			/* --events lean */
	struct kvl_gpusig_lanes *lanes; /* SIG_LANES */
	uint32_t enq_ahead;		/* --dest-ahead: decode steps enqueued ahead (E) */
	uint64_t skipped;		/* SIG_SKIP: waits not enqueued, READY seen first */
};

struct ov_times {
	std::vector<double> step, comp; /* seconds, decode steps 1..D-1 */
	/* per decode step: the stream's time from each layer's first wait to its attention
	 * (READY, in staging also the table word and the patch kernel): exposed transfer */
	std::vector<double> stall;
	std::vector<double> pace; /* the runtime run: READY of step d's last layer to d+1's, as
				   * this thread saw the words (host clock) */
	double wall;		  /* the runtime run: open to its end event, seconds */
	/* the whole run, decode step 0 (the fill) included: first step's start to the last's
	 * end on the stream, and every attention's time in it. With engine destinations the
	 * transfer is not held back by DONE (landed bytes hold no window) and runs ahead of the
	 * compute, so the per-step median sees late steps with no transfer beside them; the
	 * whole run counts all of the transfer's cost, wherever it fell. */
	double run, comp_all;
};

/* Step @k's word (READY or DONE) of @base reached the epoch. */
static bool ov_reached(const volatile uint32_t *base, const struct kvl_req_flags *fl, uint32_t k)
{
	const volatile uint32_t *wd =
		(const volatile uint32_t *)((const uint8_t *)base + (size_t)k * fl->stride);

	return gpu_rt_reached(__atomic_load_n(wd, __ATOMIC_ACQUIRE), fl->epoch);
}

/* The events of layer-step j: before its waits, its attention's start and end. */
#define OV_EV_WAIT(w, j) ((w)->steps + 1 + 3 * (j))
#define OV_EV_ATT(w, j)	 ((w)->steps + 2 + 3 * (j))
#define OV_EV_END(w, j)	 ((w)->steps + 3 + 3 * (j))

/* Layer @l's attention over block table @table ([B][NBLK]) into @out's layer l. */
static void ov_attention(const struct ov_world *w, const uint64_t *table, uint32_t l,
			 __nv_bfloat16 *out)
{
	struct att_args a;
	dim3 grid(OV_SPLITS, ATT_KVH, OV_B);

	a.q = w->q + (size_t)l * OV_OUT;
	a.table = table;
	a.nblk = OV_NBLK;
	a.splits = OV_SPLITS;
	a.part_o = w->po;
	a.part_ml = w->pml;
	a.out = out + (size_t)l * OV_OUT;
	a.scale_log2 = (float)(1.0 / sqrt((double)ATT_HD) * 1.4426950408889634);
	att_split_kernel<<<grid, ATT_WARPS * 32, ATT_SMEM, w->st>>>(a);
	att_reduce_kernel<<<OV_B * ATT_QH, ATT_HD, 0, w->st>>>(a);
	CK(cudaGetLastError());
}

/*
 * Decode steps [@from, @to) of the engine's stream (the last one's end event too). @fl NULL:
 * the all-resident run. A decode step's kernels go in whole, before its first READY; the
 * runtime run keeps OV_AHEAD decode steps enqueued ahead of the one it fills: a stream
 * holding more than about a thousand operations blocks the thread that enqueues (CUDA's
 * launch queue), and one waiting on READY and table words that thread has not written yet
 * then never drains (the first H200 call hung so, all 128 layers enqueued at once).
 */
static void ov_stream(struct ov_world *w, const struct kvl_req_flags *fl,
		      std::vector<cudaEvent_t> &ev, uint32_t from, uint32_t to)
{
	char err[256];

	for (uint32_t d = from; d < to && d < w->steps; d++) {
		CK(cudaEventRecord(ev[d], w->st));
		for (uint32_t l = 0; l < OV_L; l++) {
			uint32_t j = d * OV_L + l;
			const uint64_t *src = w->patch_res_dev + (size_t)l * OV_B * OV_R;
			const uint64_t *table = w->tab + (size_t)l * OV_B * OV_NBLK;
			/* the flags and the step index in them; the cache place (tables[tj]) */
			const struct kvl_req_flags *f = fl;
			uint32_t k = j, tj = j;

			if (fl != NULL && w->ring) {
				f = &w->fls[d];
				k = l;
				tj = (d % w->ring) * OV_L + l;
			}
			/* the words this layer waits on: READY, in staging also the table's */
			uint64_t wa[2];
			uint32_t we[2];
			unsigned nw = 0;
			bool landed = false;

			if (!w->lean)
				CK(cudaEventRecord(ev[OV_EV_WAIT(w, j)], w->st));
			if (fl != NULL && (w->sig & SIG_SKIP)) {
				landed = ov_reached(f->ready, f, k);
				w->skipped += landed;
			}
			if (fl != NULL && !(w->sig & SIG_NOREADY) && !landed) {
				wa[nw] = f->ready_dev + (uint64_t)k * f->stride;
				we[nw++] = f->epoch;
			}
			if (w->dest) {
				/* the engine's block tables, built before the run: nothing to wait
				 * for but READY, nothing to patch */
				table = fl != NULL ? w->tabs + (size_t)tj * OV_B * OV_NBLK
						   : w->tab_res + (size_t)l * OV_B * OV_NBLK;
			} else if (fl != NULL) {
				wa[nw] = (uint64_t)(uintptr_t)w->filled_dev + (uint64_t)j * 64;
				we[nw++] = 1;
				src = w->patch_dev + (size_t)j * OV_B * OV_R;
			}
			if (w->sig & SIG_LANES)
				EXPECT(kvl_gpusig_lanes_wait(w->lanes, wa, we, nw, err,
							     sizeof(err)) == 0,
				       "lanes: wait %u: %s", j, err);
			else
				for (unsigned i = 0; i < nw; i++)
					EXPECT(kvl_gpusig_wait_addr(wa[i], we[i], w->st, err,
								    sizeof(err)) == 0,
					       "wait %u word %u: %s", j, i, err);
			if (!w->dest)
				ov_patch<<<1, OV_B * OV_R, 0, w->st>>>(
					w->tab + (size_t)l * OV_B * OV_NBLK, src);
			CK(cudaEventRecord(ev[OV_EV_ATT(w, j)], w->st));
			ov_attention(w, table, l,
				     fl != NULL ? w->out_pipe + (size_t)d * OV_L * OV_OUT
						: w->out_res);
			CK(cudaEventRecord(ev[OV_EV_END(w, j)], w->st));
			if (fl != NULL) {
				uint64_t da = f->done_dev + (uint64_t)k * f->stride;

				if (w->sig & SIG_LANES)
					EXPECT(kvl_gpusig_lanes_done(w->lanes, &da, &f->epoch, 1,
								     err, sizeof(err)) == 0,
					       "lanes: DONE %u: %s", j, err);
				else
					EXPECT(kvl_gpusig_done_addr(da, f->epoch, w->st, err,
								    sizeof(err)) == 0,
					       "write DONE %u: %s", j, err);
			}
		}
	}
	if (from < w->steps && to >= w->steps)
		CK(cudaEventRecord(ev[w->steps], w->st));
}

static struct ov_times ov_read(const struct ov_world *w, const std::vector<cudaEvent_t> &ev)
{
	struct ov_times t;
	float ms;

	t.wall = 0;
	t.comp_all = 0;
	CK(cudaDeviceSynchronize()); /* the side streams' too (--sig) */
	CK(cudaEventElapsedTime(&ms, ev[0], ev[w->steps]));
	t.run = ms / 1e3;
	for (uint32_t j = 0; j < w->steps * OV_L; j++) {
		CK(cudaEventElapsedTime(&ms, ev[OV_EV_ATT(w, j)], ev[OV_EV_END(w, j)]));
		t.comp_all += ms / 1e3;
	}
	for (uint32_t d = 1; d < w->steps; d++) { /* step 0 holds the pipeline's fill */
		double comp = 0, stall = 0;

		CK(cudaEventElapsedTime(&ms, ev[d], ev[d + 1]));
		t.step.push_back(ms / 1e3);
		for (uint32_t l = 0; l < OV_L; l++) {
			uint32_t j = d * OV_L + l;

			CK(cudaEventElapsedTime(&ms, ev[OV_EV_ATT(w, j)], ev[OV_EV_END(w, j)]));
			comp += ms / 1e3;
			/* lean: from the previous layer's end (its DONE included) */
			CK(cudaEventElapsedTime(&ms,
						!w->lean ? ev[OV_EV_WAIT(w, j)]
						: l == 0 ? ev[d]
							 : ev[OV_EV_END(w, j - 1)],
						ev[OV_EV_ATT(w, j)]));
			stall += ms / 1e3;
		}
		t.comp.push_back(comp);
		t.stall.push_back(stall);
	}
	return t;
}

/*
 * --dest engine: this thread only keeps the stream OV_AHEAD_DEST decode steps ahead (a bounded
 * queue: CUDA blocks an enqueue past its launch queue, and a blocked enqueue would hold the
 * driver against the NIC lcore's calls) and notes when each READY word arrives. It writes
 * nothing the stream waits on: per layer the stream waits READY, attends, writes DONE.
 */
#define OV_AHEAD_DEST 4

static bool ov_run_dest(struct kvl_runtime *rt, struct ov_world *w, const struct kvl_req_flags *fl,
			std::vector<cudaEvent_t> &ev, std::vector<double> &t_ready, double t0)
{
	const uint32_t G = w->steps * OV_L;
	struct kvl_req_event e[64];
	uint32_t next = 0;
	bool ended = false; /* its DONE event came in here: every DONE word was seen */

	ov_stream(w, fl, ev, 0, OV_AHEAD_DEST);
	for (uint32_t d = 0; d < w->steps; d++) {
		while (!ov_reached(fl->done, fl, d * OV_L + OV_L - 1)) {
			unsigned m = kvl_req_poll(rt, e, 64);

			for (unsigned i = 0; i < m; i++) {
				EXPECT(e[i].type != KVL_REQ_EV_FAILED,
				       "request failed before decode step %u was DONE: %s", d,
				       kvl_status_name(e[i].status));
				ended = ended || e[i].type == KVL_REQ_EV_DONE;
			}
			for (; next < G && ov_reached(fl->ready, fl, next); next++)
				t_ready[next] = gpu_rt_now_s();
			EXPECT(gpu_rt_now_s() - t0 < OV_LIMIT_S,
			       "decode step %u not DONE after %.0f s", d, OV_LIMIT_S);
		}
		for (; next < G && ov_reached(fl->ready, fl, next); next++)
			t_ready[next] = gpu_rt_now_s();
		ov_stream(w, fl, ev, d + OV_AHEAD_DEST, d + OV_AHEAD_DEST + 1);
	}
	return ended;
}

/*
 * --dest-ahead N: an engine that asks for each decode step's KV as it plans it, N decode steps
 * ahead, into a ring of N + 1 decode steps' places of its cache (a place is reused once the
 * step that used it is DONE). The transfer then runs at most N steps ahead of the compute, as
 * the staging's window holds it. Returns how many requests ended DONE.
 */
static uint32_t ov_run_dest_ahead(struct kvl_runtime *rt, struct ov_world *w, uint32_t seg_id,
				  const std::vector<uint32_t> &perm, std::vector<cudaEvent_t> &ev,
				  double t0)
{
	const uint32_t N = w->ring - 1, n = OV_L * w->n_units;
	std::vector<struct kvl_req_flags> fls(w->steps);
	std::vector<struct kvl_req_block> b(n);
	std::vector<uint32_t> first(OV_L + 1), refs(n);
	struct kvl_req_event e[64];
	uint32_t ended = 0;

	w->fls = fls.data();
	for (uint32_t i = 0; i < n; i++) {
		uint32_t l = i / w->n_units, u = i % w->n_units;

		memset(&b[i], 0, sizeof(b[i]));
		b[i].remote_seg = seg_id;
		b[i].remote_off = (uint64_t)perm[l * w->n_units + u] * w->unit;
		b[i].length = w->unit;
	}
	auto open_step = [&](uint32_t d) {
		struct kvl_req_desc dd;
		kvl_req_t req;
		int rc;

		for (uint32_t i = 0; i < n; i++)
			b[i].local = w->cache +
				     ((size_t)(d % w->ring) * OV_L + i / w->n_units) * OV_LAYER +
				     (size_t)(i % w->n_units) * w->unit;
		dd = step_desc(b, first, refs, OV_L);
		dd.flags |= KVL_REQ_ENGINE_DEST;
		dd.user = d;
		rc = kvl_req_open(rt, KVL_PEER_LOCAL_TIER, &dd, &req);
		EXPECT(rc == 0, "kvl_req_open decode step %u: %d %s", d, rc, kvl_req_error());
		EXPECT(kvl_req_step_flags(rt, req, &fls[d]) == 0 && fls[d].ready_dev &&
			       fls[d].done_dev,
		       "step flags mapped for the GPU");
	};
	/* the requests' events: a failure ends the run, DONEs are counted */
	auto drain = [&]() {
		unsigned m = kvl_req_poll(rt, e, 64);

		for (unsigned i = 0; i < m; i++) {
			EXPECT(e[i].type != KVL_REQ_EV_FAILED,
			       "decode step %llu's request failed: %s",
			       (unsigned long long)e[i].user, kvl_status_name(e[i].status));
			ended += e[i].type == KVL_REQ_EV_DONE;
		}
	};
	const uint32_t E = w->enq_ahead ? w->enq_ahead : N;

	for (uint32_t d = 0; d < N && d < w->steps; d++)
		open_step(d);
	ov_stream(w, &fls[0], ev, 0, E);
	for (uint32_t d = 0; d < w->steps; d++) {
		const volatile uint32_t *last =
			(const volatile uint32_t *)((const uint8_t *)fls[d].done +
						    (size_t)(OV_L - 1) * fls[d].stride);

		while (!gpu_rt_reached(__atomic_load_n(last, __ATOMIC_ACQUIRE), fls[d].epoch)) {
			drain();
			EXPECT(gpu_rt_now_s() - t0 < OV_LIMIT_S,
			       "decode step %u not DONE after %.0f s", d, OV_LIMIT_S);
		}
		if (d + N < w->steps) /* its place was decode step d - 1's, DONE */
			open_step(d + N);
		if (d + E < w->steps)
			ov_stream(w, &fls[0], ev, d + E, d + E + 1);
	}
	while (ended < w->steps) {
		drain();
		EXPECT(gpu_rt_now_s() - t0 < OV_LIMIT_S, "requests not ended after %.0f s",
		       OV_LIMIT_S);
	}
	CK(cudaStreamSynchronize(w->st));
	w->fls = NULL;
	return ended;
}

/* The runtime run: the request, the stream, and (staging) this thread's patch tables. Returns
 * how many 64 KiB blocks did not land contiguous (staging: a unit of theirs in another slot
 * than side by side: the attention then reads other bytes than the resident run's, and the
 * outputs differ; dest: every block lands where the engine named). */
static uint64_t ov_runtime(struct kvl_runtime *rt, struct ov_world *w, uint32_t seg_id,
			   const std::vector<uint32_t> &perm, std::vector<cudaEvent_t> &ev,
			   struct ov_times *times)
{
	const uint32_t G = w->steps * OV_L, n = G * w->n_units;
	std::vector<struct kvl_req_block> b(n);
	std::vector<uint32_t> first(G + 1), refs(n);
	std::vector<double> t_ready(G, 0);
	struct kvl_req_desc d;

	if (w->ring) {
		double t0 = gpu_rt_now_s();

		CK(cudaMemset(w->cache, 0xff, (size_t)w->ring * OV_L * OV_LAYER));
		CK(cudaDeviceSynchronize());
		ov_run_dest_ahead(rt, w, seg_id, perm, ev, t0);
		*times = ov_read(w, ev);
		times->wall = gpu_rt_now_s() - t0;
		return 0;
	}
	struct kvl_req_flags fl;
	kvl_req_t req;
	uint64_t scattered = 0;
	double t0;
	int end = 0, rc;
	bool ended = false;

	for (uint32_t i = 0; i < n; i++) {
		uint32_t j = i / w->n_units, l = j % OV_L, u = i % w->n_units;

		memset(&b[i], 0, sizeof(b[i]));
		b[i].remote_seg = seg_id;
		b[i].remote_off = (uint64_t)perm[l * w->n_units + u] * w->unit;
		b[i].length = w->unit;
		/* dest: layer-step j's 128 blocks of 64 KiB side by side in its own 8 MiB of the
		 * cache, a block's units in order: where its block table points */
		if (w->dest)
			b[i].local = w->cache + (size_t)j * OV_LAYER + (size_t)u * w->unit;
	}
	d = step_desc(b, first, refs, G);
	if (w->dest) {
		d.flags |= KVL_REQ_ENGINE_DEST;
		/* poisoned: attention that read a block before it landed differs */
		CK(cudaMemset(w->cache, 0xff, (size_t)G * OV_LAYER));
		CK(cudaDeviceSynchronize());
	}
	memset((void *)w->filled, 0, (size_t)G * 64);
	rc = kvl_req_open(rt, KVL_PEER_LOCAL_TIER, &d, &req);
	EXPECT(rc == 0, "kvl_req_open on the tier: %d %s", rc, kvl_req_error());
	t0 = gpu_rt_now_s();
	EXPECT(kvl_req_step_flags(rt, req, &fl) == 0 && fl.ready_dev && fl.done_dev,
	       "step flags mapped for the GPU");
	if (w->dest) {
		ended = ov_run_dest(rt, w, &fl, ev, t_ready, t0);
	} else {
		ov_stream(w, &fl, ev, 0,
			  OV_AHEAD); /* decode steps up front, the rest as they fill */
		for (uint32_t j = 0; j < G; j++) {
			gpu_rt_wait_ready(rt, &fl, j, t0, OV_LIMIT_S);
			t_ready[j] = gpu_rt_now_s();
			for (uint32_t k = 0; k < OV_B * OV_R; k++) {
				uint32_t i0 = j * w->n_units + k * w->per_kv;
				void *a0, *a;

				EXPECT(kvl_req_block_addr(rt, req, i0, &a0) == 0,
				       "block %u address", i0);
				for (uint32_t q = 1; q < w->per_kv; q++) {
					EXPECT(kvl_req_block_addr(rt, req, i0 + q, &a) == 0,
					       "block %u address", i0 + q);
					if ((uint8_t *)a != (uint8_t *)a0 + (size_t)q * w->unit) {
						scattered++;
						break;
					}
				}
				w->patch[(size_t)j * OV_B * OV_R + k] = (uint64_t)(uintptr_t)a0;
			}
			__atomic_store_n((uint32_t *)(uintptr_t)&w->filled[j * 16], 1,
					 __ATOMIC_RELEASE);
			if (j % OV_L == OV_L - 1) /* decode step j / L filled: the next one's */
				ov_stream(w, &fl, ev, j / OV_L + OV_AHEAD, j / OV_L + OV_AHEAD + 1);
		}
	}
	if (!ended)
		end = gpu_rt_wait_end(rt, t0, OV_LIMIT_S);
	EXPECT(end == 0, "the request ended with %s", kvl_status_name(end));
	*times = ov_read(w, ev);
	times->wall = gpu_rt_now_s() - t0;
	for (uint32_t k = 1; k + 1 < w->steps; k++)
		if (t_ready[(k + 1) * OV_L - 1] > 0 && t_ready[k * OV_L - 1] > 0)
			times->pace.push_back(t_ready[(k + 1) * OV_L - 1] - t_ready[k * OV_L - 1]);
	return scattered;
}

static int overlap_main(int argc, char **argv)
{
	uint32_t unit_kb = 16, steps = 16, runs = 3;
	const char *copy = "auto", *dest = "engine", *sig_arg = "lanes", *events = "lean";
	uint32_t dest_ahead = 0, enq_ahead = 0;
	char ini[2048], err[2048], out[16384];
	struct kvl_seg_geom g;
	struct kvl_segment seg;
	struct kvl_runtime *rt;
	struct ov_world w;
	int stage = 0;

	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--unit-kb") == 0 && i + 1 < argc)
			unit_kb = (uint32_t)atoi(argv[++i]);
		else if (strcmp(argv[i], "--steps") == 0 && i + 1 < argc)
			steps = (uint32_t)atoi(argv[++i]);
		else if (strcmp(argv[i], "--runs") == 0 && i + 1 < argc)
			runs = (uint32_t)atoi(argv[++i]);
		else if (strcmp(argv[i], "--copy") == 0 && i + 1 < argc)
			copy = argv[++i];
		else if (strcmp(argv[i], "--dest") == 0 && i + 1 < argc)
			dest = argv[++i];
		else if (strcmp(argv[i], "--dest-ahead") == 0 && i + 1 < argc)
			dest_ahead = (uint32_t)atoi(argv[++i]);
		else if (strcmp(argv[i], "--sig") == 0 && i + 1 < argc)
			sig_arg = argv[++i];
		else if (strcmp(argv[i], "--events") == 0 && i + 1 < argc)
			events = argv[++i];
		else if (strcmp(argv[i], "--enqueue-ahead") == 0 && i + 1 < argc)
			enq_ahead = (uint32_t)atoi(argv[++i]);
		else {
			fprintf(stderr,
				"usage: kvlane-tier-bench overlap [--unit-kb 16|64] [--steps D] "
				"[--runs N] [--copy auto|gather|batch|each] [--dest "
				"engine|staging] [--dest-ahead N] [--sig "
				"direct|lanes,skip,noready] "
				"[--enqueue-ahead E] [--events full|lean]\n"
				"  defaults: --unit-kb 16 --steps 16 --runs 3 --copy auto --dest "
				"engine --sig lanes --events lean\n"
				"  env: KVL_TIER_BENCH_ATTN_PRIO=greatest (the engine's stream at "
				"the "
				"copy streams' priority), KVL_TIER_BENCH_DIAG=1 (the gather "
				"kernel's "
				"shapes beside the resident attention)\n");
			return 2;
		}
	}
	if ((unit_kb != 16 && unit_kb != 64) || steps < 3 || steps > 64 || runs < 1 || runs > 9 ||
	    (strcmp(dest, "engine") != 0 && strcmp(dest, "staging") != 0) || dest_ahead > 8 ||
	    dest_ahead + 1 > steps || (dest_ahead > 0 && strcmp(dest, "engine") != 0) ||
	    enq_ahead > dest_ahead ||
	    (strcmp(events, "full") != 0 && strcmp(events, "lean") != 0)) {
		fprintf(stderr, "--unit-kb 16 or 64, --steps 3..64, --runs 1..9, --dest engine or "
				"staging, --dest-ahead 0..8 (with --dest engine), --enqueue-ahead "
				"1..N (with --dest-ahead N), --events full or lean\n");
		return 2;
	}
	memset(&w, 0, sizeof(w));
	w.enq_ahead = enq_ahead;
	w.lean = strcmp(events, "lean") == 0;
	{
		static const struct {
			const char *name;
			unsigned bit;
		} sig_names[] = { { "direct", 0 },
				  { "lanes", SIG_LANES },
				  { "skip", SIG_SKIP },
				  { "noready", SIG_NOREADY } };
		char buf[128], *save = NULL;

		snprintf(buf, sizeof(buf), "%s", sig_arg);
		for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
			size_t k = 0;

			while (k < sizeof(sig_names) / sizeof(sig_names[0]) &&
			       strcmp(t, sig_names[k].name) != 0)
				k++;
			if (k == sizeof(sig_names) / sizeof(sig_names[0])) {
				fprintf(stderr,
					"--sig: '%s' is not one of direct, lanes, skip, noready\n",
					t);
				return 2;
			}
			w.sig |= sig_names[k].bit;
		}
	}
	if (gpu_test_devices() == 0)
		return GPU_TEST_SKIP;
	w.unit = unit_kb << 10;
	w.per_kv = ATT_BLOCK / w.unit;
	w.n_units = (uint32_t)(OV_LAYER / w.unit);
	w.steps = steps;
	w.dest = strcmp(dest, "engine") == 0;
	w.ring = dest_ahead ? dest_ahead + 1 : 0;
	char dest_label[32];

	snprintf(dest_label, sizeof(dest_label), "%s%s%u", dest, dest_ahead ? "-ahead" : "",
		 dest_ahead);
	if (!dest_ahead)
		snprintf(dest_label, sizeof(dest_label), "%s", dest);
	dest = dest_label;
	gpu_rt_init("tierovl");
	CK(cudaSetDevice(0));
	snprintf(ini, sizeof(ini),
		 "[runtime]\nname = tier-ovl\nidle_policy = poll\n"
		 "[nic.lo]\ndevice = lo\ntransport = tcp\n"
		 "[gpu]\nenable = true\ndevice_id = 0\nvram_reserve_mb = 2048\n"
		 "[memory]\npool_size_mb = 320\nchunk_size_kb = 4096\n"
		 "[sched]\nstaging_mb = 256\nslot_kb = %u\nstaging = gpu\ntier = true\n"
		 "tier_copy = %s\nwindow_min_kb = 65536\nwindow_max_mb = 256\nmax_blocks = 131072\n"
		 "max_requests = 16\n",
		 unit_kb, copy);
	rt = gpu_rt_start(gpu_rt_write_ini("ovl.ini", ini), NULL, 0, err, sizeof(err), &stage);
	EXPECT(rt != NULL, "kvl_start: stage %d: %s", stage, err);
	g.layers = OV_L;
	g.planes = 1;
	g.blocks = OV_B * OV_R;
	g.block_bytes = ATT_BLOCK; /* 8 MiB a layer */
	EXPECT(kvl_seg_alloc(rt, "tier", &g, KVL_REMOTE_READ, &seg) == 0, "kvl_seg_alloc");
	EXPECT(seg.length == OV_L * OV_LAYER, "segment of %llu bytes",
	       (unsigned long long)seg.length);

	/* the model: resident KV, the tier's KV (in VRAM for the resident run, scattered in the
	 * pool segment for the runtime's), queries, outputs poisoned */
	CK(cudaFuncSetAttribute(att_split_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
				ATT_SMEM));
	{
		struct cudaFuncAttributes fa; /* loaded before any stream waits on READY */

		CK(cudaFuncGetAttributes(&fa, att_split_kernel));
		CK(cudaFuncGetAttributes(&fa, att_reduce_kernel));
		CK(cudaFuncGetAttributes(&fa, ov_patch));
	}
	{
		const char *a = getenv("KVL_TIER_BENCH_ATTN_PRIO");
		int least = 0, greatest = 0;

		ov_attn_greatest = a != NULL && strcmp(a, "greatest") == 0;
		CK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
		CK(cudaStreamCreateWithPriority(&w.st, cudaStreamNonBlocking,
						ov_attn_greatest ? greatest : least));
		printf("the engine's stream at priority %d (%s; range %d least .. %d greatest)\n",
		       ov_attn_greatest ? greatest : least,
		       ov_attn_greatest ? "greatest" : "default", least, greatest);
		if (w.sig & SIG_LANES) {
			w.lanes = kvl_gpusig_lanes_new(w.st, err, sizeof(err));
			EXPECT(w.lanes != NULL, "kvl_gpusig_lanes_new: %s", err);
		}
		printf("the engine's step flags: --sig %s, --events %s\n", sig_arg, events);
	}
	CK(cudaMalloc((void **)&w.res_pool, OV_RES_LAYER * OV_L));
	CK(cudaMalloc((void **)&w.res_remote, OV_LAYER * OV_L));
	CK(cudaMalloc((void **)&w.tab, (size_t)OV_L * OV_B * OV_NBLK * 8));
	if (w.dest) {
		/* the engine's paged KV cache: every layer-step's blocks in a place of their own
		 * (destinations may not overlap), registered as a GPU segment */
		struct kvl_seg_geom cg;
		struct kvl_segment cs;

		CK(cudaMalloc((void **)&w.tab_res, (size_t)OV_L * OV_B * OV_NBLK * 8));
		CK(cudaMalloc((void **)&w.tabs, (size_t)steps * OV_L * OV_B * OV_NBLK * 8));
		CK(cudaMalloc((void **)&w.cache, (size_t)steps * OV_L * OV_LAYER));
		cg.layers = steps * OV_L;
		cg.planes = 1;
		cg.blocks = OV_B * OV_R;
		cg.block_bytes = ATT_BLOCK;
		EXPECT(kvl_seg_register(rt, "kvcache", w.cache, &cg, 0, &cs) == 0,
		       "kvl_seg_register the cudaMalloc'd cache: %s", kvl_seg_error());
		EXPECT(cs.mem == KVL_MEM_GPU, "the cache is not seen as GPU memory (%u)", cs.mem);
	}
	CK(cudaMalloc((void **)&w.q, OV_OUT * OV_L * 2));
	CK(cudaMalloc((void **)&w.out_res, OV_OUT * OV_L * 2));
	CK(cudaMalloc((void **)&w.out_pipe, OV_OUT * OV_L * 2 * steps));
	CK(cudaMalloc((void **)&w.po, (size_t)OV_B * ATT_QH * OV_SPLITS * ATT_HD * 4));
	CK(cudaMalloc((void **)&w.pml, (size_t)OV_B * ATT_QH * OV_SPLITS * 2 * 4));
	att_fill_kernel<<<1024, 256>>>((__nv_bfloat16 *)w.res_pool, OV_RES_LAYER * OV_L / 2, 11);
	att_fill_kernel<<<1024, 256>>>((__nv_bfloat16 *)w.res_remote, OV_LAYER * OV_L / 2, 12);
	att_fill_kernel<<<256, 256>>>(w.q, OV_OUT * OV_L, 13);
	CK(cudaGetLastError());
	CK(cudaMemset(w.out_res, 0xff, OV_OUT * OV_L * 2));
	CK(cudaMemset(w.out_pipe, 0xff, OV_OUT * OV_L * 2 * steps));
	CK(cudaHostAlloc((void **)&w.patch_res, (size_t)OV_L * OV_B * OV_R * 8,
			 cudaHostAllocMapped));
	CK(cudaHostGetDevicePointer((void **)&w.patch_res_dev, w.patch_res, 0));
	CK(cudaHostAlloc((void **)&w.patch, (size_t)steps * OV_L * OV_B * OV_R * 8,
			 cudaHostAllocMapped));
	CK(cudaHostGetDevicePointer((void **)&w.patch_dev, w.patch, 0));
	CK(cudaHostAlloc((void **)&w.filled, (size_t)steps * OV_L * 64, cudaHostAllocMapped));
	CK(cudaHostGetDevicePointer((void **)&w.filled_dev, (void *)w.filled, 0));
	std::vector<uint32_t> perm = gpu_bench_scatter(OV_L * w.n_units, 42 + w.unit);
	{
		std::vector<uint64_t> t((size_t)OV_L * OV_B * OV_NBLK);
		std::vector<uint8_t> h(OV_LAYER * OV_L);

		for (uint32_t l = 0; l < OV_L; l++)
			for (uint32_t b = 0; b < OV_B; b++)
				for (uint32_t i = 0; i < OV_NBLK; i++)
					t[((size_t)l * OV_B + b) * OV_NBLK + i] =
						i < OV_R ? 0 /* patched per run */
							 : (uint64_t)(uintptr_t)(w.res_pool +
										 l * OV_RES_LAYER +
										 ((size_t)b *
											  (OV_NBLK -
											   OV_R) +
										  i - OV_R) *
											 ATT_BLOCK);
		CK(cudaMemcpy(w.tab, t.data(), t.size() * 8, cudaMemcpyHostToDevice));
		if (w.dest) {
			/* the engine's block tables, as an engine builds them before a run: the
			 * resident run's tier blocks in res_remote, layer-step j's in its own 8 MiB
			 * of the registered cache */
			std::vector<uint64_t> ts((size_t)steps * OV_L * OV_B * OV_NBLK);

			for (uint32_t l = 0; l < OV_L; l++)
				for (uint32_t k = 0; k < OV_B * OV_R; k++)
					t[((size_t)l * OV_B + k / OV_R) * OV_NBLK + k % OV_R] =
						(uint64_t)(uintptr_t)(w.res_remote + l * OV_LAYER +
								      (size_t)k * ATT_BLOCK);
			CK(cudaMemcpy(w.tab_res, t.data(), t.size() * 8, cudaMemcpyHostToDevice));
			for (uint32_t j = 0; j < steps * OV_L; j++) {
				uint32_t l = j % OV_L;

				memcpy(&ts[(size_t)j * OV_B * OV_NBLK],
				       &t[(size_t)l * OV_B * OV_NBLK], (size_t)OV_B * OV_NBLK * 8);
				for (uint32_t k = 0; k < OV_B * OV_R; k++)
					ts[((size_t)j * OV_B + k / OV_R) * OV_NBLK + k % OV_R] =
						(uint64_t)(uintptr_t)(w.cache +
								      (size_t)j * OV_LAYER +
								      (size_t)k * ATT_BLOCK);
			}
			CK(cudaMemcpy(w.tabs, ts.data(), ts.size() * 8, cudaMemcpyHostToDevice));
		}
		for (uint32_t l = 0; l < OV_L; l++)
			for (uint32_t k = 0; k < OV_B * OV_R; k++)
				w.patch_res[l * OV_B * OV_R + k] =
					(uint64_t)(uintptr_t)(w.res_remote + l * OV_LAYER +
							      (size_t)k * ATT_BLOCK);
		/* the tier's copy: logical unit u of the segment at place perm[u] */
		CK(cudaMemcpy(h.data(), w.res_remote, h.size(), cudaMemcpyDeviceToHost));
		for (uint32_t u = 0; u < OV_L * w.n_units; u++)
			memcpy((uint8_t *)seg.base + (size_t)perm[u] * w.unit,
			       h.data() + (size_t)u * w.unit, w.unit);
	}
	std::vector<cudaEvent_t> ev(steps + 1 + 3 * steps * OV_L);

	for (auto &e : ev)
		CK(cudaEventCreate(&e));

	/* all resident */
	ov_stream(&w, NULL, ev, 0, steps);
	struct ov_times res = ov_read(&w, ev);
	double p50r = gpu_bench_median(res.step), compr = gpu_bench_median(res.comp);
	std::vector<uint16_t> o_res(OV_OUT * OV_L), o_pipe(OV_OUT * OV_L * steps);

	CK(cudaMemcpy(o_res.data(), w.out_res, o_res.size() * 2, cudaMemcpyDeviceToHost));

	/* the transfer alone, both ways the tier's engine may take a batch */
	void *scratch;

	CK(cudaMalloc(&scratch, seg.length));
	double x_ce = transport(&seg, scratch, w.unit, perm, 5, KVL_CUDMA_BATCH, 32).s;
	double x_g = transport(&seg, scratch, w.unit, perm, 5).s;

	if (getenv("KVL_TIER_BENCH_DIAG") != NULL && *getenv("KVL_TIER_BENCH_DIAG") != '\0') {
		/*
		 * Diagnostic (KVL_TIER_BENCH_DIAG=1): the transport alone of a step's blocks
		 * (gather, on this thread, the tier's streams' priority) while the all-resident
		 * attention runs on the engine's stream, for a few gather shapes: the rate it
		 * keeps beside the attention, and the attention's time in decode steps 1-4 (which
		 * the copies overlap) against the resident run's alone.
		 */
		static const unsigned shape[][2] = {
			{ 8, 8 }, { 8, 16 }, { 16, 8 }, { 16, 16 }, { 32, 8 }
		};

		for (const auto &sh : shape) {
			ov_stream(&w, NULL, ev, 0, steps);
			double xs = transport(&seg, scratch, w.unit, perm, 3, KVL_CUDMA_GATHER, 0,
					      sh[0], sh[1])
					    .s;
			struct ov_times bt = ov_read(&w, ev);
			std::vector<double> c4(bt.comp.begin(),
					       bt.comp.begin() +
						       std::min<size_t>(4, bt.comp.size()));

			printf("DIAG beside attention: gather %u CTAs depth %u: %.3f ms a step "
			       "(%.1f GB/s); attention steps 1-4 %.3f ms (alone %.3f, %+.1f%%)\n",
			       sh[0], sh[1], xs * 1e3, seg.length / xs / GB,
			       gpu_bench_median(c4) * 1e3, compr * 1e3,
			       100 * (gpu_bench_median(c4) / compr - 1));
		}
	}
	CK(cudaFree(scratch));
	printf("host tier overlap with attention through the runtime: scenario A of "
	       "kvlane-gpu-bench (%u seqs x %u blocks, %u each from the tier: %zu MiB a layer, "
	       "%u layers a step), unit %u KiB, tier_copy = %s, dest = %s, %u steps a run\n",
	       OV_B, OV_NBLK, OV_R, OV_LAYER >> 20, OV_L, unit_kb, copy, dest, steps);
	printf("transfer alone of a step (%zu MiB): copy engine (batch calls of 32) %.3f ms "
	       "(%.1f GB/s), gather default %.3f ms (%.1f GB/s)\n",
	       (size_t)seg.length >> 20, x_ce * 1e3, seg.length / x_ce / GB, x_g * 1e3,
	       seg.length / x_g / GB);
	printf("%-10s %8s %8s %7s %8s %8s %7s %7s %6s %6s %10s\n", "run", "step ms", "comp ms",
	       "slow%", "stall ms", "xfer ms", "ovl%", "ovl*%", "ce", "gather", "unaligned");
	printf("%-10s %8.3f %8.3f %7s %8.3f %8s %7s %7s %6s %6s %10s\n", "resident", p50r * 1e3,
	       compr * 1e3, "-", gpu_bench_median(res.stall) * 1e3, "-", "-", "-", "-", "-", "-");
	std::vector<double> ovls;
	bool outputs_ok = true;
	/* /kvlane/tier counters read around each run: their change is the run's */
	static const char *const ctr[] = {
		"batches_copy_engine", "batches_gather",     "batches",
		"handovers",	       "launches",	     "small_copies",
		"engine_copies",       "svc_ns_copy_engine", "svc_bytes_copy_engine",
		"svc_ns_gather",       "svc_bytes_gather",   "auto_probes",
		"auto_bad_samples",    "dest_reads",	     "copies"
	};
	enum {
		C_CE,
		C_G,
		C_B,
		C_HO,
		C_L,
		C_S,
		C_E,
		C_SNC,
		C_SBC,
		C_SNG,
		C_SBG,
		C_P,
		C_BAD,
		C_DR,
		C_CP,
		C_N
	};
	uint64_t c0[C_N], dc[C_N];

	for (uint32_t r = 0; r < runs; r++) {
		struct ov_times t;
		uint64_t bad;
		uint32_t steps_bad = 0;

		gpu_rt_tel("/kvlane/tier", out, sizeof(out));
		for (int k = 0; k < C_N; k++)
			c0[k] = gpu_rt_tel_u64(out, ctr[k]);
		CK(cudaMemset(w.out_pipe, 0xff, OV_OUT * OV_L * 2 * steps));
		w.skipped = 0;
		bad = ov_runtime(rt, &w, seg.id, perm, ev, &t);
		gpu_rt_tel("/kvlane/tier", out, sizeof(out));
		for (int k = 0; k < C_N; k++)
			dc[k] = gpu_rt_tel_u64(out, ctr[k]) - c0[k];
		/* the transfer of the method the run's batches took */
		double x = dc[C_CE] >= dc[C_G] ? x_ce : x_g, p50 = gpu_bench_median(t.step),
		       comp = gpu_bench_median(t.comp), stall = gpu_bench_median(t.stall);
		double ovl = 1 - std::max(0.0, p50 - comp) / x,
		       ovls_ = 1 - std::max(0.0, p50 - p50r) / x;
		/* the whole run's: all steps' exposed time over all steps' transfer */
		double ovl_run = 1 - std::max(0.0, t.run - t.comp_all) / (steps * x),
		       ovl_run_s = 1 - std::max(0.0, t.run - res.run) / (steps * x);

		CK(cudaMemcpy(o_pipe.data(), w.out_pipe, o_pipe.size() * 2,
			      cudaMemcpyDeviceToHost));
		/* every decode step's outputs against the resident run's, bit for bit */
		for (uint32_t k = 0; k < steps; k++)
			steps_bad += memcmp(o_res.data(), o_pipe.data() + (size_t)k * o_res.size(),
					    o_res.size() * 2) != 0;
		bool same = steps_bad == 0;

		/* noready is a bound, not a correct engine: its outputs may differ */
		outputs_ok = outputs_ok && (same || bad > 0 || (w.sig & SIG_NOREADY));
		/* engine destinations run ahead (see ov_times.run): judged by the whole run */
		ovls.push_back(w.dest && !w.ring ? ovl_run : ovl);
		printf("%-10s %8.3f %8.3f %6.1f%% %8.3f %8.3f %6.1f%% %6.1f%% %6llu %6llu "
		       "%10llu%s\n",
		       "runtime", p50 * 1e3, comp * 1e3, 100 * (comp / compr - 1), stall * 1e3,
		       x * 1e3, 100 * ovl, 100 * ovls_, (unsigned long long)dc[C_CE],
		       (unsigned long long)dc[C_G], (unsigned long long)bad,
		       same ? "  outputs = resident (every step)" : "  OUTPUTS DIFFER");
		if (!same)
			printf("           %u of %u decode steps' outputs differ\n", steps_bad,
			       steps);
		/* where the time went: the stream's waits, the engine's batches and their rate */
		double gbs_ce = dc[C_SNC] ? (double)dc[C_SBC] / dc[C_SNC] : 0,
		       gbs_g = dc[C_SNG] ? (double)dc[C_SBG] / dc[C_SNG] : 0;
		double pace = t.pace.empty() ? 0 : gpu_bench_median(t.pace);
		printf("           open to end %.1f ms (%u decode steps); per step: stall %.3f ms, "
		       "other %.3f ms (step - comp - stall), READY pace %.3f ms; READY waits "
		       "not enqueued (landed first) %llu of %u\n",
		       t.wall * 1e3, steps, stall * 1e3, (p50 - comp - stall) * 1e3, pace * 1e3,
		       (unsigned long long)w.skipped, steps * OV_L);
		printf("           whole run (step 0 included): %.3f ms against resident %.3f ms, "
		       "attention %.3f ms, %u transfers %.3f ms: ovl %.1f%%, ovl* %.1f%%%s\n",
		       t.run * 1e3, res.run * 1e3, t.comp_all * 1e3, steps, steps * x * 1e3,
		       100 * ovl_run, 100 * ovl_run_s,
		       w.dest && !w.ring ? " (the target's measure here)" : "");
		printf("           stall a layer %.1f us\n", stall * 1e6 / OV_L);
		printf("           stall per step (ms):");
		for (double v : t.stall)
			printf(" %.3f", v * 1e3);
		printf("\n           step (ms):");
		for (double v : t.step)
			printf(" %.3f", v * 1e3);
		printf("\n");
		printf("           engine: %llu batches (%llu handovers), %llu launches, %llu "
		       "small "
		       "copies (%.1f a launch), %llu engine copies, %llu READs into the engine's "
		       "cache; service rate: copy engine %.1f GB/s (%.0f MiB), gather %.1f GB/s "
		       "(%.0f MiB) = a step's %zu MiB in %.3f ms; probes %llu, bad samples %llu\n",
		       (unsigned long long)dc[C_B], (unsigned long long)dc[C_HO],
		       (unsigned long long)dc[C_L], (unsigned long long)dc[C_S],
		       dc[C_L] ? (double)dc[C_S] / dc[C_L] : 0.0, (unsigned long long)dc[C_E],
		       (unsigned long long)dc[C_DR], gbs_ce, dc[C_SBC] / 1048576.0, gbs_g,
		       dc[C_SBG] / 1048576.0, (size_t)seg.length >> 20,
		       (double)seg.length /
			       ((dc[C_SBC] + dc[C_SBG])
					? (double)(dc[C_SBC] + dc[C_SBG]) / (dc[C_SNC] + dc[C_SNG])
					: 1e300) *
			       1e-6,
		       (unsigned long long)dc[C_P], (unsigned long long)dc[C_BAD]);
		printf("           AUTO's measured ps a byte (samples): <32K copy engine %llu "
		       "(%llu), "
		       "gather %llu (%llu); >=32K copy engine %llu (%llu), gather %llu (%llu)\n",
		       (unsigned long long)gpu_rt_tel_u64(out, "auto_ce_ps_16k"),
		       (unsigned long long)gpu_rt_tel_u64(out, "auto_ce_samples_16k"),
		       (unsigned long long)gpu_rt_tel_u64(out, "auto_gather_ps_16k"),
		       (unsigned long long)gpu_rt_tel_u64(out, "auto_gather_samples_16k"),
		       (unsigned long long)gpu_rt_tel_u64(out, "auto_ce_ps_64k"),
		       (unsigned long long)gpu_rt_tel_u64(out, "auto_ce_samples_64k"),
		       (unsigned long long)gpu_rt_tel_u64(out, "auto_gather_ps_64k"),
		       (unsigned long long)gpu_rt_tel_u64(out, "auto_gather_samples_64k"));
		printf("BENCH tier_overlap unit=%uK copy=%s dest=%s step_ms=%.3f comp_ms=%.3f "
		       "stall_ms=%.3f resident_ms=%.3f xfer_ms=%.3f ovl=%.4f ovl_star=%.4f "
		       "batches_ce=%llu batches_gather=%llu launches=%llu small_copies=%llu "
		       "svc_GBps_ce=%.2f svc_GBps_gather=%.2f probes=%llu est_compute_ns=%llu "
		       "est_step_bytes=%llu outputs_equal=%d run_ms=%.3f resident_run_ms=%.3f "
		       "ovl_run=%.4f ovl_run_star=%.4f attn_prio=%s sig=%s events=%s "
		       "enqueue_ahead=%u skipped=%llu other_ms=%.3f\n",
		       unit_kb, copy, dest, p50 * 1e3, comp * 1e3, stall * 1e3, p50r * 1e3, x * 1e3,
		       ovl, ovls_, (unsigned long long)dc[C_CE], (unsigned long long)dc[C_G],
		       (unsigned long long)dc[C_L], (unsigned long long)dc[C_S], gbs_ce, gbs_g,
		       (unsigned long long)dc[C_P],
		       (unsigned long long)gpu_rt_tel_u64(out, "est_compute_ns"),
		       (unsigned long long)gpu_rt_tel_u64(out, "est_step_bytes"), same ? 1 : 0,
		       t.run * 1e3, res.run * 1e3, ovl_run, ovl_run_s,
		       ov_attn_greatest ? "greatest" : "default", sig_arg, events,
		       w.enq_ahead ? w.enq_ahead : dest_ahead, (unsigned long long)w.skipped,
		       (p50 - comp - stall) * 1e3);
	}
	printf("/kvlane/tier: %.2000s\n", out);
	double m = gpu_bench_median(ovls);

	printf("target at %uK (copy %s, dest %s, sig %s): overlap with attention >= 95%% "
	       "through the runtime (median of %u runs %.1f%%, %s): %s\n",
	       unit_kb, copy, dest, sig_arg, runs, 100 * m,
	       w.dest && !w.ring ? "ovl of the whole run" : "ovl of the median step",
	       m >= 0.95 ? "MET" : "MISSED");
	EXPECT(outputs_ok, "the runtime's attention outputs differ from the resident run's");
	for (auto &e : ev)
		CK(cudaEventDestroy(e));
	if (w.lanes != NULL) {
		struct kvl_gpusig_lanes_stats ls;

		kvl_gpusig_lanes_stats(w.lanes, &ls);
		printf("lanes: %llu READY waits, %llu DONE writes, %llu joins\n",
		       (unsigned long long)ls.waits, (unsigned long long)ls.dones,
		       (unsigned long long)ls.joins);
		kvl_gpusig_lanes_free(w.lanes);
	}
	kvl_stop(rt);
	return 0;
}

int main(int argc, char **argv)
{
	int reps = 5;
	uint64_t mib = 1024;
	char ini[1024], err[2048], out[16384];
	struct kvl_seg_geom g;
	struct kvl_segment seg;
	struct kvl_runtime *rt;
	uint64_t expect_bytes = 0, batches0 = 0;
	int stage = 0;
	void *dst;
	double ceil_gbs, busy_gib[2] = { 0, 0 };
	struct gpu_rt_loop lp0, lp1;
	bool ok64 = true;

	if (argc > 1 && strcmp(argv[1], "overlap") == 0)
		return overlap_main(argc - 1, argv + 1);
	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc)
			reps = atoi(argv[++i]);
		else if (strcmp(argv[i], "--mib") == 0 && i + 1 < argc)
			mib = strtoull(argv[++i], NULL, 10);
		else {
			fprintf(stderr, "usage: %s [--reps R] [--mib M]\n", argv[0]);
			return 2;
		}
	}
	if (reps < 1 || mib < 64 || mib % 64 != 0) {
		fprintf(stderr, "--reps >= 1, --mib a multiple of 64, >= 64\n");
		return 2;
	}
	if (gpu_test_devices() == 0)
		return GPU_TEST_SKIP;
	gpu_rt_init("tierbnch");
	CK(cudaSetDevice(0));
	snprintf(ini, sizeof(ini),
		 "[runtime]\nname = tier-bench\nidle_policy = poll\n"
		 "[nic.lo]\ndevice = lo\ntransport = tcp\n"
		 "[gpu]\nenable = true\ndevice_id = 0\nvram_reserve_mb = 2048\n"
		 "[memory]\npool_size_mb = %llu\nchunk_size_kb = 4096\n"
		 "[sched]\nstaging_mb = 512\nslot_kb = %d\nstaging = gpu\ntier = true\n"
		 "window_max_mb = 512\nmax_blocks = 131072\nmax_requests = 4\n",
		 (unsigned long long)mib + 64, SLOT_KB);
	rt = gpu_rt_start(gpu_rt_write_ini("bench.ini", ini), NULL, 0, err, sizeof(err), &stage);
	EXPECT(rt != NULL, "kvl_start: stage %d: %s", stage, err);
	g.layers = (uint32_t)(mib / 64);
	g.planes = 1;
	g.blocks = 1024;
	g.block_bytes = 65536; /* 64 MiB a layer */
	EXPECT(kvl_seg_alloc(rt, "tier", &g, KVL_REMOTE_READ, &seg) == 0, "kvl_seg_alloc %llu MiB",
	       (unsigned long long)mib);
	memset(seg.base, 0x5a, seg.length); /* touched: nothing left to fault in */
	CK(cudaMalloc(&dst, seg.length));
	ceil_gbs = ceiling(seg.base, dst, seg.length, reps);
	printf("host tier benchmark: %llu MiB from a [memory] pool segment, scattered blocks, "
	       "median of %d; GB/s = 1e9 B/s\n",
	       (unsigned long long)mib, reps);
	printf("%-34s %5s %9s %8s %8s %7s %8s\n", "path", "unit", "ms", "GB/s", "x xport", "%ceil",
	       "batches");
	printf("%-34s %5s %9.3f %8.1f %8s %6.1f%% %8s\n", "pinned host->GPU ceiling (1 copy)", "-",
	       seg.length / ceil_gbs * 1e3, ceil_gbs / GB, "-", 100.0, "-");
	for (uint32_t u : { 65536u, 16384u }) {
		std::vector<uint32_t> perm = gpu_bench_scatter((uint32_t)(seg.length / u), 42 + u);
		struct row x = transport(&seg, dst, u, perm, reps);
		struct row y;
		double xg = seg.length / x.s, yg;
		uint64_t b1, ho0, small0, ho, small;
		const char *un = u == 65536 ? "64K" : "16K";

		gpu_rt_tel("/kvlane/tier", out, sizeof(out));
		batches0 = gpu_rt_tel_u64(out, "batches");
		ho0 = gpu_rt_tel_u64(out, "handovers");
		small0 = gpu_rt_tel_u64(out, "handover_small");
		lp0 = gpu_rt_loop_take();
		y = runtime(rt, &seg, u, perm, reps);
		lp1 = gpu_rt_loop_take();
		expect_bytes += (uint64_t)(reps + 1) * seg.length;
		busy_gib[u == 65536] = gpu_rt_loop_busy_s(&lp0, &lp1) /
				       ((double)(reps + 1) * seg.length / (1u << 30));
		gpu_rt_tel("/kvlane/tier", out, sizeof(out));
		b1 = gpu_rt_tel_u64(out, "batches");
		ho = (gpu_rt_tel_u64(out, "handovers") - ho0) / (reps + 1);
		small = (gpu_rt_tel_u64(out, "handover_small") - small0) / (reps + 1);
		yg = seg.length / y.s;
		printf("%-34s %5s %9.3f %8.1f %8s %6.1f%% %8llu\n",
		       "transport alone (cudma defaults)", un, x.s * 1e3, xg / GB, "1.00",
		       100 * xg / ceil_gbs, (unsigned long long)x.batches);
		printf("%-34s %5s %9.3f %8.1f %8.2f %6.1f%% %8llu\n",
		       "runtime: API->lcore->sched->READY", un, y.s * 1e3, yg / GB, yg / xg,
		       100 * yg / ceil_gbs, (unsigned long long)((b1 - batches0) / (reps + 1)));
		/* what reaches the copy engine per hand-over: the batch size the rate hangs on */
		printf("%-34s %5s handovers/run %llu, %.0f KiB each on average, %llu under the "
		       "2 MiB minimum\n",
		       "  runtime's batches", un, (unsigned long long)ho,
		       ho ? seg.length / 1024.0 / ho : 0.0, (unsigned long long)small);
		/* the same measure as test_tcp_vram's BENCH line (lcore_busy_s_per_gib): the NIC
		 * lcore's busy passes over the runs, per GiB moved */
		printf("%-34s %5s lcore busy %.4f s per GiB (/kvlane/lcores busy cycles, %.3f s "
		       "wall for %.0f GiB)\n",
		       "  runtime's NIC lcore", un, busy_gib[u == 65536], lp1.t - lp0.t,
		       (reps + 1) * (double)seg.length / (1u << 30));
		printf("BENCH tier unit=%s bytes=%llu GBps=%.2f lcore_busy_s_per_gib=%.4f\n", un,
		       (unsigned long long)((reps + 1) * seg.length), yg / GB,
		       busy_gib[u == 65536]);
		if (u == 65536)
			ok64 = yg >= 0.95 * xg && yg >= 0.90 * ceil_gbs;
		if (u == 65536)
			printf("target at 64K: runtime >= 0.95x transport (%.2f) and >= 90%% of "
			       "the "
			       "ceiling (%.1f%%): %s\n",
			       yg / xg, 100 * yg / ceil_gbs, ok64 ? "MET" : "MISSED");
	}
	gpu_rt_tel("/kvlane/tier", out, sizeof(out));
	printf("/kvlane/tier: %.400s\n", out);
	EXPECT(gpu_rt_tel_u64(out, "bytes") == expect_bytes && gpu_rt_tel_u64(out, "refused") == 0,
	       "/kvlane/tier moved %llu bytes, want %llu",
	       (unsigned long long)gpu_rt_tel_u64(out, "bytes"), (unsigned long long)expect_bytes);
	CK(cudaFree(dst));
	kvl_stop(rt);
	return 0;
}
