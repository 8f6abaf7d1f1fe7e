/* SPDX-License-Identifier: BSD-3-Clause */
/* mlx5 setup: the only code creating verbs objects and reading them through mlx5dv. */
#include <errno.h>
#include <infiniband/mlx5dv.h>
#include <infiniband/verbs.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mlx5.h"

/* Our layouts are the PRM's; rdma-core's header describes the same bytes. */
_Static_assert(sizeof(struct mlx5_wqe_ctrl_seg) == sizeof(struct kvl_mlx5_ctrl_seg), "ctrl");
_Static_assert(sizeof(struct mlx5_cqe64) == sizeof(struct kvl_mlx5_cqe64), "cqe64");
_Static_assert(offsetof(struct mlx5_cqe64, wqe_counter) ==
		       offsetof(struct kvl_mlx5_cqe64, wqe_counter),
	       "cqe64 wqe_counter");
_Static_assert(MLX5_SND_DBR == KVL_MLX5_SND_DBR && MLX5_SEND_WQE_BB == KVL_MLX5_WQEBB, "dbr");

__attribute__((format(printf, 3, 4))) static int fail(char *err, size_t errlen, const char *fmt,
						      ...)
{
	va_list ap;

	if (err != NULL && errlen != 0) {
		va_start(ap, fmt);
		vsnprintf(err, errlen, fmt, ap);
		va_end(ap);
	}
	return -ENOTSUP;
}

static bool pow2(uint32_t v)
{
	return v != 0 && (v & (v - 1)) == 0;
}

int kvl_mlx5_env_check(bool *shut_up_bf, char *err, size_t errlen)
{
	const char *bf = getenv("MLX5_SHUT_UP_BF");

	/* rdma-core's get_shut_up_bf() and qp_sig_enabled(): the same tests. */
	*shut_up_bf = bf != NULL && strcmp(bf, "0") != 0;
	if (getenv("MLX5_QP_SIGNATURE") != NULL)
		return fail(err, errlen,
			    "mlx5: MLX5_QP_SIGNATURE is set: rdma-core then makes QPs that expect "
			    "a signature in every WQE, which the direct backend does not write "
			    "(unset it for transport mlx5)");
	return 0;
}

int kvl_mlx5_hw_from_verbs(struct ibv_qp *qp, struct ibv_cq *cq, struct kvl_mlx5_hw *hw, char *err,
			   size_t errlen)
{
	struct mlx5dv_qp dq;
	struct mlx5dv_cq dc;
	struct mlx5dv_obj obj;
	int rc;

	memset(hw, 0, sizeof(*hw));
	memset(&dq, 0, sizeof(dq));
	memset(&dc, 0, sizeof(dc));
	if (qp == NULL || cq == NULL)
		return fail(err, errlen, "mlx5: no QP or CQ to read");
	if (!mlx5dv_is_supported(qp->context->device))
		return fail(err, errlen, "mlx5: %s is not an mlx5 device: use the verbs transport",
			    ibv_get_device_name(qp->context->device));
	obj.qp.in = qp;
	obj.qp.out = &dq;
	obj.cq.in = cq;
	obj.cq.out = &dc;
	rc = mlx5dv_init_obj(&obj, MLX5DV_OBJ_QP | MLX5DV_OBJ_CQ);
	if (rc != 0)
		return fail(err, errlen, "mlx5: mlx5dv_init_obj failed: %s", strerror(rc));

	/* Check everything the fast path relies on; refuse the rest rather than guess. */
	if (dq.sq.stride != KVL_MLX5_WQEBB)
		return fail(err, errlen, "mlx5: SQ stride %u, expected %u", dq.sq.stride,
			    KVL_MLX5_WQEBB);
	if (!pow2(dq.sq.wqe_cnt) || dq.sq.wqe_cnt < 2 || dq.sq.wqe_cnt > 32768)
		return fail(err, errlen, "mlx5: SQ of %u WQEBBs: not a power of two in 2..32768",
			    dq.sq.wqe_cnt);
	if (dq.sq.buf == NULL || dq.dbrec == NULL || dq.bf.reg == NULL)
		return fail(err, errlen, "mlx5: SQ buffer, doorbell record or UAR missing");
	if (((uintptr_t)dq.sq.buf & (KVL_MLX5_WQEBB - 1)) != 0)
		return fail(err, errlen, "mlx5: SQ buffer %p not 64-byte aligned", dq.sq.buf);
	if (dq.bf.size != 0 && (!pow2(dq.bf.size) || dq.bf.size < KVL_MLX5_WQEBB))
		return fail(err, errlen, "mlx5: BlueFlame size %u: not 0 or a power of two >= 64",
			    dq.bf.size);
	if (dc.cqe_size != KVL_MLX5_CQE_SIZE)
		return fail(err, errlen,
			    "mlx5: CQE size %u: only 64-byte CQEs are handled (unset "
			    "MLX5_CQE_SIZE=128)",
			    dc.cqe_size);
	if (!pow2(dc.cqe_cnt) || dc.cqe_cnt < dq.sq.wqe_cnt || dc.buf == NULL || dc.dbrec == NULL)
		return fail(err, errlen,
			    "mlx5: CQ of %u CQEs: not a power of two holding the SQ's %u WQEBBs",
			    dc.cqe_cnt, dq.sq.wqe_cnt);
	if (qp->qp_num > 0xffffff)
		return fail(err, errlen, "mlx5: QP number 0x%x over 24 bits", qp->qp_num);

	hw->sq.buf = dq.sq.buf;
	hw->sq.wqe_cnt = dq.sq.wqe_cnt;
	hw->sq.qpn = qp->qp_num;
	hw->sq.dbrec = (volatile uint32_t *)dq.dbrec;
	hw->sq.bf_reg = dq.bf.reg;
	hw->sq.bf_size = dq.bf.size;
	hw->cq_buf = dc.buf;
	hw->cqe_cnt = dc.cqe_cnt;
	hw->cqe_size = dc.cqe_size;
	hw->cq_dbrec = (volatile uint32_t *)dc.dbrec;
	hw->cq_uar = dc.cq_uar;
	hw->cqn = dc.cqn;
	hw->ibqp = qp;
	hw->ibcq = cq;
	return 0;
}
