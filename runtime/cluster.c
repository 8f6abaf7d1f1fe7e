/* SPDX-License-Identifier: BSD-3-Clause */
/* [cluster]: registration under a lease, keepalive, list + watch, kvl_connect_name, telemetry. */
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <rte_lcore.h>
#include <rte_telemetry.h>

#include "cluster.h"
#include "control/control.h"
#include "kvl_build_config.h"
#include "kvl_clock.h"
#include "runtime.h"

#if KVL_HAVE_CLUSTER

#include "cluster_rec.h"
#include "etcd.h"
#include "verbs.h"

_Static_assert((int)KVL_NODE_PREFILL == (int)KVL_CLUSTER_PREFILL &&
		       (int)KVL_NODE_DECODE == (int)KVL_CLUSTER_DECODE &&
		       (int)KVL_NODE_TIER == (int)KVL_CLUSTER_TIER,
	       "the public roles are the INI's");

#define MAX_NODES      4096
#define BACKOFF_MIN_NS 100000000ull  /* 100 ms */
#define BACKOFF_MAX_NS 5000000000ull /* 5 s */
#define TAKEN_RETRY_NS 1000000000ull /* a held name is tried again each second */
#define WARN_EVERY     100	     /* skipped records: the first 5, then one in 100 */

enum cl_state { CL_CONNECTING = 0, CL_REGISTERED, CL_NAME_TAKEN, CL_UNREACHABLE, CL_REFUSED };
static const char *const state_names[] = { "connecting", "registered", "name-taken", "unreachable",
					   "auth-failed" };

/* What the view keeps of a node (the full record stays in etcd). */
struct node {
	char name[64];
	char peer_name[64];
	char control[80];
	int32_t role;
	uint32_t proto, n_nics, n_gpus, n_segs;
	int64_t lease;
	int64_t mod_rev;
	bool has_peer; /* kvl_connect_name() reached this incarnation as @peer */
	uint32_t peer;
};

struct kvl_cluster {
	struct kvl_runtime *rt;
	const struct kvl_cluster_conf *cf;
	char name[64];
	char nodes_prefix[KVL_PATH_LEN + 8]; /* <prefix>/nodes/ */
	char key[KVL_PATH_LEN + 80];	     /* <prefix>/nodes/<name> */
	char rec[KVL_CLUSTER_RECORD_MAX + 1];
	size_t rec_len;
	char held[KVL_CLUSTER_RECORD_MAX + 1]; /* the record holding our name, when one does */
	uint32_t segs_version;		       /* of the record published */
	struct kvl_etcd *etcd;
	CURLM *multi;
	struct kvl_etcd_watch *watch;
	pthread_t thread;
	volatile bool stop;

	/* the thread's own */
	bool connected, listed, registered;
	int64_t lease;
	uint64_t next_ka_ns;

	/* read by the API and telemetry under @lock */
	pthread_mutex_t lock;
	struct node *nodes; /* [MAX_NODES] */
	unsigned n_nodes;
	int state;
	bool etcd_ok;
	uint64_t down_since_ns, up_since_ns;
	char last_err[KVL_ETCD_ERR_LEN];
	char held_by[96];
	char endpoint[KVL_CLUSTER_URL_LEN];
	char api[16], version[32];
	int64_t lease_pub, revision;
	uint64_t keepalives, keepalive_failures, registrations, incarnations, watch_events,
		watch_restarts, relists, departures, peers_failed, skipped_malformed,
		skipped_oversize, skipped_full, skipped_bad_key;
};

static struct kvl_cluster *the_cl; /* one runtime per process (EAL starts once) */

static struct kvl_cluster *cl_get(void)
{
	return __atomic_load_n(&the_cl, __ATOMIC_ACQUIRE);
}

static void warn_skip(struct kvl_cluster *c, uint64_t n, const char *key, const char *why)
{
	if (n <= 5 || n % WARN_EVERY == 0)
		KVL_LOG(WARNING, "cluster: skipped %s: %s (%llu skipped so far)", key, why,
			(unsigned long long)n);
	(void)c;
}

/* ---- the record ---- */

static void read_sysfs_line(const char *path, char *out, size_t len)
{
	FILE *f = fopen(path, "r");

	out[0] = '\0';
	if (f == NULL)
		return;
	if (fgets(out, (int)len, f) == NULL)
		out[0] = '\0';
	out[strcspn(out, "\n")] = '\0';
	fclose(f);
}

static int build_record(struct kvl_cluster *c, char *err, size_t errlen)
{
	struct kvl_runtime *rt = c->rt;
	struct kvl_cluster_rec *r = calloc(1, sizeof(*r));
	const char *ctl = c->cf->advertise[0] ? c->cf->advertise : kvl_control_listen_addr(rt);
	int n;

	if (r == NULL)
		return -ENOMEM;
	r->version = KVL_CLUSTER_REC_VERSION;
	r->proto = KVL_CTRL_VERSION;
	snprintf(r->name, sizeof(r->name), "%s", c->name);
	snprintf(r->peer_name, sizeof(r->peer_name), "%s", rt->cfg.runtime.name);
	r->role = c->cf->role;
	if (strncmp(ctl, "0.0.0.0:", 8) == 0 || strncmp(ctl, "[::]:", 5) == 0) {
		snprintf(err, errlen,
			 "cluster: control.listen is bound to %s, which no peer can reach: set "
			 "cluster.advertise to this node's host:port",
			 ctl);
		free(r);
		return -EINVAL;
	}
	snprintf(r->control, sizeof(r->control), "%s", ctl);
	if (gethostname(r->host, sizeof(r->host) - 1) != 0)
		r->host[0] = '\0';
	for (unsigned i = 0; i < rt->cfg.n_nics && r->n_nics < KVL_CLUSTER_REC_NICS; i++) {
		const struct kvl_nic_info *ni = &rt->nic[i].info;
		struct kvl_cluster_rec_nic *x = &r->nic[r->n_nics++];

		snprintf(x->label, sizeof(x->label), "%s", rt->cfg.nics[i].label);
		snprintf(x->device, sizeof(x->device), "%s", rt->cfg.nics[i].device);
		snprintf(x->transport, sizeof(x->transport), "%s",
			 kvl_transport_name(ni->transport));
		snprintf(x->link_layer, sizeof(x->link_layer), "%s", ni->link_layer);
		x->rate_mbps = ni->rate_mbps;
		x->numa_node = ni->numa_node;
		if (rt->nic[i].vdev) {
			/* The GID and LID the QPs use: public addressing, as a subnet manager
			 * shows it; the rkeys stay on the control path. */
			char path[KVL_PATH_LEN + 128], v[64];
			int gidx = -1, gtype = 0;
			unsigned mtu = 0;
			bool mod = false;

			kvl_verbs_dev_info(rt->nic[i].vdev, &gidx, &gtype, &mtu, &mod);
			snprintf(path, sizeof(path), "%s/class/infiniband/%s/ports/%u/gids/%d",
				 rt->sysfs_root, x->device, rt->cfg.nics[i].port, gidx);
			read_sysfs_line(path, x->gid, sizeof(x->gid));
			snprintf(path, sizeof(path), "%s/class/infiniband/%s/ports/%u/lid",
				 rt->sysfs_root, x->device, rt->cfg.nics[i].port);
			read_sysfs_line(path, v, sizeof(v));
			x->lid = (uint32_t)strtoul(v, NULL, 0);
		}
	}
	if (rt->gpu.open) {
		r->gpu[0].index = rt->gpu.device_id;
		snprintf(r->gpu[0].pci, sizeof(r->gpu[0].pci), "%s", rt->gpu.pci_bus_id);
		r->n_gpus = 1;
	}
	pthread_mutex_lock(&rt->segs.lock);
	c->segs_version = __atomic_load_n(&rt->segs.version, __ATOMIC_ACQUIRE);
	for (unsigned i = 0; i < KVL_MAX_SEGS && r->n_segs < KVL_CLUSTER_REC_SEGS; i++) {
		const struct kvl_local_seg *s = &rt->segs.meta[i];
		struct kvl_cluster_rec_seg *x;
		uint32_t f = s->desc.flags & (KVL_SEG_REMOTE_READ | KVL_SEG_REMOTE_WRITE);

		if (!s->live || f == 0)
			continue; /* not offered to peers */
		x = &r->seg[r->n_segs++];
		x->id = s->desc.id;
		snprintf(x->name, sizeof(x->name), "%s", s->desc.name);
		x->layers = s->desc.n_layers;
		x->planes = s->desc.n_planes;
		x->blocks = s->desc.block_count;
		x->block_bytes = s->desc.block_size;
		x->length = s->desc.length;
		snprintf(x->access, sizeof(x->access), "%s",
			 f == (KVL_SEG_REMOTE_READ | KVL_SEG_REMOTE_WRITE) ? "readwrite"
			 : f == KVL_SEG_REMOTE_READ			   ? "read"
									   : "write");
	}
	pthread_mutex_unlock(&rt->segs.lock);
	n = kvl_cluster_rec_encode(r, c->rec, sizeof(c->rec));
	free(r);
	if (n < 0) {
		snprintf(err, errlen, "cluster: this node's record does not fit %u bytes",
			 KVL_CLUSTER_RECORD_MAX);
		return n;
	}
	c->rec_len = (size_t)n;
	return 0;
}

/* ---- the view ---- */

static struct node *find(struct kvl_cluster *c, const char *name)
{
	for (unsigned i = 0; i < c->n_nodes; i++)
		if (strcmp(c->nodes[i].name, name) == 0)
			return &c->nodes[i];
	return NULL;
}

/* @n left the cluster: its peers here fail now, as a heartbeat timeout would fail them. */
static void departed(struct kvl_cluster *c, const struct node *n, const char *how)
{
	char why[KVL_CTRL_TEXT_LEN];

	c->departures++;
	if (strcmp(n->name, c->name) == 0)
		return; /* our own key: the thread publishes it again */
	snprintf(why, sizeof(why), "etcd: node \"%.40s\" left the cluster (%s)", n->name, how);
	KVL_LOG(INFO, "cluster: %s (%s, lease %llx)", why + 6, n->control,
		(unsigned long long)n->lease);
	if (kvl_control_peer_gone(c->rt, n->control, n->peer_name, why) == 0)
		c->peers_failed++;
}

/* Parse a key-value of the prefix into @out; false (counted, logged) when it is skipped. */
static bool node_of(struct kvl_cluster *c, const struct kvl_etcd_kv *kv, struct node *out)
{
	struct kvl_cluster_rec *r;
	char why[160];
	const char *name = kv->key + strlen(c->nodes_prefix);
	int rc;

	if (kv->klen <= strlen(c->nodes_prefix) || strlen(kv->key) != kv->klen ||
	    strncmp(kv->key, c->nodes_prefix, strlen(c->nodes_prefix)) != 0 ||
	    strchr(name, '/') != NULL || strlen(name) >= sizeof(out->name)) {
		warn_skip(c, ++c->skipped_bad_key, kv->key,
			  "not a node key (<prefix>/nodes/<name>)");
		return false;
	}
	r = malloc(sizeof(*r));
	if (r == NULL)
		return false;
	rc = kvl_cluster_rec_decode(kv->val, kv->vlen, r, why, sizeof(why));
	if (rc == 0 && strcmp(r->name, name) != 0) {
		snprintf(why, sizeof(why), "name: \"%s\" under the key of \"%s\"", r->name, name);
		rc = -EINVAL;
	}
	if (rc < 0) {
		warn_skip(c, rc == -EMSGSIZE ? ++c->skipped_oversize : ++c->skipped_malformed,
			  kv->key, why);
		free(r);
		return false;
	}
	memset(out, 0, sizeof(*out));
	snprintf(out->name, sizeof(out->name), "%s", r->name);
	snprintf(out->peer_name, sizeof(out->peer_name), "%s", r->peer_name);
	snprintf(out->control, sizeof(out->control), "%s", r->control);
	out->role = r->role;
	out->proto = r->proto;
	out->n_nics = r->n_nics;
	out->n_gpus = r->n_gpus;
	out->n_segs = r->n_segs;
	out->lease = kv->lease;
	out->mod_rev = kv->mod_rev;
	free(r);
	return true;
}

/* A PUT seen by the watch (or the list): add, update, or replace an older incarnation. */
static void node_put(struct kvl_cluster *c, const struct node *n)
{
	struct node *o = find(c, n->name);

	if (o && o->lease == n->lease) {
		bool has = o->has_peer;
		uint32_t p = o->peer;

		*o = *n;
		o->has_peer = has;
		o->peer = p;
		return;
	}
	if (o) {
		/* A new lease is a new process: nothing of the old one is reused. */
		departed(c, o, "replaced by a new incarnation");
		*o = *n;
		return;
	}
	if (c->n_nodes == MAX_NODES) {
		warn_skip(c, ++c->skipped_full, n->name, "the view is full");
		return;
	}
	c->nodes[c->n_nodes++] = *n;
}

static void node_del(struct kvl_cluster *c, const char *name, const char *how)
{
	struct node *o = find(c, name);

	if (o == NULL)
		return;
	departed(c, o, how);
	*o = c->nodes[--c->n_nodes];
}

static void on_event(void *arg, int type, const struct kvl_etcd_kv *kv)
{
	struct kvl_cluster *c = arg;
	struct node n;

	pthread_mutex_lock(&c->lock);
	c->watch_events++;
	if (type == KVL_ETCD_DELETE) {
		const char *name = kv->key + strlen(c->nodes_prefix);

		if (strncmp(kv->key, c->nodes_prefix, strlen(c->nodes_prefix)) == 0) {
			node_del(c, name, "its key was deleted or its lease expired");
			if (strcmp(name, c->name) == 0 && c->registered && !c->stop) {
				KVL_LOG(WARNING,
					"cluster: our key %s was deleted by someone; "
					"publishing it again",
					c->key);
				c->registered = false;
			}
		}
	} else if (node_of(c, kv, &n)) {
		node_put(c, &n);
	}
	pthread_mutex_unlock(&c->lock);
}

struct relist {
	struct kvl_cluster *c;
	struct node *nodes;
	unsigned n;
};

static void on_listed(void *arg, const struct kvl_etcd_kv *kv)
{
	struct relist *l = arg;

	if (l->n < MAX_NODES && node_of(l->c, kv, &l->nodes[l->n]))
		l->n++;
}

/* The whole prefix again (at start and after any gap in the watch), then a watch from the
 * revision listed: departures missed meanwhile are found as names that disappeared. */
static int relist(struct kvl_cluster *c)
{
	struct relist l = { .c = c, .nodes = calloc(MAX_NODES, sizeof(struct node)) };
	int64_t rev = 0;
	int rc;

	if (l.nodes == NULL)
		return -ENOMEM;
	rc = kvl_etcd_range_prefix(c->etcd, c->nodes_prefix, on_listed, &l, &rev);
	if (rc < 0) {
		free(l.nodes);
		return rc;
	}
	pthread_mutex_lock(&c->lock);
	for (unsigned i = 0; i < c->n_nodes;) {
		bool kept = false;

		for (unsigned j = 0; j < l.n && !kept; j++)
			kept = strcmp(l.nodes[j].name, c->nodes[i].name) == 0 &&
			       l.nodes[j].lease == c->nodes[i].lease;
		if (!kept)
			node_del(c, c->nodes[i].name, "gone when the prefix was listed again");
		else
			i++;
	}
	for (unsigned j = 0; j < l.n; j++)
		node_put(c, &l.nodes[j]);
	c->revision = rev;
	c->relists++;
	if (c->registered && find(c, c->name) == NULL) {
		/* our key went while we were not watching (deleted by someone): publish again */
		KVL_LOG(WARNING, "cluster: our key %s is gone from etcd; publishing it again",
			c->key);
		c->registered = false;
	}
	pthread_mutex_unlock(&c->lock);
	free(l.nodes);
	if (c->watch) {
		kvl_etcd_watch_free(c->multi, c->watch);
		c->watch = NULL;
	}
	c->watch = kvl_etcd_watch_new(c->etcd, c->nodes_prefix, rev + 1, on_event, c);
	if (c->watch == NULL)
		return -ENOMEM;
	curl_multi_add_handle(c->multi, kvl_etcd_watch_easy(c->watch));
	c->listed = true;
	return 0;
}

/* ---- the thread ---- */

static void set_state(struct kvl_cluster *c, int st)
{
	if (c->state == st)
		return;
	c->state = st;
}

/* An etcd call failed: log once per change, forget the connection, keep the view. */
static void went_down(struct kvl_cluster *c, int rc)
{
	int st = rc == -EACCES ? CL_REFUSED : CL_UNREACHABLE;

	pthread_mutex_lock(&c->lock);
	snprintf(c->last_err, sizeof(c->last_err), "%s", kvl_etcd_error(c->etcd));
	if (c->etcd_ok || c->state != st) {
		if (st == CL_REFUSED)
			KVL_LOG(ERR,
				"cluster: etcd refused this node's credentials (%s): check "
				"cluster.user and cluster.password_file; retrying with backoff",
				c->last_err);
		else
			KVL_LOG(WARNING,
				"cluster: etcd unreachable (%s): serving the %u peers known, "
				"retrying with backoff",
				c->last_err, c->n_nodes);
		if (c->etcd_ok || c->state == CL_CONNECTING)
			c->down_since_ns = kvl_now_ns();
	}
	c->etcd_ok = false;
	set_state(c, st);
	pthread_mutex_unlock(&c->lock);
	c->connected = false;
	c->listed = false;
	if (c->watch) {
		kvl_etcd_watch_free(c->multi, c->watch);
		c->watch = NULL;
	}
}

static void came_up(struct kvl_cluster *c)
{
	pthread_mutex_lock(&c->lock);
	snprintf(c->endpoint, sizeof(c->endpoint), "%s", kvl_etcd_endpoint(c->etcd));
	snprintf(c->api, sizeof(c->api), "%s", kvl_etcd_api(c->etcd));
	snprintf(c->version, sizeof(c->version), "%s", kvl_etcd_version(c->etcd));
	if (!c->etcd_ok) {
		KVL_LOG(INFO, "cluster: etcd %s at %s (gateway %s): %u nodes in view", c->version,
			c->endpoint, c->api, c->n_nodes);
		c->up_since_ns = kvl_now_ns();
	}
	c->etcd_ok = true;
	pthread_mutex_unlock(&c->lock);
}

/* Whatever is due, in order. <0: etcd failed (back off); >0: wait @*retry_ns. */
static int step(struct kvl_cluster *c, uint64_t now, uint64_t *retry_ns)
{
	int64_t ttl = 0;
	int rc;

	if (!c->connected) {
		rc = kvl_etcd_connect(c->etcd);
		if (rc < 0)
			return rc;
		c->connected = true;
	}
	if (!c->listed) {
		rc = relist(c);
		if (rc < 0)
			return rc;
	}
	came_up(c);
	if (c->lease == 0) {
		rc = kvl_etcd_grant(c->etcd, c->cf->lease_ttl_s, &c->lease);
		if (rc < 0)
			return rc;
		c->registered = false;
		c->next_ka_ns = now + (uint64_t)c->cf->lease_ttl_s * 1000000000ull / 3;
		pthread_mutex_lock(&c->lock);
		c->incarnations++;
		c->lease_pub = c->lease;
		pthread_mutex_unlock(&c->lock);
	}
	if (!c->registered) {
		rc = kvl_etcd_create(c->etcd, c->key, c->rec, c->rec_len, c->lease, c->held,
				     sizeof(c->held));
		if (rc == -EEXIST) {
			struct kvl_cluster_rec *r = malloc(sizeof(*r));
			char why[128];

			pthread_mutex_lock(&c->lock);
			if (c->state != CL_NAME_TAKEN) {
				snprintf(c->held_by, sizeof(c->held_by), "another node");
				if (r && kvl_cluster_rec_decode(c->held, strlen(c->held), r, why,
								sizeof(why)) == 0)
					snprintf(c->held_by, sizeof(c->held_by), "%s", r->control);
				KVL_LOG(ERR,
					"cluster: cluster.name = %s is registered already, by %s "
					"(%s): "
					"not published; trying again each second until that key "
					"goes",
					c->name, c->held_by, c->key);
			}
			set_state(c, CL_NAME_TAKEN);
			pthread_mutex_unlock(&c->lock);
			free(r);
			*retry_ns = TAKEN_RETRY_NS;
			return 1;
		}
		if (rc < 0)
			return rc;
		c->registered = true;
		pthread_mutex_lock(&c->lock);
		c->registrations++;
		c->held_by[0] = '\0';
		set_state(c, CL_REGISTERED);
		pthread_mutex_unlock(&c->lock);
		KVL_LOG(INFO, "cluster: registered as %s under lease %llx (ttl %u s)", c->key,
			(unsigned long long)c->lease, c->cf->lease_ttl_s);
	}
	if (now >= c->next_ka_ns) {
		rc = kvl_etcd_keepalive(c->etcd, c->lease, &ttl);
		if (rc < 0) {
			__atomic_fetch_add(&c->keepalive_failures, 1, __ATOMIC_RELAXED);
			return rc;
		}
		if (ttl <= 0) {
			KVL_LOG(WARNING,
				"cluster: lease %llx expired (etcd was out of reach longer than "
				"lease_ttl_s = %u): registering again as a new incarnation",
				(unsigned long long)c->lease, c->cf->lease_ttl_s);
			c->lease = 0;
			c->registered = false;
			*retry_ns = 0;
			return 1;
		}
		__atomic_fetch_add(&c->keepalives, 1, __ATOMIC_RELAXED);
		c->next_ka_ns = now + (uint64_t)ttl * 1000000000ull / 3;
	}
	if (c->registered &&
	    __atomic_load_n(&c->rt->segs.version, __ATOMIC_ACQUIRE) != c->segs_version) {
		char err[160];

		/* Segments came or went: the record says what is offered now. */
		if (build_record(c, err, sizeof(err)) == 0) {
			rc = kvl_etcd_put(c->etcd, c->key, c->rec, c->rec_len, c->lease);
			if (rc < 0)
				return rc;
		}
	}
	return 0;
}

static void drive_watch(struct kvl_cluster *c, int wait_ms)
{
	int running = 0, left = 0;
	CURLMsg *m;

	curl_multi_poll(c->multi, NULL, 0, wait_ms, NULL);
	curl_multi_perform(c->multi, &running);
	while ((m = curl_multi_info_read(c->multi, &left)) != NULL) {
		char err[KVL_ETCD_ERR_LEN];

		if (m->msg != CURLMSG_DONE || c->watch == NULL ||
		    m->easy_handle != kvl_etcd_watch_easy(c->watch))
			continue;
		kvl_etcd_watch_ended(c->watch, m->data.result, err, sizeof(err));
		KVL_LOG(WARNING, "cluster: %s; listing the prefix again", err);
		kvl_etcd_watch_free(c->multi, c->watch);
		c->watch = NULL;
		c->listed = false;
		pthread_mutex_lock(&c->lock);
		c->watch_restarts++;
		pthread_mutex_unlock(&c->lock);
		break;
	}
	if (c->watch && kvl_etcd_watch_failed(c->watch, NULL, 0)) {
		kvl_etcd_watch_free(c->multi, c->watch);
		c->watch = NULL;
		c->listed = false;
	}
}

static void goodbye(struct kvl_cluster *c)
{
	if (!c->registered || c->lease == 0)
		return;
	/* A clean stop: peers see the key go now, not a lease_ttl_s later. */
	if (kvl_etcd_delete(c->etcd, c->key) == 0)
		KVL_LOG(INFO, "cluster: %s deleted", c->key);
	else
		KVL_LOG(WARNING, "cluster: cannot delete %s (%s): it goes with its lease", c->key,
			kvl_etcd_error(c->etcd));
	kvl_etcd_revoke(c->etcd, c->lease);
}

static void *cluster_main(void *arg)
{
	struct kvl_cluster *c = arg;
	uint64_t backoff = BACKOFF_MIN_NS, next_try = 0;

	while (!c->stop) {
		uint64_t now = kvl_now_ns(), retry = 0;

		if (now >= next_try) {
			int rc = step(c, now, &retry);

			if (rc < 0) {
				went_down(c, rc);
				next_try = now + backoff;
				backoff =
					backoff * 2 > BACKOFF_MAX_NS ? BACKOFF_MAX_NS : backoff * 2;
			} else {
				backoff = BACKOFF_MIN_NS;
				next_try = rc > 0 ? now + retry : 0;
			}
		}
		drive_watch(c, 50);
	}
	goodbye(c);
	return NULL;
}

/* ---- start, stop ---- */

static int read_password(const char *path, char *out, size_t len, char *err, size_t errlen)
{
	FILE *f = fopen(path, "r");

	if (f == NULL) {
		snprintf(err, errlen, "cluster.password_file = %s: %s", path, strerror(errno));
		return -errno;
	}
	if (fgets(out, (int)len, f) == NULL)
		out[0] = '\0';
	fclose(f);
	out[strcspn(out, "\r\n")] = '\0';
	return 0;
}

int kvl_cluster_start(struct kvl_runtime *rt, char *err, size_t errlen)
{
	const struct kvl_cluster_conf *cf = &rt->cfg.cluster;
	struct kvl_etcd_opts o = { 0 };
	char password[256] = "";
	struct kvl_cluster *c;
	int rc;

	if (cf->etcd_endpoints[0] == '\0')
		return 0;
	if (!kvl_control_enabled(rt)) {
		snprintf(err, errlen, "cluster: needs the control path (control.secret_file)");
		return -EINVAL;
	}
	if (cf->password_file[0] &&
	    (rc = read_password(cf->password_file, password, sizeof(password), err, errlen)) < 0)
		return rc;
	c = calloc(1, sizeof(*c));
	if (c == NULL || (c->nodes = calloc(MAX_NODES, sizeof(struct node))) == NULL) {
		free(c);
		return -ENOMEM;
	}
	c->rt = rt;
	c->cf = cf;
	pthread_mutex_init(&c->lock, NULL);
	snprintf(c->name, sizeof(c->name), "%s", cf->name[0] ? cf->name : rt->cfg.runtime.name);
	if (cf->prefix[0])
		snprintf(c->nodes_prefix, sizeof(c->nodes_prefix), "%s/nodes/", cf->prefix);
	else
		snprintf(c->nodes_prefix, sizeof(c->nodes_prefix), "/kvlane/%s/nodes/",
			 cf->cluster);
	snprintf(c->key, sizeof(c->key), "%s%s", c->nodes_prefix, c->name);
	rc = build_record(c, err, errlen);
	o.endpoints = cf->etcd_endpoints;
	o.ca_file = cf->tls_ca_file;
	o.cert_file = cf->tls_cert_file;
	o.key_file = cf->tls_key_file;
	o.user = cf->user;
	o.password = password;
	o.timeout_ms = cf->request_timeout_ms;
	if (rc == 0) {
		char e2[KVL_ETCD_ERR_LEN];

		c->etcd = kvl_etcd_new(&o, e2, sizeof(e2));
		if (c->etcd == NULL) {
			rc = -errno;
			snprintf(err, errlen, "cluster: %s", e2);
		}
	}
	explicit_bzero(password, sizeof(password));
	if (rc == 0 && (c->multi = curl_multi_init()) == NULL)
		rc = -ENOMEM;
	if (rc == 0) {
		KVL_LOG(INFO, "cluster: %s as %s, etcd %s", c->key, kvl_cluster_role_name(cf->role),
			cf->etcd_endpoints);
		__atomic_store_n(&the_cl, c, __ATOMIC_RELEASE);
		rc = -rte_ctrl_thread_create(&c->thread, "kvl-etcd", NULL, cluster_main, c);
		if (rc < 0)
			snprintf(err, errlen, "cannot start the cluster thread: %s", strerror(-rc));
	}
	if (rc < 0) {
		__atomic_store_n(&the_cl, NULL, __ATOMIC_RELEASE);
		if (c->multi)
			curl_multi_cleanup(c->multi);
		kvl_etcd_free(c->etcd);
		free(c->nodes);
		free(c);
		return rc;
	}
	return 0;
}

void kvl_cluster_stop(struct kvl_runtime *rt)
{
	struct kvl_cluster *c = cl_get();

	if (c == NULL || c->rt != rt)
		return;
	c->stop = true;
	curl_multi_wakeup(c->multi);
	pthread_join(c->thread, NULL);
	__atomic_store_n(&the_cl, NULL, __ATOMIC_RELEASE);
	/* telemetry handlers take @lock: one that began before the store ends before this */
	pthread_mutex_lock(&c->lock);
	pthread_mutex_unlock(&c->lock);
	kvl_etcd_watch_free(c->multi, c->watch);
	curl_multi_cleanup(c->multi);
	kvl_etcd_free(c->etcd);
	free(c->nodes);
	free(c);
}

/* ---- the API ---- */

static int cmp_node(const void *a, const void *b)
{
	return strcmp(((const struct kvl_cluster_node *)a)->name,
		      ((const struct kvl_cluster_node *)b)->name);
}

int kvl_cluster_list(struct kvl_runtime *rt, int role, struct kvl_cluster_node *out, unsigned max)
{
	struct kvl_cluster *c = cl_get();
	struct kvl_cluster_node *all;
	unsigned n = 0;

	if (c == NULL || c->rt != rt)
		return -ENOTSUP;
	all = calloc(MAX_NODES, sizeof(*all));
	if (all == NULL)
		return -ENOMEM;
	pthread_mutex_lock(&c->lock);
	for (unsigned i = 0; i < c->n_nodes; i++) {
		const struct node *x = &c->nodes[i];
		struct kvl_cluster_node *o = &all[n];

		if (role != KVL_NODE_ANY && x->role != role)
			continue;
		snprintf(o->name, sizeof(o->name), "%s", x->name);
		snprintf(o->control, sizeof(o->control), "%s", x->control);
		o->role = x->role;
		o->incarnation = (uint64_t)x->lease;
		o->proto = x->proto;
		o->n_nics = x->n_nics;
		o->n_gpus = x->n_gpus;
		o->n_segs = x->n_segs;
		n++;
	}
	pthread_mutex_unlock(&c->lock);
	qsort(all, n, sizeof(*all), cmp_node);
	if (out != NULL && max > 0)
		memcpy(out, all, (n < max ? n : max) * sizeof(*out));
	free(all);
	return (int)n;
}

int kvl_connect_name(struct kvl_runtime *rt, const char *name, unsigned timeout_ms,
		     kvl_peer_t *peer, char *err, size_t errlen)
{
	struct kvl_cluster *c = cl_get();
	char addr[80];
	int64_t lease;
	struct node *x;
	uint32_t p;
	int rc;

	if (c == NULL || c->rt != rt) {
		snprintf(err, errlen,
			 "no [cluster]: set cluster.etcd_endpoints to find peers by name");
		return -ENOTSUP;
	}
	if (name == NULL || name[0] == '\0') {
		snprintf(err, errlen, "kvl_connect_name: empty name");
		return -EINVAL;
	}
	pthread_mutex_lock(&c->lock);
	x = find(c, name);
	if (x == NULL) {
		if (c->etcd_ok) {
			snprintf(err, errlen, "no node named \"%s\" under %s (%u nodes known)",
				 name, c->nodes_prefix, c->n_nodes);
			rc = -ENOENT;
		} else {
			snprintf(
				err, errlen,
				"no node named \"%s\" is known, and etcd is unreachable since %llu "
				"ms (%s)",
				name,
				(unsigned long long)((kvl_now_ns() - c->down_since_ns) / 1000000),
				c->last_err);
			rc = -EHOSTUNREACH;
		}
		pthread_mutex_unlock(&c->lock);
		return rc;
	}
	if (x->has_peer && kvl_peer_ready(&rt->peers, x->peer) != NULL) {
		*peer = x->peer;
		pthread_mutex_unlock(&c->lock);
		return 0;
	}
	snprintf(addr, sizeof(addr), "%s", x->control);
	lease = x->lease;
	pthread_mutex_unlock(&c->lock);
	rc = kvl_control_connect(rt, addr, timeout_ms, &p, err, errlen);
	if (rc < 0)
		return rc;
	pthread_mutex_lock(&c->lock);
	x = find(c, name);
	if (x && x->lease == lease) {
		x->has_peer = true;
		x->peer = p;
	}
	pthread_mutex_unlock(&c->lock);
	*peer = p;
	return 0;
}

/* ---- /kvlane/cluster ---- */

static int tel_cluster(const char *cmd, const char *params, struct rte_tel_data *d)
{
	struct kvl_cluster *c = cl_get();
	struct rte_tel_data *roles, *ctl, *inc;
	char lease[24];
	unsigned shown = 0;

	(void)cmd;
	(void)params;
	rte_tel_data_start_dict(d);
	if (c == NULL) {
		rte_tel_data_add_dict_int(d, "enabled", 0);
		return 0;
	}
	roles = rte_tel_data_alloc();
	ctl = rte_tel_data_alloc();
	inc = rte_tel_data_alloc();
	if (roles == NULL || ctl == NULL || inc == NULL) {
		rte_tel_data_free(roles);
		rte_tel_data_free(ctl);
		rte_tel_data_free(inc);
		return -ENOMEM;
	}
	rte_tel_data_start_dict(roles);
	rte_tel_data_start_dict(ctl);
	rte_tel_data_start_dict(inc);
	pthread_mutex_lock(&c->lock);
	rte_tel_data_add_dict_int(d, "enabled", 1);
	rte_tel_data_add_dict_string(d, "name", c->name);
	rte_tel_data_add_dict_string(d, "key", c->key);
	rte_tel_data_add_dict_string(d, "role", kvl_cluster_role_name(c->cf->role));
	rte_tel_data_add_dict_string(d, "state", state_names[c->state]);
	rte_tel_data_add_dict_int(d, "etcd_ok", c->etcd_ok);
	rte_tel_data_add_dict_string(d, "etcd_endpoint", c->endpoint);
	rte_tel_data_add_dict_string(d, "etcd_version", c->version);
	rte_tel_data_add_dict_string(d, "etcd_api", c->api);
	rte_tel_data_add_dict_string(d, "last_error", c->last_err);
	rte_tel_data_add_dict_u64(d, "down_ms",
				  c->etcd_ok ? 0 : (kvl_now_ns() - c->down_since_ns) / 1000000);
	snprintf(lease, sizeof(lease), "%llx", (unsigned long long)c->lease_pub);
	rte_tel_data_add_dict_string(d, "lease", lease);
	rte_tel_data_add_dict_u64(d, "lease_ttl_s", c->cf->lease_ttl_s);
	rte_tel_data_add_dict_string(d, "held_by", c->held_by);
	rte_tel_data_add_dict_u64(d, "revision", (uint64_t)c->revision);
	rte_tel_data_add_dict_u64(d, "node_count", c->n_nodes);
	rte_tel_data_add_dict_u64(d, "keepalives",
				  __atomic_load_n(&c->keepalives, __ATOMIC_RELAXED));
	rte_tel_data_add_dict_u64(d, "keepalive_failures",
				  __atomic_load_n(&c->keepalive_failures, __ATOMIC_RELAXED));
	rte_tel_data_add_dict_u64(d, "registrations", c->registrations);
	rte_tel_data_add_dict_u64(d, "incarnations", c->incarnations);
	rte_tel_data_add_dict_u64(d, "watch_events", c->watch_events);
	rte_tel_data_add_dict_u64(d, "watch_restarts", c->watch_restarts);
	rte_tel_data_add_dict_u64(d, "relists", c->relists);
	rte_tel_data_add_dict_u64(d, "departures", c->departures);
	rte_tel_data_add_dict_u64(d, "peers_failed", c->peers_failed);
	rte_tel_data_add_dict_u64(d, "skipped_malformed", c->skipped_malformed);
	rte_tel_data_add_dict_u64(d, "skipped_oversize", c->skipped_oversize);
	rte_tel_data_add_dict_u64(d, "skipped_bad_key", c->skipped_bad_key);
	rte_tel_data_add_dict_u64(d, "skipped_full", c->skipped_full);
	for (unsigned i = 0; i < c->n_nodes && shown < RTE_TEL_MAX_DICT_ENTRIES; i++, shown++) {
		const struct node *x = &c->nodes[i];

		rte_tel_data_add_dict_string(roles, x->name, kvl_cluster_role_name(x->role));
		rte_tel_data_add_dict_string(ctl, x->name, x->control);
		snprintf(lease, sizeof(lease), "%llx", (unsigned long long)x->lease);
		rte_tel_data_add_dict_string(inc, x->name, lease);
	}
	rte_tel_data_add_dict_u64(d, "nodes_omitted", c->n_nodes - shown);
	pthread_mutex_unlock(&c->lock);
	rte_tel_data_add_dict_container(d, "roles", roles, 0);
	rte_tel_data_add_dict_container(d, "control", ctl, 0);
	rte_tel_data_add_dict_container(d, "incarnation", inc, 0);
	return 0;
}

#else /* !KVL_HAVE_CLUSTER */

#define WHY_NOT                                                                                 \
	"kvlane was built without libcurl and jansson (libcurl4-openssl-dev, libjansson-dev): " \
	"[cluster] is not available"

int kvl_cluster_start(struct kvl_runtime *rt, char *err, size_t errlen)
{
	if (rt->cfg.cluster.etcd_endpoints[0] == '\0')
		return 0;
	snprintf(err, errlen, "cluster.etcd_endpoints: %s", WHY_NOT);
	return -ENOTSUP;
}

void kvl_cluster_stop(struct kvl_runtime *rt)
{
	(void)rt;
}

int kvl_cluster_list(struct kvl_runtime *rt, int role, struct kvl_cluster_node *out, unsigned max)
{
	(void)rt;
	(void)role;
	(void)out;
	(void)max;
	return -ENOTSUP;
}

int kvl_connect_name(struct kvl_runtime *rt, const char *name, unsigned timeout_ms,
		     kvl_peer_t *peer, char *err, size_t errlen)
{
	(void)rt;
	(void)name;
	(void)timeout_ms;
	(void)peer;
	snprintf(err, errlen, "%s", WHY_NOT);
	return -ENOTSUP;
}

static int tel_cluster(const char *cmd, const char *params, struct rte_tel_data *d)
{
	(void)cmd;
	(void)params;
	rte_tel_data_start_dict(d);
	rte_tel_data_add_dict_int(d, "enabled", 0);
	rte_tel_data_add_dict_string(d, "why", "built without libcurl/jansson");
	return 0;
}

#endif /* KVL_HAVE_CLUSTER */

RTE_INIT(kvl_cluster_telemetry)
{
	rte_telemetry_register_cmd("/kvlane/cluster", tel_cluster,
				   "Cluster membership through etcd: state, etcd health, lease, "
				   "the view (roles, control, incarnation). No parameters");
}
