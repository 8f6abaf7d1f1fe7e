/* SPDX-License-Identifier: BSD-3-Clause */
/* The host tier transport: this host's KV in local host segments, copied into staging. */
#ifndef KVL_LCORES_XPORT_TIER_H
#define KVL_LCORES_XPORT_TIER_H

#include <stdbool.h>
#include <stdint.h>

#include "xport.h"

/* What the engine reports of its batches (engine_counters): where the time goes. */
struct kvl_tier_engine_ctr {
	uint64_t launches;	/* gather kernels + cudaMemcpyBatchAsync calls */
	uint64_t small_copies;	/* copies gathered into those */
	uint64_t engine_copies; /* cudaMemcpyAsync calls (large copies) */
	uint64_t probes;	/* AUTO: batches sent the other way to keep it measured */
	/* AUTO's measured rates under the runtime's batches, per method and small-copy size
	 * class (0: under 32 KiB, 1: 32 KiB and more): picoseconds a byte (0: none yet), and
	 * the samples taken */
	uint64_t ce_ps[2], gather_ps[2];
	uint64_t ce_samples[2], gather_samples[2];
	uint64_t bad_samples; /* service times refused by the model (0 bytes, 0 time, absurd) */
	/* every method: the batches' service time and bytes, summed (bytes / time: the rate
	 * each method delivered under the runtime) */
	uint64_t svc_ns_engine, svc_bytes_engine, svc_ns_gather, svc_bytes_gather;
};

/*
 * The peer KVL_PEER_LOCAL_TIER stands for: a READ names a local segment (its id in the lcores'
 * table) and lands in the lcore's staging, as a READ from a remote peer does. A segment is a
 * tier source when it is host memory (not KVL_SEG_GPU) that allows KVL_SEG_REMOTE_READ and,
 * with a copy engine, lies inside the memory the engine can read (dma_base, dma_len: the
 * [memory] pool, pinned for CUDA).
 *
 * Two ways to move the bytes, chosen once at creation:
 *   - no engine (engine.ops NULL): memcpy on the lcore, inside post (host staging: a host
 *     without a GPU, or staging = host);
 *   - an engine: a connection with the xport ops whose remote segment @dma_seg is
 *     [dma_base, dma_base + dma_len) and whose local memory is the staging (the copy engine and
 *     gather kernel, lcores/gpu/xport_cudma.c). Each local range becomes one of its requests;
 *     a READ completes when all of its have, so when it completes its bytes are in staging and
 *     visible to the GPU (the engine completes a batch only once its CUDA event has passed,
 *     polled in progress, never waited for).
 * A local range lands in staging, or (KVL_REQ_ENGINE_DEST: the engine's paged KV cache) inside
 * a live local segment of the table: a host one without an engine (memcpy), a GPU one with it
 * (the engine is told the segment once, engine_add_local). Completions come back in posting
 * order. Refusals (a segment that is not a tier source, a range outside it, a local range in
 * neither) take a slot and complete with their status.
 */
struct kvl_tier_opts {
	const struct kvl_seg_table *segs; /* the lcores' table (runtime/segments.c) */
	uint8_t *staging;		  /* where READs land */
	uint64_t staging_len;
	struct kvl_xconn engine; /* NULL ops: memcpy on the lcore */
	unsigned engine_depth;	 /* requests the engine holds at most (a power of two) */
	/* engine: what waits is handed over as one batch once this many bytes have gathered, or
	 * at once while less than this is in flight (0: 8 MiB) */
	uint64_t flush_bytes;
	/* engine, 0: off (the rule above alone). Else, while the lcore keeps posting pass after
	 * pass, what waits goes over only once this many bytes have gathered (or flush_bytes, or
	 * a pass that posts nothing), and while this much or more is in flight only at
	 * flush_bytes (or a pass that posts nothing): a batch per pass when the engine drains as
	 * fast as the passes come pays the engine's per-batch cost on every pass, and slows the
	 * passes that pay it (the runtime's 16 KiB rate then fell to 0.69x of the transport alone).
	 */
	uint64_t min_batch;
	uint32_t dma_seg; /* engine: its remote segment id for [dma_base, +dma_len) */
	uintptr_t dma_base;
	uint64_t dma_len;
	unsigned depth; /* READs posted and not reaped (0: 8192; a power of two) */
	/* the clock copy_ns and due times are counted on (NULL: kvl_now_ns, which the lcore
	 * loop reads due times on: a clock of its own is for tests) */
	uint64_t (*clock)(void *arg);
	void *clock_arg;
	/* READs are taken at most this many bytes per second, on average ([sched] tier_rate_mbps:
	 * a link rate the tier stands for, or a rate limit); 0: as fast as they come */
	uint64_t rate_Bps;
	/* engine: the consumer's estimates passed on to it (kvl_tier_set_estimates), for an
	 * engine that picks its copy method per batch by them (xport_cudma's AUTO); NULL: it
	 * takes none */
	void (*engine_estimates)(void *engine, uint64_t compute_ns, uint64_t step_bytes);
	/* engine: its batches by copy method so far (the copy engine alone, the gather kernel),
	 * read into the stats at each reap; NULL: not counted */
	void (*engine_methods)(const void *engine, uint64_t *on_copy_engine, uint64_t *on_gather);
	/* engine: GPU segment [@base, +@len) (an engine-owned destination's) made writable by it:
	 * 0, or negative (its READs then complete KVL_ERR_LOCAL); NULL: only staging is */
	int (*engine_add_local)(void *engine, void *base, uint64_t len);
	/* engine: its own counters, read into the stats at each reap (NULL: not counted) */
	void (*engine_counters)(const void *engine, struct kvl_tier_engine_ctr *out);
};

/*
 * A token bucket: @rate_Bps bytes per second on average, bursts of up to @burst bytes. Takes
 * are granted in runs: a run opens once the bucket holds a quarter of @burst (at start, at
 * once), and its takes are granted while the bucket is not empty, the last one possibly
 * leaving it owing (a block is never split). So the long-run rate is exact, a block larger
 * than @burst still goes, and under load a run lets at least a quarter of the burst through:
 * a bucket that granted a take whenever its debt was paid let one block through per look, and
 * the lcore looked (woke) once a block. The tier paces its READs with it; a tool pacing a
 * socket to the same rate uses the same one.
 */
struct kvl_pace {
	double rate_Bpns; /* bytes per ns */
	double burst;
	double quantum; /* a run opens at this many tokens: burst / 4 */
	double tokens;	/* bytes that may go now; negative: owed */
	uint64_t last_ns;
	bool open; /* a run is open: takes are granted while tokens >= 0 */
};

void kvl_pace_init(struct kvl_pace *p, uint64_t rate_Bps, uint64_t burst, uint64_t now_ns);
/* Whether @bytes may go at @now_ns (and, if so, they are taken). */
bool kvl_pace_take(struct kvl_pace *p, uint64_t bytes, uint64_t now_ns);
/* Nanoseconds from @now_ns until a take is granted (0: now): until the next run opens. */
uint64_t kvl_pace_wait_ns(struct kvl_pace *p, uint64_t now_ns);

/* Its counters (one writer, the lcore; kvl_tier_stats_read copies them for any thread). */
struct kvl_tier_stats {
	uint64_t reads;	   /* READs taken */
	uint64_t done;	   /* completed with KVL_OK */
	uint64_t refused;  /* completed with an error status, moving nothing */
	uint64_t bytes;	   /* moved by completed READs */
	uint64_t copies;   /* copies made: memcpy calls, or requests handed to the engine */
	uint64_t batches;  /* bursts the lcore handed over (memcpy) or the engine's batches */
	uint64_t copy_ns;  /* memcpy time, or time with engine copies in flight */
	uint64_t inflight; /* READs taken and not reaped */
	uint64_t engine_errors;
	uint64_t handovers;	 /* batches handed to the engine */
	uint64_t handover_small; /* of them, under min_batch (min_batch 0: under 1 MiB) */
	uint64_t est_compute_ns; /* the estimates last passed on (kvl_tier_set_estimates) */
	uint64_t est_step_bytes;
	uint64_t est_updates;		/* times they were passed on to the engine */
	uint64_t batches_copy_engine;	/* engine_methods: batches on the copy engine alone */
	uint64_t batches_gather;	/* ... and through the gather kernel */
	struct kvl_tier_engine_ctr eng; /* engine_counters */
	uint64_t dest_reads;		/* READs into an engine-owned destination, not staging */
	int32_t last_refusal;		/* enum kvl_status of the last refused READ */
	uint32_t engine;		/* 1: copy engine, 0: memcpy */
};

struct kvl_tier_conn;

/* NULL with errno (EINVAL: no table or staging, a depth that is not a power of two; an engine
 * without its depth or its range; ENOMEM). The engine, when given, is the tier's: freed with it. */
struct kvl_tier_conn *kvl_tier_new(const struct kvl_tier_opts *o);

/* The scheduler's estimates (sched.h kvl_sched_estimates: compute per step, bytes a step
 * brings), passed on to the engine when they changed; nothing without an engine. Lcore only. */
void kvl_tier_set_estimates(struct kvl_tier_conn *c, uint64_t compute_ns, uint64_t step_bytes);

/* A consistent-enough copy for telemetry (relaxed loads of each counter). */
void kvl_tier_stats_read(const struct kvl_tier_conn *c, struct kvl_tier_stats *out);

extern const struct kvl_xport_ops kvl_xport_tier;

#endif /* KVL_LCORES_XPORT_TIER_H */
