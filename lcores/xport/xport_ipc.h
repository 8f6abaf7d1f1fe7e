/* SPDX-License-Identifier: BSD-3-Clause */
/* The same-host transport: READs of a co-located peer's GPU segments through CUDA IPC. */
#ifndef KVL_LCORES_XPORT_IPC_H
#define KVL_LCORES_XPORT_IPC_H

#include <stdbool.h>
#include <stdint.h>

#include "xport.h"

/*
 * A peer on this host (the control path compared host identities) exports its GPU segments as
 * CUDA IPC handles (struct kvl_ipc_rseg: a handle of the allocation's base, the segment's
 * offset in it). This connection opens each handle once, on the lcore that posts (its CUDA
 * context), checks every READ against the segment table (typed statuses, nothing moved), and
 * hands what passes to a copy engine: in the runtime the cudma transport (lcores/gpu), which
 * merges contiguous runs into one copy, batches scattered blocks and completes batches by
 * polling events. Nothing here calls CUDA: the driver (open/close a handle) and the engine
 * (its source table) come as function pointers, so the unit tests script both on the CPU.
 */

/* One exported segment of the peer, as its IPC_SEGS announced it. */
struct kvl_ipc_rseg {
	uint32_t id;	/* the peer's segment id (SEGMENTS) */
	uint32_t gen;	/* changes when the id names another allocation */
	uint32_t flags; /* enum kvl_seg_flags: READ is what a request may do */
	uint8_t gpu_uuid[16];
	uint8_t handle[64]; /* CUipcMemHandle of the allocation's base */
	uint64_t offset;    /* of the segment in the allocation */
	uint64_t length;
};

struct kvl_ipc_drv {
	/* Map @handle; 0 with *@dptr the allocation's base here, or a negative errno with why
	 * in @err (the driver's words). */
	int (*open)(void *arg, const uint8_t handle[64], uint64_t *dptr, char *err, size_t errlen);
	void (*close)(void *arg, uint64_t dptr); /* nothing of it is in flight any more */
	void *arg;
};

/* The engine's source table: the mapped range of one segment under engine id @eid. */
struct kvl_ipc_engine {
	struct kvl_xconn x; /* post / progress / reap / fail_all / free, as kvl_xport_cudma */
	int (*add_src)(void *c, uint32_t eid, uint64_t base, uint64_t len, char *err,
		       size_t errlen);
	void (*del_src)(void *c, uint32_t eid); /* later posts of @eid are refused */
};

struct kvl_ipc_opts {
	struct kvl_ipc_drv drv;
	struct kvl_ipc_engine engine; /* freed with the connection */
	unsigned depth;		      /* READs posted and not reaped (power of two; 0: 8192) */
	unsigned engine_depth;	      /* the engine's own ring (power of two; 0: 8192) */
	void *drv_owned; /* free()d with the connection, after its last close (drv.arg's block) */
};

struct kvl_ipc_stats {
	uint64_t reads, done, bytes, refused;
	uint64_t opens, open_failures, closes, stale; /* stale: READs of a replaced or freed one */
	uint64_t copies;			      /* requests handed to the engine */
	uint64_t engine_errors;
	uint64_t inflight;
	int64_t last_refusal; /* enum kvl_status */
	char last_open_error[96];
};

struct kvl_ipc_conn;

/* NULL with errno (EINVAL: a missing driver or engine call, a depth not a power of two). */
struct kvl_ipc_conn *kvl_ipc_new(const struct kvl_ipc_opts *o);

/* The peer's segments now (@n of @segs; copied). A segment whose id and gen are known stays
 * open; one that is gone, or whose gen changed, is closed once nothing of it is in flight,
 * and READs of it from now on complete KVL_ERR_NO_SEGMENT. A new one is opened at once; one
 * whose handle the driver refuses stays listed as refused: its READs complete KVL_ERR_ACCESS.
 * Returns how many are open. (It is the transport's set_remote.) */
int kvl_ipc_set_segments(struct kvl_ipc_conn *c, const struct kvl_ipc_rseg *segs, unsigned n);

void kvl_ipc_stats_read(const struct kvl_ipc_conn *c, struct kvl_ipc_stats *out);

extern const struct kvl_xport_ops kvl_xport_ipc;

/* What decides, per peer, whether its READs go over ipc (transport = auto's rule). */
struct kvl_ipc_facts {
	bool enabled;	       /* [nic.*] ipc = auto (not off) */
	bool peer_level;       /* the peer negotiated KVL_CTRL_FEATURE_HOST (sends HOST) */
	bool same_host;	       /* its HOST id equals ours */
	bool same_process;     /* CUDA IPC refuses to open a handle in its own process */
	unsigned n_exported;   /* GPU segments it exported (IPC_SEGS) */
	bool local_gpu;	       /* this NIC's lcore has a CUDA device (VRAM staging) */
	int access;	       /* 1: same device or cuDeviceCanAccessPeer; 0 not; -1 unknown GPU */
	const char *gpu_error; /* why local_gpu is false, or NULL */
};

/* 1 when ipc serves the peer; else 0 with why not in @why ("another host", ...). */
int kvl_ipc_usable(const struct kvl_ipc_facts *f, char *why, size_t whylen);

#endif /* KVL_LCORES_XPORT_IPC_H */
