/* SPDX-License-Identifier: BSD-3-Clause */
/* gpu suite: >= 1 GiB PULLed over tcp from a second kvlaned into VRAM, checked on the GPU. */
/*
 * usage: test_tcp_vram KVLANED staging|dest
 *
 * A kvlaned (the peer: no GPU, a 1 GiB `fill = pattern` segment) on loopback, started here;
 * this process runs the whole runtime with kvl_start: [gpu] enable, the [memory] pool pinned
 * for CUDA (each tcp data connection's bounce buffers are carved from it), a tcp NIC. One
 * request opened with KVL_REQ_STEP_FLAGS PULLs 16384 blocks of 64 KiB in 64 steps; the NIC
 * lcore receives each READ's payload into the bounce buffers and copies it to VRAM on its own
 * stream (cuMemcpyHtoDAsync, lcores/gpu/h2d.c), and the READ completes only once its copy's
 * event has passed, so READY means "in VRAM".
 *   staging: the blocks land in VRAM staging ([sched] staging = gpu, 256 MiB: each slot is
 *            used four times, so a kernel that ran before its blocks landed would read an
 *            earlier block and count it bad);
 *   dest:    KVL_REQ_ENGINE_DEST into a cudaMalloc'd cache registered with kvl_seg_register,
 *            block i at a scattered slot, a 4 KiB guard after each slot and 1 MiB before the
 *            first, all poisoned first; after the request every guard byte is checked too.
 * One stream, everything enqueued before the request runs: per step a wait on READY, a wait on
 * "the addresses are in the table", a kernel that checks every byte of the step's blocks
 * against the pattern, a DONE write. Then /kvlane/stats (the bounce counters) through the
 * telemetry socket, and a BENCH line: the NIC lcore thread's CPU time per GiB moved
 * (/proc/self/task/TID/stat of the lcore), and the process's (getrusage).
 *   ipc_staging, ipc_dest (issue 20): the same two, the peer's segment in its VRAM (memory = gpu,
 *            [gpu] enable): the peer is on this host, so the control path hands this process
 *            CUDA IPC handles and the NIC lcore reads over the ipc transport (the copy engine,
 *            GPU to GPU: on one GPU an HBM copy, not NVLink) instead of tcp; /kvlane/peers
 *            must say transport_ipc "ipc", and tcp's bounce must have moved nothing.
 * Exits 77 (skipped) without a GPU.
 */
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "gpu_check.cuh"
#include "gpu_rt.h"
#include "gpusig.h"

#define BLOCK	 (64u << 10)
#define N_BLOCKS 16384u /* 1 GiB */
#define N_STEPS	 64u
#define PER_STEP (N_BLOCKS / N_STEPS)
#define SEED	 11u
#define LIMIT_S	 240.0
#define GUARD	 (4u << 10)
#define LEAD	 (1u << 20)
#define SLOT	 (BLOCK + GUARD)
#define POISON	 0xa5u

/* dest: every guard byte (the lead, and the GUARD bytes after each slot) still POISON. */
__global__ void check_guards(const uint8_t *cache, struct gpu_counts *c)
{
	const uint8_t *g =
		blockIdx.x == N_BLOCKS ? cache : cache + LEAD + (size_t)blockIdx.x * SLOT + BLOCK;
	uint32_t len = blockIdx.x == N_BLOCKS ? LEAD : GUARD;
	unsigned long long bad = 0;

	for (uint32_t i = threadIdx.x; i < len; i += blockDim.x)
		bad += g[i] != POISON;
	if (bad)
		atomicAdd(&c->guard_bad, bad);
	__syncthreads();
	if (threadIdx.x == 0)
		atomicAdd(&c->guard_checked, (unsigned long long)len);
}

static double now_s(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec * 1e-9;
}

static pid_t server = -1;

static void stop_server(void)
{
	if (server > 0) {
		kill(server, SIGINT);
		waitpid(server, NULL, 0);
		server = -1;
	}
}

/* The peer: kvlaned on its own INI and lcores, its log in @log; its control address. */
static void start_server(const char *kvlaned, const char *ini, const char *log, char *addr,
			 size_t len)
{
	static char prefix[64], rundir[96];
	double t0 = now_s();
	bool ready = false;

	snprintf(prefix, sizeof(prefix), "kvl-tcpvram-srv-%d", (int)getpid());
	snprintf(rundir, sizeof(rundir), "%s/srv", gpu_rt_tmp);
	EXPECT(mkdir(rundir, 0700) == 0, "mkdir %s", rundir);
	server = fork();
	EXPECT(server >= 0, "fork");
	if (server == 0) {
		FILE *f = freopen(log, "w", stdout);

		/* a test killed by its timeout takes its peer with it */
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (f == NULL || dup2(fileno(stdout), 2) < 0)
			_exit(127);
		setenv("RUNTIME_DIRECTORY", rundir, 1);
		/* beside this process's lcores 0-1 where the host has the cores for it */
		execl(kvlaned, "kvlaned", "-l", sysconf(_SC_NPROCESSORS_ONLN) >= 4 ? "2-3" : "0-1",
		      "--no-huge", "-m", "1600", "--no-pci", "--file-prefix", prefix, "--", "-c",
		      ini, (char *)NULL);
		_exit(127);
	}
	atexit(stop_server);
	addr[0] = '\0';
	while (!ready || addr[0] == '\0') {
		char line[512];
		FILE *f = fopen(log, "r");
		int st;

		EXPECT(now_s() - t0 < 60, "kvlaned (the peer) not ready in 60 s: see %s", log);
		EXPECT(waitpid(server, &st, WNOHANG) == 0, "kvlaned (the peer) exited: see %s",
		       log);
		while (f != NULL && fgets(line, sizeof(line), f) != NULL) {
			const char *p = strstr(line, "control: listening on ");

			if (p != NULL && sscanf(p + 22, "%63s", addr) == 1 && len < 64)
				addr[len - 1] = '\0';
			if (strncmp(line, "kvlaned: ready", 14) == 0)
				ready = true;
		}
		if (f != NULL)
			fclose(f);
		usleep(50000);
	}
}

/* CPU seconds (user + system) in the /proc stat file @path (a process's or a thread's); -1
 * if unreadable. */
static double stat_cpu_s(const char *path)
{
	char stat[1024];
	unsigned long ut = 0, st = 0;
	FILE *f = fopen(path, "r");
	char *p;

	if (f == NULL)
		return -1;
	if (fgets(stat, sizeof(stat), f) == NULL)
		stat[0] = '\0';
	fclose(f);
	p = strrchr(stat, ')');
	/* after "pid (comm)": state ppid pgrp session tty tpgid flags minflt cminflt majflt
	 * cmajflt utime stime */
	if (p == NULL ||
	    sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &st) != 2)
		return -1;
	return (double)(ut + st) / sysconf(_SC_CLK_TCK);
}

static char lcore_comm[64]; /* the thread lcore_cpu_s() read, for the BENCH line */

/* CPU seconds of this process's thread named like a DPDK worker lcore (the busiest: the NIC
 * lcore); -1 if none is found. */
static double lcore_cpu_s(void)
{
	DIR *d = opendir("/proc/self/task");
	struct dirent *e;
	double best = -1;

	while (d != NULL && (e = readdir(d)) != NULL) {
		char path[300], comm[64] = "";
		FILE *f;
		double s;

		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "/proc/self/task/%s/comm", e->d_name);
		f = fopen(path, "r");
		if (f == NULL)
			continue;
		if (fgets(comm, sizeof(comm), f) == NULL)
			comm[0] = '\0';
		fclose(f);
		if (strstr(comm, "worker") == NULL)
			continue; /* EAL names its lcore threads rte-worker-N / lcore-worker-N */
		snprintf(path, sizeof(path), "/proc/self/task/%s/stat", e->d_name);
		s = stat_cpu_s(path);
		if (s > best) {
			best = s;
			snprintf(lcore_comm, sizeof(lcore_comm), "%.*s", (int)strcspn(comm, "\n"),
				 comm);
		}
	}
	if (d != NULL)
		closedir(d);
	return best;
}

/* CPU seconds of process @pid, all its threads; -1 if unreadable. */
static double pid_cpu_s(pid_t pid)
{
	char path[64];

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	return stat_cpu_s(path);
}

static double proc_cpu_s(void)
{
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	return ru.ru_utime.tv_sec + ru.ru_utime.tv_usec * 1e-6 + ru.ru_stime.tv_sec +
	       ru.ru_stime.tv_usec * 1e-6;
}

/* The number @key (a dict's, or a column's first row) of a telemetry reply, or -1. */
static long long tel_num(const char *out, const char *key)
{
	json_t *root, *v = gpu_rt_tel_cell(out, key, 0, &root);
	long long x = json_is_number(v) ? gpu_rt_json_ll(v) : -1;

	json_decref(root);
	return x;
}

/* What the BENCH line compares, taken before and after the request. */
struct sample {
	double t, lcore, proc, peer; /* seconds: wall, then CPU */
	struct gpu_rt_loop loop;     /* the NIC lcore's loop (/kvlane/lcores) */
};

static struct sample take(void)
{
	struct sample x;

	x.loop = gpu_rt_loop_take();
	x.lcore = lcore_cpu_s();
	x.proc = proc_cpu_s();
	x.peer = pid_cpu_s(server);
	x.t = now_s();
	return x;
}

/* The BENCH line of one run (see the header). */
static void bench_line(const char *mode, uint64_t bytes, const struct sample *a,
		       const struct sample *b)
{
	const double gib = (double)bytes / (1u << 30), wall = b->t - a->t;
	/* the loop's passes that did work, as a share of the wall time */
	double busy_s = gpu_rt_loop_busy_s(&a->loop, &b->loop);

	/* the NIC lcore busy-polls (idle_policy = poll): its CPU is its wall time while it runs,
	 * its busy time is what the path cost it; the peer's is the sending kvlaned, which the
	 * host tier does not have */
	printf("BENCH tcp_vram mode=%s bytes=%llu wall_s=%.3f GBps=%.2f lcore_cpu_s=%.3f "
	       "lcore_cpu_s_per_gib=%.3f lcore_busy_s_per_gib=%.3f process_cpu_s_per_gib=%.3f "
	       "peer_cpu_s_per_gib=%.3f lcore_thread=%s\n",
	       mode, (unsigned long long)bytes, wall, bytes / wall / 1e9, b->lcore - a->lcore,
	       (b->lcore - a->lcore) / gib, busy_s / gib, (b->proc - a->proc) / gib,
	       (b->peer - a->peer) / gib, lcore_comm[0] ? lcore_comm : "(none found)");
}

/* The request: 16384 blocks of the peer's segment @seg_id in 64 steps, each block at @dest's
 * scattered slot when @dest (KVL_REQ_ENGINE_DEST), else in staging. */
static struct kvl_req_block blocks[N_BLOCKS];
static uint32_t first[N_STEPS + 1], refs[N_BLOCKS];

static struct kvl_req_desc make_request(uint32_t seg_id, uint8_t *dest)
{
	struct kvl_req_desc d;

	for (uint32_t i = 0; i < N_BLOCKS; i++) {
		memset(&blocks[i], 0, sizeof(blocks[i]));
		blocks[i].remote_seg = seg_id;
		blocks[i].remote_off = (uint64_t)i * BLOCK;
		blocks[i].length = BLOCK;
		/* slot (i * 7919) mod N: odd and coprime with 2^14, so a permutation */
		if (dest != NULL)
			blocks[i].local = dest + LEAD + (size_t)((i * 7919u) % N_BLOCKS) * SLOT;
		refs[i] = i;
	}
	for (uint32_t k = 0; k <= N_STEPS; k++)
		first[k] = k * PER_STEP;
	memset(&d, 0, sizeof(d));
	d.blocks = blocks;
	d.n_blocks = N_BLOCKS;
	d.n_steps = N_STEPS;
	d.step_first = first;
	d.step_blocks = refs;
	d.flags = KVL_REQ_STEP_FLAGS | (dest != NULL ? KVL_REQ_ENGINE_DEST : 0);
	return d;
}

/* Until step @k's READY word says its blocks landed, taking the STEP_READY events; a request
 * that ended before, or LIMIT_S from @t0, fails the test. */
static void wait_ready(struct kvl_runtime *rt, const struct kvl_req_flags *fl, uint32_t k,
		       double t0)
{
	gpu_rt_wait_ready(rt, fl, k, t0, LIMIT_S); /* now_s() is gpu_rt_now_s()'s clock */
}

/*
 * host: the same 1 GiB over tcp into host staging (no GPU, no bounce), checked by the CPU
 * behind the READY words: the tcp path's baseline, on any host, for the BENCH line beside the
 * VRAM modes'.
 */
static int run_host(struct kvl_runtime *rt, kvl_peer_t peer, uint32_t seg_id)
{
	struct kvl_req_desc d = make_request(seg_id, NULL);
	struct kvl_req_flags fl;
	uint64_t checked = 0, bad = 0;
	struct sample s0, s1;
	double t0, t_end;
	int end_status;
	kvl_req_t req;

	s0 = take();
	t0 = s0.t;
	EXPECT(kvl_req_open(rt, peer, &d, &req) == 0, "kvl_req_open into host staging");
	EXPECT(kvl_req_step_flags(rt, req, &fl) == 0, "step flags");
	for (uint32_t k = 0; k < N_STEPS; k++) {
		wait_ready(rt, &fl, k, t0);
		for (uint32_t j = first[k]; j < first[k + 1]; j++) {
			void *a;

			EXPECT(kvl_req_block_addr(rt, req, j, &a) == 0, "block %u address", j);
			bad += kvl_pattern_check(a, BLOCK, SEED, (uint64_t)j * BLOCK) != BLOCK;
			checked += BLOCK;
		}
		__atomic_store_n((uint32_t *)((uintptr_t)fl.done + (size_t)k * fl.stride), fl.epoch,
				 __ATOMIC_RELEASE);
	}
	end_status = gpu_rt_wait_end(rt, t0, LIMIT_S);
	s1 = take();
	t_end = s1.t;
	EXPECT(end_status == 0, "the request ended with %s", kvl_status_name(end_status));
	EXPECT(checked == (uint64_t)N_BLOCKS * BLOCK && bad == 0,
	       "%llu of %llu bytes checked, %llu blocks differ", (unsigned long long)checked,
	       (unsigned long long)N_BLOCKS * BLOCK, (unsigned long long)bad);
	printf("%u blocks (%llu bytes) over tcp into host staging, checked by the CPU behind "
	       "READY words, 0 bad; open to DONE in %.3f s\n",
	       N_BLOCKS, (unsigned long long)checked, t_end - t0);
	bench_line("host", checked, &s0, &s1);
	kvl_stop(rt);
	stop_server();
	printf("PASS: tcp_vram host (1 GiB over tcp into host staging, every byte checked)\n");
	return 0;
}

int main(int argc, char **argv)
{
	static char srv_ini[2048], cli_ini[2048], out[65536];
	const char *kvlaned = argc > 1 ? argv[1] : NULL, *mode = argc > 2 ? argv[2] : "staging";
	bool ipc = strncmp(mode, "ipc_", 4) == 0;
	bool dest = strcmp(mode + (ipc ? 4 : 0), "dest") == 0, host = strcmp(mode, "host") == 0;
	struct kvl_remote_seg rs[8];
	struct kvl_segment cache_seg;
	struct kvl_req_desc d;
	struct kvl_req_flags fl;
	char err[2048], addr[64], secret[160], log[160];
	uint32_t seg_id = 0;
	uint8_t *cache = NULL;
	struct gpu_check_tables ct;
	struct kvl_runtime *rt;
	kvl_peer_t peer;
	kvl_req_t req;
	double t0, t_end;
	struct sample s0, s1;
	int stage = 0, n, end_status = -1;
	FILE *f;

	if (kvlaned == NULL || (!dest && !host && strcmp(mode + (ipc ? 4 : 0), "staging") != 0)) {
		printf("usage: %s KVLANED staging|dest|host|ipc_staging|ipc_dest\n", argv[0]);
		return 2;
	}
	if (!host && gpu_test_devices() == 0)
		return GPU_TEST_SKIP;
	gpu_rt_init("tcpvram");
	if (!host)
		CK(cudaSetDevice(0));
	snprintf(secret, sizeof(secret), "%s/secret", gpu_rt_tmp);
	f = fopen(secret, "w");
	EXPECT(f != NULL, "write %s", secret);
	fputs("kvlane-tcp-vram-test-secret: loopback only, made by the test\n", f);
	fclose(f);
	EXPECT(chmod(secret, 0600) == 0, "chmod %s", secret);

	/* the peer: host memory only (ipc: its VRAM), its segment's bytes the pattern of SEED */
	snprintf(srv_ini, sizeof(srv_ini),
		 "[runtime]\nname = tcpvram-peer\nidle_policy = poll\n"
		 "[nic.lo]\ndevice = lo\ntransport = tcp\n%s"
		 "[segment.kv]\nlayers = 1\nplanes = 1\nblocks = %u\nblock_bytes = %u\n"
		 "access = read\nfill = pattern\npattern_seed = %u\n%s"
		 "[control]\nlisten = 127.0.0.1:0\nsecret_file = %s\n",
		 ipc ? "[gpu]\nenable = true\ndevice_id = 0\nvram_reserve_mb = 2048\n" : "",
		 N_BLOCKS, BLOCK, SEED, ipc ? "memory = gpu\n" : "", secret);
	snprintf(log, sizeof(log), "%s/peer.log", gpu_rt_tmp);
	start_server(kvlaned, gpu_rt_write_ini("peer.ini", srv_ini), log, addr, sizeof(addr));
	printf("peer kvlaned at %s\n", addr);

	snprintf(cli_ini, sizeof(cli_ini),
		 "[runtime]\nname = tcpvram\nidle_policy = poll\n"
		 "[nic.lo]\ndevice = lo\ntransport = tcp\n"
		 "[gpu]\nenable = %s\ndevice_id = 0\nvram_reserve_mb = 2048\n"
		 "[memory]\npool_size_mb = %u\nchunk_size_kb = 2048\n"
		 "[sched]\nstaging_mb = %u\nslot_kb = 64\nstaging = %s\n"
		 "window_max_mb = 256\nmax_blocks = 65536\n"
		 "[control]\nlisten = 127.0.0.1:0\nsecret_file = %s\n",
		 /* the configuration check counts staging against the pool even in VRAM;
		  * 16 MiB more for the bounce buffers of the NIC's 2 data connections */
		 host ? "false" : "true", dest ? 64u : 320u, dest ? 16u : 256u,
		 /* ipc reads only with VRAM staging (its copy engine's), also for dest */
		 (dest && !ipc) || host ? "host" : "gpu", secret);
	rt = gpu_rt_start(gpu_rt_write_ini("client.ini", cli_ini), NULL, 0, err, sizeof(err),
			  &stage);
	EXPECT(rt != NULL, "kvl_start: stage %d: %s", stage, err);
	EXPECT(kvl_connect(rt, addr, 10000, &peer, err, sizeof(err)) == 0, "kvl_connect %s: %s",
	       addr, err);
	n = kvl_peer_segments(rt, peer, rs, 8);
	for (int i = 0; i < n; i++)
		if (rs[i].length == (uint64_t)N_BLOCKS * BLOCK)
			seg_id = rs[i].id;
	EXPECT(seg_id != 0, "the peer offers no 1 GiB segment (%d segments)", n);
	gpu_rt_tel("/kvlane/sched", out, sizeof(out));
	printf("/kvlane/sched: %.300s\n", out);
	/* (checked on this reply, before the next one takes the buffer: the H200 run of
	 * 2026-12-01 failed here when it read /kvlane/nics's instead) */
	EXPECT(strcmp(gpu_rt_tel_str(out, "staging", 0), (dest && !ipc) || host ? "host" : "gpu") ==
		       0,
	       "staging not where the INI put it: %.1500s", out);
	gpu_rt_tel("/kvlane/nics", out, sizeof(out));
	{
		const char *tv = gpu_rt_tel_str(out, "tcp_vram", 0);

		EXPECT(host ? strncmp(tv, "off: no GPU is open", 19) == 0
			    : strcmp(tv, "bounce") == 0,
		       "/kvlane/nics tcp_vram: %.1500s", out);
	}
	if (host)
		return run_host(rt, peer, seg_id);
	if (ipc) {
		gpu_rt_tel("/kvlane/peers", out, sizeof(out));
		printf("/kvlane/peers: %.600s\n", out);
		EXPECT(gpu_rt_tel_has(out, "same_host", "true"),
		       "the peer kvlaned is not seen on this host: %.1500s", out);
		EXPECT(gpu_rt_tel_has(out, "transport_ipc", "ipc"),
		       "the peer is not read over ipc: %.1500s", out);
		gpu_rt_tel("/kvlane/nics", out, sizeof(out));
		{
			const char *note = gpu_rt_tel_str(out, "ipc_note", 0);
			size_t nl = strlen(note);

			EXPECT(gpu_rt_tel_int(out, "ipc_opened") == 1 && nl >= 6 &&
				       strcmp(note + nl - 6, "): ipc") == 0,
			       "/kvlane/nics does not show the NIC's ipc connection: %.1500s", out);
		}
	}

	if (dest) {
		/* the engine's cache: a scattered slot per block, each followed by a guard */
		size_t len = LEAD + (size_t)N_BLOCKS * SLOT;
		/* as 4 KiB pages: LEAD and SLOT are whole pages */
		struct kvl_seg_geom cg = { 1, 1, (uint32_t)(len / 4096), 4096 };

		CK(cudaMalloc((void **)&cache, len));
		CK(cudaMemset(cache, POISON, len));
		CK(cudaDeviceSynchronize());
		EXPECT(kvl_seg_register(rt, "cache", cache, &cg, 0, &cache_seg) == 0,
		       "kvl_seg_register the cudaMalloc'd cache: %s", kvl_seg_error());
		EXPECT(cache_seg.mem == KVL_MEM_GPU, "the cache is not seen as GPU memory (%u)",
		       cache_seg.mem);
	}
	d = make_request(seg_id, dest ? cache : NULL);

	gpu_check_tables_new(&ct, N_BLOCKS, N_STEPS);
	/* Load the kernels before the stream waits on READY: under CUDA's lazy loading a first
	 * launch may synchronise the context, i.e. wait for this very stream. */
	{
		struct cudaFuncAttributes fa;

		CK(cudaFuncGetAttributes(&fa, gpu_check_step));
		CK(cudaFuncGetAttributes(&fa, check_guards));
	}

	s0 = take();
	t0 = s0.t;
	{
		int rc = kvl_req_open(rt, peer, &d, &req);

		EXPECT(rc == 0, "kvl_req_open over %s into %s: %d (%s)", ipc ? "ipc" : "tcp",
		       dest ? "GPU destinations" : "VRAM staging", rc, kvl_req_error());
	}
	EXPECT(kvl_req_step_flags(rt, req, &fl) == 0 && fl.ready_dev && fl.done_dev,
	       "step flags mapped for the GPU (ready_dev %#llx)", (unsigned long long)fl.ready_dev);
	gpu_check_enqueue(&fl, (uint64_t)(uintptr_t)ct.ready_dev,
			  (const uint64_t *const *)ct.tab_dev, N_STEPS, PER_STEP, BLOCK, SEED,
			  ct.cnt, ct.st);
	for (uint32_t k = 0; k < N_STEPS; k++) {
		wait_ready(rt, &fl, k, t0);
		for (uint32_t j = first[k]; j < first[k + 1]; j++) {
			void *a;

			EXPECT(kvl_req_block_addr(rt, req, j, &a) == 0, "block %u address", j);
			if (dest)
				EXPECT(a == blocks[j].local, "block %u at %p, not the engine's %p",
				       j, a, blocks[j].local);
			ct.tab[j] = (uint64_t *)a;
		}
		__atomic_store_n((uint32_t *)((uintptr_t)ct.ready + k * 64), 1, __ATOMIC_RELEASE);
	}
	end_status = gpu_rt_wait_end(rt, t0, LIMIT_S);
	s1 = take();
	t_end = s1.t;
	CK(cudaStreamSynchronize(ct.st));
	EXPECT(end_status == 0, "the request ended with %s", kvl_status_name(end_status));
	if (dest) {
		check_guards<<<N_BLOCKS + 1, 256, 0, ct.st>>>(cache, ct.cnt);
		CK(cudaGetLastError());
		CK(cudaStreamSynchronize(ct.st));
	}
	{
		struct gpu_counts h;

		CK(cudaMemcpy(&h, ct.cnt, sizeof(h), cudaMemcpyDeviceToHost));
		EXPECT(h.checked == (uint64_t)N_BLOCKS * BLOCK,
		       "the GPU checked %llu bytes of %llu", h.checked,
		       (unsigned long long)N_BLOCKS * BLOCK);
		EXPECT(h.bad == 0, "%llu words differ from the pattern", h.bad);
		printf("%u blocks (%llu bytes) over %s into %s, checked on the GPU behind READY "
		       "flags, 0 bad; open to DONE in %.3f s (%.2f GB/s with the checks)\n",
		       N_BLOCKS, h.checked, ipc ? "ipc (same-GPU CUDA IPC)" : "tcp",
		       dest ? "engine-owned GPU destinations" : "VRAM staging", t_end - t0,
		       h.checked / (t_end - t0) / 1e9);
		if (dest) {
			EXPECT(h.guard_checked == LEAD + (uint64_t)N_BLOCKS * GUARD,
			       "guard bytes checked %llu", h.guard_checked);
			EXPECT(h.guard_bad == 0, "%llu guard bytes changed", h.guard_bad);
			printf("guards: %llu bytes around the destinations checked, 0 changed\n",
			       h.guard_checked);
		}
		bench_line(mode, h.checked, &s0, &s1);
	}
	gpu_rt_tel("/kvlane/stats", out, sizeof(out));
	{
		long long bb = tel_num(out, "tcp/gpu_bounce_bytes"),
			  cp = tel_num(out, "tcp/gpu_copies"),
			  cd = tel_num(out, "tcp/gpu_copies_done"),
			  ns = tel_num(out, "tcp/gpu_copy_ns"),
			  w = tel_num(out, "tcp/gpu_bounce_waits"),
			  fg = tel_num(out, "tcp/failed/gpu_memory");

		printf("/kvlane/stats: tcp/gpu_bounce_bytes %lld, gpu_copies %lld, "
		       "gpu_copies_done %lld, gpu_copy_ns %lld, gpu_bounce_waits %lld, "
		       "failed/gpu_memory %lld\n",
		       bb, cp, cd, ns, w, fg);
		if (!ipc) {
			EXPECT(bb >= (long long)N_BLOCKS * BLOCK, "bounce bytes %lld < 1 GiB", bb);
			EXPECT(cp > 0 && cp == cd, "copies %lld, done %lld", cp, cd);
			EXPECT(ns > 0 && fg == 0, "copy time %lld ns, gpu-memory failures %lld", ns,
			       fg);
		} else {
			/* nothing went over tcp; the peer's row counts what ipc read */
			EXPECT(bb <= 0 && cp <= 0, "tcp's bounce moved %lld bytes in %lld copies",
			       bb, cp);
			gpu_rt_tel("/kvlane/peers", out, sizeof(out));
			EXPECT(tel_num(out, "bytes_read") >= (long long)N_BLOCKS * BLOCK,
			       "/kvlane/peers bytes_read %lld < 1 GiB: %.1500s",
			       tel_num(out, "bytes_read"), out);
			printf("/kvlane/peers: bytes_read %lld over ipc\n",
			       tel_num(out, "bytes_read"));
		}
	}
	CK(cudaStreamDestroy(ct.st));
	kvl_stop(rt);
	if (cache != NULL)
		CK(cudaFree(cache));
	stop_server();
	printf("PASS: tcp_vram %s (1 GiB over %s from a second kvlaned into %s, every byte "
	       "checked on the GPU)\n",
	       mode, ipc ? "ipc" : "tcp",
	       dest ? "engine-owned GPU destinations, guards intact" : "VRAM staging");
	return 0;
}
