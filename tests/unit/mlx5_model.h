/* SPDX-License-Identifier: BSD-3-Clause */
/* A software model of an mlx5 RC send queue and its CQ, for the fast path to run against. */
#ifndef KVL_TEST_MLX5_MODEL_H
#define KVL_TEST_MLX5_MODEL_H

#include <stdbool.h>
#include <stdint.h>

#include "mlx5.h"

/*
 * It plays the NIC: reads the doorbell register page and the doorbell record the fast path
 * wrote, parses the WQEs it announces from the SQ buffer (wrap-around, ds, every field
 * checked against the PRM), moves bytes between a "local" and a "remote" region (lkey /
 * rkey and bounds checked), and writes CQE64s: one per signaled WQE with its wqe_counter
 * and the owner bit of the pass, an error CQE (remote access / local protection syndrome)
 * for a WQE that fails its checks, then flush CQEs while the QP is in error. Anything the
 * fast path does that a NIC would choke on is recorded in fail[] (first one kept).
 */

struct mlx5_model_mr {
	uint8_t *base;
	uint64_t len;
	uint32_t key;
};

struct mlx5_model {
	/* what setup would hand the fast path */
	uint8_t *sq;
	uint32_t sq_wqebbs, qpn;
	uint32_t *qp_dbrec; /* [0] receive, [1] send: big-endian */
	uint8_t *uar;	    /* doorbell register page: two BlueFlame buffers */
	uint32_t bf_size, uar_len;
	uint8_t *cq;
	uint32_t cqe_cnt;
	uint32_t *cq_dbrec; /* [0] consumer index (24 bits), [1] arm */

	/* NIC state */
	uint16_t announced; /* the record's counter at the last doorbell seen */
	uint16_t hw_ci;	    /* next WQEBB to execute */
	uint32_t cq_pi;	    /* CQEs written */
	unsigned half;	    /* BlueFlame buffer the next doorbell must use */
	/* The model whose doorbell register (uar, half) this one's SQ shares, as QPs of one
	 * context share UAR registers past the first 16; NULL: its own. */
	struct mlx5_model *reg_of;
	bool in_error;

	/* knobs */
	bool flush_signaled_only; /* flush CQEs only for signaled WQEs (else for every WQE) */
	uint8_t owner_flip;	  /* 1: write wrong owner bits (a broken NIC, for a test) */

	struct mlx5_model_mr local, remote;

	/* counters */
	uint64_t wqes, signaled, cqes, err_cqes, flush_cqes, doorbells, bf_copies, bytes;
	char fail[256];
};

/*
 * The signaling rules the tests drive an SQ with (the fixtures' "sq" lines name one): the
 * SQ asks a CQE exactly for the WQEs marked KVL_MLX5_F_SIGNAL, and its caller decides which
 * (verbs_ring.c: one in every signal_every and each batch's last). NONE: only those the test
 * marks; EVERY_N: also one in every @every; ALWAYS: every WQE. A signaled WQE starts the
 * count again, and so does a kvl_mlx5_sq_signal_last() that changed one (mlx5_sig_rule_reset).
 */
enum { MLX5_SIG_NONE = 0, MLX5_SIG_EVERY_N = 1, MLX5_SIG_ALWAYS = 2 };

struct mlx5_sig_rule {
	unsigned mode, every, since;
};

static inline uint8_t mlx5_sig_rule_flags(struct mlx5_sig_rule *r, uint8_t flags)
{
	bool sig = (flags & KVL_MLX5_F_SIGNAL) != 0;

	if (r->mode == MLX5_SIG_ALWAYS)
		sig = true;
	else if (r->mode == MLX5_SIG_EVERY_N && ++r->since >= r->every)
		sig = true;
	if (sig)
		r->since = 0;
	return sig ? (uint8_t)(flags | KVL_MLX5_F_SIGNAL) : flags;
}

static inline void mlx5_sig_rule_reset(struct mlx5_sig_rule *r, int changed)
{
	if (changed)
		r->since = 0;
}

/* SQ of @sq_wqebbs, CQ of @cqe_cnt (all INVALID), BlueFlame @bf_size (0: 8-byte only). */
int mlx5_model_init(struct mlx5_model *m, unsigned sq_wqebbs, unsigned cqe_cnt, unsigned bf_size,
		    uint32_t qpn);
void mlx5_model_free(struct mlx5_model *m);

/*
 * Give @m's SQ the doorbell register of @owner's (same BlueFlame size): from then on a ring
 * of either must use the buffer after the one the register's last ring used, whichever SQ
 * rang it; two rings in one buffer in a row are recorded in fail[] ("torn"). @owner must
 * outlive @m. 0, or -EINVAL when the sizes differ.
 */
int mlx5_model_share_register(struct mlx5_model *m, struct mlx5_model *owner);

/* The SQ as setup would describe it. */
struct kvl_mlx5_sq_attr mlx5_model_sq_attr(struct mlx5_model *m);

/* Look at the doorbell register page: call after each ring (a post or flush). Returns the
 * doorbells seen (0 or 1). */
unsigned mlx5_model_doorbell(struct mlx5_model *m);

/* Execute up to @max announced WQEs. Returns how many. */
unsigned mlx5_model_run(struct mlx5_model *m, unsigned max);

/* WQEs announced and not yet executed. */
static inline unsigned mlx5_model_pending(const struct mlx5_model *m)
{
	return (uint16_t)(m->announced - m->hw_ci);
}

/* The QP went RESET -> RTS: counters back to 0, out of the error state. */
void mlx5_model_reset_qp(struct mlx5_model *m);

#endif /* KVL_TEST_MLX5_MODEL_H */
