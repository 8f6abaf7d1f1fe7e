/* SPDX-License-Identifier: BSD-3-Clause */
/* Each NIC lcore's scheduler stage: its staging memory, its budget share, the VRAM sampling. */
#ifndef KVL_RUNTIME_STAGING_H
#define KVL_RUNTIME_STAGING_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct kvl_runtime;

/* Before the loops launch: a scheduler and its staging on each NIC lcore ([sched]
 * staging_mb > 0; nothing otherwise). Returns 0 or a negative errno with a message in @err. */
int kvl_staging_start(struct kvl_runtime *rt, char *err, size_t errlen);

/* Register each staging region like a segment (after the INI's, so their ids stay 1..n). */
int kvl_staging_register(struct kvl_runtime *rt, char *err, size_t errlen);

/* After the loops stopped: the schedulers, and the staging no segment owns. */
void kvl_staging_stop(struct kvl_runtime *rt);

/*
 * The GPU whose VRAM holds NIC @nic's staging with [sched] staging = gpu: the one place where
 * the NIC's paired GPU is read (lcores/topo/ pairs each NIC with its GPU; until that lands,
 * every NIC pairs with [gpu] device_id).
 */
int kvl_staging_gpu_of(const struct kvl_runtime *rt, unsigned nic);

/*
 * Whether tcp can land bytes in VRAM here: a build with CUDA, an open GPU, and the [memory]
 * pool pinned for CUDA to carve each data connection's bounce buffers from
 * (runtime/tcp_vram.c). When not, @why (if given) says which is missing.
 */
bool kvl_tcp_vram_ok(const struct kvl_runtime *rt, char *why, size_t len);

/* How many NIC lcores run a scheduler. */
unsigned kvl_staging_count(const struct kvl_runtime *rt);

/* Bytes of staging the schedulers may hold together: free VRAM - reserve when a GPU is
 * configured (sampled), else [sched] budget_mb. */
uint64_t kvl_staging_budget(const struct kvl_runtime *rt);

/* Recompute what each NIC lcore's scheduler may stage: min(budget, cap) / schedulers. */
void kvl_staging_publish_budget(struct kvl_runtime *rt);

/* Sample free VRAM if [sched] resize_interval_ms has passed, and publish the new budget
 * (housekeeping: the control thread's loop, or the sampler thread below without one). */
void kvl_staging_sample(struct kvl_runtime *rt);

/*
 * With a GPU open and no control thread (no [control] secret: an engine on the C API, a
 * kvlaned without peers), a thread of its own ("kvl-vram", on EAL's control cores) samples
 * free VRAM every [sched] resize_interval_ms, so the budget follows it wherever the runtime
 * runs. 0 (also when nothing is needed) or a negative errno; stop joins it.
 */
int kvl_staging_sampler_start(struct kvl_runtime *rt, char *err, size_t errlen);
void kvl_staging_sampler_stop(struct kvl_runtime *rt);

/* Whether [p, p + len) touches a NIC's staging: the scheduler's own, whose slots it hands to
 * other requests' READs at any time. */
bool kvl_staging_touches(const struct kvl_runtime *rt, const void *p, uint64_t len);

#endif /* KVL_RUNTIME_STAGING_H */
