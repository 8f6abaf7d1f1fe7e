/* SPDX-License-Identifier: BSD-3-Clause */
/* The per-request two-queue scheduler: transfer and compute queues, windows, VRAM budget. */
#ifndef KVL_SCHED_H
#define KVL_SCHED_H

/*
 * Pure C: no DPDK, verbs or CUDA header, and every call takes `now` (ns, any monotonic
 * origin), so that each decision can be replayed step by step with a fake clock.
 *
 * One instance per NIC lcore, no locks. Memory is allocated by kvl_sched_create() only;
 * nothing on the per-descriptor path allocates.
 *
 * The life of a request: kvl_sched_open() → (admission, when its floor fits the budget) →
 * kvl_sched_step() hands out transfer descriptors in the order compute consumes the blocks →
 * kvl_sched_complete() for each → STEP_READY events, in step order, once a step's blocks have
 * landed → kvl_sched_step_done() frees what no later step needs and the window slides →
 * REQ_DONE after the last step, or REQ_FAILED(status) on a failed transfer or a cancel.
 */

#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The most scatter-gather entries one descriptor carries. */
#define KVL_SCHED_MAX_SGE 16

enum kvl_sched_dir {
	KVL_SCHED_PULL = 1, /* remote → local staging slots chosen by the scheduler (RDMA READ) */
	KVL_SCHED_PUSH = 2, /* local (offsets given by the caller) → remote (RDMA WRITE) */
};

enum kvl_sched_class {
	KVL_SCHED_DECODE = 0,  /* latency: always served before PREFILL */
	KVL_SCHED_PREFILL = 1, /* bulk */
	KVL_SCHED_CLASSES
};

struct kvl_sched_cfg {
	uint32_t max_requests; /* open requests, ended ones included until their event is polled;
				* at most 65536 */
	uint32_t max_blocks_total; /* blocks over all open requests */
	uint32_t max_steps_total;  /* steps over all open requests; 0: max_blocks_total */
	uint32_t max_refs_total;   /* step → block references; 0: 2 × max_blocks_total */
	uint32_t max_xfers;	   /* descriptors in flight at once */
	uint32_t slot_size;	   /* bytes of one staging slot: a PULL block fills one slot */
	uint32_t slot_count;	   /* the staging region is slot_size × slot_count bytes */
	uint64_t budget;	   /* initial budget in bytes; 0: the whole staging region */
	uint64_t window_min;	   /* bytes ([sched] window_min_kb) */
	uint64_t window_max;	   /* bytes ([sched] window_max_mb) */
	uint32_t max_msg;	   /* largest merged descriptor in bytes; 0: no merging at all */
	uint32_t max_sge;	   /* SGEs per descriptor, 1..KVL_SCHED_MAX_SGE (1: off) */
	uint64_t starvation_ns;	   /* a runnable request passed over this long is served first;
				    * 0: no bound */
	uint64_t resize_ns;	   /* windows are recomputed from the estimates this often */
	/* Steps a request may have READY (announced) and not DONE at once; a step that landed
	 * beyond that is announced when an earlier one is DONE, and until then its blocks may
	 * be evicted. 0: no bound (every landed step is announced at once) and no eviction at
	 * all. An engine that advances its requests in lockstep wants 1: see
	 * kvl_sched_set_budget(). */
	uint32_t ready_ahead;
};

/* One block of KV: where it is on the peer, how long, and (PUSH) where it is here. */
struct kvl_sched_block {
	uint64_t remote_off;
	uint64_t local_off; /* PUSH, or PULL with dest: the caller's; PULL: ignored */
	uint32_t remote_seg;
	uint32_t length; /* 1..slot_size for PULL, ≤ window_max, ≤ max_msg when merging */
	/* PUSH: the caller's local region the bytes lie in. Blocks of two regions never merge
	 * into one range, even where the regions happen to touch (they may still share a
	 * descriptor as separate SGEs); PULL: ignored unless dest. */
	uint32_t local_seg;
};

struct kvl_sched_req_desc {
	uint64_t peer;	   /* opaque: copied into descriptors and events */
	uint64_t deadline; /* ns, same clock as `now`: earliest first inside a class */
	uint64_t user;	   /* opaque: copied into events */
	const struct kvl_sched_block *blocks;
	uint32_t n_blocks;
	uint32_t n_steps;
	/* Step k needs blocks step_blocks[step_first[k] .. step_first[k + 1]) (n_steps + 1
	 * entries, step_first[0] == 0). Every block is named by some step; a step names a block
	 * at most once and names at least one. */
	const uint32_t *step_first;
	const uint32_t *step_blocks;
	uint8_t dir; /* enum kvl_sched_dir */
	uint8_t cls; /* enum kvl_sched_class */
	/* PULL only: each block lands at its own local_off (the caller's address, in region
	 * local_seg: an engine's paged KV cache) and takes no staging slot. Its charge is its
	 * length, held while it is in flight only: once landed the bytes sit in memory the caller
	 * owns, so nothing stays staged, the window bounds what is in flight, and no block of it
	 * is ever evicted. Merging joins blocks contiguous on both sides, as PUSH does. A
	 * request that ends with transfers in flight announces its end only once they are back
	 * (the NIC may write the caller's memory until then). */
	uint8_t dest;
};

struct kvl_sched_sge {
	/* local_abs 0: offset in the staging region; 1: the caller's own (PUSH, PULL with dest) */
	uint64_t local_off;
	uint32_t length;
	uint32_t reserved;
};

/* One descriptor to post: one message on the wire, remote-contiguous. */
struct kvl_sched_xfer {
	uint64_t id;   /* give it back to kvl_sched_complete() */
	uint64_t peer; /* the request's peer */
	uint64_t remote_off;
	int32_t req;
	uint32_t remote_seg;
	uint32_t length; /* sum of the SGE lengths */
	uint32_t n_blocks;
	uint16_t n_sge;
	uint8_t op;	   /* 2: READ (PULL), 1: WRITE (PUSH): the values of enum kvl_op */
	uint8_t cls;	   /* enum kvl_sched_class */
	uint8_t local_abs; /* 1: sge[].local_off are the caller's (not staging offsets) */
	uint8_t reserved[3];
	struct kvl_sched_sge sge[KVL_SCHED_MAX_SGE];
};

enum kvl_sched_ev_type {
	KVL_SCHED_EV_STEP_READY = 1,  /* step's blocks have all landed: compute may run */
	KVL_SCHED_EV_REQ_DONE = 2,    /* every step DONE; the request is gone */
	KVL_SCHED_EV_REQ_FAILED = 3,  /* status says why (KVL_ERR_CANCELED after a cancel) */
	KVL_SCHED_EV_PEER_CANCEL = 4, /* tell the peer (the caller sends it); before REQ_FAILED */
};

struct kvl_sched_event {
	uint64_t peer;
	uint64_t user;
	int32_t req;
	uint32_t step;	/* STEP_READY */
	int32_t status; /* REQ_FAILED: enum kvl_status */
	uint16_t type;	/* enum kvl_sched_ev_type */
};

/* Why the last kvl_sched_step() stopped. */
enum kvl_sched_stop {
	KVL_SCHED_STOP_IDLE = 0,   /* nothing runnable was left */
	KVL_SCHED_STOP_MAX = 1,	   /* the caller's array was full */
	KVL_SCHED_STOP_BUDGET = 2, /* the global budget (or the staging region) was full */
	KVL_SCHED_STOP_XFERS = 3,  /* max_xfers descriptors were in flight */
};

struct kvl_sched_stats {
	uint64_t budget;	 /* as set, clamped to the staging region */
	uint64_t staged;	 /* bytes held: in flight + landed, orphans included; ≤ budget
				  * unless the budget shrank below what had already landed */
	uint64_t orphan_bytes;	 /* in flight for requests that ended: freed on completion */
	uint64_t windows;	 /* Σ window over active requests (≤ budget − orphans) */
	uint32_t active;	 /* admitted */
	uint32_t waiting;	 /* opened, not admitted yet */
	uint32_t ended;		 /* ended, terminal event not polled yet */
	uint32_t runnable;	 /* active, with room in their window and a block to send */
	uint32_t xfers_inflight; /* descriptors handed out and not completed */
	uint32_t slots;		 /* staging slots in all (slot_count) */
	uint32_t slots_free;	 /* not held by any block: back to @slots once all ended */
	uint32_t last_stop;	 /* enum kvl_sched_stop of the last kvl_sched_step() */
	uint64_t posted_xfers;
	uint64_t posted_blocks;
	uint64_t completed_ok;
	uint64_t completed_err;
	uint64_t late_completions; /* for requests already ended: absorbed */
	uint64_t cancels;
	uint64_t starved_serves;   /* descriptors given to a request passed over too long */
	uint64_t evicted_blocks;   /* landed, dropped to let a blocked request on: fetched again */
	uint64_t evicted_bytes;	   /* their staging (charges) */
	uint64_t dest_blocks;	   /* PULL blocks landed in the caller's memory (dest): no slot */
	uint64_t xfer_ps_per_byte; /* estimate (picoseconds per byte) */
	uint64_t compute_ns[KVL_SCHED_CLASSES]; /* estimate per step */
};

enum kvl_sched_req_state {
	KVL_SCHED_REQ_WAITING = 1, /* not admitted yet */
	KVL_SCHED_REQ_ACTIVE = 2,
	KVL_SCHED_REQ_ENDED = 3, /* terminal event pending */
};

struct kvl_sched_req_info {
	uint64_t peer;
	uint64_t window; /* bytes this request may hold (in flight + landed) */
	uint64_t floor;	 /* what it needs to make progress: max(window_min, peak residency) */
	uint64_t inflight_bytes;
	uint64_t landed_bytes;	/* landed, not freed by a DONE */
	uint64_t age_ns;	/* since open */
	uint64_t wait_ns;	/* runnable and not served for this long; 0 when not runnable */
	uint64_t evicted_bytes; /* staging its evicted blocks held */
	int32_t id;
	int32_t status;
	uint32_t blocks, blocks_posted, blocks_landed, blocks_evicted;
	uint32_t steps, steps_ready, steps_done; /* steps_ready: landed (announced or not) */
	uint32_t steps_announced;		 /* STEP_READY events handed out */
	uint8_t state;				 /* enum kvl_sched_req_state */
	uint8_t cls;
	uint8_t dir;
	bool runnable;
	bool dest; /* PULL into the caller's memory */
};

struct kvl_sched;

/* NULL with errno EINVAL (bad cfg) or ENOMEM. */
struct kvl_sched *kvl_sched_create(const struct kvl_sched_cfg *cfg);
void kvl_sched_free(struct kvl_sched *s);

/* A request id (≥ 0), or -EINVAL (bad descriptor: nothing was kept) or -ENOSPC (a pool is
 * full). The request waits for admission until its floor fits the budget beside what the
 * admitted requests hold or are promised (their floors). */
int kvl_sched_open(struct kvl_sched *s, const struct kvl_sched_req_desc *d, uint64_t now);

/* Descriptors to post now (≤ max); each later completes through kvl_sched_complete(). */
unsigned kvl_sched_step(struct kvl_sched *s, uint64_t now, struct kvl_sched_xfer *out,
			unsigned max);

/* @status: enum kvl_status. A failure fails the request with it. 0, or -ENOENT for an id
 * that is not in flight (never given, or completed already). */
int kvl_sched_complete(struct kvl_sched *s, uint64_t xfer_id, int status, uint64_t now);

/* Up to @max events; returns how many. A request's record is released once its terminal
 * event has been returned here. */
unsigned kvl_sched_poll_events(struct kvl_sched *s, struct kvl_sched_event *ev, unsigned max);

/* The engine finished step @step (which must be READY: its event handed out). 0, -ENOENT
 * (unknown request), -EALREADY (ended, or that step DONE already), -EINVAL (no such step, or
 * not READY). */
int kvl_sched_step_done(struct kvl_sched *s, int req, uint32_t step, uint64_t now);

/* Frees at once everything the request holds here, except staging under transfers still in
 * flight (the NIC may still write it): that stays counted until their completions arrive.
 * Emits PEER_CANCEL then REQ_FAILED(KVL_ERR_CANCELED). 0, -ENOENT or -EALREADY. */
int kvl_sched_cancel(struct kvl_sched *s, int req, uint64_t now);

/*
 * The budget from outside (free VRAM − reserve, or [sched] budget_mb). Windows are recomputed
 * at once. A shrink keeps what has landed until a request is blocked below its floor: its next
 * step's blocks fit what it is promised (min(floor, window)) but not the budget beside what is
 * staged and the floors kept for the others (or the head waiting request's floor fits beside
 * the floors but not beside what is held). Then, with cfg ready_ahead > 0, kvl_sched_step()
 * evicts landed blocks from the tail of other requests' transfer queues, furthest ahead of
 * their consumption first: what they hold beyond their window, then beyond their floor, until
 * what is staged and the floors kept fit the budget. Never a block in flight, of a PUSH
 * request, or named by a step announced READY; never for extra window (beyond a floor). An
 * evicted block goes back to its queue and is fetched again before its step is READY; its
 * owner takes it back only from room no floor is kept in, so nothing ping-pongs while the
 * budget stays. So an engine that needs step k of every request before step k + 1 of any
 * still finishes when the budget holds the sum of the floors (and what PUSH requests hold
 * beyond theirs) and it is announced no more than ready_ahead = 1 step ahead.
 */
void kvl_sched_set_budget(struct kvl_sched *s, uint64_t bytes, uint64_t now);

/* Where the caller's block @block of @req is (PULL: staging offset once posted). 0,
 * -ENOENT, -EINVAL (no such block), -EAGAIN (a PULL block not posted yet, or freed). */
int kvl_sched_block_offset(const struct kvl_sched *s, int req, uint32_t block, uint64_t *local_off);

/* kvl_sched_block_offset() for every block step @step of @req names, in one call:
 * off[b] for each such block b (the caller's index, so @off has the request's n_blocks
 * entries), UINT64_MAX where kvl_sched_block_offset() says -EAGAIN. Other entries are left
 * alone. 0, -ENOENT (unknown or ended request) or -EINVAL (no such step). */
int kvl_sched_step_offsets(const struct kvl_sched *s, int req, uint32_t step, uint64_t *off);

/*
 * What a transport that picks its method by the consumer's speed wants (the host tier's copy
 * engine, lcores/gpu/xport_cudma.h KVL_CUDMA_AUTO): the compute per step (ns, from READY or
 * the previous DONE to DONE, EWMA 1/8) and the bytes a step brings (the request's block bytes
 * over its steps, EWMA 1/8 at each DONE), both of the class whose step was DONE last; 0 before
 * any DONE. Returns how many DONEs went into them: a caller passes them on only when it
 * changed.
 */
uint64_t kvl_sched_estimates(const struct kvl_sched *s, uint64_t *compute_ns, uint64_t *step_bytes);

/* ---- snapshots (plain copies, for telemetry and tests) ---- */
void kvl_sched_stats(const struct kvl_sched *s, struct kvl_sched_stats *out);
int kvl_sched_req_info(const struct kvl_sched *s, int req, uint64_t now,
		       struct kvl_sched_req_info *out);
/* Ids of every request the scheduler holds (≤ max copied); returns how many there are. */
unsigned kvl_sched_req_list(const struct kvl_sched *s, int32_t *ids, unsigned max);

#ifdef __cplusplus
}
#endif

#endif /* KVL_SCHED_H */
