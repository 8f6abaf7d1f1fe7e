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
	a = mlx5_model_sq_attr(&m, mode, every);
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

				p->sge[k] = (struct kvl_mlx5_sge){
					(uintptr_t)m.local.base + rnd(REG - len), LKEY, len
				};
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
			w.flags = mode == KVL_MLX5_SIG_NONE && rnd(8) == 0 ? KVL_MLX5_F_SIGNAL : 0;
			CHECK_INT(kvl_mlx5_sq_post(&sq, &w), 0);
			head++;
			got++;
		}
		if (got != 0) {
			kvl_mlx5_sq_signal_last(&sq);
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
	if (mode == KVL_MLX5_SIG_ALWAYS)
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

/* ---- B: requests in, completions out (kvl_mlx5_qp), with errors and recovery ---- */

enum { SEG_GOOD = 1, SEG_REVOKED = 2, SEG_UNKNOWN = 3 };

struct req {
	uint8_t op, refused_status, bad;
	uint32_t epoch;
	uint32_t length;
	uint64_t loff, roff;
};

struct qp_env {
	struct mlx5_model *m;
};

/* What the runtime's segment tables would say: lkey of the local region, the peer's rkey. */
static int resolve(void *ctx, const struct kvl_wr *w, struct kvl_mlx5_sge *sge, uint64_t *raddr,
		   uint32_t *rkey)
{
	struct qp_env *env = ctx;
	struct kvl_seg seg = { env->m->remote.base, REG, w->remote_seg,
			       KVL_SEG_REMOTE_READ | KVL_SEG_REMOTE_WRITE };
	uint8_t *l = w->local;
	int st;

	if (l < env->m->local.base || w->length > REG ||
	    (uint64_t)(l - env->m->local.base) > REG - w->length)
		return KVL_ERR_LOCAL;
	if (w->remote_seg != SEG_GOOD && w->remote_seg != SEG_REVOKED)
		return KVL_ERR_NO_SEGMENT;
	st = kvl_seg_check(&seg, w->remote_off, w->length, w->op);
	if (st != KVL_OK)
		return st;
	sge->addr = (uintptr_t)l;
	sge->lkey = LKEY;
	*raddr = (uintptr_t)env->m->remote.base + w->remote_off;
	/* A segment the peer has deregistered since: its old rkey, which the NIC refuses. */
	*rkey = w->remote_seg == SEG_GOOD ? RKEY : RKEY + 1;
	return KVL_OK;
}

static void qp_random(uint8_t mode, uint16_t every, unsigned bf_size, bool flush_signaled_only,
		      unsigned total)
{
	struct mlx5_model m;
	struct shadow s;
	struct kvl_mlx5_qp qp;
	struct kvl_mlx5_sq_attr a;
	struct qp_env env = { &m };
	struct req *reqs = calloc(total, sizeof(*reqs));
	/* per epoch (QP incarnation): the first request the NIC failed, UINT64_MAX if none */
	uint64_t *first_bad = malloc((total + 1) * sizeof(*first_bad));
	uint64_t next = 0, reaped = 0, ok = 0, access = 0, refused = 0, recoveries = 0;
	uint32_t epoch = 0;
	unsigned stall = 0, compares = 0;

	CHECK(reqs != NULL && first_bad != NULL);
	for (unsigned i = 0; reqs != NULL && first_bad != NULL && i <= total; i++)
		first_bad[i] = UINT64_MAX;
	CHECK_INT(mlx5_model_init(&m, SQ_BBS, SQ_BBS, bf_size, 0x77), 0);
	m.flush_signaled_only = flush_signaled_only;
	CHECK_INT(regions(&m, &s), 0);
	a = mlx5_model_sq_attr(&m, mode, every);
	CHECK_INT(kvl_mlx5_qp_init(&qp, &a, m.cq, m.cqe_cnt, 64, m.cq_dbrec, resolve, &env), 0);

	while (reaped < total && reqs != NULL && first_bad != NULL && kvl_test_failures < 100) {
		struct kvl_wr wr[16];
		struct kvl_wc wc[32];
		unsigned b = next < total ? 1 + rnd(16) : 0, taken, n, done;
		bool drain = next >= total || rnd(32) == 0;

		if (b > total - next)
			b = (unsigned)(total - next);
		for (unsigned i = 0; i < b; i++) {
			struct req *r = &reqs[next + i];
			uint32_t len = rnd(10) == 0 ? 0 : 1 + rnd(4096);
			unsigned k = rnd(400);

			r->op = rnd(2) ? KVL_OP_WRITE : KVL_OP_READ;
			r->length = len;
			r->loff = rnd(REG - len + 1);
			r->roff = rnd(REG - len + 1);
			wr[i] = (struct kvl_wr){ .wr_id = next + i,
						 .local = m.local.base + r->loff,
						 .remote_off = r->roff,
						 .length = len,
						 .remote_seg = SEG_GOOD,
						 .op = r->op };
			if (k == 0) {
				wr[i].remote_seg = SEG_REVOKED;
			} else if (k < 4) {
				wr[i].remote_seg = SEG_UNKNOWN;
			} else if (k < 7) {
				wr[i].remote_off = REG - len / 2; /* past the segment's end */
				if (len == 0)
					wr[i].remote_off = REG + 1;
			}
		}
		if (rnd(2))
			taken = kvl_mlx5_qp_post(&qp, wr, b);
		else {
			taken = kvl_mlx5_qp_enqueue(&qp, wr, b);
			kvl_mlx5_qp_flush(&qp);
		}
		for (unsigned i = 0; i < taken; i++) {
			struct req *r = &reqs[next + i];
			struct kvl_wr *w = &wr[i];

			r->epoch = epoch;
			r->bad = w->remote_seg == SEG_REVOKED;
			r->refused_status = w->remote_seg == SEG_UNKNOWN ? KVL_ERR_NO_SEGMENT
					    : w->remote_off != r->roff	 ? KVL_ERR_BOUNDS
									 : KVL_OK;
			if (r->bad && first_bad[epoch] == UINT64_MAX)
				first_bad[epoch] = next + i;
		}
		next += taken;
		mlx5_model_doorbell(&m);
		mlx5_model_run(&m, drain ? ~0u : rnd(mlx5_model_pending(&m) + 1));
		n = kvl_mlx5_qp_progress(&qp, drain ? 1024 : 1 + rnd(16));
		done = kvl_mlx5_qp_reap(&qp, wc, 32);
		for (unsigned i = 0; i < done; i++) {
			struct req *r = &reqs[reaped];
			int want;

			CHECK_INT(wc[i].wr_id, reaped); /* in posting order, each once */
			if (r->refused_status != KVL_OK)
				want = r->refused_status;
			else if (r->bad || first_bad[r->epoch] < reaped)
				want = KVL_ERR_ACCESS; /* the error, or its flush */
			else
				want = KVL_OK;
			CHECK_INT(wc[i].status, want);
			CHECK_INT(wc[i].bytes, want == KVL_OK ? r->length : 0);
			if (wc[i].status == KVL_OK) {
				struct kvl_mlx5_sge sge = { (uintptr_t)m.local.base + r->loff, LKEY,
							    r->length };

				apply(&s, &m,
				      r->op == KVL_OP_READ ? KVL_MLX5_OP_RDMA_READ
							   : KVL_MLX5_OP_RDMA_WRITE,
				      &sge, r->length != 0, (uintptr_t)m.remote.base + r->roff);
				ok++;
			} else if (wc[i].status == KVL_ERR_ACCESS) {
				access++;
			} else {
				refused++;
			}
			reaped++;
		}
		if (kvl_mlx5_qp_needs_restart(&qp)) {
			/* Every WQE given to the NIC has come back: the QP can be reset. */
			CHECK_INT(mlx5_model_pending(&m), 0);
			mlx5_model_reset_qp(&m);
			kvl_mlx5_qp_restarted(&qp);
			epoch++;
			recoveries++;
		}
		if (kvl_mlx5_qp_outstanding(&qp) == 0 && mlx5_model_pending(&m) == 0 &&
		    rnd(8) == 0) {
			CHECK(same(&m, &s));
			compares++;
		}
		stall = n == 0 && done == 0 && taken == 0 ? stall + 1 : 0;
		if (stall >= MAX_STALL) {
			fprintf(stderr, "qp stalled: %llu outstanding, model: %s\n",
				(unsigned long long)kvl_mlx5_qp_outstanding(&qp), m.fail);
			CHECK(0);
			break;
		}
	}
	CHECK(same(&m, &s));
	CHECK_STR(m.fail, "");
	CHECK_INT(reaped, total);
	CHECK_INT(ok + access + refused, total);
	CHECK_INT(qp.stats.completed, total);
	CHECK_INT(qp.stats.failed[KVL_ERR_ACCESS], access);
	CHECK_INT(qp.stats.recoveries, recoveries);
	CHECK(recoveries > 0);
	CHECK(refused > 0);
	CHECK(qp.cq.stats.syndrome[KVL_MLX5_SYND_REMOTE_ACCESS] == recoveries);
	CHECK_INT(qp.cq.stats.flushes, m.flush_cqes);
	CHECK_INT(qp.cq.stats.cqes, m.cqes);
	printf("qp mode %u every %u bf %u flush %s: %u requests: %llu ok, %llu access errors "
	       "(%llu recoveries, %llu flush CQEs), %llu refused; %llu CQEs for %llu WQEs; %u "
	       "full-memory compares\n",
	       mode, every, bf_size, flush_signaled_only ? "signaled-only" : "every WQE", total,
	       (unsigned long long)ok, (unsigned long long)access, (unsigned long long)recoveries,
	       (unsigned long long)m.flush_cqes, (unsigned long long)refused,
	       (unsigned long long)m.cqes, (unsigned long long)m.wqes, compares + 1);
	kvl_mlx5_qp_fini(&qp);
	regions_free(&m, &s);
	mlx5_model_free(&m);
	free(reqs);
	free(first_bad);
}

/* ---- C: a NIC that writes the wrong owner bit is not believed ---- */

static void wrong_owner(void)
{
	struct mlx5_model m;
	struct kvl_mlx5_sq sq;
	struct kvl_mlx5_cq cq;
	struct kvl_mlx5_sq_attr a;
	struct kvl_mlx5_cqe_info e[4];
	uint8_t buf[64];
	struct kvl_mlx5_sge sge;
	struct kvl_mlx5_wqe w = { .opcode = KVL_MLX5_OP_RDMA_WRITE, .rkey = RKEY, .sge = &sge };

	CHECK_INT(mlx5_model_init(&m, 4, 4, 0, 1), 0);
	m.local = (struct mlx5_model_mr){ buf, sizeof(buf), LKEY };
	m.remote = (struct mlx5_model_mr){ buf, sizeof(buf), RKEY };
	sge = (struct kvl_mlx5_sge){ (uintptr_t)buf, LKEY, 8 };
	w.raddr = (uintptr_t)buf + 32;
	w.nsge = 1;
	a = mlx5_model_sq_attr(&m, KVL_MLX5_SIG_ALWAYS, 0);
	CHECK_INT(kvl_mlx5_sq_init(&sq, &a), 0);
	CHECK_INT(kvl_mlx5_cq_init(&cq, m.cq, m.cqe_cnt, 64, m.cq_dbrec), 0);
	/* Six passes' worth of CQEs through a 4-entry CQ, then one with the wrong owner. */
	for (unsigned i = 0; i < 24; i++) {
		uint64_t wrid;

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

int main(int argc, char **argv)
{
	unsigned scale = argc > 1 ? (unsigned)atoi(argv[1]) : 1;

	(void)scale;
	sq_cq_random(KVL_MLX5_SIG_EVERY_N, 4, 0);
	sq_cq_random(KVL_MLX5_SIG_NONE, 0, 256);
	sq_cq_random(KVL_MLX5_SIG_ALWAYS, 0, 256);
	sq_cq_random(KVL_MLX5_SIG_EVERY_N, 64, 0);
	qp_random(KVL_MLX5_SIG_EVERY_N, 8, 256, false, 20000);
	qp_random(KVL_MLX5_SIG_NONE, 0, 0, true, 20000);
	qp_random(KVL_MLX5_SIG_ALWAYS, 0, 256, true, 10000);
	wrong_owner();
	return kvl_test_done("mlx5_model");
}
