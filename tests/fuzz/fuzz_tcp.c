/* SPDX-License-Identifier: BSD-3-Clause */
/* libFuzzer target for the tcp data protocol: the real target side of a bound connection. */
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "tcp_data.h"

/*
 * lcores/xport/tcp_data.c as it runs on an lcore, over a real socketpair: the input is a
 * program played by the peer (READ/WRITE requests at offsets near the ends of the segments
 * and near 2^64, answers to our own requests, raw bytes, half closes, a peer that stops
 * reading). After every step the harness checks what a hostile peer must never get:
 *  - a byte written outside the writable segments (every other byte of the arena is a guard
 *    pattern, checked), or into the read-only one;
 *  - a WRITE_ACK or READ_RESP saying OK for a range the segment table does not allow (worked
 *    out here with 128-bit arithmetic, not with kvl_seg_check), or READ data that is not the
 *    segment's bytes;
 *  - a completion of ours twice, or never, or OK with a length other than the asked one, or
 *    bytes of a READ_RESP landing outside its destination.
 * While the whole stream came from well-formed frames the harness also predicts each answer's
 * status exactly and that the connection stays up; a malformed frame must break it.
 */

#define PG	   4096u
#define ARENA	   (12 * PG)
#define GUARD_BYTE 0xa5
/* The arena: guards between everything. Offsets of each part: */
#define S1_OFF (1 * PG) /* segment 1: read + write, 2 pages */
#define S1_LEN (2 * PG)
#define S2_OFF (4 * PG) /* segment 2: read only */
#define S2_LEN PG
#define S3_OFF (6 * PG) /* segment 3: write only, 1000 bytes: a guard right behind it */
#define S3_LEN 1000u
#define S4_OFF (8 * PG)	 /* segment 4: GPU (never touched by tcp), all guard */
#define S5_OFF (9 * PG)	 /* segment 5: not live, all guard */
#define L_OFF  (10 * PG) /* our own READs land here, ending at the guard page after it */
#define DEPTH  4u
#define MAXREQ 256

static uint8_t *arena;
static uint8_t *pristine; /* the arena at the start: the guards must stay so */
static struct kvl_seg_table segs;
static struct kvl_tcp_conn *srv;
static int cli = -1;
static bool cli_reads;

/* The model: what the peer's frames should get back, while the stream is in step. */
static bool clean;	  /* every byte the peer sent was a whole well-formed frame */
static bool expect_break; /* a frame that must break the connection was sent */
static struct {
	uint8_t type;
	uint8_t status;
	uint64_t req_id;
} want[MAXREQ];
static unsigned want_head, want_tail;

/* Our own requests: each must complete exactly once. */
static struct {
	uint64_t wr_id;
	uint8_t op;
	uint32_t len;
	bool seen_sent; /* its frame came out on the wire */
	bool answered;	/* the harness sent its answer */
	int want_status;
	bool done;
} ours[MAXREQ];
static unsigned n_ours, ours_done;
static uint64_t seen_req_frames; /* our requests that came out, in order: their req_ids */

/* The server's output as the peer parses it. */
static uint8_t out[1 << 17];
static size_t out_len;

#define FAIL(...)                                          \
	do {                                               \
		fprintf(stderr, "fuzz_tcp: " __VA_ARGS__); \
		fputc('\n', stderr);                       \
		abort();                                   \
	} while (0)

static uint8_t s2_byte(uint64_t off)
{
	return (uint8_t)(off * 31 + 7);
}

static uint8_t pat_byte(uint8_t seed, uint64_t i)
{
	return (uint8_t)(seed + i * 13);
}

/* The guard ranges: everything but the segments' bytes and our READ destination. */
static const struct {
	size_t from, to;
} guard[] = { { 0, S1_OFF },
	      { S1_OFF + S1_LEN, S2_OFF },
	      { S2_OFF + S2_LEN, S3_OFF },
	      { S3_OFF + S3_LEN, L_OFF },
	      { L_OFF + PG, ARENA } };

static void setup_once(void)
{
	if (arena != NULL)
		return;
	signal(SIGPIPE, SIG_IGN);
	arena = aligned_alloc(PG, ARENA);
	pristine = malloc(ARENA);
	if (arena == NULL || pristine == NULL)
		FAIL("no memory");
	memset(pristine, GUARD_BYTE, ARENA);
	memset(pristine + S1_OFF, 0, S1_LEN);
	for (size_t i = 0; i < S2_LEN; i++)
		pristine[S2_OFF + i] = s2_byte(i);
	memset(pristine + S3_OFF, 0, S3_LEN);
	memset(pristine + L_OFF, 0, PG);
	segs.seg[0] = (struct kvl_seg){ arena + S1_OFF, S1_LEN, 1,
					KVL_SEG_REMOTE_READ | KVL_SEG_REMOTE_WRITE };
	segs.seg[1] = (struct kvl_seg){ arena + S2_OFF, S2_LEN, 2, KVL_SEG_REMOTE_READ };
	segs.seg[2] = (struct kvl_seg){ arena + S3_OFF, S3_LEN, 3, KVL_SEG_REMOTE_WRITE };
	segs.seg[3] = (struct kvl_seg){ arena + S4_OFF, PG, 4,
					KVL_SEG_REMOTE_READ | KVL_SEG_REMOTE_WRITE | KVL_SEG_GPU };
	segs.seg[4] = (struct kvl_seg){ arena + S5_OFF, PG, 5,
					KVL_SEG_REMOTE_READ | KVL_SEG_REMOTE_WRITE };
	segs.live[0] = segs.live[1] = segs.live[2] = segs.live[3] = true; /* 5 is not */
}

/* What the target must answer, from the table above (not from kvl_seg_check). */
static uint8_t model_status(uint8_t type, uint32_t seg, uint64_t off, uint64_t len)
{
	bool wr = type == KVL_TCP_WRITE_REQ;
	uint64_t slen;
	unsigned perm;

	switch (seg) {
	case 1:
		slen = S1_LEN, perm = 3;
		break;
	case 2:
		slen = S2_LEN, perm = 1;
		break;
	case 3:
		slen = S3_LEN, perm = 2;
		break;
	case 4:
		slen = PG, perm = 3;
		break;
	default:
		return KVL_ERR_NO_SEGMENT;
	}
	if (!(perm & (wr ? 2 : 1)))
		return KVL_ERR_ACCESS;
	if ((unsigned __int128)off + len > slen)
		return KVL_ERR_BOUNDS;
	if (seg == 4)
		return KVL_ERR_GPU_MEMORY;
	return KVL_OK;
}

static void check_guards(void)
{
	for (size_t g = 0; g < sizeof(guard) / sizeof(guard[0]); g++) {
		size_t from = guard[g].from, n = guard[g].to - from;

		if (memcmp(arena + from, pristine + from, n) == 0)
			continue;
		for (size_t i = from; i < from + n; i++)
			if (arena[i] != pristine[i])
				FAIL("byte %zu of the arena (a guard, outside every writable "
				     "range) was written: 0x%02x",
				     i, arena[i]);
	}
	if (memcmp(arena + S2_OFF, pristine + S2_OFF, S2_LEN) != 0)
		FAIL("the read-only segment 2 changed");
}

static void reset(void)
{
	int sv[2];

	memcpy(arena, pristine, ARENA);
	if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0)
		FAIL("socketpair: %s", strerror(errno));
	srv = kvl_tcp_conn_new(sv[1], &segs, DEPTH);
	if (srv == NULL)
		FAIL("kvl_tcp_conn_new: %s", strerror(errno));
	cli = sv[0];
	cli_reads = true;
	clean = true;
	expect_break = false;
	want_head = want_tail = 0;
	n_ours = ours_done = 0;
	seen_req_frames = 0;
	out_len = 0;
}

/* One frame of the server's output: check it against the model. Returns its size or 0. */
static size_t parse_one(const uint8_t *p, size_t n)
{
	struct kvl_tcp_hdr h;
	size_t pl = 0;

	if (n < KVL_TCP_HDR_LEN)
		return 0;
	kvl_tcp_hdr_decode(p, &h);
	if (h.magic != KVL_TCP_MAGIC || h.reserved != 0 || h.type < KVL_TCP_WRITE_REQ ||
	    h.type > KVL_TCP_READ_RESP)
		FAIL("the server sent a malformed header (magic 0x%x type %u)", h.magic, h.type);
	if (h.type == KVL_TCP_WRITE_REQ || (h.type == KVL_TCP_READ_RESP && h.status == KVL_OK))
		pl = h.length;
	if (n < KVL_TCP_HDR_LEN + pl)
		return 0;
	if (h.type == KVL_TCP_WRITE_REQ || h.type == KVL_TCP_READ_REQ) {
		/* one of ours */
		if (h.req_id != seen_req_frames || seen_req_frames >= n_ours)
			FAIL("our request frame has req_id %llu, expected %llu",
			     (unsigned long long)h.req_id, (unsigned long long)seen_req_frames);
		ours[seen_req_frames++].seen_sent = true;
		return KVL_TCP_HDR_LEN + pl;
	}
	if (h.status >= KVL_STATUS_COUNT)
		FAIL("an answer with status %u", h.status);
	if (h.status == KVL_OK) {
		uint8_t t = h.type == KVL_TCP_WRITE_ACK ? KVL_TCP_WRITE_REQ : KVL_TCP_READ_REQ;

		if (model_status(t, h.seg_id, h.offset, h.length) != KVL_OK)
			FAIL("%s OK for segment %u offset %llu length %u: outside what the table "
			     "allows",
			     h.type == KVL_TCP_WRITE_ACK ? "WRITE_ACK" : "READ_RESP", h.seg_id,
			     (unsigned long long)h.offset, h.length);
		if (h.type == KVL_TCP_READ_RESP && h.seg_id == 2)
			for (uint32_t i = 0; i < h.length; i++)
				if (p[KVL_TCP_HDR_LEN + i] != s2_byte(h.offset + i))
					FAIL("READ_RESP data differs from segment 2 at %llu",
					     (unsigned long long)(h.offset + i));
	} else if (h.type == KVL_TCP_READ_RESP && h.length != 0) {
		FAIL("a refused READ_RESP with length %u", h.length);
	}
	if (clean) {
		if (want_head == want_tail)
			FAIL("an answer (req_id %llu) to no request", (unsigned long long)h.req_id);
		if (want[want_head % MAXREQ].type != h.type ||
		    want[want_head % MAXREQ].status != h.status ||
		    want[want_head % MAXREQ].req_id != h.req_id)
			FAIL("answer type %u status %u req_id %llu; the model expects type %u "
			     "status %u req_id %llu",
			     h.type, h.status, (unsigned long long)h.req_id,
			     want[want_head % MAXREQ].type, want[want_head % MAXREQ].status,
			     (unsigned long long)want[want_head % MAXREQ].req_id);
		want_head++;
	}
	return KVL_TCP_HDR_LEN + pl;
}

static bool drain_output(void)
{
	bool any = false;

	while (cli_reads && cli >= 0) {
		ssize_t r;
		size_t used;

		if (out_len == sizeof(out))
			FAIL("a frame of the server's over %zu bytes", sizeof(out));
		r = recv(cli, out + out_len, sizeof(out) - out_len, MSG_DONTWAIT);
		if (r <= 0)
			break;
		any = true;
		out_len += (size_t)r;
		while ((used = parse_one(out, out_len)) != 0) {
			memmove(out, out + used, out_len - used);
			out_len -= used;
		}
	}
	return any;
}

static void reap(void)
{
	struct kvl_wc wc[8];
	unsigned n;

	while ((n = kvl_tcp_reap(srv, wc, 8)) != 0) {
		for (unsigned i = 0; i < n; i++) {
			uint64_t k = wc[i].wr_id - 1000;

			if (k >= n_ours || ours[k].done)
				FAIL("completion of wr_id %llu: %s",
				     (unsigned long long)wc[i].wr_id,
				     k >= n_ours ? "never posted" : "completed twice");
			if (k != ours_done)
				FAIL("wr_id %llu completed before wr_id %u",
				     (unsigned long long)wc[i].wr_id, 1000 + ours_done);
			if (wc[i].status < 0 || wc[i].status >= KVL_STATUS_COUNT)
				FAIL("completion status %d", wc[i].status);
			if (wc[i].status == KVL_OK ? wc[i].bytes != ours[k].len : wc[i].bytes != 0)
				FAIL("completion of %u bytes, status %d, for a %u-byte request",
				     wc[i].bytes, wc[i].status, ours[k].len);
			if (clean && !expect_break && ours[k].answered &&
			    wc[i].status != ours[k].want_status)
				FAIL("our request %llu completed %d, its answer said %d",
				     (unsigned long long)k, wc[i].status, ours[k].want_status);
			ours[k].done = true;
			ours_done++;
		}
	}
}

/* The server's turns, until nothing moves. */
static void pump(void)
{
	for (int round = 0; round < 256; round++) {
		unsigned w = kvl_tcp_progress(srv);
		bool got = drain_output();

		reap();
		if (w == 0 && !got)
			break;
	}
	check_guards();
	if (clean && !expect_break && kvl_tcp_broken(srv))
		FAIL("well-formed frames broke the connection (%d)", kvl_tcp_broken(srv));
	if (clean && expect_break && !kvl_tcp_broken(srv) && cli_reads)
		FAIL("a malformed frame did not break the connection");
}

/* Write all of @p (the server reads between tries); false if the peer end is gone. */
static bool peer_write(const uint8_t *p, size_t n)
{
	for (int tries = 0; n > 0 && cli >= 0 && tries < 1000; tries++) {
		ssize_t r = send(cli, p, n, MSG_DONTWAIT | MSG_NOSIGNAL);

		if (r > 0) {
			p += r;
			n -= (size_t)r;
			continue;
		}
		if (r < 0 && errno != EAGAIN)
			return false;
		kvl_tcp_progress(srv);
		drain_output();
	}
	return n == 0;
}

static uint64_t take(const uint8_t *d, size_t size, size_t *i, unsigned nbytes)
{
	uint64_t v = 0;

	for (unsigned k = 0; k < nbytes && *i < size; k++)
		v |= (uint64_t)d[(*i)++] << (8 * k);
	return v;
}

/* Offsets where bounds checks go wrong: the ends of the segments (of @slen, the one asked
 * for, and the others') and of 2^64. */
static uint64_t pick64(const uint8_t *d, size_t size, size_t *i, uint64_t len, uint64_t slen)
{
	static const uint64_t tab[] = { 0,	    1,		S3_LEN - 1, S3_LEN,	S3_LEN + 1,
					PG - 1,	    PG,		PG + 1,	    S1_LEN - 1, S1_LEN,
					S1_LEN + 1, 1ull << 63, UINT64_MAX, 0 };
	uint8_t sel = (uint8_t)take(d, size, i, 1);

	if (sel < 13)
		return tab[sel];
	if (sel < 40)
		return 0 - len - (sel - 13); /* wraps to small with the length */
	if (sel < 60)
		return UINT64_MAX - (sel - 40);
	if (sel < 67)
		return slen - len + (uint64_t)(sel - 63); /* the last bytes, one short, one over */
	return take(d, size, i, sel & 1 ? 8 : 2);
}

static uint32_t pick_len(const uint8_t *d, size_t size, size_t *i)
{
	static const uint32_t tab[] = { 0,
					1,
					7,
					S3_LEN,
					S3_LEN + 1,
					PG - 1,
					PG,
					PG + 1,
					S1_LEN,
					S1_LEN + 1,
					UINT32_MAX,
					KVL_TCP_MAX_MSG,
					KVL_TCP_MAX_MSG + 1 };
	uint8_t sel = (uint8_t)take(d, size, i, 1);

	if (sel < 13)
		return tab[sel];
	return (uint32_t)take(d, size, i, 2);
}

#define PAYLOAD_CAP (3 * PG) /* payload the harness writes for one frame, at most */

static void send_request(uint8_t type, const uint8_t *d, size_t size, size_t *i)
{
	uint8_t hdr[KVL_TCP_HDR_LEN], seed;
	struct kvl_tcp_hdr h = { .magic = KVL_TCP_MAGIC, .type = type };
	static uint8_t pay[PAYLOAD_CAP];
	size_t plen = 0;
	static uint64_t rid;

	h.seg_id = (uint32_t)take(d, size, i, 1) % 7;
	h.length = pick_len(d, size, i);
	h.offset = pick64(d, size, i, h.length,
			  h.seg_id == 1	  ? S1_LEN
			  : h.seg_id == 3 ? S3_LEN
					  : PG);
	h.req_id = rid++;
	seed = (uint8_t)take(d, size, i, 1);
	kvl_tcp_hdr_encode(&h, hdr);
	if (type == KVL_TCP_WRITE_REQ) {
		plen = h.length < PAYLOAD_CAP ? h.length : PAYLOAD_CAP;
		for (size_t k = 0; k < plen; k++)
			pay[k] = pat_byte(seed, k);
	}
	if (clean && !expect_break) {
		if (h.length > KVL_TCP_MAX_MSG) {
			expect_break = true;
		} else if (plen < h.length) {
			clean = false; /* what follows is taken as this one's payload */
		} else if (want_tail - want_head < MAXREQ) {
			want[want_tail % MAXREQ].type =
				type == KVL_TCP_WRITE_REQ ? KVL_TCP_WRITE_ACK : KVL_TCP_READ_RESP;
			want[want_tail % MAXREQ].status =
				model_status(type, h.seg_id, h.offset, h.length);
			want[want_tail % MAXREQ].req_id = h.req_id;
			want_tail++;
		} else {
			clean = false;
		}
	}
	if (!peer_write(hdr, sizeof(hdr)) || !peer_write(pay, plen))
		clean = false;
	/* What landed in a writable segment must be the payload, byte for byte. */
	pump();
	if (clean && !expect_break && cli_reads && type == KVL_TCP_WRITE_REQ &&
	    model_status(type, h.seg_id, h.offset, h.length) == KVL_OK) {
		const uint8_t *dst = arena + (h.seg_id == 1 ? S1_OFF : S3_OFF) + h.offset;

		for (size_t k = 0; k < h.length; k++)
			if (dst[k] != pat_byte(seed, k))
				FAIL("WRITE of %u bytes at %llu of segment %u: byte %zu differs",
				     h.length, (unsigned long long)h.offset, h.seg_id, k);
	}
}

/* Our own request (the server is the initiator too), for the peer to answer. */
static void post_ours(const uint8_t *d, size_t size, size_t *i)
{
	uint8_t sel = (uint8_t)take(d, size, i, 1);
	uint32_t len = (uint32_t)take(d, size, i, 2) % (PG + 1);
	struct kvl_wr wr = { .wr_id = 1000 + n_ours,
			     .local = arena + L_OFF + PG - len, /* ends at the guard */
			     .length = len,
			     .remote_seg = sel >> 1,
			     .remote_off = take(d, size, i, 2),
			     .op = sel & 1 ? KVL_OP_READ : KVL_OP_WRITE };

	if (n_ours == MAXREQ)
		return;
	if (kvl_tcp_post(srv, &wr) == 0) {
		ours[n_ours] = (typeof(ours[0])){ .wr_id = wr.wr_id, .op = wr.op, .len = len };
		n_ours++;
	}
	pump();
}

/* The peer answers our oldest request that has come out and is not answered yet. */
static void answer_ours(const uint8_t *d, size_t size, size_t *i)
{
	uint8_t sel = (uint8_t)take(d, size, i, 1), seed = (uint8_t)take(d, size, i, 1);
	unsigned k = 0;
	struct kvl_tcp_hdr h = { .magic = KVL_TCP_MAGIC };
	uint8_t hdr[KVL_TCP_HDR_LEN];
	static uint8_t pay[PG + 64];
	size_t plen = 0;
	bool right;

	while (k < n_ours && ours[k].answered)
		k++;
	h.req_id = sel & 0x80 ? take(d, size, i, 1) : k;
	h.status = sel & 0x40 ? (uint8_t)take(d, size, i, 1) : KVL_OK;
	if (k < n_ours) {
		h.type = (ours[k].op == KVL_OP_WRITE) != !!(sel & 0x20) ? KVL_TCP_WRITE_ACK
									: KVL_TCP_READ_RESP;
		h.length = sel & 0x10 ? ours[k].len + (sel & 3) - 1 : ours[k].len;
	} else {
		h.type = sel & 0x20 ? KVL_TCP_WRITE_ACK : KVL_TCP_READ_RESP;
		h.length = sel & 0x3f;
	}
	if (h.type == KVL_TCP_READ_RESP && h.status == KVL_OK) {
		plen = h.length <= sizeof(pay) ? h.length : 0;
		for (size_t j = 0; j < plen; j++)
			pay[j] = pat_byte(seed, j);
	}
	/* a header the server refuses whatever it answers: its length past KVL_TCP_MAX_MSG too
	 * (a WRITE_ACK's length is not otherwise checked; len 0 with sel & 0x10 wraps it) */
	right = k < n_ours && ours[k].seen_sent && h.req_id == k && h.status < KVL_STATUS_COUNT &&
		h.length <= KVL_TCP_MAX_MSG &&
		h.type == (ours[k].op == KVL_OP_WRITE ? KVL_TCP_WRITE_ACK : KVL_TCP_READ_RESP) &&
		(h.type == KVL_TCP_WRITE_ACK || h.status != KVL_OK || h.length == ours[k].len);
	if (clean && !expect_break) {
		if (right) {
			ours[k].answered = true;
			ours[k].want_status = h.status;
		} else if (k < n_ours && !ours[k].seen_sent) {
			clean = false; /* it may or may not have left: no prediction */
		} else {
			expect_break = true; /* refused at its header, whatever follows */
		}
	}
	kvl_tcp_hdr_encode(&h, hdr);
	if (!peer_write(hdr, sizeof(hdr)) || !peer_write(pay, plen))
		clean = false;
	pump();
	if (clean && !expect_break && right && h.type == KVL_TCP_READ_RESP && h.status == KVL_OK)
		for (size_t j = 0; j < h.length; j++)
			if (arena[L_OFF + PG - h.length + j] != pat_byte(seed, j))
				FAIL("our READ's bytes differ at %zu", j);
}

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t size)
{
	size_t i = 0;

	setup_once();
	reset();
	while (i < size) {
		uint8_t op = d[i++];

		switch (op >> 5) {
		case 0: { /* raw bytes */
			size_t n = (op & 0x1f) + 1u;

			n = n > size - i ? size - i : n;
			clean = false;
			peer_write(d + i, n);
			i += n;
			pump();
			break;
		}
		case 1:
			send_request(KVL_TCP_WRITE_REQ, d, size, &i);
			break;
		case 2:
			send_request(KVL_TCP_READ_REQ, d, size, &i);
			break;
		case 3:
			post_ours(d, size, &i);
			break;
		case 4:
			answer_ours(d, size, &i);
			break;
		case 5: /* the peer stops reading, or reads again */
			cli_reads = !cli_reads;
			pump();
			break;
		case 6: /* the peer half-closes, or goes away */
			if (cli >= 0) {
				if (op & 1) {
					close(cli);
					cli = -1;
				} else {
					shutdown(cli, SHUT_WR);
				}
			}
			expect_break = true;
			clean = false;
			pump();
			break;
		default:
			pump();
			break;
		}
	}
	cli_reads = true;
	pump();
	/* The end: every request of ours completes exactly once. */
	kvl_tcp_fail_all(srv, KVL_ERR_CANCELED);
	reap();
	if (ours_done != n_ours)
		FAIL("%u of %u requests of ours completed", ours_done, n_ours);
	check_guards();
	kvl_tcp_conn_free(srv);
	srv = NULL;
	if (cli >= 0)
		close(cli);
	cli = -1;
	return 0;
}
