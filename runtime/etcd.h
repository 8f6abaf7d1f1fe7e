/* SPDX-License-Identifier: BSD-3-Clause */
/* A small etcd v3 client over etcd's JSON gateway: libcurl for HTTP, jansson for JSON. */
#ifndef KVL_RUNTIME_ETCD_H
#define KVL_RUNTIME_ETCD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <curl/curl.h>

/*
 * No EAL and no runtime state here: kvlaned's cluster thread (runtime/cluster.c) and the
 * load tool (tools/kvlane_cluster_sim.c) speak to etcd through this same code. One client
 * belongs to one thread. Every call is bounded by the client's timeout_ms (per endpoint
 * tried) and returns 0 or a negative errno with the reason in kvl_etcd_error():
 * -EHOSTUNREACH (no endpoint answered), -ETIMEDOUT, -EPROTO (an answer that is not etcd's),
 * -EACCES (authentication), -EEXIST (kvl_etcd_create: the key is held), -EMSGSIZE.
 */

#define KVL_ETCD_ERR_LEN 256

struct kvl_etcd_opts {
	const char *endpoints; /* "http://h:p,https://h:p": tried in order, failing over */
	const char *ca_file, *cert_file, *key_file; /* NULL or "": none */
	const char *user, *password;		    /* NULL or "": no authentication */
	unsigned timeout_ms;
};

struct kvl_etcd;

/* A client (nothing is sent yet); NULL with errno and @err on bad options. */
struct kvl_etcd *kvl_etcd_new(const struct kvl_etcd_opts *o, char *err, size_t errlen);
void kvl_etcd_free(struct kvl_etcd *e);
const char *kvl_etcd_error(const struct kvl_etcd *e);
/* The endpoint the next call goes to, and the gateway's path prefix ("/v3", "/v3beta"). */
const char *kvl_etcd_endpoint(const struct kvl_etcd *e);
const char *kvl_etcd_api(const struct kvl_etcd *e);
/* The server's version string ("3.4.23") once kvl_etcd_connect() succeeded. */
const char *kvl_etcd_version(const struct kvl_etcd *e);

/* Ask /version which gateway prefix the server serves and authenticate when a user is set. */
int kvl_etcd_connect(struct kvl_etcd *e);

int kvl_etcd_grant(struct kvl_etcd *e, int64_t ttl_s, int64_t *lease);
/* *@ttl 0: the lease is gone (expired or revoked). */
int kvl_etcd_keepalive(struct kvl_etcd *e, int64_t lease, int64_t *ttl);
int kvl_etcd_revoke(struct kvl_etcd *e, int64_t lease);

/* Put @key only if it does not exist (a transaction on its create revision). -EEXIST when it
 * does, with its value copied to @held (NUL-terminated, cut at @heldlen). */
int kvl_etcd_create(struct kvl_etcd *e, const char *key, const void *val, size_t vlen,
		    int64_t lease, char *held, size_t heldlen);
int kvl_etcd_put(struct kvl_etcd *e, const char *key, const void *val, size_t vlen, int64_t lease);
int kvl_etcd_delete(struct kvl_etcd *e, const char *key);

/* One key-value as etcd returns it (decoded from base64; @val is NUL-terminated too). */
struct kvl_etcd_kv {
	const char *key;
	size_t klen;
	const char *val;
	size_t vlen;
	int64_t lease;
	int64_t mod_rev;
};

typedef void (*kvl_etcd_kv_fn)(void *arg, const struct kvl_etcd_kv *kv);

/* Every key under @prefix (keys that start with it), then *@rev = the store's revision. */
int kvl_etcd_range_prefix(struct kvl_etcd *e, const char *prefix, kvl_etcd_kv_fn fn, void *arg,
			  int64_t *rev);

/* ---- watch: a streaming request, driven by the caller's curl multi handle ---- */

enum kvl_etcd_ev { KVL_ETCD_PUT = 0, KVL_ETCD_DELETE = 1 };

typedef void (*kvl_etcd_ev_fn)(void *arg, int type, const struct kvl_etcd_kv *kv);

struct kvl_etcd_watch;

/* A watch of every key under @prefix from revision @from_rev on (0: from now), to be added
 * to a CURLM with curl_multi_add_handle(m, kvl_etcd_watch_easy(w)). Events are delivered to
 * @fn from inside curl_multi_perform(). NULL with errno on failure. */
struct kvl_etcd_watch *kvl_etcd_watch_new(struct kvl_etcd *e, const char *prefix, int64_t from_rev,
					  kvl_etcd_ev_fn fn, void *arg);
CURL *kvl_etcd_watch_easy(struct kvl_etcd_watch *w);
/* The server confirmed the watch (its "created" answer came). */
bool kvl_etcd_watch_created(const struct kvl_etcd_watch *w);
/* Events delivered so far, and the revision of the last one. */
uint64_t kvl_etcd_watch_events(const struct kvl_etcd_watch *w);
int64_t kvl_etcd_watch_rev(const struct kvl_etcd_watch *w);
/* Set the result once curl_multi_info_read() says the transfer ended: the stream is over
 * (etcd gone, canceled, compacted); the reason is in @err. */
void kvl_etcd_watch_ended(struct kvl_etcd_watch *w, CURLcode rc, char *err, size_t errlen);
/* A failure the stream itself reported (an "error" object, cancel, compaction), else false. */
bool kvl_etcd_watch_failed(const struct kvl_etcd_watch *w, char *err, size_t errlen);
/* Remove it from @m (when not NULL) and free it. */
void kvl_etcd_watch_free(CURLM *m, struct kvl_etcd_watch *w);

#endif /* KVL_RUNTIME_ETCD_H */
