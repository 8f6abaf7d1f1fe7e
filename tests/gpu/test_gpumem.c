/* SPDX-License-Identifier: BSD-3-Clause */
/* gpu suite: GPUDirect registration of VRAM, or an error that names each missing piece. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cuda_runtime_api.h>
#include <infiniband/verbs.h>

#include "gpu_test.h"
#include "gpumem.h"
#include "xfer.h"

#define LEN  (64u << 20)
#define WLEN (1u << 20) /* bytes the loopback RDMA WRITE puts into VRAM */

/* A GID to loop back through: an IPv4-mapped one (RoCE v2 over an IPv4 netdev) if any. */
static int pick_gid(struct ibv_context *ctx, union ibv_gid *gid)
{
	struct ibv_port_attr pa;
	int best = -1;

	if (ibv_query_port(ctx, 1, &pa))
		return -1;
	for (int i = 0; i < pa.gid_tbl_len && i < 16; i++) {
		union ibv_gid g;
		static const uint8_t zero[16];

		if (ibv_query_gid(ctx, 1, i, &g) || memcmp(g.raw, zero, 16) == 0)
			continue;
		if (best < 0 || (g.raw[10] == 0xff && g.raw[11] == 0xff)) {
			best = i;
			*gid = g;
		}
	}
	return best;
}

/*
 * An RC QP connected to itself writes @WLEN bytes of host memory into the registered VRAM at
 * @gdst; the bytes are then read back with cudaMemcpy. Returns NULL, or what failed.
 */
static const char *loopback_write(struct ibv_pd *pd, const struct kvl_gpumem_mr *g, void *gdst,
				  char *why, size_t whylen)
{
	struct ibv_context *ctx = pd->context;
	struct ibv_cq *cq = ibv_create_cq(ctx, 4, NULL, NULL, 0);
	struct ibv_qp_init_attr qi = {
		.qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 2, .max_recv_wr = 2, .max_send_sge = 1, .max_recv_sge = 1 }
	};
	struct ibv_qp_attr a;
	struct ibv_qp *qp = NULL;
	struct ibv_mr *hmr = NULL;
	union ibv_gid gid;
	uint8_t *src = malloc(WLEN), *back = malloc(WLEN);
	const char *fail = NULL;
	int gi, rc;

	if (cq == NULL || src == NULL || back == NULL)
		return "cq or buffers";
	for (unsigned i = 0; i < WLEN; i++)
		src[i] = (uint8_t)(i * 131u + 7u);
	qi.send_cq = qi.recv_cq = cq;
	qp = ibv_create_qp(pd, &qi);
	hmr = ibv_reg_mr(pd, src, WLEN, IBV_ACCESS_LOCAL_WRITE);
	gi = pick_gid(ctx, &gid);
	if (qp == NULL || hmr == NULL || gi < 0) {
		snprintf(why, whylen, "qp %p, host mr %p, gid index %d: %s", (void *)qp,
			 (void *)hmr, gi, strerror(errno));
		fail = why;
		goto out;
	}
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_INIT;
	a.port_num = 1;
	a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
	rc = ibv_modify_qp(qp, &a,
			   IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = IBV_MTU_1024;
	a.dest_qp_num = qp->qp_num; /* itself */
	a.max_dest_rd_atomic = 1;
	a.min_rnr_timer = 12;
	a.ah_attr.is_global = 1;
	a.ah_attr.grh.dgid = gid;
	a.ah_attr.grh.sgid_index = (uint8_t)gi;
	a.ah_attr.grh.hop_limit = 1;
	a.ah_attr.port_num = 1;
	if (rc == 0)
		rc = ibv_modify_qp(qp, &a,
				   IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
					   IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
					   IBV_QP_MIN_RNR_TIMER);
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.max_rd_atomic = 1;
	if (rc == 0)
		rc = ibv_modify_qp(qp, &a,
				   IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
					   IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
					   IBV_QP_MAX_QP_RD_ATOMIC);
	if (rc != 0) {
		snprintf(why, whylen, "connecting the QP to itself (gid index %d): %s", gi,
			 strerror(rc));
		fail = why;
		goto out;
	}
	{
		struct ibv_sge sge = { (uint64_t)(uintptr_t)src, WLEN, hmr->lkey };
		struct ibv_send_wr wr = { .wr_id = 1,
					  .sg_list = &sge,
					  .num_sge = 1,
					  .opcode = IBV_WR_RDMA_WRITE,
					  .send_flags = IBV_SEND_SIGNALED },
				   *bad;
		struct ibv_wc wc;
		int n = 0;

		wr.wr.rdma.remote_addr = (uint64_t)(uintptr_t)gdst;
		wr.wr.rdma.rkey = g->rkey;
		rc = ibv_post_send(qp, &wr, &bad);
		for (long spin = 0; rc == 0 && n == 0 && spin < 2000000000L; spin++)
			n = ibv_poll_cq(cq, 1, &wc);
		if (rc != 0 || n <= 0 || wc.status != IBV_WC_SUCCESS) {
			snprintf(why, whylen, "RDMA WRITE into VRAM: post %s, completion %s",
				 strerror(rc), n > 0 ? ibv_wc_status_str(wc.status) : "none");
			fail = why;
			goto out;
		}
	}
	if (cudaMemcpy(back, gdst, WLEN, cudaMemcpyDeviceToHost) != cudaSuccess ||
	    memcmp(back, src, WLEN) != 0) {
		snprintf(why, whylen, "the bytes read back from VRAM differ from those written");
		fail = why;
	}
out:
	if (qp)
		ibv_destroy_qp(qp);
	if (hmr)
		ibv_dereg_mr(hmr);
	ibv_destroy_cq(cq);
	free(src);
	free(back);
	return fail;
}

int main(void)
{
	struct kvl_gpumem_probe p, hp;
	struct kvl_gpumem_mr mr;
	char err[512];
	struct ibv_pd *pd;
	void *g = NULL, *h = NULL;
	int rc;

	if (gpu_test_devices() == 0)
		return GPU_TEST_SKIP;
	EXPECT(cudaMalloc(&g, LEN) == cudaSuccess && cudaMallocHost(&h, 1 << 20) == cudaSuccess,
	       "allocations");

	/* What the host offers, looked at from the GPU side too. */
	rc = kvl_gpumem_probe((char *)g + 4096, 1 << 20, &p, err, sizeof(err));
	EXPECT(rc == 0, "probe: %d %s", rc, err);
	printf("probe: RDMA devices %d%s%s\n", p.rdma_devices, p.rdma_why[0] ? ": " : "",
	       p.rdma_why);
	printf("probe: dma-buf export of VRAM: %s%s%s\n", p.dmabuf_export ? "works" : "fails",
	       p.dmabuf_why[0] ? ": " : "", p.dmabuf_why);
	printf("probe: nvidia_peermem: %s%s%s\n", p.peermem ? "loaded" : "missing",
	       p.peermem_why[0] ? ": " : "", p.peermem_why);
	printf("probe: CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED = %d\n", p.gpudirect_attr);
	EXPECT(p.dmabuf_export == (p.dmabuf_why[0] == '\0'), "dma-buf state without its cause");
	EXPECT(p.peermem == (p.peermem_why[0] == '\0'), "peermem state without its cause");

	/* Host memory is not VRAM: refused, and said so. */
	rc = kvl_gpumem_probe(h, 4096, &hp, err, sizeof(err));
	EXPECT(rc == -EINVAL && strstr(err, "is not GPU memory"), "host pointer: %d %s", rc, err);
	printf("host pointer refused: %s\n", err);

	pd = kvl_gpumem_open_pd(NULL, err, sizeof(err));
	if (pd == NULL) {
		/* The host has no RDMA NIC: nothing can be registered, and the error must say that
		 * this is the cause (not an opaque EFAULT from deep inside verbs). */
		EXPECT(p.rdma_devices == 0 || errno != ENODEV, "pd failed with devices present");
		EXPECT(strstr(err, "no RDMA device") != NULL, "error does not name the cause: %s",
		       err);
		if (access("/sys/module/nvidia_peermem", F_OK) != 0)
			EXPECT(strstr(err, "nvidia_peermem is not loaded") != NULL,
			       "error hides that nvidia_peermem is missing too: %s", err);
		printf("NO RDMA DEVICE on this host: GPU segments cannot be registered for RDMA "
		       "here; the error says so:\n  %s\n",
		       err);
		printf("PASS: gpumem (error path only: no RDMA NIC to register with)\n");
		return 0;
	}

	/* An RDMA device is there: register a sub-range, or explain both methods' failure. */
	rc = kvl_gpumem_reg(pd, h, 4096, KVL_SEG_REMOTE_READ, &mr, err, sizeof(err));
	EXPECT(rc == -EINVAL && strstr(err, "is not GPU memory"), "host: %d %s", rc, err);
	rc = kvl_gpumem_reg(pd, (char *)g + 65536, 8 << 20,
			    KVL_SEG_REMOTE_READ | KVL_SEG_REMOTE_WRITE, &mr, err, sizeof(err));
	printf("RDMA device %s: registering 8 MiB of VRAM\n",
	       ibv_get_device_name(pd->context->device));
	if (rc == 0) {
		const char *f;

		EXPECT(mr.mr != NULL && mr.rkey != 0 && mr.method != KVL_GPUMEM_NONE, "empty mr");
		printf("registered 8 MiB of VRAM through %s in %.1f us (lkey 0x%x rkey 0x%x)\n",
		       kvl_gpumem_method_name(mr.method), mr.ns / 1e3, mr.lkey, mr.rkey);
		/* Registered must mean usable: a WRITE through the device lands in VRAM. */
		EXPECT(cudaMemset((char *)g + 65536, 0, 8 << 20) == cudaSuccess, "memset");
		f = loopback_write(pd, &mr, (char *)g + 65536 + 4096, err, sizeof(err));
		EXPECT(f == NULL, "registered, but %s", f);
		printf("RDMA WRITE of %u KiB through %s into the registered VRAM: bytes read back "
		       "match\n",
		       WLEN >> 10, ibv_get_device_name(pd->context->device));
		kvl_gpumem_dereg(&mr);
	} else {
		/* Each method's own cause, never a bare errno. */
		EXPECT(strstr(err, "dma-buf: ") && strstr(err, "peer memory: "),
		       "error does not give each method's cause: %s", err);
		EXPECT(strstr(err, ibv_get_device_name(pd->context->device)) != NULL,
		       "error does not name the device: %s", err);
		if (p.dmabuf_export)
			EXPECT(strstr(err, "refused it (ibv_reg_dmabuf_mr: ") != NULL,
			       "dma-buf exported, but the error does not say the NIC refused it "
			       "and why: %s",
			       err);
		if (access("/sys/module/nvidia_peermem", F_OK) != 0)
			EXPECT(strstr(err, "nvidia_peermem is not loaded") != NULL,
			       "error hides that nvidia_peermem is missing: %s", err);
		printf("registration refused, with causes:\n  %s\n", err);
	}
	kvl_gpumem_close_pd(pd);
	cudaFree(g);
	cudaFreeHost(h);
	printf("PASS: gpumem\n");
	return 0;
}
