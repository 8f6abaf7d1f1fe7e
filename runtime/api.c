/* SPDX-License-Identifier: BSD-3-Clause */
/* The public C API (include/kvlane/kvlane.h): start/stop, segments, peers, post and poll. */
#include <errno.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <rte_eal.h>
#include <rte_errno.h>
#include <rte_malloc.h>
#include <rte_ring.h>
#include <rte_ring_elem.h>

#include "control/control.h"
#include "kvlane/kvlane.h"
#include "lifecycle.h"
#include "peers.h"
#include "prometheus.h"
#include "runtime.h"
#include "seg_place.h"
#include "segments.h"
#include "telemetry.h"
#include "tier.h"

_Static_assert(sizeof(struct kvl_completion) == sizeof(struct kvl_wc) &&
		       offsetof(struct kvl_completion, cookie) == offsetof(struct kvl_wc, wr_id) &&
		       offsetof(struct kvl_completion, bytes) == offsetof(struct kvl_wc, bytes) &&
		       offsetof(struct kvl_completion, status) == offsetof(struct kvl_wc, status),
	       "completions leave the completion ring as they are");
_Static_assert((int)KVL_WRITE == (int)KVL_OP_WRITE && (int)KVL_READ == (int)KVL_OP_READ,
	       "public and internal op codes agree");
_Static_assert((int)KVL_REMOTE_READ == (int)KVL_SEG_REMOTE_READ &&
		       (int)KVL_REMOTE_WRITE == (int)KVL_SEG_REMOTE_WRITE,
	       "public and internal access bits agree");

/* ---- start and stop ---- */

/* ---- [eal] (issue 17): EAL inside a library ---- */

/*
 * EAL starts once per process (a second rte_eal_init fails, also after rte_eal_cleanup), so
 * kvlane allows one runtime per process and says so: 0 never started, 1 starting or running,
 * 2 stopped (it cannot start again).
 */
static _Atomic int eal_state;

#define EAL_INI_MAX_ARGS 64

/* Built from [eal] for rte_eal_init, which keeps pointers to the strings: static, and used
 * once, by the one start that passed the eal_state guard. */
static struct {
	char text[KVL_EAL_ARGS_LEN + KVL_EAL_LCORES_LEN + KVL_NAME_LEN + 32];
	char *argv[EAL_INI_MAX_ARGS];
} eal_ini;

/* [eal] as EAL's argv after @prog; the count, or -E2BIG past EAL_INI_MAX_ARGS. */
static int eal_argv_from_ini(const struct kvl_eal_conf *e, char *prog)
{
	char *p = eal_ini.text, *end = eal_ini.text + sizeof(eal_ini.text), *save = NULL;
	int n = 0;

#define EAL_ARG(...)                                                          \
	do {                                                                  \
		int len_ = snprintf(p, (size_t)(end - p), __VA_ARGS__);       \
		if (n >= EAL_INI_MAX_ARGS - 2 || len_ < 0 || len_ >= end - p) \
			return -E2BIG;                                        \
		eal_ini.argv[n++] = p;                                        \
		p += len_ + 1;                                                \
	} while (0)
	eal_ini.argv[n++] = prog;
	if (e->lcores[0]) {
		EAL_ARG("--lcores");
		EAL_ARG("%s", e->lcores);
	}
	if (e->memory_mb) {
		EAL_ARG("-m");
		EAL_ARG("%u", e->memory_mb);
	}
	if (e->file_prefix[0]) {
		EAL_ARG("--file-prefix");
		EAL_ARG("%s", e->file_prefix);
	}
	if (e->in_memory)
		EAL_ARG("--in-memory");
	if (e->no_huge)
		EAL_ARG("--no-huge");
	if (e->no_pci)
		EAL_ARG("--no-pci");
	/* checked by the INI's parser: printable, no quotes; split on blanks as documented */
	if (e->extra_args[0]) {
		char *args = p;

		EAL_ARG("%s", e->extra_args); /* copied, then cut in place into arguments */
		n--;
		for (char *t = strtok_r(args, " \t", &save); t; t = strtok_r(NULL, " \t", &save)) {
			if (n >= EAL_INI_MAX_ARGS - 2)
				return -E2BIG;
			eal_ini.argv[n++] = t;
		}
	}
#undef EAL_ARG
	eal_ini.argv[n] = NULL;
	return n;
}

/*
 * EAL's argv: the caller's, or [eal]'s when the caller passes none (no argv, or only a
 * program name: an engine, or kvlaned run without "EAL options --"); plus "--no-telemetry"
 * when the INI turns telemetry off.
 */
static char **eal_argv_for(const struct kvl_start_args *a, const struct kvl_config *cfg, int *argc)
{
	char **src = a->eal_argv;
	int n_src = a->eal_argc, n = 0;
	char **v;

	if (n_src <= 1 || src == NULL) {
		n_src = eal_argv_from_ini(&cfg->eal, n_src == 1 && src ? src[0] : (char *)"kvlane");
		if (n_src < 0)
			return NULL;
		src = eal_ini.argv;
	}
	v = calloc((size_t)n_src + 2, sizeof(*v));
	if (v == NULL)
		return NULL;
	for (int i = 0; i < n_src; i++)
		v[n++] = src[i];
	if (!cfg->telemetry.enable)
		v[n++] = (char *)"--no-telemetry";
	v[n] = NULL;
	*argc = n;
	return v;
}

/* Refuse a second start in this process, before anything is read or opened. */
static bool eal_start_refused(char *err, size_t errlen, int *stage)
{
	int st = atomic_load(&eal_state);

	if (st == 0)
		return false;
	snprintf(err, errlen,
		 "kvl_start: EAL %s in this process, and EAL starts once per process: one kvlane "
		 "runtime per process%s",
		 st == 1 ? "already runs (an earlier kvl_start)"
			 : "was started and stopped (kvl_stop) already",
		 st == 1 ? "; use the runtime that kvl_start returned"
			 : "; start kvlane again in a new process");
	*stage = KVL_START_EAL;
	errno = EALREADY;
	return true;
}
/* ---- end [eal] ---- */

struct kvl_runtime *kvl_start(const struct kvl_start_args *a, char *err, size_t errlen, int *stage)
{
	static struct kvl_conf_errors errs;
	struct kvl_runtime *rt = calloc(1, sizeof(*rt));
	char **eal_argv;
	int eal_argc, rc;
	size_t len = 0;

	err[0] = '\0';
	if (eal_start_refused(err, errlen, stage)) {
		free(rt);
		return NULL;
	}
	if (rt == NULL) {
		snprintf(err, errlen, "out of memory");
		*stage = KVL_START_HOST;
		return NULL;
	}
	kvl_segs_init(&rt->segs);
	/* Everything that can be wrong in the INI is found before anything starts. */
	rc = kvl_config_load_sets(a->config, a->sets, a->n_sets, &rt->cfg, &errs);
	if (rc < 0) {
		for (unsigned i = 0; i < errs.count && len < errlen; i++)
			len += snprintf(err + len, errlen - len, "%s%s", i ? "\n" : "",
					errs.msg[i]);
		if (errs.dropped && len < errlen)
			snprintf(err + len, errlen - len, "\n(%u more errors not shown)",
				 errs.dropped);
		*stage = KVL_START_CONFIG;
		goto fail;
	}
	snprintf(rt->sysfs_root, sizeof(rt->sysfs_root), "%s",
		 a->sysfs_root ? a->sysfs_root : "/sys");
	if (kvl_runtime_discover(rt, err, errlen) < 0) {
		*stage = KVL_START_HOST;
		goto fail;
	}
	{
		int idle = 0;

		/* two threads racing here: one starts EAL, the other is refused */
		if (!atomic_compare_exchange_strong(&eal_state, &idle, 1)) {
			eal_start_refused(err, errlen, stage);
			goto fail;
		}
	}
	eal_argv = eal_argv_for(a, &rt->cfg, &eal_argc);
	if (eal_argv == NULL) {
		snprintf(err, errlen, "out of memory, or [eal] makes over %d EAL arguments",
			 EAL_INI_MAX_ARGS - 2);
		atomic_store(&eal_state, 0);
		*stage = KVL_START_HOST;
		goto fail;
	}
	rc = rte_eal_init(eal_argc, eal_argv);
	free(eal_argv); /* EAL keeps pointers to the strings, not to this array */
	if (rc < 0 && rte_errno == EALREADY) {
		/* the host program started EAL itself: kvlane cannot take it over */
		snprintf(err, errlen,
			 "EAL initialisation failed: EAL was already initialised in this process "
			 "(by the host program, or an earlier start EAL did not undo); EAL starts "
			 "once per process");
		atomic_store(&eal_state, 0);
		*stage = KVL_START_EAL;
		errno = EALREADY;
		goto fail;
	}
	if (rc < 0) {
		/* a refused argument list leaves EAL startable (its own run-once is undone) */
		atomic_store(&eal_state, 0);
		/* Some EAL failures (a --file-prefix already in use) leave rte_errno at 0: then
		 * EAL's own lines above are the explanation. */
		snprintf(err, errlen, "EAL initialisation failed: %s; check the EAL arguments",
			 rte_errno ? rte_strerror(rte_errno) : "see EAL's messages above");
		*stage = KVL_START_EAL;
		goto fail;
	}
	rc = kvl_runtime_start(rt, err, errlen);
	if (rc < 0) {
		if (err[0] == '\0')
			snprintf(err, errlen, "%s", strerror(-rc));
		rte_eal_cleanup();
		atomic_store(&eal_state, 2); /* cleaned up: EAL cannot start again */
		*stage = KVL_START_HOST;
		goto fail;
	}
	/* /metrics after the runtime is up (it reads what start built); a taken port fails the
	 * start, as the control port does. */
	rc = kvl_prom_start(rt, err, errlen);
	if (rc < 0) {
		kvl_runtime_stop(rt);
		rte_eal_cleanup();
		atomic_store(&eal_state, 2);
		*stage = KVL_START_HOST;
		goto fail;
	}
	kvl_telemetry_attach(rt);
	return rt;
fail:
	kvl_segs_fini(&rt->segs);
	free(rt);
	return NULL;
}

void kvl_stop(struct kvl_runtime *rt)
{
	if (rt == NULL)
		return;
	kvl_telemetry_attach(NULL);
	kvl_prom_stop();
	kvl_runtime_stop(rt);
	/* The lcore states stay: a telemetry reply may still be reading them, and
	 * rte_eal_cleanup() releases EAL memory as a whole. */
	rte_eal_cleanup();
	atomic_store(&eal_state, 2);
	kvl_segs_fini(&rt->segs);
	free(rt);
}

const char *kvl_listen_addr(const struct kvl_runtime *rt)
{
	return kvl_control_listen_addr(rt);
}

/* ---- segments ---- */

/* Why the thread's last segment call failed (kvl_seg_error). */
static __thread char seg_err[512];

const char *kvl_seg_error(void)
{
	return seg_err;
}

static int geom_desc(const struct kvl_seg_geom *g, unsigned access, struct kvl_seg_desc *d)
{
	uint64_t bytes;

	memset(d, 0, sizeof(*d));
	if (g->layers == 0 || g->blocks == 0 || g->block_bytes == 0 ||
	    (g->planes != 1 && g->planes != 2) ||
	    (access & ~(unsigned)(KVL_REMOTE_READ | KVL_REMOTE_WRITE)))
		return -EINVAL;
	/* Checked before it wraps: a wrapped length registered a tiny segment peers were told
	 * was huge (issue 16). */
	if (kvl_seg_bytes(g->layers, g->planes, g->blocks, g->block_bytes, &bytes) != 0)
		return -EOVERFLOW;
	kvl_seg_desc_make(g->layers, g->planes, g->blocks, g->block_bytes, access, d);
	return d->length > (1ull << 40) ? -E2BIG : 0;
}

static void seg_out(const struct kvl_seg_desc *d, uint32_t id, void *base, struct kvl_segment *out)
{
	if (out == NULL)
		return;
	out->id = id;
	out->base = base;
	out->length = d->length;
	out->geom = (struct kvl_seg_geom){ .layers = d->n_layers,
					   .planes = d->n_planes,
					   .blocks = d->block_count,
					   .block_bytes = d->block_size };
	out->mem = KVL_MEM_HOST;
	out->gpu = -1;
}

int kvl_seg_alloc(struct kvl_runtime *rt, const char *name, const struct kvl_seg_geom *g,
		  unsigned access, struct kvl_segment *out)
{
	int socket = rt->nic[0].lcore ? rt->nic[0].lcore->socket : SOCKET_ID_ANY;
	char what[96], msg[KVL_ERR_LEN];
	struct kvl_seg_desc d;
	uint32_t id;
	void *mem;
	int rc = geom_desc(g, access, &d);

	if (rc < 0)
		return rc;
	/* host memory: carved from the [memory] pool when there is one (its registration) */
	snprintf(what, sizeof(what), "kvl_seg_alloc(\"%.64s\")", name ? name : "");
	mem = kvl_segs_host_alloc(&rt->segs, what, d.length, socket, msg, sizeof(msg));
	if (mem == NULL) {
		KVL_LOG(ERR, "%s", msg);
		return -ENOMEM;
	}
	rc = kvl_segs_add(&rt->segs, name, mem, mem, &d, &id);
	if (rc < 0) {
		kvl_segs_host_free(&rt->segs, mem);
		return rc;
	}
	kvl_control_segments_changed(rt); /* peers hear of it now, not at the next tick */
	seg_out(&d, id, mem, out);
	return 0;
}

/* The end of kvl_seg_alloc_gpu / kvl_seg_register: log a refusal (its words are in seg_err),
 * or tell peers and the caller, with the kind of memory (@gpu: the device, -1 for host). */
static int seg_done(struct kvl_runtime *rt, int rc, const struct kvl_seg_desc *d, uint32_t id,
		    void *base, int gpu, struct kvl_segment *out)
{
	if (rc < 0) {
		KVL_LOG(ERR, "%s", seg_err);
		return rc;
	}
	kvl_control_segments_changed(rt); /* peers hear of it now, not at the next tick */
	seg_out(d, id, base, out);
	if (out != NULL && gpu >= 0) {
		out->mem = KVL_MEM_GPU;
		out->gpu = gpu;
	}
	return 0;
}

int kvl_seg_alloc_gpu(struct kvl_runtime *rt, const char *name, const struct kvl_seg_geom *g,
		      unsigned access, int gpu, struct kvl_segment *out)
{
	struct kvl_seg_desc d;
	uint32_t id = 0;
	void *mem = NULL;
	int rc = geom_desc(g, access, &d);

	seg_err[0] = '\0';
	if (rc < 0 || name == NULL) {
		snprintf(seg_err, sizeof(seg_err), "bad geometry, access bits or name");
		return rc < 0 ? rc : -EINVAL;
	}
	if (gpu == KVL_GPU_CONFIGURED)
		gpu = rt->gpu.open ? rt->gpu.device_id : (int)rt->cfg.gpu.device_id;
	rc = kvl_seg_place_gpu(&rt->segs, &rt->gpu, name, gpu, &d, false, 0, &id, &mem, seg_err,
			       sizeof(seg_err));
	return seg_done(rt, rc, &d, id, mem, gpu, out);
}

int kvl_seg_register(struct kvl_runtime *rt, const char *name, void *base,
		     const struct kvl_seg_geom *g, unsigned access, struct kvl_segment *out)
{
	struct kvl_mem_info mi = { .kind = KVL_MEM_HOST, .device = -1 };
	struct kvl_seg_desc d;
	uint32_t id = 0;
	int rc = geom_desc(g, access, &d);

	seg_err[0] = '\0';
	if (rc < 0 || base == NULL || name == NULL) {
		snprintf(seg_err, sizeof(seg_err), "bad geometry, access bits, name or base");
		return rc < 0 ? rc : -EINVAL;
	}
	/* host or GPU memory: detected, and refused when it is neither whole */
	rc = kvl_seg_place_register(&rt->segs, &rt->gpu, name, base, &d, &id, &mi, seg_err,
				    sizeof(seg_err));
	return seg_done(rt, rc, &d, id, base, mi.kind == KVL_MEM_GPU ? mi.device : -1, out);
}

/* ---- peers ---- */

int kvl_connect(struct kvl_runtime *rt, const char *addr, unsigned timeout_ms, kvl_peer_t *peer,
		char *err, size_t errlen)
{
	return kvl_control_connect(rt, addr, timeout_ms, peer, err, errlen);
}

int kvl_peer_segments(struct kvl_runtime *rt, kvl_peer_t peer, struct kvl_remote_seg *out,
		      unsigned max)
{
	struct kvl_peer_pub *pub;
	int n;

	if (peer == KVL_PEER_LOCAL_TIER)
		return kvl_tier_segments(rt, out, max);
	pub = kvl_peer_ready(&rt->peers, peer);
	if (pub == NULL)
		return -ENOTCONN;
	rte_spinlock_lock(&pub->lock);
	n = (int)pub->n_segs;
	for (unsigned i = 0; i < pub->n_segs && i < max; i++)
		kvl_peer_seg_out(&pub->seg[i], pub->seg[i].flags, &out[i]);
	rte_spinlock_unlock(&pub->lock);
	return n;
}

/* ---- transfers ---- */

/* The checks kvl_post() makes of one transfer before it takes any: 0 or a negative errno. */
static int xfer_check(const struct kvl_runtime *rt, const struct kvl_xfer *x, bool rdma_only)
{
	uint64_t sum = 0;

	if (rt->reqs && (x->cookie >> 63)) /* the scheduler's mark (kvl_req_open) */
		return -EINVAL;
	if ((x->op != KVL_WRITE && x->op != KVL_READ) || (x->flags & ~(uint32_t)KVL_XFER_NOTIFY) ||
	    ((x->flags & KVL_XFER_NOTIFY) && x->op != KVL_WRITE) || x->n_iov == 1 ||
	    x->n_iov > KVL_MAX_IOV || (x->n_iov && x->iov == NULL))
		return -EINVAL;
	if ((x->n_iov || (x->flags & KVL_XFER_NOTIFY)) && !rdma_only)
		return -EOPNOTSUPP;
	if (x->n_iov == 0)
		return kvl_segs_find(&rt->segs, x->local, x->length) ? 0 : -EFAULT;
	for (uint32_t k = 0; k < x->n_iov; k++) {
		if (x->iov[k].len == 0)
			return -EINVAL;
		if (kvl_segs_find(&rt->segs, x->iov[k].base, x->iov[k].len) == 0)
			return -EFAULT;
		sum += x->iov[k].len;
	}
	return sum == x->length ? 0 : -EINVAL;
}

int kvl_post(struct kvl_runtime *rt, kvl_peer_t peer, const struct kvl_xfer *x, unsigned n)
{
	struct kvl_peer_pub *pub = kvl_peer_ready(&rt->peers, peer);
	struct kvl_peer_conn conn[KVL_PEER_MAX_CONNS];
	uint32_t n_conns, rr;
	bool kicked[KVL_MAX_NICS] = { false }, rdma_only = true;
	unsigned i;

	if (pub == NULL)
		return -ENOTCONN;
	rte_spinlock_lock(&pub->lock);
	n_conns = pub->n_conns;
	memcpy(conn, pub->conn, sizeof(conn[0]) * n_conns);
	rr = pub->rr;
	rte_spinlock_unlock(&pub->lock);
	if (n_conns == 0)
		return -ENOTCONN;
	/* Scatter lists and notices need RDMA: every connection of the peer must have it,
	 * since transfers are spread over all of them. */
	for (i = 0; i < n_conns; i++)
		if (rt->nic[conn[i].nic].info.transport == KVL_TRANSPORT_TCP)
			rdma_only = false;
	for (i = 0; i < n; i++) {
		int rc = xfer_check(rt, &x[i], rdma_only);

		if (rc < 0)
			return rc;
	}
	rte_spinlock_lock(&pub->lock);
	pub->rr += n;
	rte_spinlock_unlock(&pub->lock);
	for (i = 0; i < n; i++) {
		const struct kvl_peer_conn *c = &conn[(rr + i) % n_conns];
		/* One 48-byte element, and behind it, in the same bulk enqueue, the SGE list of
		 * a scatter-gather transfer (lcores/nic_io.h); xfer_check() proved the list. */
		union kvl_sub_elem e[KVL_SUB_MAX_ELEMS];
		unsigned ne;

		e[0].head = (struct kvl_sub){
			.wr = { .wr_id = x[i].cookie,
				.local = x[i].local,
				.remote_off = x[i].remote_off,
				.length = x[i].length,
				.remote_seg = x[i].remote_seg,
				.op = (uint8_t)x[i].op,
				.n_sge = (uint8_t)x[i].n_iov,
				.flags = KVL_WR_CHECKED |
					 ((x[i].flags & KVL_XFER_NOTIFY) ? KVL_WR_NOTIFY : 0),
				.imm = x[i].notify },
			.slot = c->slot,
			.gen = c->gen
		};
		for (uint32_t k = 0; k < x[i].n_iov; k++)
			kvl_sub_set_sge(e, k, x[i].iov[k].base, x[i].iov[k].len);
		ne = kvl_sub_elems(e, x[i].n_iov);
		if (rte_ring_mp_enqueue_bulk_elem(rt->nic[c->nic].io->sub, e, sizeof(e[0]), ne,
						  NULL) != ne)
			break; /* full: the caller posts the rest later */
		kicked[c->nic] = true;
	}
	for (unsigned k = 0; k < rt->cfg.n_nics; k++)
		if (kicked[k])
			kvl_nic_io_kick(rt->nic[k].io); /* a sleeping lcore (hybrid idle) wakes */
	return (int)i;
}

unsigned kvl_poll_notices(struct kvl_runtime *rt, struct kvl_notice *out, unsigned max)
{
	unsigned got = 0;

	for (unsigned nic = 0; nic < rt->cfg.n_nics && got < max; nic++)
		if (rt->nic[nic].io)
			got += rte_ring_sc_dequeue_burst_elem(rt->nic[nic].io->ntf, out + got,
							      sizeof(*out), max - got, NULL);
	return got;
}

unsigned kvl_poll(struct kvl_runtime *rt, struct kvl_completion *c, unsigned max)
{
	unsigned got = 0, n_nics = rt->cfg.n_nics;

	/* Start at a different NIC each call so none starves. */
	for (unsigned k = 0; k < n_nics && got < max; k++) {
		unsigned nic = (rt->poll_rr + k) % n_nics;

		if (rt->nic[nic].io)
			got += rte_ring_sc_dequeue_burst_elem(rt->nic[nic].io->cpl, c + got,
							      sizeof(*c), max - got, NULL);
	}
	rt->poll_rr++;
	return got;
}
