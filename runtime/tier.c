/* SPDX-License-Identifier: BSD-3-Clause */
/* This host's KV tier as a peer of its own: its segments, its checks, its connections. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "kvl_build_config.h"
#include "log.h"
#include "nic_sched.h"
#include "peers.h"
#include "runtime.h"
#include "segments.h"
#include "staging.h"
#include "tier.h"

#if KVL_HAVE_CUDMA
#include "xport_cudma.h"
#endif

/* The copy engine's own request ring: a READ of several ranges takes one entry per range. */
#define ENGINE_DEPTH 8192
/* A batch for the engine: what the lcore's passes post while this much is in flight is handed
 * over together (xport_tier.h), so that the copy engine's per-batch cost (an event, the join of
 * its second stream) is paid per 8 MiB (128 blocks of 64 KiB), not per pass (32 descriptors). */
#define FLUSH_BYTES (8ull << 20)
/* While the lcore keeps posting, a batch is at least this: a pass of 32 descriptors of
 * 64 KiB, four passes of 16 KiB ones (xport_tier.h, min_batch). */
#define MIN_BATCH (2ull << 20)
/* The id the engine knows the pool by (it has one remote segment: the whole pool). */
#define POOL_SEG 1

static uint64_t staging_len(const struct kvl_runtime *rt)
{
	uint64_t slot = (uint64_t)rt->cfg.sched.slot_kb << 10;

	return ((uint64_t)rt->cfg.sched.staging_mb << 20) / slot * slot;
}

/* With VRAM staging the copy engine moves the bytes: it reads only the pool (pinned). */
static bool engine_path(const struct kvl_runtime *rt)
{
	return rt->staging_place == KVL_STAGING_GPU;
}

/* A segment the tier offers: host memory peers may READ (staging allows nothing), and, when
 * the copy engine reads it, inside the pool. */
static bool offered(const struct kvl_runtime *rt, const struct kvl_local_seg *s)
{
	return s->live && s->mem.kind == KVL_MEM_HOST && (s->desc.flags & KVL_SEG_REMOTE_READ) &&
	       (!engine_path(rt) || s->pooled);
}

struct seg_walk {
	const struct kvl_runtime *rt;
	struct kvl_seg_desc d[KVL_MAX_SEGS];
	unsigned n;
};

static void collect(void *arg, const struct kvl_local_seg *s)
{
	struct seg_walk *w = arg;

	if (offered(w->rt, s) && w->n < KVL_MAX_SEGS)
		w->d[w->n++] = s->desc;
}

static bool tier_on(const struct kvl_runtime *rt)
{
	for (unsigned i = 0; i < rt->cfg.n_nics; i++)
		if (rt->nic[i].sched != NULL && rt->nic[i].sched->tier.ops != NULL)
			return true;
	return false;
}

/* The segments the tier offers now, or NULL without a tier. */
static const struct seg_walk *offered_now(struct kvl_runtime *rt)
{
	static __thread struct seg_walk w; /* 64 descriptors: not on a caller's stack */

	if (!tier_on(rt))
		return NULL;
	w.rt = rt;
	w.n = 0;
	kvl_segs_visit(&rt->segs, collect, &w);
	return &w;
}

int kvl_tier_segments(struct kvl_runtime *rt, struct kvl_remote_seg *out, unsigned max)
{
	const struct seg_walk *w = offered_now(rt);

	if (w == NULL)
		return -ENOTCONN;
	/* what a request may do with it: READ, whatever peers may also do */
	for (unsigned i = 0; i < w->n && i < max; i++)
		kvl_peer_seg_out(&w->d[i], KVL_REMOTE_READ, &out[i]);
	return (int)w->n;
}

int kvl_tier_check(struct kvl_runtime *rt, const struct kvl_req_desc *d, uint32_t slot)
{
	const struct seg_walk *w = offered_now(rt);

	if (w == NULL)
		return -ENOTCONN;
	if (d->dir != KVL_REQ_PULL)
		return -EACCES;
	for (uint32_t i = 0; i < d->n_blocks; i++) {
		const struct kvl_req_block *b = &d->blocks[i];
		const struct kvl_seg_desc *s = NULL;

		if (b->length == 0)
			return -EINVAL;
		if (b->length > slot)
			return -EMSGSIZE;
		for (unsigned k = 0; k < w->n && s == NULL; k++)
			if (w->d[k].id == b->remote_seg)
				s = &w->d[k];
		if (s == NULL)
			return -ENOENT;
		if (b->remote_off > s->length || b->length > s->length - b->remote_off)
			return -ERANGE;
	}
	return 0;
}

int kvl_tier_nic(struct kvl_runtime *rt)
{
	static unsigned rr;

	for (unsigned k = 0; k < rt->cfg.n_nics; k++) {
		unsigned i = (rr + k) % rt->cfg.n_nics;

		if (rt->nic[i].sched != NULL && rt->nic[i].sched->tier.ops != NULL) {
			rr = i + 1;
			return (int)i;
		}
	}
	return -1;
}

int kvl_tier_stats(const struct kvl_runtime *rt, unsigned nic, struct kvl_tier_stats *out)
{
	const struct kvl_nic_sched *ns = nic < rt->cfg.n_nics ? rt->nic[nic].sched : NULL;

	if (ns == NULL || ns->tier.ops == NULL)
		return -ENOENT;
	kvl_tier_stats_read(ns->tier.c, out);
	return 0;
}

#if KVL_HAVE_CUDMA
/* [sched] tier_copy as the transport's small-copy method (config.h enum kvl_tier_copy). */
static enum kvl_cudma_small small_method(int tier_copy)
{
	switch (tier_copy) {
	case KVL_TIER_COPY_GATHER:
		return KVL_CUDMA_GATHER;
	case KVL_TIER_COPY_BATCH:
		return KVL_CUDMA_BATCH;
	case KVL_TIER_COPY_EACH:
		return KVL_CUDMA_EACH;
	default:
		return KVL_CUDMA_AUTO;
	}
}

/* The tier's hooks into its engine (xport_tier.h): the scheduler's estimates in, the batches
 * by method out. */
static void engine_estimates(void *engine, uint64_t compute_ns, uint64_t step_bytes)
{
	kvl_cudma_set_estimates(engine, compute_ns, step_bytes);
}

static void engine_methods(const void *engine, uint64_t *on_copy_engine, uint64_t *on_gather)
{
	const struct kvl_cudma_stats *st = kvl_cudma_stats(engine);

	*on_copy_engine = st->batches_engine;
	*on_gather = st->batches_gather;
}

/* An engine-owned destination's GPU segment (KVL_REQ_ENGINE_DEST, checked at open against the
 * same table): the engine may write it from now on. A refusal (another device's memory, its
 * table full) is logged once per segment by the tier's caller: its READs fail KVL_ERR_LOCAL. */
static int engine_add_local(void *engine, void *base, uint64_t len)
{
	char why[192];
	int rc = kvl_cudma_add_local(engine, base, len, why, sizeof(why));

	if (rc < 0)
		KVL_LOG(ERR, "sched.tier: destination segment %p + %" PRIu64 ": %s", base, len,
			why);
	return rc;
}

static void engine_counters(const void *engine, struct kvl_tier_engine_ctr *out)
{
	const struct kvl_cudma_stats *st = kvl_cudma_stats(engine);

	memset(out, 0, sizeof(*out));
	out->launches = st->launches;
	out->small_copies = st->small_copies;
	out->engine_copies = st->engine_copies;
	out->probes = st->rates.probes;
	out->bad_samples = st->rates.bad;
	for (unsigned k = 0; k < 2; k++) {
		out->ce_ps[k] = st->rates.cls[k].ps[0];
		out->gather_ps[k] = st->rates.cls[k].ps[1];
		out->ce_samples[k] = st->rates.cls[k].samples[0];
		out->gather_samples[k] = st->rates.cls[k].samples[1];
	}
	out->svc_ns_engine = st->svc_ns_engine;
	out->svc_bytes_engine = st->svc_bytes_engine;
	out->svc_ns_gather = st->svc_ns_gather;
	out->svc_bytes_gather = st->svc_bytes_gather;
}
#endif

/* NIC @i's copy engine into its VRAM staging, reading the pool: 0, or -errno with why. */
static int engine_new(struct kvl_runtime *rt, unsigned i, struct kvl_tier_opts *o, char *err,
		      size_t errlen)
{
#if KVL_HAVE_CUDMA
	const struct kvl_pool *pool = &rt->segs.pool;
	struct kvl_cudma_opts co = { .device = kvl_staging_gpu_of(rt, i),
				     .depth = ENGINE_DEPTH,
				     .small = small_method(rt->cfg.sched.tier_copy),
				     /* AUTO by the rates measured under the runtime's batches */
				     .auto_measured = true };
	struct kvl_cudma_conn *c;
	char why[256];
	int rc, prev = -1, e;

	if (pool->base == NULL || !pool->cuda_registered) {
		snprintf(err, errlen,
			 "sched.tier: nic.%s stages in VRAM, and the copy engine reads only memory "
			 "pinned for CUDA: set [memory] pool_size_mb > 0 and carve the tier's "
			 "segments from it",
			 rt->cfg.nics[i].label);
		return -EINVAL;
	}
	/* everything else at the transport's measured defaults (docs/gpu-bench.md); the
	 * caller's thread keeps its current device (kvl_cudma_new sets the staging's) */
	if (cudaGetDevice(&prev) != cudaSuccess)
		prev = -1;
	c = kvl_cudma_new(&co, why, sizeof(why));
	e = errno;
	if (prev >= 0 && prev != co.device)
		cudaSetDevice(prev);
	if (c == NULL) {
		snprintf(err, errlen, "sched.tier: nic.%s: %s", rt->cfg.nics[i].label, why);
		return -e;
	}
	rc = kvl_cudma_add_local(c, rt->nic[i].staging, staging_len(rt), why, sizeof(why));
	if (rc == 0)
		rc = kvl_cudma_add_remote(c, POOL_SEG, pool->base, pool->size, KVL_SEG_REMOTE_READ,
					  why, sizeof(why));
	if (rc < 0) {
		kvl_cudma_free(c);
		snprintf(err, errlen, "sched.tier: nic.%s: %s", rt->cfg.nics[i].label, why);
		return rc;
	}
	o->engine = (struct kvl_xconn){ &kvl_xport_cudma, c };
	o->engine_depth = ENGINE_DEPTH;
	o->flush_bytes = FLUSH_BYTES;
	o->min_batch = MIN_BATCH;
	o->dma_seg = POOL_SEG;
	o->dma_base = (uintptr_t)pool->base;
	o->dma_len = pool->size;
	o->engine_estimates = engine_estimates;
	o->engine_methods = engine_methods;
	o->engine_add_local = engine_add_local;
	o->engine_counters = engine_counters;
	return 0;
#else
	(void)o;
	snprintf(err, errlen,
		 "sched.tier: nic.%s stages in VRAM, but this build has no copy-engine transport "
		 "(built without nvcc): use staging = host",
		 rt->cfg.nics[i].label);
	return -ENOTSUP;
#endif
}

int kvl_tier_start(struct kvl_runtime *rt, char *err, size_t errlen)
{
	if (!rt->cfg.sched.tier)
		return 0;
	for (unsigned i = 0; i < rt->cfg.n_nics; i++) {
		struct kvl_nic_sched *ns = rt->nic[i].sched;
		struct kvl_tier_opts o = { .segs = &rt->segs.tab,
					   .staging = rt->nic[i].staging,
					   .staging_len = staging_len(rt),
					   .rate_Bps = (uint64_t)rt->cfg.sched.tier_rate_mbps *
						       125000 };
		struct kvl_tier_conn *c;
		int rc;

		if (ns == NULL)
			continue;
		if (engine_path(rt)) {
			rc = engine_new(rt, i, &o, err, errlen);
			if (rc < 0)
				return rc;
		}
		c = kvl_tier_new(&o);
		if (c == NULL) {
			if (o.engine.ops)
				o.engine.ops->free(o.engine.c);
			snprintf(err, errlen, "sched.tier: nic.%s: %s", rt->cfg.nics[i].label,
				 strerror(errno));
			return -ENOMEM;
		}
		ns->tier = (struct kvl_xconn){ &kvl_xport_tier, c };
		KVL_LOG(INFO,
			"sched.tier: nic.%s serves this host's KV tier into %s staging (%s%s)",
			rt->cfg.nics[i].label, engine_path(rt) ? "VRAM" : "host",
			engine_path(rt) ? "copy engine + gather kernel, tier_copy = "
					: "memcpy on the lcore",
			engine_path(rt) ? kvl_tier_copy_name(rt->cfg.sched.tier_copy) : "");
		if (o.rate_Bps)
			KVL_LOG(INFO, "sched.tier: nic.%s paced to %u Mb/s (tier_rate_mbps)",
				rt->cfg.nics[i].label, rt->cfg.sched.tier_rate_mbps);
	}
	return 0;
}

void kvl_tier_stop(struct kvl_runtime *rt)
{
	for (unsigned i = 0; i < KVL_MAX_NICS; i++) {
		struct kvl_nic_sched *ns = rt->nic[i].sched;

		if (ns == NULL || ns->tier.ops == NULL)
			continue;
		ns->tier.ops->free(ns->tier.c); /* the engine waits for its stream first */
		ns->tier = (struct kvl_xconn){ 0 };
	}
}
