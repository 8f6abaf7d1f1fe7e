/* SPDX-License-Identifier: BSD-3-Clause */
/* The one small interface every transport's connection offers to the NIC lcore. */
#ifndef KVL_LCORES_XPORT_H
#define KVL_LCORES_XPORT_H

#include "tcp_data.h"
#include "xfer.h"

/*
 * What nic_io needs of a connection, whatever moves its bytes (TCP sockets; verbs QPs through
 * ibv_wr_* or mlx5 WQEs). Its counters are a struct kvl_xport_stats (xfer.h).
 */
struct kvl_xport_ops {
	const char *name;
	/* Burst, as DPDK's tx_burst: takes wr[0..k) of @n in order and returns k. When k < n,
	 * *err says why wr[k] was not taken: -EAGAIN full (try it again later), -EPIPE broken,
	 * -EMSGSIZE over the largest message, another negative errno: malformed. Whatever was
	 * taken completes through reap, whatever its fate on the wire. */
	unsigned (*post)(void *c, const struct kvl_wr *wr, unsigned n, int *err);
	unsigned (*progress)(void *c);
	unsigned (*reap)(void *c, struct kvl_wc *wc, unsigned max);
	void (*fail_all)(void *c, int status);
	int (*broken)(const void *c); /* non-zero: closing once nothing is outstanding */
	unsigned (*outstanding)(const void *c);
	void (*stats)(const void *c, struct kvl_xport_stats *out);
	void (*free)(void *c);
	/* Optional (NULL: the transport has none). Connection-level messages for the peer's
	 * end, carried by the control path: resync_out gives 1 and the message to send now, or
	 * 0; resync_in takes what the peer's end sent. */
	int (*resync_out)(void *c, struct kvl_resync *m);
	void (*resync_in)(void *c, const struct kvl_resync *m);
	/* Optional: sleeping on completion events (hybrid idle). event_fd: a pollable fd, or
	 * -1; arm: ask for an event on the next completion (0, or a negative errno); take_events:
	 * consume what came, without blocking. */
	int (*event_fd)(const void *c);
	/* Optional: the peer's segments changed (RDMA: struct kvl_verbs_rseg[@n], copied). */
	int (*set_remote)(void *c, const void *segs, unsigned n);
	/* Optional: notes of the peer's KVL_WR_NOTIFY writes that landed here. */
	unsigned (*notes)(void *c, struct kvl_note *out, unsigned max);
	int (*arm)(void *c);
	unsigned (*take_events)(void *c);
	/* Optional: kvl_now_ns() by which progress must run again although it reported no work
	 * (copies in flight on a GPU stream, whose end raises no event), UINT64_MAX when nothing
	 * is due. progress reports only work done; waiting is reported here, so the lcore can
	 * nap until then (hybrid idle) and counts the passes that only looked as idle. */
	uint64_t (*due)(const void *c);
};

struct kvl_xconn {
	const struct kvl_xport_ops *ops; /* NULL: no connection */
	void *c;
};

/* Post one request through the burst interface: 0 or the negative errno it was refused with. */
static inline int kvl_xport_post1(const struct kvl_xport_ops *ops, void *c, const struct kvl_wr *wr)
{
	int err = 0;

	return ops->post(c, wr, 1, &err) == 1 ? 0 : err;
}

/* Every transport's burst from its one-request post: the loop stops at the first refusal. */
#define KVL_XPORT_BURST_OF(fn, conn_type)                                                  \
	static unsigned fn##_burst(void *c, const struct kvl_wr *wr, unsigned n, int *err) \
	{                                                                                  \
		unsigned k = 0;                                                            \
		int rc = 0;                                                                \
                                                                                           \
		while (k < n && (rc = fn((conn_type *)c, &wr[k])) == 0)                    \
			k++;                                                               \
		if (k < n)                                                                 \
			*err = rc;                                                         \
		return k;                                                                  \
	}

extern const struct kvl_xport_ops kvl_xport_tcp;
extern const struct kvl_xport_ops kvl_xport_verbs;

/* The null transport (lcores/xport/xport_null.c): every post completes at once with KVL_OK and
 * moves nothing; up to @depth completions wait to be reaped. NULL with errno on failure. */
struct kvl_null_conn;
struct kvl_null_conn *kvl_null_conn_new(unsigned depth);
extern const struct kvl_xport_ops kvl_xport_null;

#endif /* KVL_LCORES_XPORT_H */
