/* SPDX-License-Identifier: BSD-3-Clause */
/* mlx5 doorbells: the only stores to the UAR, and the barriers around them. */
#include <endian.h>
#include <stdint.h>
#include <string.h>

#include "mlx5.h"
#include "mlx5_db.h"

/* 64-bit MMIO stores: one store each, never split or merged by the compiler. */
static inline void mmio_write64(void *dst, uint64_t v)
{
	*(volatile uint64_t *)dst = v;
}

/* A BlueFlame copy: the WQE itself, WQEBB by WQEBB, following it past the SQ's end. */
static void bf_copy(struct kvl_mlx5_sq *sq, uint8_t *dst, const uint8_t *src, unsigned nbb)
{
	for (unsigned b = 0; b < nbb; b++) {
		for (unsigned i = 0; i < KVL_MLX5_WQEBB / 8; i++) {
			uint64_t v;

			memcpy(&v, src + 8 * i, sizeof(v));
			mmio_write64(dst + 8 * i, v);
		}
		dst += KVL_MLX5_WQEBB;
		src += KVL_MLX5_WQEBB;
		if (src == sq->sq_end)
			src = sq->sq_addr;
	}
}

void kvl_mlx5_sq_ring(struct kvl_mlx5_sq *sq)
{
	struct kvl_mlx5_bf *bf = sq->bf;
	uint8_t *db;

	if (sq->pending == 0)
		return;
	/*
	 * PRM "Posting a Work Request to Work Queue":
	 * 1. Write the WQE to the WQE buffer sequentially to previously-posted WQEs (done by
	 *    kvl_mlx5_sq_post). Those stores must be visible before the record announces them.
	 */
	kvl_mlx5_dma_wmb();
	/* 2. Update the Doorbell Record associated with that queue by writing the
	 *    sq_wqebb_counter (big-endian, 16 significant bits). */
	sq->dbrec[KVL_MLX5_SND_DBR] = htobe32(sq->sq_pi);
	/* The NIC may act on the doorbell at once: the record must be out first. */
	kvl_mlx5_wc_start();
	/*
	 * 3. Ring the DoorBell by writing to the DoorBell register in the UAR: the first 8 bytes
	 *    of the newest WQE's control segment (opcode, wqe_index, qpn, ds) name the queue and
	 *    how far it goes. A lone WQE that fits a BlueFlame buffer is written whole instead,
	 *    so the NIC need not fetch it from host memory.
	 */
	db = bf->reg + bf->offset;
	if (sq->pending == 1 && bf->size != 0 &&
	    (unsigned)sq->last_nbb * KVL_MLX5_WQEBB <= bf->size) {
		bf_copy(sq, db, (const uint8_t *)sq->last_ctrl, sq->last_nbb);
		sq->stats.bf_copies++;
	} else {
		uint64_t v;

		memcpy(&v, sq->last_ctrl, sizeof(v));
		mmio_write64(db, v);
	}
	/* Out of this core's WC buffer before the next doorbell can be issued after it. */
	kvl_mlx5_wc_flush();
	/* Two BlueFlame buffers per register, used in turn by every SQ on it (rdma-core:
	 * bf->offset ^= buf_size), so a doorbell never lands in a buffer the NIC may still be
	 * reading, whichever QP rang last. */
	bf->offset ^= bf->size;
	sq->pending = 0;
	sq->stats.doorbells++;
}

void kvl_mlx5_cq_set_ci(struct kvl_mlx5_cq *cq)
{
	/* The CQEs up to cq_ci have been read: only then may the NIC write over them. */
	kvl_mlx5_dma_mb();
	cq->dbrec[KVL_MLX5_CQ_SET_CI] = htobe32(cq->cq_ci & 0xffffff);
}

void kvl_mlx5_cq_arm(struct kvl_mlx5_cq *cq)
{
	uint32_t arm = (cq->arm_sn & 3) << 28 | (cq->cq_ci & 0xffffff);
	uint32_t w[2] = { htobe32(arm), htobe32(cq->cqn) };
	uint64_t db;

	/* rdma-core's mlx5_arm_cq: the record first, then the register, both with this word. */
	cq->dbrec[KVL_MLX5_CQ_ARM_DB] = w[0];
	kvl_mlx5_wc_start();
	/* 8 bytes in memory order: the arm word, then the CQ number. */
	memcpy(&db, w, sizeof(db));
	mmio_write64(cq->uar + KVL_MLX5_CQ_DOORBELL, db);
	kvl_mlx5_wc_flush();
	cq->stats.arms++;
}
