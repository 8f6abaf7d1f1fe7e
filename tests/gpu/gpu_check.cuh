/* SPDX-License-Identifier: BSD-3-Clause */
/* The gpu tests' check of landed KV on the GPU: runtime/pattern.c's words, a kernel per step. */
#ifndef KVL_TEST_GPU_CHECK_CUH
#define KVL_TEST_GPU_CHECK_CUH

#include <stdint.h>
#include <string.h>

#include "gpu_test.h"
#include "gpusig.h"
#include "kvlane/kvlane.h"

/* The pattern of runtime/pattern.c, word by word: the same mix of (seed, word index). */
__device__ static inline uint64_t gpu_pattern_word(uint32_t seed, uint64_t idx)
{
	uint64_t z = idx + 0x9e3779b97f4a7c15ull * ((uint64_t)seed + 1);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* What the kernels found (device memory, zeroed before the run). */
struct gpu_counts {
	unsigned long long checked, bad, guard_checked, guard_bad;
};

/* One thread block per KV block: every 8-byte word of it against the pattern of @seed at its
 * offset in the serving segment (block b of the request sits at b * @block there). */
__global__ static void gpu_check_step(const uint64_t *const *addr, uint32_t first, uint32_t block,
				      uint32_t seed, struct gpu_counts *c)
{
	const uint64_t *p = addr[first + blockIdx.x];
	uint64_t base = (uint64_t)(first + blockIdx.x) * block / 8;
	unsigned long long bad = 0;

	for (uint32_t i = threadIdx.x; i < block / 8; i += blockDim.x)
		bad += p[i] != gpu_pattern_word(seed, base + i);
	if (bad)
		atomicAdd(&c->bad, bad);
	__syncthreads();
	if (threadIdx.x == 0)
		atomicAdd(&c->checked, (unsigned long long)block);
}

/* The host side of gpu_check_enqueue's stream: the block table (mapped host memory, read by
 * the kernels through tab_dev), the per-step "table filled" words 64 bytes apart (mapped,
 * zeroed), the counters (device memory, zeroed) and a non-blocking stream. */
struct gpu_check_tables {
	uint64_t **tab, **tab_dev;
	volatile uint32_t *ready;
	uint32_t *ready_dev;
	struct gpu_counts *cnt;
	cudaStream_t st;
};

static inline void gpu_check_tables_new(struct gpu_check_tables *t, uint32_t n_blocks,
					uint32_t n_steps)
{
	CK(cudaHostAlloc((void **)&t->tab, n_blocks * sizeof(*t->tab), cudaHostAllocMapped));
	CK(cudaHostGetDevicePointer((void **)&t->tab_dev, t->tab, 0));
	CK(cudaHostAlloc((void **)&t->ready, (size_t)n_steps * 64, cudaHostAllocMapped));
	memset((void *)t->ready, 0, (size_t)n_steps * 64);
	CK(cudaHostGetDevicePointer((void **)&t->ready_dev, (void *)t->ready, 0));
	CK(cudaMalloc((void **)&t->cnt, sizeof(*t->cnt)));
	CK(cudaMemset(t->cnt, 0, sizeof(*t->cnt)));
	CK(cudaStreamCreateWithFlags(&t->st, cudaStreamNonBlocking));
}

/*
 * The whole stream of a step-flag request, enqueued up front (nothing per step from here on):
 * for each of @n_steps steps, wait its READY word, then the host's table word for it
 * (@table_ready_dev, 64 bytes apart: the host fills the step's block addresses into @tab_dev
 * once READY says they landed), check its @per_step blocks, write its DONE word.
 */
static inline void gpu_check_enqueue(const struct kvl_req_flags *fl, uint64_t table_ready_dev,
				     const uint64_t *const *tab_dev, uint32_t n_steps,
				     uint32_t per_step, uint32_t block, uint32_t seed,
				     struct gpu_counts *cnt, cudaStream_t st)
{
	char err[256];

	for (uint32_t k = 0; k < n_steps; k++) {
		EXPECT(kvl_gpusig_wait_addr(fl->ready_dev + (uint64_t)k * fl->stride, fl->epoch, st,
					    err, sizeof(err)) == 0,
		       "wait READY %u: %s", k, err);
		EXPECT(kvl_gpusig_wait_addr(table_ready_dev + (uint64_t)k * 64, 1, st, err,
					    sizeof(err)) == 0,
		       "wait table %u: %s", k, err);
		gpu_check_step<<<per_step, 256, 0, st>>>(tab_dev, k * per_step, block, seed, cnt);
		CK(cudaGetLastError());
		EXPECT(kvl_gpusig_done_addr(fl->done_dev + (uint64_t)k * fl->stride, fl->epoch, st,
					    err, sizeof(err)) == 0,
		       "write DONE %u: %s", k, err);
	}
}

#endif
