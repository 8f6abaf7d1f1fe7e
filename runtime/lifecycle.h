/* SPDX-License-Identifier: BSD-3-Clause */
/* The runtime's lifecycle: discover the host before EAL, start after it, stop. */
#ifndef KVL_RUNTIME_LIFECYCLE_H
#define KVL_RUNTIME_LIFECYCLE_H

#include <stddef.h>
#include <stdio.h>

#include "runtime.h"

/* Before EAL: find every configured NIC under the sysfs root and open the GPU if [gpu] asks
 * for one. Returns 0 or a negative errno with one line per problem in @err. */
int kvl_runtime_discover(struct kvl_runtime *rt, char *err, size_t errlen);

/* After EAL: pair NICs with worker lcores by NUMA node, allocate each lcore's state on its
 * socket and launch the loops. Returns 0 or a negative errno with a message in @err. */
int kvl_runtime_start(struct kvl_runtime *rt, char *err, size_t errlen);

/* Stop the control thread and every lcore loop, then free connections and segments. */
void kvl_runtime_stop(struct kvl_runtime *rt);

/* Socket of @lcore_id as the pairing sees it (from the sysfs root when it is not /sys). */
int kvl_runtime_lcore_socket(const struct kvl_runtime *rt, unsigned lcore_id, unsigned *cpu);

/* The NIC/lcore table printed at start-up. */
void kvl_runtime_print(const struct kvl_runtime *rt, FILE *out);

/* Milliseconds since kvl_runtime_start(). */
uint64_t kvl_runtime_uptime_ms(const struct kvl_runtime *rt);

#endif /* KVL_RUNTIME_LIFECYCLE_H */
