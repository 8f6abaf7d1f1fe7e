/* SPDX-License-Identifier: BSD-3-Clause */
/* Instructions per operation for the benchmarks in tools/: perf events, else callgrind. */
#ifndef KVL_TOOLS_PERF_COUNTER_H
#define KVL_TOOLS_PERF_COUNTER_H

#include <errno.h>
#include <inttypes.h>
#include <linux/perf_event.h>
#include <sys/ioctl.h>
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

/* Count from 0 from here (nothing where @fd is -1). */
static inline void kvl_perf_start(int fd)
{
	if (fd >= 0) {
		ioctl(fd, PERF_EVENT_IOC_RESET, 0);
		ioctl(fd, PERF_EVENT_IOC_ENABLE, 0);
	}
}

/* Stop counting: the count since kvl_perf_start(), or -1. */
static inline int64_t kvl_perf_stop(int fd)
{
	if (fd >= 0)
		ioctl(fd, PERF_EVENT_IOC_DISABLE, 0);
	return kvl_perf_read(fd);
}

/*
 * Callgrind, perf events' fallback (and the only instruction count under an emulator): the
 * one runner every benchmark in tools/ uses. It runs @cmd (the benchmark itself again, in an
 * inner mode) under valgrind --tool=callgrind, collecting only while inside one of the @nfn
 * functions in @fn (--toggle-collect: give them noinline/noipa so that they exist, and never
 * call one from another: entering the second would toggle collection off). With @dump_after
 * set, callgrind writes a dump each time that function returns: kvl_callgrind_file(cg, k)
 * names dump k (1-based); without it, k = 0 is the single file. Each line the child prints on
 * stdout goes to @line (may be NULL); its stderr passes through. Returns 0, or -1 with the
 * reason in cg->why (no valgrind, the child failed). kvl_callgrind_end() removes the files.
 */
struct kvl_callgrind {
	char out[40];	  /* the output file, dumps are out.1, out.2, ... */
	char version[48]; /* "valgrind-3.19.0" */
	char why[160];
};

static inline void kvl_callgrind_file(const struct kvl_callgrind *cg, unsigned k, char *buf,
				      size_t cap)
{
	if (k == 0)
		snprintf(buf, cap, "%s", cg->out);
	else
		snprintf(buf, cap, "%s.%u", cg->out, k);
}

static inline void kvl_callgrind_end(struct kvl_callgrind *cg)
{
	char f[sizeof(cg->out) + 16];

	if (cg->out[0] == 0)
		return;
	/* the final file, then the dumps in order until one is missing */
	for (unsigned k = 0;; k++) {
		kvl_callgrind_file(cg, k, f, sizeof(f));
		if (unlink(f) != 0 && k > 0)
			break;
	}
	cg->out[0] = 0;
}

static inline int kvl_callgrind_run(struct kvl_callgrind *cg, const char *cmd,
				    const char *const *fn, unsigned nfn, const char *dump_after,
				    void (*line)(const char *l, void *arg), void *arg)
{
	char c[8192], l[1024];
	size_t at;
	FILE *p;
	int fd, rc;

	memset(cg, 0, sizeof(*cg));
	p = popen("valgrind --version 2>/dev/null", "r");
	if (p == NULL || fgets(l, sizeof(l), p) == NULL) {
		if (p)
			pclose(p);
		snprintf(cg->why, sizeof(cg->why), "valgrind not found (Debian package valgrind)");
		return -1;
	}
	pclose(p);
	l[strcspn(l, "\n")] = 0;
	snprintf(cg->version, sizeof(cg->version), "%.47s", l);
	snprintf(cg->out, sizeof(cg->out), "/tmp/kvlane-bench-cg.XXXXXX");
	fd = mkstemp(cg->out);
	if (fd < 0) {
		snprintf(cg->why, sizeof(cg->why), "mkstemp: %s", strerror(errno));
		cg->out[0] = 0;
		return -1;
	}
	close(fd);
	at = (size_t)snprintf(c, sizeof(c),
			      "valgrind -q --tool=callgrind --callgrind-out-file=%s "
			      "--compress-strings=no --compress-pos=no",
			      cg->out);
	for (unsigned i = 0; i < nfn && at < sizeof(c); i++)
		at += (size_t)snprintf(c + at, sizeof(c) - at, " --toggle-collect=%s", fn[i]);
	if (dump_after != NULL && at < sizeof(c))
		at += (size_t)snprintf(c + at, sizeof(c) - at, " --dump-after=%s", dump_after);
	if (at < sizeof(c))
		at += (size_t)snprintf(c + at, sizeof(c) - at, " %s", cmd);
	if (at >= sizeof(c)) {
		snprintf(cg->why, sizeof(cg->why), "command line too long");
		return -1;
	}
	fflush(stdout);
	p = popen(c, "r");
	if (p == NULL) {
		snprintf(cg->why, sizeof(cg->why), "popen: %s", strerror(errno));
		return -1;
	}
	while (fgets(l, sizeof(l), p))
		if (line != NULL)
			line(l, arg);
	rc = pclose(p);
	if (rc != 0) {
		snprintf(cg->why, sizeof(cg->why), "callgrind run failed (status %d): %.100s", rc,
			 cmd);
		return -1;
	}
	return 0;
}

/*
 * Inclusive instructions (Ir) of each function named in @fn, read from one callgrind file
 * of kvl_callgrind_run(): every cost line in the function's fn= blocks, i.e. its own cost
 * plus the inclusive cost that callgrind records after each of its calls= lines. Returns the
 * file's total (its "totals:" or "summary:" line) so that the caller can check that the named
 * functions hold all that was collected, or -1 when the file cannot be read.
 */
static inline int64_t kvl_callgrind_inclusive(const char *file, const char *const *fn, unsigned nfn,
					      uint64_t *incl)
{
	char line[4096];
	int cur = -1;
	int64_t total = -1;
	FILE *f = fopen(file, "r");

	for (unsigned i = 0; i < nfn; i++)
		incl[i] = 0;
	if (f == NULL)
		return -1;
	while (fgets(line, sizeof(line), f)) {
		uint64_t pos, ir;

		line[strcspn(line, "\n")] = 0;
		if (strncmp(line, "fn=", 3) == 0) {
			cur = -1;
			for (unsigned i = 0; i < nfn; i++)
				if (strcmp(line + 3, fn[i]) == 0)
					cur = (int)i;
		} else if (line[0] >= '0' && line[0] <= '9') {
			/* a cost line: position, then Ir (the only event collected) */
			if (sscanf(line, "%" SCNu64 " %" SCNu64, &pos, &ir) == 2 && cur >= 0)
				incl[cur] += ir;
		} else if (sscanf(line, "totals: %" SCNu64, &ir) == 1 ||
			   sscanf(line, "summary: %" SCNu64, &ir) == 1) {
			total = (int64_t)ir;
		}
	}
	fclose(f);
	return total;
}

static inline void kvl_callgrind_blocks_line(const char *l, void *arg)
{
	sscanf(l, "inner blocks=%" SCNu64, (uint64_t *)arg);
}

/*
 * The sched and lcore benchmarks' use: `@self @args --inner @target` under callgrind,
 * counting only the function run_loop, divided by the "inner blocks=N" line the child
 * prints. Instructions per block, or -1 (no valgrind, the child failed, nothing counted).
 */
static inline double kvl_callgrind_per_block(const char *self, const char *args, uint64_t target)
{
	static const char *const fn[] = { "run_loop" };
	struct kvl_callgrind cg;
	char cmd[4608];
	uint64_t blocks = 0, ir = 0;
	int64_t total = -1;

	snprintf(cmd, sizeof(cmd), "%s %s --inner %" PRIu64, self, args, target);
	if (kvl_callgrind_run(&cg, cmd, fn, 1, NULL, kvl_callgrind_blocks_line, &blocks) == 0)
		total = kvl_callgrind_inclusive(cg.out, fn, 1, &ir);
	else
		fprintf(stderr, "%s\n", cg.why);
	kvl_callgrind_end(&cg);
	return blocks && total > 0 ? (double)total / (double)blocks : -1;
}

#endif /* KVL_TOOLS_PERF_COUNTER_H */
