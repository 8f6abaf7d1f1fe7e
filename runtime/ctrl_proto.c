/* SPDX-License-Identifier: BSD-3-Clause */
/* Control protocol codec (bounded, hostile-input parser) and the HMAC-SHA256 handshake proofs. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include "config.h" /* enum kvl_transport: the endpoint transport values */
#include "ctrl_proto.h"
#include "kvlane/kvlane.h" /* enum kvl_status: REQ_CANCEL's status */

/*
 * KVL_SEG_REMOTE_READ | KVL_SEG_REMOTE_WRITE (enum kvl_seg_flags, lcores/xport/xfer.h). Spelled out
 * because runtime/ does not include lcores/; the unit test pins which bits pass.
 */
#define SEG_FLAGS_KNOWN 0x3u

/* Fixed part of one segment descriptor on the wire (everything but its name). */
#define SEG_FIXED_LEN (4 + 4 + 8 + 4 + 4 + 4 + 4 + 8 + 8)
#define SEG_MAX_LEN   (SEG_FIXED_LEN + 1 + KVL_CTRL_NAME_LEN - 1)
#define EP_MIN_LEN    (1 + 1 + 1)
#define EP_MAX_LEN    (1 + KVL_CTRL_NAME_LEN - 1 + 1 + 1 + KVL_CTRL_ADDR_LEN - 1)
/* QP_INFO without its NIC name: conn_index, qpn, psn, gid, lid, mtu, gid_type, gid_index,
 * port */
#define QP_INFO_FIXED (4 + 4 + 4 + 16 + 2 + 4)
/* DOCTOR: one link (three strings, three u8, four u32) */
#define LINK_MAX_LEN                                                                               \
	(1 + KVL_CTRL_NAME_LEN - 1 + 1 + KVL_CTRL_NAME_LEN - 1 + 1 + 1 + KVL_CTRL_LL_LEN - 1 + 3 + \
	 16)

/* IPC_SEGS: one segment (seg_id, seg_gen, uuid, handle, offset, length) */
#define IPC_SEG_LEN (4 + 4 + KVL_GPU_UUID_LEN + KVL_IPC_HANDLE_LEN + 8 + 8)

/*
 * Smallest and largest payload each type can have. Lets the decoder refuse an impossible
 * length from the header alone, before it waits for (or buffers) the payload.
 */
static const struct {
	uint32_t min, max;
} payload_bounds[KVL_CTRL_TYPE_MAX + 1] = {
	[KVL_CTRL_HELLO] = { 2 + 2 + 1 + KVL_NONCE_LEN, 2 + 2 + KVL_CTRL_NAME_LEN + KVL_NONCE_LEN },
	[KVL_CTRL_CHALLENGE] = { 2 + 1 + KVL_NONCE_LEN + 8,
				 2 + KVL_CTRL_NAME_LEN + KVL_NONCE_LEN + 8 },
	[KVL_CTRL_AUTH] = { KVL_MAC_LEN, KVL_MAC_LEN },
	[KVL_CTRL_AUTH_OK] = { KVL_MAC_LEN, KVL_MAC_LEN },
	[KVL_CTRL_AUTH_FAIL] = { 2, 2 },
	[KVL_CTRL_SEGMENTS] = { 4, 4 + KVL_CTRL_MAX_SEGS *SEG_MAX_LEN },
	[KVL_CTRL_ENDPOINTS] = { 4, 4 + KVL_CTRL_MAX_EPS *EP_MAX_LEN },
	[KVL_CTRL_HEARTBEAT] = { 16, 16 },
	[KVL_CTRL_HEARTBEAT_ACK] = { 16, 16 },
	[KVL_CTRL_DATA_BIND] = { 8 + 4 + 4 + KVL_MAC_LEN, 8 + 4 + 4 + KVL_MAC_LEN },
	[KVL_CTRL_DATA_CHALLENGE] = { KVL_NONCE_LEN, KVL_NONCE_LEN },
	[KVL_CTRL_DATA_BIND_OK] = { 0, 0 },
	[KVL_CTRL_ERROR] = { 2 + 1, 2 + KVL_CTRL_TEXT_LEN },
	[KVL_CTRL_BYE] = { 0, 0 },
	[KVL_CTRL_QP_INFO] = { QP_INFO_FIXED + 1, QP_INFO_FIXED + KVL_CTRL_NAME_LEN },
	[KVL_CTRL_RKEYS] = { 1 + 4, KVL_CTRL_NAME_LEN + 4 + KVL_CTRL_MAX_SEGS * 16 },
	[KVL_CTRL_QP_RESYNC] = { 20, 20 },
	[KVL_CTRL_REQ_CANCEL] = { 12, 12 },
	[KVL_CTRL_DOCTOR] = { 1 + 4, 1 + 4 + KVL_CTRL_MAX_EPS *LINK_MAX_LEN },
	[KVL_CTRL_HOST] = { KVL_HOST_ID_LEN + 8 + 4, KVL_HOST_ID_LEN + 8 + 4 },
	[KVL_CTRL_IPC_SEGS] = { 8 + 4, 8 + 4 + KVL_CTRL_MAX_SEGS *IPC_SEG_LEN },
};

_Static_assert(4 + KVL_CTRL_MAX_SEGS * SEG_MAX_LEN <= KVL_CTRL_MAX_PAYLOAD,
	       "a full SEGMENTS message must fit one frame");
_Static_assert(4 + KVL_CTRL_MAX_EPS * EP_MAX_LEN <= KVL_CTRL_MAX_PAYLOAD,
	       "a full ENDPOINTS message must fit one frame");
_Static_assert(KVL_CTRL_NAME_LEN - 1 <= UINT8_MAX && KVL_CTRL_ADDR_LEN - 1 <= UINT8_MAX &&
		       KVL_CTRL_TEXT_LEN - 1 <= UINT8_MAX,
	       "wire strings carry a u8 length");

/* ---- little-endian helpers ---- */

static inline uint16_t le16(const uint8_t *p)
{
	return (uint16_t)(p[0] | (uint16_t)p[1] << 8);
}

static inline uint32_t le32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static inline uint64_t le64(const uint8_t *p)
{
	return (uint64_t)le32(p) | (uint64_t)le32(p + 4) << 32;
}

static inline void put_le16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
}

static inline void put_le32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static inline void put_le64(uint8_t *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

/* ---- writer: never writes past cap, but keeps counting so the caller learns the size ---- */

struct wr {
	uint8_t *p;
	size_t cap;
	size_t off;
};

static void w_bytes(struct wr *w, const void *src, size_t n)
{
	if (n && w->off <= w->cap && n <= w->cap - w->off)
		memcpy(w->p + w->off, src, n);
	w->off += n;
}

static void w_u8(struct wr *w, uint8_t v)
{
	w_bytes(w, &v, 1);
}

static void w_u16(struct wr *w, uint16_t v)
{
	uint8_t b[2];

	put_le16(b, v);
	w_bytes(w, b, sizeof(b));
}

static void w_u32(struct wr *w, uint32_t v)
{
	uint8_t b[4];

	put_le32(b, v);
	w_bytes(w, b, sizeof(b));
}

static void w_u64(struct wr *w, uint64_t v)
{
	uint8_t b[8];

	put_le64(b, v);
	w_bytes(w, b, sizeof(b));
}

/* @s was checked to be NUL-terminated within its field, so its length fits a u8. */
static void w_str(struct wr *w, const char *s, size_t field)
{
	size_t n = strnlen(s, field);

	w_u8(w, (uint8_t)n);
	w_bytes(w, s, n);
}

/* ---- reader: every get is bounded by the payload length; short reads are E_LENGTH ---- */

struct rd {
	const uint8_t *p;
	size_t len;
	size_t off;
};

static int r_bytes(struct rd *r, void *dst, size_t n)
{
	if (n > r->len - r->off)
		return -KVL_CTRL_E_LENGTH;
	if (n)
		memcpy(dst, r->p + r->off, n);
	r->off += n;
	return 0;
}

static int r_u8(struct rd *r, uint8_t *v)
{
	return r_bytes(r, v, 1);
}

static int r_u16(struct rd *r, uint16_t *v)
{
	uint8_t b[2];
	int rc = r_bytes(r, b, sizeof(b));

	if (rc == 0)
		*v = le16(b);
	return rc;
}

static int r_u32(struct rd *r, uint32_t *v)
{
	uint8_t b[4];
	int rc = r_bytes(r, b, sizeof(b));

	if (rc == 0)
		*v = le32(b);
	return rc;
}

static int r_u64(struct rd *r, uint64_t *v)
{
	uint8_t b[8];
	int rc = r_bytes(r, b, sizeof(b));

	if (rc == 0)
		*v = le64(b);
	return rc;
}

/* A string must leave room for the NUL we add, and must not hide a NUL of its own. */
static int r_str(struct rd *r, char *dst, size_t field)
{
	uint8_t n;
	int rc = r_u8(r, &n);

	if (rc)
		return rc;
	if (n >= field)
		return -KVL_CTRL_E_FIELD;
	if (n > r->len - r->off)
		return -KVL_CTRL_E_LENGTH;
	if (memchr(r->p + r->off, 0, n) != NULL)
		return -KVL_CTRL_E_FIELD;
	memcpy(dst, r->p + r->off, n);
	dst[n] = '\0';
	r->off += n;
	return 0;
}

#define TRY(expr)                   \
	do {                        \
		int rc_ = (expr);   \
		if (rc_)            \
			return rc_; \
	} while (0)

/* ---- validation shared by encode and decode: what encodes, decodes ---- */

static bool str_ok(const char *s, size_t field)
{
	return strnlen(s, field) < field;
}

/*
 * The geometry must stay inside `length` and its (layer, plane) block runs must not overlap:
 * peers compute addresses from these numbers, so a descriptor that lies about them would
 * make them read or write the wrong KV. All products and sums are overflow-checked.
 */
static bool seg_geometry_ok(const struct kvl_seg_desc *d)
{
	uint64_t run, end, t;
	uint64_t ls = d->layer_stride, ps = d->plane_stride;
	uint64_t nl = d->n_layers;

	/* Two u32 cannot overflow a u64 today; checked so that widening a field stays safe. */
	if (__builtin_mul_overflow((uint64_t)d->block_size, (uint64_t)d->block_count, &run))
		return false;

	/* Highest byte touched: (n_layers - 1) * layer_stride + (n_planes - 1) * plane_stride
	 * + run. Strides of a dimension of size 1 are never used, so they are not counted. */
	end = run;
	if (nl > 1) {
		if (__builtin_mul_overflow(nl - 1, ls, &t) || __builtin_add_overflow(end, t, &end))
			return false;
	}
	if (d->n_planes == 2 && __builtin_add_overflow(end, ps, &end))
		return false;
	if (end > d->length)
		return false;

	if (run == 0)
		return true; /* nothing to overlap */
	if (nl > 1 && ls < run)
		return false;
	if (d->n_planes == 2) {
		/*
		 * Plane 1 of layer l sits at l*ls + ps; it overlaps plane 0 of layer k unless
		 * |ps - (k - l)*ls| >= run for every k - l in [-(n_layers-1), n_layers-1]. With
		 * ps >= run (k == l), the negative differences are farther still, and among the
		 * positive ones only the two multiples of ls around ps can come closer.
		 */
		if (ps < run)
			return false;
		if (nl > 1) {
			uint64_t q = ps / ls, r = ps % ls;

			if (q >= 1 && q <= nl - 1 && r < run)
				return false;
			if (q < nl - 1 && ls - r < run)
				return false;
		}
	}
	return true;
}

static int seg_check(const struct kvl_seg_desc *d)
{
	if (!str_ok(d->name, sizeof(d->name)))
		return -KVL_CTRL_E_FIELD;
	if (d->flags & ~SEG_FLAGS_KNOWN)
		return -KVL_CTRL_E_FIELD;
	if (d->n_planes != 1 && d->n_planes != 2)
		return -KVL_CTRL_E_FIELD;
	if (d->n_layers < 1 || d->block_size < 1)
		return -KVL_CTRL_E_FIELD;
	if (!seg_geometry_ok(d))
		return -KVL_CTRL_E_FIELD;
	return 0;
}

static int msg_check(const struct kvl_ctrl_msg *m)
{
	switch (m->type) {
	case KVL_CTRL_HELLO:
		if (!str_ok(m->u.hello.name, sizeof(m->u.hello.name)) ||
		    m->u.hello.min_version > m->u.hello.max_version)
			return -KVL_CTRL_E_FIELD;
		return 0;
	case KVL_CTRL_CHALLENGE:
		if (!str_ok(m->u.challenge.name, sizeof(m->u.challenge.name)))
			return -KVL_CTRL_E_FIELD;
		return 0;
	case KVL_CTRL_AUTH_FAIL:
		if (m->u.auth_fail.reason < 1 || m->u.auth_fail.reason > KVL_AUTH_FAIL_MAX)
			return -KVL_CTRL_E_FIELD;
		return 0;
	case KVL_CTRL_SEGMENTS:
		if (m->u.segments.n > KVL_CTRL_MAX_SEGS)
			return -KVL_CTRL_E_FIELD;
		for (uint32_t i = 0; i < m->u.segments.n; i++)
			TRY(seg_check(&m->u.segments.seg[i]));
		return 0;
	case KVL_CTRL_ENDPOINTS:
		if (m->u.endpoints.n > KVL_CTRL_MAX_EPS)
			return -KVL_CTRL_E_FIELD;
		for (uint32_t i = 0; i < m->u.endpoints.n; i++) {
			const struct kvl_endpoint *e = &m->u.endpoints.ep[i];

			if (!str_ok(e->nic, sizeof(e->nic)) || !str_ok(e->addr, sizeof(e->addr)) ||
			    e->transport > KVL_TRANSPORT_TCP)
				return -KVL_CTRL_E_FIELD;
		}
		return 0;
	case KVL_CTRL_ERROR:
		if (!str_ok(m->u.error.text, sizeof(m->u.error.text)))
			return -KVL_CTRL_E_FIELD;
		return 0;
	case KVL_CTRL_QP_INFO: {
		const typeof(m->u.qp_info) *q = &m->u.qp_info;

		if (!str_ok(q->nic, sizeof(q->nic)) || q->qpn > 0xffffff || q->psn > 0xffffff ||
		    q->mtu < 1 || q->mtu > 5 || q->gid_type > 2 || q->port == 0)
			return -KVL_CTRL_E_FIELD;
		return 0;
	}
	case KVL_CTRL_RKEYS:
		if (!str_ok(m->u.rkeys.nic, sizeof(m->u.rkeys.nic)) ||
		    m->u.rkeys.n > KVL_CTRL_MAX_SEGS)
			return -KVL_CTRL_E_FIELD;
		for (uint32_t i = 0; i < m->u.rkeys.n; i++)
			if (m->u.rkeys.key[i].seg_id == 0)
				return -KVL_CTRL_E_FIELD;
		return 0;
	case KVL_CTRL_QP_RESYNC: {
		const typeof(m->u.qp_resync) *q = &m->u.qp_resync;

		if (q->kind < 1 || q->kind > 2 || q->dst_qpn > 0xffffff || q->src_qpn > 0xffffff ||
		    q->psn > 0xffffff || q->echo > 0xffffff)
			return -KVL_CTRL_E_FIELD;
		return 0;
	}
	case KVL_CTRL_REQ_CANCEL:
		return m->u.req_cancel.status >= KVL_STATUS_COUNT ? -KVL_CTRL_E_FIELD : 0;
	case KVL_CTRL_DOCTOR:
		if (m->u.doctor.reply > 1 || m->u.doctor.n > KVL_CTRL_MAX_EPS)
			return -KVL_CTRL_E_FIELD;
		for (uint32_t i = 0; i < m->u.doctor.n; i++) {
			const struct kvl_ctrl_link *l = &m->u.doctor.link[i];

			if (!str_ok(l->nic, sizeof(l->nic)) ||
			    !str_ok(l->device, sizeof(l->device)) ||
			    !str_ok(l->link_layer, sizeof(l->link_layer)) ||
			    l->transport > KVL_TRANSPORT_TCP ||
			    (l->gid_type > 2 && l->gid_type != KVL_CTRL_NONE))
				return -KVL_CTRL_E_FIELD;
		}
		return 0;
	case KVL_CTRL_IPC_SEGS:
		if (m->u.ipc_segs.n > KVL_CTRL_MAX_SEGS)
			return -KVL_CTRL_E_FIELD;
		for (uint32_t i = 0; i < m->u.ipc_segs.n; i++) {
			const struct kvl_ctrl_ipc_seg *g = &m->u.ipc_segs.seg[i];

			if (g->seg_id == 0 || g->length == 0 || g->offset + g->length < g->offset)
				return -KVL_CTRL_E_FIELD;
		}
		return 0;
	case KVL_CTRL_HOST:
	case KVL_CTRL_AUTH:
	case KVL_CTRL_AUTH_OK:
	case KVL_CTRL_HEARTBEAT:
	case KVL_CTRL_HEARTBEAT_ACK:
	case KVL_CTRL_DATA_BIND:
	case KVL_CTRL_DATA_BIND_OK:
	case KVL_CTRL_DATA_CHALLENGE:
	case KVL_CTRL_BYE:
		return 0;
	default:
		return -KVL_CTRL_E_TYPE;
	}
}

/* ---- decode ---- */

static int decode_seg(struct rd *r, struct kvl_seg_desc *d)
{
	TRY(r_u32(r, &d->id));
	TRY(r_u32(r, &d->flags));
	TRY(r_u64(r, &d->length));
	TRY(r_u32(r, &d->block_size));
	TRY(r_u32(r, &d->block_count));
	TRY(r_u32(r, &d->n_layers));
	TRY(r_u32(r, &d->n_planes));
	TRY(r_u64(r, &d->layer_stride));
	TRY(r_u64(r, &d->plane_stride));
	return r_str(r, d->name, sizeof(d->name));
}

static int decode_payload(struct rd *r, struct kvl_ctrl_msg *m)
{
	switch (m->type) {
	case KVL_CTRL_HELLO:
		TRY(r_u16(r, &m->u.hello.min_version));
		TRY(r_u16(r, &m->u.hello.max_version));
		TRY(r_str(r, m->u.hello.name, sizeof(m->u.hello.name)));
		return r_bytes(r, m->u.hello.nonce, KVL_NONCE_LEN);
	case KVL_CTRL_CHALLENGE:
		TRY(r_u16(r, &m->u.challenge.version));
		TRY(r_str(r, m->u.challenge.name, sizeof(m->u.challenge.name)));
		TRY(r_bytes(r, m->u.challenge.nonce, KVL_NONCE_LEN));
		return r_u64(r, &m->u.challenge.session_id);
	case KVL_CTRL_AUTH:
		return r_bytes(r, m->u.auth.mac, KVL_MAC_LEN);
	case KVL_CTRL_AUTH_OK:
		return r_bytes(r, m->u.auth_ok.mac, KVL_MAC_LEN);
	case KVL_CTRL_AUTH_FAIL:
		return r_u16(r, &m->u.auth_fail.reason);
	case KVL_CTRL_SEGMENTS:
		TRY(r_u32(r, &m->u.segments.n));
		/* Before the loop: the count indexes a fixed array. */
		if (m->u.segments.n > KVL_CTRL_MAX_SEGS)
			return -KVL_CTRL_E_FIELD;
		for (uint32_t i = 0; i < m->u.segments.n; i++)
			TRY(decode_seg(r, &m->u.segments.seg[i]));
		return 0;
	case KVL_CTRL_ENDPOINTS:
		TRY(r_u32(r, &m->u.endpoints.n));
		if (m->u.endpoints.n > KVL_CTRL_MAX_EPS)
			return -KVL_CTRL_E_FIELD;
		for (uint32_t i = 0; i < m->u.endpoints.n; i++) {
			struct kvl_endpoint *e = &m->u.endpoints.ep[i];

			TRY(r_str(r, e->nic, sizeof(e->nic)));
			TRY(r_u8(r, &e->transport));
			TRY(r_str(r, e->addr, sizeof(e->addr)));
		}
		return 0;
	case KVL_CTRL_HEARTBEAT:
	case KVL_CTRL_HEARTBEAT_ACK:
		TRY(r_u64(r, &m->u.heartbeat.seq));
		return r_u64(r, &m->u.heartbeat.sent_ns);
	case KVL_CTRL_DATA_BIND:
		TRY(r_u64(r, &m->u.data_bind.session_id));
		TRY(r_u32(r, &m->u.data_bind.conn_index));
		TRY(r_u32(r, &m->u.data_bind.conn_count));
		return r_bytes(r, m->u.data_bind.mac, KVL_MAC_LEN);
	case KVL_CTRL_DATA_CHALLENGE:
		return r_bytes(r, m->u.data_challenge.nonce, KVL_NONCE_LEN);
	case KVL_CTRL_DATA_BIND_OK:
	case KVL_CTRL_BYE:
		return 0;
	case KVL_CTRL_ERROR:
		TRY(r_u16(r, &m->u.error.code));
		return r_str(r, m->u.error.text, sizeof(m->u.error.text));
	case KVL_CTRL_QP_INFO:
		TRY(r_u32(r, &m->u.qp_info.conn_index));
		TRY(r_str(r, m->u.qp_info.nic, sizeof(m->u.qp_info.nic)));
		TRY(r_u32(r, &m->u.qp_info.qpn));
		TRY(r_u32(r, &m->u.qp_info.psn));
		TRY(r_bytes(r, m->u.qp_info.gid, 16));
		TRY(r_u16(r, &m->u.qp_info.lid));
		TRY(r_u8(r, &m->u.qp_info.mtu));
		TRY(r_u8(r, &m->u.qp_info.gid_type));
		TRY(r_u8(r, &m->u.qp_info.gid_index));
		return r_u8(r, &m->u.qp_info.port);
	case KVL_CTRL_RKEYS:
		TRY(r_str(r, m->u.rkeys.nic, sizeof(m->u.rkeys.nic)));
		TRY(r_u32(r, &m->u.rkeys.n));
		if (m->u.rkeys.n > KVL_CTRL_MAX_SEGS)
			return -KVL_CTRL_E_FIELD;
		for (uint32_t i = 0; i < m->u.rkeys.n; i++) {
			TRY(r_u32(r, &m->u.rkeys.key[i].seg_id));
			TRY(r_u32(r, &m->u.rkeys.key[i].rkey));
			TRY(r_u64(r, &m->u.rkeys.key[i].addr));
		}
		return 0;
	case KVL_CTRL_QP_RESYNC:
		TRY(r_u32(r, &m->u.qp_resync.kind));
		TRY(r_u32(r, &m->u.qp_resync.dst_qpn));
		TRY(r_u32(r, &m->u.qp_resync.src_qpn));
		TRY(r_u32(r, &m->u.qp_resync.psn));
		return r_u32(r, &m->u.qp_resync.echo);
	case KVL_CTRL_REQ_CANCEL:
		TRY(r_u64(r, &m->u.req_cancel.req));
		return r_u32(r, &m->u.req_cancel.status);
	case KVL_CTRL_DOCTOR:
		TRY(r_u8(r, &m->u.doctor.reply));
		TRY(r_u32(r, &m->u.doctor.n));
		if (m->u.doctor.n > KVL_CTRL_MAX_EPS)
			return -KVL_CTRL_E_FIELD;
		for (uint32_t i = 0; i < m->u.doctor.n; i++) {
			struct kvl_ctrl_link *l = &m->u.doctor.link[i];

			TRY(r_str(r, l->nic, sizeof(l->nic)));
			TRY(r_str(r, l->device, sizeof(l->device)));
			TRY(r_u8(r, &l->transport));
			TRY(r_str(r, l->link_layer, sizeof(l->link_layer)));
			TRY(r_u8(r, &l->gid_type));
			TRY(r_u8(r, &l->gid_index));
			TRY(r_u8(r, &l->traffic_class));
			TRY(r_u32(r, &l->port_mtu));
			TRY(r_u32(r, &l->netdev_mtu));
			TRY(r_u32(r, &l->ini_mtu));
			TRY(r_u32(r, &l->rate_mbps));
		}
		return 0;
	case KVL_CTRL_HOST:
		TRY(r_bytes(r, m->u.host.host_id, KVL_HOST_ID_LEN));
		TRY(r_u64(r, &m->u.host.incarnation));
		return r_u32(r, &m->u.host.pid);
	case KVL_CTRL_IPC_SEGS:
		TRY(r_u64(r, &m->u.ipc_segs.incarnation));
		TRY(r_u32(r, &m->u.ipc_segs.n));
		if (m->u.ipc_segs.n > KVL_CTRL_MAX_SEGS)
			return -KVL_CTRL_E_FIELD;
		for (uint32_t i = 0; i < m->u.ipc_segs.n; i++) {
			struct kvl_ctrl_ipc_seg *g = &m->u.ipc_segs.seg[i];

			TRY(r_u32(r, &g->seg_id));
			TRY(r_u32(r, &g->seg_gen));
			TRY(r_bytes(r, g->gpu_uuid, KVL_GPU_UUID_LEN));
			TRY(r_bytes(r, g->handle, KVL_IPC_HANDLE_LEN));
			TRY(r_u64(r, &g->offset));
			TRY(r_u64(r, &g->length));
		}
		return 0;
	default:
		return -KVL_CTRL_E_TYPE;
	}
}

int kvl_ctrl_decode(const uint8_t *buf, size_t len, struct kvl_ctrl_msg *msg, size_t *consumed)
{
	static const uint8_t magic[4] = { 0x4b, 0x56, 0x4c, 0x43 }; /* "KVLC" */
	uint32_t length;
	uint16_t type;
	struct rd r;

	if (consumed)
		*consumed = 0;
	if (msg == NULL || (buf == NULL && len))
		return -EINVAL;

	/* Refuse each header field as soon as its bytes are there: a stranger's stream is
	 * dropped without buffering anything more from it. */
	for (size_t i = 0; i < len && i < sizeof(magic); i++)
		if (buf[i] != magic[i])
			return -KVL_CTRL_E_MAGIC;
	if (len >= 6 && le16(buf + 4) != KVL_CTRL_VERSION)
		return -KVL_CTRL_E_VERSION;
	if (len < 8)
		return 0;
	type = le16(buf + 6);
	if (type < 1 || type > KVL_CTRL_TYPE_MAX)
		return -KVL_CTRL_E_TYPE;
	if (len < 12)
		return 0;
	length = le32(buf + 8);
	if (length > KVL_CTRL_MAX_PAYLOAD || length < payload_bounds[type].min ||
	    length > payload_bounds[type].max)
		return -KVL_CTRL_E_LENGTH;
	if (len < KVL_CTRL_HDR_LEN || len - KVL_CTRL_HDR_LEN < length)
		return 0;

	/* Zeroed so that padding and unused array slots compare equal between two decodes. */
	memset(msg, 0, sizeof(*msg));
	msg->type = type;
	msg->version = KVL_CTRL_VERSION;
	msg->seq = le32(buf + 12);

	r.p = buf + KVL_CTRL_HDR_LEN;
	r.len = length;
	r.off = 0;
	TRY(decode_payload(&r, msg));
	if (r.off != r.len)
		return -KVL_CTRL_E_LENGTH; /* trailing bytes: the sender and we disagree */
	TRY(msg_check(msg));

	if (consumed)
		*consumed = KVL_CTRL_HDR_LEN + (size_t)length;
	return 1;
}

/* ---- encode ---- */

static void encode_payload(struct wr *w, const struct kvl_ctrl_msg *m)
{
	switch (m->type) {
	case KVL_CTRL_HELLO:
		w_u16(w, m->u.hello.min_version);
		w_u16(w, m->u.hello.max_version);
		w_str(w, m->u.hello.name, sizeof(m->u.hello.name));
		w_bytes(w, m->u.hello.nonce, KVL_NONCE_LEN);
		break;
	case KVL_CTRL_CHALLENGE:
		w_u16(w, m->u.challenge.version);
		w_str(w, m->u.challenge.name, sizeof(m->u.challenge.name));
		w_bytes(w, m->u.challenge.nonce, KVL_NONCE_LEN);
		w_u64(w, m->u.challenge.session_id);
		break;
	case KVL_CTRL_AUTH:
		w_bytes(w, m->u.auth.mac, KVL_MAC_LEN);
		break;
	case KVL_CTRL_AUTH_OK:
		w_bytes(w, m->u.auth_ok.mac, KVL_MAC_LEN);
		break;
	case KVL_CTRL_AUTH_FAIL:
		w_u16(w, m->u.auth_fail.reason);
		break;
	case KVL_CTRL_SEGMENTS:
		w_u32(w, m->u.segments.n);
		for (uint32_t i = 0; i < m->u.segments.n; i++) {
			const struct kvl_seg_desc *d = &m->u.segments.seg[i];

			w_u32(w, d->id);
			w_u32(w, d->flags);
			w_u64(w, d->length);
			w_u32(w, d->block_size);
			w_u32(w, d->block_count);
			w_u32(w, d->n_layers);
			w_u32(w, d->n_planes);
			w_u64(w, d->layer_stride);
			w_u64(w, d->plane_stride);
			w_str(w, d->name, sizeof(d->name));
		}
		break;
	case KVL_CTRL_ENDPOINTS:
		w_u32(w, m->u.endpoints.n);
		for (uint32_t i = 0; i < m->u.endpoints.n; i++) {
			const struct kvl_endpoint *e = &m->u.endpoints.ep[i];

			w_str(w, e->nic, sizeof(e->nic));
			w_u8(w, e->transport);
			w_str(w, e->addr, sizeof(e->addr));
		}
		break;
	case KVL_CTRL_HEARTBEAT:
	case KVL_CTRL_HEARTBEAT_ACK:
		w_u64(w, m->u.heartbeat.seq);
		w_u64(w, m->u.heartbeat.sent_ns);
		break;
	case KVL_CTRL_DATA_BIND:
		w_u64(w, m->u.data_bind.session_id);
		w_u32(w, m->u.data_bind.conn_index);
		w_u32(w, m->u.data_bind.conn_count);
		w_bytes(w, m->u.data_bind.mac, KVL_MAC_LEN);
		break;
	case KVL_CTRL_DATA_CHALLENGE:
		w_bytes(w, m->u.data_challenge.nonce, KVL_NONCE_LEN);
		break;
	case KVL_CTRL_ERROR:
		w_u16(w, m->u.error.code);
		w_str(w, m->u.error.text, sizeof(m->u.error.text));
		break;
	case KVL_CTRL_QP_INFO:
		w_u32(w, m->u.qp_info.conn_index);
		w_str(w, m->u.qp_info.nic, sizeof(m->u.qp_info.nic));
		w_u32(w, m->u.qp_info.qpn);
		w_u32(w, m->u.qp_info.psn);
		w_bytes(w, m->u.qp_info.gid, 16);
		w_u16(w, m->u.qp_info.lid);
		w_u8(w, m->u.qp_info.mtu);
		w_u8(w, m->u.qp_info.gid_type);
		w_u8(w, m->u.qp_info.gid_index);
		w_u8(w, m->u.qp_info.port);
		break;
	case KVL_CTRL_RKEYS:
		w_str(w, m->u.rkeys.nic, sizeof(m->u.rkeys.nic));
		w_u32(w, m->u.rkeys.n);
		for (uint32_t i = 0; i < m->u.rkeys.n; i++) {
			w_u32(w, m->u.rkeys.key[i].seg_id);
			w_u32(w, m->u.rkeys.key[i].rkey);
			w_u64(w, m->u.rkeys.key[i].addr);
		}
		break;
	case KVL_CTRL_QP_RESYNC:
		w_u32(w, m->u.qp_resync.kind);
		w_u32(w, m->u.qp_resync.dst_qpn);
		w_u32(w, m->u.qp_resync.src_qpn);
		w_u32(w, m->u.qp_resync.psn);
		w_u32(w, m->u.qp_resync.echo);
		break;
	case KVL_CTRL_REQ_CANCEL:
		w_u64(w, m->u.req_cancel.req);
		w_u32(w, m->u.req_cancel.status);
		break;
	case KVL_CTRL_DOCTOR:
		w_u8(w, m->u.doctor.reply);
		w_u32(w, m->u.doctor.n);
		for (uint32_t i = 0; i < m->u.doctor.n; i++) {
			const struct kvl_ctrl_link *l = &m->u.doctor.link[i];

			w_str(w, l->nic, sizeof(l->nic));
			w_str(w, l->device, sizeof(l->device));
			w_u8(w, l->transport);
			w_str(w, l->link_layer, sizeof(l->link_layer));
			w_u8(w, l->gid_type);
			w_u8(w, l->gid_index);
			w_u8(w, l->traffic_class);
			w_u32(w, l->port_mtu);
			w_u32(w, l->netdev_mtu);
			w_u32(w, l->ini_mtu);
			w_u32(w, l->rate_mbps);
		}
		break;
	case KVL_CTRL_HOST:
		w_bytes(w, m->u.host.host_id, KVL_HOST_ID_LEN);
		w_u64(w, m->u.host.incarnation);
		w_u32(w, m->u.host.pid);
		break;
	case KVL_CTRL_IPC_SEGS:
		w_u64(w, m->u.ipc_segs.incarnation);
		w_u32(w, m->u.ipc_segs.n);
		for (uint32_t i = 0; i < m->u.ipc_segs.n; i++) {
			const struct kvl_ctrl_ipc_seg *g = &m->u.ipc_segs.seg[i];

			w_u32(w, g->seg_id);
			w_u32(w, g->seg_gen);
			w_bytes(w, g->gpu_uuid, KVL_GPU_UUID_LEN);
			w_bytes(w, g->handle, KVL_IPC_HANDLE_LEN);
			w_u64(w, g->offset);
			w_u64(w, g->length);
		}
		break;
	default: /* DATA_BIND_OK, BYE: no payload; unknown types were refused by msg_check */
		break;
	}
}

int kvl_ctrl_encode(const struct kvl_ctrl_msg *msg, uint8_t *buf, size_t cap)
{
	struct wr w = { .p = buf, .cap = buf ? cap : 0, .off = KVL_CTRL_HDR_LEN };
	size_t length;

	if (msg == NULL || msg_check(msg) != 0)
		return -EINVAL;
	encode_payload(&w, msg);
	length = w.off - KVL_CTRL_HDR_LEN;
	/* Cannot trip with the maxima in the header (static asserts above); kept so a future
	 * field cannot make us send a frame every peer refuses. */
	if (length > KVL_CTRL_MAX_PAYLOAD)
		return -EINVAL;
	if (w.off > w.cap)
		return -ENOSPC;
	put_le32(buf, KVL_CTRL_MAGIC);
	put_le16(buf + 4, KVL_CTRL_VERSION);
	put_le16(buf + 6, msg->type);
	put_le32(buf + 8, (uint32_t)length);
	put_le32(buf + 12, msg->seq);
	return (int)w.off;
}

/* ---- names ---- */

const char *kvl_ctrl_type_name(int type)
{
	static const char *const names[KVL_CTRL_TYPE_MAX + 1] = {
		[KVL_CTRL_HELLO] = "HELLO",
		[KVL_CTRL_CHALLENGE] = "CHALLENGE",
		[KVL_CTRL_AUTH] = "AUTH",
		[KVL_CTRL_AUTH_OK] = "AUTH_OK",
		[KVL_CTRL_AUTH_FAIL] = "AUTH_FAIL",
		[KVL_CTRL_SEGMENTS] = "SEGMENTS",
		[KVL_CTRL_ENDPOINTS] = "ENDPOINTS",
		[KVL_CTRL_HEARTBEAT] = "HEARTBEAT",
		[KVL_CTRL_HEARTBEAT_ACK] = "HEARTBEAT_ACK",
		[KVL_CTRL_DATA_BIND] = "DATA_BIND",
		[KVL_CTRL_DATA_BIND_OK] = "DATA_BIND_OK",
		[KVL_CTRL_ERROR] = "ERROR",
		[KVL_CTRL_BYE] = "BYE",
		[KVL_CTRL_QP_INFO] = "QP_INFO",
		[KVL_CTRL_QP_RESYNC] = "QP_RESYNC",
		[KVL_CTRL_RKEYS] = "RKEYS",
		[KVL_CTRL_REQ_CANCEL] = "REQ_CANCEL",
		[KVL_CTRL_DATA_CHALLENGE] = "DATA_CHALLENGE",
		[KVL_CTRL_DOCTOR] = "DOCTOR",
		[KVL_CTRL_HOST] = "HOST",
		[KVL_CTRL_IPC_SEGS] = "IPC_SEGS",
	};

	return type >= 1 && type <= KVL_CTRL_TYPE_MAX ? names[type] : "?";
}

const char *kvl_ctrl_strerror(int err)
{
	static const char *const words[KVL_CTRL_E_COUNT] = {
		[0] = "no error",
		[KVL_CTRL_E_MAGIC] = "bad magic: not a kvlane control stream",
		[KVL_CTRL_E_VERSION] = "unsupported control protocol version",
		[KVL_CTRL_E_TYPE] = "unknown control message type",
		[KVL_CTRL_E_LENGTH] = "bad payload length for the message type",
		[KVL_CTRL_E_FIELD] = "message field out of range",
	};
	/* Negation through unsigned: -INT_MIN would overflow. */
	unsigned e = err < 0 ? 0u - (unsigned)err : (unsigned)err;

	return e < KVL_CTRL_E_COUNT ? words[e] : "unknown control protocol error";
}

const char *kvl_auth_fail_name(int reason)
{
	switch (reason) {
	case KVL_AUTH_BAD_MAC:
		return "bad-mac";
	case KVL_AUTH_BAD_SESSION:
		return "bad-session";
	case KVL_AUTH_VERSION:
		return "version";
	case KVL_AUTH_BAD_BIND:
		return "bad-bind";
	default:
		return "?";
	}
}

/* ---- authentication ---- */

static void errmsg(char *err, size_t errlen, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static void errmsg(char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap;

	if (err == NULL || errlen == 0)
		return;
	va_start(ap, fmt);
	vsnprintf(err, errlen, fmt, ap);
	va_end(ap);
}

int kvl_secret_load(const char *path, struct kvl_secret *s, bool group_read, char *err,
		    size_t errlen)
{
	/* Two spare bytes for the newline we strip, one more to notice a file that is longer. */
	uint8_t buf[KVL_SECRET_MAX + 3];
	size_t n = 0;
	struct stat st;
	int fd, rc = 0;

	errmsg(err, errlen, "%s", "");
	if (s == NULL)
		return -EINVAL;
	OPENSSL_cleanse(s, sizeof(*s));
	if (path == NULL || path[0] == '\0') {
		errmsg(err, errlen, "no secret file given");
		return -EINVAL;
	}

	/* O_NONBLOCK: a FIFO planted at the path must not hang start-up before fstat refuses it.
	 * Symlinks are followed on purpose: mounted secrets (Kubernetes) are symlinks. */
	fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
	if (fd < 0) {
		rc = -errno;
		if (rc == -ENOENT)
			errmsg(err, errlen,
			       "%s: secret file not found; create one: "
			       "head -c 32 /dev/urandom | base64 > %s && chmod 600 %s",
			       path, path, path);
		else
			errmsg(err, errlen,
			       "%s: cannot open secret file: %s; make it readable by this user "
			       "only (chmod 600)",
			       path, strerror(-rc));
		return rc;
	}
	if (fstat(fd, &st) != 0) {
		rc = -errno;
		errmsg(err, errlen, "%s: cannot stat secret file: %s", path, strerror(-rc));
		goto out;
	}
	if (!S_ISREG(st.st_mode)) {
		rc = S_ISDIR(st.st_mode) ? -EISDIR : -EINVAL;
		errmsg(err, errlen, "%s: %s, not a regular file; point the secret at a file", path,
		       S_ISDIR(st.st_mode) ? "is a directory" : "is a special file");
		goto out;
	}
	/* Anyone who reads it can pose as any node: the owner only, or its group by choice. */
	if (st.st_mode & ((mode_t)S_IRWXO | (S_IRWXG & ~(mode_t)(group_read ? S_IRGRP : 0)))) {
		rc = -EPERM;
		errmsg(err, errlen, "%s: secret file mode %03o lets %s at it; run chmod 600 %s%s",
		       path, (unsigned)(st.st_mode & 0777),
		       (st.st_mode & S_IRWXO) ? "every user" : "its group", path,
		       (st.st_mode & (S_IRWXO | S_IWGRP | S_IXGRP))
			       ? ""
			       : " (or set [control] secret_group_readable = true for a "
				 "group-managed secret of mode 0640)");
		goto out;
	}

	while (n < sizeof(buf)) {
		ssize_t got = read(fd, buf + n, sizeof(buf) - n);

		if (got < 0 && errno == EINTR)
			continue;
		if (got < 0) {
			rc = -errno;
			errmsg(err, errlen, "%s: cannot read secret file: %s", path, strerror(-rc));
			goto out;
		}
		if (got == 0)
			break;
		n += (size_t)got;
	}

	if (n >= 2 && buf[n - 2] == '\r' && buf[n - 1] == '\n')
		n -= 2;
	else if (n >= 1 && buf[n - 1] == '\n')
		n -= 1;

	if (n < KVL_SECRET_MIN) {
		rc = -EINVAL;
		errmsg(err, errlen,
		       "%s: secret is %zu bytes, at least %d are needed; create one: "
		       "head -c 32 /dev/urandom | base64 > %s && chmod 600 %s",
		       path, n, KVL_SECRET_MIN, path, path);
		goto out;
	}
	if (n > KVL_SECRET_MAX) {
		rc = -EINVAL;
		errmsg(err, errlen,
		       "%s: secret is longer than %d bytes; use a shorter one "
		       "(32 random bytes are plenty)",
		       path, KVL_SECRET_MAX);
		goto out;
	}

	{
		size_t same = 1;

		while (same < n && buf[same] == buf[0])
			same++;
		if (same == n) {
			rc = -EINVAL;
			errmsg(err, errlen,
			       "%s: secret is one byte repeated (%zu x 0x%02x): that is no secret; "
			       "create one: head -c 32 /dev/urandom | base64 > %s && chmod 600 %s",
			       path, n, buf[0], path, path);
			goto out;
		}
	}
	memcpy(s->key, buf, n);
	s->len = n;
out:
	OPENSSL_cleanse(buf, sizeof(buf));
	if (rc)
		OPENSSL_cleanse(s, sizeof(*s));
	close(fd);
	return rc;
}

int kvl_random(void *out, size_t len)
{
	uint8_t *p = out;

	if (len && out == NULL)
		return -EINVAL;
	/* RAND_bytes takes an int count. */
	while (len) {
		int chunk = len > INT_MAX ? INT_MAX : (int)len;

		if (RAND_bytes(p, chunk) != 1)
			return -EIO;
		p += chunk;
		len -= (size_t)chunk;
	}
	return 0;
}

/*
 * MAC input: a length-prefixed label, then every field at a fixed width or behind a u8
 * length, so that the byte string determines the field values and no two different
 * handshakes (or roles) share an input.
 */
#define MAC_INPUT_MAX 512

static void w_label(struct wr *w, const char *label)
{
	w_str(w, label, MAC_INPUT_MAX);
}

/*
 * A proof that cannot be computed must not verify. The caller only sees `out`, so fill it
 * with random bytes; if even that fails, leave zeros, which kvl_auth_equal never accepts.
 */
static void mac_fail(uint8_t out[KVL_MAC_LEN])
{
	if (RAND_bytes(out, KVL_MAC_LEN) != 1)
		memset(out, 0, KVL_MAC_LEN);
}

static void hmac(const struct kvl_secret *s, const struct wr *w, uint8_t out[KVL_MAC_LEN])
{
	uint8_t md[EVP_MAX_MD_SIZE];
	unsigned md_len = 0;

	/* A secret that kvl_secret_load would refuse (zeroed struct, 0 length) is no secret. */
	if (s == NULL || s->len < KVL_SECRET_MIN || s->len > KVL_SECRET_MAX || w->off > w->cap) {
		mac_fail(out);
		return;
	}
	if (HMAC(EVP_sha256(), s->key, (int)s->len, w->p, w->off, md, &md_len) == NULL ||
	    md_len != KVL_MAC_LEN) {
		mac_fail(out);
		return;
	}
	memcpy(out, md, KVL_MAC_LEN);
	OPENSSL_cleanse(md, sizeof(md));
}

static void handshake_mac(const char *label, const struct kvl_secret *s,
			  const struct kvl_ctrl_msg *hello, const struct kvl_ctrl_msg *challenge,
			  uint8_t out[KVL_MAC_LEN])
{
	uint8_t in[MAC_INPUT_MAX];
	struct wr w = { .p = in, .cap = sizeof(in), .off = 0 };

	if (hello == NULL || challenge == NULL) {
		mac_fail(out);
		return;
	}
	w_label(&w, label);
	/* The client's offered range too: a man in the middle lowering it to force an old
	 * version would change the proof. */
	w_u16(&w, hello->u.hello.min_version);
	w_u16(&w, hello->u.hello.max_version);
	w_str(&w, hello->u.hello.name, sizeof(hello->u.hello.name));
	w_bytes(&w, hello->u.hello.nonce, KVL_NONCE_LEN);
	w_u16(&w, challenge->u.challenge.version);
	w_str(&w, challenge->u.challenge.name, sizeof(challenge->u.challenge.name));
	w_bytes(&w, challenge->u.challenge.nonce, KVL_NONCE_LEN);
	w_u64(&w, challenge->u.challenge.session_id);
	hmac(s, &w, out);
}

void kvl_auth_client_mac(const struct kvl_secret *s, const struct kvl_ctrl_msg *hello,
			 const struct kvl_ctrl_msg *challenge, uint8_t out[KVL_MAC_LEN])
{
	handshake_mac("kvlane-v1 client proof", s, hello, challenge, out);
}

void kvl_auth_server_mac(const struct kvl_secret *s, const struct kvl_ctrl_msg *hello,
			 const struct kvl_ctrl_msg *challenge, uint8_t out[KVL_MAC_LEN])
{
	handshake_mac("kvlane-v1 server proof", s, hello, challenge, out);
}

void kvl_auth_data_mac(const struct kvl_secret *s, const uint8_t nonce_c[KVL_NONCE_LEN],
		       const uint8_t nonce_s[KVL_NONCE_LEN], const uint8_t nonce_d[KVL_NONCE_LEN],
		       uint64_t session_id, uint32_t conn_index, uint32_t conn_count,
		       uint8_t out[KVL_MAC_LEN])
{
	uint8_t in[MAC_INPUT_MAX];
	struct wr w = { .p = in, .cap = sizeof(in), .off = 0 };

	if (nonce_c == NULL || nonce_s == NULL || nonce_d == NULL) {
		mac_fail(out);
		return;
	}
	w_label(&w, "kvlane-v3 data bind");
	w_bytes(&w, nonce_c, KVL_NONCE_LEN);
	w_bytes(&w, nonce_s, KVL_NONCE_LEN);
	w_bytes(&w, nonce_d, KVL_NONCE_LEN);
	w_u64(&w, session_id);
	w_u32(&w, conn_index);
	w_u32(&w, conn_count);
	hmac(s, &w, out);
}

bool kvl_auth_equal(const uint8_t a[KVL_MAC_LEN], const uint8_t b[KVL_MAC_LEN])
{
	uint8_t any = 0;

	/* All zeros is what a failed MAC computation leaves (mac_fail): never a match. The
	 * chance that a real HMAC is all zeros is 2^-256. */
	for (int i = 0; i < KVL_MAC_LEN; i++)
		any |= a[i];
	return (CRYPTO_memcmp(a, b, KVL_MAC_LEN) == 0) & (any != 0);
}
