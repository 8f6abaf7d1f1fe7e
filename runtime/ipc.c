/* SPDX-License-Identifier: BSD-3-Clause */
/* Same-host peers: the host's identity, GPU segments exported as CUDA IPC handles, ipc conns. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <openssl/evp.h>

#include "ipc.h"
#include "kvl_build_config.h"
#include "runtime.h"
#include "segments.h"
#include "staging.h"

#if KVL_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "cudrv.h"
#endif
#if KVL_HAVE_CUDMA
#include "xport_cudma.h"
#endif

/* The first line of @path (at most @cap - 1 bytes, newline cut), or "" with -errno. */
static int read_line(const char *path, char *out, size_t cap)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	ssize_t n;

	out[0] = '\0';
	if (fd < 0)
		return -errno;
	n = read(fd, out, cap - 1);
	close(fd);
	if (n < 0)
		return -EIO;
	out[n] = '\0';
	out[strcspn(out, "\n")] = '\0';
	return n > 0 ? 0 : -ENODATA;
}

int kvl_host_id(uint8_t out[KVL_HOST_ID_LEN], char *err, size_t errlen)
{
	static const char label[] = "kvlane host id v1";
	char mid[128] = "", boot[128] = "";
	const char *test = getenv("KVLANE_TEST_HOST_ID");
	EVP_MD_CTX *h;
	unsigned len = 0;
	int rc_m = 0, rc_b;

	memset(out, 0, KVL_HOST_ID_LEN);
	if (test != NULL && test[0] != '\0')
		snprintf(mid, sizeof(mid), "test:%s", test);
	else if ((rc_m = read_line("/etc/machine-id", mid, sizeof(mid))) < 0)
		rc_m = read_line("/var/lib/dbus/machine-id", mid, sizeof(mid));
	rc_b = read_line("/proc/sys/kernel/random/boot_id", boot, sizeof(boot));
	if (rc_m < 0 && rc_b < 0) {
		snprintf(err, errlen,
			 "no host identity: neither /etc/machine-id nor the kernel's boot_id is "
			 "readable (%s): every peer counts as another host",
			 strerror(-rc_m));
		return rc_m;
	}
	h = EVP_MD_CTX_new();
	if (h == NULL || EVP_DigestInit_ex(h, EVP_sha256(), NULL) != 1 ||
	    EVP_DigestUpdate(h, label, sizeof(label)) != 1 ||
	    EVP_DigestUpdate(h, mid, strlen(mid) + 1) != 1 ||
	    EVP_DigestUpdate(h, boot, strlen(boot) + 1) != 1 ||
	    EVP_DigestFinal_ex(h, out, &len) != 1 || len != KVL_HOST_ID_LEN) {
		EVP_MD_CTX_free(h);
		memset(out, 0, KVL_HOST_ID_LEN);
		snprintf(err, errlen, "no host identity: SHA-256 failed");
		return -EIO;
	}
	EVP_MD_CTX_free(h);
	return 0;
}

#if KVL_HAVE_CUDA

struct export_walk {
	const struct kvl_cudrv *d;
	uint32_t gen;
	struct kvl_ctrl_ipc_seg *out;
	unsigned max, n;
	char *why;
	size_t whylen;
};

static void export_one(void *arg, const struct kvl_local_seg *s)
{
	struct export_walk *w = arg;
	struct kvl_ctrl_ipc_seg *g;
	CUdeviceptr base = 0, p = (CUdeviceptr)(uintptr_t)s->base;
	CUipcMemHandle h;
	CUdevice dev;
	CUuuid uu;
	size_t size = 0;
	CUresult r;

	if (!s->live || s->mem.kind != KVL_MEM_GPU || !(s->desc.flags & KVL_SEG_REMOTE_READ) ||
	    w->n == w->max)
		return;
	if (cudaSetDevice(s->mem.device) != cudaSuccess) {
		cudaGetLastError();
		return;
	}
	r = w->d->mem_get_address_range(&base, &size, p);
	if (r == CUDA_SUCCESS &&
	    (p < base || p - base > size || s->desc.length > size - (p - base)))
		r = CUDA_ERROR_INVALID_VALUE; /* the segment is not inside one allocation */
	if (r == CUDA_SUCCESS)
		r = w->d->ipc_get_mem_handle(&h, base);
	if (r == CUDA_SUCCESS)
		r = w->d->device_get(&dev, s->mem.device);
	if (r == CUDA_SUCCESS)
		r = w->d->device_get_uuid(&uu, dev);
	if (r != CUDA_SUCCESS) {
		/* one the peer reads over its other transport; said once per export */
		if (w->why[0] == '\0')
			snprintf(w->why, w->whylen, "segment %u (%s) not exported: %s", s->desc.id,
				 s->desc.name, kvl_cudrv_strerror(r));
		return;
	}
	g = &w->out[w->n++];
	memset(g, 0, sizeof(*g));
	g->seg_id = s->desc.id;
	g->seg_gen = w->gen;
	_Static_assert(sizeof(h.reserved) == KVL_IPC_HANDLE_LEN, "CUipcMemHandle is 64 bytes");
	_Static_assert(sizeof(uu.bytes) == KVL_GPU_UUID_LEN, "CUuuid is 16 bytes");
	memcpy(g->handle, h.reserved, KVL_IPC_HANDLE_LEN);
	memcpy(g->gpu_uuid, uu.bytes, KVL_GPU_UUID_LEN);
	g->offset = p - base;
	g->length = s->desc.length;
}

static void count_gpu(void *arg, const struct kvl_local_seg *s)
{
	*(unsigned *)arg += s->live && s->mem.kind == KVL_MEM_GPU;
}

int kvl_ipc_export(struct kvl_runtime *rt, uint32_t gen, struct kvl_ctrl_ipc_seg *out, unsigned max,
		   char *why, size_t whylen)
{
	char e[160];
	const struct kvl_cudrv *d;
	struct export_walk w = { .gen = gen, .out = out, .max = max, .why = why, .whylen = whylen };
	unsigned n_gpu = 0;
	int prev = -1;

	why[0] = '\0';
	kvl_segs_visit(&rt->segs, count_gpu, &n_gpu);
	if (n_gpu == 0)
		return 0; /* nothing to export: CUDA is not touched */
	d = w.d = kvl_cudrv_get(e, sizeof(e));
	if (d == NULL || kvl_cudrv_ipc(d) != NULL) {
		if (d == NULL)
			snprintf(why, whylen, "GPU segments not exported: %s", e);
		else
			snprintf(why, whylen, "GPU segments not exported: the driver lacks %s",
				 kvl_cudrv_ipc(d));
		return 0;
	}
	if (cudaGetDevice(&prev) != cudaSuccess)
		prev = -1;
	kvl_segs_visit(&rt->segs, export_one, &w);
	if (prev >= 0)
		cudaSetDevice(prev);
	cudaGetLastError();
	return (int)w.n;
}

/* The CUDA ordinal with @uuid, or -1. */
static int device_of_uuid(const struct kvl_cudrv *d, const uint8_t uuid[KVL_GPU_UUID_LEN])
{
	int n = 0;

	if (d->device_get_count(&n) != CUDA_SUCCESS)
		return -1;
	for (int i = 0; i < n; i++) {
		CUdevice dev;
		CUuuid uu;

		if (d->device_get(&dev, i) == CUDA_SUCCESS &&
		    d->device_get_uuid(&uu, dev) == CUDA_SUCCESS &&
		    memcmp(uu.bytes, uuid, KVL_GPU_UUID_LEN) == 0)
			return i;
	}
	return -1;
}

int kvl_ipc_access(struct kvl_runtime *rt, unsigned nic, const uint8_t uuid[KVL_GPU_UUID_LEN],
		   char *why, size_t whylen)
{
	char e[160];
	const struct kvl_cudrv *d = kvl_cudrv_get(e, sizeof(e));
	int local, peer, can = 0;
	CUdevice a, b;

	if (rt->staging_place != KVL_STAGING_GPU || rt->nic[nic].staging == NULL) {
		snprintf(why, whylen,
			 "no VRAM staging here ([sched] staging = gpu reads over ipc)");
		return -2;
	}
	if (d == NULL) {
		snprintf(why, whylen, "%s", e);
		return -2;
	}
	if (kvl_cudrv_ipc(d) != NULL) {
		snprintf(why, whylen, "the CUDA driver lacks %s", kvl_cudrv_ipc(d));
		return -2;
	}
	local = kvl_staging_gpu_of(rt, nic);
	peer = device_of_uuid(d, uuid);
	if (peer < 0) {
		snprintf(why, whylen, "the peer's GPU is not a device here (UUID unknown)");
		return -1;
	}
	if (peer == local)
		return 1;
	if (d->device_get(&a, local) != CUDA_SUCCESS || d->device_get(&b, peer) != CUDA_SUCCESS ||
	    d->device_can_access_peer(&can, a, b) != CUDA_SUCCESS)
		can = 0;
	if (!can)
		snprintf(why, whylen, "no peer access from GPU %d to GPU %d", local, peer);
	return can ? 1 : 0;
}

#if KVL_HAVE_CUDMA
/* The driver and engine of one connection: handles opened and closed on the calling thread's
 * context of @device (the NIC lcore's, where its copies run); the copy engine, and the local
 * segment table its destinations are looked up in the first time one is seen. */
struct ipc_ctx {
	const struct kvl_cudrv *d;
	int device;
	struct kvl_cudma_conn *e;
	const struct kvl_seg_table *tab; /* NULL: only what was added at creation */
};

static int drv_open(void *arg, const uint8_t handle[64], uint64_t *dptr, char *err, size_t errlen)
{
	struct ipc_ctx *v = arg;
	CUipcMemHandle h;
	CUdeviceptr p = 0;
	CUresult r;

	if (cudaSetDevice(v->device) != cudaSuccess) {
		snprintf(err, errlen, "cannot use CUDA device %d", v->device);
		cudaGetLastError();
		return -ENODEV;
	}
	memcpy(h.reserved, handle, sizeof(h.reserved));
	r = v->d->ipc_open_mem_handle(&p, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
	if (r != CUDA_SUCCESS) {
		snprintf(err, errlen, "cuIpcOpenMemHandle: %s", kvl_cudrv_strerror(r));
		return -EINVAL;
	}
	*dptr = (uint64_t)p;
	return 0;
}

static void drv_close(void *arg, uint64_t dptr)
{
	struct ipc_ctx *v = arg;

	cudaSetDevice(v->device);
	v->d->ipc_close_mem_handle((CUdeviceptr)dptr);
}

static int eng_add(void *c, uint32_t eid, uint64_t base, uint64_t len, char *err, size_t errlen)
{
	struct ipc_ctx *v = c;

	return kvl_cudma_add_remote_gpu(v->e, eid, (void *)(uintptr_t)base, len,
					KVL_SEG_REMOTE_READ, err, errlen);
}

static void eng_del(void *c, uint32_t eid)
{
	struct ipc_ctx *v = c;

	kvl_cudma_del_remote(v->e, eid);
}

/* A destination the engine does not know yet: a GPU segment of this device the runtime
 * registered since (an engine's cache, KVL_REQ_ENGINE_DEST), added once. The request path
 * checked it against the same table (req_dest.c); the engine checks it again. */
static void learn_local(struct ipc_ctx *v, const struct kvl_wr *w)
{
	uintptr_t a = (uintptr_t)w->local;
	char e[160];

	for (unsigned i = 0; v->tab != NULL && i < KVL_MAX_SEGS; i++) {
		const struct kvl_seg *s = kvl_seg_lookup(v->tab, i + 1);

		if (s != NULL && (s->flags & KVL_SEG_GPU) && a >= (uintptr_t)s->base &&
		    a - (uintptr_t)s->base < s->len) {
			if (kvl_cudma_add_local(v->e, s->base, s->len, e, sizeof(e)) == 0)
				return;
		}
	}
}

static unsigned eng_post(void *c, const struct kvl_wr *wr, unsigned n, int *err)
{
	struct ipc_ctx *v = c;
	unsigned k = 0, took;

	while (k < n) {
		took = kvl_xport_cudma.post(v->e, wr + k, n - k, err);
		k += took;
		if (k == n || *err != 0)
			break;
	}
	return k;
}

/* cudma completes an unknown destination KVL_ERR_LOCAL; the lookup happens before: every
 * request's destination is checked here against what the engine knows (a cheap range test
 * of a few entries), and learned once when it is new. */
static unsigned eng_post_learn(void *c, const struct kvl_wr *wr, unsigned n, int *err)
{
	struct ipc_ctx *v = c;

	for (unsigned i = 0; i < n; i++)
		if (!kvl_cudma_has_local(v->e, wr[i].local, wr[i].length))
			learn_local(v, &wr[i]);
	return eng_post(c, wr, n, err);
}

static unsigned eng_progress(void *c)
{
	return kvl_xport_cudma.progress(((struct ipc_ctx *)c)->e);
}

static unsigned eng_reap(void *c, struct kvl_wc *wc, unsigned max)
{
	return kvl_xport_cudma.reap(((struct ipc_ctx *)c)->e, wc, max);
}

static void eng_fail_all(void *c, int status)
{
	kvl_xport_cudma.fail_all(((struct ipc_ctx *)c)->e, status);
}

static int eng_broken(const void *c)
{
	return kvl_xport_cudma.broken(((const struct ipc_ctx *)c)->e);
}

static unsigned eng_outstanding(const void *c)
{
	return kvl_xport_cudma.outstanding(((const struct ipc_ctx *)c)->e);
}

static void eng_stats(const void *c, struct kvl_xport_stats *out)
{
	kvl_xport_cudma.stats(((const struct ipc_ctx *)c)->e, out);
}

static void eng_free(void *c)
{
	struct ipc_ctx *v = c;

	kvl_cudma_free(v->e); /* waits for its stream: nothing reads a mapping after this */
	v->e = NULL;	      /* the block itself is the connection's drv_owned */
}

/* The cudma transport behind ipc, with destinations learned from the segment table. */
static const struct kvl_xport_ops ipc_engine = {
	.name = "ipc-engine",
	.post = eng_post_learn,
	.progress = eng_progress,
	.reap = eng_reap,
	.fail_all = eng_fail_all,
	.broken = eng_broken,
	.outstanding = eng_outstanding,
	.stats = eng_stats,
	.free = eng_free,
};

int kvl_ipc_conn_cuda(int device, void *staging, uint64_t staging_len,
		      const struct kvl_seg_table *tab, const struct kvl_ipc_rseg *segs, unsigned n,
		      const struct kvl_cudma_opts *eo, struct kvl_xconn *out, char *err,
		      size_t errlen)
{
	char e[160];
	const struct kvl_cudrv *d = kvl_cudrv_get(e, sizeof(e));
	/* Without @eo: the gather kernel on 264 thread blocks for every copy under 1 MiB, none of
	 * them on the copy engine. On the H200 (docs/ipc.md, 2026-12-01, two processes on one GPU,
	 * scattered blocks) that moved 64 KiB blocks at 432.9 GB/s and 16 KiB at 112.3, against
	 * 13.4 and 100.6 with cudma's defaults (8 blocks, 32 KiB and more on the copy engine,
	 * which moved device-to-device copies of 64 KiB at 13.6 GB/s). */
	struct kvl_cudma_opts co = { .device = device,
				     .depth = 8192,
				     .small = KVL_CUDMA_GATHER,
				     .gather_ctas = 264,
				     .ce_min = UINT64_MAX };
	struct kvl_ipc_conn *c;
	struct ipc_ctx *v;
	int prev = -1, rc;

	if (eo != NULL) {
		co = *eo;
		co.device = device;
		co.depth = 8192; /* the ipc connection's engine_depth */
	}
	if (d == NULL || kvl_cudrv_ipc(d) != NULL) {
		snprintf(err, errlen, "%s%s", d == NULL ? e : "the CUDA driver lacks ",
			 d == NULL ? "" : kvl_cudrv_ipc(d));
		return -ENODEV;
	}
	v = calloc(1, sizeof(*v));
	if (v == NULL) {
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	*v = (struct ipc_ctx){ .d = d, .device = device, .tab = tab };
	/* the caller's thread keeps its current device (kvl_cudma_new sets the engine's) */
	if (cudaGetDevice(&prev) != cudaSuccess)
		prev = -1;
	v->e = kvl_cudma_new(&co, e, sizeof(e));
	rc = v->e == NULL ? -errno : 0;
	if (rc == 0 && staging != NULL)
		rc = kvl_cudma_add_local(v->e, staging, staging_len, e, sizeof(e));
	if (prev >= 0 && prev != device)
		cudaSetDevice(prev);
	if (rc < 0) {
		kvl_cudma_free(v->e);
		free(v);
		snprintf(err, errlen, "ipc: %s", e);
		return rc;
	}
	c = kvl_ipc_new(&(struct kvl_ipc_opts){
		.drv = { drv_open, drv_close, v },
		.engine = { .x = { &ipc_engine, v }, .add_src = eng_add, .del_src = eng_del },
		.depth = 8192,
		.engine_depth = 8192,
		.drv_owned = v });
	if (c == NULL) {
		kvl_cudma_free(v->e);
		free(v);
		snprintf(err, errlen, "ipc: %s", strerror(errno));
		return -ENOMEM;
	}
	kvl_ipc_set_segments(c, segs, n); /* opened on the lcore, at its first pass */
	*out = (struct kvl_xconn){ &kvl_xport_ipc, c };
	return 0;
}

int kvl_ipc_conn_open(struct kvl_runtime *rt, unsigned nic, const struct kvl_ipc_rseg *segs,
		      unsigned n, struct kvl_xconn *out, char *err, size_t errlen)
{
	uint64_t slot = (uint64_t)rt->cfg.sched.slot_kb << 10;
	uint64_t slen = slot ? ((uint64_t)rt->cfg.sched.staging_mb << 20) / slot * slot : 0;

	return kvl_ipc_conn_cuda(kvl_staging_gpu_of(rt, nic), rt->nic[nic].staging, slen,
				 &rt->segs.tab, segs, n, NULL, out, err, errlen);
}
#else
int kvl_ipc_conn_open(struct kvl_runtime *rt, unsigned nic, const struct kvl_ipc_rseg *segs,
		      unsigned n, struct kvl_xconn *out, char *err, size_t errlen)
{
	(void)rt, (void)nic, (void)segs, (void)n, (void)out;
	snprintf(err, errlen, "built without nvcc: no copy engine for ipc");
	return -ENOTSUP;
}
#endif /* KVL_HAVE_CUDMA */

#else /* !KVL_HAVE_CUDA */

int kvl_ipc_export(struct kvl_runtime *rt, uint32_t gen, struct kvl_ctrl_ipc_seg *out, unsigned max,
		   char *why, size_t whylen)
{
	(void)rt, (void)gen, (void)out, (void)max;
	snprintf(why, whylen, "built without CUDA");
	return 0;
}

int kvl_ipc_access(struct kvl_runtime *rt, unsigned nic, const uint8_t uuid[KVL_GPU_UUID_LEN],
		   char *why, size_t whylen)
{
	(void)rt, (void)nic, (void)uuid;
	snprintf(why, whylen, "built without CUDA");
	return -2;
}

int kvl_ipc_conn_open(struct kvl_runtime *rt, unsigned nic, const struct kvl_ipc_rseg *segs,
		      unsigned n, struct kvl_xconn *out, char *err, size_t errlen)
{
	(void)rt, (void)nic, (void)segs, (void)n, (void)out;
	snprintf(err, errlen, "built without CUDA");
	return -ENOTSUP;
}

#endif /* KVL_HAVE_CUDA */
