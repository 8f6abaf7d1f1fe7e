/* SPDX-License-Identifier: BSD-3-Clause */
/* Unit tests of the control protocol: pinned wire bytes, every refusal, the proofs, the secret. */
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ctrl_proto.h"
#include "kvl_test.h"

/* Messages are ~7 KiB: keep them off the stack. */
static struct kvl_ctrl_msg m, d;
static uint8_t fb[KVL_CTRL_HDR_LEN + KVL_CTRL_MAX_PAYLOAD];

/* ---- building messages ---- */

static void seg_fill(struct kvl_seg_desc *s, uint32_t id)
{
	/* 2 planes apart inside each layer: [K blocks][V blocks] per layer. */
	s->id = id;
	s->flags = 3;
	s->block_size = 4096;
	s->block_count = 16;
	s->n_layers = 8;
	s->n_planes = 2;
	s->plane_stride = 4096 * 16;
	s->layer_stride = 2 * 4096 * 16;
	s->length = 8 * s->layer_stride;
	snprintf(s->name, sizeof(s->name), "kv-%u", id);
}

/* A valid message of @type with every field set to something not zero. */
static void fill(struct kvl_ctrl_msg *x, int type)
{
	memset(x, 0, sizeof(*x));
	x->type = (uint16_t)type;
	x->version = KVL_CTRL_VERSION;
	x->seq = 0x10000u + (uint32_t)type;
	switch (type) {
	case KVL_CTRL_HELLO:
		x->u.hello.min_version = 1;
		x->u.hello.max_version = 3;
		strcpy(x->u.hello.name, "prefill-node-0");
		for (int i = 0; i < KVL_NONCE_LEN; i++)
			x->u.hello.nonce[i] = (uint8_t)(i * 7 + 1);
		break;
	case KVL_CTRL_CHALLENGE:
		x->u.challenge.version = 1;
		strcpy(x->u.challenge.name, "decode-node-1");
		for (int i = 0; i < KVL_NONCE_LEN; i++)
			x->u.challenge.nonce[i] = (uint8_t)(0xff - i);
		x->u.challenge.session_id = 0xfedcba9876543210ull;
		break;
	case KVL_CTRL_AUTH:
	case KVL_CTRL_AUTH_OK:
		for (int i = 0; i < KVL_MAC_LEN; i++)
			x->u.auth.mac[i] = (uint8_t)(i + type);
		break;
	case KVL_CTRL_AUTH_FAIL:
		x->u.auth_fail.reason = KVL_AUTH_BAD_SESSION;
		break;
	case KVL_CTRL_SEGMENTS:
		x->u.segments.n = KVL_CTRL_MAX_SEGS;
		for (uint32_t i = 0; i < KVL_CTRL_MAX_SEGS; i++)
			seg_fill(&x->u.segments.seg[i], i + 1);
		/* Longest name, one plane, one layer (strides unused), plane-major geometry. */
		memset(x->u.segments.seg[1].name, 'n', KVL_CTRL_NAME_LEN - 1);
		x->u.segments.seg[2].n_planes = 1;
		x->u.segments.seg[2].n_layers = 1;
		x->u.segments.seg[2].layer_stride = 0;
		x->u.segments.seg[2].plane_stride = 0;
		x->u.segments.seg[3].layer_stride = 4096 * 16;
		x->u.segments.seg[3].plane_stride = 8 * 4096 * 16;
		x->u.segments.seg[3].length = 16 * 4096 * 16;
		x->u.segments.seg[3].flags = 1;
		break;
	case KVL_CTRL_ENDPOINTS:
		x->u.endpoints.n = KVL_CTRL_MAX_EPS;
		for (int i = 0; i < KVL_CTRL_MAX_EPS; i++) {
			struct kvl_endpoint *e = &x->u.endpoints.ep[i];

			snprintf(e->nic, sizeof(e->nic), "rail%d", i);
			e->transport = (uint8_t)(i % 4);
			snprintf(e->addr, sizeof(e->addr), "[fd00::%x]:%d", i, 18600 + i);
		}
		memset(x->u.endpoints.ep[0].addr, 'a', KVL_CTRL_ADDR_LEN - 1);
		break;
	case KVL_CTRL_HEARTBEAT:
	case KVL_CTRL_HEARTBEAT_ACK:
		x->u.heartbeat.seq = 0x1122334455667788ull;
		x->u.heartbeat.sent_ns = 0x8877665544332211ull;
		break;
	case KVL_CTRL_DATA_BIND:
		x->u.data_bind.session_id = 0x0102030405060708ull;
		x->u.data_bind.conn_index = 0xa0b0c0d0u;
		x->u.data_bind.conn_count = 0x01020304u;
		for (int i = 0; i < KVL_MAC_LEN; i++)
			x->u.data_bind.mac[i] = (uint8_t)(0x40 + i);
		break;
	case KVL_CTRL_DATA_CHALLENGE:
		for (int i = 0; i < KVL_NONCE_LEN; i++)
			x->u.data_challenge.nonce[i] = (uint8_t)(0xe0 + i);
		break;
	case KVL_CTRL_ERROR:
		x->u.error.code = 0xbeef;
		memset(x->u.error.text, 't', KVL_CTRL_TEXT_LEN - 1);
		break;
	case KVL_CTRL_QP_INFO:
		x->u.qp_info.conn_index = 7;
		memset(x->u.qp_info.nic, 'r', KVL_CTRL_NAME_LEN - 1);
		x->u.qp_info.qpn = 0xabcdef;
		x->u.qp_info.psn = 0x123456;
		for (int i = 0; i < 16; i++)
			x->u.qp_info.gid[i] = (uint8_t)(0xf0 + i);
		x->u.qp_info.lid = 0x1234;
		x->u.qp_info.mtu = 5;
		x->u.qp_info.gid_type = 2;
		x->u.qp_info.gid_index = 3;
		x->u.qp_info.port = 1;
		break;
	case KVL_CTRL_RKEYS:
		strcpy(x->u.rkeys.nic, "rail0");
		x->u.rkeys.n = KVL_CTRL_MAX_SEGS;
		for (uint32_t i = 0; i < KVL_CTRL_MAX_SEGS; i++) {
			x->u.rkeys.key[i].seg_id = i + 1;
			x->u.rkeys.key[i].rkey = 0x80000000u + i;
			x->u.rkeys.key[i].addr = 0x7f0000000000ull + ((uint64_t)i << 30);
		}
		break;
	case KVL_CTRL_QP_RESYNC:
		x->u.qp_resync.kind = 2;
		x->u.qp_resync.dst_qpn = 0xfedcba;
		x->u.qp_resync.src_qpn = 0x000011;
		x->u.qp_resync.psn = 0xffffff;
		x->u.qp_resync.echo = 0x0a0b0c;
		break;
	case KVL_CTRL_REQ_CANCEL:
		x->u.req_cancel.req = 0x0102030405060708ull;
		x->u.req_cancel.status = 8; /* KVL_ERR_CANCELED */
		break;
	case KVL_CTRL_DOCTOR: /* every field at its widest */
		x->u.doctor.reply = 1;
		x->u.doctor.n = KVL_CTRL_MAX_EPS;
		for (uint32_t i = 0; i < KVL_CTRL_MAX_EPS; i++) {
			struct kvl_ctrl_link *l = &x->u.doctor.link[i];

			memset(l->nic, 'n', KVL_CTRL_NAME_LEN - 1);
			memset(l->device, 'd', KVL_CTRL_NAME_LEN - 1);
			memset(l->link_layer, 'l', KVL_CTRL_LL_LEN - 1);
			l->transport = (uint8_t)(i % 4);
			l->gid_type = i % 2 ? 2 : KVL_CTRL_NONE;
			l->gid_index = (uint8_t)i;
			l->traffic_class = 0xff;
			l->port_mtu = 4096;
			l->netdev_mtu = 0xfffffff0u;
			l->ini_mtu = 1024;
			l->rate_mbps = 400000 + i;
		}
		break;
	case KVL_CTRL_HOST:
		for (int i = 0; i < KVL_HOST_ID_LEN; i++)
			x->u.host.host_id[i] = (uint8_t)(0x90 + i);
		x->u.host.incarnation = 0x1122334455667788ull;
		x->u.host.pid = 0xfffffffeu;
		break;
	case KVL_CTRL_IPC_SEGS: /* every segment, every byte of each handle */
		x->u.ipc_segs.incarnation = 0x8877665544332211ull;
		x->u.ipc_segs.n = KVL_CTRL_MAX_SEGS;
		for (uint32_t i = 0; i < KVL_CTRL_MAX_SEGS; i++) {
			struct kvl_ctrl_ipc_seg *g = &x->u.ipc_segs.seg[i];

			g->seg_id = i + 1;
			g->seg_gen = 0xf0000000u + i;
			for (int k = 0; k < KVL_GPU_UUID_LEN; k++)
				g->gpu_uuid[k] = (uint8_t)(i * 7 + k);
			for (int k = 0; k < KVL_IPC_HANDLE_LEN; k++)
				g->handle[k] = (uint8_t)(i * 13 + k);
			g->offset = (uint64_t)i << 21;
			g->length = (1ull << 40) + i;
		}
		break;
	default: /* DATA_BIND_OK, BYE: header only */
		break;
	}
}

/* Decode into d; a frame that is not returned whole must leave *consumed at 0. */
static int dec(const uint8_t *buf, size_t len)
{
	size_t used = 12345;
	int rc = kvl_ctrl_decode(buf, len, &d, &used);

	if (rc != 1 && used != 0) {
		fprintf(stderr, "  consumed %zu on rc %d\n", used, rc);
		CHECK(used == 0);
	}
	return rc;
}

/* Encode @x into fb; the frame's length. */
static int enc(const struct kvl_ctrl_msg *x)
{
	return kvl_ctrl_encode(x, fb, sizeof(fb));
}

static void put16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
}

static void put32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static void put64(uint8_t *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

/* A frame with any header values, for the cases encode rightly refuses to produce. */
static size_t raw(uint8_t *out, uint32_t magic, uint16_t ver, uint16_t type, uint32_t length,
		  const void *payload, size_t plen)
{
	put32(out, magic);
	put16(out + 4, ver);
	put16(out + 6, type);
	put32(out + 8, length);
	put32(out + 12, 99);
	if (plen)
		memcpy(out + KVL_CTRL_HDR_LEN, payload, plen);
	return KVL_CTRL_HDR_LEN + plen;
}

/* ---- pinned wire format ---- */

static void test_vectors(void)
{
	static const uint8_t hb[] = {
		0x4b, 0x56, 0x4c, 0x43,				/* "KVLC" */
		0x03, 0x00,					/* version 3 */
		0x08, 0x00,					/* HEARTBEAT */
		0x10, 0x00, 0x00, 0x00,				/* 16 payload bytes */
		0x07, 0x00, 0x00, 0x00,				/* seq 7 */
		0x08, 0x07, 0x06, 0x05, 0x04, 0x03, 0x02, 0x01, /* heartbeat.seq */
		0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11, /* sent_ns */
	};
	uint8_t hello[16 + 39] = {
		0x4b, 0x56, 0x4c, 0x43, 0x03, 0x00, 0x01, 0x00, /* KVLC v3 HELLO */
		0x27, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, /* 39 bytes, seq 1 */
		0x01, 0x00, 0x02, 0x00,				/* min 1, max 2 */
		0x02, 'a',  'b',				/* name "ab" */
	};
	size_t used;

	for (int i = 0; i < 32; i++)
		hello[16 + 7 + i] = (uint8_t)i; /* nonce 00..1f */

	fill(&m, KVL_CTRL_HEARTBEAT);
	m.seq = 7;
	m.u.heartbeat.seq = 0x0102030405060708ull;
	m.u.heartbeat.sent_ns = 0x1122334455667788ull;
	CHECK_INT(enc(&m), sizeof(hb));
	CHECK(memcmp(fb, hb, sizeof(hb)) == 0);
	CHECK_INT(kvl_ctrl_decode(hb, sizeof(hb), &d, &used), 1);
	CHECK_INT(used, sizeof(hb));
	CHECK_INT(d.type, KVL_CTRL_HEARTBEAT);
	CHECK_INT(d.version, 3);
	CHECK_INT(d.seq, 7);
	CHECK(d.u.heartbeat.seq == 0x0102030405060708ull);
	CHECK(d.u.heartbeat.sent_ns == 0x1122334455667788ull);

	memset(&m, 0, sizeof(m));
	m.type = KVL_CTRL_HELLO;
	m.seq = 1;
	m.u.hello.min_version = 1;
	m.u.hello.max_version = 2;
	strcpy(m.u.hello.name, "ab");
	for (int i = 0; i < 32; i++)
		m.u.hello.nonce[i] = (uint8_t)i;
	CHECK_INT(enc(&m), sizeof(hello));
	CHECK(memcmp(fb, hello, sizeof(hello)) == 0);
	CHECK_INT(kvl_ctrl_decode(hello, sizeof(hello), &d, &used), 1);
	CHECK_INT(used, sizeof(hello));
	CHECK_INT(d.u.hello.min_version, 1);
	CHECK_INT(d.u.hello.max_version, 2);
	CHECK_STR(d.u.hello.name, "ab");
	CHECK_INT(d.u.hello.nonce[31], 31);
}

/* ---- round trips, prefixes, streams ---- */

static void test_round_trip(void)
{
	static uint8_t two[2 * sizeof(fb)];

	for (int t = 1; t <= KVL_CTRL_TYPE_MAX; t++) {
		size_t used = 0;
		int n, rc;

		fill(&m, t);
		n = enc(&m);
		CHECK(n >= KVL_CTRL_HDR_LEN);
		if (n < KVL_CTRL_HDR_LEN)
			continue;
		rc = kvl_ctrl_decode(fb, (size_t)n, &d, &used);
		CHECK_INT(rc, 1);
		CHECK_INT(used, n);
		if (memcmp(&m, &d, sizeof(m)) != 0) {
			fprintf(stderr, "  round trip of %s differs\n", kvl_ctrl_type_name(t));
			CHECK(0);
		}

		/* Every proper prefix is "need more" and consumes nothing. */
		int bad = 0;

		for (int k = 0; k < n; k++) {
			used = 777;
			rc = kvl_ctrl_decode(fb, (size_t)k, &d, &used);
			if (rc != 0 || used != 0) {
				if (!bad++)
					fprintf(stderr, "  %s: prefix %d of %d gave %d\n",
						kvl_ctrl_type_name(t), k, n, rc);
			}
		}
		CHECK_INT(bad, 0);

		/* Encoding needs exactly n bytes of room. */
		CHECK_INT(kvl_ctrl_encode(&m, fb, (size_t)n - 1), -ENOSPC);
		CHECK_INT(kvl_ctrl_encode(&m, NULL, 0), -ENOSPC);
		CHECK_INT(kvl_ctrl_encode(&m, fb, (size_t)n), n);

		/* Two frames in one buffer: each is consumed on its own, then "need more". */
		int n2;

		memcpy(two, fb, (size_t)n);
		fill(&m, t == KVL_CTRL_TYPE_MAX ? KVL_CTRL_HELLO : t + 1);
		n2 = kvl_ctrl_encode(&m, two + n, sizeof(two) - (size_t)n);
		CHECK(n2 > 0);
		if (n2 <= 0)
			continue;
		CHECK_INT(kvl_ctrl_decode(two, (size_t)(n + n2), &d, &used), 1);
		CHECK_INT(used, n);
		CHECK_INT(d.type, t);
		CHECK_INT(kvl_ctrl_decode(two + used, (size_t)(n + n2) - used, &d, &used), 1);
		CHECK_INT(used, n2);
		CHECK(memcmp(&m, &d, sizeof(m)) == 0);
		CHECK_INT(kvl_ctrl_decode(two + n + n2, 0, &d, &used), 0);
	}
}

/* ---- refusals ---- */

static void test_header_refusals(void)
{
	static const uint8_t hb_payload[16];
	uint8_t f[64];

	/* Bad magic: refused as soon as the magic is there, whatever else is missing. */
	raw(f, 0x434c564cu, 1, KVL_CTRL_HEARTBEAT, 16, hb_payload, 16);
	for (size_t k = 4; k <= 16; k++)
		CHECK_INT(dec(f, k), -KVL_CTRL_E_MAGIC);
	CHECK_INT(dec(f, 32), -KVL_CTRL_E_MAGIC);
	raw(f, 0x5054475fu, 1, KVL_CTRL_HEARTBEAT, 16, hb_payload, 16); /* "_GTP" */
	CHECK_INT(dec(f, 1), -KVL_CTRL_E_MAGIC);
	for (int i = 0; i < 4; i++) {
		raw(f, KVL_CTRL_MAGIC ^ (0x80u << (8 * i)), KVL_CTRL_VERSION, KVL_CTRL_HEARTBEAT,
		    16, hb_payload, 16);
		CHECK_INT(dec(f, 32), -KVL_CTRL_E_MAGIC);
	}

	/* The next version, the one before (1: no QP_RESYNC, REQ_CANCEL) and 0: refused from
	 * the header. */
	raw(f, KVL_CTRL_MAGIC, KVL_CTRL_VERSION + 1, KVL_CTRL_HEARTBEAT, 16, hb_payload, 16);
	CHECK_INT(dec(f, 6), -KVL_CTRL_E_VERSION);
	CHECK_INT(dec(f, 16), -KVL_CTRL_E_VERSION);
	CHECK_INT(dec(f, 32), -KVL_CTRL_E_VERSION);
	raw(f, KVL_CTRL_MAGIC, 1, KVL_CTRL_HEARTBEAT, 16, hb_payload, 16);
	CHECK_INT(dec(f, 32), -KVL_CTRL_E_VERSION);
	/* 2: no DATA_CHALLENGE, a bind without conn_count */
	raw(f, KVL_CTRL_MAGIC, 2, KVL_CTRL_HEARTBEAT, 16, hb_payload, 16);
	CHECK_INT(dec(f, 32), -KVL_CTRL_E_VERSION);
	raw(f, KVL_CTRL_MAGIC, 0, KVL_CTRL_HEARTBEAT, 16, hb_payload, 16);
	CHECK_INT(dec(f, 32), -KVL_CTRL_E_VERSION);

	/* Types 0 and one past the last. */
	raw(f, KVL_CTRL_MAGIC, KVL_CTRL_VERSION, 0, 0, NULL, 0);
	CHECK_INT(dec(f, 8), -KVL_CTRL_E_TYPE);
	CHECK_INT(dec(f, 16), -KVL_CTRL_E_TYPE);
	raw(f, KVL_CTRL_MAGIC, KVL_CTRL_VERSION, KVL_CTRL_TYPE_MAX + 1, 0, NULL, 0);
	CHECK_INT(dec(f, 16), -KVL_CTRL_E_TYPE);
	raw(f, KVL_CTRL_MAGIC, KVL_CTRL_VERSION, 0xffff, 0, NULL, 0);
	CHECK_INT(dec(f, 16), -KVL_CTRL_E_TYPE);

	/* Length over the maximum: refused from the header alone. */
	raw(f, KVL_CTRL_MAGIC, KVL_CTRL_VERSION, KVL_CTRL_SEGMENTS, KVL_CTRL_MAX_PAYLOAD + 1, NULL,
	    0);
	CHECK_INT(dec(f, 12), -KVL_CTRL_E_LENGTH);
	CHECK_INT(dec(f, 16), -KVL_CTRL_E_LENGTH);
	raw(f, KVL_CTRL_MAGIC, KVL_CTRL_VERSION, KVL_CTRL_ERROR, 0xffffffffu, NULL, 0);
	CHECK_INT(dec(f, 16), -KVL_CTRL_E_LENGTH);
	/* ... and a length that no message of this type can have. */
	raw(f, KVL_CTRL_MAGIC, KVL_CTRL_VERSION, KVL_CTRL_HEARTBEAT, 15, hb_payload, 15);
	CHECK_INT(dec(f, 16), -KVL_CTRL_E_LENGTH);
	raw(f, KVL_CTRL_MAGIC, KVL_CTRL_VERSION, KVL_CTRL_HEARTBEAT, 17, hb_payload, 16);
	CHECK_INT(dec(f, 16), -KVL_CTRL_E_LENGTH);
	raw(f, KVL_CTRL_MAGIC, KVL_CTRL_VERSION, KVL_CTRL_BYE, 1, hb_payload, 1);
	CHECK_INT(dec(f, 17), -KVL_CTRL_E_LENGTH);

	/* Bad arguments are not taken for a peer's error. */
	CHECK_INT(kvl_ctrl_decode(f, 16, NULL, NULL), -EINVAL);
	CHECK_INT(kvl_ctrl_decode(NULL, 4, &d, NULL), -EINVAL);
	CHECK_INT(kvl_ctrl_decode(NULL, 0, &d, NULL), 0);
}

static void test_length_mismatch(void)
{
	int n;

	/* HELLO (variable size): one byte short of the fields, one byte of trailing junk. */
	fill(&m, KVL_CTRL_HELLO);
	n = enc(&m);
	put32(fb + 8, (uint32_t)(n - 16 - 1));
	CHECK_INT(dec(fb, (size_t)n - 1), -KVL_CTRL_E_LENGTH);
	put32(fb + 8, (uint32_t)(n - 16 + 1));
	fb[n] = 0;
	CHECK_INT(dec(fb, (size_t)n), 0); /* waits for the byte it was promised */
	CHECK_INT(dec(fb, (size_t)n + 1), -KVL_CTRL_E_LENGTH);

	/* SEGMENTS says 2 but carries 1 (short); says 1 but carries 2 (trailing). */
	memset(&m, 0, sizeof(m));
	m.type = KVL_CTRL_SEGMENTS;
	m.u.segments.n = 2;
	seg_fill(&m.u.segments.seg[0], 1);
	seg_fill(&m.u.segments.seg[1], 2);
	n = enc(&m);
	CHECK(n > 0);
	put32(fb + 16, 1);
	CHECK_INT(dec(fb, (size_t)n), -KVL_CTRL_E_LENGTH);
	put32(fb + 16, 3);
	CHECK_INT(dec(fb, (size_t)n), -KVL_CTRL_E_LENGTH);

	/* ERROR whose text length runs past the payload. */
	fill(&m, KVL_CTRL_ERROR);
	strcpy(m.u.error.text, "abc");
	n = enc(&m);
	fb[18] = 4;
	CHECK_INT(dec(fb, (size_t)n), -KVL_CTRL_E_LENGTH);
}

static void test_field_refusals(void)
{
	uint8_t p[300];
	uint8_t f[400];
	size_t n;

	/* Strings: over the field (64 bytes leaves no room for the NUL), NUL inside. */
	memset(p, 0, sizeof(p));
	put16(p, 1);
	put16(p + 2, 1);
	p[4] = KVL_CTRL_NAME_LEN;
	memset(p + 5, 'x', KVL_CTRL_NAME_LEN);
	n = raw(f, KVL_CTRL_MAGIC, KVL_CTRL_VERSION, KVL_CTRL_HELLO, 5 + 64 + 32, p, 5 + 64 + 32);
	CHECK_INT(dec(f, n), -KVL_CTRL_E_LENGTH); /* no HELLO is that long: header says no */
	n = raw(f, KVL_CTRL_MAGIC, KVL_CTRL_VERSION, KVL_CTRL_HELLO, 5 + 63 + 32, p, 5 + 63 + 32);
	CHECK_INT(dec(f, n), -KVL_CTRL_E_FIELD);
	p[4] = KVL_CTRL_NAME_LEN - 1; /* 63 fits */
	n = raw(f, KVL_CTRL_MAGIC, KVL_CTRL_VERSION, KVL_CTRL_HELLO, 5 + 63 + 32, p, 5 + 63 + 32);
	CHECK_INT(dec(f, n), 1);
	CHECK_INT(strlen(d.u.hello.name), 63);
	p[4] = 3;
	memcpy(p + 5, "a\0b", 3);
	n = raw(f, KVL_CTRL_MAGIC, KVL_CTRL_VERSION, KVL_CTRL_HELLO, 5 + 3 + 32, p, 5 + 3 + 32);
	CHECK_INT(dec(f, n), -KVL_CTRL_E_FIELD);
	memset(p + 5, 'x', 3);
	n = raw(f, KVL_CTRL_MAGIC, KVL_CTRL_VERSION, KVL_CTRL_HELLO, 5 + 3 + 32, p, 5 + 3 + 32);
	CHECK_INT(dec(f, n), 1);
	CHECK_STR(d.u.hello.name, "xxx");

	/* hello min > max */
	put16(p, 3);
	put16(p + 2, 2);
	n = raw(f, KVL_CTRL_MAGIC, KVL_CTRL_VERSION, KVL_CTRL_HELLO, 5 + 3 + 32, p, 5 + 3 + 32);
	CHECK_INT(dec(f, n), -KVL_CTRL_E_FIELD);
	fill(&m, KVL_CTRL_HELLO);
	m.u.hello.min_version = 4;
	CHECK_INT(enc(&m), -EINVAL);

	/* ERROR text of 160 bytes: over its field. */
	put16(p, 1);
	p[2] = KVL_CTRL_TEXT_LEN;
	memset(p + 3, 'e', KVL_CTRL_TEXT_LEN);
	n = raw(f, KVL_CTRL_MAGIC, KVL_CTRL_VERSION, KVL_CTRL_ERROR, 3 + 160, p, 3 + 160);
	CHECK_INT(dec(f, n), -KVL_CTRL_E_LENGTH); /* 163 > the largest ERROR: header says no */
	n = raw(f, KVL_CTRL_MAGIC, KVL_CTRL_VERSION, KVL_CTRL_ERROR, 3 + 159, p, 3 + 159);
	CHECK_INT(dec(f, n), -KVL_CTRL_E_FIELD);

	/* auth_fail reasons 0 and 5; 1..4 pass. */
	for (int r = 0; r <= 5; r++) {
		put16(p, (uint16_t)r);
		n = raw(f, KVL_CTRL_MAGIC, KVL_CTRL_VERSION, KVL_CTRL_AUTH_FAIL, 2, p, 2);
		CHECK_INT(dec(f, n), r >= 1 && r <= 4 ? 1 : -KVL_CTRL_E_FIELD);
		fill(&m, KVL_CTRL_AUTH_FAIL);
		m.u.auth_fail.reason = (uint16_t)r;
		CHECK(enc(&m) == (r >= 1 && r <= 4 ? 18 : -EINVAL));
	}

	/* 65 segments, 17 endpoints: refused on the count, before any element is read. */
	put32(p, KVL_CTRL_MAX_SEGS + 1);
	n = raw(f, KVL_CTRL_MAGIC, KVL_CTRL_VERSION, KVL_CTRL_SEGMENTS, 4, p, 4);
	CHECK_INT(dec(f, n), -KVL_CTRL_E_FIELD);
	put32(p, 0xffffffffu);
	n = raw(f, KVL_CTRL_MAGIC, KVL_CTRL_VERSION, KVL_CTRL_SEGMENTS, 4, p, 4);
	CHECK_INT(dec(f, n), -KVL_CTRL_E_FIELD);
	put32(p, KVL_CTRL_MAX_EPS + 1);
	n = raw(f, KVL_CTRL_MAGIC, KVL_CTRL_VERSION, KVL_CTRL_ENDPOINTS, 4, p, 4);
	CHECK_INT(dec(f, n), -KVL_CTRL_E_FIELD);
	put32(p, 0);
	n = raw(f, KVL_CTRL_MAGIC, KVL_CTRL_VERSION, KVL_CTRL_ENDPOINTS, 4, p, 4);
	CHECK_INT(dec(f, n), 1);
	fill(&m, KVL_CTRL_SEGMENTS);
	m.u.segments.n = KVL_CTRL_MAX_SEGS + 1;
	CHECK_INT(enc(&m), -EINVAL);
	fill(&m, KVL_CTRL_ENDPOINTS);
	m.u.endpoints.n = KVL_CTRL_MAX_EPS + 1;
	CHECK_INT(enc(&m), -EINVAL);

	/* Endpoint transport 0..3 only; addr over its field. */
	fill(&m, KVL_CTRL_ENDPOINTS);
	m.u.endpoints.n = 1;
	strcpy(m.u.endpoints.ep[0].nic, "r");
	strcpy(m.u.endpoints.ep[0].addr, "h:1");
	m.u.endpoints.ep[0].transport = 3;
	n = (size_t)enc(&m);
	CHECK_INT(n, 16 + 4 + 2 + 1 + 4);
	fb[16 + 4 + 2] = 4;
	CHECK_INT(dec(fb, n), -KVL_CTRL_E_FIELD);
	m.u.endpoints.ep[0].transport = 4;
	CHECK_INT(enc(&m), -EINVAL);
	m.u.endpoints.ep[0].transport = 0;
	memset(m.u.endpoints.ep[0].addr, 'a', KVL_CTRL_ADDR_LEN); /* no NUL in the field */
	CHECK_INT(enc(&m), -EINVAL);

	/* Unknown type, and strings without their NUL, do not encode. */
	fill(&m, KVL_CTRL_BYE);
	m.type = 0;
	CHECK_INT(enc(&m), -EINVAL);
	m.type = KVL_CTRL_TYPE_MAX + 1;
	CHECK_INT(enc(&m), -EINVAL);
	/* QP_INFO and RKEYS fields out of range. */
	fill(&m, KVL_CTRL_QP_INFO);
	m.u.qp_info.qpn = 0x1000000;
	CHECK_INT(enc(&m), -EINVAL);
	fill(&m, KVL_CTRL_QP_INFO);
	m.u.qp_info.mtu = 6;
	CHECK_INT(enc(&m), -EINVAL);
	fill(&m, KVL_CTRL_QP_INFO);
	m.u.qp_info.port = 0;
	CHECK_INT(enc(&m), -EINVAL);
	fill(&m, KVL_CTRL_RKEYS);
	m.u.rkeys.key[5].seg_id = 0;
	CHECK_INT(enc(&m), -EINVAL);
	fill(&m, KVL_CTRL_RKEYS);
	m.u.rkeys.n = KVL_CTRL_MAX_SEGS + 1;
	CHECK_INT(enc(&m), -EINVAL);
	/* QP_RESYNC: kind 1..2, 24-bit QPNs and PSNs */
	fill(&m, KVL_CTRL_QP_RESYNC);
	m.u.qp_resync.kind = 3;
	CHECK_INT(enc(&m), -EINVAL);
	fill(&m, KVL_CTRL_QP_RESYNC);
	m.u.qp_resync.kind = 0;
	CHECK_INT(enc(&m), -EINVAL);
	fill(&m, KVL_CTRL_QP_RESYNC);
	m.u.qp_resync.psn = 0x1000000;
	CHECK_INT(enc(&m), -EINVAL);
	fill(&m, KVL_CTRL_QP_RESYNC);
	m.u.qp_resync.dst_qpn = 0x1000000;
	CHECK_INT(enc(&m), -EINVAL);
	fill(&m, KVL_CTRL_CHALLENGE);
	memset(m.u.challenge.name, 'c', sizeof(m.u.challenge.name));
	CHECK_INT(enc(&m), -EINVAL);
	CHECK_INT(kvl_ctrl_encode(NULL, fb, sizeof(fb)), -EINVAL);
}

/* Offsets of one segment's fields in a SEGMENTS frame that holds it first. */
enum {
	SEG0 = KVL_CTRL_HDR_LEN + 4,
	O_FLAGS = SEG0 + 4,
	O_LENGTH = SEG0 + 8,
	O_BSIZE = SEG0 + 16,
	O_BCOUNT = SEG0 + 20,
	O_NLAYERS = SEG0 + 24,
	O_NPLANES = SEG0 + 28,
	O_LSTRIDE = SEG0 + 32,
	O_PSTRIDE = SEG0 + 40,
};

/* One segment @s: encode and decode must both accept it (@want 1) or both refuse it. */
static void seg_case(const char *what, const struct kvl_seg_desc *s, int want)
{
	static struct kvl_ctrl_msg x;
	int rc_enc;

	memset(&x, 0, sizeof(x));
	x.type = KVL_CTRL_SEGMENTS;
	x.u.segments.n = 1;
	x.u.segments.seg[0] = *s;
	rc_enc = enc(&x);
	if (want == 1) {
		CHECK(rc_enc > 0);
		if (rc_enc > 0)
			CHECK_INT(dec(fb, (size_t)rc_enc), 1);
	} else {
		CHECK_INT(rc_enc, -EINVAL);
	}
	if (rc_enc < 0 || want != 1) {
		/* Encode refused it: write the frame by hand from a valid one, then patch. */
		struct kvl_seg_desc ok;
		int n;

		seg_fill(&ok, s->id);
		x.u.segments.seg[0] = ok;
		strcpy(x.u.segments.seg[0].name, s->name);
		n = enc(&x);
		CHECK(n > 0);
		if (n <= 0)
			return;
		put32(fb + O_FLAGS, s->flags);
		put64(fb + O_LENGTH, s->length);
		put32(fb + O_BSIZE, s->block_size);
		put32(fb + O_BCOUNT, s->block_count);
		put32(fb + O_NLAYERS, s->n_layers);
		put32(fb + O_NPLANES, s->n_planes);
		put64(fb + O_LSTRIDE, s->layer_stride);
		put64(fb + O_PSTRIDE, s->plane_stride);
		int rc = dec(fb, (size_t)n);

		if (rc != want)
			fprintf(stderr, "  segment case \"%s\": decode %d, expected %d\n", what, rc,
				want);
		CHECK_INT(rc, want);
	}
}

static void test_segments(void)
{
	struct kvl_seg_desc s;
	const int F = -KVL_CTRL_E_FIELD;

	seg_fill(&s, 5);
	seg_case("valid", &s, 1);

	/* Flags: only remote read (1) and remote write (2). */
	for (uint32_t fl = 0; fl <= 3; fl++) {
		seg_fill(&s, 5);
		s.flags = fl;
		seg_case("flags 0..3", &s, 1);
	}
	seg_fill(&s, 5);
	s.flags = 4;
	seg_case("flags 4", &s, F);
	s.flags = 0x80000003u;
	seg_case("flags high bit", &s, F);

	seg_fill(&s, 5);
	s.n_planes = 3;
	seg_case("n_planes 3", &s, F);
	s.n_planes = 0;
	seg_case("n_planes 0", &s, F);
	seg_fill(&s, 5);
	s.n_layers = 0;
	seg_case("n_layers 0", &s, F);
	seg_fill(&s, 5);
	s.block_size = 0;
	seg_case("block_size 0", &s, F);

	/* Geometry inside length: exactly at the end passes, one byte more does not. */
	seg_fill(&s, 5);
	s.length = 7 * s.layer_stride + s.plane_stride + 4096 * 16;
	seg_case("geometry exactly fits", &s, 1);
	s.length--;
	seg_case("geometry one past length", &s, F);

	/* layer_stride * n_layers past length; and past 2^64. */
	seg_fill(&s, 5);
	s.n_layers = 9;
	seg_case("9 layers in a segment of 8", &s, F);
	seg_fill(&s, 5);
	s.length = UINT64_MAX;
	s.layer_stride = 1ull << 63;
	s.n_layers = 3;
	seg_case("layer_stride * n_layers overflows", &s, F);
	s.n_layers = 2;
	s.n_planes = 1;
	seg_case("layer_stride * (n_layers-1) = 2^63 fits", &s, 1);
	s.n_planes = 2;
	s.plane_stride = 1ull << 63;
	seg_case("plane_stride + layer offset overflows", &s, F);

	/* The largest block run u32 * u32 can give (it cannot pass 2^64), against length. */
	seg_fill(&s, 5);
	s.block_size = UINT32_MAX;
	s.block_count = UINT32_MAX;
	s.n_layers = 1;
	s.n_planes = 1;
	s.length = (uint64_t)UINT32_MAX * UINT32_MAX;
	seg_case("max block run fits", &s, 1);
	s.length--;
	seg_case("max block run one past length", &s, F);
	s.length = UINT64_MAX;
	s.n_planes = 2;
	s.plane_stride = UINT64_MAX - (uint64_t)UINT32_MAX * UINT32_MAX + 1;
	seg_case("plane_stride + max run overflows", &s, F);

	/* Strides shorter than the block run: blocks of two layers or planes overlap. */
	seg_fill(&s, 5);
	s.layer_stride = 4096 * 16 - 1;
	seg_case("layer_stride < run", &s, F);
	s.n_planes = 1;
	seg_case("layer_stride < run, one plane", &s, F);
	s.layer_stride++;
	seg_case("layer_stride == run, one plane", &s, 1);
	seg_fill(&s, 5);
	s.plane_stride = 4096 * 16 - 1;
	seg_case("plane_stride < run", &s, F);
	seg_fill(&s, 5);
	s.plane_stride = s.layer_stride; /* plane 1 of layer l == plane 0 of layer l+1 */
	seg_case("plane_stride == layer_stride", &s, F);
	s.plane_stride = s.layer_stride + 4096 * 16 - 1;
	seg_case("plane 1 overlaps next layer's plane 0", &s, F);
	s.plane_stride = 4096 * 16 + 1; /* V ends one byte into the next layer's K */
	s.length += 4096 * 16;
	seg_case("plane 1 runs into next layer", &s, F);
	/* Plane 1 a layer further on: no overlap (K 0,2,4.. V 3,5,..), but past length. */
	s.plane_stride = s.layer_stride + 4096 * 16;
	seg_case("plane 1 a layer on, past length", &s, F);
	s.length += s.layer_stride;
	seg_case("plane 1 a layer on, length grown", &s, 1);
	/* Plane-major: all K layers, then all V layers. */
	seg_fill(&s, 5);
	s.layer_stride = 4096 * 16;
	s.plane_stride = 8 * s.layer_stride;
	s.length = 16 * s.layer_stride;
	seg_case("plane-major", &s, 1);
	s.plane_stride = 7 * s.layer_stride;
	seg_case("plane-major, V overlaps the last K layer", &s, F);
	/* Interleaved: layer_stride 2 runs, plane_stride 3 runs, 2 layers: 0,2 | 3,5. */
	seg_fill(&s, 5);
	s.n_layers = 2;
	s.layer_stride = 2 * 4096 * 16;
	s.plane_stride = 3 * 4096 * 16;
	s.length = 6 * 4096 * 16;
	seg_case("interleaved without overlap", &s, 1);
	/* Unused strides are not judged: one layer, one plane. */
	seg_fill(&s, 5);
	s.n_layers = 1;
	s.n_planes = 1;
	s.layer_stride = 0;
	s.plane_stride = UINT64_MAX;
	s.length = 4096 * 16;
	seg_case("strides of size-1 dimensions ignored", &s, 1);
	/* No blocks: nothing to overlap, but the strides still stay inside length. */
	seg_fill(&s, 5);
	s.block_count = 0;
	s.layer_stride = 0;
	s.plane_stride = 0;
	seg_case("zero blocks", &s, 1);
	s.layer_stride = s.length;
	seg_case("zero blocks, layers past length", &s, F);

	/* A bad segment among good ones is found. */
	fill(&m, KVL_CTRL_SEGMENTS);
	m.u.segments.seg[40].n_planes = 3;
	CHECK_INT(enc(&m), -EINVAL);
}

/* ---- names ---- */

static void test_names(void)
{
	static const char *const types[] = { "?",
					     "HELLO",
					     "CHALLENGE",
					     "AUTH",
					     "AUTH_OK",
					     "AUTH_FAIL",
					     "SEGMENTS",
					     "ENDPOINTS",
					     "HEARTBEAT",
					     "HEARTBEAT_ACK",
					     "DATA_BIND",
					     "DATA_BIND_OK",
					     "ERROR",
					     "BYE",
					     "QP_INFO",
					     "RKEYS",
					     "QP_RESYNC",
					     "REQ_CANCEL",
					     "DATA_CHALLENGE",
					     "DOCTOR",
					     "HOST",
					     "IPC_SEGS",
					     "?" };

	for (int t = 0; t <= 22; t++)
		CHECK_STR(kvl_ctrl_type_name(t), types[t]);
	CHECK_STR(kvl_ctrl_type_name(-1), "?");
	CHECK_STR(kvl_ctrl_type_name(0x10000 + 1), "?");

	CHECK_STR(kvl_ctrl_strerror(0), "no error");
	CHECK_HAS(kvl_ctrl_strerror(-KVL_CTRL_E_MAGIC), "magic");
	CHECK_HAS(kvl_ctrl_strerror(KVL_CTRL_E_MAGIC), "magic");
	CHECK_HAS(kvl_ctrl_strerror(-KVL_CTRL_E_VERSION), "version");
	CHECK_HAS(kvl_ctrl_strerror(-KVL_CTRL_E_TYPE), "type");
	CHECK_HAS(kvl_ctrl_strerror(-KVL_CTRL_E_LENGTH), "length");
	CHECK_HAS(kvl_ctrl_strerror(KVL_CTRL_E_LENGTH), "length");
	CHECK_HAS(kvl_ctrl_strerror(-KVL_CTRL_E_FIELD), "field");
	CHECK_HAS(kvl_ctrl_strerror(KVL_CTRL_E_COUNT), "unknown");
	CHECK_HAS(kvl_ctrl_strerror(-EINVAL), "unknown");
	CHECK_HAS(kvl_ctrl_strerror(-2147483647 - 1), "unknown");
	CHECK_HAS(kvl_ctrl_strerror(2147483647), "unknown");

	CHECK_STR(kvl_auth_fail_name(KVL_AUTH_BAD_MAC), "bad-mac");
	CHECK_STR(kvl_auth_fail_name(KVL_AUTH_BAD_SESSION), "bad-session");
	CHECK_STR(kvl_auth_fail_name(KVL_AUTH_VERSION), "version");
	CHECK_STR(kvl_auth_fail_name(KVL_AUTH_BAD_BIND), "bad-bind");
	CHECK_STR(kvl_auth_fail_name(0), "?");
	CHECK_STR(kvl_auth_fail_name(5), "?");
}

/* ---- proofs ---- */

static void hex(const char *h, uint8_t out[KVL_MAC_LEN])
{
	for (int i = 0; i < KVL_MAC_LEN; i++) {
		unsigned v;

		sscanf(h + 2 * i, "%2x", &v);
		out[i] = (uint8_t)v;
	}
}

static bool mac_eq(const uint8_t *a, const uint8_t *b)
{
	return memcmp(a, b, KVL_MAC_LEN) == 0;
}

static void test_auth(void)
{
	static struct kvl_ctrl_msg h, c, h2, c2;
	static struct kvl_secret sec, sec2;
	uint8_t cm[KVL_MAC_LEN], sm[KVL_MAC_LEN], x[KVL_MAC_LEN], y[KVL_MAC_LEN];
	uint8_t want[KVL_MAC_LEN], nc[KVL_NONCE_LEN], ns[KVL_NONCE_LEN], nd[KVL_NONCE_LEN];
	uint8_t nd2[KVL_NONCE_LEN];

	memcpy(sec.key, "0123456789abcdef0123456789abcdef", 32);
	sec.len = 32;
	memset(&h, 0, sizeof(h));
	h.type = KVL_CTRL_HELLO;
	h.u.hello.min_version = 1;
	h.u.hello.max_version = 1;
	strcpy(h.u.hello.name, "client-a");
	memset(&c, 0, sizeof(c));
	c.type = KVL_CTRL_CHALLENGE;
	c.u.challenge.version = 1;
	strcpy(c.u.challenge.name, "server-b");
	c.u.challenge.session_id = 0x0123456789abcdefull;
	for (int i = 0; i < KVL_NONCE_LEN; i++) {
		nc[i] = h.u.hello.nonce[i] = (uint8_t)i;
		ns[i] = c.u.challenge.nonce[i] = (uint8_t)(0x80 + i);
		nd[i] = (uint8_t)(0xc0 + i);
		nd2[i] = nd[i];
	}
	nd2[KVL_NONCE_LEN - 1] ^= 1;

	/*
	 * Known answers (Python hmac over the documented input) pin the MAC input layout:
	 * u8 len + label, u16 min, u16 max, u8 len + client name, nonce_c, u16 version,
	 * u8 len + server name, nonce_s, u64 session id; data bind: u8 len + label, nonce_c,
	 * nonce_s, nonce_d, u64 session id, u32 conn_index, u32 conn_count. All little-endian.
	 */
	kvl_auth_client_mac(&sec, &h, &c, cm);
	hex("6d5eafde4ad6c483f9ef7d9667d2f597679b478563965c3bf9ca200781b1449a", want);
	CHECK(mac_eq(cm, want));
	kvl_auth_server_mac(&sec, &h, &c, sm);
	hex("d83c56b6b3ef46de9facc957ce372f7fbadb50125e2f1a7bcc1b764bc02d378e", want);
	CHECK(mac_eq(sm, want));
	kvl_auth_data_mac(&sec, nc, ns, nd, c.u.challenge.session_id, 3, 4, x);
	hex("9f1e3416c3c35e75de7a757c1cec29279ecee4b70a92b2dff5db0b59a309b131", want);
	CHECK(mac_eq(x, want));

	CHECK(!mac_eq(cm, sm));
	CHECK(kvl_auth_equal(cm, cm));
	CHECK(!kvl_auth_equal(cm, sm));
	kvl_auth_client_mac(&sec, &h, &c, x);
	CHECK(kvl_auth_equal(cm, x));
	for (int i = 0; i < KVL_MAC_LEN; i++) {
		memcpy(y, cm, KVL_MAC_LEN);
		y[i] ^= 0x01;
		CHECK(!kvl_auth_equal(cm, y));
	}

	/* Any one input changed: a different client proof. */
	struct {
		const char *what;
		int field;
	} cases[] = { { "nonce_c", 0 },	    { "nonce_s", 1 },	  { "session", 2 },
		      { "client name", 3 }, { "server name", 4 }, { "version", 5 },
		      { "min_version", 6 }, { "max_version", 7 }, { "secret", 8 } };

	for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
		h2 = h;
		c2 = c;
		sec2 = sec;
		switch (cases[k].field) {
		case 0:
			h2.u.hello.nonce[31] ^= 1;
			break;
		case 1:
			c2.u.challenge.nonce[0] ^= 0x80;
			break;
		case 2:
			c2.u.challenge.session_id++;
			break;
		case 3:
			strcpy(h2.u.hello.name, "client-b");
			break;
		case 4:
			strcpy(c2.u.challenge.name, "server-");
			break;
		case 5:
			c2.u.challenge.version = 2;
			break;
		case 6:
			h2.u.hello.min_version = 0;
			break;
		case 7:
			h2.u.hello.max_version = 2;
			break;
		case 8:
			sec2.key[0] ^= 1;
			break;
		}
		kvl_auth_client_mac(&sec2, &h2, &c2, x);
		kvl_auth_server_mac(&sec2, &h2, &c2, y);
		if (mac_eq(x, cm) || mac_eq(y, sm))
			fprintf(stderr, "  proof does not depend on %s\n", cases[k].what);
		CHECK(!mac_eq(x, cm));
		CHECK(!mac_eq(y, sm));
	}

	/* The boundary between the names is part of the input ("client-a"+"server-b" vs
	 * "client-as"+"erver-b"). */
	h2 = h;
	c2 = c;
	strcpy(h2.u.hello.name, "client-as");
	strcpy(c2.u.challenge.name, "erver-b");
	kvl_auth_client_mac(&sec, &h2, &c2, x);
	CHECK(!mac_eq(x, cm));

	/* Data bind: depends on the connection index, the session, both handshake nonces, the
	 * connection's own nonce (a bind replayed on another connection fails) and the count. */
	kvl_auth_data_mac(&sec, nc, ns, nd, 77, 0, 2, x);
	kvl_auth_data_mac(&sec, nc, ns, nd, 77, 1, 2, y);
	CHECK(!mac_eq(x, y));
	kvl_auth_data_mac(&sec, nc, ns, nd, 77, 0, 2, y);
	CHECK(kvl_auth_equal(x, y));
	kvl_auth_data_mac(&sec, nc, ns, nd, 78, 0, 2, y);
	CHECK(!mac_eq(x, y));
	kvl_auth_data_mac(&sec, ns, nc, nd, 77, 0, 2, y);
	CHECK(!mac_eq(x, y));
	kvl_auth_data_mac(&sec, nc, ns, nd2, 77, 0, 2, y);
	CHECK(!mac_eq(x, y));
	kvl_auth_data_mac(&sec, nc, ns, nd, 77, 0, 3, y);
	CHECK(!mac_eq(x, y));
	kvl_auth_data_mac(&sec, nc, ns, NULL, 77, 0, 2, y);
	CHECK(!mac_eq(x, y));

	/* No usable secret: the proof is unpredictable and never matches itself. */
	memset(&sec2, 0, sizeof(sec2));
	kvl_auth_client_mac(&sec2, &h, &c, x);
	kvl_auth_client_mac(&sec2, &h, &c, y);
	CHECK(!kvl_auth_equal(x, y));
	sec2.len = KVL_SECRET_MIN - 1;
	kvl_auth_data_mac(&sec2, nc, ns, nd, 1, 1, 2, x);
	kvl_auth_data_mac(&sec2, nc, ns, nd, 1, 1, 2, y);
	CHECK(!kvl_auth_equal(x, y));
	kvl_auth_client_mac(&sec, NULL, &c, x);
	kvl_auth_client_mac(&sec, NULL, &c, y);
	CHECK(!kvl_auth_equal(x, y));
	/* All zeros is the "could not compute" value: never equal, even to itself. */
	memset(x, 0, sizeof(x));
	memset(y, 0, sizeof(y));
	CHECK(!kvl_auth_equal(x, y));

	/* Random bytes: not all the same, two draws differ. */
	memset(x, 0, sizeof(x));
	memset(y, 0, sizeof(y));
	CHECK_INT(kvl_random(x, sizeof(x)), 0);
	CHECK_INT(kvl_random(y, sizeof(y)), 0);
	CHECK(!mac_eq(x, y));
	CHECK_INT(kvl_random(NULL, 0), 0);
}

/* ---- the secret file ---- */

static char tmpdir_path[64];

/* A fresh file holding @len bytes of @data with @mode; its path in @path. */
static void mkfile(char *path, size_t cap, const void *data, size_t len, mode_t mode)
{
	int fd;

	snprintf(path, cap, "/tmp/kvl_secret_XXXXXX");
	fd = mkstemp(path);
	CHECK(fd >= 0);
	if (fd < 0)
		return;
	CHECK(write(fd, data, len) == (ssize_t)len);
	CHECK(fchmod(fd, mode) == 0);
	close(fd);
}

static int load(const char *path, char *err, size_t errlen)
{
	static struct kvl_secret s;

	return kvl_secret_load(path, &s, false, err, errlen);
}

#define S32 "0123456789abcdef0123456789abcdef" /* 32 bytes: the shortest secret taken */

static void test_secret(void)
{
	static struct kvl_secret s;
	char path[64], err[512], big[KVL_SECRET_MAX + 8], same[64];
	int rc;

	/* Good, with "\n" stripped. */
	mkfile(path, sizeof(path), S32 "0123\n", 37, 0600);
	rc = kvl_secret_load(path, &s, false, err, sizeof(err));
	CHECK_INT(rc, 0);
	CHECK_STR(err, "");
	CHECK_INT(s.len, 36);
	CHECK(memcmp(s.key, S32 "0123", 36) == 0);
	unlink(path);

	/* "\r\n" stripped; only one newline is; binary bytes kept; mode 0400 is fine. */
	mkfile(path, sizeof(path), S32 "\r\n", 34, 0400);
	CHECK_INT(kvl_secret_load(path, &s, false, err, sizeof(err)), 0);
	CHECK_INT(s.len, 32);
	unlink(path);
	mkfile(path, sizeof(path), "0123456789abcdef0123456789abcde\n\n", 33, 0600);
	CHECK_INT(kvl_secret_load(path, &s, false, err, sizeof(err)), 0);
	CHECK_INT(s.len, 32);
	CHECK_INT(s.key[31], '\n');
	unlink(path);
	mkfile(path, sizeof(path),
	       "\0\1\2\3\4\5\6\7\0\1\2\3\4\5\6\7\0\1\2\3\4\5\6\7\0\1\2\3\4\5\6\7", 32, 0600);
	CHECK_INT(kvl_secret_load(path, &s, false, err, sizeof(err)), 0);
	CHECK_INT(s.len, 32);
	CHECK_INT(s.key[9], 1);
	unlink(path);

	/* Too short: 31 bytes, and 31 + "\n" (and 16, once enough). The key is wiped. */
	mkfile(path, sizeof(path), S32, 31, 0600);
	memset(&s, 0xaa, sizeof(s));
	rc = kvl_secret_load(path, &s, false, err, sizeof(err));
	CHECK_INT(rc, -EINVAL);
	CHECK_HAS(err, path);
	CHECK_HAS(err, "31 bytes");
	CHECK_HAS(err, "at least 32");
	CHECK_HAS(err, "head -c 32 /dev/urandom");
	CHECK_INT(s.len, 0);
	CHECK_INT(s.key[0], 0);
	CHECK_INT(s.key[KVL_SECRET_MAX - 1], 0);
	unlink(path);
	mkfile(path, sizeof(path), "0123456789abcdef0123456789abcde\n", 32, 0600);
	CHECK_INT(load(path, err, sizeof(err)), -EINVAL);
	unlink(path);
	mkfile(path, sizeof(path), "0123456789abcdef", 16, 0600);
	CHECK_INT(load(path, err, sizeof(err)), -EINVAL);
	CHECK_HAS(err, "16 bytes");
	unlink(path);

	/* One byte repeated: 32 zero bytes, 64 'a' + "\n"; refused, and the key wiped. */
	memset(same, 0, sizeof(same));
	mkfile(path, sizeof(path), same, 32, 0600);
	memset(&s, 0xaa, sizeof(s));
	CHECK_INT(kvl_secret_load(path, &s, false, err, sizeof(err)), -EINVAL);
	CHECK_HAS(err, path);
	CHECK_HAS(err, "one byte repeated (32 x 0x00)");
	CHECK_INT(s.len, 0);
	CHECK_INT(s.key[0], 0);
	unlink(path);
	memset(same, 'a', sizeof(same));
	same[63] = '\n';
	mkfile(path, sizeof(path), same, 64, 0600);
	CHECK_INT(load(path, err, sizeof(err)), -EINVAL);
	CHECK_HAS(err, "63 x 0x61");
	unlink(path);
	/* One byte that differs is enough: the rule is "repeated", not a strength meter. */
	same[62] = 'b';
	mkfile(path, sizeof(path), same, 64, 0600);
	CHECK_INT(load(path, err, sizeof(err)), 0);
	unlink(path);

	/* Too long: 1025 bytes; 1024 + "\r\n" is fine. */
	memset(big, 'k', sizeof(big));
	big[0] = 'K';
	mkfile(path, sizeof(path), big, KVL_SECRET_MAX + 1, 0600);
	rc = kvl_secret_load(path, &s, false, err, sizeof(err));
	CHECK_INT(rc, -EINVAL);
	CHECK_HAS(err, path);
	CHECK_HAS(err, "longer than 1024");
	CHECK_INT(s.len, 0);
	unlink(path);
	big[KVL_SECRET_MAX] = '\r';
	big[KVL_SECRET_MAX + 1] = '\n';
	mkfile(path, sizeof(path), big, KVL_SECRET_MAX + 2, 0600);
	CHECK_INT(kvl_secret_load(path, &s, false, err, sizeof(err)), 0);
	CHECK_INT(s.len, KVL_SECRET_MAX);
	unlink(path);
	memset(big, 'k', sizeof(big));
	big[0] = 'K';
	mkfile(path, sizeof(path), big, sizeof(big), 0600);
	CHECK_INT(load(path, err, sizeof(err)), -EINVAL);
	unlink(path);

	/* Missing file. */
	rc = load("/tmp/kvl-no-such-secret-file", err, sizeof(err));
	CHECK_INT(rc, -ENOENT);
	CHECK_HAS(err, "/tmp/kvl-no-such-secret-file: ");
	CHECK_HAS(err, "not found");
	CHECK_HAS(err, "chmod 600");

	/* A directory. */
	snprintf(tmpdir_path, sizeof(tmpdir_path), "/tmp/kvl_secret_dir_XXXXXX");
	CHECK(mkdtemp(tmpdir_path) != NULL);
	rc = load(tmpdir_path, err, sizeof(err));
	CHECK_INT(rc, -EISDIR);
	CHECK_HAS(err, tmpdir_path);
	CHECK_HAS(err, "directory");
	rmdir(tmpdir_path);

	/* Not a regular file. */
	rc = load("/dev/null", err, sizeof(err));
	CHECK_INT(rc, -EINVAL);
	CHECK_HAS(err, "/dev/null: ");
	CHECK_HAS(err, "regular file");

	/* World-readable: refused, naming the path, the mode and the fix; the key wiped. */
	mkfile(path, sizeof(path), S32 "\n", 33, 0644);
	memset(&s, 0xaa, sizeof(s));
	rc = kvl_secret_load(path, &s, false, err, sizeof(err));
	CHECK_INT(rc, -EPERM);
	CHECK_INT(s.len, 0);
	CHECK_HAS(err, path);
	CHECK_HAS(err, "mode 644 lets every user at it");
	CHECK_HAS(err, "chmod 600");
	/* ... even with group read allowed (others are never) */
	CHECK_INT(kvl_secret_load(path, &s, true, err, sizeof(err)), -EPERM);
	/* Group-readable (0640): refused with the key that allows it named; taken with it. */
	CHECK(chmod(path, 0640) == 0);
	CHECK_INT(kvl_secret_load(path, &s, false, err, sizeof(err)), -EPERM);
	CHECK_HAS(err, "mode 640 lets its group at it");
	CHECK_HAS(err, "secret_group_readable = true");
	CHECK_INT(kvl_secret_load(path, &s, true, err, sizeof(err)), 0);
	CHECK_INT(s.len, 32);
	CHECK_INT(kvl_secret_load(path, &s, true, NULL, 0), 0);
	/* Group-writable (0660) is never taken, and the message does not offer the key. */
	CHECK(chmod(path, 0660) == 0);
	CHECK_INT(kvl_secret_load(path, &s, true, err, sizeof(err)), -EPERM);
	CHECK(strstr(err, "secret_group_readable") == NULL);
	/* Others' execute bit alone (0601) is refused too. */
	CHECK(chmod(path, 0601) == 0);
	CHECK_INT(load(path, err, sizeof(err)), -EPERM);
	/* Unreadable (skipped as root, who reads it anyway). */
	CHECK(chmod(path, 0) == 0);
	if (geteuid() != 0) {
		CHECK_INT(load(path, err, sizeof(err)), -EACCES);
		CHECK_HAS(err, path);
	}
	unlink(path);

	/* A short err buffer is cut, not overrun. */
	char tiny[8];

	memset(tiny, 'z', sizeof(tiny));
	CHECK_INT(load("/tmp/kvl-no-such-secret-file", tiny, sizeof(tiny)), -ENOENT);
	CHECK_INT(strlen(tiny), 7);
	CHECK_INT(load("", err, sizeof(err)), -EINVAL);
}

/* ---- seed corpus for tests/fuzz/fuzz_ctrl.c ---- */

static int write_corpus(const char *dir)
{
	static const int types[] = { KVL_CTRL_HELLO,	 KVL_CTRL_CHALLENGE, KVL_CTRL_AUTH,
				     KVL_CTRL_AUTH_FAIL, KVL_CTRL_HEARTBEAT, KVL_CTRL_DATA_BIND,
				     KVL_CTRL_ERROR,	 KVL_CTRL_BYE,	     KVL_CTRL_QP_INFO };
	char path[512];
	int n;

	for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++) {
		fill(&m, types[i]);
		if (types[i] == KVL_CTRL_ERROR)
			strcpy(m.u.error.text, "segment 3 unknown");
		n = enc(&m);
		snprintf(path, sizeof(path), "%s/%s.bin", dir, kvl_ctrl_type_name(types[i]));
		FILE *f = fopen(path, "wb");

		if (f == NULL || n < 0 || fwrite(fb, 1, (size_t)n, f) != (size_t)n) {
			perror(path);
			return 1;
		}
		fclose(f);
	}

	/* Small SEGMENTS and ENDPOINTS (the full ones are over 2 KiB), and a stream of
	 * HEARTBEAT + HEARTBEAT_ACK + BYE so the fuzzer starts with back-to-back frames. */
	fill(&m, KVL_CTRL_SEGMENTS);
	m.u.segments.n = 4;
	n = enc(&m);
	snprintf(path, sizeof(path), "%s/SEGMENTS.bin", dir);
	FILE *f = fopen(path, "wb");

	if (f == NULL || n < 0 || fwrite(fb, 1, (size_t)n, f) != (size_t)n)
		return 1;
	fclose(f);
	fill(&m, KVL_CTRL_RKEYS);
	m.u.rkeys.n = 4;
	n = enc(&m);
	snprintf(path, sizeof(path), "%s/RKEYS.bin", dir);
	f = fopen(path, "wb");
	if (f == NULL || n < 0 || fwrite(fb, 1, (size_t)n, f) != (size_t)n)
		return 1;
	fclose(f);
	fill(&m, KVL_CTRL_ENDPOINTS);
	m.u.endpoints.n = 3;
	strcpy(m.u.endpoints.ep[0].addr, "10.0.0.2:18600");
	n = enc(&m);
	snprintf(path, sizeof(path), "%s/ENDPOINTS.bin", dir);
	f = fopen(path, "wb");
	if (f == NULL || n < 0 || fwrite(fb, 1, (size_t)n, f) != (size_t)n)
		return 1;
	fclose(f);

	size_t off = 0;

	fill(&m, KVL_CTRL_HEARTBEAT);
	off += (size_t)kvl_ctrl_encode(&m, fb + off, sizeof(fb) - off);
	fill(&m, KVL_CTRL_HEARTBEAT_ACK);
	off += (size_t)kvl_ctrl_encode(&m, fb + off, sizeof(fb) - off);
	fill(&m, KVL_CTRL_BYE);
	off += (size_t)kvl_ctrl_encode(&m, fb + off, sizeof(fb) - off);
	snprintf(path, sizeof(path), "%s/stream.bin", dir);
	f = fopen(path, "wb");
	if (f == NULL || fwrite(fb, 1, off, f) != off)
		return 1;
	fclose(f);
	return 0;
}

/* HOST and IPC_SEGS (feature level 4): what a garbled or hostile one gets. */
static void test_ipc_msgs(void)
{
	static uint8_t f[sizeof(fb)];
	uint8_t p[64] = { 0 };
	int n;

	/* a segment id 0, a zero length, an offset + length past 2^64: not encoded, not decoded
	 */
	fill(&m, KVL_CTRL_IPC_SEGS);
	m.u.ipc_segs.seg[5].seg_id = 0;
	CHECK_INT(enc(&m), -EINVAL);
	fill(&m, KVL_CTRL_IPC_SEGS);
	m.u.ipc_segs.seg[63].length = 0;
	CHECK_INT(enc(&m), -EINVAL);
	fill(&m, KVL_CTRL_IPC_SEGS);
	m.u.ipc_segs.seg[0].offset = UINT64_MAX - 4;
	CHECK_INT(enc(&m), -EINVAL);
	fill(&m, KVL_CTRL_IPC_SEGS);
	m.u.ipc_segs.n = KVL_CTRL_MAX_SEGS + 1;
	CHECK_INT(enc(&m), -EINVAL);
	/* the same on the wire: a valid frame, then its first segment id zeroed */
	fill(&m, KVL_CTRL_IPC_SEGS);
	n = enc(&m);
	CHECK(n > KVL_CTRL_HDR_LEN + 12);
	memcpy(f, fb, (size_t)n);
	memset(f + KVL_CTRL_HDR_LEN + 12, 0, 4);
	CHECK_INT(dec(f, (size_t)n), -KVL_CTRL_E_FIELD);
	/* a count over the maximum, before any segment is read */
	memcpy(f, fb, (size_t)n);
	put32(f + KVL_CTRL_HDR_LEN + 8, KVL_CTRL_MAX_SEGS + 1);
	CHECK_INT(dec(f, (size_t)n), -KVL_CTRL_E_FIELD);
	/* HOST: exactly 44 bytes; one short or one over is refused from the header */
	raw(f, KVL_CTRL_MAGIC, KVL_CTRL_VERSION, KVL_CTRL_HOST, 43, p, 43);
	CHECK_INT(dec(f, KVL_CTRL_HDR_LEN + 43), -KVL_CTRL_E_LENGTH);
	raw(f, KVL_CTRL_MAGIC, KVL_CTRL_VERSION, KVL_CTRL_HOST, 45, p, 45);
	CHECK_INT(dec(f, KVL_CTRL_HDR_LEN + 45), -KVL_CTRL_E_LENGTH);
	raw(f, KVL_CTRL_MAGIC, KVL_CTRL_VERSION, KVL_CTRL_HOST, 44, p, 44);
	CHECK_INT(dec(f, KVL_CTRL_HDR_LEN + 44), 1);
	CHECK_STR(kvl_ctrl_type_name(KVL_CTRL_IPC_SEGS), "IPC_SEGS");
}

int main(int argc, char **argv)
{
	if (argc == 3 && strcmp(argv[1], "--write-corpus") == 0)
		return write_corpus(argv[2]);

	test_vectors();
	test_round_trip();
	test_header_refusals();
	test_length_mismatch();
	test_field_refusals();
	test_segments();
	test_ipc_msgs();
	test_names();
	test_auth();
	test_secret();
	return kvl_test_done("ctrl_proto");
}
