/* SPDX-License-Identifier: BSD-3-Clause */
/* What the gpu benches (C++: bench_tier.cu, bench_ipc.cu) share: a median, a scattered layout. */
#ifndef KVL_TEST_GPU_BENCH_H
#define KVL_TEST_GPU_BENCH_H

#include <stdint.h>
#include <stdlib.h>

#include <algorithm>
#include <vector>

/* The median of @v (the upper one of an even count), as both benches report. */
static inline double gpu_bench_median(std::vector<double> v)
{
	std::sort(v.begin(), v.end());
	return v[v.size() / 2];
}

/* Block i of a layout of @n blocks sits at place perm[i]: a shuffle seeded by @seed, so that
 * nothing merges by accident and a rerun places the same blocks the same way. */
static inline std::vector<uint32_t> gpu_bench_scatter(uint32_t n, unsigned seed)
{
	std::vector<uint32_t> p(n);

	for (uint32_t i = 0; i < n; i++)
		p[i] = i;
	srand(seed);
	for (uint32_t i = n - 1; i > 0; i--)
		std::swap(p[i], p[(uint32_t)rand() % (i + 1)]);
	return p;
}

#endif /* KVL_TEST_GPU_BENCH_H */
