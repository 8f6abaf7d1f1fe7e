/* SPDX-License-Identifier: BSD-3-Clause */
/* gpu suite: lcores/gpu/h2d.c alone: pinned host -> VRAM copies counted by polled events. */
/*
 * What tcp's bounce buffers rely on: copies complete in the order started and are counted by
 * kvl_h2d_completed() without blocking; at @depth in flight a start says -EAGAIN; the bytes
 * are in VRAM when counted; a copy the driver refuses fails the copier with the driver's
 * words; the calling thread's context is left as it was; the copier is used from a thread
 * other than the one that made it (the control thread makes it, the NIC lcore uses it).
 * Exits 77 (skipped) without a GPU.
 */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include "cudrv.h"
#include "gpu_test.h"
#include "h2d.h"

#define LEN   (8u << 20)
#define PIECE (512u << 10)
#define DEPTH 4u

static uint8_t *host, *back, *dev;
static struct kvl_h2d *h;

/* The lcore's part: copy LEN in PIECEs, never more than DEPTH in flight, poll to the end. */
static void *user(void *arg)
{
	unsigned started = 0, eagain = 0;
	int64_t done = 0;

	(void)arg;
	while (done < (int64_t)(LEN / PIECE)) {
		if (started < LEN / PIECE) {
			int rc = kvl_h2d_start(h,
					       (uint64_t)(uintptr_t)dev + (uint64_t)started * PIECE,
					       host + (size_t)started * PIECE, PIECE);

			EXPECT(rc == 0 || rc == -EAGAIN, "kvl_h2d_start: %d (%s)", rc,
			       kvl_h2d_error(h));
			if (rc == 0)
				started++;
			else
				eagain++;
			EXPECT(started - done <= DEPTH, "%u started, %lld done: over the depth",
			       started, (long long)done);
		}
		done = kvl_h2d_completed(h);
		EXPECT(done >= 0 && done <= started, "completed %lld of %u started",
		       (long long)done, started);
	}
	printf("h2d: %u copies of %u KiB from another thread, %u starts refused at depth %u\n",
	       started, PIECE >> 10, eagain, DEPTH);
	return NULL;
}

int main(void)
{
	char err[256];
	CUcontext before = NULL, after = NULL;
	pthread_t t;

	if (gpu_test_devices() == 0)
		return GPU_TEST_SKIP;
	/* bad input first: no depth */
	EXPECT(kvl_h2d_new(0, 0, err, sizeof(err)) == NULL && errno == EINVAL, "depth 0 accepted");
	EXPECT(kvl_h2d_new(1 << 20, 4, err, sizeof(err)) == NULL && strstr(err, "cuDeviceGet"),
	       "a device that does not exist: %s", err);
	printf("refused: %s\n", err);

	CK(cudaSetDevice(0));
	CK(cudaMallocHost((void **)&host, LEN));
	CK(cudaMallocHost((void **)&back, LEN));
	CK(cudaMalloc((void **)&dev, LEN));
	CK(cudaMemset(dev, 0, LEN));
	CK(cudaDeviceSynchronize());
	for (uint32_t i = 0; i < LEN; i++)
		host[i] = (uint8_t)(i * 2654435761u >> 13);
	/* (through cudart's driver entry points, as kvlane does: no binary links libcuda) */
	EXPECT(kvl_cudrv_get(err, sizeof(err)) != NULL, "driver entry points: %s", err);
	kvl_cudrv_get(NULL, 0)->ctx_get_current(&before);
	h = kvl_h2d_new(0, DEPTH, err, sizeof(err));
	EXPECT(h != NULL, "kvl_h2d_new: %s", err);
	kvl_cudrv_get(NULL, 0)->ctx_get_current(&after);
	EXPECT(before == after, "kvl_h2d_new changed the caller's context");
	EXPECT(kvl_h2d_error(h)[0] == '\0', "an error before any copy: %s", kvl_h2d_error(h));
	EXPECT(pthread_create(&t, NULL, user, NULL) == 0, "pthread_create");
	pthread_join(t, NULL);
	CK(cudaMemcpy(back, dev, LEN, cudaMemcpyDeviceToHost));
	EXPECT(memcmp(back, host, LEN) == 0, "VRAM differs from what was copied");
	printf("h2d: %u MiB in VRAM, every byte as sent\n", LEN >> 20);

	/* a copy the driver refuses (a destination that is no device memory): the copier fails
	 * and says so, and stays failed */
	{
		int rc = kvl_h2d_start(h, 16, host, PIECE);

		if (rc == 0) /* an asynchronous error surfaces at the event instead */
			while ((rc = (int)kvl_h2d_completed(h)) >= 0 && rc < (int)(LEN / PIECE) + 1)
				;
		EXPECT(rc == -EIO, "a copy to address 16: %d", rc);
		EXPECT(kvl_h2d_error(h)[0] != '\0', "no words for the failure");
		EXPECT(kvl_h2d_start(h, (uint64_t)(uintptr_t)dev, host, PIECE) == -EIO,
		       "a failed copier took another copy");
		printf("refused: %s\n", kvl_h2d_error(h));
	}
	kvl_h2d_free(h);
	/* unchecked: where the refused copy was an asynchronous fault the context is gone */
	cudaFree(dev);
	cudaFreeHost(back);
	cudaFreeHost(host);
	printf("PASS: h2d\n");
	return 0;
}
