/* SPDX-License-Identifier: BSD-3-Clause */
/* Unit test of the host tier transport: memcpy path, engine path (a scripted engine), refusals. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "kvl_test.h"
#include "xport_tier.h"

#define STAGE  (1u << 20)
#define SEGLEN (1u << 20)

static struct kvl_seg_table tab;
static uint8_t *seg_mem, *gpu_mem, *stage, *cache, *gpu_cache;

static void add_seg(uint32_t id, uint8_t *base, uint64_t len, uint32_t flags)
{
	tab.seg[id - 1] = (struct kvl_seg){ .base = base, .len = len, .id = id, .flags = flags };
	tab.live[id - 1] = true;
}

static struct kvl_wr rd(uint64_t id, uint32_t seg, uint64_t off, uint32_t len, void *local)
{
	return (struct kvl_wr){ .wr_id = id,
				.local = local,
				.remote_off = off,
				.length = len,
				.remote_seg = seg,
				.op = KVL_OP_READ };
}

/* ---- a scripted engine: moves bytes only when the test lets a batch "land" ---- */

struct fake_req {
	struct kvl_wr wr;
	int status;
};

static struct fake_engine {
	struct fake_req q[64];
	unsigned head, tail; /* [head, tail) posted and not reaped */
	unsigned landed;     /* requests [head, landed) have landed */
	bool hold;	     /* progress lands nothing while set */
	unsigned posts, progresses;
	uintptr_t pool_base;
	int fail_next; /* refuse the next post with this errno */
} fe;

static unsigned fe_post(void *c, const struct kvl_wr *wr, unsigned n, int *err)
{
	unsigned k = 0;

	(void)c;
	for (; k < n; k++) {
		if (fe.fail_next) {
			*err = fe.fail_next;
			fe.fail_next = 0;
			break;
		}
		if (fe.tail - fe.head == 64) {
			*err = -EAGAIN;
			break;
		}
		fe.q[fe.tail++ % 64] = (struct fake_req){ .wr = wr[k] };
	}
	fe.posts += k;
	return k;
}

static unsigned fe_progress(void *c)
{
	(void)c;
	fe.progresses++;
	if (fe.hold)
		return 0;
	for (; fe.landed != fe.tail; fe.landed++) {
		const struct kvl_wr *w = &fe.q[fe.landed % 64].wr;

		/* the engine's remote segment is the pool: the offset is from its base */
		memcpy(w->local, (const void *)(fe.pool_base + w->remote_off), w->length);
	}
	return 1;
}

static unsigned fe_reap(void *c, struct kvl_wc *wc, unsigned max)
{
	unsigned n = 0;

	(void)c;
	while (n < max && fe.head != fe.landed) {
		const struct fake_req *q = &fe.q[fe.head++ % 64];

		wc[n++] = (struct kvl_wc){ .wr_id = q->wr.wr_id,
					   .bytes = q->status == KVL_OK ? q->wr.length : 0,
					   .status = q->status };
	}
	return n;
}

static unsigned fe_outstanding(const void *c)
{
	(void)c;
	return fe.tail - fe.head;
}

static void fe_stats(const void *c, struct kvl_xport_stats *out)
{
	(void)c;
	memset(out, 0, sizeof(*out));
	out->qp_posts = fe.progresses;
}

/* As cudma's: what was posted and has not completed completes with @status, moving nothing. */
static void fe_fail_all(void *c, int status)
{
	(void)c;
	for (; fe.landed != fe.tail; fe.landed++)
		fe.q[fe.landed % 64].status = status;
}

static int fe_broken(const void *c)
{
	(void)c;
	return 0;
}

static void fe_free(void *c)
{
	(void)c;
}

static const struct kvl_xport_ops fe_ops = { .name = "fake-engine",
					     .post = fe_post,
					     .progress = fe_progress,
					     .reap = fe_reap,
					     .fail_all = fe_fail_all,
					     .broken = fe_broken,
					     .outstanding = fe_outstanding,
					     .stats = fe_stats,
					     .free = fe_free };

static uint64_t fake_now;

static uint64_t fake_clock(void *arg)
{
	(void)arg;
	return fake_now += 100;
}

/* ---- cases ---- */

/* memcpy on the lcore: bytes land at post, complete in order, refusals with their status. */
static void test_memcpy(void)
{
	struct kvl_tier_opts o = { .segs = &tab,
				   .staging = stage,
				   .staging_len = STAGE,
				   .depth = 16,
				   .clock = fake_clock };
	const struct kvl_xport_ops *ops = &kvl_xport_tier;
	struct kvl_tier_conn *c = kvl_tier_new(&o);
	struct kvl_wr w[8];
	struct kvl_wc wc[16];
	struct kvl_tier_stats st;
	int err = 0;
	unsigned n;

	CHECK(c != NULL);
	memset(stage, 0xee, STAGE);
	w[0] = rd(10, 1, 4096, 65536, stage);
	w[1] = rd(11, 1, 0, 1000, stage + 65536);
	w[2] = rd(12, 9, 0, 64, stage);		    /* no such segment */
	w[3] = rd(13, 1, SEGLEN - 10, 64, stage);   /* past its end */
	w[4] = rd(14, 2, 0, 64, stage);		    /* a GPU segment */
	w[5] = rd(15, 1, 0, 64, stage + STAGE - 8); /* past the staging */
	w[6] = rd(16, 3, 0, 64, stage);		    /* not readable */
	w[7] = rd(17, 1, 0, 64, stage);
	w[7].op = KVL_OP_WRITE; /* the tier is read from only */
	CHECK_INT(ops->post(c, w, 8, &err), 8);
	CHECK(memcmp(stage, seg_mem + 4096, 65536) == 0);
	CHECK(memcmp(stage + 65536, seg_mem, 1000) == 0);
	CHECK_INT(ops->outstanding(c), 8);
	n = ops->reap(c, wc, 16);
	CHECK_INT(n, 8);
	CHECK_INT(wc[0].wr_id, 10);
	CHECK_INT(wc[0].status, KVL_OK);
	CHECK_INT(wc[0].bytes, 65536);
	CHECK_INT(wc[1].wr_id, 11);
	CHECK_INT(wc[1].bytes, 1000);
	CHECK_INT(wc[2].status, KVL_ERR_NO_SEGMENT);
	CHECK_INT(wc[3].status, KVL_ERR_BOUNDS);
	CHECK_INT(wc[4].status, KVL_ERR_GPU_MEMORY);
	CHECK_INT(wc[5].status, KVL_ERR_LOCAL);
	CHECK_INT(wc[6].status, KVL_ERR_ACCESS);
	CHECK_INT(wc[7].status, KVL_ERR_ACCESS);
	for (unsigned i = 2; i < 8; i++)
		CHECK_INT(wc[i].bytes, 0);
	kvl_tier_stats_read(c, &st);
	CHECK_INT(st.reads, 8);
	CHECK_INT(st.done, 2);
	CHECK_INT(st.refused, 6);
	CHECK_INT(st.bytes, 65536 + 1000);
	CHECK_INT(st.copies, 2);
	CHECK_INT(st.batches, 1);
	CHECK_INT(st.copy_ns, 100); /* one burst, timed once: the fake clock moves 100 a read */
	CHECK_INT(st.inflight, 0);
	CHECK_INT(st.engine, 0);
	CHECK_INT(st.last_refusal, KVL_ERR_ACCESS);

	/* A scattered READ: remote-contiguous, three local ranges. */
	w[0] = rd(20, 1, 8192, 3000, NULL);
	w[0].n_sge = 3;
	w[0].sge[0] = (struct kvl_sge){ stage + 200000, 1000, 0 };
	w[0].sge[1] = (struct kvl_sge){ stage + 100000, 1500, 0 };
	w[0].sge[2] = (struct kvl_sge){ stage + 300000, 500, 0 };
	CHECK_INT(ops->post(c, w, 1, &err), 1);
	CHECK(memcmp(stage + 200000, seg_mem + 8192, 1000) == 0);
	CHECK(memcmp(stage + 100000, seg_mem + 9192, 1500) == 0);
	CHECK(memcmp(stage + 300000, seg_mem + 10692, 500) == 0);
	/* ranges that do not add up to the length are refused, not half copied */
	w[1] = w[0];
	w[1].wr_id = 21;
	w[1].sge[2].length = 400;
	CHECK_INT(ops->post(c, &w[1], 1, &err), 1);
	CHECK_INT(ops->reap(c, wc, 16), 2);
	CHECK_INT(wc[0].status, KVL_OK);
	CHECK_INT(wc[0].bytes, 3000);
	CHECK_INT(wc[1].status, KVL_ERR_LOCAL);

	/* Full: depth READs taken, the next waits with -EAGAIN; nothing is lost. */
	for (unsigned i = 0; i < 16; i++) {
		struct kvl_wr x = rd(100 + i, 1, i * 64, 64, stage + i * 64);

		CHECK_INT(ops->post(c, &x, 1, &err), 1);
	}
	w[0] = rd(200, 1, 0, 64, stage);
	err = 0;
	CHECK_INT(ops->post(c, w, 1, &err), 0);
	CHECK_INT(err, -EAGAIN);
	CHECK_INT(ops->reap(c, wc, 16), 16);
	CHECK_INT(wc[15].wr_id, 115);
	CHECK_INT(ops->post(c, w, 1, &err), 1);
	CHECK_INT(ops->reap(c, wc, 16), 1);

	/* After fail_all, READs complete with its status and move nothing. */
	ops->fail_all(c, KVL_ERR_CANCELED);
	memset(stage, 0, 64);
	CHECK_INT(ops->post(c, w, 1, &err), 1);
	CHECK_INT(ops->reap(c, wc, 16), 1);
	CHECK_INT(wc[0].status, KVL_ERR_CANCELED);
	CHECK_INT(stage[0], 0);
	ops->free(c);
}

/* With an engine: a READ completes only once every one of its copies has landed. */
static void test_engine(void)
{
	struct kvl_tier_opts o = { .segs = &tab,
				   .staging = stage,
				   .staging_len = STAGE,
				   .engine = { &fe_ops, &fe },
				   .engine_depth = 8,
				   .dma_seg = 1,
				   .dma_base = (uintptr_t)seg_mem,
				   .dma_len = SEGLEN / 2, /* only the first half is "pinned" */
				   .depth = 16,
				   .clock = fake_clock };
	const struct kvl_xport_ops *ops = &kvl_xport_tier;
	struct kvl_tier_conn *c;
	struct kvl_wr w[4];
	struct kvl_wc wc[16];
	struct kvl_tier_stats st;
	int err = 0;

	memset(&fe, 0, sizeof(fe));
	fe.pool_base = (uintptr_t)seg_mem;
	o.engine_depth = 0;
	CHECK(kvl_tier_new(&o) == NULL); /* an engine needs its depth */
	o.engine_depth = 8;
	c = kvl_tier_new(&o);
	CHECK(c != NULL);
	memset(stage, 0, STAGE);
	fe.hold = true;
	w[0] = rd(1, 1, 0, 4096, stage);
	w[1] = rd(2, 1, 65536, 6000, NULL);
	w[1].n_sge = 2;
	w[1].sge[0] = (struct kvl_sge){ stage + 500000, 2000, 0 };
	w[1].sge[1] = (struct kvl_sge){ stage + 400000, 4000, 0 };
	w[2] = rd(3, 1, SEGLEN / 2, 64, stage); /* outside what the engine may read */
	CHECK_INT(ops->post(c, w, 3, &err), 3);
	CHECK_INT(fe.posts, 0); /* handed over by progress, as one batch */
	/* in flight: nothing is complete, nothing has landed */
	CHECK(ops->progress(c) >= 1); /* the hand-over is work */
	CHECK_INT(fe.posts, 3);	      /* 1 + 2 ranges; the refused one never reaches the engine */
	CHECK_INT(fe.q[1].wr.remote_off, 65536);
	CHECK_INT(fe.q[2].wr.remote_off, 65536 + 2000);
	CHECK_INT(fe.q[2].wr.remote_seg, 1);
	/* copies in flight are not work, they are due: an engine that cannot say when, at once */
	CHECK_INT(ops->progress(c), 0);
	CHECK(ops->due(c) <= fake_now + 100);
	CHECK_INT(ops->reap(c, wc, 16), 0);
	CHECK_INT(stage[0], 0);
	/* landed: completions in order, bytes there first */
	fe.hold = false;
	ops->progress(c);
	CHECK_INT(ops->reap(c, wc, 16), 3);
	CHECK_INT(wc[0].wr_id, 1);
	CHECK_INT(wc[0].status, KVL_OK);
	CHECK_INT(wc[1].wr_id, 2);
	CHECK_INT(wc[1].bytes, 6000);
	CHECK_INT(wc[2].status, KVL_ERR_ACCESS);
	CHECK(memcmp(stage, seg_mem, 4096) == 0);
	CHECK(memcmp(stage + 500000, seg_mem + 65536, 2000) == 0);
	CHECK(memcmp(stage + 400000, seg_mem + 65536 + 2000, 4000) == 0);
	kvl_tier_stats_read(c, &st);
	CHECK_INT(st.copies, 3);
	CHECK_INT(st.done, 2);
	CHECK_INT(st.bytes, 4096 + 6000);
	CHECK_INT(st.refused, 1);
	CHECK_INT(st.engine, 1);
	CHECK(st.copy_ns > 0); /* busy from the first post until the engine emptied */
	CHECK_INT(st.batches, fe.progresses);

	/* The engine's room bounds what is taken: a READ of 8 ranges waits for 8 free. */
	fe.hold = true;
	w[0] = rd(4, 1, 0, 64, stage);
	CHECK_INT(ops->post(c, w, 1, &err), 1);
	w[1] = rd(5, 1, 0, 8 * 64, NULL);
	w[1].n_sge = 8;
	for (unsigned k = 0; k < 8; k++)
		w[1].sge[k] = (struct kvl_sge){ stage + k * 64, 64, 0 };
	err = 0;
	CHECK_INT(ops->post(c, &w[1], 1, &err), 0);
	CHECK_INT(err, -EAGAIN);
	fe.hold = false;
	ops->progress(c);
	CHECK_INT(ops->reap(c, wc, 16), 1);
	CHECK_INT(ops->post(c, &w[1], 1, &err), 1);
	ops->progress(c);
	CHECK_INT(ops->reap(c, wc, 16), 1);
	CHECK_INT(wc[0].status, KVL_OK);
	CHECK_INT(wc[0].bytes, 8 * 64);
	/* an engine that refuses (broken) fails the READ with conn-lost, never stalls it */
	fe.fail_next = -EPIPE;
	w[2] = rd(6, 1, 0, 64, stage);
	CHECK_INT(ops->post(c, &w[2], 1, &err), 1);
	ops->progress(c);
	CHECK_INT(ops->reap(c, wc, 16), 1);
	CHECK_INT(wc[0].wr_id, 6);
	CHECK_INT(wc[0].status, KVL_ERR_CONN_LOST);
	kvl_tier_stats_read(c, &st);
	CHECK_INT(st.engine_errors, 1);
	ops->free(c);
}

/* While flush_bytes are in flight, what the lcore posts pass after pass waits and goes over as
 * one batch once flush_bytes of it have gathered; with little in flight it goes at once. */
static void test_engine_batches(void)
{
	struct kvl_tier_opts o = { .segs = &tab,
				   .staging = stage,
				   .staging_len = STAGE,
				   .engine = { &fe_ops, &fe },
				   .engine_depth = 16,
				   .flush_bytes = 4096,
				   .dma_seg = 1,
				   .dma_base = (uintptr_t)seg_mem,
				   .dma_len = SEGLEN,
				   .depth = 16,
				   .clock = fake_clock };
	const struct kvl_xport_ops *ops = &kvl_xport_tier;
	struct kvl_tier_conn *c;
	struct kvl_wr w;
	struct kvl_wc wc[16];
	unsigned progresses;
	int err = 0;

	memset(&fe, 0, sizeof(fe));
	fe.pool_base = (uintptr_t)seg_mem;
	c = kvl_tier_new(&o);
	CHECK(c != NULL);
	memset(stage, 0, STAGE);
	fe.hold = true;
	w = rd(1, 1, 0, 8192, stage); /* nothing in flight: goes at once */
	CHECK_INT(ops->post(c, &w, 1, &err), 1);
	ops->progress(c);
	CHECK_INT(fe.posts, 1);
	for (unsigned i = 0; i < 3; i++) { /* 8 KiB in flight: these wait */
		w = rd(2 + i, 1, 65536 + i * 1024, 1024, stage + 65536 + i * 1024);
		CHECK_INT(ops->post(c, &w, 1, &err), 1);
		ops->progress(c);
		CHECK_INT(fe.posts, 1);
	}
	progresses = fe.progresses;
	w = rd(5, 1, 65536 + 3 * 1024, 1024, stage + 65536 + 3 * 1024); /* 4 KiB waiting now */
	CHECK_INT(ops->post(c, &w, 1, &err), 1);
	ops->progress(c);
	CHECK_INT(fe.posts, 5); /* the four as one batch, launched by this one progress */
	CHECK_INT(fe.progresses, progresses + 1);
	CHECK_INT(ops->reap(c, wc, 16), 0); /* held: nothing landed, nothing complete */
	fe.hold = false;
	ops->progress(c);
	CHECK_INT(ops->reap(c, wc, 16), 5);
	for (unsigned i = 0; i < 5; i++) {
		CHECK_INT(wc[i].wr_id, 1 + i);
		CHECK_INT(wc[i].status, KVL_OK);
	}
	CHECK(memcmp(stage, seg_mem, 8192) == 0);
	CHECK(memcmp(stage + 65536, seg_mem + 65536, 4096) == 0);
	/* fail_all completes what never reached the engine with its status */
	fe.hold = true;
	w = rd(6, 1, 0, 8192, stage);
	CHECK_INT(ops->post(c, &w, 1, &err), 1);
	ops->progress(c);
	w = rd(7, 1, 0, 1024, stage);
	CHECK_INT(ops->post(c, &w, 1, &err), 1);
	ops->progress(c);
	CHECK_INT(fe.posts, 6); /* 7 waits behind 8 KiB in flight */
	fe.hold = false;
	ops->fail_all(c, KVL_ERR_CANCELED);
	CHECK_INT(ops->reap(c, wc, 16), 2);
	CHECK_INT(wc[0].wr_id, 6); /* on the engine: its fail_all's status */
	CHECK_INT(wc[0].status, KVL_ERR_CANCELED);
	CHECK_INT(wc[1].wr_id, 7); /* never handed over: the same */
	CHECK_INT(wc[1].status, KVL_ERR_CANCELED);
	CHECK_INT(ops->outstanding(c), 0);
	ops->free(c);
}

/* The min_batch tests' connection: the fake engine (64 deep) behind the tier with @flush and
 * @min_batch, and one lcore pass: post one READ of @len, progress (the lcore's order), reap. */
struct rig {
	struct kvl_tier_conn *c;
	struct kvl_wc wc[64];
	uint64_t id;
	unsigned got;
};

static void rig_open(struct rig *g, uint64_t flush, uint64_t min_batch)
{
	struct kvl_tier_opts o = { .segs = &tab,
				   .staging = stage,
				   .staging_len = STAGE,
				   .engine = { &fe_ops, &fe },
				   .engine_depth = 64,
				   .flush_bytes = flush,
				   .min_batch = min_batch,
				   .dma_seg = 1,
				   .dma_base = (uintptr_t)seg_mem,
				   .dma_len = SEGLEN,
				   .depth = 64,
				   .clock = fake_clock };

	memset(g, 0, sizeof(*g));
	g->id = 1;
	memset(&fe, 0, sizeof(fe));
	fe.pool_base = (uintptr_t)seg_mem;
	g->c = kvl_tier_new(&o);
	CHECK(g->c != NULL);
}

static void rig_pass(struct rig *g, uint32_t len)
{
	const struct kvl_xport_ops *ops = &kvl_xport_tier;
	struct kvl_wr w = rd(g->id, 1, (g->id * 1024) % (SEGLEN / 2), len,
			     stage + (g->id * 1024) % (STAGE / 2));
	int err = 0;

	CHECK_INT(ops->post(g->c, &w, 1, &err), 1);
	g->id++;
	ops->progress(g->c);
	g->got += ops->reap(g->c, g->wc, 64);
}

/* min_batch: while the lcore keeps posting pass after pass, a batch waits to gather min_batch,
 * a first pass goes at once, a pass that posts nothing lets what waits go, an idle engine waits
 * 4 passes at most, and a busy one makes what waits wait (it grows behind what runs). */
static void test_engine_min_batch(void)
{
	const struct kvl_xport_ops *ops = &kvl_xport_tier;
	struct kvl_tier_stats st;
	struct rig g;

	rig_open(&g, 131072, 65536);
	rig_pass(&g, 1024); /* a first pass: at once */
	CHECK_INT(fe.posts, 1);
	CHECK_INT(g.got, 1);
	for (unsigned i = 0; i < 4; i++) { /* passes that keep posting: the idle engine waits */
		rig_pass(&g, 1024);
		CHECK_INT(fe.posts, 1);
	}
	rig_pass(&g, 1024); /* the fifth: waited enough, the five go as one batch */
	CHECK_INT(fe.posts, 6);
	CHECK_INT(g.got, 6);
	rig_pass(&g, 1024); /* streaming again: waits */
	CHECK_INT(fe.posts, 6);
	ops->progress(g.c); /* a pass that posts nothing: it goes */
	CHECK_INT(fe.posts, 7);
	g.got += ops->reap(g.c, g.wc, 64);
	rig_pass(&g, 65536); /* min_batch at once */
	CHECK_INT(fe.posts, 8);
	/* busy: what the next passes post waits behind it until min_batch has gathered */
	fe.hold = true;
	ops->progress(g.c);
	rig_pass(&g, 1024); /* first after a quiet pass: at once, and now in flight */
	CHECK_INT(fe.posts, 9);
	for (unsigned i = 0; i < 8; i++) {
		rig_pass(&g, 1024);
		CHECK_INT(fe.posts, 9);
	}
	rig_pass(&g, 57344); /* 8 KiB + 56 KiB = min_batch: they go */
	CHECK_INT(fe.posts, 18);
	fe.hold = false;
	ops->progress(g.c);
	g.got += ops->reap(g.c, g.wc, 64);
	CHECK_INT(g.got, 18);
	CHECK_INT(ops->outstanding(g.c), 0);
	kvl_tier_stats_read(g.c, &st);
	CHECK_INT(st.handovers, 6);
	CHECK_INT(st.handover_small, 4); /* the first, the five, the one, the first busy */
	CHECK_INT(st.done, 18);
	ops->free(g.c);
}

/* min_batch while the engine is busy: what gathers waits behind what runs until flush_bytes
 * (or until less than min_batch is left in flight), not only until min_batch: handing 2 MiB
 * over whenever that much had gathered kept 64 KiB runs in batches of 2.7 MiB on some H200
 * calls. */
static void test_engine_busy_batch(void)
{
	const struct kvl_xport_ops *ops = &kvl_xport_tier;
	struct kvl_tier_stats st;
	struct rig g;

	rig_open(&g, 262144, 65536);
	fe.hold = true;
	rig_pass(&g, 65536); /* idle, min_batch: at once, and held in flight */
	CHECK_INT(fe.posts, 1);
	rig_pass(&g, 32768);
	rig_pass(&g, 32768); /* min_batch has gathered, but min_batch is in flight: it waits */
	CHECK_INT(fe.posts, 1);
	rig_pass(&g, 65536);
	rig_pass(&g, 65536);
	CHECK_INT(fe.posts, 1);
	rig_pass(&g, 65536); /* flush_bytes gathered: the five go as one batch */
	CHECK_INT(fe.posts, 6);
	rig_pass(&g, 32768);
	rig_pass(&g, 32768); /* 320 KiB in flight: these wait */
	CHECK_INT(fe.posts, 6);
	CHECK_INT(g.got, 0);
	fe.hold = false;
	rig_pass(&g, 1024); /* the engine lands what it holds; this pass still saw it busy */
	CHECK_INT(fe.posts, 6);
	CHECK_INT(g.got, 6);
	rig_pass(&g, 1024); /* nothing in flight: the four go */
	CHECK_INT(fe.posts, 10);
	CHECK_INT(g.got, 10);
	CHECK_INT(ops->outstanding(g.c), 0);
	kvl_tier_stats_read(g.c, &st);
	CHECK_INT(st.handovers, 3);
	CHECK_INT(st.done, 10);
	ops->free(g.c);
}

static void test_bad_opts(void)
{
	struct kvl_tier_opts o = { .segs = &tab, .staging = stage, .staging_len = STAGE };

	o.depth = 12;
	CHECK(kvl_tier_new(&o) == NULL);
	CHECK_INT(errno, EINVAL);
	o.depth = 0;
	o.segs = NULL;
	CHECK(kvl_tier_new(&o) == NULL);
	o.segs = &tab;
	o.staging = NULL;
	CHECK(kvl_tier_new(&o) == NULL);
}

static uint64_t pace_now;

static uint64_t pace_clock(void *arg)
{
	(void)arg;
	return pace_now;
}

/* [sched] tier_rate_mbps: READs taken at the rate on average, bursts of flush_bytes, a READ the
 * bucket cannot take yet refused with -EAGAIN (the scheduler keeps it), nothing lost. */
static void test_paced(void)
{
	struct kvl_tier_opts o = { .segs = &tab,
				   .staging = stage,
				   .staging_len = STAGE,
				   .depth = 4096,
				   .flush_bytes = 65536,
				   .rate_Bps = 1000000000, /* 1 byte per ns */
				   .clock = pace_clock };
	const struct kvl_xport_ops *ops = &kvl_xport_tier;
	struct kvl_tier_conn *c;
	struct kvl_wr w[64];
	struct kvl_wc wc[64];
	struct kvl_pace p;
	uint64_t taken = 0;
	int err = 0;

	pace_now = 1000;
	c = kvl_tier_new(&o);
	CHECK(c != NULL);
	for (unsigned i = 0; i < 64; i++)
		w[i] = rd(100 + i, 1, (uint64_t)i * 4096, 4096, stage + (uint64_t)i * 4096);
	/* an empty bucket grants one READ (it may owe), then refuses until the debt is paid and
	 * a quarter of the burst (16 KiB) has come: then a run of READs goes */
	CHECK_INT(ops->post(c, w, 4, &err), 1);
	CHECK_INT(err, -EAGAIN);
	pace_now += 4095;
	err = 0;
	CHECK_INT(ops->post(c, w + 1, 3, &err), 0);
	CHECK_INT(err, -EAGAIN);
	pace_now += 1; /* out of debt, not a quarter burst: still refused */
	CHECK_INT(ops->post(c, w + 1, 3, &err), 0);
	CHECK(ops->due(c) == pace_now + 16384 + 1); /* when the run opens */
	pace_now += 16383;
	CHECK_INT(ops->post(c, w + 1, 3, &err), 0);
	pace_now += 1;
	CHECK_INT(ops->post(c, w + 1, 8, &err), 5); /* 4 x 4 KiB, and one owing */
	/* a long pause fills the bucket to its burst (64 KiB) and no further */
	pace_now += 10000000;
	CHECK_INT(ops->post(c, w + 6, 58, &err), 17); /* 16 x 4 KiB, and one owing */
	CHECK_INT(ops->reap(c, wc, 64), 23);
	for (unsigned i = 0; i < 23; i++) {
		CHECK_INT(wc[i].wr_id, 100 + i);
		CHECK_INT(wc[i].status, KVL_OK);
	}
	CHECK(memcmp(stage, seg_mem, 23 * 4096) == 0);
	ops->free(c);

	/* the long-run rate: 1 ms in steps of 1 us takes 1 MB, give or take a burst and a block */
	kvl_pace_init(&p, 1000000000, 65536, 0);
	CHECK_INT(kvl_pace_wait_ns(&p, 0), 0);
	for (uint64_t t = 0; t <= 1000000; t += 1000)
		while (kvl_pace_take(&p, 4096, t))
			taken += 4096;
	/* (what the bucket holds between runs, up to a quarter burst, is not taken yet) */
	CHECK(taken >= 1000000 - 16384 - 1000 && taken <= 1000000 + 4096);
	CHECK(kvl_pace_wait_ns(&p, 1000000) > 0 &&
	      kvl_pace_wait_ns(&p, 1000000) <= 4096 + 16384 + 1);
}

/* When the lcore must look again though nothing was done (tier_due): copies in flight, when
 * the engine says; parts waiting for an idle engine, at once; the pacing's debt, when paid;
 * nothing at all, never. */
static uint64_t fe_due_at;
static uint64_t fe_due(const void *c)
{
	(void)c;
	return fe_due_at;
}

static void test_due(void)
{
	struct kvl_xport_ops eops = fe_ops;
	struct kvl_tier_opts o = { .segs = &tab,
				   .staging = stage,
				   .staging_len = STAGE,
				   .engine = { &eops, &fe },
				   .engine_depth = 8,
				   .dma_seg = 1,
				   .dma_base = (uintptr_t)seg_mem,
				   .dma_len = SEGLEN / 2,
				   .depth = 16,
				   .clock = pace_clock };
	const struct kvl_xport_ops *ops = &kvl_xport_tier;
	struct kvl_tier_conn *c;
	struct kvl_wr w = rd(1, 1, 0, 4096, stage);
	struct kvl_wc wc[4];
	int err = 0;

	eops.due = fe_due;
	memset(&fe, 0, sizeof(fe));
	fe.pool_base = (uintptr_t)seg_mem;
	pace_now = 5000;
	c = kvl_tier_new(&o);
	CHECK(c != NULL);
	CHECK(ops->due(c) == UINT64_MAX); /* nothing posted: nothing due */
	fe.hold = true;
	CHECK_INT(ops->post(c, &w, 1, &err), 1);
	CHECK(ops->due(c) == pace_now); /* waiting for an idle engine: the next pass hands it */
	CHECK(ops->progress(c) >= 1);
	CHECK_INT(fe.posts, 1);
	fe_due_at = pace_now + 123456; /* the engine's estimate of the copy's end */
	CHECK_INT(ops->progress(c), 0);
	CHECK(ops->due(c) == pace_now + 123456);
	fe.hold = false;
	fe_due_at = UINT64_MAX;
	CHECK(ops->progress(c) >= 1);
	CHECK_INT(ops->reap(c, wc, 4), 1);
	CHECK(memcmp(stage, seg_mem, 4096) == 0);
	CHECK(ops->due(c) == UINT64_MAX); /* all landed */
	ops->free(c);

	/* paced, no engine (memcpy): a READ the bucket refused is due when the debt is paid */
	o.engine = (struct kvl_xconn){ 0 };
	o.engine_depth = 0;
	o.flush_bytes = 65536;
	o.rate_Bps = 1000000000; /* 1 byte per ns */
	c = kvl_tier_new(&o);
	CHECK(c != NULL);
	CHECK(ops->due(c) == UINT64_MAX);
	CHECK_INT(ops->post(c, &w, 1, &err), 1); /* taken on credit: owes 4096 bytes */
	/* due once a quarter of the burst (16 KiB) has come, not when the debt is paid: one
	 * wake-up lets that much through */
	CHECK(ops->due(c) == pace_now + 4096 + 16384 + 1);
	pace_now += 2000;
	CHECK(ops->due(c) == pace_now + 2096 + 16384 + 1);
	pace_now += 2096; /* out of debt, the run not open yet: still due */
	CHECK(ops->due(c) == pace_now + 16384 + 1);
	pace_now += 16384; /* a quarter burst: READs go, nothing is due */
	CHECK(ops->due(c) == UINT64_MAX);
	CHECK_INT(ops->reap(c, wc, 4), 1);
	ops->free(c);
}

/* ---- engine-owned destinations (KVL_REQ_ENGINE_DEST): outside staging, in a segment ---- */

static struct {
	unsigned calls;
	void *base;
	uint64_t len;
	int rc; /* what the hook answers */
} told;

static int fake_add_local(void *engine, void *base, uint64_t len)
{
	(void)engine;
	told.calls++;
	told.base = base;
	told.len = len;
	return told.rc;
}

static void fake_counters(const void *engine, struct kvl_tier_engine_ctr *out)
{
	(void)engine;
	memset(out, 0, sizeof(*out));
	out->launches = 3;
	out->small_copies = 96;
	out->ce_ps[0] = 36;
	out->gather_samples[1] = 9;
	out->svc_ns_gather = 1234;
}

/* memcpy: a host segment takes the bytes; a GPU one, an unregistered range, one crossing a
 * segment's end do not, and nothing is written there. */
static void test_dest_memcpy(void)
{
	struct kvl_tier_opts o = {
		.segs = &tab, .staging = stage, .staging_len = STAGE, .depth = 16
	};
	const struct kvl_xport_ops *ops = &kvl_xport_tier;
	struct kvl_tier_conn *c = kvl_tier_new(&o);
	uint8_t *stray = malloc(4096);
	struct kvl_wr w[5];
	struct kvl_wc wc[8];
	struct kvl_tier_stats st;
	int err = 0;

	CHECK(c != NULL && stray != NULL);
	memset(cache, 0xee, 65536);
	memset(gpu_cache, 0xee, 65536);
	memset(stray, 0xee, 4096);
	w[0] = rd(1, 1, 4096, 8192, cache + 16384);   /* the engine's host cache */
	w[1] = rd(2, 1, 0, 4096, gpu_cache);	      /* a GPU segment: memcpy cannot */
	w[2] = rd(3, 1, 0, 4096, stray);	      /* registered nowhere */
	w[3] = rd(4, 1, 0, 4096, cache + 65536 - 64); /* across the cache's end */
	w[4] = rd(5, 1, 12288, 4096, cache);	      /* the same segment again */
	CHECK_INT(ops->post(c, w, 5, &err), 5);
	CHECK_INT(ops->reap(c, wc, 8), 5);
	CHECK_INT(wc[0].status, KVL_OK);
	CHECK_INT(wc[0].bytes, 8192);
	CHECK(memcmp(cache + 16384, seg_mem + 4096, 8192) == 0);
	CHECK_INT(wc[1].status, KVL_ERR_LOCAL);
	CHECK_INT(wc[2].status, KVL_ERR_LOCAL);
	CHECK_INT(wc[3].status, KVL_ERR_LOCAL);
	CHECK_INT(wc[4].status, KVL_OK);
	CHECK(memcmp(cache, seg_mem + 12288, 4096) == 0);
	CHECK_INT(gpu_cache[0], 0xee);
	CHECK_INT(stray[0], 0xee);
	CHECK_INT(cache[65536 - 64], 0xee);
	kvl_tier_stats_read(c, &st);
	CHECK_INT(st.dest_reads, 2);
	CHECK_INT(st.refused, 3);
	ops->free(c);
	free(stray);
}

/* An engine: a GPU segment is told to it once and takes the bytes; a host one is refused (the
 * engine writes VRAM); a segment the engine refuses fails its READs; its counters come back. */
static void test_dest_engine(void)
{
	struct kvl_tier_opts o = { .segs = &tab,
				   .staging = stage,
				   .staging_len = STAGE,
				   .engine = { &fe_ops, &fe },
				   .engine_depth = 16,
				   .dma_seg = 1,
				   .dma_base = (uintptr_t)seg_mem,
				   .dma_len = SEGLEN,
				   .depth = 16,
				   .engine_add_local = fake_add_local,
				   .engine_counters = fake_counters };
	const struct kvl_xport_ops *ops = &kvl_xport_tier;
	struct kvl_tier_conn *c;
	struct kvl_wr w[4];
	struct kvl_wc wc[8];
	struct kvl_tier_stats st;
	int err = 0;

	memset(&fe, 0, sizeof(fe));
	memset(&told, 0, sizeof(told));
	fe.pool_base = (uintptr_t)seg_mem;
	c = kvl_tier_new(&o);
	CHECK(c != NULL);
	memset(gpu_cache, 0, 65536);
	memset(cache, 0xee, 65536);
	w[0] = rd(1, 1, 0, 16384, gpu_cache + 16384);
	w[1] = rd(2, 1, 16384, 16384, gpu_cache);
	w[2] = rd(3, 1, 0, 4096, cache); /* host memory: not the engine's to write */
	w[3] = rd(4, 1, 32768, 4096, stage);
	CHECK_INT(ops->post(c, w, 4, &err), 4);
	CHECK_INT(told.calls, 1); /* once for the segment, not per READ */
	CHECK(told.base == gpu_cache);
	CHECK_INT(told.len, 65536);
	for (int i = 0; i < 8; i++)
		ops->progress(c);
	CHECK_INT(ops->reap(c, wc, 8), 4);
	CHECK_INT(wc[0].status, KVL_OK);
	CHECK_INT(wc[1].status, KVL_OK);
	CHECK_INT(wc[2].status, KVL_ERR_LOCAL);
	CHECK_INT(wc[3].status, KVL_OK);
	CHECK(memcmp(gpu_cache + 16384, seg_mem, 16384) == 0);
	CHECK(memcmp(gpu_cache, seg_mem + 16384, 16384) == 0);
	CHECK(memcmp(stage, seg_mem + 32768, 4096) == 0);
	CHECK_INT(cache[0], 0xee);
	kvl_tier_stats_read(c, &st);
	CHECK_INT(st.dest_reads, 2);
	CHECK_INT(st.eng.launches, 3);
	CHECK_INT(st.eng.small_copies, 96);
	CHECK_INT(st.eng.ce_ps[0], 36);
	CHECK_INT(st.eng.gather_samples[1], 9);
	CHECK_INT(st.eng.svc_ns_gather, 1234);
	ops->free(c);

	/* an engine that cannot write the segment: its READs fail, asked again each time */
	memset(&fe, 0, sizeof(fe));
	memset(&told, 0, sizeof(told));
	fe.pool_base = (uintptr_t)seg_mem;
	told.rc = -EINVAL;
	c = kvl_tier_new(&o);
	CHECK(c != NULL);
	memset(gpu_cache, 0, 65536);
	w[0] = rd(1, 1, 0, 4096, gpu_cache);
	CHECK_INT(ops->post(c, w, 1, &err), 1);
	CHECK_INT(ops->post(c, w, 1, &err), 1);
	CHECK_INT(told.calls, 2);
	for (int i = 0; i < 8; i++)
		ops->progress(c);
	CHECK_INT(ops->reap(c, wc, 8), 2);
	CHECK_INT(wc[0].status, KVL_ERR_LOCAL);
	CHECK_INT(wc[1].status, KVL_ERR_LOCAL);
	CHECK_INT(fe.posts, 0);
	CHECK_INT(gpu_cache[0], 0);
	ops->free(c);
}

int main(void)
{
	seg_mem = malloc(SEGLEN);
	gpu_mem = malloc(4096);
	stage = malloc(STAGE);
	kvl_test_fill_random(seg_mem, SEGLEN);
	add_seg(1, seg_mem, SEGLEN, KVL_SEG_REMOTE_READ);
	add_seg(2, gpu_mem, 4096, KVL_SEG_REMOTE_READ | KVL_SEG_GPU);
	add_seg(3, seg_mem, 4096, KVL_SEG_REMOTE_WRITE);
	cache = malloc(65536);
	gpu_cache = malloc(65536); /* "GPU" memory the fake engine writes with memcpy */
	add_seg(4, cache, 65536, 0);
	add_seg(5, gpu_cache, 65536, KVL_SEG_GPU);
	test_memcpy();
	test_engine();
	test_engine_batches();
	test_engine_min_batch();
	test_engine_busy_batch();
	test_bad_opts();
	test_paced();
	test_due();
	test_dest_memcpy();
	test_dest_engine();
	free(cache);
	free(gpu_cache);
	free(seg_mem);
	free(gpu_mem);
	free(stage);
	return kvl_test_done("tier");
}
