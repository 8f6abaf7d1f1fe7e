/* SPDX-License-Identifier: BSD-3-Clause */
/* A node's cluster record to JSON and back, checked field by field on the way in. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "cluster_rec.h"
#include "config.h"

int kvl_cluster_role_parse(const char *s)
{
	for (int r = KVL_CLUSTER_PREFILL; r <= KVL_CLUSTER_TIER; r++)
		if (s && strcmp(s, kvl_cluster_role_name(r)) == 0)
			return r;
	return -1;
}

int kvl_cluster_rec_encode(const struct kvl_cluster_rec *r, char *out, size_t cap)
{
	json_t *o = json_object(), *nics = json_array(), *gpus = json_array(), *segs = json_array();
	char *s = NULL;
	size_t n;
	int rc = -ENOMEM;

	if (o == NULL || nics == NULL || gpus == NULL || segs == NULL)
		goto out;
	for (uint32_t i = 0; i < r->n_nics; i++) {
		const struct kvl_cluster_rec_nic *x = &r->nic[i];

		json_array_append_new(nics,
				      json_pack("{s:s, s:s, s:s, s:s, s:s, s:i, s:i, s:i}", "label",
						x->label, "device", x->device, "transport",
						x->transport, "link_layer", x->link_layer, "gid",
						x->gid, "lid", (int)x->lid, "rate_mbps",
						(int)x->rate_mbps, "numa_node", (int)x->numa_node));
	}
	for (uint32_t i = 0; i < r->n_gpus; i++)
		json_array_append_new(gpus, json_pack("{s:i, s:s}", "index", (int)r->gpu[i].index,
						      "pci", r->gpu[i].pci));
	for (uint32_t i = 0; i < r->n_segs; i++) {
		const struct kvl_cluster_rec_seg *x = &r->seg[i];

		json_array_append_new(segs, json_pack("{s:i, s:s, s:i, s:i, s:i, s:i, s:I, s:s}",
						      "id", (int)x->id, "name", x->name, "layers",
						      (int)x->layers, "planes", (int)x->planes,
						      "blocks", (int)x->blocks, "block_bytes",
						      (int)x->block_bytes, "length",
						      (json_int_t)x->length, "access", x->access));
	}
	json_object_set_new(o, "v", json_integer(r->version));
	json_object_set_new(o, "proto", json_integer(r->proto));
	json_object_set_new(o, "name", json_string(r->name));
	json_object_set_new(o, "peer_name", json_string(r->peer_name));
	json_object_set_new(o, "role", json_string(kvl_cluster_role_name(r->role)));
	json_object_set_new(o, "control", json_string(r->control));
	json_object_set_new(o, "host", json_string(r->host));
	json_object_set(o, "nics", nics);
	json_object_set(o, "gpus", gpus);
	json_object_set(o, "segments", segs);
	s = json_dumps(o, JSON_COMPACT | JSON_SORT_KEYS);
	if (s == NULL)
		goto out;
	n = strlen(s);
	if (n >= cap || n > KVL_CLUSTER_RECORD_MAX) {
		rc = -EMSGSIZE;
		goto out;
	}
	memcpy(out, s, n + 1);
	rc = (int)n;
out:
	free(s);
	json_decref(o);
	json_decref(nics);
	json_decref(gpus);
	json_decref(segs);
	return rc;
}

/* A string field of at most @cap - 1 bytes; @need: it must be there and not empty. */
static int get_str(const json_t *o, const char *key, char *dst, size_t cap, int need, char *why,
		   size_t whylen)
{
	const json_t *v = json_object_get(o, key);

	if (v == NULL && !need) {
		dst[0] = '\0';
		return 0;
	}
	if (!json_is_string(v) || json_string_length(v) >= cap ||
	    (need && json_string_length(v) == 0) ||
	    strlen(json_string_value(v)) != json_string_length(v)) {
		snprintf(why, whylen, "%s: expected a string of 1..%zu bytes", key, cap - 1);
		return -EINVAL;
	}
	memcpy(dst, json_string_value(v), json_string_length(v) + 1);
	return 0;
}

static int get_uint(const json_t *o, const char *key, int64_t max, int64_t *out, char *why,
		    size_t whylen)
{
	const json_t *v = json_object_get(o, key);

	if (v == NULL) {
		*out = 0;
		return 0;
	}
	if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > max) {
		snprintf(why, whylen, "%s: expected an integer in 0..%lld", key, (long long)max);
		return -EINVAL;
	}
	*out = json_integer_value(v);
	return 0;
}

/* An optional array of at most @max objects. */
static int get_array(const json_t *o, const char *key, unsigned max, const json_t **out, char *why,
		     size_t whylen)
{
	const json_t *a = json_object_get(o, key);

	*out = a;
	if (a == NULL)
		return 0;
	if (!json_is_array(a) || json_array_size(a) > max) {
		snprintf(why, whylen, "%s: expected an array of at most %u entries", key, max);
		return -EINVAL;
	}
	for (size_t i = 0; i < json_array_size(a); i++)
		if (!json_is_object(json_array_get(a, i))) {
			snprintf(why, whylen, "%s[%zu]: expected an object", key, i);
			return -EINVAL;
		}
	return 0;
}

#define TRY(x)                          \
	do {                            \
		int rc_ = (x);          \
		if (rc_ < 0) {          \
			json_decref(o); \
			return rc_;     \
		}                       \
	} while (0)

int kvl_cluster_rec_decode(const char *s, size_t len, struct kvl_cluster_rec *r, char *why,
			   size_t whylen)
{
	json_error_t je;
	json_t *o;
	const json_t *a;
	char role[16];
	int64_t v;

	memset(r, 0, sizeof(*r));
	if (len > KVL_CLUSTER_RECORD_MAX) {
		snprintf(why, whylen, "%zu bytes, over the %u-byte limit of a record", len,
			 KVL_CLUSTER_RECORD_MAX);
		return -EMSGSIZE;
	}
	o = json_loadb(s, len, JSON_REJECT_DUPLICATES, &je);
	if (o == NULL || !json_is_object(o)) {
		snprintf(why, whylen, "not a JSON object (%s)", o ? "another JSON value" : je.text);
		json_decref(o);
		return -EINVAL;
	}
	TRY(get_uint(o, "v", 1000, &v, why, whylen));
	if (v != KVL_CLUSTER_REC_VERSION) {
		snprintf(why, whylen, "v: record version %lld, this kvlane reads %d", (long long)v,
			 KVL_CLUSTER_REC_VERSION);
		json_decref(o);
		return -EINVAL;
	}
	r->version = (uint32_t)v;
	TRY(get_uint(o, "proto", 65535, &v, why, whylen));
	r->proto = (uint32_t)v;
	TRY(get_str(o, "name", r->name, sizeof(r->name), 1, why, whylen));
	TRY(get_str(o, "peer_name", r->peer_name, sizeof(r->peer_name), 0, why, whylen));
	TRY(get_str(o, "role", role, sizeof(role), 1, why, whylen));
	r->role = kvl_cluster_role_parse(role);
	if (r->role < 0) {
		snprintf(why, whylen, "role: expected prefill, decode or tier; got \"%s\"", role);
		json_decref(o);
		return -EINVAL;
	}
	TRY(get_str(o, "control", r->control, sizeof(r->control), 1, why, whylen));
	if (strrchr(r->control, ':') == NULL) {
		snprintf(why, whylen, "control: expected host:port; got \"%s\"", r->control);
		json_decref(o);
		return -EINVAL;
	}
	TRY(get_str(o, "host", r->host, sizeof(r->host), 0, why, whylen));
	TRY(get_array(o, "nics", KVL_CLUSTER_REC_NICS, &a, why, whylen));
	for (size_t i = 0; i < json_array_size(a); i++) {
		const json_t *x = json_array_get(a, i);
		struct kvl_cluster_rec_nic *n = &r->nic[r->n_nics++];

		TRY(get_str(x, "label", n->label, sizeof(n->label), 0, why, whylen));
		TRY(get_str(x, "device", n->device, sizeof(n->device), 0, why, whylen));
		TRY(get_str(x, "transport", n->transport, sizeof(n->transport), 0, why, whylen));
		TRY(get_str(x, "link_layer", n->link_layer, sizeof(n->link_layer), 0, why, whylen));
		TRY(get_str(x, "gid", n->gid, sizeof(n->gid), 0, why, whylen));
		TRY(get_uint(x, "lid", 65535, &v, why, whylen));
		n->lid = (uint32_t)v;
		TRY(get_uint(x, "rate_mbps", UINT32_MAX, &v, why, whylen));
		n->rate_mbps = (uint32_t)v;
		n->numa_node = -1;
		if (json_is_integer(json_object_get(x, "numa_node")))
			n->numa_node = (int32_t)json_integer_value(json_object_get(x, "numa_node"));
	}
	TRY(get_array(o, "gpus", KVL_CLUSTER_REC_GPUS, &a, why, whylen));
	for (size_t i = 0; i < json_array_size(a); i++) {
		const json_t *x = json_array_get(a, i);
		struct kvl_cluster_rec_gpu *g = &r->gpu[r->n_gpus++];

		TRY(get_uint(x, "index", 1023, &v, why, whylen));
		g->index = (int32_t)v;
		TRY(get_str(x, "pci", g->pci, sizeof(g->pci), 0, why, whylen));
	}
	TRY(get_array(o, "segments", KVL_CLUSTER_REC_SEGS, &a, why, whylen));
	for (size_t i = 0; i < json_array_size(a); i++) {
		const json_t *x = json_array_get(a, i);
		struct kvl_cluster_rec_seg *g = &r->seg[r->n_segs++];

		TRY(get_uint(x, "id", UINT32_MAX, &v, why, whylen));
		g->id = (uint32_t)v;
		TRY(get_str(x, "name", g->name, sizeof(g->name), 0, why, whylen));
		TRY(get_uint(x, "layers", UINT32_MAX, &v, why, whylen));
		g->layers = (uint32_t)v;
		TRY(get_uint(x, "planes", UINT32_MAX, &v, why, whylen));
		g->planes = (uint32_t)v;
		TRY(get_uint(x, "blocks", UINT32_MAX, &v, why, whylen));
		g->blocks = (uint32_t)v;
		TRY(get_uint(x, "block_bytes", UINT32_MAX, &v, why, whylen));
		g->block_bytes = (uint32_t)v;
		TRY(get_uint(x, "length", INT64_MAX, &v, why, whylen));
		g->length = (uint64_t)v;
		TRY(get_str(x, "access", g->access, sizeof(g->access), 0, why, whylen));
	}
	json_decref(o);
	return 0;
}
