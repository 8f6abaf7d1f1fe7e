/* SPDX-License-Identifier: BSD-3-Clause */
/* The one map from a completion's error (mlx5 CQE syndrome, ibv_wc_status) to kvl_status. */
#include <infiniband/verbs.h>

#include "mlx5.h"

/*
 * Both backends read a failed completion through this file: the verbs backend gets an
 * ibv_wc_status from the provider, the direct backend a PRM syndrome, which becomes the
 * ibv_wc_status rdma-core's mlx5 provider would have reported (mlx5_handle_error_cqe), so
 * the two can never disagree on what the user sees.
 */
int kvl_mlx5_syndrome_wc(uint8_t syndrome)
{
	switch (syndrome) {
	case KVL_MLX5_SYND_LOCAL_LENGTH:
		return IBV_WC_LOC_LEN_ERR;
	case KVL_MLX5_SYND_LOCAL_QP_OP:
		return IBV_WC_LOC_QP_OP_ERR;
	case KVL_MLX5_SYND_LOCAL_PROT:
		return IBV_WC_LOC_PROT_ERR;
	case KVL_MLX5_SYND_WR_FLUSH:
		return IBV_WC_WR_FLUSH_ERR;
	case KVL_MLX5_SYND_MW_BIND:
		return IBV_WC_MW_BIND_ERR;
	case KVL_MLX5_SYND_BAD_RESP:
		return IBV_WC_BAD_RESP_ERR;
	case KVL_MLX5_SYND_LOCAL_ACCESS:
		return IBV_WC_LOC_ACCESS_ERR;
	case KVL_MLX5_SYND_REMOTE_INVAL_REQ:
		return IBV_WC_REM_INV_REQ_ERR;
	case KVL_MLX5_SYND_REMOTE_ACCESS:
		return IBV_WC_REM_ACCESS_ERR;
	case KVL_MLX5_SYND_REMOTE_OP:
		return IBV_WC_REM_OP_ERR;
	case KVL_MLX5_SYND_TRANSPORT_RETRY:
		return IBV_WC_RETRY_EXC_ERR;
	case KVL_MLX5_SYND_RNR_RETRY:
		return IBV_WC_RNR_RETRY_EXC_ERR;
	case KVL_MLX5_SYND_REMOTE_ABORTED:
		return IBV_WC_REM_ABORT_ERR;
	default:
		return IBV_WC_GENERAL_ERR;
	}
}

int kvl_wc_status(int wc_status)
{
	switch (wc_status) {
	case IBV_WC_SUCCESS:
		return KVL_OK;
	case IBV_WC_REM_ACCESS_ERR: /* bad rkey, outside the MR, or an access it lacks */
	case IBV_WC_REM_INV_REQ_ERR:
		return KVL_ERR_ACCESS;
	case IBV_WC_RETRY_EXC_ERR: /* no ACK: the peer or the path is gone */
	case IBV_WC_RNR_RETRY_EXC_ERR:
	case IBV_WC_REM_ABORT_ERR: /* the responder aborted: its QP went down */
	case IBV_WC_WR_FLUSH_ERR:  /* the QP was in error already: its cause is elsewhere */
		return KVL_ERR_CONN_LOST;
	case IBV_WC_LOC_PROT_ERR: /* lkey/PD mismatch: a local range we believed registered */
	case IBV_WC_LOC_LEN_ERR:
	case IBV_WC_LOC_ACCESS_ERR: /* a READ into memory without LOCAL_WRITE */
		return KVL_ERR_LOCAL;
	default: /* LOC_QP_OP, BAD_RESP, REM_OP, MW_BIND, GENERAL, unknown: a malformed exchange */
		return KVL_ERR_PROTOCOL;
	}
}

int kvl_mlx5_syndrome_status(uint8_t syndrome)
{
	return kvl_wc_status(kvl_mlx5_syndrome_wc(syndrome));
}
