/* SPDX-License-Identifier: BSD-3-Clause */
/* The local segment registry: what the lcores check addresses against, and what peers see. */
#ifndef KVL_RUNTIME_SEGMENTS_H
#define KVL_RUNTIME_SEGMENTS_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "config.h"
#include "ctrl_proto.h"
#include "gpu.h"
#include "pool.h"
#include "xfer.h"

struct kvl_verbs_dev;

/* How a segment was registered on one NIC. */
enum kvl_seg_reg {
	KVL_SEG_REG_NONE = 0, /* not an RDMA NIC (tcp), or none on this runtime */
	KVL_SEG_REG_MR,	      /* host memory: ibv_reg_mr */
	KVL_SEG_REG_DMABUF,   /* GPU memory: cuMemGetHandleForAddressRange + ibv_reg_dmabuf_mr */
	KVL_SEG_REG_PEERMEM,  /* GPU memory: ibv_reg_mr through nvidia_peermem */
};

/* "none", "ibv_reg_mr", "dmabuf", "peermem" (telemetry's words). */
const char *kvl_seg_reg_name(int m);

/* A local segment: what peers are told (desc) and what RDMA registration gave. */
struct kvl_local_seg {
	bool live;
	struct kvl_seg_desc desc;
	void *base;
	void *owned; /* allocated by kvlane (rte_malloc or the pool), freed at the end; NULL if
		      * registered */
	bool pooled; /* inside the [memory] pool: it uses the pool's MR on every NIC */
	uint32_t rkey[KVL_MAX_NICS];   /* on each RDMA NIC's device */
	uint64_t reg_ns[KVL_MAX_NICS]; /* what ibv_reg_mr took there (pinning every page) */
	uint8_t reg[KVL_MAX_NICS];     /* enum kvl_seg_reg, on each NIC */
	struct kvl_mem_info mem;       /* host or GPU (which device): detected */
};

struct kvl_local_segs {
	struct kvl_seg_table tab;		 /* read by the lcores without locks */
	struct kvl_local_seg meta[KVL_MAX_SEGS]; /* guarded by @lock */
	uint32_t version;			 /* bumped at every registration */
	uint32_t hwm; /* slots ever used (ids 1..hwm): what lookups by address scan */
	pthread_mutex_t lock;
	/* the RDMA devices every segment is registered on, by NIC index (kvl_segs_attach) */
	struct kvl_verbs_dev *dev[KVL_MAX_NICS];
	const char *dev_label[KVL_MAX_NICS];
	/* the [memory] pool (pool.base NULL: none), registered on each device at attach */
	struct kvl_pool pool;
};

void kvl_segs_init(struct kvl_local_segs *s);
void kvl_segs_fini(struct kvl_local_segs *s);

/* Register every segment from now on on @dev too (NIC @nic, @label in logs), and the pool,
 * when there is one, once: its one MR on @dev serves every segment carved from it. Call
 * before the first kvl_segs_add(): segments registered earlier are not added to it. Returns
 * 0, or the pool's registration error (negative errno, the message in @err). */
int kvl_segs_attach(struct kvl_local_segs *s, unsigned nic, struct kvl_verbs_dev *dev,
		    const char *label, char *err, size_t errlen);

/* The one descriptor builder: @layers x @planes x @blocks blocks of @block_bytes, laid out
 * layer after layer, K plane before V plane, with @flags (enum kvl_seg_flags). */
void kvl_seg_desc_make(uint32_t layers, uint32_t planes, uint32_t blocks, uint32_t block_bytes,
		       uint32_t flags, struct kvl_seg_desc *d);

/* Register [@base, @base + @desc->length) as segment @name on every attached device (inside
 * the pool: the pool's registration is used, nothing is registered), then publish it to the
 * lcores. @owned is freed with it at kvl_segs_release() (back to the pool when it is the
 * pool's). 0 with *@id set,
 * -ENOSPC (KVL_MAX_SEGS used), or the registration's negative errno (logged). */
int kvl_segs_add(struct kvl_local_segs *s, const char *name, void *base, void *owned,
		 const struct kvl_seg_desc *desc, uint32_t *id);

/*
 * The GPU twin of kvl_segs_add(): [@base, @base + @desc->length) is VRAM of @mem->device
 * (kvl_gpu_mem_detect). It is registered on every attached RDMA device through
 * kvl_gpumem_reg (dma-buf first, peer memory second, the method recorded), and marked
 * KVL_SEG_GPU in the lcores' table (never in what peers see). With no RDMA device attached it
 * is registered nowhere and usable locally. @owned (cudaMalloc'd) is freed with it. 0 with
 * *@id set, or a negative errno with the message in @err.
 */
int kvl_segs_add_gpu(struct kvl_local_segs *s, const char *name, void *base, void *owned,
		     const struct kvl_seg_desc *desc, const struct kvl_mem_info *mem, uint32_t *id,
		     char *err, size_t errlen);

/*
 * Zeroed host memory for a segment or staging region of @len bytes: carved from the pool when
 * there is one (whole chunks), else rte_zmalloc'd on @socket. NULL with the cause in @err
 * (the pool's free chunks and the key to raise, or DPDK memory and -m).
 */
void *kvl_segs_host_alloc(struct kvl_local_segs *s, const char *what, uint64_t len, int socket,
			  char *err, size_t errlen);
/* Give it back where it came from (NULL: nothing). */
void kvl_segs_host_free(struct kvl_local_segs *s, void *mem);

/* The id of the live segment holding [p, p + len) whole, or 0 when none does (per transfer:
 * scans only the slots ever used). */
uint32_t kvl_segs_find(const struct kvl_local_segs *s, const void *p, uint64_t len);

/* Whether a live segment owns (frees at the end) @mem. */
bool kvl_segs_owns(struct kvl_local_segs *s, const void *mem);

/* Call @fn for every live segment, in id order, under the registry's lock (@fn must not call
 * back into the registry). Returns the version the walk saw. */
uint32_t kvl_segs_visit(struct kvl_local_segs *s,
			void (*fn)(void *arg, const struct kvl_local_seg *seg), void *arg);

/* The end: every segment unpublished and what kvlane allocated freed. Their devices must be
 * closed already (registrations go with their device, before the memory goes). The pool
 * itself stays mapped: lifecycle.c unmaps it once CUDA has let go of it too. */
void kvl_segs_release(struct kvl_local_segs *s);

#endif /* KVL_RUNTIME_SEGMENTS_H */
