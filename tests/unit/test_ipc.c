/* SPDX-License-Identifier: BSD-3-Clause */
/* Unit test of the ipc transport: a scripted CUDA IPC driver and copy engine, every refusal. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvl_clock.h"
#include "kvl_test.h"
#include "xport_ipc.h"

#define ALEN   (1u << 20) /* one exported allocation */
#define NALLOC 4

/* ---- the scripted driver: handle byte 0 names an allocation of the "serving process" ---- */

static struct drv {
	uint8_t *alloc[NALLOC];
	unsigned opens[NALLOC], closes[NALLOC];
	bool refuse[NALLOC]; /* open fails as cuIpcOpenMemHandle does on a bad handle */
} dv;

static int d_open(void *arg, const uint8_t h[64], uint64_t *dptr, char *err, size_t errlen)
{
	(void)arg;
	if (h[0] >= NALLOC || dv.refuse[h[0]]) {
		snprintf(err, errlen, "CUDA_ERROR_INVALID_VALUE: invalid argument");
		return -EINVAL;
	}
	dv.opens[h[0]]++;
	*dptr = (uint64_t)(uintptr_t)dv.alloc[h[0]];
	return 0;
}

static void d_close(void *arg, uint64_t dptr)
{
	(void)arg;
	for (unsigned i = 0; i < NALLOC; i++)
		if ((uint64_t)(uintptr_t)dv.alloc[i] == dptr)
			dv.closes[i]++;
}

/* ---- the scripted engine: sources by engine id; lands batches when the test lets it ---- */

static struct eng {
	struct {
		uint64_t base, len;
		bool on;
	} src[256];
	struct kvl_wr q[1024];
	int st[1024];
	unsigned head, tail, landed;
	bool hold;
	int fail_next;
	unsigned posts, bad_src;
	int fail_all_status;
} en;

static int e_add(void *c, uint32_t eid, uint64_t base, uint64_t len, char *err, size_t errlen)
{
	(void)c;
	(void)err;
	(void)errlen;
	if (eid == 0 || eid >= 256 || en.src[eid].on)
		return -EEXIST;
	en.src[eid].base = base;
	en.src[eid].len = len;
	en.src[eid].on = true;
	return 0;
}

static void e_del(void *c, uint32_t eid)
{
	(void)c;
	en.src[eid].on = false;
}

static unsigned e_post(void *c, const struct kvl_wr *wr, unsigned n, int *err)
{
	unsigned k = 0;

	(void)c;
	for (; k < n; k++) {
		if (en.fail_next) {
			*err = en.fail_next;
			en.fail_next = 0;
			break;
		}
		if (en.tail - en.head == 1024) {
			*err = -EAGAIN;
			break;
		}
		/* as cudma: the source resolved at post, a bad one completes NO_SEGMENT */
		en.st[en.tail % 1024] = wr[k].remote_seg < 256 && en.src[wr[k].remote_seg].on &&
							wr[k].remote_off + wr[k].length <=
								en.src[wr[k].remote_seg].len
						? KVL_OK
						: KVL_ERR_NO_SEGMENT;
		if (en.st[en.tail % 1024] != KVL_OK)
			en.bad_src++;
		en.q[en.tail % 1024] = wr[k];
		/* the source address now, as cudma computes it */
		en.q[en.tail % 1024].remote_off += en.src[wr[k].remote_seg].base;
		en.tail++;
	}
	en.posts += k;
	return k;
}

static unsigned e_progress(void *c)
{
	(void)c;
	if (en.hold)
		return 0;
	for (; en.landed != en.tail; en.landed++) {
		const struct kvl_wr *w = &en.q[en.landed % 1024];

		if (en.st[en.landed % 1024] == KVL_OK)
			memcpy(w->local, (const void *)(uintptr_t)w->remote_off, w->length);
	}
	return 1;
}

static unsigned e_reap(void *c, struct kvl_wc *wc, unsigned max)
{
	unsigned n = 0;

	(void)c;
	while (n < max && en.head != en.landed) {
		unsigned i = en.head++ % 1024;

		wc[n++] = (struct kvl_wc){ .wr_id = en.q[i].wr_id,
					   .status = en.st[i],
					   .bytes = en.st[i] == KVL_OK ? en.q[i].length : 0 };
	}
	return n;
}

static void e_fail_all(void *c, int status)
{
	(void)c;
	/* what is on the "stream" lands, then the rest fails */
	en.fail_all_status = status;
	en.hold = false;
	e_progress(NULL);
}

static int e_broken(const void *c)
{
	(void)c;
	return 0;
}

static unsigned e_outstanding(const void *c)
{
	(void)c;
	return en.tail - en.head;
}

static void e_stats(const void *c, struct kvl_xport_stats *out)
{
	(void)c;
	memset(out, 0, sizeof(*out));
}

static unsigned e_freed;
static void e_free(void *c)
{
	(void)c;
	e_freed++;
}

static const struct kvl_xport_ops eops = {
	.name = "fake-engine",
	.post = e_post,
	.progress = e_progress,
	.reap = e_reap,
	.fail_all = e_fail_all,
	.broken = e_broken,
	.outstanding = e_outstanding,
	.stats = e_stats,
	.free = e_free,
};

/* ---- helpers ---- */

static uint8_t *dst;

static struct kvl_ipc_conn *conn_new(void)
{
	struct kvl_ipc_opts o = {
		.drv = { d_open, d_close, NULL },
		.engine = { .x = { &eops, NULL }, .add_src = e_add, .del_src = e_del },
		.depth = 64,
		.engine_depth = 256
	};

	memset(&en, 0, sizeof(en));
	memset(dv.opens, 0, sizeof(dv.opens));
	memset(dv.closes, 0, sizeof(dv.closes));
	memset(dv.refuse, 0, sizeof(dv.refuse));
	return kvl_ipc_new(&o);
}

static struct kvl_ipc_rseg rseg(uint32_t id, uint32_t gen, uint8_t alloc, uint64_t off,
				uint64_t len)
{
	struct kvl_ipc_rseg s = {
		.id = id, .gen = gen, .flags = KVL_SEG_REMOTE_READ, .offset = off, .length = len
	};

	s.handle[0] = alloc;
	s.handle[63] = 0xa5;
	return s;
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

/* Post @w (taken), progress until it completes, return its status. */
static int run1(struct kvl_ipc_conn *c, const struct kvl_wr *w)
{
	struct kvl_wc wc;
	int err = 0;

	CHECK_INT(kvl_xport_ipc.post(c, w, 1, &err), 1);
	for (int i = 0; i < 10; i++) {
		kvl_xport_ipc.progress(c);
		if (kvl_xport_ipc.reap(c, &wc, 1) == 1) {
			CHECK(wc.wr_id == w->wr_id);
			CHECK_INT(wc.bytes, wc.status == KVL_OK ? w->length : 0);
			return wc.status;
		}
	}
	CHECK(0 && "never completed");
	return -1;
}

/* ---- cases ---- */

static void test_open_once_and_move(void)
{
	struct kvl_ipc_conn *c = conn_new();
	struct kvl_ipc_rseg s[2] = { rseg(3, 1, 0, 4096, 65536), rseg(7, 1, 1, 0, ALEN) };
	struct kvl_ipc_stats st;
	int err = 0;

	CHECK(c != NULL);
	kvl_xport_ipc.set_remote(c, s, 2);
	CHECK_INT(dv.opens[0] + dv.opens[1], 0); /* opened on the lcore, at its first call */
	for (int i = 0; i < 20; i++) {
		memset(dst, 0, 8192);
		CHECK_INT(run1(c, &(struct kvl_wr){ .wr_id = (uint64_t)i,
						    .local = dst,
						    .remote_off = (uint64_t)i * 1000,
						    .length = 8192,
						    .remote_seg = 3,
						    .op = KVL_OP_READ }),
			  KVL_OK);
		/* segment 3 starts 4096 bytes into allocation 0 */
		CHECK(memcmp(dst, dv.alloc[0] + 4096 + i * 1000, 8192) == 0);
	}
	CHECK_INT(run1(c, &(struct kvl_wr){ .wr_id = 99,
					    .local = dst,
					    .remote_off = ALEN - 100,
					    .length = 100,
					    .remote_seg = 7,
					    .op = KVL_OP_READ }),
		  KVL_OK);
	CHECK(memcmp(dst, dv.alloc[1] + ALEN - 100, 100) == 0);
	/* each handle opened once, whatever the number of READs; the same table again: no reopen */
	CHECK_INT(dv.opens[0], 1);
	CHECK_INT(dv.opens[1], 1);
	kvl_xport_ipc.set_remote(c, s, 2);
	kvl_xport_ipc.progress(c);
	CHECK_INT(dv.opens[0], 1);
	CHECK_INT(dv.closes[0], 0);

	/* a READ of three scattered ranges: three engine requests, one completion */
	{
		struct kvl_wr w = rd(5, 7, 1000, 3000, NULL);
		struct kvl_wc wc;

		w.n_sge = 3;
		w.sge[0] = (struct kvl_sge){ .addr = dst, .length = 1000 };
		w.sge[1] = (struct kvl_sge){ .addr = dst + 5000, .length = 1000 };
		w.sge[2] = (struct kvl_sge){ .addr = dst + 9000, .length = 1000 };
		uint64_t t0;

		CHECK(kvl_xport_ipc.due(c) == UINT64_MAX); /* nothing in flight */
		en.hold = true;
		CHECK_INT(kvl_xport_ipc.post(c, &w, 1, &err), 1);
		kvl_xport_ipc.progress(c);
		CHECK_INT(kvl_xport_ipc.reap(c, &wc, 1), 0); /* not landed: nothing completes */
		CHECK_INT(kvl_xport_ipc.outstanding(c), 1);
		/* in flight: looking is not work; an engine that cannot say when: due at once */
		CHECK_INT(kvl_xport_ipc.progress(c), 0);
		t0 = kvl_now_ns();
		CHECK(kvl_xport_ipc.due(c) <= t0 + 1000000);
		en.hold = false;
		kvl_xport_ipc.progress(c);
		CHECK_INT(kvl_xport_ipc.reap(c, &wc, 1), 1);
		CHECK(kvl_xport_ipc.due(c) == UINT64_MAX);
		CHECK_INT(wc.status, KVL_OK);
		CHECK_INT(wc.bytes, 3000);
		CHECK(memcmp(dst, dv.alloc[1] + 1000, 1000) == 0);
		CHECK(memcmp(dst + 5000, dv.alloc[1] + 2000, 1000) == 0);
		CHECK(memcmp(dst + 9000, dv.alloc[1] + 3000, 1000) == 0);
	}
	kvl_ipc_stats_read(c, &st);
	CHECK_INT(st.opens, 2);
	CHECK_INT(st.done, 22);
	CHECK_INT(st.refused, 0);
	CHECK_INT(en.bad_src, 0);
	kvl_xport_ipc.free(c);
	/* both mappings closed at the end, the engine freed first */
	CHECK_INT(dv.closes[0], 1);
	CHECK_INT(dv.closes[1], 1);
}

static void test_refusals(void)
{
	struct kvl_ipc_conn *c = conn_new();
	struct kvl_ipc_rseg s[2] = { rseg(1, 1, 0, 0, 65536), rseg(2, 1, 1, 0, 65536) };
	struct kvl_ipc_stats st;
	struct kvl_wr w;
	unsigned posts;

	s[1].flags = 0; /* exported without remote read */
	kvl_xport_ipc.set_remote(c, s, 2);
	memset(dst, 0x77, 4096);
	kvl_xport_ipc.progress(c);
	posts = en.posts;
	/* out of bounds: one byte past the end, and an offset past it */
	CHECK_INT(run1(c, &(struct kvl_wr){ .wr_id = 1,
					    .local = dst,
					    .remote_off = 65536 - 4095,
					    .length = 4096,
					    .remote_seg = 1,
					    .op = KVL_OP_READ }),
		  KVL_ERR_BOUNDS);
	CHECK_INT(run1(c, &(struct kvl_wr){ .wr_id = 2,
					    .local = dst,
					    .remote_off = UINT64_MAX - 10,
					    .length = 4096,
					    .remote_seg = 1,
					    .op = KVL_OP_READ }),
		  KVL_ERR_BOUNDS);
	/* a segment never exported; one without read; a WRITE into the peer's VRAM */
	CHECK_INT(run1(c, &(struct kvl_wr){ .wr_id = 3,
					    .local = dst,
					    .length = 16,
					    .remote_seg = 9,
					    .op = KVL_OP_READ }),
		  KVL_ERR_NO_SEGMENT);
	CHECK_INT(run1(c, &(struct kvl_wr){ .wr_id = 4,
					    .local = dst,
					    .length = 16,
					    .remote_seg = 2,
					    .op = KVL_OP_READ }),
		  KVL_ERR_ACCESS);
	CHECK_INT(run1(c, &(struct kvl_wr){ .wr_id = 5,
					    .local = dst,
					    .length = 16,
					    .remote_seg = 1,
					    .op = KVL_OP_WRITE }),
		  KVL_ERR_ACCESS);
	/* ranges that do not add up to the length */
	w = rd(6, 1, 0, 3000, NULL);
	w.n_sge = 2;
	w.sge[0] = (struct kvl_sge){ .addr = dst, .length = 1000 };
	w.sge[1] = (struct kvl_sge){ .addr = dst + 2000, .length = 1000 };
	CHECK_INT(run1(c, &w), KVL_ERR_LOCAL);
	/* none of them reached the engine, none moved a byte */
	CHECK_INT(en.posts, posts);
	for (int i = 0; i < 4096; i++)
		if (dst[i] != 0x77) {
			CHECK(0 && "a refused READ wrote the destination");
			break;
		}
	kvl_ipc_stats_read(c, &st);
	CHECK_INT(st.refused, 6);
	CHECK_INT(st.last_refusal, KVL_ERR_LOCAL);
	kvl_xport_ipc.free(c);
}

/* A handle the driver refuses (another host's, a forged one): its READs fail ACCESS, the
 * others go on, the driver's words are kept. */
static void test_handle_refused(void)
{
	struct kvl_ipc_conn *c = conn_new();
	struct kvl_ipc_rseg s[2] = { rseg(1, 1, 2, 0, 65536), rseg(2, 1, 0, 0, 65536) };
	struct kvl_ipc_stats st;

	dv.refuse[2] = true;
	kvl_xport_ipc.set_remote(c, s, 2);
	CHECK_INT(run1(c, &(struct kvl_wr){ .wr_id = 1,
					    .local = dst,
					    .length = 64,
					    .remote_seg = 1,
					    .op = KVL_OP_READ }),
		  KVL_ERR_ACCESS);
	CHECK_INT(run1(c, &(struct kvl_wr){ .wr_id = 2,
					    .local = dst,
					    .length = 64,
					    .remote_seg = 2,
					    .op = KVL_OP_READ }),
		  KVL_OK);
	CHECK(memcmp(dst, dv.alloc[0], 64) == 0);
	kvl_ipc_stats_read(c, &st);
	CHECK_INT(st.open_failures, 1);
	CHECK_INT(st.opens, 1);
	CHECK_HAS(st.last_open_error, "segment 1");
	CHECK_HAS(st.last_open_error, "CUDA_ERROR_INVALID_VALUE");
	/* a handle byte 0 past the driver's table: the same */
	s[0] = rseg(1, 2, 200, 0, 64);
	kvl_xport_ipc.set_remote(c, s, 2);
	CHECK_INT(run1(c, &(struct kvl_wr){ .wr_id = 3,
					    .local = dst,
					    .length = 64,
					    .remote_seg = 1,
					    .op = KVL_OP_READ }),
		  KVL_ERR_ACCESS);
	kvl_xport_ipc.free(c);
	CHECK_INT(dv.closes[2], 0); /* never opened, never closed */
	CHECK_INT(dv.closes[0], 1);
}

/* Freed on the serving side while a READ of it is in flight: that READ lands, the mapping
 * closes only then, later READs fail NO_SEGMENT. Then a new incarnation of an id. */
static void test_freed_and_stale(void)
{
	struct kvl_ipc_conn *c = conn_new();
	struct kvl_ipc_rseg s[2] = { rseg(1, 1, 0, 0, 65536), rseg(2, 1, 1, 0, 65536) };
	struct kvl_ipc_stats st;
	struct kvl_wr w = rd(1, 2, 100, 4096, dst);
	struct kvl_wc wc;
	int err = 0;

	kvl_xport_ipc.set_remote(c, s, 2);
	kvl_xport_ipc.progress(c);
	en.hold = true;
	CHECK_INT(kvl_xport_ipc.post(c, &w, 1, &err), 1);
	kvl_xport_ipc.set_remote(c, s, 1); /* segment 2 freed */
	kvl_xport_ipc.progress(c);
	CHECK_INT(dv.closes[1], 0); /* its copy is in flight: still mapped */
	/* a READ of the freed segment now: refused, moving nothing; it completes after the one
	 * in flight (in posting order) */
	w = rd(2, 2, 0, 64, dst + 8192);
	CHECK_INT(kvl_xport_ipc.post(c, &w, 1, &err), 1);
	kvl_xport_ipc.progress(c);
	CHECK_INT(kvl_xport_ipc.reap(c, &wc, 1), 0);
	en.hold = false;
	kvl_xport_ipc.progress(c);
	CHECK_INT(kvl_xport_ipc.reap(c, &wc, 1), 1);
	CHECK_INT(wc.status, KVL_OK);
	CHECK(memcmp(dst, dv.alloc[1] + 100, 4096) == 0);
	CHECK_INT(kvl_xport_ipc.reap(c, &wc, 1), 1);
	CHECK_INT(wc.status, KVL_ERR_NO_SEGMENT);
	kvl_xport_ipc.progress(c);
	CHECK_INT(dv.closes[1], 1); /* closed once its copy landed */

	/* segment 1 comes back as another allocation (a new gen): the old one closes, the new
	 * one opens, READs see the new bytes */
	s[0] = rseg(1, 2, 3, 512, 65536);
	kvl_xport_ipc.set_remote(c, s, 1);
	CHECK_INT(run1(c, &(struct kvl_wr){ .wr_id = 3,
					    .local = dst,
					    .length = 4096,
					    .remote_seg = 1,
					    .op = KVL_OP_READ }),
		  KVL_OK);
	CHECK(memcmp(dst, dv.alloc[3] + 512, 4096) == 0);
	CHECK_INT(dv.closes[0], 1);
	CHECK_INT(dv.opens[3], 1);
	kvl_ipc_stats_read(c, &st);
	CHECK_INT(st.stale, 1);
	CHECK_INT(en.bad_src, 0); /* the engine never saw a retired id */
	kvl_xport_ipc.free(c);
	CHECK_INT(dv.closes[3], 1);
}

static void test_fail_all_and_broken_engine(void)
{
	struct kvl_ipc_conn *c = conn_new();
	struct kvl_ipc_rseg s = rseg(1, 1, 0, 0, ALEN);
	struct kvl_wr w[3] = { rd(1, 1, 0, 1024, dst), rd(2, 1, 1024, 1024, dst + 1024),
			       rd(3, 1, 2048, 1024, dst + 2048) };
	struct kvl_wc wc[4];
	int err = 0;

	kvl_xport_ipc.set_remote(c, &s, 1);
	/* an engine that refuses for another reason than full: CONN_LOST, nothing hangs */
	kvl_xport_ipc.progress(c);
	en.fail_next = -EIO;
	CHECK_INT(kvl_xport_ipc.post(c, &w[0], 1, &err), 1);
	kvl_xport_ipc.progress(c);
	CHECK_INT(kvl_xport_ipc.reap(c, wc, 4), 1);
	CHECK_INT(wc[0].status, KVL_ERR_CONN_LOST);
	/* fail_all: what the engine holds lands first (its stream), later posts fail */
	en.hold = true;
	CHECK_INT(kvl_xport_ipc.post(c, w, 2, &err), 2);
	kvl_xport_ipc.fail_all(c, KVL_ERR_PEER_DEAD);
	CHECK(kvl_xport_ipc.broken(c));
	CHECK_INT(kvl_xport_ipc.post(c, &w[2], 1, &err), 1);
	kvl_xport_ipc.progress(c);
	CHECK_INT(kvl_xport_ipc.reap(c, wc, 4), 3);
	CHECK_INT(wc[0].status, KVL_OK);
	CHECK_INT(wc[2].status, KVL_ERR_PEER_DEAD);
	CHECK_INT(kvl_xport_ipc.outstanding(c), 0);
	kvl_xport_ipc.free(c);
	CHECK_INT(e_freed, 5);
}

static void test_full(void)
{
	struct kvl_ipc_conn *c = conn_new();
	struct kvl_ipc_rseg s = rseg(1, 1, 0, 0, ALEN);
	struct kvl_wr w[80];
	int err = 0;

	kvl_xport_ipc.set_remote(c, &s, 1);
	for (int i = 0; i < 80; i++)
		w[i] = rd((uint64_t)i, 1, (uint64_t)i * 64, 64, dst + i * 64);
	en.hold = true;
	CHECK_INT(kvl_xport_ipc.post(c, w, 80, &err), 64); /* depth 64 */
	CHECK_INT(err, -EAGAIN);
	kvl_xport_ipc.free(c); /* with everything outstanding: no leak, no fault (ASan) */
}

static void test_usable(void)
{
	struct kvl_ipc_facts f = { .enabled = true,
				   .peer_level = true,
				   .same_host = true,
				   .n_exported = 2,
				   .local_gpu = true,
				   .access = 1 };
	char why[160];

	CHECK_INT(kvl_ipc_usable(&f, why, sizeof(why)), 1);
	f.same_host = false;
	CHECK_INT(kvl_ipc_usable(&f, why, sizeof(why)), 0);
	CHECK_STR(why, "another host");
	f.same_host = true;
	f.peer_level = false;
	CHECK_INT(kvl_ipc_usable(&f, why, sizeof(why)), 0);
	CHECK_HAS(why, "older kvlane");
	f.peer_level = true;
	f.access = 0;
	CHECK_INT(kvl_ipc_usable(&f, why, sizeof(why)), 0);
	CHECK_HAS(why, "no peer access");
	f.access = -1;
	CHECK_INT(kvl_ipc_usable(&f, why, sizeof(why)), 0);
	CHECK_HAS(why, "UUID unknown");
	f.access = 1;
	f.local_gpu = false;
	CHECK_INT(kvl_ipc_usable(&f, why, sizeof(why)), 0);
	CHECK_HAS(why, "no GPU");
	f.local_gpu = true;
	f.n_exported = 0;
	CHECK_INT(kvl_ipc_usable(&f, why, sizeof(why)), 0);
	CHECK_HAS(why, "exports no GPU segment");
	f.n_exported = 1;
	f.same_process = true;
	CHECK_INT(kvl_ipc_usable(&f, why, sizeof(why)), 0);
	CHECK_HAS(why, "this process");
	f.same_process = false;
	f.enabled = false;
	CHECK_INT(kvl_ipc_usable(&f, why, sizeof(why)), 0);
	CHECK_STR(why, "ipc = off");
}

int main(void)
{
	struct kvl_ipc_opts bad = { 0 };

	for (unsigned i = 0; i < NALLOC; i++) {
		dv.alloc[i] = malloc(ALEN);
		for (unsigned k = 0; k < ALEN; k++)
			dv.alloc[i][k] = (uint8_t)(k * 31 + i * 7 + (k >> 8));
	}
	dst = calloc(1, 1 << 16);
	errno = 0;
	CHECK(kvl_ipc_new(&bad) == NULL && errno == EINVAL);
	test_open_once_and_move();
	test_refusals();
	test_handle_refused();
	test_freed_and_stale();
	test_fail_all_and_broken_engine();
	test_full();
	test_usable();
	for (unsigned i = 0; i < NALLOC; i++)
		free(dv.alloc[i]);
	free(dst);
	return kvl_test_done("ipc");
}
