/* SPDX-License-Identifier: BSD-3-Clause */
/* Each NIC lcore's scheduler stage: its staging memory, its budget share, the VRAM sampling. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <rte_cycles.h>

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

int kvl_staging_start(struct kvl_runtime *rt, char *err, size_t errlen)
{
	const struct kvl_sched_conf *c = &rt->cfg.sched;
	struct kvl_sched_cfg sc = sched_cfg(&rt->cfg);
	uint64_t staging = (uint64_t)sc.slot_count * sc.slot_size;

	rt->budget_cap = UINT64_MAX;
	if (c->staging_mb == 0)
		return 0;
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
		char what[KVL_LABEL_LEN + 32];

		/* from the [memory] pool when there is one, else DPDK memory on its socket */
		snprintf(what, sizeof(what), "sched.staging_mb for nic.%s", rt->cfg.nics[i].label);
		nic->staging = kvl_segs_host_alloc(&rt->segs, what, staging, socket, err, errlen);
		if (nic->staging == NULL)
			return -ENOMEM;
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
		if (!kvl_segs_owns(&rt->segs, nic->staging))
			kvl_segs_host_free(&rt->segs, nic->staging); /* else it goes with them */
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
