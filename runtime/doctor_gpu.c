/* SPDX-License-Identifier: BSD-3-Clause */
/* kvlane-doctor's CUDA probe: the GPU opened as kvlaned's start-up opens it (runtime/gpu.c). */
#include <string.h>

#include "doctor.h"
#include "gpu.h"
#include "topo.h"

void kvl_doctor_probe_cuda(const struct kvl_config *cfg, bool host_mode, const char *sysfs_root,
			   struct kvl_doc_cuda *c)
{
	struct kvl_gpu_conf conf = cfg->gpu;
	struct kvl_pci_path gpus[KVL_MAX_GPUS];
	struct kvl_gpu g;

	memset(c, 0, sizeof(*c));
	if (!conf.enable) {
		if (!host_mode ||
		    kvl_gpu_scan(sysfs_root ? sysfs_root : "/sys", gpus, KVL_MAX_GPUS) <= 0)
			return;
		/* No INI: the first GPU, nothing reserved, GPUDirect not demanded. */
		memset(&conf, 0, sizeof(conf));
		conf.enable = true;
		conf.gpudirect = KVL_TRI_AUTO;
	}
	c->probed = true;
	c->required = cfg->gpu.enable;
	c->device_id = (int)conf.device_id;
	c->rc = kvl_gpu_open(&conf, &g, c->err, sizeof(c->err));
	if (c->rc < 0)
		return;
	c->device_count = g.device_count;
	memcpy(c->name, g.name, sizeof(c->name));
	memcpy(c->pci, g.pci_bus_id, sizeof(c->pci));
	c->gpudirect_rdma = g.gpudirect_rdma;
	c->total = g.total_bytes;
	c->free = g.free_bytes;
	c->reserve = g.reserve_bytes;
}
