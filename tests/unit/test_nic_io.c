/* SPDX-License-Identifier: BSD-3-Clause */
/* Unit test of the NIC lcore's I/O stage: routing, retries, errno-to-status, closing. */
#include "fake_xport.h"
#include "kvl_test.h"

#include "../../lcores/nic_io.c"

static struct kvl_nic_io io;

static void add_conn(unsigned slot, uint32_t peer, uint32_t gen, struct fake_conn *c)
{
	struct kvl_lcmd cmd = { .type = KVL_LCMD_ADD_CONN,
				.peer = peer,
				.slot = slot,
				.gen = gen,
				.x = { .ops = &fake_ops, .c = c } };

	CHECK_INT(rte_ring_enqueue_elem(io.cmd, &cmd, sizeof(cmd)), 0);
}

/* What the API does in kvl_post(): one struct kvl_sub into the submission ring. */
static void submit(unsigned slot, uint32_t gen, uint64_t wr_id, uint32_t length)
{
	static uint8_t buf[1 << 16];
	struct kvl_sub sub = { .wr = { .wr_id = wr_id,
				       .local = buf,
				       .remote_off = wr_id * 8,
				       .length = length,
				       .remote_seg = 1,
				       .op = KVL_OP_READ },
			       .slot = (uint16_t)slot,
			       .gen = gen };

	CHECK_INT(rte_ring_mp_enqueue_elem(io.sub, &sub, sizeof(sub)), 0);
}

static unsigned take_cpl(struct kvl_wc *wc, unsigned max)
{
	return rte_ring_sc_dequeue_burst_elem(io.cpl, wc, sizeof(*wc), max, NULL);
}

static void setup(void)
{
	CHECK_INT(kvl_nic_io_init(&io, 0, 0, 16), 0);
}

/* Submissions reach their connection in order; its completions reach the API unchanged. */
static void test_route_and_complete(void)
{
	struct fake_conn c = { .room = 16 };
	struct kvl_wc wc[8];

	setup();
	add_conn(5, 2, 7, &c);
	for (uint64_t i = 1; i <= 3; i++)
		submit(5, 7, i, (uint32_t)(100 * i));
	kvl_nic_io_stage(NULL, &io);
	CHECK_INT(c.n_got, 3);
	for (unsigned i = 0; i < 3 && i < c.n_got; i++) {
		CHECK_INT(c.got[i].wr_id, i + 1);
		CHECK_INT(c.got[i].length, 100 * (i + 1));
		CHECK_INT(c.got[i].remote_off, (i + 1) * 8);
	}
	CHECK_INT(take_cpl(wc, 8), 0); /* nothing completed yet */
	fake_finish(&c, 1, KVL_OK);
	fake_finish(&c, 0, KVL_ERR_BOUNDS);
	fake_finish(&c, 2, KVL_OK);
	kvl_nic_io_stage(NULL, &io);
	CHECK_INT(take_cpl(wc, 8), 3);
	CHECK_INT(wc[0].wr_id, 2);
	CHECK_INT(wc[0].status, KVL_OK);
	CHECK_INT(wc[0].bytes, 200);
	CHECK_INT(wc[1].wr_id, 1);
	CHECK_INT(wc[1].status, KVL_ERR_BOUNDS);
	CHECK_INT(wc[1].bytes, 0);
	CHECK_INT(wc[2].wr_id, 3);
	CHECK_INT(wc[2].bytes, 300);
	kvl_nic_io_fini(&io);
	CHECK(c.freed);
}

/* A slot that is free, or holds a newer generation: the submission completes NO_PEER. */
static void test_unroutable(void)
{
	struct fake_conn c = { .room = 16 };
	struct kvl_wc wc[8];

	setup();
	add_conn(1, 0, 3, &c);
	submit(1, 2, 11, 10);	/* stale generation */
	submit(9, 1, 12, 10);	/* no connection */
	submit(200, 1, 13, 10); /* no such slot */
	kvl_nic_io_stage(NULL, &io);
	CHECK_INT(c.n_got, 0);
	CHECK_INT(take_cpl(wc, 8), 3);
	for (unsigned i = 0; i < 3; i++) {
		CHECK_INT(wc[i].wr_id, 11 + i);
		CHECK_INT(wc[i].status, KVL_ERR_NO_PEER);
		CHECK_INT(wc[i].bytes, 0);
	}
	CHECK_INT(io.unroutable, 3);
	kvl_nic_io_fini(&io);
}

/* A full connection (-EAGAIN): the rest waits and is posted, in order, once it has room; the
 * other connections go on meanwhile. */
static void test_retry_in_order(void)
{
	struct fake_conn a = { .room = 2 }, b = { .room = 16 };
	struct kvl_wc wc[16];

	setup();
	add_conn(0, 1, 1, &a);
	add_conn(1, 1, 1, &b);
	for (uint64_t i = 1; i <= 5; i++)
		submit(0, 1, i, 1);
	submit(1, 1, 100, 1);
	kvl_nic_io_stage(NULL, &io);
	CHECK_INT(a.n_got, 2);
	CHECK_INT(b.n_got, 1);
	kvl_nic_io_stage(NULL, &io); /* still full: nothing moves, nothing is lost */
	CHECK_INT(a.n_got, 2);
	fake_finish(&a, 0, KVL_OK);
	fake_finish(&a, 1, KVL_OK);
	kvl_nic_io_stage(NULL, &io); /* reaps two, */
	kvl_nic_io_stage(NULL, &io); /* posts two more */
	CHECK_INT(a.n_got, 4);
	fake_finish(&a, 2, KVL_OK);
	fake_finish(&a, 3, KVL_OK);
	kvl_nic_io_stage(NULL, &io);
	kvl_nic_io_stage(NULL, &io);
	CHECK_INT(a.n_got, 5);
	for (unsigned i = 0; i < a.n_got; i++)
		CHECK_INT(a.got[i].wr_id, i + 1);
	fake_finish(&a, 4, KVL_OK);
	kvl_nic_io_stage(NULL, &io);
	CHECK_INT(take_cpl(wc, 16), 5);
	for (unsigned i = 0; i < 5; i++)
		CHECK_INT(wc[i].wr_id, i + 1);
	kvl_nic_io_fini(&io);
}

/* A refused post completes at once with the status its errno stands for. */
static void check_refusal(int err, int broken, int status)
{
	struct fake_conn c = { .room = 16, .refuse = err, .broken = broken };
	struct kvl_wc wc[4];

	setup();
	add_conn(3, 4, 1, &c);
	submit(3, 1, 77, 64);
	kvl_nic_io_stage(NULL, &io);
	CHECK_INT(c.n_got, 0);
	CHECK_INT(take_cpl(wc, 4), 1);
	CHECK_INT(wc[0].wr_id, 77);
	CHECK_INT(wc[0].status, status);
	CHECK_INT(wc[0].bytes, 0);
	c.broken = 0; /* closed conns are tested apart */
	kvl_nic_io_fini(&io);
}

static void test_errno_to_status(void)
{
	check_refusal(-EPIPE, KVL_ERR_PEER_DEAD, KVL_ERR_PEER_DEAD); /* broken: its own status */
	check_refusal(-EPIPE, 0, KVL_ERR_CONN_LOST);
	check_refusal(-EMSGSIZE, 0, KVL_ERR_TOO_LARGE);
	check_refusal(-EINVAL, 0, KVL_ERR_PROTOCOL);
}

/* A broken connection closes once nothing is outstanding: reported to the control thread,
 * freed, its counters kept for its peer. */
static void test_close(void)
{
	struct fake_conn c = { .room = 16 };
	struct kvl_levt ev;
	struct kvl_xport_stats sum = { 0 };
	struct kvl_wc wc[4];

	setup();
	add_conn(2, 6, 1, &c);
	submit(2, 1, 1, 8);
	kvl_nic_io_stage(NULL, &io);
	c.broken = KVL_ERR_CONN_LOST;
	kvl_nic_io_stage(NULL, &io); /* one outstanding: stays */
	CHECK(!c.freed);
	CHECK_INT(rte_ring_count(io.evt), 0);
	fake_finish(&c, 0, KVL_ERR_CONN_LOST);
	kvl_nic_io_stage(NULL, &io);
	CHECK(c.freed);
	CHECK_INT(take_cpl(wc, 4), 1);
	CHECK_INT(wc[0].status, KVL_ERR_CONN_LOST);
	CHECK_INT(rte_ring_dequeue_elem(io.evt, &ev, sizeof(ev)), 0);
	CHECK_INT(ev.type, KVL_LEVT_CONN_CLOSED);
	CHECK_INT(ev.slot, 2);
	CHECK_INT(ev.peer, 6);
	CHECK_INT(ev.status, KVL_ERR_CONN_LOST);
	kvl_nic_io_peer_stats(&io, 6, &sum);
	CHECK_INT(sum.posted_read, 1);
	submit(2, 1, 2, 8); /* the slot is free now */
	kvl_nic_io_stage(NULL, &io);
	CHECK_INT(take_cpl(wc, 4), 1);
	CHECK_INT(wc[0].status, KVL_ERR_NO_PEER);
	kvl_nic_io_fini(&io);
}

/* FAIL_PEER fails only that peer's connections. */
static void test_fail_peer(void)
{
	struct fake_conn a = { .room = 4 }, b = { .room = 4 };
	struct kvl_lcmd cmd = { .type = KVL_LCMD_FAIL_PEER, .peer = 1, .status = KVL_ERR_NO_PEER };

	setup();
	add_conn(0, 1, 1, &a);
	add_conn(1, 2, 1, &b);
	kvl_nic_io_stage(NULL, &io);
	CHECK_INT(rte_ring_enqueue_elem(io.cmd, &cmd, sizeof(cmd)), 0);
	kvl_nic_io_stage(NULL, &io);
	CHECK(a.freed);
	CHECK(!b.freed);
	CHECK_INT(b.broken, 0);
	kvl_nic_io_fini(&io);
}

/* The null transport's burst: takes what fits, says -EAGAIN for the rest, completes in
 * order with each request's id and length. */
static void test_null_burst(void)
{
	struct kvl_null_conn *c = kvl_null_conn_new(4);
	struct kvl_wr wr[6];
	struct kvl_wc wc[8];
	int err = 0;

	CHECK(c != NULL);
	if (c == NULL)
		return;
	for (unsigned i = 0; i < 6; i++)
		wr[i] = (struct kvl_wr){ .wr_id = 10 + i, .length = 100 + i, .op = KVL_OP_READ };
	CHECK_INT(kvl_xport_null.post(c, wr, 6, &err), 4);
	CHECK_INT(err, -EAGAIN);
	CHECK_INT(kvl_xport_null.outstanding(c), 4);
	CHECK_INT(kvl_xport_null.reap(c, wc, 8), 4);
	for (unsigned i = 0; i < 4; i++) {
		CHECK_INT(wc[i].wr_id, 10 + i);
		CHECK_INT(wc[i].bytes, 100 + i);
		CHECK_INT(wc[i].status, KVL_OK);
	}
	err = 0;
	CHECK_INT(kvl_xport_null.post(c, wr + 4, 2, &err), 2);
	CHECK_INT(err, 0);
	kvl_xport_null.free(c);
}

/* A burst refused in its middle: what came before is posted, the refused one completes with
 * its status, what follows still goes (kvl_nic_io_post, the one submission path). */
static void test_post_refused_midway(void)
{
	struct fake_conn c = { .room = 2 };
	struct kvl_xconn x = { &fake_ops, &c };
	struct kvl_wr wr[4];
	struct kvl_wc wc[4];
	unsigned failed = 0;
	int err = 0;

	setup();
	for (unsigned i = 0; i < 4; i++)
		wr[i] = (struct kvl_wr){ .wr_id = 1 + i, .length = 8, .op = KVL_OP_READ };
	CHECK_INT(kvl_nic_io_post(&io, &x, wr, 4, &err, &failed), 2);
	CHECK_INT(err, -EAGAIN);
	CHECK_INT(failed, 0);
	c.room = 16;
	c.refuse = -EMSGSIZE;
	CHECK_INT(kvl_nic_io_post(&io, &x, wr + 2, 1, &err, &failed), 1);
	CHECK_INT(failed, 1);
	CHECK_INT(take_cpl(wc, 4), 1);
	CHECK_INT(wc[0].wr_id, 3);
	CHECK_INT(wc[0].status, KVL_ERR_TOO_LARGE);
	c.refuse = 0;
	CHECK_INT(kvl_nic_io_post(&io, &x, wr + 3, 1, &err, &failed), 1);
	CHECK_INT(c.n_got, 3);
	CHECK_INT(c.got[2].wr_id, 4);
	kvl_nic_io_fini(&io);
}

/* As kvl_post() enqueues a scatter-gather transfer: its head and its SGE list, one bulk. */
static void submit_sges(unsigned slot, uint32_t gen, uint64_t wr_id, unsigned n_sge)
{
	static uint8_t buf[1 << 16];
	union kvl_sub_elem e[KVL_SUB_MAX_ELEMS];
	uint32_t len = 0;
	unsigned ne;

	for (unsigned k = 0; k < n_sge; k++) {
		kvl_sub_set_sge(e, k, buf + 1000 * k + wr_id, 10 + k);
		len += 10 + k;
	}
	e[0].head = (struct kvl_sub){ .wr = { .wr_id = wr_id,
					      .remote_off = wr_id * 8,
					      .length = len,
					      .remote_seg = 1,
					      .op = KVL_OP_WRITE,
					      .n_sge = (uint8_t)n_sge },
				      .slot = (uint16_t)slot,
				      .gen = gen };
	ne = kvl_sub_elems(e, n_sge);
	CHECK_INT(ne, 1 + (n_sge > 1 ? (n_sge + 2) / 3 : 0));
	CHECK_INT(rte_ring_mp_enqueue_bulk_elem(io.sub, e, sizeof(e[0]), ne, NULL), ne);
}

/* What submit_sges() put in for @wr_id, read back from what the connection was given. */
static void check_sges(const struct kvl_wr *w, uint64_t wr_id, unsigned n_sge)
{
	static uint8_t *buf;
	uint32_t len = 0;

	CHECK_INT(w->wr_id, wr_id);
	CHECK_INT(w->n_sge, n_sge);
	CHECK_INT(w->op, KVL_OP_WRITE);
	CHECK_INT(w->remote_off, wr_id * 8);
	for (unsigned k = 0; k < n_sge && k < KVL_WR_MAX_SGE; k++) {
		if (k == 0)
			buf = (uint8_t *)w->sge[0].addr - wr_id;
		CHECK((uint8_t *)w->sge[k].addr == buf + 1000 * k + wr_id);
		CHECK_INT(w->sge[k].length, 10 + k);
		len += 10 + k;
	}
	CHECK_INT(w->length, len);
}

/* The ring element is 48 bytes, with no SGE array; a transfer with an SGE list travels as
 * its head and up to 3 extension elements, and reaches the connection whole and in order
 * among one-range transfers, whatever its list's length. */
static void test_sge_elements(void)
{
	struct fake_conn c = { .room = 64 };
	const unsigned lens[] = { 2, 3, 4, 7, 8 };

	CHECK_INT(sizeof(struct kvl_sub), 48);
	CHECK_INT(sizeof(union kvl_sub_elem), 48);
	setup();
	add_conn(5, 2, 7, &c);
	for (unsigned i = 0; i < 5; i++) {
		submit(5, 7, 100 + 2 * i, 64);
		submit_sges(5, 7, 101 + 2 * i, lens[i]);
	}
	kvl_nic_io_stage(NULL, &io);
	CHECK_INT(c.n_got, 10);
	for (unsigned i = 0; i < 5 && 2 * i + 1 < c.n_got; i++) {
		CHECK_INT(c.got[2 * i].wr_id, 100 + 2 * i);
		CHECK_INT(c.got[2 * i].n_sge, 0);
		CHECK_INT(c.got[2 * i].length, 64);
		check_sges(&c.got[2 * i + 1], 101 + 2 * i, lens[i]);
	}
	kvl_nic_io_fini(&io);
}

/* A burst of the ring (KVL_NIC_IO_BURST elements) that ends inside a transfer's SGE list:
 * the rest of it is taken at once, nothing is split or lost, the order holds. */
static void test_sge_burst_boundary(void)
{
	struct fake_conn c = { .room = 128 };

	setup();
	add_conn(5, 2, 7, &c);
	for (unsigned i = 0; i < KVL_NIC_IO_BURST - 2; i++)
		submit(5, 7, 1 + i, 16);
	submit_sges(5, 7, 500, 8); /* elements 31..34 of a 32-element burst */
	submit(5, 7, 501, 16);
	submit_sges(5, 7, 502, 2);
	kvl_nic_io_stage(NULL, &io);
	kvl_nic_io_stage(NULL, &io);
	CHECK_INT(c.n_got, KVL_NIC_IO_BURST + 1);
	for (unsigned i = 0; i < KVL_NIC_IO_BURST - 2 && i < c.n_got; i++)
		CHECK_INT(c.got[i].wr_id, 1 + i);
	if (c.n_got == KVL_NIC_IO_BURST + 1) {
		check_sges(&c.got[KVL_NIC_IO_BURST - 2], 500, 8);
		CHECK_INT(c.got[KVL_NIC_IO_BURST - 1].wr_id, 501);
		check_sges(&c.got[KVL_NIC_IO_BURST], 502, 2);
	}
	CHECK_INT(io.unroutable, 0);
	kvl_nic_io_fini(&io);
}

/* A head that claims more SGEs than a request may have (never written by kvl_post()): it
 * completes KVL_ERR_PROTOCOL, no element behind it is read as its list, the next arrives. */
static void test_sge_bad_head(void)
{
	struct fake_conn c = { .room = 16 };
	struct kvl_sub bad = { .wr = { .wr_id = 77, .length = 8, .op = KVL_OP_WRITE, .n_sge = 9 },
			       .slot = 5,
			       .gen = 7 };
	struct kvl_wc wc[4];

	setup();
	add_conn(5, 2, 7, &c);
	CHECK_INT(rte_ring_mp_enqueue_elem(io.sub, &bad, sizeof(bad)), 0);
	submit(5, 7, 78, 32);
	kvl_nic_io_stage(NULL, &io);
	CHECK_INT(c.n_got, 1);
	CHECK_INT(c.got[0].wr_id, 78);
	CHECK_INT(take_cpl(wc, 4), 1);
	CHECK_INT(wc[0].wr_id, 77);
	CHECK_INT(wc[0].status, KVL_ERR_PROTOCOL);
	kvl_nic_io_fini(&io);
}

/*
 * Telemetry reads a connection's counters as the lcore last published them. A connection that
 * only took requests (posting is no work: nothing completed) must still be published within
 * PUBLISH_EVERY passes, or /kvlane/qps shows its counts from before those posts for as long
 * as they wait (an e2e sample read 8 WRITEs of an idle QP as at no QP).
 */
static void test_stats_published_without_work(void)
{
	struct fake_conn c = { .room = 16 };
	unsigned passes = 0;

	setup();
	add_conn(3, 1, 1, &c);
	kvl_nic_io_stage(NULL, &io);
	for (uint64_t i = 1; i <= 3; i++)
		submit(3, 1, i, 64);
	do {
		kvl_nic_io_stage(NULL, &io);
		passes++;
	} while (__atomic_load_n(&io.stats[3].tcp.posted_read, __ATOMIC_RELAXED) != 3 &&
		 passes <= PUBLISH_EVERY);
	CHECK_INT(c.n_got, 3);
	CHECK_INT(io.stats[3].tcp.posted_read, 3);
	CHECK(passes <= PUBLISH_EVERY);
	kvl_nic_io_fini(&io);
}

int main(void)
{
	test_stats_published_without_work();
	test_sge_elements();
	test_sge_burst_boundary();
	test_sge_bad_head();
	test_null_burst();
	test_post_refused_midway();
	test_route_and_complete();
	test_unroutable();
	test_retry_in_order();
	test_errno_to_status();
	test_close();
	test_fail_peer();
	return kvl_test_done("nic_io");
}
