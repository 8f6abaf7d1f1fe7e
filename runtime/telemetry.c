/* SPDX-License-Identifier: BSD-3-Clause */
/* /kvlane/... telemetry commands: snapshots of the runtime, read through DPDK's socket. */
#include <errno.h>
#include <pthread.h>
#include <limits.h>
#include <sys/stat.h>
#include <time.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <rte_eal.h>
#include <rte_lcore.h>
#include <rte_ring.h>
#include <infiniband/verbs.h>
#include <rte_telemetry.h>

#include "kvl_build_config.h"
#include "kvl_clock.h"
#include "control/control.h"
#include "kvlane/kvlane.h"
#include "lifecycle.h"
#include "log.h"
#include "nic_sched.h"
#include "tier.h"
#include "peers.h"
#include "runtime.h"
#include "segments.h"
#include "staging.h"
#include "telemetry.h"
#include "verbs.h"

/* Set once the runtime is up; handlers run on DPDK's telemetry thread and only read. */
static struct kvl_runtime *tel_rt;

/*
 * DPDK's telemetry takes at most 10 clients and never times an idle one out: anyone who may
 * connect can lock the operator out by holding 10 connections. The socket is made the
 * owner's alone (DPDK leaves it to the umask), so only this user (and root) can.
 */
static void socket_owner_only(void)
{
	char path[PATH_MAX];
	struct stat st;

	snprintf(path, sizeof(path), "%s/dpdk_telemetry.v2", rte_eal_get_runtime_dir());
	if (stat(path, &st) != 0 || !S_ISSOCK(st.st_mode))
		return; /* telemetry off (--no-telemetry): nothing to protect */
	if ((st.st_mode & 0077) && chmod(path, 0600) != 0)
		KVL_LOG(WARNING, "telemetry: cannot make %s the owner's alone: %s", path,
			strerror(errno));
}

/* Held by kvl_telemetry_walk() readers; a detach takes it to wait for them. */
static pthread_rwlock_t tel_walk_lock = PTHREAD_RWLOCK_INITIALIZER;

void kvl_telemetry_attach(struct kvl_runtime *rt)
{
	if (rt != NULL)
		socket_owner_only();
	pthread_rwlock_wrlock(&tel_walk_lock);
	__atomic_store_n(&tel_rt, rt, __ATOMIC_RELEASE);
	pthread_rwlock_unlock(&tel_walk_lock);
}

static struct kvl_runtime *runtime_or_null(void)
{
	return __atomic_load_n(&tel_rt, __ATOMIC_ACQUIRE);
}

static int tel_info(const char *cmd, const char *params, struct rte_tel_data *d)
{
	struct kvl_runtime *rt = runtime_or_null();

	(void)cmd;
	(void)params;
	if (rt == NULL)
		return -EAGAIN;
	rte_tel_data_start_dict(d);
	rte_tel_data_add_dict_string(d, "version", KVL_VERSION);
	rte_tel_data_add_dict_string(d, "name", rt->cfg.runtime.name);
	rte_tel_data_add_dict_int(d, "pid", (int)getpid());
	rte_tel_data_add_dict_u64(d, "uptime_ms", kvl_runtime_uptime_ms(rt));
	rte_tel_data_add_dict_string(d, "config", rt->cfg.path);
	rte_tel_data_add_dict_string(d, "sysfs_root", rt->sysfs_root);
	rte_tel_data_add_dict_string(d, "idle_policy",
				     kvl_idle_policy_name(rt->cfg.runtime.idle_policy));
	rte_tel_data_add_dict_int(d, "main_lcore", (int)rt->main_lcore);
	rte_tel_data_add_dict_int(d, "nic_count", (int)rt->cfg.n_nics);
	rte_tel_data_add_dict_int(d, "cuda", KVL_HAVE_CUDA);
	return 0;
}

/*
 * DPDK 22.11 nests only arrays inside a reply, so a table comes two ways: the whole table in
 * column form (a dict of arrays, one entry per row at the same index in every array), and one
 * row as a flat dict. Both are filled by the same row function through this sink.
 */
#define MAX_COLS 80 /* /kvlane/sched has 65 */

struct sink {
	/* walk mode (kvl_telemetry_walk: /metrics): each value handed to a visitor instead */
	kvl_tel_visit_fn visit;
	void *varg;
	struct rte_tel_data *d; /* row mode: the reply dict */
	/* column mode */
	struct rte_tel_data *col[MAX_COLS];
	const char *col_name[MAX_COLS];
	unsigned n_cols;
	int rc;
};

static struct rte_tel_data *column(struct sink *k, const char *name, enum rte_tel_value_type t)
{
	for (unsigned i = 0; i < k->n_cols; i++)
		if (strcmp(k->col_name[i], name) == 0)
			return k->col[i];
	if (k->n_cols == MAX_COLS || (k->col[k->n_cols] = rte_tel_data_alloc()) == NULL) {
		k->rc = -ENOMEM;
		return NULL;
	}
	rte_tel_data_start_array(k->col[k->n_cols], t);
	k->col_name[k->n_cols] = name;
	return k->col[k->n_cols++];
}

static void put_int(struct sink *k, const char *name, int v)
{
	struct rte_tel_data *c;

	if (k->visit)
		k->visit(k->varg,
			 &(struct kvl_tel_value){ .name = name, .type = KVL_TEL_INT, .i = v });
	else if (k->d)
		rte_tel_data_add_dict_int(k->d, name, v);
	else if ((c = column(k, name, RTE_TEL_INT_VAL)) != NULL)
		rte_tel_data_add_array_int(c, v);
}

static void put_u64(struct sink *k, const char *name, uint64_t v)
{
	struct rte_tel_data *c;

	if (k->visit)
		k->visit(k->varg,
			 &(struct kvl_tel_value){ .name = name, .type = KVL_TEL_U64, .u = v });
	else if (k->d)
		rte_tel_data_add_dict_u64(k->d, name, v);
	else if ((c = column(k, name, RTE_TEL_U64_VAL)) != NULL)
		rte_tel_data_add_array_u64(c, v);
}

static void put_str(struct sink *k, const char *name, const char *v)
{
	struct rte_tel_data *c;

	if (k->visit)
		k->visit(k->varg,
			 &(struct kvl_tel_value){ .name = name, .type = KVL_TEL_STR, .s = v });
	else if (k->d)
		rte_tel_data_add_dict_string(k->d, name, v);
	else if ((c = column(k, name, RTE_TEL_STRING_VAL)) != NULL)
		rte_tel_data_add_array_string(c, v);
}

/* Walk mode: the values that follow belong to a new row. */
static void row_start(struct sink *k)
{
	if (k->visit)
		k->visit(k->varg, &(struct kvl_tel_value){ .type = KVL_TEL_ROW });
}

/* Column mode: hand the arrays to the reply dict. */
static int sink_finish(struct sink *k, struct rte_tel_data *reply)
{
	rte_tel_data_start_dict(reply);
	for (unsigned i = 0; i < k->n_cols; i++) {
		if (k->rc == 0 &&
		    rte_tel_data_add_dict_container(reply, k->col_name[i], k->col[i], 0) == 0)
			continue;
		rte_tel_data_free(k->col[i]);
		if (k->rc == 0)
			k->rc = -ENOSPC;
	}
	return k->rc;
}

/* A whole table in column form (/kvlane/nics, /kvlane/peers, ...). */
static int table_reply(struct rte_tel_data *d, void (*rows)(struct kvl_runtime *, struct sink *))
{
	struct kvl_runtime *rt = runtime_or_null();
	struct sink k = { 0 };

	if (rt == NULL)
		return -EAGAIN;
	rows(rt, &k);
	return sink_finish(&k, d);
}

struct config_walk {
	struct rte_tel_data *d;
	const char *section; /* only this section, or NULL for all */
	unsigned n;
};

static int config_one(void *arg, const char *section, const char *key, const char *value)
{
	struct config_walk *w = arg;
	char name[RTE_TEL_MAX_STRING_LEN];

	if (w->section) {
		if (strcmp(section, w->section) != 0)
			return 0;
		snprintf(name, sizeof(name), "%s", key);
	} else {
		/* Telemetry names allow [A-Za-z0-9_/]: "nic.lo" + "mtu" -> "nic/lo/mtu". */
		snprintf(name, sizeof(name), "%s/%s", section, key);
		for (char *p = name; *p; p++)
			if (*p == '.')
				*p = '/';
	}
	if (rte_tel_data_add_dict_string(w->d, name, value) == 0)
		w->n++;
	return 0;
}

/* "section/key" -> value as in the INI; with a parameter (a section name as written in the
 * INI, e.g. "nic.lo"), that section's keys alone. */
static int tel_config(const char *cmd, const char *params, struct rte_tel_data *d)
{
	struct kvl_runtime *rt = runtime_or_null();
	struct config_walk w = { .d = d };

	(void)cmd;
	if (rt == NULL)
		return -EAGAIN;
	if (params && params[0])
		w.section = params;
	rte_tel_data_start_dict(d);
	kvl_config_visit(&rt->cfg, config_one, &w);
	return w.section && w.n == 0 ? -EINVAL : 0;
}

static const struct kvl_lcore *nic_lcore_of(const struct kvl_runtime *rt, unsigned lid)
{
	for (unsigned i = 0; i < rt->cfg.n_nics; i++)
		if (rt->nic[i].lcore && rt->nic[i].lcore->lcore_id == lid)
			return rt->nic[i].lcore;
	return NULL;
}

static void lcore_row(const struct kvl_runtime *rt, unsigned lid, struct sink *k)
{
	const struct kvl_lcore *lc = nic_lcore_of(rt, lid);
	struct kvl_lcore_stats s = { 0 };
	unsigned cpu;
	int socket = kvl_runtime_lcore_socket(rt, lid, &cpu);
	char pct[16];

	row_start(k);
	if (lc)
		kvl_lcore_stats_read(lc, &s);
	snprintf(pct, sizeof(pct), "%.2f", kvl_lcore_busy_pct(&s));
	put_int(k, "lcore", (int)lid);
	put_int(k, "cpu", (int)cpu);
	put_int(k, "socket", socket);
	put_str(k, "role", lid == rt->main_lcore ? "main" : lc ? "nic" : "unused");
	put_str(k, "nic", lc ? rt->cfg.nics[lc->nic].label : "");
	put_str(k, "device", lc ? rt->cfg.nics[lc->nic].device : "");
	put_int(k, "remote_numa", lc ? lc->remote : 0);
	put_u64(k, "loop_iterations", s.iterations);
	put_u64(k, "busy_cycles", s.busy_cycles);
	put_u64(k, "idle_cycles", s.idle_cycles);
	put_str(k, "busy_pct", pct);
	put_u64(k, "work", s.work);
	put_u64(k, "naps", s.naps);
	put_u64(k, "naps_due", s.naps_due);
	put_u64(k, "due_spins", s.due_spins);
	/* hybrid idle: sleeps in epoll, and what ended them */
	{
		const struct kvl_nic_io *io = lc ? rt->nic[lc->nic].io : NULL;
		struct kvl_nic_io_sleep_stats z = { 0 };
		const struct kvl_nic_io_sleep_stats *sl = io ? &io->sleep : &z;

		put_u64(k, "sleeps", __atomic_load_n(&sl->sleeps, __ATOMIC_RELAXED));
		put_u64(k, "wake_cq", __atomic_load_n(&sl->wake_cq, __ATOMIC_RELAXED));
		put_u64(k, "wake_kick", __atomic_load_n(&sl->wake_kick, __ATOMIC_RELAXED));
		put_u64(k, "wake_timeout", __atomic_load_n(&sl->wake_timeout, __ATOMIC_RELAXED));
		/* where posted transfers wait before a QP has them: the submission ring, the
		 * stash of those whose connection was full, completions not yet polled */
		put_u64(k, "sub_queued", io ? rte_ring_count(io->sub) : 0);
		put_u64(k, "stashed", io ? __atomic_load_n(&io->n_stash, __ATOMIC_RELAXED) : 0);
		put_u64(k, "cpl_queued", io ? rte_ring_count(io->cpl) : 0);
		put_u64(k, "unroutable",
			io ? __atomic_load_n(&io->unroutable, __ATOMIC_RELAXED) : 0);
	}
}

static void lcores_rows(struct kvl_runtime *rt, struct sink *k)
{
	unsigned lid;

	RTE_LCORE_FOREACH(lid)
	lcore_row(rt, lid, k);
}

/* Every lcore EAL gave us (main, one per NIC, any unused), in column form. */
static int tel_lcores(const char *cmd, const char *params, struct rte_tel_data *d)
{
	(void)cmd;
	(void)params;
	return table_reply(d, lcores_rows);
}

/* One lcore: /kvlane/lcore,<id>. */
static int tel_lcore(const char *cmd, const char *params, struct rte_tel_data *d)
{
	struct kvl_runtime *rt = runtime_or_null();
	struct sink k = { .d = d };
	char *end;
	unsigned long lid;

	(void)cmd;
	if (rt == NULL)
		return -EAGAIN;
	if (params == NULL || params[0] == '\0')
		return -EINVAL;
	lid = strtoul(params, &end, 10);
	if (*end != '\0' || lid >= RTE_MAX_LCORE || !rte_lcore_is_enabled((unsigned)lid))
		return -EINVAL;
	rte_tel_data_start_dict(d);
	lcore_row(rt, (unsigned)lid, &k);
	return 0;
}

static void nic_row(const struct kvl_runtime *rt, unsigned i, struct sink *k)
{
	const struct kvl_nic_conf *nc = &rt->cfg.nics[i];
	const struct kvl_nic_info *ni = &rt->nic[i].info;
	const struct kvl_lcore *lc = rt->nic[i].lcore;

	row_start(k);
	put_str(k, "nic", nc->label);
	put_str(k, "device", nc->device);
	put_str(k, "kind", ni->kind == KVL_NIC_RDMA ? "rdma" : "netdev");
	put_int(k, "port", (int)nc->port);
	/* What connections use now: auto may have fallen back from mlx5 to verbs (and says why
	 * in transport_note) when the first QP was not what the fast path handles. */
	put_str(k, "transport",
		rt->nic[i].vdev ? kvl_verbs_dev_backend(rt->nic[i].vdev)
				: kvl_transport_name(ni->transport));
	put_str(k, "transport_conf", kvl_transport_name(nc->transport));
	put_str(k, "transport_note",
		rt->nic[i].vdev ? kvl_verbs_dev_backend_note(rt->nic[i].vdev) : "");
	put_int(k, "numa_node", ni->numa_node);
	put_str(k, "numa_source",
		ni->numa_from_conf  ? "config"
		: ni->numa_node < 0 ? "unknown"
				    : "sysfs");
	put_int(k, "lcore", lc ? (int)lc->lcore_id : -1);
	put_int(k, "lcore_socket", lc ? lc->socket : -1);
	put_int(k, "remote_numa", lc ? lc->remote : 0);
	put_str(k, "driver", ni->driver);
	put_str(k, "link_layer", ni->link_layer);
	put_str(k, "state", ni->state);
	put_str(k, "netdev", ni->netdev);
	/* The GPU it works with (kvl_topo_gpu_for_nic): PCI address, CUDA index where the
	 * runtime opened that GPU, nvidia-smi's distance class, and who chose it. */
	put_str(k, "pci", rt->nic[i].gpu.nic_addr);
	put_str(k, "gpu", rt->nic[i].gpu.gpu >= 0 ? rt->nic[i].gpu.addr : "none");
	put_int(k, "gpu_cuda_device", rt->nic[i].gpu.cuda_device);
	put_str(k, "gpu_distance", kvl_pci_dist_name(rt->nic[i].gpu.dist));
	put_str(k, "gpu_source", rt->nic[i].gpu.from_conf ? "config" : "topology");
	put_str(k, "gpu_note", rt->nic[i].gpu.note);
	/* tcp: whether its READs can land in VRAM (bounce buffers + copies), else why not */
	{
		char why[160], v[176] = "";

		if (ni->transport == KVL_TRANSPORT_TCP && rt->nic[i].vdev == NULL)
			snprintf(v, sizeof(v), "%s%s",
				 kvl_tcp_vram_ok(rt, why, sizeof(why)) ? "bounce" : "off: ", why);
		put_str(k, "tcp_vram", v);
	}
	/* same-host peers: [nic.*] ipc, connections opened over ipc, the last decision (why not) */
	{
		struct kvl_rt_nic *n = (struct kvl_rt_nic *)&rt->nic[i];
		char note[sizeof(n->ipc_note)];
		uint32_t opened;

		rte_spinlock_lock(&n->ipc_lock);
		opened = n->ipc_opened;
		memcpy(note, n->ipc_note, sizeof(note));
		rte_spinlock_unlock(&n->ipc_lock);
		put_str(k, "ipc", nc->ipc == KVL_IPC_AUTO ? "auto" : "off");
		put_int(k, "ipc_opened", (int)opened);
		put_str(k, "ipc_note", note);
	}
}

static void nics_rows(struct kvl_runtime *rt, struct sink *k)
{
	for (unsigned i = 0; i < rt->cfg.n_nics; i++)
		nic_row(rt, i, k);
}

/* Every NIC in column form. */
static int tel_nics(const char *cmd, const char *params, struct rte_tel_data *d)
{
	(void)cmd;
	(void)params;
	return table_reply(d, nics_rows);
}

/* One NIC: /kvlane/nic,<label>. */
static int tel_nic(const char *cmd, const char *params, struct rte_tel_data *d)
{
	struct kvl_runtime *rt = runtime_or_null();
	struct sink k = { .d = d };

	(void)cmd;
	if (rt == NULL)
		return -EAGAIN;
	for (unsigned i = 0; params && i < rt->cfg.n_nics; i++) {
		if (strcmp(rt->cfg.nics[i].label, params) == 0) {
			rte_tel_data_start_dict(d);
			nic_row(rt, i, &k);
			return 0;
		}
	}
	return -EINVAL;
}

/* The staging budget and where it comes from: sampled free VRAM, or the INI. */
static void gpu_row(struct kvl_runtime *rt, struct sink *k)
{
	const struct kvl_gpu *g = &rt->gpu;

	put_int(k, "enabled", g->open);
	put_str(k, "budget_source", g->open ? "vram" : "config");
	put_u64(k, "budget_bytes", kvl_staging_budget(rt));
	if (!g->open)
		return;
	put_int(k, "device_id", g->device_id);
	put_int(k, "device_count", g->device_count);
	put_str(k, "name", g->name);
	put_str(k, "pci_bus_id", g->pci_bus_id);
	put_int(k, "gpudirect_rdma", g->gpudirect_rdma);
	put_u64(k, "total_bytes", g->total_bytes);
	put_u64(k, "free_bytes", __atomic_load_n(&g->free_bytes, __ATOMIC_RELAXED));
	put_u64(k, "reserve_bytes", g->reserve_bytes);
	put_u64(k, "samples", __atomic_load_n(&g->samples, __ATOMIC_RELAXED));
	put_u64(k, "sample_errors", __atomic_load_n(&g->sample_errors, __ATOMIC_RELAXED));
	put_u64(k, "sample_interval_ms", rt->cfg.sched.resize_interval_ms);
}

/* A one-row table as a flat dict (/kvlane/gpu, /kvlane/stats). */
static int dict_reply(struct rte_tel_data *d, void (*fill)(struct kvl_runtime *, struct sink *))
{
	struct kvl_runtime *rt = runtime_or_null();
	struct sink k = { .d = d };

	if (rt == NULL)
		return -EAGAIN;
	rte_tel_data_start_dict(d);
	fill(rt, &k);
	return 0;
}

static int tel_gpu(const char *cmd, const char *params, struct rte_tel_data *d)
{
	(void)cmd;
	(void)params;
	return dict_reply(d, gpu_row);
}

struct pool_walk {
	unsigned segs;
	uint64_t bytes;
};

static void pooled_seg(void *arg, const struct kvl_local_seg *s)
{
	struct pool_walk *w = arg;

	if (s->pooled) {
		w->segs++;
		w->bytes += s->desc.length;
	}
}

/* The [memory] pool: its geometry and pages, what is carved, what registering it took. */
static int tel_memory(const char *cmd, const char *params, struct rte_tel_data *d)
{
	struct kvl_runtime *rt = runtime_or_null();
	struct pool_walk w = { 0 };
	struct kvl_pool *p;
	uint32_t used;

	(void)cmd;
	(void)params;
	if (rt == NULL)
		return -EAGAIN;
	p = &rt->segs.pool;
	rte_tel_data_start_dict(d);
	rte_tel_data_add_dict_int(d, "enabled", p->base != NULL);
	if (p->base == NULL) {
		rte_tel_data_add_dict_string(d, "note",
					     "no pool ([memory] pool_size_mb = 0): segments and "
					     "staging are DPDK memory, each registered alone");
		return 0;
	}
	used = kvl_pool_chunks_used(p);
	kvl_segs_visit(&rt->segs, pooled_seg, &w);
	rte_tel_data_add_dict_u64(d, "size_bytes", p->size);
	rte_tel_data_add_dict_u64(d, "chunk_bytes", p->chunk);
	rte_tel_data_add_dict_u64(d, "chunks_total", p->n_chunks);
	rte_tel_data_add_dict_u64(d, "chunks_used", used);
	rte_tel_data_add_dict_u64(d, "chunks_free", p->n_chunks - used);
	rte_tel_data_add_dict_u64(d, "largest_free_chunks", kvl_pool_largest_free(p));
	rte_tel_data_add_dict_u64(d, "allocations", __atomic_load_n(&p->allocs, __ATOMIC_RELAXED));
	rte_tel_data_add_dict_u64(d, "segments", w.segs); /* live segments inside the pool */
	rte_tel_data_add_dict_u64(d, "segment_bytes", w.bytes);
	rte_tel_data_add_dict_u64(d, "page_size", p->pages.page_size);
	rte_tel_data_add_dict_int(d, "hugepage", p->pages.hugepage);
	rte_tel_data_add_dict_string(d, "page_note", p->pages.note);
	rte_tel_data_add_dict_int(d, "numa_node", p->numa_node);
	rte_tel_data_add_dict_int(d, "numa_preferred", p->numa_bound);
	rte_tel_data_add_dict_u64(d, "map_ns", p->map_ns);
	for (unsigned n = 0; n < rt->cfg.n_nics; n++) {
		char name[KVL_LABEL_LEN + 16];

		if (!p->reg[n].done)
			continue;
		snprintf(name, sizeof(name), "reg_ns/%s", rt->cfg.nics[n].label);
		rte_tel_data_add_dict_u64(d, name, p->reg[n].ns);
	}
	rte_tel_data_add_dict_int(d, "cuda_registered", p->cuda_registered);
	rte_tel_data_add_dict_u64(d, "cuda_reg_ns", p->cuda_ns);
	return 0;
}

static void stats_sub(struct kvl_xport_stats *a, const struct kvl_xport_stats *b)
{
	uint64_t *pa = (uint64_t *)a;
	const uint64_t *pb = (const uint64_t *)b;

	for (size_t i = 0; i < sizeof(*a) / sizeof(uint64_t); i++)
		pa[i] = pa[i] >= pb[i] ? pa[i] - pb[i] : 0;
}

static void peer_row(struct kvl_runtime *rt, uint32_t p, struct kvl_peer_pub *pub, struct sink *k)
{
	struct kvl_xport_stats st = { 0 };
	uint64_t now = 0, last;
	char addr[KVL_CTRL_ADDR_LEN], name[KVL_CTRL_NAME_LEN], why[KVL_CTRL_TEXT_LEN];
	char ipc_why[KVL_CTRL_TEXT_LEN];
	uint32_t conns, segs, ipc_segs;
	int state, fail, same_host;
	bool ipc;

	for (unsigned n = 0; n < rt->cfg.n_nics; n++)
		if (rt->nic[n].io)
			kvl_nic_io_peer_stats(rt->nic[n].io, p, &st);
	rte_spinlock_lock(&pub->lock);
	stats_sub(&st, &pub->base);
	state = pub->state;
	memcpy(addr, pub->addr, sizeof(addr));
	memcpy(name, pub->name, sizeof(name));
	memcpy(why, pub->fail_msg, sizeof(why));
	conns = pub->n_conns;
	segs = pub->n_segs;
	last = pub->last_rx_ns;
	fail = pub->fail_status;
	same_host = pub->same_host;
	ipc = pub->ipc;
	ipc_segs = pub->ipc_segs;
	memcpy(ipc_why, pub->ipc_why, sizeof(ipc_why));
	rte_spinlock_unlock(&pub->lock);
	now = kvl_now_ns();
	row_start(k);
	put_int(k, "peer", (int)p);
	put_str(k, "addr", addr);
	put_str(k, "name", name);
	put_str(k, "state", kvl_peer_state_name(state));
	put_str(k, "role", pub->initiator ? "client" : "server");
	put_u64(k, "last_heartbeat_ms", now > last ? (now - last) / 1000000 : 0);
	put_u64(k, "rtt_us", pub->rtt_us);
	put_int(k, "data_conns", (int)conns);
	put_int(k, "segments", (int)segs);
	put_u64(k, "tx_bytes", st.tx_bytes);
	put_u64(k, "rx_bytes", st.rx_bytes);
	put_u64(k, "bytes_written", st.bytes_written);
	put_u64(k, "bytes_read", st.bytes_read);
	put_u64(k, "served_bytes", st.served_bytes);
	put_str(k, "fail_status", fail ? kvl_status_name(fail) : "");
	put_str(k, "fail_reason", why);
	/* issue 20: where the peer runs, and whether its READs go over CUDA IPC (else why) */
	put_str(k, "same_host", same_host < 0 ? "unknown" : same_host ? "true" : "false");
	put_str(k, "transport_ipc", ipc ? "ipc" : ipc_why);
	put_int(k, "ipc_segments", (int)ipc_segs);
}

static void peers_rows(struct kvl_runtime *rt, struct sink *k)
{
	for (uint32_t p = 0; p < KVL_MAX_PEERS_RT; p++) {
		struct kvl_peer_pub *pub = kvl_peer_get(&rt->peers, p);

		if (pub && __atomic_load_n(&pub->state, __ATOMIC_ACQUIRE) != KVL_PEER_FREE)
			peer_row(rt, p, pub, k);
	}
}

/* Every peer the control path knows (connecting, ready or dead), in column form. */
static int tel_peers(const char *cmd, const char *params, struct rte_tel_data *d)
{
	(void)cmd;
	(void)params;
	return table_reply(d, peers_rows); /* no peer: an empty dict */
}

static void stats_transport(struct sink *k, const char *tr, const struct kvl_xport_stats *st)
{
	char name[64];

#define U(f)                                                \
	do {                                                \
		snprintf(name, sizeof(name), "%s/" #f, tr); \
		put_u64(k, name, st->f);                    \
	} while (0)
	U(posted_write);
	U(posted_read);
	U(done_write);
	U(done_read);
	U(bytes_written);
	U(bytes_read);
	U(served_write);
	U(served_read);
	U(served_bytes);
	U(tx_bytes);
	U(rx_bytes);
	if (strcmp(tr, "tcp") == 0) { /* READs into VRAM through the bounce (tcp_data.h) */
		U(gpu_bounce_bytes);
		U(gpu_copies);
		U(gpu_copies_done);
		U(gpu_copy_ns);
		U(gpu_bounce_waits);
	}
	if (strcmp(tr, "tcp") != 0) {
		U(qp_posted);
		U(qp_signaled);
		U(qp_cqes);
		U(qp_posts);
		U(qp_recoveries);
		U(qp_resyncs);
		U(qp_replayed);
		U(qp_notes);
		U(qp_sge_wrs);
		U(qp_notes_dropped);
	}
#undef U
	for (int s = 1; s < KVL_STATUS_COUNT; s++) {
		/* telemetry names: [A-Za-z0-9_/] */
		snprintf(name, sizeof(name), "%s/failed/%s", tr, kvl_status_name(s));
		for (char *c = name; *c; c++)
			if (*c == '-')
				*c = '_';
		put_u64(k, name, st->failed[s]);
		snprintf(name, sizeof(name), "%s/refused/%s", tr, kvl_status_name(s));
		for (char *c = name; *c; c++)
			if (*c == '-')
				*c = '_';
		put_u64(k, name, st->refused[s]);
	}
}

/*
 * Totals per transport since start: "tcp/done_write", "verbs/qp_cqes", "tcp/failed/conn_lost".
 * tcp counters are always there; a transport's own only when one of its NICs is. On RDMA the
 * serving side's CPU sees nothing of the peer's one-sided transfers: "served" stays 0 there.
 */
static void stats_row(struct kvl_runtime *rt, struct sink *k)
{
	struct kvl_xport_stats tcp = { 0 }, rdma = { 0 };
	uint64_t ntf_queued = 0, ntf_dropped = 0, tx, rx;
	bool have_rdma = false;

	for (unsigned n = 0; n < rt->cfg.n_nics; n++) {
		if (rt->nic[n].io == NULL)
			continue;
		ntf_queued += rt->nic[n].io->ntf_queued;
		ntf_dropped += rt->nic[n].io->ntf_dropped;
		if (rt->nic[n].vdev) {
			have_rdma = true;
			kvl_nic_io_total(rt->nic[n].io, &rdma);
		} else {
			kvl_nic_io_total(rt->nic[n].io, &tcp);
		}
	}
	stats_transport(k, "tcp", &tcp);
	if (have_rdma)
		stats_transport(k, "verbs", &rdma);
	/* WRITE_WITH_IMM notices: queued for kvl_poll_notices(), or lost to a full ring */
	put_u64(k, "notices/queued", ntf_queued);
	put_u64(k, "notices/dropped", ntf_dropped);
	put_u64(k, "control/auth_failures", kvl_control_auth_failures(rt));
	put_u64(k, "control/preauth_evicted", kvl_control_preauth_evicted(rt));
	put_u64(k, "control/data_preauth_evicted", kvl_control_data_preauth_evicted(rt));
	put_u64(k, "control/tls_failures", kvl_control_tls_failures(rt));
	kvl_control_req_cancels(rt, &tx, &rx);
	put_u64(k, "control/req_cancels_tx", tx);
	put_u64(k, "control/req_cancels_rx", rx);
}

static int tel_stats(const char *cmd, const char *params, struct rte_tel_data *d)
{
	(void)cmd;
	(void)params;
	return dict_reply(d, stats_row);
}

struct seg_walk {
	const struct kvl_runtime *rt;
	struct sink *k;
};

static void seg_row(void *arg, const struct kvl_local_seg *s)
{
	struct seg_walk *w = arg;
	struct sink *k = w->k;
	uint64_t reg_ns = 0, worst = 0;
	int rdma = 0;
	char reg[128];
	size_t len = 0;
	bool gpu = s->mem.kind == KVL_MEM_GPU;

	/* how each NIC reaches it: "lo:none,mlx5_0:dmabuf" (tcp NICs register nothing) */
	reg[0] = '\0';
	for (unsigned n = 0; n < w->rt->cfg.n_nics && len < sizeof(reg); n++)
		len += snprintf(reg + len, sizeof(reg) - len, "%s%s:%s", n ? "," : "",
				w->rt->cfg.nics[n].label, kvl_seg_reg_name(s->reg[n]));
	for (unsigned n = 0; n < w->rt->cfg.n_nics; n++) {
		if (w->rt->nic[n].vdev == NULL)
			continue;
		rdma++;
		reg_ns += s->reg_ns[n];
		worst = s->reg_ns[n] > worst ? s->reg_ns[n] : worst;
	}
	put_int(k, "id", (int)s->desc.id);
	put_str(k, "name", s->desc.name);
	put_u64(k, "length", s->desc.length);
	put_str(k, "access",
		s->desc.flags == 3   ? "readwrite"
		: s->desc.flags == 1 ? "read"
		: s->desc.flags == 2 ? "write"
				     : "none");
	put_int(k, "rdma_nics", rdma);
	put_u64(k, "reg_us", reg_ns / 1000);	/* over every RDMA NIC */
	put_u64(k, "reg_us_max", worst / 1000); /* the slowest one */
	put_str(k, "kind", gpu ? "gpu" : "host");
	put_int(k, "gpu", gpu ? s->mem.device : -1);
	put_str(k, "pci_bus_id", gpu ? s->mem.pci_bus_id : "");
	put_str(k, "reg", reg);
}

/* Local segments in column form, with what registering each for RDMA cost. */
static int tel_segments(const char *cmd, const char *params, struct rte_tel_data *d)
{
	struct kvl_runtime *rt = runtime_or_null();
	struct sink k = { 0 };
	struct seg_walk w = { .rt = rt, .k = &k };

	(void)cmd;
	(void)params;
	if (rt == NULL)
		return -EAGAIN;
	kvl_segs_visit(&rt->segs, seg_row, &w);
	return sink_finish(&k, d);
}

static void qps_rows(struct kvl_runtime *rt, struct sink *k)
{
	for (unsigned n = 0; n < rt->cfg.n_nics; n++) {
		const struct kvl_nic_io *io = rt->nic[n].io;

		if (io == NULL || rt->nic[n].vdev == NULL)
			continue;
		for (unsigned i = 0; i < KVL_SLOTS_PER_LCORE; i++) {
			const struct kvl_xport_stats *st = &io->stats[i].tcp;
			uint64_t errors = 0, last;

			if (__atomic_load_n(&io->slot[i].x.ops, __ATOMIC_ACQUIRE) == NULL)
				continue;
			for (int s = 1; s < KVL_STATUS_COUNT; s++)
				errors += __atomic_load_n(&st->failed[s], __ATOMIC_RELAXED);
			row_start(k);
			put_str(k, "nic", rt->cfg.nics[n].label);
			put_str(k, "device", rt->cfg.nics[n].device);
			put_int(k, "slot", (int)i);
			put_int(k, "peer", (int)io->stats[i].peer);
			put_str(k, "state",
				kvl_qp_state_name(
					__atomic_load_n(&st->qp_state, __ATOMIC_RELAXED)));
			put_u64(k, "posted", __atomic_load_n(&st->qp_posted, __ATOMIC_RELAXED));
			put_u64(k, "signaled", __atomic_load_n(&st->qp_signaled, __ATOMIC_RELAXED));
			put_u64(k, "cqes", __atomic_load_n(&st->qp_cqes, __ATOMIC_RELAXED));
			put_u64(k, "posts", __atomic_load_n(&st->qp_posts, __ATOMIC_RELAXED));
			put_u64(k, "completed",
				__atomic_load_n(&st->qp_completed, __ATOMIC_RELAXED));
			put_u64(k, "errors", errors);
			put_u64(k, "recoveries",
				__atomic_load_n(&st->qp_recoveries, __ATOMIC_RELAXED));
			put_u64(k, "resyncs", __atomic_load_n(&st->qp_resyncs, __ATOMIC_RELAXED));
			put_u64(k, "replayed", __atomic_load_n(&st->qp_replayed, __ATOMIC_RELAXED));
			put_u64(k, "stall_resets",
				__atomic_load_n(&st->qp_stall_resets, __ATOMIC_RELAXED));
			put_u64(k, "drain_timeouts",
				__atomic_load_n(&st->qp_drain_timeouts, __ATOMIC_RELAXED));
			put_u64(k, "outstanding",
				__atomic_load_n(&st->qp_outstanding, __ATOMIC_RELAXED));
			put_u64(k, "bytes_written",
				__atomic_load_n(&st->bytes_written, __ATOMIC_RELAXED));
			put_u64(k, "bytes_read",
				__atomic_load_n(&st->bytes_read, __ATOMIC_RELAXED));
			/* Raw, so that errors the typed statuses merge can be told apart. */
			last = __atomic_load_n(&st->qp_last_wc_status, __ATOMIC_RELAXED);
			put_str(k, "last_error",
				last ? ibv_wc_status_str((enum ibv_wc_status)last) : "");
			put_u64(k, "last_vendor_err",
				__atomic_load_n(&st->qp_last_vendor_err, __ATOMIC_RELAXED));
			put_u64(k, "arms", __atomic_load_n(&st->qp_arms, __ATOMIC_RELAXED));
			put_u64(k, "cq_events",
				__atomic_load_n(&st->qp_cq_events, __ATOMIC_RELAXED));
			put_u64(k, "doorbells",
				__atomic_load_n(&st->qp_doorbells, __ATOMIC_RELAXED));
			put_u64(k, "bf_copies",
				__atomic_load_n(&st->qp_bf_copies, __ATOMIC_RELAXED));
			put_u64(k, "stray_cqes",
				__atomic_load_n(&st->qp_stray_cqes, __ATOMIC_RELAXED));
		}
	}
}

/* Every RDMA queue pair in column form: its NIC, slot, peer, and what the NIC did. */
static int tel_qps(const char *cmd, const char *params, struct rte_tel_data *d)
{
	(void)cmd;
	(void)params;
	return table_reply(d, qps_rows);
}

/* ---- the scheduler of each NIC lcore: /kvlane/sched, /kvlane/requests ---- */

/* Snapshots are large (a row per request): one at a time, off the handler's stack. */
static struct kvl_nsched_snap tel_snap;
static pthread_mutex_t tel_snap_lock = PTHREAD_MUTEX_INITIALIZER;

static void sched_row(const struct kvl_runtime *rt, unsigned nic, const struct kvl_nsched_snap *sn,
		      struct sink *k)
{
	const struct kvl_sched_stats *st = &sn->st;
	const struct kvl_nsched_counters *ct = &sn->ct;
	uint64_t staging = (uint64_t)rt->cfg.sched.staging_mb << 20;

	row_start(k);
	put_str(k, "nic", rt->cfg.nics[nic].label);
	put_str(k, "transport", rt->cfg.sched.null_transport ? "null" : "peer");
	put_str(k, "staging", rt->staging_place == KVL_STAGING_GPU ? "gpu" : "host");
	put_int(k, "staging_gpu",
		rt->staging_place == KVL_STAGING_GPU ? kvl_staging_gpu_of(rt, nic) : -1);
	put_str(k, "staging_why", rt->staging_why);
	put_u64(k, "staging_bytes", staging - staging % ((uint64_t)rt->cfg.sched.slot_kb << 10));
	put_u64(k, "slot_bytes", (uint64_t)rt->cfg.sched.slot_kb << 10);
	put_u64(k, "budget", st->budget);
	put_u64(k, "budget_in", sn->budget_in);
	put_u64(k, "in_use", st->staged);
	put_int(k, "slots", (int)st->slots);
	put_int(k, "slots_free", (int)st->slots_free);
	put_u64(k, "orphan_bytes", st->orphan_bytes);
	put_u64(k, "windows", st->windows);
	put_int(k, "active", (int)st->active);
	put_int(k, "waiting", (int)st->waiting);
	put_int(k, "ended", (int)st->ended);
	put_int(k, "runnable", (int)st->runnable);
	put_int(k, "xfers_inflight", (int)st->xfers_inflight);
	put_u64(k, "posted_xfers", st->posted_xfers);
	put_u64(k, "posted_blocks", st->posted_blocks);
	put_u64(k, "completed_ok", st->completed_ok);
	put_u64(k, "completed_err", st->completed_err);
	put_u64(k, "late_completions", st->late_completions);
	put_u64(k, "cancels", st->cancels);
	put_u64(k, "starved_serves", st->starved_serves);
	put_u64(k, "evicted_blocks", st->evicted_blocks);
	put_u64(k, "evicted_bytes", st->evicted_bytes);
	put_u64(k, "dest_blocks", st->dest_blocks);
	put_u64(k, "xfer_ps_per_byte", st->xfer_ps_per_byte);
	put_u64(k, "compute_ns_decode", st->compute_ns[0]);
	put_u64(k, "compute_ns_prefill", st->compute_ns[1]);
	put_u64(k, "opened", ct->opened);
	put_u64(k, "open_failed", ct->open_failed);
	put_u64(k, "done_cmds", ct->done_cmds);
	put_u64(k, "cancel_cmds", ct->cancel_cmds);
	put_u64(k, "cmd_errors", ct->cmd_errors);
	put_u64(k, "bad_completions", ct->bad_completions);
	put_u64(k, "posted", ct->posted);
	put_u64(k, "post_failed", ct->post_failed);
	put_u64(k, "no_conn", ct->no_conn);
	put_u64(k, "stalled", ct->stalled);
	put_u64(k, "events", ct->events);
	put_u64(k, "peer_cancels", ct->peer_cancels);
	put_u64(k, "budget_changes", ct->budget_changes);
	/* step flags (KVL_REQ_STEP_FLAGS): entries held, requests, refusals, READY, DONE */
	put_u64(k, "flags_in_use", ct->flags_in_use);
	put_u64(k, "flag_requests", ct->flag_reqs);
	put_u64(k, "flag_nospc", ct->flag_nospc);
	put_u64(k, "flags_ready_written", ct->ready_written);
	put_u64(k, "flags_done_seen", ct->done_seen);
	/* requests that ended DONE, by time from open: "latency_hist/<bound_us>" counts those
	 * above the bound before it, "latency_hist/inf" those above the last */
	{
		static const char *const names[KVL_NSCHED_LAT_BUCKETS + 1] = {
#define B(us) "latency_hist/" #us
			B(100),
			B(250),
			B(500),
			B(1000),
			B(2500),
			B(5000),
			B(10000),
			B(25000),
			B(50000),
			B(100000),
			B(250000),
			B(500000),
			B(1000000),
			B(2500000),
			B(5000000),
			B(10000000),
			"latency_hist/inf",
#undef B
		};
		uint64_t n = 0;

		for (unsigned b = 0; b <= KVL_NSCHED_LAT_BUCKETS; b++) {
			put_u64(k, names[b], ct->lat_hist[b]);
			n += ct->lat_hist[b];
		}
		put_u64(k, "latency_count", n);
		put_u64(k, "latency_sum_us", ct->lat_sum_ns / 1000);
	}
}

static void sched_rows(struct kvl_runtime *rt, struct sink *k)
{
	pthread_mutex_lock(&tel_snap_lock);
	for (unsigned n = 0; n < rt->cfg.n_nics; n++) {
		if (rt->nic[n].sched == NULL)
			continue;
		kvl_nic_sched_read(rt->nic[n].sched, &tel_snap);
		sched_row(rt, n, &tel_snap, k);
	}
	pthread_mutex_unlock(&tel_snap_lock);
}

/* Each NIC lcore's scheduler in column form: budget, bytes in use, requests, windows. */
static int tel_sched(const char *cmd, const char *params, struct rte_tel_data *d)
{
	(void)cmd;
	(void)params;
	return table_reply(d, sched_rows); /* no scheduler: an empty dict */
}

static void tier_rows(struct kvl_runtime *rt, struct sink *k)
{
	struct kvl_remote_seg segs[KVL_MAX_SEGS];
	int n_segs;

	n_segs = kvl_tier_segments(rt, segs, KVL_MAX_SEGS);
	for (unsigned n = 0; n < rt->cfg.n_nics; n++) {
		struct kvl_tier_stats t;

		if (kvl_tier_stats(rt, n, &t) < 0)
			continue;
		row_start(k);
		put_str(k, "nic", rt->cfg.nics[n].label);
		put_str(k, "method", t.engine ? "copy_engine" : "memcpy");
		put_str(k, "staging", kvl_staging_place_name(rt->staging_place));
		put_int(k, "segments", n_segs);
		put_u64(k, "reads", t.reads);
		put_u64(k, "done", t.done);
		put_u64(k, "refused", t.refused);
		put_str(k, "last_refusal", t.refused ? kvl_status_name(t.last_refusal) : "");
		put_u64(k, "bytes", t.bytes);
		put_u64(k, "copies", t.copies);
		put_u64(k, "batches", t.batches);
		put_u64(k, "copy_ns", t.copy_ns);
		put_u64(k, "inflight", t.inflight);
		put_u64(k, "engine_errors", t.engine_errors);
		put_u64(k, "handovers", t.handovers);
		put_u64(k, "handover_small", t.handover_small);
		/* the copy method per batch ([sched] tier_copy; auto: from the estimates) */
		put_str(k, "copy_method",
			t.engine ? kvl_tier_copy_name(rt->cfg.sched.tier_copy) : "memcpy");
		put_u64(k, "batches_copy_engine", t.batches_copy_engine);
		put_u64(k, "batches_gather", t.batches_gather);
		put_u64(k, "est_compute_ns", t.est_compute_ns);
		put_u64(k, "est_step_bytes", t.est_step_bytes);
		put_u64(k, "est_updates", t.est_updates);
		/* where the engine's time goes: copies per launch, each method's delivered rate
		 * under the runtime's batches (service time), AUTO's measured rates and probes */
		put_u64(k, "dest_reads", t.dest_reads);
		put_u64(k, "launches", t.eng.launches);
		put_u64(k, "small_copies", t.eng.small_copies);
		put_u64(k, "engine_copies", t.eng.engine_copies);
		put_u64(k, "svc_ns_copy_engine", t.eng.svc_ns_engine);
		put_u64(k, "svc_bytes_copy_engine", t.eng.svc_bytes_engine);
		put_u64(k, "svc_ns_gather", t.eng.svc_ns_gather);
		put_u64(k, "svc_bytes_gather", t.eng.svc_bytes_gather);
		put_u64(k, "auto_probes", t.eng.probes);
		put_u64(k, "auto_bad_samples", t.eng.bad_samples);
		put_u64(k, "auto_ce_ps_16k", t.eng.ce_ps[0]);
		put_u64(k, "auto_gather_ps_16k", t.eng.gather_ps[0]);
		put_u64(k, "auto_ce_ps_64k", t.eng.ce_ps[1]);
		put_u64(k, "auto_gather_ps_64k", t.eng.gather_ps[1]);
		put_u64(k, "auto_ce_samples_16k", t.eng.ce_samples[0]);
		put_u64(k, "auto_gather_samples_16k", t.eng.gather_samples[0]);
		put_u64(k, "auto_ce_samples_64k", t.eng.ce_samples[1]);
		put_u64(k, "auto_gather_samples_64k", t.eng.gather_samples[1]);
	}
}

/* This host's KV tier ([sched] tier), one row per NIC lcore serving it: what it moved and how. */
static int tel_tier(const char *cmd, const char *params, struct rte_tel_data *d)
{
	(void)cmd;
	(void)params;
	return table_reply(d, tier_rows); /* no tier: an empty dict */
}

/* A reply must fit DPDK's 16 KiB output buffer: at most this many request rows. */
#define TEL_REQ_ROWS 40

/* Requests the schedulers hold, in column form: the first TEL_REQ_ROWS, and how many more. */
static int tel_requests(const char *cmd, const char *params, struct rte_tel_data *d)
{
	static const char *const state[] = { "?", "waiting", "active", "ended" };
	struct kvl_runtime *rt = runtime_or_null();
	struct sink k = { 0 };
	uint64_t rows = 0, omitted = 0;
	int rc;

	(void)cmd;
	(void)params;
	if (rt == NULL)
		return -EAGAIN;
	pthread_mutex_lock(&tel_snap_lock);
	for (unsigned n = 0; n < rt->cfg.n_nics; n++) {
		if (rt->nic[n].sched == NULL)
			continue;
		kvl_nic_sched_read(rt->nic[n].sched, &tel_snap);
		for (uint32_t i = 0; i < tel_snap.n_req; i++) {
			if (rows == TEL_REQ_ROWS) {
				omitted += tel_snap.n_req - i;
				break;
			}
			rows++;
			const struct kvl_sched_req_info *q = &tel_snap.rq[i];

			put_str(&k, "nic", rt->cfg.nics[n].label);
			put_u64(&k, "req", tel_snap.rq_handle[i]);
			put_int(&k, "peer", (int)q->peer);
			put_str(&k, "class", q->cls == KVL_SCHED_DECODE ? "decode" : "prefill");
			put_str(&k, "state", state[q->state <= 3 ? q->state : 0]);
			put_u64(&k, "window", q->window);
			put_u64(&k, "floor", q->floor);
			put_u64(&k, "landed", q->landed_bytes);
			put_u64(&k, "in_flight", q->inflight_bytes);
			put_int(&k, "blocks", (int)q->blocks);
			put_int(&k, "blocks_posted", (int)q->blocks_posted);
			put_int(&k, "blocks_landed", (int)q->blocks_landed);
			put_int(&k, "evicted", (int)q->blocks_evicted);
			put_int(&k, "steps", (int)q->steps);
			put_int(&k, "steps_ready", (int)q->steps_ready);
			put_int(&k, "steps_done", (int)q->steps_done);
			put_u64(&k, "age_us", q->age_ns / 1000);
			put_u64(&k, "wait_us", q->wait_ns / 1000);
			put_str(&k, "status", q->status ? kvl_status_name(q->status) : "");
		}
	}
	pthread_mutex_unlock(&tel_snap_lock);
	rc = sink_finish(&k, d);
	if (rc == 0)
		rte_tel_data_add_dict_u64(d, "rows_omitted", omitted);
	return rc;
}

/* The one-row tables: a row of their own for the walk. */
static void gpu_rows(struct kvl_runtime *rt, struct sink *k)
{
	row_start(k);
	gpu_row(rt, k);
}

static void stats_rows(struct kvl_runtime *rt, struct sink *k)
{
	row_start(k);
	stats_row(rt, k);
}

static void (*const walkers[KVL_TEL_TABLES])(struct kvl_runtime *, struct sink *) = {
	[KVL_TEL_NICS] = nics_rows, [KVL_TEL_LCORES] = lcores_rows, [KVL_TEL_PEERS] = peers_rows,
	[KVL_TEL_QPS] = qps_rows,   [KVL_TEL_SCHED] = sched_rows,   [KVL_TEL_TIER] = tier_rows,
	[KVL_TEL_GPU] = gpu_rows,   [KVL_TEL_STATS] = stats_rows,
};

int kvl_telemetry_walk(enum kvl_tel_table t, kvl_tel_visit_fn fn, void *arg)
{
	struct sink k = { .visit = fn, .varg = arg };
	struct kvl_runtime *rt;
	int rc = 0;

	pthread_rwlock_rdlock(&tel_walk_lock);
	rt = runtime_or_null();
	if (rt == NULL) {
		pthread_rwlock_unlock(&tel_walk_lock);
		return -EAGAIN;
	}
	if ((unsigned)t < KVL_TEL_TABLES && walkers[t])
		walkers[t](rt, &k);
	else
		rc = -EINVAL;
	pthread_rwlock_unlock(&tel_walk_lock);
	return rc;
}

/* Registered before EAL starts its telemetry thread, as DPDK's own libraries do. */
/* DPDK refuses a help text of RTE_TEL_MAX_STRING_LEN bytes or more, and the command is then
 * simply missing: check the length when building. */
#define REGISTER(cmd, fn, help)                                        \
	do {                                                           \
		_Static_assert(sizeof(help) <= RTE_TEL_MAX_STRING_LEN, \
			       "help of " cmd " too long for DPDK");   \
		rte_telemetry_register_cmd(cmd, fn, help);             \
	} while (0)

RTE_INIT(kvl_telemetry_register)
{
	REGISTER("/kvlane/info", tel_info,
		 "kvlane version, name, pid, uptime, config file. No parameters");
	REGISTER("/kvlane/config", tel_config,
		 "Effective configuration as section/key: value. "
		 "Parameter: a section name (optional)");
	REGISTER("/kvlane/lcores", tel_lcores,
		 "All lcores in column form: lcore, cpu, socket, role, nic, "
		 "loop_iterations, busy_pct, ... No parameters");
	REGISTER("/kvlane/lcore", tel_lcore,
		 "One lcore's row of /kvlane/lcores. Parameter: lcore id");
	REGISTER("/kvlane/nics", tel_nics,
		 "All NICs in column form: nic, device, port, transport, numa_node, "
		 "lcore, ... No parameters");
	REGISTER("/kvlane/gpu", tel_gpu,
		 "Staging budget (free VRAM - reserve, or [sched] budget_mb) and the "
		 "GPU it is sampled from. No parameters");
	REGISTER("/kvlane/memory", tel_memory,
		 "The [memory] pool: size, chunks used/free, page size, hugepage, "
		 "reg_ns/<nic>, cuda_reg_ns. No parameters");
	REGISTER("/kvlane/peers", tel_peers,
		 "Peers in column form: addr, name, state, role, last_heartbeat_ms, "
		 "rtt_us, data_conns, bytes each way, failure. No parameters");
	REGISTER("/kvlane/stats", tel_stats,
		 "Transfer counters per transport since start: ops, bytes, errors "
		 "by type. No parameters");
	REGISTER("/kvlane/qps", tel_qps,
		 "RDMA queue pairs in column form: nic, slot, peer, posted, cqes, errors, "
		 "recoveries, resyncs, ... No parameters");
	REGISTER("/kvlane/nic", tel_nic, "One NIC's row of /kvlane/nics. Parameter: NIC label");
	REGISTER("/kvlane/segments", tel_segments,
		 "Local segments, column form: id, name, length, access, kind (host/gpu), "
		 "gpu, pci_bus_id, reg (per NIC), reg_us. No parameters");
	REGISTER("/kvlane/sched", tel_sched,
		 "Schedulers per NIC lcore, column form: staging (host/gpu), budget, "
		 "in_use, windows, active, waiting, counters. No parameters");
	REGISTER("/kvlane/tier", tel_tier,
		 "Host KV tier per NIC lcore, column form: method, reads, done, refused, "
		 "bytes, copies, batches, copy_ns. No parameters");
	REGISTER("/kvlane/requests", tel_requests,
		 "Requests in column form: req, class, window, landed, in_flight, "
		 "evicted, steps_ready, steps_done, age_us. No parameters");
}
