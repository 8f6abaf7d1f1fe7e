/* SPDX-License-Identifier: BSD-3-Clause */
/* The GPU as the runtime sees it: which device, and how much VRAM prefetch may use. */
#ifndef KVL_RUNTIME_GPU_H
#define KVL_RUNTIME_GPU_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "config.h"
#include "kvlane/kvlane.h"

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

/* What a local range is: detected (cuPointerGetAttributes), never declared by the caller. */
struct kvl_mem_info {
	int kind;	       /* enum kvl_mem_kind (kvlane.h): KVL_MEM_HOST or KVL_MEM_GPU */
	int device;	       /* KVL_MEM_GPU: the CUDA ordinal, else -1 */
	char pci_bus_id[32];   /* KVL_MEM_GPU: its PCI address ("0000:19:00.0") */
	uintptr_t alloc_start; /* KVL_MEM_GPU: the allocation holding the range */
	uint64_t alloc_size;
};

/*
 * Detect what [p, p + len) is. 0 with @mi filled, or a negative errno with a message that names
 * the cause: -ERANGE (a GPU range crossing two allocations or running past its allocation's
 * end, or mixing host and GPU memory), -EFAULT (neither host memory the CPU can read, nor live
 * GPU memory: unmapped, or a freed cudaMalloc block), -ENOTSUP (managed memory). On a host
 * without a GPU or a build without CUDA every range CUDA could not know is checked as host
 * memory (mapped readable in /proc/self/maps).
 */
int kvl_gpu_mem_detect(const void *p, uint64_t len, struct kvl_mem_info *mi, char *err,
		       size_t errlen);

/* Check that GPU @device exists and can hold a segment; its PCI address in @pci. 0, or -ENOTSUP
 * (built without CUDA), -ENODEV (no GPU, or no such device: the message says how many there
 * are), -EIO. */
int kvl_gpu_device_check(int device, char *pci, size_t pcilen, char *err, size_t errlen);

/* @len bytes of VRAM on @device (cudaMalloc), zeroed; NULL with a message (errno set). */
void *kvl_gpu_vram_alloc(int device, uint64_t len, char *err, size_t errlen);
void kvl_gpu_vram_free(void *p);

/* Write kvl_pattern_fill()'s bytes for (@seed, offset 0) into VRAM [p, p + len), through a
 * host buffer: a GPU [segment.*] with fill = pattern. 0 or -EIO with a message. */
int kvl_gpu_vram_fill_pattern(void *p, uint64_t len, uint32_t seed, char *err, size_t errlen);

struct kvl_verbs_dev;

/*
 * Register VRAM [base, base + len) on RDMA device @dev for the remote @flags (enum
 * kvl_seg_flags): dma-buf first, peer memory second (lcores/gpu/gpumem.c); the device's
 * lookups take the MR and its close releases it. 0 with the rkey, the time it took and
 * *@method (enum kvl_seg_reg, runtime/segments.h), or a negative errno with each method's cause.
 */
int kvl_gpu_mr_reg(struct kvl_verbs_dev *dev, void *base, uint64_t len, uint32_t flags,
		   uint32_t *rkey, uint64_t *ns, uint8_t *method, char *err, size_t errlen);
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
