/* SPDX-License-Identifier: BSD-3-Clause */
/* TCP data transport: framed one-sided WRITE/READ, payloads moved in place, bounded queues. */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/ssl.h>

#include "kvl_clock.h"
#include "tcp_data.h"

/* A private sanity limit: a larger window buys nothing over TCP and costs memory. */
#define MAX_DEPTH (1u << 16)
/* Header batch: one recv parses up to 128 headers (a window of acks arrives in one call). */
#define STAGE_LEN 4096u
/* A refused WRITE_REQ's payload is drained through this, one recv per chunk. */
#define SCRATCH_LEN (64u << 10)
/* Frames gathered per sendmsg: 2 iovecs each (header, payload). */
#define TX_IOV 128u
/*
 * After a frame whose payload is at least this long, the next header is read alone, so the
 * payload that follows it lands straight in its destination instead of in the staging buffer.
 * Smaller payloads share the batched read: a syscall costs more than copying them.
 */
#define ZC_MIN 2048u
/* Syscalls per direction per progress call: one busy peer cannot hold the lcore. */
#define IO_BUDGET 16u
/* TLS: frames smaller than this are gathered into one record (a record per 32-byte header
 * would cost 22 bytes and a syscall each); larger payloads are written from where they lie. */
#define TLS_GATHER 16384u
/*
 * TLS writes a record per write(): once the socket's buffer is full (16 KiB at the start,
 * tcp_wmem[1], before autotuning grows it) the tail of a frame waits for the peer's ACK of the
 * head, and the peer, which cannot answer half a frame, delays that ACK (up to 40 ms). One
 * sendmsg() of a whole frame goes past the limit instead. A fixed buffer that holds a window
 * of frames keeps TLS clear of it (kvl_tcp_tls_sockopts, applied before the handshake).
 */
#define TLS_SNDBUF (4 << 20)

enum tx_kind {
	TX_REQ,	      /* our request: fully sent lets its response be accepted */
	TX_RESP,      /* a WRITE_ACK or a refused READ_RESP */
	TX_READ_DATA, /* a READ_RESP carrying segment memory */
};

enum pl_kind {
	PL_NONE,
	PL_SERVE_WRITE, /* peer's WRITE_REQ into our segment */
	PL_DISCARD,	/* peer's refused WRITE_REQ */
	PL_READ_RESP,	/* answer to our READ, into wr->local */
	PL_READ_GPU,	/* answer to our READ into VRAM: through the bounce buffers */
};

struct req_slot {
	uint64_t wr_id;
	uint8_t *local;
	uint32_t length;
	uint8_t op;
	int32_t status; /* valid once completed */
	uint32_t bytes;
	bool gpu;	 /* a READ into VRAM: lands through the bounce */
	uint64_t ticket; /* reaped once this many bounce copies have completed (0: at once) */
};

struct tx_frame {
	uint8_t hdr[KVL_TCP_HDR_LEN];
	const uint8_t *payload;
	uint32_t plen;
	uint8_t kind; /* enum tx_kind */
};

struct kvl_tcp_conn;
/* The socket's I/O, chosen once at set-up: the plain syscalls, or TLS (tls.c's SSL). */
typedef ssize_t (*io_fn)(struct kvl_tcp_conn *c, struct msghdr *m);

struct kvl_tcp_conn {
	int fd;
	int broken; /* 0, or the status everything failed with */
	io_fn send, recv;
	SSL *ssl;	 /* [control] tls = on: owned here from the hand-over */
	uint8_t *gather; /* TLS: small frames of one record, TLS_GATHER bytes */
	unsigned depth;
	const struct kvl_seg_table *segs;

	/*
	 * Requests initiated here. The post sequence number is the req_id and (masked) the slot.
	 * reap <= resp <= sent <= post, post - reap <= depth: [reap, resp) is the completion
	 * ring, [resp, sent) waits for a response, [sent, post) is still in the tx queue.
	 */
	struct req_slot *req;
	uint64_t req_mask;
	uint64_t post_seq, sent_seq, resp_seq, reap_seq;

	/* Frames to send, requests and responses in the order they were made. */
	struct tx_frame *tx;
	uint32_t tx_mask, tx_head, tx_tail;
	uint32_t tx_off;      /* bytes of the head frame already on the socket */
	bool tx_full;	      /* the last flush stopped on a full socket buffer */
	unsigned resp_queued; /* responses in tx: the backpressure bound */

	/* Receive: headers are batched in stage, a payload in progress goes to pl_dst. */
	uint32_t st_head, st_tail;
	bool st_one; /* next stage read asks for one header only (see ZC_MIN) */
	uint8_t pl_kind;
	int32_t pl_status; /* a refused write's status, for its ack */
	uint8_t *pl_dst;
	uint32_t pl_rem;
	struct kvl_tcp_hdr pl_hdr;
	uint8_t *scratch;

	/*
	 * READs into VRAM (kvl_tcp_set_bounce). Copy k uses buffer k % n_bufs; copies complete
	 * in order, so [b_done, b_started) are the buffers in flight and buffer b_started is the
	 * one being filled, when there is room for it. The payload being received lands at
	 * pl_dst in it (b_room bytes left there, b_fill in it already) and goes to pl_dev.
	 */
	bool has_bounce, copy_failed;
	bool b_waiting; /* the receive is stopped for want of a buffer (counted once) */
	struct kvl_tcp_bounce bn;
	uint64_t b_started, b_done;
	uint32_t b_fill, b_room;
	uintptr_t pl_dev;
	uint64_t busy_since; /* copies in flight since (gpu_copy_ns) */

	struct kvl_xport_stats stats;
	struct iovec iov[TX_IOV];
	uint8_t stage[STAGE_LEN];
};

static void put16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
}

static void put32(uint8_t *p, uint32_t v)
{
	put16(p, (uint16_t)v);
	put16(p + 2, (uint16_t)(v >> 16));
}

static void put64(uint8_t *p, uint64_t v)
{
	put32(p, (uint32_t)v);
	put32(p + 4, (uint32_t)(v >> 32));
}

static uint16_t get16(const uint8_t *p)
{
	return (uint16_t)(p[0] | (p[1] << 8));
}

static uint32_t get32(const uint8_t *p)
{
	return get16(p) | ((uint32_t)get16(p + 2) << 16);
}

static uint64_t get64(const uint8_t *p)
{
	return get32(p) | ((uint64_t)get32(p + 4) << 32);
}

void kvl_tcp_hdr_encode(const struct kvl_tcp_hdr *h, uint8_t out[KVL_TCP_HDR_LEN])
{
	put32(out, h->magic);
	out[4] = h->type;
	out[5] = h->status;
	put16(out + 6, h->reserved);
	put32(out + 8, h->seg_id);
	put32(out + 12, h->length);
	put64(out + 16, h->req_id);
	put64(out + 24, h->offset);
}

void kvl_tcp_hdr_decode(const uint8_t in[KVL_TCP_HDR_LEN], struct kvl_tcp_hdr *h)
{
	h->magic = get32(in);
	h->type = in[4];
	h->status = in[5];
	h->reserved = get16(in + 6);
	h->seg_id = get32(in + 8);
	h->length = get32(in + 12);
	h->req_id = get64(in + 16);
	h->offset = get64(in + 24);
}

static ssize_t plain_send(struct kvl_tcp_conn *c, struct msghdr *m)
{
	return sendmsg(c->fd, m, MSG_NOSIGNAL | MSG_DONTWAIT);
}

static ssize_t plain_recv(struct kvl_tcp_conn *c, struct msghdr *m)
{
	return recvmsg(c->fd, m, MSG_DONTWAIT);
}

ssize_t kvl_tcp_tls_result(struct ssl_st *ssl, int rc, size_t done)
{
	int e = SSL_get_error(ssl, rc);

	ERR_clear_error();
	if (rc > 0 || done > 0)
		return (ssize_t)done;
	switch (e) {
	case SSL_ERROR_WANT_READ:
	case SSL_ERROR_WANT_WRITE:
		errno = EAGAIN; /* come back later: nothing spins on it */
		return -1;
	case SSL_ERROR_ZERO_RETURN:
		return 0; /* close_notify: the peer's end, as EOF */
	case SSL_ERROR_SYSCALL:
		if (errno == 0)
			errno = ECONNRESET; /* the socket ended without close_notify */
		return -1;
	default:
		errno = EPROTO; /* records that do not decrypt: the stream is not our peer's */
		return -1;
	}
}

static ssize_t tls_fail(struct kvl_tcp_conn *c, int rc, size_t done)
{
	return kvl_tcp_tls_result(c->ssl, rc, done);
}

/*
 * sendmsg() over TLS. A write that TLS could not finish (WANT_WRITE) must be retried with the
 * same bytes: the caller's queue has not moved (nothing of it was counted sent), so the same
 * iovecs rebuild the same first record: gathered small frames, or a payload in place.
 */
static ssize_t tls_send(struct kvl_tcp_conn *c, struct msghdr *m)
{
	size_t total = 0, i = 0, off = 0; /* the cursor: byte @off of iovec @i */

	ERR_clear_error();
	while (i < m->msg_iovlen) {
		const uint8_t *buf = (const uint8_t *)m->msg_iov[i].iov_base + off;
		size_t len = m->msg_iov[i].iov_len - off, n = 0;
		int rc;

		if (len < TLS_GATHER) {
			size_t o = off;

			len = 0;
			for (size_t k = i; k < m->msg_iovlen && len < TLS_GATHER; k++, o = 0) {
				size_t take = m->msg_iov[k].iov_len - o;

				if (take > TLS_GATHER - len)
					take = TLS_GATHER - len;
				memcpy(c->gather + len, (const uint8_t *)m->msg_iov[k].iov_base + o,
				       take);
				len += take;
			}
			buf = c->gather;
		}
		errno = 0;
		rc = SSL_write_ex(c->ssl, buf, len, &n);
		if (rc <= 0)
			return tls_fail(c, rc, total);
		total += n;
		/* Move the cursor over what went (a record at most: partial writes are on). */
		while (n > 0 && i < m->msg_iovlen) {
			size_t l = m->msg_iov[i].iov_len - off;

			if (n < l) {
				off += n;
				break;
			}
			n -= l;
			off = 0;
			i++;
		}
	}
	return (ssize_t)total;
}

/* recvmsg() over TLS: fill the iovecs in order from as many records as are there. */
static ssize_t tls_recv(struct kvl_tcp_conn *c, struct msghdr *m)
{
	size_t total = 0;

	ERR_clear_error();
	for (size_t i = 0; i < m->msg_iovlen; i++) {
		uint8_t *p = m->msg_iov[i].iov_base;
		size_t len = m->msg_iov[i].iov_len, got = 0;

		while (got < len) {
			size_t n = 0;
			int rc;

			errno = 0;
			rc = SSL_read_ex(c->ssl, p + got, len - got, &n);
			if (rc <= 0)
				return tls_fail(c, rc, total + got);
			got += n;
		}
		total += got;
	}
	return (ssize_t)total;
}

static uint64_t pow2_at_least(uint64_t n)
{
	uint64_t p = 1;

	while (p < n)
		p <<= 1;
	return p;
}

struct kvl_tcp_conn *kvl_tcp_conn_new(int fd, const struct kvl_seg_table *segs, unsigned depth)
{
	struct kvl_tcp_conn *c;
	int type, flags, one = 1;
	socklen_t len = sizeof(type);

	if (fd < 0 || depth == 0 || depth > MAX_DEPTH) {
		errno = EINVAL;
		return NULL;
	}
	if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) < 0)
		return NULL;
	if (type != SOCK_STREAM) {
		errno = EINVAL;
		return NULL;
	}
	c = calloc(1, sizeof(*c));
	if (c == NULL)
		return NULL;
	c->req_mask = pow2_at_least(depth) - 1;
	/* Unsent requests (<= depth) plus queued responses (<= depth, see rx_parse). */
	c->tx_mask = (uint32_t)pow2_at_least(2 * (uint64_t)depth) - 1;
	c->req = calloc(c->req_mask + 1, sizeof(*c->req));
	c->tx = calloc((size_t)c->tx_mask + 1, sizeof(*c->tx));
	c->scratch = malloc(SCRATCH_LEN);
	if (c->req == NULL || c->tx == NULL || c->scratch == NULL)
		goto fail;
	/* Last, so that a failure leaves the caller's fd as it was. */
	flags = fcntl(fd, F_GETFL);
	if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0)
		goto fail;
	/* Small frames (acks, read requests) must not wait for Nagle; fails harmlessly off TCP. */
	(void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	c->fd = fd;
	c->segs = segs;
	c->depth = depth;
	c->send = plain_send;
	c->recv = plain_recv;
	return c;
fail:
	flags = errno;
	free(c->scratch);
	free(c->tx);
	free(c->req);
	free(c);
	errno = flags ? flags : ENOMEM;
	return NULL;
}

void kvl_tcp_tls_sockopts(int fd)
{
	int sz = TLS_SNDBUF;

	(void)setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sz, sizeof(sz));
}

struct kvl_tcp_conn *kvl_tcp_conn_new_tls(int fd, struct ssl_st *ssl,
					  const struct kvl_seg_table *segs, unsigned depth)
{
	uint8_t *gather = malloc(TLS_GATHER);
	struct kvl_tcp_conn *c = gather && ssl ? kvl_tcp_conn_new(fd, segs, depth) : NULL;

	if (c == NULL) {
		free(gather);
		if (ssl == NULL)
			errno = EINVAL;
		return NULL;
	}
	c->ssl = ssl;
	c->gather = gather;
	c->send = tls_send;
	c->recv = tls_recv;
	return c;
}

void kvl_tcp_conn_free(struct kvl_tcp_conn *c)
{
	if (c == NULL)
		return;
	if (c->ssl) {
		if (!c->broken)
			(void)SSL_shutdown(c->ssl); /* a close_notify, if it goes at once */
		ERR_clear_error();
		SSL_free(c->ssl);
	}
	free(c->gather);
	close(c->fd);
	/* the copier waits for its stream before the buffers go back */
	if (c->has_bounce)
		c->bn.ops->free(c->bn.arg);
	free(c->scratch);
	free(c->tx);
	free(c->req);
	free(c);
}

/* Complete the oldest request awaiting a response. */
static void complete(struct kvl_tcp_conn *c, int status, uint32_t bytes)
{
	struct req_slot *s = &c->req[c->resp_seq & c->req_mask];

	s->status = status;
	s->bytes = bytes;
	c->resp_seq++;
	if (status != KVL_OK) {
		c->stats.failed[status]++;
	} else if (s->op == KVL_OP_WRITE) {
		c->stats.done_write++;
		c->stats.bytes_written += bytes;
	} else {
		c->stats.done_read++;
		c->stats.bytes_read += bytes;
	}
}

/*
 * The stream is out of step or gone: nothing more can be sent or parsed on it. Completing
 * every request here is what makes each complete exactly once; the shutdown tells the peer
 * at once (EOF) instead of leaving it to time out.
 */
static void conn_break(struct kvl_tcp_conn *c, int status)
{
	if (c->broken)
		return;
	c->broken = status;
	while (c->resp_seq != c->post_seq)
		complete(c, status, 0);
	c->sent_seq = c->post_seq;
	c->tx_head = c->tx_tail = 0;
	c->tx_off = 0;
	c->resp_queued = 0;
	c->st_head = c->st_tail = 0;
	c->pl_kind = PL_NONE;
	c->pl_rem = 0;
	(void)shutdown(c->fd, SHUT_RDWR);
}

/*
 * Whether [p, p + len) touches a GPU segment of @t: this transport moves bytes with the CPU
 * (send/recv/memcpy), which would fault on a device pointer. Such a range is never touched:
 * a READ into it lands through the bounce (when the connection has one), anything else is
 * refused.
 */
static bool touches_gpu(const struct kvl_seg_table *t, const uint8_t *p, uint64_t len)
{
	uintptr_t a = (uintptr_t)p;

	if (t == NULL)
		return false;
	for (unsigned i = 0; i < KVL_MAX_SEGS; i++) {
		const struct kvl_seg *g = &t->seg[i];

		if (__atomic_load_n(&t->live[i], __ATOMIC_ACQUIRE) && (g->flags & KVL_SEG_GPU) &&
		    a < (uintptr_t)g->base + g->len && (uintptr_t)g->base < a + len)
			return true;
	}
	return false;
}

int kvl_tcp_post(struct kvl_tcp_conn *c, const struct kvl_wr *wr)
{
	struct req_slot *s;
	struct tx_frame *f;
	struct kvl_tcp_hdr h;

	if (c == NULL || wr == NULL || (wr->op != KVL_OP_WRITE && wr->op != KVL_OP_READ) ||
	    (wr->local == NULL && wr->length != 0))
		return -EINVAL;
	if (wr->length > KVL_TCP_MAX_MSG)
		return -EMSGSIZE;
	if (c->broken)
		return -EPIPE;
	if (c->post_seq - c->reap_seq >= c->depth)
		return -EAGAIN;
	s = &c->req[c->post_seq & c->req_mask];
	s->gpu = touches_gpu(c->segs, wr->local, wr->length);
	if (s->gpu && (wr->op != KVL_OP_READ || !c->has_bounce)) {
		c->stats.failed[KVL_ERR_GPU_MEMORY]++;
		return -EXDEV;
	}
	s->wr_id = wr->wr_id;
	s->local = wr->local;
	s->length = wr->length;
	s->op = wr->op;
	s->ticket = 0;

	h.magic = KVL_TCP_MAGIC;
	h.type = wr->op == KVL_OP_WRITE ? KVL_TCP_WRITE_REQ : KVL_TCP_READ_REQ;
	h.status = 0;
	h.reserved = 0;
	h.seg_id = wr->remote_seg;
	h.length = wr->length;
	h.req_id = c->post_seq;
	h.offset = wr->remote_off;
	f = &c->tx[c->tx_tail++ & c->tx_mask];
	kvl_tcp_hdr_encode(&h, f->hdr);
	f->payload = wr->op == KVL_OP_WRITE ? wr->local : NULL;
	f->plen = wr->op == KVL_OP_WRITE ? wr->length : 0;
	f->kind = TX_REQ;

	c->post_seq++;
	if (wr->op == KVL_OP_WRITE)
		c->stats.posted_write++;
	else
		c->stats.posted_read++;
	return 0;
}

/* Queue a response to the peer's request @rq; its length field is the bytes it moved. */
static void queue_resp(struct kvl_tcp_conn *c, const struct kvl_tcp_hdr *rq, uint8_t type,
		       int status, const uint8_t *payload, uint32_t moved)
{
	struct tx_frame *f = &c->tx[c->tx_tail++ & c->tx_mask];
	struct kvl_tcp_hdr h = {
		.magic = KVL_TCP_MAGIC,
		.type = type,
		.status = (uint8_t)status,
		.seg_id = rq->seg_id,
		.length = moved,
		.req_id = rq->req_id,
		.offset = rq->offset,
	};

	kvl_tcp_hdr_encode(&h, f->hdr);
	f->payload = payload;
	f->plen = type == KVL_TCP_READ_RESP ? moved : 0;
	f->kind = type == KVL_TCP_READ_RESP && status == KVL_OK ? TX_READ_DATA : TX_RESP;
	c->resp_queued++;
}

static void frame_sent(struct kvl_tcp_conn *c, const struct tx_frame *f)
{
	switch (f->kind) {
	case TX_REQ:
		c->sent_seq++;
		break;
	case TX_READ_DATA:
		c->stats.served_read++;
		c->stats.served_bytes += f->plen;
		/* fall through */
	default:
		c->resp_queued--;
		break;
	}
}

static bool transient(int err)
{
	return err == EAGAIN || err == EWOULDBLOCK || err == EINTR || err == ENOBUFS ||
	       err == ENOMEM;
}

static unsigned tx_flush(struct kvl_tcp_conn *c)
{
	unsigned work = 0;

	c->tx_full = false;
	for (unsigned calls = 0; c->tx_head != c->tx_tail && calls < IO_BUDGET; calls++) {
		struct msghdr m = { .msg_iov = c->iov };
		uint32_t off = c->tx_off, n = 0;
		size_t want = 0;
		ssize_t r;

		for (uint32_t i = c->tx_head; i != c->tx_tail && n + 2 <= TX_IOV; i++) {
			struct tx_frame *f = &c->tx[i & c->tx_mask];

			if (off < KVL_TCP_HDR_LEN)
				c->iov[n++] = (struct iovec){ f->hdr + off, KVL_TCP_HDR_LEN - off };
			if (f->plen != 0) {
				uint32_t poff = off > KVL_TCP_HDR_LEN ? off - KVL_TCP_HDR_LEN : 0;

				c->iov[n++] = (struct iovec){ (void *)(f->payload + poff),
							      f->plen - poff };
			}
			want += KVL_TCP_HDR_LEN + (size_t)f->plen - off;
			off = 0;
		}
		m.msg_iovlen = n;
		r = c->send(c, &m);
		if (r < 0) {
			if (errno == EINTR)
				continue;
			if (!transient(errno))
				conn_break(c, KVL_ERR_CONN_LOST);
			c->tx_full = true;
			break;
		}
		work++;
		c->stats.tx_bytes += (uint64_t)r;
		for (size_t left = (size_t)r; left > 0;) {
			struct tx_frame *f = &c->tx[c->tx_head & c->tx_mask];
			size_t rem = KVL_TCP_HDR_LEN + (size_t)f->plen - c->tx_off;

			if (left < rem) {
				c->tx_off += (uint32_t)left;
				break;
			}
			left -= rem;
			c->tx_off = 0;
			c->tx_head++;
			frame_sent(c, f);
			work++;
		}
		if ((size_t)r < want) {
			c->tx_full = true; /* the next call would only say EAGAIN */
			break;
		}
	}
	return work;
}

/* A payload has fully arrived (or had no bytes): act on its frame. */
static void payload_done(struct kvl_tcp_conn *c)
{
	const struct kvl_tcp_hdr *h = &c->pl_hdr;

	switch (c->pl_kind) {
	case PL_SERVE_WRITE:
		c->stats.served_write++;
		c->stats.served_bytes += h->length;
		queue_resp(c, h, KVL_TCP_WRITE_ACK, KVL_OK, NULL, h->length);
		break;
	case PL_DISCARD:
		queue_resp(c, h, KVL_TCP_WRITE_ACK, c->pl_status, NULL, 0);
		break;
	case PL_READ_RESP:
		complete(c, KVL_OK, h->length);
		break;
	case PL_READ_GPU:
		/* its bytes are on their way to VRAM: it is reaped once its last copy is done */
		c->req[c->resp_seq & c->req_mask].ticket = c->b_started;
		complete(c, KVL_OK, h->length);
		break;
	}
	c->pl_kind = PL_NONE;
}

/* ---- READs into VRAM: the bounce buffers and their copies ---- */

int kvl_tcp_set_bounce(struct kvl_tcp_conn *c, const struct kvl_tcp_bounce *b)
{
	if (c == NULL || b == NULL || b->ops == NULL || b->ops->start == NULL ||
	    b->ops->completed == NULL || b->ops->free == NULL || b->mem == NULL ||
	    b->buf_len == 0 || b->n_bufs == 0 || c->has_bounce || c->post_seq != 0)
		return -EINVAL;
	c->bn = *b;
	c->has_bounce = true;
	return 0;
}

/* The copier failed: nothing more lands in VRAM. What waits for a copy fails in reap. */
static void copy_fail(struct kvl_tcp_conn *c)
{
	c->copy_failed = true;
	conn_break(c, KVL_ERR_GPU_MEMORY);
}

/* Take in what the copier has completed: buffers come free, READs become reapable. */
static unsigned bounce_poll(struct kvl_tcp_conn *c)
{
	int64_t n;

	if (!c->has_bounce || c->copy_failed || c->b_done == c->b_started)
		return 0;
	n = c->bn.ops->completed(c->bn.arg);
	if (n < 0 || (uint64_t)n > c->b_started) {
		copy_fail(c);
		return 1;
	}
	if ((uint64_t)n == c->b_done)
		return 0;
	c->b_done = (uint64_t)n;
	c->stats.gpu_copies_done = c->b_done;
	if (c->b_done == c->b_started)
		c->stats.gpu_copy_ns += kvl_now_ns() - c->busy_since;
	return 1;
}

/* Give the payload in progress a free buffer to land in: false when all are in flight. */
static bool bounce_take(struct kvl_tcp_conn *c)
{
	if (c->b_started - c->b_done >= c->bn.n_bufs) {
		if (!c->b_waiting)
			c->stats.gpu_bounce_waits++;
		c->b_waiting = true;
		return false;
	}
	c->b_waiting = false;
	c->pl_dst = c->bn.mem + (size_t)(c->b_started % c->bn.n_bufs) * c->bn.buf_len;
	c->b_room = c->pl_rem < c->bn.buf_len ? c->pl_rem : c->bn.buf_len;
	c->b_fill = 0;
	return true;
}

/* Hand the filled buffer to the copier, to the payload's place in VRAM. */
static int bounce_flush(struct kvl_tcp_conn *c)
{
	const uint8_t *src = c->bn.mem + (size_t)(c->b_started % c->bn.n_bufs) * c->bn.buf_len;
	int rc = c->bn.ops->start(c->bn.arg, c->pl_dev, src, c->b_fill);

	if (rc < 0)
		return rc;
	if (c->b_started == c->b_done)
		c->busy_since = kvl_now_ns();
	c->b_started++;
	c->stats.gpu_copies++;
	c->pl_dev += c->b_fill;
	c->b_fill = 0;
	c->pl_dst = NULL;
	return 0;
}

/* Bytes the payload in progress can take now (a GPU payload: 0 until it has a buffer). */
static uint32_t pl_room(const struct kvl_tcp_conn *c)
{
	return c->pl_kind == PL_READ_GPU ? c->b_room : c->pl_rem;
}

/* @take bytes of the payload in progress landed at pl_dst (or were dropped): move on. */
static void pl_advance(struct kvl_tcp_conn *c, uint32_t take)
{
	c->pl_rem -= take;
	if (c->pl_kind == PL_READ_GPU) {
		c->pl_dst += take;
		c->b_room -= take;
		c->b_fill += take;
		c->stats.gpu_bounce_bytes += take;
		if (c->b_room == 0 && bounce_flush(c) < 0) {
			copy_fail(c);
			return;
		}
	} else if (c->pl_kind != PL_DISCARD) {
		c->pl_dst += take;
	}
	if (c->pl_rem == 0)
		payload_done(c);
}

static void start_payload(struct kvl_tcp_conn *c, const struct kvl_tcp_hdr *h, uint8_t kind,
			  uint8_t *dst)
{
	c->pl_hdr = *h;
	c->pl_kind = kind;
	c->pl_dst = dst;
	c->pl_rem = h->length;
	c->st_one = h->length >= ZC_MIN;
	if (h->length == 0)
		payload_done(c);
}

static const struct kvl_seg *seg_lookup(const struct kvl_tcp_conn *c, uint32_t id)
{
	return c->segs ? kvl_seg_lookup(c->segs, id) : NULL;
}

/* Act on one well-formed header. Returns 0, or the status to break the connection with. */
static int rx_frame(struct kvl_tcp_conn *c, const struct kvl_tcp_hdr *h)
{
	const struct kvl_seg *s;
	struct req_slot *slot;
	int st;

	c->st_one = false;
	switch (h->type) {
	case KVL_TCP_WRITE_REQ:
		s = seg_lookup(c, h->seg_id);
		st = kvl_seg_check(s, h->offset, h->length, KVL_OP_WRITE);
		if (st == KVL_OK && (s->flags & KVL_SEG_GPU))
			st = KVL_ERR_GPU_MEMORY; /* recv() into VRAM would fault */
		if (st != KVL_OK) {
			c->stats.refused[st]++;
			c->pl_status = st;
			start_payload(c, h, PL_DISCARD, NULL);
		} else {
			start_payload(c, h, PL_SERVE_WRITE, s->base + h->offset);
		}
		return 0;
	case KVL_TCP_READ_REQ:
		s = seg_lookup(c, h->seg_id);
		st = kvl_seg_check(s, h->offset, h->length, KVL_OP_READ);
		if (st == KVL_OK && (s->flags & KVL_SEG_GPU))
			st = KVL_ERR_GPU_MEMORY; /* sendmsg() from VRAM would fault */
		if (st != KVL_OK) {
			c->stats.refused[st]++;
			queue_resp(c, h, KVL_TCP_READ_RESP, st, NULL, 0);
		} else {
			queue_resp(c, h, KVL_TCP_READ_RESP, KVL_OK, s->base + h->offset, h->length);
		}
		return 0;
	default: /* WRITE_ACK, READ_RESP: hdr_ok() let no other type through */
		break;
	}
	/* Only the oldest request that has fully left may be answered: TCP and the target keep
	 * order, so anything else means the peer lost step with us. */
	if (c->resp_seq == c->sent_seq || h->req_id != c->resp_seq || h->status >= KVL_STATUS_COUNT)
		return KVL_ERR_PROTOCOL;
	slot = &c->req[c->resp_seq & c->req_mask];
	if (slot->op != (h->type == KVL_TCP_WRITE_ACK ? KVL_OP_WRITE : KVL_OP_READ))
		return KVL_ERR_PROTOCOL;
	if (h->status != KVL_OK) {
		complete(c, h->status, 0);
	} else if (h->type == KVL_TCP_WRITE_ACK) {
		complete(c, KVL_OK, slot->length);
	} else {
		/* The length decides how many bytes land in wr->local: it must be the asked one. */
		if (h->length != slot->length)
			return KVL_ERR_PROTOCOL;
		if (slot->gpu) {
			/* a buffer is taken when the first bytes come (bounce_take) */
			c->pl_dev = (uintptr_t)slot->local;
			c->b_room = 0;
			start_payload(c, h, PL_READ_GPU, NULL);
		} else {
			start_payload(c, h, PL_READ_RESP, slot->local);
		}
	}
	return 0;
}

static bool hdr_ok(const struct kvl_tcp_hdr *h)
{
	return h->magic == KVL_TCP_MAGIC && h->reserved == 0 && h->type >= KVL_TCP_WRITE_REQ &&
	       h->type <= KVL_TCP_READ_RESP && h->length <= KVL_TCP_MAX_MSG;
}

/*
 * Feed the payload in progress from the staging buffer. Returns false when it must wait: a
 * GPU payload with every bounce buffer in flight, or a broken connection.
 */
static bool rx_feed(struct kvl_tcp_conn *c)
{
	while (c->pl_kind != PL_NONE && c->st_tail != c->st_head) {
		uint32_t take = c->st_tail - c->st_head, room = pl_room(c);

		if (room == 0) { /* only a GPU payload waits for room */
			if (!bounce_take(c))
				return false;
			room = pl_room(c);
		}
		if (take > room)
			take = room;
		if (c->pl_kind != PL_DISCARD)
			memcpy(c->pl_dst, c->stage + c->st_head, take);
		c->st_head += take;
		pl_advance(c, take);
		if (c->broken)
			return false;
	}
	return true;
}

/*
 * Parse every complete header in the staging buffer, copying into a payload the part of it
 * that came along. Returns false when reading must stop: broken, a request waits for room,
 * or a GPU payload waits for a bounce buffer.
 */
static bool rx_parse(struct kvl_tcp_conn *c, unsigned *work)
{
	if (c->broken || !rx_feed(c))
		return false;
	while (c->pl_kind == PL_NONE && c->st_tail - c->st_head >= KVL_TCP_HDR_LEN) {
		struct kvl_tcp_hdr h;
		int st;

		kvl_tcp_hdr_decode(c->stage + c->st_head, &h);
		if (!hdr_ok(&h)) {
			conn_break(c, KVL_ERR_PROTOCOL);
			return false;
		}
		/*
		 * Backpressure: while depth responses wait, leave the request unread so the peer's
		 * sends stall in TCP instead of our queue growing. Stopping at depth (not depth +
		 * 1) still cannot deadlock two honest peers: a peer with at most depth requests
		 * outstanding never has a request behind depth unanswered ones.
		 */
		if ((h.type == KVL_TCP_WRITE_REQ || h.type == KVL_TCP_READ_REQ) &&
		    c->resp_queued >= c->depth)
			return false;
		c->st_head += KVL_TCP_HDR_LEN;
		(*work)++;
		st = rx_frame(c, &h);
		if (st != 0) {
			conn_break(c, st);
			return false;
		}
		if (!rx_feed(c))
			return false;
	}
	if (c->st_head == c->st_tail)
		c->st_head = c->st_tail = 0;
	return true;
}

static unsigned rx_poll(struct kvl_tcp_conn *c)
{
	unsigned work = 0;
	bool drained = false;

	for (unsigned calls = 0;; calls++) {
		struct iovec iov[2];
		struct msghdr m = { .msg_iov = iov };
		size_t pl_want = 0, st_want;
		ssize_t r;

		if (!rx_parse(c, &work) || drained || calls == IO_BUDGET)
			break;
		if (c->pl_kind != PL_NONE) {
			uint8_t *dst;

			if (pl_room(c) == 0 && !bounce_take(c))
				break; /* every bounce buffer in flight: the bytes wait in the
					  socket */
			dst = c->pl_dst;
			pl_want = pl_room(c);
			if (c->pl_kind == PL_DISCARD) {
				dst = c->scratch;
				if (pl_want > SCRATCH_LEN)
					pl_want = SCRATCH_LEN;
			}
			iov[m.msg_iovlen++] = (struct iovec){ dst, pl_want };
		}
		if (c->st_head != 0) {
			/* rx_parse left less than one header: move it to the front. */
			memmove(c->stage, c->stage + c->st_head, c->st_tail - c->st_head);
			c->st_tail -= c->st_head;
			c->st_head = 0;
		}
		/* Headers may follow only once the iovec before them ends the payload. */
		st_want = 0;
		if (c->pl_kind == PL_NONE || pl_want == c->pl_rem) {
			st_want = (c->st_one ? KVL_TCP_HDR_LEN : STAGE_LEN) - c->st_tail;
			iov[m.msg_iovlen++] = (struct iovec){ c->stage + c->st_tail, st_want };
		}

		r = c->recv(c, &m);
		if (r < 0) {
			if (errno == EINTR)
				continue;
			if (!transient(errno)) /* EPROTO: TLS records that do not decrypt */
				conn_break(c,
					   errno == EPROTO ? KVL_ERR_PROTOCOL : KVL_ERR_CONN_LOST);
			break;
		}
		if (r == 0) {
			conn_break(c, KVL_ERR_CONN_LOST); /* EOF: the peer is gone mid-stream */
			break;
		}
		work++;
		c->stats.rx_bytes += (uint64_t)r;
		drained = (size_t)r < pl_want + st_want;
		if (pl_want != 0) {
			size_t take = (size_t)r < pl_want ? (size_t)r : pl_want;

			r -= (ssize_t)take;
			pl_advance(c, (uint32_t)take);
			if (c->broken)
				break;
		}
		c->st_tail += (uint32_t)r;
	}
	return work;
}

unsigned kvl_tcp_progress(struct kvl_tcp_conn *c)
{
	unsigned work;

	if (c == NULL)
		return 0;
	/* copies finish whatever the socket's state: a broken connection still reaps them */
	work = bounce_poll(c);
	if (c->broken)
		return work;
	work += tx_flush(c);
	if (!c->broken)
		work += rx_poll(c);
	/* Responses made by this poll leave now rather than one loop turn later (unless the socket
	 * was full a moment ago: asking again would most likely just cost an EAGAIN). */
	if (!c->broken && !c->tx_full && c->tx_head != c->tx_tail)
		work += tx_flush(c);
	return work;
}

unsigned kvl_tcp_reap(struct kvl_tcp_conn *c, struct kvl_wc *wc, unsigned max)
{
	unsigned n = 0;

	for (; n < max && c->reap_seq != c->resp_seq; n++, c->reap_seq++) {
		struct req_slot *s = &c->req[c->reap_seq & c->req_mask];

		if (s->ticket > c->b_done) {
			if (!c->copy_failed)
				break; /* its bytes are not all in VRAM yet */
			/* received, but its copy never completed: nothing may read it */
			if (s->status == KVL_OK) {
				c->stats.done_read--;
				c->stats.bytes_read -= s->bytes;
				c->stats.failed[KVL_ERR_GPU_MEMORY]++;
			}
			s->status = KVL_ERR_GPU_MEMORY;
			s->bytes = 0;
		}
		wc[n].wr_id = s->wr_id;
		wc[n].bytes = s->bytes;
		wc[n].status = s->status;
	}
	return n;
}

void kvl_tcp_fail_all(struct kvl_tcp_conn *c, int status)
{
	/* A broken connection must read as broken: KVL_OK or a foreign value cannot be it. */
	if (status <= KVL_OK || status >= KVL_STATUS_COUNT)
		status = KVL_ERR_CANCELED;
	conn_break(c, status);
}

int kvl_tcp_broken(const struct kvl_tcp_conn *c)
{
	return c->broken;
}

unsigned kvl_tcp_outstanding(const struct kvl_tcp_conn *c)
{
	return (unsigned)(c->post_seq - c->reap_seq);
}

const struct kvl_xport_stats *kvl_xport_stats(const struct kvl_tcp_conn *c)
{
	return &c->stats;
}
