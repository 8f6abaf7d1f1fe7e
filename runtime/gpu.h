/* SPDX-License-Identifier: BSD-3-Clause */
/* The GPU as the runtime sees it: which device, and how much VRAM prefetch may use. */
#ifndef KVL_RUNTIME_GPU_H
#define KVL_RUNTIME_GPU_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "config.h"

struct kvl_gpu {
	bool open;
	int device_id;
	int device_count;
	char name[128];
	char pci_bus_id[32];
	bool gpudirect_rdma; /* the device says it can do GPUDirect RDMA */
	uint64_t total_bytes;
	uint64_t reserve_bytes;
	/* Written by the main lcore at every sample, read by lcores and telemetry (relaxed). */
	uint64_t free_bytes;
	uint64_t budget_bytes; /* free - reserve, 0 when free is below the reserve */
	uint64_t samples;
	uint64_t sample_errors;
};

/*
 * Open the configured device: check it exists, read its name, PCI address, memory and
 * GPUDirect RDMA support, take a first sample. Returns 0, or a negative errno with a message
 * naming the [gpu] key and the cause (built without CUDA, no device, device_id out of range,
 * gpudirect = true on a device without it).
 */
int kvl_gpu_open(const struct kvl_gpu_conf *conf, struct kvl_gpu *g, char *err, size_t errlen);

/* Sample free VRAM (cudaMemGetInfo) and publish the budget. Off the hot path: the main lcore
 * calls it every [sched] resize_interval_ms. Returns 0 or a negative errno. */
int kvl_gpu_sample(struct kvl_gpu *g);

/* Pin host memory [@p, @p + @len) for CUDA (cudaHostRegister, portable and mapped): copies
 * from it run at the pinned rate. What it took in *@ns. 0, or a negative errno with the
 * driver's words in @err (-ENOTSUP when built without CUDA). */
int kvl_gpu_host_register(struct kvl_gpu *g, void *p, uint64_t len, uint64_t *ns, char *err,
			  size_t errlen);
void kvl_gpu_host_unregister(struct kvl_gpu *g, void *p);

/* The budget as last published. */
static inline uint64_t kvl_gpu_budget(const struct kvl_gpu *g)
{
	return __atomic_load_n(&g->budget_bytes, __ATOMIC_RELAXED);
}

#endif /* KVL_RUNTIME_GPU_H */
