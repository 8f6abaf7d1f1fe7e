/* SPDX-License-Identifier: BSD-3-Clause */
/* mlx5 completion queue: direct polling by owner bit, CQE64 decoding, error syndromes. */
#include <endian.h>
#include <errno.h>
#include <string.h>

#include "mlx5.h"
#include "mlx5_db.h"

int kvl_mlx5_cq_init(struct kvl_mlx5_cq *cq, void *buf, uint32_t cqe_cnt, uint32_t cqe_size,
		     volatile uint32_t *dbrec)
{
	memset(cq, 0, sizeof(*cq));
	/* 128-byte CQEs put the 64 bytes read here in their second half: not handled, and
	 * setup never asks for them. */
	if (cqe_size != KVL_MLX5_CQE_SIZE)
		return -ENOTSUP;
	if (buf == NULL || dbrec == NULL || cqe_cnt < 2 || (cqe_cnt & (cqe_cnt - 1)) != 0 ||
	    cqe_cnt > (1u << 23))
		return -EINVAL;
	cq->cq_addr = buf;
	cq->cqe_cnt = cqe_cnt;
	cq->dbrec = dbrec;
	return 0;
}

static inline __attribute__((always_inline)) void cqe_decode(const void *p,
							     struct kvl_mlx5_cqe_info *o)
{
	const struct kvl_mlx5_cqe64 *c = p;
	uint32_t sop = be32toh(c->sop_qpn);

	o->opcode = c->op_own >> 4;
	o->wqe_counter = be16toh(c->wqe_counter);
	o->qpn = sop & 0xffffff;
	o->sq_opcode = (uint8_t)(sop >> 24);
	o->byte_cnt = be32toh(c->byte_cnt);
	o->imm = 0;
	o->syndrome = 0;
	o->vendor_synd = 0;
	o->flush = 0;
	switch (o->opcode) {
	case KVL_MLX5_CQE_REQ:
		o->status = KVL_OK;
		break;
	case KVL_MLX5_CQE_RESP_WR_IMM:
	case KVL_MLX5_CQE_RESP_SEND_IMM:
		o->imm = be32toh(c->imm);
		o->sq_opcode = 0; /* responder CQEs carry no send opcode there */
		o->status = KVL_OK;
		break;
	case KVL_MLX5_CQE_RESP_SEND:
		o->sq_opcode = 0;
		o->status = KVL_OK;
		break;
	case KVL_MLX5_CQE_REQ_ERR:
	case KVL_MLX5_CQE_RESP_ERR:
		o->syndrome = c->syndrome;
		o->vendor_synd = c->vendor_synd;
		o->flush = c->syndrome == KVL_MLX5_SYND_WR_FLUSH;
		o->status = (uint8_t)kvl_mlx5_syndrome_status(c->syndrome);
		o->byte_cnt = 0;
		break;
	default: /* resize, signature error, or anything newer */
		o->status = KVL_ERR_PROTOCOL;
		break;
	}
	/* Bits 3:2 of op_own: on a requester or responder CQE, data scattered into the CQE
	 * (MLX5_INLINE_SCATTER_32/64: a small READ's bytes, which then never reach the buffer),
	 * else a compressed (mini-CQE) block. Setup disables scatter to CQE and never enables
	 * compression: reading either as a plain CQE would lose data or invent a wqe_counter. */
	if (((c->op_own >> 2) & 0x3) != 0)
		o->status = KVL_ERR_PROTOCOL;
}

void kvl_mlx5_cqe_decode(const void *p, struct kvl_mlx5_cqe_info *o)
{
	cqe_decode(p, o);
}

/* kvl_mlx5_cq_take(), inlined into kvl_mlx5_cq_poll's loop */
static inline __attribute__((always_inline)) void cq_take(struct kvl_mlx5_cq *cq,
							  struct kvl_mlx5_cqe_info *o)
{
	cqe_decode(cq->cq_addr + (size_t)(cq->cq_ci & (cq->cqe_cnt - 1)) * KVL_MLX5_CQE_SIZE, o);
	cq->cq_ci++;
	cq->stats.cqes++;
	if (o->syndrome != 0 || o->status != KVL_OK) {
		cq->stats.errors++;
		cq->stats.flushes += o->flush;
		if (o->opcode == KVL_MLX5_CQE_REQ_ERR || o->opcode == KVL_MLX5_CQE_RESP_ERR)
			cq->stats.syndrome[o->syndrome < KVL_MLX5_SYND_SLOTS
						   ? o->syndrome
						   : KVL_MLX5_SYND_SLOTS - 1]++;
		else
			cq->stats.unknown++;
	}
}

void kvl_mlx5_cq_take(struct kvl_mlx5_cq *cq, struct kvl_mlx5_cqe_info *o)
{
	cq_take(cq, o);
}

unsigned kvl_mlx5_cq_poll(struct kvl_mlx5_cq *cq, struct kvl_mlx5_cqe_info *out, unsigned max)
{
	unsigned n = 0;

	cq->stats.polls++;
	/* The rest of a CQE was written before its owner byte: peek orders the reads. */
	while (n < max && kvl_mlx5_cq_peek(cq) != NULL)
		cq_take(cq, &out[n++]);
	if (n != 0)
		kvl_mlx5_cq_set_ci(cq);
	return n;
}
