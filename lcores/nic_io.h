/* SPDX-License-Identifier: BSD-3-Clause */
/* A NIC lcore's I/O: rings to and from the API and the control thread, and its connections. */
#ifndef KVL_LCORES_NIC_IO_H
#define KVL_LCORES_NIC_IO_H

#include <stdbool.h>
#include <stdint.h>

#include "lcores.h"
#include "tcp_data.h"
#include "xfer.h"
#include "xport.h"

struct rte_ring;

#define KVL_SLOTS_PER_LCORE 64 /* data connections one lcore drives */
#define KVL_MAX_PEERS_RT    64 /* peers a runtime knows at once (slots of the peer table) */
#define KVL_NIC_IO_BURST    32

/* A work request as it travels the submission ring: struct kvl_wr without its SGE array
 * (the same fields, names and meaning). */
struct kvl_sub_wr {
	uint64_t wr_id;
	void *local; /* n_sge <= 1 */
	uint64_t remote_off;
	uint32_t length;
	uint32_t remote_seg;
	uint8_t op;
	uint8_t n_sge; /* 0 or 1: @local; 2..KVL_WR_MAX_SGE: in the extension elements */
	uint8_t flags; /* enum kvl_wr_flags */
	uint8_t reserved;
	uint32_t imm;
};

/*
 * API -> lcore: one work request for the connection in @slot (if it is still @gen), 48
 * bytes. A request with an SGE list (n_sge >= 2) is followed in the ring, in the same bulk
 * enqueue, by KVL_SUB_EXT(n_sge) elements of struct kvl_sub_ext carrying the list in order:
 * the common one-range request carries no SGE array (the ring element was 176 bytes with
 * one inline). A bulk enqueue is all or nothing, and its elements are contiguous and made
 * visible together, so the lcore never sees a head without its list.
 */
struct kvl_sub {
	struct kvl_sub_wr wr;
	uint16_t slot;
	uint16_t reserved;
	uint32_t gen;
};

#define KVL_SUB_EXT_SGES 3 /* SGEs per extension element */
struct kvl_sub_ext {
	struct kvl_sge sge[KVL_SUB_EXT_SGES];
};

/* Extension elements behind a head of @n_sge SGEs. */
#define KVL_SUB_EXT(n_sge) ((n_sge) > 1 ? ((n_sge) + KVL_SUB_EXT_SGES - 1) / KVL_SUB_EXT_SGES : 0)
/* Ring elements one request takes at most. */
#define KVL_SUB_MAX_ELEMS (1 + KVL_SUB_EXT(KVL_WR_MAX_SGE))

/* What a submission ring element is: a head, or one of its extensions. */
union kvl_sub_elem {
	struct kvl_sub head;
	struct kvl_sub_ext ext;
};

/* SGE @k of the request whose head is @e[0] (n_sge >= 2): into its extension elements. */
static inline void kvl_sub_set_sge(union kvl_sub_elem *e, unsigned k, void *addr, uint32_t length)
{
	e[1 + k / KVL_SUB_EXT_SGES].ext.sge[k % KVL_SUB_EXT_SGES] =
		(struct kvl_sge){ addr, length, 0 };
}

/* The elements one request of @n_sge SGEs takes; the unused SGEs of its last extension
 * zeroed (so no stack garbage travels the ring). */
static inline unsigned kvl_sub_elems(union kvl_sub_elem *e, unsigned n_sge)
{
	unsigned ext = KVL_SUB_EXT(n_sge);

	for (unsigned k = n_sge; ext != 0 && k < ext * KVL_SUB_EXT_SGES; k++)
		kvl_sub_set_sge(e, k, NULL, 0);
	return 1 + ext;
}

/* A request the lcore took from the ring, whole again (kvl_sub_unpack), or waiting in the
 * stash for room on its connection. */
struct kvl_sub_full {
	struct kvl_wr wr;
	uint16_t slot;
	uint32_t gen;
};

/*
 * The request whose head is @e[0] and whose KVL_SUB_EXT(n_sge) extensions follow it, into
 * @out: the head's fields, and the SGE list only when there is one (a one-range request
 * copies 48 bytes, not kvl_wr's 168). n_sge must be <= KVL_WR_MAX_SGE.
 */
void kvl_sub_unpack(const union kvl_sub_elem *e, struct kvl_sub_full *out);

/* control thread -> lcore */
enum kvl_lcmd_type {
	KVL_LCMD_ADD_CONN = 1, /* take @x into @slot (generation @gen) for peer @peer */
	KVL_LCMD_FAIL_PEER,    /* fail everything of @peer with @status and close its conns */
	KVL_LCMD_RESYNC,       /* @rs from the peer for the connection in @slot (if still @gen) */
	KVL_LCMD_SET_REMOTE,   /* the peer's segments for @slot: @ptr (malloc'd, freed by the
				* lcore), @status entries */
};

struct kvl_lcmd {
	uint32_t type;
	uint32_t peer;
	uint32_t slot;
	uint32_t gen;
	int32_t status;
	uint32_t reserved;
	struct kvl_xconn x;
	struct kvl_resync rs;
	uint32_t pad;
	void *ptr;
};

/* lcore -> control thread */
enum kvl_levt_type {
	KVL_LEVT_CONN_CLOSED = 1, /* @slot is free again; the connection failed with @status */
	KVL_LEVT_RESYNC,	  /* carry @rs to the peer's end of the connection in @slot */
	KVL_LEVT_REQ_CANCEL,	  /* tell @peer that request @req was canceled here */
};

struct kvl_levt {
	uint32_t type;
	uint32_t peer;
	uint32_t slot;
	int32_t status;
	struct kvl_resync rs;
	uint64_t req; /* KVL_LEVT_REQ_CANCEL */
};

/* Counters of one slot: the connection's, kept after it closes (one writer: the lcore). */
struct kvl_slot_stats {
	uint32_t peer;
	uint32_t gen;
	struct kvl_xport_stats tcp;
};

struct kvl_conn_slot {
	struct kvl_xconn x; /* x.ops NULL: free, or closed and reported */
	uint32_t peer;
	uint32_t gen;
	bool closing; /* broken: waiting for its last completions to be taken */
};

struct kvl_nic_io {
	struct rte_ring *sub; /* struct kvl_sub, many producers (API threads), this lcore */
	struct rte_ring *cpl; /* struct kvl_wc, this lcore -> one kvl_poll() caller */
	struct rte_ring *cmd; /* struct kvl_lcmd, control thread -> this lcore */
	struct rte_ring *evt; /* struct kvl_levt, this lcore -> control thread */
	struct rte_ring *ntf; /* struct kvl_notice, this lcore -> one kvl_poll_notices() caller */
	/* taken from @sub while their connection was full; retried first, in order */
	struct kvl_sub_full stash[KVL_NIC_IO_BURST];
	unsigned n_stash;
	struct kvl_conn_slot slot[KVL_SLOTS_PER_LCORE];
	/* bit i: slot[i] holds a connection (this lcore's view; telemetry reads slot[].x.ops),
	 * so a pass over the connections visits only those */
	uint64_t live;
	uint64_t passes; /* do_connections() calls: every PUBLISH_EVERY, counters are published */
	struct kvl_slot_stats stats[KVL_SLOTS_PER_LCORE]; /* read by telemetry */
	/* what closed connections of each peer moved, so telemetry still counts it */
	struct kvl_xport_stats closed[KVL_MAX_PEERS_RT];
	uint64_t unroutable;  /* submissions for a slot that is gone: completed NO_PEER */
	uint64_t evt_dropped; /* resync messages the full event ring refused (sent again) */
	uint64_t ntf_queued;  /* notices (WRITE_WITH_IMM received) queued for kvl_poll_notices */
	uint64_t ntf_dropped; /* notices the full notice ring refused (nobody polls them) */
	/* The scheduler's completions go to it (lcores/nic_sched.c), not to @cpl: it compacts
	 * the others to the front of @wc and returns their count. NULL: no scheduler. */
	unsigned (*take_wc)(void *arg, struct kvl_wc *wc, unsigned n);
	void *take_wc_arg;
	/* hybrid idle: the lcore sleeps in epoll on its connections' completion channels and
	 * on @efd, which producers write when they find @sleeping set */
	int epfd, efd;
	uint32_t sleeping;
	struct rte_ring *watch; /* another ring into this lcore (the scheduler's): no sleep
				 * while it holds something; its producers kick too */
	struct kvl_nic_io_sleep_stats {
		uint64_t sleeps;	/* epoll waits entered */
		uint64_t wake_cq;	/* woken by a completion event */
		uint64_t wake_kick;	/* woken by a submission or a control command */
		uint64_t wake_timeout;	/* nothing came within hybrid_sleep_us */
		uint64_t sleep_skipped; /* work found after arming: no sleep */
	} sleep;
	char name[32];
};

/*
 * After putting something in @io's sub or cmd ring: wake its lcore if it sleeps. The fence
 * pairs with the one in kvl_nic_io_sleep(): either the lcore sees the ring non-empty before
 * it sleeps, or this sees @sleeping set and writes the eventfd.
 */
void kvl_nic_io_kick(struct kvl_nic_io *io);

/*
 * The hybrid idle action of @io's lcore: arm every connection that has completion events,
 * run the stage once more (a completion that came before arming raises no event), then
 * sleep in epoll until a completion event, a kick, or @max_us. Returns the work done by
 * that extra pass (no sleep when it did some).
 */
unsigned kvl_nic_io_sleep(void *io, uint32_t max_us);

/*
 * Create the rings of NIC @nic on @socket, sized for @depth outstanding requests per
 * connection. Returns 0 or a negative errno.
 */
int kvl_nic_io_init(struct kvl_nic_io *io, unsigned nic, int socket, unsigned depth);

/* A ring of @count (rounded up to a power of two) @esize-byte elements on @socket, named
 * "kvl_<what><nic>" (unique per NIC), with @flags (RING_F_*) and exactly that many slots.
 * NULL with rte_errno set on failure. */
struct rte_ring *kvl_nic_ring(const char *what, unsigned nic, size_t esize, unsigned count,
			      int socket, unsigned flags);

/* Free the rings and every connection still open (after the lcore stopped). */
void kvl_nic_io_fini(struct kvl_nic_io *io);

/* The lcore stage: commands, submissions, progress, completions, closed connections.
 * @arg is the struct kvl_nic_io. Returns the work done. */
unsigned kvl_nic_io_stage(struct kvl_lcore *lc, void *arg);

/*
 * The one submission path, for the API's transfers and the scheduler's: post @wr[0..n) on @x
 * in order, through the transport's burst. A request refused for good completes at once (the
 * one status map, kvl_xport_status(), through kvl_nic_io_complete()) and counts in *@failed.
 * Returns how many were consumed (posted or failed); short of @n, *@err says why wr[ret]
 * waits: -EAGAIN (full) or -EPIPE (broken: the caller fails it or tries another connection).
 */
unsigned kvl_nic_io_post(struct kvl_nic_io *io, const struct kvl_xconn *x, const struct kvl_wr *wr,
			 unsigned n, int *err, unsigned *failed);

/* The status a transfer gets when @x refuses it with @err (-EPIPE: the connection's own
 * failure, else conn-lost; -EMSGSIZE: too large; anything else: protocol). */
int kvl_xport_status(const struct kvl_xconn *x, int err);

/* The one completion path: the scheduler's completions go to it (take_wc), the rest to the
 * API's ring. @wc may be reordered. */
void kvl_nic_io_complete(struct kvl_nic_io *io, struct kvl_wc *wc, unsigned n);

/* Complete @wr_id at once with @status (bytes 0) through kvl_nic_io_complete(). */
void kvl_nic_io_fail(struct kvl_nic_io *io, uint64_t wr_id, int status);

/* Sum of the counters of @peer's connections on this lcore, live and closed (relaxed reads:
 * for telemetry). */
void kvl_nic_io_peer_stats(const struct kvl_nic_io *io, uint32_t peer, struct kvl_xport_stats *sum);

/* Sum of every connection this lcore drives or drove. */
void kvl_nic_io_total(const struct kvl_nic_io *io, struct kvl_xport_stats *sum);

/* Add @b into @a, field by field. */
void kvl_xport_stats_add(struct kvl_xport_stats *a, const struct kvl_xport_stats *b);

#endif /* KVL_LCORES_NIC_IO_H */
