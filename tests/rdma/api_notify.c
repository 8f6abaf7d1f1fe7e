/* SPDX-License-Identifier: BSD-3-Clause */
/* rdma test: scattered transfers (kvl_xfer.iov) and notices (KVL_XFER_NOTIFY) on the public API. */
#include <errno.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "api_test.h"
#include "kvlane/kvlane.h"

/*
 * api_notify [EAL options] -- server INI N          (prints "api_notify: ready ADDR")
 * api_notify [EAL options] -- client INI SERVER N
 * The client WRITEs N messages into the server's "nkv" segment, each gathered from NIOV
 * scattered local ranges and flagged KVL_XFER_NOTIFY with value SEED0 + i; message i fills
 * [i * MSG, + MSG) of "nkv" with the pattern of seed SEED0 + i. It READs each back scattered and
 * checks it, and checks kvl_post()'s refusals. The server polls kvl_poll_notices() until it
 * has N, and for each checks the value, the length, and that the bytes are already in its
 * segment when the notice is. Once the first notice is in, the server also allocates a
 * segment "late": its peer's RDMA connections exist already, and must learn it (the server
 * sends its rkeys and segments again). The client waits for "late" to appear, WRITEs a
 * message into it and READs it back. Each side prints one JSON line; exit 0 when all held.
 */
#define NIOV	   4
#define PIECE	   (16u * 1024)
#define MSG	   (NIOV * PIECE)
#define SEED0	   5000u
#define TIMEOUT_S  60
#define CONNECT_MS 10000

static int find_seg(struct kvl_runtime *rt, kvl_peer_t peer, const char *name,
		    struct kvl_remote_seg *out)
{
	struct kvl_remote_seg rs[16];
	int n = kvl_peer_segments(rt, peer, rs, 16);

	for (int i = 0; i < n; i++)
		if (strcmp(rs[i].name, name) == 0) {
			*out = rs[i];
			return 0;
		}
	return -ENOENT;
}

static int server(struct kvl_runtime *rt, unsigned n)
{
	struct kvl_segment kv, late;
	struct kvl_seg_geom g = { 1, 1, n, MSG }, lg = { 1, 1, 1, MSG };
	unsigned got = 0, right_value = 0, right_len = 0, landed = 0;
	bool late_ok = false;
	double deadline;

	if (kvl_seg_alloc(rt, "nkv", &g, KVL_REMOTE_READ | KVL_REMOTE_WRITE, &kv) != 0) {
		fprintf(stderr, "api_notify: server: no memory for the segment\n");
		return 1;
	}
	printf("api_notify: ready %s\n", kvl_listen_addr(rt));
	fflush(stdout);
	deadline = kvl_now_s() + TIMEOUT_S * 2;
	while (got < n && !stop && kvl_now_s() < deadline) {
		struct kvl_notice nt[32];
		unsigned k = kvl_poll_notices(rt, nt, 32);

		for (unsigned j = 0; j < k; j++) {
			uint32_t i = nt[j].value - SEED0;

			right_value += i == got + j;
			right_len += nt[j].length == MSG;
			/* the notice comes after the data: it must be there already */
			landed += i < n && kvl_pattern_check((uint8_t *)kv.base + (uint64_t)i * MSG,
							     MSG, SEED0 + i, 0) == MSG;
		}
		got += k;
		if (got != 0 && !late_ok) /* connected now: a segment the peer does not know */
			late_ok = kvl_seg_alloc(rt, "late", &lg, KVL_REMOTE_READ | KVL_REMOTE_WRITE,
						&late) == 0;
		if (k == 0)
			usleep(100);
	}
	printf("{\"role\":\"server\",\"notices\":%u,\"in_order\":%u,\"right_length\":%u,"
	       "\"data_there\":%u,\"late_segment\":%s}\n",
	       got, right_value, right_len, landed, late_ok ? "true" : "false");
	fflush(stdout);
	/* stay up until the client is done with its reads */
	while (!stop && kvl_now_s() < deadline)
		usleep(10000);
	return got == n && right_value == n && right_len == n && landed == n && late_ok ? 0 : 1;
}

/* Post one transfer and wait for its completion; its status, or -1. */
static int one(struct kvl_runtime *rt, kvl_peer_t peer, const struct kvl_xfer *x)
{
	struct kvl_completion c;
	double deadline = kvl_now_s() + TIMEOUT_S;
	int rc;

	while ((rc = kvl_post(rt, peer, x, 1)) == 0 && kvl_now_s() < deadline)
		usleep(50);
	if (rc != 1)
		return -1;
	while (kvl_now_s() < deadline)
		if (kvl_poll(rt, &c, 1) == 1)
			return c.cookie == x->cookie ? c.status : -1;
	return -1;
}

static int client(struct kvl_runtime *rt, const char *addr, unsigned n)
{
	struct kvl_seg_geom g = { 1, 1, 4 * NIOV, PIECE };
	struct kvl_segment loc;
	struct kvl_remote_seg kv;
	struct kvl_iov iov[NIOV], bad_iov[KVL_MAX_IOV + 1];
	kvl_peer_t peer;
	char err[1024];
	unsigned ok_w = 0, ok_r = 0, verified = 0, refusals = 0;
	int late_w = -1, late_r = -1;
	bool late_v = false;
	uint8_t *msg = malloc(MSG);

	if (msg == NULL || kvl_seg_alloc(rt, "loc", &g, KVL_REMOTE_READ, &loc) != 0 ||
	    kvl_connect(rt, addr, CONNECT_MS, &peer, err, sizeof(err)) != 0 ||
	    find_seg(rt, peer, "nkv", &kv) != 0) {
		fprintf(stderr, "api_notify: client set-up failed: %s\n", err);
		free(msg);
		return 1;
	}
	for (unsigned i = 0; i < n; i++) {
		struct kvl_xfer w = { .cookie = i,
				      .remote_off = (uint64_t)i * MSG,
				      .length = MSG,
				      .remote_seg = kv.id,
				      .op = KVL_WRITE,
				      .flags = KVL_XFER_NOTIFY,
				      .notify = SEED0 + i,
				      .n_iov = NIOV,
				      .iov = iov };
		struct kvl_xfer r = w;

		/* piece k of the message sits at slot 2 * (NIOV - 1 - k): scattered, reversed */
		kvl_pattern_fill(msg, MSG, SEED0 + i, 0);
		for (unsigned k = 0; k < NIOV; k++) {
			iov[k] = (struct kvl_iov){
				(uint8_t *)loc.base + (uint64_t)2 * (NIOV - 1 - k) * PIECE, PIECE, 0
			};
			memcpy(iov[k].base, msg + (uint64_t)k * PIECE, PIECE);
		}
		ok_w += one(rt, peer, &w) == KVL_OK;
		/* read it back scattered into the odd slots */
		memset(loc.base, 0, g.blocks * (uint64_t)PIECE);
		for (unsigned k = 0; k < NIOV; k++)
			iov[k].base = (uint8_t *)loc.base + (uint64_t)(2 * k + 1) * PIECE;
		r.op = KVL_READ;
		r.flags = 0;
		r.cookie = 1000000 + i;
		ok_r += one(rt, peer, &r) == KVL_OK;
		for (unsigned k = 0, good = 1; k < NIOV; k++) {
			good &= memcmp(iov[k].base, msg + (uint64_t)k * PIECE, PIECE) == 0;
			if (k == NIOV - 1)
				verified += good;
		}
	}
	/* refused before anything is taken */
	{
		struct kvl_xfer x = { .cookie = 9,
				      .length = MSG,
				      .remote_seg = kv.id,
				      .op = KVL_WRITE,
				      .n_iov = NIOV,
				      .iov = iov };

		x.length = MSG - 1; /* ranges do not add up */
		refusals += kvl_post(rt, peer, &x, 1) == -EINVAL;
		x.length = PIECE;
		x.n_iov = 1; /* one range goes in @local */
		refusals += kvl_post(rt, peer, &x, 1) == -EINVAL;
		for (unsigned k = 0; k <= KVL_MAX_IOV; k++)
			bad_iov[k] = (struct kvl_iov){ loc.base, 1, 0 };
		x.iov = bad_iov;
		x.n_iov = KVL_MAX_IOV + 1;
		x.length = KVL_MAX_IOV + 1;
		refusals += kvl_post(rt, peer, &x, 1) == -EINVAL;
		x.iov = iov;
		x.n_iov = NIOV;
		x.length = MSG;
		x.op = KVL_READ;
		x.flags = KVL_XFER_NOTIFY; /* notices are for writes */
		refusals += kvl_post(rt, peer, &x, 1) == -EINVAL;
		x.op = KVL_WRITE;
		x.flags = 0;
		bad_iov[0] = (struct kvl_iov){ msg, PIECE, 0 }; /* not registered */
		memcpy(&bad_iov[1], &iov[1], sizeof(iov[0]) * (NIOV - 1));
		x.iov = bad_iov;
		refusals += kvl_post(rt, peer, &x, 1) == -EFAULT;
	}
	/* the server's "late" segment: announced after we connected */
	{
		struct kvl_remote_seg late;
		double deadline = kvl_now_s() + 10;
		struct kvl_xfer x = {
			.cookie = 77, .local = loc.base, .length = PIECE, .op = KVL_WRITE
		};

		while (find_seg(rt, peer, "late", &late) != 0 && kvl_now_s() < deadline)
			usleep(1000);
		if (find_seg(rt, peer, "late", &late) == 0) {
			kvl_pattern_fill(loc.base, PIECE, 4242, 0);
			x.remote_seg = late.id;
			late_w = one(rt, peer, &x);
			memset(loc.base, 0, PIECE);
			x.op = KVL_READ;
			x.cookie = 78;
			late_r = one(rt, peer, &x);
			late_v = kvl_pattern_check(loc.base, PIECE, 4242, 0) == PIECE;
		}
	}
	printf("{\"role\":\"client\",\"writes_ok\":%u,\"reads_ok\":%u,\"verified\":%u,"
	       "\"refusals\":%u,\"late_write\":\"%s\",\"late_read\":\"%s\",\"late_verified\":%s}\n",
	       ok_w, ok_r, verified, refusals, late_w < 0 ? "none" : kvl_status_name(late_w),
	       late_r < 0 ? "none" : kvl_status_name(late_r), late_v ? "true" : "false");
	free(msg);
	return ok_w == n && ok_r == n && verified == n && refusals == 5 && late_w == KVL_OK &&
			       late_r == KVL_OK && late_v
		       ? 0
		       : 1;
}

int main(int argc, char **argv)
{
	struct kvl_start_args sa;
	struct kvl_runtime *rt;
	char err[4096];
	int dd = -1, stage, rc;
	bool srv;

	for (int i = 1; i < argc; i++)
		if (strcmp(argv[i], "--") == 0) {
			dd = i;
			break;
		}
	if (dd < 0 || argc - dd < 4 ||
	    (strcmp(argv[dd + 1], "server") != 0 && strcmp(argv[dd + 1], "client") != 0)) {
		fprintf(stderr, "usage: %s [EAL] -- server INI N | client INI ADDR N\n", argv[0]);
		return 2;
	}
	srv = strcmp(argv[dd + 1], "server") == 0;
	if (!srv && argc - dd < 5) {
		fprintf(stderr, "usage: %s [EAL] -- client INI ADDR N\n", argv[0]);
		return 2;
	}
	catch_term();
	sa = (struct kvl_start_args){ .eal_argc = dd, .eal_argv = argv, .config = argv[dd + 2] };
	rt = kvl_start(&sa, err, sizeof(err), &stage);
	if (rt == NULL) {
		fprintf(stderr, "api_notify: %s\n", err);
		return 1;
	}
	rc = srv ? server(rt, (unsigned)atoi(argv[dd + 3]))
		 : client(rt, argv[dd + 3], (unsigned)atoi(argv[dd + 4]));
	kvl_stop(rt);
	return rc;
}
