/* SPDX-License-Identifier: BSD-3-Clause */
/* The null transport: every post completes at once and moves nothing (runtime cost only). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "xport.h"

/*
 * What is left once the wire is gone: a post costs a slot in a completion ring, a reap hands
 * the completions back in post order. Used to measure the scheduler and lcore path alone;
 * never chosen by accident ([sched] null_transport needs null_transport_ack).
 */
struct kvl_null_conn {
	struct kvl_wc *wc;
	uint32_t mask;
	uint32_t head, tail; /* [tail, head) completed, not reaped */
	struct kvl_xport_stats st;
};

struct kvl_null_conn *kvl_null_conn_new(unsigned depth)
{
	struct kvl_null_conn *c = calloc(1, sizeof(*c));
	uint32_t n = 1;

	if (c == NULL || depth == 0 || depth > (1u << 20)) {
		free(c);
		errno = c ? EINVAL : ENOMEM;
		return NULL;
	}
	while (n < depth)
		n <<= 1;
	c->wc = calloc(n, sizeof(*c->wc));
	if (c->wc == NULL) {
		free(c);
		errno = ENOMEM;
		return NULL;
	}
	c->mask = n - 1;
	return c;
}

static unsigned null_post(void *p, const struct kvl_wr *wr, unsigned n, int *err)
{
	struct kvl_null_conn *c = p;
	uint32_t room = c->mask + 1 - (c->head - c->tail);
	unsigned k = n < room ? n : room;

	for (unsigned i = 0; i < k; i++) {
		c->wc[c->head++ & c->mask] = (struct kvl_wc){ .wr_id = wr[i].wr_id,
							      .bytes = wr[i].length,
							      .status = KVL_OK };
		if (wr[i].op == KVL_OP_READ)
			c->st.posted_read++;
		else
			c->st.posted_write++;
	}
	/* every one completes at once: done as soon as posted */
	c->st.done_read = c->st.posted_read;
	c->st.done_write = c->st.posted_write;
	if (k < n)
		*err = -EAGAIN;
	return k;
}

static unsigned null_progress(void *p)
{
	(void)p;
	return 0;
}

static unsigned null_reap(void *p, struct kvl_wc *wc, unsigned max)
{
	struct kvl_null_conn *c = p;
	unsigned n = 0;

	while (n < max && c->tail != c->head)
		wc[n++] = c->wc[c->tail++ & c->mask];
	return n;
}

static void null_fail_all(void *p, int status)
{
	struct kvl_null_conn *c = p;

	for (uint32_t i = c->tail; i != c->head; i++)
		c->wc[i & c->mask].status = status;
}

static int null_broken(const void *p)
{
	(void)p;
	return 0;
}

static unsigned null_outstanding(const void *p)
{
	const struct kvl_null_conn *c = p;

	return c->head - c->tail;
}

static void null_stats(const void *p, struct kvl_xport_stats *out)
{
	*out = ((const struct kvl_null_conn *)p)->st;
}

static void null_free(void *p)
{
	struct kvl_null_conn *c = p;

	if (c)
		free(c->wc);
	free(c);
}

const struct kvl_xport_ops kvl_xport_null = {
	.name = "null",
	.post = null_post,
	.progress = null_progress,
	.reap = null_reap,
	.fail_all = null_fail_all,
	.broken = null_broken,
	.outstanding = null_outstanding,
	.stats = null_stats,
	.free = null_free,
};
