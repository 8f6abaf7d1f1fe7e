/* SPDX-License-Identifier: BSD-3-Clause */
/* Compute steps signalled through GPU-visible flags: READY for the engine's stream, DONE back. */
#ifndef KVL_LCORES_GPUSIG_H
#define KVL_LCORES_GPUSIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" { /* the benchmark and the gather kernel are CUDA C++ */
#endif

/*
 * One READY and one DONE word per compute step (a layer's attention, say), in pinned host
 * memory the GPU maps. The lcore stores READY = epoch once the step's KV has landed; the
 * engine has enqueued, ahead of time, a stream wait on READY >= epoch before its kernels and
 * a stream write DONE = epoch after them; the lcore polls DONE to reuse the step's staging.
 * Neither side calls the other per step, and no flag is ever reset: each use of a step
 * carries a larger epoch (the decode iteration), compared cyclically like the GPU does
 * ((int32_t)(flag - epoch) >= 0), so 2^31 uses in flight at most.
 *
 * The flags sit in host memory, not VRAM: the lcore writes READY with a plain store and reads
 * DONE with a plain load (no CUDA call on the polling path), and the GPU's front end polls
 * the READY word across PCIe only while a wait is pending.
 */
struct kvl_gpusig;

/* Called by the lcore when it marks a step READY (host-callback variant, below). */
typedef void (*kvl_gpusig_ready_fn)(void *arg, unsigned step, uint32_t epoch);

/* @n steps, every flag 0. Returns NULL with a message (no device, no stream memory ops). */
struct kvl_gpusig *kvl_gpusig_new(unsigned n, char *err, size_t errlen);
void kvl_gpusig_free(struct kvl_gpusig *s);
unsigned kvl_gpusig_count(const struct kvl_gpusig *s);

/* ---- engine side: enqueued on the engine's stream, nothing per step reaches kvlane ---- */

/* The stream waits until READY[step] >= @epoch (cuStreamWaitValue32, GEQ). */
int kvl_gpusig_enqueue_wait(struct kvl_gpusig *s, unsigned step, uint32_t epoch, cudaStream_t st);
/* The stream writes DONE[step] = @epoch once the work before it has finished. */
int kvl_gpusig_enqueue_done(struct kvl_gpusig *s, unsigned step, uint32_t epoch, cudaStream_t st);

/*
 * Host-callback variant, for engines that launch per step from the host or whose platform
 * lacks stream memory operations: on_ready is called by the lcore in kvl_gpusig_set_ready
 * (the engine launches then), and DONE is stored by a host function the stream runs
 * (cudaLaunchHostFunc) instead of a stream write. The callback runs on the lcore: it must
 * not block.
 */
void kvl_gpusig_on_ready(struct kvl_gpusig *s, kvl_gpusig_ready_fn fn, void *arg);
int kvl_gpusig_enqueue_done_hostfn(struct kvl_gpusig *s, unsigned step, uint32_t epoch,
				   cudaStream_t st);

/*
 * The same two stream operations on any mapped word, by its device address: the READY and
 * DONE words kvl_req_step_flags() gives (ready_dev + k * stride, done_dev + k * stride) for a
 * request opened with KVL_REQ_STEP_FLAGS. Enqueue-time calls, as above. 0, -ENODEV (no
 * driver: @err says why), -EINVAL (address 0: the pool is not mapped), -EIO.
 */
int kvl_gpusig_wait_addr(uint64_t dev_addr, uint32_t epoch, cudaStream_t st, char *err,
			 size_t errlen);
int kvl_gpusig_done_addr(uint64_t dev_addr, uint32_t epoch, cudaStream_t st, char *err,
			 size_t errlen);

/*
 * Step flags off the engine's stream ("lanes"): the stream memory operations above, enqueued
 * on two side streams of their own, joined to the engine's stream by events. The wait lane
 * waits READY and records an event the engine's stream waits on (cudaStreamWaitEvent), so the
 * engine's stream holds no wait on host memory; the done lane waits on an event recorded on the
 * engine's stream after the step's kernels and writes DONE there (with the memory barrier), so
 * the engine's stream holds no write to host memory either. The order is the same as with the
 * direct calls (the step's kernels run after READY, DONE is written after them); what changes
 * is that the engine's stream meets only events: on the H200, with the tier's copies beside the
 * attention, a layer's time outside its kernels fell from 11 to 4 us at 16 KiB and from 14 to
 * 5 us at 64 KiB (docs/gpu-bench.md, session 10). One event each suffices: a
 * cudaStreamWaitEvent waits for the record before it, later records do not move it. Enqueue-time
 * calls from one thread; the lanes are streams of the current device at kvl_gpusig_lanes_new.
 */
struct kvl_gpusig_lanes;

/* Lanes for @engine (a stream of the current device, the legacy default stream 0 too). NULL
 * with @err naming the cause. */
struct kvl_gpusig_lanes *kvl_gpusig_lanes_new(cudaStream_t engine, char *err, size_t errlen);
/* Waits for any in-flight work of the lanes, then frees them. */
void kvl_gpusig_lanes_free(struct kvl_gpusig_lanes *l);
/* The engine's stream waits for @n READY words (device addresses @ready_dev[i] >= @epoch[i],
 * cyclic): @n waits on the wait lane, one event, one cudaStreamWaitEvent. @n 0: nothing.
 * 0, -EINVAL (an address 0, n over 256), -EIO (@err names the call). */
int kvl_gpusig_lanes_wait(struct kvl_gpusig_lanes *l, const uint64_t *ready_dev,
			  const uint32_t *epoch, unsigned n, char *err, size_t errlen);
/* DONE words written once the engine's stream's work so far has finished: an event on the
 * engine's stream, the done lane waits on it and writes the @n words. Same returns. */
int kvl_gpusig_lanes_done(struct kvl_gpusig_lanes *l, const uint64_t *done_dev,
			  const uint32_t *epoch, unsigned n, char *err, size_t errlen);
/* The operations the lanes enqueued: READY waits, DONE writes, events. */
struct kvl_gpusig_lanes_stats {
	uint64_t waits, dones, joins;
};
void kvl_gpusig_lanes_stats(const struct kvl_gpusig_lanes *l, struct kvl_gpusig_lanes_stats *st);

/* ---- lcore side: plain loads and stores ---- */

/* Publish READY[step] = @epoch (release: the step's data was seen complete before). */
void kvl_gpusig_set_ready(struct kvl_gpusig *s, unsigned step, uint32_t epoch);
/* True once DONE[step] has reached @epoch. */
bool kvl_gpusig_is_done(const struct kvl_gpusig *s, unsigned step, uint32_t epoch);
/* The words as they stand, for tests and telemetry. */
uint32_t kvl_gpusig_ready_word(const struct kvl_gpusig *s, unsigned step);
uint32_t kvl_gpusig_done_word(const struct kvl_gpusig *s, unsigned step);

#ifdef __cplusplus
}
#endif

#endif /* KVL_LCORES_GPUSIG_H */
