/* SPDX-License-Identifier: BSD-3-Clause */
/* The mlx5 encoders and CQE decoder, byte for byte against PRM fixtures and rdma-core. */
#include <endian.h>
#include <errno.h>
#include <infiniband/mlx5dv.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvl_test.h"
#include "mlx5.h"
#include "mlx5_model.h"

#define MAX_SQ_BB 64

static const char *fixdir(void)
{
	const char *d = getenv("KVL_FIXTURES");

	return d != NULL ? d : "tests/fixtures";
}

static FILE *open_fixture(const char *name)
{
	char path[512];
	FILE *f;

	snprintf(path, sizeof(path), "%s/mlx5/%s", fixdir(), name);
	f = fopen(path, "r");
	if (f == NULL)
		fprintf(stderr, "cannot open %s\n", path);
	CHECK(f != NULL);
	return f;
}

static size_t unhex(const char *s, uint8_t *out, size_t cap)
{
	size_t n = 0;

	while (s[0] && s[1] && n < cap && s[0] != '\n' && s[0] != ' ') {
		unsigned v;

		if (sscanf(s, "%2x", &v) != 1)
			break;
		out[n++] = (uint8_t)v;
		s += 2;
	}
	return n;
}

/* What rdma-core's own helpers write for the same WQE: an independent second opinion. */
static void cross_check_rdma_core(const struct kvl_mlx5_sq *sq, uint16_t pi,
				  const struct kvl_mlx5_wqe *w)
{
	struct mlx5_wqe_ctrl_seg ref;
	const uint8_t *bb = sq->sq_addr + (size_t)(pi & (sq->wqe_cnt - 1)) * KVL_MLX5_WQEBB;
	const uint8_t *p = bb + 32;
	uint8_t fm_ce_se = bb[11]; /* signaling is a mode decision: take what was chosen */

	memset(&ref, 0, sizeof(ref));
	mlx5dv_set_ctrl_seg(&ref, pi, w->opcode, 0, sq->qpn, fm_ce_se, (uint8_t)(2 + w->nsge), 0,
			    w->opcode == MLX5_OPCODE_RDMA_WRITE_IMM ? htobe32(w->imm) : 0);
	CHECK(memcmp(&ref, bb, sizeof(ref)) == 0);
	CHECK_INT(fm_ce_se & ~MLX5_WQE_CTRL_CQ_UPDATE, 0);
	{
		struct mlx5_wqe_raddr_seg r = { .raddr = htobe64(w->raddr),
						.rkey = htobe32(w->rkey),
						.reserved = 0 };
		CHECK(memcmp(&r, bb + 16, 16) == 0);
	}
	for (unsigned i = 0; i < w->nsge; i++) {
		struct mlx5_wqe_data_seg d;

		if (p == sq->sq_end)
			p = sq->sq_addr;
		mlx5dv_set_data_seg(&d, w->sge[i].len, w->sge[i].lkey, w->sge[i].addr);
		CHECK(memcmp(&d, p, sizeof(d)) == 0);
		p += 16;
	}
}

static void run_wqe_fixture(const char *name)
{
	FILE *f = open_fixture(name);
	char line[1024];
	static uint8_t sqbuf[MAX_SQ_BB * KVL_MLX5_WQEBB] __attribute__((aligned(64)));
	static uint8_t dbpage[4096] __attribute__((aligned(64)));
	uint32_t dbrec[2] = { 0xffffffff, 0xffffffff };
	struct kvl_mlx5_sq sq;
	struct mlx5_sig_rule rule = { MLX5_SIG_NONE, 0, 0 };
	bool have_sq = false;
	unsigned wqes = 0, bbs = 0, dbs = 0;

	if (f == NULL)
		return;
	memset(sqbuf, 0, sizeof(sqbuf));
	memset(dbpage, 0, sizeof(dbpage));
	while (fgets(line, sizeof(line), f) != NULL) {
		if (line[0] == '#' || line[0] == '\n')
			continue;
		if (strncmp(line, "sq ", 3) == 0) {
			unsigned n, qpn, pi, mode, every, bf;
			struct kvl_mlx5_sq_attr a;

			CHECK_INT(sscanf(line + 3, "%u %x %x %u %u %u", &n, &qpn, &pi, &mode,
					 &every, &bf),
				  6);
			a = (struct kvl_mlx5_sq_attr){ .buf = sqbuf,
						       .wqe_cnt = n,
						       .qpn = qpn,
						       .dbrec = dbrec,
						       .bf_reg = dbpage,
						       .bf_size = bf };
			CHECK_INT(kvl_mlx5_sq_init(&sq, &a), 0);
			rule = (struct mlx5_sig_rule){ mode, every, 0 };
			/* Start mid-way through the 16-bit counter, as a long-running QP is. */
			sq.sq_pi = sq.sq_ci = (uint16_t)pi;
			have_sq = true;
		} else if (strncmp(line, "wqe ", 4) == 0 && have_sq) {
			struct kvl_mlx5_sge sge[KVL_MLX5_MAX_SGE];
			struct kvl_mlx5_wqe w = { .sge = sge };
			unsigned op, flags, rkey, imm, nsge = 0;
			unsigned long long raddr, wrid;
			int used;
			char *p;
			uint16_t pi = sq.sq_pi;

			CHECK_INT(sscanf(line + 4, "%x %x %llx %x %x %llx%n", &op, &flags, &raddr,
					 &rkey, &imm, &wrid, &used),
				  6);
			p = line + 4 + used;
			for (;;) {
				unsigned long long a;
				unsigned k, len;
				int u;

				if (sscanf(p, " %llx:%x:%x%n", &a, &k, &len, &u) != 3)
					break;
				sge[nsge++] =
					(struct kvl_mlx5_sge){ .addr = a, .lkey = k, .len = len };
				p += u;
			}
			w.opcode = (uint8_t)op;
			w.flags = mlx5_sig_rule_flags(&rule, (uint8_t)flags);
			w.raddr = raddr;
			w.rkey = rkey;
			w.imm = imm;
			w.wrid = wrid;
			w.nsge = (uint8_t)nsge;
			CHECK_INT(kvl_mlx5_sq_post(&sq, &w), 0);
			CHECK_INT(sq.wrid[pi & (sq.wqe_cnt - 1)], wrid);
			cross_check_rdma_core(&sq, pi, &w);
			wqes++;
		} else if (strncmp(line, "siglast", 7) == 0 && have_sq) {
			mlx5_sig_rule_reset(&rule, kvl_mlx5_sq_signal_last(&sq));
		} else if (strncmp(line, "ring", 4) == 0 && have_sq) {
			kvl_mlx5_sq_ring(&sq);
		} else if (strncmp(line, "bb ", 3) == 0 && have_sq) {
			unsigned i;
			int used;
			uint8_t want[KVL_MLX5_WQEBB];

			CHECK_INT(sscanf(line + 3, "%u%n", &i, &used), 1);
			CHECK_INT(unhex(line + 3 + used + 1, want, sizeof(want)), KVL_MLX5_WQEBB);
			if (i < sq.wqe_cnt &&
			    memcmp(want, sqbuf + (size_t)i * KVL_MLX5_WQEBB, KVL_MLX5_WQEBB) != 0) {
				fprintf(stderr, "%s: WQEBB %u differs\n", name, i);
				CHECK(0);
			} else {
				CHECK(i < sq.wqe_cnt);
			}
			bbs++;
		} else if (strncmp(line, "dbr ", 4) == 0 && have_sq) {
			uint8_t want[4];

			CHECK_INT(unhex(line + 4, want, 4), 4);
			CHECK(memcmp(want, &dbrec[KVL_MLX5_SND_DBR], 4) == 0);
			CHECK_INT(dbrec[0], 0xffffffff); /* the receive word is not ours */
		} else if (strncmp(line, "db ", 3) == 0 && have_sq) {
			unsigned off;
			int used;
			uint8_t want[1024];
			size_t n;

			CHECK_INT(sscanf(line + 3, "%u%n", &off, &used), 1);
			n = unhex(line + 3 + used + 1, want, sizeof(want));
			CHECK(n > 0 && off + n <= sizeof(dbpage));
			if (memcmp(want, dbpage + off, n) != 0) {
				fprintf(stderr, "%s: doorbell page at %u differs\n", name, off);
				CHECK(0);
			}
			dbs++;
		} else {
			fprintf(stderr, "%s: cannot read: %s", name, line);
			CHECK(0);
		}
	}
	fclose(f);
	CHECK(wqes > 0);
	CHECK(bbs > 0 && bbs == sq.wqe_cnt);
	CHECK(dbs > 0);
	printf("%s: %u WQEs, %u WQEBBs compared\n", name, wqes, bbs);
	kvl_mlx5_sq_fini(&sq);
}

static void parse_expect(const char *s, struct kvl_mlx5_cqe_info *e, unsigned *owner, unsigned *wc)
{
	char key[32];
	unsigned v;
	int used;

	memset(e, 0, sizeof(*e));
	while (sscanf(s, " %31[a-z_]=%x%n", key, &v, &used) == 2) {
		s += used;
		if (strcmp(key, "opcode") == 0)
			e->opcode = (uint8_t)v;
		else if (strcmp(key, "wqe_counter") == 0)
			e->wqe_counter = (uint16_t)v;
		else if (strcmp(key, "qpn") == 0)
			e->qpn = v;
		else if (strcmp(key, "sq_opcode") == 0)
			e->sq_opcode = (uint8_t)v;
		else if (strcmp(key, "byte_cnt") == 0)
			e->byte_cnt = v;
		else if (strcmp(key, "imm") == 0)
			e->imm = v;
		else if (strcmp(key, "syndrome") == 0)
			e->syndrome = (uint8_t)v;
		else if (strcmp(key, "vendor") == 0)
			e->vendor_synd = (uint8_t)v;
		else if (strcmp(key, "status") == 0)
			e->status = (uint8_t)v;
		else if (strcmp(key, "flush") == 0)
			e->flush = (uint8_t)v;
		else if (strcmp(key, "owner") == 0)
			*owner = v;
		else if (strcmp(key, "wc") == 0)
			*wc = v;
		else
			CHECK_STR(key, "a known key");
	}
}

static void cqe_decode_fixture(void)
{
	FILE *f = open_fixture("cqe_decode.hex");
	char line[512];
	uint8_t raw[64] __attribute__((aligned(64)));
	unsigned n = 0;

	if (f == NULL)
		return;
	while (fgets(line, sizeof(line), f) != NULL) {
		if (strncmp(line, "cqe ", 4) == 0) {
			CHECK_INT(unhex(line + 4, raw, sizeof(raw)), 64);
		} else if (strncmp(line, "expect ", 7) == 0) {
			struct kvl_mlx5_cqe_info got, want;
			struct mlx5_cqe64 *ref = (struct mlx5_cqe64 *)raw;
			unsigned owner = 2, wc = ~0u;

			parse_expect(line + 7, &want, &owner, &wc);
			kvl_mlx5_cqe_decode(raw, &got);
			CHECK_INT(got.opcode, want.opcode);
			CHECK_INT(got.wqe_counter, want.wqe_counter);
			CHECK_INT(got.qpn, want.qpn);
			CHECK_INT(got.sq_opcode, want.sq_opcode);
			CHECK_INT(got.byte_cnt, want.byte_cnt);
			CHECK_INT(got.imm, want.imm);
			CHECK_INT(got.syndrome, want.syndrome);
			CHECK_INT(got.vendor_synd, want.vendor_synd);
			CHECK_INT(got.status, want.status);
			CHECK_INT(got.flush, want.flush);
			CHECK_INT(raw[63] & 1, owner);
			/* rdma-core's reading of the same bytes */
			CHECK_INT(mlx5dv_get_cqe_opcode(ref), got.opcode);
			CHECK_INT(mlx5dv_get_cqe_owner(ref), owner);
			CHECK_INT(be16toh(ref->wqe_counter), got.wqe_counter);
			CHECK_INT(be32toh(ref->sop_drop_qpn) & 0xffffff, got.qpn);
			if (got.opcode == MLX5_CQE_REQ_ERR || got.opcode == MLX5_CQE_RESP_ERR)
				CHECK_INT(((struct mlx5_err_cqe *)raw)->syndrome, got.syndrome);
			/* One status map for both backends: the syndrome is the ibv_wc_status the
			 * provider reports for it, and the verbs backend's reading of that status
			 * is the status the direct decoder gave. */
			CHECK(wc != ~0u);
			if (got.opcode == MLX5_CQE_REQ_ERR || got.opcode == MLX5_CQE_RESP_ERR)
				CHECK_INT(kvl_mlx5_syndrome_wc(got.syndrome), wc);
			CHECK_INT(kvl_wc_status((int)wc), got.status);
			n++;
		}
	}
	fclose(f);
	CHECK_INT(n, 13);
	printf("cqe_decode.hex: %u CQEs decoded\n", n);
}

static void cq_ring_fixture(const char *name)
{
	FILE *f = open_fixture(name);
	char line[512];
	static uint8_t cqbuf[16 * 64] __attribute__((aligned(64)));
	uint32_t dbrec[2] = { 0, 0x5a5a5a5a };
	struct kvl_mlx5_cq cq;
	unsigned cnt = 0, ci = 0;

	if (f == NULL)
		return;
	while (fgets(line, sizeof(line), f) != NULL) {
		if (strncmp(line, "cq ", 3) == 0) {
			CHECK_INT(sscanf(line + 3, "%u %u", &cnt, &ci), 2);
			CHECK_INT(kvl_mlx5_cq_init(&cq, cqbuf, cnt, 64, dbrec), 0);
			cq.cq_ci = ci;
		} else if (strncmp(line, "cqe ", 4) == 0) {
			unsigned i;
			int used;

			CHECK_INT(sscanf(line + 4, "%u%n", &i, &used), 1);
			CHECK(i < cnt);
			CHECK_INT(unhex(line + 4 + used + 1, cqbuf + i * 64, 64), 64);
		} else if (strncmp(line, "poll ", 5) == 0) {
			struct kvl_mlx5_cqe_info e[8];
			unsigned want, got, c[8], k = 0;
			char *p = line + 5;
			int used;

			CHECK_INT(sscanf(p, "%u%n", &want, &used), 1);
			p += used;
			while (k < 8 && sscanf(p, " %x%n", &c[k], &used) == 1) {
				k++;
				p += used;
				if (*p == ',')
					p++;
			}
			got = kvl_mlx5_cq_poll(&cq, e, 8);
			CHECK_INT(got, want);
			for (unsigned i = 0; i < got && i < k; i++)
				CHECK_INT(e[i].wqe_counter, c[i]);
			/* Nothing more until the NIC writes again. */
			CHECK_INT(kvl_mlx5_cq_poll(&cq, e, 8), 0);
		} else if (strncmp(line, "dbr ", 4) == 0) {
			uint8_t want[4];

			CHECK_INT(unhex(line + 4, want, 4), 4);
			CHECK(memcmp(want, &dbrec[KVL_MLX5_CQ_SET_CI], 4) == 0);
			CHECK_INT(dbrec[1], 0x5a5a5a5a); /* the arm word is not touched */
		}
	}
	fclose(f);
	printf("%s: polled\n", name);
}

/* The rules the fixtures do not show: refusals, room, completion of unsignaled WQEs. */
static void sq_rules(void)
{
	static uint8_t buf[8 * 64] __attribute__((aligned(64)));
	uint8_t page[64];
	uint32_t dbrec[2];
	struct kvl_mlx5_sq sq;
	struct kvl_mlx5_sq_attr a = {
		.buf = buf,
		.wqe_cnt = 8,
		.qpn = 7,
		.dbrec = dbrec,
		.bf_reg = page,
	};
	struct kvl_mlx5_sge sge[KVL_MLX5_MAX_SGE + 1];
	struct kvl_mlx5_wqe w = { .opcode = KVL_MLX5_OP_RDMA_WRITE, .sge = sge, .nsge = 1 };
	uint64_t wrid = 0;
	uint32_t cq_dbrec[2];
	struct kvl_mlx5_cq cq;

	for (unsigned i = 0; i <= KVL_MLX5_MAX_SGE; i++)
		sge[i] = (struct kvl_mlx5_sge){ .addr = 0x1000 * i, .lkey = 1, .len = 8 };
	CHECK_INT(kvl_mlx5_sq_init(&sq, &a), 0);
	memset(buf, 0xee, sizeof(buf));

	/* refusals */
	w.opcode = MLX5_OPCODE_SEND;
	CHECK_INT(kvl_mlx5_sq_post(&sq, &w), -EINVAL);
	w.opcode = KVL_MLX5_OP_RDMA_WRITE;
	w.nsge = KVL_MLX5_MAX_SGE + 1;
	CHECK_INT(kvl_mlx5_sq_post(&sq, &w), -EINVAL);
	w.nsge = 2;
	sge[1].len = 0;
	CHECK_INT(kvl_mlx5_sq_post(&sq, &w), -EINVAL);
	sge[1].len = 8;
	CHECK_INT(sq.sq_pi, 0);

	/* Bytes past ds are left alone: the NIC never reads them. */
	w.nsge = 1;
	w.wrid = 100;
	CHECK_INT(kvl_mlx5_sq_post(&sq, &w), 0);
	CHECK_INT(buf[48], 0xee);
	CHECK_INT(buf[63], 0xee);

	/* Fill: 1 + 5 x 1 + a 2-WQEBB WQE = 8; one more does not fit. */
	for (unsigned i = 0; i < 5; i++) {
		w.wrid = 101 + i;
		CHECK_INT(kvl_mlx5_sq_post(&sq, &w), 0);
	}
	w.nsge = 5;
	w.wrid = 106;
	CHECK_INT(kvl_mlx5_sq_post(&sq, &w), 0);
	CHECK_INT(kvl_mlx5_sq_room(&sq), 0);
	w.nsge = 0;
	CHECK_INT(kvl_mlx5_sq_post(&sq, &w), -EAGAIN);
	CHECK_INT(sq.stats.signaled, 0);
	CHECK_INT(kvl_mlx5_sq_signal_last(&sq), 1);
	CHECK_INT(buf[6 * 64 + 11], MLX5_WQE_CTRL_CQ_UPDATE);
	CHECK_INT(kvl_mlx5_sq_signal_last(&sq), 0); /* already */
	kvl_mlx5_sq_ring(&sq);
	CHECK_INT(kvl_mlx5_sq_signal_last(&sq), 0); /* nothing unrung */

	/* A CQE for WQE 3 completes 0..3: their 4 WQEBBs come back; its wrid names it. */
	CHECK_INT(kvl_mlx5_sq_complete(&sq, 3, &wrid), 0);
	CHECK_INT(wrid, 103);
	CHECK_INT(sq.sq_ci, 4);
	CHECK_INT(kvl_mlx5_sq_room(&sq), 4);
	/* Stale (already completed) or past sq_pi: refused, nothing moves. */
	CHECK_INT(kvl_mlx5_sq_complete(&sq, 2, &wrid), -EPROTO);
	CHECK_INT(kvl_mlx5_sq_complete(&sq, 9, &wrid), -EPROTO);
	CHECK_INT(sq.sq_ci, 4);
	/* The 2-WQEBB WQE (counter 6) gives back both. */
	CHECK_INT(kvl_mlx5_sq_complete(&sq, 6, &wrid), 0);
	CHECK_INT(wrid, 106);
	CHECK_INT(sq.sq_ci, 8);
	CHECK_INT(kvl_mlx5_sq_room(&sq), 8);
	kvl_mlx5_sq_fini(&sq);

	/* Setup values the SQ refuses. */
	a.wqe_cnt = 12;
	CHECK_INT(kvl_mlx5_sq_init(&sq, &a), -EINVAL);
	a.wqe_cnt = 8;
	a.bf_size = 96;
	CHECK_INT(kvl_mlx5_sq_init(&sq, &a), -EINVAL);
	a.bf_size = 0;
	a.buf = buf + 16;
	CHECK_INT(kvl_mlx5_sq_init(&sq, &a), -EINVAL); /* misaligned */

	/* 128-byte CQEs are refused at setup, not misread. */
	CHECK_INT(kvl_mlx5_cq_init(&cq, buf, 4, 128, cq_dbrec), -ENOTSUP);
	CHECK_INT(kvl_mlx5_cq_init(&cq, buf, 6, 64, cq_dbrec), -EINVAL);
	CHECK_INT(kvl_mlx5_cq_init(&cq, buf, 4, 64, cq_dbrec), 0);

	/* Every syndrome the PRM lists has a status; unknown ones are protocol errors. */
	CHECK_INT(kvl_mlx5_syndrome_status(MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR), KVL_ERR_ACCESS);
	CHECK_INT(kvl_mlx5_syndrome_status(MLX5_CQE_SYNDROME_TRANSPORT_RETRY_EXC_ERR),
		  KVL_ERR_CONN_LOST);
	CHECK_INT(kvl_mlx5_syndrome_status(MLX5_CQE_SYNDROME_LOCAL_PROT_ERR), KVL_ERR_LOCAL);
	CHECK_INT(kvl_mlx5_syndrome_status(0x77), KVL_ERR_PROTOCOL);
}

/*
 * Arming the CQ: the bytes rdma-core's mlx5_arm_cq writes, spelled out here. Arm word =
 * sn (arm_sn & 3) << 28 | cmd (0 << 24: any CQE) | consumer index (24 bits); into word 1 of
 * the doorbell record big-endian, and to UAR + 0x20 as 8 big-endian bytes: the arm word, then
 * the CQ number.
 */
static void cq_arm_bytes(void)
{
	static uint8_t cqbuf[64 * 4] __attribute__((aligned(64)));
	uint32_t dbrec[2] = { 0x11111111, 0 };
	uint8_t uar[0x40];
	struct kvl_mlx5_cq cq;
	static const uint8_t rec1[4] = { 0x10, 0x12, 0x34, 0x56 };
	static const uint8_t reg1[8] = { 0x10, 0x12, 0x34, 0x56, 0x00, 0x00, 0x04, 0xc1 };
	static const uint8_t rec2[4] = { 0x30, 0x00, 0x00, 0x07 };
	static const uint8_t reg2[8] = { 0x30, 0x00, 0x00, 0x07, 0x00, 0x00, 0x04, 0xc1 };
	static const uint8_t rec3[4] = { 0x00, 0x00, 0x00, 0x07 };

	memset(uar, 0xee, sizeof(uar));
	CHECK_INT(kvl_mlx5_cq_init(&cq, cqbuf, 4, 64, dbrec), 0);
	cq.uar = uar;
	cq.cqn = 0x4c1;
	cq.cq_ci = 0x1123456; /* past 24 bits: only the low 24 go out */
	kvl_mlx5_cq_event(&cq);
	kvl_mlx5_cq_event(&cq);
	kvl_mlx5_cq_event(&cq);
	kvl_mlx5_cq_event(&cq);
	kvl_mlx5_cq_event(&cq); /* arm_sn 5: sn 1 */
	kvl_mlx5_cq_arm(&cq);
	CHECK(memcmp(&dbrec[KVL_MLX5_CQ_ARM_DB], rec1, 4) == 0);
	CHECK(memcmp(uar + KVL_MLX5_CQ_DOORBELL, reg1, 8) == 0);
	CHECK_INT(dbrec[KVL_MLX5_CQ_SET_CI], 0x11111111); /* the consumer index is not touched */
	CHECK_INT(uar[KVL_MLX5_CQ_DOORBELL - 1], 0xee);
	CHECK_INT(uar[KVL_MLX5_CQ_DOORBELL + 8], 0xee);
	cq.cq_ci = 7;
	kvl_mlx5_cq_event(&cq);
	kvl_mlx5_cq_event(&cq); /* sn 3 */
	kvl_mlx5_cq_arm(&cq);
	CHECK(memcmp(&dbrec[KVL_MLX5_CQ_ARM_DB], rec2, 4) == 0);
	CHECK(memcmp(uar + KVL_MLX5_CQ_DOORBELL, reg2, 8) == 0);
	kvl_mlx5_cq_event(&cq); /* sn wraps to 0 */
	kvl_mlx5_cq_arm(&cq);
	CHECK(memcmp(&dbrec[KVL_MLX5_CQ_ARM_DB], rec3, 4) == 0);
	CHECK_INT(cq.stats.arms, 3);
}

int main(void)
{
	static const char *const wqe_files[] = {
		"wqe_write_1sge.hex", "wqe_read_1sge.hex", "wqe_write_imm.hex", "wqe_multi_sge.hex",
		"wqe_wrap.hex",	      "wqe_sig_every.hex", "wqe_sig_none.hex",	"wqe_blueflame.hex",
	};

	for (unsigned i = 0; i < sizeof(wqe_files) / sizeof(wqe_files[0]); i++)
		run_wqe_fixture(wqe_files[i]);
	cqe_decode_fixture();
	cq_ring_fixture("cq_second_pass.hex");
	cq_ring_fixture("cq_fresh.hex");
	sq_rules();
	cq_arm_bytes();
	return kvl_test_done("mlx5_wqe");
}
