/* SPDX-License-Identifier: BSD-3-Clause */
/* The kvlane runtime in one process: config, discovered NICs, their lcores, lifecycle. */
#ifndef KVL_RUNTIME_H
#define KVL_RUNTIME_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include <rte_log.h>

#include "config.h"
#include "gpu.h"
#include "lcores.h"
#include "topo.h"

struct kvl_runtime {
	struct kvl_config cfg;
	char sysfs_root[KVL_PATH_LEN];
	struct kvl_nic_info nic_info[KVL_MAX_NICS];
	struct kvl_lcore *nic_lcore[KVL_MAX_NICS]; /* on the NIC's socket; NULL until started */
	struct kvl_gpu gpu;			   /* open when [gpu] enable = true */
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

/* Stop every lcore loop and wait for it. */
void kvl_runtime_stop(struct kvl_runtime *rt);

/* Socket of @lcore_id as the pairing sees it (from the sysfs root when it is not /sys). */
int kvl_runtime_lcore_socket(const struct kvl_runtime *rt, unsigned lcore_id, unsigned *cpu);

/* The NIC/lcore table printed at start-up. */
void kvl_runtime_print(const struct kvl_runtime *rt, FILE *out);

/* Bytes of staging the scheduler may hold: free VRAM - reserve when a GPU is configured
 * (sampled), else [sched] budget_mb. */
uint64_t kvl_runtime_budget(const struct kvl_runtime *rt);

/* Milliseconds since kvl_runtime_start(). */
uint64_t kvl_runtime_uptime_ms(const struct kvl_runtime *rt);

/* Telemetry: /kvlane/... commands read @rt from now on (NULL detaches). */
void kvl_telemetry_attach(struct kvl_runtime *rt);

#endif /* KVL_RUNTIME_H */
