/* SPDX-License-Identifier: BSD-3-Clause */
/* Unit test: commands to a NIC lcore never block the control thread (runtime/control/lcmd.c). */
#include <errno.h>
#include <stdlib.h>

#include "kvl_test.h"

#include "../../runtime/control/lcmd.c"
#pragma GCC diagnostic ignored "-Wunused-function" /* fake_xport.h: only its heap ring */
#include "fake_xport.h"

static struct kvl_lcmd cmd(uint32_t type, uint32_t seq)
{
	return (struct kvl_lcmd){ .type = type, .peer = seq % 64, .slot = seq };
}

static int push(struct rte_ring *r, struct kvl_lcmd_backlog *b, uint32_t type, uint32_t seq,
		uint64_t now)
{
	struct kvl_lcmd c = cmd(type, seq);

	return kvl_lcmd_push(r, b, &c, now);
}

/* What the lcore takes from its ring: the slots (sequence numbers) in ring order. */
static unsigned take(struct rte_ring *r, uint32_t *seq, unsigned max)
{
	struct kvl_lcmd c;
	unsigned n = 0;

	while (n < max && rte_ring_dequeue_elem(r, &c, sizeof(c)) == 0)
		seq[n++] = c.slot;
	return n;
}

/* A stalled lcore: commands wait in order, the control thread never waits, and past half the
 * backlog only FAIL_PEER gets in; once the lcore takes again, everything arrives in order. */
static void test_stall_and_recover(void)
{
	struct rte_ring *r = fake_ring_create("cmd", sizeof(struct kvl_lcmd), 8, 0,
					      RING_F_SP_ENQ | RING_F_SC_DEQ | RING_F_EXACT_SZ);
	static struct kvl_lcmd_backlog b;
	static uint32_t got[2 * KVL_LCMD_BACKLOG];
	uint32_t seq = 0, n_ok = 0, n_refused = 0, fail_peers = 0;
	unsigned n;

	CHECK(r != NULL);
	/* 8 fit the ring, the next wait: every push returns at once. */
	for (; seq < 8 + KVL_LCMD_BACKLOG / 2; seq++)
		CHECK_INT(
			kvl_lcmd_push(r, &b,
				      &(struct kvl_lcmd){ .type = KVL_LCMD_ADD_CONN, .slot = seq },
				      100 + seq),
			0);
	CHECK_INT(rte_ring_count(r), 8);
	CHECK_INT(b.n, KVL_LCMD_BACKLOG / 2);
	CHECK_INT(b.since_ns, 108); /* the first that had to wait */
	/* Half full: an ADD_CONN is refused, a FAIL_PEER still waits. */
	for (int i = 0; i < 10; i++) {
		struct kvl_lcmd c = cmd(i % 2 ? KVL_LCMD_FAIL_PEER : KVL_LCMD_ADD_CONN, seq);
		int rc = kvl_lcmd_push(r, &b, &c, 1000);

		if (rc == 0) {
			n_ok++;
			fail_peers += c.type == KVL_LCMD_FAIL_PEER;
			seq++;
		} else {
			CHECK_INT(rc, -ENOBUFS);
			CHECK_INT(c.type, KVL_LCMD_ADD_CONN);
			n_refused++;
		}
	}
	CHECK_INT(n_ok, 5);
	CHECK_INT(fail_peers, 5);
	CHECK_INT(n_refused, 5);
	CHECK_INT(b.refused, 5);
	/* FAIL_PEER may fill the backlog whole, and no more. */
	while (b.n < KVL_LCMD_BACKLOG) {
		CHECK_INT(
			kvl_lcmd_push(r, &b,
				      &(struct kvl_lcmd){ .type = KVL_LCMD_FAIL_PEER, .slot = seq },
				      2000),
			0);
		seq++;
	}
	CHECK_INT(push(r, &b, KVL_LCMD_FAIL_PEER, 99999, 2000), -ENOBUFS);

	/* The lcore takes 3: the next push first moves 3 from the backlog, then waits itself. */
	CHECK_INT(take(r, got, 3), 3);
	CHECK_INT(kvl_lcmd_drain(r, &b), KVL_LCMD_BACKLOG - 3);
	/* Now the lcore drains everything; the backlog follows, in order. */
	n = 0;
	while (b.n > 0 || rte_ring_count(r) > 0) {
		n += take(r, got + 3 + n, 8);
		kvl_lcmd_drain(r, &b);
	}
	n += 3;
	CHECK_INT(n, seq);
	for (unsigned i = 0; i < n; i++)
		if (got[i] != i) {
			CHECK_INT(got[i], i);
			break;
		}
	CHECK(!b.warned);
	/* Once empty, a push goes straight to the ring again. */
	CHECK_INT(push(r, &b, KVL_LCMD_ADD_CONN, 7, 3000), 0);
	CHECK_INT(rte_ring_count(r), 1);
	CHECK_INT(b.n, 0);
	free(r);
}

/* Order holds while the ring has room again but older commands wait: a new one never
 * overtakes them. */
static void test_no_overtaking(void)
{
	struct rte_ring *r = fake_ring_create("cmd2", sizeof(struct kvl_lcmd), 2, 0,
					      RING_F_SP_ENQ | RING_F_SC_DEQ | RING_F_EXACT_SZ);
	static struct kvl_lcmd_backlog b;
	uint32_t got[8];

	for (uint32_t s = 0; s < 5; s++)
		CHECK_INT(push(r, &b, KVL_LCMD_SET_REMOTE, s, 1), 0);
	CHECK_INT(b.n, 3);
	CHECK_INT(take(r, got, 1), 1); /* room for one */
	CHECK_INT(push(r, &b, KVL_LCMD_SET_REMOTE, 5, 2), 0);
	CHECK_INT(take(r, got + 1, 8), 2);
	CHECK_INT(kvl_lcmd_drain(r, &b), 1);
	CHECK_INT(take(r, got + 3, 8), 2);
	CHECK_INT(kvl_lcmd_drain(r, &b), 0);
	CHECK_INT(take(r, got + 5, 8), 1);
	for (uint32_t i = 0; i < 6; i++)
		CHECK_INT(got[i], i);
	free(r);
}

int main(void)
{
	test_stall_and_recover();
	test_no_overtaking();
	return kvl_test_done("lcmd");
}
