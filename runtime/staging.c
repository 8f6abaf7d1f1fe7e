/* SPDX-License-Identifier: BSD-3-Clause */
/* Each NIC lcore's scheduler stage: its staging memory, its budget share, the VRAM sampling. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <time.h>
#include <rte_cycles.h>
#include <rte_lcore.h>

#include "kvl_build_config.h"
#include "log.h"
#include "nic_sched.h"
#include "runtime.h"
#include "segments.h"
#include "staging.h"
#include "verbs.h"

static struct kvl_sched_cfg sched_cfg(const struct kvl_config *cfg)
{
	const struct kvl_sched_conf *c = &cfg->sched;
	uint64_t staging = (uint64_t)c->staging_mb << 20;
	uint32_t slot = c->slot_kb << 10;

	return (struct kvl_sched_cfg){
		.max_requests = c->max_requests,
		.max_blocks_total = c->max_blocks,
		.max_xfers = 4096,
		.slot_size = slot,
		.slot_count = (uint32_t)(staging / slot),
		.window_min = (uint64_t)c->window_min_kb << 10,
		.window_max = (uint64_t)c->window_max_mb << 20,
		.max_msg = c->max_msg_kb << 10,
		.max_sge = 1, /* per NIC in kvl_staging_start(): several where RDMA takes them */
		.starvation_ns = (uint64_t)c->starvation_ms * 1000000,
		.resize_ns = (uint64_t)c->resize_interval_ms * 1000000,
		.ready_ahead = c->ready_ahead,
	};
}

unsigned kvl_staging_count(const struct kvl_runtime *rt)
{
	unsigned n = 0;

	for (unsigned i = 0; i < rt->cfg.n_nics; i++)
		n += rt->nic[i].sched != NULL;
	return n;
}

uint64_t kvl_staging_budget(const struct kvl_runtime *rt)
{
	if (rt->gpu.open && rt->staging_place == KVL_STAGING_GPU) {
		/* The staging in VRAM is ours and already out of the sampled free memory: the
		 * budget is what free VRAM would be without it, minus the reserve. */
		struct kvl_sched_cfg sc = sched_cfg(&rt->cfg);
		uint64_t ours = (uint64_t)sc.slot_count * sc.slot_size * kvl_staging_count(rt),
			 free_b = __atomic_load_n(&rt->gpu.free_bytes, __ATOMIC_RELAXED) + ours;

		return free_b > rt->gpu.reserve_bytes ? free_b - rt->gpu.reserve_bytes : 0;
	}
	if (rt->gpu.open)
		return kvl_gpu_budget(&rt->gpu);
	return (uint64_t)rt->cfg.sched.budget_mb << 20;
}

void kvl_staging_publish_budget(struct kvl_runtime *rt)
{
	uint64_t b = kvl_staging_budget(rt),
		 cap = __atomic_load_n(&rt->budget_cap, __ATOMIC_RELAXED);
	unsigned n = kvl_staging_count(rt);

	if (n == 0)
		return;
	if (cap < b)
		b = cap;
	/* Every NIC lcore runs its own scheduler: each gets an equal share. */
	__atomic_store_n(&rt->sched_budget, b / n, __ATOMIC_RELAXED);
}

void kvl_staging_sample(struct kvl_runtime *rt)
{
	uint64_t now = rte_get_tsc_cycles();

	if (!rt->gpu.open || now < rt->next_sample_tsc)
		return;
	kvl_gpu_sample(&rt->gpu);
	kvl_staging_publish_budget(rt);
	rt->next_sample_tsc = now + rt->tsc_hz * rt->cfg.sched.resize_interval_ms / 1000;
}

static void *sampler_main(void *arg)
{
	struct kvl_runtime *rt = arg;
	unsigned ms = rt->cfg.sched.resize_interval_ms ? rt->cfg.sched.resize_interval_ms : 1;
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000 };

	while (!__atomic_load_n(&rt->vram_quit, __ATOMIC_ACQUIRE)) {
		kvl_staging_sample(rt);
		nanosleep(&ts, NULL);
	}
	return NULL;
}

int kvl_staging_sampler_start(struct kvl_runtime *rt, char *err, size_t errlen)
{
	int rc;

	/* rt->ctl: the control thread, which samples in its own loop (control.c) */
	if (!rt->gpu.open || rt->ctl != NULL || rt->vram_thread_on)
		return 0;
	__atomic_store_n(&rt->vram_quit, false, __ATOMIC_RELEASE);
	rc = rte_ctrl_thread_create(&rt->vram_thread, "kvl-vram", NULL, sampler_main, rt);
	if (rc != 0) {
		snprintf(err, errlen, "cannot start the VRAM sampler thread: %s", strerror(rc));
		return -rc;
	}
	rt->vram_thread_on = true;
	return 0;
}

void kvl_staging_sampler_stop(struct kvl_runtime *rt)
{
	if (!rt->vram_thread_on)
		return;
	__atomic_store_n(&rt->vram_quit, true, __ATOMIC_RELEASE);
	pthread_join(rt->vram_thread, NULL);
	rt->vram_thread_on = false;
}

int kvl_staging_gpu_of(const struct kvl_runtime *rt, unsigned nic)
{
	/* The NIC's pair from the PCI tree (lcores/topo/) when its CUDA index is known (it is the
	 * [gpu] device), else the [gpu] device itself: the only GPU the runtime has opened. */
	const struct kvl_gpu_pair *p = kvl_topo_gpu_for_nic(rt, nic);

	return p != NULL && p->cuda_device >= 0 ? p->cuda_device : rt->gpu.device_id;
}

bool kvl_tcp_vram_ok(const struct kvl_runtime *rt, char *why, size_t len)
{
	const char *w = NULL;

	if (!KVL_HAVE_CUDA)
		w = "this build has no CUDA";
	else if (!rt->gpu.open)
		w = "no GPU is open ([gpu] enable = false)";
	else if (rt->segs.pool.base == NULL)
		w = "the [memory] pool is off (memory.pool_size_mb = 0), and tcp's pinned bounce "
		    "buffers are carved from it";
	else if (!rt->segs.pool.cuda_registered)
		w = "the [memory] pool is not pinned for CUDA";
	if (why != NULL && len > 0)
		snprintf(why, len, "%s", w ? w : "");
	return w == NULL;
}

/* The first NIC that would have to land bytes in VRAM over tcp without a way to (no bounce
 * buffers: kvl_tcp_vram_ok), or -1. */
static int tcp_nic(const struct kvl_runtime *rt)
{
	if (rt->cfg.sched.null_transport || kvl_tcp_vram_ok(rt, NULL, 0))
		return -1; /* nothing lands (VRAM staging is only sized and registered), or
			    * tcp lands it through its bounce buffers */
	for (unsigned i = 0; i < rt->cfg.n_nics; i++)
		if (rt->nic[i].info.transport == KVL_TRANSPORT_TCP)
			return (int)i;
	return -1;
}

/* [sched] staging resolved against what this host and build have: 0, or -EINVAL with why. */
static int staging_place(struct kvl_runtime *rt, char *err, size_t errlen)
{
	int want = rt->cfg.sched.staging, t = tcp_nic(rt);
	char why[160];

	rt->staging_why[0] = '\0';
	(void)kvl_tcp_vram_ok(rt, why, sizeof(why));
	if (want == KVL_STAGING_GPU) {
		/* [sched] tier: the tier lands there by the copy engine (runtime/tier.c); tcp
		 * peers' PULLs into it fail with gpu-memory */
		if (t >= 0 && !rt->cfg.sched.tier) {
			snprintf(err, errlen,
				 "sched.staging = gpu: nic.%s uses the tcp transport, which cannot "
				 "land bytes in VRAM yet here: %s; use staging = host or auto, or "
				 "give tcp its bounce buffers ([gpu] enable, memory.pool_size_mb)",
				 rt->cfg.nics[t].label, why);
			return -EINVAL;
		}
		if (!rt->gpu.open) { /* the configuration check asks for [gpu] enable already */
			snprintf(err, errlen, "sched.staging = gpu needs [gpu] enable = true");
			return -EINVAL;
		}
		rt->staging_place = KVL_STAGING_GPU;
		return 0;
	}
	rt->staging_place = KVL_STAGING_HOST;
	if (want == KVL_STAGING_HOST)
		return 0;
	if (!KVL_HAVE_CUDA || !rt->gpu.open)
		snprintf(rt->staging_why, sizeof(rt->staging_why), "auto: %s",
			 KVL_HAVE_CUDA ? "[gpu] enable = false" : "built without CUDA");
	else if (t >= 0)
		snprintf(rt->staging_why, sizeof(rt->staging_why),
			 "auto: nic.%s is tcp, which cannot land bytes in VRAM yet",
			 rt->cfg.nics[t].label);
	else
		rt->staging_place = KVL_STAGING_GPU;
	if (rt->staging_why[0] != '\0' && rt->gpu.open)
		KVL_LOG(NOTICE, "sched.staging = auto: host memory, since %s%s%s",
			rt->staging_why + 6, t >= 0 ? ": " : "", t >= 0 ? why : "");
	return 0;
}

/* NIC @i's staging: VRAM of its GPU, or DPDK memory on its socket. */
static int staging_alloc(struct kvl_runtime *rt, unsigned i, uint64_t size, char *err,
			 size_t errlen)
{
	struct kvl_rt_nic *nic = &rt->nic[i];
	int socket = nic->lcore->socket;
	char what[KVL_LABEL_LEN + 32];

	if (rt->staging_place == KVL_STAGING_GPU) {
		int dev = kvl_staging_gpu_of(rt, i);
		char why[256];

		nic->staging = kvl_gpu_vram_alloc(dev, size, why, sizeof(why));
		if (nic->staging == NULL) {
			snprintf(err, errlen, "sched.staging = gpu: nic.%s: %s",
				 rt->cfg.nics[i].label, why);
			return -ENOMEM;
		}
		return 0;
	}
	/* from the [memory] pool when there is one, else DPDK memory on its socket */
	snprintf(what, sizeof(what), "sched.staging_mb for nic.%s", rt->cfg.nics[i].label);
	nic->staging = kvl_segs_host_alloc(&rt->segs, what, size, socket, err, errlen);
	if (nic->staging == NULL)
		return -ENOMEM;
	return 0;
}

int kvl_staging_start(struct kvl_runtime *rt, char *err, size_t errlen)
{
	const struct kvl_sched_conf *c = &rt->cfg.sched;
	struct kvl_sched_cfg sc = sched_cfg(&rt->cfg);
	uint64_t staging = (uint64_t)sc.slot_count * sc.slot_size;
	int rc;

	rt->budget_cap = UINT64_MAX;
	rt->staging_place = KVL_STAGING_HOST;
	if (c->staging_mb == 0)
		return 0;
	rc = staging_place(rt, err, errlen);
	if (rc < 0)
		return rc;
	for (unsigned i = 0; i < rt->cfg.n_nics; i++) {
		struct kvl_rt_nic *nic = &rt->nic[i];
		int socket = nic->lcore->socket;
		struct kvl_sched_cfg sci = sc;
		struct kvl_nic_sched_cfg nc = { .sched = &sci,
						.nic = i,
						.socket = socket,
						.budget = &rt->sched_budget,
						.null_xport = c->null_transport,
						.levt = nic->io->evt };

		rc = staging_alloc(rt, i, staging, err, errlen);
		if (rc < 0)
			return rc;
		nc.staging = nic->staging;
		/* tcp moves one local range per request; RDMA up to KVL_WR_MAX_SGE */
		if (nic->info.transport != KVL_TRANSPORT_TCP && !c->null_transport &&
		    !(nic->vdev && kvl_verbs_dev_sge_equal_only(nic->vdev)))
			sci.max_sge = KVL_WR_MAX_SGE < KVL_SCHED_MAX_SGE ? KVL_WR_MAX_SGE
									 : KVL_SCHED_MAX_SGE;
		nic->sched = kvl_nic_sched_create(nic->io, &nc);
		if (nic->sched == NULL) {
			snprintf(err, errlen, "nic.%s: cannot create its scheduler: %s",
				 rt->cfg.nics[i].label, strerror(errno));
			return -ENOMEM;
		}
		/* its completions come back through nic_io's one path (kvl_nic_sched_create) */
		nic->io->watch = kvl_nic_sched_cmd_ring(nic->sched);
		kvl_lcore_add_stage(nic->lcore, "sched", kvl_nic_sched_stage, nic->sched);
	}
	if (c->null_transport)
		KVL_LOG(WARNING,
			"sched.null_transport = true: scheduled READs complete at once and move "
			"no data (benchmarks only)");
	kvl_staging_publish_budget(rt);
	return 0;
}

int kvl_staging_register(struct kvl_runtime *rt, char *err, size_t errlen)
{
	struct kvl_sched_cfg sc = sched_cfg(&rt->cfg);

	for (unsigned i = 0; i < rt->cfg.n_nics; i++) {
		struct kvl_seg_desc d;
		char name[KVL_LABEL_LEN + 16];
		uint32_t id;
		int rc;

		if (rt->nic[i].staging == NULL)
			continue;
		/* One layer of slots; no remote access: peers see it and can do nothing. */
		kvl_seg_desc_make(1, 1, sc.slot_count, sc.slot_size, 0, &d);
		snprintf(name, sizeof(name), "staging.%s", rt->cfg.nics[i].label);
		if (rt->staging_place == KVL_STAGING_GPU) {
			struct kvl_mem_info mi = { .kind = KVL_MEM_GPU,
						   .device = kvl_staging_gpu_of(rt, i),
						   .alloc_start = (uintptr_t)rt->nic[i].staging,
						   .alloc_size = d.length };
			char msg[400];

			snprintf(mi.pci_bus_id, sizeof(mi.pci_bus_id), "%s", rt->gpu.pci_bus_id);
			rc = kvl_segs_add_gpu(&rt->segs, name, rt->nic[i].staging,
					      rt->nic[i].staging, &d, &mi, &id, msg, sizeof(msg));
			if (rc < 0) {
				snprintf(err, errlen,
					 "nic.%s: cannot register its VRAM staging: %s",
					 rt->cfg.nics[i].label, msg);
				return rc;
			}
			continue;
		}
		rc = kvl_segs_add(&rt->segs, name, rt->nic[i].staging, rt->nic[i].staging, &d, &id);
		if (rc < 0) {
			snprintf(err, errlen, "nic.%s: cannot register its staging: %s",
				 rt->cfg.nics[i].label, strerror(-rc));
			return rc;
		}
	}
	return 0;
}

void kvl_staging_stop(struct kvl_runtime *rt)
{
	for (unsigned i = 0; i < KVL_MAX_NICS; i++) {
		struct kvl_rt_nic *nic = &rt->nic[i];

		kvl_nic_sched_free(nic->sched); /* and unhooks it from nic_io */
		nic->sched = NULL;
		if (kvl_segs_owns(&rt->segs, nic->staging))
			; /* it goes with the segments */
		else if (rt->staging_place == KVL_STAGING_GPU)
			kvl_gpu_vram_free(nic->staging);
		else
			kvl_segs_host_free(&rt->segs, nic->staging);
		nic->staging = NULL;
	}
}

bool kvl_staging_touches(const struct kvl_runtime *rt, const void *p, uint64_t len)
{
	struct kvl_sched_cfg sc = sched_cfg(&rt->cfg);
	uint64_t size = (uint64_t)sc.slot_count * sc.slot_size;
	uintptr_t a = (uintptr_t)p;

	for (unsigned i = 0; i < rt->cfg.n_nics; i++) {
		uintptr_t s = (uintptr_t)rt->nic[i].staging;

		if (s != 0 && a < s + size && s < a + len)
			return true;
	}
	return false;
}
