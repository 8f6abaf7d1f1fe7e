/* SPDX-License-Identifier: BSD-3-Clause */
/* The process's state: config, one struct per NIC, segments, peers, the request table. */
#ifndef KVL_RUNTIME_H
#define KVL_RUNTIME_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include <rte_common.h>
#include <rte_spinlock.h>

#include "config.h"
#include "gpu.h"
#include "lcores.h"
#include "log.h"
#include "nic_io.h"
#include "peers.h"
#include "segments.h"
#include "topo.h"
#include "xfer.h"

struct kvl_control;
struct kvl_verbs_dev;
struct kvl_nic_sched;
struct kvl_req_table;

/*
 * One NIC = one lcore: what the runtime keeps of each configured NIC, in one cache-aligned
 * struct (written at start/stop; the lcore itself writes only what @io and @sched point to).
 */
struct kvl_rt_nic {
	struct kvl_nic_info info;    /* discovered before EAL */
	struct kvl_lcore *lcore;     /* its loop, on the NIC's socket; NULL until started */
	struct kvl_nic_io *io;	     /* rings and connections of its lcore */
	struct kvl_verbs_dev *vdev;  /* RDMA NICs: the opened device, else NULL */
	struct kvl_nic_sched *sched; /* [sched] staging_mb > 0: its scheduler stage */
	uint8_t *staging;	     /* that scheduler's staging memory */
	struct kvl_gpu_pair gpu;     /* its GPU by PCI distance or [nic.*] gpu; set at discovery */
	/* Same-host peers (issue 20, runtime/control/ipc.c): ipc connections this NIC opened,
	 * and its last decision for a peer ("peer NAME (ADDR): ipc", or why not), for /kvlane/nics.
	 * The control thread writes them under @ipc_lock (zero: unlocked). */
	rte_spinlock_t ipc_lock;
	uint32_t ipc_opened;
	char ipc_note[KVL_CTRL_NAME_LEN + KVL_CTRL_ADDR_LEN + KVL_CTRL_TEXT_LEN + 16];
} __rte_cache_aligned;

/*
 * Every runtime file reads this; each part has one writer: lifecycle.c at start and stop,
 * segments.c for @segs, the control thread for @peers, staging.c for the budget and the
 * sampling clock, req_api.c for @reqs.
 */
struct kvl_runtime {
	struct kvl_config cfg;
	char sysfs_root[KVL_PATH_LEN];
	struct kvl_rt_nic nic[KVL_MAX_NICS];
	struct kvl_gpu gpu;	     /* open when [gpu] enable = true */
	struct kvl_local_segs segs;  /* local segments (runtime/segments.c) */
	struct kvl_peer_table peers; /* written by the control thread (runtime/control/) */
	struct kvl_control *ctl;     /* NULL when the control path is off */
	uint64_t sched_budget;	     /* per NIC lcore, read by its stage each pass (relaxed) */
	uint64_t budget_cap;	     /* kvl_req_budget_cap(); UINT64_MAX: none */
	int staging_place;     /* KVL_STAGING_HOST or _GPU, as staging.c resolved [sched] staging */
	char staging_why[192]; /* why there ("" when the INI said so plainly) */
	struct kvl_req_table *reqs; /* runtime/req_api.c; NULL without a scheduler */
	uint64_t next_sample_tsc;
	/* the VRAM sampler's own thread, where no control thread samples (staging.c) */
	pthread_t vram_thread;
	bool vram_thread_on, vram_quit;
	unsigned poll_rr;
	unsigned main_lcore;
	int main_socket;
	uint64_t tsc_hz;
	uint64_t start_tsc;
	bool started;
	bool quit; /* read by every lcore loop */
};

/*
 * The GPU NIC @nic works with: what VRAM staging and GPU segment registration on that NIC
 * should use. Chosen at discovery (kvl_runtime_discover, before EAL) by kvl_pair_gpus() from
 * the PCI tree, or by [nic.*] gpu, and fixed for the process's life, so any thread may read
 * it. ->gpu < 0: none (no NVIDIA GPU, gpu = none; ->note says why). ->addr is the GPU's PCI
 * address; ->cuda_device its CUDA index when it is the [gpu] device the runtime opened (the
 * only one whose index is known: CUDA_VISIBLE_DEVICES renumbers), else -1; ->dist its class
 * (enum kvl_pci_dist). NULL for a NIC index that is not configured.
 */
static inline const struct kvl_gpu_pair *kvl_topo_gpu_for_nic(const struct kvl_runtime *rt,
							      unsigned nic)
{
	return nic < rt->cfg.n_nics ? &rt->nic[nic].gpu : NULL;
}

#endif /* KVL_RUNTIME_H */
