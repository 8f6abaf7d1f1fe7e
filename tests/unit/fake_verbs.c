/* SPDX-License-Identifier: BSD-3-Clause */
/* Fake libibverbs + libmlx5 over a software mlx5 NIC in its own thread (see fake_nic.h). */
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <infiniband/mlx5dv.h>
#include <infiniband/verbs.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/capability.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "kvl_clock.h"
#include "fake_nic.h"
#include "nic_bytes.h"

/* The header's macros would rename our definitions of the exported functions. */
#undef ibv_reg_mr
#undef ibv_query_port

/* PRM values, written out here and not taken from lcores/xport/mlx5/mlx5.h: the fake is the NIC. */
#define WQEBB	      64
#define OP_WRITE      0x08
#define OP_WRITE_IMM  0x09
#define OP_READ	      0x10
#define CQE_REQ	      0x0
#define CQE_RESP_WIMM 0x1
#define CQE_REQ_ERR   0xd
#define CQE_RESP_ERR  0xe
#define CQE_INVALID   0xf
#define SYN_LOC_LEN   0x01
#define SYN_LOC_QP_OP 0x02
#define SYN_LOC_PROT  0x04
#define SYN_FLUSH     0x05
#define SYN_REM_ACC   0x13
#define SYN_RETRY     0x15
#define SYN_RNR	      0x16

#define N_DEV	      2
#define GID_TBL	      256 /* gid_tbl_len of a ConnectX port */
#define MAX_SEND_SGE  30  /* ConnectX-5/6 */
#define MAX_QP_WR     32768
#define MAX_CQE	      4194303
#define MAX_MSG	      (1u << 30)
#define BF_SIZE	      256   /* one of the UAR page's two BlueFlame buffers */
#define MAX_CQ_COUNT  65535 /* CQ moderation as ConnectX firmware reports it */
#define MAX_CQ_PERIOD 4095

struct fdev {
	struct ibv_device dev;
	uint8_t gid[GID_TBL][16];
	int gid_type[GID_TBL]; /* IBV_GID_TYPE_*, -1 empty */
};

struct fctx {
	struct fdev *fd;
	struct verbs_context vctx; /* ops we do not give stay NULL: the inlines fall back */
};

struct fmr {
	struct ibv_mr mr;
	struct fdev *dev;
	uint64_t base, len;
	unsigned access;
	bool live;
};

struct fch {
	struct ibv_comp_channel ch;
	int wfd;
};

struct fcq {
	union {
		struct ibv_cq cq;
		struct ibv_cq_ex cqx; /* ibv_create_cq_ex: the same fields first */
	};
	struct fdev *dev;
	uint8_t *buf;
	uint32_t *dbrec; /* [0] consumer index, [1] arm */
	uint32_t cnt, cqn;
	uint32_t pi; /* CQEs written */
	uint32_t ci; /* ibv_poll_cq's consumer index (verbs-polled CQs) */
	bool dv;     /* handed out by mlx5dv_init_obj: not cleaned on reset, not ibv_poll_cq'd */
	bool armed;
	/* DV CQs are armed through their UAR doorbell (kvlane's own arm, rdma-core's layout):
	 * 8 bytes at +0x20, the arm word (sn 29:28, cmd 24, ci 23:0) then the CQ number, both
	 * big-endian. The NIC takes a doorbell by swapping 0 in; the arm counts when its sn is
	 * the number of events raised so far (mod 4), as the hardware's stale-arm check. */
	uint64_t uar[8];
	uint32_t arm_ci;
	unsigned events, acked;
	uint16_t mod_count, mod_period; /* ibv_modify_cq: kept, events are not coalesced */
	struct ibv_wc cur;		/* the CQE ibv_start_poll/next_poll took (read_*) */
	struct fcq *next;
};

struct fqp {
	struct ibv_qp qp;
	struct ibv_qp_init_attr init;
	struct fdev *dev;
	struct fcq *scq, *rcq;
	uint8_t *sq;	 /* SQ buffer */
	uint32_t *dbrec; /* [0] RQ head, [1] SQ WQEBB counter, big-endian */
	uint8_t *uar;	 /* two BlueFlame buffers */
	uint32_t wqe_cnt;
	/* receive queue: wr_ids by slot; head posted, nic consumed by the NIC, tail polled */
	uint64_t *rq_wrid;
	uint32_t rq_cnt, rq_head, rq_nic, rq_tail;
	/* connection */
	enum ibv_qp_state state;
	unsigned access;
	uint32_t dest_qpn, rq_psn, sq_psn; /* rq_psn: expected PSN; sq_psn: next PSN sent */
	uint8_t dgid[16], path_mtu, retry_cnt, rnr_retry, timeout, min_rnr_timer;
	struct ibv_ah_attr ah; /* as given at RTR: read back by ibv_query_qp */
	uint16_t pkey_index;
	/* NIC */
	uint16_t hw_ci;		   /* next WQEBB to execute */
	unsigned tries, rnr_tries; /* of the WQE at hw_ci */
	uint64_t next_try_ns;	   /* 0: not waiting */
	/* requester scatter to CQE: a signaled READ of <= 32 bytes completes with its data in
	 * the CQE (op_own bit 2, MLX5_INLINE_SCATTER_32) and never reaches the local buffer;
	 * rdma-core copies it out when it polls, a direct poller must */
	bool scat_cqe;
	bool scat_disabled; /* mlx5dv_create_qp with MLX5DV_QP_CREATE_DISABLE_SCATTER_TO_CQE */
	struct fqp *next;
};

static struct {
	pthread_mutex_t lock;
	pthread_t thread;
	bool running, stop;
	unsigned opened;
	struct fqp *qps;
	struct fcq *cqs;
	struct fmr *mrs[1024];
	unsigned n_mr;
	uint32_t next_qpn, next_cqn, next_key;
	bool flush_signaled_only;
	bool wedge; /* fake_nic_wedge(): RTS QPs hold their WQEs until a QP is put in error */
	unsigned dv_cqe_size; /* what mlx5dv_init_obj says of CQs (0: 64) */
	int scatter_mode;     /* fake_nic_scatter_to_cqe() */
	uint64_t retry_ns;
	struct fake_nic_stats st;
} nic = {
	.lock = PTHREAD_MUTEX_INITIALIZER,
	.next_qpn = 0x1c8,
	.next_cqn = 0x40,
	.next_key = 0x1f00,
	.retry_ns = 2000000,
};

static struct fdev devs[N_DEV];
static bool devs_ready;

/* ---- helpers ---- */

static void vfail(const char *fmt, va_list ap)
{
	if (nic.st.fail[0] == '\0')
		vsnprintf(nic.st.fail, sizeof(nic.st.fail), fmt, ap);
}

/* Under the lock. */
__attribute__((format(printf, 1, 2))) static void bad(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vfail(fmt, ap);
	va_end(ap);
}

void fake_nic_fail(const char *fmt, ...)
{
	va_list ap;

	pthread_mutex_lock(&nic.lock);
	va_start(ap, fmt);
	vfail(fmt, ap);
	va_end(ap);
	pthread_mutex_unlock(&nic.lock);
}

void fake_nic_stats(struct fake_nic_stats *out)
{
	pthread_mutex_lock(&nic.lock);
	*out = nic.st;
	pthread_mutex_unlock(&nic.lock);
}

void fake_nic_wedge(bool on)
{
	pthread_mutex_lock(&nic.lock);
	nic.wedge = on;
	pthread_mutex_unlock(&nic.lock);
}

void fake_nic_flush_signaled_only(bool on)
{
	pthread_mutex_lock(&nic.lock);
	nic.flush_signaled_only = on;
	pthread_mutex_unlock(&nic.lock);
}

void fake_nic_cqe_size(unsigned bytes)
{
	pthread_mutex_lock(&nic.lock);
	nic.dv_cqe_size = bytes;
	pthread_mutex_unlock(&nic.lock);
}

void fake_nic_scatter_to_cqe(int mode)
{
	pthread_mutex_lock(&nic.lock);
	nic.scatter_mode = mode;
	pthread_mutex_unlock(&nic.lock);
}

void fake_nic_retry_interval_us(unsigned us)
{
	pthread_mutex_lock(&nic.lock);
	nic.retry_ns = (uint64_t)(us ? us : 1) * 1000;
	pthread_mutex_unlock(&nic.lock);
}

static void *zalloc(size_t n, size_t align)
{
	void *p = aligned_alloc(align, (n + align - 1) / align * align);

	if (p != NULL)
		memset(p, 0, n);
	return p;
}

static uint32_t pow2_at_least(uint64_t n)
{
	uint32_t p = 1;

	while (p < n)
		p <<= 1;
	return p;
}

static void setup_devs(void)
{
	if (devs_ready)
		return;
	for (int i = 0; i < N_DEV; i++) {
		struct fdev *d = &devs[i];

		snprintf(d->dev.name, sizeof(d->dev.name), "mlx5_%d", i);
		snprintf(d->dev.dev_name, sizeof(d->dev.dev_name), "uverbs%d", i);
		snprintf(d->dev.dev_path, sizeof(d->dev.dev_path),
			 "/sys/class/infiniband_verbs/uverbs%d", i);
		snprintf(d->dev.ibdev_path, sizeof(d->dev.ibdev_path),
			 "/sys/class/infiniband/mlx5_%d", i);
		d->dev.node_type = IBV_NODE_CA;
		d->dev.transport_type = IBV_TRANSPORT_IB;
		for (int g = 0; g < GID_TBL; g++)
			d->gid_type[g] = -1;
		/* link-local from a made-up MAC, v1 and v2; then the IPv4-mapped pair */
		for (int g = 0; g < 2; g++) {
			static const uint8_t ll[16] = {
				0xfe, 0x80, 0,	  0,	0,    0,    0,	  0,
				0x02, 0x11, 0x22, 0xff, 0xfe, 0x33, 0x44, 0
			};

			memcpy(d->gid[g], ll, 16);
			d->gid[g][15] = (uint8_t)(0x50 + i);
			d->gid_type[g] = g == 0 ? IBV_GID_TYPE_ROCE_V1 : IBV_GID_TYPE_ROCE_V2;
		}
		for (int g = 2; g < 4; g++) {
			static const uint8_t v4[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };

			memcpy(d->gid[g], v4, 12);
			d->gid[g][12] = 10;
			d->gid[g][13] = 77;
			d->gid[g][14] = 0;
			d->gid[g][15] = (uint8_t)(1 + i);
			d->gid_type[g] = g == 2 ? IBV_GID_TYPE_ROCE_V1 : IBV_GID_TYPE_ROCE_V2;
		}
	}
	devs_ready = true;
}

static struct fdev *dev_of(struct ibv_context *ctx)
{
	return ((struct fctx *)((uint8_t *)ctx - offsetof(struct fctx, vctx.context)))->fd;
}

bool fake_nic_gid(const char *name, int index, uint8_t gid[16])
{
	setup_devs();
	for (int i = 0; i < N_DEV; i++)
		if (strcmp(devs[i].dev.name, name) == 0 && index >= 0 && index < GID_TBL &&
		    devs[i].gid_type[index] >= 0) {
			memcpy(gid, devs[i].gid[index], 16);
			return true;
		}
	return false;
}

/* ---- sysfs ---- */

static int put(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");

	if (f == NULL)
		return -errno;
	fputs(text, f);
	return fclose(f) == 0 ? 0 : -errno;
}

static int mkdir_p(char *path)
{
	for (char *p = path + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = '\0';
		if (mkdir(path, 0755) < 0 && errno != EEXIST)
			return -errno;
		*p = '/';
	}
	return mkdir(path, 0755) < 0 && errno != EEXIST ? -errno : 0;
}

static const char *const attrs[] = { "types", "ndevs" };

int fake_nic_make_sysfs(char *root, size_t cap)
{
	char dir[512], path[600], tmpl[] = "/tmp/kvl-fakenic.XXXXXX";
	int rc;

	setup_devs();
	if (mkdtemp(tmpl) == NULL)
		return -errno;
	snprintf(root, cap, "%s", tmpl);
	for (int i = 0; i < N_DEV; i++) {
		for (int a = 0; a < 2; a++) {
			snprintf(dir, sizeof(dir), "%s/class/infiniband/%s/ports/1/gid_attrs/%s",
				 root, devs[i].dev.name, attrs[a]);
			rc = mkdir_p(dir);
			if (rc != 0)
				return rc;
			for (int g = 0; g < GID_TBL; g++) {
				char nd[16];
				int t = devs[i].gid_type[g];

				if (t < 0)
					continue; /* the kernel's file of an empty entry: unreadable
						   */
				snprintf(nd, sizeof(nd), "enp%ds0\n", 65 + i);
				snprintf(path, sizeof(path), "%s/%d", dir, g);
				rc = put(path, a == 1			   ? nd
					       : t == IBV_GID_TYPE_ROCE_V2 ? "RoCE v2\n"
									   : "IB/RoCE v1\n");
				if (rc != 0)
					return rc;
			}
		}
	}
	return 0;
}

void fake_nic_rm_sysfs(const char *root)
{
	char path[600];

	for (int i = 0; i < N_DEV; i++) {
		for (int a = 0; a < 2; a++) {
			for (int g = 0; g < GID_TBL; g++) {
				snprintf(path, sizeof(path),
					 "%s/class/infiniband/%s/ports/1/gid_attrs/%s/%d", root,
					 devs[i].dev.name, attrs[a], g);
				unlink(path);
			}
			snprintf(path, sizeof(path), "%s/class/infiniband/%s/ports/1/gid_attrs/%s",
				 root, devs[i].dev.name, attrs[a]);
			rmdir(path);
		}
		snprintf(path, sizeof(path), "%s/class/infiniband/%s/ports/1/gid_attrs", root,
			 devs[i].dev.name);
		while (strlen(path) > strlen(root) + strlen("/class/infiniband")) {
			rmdir(path);
			*strrchr(path, '/') = '\0';
		}
	}
	snprintf(path, sizeof(path), "%s/class/infiniband", root);
	rmdir(path);
	snprintf(path, sizeof(path), "%s/class", root);
	rmdir(path);
	rmdir(root);
}

/* ---- CQEs (the NIC side) ---- */

static void raise_event(struct fcq *c)
{
	struct fch *ch;
	uintptr_t v = (uintptr_t)&c->cq;

	if (!c->armed || c->cq.channel == NULL)
		return;
	c->armed = false;
	c->events++;
	nic.st.events++;
	ch = (struct fch *)c->cq.channel;
	if (write(ch->wfd, &v, sizeof(v)) != (ssize_t)sizeof(v))
		bad("completion channel: event lost");
}

/* Write one CQE. Never into a slot the consumer index has not given back. */
static void put_cqe_scat(struct fcq *c, uint8_t opcode, uint16_t counter, uint8_t sq_opcode,
			 uint32_t qpn, uint32_t byte_cnt, uint8_t syndrome, const uint8_t *imm_wire,
			 const void *scat, unsigned scat_len)
{
	uint32_t ci = be32toh(__atomic_load_n(&c->dbrec[0], __ATOMIC_ACQUIRE)) & 0xffffff;
	uint8_t *e = c->buf + (size_t)(c->pi & (c->cnt - 1)) * 64;
	uint8_t owner = (c->pi & c->cnt) ? 1 : 0;

	if (((c->pi - ci) & 0xffffff) >= c->cnt) {
		nic.st.cq_overruns++;
		bad("CQ 0x%x overrun: %u CQEs written, consumer index %u, %u entries", c->cqn,
		    c->pi, ci, c->cnt);
		return;
	}
	memset(e, 0, 63);
	if (scat != NULL)
		memcpy(e, scat, scat_len); /* bytes 0..31 of the CQE */
	if (imm_wire != NULL)
		memcpy(e + 36, imm_wire, 4);
	wr32(e + 44, byte_cnt);
	if (syndrome) {
		e[54] = 0x68; /* vendor syndrome: a value, checked as passed through */
		e[55] = syndrome;
	}
	wr32(e + 56, (uint32_t)sq_opcode << 24 | qpn);
	e[60] = (uint8_t)(counter >> 8);
	e[61] = (uint8_t)counter;
	/* The owner byte last: from then on the CQE is the consumer's. */
	__atomic_store_n(&e[63], (uint8_t)(opcode << 4 | (scat != NULL ? 0x4 : 0) | owner),
			 __ATOMIC_RELEASE);
	c->pi++;
	nic.st.cqes++;
	raise_event(c);
}

static void put_cqe(struct fcq *c, uint8_t opcode, uint16_t counter, uint8_t sq_opcode,
		    uint32_t qpn, uint32_t byte_cnt, uint8_t syndrome, const uint8_t *imm_wire)
{
	put_cqe_scat(c, opcode, counter, sq_opcode, qpn, byte_cnt, syndrome, imm_wire, NULL, 0);
}

static void req_error(struct fqp *q, uint16_t counter, uint8_t opcode, uint8_t syndrome)
{
	/* An error completes whatever the signaling, and takes the QP to error. */
	put_cqe(q->scq, CQE_REQ_ERR, counter, opcode, q->qp.qp_num, 0, syndrome, NULL);
	nic.st.err_cqes++;
	nic.st.last_syndrome = syndrome;
	q->state = IBV_QPS_ERR;
	q->next_try_ns = 0;
}

/* ---- the NIC ---- */

static struct fmr *find_mr(struct fdev *dev, uint32_t key, bool remote)
{
	for (unsigned i = 0; i < nic.n_mr; i++) {
		struct fmr *m = nic.mrs[i];

		if (m->live && m->dev == dev && (remote ? m->mr.rkey : m->mr.lkey) == key)
			return m;
	}
	return NULL;
}

static bool in_mr(const struct fmr *m, uint64_t addr, uint64_t len)
{
	return m != NULL && addr >= m->base && len <= m->len && addr - m->base <= m->len - len;
}

static struct fqp *find_qp(uint32_t qpn)
{
	for (struct fqp *q = nic.qps; q != NULL; q = q->next)
		if (q->qp.qp_num == qpn)
			return q;
	return NULL;
}

static struct fdev *dev_by_gid(const uint8_t gid[16])
{
	for (int i = 0; i < N_DEV; i++)
		for (int g = 0; g < GID_TBL; g++)
			if (devs[i].gid_type[g] >= 0 && memcmp(devs[i].gid[g], gid, 16) == 0)
				return &devs[i];
	return NULL;
}

static uint8_t *bb_at(struct fqp *q, uint16_t counter)
{
	return q->sq + (size_t)(counter & (q->wqe_cnt - 1)) * WQEBB;
}

/* No answer from the responder: wait and try again; 0 while waiting, else the syndrome. */
static uint8_t retry(struct fqp *q, uint64_t now, bool rnr, uint64_t interval)
{
	unsigned *n = rnr ? &q->rnr_tries : &q->tries;
	unsigned limit = rnr ? q->rnr_retry : q->retry_cnt;

	if (q->next_try_ns == 0) {
		q->next_try_ns = now + interval;
		return 0;
	}
	if (now < q->next_try_ns)
		return 0;
	if (rnr)
		nic.st.rnr_naks++;
	else
		nic.st.retries++;
	/* rnr_retry 7 means for ever (IB spec); retry_cnt 7 is 7 tries on ConnectX */
	if (!(rnr && limit == 7) && ++*n > limit)
		return rnr ? SYN_RNR : SYN_RETRY;
	q->next_try_ns = now + interval;
	return 0;
}

/*
 * The WQE at hw_ci, which the doorbell record announced. Returns its WQEBBs when it is
 * done (executed, failed or acknowledged as a duplicate), 0 while it waits for a retry.
 */
static unsigned exec_wqe(struct fqp *q, uint16_t pending, uint64_t now)
{
	uint8_t *c = bb_at(q, q->hw_ci);
	uint32_t w0 = rd32(c), w1 = rd32(c + 4);
	uint8_t opcode = (uint8_t)w0, fm_ce_se = c[11];
	unsigned ds = w1 & 0x3f, nbb = (ds + 3) / 4, nsge, ce = fm_ce_se & 0x0c;
	uint64_t raddr = rd64(c + 16), total = 0;
	uint32_t rkey = rd32(c + 24);
	struct sge sg[64];
	const uint8_t *p = c + 32;
	bool sig = ce == 0x08;
	struct fqp *peer;
	struct fmr *rm;
	uint8_t syn;

	if ((w0 >> 24) != 0 || (uint16_t)(w0 >> 8) != q->hw_ci)
		bad("QP 0x%x WQE at %u: opmod %u, wqe_index %u", q->qp.qp_num, q->hw_ci, w0 >> 24,
		    (uint16_t)(w0 >> 8));
	if ((w1 >> 8) != q->qp.qp_num)
		bad("QP 0x%x WQE at %u: qpn 0x%x", q->qp.qp_num, q->hw_ci, w1 >> 8);
	if (ds < 2 || (w1 & 0xc0) != 0 || nbb > pending) {
		bad("QP 0x%x WQE at %u: ds %u (%u WQEBBs announced)", q->qp.qp_num, q->hw_ci, ds,
		    pending);
		req_error(q, q->hw_ci, opcode, SYN_LOC_QP_OP);
		return 1;
	}
	if (opcode != OP_WRITE && opcode != OP_WRITE_IMM && opcode != OP_READ) {
		bad("QP 0x%x WQE at %u: opcode 0x%x", q->qp.qp_num, q->hw_ci, opcode);
		req_error(q, q->hw_ci, opcode, SYN_LOC_QP_OP);
		return nbb;
	}
	if (c[8] != 0 || c[9] != 0 || c[10] != 0 || (fm_ce_se & ~0x0c) != 0 || ce == 0x04)
		bad("QP 0x%x WQE at %u: signature/reserved/fm_ce_se %02x %02x %02x %02x",
		    q->qp.qp_num, q->hw_ci, c[8], c[9], c[10], fm_ce_se);
	if (opcode != OP_WRITE_IMM && rd32(c + 12) != 0)
		bad("QP 0x%x WQE at %u: immediate 0x%x on opcode 0x%x", q->qp.qp_num, q->hw_ci,
		    rd32(c + 12), opcode);
	if (rd32(c + 28) != 0)
		bad("QP 0x%x WQE at %u: raddr segment reserved word set", q->qp.qp_num, q->hw_ci);
	nsge = ds - 2;
	if (nsge > q->init.cap.max_send_sge)
		bad("QP 0x%x WQE at %u: %u SGEs, the QP was created for %u", q->qp.qp_num, q->hw_ci,
		    nsge, q->init.cap.max_send_sge);
	for (unsigned i = 0; i < nsge && i < 64; i++) {
		if (p == q->sq + (size_t)q->wqe_cnt * WQEBB)
			p = q->sq;
		sg[i].len = rd32(p);
		sg[i].lkey = rd32(p + 4);
		sg[i].addr = rd64(p + 8);
		if (sg[i].len == 0 || (sg[i].len & 0x80000000u))
			bad("QP 0x%x WQE at %u: SGE %u byte_count 0x%x (0 is 2 GiB, bit 31 inline)",
			    q->qp.qp_num, q->hw_ci, i, sg[i].len);
		total += sg[i].len;
		p += 16;
	}

	if (q->state == IBV_QPS_ERR) {
		nic.st.wqes++;
		if (sig || !nic.flush_signaled_only) {
			put_cqe(q->scq, CQE_REQ_ERR, q->hw_ci, opcode, q->qp.qp_num, 0, SYN_FLUSH,
				NULL);
			nic.st.flush_cqes++;
		}
		return nbb;
	}

	/* local side: lkeys, bounds, and LOCAL_WRITE for what a READ lands in */
	syn = total > MAX_MSG ? SYN_LOC_LEN : 0;
	for (unsigned i = 0; i < nsge && syn == 0; i++) {
		struct fmr *m = find_mr(q->dev, sg[i].lkey, false);

		if (!in_mr(m, sg[i].addr, sg[i].len) ||
		    (opcode == OP_READ && !(m->access & IBV_ACCESS_LOCAL_WRITE)))
			syn = SYN_LOC_PROT;
	}
	if (syn != 0) {
		nic.st.wqes++;
		req_error(q, q->hw_ci, opcode, syn);
		return nbb;
	}

	/* the wire: a responder connected back to us, ready, at our PSN */
	peer = find_qp(q->dest_qpn);
	if (peer == NULL || dev_by_gid(q->dgid) != peer->dev || peer->dest_qpn != q->qp.qp_num ||
	    (peer->state != IBV_QPS_RTR && peer->state != IBV_QPS_RTS) ||
	    (((q->sq_psn - peer->rq_psn) & 0xffffff) != 0 &&
	     ((peer->rq_psn - q->sq_psn) & 0xffffff) >= 0x800000)) {
		syn = retry(q, now, false, nic.retry_ns);
		if (syn == 0)
			return 0;
		nic.st.wqes++;
		req_error(q, q->hw_ci, opcode, syn);
		return nbb;
	}
	if (q->sq_psn != peer->rq_psn) {
		/* Behind: a duplicate. The responder acknowledges it and does nothing (IB spec
		 * 9.9.2.2); the requester takes the ACK for its WQE: data silently lost. */
		nic.st.wqes++;
		nic.st.dup_dropped++;
		q->sq_psn = (q->sq_psn + 1) & 0xffffff;
		q->tries = q->rnr_tries = 0;
		q->next_try_ns = 0;
		if (sig) {
			put_cqe(q->scq, CQE_REQ, q->hw_ci, opcode, q->qp.qp_num, (uint32_t)total, 0,
				NULL);
			nic.st.req_cqes++;
		}
		return nbb;
	}

	/* remote side: rkey on the responder's device (not checked for 0 bytes: IB spec) */
	rm = find_mr(peer->dev, rkey, true);
	if (total != 0 &&
	    (!in_mr(rm, raddr, total) ||
	     (opcode == OP_READ ? !(rm->access & IBV_ACCESS_REMOTE_READ) ||
					  !(peer->access & IBV_ACCESS_REMOTE_READ)
				: !(rm->access & IBV_ACCESS_REMOTE_WRITE) ||
					  !(peer->access & IBV_ACCESS_REMOTE_WRITE)))) {
		nic.st.wqes++;
		req_error(q, q->hw_ci, opcode, SYN_REM_ACC);
		/* the responder NAKs and goes to error too (IB spec 9.9.3.1.3, class C) */
		peer->state = IBV_QPS_ERR;
		peer->next_try_ns = 0;
		return nbb;
	}
	if (opcode == OP_WRITE_IMM && peer->rq_nic == peer->rq_head) {
		syn = retry(q, now, true, nic.retry_ns / 4);
		if (syn == 0)
			return 0;
		nic.st.wqes++;
		req_error(q, q->hw_ci, opcode, syn);
		return nbb;
	}

	if (sig && opcode == OP_READ && total <= 32 && total != 0 && q->scat_cqe) {
		/* the READ's data goes into its CQE, not to the SGEs */
		put_cqe_scat(q->scq, CQE_REQ, q->hw_ci, opcode, q->qp.qp_num, (uint32_t)total, 0,
			     NULL, (const void *)(uintptr_t)raddr, (unsigned)total);
		nic.st.req_cqes++;
		nic.st.scattered_cqes++;
		sig = false;
	} else {
		nic_move(opcode == OP_READ, raddr, sg, nsge);
	}
	nic.st.wqes++;
	nic.st.bytes += total;
	q->sq_psn = (q->sq_psn + 1) & 0xffffff;
	peer->rq_psn = (peer->rq_psn + 1) & 0xffffff;
	q->tries = q->rnr_tries = 0;
	q->next_try_ns = 0;
	if (opcode == OP_WRITE_IMM) {
		put_cqe(peer->rcq, CQE_RESP_WIMM, (uint16_t)peer->rq_nic, 0, peer->qp.qp_num,
			(uint32_t)total, 0, c + 12);
		peer->rq_nic++;
		nic.st.recv_cqes++;
	}
	if (sig) {
		put_cqe(q->scq, CQE_REQ, q->hw_ci, opcode, q->qp.qp_num, (uint32_t)total, 0, NULL);
		nic.st.req_cqes++;
	}
	return nbb;
}

/* One QP's turn. Returns the work done. */
static unsigned qp_step(struct fqp *q, uint64_t now)
{
	unsigned work = 0;
	uint16_t announced;

	if (q->state == IBV_QPS_RESET)
		return 0;
	/* A QP in error flushes the receives it holds. */
	while (q->state == IBV_QPS_ERR && q->rq_nic != q->rq_head) {
		put_cqe(q->rcq, CQE_RESP_ERR, (uint16_t)q->rq_nic, 0, q->qp.qp_num, 0, SYN_FLUSH,
			NULL);
		q->rq_nic++;
		nic.st.recv_flushes++;
		work++;
	}
	announced = (uint16_t)be32toh(__atomic_load_n(&q->dbrec[1], __ATOMIC_ACQUIRE));
	if ((uint16_t)(announced - q->hw_ci) > q->wqe_cnt) {
		bad("QP 0x%x: doorbell record %u runs %u WQEBBs past the NIC at %u (SQ of %u)",
		    q->qp.qp_num, announced, (uint16_t)(announced - q->hw_ci), q->hw_ci,
		    q->wqe_cnt);
		return work;
	}
	while (q->hw_ci != announced && work < 64) {
		unsigned nbb;

		if (q->state != IBV_QPS_RTS && q->state != IBV_QPS_ERR)
			break; /* not sending yet: the WQEs wait */
		if (q->state == IBV_QPS_RTS && nic.wedge)
			break; /* wedged: no CQE, no error, no retransmission */
		nbb = exec_wqe(q, (uint16_t)(announced - q->hw_ci), now);
		if (nbb == 0)
			break;
		q->hw_ci = (uint16_t)(q->hw_ci + nbb);
		work++;
	}
	return work;
}

/* Arm doorbells rung on DV CQs since the last pass: check them, then arm. */
static unsigned dv_arms(void)
{
	unsigned n = 0;

	for (struct fcq *c = nic.cqs; c != NULL; c = c->next) {
		uint64_t v = c->dv ? __atomic_exchange_n(&c->uar[4], 0, __ATOMIC_ACQ_REL) : 0;
		uint8_t b[8];
		uint32_t w, cqn, rec;

		if (v == 0)
			continue;
		n++;
		nic.st.arm_doorbells++;
		memcpy(b, &v, 8);
		w = rd32(b);
		cqn = rd32(b + 4);
		rec = be32toh(__atomic_load_n(&c->dbrec[1], __ATOMIC_ACQUIRE));
		if (cqn != c->cqn || rec != w || (w >> 24 & 0xf) != 0) {
			bad("CQ 0x%x arm doorbell %08x %08x: want the arm word (cmd 0) and CQ "
			    "number "
			    "0x%x, record %08x",
			    c->cqn, w, cqn, c->cqn, rec);
			continue;
		}
		if ((w >> 28) != (c->events & 3)) {
			nic.st.stale_arms++; /* an arm from before the last event: ignored */
			continue;
		}
		c->armed = true;
		c->arm_ci = w & 0xffffff;
		/* CQEs already past the armed index fire at once, as on the hardware */
		if (((c->pi - c->arm_ci) & 0xffffff) != 0)
			raise_event(c);
	}
	return n;
}

static void *nic_main(void *arg)
{
	unsigned idle = 0;

	(void)arg;
	for (;;) {
		unsigned work = 0;
		uint64_t now = kvl_now_ns();

		pthread_mutex_lock(&nic.lock);
		if (nic.stop) {
			pthread_mutex_unlock(&nic.lock);
			return NULL;
		}
		work += dv_arms();
		for (struct fqp *q = nic.qps; q != NULL; q = q->next)
			work += qp_step(q, now);
		pthread_mutex_unlock(&nic.lock);
		if (work != 0) {
			idle = 0;
		} else if (++idle < 200) {
			sched_yield();
		} else {
			struct timespec ts = { 0, 20000 };

			nanosleep(&ts, NULL);
		}
	}
}

/* ---- devices ---- */

struct ibv_device **ibv_get_device_list(int *num)
{
	struct ibv_device **l = calloc(N_DEV + 1, sizeof(*l));

	if (l == NULL) {
		errno = ENOMEM;
		return NULL;
	}
	setup_devs();
	for (int i = 0; i < N_DEV; i++)
		l[i] = &devs[i].dev;
	if (num != NULL)
		*num = N_DEV;
	return l;
}

void ibv_free_device_list(struct ibv_device **list)
{
	free(list);
}

const char *ibv_get_device_name(struct ibv_device *device)
{
	return device->name;
}

bool mlx5dv_is_supported(struct ibv_device *device)
{
	for (int i = 0; i < N_DEV; i++)
		if (device == &devs[i].dev)
			return true;
	return false;
}

static int poll_cq_op(struct ibv_cq *cq, int n, struct ibv_wc *wc);
static int req_notify_op(struct ibv_cq *cq, int solicited);
static int post_recv_op(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad_wr);
static struct ibv_cq_ex *create_cq_ex_op(struct ibv_context *ctx, struct ibv_cq_init_attr_ex *a);
static int modify_cq_op(struct ibv_cq *cq, struct ibv_modify_cq_attr *a);
static int query_device_ex_op(struct ibv_context *ctx, const struct ibv_query_device_ex_input *in,
			      struct ibv_device_attr_ex *a, size_t sz);

struct ibv_context *ibv_open_device(struct ibv_device *device)
{
	struct fctx *f;

	if (!mlx5dv_is_supported(device)) {
		errno = ENODEV;
		return NULL;
	}
	f = calloc(1, sizeof(*f));
	if (f == NULL) {
		errno = ENOMEM;
		return NULL;
	}
	f->fd = (struct fdev *)device;
	f->vctx.sz = sizeof(f->vctx);
	f->vctx.context.device = device;
	f->vctx.context.cmd_fd = -1;
	f->vctx.context.async_fd = -1;
	f->vctx.context.num_comp_vectors = 1;
	f->vctx.context.abi_compat = __VERBS_ABI_IS_EXTENDED;
	f->vctx.context.ops.poll_cq = poll_cq_op;
	f->vctx.context.ops.req_notify_cq = req_notify_op;
	f->vctx.context.ops.post_recv = post_recv_op;
	/* the extended verbs a ConnectX has and verbs.c asks for; create_qp_ex (the ibv_wr_*
	 * API) is not modelled: ibv_create_qp_ex takes ibv_create_qp for a PD-only mask */
	f->vctx.create_cq_ex = create_cq_ex_op;
	f->vctx.modify_cq = modify_cq_op;
	f->vctx.query_device_ex = query_device_ex_op;
	pthread_mutex_init(&f->vctx.context.mutex, NULL);
	pthread_mutex_lock(&nic.lock);
	if (nic.opened++ == 0 && !nic.running) {
		nic.stop = false;
		if (pthread_create(&nic.thread, NULL, nic_main, NULL) != 0) {
			nic.opened--;
			pthread_mutex_unlock(&nic.lock);
			free(f);
			errno = EAGAIN;
			return NULL;
		}
		nic.running = true;
	}
	pthread_mutex_unlock(&nic.lock);
	return &f->vctx.context;
}

int ibv_close_device(struct ibv_context *ctx)
{
	struct fctx *f = (struct fctx *)((uint8_t *)ctx - offsetof(struct fctx, vctx.context));
	bool join = false;

	pthread_mutex_lock(&nic.lock);
	for (struct fqp *q = nic.qps; q != NULL; q = q->next)
		if (q->qp.context == ctx)
			bad("ibv_close_device(%s) with QP 0x%x still there", f->fd->dev.name,
			    q->qp.qp_num);
	if (--nic.opened == 0 && nic.running) {
		nic.stop = true;
		nic.running = false;
		join = true;
		/* the last device closed: the MR table starts again, deregistered entries freed */
		for (unsigned i = 0; i < nic.n_mr; i++) {
			if (nic.mrs[i]->live)
				bad("ibv_close_device: MR %u still registered", i);
			else
				free(nic.mrs[i]);
		}
		nic.n_mr = 0;
	}
	pthread_mutex_unlock(&nic.lock);
	if (join)
		pthread_join(nic.thread, NULL);
	free(f);
	return 0;
}

int ibv_query_device(struct ibv_context *ctx, struct ibv_device_attr *a)
{
	(void)ctx;
	memset(a, 0, sizeof(*a));
	snprintf(a->fw_ver, sizeof(a->fw_ver), "22.99.0000 (model)");
	a->vendor_id = 0x02c9; /* Mellanox */
	a->vendor_part_id = 4123;
	a->max_mr_size = ~0ull;
	a->page_size_cap = 0xfffffffffffff000ull;
	a->max_qp = 1 << 17;
	a->max_qp_wr = MAX_QP_WR;
	a->max_sge = MAX_SEND_SGE;
	a->max_cq = 1 << 16;
	a->max_cqe = MAX_CQE;
	a->max_mr = 1 << 16;
	a->max_pd = 1 << 16;
	a->max_qp_rd_atom = 16;
	a->max_qp_init_rd_atom = 16;
	a->max_res_rd_atom = 1 << 20;
	a->phys_port_cnt = 1;
	return 0;
}

static int query_device_ex_op(struct ibv_context *ctx, const struct ibv_query_device_ex_input *in,
			      struct ibv_device_attr_ex *a, size_t sz)
{
	(void)in;
	if (sz < sizeof(*a))
		return EINVAL;
	memset(a, 0, sz);
	ibv_query_device(ctx, &a->orig_attr);
	a->cq_mod_caps.max_cq_count = MAX_CQ_COUNT;
	a->cq_mod_caps.max_cq_period = MAX_CQ_PERIOD;
	a->phys_port_cnt_ex = 1;
	return 0;
}

/* What ___ibv_query_port calls when the context gives no query_port op: it zeroed the
 * whole struct ibv_port_attr before. */
int ibv_query_port(struct ibv_context *ctx, uint8_t port, struct _compat_ibv_port_attr *pa)
{
	struct ibv_port_attr *a = (struct ibv_port_attr *)pa;

	(void)ctx;
	if (port != 1)
		return EINVAL;
	a->state = IBV_PORT_ACTIVE;
	a->max_mtu = IBV_MTU_4096;
	a->active_mtu = IBV_MTU_4096;
	a->gid_tbl_len = GID_TBL;
	a->max_msg_sz = MAX_MSG;
	a->pkey_tbl_len = 1;
	a->lid = 0;
	a->link_layer = IBV_LINK_LAYER_ETHERNET;
	a->active_width = 2;
	a->active_speed = 32;
	a->phys_state = 5; /* LinkUp */
	return 0;
}

int ibv_query_gid(struct ibv_context *ctx, uint8_t port, int index, union ibv_gid *gid)
{
	struct fdev *d = dev_of(ctx);

	if (port != 1 || index < 0 || index >= GID_TBL)
		return -1;
	memcpy(gid->raw, d->gid[index], 16); /* an empty entry reads as zeros */
	return 0;
}

int _ibv_query_gid_ex(struct ibv_context *ctx, uint32_t port, uint32_t index,
		      struct ibv_gid_entry *e, uint32_t flags, size_t sz)
{
	struct fdev *d = dev_of(ctx);

	if (flags != 0 || sz < sizeof(*e) || port != 1 || index >= GID_TBL)
		return EINVAL;
	if (d->gid_type[index] < 0)
		return ENODATA;
	memset(e, 0, sizeof(*e));
	memcpy(e->gid.raw, d->gid[index], 16);
	e->gid_index = index;
	e->port_num = port;
	e->gid_type = (uint32_t)d->gid_type[index];
	e->ndev_ifindex = 2 + (uint32_t)(d - devs);
	return 0;
}

const char *ibv_port_state_str(enum ibv_port_state s)
{
	static const char *const n[] = { "NOP", "DOWN", "INIT", "ARMED", "ACTIVE", "ACTIVE_DEFER" };

	return (unsigned)s < 6 ? n[s] : "invalid state";
}

struct ibv_pd *ibv_alloc_pd(struct ibv_context *ctx)
{
	struct ibv_pd *pd = calloc(1, sizeof(*pd));

	if (pd == NULL) {
		errno = ENOMEM;
		return NULL;
	}
	pd->context = ctx;
	pd->handle = 1;
	return pd;
}

int ibv_dealloc_pd(struct ibv_pd *pd)
{
	pthread_mutex_lock(&nic.lock);
	for (unsigned i = 0; i < nic.n_mr; i++)
		if (nic.mrs[i]->live && nic.mrs[i]->mr.pd == pd) {
			pthread_mutex_unlock(&nic.lock);
			return EBUSY;
		}
	pthread_mutex_unlock(&nic.lock);
	free(pd);
	return 0;
}

/* ---- memory ---- */

/* The kernel's rule for pinning (ib_umem_get): past RLIMIT_MEMLOCK only with CAP_IPC_LOCK. */
static bool may_pin(uint64_t more)
{
	struct __user_cap_header_struct h = { .version = _LINUX_CAPABILITY_VERSION_3 };
	struct __user_cap_data_struct cd[2];
	struct rlimit rl;
	uint64_t pinned = 0;

	for (unsigned i = 0; i < nic.n_mr; i++)
		if (nic.mrs[i]->live)
			pinned += nic.mrs[i]->len;
	if (getrlimit(RLIMIT_MEMLOCK, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY ||
	    pinned + more <= rl.rlim_cur)
		return true;
	return syscall(SYS_capget, &h, cd) == 0 &&
	       (cd[CAP_IPC_LOCK / 32].effective & (1u << (CAP_IPC_LOCK % 32))) != 0;
}

struct ibv_mr *ibv_reg_mr_iova2(struct ibv_pd *pd, void *addr, size_t len, uint64_t iova,
				unsigned int access)
{
	struct fmr *m;

	if (pd == NULL || addr == NULL || len == 0 || iova != (uintptr_t)addr ||
	    ((access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) &&
	     !(access & IBV_ACCESS_LOCAL_WRITE))) {
		errno = EINVAL; /* remote write without local write: refused, as by the kernel */
		return NULL;
	}
	m = calloc(1, sizeof(*m));
	if (m == NULL) {
		errno = ENOMEM;
		return NULL;
	}
	pthread_mutex_lock(&nic.lock);
	if (nic.n_mr == sizeof(nic.mrs) / sizeof(nic.mrs[0]) || !may_pin(len)) {
		pthread_mutex_unlock(&nic.lock);
		free(m);
		errno = ENOMEM;
		return NULL;
	}
	m->dev = dev_of(pd->context);
	m->base = (uintptr_t)addr;
	m->len = len;
	m->access = access;
	m->live = true;
	m->mr.context = pd->context;
	m->mr.pd = pd;
	m->mr.addr = addr;
	m->mr.length = len;
	m->mr.handle = nic.n_mr;
	/* mlx5 keys: index << 8 | a variant byte; lkey == rkey */
	m->mr.lkey = m->mr.rkey = (nic.next_key++ << 8) | 0x42;
	nic.mrs[nic.n_mr++] = m;
	pthread_mutex_unlock(&nic.lock);
	return &m->mr;
}

struct ibv_mr *ibv_reg_mr(struct ibv_pd *pd, void *addr, size_t len, int access)
{
	return ibv_reg_mr_iova2(pd, addr, len, (uintptr_t)addr, (unsigned)access);
}

int ibv_dereg_mr(struct ibv_mr *mr)
{
	struct fmr *m = (struct fmr *)mr;

	pthread_mutex_lock(&nic.lock);
	m->live = false; /* kept in the table: entries are never reused */
	pthread_mutex_unlock(&nic.lock);
	return 0;
}

/* ---- completion channels and CQs ---- */

struct ibv_comp_channel *ibv_create_comp_channel(struct ibv_context *ctx)
{
	struct fch *c = calloc(1, sizeof(*c));
	int p[2];

	if (c == NULL || pipe2(p, O_CLOEXEC) != 0) {
		free(c);
		errno = c ? errno : ENOMEM;
		return NULL;
	}
	c->ch.context = ctx;
	c->ch.fd = p[0];
	c->wfd = p[1];
	/* the NIC never blocks on a full pipe: it would be an event lost, and said */
	fcntl(p[1], F_SETFL, fcntl(p[1], F_GETFL) | O_NONBLOCK);
	return &c->ch;
}

int ibv_destroy_comp_channel(struct ibv_comp_channel *ch)
{
	struct fch *c = (struct fch *)ch;

	pthread_mutex_lock(&nic.lock);
	for (struct fcq *q = nic.cqs; q != NULL; q = q->next)
		if (q->cq.channel == ch) {
			pthread_mutex_unlock(&nic.lock);
			return EBUSY;
		}
	pthread_mutex_unlock(&nic.lock);
	close(c->ch.fd);
	close(c->wfd);
	free(c);
	return 0;
}

int ibv_get_cq_event(struct ibv_comp_channel *ch, struct ibv_cq **cq, void **cq_context)
{
	uintptr_t v;

	if (read(ch->fd, &v, sizeof(v)) != (ssize_t)sizeof(v))
		return -1; /* errno from read: EAGAIN on a non-blocking channel */
	*cq = (struct ibv_cq *)v;
	*cq_context = (*cq)->cq_context;
	return 0;
}

void ibv_ack_cq_events(struct ibv_cq *cq, unsigned int n)
{
	struct fcq *c = (struct fcq *)cq;

	pthread_mutex_lock(&nic.lock);
	c->acked += n;
	if (c->acked > c->events)
		bad("CQ 0x%x: %u events acked, %u raised", c->cqn, c->acked, c->events);
	pthread_mutex_unlock(&nic.lock);
}

static struct fcq *cq_new(struct ibv_context *ctx, int cqe, void *cq_context,
			  struct ibv_comp_channel *ch, int comp_vector)
{
	struct fcq *c;

	if (cqe <= 0 || cqe > MAX_CQE || comp_vector != 0 || (ch != NULL && ch->context != ctx)) {
		errno = EINVAL;
		return NULL;
	}
	c = calloc(1, sizeof(*c));
	if (c == NULL) {
		errno = ENOMEM;
		return NULL;
	}
	/* rdma-core's mlx5: cqe + 1 rounded up to a power of two; one slot is never used */
	c->cnt = pow2_at_least((uint64_t)cqe + 1);
	c->buf = zalloc((size_t)c->cnt * 64, 4096);
	c->dbrec = zalloc(64, 64);
	if (c->buf == NULL || c->dbrec == NULL) {
		free(c->buf);
		free(c->dbrec);
		free(c);
		errno = ENOMEM;
		return NULL;
	}
	/* as the hardware leaves a new CQ: every entry INVALID, owner bit set */
	for (uint32_t i = 0; i < c->cnt; i++)
		c->buf[(size_t)i * 64 + 63] = CQE_INVALID << 4 | 1;
	c->dev = dev_of(ctx);
	c->cq.context = ctx;
	c->cq.channel = ch;
	c->cq.cq_context = cq_context;
	c->cq.cqe = (int)c->cnt - 1;
	pthread_mutex_init(&c->cq.mutex, NULL);
	pthread_cond_init(&c->cq.cond, NULL);
	pthread_mutex_lock(&nic.lock);
	c->cqn = nic.next_cqn++;
	c->cq.handle = c->cqn;
	c->next = nic.cqs;
	nic.cqs = c;
	pthread_mutex_unlock(&nic.lock);
	return c;
}

struct ibv_cq *ibv_create_cq(struct ibv_context *ctx, int cqe, void *cq_context,
			     struct ibv_comp_channel *ch, int comp_vector)
{
	struct fcq *c = cq_new(ctx, cqe, cq_context, ch, comp_vector);

	return c != NULL ? &c->cq : NULL;
}

int ibv_destroy_cq(struct ibv_cq *cq)
{
	struct fcq *c = (struct fcq *)cq, **pp;

	pthread_mutex_lock(&nic.lock);
	for (struct fqp *q = nic.qps; q != NULL; q = q->next)
		if (q->scq == c || q->rcq == c) {
			pthread_mutex_unlock(&nic.lock);
			return EBUSY;
		}
	if (c->acked != c->events)
		bad("ibv_destroy_cq(0x%x) with %u of %u events not acked: it would wait for ever",
		    c->cqn, c->events - c->acked, c->events);
	for (pp = &nic.cqs; *pp != NULL; pp = &(*pp)->next)
		if (*pp == c) {
			*pp = c->next;
			break;
		}
	pthread_mutex_unlock(&nic.lock);
	free(c->buf);
	free(c->dbrec);
	free(c);
	return 0;
}

static int req_notify_op(struct ibv_cq *cq, int solicited)
{
	struct fcq *c = (struct fcq *)cq;
	uint32_t ci;

	(void)solicited;
	pthread_mutex_lock(&nic.lock);
	if (c->dv)
		bad("ibv_req_notify_cq on CQ 0x%x, read through mlx5dv: rdma-core would arm it "
		    "with a consumer index it no longer keeps",
		    c->cqn);
	c->armed = true;
	/* A CQE already there past the consumer index fires at once, as on the hardware. */
	ci = be32toh(c->dbrec[0]) & 0xffffff;
	if (((c->pi - ci) & 0xffffff) != 0)
		raise_event(c);
	pthread_mutex_unlock(&nic.lock);
	return 0;
}

static enum ibv_wc_status syndrome_status(uint8_t s)
{
	switch (s) {
	case SYN_LOC_LEN:
		return IBV_WC_LOC_LEN_ERR;
	case SYN_LOC_QP_OP:
		return IBV_WC_LOC_QP_OP_ERR;
	case SYN_LOC_PROT:
		return IBV_WC_LOC_PROT_ERR;
	case SYN_FLUSH:
		return IBV_WC_WR_FLUSH_ERR;
	case SYN_REM_ACC:
		return IBV_WC_REM_ACCESS_ERR;
	case SYN_RETRY:
		return IBV_WC_RETRY_EXC_ERR;
	case SYN_RNR:
		return IBV_WC_RNR_RETRY_EXC_ERR;
	default:
		return IBV_WC_GENERAL_ERR;
	}
}

/* Decode the next CQE of a verbs-polled CQ into @w as rdma-core's mlx5 provider does (receive
 * CQEs only: the send side is polled directly) and consume it. Under the lock; false if none. */
static bool poll_one(struct fcq *c, struct ibv_wc *w)
{
	uint8_t *e = c->buf + (size_t)(c->ci & (c->cnt - 1)) * 64;
	uint8_t op_own = __atomic_load_n(&e[63], __ATOMIC_ACQUIRE), op = op_own >> 4;
	uint32_t qpn = rd32(e + 56) & 0xffffff;
	uint16_t counter = (uint16_t)(e[60] << 8 | e[61]);
	struct fqp *q;

	if (c->dv)
		bad("ibv_poll_cq on CQ 0x%x, which mlx5dv_init_obj handed to direct polling",
		    c->cqn);
	if (op == CQE_INVALID || (op_own & 1) != ((c->ci & c->cnt) != 0))
		return false;
	memset(w, 0, sizeof(*w));
	q = find_qp(qpn);
	w->qp_num = qpn;
	if (q == NULL || (op != CQE_RESP_WIMM && op != CQE_RESP_ERR)) {
		bad("CQ 0x%x: CQE opcode 0x%x of QP 0x%x polled through verbs (the fake keeps "
		    "receive wr_ids only)",
		    c->cqn, op, qpn);
		w->status = IBV_WC_GENERAL_ERR;
	} else {
		if (counter != (uint16_t)q->rq_tail)
			bad("QP 0x%x: receive CQE for RQ slot %u, expected %u", qpn, counter,
			    (uint16_t)q->rq_tail);
		w->wr_id = q->rq_wrid[q->rq_tail++ & (q->rq_cnt - 1)];
		if (op == CQE_RESP_WIMM) {
			w->status = IBV_WC_SUCCESS;
			w->opcode = IBV_WC_RECV_RDMA_WITH_IMM;
			w->wc_flags = IBV_WC_WITH_IMM;
			memcpy(&w->imm_data, e + 36, 4); /* wire order, as rdma-core */
			w->byte_len = rd32(e + 44);
		} else {
			w->status = syndrome_status(e[55]);
			w->vendor_err = e[54];
			w->opcode = IBV_WC_RECV;
		}
	}
	c->ci++;
	__atomic_store_n(&c->dbrec[0], htobe32(c->ci & 0xffffff), __ATOMIC_RELEASE);
	return true;
}

static int poll_cq_op(struct ibv_cq *cq, int n, struct ibv_wc *wc)
{
	struct fcq *c = (struct fcq *)cq;
	int got = 0;

	pthread_mutex_lock(&nic.lock);
	while (got < n && poll_one(c, &wc[got]))
		got++;
	pthread_mutex_unlock(&nic.lock);
	return got;
}

/* The extended CQ (ibv_create_cq_ex), as a ConnectX offers it: start/next take one CQE and
 * move the consumer index at once (the provider does it at end_poll: not observable here). */
/* The body of ibv_start_poll and ibv_next_poll, inlined into both so that neither calls
 * (or tail-jumps into) the other: the verbs_cost_model benchmark has callgrind stop counting
 * inside each provider entry point, which a jump from one into the other would undo. */
static inline __attribute__((always_inline)) int poll_next_cqe(struct ibv_cq_ex *cqx)
{
	struct fcq *c = (struct fcq *)cqx;
	const uint8_t *e = c->buf + (size_t)(c->ci & (c->cnt - 1)) * 64;
	uint8_t op_own;
	bool got;

	if (c->dv)
		bad("ibv_start_poll on CQ 0x%x, which mlx5dv_init_obj handed to direct polling",
		    c->cqn);
	/* As rdma-core polls a single-threaded CQ: the owner byte first, without a lock (the
	 * consumer index is the polling thread's; the NIC writes the owner byte last). */
	op_own = __atomic_load_n(&e[63], __ATOMIC_ACQUIRE);
	if ((op_own >> 4) == CQE_INVALID || (op_own & 1) != ((c->ci & c->cnt) != 0))
		return ENOENT;
	pthread_mutex_lock(&nic.lock);
	got = poll_one(c, &c->cur);
	pthread_mutex_unlock(&nic.lock);
	if (!got)
		return ENOENT;
	cqx->status = c->cur.status;
	cqx->wr_id = c->cur.wr_id;
	return 0;
}

static int next_poll_op(struct ibv_cq_ex *cqx)
{
	return poll_next_cqe(cqx);
}

static int start_poll_op(struct ibv_cq_ex *cqx, struct ibv_poll_cq_attr *attr)
{
	if (attr->comp_mask != 0)
		return EINVAL;
	return poll_next_cqe(cqx);
}

static void end_poll_op(struct ibv_cq_ex *cqx)
{
	(void)cqx;
}

static enum ibv_wc_opcode read_opcode_op(struct ibv_cq_ex *cqx)
{
	return ((struct fcq *)cqx)->cur.opcode;
}

static uint32_t read_vendor_err_op(struct ibv_cq_ex *cqx)
{
	return ((struct fcq *)cqx)->cur.vendor_err;
}

static uint32_t read_byte_len_op(struct ibv_cq_ex *cqx)
{
	return ((struct fcq *)cqx)->cur.byte_len;
}

static __be32 read_imm_data_op(struct ibv_cq_ex *cqx)
{
	return ((struct fcq *)cqx)->cur.imm_data;
}

static uint32_t read_qp_num_op(struct ibv_cq_ex *cqx)
{
	return ((struct fcq *)cqx)->cur.qp_num;
}

static unsigned int read_wc_flags_op(struct ibv_cq_ex *cqx)
{
	return ((struct fcq *)cqx)->cur.wc_flags;
}

static struct ibv_cq_ex *create_cq_ex_op(struct ibv_context *ctx, struct ibv_cq_init_attr_ex *a)
{
	const uint64_t wc_ok = IBV_WC_EX_WITH_BYTE_LEN | IBV_WC_EX_WITH_IMM | IBV_WC_EX_WITH_QP_NUM;
	struct fcq *c;

	/* What the fake decodes; a ConnectX has more (timestamps, flow tags): refused here
	 * rather than read as zeros */
	if ((a->comp_mask & ~(uint32_t)IBV_CQ_INIT_ATTR_MASK_FLAGS) != 0 ||
	    (a->wc_flags & ~wc_ok) != 0 ||
	    ((a->comp_mask & IBV_CQ_INIT_ATTR_MASK_FLAGS) &&
	     (a->flags & ~(uint32_t)IBV_CREATE_CQ_ATTR_SINGLE_THREADED) != 0)) {
		errno = EOPNOTSUPP;
		return NULL;
	}
	c = cq_new(ctx, (int)a->cqe, a->cq_context, a->channel, (int)a->comp_vector);
	if (c == NULL)
		return NULL;
	c->cqx.start_poll = start_poll_op;
	c->cqx.next_poll = next_poll_op;
	c->cqx.end_poll = end_poll_op;
	c->cqx.read_opcode = read_opcode_op;
	c->cqx.read_vendor_err = read_vendor_err_op;
	c->cqx.read_wc_flags = read_wc_flags_op;
	c->cqx.read_qp_num = read_qp_num_op;
	if (a->wc_flags & IBV_WC_EX_WITH_BYTE_LEN)
		c->cqx.read_byte_len = read_byte_len_op;
	if (a->wc_flags & IBV_WC_EX_WITH_IMM)
		c->cqx.read_imm_data = read_imm_data_op;
	return &c->cqx;
}

static int modify_cq_op(struct ibv_cq *cq, struct ibv_modify_cq_attr *a)
{
	struct fcq *c = (struct fcq *)cq;

	/* cq_count is 16 bits: MAX_CQ_COUNT is all of them */
	if (a->attr_mask != IBV_CQ_ATTR_MODERATE || a->moderate.cq_period > MAX_CQ_PERIOD)
		return EINVAL;
	pthread_mutex_lock(&nic.lock);
	c->mod_count = a->moderate.cq_count;
	c->mod_period = a->moderate.cq_period;
	if (c->dv)
		nic.st.dv_cqs_moderated++;
	pthread_mutex_unlock(&nic.lock);
	return 0;
}

/*
 * Take @qpn's CQEs out of a verbs-polled CQ, as rdma-core's __mlx5_cq_clean does on a reset:
 * the others move up towards the producer end, the consumer index passes the freed slots.
 */
static void cq_clean(struct fcq *c, uint32_t qpn)
{
	uint32_t ci = c->ci, pi = c->pi, freed = 0;

	if (c->dv)
		return; /* DV-owned: rdma-core leaves it alone, the owner discards stale CQEs */
	for (uint32_t i = pi; i != ci; i--) {
		uint8_t *e = c->buf + (size_t)((i - 1) & (c->cnt - 1)) * 64;

		if ((rd32(e + 56) & 0xffffff) == qpn) {
			freed++;
		} else if (freed != 0) {
			uint8_t *d = c->buf + (size_t)((i - 1 + freed) & (c->cnt - 1)) * 64;
			uint8_t owner = d[63] & 1;

			memcpy(d, e, 64);
			d[63] = (uint8_t)((e[63] & ~1) | owner);
		}
	}
	if (freed != 0) {
		c->ci += freed;
		__atomic_store_n(&c->dbrec[0], htobe32(c->ci & 0xffffff), __ATOMIC_RELEASE);
		nic.st.cq_cleaned += freed;
	}
}

/* ---- QPs ---- */

struct ibv_qp *ibv_create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *a)
{
	struct fqp *q;
	struct fcq *s, *r;
	unsigned wqe_size;
	uint64_t sq_bytes;

	if (pd == NULL || a == NULL || a->send_cq == NULL || a->recv_cq == NULL || a->srq != NULL) {
		errno = EINVAL;
		return NULL;
	}
	if (a->qp_type != IBV_QPT_RC) {
		errno = EOPNOTSUPP;
		return NULL;
	}
	if (a->cap.max_send_wr == 0 || a->cap.max_send_wr > MAX_QP_WR ||
	    a->cap.max_send_sge > MAX_SEND_SGE || a->cap.max_recv_wr > MAX_QP_WR ||
	    a->cap.max_recv_sge > MAX_SEND_SGE || a->cap.max_inline_data > 0 ||
	    a->send_cq->context != pd->context || a->recv_cq->context != pd->context) {
		errno = EINVAL;
		return NULL;
	}
	s = (struct fcq *)a->send_cq;
	r = (struct fcq *)a->recv_cq;
	q = calloc(1, sizeof(*q));
	if (q == NULL) {
		errno = ENOMEM;
		return NULL;
	}
	/* rdma-core's mlx5 sizing (sq_overhead, calc_send_wqe): an RC WQE's overhead is ctrl +
	 * the larger of raddr + atomic and a UMR ctrl segment (64 bytes), then the SGEs, in
	 * WQEBBs; max_send_wr of them rounded up to a power of two */
	wqe_size = (64 + 16 * (a->cap.max_send_sge ? a->cap.max_send_sge : 1) + WQEBB - 1) / WQEBB *
		   WQEBB;
	sq_bytes = pow2_at_least((uint64_t)a->cap.max_send_wr * wqe_size);
	q->wqe_cnt = (uint32_t)(sq_bytes / WQEBB);
	if (q->wqe_cnt > 32768) {
		free(q);
		errno = EINVAL;
		return NULL;
	}
	q->rq_cnt = pow2_at_least(a->cap.max_recv_wr ? a->cap.max_recv_wr : 1);
	q->sq = zalloc(sq_bytes, 4096);
	q->dbrec = zalloc(64, 64);
	q->uar = zalloc(4096, 4096);
	q->rq_wrid = calloc(q->rq_cnt, sizeof(*q->rq_wrid));
	if (q->sq == NULL || q->dbrec == NULL || q->uar == NULL || q->rq_wrid == NULL) {
		free(q->sq);
		free(q->dbrec);
		free(q->uar);
		free(q->rq_wrid);
		free(q);
		errno = ENOMEM;
		return NULL;
	}
	q->dev = dev_of(pd->context);
	/* the kernel configures requester scatter to CQE only for QPs that signal every WR
	 * (configure_requester_scat_cqe); mode 1 and 2 for every QP (2: even those that
	 * disabled it, as a firmware that ignored the flag) */
	q->scat_cqe = a->sq_sig_all || nic.scatter_mode != 0;
	q->scq = s;
	q->rcq = r;
	q->state = IBV_QPS_RESET;
	a->cap.max_send_wr = (uint32_t)(sq_bytes / wqe_size);
	a->cap.max_recv_wr = q->rq_cnt;
	a->cap.max_inline_data = 0;
	q->init = *a;
	q->qp.context = pd->context;
	q->qp.qp_context = a->qp_context;
	q->qp.pd = pd;
	q->qp.send_cq = a->send_cq;
	q->qp.recv_cq = a->recv_cq;
	q->qp.qp_type = IBV_QPT_RC;
	q->qp.state = IBV_QPS_RESET;
	pthread_mutex_init(&q->qp.mutex, NULL);
	pthread_cond_init(&q->qp.cond, NULL);
	pthread_mutex_lock(&nic.lock);
	q->qp.qp_num = nic.next_qpn++;
	q->qp.handle = q->qp.qp_num;
	q->next = nic.qps;
	nic.qps = q;
	pthread_mutex_unlock(&nic.lock);
	return &q->qp;
}

struct ibv_qp_ex *ibv_qp_to_qp_ex(struct ibv_qp *qp)
{
	(void)qp;
	/* The ibv_wr_* API is not modelled: only the mlx5 direct data path is. */
	errno = EOPNOTSUPP;
	return NULL;
}

int ibv_destroy_qp(struct ibv_qp *qp)
{
	struct fqp *q = (struct fqp *)qp, **pp;

	pthread_mutex_lock(&nic.lock);
	for (pp = &nic.qps; *pp != NULL; pp = &(*pp)->next)
		if (*pp == q) {
			*pp = q->next;
			break;
		}
	/* as rdma-core's mlx5_destroy_qp: no CQE may name a QP that is gone */
	cq_clean(q->rcq, qp->qp_num);
	if (q->scq != q->rcq)
		cq_clean(q->scq, qp->qp_num);
	pthread_mutex_unlock(&nic.lock);
	free(q->sq);
	free(q->dbrec);
	free(q->uar);
	free(q->rq_wrid);
	free(q);
	return 0;
}

static int post_recv_op(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad_wr)
{
	struct fqp *q = (struct fqp *)qp;
	int rc = 0;

	pthread_mutex_lock(&nic.lock);
	for (; wr != NULL; wr = wr->next) {
		if (q->state == IBV_QPS_RESET) {
			rc = EINVAL; /* stricter than the provider: receives before INIT are lost */
		} else if (wr->num_sge > (int)q->init.cap.max_recv_sge) {
			rc = EINVAL;
		} else if (q->rq_head - q->rq_tail >= q->rq_cnt) {
			rc = ENOMEM;
		} else {
			for (int i = 0; i < wr->num_sge; i++) {
				struct fmr *m = find_mr(q->dev, wr->sg_list[i].lkey, false);

				if (!in_mr(m, wr->sg_list[i].addr, wr->sg_list[i].length))
					bad("QP 0x%x: receive SGE %d outside registered memory",
					    qp->qp_num, i);
			}
			q->rq_wrid[q->rq_head++ & (q->rq_cnt - 1)] = wr->wr_id;
			continue;
		}
		*bad_wr = wr;
		break;
	}
	/* the RQ's doorbell record, as the provider writes it */
	__atomic_store_n(&q->dbrec[0], htobe32(q->rq_head & 0xffff), __ATOMIC_RELEASE);
	pthread_mutex_unlock(&nic.lock);
	return rc;
}

static const char *state_name(enum ibv_qp_state s)
{
	static const char *const n[] = { "RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR" };

	return (unsigned)s < 7 ? n[s] : "?";
}

int ibv_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *a, int mask)
{
	struct fqp *q = (struct fqp *)qp;
	enum ibv_qp_state cur, to;
	int need = 0, allowed = IBV_QP_STATE | IBV_QP_CUR_STATE;
	int rc = 0;

	pthread_mutex_lock(&nic.lock);
	cur = q->state;
	to = (mask & IBV_QP_STATE) ? a->qp_state : cur;
	if ((mask & IBV_QP_CUR_STATE) && a->cur_qp_state != cur) {
		rc = EINVAL;
		goto out;
	}
	if (to == IBV_QPS_ERR)
		nic.wedge = false; /* what a wedged NIC's reset brings back */
	/* IB spec 10.3.1 / the PRM's QP state machine, RC, the attributes each move takes */
	if (to == IBV_QPS_RESET || to == IBV_QPS_ERR) {
		need = 0;
	} else if ((cur == IBV_QPS_RESET || cur == IBV_QPS_INIT) && to == IBV_QPS_INIT) {
		need = cur == IBV_QPS_RESET ? IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS
					    : 0;
		allowed |= IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
	} else if (cur == IBV_QPS_INIT && to == IBV_QPS_RTR) {
		need = IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
		       IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
		allowed |= need | IBV_QP_PKEY_INDEX | IBV_QP_ACCESS_FLAGS | IBV_QP_ALT_PATH;
	} else if (cur == IBV_QPS_RTR && to == IBV_QPS_RTS) {
		need = IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
		       IBV_QP_MAX_QP_RD_ATOMIC;
		allowed |= need | IBV_QP_ACCESS_FLAGS | IBV_QP_MIN_RNR_TIMER | IBV_QP_ALT_PATH |
			   IBV_QP_PATH_MIG_STATE;
	} else if (cur == IBV_QPS_RTS && to == IBV_QPS_RTS) {
		allowed |= IBV_QP_ACCESS_FLAGS | IBV_QP_MIN_RNR_TIMER | IBV_QP_ALT_PATH |
			   IBV_QP_PATH_MIG_STATE;
	} else {
		rc = EINVAL; /* not a move this QP can make */
		goto out;
	}
	if ((mask & need) != need ||
	    (to != IBV_QPS_RESET && to != IBV_QPS_ERR && (mask & ~allowed) != 0)) {
		rc = EINVAL;
		goto out;
	}
	if ((mask & IBV_QP_PKEY_INDEX) && a->pkey_index >= 1) { /* one P_Key (query_port) */
		rc = EINVAL;
		goto out;
	}
	if ((mask & IBV_QP_PORT) && a->port_num != 1) {
		rc = EINVAL;
		goto out;
	}
	if (mask & IBV_QP_AV) {
		const struct ibv_ah_attr *ah = &a->ah_attr;

		/* RoCE: a GRH to a non-zero GID from a valid source entry, on port 1 */
		if (!ah->is_global || ah->port_num != 1 || ah->sl > 15 ||
		    q->dev->gid_type[ah->grh.sgid_index] < 0 ||
		    memcmp(ah->grh.dgid.raw, (uint8_t[16]){ 0 }, 16) == 0) {
			rc = EINVAL;
			goto out;
		}
	}
	if ((mask & IBV_QP_PATH_MTU) && (a->path_mtu < IBV_MTU_256 || a->path_mtu > IBV_MTU_4096)) {
		rc = EINVAL;
		goto out;
	}
	if (((mask & IBV_QP_DEST_QPN) && a->dest_qp_num > 0xffffff) ||
	    ((mask & IBV_QP_RQ_PSN) && a->rq_psn > 0xffffff) ||
	    ((mask & IBV_QP_SQ_PSN) && a->sq_psn > 0xffffff) ||
	    ((mask & IBV_QP_RETRY_CNT) && a->retry_cnt > 7) ||
	    ((mask & IBV_QP_RNR_RETRY) && a->rnr_retry > 7) ||
	    ((mask & IBV_QP_MAX_DEST_RD_ATOMIC) && a->max_dest_rd_atomic > 16) ||
	    ((mask & IBV_QP_MAX_QP_RD_ATOMIC) && a->max_rd_atomic > 16)) {
		rc = EINVAL;
		goto out;
	}

	if (mask & IBV_QP_ACCESS_FLAGS)
		q->access = a->qp_access_flags;
	if (mask & IBV_QP_AV) {
		memcpy(q->dgid, a->ah_attr.grh.dgid.raw, 16);
		q->ah = a->ah_attr;
	}
	if (mask & IBV_QP_PKEY_INDEX)
		q->pkey_index = a->pkey_index;
	if (mask & IBV_QP_PATH_MTU)
		q->path_mtu = (uint8_t)a->path_mtu;
	if (mask & IBV_QP_DEST_QPN)
		q->dest_qpn = a->dest_qp_num;
	if (mask & IBV_QP_RQ_PSN)
		q->rq_psn = a->rq_psn;
	if (mask & IBV_QP_MIN_RNR_TIMER)
		q->min_rnr_timer = a->min_rnr_timer;
	if (mask & IBV_QP_SQ_PSN)
		q->sq_psn = a->sq_psn;
	if (mask & IBV_QP_RETRY_CNT)
		q->retry_cnt = a->retry_cnt;
	if (mask & IBV_QP_RNR_RETRY)
		q->rnr_retry = a->rnr_retry;
	if (mask & IBV_QP_TIMEOUT)
		q->timeout = a->timeout;
	q->state = to;
	q->qp.state = to;
	if (to == IBV_QPS_RESET) {
		/* as rdma-core's mlx5_modify_qp: clean the CQs (not DV-owned ones), indices and
		 * both doorbell record words back to 0 */
		cq_clean(q->rcq, qp->qp_num);
		if (q->scq != q->rcq)
			cq_clean(q->scq, qp->qp_num);
		q->rq_head = q->rq_nic = q->rq_tail = 0;
		q->hw_ci = 0;
		q->tries = q->rnr_tries = 0;
		q->next_try_ns = 0;
		__atomic_store_n(&q->dbrec[0], 0, __ATOMIC_RELEASE);
		__atomic_store_n(&q->dbrec[1], 0, __ATOMIC_RELEASE);
		nic.st.resets++;
	}
out:
	pthread_mutex_unlock(&nic.lock);
	if (rc != 0 && getenv("FAKE_NIC_DEBUG") != NULL)
		fprintf(stderr, "fake: QP 0x%x %s -> %s refused (mask 0x%x)\n", qp->qp_num,
			state_name(cur), state_name(to), mask);
	return rc;
}

int ibv_query_qp(struct ibv_qp *qp, struct ibv_qp_attr *a, int mask, struct ibv_qp_init_attr *init)
{
	struct fqp *q = (struct fqp *)qp;

	(void)mask;
	pthread_mutex_lock(&nic.lock);
	memset(a, 0, sizeof(*a));
	a->qp_state = q->state;
	a->cur_qp_state = q->state;
	a->path_mtu = q->path_mtu;
	a->qp_access_flags = q->access;
	a->dest_qp_num = q->dest_qpn;
	a->rq_psn = q->rq_psn;
	a->sq_psn = q->sq_psn;
	a->retry_cnt = q->retry_cnt;
	a->rnr_retry = q->rnr_retry;
	a->timeout = q->timeout;
	a->min_rnr_timer = q->min_rnr_timer;
	a->port_num = 1;
	a->cap = q->init.cap;
	a->ah_attr = q->ah;
	memcpy(a->ah_attr.grh.dgid.raw, q->dgid, 16);
	a->pkey_index = q->pkey_index;
	if (init != NULL)
		*init = q->init;
	pthread_mutex_unlock(&nic.lock);
	return 0;
}

/* ---- mlx5dv ---- */

struct ibv_qp *mlx5dv_create_qp(struct ibv_context *ctx, struct ibv_qp_init_attr_ex *a,
				struct mlx5dv_qp_init_attr *dv)
{
	const uint32_t known =
		MLX5DV_QP_CREATE_DISABLE_SCATTER_TO_CQE | MLX5DV_QP_CREATE_ALLOW_SCATTER_TO_CQE;
	struct ibv_qp *qp;
	struct fqp *q;

	/* a PD-only mask: the direct backend writes its own WQEs (no ibv_wr_* send ops) */
	if (ctx == NULL || a == NULL || a->comp_mask != IBV_QP_INIT_ATTR_PD || a->pd == NULL ||
	    a->pd->context != ctx ||
	    (dv != NULL && ((dv->comp_mask & ~(uint64_t)MLX5DV_QP_INIT_ATTR_MASK_QP_CREATE_FLAGS) ||
			    (dv->create_flags & ~known) || (dv->create_flags & known) == known))) {
		errno = EINVAL;
		return NULL;
	}
	qp = ibv_create_qp(a->pd, (struct ibv_qp_init_attr *)a);
	if (qp == NULL || dv == NULL || !(dv->comp_mask & MLX5DV_QP_INIT_ATTR_MASK_QP_CREATE_FLAGS))
		return qp;
	q = (struct fqp *)qp;
	pthread_mutex_lock(&nic.lock);
	if (dv->create_flags & MLX5DV_QP_CREATE_ALLOW_SCATTER_TO_CQE)
		q->scat_cqe = true;
	if (dv->create_flags & MLX5DV_QP_CREATE_DISABLE_SCATTER_TO_CQE) {
		q->scat_disabled = true;
		q->scat_cqe = nic.scatter_mode == 2;
	}
	pthread_mutex_unlock(&nic.lock);
	return qp;
}

int mlx5dv_init_obj(struct mlx5dv_obj *obj, uint64_t type)
{
	if (type & ~(uint64_t)(MLX5DV_OBJ_QP | MLX5DV_OBJ_CQ))
		return EOPNOTSUPP;
	pthread_mutex_lock(&nic.lock);
	if (type & MLX5DV_OBJ_QP) {
		struct fqp *q = (struct fqp *)obj->qp.in;
		struct mlx5dv_qp *o = obj->qp.out;

		/* The direct poller reads only what it asked for: a QP whose small READs may land
		 * in a CQE must not get here. */
		if (!q->scat_disabled)
			bad("QP 0x%x read through mlx5dv was created without "
			    "MLX5DV_QP_CREATE_DISABLE_SCATTER_TO_CQE: a READ of <= 32 bytes may "
			    "complete inside its CQE",
			    q->qp.qp_num);
		memset(o, 0, sizeof(*o));
		o->dbrec = (__be32 *)q->dbrec;
		o->sq.buf = q->sq;
		o->sq.wqe_cnt = q->wqe_cnt;
		o->sq.stride = WQEBB;
		o->rq.buf = NULL; /* receives go through ibv_post_recv */
		o->rq.wqe_cnt = q->rq_cnt;
		o->rq.stride = 16;
		o->bf.reg = q->uar;
		o->bf.size = BF_SIZE;
	}
	if (type & MLX5DV_OBJ_CQ) {
		struct fcq *c = (struct fcq *)obj->cq.in;
		struct mlx5dv_cq *o = obj->cq.out;

		memset(o, 0, sizeof(*o));
		o->buf = c->buf;
		o->dbrec = (__be32 *)c->dbrec;
		o->cqe_cnt = c->cnt;
		o->cqe_size = nic.dv_cqe_size ? nic.dv_cqe_size : 64;
		o->cqn = c->cqn;
		o->cq_uar = c->uar;
		c->dv = true; /* rdma-core: MLX5_CQ_FLAGS_DV_OWNED */
	}
	pthread_mutex_unlock(&nic.lock);
	return 0;
}
