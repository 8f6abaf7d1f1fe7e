/* SPDX-License-Identifier: BSD-3-Clause */
/* GPU probe: device checks at start, then free VRAM sampled into the prefetch budget. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "gpu.h"
#include "kvl_build_config.h"
#include "kvl_clock.h"

#if KVL_HAVE_CUDA
#include <cuda_runtime_api.h>

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
