/* SPDX-License-Identifier: BSD-3-Clause */
/* eal test: kvl_start with no EAL arguments takes [eal] from the INI; a second start is refused. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "kvlane/kvlane.h"

/*
 * embed_start INI
 * Starts kvlane as an engine would: no EAL arguments at all (eal_argc 0), so EAL's come from
 * the INI's [eal]. Prints "started", then waits for a line on stdin (the test reads EAL's own
 * /eal/params through telemetry meanwhile). Then kvl_start again while running, and again
 * after kvl_stop: each must return NULL with errno EALREADY, stage KVL_START_EAL and a
 * message; both are printed. Exit 0 when both were refused, 1 otherwise, 3 when the first
 * start failed.
 */
static int second(const char *ini, const char *when)
{
	struct kvl_start_args sa = { .config = ini };
	char err[1024];
	int stage = 0;
	struct kvl_runtime *rt;

	errno = 0;
	rt = kvl_start(&sa, err, sizeof(err), &stage);
	if (rt != NULL) {
		printf("FAIL %s: kvl_start started a second runtime\n", when);
		kvl_stop(rt);
		return 1;
	}
	printf("%s %s: refused, errno %s, stage %d: %s\n",
	       errno == EALREADY && stage == KVL_START_EAL ? "ok" : "FAIL", when,
	       errno == EALREADY ? "EALREADY" : strerror(errno), stage, err);
	return errno == EALREADY && stage == KVL_START_EAL ? 0 : 1;
}

int main(int argc, char **argv)
{
	struct kvl_start_args sa = { 0 };
	struct kvl_runtime *rt;
	char err[4096], line[64];
	int stage = 0, fails = 0;

	if (argc != 2) {
		fprintf(stderr, "usage: %s INI\n", argv[0]);
		return 2;
	}
	sa.config = argv[1];
	rt = kvl_start(&sa, err, sizeof(err), &stage);
	if (rt == NULL) {
		printf("FAIL first start (stage %d): %s\n", stage, err);
		return 3;
	}
	printf("started\n");
	fflush(stdout);
	if (fgets(line, sizeof(line), stdin) == NULL)
		printf("stdin closed\n");
	fails += second(argv[1], "while running");
	kvl_stop(rt);
	fails += second(argv[1], "after kvl_stop");
	return fails ? 1 : 0;
}
