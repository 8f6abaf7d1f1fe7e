/* SPDX-License-Identifier: BSD-3-Clause */
/* GPU test helper: report the CUDA devices, or hold some (or all but some) VRAM until stdin closes.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "gpu_test.h"

/* Exit 77 = "skip" for meson: there is no GPU to test on, and we say why. */
static int probe(void)
{
	int n = gpu_test_devices();
	struct cudaDeviceProp prop;

	if (n == 0)
		return GPU_TEST_SKIP;
	if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess)
		return 1;
	printf("devices=%d\nname=%s\n", n, prop.name);
	return 0;
}

static int hold(int dev, size_t mib)
{
	size_t free_before, free_after, total;
	void *p = NULL;
	char buf[64];
	cudaError_t ce;

	ce = cudaSetDevice(dev);
	if (ce == cudaSuccess)
		ce = cudaMemGetInfo(&free_before, &total);
	if (ce == cudaSuccess)
		ce = cudaMalloc(&p, mib << 20);
	if (ce == cudaSuccess)
		ce = cudaMemset(p, 0xa5, mib << 20); /* touch it: the pages are really ours */
	if (ce == cudaSuccess)
		ce = cudaDeviceSynchronize();
	if (ce == cudaSuccess)
		ce = cudaMemGetInfo(&free_after, &total);
	if (ce != cudaSuccess) {
		fprintf(stderr, "vram_hog: %s\n", cudaGetErrorString(ce));
		return 1;
	}
	printf("held=%zu free_before=%zu free_after=%zu\n", mib << 20, free_before, free_after);
	fflush(stdout);
	while (fgets(buf, sizeof(buf), stdin) != NULL)
		;
	cudaFree(p);
	return 0;
}

/*
 * Take all free VRAM of @dev but @leave_mib (measured after this process's own context), touch
 * it, report "held=...", then follow stdin: "more MIB" takes MIB more (touched), "less" gives
 * that back, each answered with a "held=..." line; end of input frees everything. Another
 * process leaving a GPU nearly full, then fuller, then less full, on the test's cue.
 */
static int leave(int dev, size_t leave_mib)
{
	size_t free_b, total, take, extra = 0;
	void *p = NULL, *more = NULL;
	char line[64];

	if (cudaSetDevice(dev) != cudaSuccess || cudaFree(0) != cudaSuccess ||
	    cudaMemGetInfo(&free_b, &total) != cudaSuccess) {
		fprintf(stderr, "vram_hog: no device %d\n", dev);
		return 1;
	}
	if (free_b <= (leave_mib << 20)) {
		fprintf(stderr, "vram_hog: only %zu MiB free, asked to leave %zu\n", free_b >> 20,
			leave_mib);
		return 1;
	}
	take = (free_b - (leave_mib << 20)) >> 20 << 20;
	if (cudaMalloc(&p, take) != cudaSuccess || cudaMemset(p, 0xa5, take) != cudaSuccess ||
	    cudaDeviceSynchronize() != cudaSuccess ||
	    cudaMemGetInfo(&free_b, &total) != cudaSuccess) {
		fprintf(stderr, "vram_hog: cannot take %zu MiB\n", take >> 20);
		return 1;
	}
	printf("held=%zu free_after=%zu\n", take, free_b);
	fflush(stdout);
	while (fgets(line, sizeof(line), stdin) != NULL) {
		size_t mib;
		cudaError_t ce = cudaSuccess;

		if (sscanf(line, "more %zu", &mib) == 1 && more == NULL) {
			ce = cudaMalloc(&more, mib << 20);
			if (ce == cudaSuccess)
				ce = cudaMemset(more, 0x5a, mib << 20);
			extra = ce == cudaSuccess ? mib << 20 : 0;
		} else if (strncmp(line, "less", 4) == 0 && more != NULL) {
			ce = cudaFree(more);
			more = NULL;
			extra = 0;
		}
		if (ce == cudaSuccess)
			ce = cudaDeviceSynchronize();
		if (ce == cudaSuccess)
			ce = cudaMemGetInfo(&free_b, &total);
		if (ce != cudaSuccess) {
			fprintf(stderr, "vram_hog: %s\n", cudaGetErrorString(ce));
			return 1;
		}
		printf("held=%zu free_after=%zu\n", take + extra, free_b);
		fflush(stdout);
	}
	cudaFree(more);
	cudaFree(p);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc == 2 && strcmp(argv[1], "probe") == 0)
		return probe();
	if (argc == 4 && strcmp(argv[1], "hold") == 0)
		return hold(atoi(argv[2]), strtoull(argv[3], NULL, 10));
	if (argc == 4 && strcmp(argv[1], "leave") == 0)
		return leave(atoi(argv[2]), strtoull(argv[3], NULL, 10));
	fprintf(stderr, "usage: %s probe | hold DEVICE MIB | leave DEVICE MIB\n", argv[0]);
	return 2;
}
