/* SPDX-License-Identifier: BSD-3-Clause */
/* Unit test of the NIC lcore's scheduler stage through its I/O stage: posts, retries, events. */
#include "fake_xport.h"
#include "kvl_test.h"

#include "../../lcores/nic_io.c"
/* the two stages' private helpers share names: keep the scheduler's apart */
#define do_commands ns_do_commands
#define publish	    ns_publish
#define complete    ns_complete
#include "../../lcores/nic_sched.c"
#undef do_commands
#undef publish
#undef complete

#define SLOT  4096u
#define NSLOT 64u

static struct kvl_nic_io io;
static uint8_t staging[SLOT * NSLOT];
static uint64_t budget = (uint64_t)SLOT * NSLOT;
static uint64_t fake_ns = 1000;

static uint64_t fake_clock(void *arg)
{
	(void)arg;
	return fake_ns += 100;
}

/* A request of 2 steps x 2 blocks, contiguous on the peer in segment 5. */
static struct kvl_sched_block blk[4];
static const uint32_t first[3] = { 0, 2, 4 }, refs[4] = { 0, 1, 2, 3 };
static uint64_t off[4];
static struct kvl_nsreq req;

static struct kvl_nic_sched *make(bool null_xport, uint32_t max_msg)
{
	static struct kvl_sched_cfg c;
	struct kvl_nic_sched_cfg nc = {
		.sched = &c, .staging = staging, .budget = &budget, .null_xport = null_xport
	};
	struct kvl_nic_sched *ns;

	c = (struct kvl_sched_cfg){ .max_requests = 8,
				    .max_blocks_total = 64,
				    .max_xfers = 64,
				    .slot_size = SLOT,
				    .slot_count = NSLOT,
				    .window_min = SLOT,
				    .window_max = 1u << 20,
				    .max_msg = max_msg,
				    .max_sge = 1,
				    .resize_ns = 1000000000ull };
	for (unsigned i = 0; i < 4; i++)
		blk[i] = (struct kvl_sched_block){ .remote_off = 65536 + i * SLOT,
						   .remote_seg = 5,
						   .length = SLOT - 16 * i };
	CHECK_INT(kvl_nic_io_init(&io, 0, 0, 16), 0);
	ns = kvl_nic_sched_create(&io, &nc);
	CHECK(ns != NULL);
	if (ns == NULL)
		exit(1);
	ns->clock = fake_clock;
	/* the scheduler hooks itself into nic_io's one completion path */
	CHECK(io.take_wc == kvl_nic_sched_take_wc);
	CHECK(io.take_wc_arg == ns);
	io.watch = kvl_nic_sched_cmd_ring(ns); /* as runtime/staging.c wires it */
	return ns;
}

static void done(struct kvl_nic_sched *ns)
{
	kvl_nic_sched_free(ns);
	CHECK(io.take_wc == NULL); /* ...and unhooks itself */
	CHECK(io.take_wc_arg == NULL);
	kvl_nic_io_fini(&io);
}

static void open_req(struct kvl_nic_sched *ns, uint64_t peer)
{
	struct kvl_nsched_cmd c = { .type = KVL_NSCHED_OPEN, .r = &req };

	memset(off, 0xff, sizeof(off));
	req = (struct kvl_nsreq){ .d = { .peer = peer,
					 .user = (uint64_t)(uintptr_t)&req,
					 .blocks = blk,
					 .n_blocks = 4,
					 .n_steps = 2,
					 .step_first = first,
					 .step_blocks = refs,
					 .dir = KVL_SCHED_PULL,
					 .cls = KVL_SCHED_DECODE },
				  .handle = 99,
				  .open_rc = 1,
				  .off = off };
	CHECK_INT(rte_ring_enqueue_elem(ns->cmd, &c, sizeof(c)), 0);
}

/* The NIC lcore's loop: I/O stage, then the scheduler's. */
static void spin(struct kvl_nic_sched *ns, unsigned passes)
{
	for (unsigned i = 0; i < passes; i++) {
		kvl_nic_io_stage(NULL, &io);
		kvl_nic_sched_stage(NULL, ns);
	}
}

static unsigned events(struct kvl_nic_sched *ns, struct kvl_sched_event *ev, unsigned max)
{
	return rte_ring_sc_dequeue_burst_elem(ns->ev, ev, sizeof(*ev), max, NULL);
}

static void step_done(struct kvl_nic_sched *ns, uint32_t step)
{
	struct kvl_nsched_cmd c = { .type = KVL_NSCHED_DONE, .step = step, .r = &req };

	CHECK_INT(rte_ring_enqueue_elem(ns->cmd, &c, sizeof(c)), 0);
}

/* The engine's view of a whole request: steps READY in order with their blocks' staging
 * offsets, then DONE; nothing of it on the API's completion ring. */
static void drive_to_done(struct kvl_nic_sched *ns, struct fake_conn *c)
{
	struct kvl_sched_event ev[8];
	unsigned n, ready = 0, done_ev = 0;

	for (unsigned round = 0; round < 50 && !done_ev; round++) {
		spin(ns, 2);
		if (c) /* the wire: complete whatever it holds */
			while (c->n_done < c->n_got && c->n_done < FAKE_MAX &&
			       c->outstanding > c->n_done)
				fake_finish(c, c->n_got - c->outstanding + c->n_done, KVL_OK);
		n = events(ns, ev, 8);
		for (unsigned i = 0; i < n; i++) {
			CHECK_INT(ev[i].user, (uint64_t)(uintptr_t)&req);
			if (ev[i].type == KVL_SCHED_EV_STEP_READY) {
				CHECK_INT(ev[i].step, ready);
				for (uint32_t j = first[ev[i].step]; j < first[ev[i].step + 1]; j++)
					CHECK(off[j] < sizeof(staging) && off[j] % SLOT == 0);
				step_done(ns, ev[i].step);
				ready++;
			} else {
				CHECK_INT(ev[i].type, KVL_SCHED_EV_REQ_DONE);
				done_ev++;
			}
		}
	}
	CHECK_INT(ready, 2);
	CHECK_INT(done_ev, 1);
	CHECK_INT(rte_ring_count(io.cpl), 0);
}

static void test_null_transport(void)
{
	struct kvl_nic_sched *ns = make(true, 0);

	open_req(ns, 3);
	drive_to_done(ns, NULL);
	CHECK_INT(req.open_rc, 0);
	CHECK_INT(ns->ct.posted, 4);
	CHECK_INT(ns->ct.bad_completions, 0);
	done(ns);
}

/* READs go out on the peer's connection, into staging, beside the API's own transfers; the
 * API sees its completion and only its. */
static void test_peer_connection(void)
{
	struct kvl_nic_sched *ns = make(false, 0);
	struct fake_conn c = { .room = 64 }, other = { .room = 64 };
	struct kvl_lcmd add = { .type = KVL_LCMD_ADD_CONN,
				.peer = 3,
				.slot = 4,
				.gen = 1,
				.x = { .ops = &fake_ops, .c = &c } };
	struct kvl_sub sub = { .wr = { .wr_id = 42, .local = staging, .length = 8, .op = 2 },
			       .slot = 4,
			       .gen = 1 };
	struct kvl_wc wc[8];
	bool seen[4] = { false };

	CHECK_INT(rte_ring_enqueue_elem(io.cmd, &add, sizeof(add)), 0);
	add.peer = 7, add.slot = 5, add.x.c = &other;
	CHECK_INT(rte_ring_enqueue_elem(io.cmd, &add, sizeof(add)), 0);
	open_req(ns, 3);
	spin(ns, 2);
	CHECK_INT(c.n_got, 4);
	CHECK_INT(other.n_got, 0);
	for (unsigned i = 0; i < c.n_got; i++) {
		const struct kvl_wr *w = &c.got[i];
		unsigned b = (unsigned)((w->remote_off - 65536) / SLOT);

		CHECK_INT(w->op, KVL_OP_READ);
		CHECK_INT(w->remote_seg, 5);
		CHECK(b < 4);
		if (b >= 4)
			continue;
		CHECK_INT(w->length, blk[b].length);
		CHECK((uint8_t *)w->local >= staging &&
		      (uint8_t *)w->local + w->length <= staging + sizeof(staging));
		CHECK(!seen[b]);
		seen[b] = true;
	}
	CHECK_INT(rte_ring_mp_enqueue_elem(io.sub, &sub, sizeof(sub)), 0);
	for (unsigned i = 0; i < c.n_got; i++)
		fake_finish(&c, i, KVL_OK);
	spin(ns, 1); /* the API's request is taken; the scheduler's completions go to it */
	CHECK_INT(c.n_got, 5);
	fake_finish(&c, 4, KVL_OK);
	spin(ns, 1);
	CHECK_INT(rte_ring_sc_dequeue_burst_elem(io.cpl, wc, sizeof(wc[0]), 8, NULL), 1);
	CHECK_INT(wc[0].wr_id, 42);
	CHECK_INT(wc[0].bytes, 8);
	CHECK_INT(wc[0].status, KVL_OK);
	c.n_got = c.outstanding = 0;
	drive_to_done(ns, &c);
	CHECK_INT(ns->ct.bad_completions, 0);
	done(ns);
}

/* Full connections: what they refuse waits and goes out once they have room, each block
 * exactly once. */
static void test_full_connection(void)
{
	struct kvl_nic_sched *ns = make(false, 0);
	struct fake_conn c = { .room = 1 };
	struct kvl_lcmd add = { .type = KVL_LCMD_ADD_CONN,
				.peer = 3,
				.slot = 0,
				.gen = 1,
				.x = { .ops = &fake_ops, .c = &c } };
	bool seen[4] = { false };

	CHECK_INT(rte_ring_enqueue_elem(io.cmd, &add, sizeof(add)), 0);
	open_req(ns, 3);
	spin(ns, 3);
	CHECK_INT(c.n_got, 1);
	CHECK(ns->ct.stalled > 0);
	drive_to_done(ns, &c);
	CHECK_INT(c.n_got, 4);
	for (unsigned i = 0; i < c.n_got; i++) {
		unsigned b = (unsigned)((c.got[i].remote_off - 65536) / SLOT);

		CHECK(b < 4 && !seen[b]);
		if (b < 4)
			seen[b] = true;
	}
	CHECK_INT(ns->ct.posted, 4);
	done(ns);
}

/* A request whose transfers cannot be posted fails with the status the refusal stands for. */
static void check_fails(bool with_conn, int refuse, int status)
{
	struct kvl_nic_sched *ns = make(false, 0);
	struct fake_conn c = { .room = 16, .refuse = refuse };
	struct kvl_lcmd add = { .type = KVL_LCMD_ADD_CONN,
				.peer = 3,
				.slot = 0,
				.gen = 1,
				.x = { .ops = &fake_ops, .c = &c } };
	struct kvl_sched_event ev[8];
	unsigned n, failed = 0;

	if (with_conn)
		CHECK_INT(rte_ring_enqueue_elem(io.cmd, &add, sizeof(add)), 0);
	open_req(ns, 3);
	spin(ns, 4);
	n = events(ns, ev, 8);
	for (unsigned i = 0; i < n; i++)
		if (ev[i].type == KVL_SCHED_EV_REQ_FAILED) {
			CHECK_INT(ev[i].status, status);
			failed++;
		}
	CHECK_INT(failed, 1);
	CHECK_INT(c.n_got, 0);
	CHECK_INT(rte_ring_count(io.cpl), 0);
	c.refuse = 0;
	done(ns);
}

static void test_refusals(void)
{
	check_fails(false, 0, KVL_ERR_NO_PEER);
	check_fails(true, -EMSGSIZE, KVL_ERR_TOO_LARGE);
	check_fails(true, -EINVAL, KVL_ERR_PROTOCOL);
}

/* A peer with two connections: descriptors take turns on them; one that refuses as broken
 * (before the lcore noticed) passes them to the other, and none fails. */
static void test_two_connections(void)
{
	for (int round = 0; round < 2; round++) {
		struct kvl_nic_sched *ns = make(false, 0);
		struct fake_conn a = { .room = 64 }, b = { .room = 64 };
		struct kvl_lcmd add = { .type = KVL_LCMD_ADD_CONN,
					.peer = 3,
					.slot = 0,
					.gen = 1,
					.x = { .ops = &fake_ops, .c = &a } };

		if (round == 1)
			a.refuse = -EPIPE;
		CHECK_INT(rte_ring_enqueue_elem(io.cmd, &add, sizeof(add)), 0);
		add.slot = 1, add.x.c = &b;
		CHECK_INT(rte_ring_enqueue_elem(io.cmd, &add, sizeof(add)), 0);
		open_req(ns, 3);
		spin(ns, 2);
		CHECK_INT(a.n_got + b.n_got, 4);
		CHECK_INT(a.n_got, round == 0 ? 2 : 0);
		CHECK_INT(ns->ct.post_failed, 0);
		a.refuse = 0;
		for (unsigned i = 0; i < a.n_got; i++)
			fake_finish(&a, i, KVL_OK);
		spin(ns, 1); /* a's completions reaped; b's come in drive_to_done */
		CHECK_INT(a.outstanding, 0);
		drive_to_done(ns, &b);
		done(ns);
	}
}

/* nic_io's completion hook: the API's completions stay, in order, at the front; the
 * scheduler's go to it, and ids it never gave are counted. */
static void test_take_wc(void)
{
	struct kvl_nic_sched *ns = make(true, 0);
	struct kvl_wc wc[80];
	unsigned kept;

	for (unsigned i = 0; i < 80; i++)
		wc[i] = (struct kvl_wc){ .wr_id = i % 5 == 0 ? 1000 + i : KVL_WR_SCHED_TAG | i,
					 .status = KVL_OK };
	kept = kvl_nic_sched_take_wc(ns, wc, 80);
	CHECK_INT(kept, 16);
	for (unsigned i = 0; i < kept; i++)
		CHECK_INT(wc[i].wr_id, 1000 + 5 * i);
	CHECK_INT(ns->ct.bad_completions, 64); /* nothing was in flight */
	/* and the stage still works after them */
	open_req(ns, 3);
	drive_to_done(ns, NULL);
	CHECK_INT(req.open_rc, 0);
	CHECK_INT(ns->ct.bad_completions, 64);
	done(ns);
}

/* ---- step flags ---- */

/* Which READ of @c carries block @b (the scheduler picks the order). */
static unsigned wr_of(const struct fake_conn *c, unsigned b)
{
	for (unsigned i = 0; i < c->n_got; i++)
		if (c->got[i].remote_off == blk[b].remote_off)
			return i;
	CHECK(!"no READ for the block");
	return 0;
}

static uint32_t ready_word(const struct kvl_nic_sched *ns, uint32_t step)
{
	return __atomic_load_n(&ns->flags[req.flag_base + step].ready, __ATOMIC_ACQUIRE);
}

/* What the engine's stream does after the step's kernels: DONE = @v. */
static void write_done(struct kvl_nic_sched *ns, uint32_t step, uint32_t v)
{
	__atomic_store_n(&ns->flags[req.flag_base + step].done, v, __ATOMIC_RELEASE);
}

static unsigned count_events(struct kvl_nic_sched *ns, uint16_t type)
{
	struct kvl_sched_event ev[16];
	unsigned n = events(ns, ev, 16), k = 0;

	for (unsigned i = 0; i < n; i++)
		k += ev[i].type == type;
	return k;
}

/*
 * READY is written exactly when a step's last block has landed, a DONE the "stream" writes
 * frees the step with no DONE command (the window slides: the next step's READs go out), a
 * DONE of an older epoch frees nothing, and the range comes back at the end, to be reused
 * with a new epoch that the last user's late DONE cannot satisfy.
 */
static void test_step_flags(void)
{
	struct kvl_nic_sched *ns;
	struct fake_conn c = { .room = 64 };
	struct kvl_lcmd add = { .type = KVL_LCMD_ADD_CONN,
				.peer = 3,
				.slot = 0,
				.gen = 1,
				.x = { .ops = &fake_ops, .c = &c } };
	uint32_t e, base;

	budget = 2 * SLOT; /* one step's blocks at a time: a DONE is what lets step 1 go */
	ns = make(false, 0);
	CHECK(ns->flags != NULL && ns->n_flags == 64); /* max_blocks_total: one per step */
	CHECK_INT(rte_ring_enqueue_elem(io.cmd, &add, sizeof(add)), 0);
	open_req(ns, 3);
	req.want_flags = 1;
	spin(ns, 2);
	CHECK_INT(req.open_rc, 0);
	CHECK_INT(ns->ct.flag_reqs, 1);
	CHECK_INT(ns->ct.flags_in_use, 2);
	e = req.flag_epoch;
	base = req.flag_base;
	CHECK_INT(ready_word(ns, 0), e - 1);
	CHECK_INT(c.n_got, 2); /* step 0's blocks only: the budget */
	fake_finish(&c, wr_of(&c, 0), KVL_OK);
	spin(ns, 3);
	CHECK_INT(ready_word(ns, 0), e - 1); /* block 1 still in flight: not READY */
	CHECK_INT(ns->ct.ready_written, 0);
	fake_finish(&c, wr_of(&c, 1), KVL_OK);
	spin(ns, 2);
	CHECK_INT(ready_word(ns, 0), e);
	CHECK_INT(ready_word(ns, 1), e - 1);
	CHECK_INT(ns->ct.ready_written, 1);
	CHECK(off[0] < sizeof(staging) && off[1] < sizeof(staging)); /* before READY */
	CHECK_INT(count_events(ns, KVL_SCHED_EV_STEP_READY), 1);     /* the event too */
	/* a DONE of an earlier epoch (a previous user's stream) frees nothing */
	write_done(ns, 0, e - 1);
	spin(ns, 3);
	write_done(ns, 0, e - 1000);
	spin(ns, 3);
	CHECK_INT(ns->ct.done_seen, 0);
	CHECK_INT(c.n_got, 2);
	/* this epoch's: step 0 freed, step 1's READs posted, with no DONE command */
	write_done(ns, 0, e);
	spin(ns, 2);
	CHECK_INT(ns->ct.done_seen, 1);
	CHECK_INT(ns->ct.done_cmds, 0);
	CHECK_INT(c.n_got, 4);
	fake_finish(&c, wr_of(&c, 2), KVL_OK);
	fake_finish(&c, wr_of(&c, 3), KVL_OK);
	spin(ns, 2);
	CHECK_INT(ready_word(ns, 1), e);
	CHECK_INT(count_events(ns, KVL_SCHED_EV_STEP_READY), 1);
	write_done(ns, 1, e + 1); /* ahead of the epoch (cyclic GEQ): done as well */
	spin(ns, 2);
	CHECK_INT(count_events(ns, KVL_SCHED_EV_REQ_DONE), 1);
	CHECK_INT(ns->ct.done_seen, 2);
	CHECK_INT(ns->ct.flags_in_use, 0);
	CHECK_INT(ns->n_watch, 0);

	/* the range again, a new epoch; the old user's DONE (written late) is not the new one's */
	open_req(ns, 3);
	req.want_flags = 1;
	spin(ns, 2);
	CHECK_INT(req.open_rc, 0);
	CHECK_INT(req.flag_base, base);
	CHECK(req.flag_epoch != e);
	e = req.flag_epoch;
	write_done(ns, 0, e - 1);
	fake_finish(&c, 4, KVL_OK);
	fake_finish(&c, 5, KVL_OK);
	spin(ns, 3);
	CHECK_INT(ready_word(ns, 0), e);
	CHECK_INT(ns->ct.done_seen, 2);
	CHECK_INT(c.n_got, 6); /* not slid */
	write_done(ns, 0, e);
	spin(ns, 2);
	CHECK_INT(c.n_got, 8);
	fake_finish(&c, 6, KVL_OK);
	fake_finish(&c, 7, KVL_OK);
	spin(ns, 2);
	write_done(ns, 1, e);
	spin(ns, 2);
	CHECK_INT(count_events(ns, KVL_SCHED_EV_REQ_DONE), 1);
	CHECK_INT(ns->ct.flags_in_use, 0);

	/* a request without the flag: DONE commands, and no flag of the pool touched */
	c.n_got = c.outstanding = c.n_done = 0;
	budget = (uint64_t)SLOT * NSLOT;
	open_req(ns, 3);
	drive_to_done(ns, &c);
	CHECK_INT(req.open_rc, 0);
	CHECK_INT(ns->ct.ready_written, 4);
	CHECK_INT(ns->ct.done_seen, 4);
	CHECK_INT(ns->ct.flag_reqs, 2);
	CHECK_INT(ns->ct.done_cmds, 2);
	CHECK_INT(ns->ct.bad_completions, 0);
	done(ns);
}

/* A failed request's steps are released (no stream hangs on them) and its range returns;
 * a request asking for more steps than the pool holds is refused with -ENOSPC. */
static void test_step_flags_fail(void)
{
	struct kvl_nic_sched *ns = make(false, 0);

	open_req(ns, 3); /* no connection to peer 3: its READs fail */
	req.want_flags = 1;
	spin(ns, 4);
	CHECK_INT(req.open_rc, 0);
	CHECK_INT(count_events(ns, KVL_SCHED_EV_REQ_FAILED), 1);
	CHECK_INT(ready_word(ns, 0), req.flag_epoch);
	CHECK_INT(ready_word(ns, 1), req.flag_epoch);
	CHECK_INT(ns->ct.ready_written, 0);
	CHECK_INT(ns->ct.flags_in_use, 0);
	CHECK_INT(ns->n_watch, 0);
	ns->n_flags = 1; /* as if the pool were one entry long */
	open_req(ns, 3);
	req.want_flags = 1;
	spin(ns, 1);
	CHECK_INT(req.open_rc, -ENOSPC);
	CHECK_INT(ns->ct.flag_nospc, 1);
	CHECK_INT(ns->ct.flags_in_use, 0);
	done(ns);
}

int main(void)
{
	test_two_connections();
	test_null_transport();
	test_peer_connection();
	test_full_connection();
	test_refusals();
	test_take_wc();
	test_step_flags();
	test_step_flags_fail();
	return kvl_test_done("nic_sched");
}
