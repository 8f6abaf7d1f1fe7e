/* SPDX-License-Identifier: BSD-3-Clause */
/* The local DMA transport's gather kernel: many small host<->GPU ranges in one launch. */
#include <cuda_runtime.h>
#include <stdint.h>

#include "xport_cudma.h"

/* The copy list travels as a kernel parameter (up to 32 KiB since CUDA 12.1 on sm_70+): no
 * descriptor upload, no read of the list across PCIe before the first byte moves. */
struct gather_args {
	unsigned n;
	struct kvl_cudma_copy cp[KVL_CUDMA_GATHER_MAX];
};

#define CHUNK	4096u /* bytes a thread block takes at a time: 16 B x 256 threads */
#define THREADS 256u
#define UNROLL	4u /* chunks in flight per thread block: loads issued before the stores */

static __device__ void copy_bytes(uint8_t *d, const uint8_t *s, uint64_t len, unsigned tid)
{
	for (uint64_t i = tid; i < len; i += THREADS)
		d[i] = s[i];
}

/*
 * Work is cut into CHUNK pieces numbered across the whole list; block b takes groups of UNROLL
 * consecutive chunks, round robin. Reads of host memory cross PCIe with about a microsecond
 * of latency: each thread keeps UNROLL 16-byte loads in flight before it stores.
 */
__global__ void __launch_bounds__(THREADS) gather_kernel(const __grid_constant__ struct gather_args a)
{
	const unsigned tid = threadIdx.x;
	uint64_t group = 0; /* index of the current group of UNROLL chunks, over all copies */

	for (unsigned k = 0; k < a.n; k++) {
		const uint8_t *src = (const uint8_t *)a.cp[k].src;
		uint8_t *dst = (uint8_t *)a.cp[k].dst;
		const uint64_t len = a.cp[k].len;
		const uint64_t gbytes = (uint64_t)CHUNK * UNROLL;
		const uint64_t ngroups = (len + gbytes - 1) / gbytes;
		const bool vec = ((a.cp[k].src | a.cp[k].dst) & 15) == 0;
		/* first group of this copy that is ours */
		uint64_t first = (blockIdx.x + gridDim.x - group % gridDim.x) % gridDim.x;

		for (uint64_t g = first; g < ngroups; g += gridDim.x) {
			const uint64_t off = g * gbytes;
			const uint64_t n = len - off < gbytes ? len - off : gbytes;

			if (vec && n == gbytes) {
				uint4 v[UNROLL];
				const uint4 *s4 = (const uint4 *)(src + off);
				uint4 *d4 = (uint4 *)(dst + off);
#pragma unroll
				for (unsigned u = 0; u < UNROLL; u++)
					v[u] = s4[u * THREADS + tid];
#pragma unroll
				for (unsigned u = 0; u < UNROLL; u++)
					d4[u * THREADS + tid] = v[u];
			} else if (vec) {
				const uint64_t n16 = n / 16;
				const uint4 *s4 = (const uint4 *)(src + off);
				uint4 *d4 = (uint4 *)(dst + off);

				for (uint64_t i = tid; i < n16; i += THREADS)
					d4[i] = s4[i];
				copy_bytes(dst + off + n16 * 16, src + off + n16 * 16, n - n16 * 16,
					   tid);
			} else {
				copy_bytes(dst + off, src + off, n, tid);
			}
		}
		group += ngroups;
	}
}

extern "C" cudaError_t kvl_cudma_gather_launch(const struct kvl_cudma_copy *cp, unsigned n,
					       unsigned ctas, cudaStream_t st)
{
	static thread_local struct gather_args a; /* 24 KiB: not on the lcore stack */

	if (n == 0)
		return cudaSuccess;
	if (n > KVL_CUDMA_GATHER_MAX || ctas == 0)
		return cudaErrorInvalidValue;
	a.n = n;
	for (unsigned i = 0; i < n; i++)
		a.cp[i] = cp[i];
	gather_kernel<<<ctas, THREADS, 0, st>>>(a);
	return cudaGetLastError();
}
