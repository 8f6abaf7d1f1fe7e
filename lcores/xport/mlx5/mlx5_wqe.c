/* SPDX-License-Identifier: BSD-3-Clause */
/* mlx5 send queue: RDMA WRITE / READ / WRITE_WITH_IMM WQEs encoded into plain memory. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "mlx5.h"

int kvl_mlx5_sq_init(struct kvl_mlx5_sq *sq, const struct kvl_mlx5_sq_attr *a)
{
	memset(sq, 0, sizeof(*sq));
	/* 2^16 WQEBBs would make a full SQ indistinguishable from an empty one in 16 bits. */
	if (a->buf == NULL || a->dbrec == NULL || a->bf_reg == NULL || a->wqe_cnt < 2 ||
	    a->wqe_cnt > 32768 || (a->wqe_cnt & (a->wqe_cnt - 1)) != 0 || a->qpn > 0xffffff ||
	    ((uintptr_t)a->buf & (KVL_MLX5_WQEBB - 1)) != 0 ||
	    (a->bf_size != 0 && (a->bf_size < KVL_MLX5_WQEBB || (a->bf_size & (a->bf_size - 1)))) ||
	    (a->bf != NULL && (a->bf->reg != a->bf_reg || a->bf->size != a->bf_size ||
			       (a->bf->offset != 0 && a->bf->offset != a->bf_size))))
		return -EINVAL;
	sq->wrid = calloc(a->wqe_cnt, sizeof(*sq->wrid));
	sq->wqe_end = calloc(a->wqe_cnt, sizeof(*sq->wqe_end));
	if (sq->wrid == NULL || sq->wqe_end == NULL) {
		kvl_mlx5_sq_fini(sq);
		return -ENOMEM;
	}
	sq->sq_addr = a->buf;
	sq->sq_end = sq->sq_addr + (size_t)a->wqe_cnt * KVL_MLX5_WQEBB;
	sq->wqe_cnt = a->wqe_cnt;
	sq->qpn = a->qpn;
	sq->dbrec = a->dbrec;
	sq->bf_own = (struct kvl_mlx5_bf){ .reg = a->bf_reg, .size = a->bf_size };
	sq->bf = a->bf != NULL ? a->bf : &sq->bf_own;
	return 0;
}

void kvl_mlx5_sq_fini(struct kvl_mlx5_sq *sq)
{
	free(sq->wrid);
	free(sq->wqe_end);
	sq->wrid = NULL;
	sq->wqe_end = NULL;
}

void kvl_mlx5_sq_reset(struct kvl_mlx5_sq *sq)
{
	/* What rdma-core does on a move to RESET: counters and the record back to 0. */
	sq->sq_pi = 0;
	sq->sq_ci = 0;
	sq->pending = 0;
	sq->last_ctrl = NULL;
	sq->dbrec[KVL_MLX5_SND_DBR] = 0;
}

int kvl_mlx5_sq_post(struct kvl_mlx5_sq *sq, const struct kvl_mlx5_wqe *w)
{
	if (w->nsge > KVL_MLX5_MAX_SGE ||
	    (w->opcode != KVL_MLX5_OP_RDMA_WRITE && w->opcode != KVL_MLX5_OP_RDMA_READ &&
	     w->opcode != KVL_MLX5_OP_RDMA_WRITE_IMM))
		return -EINVAL;
	for (unsigned i = 0; i < w->nsge; i++)
		if (w->sge[i].len == 0)
			return -EINVAL;
	return kvl_mlx5_sq_write(sq, w);
}

int kvl_mlx5_sq_signal_last(struct kvl_mlx5_sq *sq)
{
	struct kvl_mlx5_ctrl_seg *c = sq->last_ctrl;

	if (sq->pending == 0 || c == NULL || (c->fm_ce_se & KVL_MLX5_CTRL_CE_MASK) != 0)
		return 0;
	c->fm_ce_se = (uint8_t)((c->fm_ce_se & ~KVL_MLX5_CTRL_CE_MASK) | KVL_MLX5_CTRL_CQ_UPDATE);
	sq->stats.signaled++;
	return 1;
}
