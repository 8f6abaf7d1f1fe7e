/* SPDX-License-Identifier: BSD-3-Clause */
/* The [memory] pool: page choice from sysfs, mmap + pin, and a first-fit chunk allocator. */
#include <errno.h>
#include <inttypes.h>
#include <linux/mempolicy.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "kvl_clock.h"
#include "pool.h"
#include "topo.h"

#ifndef MAP_HUGE_SHIFT
#define MAP_HUGE_SHIFT 26
#endif

#define SZ_4K (4096ull)
#define SZ_2M (2ull << 20)
#define SZ_1G (1ull << 30)

static uint64_t div_up(uint64_t a, uint64_t b)
{
	return (a + b - 1) / b;
}

/* ---- which pages ---- */

static int read_u64(const char *path, uint64_t *v)
{
	FILE *f = fopen(path, "r");
	unsigned long long x;
	int n;

	if (f == NULL)
		return -errno;
	n = fscanf(f, "%llu", &x);
	fclose(f);
	if (n != 1)
		return -EINVAL;
	*v = x;
	return 0;
}

unsigned kvl_pool_hugepages(const char *sysfs_root, struct kvl_hugepages *hp, unsigned max)
{
	/* The sizes x86 and arm64 kernels offer; others are not looked for. */
	static const uint64_t sizes_kb[] = { 64, 2048, 32768, 524288, 1048576 };
	unsigned n = 0;

	for (unsigned i = 0; i < sizeof(sizes_kb) / sizeof(sizes_kb[0]) && n < max; i++) {
		char path[KVL_PATH_LEN + 96];
		struct kvl_hugepages h = { .page_size = sizes_kb[i] << 10 };

		snprintf(path, sizeof(path),
			 "%s/kernel/mm/hugepages/hugepages-%" PRIu64 "kB/free_hugepages",
			 sysfs_root, sizes_kb[i]);
		if (read_u64(path, &h.free) < 0)
			continue;
		snprintf(path, sizeof(path),
			 "%s/kernel/mm/hugepages/hugepages-%" PRIu64 "kB/nr_hugepages", sysfs_root,
			 sizes_kb[i]);
		if (read_u64(path, &h.nr) < 0)
			h.nr = h.free;
		hp[n++] = h;
	}
	return n;
}

static const char *size_name(uint64_t page, char *buf, size_t len)
{
	if (page >= SZ_1G)
		snprintf(buf, len, "%" PRIu64 " GiB", page >> 30);
	else if (page >= (1u << 20))
		snprintf(buf, len, "%" PRIu64 " MiB", page >> 20);
	else
		snprintf(buf, len, "%" PRIu64 " KiB", page >> 10);
	return buf;
}

int kvl_pool_pick_pages(const char *sysfs_root, const struct kvl_memory_conf *conf, uint64_t size,
			struct kvl_pool_pages *p, char *err, size_t errlen)
{
	struct kvl_hugepages hp[8];
	unsigned n = conf->hugepage == KVL_TRI_OFF ? 0 : kvl_pool_hugepages(sysfs_root, hp, 8);
	const struct kvl_hugepages *want = NULL; /* the size the message is about: 2 MiB */
	char msg[KVL_POOL_MSG_LEN], other[160] = "", name[16];
	size_t len = 0;
	uint64_t need;

	memset(p, 0, sizeof(*p));
	if (conf->hugepage == KVL_TRI_OFF) {
		p->page_size = SZ_4K;
		p->map_len = div_up(size, SZ_4K) * SZ_4K;
		return 0;
	}
	/* 1 GiB pages where the operator reserved some and enough are free, else the smaller
	 * sizes, largest first. */
	for (unsigned i = n; i-- > 0;) {
		if (hp[i].page_size > SZ_1G || hp[i].nr == 0)
			continue;
		if (hp[i].free >= div_up(size, hp[i].page_size)) {
			p->page_size = hp[i].page_size;
			p->hugepage = true;
			p->map_len = div_up(size, hp[i].page_size) * hp[i].page_size;
			return 0;
		}
	}
	for (unsigned i = 0; i < n; i++)
		if (hp[i].page_size == SZ_2M)
			want = &hp[i];
	if (want == NULL && n > 0)
		want = &hp[0];
	if (want == NULL) {
		snprintf(msg, sizeof(msg),
			 "memory.hugepage = %s: the kernel shows no hugepage sizes under "
			 "%s/kernel/mm/hugepages (HugePages_Free: none; is hugetlbfs built in?)",
			 conf->hugepage == KVL_TRI_ON ? "true" : "auto", sysfs_root);
	} else {
		need = div_up(size, want->page_size);
		for (unsigned i = 0; i < n; i++)
			if (&hp[i] != want && hp[i].page_size <= SZ_1G)
				len += snprintf(
					other + len, len < sizeof(other) ? sizeof(other) - len : 0,
					"; %s pages: %" PRIu64 " free of %" PRIu64 " reserved",
					size_name(hp[i].page_size, name, sizeof(name)), hp[i].free,
					hp[i].nr);
		snprintf(msg, sizeof(msg),
			 "memory.hugepage = %s: pool_size_mb = %u needs %" PRIu64
			 " hugepages of %" PRIu64 " kB and HugePages_Free is %" PRIu64
			 " (%s/kernel/mm/hugepages/hugepages-%" PRIu64
			 "kB/free_hugepages%s); reserve them: echo %" PRIu64
			 " > %s/kernel/mm/hugepages/"
			 "hugepages-%" PRIu64 "kB/nr_hugepages",
			 conf->hugepage == KVL_TRI_ON ? "true" : "auto", conf->pool_size_mb, need,
			 want->page_size >> 10, want->free, sysfs_root, want->page_size >> 10,
			 other, want->nr + (need - (want->free < need ? want->free : need)),
			 sysfs_root, want->page_size >> 10);
	}
	if (conf->hugepage == KVL_TRI_ON) {
		snprintf(err, errlen, "%s, or set hugepage = auto to fall back to 4 KiB pages",
			 msg);
		return -ENOMEM;
	}
	p->page_size = SZ_4K;
	p->map_len = div_up(size, SZ_4K) * SZ_4K;
	snprintf(p->note, sizeof(p->note), "%.*s; using 4 KiB pages",
		 (int)(sizeof(p->note) - sizeof("; using 4 KiB pages")), msg);
	return 0;
}

/* ---- mapping and pinning ---- */

/* Prefer @node for the pages (MPOL_PREFERRED: another node when it is full, not a failure). */
static bool prefer_node(void *base, uint64_t len, int node)
{
	unsigned long mask[1024 / (8 * sizeof(unsigned long))] = { 0 };

	if (node < 0 || node >= 1024)
		return false;
	mask[node / (8 * sizeof(unsigned long))] = 1ul << (node % (8 * sizeof(unsigned long)));
	return syscall(SYS_mbind, base, len, MPOL_PREFERRED, mask, 8 * sizeof(mask), 0) == 0;
}

int kvl_pool_init_at(struct kvl_pool *pool, void *base, uint64_t size, uint64_t chunk)
{
	uint64_t n = chunk ? size / chunk : 0;

	if (base == NULL || chunk == 0 || (chunk & (chunk - 1)) != 0 || n == 0 || n > UINT32_MAX ||
	    n * chunk != size)
		return -EINVAL;
	pool->used = calloc(div_up(n, 64), sizeof(*pool->used));
	pool->run = calloc(n, sizeof(*pool->run));
	if (pool->used == NULL || pool->run == NULL) {
		free(pool->used);
		free(pool->run);
		pool->used = NULL;
		pool->run = NULL;
		return -ENOMEM;
	}
	pthread_mutex_init(&pool->lock, NULL);
	pool->base = base;
	pool->size = size;
	pool->chunk = chunk;
	pool->n_chunks = (uint32_t)n;
	pool->chunks_used = 0;
	pool->allocs = 0;
	return 0;
}

/*
 * Hugepages come aligned to their size. 4 KiB pages are mapped @chunk longer and trimmed, so
 * that every chunk starts on a multiple of its size (what kvl_pool_alloc's @align relies on).
 */
static void *map_pages(const struct kvl_pool_pages *pg, uint64_t chunk)
{
	uint64_t extra = pg->hugepage || chunk <= SZ_4K ? 0 : chunk, head;
	int flags = MAP_PRIVATE | MAP_ANONYMOUS;
	uint8_t *p;

	if (pg->hugepage)
		flags |= MAP_HUGETLB | (__builtin_ctzll(pg->page_size) << MAP_HUGE_SHIFT);
	p = mmap(NULL, pg->map_len + extra, PROT_READ | PROT_WRITE, flags, -1, 0);
	if (p == MAP_FAILED)
		return NULL;
	if (extra == 0)
		return p;
	head = (chunk - ((uintptr_t)p & (chunk - 1))) & (chunk - 1);
	if (head)
		munmap(p, head);
	if (extra - head)
		munmap(p + head + pg->map_len, extra - head);
	return p + head;
}

int kvl_pool_create(struct kvl_pool *pool, const struct kvl_memory_conf *conf,
		    const char *sysfs_root, int numa_node, char *err, size_t errlen)
{
	uint64_t size = (uint64_t)conf->pool_size_mb << 20, t0;
	char name[16];
	void *base;
	int rc;

	memset(pool, 0, sizeof(*pool));
	pool->numa_node = numa_node;
	if (size == 0)
		return 0;
	rc = kvl_pool_pick_pages(sysfs_root, conf, size, &pool->pages, err, errlen);
	if (rc < 0)
		return rc;
	t0 = kvl_now_ns();
	base = map_pages(&pool->pages, (uint64_t)conf->chunk_size_kb << 10);
	if (base == NULL && pool->pages.hugepage) {
		int e = errno;

		/* sysfs said enough were free, the mapping says otherwise (another process took
		 * them, a cgroup hugetlb limit): true fails, auto falls back as it would have. */
		if (conf->hugepage == KVL_TRI_ON) {
			snprintf(err, errlen,
				 "memory.hugepage = true: cannot map the pool's %u MiB on %s "
				 "hugepages: %s (HugePages_Free changed, or a cgroup hugetlb "
				 "limit); "
				 "reserve more or set hugepage = auto",
				 conf->pool_size_mb,
				 size_name(pool->pages.page_size, name, sizeof(name)), strerror(e));
			return -ENOMEM;
		}
		snprintf(
			pool->pages.note, sizeof(pool->pages.note),
			"memory.hugepage = auto: mapping %u MiB on %s hugepages failed (%s); using "
			"4 KiB pages",
			conf->pool_size_mb, size_name(pool->pages.page_size, name, sizeof(name)),
			strerror(e));
		pool->pages.hugepage = false;
		pool->pages.page_size = SZ_4K;
		pool->pages.map_len = div_up(size, SZ_4K) * SZ_4K;
		base = map_pages(&pool->pages, (uint64_t)conf->chunk_size_kb << 10);
	}
	if (base == NULL) {
		snprintf(err, errlen, "memory.pool_size_mb = %u: cannot map %u MiB: %s",
			 conf->pool_size_mb, conf->pool_size_mb, strerror(errno));
		return -ENOMEM;
	}
	pool->numa_bound = prefer_node(base, pool->pages.map_len, numa_node);
	if (pool->pages.hugepage) {
		/* Hugepages never swap and were reserved at mmap: touch each to place them now. */
		for (uint64_t off = 0; off < pool->pages.map_len; off += pool->pages.page_size)
			((volatile uint8_t *)base)[off] = 0;
	} else if (syscall(SYS_mlock, base, pool->pages.map_len) != 0) {
		/* the system call, not mlock(): sanitizer runtimes make mlock() a no-op, and the
		 * pool must be locked (or fail saying why) in every build */
		int e = errno;
		char cur[32], max[32];

		kvl_memlock_limits(cur, max, sizeof(cur));
		snprintf(err, errlen,
			 "memory.pool_size_mb = %u: cannot lock the pool in RAM (mlock: %s); the "
			 "locked-memory limit RLIMIT_MEMLOCK (ulimit -l) is %s (hard %s) and the "
			 "pool needs %" PRIu64 " KiB: raise it (ulimit -l unlimited, "
			 "LimitMEMLOCK=infinity in the systemd unit, or a memlock line in "
			 "limits.conf), or lower pool_size_mb",
			 conf->pool_size_mb, strerror(e), cur, max, pool->pages.map_len >> 10);
		munmap(base, pool->pages.map_len);
		return -e;
	}
	pool->map_ns = kvl_now_ns() - t0;
	rc = kvl_pool_init_at(pool, base, size, (uint64_t)conf->chunk_size_kb << 10);
	if (rc < 0) {
		snprintf(err, errlen, "memory: cannot allocate the pool's chunk table: %s",
			 strerror(-rc));
		munmap(base, pool->pages.map_len);
		pool->base = NULL;
		return rc;
	}
	return 0;
}

void kvl_pool_destroy(struct kvl_pool *pool)
{
	if (pool->base == NULL)
		return;
	/* Only a pool kvl_pool_create() mapped has a mapping length. */
	if (pool->pages.map_len)
		munmap(pool->base, pool->pages.map_len);
	pthread_mutex_destroy(&pool->lock);
	free(pool->used);
	free(pool->run);
	pool->used = NULL;
	pool->run = NULL;
	pool->base = NULL;
}

/* ---- the allocator ---- */

static bool bit(const struct kvl_pool *pool, uint64_t i)
{
	return (pool->used[i / 64] >> (i % 64)) & 1;
}

static void set_bits(struct kvl_pool *pool, uint64_t first, uint64_t n, bool on)
{
	for (uint64_t i = first; i < first + n; i++) {
		if (on)
			pool->used[i / 64] |= 1ull << (i % 64);
		else
			pool->used[i / 64] &= ~(1ull << (i % 64));
	}
}

void *kvl_pool_alloc(struct kvl_pool *pool, uint64_t len, uint64_t align)
{
	uint64_t n, step = 1, i, found = UINT64_MAX;
	uint8_t *p;

	if (pool->base == NULL || len == 0 || (align & (align - 1)) != 0) {
		errno = EINVAL;
		return NULL;
	}
	n = div_up(len, pool->chunk);
	if (align > pool->chunk)
		step = align / pool->chunk;
	pthread_mutex_lock(&pool->lock);
	/* the first chunk whose address has the alignment asked */
	for (i = 0; i < step; i++)
		if ((((uintptr_t)pool->base + i * pool->chunk) & (align ? align - 1 : 0)) == 0)
			break;
	if (i == step)
		i = pool->n_chunks; /* none has it: nothing is found below */
	/* First fit: a used chunk inside a candidate run moves the search past it. */
	while (i + n <= pool->n_chunks) {
		uint64_t j = i;

		while (j < i + n && !bit(pool, j))
			j++;
		if (j == i + n) {
			found = i;
			break;
		}
		i += div_up(j + 1 - i, step) * step;
	}
	if (found == UINT64_MAX) {
		pthread_mutex_unlock(&pool->lock);
		errno = ENOMEM;
		return NULL;
	}
	set_bits(pool, found, n, true);
	pool->run[found] = (uint32_t)n;
	__atomic_store_n(&pool->chunks_used, pool->chunks_used + (uint32_t)n, __ATOMIC_RELAXED);
	pool->allocs++;
	pthread_mutex_unlock(&pool->lock);
	p = pool->base + found * pool->chunk;
	memset(p, 0, n * pool->chunk); /* freed chunks come back dirty */
	return p;
}

int kvl_pool_free(struct kvl_pool *pool, void *p)
{
	uint64_t off, i;
	uint32_t n;

	if (!kvl_pool_holds(pool, p, 1))
		return -EINVAL;
	off = (uint64_t)((uint8_t *)p - pool->base);
	if (off % pool->chunk != 0)
		return -EINVAL;
	i = off / pool->chunk;
	pthread_mutex_lock(&pool->lock);
	n = pool->run[i];
	if (n == 0) {
		pthread_mutex_unlock(&pool->lock);
		return -EINVAL; /* not the start of an allocation (or freed twice) */
	}
	set_bits(pool, i, n, false);
	pool->run[i] = 0;
	__atomic_store_n(&pool->chunks_used, pool->chunks_used - n, __ATOMIC_RELAXED);
	pool->allocs--;
	pthread_mutex_unlock(&pool->lock);
	return 0;
}

uint32_t kvl_pool_chunks_used(const struct kvl_pool *pool)
{
	return __atomic_load_n(&pool->chunks_used, __ATOMIC_RELAXED);
}

uint32_t kvl_pool_largest_free(struct kvl_pool *pool)
{
	uint32_t best = 0, cur = 0;

	if (pool->base == NULL)
		return 0;
	pthread_mutex_lock(&pool->lock);
	for (uint64_t i = 0; i < pool->n_chunks; i++) {
		cur = bit(pool, i) ? 0 : cur + 1;
		if (cur > best)
			best = cur;
	}
	pthread_mutex_unlock(&pool->lock);
	return best;
}
