/* SPDX-License-Identifier: BSD-3-Clause */
/* The runtime's DPDK log type ("kvlane.runtime") and its one macro, for every runtime file. */
#ifndef KVL_RUNTIME_LOG_H
#define KVL_RUNTIME_LOG_H

#include <rte_log.h>

extern int kvl_logtype_runtime;
#define KVL_LOG(level, fmt, ...) \
	rte_log(RTE_LOG_##level, kvl_logtype_runtime, "kvlane: " fmt "\n", ##__VA_ARGS__)

#endif /* KVL_RUNTIME_LOG_H */
