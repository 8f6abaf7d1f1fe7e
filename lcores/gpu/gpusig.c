/* SPDX-License-Identifier: BSD-3-Clause */
/* READY/DONE step flags in mapped pinned memory, waited and written by CUDA streams. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cudrv.h"
#include "gpusig.h"

/* READY is written by the CPU, DONE by the GPU: separate cache lines, so neither writer's
 * line bounces for the other's. */
struct flag {
	uint32_t ready;
	uint8_t pad0[60];
	uint32_t done;
	uint8_t pad1[60];
};
_Static_assert(sizeof(struct flag) == 128, "READY and DONE on their own cache lines");

struct hostfn_arg {
	struct kvl_gpusig *s;
	unsigned step;
	uint32_t epoch;
};

struct kvl_gpusig {
	unsigned n;
	struct flag *host;
	CUdeviceptr dev; /* the same memory as the GPU addresses it */
	const struct kvl_cudrv *drv;
	kvl_gpusig_ready_fn on_ready;
	void *on_ready_arg;
	/* One slot per step for the host-callback variant: the argument must outlive the
	 * launch, and a step has one DONE in flight at a time. */
	struct hostfn_arg *hostfn;
};

struct kvl_gpusig *kvl_gpusig_new(unsigned n, char *err, size_t errlen)
{
	struct kvl_gpusig *s;
	cudaError_t ce;
	void *dptr = NULL;

	if (n == 0) {
		snprintf(err, errlen, "gpusig: no steps asked for");
		errno = EINVAL;
		return NULL;
	}
	s = calloc(1, sizeof(*s));
	if (s == NULL) {
		snprintf(err, errlen, "gpusig: out of memory");
		return NULL;
	}
	s->n = n;
	s->drv = kvl_cudrv_get(err, errlen);
	if (s->drv == NULL)
		goto fail;
	s->hostfn = calloc(n, sizeof(*s->hostfn));
	if (s->hostfn == NULL) {
		snprintf(err, errlen, "gpusig: out of memory");
		goto fail;
	}
	ce = cudaHostAlloc((void **)&s->host, (size_t)n * sizeof(struct flag),
			   cudaHostAllocMapped | cudaHostAllocPortable);
	if (ce == cudaSuccess)
		ce = cudaHostGetDevicePointer(&dptr, s->host, 0);
	if (ce != cudaSuccess) {
		snprintf(err, errlen,
			 "gpusig: cannot map %u step flags (%zu bytes of pinned memory): %s", n,
			 (size_t)n * sizeof(struct flag), cudaGetErrorString(ce));
		errno = ENOMEM;
		goto fail;
	}
	memset(s->host, 0, (size_t)n * sizeof(struct flag));
	s->dev = (CUdeviceptr)(uintptr_t)dptr;
	return s;
fail:
	kvl_gpusig_free(s);
	return NULL;
}

void kvl_gpusig_free(struct kvl_gpusig *s)
{
	if (s == NULL)
		return;
	if (s->host != NULL)
		cudaFreeHost(s->host);
	free(s->hostfn);
	free(s);
}

unsigned kvl_gpusig_count(const struct kvl_gpusig *s)
{
	return s->n;
}

static CUdeviceptr ready_addr(const struct kvl_gpusig *s, unsigned step)
{
	return s->dev + (CUdeviceptr)step * sizeof(struct flag) + offsetof(struct flag, ready);
}

static CUdeviceptr done_addr(const struct kvl_gpusig *s, unsigned step)
{
	return s->dev + (CUdeviceptr)step * sizeof(struct flag) + offsetof(struct flag, done);
}

int kvl_gpusig_enqueue_wait(struct kvl_gpusig *s, unsigned step, uint32_t epoch, cudaStream_t st)
{
	if (step >= s->n)
		return -EINVAL;
	/* GEQ is cyclic ((int32_t)(*addr - epoch) >= 0): no reset between uses. */
	if (s->drv->stream_wait_value32((CUstream)st, ready_addr(s, step), epoch,
					CU_STREAM_WAIT_VALUE_GEQ) != CUDA_SUCCESS)
		return -EIO;
	return 0;
}

int kvl_gpusig_enqueue_done(struct kvl_gpusig *s, unsigned step, uint32_t epoch, cudaStream_t st)
{
	if (step >= s->n)
		return -EINVAL;
	/* Without NO_MEMORY_BARRIER the write is ordered after the kernels' memory writes: when
	 * the lcore sees DONE, the step's staging is no longer read. */
	if (s->drv->stream_write_value32((CUstream)st, done_addr(s, step), epoch,
					 CU_STREAM_WRITE_VALUE_DEFAULT) != CUDA_SUCCESS)
		return -EIO;
	return 0;
}

/* One stream memory operation on a mapped word: the wait (GEQ) or the write. */
static int addr_op(uint64_t dev_addr, uint32_t epoch, cudaStream_t st, bool wait, char *err,
		   size_t errlen)
{
	const struct kvl_cudrv *drv = kvl_cudrv_get(err, errlen);
	CUresult r;

	if (drv == NULL)
		return -ENODEV;
	if (dev_addr == 0) {
		snprintf(err, errlen, "gpusig: no device address (the flag pool is not mapped)");
		return -EINVAL;
	}
	/* the write is ordered after the kernels' memory accesses, as kvl_gpusig_enqueue_done */
	r = wait ? drv->stream_wait_value32((CUstream)st, (CUdeviceptr)dev_addr, epoch,
					    CU_STREAM_WAIT_VALUE_GEQ)
		 : drv->stream_write_value32((CUstream)st, (CUdeviceptr)dev_addr, epoch,
					     CU_STREAM_WRITE_VALUE_DEFAULT);
	if (r != CUDA_SUCCESS) {
		snprintf(err, errlen, "gpusig: %s: %s",
			 wait ? "cuStreamWaitValue32" : "cuStreamWriteValue32",
			 kvl_cudrv_strerror(r));
		return -EIO;
	}
	return 0;
}

int kvl_gpusig_wait_addr(uint64_t dev_addr, uint32_t epoch, cudaStream_t st, char *err,
			 size_t errlen)
{
	return addr_op(dev_addr, epoch, st, true, err, errlen);
}

int kvl_gpusig_done_addr(uint64_t dev_addr, uint32_t epoch, cudaStream_t st, char *err,
			 size_t errlen)
{
	return addr_op(dev_addr, epoch, st, false, err, errlen);
}

void kvl_gpusig_on_ready(struct kvl_gpusig *s, kvl_gpusig_ready_fn fn, void *arg)
{
	s->on_ready = fn;
	s->on_ready_arg = arg;
}

static void CUDART_CB done_hostfn(void *p)
{
	struct hostfn_arg *a = p;

	__atomic_store_n(&a->s->host[a->step].done, a->epoch, __ATOMIC_RELEASE);
}

int kvl_gpusig_enqueue_done_hostfn(struct kvl_gpusig *s, unsigned step, uint32_t epoch,
				   cudaStream_t st)
{
	struct hostfn_arg *a;

	if (step >= s->n)
		return -EINVAL;
	a = &s->hostfn[step];
	a->s = s;
	a->step = step;
	a->epoch = epoch;
	return cudaLaunchHostFunc(st, done_hostfn, a) == cudaSuccess ? 0 : -EIO;
}

void kvl_gpusig_set_ready(struct kvl_gpusig *s, unsigned step, uint32_t epoch)
{
	if (step >= s->n)
		return;
	/* The data the step reads was completed (copy event or NIC completion seen) before
	 * this store; release keeps the store after those loads on the CPU side. */
	__atomic_store_n(&s->host[step].ready, epoch, __ATOMIC_RELEASE);
	if (s->on_ready != NULL)
		s->on_ready(s->on_ready_arg, step, epoch);
}

bool kvl_gpusig_is_done(const struct kvl_gpusig *s, unsigned step, uint32_t epoch)
{
	uint32_t d;

	if (step >= s->n)
		return false;
	d = __atomic_load_n(&s->host[step].done, __ATOMIC_ACQUIRE);
	return (int32_t)(d - epoch) >= 0;
}

uint32_t kvl_gpusig_ready_word(const struct kvl_gpusig *s, unsigned step)
{
	return step < s->n ? __atomic_load_n(&s->host[step].ready, __ATOMIC_ACQUIRE) : 0;
}

uint32_t kvl_gpusig_done_word(const struct kvl_gpusig *s, unsigned step)
{
	return step < s->n ? __atomic_load_n(&s->host[step].done, __ATOMIC_ACQUIRE) : 0;
}

/* ---- lanes: the step flags on side streams, joined to the engine's stream by events ---- */

#define LANES_MAX_OPS 256 /* words a call: each is a stream memory operation of its own */

struct kvl_gpusig_lanes {
	const struct kvl_cudrv *drv;
	cudaStream_t engine, wait_lane, done_lane;
	cudaEvent_t ready_ev, end_ev; /* recorded on the wait lane / on the engine's stream */
	struct kvl_gpusig_lanes_stats st;
};

struct kvl_gpusig_lanes *kvl_gpusig_lanes_new(cudaStream_t engine, char *err, size_t errlen)
{
	struct kvl_gpusig_lanes *l;
	cudaError_t ce = cudaSuccess;

	l = calloc(1, sizeof(*l));
	if (l == NULL) {
		snprintf(err, errlen, "gpusig lanes: out of memory");
		return NULL;
	}
	l->engine = engine;
	l->drv = kvl_cudrv_get(err, errlen);
	if (l->drv == NULL)
		goto fail;
	/* non-blocking: no implicit order with the legacy default stream (which may be the
	 * engine's: the events join them to it all the same) */
	ce = cudaStreamCreateWithFlags(&l->wait_lane, cudaStreamNonBlocking);
	if (ce == cudaSuccess)
		ce = cudaStreamCreateWithFlags(&l->done_lane, cudaStreamNonBlocking);
	if (ce == cudaSuccess)
		ce = cudaEventCreateWithFlags(&l->ready_ev, cudaEventDisableTiming);
	if (ce == cudaSuccess)
		ce = cudaEventCreateWithFlags(&l->end_ev, cudaEventDisableTiming);
	if (ce != cudaSuccess) {
		snprintf(err, errlen, "gpusig lanes: cannot create the side streams and events: %s",
			 cudaGetErrorString(ce));
		goto fail;
	}
	return l;
fail:
	kvl_gpusig_lanes_free(l);
	errno = ce == cudaSuccess ? ENODEV : EIO;
	return NULL;
}

void kvl_gpusig_lanes_free(struct kvl_gpusig_lanes *l)
{
	if (l == NULL)
		return;
	if (l->wait_lane != NULL) {
		cudaStreamSynchronize(l->wait_lane);
		cudaStreamDestroy(l->wait_lane);
	}
	if (l->done_lane != NULL) {
		cudaStreamSynchronize(l->done_lane);
		cudaStreamDestroy(l->done_lane);
	}
	if (l->ready_ev != NULL)
		cudaEventDestroy(l->ready_ev);
	if (l->end_ev != NULL)
		cudaEventDestroy(l->end_ev);
	free(l);
}

static int lanes_args(const uint64_t *addr, unsigned n, char *err, size_t errlen)
{
	if (n > LANES_MAX_OPS) {
		snprintf(err, errlen, "gpusig lanes: %u words in one call, at most %u", n,
			 LANES_MAX_OPS);
		return -EINVAL;
	}
	for (unsigned i = 0; i < n; i++)
		if (addr[i] == 0) {
			snprintf(err, errlen,
				 "gpusig lanes: word %u has no device address (the flag pool is "
				 "not mapped)",
				 i);
			return -EINVAL;
		}
	return 0;
}

/* @from records @ev, @to waits for it: what joins a lane and the engine's stream. */
static int lanes_join(cudaEvent_t ev, cudaStream_t from, cudaStream_t to, const char *what,
		      char *err, size_t errlen)
{
	cudaError_t ce = cudaEventRecord(ev, from);

	if (ce == cudaSuccess)
		ce = cudaStreamWaitEvent(to, ev, 0);
	if (ce == cudaSuccess)
		return 0;
	snprintf(err, errlen, "gpusig lanes: joining %s: %s", what, cudaGetErrorString(ce));
	return -EIO;
}

int kvl_gpusig_lanes_wait(struct kvl_gpusig_lanes *l, const uint64_t *ready_dev,
			  const uint32_t *epoch, unsigned n, char *err, size_t errlen)
{
	int rc = lanes_args(ready_dev, n, err, errlen);

	for (unsigned i = 0; rc == 0 && i < n; i++)
		rc = addr_op(ready_dev[i], epoch[i], l->wait_lane, true, err, errlen);
	if (rc < 0 || n == 0)
		return rc;
	l->st.waits += n;
	rc = lanes_join(l->ready_ev, l->wait_lane, l->engine,
			"the wait lane to the engine's stream", err, errlen);
	l->st.joins += rc == 0;
	return rc;
}

int kvl_gpusig_lanes_done(struct kvl_gpusig_lanes *l, const uint64_t *done_dev,
			  const uint32_t *epoch, unsigned n, char *err, size_t errlen)
{
	int rc = lanes_args(done_dev, n, err, errlen);

	if (rc < 0 || n == 0)
		return rc;
	rc = lanes_join(l->end_ev, l->engine, l->done_lane, "the engine's stream to the done lane",
			err, errlen);
	if (rc < 0)
		return rc;
	l->st.joins++;
	/* with the barrier (addr_op): the step's kernels' writes are visible before DONE is */
	for (unsigned i = 0; rc == 0 && i < n; i++) {
		rc = addr_op(done_dev[i], epoch[i], l->done_lane, false, err, errlen);
		l->st.dones += rc == 0;
	}
	return rc;
}

void kvl_gpusig_lanes_stats(const struct kvl_gpusig_lanes *l, struct kvl_gpusig_lanes_stats *st)
{
	*st = l->st;
}
