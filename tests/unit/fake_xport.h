/* SPDX-License-Identifier: BSD-3-Clause */
/* Unit-test doubles for the NIC lcore: heap rte_rings without EAL, and a scripted transport. */
#ifndef KVL_TEST_FAKE_XPORT_H
#define KVL_TEST_FAKE_XPORT_H

/*
 * Include this, then the lcore .c under test: its rte_ring_create_elem/rte_ring_free and
 * rte_zmalloc/rte_zmalloc_socket/rte_free calls become the heap versions below (EAL is never
 * initialised), and rte_get_tsc_hz() a fixed 1 GHz.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <rte_ring.h>
#include <rte_ring_elem.h>

#include "xport.h"

static inline struct rte_ring *fake_ring_create(const char *name, unsigned esize, unsigned count,
						int socket, unsigned flags)
{
	ssize_t sz = rte_ring_get_memsize_elem(
		esize, (flags & RING_F_EXACT_SZ) ? rte_align32pow2(count + 1) : count);
	struct rte_ring *r;

	(void)socket;
	if (sz < 0)
		return NULL;
	r = aligned_alloc(RTE_CACHE_LINE_SIZE, (size_t)RTE_ALIGN_CEIL(sz, RTE_CACHE_LINE_SIZE));
	if (r == NULL)
		return NULL;
	if (rte_ring_init(r, name, count, flags) != 0) {
		free(r);
		return NULL;
	}
	return r;
}

static inline void *fake_zmalloc(const char *type, size_t size, unsigned align)
{
	void *p = aligned_alloc(align < 64 ? 64 : align, RTE_ALIGN_CEIL(size, 64));

	(void)type;
	if (p)
		memset(p, 0, size);
	return p;
}

#define rte_ring_create_elem(n, e, c, s, f) fake_ring_create(n, e, c, s, f)
#define rte_ring_free(r)		    free(r)
#define rte_zmalloc_socket(t, s, a, so)	    fake_zmalloc(t, s, a)
#define rte_zmalloc(t, s, a)		    fake_zmalloc(t, s, a)
#define rte_free(p)			    free(p)
#define rte_get_tsc_hz()		    1000000000ull

/*
 * A transport whose connection the test scripts: it records what it was given (in order),
 * takes at most @room requests at a time (-EAGAIN beyond), refuses with @refuse when set, and
 * completes what the test tells it to (fake_finish) when reaped.
 */
#define FAKE_MAX 256

struct fake_conn {
	struct kvl_wr got[FAKE_MAX]; /* every request taken, in order */
	unsigned n_got;
	unsigned room;		      /* requests it may hold before -EAGAIN */
	int refuse;		      /* non-zero: post returns this (a negative errno) */
	int broken;		      /* what broken() says */
	struct kvl_wc done[FAKE_MAX]; /* completions waiting to be reaped */
	unsigned n_done;
	unsigned outstanding;
	bool freed;
};

/* One request, as a connection decides about it: 0, or the negative errno it refuses with. */
static int fake_take(struct fake_conn *c, const struct kvl_wr *wr)
{
	if (c->refuse)
		return c->refuse;
	if (c->outstanding >= c->room)
		return -EAGAIN;
	if (c->n_got < FAKE_MAX)
		c->got[c->n_got++] = *wr;
	c->outstanding++;
	return 0;
}

/* Complete the @k-th request taken with @status (bytes: its length on KVL_OK). */
static void fake_finish(struct fake_conn *c, unsigned k, int status)
{
	c->done[c->n_done++] = (struct kvl_wc){ .wr_id = c->got[k].wr_id,
						.bytes = status == KVL_OK ? c->got[k].length : 0,
						.status = status };
}

static unsigned fake_progress(void *p)
{
	(void)p;
	return 0;
}

static unsigned fake_reap(void *p, struct kvl_wc *wc, unsigned max)
{
	struct fake_conn *c = p;
	unsigned n = c->n_done < max ? c->n_done : max;

	memcpy(wc, c->done, n * sizeof(*wc));
	memmove(c->done, c->done + n, (c->n_done - n) * sizeof(*wc));
	c->n_done -= n;
	c->outstanding -= n;
	return n;
}

static void fake_fail_all(void *p, int status)
{
	struct fake_conn *c = p;

	c->broken = status;
}

static int fake_broken(const void *p)
{
	return ((const struct fake_conn *)p)->broken;
}

static unsigned fake_outstanding(const void *p)
{
	return ((const struct fake_conn *)p)->outstanding;
}

static void fake_stats(const void *p, struct kvl_xport_stats *out)
{
	memset(out, 0, sizeof(*out));
	out->posted_read = ((const struct fake_conn *)p)->n_got;
}

static void fake_free(void *p)
{
	((struct fake_conn *)p)->freed = true;
}

/* its burst the way tcp's and cudma's are made from their one-request post */
KVL_XPORT_BURST_OF(fake_take, struct fake_conn)

static const struct kvl_xport_ops fake_ops = {
	.name = "fake",
	.post = fake_take_burst,
	.progress = fake_progress,
	.reap = fake_reap,
	.fail_all = fake_fail_all,
	.broken = fake_broken,
	.outstanding = fake_outstanding,
	.stats = fake_stats,
	.free = fake_free,
};

#endif /* KVL_TEST_FAKE_XPORT_H */
