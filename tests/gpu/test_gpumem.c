/* SPDX-License-Identifier: BSD-3-Clause */
/* gpu suite: GPUDirect registration of VRAM, or an error that names each missing piece. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cuda_runtime_api.h>

#include "gpumem.h"
#include "xfer.h"

#define EXPECT(c, ...)                                                      \
	do {                                                                \
		if (!(c)) {                                                 \
			printf("FAIL %s:%d: %s: ", __FILE__, __LINE__, #c); \
			printf(__VA_ARGS__);                                \
			printf("\n");                                       \
			exit(1);                                            \
		}                                                           \
	} while (0)

#define LEN (64u << 20)

int main(void)
{
	struct kvl_gpumem_probe p, hp;
	struct kvl_gpumem_mr mr;
	char err[512];
	struct ibv_pd *pd;
	void *g = NULL, *h = NULL;
	int n = 0, rc;
	cudaError_t ce = cudaGetDeviceCount(&n);

	if (ce != cudaSuccess || n == 0) {
		printf("skipped: no usable CUDA device (%s)\n",
		       ce != cudaSuccess ? cudaGetErrorString(ce) : "device count 0");
		return 77;
	}
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
	if (rc == 0) {
		EXPECT(mr.mr != NULL && mr.rkey != 0 && mr.method != KVL_GPUMEM_NONE, "empty mr");
		printf("registered 8 MiB of VRAM through %s in %.1f us (lkey 0x%x rkey 0x%x)\n",
		       kvl_gpumem_method_name(mr.method), mr.ns / 1e3, mr.lkey, mr.rkey);
		kvl_gpumem_dereg(&mr);
	} else {
		EXPECT(strstr(err, "dma-buf: ") && strstr(err, "peer memory: "),
		       "error does not give each method's cause: %s", err);
		printf("registration refused, with causes:\n  %s\n", err);
	}
	kvl_gpumem_close_pd(pd);
	cudaFree(g);
	cudaFreeHost(h);
	printf("PASS: gpumem\n");
	return 0;
}
