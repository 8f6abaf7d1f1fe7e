/* SPDX-License-Identifier: BSD-3-Clause */
/* Instructions retired by the calling thread, for the benchmarks in tools/ (perf events). */
#ifndef KVL_TOOLS_PERF_COUNTER_H
#define KVL_TOOLS_PERF_COUNTER_H

#include <inttypes.h>
#include <linux/perf_event.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
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

/*
 * Perf events' fallback: run `@self @args --inner @target` under callgrind, counting only the
 * function run_loop, and divide its instructions by the "inner blocks=N" line the child
 * prints. Instructions per block, or -1 (no valgrind, the child failed, nothing counted).
 */
static inline double kvl_callgrind_per_block(const char *self, const char *args, uint64_t target)
{
	char out[] = "/tmp/kvlane-bench-cg.XXXXXX", cmd[8192], line[512];
	int fd = mkstemp(out);
	uint64_t ir = 0, blocks = 0;
	FILE *p, *f;

	if (fd < 0)
		return -1;
	close(fd);
	snprintf(cmd, sizeof(cmd),
		 "valgrind --tool=callgrind --callgrind-out-file=%s --toggle-collect=run_loop "
		 "%s %s --inner %" PRIu64 " 2>/dev/null",
		 out, self, args, target);
	p = popen(cmd, "r");
	if (p == NULL) {
		unlink(out);
		return -1;
	}
	while (fgets(line, sizeof(line), p))
		sscanf(line, "inner blocks=%" SCNu64, &blocks);
	if (pclose(p) != 0)
		blocks = 0;
	f = fopen(out, "r");
	while (f && fgets(line, sizeof(line), f))
		if (sscanf(line, "totals: %" SCNu64, &ir) == 1 ||
		    sscanf(line, "summary: %" SCNu64, &ir) == 1)
			break;
	if (f)
		fclose(f);
	unlink(out);
	return blocks && ir ? (double)ir / (double)blocks : -1;
}

#endif /* KVL_TOOLS_PERF_COUNTER_H */
