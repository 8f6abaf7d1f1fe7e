/* SPDX-License-Identifier: BSD-3-Clause */
/* The mlx5 model's NIC side: doorbells, WQE parsing, RDMA between two regions, CQEs. */
#include <endian.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mlx5_model.h"
#include "nic_bytes.h"

/* Independent of the fast path's structs: byte offsets from the PRM. */
#define OP_WRITE     0x08
#define OP_WRITE_IMM 0x09
#define OP_READ	     0x10

__attribute__((format(printf, 2, 3))) static void bad(struct mlx5_model *m, const char *fmt, ...)
{
	va_list ap;

	if (m->fail[0] != '\0')
		return;
	va_start(ap, fmt);
	vsnprintf(m->fail, sizeof(m->fail), fmt, ap);
	va_end(ap);
}

static void *zalloc64(size_t n)
{
	void *p = aligned_alloc(64, (n + 63) & ~(size_t)63);

	if (p != NULL)
		memset(p, 0, n);
	return p;
}

int mlx5_model_init(struct mlx5_model *m, unsigned sq_wqebbs, unsigned cqe_cnt, unsigned bf_size,
		    uint32_t qpn)
{
	memset(m, 0, sizeof(*m));
	m->sq_wqebbs = sq_wqebbs;
	m->cqe_cnt = cqe_cnt;
	m->bf_size = bf_size;
	m->qpn = qpn;
	m->uar_len = bf_size ? 2 * bf_size : 64;
	m->sq = zalloc64((size_t)sq_wqebbs * 64);
	m->cq = zalloc64((size_t)cqe_cnt * 64);
	m->uar = zalloc64(m->uar_len);
	m->qp_dbrec = zalloc64(8);
	m->cq_dbrec = zalloc64(8);
	if (!m->sq || !m->cq || !m->uar || !m->qp_dbrec || !m->cq_dbrec) {
		mlx5_model_free(m);
		return -ENOMEM;
	}
	/* As the driver leaves a new CQ: every entry INVALID, owner 0. */
	for (unsigned i = 0; i < cqe_cnt; i++)
		m->cq[i * 64 + 63] = 0xf0;
	return 0;
}

void mlx5_model_free(struct mlx5_model *m)
{
	free(m->sq);
	free(m->cq);
	if (m->reg_of == NULL)
		free(m->uar);
	free(m->qp_dbrec);
	free(m->cq_dbrec);
	m->sq = m->cq = m->uar = NULL;
	m->qp_dbrec = m->cq_dbrec = NULL;
}

int mlx5_model_share_register(struct mlx5_model *m, struct mlx5_model *owner)
{
	if (owner == m || owner->reg_of != NULL || owner->bf_size != m->bf_size)
		return -EINVAL;
	if (m->reg_of == NULL)
		free(m->uar);
	m->uar = owner->uar;
	m->reg_of = owner;
	return 0;
}

struct kvl_mlx5_sq_attr mlx5_model_sq_attr(struct mlx5_model *m)
{
	return (struct kvl_mlx5_sq_attr){ .buf = m->sq,
					  .wqe_cnt = m->sq_wqebbs,
					  .qpn = m->qpn,
					  .dbrec = m->qp_dbrec,
					  .bf_reg = m->uar,
					  .bf_size = m->bf_size };
}

void mlx5_model_reset_qp(struct mlx5_model *m)
{
	m->hw_ci = 0;
	m->announced = 0;
	m->in_error = false;
}

static uint8_t *bb_at(struct mlx5_model *m, uint16_t counter)
{
	return m->sq + (size_t)(counter & (m->sq_wqebbs - 1)) * 64;
}

static bool all_zero(const uint8_t *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (p[i] != 0)
			return false;
	return true;
}

unsigned mlx5_model_doorbell(struct mlx5_model *m)
{
	uint16_t dbr = (uint16_t)be32toh(m->qp_dbrec[1]);
	/* The register's state, shared by every SQ on it. */
	unsigned *half = m->reg_of != NULL ? &m->reg_of->half : &m->half;
	unsigned off = m->bf_size ? *half * m->bf_size : 0;
	unsigned other = m->bf_size ? (*half ^ 1) * m->bf_size : 0;
	uint8_t *db = m->uar + off;
	uint16_t pi = m->announced, last = 0;
	unsigned nbb = 0, n = 0, written;

	if (m->bf_size && !all_zero(m->uar + other, m->bf_size))
		bad(m,
		    "doorbell written to the BlueFlame buffer of the register's previous ring%s "
		    "(torn: the NIC may still be reading it)",
		    m->reg_of != NULL ? ", rung by another SQ" : "");
	if (dbr == m->announced) {
		if (!all_zero(m->uar, m->uar_len))
			bad(m, "doorbell rung with no new WQE in the record");
		return 0;
	}
	if ((uint16_t)(dbr - m->hw_ci) > m->sq_wqebbs)
		bad(m, "record %u runs %u WQEBBs past the NIC at %u (SQ %u)", dbr,
		    (uint16_t)(dbr - m->hw_ci), m->hw_ci, m->sq_wqebbs);
	/* Walk the new WQEs to find the last: its ctrl is what the doorbell must carry. */
	while (pi != dbr && n <= m->sq_wqebbs) {
		unsigned ds = rd32(bb_at(m, pi) + 4) & 0x3f;

		last = pi;
		nbb = (ds + 3) / 4;
		if (nbb == 0)
			break;
		pi = (uint16_t)(pi + nbb);
		n++;
	}
	if (pi != dbr)
		bad(m, "record %u does not end on a WQE boundary (walk ended at %u)", dbr, pi);
	written = 0;
	for (unsigned i = 8; i < (m->bf_size ? m->bf_size : 8); i++)
		if (db[i] != 0)
			written = i + 1;
	if (all_zero(db, 8)) {
		bad(m, "record moved to %u but no doorbell in buffer %u", dbr, *half);
	} else if (memcmp(db, bb_at(m, last), 8) != 0) {
		bad(m, "doorbell is not the last WQE's ctrl (counter %u)", last);
	} else if (written != 0) {
		/* A BlueFlame copy: the whole lone WQE, following the SQ's wrap. */
		if (n != 1 || nbb * 64 > m->bf_size)
			bad(m, "BlueFlame copy of a batch of %u WQEs / %u WQEBBs", n, nbb);
		for (unsigned b = 0; b < nbb; b++)
			if (memcmp(db + 64 * b, bb_at(m, (uint16_t)(last + b)), 64) != 0)
				bad(m, "BlueFlame WQEBB %u differs from the SQ", b);
		m->bf_copies++;
	}
	memset(db, 0, m->bf_size ? m->bf_size : 8);
	if (m->bf_size)
		*half ^= 1;
	m->announced = dbr;
	m->doorbells++;
	return 1;
}

static void put_cqe(struct mlx5_model *m, uint8_t opcode, uint16_t counter, uint8_t sq_opcode,
		    uint32_t byte_cnt, uint8_t syndrome)
{
	uint32_t ci = be32toh(m->cq_dbrec[0]) & 0xffffff;
	uint8_t *c = m->cq + (size_t)(m->cq_pi & (m->cqe_cnt - 1)) * 64;
	uint8_t owner = (uint8_t)(((m->cq_pi / m->cqe_cnt) & 1) ^ m->owner_flip);

	if (((m->cq_pi - ci) & 0xffffff) >= m->cqe_cnt) {
		bad(m, "CQ overrun: %u CQEs written, consumer index %u, CQ of %u", m->cq_pi, ci,
		    m->cqe_cnt);
		return;
	}
	memset(c, 0, 63);
	wr32(c + 44, byte_cnt);
	if (syndrome) {
		c[54] = 0x42; /* vendor syndrome: any value */
		c[55] = syndrome;
	}
	wr32(c + 56, (uint32_t)sq_opcode << 24 | m->qpn);
	c[60] = (uint8_t)(counter >> 8);
	c[61] = (uint8_t)counter;
	/* The owner byte last: the CQE is the consumer's from then on. */
	__atomic_store_n(&c[63], (uint8_t)(opcode << 4 | owner), __ATOMIC_RELEASE);
	m->cq_pi++;
	m->cqes++;
}

static bool in_mr(const struct mlx5_model_mr *r, uint32_t key, uint64_t addr, uint64_t len)
{
	uint64_t base = (uintptr_t)r->base;

	return key == r->key && addr >= base && len <= r->len && addr - base <= r->len - len;
}

/* One WQE at hw_ci. Returns its WQEBBs, 0 when it cannot be parsed. */
static unsigned exec_one(struct mlx5_model *m)
{
	uint8_t *c = bb_at(m, m->hw_ci);
	uint32_t w0 = rd32(c), w1 = rd32(c + 4), imm = rd32(c + 12);
	uint8_t opcode = (uint8_t)w0, fm_ce_se = c[11];
	unsigned ds = w1 & 0x3f, nbb = (ds + 3) / 4, nsge;
	uint64_t raddr = rd64(c + 16), total = 0;
	uint32_t rkey = rd32(c + 24);
	struct sge sg[64];
	bool sig = (fm_ce_se & 0x0c) == 0x08;
	uint8_t synd = 0;
	const uint8_t *p = c + 32;

	if ((w0 >> 24) != 0 || (uint16_t)(w0 >> 8) != m->hw_ci)
		bad(m, "WQE at %u: opmod %u, wqe_index %u", m->hw_ci, w0 >> 24,
		    (uint16_t)(w0 >> 8));
	if ((w1 >> 8) != m->qpn)
		bad(m, "WQE at %u: qpn 0x%x, expected 0x%x", m->hw_ci, w1 >> 8, m->qpn);
	if (opcode != OP_WRITE && opcode != OP_WRITE_IMM && opcode != OP_READ)
		bad(m, "WQE at %u: opcode 0x%x", m->hw_ci, opcode);
	if (ds < 2 || (w1 & 0xc0) != 0 || nbb > mlx5_model_pending(m)) {
		bad(m, "WQE at %u: ds %u (%u WQEBBs announced)", m->hw_ci, ds,
		    mlx5_model_pending(m));
		return 0;
	}
	if (c[8] != 0 || c[9] != 0 || c[10] != 0 || (fm_ce_se & ~0x0c) != 0 ||
	    (fm_ce_se & 0x0c) == 0x04)
		bad(m, "WQE at %u: signature/reserved/fm_ce_se 0x%02x%02x%02x%02x", m->hw_ci, c[8],
		    c[9], c[10], fm_ce_se);
	if (opcode != OP_WRITE_IMM && imm != 0)
		bad(m, "WQE at %u: immediate 0x%x on opcode 0x%x", m->hw_ci, imm, opcode);
	if (rd32(c + 28) != 0)
		bad(m, "WQE at %u: raddr reserved word set", m->hw_ci);
	nsge = ds - 2;
	for (unsigned i = 0; i < nsge; i++) {
		if (p == m->sq + (size_t)m->sq_wqebbs * 64)
			p = m->sq;
		sg[i].len = rd32(p);
		sg[i].lkey = rd32(p + 4);
		sg[i].addr = rd64(p + 8);
		if (sg[i].len == 0 || (sg[i].len & 0x80000000u))
			bad(m,
			    "WQE at %u: SGE %u byte_count 0x%x (0 reads as 2 GiB; bit 31 is "
			    "inline)",
			    m->hw_ci, i, sg[i].len);
		total += sg[i].len;
		p += 16;
	}

	m->wqes++;
	if (m->in_error) {
		if (sig || !m->flush_signaled_only) {
			put_cqe(m, KVL_MLX5_CQE_REQ_ERR, m->hw_ci, opcode, 0,
				KVL_MLX5_SYND_WR_FLUSH);
			m->flush_cqes++;
		}
		return nbb;
	}
	for (unsigned i = 0; i < nsge && synd == 0; i++)
		if (!in_mr(&m->local, sg[i].lkey, sg[i].addr, sg[i].len))
			synd = KVL_MLX5_SYND_LOCAL_PROT;
	if (synd == 0 && total != 0 && !in_mr(&m->remote, rkey, raddr, total))
		synd = KVL_MLX5_SYND_REMOTE_ACCESS;
	if (synd == 0 && total == 0 && rkey != m->remote.key)
		synd = KVL_MLX5_SYND_REMOTE_ACCESS;
	if (synd != 0) {
		/* An error completes whatever the signaling, and takes the QP to error. */
		put_cqe(m, KVL_MLX5_CQE_REQ_ERR, m->hw_ci, opcode, 0, synd);
		m->err_cqes++;
		m->in_error = true;
		return nbb;
	}
	nic_move(opcode == OP_READ, raddr, sg, nsge);
	m->bytes += total;
	if (sig) {
		put_cqe(m, KVL_MLX5_CQE_REQ, m->hw_ci, opcode, (uint32_t)total, 0);
		m->signaled++;
	}
	return nbb;
}

unsigned mlx5_model_run(struct mlx5_model *m, unsigned max)
{
	unsigned n = 0;

	while (n < max && m->hw_ci != m->announced) {
		unsigned nbb = exec_one(m);

		if (nbb == 0)
			break;
		m->hw_ci = (uint16_t)(m->hw_ci + nbb);
		n++;
	}
	return n;
}
