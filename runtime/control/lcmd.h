/* SPDX-License-Identifier: BSD-3-Clause */
/* Commands to a NIC lcore that never block the control thread: a ring, then a bounded backlog. */
#ifndef KVL_RUNTIME_CONTROL_LCMD_H
#define KVL_RUNTIME_CONTROL_LCMD_H

#include <stdbool.h>
#include <stdint.h>

#include "nic_io.h"

/*
 * The control thread must never wait on a NIC lcore: it keeps heartbeats and every peer alive.
 * A command goes into the lcore's ring; when the ring is full (the lcore stalled or starved),
 * it waits in this backlog, in order, and is moved on at every turn of the control loop.
 *
 * Bounds: a command that must get through (FAIL_PEER: the lcore has to drop a dead peer's
 * connections) may fill the whole backlog; any other is refused once half of it is taken, and
 * its caller fails the peer (which queues one FAIL_PEER). A FAIL_PEER follows a peer that got
 * connections to that lcore, so they can never outnumber the half plus one per peer slot.
 */
#define KVL_LCMD_BACKLOG 1024

struct kvl_lcmd_backlog {
	struct kvl_lcmd q[KVL_LCMD_BACKLOG];
	unsigned head, n;
	uint64_t since_ns; /* when the backlog last went from empty to not empty */
	uint64_t queued;   /* commands that waited here (telemetry) */
	uint64_t refused;  /* commands refused: the backlog was half full */
	bool warned;	   /* the "lcore not taking commands" warning of this episode */
};

struct rte_ring;

/* Send @cmd to @ring behind what waits in @b. 0 when it is in the ring or waits in @b;
 * -ENOBUFS when @b refused it (then nothing was taken from @cmd: free what it carries). */
int kvl_lcmd_push(struct rte_ring *ring, struct kvl_lcmd_backlog *b, const struct kvl_lcmd *cmd,
		  uint64_t now_ns);

/* Move what waits in @b into @ring, in order, as far as it takes. Returns how many still wait. */
unsigned kvl_lcmd_drain(struct rte_ring *ring, struct kvl_lcmd_backlog *b);

#endif /* KVL_RUNTIME_CONTROL_LCMD_H */
