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

/*
 * The rates AUTO measures under the consumer's own batches: per method (0: the copy engine,
 * 1: the gather kernel) and small-copy size class, an EWMA (1/8) of picoseconds a byte, from
 * each batch's service time as the lcore reaps it (its completion minus the later of its
 * launch and the previous batch's completion: the time the stream spent on it). The fixed
 * model stands until a rate has KVL_CUDMA_RATE_MIN samples. The method not chosen is kept
 * measured: once KVL_CUDMA_PROBE_EVERY batches of a class went the other way since its last
 * sample or probe (KVL_CUDMA_PROBE_WARM while it has fewer than KVL_CUDMA_RATE_MIN samples),
 * one batch (a probe, counted) takes it.
 */
#define KVL_CUDMA_RATE_MIN     8
#define KVL_CUDMA_PROBE_EVERY  64
#define KVL_CUDMA_PROBE_WARM   8
#define KVL_CUDMA_RATE_CLASSES 2
/* A sample faster than this (1 TB/s: no PCIe link) or slower (1 MB/s) is a bad clock or an
 * empty batch, not a rate: refused, counted. */
#define KVL_CUDMA_PS_MIN 1u
#define KVL_CUDMA_PS_MAX 1000000u

struct kvl_cudma_rate {
	uint32_t ps[2];	     /* EWMA, picoseconds a byte, per method (0: none yet) */
	uint64_t samples[2]; /* samples taken into it */
	uint32_t since[2];   /* batches of this class since the method's last sample or probe */
};

struct kvl_cudma_rates {
	struct kvl_cudma_rate cls[KVL_CUDMA_RATE_CLASSES];
	uint64_t probes;
	uint64_t bad;
};

/* The size class of a batch whose small copies average @avg_len bytes. */
static inline unsigned kvl_cudma_rate_class(uint64_t avg_len)
{
	return avg_len >= (32u << 10) ? 1 : 0;
}

/* One batch's service: @bytes moved by method @engine (true: the copy engine) in @ns. false:
 * refused as a bad sample (counted, the rate unchanged). */
static inline bool kvl_cudma_rate_sample(struct kvl_cudma_rates *r, unsigned cls, bool engine,
					 uint64_t bytes, uint64_t ns)
{
	struct kvl_cudma_rate *c;
	uint64_t ps;
	unsigned m = engine ? 0 : 1;

	if (cls >= KVL_CUDMA_RATE_CLASSES || bytes == 0 || ns == 0 || ns > UINT64_MAX / 1000) {
		r->bad++;
		return false;
	}
	ps = ns * 1000 / bytes;
	if (ps < KVL_CUDMA_PS_MIN || ps > KVL_CUDMA_PS_MAX) {
		r->bad++;
		return false;
	}
	c = &r->cls[cls];
	c->ps[m] = c->ps[m] == 0 ? (uint32_t)ps : (uint32_t)(((uint64_t)c->ps[m] * 7 + ps + 4) / 8);
	c->samples[m]++;
	c->since[m] = 0;
	return true;
}

/*
 * AUTO's choice for a batch of class @cls: the model @m (its fixed rates) with each measured
 * rate in place of the fixed one once it has enough samples; then, when the method not chosen
 * has gone KVL_CUDMA_PROBE_EVERY batches of this class unmeasured, this batch probes it
 * (*@probe set, counted). Without an estimate (0 compute or bytes): the gather kernel, no
 * probe. Each call counts the batch against the method it did not take.
 */
static inline bool kvl_cudma_pick_auto(struct kvl_cudma_rates *r,
				       const struct kvl_cudma_pick_model *m, unsigned cls,
				       uint64_t compute_ns, uint64_t step_bytes, bool *probe)
{
	struct kvl_cudma_pick_model x = *m;
	struct kvl_cudma_rate *c;
	unsigned other;
	bool engine;

	*probe = false;
	if (compute_ns == 0 || step_bytes == 0 || cls >= KVL_CUDMA_RATE_CLASSES)
		return false;
	c = &r->cls[cls];
	if (c->samples[0] >= KVL_CUDMA_RATE_MIN && c->ps[0])
		x.ce_ps = c->ps[0];
	if (c->samples[1] >= KVL_CUDMA_RATE_MIN && c->ps[1])
		x.gather_ps = c->ps[1];
	engine = kvl_cudma_pick_engine(&x, compute_ns, step_bytes);
	other = engine ? 1 : 0;
	if (c->since[other] >= (c->samples[other] < KVL_CUDMA_RATE_MIN ? KVL_CUDMA_PROBE_WARM
								       : KVL_CUDMA_PROBE_EVERY)) {
		*probe = true;
		r->probes++;
		c->since[other] = 0; /* one probe in flight, not one per batch until it lands */
		engine = !engine;
	}
	/* the other way waits one more batch for its next sample */
	c->since[engine ? 1 : 0]++;
	return engine;
}

#endif /* KVL_LCORES_XPORT_CUDMA_PICK_H */
