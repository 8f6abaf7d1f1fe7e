/* SPDX-License-Identifier: BSD-3-Clause */
/* gpu suite: the gather kernel's first launch while another stream waits on a READY word. */
/*
 * Under CUDA's lazy module loading (CUDA_MODULE_LOADING=LAZY, set here before the first CUDA
 * call: the default since 12.2), a kernel's code is loaded at its first launch, and loading may
 * synchronise the context: a first launch made while an engine's stream waits on a READY word
 * waits for that stream, which waits for READY, which the lcore writes only once this launch's
 * copies have landed. kvl_cudma_gather_load (called by kvl_cudma_new for the gather method)
 * loads the kernel at set-up so that this never happens.
 *
 * As the runtime does it: the transport is created first (kvl_start), then an engine's stream
 * waits on a READY word (cuStreamWaitValue32 through gpusig), then the lcore's first batch of
 * small copies goes to the gather kernel (16 KiB each, ce_min none: all on the kernel). A
 * worker thread drives post/progress/reap; if it does not get every completion back within
 * 10 s, the test fails naming the launch (and leaves with _exit: the worker is stuck inside
 * CUDA). Then READY is written, the engine's stream runs a copy of the landed bytes behind it,
 * and every byte is compared. Exits 77 without a GPU.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cuda_runtime_api.h>

#include "gpu_test.h"
#include "gpusig.h"
#include "kvl_clock.h"
#include "xport.h"
#include "xport_cudma.h"

#define UNIT	(16u << 10)
#define N_UNITS 64u
#define LEN	(UNIT * N_UNITS)
#define WAIT_S	10.0

struct worker {
	struct kvl_cudma_conn *c;
	uint8_t *host, *gpu;
	unsigned done; /* completions with KVL_OK */
	int bad;       /* a completion with another status */
	int finished;
};

static void *drive(void *arg)
{
	struct worker *w = arg;
	struct kvl_wc wc[64];
	unsigned posted = 0, reaped = 0;

	while (reaped < N_UNITS) {
		for (; posted < N_UNITS; posted++) {
			struct kvl_wr wr;

			memset(&wr, 0, sizeof(wr));
			wr.wr_id = posted;
			/* scattered: unit i from place (i * 37) % N_UNITS, so nothing merges */
			wr.local = w->gpu + (size_t)posted * UNIT;
			wr.remote_off = (uint64_t)((posted * 37u) % N_UNITS) * UNIT;
			wr.length = UNIT;
			wr.remote_seg = 1;
			wr.op = KVL_OP_READ;
			if (kvl_cudma_post(w->c, &wr) == -EAGAIN)
				break;
		}
		kvl_cudma_progress(w->c); /* the first gather launch is in here */
		for (unsigned n = kvl_cudma_reap(w->c, wc, 64); n > 0;
		     n = kvl_cudma_reap(w->c, wc, 64))
			for (unsigned i = 0; i < n; i++, reaped++) {
				if (wc[i].status != KVL_OK)
					__atomic_store_n(&w->bad, wc[i].status, __ATOMIC_RELEASE);
				else
					__atomic_add_fetch(&w->done, 1, __ATOMIC_RELEASE);
			}
	}
	__atomic_store_n(&w->finished, 1, __ATOMIC_RELEASE);
	return NULL;
}

int main(void)
{
	struct kvl_cudma_opts o;
	struct kvl_gpusig *sig;
	struct worker w;
	pthread_t th;
	cudaStream_t engine;
	uint8_t *copy, *back;
	char err[256];
	double t0;

	setenv("CUDA_MODULE_LOADING", "LAZY", 1); /* before the first CUDA call */
	if (gpu_test_devices() == 0)
		return GPU_TEST_SKIP;
	CK(cudaSetDevice(0));
	CK(cudaFree(0));
	memset(&w, 0, sizeof(w));
	CK(cudaHostAlloc((void **)&w.host, LEN, cudaHostAllocMapped));
	for (size_t i = 0; i < LEN; i++)
		w.host[i] = (uint8_t)(i * 131 + (i >> 14) * 7 + 1);
	CK(cudaMalloc((void **)&w.gpu, LEN));
	CK(cudaMalloc((void **)&copy, LEN));
	CK(cudaMemset(w.gpu, 0xee, LEN));
	CK(cudaMemset(copy, 0, LEN));
	back = malloc(LEN);
	EXPECT(back != NULL, "malloc");

	/* 1. the transport, as kvl_start makes it: the gather method, every copy on the kernel */
	memset(&o, 0, sizeof(o));
	o.device = 0;
	o.small = KVL_CUDMA_GATHER;
	o.ce_min = UINT64_MAX;
	w.c = kvl_cudma_new(&o, err, sizeof(err));
	EXPECT(w.c != NULL, "kvl_cudma_new: %s", err);
	EXPECT(kvl_cudma_add_remote(w.c, 1, w.host, LEN, KVL_SEG_REMOTE_READ, err, sizeof(err)) ==
		       0,
	       "add_remote: %s", err);
	EXPECT(kvl_cudma_add_local(w.c, w.gpu, LEN, err, sizeof(err)) == 0, "add_local: %s", err);
	CK(cudaDeviceSynchronize());

	/* 2. an engine's stream waits on READY, and its work behind it */
	sig = kvl_gpusig_new(1, err, sizeof(err));
	EXPECT(sig != NULL, "kvl_gpusig_new: %s", err);
	CK(cudaStreamCreateWithFlags(&engine, cudaStreamNonBlocking));
	EXPECT(kvl_gpusig_enqueue_wait(sig, 0, 1, engine) == 0, "enqueue_wait");
	CK(cudaMemcpyAsync(copy, w.gpu, LEN, cudaMemcpyDeviceToDevice, engine));
	EXPECT(kvl_gpusig_enqueue_done(sig, 0, 1, engine) == 0, "enqueue_done");

	/* 3. the lcore's first batch: the gather kernel's first launch */
	EXPECT(pthread_create(&th, NULL, drive, &w) == 0, "pthread_create");
	t0 = kvl_now_s();
	while (!__atomic_load_n(&w.finished, __ATOMIC_ACQUIRE)) {
		struct timespec ms = { 0, 1000000 };

		if (kvl_now_s() - t0 > WAIT_S) {
			printf("FAIL %s:%d: %u of %u copies back after %.0f s: the gather kernel's "
			       "first launch did not return while another stream waited on READY "
			       "(CUDA_MODULE_LOADING=LAZY: is the kernel loaded at set-up, "
			       "kvl_cudma_gather_load?)\n",
			       __FILE__, __LINE__, __atomic_load_n(&w.done, __ATOMIC_ACQUIRE),
			       N_UNITS, WAIT_S);
			fflush(stdout);
			_exit(1); /* the worker is inside CUDA: no orderly way out */
		}
		nanosleep(&ms, NULL);
	}
	pthread_join(th, NULL);
	printf("%u copies of %u KiB through the gather kernel in %.3f s while a stream waited on "
	       "READY\n",
	       w.done, UNIT >> 10, kvl_now_s() - t0);
	EXPECT(w.bad == 0 && w.done == N_UNITS, "%u completed, a status %d (enum kvl_status)",
	       w.done, w.bad);
	EXPECT(kvl_cudma_stats(w.c)->launches >= 1 && kvl_cudma_stats(w.c)->ce_shared == 0,
	       "the copies went to the gather kernel (launches %llu, on the engine %llu)",
	       (unsigned long long)kvl_cudma_stats(w.c)->launches,
	       (unsigned long long)kvl_cudma_stats(w.c)->ce_shared);

	/* 4. READY: the engine's stream copies what landed; DONE comes back; every byte */
	kvl_gpusig_set_ready(sig, 0, 1);
	t0 = kvl_now_s();
	while (!kvl_gpusig_is_done(sig, 0, 1))
		EXPECT(kvl_now_s() - t0 < WAIT_S, "DONE not written %.0f s after READY", WAIT_S);
	CK(cudaStreamSynchronize(engine));
	CK(cudaMemcpy(back, copy, LEN, cudaMemcpyDeviceToHost));
	for (unsigned u = 0; u < N_UNITS; u++)
		EXPECT(memcmp(back + (size_t)u * UNIT,
			      w.host + (size_t)((u * 37u) % N_UNITS) * UNIT, UNIT) == 0,
		       "unit %u differs after the gather kernel", u);
	CK(cudaStreamDestroy(engine));
	kvl_gpusig_free(sig);
	kvl_cudma_free(w.c);
	CK(cudaFree(copy));
	CK(cudaFree(w.gpu));
	CK(cudaFreeHost(w.host));
	free(back);
	printf("PASS: cudma_lazy (the gather kernel's first launch beside a stream waiting on "
	       "READY, under lazy loading; %u KiB checked)\n",
	       LEN >> 10);
	return 0;
}
