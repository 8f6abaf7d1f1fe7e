/* SPDX-License-Identifier: BSD-3-Clause */
/* Prometheus /metrics beside the telemetry socket ([telemetry] prometheus_listen). */
#ifndef KVL_RUNTIME_PROMETHEUS_H
#define KVL_RUNTIME_PROMETHEUS_H

#include <stddef.h>

struct kvl_runtime;

/* Listens on [telemetry] prometheus_listen (nothing when it is empty) and serves /metrics
 * from its own thread. Errors name the INI's file:line:key in @err; 0 or a negative errno. */
int kvl_prom_start(struct kvl_runtime *rt, char *err, size_t errlen);
/* Stops serving (joins the thread); safe when not started. */
void kvl_prom_stop(void);
/* "host:port" it listens on (the port chosen when the INI said 0), or NULL when off. */
const char *kvl_prom_addr(void);
/* The metrics page from the telemetry tables, malloc'd into *@text; -EAGAIN with no runtime. */
int kvl_prom_render(char **text, size_t *len);

#endif /* KVL_RUNTIME_PROMETHEUS_H */
