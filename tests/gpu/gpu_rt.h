/* SPDX-License-Identifier: BSD-3-Clause */
/* What the gpu suite's runtime tests share: an INI in a private folder, kvl_start, telemetry. */
#ifndef KVL_TEST_GPU_RT_H
#define KVL_TEST_GPU_RT_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

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

/* The u64 after "@key":@open in a telemetry reply ("[": a column's first row; "": a dict's). */
static inline uint64_t gpu_rt_tel_value(const char *reply, const char *key, const char *open)
{
	char pat[64];
	const char *p;

	snprintf(pat, sizeof(pat), "\"%s\":%s", key, open);
	p = strstr(reply, pat);
	EXPECT(p != NULL, "no %s in %s", key, reply);
	return strtoull(p + strlen(pat), NULL, 10);
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

/* The sum of the numbers in "@key":[a,b,...] of a column-form telemetry reply (0 if none). */
static inline unsigned long long gpu_rt_tel_sum(const char *out, const char *key)
{
	unsigned long long sum = 0;
	char k[96];
	const char *p;

	snprintf(k, sizeof(k), "\"%s\":[", key);
	p = strstr(out, k);
	for (p = p ? p + strlen(k) : NULL; p != NULL && *p != ']' && *p != '\0';) {
		char *e;

		sum += strtoull(p, &e, 10);
		p = *e == ',' ? e + 1 : e;
		if (e == p && *p != ']')
			break;
	}
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
