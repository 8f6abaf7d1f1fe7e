/* SPDX-License-Identifier: BSD-3-Clause */
/* The local segment registry: registration on every RDMA device, publication, lookups. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <rte_malloc.h>

#include "log.h"
#include "segments.h"
#include "verbs.h"

const char *kvl_seg_reg_name(int m)
{
	static const char *const names[] = { "none", "ibv_reg_mr", "dmabuf", "peermem" };

	return m >= 0 && m <= KVL_SEG_REG_PEERMEM ? names[m] : "?";
}

void kvl_segs_init(struct kvl_local_segs *s)
{
	memset(s, 0, sizeof(*s));
	pthread_mutex_init(&s->lock, NULL);
}

void kvl_segs_fini(struct kvl_local_segs *s)
{
	pthread_mutex_destroy(&s->lock);
}

int kvl_segs_attach(struct kvl_local_segs *s, unsigned nic, struct kvl_verbs_dev *dev,
		    const char *label, char *err, size_t errlen)
{
	struct kvl_pool *pool = &s->pool;
	char msg[KVL_VERBS_ERR_LEN];
	int rc = 0;

	pthread_mutex_lock(&s->lock);
	s->dev[nic] = dev;
	s->dev_label[nic] = label;
	if (pool->base != NULL) {
		/* Remote read and write: segments of every access share this one MR (the peer's
		 * edge checks each segment's flags, config/README.md [memory]). */
		rc = kvl_verbs_reg(dev, pool->base, pool->size,
				   KVL_SEG_REMOTE_READ | KVL_SEG_REMOTE_WRITE, &pool->reg[nic].rkey,
				   &pool->reg[nic].ns, msg, sizeof(msg));
		pool->reg[nic].done = rc == 0;
	}
	pthread_mutex_unlock(&s->lock);
	if (rc < 0)
		snprintf(err, errlen, "memory: cannot register the %llu MiB pool on nic.%s: %s",
			 (unsigned long long)(pool->size >> 20), label, msg);
	else if (pool->base != NULL)
		KVL_LOG(INFO, "memory: the %llu MiB pool registered on nic.%s in %.2f ms (one MR)",
			(unsigned long long)(pool->size >> 20), label, pool->reg[nic].ns / 1e6);
	return rc;
}

void kvl_seg_desc_make(uint32_t layers, uint32_t planes, uint32_t blocks, uint32_t block_bytes,
		       uint32_t flags, struct kvl_seg_desc *d)
{
	memset(d, 0, sizeof(*d));
	d->n_layers = layers;
	d->n_planes = planes;
	d->block_count = blocks;
	d->block_size = block_bytes;
	d->plane_stride = (uint64_t)blocks * block_bytes;
	d->layer_stride = d->plane_stride * planes;
	d->length = d->layer_stride * layers;
	d->flags = flags;
}

/* A free slot (under the lock), or KVL_MAX_SEGS when none is left. */
static uint32_t slot_find(const struct kvl_local_segs *s)
{
	uint32_t i;

	for (i = 0; i < KVL_MAX_SEGS; i++)
		if (!s->meta[i].live && s->tab.seg[i].base == NULL)
			break; /* slots are never reused while running: lcores may hold ids */
	return i;
}

/* Fill slot @i and publish it to the lcores (under the lock). @tab_flags may add local-only
 * flags (KVL_SEG_GPU) to the permissions peers see in @desc. */
static void publish(struct kvl_local_segs *s, uint32_t i, const char *name, void *base, void *owned,
		    const struct kvl_seg_desc *desc, uint32_t tab_flags)
{
	struct kvl_local_seg *m = &s->meta[i];

	m->desc = *desc;
	m->desc.id = i + 1;
	snprintf(m->desc.name, sizeof(m->desc.name), "%s", name);
	m->base = base;
	m->owned = owned;
	s->tab.seg[i] = (struct kvl_seg){
		.base = base, .len = desc->length, .id = i + 1, .flags = desc->flags | tab_flags
	};
	__atomic_store_n(&s->tab.live[i], true, __ATOMIC_RELEASE);
	m->live = true;
	if (i + 1 > s->hwm)
		__atomic_store_n(&s->hwm, i + 1, __ATOMIC_RELEASE);
	__atomic_add_fetch(&s->version, 1, __ATOMIC_RELEASE);
}

int kvl_segs_add(struct kvl_local_segs *s, const char *name, void *base, void *owned,
		 const struct kvl_seg_desc *desc, uint32_t *id)
{
	struct kvl_local_seg *m;
	uint32_t i;

	pthread_mutex_lock(&s->lock);
	i = slot_find(s);
	if (i == KVL_MAX_SEGS) {
		pthread_mutex_unlock(&s->lock);
		return -ENOSPC;
	}
	m = &s->meta[i];
	m->mem = (struct kvl_mem_info){ .kind = KVL_MEM_HOST, .device = -1 };
	m->pooled = kvl_pool_holds(&s->pool, base, desc->length);
	/* Every RDMA NIC must be able to reach it: register it on each device first. */
	for (unsigned n = 0; n < KVL_MAX_NICS; n++) {
		char msg[KVL_VERBS_ERR_LEN];
		uint64_t ns = 0;
		int rc;

		if (s->dev[n] == NULL)
			continue;
		if (m->pooled && s->pool.reg[n].done) {
			m->rkey[n] = s->pool.reg[n].rkey; /* the pool's MR: its lkey serves too */
			m->reg_ns[n] = 0;
			continue;
		}
		rc = kvl_verbs_reg(s->dev[n], base, desc->length, desc->flags, &m->rkey[n], &ns,
				   msg, sizeof(msg));
		m->reg_ns[n] = ns;
		if (rc < 0) {
			pthread_mutex_unlock(&s->lock);
			KVL_LOG(ERR, "segment \"%s\" on nic.%s: %s", name, s->dev_label[n], msg);
			return rc;
		}
		m->reg[n] = KVL_SEG_REG_MR;
		KVL_LOG(INFO, "segment \"%s\" (%llu MiB) registered on nic.%s in %.2f ms", name,
			(unsigned long long)(desc->length >> 20), s->dev_label[n], ns / 1e6);
	}
	publish(s, i, name, base, owned, desc, 0);
	pthread_mutex_unlock(&s->lock);
	*id = i + 1;
	return 0;
}

int kvl_segs_add_gpu(struct kvl_local_segs *s, const char *name, void *base, void *owned,
		     const struct kvl_seg_desc *desc, const struct kvl_mem_info *mem, uint32_t *id,
		     char *err, size_t errlen)
{
	struct kvl_local_seg *m;
	unsigned on = 0;
	uint32_t i;

	pthread_mutex_lock(&s->lock);
	i = slot_find(s);
	if (i == KVL_MAX_SEGS) {
		pthread_mutex_unlock(&s->lock);
		snprintf(err, errlen, "segment \"%s\": all %u segment slots are used", name,
			 KVL_MAX_SEGS);
		return -ENOSPC;
	}
	m = &s->meta[i];
	m->mem = *mem;
	for (unsigned n = 0; n < KVL_MAX_NICS; n++) {
		char msg[320];
		int rc;

		if (s->dev[n] == NULL)
			continue;
		rc = kvl_gpu_mr_reg(s->dev[n], base, desc->length, desc->flags, &m->rkey[n],
				    &m->reg_ns[n], &m->reg[n], msg, sizeof(msg));
		if (rc < 0) {
			/* what earlier devices registered stays with them until they close */
			memset(m->reg, 0, sizeof(m->reg));
			pthread_mutex_unlock(&s->lock);
			snprintf(err, errlen, "segment \"%s\" (GPU %d) on nic.%s: %s", name,
				 mem->device, s->dev_label[n], msg);
			return rc;
		}
		on++;
		KVL_LOG(INFO,
			"segment \"%s\" (%llu MiB of GPU %d) registered on nic.%s by %s in %.2f ms",
			name, (unsigned long long)(desc->length >> 20), mem->device,
			s->dev_label[n], kvl_seg_reg_name(m->reg[n]), m->reg_ns[n] / 1e6);
	}
	if (on == 0)
		KVL_LOG(NOTICE,
			"segment \"%s\" is %llu MiB of GPU %d (%s); no RDMA NIC on this runtime, "
			"so it is registered nowhere and usable locally only",
			name, (unsigned long long)(desc->length >> 20), mem->device,
			mem->pci_bus_id);
	/* The CPU cannot touch it: tcp lands this side's READs in it through pinned bounce
	 * buffers and a copy (runtime/tcp_vram.c) where it can, and refuses the rest (status
	 * gpu-memory). Said once here, counted per transfer. */
	if (s->pool.base != NULL && s->pool.cuda_registered) /* kvl_tcp_vram_ok's test, here */
		KVL_LOG(INFO,
			"segment \"%s\" is GPU memory: tcp NICs land READs into it through their "
			"bounce buffers; WRITEs out of it and peers' requests of it over tcp are "
			"refused (status gpu-memory)",
			name);
	else
		KVL_LOG(NOTICE,
			"segment \"%s\" is GPU memory: tcp NICs refuse transfers into or out of it "
			"(status gpu-memory): their bounce buffers into VRAM need the [memory] "
			"pool "
			"pinned for CUDA",
			name);
	publish(s, i, name, base, owned, desc, KVL_SEG_GPU);
	pthread_mutex_unlock(&s->lock);
	*id = i + 1;
	return 0;
}

/* A pool allocation fails only for want of a long enough free run: say what is left. */
static void pool_short(struct kvl_pool *pool, const char *what, uint64_t len, char *err,
		       size_t errlen)
{
	snprintf(err, errlen,
		 "%s: the [memory] pool has no run of free chunks for %llu KiB (%u of %u chunks of "
		 "%llu KiB used, the longest free run %u chunks); raise memory.pool_size_mb = %llu",
		 what, (unsigned long long)(len >> 10), kvl_pool_chunks_used(pool), pool->n_chunks,
		 (unsigned long long)(pool->chunk >> 10), kvl_pool_largest_free(pool),
		 (unsigned long long)(pool->size >> 20));
}

void *kvl_segs_host_alloc(struct kvl_local_segs *s, const char *what, uint64_t len, int socket,
			  char *err, size_t errlen)
{
	void *mem;

	if (s->pool.base != NULL) {
		mem = kvl_pool_alloc(&s->pool, len, 0);
		if (mem == NULL)
			pool_short(&s->pool, what, len, err, errlen);
		return mem;
	}
	mem = rte_zmalloc_socket("kvl_segment", len, 4096, socket);
	if (mem == NULL)
		mem = rte_zmalloc("kvl_segment", len, 4096);
	if (mem == NULL)
		snprintf(err, errlen,
			 "%s: cannot allocate %llu MiB of DPDK memory; give EAL more (-m with "
			 "--no-huge, or more hugepages), or carve it from a [memory] pool",
			 what, (unsigned long long)(len >> 20));
	return mem;
}

void kvl_segs_host_free(struct kvl_local_segs *s, void *mem)
{
	if (kvl_pool_holds(&s->pool, mem, 1))
		kvl_pool_free(&s->pool, mem);
	else
		rte_free(mem);
}

uint32_t kvl_segs_find(const struct kvl_local_segs *s, const void *p, uint64_t len)
{
	uintptr_t a = (uintptr_t)p;
	uint32_t hwm = __atomic_load_n(&s->hwm, __ATOMIC_ACQUIRE);

	/* Per transfer: scan only the slots ever used, not all KVL_MAX_SEGS. */
	for (unsigned i = 0; i < hwm; i++) {
		const struct kvl_seg *g = kvl_seg_lookup(&s->tab, i + 1);

		if (g && a >= (uintptr_t)g->base && a - (uintptr_t)g->base <= g->len &&
		    len <= g->len - (a - (uintptr_t)g->base))
			return i + 1;
	}
	return 0;
}

bool kvl_segs_owns(struct kvl_local_segs *s, const void *mem)
{
	bool owned = false;

	pthread_mutex_lock(&s->lock);
	for (unsigned i = 0; i < KVL_MAX_SEGS && !owned; i++)
		owned = mem != NULL && s->meta[i].owned == mem;
	pthread_mutex_unlock(&s->lock);
	return owned;
}

uint32_t kvl_segs_visit(struct kvl_local_segs *s,
			void (*fn)(void *arg, const struct kvl_local_seg *seg), void *arg)
{
	uint32_t version;

	pthread_mutex_lock(&s->lock);
	for (unsigned i = 0; i < KVL_MAX_SEGS; i++)
		if (s->meta[i].live)
			fn(arg, &s->meta[i]);
	version = s->version;
	pthread_mutex_unlock(&s->lock);
	return version;
}

void kvl_segs_release(struct kvl_local_segs *s)
{
	pthread_mutex_lock(&s->lock);
	for (unsigned i = 0; i < KVL_MAX_SEGS; i++) {
		__atomic_store_n(&s->tab.live[i], false, __ATOMIC_RELEASE);
		s->meta[i].live = false;
		if (s->meta[i].mem.kind == KVL_MEM_GPU)
			kvl_gpu_vram_free(s->meta[i].owned);
		else
			kvl_segs_host_free(s, s->meta[i].owned);
		s->meta[i].owned = NULL;
		s->meta[i].pooled = false;
	}
	for (unsigned n = 0; n < KVL_MAX_NICS; n++)
		s->dev[n] = NULL;
	pthread_mutex_unlock(&s->lock);
}
