/* SPDX-License-Identifier: BSD-3-Clause */
/* Unit test of the TCP data transport over TLS 1.3: both ends in one thread, on loopback. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/ssl.h>

#include "kvl_test.h"
#include "tcp_data.h"

/*
 * The transport's TLS I/O (tls_send, tls_recv in tcp_data.c) against OpenSSL's semantics: a
 * WANT_WRITE retried with the same bytes after the queue moved on, records that arrive in
 * pieces, frames gathered into records, and records that do not decrypt. The PSK here is a
 * fixed test key: how kvlaned derives its PSK from the secret is the eal suite's (test_tls).
 */

#define WC_MAX	    1024
#define IDLE_MS	    3000
#define TURNS_LIMIT 4000000L
#define KIB	    1024u
#define MIB	    (1024u * 1024u)

static SSL_CTX *ctx;
static SSL_SESSION *psk;
static const unsigned char id[] = "test";

static int use_session(SSL *s, const EVP_MD *md, const unsigned char **i, size_t *il,
		       SSL_SESSION **out)
{
	(void)s;
	(void)md;
	SSL_SESSION_up_ref(psk);
	*out = psk;
	*i = id;
	*il = sizeof(id) - 1;
	return 1;
}

static int find_session(SSL *s, const unsigned char *i, size_t il, SSL_SESSION **out)
{
	(void)s;
	(void)i;
	(void)il;
	SSL_SESSION_up_ref(psk);
	*out = psk;
	return 1;
}

static void tls_setup(void)
{
	static const unsigned char key[32] = { 1, 2, 3, 4, 5, 6, 7, 8, 9 };
	static const unsigned char suite[2] = { 0x13, 0x01 };
	SSL *probe;

	ctx = SSL_CTX_new(TLS_method());
	SSL_CTX_set_min_proto_version(ctx, TLS1_3_VERSION);
	SSL_CTX_set_ciphersuites(ctx, "TLS_AES_128_GCM_SHA256"); /* the PSK's hash */
	SSL_CTX_set_num_tickets(ctx, 0);
	SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
	SSL_CTX_clear_mode(ctx, SSL_MODE_AUTO_RETRY);
	SSL_CTX_set_psk_use_session_callback(ctx, use_session);
	SSL_CTX_set_psk_find_session_callback(ctx, find_session);
	probe = SSL_new(ctx);
	psk = SSL_SESSION_new();
	if (!SSL_SESSION_set1_master_key(psk, key, sizeof(key)) ||
	    !SSL_SESSION_set_cipher(psk, SSL_CIPHER_find(probe, suite)) ||
	    !SSL_SESSION_set_protocol_version(psk, TLS1_3_VERSION)) {
		fprintf(stderr, "cannot make the test PSK\n");
		exit(2);
	}
	SSL_free(probe);
}

static int tcp_pair(int fds[2], int sndbuf)
{
	struct sockaddr_in sa = { .sin_family = AF_INET };
	socklen_t len = sizeof(sa);
	int l = socket(AF_INET, SOCK_STREAM, 0);

	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (l < 0 || bind(l, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(l, 1) < 0 ||
	    getsockname(l, (struct sockaddr *)&sa, &len) < 0)
		return -1;
	fds[0] = socket(AF_INET, SOCK_STREAM, 0);
	if (sndbuf == 0)
		sndbuf = -1;
	if (sndbuf > 0) {
		/* Small buffers both ways: most writes meet a full socket (WANT_WRITE). */
		setsockopt(fds[0], SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof(sndbuf));
		setsockopt(fds[0], SOL_SOCKET, SO_RCVBUF, &sndbuf, sizeof(sndbuf));
	}
	if (connect(fds[0], (struct sockaddr *)&sa, sizeof(sa)) < 0)
		return -1;
	fds[1] = accept(l, NULL, NULL);
	close(l);
	if (sndbuf > 0) {
		setsockopt(fds[1], SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof(sndbuf));
		setsockopt(fds[1], SOL_SOCKET, SO_RCVBUF, &sndbuf, sizeof(sndbuf));
	} else {
		/* What kvlaned gives a TLS data connection (bind.c) */
		kvl_tcp_tls_sockopts(fds[0]);
		kvl_tcp_tls_sockopts(fds[1]);
	}
	return fds[1] < 0 ? -1 : 0;
}

struct end {
	struct kvl_tcp_conn *c;
	struct kvl_seg_table segs;
	struct kvl_wc wc[WC_MAX];
	unsigned n;
	int fd;
};

static struct end a, b;

/* Both ends over TLS, the handshake driven without blocking from one thread. */
static void open_pair(unsigned depth, int sndbuf)
{
	int fds[2];
	SSL *sa, *sb;
	int da = 0, db = 0;

	memset(&a, 0, sizeof(a));
	memset(&b, 0, sizeof(b));
	if (tcp_pair(fds, sndbuf) < 0) {
		perror("tcp_pair");
		exit(2);
	}
	for (int i = 0; i < 2; i++)
		fcntl(fds[i], F_SETFL, fcntl(fds[i], F_GETFL) | O_NONBLOCK);
	sa = SSL_new(ctx);
	sb = SSL_new(ctx);
	SSL_set_fd(sa, fds[0]);
	SSL_set_fd(sb, fds[1]);
	SSL_set_connect_state(sa);
	SSL_set_accept_state(sb);
	for (int i = 0; i < 100000 && !(da == 1 && db == 1); i++) {
		if (da != 1)
			da = SSL_do_handshake(sa);
		if (db != 1)
			db = SSL_do_handshake(sb);
	}
	if (da != 1 || db != 1) {
		fprintf(stderr, "handshake: client %d (%d), server %d (%d): %s\n", da,
			SSL_get_error(sa, da), db, SSL_get_error(sb, db),
			ERR_reason_error_string(ERR_peek_last_error()));
		ERR_print_errors_fp(stderr);
	}
	CHECK(da == 1 && db == 1);
	a.fd = fds[0];
	b.fd = fds[1];
	a.c = kvl_tcp_conn_new_tls(fds[0], sa, &a.segs, depth);
	b.c = kvl_tcp_conn_new_tls(fds[1], sb, &b.segs, depth);
	if (a.c == NULL || b.c == NULL) {
		perror("kvl_tcp_conn_new_tls");
		exit(2);
	}
}

static void close_pair(void)
{
	kvl_tcp_conn_free(a.c);
	kvl_tcp_conn_free(b.c);
	a.c = b.c = NULL;
}

static void add_seg(struct kvl_seg_table *t, uint32_t sid, uint8_t *base, uint64_t len)
{
	t->seg[sid - 1] = (struct kvl_seg){ .base = base,
					    .len = len,
					    .id = sid,
					    .flags = KVL_SEG_REMOTE_READ | KVL_SEG_REMOTE_WRITE };
	__atomic_store_n(&t->live[sid - 1], true, __ATOMIC_RELEASE);
}

static void reap(struct end *e)
{
	if (e->c && e->n < WC_MAX)
		e->n += kvl_tcp_reap(e->c, e->wc + e->n, WC_MAX - e->n);
}

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/*
 * Idle is measured in time, not turns: on tiny socket buffers a write waits for the peer's
 * delayed ACK (up to 200 ms), and both ends idle until it comes. Stuck: 3 s without work.
 */
static bool drive(unsigned want_a, unsigned want_b)
{
	uint64_t last = now_ms();

	for (long t = 0; t < TURNS_LIMIT * 10 && now_ms() - last < IDLE_MS; t++) {
		unsigned w = kvl_tcp_progress(a.c) + kvl_tcp_progress(b.c);

		reap(&a);
		reap(&b);
		if (a.n >= want_a && b.n >= want_b)
			return true;
		if (w)
			last = now_ms();
	}
	fprintf(stderr, "drive stuck: a %u/%u, b %u/%u (a: tx %llu rx %llu, b: tx %llu rx %llu)\n",
		a.n, want_a, b.n, want_b, (unsigned long long)kvl_xport_stats(a.c)->tx_bytes,
		(unsigned long long)kvl_xport_stats(a.c)->rx_bytes,
		(unsigned long long)kvl_xport_stats(b.c)->tx_bytes,
		(unsigned long long)kvl_xport_stats(b.c)->rx_bytes);
	return false;
}

static int post(struct kvl_tcp_conn *c, uint8_t op, uint64_t wr_id, void *local, uint64_t off,
		uint32_t len)
{
	struct kvl_wr wr = { .wr_id = wr_id,
			     .local = local,
			     .remote_off = off,
			     .length = len,
			     .remote_seg = 1,
			     .op = op };

	return kvl_tcp_post(c, &wr);
}

/* WRITE then READ back of each size, through records of every shape; every byte compared. */
static void test_sizes(int sndbuf, unsigned nsizes)
{
	static const uint32_t sizes[] = {
		0, 1, 31, 4095, 16 * KIB - 1, 16 * KIB + 7, 64 * KIB, 2 * MIB + 3
	};
	uint8_t *seg = malloc(4 * MIB), *src = malloc(4 * MIB), *dst = malloc(4 * MIB);

	open_pair(16, sndbuf);
	add_seg(&b.segs, 1, seg, 4 * MIB);
	for (unsigned i = 0; i < nsizes && i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		uint32_t len = sizes[i];
		uint64_t off = i * 4099u;

		kvl_test_fill_random(src, len);
		memset(dst, 0xee, len);
		a.n = 0;
		CHECK_INT(post(a.c, KVL_OP_WRITE, 1, src, off, len), 0);
		CHECK_INT(post(a.c, KVL_OP_READ, 2, dst, off, len), 0);
		CHECK(drive(2, 0));
		CHECK_INT(a.wc[0].status, KVL_OK);
		CHECK_INT(a.wc[1].status, KVL_OK);
		CHECK_INT(a.wc[1].bytes, len);
		CHECK(len == 0 || memcmp(seg + off, src, len) == 0);
		CHECK(len == 0 || memcmp(dst, src, len) == 0);
	}
	CHECK_INT(kvl_tcp_broken(a.c), 0);
	CHECK_INT(kvl_tcp_broken(b.c), 0);
	close_pair();
	free(seg);
	free(src);
	free(dst);
}

/*
 * A full window both ways at once, small frames (gathered into records) mixed with large ones
 * (written in place), on small socket buffers: nearly every flush ends on WANT_WRITE and
 * resumes from a queue that grew meanwhile. Each end's every byte checked.
 */
static void test_window_both_ways(void)
{
	enum { DEPTH = 64, ROUNDS = 4 };
	uint8_t *sa = malloc(8 * MIB), *sb = malloc(8 * MIB);
	uint8_t *la = malloc(8 * MIB), *lb = malloc(8 * MIB);
	unsigned bad = 0;

	open_pair(DEPTH, 65536);
	add_seg(&a.segs, 1, sa, 8 * MIB);
	add_seg(&b.segs, 1, sb, 8 * MIB);
	for (int r = 0; r < ROUNDS; r++) {
		uint64_t off = 0;

		kvl_test_fill_random(la, 8 * MIB);
		kvl_test_fill_random(lb, 8 * MIB);
		a.n = b.n = 0;
		for (unsigned i = 0; i < DEPTH; i++) {
			uint32_t len = (i % 4 == 3) ? 200 * KIB + i : 100 + 37 * i;

			CHECK_INT(post(a.c, KVL_OP_WRITE, i, la + off, off, len), 0);
			CHECK_INT(post(b.c, KVL_OP_WRITE, i, lb + off, off, len), 0);
			off += len;
		}
		CHECK(drive(DEPTH, DEPTH));
		for (unsigned i = 0; i < DEPTH; i++)
			bad += a.wc[i].status != KVL_OK || b.wc[i].status != KVL_OK;
		bad += memcmp(sb, la, off) != 0;
		bad += memcmp(sa, lb, off) != 0;
	}
	CHECK_INT(bad, 0);
	printf("  window both ways: %d rounds of %d writes each way on 64 KiB socket buffers, all "
	       "bytes match\n",
	       ROUNDS, DEPTH);
	close_pair();
	free(sa);
	free(sb);
	free(la);
	free(lb);
}

/* Bytes that are not TLS records of this session: the connection breaks as a protocol
 * error, and every request outstanding completes once with it. */
static void test_bad_records(void)
{
	uint8_t seg[4096], buf[4096];
	static const uint8_t junk[] = "\x17\x03\x03\x00\x20 not a record of this session.....";
	unsigned n = 0;

	open_pair(8, 0);
	add_seg(&b.segs, 1, seg, sizeof(seg));
	for (int i = 0; i < 4; i++)
		CHECK_INT(post(a.c, KVL_OP_READ, (uint64_t)i, buf, 0, 1024), 0);
	kvl_tcp_progress(a.c); /* the requests leave... */
	/* ...and a stranger's bytes arrive in place of the answers */
	CHECK(send(b.fd, junk, sizeof(junk) - 1, MSG_NOSIGNAL) == (ssize_t)sizeof(junk) - 1);
	for (int t = 0; t < 100000 && a.n < 4; t++) {
		kvl_tcp_progress(a.c);
		reap(&a);
	}
	CHECK_INT(a.n, 4);
	for (unsigned i = 0; i < a.n; i++)
		n += a.wc[i].status == KVL_ERR_PROTOCOL;
	CHECK_INT(n, 4);
	CHECK_INT(kvl_tcp_broken(a.c), KVL_ERR_PROTOCOL);
	close_pair();
}

int main(void)
{
	/* As kvlaned with [control] tls = on (runtime/control/tls.c): OpenSSL writes with
	 * write(), and a peer gone must cost an EPIPE, not the process. */
	signal(SIGPIPE, SIG_IGN);
	tls_setup();
	test_sizes(0, 8);
	/* On 4 KiB buffers one-way traffic waits on delayed ACKs: up to 64 KiB there. */
	test_sizes(4096, 7);
	test_window_both_ways();
	test_bad_records();
	SSL_SESSION_free(psk);
	SSL_CTX_free(ctx);
	return kvl_test_done("tcp_tls");
}
