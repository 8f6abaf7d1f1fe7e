/* SPDX-License-Identifier: BSD-3-Clause */
/* tcp's road into VRAM: bounce buffers carved from the [memory] pool, copies by lcores/gpu/h2d.c.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "kvl_build_config.h"
#include "log.h"
#include "pool.h"
#include "runtime.h"
#include "segments.h"
#include "staging.h"
#include "tcp_data.h"
#include "tcp_vram.h"

#if KVL_HAVE_CUDA
#include "h2d.h"

/* One connection's bounce: its memory in the pool and its copier. */
struct bounce {
	struct kvl_runtime *rt;
	struct kvl_h2d *h;
	void *mem;
	unsigned nic;
	bool logged;
};

static int b_start(void *arg, uintptr_t dst, const void *src, uint32_t len)
{
	struct bounce *b = arg;

	return kvl_h2d_start(b->h, dst, src, len);
}

static int64_t b_completed(void *arg)
{
	struct bounce *b = arg;
	int64_t n = kvl_h2d_completed(b->h);

	/* once: the connection fails with gpu-memory, this says what CUDA said */
	if (n < 0 && !b->logged) {
		b->logged = true;
		KVL_LOG(ERR, "nic.%s: tcp into VRAM: %s", b->rt->cfg.nics[b->nic].label,
			kvl_h2d_error(b->h));
	}
	return n;
}

static void b_free(void *arg)
{
	struct bounce *b = arg;
	struct kvl_local_segs *s = &b->rt->segs;

	kvl_h2d_free(b->h); /* waits for its stream: no copy reads the buffers after this */
	kvl_pool_free(&s->pool, b->mem); /* the pool locks its own allocator */
	free(b);
}

static const struct kvl_tcp_bounce_ops bounce_ops = { b_start, b_completed, b_free };
#endif

int kvl_tcp_vram_attach(struct kvl_runtime *rt, unsigned nic, struct kvl_tcp_conn *conn, char *err,
			size_t errlen)
{
#if KVL_HAVE_CUDA
	const uint64_t len = (uint64_t)KVL_TCP_VRAM_BUF * KVL_TCP_VRAM_BUFS;
	struct kvl_local_segs *s = &rt->segs;
	struct bounce *b;
	char why[256];
	int dev = kvl_staging_gpu_of(rt, nic);
	static bool said; /* the log line, once per process */

	if (!kvl_tcp_vram_ok(rt, NULL, 0))
		return 0; /* READs into VRAM stay refused; kvl_tcp_vram_ok says why where asked */
	b = calloc(1, sizeof(*b));
	if (b == NULL) {
		snprintf(err, errlen, "nic.%s: tcp into VRAM: out of memory",
			 rt->cfg.nics[nic].label);
		return -ENOMEM;
	}
	b->rt = rt;
	b->nic = nic;
	b->mem = kvl_pool_alloc(&s->pool, len, 0);
	if (b->mem == NULL)
		snprintf(err, errlen,
			 "nic.%s: tcp into VRAM: the [memory] pool has no %llu MiB left for a data "
			 "connection's bounce buffers (%u of %u chunks used, largest free run %u "
			 "chunks): raise memory.pool_size_mb",
			 rt->cfg.nics[nic].label, (unsigned long long)(len >> 20),
			 kvl_pool_chunks_used(&s->pool), s->pool.n_chunks,
			 kvl_pool_largest_free(&s->pool));
	if (b->mem == NULL) {
		free(b);
		return -ENOMEM;
	}
	b->h = kvl_h2d_new(dev, KVL_TCP_VRAM_BUFS, why, sizeof(why));
	if (b->h == NULL) {
		snprintf(err, errlen, "nic.%s: tcp into VRAM: %s", rt->cfg.nics[nic].label, why);
		kvl_pool_free(&s->pool, b->mem);
		free(b);
		return -ENODEV;
	}
	if (kvl_tcp_set_bounce(conn, &(struct kvl_tcp_bounce){ .ops = &bounce_ops,
							       .arg = b,
							       .mem = b->mem,
							       .buf_len = KVL_TCP_VRAM_BUF,
							       .n_bufs = KVL_TCP_VRAM_BUFS }) < 0) {
		snprintf(err, errlen, "nic.%s: tcp into VRAM: the connection took no bounce",
			 rt->cfg.nics[nic].label);
		b_free(b);
		return -EINVAL;
	}
	if (!__atomic_exchange_n(&said, true, __ATOMIC_RELAXED))
		KVL_LOG(INFO,
			"nic.%s: tcp READs into VRAM land in %u bounce buffers of %u KiB per data "
			"connection (%llu MiB of the [memory] pool each), copied to GPU %d on the "
			"connection's own stream",
			rt->cfg.nics[nic].label, KVL_TCP_VRAM_BUFS, KVL_TCP_VRAM_BUF >> 10,
			(unsigned long long)(len >> 20), dev);
	return 0;
#else
	(void)rt;
	(void)nic;
	(void)conn;
	(void)err;
	(void)errlen;
	return 0; /* no CUDA: nothing lands in VRAM over tcp, kvl_tcp_vram_ok says so */
#endif
}
