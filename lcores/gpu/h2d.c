/* SPDX-License-Identifier: BSD-3-Clause */
/* Host -> device copies (tcp's bounce buffers into VRAM) through the CUDA driver's entry points. */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

#include "cudrv.h"
#include "h2d.h"

struct kvl_h2d {
	const struct kvl_cudrv *d;
	CUdevice dev;
	CUcontext ctx;
	CUstream st;
	CUevent *ev; /* copy k's event: ev[k % depth] */
	unsigned depth;
	uint64_t started, done;
	bool bound; /* ctx current on the using thread */
	bool failed;
	char why[160];
};

static void set_why(struct kvl_h2d *h, const char *what, CUresult r)
{
	snprintf(h->why, sizeof(h->why), "%s: %s", what, kvl_cudrv_strerror(r));
}

static void destroy(struct kvl_h2d *h)
{
	for (unsigned i = 0; h->ev != NULL && i < h->depth; i++)
		if (h->ev[i] != NULL)
			h->d->event_destroy(h->ev[i]);
	if (h->st != NULL)
		h->d->stream_destroy(h->st);
	if (h->ctx != NULL)
		h->d->primary_ctx_release(h->dev);
	free(h->ev);
	free(h);
}

struct kvl_h2d *kvl_h2d_new(int device, unsigned depth, char *err, size_t errlen)
{
	const struct kvl_cudrv *d = kvl_cudrv_get(err, errlen);
	struct kvl_h2d *h;
	CUcontext prev = NULL;
	CUresult r;
	const char *what;
	bool swapped = false;

	if (d == NULL)
		return NULL; /* errno ENODEV, err says why */
	if (depth == 0) {
		snprintf(err, errlen, "h2d: depth 0");
		errno = EINVAL;
		return NULL;
	}
	h = calloc(1, sizeof(*h));
	if (h != NULL)
		h->ev = calloc(depth, sizeof(*h->ev));
	if (h == NULL || h->ev == NULL) {
		free(h);
		snprintf(err, errlen, "h2d: out of memory");
		errno = ENOMEM;
		return NULL;
	}
	h->d = d;
	h->depth = depth;
	what = "cuDeviceGet";
	r = d->device_get(&h->dev, device);
	if (r == CUDA_SUCCESS) {
		what = "cuDevicePrimaryCtxRetain";
		r = d->primary_ctx_retain(&h->ctx, h->dev);
	}
	if (r == CUDA_SUCCESS) {
		what = "cuCtxGetCurrent";
		r = d->ctx_get_current(&prev);
	}
	/* the stream and events belong to the primary context: made with it current, and the
	 * caller's own context put back after */
	if (r == CUDA_SUCCESS) {
		what = "cuCtxSetCurrent";
		r = d->ctx_set_current(h->ctx);
		swapped = r == CUDA_SUCCESS && prev != h->ctx;
	}
	if (r == CUDA_SUCCESS) {
		what = "cuStreamCreate";
		r = d->stream_create(&h->st, CU_STREAM_NON_BLOCKING);
	}
	for (unsigned i = 0; r == CUDA_SUCCESS && i < depth; i++) {
		what = "cuEventCreate";
		r = d->event_create(&h->ev[i], CU_EVENT_DISABLE_TIMING);
	}
	if (r != CUDA_SUCCESS) {
		snprintf(err, errlen, "h2d: CUDA device %d: %s: %s", device, what,
			 kvl_cudrv_strerror(r));
		destroy(h); /* with the primary context still current, where it was made so */
		if (swapped)
			d->ctx_set_current(prev);
		errno = ENODEV;
		return NULL;
	}
	if (swapped)
		d->ctx_set_current(prev);
	return h;
}

int kvl_h2d_start(struct kvl_h2d *h, uint64_t dst, const void *src, size_t len)
{
	CUresult r;

	if (h->failed)
		return -EIO;
	if (h->started - h->done >= h->depth)
		return -EAGAIN;
	if (!h->bound) {
		r = h->d->ctx_set_current(h->ctx);
		if (r != CUDA_SUCCESS) {
			set_why(h, "cuCtxSetCurrent", r);
			h->failed = true;
			return -EIO;
		}
		h->bound = true;
	}
	r = h->d->memcpy_htod_async((CUdeviceptr)dst, src, len, h->st);
	if (r == CUDA_SUCCESS)
		r = h->d->event_record(h->ev[h->started % h->depth], h->st);
	if (r != CUDA_SUCCESS) {
		set_why(h, "cuMemcpyHtoDAsync", r);
		h->failed = true;
		return -EIO;
	}
	h->started++;
	return 0;
}

int64_t kvl_h2d_completed(struct kvl_h2d *h)
{
	while (!h->failed && h->done < h->started) {
		CUresult r = h->d->event_query(h->ev[h->done % h->depth]);

		if (r == CUDA_ERROR_NOT_READY)
			break;
		if (r != CUDA_SUCCESS) {
			set_why(h, "a copy to VRAM (cuEventQuery)", r);
			h->failed = true;
			break;
		}
		h->done++;
	}
	return h->failed ? -EIO : (int64_t)h->done;
}

const char *kvl_h2d_error(const struct kvl_h2d *h)
{
	return h->why;
}

void kvl_h2d_free(struct kvl_h2d *h)
{
	const struct kvl_cudrv *d;
	CUcontext prev = NULL;
	bool swap;

	if (h == NULL)
		return;
	d = h->d;
	swap = d->ctx_get_current(&prev) == CUDA_SUCCESS && prev != h->ctx;

	/* on whichever thread tears down: the primary context current while it waits */
	if (swap)
		d->ctx_set_current(h->ctx);
	/* the buffers go back to the pool after this: no copy may still read them */
	if (h->started != 0)
		h->d->stream_synchronize(h->st);
	destroy(h);
	if (swap)
		d->ctx_set_current(prev);
}
