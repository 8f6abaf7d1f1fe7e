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
