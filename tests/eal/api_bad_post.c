/* SPDX-License-Identifier: BSD-3-Clause */
/* eal test: kvl_post() refuses bad transfers before it takes any, and a good one still runs. */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvl_clock.h"
#include "kvlane/kvlane.h"

/*
 * api_bad_post [EAL options] -- INI SERVER [SEED]
 * Connects to the kvlaned at SERVER (a tcp peer, config/default.ini: segment "kv", filled with
 * the pattern of SEED), then posts what a careless or hostile caller would, each of which must
 * be refused with its errno and nothing posted: a local range in no segment (heap memory), one
 * that runs past the end of a local segment, n_iov = 1, n_iov over KVL_MAX_IOV, a scatter list
 * and a notice to a tcp peer, a bad op, unknown flags, a notice on a READ, and a batch of
 * three whose last is bad (the first two must not be taken either). A READ past the remote
 * segment's end is taken and completes KVL_ERR_BOUNDS. Then a good READ of 128 KiB completes
 * OK with every byte equal to the pattern. Prints one line per check and a JSON summary;
 * exit 0 when all held.
 */
#define LOCAL_LEN (256u << 10)
#define READ_LEN  (128u << 10)
#define WAIT_S	  20.0

static unsigned fails;

static void expect(const char *what, int got, int want)
{
	bool ok = got == want;

	printf("%s %s: %d (%s), expected %d (%s)\n", ok ? "ok" : "FAIL", what, got,
	       got < 0 ? strerror(-got) : "taken", want, want < 0 ? strerror(-want) : "taken");
	fails += !ok;
}

/* Wait for @n completions (or WAIT_S); what came is in @c. */
static unsigned wait_done(struct kvl_runtime *rt, struct kvl_completion *c, unsigned n, double secs)
{
	double end = kvl_now_s() + secs;
	unsigned got = 0;

	while (got < n && kvl_now_s() < end)
		got += kvl_poll(rt, c + got, n - got);
	return got;
}

int main(int argc, char **argv)
{
	struct kvl_remote_seg rs[16], *kv = NULL;
	struct kvl_seg_geom lg = { 1, 1, LOCAL_LEN / 4096, 4096 };
	const char *sets[] = { "control.listen=127.0.0.1:0", "runtime.name=bad-post" };
	struct kvl_start_args sa;
	struct kvl_segment dst;
	struct kvl_completion c[4];
	struct kvl_runtime *rt;
	char err[512];
	kvl_peer_t peer;
	unsigned seed = 1;
	int sep = 1, stage = 0, n;
	uint8_t *heap;

	while (sep < argc && strcmp(argv[sep], "--") != 0)
		sep++;
	if (sep + 2 >= argc) {
		fprintf(stderr, "usage: %s [EAL options] -- INI SERVER [SEED]\n", argv[0]);
		return 2;
	}
	if (sep + 3 < argc)
		seed = (unsigned)strtoul(argv[sep + 3], NULL, 0);
	sa = (struct kvl_start_args){ .eal_argc = sep,
				      .eal_argv = argv,
				      .config = argv[sep + 1],
				      .sets = sets,
				      .n_sets = 2 };
	rt = kvl_start(&sa, err, sizeof(err), &stage);
	if (rt == NULL) {
		fprintf(stderr, "api_bad_post: cannot start (stage %d): %s\n", stage, err);
		return 3;
	}
	if (kvl_connect(rt, argv[sep + 2], 10000, &peer, err, sizeof(err)) != 0) {
		fprintf(stderr, "api_bad_post: cannot connect to %s: %s\n", argv[sep + 2], err);
		kvl_stop(rt);
		return 4;
	}
	n = kvl_peer_segments(rt, peer, rs, 16);
	for (int i = 0; i < n; i++)
		if (strcmp(rs[i].name, "kv") == 0)
			kv = &rs[i];
	{
		/* Geometry whose size wraps past 2^64 (each field fits 32 bits): refused before
		 * anything is allocated or registered, never a tiny segment announced as huge. */
		struct kvl_seg_geom wrap = { 1u << 20, 2, 1u << 22, 1u << 22 },
				    big = { 1, 2, 1 << 20, 1 << 20 };
		struct kvl_segment none;
		static uint8_t some[4096];

		expect("kvl_seg_alloc, 2^20 x 2 x 2^22 x 2^22 bytes (past 2^64)",
		       kvl_seg_alloc(rt, "wrap", &wrap, 0, &none), -EOVERFLOW);
		expect("kvl_seg_register of that geometry",
		       kvl_seg_register(rt, "wrap", some, &wrap, 0, &none), -EOVERFLOW);
		expect("kvl_seg_alloc of 2 TiB", kvl_seg_alloc(rt, "big", &big, 0, &none), -E2BIG);
	}
	heap = malloc(LOCAL_LEN);
	if (kv == NULL || heap == NULL || kvl_seg_alloc(rt, "dst", &lg, 0, &dst) != 0) {
		fprintf(stderr,
			"api_bad_post: no segment \"kv\" on the peer, or no local memory\n");
		kvl_stop(rt);
		return 5;
	}

	{
		struct kvl_xfer good = { .cookie = 1,
					 .local = dst.base,
					 .remote_off = 0,
					 .length = READ_LEN,
					 .remote_seg = kv->id,
					 .op = KVL_READ };
		struct kvl_iov iov[KVL_MAX_IOV + 1];
		struct kvl_xfer x, batch[3];

		for (unsigned k = 0; k <= KVL_MAX_IOV; k++)
			iov[k] = (struct kvl_iov){ (uint8_t *)dst.base + k * 4096, 4096, 0 };
		x = good;
		x.local = heap;
		expect("a local range in no segment (heap memory)", kvl_post(rt, peer, &x, 1),
		       -EFAULT);
		x = good;
		x.local = (uint8_t *)dst.base + LOCAL_LEN - 4096;
		expect("a local range running 124 KiB past its segment's end",
		       kvl_post(rt, peer, &x, 1), -EFAULT);
		x = good;
		x.n_iov = 1;
		x.iov = iov;
		x.length = 4096;
		expect("n_iov = 1", kvl_post(rt, peer, &x, 1), -EINVAL);
		x.n_iov = KVL_MAX_IOV + 1;
		x.length = 4096 * (KVL_MAX_IOV + 1);
		expect("n_iov over KVL_MAX_IOV", kvl_post(rt, peer, &x, 1), -EINVAL);
		x.n_iov = 2;
		x.length = 8192;
		expect("a scatter list to a tcp peer", kvl_post(rt, peer, &x, 1), -EOPNOTSUPP);
		x = good;
		x.op = 3;
		expect("op 3", kvl_post(rt, peer, &x, 1), -EINVAL);
		x = good;
		x.flags = 1u << 7;
		expect("unknown flags", kvl_post(rt, peer, &x, 1), -EINVAL);
		x = good;
		x.flags = KVL_XFER_NOTIFY;
		expect("KVL_XFER_NOTIFY on a READ", kvl_post(rt, peer, &x, 1), -EINVAL);
		x.op = KVL_WRITE;
		expect("KVL_XFER_NOTIFY to a tcp peer", kvl_post(rt, peer, &x, 1), -EOPNOTSUPP);
		batch[0] = good;
		batch[1] = good;
		batch[1].cookie = 2;
		batch[2] = good;
		batch[2].local = heap;
		expect("a batch of three, the last in no segment", kvl_post(rt, peer, batch, 3),
		       -EFAULT);
		n = (int)wait_done(rt, c, 1, 1.0);
		expect("completions of everything refused (1 s)", n, 0);

		x = good;
		x.cookie = 7;
		x.remote_off = kv->length - 4096;
		expect("a READ running past the remote segment's end", kvl_post(rt, peer, &x, 1),
		       1);
		n = (int)wait_done(rt, c, 1, WAIT_S);
		expect("its completions", n, 1);
		if (n == 1) {
			expect("its cookie", (int)c[0].cookie, 7);
			expect("its status (KVL_ERR_BOUNDS)", c[0].status, KVL_ERR_BOUNDS);
		}

		memset(dst.base, 0xa5, LOCAL_LEN);
		expect("the good READ", kvl_post(rt, peer, &good, 1), 1);
		n = (int)wait_done(rt, c, 1, WAIT_S);
		expect("its completions", n, 1);
		if (n == 1) {
			uint64_t first = kvl_pattern_check(dst.base, READ_LEN, seed, 0);

			expect("its status", c[0].status, KVL_OK);
			expect("its bytes", (int)c[0].bytes, (int)READ_LEN);
			printf("%s every byte equal to the pattern of seed %u: first difference at "
			       "%llu of %u\n",
			       first == READ_LEN ? "ok" : "FAIL", seed, (unsigned long long)first,
			       READ_LEN);
			fails += first != READ_LEN;
			expect("the byte after it, untouched",
			       ((uint8_t *)dst.base)[READ_LEN] == 0xa5 ? 0 : -1, 0);
		}
	}
	printf("{\"checks_failed\": %u, \"read_bytes\": %u}\n", fails, READ_LEN);
	free(heap);
	kvl_stop(rt);
	return fails ? 1 : 0;
}
