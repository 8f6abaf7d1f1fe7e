/* SPDX-License-Identifier: BSD-3-Clause */
/* Where a segment's memory is: detected for memory the caller registers, VRAM when asked. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "seg_place.h"

/* A GPU segment must be on the runtime's GPU when one is configured: that is the GPU its NICs
 * and staging pair with (one GPU per runtime until lcores/topo pairs each NIC with its own). */
static int same_gpu(const struct kvl_gpu *g, int device, const char *what, char *err, size_t errlen)
{
	if (g == NULL || !g->open || device == g->device_id)
		return 0;
	snprintf(err, errlen,
		 "%s is on GPU %d, but this runtime is configured for GPU %d ([gpu] device_id = "
		 "%d, %s): its NICs and staging pair with that one",
		 what, device, g->device_id, g->device_id, g->pci_bus_id);
	return -EXDEV;
}

int kvl_seg_place_gpu(struct kvl_local_segs *s, const struct kvl_gpu *g, const char *name,
		      int device, const struct kvl_seg_desc *d, bool fill, uint32_t seed,
		      uint32_t *id, void **base, char *err, size_t errlen)
{
	struct kvl_mem_info mi = { .kind = KVL_MEM_GPU, .device = device };
	char why[256], what[96];
	void *mem;
	int rc;

	snprintf(what, sizeof(what), "GPU segment \"%s\"", name);
	rc = kvl_gpu_device_check(device, mi.pci_bus_id, sizeof(mi.pci_bus_id), why, sizeof(why));
	if (rc < 0) {
		snprintf(err, errlen, "%s cannot be placed on GPU %d: %s", what, device, why);
		return rc;
	}
	rc = same_gpu(g, device, what, err, errlen);
	if (rc < 0)
		return rc;
	mem = kvl_gpu_vram_alloc(device, d->length, why, sizeof(why));
	if (mem == NULL) {
		rc = -errno;
		snprintf(err, errlen, "%s: %s", what, why);
		return rc;
	}
	mi.alloc_start = (uintptr_t)mem;
	mi.alloc_size = d->length;
	if (fill) {
		rc = kvl_gpu_vram_fill_pattern(mem, d->length, seed, why, sizeof(why));
		if (rc < 0) {
			kvl_gpu_vram_free(mem);
			snprintf(err, errlen, "%s: %s", what, why);
			return rc;
		}
	}
	rc = kvl_segs_add_gpu(s, name, mem, mem, d, &mi, id, err, errlen);
	if (rc < 0) {
		kvl_gpu_vram_free(mem);
		return rc;
	}
	*base = mem;
	return 0;
}

int kvl_seg_place_register(struct kvl_local_segs *s, const struct kvl_gpu *g, const char *name,
			   void *base, const struct kvl_seg_desc *d, uint32_t *id,
			   struct kvl_mem_info *mi, char *err, size_t errlen)
{
	char why[400], what[96];
	int rc = kvl_gpu_mem_detect(base, d->length, mi, why, sizeof(why));

	snprintf(what, sizeof(what), "segment \"%s\"", name);
	if (rc < 0) {
		snprintf(err, errlen, "%s: %s", what, why);
		return rc;
	}
	if (mi->kind == KVL_MEM_HOST) {
		rc = kvl_segs_add(s, name, base, NULL, d, id);
		if (rc < 0)
			snprintf(err, errlen, "%s: %s", what,
				 rc == -ENOSPC ? "all segment slots are used"
					       : "RDMA registration failed (see the log)");
		return rc;
	}
	rc = same_gpu(g, mi->device, what, err, errlen);
	if (rc < 0)
		return rc;
	return kvl_segs_add_gpu(s, name, base, NULL, d, mi, id, err, errlen);
}
