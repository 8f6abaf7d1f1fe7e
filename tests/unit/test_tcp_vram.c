/* SPDX-License-Identifier: BSD-3-Clause */
/* runtime/tcp_vram.c without a GPU: bounce buffers carved from the pool, a copier faked. */
/*
 * What the runtime's glue does between the control thread's hand-over and the tcp transport:
 * nothing where tcp cannot reach VRAM (the connection keeps refusing it), else 8 MiB of the
 * [memory] pool and a copier per connection; a pool with no 8 MiB left or a copier that
 * cannot be made is an error naming the cause, and leaks no chunk; a READ into "VRAM" (a
 * PROT_NONE mapping: a CPU touch would fault) lands through the glue; closing the connection
 * gives the chunks back and frees the copier. The copier here (kvl_h2d_*) copies into a
 * shadow of that "VRAM" at once.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>

#include "kvl_test.h"
#include "tcp_vram.c"

int kvl_logtype_runtime;

/* ---- stubs: what tcp_vram.c calls outside itself ---- */

static bool vram_ok;
static int h2d_news, h2d_frees, h2d_new_fails;
static uint8_t *vram, *shadow;

bool kvl_tcp_vram_ok(const struct kvl_runtime *r, char *why, size_t len)
{
	(void)r;
	if (why != NULL && len > 0)
		snprintf(why, len, "%s", vram_ok ? "" : "no GPU is open ([gpu] enable = false)");
	return vram_ok;
}

int kvl_staging_gpu_of(const struct kvl_runtime *r, unsigned nic)
{
	(void)r, (void)nic;
	return 0;
}

struct kvl_h2d {
	uint64_t started;
};

struct kvl_h2d *kvl_h2d_new(int device, unsigned depth, char *err, size_t errlen)
{
	CHECK_INT(device, 0);
	CHECK_INT(depth, KVL_TCP_VRAM_BUFS); /* an event per buffer */
	if (h2d_new_fails) {
		snprintf(err, errlen, "h2d: CUDA device 0: cuStreamCreate: out of memory");
		errno = ENODEV;
		return NULL;
	}
	h2d_news++;
	return calloc(1, sizeof(struct kvl_h2d));
}

int kvl_h2d_start(struct kvl_h2d *h, uint64_t dst, const void *src, size_t len)
{
	CHECK(dst >= (uintptr_t)vram && dst + len <= (uintptr_t)vram + (1u << 20));
	CHECK(len <= KVL_TCP_VRAM_BUF);
	memcpy(shadow + (dst - (uintptr_t)vram), src, len);
	h->started++;
	return 0;
}

int64_t kvl_h2d_completed(struct kvl_h2d *h)
{
	return (int64_t)h->started;
}

const char *kvl_h2d_error(const struct kvl_h2d *h)
{
	(void)h;
	return "";
}

void kvl_h2d_free(struct kvl_h2d *h)
{
	h2d_frees++;
	free(h);
}

/* ---- the test ---- */

#define POOL (24u << 20) /* 12 chunks of 2 MiB: room for three connections' bounce */

static struct kvl_runtime rt;
static struct kvl_seg_table ta, tb;

static void pair(struct kvl_tcp_conn **a, struct kvl_tcp_conn **b)
{
	int fds[2];

	CHECK_INT(socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
	*a = kvl_tcp_conn_new(fds[0], &ta, 16);
	*b = kvl_tcp_conn_new(fds[1], &tb, 16);
	CHECK(*a != NULL && *b != NULL);
}

static struct kvl_wr read_into_vram(uint32_t len)
{
	struct kvl_wr w;

	memset(&w, 0, sizeof(w));
	w.wr_id = 42;
	w.op = KVL_OP_READ;
	w.local = vram + 4096;
	w.length = len;
	w.remote_seg = 1;
	w.remote_off = 512;
	return w;
}

int main(void)
{
	static uint8_t pool_mem[POOL] __attribute__((aligned(4096)));
	uint8_t *served = malloc(1u << 20);
	struct kvl_tcp_conn *a, *b, *c2, *c3, *c4, *p2, *p3, *p4;
	struct kvl_wr w;
	struct kvl_wc wc;
	char err[512];
	unsigned got = 0;

	vram = mmap(NULL, 1u << 20, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	shadow = calloc(1, 1u << 20);
	CHECK(vram != MAP_FAILED && shadow != NULL && served != NULL);
	for (uint32_t i = 0; i < (1u << 20); i++)
		served[i] = (uint8_t)(i * 7 + (i >> 11));
	tb.seg[0] = (struct kvl_seg){
		.base = served, .len = 1u << 20, .id = 1, .flags = KVL_SEG_REMOTE_READ
	};
	tb.live[0] = true;
	ta.seg[0] =
		(struct kvl_seg){ .base = vram, .len = 1u << 20, .id = 1, .flags = KVL_SEG_GPU };
	ta.live[0] = true;
	rt.cfg.n_nics = 1;
	snprintf(rt.cfg.nics[0].label, sizeof(rt.cfg.nics[0].label), "n0");
	CHECK_INT(kvl_pool_init_at(&rt.segs.pool, pool_mem, POOL, 2u << 20), 0);

	/* where tcp cannot reach VRAM: nothing attached, nothing carved, VRAM still refused */
	pair(&a, &b);
	vram_ok = false;
	CHECK_INT(kvl_tcp_vram_attach(&rt, 0, a, err, sizeof(err)), 0);
	CHECK_INT(kvl_pool_chunks_used(&rt.segs.pool), 0);
	w = read_into_vram(4096);
	CHECK_INT(kvl_tcp_post(a, &w), -EXDEV);
	kvl_tcp_conn_free(a);
	kvl_tcp_conn_free(b);

	vram_ok = true;
	if (!KVL_HAVE_CUDA) { /* no CUDA in the build: the glue is a no-op, said by vram_ok */
		pair(&a, &b);
		CHECK_INT(kvl_tcp_vram_attach(&rt, 0, a, err, sizeof(err)), 0);
		CHECK_INT(kvl_pool_chunks_used(&rt.segs.pool), 0);
		kvl_tcp_conn_free(a);
		kvl_tcp_conn_free(b);
		return kvl_test_done("tcp_vram");
	}
	/* a copier that cannot be made: -ENODEV with its cause, no chunk kept */
	pair(&a, &b);
	h2d_new_fails = 1;
	CHECK_INT(kvl_tcp_vram_attach(&rt, 0, a, err, sizeof(err)), -ENODEV);
	CHECK_HAS(err, "nic.n0: tcp into VRAM: h2d: CUDA device 0: cuStreamCreate");
	CHECK_INT(kvl_pool_chunks_used(&rt.segs.pool), 0);
	h2d_new_fails = 0;

	/* 8 MiB of the pool, 4 chunks, and a READ into VRAM lands through it */
	CHECK_INT(kvl_tcp_vram_attach(&rt, 0, a, err, sizeof(err)), 0);
	CHECK_INT(kvl_pool_chunks_used(&rt.segs.pool), 4);
	CHECK_INT(h2d_news, 1);
	w = read_into_vram(600 << 10); /* two buffers' worth */
	CHECK_INT(kvl_tcp_post(a, &w), 0);
	for (int spin = 0; spin < 100000 && got == 0; spin++) {
		kvl_tcp_progress(a);
		kvl_tcp_progress(b);
		got = kvl_tcp_reap(a, &wc, 1);
	}
	CHECK_INT(got, 1);
	CHECK_INT(wc.status, KVL_OK);
	CHECK_INT(wc.bytes, 600 << 10);
	CHECK(memcmp(shadow + 4096, served + 512, 600 << 10) == 0);
	CHECK_INT(kvl_xport_stats(a)->gpu_copies, 2);
	CHECK_INT(kvl_xport_stats(a)->gpu_bounce_bytes, 600 << 10);

	/* two more connections fit; the fourth finds no 8 MiB and says so */
	pair(&c2, &p2);
	pair(&c3, &p3);
	pair(&c4, &p4);
	CHECK_INT(kvl_tcp_vram_attach(&rt, 0, c2, err, sizeof(err)), 0);
	CHECK_INT(kvl_tcp_vram_attach(&rt, 0, c3, err, sizeof(err)), 0);
	CHECK_INT(kvl_pool_chunks_used(&rt.segs.pool), 12);
	CHECK_INT(kvl_tcp_vram_attach(&rt, 0, c4, err, sizeof(err)), -ENOMEM);
	CHECK_HAS(err, "nic.n0: tcp into VRAM: the [memory] pool has no 8 MiB left for a data "
		       "connection's bounce buffers (12 of 12 chunks used, largest free run 0 "
		       "chunks): raise memory.pool_size_mb");
	CHECK_INT(kvl_pool_chunks_used(&rt.segs.pool), 12);
	w = read_into_vram(4096);
	CHECK_INT(kvl_tcp_post(c4, &w), -EXDEV); /* it took no bounce */

	/* closing gives the chunks back and frees the copier */
	kvl_tcp_conn_free(a);
	CHECK_INT(h2d_frees, 1);
	CHECK_INT(kvl_pool_chunks_used(&rt.segs.pool), 8);
	kvl_tcp_conn_free(c2);
	kvl_tcp_conn_free(c3);
	CHECK_INT(kvl_pool_chunks_used(&rt.segs.pool), 0);
	CHECK_INT(h2d_frees, 3);
	kvl_tcp_conn_free(c4);
	CHECK_INT(h2d_frees, 3);
	kvl_tcp_conn_free(b);
	kvl_tcp_conn_free(p2);
	kvl_tcp_conn_free(p3);
	kvl_tcp_conn_free(p4);
	munmap(vram, 1u << 20);
	free(shadow);
	free(served);
	return kvl_test_done("tcp_vram");
}
