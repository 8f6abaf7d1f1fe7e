/* SPDX-License-Identifier: BSD-3-Clause */
/* Verbs transport: RC queue pairs posted through the ibv_wr_* API, for any RDMA device. */
#ifndef KVL_LCORES_VERBS_H
#define KVL_LCORES_VERBS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "xfer.h"

/*
 * One RDMA device (context + protection domain + the chosen port and GID), its registered
 * memory, and RC connections on it. A connection is driven by one lcore: post, progress
 * (poll the CQ), reap; nothing blocks. Connection set-up (exchanging kvl_verbs_addr and the
 * remote segments' addresses and rkeys) is the control path's job: this layer only takes
 * what the peer said and checks it.
 *
 * Everything here runs on any verbs provider (rxe in CI, mlx5 on ConnectX). Capabilities
 * that rxe lacks (CQ moderation: ibv_modify_cq) are used when present and reported when not.
 */

#define KVL_VERBS_ERR_LEN 320

struct kvl_verbs_dev;
struct ibv_mr;
struct ibv_pd;
struct kvl_verbs_conn;

/* What a peer needs to connect its QP to ours. */
struct kvl_verbs_addr {
	uint32_t qpn;
	uint32_t psn; /* 24 bits */
	uint8_t gid[16];
	uint16_t lid;	  /* InfiniBand; 0 on RoCE */
	uint8_t mtu;	  /* enum ibv_mtu of the port (active MTU, capped by the INI's mtu) */
	uint8_t gid_type; /* 0 InfiniBand, 1 RoCE v1, 2 RoCE v2 */
	uint8_t gid_index;
	uint8_t port;
};

/* A peer's segment as the initiator addresses it. */
struct kvl_verbs_rseg {
	uint32_t id;
	uint32_t flags; /* enum kvl_seg_flags the peer allows */
	uint64_t addr;	/* remote virtual address of byte 0 */
	uint64_t len;
	uint32_t rkey;
};

/*
 * How a connection reaches the NIC. Both share everything above the wire: checks, the
 * request ring, selective signaling, resync, receives. They differ in how WRs are posted
 * and how send completions are read.
 */
enum kvl_verbs_backend {
	/* mlx5 direct when the device is mlx5 (mlx5dv_is_supported) and its QP and CQ pass the
	 * fast path's checks, verbs otherwise; the reason is kept (kvl_verbs_dev_backend_note) */
	KVL_VERBS_BACKEND_AUTO = 0,
	/* WQEs written into the SQ, one doorbell per batch, send CQ polled by owner bit
	 * (lcores/xport/mlx5/mlx5_*.c). Refused with a message on a device where it cannot run. */
	KVL_VERBS_BACKEND_MLX5 = 1,
	KVL_VERBS_BACKEND_VERBS = 2, /* ibv_wr_* and ibv_start_poll: any provider */
};

struct kvl_verbs_dev_opts {
	const char *name;	/* "rxe0", "mlx5_0" */
	unsigned port;		/* 1-based */
	int gid_index;		/* -1: auto = the RoCE v2 GID of the port's netdev IPv4 address
				 * (sysfs gid_attrs/types), or index 0 on InfiniBand */
	unsigned mtu;		/* bytes (256..4096): the most this side uses */
	const char *sysfs_root; /* NULL: "/sys" (for gid_attrs) */
	int backend;		/* enum kvl_verbs_backend */
	uint8_t traffic_class;	/* RoCE: the IP TOS byte (DSCP x 4 + ECN) of every packet; IB:
				 * the GRH's, where there is one */
	uint8_t service_level;	/* InfiniBand SL of the QPs (0..15) */
	uint16_t pkey_index;	/* P_Key table entry of the QPs: must exist on the port */
	uint8_t ack_timeout;	/* RC ACK timeout exponent, 1..31 (4.096 us << n); 0: 15 */
	uint8_t retry_count;	/* RC transport retries, 1..6; 0: 6 (7 is refused: see
				 * verbs_priv.h) */
};

/*
 * Open the device and its port. Returns NULL with a message in @err that names the device
 * and says what is wrong in operator terms: no such device (and the ones there are), port
 * not ACTIVE, no RoCE v2 GID (and the GID table), ...
 */
struct kvl_verbs_dev *kvl_verbs_open(const struct kvl_verbs_dev_opts *o, char *err, size_t errlen);
void kvl_verbs_close(struct kvl_verbs_dev *d);

/*
 * True on soft-RoCE (rxe): rdma-core 44's rxe provider miscounts an SGE list posted through
 * ibv_wr_set_sge_list() unless every SGE has the same length. kvlane then splits each list
 * into equal pieces (at most the QP's SGEs, else the WR is refused KVL_ERR_TOO_LARGE); a
 * scheduler should not plan lists on such a device.
 */
bool kvl_verbs_dev_sge_equal_only(const struct kvl_verbs_dev *d);

/*
 * The backend connections use now: "mlx5" or "verbs". With KVL_VERBS_BACKEND_AUTO it may turn
 * from mlx5 to verbs when the first connection's setup finds something the fast path does
 * not handle; kvl_verbs_dev_backend_note() then says what ("" when nothing to say).
 */
const char *kvl_verbs_dev_backend(const struct kvl_verbs_dev *d);
const char *kvl_verbs_dev_backend_note(const struct kvl_verbs_dev *d);

/* The chosen GID index, type and port MTU, for logs and telemetry. */
void kvl_verbs_dev_info(const struct kvl_verbs_dev *d, int *gid_index, int *gid_type,
			unsigned *mtu_bytes, bool *cq_moderation);

/*
 * Register [base, base + len) for local access and the remote @flags (enum kvl_seg_flags).
 * Returns 0 with the rkey, or a negative errno with a message; when the kernel refuses for
 * lack of locked memory the message names RLIMIT_MEMLOCK's value and the fix (ulimit -l,
 * LimitMEMLOCK=infinity). The time the registration took is returned in @ns.
 */
int kvl_verbs_reg(struct kvl_verbs_dev *d, void *base, uint64_t len, uint32_t flags, uint32_t *rkey,
		  uint64_t *ns, char *err, size_t errlen);

/* The device's protection domain, for memory registered elsewhere (GPU memory: dma-buf or
 * peer memory, lcores/gpu/gpumem.c), which kvl_verbs_adopt_mr() then hands back. */
struct ibv_pd *kvl_verbs_dev_pd(const struct kvl_verbs_dev *d);

/* Make @mr (registered on kvl_verbs_dev_pd(@d)) one of the device's regions: local ranges
 * inside it get its lkey, and kvl_verbs_close() deregisters it. 0 or -ENOSPC (message). */
int kvl_verbs_adopt_mr(struct kvl_verbs_dev *d, struct ibv_mr *mr, char *err, size_t errlen);

/*
 * A connection: CQ + RC QP in INIT, @depth send WRs, one signaled WR every @signal_every
 * (and the last of each post), CQ moderation (count, period_us) when the device has it.
 * Returns NULL with a message. @local is what the peer needs.
 */
struct kvl_verbs_conn *kvl_verbs_conn_new(struct kvl_verbs_dev *d, unsigned depth,
					  unsigned signal_every, unsigned cq_count,
					  unsigned cq_period_us, struct kvl_verbs_addr *local,
					  char *err, size_t errlen);

/*
 * Move the QP to RTR and RTS towards @remote. A mismatch an operator can fix is reported
 * in words, naming both ends' values: GID type (RoCE v1 vs v2), link layer, MTU (the path
 * MTU is the smaller, and said), a LID of 0 on InfiniBand. Returns 0 or a negative errno.
 */
int kvl_verbs_conn_connect(struct kvl_verbs_conn *c, const struct kvl_verbs_addr *remote, char *err,
			   size_t errlen);

/* Both ends' addresses as they stand (a resync moves the PSNs on; the remote is zero
 * before connect). Either pointer may be NULL. */
void kvl_verbs_conn_addrs(const struct kvl_verbs_conn *c, struct kvl_verbs_addr *local,
			  struct kvl_verbs_addr *remote);

/* The peer's segments (copied): what kvl_verbs_post() checks and addresses against. */
int kvl_verbs_set_remote(struct kvl_verbs_conn *c, const struct kvl_verbs_rseg *s, unsigned n);

/*
 * Post a batch: every WR is checked first (local range inside memory registered on this
 * device: else KVL_ERR_LOCAL; remote segment known, allowed and in bounds: else
 * KVL_ERR_NO_SEGMENT / ACCESS / BOUNDS) — a refused WR completes at once with that status
 * and never reaches the NIC. The rest go to the QP in one ibv_wr_start/complete, several WRs
 * per post. Returns how many of @n were taken (fewer when the queue is full).
 */
unsigned kvl_verbs_post(struct kvl_verbs_conn *c, const struct kvl_wr *wr, unsigned n);

/*
 * The same in two halves, for an lcore that takes requests one at a time: enqueue checks
 * and keeps them (refused ones complete at once); flush hands all kept so far to the QP as
 * one batch, one doorbell, selectively signaled. kvl_verbs_progress() flushes first.
 */
unsigned kvl_verbs_enqueue(struct kvl_verbs_conn *c, const struct kvl_wr *wr, unsigned n);
void kvl_verbs_flush(struct kvl_verbs_conn *c);

/*
 * Poll the CQ. An error completion becomes a typed status on its request alone (remote
 * access error -> KVL_ERR_ACCESS, retry exceeded -> KVL_ERR_CONN_LOST, ...) and a counter.
 * The QP, now in error, flushes the requests behind it; they are kept, not failed. Then both
 * ends of the connection resync (below): each restarts its QP at a fresh PSN and the flushed
 * requests are posted again. Returns the work done.
 */
unsigned kvl_verbs_progress(struct kvl_verbs_conn *c);

/*
 * Resync, carried by the control path (the messages are struct kvl_resync, xport.h). After
 * an error, once its QP has flushed everything, a side sends REQ with its fresh PSN, every
 * 100 ms until answered; the peer takes its own QP through ERR, restarts towards that PSN
 * and sends ACK with its own fresh PSN; the first side restarts on the ACK. If REQs cross,
 * the side with the lower (GID, QPN) answers. No ACK within the timeout (5 s unless set):
 * every request fails KVL_ERR_CONN_LOST, as with kvl_verbs_fail_all().
 * resync_out: 1 and the message to send now, or 0. resync_in: what the peer sent.
 */
int kvl_verbs_resync_out(struct kvl_verbs_conn *c, struct kvl_resync *m);
void kvl_verbs_resync_in(struct kvl_verbs_conn *c, const struct kvl_resync *m);
void kvl_verbs_set_resync_timeout(struct kvl_verbs_conn *c, unsigned ms);

/*
 * The stall watchdog's bound: WRs at the NIC and no completion for @ms puts the QP in error
 * and resyncs it, as an error CQE would (stats.stall_resets). Default: twice the NIC's own
 * retry bound ((retry_count + 1) ACK timeouts), at least 10 s.
 */
void kvl_verbs_set_stall_timeout(struct kvl_verbs_conn *c, unsigned ms);

/*
 * Sleeping until completions come (hybrid idle mode): the completion channel's fd (-1 when
 * the device gave none), arm the CQ (one event for the next CQE: after arming, progress once
 * more before sleeping, for a CQE that came in between), and take the events that came
 * (never blocks; they are acked, as destroying the CQ requires).
 */
int kvl_verbs_event_fd(const struct kvl_verbs_conn *c);
int kvl_verbs_arm(struct kvl_verbs_conn *c);
unsigned kvl_verbs_take_events(struct kvl_verbs_conn *c);

/* Take up to @max notes: the peer's WRITEs with KVL_WR_NOTIFY that have landed here, in the
 * order they landed. A note not taken before @depth more arrive is dropped (counted). */
unsigned kvl_verbs_notes(struct kvl_verbs_conn *c, struct kvl_note *out, unsigned max);

/* Take up to @max completions, in posting order. */
unsigned kvl_verbs_reap(struct kvl_verbs_conn *c, struct kvl_wc *wc, unsigned max);

/* Requests posted and not yet reaped. */
unsigned kvl_verbs_outstanding(const struct kvl_verbs_conn *c);

/* Fail everything outstanding with @status (peer dead, shutdown): the QP goes to error, its
 * WRs are flushed and reported with @status. Posting afterwards fails at once with it. */
void kvl_verbs_fail_all(struct kvl_verbs_conn *c, int status);

/* The status kvl_verbs_fail_all() was given, 0 before. */
int kvl_verbs_failed(const struct kvl_verbs_conn *c);

struct kvl_verbs_stats {
	uint64_t posted, signaled, completed, errors;
	uint64_t posts; /* ibv_wr_complete calls */
	uint64_t bytes_written, bytes_read;
	uint64_t failed[KVL_STATUS_COUNT];
	uint64_t recoveries; /* QP brought back from the error state (resyncs completed) */
	uint64_t resyncs;    /* resyncs this side asked for (REQ) */
	uint64_t resync_answered, resync_ignored, resync_timeouts;
	uint64_t replayed;	       /* WRs posted again after a resync */
	uint64_t arms, cq_events;      /* hybrid idle: CQ armed, completion events taken */
	uint64_t notes, notes_dropped; /* immediates received (WRITE_WITH_IMM), and dropped */
	uint64_t sge_wrs;	       /* WRs given to the QP with two SGEs or more */
	uint64_t recv_errors, recv_post_errors;
	uint64_t rq_drain_timeouts; /* drains that went on without every receive flushed */
	uint64_t stall_resets;	    /* QPs the watchdog put in error: WRs out, no completion */
	uint64_t drain_timeouts;    /* drains that never ended: the connection failed */
	uint64_t cq_polls, cqes;    /* to see what selective signaling saves */
	/* mlx5 direct backend: doorbells rung (one per batch), lone WQEs written whole through
	 * BlueFlame, CQEs that named no outstanding WQE (stale, dropped), and stale CQEs
	 * discarded at a QP reset (rdma-core leaves a direct CQ to its owner). */
	uint64_t doorbells, bf_copies, stray_cqes, reset_discards;
	/* The last error CQE as the provider reported it (its status mapping merges some):
	 * enum ibv_wc_status (0: none yet) and the vendor syndrome. */
	uint64_t last_wc_status, last_vendor_err;
};

const struct kvl_verbs_stats *kvl_verbs_stats(const struct kvl_verbs_conn *c);

/* Where a connection stands, without asking the device (telemetry reads this). */
enum kvl_qp_state {
	KVL_QP_INIT = 0,   /* created, not connected yet */
	KVL_QP_RTS = 1,	   /* running */
	KVL_QP_DRAIN = 2,  /* error: waiting for the flushes of what the QP held */
	KVL_QP_RESYNC = 3, /* drained, waiting for the peer's end to restart (QP_RESYNC) */
	KVL_QP_FAILED = 4, /* failed on purpose or for good: posts complete at once */
};

enum kvl_qp_state kvl_verbs_conn_state(const struct kvl_verbs_conn *c);
const char *kvl_qp_state_name(uint64_t state);

/* QP state as ibv_query_qp reports it ("RTS", "ERR", ...), for telemetry. */
const char *kvl_verbs_qp_state(struct kvl_verbs_conn *c);

/* The path the QP holds, as ibv_query_qp reads it back: what the NIC puts on the wire. */
struct kvl_verbs_qp_path {
	unsigned mtu; /* bytes */
	uint8_t traffic_class, service_level;
	uint16_t pkey_index;
	uint8_t ack_timeout, retry_count; /* as the QP holds them (exponent, retries) */
};
int kvl_verbs_qp_path(struct kvl_verbs_conn *c, struct kvl_verbs_qp_path *p);

void kvl_verbs_conn_free(struct kvl_verbs_conn *c);

#endif /* KVL_LCORES_VERBS_H */
