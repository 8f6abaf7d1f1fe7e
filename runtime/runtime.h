/* SPDX-License-Identifier: BSD-3-Clause */
/* The kvlane runtime in one process: config, discovered NICs, their lcores, lifecycle. */
#ifndef KVL_RUNTIME_H
#define KVL_RUNTIME_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include <rte_common.h>
#include <rte_log.h>

#include "config.h"
#include "ctrl_proto.h"
#include "gpu.h"
#include "lcores.h"
#include "nic_io.h"
#include "topo.h"
#include "xfer.h"

struct kvl_control;
struct kvl_verbs_dev;
struct kvl_nic_sched;
struct kvl_req_table;

/* A local segment: what the lcores check against (segs) and what peers are told (desc). */
struct kvl_local_seg {
	bool live;
	struct kvl_seg_desc desc;
	void *owned; /* allocated by kvlane (rte_malloc), freed at stop; NULL if registered */
	uint32_t rkey[KVL_MAX_NICS];   /* on each RDMA NIC's device */
	uint64_t reg_ns[KVL_MAX_NICS]; /* what ibv_reg_mr took there (pinning every page) */
};

/*
 * One NIC = one lcore: what the runtime keeps of each configured NIC, in one cache-aligned
 * struct (written at start/stop; the lcore itself writes only what @io and @sched point to).
 */
struct kvl_rt_nic {
	struct kvl_nic_info info;    /* discovered before EAL */
	struct kvl_lcore *lcore;     /* its loop, on the NIC's socket; NULL until started */
	struct kvl_nic_io *io;	     /* rings and connections of its lcore */
	struct kvl_verbs_dev *vdev;  /* RDMA NICs: the opened device, else NULL */
	struct kvl_nic_sched *sched; /* [sched] staging_mb > 0: its scheduler stage */
	uint8_t *staging;	     /* that scheduler's staging memory */
} __rte_cache_aligned;

struct kvl_runtime {
	struct kvl_config cfg;
	char sysfs_root[KVL_PATH_LEN];
	struct kvl_rt_nic nic[KVL_MAX_NICS];
	struct kvl_gpu gpu;			    /* open when [gpu] enable = true */
	struct kvl_seg_table segs;		    /* read by the lcores without locks */
	struct kvl_local_seg segmeta[KVL_MAX_SEGS]; /* guarded by seg_lock */
	uint32_t segs_version;			    /* bumped at every registration */
	uint32_t segs_hwm; /* slots ever used (ids 1..hwm): what lookups by address scan */
	pthread_mutex_t seg_lock;
	struct kvl_control *ctl; /* NULL when the control path is off */
	uint64_t sched_budget;	 /* per NIC lcore, read by its stage each pass (relaxed) */
	uint64_t budget_cap;	 /* kvl_req_budget_cap(); UINT64_MAX: none */
	struct kvl_req_table *reqs;
	uint64_t next_sample_tsc;
	unsigned poll_rr;
	unsigned main_lcore;
	int main_socket;
	uint64_t tsc_hz;
	uint64_t start_tsc;
	bool started;
	bool quit; /* read by every lcore loop */
};

/* Log type "kvlane.runtime". */
extern int kvl_logtype_runtime;
#define KVL_LOG(level, fmt, ...) \
	rte_log(RTE_LOG_##level, kvl_logtype_runtime, "kvlane: " fmt "\n", ##__VA_ARGS__)

/* Before EAL: find every configured NIC under the sysfs root and open the GPU if [gpu] asks
 * for one. Returns 0 or a negative errno with one line per problem in @err. */
int kvl_runtime_discover(struct kvl_runtime *rt, char *err, size_t errlen);

/* After EAL: pair NICs with worker lcores by NUMA node, allocate each lcore's state on its
 * socket and launch the loops. Returns 0 or a negative errno with a message in @err. */
int kvl_runtime_start(struct kvl_runtime *rt, char *err, size_t errlen);

/* Stop the control thread and every lcore loop, then free connections and segments. */
void kvl_runtime_stop(struct kvl_runtime *rt);

/* Is [p, p + len) inside one live local segment? (kvl_post, kvl_req_open's PUSH blocks) */
bool kvl_runtime_local_ok(const struct kvl_runtime *rt, const void *p, uint64_t len);
/* The id of the local segment holding [p, p + len) whole, or 0 when none does. */
uint32_t kvl_runtime_local_seg(const struct kvl_runtime *rt, const void *p, uint64_t len);

/* Register a segment; @owned is freed with it at stop. Returns 0 or a negative errno. */
int kvl_runtime_seg_add(struct kvl_runtime *rt, const char *name, void *base, void *owned,
			const struct kvl_seg_desc *geom, uint32_t *id);

/* Sample free VRAM if [sched] resize_interval_ms has passed (housekeeping). */
void kvl_runtime_sample(struct kvl_runtime *rt);

/* Socket of @lcore_id as the pairing sees it (from the sysfs root when it is not /sys). */
int kvl_runtime_lcore_socket(const struct kvl_runtime *rt, unsigned lcore_id, unsigned *cpu);

/* The NIC/lcore table printed at start-up. */
void kvl_runtime_print(const struct kvl_runtime *rt, FILE *out);

/* Bytes of staging the scheduler may hold: free VRAM - reserve when a GPU is configured
 * (sampled), else [sched] budget_mb. */
uint64_t kvl_runtime_budget(const struct kvl_runtime *rt);

/* runtime/sched_api.c: each NIC lcore's scheduler and staging (before the loops launch),
 * and their end (after the loops stopped). */
int kvl_sched_rt_start(struct kvl_runtime *rt, char *err, size_t errlen);
void kvl_sched_rt_stop(struct kvl_runtime *rt);
/* Register each staging region like a segment (after the INI's, so their ids stay 1..n). */
int kvl_sched_rt_register(struct kvl_runtime *rt, char *err, size_t errlen);
/* Recompute what each NIC lcore's scheduler may stage: min(budget, cap) / NICs. */
void kvl_sched_rt_publish_budget(struct kvl_runtime *rt);

/* Milliseconds since kvl_runtime_start(). */
uint64_t kvl_runtime_uptime_ms(const struct kvl_runtime *rt);

/* Telemetry: /kvlane/... commands read @rt from now on (NULL detaches). */
void kvl_telemetry_attach(struct kvl_runtime *rt);

#endif /* KVL_RUNTIME_H */
