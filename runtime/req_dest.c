/* SPDX-License-Identifier: BSD-3-Clause */
/* Engine-owned destinations of a PULL request (KVL_REQ_ENGINE_DEST): checked once, at open. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include "kvlane/kvlane.h"
#include "req_api.h"
#include "runtime.h"
#include "segments.h"
#include "staging.h"

/* A block's destination, for the overlap check (sorted by address). */
struct dest_ent {
	uintptr_t a;
	uint64_t len;
	uint32_t blk;
};

static int cmp_dest(const void *x, const void *y)
{
	const struct dest_ent *p = x, *q = y;

	return p->a < q->a ? -1 : p->a > q->a ? 1 : 0;
}

/* The words of a refusal: the NIC's label and transport. */
static const char *nic_label(const struct kvl_runtime *rt, unsigned nic)
{
	return nic < rt->cfg.n_nics ? rt->cfg.nics[nic].label : "?";
}

/*
 * One block: inside one live segment, not in staging, and writable by NIC @nic's transport
 * (registered on its RDMA device; host memory for tcp). The segment's id in *@seg.
 */
static int check_one(struct kvl_runtime *rt, const struct kvl_req_block *b, uint32_t i,
		     unsigned nic, uint32_t *seg, char *err, size_t errlen)
{
	const struct kvl_seg *g;
	const struct kvl_rt_nic *n = &rt->nic[nic];
	char why[160];
	uint8_t reg;

	if (kvl_staging_touches(rt, b->local, b->length)) {
		snprintf(err, errlen,
			 "block %" PRIu32 ": destination %p + %" PRIu32
			 " lies in the scheduler's staging, which kvlane owns",
			 i, b->local, b->length);
		return -EINVAL;
	}
	*seg = kvl_segs_find(&rt->segs, b->local, b->length);
	g = kvl_seg_lookup(&rt->segs.tab, *seg);
	if (g == NULL) {
		snprintf(err, errlen,
			 "block %" PRIu32 ": destination %p + %" PRIu32
			 " is not inside one registered local segment (kvl_seg_register it first)",
			 i, b->local, b->length);
		return -EFAULT;
	}
	if (rt->cfg.sched.null_transport)
		return 0; /* nothing moves: any registered memory will do */
	if ((g->flags & KVL_SEG_GPU) && n->info.transport == KVL_TRANSPORT_TCP &&
	    !kvl_tcp_vram_ok(rt, why, sizeof(why))) {
		snprintf(err, errlen,
			 "block %" PRIu32 ": destination %p is in GPU segment %" PRIu32
			 " but NIC %s uses the tcp transport, which cannot land bytes in VRAM "
			 "here (%s): use host memory, give tcp its bounce buffers ([gpu] enable, "
			 "memory.pool_size_mb), or an RDMA NIC with GPUDirect",
			 i, b->local, *seg, nic_label(rt, nic), why);
		return -EXDEV;
	}
	if (n->vdev == NULL)
		return 0; /* tcp: recv() into host memory, or through its bounce into VRAM */
	pthread_mutex_lock(&rt->segs.lock);
	reg = rt->segs.meta[*seg - 1].reg[nic];
	/* carved from the [memory] pool: the pool's one MR on that device serves it */
	if (rt->segs.meta[*seg - 1].pooled && rt->segs.pool.reg[nic].done)
		reg = KVL_SEG_REG_MR;
	pthread_mutex_unlock(&rt->segs.lock);
	if (reg == KVL_SEG_REG_NONE) {
		snprintf(err, errlen,
			 "block %" PRIu32 ": segment %" PRIu32 " (%s) has no registration on NIC %s"
			 ", the request's: its RDMA device cannot write there",
			 i, *seg, g->flags & KVL_SEG_GPU ? "GPU" : "host", nic_label(rt, nic));
		return -EFAULT;
	}
	return 0;
}

int kvl_req_dest_shape(const struct kvl_req_desc *d, char *err, size_t errlen)
{
	if (d->dir != KVL_REQ_PULL) {
		snprintf(err, errlen, "KVL_REQ_ENGINE_DEST is for PULL requests only");
		return -EINVAL;
	}
	for (uint32_t i = 0; d->blocks != NULL && i < d->n_blocks; i++)
		if (d->blocks[i].local == NULL) {
			snprintf(err, errlen,
				 "block %" PRIu32
				 ": KVL_REQ_ENGINE_DEST needs a destination (local is NULL)",
				 i);
			return -EINVAL;
		}
	return 0;
}

int kvl_req_dest_check(struct kvl_runtime *rt, const struct kvl_req_desc *d, unsigned nic,
		       uint32_t *seg_of, char *err, size_t errlen)
{
	struct dest_ent *e;
	int rc = kvl_req_dest_shape(d, err, errlen);

	if (rc < 0)
		return rc;
	e = malloc((size_t)d->n_blocks * sizeof(*e));
	if (e == NULL) {
		snprintf(err, errlen, "out of memory checking %" PRIu32 " destinations",
			 d->n_blocks);
		return -ENOMEM;
	}
	for (uint32_t i = 0; i < d->n_blocks && rc == 0; i++) {
		rc = check_one(rt, &d->blocks[i], i, nic, &seg_of[i], err, errlen);
		e[i] = (struct dest_ent){ (uintptr_t)d->blocks[i].local, d->blocks[i].length, i };
	}
	/* Two blocks landing on the same bytes would race on the wire and leave one of them
	 * wrong with no error: refused, whatever the order the engine named them in. */
	if (rc == 0) {
		qsort(e, d->n_blocks, sizeof(*e), cmp_dest);
		for (uint32_t k = 1; k < d->n_blocks && rc == 0; k++)
			if (e[k - 1].a + e[k - 1].len > e[k].a) {
				snprintf(err, errlen,
					 "blocks %" PRIu32 " and %" PRIu32
					 ": destinations %p + %" PRIu64 " and %p overlap",
					 e[k - 1].blk, e[k].blk, (void *)e[k - 1].a, e[k - 1].len,
					 (void *)e[k].a);
				rc = -EINVAL;
			}
	}
	free(e);
	return rc;
}
