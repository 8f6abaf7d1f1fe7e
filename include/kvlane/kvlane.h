/* SPDX-License-Identifier: BSD-3-Clause */
/* kvlane public C API: the only header an inference engine includes. */
#ifndef KVLANE_H
#define KVLANE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define KVLANE_VERSION_MAJOR 0
#define KVLANE_VERSION_MINOR 1
#define KVLANE_VERSION_PATCH 0

/* Encoded as (major << 16) | (minor << 8) | patch, for compile-time checks. */
#define KVLANE_VERSION_NUM \
	((KVLANE_VERSION_MAJOR << 16) | (KVLANE_VERSION_MINOR << 8) | KVLANE_VERSION_PATCH)

/*
 * Typed completion status of a transfer. Every transfer completes exactly once, with one of
 * these; none of them stops the process.
 */
enum kvl_status {
	KVL_OK = 0,
	KVL_ERR_BOUNDS = 1,	/* remote offset + length outside the remote segment */
	KVL_ERR_NO_SEGMENT = 2, /* the remote segment id is not registered there */
	KVL_ERR_ACCESS = 3,	/* the remote segment does not allow this operation */
	KVL_ERR_LOCAL = 4,	/* the local range is not inside a registered local segment */
	KVL_ERR_CONN_LOST = 5,	/* the data connection broke while the transfer was in flight */
	KVL_ERR_PEER_DEAD = 6,	/* the peer missed heartbeats for [control] peer_timeout_ms */
	KVL_ERR_PROTOCOL = 7,	/* the peer sent something malformed; its connection was closed */
	KVL_ERR_CANCELED = 8,	/* the runtime stopped before the transfer finished */
	KVL_ERR_TOO_LARGE = 9,	/* longer than the transport's largest message */
	KVL_ERR_NO_PEER = 10,	/* unknown peer handle, or the peer is not connected */
	/* a local or served range is GPU memory and the transport has no copy path to it (tcp:
	 * a WRITE out of VRAM, a peer's request of it, any of it without [gpu] enable and the
	 * [memory] pool; or tcp's copy into VRAM failed) */
	KVL_ERR_GPU_MEMORY = 11,
	KVL_STATUS_COUNT
};

/* "ok", "bounds", "no-segment", ... (stable names, used in telemetry too). */
const char *kvl_status_name(int status);

/* ---- runtime ---- */

struct kvl_runtime;

struct kvl_start_args {
	/* as for rte_eal_init(): argv[0], then EAL arguments; 0 (or argv[0] alone): EAL's
	 * arguments come from the INI's [eal] section (config/README.md) */
	int eal_argc;
	char **eal_argv;
	const char *config;	 /* INI file */
	const char *const *sets; /* "section.key=value" overrides, applied after the file */
	unsigned n_sets;
	const char *sysfs_root; /* NULL: "/sys" */
};

/* Where kvl_start() failed: the stage decides kvlaned's exit status. */
enum kvl_start_stage {
	KVL_START_CONFIG = 3, /* the INI (every error is in the message, one per line) */
	KVL_START_HOST = 4,   /* NIC, GPU, lcores, listeners, segments */
	KVL_START_EAL = 5,    /* rte_eal_init() */
};

/*
 * Load the INI, check the host, start EAL (once per process), the NIC lcores, the control
 * thread (when [control] secret_file is set) and the [segment.*] of the INI. Returns the
 * runtime, or NULL with the reason in @err and the failing stage in *@stage. EAL starts once
 * per process: a second kvl_start, while the first runtime runs or after kvl_stop, returns
 * NULL with errno EALREADY and stage KVL_START_EAL, touching nothing.
 */
struct kvl_runtime *kvl_start(const struct kvl_start_args *a, char *err, size_t errlen, int *stage);

/* Stop everything and release EAL. Transfers still in flight are dropped. */
void kvl_stop(struct kvl_runtime *rt);

/* The control listener's bound address ("127.0.0.1:18515"), "" when the control path is
 * off. With port 0 in the INI this is where peers must connect. */
const char *kvl_listen_addr(const struct kvl_runtime *rt);

/* ---- segments: memory peers may read or write ---- */

/* KV geometry: layers x planes (K, V) x blocks of block_bytes. */
struct kvl_seg_geom {
	uint32_t layers;
	uint32_t planes; /* 1 or 2 */
	uint32_t blocks; /* per layer and plane */
	uint32_t block_bytes;
};

/* Byte offset of (layer, plane, block) in a segment of geometry @g. */
static inline uint64_t kvl_block_offset(const struct kvl_seg_geom *g, uint32_t layer,
					uint32_t plane, uint32_t block)
{
	return (((uint64_t)layer * g->planes + plane) * g->blocks + block) * g->block_bytes;
}

enum kvl_access {
	KVL_REMOTE_READ = 1u << 0,  /* peers may READ from the segment */
	KVL_REMOTE_WRITE = 1u << 1, /* peers may WRITE into it */
};

/* What a segment's memory is. */
enum kvl_mem_kind {
	KVL_MEM_HOST = 0, /* the CPU can read it */
	KVL_MEM_GPU =
		1, /* VRAM of one GPU: only the GPU, its copy engines and GPUDirect reach it */
};

struct kvl_segment {
	uint32_t id; /* what peers name it by */
	void *base;
	uint64_t length;
	struct kvl_seg_geom geom;
	uint32_t
		mem; /* enum kvl_mem_kind: chosen (kvl_seg_alloc*) or detected (kvl_seg_register) */
	int32_t gpu; /* KVL_MEM_GPU: the CUDA device ordinal; -1 for host memory */
};

/* Allocate a zeroed host segment: carved from the [memory] pool when pool_size_mb > 0 (it uses
 * the pool's registration), else DPDK memory (hugepages when EAL has them) on the NIC's NUMA
 * node. Returns 0 or a negative errno (-ENOMEM: the pool has no free run that long, or EAL
 * has no room: raise pool_size_mb or -m; the cause is logged). For it, kvl_seg_alloc_gpu and
 * kvl_seg_register alike: -EINVAL for a zero count, planes other than 1 or 2 or unknown
 * access bits, -EOVERFLOW when layers x planes x blocks x block_bytes does not fit 64 bits,
 * -E2BIG past 1 TiB. */
int kvl_seg_alloc(struct kvl_runtime *rt, const char *name, const struct kvl_seg_geom *g,
		  unsigned access, struct kvl_segment *out);

#define KVL_GPU_CONFIGURED (-1) /* kvl_seg_alloc_gpu(): the runtime's GPU ([gpu] device_id) */

/*
 * Allocate a segment in VRAM of GPU @gpu (a CUDA ordinal, or KVL_GPU_CONFIGURED), zeroed, and
 * register it with every RDMA NIC (dma-buf, else peer memory). With no RDMA NIC it is
 * registered nowhere and usable locally. The CPU cannot touch it: over tcp this side's READs
 * land in it through tcp's bounce buffers (with the [memory] pool), anything else into or
 * out of it is refused (KVL_ERR_GPU_MEMORY). Returns 0, or a
 * negative errno with the reason in kvl_seg_error(): -ENOTSUP (built without CUDA), -ENODEV
 * (no GPU, or no GPU @gpu), -EXDEV (not the GPU of [gpu] device_id while [gpu] enable = true),
 * -ENOMEM (VRAM), -EINVAL (geometry, access), or a registration's errno.
 */
int kvl_seg_alloc_gpu(struct kvl_runtime *rt, const char *name, const struct kvl_seg_geom *g,
		      unsigned access, int gpu, struct kvl_segment *out);

/*
 * Register memory the caller owns (and keeps until kvl_stop()): host memory, or a device
 * pointer (a cudaMalloc block or a sub-range of one, a framework tensor's storage). Which it is
 * is detected (cuPointerGetAttributes), not declared, and returned in @out->mem / @out->gpu;
 * GPU memory is registered as kvl_seg_alloc_gpu()'s is. Returns 0, or a negative errno with the
 * reason in kvl_seg_error(): -ERANGE (a range crossing two allocations, running past its
 * allocation's end, or mixing host and GPU memory), -EFAULT (neither readable host memory nor
 * live GPU memory: unmapped, or freed), -ENOTSUP (CUDA managed memory), -EXDEV (a GPU other
 * than [gpu] device_id while [gpu] enable = true), -EINVAL, -ENOSPC.
 */
int kvl_seg_register(struct kvl_runtime *rt, const char *name, void *base,
		     const struct kvl_seg_geom *g, unsigned access, struct kvl_segment *out);

/* Why the calling thread's last failed kvl_seg_alloc_gpu / kvl_seg_register was refused ("" when it
 * had no more to say than its errno). Valid until its next call. */
const char *kvl_seg_error(void);

/* ---- peers ---- */

typedef uint32_t kvl_peer_t;

/*
 * This host's KV tier ([sched] tier = true): a peer handle of its own, so that one request API
 * serves remote and local KV. kvl_peer_segments() on it lists the local host segments offered
 * as tier (host memory that allows KVL_REMOTE_READ; with staging in VRAM, only those carved
 * from the [memory] pool, which is pinned for the copy engine); kvl_req_open() PULLs their
 * blocks into staging through the same scheduler and NIC lcore as a remote peer's: memcpy on
 * the lcore into host staging, or the copy engine and gather kernel into VRAM staging, where
 * a step is READY only once its copies have completed (a CUDA event the lcore polls). Not a
 * kvl_post() peer (-ENOTCONN). kvl_req_open on it, beside its usual errors: -EACCES for a PUSH
 * (the tier is only read), -ENOENT for a segment it does not offer (unknown, not readable, GPU
 * memory, or outside the pool with VRAM staging), -ERANGE for a block outside its segment.
 * Without [sched] tier both calls answer -ENOTCONN.
 */
#define KVL_PEER_LOCAL_TIER ((kvl_peer_t)0xFFFFFFFEu)

/* Connect to the kvlane at @addr ("host:port" of its [control] listen), authenticate both
 * ways with the shared secret, exchange segments and open the data connections. Blocks up to
 * @timeout_ms. Returns 0, or a negative errno with the reason in @err. */
int kvl_connect(struct kvl_runtime *rt, const char *addr, unsigned timeout_ms, kvl_peer_t *peer,
		char *err, size_t errlen);

/* A segment a peer offers. */
struct kvl_remote_seg {
	uint32_t id;
	uint32_t access; /* enum kvl_access */
	uint64_t length;
	struct kvl_seg_geom geom;
	char name[64];
};

/* The peer's segments; returns how many (up to @max are copied) or a negative errno. */
int kvl_peer_segments(struct kvl_runtime *rt, kvl_peer_t peer, struct kvl_remote_seg *out,
		      unsigned max);

/* ---- transfers ---- */

enum kvl_op_code {
	KVL_WRITE = 1, /* local -> remote segment */
	KVL_READ = 2,  /* remote segment -> local */
};

/* One local range of a scattered transfer. */
struct kvl_iov {
	void *base;
	uint32_t len;
	uint32_t reserved;
};

#define KVL_MAX_IOV 8 /* local ranges one transfer may gather (WRITE) or scatter (READ) */

enum kvl_xfer_flags {
	/* WRITE only: once the bytes have landed, the peer's kvl_poll_notices() returns
	 * @notify (RDMA WRITE_WITH_IMM: no message of its own, no CPU on the peer's data path).
	 * RDMA transports only. */
	KVL_XFER_NOTIFY = 1u << 0,
};

struct kvl_xfer {
	uint64_t cookie;     /* returned in the completion */
	void *local;	     /* n_iov 0: inside a segment registered here */
	uint64_t remote_off; /* offset in the remote segment */
	uint32_t length;     /* bytes (with n_iov: the sum of the ranges' lengths) */
	uint32_t remote_seg; /* id from kvl_peer_segments() */
	uint32_t op;	     /* enum kvl_op_code */
	uint32_t flags;	     /* enum kvl_xfer_flags */
	uint32_t notify;     /* KVL_XFER_NOTIFY: the value the peer is given */
	/* 0: @local. 2..KVL_MAX_IOV: the local side is these ranges, in order (one RDMA work
	 * request with several SGEs; the remote side stays contiguous). RDMA transports only.
	 * Read during kvl_post() only: the array may be reused once it returns. */
	uint32_t n_iov;
	const struct kvl_iov *iov;
};

/*
 * Post up to @n transfers to @peer, spread over its data connections. Returns how many were
 * taken (fewer when queues are full: post the rest later), or a negative errno before any
 * is taken: -ENOTCONN (peer not ready or dead), -EFAULT (a local range outside every local
 * segment), -EINVAL (bad op, n_iov of 1 or over KVL_MAX_IOV, a 0-byte range, lengths that do
 * not add up to @length, KVL_XFER_NOTIFY on a READ, unknown flags), -EOPNOTSUPP (n_iov or
 * KVL_XFER_NOTIFY to a peer reached over tcp). Every taken transfer completes exactly once
 * (kvl_poll).
 */
int kvl_post(struct kvl_runtime *rt, kvl_peer_t peer, const struct kvl_xfer *x, unsigned n);

struct kvl_completion {
	uint64_t cookie;
	uint32_t bytes;
	int32_t status; /* enum kvl_status */
};

/* Take up to @max completions. One thread at a time may poll. */
unsigned kvl_poll(struct kvl_runtime *rt, struct kvl_completion *c, unsigned max);

/* A peer's KVL_XFER_NOTIFY write that has landed in a segment here. */
struct kvl_notice {
	kvl_peer_t peer;
	uint32_t value;	 /* the peer's kvl_xfer.notify */
	uint32_t length; /* bytes that write moved */
	uint32_t reserved;
};

/*
 * Take up to @max notices, oldest first per connection. One thread at a time may poll.
 * Notices not taken are kept up to a bound per connection, then dropped and counted
 * (/kvlane/stats verbs/qp_notes_dropped). After a connection's resync (an RDMA error) a notice
 * may come twice: the write was posted again.
 */
unsigned kvl_poll_notices(struct kvl_runtime *rt, struct kvl_notice *out, unsigned max);
/* ---- requests: the scheduler pulls a request's KV in the order its compute steps use it ----
 *
 * With [sched] staging_mb > 0, each NIC lcore runs a scheduler over a staging region of its
 * own. A request names its blocks on the peer and its compute steps (step k needs a set of
 * blocks); the scheduler READs them into staging, at most a window ahead of compute, with the
 * sum of windows under the budget (free VRAM - reserve, or [sched] budget_mb). A step is
 * READY once its blocks have landed (kvl_req_poll); the engine reads them where
 * kvl_req_block_addr() says and reports the step DONE, which frees what no later step needs.
 * A PUSH request (kvl_req_desc.dir) goes the other way: the scheduler WRITEs the caller's
 * blocks to the peer in the same order and window, and a step is READY once they are there.
 * With KVL_REQ_STEP_FLAGS, READY and DONE are also words in memory the GPU maps
 * (kvl_req_step_flags): the engine's stream waits and writes them, no call per step.
 * With KVL_REQ_ENGINE_DEST a PULL lands in the engine's own registered memory (its paged KV
 * cache, block by block where kvl_req_block.local says) instead of staging.
 * These calls (and kvl_req_poll) are for one thread at a time. With a scheduler running,
 * kvl_post() refuses cookies with bit 63 set: that bit marks the scheduler's own transfers.
 */

typedef uint64_t kvl_req_t; /* 0 is never a request */

enum kvl_req_class {
	KVL_REQ_DECODE = 0,  /* latency: served before PREFILL */
	KVL_REQ_PREFILL = 1, /* bulk */
};

enum kvl_req_dir {
	KVL_REQ_PULL = 0, /* READ the peer's blocks into staging (kvl_req_block_addr), or
			   * into the engine's memory (KVL_REQ_ENGINE_DEST) */
	KVL_REQ_PUSH = 1, /* WRITE local blocks (kvl_req_block.local) to the peer */
};

struct kvl_req_block {
	uint64_t remote_off; /* in the peer's segment remote_seg */
	uint32_t remote_seg;
	uint32_t length; /* 1 .. [sched] slot_kb KiB */
	void *local;	 /* PUSH: the bytes to write, inside a registered local segment;
			  * PULL with KVL_REQ_ENGINE_DEST: where the block lands, inside a
			  * registered local segment (host or GPU memory);
			  * PULL otherwise: must be NULL */
};
/* The layout engines and bindings build arrays of: its size never changes. */
#ifndef __cplusplus
_Static_assert(sizeof(struct kvl_req_block) == 16 + sizeof(void *),
	       "struct kvl_req_block keeps its size");
#endif

struct kvl_req_desc {
	const struct kvl_req_block *blocks;
	uint32_t n_blocks;
	uint32_t n_steps;
	/* Step k needs blocks step_blocks[step_first[k] .. step_first[k + 1]) (n_steps + 1
	 * entries, step_first[0] = 0); every block is named by a step, at most once per step. */
	const uint32_t *step_first;
	const uint32_t *step_blocks;
	uint64_t deadline_us; /* from now; earliest first inside a class; 0: none */
	uint64_t user;	      /* returned in every event */
	uint32_t cls;	      /* enum kvl_req_class */
	uint32_t dir;	      /* enum kvl_req_dir (0: PULL) */
	uint32_t flags;	      /* KVL_REQ_* below; 0: none */
	uint32_t reserved;    /* 0 */
};

#ifndef __cplusplus
_Static_assert(sizeof(struct kvl_req_desc) == 40 + 3 * sizeof(void *),
	       "struct kvl_req_desc keeps its size: new options take flags bits");
#endif

/* kvl_req_desc.flags: READY/DONE words per step (kvl_req_step_flags) instead of
 * kvl_req_step_done, so an engine's stream needs no kvlane call per step. */
#define KVL_REQ_STEP_FLAGS (1u << 0)
/*
 * kvl_req_desc.flags, PULL only: engine-owned destinations. Each block's bytes land at its
 * kvl_req_block.local, inside a local segment the engine registered (kvl_seg_register /
 * kvl_seg_alloc / kvl_seg_alloc_gpu: its paged KV cache, a vLLM/SGLang-style block table of
 * per-layer K/V blocks at scattered block ids), instead of in a staging slot. Steps, windows,
 * priorities and deadlines order the READs as for staging; a block's bytes count against the
 * window and the budget while they are in flight only (once landed they are in the engine's
 * memory, which kvlane does not hold), and take no staging slot (/kvlane/sched slots_free
 * stays; dest_blocks counts them). READY (the event, and the READY word with
 * KVL_REQ_STEP_FLAGS) comes once a step's blocks have landed there; kvl_req_block_addr()
 * returns the engine's own address. The destinations must not overlap one another nor the
 * staging; a request that ends (FAILED, a cancel) while READs are in flight sends its end event
 * only once they are back: until then the NIC may still write the destinations. Remote-adjacent
 * blocks with adjacent destinations in one segment merge into one READ.
 * Over tcp a GPU destination lands through tcp's bounce buffers and a copy on the NIC lcore's
 * stream ([gpu] enable = true and the [memory] pool, which they are carved from; without them
 * -EXDEV says which is missing); READY comes once the copy has completed. Over verbs a GPU
 * destination needs the segment registered by GPUDirect (dma-buf or peer memory).
 */
#define KVL_REQ_ENGINE_DEST (1u << 1)

/*
 * Open a request on @peer (copied: @d may be reused at once). 0 with *@req set, or a negative
 * errno and nothing kept: -ENOTSUP (no scheduler: [sched] staging_mb = 0), -ENOTCONN (unknown
 * peer, or not ready), -EINVAL (malformed: counts, a step naming no block or a block twice,
 * a block no step names, a block index past n_blocks, a bad class, direction or flag, a PULL block
 * with a local address, a PUSH block inside the scheduler's staging; KVL_REQ_ENGINE_DEST: a block
 * with no destination, destinations overlapping each other or the staging, the flag on a PUSH),
 * -EMSGSIZE (a block longer
 * than [sched] slot_kb), -ENOENT (a segment the peer does not offer), -EACCES (one it does not let
 * us READ, or WRITE for a PUSH), -ERANGE (a block outside its segment), -EFAULT (PUSH: a block's
 * local bytes not inside one registered local segment; KVL_REQ_ENGINE_DEST: a destination not
 * inside one registered local segment, or in one the request's NIC has no registration of),
 * -EXDEV (KVL_REQ_ENGINE_DEST: a GPU destination on a NIC whose transport cannot write VRAM:
 * tcp without a GPU open and the pinned [memory] pool), -ENOSPC ([sched] max_requests or max_blocks
 * reached; KVL_REQ_STEP_FLAGS: no free run of n_steps entries in the NIC lcore's flag pool,
 * one entry per [sched] max_blocks), -ENOMEM.
 *
 * PUSH: the scheduler WRITEs the blocks in the order the steps name them, a window ahead
 * under the same budget (what is in flight or written and not DONE counts); a step is READY
 * once its blocks are on the peer, and the local bytes of a block must stay as they are until
 * then. kvl_req_block_addr() gives the block's local address back.
 * Why the calling thread's last kvl_req_open() refused its destinations: kvl_req_error().
 */
int kvl_req_open(struct kvl_runtime *rt, kvl_peer_t peer, const struct kvl_req_desc *d,
		 kvl_req_t *req);

/* Why the calling thread's last kvl_req_open() failed, in words naming the block, its address
 * and the segment or NIC ("" when it succeeded, or failed before its destinations were
 * checked, or on a check that has no words of its own). */
const char *kvl_req_error(void);

/* The engine finished @step. 0, or: -ENOENT (no such request, or it ended), -ERANGE (step
 * index >= n_steps), -EINVAL (the step is not READY yet, or the request was opened with
 * KVL_REQ_STEP_FLAGS: its DONEs are its flags, one way only), -EALREADY (DONE already),
 * -EAGAIN (the lcore's ring is full: call again). Nothing changes on an error. */
int kvl_req_step_done(struct kvl_runtime *rt, kvl_req_t req, uint32_t step);

/* End @req now: its staging is freed at once (except under READs still in flight, freed as
 * they complete) and the peer is told. It ends with KVL_REQ_EV_FAILED(KVL_ERR_CANCELED) unless
 * it had ended already. 0, -ENOENT, -EALREADY (canceled already), -EAGAIN (ring full). */
int kvl_req_cancel(struct kvl_runtime *rt, kvl_req_t req);

enum kvl_req_ev_type {
	KVL_REQ_EV_STEP_READY = 1, /* step's blocks have landed, in step order */
	KVL_REQ_EV_DONE = 2,	   /* every step DONE; the handle is gone */
	KVL_REQ_EV_FAILED = 3,	   /* status says why; the handle is gone */
};

struct kvl_req_event {
	kvl_req_t req;
	uint64_t user;
	uint32_t type;	/* enum kvl_req_ev_type */
	uint32_t step;	/* STEP_READY */
	int32_t status; /* FAILED: enum kvl_status */
	uint32_t reserved;
};

/* Up to @max events of every NIC's scheduler; returns how many. */
unsigned kvl_req_poll(struct kvl_runtime *rt, struct kvl_req_event *ev, unsigned max);

/* Where block @block of @req is in staging, while a READY step names it and until the last
 * step naming it is DONE (KVL_REQ_STEP_FLAGS: from the READY word on; kvl_req_poll need not
 * have shown the event). With [sched] staging = gpu this is a device pointer (VRAM of the
 * NIC's GPU): read it from a kernel or with cudaMemcpy, not with the CPU. With
 * KVL_REQ_ENGINE_DEST it is the block's kvl_req_block.local, the engine's own. 0, -ENOENT, -ERANGE
 * (block >= n_blocks), -EAGAIN (not landed, or freed). */
int kvl_req_block_addr(struct kvl_runtime *rt, kvl_req_t req, uint32_t block, void **addr);

/*
 * Step flags of a request opened with KVL_REQ_STEP_FLAGS. Step k's READY word is at
 * ready + k * stride bytes, its DONE word at done + k * stride (stride > 64: the two are on
 * cache lines of their own). The NIC lcore stores READY = epoch (release) once step k's
 * blocks have landed, right before the STEP_READY event (still sent); the engine, after the
 * step's work, stores DONE = epoch, and the lcore (polling it) frees what no later step needs,
 * as kvl_req_step_done does. Words are compared cyclically, ((int32_t)(word - epoch) >= 0),
 * as a GPU's wait does: they are never reset, each request takes a fresh epoch, and a word
 * left (or written late) by the range's previous user never satisfies it.
 *
 * A CPU engine waits with an acquire load of READY, then reads its blocks (kvl_req_block_addr
 * answers from READY on, without kvl_req_poll), then stores DONE with release. A CUDA engine
 * enqueues, up front, per step: cuStreamWaitValue32(stream, ready_dev + k * stride, epoch,
 * CU_STREAM_WAIT_VALUE_GEQ), its kernels, then cuStreamWriteValue32(stream, done_dev + k *
 * stride, epoch, CU_STREAM_WRITE_VALUE_DEFAULT) (ordered after the kernels' memory accesses);
 * kvl_gpusig_wait_addr / kvl_gpusig_done_addr (lcores/gpu/gpusig.h) do exactly that. Better
 * while transfers run beside the compute: kvl_gpusig_lanes (same header) enqueues the wait and
 * the write on two side streams joined to the engine's by events, so the engine's stream holds
 * no operation on host memory (on the H200, the host tier's overlap with attention went from
 * 94 to 98 % at 16 KiB and from 92 to 97 % at 64 KiB; docs/gpu-bench.md, session 10).
 * ready_dev and done_dev are 0 unless [gpu] enable = true in a build with CUDA, where the pool
 * is mapped for the GPU at start. A request's end (kvl_req_poll: DONE or FAILED) gives the range
 * back; a FAILED one's steps not READY get READY = epoch anyway, so that no stream hangs on
 * them: discard what such kernels computed. Load those kernels before enqueuing the waits
 * (cudaFuncGetAttributes on each, or CUDA_MODULE_LOADING=EAGER): CUDA loads a kernel lazily at
 * its first launch by default, and that load may synchronise the context, i.e. wait for the
 * stream that waits on READY (a hang, seen on the H200). kvlane loads its own kernels at
 * start. 0, -ENOENT, -EINVAL (opened without the flag).
 */
struct kvl_req_flags {
	volatile uint32_t *ready; /* step 0's READY word */
	volatile uint32_t *done;  /* step 0's DONE word */
	uint64_t ready_dev;	  /* the same words as the GPU addresses them; 0: not mapped */
	uint64_t done_dev;
	uint32_t stride; /* bytes from a step's words to the next step's */
	uint32_t epoch;
	uint32_t n_steps;
	uint32_t reserved;
};

int kvl_req_step_flags(struct kvl_runtime *rt, kvl_req_t req, struct kvl_req_flags *out);

/* Cap the staging budget at @bytes (an engine taking VRAM for itself); UINT64_MAX lifts the
 * cap. Windows shrink at once; nothing landed is dropped, unless [sched] ready_ahead > 0 and a
 * request is blocked below its floor: then what others landed ahead of their announced steps
 * is evicted and READ again later. 0, or -ENOTSUP without a scheduler. */
int kvl_req_budget_cap(struct kvl_runtime *rt, uint64_t bytes);

/* ---- test data ---- */

/* Fill @len bytes with the pattern that a segment at @offset of a `fill = pattern` segment
 * with @seed holds, and find the first byte that differs from it (@len if none). */
void kvl_pattern_fill(void *buf, uint64_t len, uint32_t seed, uint64_t offset);
uint64_t kvl_pattern_check(const void *buf, uint64_t len, uint32_t seed, uint64_t offset);

/* ---- cluster: peers found by name through etcd ([cluster], docs/cluster.md) ---- */

/* A node's role, as its [cluster] role says. */
enum kvl_node_role {
	KVL_NODE_PREFILL = 0,
	KVL_NODE_DECODE = 1,
	KVL_NODE_TIER = 2,
};
#define KVL_NODE_ANY (-1) /* kvl_cluster_list(): every role */

/* A node of the cluster as this runtime's view has it (from etcd's list and watch). */
struct kvl_cluster_node {
	char name[64];	      /* its [cluster] name, unique in the cluster */
	int32_t role;	      /* enum kvl_node_role */
	char control[80];     /* host:port of its control listener */
	uint64_t incarnation; /* the etcd lease it registered under: a restart is a new one */
	uint32_t proto;	      /* its control protocol version */
	uint32_t n_nics, n_gpus, n_segs;
};

/*
 * The nodes of @role (KVL_NODE_ANY: all), this one included, in name order: returns how many
 * there are (up to @max are copied), or -ENOTSUP without [cluster]. While etcd is unreachable
 * the view is the last one seen; /kvlane/cluster says since when.
 */
int kvl_cluster_list(struct kvl_runtime *rt, int role, struct kvl_cluster_node *out, unsigned max);

/*
 * kvl_connect() to the node registered as @name: its control endpoint comes from the view,
 * never from an earlier incarnation. A READY peer already connected to that same incarnation
 * is returned as it is. Returns 0, or a negative errno with the reason in @err: -ENOTSUP
 * without [cluster], -ENOENT when no node has that name (etcd answering), -EHOSTUNREACH when
 * the name is unknown and etcd is unreachable, else kvl_connect()'s errors.
 */
int kvl_connect_name(struct kvl_runtime *rt, const char *name, unsigned timeout_ms,
		     kvl_peer_t *peer, char *err, size_t errlen);

#ifdef __cplusplus
}
#endif

#endif /* KVLANE_H */
