/* SPDX-License-Identifier: BSD-3-Clause */
/* gpu suite: READY/DONE step flags round trip through a real CUDA stream (exit 77: no GPU). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda_runtime_api.h>

#include "gpu_test.h"
#include "gpusig.h"

#define BUF (1u << 20)

static double now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static void sleep_ms(int ms)
{
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };

	nanosleep(&ts, NULL);
}

/* Poll like the lcore does: plain loads until DONE or the deadline. */
static int wait_done(struct kvl_gpusig *s, unsigned step, uint32_t epoch, int ms)
{
	double end = now_us() + ms * 1000.0;

	while (now_us() < end)
		if (kvl_gpusig_is_done(s, step, epoch))
			return 1;
	return 0;
}

/* First byte of each of @n device buffers, read on another stream (the waiting one is
 * blocked: a read behind it would never return). */
static void peek(uint8_t **dbuf, unsigned n, uint8_t *out, cudaStream_t side)
{
	for (unsigned i = 0; i < n; i++)
		CK(cudaMemcpyAsync(&out[i], dbuf[i], 1, cudaMemcpyDeviceToHost, side));
	CK(cudaStreamSynchronize(side));
}

struct cb_log {
	unsigned calls, step;
	uint32_t epoch;
};

static void on_ready(void *arg, unsigned step, uint32_t epoch)
{
	struct cb_log *l = arg;

	l->calls++;
	l->step = step;
	l->epoch = epoch;
}

static int cmp_d(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

int main(void)
{
	char err[256];
	struct kvl_gpusig *s;
	cudaStream_t st, side;
	uint8_t *dbuf[3], seen[3];

	if (gpu_test_devices() == 0)
		return GPU_TEST_SKIP;
	s = kvl_gpusig_new(3, err, sizeof(err));
	EXPECT(s != NULL, "%s", err);
	CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
	CK(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking));
	for (unsigned i = 0; i < 3; i++) {
		CK(cudaMalloc((void **)&dbuf[i], BUF));
		CK(cudaMemset(dbuf[i], 0, BUF));
	}
	CK(cudaDeviceSynchronize());

	/* 1. The engine enqueues two steps up front, each behind its READY; nothing runs. */
	EXPECT(kvl_gpusig_enqueue_wait(s, 0, 1, st) == 0, "wait 0");
	CK(cudaMemsetAsync(dbuf[0], 0xa1, BUF, st));
	EXPECT(kvl_gpusig_enqueue_done(s, 0, 1, st) == 0, "done 0");
	EXPECT(kvl_gpusig_enqueue_wait(s, 1, 1, st) == 0, "wait 1");
	CK(cudaMemsetAsync(dbuf[1], 0xb2, BUF, st));
	EXPECT(kvl_gpusig_enqueue_done(s, 1, 1, st) == 0, "done 1");
	sleep_ms(50);
	peek(dbuf, 2, seen, side);
	EXPECT(seen[0] == 0 && seen[1] == 0, "work ran before READY: %02x %02x", seen[0], seen[1]);
	EXPECT(cudaStreamQuery(st) == cudaErrorNotReady, "stream idle although it must wait");
	EXPECT(!kvl_gpusig_is_done(s, 0, 1) && !kvl_gpusig_is_done(s, 1, 1), "DONE early");

	/* 2. READY for step 1 alone: the stream is in order, step 1 still waits behind 0. */
	kvl_gpusig_set_ready(s, 1, 1);
	sleep_ms(50);
	peek(dbuf, 2, seen, side);
	EXPECT(seen[0] == 0 && seen[1] == 0, "step 1 overtook step 0: %02x %02x", seen[0], seen[1]);
	EXPECT(kvl_gpusig_done_word(s, 1) == 0, "DONE[1] = %u", kvl_gpusig_done_word(s, 1));

	/* 3. READY for step 0: both run, and DONE comes back for each. */
	kvl_gpusig_set_ready(s, 0, 1);
	EXPECT(wait_done(s, 0, 1, 2000) && wait_done(s, 1, 1, 2000), "DONE never came: %u %u",
	       kvl_gpusig_done_word(s, 0), kvl_gpusig_done_word(s, 1));
	peek(dbuf, 2, seen, side);
	EXPECT(seen[0] == 0xa1 && seen[1] == 0xb2, "work did not run: %02x %02x", seen[0], seen[1]);
	CK(cudaStreamSynchronize(st));
	printf("ok: two steps enqueued behind READY ran only once READY was set, in stream "
	       "order, and wrote DONE\n");

	/* 4. A new epoch waits again: flags are never reset, the epoch moves on. */
	EXPECT(kvl_gpusig_enqueue_wait(s, 0, 2, st) == 0, "wait 0/2");
	CK(cudaMemsetAsync(dbuf[0], 0xc3, BUF, st));
	EXPECT(kvl_gpusig_enqueue_done(s, 0, 2, st) == 0, "done 0/2");
	sleep_ms(30);
	peek(dbuf, 1, seen, side);
	EXPECT(seen[0] == 0xa1 && !kvl_gpusig_is_done(s, 0, 2), "epoch 2 ran on epoch 1's READY");
	kvl_gpusig_set_ready(s, 0, 2);
	EXPECT(wait_done(s, 0, 2, 2000), "epoch 2 DONE never came");
	peek(dbuf, 1, seen, side);
	EXPECT(seen[0] == 0xc3, "epoch 2 work: %02x", seen[0]);
	printf("ok: the next epoch of a step waited for its own READY\n");

	/* 5. Wrap-around: the comparison is cyclic, as the GPU's GEQ is. */
	kvl_gpusig_set_ready(s, 2, 0xfffffff0u);
	EXPECT(kvl_gpusig_enqueue_wait(s, 2, 0xfffffffau, st) == 0, "wait wrap");
	EXPECT(kvl_gpusig_enqueue_done(s, 2, 0xfffffffau, st) == 0, "done wrap");
	sleep_ms(30);
	EXPECT(kvl_gpusig_done_word(s, 2) == 0, "ran on a READY below the epoch");
	kvl_gpusig_set_ready(s, 2, 3); /* past 2^32: cyclically after 0xfffffffa */
	EXPECT(wait_done(s, 2, 0xfffffffau, 2000), "wrapped READY not seen: DONE %x",
	       kvl_gpusig_done_word(s, 2));
	printf("ok: READY 3 satisfies a wait for 0xfffffffa (cyclic, like "
	       "CU_STREAM_WAIT_VALUE_GEQ)\n");

	/* 6. Host-callback variant: the lcore calls the engine on READY, DONE by host function. */
	{
		struct cb_log log = { 0 };

		kvl_gpusig_on_ready(s, on_ready, &log);
		kvl_gpusig_set_ready(s, 1, 2);
		EXPECT(log.calls == 1 && log.step == 1 && log.epoch == 2, "callback %u %u %u",
		       log.calls, log.step, log.epoch);
		CK(cudaMemsetAsync(dbuf[1], 0xd4, BUF, st));
		EXPECT(kvl_gpusig_enqueue_done_hostfn(s, 1, 2, st) == 0, "hostfn");
		EXPECT(wait_done(s, 1, 2, 2000), "host-function DONE never came");
		peek(dbuf + 1, 1, seen, side);
		EXPECT(seen[0] == 0xd4, "work before the host-function DONE: %02x", seen[0]);
		kvl_gpusig_on_ready(s, NULL, NULL);
		printf("ok: host-callback variant: on_ready called once, DONE by "
		       "cudaLaunchHostFunc\n");
	}

	/* 7. Round trip READY -> stream -> DONE, no work between: what a step pays for it. */
	{
		enum { N = 200 };
		double rt[N];

		CK(cudaStreamSynchronize(st));
		for (unsigned i = 0; i < N; i++) {
			uint32_t e = 100 + i;
			double t0;

			EXPECT(kvl_gpusig_enqueue_wait(s, 0, e, st) == 0, "wait");
			EXPECT(kvl_gpusig_enqueue_done(s, 0, e, st) == 0, "done");
			sleep_ms(0);
			t0 = now_us();
			kvl_gpusig_set_ready(s, 0, e);
			EXPECT(wait_done(s, 0, e, 2000), "round trip %u lost", i);
			rt[i] = now_us() - t0;
		}
		qsort(rt, N, sizeof(rt[0]), cmp_d);
		printf("round trip READY->DONE through the stream: p50 %.1f us, p99 %.1f us "
		       "(%d trips)\n",
		       rt[N / 2], rt[N * 99 / 100], N);
	}
	/* 8. The same by device address on words of another mapped allocation (what
	 * kvl_req_step_flags gives): no DONE before READY, DONE = epoch after it, 0 refused. */
	{
		volatile uint32_t *w;
		void *dw;
		char err[256];

		CK(cudaStreamSynchronize(st));
		CK(cudaHostAlloc((void **)&w, 128, cudaHostAllocMapped));
		CK(cudaHostGetDevicePointer(&dw, (void *)w, 0));
		w[0] = 6, w[16] = 6; /* READY (offset 0) and DONE (offset 64): the epoch before 7 */
		EXPECT(kvl_gpusig_wait_addr(0, 7, st, err, sizeof(err)) == -EINVAL, "%s", err);
		EXPECT(kvl_gpusig_wait_addr((uint64_t)(uintptr_t)dw, 7, st, err, sizeof(err)) == 0,
		       "%s", err);
		EXPECT(kvl_gpusig_done_addr((uint64_t)(uintptr_t)dw + 64, 7, st, err,
					    sizeof(err)) == 0,
		       "%s", err);
		sleep_ms(50);
		EXPECT(__atomic_load_n(&w[16], __ATOMIC_ACQUIRE) == 6, "DONE %u before READY",
		       w[16]);
		__atomic_store_n(&w[0], 7, __ATOMIC_RELEASE);
		CK(cudaStreamSynchronize(st));
		EXPECT(__atomic_load_n(&w[16], __ATOMIC_ACQUIRE) == 7, "DONE %u after READY",
		       w[16]);
		CK(cudaFreeHost((void *)w));
		printf("ok: wait/done by device address: nothing before READY, DONE after\n");
	}
	/* 9. Lanes (kvl_gpusig_lanes): the stream's work waits for READY on the wait lane, DONE
	 * waits for the stream's work on the done lane; the stream itself holds only events. On
	 * a stream of its own and on the legacy default stream 0. */
	for (int which = 0; which < 2; which++) {
		cudaStream_t es = which == 0 ? st : (cudaStream_t)0;
		struct kvl_gpusig_lanes *l = kvl_gpusig_lanes_new(es, err, sizeof(err));
		struct kvl_gpusig_lanes_stats ls;
		volatile uint32_t *w;
		void *dw;
		uint64_t ra, da, zero = 0, many[300];
		uint32_t ep = 9, eps[300];
		uint8_t got[1];

		EXPECT(l != NULL, "kvl_gpusig_lanes_new: %s", err);
		CK(cudaStreamSynchronize(st));
		CK(cudaHostAlloc((void **)&w, 256, cudaHostAllocMapped));
		CK(cudaHostGetDevicePointer(&dw, (void *)w, 0));
		w[0] = 8, w[16] = 8, w[32] = 0; /* READY, DONE (the epoch before 9), a gate */
		ra = (uint64_t)(uintptr_t)dw;
		da = ra + 64;
		CK(cudaMemset(dbuf[2], 0, BUF));
		/* bad input first: nothing enqueued */
		EXPECT(kvl_gpusig_lanes_wait(l, &zero, &ep, 1, err, sizeof(err)) == -EINVAL &&
			       strstr(err, "no device address"),
		       "address 0: %s", err);
		for (unsigned i = 0; i < 300; i++)
			many[i] = ra, eps[i] = ep;
		EXPECT(kvl_gpusig_lanes_done(l, many, eps, 300, err, sizeof(err)) == -EINVAL &&
			       strstr(err, "at most 256"),
		       "300 words: %s", err);
		EXPECT(kvl_gpusig_lanes_wait(l, &ra, &ep, 1, err, sizeof(err)) == 0, "wait: %s",
		       err);
		CK(cudaMemsetAsync(dbuf[2], 0xe7, BUF, es));
		/* the stream's work after READY: held by a gate word it waits on directly, so
		 * DONE must also wait for it */
		EXPECT(kvl_gpusig_wait_addr(ra + 128, 1, es, err, sizeof(err)) == 0, "gate: %s",
		       err);
		EXPECT(kvl_gpusig_lanes_done(l, &da, &ep, 1, err, sizeof(err)) == 0, "done: %s",
		       err);
		sleep_ms(50);
		peek(dbuf + 2, 1, got, side);
		EXPECT(got[0] == 0 && w[16] == 8, "before READY: work %02x, DONE %u", got[0],
		       w[16]);
		__atomic_store_n(&w[0], 9, __ATOMIC_RELEASE); /* READY */
		sleep_ms(50);
		peek(dbuf + 2, 1, got, side);
		EXPECT(got[0] == 0xe7 && w[16] == 8,
		       "after READY, before the work's end: work %02x, DONE %u", got[0], w[16]);
		__atomic_store_n(&w[32], 1, __ATOMIC_RELEASE); /* the work ends */
		double t0 = now_us();

		while (__atomic_load_n(&w[16], __ATOMIC_ACQUIRE) != 9 && now_us() - t0 < 2e6)
			;
		EXPECT(w[16] == 9, "DONE %u after the work, want 9", w[16]);
		kvl_gpusig_lanes_stats(l, &ls);
		EXPECT(ls.waits == 1 && ls.dones == 1 && ls.joins == 2,
		       "stats: %llu waits, %llu dones, %llu joins", (unsigned long long)ls.waits,
		       (unsigned long long)ls.dones, (unsigned long long)ls.joins);
		kvl_gpusig_lanes_free(l);
		CK(cudaStreamSynchronize(es));
		CK(cudaFreeHost((void *)w));
		printf("ok: lanes on %s: the work after READY, DONE after the work, bad words "
		       "refused\n",
		       which == 0 ? "a stream of its own" : "the default stream 0");
	}
	CK(cudaStreamSynchronize(st));
	for (unsigned i = 0; i < 3; i++)
		CK(cudaFree(dbuf[i]));
	kvl_gpusig_free(s);
	printf("PASS: gpusig\n");
	return 0;
}
