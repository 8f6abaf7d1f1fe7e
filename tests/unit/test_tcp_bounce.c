/* SPDX-License-Identifier: BSD-3-Clause */
/* tcp READs into VRAM through the bounce buffers, with a scripted copier and no GPU. */
/*
 * The "VRAM" is a PROT_NONE mapping: a recv() or memcpy into it would fault, so every byte
 * that reaches it went through the copier. The scripted copier keeps each copy it was given
 * and moves the bytes only when the test completes it, reading the bounce buffer then (as a
 * DMA engine reads it at some time before its event), into a shadow of the VRAM: a buffer
 * reused before its copy completed would show as wrong bytes in the shadow.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include "kvl_test.h"
#include "tcp_data.h"

#define PG	 4096u
#define VRAM_LEN (256u * PG)
#define MAXC	 4096

struct copy {
	uintptr_t dst;
	const uint8_t *src;
	uint32_t len;
};

/* The scripted copier: copies [done, started) wait for the test. */
struct fake {
	uint8_t *vram, *shadow;
	struct copy c[MAXC];
	uint64_t started, done;
	int fail_start, fail_completed; /* errno to fail with, 0: work */
	unsigned frees;
};

static int f_start(void *arg, uintptr_t dst, const void *src, uint32_t len)
{
	struct fake *f = arg;

	if (f->fail_start)
		return -f->fail_start;
	CHECK(f->started - f->done < MAXC);
	/* only ever into the VRAM, whole */
	CHECK(dst >= (uintptr_t)f->vram && dst + len <= (uintptr_t)f->vram + VRAM_LEN);
	f->c[f->started % MAXC] = (struct copy){ dst, src, len };
	f->started++;
	return 0;
}

static int64_t f_completed(void *arg)
{
	struct fake *f = arg;

	return f->fail_completed ? -f->fail_completed : (int64_t)f->done;
}

static void f_free(void *arg)
{
	((struct fake *)arg)->frees++;
}

static const struct kvl_tcp_bounce_ops fake_ops = { f_start, f_completed, f_free };

/* Complete up to @n waiting copies (all: ~0u), moving their bytes now. */
static unsigned complete_copies(struct fake *f, unsigned n)
{
	unsigned k = 0;

	for (; k < n && f->done < f->started; k++, f->done++) {
		const struct copy *c = &f->c[f->done % MAXC];

		memcpy(f->shadow + (c->dst - (uintptr_t)f->vram), c->src, c->len);
	}
	return k;
}

static struct kvl_seg_table ta, tb;
static uint8_t *vram, *shadow, *host, *served, *bounce;

static void pattern(uint8_t *p, size_t len, unsigned seed)
{
	for (size_t i = 0; i < len; i++)
		p[i] = (uint8_t)(i * 131 + seed * 7 + (i >> 9));
}

/* a: the initiator, with a host segment 1 and a GPU segment 2; b: serves segment 1. */
static void pair(struct kvl_tcp_conn **a, struct kvl_tcp_conn **b, unsigned depth)
{
	int fds[2];

	CHECK_INT(socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
	*a = kvl_tcp_conn_new(fds[0], &ta, depth);
	*b = kvl_tcp_conn_new(fds[1], &tb, depth);
	CHECK(*a != NULL && *b != NULL);
}

static struct kvl_wr rd(uint64_t id, void *local, uint32_t len, uint64_t roff)
{
	struct kvl_wr w;

	memset(&w, 0, sizeof(w));
	w.wr_id = id;
	w.op = KVL_OP_READ;
	w.local = local;
	w.length = len;
	w.remote_seg = 1;
	w.remote_off = roff;
	return w;
}

/* Progress both ends @spins times, completing copies as @f allows (@per_spin each time). */
static unsigned pump(struct kvl_tcp_conn *a, struct kvl_tcp_conn *b, struct fake *f,
		     unsigned per_spin, struct kvl_wc *wc, unsigned want, unsigned spins)
{
	unsigned got = 0;

	for (unsigned s = 0; s < spins && got < want; s++) {
		kvl_tcp_progress(a);
		kvl_tcp_progress(b);
		if (f != NULL)
			complete_copies(f, per_spin);
		got += kvl_tcp_reap(a, wc + got, want - got);
	}
	return got;
}

static void setup(void)
{
	vram = mmap(NULL, VRAM_LEN, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	shadow = calloc(1, VRAM_LEN);
	host = calloc(1, VRAM_LEN);
	served = malloc(VRAM_LEN);
	bounce = malloc(64 * PG);
	CHECK(vram != MAP_FAILED && shadow && host && served && bounce);
	pattern(served, VRAM_LEN, 3);
	tb.seg[0] = (struct kvl_seg){
		.base = served, .len = VRAM_LEN, .id = 1, .flags = KVL_SEG_REMOTE_READ
	};
	tb.live[0] = true;
	ta.seg[0] = (struct kvl_seg){ .base = host, .len = VRAM_LEN, .id = 1 };
	ta.seg[1] =
		(struct kvl_seg){ .base = vram, .len = VRAM_LEN, .id = 2, .flags = KVL_SEG_GPU };
	ta.live[0] = ta.live[1] = true;
}

/* Set-up errors, and what stays refused with a bounce: a WRITE out of VRAM. */
static void set_bounce_rules(void)
{
	static struct fake f;
	struct kvl_tcp_conn *a, *b;
	struct kvl_tcp_bounce bn = { &fake_ops, &f, bounce, 4 * PG, 4 };
	struct kvl_tcp_bounce bad = bn;
	struct kvl_wr w = rd(1, vram, PG, 0);

	pair(&a, &b, 16);
	/* without a bounce a READ into VRAM is refused at post, as before */
	CHECK_INT(kvl_tcp_post(a, &w), -EXDEV);
	CHECK_INT(kvl_xport_stats(a)->failed[KVL_ERR_GPU_MEMORY], 1);
	bad.n_bufs = 0;
	CHECK_INT(kvl_tcp_set_bounce(a, &bad), -EINVAL);
	bad = bn;
	bad.mem = NULL;
	CHECK_INT(kvl_tcp_set_bounce(a, &bad), -EINVAL);
	bad = bn;
	bad.ops = NULL;
	CHECK_INT(kvl_tcp_set_bounce(a, &bad), -EINVAL);
	CHECK_INT(kvl_tcp_set_bounce(a, &bn), 0);
	CHECK_INT(kvl_tcp_set_bounce(a, &bn), -EINVAL); /* once */
	/* sending from VRAM has no copy path: still refused, nothing queued */
	w.op = KVL_OP_WRITE;
	CHECK_INT(kvl_tcp_post(a, &w), -EXDEV);
	CHECK_INT(kvl_xport_stats(a)->failed[KVL_ERR_GPU_MEMORY], 2);
	CHECK_INT(kvl_tcp_outstanding(a), 0);
	/* a bounce after a post: too late */
	w = rd(2, host, PG, 0);
	CHECK_INT(kvl_tcp_post(b, &w), 0); /* b: any post */
	CHECK_INT(kvl_tcp_set_bounce(b, &bn), -EINVAL);
	kvl_tcp_conn_free(a);
	CHECK_INT(f.frees, 1); /* the connection owned it */
	kvl_tcp_conn_free(b);
	CHECK_INT(f.frees, 1);
}

/*
 * One 1 MiB READ through 4 buffers of 16 KiB: the receive stops while every buffer is in
 * flight, the READ is not reaped before its last copy completed, and then every byte in the
 * VRAM is the served one.
 */
static void big_read(void)
{
	static struct fake f;
	struct kvl_tcp_conn *a, *b;
	struct kvl_tcp_bounce bn = { &fake_ops, &f, bounce, 4 * PG, 4 };
	const uint32_t len = 256 * PG;
	struct kvl_wr w = rd(7, vram, len, 0);
	const struct kvl_xport_stats *st;
	struct kvl_wc wc[2];

	f.vram = vram;
	f.shadow = shadow;
	memset(shadow, 0, VRAM_LEN);
	pair(&a, &b, 16);
	CHECK_INT(kvl_tcp_set_bounce(a, &bn), 0);
	CHECK_INT(kvl_tcp_post(a, &w), 0);
	/* no copy completes: four buffers fill, then the receive waits */
	CHECK_INT(pump(a, b, &f, 0, wc, 1, 2000), 0);
	st = kvl_xport_stats(a);
	CHECK_INT(f.started, 4);
	CHECK_INT(st->gpu_copies, 4);
	CHECK_INT(st->gpu_bounce_bytes, 16 * PG);
	CHECK(st->gpu_bounce_waits >= 1);
	CHECK_INT(kvl_tcp_outstanding(a), 1);
	/* one copy at a time: the READ is reaped once the last of its 64 copies is done */
	CHECK_INT(pump(a, b, &f, 1, wc, 1, 200000), 1);
	CHECK_INT(wc[0].wr_id, 7);
	CHECK_INT(wc[0].status, KVL_OK);
	CHECK_INT(wc[0].bytes, len);
	CHECK_INT(f.done, 64);
	CHECK_INT(f.started, 64);
	CHECK_INT(st->gpu_copies, 64);
	CHECK_INT(st->gpu_copies_done, 64);
	CHECK_INT(st->gpu_bounce_bytes, len);
	CHECK_INT(st->done_read, 1);
	CHECK_INT(st->bytes_read, len);
	CHECK(st->gpu_copy_ns > 0);
	CHECK(memcmp(shadow, served, len) == 0);
	kvl_tcp_conn_free(a);
	kvl_tcp_conn_free(b);
	CHECK_INT(f.frees, 1);
}

/*
 * Small READs, host and VRAM interleaved, at offsets that leave each payload's start in the
 * staging buffer (batched headers): completions in posting order, a host READ behind a VRAM
 * one waits for that one's copy, every byte where it belongs, guards around them untouched.
 */
static void mixed_reads(void)
{
	static struct fake f;
	struct kvl_tcp_conn *a, *b;
	struct kvl_tcp_bounce bn = { &fake_ops, &f, bounce, 2 * PG, 8 };
	enum { N = 48 };
	struct kvl_wc wc[N];
	uint32_t len[N];
	uint64_t off[N];
	unsigned got;

	f.vram = vram;
	f.shadow = shadow;
	memset(shadow, 0xee, VRAM_LEN);
	memset(host, 0xee, VRAM_LEN);
	pair(&a, &b, 64);
	CHECK_INT(kvl_tcp_set_bounce(a, &bn), 0);
	for (unsigned i = 0; i < N; i++) {
		len[i] = 64 + i * 373; /* up to ~17 KiB: some in one buffer, some in several */
		off[i] = (uint64_t)i * 5 * PG + 8;
		struct kvl_wr w = rd(100 + i, (i % 3 ? vram : host) + off[i], len[i], off[i] + i);

		CHECK_INT(kvl_tcp_post(a, &w), 0);
	}
	/* nothing completes until the copies do; then in order */
	got = pump(a, b, &f, 0, wc, N, 3000);
	CHECK(got < N);
	for (unsigned i = 0; i < got; i++)
		CHECK(i % 3 == 0); /* only host READs ahead of the first VRAM one */
	got += pump(a, b, &f, 2, wc + got, N - got, 200000);
	CHECK_INT(got, N);
	for (unsigned i = 0; i < N; i++) {
		uint8_t *mem = i % 3 ? shadow : host;

		CHECK_INT(wc[i].wr_id, 100 + i);
		CHECK_INT(wc[i].status, KVL_OK);
		CHECK(memcmp(mem + off[i], served + off[i] + i, len[i]) == 0);
		CHECK_INT(mem[off[i] - 1], 0xee);
		CHECK_INT(mem[off[i] + len[i]], 0xee);
	}
	CHECK_INT(kvl_xport_stats(a)->gpu_copies, f.started);
	CHECK_INT(kvl_xport_stats(a)->done_read, N);
	kvl_tcp_conn_free(a);
	kvl_tcp_conn_free(b);
}

/* A copier that fails: the connection breaks with gpu-memory, and a READ whose bytes were
 * received but never copied completes with gpu-memory, not OK. */
static void copier_fails(void)
{
	static struct fake f;
	struct kvl_tcp_conn *a, *b;
	struct kvl_tcp_bounce bn = { &fake_ops, &f, bounce, 4 * PG, 4 };
	struct kvl_wc wc[4];
	struct kvl_wr w;

	/* (1) completed() says the stream failed, after the payload arrived */
	memset(&f, 0, sizeof(f));
	f.vram = vram;
	f.shadow = shadow;
	pair(&a, &b, 16);
	CHECK_INT(kvl_tcp_set_bounce(a, &bn), 0);
	w = rd(1, vram, 2 * PG, 0);
	CHECK_INT(kvl_tcp_post(a, &w), 0);
	CHECK_INT(pump(a, b, &f, 0, wc, 1, 2000), 0);
	CHECK_INT(f.started, 1);
	f.fail_completed = EIO;
	CHECK_INT(pump(a, b, NULL, 0, wc, 1, 100), 1);
	CHECK_INT(wc[0].status, KVL_ERR_GPU_MEMORY);
	CHECK_INT(wc[0].bytes, 0);
	CHECK_INT(kvl_tcp_broken(a), KVL_ERR_GPU_MEMORY);
	CHECK_INT(kvl_xport_stats(a)->done_read, 0);
	CHECK_INT(kvl_xport_stats(a)->failed[KVL_ERR_GPU_MEMORY], 1);
	CHECK_INT(kvl_tcp_outstanding(a), 0);
	kvl_tcp_conn_free(a);
	kvl_tcp_conn_free(b);

	/* (2) start() refuses: the same, and the READs behind it fail too */
	memset(&f, 0, sizeof(f));
	f.vram = vram;
	f.shadow = shadow;
	f.fail_start = ENOMEM;
	pair(&a, &b, 16);
	CHECK_INT(kvl_tcp_set_bounce(a, &bn), 0);
	w = rd(1, vram, 2 * PG, 0);
	CHECK_INT(kvl_tcp_post(a, &w), 0);
	w = rd(2, host, PG, 0);
	CHECK_INT(kvl_tcp_post(a, &w), 0);
	CHECK_INT(pump(a, b, &f, 0, wc, 2, 2000), 2);
	CHECK_INT(wc[0].status, KVL_ERR_GPU_MEMORY);
	CHECK_INT(wc[1].status, KVL_ERR_GPU_MEMORY);
	CHECK_INT(kvl_tcp_broken(a), KVL_ERR_GPU_MEMORY);
	kvl_tcp_conn_free(a);
	kvl_tcp_conn_free(b);
	CHECK_INT(f.frees, 1);
}

int main(void)
{
	setup();
	set_bounce_rules();
	big_read();
	mixed_reads();
	copier_fails();
	return kvl_test_done("tcp_bounce");
}
