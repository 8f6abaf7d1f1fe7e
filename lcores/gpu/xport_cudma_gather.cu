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

#define THREADS 128u /* 4 warps: a small footprint beside the attention's CTA on an SM */

/*
 * Work is cut into warp chunks of 512 * DEPTH bytes (32 lanes x DEPTH 16-byte loads), numbered
 * across the whole list; warp w of the grid takes chunks w, w + warps, ... Each lane issues
 * all DEPTH loads before its first store: host memory is a PCIe round trip (~1-2 us) away,
 * and the link is filled by bytes in flight, not by threads. A chunk is a warp's, not a
 * block's, so a 16 KiB copy still spreads over several warps at DEPTH 8 or 16, and no
 * __syncthreads couples the warps of a block. A chunk shorter than 512 * DEPTH (a copy's
 * tail) runs the same loads predicated off, so partial chunks keep their loads together too.
 */
template <unsigned DEPTH>
__global__ void __launch_bounds__(THREADS) gather_kernel(const __grid_constant__ struct gather_args a)
{
	const unsigned lane = threadIdx.x & 31u;
	const uint64_t warps = (uint64_t)gridDim.x * (THREADS / 32u);
	const uint64_t chunk = 512ull * DEPTH;
	uint64_t c = (uint64_t)blockIdx.x * (THREADS / 32u) + threadIdx.x / 32u;
	uint64_t kbase = 0; /* first chunk of copy k */
	unsigned k = 0;

	for (;; c += warps) {
		uint64_t nk = 0;

		/* The cursor only moves forward: each warp walks the list once per launch. */
		for (; k < a.n; k++) {
			nk = (a.cp[k].len + chunk - 1) / chunk;
			if (c < kbase + nk)
				break;
			kbase += nk;
		}
		if (k == a.n)
			return;
		const uint64_t off = (c - kbase) * chunk;
		const uint64_t len = a.cp[k].len;
		const uint64_t n = len - off < chunk ? len - off : chunk;
		const uint8_t *src = (const uint8_t *)a.cp[k].src + off;
		uint8_t *dst = (uint8_t *)a.cp[k].dst + off;

		if ((((uintptr_t)src | (uintptr_t)dst) & 15) == 0) {
			const uint4 *s4 = (const uint4 *)src;
			uint4 *d4 = (uint4 *)dst;
			const unsigned n16 = (unsigned)(n / 16);
			uint4 v[DEPTH];

#pragma unroll
			for (unsigned u = 0; u < DEPTH; u++)
				if (u * 32u + lane < n16)
					v[u] = s4[u * 32u + lane];
#pragma unroll
			for (unsigned u = 0; u < DEPTH; u++)
				if (u * 32u + lane < n16)
					d4[u * 32u + lane] = v[u];
			/* bytes past the last whole 16 (a length not a multiple of 16) */
			for (uint64_t i = (uint64_t)n16 * 16 + lane; i < n; i += 32)
				dst[i] = src[i];
		} else {
			for (uint64_t i = lane; i < n; i += 32)
				dst[i] = src[i];
		}
	}
}

extern "C" cudaError_t kvl_cudma_gather_load(void)
{
	struct cudaFuncAttributes fa;
	cudaError_t ce = cudaFuncGetAttributes(&fa, gather_kernel<4>);

	if (ce == cudaSuccess)
		ce = cudaFuncGetAttributes(&fa, gather_kernel<8>);
	if (ce == cudaSuccess)
		ce = cudaFuncGetAttributes(&fa, gather_kernel<16>);
	return ce;
}

extern "C" cudaError_t kvl_cudma_gather_launch(const struct kvl_cudma_copy *cp, unsigned n,
					       unsigned ctas, unsigned depth, cudaStream_t st)
{
	static thread_local struct gather_args a; /* 24 KiB: not on the lcore stack */

	if (n == 0)
		return cudaSuccess;
	if (n > KVL_CUDMA_GATHER_MAX || ctas == 0)
		return cudaErrorInvalidValue;
	a.n = n;
	for (unsigned i = 0; i < n; i++)
		a.cp[i] = cp[i];
	switch (depth) {
	case 4:
		gather_kernel<4><<<ctas, THREADS, 0, st>>>(a);
		break;
	case 8:
		gather_kernel<8><<<ctas, THREADS, 0, st>>>(a);
		break;
	case 16:
		gather_kernel<16><<<ctas, THREADS, 0, st>>>(a);
		break;
	default:
		return cudaErrorInvalidValue;
	}
	return cudaGetLastError();
}
