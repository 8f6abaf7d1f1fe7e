/* SPDX-License-Identifier: BSD-3-Clause */
/* gpu suite: the local DMA transport moves blocks host <-> GPU, every byte checked (77: no GPU). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda_runtime_api.h>

#include "kvl_clock.h"
#include "gpu_test.h"
#include "xport.h"
#include "xport_cudma.h"

#define HOST_LEN (96u << 20)
#define GPU_LEN	 (96u << 20)
#define POISON	 0xee
#define SEG_RO	 1 /* remote tier: peers may READ it */
#define SEG_RW	 2 /* write-back area: READ and WRITE */

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static uint64_t next(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return rng;
}

struct job {
	struct kvl_wr wr;
	int want; /* status */
};

/* Post all, drive progress until every completion is back; check order, ids and status. */
static void run(const struct kvl_xport_ops *ops, void *c, const struct job *j, unsigned n)
{
	static struct kvl_wc wc[64];
	unsigned posted = 0, reaped = 0;
	double end = kvl_now_s() + 20;

	while (reaped < n) {
		while (posted < n) {
			int rc = kvl_xport_post1(ops, c, &j[posted].wr);

			if (rc == -EAGAIN)
				break;
			EXPECT(rc == 0, "post %u: %d", posted, rc);
			posted++;
		}
		ops->progress(c);
		if (ops->due != NULL && ops->outstanding(c) > 0) {
			/* in flight: a time to look again, never "nothing", never far off (a copy's
			 * end raises no event: an lcore naps until this) */
			uint64_t d = ops->due(c), t = kvl_now_ns();

			EXPECT(d != UINT64_MAX, "%u outstanding and nothing due",
			       ops->outstanding(c));
			EXPECT(d <= t + 1000000000ull, "due %.3f s ahead", (double)(d - t) * 1e-9);
		}
		for (unsigned k, m = ops->reap(c, wc, 64); m > 0; m = ops->reap(c, wc, 64))
			for (k = 0; k < m; k++, reaped++) {
				const struct job *e = &j[reaped];

				EXPECT(wc[k].wr_id == e->wr.wr_id,
				       "completion %u is wr %llu, want %llu", reaped,
				       (unsigned long long)wc[k].wr_id,
				       (unsigned long long)e->wr.wr_id);
				EXPECT(wc[k].status == e->want, "wr %llu: status %d, want %d",
				       (unsigned long long)wc[k].wr_id, wc[k].status, e->want);
				EXPECT(wc[k].bytes == (e->want == 0 ? e->wr.length : 0),
				       "wr %llu: %u bytes", (unsigned long long)wc[k].wr_id,
				       wc[k].bytes);
			}
		EXPECT(kvl_now_s() < end, "%u of %u completions after 20 s", reaped, n);
	}
	EXPECT(ops->outstanding(c) == 0, "%u outstanding after all reaped", ops->outstanding(c));
	EXPECT(ops->due == NULL || ops->due(c) == UINT64_MAX, "due with nothing in flight");
}

static void check_bytes(const uint8_t *got, const uint8_t *want, size_t len, const char *what)
{
	for (size_t i = 0; i < len; i++)
		if (got[i] != want[i]) {
			printf("FAIL: %s: byte %zu is %02x, want %02x\n", what, i, got[i], want[i]);
			exit(1);
		}
}

static const char *mode_name[] = { "gather kernel", "cudaMemcpyBatchAsync", "one copy each",
				   "auto" };

/* AUTO: the estimates one_mode gives the transport (compute per step ns, bytes per step). */
static uint64_t auto_compute_ns, auto_step_bytes;

/* Options the transport cannot honour: refused at creation with a message naming them. */
static void bad_options(void)
{
	static const struct {
		struct kvl_cudma_opts o;
		const char *says;
	} bad[] = {
		{ { .small = (enum kvl_cudma_small)7 }, "unknown small-copy method 7" },
		{ { .small = (enum kvl_cudma_small)4 }, "unknown small-copy method 4" },
		{ { .gather_depth = 5 }, "gather_depth 5 is not 4, 8 or 16" },
		{ { .ce_share = 101 }, "ce_share 101 is over 100 percent" },
		{ { .depth = 1000 }, "depth 1000 is not a power of two" },
	};
	char err[256];

	for (unsigned i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct kvl_cudma_conn *c = kvl_cudma_new(&bad[i].o, err, sizeof(err));

		EXPECT(c == NULL && strstr(err, bad[i].says) != NULL, "option %u: got %s", i,
		       c ? "a transport" : err);
	}
	printf("  %u bad option sets refused, each named\n",
	       (unsigned)(sizeof(bad) / sizeof(bad[0])));
}

static void one_mode(enum kvl_cudma_small mode, unsigned depth, unsigned ce_share, uint64_t ce_min,
		     unsigned batch_max, uint8_t *host, uint8_t *back, uint8_t *gpu, uint8_t *check,
		     uint8_t *expect)
{
	struct kvl_cudma_opts o = { .device = 0,
				    .depth = 256,
				    .small = mode,
				    .gather_ctas = 0,
				    .gather_depth = depth,
				    .ce_share = ce_share,
				    .ce_min = ce_min,
				    .batch_max = batch_max };
	char err[256];
	struct kvl_cudma_conn *c = kvl_cudma_new(&o, err, sizeof(err));
	const struct kvl_xport_ops *ops = &kvl_xport_cudma;
	unsigned max_jobs = 4096, n = 0;
	struct job *j = calloc(max_jobs, sizeof(*j));
	uint64_t dst = 0, moved = 0;
	const uint32_t *perm;
	const struct kvl_cudma_stats *st;
	double t0, t1;

	EXPECT(c != NULL && j != NULL, "%s", err);
	if (mode == KVL_CUDMA_AUTO)
		kvl_cudma_set_estimates(c, auto_compute_ns, auto_step_bytes);
	EXPECT(kvl_cudma_add_remote(c, SEG_RO, host, HOST_LEN, KVL_SEG_REMOTE_READ, err,
				    sizeof(err)) == 0,
	       "%s", err);
	EXPECT(kvl_cudma_add_remote(c, SEG_RW, back, HOST_LEN,
				    KVL_SEG_REMOTE_READ | KVL_SEG_REMOTE_WRITE, err,
				    sizeof(err)) == 0,
	       "%s", err);
	/* Half the GPU buffer is registered: the other half must stay untouched. */
	EXPECT(kvl_cudma_add_local(c, gpu, GPU_LEN / 2, err, sizeof(err)) == 0, "%s", err);
	EXPECT(kvl_cudma_add_local(c, host, 4096, err, sizeof(err)) == -EINVAL, "host as local");
	printf("  add_local(host memory) refused: %s\n", err);

	CK(cudaMemset(gpu, POISON, GPU_LEN));
	CK(cudaDeviceSynchronize());
	memset(expect, POISON, GPU_LEN);

	/* Scattered reads: 16 KiB and 64 KiB blocks from random places of the remote tier into
	 * consecutive GPU slots (not mergeable), odd sizes and offsets (the byte path), and
	 * runs contiguous on both sides (merged). */
	while (dst < GPU_LEN / 2 - (4u << 20) && n < max_jobs - 8) {
		uint64_t r = next();
		uint32_t len;
		uint64_t src;
		unsigned kind = r % 8;

		if (kind < 3)
			len = 16384;
		else if (kind < 6)
			len = 65536;
		else if (kind == 6)
			len = 1 + (uint32_t)(next() % 70000); /* odd */
		else
			len = 2u << 20; /* over copy_min: goes alone to the copy engine */
		src = next() % (HOST_LEN - len);
		if (kind != 6)
			src &= ~(uint64_t)15;
		if (kind == 5 && n > 0 && j[n - 1].wr.length == 65536 &&
		    j[n - 1].wr.remote_off + 65536 + 65536 <= HOST_LEN) {
			/* continue the previous block on both sides: merged */
			src = j[n - 1].wr.remote_off + 65536;
		}
		j[n] = (struct job){ .wr = { .wr_id = 1000 + n,
					     .local = gpu + dst,
					     .remote_off = src,
					     .length = len,
					     .remote_seg = SEG_RO,
					     .op = KVL_OP_READ },
				     .want = KVL_OK };
		memcpy(expect + dst, host + src, len);
		moved += len;
		dst += len;
		n++;
	}
	/* Refused ones, each moving nothing. */
	j[n++] = (struct job){ .wr = { 1, gpu + dst, 0, 4096, 99, KVL_OP_READ },
			       .want = KVL_ERR_NO_SEGMENT };
	j[n++] = (struct job){ .wr = { 2, gpu + dst, HOST_LEN - 100, 4096, SEG_RO, KVL_OP_READ },
			       .want = KVL_ERR_BOUNDS };
	j[n++] = (struct job){ .wr = { 3, gpu + GPU_LEN / 2, 0, 4096, SEG_RO, KVL_OP_READ },
			       .want = KVL_ERR_LOCAL };
	j[n++] = (struct job){ .wr = { 4, gpu, 0, 4096, SEG_RO, KVL_OP_WRITE },
			       .want = KVL_ERR_ACCESS };
	j[n++] = (struct job){ .wr = { 5, gpu + dst, 0, 0, SEG_RO, KVL_OP_READ }, .want = KVL_OK };

	t0 = kvl_now_s();
	run(ops, c, j, n);
	t1 = kvl_now_s();
	CK(cudaMemcpy(check, gpu, GPU_LEN, cudaMemcpyDeviceToHost));
	check_bytes(check, expect, GPU_LEN, "GPU after the reads");
	st = kvl_cudma_stats(c);
	EXPECT(st->merged > 0, "no request was merged");
	EXPECT(st->engine_copies > 0, "no copy went alone to the copy engine");
	EXPECT(mode == KVL_CUDMA_EACH || st->small_copies > 0, "nothing was gathered");
	EXPECT(st->refused == 4, "refused %llu", (unsigned long long)st->refused);
	EXPECT(batch_max == 0 || st->launches * batch_max >= st->small_copies,
	       "batch_max %u but %llu small copies in %llu calls", batch_max,
	       (unsigned long long)st->small_copies, (unsigned long long)st->launches);
	/* the copy engine beside the gather kernel: a share, or the 64 KiB blocks (ce_min);
	 * AUTO's batches that go to the kernel take its defaults (which share): the method AUTO
	 * chose is checked below, by its own counters */
	bool beside = mode == KVL_CUDMA_GATHER && (ce_share > 0 || ce_min <= 65536);

	EXPECT(mode == KVL_CUDMA_AUTO || beside == (st->ce_shared > 0),
	       "ce_share %u, ce_min %llu but %llu copies shared", ce_share,
	       (unsigned long long)ce_min, (unsigned long long)st->ce_shared);
	EXPECT(mode != KVL_CUDMA_GATHER || st->ce_shared < st->small_copies,
	       "nothing left to the gather kernel (%llu of %llu small copies on the engine)",
	       (unsigned long long)st->ce_shared, (unsigned long long)st->small_copies);
	printf("  %s (depth %u, ce_share %u%%, ce_min %llu, batch_max %u): %u requests, %.1f MiB "
	       "host->GPU in "
	       "%.2f ms (%.1f "
	       "GB/s, first use), %llu "
	       "merged, %llu engine copies, %llu small in %llu launches; every byte of %u MiB "
	       "checked\n",
	       mode_name[mode], depth, ce_share, (unsigned long long)ce_min, batch_max, n,
	       moved / 1048576.0, (t1 - t0) * 1e3, moved / (t1 - t0) / 1e9,
	       (unsigned long long)st->merged, (unsigned long long)st->engine_copies,
	       (unsigned long long)st->small_copies, (unsigned long long)st->launches,
	       GPU_LEN >> 20);

	/* Write back: GPU blocks into the read-write remote segment, scattered. */
	memset(back, 0x5a, HOST_LEN);
	memset(expect, 0x5a, HOST_LEN);
	n = 0;
	{
		/* distinct destinations: copies of one batch run concurrently */
		static uint32_t slot[HOST_LEN / 65536];

		for (uint32_t i = 0; i < HOST_LEN / 65536; i++)
			slot[i] = i;
		for (uint32_t i = HOST_LEN / 65536 - 1; i > 0; i--) {
			uint32_t k = next() % (i + 1), t = slot[i];

			slot[i] = slot[k];
			slot[k] = t;
		}
		perm = slot;
	}
	for (uint64_t off = 0; off + 65536 <= GPU_LEN / 2 && n < 600; off += 65536) {
		uint64_t to = (uint64_t)perm[n] * 65536;
		uint32_t len = (n % 5 == 0) ? 16384 + 7 : 65536;

		j[n] = (struct job){ .wr = { 5000 + n, gpu + off, to, len, SEG_RW, KVL_OP_WRITE },
				     .want = KVL_OK };
		n++;
	}
	CK(cudaMemcpy(check, gpu, GPU_LEN / 2, cudaMemcpyDeviceToHost));
	for (unsigned i = 0; i < n; i++)
		memcpy(expect + j[i].wr.remote_off, check + ((uint8_t *)j[i].wr.local - gpu),
		       j[i].wr.length);
	run(ops, c, j, n);
	check_bytes(back, expect, HOST_LEN, "remote tier after the writes");
	printf("  %s: %u GPU->host writes (64 KiB and 16 KiB + 7), every byte of %u MiB checked\n",
	       mode_name[mode], n, HOST_LEN >> 20);

	if (mode == KVL_CUDMA_AUTO) {
		const struct kvl_cudma_stats *a = kvl_cudma_stats(c);
		/* 1 ms of compute for 1 MiB: hidden either way, the engine slows it less; 1 us
		 * for 1 GiB: transfer-bound, the kernel's rate wins */
		bool want_engine = auto_compute_ns * 1000 > auto_step_bytes;

		EXPECT(want_engine ? a->auto_engine > 0 && a->auto_gather == 0
				   : a->auto_gather > 0 && a->auto_engine == 0,
		       "auto with %llu ns for %llu bytes: %llu batches on the engine, %llu on the "
		       "kernel",
		       (unsigned long long)auto_compute_ns, (unsigned long long)auto_step_bytes,
		       (unsigned long long)a->auto_engine, (unsigned long long)a->auto_gather);
		printf("  auto (%llu ns compute for %llu bytes a step): %llu batches on the copy "
		       "engine, %llu on the gather kernel\n",
		       (unsigned long long)auto_compute_ns, (unsigned long long)auto_step_bytes,
		       (unsigned long long)a->auto_engine, (unsigned long long)a->auto_gather);
	}

	/* A full queue says so; fail_all fails what is left and refuses more. */
	{
		struct kvl_wr w = { .wr_id = 1,
				    .local = gpu,
				    .remote_off = 0,
				    .length = 4096,
				    .remote_seg = SEG_RO,
				    .op = KVL_OP_READ };
		struct kvl_wc wc[256];
		unsigned k = 0, got;

		while (kvl_xport_post1(ops, c, &w) == 0)
			k++;
		EXPECT(k == 256 && kvl_xport_post1(ops, c, &w) == -EAGAIN, "depth: %u taken", k);
		ops->fail_all(c, KVL_ERR_CANCELED);
		got = ops->reap(c, wc, 256);
		EXPECT(got == 256, "fail_all completed %u of 256", got);
		for (unsigned i = 0; i < got; i++)
			EXPECT(wc[i].status == KVL_ERR_CANCELED, "status %d", wc[i].status);
		EXPECT(kvl_xport_post1(ops, c, &w) == -EPIPE && ops->broken(c),
		       "post after fail_all");
	}
	ops->free(c);
	free(j);
}

int main(void)
{
	uint8_t *host, *back, *gpu, *check, *expect;

	if (gpu_test_devices() == 0)
		return GPU_TEST_SKIP;
	CK(cudaHostAlloc((void **)&host, HOST_LEN, cudaHostAllocMapped));
	CK(cudaHostAlloc((void **)&back, HOST_LEN, cudaHostAllocMapped));
	CK(cudaMalloc((void **)&gpu, GPU_LEN));
	check = malloc(GPU_LEN);
	expect = malloc(HOST_LEN > GPU_LEN ? HOST_LEN : GPU_LEN);
	EXPECT(check && expect, "out of memory");
	for (size_t i = 0; i < HOST_LEN; i += 8) {
		uint64_t v = next();

		memcpy(host + i, &v, 8);
	}
	/* the gather kernel alone at each depth it is built for, beside the copy engine (a share
	 * of the bytes; the default: blocks of 32 KiB and more), then the copy engine alone */
	bad_options();
	one_mode(KVL_CUDMA_GATHER, 4, 0, UINT64_MAX, 0, host, back, gpu, check, expect);
	one_mode(KVL_CUDMA_GATHER, 8, 0, UINT64_MAX, 0, host, back, gpu, check, expect);
	one_mode(KVL_CUDMA_GATHER, 16, 0, UINT64_MAX, 0, host, back, gpu, check, expect);
	one_mode(KVL_CUDMA_GATHER, 16, 40, UINT64_MAX, 0, host, back, gpu, check, expect);
	one_mode(KVL_CUDMA_GATHER, 0, 0, 0, 0, host, back, gpu, check, expect);
	one_mode(KVL_CUDMA_BATCH, 0, 0, 0, 0, host, back, gpu, check, expect); /* 64 a call */
	one_mode(KVL_CUDMA_BATCH, 0, 0, 0, 7, host, back, gpu, check, expect); /* several calls */
	one_mode(KVL_CUDMA_EACH, 0, 0, 0, 0, host, back, gpu, check, expect);
	/* auto: the copy engine where the step's transfer hides under its compute, the kernel
	 * where the step is transfer-bound; every byte checked either way */
	auto_compute_ns = 1000000;
	auto_step_bytes = 1 << 20;
	one_mode(KVL_CUDMA_AUTO, 0, 0, 0, 0, host, back, gpu, check, expect);
	auto_compute_ns = 1000;
	auto_step_bytes = 1 << 30;
	one_mode(KVL_CUDMA_AUTO, 0, 0, 0, 0, host, back, gpu, check, expect);
	cudaFree(gpu);
	cudaFreeHost(host);
	cudaFreeHost(back);
	free(check);
	free(expect);
	printf("PASS: cudma\n");
	return 0;
}
