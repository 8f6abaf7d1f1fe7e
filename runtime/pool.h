/* SPDX-License-Identifier: BSD-3-Clause */
/* The [memory] pool: pinned host memory in fixed chunks, on hugepages where asked and free. */
#ifndef KVL_RUNTIME_POOL_H
#define KVL_RUNTIME_POOL_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "config.h"

/*
 * Pure C over libc (mmap, mlock, sysfs reads): no DPDK, verbs or CUDA, so the allocator and
 * the page sizing are unit-tested without EAL (tests/unit/test_pool.c). Registering the pool
 * with the NICs (runtime/segments.c) and with CUDA (runtime/gpu.c) is done by their owners,
 * which write what it took into @reg and @cuda_* here, once, at start.
 */

#define KVL_POOL_MSG_LEN 480

/* One hugepage size the kernel offers (<sysfs>/kernel/mm/hugepages/hugepages-<N>kB). */
struct kvl_hugepages {
	uint64_t page_size;
	uint64_t nr; /* nr_hugepages: reserved */
	uint64_t free;
};

/* How the pool's pages were chosen, before anything is mapped. */
struct kvl_pool_pages {
	uint64_t page_size; /* 4096, 2 MiB or 1 GiB */
	bool hugepage;
	uint64_t map_len;	     /* the pool rounded up to whole pages */
	char note[KVL_POOL_MSG_LEN]; /* hugepage = auto without enough free hugepages: why */
};

/* What registering the pool with one RDMA NIC gave (one MR for the whole pool). */
struct kvl_pool_reg {
	bool done;
	uint32_t rkey;
	uint64_t ns;
};

struct kvl_pool {
	uint8_t *base; /* NULL: no pool ([memory] pool_size_mb = 0) */
	uint64_t size;
	uint64_t chunk;
	uint32_t n_chunks;
	struct kvl_pool_pages pages;
	uint64_t map_ns; /* mmap + mlock + first touch */
	int numa_node;	 /* preferred node of its pages; -1: none asked */
	bool numa_bound;
	/* Written once at start by their owners, read by segments.c and telemetry. */
	struct kvl_pool_reg reg[KVL_MAX_NICS];
	bool cuda_registered;
	uint64_t cuda_ns;
	/* The allocator, under @lock. run[i] is the length in chunks of the allocation starting
	 * at chunk i (0 elsewhere), so a free needs only the pointer. */
	pthread_mutex_t lock;
	uint64_t *used; /* one bit per chunk */
	uint32_t *run;
	uint32_t chunks_used; /* relaxed reads by telemetry */
	uint32_t allocs;
};

/* The hugepage sizes under @sysfs_root ("/sys", or a fixture tree), smallest first. Returns
 * how many (up to @max), 0 when the kernel shows none. */
unsigned kvl_pool_hugepages(const char *sysfs_root, struct kvl_hugepages *hp, unsigned max);

/*
 * Choose the pages for a pool of @size bytes as @conf->hugepage says, from what @sysfs_root
 * shows: true takes 1 GiB pages where enough are reserved and free, else 2 MiB ones, else
 * fails with a message naming HugePages_Free and the echo that reserves them; auto does the
 * same but falls back to 4 KiB pages with @p->note saying why; false takes 4 KiB pages.
 * Returns 0 or -ENOMEM (the message in @err).
 */
int kvl_pool_pick_pages(const char *sysfs_root, const struct kvl_memory_conf *conf, uint64_t size,
			struct kvl_pool_pages *p, char *err, size_t errlen);

/*
 * Map, pin and zero the pool of @conf (nothing when pool_size_mb is 0: @pool->base stays
 * NULL and 0 is returned), its pages preferably on @numa_node (-1: anywhere). Hugepages are
 * pinned by the kernel already; 4 KiB pages are mlock'd, and a failure names RLIMIT_MEMLOCK,
 * the size needed and the fix. Returns 0 or a negative errno with the message in @err.
 */
int kvl_pool_create(struct kvl_pool *pool, const struct kvl_memory_conf *conf,
		    const char *sysfs_root, int numa_node, char *err, size_t errlen);

/* Unmap it (after every registration of it is gone). Safe on a pool never created. */
void kvl_pool_destroy(struct kvl_pool *pool);

/* Over caller memory [@base, @base + @size), not mapped or pinned here: the allocator alone
 * (tests). Returns 0 or -EINVAL / -ENOMEM. */
int kvl_pool_init_at(struct kvl_pool *pool, void *base, uint64_t size, uint64_t chunk);

/*
 * @len bytes (rounded up to whole chunks), zeroed, the first run of free chunks whose address
 * is a multiple of @align (a power of two; 0: any chunk). Chunks start on a multiple of the
 * chunk size on 4 KiB pages (the mapping is trimmed so) and of the page size on hugepages, so
 * an @align up to that always holds. NULL with errno ENOMEM when no run is long enough (free
 * chunks may still be scattered) or none has the alignment, or EINVAL (no pool, @len 0,
 * @align not a power of two).
 */
void *kvl_pool_alloc(struct kvl_pool *pool, uint64_t len, uint64_t align);

/* Give back what kvl_pool_alloc() returned. -EINVAL for a pointer it did not return. */
int kvl_pool_free(struct kvl_pool *pool, void *p);

/* Whether [@p, @p + @len) lies inside the pool. */
static inline bool kvl_pool_holds(const struct kvl_pool *pool, const void *p, uint64_t len)
{
	uintptr_t a = (uintptr_t)p, b = (uintptr_t)pool->base;

	return pool->base != NULL && a >= b && a - b <= pool->size && len <= pool->size - (a - b);
}

/* Chunks in use, and the longest run of free chunks (what the next allocation can get). */
uint32_t kvl_pool_chunks_used(const struct kvl_pool *pool);
uint32_t kvl_pool_largest_free(struct kvl_pool *pool);

#endif /* KVL_RUNTIME_POOL_H */
