/* SPDX-License-Identifier: BSD-3-Clause */
/* GPUDirect registration of cudaMalloc memory: dma-buf, then peer memory, with causes. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <infiniband/verbs.h>

#include "kvl_clock.h"
#include "cudrv.h"
#include "gpumem.h"
#include "xfer.h"

const char *kvl_gpumem_method_name(enum kvl_gpumem_method m)
{
	switch (m) {
	case KVL_GPUMEM_DMABUF:
		return "dma-buf";
	case KVL_GPUMEM_PEERMEM:
		return "peer memory (nvidia_peermem)";
	default:
		return "none";
	}
}

/* The attributes of one address; CUDA_SUCCESS with kind UNKNOWN for one it does not know. */
static CUresult attrs_at(const struct kvl_cudrv *d, CUdeviceptr p, struct kvl_gpumem_range *r)
{
	CUpointer_attribute a[] = { CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
				    CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
				    CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,
				    CU_POINTER_ATTRIBUTE_RANGE_SIZE,
				    CU_POINTER_ATTRIBUTE_IS_MANAGED };
	unsigned type = 0, managed = 0;
	int ordinal = -1;
	CUdeviceptr start = 0;
	size_t size = 0;
	void *v[] = { &type, &ordinal, &start, &size, &managed };
	CUresult rc = d->pointer_get_attributes(5, a, v, p);

	memset(r, 0, sizeof(*r));
	r->device = -1;
	if (rc == CUDA_ERROR_INVALID_VALUE || rc == CUDA_ERROR_INVALID_CONTEXT)
		return CUDA_SUCCESS; /* an address CUDA cannot place: not CUDA's (UNKNOWN) */
	if (rc != CUDA_SUCCESS)
		return rc;
	/* an allocation of cudaMallocManaged has a range; plain pageable memory that a driver
	 * with HMM may also call managed has none, and stays host memory */
	if (managed && size > 0)
		r->kind = KVL_GPUMEM_MANAGED;
	else if (type == CU_MEMORYTYPE_DEVICE)
		r->kind = KVL_GPUMEM_DEVICE;
	else if (type == CU_MEMORYTYPE_HOST)
		r->kind = KVL_GPUMEM_HOST;
	if (r->kind == KVL_GPUMEM_DEVICE || r->kind == KVL_GPUMEM_MANAGED) {
		r->device = ordinal;
		r->start = (uintptr_t)start;
		r->size = size;
	}
	return CUDA_SUCCESS;
}

int kvl_gpumem_query(const void *p, uint64_t len, struct kvl_gpumem_range *r, char *err,
		     size_t errlen)
{
	const struct kvl_cudrv *d = kvl_cudrv_get(err, errlen);
	uintptr_t a = (uintptr_t)p, last = a + (len ? len - 1 : 0);
	struct kvl_gpumem_range e;
	CUresult rc;

	if (d == NULL)
		return -ENODEV;
	rc = attrs_at(d, (CUdeviceptr)a, r);
	if (rc == CUDA_SUCCESS && (r->kind == KVL_GPUMEM_UNKNOWN || last >= r->start + r->size))
		rc = attrs_at(d, (CUdeviceptr)last, &e); /* where the range ends, if elsewhere */
	if (rc != CUDA_SUCCESS) {
		snprintf(err, errlen, "%p: cuPointerGetAttributes failed: %s", p,
			 kvl_cudrv_strerror(rc));
		return -EIO;
	}
	if (r->kind == KVL_GPUMEM_UNKNOWN || r->kind == KVL_GPUMEM_HOST) {
		if (e.kind == KVL_GPUMEM_DEVICE || e.kind == KVL_GPUMEM_MANAGED) {
			snprintf(err, errlen,
				 "[%p, +%llu) starts outside GPU memory and ends inside GPU %d's "
				 "allocation at 0x%llx (+%llu bytes): one segment is one kind of "
				 "memory",
				 p, (unsigned long long)len, e.device, (unsigned long long)e.start,
				 (unsigned long long)e.size);
			return -ERANGE;
		}
		return 0;
	}
	if (last < r->start + r->size)
		return 0;
	if (e.kind == KVL_GPUMEM_DEVICE || e.kind == KVL_GPUMEM_MANAGED)
		snprintf(err, errlen,
			 "[%p, +%llu) crosses two GPU allocations: it starts in 0x%llx (+%llu "
			 "bytes, GPU %d) and ends in 0x%llx (+%llu bytes, GPU %d); a segment must "
			 "lie inside one allocation",
			 p, (unsigned long long)len, (unsigned long long)r->start,
			 (unsigned long long)r->size, r->device, (unsigned long long)e.start,
			 (unsigned long long)e.size, e.device);
	else
		snprintf(err, errlen,
			 "[%p, +%llu) runs %llu bytes past the end of its GPU allocation 0x%llx "
			 "(+%llu bytes, GPU %d)",
			 p, (unsigned long long)len,
			 (unsigned long long)(a + len - (r->start + r->size)),
			 (unsigned long long)r->start, (unsigned long long)r->size, r->device);
	return -ERANGE;
}

/* The allocation around @gptr, and the device it lives on; -EINVAL when it is not VRAM. */
static int gpu_range(void *gptr, uint64_t len, CUdeviceptr *start, size_t *size, int *dev,
		     char *err, size_t errlen)
{
	struct kvl_gpumem_range r;
	int rc = kvl_gpumem_query(gptr, len, &r, err, errlen);

	if (rc == -ERANGE)
		return -EINVAL;
	if (rc < 0)
		return rc;
	if (r.kind != KVL_GPUMEM_DEVICE) {
		snprintf(err, errlen,
			 "%p is not GPU memory (CUDA says %s): only cudaMalloc'd VRAM is "
			 "registered here; host memory goes through kvl_verbs_reg",
			 gptr,
			 r.kind == KVL_GPUMEM_HOST	? "pinned host memory"
			 : r.kind == KVL_GPUMEM_MANAGED ? "managed memory"
							: "not CUDA memory, or freed");
		return -EINVAL;
	}
	*start = (CUdeviceptr)r.start;
	*size = r.size;
	*dev = r.device;
	return 0;
}

/*
 * Export the whole allocation as a dma-buf fd (the driver wants page-aligned ranges, and
 * cudaMalloc allocations are). Returns the fd, or -1 with the cause in @why.
 */
static int dmabuf_export(const struct kvl_cudrv *d, CUdeviceptr start, size_t size, int dev,
			 char *why, size_t whylen)
{
	int supported = 0, fd = -1;
	CUresult r;

	r = d->device_get_attribute(&supported, CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED, dev);
	if (r != CUDA_SUCCESS || !supported) {
		snprintf(why, whylen,
			 "the GPU driver does not offer dma-buf (CU_DEVICE_ATTRIBUTE_DMA_BUF_"
			 "SUPPORTED = 0: needs NVIDIA's open kernel modules and Linux >= 5.12)");
		return -1;
	}
	r = d->mem_get_handle(&fd, start, size, CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD, 0);
	if (r != CUDA_SUCCESS || fd < 0) {
		snprintf(why, whylen, "cuMemGetHandleForAddressRange refused the export: %s",
			 kvl_cudrv_strerror(r));
		return -1;
	}
	return fd;
}

static void peermem_state(bool *loaded, char *why, size_t whylen)
{
	*loaded = access("/sys/module/nvidia_peermem", F_OK) == 0;
	if (!*loaded)
		snprintf(why, whylen,
			 "nvidia_peermem is not loaded (/sys/module/nvidia_peermem is absent: "
			 "modprobe nvidia_peermem)");
	else
		why[0] = '\0';
}

static void rdma_state(int *n, char *why, size_t whylen)
{
	struct ibv_device **l = ibv_get_device_list(n);

	if (l != NULL)
		ibv_free_device_list(l);
	if (l == NULL || *n == 0) {
		*n = 0;
		snprintf(why, whylen,
			 "no RDMA device (ibv_get_device_list found none; /sys/class/infiniband "
			 "%s)",
			 access("/sys/class/infiniband", F_OK) == 0
				 ? "is empty or its providers are missing"
				 : "does not exist: no RDMA NIC driver is loaded");
	} else {
		why[0] = '\0';
	}
}

int kvl_gpumem_probe(void *gptr, uint64_t len, struct kvl_gpumem_probe *p, char *err, size_t errlen)
{
	const struct kvl_cudrv *d = kvl_cudrv_get(err, errlen);
	CUdeviceptr start;
	size_t size;
	int dev, fd, rc, attr = 0;

	memset(p, 0, sizeof(*p));
	if (d == NULL)
		return -ENODEV;
	rc = gpu_range(gptr, len, &start, &size, &dev, err, errlen);
	if (rc != 0)
		return rc;
	if (d->device_get_attribute(&attr, CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED, dev) ==
	    CUDA_SUCCESS)
		p->gpudirect_attr = attr != 0;
	fd = dmabuf_export(d, start, size, dev, p->dmabuf_why, sizeof(p->dmabuf_why));
	if (fd >= 0) {
		p->dmabuf_export = true;
		close(fd);
	}
	peermem_state(&p->peermem, p->peermem_why, sizeof(p->peermem_why));
	rdma_state(&p->rdma_devices, p->rdma_why, sizeof(p->rdma_why));
	return 0;
}

struct ibv_pd *kvl_gpumem_open_pd(const char *name, char *err, size_t errlen)
{
	struct ibv_device **l;
	struct ibv_context *ctx = NULL;
	struct ibv_pd *pd;
	int n = 0;

	l = ibv_get_device_list(&n);
	if (l == NULL || n == 0) {
		char why[160];
		bool peer;
		char pwhy[160];

		if (l != NULL)
			ibv_free_device_list(l);
		rdma_state(&n, why, sizeof(why));
		peermem_state(&peer, pwhy, sizeof(pwhy));
		snprintf(err, errlen,
			 "cannot register GPU memory for RDMA: %s; GPUDirect needs an RDMA NIC "
			 "first%s%s",
			 why, peer ? "" : " (and then dma-buf support, or ", peer ? "" : pwhy);
		if (!peer && strlen(err) + 2 < errlen)
			strcat(err, ")");
		errno = ENODEV;
		return NULL;
	}
	for (int i = 0; i < n; i++)
		if (name == NULL || strcmp(ibv_get_device_name(l[i]), name) == 0) {
			ctx = ibv_open_device(l[i]);
			if (ctx == NULL) {
				snprintf(err, errlen, "cannot open RDMA device %s: %s",
					 ibv_get_device_name(l[i]), strerror(errno));
				ibv_free_device_list(l);
				return NULL;
			}
			break;
		}
	ibv_free_device_list(l);
	if (ctx == NULL) {
		snprintf(err, errlen, "no RDMA device named %s", name);
		errno = ENODEV;
		return NULL;
	}
	pd = ibv_alloc_pd(ctx);
	if (pd == NULL) {
		snprintf(err, errlen, "%s: cannot allocate a protection domain: %s",
			 ibv_get_device_name(ctx->device), strerror(errno));
		ibv_close_device(ctx);
		return NULL;
	}
	return pd;
}

void kvl_gpumem_close_pd(struct ibv_pd *pd)
{
	struct ibv_context *ctx;

	if (pd == NULL)
		return;
	ctx = pd->context;
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
}

int kvl_gpumem_reg(struct ibv_pd *pd, void *gptr, uint64_t len, uint32_t flags,
		   struct kvl_gpumem_mr *out, char *err, size_t errlen)
{
	const struct kvl_cudrv *d = kvl_cudrv_get(err, errlen);
	int access = IBV_ACCESS_LOCAL_WRITE;
	char dwhy[200], pwhy[200];
	CUdeviceptr start;
	struct ibv_mr *mr;
	uint64_t t0;
	size_t size;
	int dev, fd, rc;
	bool peer;

	memset(out, 0, sizeof(*out));
	if (d == NULL)
		return -ENODEV;
	if (pd == NULL || len == 0) {
		snprintf(err, errlen, "nothing to register (pd %p, %llu bytes)", (void *)pd,
			 (unsigned long long)len);
		return -EINVAL;
	}
	rc = gpu_range(gptr, len, &start, &size, &dev, err, errlen);
	if (rc != 0)
		return rc;
	if (flags & KVL_SEG_REMOTE_READ)
		access |= IBV_ACCESS_REMOTE_READ;
	if (flags & KVL_SEG_REMOTE_WRITE)
		access |= IBV_ACCESS_REMOTE_WRITE;
	t0 = kvl_now_ns();
	fd = dmabuf_export(d, start, size, dev, dwhy, sizeof(dwhy));
	if (fd >= 0) {
		/* The NIC addresses the range by its GPU virtual address (iova), so WRs and
		 * rkeys look the same as for host memory. */
		mr = ibv_reg_dmabuf_mr(pd, (uint64_t)((uintptr_t)gptr - start), len,
				       (uint64_t)(uintptr_t)gptr, fd, access);
		/* The MR holds its own reference on the dma-buf. */
		close(fd);
		if (mr != NULL) {
			out->method = KVL_GPUMEM_DMABUF;
			goto ok;
		}
		snprintf(dwhy, sizeof(dwhy),
			 "the GPU exported a dma-buf but %s refused it (ibv_reg_dmabuf_mr: %s; "
			 "needs rdma-core >= 34, Linux >= 5.12 and a NIC driver that imports "
			 "dma-buf)",
			 ibv_get_device_name(pd->context->device), strerror(errno));
	}
	mr = ibv_reg_mr(pd, gptr, len, access);
	if (mr != NULL) {
		out->method = KVL_GPUMEM_PEERMEM;
		goto ok;
	}
	rc = errno ? -errno : -EIO;
	peermem_state(&peer, pwhy, sizeof(pwhy));
	if (peer)
		snprintf(pwhy, sizeof(pwhy),
			 "ibv_reg_mr on the GPU address failed (%s) although nvidia_peermem is "
			 "loaded: check that GPU and NIC share a PCIe root (nvidia-smi topo -m)",
			 strerror(-rc));
	snprintf(err, errlen,
		 "cannot register GPU memory %p (+%llu bytes, device %d) on %s: dma-buf: %s; "
		 "peer memory: %s",
		 gptr, (unsigned long long)len, dev, ibv_get_device_name(pd->context->device), dwhy,
		 pwhy);
	return rc;
ok:
	out->ns = kvl_now_ns() - t0;
	out->mr = mr;
	out->lkey = mr->lkey;
	out->rkey = mr->rkey;
	return 0;
}

void kvl_gpumem_dereg(struct kvl_gpumem_mr *m)
{
	if (m->mr != NULL)
		ibv_dereg_mr(m->mr);
	memset(m, 0, sizeof(*m));
}
