/* SPDX-License-Identifier: BSD-3-Clause */
/* gpu suite: >= 1 GiB PULLed from this host's KV tier into VRAM staging, checked on the GPU. */
/*
 * The whole runtime: kvl_start with [sched] tier = true, staging = gpu, the [memory] pool
 * (pinned for CUDA); a 1 GiB segment carved from the pool (kvl_seg_alloc) filled with the
 * pattern; one request on KVL_PEER_LOCAL_TIER opened with KVL_REQ_STEP_FLAGS, 16384 blocks of
 * 64 KiB in 64 steps. The NIC lcore's scheduler READs them through the tier transport, whose
 * copy engine and gather kernel (lcores/gpu/xport_cudma.c) land them in VRAM staging; READY
 * is written only after a batch's CUDA event has passed.
 *
 * The engine side is one real stream, every operation enqueued before the request runs: per
 * step, a wait on its READY word (cuStreamWaitValue32 on the device address the request API
 * gives), a wait on a word of this test's ("the step's block addresses are in the table":
 * the addresses are known only once the blocks landed, kvl_req_block_addr), a kernel that
 * checks every byte of the step's blocks against the pattern, then a write of its DONE word,
 * which is what frees the step's staging for the next steps. 256 MiB of staging for 1 GiB:
 * each slot is used four times, so a kernel that ran before its blocks landed would read an
 * earlier block's pattern and count it. Then /kvlane/tier through the telemetry socket, and a
 * host segment outside the pool refused by the tier (-ENOENT: the copy engine reads only
 * pinned memory).
 * Exits 77 (skipped) without a GPU.
 */
#include <errno.h>
#include <stdint.h>

#include "gpu_check.cuh"
#include "gpu_rt.h"
#include "gpusig.h"

#define BLOCK	 (64u << 10)
#define N_BLOCKS 16384u /* 1 GiB */
#define N_STEPS	 64u
#define PER_STEP (N_BLOCKS / N_STEPS)
#define SEED	 7u
#define LIMIT_S	 120.0

int main(void)
{
	static const char ini[] =
		"[runtime]\nname = tier-gpu\nidle_policy = poll\n"
		"[nic.lo]\ndevice = lo\ntransport = tcp\n"
		"[gpu]\nenable = true\ndevice_id = 0\nvram_reserve_mb = 2048\n"
		"[memory]\npool_size_mb = 1088\nchunk_size_kb = 4096\n"
		"[sched]\nstaging_mb = 256\nslot_kb = 64\nstaging = gpu\ntier = true\n"
		"window_max_mb = 256\nmax_blocks = 65536\n";
	struct kvl_seg_geom g = { 64, 2, N_BLOCKS / 128, BLOCK }; /* 64 x 2 x 128 x 64 KiB */
	static struct kvl_req_block blocks[N_BLOCKS];
	static uint32_t first[N_STEPS + 1], refs[N_BLOCKS];
	struct kvl_remote_seg rs[8];
	struct kvl_segment seg, out_of_pool;
	struct kvl_req_desc d;
	struct kvl_req_flags fl;
	char err[2048], out[16384];
	struct gpu_check_tables ct;
	struct kvl_runtime *rt;
	kvl_req_t req;
	double t0, t_end;
	int stage = 0, n, end_status;
	void *host_mem;

	if (gpu_test_devices() == 0)
		return GPU_TEST_SKIP;
	gpu_rt_init("tiergpu");
	CK(cudaSetDevice(0));
	rt = gpu_rt_start(gpu_rt_write_ini("tier.ini", ini), NULL, 0, err, sizeof(err), &stage);
	EXPECT(rt != NULL, "kvl_start: stage %d: %s", stage, err);
	EXPECT(kvl_seg_alloc(rt, "tier", &g, KVL_REMOTE_READ, &seg) == 0, "kvl_seg_alloc 1 GiB");
	EXPECT(seg.length == (uint64_t)N_BLOCKS * BLOCK && seg.mem == KVL_MEM_HOST,
	       "segment %llu bytes, kind %u", (unsigned long long)seg.length, seg.mem);
	kvl_pattern_fill(seg.base, seg.length, SEED, 0);
	n = kvl_peer_segments(rt, KVL_PEER_LOCAL_TIER, rs, 8);
	EXPECT(n == 1 && rs[0].id == seg.id && rs[0].length == seg.length,
	       "the tier offers %d segments (want the pool's one, id %u)", n, seg.id);

	/* host memory outside the pool: registered, but not pinned for the copy engine */
	host_mem = aligned_alloc(4096, 1 << 20);
	EXPECT(host_mem != NULL, "aligned_alloc");
	{
		struct kvl_seg_geom g1 = { 1, 1, 16, BLOCK };
		uint32_t f1[2] = { 0, 1 }, r1[1] = { 0 };
		struct kvl_req_block b1;
		kvl_req_t h = 0;

		EXPECT(kvl_seg_register(rt, "unpinned", host_mem, &g1, KVL_REMOTE_READ,
					&out_of_pool) == 0,
		       "kvl_seg_register host memory: %s", kvl_seg_error());
		memset(&b1, 0, sizeof(b1));
		b1.remote_seg = out_of_pool.id;
		b1.length = BLOCK;
		memset(&d, 0, sizeof(d));
		d.blocks = &b1;
		d.n_blocks = 1;
		d.n_steps = 1;
		d.step_first = f1;
		d.step_blocks = r1;
		EXPECT(kvl_req_open(rt, KVL_PEER_LOCAL_TIER, &d, &h) == -ENOENT && h == 0,
		       "a segment outside the pool must not be a tier source with VRAM staging");
		EXPECT(kvl_peer_segments(rt, KVL_PEER_LOCAL_TIER, rs, 8) == 1,
		       "the unpinned segment is listed");
		printf("outside the pool: not offered, kvl_req_open -ENOENT\n");
	}

	for (uint32_t i = 0; i < N_BLOCKS; i++) {
		memset(&blocks[i], 0, sizeof(blocks[i]));
		blocks[i].remote_seg = seg.id;
		blocks[i].remote_off = (uint64_t)i * BLOCK;
		blocks[i].length = BLOCK;
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
	d.flags = KVL_REQ_STEP_FLAGS;

	gpu_check_tables_new(&ct, N_BLOCKS, N_STEPS);
	/* Load check_step before the stream waits on READY: under CUDA's lazy loading its first
	 * launch may synchronise the context, i.e. wait for this very stream (a hang, seen). */
	{
		struct cudaFuncAttributes fa;

		CK(cudaFuncGetAttributes(&fa, gpu_check_step));
	}

	EXPECT(kvl_req_open(rt, KVL_PEER_LOCAL_TIER, &d, &req) == 0, "kvl_req_open on the tier");
	t0 = gpu_rt_now_s();
	EXPECT(kvl_req_step_flags(rt, req, &fl) == 0 && fl.ready_dev && fl.done_dev,
	       "step flags mapped for the GPU (ready_dev %#llx)", (unsigned long long)fl.ready_dev);
	/* the whole stream up front: nothing is enqueued per step from here on */
	gpu_check_enqueue(&fl, (uint64_t)(uintptr_t)ct.ready_dev,
			  (const uint64_t *const *)ct.tab_dev, N_STEPS, PER_STEP, BLOCK, SEED,
			  ct.cnt, ct.st);
	/* The host's part: each step's block addresses once its READY word says they landed. */
	gpu_rt_fill_tables(rt, req, &fl, N_STEPS, first, refs, (uint64_t *)ct.tab, ct.ready, t0,
			   LIMIT_S);
	end_status = gpu_rt_wait_end(rt, t0, LIMIT_S);
	t_end = gpu_rt_now_s();
	CK(cudaStreamSynchronize(ct.st));
	EXPECT(end_status == 0, "the request ended with %s", kvl_status_name(end_status));
	{
		struct gpu_counts h;

		CK(cudaMemcpy(&h, ct.cnt, sizeof(h), cudaMemcpyDeviceToHost));
		EXPECT(h.checked == (uint64_t)N_BLOCKS * BLOCK,
		       "the GPU checked %llu bytes of %llu", h.checked,
		       (unsigned long long)N_BLOCKS * BLOCK);
		EXPECT(h.bad == 0, "%llu words differ from the pattern", h.bad);
		printf("%u blocks (%llu bytes) checked on the GPU behind READY flags, 0 bad; "
		       "open to DONE in %.3f s (%.1f GB/s with the checks)\n",
		       N_BLOCKS, h.checked, t_end - t0, h.checked / (t_end - t0) / 1e9);
	}
	gpu_rt_tel("/kvlane/tier", out, sizeof(out));
	printf("/kvlane/tier: %.600s\n", out);
	EXPECT(strcmp(gpu_rt_tel_str(out, "method", 0), "copy_engine") == 0 &&
		       strcmp(gpu_rt_tel_str(out, "staging", 0), "gpu") == 0,
	       "the tier's method and staging: %s", out);
	EXPECT(gpu_rt_tel_u64(out, "bytes") == (uint64_t)N_BLOCKS * BLOCK,
	       "/kvlane/tier bytes: want %llu in %s", (unsigned long long)N_BLOCKS * BLOCK, out);
	EXPECT(gpu_rt_tel_u64(out, "refused") == 0 && gpu_rt_tel_u64(out, "engine_errors") == 0 &&
		       gpu_rt_tel_u64(out, "inflight") == 0,
	       "refusals, engine errors or READs left: %s", out);
	CK(cudaStreamDestroy(ct.st));
	kvl_stop(rt);
	free(host_mem); /* registered memory stays the caller's until kvl_stop */
	printf("PASS: tier_gpu (1 GiB from the host tier into VRAM staging, every byte checked on "
	       "the GPU behind READY flags)\n");
	return 0;
}
