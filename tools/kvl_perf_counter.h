/* SPDX-License-Identifier: BSD-3-Clause */
/* Instructions retired by the calling thread, for the benchmarks in tools/ (perf events). */
#ifndef KVL_TOOLS_PERF_COUNTER_H
#define KVL_TOOLS_PERF_COUNTER_H

#include <linux/perf_event.h>
#include <stdint.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

/* A disabled user-space instruction counter of this thread, or -1 where perf events are not
 * available (VMs often refuse them): the caller then says NA. */
static inline int kvl_perf_open(void)
{
	struct perf_event_attr a;

	memset(&a, 0, sizeof(a));
	a.type = PERF_TYPE_HARDWARE;
	a.size = sizeof(a);
	a.config = PERF_COUNT_HW_INSTRUCTIONS;
	a.disabled = 1;
	a.exclude_kernel = 1;
	a.exclude_hv = 1;
	return (int)syscall(SYS_perf_event_open, &a, 0, -1, -1, 0);
}

/* The count so far, or -1. */
static inline int64_t kvl_perf_read(int fd)
{
	uint64_t v;

	if (fd < 0 || read(fd, &v, sizeof(v)) != sizeof(v))
		return -1;
	return (int64_t)v;
}

#endif /* KVL_TOOLS_PERF_COUNTER_H */
