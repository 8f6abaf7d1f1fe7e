/* SPDX-License-Identifier: BSD-3-Clause */
/* This host's KV tier as a peer of its own: its segments, its checks, its connections. */
#ifndef KVL_RUNTIME_TIER_H
#define KVL_RUNTIME_TIER_H

#include <stddef.h>
#include <stdint.h>

#include "kvlane/kvlane.h"
#include "xport_tier.h"

struct kvl_runtime;

/*
 * [sched] tier = true: each NIC lcore with a scheduler gets a tier connection
 * (lcores/xport/xport_tier.c) that its scheduler stage posts KVL_PEER_LOCAL_TIER's READs to.
 * Host staging: memcpy on the lcore. VRAM staging: the copy engine and gather kernel
 * (lcores/gpu/xport_cudma.c, its measured defaults) reading the [memory] pool, pinned for CUDA.
 * After kvl_staging_start and before the lcores launch. 0, or a negative errno with why.
 */
int kvl_tier_start(struct kvl_runtime *rt, char *err, size_t errlen);
/* After the lcores stopped, before the scheduler stages are freed. */
void kvl_tier_stop(struct kvl_runtime *rt);

/* kvl_peer_segments(KVL_PEER_LOCAL_TIER): the segments the tier offers; -ENOTCONN without it. */
int kvl_tier_segments(struct kvl_runtime *rt, struct kvl_remote_seg *out, unsigned max);

/* kvl_req_open's edge checks for the tier, block by block: 0, -ENOTCONN (no tier), -EACCES (a
 * PUSH: the tier is only read), -EINVAL (a 0-byte block), -EMSGSIZE (over @slot), -ENOENT (no
 * such tier segment), -ERANGE (outside it). */
int kvl_tier_check(struct kvl_runtime *rt, const struct kvl_req_desc *d, uint32_t slot);

/* The NIC whose lcore serves a tier request (round robin over those with a tier), or -1. */
int kvl_tier_nic(struct kvl_runtime *rt);

/* NIC @nic's tier counters: 0, or -ENOENT when it has none (telemetry). */
int kvl_tier_stats(const struct kvl_runtime *rt, unsigned nic, struct kvl_tier_stats *out);

#endif /* KVL_RUNTIME_TIER_H */
