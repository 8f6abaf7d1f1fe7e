/* SPDX-License-Identifier: BSD-3-Clause */
/* Commands to a NIC lcore that never block the control thread: a ring, then a bounded backlog. */
#include <errno.h>

#include <rte_ring_elem.h>

#include "lcmd.h"

unsigned kvl_lcmd_drain(struct rte_ring *ring, struct kvl_lcmd_backlog *b)
{
	while (b->n > 0 && rte_ring_enqueue_elem(ring, &b->q[b->head], sizeof(b->q[0])) == 0) {
		b->head = (b->head + 1) % KVL_LCMD_BACKLOG;
		b->n--;
	}
	if (b->n == 0)
		b->warned = false;
	return b->n;
}

int kvl_lcmd_push(struct rte_ring *ring, struct kvl_lcmd_backlog *b, const struct kvl_lcmd *cmd,
		  uint64_t now_ns)
{
	bool must = cmd->type == KVL_LCMD_FAIL_PEER;
	struct kvl_lcmd copy = *cmd; /* DPDK's enqueue takes a non-const pointer */

	/* Order: nothing overtakes what already waits. */
	if (kvl_lcmd_drain(ring, b) == 0 && rte_ring_enqueue_elem(ring, &copy, sizeof(copy)) == 0)
		return 0;
	if (b->n >= (must ? KVL_LCMD_BACKLOG : KVL_LCMD_BACKLOG / 2)) {
		b->refused++;
		return -ENOBUFS;
	}
	if (b->n == 0)
		b->since_ns = now_ns;
	b->q[(b->head + b->n) % KVL_LCMD_BACKLOG] = *cmd;
	b->n++;
	b->queued++;
	return 0;
}
