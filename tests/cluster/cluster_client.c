/* SPDX-License-Identifier: BSD-3-Clause */
/* cluster test client: a runtime on the public API, driven line by line from stdin. */
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kvlane/kvlane.h"

/*
 * cluster_client INI
 * Starts a runtime (EAL from the INI's [eal]), prints "started", then answers one command a
 * line, each answer one line (list: several, ending with "end"):
 *   list ROLE                  nodes of ROLE (prefill|decode|tier|any): "node NAME ROLE
 *                              CONTROL INCARNATION" lines, then "end N"
 *   wait ROLE N TIMEOUT_MS     until exactly N nodes of ROLE are in view: "wait ok N" or
 *                              "wait timeout N"
 *   gone NAME TIMEOUT_MS       until NAME is not in view: "gone ok MS" or "gone timeout"
 *   read NAME SEED TIMEOUT_MS  kvl_connect_name(NAME), then READ its first readable segment
 *                              whole and check every byte against the pattern of SEED:
 *                              "read ok NAME peer P bytes B" or "read fail ERRNO MESSAGE"
 *   quit
 * Exit 0 after quit, 3 when the start failed.
 */

#define CHUNK	    (64u * 1024)
#define LOCAL_BYTES (4u << 20)

static struct kvl_runtime *rt;
static struct kvl_segment local;

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static int role_of(const char *s)
{
	if (strcmp(s, "prefill") == 0)
		return KVL_NODE_PREFILL;
	if (strcmp(s, "decode") == 0)
		return KVL_NODE_DECODE;
	if (strcmp(s, "tier") == 0)
		return KVL_NODE_TIER;
	return KVL_NODE_ANY;
}

static const char *role_name(int r)
{
	return r == KVL_NODE_PREFILL ? "prefill" : r == KVL_NODE_DECODE ? "decode" : "tier";
}

static void cmd_list(const char *role)
{
	static struct kvl_cluster_node n[1024];
	int got = kvl_cluster_list(rt, role_of(role), n, 1024);

	for (int i = 0; i < got && i < 1024; i++)
		printf("node %s %s %s %llx\n", n[i].name, role_name(n[i].role), n[i].control,
		       (unsigned long long)n[i].incarnation);
	printf("end %d\n", got);
}

static void cmd_wait(const char *role, int want, unsigned timeout_ms)
{
	uint64_t end = now_ms() + timeout_ms;
	int got;

	for (;;) {
		got = kvl_cluster_list(rt, role_of(role), NULL, 0);
		if (got == want || now_ms() >= end)
			break;
		struct timespec ts = { 0, 20 * 1000000 };
		nanosleep(&ts, NULL);
	}
	printf("wait %s %d\n", got == want ? "ok" : "timeout", got);
}

static void cmd_gone(const char *name, unsigned timeout_ms)
{
	static struct kvl_cluster_node n[1024];
	uint64_t t0 = now_ms(), end = t0 + timeout_ms;

	for (;;) {
		int got = kvl_cluster_list(rt, KVL_NODE_ANY, n, 1024), found = 0;

		for (int i = 0; i < got && i < 1024; i++)
			found |= strcmp(n[i].name, name) == 0;
		if (!found) {
			printf("gone ok %llu\n", (unsigned long long)(now_ms() - t0));
			return;
		}
		if (now_ms() >= end)
			break;
		struct timespec ts = { 0, 5 * 1000000 };
		nanosleep(&ts, NULL);
	}
	printf("gone timeout\n");
}

static void cmd_read(const char *name, uint32_t seed, unsigned timeout_ms)
{
	struct kvl_remote_seg segs[16];
	char err[512];
	kvl_peer_t peer;
	uint64_t len, done = 0, posted = 0, bad;
	int rc, n, s = -1;

	rc = kvl_connect_name(rt, name, timeout_ms, &peer, err, sizeof(err));
	if (rc < 0) {
		printf("read fail %s %s\n", strerrorname_np(-rc), err);
		return;
	}
	n = kvl_peer_segments(rt, peer, segs, 16);
	for (int i = 0; i < n && i < 16 && s < 0; i++)
		if (segs[i].access & KVL_REMOTE_READ)
			s = i;
	if (s < 0) {
		printf("read fail ENOENT %s offers no readable segment (%d)\n", name, n);
		return;
	}
	len = segs[s].length < LOCAL_BYTES ? segs[s].length : LOCAL_BYTES;
	memset(local.base, 0, len);
	while (done < len) {
		struct kvl_completion c[16];
		unsigned got;

		while (posted < len && posted - done < 8 * CHUNK) {
			uint32_t l = len - posted < CHUNK ? (uint32_t)(len - posted) : CHUNK;
			struct kvl_xfer x = { .cookie = posted,
					      .local = (char *)local.base + posted,
					      .remote_off = posted,
					      .length = l,
					      .remote_seg = segs[s].id,
					      .op = KVL_READ };

			rc = kvl_post(rt, peer, &x, 1);
			if (rc < 0) {
				printf("read fail %s kvl_post to %s (peer %u)\n",
				       strerrorname_np(-rc), name, peer);
				return;
			}
			if (rc == 0)
				break;
			posted += l;
		}
		got = kvl_poll(rt, c, 16);
		for (unsigned i = 0; i < got; i++) {
			if (c[i].status != KVL_OK) {
				printf("read fail EIO status %s from %s (peer %u)\n",
				       kvl_status_name(c[i].status), name, peer);
				return;
			}
			done += c[i].bytes;
		}
		if (got == 0)
			sched_yield();
	}
	bad = kvl_pattern_check(local.base, len, seed, 0);
	if (bad != len) {
		printf("read fail EBADMSG byte %llu of %s differs from its pattern\n",
		       (unsigned long long)bad, name);
		return;
	}
	printf("read ok %s peer %u bytes %llu\n", name, peer, (unsigned long long)len);
}

int main(int argc, char **argv)
{
	struct kvl_start_args sa = { 0 };
	struct kvl_seg_geom g = { .layers = 1, .planes = 1, .blocks = 64, .block_bytes = 65536 };
	char err[4096], line[512], a[128], b[128];
	unsigned t;
	int stage = 0, rc;

	if (argc != 2) {
		fprintf(stderr, "usage: %s INI\n", argv[0]);
		return 2;
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	sa.config = argv[1];
	rt = kvl_start(&sa, err, sizeof(err), &stage);
	if (rt == NULL) {
		printf("FAIL start (stage %d): %s\n", stage, err);
		return 3;
	}
	rc = kvl_seg_alloc(rt, "client", &g, 0, &local);
	if (rc < 0) {
		printf("FAIL kvl_seg_alloc: %s\n", strerror(-rc));
		kvl_stop(rt);
		return 3;
	}
	printf("started\n");
	while (fgets(line, sizeof(line), stdin) != NULL) {
		int k;

		if (sscanf(line, "list %127s", a) == 1)
			cmd_list(a);
		else if (sscanf(line, "wait %127s %d %u", a, &k, &t) == 3)
			cmd_wait(a, k, t);
		else if (sscanf(line, "gone %127s %u", a, &t) == 2)
			cmd_gone(a, t);
		else if (sscanf(line, "read %127s %127s %u", a, b, &t) == 3)
			cmd_read(a, (uint32_t)strtoul(b, NULL, 0), t);
		else if (strncmp(line, "quit", 4) == 0)
			break;
		else
			printf("unknown command: %s", line);
	}
	kvl_stop(rt);
	return 0;
}
