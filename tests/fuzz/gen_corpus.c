/* SPDX-License-Identifier: BSD-3-Clause */
/* Seed corpora for fuzz_ctl and fuzz_tcp, from the real encoders: written by gen-corpus.sh. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "ctrl_proto.h"
#include "tcp_data.h"

/*
 * Each seed is a program in the target's own input format (see the comment at the top of
 * fuzz_ctl.c / fuzz_tcp.c). The frames in them are what the real code puts on the wire:
 *  - ctl: kvl_ctrl_encode() of a handshake and an exchange as a node sends them (the demo
 *    secret's proofs, which a replay cannot reuse: the nonces are fresh each time), played
 *    both as the harness's own operations and as raw bytes;
 *  - tcp: the bytes a real kvl_tcp_conn client sends for a WRITE/READ session (in bounds, at
 *    the segment's end, past it, at offsets near 2^64), recorded from its socket, played as
 *    raw bytes and transcribed into the harness's frame operations.
 */

static const char *dir;
static uint8_t prog[1 << 16];
static size_t plen;

static void emit(const char *target, const char *name)
{
	char path[4096];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s/%s.bin", dir, target, name);
	f = fopen(path, "wb");
	if (f == NULL || fwrite(prog, 1, plen, f) != plen || fclose(f) != 0) {
		fprintf(stderr, "gen_corpus: %s: %s\n", path, strerror(errno));
		exit(1);
	}
	plen = 0;
}

static void put(const void *p, size_t n)
{
	if (plen + n > sizeof(prog)) {
		fprintf(stderr, "gen_corpus: program too long\n");
		exit(1);
	}
	memcpy(prog + plen, p, n);
	plen += n;
}

static void put8(uint8_t v)
{
	put(&v, 1);
}

/* Raw bytes as the targets' op 0: up to 32 bytes per op. */
static void put_raw(const uint8_t *p, size_t n)
{
	while (n > 0) {
		size_t k = n < 32 ? n : 32;

		put8((uint8_t)(k - 1));
		put(p, k);
		p += k;
		n -= k;
	}
}

static void put_frame(const struct kvl_ctrl_msg *m)
{
	static uint8_t buf[KVL_CTRL_HDR_LEN + KVL_CTRL_MAX_PAYLOAD];
	int n = kvl_ctrl_encode(m, buf, sizeof(buf));

	if (n <= 0) {
		fprintf(stderr, "gen_corpus: cannot encode %s\n", kvl_ctrl_type_name(m->type));
		exit(1);
	}
	put_raw(buf, (size_t)n);
}

/* fuzz_ctl's op for "any message of type t": ops 0x80..0xbf pick 1 + op % KVL_CTRL_TYPE_MAX. */
static uint8_t ctl_any(uint8_t type)
{
	for (unsigned op = 0x80; op < 0xc0; op++)
		if (1 + op % KVL_CTRL_TYPE_MAX == type)
			return (uint8_t)op;
	exit(1);
}

static void gen_ctl(void)
{
	struct kvl_secret s = { .len = 37 };
	struct kvl_ctrl_msg hello = { .type = KVL_CTRL_HELLO }, ch = { .type = KVL_CTRL_CHALLENGE };
	struct kvl_ctrl_msg m;
	uint8_t hb[16] = { 1, 0, 0, 0, 0, 0, 0, 0, 0x40, 0x42, 0x0f };

	memcpy(s.key, "kvlane-demo-secret-0123456789abcdef!!", 37);
	hello.u.hello.min_version = hello.u.hello.max_version = KVL_CTRL_VERSION;
	snprintf(hello.u.hello.name, sizeof(hello.u.hello.name), "node-a");
	for (int i = 0; i < KVL_NONCE_LEN; i++)
		hello.u.hello.nonce[i] = (uint8_t)(i * 5 + 1);
	ch.u.challenge.version = KVL_CTRL_VERSION;
	snprintf(ch.u.challenge.name, sizeof(ch.u.challenge.name), "node-b");
	for (int i = 0; i < KVL_NONCE_LEN; i++)
		ch.u.challenge.nonce[i] = (uint8_t)(i * 9 + 3);
	ch.u.challenge.session_id = 0x1122334455667788ull;

	/* accepting side: a whole session, as operations */
	put8(1);
	put8(0x20);			  /* HELLO */
	put8(0x40);			  /* the right AUTH */
	put8(ctl_any(KVL_CTRL_SEGMENTS)); /* SEGMENTS, 3 of them */
	put8(3);
	put8(ctl_any(KVL_CTRL_ENDPOINTS)); /* ENDPOINTS, 1 */
	put8(1);
	put8(ctl_any(KVL_CTRL_DOCTOR)); /* kvlane-doctor --peer asks: no links, answered */
	put8(0);
	put8(ctl_any(KVL_CTRL_HEARTBEAT));
	put8(16);
	put(hb, 16);
	put8(ctl_any(KVL_CTRL_HEARTBEAT_ACK));
	put8(16);
	put(hb, 16);
	put8(ctl_any(KVL_CTRL_BYE));
	put8(0);
	emit("ctl", "server_session");
	put8(1);
	put8(0x20);
	put8(0x60); /* a wrong proof */
	emit("ctl", "server_wrong_proof");
	put8(1);
	put8(0x40); /* a proof before any HELLO */
	put8(0x20);
	put8(0x40);
	emit("ctl", "server_proof_first");
	/* the same session's frames as raw bytes: a capture replayed */
	put8(1);
	put_frame(&hello);
	m = (struct kvl_ctrl_msg){ .type = KVL_CTRL_AUTH };
	kvl_auth_client_mac(&s, &hello, &ch, m.u.auth.mac);
	put_frame(&m);
	emit("ctl", "server_replayed_capture");
	put8(1);
	put_frame(&hello);
	put8(0x40);
	m = (struct kvl_ctrl_msg){ .type = KVL_CTRL_SEGMENTS };
	m.u.segments.n = 1;
	m.u.segments.seg[0] = (struct kvl_seg_desc){ .id = 1,
						     .flags = 3,
						     .length = 1 << 20,
						     .block_size = 4096,
						     .block_count = 256,
						     .n_layers = 1,
						     .n_planes = 1 };
	snprintf(m.u.segments.seg[0].name, sizeof(m.u.segments.seg[0].name), "kv");
	put_frame(&m);
	emit("ctl", "server_raw_hello");

	/* connecting side */
	put8(0);
	put8(0x20); /* CHALLENGE */
	put8(0x40); /* the right AUTH_OK */
	put8(ctl_any(KVL_CTRL_SEGMENTS));
	put8(2);
	put8(ctl_any(KVL_CTRL_ENDPOINTS));
	put8(2);
	put8(ctl_any(KVL_CTRL_HEARTBEAT));
	put8(16);
	put(hb, 16);
	emit("ctl", "client_session");
	put8(0);
	put8(0x20);
	put8(0x60); /* an impostor's AUTH_OK */
	emit("ctl", "client_impostor");
	put8(0);
	put8(0x20);
	put8(ctl_any(KVL_CTRL_AUTH_FAIL));
	put8(2);
	put8(KVL_AUTH_BAD_MAC);
	put8(0);
	emit("ctl", "client_auth_fail");
	put8(0);
	put_frame(&ch);
	m = (struct kvl_ctrl_msg){ .type = KVL_CTRL_AUTH_OK };
	kvl_auth_server_mac(&s, &hello, &ch, m.u.auth_ok.mac);
	put_frame(&m);
	emit("ctl", "client_replayed_capture");
	put8(0);
	put8(0x20);
	put8(ctl_any(KVL_CTRL_SEGMENTS)); /* before the server's proof */
	put8(1);
	put8(0x40);
	emit("ctl", "client_early_segments");
}

/* ---- tcp: record what a real client sends ---- */

static uint8_t wire[1 << 20];
static size_t wire_len;

static void record(const struct kvl_wr *wr, unsigned n)
{
	static uint8_t local[3 * 4096];
	int sv[2];
	struct kvl_tcp_conn *c;

	if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0)
		exit(1);
	c = kvl_tcp_conn_new(sv[0], NULL, 64);
	if (c == NULL)
		exit(1);
	for (unsigned i = 0; i < n; i++) {
		struct kvl_wr w = wr[i];

		w.local = local;
		memset(local, 0x30 + (int)i, sizeof(local));
		if (kvl_tcp_post(c, &w) != 0)
			exit(1);
	}
	while (kvl_tcp_progress(c) != 0) {
	}
	wire_len = 0;
	for (;;) {
		ssize_t r = recv(sv[1], wire + wire_len, sizeof(wire) - wire_len, MSG_DONTWAIT);

		if (r <= 0)
			break;
		wire_len += (size_t)r;
	}
	kvl_tcp_conn_free(c);
	close(sv[1]);
}

/* The recorded frames as fuzz_tcp's operations: WRITE 0x20 / READ 0x40, then seg, length
 * (selector 13 + 2 bytes), offset (selector 67 + 8 bytes) and a payload seed. */
static void transcribe(void)
{
	for (size_t off = 0; off + KVL_TCP_HDR_LEN <= wire_len;) {
		struct kvl_tcp_hdr h;

		kvl_tcp_hdr_decode(wire + off, &h);
		put8(h.type == KVL_TCP_WRITE_REQ ? 0x20 : 0x40);
		put8((uint8_t)h.seg_id);
		put8(13);
		put8((uint8_t)h.length);
		put8((uint8_t)(h.length >> 8));
		put8(67);
		for (int k = 0; k < 8; k++)
			put8((uint8_t)(h.offset >> (8 * k)));
		put8((uint8_t)off);
		off += KVL_TCP_HDR_LEN + (h.type == KVL_TCP_WRITE_REQ ? h.length : 0);
	}
}

static void gen_tcp(void)
{
	/* fuzz_tcp's table: 1 rw 8192 B, 2 ro 4096 B, 3 wo 1000 B, 4 GPU, 5 gone */
	const struct kvl_wr session[] = {
		{ .op = KVL_OP_WRITE, .remote_seg = 1, .remote_off = 0, .length = 512 },
		{ .op = KVL_OP_READ, .remote_seg = 1, .remote_off = 0, .length = 512 },
		{ .op = KVL_OP_READ, .remote_seg = 2, .remote_off = 4000, .length = 96 },
		{ .op = KVL_OP_WRITE, .remote_seg = 3, .remote_off = 900, .length = 100 },
		{ .op = KVL_OP_READ, .remote_seg = 1, .remote_off = 7680, .length = 512 },
	};
	const struct kvl_wr edges[] = {
		{ .op = KVL_OP_WRITE, .remote_seg = 3, .remote_off = 901, .length = 100 },
		{ .op = KVL_OP_WRITE,
		  .remote_seg = 1,
		  .remote_off = UINT64_MAX - 15,
		  .length = 32 },
		{ .op = KVL_OP_READ,
		  .remote_seg = 2,
		  .remote_off = 0 - (uint64_t)64,
		  .length = 128 },
		{ .op = KVL_OP_WRITE, .remote_seg = 2, .remote_off = 0, .length = 8 },
		{ .op = KVL_OP_READ, .remote_seg = 3, .remote_off = 0, .length = 8 },
		{ .op = KVL_OP_WRITE, .remote_seg = 4, .remote_off = 0, .length = 8 },
		{ .op = KVL_OP_READ, .remote_seg = 5, .remote_off = 0, .length = 8 },
		{ .op = KVL_OP_READ, .remote_seg = 1, .remote_off = 8192, .length = 0 },
	};
	const struct kvl_wr big[] = {
		{ .op = KVL_OP_WRITE, .remote_seg = 1, .remote_off = 4096, .length = 4096 },
		{ .op = KVL_OP_READ, .remote_seg = 1, .remote_off = 0, .length = 8192 },
	};

	record(session, 5);
	put_raw(wire, wire_len);
	emit("tcp", "session_raw");
	transcribe();
	emit("tcp", "session_frames");
	record(edges, 8);
	put_raw(wire, wire_len);
	emit("tcp", "edges_raw");
	transcribe();
	emit("tcp", "edges_frames");
	record(big, 2);
	transcribe();
	emit("tcp", "big_frames");
	/* our own requests, answered right, then one answered out of order */
	put8(0x60);
	put8(0x03); /* READ from segment 1 */
	put8(0x00);
	put8(0x01); /* 256 bytes */
	put8(0);
	put8(0);
	put8(0x60);
	put8(0x02); /* WRITE to segment 1 */
	put8(0x40);
	put8(0x00);
	put8(0);
	put8(0);
	put8(0x80);
	put8(0x00); /* the READ's answer: OK, 256 bytes */
	put8(0x11);
	put8(0x80);
	put8(0x00); /* the WRITE's */
	put8(0x22);
	put8(0x60);
	put8(0x03);
	put8(0x10);
	put8(0x00);
	put8(0);
	put8(0);
	put8(0x80);
	put8(0x80); /* a wrong req_id */
	put8(0x33);
	put8(0x05);
	emit("tcp", "initiator");
}

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: %s CORPUS_DIR (with ctl/ and tcp/ in it)\n", argv[0]);
		return 2;
	}
	dir = argv[1];
	gen_ctl();
	gen_tcp();
	return 0;
}
