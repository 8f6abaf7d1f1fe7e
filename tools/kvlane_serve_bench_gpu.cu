/* SPDX-License-Identifier: BSD-3-Clause */
/* kvlane-serve-bench's CUDA backend: weight reads and the paged decode-attention kernel in HBM. */
#include <cuda_runtime.h>
#include <math.h>
#include <mma.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_attn.cuh"
#include "kvlane_serve_bench.h"
#include "kvlane_serve_prefill.h"

#define CKR(x)                                                               \
	do {                                                                 \
		cudaError_t e_ = (x);                                        \
		if (e_ != cudaSuccess) {                                     \
			fprintf(stderr, "serve-bench: %s: %s (%s:%d)\n", #x, \
				cudaGetErrorString(e_), __FILE__, __LINE__); \
			exit(1);                                             \
		}                                                            \
	} while (0)

#define SPLITS_MAX 32

static struct sb_shape sh;
static unsigned n_slots, groups, passes, units; /* units = groups x passes */
static uint32_t max_blk;
static uint8_t *cache, *wbuf;
/* The kernel takes 4 query heads per KV head: a preset with more (70B: 8) runs it once per 4
 * (a pass), each with its own queries over the same KV. */
static __nv_bfloat16 *q;   /* [layer][group][pass][32][128] */
static __nv_bfloat16 *out; /* [slot][layer][group][pass][32][128] */
static uint64_t *tab;	   /* [slot][layer][group][max_blk]: device addresses */
static float *po, *pml;	   /* [slot x unit][32][SPLITS_MAX][..]: a batched launch's partials */
static unsigned long long *dbad, *dsink;
static uint64_t *vs_sum;	 /* verify_sums' checksums of a layer's landed blocks (max_blk) */
static unsigned long long *hbad; /* pinned: dbad's value as of the last step_end */
/*
 * The arena: small argument arrays (block tables, verify's and gather's address lists) go
 * through pinned host memory, copied on by the stream that uses them, with no wait: a slice
 * is not written again before the stream has been waited for (step_end, or a full arena).
 * Without it, every landed layer cost two blocking synchronisations (table, verify).
 */
#define ARENA_BYTES (32u << 20)
static uint8_t *harena, *darena;
static size_t arena_at;
/* A step's attention: per layer, the batch's sequences (one per request and unit), one
 * upload per step, one split and one reduce launch per layer. */
static struct att_seq *hseq, *dseq; /* [layer][slot x unit] */
static unsigned *seq_n;		    /* [layer] */
static bool *lay_w;		    /* [layer]: its weight read queued */
static cudaStream_t st;
static cudaEvent_t e0, e1, ev_wait;

/* Waits for everything queued on st so far, asleep (see gpu_init). */
static void st_wait(void)
{
	CKR(cudaEventRecord(ev_wait, st));
	CKR(cudaEventSynchronize(ev_wait));
}
/* tcp's copies into the cache: their own stream (the receiver's thread), an event per receive
 * buffer so the socket reads into one while the copy engine empties another */
#define UP_BUFS 16
static cudaStream_t up_st;
static cudaEvent_t up_ev[UP_BUFS];
static double probe_s;
static int sm_count;

int kvl_sb_gpu_present(char *why, unsigned len)
{
	int n = 0;
	cudaError_t e = cudaGetDeviceCount(&n);

	if (e != cudaSuccess || n == 0) {
		snprintf(why, len, "no CUDA GPU (%s)",
			 e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
		return 0;
	}
	return 1;
}

__global__ void sb_fill_kernel(uint64_t *w, uint64_t n, uint64_t h, uint64_t first)
{
	for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < n;
	     i += (uint64_t)gridDim.x * blockDim.x)
		w[i] = sb_pat_word(h, first + i);
}

/* Bytes of @n blocks unlike the pattern (8 per word that differs). */
__global__ void sb_verify_kernel(const uint64_t *blk, const uint64_t *off, unsigned n,
				 uint32_t words, uint64_t h, unsigned long long *bad)
{
	unsigned long long b = 0;

	for (unsigned k = blockIdx.x; k < n; k += gridDim.x) {
		const uint64_t *w = (const uint64_t *)blk[k];

		for (uint32_t i = threadIdx.x; i < words; i += blockDim.x)
			b += w[i] != sb_pat_word(h, off[k] / 8 + i) ? 8 : 0;
	}
	if (b)
		atomicAdd(bad, b);
}

/* One CTA per block: the pattern written in place (resident). */
__global__ void sb_fill_blocks_kernel(const uint64_t *blk, const uint64_t *off, uint32_t words,
				      uint64_t h)
{
	uint64_t *w = (uint64_t *)blk[blockIdx.x];

	for (uint32_t i = threadIdx.x; i < words; i += blockDim.x)
		w[i] = sb_pat_word(h, off[blockIdx.x] / 8 + i);
}

/* One CTA per block: staging window -> KV cache, 16 bytes a thread at a time. */
__global__ void sb_gather_kernel(const uint64_t *dst, const uint64_t *src, uint32_t words16)
{
	uint4 *d = (uint4 *)dst[blockIdx.x];
	const uint4 *s = (const uint4 *)src[blockIdx.x];

	for (uint32_t i = threadIdx.x; i < words16; i += blockDim.x)
		d[i] = s[i];
}

/* Reads @n 16-byte words of the weights (the decode step's weight traffic). */
__global__ void sb_weights_kernel(const uint4 *w, uint64_t n, unsigned long long *sink)
{
	uint32_t x = 0;

	for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < n;
	     i += (uint64_t)gridDim.x * blockDim.x) {
		uint4 v = __ldcs(w + i);

		x ^= v.x ^ v.y ^ v.z ^ v.w;
	}
	if (x == 0x9e3779b9u) /* never, in practice: keeps the loads */
		atomicAdd(sink, 1ull);
}

__global__ void sb_q_kernel(__nv_bfloat16 *q, uint64_t n, uint64_t seed)
{
	for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < n;
	     i += (uint64_t)gridDim.x * blockDim.x) {
		uint64_t x = (seed + i) * 0x9E3779B97F4A7C15ull;

		x ^= x >> 29;
		q[i] = __float2bfloat16((float)(x & 0xFFFF) / 65536.0f - 0.5f);
	}
}

static int gpu_init(const struct sb_shape *s, unsigned slots, uint32_t max_blocks,
		    uint64_t cache_bytes, uint64_t seed, char *err, unsigned errlen)
{
	size_t nq;
	cudaDeviceProp pr;

	sh = *s;
	n_slots = slots;
	max_blk = max_blocks;
	groups = sb_groups(s);
	/* fewer than 4 query heads per KV head (MHA: the write-up's 32 x 32): one pass, the other
	 * query rows padding (decode is bound by the KV read, which stays the same) */
	passes = s->q_heads / s->kv_heads / ATT_GROUP;
	if (passes == 0 && s->q_heads >= s->kv_heads && ATT_GROUP % (s->q_heads / s->kv_heads) == 0)
		passes = 1;
	units = groups * passes;
	if (sb_group_heads(s) != ATT_KVH || s->head_dim != ATT_HD || passes == 0 ||
	    (s->q_heads > s->kv_heads * ATT_GROUP &&
	     s->q_heads != s->kv_heads * ATT_GROUP * passes)) {
		snprintf(err, errlen,
			 "GPU backend: preset %s is not the kernel's shape (8-head units of dim "
			 "128, a multiple or divisor of 4 query heads per KV head): use --backend "
			 "cpu",
			 s->name);
		return -22;
	}
	/* a step's end is waited for asleep, not spun on: the CPU column counts what the work
	 * needs, in every mode alike */
	CKR(cudaSetDeviceFlags(cudaDeviceScheduleBlockingSync));
	CKR(cudaSetDevice(0));
	CKR(cudaGetDeviceProperties(&pr, 0));
	sm_count = pr.multiProcessorCount;
	CKR(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
	/* every wait of the loop and the receiver on an event that sleeps: without
	 * cudaEventBlockingSync, cudaEventSynchronize spins whatever the device's schedule flag
	 * (the loop's CPU tracked the GPU's busy share in the first runs: 68-92 %) */
	CKR(cudaEventCreateWithFlags(&e0, cudaEventBlockingSync));
	CKR(cudaEventCreateWithFlags(&e1, cudaEventBlockingSync));
	CKR(cudaEventCreateWithFlags(&ev_wait, cudaEventBlockingSync | cudaEventDisableTiming));
	/* kernels loaded now: a lazy first launch may synchronise the context (kvlane.h) */
	CKR(cudaFuncSetAttribute(att_split_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
				 ATT_SMEM));
	CKR(cudaFuncSetAttribute(att_split_varlen_kernel,
				 cudaFuncAttributeMaxDynamicSharedMemorySize, ATT_SMEM));
	{
		cudaFuncAttributes fa;

		CKR(cudaFuncGetAttributes(&fa, att_reduce_kernel));
		CKR(cudaFuncGetAttributes(&fa, att_reduce_varlen_kernel));
		CKR(cudaFuncGetAttributes(&fa, sb_fill_kernel));
		CKR(cudaFuncGetAttributes(&fa, sb_verify_kernel));
		CKR(cudaFuncGetAttributes(&fa, sb_gather_kernel));
		CKR(cudaFuncGetAttributes(&fa, sb_weights_kernel));
		CKR(cudaFuncGetAttributes(&fa, sb_fill_blocks_kernel));
	}
	CKR(cudaStreamCreateWithFlags(&up_st, cudaStreamNonBlocking));
	for (unsigned i = 0; i < UP_BUFS; i++)
		CKR(cudaEventCreateWithFlags(&up_ev[i],
					     cudaEventDisableTiming | cudaEventBlockingSync));
	{
		size_t fr = 0, tot = 0;
		uint64_t need = s->weight_bytes + cache_bytes;

		CKR(cudaMemGetInfo(&fr, &tot));
		if (need + (512ull << 20) > fr) {
			snprintf(
				err, errlen,
				"GPU backend: %.2f GB of weights + %.2f GB of KV cache "
				"(--kv-budget-mb) do not fit the %.2f GB of VRAM free (of %.2f GB) "
				"with 0.5 GB to spare: lower --kv-budget-mb or --weight-mb",
				s->weight_bytes / 1e9, cache_bytes / 1e9, fr / 1e9, tot / 1e9);
			return -12;
		}
	}
	if (cudaMalloc(&wbuf, s->weight_bytes) != cudaSuccess ||
	    (cache_bytes && cudaMalloc(&cache, cache_bytes) != cudaSuccess)) {
		snprintf(err, errlen,
			 "GPU backend: VRAM for %.1f GB of weights + %.1f GB of KV cache",
			 s->weight_bytes / 1e9, cache_bytes / 1e9);
		return -12;
	}
	CKR(cudaMemset(wbuf, 1, s->weight_bytes));
	nq = (size_t)s->layers * units * ATT_QH * ATT_HD;
	CKR(cudaMalloc(&q, nq * 2));
	CKR(cudaMalloc(&out, (size_t)slots * nq * 2));
	CKR(cudaMemset(out, 0, (size_t)slots * nq * 2));
	CKR(cudaMalloc(&tab, (size_t)slots * s->layers * groups * max_blocks * 8));
	CKR(cudaMalloc(&po, (size_t)slots * units * ATT_QH * SPLITS_MAX * ATT_HD * 4));
	CKR(cudaMalloc(&pml, (size_t)slots * units * ATT_QH * SPLITS_MAX * 2 * 4));
	CKR(cudaMalloc(&dbad, 8));
	/* verify_sums' checksums of a layer's landed blocks (--prefill real) */
	CKR(cudaMalloc(&vs_sum, (size_t)(max_blk ? max_blk : 1) * 8));
	CKR(cudaMemset(dbad, 0, 8));
	CKR(cudaMallocHost(&hbad, 8));
	*hbad = 0;
	CKR(cudaMallocHost(&harena, ARENA_BYTES));
	CKR(cudaMalloc(&darena, ARENA_BYTES));
	arena_at = 0;
	CKR(cudaMallocHost(&hseq, (size_t)s->layers * slots * units * sizeof(struct att_seq)));
	CKR(cudaMalloc(&dseq, (size_t)s->layers * slots * units * sizeof(struct att_seq)));
	seq_n = (unsigned *)calloc(s->layers, sizeof(unsigned));
	lay_w = (bool *)calloc(s->layers, sizeof(bool));
	CKR(cudaMalloc(&dsink, 8));
	sb_q_kernel<<<256, 256, 0, st>>>(q, nq, seed);
	CKR(cudaStreamSynchronize(st));
	/* the weights alone, every layer, 5 times: the best is the floor of a decode step */
	probe_s = 1e30;
	for (int rep = 0; rep < 5; rep++) {
		float ms = 0;
		uint64_t per = s->weight_bytes / s->layers / 16;

		CKR(cudaEventRecord(e0, st));
		for (uint32_t l = 0; l < s->layers; l++)
			sb_weights_kernel<<<sm_count * 4, 512, 0, st>>>(
				(const uint4 *)wbuf + per * l, per, dsink);
		CKR(cudaEventRecord(e1, st));
		CKR(cudaEventSynchronize(e1));
		CKR(cudaEventElapsedTime(&ms, e0, e1));
		if (ms / 1e3 < probe_s)
			probe_s = ms / 1e3;
	}
	return 0;
}

static double gpu_probe_weights(void)
{
	return probe_s;
}

static uint8_t *gpu_cache(void)
{
	return cache;
}

static void *gpu_host_alloc(uint64_t len)
{
	void *p = NULL;

	if (cudaHostAlloc(&p, len ? len : 1, cudaHostAllocDefault) != cudaSuccess)
		return NULL;
	memset(p, 0, len);
	return p;
}

static void gpu_host_free(void *p)
{
	cudaFreeHost(p);
}

/* @len bytes of @src into the arena, copied on to the device by stream st behind what is queued
 * there: their device address. A full arena waits for st first (its slices are free then). */
static void *arena_put(const void *src, size_t len, bool to_dev)
{
	size_t a = (len + 255) & ~(size_t)255;
	void *d;

	if (a > ARENA_BYTES) {
		fprintf(stderr, "serve-bench: %zu bytes of arguments exceed the arena\n", len);
		exit(1);
	}
	if (arena_at + a > ARENA_BYTES) {
		st_wait();
		arena_at = 0;
	}
	memcpy(harena + arena_at, src, len);
	d = darena + arena_at;
	if (to_dev)
		CKR(cudaMemcpyAsync(d, harena + arena_at, len, cudaMemcpyHostToDevice, st));
	else
		d = harena + arena_at; /* the caller copies it on itself */
	arena_at += a;
	return d;
}

/* Two arrays of @n words into one arena slice: its device address (the second at + n). */
static uint64_t *arena_pair(const void *a, const void *b, unsigned n)
{
	size_t len = (size_t)n * 8, al = ((2 * len) + 255) & ~(size_t)255;
	uint64_t *d;

	if (arena_at + al > ARENA_BYTES) {
		st_wait();
		arena_at = 0;
	}
	memcpy(harena + arena_at, a, len);
	memcpy(harena + arena_at + len, b, len);
	d = (uint64_t *)(darena + arena_at);
	CKR(cudaMemcpyAsync(d, harena + arena_at, 2 * len, cudaMemcpyHostToDevice, st));
	arena_at += al;
	return d;
}

/* The tcp baseline's copy from a pinned receive buffer: the copy engine's DMA, queued. */
static int gpu_upload_async(void *dst, const void *src, uint64_t len, unsigned buf)
{
	if (buf >= UP_BUFS)
		return -22;
	CKR(cudaMemcpyAsync(dst, src, len, cudaMemcpyHostToDevice, up_st));
	CKR(cudaEventRecord(up_ev[buf], up_st));
	return 0;
}

static int gpu_upload_wait(unsigned buf)
{
	if (buf >= UP_BUFS)
		return -22;
	CKR(cudaEventSynchronize(up_ev[buf]));
	return 0;
}

static int gpu_fill_blocks(void *const *blk, const uint64_t *off, unsigned n, uint32_t len,
			   uint64_t h)
{
	if (n > max_blk)
		return -22;
	if (n == 0)
		return 0;
	{
		uint64_t *d = arena_pair(blk, off, n); /* the caller's arrays are reused at once */

		/* queued on st: the verify and the steps behind it see it done */
		sb_fill_blocks_kernel<<<n, 256, 0, st>>>(d, d + n, len / 8, h);
	}
	return 0;
}

static int gpu_gather(void *const *dst, void *const *src, unsigned n, uint32_t len)
{
	if ((size_t)n * 16 > ARENA_BYTES) /* its address lists pass through the arena */
		return -22;
	{
		uint64_t *d = arena_pair(dst, src, n);

		sb_gather_kernel<<<n, 256, 0, st>>>(d, d + n, len / 16);
	}
	st_wait(); /* the step's DONE follows: its staging may be reused */
	return 0;
}

static int gpu_fill(void *dst, uint64_t len, uint64_t h, uint64_t off)
{
	cudaStream_t fs; /* its own stream: the tcp receiver's thread and the loop's are apart */

	cudaEvent_t ev; /* waited for asleep, as the loop's (gpu_init) */

	CKR(cudaStreamCreateWithFlags(&fs, cudaStreamNonBlocking));
	CKR(cudaEventCreateWithFlags(&ev, cudaEventBlockingSync | cudaEventDisableTiming));
	sb_fill_kernel<<<1024, 256, 0, fs>>>((uint64_t *)dst, len / 8, h, off / 8);
	CKR(cudaEventRecord(ev, fs));
	CKR(cudaEventSynchronize(ev));
	CKR(cudaEventDestroy(ev));
	CKR(cudaStreamDestroy(fs));
	return 0;
}

static uint64_t gpu_verify(void *const *blk, const uint64_t *off, unsigned n, uint32_t len,
			   uint64_t h)
{
	unsigned grid = n < 1024 ? n : 1024;
	uint64_t *d;

	if (n > max_blk)
		return (uint64_t)n * len; /* cannot check: counted as bad */
	if (n == 0)
		return 0;
	/* queued before the steps that read these blocks, on their stream; its count stays on
	 * the device (dbad) and is read back at each step's end and by bad_total: no wait here */
	d = arena_pair(blk, off, n);
	sb_verify_kernel<<<grid, 256, 0, st>>>(d, d + n, n, len / 8, h, dbad);
	return 0;
}

static int gpu_table(unsigned slot, uint32_t layer, void *const *blk, uint32_t nblk)
{
	if (slot >= n_slots || nblk > max_blk)
		return -22;
	if (nblk == 0)
		return 0;
	/* each group's row straight from an arena slice into the table, queued on st before
	 * the steps that read it (only the request's blocks, not max_blk of them) */
	for (unsigned g = 0; g < groups; g++) {
		uint64_t *h = (uint64_t *)arena_put(blk, (size_t)nblk * 8, false);

		for (uint32_t b = 0; b < nblk; b++)
			h[b] += (uint64_t)g * ATT_BLOCK;
		CKR(cudaMemcpyAsync(tab + (((size_t)slot * sh.layers + layer) * groups + g) *
						    max_blk,
				    h, (size_t)nblk * 8, cudaMemcpyHostToDevice, st));
	}
	return 0;
}

static void gpu_step_begin(void)
{
	memset(seq_n, 0, sh.layers * sizeof(unsigned));
	memset(lay_w, 0, sh.layers * sizeof(bool));
}

static void gpu_weights(uint32_t layer)
{
	lay_w[layer] = true; /* issued by gpu_step_submit, layer by layer */
}

/* Queued: @slot's sequences of layer @layer (one per unit) join the layer's batched launch. */
static void gpu_attn(unsigned slot, uint32_t layer, uint32_t nblk)
{
	for (unsigned k = 0; k < units; k++) {
		struct att_seq *x = &hseq[(size_t)layer * n_slots * units + seq_n[layer]++];

		x->q = q + ((size_t)layer * units + k) * ATT_QH * ATT_HD;
		x->table =
			tab + (((size_t)slot * sh.layers + layer) * groups + k / passes) * max_blk;
		x->out = out + (((size_t)slot * sh.layers + layer) * units + k) * ATT_QH * ATT_HD;
		x->nblk = (int)nblk;
		x->pad = 0;
	}
}

/* The step on st: one copy of every layer's sequences, then per layer its weight read and
 * one split + one reduce launch over all its sequences (was 2 launches per request, layer
 * and unit). Splits from each sequence's length alone (min(nblk, 32)), in the kernel: the
 * same request computes the same way in every mode and batch. */
static void gpu_step_submit(void)
{
	uint64_t per = sh.weight_bytes / sh.layers / 16;
	size_t row = (size_t)n_slots * units;
	uint32_t hi = 0, lo = sh.layers; /* the layers with sequences: one copy for them all */

	CKR(cudaEventRecord(e0, st));
	for (uint32_t l = 0; l < sh.layers; l++)
		if (seq_n[l]) {
			lo = l < lo ? l : lo;
			hi = l + 1;
		}
	if (hi > lo)
		CKR(cudaMemcpyAsync(dseq + lo * row, hseq + lo * row,
				    (hi - lo) * row * sizeof(struct att_seq),
				    cudaMemcpyHostToDevice, st));
	for (uint32_t l = 0; l < sh.layers; l++) {
		unsigned n = seq_n[l];
		int most = 0;

		if (lay_w[l])
			sb_weights_kernel<<<sm_count * 4, 512, 0, st>>>(
				(const uint4 *)wbuf + per * l, per, dsink);
		if (n == 0)
			continue;
		for (unsigned i = 0; i < n; i++)
			if (hseq[l * row + i].nblk > most)
				most = hseq[l * row + i].nblk;
		most = most > 0 ? most : 1; /* all empty: CTAs that return, zero outputs */
		{
			struct att_vargs a;

			a.seq = dseq + l * row;
			a.splits = SPLITS_MAX;
			a.part_o = po;
			a.part_ml = pml;
			a.scale_log2 = (float)(1.0 / sqrt((double)ATT_HD) * 1.4426950408889634);
			att_split_varlen_kernel<<<dim3(most < SPLITS_MAX ? most : SPLITS_MAX,
						       ATT_KVH, n),
						  ATT_WARPS * 32, ATT_SMEM, st>>>(a);
			att_reduce_varlen_kernel<<<n * ATT_QH, ATT_HD, 0, st>>>(a);
		}
	}
	/* the verifies queued so far: their count, read back with the step */
	CKR(cudaMemcpyAsync(hbad, dbad, 8, cudaMemcpyDeviceToHost, st));
	CKR(cudaEventRecord(e1, st));
}

static double gpu_step_end(void)
{
	float ms = 0;

	CKR(cudaEventSynchronize(e1));
	CKR(cudaGetLastError());
	CKR(cudaEventElapsedTime(&ms, e0, e1));
	arena_at = 0; /* everything queued before e1 has run */
	return ms / 1e3;
}

static uint64_t gpu_bad_total(void)
{
	CKR(cudaMemcpyAsync(hbad, dbad, 8, cudaMemcpyDeviceToHost, st));
	st_wait();
	arena_at = 0;
	return *hbad;
}

static uint64_t gpu_out_hash(unsigned slot)
{
	size_t n = (size_t)sh.layers * units * ATT_QH * ATT_HD;
	uint16_t *h = (uint16_t *)malloc(n * 2);
	uint64_t x = 1469598103934665603ull;

	CKR(cudaMemcpy(h, out + slot * n, n * 2, cudaMemcpyDeviceToHost));
	for (size_t i = 0; i < n; i++)
		x = (x ^ h[i]) * 1099511628211ull;
	free(h);
	return x;
}

static void gpu_fini(void)
{
	cudaStreamSynchronize(st);
	cudaFree(wbuf);
	cudaFree(cache);
	cudaFree(q);
	cudaFree(out);
	cudaFree(tab);
	cudaFree(po);
	cudaFree(pml);
	cudaFree(dbad);
	cudaFree(vs_sum);
	vs_sum = NULL;
	cudaFreeHost(hbad);
	cudaFreeHost(harena);
	cudaFree(darena);
	cudaFreeHost(hseq);
	cudaFree(dseq);
	free(seq_n);
	free(lay_w);
	cudaStreamSynchronize(up_st);
}

/* ---- prefill calibration: a bf16 GEMM on the tensor cores (WMMA), the bench's own ---- */

#define GM_T  128 /* CTA tile: 128 x 128 of C */
#define GM_K  32  /* K per shared-memory stage */
#define GM_LD (GM_K + 8)

/* Inputs exact in bf16 (multiples of 1/8 in [-1, 1)), so fp32 sums of up to 2^13 products
 * are exact and the host's check is an equality. */
static __host__ __device__ float gm_val(uint64_t i, uint64_t salt)
{
	uint64_t x = (i + salt) * 0x9E3779B97F4A7C15ull;

	x ^= x >> 31;
	return (float)((int)(x & 15) - 8) / 8.0f;
}

__global__ void gm_init_kernel(__nv_bfloat16 *p, uint64_t n, uint64_t salt)
{
	for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < n;
	     i += (uint64_t)gridDim.x * blockDim.x)
		p[i] = __float2bfloat16(gm_val(i, salt));
}

/* C[m][n] = sum_k A[m][k] B[n][k]: A row-major M x K, B as N x K (K x N column-major), C
 * fp32 row-major. 8 warps, each 64 x 32 of the tile (4 x 2 fragments of 16 x 16). */
__global__ void __launch_bounds__(256)
	gm_kernel(const __nv_bfloat16 *A, const __nv_bfloat16 *B, float *C, uint32_t N, uint32_t K)
{
	using namespace nvcuda;
	__shared__ __align__(32) __nv_bfloat16 As[GM_T][GM_LD], Bs[GM_T][GM_LD];
	wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[4][2];
	const unsigned warp = threadIdx.x / 32, wm = warp / 4, wn = warp % 4;
	const uint64_t m0 = (uint64_t)blockIdx.y * GM_T, n0 = (uint64_t)blockIdx.x * GM_T;

	for (int i = 0; i < 4; i++)
		for (int j = 0; j < 2; j++)
			wmma::fill_fragment(acc[i][j], 0.0f);
	for (uint32_t k0 = 0; k0 < K; k0 += GM_K) {
		/* 128 rows x 32 bf16 = 512 uint4 per matrix: 2 per thread each */
		for (unsigned t = threadIdx.x; t < GM_T * GM_K / 8; t += blockDim.x) {
			unsigned r = t / (GM_K / 8), c = t % (GM_K / 8) * 8;

			*(uint4 *)&As[r][c] = *(const uint4 *)&A[(m0 + r) * K + k0 + c];
			*(uint4 *)&Bs[r][c] = *(const uint4 *)&B[(n0 + r) * K + k0 + c];
		}
		__syncthreads();
		for (unsigned kk = 0; kk < GM_K; kk += 16) {
			wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major>
				a[4];
			wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::col_major>
				b[2];

			for (int i = 0; i < 4; i++)
				wmma::load_matrix_sync(a[i], &As[wm * 64 + i * 16][kk], GM_LD);
			for (int j = 0; j < 2; j++)
				wmma::load_matrix_sync(b[j], &Bs[wn * 32 + j * 16][kk], GM_LD);
			for (int i = 0; i < 4; i++)
				for (int j = 0; j < 2; j++)
					wmma::mma_sync(acc[i][j], a[i], b[j], acc[i][j]);
		}
		__syncthreads();
	}
	for (int i = 0; i < 4; i++)
		for (int j = 0; j < 2; j++)
			wmma::store_matrix_sync(C + (m0 + wm * 64 + i * 16) * N + n0 + wn * 32 +
							j * 16,
						acc[i][j], N, wmma::mem_row_major);
}

extern "C" int kvl_sb_gpu_gemm_rate(uint32_t m, uint32_t n, uint32_t k, double *flops, char *why,
				    unsigned len)
{
	__nv_bfloat16 *A = NULL, *B = NULL;
	float *C = NULL, ms = 0, best = 1e30f;
	cudaEvent_t a, b;
	cudaStream_t s;
	unsigned bad = 0;

	if (m % GM_T || n % GM_T || k % GM_K || k > 8192) {
		snprintf(why, len,
			 "GEMM %u x %u x %u: sizes must be multiples of %u (m, n) and %u "
			 "(k), k <= 8192",
			 m, n, k, GM_T, GM_K);
		return -1;
	}
	if (cudaMalloc(&A, (size_t)m * k * 2) != cudaSuccess ||
	    cudaMalloc(&B, (size_t)n * k * 2) != cudaSuccess ||
	    cudaMalloc(&C, (size_t)m * n * 4) != cudaSuccess) {
		snprintf(why, len, "GEMM %u x %u x %u: no VRAM for its operands", m, n, k);
		return -1;
	}
	CKR(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
	CKR(cudaEventCreate(&a));
	CKR(cudaEventCreate(&b));
	gm_init_kernel<<<1024, 256, 0, s>>>(A, (uint64_t)m * k, 1);
	gm_init_kernel<<<1024, 256, 0, s>>>(B, (uint64_t)n * k, 2);
	for (int rep = 0; rep < 6; rep++) { /* the first warms up; the best of the rest */
		CKR(cudaEventRecord(a, s));
		gm_kernel<<<dim3(n / GM_T, m / GM_T), 256, 0, s>>>(A, B, C, n, k);
		CKR(cudaEventRecord(b, s));
		CKR(cudaEventSynchronize(b));
		CKR(cudaGetLastError());
		CKR(cudaEventElapsedTime(&ms, a, b));
		if (rep > 0 && ms < best)
			best = ms;
	}
	/* 64 entries checked against the host's exact sum: a wrong kernel is no calibration */
	for (unsigned t = 0; t < 64; t++) {
		uint64_t r = (t * 2654435761u) % m, c = (t * 40503u + 7) % n;
		double want = 0;
		float got = 0;

		for (uint64_t x = 0; x < k; x++)
			want += (double)gm_val(r * k + x, 1) * gm_val(c * k + x, 2);
		CKR(cudaMemcpy(&got, C + r * n + c, 4, cudaMemcpyDeviceToHost));
		bad += (double)got != want;
	}
	cudaFree(A);
	cudaFree(B);
	cudaFree(C);
	if (bad) {
		snprintf(why, len, "GEMM %u x %u x %u: %u of 64 checked entries wrong", m, n, k,
			 bad);
		return -1;
	}
	*flops = 2.0 * m * n * k / (best / 1e3);
	return 0;
}

/* ---- --prefill real: the preset's layers per prompt (kvlane_serve_prefill.cu) ---- */

static struct sb_pf *pf;
static struct sb_pf_dims pf_dims;
static cudaStream_t pf_st; /* the prefill's own: the decode steps go on st beside it */
static cudaEvent_t pf_e0, pf_e1, pf_done;
static uint8_t *pf_kv;		    /* one prompt's KV, request order */
static uint64_t *pf_dptr, *pf_dsum; /* its blocks' addresses and checksums, on the device */
static uint64_t *pf_hsum;	    /* pinned: the checksums' way back */
static uint64_t *pf_hdst, *pf_ddst; /* the copy-out's destination addresses (pinned, device) */
static bool pf_host_ptr;	    /* the device takes registered host memory's own addresses */
static uint32_t pf_blocks, pf_bb;   /* blocks of the longest prompt (all layers), their size */

/* Whether @p is memory a kernel may write at its own address: VRAM, or host memory
 * registered with CUDA where the device takes host pointers as they are. */
static bool pf_kernel_reaches(const void *p)
{
	cudaPointerAttributes a;

	if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
		cudaGetLastError();
		return false;
	}
	return a.type == cudaMemoryTypeDevice ||
	       (a.type == cudaMemoryTypeHost && pf_host_ptr && a.devicePointer == p);
}

/* The blocks whose checksum is not the prefill's: @len bytes each counted as bad. */
__global__ void sb_sums_cmp_kernel(const uint64_t *got, const uint64_t *want, unsigned n,
				   uint32_t len, unsigned long long *bad)
{
	for (unsigned k = blockIdx.x * blockDim.x + threadIdx.x; k < n; k += gridDim.x * blockDim.x)
		if (got[k] != want[k])
			atomicAdd(bad, (unsigned long long)len);
}

extern "C" int kvl_sb_gpu_pf_init(const struct sb_shape *s, uint32_t max_tokens, uint64_t seed,
				  bool decode_first, char *why, unsigned len)
{
	uint64_t *h;

	if (s->ffn == 0) {
		snprintf(why, len,
			 "--prefill real: preset %s has no MLP width (a TP share, or CPU-sized): "
			 "it runs whole models (llama3-8b, writeup-32x32)",
			 s->name);
		return -1;
	}
	pf_dims = (struct sb_pf_dims){ s->layers,   s->q_heads * s->head_dim,
				       s->q_heads,  s->kv_heads,
				       s->head_dim, s->ffn };
	if (sb_pf_new(&pf, &pf_dims, max_tokens, seed, why, len) < 0)
		return -1;
	pf_bb = (uint32_t)sb_pf_block_bytes(&pf_dims);
	pf_blocks = s->layers * ((max_tokens + SB_BLOCK_TOKENS - 1) / SB_BLOCK_TOKENS);
	if (cudaMalloc(&pf_kv, (size_t)pf_blocks * pf_bb) != cudaSuccess ||
	    cudaMalloc(&pf_dptr, (size_t)pf_blocks * 8) != cudaSuccess ||
	    cudaMalloc(&pf_dsum, (size_t)pf_blocks * 8) != cudaSuccess ||
	    cudaMalloc(&pf_ddst, (size_t)pf_blocks * 8) != cudaSuccess ||
	    cudaHostAlloc(&pf_hdst, (size_t)pf_blocks * 8, cudaHostAllocDefault) != cudaSuccess ||
	    cudaHostAlloc(&pf_hsum, (size_t)pf_blocks * 8, cudaHostAllocDefault) != cudaSuccess) {
		snprintf(why, len,
			 "--prefill real: no memory for a %u-token prompt's KV (%.2f GiB)",
			 max_tokens, (double)pf_blocks * pf_bb / (1u << 30));
		return -1;
	}
	h = (uint64_t *)malloc((size_t)pf_blocks * 8);
	for (uint32_t k = 0; k < pf_blocks; k++)
		h[k] = (uint64_t)(uintptr_t)(pf_kv + (uint64_t)k * pf_bb);
	CKR(cudaMemcpy(pf_dptr, h, (size_t)pf_blocks * 8, cudaMemcpyHostToDevice));
	free(h);
	{
		int dev = 0, hp = 0, lo = 0, hi = 0;

		CKR(cudaGetDevice(&dev));
		CKR(cudaDeviceGetAttribute(&hp, cudaDevAttrCanUseHostPointerForRegisteredMem, dev));
		pf_host_ptr = hp != 0;
		/* prefill and decode share this GPU. decode_first: the decode steps' stream at
		 * the highest priority (as a co-located server keeps its TPOT), so their CTAs go
		 * to the SMs as a prefill GEMM's free them instead of queueing behind its
		 * kernels; the prefill's at the lowest. st is idle here (probe_weights waited for
		 * it). Else both at the default (the lowest): kernels share the SMs in the order
		 * they were queued. */
		CKR(cudaDeviceGetStreamPriorityRange(&lo, &hi));
		if (decode_first) {
			CKR(cudaStreamSynchronize(st));
			CKR(cudaStreamDestroy(st));
			CKR(cudaStreamCreateWithPriority(&st, cudaStreamNonBlocking, hi));
		}
		CKR(cudaStreamCreateWithPriority(&pf_st, cudaStreamNonBlocking, lo));
	}
	CKR(cudaEventCreate(&pf_e0));
	CKR(cudaEventCreate(&pf_e1));
	/* waited for asleep: the prefill thread is not a core spinning on the GPU */
	CKR(cudaEventCreateWithFlags(&pf_done, cudaEventBlockingSync | cudaEventDisableTiming));
	return 0;
}

extern "C" int kvl_sb_gpu_pf_run(uint64_t key, uint32_t tokens, void *const *dst, uint32_t n,
				 uint32_t len, uint64_t *sums, double *gpu_s, char *why,
				 unsigned whylen)
{
	uint32_t want = pf_dims.layers * ((tokens + SB_BLOCK_TOKENS - 1) / SB_BLOCK_TOKENS);
	float ms = 0;

	if (pf == NULL || n != want || n > pf_blocks || len != pf_bb) {
		snprintf(why, whylen,
			 "prefill of %u tokens: %u blocks of %u bytes given, %u of %u wanted (at "
			 "most %u)",
			 tokens, n, len, want, pf_bb, pf_blocks);
		return -1;
	}
	CKR(cudaEventRecord(pf_e0, pf_st));
	if (sb_pf_run(pf, pf_st, key, tokens, pf_kv, why, whylen) < 0)
		return -1;
	CKR(cudaEventRecord(pf_e1, pf_st));
	if (sb_pf_block_sums(pf_st, pf_dptr, n, len, pf_dsum) < 0) {
		snprintf(why, whylen, "prefill: the checksums of %u blocks failed to launch", n);
		return -1;
	}
	CKR(cudaMemcpyAsync(pf_hsum, pf_dsum, (size_t)n * 8, cudaMemcpyDeviceToHost, pf_st));
	if (pf_kernel_reaches(dst[0]) && pf_kernel_reaches(dst[n - 1]) && len % 16 == 0) {
		/* one launch (the destinations are one segment, cache or ring: both ends
		 * checked); the address list's pinned buffer is free again at the wait below */
		memcpy(pf_hdst, dst, (size_t)n * 8);
		CKR(cudaMemcpyAsync(pf_ddst, pf_hdst, (size_t)n * 8, cudaMemcpyHostToDevice,
				    pf_st));
		/* sb_gather_kernel: one CTA per block, its sources pf_kv's blocks (pf_dptr); the
		 * SMs store to VRAM or over PCIe into registered host memory: one launch however
		 * scattered the blocks (a copy per run of adjacent blocks cost the prefill thread
		 * ~0.4 s of CPU per prompt into a fragmented tier) */
		sb_gather_kernel<<<n, 256, 0, pf_st>>>(pf_ddst, pf_dptr, len / 16);
	} else {
		for (uint32_t k = 0, e; k < n; k = e) { /* a copy per run of adjacent blocks */
			for (e = k + 1; e < n && (uint8_t *)dst[e] == (uint8_t *)dst[e - 1] + len;
			     e++)
				;
			CKR(cudaMemcpyAsync(dst[k], pf_kv + (uint64_t)k * len,
					    (size_t)(e - k) * len, cudaMemcpyDefault, pf_st));
		}
	}
	CKR(cudaEventRecord(pf_done, pf_st));
	CKR(cudaEventSynchronize(pf_done));
	CKR(cudaGetLastError());
	CKR(cudaEventElapsedTime(&ms, pf_e0, pf_e1));
	memcpy(sums, pf_hsum, (size_t)n * 8);
	*gpu_s = ms / 1e3;
	return 0;
}

extern "C" int kvl_sb_gpu_use_device(int dev, char *why, unsigned len)
{
	int n = 0;
	cudaError_t e = cudaGetDeviceCount(&n);

	if (e == cudaSuccess && (dev < 0 || dev >= n)) {
		snprintf(why, len, "--prefill-device %d: this host has %d GPU%s (0..%d)", dev, n,
			 n == 1 ? "" : "s", n - 1);
		return -1;
	}
	if (e == cudaSuccess)
		e = cudaSetDevice(dev);
	if (e != cudaSuccess) {
		snprintf(why, len, "--prefill-device %d: %s", dev, cudaGetErrorString(e));
		return -1;
	}
	return 0;
}

extern "C" double kvl_sb_gpu_pf_flops(uint32_t tokens)
{
	return sb_pf_flops(&pf_dims, tokens);
}

extern "C" uint64_t kvl_sb_gpu_pf_weight_bytes(void)
{
	return pf ? sb_pf_weight_bytes(pf) : 0;
}

extern "C" void kvl_sb_gpu_pf_fini(void)
{
	if (pf == NULL)
		return;
	cudaStreamSynchronize(pf_st);
	sb_pf_free(pf);
	pf = NULL;
	cudaFree(pf_kv);
	cudaFree(pf_dptr);
	cudaFree(pf_dsum);
	cudaFree(pf_ddst);
	cudaFreeHost(pf_hdst);
	cudaFreeHost(pf_hsum);
	cudaEventDestroy(pf_e0);
	cudaEventDestroy(pf_e1);
	cudaEventDestroy(pf_done);
	cudaStreamDestroy(pf_st);
}

/* The landed blocks' checksums against the prefill's, queued on st before the steps that read
 * them (as gpu_verify): the count stays on the device (dbad). */
static uint64_t gpu_verify_sums(void *const *blk, const uint64_t *want, unsigned n, uint32_t len)
{
	uint64_t *d;

	if (vs_sum == NULL || n > max_blk)
		return (uint64_t)n * len; /* cannot check: counted as bad */
	if (n == 0)
		return 0;
	d = arena_pair(blk, want, n);
	if (sb_pf_block_sums(st, d, n, len, vs_sum) < 0)
		return (uint64_t)n * len;
	sb_sums_cmp_kernel<<<(n + 255) / 256, 256, 0, st>>>(vs_sum, d + n, n, len, dbad);
	return 0;
}

extern "C" int kvl_sb_gpu_host_register(void *p, uint64_t len, char *why, unsigned whylen)
{
	cudaError_t e = cudaHostRegister(p, len, cudaHostRegisterDefault);

	if (e != cudaSuccess) {
		snprintf(why, whylen, "cudaHostRegister of %.2f GiB: %s", (double)len / (1u << 30),
			 cudaGetErrorString(e));
		return -1;
	}
	return 0;
}

extern "C" void kvl_sb_gpu_host_unregister(void *p)
{
	cudaHostUnregister(p);
}

/* in the order of struct sb_backend's fields (C++17 has no designated initialisers) */
extern "C" const struct sb_backend kvl_sb_gpu = {
	"gpu",		 true,		 gpu_init,	    gpu_cache,
	gpu_host_alloc,	 gpu_host_free,	 gpu_upload_async,  gpu_upload_wait,
	gpu_gather,	 gpu_fill,	 gpu_fill_blocks,   gpu_verify,
	gpu_table,	 gpu_step_begin, gpu_weights,	    gpu_attn,
	gpu_step_end,	 gpu_out_hash,	 gpu_probe_weights, gpu_fini,
	gpu_step_submit, gpu_bad_total,	 gpu_verify_sums,
};
