/* SPDX-License-Identifier: BSD-3-Clause */
/* The runtime's lifecycle: NIC discovery before EAL, NUMA pairing and launch after, stop. */
#include <errno.h>
#include <string.h>

#include <rte_cycles.h>
#include <rte_eal.h>
#include <rte_launch.h>
#include <rte_lcore.h>
#include <rte_log.h>
#include <rte_malloc.h>

#include "cluster.h"
#include "control/control.h"
#include "kvlane/kvlane.h"
#include "lifecycle.h"
#include "req_api.h"
#include "seg_place.h"
#include "staging.h"
#include "tier.h"
#include "verbs.h"

static bool custom_sysfs(const struct kvl_runtime *rt)
{
	return strcmp(rt->sysfs_root, "/sys") != 0;
}

/*
 * Each NIC's GPU from the PCI tree or [nic.*] gpu (lcores/topo/gpu_topo.c); the opened [gpu]
 * device gets its CUDA index on the NIC it pairs with, matched by PCI bus id.
 */
static int pair_gpus(struct kvl_runtime *rt, char *msg, size_t msglen)
{
	struct kvl_nic_info infos[KVL_MAX_NICS];
	struct kvl_gpu_pair pairs[KVL_MAX_NICS];
	char wbuf[KVL_MAX_NICS][KVL_PATH_LEN + 16], bus_id[KVL_PCI_ADDR_LEN];
	const char *where[KVL_MAX_NICS];
	bool cuda = rt->gpu.open &&
		    kvl_pci_addr_normalize(rt->gpu.pci_bus_id, bus_id, sizeof(bus_id)) == 0;
	int rc;

	for (unsigned i = 0; i < rt->cfg.n_nics; i++) {
		infos[i] = rt->nic[i].info;
		snprintf(wbuf[i], sizeof(wbuf[i]), "%s:%u", rt->cfg.path,
			 kvl_config_key_line(&rt->cfg, KVL_SEC_NIC, i, "gpu"));
		where[i] = rt->cfg.path[0] ? wbuf[i] : NULL;
	}
	rc = kvl_pair_gpus(rt->sysfs_root, rt->cfg.nics, infos, where, rt->cfg.n_nics, pairs, msg,
			   msglen);
	for (unsigned i = 0; rc == 0 && i < rt->cfg.n_nics; i++) {
		rt->nic[i].gpu = pairs[i];
		if (cuda && strcmp(pairs[i].addr, bus_id) == 0)
			rt->nic[i].gpu.cuda_device = rt->gpu.device_id;
	}
	return rc;
}

/* At start, once logging goes through EAL: what each NIC pairs with, louder when far. */
static void log_gpu_pairs(const struct kvl_runtime *rt)
{
	bool paired = false;

	for (unsigned i = 0; i < rt->cfg.n_nics; i++) {
		const struct kvl_nic_conf *nc = &rt->cfg.nics[i];
		const struct kvl_gpu_pair *p = kvl_topo_gpu_for_nic(rt, i);

		if (p->warn)
			KVL_LOG(WARNING, "nic.%s (%s, %s) pairs with GPU %s at distance %s: %s",
				nc->label, nc->device, p->nic_addr, p->addr,
				kvl_pci_dist_name(p->dist), p->note);
		else if (p->gpu >= 0)
			KVL_LOG(INFO, "nic.%s (%s): GPU %s (%s%s)%s%s", nc->label, nc->device,
				p->addr, kvl_pci_dist_name(p->dist),
				p->from_conf ? ", from the INI" : "", p->note[0] ? ": " : "",
				p->note);
		else
			KVL_LOG(INFO, "nic.%s (%s): no GPU: %s", nc->label, nc->device, p->note);
		paired |= p->cuda_device >= 0;
	}
	/* VRAM staging goes to each NIC's GPU: an opened device that none pairs with is idle. */
	if (rt->gpu.open && rt->cfg.n_nics > 0 && !paired)
		KVL_LOG(NOTICE,
			"[gpu] device_id %d (%s) is no NIC's GPU; set [nic.*] gpu = %s to pair one "
			"with it",
			rt->gpu.device_id, rt->gpu.pci_bus_id, rt->gpu.pci_bus_id);
}

int kvl_runtime_discover(struct kvl_runtime *rt, char *err, size_t errlen)
{
	size_t len = 0;
	int rc = 0;

	err[0] = '\0';
	for (unsigned i = 0; i < rt->cfg.n_nics; i++) {
		char msg[KVL_ERR_LEN];
		int r = kvl_nic_discover(rt->sysfs_root, &rt->cfg.nics[i], &rt->nic[i].info, msg,
					 sizeof(msg));

		if (r < 0) {
			rc = r;
			len += snprintf(err + len, len < errlen ? errlen - len : 0, "%s%s",
					len ? "\n" : "", msg);
		}
	}
	if (rt->cfg.gpu.enable) {
		char msg[KVL_ERR_LEN];
		int r = kvl_gpu_open(&rt->cfg.gpu, &rt->gpu, msg, sizeof(msg));

		if (r < 0) {
			rc = r;
			len += snprintf(err + len, len < errlen ? errlen - len : 0, "%s%s",
					len ? "\n" : "", msg);
		}
	}
	if (rc == 0) {
		char msg[KVL_ERR_LEN * 2];
		int r = pair_gpus(rt, msg, sizeof(msg));

		if (r < 0) {
			rc = r;
			snprintf(err, errlen, "%s", msg);
		}
	}
	return rc;
}

int kvl_runtime_lcore_socket(const struct kvl_runtime *rt, unsigned lcore_id, unsigned *cpu)
{
	rte_cpuset_t set = rte_lcore_cpuset(lcore_id);
	unsigned c;

	for (c = 0; c < CPU_SETSIZE; c++)
		if (CPU_ISSET(c, &set))
			break;
	*cpu = c < CPU_SETSIZE ? c : 0;
	if (custom_sysfs(rt)) {
		int node = kvl_cpu_numa_node(rt->sysfs_root, *cpu);

		if (node >= 0)
			return node;
	}
	return (int)rte_lcore_to_socket_id(lcore_id);
}

/* An RDMA NIC: its device through verbs; on mlx5 devices, connections post through the
 * direct fast path (transport auto or mlx5). */
static int open_rdma(struct kvl_runtime *rt, unsigned i, char *err, size_t errlen)
{
	const struct kvl_nic_conf *nc = &rt->cfg.nics[i];
	struct kvl_verbs_dev_opts o = { .name = nc->device,
					.port = nc->port,
					.gid_index = nc->gid_index,
					.mtu = nc->mtu,
					.sysfs_root = rt->sysfs_root,
					.traffic_class = (uint8_t)nc->traffic_class,
					.service_level = (uint8_t)nc->service_level,
					.pkey_index = (uint16_t)nc->pkey_index,
					.ack_timeout = (uint8_t)nc->ack_timeout,
					.retry_count = (uint8_t)nc->retry_count,
					/* auto may fall back to verbs (logged); mlx5 must not */
					.backend = nc->transport == KVL_TRANSPORT_MLX5
							   ? KVL_VERBS_BACKEND_MLX5
						   : nc->transport == KVL_TRANSPORT_VERBS
							   ? KVL_VERBS_BACKEND_VERBS
							   : KVL_VERBS_BACKEND_AUTO };
	char msg[KVL_VERBS_ERR_LEN];
	int gid_index, gid_type, rc;
	unsigned mtu;
	bool moderation;

	/* A fixture tree describes devices that are not there: pair and report, open nothing. */
	if (custom_sysfs(rt)) {
		KVL_LOG(NOTICE,
			"nic.%s (%s): dry run (--sysfs-root %s): the RDMA device is not "
			"opened, this NIC carries no data",
			nc->label, nc->device, rt->sysfs_root);
		return 0;
	}
	rt->nic[i].vdev = kvl_verbs_open(&o, msg, sizeof(msg));
	if (rt->nic[i].vdev == NULL) {
		snprintf(err, errlen, "nic.%s (%s): %s", nc->label, nc->device, msg);
		return -ENODEV;
	}
	/* segments reach it; the pool is registered on it, once */
	rc = kvl_segs_attach(&rt->segs, i, rt->nic[i].vdev, nc->label, err, errlen);
	if (rc < 0)
		return rc;
	if (strcmp(kvl_verbs_dev_backend(rt->nic[i].vdev), "mlx5") == 0) {
		rt->nic[i].info.transport = KVL_TRANSPORT_MLX5;
		KVL_LOG(INFO, "nic.%s (%s): mlx5 direct fast path (WQEs written to the SQ)",
			nc->label, nc->device);
	} else {
		rt->nic[i].info.transport = KVL_TRANSPORT_VERBS;
		if (kvl_verbs_dev_backend_note(rt->nic[i].vdev)[0] != '\0')
			KVL_LOG(NOTICE, "nic.%s (%s): %s", nc->label, nc->device,
				kvl_verbs_dev_backend_note(rt->nic[i].vdev));
	}
	kvl_verbs_dev_info(rt->nic[i].vdev, &gid_index, &gid_type, &mtu, &moderation);
	KVL_LOG(INFO, "nic.%s (%s): port %u, GID index %d (%s), MTU %u%s", nc->label, nc->device,
		nc->port, gid_index,
		gid_type == 2	? "RoCE v2"
		: gid_type == 1 ? "RoCE v1"
				: "InfiniBand",
		mtu,
		moderation || !rt->cfg.cq_moderation.enable
			? ""
			: "; the device has no CQ moderation: [cq_moderation] count/period_us "
			  "are not applied");
	if (kvl_verbs_dev_sge_equal_only(rt->nic[i].vdev))
		KVL_LOG(NOTICE,
			"nic.%s (%s): soft-RoCE: SGE lists go as equal pieces (rdma-core's rxe "
			"miscounts unequal ones); the scheduler plans one SGE per transfer here",
			nc->label, nc->device);
	kvl_lcore_add_stage(rt->nic[i].lcore, "verbs", kvl_nic_io_stage, rt->nic[i].io);
	return 0;
}

/* The NIC's rings, and its transport's stage in the loop. */
static int start_io(struct kvl_runtime *rt, unsigned i, int socket, char *err, size_t errlen)
{
	struct kvl_nic_io *io =
		rte_zmalloc_socket("kvl_nic_io", sizeof(*io), RTE_CACHE_LINE_SIZE, socket);
	int rc;

	if (io == NULL)
		io = rte_zmalloc("kvl_nic_io", sizeof(*io), RTE_CACHE_LINE_SIZE);
	if (io == NULL) {
		snprintf(err, errlen, "out of memory for the rings of nic.%s",
			 rt->cfg.nics[i].label);
		return -ENOMEM;
	}
	rc = kvl_nic_io_init(io, i, socket, rt->cfg.nics[i].queue_depth);
	if (rc < 0) {
		snprintf(err, errlen, "nic.%s: cannot create its rings: %s", rt->cfg.nics[i].label,
			 strerror(-rc));
		rte_free(io);
		return rc;
	}
	rt->nic[i].io = io;
	/* hybrid idle: sleep on the NIC's completion channels and kicks, not a blind nap */
	rt->nic[i].lcore->sleep = kvl_nic_io_sleep;
	rt->nic[i].lcore->sleep_arg = io;
	if (rt->nic[i].info.transport == KVL_TRANSPORT_TCP)
		kvl_lcore_add_stage(rt->nic[i].lcore, "tcp", kvl_nic_io_stage, io);
	else
		return open_rdma(rt, i, err, errlen);
	return 0;
}

/*
 * The [memory] pool, before any NIC opens (each registers it when it attaches) and before
 * staging and segments are carved from it: mapped and pinned on the first NIC's node, then
 * pinned for CUDA when a GPU is open. pool_size_mb = 0: nothing.
 */
static int start_pool(struct kvl_runtime *rt, int numa_node, char *err, size_t errlen)
{
	struct kvl_pool *pool = &rt->segs.pool;
	char msg[KVL_POOL_MSG_LEN];
	int rc;

	rc = kvl_pool_create(pool, &rt->cfg.memory, rt->sysfs_root, numa_node, err, errlen);
	if (rc < 0 || pool->base == NULL)
		return rc;
	if (pool->pages.note[0] != '\0')
		KVL_LOG(NOTICE, "%s", pool->pages.note);
	KVL_LOG(INFO,
		"memory: pool of %u MiB, %u chunks of %u KiB, on %s pages (%llu KiB)%s, mapped "
		"and pinned in %.2f ms",
		rt->cfg.memory.pool_size_mb, pool->n_chunks, rt->cfg.memory.chunk_size_kb,
		pool->pages.hugepage ? "huge" : "4 KiB",
		(unsigned long long)(pool->pages.page_size >> 10),
		pool->numa_bound ? ", preferring the first NIC's NUMA node" : "",
		pool->map_ns / 1e6);
	if (!rt->gpu.open)
		return 0;
	rc = kvl_gpu_host_register(&rt->gpu, pool->base, pool->size, &pool->cuda_ns, msg,
				   sizeof(msg));
	if (rc < 0) {
		snprintf(err, errlen, "memory: the pool is not pinned for CUDA: %s", msg);
		return rc;
	}
	pool->cuda_registered = true;
	KVL_LOG(INFO, "memory: the pool registered with CUDA in %.2f ms", pool->cuda_ns / 1e6);
	return 0;
}

static void stop_pool(struct kvl_runtime *rt)
{
	struct kvl_pool *pool = &rt->segs.pool;

	if (pool->cuda_registered)
		kvl_gpu_host_unregister(&rt->gpu, pool->base);
	pool->cuda_registered = false;
	kvl_pool_destroy(pool);
}

/* The INI's [segment.*]: allocated on the first NIC's socket, filled as asked. */
static int alloc_conf_segments(struct kvl_runtime *rt, char *err, size_t errlen)
{
	int socket = rt->nic[0].lcore ? rt->nic[0].lcore->socket : SOCKET_ID_ANY;

	for (uint32_t i = 0; i < rt->cfg.n_segments; i++) {
		const struct kvl_segment_conf *g = &rt->cfg.segments[i];
		char what[KVL_LABEL_LEN + 16];
		struct kvl_seg_desc d;
		uint32_t id;
		void *mem;
		int rc;

		kvl_seg_desc_make(g->layers, g->planes, g->blocks, g->block_bytes,
				  (g->access != KVL_ACCESS_WRITE ? KVL_SEG_REMOTE_READ : 0) |
					  (g->access != KVL_ACCESS_READ ? KVL_SEG_REMOTE_WRITE : 0),
				  &d);
		if (g->memory == KVL_SEG_MEM_GPU) { /* VRAM: runtime/seg_place.c */
			char msg[KVL_ERR_LEN];

			rc = kvl_seg_place_gpu(&rt->segs, &rt->gpu, g->label, (int)g->gpu, &d,
					       g->fill == KVL_FILL_PATTERN, g->pattern_seed, &id,
					       &mem, msg, sizeof(msg));
			if (rc < 0) {
				snprintf(err, errlen, "segment.%s.memory = gpu: %s", g->label, msg);
				return rc;
			}
			continue;
		}
		snprintf(what, sizeof(what), "segment.%s", g->label);
		mem = kvl_segs_host_alloc(&rt->segs, what, d.length, socket, err, errlen);
		if (mem == NULL)
			return -ENOMEM;
		if (g->fill == KVL_FILL_PATTERN)
			kvl_pattern_fill(mem, d.length, g->pattern_seed, 0);
		rc = kvl_segs_add(&rt->segs, g->label, mem, mem, &d, &id);
		if (rc < 0) {
			kvl_segs_host_free(&rt->segs, mem);
			snprintf(err, errlen, "segment.%s: no free segment slot", g->label);
			return rc;
		}
	}
	return 0;
}

int kvl_runtime_start(struct kvl_runtime *rt, char *err, size_t errlen)
{
	struct kvl_lcore_desc lcores[RTE_MAX_LCORE];
	struct kvl_pairing pairs[KVL_MAX_NICS];
	const char *names[KVL_MAX_NICS];
	char name_buf[KVL_MAX_NICS][KVL_LABEL_LEN + KVL_NAME_LEN + 8];
	int nodes[KVL_MAX_NICS];
	unsigned n = 0, cpu, lid;
	int rc;

	rt->main_lcore = rte_get_main_lcore();
	rt->main_socket = kvl_runtime_lcore_socket(rt, rt->main_lcore, &cpu);
	RTE_LCORE_FOREACH_WORKER(lid)
	{
		lcores[n].lcore_id = lid;
		lcores[n].socket = kvl_runtime_lcore_socket(rt, lid, &lcores[n].cpu);
		n++;
	}
	for (unsigned i = 0; i < rt->cfg.n_nics; i++) {
		snprintf(name_buf[i], sizeof(name_buf[i]), "nic.%s (%s)", rt->cfg.nics[i].label,
			 rt->cfg.nics[i].device);
		names[i] = name_buf[i];
		nodes[i] = rt->nic[i].info.numa_node;
	}
	rc = kvl_pair_nics(rt->sysfs_root, nodes, names, rt->cfg.n_nics, lcores, n,
			   rt->cfg.runtime.allow_remote_numa, pairs, err, errlen);
	if (rc < 0)
		return rc;

	rc = start_pool(rt, rt->cfg.n_nics ? nodes[0] : -1, err, errlen);
	if (rc < 0) {
		kvl_runtime_stop(rt);
		return rc;
	}
	rt->tsc_hz = rte_get_tsc_hz();
	rt->quit = false;
	for (unsigned i = 0; i < rt->cfg.n_nics; i++) {
		const struct kvl_lcore_desc *d = &lcores[pairs[i].lcore_idx];
		/* The loop's state lives on its own socket, away from other lcores' lines. */
		struct kvl_lcore *lc = rte_zmalloc_socket("kvl_lcore", sizeof(*lc),
							  RTE_CACHE_LINE_SIZE, d->socket);

		if (lc == NULL)
			lc = rte_zmalloc("kvl_lcore", sizeof(*lc), RTE_CACHE_LINE_SIZE);
		if (lc == NULL) {
			snprintf(err, errlen, "out of memory for the state of lcore %u",
				 d->lcore_id);
			kvl_runtime_stop(rt);
			return -ENOMEM;
		}
		kvl_lcore_init(lc, d->lcore_id, d->cpu, d->socket, (int)i, &rt->cfg.runtime,
			       rt->tsc_hz, &rt->quit);
		lc->remote = pairs[i].remote;
		rt->nic[i].lcore = lc;
		rc = start_io(rt, i, d->socket, err, errlen);
		if (rc < 0) {
			kvl_runtime_stop(rt);
			return rc;
		}
		if (lc->remote)
			KVL_LOG(WARNING,
				"%s is on NUMA node %d but runs on lcore %u (socket %d): "
				"allow_remote_numa is set; expect cross-node memory traffic",
				names[i], nodes[i], d->lcore_id, d->socket);
	}
	log_gpu_pairs(rt);
	rc = kvl_staging_start(rt, err, errlen);
	if (rc == 0)
		rc = kvl_tier_start(rt, err, errlen); /* before the lcores read ns->tier */
	if (rc == 0)
		rc = kvl_req_table_start(rt, err, errlen);
	if (rc < 0) {
		kvl_runtime_stop(rt);
		return rc;
	}
	rt->start_tsc = rte_get_tsc_cycles();
	for (unsigned i = 0; i < rt->cfg.n_nics; i++) {
		rc = rte_eal_remote_launch(kvl_lcore_main, rt->nic[i].lcore,
					   rt->nic[i].lcore->lcore_id);
		if (rc < 0) {
			snprintf(err, errlen, "cannot launch lcore %u: %s",
				 rt->nic[i].lcore->lcore_id, strerror(-rc));
			kvl_runtime_stop(rt);
			return rc;
		}
	}
	rt->started = true;
	rc = alloc_conf_segments(rt, err, errlen);
	if (rc == 0)
		rc = kvl_staging_register(rt, err, errlen);
	if (rc == 0)
		rc = kvl_control_start(rt, err, errlen);
	if (rc == 0)
		rc = kvl_staging_sampler_start(rt, err, errlen); /* where no control thread does */
	if (rc == 0)
		rc = kvl_cluster_start(rt, err, errlen); /* its record names the listener */
	if (rc < 0) {
		kvl_runtime_stop(rt);
		return rc;
	}
	return 0;
}

void kvl_runtime_stop(struct kvl_runtime *rt)
{
	kvl_cluster_stop(rt); /* our key goes first: peers stop choosing us */
	kvl_staging_sampler_stop(rt);
	kvl_control_stop(rt);
	__atomic_store_n(&rt->quit, true, __ATOMIC_RELEASE);
	rte_eal_mp_wait_lcore();
	rt->started = false;
	kvl_tier_stop(rt);
	/* the reverse of start: the request table unmaps the schedulers' flag pools from CUDA
	 * (cudaHostUnregister), which kvl_staging_stop then frees; the other way round found
	 * no scheduler and left freed memory registered */
	kvl_req_table_stop(rt);
	kvl_staging_stop(rt);
	for (unsigned i = 0; i < KVL_MAX_NICS; i++) {
		if (rt->nic[i].io == NULL)
			continue;
		kvl_nic_io_fini(rt->nic[i].io);
		rte_free(rt->nic[i].io);
		rt->nic[i].io = NULL;
	}
	/* Memory registrations go with their device, before the memory goes. */
	for (unsigned i = 0; i < KVL_MAX_NICS; i++) {
		if (rt->nic[i].vdev)
			kvl_verbs_close(rt->nic[i].vdev);
		rt->nic[i].vdev = NULL;
	}
	kvl_segs_release(&rt->segs);
	stop_pool(rt); /* after every NIC's MR of it and every segment in it are gone */
}

uint64_t kvl_runtime_uptime_ms(const struct kvl_runtime *rt)
{
	if (rt->tsc_hz == 0)
		return 0;
	return (rte_get_tsc_cycles() - rt->start_tsc) * 1000 / rt->tsc_hz;
}

static const char *numa_str(const struct kvl_nic_info *ni, char *buf, size_t len)
{
	if (ni->numa_node < 0)
		snprintf(buf, len, "?");
	else
		snprintf(buf, len, "%d%s", ni->numa_node, ni->numa_from_conf ? "*" : "");
	return buf;
}

void kvl_runtime_print(const struct kvl_runtime *rt, FILE *out)
{
	fprintf(out, "  %-10s %-12s %-4s %-10s %-5s %-6s %-4s %-6s %s\n", "nic", "device", "port",
		"transport", "numa", "lcore", "cpu", "socket", "state");
	for (unsigned i = 0; i < rt->cfg.n_nics; i++) {
		const struct kvl_nic_conf *nc = &rt->cfg.nics[i];
		const struct kvl_nic_info *ni = &rt->nic[i].info;
		const struct kvl_lcore *lc = rt->nic[i].lcore;
		char port[8], numa[16];

		if (ni->kind == KVL_NIC_RDMA)
			snprintf(port, sizeof(port), "%u", nc->port);
		else
			snprintf(port, sizeof(port), "-");
		fprintf(out, "  %-10s %-12s %-4s %-10s %-5s %-6u %-4u %-6d %s%s\n", nc->label,
			nc->device, port, kvl_transport_name(ni->transport),
			numa_str(ni, numa, sizeof(numa)), lc ? lc->lcore_id : 0, lc ? lc->cpu : 0,
			lc ? lc->socket : -1, ni->state[0] ? ni->state : "unknown",
			lc && lc->remote ? " (remote NUMA)" : "");
	}
}
