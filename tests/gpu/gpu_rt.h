/* SPDX-License-Identifier: BSD-3-Clause */
/* What the gpu suite's runtime tests share: an INI in a private folder, kvl_start, telemetry. */
#ifndef KVL_TEST_GPU_RT_H
#define KVL_TEST_GPU_RT_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "gpu_test.h"
#include "kvlane/kvlane.h"

/* The test's RUNTIME_DIRECTORY and EAL file prefix (gpu_rt_init). Plain C that nvcc's host
 * compiler takes too: no designated initializers or compound literals. */
static char gpu_rt_tmp[32], gpu_rt_prefix[40];

static void gpu_rt_init(const char *name)
{
	snprintf(gpu_rt_tmp, sizeof(gpu_rt_tmp), "/tmp/kvl-%.8s-XXXXXX", name);
	EXPECT(mkdtemp(gpu_rt_tmp) != NULL, "mkdtemp");
	setenv("RUNTIME_DIRECTORY", gpu_rt_tmp, 1);
	snprintf(gpu_rt_prefix, sizeof(gpu_rt_prefix), "kvl-%.8s-%d", name, (int)getpid());
}

static const char *gpu_rt_write_ini(const char *name, const char *text)
{
	static char path[128];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", gpu_rt_tmp, name);
	f = fopen(path, "w");
	EXPECT(f != NULL, "cannot write %s", path);
	fputs(text, f);
	fclose(f);
	return path;
}

/* One telemetry command through the runtime's own socket (SOCK_SEQPACKET, as any client). */
static void gpu_rt_tel(const char *cmd, char *out, size_t len)
{
	struct sockaddr_un sa;
	struct timespec ten_ms = { 0, 10000000 };
	char greet[1024];
	int fd = -1;
	ssize_t n;

	memset(&sa, 0, sizeof(sa));
	sa.sun_family = AF_UNIX;
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s/dpdk/%s/dpdk_telemetry.v2", gpu_rt_tmp,
		 gpu_rt_prefix);
	for (int i = 0; i < 200; i++) { /* the socket appears shortly after EAL starts */
		fd = socket(AF_UNIX, SOCK_SEQPACKET, 0);
		if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0)
			break;
		close(fd);
		fd = -1;
		nanosleep(&ten_ms, NULL);
	}
	EXPECT(fd >= 0, "no telemetry socket at %s", sa.sun_path);
	EXPECT(read(fd, greet, sizeof(greet)) > 0, "no greeting");
	EXPECT(write(fd, cmd, strlen(cmd)) == (ssize_t)strlen(cmd), "write %s", cmd);
	n = read(fd, out, len - 1);
	EXPECT(n > 0, "no reply to %s", cmd);
	out[n] = '\0';
	close(fd);
}

/* kvl_start on @ini with EAL on lcores 0-1, no hugepages, no PCI, the test's file prefix. */
static struct kvl_runtime *gpu_rt_start(const char *ini, const char *const *sets, unsigned n_sets,
					char *err, size_t errlen, int *stage)
{
	static char a0[] = "kvl-gpu-test", a1[] = "-l", a2[] = "0-1", a3[] = "--no-huge",
		    a4[] = "-m", a5[] = "256", a6[] = "--no-pci", a7[] = "--file-prefix";
	static char *argv[] = { a0, a1, a2, a3, a4, a5, a6, a7, gpu_rt_prefix, NULL };
	struct kvl_start_args a;

	memset(&a, 0, sizeof(a));
	a.eal_argc = 9;
	a.eal_argv = argv;
	a.config = ini;
	a.sets = sets;
	a.n_sets = n_sets;
	return kvl_start(&a, err, errlen, stage);
}

/*
 * Telemetry replies read with jansson, never by hand: {"<command>": PAYLOAD}, PAYLOAD a dict
 * ({"key": value}) or, for the per-NIC and per-segment commands, column form ({"key": [row 0,
 * row 1, ...]}). A u64 beyond long long (a cap left at UINT64_MAX) would make jansson refuse
 * the whole reply: such a reply is read again with integers as doubles.
 */
static inline json_t *gpu_rt_tel_payload(const char *reply, json_t **root)
{
	json_error_t je;
	json_t *r = json_loads(reply, 0, &je);
	void *it;

	if (r == NULL)
		r = json_loads(reply, JSON_DECODE_INT_AS_REAL, &je);
	EXPECT(r != NULL, "telemetry reply not JSON (line %d column %d: %s): %.300s", je.line,
	       je.column, je.text, reply);
	it = json_object_iter(r);
	EXPECT(json_is_object(r) && json_object_size(r) == 1 && it != NULL &&
		       json_is_object(json_object_iter_value(it)),
	       "telemetry reply is not {\"<command>\": {...}}: %.300s", reply);
	*root = r;
	return json_object_iter_value(it);
}

/* Row @row of @key (a column's row, or a dict's value when @row is 0); NULL if it has none.
 * The caller json_decref()s *root. */
static inline json_t *gpu_rt_tel_cell(const char *reply, const char *key, size_t row, json_t **root)
{
	json_t *v = json_object_get(gpu_rt_tel_payload(reply, root), key);

	if (json_is_array(v))
		return json_array_get(v, row);
	return row == 0 ? v : NULL;
}

/* A JSON number as a u64 (an integer, or a double where the reply was read as doubles:
 * 2^64 rounds up from UINT64_MAX, past what a cast takes). */
static inline uint64_t gpu_rt_json_u64(const json_t *v)
{
	if (json_is_integer(v))
		return (uint64_t)json_integer_value(v);
	return json_number_value(v) >= 18446744073709551615.0 ? UINT64_MAX
							      : (uint64_t)json_number_value(v);
}

/* A JSON number as a signed value. */
static inline long long gpu_rt_json_ll(const json_t *v)
{
	return json_is_integer(v) ? json_integer_value(v) : (long long)json_number_value(v);
}

/* A number cell as a signed value (staging_gpu is -1 without a GPU). */
static inline long long gpu_rt_tel_int(const char *reply, const char *key)
{
	json_t *root, *v = gpu_rt_tel_cell(reply, key, 0, &root);
	long long x;

	EXPECT(json_is_number(v), "no number %s in %.300s", key, reply);
	x = gpu_rt_json_ll(v);
	json_decref(root);
	return x;
}

/* The u64 of @key: the first row of a column (@open "["), or a dict's value (@open ""). */
static inline uint64_t gpu_rt_tel_value(const char *reply, const char *key, const char *open)
{
	json_t *root, *p = gpu_rt_tel_payload(reply, &root), *v = json_object_get(p, key);
	uint64_t x;

	if (open[0] == '[')
		v = json_is_array(v) ? json_array_get(v, 0) : NULL;
	EXPECT(json_is_number(v) && json_number_value(v) >= 0, "no %s in %.300s", key, reply);
	x = gpu_rt_json_u64(v);
	json_decref(root);
	return x;
}

/* Column form (/kvlane/sched, /kvlane/tier: one row per NIC lcore): the first row's. */
static inline uint64_t gpu_rt_tel_u64(const char *reply, const char *key)
{
	return gpu_rt_tel_value(reply, key, "[");
}

/* A dict reply (/kvlane/gpu). */
static inline uint64_t gpu_rt_tel_dict_u64(const char *reply, const char *key)
{
	return gpu_rt_tel_value(reply, key, "");
}

/* Row @row of string cell @key, copied (until the next call): the test fails if it is none. */
static inline const char *gpu_rt_tel_str(const char *reply, const char *key, size_t row)
{
	static char buf[1024];
	json_t *root, *v = gpu_rt_tel_cell(reply, key, row, &root);

	EXPECT(json_is_string(v), "no string %s (row %zu) in %.300s", key, row, reply);
	snprintf(buf, sizeof(buf), "%s", json_string_value(v));
	json_decref(root);
	return buf;
}

/* The first row of string column @key that is @want, or -1. */
static inline long gpu_rt_tel_row(const char *reply, const char *key, const char *want)
{
	json_t *root, *col = json_object_get(gpu_rt_tel_payload(reply, &root), key), *v;
	long row = -1;
	size_t i;

	json_array_foreach(col, i, v)
	{
		if (row < 0 && json_is_string(v) && strcmp(json_string_value(v), want) == 0)
			row = (long)i;
	}
	json_decref(root);
	return row;
}

/* Whether some row of string column @key is @want. */
static inline bool gpu_rt_tel_has(const char *reply, const char *key, const char *want)
{
	return gpu_rt_tel_row(reply, key, want) >= 0;
}

/* The sum of column @key's rows (0 if there is no such column). */
static inline unsigned long long gpu_rt_tel_sum(const char *out, const char *key)
{
	json_t *root, *col = json_object_get(gpu_rt_tel_payload(out, &root), key), *v;
	unsigned long long sum = 0;
	size_t i;

	json_array_foreach(col, i, v)
	{
		sum += gpu_rt_json_u64(v);
	}
	json_decref(root);
	return sum;
}

static inline double gpu_rt_now_s(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec * 1e-9;
}

/* The lcores' loop through /kvlane/lcores (busy and idle cycles, summed over the lcores) and
 * when it was read: two of them give the time the loop spent in passes that did work. */
struct gpu_rt_loop {
	double t;
	unsigned long long busy, idle;
};

static inline struct gpu_rt_loop gpu_rt_loop_take(void)
{
	static char out[16384];
	struct gpu_rt_loop x;

	gpu_rt_tel("/kvlane/lcores", out, sizeof(out));
	x.busy = gpu_rt_tel_sum(out, "busy_cycles");
	x.idle = gpu_rt_tel_sum(out, "idle_cycles");
	x.t = gpu_rt_now_s();
	return x;
}

/* Seconds busy between @a and @b: the wall time times the busy passes' share of the cycles
 * (idle_policy = poll: the loop runs all the time, so its cycles are the wall time's). */
static inline double gpu_rt_loop_busy_s(const struct gpu_rt_loop *a, const struct gpu_rt_loop *b)
{
	unsigned long long busy = b->busy - a->busy, all = busy + (b->idle - a->idle);

	return all ? (b->t - a->t) * (double)busy / (double)all : 0;
}

/* The GPU's compare (cuStreamWaitValue32 GEQ), cyclic as the lcore's. */
static inline bool gpu_rt_reached(uint32_t word, uint32_t epoch)
{
	return (int32_t)(word - epoch) >= 0;
}

/* Until step @k's READY word says its blocks landed; STEP_READY events are drained meanwhile.
 * An end before it, or @limit_s from @t0, fails. */
static inline void gpu_rt_wait_ready(struct kvl_runtime *rt, const struct kvl_req_flags *fl,
				     uint32_t k, double t0, double limit_s)
{
	const volatile uint32_t *rw =
		(const volatile uint32_t *)((const uint8_t *)fl->ready + (size_t)k * fl->stride);
	struct kvl_req_event ev[64];

	while (!gpu_rt_reached(__atomic_load_n(rw, __ATOMIC_ACQUIRE), fl->epoch)) {
		int n = (int)kvl_req_poll(rt, ev, 64);

		for (int i = 0; i < n; i++)
			EXPECT(ev[i].type == KVL_REQ_EV_STEP_READY,
			       "request ended before step %u was READY: %s", k,
			       kvl_status_name(ev[i].status));
		EXPECT(gpu_rt_now_s() - t0 < limit_s, "step %u not READY after %.0f s", k, limit_s);
	}
}

/*
 * The host's part of a request opened with KVL_REQ_STEP_FLAGS whose stream waits, per step
 * k, on its READY word and then on @filled[k * 16] (64 bytes apart) = 1: once step k's READY
 * word says its blocks landed, each block's address (kvl_req_block_addr) into @tab[j] for the
 * step's blocks j (its step_blocks, @first..@first + 1), then @filled for it. STEP_READY events
 * are drained; an end before the last READY, or @limit_s from @t0, fails.
 */
static inline void gpu_rt_fill_tables(struct kvl_runtime *rt, kvl_req_t req,
				      const struct kvl_req_flags *fl, uint32_t n_steps,
				      const uint32_t *first, const uint32_t *blocks, uint64_t *tab,
				      volatile uint32_t *filled, double t0, double limit_s)
{
	for (uint32_t k = 0; k < n_steps; k++) {
		gpu_rt_wait_ready(rt, fl, k, t0, limit_s);
		for (uint32_t i = first[k]; i < first[k + 1]; i++) {
			void *a;

			EXPECT(kvl_req_block_addr(rt, req, blocks[i], &a) == 0, "block %u address",
			       blocks[i]);
			tab[blocks[i]] = (uint64_t)(uintptr_t)a;
		}
		__atomic_store_n((uint32_t *)(uintptr_t)&filled[k * 16], 1, __ATOMIC_RELEASE);
	}
}

/* The request's end event after every READY: 0 (DONE) or its status; @limit_s from @t0. */
static inline int gpu_rt_wait_end(struct kvl_runtime *rt, double t0, double limit_s)
{
	struct kvl_req_event ev[64];

	for (;;) {
		int n = (int)kvl_req_poll(rt, ev, 64);

		for (int i = 0; i < n; i++)
			if (ev[i].type != KVL_REQ_EV_STEP_READY)
				return ev[i].type == KVL_REQ_EV_DONE ? 0 : ev[i].status;
		EXPECT(gpu_rt_now_s() - t0 < limit_s, "the request did not end after %.0f s",
		       limit_s);
	}
}

#endif /* KVL_TEST_GPU_RT_H */
