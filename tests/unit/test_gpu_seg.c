/* SPDX-License-Identifier: BSD-3-Clause */
/* GPU segments without a GPU: the INI keys, the refusals that need none, tcp never touching VRAM.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include "config.h"
#include "gpu.h"
#include "kvl_build_config.h"
#include "kvl_test.h"
#include "tcp_data.h"

static struct kvl_config cfg;
static struct kvl_conf_errors errs;

/* Load @text; the first error (or "" when it loaded). */
static const char *load(const char *text)
{
	int rc = kvl_config_load_string("t.ini", text, &cfg, &errs);

	return rc == 0 ? "" : errs.msg[0];
}

#define NIC_LO "[nic.lo]\ndevice = lo\ntransport = tcp\n"
#define SEG    "[segment.kv]\nblocks = 4\nblock_bytes = 4096\n"

static void config_keys(void)
{
	CHECK_STR(load(NIC_LO SEG "memory = gpu\ngpu = 3\n"), "");
	CHECK_INT(cfg.segments[0].memory, KVL_SEG_MEM_GPU);
	CHECK_INT(cfg.segments[0].gpu, 3);
	CHECK_STR(load(NIC_LO SEG), "");
	CHECK_INT(cfg.segments[0].memory, KVL_SEG_MEM_HOST);
	CHECK_INT(cfg.sched.staging, KVL_STAGING_AUTO);
	CHECK_STR(kvl_seg_memory_name(KVL_SEG_MEM_GPU), "gpu");
	CHECK_STR(kvl_staging_place_name(KVL_STAGING_HOST), "host");

	/* bad values name file, line and key */
	CHECK_HAS(load(NIC_LO SEG "memory = vram\n"), "t.ini:7: segment.kv.memory: expected");
	CHECK_HAS(load(NIC_LO SEG "memory = gpu\ngpu = 64\n"), "t.ini:8: segment.kv.gpu:");
	CHECK_HAS(load(NIC_LO "[sched]\nstaging = vram\n"), "t.ini:5: sched.staging: expected");
	/* gpu = N without memory = gpu: forgotten */
	CHECK_HAS(load(NIC_LO SEG "gpu = 1\n"),
		  "t.ini:7: segment.kv.gpu: applies only to memory = gpu");
	/* a GPU segment on another GPU than the runtime's */
	CHECK_HAS(load(NIC_LO SEG "memory = gpu\ngpu = 1\n[gpu]\nenable = true\ndevice_id = 0\n"),
		  "t.ini:8: segment.kv.gpu: GPU 1 is not the runtime's GPU (gpu.device_id = 0)");
	CHECK_STR(load(NIC_LO SEG "memory = gpu\ngpu = 1\n[gpu]\nenable = true\ndevice_id = 1\n"),
		  "");
	/* staging = gpu needs a GPU, and no tcp NIC (no copy path yet) */
	CHECK_HAS(load("[nic.x]\ndevice = mlx5_0\n[sched]\nstaging_mb = 64\nstaging = gpu\n"),
		  "t.ini:5: sched.staging: gpu needs gpu.enable = true");
	CHECK_HAS(load(NIC_LO "[sched]\nstaging_mb = 64\nstaging = gpu\n[gpu]\nenable = true\n"),
		  "t.ini:6: sched.staging: gpu, but nic.lo has transport = tcp (t.ini:3)");
	CHECK_STR(load("[nic.x]\ndevice = mlx5_0\n[sched]\nstaging_mb = 64\nstaging = gpu\n"
		       "[gpu]\nenable = true\n"),
		  "");
	/* with the null transport nothing lands: VRAM staging is allowed on tcp */
	CHECK_STR(load(NIC_LO "[sched]\nstaging_mb = 64\nstaging = gpu\nnull_transport = true\n"
			      "null_transport_ack = true\n[gpu]\nenable = true\n"),
		  "");
}

/* What needs no GPU: host memory detected as host; unmapped and PROT_NONE memory refused;
 * a GPU segment asked for here refused with the reason. */
static void refusals(void)
{
	struct kvl_mem_info mi;
	char err[512], pci[32];
	long pg = sysconf(_SC_PAGESIZE);
	uint8_t *host = malloc(1 << 20), *none, *gone;
	void *v;
	int rc;

	rc = kvl_gpu_mem_detect(host + 100, 65536, &mi, err, sizeof(err));
	CHECK_INT(rc, 0);
	CHECK_INT(mi.kind, KVL_MEM_HOST);
	CHECK_INT(mi.device, -1);

	/* reserved, not readable: what a freed cudaMalloc block looks like to the CPU */
	none = mmap(NULL, 4 * pg, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	CHECK(none != MAP_FAILED);
	rc = kvl_gpu_mem_detect(none, 4 * pg, &mi, err, sizeof(err));
	CHECK_INT(rc, -EFAULT);
	CHECK_HAS(err, "is neither host memory the CPU can read nor live GPU memory");
	CHECK_HAS(err, "freed");
	/* a range that starts in readable memory and runs into an unmapped hole */
	gone = mmap(NULL, 2 * pg, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	CHECK(gone != MAP_FAILED);
	munmap(gone + pg, pg);
	rc = kvl_gpu_mem_detect(gone, 2 * pg, &mi, err, sizeof(err));
	CHECK_INT(rc, -EFAULT);
	CHECK_INT(kvl_gpu_mem_detect(gone, pg, &mi, err, sizeof(err)), 0);

	/* a GPU segment on this host: no GPU (or no CUDA in the build) */
	rc = kvl_gpu_device_check(0, pci, sizeof(pci), err, sizeof(err));
	if (KVL_HAVE_CUDA && rc == 0) {
		printf("a CUDA device is present: the no-GPU refusal is not checked here\n");
	} else if (KVL_HAVE_CUDA) {
		CHECK_INT(rc, -ENODEV);
		CHECK_HAS(err, "no usable CUDA device on this host");
		printf("no GPU: %s\n", err);
	} else {
		CHECK_INT(rc, -ENOTSUP);
		CHECK_HAS(err, "built without CUDA");
	}
	if (!KVL_HAVE_CUDA) {
		v = kvl_gpu_vram_alloc(0, 4096, err, sizeof(err));
		CHECK(v == NULL);
		CHECK_INT(errno, ENOTSUP);
		CHECK_HAS(err, "built without CUDA");
	}
	munmap(none, 4 * pg);
	munmap(gone, pg);
	free(host);
}

/* A peer's READ and WRITE of a GPU segment, and a local WRITE out of one, over tcp: refused
 * with gpu-memory, and never touched (the "VRAM" here is PROT_NONE: a touch would fault). */
static void tcp_refuses_gpu(void)
{
	static struct kvl_seg_table ta, tb;
	long pg = sysconf(_SC_PAGESIZE);
	uint8_t *vram = mmap(NULL, 16 * pg, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	uint8_t *host = calloc(1, 16 * pg);
	struct kvl_tcp_conn *a, *b;
	struct kvl_wc wc[4];
	unsigned got = 0;
	int fds[2];

	CHECK(vram != MAP_FAILED && host != NULL);
	/* b serves segment 1: GPU memory, remote read and write */
	tb.seg[0] = (struct kvl_seg){ .base = vram,
				      .len = 16 * pg,
				      .id = 1,
				      .flags = KVL_SEG_REMOTE_READ | KVL_SEG_REMOTE_WRITE |
					       KVL_SEG_GPU };
	tb.live[0] = true;
	/* a has a host segment 1 and a GPU segment 2 */
	ta.seg[0] = (struct kvl_seg){ .base = host, .len = 16 * pg, .id = 1 };
	ta.seg[1] = (struct kvl_seg){ .base = vram, .len = 16 * pg, .id = 2, .flags = KVL_SEG_GPU };
	ta.live[0] = ta.live[1] = true;
	CHECK_INT(socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
	a = kvl_tcp_conn_new(fds[0], &ta, 16);
	b = kvl_tcp_conn_new(fds[1], &tb, 16);
	CHECK(a != NULL && b != NULL);

	/* local side: a WRITE out of VRAM is refused at post, nothing queued */
	CHECK_INT(kvl_tcp_post(a, &(struct kvl_wr){ .wr_id = 9,
						    .op = KVL_OP_WRITE,
						    .local = vram + 64,
						    .length = 4096,
						    .remote_seg = 1 }),
		  -EXDEV);
	CHECK_INT(kvl_xport_stats(a)->failed[KVL_ERR_GPU_MEMORY], 1);
	CHECK_INT(kvl_tcp_outstanding(a), 0);
	/* served side: host -> peer's VRAM (WRITE) and peer's VRAM -> host (READ) */
	CHECK_INT(kvl_tcp_post(a, &(struct kvl_wr){ .wr_id = 1,
						    .op = KVL_OP_WRITE,
						    .local = host,
						    .length = 4096,
						    .remote_seg = 1 }),
		  0);
	CHECK_INT(kvl_tcp_post(a, &(struct kvl_wr){ .wr_id = 2,
						    .op = KVL_OP_READ,
						    .local = host + 8192,
						    .length = 4096,
						    .remote_seg = 1,
						    .remote_off = 4096 }),
		  0);
	for (int spin = 0; spin < 100000 && got < 2; spin++) {
		kvl_tcp_progress(a);
		kvl_tcp_progress(b);
		got += kvl_tcp_reap(a, wc + got, 4 - got);
	}
	CHECK_INT(got, 2);
	CHECK_INT(wc[0].wr_id, 1);
	CHECK_INT(wc[0].status, KVL_ERR_GPU_MEMORY);
	CHECK_INT(wc[1].wr_id, 2);
	CHECK_INT(wc[1].status, KVL_ERR_GPU_MEMORY);
	CHECK_INT(kvl_xport_stats(b)->refused[KVL_ERR_GPU_MEMORY], 2);
	CHECK_INT(kvl_tcp_broken(a), 0); /* the connection goes on */
	kvl_tcp_conn_free(a);
	kvl_tcp_conn_free(b);
	munmap(vram, 16 * pg);
	free(host);
}

int main(void)
{
	config_keys();
	refusals();
	tcp_refuses_gpu();
	return kvl_test_done("gpu_seg");
}
