/* SPDX-License-Identifier: BSD-3-Clause */
/* mlx5 direct fast path: WQE encoders, doorbell, CQ polling and setup. */
#ifndef KVL_LCORES_MLX5_H
#define KVL_LCORES_MLX5_H

#include <endian.h>
#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "kvlane/kvlane.h" /* enum kvl_status */
#include "mlx5_db.h"	   /* the read barrier of the inline CQ peek */

/*
 * Three layers, each usable alone (see DESIGN.md, "the mlx5 fast path"):
 *  - SQ encoders and CQ decoding over plain memory: no ibv objects, no barriers. The queues
 *    are plain pointers and integers, so a test can hand them heap memory.
 *  - the doorbell (mlx5_db.c): the only code with barriers and MMIO stores. Its register is
 *    a pointer too, so a test can point it at a heap page.
 *  - setup (mlx5_setup.c): the only code calling mlx5dv_init_obj; it checks
 *    what the device gives before this layer trusts it.
 * lcores/xport/verbs_mlx5.c drives them as the verbs transport's direct backend: its request ring,
 * signaling, error recovery (QP_RESYNC) and receives are the same for both backends.
 *
 * Layouts are the mlx5 PRM's (ConnectX programmer's reference manual, "Send WQE format",
 * "Completion Queue Entry format"), big-endian on the wire and in memory.
 */

/* ---- hardware layouts ---- */

#define KVL_MLX5_WQEBB	     64	  /* a send WQE basic block */
#define KVL_MLX5_CQE_SIZE    64	  /* the only CQE size this path accepts */
#define KVL_MLX5_SND_DBR     1	  /* send counter: word 1 of the QP's doorbell record */
#define KVL_MLX5_CQ_SET_CI   0	  /* consumer index: word 0 of the CQ's doorbell record */
#define KVL_MLX5_CQ_ARM_DB   1	  /* arm request: word 1 of the CQ's doorbell record */
#define KVL_MLX5_CQ_DOORBELL 0x20 /* the CQ doorbell register's offset in the CQ's UAR page */
/* SGEs per WQE: ctrl + raddr + 16 data segments = 18 x 16 B = 5 WQEBBs; the PRM's ds field
 * would allow more, ConnectX's max_send_sge (30) too, but a KV block list is coalesced first. */
#define KVL_MLX5_MAX_SGE 16
#define KVL_MLX5_MAX_BB	 ((2 + KVL_MLX5_MAX_SGE + 3) / 4)

/* Send opcodes (PRM "Send WQE opcodes"). */
enum {
	KVL_MLX5_OP_RDMA_WRITE = 0x08,
	KVL_MLX5_OP_RDMA_WRITE_IMM = 0x09,
	KVL_MLX5_OP_RDMA_READ = 0x10,
};

/* fm_ce_se: CE (bits 3:2) = 2 asks a CQE for this WQE ("CQ update"). */
#define KVL_MLX5_CTRL_CE_MASK	0x0c
#define KVL_MLX5_CTRL_CQ_UPDATE 0x08

/* CQE opcodes, op_own bits 7:4 (PRM "CQE opcodes"). */
enum {
	KVL_MLX5_CQE_REQ = 0x0,
	KVL_MLX5_CQE_RESP_WR_IMM = 0x1,
	KVL_MLX5_CQE_RESP_SEND = 0x2,
	KVL_MLX5_CQE_RESP_SEND_IMM = 0x3,
	KVL_MLX5_CQE_REQ_ERR = 0xd,
	KVL_MLX5_CQE_RESP_ERR = 0xe,
	KVL_MLX5_CQE_INVALID = 0xf,
};

/* Error CQE syndromes (PRM "Error CQE": syndrome). */
enum {
	KVL_MLX5_SYND_LOCAL_LENGTH = 0x01,
	KVL_MLX5_SYND_LOCAL_QP_OP = 0x02,
	KVL_MLX5_SYND_LOCAL_PROT = 0x04,
	KVL_MLX5_SYND_WR_FLUSH = 0x05,
	KVL_MLX5_SYND_MW_BIND = 0x06,
	KVL_MLX5_SYND_BAD_RESP = 0x10,
	KVL_MLX5_SYND_LOCAL_ACCESS = 0x11,
	KVL_MLX5_SYND_REMOTE_INVAL_REQ = 0x12,
	KVL_MLX5_SYND_REMOTE_ACCESS = 0x13,
	KVL_MLX5_SYND_REMOTE_OP = 0x14,
	KVL_MLX5_SYND_TRANSPORT_RETRY = 0x15,
	KVL_MLX5_SYND_RNR_RETRY = 0x16,
	KVL_MLX5_SYND_REMOTE_ABORTED = 0x22,
};
/* Per-syndrome counters: syndromes 0x00-0x3e by value, anything above in the last slot. */
#define KVL_MLX5_SYND_SLOTS 64

/* Control segment, the first 16 bytes of every WQE. Multi-byte fields are big-endian. */
struct kvl_mlx5_ctrl_seg {
	uint32_t opmod_idx_opcode; /* opmod 31:24 | wqe_index 23:8 (the SQ counter) | opcode */
	uint32_t qpn_ds;	   /* qpn 31:8 | ds 5:0: WQE size in 16-byte units */
	uint8_t signature;
	uint8_t rsvd[2];
	uint8_t fm_ce_se; /* fence mode | completion/event mode | solicited event */
	uint32_t imm;	  /* immediate data of WRITE_WITH_IMM, as it goes on the wire */
};

/* Remote address segment: where an RDMA WRITE lands or an RDMA READ reads. */
struct kvl_mlx5_raddr_seg {
	uint64_t raddr;
	uint32_t rkey;
	uint32_t rsvd;
};

/* Data (pointer) segment: one local SGE. A byte_count of 0 means 2 GiB to the NIC. */
struct kvl_mlx5_data_seg {
	uint32_t byte_count;
	uint32_t lkey;
	uint64_t addr;
};

/* The fields of a 64-byte CQE this path reads; the rest stays opaque. */
struct kvl_mlx5_cqe64 {
	uint8_t rsvd0[36];
	uint32_t imm;	      /* 36: immediate data (RESP_WR_IMM), wire order */
	uint8_t rsvd40[4];    /* 40: app, app_op, app_info */
	uint32_t byte_cnt;    /* 44 */
	uint8_t rsvd48[6];    /* 48: timestamp; error CQEs put their syndromes at 54, 55 */
	uint8_t vendor_synd;  /* 54 (error CQE) */
	uint8_t syndrome;     /* 55 (error CQE) */
	uint32_t sop_qpn;     /* 56: send WQE opcode 31:24 (requester CQEs) | qpn 23:0 */
	uint16_t wqe_counter; /* 60: wqe_index of the completed WQE */
	uint8_t signature;    /* 62 */
	uint8_t op_own;	      /* 63: opcode 7:4 | se 1 | owner 0 (format in 3:2) */
};

_Static_assert(sizeof(struct kvl_mlx5_ctrl_seg) == 16, "ctrl segment is 16 bytes");
_Static_assert(offsetof(struct kvl_mlx5_ctrl_seg, qpn_ds) == 4, "PRM ctrl layout");
_Static_assert(offsetof(struct kvl_mlx5_ctrl_seg, signature) == 8, "PRM ctrl layout");
_Static_assert(offsetof(struct kvl_mlx5_ctrl_seg, fm_ce_se) == 11, "PRM ctrl layout");
_Static_assert(offsetof(struct kvl_mlx5_ctrl_seg, imm) == 12, "PRM ctrl layout");
_Static_assert(sizeof(struct kvl_mlx5_raddr_seg) == 16, "raddr segment is 16 bytes");
_Static_assert(offsetof(struct kvl_mlx5_raddr_seg, rkey) == 8, "PRM raddr layout");
_Static_assert(sizeof(struct kvl_mlx5_data_seg) == 16, "data segment is 16 bytes");
_Static_assert(offsetof(struct kvl_mlx5_data_seg, addr) == 8, "PRM data segment layout");
_Static_assert(sizeof(struct kvl_mlx5_cqe64) == KVL_MLX5_CQE_SIZE, "CQE is 64 bytes");
_Static_assert(offsetof(struct kvl_mlx5_cqe64, imm) == 36, "PRM CQE layout");
_Static_assert(offsetof(struct kvl_mlx5_cqe64, byte_cnt) == 44, "PRM CQE layout");
_Static_assert(offsetof(struct kvl_mlx5_cqe64, syndrome) == 55, "PRM error CQE layout");
_Static_assert(offsetof(struct kvl_mlx5_cqe64, sop_qpn) == 56, "PRM CQE layout");
_Static_assert(offsetof(struct kvl_mlx5_cqe64, wqe_counter) == 60, "PRM CQE layout");
_Static_assert(offsetof(struct kvl_mlx5_cqe64, op_own) == 63, "PRM CQE layout");

/* ---- send queue ---- */

/* kvl_mlx5_wqe.flags */
#define KVL_MLX5_F_SIGNAL 0x1 /* a CQE for this WQE; the others complete silently */

/* Laid out as struct ibv_sge (addr, length, lkey), so that a caller's verbs SGE list can be
 * encoded where it lies (verbs_mlx5.c checks it). */
struct kvl_mlx5_sge {
	uint64_t addr;
	uint32_t len; /* > 0: a 0-byte transfer has no SGE at all */
	uint32_t lkey;
};

/* One RDMA WQE to encode. */
struct kvl_mlx5_wqe {
	uint64_t wrid; /* returned by kvl_mlx5_sq_complete() */
	uint64_t raddr;
	uint32_t rkey;
	uint32_t imm; /* host order; WRITE_IMM only */
	const struct kvl_mlx5_sge *sge;
	uint8_t nsge; /* 0 .. KVL_MLX5_MAX_SGE */
	uint8_t opcode;
	uint8_t flags; /* KVL_MLX5_F_* */
};

/*
 * One UAR doorbell register: its two BlueFlame buffers (bf_size each; 0: no BlueFlame, the
 * register takes 8-byte doorbells) and the one the next doorbell uses. The toggle belongs to
 * the register, not to a send queue: a context's QPs share registers once it has more than
 * its low-latency ones (rdma-core's defaults: 16), and two SQs that each kept their own
 * toggle could write the same buffer back to back, the second copy over a WQE the NIC is
 * still reading (rdma-core keeps bf->offset per register, UCX a table keyed by the
 * register's address). Every SQ on a register must point at the same one; those SQs are
 * rung from one thread (the NIC's lcore), so the toggle needs no lock.
 */
struct kvl_mlx5_bf {
	uint8_t *reg;
	uint32_t size;
	uint32_t offset; /* 0 or size */
};

/* What setup (or a test) hands the SQ: memory the NIC reads, and the doorbell. */
struct kvl_mlx5_sq_attr {
	void *buf;		  /* the SQ: wqe_cnt WQEBBs, 64-byte aligned */
	uint32_t wqe_cnt;	  /* WQEBBs, a power of two, 2 .. 32768 */
	uint32_t qpn;		  /* 24 bits */
	volatile uint32_t *dbrec; /* the QP's doorbell record (2 words, big-endian) */
	void *bf_reg;		  /* the UAR doorbell register / BlueFlame buffers */
	uint32_t bf_size;	  /* one BlueFlame buffer; 0: no BlueFlame, 8-byte doorbells */
	/* The register's shared state when other SQs use bf_reg too (its reg and size must be
	 * bf_reg and bf_size); NULL: this SQ has the register to itself. */
	struct kvl_mlx5_bf *bf;
};

struct kvl_mlx5_sq_stats {
	uint64_t wqes, wqebbs, signaled, doorbells, bf_copies, wraps;
};

/*
 * Send queue state as plain integers (SPDK's mlx5_hw_qp is the model). sq_pi and sq_ci are
 * WQEBB counters modulo 2^16, as the NIC keeps them: sq_pi is what the doorbell record
 * announces, sq_ci what completions have given back.
 */
struct kvl_mlx5_sq {
	uint8_t *sq_addr;
	uint8_t *sq_end; /* sq_addr + wqe_cnt * 64: a WQE reaching it goes on at sq_addr */
	uint32_t wqe_cnt;
	uint32_t qpn;
	uint16_t sq_pi;
	uint16_t sq_ci;
	/* The newest WQE: its first 8 bytes are what an 8-byte doorbell writes. */
	struct kvl_mlx5_ctrl_seg *last_ctrl;
	uint16_t last_nbb;
	uint16_t pending; /* WQEs written since the last doorbell */
	/* doorbell */
	volatile uint32_t *dbrec;
	struct kvl_mlx5_bf *bf; /* the register; &bf_own unless shared (kvl_mlx5_sq_attr.bf) */
	struct kvl_mlx5_bf bf_own;
	/* by WQEBB index of a WQE's first block: its wrid, and sq_pi just past it */
	uint64_t *wrid;
	uint16_t *wqe_end;
	struct kvl_mlx5_sq_stats stats;
};

/* 0, or -EINVAL (a field out of range) / -ENOMEM. */
int kvl_mlx5_sq_init(struct kvl_mlx5_sq *sq, const struct kvl_mlx5_sq_attr *a);
void kvl_mlx5_sq_fini(struct kvl_mlx5_sq *sq);

/* WQEBBs free for new WQEs. */
static inline unsigned kvl_mlx5_sq_room(const struct kvl_mlx5_sq *sq)
{
	return sq->wqe_cnt - (uint16_t)(sq->sq_pi - sq->sq_ci);
}

/* WQEBBs one WQE of @nsge SGEs takes. */
static inline unsigned kvl_mlx5_wqe_bbs(unsigned nsge)
{
	return (2 + nsge + 3) / 4;
}

/*
 * Write one WQE at sq_pi (it may wrap past the end of the SQ) and advance sq_pi. Nothing is
 * visible to the NIC before kvl_mlx5_sq_ring(). 0; -EAGAIN: not enough room; -EINVAL: bad
 * opcode, too many SGEs or a 0-byte SGE (the NIC would read 2 GiB).
 */
int kvl_mlx5_sq_post(struct kvl_mlx5_sq *sq, const struct kvl_mlx5_wqe *w);

/*
 * What encoding WQEs reads of the SQ, copied into a local once per batch
 * (kvl_mlx5_sq_enc_start): stores into the WQEs could alias the SQ's own fields, so a loop
 * reading them through the SQ would load them again for every WQE.
 */
struct kvl_mlx5_sq_enc {
	uint8_t *sq_addr, *sq_end;
	uint64_t *wrid;
	uint16_t *wqe_end;
	uint32_t idx_mask; /* wqe_cnt - 1 */
	uint32_t qpn8;	   /* qpn << 8, as ctrl's qpn_ds wants it */
	uint32_t wraps;	   /* data segments that went on at the SQ's start */
};

static inline struct kvl_mlx5_sq_enc kvl_mlx5_sq_enc_start(const struct kvl_mlx5_sq *sq)
{
	return (struct kvl_mlx5_sq_enc){ sq->sq_addr,	  sq->sq_end,	sq->wrid, sq->wqe_end,
					 sq->wqe_cnt - 1, sq->qpn << 8, 0 };
}

/*
 * Encode @w at WQEBB counter @pi (it may wrap past the end of the SQ) and fill the SQ's
 * per-WQE tables (wrid, end), touching nothing else of the SQ: a caller writing a batch keeps
 * its counters in registers and commits them once (kvl_mlx5_sq_commit). The caller checked
 * the WQE (opcode one of the three, nsge <= KVL_MLX5_MAX_SGE, no 0-byte SGE) and the room.
 * Returns the WQEBBs it took; *@ctrl_out is its control segment.
 */
static inline unsigned kvl_mlx5_wqe_put(struct kvl_mlx5_sq_enc *e, uint16_t pi,
					const struct kvl_mlx5_wqe *w,
					struct kvl_mlx5_ctrl_seg **ctrl_out)
{
	struct kvl_mlx5_ctrl_seg *ctrl;
	struct kvl_mlx5_raddr_seg *rseg;
	struct kvl_mlx5_data_seg *dseg;
	unsigned ds = 2u + w->nsge, nbb = (ds + 3) / 4, idx = pi & e->idx_mask;
	uint32_t sig_fm = htobe32((w->flags & KVL_MLX5_F_SIGNAL) ? KVL_MLX5_CTRL_CQ_UPDATE : 0);

	ctrl = (struct kvl_mlx5_ctrl_seg *)(e->sq_addr + (size_t)idx * KVL_MLX5_WQEBB);
	/* wqe_index is the full 16-bit counter, not the slot: CQEs report it back. */
	ctrl->opmod_idx_opcode = htobe32((uint32_t)pi << 8 | w->opcode);
	ctrl->qpn_ds = htobe32(e->qpn8 | ds);
	/* signature, reserved and fm_ce_se as one store: byte 11 is fm_ce_se, the rest 0 */
	memcpy(&ctrl->signature, &sig_fm, sizeof(sig_fm));
	ctrl->imm = w->opcode == KVL_MLX5_OP_RDMA_WRITE_IMM ? htobe32(w->imm) : 0;

	/* ctrl and raddr fill the first half of a WQEBB, which never crosses the SQ's end. */
	rseg = (struct kvl_mlx5_raddr_seg *)(ctrl + 1);
	rseg->raddr = htobe64(w->raddr);
	rseg->rkey = htobe32(w->rkey);
	rseg->rsvd = 0;

	/* Data segments go on at the SQ's start when they reach its end, as rdma-core's
	 * post_send does (seg == qend): the NIC reads the SQ as a ring of WQEBBs. */
	dseg = (struct kvl_mlx5_data_seg *)(rseg + 1);
	if (w->nsge != 0) {
		/* the first shares the WQEBB of ctrl and raddr: it never wraps */
		dseg->byte_count = htobe32(w->sge[0].len);
		dseg->lkey = htobe32(w->sge[0].lkey);
		dseg->addr = htobe64(w->sge[0].addr);
		dseg++;
	}
	for (unsigned i = 1; i < w->nsge; i++) {
		if ((uint8_t *)dseg == e->sq_end) {
			dseg = (struct kvl_mlx5_data_seg *)e->sq_addr;
			e->wraps++;
		}
		dseg->byte_count = htobe32(w->sge[i].len);
		dseg->lkey = htobe32(w->sge[i].lkey);
		dseg->addr = htobe64(w->sge[i].addr);
		dseg++;
	}
	e->wrid[idx] = w->wrid;
	e->wqe_end[idx] = (uint16_t)(pi + nbb);
	*ctrl_out = ctrl;
	return nbb;
}

/*
 * After kvl_mlx5_wqe_put() of @nwqe WQEs (@nsig of them signaled) from sq_pi to @pi, the
 * newest at @last (@last_nbb WQEBBs): the SQ's counters and statistics, once per batch.
 */
static inline void kvl_mlx5_sq_commit(struct kvl_mlx5_sq *sq, const struct kvl_mlx5_sq_enc *e,
				      uint16_t pi, unsigned nwqe, unsigned nsig,
				      struct kvl_mlx5_ctrl_seg *last, unsigned last_nbb)
{
	sq->stats.wqes += nwqe;
	sq->stats.wqebbs += (uint16_t)(pi - sq->sq_pi);
	sq->stats.signaled += nsig;
	sq->stats.wraps += e->wraps;
	sq->last_ctrl = last;
	sq->last_nbb = (uint16_t)last_nbb;
	sq->pending = (uint16_t)(sq->pending + nwqe);
	sq->sq_pi = pi;
}

/*
 * kvl_mlx5_sq_post() for a caller that has checked the WQE already (opcode one of the three,
 * nsge <= KVL_MLX5_MAX_SGE, no 0-byte SGE): only the room is checked. Inline, so that a
 * caller building @w on the stack pays for no copy of it. 0 or -EAGAIN.
 */
static inline int kvl_mlx5_sq_write(struct kvl_mlx5_sq *sq, const struct kvl_mlx5_wqe *w)
{
	struct kvl_mlx5_ctrl_seg *ctrl;
	struct kvl_mlx5_sq_enc e;
	unsigned nbb;

	if (kvl_mlx5_wqe_bbs(w->nsge) > kvl_mlx5_sq_room(sq))
		return -EAGAIN;
	e = kvl_mlx5_sq_enc_start(sq);
	nbb = kvl_mlx5_wqe_put(&e, sq->sq_pi, w, &ctrl);
	kvl_mlx5_sq_commit(sq, &e, (uint16_t)(sq->sq_pi + nbb), 1,
			   (w->flags & KVL_MLX5_F_SIGNAL) != 0, ctrl, nbb);
	return 0;
}

/*
 * Make the newest unrung WQE signaled if it is not: the batch's last WQE must produce a CQE,
 * or unsignaled WQEs could wait for ever. Safe because the NIC reads no WQE before the
 * doorbell record announces it. Returns 1 if it changed the WQE.
 */
int kvl_mlx5_sq_signal_last(struct kvl_mlx5_sq *sq);

/*
 * A CQE reported the WQE whose wqe_index is @wqe_counter: it and every WQE before it are done
 * (RC completes in order; unsignaled WQEs have no CQE of their own). Gives back their WQEBBs
 * and returns its wrid in @wrid. -EPROTO when @wqe_counter is not an outstanding WQE's start.
 */
static inline int kvl_mlx5_sq_complete(struct kvl_mlx5_sq *sq, uint16_t wqe_counter, uint64_t *wrid)
{
	unsigned idx = wqe_counter & (sq->wqe_cnt - 1);
	uint16_t out = (uint16_t)(sq->sq_pi - sq->sq_ci);

	/* Only the start of a WQE the NIC still holds: a stale or corrupt counter must not move
	 * sq_ci past WQEs it has not finished. */
	if ((uint16_t)(wqe_counter - sq->sq_ci) >= out ||
	    (uint16_t)(sq->wqe_end[idx] - sq->sq_ci) > out)
		return -EPROTO;
	*wrid = sq->wrid[idx];
	sq->sq_ci = sq->wqe_end[idx];
	return 0;
}

/* After the QP went through RESET: the NIC's counters start again at 0. */
void kvl_mlx5_sq_reset(struct kvl_mlx5_sq *sq);

/*
 * Ring the doorbell for the WQEs written since the last ring (mlx5_db.c): doorbell record,
 * then a BlueFlame copy of a lone WQE or an 8-byte doorbell. Nothing to do when none.
 */
void kvl_mlx5_sq_ring(struct kvl_mlx5_sq *sq);

/* ---- completion queue ---- */

/* One decoded CQE. */
struct kvl_mlx5_cqe_info {
	uint32_t qpn;
	uint32_t byte_cnt;
	uint32_t imm; /* host order */
	uint16_t wqe_counter;
	uint8_t opcode;	   /* KVL_MLX5_CQE_* */
	uint8_t sq_opcode; /* the WQE's opcode (requester CQEs) */
	uint8_t syndrome;  /* error CQEs, else 0 */
	uint8_t vendor_synd;
	uint8_t status; /* enum kvl_status; KVL_OK for success */
	uint8_t flush;	/* 1: a flush (WR_FLUSH_ERR): the QP was already in error */
};

struct kvl_mlx5_cq_stats {
	uint64_t polls, cqes, errors, flushes, unknown; /* unknown: opcode/format not handled */
	uint64_t arms;
	uint64_t syndrome[KVL_MLX5_SYND_SLOTS];
};

struct kvl_mlx5_cq {
	uint8_t *cq_addr;
	uint32_t cqe_cnt; /* a power of two */
	uint32_t cq_ci;	  /* CQEs consumed; bit log2(cqe_cnt) is the owner bit we expect */
	volatile uint32_t *dbrec;
	/* Arming (kvl_mlx5_cq_arm): the UAR page with the CQ doorbell (NULL: cannot arm), the
	 * CQ number, and the arm sequence number: one more for every completion event taken. */
	uint8_t *uar;
	uint32_t cqn;
	uint32_t arm_sn;
	struct kvl_mlx5_cq_stats stats;
};

/* 0; -EINVAL when cqe_cnt is not a power of two; -ENOTSUP when @cqe_size is not 64. */
int kvl_mlx5_cq_init(struct kvl_mlx5_cq *cq, void *buf, uint32_t cqe_cnt, uint32_t cqe_size,
		     volatile uint32_t *dbrec);

/* Decode one 64-byte CQE (no ownership check). */
void kvl_mlx5_cqe_decode(const void *cqe, struct kvl_mlx5_cqe_info *out);

/* ---- the status map (mlx5_status.c), both backends' ---- */

/* An error syndrome as the ibv_wc_status rdma-core's mlx5 provider reports for it (an
 * enum ibv_wc_status; int here so that this header needs no verbs.h). */
int kvl_mlx5_syndrome_wc(uint8_t syndrome);

/* The kvl_status a completion of provider status @wc_status (enum ibv_wc_status) becomes. */
int kvl_wc_status(int wc_status);

/* kvl_wc_status(kvl_mlx5_syndrome_wc(@syndrome)): what the decoder puts in status. */
int kvl_mlx5_syndrome_status(uint8_t syndrome);

/*
 * Take up to @max CQEs the NIC has handed over (owner bit), in order, then tell the NIC
 * through the CQ doorbell record. Returns how many.
 */
unsigned kvl_mlx5_cq_poll(struct kvl_mlx5_cq *cq, struct kvl_mlx5_cqe_info *out, unsigned max);

/*
 * The CQE at cq_ci if the NIC has handed it over, else NULL; nothing is consumed. Ours when
 * its owner bit matches the pass we are on (bit log2(cqe_cnt) of the consumer index: the NIC
 * flips what it writes on every pass over the ring), and never while it still holds the
 * INVALID opcode the buffer was initialised with. The caller reads the rest of the CQE only
 * after this returned it (the NIC writes the owner byte last; the read barrier is here).
 */
static inline const struct kvl_mlx5_cqe64 *kvl_mlx5_cq_peek(const struct kvl_mlx5_cq *cq)
{
	const struct kvl_mlx5_cqe64 *cqe =
		(const void *)(cq->cq_addr +
			       (size_t)(cq->cq_ci & (cq->cqe_cnt - 1)) * KVL_MLX5_CQE_SIZE);
	uint8_t op_own = ((const volatile struct kvl_mlx5_cqe64 *)cqe)->op_own;

	if ((op_own >> 4) == KVL_MLX5_CQE_INVALID ||
	    (op_own & 1) != ((cq->cq_ci & cq->cqe_cnt) != 0))
		return NULL;
	kvl_mlx5_dma_rmb(); /* the owner byte before the rest */
	return cqe;
}

/* A requester CQE of a WQE that completed fine, in the plain format (no data scattered into
 * it, not compressed): opcode REQ and format bits 0, whatever the owner bit. */
static inline bool kvl_mlx5_cqe_req_ok(const struct kvl_mlx5_cqe64 *cqe)
{
	return (cqe->op_own & 0xfe) == (KVL_MLX5_CQE_REQ << 4);
}

/* Decode the CQE kvl_mlx5_cq_peek() returned into @o, count it as kvl_mlx5_cq_poll() does,
 * and consume it (cq_ci; the doorbell record is the caller's: kvl_mlx5_cq_set_ci). */
void kvl_mlx5_cq_take(struct kvl_mlx5_cq *cq, struct kvl_mlx5_cqe_info *o);

/* Write cq_ci (24 bits) to the CQ doorbell record (mlx5_db.c); kvl_mlx5_cq_poll() does. */
void kvl_mlx5_cq_set_ci(struct kvl_mlx5_cq *cq);

/*
 * Ask for one completion event when a CQE arrives past cq_ci (mlx5_db.c): the arm word
 * (sequence number 29:28, command 24 = 0: any CQE, consumer index 23:0) into word 1 of the
 * doorbell record, then it and the CQ number as one 64-bit store to the UAR's CQ doorbell.
 * The caller polls once more after arming (a CQE may have come before the arm took effect).
 */
void kvl_mlx5_cq_arm(struct kvl_mlx5_cq *cq);

/* A completion event of this CQ was taken (ibv_get_cq_event): the next arm is a new one. */
static inline void kvl_mlx5_cq_event(struct kvl_mlx5_cq *cq)
{
	cq->arm_sn++;
}

/* ---- setup (mlx5_setup.c): needs an mlx5 device ---- */

struct ibv_qp;
struct ibv_cq;

/* What setup found in the device's QP and CQ, checked (see kvl_mlx5_hw_from_verbs). */
struct kvl_mlx5_hw {
	struct kvl_mlx5_sq_attr sq;
	void *cq_buf;
	uint32_t cqe_cnt, cqe_size;
	volatile uint32_t *cq_dbrec;
	void *cq_uar; /* NULL: the provider gave none (the CQ cannot be armed from here) */
	uint32_t cqn;
	struct ibv_cq *ibcq;
	struct ibv_qp *ibqp;
};

/*
 * Read an existing RC QP and its send CQ through mlx5dv_init_obj and check them: SQ stride
 * 64, power-of-two WQE count, CQE size 64 (128 is refused), BlueFlame size 0 or a power of
 * two >= 64, non-NULL buffers. Anything unexpected: a negative errno and the reason in @err,
 * so the caller falls back to the verbs transport.
 */
int kvl_mlx5_hw_from_verbs(struct ibv_qp *qp, struct ibv_cq *cq, struct kvl_mlx5_hw *hw, char *err,
			   size_t errlen);

/*
 * What rdma-core's mlx5 provider takes from the environment when it opens a device, and the
 * fast path must follow (read it before or at ibv_open_device, as the provider does):
 *  - MLX5_SHUT_UP_BF set and not "0": the provider stops using BlueFlame (the register
 *    may be mapped uncached) yet mlx5dv still reports a BlueFlame size: *shut_up_bf is
 *    true, and the fast path must ring 8-byte doorbells only (bf_size 0);
 *  - MLX5_QP_SIGNATURE set (any value): QPs expect a signature in every WQE, which the fast
 *    path does not write: -ENOTSUP and a message naming the variable.
 * 0 otherwise.
 */
int kvl_mlx5_env_check(bool *shut_up_bf, char *err, size_t errlen);

#endif /* KVL_LCORES_MLX5_H */
