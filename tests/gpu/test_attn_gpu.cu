/* SPDX-License-Identifier: BSD-3-Clause */
/* gpu suite: paged decode attention behind READY flags on KV PULLed from the host tier. */
/*
 * The whole runtime, as test_tier_gpu: kvl_start with [sched] tier = true, staging = gpu, the
 * [memory] pool pinned for CUDA; a 1 GiB segment carved from the pool holds a model's KV cache
 * for one decode step: 64 layers x 4 sequences x 64 blocks (1024 tokens) of 64 KiB, in the
 * layout of tools/gpu_attn.cuh (bf16, 8 KV heads, head dim 128, 16 tokens a block).
 *
 *   resident  the same 1 GiB copied into VRAM first (cudaMemcpy from the segment); per layer,
 *             the paged decode attention kernel (att_split_kernel + att_reduce_kernel) over
 *             block tables that point into it;
 *   tier      one request on KVL_PEER_LOCAL_TIER opened with KVL_REQ_STEP_FLAGS, one step per
 *             layer (256 blocks, 16 MiB): the NIC lcore's scheduler READs them from the tier
 *             through the copy engine into VRAM staging (256 MiB: each slot is used 4 times)
 *             and writes the step's READY word once its copies have passed. One real stream,
 *             every operation enqueued before the request runs: per layer, a wait on its READY
 *             word (cuStreamWaitValue32 on the device address the request API gives), a wait
 *             on this test's "the layer's block table is filled" word, a kernel counting
 *             poison words in every byte the attention will read, the same attention kernels
 *             over the landed blocks, then poison over the layer's slots, then its DONE word
 *             (which is what frees the slots for later layers).
 *
 * Poison (0xffff, a bf16 NaN; the KV values are finite) is in every staging slot before each
 * transfer lands there: a priming pass (requests of 256 MiB whose stream only poisons, until
 * every slot of the staging has been handed out once) poisons the first use, and each layer
 * poisons its own slots before its DONE for the next use. A kernel that ran before its blocks
 * landed (a READY written too early) therefore reads NaN: the poison counter is not 0 and the
 * output differs from the resident run. Both runs are the same kernel on the same bytes with
 * the same split, a deterministic reduction: the outputs must be equal bit for bit (2 MiB of
 * bf16). A float64 CPU reference on a few (layer, sequence, head) rows shows the kernel
 * computes attention at all (bf16 output: within 1e-2 relative). /kvlane/tier's bytes: the
 * 1 GiB once, plus what the scheduler evicted and read again (/kvlane/sched evicted_bytes).
 *
 * test_attn_gpu hog KVL_VRAM_HOG: the same run with 80 ms of compute a layer, while another
 * process takes all free VRAM but 64 MiB above the reserve, then 256 MiB more (free VRAM under
 * the reserve, by that process), then gives it back; /kvlane/gpu and /kvlane/sched sampled
 * through the socket every 5 ms: free VRAM never below the reserve but while the other process
 * holds it there (and then never below what it left), the scheduler's budget down to what is
 * left over the reserve and back, staged bytes within it, the release before the request's
 * end, and the outputs still equal. (A block the shrinking budget evicts leaves landed bytes,
 * not poison, in its slot: the poison argument is the plain run's.) Exits 77 without a GPU.
 */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <sys/wait.h>

#include <algorithm>
#include <vector>

#include "gpu_attn.cuh"
#include "gpu_rt.h"
#include "gpusig.h"

#define BLOCK	   ATT_BLOCK /* 64 KiB */
#define SEQS	   4u
#define NBLK	   64u /* blocks per sequence and layer: 1024 tokens */
#define PER_STEP   (SEQS * NBLK)
#define N_STEPS	   64u			/* layers */
#define N_BLOCKS   (PER_STEP * N_STEPS) /* 16384: 1 GiB */
#define PRIME_STEP 16u			/* a priming request: 16 steps of PER_STEP blocks */
#define SPLITS	   4
#define OUT_ELEMS  ((size_t)SEQS * ATT_QH * ATT_HD) /* one layer's output */

#define LIMIT_S 120.0

/* One thread block per KV block of the layer: its 16-bit words equal to the poison. */
__global__ void count_poison(const uint64_t *tab, unsigned long long *hits)
{
	const uint4 *p = (const uint4 *)(uintptr_t)tab[blockIdx.x];
	unsigned long long k = 0;

	for (uint32_t i = threadIdx.x; i < BLOCK / 16; i += blockDim.x) {
		uint4 v = p[i];
		uint32_t w[4] = { v.x, v.y, v.z, v.w };

		for (int j = 0; j < 4; j++)
			k += ((w[j] & 0xffffu) == 0xffffu) + ((w[j] >> 16) == 0xffffu);
	}
	if (k)
		atomicAdd(hits, k);
}

/* The layer's slots, all of them, to poison: what lands there next must overwrite it. */
__global__ void poison_blocks(const uint64_t *tab)
{
	uint4 *p = (uint4 *)(uintptr_t)tab[blockIdx.x];
	const uint4 v = { 0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu };

	for (uint32_t i = threadIdx.x; i < BLOCK / 16; i += blockDim.x)
		p[i] = v;
}

/* An engine's compute time per layer (hog mode): the request then outlasts the hog's cycle. */
__global__ void spin_ns(uint64_t ns)
{
	uint64_t t0, t;

	asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
	do {
		__nanosleep(1000);
		asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
	} while (t - t0 < ns);
}

static uint64_t pace_ns; /* 0: no compute time added */

struct gpu_bufs {
	__nv_bfloat16 *q;   /* [N_STEPS][SEQS][32][128] */
	__nv_bfloat16 *out; /* [N_STEPS][SEQS][32][128], one run */
	float *po, *pml;    /* split partials, one layer at a time (one stream) */
	unsigned long long *hits;
};

static struct att_args layer_args(const struct gpu_bufs *x, const uint64_t *tab, uint32_t k)
{
	struct att_args a;

	a.q = x->q + (size_t)k * OUT_ELEMS;
	a.table = tab; /* [SEQS][NBLK] */
	a.nblk = NBLK;
	a.splits = SPLITS;
	a.part_o = x->po;
	a.part_ml = x->pml;
	a.out = x->out + (size_t)k * OUT_ELEMS;
	a.scale_log2 = (float)(1.0 / sqrt((double)ATT_HD) * 1.4426950408889634);
	return a;
}

static void attention(const struct gpu_bufs *x, const uint64_t *tab, uint32_t k, cudaStream_t st)
{
	dim3 grid(SPLITS, ATT_KVH, SEQS);
	struct att_args a = layer_args(x, tab, k);

	att_split_kernel<<<grid, ATT_WARPS * 32, ATT_SMEM, st>>>(a);
	att_reduce_kernel<<<SEQS * ATT_QH, ATT_HD, 0, st>>>(a);
	CK(cudaGetLastError());
}

/* test_attn_gpu lanes ...: the step flags through kvl_gpusig_lanes (the READY and table
 * waits on a side stream, DONE on another), not on the stream itself */
static struct kvl_gpusig_lanes *lanes;

/* The engine's state for one request on the tier: mapped block tables and their words. */
struct engine {
	uint64_t *tab, *tab_dev;   /* [n_steps][PER_STEP] device addresses */
	volatile uint32_t *filled; /* per step, 64 B apart: its table row is written */
	uint32_t *filled_dev;
	std::vector<uint64_t> seen; /* every slot address handed out, in order */
};

/*
 * One request of @n_steps x PER_STEP blocks from block @first0 of @seg on the tier. With
 * @x (the attention run) step k counts poison and runs the attention of layer k before
 * poisoning its slots; without, the stream only poisons (priming). Returns the time from the
 * open to the request's end, in seconds.
 */
static double run_tier(struct kvl_runtime *rt, const struct kvl_segment *seg, uint32_t first0,
		       uint32_t n_steps, const struct gpu_bufs *x, struct engine *e,
		       cudaStream_t st)
{
	std::vector<struct kvl_req_block> blocks(n_steps * PER_STEP);
	std::vector<uint32_t> first(n_steps + 1), refs(n_steps * PER_STEP);
	struct kvl_req_desc d;
	struct kvl_req_flags fl;
	char err[512];
	kvl_req_t req;
	double t0;
	int end_status;

	for (uint32_t i = 0; i < n_steps * PER_STEP; i++) {
		memset(&blocks[i], 0, sizeof(blocks[i]));
		blocks[i].remote_seg = seg->id;
		blocks[i].remote_off = (uint64_t)(first0 + i) * BLOCK;
		blocks[i].length = BLOCK;
		refs[i] = i;
	}
	for (uint32_t k = 0; k <= n_steps; k++)
		first[k] = k * PER_STEP;
	memset(&d, 0, sizeof(d));
	d.blocks = blocks.data();
	d.n_blocks = n_steps * PER_STEP;
	d.n_steps = n_steps;
	d.step_first = first.data();
	d.step_blocks = refs.data();
	d.flags = KVL_REQ_STEP_FLAGS;
	memset((void *)e->filled, 0, N_STEPS * 64);

	EXPECT(kvl_req_open(rt, KVL_PEER_LOCAL_TIER, &d, &req) == 0, "kvl_req_open on the tier");
	t0 = gpu_rt_now_s();
	EXPECT(kvl_req_step_flags(rt, req, &fl) == 0 && fl.ready_dev && fl.done_dev,
	       "step flags mapped for the GPU (ready_dev %#llx)", (unsigned long long)fl.ready_dev);
	/* the whole stream up front: nothing is enqueued per step from here on */
	for (uint32_t k = 0; k < n_steps; k++) {
		const uint64_t *row = e->tab_dev + (size_t)k * PER_STEP;

		uint64_t wa[2] = { fl.ready_dev + (uint64_t)k * fl.stride,
				   (uint64_t)(uintptr_t)e->filled_dev + k * 64 };
		uint32_t we[2] = { fl.epoch, 1 };
		uint64_t da = fl.done_dev + (uint64_t)k * fl.stride;

		if (lanes != NULL) {
			EXPECT(kvl_gpusig_lanes_wait(lanes, wa, we, 2, err, sizeof(err)) == 0,
			       "lanes: wait READY and table %u: %s", k, err);
		} else {
			EXPECT(kvl_gpusig_wait_addr(wa[0], we[0], st, err, sizeof(err)) == 0,
			       "wait READY %u: %s", k, err);
			EXPECT(kvl_gpusig_wait_addr(wa[1], we[1], st, err, sizeof(err)) == 0,
			       "wait table %u: %s", k, err);
		}
		if (x != NULL) {
			count_poison<<<PER_STEP, 256, 0, st>>>(row, x->hits);
			CK(cudaGetLastError());
			attention(x, row, k, st);
			if (pace_ns)
				spin_ns<<<1, 1, 0, st>>>(pace_ns);
		}
		poison_blocks<<<PER_STEP, 256, 0, st>>>(row);
		CK(cudaGetLastError());
		if (lanes != NULL)
			EXPECT(kvl_gpusig_lanes_done(lanes, &da, &fl.epoch, 1, err, sizeof(err)) ==
				       0,
			       "lanes: DONE %u: %s", k, err);
		else
			EXPECT(kvl_gpusig_done_addr(da, fl.epoch, st, err, sizeof(err)) == 0,
			       "write DONE %u: %s", k, err);
	}
	/* The host's part: each step's block addresses once its READY word says they landed. */
	gpu_rt_fill_tables(rt, req, &fl, n_steps, first.data(), refs.data(), e->tab, e->filled, t0,
			   LIMIT_S);
	e->seen.insert(e->seen.end(), e->tab, e->tab + (size_t)n_steps * PER_STEP);
	end_status = gpu_rt_wait_end(rt, t0, LIMIT_S);
	t0 = gpu_rt_now_s() - t0;
	CK(cudaStreamSynchronize(st));
	EXPECT(end_status == 0, "the request ended with %s", kvl_status_name(end_status));
	return t0;
}

static size_t distinct(std::vector<uint64_t> v)
{
	std::sort(v.begin(), v.end());
	return (size_t)(std::unique(v.begin(), v.end()) - v.begin());
}

/*
 * Hog mode: while the main request runs, another process (kvl_vram_hog leave) takes all free
 * VRAM but the reserve + HOG_ABOVE_MB (NEAR), then HOG_UNDER_MB more, below the reserve
 * (UNDER), then gives that back (NEAR again), then everything (RELEASED). The runtime's VRAM
 * staging is allocated once, at kvl_start, and its budget is free VRAM plus that staging minus
 * the reserve (runtime/staging.c): it falls below the staging, and the windows shrink, only
 * while free VRAM is below the reserve, which only the other process can make it. A sampler
 * reads /kvlane/gpu and /kvlane/sched through the telemetry socket every 5 ms (the runtime samples
 * VRAM as often) all along.
 */
#define HOG_ABOVE_MB 64u
#define HOG_UNDER_MB 256u
#define PACE_NS	     80000000ull /* 80 ms a layer: 64 layers (5.1 s) outlast the hog's cycle */

/* Staged bytes the budget no longer covers are steps already READY (announced: never evicted,
 * [sched] ready_ahead = 0): they go as the engine consumes them, 16 MiB a layer. Up to 256 MiB
 * staged when the budget falls to ~64 MiB: 12 layers (0.96 s) to drain, so after LATE_S of
 * the UNDER_S under the reserve what is staged must be within the budget (and a step). */
#define UNDER_S 1.6
#define LATE_S	1.2

enum { PH_BEFORE, PH_NEAR, PH_UNDER, PH_RELEASED, PH_STOP };

struct hog_run {
	const char *hog;
	int phase;
	double t_under, t_released; /* gpu_rt_now_s() */
	uint64_t reserve, hog_free_under;
	uint64_t n[4], free_min[4], budget_min[4], budget_max[4];
	uint64_t in_use_late_max, n_late; /* UNDER, LATE_S after it began */
	char line[256];
};

static void *hog_sampler(void *arg)
{
	struct hog_run *h = (struct hog_run *)arg;
	static char g[16384], s[16384];
	struct timespec five_ms = { 0, 5000000 };
	int ph;

	while ((ph = __atomic_load_n(&h->phase, __ATOMIC_ACQUIRE)) != PH_STOP) {
		uint64_t fr, bu, iu;

		gpu_rt_tel("/kvlane/gpu", g, sizeof(g));
		gpu_rt_tel("/kvlane/sched", s, sizeof(s));
		fr = gpu_rt_tel_dict_u64(g, "free_bytes");
		bu = gpu_rt_tel_u64(s, "budget");
		iu = gpu_rt_tel_u64(s, "in_use");
		h->n[ph]++;
		h->free_min[ph] = std::min(h->free_min[ph], fr);
		h->budget_max[ph] = std::max(h->budget_max[ph], bu);
		h->budget_min[ph] = std::min(h->budget_min[ph], bu);
		if (ph == PH_UNDER && gpu_rt_now_s() - h->t_under > LATE_S) {
			h->in_use_late_max = std::max(h->in_use_late_max, iu);
			h->n_late++;
		}
		nanosleep(&five_ms, NULL);
	}
	return NULL;
}

/* One line from the hog ("held=... free_after=..."): its free_after. */
static uint64_t hog_reply(struct hog_run *h, FILE *f, const char *what)
{
	const char *p;

	EXPECT(fgets(h->line, sizeof(h->line), f) != NULL && strncmp(h->line, "held=", 5) == 0,
	       "%s: vram_hog did not answer (%s)", what, h->line);
	p = strstr(h->line, "free_after=");
	EXPECT(p != NULL, "vram_hog said %s", h->line);
	printf("vram_hog, %s: %.*s\n", what, (int)strcspn(h->line, "\n"), h->line);
	return strtoull(p + 11, NULL, 10);
}

static void *hog_cycle(void *arg)
{
	struct hog_run *h = (struct hog_run *)arg;
	struct timespec t100 = { 0, 100000000 }, t300 = { 0, 300000000 },
			under = { (time_t)UNDER_S, (long)((UNDER_S - (int)UNDER_S) * 1e9) };
	int in[2], out[2], st;
	char leave[32], more[32];
	FILE *f;
	pid_t pid;

	nanosleep(&t100, NULL);
	EXPECT(pipe(in) == 0 && pipe(out) == 0, "pipe");
	snprintf(leave, sizeof(leave), "%llu",
		 (unsigned long long)(h->reserve >> 20) + HOG_ABOVE_MB);
	pid = fork();
	EXPECT(pid >= 0, "fork");
	if (pid == 0) {
		dup2(in[0], 0);
		dup2(out[1], 1);
		close(in[1]);
		close(out[0]);
		execl(h->hog, h->hog, "leave", "0", leave, (char *)NULL);
		_exit(127);
	}
	close(in[0]);
	close(out[1]);
	f = fdopen(out[0], "r");
	EXPECT(f != NULL, "fdopen");
	hog_reply(h, f, "all but the reserve + 64 MiB");
	__atomic_store_n(&h->phase, PH_NEAR, __ATOMIC_RELEASE);
	nanosleep(&t300, NULL);
	/* UNDER from before the hog takes more until it has given it back: the samples taken
	 * while free VRAM is under the reserve all count there */
	h->t_under = gpu_rt_now_s() + 1e9; /* no "late" sample before the hog has answered */
	__atomic_store_n(&h->phase, PH_UNDER, __ATOMIC_RELEASE);
	snprintf(more, sizeof(more), "more %u\n", HOG_UNDER_MB);
	EXPECT(write(in[1], more, strlen(more)) == (ssize_t)strlen(more), "to vram_hog");
	h->hog_free_under = hog_reply(h, f, "256 MiB more");
	h->t_under = gpu_rt_now_s();
	nanosleep(&under, NULL);
	EXPECT(write(in[1], "less\n", 5) == 5, "to vram_hog");
	hog_reply(h, f, "the 256 MiB back");
	/* /kvlane/gpu's free_bytes is the runtime's last sample (kvl-vram, every
	 * resize_interval_ms): until it has sampled again, what it shows is still UNDER's. NEAR
	 * begins once two samples have been taken after the hog's answer (the first may have
	 * begun before it). Seen on the H200 without this: "near: free VRAM 1855 MiB". */
	{
		static char g[16384];
		struct timespec one_ms = { 0, 1000000 };
		uint64_t s0, s1;
		double t0 = gpu_rt_now_s();

		gpu_rt_tel("/kvlane/gpu", g, sizeof(g));
		s0 = gpu_rt_tel_dict_u64(g, "samples");
		do {
			nanosleep(&one_ms, NULL);
			gpu_rt_tel("/kvlane/gpu", g, sizeof(g));
			s1 = gpu_rt_tel_dict_u64(g, "samples");
			EXPECT(gpu_rt_now_s() - t0 < 2.0,
			       "the runtime sampled free VRAM %llu times in 2 s after the hog's "
			       "answer",
			       (unsigned long long)(s1 - s0));
		} while (s1 < s0 + 2);
	}
	__atomic_store_n(&h->phase, PH_NEAR, __ATOMIC_RELEASE);
	close(in[1]); /* the hog frees the rest and exits */
	EXPECT(waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0,
	       "vram_hog exit status %d", st);
	fclose(f);
	h->t_released = gpu_rt_now_s();
	__atomic_store_n(&h->phase, PH_RELEASED, __ATOMIC_RELEASE);
	return NULL;
}

/*
 * test_attn_gpu varlen: the variable-length form (att_split_varlen_kernel +
 * att_reduce_varlen_kernel: one launch for a batch of sequences of unequal lengths, each naming
 * its own queries, block table and outputs). Sequences of 0, 1, 5, 31, 32, 33, 200 and 700
 * blocks (fewer, as many and more blocks than splits), their blocks scattered through a VRAM
 * pool in a shuffled order, their rows of the query and output arrays picked out of order.
 * Each sequence's outputs must equal, bit for bit, the fixed-length form run on it alone with
 * min(nblk, splits) splits (the kernel serve-bench ran per request before), for a split cap of
 * 32 and of 8; every head of every sequence must be within 1e-2 of the float64 reference;
 * the empty sequence's outputs are 0. No runtime: the kernels alone. Exits 77 without a GPU.
 */
static int varlen_main(void)
{
	static const int lens[] = { 33, 0, 700, 1, 32, 200, 5, 31 };
	const int B = (int)(sizeof(lens) / sizeof(lens[0]));
	const int caps[2] = { 32, 8 };
	int total = 0, most = 0;
	uint8_t *pool;
	__nv_bfloat16 *dq, *dout, *dsolo;
	float *po, *pml;
	uint64_t *dtab;
	struct att_seq *dseq;
	cudaStream_t st;

	if (gpu_test_devices() == 0)
		return GPU_TEST_SKIP;
	CK(cudaSetDevice(0));
	for (int i = 0; i < B; i++) {
		total += lens[i];
		most = std::max(most, lens[i]);
	}
	CK(cudaFuncSetAttribute(att_split_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
				ATT_SMEM));
	CK(cudaFuncSetAttribute(att_split_varlen_kernel,
				cudaFuncAttributeMaxDynamicSharedMemorySize, ATT_SMEM));
	CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
	CK(cudaMalloc((void **)&pool, (size_t)total * ATT_BLOCK));
	att_fill_kernel<<<1024, 256, 0, st>>>((__nv_bfloat16 *)pool, (size_t)total * ATT_BLOCK / 2,
					      0x7661726cull);
	/* rows 0..B-1 of q and out; sequence i uses row B-1-i */
	CK(cudaMalloc((void **)&dq, (size_t)B * ATT_QH * ATT_HD * 2));
	att_fill_kernel<<<64, 256, 0, st>>>(dq, (size_t)B * ATT_QH * ATT_HD, 0x5172ull);
	CK(cudaMalloc((void **)&dout, (size_t)B * ATT_QH * ATT_HD * 2));
	CK(cudaMalloc((void **)&dsolo, (size_t)ATT_QH * ATT_HD * 2));
	CK(cudaMalloc((void **)&po, (size_t)B * ATT_QH * 32 * ATT_HD * 4));
	CK(cudaMalloc((void **)&pml, (size_t)B * ATT_QH * 32 * 2 * 4));
	CK(cudaMalloc((void **)&dseq, B * sizeof(struct att_seq)));
	CK(cudaGetLastError());

	/* a shuffled placement: block j of sequence i is pool block perm[at_i + j] */
	std::vector<int> perm(total);
	std::vector<int> at(B);
	std::vector<uint64_t> htab((size_t)std::max(total, 1));
	uint64_t x = 0x243f6a8885a308d3ull;

	for (int i = 0; i < total; i++)
		perm[i] = i;
	for (int i = total - 1; i > 0; i--) {
		x = x * 6364136223846793005ull + 1442695040888963407ull;
		std::swap(perm[i], perm[(int)((x >> 33) % (uint64_t)(i + 1))]);
	}
	for (int i = 0, a = 0; i < B; a += lens[i], i++)
		at[i] = a;
	for (int i = 0; i < total; i++)
		htab[i] = (uint64_t)(uintptr_t)(pool + (size_t)perm[i] * ATT_BLOCK);
	CK(cudaMalloc((void **)&dtab, htab.size() * 8));
	CK(cudaMemcpy(dtab, htab.data(), htab.size() * 8, cudaMemcpyHostToDevice));

	std::vector<uint8_t> hpool((size_t)total * ATT_BLOCK);
	std::vector<__nv_bfloat16> hq((size_t)B * ATT_QH * ATT_HD), hout(hq.size()),
		hsolo((size_t)ATT_QH * ATT_HD);

	CK(cudaStreamSynchronize(st));
	CK(cudaMemcpy(hpool.data(), pool, hpool.size(), cudaMemcpyDeviceToHost));
	CK(cudaMemcpy(hq.data(), dq, hq.size() * 2, cudaMemcpyDeviceToHost));
	for (int ci = 0; ci < 2; ci++) {
		const int cap = caps[ci];
		std::vector<struct att_seq> hs(B);
		struct att_vargs v;
		size_t differ = 0, zero_bad = 0;
		double worst = 0;

		for (int i = 0; i < B; i++) {
			int row = B - 1 - i;

			hs[i].q = dq + (size_t)row * ATT_QH * ATT_HD;
			hs[i].table = dtab + at[i];
			hs[i].out = dout + (size_t)row * ATT_QH * ATT_HD;
			hs[i].nblk = lens[i];
			hs[i].pad = 0;
		}
		CK(cudaMemcpy(dseq, hs.data(), B * sizeof(struct att_seq), cudaMemcpyHostToDevice));
		CK(cudaMemset(dout, 0xff, hq.size() * 2)); /* every output is written */
		v.seq = dseq;
		v.splits = cap;
		v.part_o = po;
		v.part_ml = pml;
		v.scale_log2 = (float)(1.0 / sqrt((double)ATT_HD) * 1.4426950408889634);
		att_split_varlen_kernel<<<dim3(std::min(most, cap), ATT_KVH, B), ATT_WARPS * 32,
					  ATT_SMEM, st>>>(v);
		att_reduce_varlen_kernel<<<B * ATT_QH, ATT_HD, 0, st>>>(v);
		CK(cudaGetLastError());
		CK(cudaStreamSynchronize(st));
		CK(cudaMemcpy(hout.data(), dout, hout.size() * 2, cudaMemcpyDeviceToHost));

		for (int i = 0; i < B; i++) {
			const int row = B - 1 - i;
			const __nv_bfloat16 *got = &hout[(size_t)row * ATT_QH * ATT_HD];

			if (lens[i] == 0) {
				for (int e = 0; e < ATT_QH * ATT_HD; e++)
					zero_bad += att_bf2f(got[e]) != 0.f;
				continue;
			}
			/* the fixed-length form on this sequence alone */
			{
				struct att_args a;
				int sp = std::min(lens[i], cap);

				a.q = hs[i].q;
				a.table = hs[i].table;
				a.nblk = lens[i];
				a.splits = sp;
				a.part_o = po;
				a.part_ml = pml;
				a.out = dsolo;
				a.scale_log2 = v.scale_log2;
				att_split_kernel<<<dim3(sp, ATT_KVH, 1), ATT_WARPS * 32, ATT_SMEM,
						   st>>>(a);
				att_reduce_kernel<<<ATT_QH, ATT_HD, 0, st>>>(a);
				CK(cudaGetLastError());
				CK(cudaStreamSynchronize(st));
				CK(cudaMemcpy(hsolo.data(), dsolo, hsolo.size() * 2,
					      cudaMemcpyDeviceToHost));
				differ += memcmp(hsolo.data(), got, hsolo.size() * 2) != 0;
			}
			if (ci > 0)
				continue; /* the reference once: the outputs are checked equal */
			{
				std::vector<const uint8_t *> blk(lens[i]);

				for (int j = 0; j < lens[i]; j++)
					blk[j] = hpool.data() + (size_t)perm[at[i] + j] * ATT_BLOCK;
				for (int h = 0; h < ATT_QH; h++) {
					double o[ATT_HD], num = 0, den = 0;

					att_reference(blk.data(), lens[i],
						      &hq[((size_t)row * ATT_QH + h) * ATT_HD], h,
						      o);
					for (int e = 0; e < ATT_HD; e++) {
						double d = att_bf2f(got[h * ATT_HD + e]) - o[e];

						num += d * d;
						den += o[e] * o[e];
					}
					worst = std::max(worst, sqrt(num / den));
				}
			}
		}
		printf("varlen, split cap %d: %d sequences of 0..%d blocks in one launch; "
		       "differing "
		       "from the fixed-length form alone: %zu; empty sequence's nonzero outputs: "
		       "%zu",
		       cap, B, most, differ, zero_bad);
		if (ci == 0)
			printf("; worst relative error against float64 (every head): %.2e", worst);
		printf("\n");
		EXPECT(differ == 0, "cap %d: %zu sequences' outputs differ from the fixed form's",
		       cap, differ);
		EXPECT(zero_bad == 0, "cap %d: the empty sequence has %zu nonzero outputs", cap,
		       zero_bad);
		EXPECT(ci > 0 || worst < 1e-2, "varlen attention off float64 by %.2e", worst);
	}
	CK(cudaStreamDestroy(st));
	printf("PASS: attn_gpu varlen (one launch for 8 sequences of unequal lengths, each equal "
	       "to the fixed-length kernel alone, within 1e-2 of float64)\n");
	return 0;
}

int main(int argc, char **argv)
{
	static const char ini[] =
		"[runtime]\nname = attn-gpu\nidle_policy = poll\n"
		"[nic.lo]\ndevice = lo\ntransport = tcp\n"
		"[gpu]\nenable = true\ndevice_id = 0\nvram_reserve_mb = 2048\n"
		"[memory]\npool_size_mb = 1088\nchunk_size_kb = 4096\n"
		"[sched]\nstaging_mb = 256\nslot_kb = 64\nstaging = gpu\ntier = true\n"
		"window_max_mb = 256\nmax_blocks = 65536\nresize_interval_ms = 5\n";
	struct kvl_seg_geom g = { N_STEPS, 2, N_BLOCKS / N_STEPS / 2, BLOCK };
	const size_t kv_bytes = (size_t)N_BLOCKS * BLOCK;
	struct kvl_segment seg;
	struct gpu_bufs x;
	struct engine e;
	char err[2048], out[16384];
	std::vector<__nv_bfloat16> h_res(N_STEPS * OUT_ELEMS), h_tier(N_STEPS * OUT_ELEMS),
		h_q(N_STEPS * OUT_ELEMS);
	std::vector<uint64_t> res_tab(N_BLOCKS);
	uint64_t *res_tab_dev, slots, tier_bytes0, evicted0, evicted;
	unsigned long long hits;
	uint8_t *resident;
	struct kvl_runtime *rt;
	cudaStream_t st;
	cudaEvent_t e0, e1;
	float res_ms;
	double t_tier;
	size_t diff = 0, nan_tier = 0, nan_res = 0;
	int stage = 0, rounds = 0;
	const bool use_lanes = argc >= 2 && strcmp(argv[1], "lanes") == 0;
	const int a0 = use_lanes ? 2 : 1; /* the arguments after "lanes" */
	const char *hog = argc == a0 + 2 && strcmp(argv[a0], "hog") == 0 ? argv[a0 + 1] : NULL;
	struct hog_run h;
	pthread_t th_sample, th_cycle;
	double t_run_end;

	if (argc == 2 && strcmp(argv[1], "varlen") == 0)
		return varlen_main();
	if (argc != a0 && hog == NULL) {
		fprintf(stderr, "usage: %s [lanes] [hog KVL_VRAM_HOG] | %s varlen\n", argv[0],
			argv[0]);
		return 2;
	}
	if (gpu_test_devices() == 0)
		return GPU_TEST_SKIP;
	gpu_rt_init("attngpu");
	CK(cudaSetDevice(0));
	/*
	 * No [control] here, in hog mode too: an engine on the C API without peers. The runtime's
	 * own sampler thread (kvl-vram, runtime/staging.c) follows free VRAM into the budget.
	 * Before it, only the control thread sampled, and the first H200 run of this test showed
	 * /kvlane/gpu's free_bytes frozen at its start-up value while the hog took 145 GB.
	 */
	rt = gpu_rt_start(gpu_rt_write_ini("attn.ini", ini), NULL, 0, err, sizeof(err), &stage);
	EXPECT(rt != NULL, "kvl_start: stage %d: %s", stage, err);
	EXPECT(kvl_seg_alloc(rt, "kv", &g, KVL_REMOTE_READ, &seg) == 0, "kvl_seg_alloc 1 GiB");
	EXPECT(seg.length == kv_bytes && seg.mem == KVL_MEM_HOST, "segment %llu bytes, kind %u",
	       (unsigned long long)seg.length, seg.mem);

	/* Every kernel loaded before any stream waits on READY: under CUDA's lazy loading a
	 * first launch may synchronise the context, i.e. wait for that very stream. */
	{
		struct cudaFuncAttributes fa;

		CK(cudaFuncSetAttribute(att_split_kernel,
					cudaFuncAttributeMaxDynamicSharedMemorySize, ATT_SMEM));
		CK(cudaFuncGetAttributes(&fa, att_split_kernel));
		CK(cudaFuncGetAttributes(&fa, att_reduce_kernel));
		CK(cudaFuncGetAttributes(&fa, count_poison));
		CK(cudaFuncGetAttributes(&fa, poison_blocks));
		CK(cudaFuncGetAttributes(&fa, att_fill_kernel));
	}
	/* The KV (finite bf16 in [-1, 1)) into the tier's segment; the resident copy from it. */
	CK(cudaMalloc((void **)&resident, kv_bytes));
	att_fill_kernel<<<1024, 256>>>((__nv_bfloat16 *)resident, kv_bytes / 2, 0x6b766c61ull);
	CK(cudaGetLastError());
	CK(cudaMemcpy(seg.base, resident, kv_bytes, cudaMemcpyDeviceToHost));
	CK(cudaMemset(resident, 0, kv_bytes));
	CK(cudaMemcpy(resident, seg.base, kv_bytes, cudaMemcpyHostToDevice));

	CK(cudaMalloc((void **)&x.q, N_STEPS * OUT_ELEMS * 2));
	CK(cudaMalloc((void **)&x.out, N_STEPS * OUT_ELEMS * 2));
	CK(cudaMalloc((void **)&x.po, (size_t)SEQS * ATT_QH * SPLITS * ATT_HD * 4));
	CK(cudaMalloc((void **)&x.pml, (size_t)SEQS * ATT_QH * SPLITS * 2 * 4));
	CK(cudaMalloc((void **)&x.hits, sizeof(*x.hits)));
	att_fill_kernel<<<256, 256>>>(x.q, N_STEPS * OUT_ELEMS, 0x71ull);
	CK(cudaGetLastError());
	CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
	if (use_lanes) {
		lanes = kvl_gpusig_lanes_new(st, err, sizeof(err));
		EXPECT(lanes != NULL, "kvl_gpusig_lanes_new: %s", err);
	}
	CK(cudaEventCreate(&e0));
	CK(cudaEventCreate(&e1));

	/* resident: block i of layer k, sequence s at resident + i * BLOCK */
	for (uint32_t i = 0; i < N_BLOCKS; i++)
		res_tab[i] = (uint64_t)(uintptr_t)(resident + (size_t)i * BLOCK);
	CK(cudaMalloc((void **)&res_tab_dev, N_BLOCKS * 8));
	CK(cudaMemcpy(res_tab_dev, res_tab.data(), N_BLOCKS * 8, cudaMemcpyHostToDevice));
	CK(cudaMemset(x.out, 0xff, N_STEPS * OUT_ELEMS * 2)); /* every output is written */
	CK(cudaDeviceSynchronize());
	CK(cudaEventRecord(e0, st));
	for (uint32_t k = 0; k < N_STEPS; k++)
		attention(&x, res_tab_dev + (size_t)k * PER_STEP, k, st);
	CK(cudaEventRecord(e1, st));
	CK(cudaStreamSynchronize(st));
	CK(cudaEventElapsedTime(&res_ms, e0, e1));
	CK(cudaMemcpy(h_res.data(), x.out, h_res.size() * 2, cudaMemcpyDeviceToHost));

	/* the engine's mapped tables and words */
	CK(cudaHostAlloc((void **)&e.tab, N_BLOCKS * 8, cudaHostAllocMapped));
	CK(cudaHostGetDevicePointer((void **)&e.tab_dev, e.tab, 0));
	CK(cudaHostAlloc((void **)&e.filled, N_STEPS * 64, cudaHostAllocMapped));
	CK(cudaHostGetDevicePointer((void **)&e.filled_dev, (void *)e.filled, 0));

	/* Priming: hand every staging slot out once, poisoned behind its step. */
	gpu_rt_tel("/kvlane/sched", out, sizeof(out));
	slots = gpu_rt_tel_u64(out, "staging_bytes") / BLOCK;
	while (distinct(e.seen) < slots) {
		EXPECT(rounds < 8,
		       "after %d priming requests only %zu of %llu staging slots were "
		       "handed out",
		       rounds, distinct(e.seen), (unsigned long long)slots);
		run_tier(rt, &seg, 0, PRIME_STEP, NULL, &e, st);
		rounds++;
	}
	printf("priming: %d requests of %u MiB put poison in all %zu staging slots\n", rounds,
	       PRIME_STEP * PER_STEP * (BLOCK >> 10) >> 10, distinct(e.seen));

	gpu_rt_tel("/kvlane/tier", out, sizeof(out));
	tier_bytes0 = gpu_rt_tel_u64(out, "bytes");
	gpu_rt_tel("/kvlane/sched", out, sizeof(out));
	evicted0 = gpu_rt_tel_u64(out, "evicted_bytes");
	CK(cudaMemset(x.out, 0xff, N_STEPS * OUT_ELEMS * 2));
	CK(cudaMemset(x.hits, 0, sizeof(*x.hits)));
	CK(cudaDeviceSynchronize());
	e.seen.clear();
	if (hog != NULL) {
		memset(&h, 0, sizeof(h));
		h.hog = hog;
		for (int i = 0; i < 4; i++)
			h.free_min[i] = h.budget_min[i] = UINT64_MAX;
		gpu_rt_tel("/kvlane/gpu", out, sizeof(out));
		h.reserve = gpu_rt_tel_dict_u64(out, "reserve_bytes");
		pace_ns = PACE_NS;
		EXPECT(pthread_create(&th_sample, NULL, hog_sampler, &h) == 0, "sampler thread");
		EXPECT(pthread_create(&th_cycle, NULL, hog_cycle, &h) == 0, "hog thread");
	}
	t_tier = run_tier(rt, &seg, 0, N_STEPS, &x, &e, st);
	t_run_end = gpu_rt_now_s();
	if (hog != NULL) {
		struct timespec t50 = { 0, 50000000 };
		const char *nm[4] = { "before", "near", "under", "released" };

		pthread_join(th_cycle, NULL);
		nanosleep(&t50, NULL); /* a few samples after the release */
		__atomic_store_n(&h.phase, PH_STOP, __ATOMIC_RELEASE);
		pthread_join(th_sample, NULL);
		printf("%-9s %8s %14s %12s %12s  (MiB; reserve %llu)\n", "phase", "samples",
		       "free VRAM min", "budget min", "budget max",
		       (unsigned long long)(h.reserve >> 20));
		for (int i = 0; i < 4; i++)
			printf("%-9s %8llu %14llu %12llu %12llu\n", nm[i],
			       (unsigned long long)h.n[i],
			       (unsigned long long)(h.free_min[i] >> 20),
			       (unsigned long long)(h.budget_min[i] >> 20),
			       (unsigned long long)(h.budget_max[i] >> 20));
		printf("staged (in_use) %.1f s into UNDER at most %llu MiB; released %.3f s before "
		       "the request ended\n",
		       LATE_S, (unsigned long long)(h.in_use_late_max >> 20),
		       t_run_end - h.t_released);
		for (int i = 0; i < 4; i++)
			EXPECT(h.n[i] > 0, "no samples in phase %s", nm[i]);
		EXPECT(h.n_late > 0, "no samples %.1f s into UNDER", LATE_S);
		EXPECT(h.t_released < t_run_end, "the request ended before the hog gave VRAM back");
		/* the runtime itself never takes free VRAM below the reserve... */
		for (int i = 0; i < 4; i++)
			EXPECT(i == PH_UNDER || h.free_min[i] >= h.reserve,
			       "%s: free VRAM %llu MiB, below the reserve %llu", nm[i],
			       (unsigned long long)(h.free_min[i] >> 20),
			       (unsigned long long)(h.reserve >> 20));
		/* ...nor below what the other process left when that process put it under */
		EXPECT(h.free_min[PH_UNDER] + (32ull << 20) >= h.hog_free_under,
		       "free VRAM %llu MiB under the hog, which left %llu",
		       (unsigned long long)(h.free_min[PH_UNDER] >> 20),
		       (unsigned long long)(h.hog_free_under >> 20));
		/* the windows shrink to what is left over the reserve, staged bytes follow */
		EXPECT(h.budget_min[PH_UNDER] <= ((uint64_t)HOG_ABOVE_MB + 16) << 20 &&
			       h.budget_min[PH_UNDER] < h.budget_max[PH_BEFORE],
		       "the budget under the hog: %llu MiB (before: %llu)",
		       (unsigned long long)(h.budget_min[PH_UNDER] >> 20),
		       (unsigned long long)(h.budget_max[PH_BEFORE] >> 20));
		EXPECT(h.in_use_late_max <= h.budget_max[PH_UNDER] + (uint64_t)PER_STEP * BLOCK,
		       "staged %llu MiB while the budget was at most %llu MiB",
		       (unsigned long long)(h.in_use_late_max >> 20),
		       (unsigned long long)(h.budget_max[PH_UNDER] >> 20));
		/* and recover */
		EXPECT(h.budget_max[PH_RELEASED] + (64ull << 20) >= h.budget_max[PH_BEFORE],
		       "the budget did not recover: %llu MiB after, %llu before",
		       (unsigned long long)(h.budget_max[PH_RELEASED] >> 20),
		       (unsigned long long)(h.budget_max[PH_BEFORE] >> 20));
	}
	CK(cudaMemcpy(h_tier.data(), x.out, h_tier.size() * 2, cudaMemcpyDeviceToHost));
	CK(cudaMemcpy(&hits, x.hits, sizeof(hits), cudaMemcpyDeviceToHost));
	printf("tier: %u layers x %u blocks (%zu MiB) PULLed into %zu staging slots, attention "
	       "behind READY on each: open to end %.3f s (%.1f GB/s); resident run %.3f ms\n",
	       N_STEPS, PER_STEP, kv_bytes >> 20, distinct(e.seen), t_tier, kv_bytes / t_tier / 1e9,
	       res_ms);
	for (size_t i = 0; i < h_res.size(); i++) {
		uint16_t a, b;

		memcpy(&a, &h_res[i], 2);
		memcpy(&b, &h_tier[i], 2);
		diff += a != b;
		nan_res += att_bf2f(h_res[i]) != att_bf2f(h_res[i]);
		nan_tier += att_bf2f(h_tier[i]) != att_bf2f(h_tier[i]);
	}
	printf("poison words read by the kernels behind READY: %llu; outputs differing from the "
	       "resident run: %zu of %zu (NaN: tier %zu, resident %zu)\n",
	       hits, diff, h_res.size(), nan_tier, nan_res);
	EXPECT(nan_res == 0, "the resident run gave %zu NaN outputs", nan_res);
	EXPECT(hits == 0, "kernels behind READY read %llu poison words: blocks not landed yet",
	       hits);
	EXPECT(diff == 0, "%zu of %zu bf16 outputs differ from the all-resident run", diff,
	       h_res.size());
	/* The detectors detect: the last layer's slots, poisoned behind it and handed out to
	 * nothing since, read again by the same kernels as if READY had come before a landing:
	 * every word counts as poison and the outputs are NaN. */
	{
		const uint64_t *row = e.tab_dev + (size_t)(N_STEPS - 1) * PER_STEP;
		std::vector<__nv_bfloat16> h_early(OUT_ELEMS);
		unsigned long long early_hits;
		size_t nan = 0;

		CK(cudaMemset(x.hits, 0, sizeof(*x.hits)));
		count_poison<<<PER_STEP, 256, 0, st>>>(row, x.hits);
		CK(cudaGetLastError());
		attention(&x, row, N_STEPS - 1, st);
		CK(cudaStreamSynchronize(st));
		CK(cudaMemcpy(&early_hits, x.hits, sizeof(early_hits), cudaMemcpyDeviceToHost));
		CK(cudaMemcpy(h_early.data(), x.out + (size_t)(N_STEPS - 1) * OUT_ELEMS,
			      OUT_ELEMS * 2, cudaMemcpyDeviceToHost));
		for (size_t i = 0; i < OUT_ELEMS; i++)
			nan += att_bf2f(h_early[i]) != att_bf2f(h_early[i]);
		printf("control: the last layer read from its poisoned slots: %llu poison words, "
		       "%zu of %zu outputs NaN\n",
		       early_hits, nan, OUT_ELEMS);
		EXPECT(early_hits == (unsigned long long)PER_STEP * BLOCK / 2 && nan == OUT_ELEMS,
		       "the poison check did not see poisoned slots (%llu words, %zu NaN)",
		       early_hits, nan);
	}

	/* The kernel is attention: a few rows against float64 on the CPU. */
	CK(cudaMemcpy(h_q.data(), x.q, h_q.size() * 2, cudaMemcpyDeviceToHost));
	{
		const uint32_t rows[4][3] = {
			{ 0, 0, 0 }, { 17, 1, 13 }, { 40, 2, 30 }, { 63, 3, 31 }
		};
		double worst = 0;

		for (int r = 0; r < 4; r++) {
			uint32_t L = rows[r][0], s = rows[r][1], h = rows[r][2];
			size_t at = (size_t)L * OUT_ELEMS + ((size_t)s * ATT_QH + h) * ATT_HD;
			double o[ATT_HD], num = 0, den = 0;
			const uint8_t *blk[NBLK];

			for (uint32_t j = 0; j < NBLK; j++)
				blk[j] = (const uint8_t *)seg.base +
					 ((size_t)L * PER_STEP + s * NBLK + j) * BLOCK;
			att_reference(blk, NBLK, &h_q[at], (int)h, o);
			for (int i = 0; i < ATT_HD; i++) {
				double dlt = att_bf2f(h_tier[at + i]) - o[i];

				num += dlt * dlt;
				den += o[i] * o[i];
			}
			worst = std::max(worst, sqrt(num / den));
		}
		printf("against float64 on the CPU (4 rows of 128): worst relative error %.2e\n",
		       worst);
		EXPECT(worst < 1e-2, "attention output off the float64 reference by %.2e", worst);
	}

	/* every byte landed once, and again for each block a shrinking budget evicted */
	gpu_rt_tel("/kvlane/sched", out, sizeof(out));
	evicted = gpu_rt_tel_u64(out, "evicted_bytes") - evicted0;
	gpu_rt_tel("/kvlane/tier", out, sizeof(out));
	printf("/kvlane/tier: %.600s\n", out);
	printf("moved %llu bytes: %zu asked, %llu again after evictions\n",
	       (unsigned long long)(gpu_rt_tel_u64(out, "bytes") - tier_bytes0), kv_bytes,
	       (unsigned long long)evicted);
	EXPECT(gpu_rt_tel_u64(out, "bytes") - tier_bytes0 == kv_bytes + evicted,
	       "/kvlane/tier bytes moved %llu, want %zu + %llu evicted",
	       (unsigned long long)(gpu_rt_tel_u64(out, "bytes") - tier_bytes0), kv_bytes,
	       (unsigned long long)evicted);
	EXPECT(gpu_rt_tel_u64(out, "refused") == 0 && gpu_rt_tel_u64(out, "engine_errors") == 0 &&
		       gpu_rt_tel_u64(out, "inflight") == 0,
	       "refusals, engine errors or READs left: %s", out);
	if (lanes != NULL) {
		struct kvl_gpusig_lanes_stats ls;

		kvl_gpusig_lanes_stats(lanes, &ls);
		printf("lanes: %llu READY and table waits, %llu DONE writes, %llu joins\n",
		       (unsigned long long)ls.waits, (unsigned long long)ls.dones,
		       (unsigned long long)ls.joins);
		/* every step of every request (priming ones included) went through the lanes */
		EXPECT(ls.waits == 2 * ls.dones && ls.joins == 2 * ls.dones && ls.dones >= N_STEPS,
		       "lanes: %llu waits, %llu DONEs, %llu joins", (unsigned long long)ls.waits,
		       (unsigned long long)ls.dones, (unsigned long long)ls.joins);
		kvl_gpusig_lanes_free(lanes);
		printf("PASS: attn_gpu lanes (READY, table words and DONE on side streams, joined "
		       "to the stream by events)\n");
	}
	CK(cudaStreamDestroy(st));
	kvl_stop(rt);
	if (hog != NULL)
		printf("PASS: attn_gpu hog (the same, while another process took all free VRAM "
		       "but %u MiB above the reserve, then %u MiB more, and gave it back "
		       "mid-run)\n",
		       HOG_ABOVE_MB, HOG_UNDER_MB);
	printf("PASS: attn_gpu (1 GiB from the host tier, paged decode attention behind READY on "
	       "every layer, outputs equal to the all-resident run bit for bit, no poison read)\n");
	return 0;
}
