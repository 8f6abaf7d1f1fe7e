/* SPDX-License-Identifier: BSD-3-Clause */
/* Unit test of the TCP data transport: both ends in one thread, over socketpair and loopback. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "kvl_test.h"
#include "tcp_data.h"

enum transport { UNIX_PAIR, TCP_LOOP };
static const char *const transport_name[] = { "socketpair", "tcp" };

#define WC_MAX	    1024
#define IDLE_LIMIT  20000    /* consecutive idle turns before a drive is declared stuck */
#define TURNS_LIMIT 4000000L /* absolute bound: a test fails, it never hangs */
#define KIB	    1024u
#define MIB	    (1024u * 1024u)

/* One end of a connection: the transport, its segment table, its reaped completions. */
struct end {
	struct kvl_tcp_conn *c;
	struct kvl_seg_table segs;
	struct kvl_wc wc[WC_MAX];
	unsigned n;
};

static struct end end_a, end_b;

static void *xmalloc(size_t n)
{
	void *p = malloc(n ? n : 1);

	if (p == NULL) {
		fprintf(stderr, "out of memory (%zu bytes)\n", n);
		exit(2);
	}
	return p;
}

static int tcp_pair(int fds[2])
{
	struct sockaddr_in sa = { .sin_family = AF_INET };
	socklen_t len = sizeof(sa);
	int l, c = -1, s = -1;

	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	l = socket(AF_INET, SOCK_STREAM, 0);
	if (l < 0)
		return -1;
	if (bind(l, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(l, 1) < 0 ||
	    getsockname(l, (struct sockaddr *)&sa, &len) < 0)
		goto fail;
	c = socket(AF_INET, SOCK_STREAM, 0);
	if (c < 0 || connect(c, (struct sockaddr *)&sa, sizeof(sa)) < 0)
		goto fail;
	s = accept(l, NULL, NULL);
	if (s < 0)
		goto fail;
	close(l);
	fds[0] = c;
	fds[1] = s;
	return 0;
fail:
	if (c >= 0)
		close(c);
	close(l);
	return -1;
}

static void make_fds(enum transport t, int fds[2])
{
	int rc = t == TCP_LOOP ? tcp_pair(fds) : socketpair(AF_UNIX, SOCK_STREAM, 0, fds);

	if (rc < 0) {
		perror(transport_name[t]);
		exit(2);
	}
}

static void add_seg(struct kvl_seg_table *t, uint32_t id, uint8_t *base, uint64_t len,
		    uint32_t flags)
{
	t->seg[id - 1] = (struct kvl_seg){ .base = base, .len = len, .id = id, .flags = flags };
	__atomic_store_n(&t->live[id - 1], true, __ATOMIC_RELEASE);
}

/* Both ends connected over @t; segment tables are filled by the caller before or after. */
static void open_pair(enum transport t, unsigned depth)
{
	int fds[2];

	memset(&end_a, 0, sizeof(end_a));
	memset(&end_b, 0, sizeof(end_b));
	make_fds(t, fds);
	end_a.c = kvl_tcp_conn_new(fds[0], &end_a.segs, depth);
	end_b.c = kvl_tcp_conn_new(fds[1], &end_b.segs, depth);
	if (end_a.c == NULL || end_b.c == NULL) {
		perror("kvl_tcp_conn_new");
		exit(2);
	}
}

static void close_end(struct end *e)
{
	kvl_tcp_conn_free(e->c);
	e->c = NULL;
}

static void reap_into(struct end *e)
{
	if (e->c != NULL && e->n < WC_MAX)
		e->n += kvl_tcp_reap(e->c, e->wc + e->n, WC_MAX - e->n);
}

/* Progress both ends until each has reaped @want_a / @want_b completions; false if stuck. */
static bool drive(unsigned want_a, unsigned want_b)
{
	unsigned idle = 0;

	for (long turn = 0; turn < TURNS_LIMIT && idle < IDLE_LIMIT; turn++) {
		unsigned w = 0;

		if (end_a.c != NULL)
			w += kvl_tcp_progress(end_a.c);
		if (end_b.c != NULL)
			w += kvl_tcp_progress(end_b.c);
		reap_into(&end_a);
		reap_into(&end_b);
		if (end_a.n >= want_a && end_b.n >= want_b)
			return true;
		idle = w ? 0 : idle + 1;
	}
	fprintf(stderr, "drive stuck: a %u/%u, b %u/%u completions\n", end_a.n, want_a, end_b.n,
		want_b);
	return false;
}

/* Progress both ends until neither has anything left to do, without reaping. */
static void settle(void)
{
	unsigned idle = 0;

	for (long turn = 0; turn < TURNS_LIMIT && idle < 64; turn++) {
		unsigned w = kvl_tcp_progress(end_a.c) + kvl_tcp_progress(end_b.c);

		idle = w ? 0 : idle + 1;
	}
}

static int post(struct kvl_tcp_conn *c, uint8_t op, uint64_t wr_id, void *local, uint32_t seg,
		uint64_t off, uint32_t len)
{
	struct kvl_wr wr = { .wr_id = wr_id,
			     .local = local,
			     .remote_off = off,
			     .length = len,
			     .remote_seg = seg,
			     .op = op };

	return kvl_tcp_post(c, &wr);
}

/* ---- header ---- */

static void test_header(void)
{
	static const uint8_t vec[KVL_TCP_HDR_LEN] = {
		0x4b, 0x56, 0x4c, 0x44,				/* magic "KVLD" */
		0x04,						/* type READ_RESP */
		0x07,						/* status */
		0x5a, 0xa5,					/* reserved 0xa55a */
		0x04, 0x03, 0x02, 0x01,				/* seg_id */
		0x00, 0x00, 0x10, 0x00,				/* length 1 MiB */
		0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11, /* req_id */
		0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0xf8, /* offset */
	};
	struct kvl_tcp_hdr h = { .magic = KVL_TCP_MAGIC,
				 .type = KVL_TCP_READ_RESP,
				 .status = 7,
				 .reserved = 0xa55a,
				 .seg_id = 0x01020304,
				 .length = 0x00100000,
				 .req_id = 0x1122334455667788ull,
				 .offset = 0xf877665544332211ull };
	struct kvl_tcp_hdr d;
	uint8_t out[KVL_TCP_HDR_LEN];

	memset(out, 0xcc, sizeof(out));
	kvl_tcp_hdr_encode(&h, out);
	CHECK(memcmp(out, vec, sizeof(vec)) == 0);
	CHECK(memcmp(out, "KVLD", 4) == 0);
	memset(&d, 0, sizeof(d));
	kvl_tcp_hdr_decode(vec, &d);
	CHECK_INT(d.magic, KVL_TCP_MAGIC);
	CHECK_INT(d.type, KVL_TCP_READ_RESP);
	CHECK_INT(d.status, 7);
	CHECK_INT(d.reserved, 0xa55a);
	CHECK_INT(d.seg_id, 0x01020304);
	CHECK_INT(d.length, 0x00100000);
	CHECK(d.req_id == 0x1122334455667788ull);
	CHECK(d.offset == 0xf877665544332211ull);
}

/* ---- data moves ---- */

/* Expected socket bytes, for comparing the stats with what the test moved. */
struct expect {
	uint64_t a_tx, b_tx;
	uint64_t writes, reads, wbytes, rbytes;
};

/* WRITE then READ back (posted together: the target serves in order) for each size. */
static void test_write_read(enum transport t, const uint32_t *sizes, unsigned nsizes)
{
	uint32_t max = 0;
	uint8_t *seg, *src, *dst;
	struct expect ex = { 0 };
	uint64_t seg_len;

	for (unsigned i = 0; i < nsizes; i++)
		max = sizes[i] > max ? sizes[i] : max;
	seg_len = (uint64_t)max + 8 * KIB;
	seg = xmalloc(seg_len);
	src = xmalloc(max);
	dst = xmalloc(max);
	open_pair(t, 64);
	add_seg(&end_b.segs, 1, seg, seg_len, KVL_SEG_REMOTE_READ | KVL_SEG_REMOTE_WRITE);

	for (unsigned i = 0; i < nsizes; i++) {
		uint32_t len = sizes[i];
		uint64_t off = (uint64_t)i * 4097 % (8 * KIB);

		kvl_test_fill_random(src, len);
		memset(dst, 0xee, len);
		end_a.n = 0;
		CHECK_INT(post(end_a.c, KVL_OP_WRITE, 100 + i, src, 1, off, len), 0);
		CHECK_INT(post(end_a.c, KVL_OP_READ, 200 + i, dst, 1, off, len), 0);
		CHECK(drive(2, 0));
		CHECK_INT(end_a.n, 2);
		CHECK_INT(end_a.wc[0].wr_id, 100 + i);
		CHECK_INT(end_a.wc[0].status, KVL_OK);
		CHECK_INT(end_a.wc[0].bytes, len);
		CHECK_INT(end_a.wc[1].wr_id, 200 + i);
		CHECK_INT(end_a.wc[1].status, KVL_OK);
		CHECK_INT(end_a.wc[1].bytes, len);
		if (len != 0) {
			CHECK(memcmp(seg + off, src, len) == 0);
			CHECK(memcmp(dst, src, len) == 0);
		}
		ex.a_tx += 2 * KVL_TCP_HDR_LEN + len;
		ex.b_tx += 2 * KVL_TCP_HDR_LEN + len;
		ex.writes++;
		ex.reads++;
		ex.wbytes += len;
		ex.rbytes += len;
	}
	CHECK_INT(kvl_tcp_outstanding(end_a.c), 0);
	CHECK_INT(kvl_tcp_broken(end_a.c), 0);
	CHECK_INT(kvl_tcp_broken(end_b.c), 0);

	const struct kvl_xport_stats *sa = kvl_xport_stats(end_a.c), *sb = kvl_xport_stats(end_b.c);

	CHECK_INT(sa->tx_bytes, ex.a_tx);
	CHECK_INT(sb->rx_bytes, ex.a_tx);
	CHECK_INT(sb->tx_bytes, ex.b_tx);
	CHECK_INT(sa->rx_bytes, ex.b_tx);
	CHECK_INT(sa->posted_write, ex.writes);
	CHECK_INT(sa->posted_read, ex.reads);
	CHECK_INT(sa->done_write, ex.writes);
	CHECK_INT(sa->done_read, ex.reads);
	CHECK_INT(sa->bytes_written, ex.wbytes);
	CHECK_INT(sa->bytes_read, ex.rbytes);
	CHECK_INT(sb->served_write, ex.writes);
	CHECK_INT(sb->served_read, ex.reads);
	CHECK_INT(sb->served_bytes, ex.wbytes + ex.rbytes);
	CHECK_INT(sb->posted_write + sb->posted_read + sa->served_write + sa->served_read, 0);
	for (int s = 0; s < KVL_STATUS_COUNT; s++) {
		CHECK_INT(sa->failed[s] + sa->refused[s], 0);
		CHECK_INT(sb->failed[s] + sb->refused[s], 0);
	}
	close_end(&end_a);
	close_end(&end_b);
	free(seg);
	free(src);
	free(dst);
}

/* A full window of small writes, -EAGAIN beyond it until a completion is reaped. */
static void test_window(enum transport t)
{
	enum { DEPTH = 64, LEN = 1024 };
	uint8_t *seg = xmalloc(DEPTH * LEN), *src = xmalloc(DEPTH * LEN);
	bool order = true, ok = true;

	open_pair(t, DEPTH);
	add_seg(&end_b.segs, 1, seg, DEPTH * LEN, KVL_SEG_REMOTE_WRITE);
	kvl_test_fill_random(src, DEPTH * LEN);

	CHECK_INT(post(end_a.c, 3, 1, src, 1, 0, 1), -EINVAL);
	CHECK_INT(post(end_a.c, KVL_OP_WRITE, 1, NULL, 1, 0, 1), -EINVAL);
	CHECK_INT(post(end_a.c, KVL_OP_WRITE, 1, src, 1, 0, KVL_TCP_MAX_MSG + 1), -EMSGSIZE);
	CHECK_INT(kvl_tcp_outstanding(end_a.c), 0);
	for (unsigned i = 0; i < DEPTH; i++)
		ok &= post(end_a.c, KVL_OP_WRITE, i, src + i * LEN, 1, i * LEN, LEN) == 0;
	CHECK(ok);
	CHECK_INT(kvl_tcp_outstanding(end_a.c), DEPTH);
	CHECK_INT(post(end_a.c, KVL_OP_WRITE, 999, src, 1, 0, LEN), -EAGAIN);
	/* Completed but not reaped still holds its slot. */
	settle();
	CHECK_INT(kvl_tcp_outstanding(end_a.c), DEPTH);
	CHECK_INT(post(end_a.c, KVL_OP_WRITE, 999, src, 1, 0, LEN), -EAGAIN);
	CHECK_INT(kvl_tcp_reap(end_a.c, end_a.wc, 1), 1);
	CHECK_INT(kvl_tcp_outstanding(end_a.c), DEPTH - 1);
	CHECK_INT(post(end_a.c, KVL_OP_WRITE, DEPTH, src, 1, 0, LEN), 0);
	CHECK_INT(post(end_a.c, KVL_OP_WRITE, 999, src, 1, 0, LEN), -EAGAIN);
	end_a.n = 1;
	CHECK(drive(DEPTH + 1, 0));
	for (unsigned i = 0; i < end_a.n; i++) {
		order &= end_a.wc[i].wr_id == i;
		ok &= end_a.wc[i].status == KVL_OK && end_a.wc[i].bytes == LEN;
	}
	CHECK_INT(end_a.n, DEPTH + 1);
	CHECK(order);
	CHECK(ok);
	CHECK(memcmp(seg, src, DEPTH * LEN) == 0);
	CHECK_INT(kvl_xport_stats(end_b.c)->served_write, DEPTH + 1);
	CHECK_INT(kvl_tcp_outstanding(end_a.c), 0);
	close_end(&end_a);
	close_end(&end_b);
	free(seg);
	free(src);
}

/* Both ends post WRITEs and READs to each other at once. */
static void test_symmetric(enum transport t)
{
	enum { N = 24, SLOT = 80 * KIB };
	static const uint32_t lens[] = { 1, 4095, 16 * KIB, 64 * KIB, 0, 77 * KIB };
	struct end *e[2] = { &end_a, &end_b };
	uint8_t *wseg[2], *rseg[2], *src[2], *dst[2];
	bool ok = true;

	open_pair(t, 16);
	for (int s = 0; s < 2; s++) {
		wseg[s] = xmalloc(N * SLOT);
		rseg[s] = xmalloc(N * SLOT);
		src[s] = xmalloc(N * SLOT);
		dst[s] = xmalloc(N * SLOT);
		kvl_test_fill_random(rseg[s], N * SLOT);
		kvl_test_fill_random(src[s], N * SLOT);
		memset(dst[s], 0, N * SLOT);
		add_seg(&e[s]->segs, 1, wseg[s], N * SLOT, KVL_SEG_REMOTE_WRITE);
		add_seg(&e[s]->segs, 2, rseg[s], N * SLOT, KVL_SEG_REMOTE_READ);
	}
	/* Post as the window allows, on both ends, progressing both between posts. */
	unsigned next[2] = { 0, 0 }, idle = 0;

	for (long turn = 0; turn < TURNS_LIMIT && idle < IDLE_LIMIT; turn++) {
		unsigned w = 0;

		for (int s = 0; s < 2; s++) {
			while (next[s] < 2 * N) {
				unsigned i = next[s] / 2;
				uint32_t len = lens[i % 6];
				int rc = next[s] % 2 ? post(e[s]->c, KVL_OP_READ, next[s],
							    dst[s] + i * SLOT, 2, i * SLOT, len)
						     : post(e[s]->c, KVL_OP_WRITE, next[s],
							    src[s] + i * SLOT, 1, i * SLOT, len);
				if (rc == -EAGAIN)
					break;
				ok &= rc == 0;
				next[s]++;
				w++;
			}
			w += kvl_tcp_progress(e[s]->c);
			reap_into(e[s]);
		}
		if (end_a.n == 2 * N && end_b.n == 2 * N)
			break;
		idle = w ? 0 : idle + 1;
	}
	CHECK(ok);
	for (int s = 0; s < 2; s++) {
		bool order = true, status = true, data = true;

		CHECK_INT(e[s]->n, 2 * N);
		for (unsigned k = 0; k < e[s]->n; k++) {
			unsigned i = k / 2;
			uint32_t len = lens[i % 6];

			order &= e[s]->wc[k].wr_id == k;
			status &= e[s]->wc[k].status == KVL_OK && e[s]->wc[k].bytes == len;
			/* s wrote into the other end's wseg, read the other end's rseg. */
			data &= memcmp(wseg[!s] + i * SLOT, src[s] + i * SLOT, len) == 0;
			data &= memcmp(dst[s] + i * SLOT, rseg[!s] + i * SLOT, len) == 0;
		}
		CHECK(order);
		CHECK(status);
		CHECK(data);
		CHECK_INT(kvl_xport_stats(e[s]->c)->served_write, N);
		CHECK_INT(kvl_xport_stats(e[s]->c)->served_read, N);
		CHECK_INT(kvl_xport_stats(e[s]->c)->done_write +
				  kvl_xport_stats(e[s]->c)->done_read,
			  2 * N);
	}
	CHECK_INT(kvl_xport_stats(end_a.c)->tx_bytes, kvl_xport_stats(end_b.c)->rx_bytes);
	CHECK_INT(kvl_xport_stats(end_b.c)->tx_bytes, kvl_xport_stats(end_a.c)->rx_bytes);
	close_end(&end_a);
	close_end(&end_b);
	for (int s = 0; s < 2; s++) {
		free(wseg[s]);
		free(rseg[s]);
		free(src[s]);
		free(dst[s]);
	}
}

/* Refused requests get typed statuses; those around them on the same stream still work. */
static void test_refusals(enum transport t)
{
	enum { SEG = 64 * KIB };
	uint8_t *rw = xmalloc(SEG), *ro = xmalloc(SEG), *wo = xmalloc(SEG);
	uint8_t *ro_copy = xmalloc(SEG), *src = xmalloc(2 * MIB), *dst = xmalloc(SEG);
	struct {
		uint8_t op;
		uint32_t seg;
		uint64_t off;
		uint32_t len;
		int status;
	} rq[] = {
		{ KVL_OP_WRITE, 1, 0, 4096, KVL_OK },
		{ KVL_OP_WRITE, 1, SEG - 100, 4096, KVL_ERR_BOUNDS },
		{ KVL_OP_READ, 1, 0, 4096, KVL_OK },
		{ KVL_OP_WRITE, 1, UINT64_MAX - 10, 4096, KVL_ERR_BOUNDS }, /* off + len wraps */
		{ KVL_OP_READ, 1, UINT64_MAX, 1, KVL_ERR_BOUNDS },
		{ KVL_OP_READ, 1, SEG + 1, 0, KVL_ERR_BOUNDS },
		{ KVL_OP_WRITE, 9, 0, 100, KVL_ERR_NO_SEGMENT }, /* never registered */
		{ KVL_OP_READ, 0, 0, 100, KVL_ERR_NO_SEGMENT },	 /* id 0 is never valid */
		{ KVL_OP_READ, 1000, 0, 100, KVL_ERR_NO_SEGMENT },
		{ KVL_OP_WRITE, 2, 0, 100, KVL_ERR_ACCESS },	 /* read-only */
		{ KVL_OP_READ, 3, 0, 100, KVL_ERR_ACCESS },	 /* write-only */
		{ KVL_OP_WRITE, 1, 1, 2 * MIB, KVL_ERR_BOUNDS }, /* 2 MiB drained through scratch */
		{ KVL_OP_WRITE, 2, 0, 0, KVL_ERR_ACCESS },
		{ KVL_OP_READ, 2, 100, 4096, KVL_OK },
		{ KVL_OP_WRITE, 3, 8, 4096, KVL_OK },
		{ KVL_OP_READ, 1, 0, 4096, KVL_OK },
	};
	const unsigned n = sizeof(rq) / sizeof(rq[0]);
	uint64_t refused[KVL_STATUS_COUNT] = { 0 };
	unsigned ok_w = 0, ok_r = 0;

	open_pair(t, 64);
	kvl_test_fill_random(rw, SEG);
	kvl_test_fill_random(ro, SEG);
	kvl_test_fill_random(wo, SEG);
	kvl_test_fill_random(src, 2 * MIB);
	memcpy(ro_copy, ro, SEG);
	add_seg(&end_b.segs, 1, rw, SEG, KVL_SEG_REMOTE_READ | KVL_SEG_REMOTE_WRITE);
	add_seg(&end_b.segs, 2, ro, SEG, KVL_SEG_REMOTE_READ);
	add_seg(&end_b.segs, 3, wo, SEG, KVL_SEG_REMOTE_WRITE);

	for (unsigned i = 0; i < n; i++) {
		void *local = rq[i].op == KVL_OP_WRITE ? (void *)src : (void *)dst;

		if (rq[i].op == KVL_OP_READ)
			local = dst + (i % 4) * 4096;
		CHECK_INT(post(end_a.c, rq[i].op, i, local, rq[i].seg, rq[i].off, rq[i].len), 0);
	}
	CHECK(drive(n, 0));
	CHECK_INT(end_a.n, n);
	for (unsigned i = 0; i < end_a.n && i < n; i++) {
		const struct kvl_wc *wc = &end_a.wc[i];

		CHECK_INT(wc->wr_id, i);
		CHECK_INT(wc->status, rq[i].status);
		CHECK_INT(wc->bytes, rq[i].status == KVL_OK ? rq[i].len : 0);
		if (rq[i].status != KVL_OK)
			refused[rq[i].status]++;
		else if (rq[i].op == KVL_OP_WRITE)
			ok_w++;
		else
			ok_r++;
	}
	/* The refused writes touched nothing; the accepted ones landed; reads saw them. */
	CHECK(memcmp(ro, ro_copy, SEG) == 0);
	CHECK(memcmp(rw, src, 4096) == 0);
	CHECK(memcmp(wo + 8, src, 4096) == 0);
	CHECK(memcmp(dst + 2 * 4096, src, 4096) == 0);	    /* rq 2: READ seg 1 after rq 0 */
	CHECK(memcmp(dst + 1 * 4096, ro + 100, 4096) == 0); /* rq 13 */
	CHECK(memcmp(dst + 3 * 4096, src, 4096) == 0);	    /* rq 15 */

	const struct kvl_xport_stats *sa = kvl_xport_stats(end_a.c), *sb = kvl_xport_stats(end_b.c);
	bool counters = true;

	for (int s = 1; s < KVL_STATUS_COUNT; s++) {
		counters &= sb->refused[s] == refused[s];
		counters &= sa->failed[s] == refused[s];
	}
	CHECK(counters);
	CHECK_INT(sb->refused[KVL_ERR_BOUNDS], 5);
	CHECK_INT(sa->failed[KVL_ERR_NO_SEGMENT], 3);
	CHECK_INT(sa->done_write, ok_w);
	CHECK_INT(sa->done_read, ok_r);
	CHECK_INT(sb->served_write, ok_w);
	CHECK_INT(sb->served_read, ok_r);
	CHECK_INT(sa->tx_bytes, sb->rx_bytes);
	CHECK_INT(sb->tx_bytes, sa->rx_bytes);
	CHECK_INT(kvl_tcp_broken(end_a.c), 0);
	CHECK_INT(kvl_tcp_broken(end_b.c), 0);
	close_end(&end_a);
	close_end(&end_b);
	free(rw);
	free(ro);
	free(wo);
	free(ro_copy);
	free(src);
	free(dst);
}

/* Count completions per wr_id in [0, n): each must appear once with @status and 0 bytes. */
static void check_failed_once(const struct end *e, unsigned n, int status)
{
	unsigned seen[16] = { 0 };
	bool ok = true;

	CHECK_INT(e->n, n);
	for (unsigned i = 0; i < e->n; i++) {
		ok &= e->wc[i].status == status && e->wc[i].bytes == 0 && e->wc[i].wr_id < n;
		if (e->wc[i].wr_id < 16)
			seen[e->wc[i].wr_id]++;
	}
	for (unsigned i = 0; i < n; i++)
		ok &= seen[i] == 1;
	CHECK(ok);
}

/* The target goes away while a 2 MiB write is half sent. */
static void test_peer_close(enum transport t)
{
	uint8_t *seg = xmalloc(4 * MIB), *src = xmalloc(2 * MIB), *dst = xmalloc(4096);
	int fds[2], small = 64 * KIB, turns = 0;

	memset(&end_a, 0, sizeof(end_a));
	memset(&end_b, 0, sizeof(end_b));
	make_fds(t, fds);
	/* Small buffers so the 2 MiB cannot all be in the kernel when the peer closes. */
	setsockopt(fds[0], SOL_SOCKET, SO_SNDBUF, &small, sizeof(small));
	setsockopt(fds[1], SOL_SOCKET, SO_RCVBUF, &small, sizeof(small));
	end_a.c = kvl_tcp_conn_new(fds[0], &end_a.segs, 8);
	end_b.c = kvl_tcp_conn_new(fds[1], &end_b.segs, 8);
	CHECK(end_a.c != NULL && end_b.c != NULL);
	add_seg(&end_b.segs, 1, seg, 4 * MIB, KVL_SEG_REMOTE_READ | KVL_SEG_REMOTE_WRITE);
	kvl_test_fill_random(src, 2 * MIB);

	CHECK_INT(post(end_a.c, KVL_OP_WRITE, 0, src, 1, 0, 4096), 0);
	CHECK_INT(post(end_a.c, KVL_OP_WRITE, 1, src, 1, 0, 2 * MIB), 0);
	CHECK_INT(post(end_a.c, KVL_OP_READ, 2, dst, 1, 0, 4096), 0);
	CHECK_INT(post(end_a.c, KVL_OP_WRITE, 3, src, 1, 0, 100), 0);
	for (int i = 0; i < 3; i++) {
		kvl_tcp_progress(end_a.c);
		kvl_tcp_progress(end_b.c);
	}
	reap_into(&end_a);
	CHECK(end_a.n <= 1); /* the 4 KiB write may be acked already, nothing else can be */
	CHECK(kvl_xport_stats(end_a.c)->tx_bytes > 4096 + 2 * KVL_TCP_HDR_LEN);
	CHECK(kvl_xport_stats(end_a.c)->tx_bytes < 2 * MIB);
	CHECK(kvl_xport_stats(end_b.c)->rx_bytes > 4096);
	close_end(&end_b);

	while (!kvl_tcp_broken(end_a.c) && turns++ < IDLE_LIMIT)
		kvl_tcp_progress(end_a.c);
	CHECK_INT(kvl_tcp_broken(end_a.c), KVL_ERR_CONN_LOST);
	reap_into(&end_a);
	for (int i = 0; i < 100; i++)
		CHECK_INT(kvl_tcp_progress(end_a.c), 0);
	reap_into(&end_a);

	/* Each request exactly once; all but the first write (which may have made it) lost. */
	unsigned seen[4] = { 0 }, lost = 0;
	bool ok = end_a.n == 4;

	for (unsigned i = 0; i < end_a.n; i++) {
		const struct kvl_wc *wc = &end_a.wc[i];
		bool first_ok = wc->wr_id == 0 && wc->status == KVL_OK && wc->bytes == 4096;

		ok &= wc->wr_id < 4 &&
		      (first_ok || (wc->status == KVL_ERR_CONN_LOST && wc->bytes == 0));
		if (wc->wr_id < 4)
			seen[wc->wr_id]++;
		lost += wc->status == KVL_ERR_CONN_LOST;
	}
	for (unsigned i = 0; i < 4; i++)
		ok &= seen[i] == 1;
	CHECK(ok);
	CHECK(lost >= 3);
	CHECK_INT(kvl_xport_stats(end_a.c)->failed[KVL_ERR_CONN_LOST], lost);
	CHECK_INT(kvl_tcp_outstanding(end_a.c), 0);
	CHECK_INT(post(end_a.c, KVL_OP_WRITE, 9, src, 1, 0, 100), -EPIPE);
	CHECK_INT(post(end_a.c, KVL_OP_READ, 9, dst, 1, 0, 100), -EPIPE);
	close_end(&end_a);
	free(seg);
	free(src);
	free(dst);
}

/* ---- a hand-written peer on the raw socket ---- */

struct raw {
	struct end *e; /* the transport under test */
	int fd;	       /* the other end, driven by hand */
};

/* @buf: when not 0, the socket buffers on both sides, so a large write cannot all leave. */
static struct raw raw_open_buf(enum transport t, unsigned depth, int buf)
{
	int fds[2];
	struct raw r = { .e = &end_a };

	memset(&end_a, 0, sizeof(end_a));
	make_fds(t, fds);
	if (buf != 0) {
		setsockopt(fds[0], SOL_SOCKET, SO_SNDBUF, &buf, sizeof(buf));
		setsockopt(fds[1], SOL_SOCKET, SO_RCVBUF, &buf, sizeof(buf));
	}
	end_a.c = kvl_tcp_conn_new(fds[0], &end_a.segs, depth);
	if (end_a.c == NULL) {
		perror("kvl_tcp_conn_new");
		exit(2);
	}
	r.fd = fds[1];
	return r;
}

static struct raw raw_open(enum transport t, unsigned depth)
{
	return raw_open_buf(t, depth, 0);
}

static void raw_close(struct raw *r)
{
	close_end(r->e);
	if (r->fd >= 0)
		close(r->fd);
}

static void raw_hdr(uint8_t *out, uint8_t type, uint8_t status, uint32_t seg, uint32_t len,
		    uint64_t req_id, uint64_t off)
{
	struct kvl_tcp_hdr h = { KVL_TCP_MAGIC, type, status, 0, seg, len, req_id, off };

	kvl_tcp_hdr_encode(&h, out);
}

/* Read exactly @n bytes from the raw end, progressing the transport meanwhile. */
static bool raw_read(struct raw *r, uint8_t *buf, size_t n)
{
	size_t got = 0;

	for (long turn = 0; got < n && turn < IDLE_LIMIT; turn++) {
		ssize_t k;

		kvl_tcp_progress(r->e->c);
		k = recv(r->fd, buf + got, n - got, MSG_DONTWAIT);
		if (k > 0)
			got += (size_t)k;
		else if (k == 0)
			break;
	}
	return got == n;
}

/* A valid peer written from the header comment: frames split byte by byte, answers decoded. */
static void test_raw_peer(enum transport t)
{
	struct raw r = raw_open(t, 4);
	uint8_t seg[256], frame[KVL_TCP_HDR_LEN + 40], resp[KVL_TCP_HDR_LEN + 40];
	struct kvl_tcp_hdr h;
	bool sent = true;

	memset(seg, 0, sizeof(seg));
	add_seg(&end_a.segs, 5, seg, sizeof(seg), KVL_SEG_REMOTE_READ | KVL_SEG_REMOTE_WRITE);
	raw_hdr(frame, KVL_TCP_WRITE_REQ, 0, 5, 40, 77, 10);
	for (int i = 0; i < 40; i++)
		frame[KVL_TCP_HDR_LEN + i] = (uint8_t)(0xa0 + i);
	for (size_t i = 0; i < sizeof(frame); i++) {
		sent &= send(r.fd, frame + i, 1, MSG_NOSIGNAL) == 1;
		kvl_tcp_progress(end_a.c);
	}
	CHECK(sent);
	CHECK(raw_read(&r, resp, KVL_TCP_HDR_LEN));
	kvl_tcp_hdr_decode(resp, &h);
	CHECK_INT(h.magic, KVL_TCP_MAGIC);
	CHECK_INT(h.type, KVL_TCP_WRITE_ACK);
	CHECK_INT(h.status, KVL_OK);
	CHECK_INT(h.reserved, 0);
	CHECK(h.req_id == 77);
	CHECK_INT(h.seg_id, 5);
	CHECK(memcmp(seg + 10, frame + KVL_TCP_HDR_LEN, 40) == 0);
	CHECK_INT(seg[9] | seg[50], 0);

	raw_hdr(frame, KVL_TCP_READ_REQ, 0, 5, 40, 78, 10);
	CHECK(send(r.fd, frame, KVL_TCP_HDR_LEN, MSG_NOSIGNAL) == KVL_TCP_HDR_LEN);
	CHECK(raw_read(&r, resp, KVL_TCP_HDR_LEN + 40));
	kvl_tcp_hdr_decode(resp, &h);
	CHECK_INT(h.type, KVL_TCP_READ_RESP);
	CHECK_INT(h.status, KVL_OK);
	CHECK_INT(h.length, 40);
	CHECK(h.req_id == 78);
	CHECK(memcmp(resp + KVL_TCP_HDR_LEN, seg + 10, 40) == 0);

	/* Two headers cut 48 + 16: the half header waits at the front of the staging buffer. */
	raw_hdr(frame, KVL_TCP_READ_REQ, 0, 5, 4, 90, 0);
	raw_hdr(frame + KVL_TCP_HDR_LEN, KVL_TCP_READ_REQ, 0, 5, 4, 91, 4);
	CHECK(send(r.fd, frame, 48, MSG_NOSIGNAL) == 48);
	for (int i = 0; i < 10; i++)
		kvl_tcp_progress(end_a.c);
	CHECK(send(r.fd, frame + 48, 16, MSG_NOSIGNAL) == 16);
	CHECK(raw_read(&r, resp, 2 * (KVL_TCP_HDR_LEN + 4)));
	kvl_tcp_hdr_decode(resp, &h);
	CHECK(h.req_id == 90 && h.status == KVL_OK && h.length == 4);
	CHECK(memcmp(resp + KVL_TCP_HDR_LEN, seg, 4) == 0);
	kvl_tcp_hdr_decode(resp + KVL_TCP_HDR_LEN + 4, &h);
	CHECK(h.req_id == 91 && h.status == KVL_OK && h.length == 4);
	CHECK(memcmp(resp + 2 * KVL_TCP_HDR_LEN + 4, seg + 4, 4) == 0);

	/* A refused read answers with its status and no payload. */
	raw_hdr(frame, KVL_TCP_READ_REQ, 0, 5, 400, 79, 0);
	CHECK(send(r.fd, frame, KVL_TCP_HDR_LEN, MSG_NOSIGNAL) == KVL_TCP_HDR_LEN);
	CHECK(raw_read(&r, resp, KVL_TCP_HDR_LEN));
	kvl_tcp_hdr_decode(resp, &h);
	CHECK_INT(h.type, KVL_TCP_READ_RESP);
	CHECK_INT(h.status, KVL_ERR_BOUNDS);
	CHECK_INT(h.length, 0);
	CHECK(h.req_id == 79);

	/* And the transport's own request, as the peer sees it on the wire. */
	uint8_t local[16] = "0123456789abcdef";

	CHECK_INT(post(end_a.c, KVL_OP_WRITE, 5, local, 3, 0x1000, 16), 0);
	CHECK(raw_read(&r, resp, KVL_TCP_HDR_LEN + 16));
	kvl_tcp_hdr_decode(resp, &h);
	CHECK_INT(h.type, KVL_TCP_WRITE_REQ);
	CHECK_INT(h.seg_id, 3);
	CHECK_INT(h.length, 16);
	CHECK(h.offset == 0x1000);
	CHECK(memcmp(resp + KVL_TCP_HDR_LEN, local, 16) == 0);
	raw_hdr(frame, KVL_TCP_WRITE_ACK, KVL_ERR_ACCESS, 3, 0, h.req_id, 0x1000);
	CHECK(send(r.fd, frame, KVL_TCP_HDR_LEN, MSG_NOSIGNAL) == KVL_TCP_HDR_LEN);
	end_a.n = 0;
	for (int i = 0; i < 100 && end_a.n == 0; i++) {
		kvl_tcp_progress(end_a.c);
		reap_into(&end_a);
	}
	CHECK_INT(end_a.n, 1);
	CHECK_INT(end_a.wc[0].wr_id, 5);
	CHECK_INT(end_a.wc[0].status, KVL_ERR_ACCESS);
	CHECK_INT(end_a.wc[0].bytes, 0);
	CHECK_INT(kvl_tcp_broken(end_a.c), 0);
	raw_close(&r);
}

/* Send @bytes at the transport with one READ and one WRITE of its own outstanding: it must
 * break with KVL_ERR_PROTOCOL, fail both once, and shut the socket. */
static void expect_protocol_error(enum transport t, const char *what, const uint8_t *bytes,
				  size_t n, bool with_requests)
{
	struct raw r = raw_open(t, 4);
	uint8_t buf[4096], local[64] = { 0 };
	unsigned want = with_requests ? 2 : 0;
	bool eof = false;

	if (with_requests) {
		CHECK_INT(post(end_a.c, KVL_OP_READ, 0, local, 1, 0, 64), 0);
		CHECK_INT(post(end_a.c, KVL_OP_WRITE, 1, local, 1, 0, 64), 0);
		CHECK(raw_read(&r, buf, 2 * KVL_TCP_HDR_LEN + 64)); /* both fully sent */
	}
	CHECK(send(r.fd, bytes, n, MSG_NOSIGNAL) == (ssize_t)n);
	for (int i = 0; i < 100 && !kvl_tcp_broken(end_a.c); i++)
		kvl_tcp_progress(end_a.c);
	if (kvl_tcp_broken(end_a.c) != KVL_ERR_PROTOCOL)
		fprintf(stderr, "protocol case: %s\n", what);
	CHECK_INT(kvl_tcp_broken(end_a.c), KVL_ERR_PROTOCOL);
	end_a.n = 0;
	reap_into(&end_a);
	kvl_tcp_progress(end_a.c);
	reap_into(&end_a);
	check_failed_once(&end_a, want, KVL_ERR_PROTOCOL);
	CHECK_INT(kvl_xport_stats(end_a.c)->failed[KVL_ERR_PROTOCOL], want);
	CHECK_INT(post(end_a.c, KVL_OP_READ, 9, local, 1, 0, 64), -EPIPE);
	/* The peer is told: it reads EOF, not silence. */
	for (int i = 0; i < 1000 && !eof; i++) {
		ssize_t k = recv(r.fd, buf, sizeof(buf), MSG_DONTWAIT);

		eof = k == 0 || (k < 0 && errno != EAGAIN);
	}
	CHECK(eof);
	raw_close(&r);
}

/* An answer to a request that has not fully left yet cannot be genuine. */
static void test_early_answer(enum transport t)
{
	struct raw r = raw_open_buf(t, 4, 64 * KIB);
	uint8_t *src = xmalloc(2 * MIB), h[KVL_TCP_HDR_LEN];

	memset(src, 7, 2 * MIB);
	CHECK_INT(post(end_a.c, KVL_OP_WRITE, 0, src, 1, 0, 2 * MIB), 0);
	CHECK(raw_read(&r, h, sizeof(h)));
	CHECK(kvl_xport_stats(end_a.c)->tx_bytes < 2 * MIB);
	raw_hdr(h, KVL_TCP_WRITE_ACK, 0, 1, 2 * MIB, 0, 0);
	CHECK(send(r.fd, h, sizeof(h), MSG_NOSIGNAL) == (ssize_t)sizeof(h));
	for (int i = 0; i < 100 && !kvl_tcp_broken(end_a.c); i++)
		kvl_tcp_progress(end_a.c);
	CHECK_INT(kvl_tcp_broken(end_a.c), KVL_ERR_PROTOCOL);
	end_a.n = 0;
	reap_into(&end_a);
	check_failed_once(&end_a, 1, KVL_ERR_PROTOCOL);
	raw_close(&r);
	free(src);
}

static void test_protocol_errors(enum transport t)
{
	uint8_t f[2 * KVL_TCP_HDR_LEN];

	memset(f, 0x5a, KVL_TCP_HDR_LEN);
	expect_protocol_error(t, "garbage", f, KVL_TCP_HDR_LEN, true);

	raw_hdr(f, KVL_TCP_WRITE_ACK, 0, 1, 0, 0, 0);
	f[0] ^= 1;
	expect_protocol_error(t, "bad magic", f, KVL_TCP_HDR_LEN, true);

	raw_hdr(f, KVL_TCP_READ_RESP, 0, 1, 64, 0, 0);
	f[7] = 1;
	expect_protocol_error(t, "reserved", f, KVL_TCP_HDR_LEN, true);

	raw_hdr(f, 9, 0, 1, 0, 0, 0);
	expect_protocol_error(t, "unknown type", f, KVL_TCP_HDR_LEN, true);

	raw_hdr(f, 0, 0, 1, 0, 0, 0);
	expect_protocol_error(t, "type 0", f, KVL_TCP_HDR_LEN, true);

	raw_hdr(f, KVL_TCP_WRITE_REQ, 0, 1, KVL_TCP_MAX_MSG + 1, 0, 0);
	expect_protocol_error(t, "length over max", f, KVL_TCP_HDR_LEN, true);

	raw_hdr(f, KVL_TCP_READ_RESP, 0, 1, 64, 1, 0);
	expect_protocol_error(t, "not the oldest req_id", f, KVL_TCP_HDR_LEN, true);

	raw_hdr(f, KVL_TCP_WRITE_ACK, 0, 1, 64, 0, 0);
	expect_protocol_error(t, "ack for a read", f, KVL_TCP_HDR_LEN, true);

	raw_hdr(f, KVL_TCP_READ_RESP, 0, 1, 65, 0, 0);
	expect_protocol_error(t, "read length differs", f, KVL_TCP_HDR_LEN, true);

	raw_hdr(f, KVL_TCP_READ_RESP, 200, 1, 0, 0, 0);
	expect_protocol_error(t, "status out of range", f, KVL_TCP_HDR_LEN, true);

	raw_hdr(f, KVL_TCP_WRITE_ACK, 0, 1, 0, 0, 0);
	expect_protocol_error(t, "response to nothing", f, KVL_TCP_HDR_LEN, false);

	/* A valid request, then garbage: the request is served, then the stream is dropped. */
	raw_hdr(f, KVL_TCP_READ_REQ, 0, 1, 0, 0, 0);
	memset(f + KVL_TCP_HDR_LEN, 0xff, KVL_TCP_HDR_LEN);
	expect_protocol_error(t, "request then garbage", f, sizeof(f), false);
}

/* Setup errors leave the fd to the caller. */
static void test_conn_new_errors(void)
{
	struct kvl_seg_table segs;
	int fds[2], p[2];

	memset(&segs, 0, sizeof(segs));
	CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, fds) == 0);
	errno = 0;
	CHECK(kvl_tcp_conn_new(fds[0], &segs, 0) == NULL);
	CHECK_INT(errno, EINVAL);
	CHECK(kvl_tcp_conn_new(fds[0], &segs, 1u << 20) == NULL);
	CHECK_INT(errno, EINVAL);
	CHECK(kvl_tcp_conn_new(-1, &segs, 4) == NULL);
	CHECK_INT(errno, EINVAL);
	CHECK((fcntl(fds[0], F_GETFL) & O_NONBLOCK) == 0); /* untouched */
	close(fds[0]);
	close(fds[1]);
	CHECK(pipe(p) == 0);
	CHECK(kvl_tcp_conn_new(p[0], &segs, 4) == NULL);
	CHECK_INT(errno, ENOTSOCK);
	close(p[0]);
	close(p[1]);
	CHECK(socketpair(AF_UNIX, SOCK_DGRAM, 0, fds) == 0);
	CHECK(kvl_tcp_conn_new(fds[0], &segs, 4) == NULL);
	CHECK_INT(errno, EINVAL);
	close(fds[0]);
	close(fds[1]);

	/* No segment table: every request is refused, nothing crashes. */
	struct raw r;
	uint8_t h[KVL_TCP_HDR_LEN];

	CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, fds) == 0);
	memset(&end_a, 0, sizeof(end_a));
	end_a.c = kvl_tcp_conn_new(fds[0], NULL, 4);
	CHECK(end_a.c != NULL);
	r = (struct raw){ .e = &end_a, .fd = fds[1] };
	raw_hdr(h, KVL_TCP_READ_REQ, 0, 1, 8, 0, 0);
	CHECK(send(r.fd, h, sizeof(h), MSG_NOSIGNAL) == (ssize_t)sizeof(h));
	CHECK(raw_read(&r, h, sizeof(h)));
	CHECK_INT(h[5], KVL_ERR_NO_SEGMENT);
	/* fail_all with a status that cannot mean broken becomes CANCELED. */
	CHECK_INT(post(end_a.c, KVL_OP_READ, 0, h, 1, 0, 8), 0);
	kvl_tcp_fail_all(end_a.c, KVL_OK);
	CHECK_INT(kvl_tcp_broken(end_a.c), KVL_ERR_CANCELED);
	end_a.n = 0;
	reap_into(&end_a);
	check_failed_once(&end_a, 1, KVL_ERR_CANCELED);
	raw_close(&r);
}

/* The peer vanishes without reading what we sent (TCP answers with a reset, a socketpair with
 * EOF) while we have nothing more to send: the receive side must notice alone. */
static void test_reset(enum transport t)
{
	struct raw r = raw_open(t, 4);
	uint8_t local[64] = { 0 };
	struct linger lg = { .l_onoff = 1, .l_linger = 0 };

	CHECK_INT(post(end_a.c, KVL_OP_READ, 0, local, 1, 0, 64), 0);
	CHECK_INT(post(end_a.c, KVL_OP_WRITE, 1, local, 1, 0, 64), 0);
	for (int i = 0; i < 10; i++)
		kvl_tcp_progress(end_a.c);
	CHECK_INT(kvl_xport_stats(end_a.c)->tx_bytes, 2 * KVL_TCP_HDR_LEN + 64);
	setsockopt(r.fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
	close(r.fd);
	r.fd = -1;
	for (int i = 0; i < IDLE_LIMIT && !kvl_tcp_broken(end_a.c); i++)
		kvl_tcp_progress(end_a.c);
	CHECK_INT(kvl_tcp_broken(end_a.c), KVL_ERR_CONN_LOST);
	end_a.n = 0;
	reap_into(&end_a);
	check_failed_once(&end_a, 2, KVL_ERR_CONN_LOST);
	close_end(&end_a);
}

/* kvl_tcp_fail_all: each outstanding request once, with the given status. */
static void test_fail_all(enum transport t)
{
	uint8_t *seg = xmalloc(MIB), *buf = xmalloc(MIB);

	open_pair(t, 8);
	add_seg(&end_b.segs, 1, seg, MIB, KVL_SEG_REMOTE_READ | KVL_SEG_REMOTE_WRITE);
	memset(buf, 1, MIB);
	for (unsigned i = 0; i < 6; i++)
		CHECK_INT(post(end_a.c, i % 2 ? KVL_OP_READ : KVL_OP_WRITE, i, buf, 1, 0,
			       i == 0 ? MIB : 4096),
			  0);
	kvl_tcp_progress(end_a.c); /* part of it on the wire */
	kvl_tcp_fail_all(end_a.c, KVL_ERR_PEER_DEAD);
	kvl_tcp_fail_all(end_a.c, KVL_ERR_CANCELED); /* already broken: no second completion */
	CHECK_INT(kvl_tcp_broken(end_a.c), KVL_ERR_PEER_DEAD);
	CHECK_INT(kvl_tcp_outstanding(end_a.c), 6);
	end_a.n = 0;
	reap_into(&end_a);
	CHECK_INT(kvl_tcp_progress(end_a.c), 0);
	reap_into(&end_a);
	check_failed_once(&end_a, 6, KVL_ERR_PEER_DEAD);
	CHECK_INT(kvl_tcp_outstanding(end_a.c), 0);
	CHECK_INT(kvl_xport_stats(end_a.c)->failed[KVL_ERR_PEER_DEAD], 6);
	CHECK_INT(post(end_a.c, KVL_OP_WRITE, 9, buf, 1, 0, 1), -EPIPE);
	/* The peer sees the connection end. */
	for (int i = 0; i < IDLE_LIMIT && !kvl_tcp_broken(end_b.c); i++)
		kvl_tcp_progress(end_b.c);
	CHECK_INT(kvl_tcp_broken(end_b.c), KVL_ERR_CONN_LOST);
	CHECK_INT(post(end_b.c, KVL_OP_WRITE, 9, buf, 1, 0, 1), -EPIPE);
	close_end(&end_a);
	close_end(&end_b);
	free(seg);
	free(buf);
}

/*
 * A peer that sends READ requests and never reads the answers. The queue is not visible
 * through the API, but every request the target took off the socket is answered in full
 * (served_read), queued, or still unparsed in its staging buffer, so
 * rx_bytes / 32 - served_read bounds the queue from above.
 *  1. Lockstep: the peer sends its next header only once the target has read the last one.
 *     Nothing is left unparsed but the one request held back, so the bound is depth + 1.
 *  2. Flood: the peer sends all it can. The target may now also hold one 4 KiB read of
 *     headers it has not parsed (when a window opening lets it resume), 128 more at most.
 *     The peer's sends stall in TCP instead: the target took a small part of them.
 */
static void test_backpressure(enum transport t)
{
	enum { DEPTH = 8, N = 20000, LEN = 64 * KIB, STAGED = 4096 / KVL_TCP_HDR_LEN };
	struct raw r = raw_open(t, DEPTH);
	uint8_t *seg = xmalloc(LEN), h[KVL_TCP_HDR_LEN];
	unsigned sent = 0, lockstep;
	int one = 1;
	bool bounded = true, stalled = false;
	const struct kvl_xport_stats *st = kvl_xport_stats(end_a.c);

	memset(seg, 3, LEN);
	add_seg(&end_a.segs, 1, seg, LEN, KVL_SEG_REMOTE_READ);
	fcntl(r.fd, F_SETFL, fcntl(r.fd, F_GETFL) | O_NONBLOCK);
	/* One header per segment, so that the target's reads see them one by one. */
	if (t == TCP_LOOP)
		setsockopt(r.fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));

	while (sent < N && !stalled) {
		raw_hdr(h, KVL_TCP_READ_REQ, 0, 1, LEN, sent, 0);
		if (send(r.fd, h, sizeof(h), MSG_NOSIGNAL) != (ssize_t)sizeof(h))
			break;
		sent++;
		stalled = true;
		for (int i = 0; i < 200 && stalled; i++) {
			kvl_tcp_progress(end_a.c);
			stalled = st->rx_bytes < (uint64_t)sent * KVL_TCP_HDR_LEN;
		}
		bounded &= st->rx_bytes / KVL_TCP_HDR_LEN - st->served_read <= DEPTH + 1;
	}
	lockstep = sent;
	CHECK(stalled);
	for (int i = 0; i < 1000; i++) {
		kvl_tcp_progress(end_a.c);
		bounded &= st->rx_bytes / KVL_TCP_HDR_LEN - st->served_read <= DEPTH + 1;
	}
	CHECK(bounded);

	for (bool full = false; sent < N && !full;) {
		raw_hdr(h, KVL_TCP_READ_REQ, 0, 1, LEN, sent, 0);
		full = send(r.fd, h, sizeof(h), MSG_NOSIGNAL) != (ssize_t)sizeof(h);
		sent += !full;
		if (sent % 16 == 0)
			kvl_tcp_progress(end_a.c);
	}
	bounded = true;
	for (int i = 0; i < 1000; i++) {
		kvl_tcp_progress(end_a.c);
		bounded &= st->rx_bytes / KVL_TCP_HDR_LEN - st->served_read <= DEPTH + 1 + STAGED;
	}
	CHECK(bounded);
	CHECK(st->rx_bytes < (uint64_t)sent * KVL_TCP_HDR_LEN / 4);
	CHECK_INT(st->rx_bytes % KVL_TCP_HDR_LEN, 0);
	CHECK(st->served_read >= 1);
	CHECK_INT(kvl_tcp_broken(end_a.c), 0);
	printf("  backpressure/%s: lockstep stalled after %u requests; peer sent %u, target took "
	       "%llu, answered %llu\n",
	       transport_name[t], lockstep, sent,
	       (unsigned long long)(st->rx_bytes / KVL_TCP_HDR_LEN),
	       (unsigned long long)st->served_read);
	raw_close(&r);
	free(seg);
}

int main(void)
{
	static const uint32_t sizes[] = { 0, 1, 4095, 16 * KIB, 64 * KIB, 2 * MIB };
	static const uint32_t sizes_max[] = { 1, 2 * MIB, KVL_TCP_MAX_MSG, 4095 };

	test_header();
	test_conn_new_errors();
	for (int t = UNIX_PAIR; t <= TCP_LOOP; t++) {
		test_write_read(t, sizes, sizeof(sizes) / sizeof(sizes[0]));
		test_window(t);
		test_symmetric(t);
		test_refusals(t);
		test_peer_close(t);
		test_raw_peer(t);
		test_protocol_errors(t);
		test_early_answer(t);
		test_reset(t);
		test_fail_all(t);
		test_backpressure(t);
	}
	/* The largest message, once. */
	test_write_read(TCP_LOOP, sizes_max, sizeof(sizes_max) / sizeof(sizes_max[0]));
	return kvl_test_done("tcp_data");
}
