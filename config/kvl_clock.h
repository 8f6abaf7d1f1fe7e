/* SPDX-License-Identifier: BSD-3-Clause */
/* The one clock for deadlines, timeouts and timestamps: CLOCK_MONOTONIC, in ns and in s. */
#ifndef KVL_CLOCK_H
#define KVL_CLOCK_H

#include <stdint.h>
#include <time.h>

/*
 * Every floor reads time through these, so a deadline set by one file means the same in the
 * next. (The NIC lcore's hot path rescales the TSC instead: lcores/nic_sched.c.) Never
 * TSC x 1e9 / Hz in 64 bits: the product wraps after a few seconds of host uptime.
 */
static inline uint64_t kvl_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static inline double kvl_now_s(void)
{
	return (double)kvl_now_ns() * 1e-9;
}

#endif /* KVL_CLOCK_H */
