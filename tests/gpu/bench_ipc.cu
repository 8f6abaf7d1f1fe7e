/* SPDX-License-Identifier: BSD-3-Clause */
/* kvlane-ipc-bench: the ipc transport's block bandwidth against the GPU's own D2D ceiling. */
/*
 * kvlane-ipc-bench [--reps R] [--mib M]
 *
 * Two processes on one GPU, as two kvlanes of one host would be: a child allocates M MiB
 * (default 1024) of VRAM, fills it with a pattern, and hands its CUDA IPC handle over a pipe;
 * this process builds the runtime's ipc connection (runtime/ipc.c kvl_ipc_conn_cuda:
 * lcores/xport/xport_ipc.c over the cudma copy engine, the handle opened with
 * CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS) and READs every block of it into its own VRAM, blocks in
 * scattered order (remote block perm[i] into local block i: nothing merges), posted, progressed
 * and reaped on this thread, from the first post to the last completion. After each run every
 * byte is checked on the GPU against the pattern (a run with a bad byte fails the bench).
 *   ceiling  one cudaMemcpyAsync of M MiB between two buffers of this process on that GPU,
 *            measured in the same call: the device-to-device copy ceiling of its HBM.
 * Rows: 16 KiB, 64 KiB, 2 MiB blocks, median of R (default 5) runs, GB/s = 1e9 bytes/s; columns:
 * how the copy engine takes the copies (xport_cudma.h): "runtime" is what the runtime's ipc
 * connection uses (runtime/ipc.c: the gather kernel on 264 thread blocks under 1 MiB, 1 MiB and
 * more alone on the copy engine); "cudma-default" cudma's own defaults (the gather kernel on 8
 * blocks, 32 KiB and more on the copy engine beside it: tuned for PCIe); "copy-engine" the
 * copy engine alone (cudaMemcpyBatchAsync, 64 a call); "gather-all-264" every copy, 2 MiB
 * too, through the gather kernel on 264 blocks.
 * On one GPU the copy is HBM to HBM (the copy engine or the gather kernel on that GPU): this is
 * same-GPU IPC, NOT NVLink; the NVLink numbers need two GPUs (nvidia-h200-x2).
 * Exits 77 without a GPU.
 */
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <vector>

#include "gpu_bench.h"
#include "gpu_test.h"
#include "kvl_clock.h"
#include "xport_cudma.h"
extern "C" { /* C headers of the runtime */
#include "ipc.h"
}

static const double GB = 1e9;

/* The copy engine's ways with small copies, one connection each (see the header). */
static const struct {
	const char *name;
	enum kvl_cudma_small small;
	unsigned ctas;
	uint64_t ce_min, copy_min;
} methods[] = {
	{ "runtime", KVL_CUDMA_GATHER, 0, 0, 0 },
	{ "cudma-default", KVL_CUDMA_GATHER, 0, 0, 0 },
	{ "copy-engine", KVL_CUDMA_BATCH, 0, 0, 0 },
	{ "gather-all-264", KVL_CUDMA_GATHER, 264, UINT64_MAX, UINT64_MAX },
};
#define N_METHODS 4
static_assert(sizeof(methods) / sizeof(methods[0]) == N_METHODS, "one column a method");

__device__ __host__ static inline uint32_t pat(uint64_t word)
{
	uint64_t x = word * 0x9e3779b97f4a7c15ull + 0x5bd1e995u;

	x ^= x >> 29;
	return (uint32_t)(x * 0xbf58476d1ce4e5b9ull >> 32);
}

__global__ void fill(uint32_t *p, uint64_t words)
{
	for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < words;
	     i += (uint64_t)gridDim.x * blockDim.x)
		p[i] = pat(i);
}

/* Words of @dst (blocks of @unit bytes, local block i = remote block perm[i]) that differ. */
__global__ void check(const uint32_t *dst, uint64_t words, const uint32_t *perm, uint32_t unit,
		      unsigned long long *bad)
{
	unsigned long long b = 0;
	const uint64_t wpb = unit / 4;

	for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < words;
	     i += (uint64_t)gridDim.x * blockDim.x)
		b += dst[i] != pat((uint64_t)perm[i / wpb] * wpb + i % wpb);
	if (b)
		atomicAdd(bad, b);
}

/* The serving process: its VRAM, filled, exported; lives until the pipe closes. */
static void serve(size_t len, int wfd, int rfd)
{
	cudaIpcMemHandle_t h;
	uint32_t *src;
	char c;

	prctl(PR_SET_PDEATHSIG, SIGKILL);
	CK(cudaSetDevice(0));
	CK(cudaMalloc((void **)&src, len));
	fill<<<1024, 256>>>(src, len / 4);
	CK(cudaGetLastError());
	CK(cudaDeviceSynchronize());
	CK(cudaIpcGetMemHandle(&h, src));
	EXPECT(write(wfd, &h, sizeof(h)) == (ssize_t)sizeof(h), "handle to the pipe");
	while (read(rfd, &c, 1) > 0) /* the reader closes it when done */
		;
	_exit(0);
}

static double ceiling(void *dst, const void *src, size_t len, int reps)
{
	cudaStream_t st;
	cudaEvent_t e0, e1;
	std::vector<double> t;

	CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
	CK(cudaEventCreate(&e0));
	CK(cudaEventCreate(&e1));
	for (int r = 0; r < reps + 1; r++) {
		float ms = 0;

		CK(cudaEventRecord(e0, st));
		CK(cudaMemcpyAsync(dst, src, len, cudaMemcpyDeviceToDevice, st));
		CK(cudaEventRecord(e1, st));
		CK(cudaEventSynchronize(e1));
		CK(cudaEventElapsedTime(&ms, e0, e1));
		if (r > 0) /* the first warms the path */
			t.push_back(len / (ms * 1e-3) / GB);
	}
	CK(cudaEventDestroy(e0));
	CK(cudaEventDestroy(e1));
	CK(cudaStreamDestroy(st));
	return gpu_bench_median(t);
}

/* One run: every block posted, progressed, reaped; GB/s, or -1 with a failed READ. */
static double run(struct kvl_xconn *x, uint8_t *dst, const std::vector<uint32_t> &perm,
		  uint32_t unit, int *status)
{
	const uint32_t n = (uint32_t)perm.size();
	uint32_t posted = 0, done = 0;
	struct kvl_wr w[256];
	struct kvl_wc wc[256];
	uint64_t t0 = kvl_now_ns(), t1;

	*status = 0;
	while (done < n) {
		unsigned k = 0, took;
		int err = 0;

		for (; k < 256 && posted + k < n; k++) {
			memset(&w[k], 0, sizeof(w[k]));
			w[k].wr_id = posted + k;
			w[k].local = dst + (size_t)(posted + k) * unit;
			w[k].remote_seg = 1;
			w[k].remote_off = (uint64_t)perm[posted + k] * unit;
			w[k].length = unit;
			w[k].op = KVL_OP_READ;
		}
		took = k ? x->ops->post(x->c, w, k, &err) : 0;
		posted += took;
		x->ops->progress(x->c);
		for (unsigned m; (m = x->ops->reap(x->c, wc, 256)) > 0;)
			for (unsigned i = 0; i < m; i++, done++)
				if (wc[i].status != 0 && *status == 0)
					*status = wc[i].status;
	}
	t1 = kvl_now_ns();
	return (double)n * unit / ((t1 - t0) * 1e-9) / GB;
}

int main(int argc, char **argv)
{
	int reps = 5, p1[2], p2[2];
	size_t mib = 1024, len;
	const uint32_t units[] = { 16u << 10, 64u << 10, 2u << 20 };
	double ceil_gbps, res[N_METHODS][3];
	struct kvl_ipc_rseg rs;
	cudaIpcMemHandle_t h;
	struct kvl_xconn x;
	uint8_t *dst, *dst2;
	unsigned long long *bad;
	char err[256];
	pid_t child;

	for (int i = 1; i + 1 < argc; i += 2) {
		if (strcmp(argv[i], "--reps") == 0)
			reps = atoi(argv[i + 1]);
		else if (strcmp(argv[i], "--mib") == 0)
			mib = (size_t)atol(argv[i + 1]);
	}
	len = mib << 20;
	/* before any CUDA call here: the child gets a process of its own, without our context */
	EXPECT(pipe(p1) == 0 && pipe(p2) == 0, "pipes");
	child = fork();
	EXPECT(child >= 0, "fork");
	if (child == 0) {
		close(p1[0]);
		close(p2[1]);
		if (gpu_test_devices() == 0) {
			fflush(stdout); /* its reason, before _exit */
			_exit(GPU_TEST_SKIP);
		}
		serve(len, p1[1], p2[0]);
	}
	close(p1[1]);
	close(p2[0]);
	if (read(p1[0], &h, sizeof(h)) != (ssize_t)sizeof(h)) {
		int st = 0;

		waitpid(child, &st, 0);
		if (WIFEXITED(st) && WEXITSTATUS(st) == GPU_TEST_SKIP)
			return GPU_TEST_SKIP;
		EXPECT(0, "the serving process sent no handle (exit status %d)", st);
	}
	CK(cudaSetDevice(0));
	CK(cudaMalloc((void **)&dst, len));
	CK(cudaMalloc((void **)&dst2, len));
	CK(cudaMalloc((void **)&bad, sizeof(*bad)));
	memset(&rs, 0, sizeof(rs));
	rs.id = 1;
	rs.gen = 1;
	rs.flags = KVL_SEG_REMOTE_READ;
	memcpy(rs.handle, &h, sizeof(rs.handle));
	rs.length = len;
	ceil_gbps = ceiling(dst2, dst, len, reps);
	printf("same-GPU CUDA IPC (two processes on GPU 0: an HBM copy, NOT NVLink), %zu MiB, "
	       "scattered blocks, median of %d\n",
	       mib, reps);
	for (int m = 0; m < N_METHODS; m++) {
		struct kvl_cudma_opts eo;

		memset(&eo, 0, sizeof(eo));
		eo.small = methods[m].small;
		eo.gather_ctas = methods[m].ctas;
		eo.ce_min = methods[m].ce_min;
		eo.copy_min = methods[m].copy_min;
		/* one connection at a time: a handle opens once per process */
		EXPECT(kvl_ipc_conn_cuda(0, dst, len, NULL, &rs, 1, m == 0 ? NULL : &eo, &x, err,
					 sizeof(err)) == 0,
		       "the ipc connection (%s): %s", methods[m].name, err);
		for (int u = 0; u < 3; u++) {
			std::vector<uint32_t> perm =
				gpu_bench_scatter((uint32_t)(len / units[u]), 7 + units[u]);
			uint32_t *perm_dev;
			std::vector<double> t;
			unsigned long long b = 0;
			int status = 0;

			CK(cudaMalloc((void **)&perm_dev, perm.size() * sizeof(uint32_t)));
			CK(cudaMemcpy(perm_dev, perm.data(), perm.size() * sizeof(uint32_t),
				      cudaMemcpyHostToDevice));
			for (int r = 0; r < reps + 1; r++) {
				double g;

				CK(cudaMemset(dst, 0xee,
					      len)); /* what a missed block would leave */
				CK(cudaMemset(bad, 0, sizeof(*bad)));
				CK(cudaDeviceSynchronize());
				g = run(&x, dst, perm, units[u], &status);
				EXPECT(status == 0, "%s: a READ of %u B failed: status %d",
				       methods[m].name, units[u], status);
				check<<<1024, 256>>>((const uint32_t *)dst, len / 4, perm_dev,
						     units[u], bad);
				CK(cudaGetLastError());
				CK(cudaMemcpy(&b, bad, sizeof(b), cudaMemcpyDeviceToHost));
				EXPECT(b == 0, "%s: %llu words differ after the %u B run %d",
				       methods[m].name, b, units[u], r);
				if (r > 0) /* the first opens the handle and warms the path */
					t.push_back(g);
			}
			res[m][u] = gpu_bench_median(t);
			CK(cudaFree(perm_dev));
		}
		{
			struct kvl_ipc_stats st;

			kvl_ipc_stats_read((struct kvl_ipc_conn *)x.c, &st);
			printf("%s: %llu READs, %llu bytes, %llu refused, %llu handle opens, %llu "
			       "open failures%s%s\n",
			       methods[m].name, (unsigned long long)st.done,
			       (unsigned long long)st.bytes, (unsigned long long)st.refused,
			       (unsigned long long)st.opens, (unsigned long long)st.open_failures,
			       st.last_open_error[0] ? ": " : "", st.last_open_error);
			EXPECT(st.opens == 1 && st.refused == 0,
			       "one handle opened, nothing refused");
		}
		x.ops->free(x.c); /* closes the handle: the next connection opens it again */
	}
	close(p2[1]);
	waitpid(child, NULL, 0);
	printf("\nGB/s (%% of the %.1f GB/s D2D cudaMemcpy ceiling, same call)\n", ceil_gbps);
	printf("%-8s", "block");
	for (int m = 0; m < N_METHODS; m++)
		printf(" %18s", methods[m].name);
	printf("\n");
	for (int u = 0; u < 3; u++) {
		printf("%-8s", units[u] >= (1u << 20)	 ? "2 MiB"
			       : units[u] == (64u << 10) ? "64 KiB"
							 : "16 KiB");
		for (int m = 0; m < N_METHODS; m++)
			printf(" %9.1f (%5.1f%%)", res[m][u], 100.0 * res[m][u] / ceil_gbps);
		printf("\n");
	}
	printf("(same-GPU IPC: HBM to HBM on one GPU; NVLink between two GPUs is not measured "
	       "here)\n");
	return 0;
}
