/* SPDX-License-Identifier: BSD-3-Clause */
/* What every transport shares: work requests, completions, and the local segment table. */
#ifndef KVL_LCORES_XFER_H
#define KVL_LCORES_XFER_H

#include <stdbool.h>
#include <stdint.h>

#include "kvlane/kvlane.h"

enum kvl_op {
	KVL_OP_WRITE = 1, /* local range -> remote segment */
	KVL_OP_READ = 2,  /* remote segment -> local range */
};

/* Local ranges of one request: remote-contiguous blocks that are scattered here. */
#define KVL_WR_MAX_SGE 8

struct kvl_sge {
	void *addr;
	uint32_t length;
	uint32_t reserved;
};

enum kvl_wr_flags {
	KVL_WR_NOTIFY = 1u << 0, /* WRITE only: the peer is told, with @imm, once it landed */
	/* Proven at the edge (kvl_post's checks): @op is WRITE or READ, NOTIFY only on a WRITE,
	 * the SGE list has no empty range and sums to @length, every local range lies in a
	 * registered segment. A transport skips those checks; what only it knows (lkeys, its
	 * limits, the remote table of its connection) it still checks. */
	KVL_WR_CHECKED = 1u << 1,
};

/* One work request, as the lcore hands it to a transport. */
struct kvl_wr {
	uint64_t wr_id;	     /* returned unchanged in the completion */
	void *local;	     /* n_sge <= 1: inside a registered local segment (checked) */
	uint64_t remote_off; /* offset inside the remote segment */
	uint32_t length;     /* bytes; 0 is allowed and completes like any other */
	uint32_t remote_seg; /* remote segment id, as advertised by the peer */
	uint8_t op;	     /* enum kvl_op */
	uint8_t n_sge;	     /* 0 or 1: @local; 2..KVL_WR_MAX_SGE: @sge, in order, summing to
			      * @length (gathered for WRITE, scattered for READ) */
	uint8_t flags;	     /* enum kvl_wr_flags */
	uint8_t reserved;
	uint32_t imm; /* KVL_WR_NOTIFY */
	struct kvl_sge sge[KVL_WR_MAX_SGE];
};

/* One completion. */
struct kvl_wc {
	uint64_t wr_id;
	uint32_t bytes; /* moved: the request's length on KVL_OK, 0 otherwise */
	int32_t status; /* enum kvl_status */
};

/*
 * A connection-level message a transport needs carried to the peer over the control path
 * (the RDMA transports' QP resync after an error: see verbs.h).
 */
enum kvl_resync_kind {
	KVL_RESYNC_REQ = 1, /* restart yours; mine restarts at @psn */
	KVL_RESYNC_ACK = 2, /* restarted at @psn, for the REQ that offered @echo */
};

struct kvl_resync {
	uint32_t kind; /* enum kvl_resync_kind */
	uint32_t psn;
	uint32_t echo;
};

/* A peer's WRITE with KVL_WR_NOTIFY that landed here: its @imm and how many bytes it wrote. */
struct kvl_note {
	uint32_t imm;
	uint32_t length;
};

/* The counters of one connection, whatever its transport: each fills the fields that mean
 * something for it (socket bytes are payload bytes on RDMA). One writer, the owning lcore. */
struct kvl_xport_stats {
	uint64_t tx_bytes, rx_bytes;	    /* on the socket, headers included */
	uint64_t posted_write, posted_read; /* initiated here */
	uint64_t done_write, done_read;	    /* initiated here, completed OK */
	uint64_t bytes_written, bytes_read; /* payload of those */
	uint64_t served_write, served_read; /* peer's requests executed here */
	uint64_t served_bytes;		    /* payload moved for the peer */
	uint64_t refused[KVL_STATUS_COUNT]; /* peer's requests refused here, by status */
	uint64_t failed[KVL_STATUS_COUNT];  /* requests initiated here, completed with an error */
	/* RDMA queue pairs (0 on tcp): what the NIC was given and what it reported */
	uint64_t qp_posted, qp_signaled, qp_cqes, qp_posts, qp_recoveries, qp_outstanding;
	uint64_t qp_resyncs, qp_replayed;
	uint64_t qp_stall_resets, qp_drain_timeouts; /* the watchdog's restarts; drains cut */
	uint64_t qp_notes, qp_notes_dropped; /* WRITE_WITH_IMM received, and dropped untaken */
	uint64_t qp_sge_wrs;		     /* WRs with several SGEs */
	uint64_t qp_last_wc_status, qp_last_vendor_err; /* the last error CQE, raw */
	uint64_t qp_completed;				/* requests completed, refused included */
	uint64_t qp_state;		/* enum kvl_qp_state (verbs.h), as the lcore last saw it */
	uint64_t qp_arms, qp_cq_events; /* hybrid idle: CQs armed, completion events taken */
	/* doorbells rung (a post: ibv_wr_complete, or the mlx5 doorbell); mlx5 direct only: lone
	 * WQEs written whole through BlueFlame, CQEs matching no outstanding WQE */
	uint64_t qp_doorbells, qp_bf_copies, qp_stray_cqes;
	/* tcp READs into VRAM (tcp_data.h's bounce): payload bytes received into the pinned
	 * bounce buffers, host -> device copies started and completed, time with copies in
	 * flight (ns), and receives that waited for a bounce buffer to come free */
	uint64_t gpu_bounce_bytes, gpu_copies, gpu_copies_done, gpu_copy_ns, gpu_bounce_waits;
};

/* ---- local segments: what peers may read and write here ---- */

#define KVL_MAX_SEGS 64

enum kvl_seg_flags {
	KVL_SEG_REMOTE_READ = 1u << 0,	/* peers may READ from it */
	KVL_SEG_REMOTE_WRITE = 1u << 1, /* peers may WRITE into it */
	/* Local only, never sent to peers (not a permission): the segment is GPU memory, which
	 * the CPU cannot touch. A transport that moves bytes with the CPU (tcp) refuses it. */
	KVL_SEG_GPU = 1u << 2,
};

struct kvl_seg {
	uint8_t *base;
	uint64_t len;
	uint32_t id;
	uint32_t flags; /* enum kvl_seg_flags */
};

/*
 * Registered segments, read by every lcore without locks: an entry is filled, then published
 * by a release store of `live`; lcores load `live` with acquire. Entries are never reused
 * while the runtime runs (ids grow), so a reader never sees an entry change under it.
 */
struct kvl_seg_table {
	struct kvl_seg seg[KVL_MAX_SEGS];
	bool live[KVL_MAX_SEGS];
};

/* Segment @id if it is live, else NULL. Ids are 1-based: id - 1 is the slot. */
static inline const struct kvl_seg *kvl_seg_lookup(const struct kvl_seg_table *t, uint32_t id)
{
	if (id == 0 || id > KVL_MAX_SEGS || !__atomic_load_n(&t->live[id - 1], __ATOMIC_ACQUIRE))
		return NULL;
	return &t->seg[id - 1];
}

/*
 * Check a remote access against a segment: the status a target returns for it.
 * Written so that offset + length cannot overflow.
 */
static inline int kvl_seg_check(const struct kvl_seg *s, uint64_t off, uint64_t len, int op)
{
	if (s == NULL)
		return KVL_ERR_NO_SEGMENT;
	if (!(s->flags & (op == KVL_OP_READ ? KVL_SEG_REMOTE_READ : KVL_SEG_REMOTE_WRITE)))
		return KVL_ERR_ACCESS;
	if (off > s->len || len > s->len - off)
		return KVL_ERR_BOUNDS;
	return KVL_OK;
}

#endif /* KVL_LCORES_XFER_H */
