/* SPDX-License-Identifier: BSD-3-Clause */
/* A NIC lcore's scheduler stage: requests in through a ring, READs out on its connections. */
#ifndef KVL_LCORES_NIC_SCHED_H
#define KVL_LCORES_NIC_SCHED_H

#include <stdbool.h>
#include <stdint.h>

#include "lcores.h"
#include "nic_io.h"
#include "../sched/sched.h" /* by path: sched/ on the include path would hide <sched.h> */
#include "xfer.h"

struct rte_ring;

/*
 * One scheduler per NIC lcore, written by that lcore only. Whoever opens requests (the API,
 * runtime/req_api.c) talks to it through two rings:
 *   cmd: struct kvl_nsched_cmd, many producers → this lcore (OPEN, DONE, CANCEL)
 *   ev:  struct kvl_sched_event, this lcore → one consumer (STEP_READY, REQ_DONE, REQ_FAILED)
 * A request is a struct kvl_nsreq that the opener allocates and fills, and frees after its
 * terminal event: the lcore reads its tables and writes open_rc, sched_id and off[].
 *
 * Its transfers are READs into the lcore's staging memory, posted on the peer's connections
 * of this NIC (the slots of struct kvl_nic_io) with wr_id = KVL_WR_SCHED_TAG | descriptor
 * index; nic_io hands such completions back here (kvl_nic_sched_take_wc) instead of to the
 * API's completion ring.
 *
 * Step flags (kvl_nsreq.want_flags): the request gets n_steps consecutive entries of the
 * lcore's flag pool (struct kvl_nsched_flag) and an epoch of its own. When a step's blocks have
 * landed (its STEP_READY event) the lcore stores READY = epoch; each pass it loads the DONE
 * words of the steps it announced and not yet saw DONE, and a DONE >= epoch (cyclic) does what
 * a DONE command does. The words are plain host memory: the lcore never calls CUDA (the
 * runtime maps the pool for the GPU, runtime/req_api.c).
 */

#define KVL_WR_SCHED_TAG   (1ull << 63) /* wr_id bit of the scheduler's own transfers */
#define KVL_NSCHED_BATCH   32		/* descriptors taken from the scheduler per pass */
#define KVL_NSCHED_SNAP_RQ 256		/* request rows a telemetry snapshot holds */

enum kvl_nsched_cmd_type {
	KVL_NSCHED_OPEN = 1,
	KVL_NSCHED_DONE = 2,
	KVL_NSCHED_CANCEL = 3,
};

/* One step's flags. READY is written by the lcore, DONE by the engine (a stream): separate
 * cache lines, so neither writer's line bounces for the other's (as lcores/gpu/gpusig.c). */
struct kvl_nsched_flag {
	uint32_t ready;
	uint8_t pad0[60];
	uint32_t done;
	uint8_t pad1[60];
};

struct kvl_nsreq {
	/* the opener's, read-only once OPEN is in the ring (d.user points back here) */
	struct kvl_sched_req_desc d;
	uint64_t handle; /* the opener's name for it (telemetry, cancel messages) */
	uint32_t nic;
	uint32_t want_flags; /* 1: give it a range of step flags */
	/* written by the lcore */
	int32_t open_rc;     /* 1 until OPEN is taken; then 0 or a negative errno (release) */
	int32_t sched_id;    /* the scheduler's id once open */
	uint32_t flag_base;  /* want_flags: its first entry of the flag pool (before open_rc) */
	uint32_t flag_epoch; /* want_flags: the epoch READY and DONE carry for this use */
	uint64_t open_ns;    /* when OPEN was taken: the latency histogram's start */
	uint64_t *off;	     /* per block: staging offset, written before its STEP_READY event */
	void *priv;	     /* the opener's own state */
};

struct kvl_nsched_cmd {
	uint32_t type; /* enum kvl_nsched_cmd_type */
	uint32_t step;
	struct kvl_nsreq *r;
};

#define KVL_NSCHED_LAT_BUCKETS 16

/* Counters of the stage itself (one writer: the lcore), beside the scheduler's own. */
struct kvl_nsched_counters {
	uint64_t opened, open_failed, done_cmds, cancel_cmds, cmd_errors;
	uint64_t posted, post_failed, no_conn, stalled; /* stalled: every connection was full */
	uint64_t events, peer_cancels, peer_cancels_dropped, budget_changes;
	uint64_t bad_completions; /* for no descriptor in flight: refused by the scheduler */
	/* step flags: entries held now, requests given a range, OPENs refused for want of a
	 * range, READY words written, DONE words seen (steps freed through them) */
	uint64_t flags_in_use, flag_reqs, flag_nospc, ready_written, done_seen;
	/* requests that ended DONE, by time from OPEN taken to the end event (Prometheus'
	 * histogram): lat_hist[i] counts those in (bound[i-1], bound[i]], the last one those
	 * above every bound; their sum in ns. One increment per request, not per transfer. */
	uint64_t lat_hist[KVL_NSCHED_LAT_BUCKETS + 1];
	uint64_t lat_sum_ns;
};

/* Upper bounds of the latency histogram's buckets, in microseconds, increasing. */
extern const uint32_t kvl_nsched_lat_bounds_us[KVL_NSCHED_LAT_BUCKETS];

/* What telemetry reads: a copy the lcore refreshes, under a sequence count. */
struct kvl_nsched_snap {
	uint32_t seq; /* odd while the lcore writes */
	uint32_t n_req;
	uint64_t at_ns;
	uint64_t budget_in; /* what the budget source said */
	struct kvl_sched_stats st;
	struct kvl_nsched_counters ct;
	struct kvl_sched_req_info rq[KVL_NSCHED_SNAP_RQ];
	uint64_t rq_handle[KVL_NSCHED_SNAP_RQ];
};

struct kvl_nic_sched_cfg {
	const struct kvl_sched_cfg *sched;
	uint8_t *staging; /* slot_size x slot_count bytes, registered */
	unsigned nic;
	int socket;
	/* Read every pass; a change goes to kvl_sched_set_budget(). Written by the main lcore's
	 * sampler (relaxed atomic). */
	const uint64_t *budget;
	bool null_xport; /* post on a private null connection instead of the peer's */
	/* A PEER_CANCEL event: tell the peer (the control thread sends it). NULL: count only. */
	struct rte_ring *levt;
};

/* A step the lcore announced READY through its flag and waits to see DONE. */
struct kvl_nsched_watch {
	struct kvl_nsreq *r;
	uint32_t step;
};

struct kvl_nic_sched {
	struct kvl_sched *s;
	struct kvl_nic_io *io;
	struct rte_ring *cmd;
	struct rte_ring *ev;
	uint8_t *staging;
	const uint64_t *budget;
	uint64_t budget_seen;
	uint64_t *xid;	   /* descriptor index → the scheduler's full id */
	uint32_t xid_mask; /* max_xfers rounded up to a power of two, minus one */
	/* request id → its struct kvl_nsreq, for telemetry rows (checked against sched_id) */
	struct kvl_nsreq **byid;
	uint32_t byid_mask;
	struct rte_ring *levt;
	unsigned nic;
	/* the null transport's connection (null_xport), reaped by this stage */
	struct kvl_xconn null;
	/* this host's tier (KVL_PEER_LOCAL_TIER's READs: lcores/xport/xport_tier.h), progressed
	 * and reaped by this stage; set by the runtime before the lcore starts, freed by it */
	struct kvl_xconn tier;
	uint64_t est_gen; /* the scheduler's estimates last passed to the tier (its DONE count) */
	/* descriptors the connections refused (full): posted first next pass */
	struct kvl_wr pend[KVL_NSCHED_BATCH];
	uint32_t pend_peer[KVL_NSCHED_BATCH];
	unsigned n_pend;
	uint32_t rr;
	/* clock: ns from the TSC, or @clock when set (tests and the callgrind benchmark run a
	 * virtual clock, so that time-driven work happens as often as in a timed run) */
	uint64_t tsc_mult; /* ns per cycle << 32 */
	uint64_t (*clock)(void *arg);
	void *clock_arg;
	/* Step flags: the pool (allocated once here: a request takes a range, never memory), who
	 * holds each entry, and the steps whose DONE is polled. flags_dev: the pool's device
	 * address when the runtime mapped it for CUDA (0: none); the lcore never reads it. */
	struct kvl_nsched_flag *flags;
	uint8_t *flag_held;
	uint32_t n_flags;
	uint32_t flag_rover; /* where the next range search starts */
	uint32_t flag_epoch; /* the last epoch given */
	uint64_t flags_dev;
	struct kvl_nsched_watch *watch;
	uint32_t n_watch;
	bool dirty; /* something changed since the last snapshot */
	uint64_t snap_next;
	struct kvl_nsched_counters ct;
	struct kvl_nsched_snap snap;
};

/* Create the scheduler, its rings and (null_xport) its null connection on @cfg->socket.
 * NULL with errno on failure. */
struct kvl_nic_sched *kvl_nic_sched_create(struct kvl_nic_io *io,
					   const struct kvl_nic_sched_cfg *cfg);
void kvl_nic_sched_free(struct kvl_nic_sched *ns);

/* The lcore stage (@arg: the struct kvl_nic_sched): commands, budget, scheduler step, posts,
 * events. Runs after the NIC's I/O stage, which reaps the completions into it. */
unsigned kvl_nic_sched_stage(struct kvl_lcore *lc, void *arg);

/* nic_io's completion hook: takes the scheduler's completions out of @wc (compacting the
 * others to the front) and returns how many are left for the API. */
unsigned kvl_nic_sched_take_wc(void *arg, struct kvl_wc *wc, unsigned n);

/* A consistent copy of the last snapshot (any thread). */
void kvl_nic_sched_read(const struct kvl_nic_sched *ns, struct kvl_nsched_snap *out);

/* Nanoseconds on the lcore's clock (the scheduler's `now`). */
uint64_t kvl_nic_sched_now(const struct kvl_nic_sched *ns);

/* The ring API threads put requests and DONEs in: the lcore does not sleep while it holds
 * something (hybrid idle). */
struct rte_ring *kvl_nic_sched_cmd_ring(struct kvl_nic_sched *ns);

#endif /* KVL_LCORES_NIC_SCHED_H */
