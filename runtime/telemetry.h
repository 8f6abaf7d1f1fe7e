/* SPDX-License-Identifier: BSD-3-Clause */
/* The /kvlane/... telemetry commands: which runtime they read. */
#ifndef KVL_RUNTIME_TELEMETRY_H
#define KVL_RUNTIME_TELEMETRY_H

struct kvl_runtime;

/* Telemetry: /kvlane/... commands read @rt from now on (NULL detaches). */
void kvl_telemetry_attach(struct kvl_runtime *rt);

#endif /* KVL_RUNTIME_TELEMETRY_H */
