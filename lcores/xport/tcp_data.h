/* SPDX-License-Identifier: BSD-3-Clause */
/* TCP data transport: one-sided WRITE/READ over an authenticated, non-blocking connection. */
#ifndef KVL_LCORES_TCP_DATA_H
#define KVL_LCORES_TCP_DATA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "xfer.h"

/*
 * One data connection, owned by one NIC lcore, after the control path has connected it and
 * authenticated it (DATA_BIND). Both ends are symmetric: each may post requests (initiator)
 * and each serves the other's requests against its own segment table (target). Nothing here
 * blocks: the lcore calls kvl_tcp_progress() from its loop.
 *
 * Wire format (after the bind): a stream of frames, each a 32-byte header, little-endian,
 *   u32 magic  "KVLD" (0x444c564b)   u8 type   u8 status   u16 reserved (0)
 *   u32 seg_id   u32 length   u64 req_id   u64 offset
 * followed by `length` payload bytes for WRITE_REQ and for READ_RESP with status OK.
 *   WRITE_REQ  (1): write payload at (seg_id, offset); the target answers WRITE_ACK
 *   READ_REQ   (2): read length bytes at (seg_id, offset); the target answers READ_RESP
 *   WRITE_ACK  (3): status of the write, same req_id, no payload
 *   READ_RESP  (4): status; with KVL_OK, `length` bytes of payload follow
 * The target checks every request with kvl_seg_check() before touching memory; a refused
 * WRITE_REQ's payload is read and dropped so the stream stays in step. Responses come back
 * in request order (TCP keeps order, the target serves in order); a response whose req_id is
 * not the oldest outstanding one, an unknown type, a bad magic, a non-zero reserved field, or
 * a length over KVL_TCP_MAX_MSG is a protocol error: the connection is marked broken and
 * every outstanding request completes with KVL_ERR_PROTOCOL.
 */

#define KVL_TCP_MAGIC	0x444c564bu
#define KVL_TCP_HDR_LEN 32
#define KVL_TCP_MAX_MSG (64u << 20) /* one request moves at most 64 MiB */

enum kvl_tcp_type {
	KVL_TCP_WRITE_REQ = 1,
	KVL_TCP_READ_REQ = 2,
	KVL_TCP_WRITE_ACK = 3,
	KVL_TCP_READ_RESP = 4,
};

struct kvl_tcp_hdr {
	uint32_t magic;
	uint8_t type;
	uint8_t status;
	uint16_t reserved;
	uint32_t seg_id;
	uint32_t length;
	uint64_t req_id;
	uint64_t offset;
};

/* Byte-exact, endian-independent encoding of the 32-byte header. */
void kvl_tcp_hdr_encode(const struct kvl_tcp_hdr *h, uint8_t out[KVL_TCP_HDR_LEN]);
void kvl_tcp_hdr_decode(const uint8_t in[KVL_TCP_HDR_LEN], struct kvl_tcp_hdr *h);

struct kvl_tcp_conn;

/*
 * Take over @fd (connected, bound; set non-blocking here). @segs is this side's segment table
 * (read, never written). @depth bounds the requests this side may have outstanding; the
 * target also stops reading new requests while more than @depth responses wait to be sent,
 * so a peer that does not read cannot make us queue without bound. Returns NULL with errno
 * on failure (the fd is then still the caller's).
 */
struct kvl_tcp_conn *kvl_tcp_conn_new(int fd, const struct kvl_seg_table *segs, unsigned depth);

/*
 * The same over TLS: @ssl (OpenSSL's SSL, its handshake done, on @fd) carries every byte. It
 * is taken over with the fd on success (freed with the connection), the caller's on failure.
 * Where OpenSSL turned on kernel TLS for it (SSL_OP_ENABLE_KTLS) the kernel encrypts; either
 * way nothing blocks: a record that cannot go or is not whole yet waits for the next progress.
 */
struct ssl_st;
/*
 * The one map from an SSL_read_ex/SSL_write_ex result (@rc, @done bytes) to a byte count as
 * recv()/send() give it: @done when anything moved, 0 for the peer's close_notify, else -1
 * with errno EAGAIN (TLS wants the socket: retry later), EPROTO (records that do not
 * decrypt), or the socket's error (ECONNRESET when it ended without close_notify).
 */
ssize_t kvl_tcp_tls_result(struct ssl_st *ssl, int rc, size_t done);

/* Socket options of a TLS data connection (a send buffer that holds a window of records):
 * set them on the fd before its handshake. */
void kvl_tcp_tls_sockopts(int fd);
struct kvl_tcp_conn *kvl_tcp_conn_new_tls(int fd, struct ssl_st *ssl,
					  const struct kvl_seg_table *segs, unsigned depth);

/* Close the socket and free everything. Outstanding requests are dropped without completions:
 * call kvl_tcp_fail_all() first to report them. */
void kvl_tcp_conn_free(struct kvl_tcp_conn *c);

/*
 * READs into VRAM. recv() cannot write a device pointer, so with a bounce set the payload of a
 * READ whose local range lies in a KVL_SEG_GPU segment is received into pinned host buffers
 * (@n_bufs of @buf_len bytes at @mem: carved from the [memory] pool, pinned for CUDA), and
 * each buffer, once full or at the payload's end, is handed to @ops->start, which copies it to
 * the device asynchronously (runtime/tcp_vram.c: cuMemcpyHtoDAsync on a stream of the
 * connection's own, lcores/gpu/h2d.c). A buffer is reused only once its copy has completed;
 * while none is free the connection stops reading (the bytes wait in the socket). The READ
 * completes (is reaped) only once all of its copies have: @ops->completed is polled by
 * kvl_tcp_progress, never waited for. Each buffer holds one payload's bytes: one copy per
 * buffer filled, copies complete in the order started.
 */
struct kvl_tcp_bounce_ops {
	/* Start copying @len bytes from @src (inside the buffers) to device address @dst:
	 * 0, or a negative errno (the connection then fails with KVL_ERR_GPU_MEMORY). */
	int (*start)(void *arg, uintptr_t dst, const void *src, uint32_t len);
	/* How many of the started copies have completed (a count since creation), without
	 * blocking; a negative errno once the copier has failed. */
	int64_t (*completed)(void *arg);
	/* Wait for every started copy, then free the copier and give the buffers back
	 * (teardown only: kvl_tcp_conn_free calls it). */
	void (*free)(void *arg);
};

struct kvl_tcp_bounce {
	const struct kvl_tcp_bounce_ops *ops;
	void *arg;
	uint8_t *mem; /* n_bufs * buf_len bytes of pinned host memory */
	uint32_t buf_len;
	uint32_t n_bufs;
};

/* Give @c its bounce (before anything is posted): 0, -EINVAL for a malformed one or one set
 * already. The connection owns it from then on (ops->free at kvl_tcp_conn_free). */
int kvl_tcp_set_bounce(struct kvl_tcp_conn *c, const struct kvl_tcp_bounce *b);

/*
 * Queue one request. Returns 0; -EAGAIN when @depth requests are outstanding (try again after
 * progress); -EPIPE when the connection is broken; -EMSGSIZE over KVL_TCP_MAX_MSG; -EINVAL for
 * an unknown op; -EXDEV when the local range touches a KVL_SEG_GPU segment of the table and
 * either the request is a WRITE (sending from VRAM has no copy path) or the connection has no
 * bounce (counted in failed[KVL_ERR_GPU_MEMORY]). Nothing is sent until kvl_tcp_progress(). A
 * peer's request into or out of a GPU segment here is refused with KVL_ERR_GPU_MEMORY
 * (counted in refused[]): the bounce serves this side's READs only.
 */
int kvl_tcp_post(struct kvl_tcp_conn *c, const struct kvl_wr *wr);

/*
 * Move bytes both ways as far as the socket allows without blocking: send queued requests and
 * responses, read and serve the peer's requests, read responses to ours. Returns the work
 * done (frames handled + 1 per syscall that moved bytes), 0 when idle. When the socket fails
 * or the peer sends garbage the connection becomes broken (see kvl_tcp_broken()) and every
 * outstanding request is completed with KVL_ERR_CONN_LOST or KVL_ERR_PROTOCOL.
 */
unsigned kvl_tcp_progress(struct kvl_tcp_conn *c);

/* Take up to @max completions of requests initiated here, oldest first. Returns the count. */
unsigned kvl_tcp_reap(struct kvl_tcp_conn *c, struct kvl_wc *wc, unsigned max);

/* Complete every outstanding request with @status (peer dead, shutdown) and mark the
 * connection broken. The completions are then reaped as usual. */
void kvl_tcp_fail_all(struct kvl_tcp_conn *c, int status);

/* 0 while healthy, else the status the connection failed with (KVL_ERR_CONN_LOST, ...). */
int kvl_tcp_broken(const struct kvl_tcp_conn *c);

/* Requests initiated here and not yet reaped. */
unsigned kvl_tcp_outstanding(const struct kvl_tcp_conn *c);

const struct kvl_xport_stats *kvl_xport_stats(const struct kvl_tcp_conn *c);

#endif /* KVL_LCORES_TCP_DATA_H */
