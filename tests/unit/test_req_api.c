/* SPDX-License-Identifier: BSD-3-Clause */
/* Unit test of the request API glue (kvl_req_*), with no EAL and a fake NIC lcore. */
/*
 * SPDK's style: the files under test are included (the request path and the services below
 * it: peer table, segment registry, staging), so their static helpers are reachable, and what
 * they call outside themselves is stubbed below. The rings to the NIC lcore's scheduler are
 * real rte_rings (rte_ring_init on heap memory); the lcore is a thread of this test that
 * answers OPEN the way lcores/nic_sched.c does (open_rc), or is not running at all: then the
 * API's 5 s "lcore not answering" guards must fire.
 */
#include <pthread.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "kvl_test.h"

#include "peers.c"
#include "req_api.c"
#include "req_dest.c"
#include "segments.c"
#include "staging.c"

/* ---- stubs: what those call in the rest of the runtime ---- */

int kvl_logtype_runtime;

/* This host's tier (runtime/tier.c): off in these tests ([sched] tier = false). */
int kvl_tier_check(struct kvl_runtime *r, const struct kvl_req_desc *d, uint32_t slot)
{
	(void)r, (void)d, (void)slot;
	return -ENOTCONN;
}

int kvl_tier_nic(struct kvl_runtime *r)
{
	(void)r;
	return -1;
}

#define PEER	    3u /* the one peer the fake control path knows */
#define STAGING_MB  1
#define SLOT_KB	    64
#define MAX_REQS    4
#define RING_SLOTS  8
#define SEG_ID	    7
#define SEG_LEN	    (1u << 20)
#define fake_pub    (rt.peers.pub[PEER])
#define BUDGET_MB   64
#define BUDGET	    ((uint64_t)BUDGET_MB << 20)
#define OPEN_WAIT_S 12 /* the test's own bound on one kvl_req_open (the guard is 5 s) */

static struct kvl_nic_sched fake_ns;
static struct kvl_nic_io fake_io;
static struct kvl_lcore fake_lc;
static uint8_t *local_seg; /* a registered local segment of SEG_LEN bytes (id 1) */
static unsigned kicks, sched_created;
static bool sge_equal_only;

void kvl_nic_io_kick(struct kvl_nic_io *io)
{
	CHECK(io == &fake_io);
	__atomic_fetch_add(&kicks, 1, __ATOMIC_RELAXED);
}

int kvl_gpu_sample(struct kvl_gpu *g)
{
	(void)g;
	return -ENOTSUP; /* no GPU configured: never called */
}

/* "VRAM" (runtime/gpu.c) is host memory here: the scheduler never touches its staging with
 * the CPU, so nothing tells them apart. Counted, so a test sees what was freed. */
static unsigned vram_allocs, vram_frees;

void kvl_gpu_vram_free(void *p)
{
	vram_frees += p != NULL;
	free(p);
}

void *kvl_gpu_vram_alloc(int device, uint64_t len, char *err, size_t errlen)
{
	(void)err, (void)errlen;
	CHECK_INT(device, 0);
	vram_allocs++;
	return aligned_alloc(4096, len);
}

int kvl_gpu_mr_reg(struct kvl_verbs_dev *dev, void *base, uint64_t len, uint32_t flags,
		   uint32_t *rkey, uint64_t *ns, uint8_t *method, char *err, size_t errlen)
{
	(void)dev, (void)base, (void)len, (void)flags, (void)rkey, (void)ns, (void)method;
	snprintf(err, errlen, "stub");
	return -ENOTSUP;
}

int kvl_verbs_reg(struct kvl_verbs_dev *d, void *base, uint64_t len, uint32_t flags, uint32_t *rkey,
		  uint64_t *ns, char *err, size_t errlen)
{
	(void)d, (void)base, (void)len, (void)flags, (void)rkey, (void)ns, (void)err, (void)errlen;
	return -ENODEV; /* no RDMA device is attached: never called */
}

bool kvl_verbs_dev_sge_equal_only(const struct kvl_verbs_dev *d)
{
	(void)d;
	return sge_equal_only;
}

int kvl_lcore_add_stage(struct kvl_lcore *lc, const char *name, kvl_stage_fn fn, void *arg)
{
	(void)lc, (void)name, (void)fn, (void)arg;
	return 0;
}

static struct kvl_sched_cfg created_cfg;

struct kvl_nic_sched *kvl_nic_sched_create(struct kvl_nic_io *io,
					   const struct kvl_nic_sched_cfg *cfg)
{
	CHECK(io == &fake_io);
	created_cfg = *cfg->sched;
	sched_created++;
	return &fake_ns;
}

void kvl_nic_sched_free(struct kvl_nic_sched *ns)
{
	(void)ns;
}

struct rte_ring *kvl_nic_sched_cmd_ring(struct kvl_nic_sched *ns)
{
	return ns->cmd;
}

unsigned kvl_nic_sched_take_wc(void *arg, struct kvl_wc *wc, unsigned n)
{
	(void)arg, (void)wc;
	return n;
}

unsigned kvl_nic_sched_stage(struct kvl_lcore *lc, void *arg)
{
	(void)lc, (void)arg;
	return 0;
}

/* Staging comes from DPDK memory; here from the heap (no EAL). */
#include "heap_rte_malloc.h"

/* ---- the fake NIC lcore ---- */

static struct rte_ring *ring_new(const char *name, size_t esize, unsigned count, unsigned flags)
{
	ssize_t sz = rte_ring_get_memsize_elem((unsigned)esize, count);
	struct rte_ring *r;

	if (sz < 0)
		return NULL;
	r = aligned_alloc(RTE_CACHE_LINE_SIZE, ((size_t)sz + 63) & ~(size_t)63);
	if (r == NULL || rte_ring_init(r, name, count, flags) != 0) {
		free(r);
		return NULL;
	}
	return r;
}

/* What the lcore thread does with the commands it takes. */
static struct {
	pthread_t th;
	bool running, stop;
	int32_t open_answer; /* what OPEN gets: 0, or a negative errno (the scheduler refused) */
	int32_t next_id;
	unsigned n_open, n_done, n_cancel;
	struct kvl_nsched_cmd last;
} lc_sim;

static void *lcore_main(void *arg)
{
	(void)arg;
	while (!__atomic_load_n(&lc_sim.stop, __ATOMIC_ACQUIRE)) {
		struct kvl_nsched_cmd c;

		if (rte_ring_sc_dequeue_elem(fake_ns.cmd, &c, sizeof(c)) != 0) {
			sched_yield();
			continue;
		}
		lc_sim.last = c;
		switch (c.type) {
		case KVL_NSCHED_OPEN:
			lc_sim.n_open++;
			c.r->sched_id = lc_sim.next_id++;
			for (uint32_t i = 0; i < c.r->d.n_blocks; i++)
				c.r->off[i] = UINT64_MAX; /* nothing landed yet */
			__atomic_store_n(&c.r->open_rc, lc_sim.open_answer, __ATOMIC_RELEASE);
			break;
		case KVL_NSCHED_DONE:
			lc_sim.n_done++;
			break;
		case KVL_NSCHED_CANCEL:
			lc_sim.n_cancel++;
			break;
		}
	}
	return NULL;
}

static void lcore_start(void)
{
	lc_sim.stop = false;
	CHECK_INT(pthread_create(&lc_sim.th, NULL, lcore_main, NULL), 0);
	lc_sim.running = true;
}

static void lcore_stop(void)
{
	if (!lc_sim.running)
		return;
	__atomic_store_n(&lc_sim.stop, true, __ATOMIC_RELEASE);
	pthread_join(lc_sim.th, NULL);
	lc_sim.running = false;
}

/* Wait until the lcore took everything in its ring (it counts as it goes). */
static void lcore_drain(void)
{
	while (rte_ring_count(fake_ns.cmd) != 0)
		sched_yield();
	usleep(1000); /* the last command's counter is written after the dequeue */
}

/* The lcore's events to the API: what nic_sched.c puts in its ev ring. */
static void emit(struct kvl_nsreq *r, uint16_t type, uint32_t step, int32_t status)
{
	struct kvl_sched_event e = { .peer = PEER,
				     .user = r->d.user,
				     .req = r->sched_id,
				     .step = step,
				     .status = status,
				     .type = type };

	CHECK_INT(rte_ring_sp_enqueue_elem(fake_ns.ev, &e, sizeof(e)), 0);
}

/* ---- the world: one NIC lcore with a scheduler, one READY peer on it ---- */

static struct kvl_runtime rt;
static char err[256];

/* One tcp NIC "n0" on the fake lcore, a scheduler's [sched], an empty segment registry. */
static void world_conf(void)
{
	memset(&rt, 0, sizeof(rt));
	rt.cfg.n_nics = 1;
	rt.cfg.sched.staging_mb = STAGING_MB;
	rt.cfg.sched.slot_kb = SLOT_KB;
	rt.cfg.sched.max_requests = MAX_REQS;
	rt.cfg.sched.max_blocks = 64;
	rt.cfg.sched.window_min_kb = 64;
	rt.cfg.sched.window_max_mb = 1;
	snprintf(rt.cfg.nics[0].label, sizeof(rt.cfg.nics[0].label), "n0");
	rt.nic[0].info.transport = KVL_TRANSPORT_TCP;
	rt.nic[0].lcore = &fake_lc;
	rt.nic[0].io = &fake_io;
	kvl_segs_init(&rt.segs);
}

static void world_init(void)
{
	struct kvl_seg_desc seg_d;
	uint32_t seg_id = 0;

	world_conf();
	rt.cfg.sched.max_msg_kb = 64;
	rt.cfg.sched.budget_mb = BUDGET_MB;
	sched_created = 0;
	/* as kvl_runtime_start() does: schedulers, the table, segments, then staging's */
	CHECK_INT(kvl_staging_start(&rt, err, sizeof(err)), 0);
	CHECK_INT(kvl_req_table_start(&rt, err, sizeof(err)), 0);
	CHECK_INT(sched_created, 1);
	CHECK(rt.reqs != NULL);
	CHECK(rt.nic[0].staging != NULL);
	kvl_seg_desc_make(1, 1, SEG_LEN / 4096, 4096, KVL_SEG_REMOTE_READ, &seg_d);
	CHECK_INT(kvl_segs_add(&rt.segs, "local", local_seg, NULL, &seg_d, &seg_id), 0);
	CHECK_INT(seg_id, 1);
	CHECK_INT(kvl_staging_register(&rt, err, sizeof(err)), 0);
	rt.peers.on = true;

	memset(&fake_pub, 0, sizeof(fake_pub));
	rte_spinlock_init(&fake_pub.lock);
	fake_pub.state = KVL_PEER_READY;
	fake_pub.n_conns = 1;
	fake_pub.conn[0] = (struct kvl_peer_conn){ .nic = 0, .slot = 0, .gen = 1 };
	fake_pub.n_segs = 2;
	fake_pub.seg[0] = (struct kvl_seg_desc){
		.id = SEG_ID, .length = SEG_LEN, .flags = KVL_SEG_REMOTE_READ | KVL_SEG_REMOTE_WRITE
	};
	fake_pub.seg[1] = (struct kvl_seg_desc){ .id = SEG_ID + 1,
						 .length = SEG_LEN,
						 .flags = KVL_SEG_REMOTE_READ };
	lc_sim.open_answer = 0;
	lc_sim.next_id = 100;
	lc_sim.n_open = lc_sim.n_done = lc_sim.n_cancel = 0;
	kicks = 0;
}

static void world_fini(void)
{
	struct kvl_sched_event e;

	lcore_stop();
	while (rte_ring_sc_dequeue_elem(fake_ns.ev, &e, sizeof(e)) == 0)
		;
	/* as kvl_runtime_stop() does; what is still open is freed (ASan's leak check) */
	kvl_staging_stop(&rt);
	kvl_req_table_stop(&rt);
	CHECK(rt.reqs == NULL);
	CHECK(rt.nic[0].staging == NULL);
	kvl_segs_release(&rt.segs); /* the staging is a segment's: freed here */
	kvl_segs_fini(&rt.segs);
}

/* Two steps over three blocks: step 0 = {0, 1}, step 1 = {1, 2}. */
static struct kvl_req_block blk[3];
static const uint32_t step_first[] = { 0, 2, 4 };
static const uint32_t step_blocks[] = { 0, 1, 1, 2 };

static struct kvl_req_desc pull_desc(void)
{
	for (uint32_t i = 0; i < 3; i++)
		blk[i] = (struct kvl_req_block){ .remote_off = (uint64_t)i * 4096,
						 .remote_seg = SEG_ID,
						 .length = 4096 };
	return (struct kvl_req_desc){ .blocks = blk,
				      .n_blocks = 3,
				      .n_steps = 2,
				      .step_first = step_first,
				      .step_blocks = step_blocks,
				      .deadline_us = 250,
				      .user = 0xabcdef,
				      .cls = KVL_REQ_DECODE,
				      .dir = KVL_REQ_PULL };
}

/* The request the API keeps for @h (the test looks inside, as the lcore would). */
static struct kvl_nsreq *req_of(kvl_req_t h)
{
	return lookup(&rt, h);
}

/* ---- kvl_req_open in a thread, bounded: a guard that never fires fails, not hangs ---- */

struct open_call {
	kvl_peer_t peer;
	struct kvl_req_desc d;
	kvl_req_t h;
	int rc;
	bool done;
};

static void *open_thread(void *arg)
{
	struct open_call *o = arg;

	o->rc = kvl_req_open(&rt, o->peer, &o->d, &o->h);
	__atomic_store_n(&o->done, true, __ATOMIC_RELEASE);
	return NULL;
}

/* Returns the seconds kvl_req_open took, or -1 when it had not returned in OPEN_WAIT_S. */
static double open_bounded(struct open_call *o)
{
	pthread_t th;
	uint64_t t0 = kvl_now_ns();

	o->done = false;
	if (pthread_create(&th, NULL, open_thread, o) != 0)
		return -1;
	while (!__atomic_load_n(&o->done, __ATOMIC_ACQUIRE)) {
		if (kvl_now_ns() - t0 > (uint64_t)OPEN_WAIT_S * 1000000000ull)
			return -1; /* the thread stays stuck: the caller reports and exits */
		usleep(10000);
	}
	pthread_join(th, NULL);
	return (double)(kvl_now_ns() - t0) * 1e-9;
}

static void stuck(const char *what)
{
	fprintf(stderr,
		"%s: kvl_req_open did not return within %d s: its %.0f s lcore guard never "
		"fired\n",
		what, OPEN_WAIT_S, LCORE_WAIT_NS / 1e9);
	kvl_test_failures++;
	exit(kvl_test_done("req_api"));
}

/* Issue 13, point 1: an lcore that takes nothing (a stopped or wedged loop). Its ring has
 * room, so OPEN goes in, and the API waits for open_rc: the guard must end that wait. */
static void test_guard_lcore_silent(void)
{
	struct open_call o = { .peer = PEER, .d = pull_desc() };
	struct kvl_nsched_cmd c;
	uint32_t head;
	double s;

	world_init(); /* no lcore thread: nothing drains the ring */
	head = rt.reqs->free_head;
	s = open_bounded(&o);
	if (s < 0)
		stuck("silent lcore");
	CHECK_INT(o.rc, -ETIMEDOUT);
	CHECK(s >= 4.9 && s < 8.0);
	printf("silent lcore: kvl_req_open gave %d after %.2f s\n", o.rc, s);
	/* Nothing was kept: the table's slot is still free... */
	CHECK_INT(rt.reqs->free_head, head);
	/* ...but OPEN is in the ring, and its request stays allocated for the lcore. */
	CHECK_INT(rte_ring_count(fake_ns.cmd), 1);
	CHECK_INT(rte_ring_sc_dequeue_elem(fake_ns.cmd, &c, sizeof(c)), 0);
	CHECK_INT(c.type, KVL_NSCHED_OPEN);
	CHECK_INT(c.r->open_rc, 1);
	CHECK_INT(rt.reqs->n_orphans, 1);
	world_fini(); /* an orphan still in the table is freed with it (ASan: no leak) */
}

static kvl_req_t open_ok(const struct kvl_req_desc *d, int *rc);

/* The lcore wakes up after the guard fired and opens the request after all: nobody holds a
 * handle to it, so kvl_req_poll cancels it, shows none of its events, and frees it at its
 * end; the handle table is never touched (before, its end released a slot the table had
 * never taken, corrupting the free list). */
static void test_guard_late_open(void)
{
	struct open_call o = { .peer = PEER, .d = pull_desc() };
	struct kvl_req_event ev[4];
	struct kvl_nsched_cmd c;
	struct kvl_nsreq *r;
	uint32_t head;
	double s;

	world_init();
	head = rt.reqs->free_head;
	s = open_bounded(&o);
	if (s < 0)
		stuck("late open");
	CHECK_INT(o.rc, -ETIMEDOUT);
	CHECK_INT(rte_ring_sc_dequeue_elem(fake_ns.cmd, &c, sizeof(c)), 0);
	r = c.r;
	r->sched_id = 5;
	__atomic_store_n(&r->open_rc, 0, __ATOMIC_RELEASE); /* the late lcore opens it */
	emit(r, KVL_SCHED_EV_STEP_READY, 0, 0);
	CHECK_INT(kvl_req_poll(&rt, ev, 4), 0); /* its READY reaches nobody */
	CHECK_INT(rte_ring_count(fake_ns.cmd), 1);
	CHECK_INT(rte_ring_sc_dequeue_elem(fake_ns.cmd, &c, sizeof(c)), 0);
	CHECK_INT(c.type, KVL_NSCHED_CANCEL); /* ...and it is canceled, once */
	CHECK(c.r == r);
	CHECK_INT(kvl_req_poll(&rt, ev, 4), 0);
	CHECK_INT(rte_ring_count(fake_ns.cmd), 0);
	emit(r, KVL_SCHED_EV_REQ_FAILED, 0, KVL_ERR_CANCELED);
	CHECK_INT(kvl_req_poll(&rt, ev, 4), 0); /* its end: freed (ASan: no leak) */
	CHECK_INT(rt.reqs->n_orphans, 0);
	CHECK_INT(rt.reqs->free_head, head);
	/* A late refusal: nothing to cancel, the request is freed at the next poll. */
	s = open_bounded(&o);
	if (s < 0)
		stuck("late refusal");
	CHECK_INT(o.rc, -ETIMEDOUT);
	CHECK_INT(rte_ring_sc_dequeue_elem(fake_ns.cmd, &c, sizeof(c)), 0);
	__atomic_store_n(&c.r->open_rc, -ENOSPC, __ATOMIC_RELEASE);
	CHECK_INT(kvl_req_poll(&rt, ev, 4), 0);
	CHECK_INT(rt.reqs->n_orphans, 0);
	CHECK_INT(rte_ring_count(fake_ns.cmd), 0);
	CHECK_INT(rt.reqs->free_head, head);
	/* The table still works: a request opened now gets the slot and its events. */
	lcore_start();
	{
		int rc;
		kvl_req_t h = open_ok(&o.d, &rc);

		CHECK_INT(rc, 0);
		CHECK(h != 0);
	}
	lcore_stop();
	world_fini();
}

/* The same lcore with a full command ring: send_cmd's own guard. */
static void test_guard_ring_full(void)
{
	struct open_call o = { .peer = PEER, .d = pull_desc() };
	struct kvl_nsched_cmd c = { .type = KVL_NSCHED_DONE };
	unsigned filled = 0;
	double s;

	world_init();
	while (rte_ring_mp_enqueue_elem(fake_ns.cmd, &c, sizeof(c)) == 0)
		filled++;
	CHECK(filled > 0);
	s = open_bounded(&o);
	if (s < 0)
		stuck("full ring");
	CHECK_INT(o.rc, -ETIMEDOUT);
	CHECK(s >= 4.9 && s < 8.0);
	printf("full ring: kvl_req_open gave %d after %.2f s\n", o.rc, s);
	CHECK_INT(rte_ring_count(fake_ns.cmd), filled); /* nothing more went in */
	CHECK_INT(kicks, 0);
	while (rte_ring_sc_dequeue_elem(fake_ns.cmd, &c, sizeof(c)) == 0)
		;
	world_fini();
}

/* Open @d on PEER with the lcore answering; the handle, or 0 with the errno in *@rc. */
static kvl_req_t open_ok(const struct kvl_req_desc *d, int *rc)
{
	kvl_req_t h = 0;

	*rc = kvl_req_open(&rt, PEER, d, &h);
	return *rc == 0 ? h : 0;
}

/* A running world with the lcore answering, and @d opened in it: its request, or NULL (the
 * failed check says why). */
static struct kvl_nsreq *world_with_req(const struct kvl_req_desc *d, kvl_req_t *h)
{
	int rc;

	world_init();
	lcore_start();
	*h = open_ok(d, &rc);
	CHECK_INT(rc, 0);
	return *h ? req_of(*h) : NULL;
}

/* Every malformed descriptor is refused before anything reaches the lcore. */
static void test_open_checks(void)
{
	struct kvl_req_desc d;
	struct kvl_req_block bad[3];
	uint32_t first_bad[] = { 0, 2, 2 }, blocks_bad[] = { 0, 1, 1, 3 }, first1[] = { 1, 2, 4 };
	kvl_req_t h = 0;
	uint32_t head;

	world_init();
	lcore_start();
	head = rt.reqs->free_head;
#define REFUSED(expr, want)                                       \
	do {                                                      \
		d = pull_desc();                                  \
		memcpy(bad, blk, sizeof(bad));                    \
		d.blocks = bad;                                   \
		expr;                                             \
		CHECK_INT(kvl_req_open(&rt, PEER, &d, &h), want); \
	} while (0)
	CHECK_INT(kvl_req_open(&rt, PEER, NULL, &h), -EINVAL);
	d = pull_desc();
	CHECK_INT(kvl_req_open(&rt, PEER, &d, NULL), -EINVAL);
	REFUSED(d.blocks = NULL, -EINVAL);
	REFUSED(d.step_first = NULL, -EINVAL);
	REFUSED(d.step_blocks = NULL, -EINVAL);
	REFUSED(d.n_blocks = 0, -EINVAL);
	REFUSED(d.n_steps = 0, -EINVAL);
	REFUSED(d.cls = KVL_REQ_PREFILL + 1, -EINVAL);
	REFUSED(d.dir = KVL_REQ_PUSH + 1, -EINVAL);
	REFUSED(d.step_first = first1, -EINVAL);      /* step_first[0] != 0 */
	REFUSED(d.step_first = first_bad, -EINVAL);   /* a step naming no block */
	REFUSED(d.step_blocks = blocks_bad, -EINVAL); /* a block index past n_blocks */
	REFUSED(bad[1].length = 0, -EINVAL);
	REFUSED(bad[1].length = SLOT_KB * 1024 + 1, -EMSGSIZE);
	REFUSED(bad[2].remote_seg = 99, -ENOENT);
	REFUSED(bad[0].remote_off = SEG_LEN - 4095, -ERANGE);
	REFUSED(bad[0].remote_off = UINT64_MAX - 100, -ERANGE);
	REFUSED(bad[2].local = local_seg, -EINVAL); /* PULL: no local address */
	/* PUSH wants WRITE access: segment SEG_ID + 1 is READ-only */
	REFUSED((d.dir = KVL_REQ_PUSH, bad[0].local = local_seg, bad[1].local = local_seg,
		 bad[2].local = local_seg, bad[1].remote_seg = SEG_ID + 1),
		-EACCES);
	REFUSED((d.dir = KVL_REQ_PUSH, bad[0].local = local_seg, bad[1].local = local_seg,
		 bad[2].local = &bad[2]),
		-EFAULT); /* not in a registered segment */
	REFUSED((d.dir = KVL_REQ_PUSH, bad[0].local = local_seg, bad[1].local = local_seg,
		 bad[2].local = local_seg + SEG_LEN - 100),
		-EFAULT); /* past its end */
	REFUSED((d.dir = KVL_REQ_PUSH, bad[0].local = local_seg, bad[1].local = local_seg,
		 bad[2].local = rt.nic[0].staging + 8192),
		-EINVAL); /* the scheduler's own staging */
#undef REFUSED
	/* Peers: unknown, not READY, READY but with no connection on a scheduler's NIC. */
	d = pull_desc();
	CHECK_INT(kvl_req_open(&rt, PEER + 1, &d, &h), -ENOTCONN);
	fake_pub.state = KVL_PEER_EXCHANGE;
	CHECK_INT(kvl_req_open(&rt, PEER, &d, &h), -ENOTCONN);
	fake_pub.state = KVL_PEER_DEAD;
	CHECK_INT(kvl_req_open(&rt, PEER, &d, &h), -ENOTCONN);
	fake_pub.state = KVL_PEER_READY;
	fake_pub.n_conns = 0;
	CHECK_INT(kvl_req_open(&rt, PEER, &d, &h), -ENOTCONN);
	fake_pub.n_conns = 1;
	fake_pub.conn[0].nic = 1; /* a NIC without a scheduler */
	CHECK_INT(kvl_req_open(&rt, PEER, &d, &h), -ENOTCONN);
	fake_pub.conn[0].nic = 0;
	/* None of it reached the lcore or took a slot. */
	lcore_drain();
	CHECK_INT(lc_sim.n_open, 0);
	CHECK_INT(kicks, 0);
	CHECK_INT(h, 0);
	CHECK_INT(rt.reqs->free_head, head);
	world_fini();
}

/* Without a scheduler ([sched] staging_mb = 0) the calls say so. */
static void test_no_scheduler(void)
{
	struct kvl_req_desc d = pull_desc();
	struct kvl_req_event ev[4];
	kvl_req_t h = 0;
	void *addr;

	memset(&rt, 0, sizeof(rt));
	rt.cfg.n_nics = 1;
	rt.cfg.sched.slot_kb = SLOT_KB; /* the INI's default; staging_mb 0 */
	rt.nic[0].lcore = &fake_lc;
	rt.nic[0].io = &fake_io;
	rt.peers.on = true;
	sched_created = 0;
	CHECK_INT(kvl_staging_start(&rt, err, sizeof(err)), 0);
	CHECK_INT(kvl_req_table_start(&rt, err, sizeof(err)), 0);
	CHECK_INT(sched_created, 0);
	CHECK(rt.reqs == NULL);
	CHECK_INT(rt.budget_cap, UINT64_MAX);
	CHECK_INT(kvl_req_open(&rt, PEER, &d, &h), -ENOTSUP);
	CHECK_INT(kvl_req_step_done(&rt, 1, 0), -ENOENT);
	CHECK_INT(kvl_req_cancel(&rt, 1), -ENOENT);
	CHECK_INT(kvl_req_block_addr(&rt, 1, 0, &addr), -ENOENT);
	CHECK_INT(kvl_req_poll(&rt, ev, 4), 0);
	CHECK_INT(kvl_req_budget_cap(&rt, 1 << 20), -ENOTSUP);
	kvl_staging_stop(&rt);
	kvl_req_table_stop(&rt);
}

/* What the lcore receives is a copy: the caller's descriptor may be reused at once. */
static void test_open_copies(void)
{
	struct kvl_req_desc d = pull_desc();
	struct kvl_nsreq *r;
	kvl_req_t h;
	int rc;

	world_init();
	lcore_start();
	d.cls = KVL_REQ_PREFILL;
	h = open_ok(&d, &rc);
	CHECK_INT(rc, 0);
	CHECK(h != 0);
	memset(blk, 0xee, sizeof(blk)); /* the caller reuses its tables */
	r = req_of(h);
	CHECK(r != NULL);
	if (r) {
		CHECK_INT(r->handle, h);
		CHECK_INT(r->nic, 0);
		CHECK_INT(r->d.peer, PEER);
		CHECK_INT(r->d.n_blocks, 3);
		CHECK_INT(r->d.n_steps, 2);
		CHECK_INT(r->d.dir, KVL_SCHED_PULL);
		CHECK_INT(r->d.cls, KVL_SCHED_PREFILL);
		CHECK_INT(r->d.deadline, 250000); /* us -> ns, relative */
		CHECK_INT(r->d.user, (uint64_t)(uintptr_t)r);
		CHECK_INT(r->d.blocks[2].remote_off, 8192);
		CHECK_INT(r->d.blocks[2].remote_seg, SEG_ID);
		CHECK_INT(r->d.blocks[2].length, 4096);
		CHECK_INT(r->d.blocks[2].local_seg, 0);
		CHECK_INT(r->d.step_first[2], 4);
		CHECK_INT(r->d.step_blocks[3], 2);
	}
	lcore_drain();
	CHECK_INT(lc_sim.n_open, 1);
	CHECK(kicks >= 1);
	world_fini();
}

/* A handle names one request: once it ended, it is refused, even after its slot is reused. */
static void test_handles(void)
{
	struct kvl_req_desc d = pull_desc();
	struct kvl_req_event ev[8];
	kvl_req_t a, b, hs[MAX_REQS];
	void *addr;
	int rc;

	world_init();
	lcore_start();
	a = open_ok(&d, &rc);
	CHECK_INT(rc, 0);
	emit(req_of(a), KVL_SCHED_EV_REQ_DONE, 0, 0);
	CHECK_INT(kvl_req_poll(&rt, ev, 8), 1);
	CHECK_INT(ev[0].req, a);
	CHECK_INT(ev[0].type, KVL_REQ_EV_DONE);
	CHECK_INT(ev[0].user, 0xabcdef);
	/* ended: the handle is gone */
	CHECK(req_of(a) == NULL);
	CHECK_INT(kvl_req_step_done(&rt, a, 0), -ENOENT);
	CHECK_INT(kvl_req_cancel(&rt, a), -ENOENT);
	CHECK_INT(kvl_req_block_addr(&rt, a, 0, &addr), -ENOENT);
	/* the slot is reused, under a new generation: the old handle still names nothing */
	b = open_ok(&d, &rc);
	CHECK_INT(rc, 0);
	CHECK((uint32_t)b == (uint32_t)a); /* same slot */
	CHECK(b != a);
	CHECK(req_of(b) != NULL);
	CHECK(req_of(a) == NULL);
	CHECK_INT(kvl_req_cancel(&rt, a), -ENOENT);
	CHECK_INT(kvl_req_cancel(&rt, b), 0);
	/* handles that were never given */
	CHECK_INT(kvl_req_cancel(&rt, 0), -ENOENT);
	CHECK_INT(kvl_req_cancel(&rt, (uint64_t)1 << 32), -ENOENT);
	CHECK_INT(kvl_req_cancel(&rt, MAX_REQS + 1), -ENOENT);
	CHECK_INT(kvl_req_cancel(&rt, UINT64_MAX), -ENOENT);
	/* the table: MAX_REQS open at once, then -ENOSPC; the scheduler's refusal keeps nothing */
	emit(req_of(b), KVL_SCHED_EV_REQ_FAILED, 0, KVL_ERR_CANCELED);
	CHECK_INT(kvl_req_poll(&rt, ev, 8), 1);
	CHECK_INT(ev[0].type, KVL_REQ_EV_FAILED);
	CHECK_INT(ev[0].status, KVL_ERR_CANCELED);
	lc_sim.open_answer = -ENOSPC;
	CHECK_INT(kvl_req_open(&rt, PEER, &d, &hs[0]), -ENOSPC);
	lc_sim.open_answer = 0;
	for (unsigned i = 0; i < MAX_REQS; i++) {
		hs[i] = open_ok(&d, &rc);
		CHECK_INT(rc, 0);
		for (unsigned j = 0; j < i; j++)
			CHECK(hs[i] != hs[j]);
	}
	CHECK_INT(kvl_req_open(&rt, PEER, &d, &a), -ENOSPC);
	lcore_drain();
	CHECK_INT(lc_sim.n_open, 2 + 1 + MAX_REQS);
	world_fini(); /* stop frees the MAX_REQS still open */
}

/* STEP_READY -> block addresses -> DONE per step; errors change nothing. */
static void test_steps(void)
{
	struct kvl_req_desc d = pull_desc();
	struct kvl_req_event ev[8];
	struct kvl_nsched_cmd c = { .type = KVL_NSCHED_DONE };
	struct kvl_nsreq *r;
	kvl_req_t h;
	void *addr = NULL;
	unsigned filled = 0;

	r = world_with_req(&d, &h);
	if (r == NULL)
		goto out;
	lcore_drain();
	CHECK_INT(kvl_req_step_done(&rt, h, 2), -ERANGE);
	CHECK_INT(kvl_req_step_done(&rt, h, 0), -EINVAL); /* not READY */
	CHECK_INT(kvl_req_block_addr(&rt, h, 0, &addr), -EAGAIN);
	CHECK_INT(kvl_req_block_addr(&rt, h, 3, &addr), -ERANGE);
	/* the lcore lands step 0's blocks and says so */
	r->off[0] = 0;
	r->off[1] = 65536;
	emit(r, KVL_SCHED_EV_STEP_READY, 0, 0);
	CHECK_INT(kvl_req_poll(&rt, ev, 8), 1);
	CHECK_INT(ev[0].type, KVL_REQ_EV_STEP_READY);
	CHECK_INT(ev[0].step, 0);
	CHECK_INT(ev[0].req, h);
	CHECK_INT(kvl_req_block_addr(&rt, h, 1, &addr), 0);
	CHECK(addr == rt.nic[0].staging + 65536);
	CHECK_INT(kvl_req_block_addr(&rt, h, 0, &addr), 0);
	CHECK(addr == rt.nic[0].staging);
	CHECK_INT(kvl_req_block_addr(&rt, h, 2, &addr), -EAGAIN); /* step 1's, not READY */
	CHECK_INT(kvl_req_step_done(&rt, h, 1), -EINVAL);
	/* a full ring: -EAGAIN, and the step stays READY */
	lcore_stop();
	while (rte_ring_mp_enqueue_elem(fake_ns.cmd, &c, sizeof(c)) == 0)
		filled++;
	CHECK_INT(kvl_req_step_done(&rt, h, 0), -EAGAIN);
	CHECK_INT(kvl_req_cancel(&rt, h), -EAGAIN);
	CHECK_INT(kvl_req_block_addr(&rt, h, 0, &addr), 0);
	while (rte_ring_sc_dequeue_elem(fake_ns.cmd, &c, sizeof(c)) == 0)
		;
	lcore_start();
	CHECK_INT(kvl_req_step_done(&rt, h, 0), 0);
	lcore_drain();
	CHECK_INT(lc_sim.n_done, 1);
	CHECK_INT(lc_sim.last.type, KVL_NSCHED_DONE);
	CHECK_INT(lc_sim.last.step, 0);
	CHECK(lc_sim.last.r == r);
	CHECK_INT(kvl_req_step_done(&rt, h, 0), -EALREADY);
	/* block 0 only step 0 named: gone; block 1 step 1 still needs */
	CHECK_INT(kvl_req_block_addr(&rt, h, 0, &addr), -EAGAIN);
	CHECK_INT(kvl_req_block_addr(&rt, h, 1, &addr), 0);
	r->off[2] = 131072;
	emit(r, KVL_SCHED_EV_STEP_READY, 1, 0);
	CHECK_INT(kvl_req_poll(&rt, ev, 8), 1);
	CHECK_INT(kvl_req_block_addr(&rt, h, 2, &addr), 0);
	CHECK(addr == rt.nic[0].staging + 131072);
	CHECK_INT(kvl_req_step_done(&rt, h, 1), 0);
	CHECK_INT(kvl_req_block_addr(&rt, h, 1, &addr), -EAGAIN);
	emit(r, KVL_SCHED_EV_REQ_DONE, 0, 0);
	CHECK_INT(kvl_req_poll(&rt, ev, 8), 1);
	CHECK_INT(ev[0].type, KVL_REQ_EV_DONE);
	CHECK_INT(kvl_req_step_done(&rt, h, 1), -ENOENT);
	lcore_drain();
	CHECK_INT(lc_sim.n_done, 2);
out:
	CHECK(filled > 0);
	world_fini();
}

/* Cancel: one CANCEL to the lcore; the handle stays until the lcore's FAILED event. */
static void test_cancel(void)
{
	struct kvl_req_desc d = pull_desc();
	struct kvl_req_event ev[8];
	struct kvl_nsreq *r;
	kvl_req_t h;
	void *addr;

	r = world_with_req(&d, &h);
	if (r == NULL)
		goto out;
	r->off[0] = r->off[1] = 0;
	emit(r, KVL_SCHED_EV_STEP_READY, 0, 0);
	CHECK_INT(kvl_req_poll(&rt, ev, 8), 1);
	CHECK_INT(kvl_req_cancel(&rt, h), 0);
	CHECK_INT(kvl_req_cancel(&rt, h), -EALREADY);
	/* its blocks are gone at once, and no DONE goes after a CANCEL */
	CHECK_INT(kvl_req_block_addr(&rt, h, 0, &addr), -ENOENT);
	CHECK_INT(kvl_req_step_done(&rt, h, 0), -ENOENT);
	lcore_drain();
	CHECK_INT(lc_sim.n_cancel, 1);
	CHECK_INT(lc_sim.n_done, 0);
	CHECK(lc_sim.last.r == r);
	emit(r, KVL_SCHED_EV_REQ_FAILED, 0, KVL_ERR_CANCELED);
	CHECK_INT(kvl_req_poll(&rt, ev, 8), 1);
	CHECK_INT(ev[0].type, KVL_REQ_EV_FAILED);
	CHECK_INT(ev[0].status, KVL_ERR_CANCELED);
	CHECK_INT(ev[0].user, 0xabcdef);
	CHECK_INT(kvl_req_cancel(&rt, h), -ENOENT);
out:
	world_fini();
}

/* PUSH: the blocks' own addresses; the local segment each lies in goes to the lcore. */
static void test_push(void)
{
	struct kvl_req_desc d = pull_desc();
	struct kvl_req_event ev[8];
	struct kvl_nsreq *r;
	kvl_req_t h;
	void *addr;
	int rc;

	world_init();
	lcore_start();
	d.dir = KVL_REQ_PUSH;
	for (uint32_t i = 0; i < 3; i++)
		blk[i].local = local_seg + i * 4096;
	h = open_ok(&d, &rc);
	CHECK_INT(rc, 0);
	r = req_of(h);
	if (r == NULL)
		goto out;
	CHECK_INT(r->d.dir, KVL_SCHED_PUSH);
	CHECK_INT(r->d.blocks[1].local_seg, 1);
	CHECK_INT(r->d.blocks[1].local_off, (uint64_t)(uintptr_t)(local_seg + 4096));
	/* the scheduler keeps the caller's address as the block's offset */
	r->off[0] = (uint64_t)(uintptr_t)local_seg;
	r->off[1] = (uint64_t)(uintptr_t)(local_seg + 4096);
	emit(r, KVL_SCHED_EV_STEP_READY, 0, 0);
	CHECK_INT(kvl_req_poll(&rt, ev, 8), 1);
	CHECK_INT(kvl_req_block_addr(&rt, h, 1, &addr), 0);
	CHECK(addr == local_seg + 4096);
out:
	world_fini();
}

struct visit_log {
	uint32_t ids[KVL_MAX_SEGS];
	unsigned n;
};

static void log_seg(void *arg, const struct kvl_local_seg *seg)
{
	struct visit_log *v = arg;

	v->ids[v->n++] = seg->desc.id;
}

/* The segment registry the request path checks PUSH blocks against (runtime/segments.c). */
static void test_segments(void)
{
	static uint8_t mem[KVL_MAX_SEGS + 1][256];
	struct kvl_local_segs s;
	struct kvl_seg_desc d;
	struct visit_log v = { .n = 0 };
	uint32_t id = 0, version;

	/* the one descriptor builder: layer after layer, K plane before V */
	kvl_seg_desc_make(3, 2, 10, 64, KVL_SEG_REMOTE_WRITE, &d);
	CHECK_INT(d.plane_stride, 640);
	CHECK_INT(d.layer_stride, 1280);
	CHECK_INT(d.length, 3840);
	CHECK_INT(d.flags, KVL_SEG_REMOTE_WRITE);
	CHECK_INT(d.block_count, 10);
	kvl_segs_init(&s);
	kvl_seg_desc_make(1, 1, 4, 64, KVL_SEG_REMOTE_READ, &d);
	for (unsigned i = 0; i < KVL_MAX_SEGS; i++) {
		CHECK_INT(kvl_segs_add(&s, "m", mem[i], NULL, &d, &id), 0);
		CHECK_INT(id, i + 1);
	}
	CHECK_INT(kvl_segs_add(&s, "m", mem[KVL_MAX_SEGS], NULL, &d, &id), -ENOSPC);
	CHECK_INT(s.version, KVL_MAX_SEGS);
	/* lookups: inside one segment whole, or nothing */
	CHECK_INT(kvl_segs_find(&s, mem[5], 256), 6);
	CHECK_INT(kvl_segs_find(&s, mem[5] + 255, 1), 6);
	CHECK_INT(kvl_segs_find(&s, mem[5] + 200, 57), 0); /* crosses its end */
	CHECK_INT(kvl_segs_find(&s, mem[KVL_MAX_SEGS], 1), 0);
	CHECK_STR(s.meta[5].desc.name, "m");
	CHECK(s.meta[5].base == mem[5]);
	version = kvl_segs_visit(&s, log_seg, &v);
	CHECK_INT(version, KVL_MAX_SEGS);
	CHECK_INT(v.n, KVL_MAX_SEGS);
	CHECK_INT(v.ids[0], 1);
	CHECK_INT(v.ids[KVL_MAX_SEGS - 1], KVL_MAX_SEGS);
	CHECK(!kvl_segs_owns(&s, mem[0])); /* registered, not allocated by kvlane */
	CHECK(!kvl_segs_owns(&s, NULL));
	kvl_segs_release(&s);
	CHECK_INT(kvl_segs_find(&s, mem[5], 256), 0);
	v.n = 0;
	kvl_segs_visit(&s, log_seg, &v);
	CHECK_INT(v.n, 0);
	kvl_segs_fini(&s);
}

/* The budget each NIC lcore's scheduler reads: min(budget, cap) / schedulers. */
static void test_budget(void)
{
	world_init();
	CHECK_INT(rt.sched_budget, BUDGET);
	CHECK_INT(kvl_req_budget_cap(&rt, 1 << 20), 0);
	CHECK_INT(rt.sched_budget, 1 << 20);
	CHECK_INT(kvl_req_budget_cap(&rt, UINT64_MAX), 0);
	CHECK_INT(rt.sched_budget, BUDGET);
	/* the scheduler's config: slots from staging_mb / slot_kb, one SGE on tcp */
	CHECK_INT(created_cfg.slot_size, SLOT_KB << 10);
	CHECK_INT(created_cfg.slot_count, (STAGING_MB << 20) / (SLOT_KB << 10));
	CHECK_INT(created_cfg.max_requests, MAX_REQS);
	CHECK_INT(created_cfg.max_sge, 1);
	CHECK(fake_io.watch == fake_ns.cmd);
	/* its staging is registered like a segment (after the others), with no remote access */
	CHECK_INT(kvl_segs_find(&rt.segs, rt.nic[0].staging, STAGING_MB << 20), 2);
	CHECK_STR(rt.segs.meta[1].desc.name, "staging.n0");
	CHECK_INT(rt.segs.meta[1].desc.flags, 0);
	CHECK_INT(rt.segs.meta[1].desc.length, STAGING_MB << 20);
	CHECK_INT(rt.segs.meta[1].desc.block_size, SLOT_KB << 10);
	CHECK(kvl_segs_owns(&rt.segs, rt.nic[0].staging));
	world_fini();
}

/* gpu_world's [memory] pool: 0 none, 1 mapped, 2 mapped and pinned for CUDA (tcp's bounce
 * buffers come from it) */
static int world_pool;
static uint8_t pool_mem[4 << 20] __attribute__((aligned(4096)));

/* A runtime with one tcp NIC and an open GPU (0: 8 MiB free, 1 MiB reserve), [sched] staging
 * @place, the null transport or not: kvl_staging_start()'s answer. */
static int gpu_world(int place, bool null_xport)
{
	world_conf();
	if (world_pool) {
		CHECK_INT(kvl_pool_init_at(&rt.segs.pool, pool_mem, sizeof(pool_mem), 1 << 20), 0);
		rt.segs.pool.cuda_registered = world_pool == 2;
	}
	rt.cfg.sched.staging = place;
	rt.cfg.sched.null_transport = null_xport;
	rt.gpu.open = true;
	rt.gpu.reserve_bytes = 1 << 20;
	rt.gpu.free_bytes = 8 << 20;
	rt.gpu.budget_bytes = 7 << 20;
	snprintf(rt.gpu.pci_bus_id, sizeof(rt.gpu.pci_bus_id), "0000:19:00.0");
	err[0] = '\0';
	return kvl_staging_start(&rt, err, sizeof(err));
}

static void gpu_world_fini(void)
{
	kvl_staging_stop(&rt);
	kvl_segs_release(&rt.segs);
	kvl_segs_fini(&rt.segs);
	kvl_pool_destroy(&rt.segs.pool); /* world_pool's allocator (a no-op without one) */
}

/* [sched] staging = gpu / auto with a GPU: where staging lands, what peers see of it, the budget.
 */
static void test_gpu_staging(void)
{
	uint64_t staging = (uint64_t)STAGING_MB << 20;

	/* gpu on a tcp NIC: refused before anything is allocated, saying why */
	vram_allocs = vram_frees = 0;
	CHECK_INT(gpu_world(KVL_STAGING_GPU, false), -EINVAL);
	CHECK_HAS(err, "sched.staging = gpu: nic.n0 uses the tcp transport, which cannot land "
		       "bytes in VRAM yet");
	CHECK_INT(vram_allocs, 0);
	gpu_world_fini();

	/* gpu on the null transport: staging is "VRAM", registered as a GPU segment */
	CHECK_INT(gpu_world(KVL_STAGING_GPU, true), 0);
	CHECK_INT(rt.staging_place, KVL_STAGING_GPU);
	CHECK_INT(vram_allocs, 1);
	CHECK_INT(kvl_staging_register(&rt, err, sizeof(err)), 0);
	CHECK_STR(rt.segs.meta[0].desc.name, "staging.n0");
	CHECK_INT(rt.segs.meta[0].mem.kind, KVL_MEM_GPU);
	CHECK_INT(rt.segs.meta[0].mem.device, 0);
	CHECK_STR(rt.segs.meta[0].mem.pci_bus_id, "0000:19:00.0");
	CHECK_INT(rt.segs.meta[0].desc.flags, 0);	  /* peers see no local-only flag */
	CHECK_INT(rt.segs.tab.seg[0].flags, KVL_SEG_GPU); /* the lcores do */
	CHECK_INT(rt.segs.meta[0].reg[0], KVL_SEG_REG_NONE);
	/* the budget: free VRAM as if our staging were not taken, minus the reserve */
	CHECK_INT(kvl_staging_budget(&rt), (8 << 20) + staging - (1 << 20));
	CHECK_INT(rt.sched_budget, (8 << 20) + staging - (1 << 20));
	rt.gpu.free_bytes = 0; /* another process took the rest: only our staging is left */
	CHECK_INT(kvl_staging_budget(&rt), staging - (1 << 20));
	CHECK_STR(rt.staging_why, "");
	gpu_world_fini();
	CHECK_INT(vram_frees, 1); /* with the segments, by cudaFree, not rte_free */

	/* auto on a tcp NIC: host staging, and why */
	vram_allocs = vram_frees = 0;
	CHECK_INT(gpu_world(KVL_STAGING_AUTO, false), 0);
	CHECK_INT(rt.staging_place, KVL_STAGING_HOST);
	CHECK_INT(vram_allocs, 0);
	/* (a build without CUDA never gets as far as the NIC: it says so first) */
	CHECK_STR(rt.staging_why,
		  KVL_HAVE_CUDA ? "auto: nic.n0 is tcp, which cannot land bytes in VRAM yet"
				: "auto: built without CUDA");
	CHECK_INT(kvl_staging_budget(&rt), 7 << 20); /* free - reserve, as before */
	gpu_world_fini();
	/* host: no why, whatever the NICs */
	CHECK_INT(gpu_world(KVL_STAGING_HOST, false), 0);
	CHECK_INT(rt.staging_place, KVL_STAGING_HOST);
	CHECK_STR(rt.staging_why, "");
	gpu_world_fini();
}

/* tcp into VRAM: what it needs (CUDA, an open GPU, the pool pinned for CUDA) and, where one is
 * missing, the refusal of VRAM staging on a tcp NIC naming it; with all three, staging = gpu
 * and auto land in VRAM on a tcp NIC. */
static void test_tcp_vram_staging(void)
{
	char why[160];

	world_conf();
	CHECK(!kvl_tcp_vram_ok(&rt, why, sizeof(why)));
	CHECK_STR(why, KVL_HAVE_CUDA ? "no GPU is open ([gpu] enable = false)"
				     : "this build has no CUDA");
	kvl_segs_fini(&rt.segs);

	/* a GPU, no pool */
	world_pool = 0;
	CHECK_INT(gpu_world(KVL_STAGING_GPU, false), -EINVAL);
	if (KVL_HAVE_CUDA)
		CHECK_HAS(err, "which cannot land bytes in VRAM yet here: the [memory] pool is off "
			       "(memory.pool_size_mb = 0), and tcp's pinned bounce buffers are "
			       "carved from it");
	gpu_world_fini();
	/* the pool, not pinned for CUDA */
	world_pool = 1;
	CHECK_INT(gpu_world(KVL_STAGING_GPU, false), -EINVAL);
	if (KVL_HAVE_CUDA)
		CHECK_HAS(err, "here: the [memory] pool is not pinned for CUDA");
	CHECK(!kvl_tcp_vram_ok(&rt, NULL, 0));
	gpu_world_fini();
	/* pinned: VRAM staging on the tcp NIC (a build without CUDA still refuses, saying so) */
	world_pool = 2;
	vram_allocs = 0;
	if (KVL_HAVE_CUDA) {
		CHECK_INT(gpu_world(KVL_STAGING_GPU, false), 0);
		CHECK(kvl_tcp_vram_ok(&rt, why, sizeof(why)));
		CHECK_STR(why, "");
		CHECK_INT(rt.staging_place, KVL_STAGING_GPU);
		CHECK_INT(vram_allocs, 1);
		gpu_world_fini();
		CHECK_INT(gpu_world(KVL_STAGING_AUTO, false), 0);
		CHECK_INT(rt.staging_place, KVL_STAGING_GPU);
		CHECK_STR(rt.staging_why, "");
		gpu_world_fini();
	} else {
		CHECK_INT(gpu_world(KVL_STAGING_GPU, false), -EINVAL);
		CHECK_HAS(err, "here: this build has no CUDA");
		gpu_world_fini();
	}
	world_pool = 0;
}

/* KVL_REQ_STEP_FLAGS: the words the lcore gave come back with their epoch and stride, the
 * step's blocks are found from READY on without kvl_req_poll, step_done is refused; a request
 * without the flag has no words; an unknown flag is refused before anything is sent. */
static void test_step_flags(void)
{
	static struct kvl_nsched_flag pool[8];
	struct kvl_req_desc d = pull_desc();
	struct kvl_req_flags fl;
	struct kvl_req_event ev[8];
	struct kvl_nsreq *r;
	kvl_req_t h, plain;
	void *addr = NULL;
	int rc;

	d.flags = KVL_REQ_STEP_FLAGS;
	r = world_with_req(&d, &h);
	if (r == NULL)
		goto out;
	lcore_drain();
	CHECK_INT(r->want_flags, 1);
	fake_ns.flags = pool;
	r->flag_base = 3; /* what the lcore's OPEN would have written */
	r->flag_epoch = 9;
	CHECK_INT(kvl_req_step_flags(&rt, h, &fl), 0);
	CHECK(fl.ready == &pool[3].ready && fl.done == &pool[3].done);
	CHECK_INT(fl.stride, sizeof(struct kvl_nsched_flag));
	CHECK_INT(fl.epoch, 9);
	CHECK_INT(fl.n_steps, 2);
	CHECK_INT(fl.ready_dev, 0); /* no GPU: plain host memory */
	CHECK_INT(fl.done_dev, 0);
	CHECK_INT(kvl_req_step_flags(&rt, h, NULL), -EINVAL);
	CHECK_INT(kvl_req_block_addr(&rt, h, 1, &addr), -EAGAIN); /* nothing landed */
	r->off[0] = 0;
	r->off[1] = 65536;
	__atomic_store_n(&pool[3].ready, 9, __ATOMIC_RELEASE);
	CHECK_INT(kvl_req_block_addr(&rt, h, 1, &addr), 0);
	CHECK(addr == rt.nic[0].staging + 65536);
	CHECK_INT(kvl_req_block_addr(&rt, h, 2, &addr), -EAGAIN);
	CHECK_INT(kvl_req_step_done(&rt, h, 0), -EINVAL);
	CHECK_INT(kvl_req_step_done(&rt, h, 2), -ERANGE);
	lcore_drain();
	CHECK_INT(lc_sim.n_done, 0); /* nothing sent */
	d.flags = 0;
	plain = open_ok(&d, &rc);
	CHECK_INT(rc, 0);
	CHECK_INT(kvl_req_step_flags(&rt, plain, &fl), -EINVAL);
	CHECK_INT(kvl_req_step_flags(&rt, 12345, &fl), -ENOENT);
	d.flags = 2;
	CHECK_INT(kvl_req_open(&rt, 0, &d, &plain), -EINVAL);
	emit(r, KVL_SCHED_EV_REQ_DONE, 0, 0);
	CHECK_INT(kvl_req_poll(&rt, ev, 8), 1);
	CHECK_INT(kvl_req_step_flags(&rt, h, &fl), -ENOENT);
out:
	fake_ns.flags = NULL;
	world_fini();
}

/* Engine-owned destinations (KVL_REQ_ENGINE_DEST): checked once at open, against the segment
 * registry and the NIC the request uses, with the cause in kvl_req_error(); what passes
 * reaches the scheduler as dest blocks with their segment, and block_addr gives them back. */
static void test_engine_dest(void)
{
	static uint8_t gpu_mem[65536] __attribute__((aligned(4096)));
	struct kvl_req_desc d;
	struct kvl_req_block bad[3];
	struct kvl_req_event ev[8];
	struct kvl_seg_desc gd;
	struct kvl_mem_info gmi = { .kind = KVL_MEM_GPU, .device = 0 };
	struct kvl_nsreq *r;
	uint32_t gseg = 0;
	kvl_req_t h = 0;
	void *addr;
	int rc;

	world_init();
	lcore_start();
	/* "VRAM" the registry marks KVL_SEG_GPU (no CUDA here: only the mark matters) */
	kvl_seg_desc_make(1, 1, 16, 4096, KVL_SEG_REMOTE_READ, &gd);
	CHECK_INT(kvl_segs_add_gpu(&rt.segs, "vram", gpu_mem, NULL, &gd, &gmi, &gseg, err,
				   sizeof(err)),
		  0);
	CHECK(gseg > 1); /* after "local" (and the staging's own) */
#define DEST_REFUSED(expr, want, words)                                                           \
	do {                                                                                      \
		d = pull_desc();                                                                  \
		d.flags = KVL_REQ_ENGINE_DEST;                                                    \
		bad[0].local = local_seg + 5 * 4096;                                              \
		bad[1].local = local_seg + 1 * 4096;                                              \
		bad[2].local = local_seg + 9 * 4096;                                              \
		for (int i_ = 0; i_ < 3; i_++) {                                                  \
			bad[i_].remote_off = blk[i_].remote_off;                                  \
			bad[i_].remote_seg = blk[i_].remote_seg;                                  \
			bad[i_].length = blk[i_].length;                                          \
		}                                                                                 \
		d.blocks = bad;                                                                   \
		expr;                                                                             \
		CHECK_INT(kvl_req_open(&rt, PEER, &d, &h), want);                                 \
		if (strstr(kvl_req_error(), words) == NULL) {                                     \
			fprintf(stderr, "%s:%d: kvl_req_error() \"%s\" lacks \"%s\"\n", __FILE__, \
				__LINE__, kvl_req_error(), words);                                \
			kvl_test_failures++;                                                      \
		}                                                                                 \
	} while (0)
	DEST_REFUSED(bad[1].local = NULL, -EINVAL,
		     "block 1: KVL_REQ_ENGINE_DEST needs a destination");
	DEST_REFUSED(d.dir = KVL_REQ_PUSH, -EINVAL, "for PULL requests only");
	DEST_REFUSED(bad[2].local = &bad[2], -EFAULT, "block 2: destination");
	DEST_REFUSED(bad[2].local = local_seg + SEG_LEN - 100, -EFAULT,
		     "not inside one registered local segment");
	DEST_REFUSED(bad[0].local = rt.nic[0].staging + 8192, -EINVAL, "staging");
	DEST_REFUSED(bad[2].local = local_seg + 5 * 4096 + 4095, -EINVAL,
		     "blocks 0 and 2: destinations");
	DEST_REFUSED(bad[1].local = local_seg + 5 * 4096, -EINVAL, "overlap");
	/* A GPU segment on a tcp NIC: tcp cannot land bytes in VRAM */
	DEST_REFUSED(bad[1].local = gpu_mem + 4096, -EXDEV, "block 1: destination");
	snprintf(err, sizeof(err), "GPU segment %u", gseg);
	CHECK(strstr(kvl_req_error(), err) != NULL);
	CHECK(strstr(kvl_req_error(), "NIC n0 uses the tcp transport") != NULL);
	/* An RDMA NIC without a registration of the segment (its device cannot write there) */
	rt.nic[0].vdev = (struct kvl_verbs_dev *)&gd; /* only "is it RDMA" is asked */
	rt.nic[0].info.transport = KVL_TRANSPORT_VERBS;
	DEST_REFUSED((void)0, -EFAULT, "segment 1 (host) has no registration on NIC n0");
	/* carved from the [memory] pool: the pool's MR on the device serves it (no reg of its own)
	 */
	rt.segs.meta[gseg - 1].reg[0] = KVL_SEG_REG_DMABUF;
	rt.segs.meta[0].pooled = true;
	rt.segs.pool.reg[0].done = true;
	d = pull_desc();
	d.flags = KVL_REQ_ENGINE_DEST;
	blk[0].local = local_seg + 5 * 4096;
	blk[1].local = local_seg + 1 * 4096;
	blk[2].local = local_seg + 9 * 4096;
	CHECK_INT(kvl_req_open(&rt, PEER, &d, &h), 0);
	rt.segs.meta[0].pooled = false;
	rt.segs.pool.reg[0].done = false;
	rt.segs.meta[0].reg[0] = KVL_SEG_REG_MR;
	h = 0;
	DEST_REFUSED(bad[2].local = NULL, -EINVAL, "block 2"); /* clears, then says it again */
	lcore_drain();
	CHECK_INT(lc_sim.n_open, 1); /* the pooled one only: no refusal reached the lcore */
	CHECK_INT(h, 0);

	/* On the verbs NIC with both registered: host and GPU destinations pass (GPUDirect). */
	d = pull_desc();
	d.flags = KVL_REQ_ENGINE_DEST;
	blk[0].local = local_seg + 5 * 4096;
	blk[1].local = gpu_mem + 4096;
	blk[2].local = local_seg + 6 * 4096; /* adjacent to block 0's */
	h = open_ok(&d, &rc);
	CHECK_INT(rc, 0);
	CHECK_INT(kvl_req_error()[0], 0);
	r = req_of(h);
	if (r != NULL) {
		CHECK_INT(r->d.dest, 1);
		CHECK_INT(r->d.dir, KVL_SCHED_PULL);
		CHECK_INT(r->d.blocks[0].local_seg, 1);
		CHECK_INT(r->d.blocks[1].local_seg, gseg);
		CHECK_INT(r->d.blocks[2].local_seg, 1);
		CHECK_INT(r->d.blocks[1].local_off, (uint64_t)(uintptr_t)(gpu_mem + 4096));
		/* the scheduler's offsets of dest blocks are the engine's addresses */
		r->off[0] = (uint64_t)(uintptr_t)blk[0].local;
		r->off[1] = (uint64_t)(uintptr_t)blk[1].local;
		emit(r, KVL_SCHED_EV_STEP_READY, 0, 0);
		CHECK_INT(kvl_req_poll(&rt, ev, 8), 1);
		CHECK_INT(kvl_req_block_addr(&rt, h, 0, &addr), 0);
		CHECK(addr == local_seg + 5 * 4096);
		CHECK_INT(kvl_req_block_addr(&rt, h, 1, &addr), 0);
		CHECK(addr == gpu_mem + 4096);
		CHECK_INT(kvl_req_block_addr(&rt, h, 2, &addr), -EAGAIN); /* step 1 not READY */
	}
	rt.nic[0].vdev = NULL;
	rt.nic[0].info.transport = KVL_TRANSPORT_TCP;
	rt.segs.meta[0].reg[0] = rt.segs.meta[gseg - 1].reg[0] = KVL_SEG_REG_NONE;
	/* tcp with null_transport: nothing moves, so a GPU destination is fine */
	rt.cfg.sched.null_transport = true;
	h = open_ok(&d, &rc);
	CHECK_INT(rc, 0);
	rt.cfg.sched.null_transport = false;
	/* tcp with its bounce buffers into VRAM (an open GPU, the pool pinned for CUDA): the GPU
	 * destination passes; with the pool not pinned it is refused and the reason named */
	rt.gpu.open = true;
	CHECK_INT(kvl_pool_init_at(&rt.segs.pool, pool_mem, sizeof(pool_mem), 1 << 20), 0);
	CHECK_INT(kvl_req_open(&rt, PEER, &d, &h), -EXDEV);
	CHECK(strstr(kvl_req_error(), KVL_HAVE_CUDA ? "here (the [memory] pool is not pinned for "
						      "CUDA)"
						    : "here (this build has no CUDA)") != NULL);
	rt.segs.pool.cuda_registered = true;
	if (KVL_HAVE_CUDA) {
		h = open_ok(&d, &rc);
		CHECK_INT(rc, 0);
		CHECK_INT(kvl_req_error()[0], 0);
	}
	rt.segs.pool.cuda_registered = false;
	kvl_pool_destroy(&rt.segs.pool);
	memset(&rt.segs.pool, 0, sizeof(rt.segs.pool));
	rt.gpu.open = false;
	/* without the flag a PULL block with an address is still refused */
	d.flags = 0;
	CHECK_INT(kvl_req_open(&rt, PEER, &d, &h), -EINVAL);
#undef DEST_REFUSED
	world_fini();
}

int main(void)
{
	local_seg = aligned_alloc(4096, SEG_LEN);
	fake_ns.cmd = ring_new("t_cmd", sizeof(struct kvl_nsched_cmd), RING_SLOTS, RING_F_SC_DEQ);
	fake_ns.ev =
		ring_new("t_ev", sizeof(struct kvl_sched_event), 64, RING_F_SP_ENQ | RING_F_SC_DEQ);
	if (local_seg == NULL || fake_ns.cmd == NULL || fake_ns.ev == NULL) {
		fprintf(stderr, "req_api: cannot set up the rings\n");
		return 1;
	}
	test_no_scheduler();
	test_open_checks();
	test_open_copies();
	test_handles();
	test_steps();
	test_cancel();
	test_push();
	test_budget();
	test_gpu_staging();
	test_tcp_vram_staging();
	test_step_flags();
	test_engine_dest();
	test_segments();
	test_guard_lcore_silent();
	test_guard_late_open();
	test_guard_ring_full();
	free(fake_ns.cmd);
	free(fake_ns.ev);
	free(local_seg);
	return kvl_test_done("req_api");
}
