/* SPDX-License-Identifier: BSD-3-Clause */
/* GPU memory registered for RDMA: dma-buf first, peer memory second, and why neither worked. */
#ifndef KVL_LCORES_GPUMEM_H
#define KVL_LCORES_GPUMEM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct ibv_pd;
struct ibv_mr;

/* How a GPU range was registered. */
enum kvl_gpumem_method {
	KVL_GPUMEM_NONE = 0,
	KVL_GPUMEM_DMABUF = 1,	/* cuMemGetHandleForAddressRange + ibv_reg_dmabuf_mr */
	KVL_GPUMEM_PEERMEM = 2, /* plain ibv_reg_mr on a GPU address: nvidia_peermem */
};

struct kvl_gpumem_mr {
	struct ibv_mr *mr;
	uint32_t lkey, rkey;
	enum kvl_gpumem_method method;
	uint64_t ns; /* time the registration took */
};

/* What CUDA says an address is. */
enum kvl_gpumem_kind {
	KVL_GPUMEM_UNKNOWN = 0, /* not CUDA's: plain host memory, or memory CUDA has freed */
	KVL_GPUMEM_HOST = 1,	/* host memory CUDA pinned (cudaHostAlloc, cudaHostRegister) */
	KVL_GPUMEM_DEVICE = 2,	/* VRAM (cudaMalloc, cuMemAlloc, a framework's allocator) */
	KVL_GPUMEM_MANAGED = 3, /* cudaMallocManaged: pages migrate between host and GPU */
};

struct kvl_gpumem_range {
	enum kvl_gpumem_kind kind;
	int device;	 /* DEVICE / MANAGED: the GPU's ordinal */
	uintptr_t start; /* the allocation holding the first byte (DEVICE, MANAGED) */
	uint64_t size;
};

/*
 * What CUDA says of [p, p + len), from cuPointerGetAttributes (memory type, device ordinal,
 * range start and size) at its first and last byte. 0 with @r filled; -ERANGE with a message
 * when the range runs past its allocation's end (naming the allocation it crosses into, or
 * that it leaves GPU memory), or starts outside GPU memory and ends inside it; -ENODEV when
 * there is no CUDA driver or device (the message says which). KVL_GPUMEM_UNKNOWN is what both
 * host memory and a freed cudaMalloc block answer: the caller tells them apart (the CPU can
 * read one of them).
 */
int kvl_gpumem_query(const void *p, uint64_t len, struct kvl_gpumem_range *r, char *err,
		     size_t errlen);

/* What this host offers for GPUDirect RDMA, each with the cause when it is missing. */
struct kvl_gpumem_probe {
	int rdma_devices;    /* ibv_get_device_list's count */
	bool dmabuf_export;  /* the GPU exported a dma-buf fd for a test range */
	bool peermem;	     /* /sys/module/nvidia_peermem exists */
	bool gpudirect_attr; /* CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED */
	char rdma_why[160];
	char dmabuf_why[200];
	char peermem_why[160];
};

/*
 * Look at the host for @gptr's device: RDMA devices, dma-buf export of [gptr, gptr + len),
 * nvidia_peermem. Registers nothing. Returns 0, or a negative errno when @gptr is not GPU
 * memory (with the message in @err).
 */
int kvl_gpumem_probe(void *gptr, uint64_t len, struct kvl_gpumem_probe *p, char *err,
		     size_t errlen);

/*
 * Open RDMA device @name (NULL: the first) and a protection domain on it. NULL with a
 * message when there is none: it says there is no RDMA device (and what sysfs shows), and
 * what the GPU side would offer, so the operator sees every missing piece at once.
 */
struct ibv_pd *kvl_gpumem_open_pd(const char *name, char *err, size_t errlen);
void kvl_gpumem_close_pd(struct ibv_pd *pd);

/*
 * Register GPU memory [gptr, gptr + len) on @pd for local access and the remote @flags
 * (enum kvl_seg_flags): through dma-buf when the GPU exports one and the NIC imports it, else
 * through peer memory (ibv_reg_mr, which needs nvidia_peermem). Returns 0, or a negative errno
 * with a message naming each method's cause: not GPU memory, no dma-buf export (and the
 * driver's words), dma-buf import refused by the NIC, nvidia_peermem not loaded.
 */
int kvl_gpumem_reg(struct ibv_pd *pd, void *gptr, uint64_t len, uint32_t flags,
		   struct kvl_gpumem_mr *out, char *err, size_t errlen);
void kvl_gpumem_dereg(struct kvl_gpumem_mr *m);

const char *kvl_gpumem_method_name(enum kvl_gpumem_method m);

#endif /* KVL_LCORES_GPUMEM_H */
