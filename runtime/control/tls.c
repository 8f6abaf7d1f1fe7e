/* SPDX-License-Identifier: BSD-3-Clause */
/* TLS 1.3 under the control thread's connections: the PSK context, non-blocking handshakes, I/O. */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/kdf.h>
#include <openssl/ssl.h>

#include "ctl.h"
#include "tcp_data.h"

/*
 * Peers authenticate with an external PSK derived from the shared secret (no certificates to
 * manage), and the secret's own challenge-response still runs on top, unchanged. The label
 * keeps the PSK apart from every other use of the secret (the HMAC proofs use it as is).
 */
static const char psk_label[] = "kvlane tls1.3 external psk v1";
static const unsigned char psk_identity[] = "kvlane-psk-v1";
/* TLS_AES_128_GCM_SHA256: AES-NI on every x86 we run on, and kernel TLS offloads it. */
static const unsigned char psk_suite[2] = { 0x13, 0x01 };

static int derive_psk(const struct kvl_secret *s, uint8_t out[32])
{
	EVP_PKEY_CTX *k = EVP_PKEY_CTX_new_id(EVP_PKEY_HKDF, NULL);
	size_t len = 32;
	int ok = k != NULL && EVP_PKEY_derive_init(k) > 0 &&
		 EVP_PKEY_CTX_set_hkdf_md(k, EVP_sha256()) > 0 &&
		 EVP_PKEY_CTX_set1_hkdf_key(k, s->key, (int)s->len) > 0 &&
		 EVP_PKEY_CTX_add1_hkdf_info(k, (const unsigned char *)psk_label,
					     (int)sizeof(psk_label) - 1) > 0 &&
		 EVP_PKEY_derive(k, out, &len) > 0 && len == 32;

	EVP_PKEY_CTX_free(k);
	return ok ? 0 : -EIO;
}

static SSL_SESSION *psk_of(SSL *ssl)
{
	struct kvl_control *c = SSL_CTX_get_app_data(SSL_get_SSL_CTX(ssl));

	return c->tls_psk;
}

/* Client: offer the PSK (again after a HelloRetryRequest only if the hash still fits). */
static int use_session(SSL *ssl, const EVP_MD *md, const unsigned char **id, size_t *idlen,
		       SSL_SESSION **sess)
{
	SSL_SESSION *s = psk_of(ssl);

	*sess = NULL;
	if (md != NULL && md != SSL_CIPHER_get_handshake_digest(SSL_SESSION_get0_cipher(s)))
		return 1;
	SSL_SESSION_up_ref(s);
	*sess = s;
	*id = psk_identity;
	*idlen = sizeof(psk_identity) - 1;
	return 1;
}

/* Server: only our identity has a key; the binder then proves the client holds it. */
static int find_session(SSL *ssl, const unsigned char *id, size_t idlen, SSL_SESSION **sess)
{
	*sess = NULL;
	if (idlen == sizeof(psk_identity) - 1 && memcmp(id, psk_identity, idlen) == 0) {
		SSL_SESSION_up_ref(psk_of(ssl));
		*sess = psk_of(ssl);
	}
	return 1;
}

int kvl_ctl_tls_init(struct kvl_control *c, char *err, size_t errlen)
{
	uint8_t psk[32];
	const SSL_CIPHER *suite;
	SSL *probe = NULL;

	if (!c->rt->cfg.control.tls)
		return 0;
	/* OpenSSL writes to its sockets with write(), not send(MSG_NOSIGNAL) (kernel TLS needs
	 * its own socket BIO): a peer that resets must cost an EPIPE, not the process. Only a
	 * default disposition is changed; a handler the application installed stays. */
	{
		struct sigaction old;

		if (sigaction(SIGPIPE, NULL, &old) == 0 && old.sa_handler == SIG_DFL)
			signal(SIGPIPE, SIG_IGN);
	}
	c->tls = SSL_CTX_new(TLS_method());
	if (c->tls == NULL)
		goto fail;
	SSL_CTX_set_app_data(c->tls, c);
	if (!SSL_CTX_set_min_proto_version(c->tls, TLS1_3_VERSION) ||
	    !SSL_CTX_set_ciphersuites(c->tls, "TLS_AES_128_GCM_SHA256"))
		goto fail;
	/* No tickets: nothing arrives after the handshake but data (kernel TLS reads only that),
	 * and a session is never resumed: each connection derives fresh keys (ECDHE with PSK). */
	SSL_CTX_set_num_tickets(c->tls, 0);
	SSL_CTX_set_options(c->tls, SSL_OP_ENABLE_KTLS | SSL_OP_NO_TICKET);
	/* The send queues (control: a growing buffer; data: the frames themselves) may move
	 * between a WANT_WRITE and its retry, and a write may end at a record. */
	SSL_CTX_set_mode(c->tls,
			 SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
	SSL_CTX_clear_mode(c->tls, SSL_MODE_AUTO_RETRY);
	/* Without kernel TLS every record costs two read()s (its header, then the rest) unless
	 * TLS reads ahead: then one read() takes several records. Everything after the handshake
	 * is read through SSL_read, so bytes read ahead are never lost (kvl_ctl_tls_pending). */
	SSL_CTX_set_read_ahead(c->tls, 1);
	SSL_CTX_set_default_read_buffer_len(c->tls, 256 * 1024);
	SSL_CTX_set_psk_use_session_callback(c->tls, use_session);
	SSL_CTX_set_psk_find_session_callback(c->tls, find_session);
	probe = SSL_new(c->tls);
	suite = probe ? SSL_CIPHER_find(probe, psk_suite) : NULL;
	c->tls_psk = SSL_SESSION_new();
	if (suite == NULL || c->tls_psk == NULL || derive_psk(&c->secret, psk) < 0 ||
	    !SSL_SESSION_set1_master_key(c->tls_psk, psk, sizeof(psk)) ||
	    !SSL_SESSION_set_cipher(c->tls_psk, suite) ||
	    !SSL_SESSION_set_protocol_version(c->tls_psk, TLS1_3_VERSION))
		goto fail;
	SSL_free(probe);
	OPENSSL_cleanse(psk, sizeof(psk));
	return 0;
fail:
	snprintf(err, errlen, "[control] tls = on: cannot set up TLS 1.3: %s",
		 ERR_reason_error_string(ERR_peek_last_error()) ?: "OpenSSL error");
	ERR_clear_error();
	SSL_free(probe);
	OPENSSL_cleanse(psk, sizeof(psk));
	kvl_ctl_tls_free(c);
	return -EIO;
}

void kvl_ctl_tls_free(struct kvl_control *c)
{
	SSL_SESSION_free(c->tls_psk);
	SSL_CTX_free(c->tls);
	c->tls_psk = NULL;
	c->tls = NULL;
}

/* The first bytes the handshake reads off the wire, kept to name a cleartext peer. */
static long first_bytes(BIO *b, int oper, const char *argp, size_t len, int argi, long argl,
			int ret, size_t *processed)
{
	struct kvl_tls_first *f = (struct kvl_tls_first *)BIO_get_callback_arg(b);

	(void)len;
	(void)argi;
	(void)argl;
	if (oper == (BIO_CB_READ | BIO_CB_RETURN) && ret > 0 && processed && f) {
		for (size_t i = 0; i < *processed && f->n < sizeof(f->b); i++)
			f->b[f->n++] = (uint8_t)argp[i];
	}
	return ret;
}

SSL *kvl_ctl_tls_new(struct kvl_control *c, int fd, bool server, struct kvl_tls_first *first)
{
	SSL *ssl = SSL_new(c->tls);

	if (ssl == NULL || !SSL_set_fd(ssl, fd)) {
		SSL_free(ssl);
		ERR_clear_error();
		return NULL;
	}
	memset(first, 0, sizeof(*first));
	BIO_set_callback_arg(SSL_get_rbio(ssl), (char *)first);
	BIO_set_callback_ex(SSL_get_rbio(ssl), first_bytes);
	if (server)
		SSL_set_accept_state(ssl);
	else
		SSL_set_connect_state(ssl);
	return ssl;
}

/* The first bytes of a kvlane control frame ("KVLC", KVL_CTRL_MAGIC little-endian). */
static bool cleartext_kvlane(const struct kvl_tls_first *f)
{
	return f->n == 4 && f->b[0] == (uint8_t)KVL_CTRL_MAGIC &&
	       f->b[1] == (uint8_t)(KVL_CTRL_MAGIC >> 8) &&
	       f->b[2] == (uint8_t)(KVL_CTRL_MAGIC >> 16) &&
	       f->b[3] == (uint8_t)(KVL_CTRL_MAGIC >> 24);
}

int kvl_ctl_tls_step(SSL *ssl, struct kvl_tls_first *first, short *events, char *err, size_t errlen)
{
	unsigned long e;
	int rc;

	ERR_clear_error();
	errno = 0;
	rc = SSL_do_handshake(ssl);
	if (rc == 1) {
		/* The connection may outlive @first (a data connection goes to its lcore). */
		BIO_set_callback_ex(SSL_get_rbio(ssl), NULL);
		BIO_set_callback_arg(SSL_get_rbio(ssl), NULL);
		return 1;
	}
	switch (SSL_get_error(ssl, rc)) {
	case SSL_ERROR_WANT_READ:
		*events = POLLIN;
		return 0;
	case SSL_ERROR_WANT_WRITE:
		*events = POLLOUT;
		return 0;
	default:
		break;
	}
	e = ERR_peek_last_error();
	ERR_clear_error();
	if (cleartext_kvlane(first)) {
		snprintf(err, errlen,
			 "TLS mismatch: the peer speaks kvlane in cleartext ([control] tls = off "
			 "there), this side has [control] tls = on: set the same [control] tls on "
			 "both ends");
		return -EPROTO;
	}
	if (e == 0) {
		snprintf(err, errlen,
			 "TLS handshake: the connection %s (does the peer run [control] tls = on?)",
			 errno ? strerror(errno) : "closed");
		return -ECONNRESET;
	}
	snprintf(err, errlen, "TLS handshake failed: %s%s",
		 ERR_reason_error_string(e) ?: "protocol error",
		 ERR_GET_REASON(e) == SSL_R_TLSV1_ALERT_DECRYPT_ERROR ||
				 ERR_GET_REASON(e) == SSL_R_BAD_PSK_IDENTITY ||
				 ERR_GET_REASON(e) == SSL_R_DIGEST_CHECK_FAILED ||
				 ERR_GET_REASON(e) == SSL_R_NO_SHARED_CIPHER
			 ? " (the peer does not hold our secret, or is not kvlane)"
			 : "");
	return -EBADMSG;
}

ssize_t kvl_ctl_recv(int fd, SSL *ssl, void *buf, size_t len)
{
	size_t n = 0;
	int rc;

	if (ssl == NULL)
		return recv(fd, buf, len, 0);
	ERR_clear_error();
	errno = 0;
	rc = SSL_read_ex(ssl, buf, len, &n);
	return kvl_tcp_tls_result(ssl, rc, n);
}

ssize_t kvl_ctl_send(int fd, SSL *ssl, const void *buf, size_t len)
{
	size_t n = 0;
	int rc;

	if (ssl == NULL)
		return send(fd, buf, len, MSG_NOSIGNAL);
	ERR_clear_error();
	errno = 0;
	rc = SSL_write_ex(ssl, buf, len, &n);
	return kvl_tcp_tls_result(ssl, rc, n);
}

bool kvl_ctl_tls_pending(SSL *ssl)
{
	return ssl != NULL && SSL_has_pending(ssl);
}

void kvl_ctl_tls_close(SSL *ssl)
{
	if (ssl == NULL)
		return;
	/* A close_notify if the socket takes it at once; never waited for. */
	if (SSL_is_init_finished(ssl))
		(void)SSL_shutdown(ssl);
	ERR_clear_error();
	SSL_free(ssl);
}
