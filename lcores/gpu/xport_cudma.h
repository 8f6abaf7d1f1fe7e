/* SPDX-License-Identifier: BSD-3-Clause */
/* Local DMA transport: pinned host memory (the remote tier) <-> GPU staging, one CUDA stream. */
#ifndef KVL_LCORES_XPORT_CUDMA_H
#define KVL_LCORES_XPORT_CUDMA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#include "xfer.h"
#include "xport_cudma_pick.h"

#ifdef __cplusplus
extern "C" { /* the benchmark and the gather kernel are CUDA C++ */
#endif

/*
 * For hosts without an RDMA NIC, and to measure the GPU side of the pipeline on its own: the
 * "remote" segments are pinned host memory in this process, the local ranges GPU memory, and
 * the copy engine (or one gather kernel) moves the bytes. It offers the same post / progress /
 * reap contract as the RDMA transports (kvl_xport_cudma below), so the lcore drives it the
 * same way. The runtime uses it as the host tier's engine (runtime/tier.c, [sched] tier_copy),
 * which passes it the scheduler's estimates after each DONE (lcores/nic_sched.c); no peer
 * connection is one.
 *
 * A flush (kvl_cudma_progress) turns the requests posted since the last one into one batch:
 * requests contiguous on both sides merge into one copy (up to merge_max); a copy of at least
 * copy_min bytes goes to the copy engine alone (cudaMemcpyAsync: it runs at the link's rate);
 * the smaller ones, which would each pay the copy engine's per-copy cost (~2.5-4 us on H200,
 * 64 KiB copies at a third of the link), go together as `small` below says. A batch
 * completes as a whole (an event after it); its requests complete in posting order.
 */
enum kvl_cudma_small {
	KVL_CUDMA_GATHER = 0, /* one gather kernel per batch (SMs read/write across PCIe), copies
			       * of ce_min bytes or more on the copy engine beside it */
	KVL_CUDMA_BATCH = 1,  /* cudaMemcpyBatchAsync: the copy engine, batch_max copies a call */
	KVL_CUDMA_EACH = 2,   /* one cudaMemcpyAsync per copy: the baseline */
	/* Per batch, from the consumer's compute estimate (kvl_cudma_set_estimates): the copy
	 * engine (BATCH, auto_batch_max a call) when the step it predicts is not longer that
	 * way, else GATHER (xport_cudma_pick.h); with auto_measured, each method's rate as
	 * measured on this connection's own batches once it has enough samples (the auto_*_ps
	 * below until then), and an occasional probe batch on the method not chosen. Without an
	 * estimate, GATHER. */
	KVL_CUDMA_AUTO = 3,
};

struct kvl_cudma_opts {
	int device;	    /* CUDA device of the local segments */
	unsigned depth;	    /* requests posted and not reaped, at most (0: 8192) */
	uint64_t merge_max; /* longest merged copy (0: 64 MiB) */
	uint64_t copy_min;  /* a copy this long or longer goes alone (0: 1 MiB) */
	enum kvl_cudma_small small;
	unsigned gather_ctas;  /* thread blocks of the gather kernel (0: 8: see xport_cudma.c) */
	unsigned gather_depth; /* 16-byte loads in flight per gather thread: 4, 8, 16 (0: 8) */
	/* Percent of a batch's small-copy bytes (GATHER only) given to the copy engine as one
	 * cudaMemcpyBatchAsync on a second stream, beside the gather kernel: the two share the
	 * link (0: none). */
	unsigned ce_share;
	/* GATHER: small copies of at least this many bytes go to the copy engine (cudaMemcpyBatch-
	 * Async, batch_max a call, on a second stream) beside the gather kernel (0: 32 KiB;
	 * UINT64_MAX: none). On the H200 (docs/gpu-bench.md, 2026-11-30) 64 KiB blocks moved
	 * at 90-92% of the pinned ceiling that way and hid under attention at 96% (slowing it
	 * 2.4%), against 87-89% and 90% (+5.7%) through the kernel; 16 KiB blocks are faster
	 * and steadier through the kernel (75-80%) than on the engine (27-60% run to run). */
	uint64_t ce_min;
	/* Copies per cudaMemcpyBatchAsync call at most (0: 64). Thousands in one call ran at
	 * 8.7% of the link at 16 KiB and 76% at 64 KiB; 32-256 a call at 90-95% at 64 KiB. */
	unsigned batch_max;
	/*
	 * AUTO: how a step goes either way, the step taking the longer of its compute (slowed by
	 * the copies beside it) and its transfer. Measured on the H200 at 16 KiB
	 * (docs/gpu-bench.md, 2026-11-30, scenario A from a pinned thread): the copy engine in
	 * calls of 32 at 27.6 GB/s (36 ps a byte), attention +2.7%; the gather kernel at 44 GB/s
	 * (23 ps a byte), attention +5.6%. 0: those.
	 */
	unsigned auto_batch_max;		       /* copies per call on the engine (0: 32) */
	uint32_t auto_ce_ps, auto_gather_ps;	       /* picoseconds a byte */
	uint32_t auto_ce_slow_pm, auto_gather_slow_pm; /* compute slowed, per mille (0: 27, 56) */
	/* AUTO: use each method's rate as measured on this connection's batches once it has
	 * enough samples, and probe the method not chosen (xport_cudma_pick.h); false: the
	 * fixed auto_*_ps alone (the rates are measured and shown either way) */
	bool auto_measured;
	cudaStream_t stream; /* NULL: the transport creates its own (non-blocking) */
};

struct kvl_cudma_stats {
	uint64_t posted, completed, refused, failed;
	uint64_t bytes_read, bytes_written;
	uint64_t batches;	/* flushes that launched something */
	uint64_t merged;	/* requests that extended the copy before them */
	uint64_t engine_copies; /* cudaMemcpyAsync calls */
	uint64_t small_copies;	/* copies gathered into a kernel or a batch call */
	uint64_t launches;	/* gather kernels or cudaMemcpyBatchAsync calls */
	uint64_t ce_shared;	/* small copies given to the copy engine beside a gather */
	uint64_t auto_engine, auto_gather; /* AUTO: batches that went each way */
	/* batches with small copies, by where those went, whatever the method: the gather
	 * kernel (its ce_min / ce_share part on the engine beside it counts here), or the copy
	 * engine alone (cudaMemcpyBatchAsync) */
	uint64_t batches_gather, batches_engine;
	/* Every method: each batch's service time as reaped (its completion seen by progress
	 * minus the later of its launch and the previous batch's completion), summed per
	 * method with its bytes; AUTO's measured rates and probes (xport_cudma_pick.h). */
	uint64_t svc_ns_engine, svc_bytes_engine, svc_ns_gather, svc_bytes_gather;
	struct kvl_cudma_rates rates;
	uint64_t cuda_errors;
	char last_cuda_error[96];
};

struct kvl_cudma_conn;

struct kvl_cudma_conn *kvl_cudma_new(const struct kvl_cudma_opts *o, char *err, size_t errlen);
void kvl_cudma_free(struct kvl_cudma_conn *c);

/* A remote-tier segment: page-locked host memory CUDA knows (cudaHostAlloc or
 * cudaHostRegister, mapped), addressed by peers as @id with @flags (enum kvl_seg_flags). */
int kvl_cudma_add_remote(struct kvl_cudma_conn *c, uint32_t id, void *base, uint64_t len,
			 uint32_t flags, char *err, size_t errlen);
/* A remote segment in GPU memory this process can address: another process's VRAM opened by
 * CUDA IPC (lcores/xport/xport_ipc.c) on this device or a peer-accessible one. Copies from it
 * are device to device. del_remote: later posts of @id are refused (what was posted keeps
 * the address it resolved). */
int kvl_cudma_add_remote_gpu(struct kvl_cudma_conn *c, uint32_t id, void *base, uint64_t len,
			     uint32_t flags, char *err, size_t errlen);
void kvl_cudma_del_remote(struct kvl_cudma_conn *c, uint32_t id);
/* Whether [@p, @p + @len) is inside a local segment already added. */
bool kvl_cudma_has_local(const struct kvl_cudma_conn *c, const void *p, uint64_t len);
/* A local segment: GPU memory on the transport's device (cudaMalloc). */
int kvl_cudma_add_local(struct kvl_cudma_conn *c, void *base, uint64_t len, char *err,
			size_t errlen);

/* Check and queue one request: 0, -EAGAIN when depth requests are outstanding, -EPIPE after
 * kvl_cudma_fail_all. A request that fails its checks (KVL_ERR_LOCAL, NO_SEGMENT, ACCESS,
 * BOUNDS) is taken and completes with that status, moving nothing. */
int kvl_cudma_post(struct kvl_cudma_conn *c, const struct kvl_wr *wr);
/* Launch what was queued as one batch, then collect finished batches. Returns work done. */
unsigned kvl_cudma_progress(struct kvl_cudma_conn *c);
unsigned kvl_cudma_reap(struct kvl_cudma_conn *c, struct kvl_wc *wc, unsigned max);
unsigned kvl_cudma_outstanding(const struct kvl_cudma_conn *c);
/* kvl_now_ns() (@now: its value now) by which kvl_cudma_progress should run again to find
 * the oldest batch in flight complete, from its bytes and its method's measured rate;
 * UINT64_MAX with nothing in flight. A copy's end raises no event: an lcore naps until this. */
uint64_t kvl_cudma_due(const struct kvl_cudma_conn *c, uint64_t now);
/* AUTO: the consumer's compute per step, in ns, and the bytes a step brings (the scheduler's
 * estimates); later batches are chosen by them. 0 compute: no estimate (GATHER). */
void kvl_cudma_set_estimates(struct kvl_cudma_conn *c, uint64_t compute_ns, uint64_t step_bytes);
/* Wait for the stream, then complete everything outstanding with @status; later posts fail. */
void kvl_cudma_fail_all(struct kvl_cudma_conn *c, int status);
cudaStream_t kvl_cudma_stream(const struct kvl_cudma_conn *c);
const struct kvl_cudma_stats *kvl_cudma_stats(const struct kvl_cudma_conn *c);

extern const struct kvl_xport_ops kvl_xport_cudma;

/* ---- the gather kernel (xport_cudma_gather.cu) ---- */

#define KVL_CUDMA_GATHER_MAX 1024 /* copies per launch: they travel as kernel parameters */

struct kvl_cudma_copy {
	uint64_t dst, src; /* device-visible addresses */
	uint64_t len;
};

/*
 * Load the gather kernel's code now, on the device current to the caller. CUDA loads a kernel
 * lazily by default (CUDA_MODULE_LOADING=LAZY since 12.2), at its first launch, and loading may
 * synchronise the context: a first launch from the NIC lcore while an engine's stream waits on
 * a READY word that only this copy would release never returns. So it is loaded at set-up.
 */
cudaError_t kvl_cudma_gather_load(void);

/* One launch copying @n (<= KVL_CUDMA_GATHER_MAX) ranges on @st with @ctas thread blocks of
 * 128 threads, each thread with @depth (4, 8 or 16) 16-byte loads in flight. */
cudaError_t kvl_cudma_gather_launch(const struct kvl_cudma_copy *cp, unsigned n, unsigned ctas,
				    unsigned depth, cudaStream_t st);

#ifdef __cplusplus
}
#endif

#endif /* KVL_LCORES_XPORT_CUDMA_H */
