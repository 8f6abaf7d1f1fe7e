/* SPDX-License-Identifier: BSD-3-Clause */
/* KVL_CUDMA_AUTO's choice per batch as a pure model (no CUDA): the transport and its tests. */
#ifndef KVL_LCORES_XPORT_CUDMA_PICK_H
#define KVL_LCORES_XPORT_CUDMA_PICK_H

#include <stdbool.h>
#include <stdint.h>

/*
 * How a step goes either way (xport_cudma.h, the auto_* options): a step lasts the longer of
 * its compute, slowed by the copies beside it, and its transfer. The copy engine slows the
 * compute less and moves small blocks slower than the gather kernel. Kept apart from
 * xport_cudma.c so that a build or a test without a GPU runs the same decision.
 */
struct kvl_cudma_pick_model {
	uint32_t ce_ps, gather_ps;	     /* picoseconds a byte */
	uint32_t ce_slow_pm, gather_slow_pm; /* compute slowed, per mille */
};

/* true: the copy engine (cudaMemcpyBatchAsync); false: the gather kernel, also without an
 * estimate (0 compute or 0 bytes). */
static inline bool kvl_cudma_pick_engine(const struct kvl_cudma_pick_model *m, uint64_t compute_ns,
					 uint64_t step_bytes)
{
	uint64_t t_ce, t_g, x;

	if (compute_ns == 0 || step_bytes == 0)
		return false;
	t_ce = compute_ns + compute_ns * m->ce_slow_pm / 1000;
	x = step_bytes * m->ce_ps / 1000;
	t_ce = x > t_ce ? x : t_ce;
	t_g = compute_ns + compute_ns * m->gather_slow_pm / 1000;
	x = step_bytes * m->gather_ps / 1000;
	t_g = x > t_g ? x : t_g;
	return t_ce <= t_g;
}

#endif /* KVL_LCORES_XPORT_CUDMA_PICK_H */
