/* SPDX-License-Identifier: BSD-3-Clause */
/* etcd's v3 API through its JSON gateway: libcurl requests, jansson bodies, base64 keys. */
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>
#include <openssl/evp.h>

#include "etcd.h"

/* Unary answers larger than this are refused (a range of a huge prefix): etcd's own request
 * limit is 1.5 MiB per value, and kvlane's records are a few KiB. */
#define MAX_BODY (64u << 20)
/* One line of the watch stream (one gateway message with its events). */
#define MAX_LINE (16u << 20)

struct buf {
	char *p;
	size_t len, cap;
	bool over;
};

struct kvl_etcd {
	char urls[8][128];
	unsigned n_urls, cur;
	char api[16];
	char version[32];
	char ca[256], cert[256], key[256];
	char user[64], password[256];
	char token_hdr[600];
	unsigned timeout_ms;
	long http_status; /* of the last answer, 0 when none came */
	CURL *h;
	struct buf rx;
	char err[KVL_ETCD_ERR_LEN];
};

struct kvl_etcd_watch {
	CURL *h;
	struct curl_slist *hdrs;
	char *body;
	struct buf line;
	kvl_etcd_ev_fn fn;
	void *arg;
	bool created, failed;
	uint64_t events;
	int64_t rev;
	char err[KVL_ETCD_ERR_LEN];
};

static pthread_once_t global_once = PTHREAD_ONCE_INIT;
static CURLcode global_rc;

static void global_init(void)
{
	global_rc = curl_global_init(CURL_GLOBAL_DEFAULT);
}

static void set_err(struct kvl_etcd *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void set_err(struct kvl_etcd *e, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(e->err, sizeof(e->err), fmt, ap);
	va_end(ap);
}

static size_t on_body(char *data, size_t size, size_t n, void *user)
{
	struct buf *b = user;
	size_t len = size * n;

	if (b->len + len + 1 > MAX_BODY) {
		b->over = true;
		return 0; /* curl stops: CURLE_WRITE_ERROR */
	}
	if (b->len + len + 1 > b->cap) {
		size_t cap = b->cap ? b->cap : 4096;
		char *p;

		while (cap < b->len + len + 1)
			cap *= 2;
		p = realloc(b->p, cap);
		if (p == NULL)
			return 0;
		b->p = p;
		b->cap = cap;
	}
	memcpy(b->p + b->len, data, len);
	b->len += len;
	b->p[b->len] = '\0';
	return len;
}

/* ---- base64 (OpenSSL's codec: keys and values travel base64 in the gateway's JSON) ---- */

static char *b64_enc(const void *src, size_t len)
{
	char *out = malloc(4 * ((len + 2) / 3) + 1);

	if (out)
		EVP_EncodeBlock((unsigned char *)out, src, (int)len);
	return out;
}

/* Decoded into a new NUL-terminated buffer; NULL on bad input. */
static char *b64_dec(const char *src, size_t *outlen)
{
	size_t n = strlen(src), pad = 0;
	char *out;
	int got;

	if (n % 4)
		return NULL;
	out = malloc(n / 4 * 3 + 1);
	if (out == NULL)
		return NULL;
	got = n ? EVP_DecodeBlock((unsigned char *)out, (const unsigned char *)src, (int)n) : 0;
	if (got < 0) {
		free(out);
		return NULL;
	}
	while (pad < 2 && n > pad && src[n - 1 - pad] == '=')
		pad++;
	*outlen = (size_t)got - pad; /* EVP_DecodeBlock counts the padding as zero bytes */
	out[*outlen] = '\0';
	return out;
}

/* The gateway writes int64 as strings ("revision":"12"); accept numbers as well. */
static int64_t j_i64(const json_t *o, const char *key)
{
	const json_t *v = json_object_get(o, key);

	if (json_is_integer(v))
		return (int64_t)json_integer_value(v);
	if (json_is_string(v))
		return strtoll(json_string_value(v), NULL, 10);
	return 0;
}

static void setup_common(struct kvl_etcd *e, CURL *h)
{
	curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, (long)e->timeout_ms);
	curl_easy_setopt(h, CURLOPT_TCP_NODELAY, 1L);
	if (e->ca[0])
		curl_easy_setopt(h, CURLOPT_CAINFO, e->ca);
	if (e->cert[0]) {
		curl_easy_setopt(h, CURLOPT_SSLCERT, e->cert);
		curl_easy_setopt(h, CURLOPT_SSLKEY, e->key);
	}
}

struct kvl_etcd *kvl_etcd_new(const struct kvl_etcd_opts *o, char *err, size_t errlen)
{
	struct kvl_etcd *e;
	char list[1024], *save, *tok;

	pthread_once(&global_once, global_init);
	if (global_rc != CURLE_OK) {
		snprintf(err, errlen, "libcurl: %s", curl_easy_strerror(global_rc));
		errno = EIO;
		return NULL;
	}
	if (o->endpoints == NULL || strlen(o->endpoints) >= sizeof(list)) {
		snprintf(err, errlen, "etcd endpoints: missing or too long");
		errno = EINVAL;
		return NULL;
	}
	e = calloc(1, sizeof(*e));
	if (e == NULL) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	snprintf(list, sizeof(list), "%s", o->endpoints);
	for (save = list; (tok = strsep(&save, ",")) != NULL;) {
		while (*tok == ' ')
			tok++;
		if (*tok == '\0')
			continue;
		if (e->n_urls == sizeof(e->urls) / sizeof(e->urls[0]) ||
		    strlen(tok) >= sizeof(e->urls[0])) {
			snprintf(err, errlen, "etcd endpoints: too many or too long (%s)", tok);
			free(e);
			errno = EINVAL;
			return NULL;
		}
		snprintf(e->urls[e->n_urls++], sizeof(e->urls[0]), "%s", tok);
	}
	if (e->n_urls == 0) {
		snprintf(err, errlen, "etcd endpoints: none given");
		free(e);
		errno = EINVAL;
		return NULL;
	}
	snprintf(e->api, sizeof(e->api), "/v3");
	snprintf(e->ca, sizeof(e->ca), "%s", o->ca_file ? o->ca_file : "");
	snprintf(e->cert, sizeof(e->cert), "%s", o->cert_file ? o->cert_file : "");
	snprintf(e->key, sizeof(e->key), "%s", o->key_file ? o->key_file : "");
	snprintf(e->user, sizeof(e->user), "%s", o->user ? o->user : "");
	snprintf(e->password, sizeof(e->password), "%s", o->password ? o->password : "");
	e->timeout_ms = o->timeout_ms ? o->timeout_ms : 1000;
	e->h = curl_easy_init();
	if (e->h == NULL) {
		snprintf(err, errlen, "curl_easy_init failed");
		free(e);
		errno = ENOMEM;
		return NULL;
	}
	return e;
}

void kvl_etcd_free(struct kvl_etcd *e)
{
	if (e == NULL)
		return;
	curl_easy_cleanup(e->h);
	free(e->rx.p);
	explicit_bzero(e->password, sizeof(e->password));
	free(e);
}

const char *kvl_etcd_error(const struct kvl_etcd *e)
{
	return e->err;
}

const char *kvl_etcd_endpoint(const struct kvl_etcd *e)
{
	return e->urls[e->cur];
}

const char *kvl_etcd_api(const struct kvl_etcd *e)
{
	return e->api;
}

const char *kvl_etcd_version(const struct kvl_etcd *e)
{
	return e->version;
}

/*
 * One request to the current endpoint, failing over to the next ones while they refuse the
 * connection (that costs no time; a timeout ends the call, the caller retries later).
 * @path is appended to the endpoint as is (api prefix included by the caller). The answer's
 * JSON in *@out (the caller's to json_decref).
 */
static int call(struct kvl_etcd *e, const char *path, json_t *req, json_t **out)
{
	char *body = req ? json_dumps(req, JSON_COMPACT) : NULL;
	struct curl_slist *hdrs = NULL;
	long status = 0;
	int rc = -EHOSTUNREACH;

	*out = NULL;
	e->http_status = 0;
	if (req && body == NULL) {
		set_err(e, "cannot encode the request");
		return -ENOMEM;
	}
	hdrs = curl_slist_append(hdrs, "Content-Type: application/json");
	if (e->token_hdr[0])
		hdrs = curl_slist_append(hdrs, e->token_hdr);
	for (unsigned tried = 0; tried < e->n_urls; tried++) {
		char url[256];
		CURLcode cc;

		snprintf(url, sizeof(url), "%s%s", e->urls[e->cur], path);
		curl_easy_reset(e->h);
		setup_common(e, e->h);
		curl_easy_setopt(e->h, CURLOPT_URL, url);
		curl_easy_setopt(e->h, CURLOPT_TIMEOUT_MS, (long)e->timeout_ms);
		curl_easy_setopt(e->h, CURLOPT_HTTPHEADER, hdrs);
		curl_easy_setopt(e->h, CURLOPT_WRITEFUNCTION, on_body);
		curl_easy_setopt(e->h, CURLOPT_WRITEDATA, &e->rx);
		if (body) {
			curl_easy_setopt(e->h, CURLOPT_POSTFIELDS, body);
			curl_easy_setopt(e->h, CURLOPT_POSTFIELDSIZE, (long)strlen(body));
		}
		e->rx.len = 0;
		e->rx.over = false;
		cc = curl_easy_perform(e->h);
		if (cc == CURLE_OK) {
			json_error_t je;

			curl_easy_getinfo(e->h, CURLINFO_RESPONSE_CODE, &status);
			e->http_status = status;
			*out = json_loadb(e->rx.p ? e->rx.p : "", e->rx.len, 0, &je);
			if (*out == NULL || !json_is_object(*out)) {
				set_err(e, "etcd %s%s: HTTP %ld, not JSON (%s)", e->urls[e->cur],
					path, status, je.text);
				json_decref(*out);
				*out = NULL;
				rc = -EPROTO;
			} else if (status != 200) {
				const char *m = json_string_value(json_object_get(*out, "message"));
				int64_t code = j_i64(*out, "code");

				set_err(e, "etcd %s%s: HTTP %ld: %s", e->urls[e->cur], path, status,
					m ? m : "(no message)");
				/* gRPC codes 16 and 7: unauthenticated, permission denied */
				rc = code == 16 || code == 7 ? -EACCES : -EPROTO;
				json_decref(*out);
				*out = NULL;
			} else {
				rc = 0;
			}
			break;
		}
		if (e->rx.over) {
			set_err(e, "etcd %s%s: answer larger than %u MiB", e->urls[e->cur], path,
				MAX_BODY >> 20);
			rc = -EMSGSIZE;
			break;
		}
		set_err(e, "etcd %s: %s", e->urls[e->cur], curl_easy_strerror(cc));
		rc = cc == CURLE_OPERATION_TIMEDOUT ? -ETIMEDOUT : -EHOSTUNREACH;
		e->cur = (e->cur + 1) % e->n_urls; /* the next call starts at the next one */
		if (cc != CURLE_COULDNT_CONNECT)
			break;
	}
	curl_slist_free_all(hdrs);
	free(body);
	return rc;
}

static int authenticate(struct kvl_etcd *e)
{
	json_t *req = json_pack("{s:s, s:s}", "name", e->user, "password", e->password), *r;
	char path[64];
	const char *tok;
	int rc;

	e->token_hdr[0] = '\0';
	snprintf(path, sizeof(path), "%s/auth/authenticate", e->api);
	rc = call(e, path, req, &r);
	json_decref(req);
	if (rc < 0 && e->http_status >= 400 && e->http_status < 500)
		rc = -EACCES; /* etcd answered: a wrong user or password (gRPC InvalidArgument) */
	if (rc < 0)
		return rc;
	tok = json_string_value(json_object_get(r, "token"));
	if (tok == NULL || strlen(tok) + 16 > sizeof(e->token_hdr)) {
		set_err(e, "etcd %s: authentication of user %s gave no token", kvl_etcd_endpoint(e),
			e->user);
		json_decref(r);
		return -EACCES;
	}
	snprintf(e->token_hdr, sizeof(e->token_hdr), "Authorization: %s", tok);
	json_decref(r);
	return 0;
}

int kvl_etcd_connect(struct kvl_etcd *e)
{
	json_t *r;
	const char *v;
	int rc, major = 0, minor = 0;

	e->token_hdr[0] = '\0';
	rc = call(e, "/version", NULL, &r);
	if (rc < 0)
		return rc;
	v = json_string_value(json_object_get(r, "etcdserver"));
	if (v == NULL || sscanf(v, "%d.%d", &major, &minor) != 2) {
		set_err(e, "etcd %s/version: no etcdserver version in the answer",
			kvl_etcd_endpoint(e));
		json_decref(r);
		return -EPROTO;
	}
	snprintf(e->version, sizeof(e->version), "%s", v);
	json_decref(r);
	/* The gateway moved: 3.2 serves /v3alpha, 3.3 /v3beta, 3.4 both /v3beta and /v3 (the
	 * first deprecated), 3.5 on /v3 only. */
	if (major == 3 && minor <= 2)
		snprintf(e->api, sizeof(e->api), "/v3alpha");
	else if (major == 3 && minor == 3)
		snprintf(e->api, sizeof(e->api), "/v3beta");
	else
		snprintf(e->api, sizeof(e->api), "/v3");
	return e->user[0] ? authenticate(e) : 0;
}

/* call() on @api@suffix; an expired token is renewed once. */
static int api_call(struct kvl_etcd *e, const char *suffix, json_t *req, json_t **out)
{
	char path[96];
	int rc;

	snprintf(path, sizeof(path), "%s%s", e->api, suffix);
	rc = call(e, path, req, out);
	if (rc == -EACCES && e->user[0] && authenticate(e) == 0)
		rc = call(e, path, req, out);
	return rc;
}

int kvl_etcd_grant(struct kvl_etcd *e, int64_t ttl_s, int64_t *lease)
{
	json_t *req = json_pack("{s:I}", "TTL", (json_int_t)ttl_s), *r;
	int rc = api_call(e, "/lease/grant", req, &r);

	json_decref(req);
	if (rc < 0)
		return rc;
	*lease = j_i64(r, "ID");
	if (*lease == 0) {
		const char *m = json_string_value(json_object_get(r, "error"));

		set_err(e, "etcd %s: lease grant refused: %s", kvl_etcd_endpoint(e),
			m ? m : "no ID in the answer");
		rc = -EPROTO;
	}
	json_decref(r);
	return rc;
}

int kvl_etcd_keepalive(struct kvl_etcd *e, int64_t lease, int64_t *ttl)
{
	char id[24];
	json_t *req, *r, *res;
	int rc;

	/* As a string: JSON numbers lose int64 precision in some decoders, never in etcd's. */
	snprintf(id, sizeof(id), "%lld", (long long)lease);
	req = json_pack("{s:s}", "ID", id);
	rc = api_call(e, "/lease/keepalive", req, &r);
	json_decref(req);
	if (rc < 0)
		return rc;
	/* A stream of one answer: {"result": {..., "TTL": "10"}}; no TTL once the lease is gone. */
	res = json_object_get(r, "result");
	if (!json_is_object(res)) {
		const json_t *er = json_object_get(r, "error");

		set_err(e, "etcd %s: keepalive answered without a result%s", kvl_etcd_endpoint(e),
			er ? " (an error)" : "");
		json_decref(r);
		return -EPROTO;
	}
	*ttl = j_i64(res, "TTL");
	json_decref(r);
	return 0;
}

int kvl_etcd_revoke(struct kvl_etcd *e, int64_t lease)
{
	char id[24];
	json_t *req, *r;
	int rc;

	snprintf(id, sizeof(id), "%lld", (long long)lease);
	req = json_pack("{s:s}", "ID", id);
	rc = api_call(e, "/lease/revoke", req, &r);
	json_decref(req);
	json_decref(r);
	return rc;
}

static json_t *put_op(const char *k64, const char *v64, int64_t lease)
{
	char id[24];

	snprintf(id, sizeof(id), "%lld", (long long)lease);
	return lease ? json_pack("{s:s, s:s, s:s}", "key", k64, "value", v64, "lease", id)
		     : json_pack("{s:s, s:s}", "key", k64, "value", v64);
}

int kvl_etcd_create(struct kvl_etcd *e, const char *key, const void *val, size_t vlen,
		    int64_t lease, char *held, size_t heldlen)
{
	char *k64 = b64_enc(key, strlen(key)), *v64 = b64_enc(val, vlen);
	json_t *req = NULL, *r = NULL;
	int rc = -ENOMEM;

	if (k64 && v64)
		req = json_pack("{s:[{s:s, s:s, s:s, s:s}], s:[{s:o}], s:[{s:{s:s}}]}", "compare",
				"key", k64, "result", "EQUAL", "target", "CREATE",
				"create_revision", "0", "success", "request_put",
				put_op(k64, v64, lease), "failure", "request_range", "key", k64);
	if (req)
		rc = api_call(e, "/kv/txn", req, &r);
	if (rc == 0 && !json_is_true(json_object_get(r, "succeeded"))) {
		/* failure branch: responses[0].response_range.kvs[0].value */
		json_t *kvs = json_object_get(
			json_object_get(json_array_get(json_object_get(r, "responses"), 0),
					"response_range"),
			"kvs");
		const char *v = json_string_value(json_object_get(json_array_get(kvs, 0), "value"));
		size_t n = 0;
		char *d = v ? b64_dec(v, &n) : NULL;

		if (held && heldlen)
			snprintf(held, heldlen, "%s", d ? d : "");
		free(d);
		set_err(e, "etcd: %s exists", key);
		rc = -EEXIST;
	}
	json_decref(req);
	json_decref(r);
	free(k64);
	free(v64);
	return rc;
}

int kvl_etcd_put(struct kvl_etcd *e, const char *key, const void *val, size_t vlen, int64_t lease)
{
	char *k64 = b64_enc(key, strlen(key)), *v64 = b64_enc(val, vlen);
	json_t *req = k64 && v64 ? put_op(k64, v64, lease) : NULL, *r = NULL;
	int rc = req ? api_call(e, "/kv/put", req, &r) : -ENOMEM;

	json_decref(req);
	json_decref(r);
	free(k64);
	free(v64);
	return rc;
}

int kvl_etcd_delete(struct kvl_etcd *e, const char *key)
{
	char *k64 = b64_enc(key, strlen(key));
	json_t *req = k64 ? json_pack("{s:s}", "key", k64) : NULL, *r = NULL;
	int rc = req ? api_call(e, "/kv/deleterange", req, &r) : -ENOMEM;

	json_decref(req);
	json_decref(r);
	free(k64);
	return rc;
}

/* The range end of "every key starting with @prefix": the prefix with its last byte + 1. */
static char *prefix_end64(const char *prefix)
{
	size_t n = strlen(prefix);
	char *end = strdup(prefix), *out;

	if (end == NULL)
		return NULL;
	while (n > 0 && (unsigned char)end[n - 1] == 0xff)
		n--;
	if (n == 0) {
		free(end);
		return b64_enc("\0", 1); /* every key */
	}
	end[n - 1] = (char)((unsigned char)end[n - 1] + 1);
	out = b64_enc(end, n);
	free(end);
	return out;
}

/* Decode one "kv" object; false (and nothing to free) when it is not well formed. */
static bool kv_decode(const json_t *o, struct kvl_etcd_kv *kv, char **kbuf, char **vbuf)
{
	const char *k = json_string_value(json_object_get(o, "key"));
	const char *v = json_string_value(json_object_get(o, "value"));

	*kbuf = *vbuf = NULL;
	if (k == NULL || (*kbuf = b64_dec(k, &kv->klen)) == NULL)
		return false;
	kv->vlen = 0;
	*vbuf = b64_dec(v ? v : "", &kv->vlen);
	if (*vbuf == NULL) {
		free(*kbuf);
		*kbuf = NULL;
		return false;
	}
	kv->key = *kbuf;
	kv->val = *vbuf;
	kv->lease = j_i64(o, "lease");
	kv->mod_rev = j_i64(o, "mod_revision");
	return true;
}

int kvl_etcd_range_prefix(struct kvl_etcd *e, const char *prefix, kvl_etcd_kv_fn fn, void *arg,
			  int64_t *rev)
{
	char *k64 = b64_enc(prefix, strlen(prefix)), *e64 = prefix_end64(prefix);
	json_t *req = k64 && e64 ? json_pack("{s:s, s:s}", "key", k64, "range_end", e64) : NULL;
	json_t *r = NULL, *kvs;
	size_t i;
	int rc = req ? api_call(e, "/kv/range", req, &r) : -ENOMEM;

	if (rc == 0) {
		*rev = j_i64(json_object_get(r, "header"), "revision");
		kvs = json_object_get(r, "kvs");
		for (i = 0; i < json_array_size(kvs); i++) {
			struct kvl_etcd_kv kv;
			char *kb, *vb;

			if (!kv_decode(json_array_get(kvs, i), &kv, &kb, &vb))
				continue; /* not base64: not etcd's, skipped */
			fn(arg, &kv);
			free(kb);
			free(vb);
		}
	}
	json_decref(req);
	json_decref(r);
	free(k64);
	free(e64);
	return rc;
}

/* ---- watch ---- */

static void watch_line(struct kvl_etcd_watch *w, const char *s, size_t n)
{
	json_error_t je;
	json_t *o = json_loadb(s, n, 0, &je), *res, *evs;

	if (o == NULL) {
		w->failed = true;
		snprintf(w->err, sizeof(w->err), "watch: a message that is not JSON (%s)", je.text);
		return;
	}
	res = json_object_get(o, "result");
	if (!json_is_object(res)) {
		const char *m =
			json_string_value(json_object_get(json_object_get(o, "error"), "message"));

		w->failed = true;
		snprintf(w->err, sizeof(w->err), "watch: %s", m ? m : "an answer without result");
		json_decref(o);
		return;
	}
	if (json_is_true(json_object_get(res, "created")))
		w->created = true;
	if (json_is_true(json_object_get(res, "canceled")) || j_i64(res, "compact_revision")) {
		const char *m = json_string_value(json_object_get(res, "cancel_reason"));

		w->failed = true;
		snprintf(w->err, sizeof(w->err), "watch canceled by etcd%s%s (compacted at %lld)",
			 m ? ": " : "", m ? m : "", (long long)j_i64(res, "compact_revision"));
	}
	evs = json_object_get(res, "events");
	for (size_t i = 0; i < json_array_size(evs); i++) {
		const json_t *ev = json_array_get(evs, i);
		const char *t = json_string_value(json_object_get(ev, "type"));
		struct kvl_etcd_kv kv;
		char *kb, *vb;

		if (!kv_decode(json_object_get(ev, "kv"), &kv, &kb, &vb))
			continue;
		w->events++;
		if (kv.mod_rev > w->rev)
			w->rev = kv.mod_rev;
		/* PUT is the enum's zero: the gateway leaves "type" out for it */
		w->fn(w->arg, t && strcmp(t, "DELETE") == 0 ? KVL_ETCD_DELETE : KVL_ETCD_PUT, &kv);
		free(kb);
		free(vb);
	}
	json_decref(o);
}

/* The gateway writes one JSON object per line; a line may arrive in pieces. */
static size_t on_watch(char *data, size_t size, size_t n, void *user)
{
	struct kvl_etcd_watch *w = user;
	size_t len = size * n, start = 0;

	if (on_body(data, 1, len, &w->line) != len)
		return 0;
	for (size_t i = 0; i < w->line.len; i++) {
		if (w->line.p[i] != '\n')
			continue;
		if (i > start)
			watch_line(w, w->line.p + start, i - start);
		start = i + 1;
	}
	if (start) {
		memmove(w->line.p, w->line.p + start, w->line.len - start);
		w->line.len -= start;
	}
	if (w->line.len > MAX_LINE)
		return 0;
	return len;
}

struct kvl_etcd_watch *kvl_etcd_watch_new(struct kvl_etcd *e, const char *prefix, int64_t from_rev,
					  kvl_etcd_ev_fn fn, void *arg)
{
	struct kvl_etcd_watch *w = calloc(1, sizeof(*w));
	char *k64 = b64_enc(prefix, strlen(prefix)), *e64 = prefix_end64(prefix);
	char url[256], rev[24];
	json_t *req = NULL;

	if (w == NULL || k64 == NULL || e64 == NULL)
		goto fail;
	snprintf(rev, sizeof(rev), "%lld", (long long)from_rev);
	req = json_pack("{s:{s:s, s:s, s:s}}", "create_request", "key", k64, "range_end", e64,
			"start_revision", rev);
	w->body = req ? json_dumps(req, JSON_COMPACT) : NULL;
	w->h = curl_easy_init();
	if (w->body == NULL || w->h == NULL)
		goto fail;
	w->fn = fn;
	w->arg = arg;
	w->rev = from_rev > 0 ? from_rev - 1 : 0;
	snprintf(url, sizeof(url), "%s%s/watch", kvl_etcd_endpoint(e), e->api);
	w->hdrs = curl_slist_append(NULL, "Content-Type: application/json");
	if (e->token_hdr[0])
		w->hdrs = curl_slist_append(w->hdrs, e->token_hdr);
	setup_common(e, w->h);
	curl_easy_setopt(w->h, CURLOPT_URL, url);
	curl_easy_setopt(w->h, CURLOPT_HTTPHEADER, w->hdrs);
	curl_easy_setopt(w->h, CURLOPT_POSTFIELDS, w->body);
	curl_easy_setopt(w->h, CURLOPT_POSTFIELDSIZE, (long)strlen(w->body));
	curl_easy_setopt(w->h, CURLOPT_WRITEFUNCTION, on_watch);
	curl_easy_setopt(w->h, CURLOPT_WRITEDATA, w);
	curl_easy_setopt(w->h, CURLOPT_PRIVATE, w);
	/* A stream: no total timeout. A partitioned etcd sends nothing and TCP keepalive is the
	 * only sign; the cluster thread's keepalive calls notice it first and restart the watch. */
	curl_easy_setopt(w->h, CURLOPT_TCP_KEEPALIVE, 1L);
	curl_easy_setopt(w->h, CURLOPT_TCP_KEEPIDLE, 5L);
	curl_easy_setopt(w->h, CURLOPT_TCP_KEEPINTVL, 2L);
	json_decref(req);
	free(k64);
	free(e64);
	return w;
fail:
	json_decref(req);
	free(k64);
	free(e64);
	if (w) {
		if (w->h)
			curl_easy_cleanup(w->h);
		free(w->body);
		free(w);
	}
	errno = ENOMEM;
	return NULL;
}

CURL *kvl_etcd_watch_easy(struct kvl_etcd_watch *w)
{
	return w->h;
}

bool kvl_etcd_watch_created(const struct kvl_etcd_watch *w)
{
	return w->created;
}

uint64_t kvl_etcd_watch_events(const struct kvl_etcd_watch *w)
{
	return w->events;
}

int64_t kvl_etcd_watch_rev(const struct kvl_etcd_watch *w)
{
	return w->rev;
}

void kvl_etcd_watch_ended(struct kvl_etcd_watch *w, CURLcode rc, char *err, size_t errlen)
{
	long status = 0;

	curl_easy_getinfo(w->h, CURLINFO_RESPONSE_CODE, &status);
	if (w->failed)
		snprintf(err, errlen, "%s", w->err);
	else if (rc != CURLE_OK)
		snprintf(err, errlen, "watch stream: %s", curl_easy_strerror(rc));
	else
		snprintf(err, errlen, "watch stream ended (HTTP %ld)", status);
	w->failed = true;
	snprintf(w->err, sizeof(w->err), "%s", err);
}

bool kvl_etcd_watch_failed(const struct kvl_etcd_watch *w, char *err, size_t errlen)
{
	if (w->failed && err)
		snprintf(err, errlen, "%s", w->err);
	return w->failed;
}

void kvl_etcd_watch_free(CURLM *m, struct kvl_etcd_watch *w)
{
	if (w == NULL)
		return;
	if (m)
		curl_multi_remove_handle(m, w->h);
	curl_easy_cleanup(w->h);
	curl_slist_free_all(w->hdrs);
	free(w->body);
	free(w->line.p);
	free(w);
}
