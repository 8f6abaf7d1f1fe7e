/* SPDX-License-Identifier: BSD-3-Clause */
/* The mlx5 fast path, unchanged, against the software NIC model: bytes and completions. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvl_test.h"
#include "mlx5.h"
#include "mlx5_model.h"

#define REG	  (64 * 1024)
#define SQ_BBS	  64
#define LKEY	  0x1111
#define RKEY	  0x2222
#define MIN_WQES  12000
#define MAX_STALL 1000

static uint64_t rs = 88172645463325252ull;

static uint32_t rnd(uint32_t n)
{
	rs ^= rs << 13;
	rs ^= rs >> 7;
	rs ^= rs << 17;
	return n ? (uint32_t)(rs % n) : 0;
}

/* What the memory must look like: every completed request applied in completion order,
 * which is the order the NIC executed them (RC, one QP). */
struct shadow {
	uint8_t *local, *remote;
};

static void apply(struct shadow *s, const struct mlx5_model *m, uint8_t op,
		  const struct kvl_mlx5_sge *sge, unsigned nsge, uint64_t raddr)
{
	uint8_t *r = s->remote + (raddr - (uintptr_t)m->remote.base);

	for (unsigned i = 0; i < nsge; i++) {
		uint8_t *l = s->local + (sge[i].addr - (uintptr_t)m->local.base);

		if (op == KVL_MLX5_OP_RDMA_READ)
			memmove(l, r, sge[i].len);
		else
			memmove(r, l, sge[i].len);
		r += sge[i].len;
	}
}

static int regions(struct mlx5_model *m, struct shadow *s)
{
	m->local = (struct mlx5_model_mr){ malloc(REG), REG, LKEY };
	m->remote = (struct mlx5_model_mr){ malloc(REG), REG, RKEY };
	s->local = malloc(REG);
	s->remote = malloc(REG);
	if (!m->local.base || !m->remote.base || !s->local || !s->remote)
		return -ENOMEM;
	kvl_test_fill_random(m->local.base, REG);
	kvl_test_fill_random(m->remote.base, REG);
	memcpy(s->local, m->local.base, REG);
	memcpy(s->remote, m->remote.base, REG);
	return 0;
}

static void regions_free(struct mlx5_model *m, struct shadow *s)
{
	free(m->local.base);
	free(m->remote.base);
	free(s->local);
	free(s->remote);
}

static bool same(const struct mlx5_model *m, const struct shadow *s)
{
	return memcmp(m->local.base, s->local, REG) == 0 &&
	       memcmp(m->remote.base, s->remote, REG) == 0;
}

/* ---- A: the SQ and CQ layers directly: multi-SGE, every opcode, every signaling mode ---- */

struct posted {
	uint64_t wrid;
	uint64_t raddr;
	uint8_t op, nsge;
	struct kvl_mlx5_sge sge[KVL_MLX5_MAX_SGE];
};

static void sq_cq_random(uint8_t mode, uint16_t every, unsigned bf_size)
{
	struct mlx5_model m;
	struct shadow s;
	struct kvl_mlx5_sq sq;
	struct kvl_mlx5_cq cq;
	struct kvl_mlx5_sq_attr a;
	static struct posted fifo[SQ_BBS];
	uint64_t head = 0, tail = 0, seq = 0, cqes = 0, implied = 0, compares = 0;
	unsigned batches = 0, stall = 0;

	CHECK_INT(mlx5_model_init(&m, SQ_BBS, SQ_BBS, bf_size, 0x5a5a), 0);
	CHECK_INT(regions(&m, &s), 0);
	struct mlx5_sig_rule rule = { mode, every, 0 };

	a = mlx5_model_sq_attr(&m);
	CHECK_INT(kvl_mlx5_sq_init(&sq, &a), 0);
	CHECK_INT(kvl_mlx5_cq_init(&cq, m.cq, m.cqe_cnt, 64, m.cq_dbrec), 0);

	while ((seq < MIN_WQES || head != tail) && kvl_test_failures < 100) {
		unsigned b = seq < MIN_WQES ? 1 + rnd(12) : 0, got = 0;
		bool drain = ++batches % 16 == 0 || seq >= MIN_WQES;
		struct kvl_mlx5_cqe_info e[8];

		for (unsigned i = 0; i < b; i++) {
			struct posted *p = &fifo[head % SQ_BBS];
			struct kvl_mlx5_wqe w = { .sge = p->sge };
			unsigned nsge = rnd(10) < 7 ? 1 : 2 + rnd(KVL_MLX5_MAX_SGE - 1);
			uint32_t total = 0;
			static const uint8_t ops[] = { KVL_MLX5_OP_RDMA_WRITE,
						       KVL_MLX5_OP_RDMA_READ,
						       KVL_MLX5_OP_RDMA_WRITE_IMM };

			if (kvl_mlx5_wqe_bbs(nsge) > kvl_mlx5_sq_room(&sq))
				break;
			for (unsigned k = 0; k < nsge; k++) {
				uint32_t len = 1 + rnd(512);

				p->sge[k] = (struct kvl_mlx5_sge){ .addr = (uintptr_t)m.local.base +
									   rnd(REG - len),
								   .lkey = LKEY,
								   .len = len };
				total += len;
			}
			p->op = ops[rnd(3)];
			p->nsge = (uint8_t)nsge;
			p->raddr = (uintptr_t)m.remote.base + rnd(REG - total);
			p->wrid = seq++;
			w.wrid = p->wrid;
			w.opcode = p->op;
			w.nsge = p->nsge;
			w.raddr = p->raddr;
			w.rkey = RKEY;
			w.imm = (uint32_t)p->wrid;
			w.flags = mlx5_sig_rule_flags(&rule, mode == MLX5_SIG_NONE && rnd(8) == 0
								     ? KVL_MLX5_F_SIGNAL
								     : 0);
			CHECK_INT(kvl_mlx5_sq_post(&sq, &w), 0);
			head++;
			got++;
		}
		if (got != 0) {
			mlx5_sig_rule_reset(&rule, kvl_mlx5_sq_signal_last(&sq));
			kvl_mlx5_sq_ring(&sq);
			CHECK_INT(mlx5_model_doorbell(&m), 1);
		}
		/* The NIC runs behind the CPU by a random amount, or catches up. */
		mlx5_model_run(&m, drain ? ~0u : rnd(mlx5_model_pending(&m) + 1));
		do {
			unsigned n = kvl_mlx5_cq_poll(&cq, e, 1 + rnd(8));

			for (unsigned i = 0; i < n; i++) {
				uint64_t wrid = ~0ull;

				CHECK_INT(e[i].opcode, KVL_MLX5_CQE_REQ);
				CHECK_INT(e[i].status, KVL_OK);
				CHECK_INT(e[i].qpn, 0x5a5a);
				CHECK_INT(kvl_mlx5_sq_complete(&sq, e[i].wqe_counter, &wrid), 0);
				if (wrid < fifo[tail % SQ_BBS].wrid || wrid >= seq) {
					CHECK(0);
					break;
				}
				CHECK_INT(e[i].sq_opcode, fifo[(wrid % SQ_BBS)].op);
				/* It and every unsignaled WQE before it are done, in order. */
				while (tail != head && fifo[tail % SQ_BBS].wrid <= wrid) {
					struct posted *p = &fifo[tail % SQ_BBS];

					apply(&s, &m, p->op, p->sge, p->nsge, p->raddr);
					implied += p->wrid != wrid;
					tail++;
				}
				cqes++;
			}
			stall = n == 0 && drain && head != tail ? stall + 1 : 0;
		} while (drain && head != tail && stall < MAX_STALL && kvl_test_failures < 100);
		if (stall >= MAX_STALL) {
			fprintf(stderr, "stalled: %llu WQEs outstanding, model: %s\n",
				(unsigned long long)(head - tail), m.fail);
			CHECK(0);
			break;
		}
		if (drain && head == tail) {
			CHECK(same(&m, &s));
			compares++;
			/* New data for the next round of WRITEs. */
			kvl_test_fill_random(m.local.base, REG);
			memcpy(s.local, m.local.base, REG);
		}
	}
	CHECK_STR(m.fail, "");
	CHECK_INT(tail, seq);
	CHECK_INT(m.wqes, seq);
	CHECK_INT(cqes, m.signaled);
	CHECK_INT(cqes, sq.stats.signaled);
	CHECK_INT(cqes + implied, seq);
	CHECK_INT(m.doorbells, sq.stats.doorbells);
	CHECK_INT(m.bf_copies, sq.stats.bf_copies);
	CHECK(sq.stats.wraps > 0);
	CHECK(sq.stats.wqebbs / SQ_BBS >= 100);
	if (mode == MLX5_SIG_ALWAYS)
		CHECK_INT(implied, 0);
	else
		CHECK(implied > 0);
	printf("sq/cq mode %u every %u bf %u: %llu WQEs (%llu WQEBBs, %llu SQ passes, %llu "
	       "wrapped), %llu CQEs + %llu implied, %llu doorbells (%llu BlueFlame), %llu "
	       "bytes, %llu full-memory compares\n",
	       mode, every, bf_size, (unsigned long long)seq, (unsigned long long)sq.stats.wqebbs,
	       (unsigned long long)sq.stats.wqebbs / SQ_BBS, (unsigned long long)sq.stats.wraps,
	       (unsigned long long)cqes, (unsigned long long)implied,
	       (unsigned long long)m.doorbells, (unsigned long long)m.bf_copies,
	       (unsigned long long)m.bytes, (unsigned long long)compares);
	kvl_mlx5_sq_fini(&sq);
	regions_free(&m, &s);
	mlx5_model_free(&m);
}

/* ---- B: a NIC that writes the wrong owner bit is not believed ---- */

static void wrong_owner(void)
{
	struct mlx5_model m;
	struct kvl_mlx5_sq sq;
	struct kvl_mlx5_cq cq;
	struct kvl_mlx5_sq_attr a;
	struct kvl_mlx5_cqe_info e[4];
	uint8_t buf[64];
	struct kvl_mlx5_sge sge;
	struct kvl_mlx5_wqe w = { .opcode = KVL_MLX5_OP_RDMA_WRITE,
				  .rkey = RKEY,
				  .sge = &sge,
				  .flags = KVL_MLX5_F_SIGNAL };

	CHECK_INT(mlx5_model_init(&m, 4, 4, 0, 1), 0);
	m.local = (struct mlx5_model_mr){ buf, sizeof(buf), LKEY };
	m.remote = (struct mlx5_model_mr){ buf, sizeof(buf), RKEY };
	sge = (struct kvl_mlx5_sge){ .addr = (uintptr_t)buf, .lkey = LKEY, .len = 8 };
	w.raddr = (uintptr_t)buf + 32;
	w.nsge = 1;
	a = mlx5_model_sq_attr(&m);
	CHECK_INT(kvl_mlx5_sq_init(&sq, &a), 0);
	CHECK_INT(kvl_mlx5_cq_init(&cq, m.cq, m.cqe_cnt, 64, m.cq_dbrec), 0);
	/* Six passes' worth of CQEs through a 4-entry CQ, then one with the wrong owner. */
	for (unsigned i = 0; i < 24; i++) {
		uint64_t wrid = 0;

		w.wrid = i;
		CHECK_INT(kvl_mlx5_sq_post(&sq, &w), 0);
		kvl_mlx5_sq_ring(&sq);
		mlx5_model_doorbell(&m);
		mlx5_model_run(&m, 1);
		CHECK_INT(kvl_mlx5_cq_poll(&cq, e, 4), 1);
		CHECK_INT(kvl_mlx5_sq_complete(&sq, e[0].wqe_counter, &wrid), 0);
		CHECK_INT(wrid, i);
	}
	m.owner_flip = 1;
	CHECK_INT(kvl_mlx5_sq_post(&sq, &w), 0);
	kvl_mlx5_sq_ring(&sq);
	mlx5_model_doorbell(&m);
	CHECK_INT(mlx5_model_run(&m, 1), 1);
	CHECK_INT(m.cqes, 25);
	CHECK_INT(kvl_mlx5_cq_poll(&cq, e, 4), 0); /* last pass's owner: still the NIC's */
	CHECK_INT(cq.cq_ci, 24);
	CHECK_STR(m.fail, "");
	kvl_mlx5_sq_fini(&sq);
	mlx5_model_free(&m);
}

/* ---- C: two SQs on one doorbell register (a context past 16 QPs) ---- */

/*
 * Rings alternate between the SQs, lone WQEs (BlueFlame copies) and batches (8-byte
 * doorbells) mixed. With the toggle shared through kvl_mlx5_bf the register's buffers are used
 * in turn whichever SQ rings; with one toggle per SQ (@shared false, what the fast path did
 * before) the second SQ's first ring lands in the buffer the first one just used: the model
 * must see it.
 */
static void shared_register(bool shared)
{
	struct mlx5_model m[2];
	struct kvl_mlx5_sq sq[2];
	struct kvl_mlx5_cq cq[2];
	struct kvl_mlx5_bf bf;
	uint8_t buf[2][256];
	unsigned rings = 0;

	for (unsigned i = 0; i < 2; i++) {
		struct kvl_mlx5_sq_attr a;

		CHECK_INT(mlx5_model_init(&m[i], 16, 16, 256, 0x100 + i), 0);
		m[i].local = (struct mlx5_model_mr){ buf[i], 128, LKEY };
		m[i].remote = (struct mlx5_model_mr){ buf[i] + 128, 128, RKEY };
		if (i == 1)
			CHECK_INT(mlx5_model_share_register(&m[1], &m[0]), 0);
		a = mlx5_model_sq_attr(&m[i]);
		bf = (struct kvl_mlx5_bf){ .reg = m[0].uar, .size = 256 };
		a.bf = shared ? &bf : NULL;
		CHECK_INT(kvl_mlx5_sq_init(&sq[i], &a), 0);
		CHECK_INT(kvl_mlx5_cq_init(&cq[i], m[i].cq, m[i].cqe_cnt, 64, m[i].cq_dbrec), 0);
	}
	CHECK(m[1].uar == m[0].uar);
	for (unsigned r = 0; r < 40; r++) {
		unsigned q = rnd(3) == 0 ? r & 1 : (r >> 1) & 1, n = 1 + (rnd(2) ? 0 : rnd(3));
		struct kvl_mlx5_sge sge = { .addr = (uintptr_t)buf[q] + 8 * rnd(8),
					    .lkey = LKEY,
					    .len = 8 };
		struct kvl_mlx5_cqe_info e[4];
		uint64_t wrid = 0;

		for (unsigned k = 0; k < n; k++) {
			struct kvl_mlx5_wqe w = { .wrid = r * 4 + k,
						  .raddr = (uintptr_t)buf[q] + 128 + 8 * k,
						  .rkey = RKEY,
						  .sge = &sge,
						  .nsge = 1,
						  .opcode = KVL_MLX5_OP_RDMA_WRITE,
						  .flags = k == n - 1 ? KVL_MLX5_F_SIGNAL : 0 };

			CHECK_INT(kvl_mlx5_sq_post(&sq[q], &w), 0);
		}
		kvl_mlx5_sq_ring(&sq[q]);
		rings += mlx5_model_doorbell(&m[q]);
		CHECK_INT(mlx5_model_run(&m[q], 8), n);
		CHECK_INT(kvl_mlx5_cq_poll(&cq[q], e, 4), 1);
		CHECK_INT(kvl_mlx5_sq_complete(&sq[q], e[0].wqe_counter, &wrid), 0);
		CHECK_INT(wrid, r * 4 + n - 1);
	}
	CHECK_INT(rings, 40);
	if (shared) {
		CHECK_STR(m[0].fail, "");
		CHECK_STR(m[1].fail, "");
		CHECK(m[0].bf_copies + m[1].bf_copies > 0); /* lone WQEs went whole */
		CHECK(m[0].doorbells > m[0].bf_copies || m[1].doorbells > m[1].bf_copies);
	} else {
		/* the model sees the old per-SQ toggle tear the register's buffers */
		CHECK(strstr(m[0].fail, "torn") != NULL || strstr(m[1].fail, "torn") != NULL);
	}
	printf("two SQs on one register, toggle %s: %s%s\n", shared ? "per register" : "per SQ",
	       m[0].fail[0] || m[1].fail[0] ? "model says: " : "clean",
	       m[0].fail[0] ? m[0].fail : m[1].fail);
	for (unsigned i = 2; i-- > 0;) {
		kvl_mlx5_sq_fini(&sq[i]);
		mlx5_model_free(&m[i]);
	}
}

int main(int argc, char **argv)
{
	unsigned scale = argc > 1 ? (unsigned)atoi(argv[1]) : 1;

	(void)scale;
	sq_cq_random(MLX5_SIG_EVERY_N, 4, 0);
	sq_cq_random(MLX5_SIG_NONE, 0, 256);
	sq_cq_random(MLX5_SIG_ALWAYS, 0, 256);
	sq_cq_random(MLX5_SIG_EVERY_N, 64, 0);
	wrong_owner();
	shared_register(true);
	shared_register(false);
	return kvl_test_done("mlx5_model");
}
