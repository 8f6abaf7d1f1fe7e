/* SPDX-License-Identifier: BSD-3-Clause */
/* What the gpu suite's C tests share: failing checks, and the skip when there is no GPU. */
#ifndef KVL_TEST_GPU_TEST_H
#define KVL_TEST_GPU_TEST_H

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

#include <cuda_runtime_api.h>

/* A CUDA call that must succeed: else FAIL with the call and CUDA's message, exit 1. */
#define CK(x)                                                                  \
	do {                                                                   \
		cudaError_t ce_ = (x);                                         \
		if (ce_ != cudaSuccess) {                                      \
			printf("FAIL %s:%d: %s: %s\n", __FILE__, __LINE__, #x, \
			       cudaGetErrorString(ce_));                       \
			exit(1);                                               \
		}                                                              \
	} while (0)

/* A condition that must hold: else FAIL with it and the printf-style message, exit 1. */
#define EXPECT(c, ...)                                                      \
	do {                                                                \
		if (!(c)) {                                                 \
			printf("FAIL %s:%d: %s: ", __FILE__, __LINE__, #c); \
			printf(__VA_ARGS__);                                \
			printf("\n");                                       \
			exit(1);                                            \
		}                                                           \
	} while (0)

/* Exit status 77 is meson's "skipped". */
#define GPU_TEST_SKIP 77

/* The number of CUDA devices; 0 after printing why there is none to test on. */
static inline int gpu_test_devices(void)
{
	int n = 0;
	cudaError_t ce = cudaGetDeviceCount(&n);

	if (ce != cudaSuccess || n == 0) {
		printf("skipped: no usable CUDA device (%s)\n",
		       ce != cudaSuccess ? cudaGetErrorString(ce) : "device count 0");
		return 0;
	}
	return n;
}

#endif /* KVL_TEST_GPU_TEST_H */
