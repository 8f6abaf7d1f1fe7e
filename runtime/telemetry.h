/* SPDX-License-Identifier: BSD-3-Clause */
/* The /kvlane/... telemetry commands: which runtime they read. */
#ifndef KVL_RUNTIME_TELEMETRY_H
#define KVL_RUNTIME_TELEMETRY_H

#include <stdint.h>

struct kvl_runtime;

/* Telemetry: /kvlane/... commands read @rt from now on (NULL detaches). A detach waits for
 * a kvl_telemetry_walk() in progress. */
void kvl_telemetry_attach(struct kvl_runtime *rt);

/* The tables the telemetry commands of the same name reply with, for other readers (the
 * Prometheus exporter): the same row functions, the same snapshots. */
enum kvl_tel_table {
	KVL_TEL_NICS,	/* /kvlane/nics */
	KVL_TEL_LCORES, /* /kvlane/lcores */
	KVL_TEL_PEERS,	/* /kvlane/peers */
	KVL_TEL_QPS,	/* /kvlane/qps */
	KVL_TEL_SCHED,	/* /kvlane/sched */
	KVL_TEL_TIER,	/* /kvlane/tier */
	KVL_TEL_GPU,	/* /kvlane/gpu: one row */
	KVL_TEL_STATS,	/* /kvlane/stats: one row */
	KVL_TEL_TABLES
};

enum kvl_tel_type {
	KVL_TEL_ROW, /* the values after it are a new row (no name, no value) */
	KVL_TEL_INT,
	KVL_TEL_U64,
	KVL_TEL_STR,
};

/* One value, as the telemetry reply would carry it under @name. Valid during the call only. */
struct kvl_tel_value {
	const char *name;
	enum kvl_tel_type type;
	int64_t i;
	uint64_t u;
	const char *s;
};

typedef void (*kvl_tel_visit_fn)(void *arg, const struct kvl_tel_value *v);

/* Hands every value of table @t to @fn, in reply order. -EAGAIN when no runtime is attached,
 * -EINVAL for an unknown table. Runs on the caller's thread; never on an lcore. */
int kvl_telemetry_walk(enum kvl_tel_table t, kvl_tel_visit_fn fn, void *arg);

#endif /* KVL_RUNTIME_TELEMETRY_H */
