/* SPDX-License-Identifier: BSD-3-Clause */
/* Unit test of the [memory] pool: chunks, fragmentation, exhaustion, pages from sysfs, and the
 * segment registry's use of it (runtime/segments.c included: one MR per NIC, reused). */
#include <errno.h>
#include <linux/capability.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kvl_test.h"
#include "pool.h"
#include "segments.c"

#define CHUNK 4096u
#define NCH   16u

static uint8_t *arena; /* NCH chunks, 64 KiB aligned */

static void test_alloc_free(void)
{
	struct kvl_pool p = { 0 };
	uint8_t *a, *b, *c, *d;

	CHECK_INT(kvl_pool_init_at(&p, arena, NCH * CHUNK, CHUNK), 0);
	CHECK_INT(p.n_chunks, NCH);
	/* whole chunks, first fit, in order */
	a = kvl_pool_alloc(&p, 1, 0);
	b = kvl_pool_alloc(&p, 3 * CHUNK, 0);
	c = kvl_pool_alloc(&p, CHUNK + 1, 0);
	CHECK(a == arena);
	CHECK(b == arena + CHUNK);
	CHECK(c == arena + 4 * CHUNK);
	CHECK_INT(kvl_pool_chunks_used(&p), 1 + 3 + 2);
	CHECK_INT(kvl_pool_largest_free(&p), NCH - 6);
	/* what an allocation gets is zeroed, even where a freed one wrote */
	memset(b, 0xab, 3 * CHUNK);
	CHECK_INT(kvl_pool_free(&p, b), 0);
	CHECK_INT(kvl_pool_chunks_used(&p), 3);
	d = kvl_pool_alloc(&p, 2 * CHUNK, 0);
	CHECK(d == b); /* the hole is reused */
	CHECK(d[0] == 0 && d[2 * CHUNK - 1] == 0);
	CHECK(b[2 * CHUNK] == 0xab); /* the third chunk was not given out: left as it was */
	/* bad frees change nothing */
	CHECK_INT(kvl_pool_free(&p, d + 1), -EINVAL);	  /* inside, not a start */
	CHECK_INT(kvl_pool_free(&p, d + CHUNK), -EINVAL); /* a chunk of it, not its start */
	CHECK_INT(kvl_pool_free(&p, arena + NCH * CHUNK), -EINVAL); /* just past the end */
	CHECK_INT(kvl_pool_free(&p, arena + 15 * CHUNK), -EINVAL);  /* never allocated */
	CHECK_INT(kvl_pool_free(&p, NULL), -EINVAL);
	CHECK_INT(kvl_pool_chunks_used(&p), 5);
	CHECK_INT(kvl_pool_free(&p, d), 0);
	CHECK_INT(kvl_pool_free(&p, d), -EINVAL); /* twice */
	CHECK_INT(kvl_pool_free(&p, a), 0);
	CHECK_INT(kvl_pool_free(&p, c), 0);
	CHECK_INT(kvl_pool_chunks_used(&p), 0);
	CHECK_INT(kvl_pool_largest_free(&p), NCH);
	/* bad requests */
	errno = 0;
	CHECK(kvl_pool_alloc(&p, 0, 0) == NULL && errno == EINVAL);
	errno = 0;
	CHECK(kvl_pool_alloc(&p, 1, 3 * CHUNK) == NULL && errno == EINVAL);
	kvl_pool_destroy(&p); /* not mapped by the pool: the arena stays */
	CHECK(p.base == NULL);
	CHECK_INT(kvl_pool_init_at(&p, arena, NCH * CHUNK + 1, CHUNK), -EINVAL);
	CHECK_INT(kvl_pool_init_at(&p, arena, NCH * CHUNK, 3000), -EINVAL);
	CHECK_INT(kvl_pool_init_at(&p, NULL, NCH * CHUNK, CHUNK), -EINVAL);
	errno = 0;
	CHECK(kvl_pool_alloc(&p, 1, 0) == NULL && errno == EINVAL); /* no pool */
}

static void test_exhaustion_fragmentation(void)
{
	struct kvl_pool p = { 0 };
	uint8_t *one[NCH];

	CHECK_INT(kvl_pool_init_at(&p, arena, NCH * CHUNK, CHUNK), 0);
	errno = 0;
	CHECK(kvl_pool_alloc(&p, (NCH + 1) * CHUNK, 0) == NULL && errno == ENOMEM);
	for (unsigned i = 0; i < NCH; i++) {
		one[i] = kvl_pool_alloc(&p, CHUNK, 0);
		CHECK(one[i] == arena + i * CHUNK);
	}
	errno = 0;
	CHECK(kvl_pool_alloc(&p, 1, 0) == NULL && errno == ENOMEM); /* full */
	CHECK_INT(kvl_pool_chunks_used(&p), NCH);
	/* free every other chunk: half the pool is free, no two chunks in a row */
	for (unsigned i = 0; i < NCH; i += 2)
		CHECK_INT(kvl_pool_free(&p, one[i]), 0);
	CHECK_INT(kvl_pool_chunks_used(&p), NCH / 2);
	CHECK_INT(kvl_pool_largest_free(&p), 1);
	errno = 0;
	CHECK(kvl_pool_alloc(&p, 2 * CHUNK, 0) == NULL && errno == ENOMEM);
	CHECK(kvl_pool_alloc(&p, CHUNK, 0) == arena); /* one chunk still fits, the first */
	/* freeing a neighbour joins the holes: 12 | 13 | 14 */
	CHECK_INT(kvl_pool_free(&p, one[13]), 0);
	CHECK_INT(kvl_pool_largest_free(&p), 3);
	CHECK(kvl_pool_alloc(&p, 3 * CHUNK, 0) == arena + 12 * CHUNK);
	kvl_pool_destroy(&p);
}

static void test_alignment(void)
{
	struct kvl_pool p = { 0 };
	uint8_t *a, *b, *c;

	CHECK_INT(kvl_pool_init_at(&p, arena, NCH * CHUNK, CHUNK), 0);
	a = kvl_pool_alloc(&p, CHUNK, 0);
	b = kvl_pool_alloc(&p, CHUNK, 4 * CHUNK); /* 16 KiB aligned: skips chunks 1..3 */
	CHECK(a == arena);
	CHECK(b == arena + 4 * CHUNK);
	CHECK(((uintptr_t)b & (4 * CHUNK - 1)) == 0);
	c = kvl_pool_alloc(&p, 2 * CHUNK, 0); /* first fit uses the gap alignment left */
	CHECK(c == arena + CHUNK);
	/* 64 KiB aligned in a 64 KiB pool whose first chunk is taken: none */
	errno = 0;
	CHECK(kvl_pool_alloc(&p, CHUNK, NCH * CHUNK) == NULL && errno == ENOMEM);
	kvl_pool_destroy(&p);
	/* a pool whose base is only 4 KiB aligned cannot give 8 KiB alignment at chunk 0 */
	CHECK_INT(kvl_pool_init_at(&p, arena + CHUNK, (NCH - 1) * CHUNK, CHUNK), 0);
	a = kvl_pool_alloc(&p, CHUNK, 2 * CHUNK);
	CHECK(a == arena + 2 * CHUNK);
	kvl_pool_destroy(&p);
}

/* ---- pages from a fixture sysfs tree ---- */

static char root[64];

static void mkdirs(const char *path)
{
	char buf[512];

	snprintf(buf, sizeof(buf), "%s", path);
	for (char *s = buf + 1; *s; s++)
		if (*s == '/') {
			*s = '\0';
			mkdir(buf, 0755);
			*s = '/';
		}
	mkdir(buf, 0755);
}

static void put_num(const char *dir, const char *name, long v)
{
	char path[320];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	f = fopen(path, "w");
	CHECK(f != NULL);
	if (f) {
		fprintf(f, "%ld\n", v);
		fclose(f);
	}
}

/* The fixture's hugepages-<kb>kB: @nr reserved, @free_n free; @nr < 0: the size is gone. */
static void hp_set(unsigned kb, long nr, long free_n)
{
	char dir[256], cmd[300];

	snprintf(dir, sizeof(dir), "%s/kernel/mm/hugepages/hugepages-%ukB", root, kb);
	if (nr < 0) {
		snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
		CHECK_INT(system(cmd), 0);
		return;
	}
	mkdirs(dir);
	put_num(dir, "nr_hugepages", nr);
	put_num(dir, "free_hugepages", free_n);
}

static int pick(unsigned mb, int tri, struct kvl_pool_pages *pg, char *err, size_t len)
{
	struct kvl_memory_conf c = { .pool_size_mb = mb, .chunk_size_kb = 2048, .hugepage = tri };

	err[0] = '\0';
	return kvl_pool_pick_pages(root, &c, (uint64_t)mb << 20, pg, err, len);
}

static void test_pages(void)
{
	struct kvl_hugepages hp[8];
	struct kvl_pool_pages pg;
	char err[KVL_POOL_MSG_LEN], want[512];

	snprintf(root, sizeof(root), "/tmp/kvl_test_pool_XXXXXX");
	CHECK(mkdtemp(root) != NULL);
	hp_set(2048, 0, 0);
	hp_set(1048576, 0, 0);
	CHECK_INT(kvl_pool_hugepages(root, hp, 8), 2);
	CHECK_INT(hp[0].page_size, 2u << 20);
	CHECK_INT(hp[1].page_size, 1u << 30);

	/* none reserved: true fails naming HugePages_Free and the echo; auto falls back */
	CHECK_INT(pick(64, KVL_TRI_ON, &pg, err, sizeof(err)), -ENOMEM);
	CHECK_HAS(err, "memory.hugepage = true: pool_size_mb = 64 needs 32 hugepages of 2048 kB "
		       "and HugePages_Free is 0 (");
	snprintf(want, sizeof(want),
		 "reserve them: echo 32 > %s/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages, "
		 "or set hugepage = auto",
		 root);
	CHECK_HAS(err, want);
	CHECK_HAS(err, "1 GiB pages: 0 free of 0 reserved");
	CHECK_INT(pick(64, KVL_TRI_AUTO, &pg, err, sizeof(err)), 0);
	CHECK(!pg.hugepage);
	CHECK_INT(pg.page_size, 4096);
	CHECK_INT(pg.map_len, 64u << 20);
	CHECK_HAS(pg.note, "memory.hugepage = auto: pool_size_mb = 64 needs 32 hugepages");
	CHECK_HAS(pg.note, "; using 4 KiB pages");
	CHECK_INT(pick(64, KVL_TRI_OFF, &pg, err, sizeof(err)), 0);
	CHECK(!pg.hugepage && pg.note[0] == '\0');

	/* some reserved, too few free: the echo asks for what is reserved + the shortfall */
	hp_set(2048, 10, 4);
	CHECK_INT(pick(64, KVL_TRI_ON, &pg, err, sizeof(err)), -ENOMEM);
	CHECK_HAS(err, "HugePages_Free is 4 (");
	CHECK_HAS(err, "echo 38 > ");
	/* enough 2 MiB pages free; an odd size is rounded up to whole pages */
	hp_set(2048, 64, 40);
	CHECK_INT(pick(64, KVL_TRI_ON, &pg, err, sizeof(err)), 0);
	CHECK(pg.hugepage);
	CHECK_INT(pg.page_size, 2u << 20);
	CHECK_INT(pick(3, KVL_TRI_AUTO, &pg, err, sizeof(err)), 0);
	CHECK(pg.hugepage && pg.note[0] == '\0');
	CHECK_INT(pg.map_len, 4u << 20);
	/* 1 GiB pages where reserved and enough; else 2 MiB ones */
	hp_set(1048576, 2, 2);
	CHECK_INT(pick(1024, KVL_TRI_ON, &pg, err, sizeof(err)), 0); /* 2 MiB: 40 free, too few */
	CHECK_INT(pg.page_size, 1u << 30);
	hp_set(2048, 2048, 2048);
	CHECK_INT(pick(2048, KVL_TRI_ON, &pg, err, sizeof(err)), 0);
	CHECK_INT(pg.page_size, 1u << 30);
	CHECK_INT(pg.map_len, 2u << 30);
	CHECK_INT(pick(3072, KVL_TRI_ON, &pg, err, sizeof(err)), 0); /* 3 x 1G > 2 free */
	CHECK_INT(pg.page_size, 2u << 20);
	hp_set(1048576, 0, 0); /* 1 GiB size offered, none reserved: 2 MiB */
	CHECK_INT(pick(64, KVL_TRI_ON, &pg, err, sizeof(err)), 0);
	CHECK_INT(pg.page_size, 2u << 20);

	/* a kernel with no hugepage sizes at all */
	hp_set(2048, -1, 0);
	hp_set(1048576, -1, 0);
	CHECK_INT(kvl_pool_hugepages(root, hp, 8), 0);
	CHECK_INT(pick(64, KVL_TRI_ON, &pg, err, sizeof(err)), -ENOMEM);
	CHECK_HAS(err, "the kernel shows no hugepage sizes under ");
	CHECK_HAS(err, "HugePages_Free: none");
}

/* ---- the real thing: mapped, pinned, and the memlock error ---- */

static void test_create(void)
{
	struct kvl_memory_conf c = { .pool_size_mb = 8,
				     .chunk_size_kb = 1024,
				     .hugepage = KVL_TRI_AUTO };
	struct kvl_pool p;
	char err[KVL_POOL_MSG_LEN] = "";
	uint8_t *a;

	hp_set(2048, 0, 0); /* the fixture says none: auto takes 4 KiB pages, with a note */
	CHECK_INT(kvl_pool_create(&p, &c, root, -1, err, sizeof(err)), 0);
	if (p.base == NULL) {
		fprintf(stderr, "  create: %s\n", err);
		return;
	}
	CHECK(!p.pages.hugepage);
	CHECK_HAS(p.pages.note, "HugePages_Free is 0");
	CHECK_INT(p.n_chunks, 8);
	CHECK(((uintptr_t)p.base & ((1u << 20) - 1)) == 0); /* chunk-aligned base */
	a = kvl_pool_alloc(&p, 3u << 20, 1u << 20);
	CHECK(a == p.base);
	memset(a, 0x5a, 3u << 20);
	CHECK_INT(kvl_pool_free(&p, a), 0);
	kvl_pool_destroy(&p);
	CHECK(p.base == NULL);
	kvl_pool_destroy(&p); /* twice is harmless */

	/* hugepage = true where the fixture shows none: refused, nothing mapped */
	c.hugepage = KVL_TRI_ON;
	CHECK_INT(kvl_pool_create(&p, &c, root, -1, err, sizeof(err)), -ENOMEM);
	CHECK(p.base == NULL);
	CHECK_HAS(err, "HugePages_Free is 0");
	/* pool_size_mb = 0: no pool, no error */
	c.pool_size_mb = 0;
	CHECK_INT(kvl_pool_create(&p, &c, root, -1, err, sizeof(err)), 0);
	CHECK(p.base == NULL);
}

/* In a child that lost CAP_IPC_LOCK (if it had it) and has a 1 MiB RLIMIT_MEMLOCK: an 8 MiB
 * pool must fail with the limit, the size and the fix in the message. */
static void test_memlock(void)
{
	int pipefd[2], st = 0;
	char msg[KVL_POOL_MSG_LEN + 16] = "";
	ssize_t n;
	pid_t pid;

	CHECK_INT(pipe(pipefd), 0);
	pid = fork();
	if (pid == 0) {
		struct __user_cap_header_struct h = { _LINUX_CAPABILITY_VERSION_3, 0 };
		struct __user_cap_data_struct d[2];
		struct rlimit rl = { 1u << 20, 1u << 20 };
		struct kvl_memory_conf c = { .pool_size_mb = 8,
					     .chunk_size_kb = 1024,
					     .hugepage = KVL_TRI_OFF };
		struct kvl_pool p;
		char err[KVL_POOL_MSG_LEN];
		int rc;

		if (syscall(SYS_capget, &h, d) == 0) {
			d[CAP_IPC_LOCK / 32].effective &= ~(1u << (CAP_IPC_LOCK % 32));
			d[CAP_IPC_LOCK / 32].permitted &= ~(1u << (CAP_IPC_LOCK % 32));
			(void)syscall(SYS_capset, &h, d);
		}
		if (setrlimit(RLIMIT_MEMLOCK, &rl) != 0)
			_exit(3);
		rc = kvl_pool_create(&p, &c, root, -1, err, sizeof(err));
		if (rc == 0)
			_exit(2);
		if (write(pipefd[1], err, strlen(err) + 1) < 0)
			_exit(3);
		_exit(rc == -ENOMEM || rc == -EPERM || rc == -EAGAIN ? 0 : 4);
	}
	close(pipefd[1]);
	n = read(pipefd[0], msg, sizeof(msg) - 1);
	close(pipefd[0]);
	waitpid(pid, &st, 0);
	CHECK(WIFEXITED(st));
	CHECK_INT(WEXITSTATUS(st), 0);
	CHECK(n > 0);
	CHECK_HAS(msg, "memory.pool_size_mb = 8: cannot lock the pool in RAM (mlock: ");
	CHECK_HAS(msg, "RLIMIT_MEMLOCK (ulimit -l) is 1024 KiB (hard 1024 KiB) and the pool needs "
		       "8192 KiB: raise it (ulimit -l unlimited");
}

/* ---- the registry over the pool, with a fake verbs registration ---- */

int kvl_logtype_runtime;

/* No GPU segment reaches the registry in these tests (runtime/gpu.c is not linked). */
void kvl_gpu_vram_free(void *p)
{
	CHECK(p == NULL);
}

int kvl_gpu_mr_reg(struct kvl_verbs_dev *dev, void *base, uint64_t len, uint32_t flags,
		   uint32_t *rkey, uint64_t *ns, uint8_t *method, char *err, size_t errlen)
{
	(void)dev, (void)base, (void)len, (void)flags, (void)rkey, (void)ns, (void)method;
	snprintf(err, errlen, "not in these tests");
	return -ENOTSUP;
}

static struct {
	unsigned calls;
	void *base[8];
	uint64_t len[8];
	uint32_t flags[8];
	int fail; /* the next call fails with this */
} reg;

int kvl_verbs_reg(struct kvl_verbs_dev *d, void *base, uint64_t len, uint32_t flags, uint32_t *rkey,
		  uint64_t *ns, char *err, size_t errlen)
{
	unsigned i = reg.calls++;

	(void)d;
	if (reg.fail) {
		int rc = reg.fail;

		reg.fail = 0;
		snprintf(err, errlen, "fake: cannot register %llu bytes", (unsigned long long)len);
		return rc;
	}
	if (i < 8) {
		reg.base[i] = base;
		reg.len[i] = len;
		reg.flags[i] = flags;
	}
	*rkey = 0x100 + i;
	*ns = 1000 + i;
	return 0;
}

#include "heap_rte_malloc.h" /* no EAL here: DPDK memory is the heap */

static void test_segments(void)
{
	static struct kvl_local_segs s; /* large: not on the stack */
	struct kvl_verbs_dev *dev0 = (struct kvl_verbs_dev *)0x1000,
			     *dev1 = (struct kvl_verbs_dev *)0x2000;
	uint8_t *big = aligned_alloc(1u << 20, 4u << 20);
	char err[320] = "";
	struct kvl_seg_desc d;
	uint32_t id1, id2, id3;
	void *a, *b, *heap;

	kvl_segs_init(&s);
	CHECK_INT(kvl_pool_init_at(&s.pool, big, 4u << 20, 1u << 20), 0);
	/* one registration of the whole pool per device, for remote read and write */
	CHECK_INT(kvl_segs_attach(&s, 0, dev0, "a", err, sizeof(err)), 0);
	CHECK_INT(kvl_segs_attach(&s, 1, dev1, "b", err, sizeof(err)), 0);
	CHECK_INT(reg.calls, 2);
	CHECK(reg.base[0] == big && reg.base[1] == big);
	CHECK_INT(reg.len[0], 4u << 20);
	CHECK_INT(reg.flags[1], KVL_SEG_REMOTE_READ | KVL_SEG_REMOTE_WRITE);
	CHECK(s.pool.reg[0].done && s.pool.reg[1].done);
	CHECK_INT(s.pool.reg[1].rkey, 0x101);
	CHECK_INT(s.pool.reg[0].ns, 1000);

	/* carved segments: no registration, the pool's rkeys */
	a = kvl_segs_host_alloc(&s, "segment.a", 1u << 20, -1, err, sizeof(err));
	b = kvl_segs_host_alloc(&s, "segment.b", 100, -1, err, sizeof(err));
	CHECK(a == big && b == big + (1u << 20));
	kvl_seg_desc_make(1, 1, 16, 65536, KVL_SEG_REMOTE_READ, &d);
	CHECK_INT(kvl_segs_add(&s, "a", a, a, &d, &id1), 0);
	kvl_seg_desc_make(1, 1, 1, 100, 0, &d);
	CHECK_INT(kvl_segs_add(&s, "b", b, b, &d, &id2), 0);
	CHECK_INT(reg.calls, 2);
	CHECK(s.meta[id1 - 1].pooled && s.meta[id2 - 1].pooled);
	CHECK_INT(s.meta[id1 - 1].rkey[0], 0x100);
	CHECK_INT(s.meta[id1 - 1].rkey[1], 0x101);
	CHECK_INT(s.meta[id2 - 1].reg_ns[0], 0);
	CHECK_INT(kvl_pool_chunks_used(&s.pool), 2);
	/* memory outside the pool is registered on each device, as before */
	heap = aligned_alloc(4096, 8192);
	kvl_seg_desc_make(1, 1, 2, 4096, KVL_SEG_REMOTE_WRITE, &d);
	CHECK_INT(kvl_segs_add(&s, "heap", heap, NULL, &d, &id3), 0);
	CHECK_INT(reg.calls, 4);
	CHECK(reg.base[2] == heap && reg.len[3] == 8192);
	CHECK(!s.meta[id3 - 1].pooled);
	CHECK_INT(s.meta[id3 - 1].rkey[1], 0x103);
	/* a range crossing the pool's end is not the pool's */
	CHECK(!kvl_pool_holds(&s.pool, big + (3u << 20), (1u << 20) + 1));
	/* exhaustion: the message names the chunks and the key */
	CHECK(kvl_segs_host_alloc(&s, "kvl_seg_alloc(\"x\")", 3u << 20, -1, err, sizeof(err)) ==
	      NULL);
	CHECK_HAS(err, "kvl_seg_alloc(\"x\"): the [memory] pool has no run of free chunks for "
		       "3072 KiB (2 of 4 chunks of 1024 KiB used, the longest free run 2 chunks); "
		       "raise memory.pool_size_mb = 4");
	/* the end: pooled memory goes back to the pool, nothing is rte_free'd from it */
	kvl_segs_release(&s);
	CHECK_INT(kvl_pool_chunks_used(&s.pool), 0);
	free(heap);

	/* a pool the device refuses: attach fails with the cause */
	reg.fail = -ENOMEM;
	CHECK_INT(kvl_segs_attach(&s, 0, dev0, "a", err, sizeof(err)), -ENOMEM);
	CHECK_HAS(err, "memory: cannot register the 4 MiB pool on nic.a: fake: cannot register "
		       "4194304 bytes");
	CHECK(!s.pool.reg[0].done);
	kvl_pool_destroy(&s.pool);
	kvl_segs_fini(&s);
	free(big);
}

int main(void)
{
	arena = aligned_alloc(NCH * CHUNK, NCH * CHUNK);
	if (arena == NULL)
		return 1;
	test_alloc_free();
	test_exhaustion_fragmentation();
	test_alignment();
	test_pages();
	test_create();
	test_memlock();
	test_segments();
	if (root[0]) {
		char cmd[128];

		snprintf(cmd, sizeof(cmd), "rm -rf %s", root);
		CHECK_INT(system(cmd), 0);
	}
	free(arena);
	return kvl_test_done("pool");
}
