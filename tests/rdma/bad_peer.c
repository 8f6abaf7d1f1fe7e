/* SPDX-License-Identifier: BSD-3-Clause */
/* rdma test client: a peer that advertised a wrong rkey; only the requests to it may fail. */
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
 * bad_peer [EAL options] -- INI SERVER
 * The server (kvlaned with KVLANE_TEST_BAD_RKEY=bad KVLANE_TEST_BAD_LEN=big) offers "kv",
 * "bad" and "big": "bad"'s rkey is wrong, "big" is advertised twice as long as it is (so a
 * WRITE into its second half is out of bounds at the NIC, not in kvlane's own check); the
 * NIC, not kvlane's own checks, refuses those accesses, and the responder's QP goes to
 * error. Rounds of WRITEs to "kv" with every BAD_EVERY-th sent to "bad" and another to
 * "big"'s second half, in flight
 * together over the same QPs; then READ back "kv" and compare. Prints one JSON line, then
 * lingers (telemetry stays readable) until SIGTERM or LINGER_S.
 */
#define XFER_LEN  (256u * 1024)
#define N_XFERS	  256u
#define BAD_EVERY 16u
#define ROUNDS	  2u
#define LINGER_S  120
#define STALL_S	  60

/* Post all @n, poll until each completed once; statuses into @st by cookie. */
static int run(struct kvl_runtime *rt, kvl_peer_t peer, const struct kvl_xfer *x, unsigned n,
	       int *st, uint32_t *bytes)
{
	unsigned posted = 0, done = 0;
	double deadline = kvl_now_s() + STALL_S;

	for (unsigned i = 0; i < n; i++)
		st[i] = -1;
	while (done < n) {
		struct kvl_completion c[64];
		unsigned got;

		if (posted < n) {
			int r = kvl_post(rt, peer, x + posted, n - posted);

			if (r < 0) {
				fprintf(stderr, "bad_peer: kvl_post: %s\n", strerror(-r));
				return -1;
			}
			posted += (unsigned)r;
		}
		got = kvl_poll(rt, c, 64);
		for (unsigned i = 0; i < got; i++) {
			uint64_t k = c[i].cookie;

			if (k >= n || st[k] != -1) {
				fprintf(stderr,
					"bad_peer: completion for cookie %llu twice or "
					"unknown\n",
					(unsigned long long)k);
				return -1;
			}
			st[k] = c[i].status;
			bytes[k] = c[i].bytes;
			done++;
		}
		if (got)
			deadline = kvl_now_s() + STALL_S;
		else if (kvl_now_s() > deadline) {
			fprintf(stderr, "bad_peer: %u of %u completions, then nothing for %d s\n",
				done, n, STALL_S);
			return -1;
		}
	}
	return 0;
}

int main(int argc, char **argv)
{
	static struct kvl_xfer x[N_XFERS];
	static int st[N_XFERS];
	static uint32_t bytes[N_XFERS];
	struct kvl_seg_geom g = { 1, 1, 2 * N_XFERS, XFER_LEN };
	struct kvl_remote_seg rs[16];
	struct kvl_segment local;
	struct kvl_start_args sa;
	struct kvl_runtime *rt;
	kvl_peer_t peer;
	uint32_t kv = 0, bad = 0, big = 0;
	uint64_t big_len = 0;
	unsigned n_bad = 0, bad_access = 0, ok = 0, other = 0, wrong_bytes = 0;
	uint64_t written = 0, verified = 0, mismatched = 0;
	char err[4096];
	int dd = -1, stage, n;

	for (int i = 1; i < argc; i++)
		if (strcmp(argv[i], "--") == 0)
			dd = i;
	if (dd < 0 || argc - dd != 3) {
		fprintf(stderr, "usage: %s [EAL options] -- INI SERVER\n", argv[0]);
		return 2;
	}
	catch_term();
	sa = (struct kvl_start_args){ .eal_argc = dd, .eal_argv = argv, .config = argv[dd + 1] };
	rt = kvl_start(&sa, err, sizeof(err), &stage);
	if (rt == NULL) {
		fprintf(stderr, "bad_peer: %s\n", err);
		return 1;
	}
	if (kvl_seg_alloc(rt, "buf", &g, KVL_REMOTE_READ | KVL_REMOTE_WRITE, &local) != 0 ||
	    kvl_connect(rt, argv[dd + 2], 10000, &peer, err, sizeof(err)) != 0) {
		fprintf(stderr, "bad_peer: set-up: %s\n", err);
		kvl_stop(rt);
		return 1;
	}
	n = kvl_peer_segments(rt, peer, rs, 16);
	for (int i = 0; i < n; i++) {
		if (strcmp(rs[i].name, "kv") == 0)
			kv = rs[i].id;
		if (strcmp(rs[i].name, "bad") == 0)
			bad = rs[i].id;
		if (strcmp(rs[i].name, "big") == 0) {
			big = rs[i].id;
			big_len = rs[i].length; /* as advertised: twice the truth */
		}
	}
	if (kv == 0 || bad == 0 || big == 0 || big_len < 2 * N_XFERS * XFER_LEN) {
		fprintf(stderr, "bad_peer: the server offers no \"kv\", \"bad\" and \"big\" "
				"segments\n");
		kvl_stop(rt);
		return 1;
	}

	for (unsigned round = 0; round < ROUNDS; round++) {
		uint8_t *src = local.base, *back = (uint8_t *)local.base + N_XFERS * XFER_LEN;

		/* WRITE: local [i] -> kv [i]; every BAD_EVERY-th to "bad" instead */
		kvl_pattern_fill(src, N_XFERS * XFER_LEN, 1000 + round, 0);
		for (unsigned i = 0; i < N_XFERS; i++) {
			bool to_bad = i % BAD_EVERY == BAD_EVERY / 2;
			bool to_big = i % BAD_EVERY == BAD_EVERY / 4;

			x[i] = (struct kvl_xfer){ .cookie = i,
						  .local = src + (uint64_t)i * XFER_LEN,
						  .remote_off = (uint64_t)i * XFER_LEN,
						  .length = XFER_LEN,
						  .remote_seg = to_bad ? bad : kv,
						  .op = KVL_WRITE };
			if (to_big) { /* inside what was advertised, past what is registered */
				x[i].remote_seg = big;
				x[i].remote_off = big_len / 2 + (uint64_t)i * XFER_LEN;
			}
		}
		if (run(rt, peer, x, N_XFERS, st, bytes) != 0)
			goto fail;
		for (unsigned i = 0; i < N_XFERS; i++) {
			if (x[i].remote_seg == bad || x[i].remote_seg == big) {
				n_bad++;
				bad_access += st[i] == KVL_ERR_ACCESS;
				if (st[i] != KVL_ERR_ACCESS)
					fprintf(stderr, "bad_peer: write %u to a bad range: %s\n",
						i, kvl_status_name(st[i]));
				continue;
			}
			if (st[i] == 0 && bytes[i] == XFER_LEN) {
				ok++;
				written += XFER_LEN;
			} else {
				other++;
				fprintf(stderr, "bad_peer: write %u to \"kv\": %s, %u bytes\n", i,
					kvl_status_name(st[i]), bytes[i]);
			}
		}
		/* READ every written range back and compare */
		memset(back, 0, N_XFERS * XFER_LEN);
		for (unsigned i = 0; i < N_XFERS; i++)
			x[i] = (struct kvl_xfer){ .cookie = i,
						  .local = back + (uint64_t)i * XFER_LEN,
						  .remote_off = (uint64_t)i * XFER_LEN,
						  .length = XFER_LEN,
						  .remote_seg = kv,
						  .op = KVL_READ };
		if (run(rt, peer, x, N_XFERS, st, bytes) != 0)
			goto fail;
		for (unsigned i = 0; i < N_XFERS; i++) {
			if (st[i] != 0 || bytes[i] != XFER_LEN) {
				other++;
				fprintf(stderr, "bad_peer: read %u: %s\n", i,
					kvl_status_name(st[i]));
				continue;
			}
			if (i % BAD_EVERY == BAD_EVERY / 2 || i % BAD_EVERY == BAD_EVERY / 4)
				continue; /* never written this round */
			if (memcmp(back + (uint64_t)i * XFER_LEN, src + (uint64_t)i * XFER_LEN,
				   XFER_LEN) == 0)
				verified += XFER_LEN;
			else
				mismatched += XFER_LEN, wrong_bytes++;
		}
	}
	printf("{\"bad_writes\":%u,\"bad_access\":%u,\"ok_writes\":%u,\"other_failures\":%u,"
	       "\"written_bytes\":%llu,\"verified_bytes\":%llu,\"mismatched_ranges\":%u}\n",
	       n_bad, bad_access, ok, other, (unsigned long long)written,
	       (unsigned long long)verified, wrong_bytes);
	fflush(stdout);
	fprintf(stderr, "bad_peer: lingering\n");
	for (unsigned i = 0; i < LINGER_S * 50 && !stop; i++)
		usleep(20000);
	kvl_stop(rt);
	return n_bad == bad_access && other == 0 && mismatched == 0 && verified == written ? 0 : 1;
fail:
	kvl_stop(rt);
	return 1;
}
