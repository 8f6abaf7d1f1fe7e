/* SPDX-License-Identifier: BSD-3-Clause */
/* GPU probe: device checks at start, then free VRAM sampled into the prefetch budget. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu.h"
#include "kvl_build_config.h"
#include "kvlane/kvlane.h"

/*
 * Whether the CPU can read [p, p + len): every byte inside mappings with read permission, in
 * /proc/self/maps. A freed cudaMalloc block is what this tells from host memory: CUDA no longer
 * knows it, and its address range is not readable (reserved PROT_NONE, or unmapped).
 */
static bool host_readable(uintptr_t a, uint64_t len)
{
	FILE *f = fopen("/proc/self/maps", "re");
	uintptr_t end = a + len, at = a;
	char line[512];

	if (f == NULL)
		return true; /* no procfs: nothing to tell by; registration will say */
	while (at < end && fgets(line, sizeof(line), f) != NULL) {
		unsigned long lo, hi;
		char perm[8];

		if (sscanf(line, "%lx-%lx %7s", &lo, &hi, perm) != 3)
			continue;
		if (hi <= at)
			continue;
		if (lo > at || perm[0] != 'r')
			break; /* a hole, or a mapping the CPU may not read */
		at = hi;
	}
	fclose(f);
	return at >= end;
}

static int host_check(const void *p, uint64_t len, struct kvl_mem_info *mi, char *err,
		      size_t errlen)
{
	if (!host_readable((uintptr_t)p, len)) {
		snprintf(err, errlen,
			 "[%p, +%llu) is neither host memory the CPU can read nor live GPU memory "
			 "(unmapped, or a cudaMalloc block that was freed)",
			 p, (unsigned long long)len);
		return -EFAULT;
	}
	mi->kind = KVL_MEM_HOST;
	return 0;
}
#include "kvl_clock.h"

#if KVL_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "gpumem.h"
#include "segments.h"
#include "verbs.h"

int kvl_gpu_mr_reg(struct kvl_verbs_dev *dev, void *base, uint64_t len, uint32_t flags,
		   uint32_t *rkey, uint64_t *ns, uint8_t *method, char *err, size_t errlen)
{
	struct kvl_gpumem_mr mr;
	int rc = kvl_gpumem_reg(kvl_verbs_dev_pd(dev), base, len, flags, &mr, err, errlen);

	if (rc < 0)
		return rc;
	rc = kvl_verbs_adopt_mr(dev, mr.mr, err, errlen);
	if (rc < 0) {
		kvl_gpumem_dereg(&mr);
		return rc;
	}
	*rkey = mr.rkey;
	*ns = mr.ns;
	*method = mr.method == KVL_GPUMEM_DMABUF ? KVL_SEG_REG_DMABUF : KVL_SEG_REG_PEERMEM;
	return 0;
}

int kvl_gpu_device_check(int device, char *pci, size_t pcilen, char *err, size_t errlen)
{
	int n = 0;
	cudaError_t ce = cudaGetDeviceCount(&n);

	if (ce != cudaSuccess || n == 0) {
		snprintf(err, errlen, "no usable CUDA device on this host (%s)",
			 ce != cudaSuccess ? cudaGetErrorString(ce) : "device count 0");
		return -ENODEV;
	}
	if (device < 0 || device >= n) {
		snprintf(err, errlen,
			 "GPU %d does not exist: this host has %d CUDA device%s (0..%d)", device, n,
			 n == 1 ? "" : "s", n - 1);
		return -ENODEV;
	}
	ce = cudaDeviceGetPCIBusId(pci, (int)pcilen, device);
	if (ce != cudaSuccess) {
		snprintf(err, errlen, "GPU %d: cannot read its PCI address: %s", device,
			 cudaGetErrorString(ce));
		return -EIO;
	}
	return 0;
}

int kvl_gpu_mem_detect(const void *p, uint64_t len, struct kvl_mem_info *mi, char *err,
		       size_t errlen)
{
	struct kvl_gpumem_range r;
	char why[256];
	int rc;

	memset(mi, 0, sizeof(*mi));
	mi->device = -1;
	rc = kvl_gpumem_query(p, len, &r, why, sizeof(why));
	if (rc == -ENODEV)
		return host_check(p, len, mi, err, errlen); /* no GPU here: host or nothing */
	if (rc < 0) {
		snprintf(err, errlen, "%s", why);
		return rc;
	}
	switch (r.kind) {
	case KVL_GPUMEM_DEVICE:
		mi->kind = KVL_MEM_GPU;
		mi->device = r.device;
		mi->alloc_start = r.start;
		mi->alloc_size = r.size;
		return kvl_gpu_device_check(r.device, mi->pci_bus_id, sizeof(mi->pci_bus_id), err,
					    errlen);
	case KVL_GPUMEM_MANAGED:
		snprintf(
			err, errlen,
			"[%p, +%llu) is CUDA managed memory (cudaMallocManaged, GPU %d): its pages "
			"migrate between host and GPU, so neither path can hold it; use cudaMalloc "
			"or pinned host memory",
			p, (unsigned long long)len, r.device);
		return -ENOTSUP;
	default: /* pinned host memory, or memory CUDA does not know */
		return host_check(p, len, mi, err, errlen);
	}
}

void *kvl_gpu_vram_alloc(int device, uint64_t len, char *err, size_t errlen)
{
	void *p = NULL;
	int prev = -1;
	cudaError_t ce;

	/* the caller's thread keeps its current device: an engine's own CUDA work is not moved */
	if (cudaGetDevice(&prev) != cudaSuccess)
		prev = -1;
	ce = cudaSetDevice(device);
	if (ce == cudaSuccess)
		ce = cudaMalloc(&p, len);
	if (ce == cudaSuccess)
		ce = cudaMemset(p, 0, len);
	if (ce == cudaSuccess)
		ce = cudaDeviceSynchronize(); /* zeroed before anyone can see it */
	if (prev >= 0 && prev != device)
		cudaSetDevice(prev);
	if (ce != cudaSuccess) {
		snprintf(err, errlen, "GPU %d: cannot allocate %llu MiB of VRAM: %s", device,
			 (unsigned long long)(len >> 20), cudaGetErrorString(ce));
		if (p != NULL)
			cudaFree(p);
		errno = ce == cudaErrorMemoryAllocation ? ENOMEM : EIO;
		return NULL;
	}
	return p;
}

void kvl_gpu_vram_free(void *p)
{
	if (p != NULL)
		cudaFree(p);
}

int kvl_gpu_vram_fill_pattern(void *p, uint64_t len, uint32_t seed, char *err, size_t errlen)
{
	const uint64_t chunk = 4u << 20;
	uint8_t *buf = malloc(chunk);
	cudaError_t ce = cudaSuccess;

	if (buf == NULL) {
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	for (uint64_t off = 0; off < len && ce == cudaSuccess; off += chunk) {
		uint64_t n = len - off < chunk ? len - off : chunk;

		kvl_pattern_fill(buf, n, seed, off);
		ce = cudaMemcpy((uint8_t *)p + off, buf, n, cudaMemcpyHostToDevice);
	}
	free(buf);
	if (ce != cudaSuccess) {
		snprintf(err, errlen, "cannot fill VRAM at %p: %s", p, cudaGetErrorString(ce));
		return -EIO;
	}
	return 0;
}

static void publish(struct kvl_gpu *g, uint64_t free_b)
{
	uint64_t budget = free_b > g->reserve_bytes ? free_b - g->reserve_bytes : 0;

	__atomic_store_n(&g->free_bytes, free_b, __ATOMIC_RELAXED);
	__atomic_store_n(&g->budget_bytes, budget, __ATOMIC_RELAXED);
	__atomic_store_n(&g->samples, g->samples + 1, __ATOMIC_RELAXED);
}

int kvl_gpu_open(const struct kvl_gpu_conf *conf, struct kvl_gpu *g, char *err, size_t errlen)
{
	struct cudaDeviceProp prop;
	cudaError_t ce;
	size_t free_b = 0, total_b = 0;
	int attr = 0;

	memset(g, 0, sizeof(*g));
	g->device_id = (int)conf->device_id;
	g->reserve_bytes = (uint64_t)conf->vram_reserve_mb << 20;
	ce = cudaGetDeviceCount(&g->device_count);
	if (ce != cudaSuccess || g->device_count == 0) {
		snprintf(err, errlen,
			 "gpu.enable = true but no CUDA device is usable: %s (is there a GPU and "
			 "its driver? set [gpu] enable = false to run without one)",
			 ce != cudaSuccess ? cudaGetErrorString(ce) : "device count is 0");
		return -ENODEV;
	}
	if (g->device_id >= g->device_count) {
		snprintf(err, errlen,
			 "gpu.device_id = %d but this host has %d CUDA device%s (0..%d)",
			 g->device_id, g->device_count, g->device_count == 1 ? "" : "s",
			 g->device_count - 1);
		return -ENODEV;
	}
	ce = cudaSetDevice(g->device_id);
	if (ce == cudaSuccess)
		ce = cudaGetDeviceProperties(&prop, g->device_id);
	if (ce == cudaSuccess)
		ce = cudaDeviceGetPCIBusId(g->pci_bus_id, sizeof(g->pci_bus_id), g->device_id);
	if (ce == cudaSuccess)
		ce = cudaDeviceGetAttribute(&attr, cudaDevAttrGPUDirectRDMASupported, g->device_id);
	if (ce == cudaSuccess)
		ce = cudaMemGetInfo(&free_b, &total_b);
	if (ce != cudaSuccess) {
		snprintf(err, errlen, "gpu.device_id = %d: cannot open the device: %s",
			 g->device_id, cudaGetErrorString(ce));
		return -EIO;
	}
	snprintf(g->name, sizeof(g->name), "%.*s", (int)sizeof(g->name) - 1, prop.name);
	g->gpudirect_rdma = attr != 0;
	g->total_bytes = total_b;
	if (conf->gpudirect == KVL_TRI_ON && !g->gpudirect_rdma) {
		snprintf(err, errlen,
			 "gpu.gpudirect = true but %s (device %d, %s) does not support GPUDirect "
			 "RDMA; set gpudirect = auto to stage through host memory",
			 g->name, g->device_id, g->pci_bus_id);
		return -ENOTSUP;
	}
	if (g->reserve_bytes >= total_b) {
		snprintf(err, errlen,
			 "gpu.vram_reserve_mb = %u is not below the device's %llu MiB of memory",
			 conf->vram_reserve_mb, (unsigned long long)(total_b >> 20));
		return -EINVAL;
	}
	publish(g, free_b);
	g->open = true;
	return 0;
}

int kvl_gpu_sample(struct kvl_gpu *g)
{
	size_t free_b, total_b;
	cudaError_t ce = cudaMemGetInfo(&free_b, &total_b);

	if (ce != cudaSuccess) {
		/* Keep the last budget: a failed sample must not free VRAM we never had. */
		__atomic_store_n(&g->sample_errors, g->sample_errors + 1, __ATOMIC_RELAXED);
		return -EIO;
	}
	publish(g, free_b);
	return 0;
}

int kvl_gpu_host_register(struct kvl_gpu *g, void *p, uint64_t len, uint64_t *ns, char *err,
			  size_t errlen)
{
	uint64_t t0 = kvl_now_ns();
	cudaError_t ce =
		cudaHostRegister(p, len, cudaHostRegisterPortable | cudaHostRegisterMapped);

	*ns = kvl_now_ns() - t0;
	if (ce != cudaSuccess) {
		(void)cudaGetLastError(); /* the error is reported here, not by the next call */
		snprintf(err, errlen, "cudaHostRegister of %llu MiB on %s (device %d): %s",
			 (unsigned long long)(len >> 20), g->name, g->device_id,
			 cudaGetErrorString(ce));
		return -EIO;
	}
	return 0;
}

void kvl_gpu_host_unregister(struct kvl_gpu *g, void *p)
{
	(void)g;
	(void)cudaHostUnregister(p);
}

#else /* !KVL_HAVE_CUDA */

#define NO_CUDA                                                                                \
	"this kvlane was built without CUDA (meson found no toolkit, or -Dcuda=disabled): it " \
	"cannot place or register GPU memory; rebuild with the CUDA toolkit installed"

int kvl_gpu_device_check(int device, char *pci, size_t pcilen, char *err, size_t errlen)
{
	(void)device;
	(void)pci;
	(void)pcilen;
	snprintf(err, errlen, "%s", NO_CUDA);
	return -ENOTSUP;
}

int kvl_gpu_mem_detect(const void *p, uint64_t len, struct kvl_mem_info *mi, char *err,
		       size_t errlen)
{
	memset(mi, 0, sizeof(*mi));
	mi->device = -1;
	return host_check(p, len, mi, err, errlen);
}

void *kvl_gpu_vram_alloc(int device, uint64_t len, char *err, size_t errlen)
{
	(void)device;
	(void)len;
	snprintf(err, errlen, "%s", NO_CUDA);
	errno = ENOTSUP;
	return NULL;
}

void kvl_gpu_vram_free(void *p)
{
	(void)p;
}

int kvl_gpu_mr_reg(struct kvl_verbs_dev *dev, void *base, uint64_t len, uint32_t flags,
		   uint32_t *rkey, uint64_t *ns, uint8_t *method, char *err, size_t errlen)
{
	(void)dev, (void)base, (void)len, (void)flags, (void)rkey, (void)ns, (void)method;
	snprintf(err, errlen, "%s", NO_CUDA);
	return -ENOTSUP;
}

int kvl_gpu_vram_fill_pattern(void *p, uint64_t len, uint32_t seed, char *err, size_t errlen)
{
	(void)p;
	(void)len;
	(void)seed;
	snprintf(err, errlen, "%s", NO_CUDA);
	return -ENOTSUP;
}

int kvl_gpu_open(const struct kvl_gpu_conf *conf, struct kvl_gpu *g, char *err, size_t errlen)
{
	(void)conf;
	memset(g, 0, sizeof(*g));
	snprintf(err, errlen,
		 "gpu.enable = true but this kvlaned was built without CUDA (meson found no "
		 "toolkit, or -Dcuda=disabled); rebuild with the CUDA toolkit installed or set "
		 "[gpu] enable = false");
	return -ENOTSUP;
}

int kvl_gpu_sample(struct kvl_gpu *g)
{
	(void)g;
	return -ENOTSUP;
}

int kvl_gpu_host_register(struct kvl_gpu *g, void *p, uint64_t len, uint64_t *ns, char *err,
			  size_t errlen)
{
	(void)g, (void)p, (void)len;
	*ns = 0;
	snprintf(err, errlen, "this kvlaned was built without CUDA");
	return -ENOTSUP;
}

void kvl_gpu_host_unregister(struct kvl_gpu *g, void *p)
{
	(void)g, (void)p;
}

#endif
