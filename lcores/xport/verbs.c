/* SPDX-License-Identifier: BSD-3-Clause */
/* Verbs transport: RC QPs fed through ibv_wr_* or mlx5 direct WQEs, in-order completions. */
#include <arpa/inet.h>
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <infiniband/mlx5dv.h>
#include <infiniband/verbs.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "kvl_clock.h"
#include "mlx5.h"
#include "verbs.h"

/*
 * Regions registered per device. A fixed table whose entries are never reused lets lcores
 * check local ranges without a lock while the control thread registers more (see n_mr).
 */
#define MAX_MRS 128
/* Doorbell registers the direct backend's QPs of one device ring: at most one per QP. */
#define MAX_BF_REGS 128
/* CQEs handled per progress call: one busy connection cannot hold its lcore. */
#define POLL_BUDGET 64
/*
 * Outstanding RDMA READs per QP, both as initiator and as responder. The peer's responder
 * resources are not exchanged, so both ends cap at ConnectX's limit: an initiator asking for
 * more than the responder has would see its READs rejected (REM_INV_REQ).
 */
#define RD_ATOMIC_MAX 16
#define HOP_LIMIT     64 /* RoCE v2 crosses routers; v1 ignores it */
#define MIN_RNR_TIMER 12 /* 0.64 ms: only SENDs meet RNR, and we post none */
#define ACK_TIMEOUT   15 /* 4.096 us << 15 = 134 ms per try: an emulated or lossy fabric */
/*
 * Transport retries before RETRY_EXC_ERR. Not 7: soft-RoCE (kernel rxe_comp.c) reads
 * retry_cnt 7 as "retry for ever", as the spec does only for rnr_retry, and a dead peer would
 * never be reported. 6 means 6 everywhere: about 0.9 s to detect one at ACK_TIMEOUT.
 */
#define RETRY_CNT 6
#define RNR_RETRY 7 /* 7 = retry for ever */

struct mr_ent {
	uintptr_t base;
	uint64_t len;
	uint32_t lkey;
	struct ibv_mr *mr;
};

struct kvl_verbs_dev {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	char name[64];
	uint8_t port;
	uint8_t link_layer; /* IBV_LINK_LAYER_* */
	int gid_index;
	int gid_type; /* 0 IB, 1 RoCE v1, 2 RoCE v2 */
	union ibv_gid gid;
	uint16_t lid;
	uint8_t mtu; /* enum ibv_mtu: the port's active MTU capped by the options */
	uint32_t max_msg_sz;
	int max_qp_wr, max_cqe, max_sge;
	/* soft-RoCE: rdma-core's rxe ibv_wr_set_sge_list() sums the first SGE's length num_sge
	 * times (fixed upstream, rdma-core PR #1744, not in Debian 12's 44): a list is posted as
	 * equal pieces so that the sum comes out right */
	bool sge_equal_only;
	/* mlx5 direct backend: connections write WQEs into the SQ and poll the send CQ
	 * themselves (lcores/xport/mlx5/mlx5_*.c); verbs calls only set QPs up, change their state
	 * and handle receives. Cleared, with the reason in backend_note, when a connection's setup
	 * found something the fast path does not handle and the backend is auto. */
	bool direct;
	bool shut_up_bf; /* MLX5_SHUT_UP_BF: 8-byte doorbells only (kvl_mlx5_env_check) */
	int backend;	 /* enum kvl_verbs_backend as asked */
	/* written once (at open, or when auto falls back), then published through @note: the
	 * control thread may write it while telemetry reads it */
	char backend_note[KVL_VERBS_ERR_LEN + 16];
	const char *note;
	uint8_t traffic_class, service_level;
	uint16_t pkey_index;
	uint8_t rd_atomic, init_rd_atomic;
	uint32_t max_cq_count, max_cq_period;
	/* mlx5 direct: the doorbell registers (UAR BlueFlame pairs) the device's QPs were given,
	 * each with the one toggle every SQ on it shares (struct kvl_mlx5_bf): rdma-core hands the
	 * same register to several QPs once a context has more than 16. Entries are never
	 * removed (the registers live as long as the context); the control thread adds them
	 * while the lcore rings through those it has, which never move. */
	unsigned n_bf;
	struct kvl_mlx5_bf bf[MAX_BF_REGS];
	/* Entries [0, n_mr) are complete: a registration fills its entry, then publishes it with
	 * a release store of n_mr; lcores load n_mr with acquire. One registering thread. */
	unsigned n_mr;
	struct mr_ent mr[MAX_MRS];
};

/* One request, from post to reap: all it takes to post it again after a resync. */
struct slot {
	uint64_t wr_id;
	uint64_t raddr;
	uint32_t length, rkey, imm;
	uint8_t op, flags, n_sge;
	bool nic;	/* taken for the QP; otherwise refused here and status is already set */
	int32_t status; /* valid once completed */
	struct ibv_sge sg[KVL_WR_MAX_SGE];
};

/*
 * Where a connection stands after an error. Both QPs of an RC connection must restart
 * together and at fresh PSNs: a QP that restarted alone at its old PSN would have its WRITEs
 * taken by a live peer for duplicates, acknowledged and dropped (IB spec 9.9.2), and a peer
 * in ERR drops everything. So the two ends agree over the control path (KVL_RESYNC_REQ/ACK).
 */
enum phase {
	PH_RUN,	  /* RTS (or never connected) */
	PH_DRAIN, /* QP in ERR: waiting for the flush of every WR it holds */
	PH_WAIT,  /* drained, our REQ sent: waiting for the peer's ACK with its fresh PSN */
};

#define RESYNC_RESEND_NS (100ull * 1000 * 1000)

struct kvl_verbs_conn {
	struct kvl_verbs_dev *d;
	struct ibv_comp_channel *ch; /* completion events, for an lcore that sleeps; or NULL */
	struct ibv_cq_ex *cqx;	     /* NULL when the provider has only ibv_create_cq */
	struct ibv_cq *cq;
	bool armed; /* ibv_req_notify_cq() done, its event not taken yet */
	struct ibv_qp *qp;
	struct ibv_qp_ex *qpx; /* verbs backend */
	/* mlx5 direct backend: the SQ and the send CQ as plain memory; receives stay on @cq,
	 * through verbs (they are rare: one per notice). */
	bool direct;
	struct ibv_cq *scq;
	struct kvl_mlx5_sq sq;
	struct kvl_mlx5_cq dcq;
	unsigned depth, signal_every, since_sig;
	unsigned max_sge; /* SGEs per WR: KVL_WR_MAX_SGE, or fewer if the device has fewer */
	/* Receives: one per WRITE_WITH_IMM the peer may have in flight (each consumes one; none
	 * posted would stall the peer on RNR). They carry no buffer: the data lands by RDMA. */
	unsigned rq_depth, rq_posted;
	uint32_t rq_epoch;	/* in the receives' wr_id: flushes of an emptied queue are stale */
	struct kvl_note *notes; /* immediates received, for kvl_verbs_notes() */
	unsigned notes_mask, notes_head, notes_tail;
	struct kvl_verbs_addr local, remote;
	uint8_t path_mtu;
	bool connected;

	/*
	 * Requests: the post sequence number is the WR's wr_id on the QP and (masked) its slot.
	 * reap <= done <= post, post - reap <= depth. [reap, done) waits to be reaped, [done,
	 * post) is in flight (or refused behind one in flight: completions leave in post order).
	 * RC completes in order, so a CQE for seq s also completes every unsignaled WR before s.
	 */
	struct slot *ring;
	uint64_t mask;
	uint64_t post_seq, done_seq, reap_seq;
	uint64_t nic_end; /* seq + 1 of the newest WR given to the QP; it is always signaled */
	int broken;	  /* fail_all or a failed restart: posts complete at once with this */

	/* Resync (see enum phase). Requests the QP flushed stay in [done_seq, post_seq) and
	 * are posted again once both ends run: RDMA WRITE and READ may run twice unharmed. */
	enum phase phase;
	uint64_t flush_end;    /* seq + 1 of the newest error or flush CQE of this drain */
	bool resp_pending;     /* the peer's REQ came: answer it once drained */
	uint32_t peer_new_psn; /* its fresh PSN */
	uint32_t my_new_psn;   /* PH_WAIT: the PSN our REQ offers */
	bool ack_due;	       /* an ACK to send: ack_psn, echoing ack_echo */
	uint32_t ack_psn, ack_echo;
	bool answered; /* the last REQ we restarted for: a repeat gets the same ACK */
	uint64_t wait_deadline, next_req_ns, resync_timeout_ns;

	struct kvl_verbs_rseg *rseg;
	unsigned n_rseg, rseg_hint, mr_hint;
	/* posted: WRs given to the QP; completed: requests completed, refused ones included;
	 * errors: error CQEs, flushes included; failed[]: requests by their error status. */
	struct kvl_verbs_stats stats;
};

/* ---- messages ---- */

struct msg {
	char *buf;
	size_t cap, len;
};

__attribute__((format(printf, 2, 3))) static void msg_add(struct msg *m, const char *fmt, ...)
{
	va_list ap;
	int r;

	if (m->buf == NULL || m->cap == 0 || m->len + 1 >= m->cap)
		return;
	va_start(ap, fmt);
	r = vsnprintf(m->buf + m->len, m->cap - m->len, fmt, ap);
	va_end(ap);
	if (r < 0)
		return;
	if ((size_t)r >= m->cap - m->len) {
		/* Cut: say so, so that a cut list is not read as the whole of it. */
		m->len = m->cap - 1;
		if (m->cap > 4)
			memcpy(m->buf + m->cap - 4, "...", 4);
		return;
	}
	m->len += (size_t)r;
}

__attribute__((format(printf, 3, 4))) static void errf(char *err, size_t errlen, const char *fmt,
						       ...)
{
	va_list ap;

	if (err == NULL || errlen == 0)
		return;
	va_start(ap, fmt);
	vsnprintf(err, errlen, fmt, ap);
	va_end(ap);
}

static void err_clear(char *err, size_t errlen)
{
	if (err != NULL && errlen != 0)
		err[0] = '\0';
}

static unsigned mtu_bytes(unsigned m)
{
	return m >= IBV_MTU_256 && m <= IBV_MTU_4096 ? 128u << m : 0;
}

static uint8_t mtu_code(unsigned bytes)
{
	for (unsigned m = IBV_MTU_256; m <= IBV_MTU_4096; m++)
		if (128u << m == bytes)
			return (uint8_t)m;
	return 0;
}

static const char *gid_type_name(int t)
{
	return t == 0 ? "InfiniBand" : t == 1 ? "RoCE v1" : t == 2 ? "RoCE v2" : "unknown";
}

static const char *gid_str(const union ibv_gid *g, char *buf, size_t cap)
{
	if (inet_ntop(AF_INET6, g->raw, buf, (socklen_t)cap) == NULL)
		snprintf(buf, cap, "?");
	return buf;
}

static bool gid_zero(const union ibv_gid *g)
{
	for (unsigned i = 0; i < sizeof(g->raw); i++)
		if (g->raw[i] != 0)
			return false;
	return true;
}

/* ::ffff:a.b.c.d, the form a RoCE GID takes for an IPv4 address */
static bool gid_v4mapped(const union ibv_gid *g)
{
	static const uint8_t pfx[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };

	return memcmp(g->raw, pfx, sizeof(pfx)) == 0;
}

/* ---- sysfs ---- */

/* One attribute, trailing white space trimmed. Returns its length or a negative errno. */
static int sysfs_read(const char *path, char *buf, size_t cap)
{
	ssize_t r;
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		return -errno;
	r = read(fd, buf, cap - 1);
	if (r < 0)
		r = -errno;
	close(fd);
	if (r < 0)
		return (int)r;
	while (r > 0 && (buf[r - 1] == '\n' || buf[r - 1] == ' '))
		r--;
	buf[r] = '\0';
	return (int)r;
}

/* gid_attrs/<attr>/<index> of the device's port. */
static int gid_attr(const struct kvl_verbs_dev *d, const char *root, const char *attr, int index,
		    char *buf, size_t cap)
{
	char path[512];
	size_t rl;

	if (root == NULL)
		root = "/sys";
	rl = strlen(root);
	while (rl > 1 && root[rl - 1] == '/')
		rl--;
	if (snprintf(path, sizeof(path), "%.*s/class/infiniband/%s/ports/%u/gid_attrs/%s/%d",
		     (int)rl, root, d->name, d->port, attr, index) >= (int)sizeof(path))
		return -ENAMETOOLONG;
	return sysfs_read(path, buf, cap);
}

/*
 * The kernel writes "IB/RoCE v1" for v1 entries (the same code serves InfiniBand) and
 * "RoCE v2" for v2 ones. -1 when the entry has no type (empty) or the type is unknown.
 */
static int gid_type_of(const struct kvl_verbs_dev *d, const char *root, int index)
{
	char t[32];
	struct ibv_gid_entry e;

	if (gid_attr(d, root, "types", index, t, sizeof(t)) >= 0) {
		if (strcmp(t, "RoCE v2") == 0)
			return 2;
		if (strcmp(t, "IB/RoCE v1") == 0 || strcmp(t, "RoCE v1") == 0)
			return d->link_layer == IBV_LINK_LAYER_ETHERNET ? 1 : 0;
		return -1;
	}
	/* No sysfs (a container without /sys/class/infiniband): ask the device. */
	if (ibv_query_gid_ex(d->ctx, d->port, (uint32_t)index, &e, 0) != 0)
		return -1;
	if (e.gid_type == IBV_GID_TYPE_ROCE_V2)
		return 2;
	if (e.gid_type == IBV_GID_TYPE_ROCE_V1 && d->link_layer == IBV_LINK_LAYER_ETHERNET)
		return 1;
	return 0;
}

/* "[0] fe80::1 RoCE v2 eth0, [1] ..." for messages: what an operator compares with show_gids. */
static void list_gids(const struct kvl_verbs_dev *d, const char *root, int tbl_len, struct msg *m)
{
	unsigned shown = 0;

	for (int i = 0; i < tbl_len; i++) {
		union ibv_gid g;
		char gs[INET6_ADDRSTRLEN], nd[64];
		int t;

		if (ibv_query_gid(d->ctx, d->port, i, &g) != 0 || gid_zero(&g))
			continue;
		t = gid_type_of(d, root, i);
		if (gid_attr(d, root, "ndevs", i, nd, sizeof(nd)) < 0)
			snprintf(nd, sizeof(nd), "-");
		msg_add(m, "%s[%d] %s %s %s", shown++ ? ", " : "", i, gid_str(&g, gs, sizeof(gs)),
			gid_type_name(t), nd);
	}
	if (shown == 0)
		msg_add(m, "empty");
}

/*
 * The RoCE v2 GID that carries an IPv4 address of the port's own netdev: the address peers
 * route to. The default entry (index 0) always belongs to that netdev, so its ndevs/0 names
 * it; GIDs of VLAN or macvlan netdevs on the same port are skipped (pin those by index).
 */
static int pick_gid(struct kvl_verbs_dev *d, const char *root, int tbl_len, char *err,
		    size_t errlen)
{
	char netdev[64], nd[64], t[32];
	bool typed = false;
	struct msg m = { err, errlen, 0 };

	if (gid_attr(d, root, "ndevs", 0, netdev, sizeof(netdev)) < 0)
		netdev[0] = '\0';
	for (int i = 0; i < tbl_len; i++) {
		union ibv_gid g;

		if (gid_attr(d, root, "types", i, t, sizeof(t)) < 0)
			continue;
		typed = true;
		if (strcmp(t, "RoCE v2") != 0)
			continue;
		if (ibv_query_gid(d->ctx, d->port, i, &g) != 0 || !gid_v4mapped(&g))
			continue;
		if (netdev[0] != '\0' &&
		    (gid_attr(d, root, "ndevs", i, nd, sizeof(nd)) < 0 || strcmp(nd, netdev) != 0))
			continue;
		d->gid_index = i;
		d->gid_type = 2;
		d->gid = g;
		return 0;
	}
	if (!typed) {
		char path[300];

		snprintf(path, sizeof(path), "%s/class/infiniband/%s/ports/%u/gid_attrs/types",
			 root ? root : "/sys", d->name, d->port);
		msg_add(&m,
			"%s port %u: gid_index auto reads GID types from %s, which has none "
			"readable (is /sys mounted?): set gid_index",
			d->name, d->port, path);
		return -ENOENT;
	}
	msg_add(&m, "%s port %u: no RoCE v2 GID with an IPv4 address of %s (GID table: ", d->name,
		d->port, netdev[0] ? netdev : "its netdev");
	list_gids(d, root, tbl_len, &m);
	msg_add(&m, "): give %s an IPv4 address, or set gid_index to a RoCE v2 entry",
		netdev[0] ? netdev : "the netdev");
	return -EADDRNOTAVAIL;
}

static int use_gid_index(struct kvl_verbs_dev *d, const char *root, int idx, int tbl_len, char *err,
			 size_t errlen)
{
	struct msg m = { err, errlen, 0 };

	if (idx >= tbl_len) {
		msg_add(&m, "%s port %u: gid_index %d is past the GID table (%d entries)", d->name,
			d->port, idx, tbl_len);
		return -EINVAL;
	}
	if (ibv_query_gid(d->ctx, d->port, idx, &d->gid) != 0 || gid_zero(&d->gid)) {
		msg_add(&m, "%s port %u: gid_index %d is an empty GID entry (GID table: ", d->name,
			d->port, idx);
		list_gids(d, root, tbl_len, &m);
		msg_add(&m, ")");
		return -EADDRNOTAVAIL;
	}
	d->gid_index = idx;
	d->gid_type = d->link_layer == IBV_LINK_LAYER_ETHERNET ? gid_type_of(d, root, idx) : 0;
	if (d->gid_type < 0) {
		msg_add(&m, "%s port %u: gid_index %d has no known GID type", d->name, d->port,
			idx);
		return -EADDRNOTAVAIL;
	}
	return 0;
}

/* ---- device ---- */

static void no_such_device(const char *name, struct ibv_device **list, int n, char *err,
			   size_t errlen)
{
	struct msg m = { err, errlen, 0 };

	if (n == 0) {
		msg_add(&m,
			"no RDMA device \"%s\": this host has none (load the NIC's RDMA driver, "
			"or rdma_rxe and 'rdma link add' for soft-RoCE)",
			name);
		return;
	}
	msg_add(&m, "no RDMA device \"%s\"; devices here: ", name);
	for (int i = 0; i < n; i++)
		msg_add(&m, "%s%s", i ? ", " : "", ibv_get_device_name(list[i]));
}

/* Set the backend note once: @text (copied unless it is backend_note itself), then visible. */
static void publish_note(struct kvl_verbs_dev *d, const char *text)
{
	if (text != d->backend_note)
		snprintf(d->backend_note, sizeof(d->backend_note), "%s", text);
	__atomic_store_n(&d->note, d->backend_note, __ATOMIC_RELEASE);
}

struct kvl_verbs_dev *kvl_verbs_open(const struct kvl_verbs_dev_opts *o, char *err, size_t errlen)
{
	struct ibv_device **list;
	struct ibv_device *dev = NULL;
	struct kvl_verbs_dev *d;
	struct ibv_device_attr_ex ax;
	struct ibv_port_attr pa;
	int n = 0, rc;
	uint8_t cap;

	err_clear(err, errlen);
	if (o == NULL || o->name == NULL || o->name[0] == '\0') {
		errf(err, errlen, "no RDMA device named");
		errno = EINVAL;
		return NULL;
	}
	if (o->mtu != 0 && mtu_code(o->mtu) == 0) {
		errf(err, errlen,
		     "%s: mtu %u is not an RDMA path MTU: use 256, 512, 1024, 2048 or 4096 "
		     "(it is not the Ethernet MTU)",
		     o->name, o->mtu);
		errno = EINVAL;
		return NULL;
	}
	list = ibv_get_device_list(&n);
	if (list == NULL) {
		rc = errno;
		errf(err, errlen, "%s: cannot list RDMA devices: %s", o->name, strerror(rc));
		errno = rc;
		return NULL;
	}
	for (int i = 0; i < n; i++)
		if (strcmp(ibv_get_device_name(list[i]), o->name) == 0)
			dev = list[i];
	if (dev == NULL) {
		no_such_device(o->name, list, n, err, errlen);
		ibv_free_device_list(list);
		errno = ENODEV;
		return NULL;
	}
	d = calloc(1, sizeof(*d));
	if (d == NULL) {
		ibv_free_device_list(list);
		errf(err, errlen, "%s: out of memory", o->name);
		errno = ENOMEM;
		return NULL;
	}
	snprintf(d->name, sizeof(d->name), "%s", o->name);
	d->port = (uint8_t)(o->port ? o->port : 1);
	d->ctx = ibv_open_device(dev);
	rc = errno;
	ibv_free_device_list(list);
	if (d->ctx == NULL) {
		errf(err, errlen, "%s: cannot open the device: %s%s", o->name, strerror(rc),
		     rc == EACCES || rc == EPERM ? " (no access to /dev/infiniband/uverbs*)" : "");
		goto fail;
	}

	memset(&ax, 0, sizeof(ax));
	rc = ibv_query_device_ex(d->ctx, NULL, &ax);
	if (rc != 0 && ibv_query_device(d->ctx, &ax.orig_attr) != 0) {
		rc = errno;
		errf(err, errlen, "%s: cannot query the device: %s", o->name, strerror(rc));
		goto fail;
	}
	if (o->port == 0 || o->port > ax.orig_attr.phys_port_cnt) {
		rc = EINVAL;
		errf(err, errlen, "%s: port %u does not exist: the device has %u port%s (1-based)",
		     o->name, o->port, ax.orig_attr.phys_port_cnt,
		     ax.orig_attr.phys_port_cnt == 1 ? "" : "s");
		goto fail;
	}
	d->max_qp_wr = ax.orig_attr.max_qp_wr;
	d->sge_equal_only = ax.orig_attr.vendor_id == 0xffffff; /* rxe's RXE_VENDOR_ID */
	d->max_sge = ax.orig_attr.max_sge;
	d->max_cqe = ax.orig_attr.max_cqe;
	cap = (uint8_t)(ax.orig_attr.max_qp_rd_atom < RD_ATOMIC_MAX ? ax.orig_attr.max_qp_rd_atom
								    : RD_ATOMIC_MAX);
	d->rd_atomic = cap;
	cap = (uint8_t)(ax.orig_attr.max_qp_init_rd_atom < RD_ATOMIC_MAX
				? ax.orig_attr.max_qp_init_rd_atom
				: RD_ATOMIC_MAX);
	d->init_rd_atomic = cap;
	d->max_cq_count = ax.cq_mod_caps.max_cq_count;
	d->max_cq_period = ax.cq_mod_caps.max_cq_period;

	d->backend = o->backend;
	if (o->backend < KVL_VERBS_BACKEND_AUTO || o->backend > KVL_VERBS_BACKEND_VERBS) {
		rc = EINVAL;
		errf(err, errlen, "%s: unknown backend %d", o->name, o->backend);
		goto fail;
	}
	if (o->backend != KVL_VERBS_BACKEND_VERBS) {
		d->direct = mlx5dv_is_supported(d->ctx->device);
		if (!d->direct && o->backend == KVL_VERBS_BACKEND_MLX5) {
			rc = ENOTSUP;
			errf(err, errlen,
			     "%s: transport mlx5 needs a ConnectX (mlx5) device, and "
			     "mlx5dv_is_supported() says this is not one: use transport = verbs "
			     "(or auto)",
			     o->name);
			goto fail;
		}
		if (!d->direct)
			publish_note(d, "not an mlx5 device (mlx5dv_is_supported): verbs");
	}
	if (d->direct) {
		char why[KVL_VERBS_ERR_LEN];

		if (kvl_mlx5_env_check(&d->shut_up_bf, why, sizeof(why)) != 0) {
			if (o->backend == KVL_VERBS_BACKEND_MLX5) {
				rc = ENOTSUP;
				errf(err, errlen, "%s: %s", o->name, why);
				goto fail;
			}
			d->direct = false;
			snprintf(d->backend_note, sizeof(d->backend_note), "%s: verbs", why);
			publish_note(d, d->backend_note);
		}
	}

	rc = ibv_query_port(d->ctx, d->port, &pa);
	if (rc != 0) {
		errf(err, errlen, "%s: cannot query port %u: %s", o->name, d->port, strerror(rc));
		goto fail;
	}
	if (pa.state != IBV_PORT_ACTIVE) {
		rc = ENETDOWN;
		errf(err, errlen,
		     "%s port %u is %s, not ACTIVE: check its link (ibv_devinfo; on RoCE, 'ip "
		     "link' "
		     "of the netdev; on InfiniBand, the cable and the subnet manager)",
		     o->name, d->port, ibv_port_state_str(pa.state));
		goto fail;
	}
	d->link_layer = pa.link_layer == IBV_LINK_LAYER_ETHERNET ? IBV_LINK_LAYER_ETHERNET
								 : IBV_LINK_LAYER_INFINIBAND;
	d->lid = pa.lid;
	d->max_msg_sz = pa.max_msg_sz;
	d->mtu = (uint8_t)pa.active_mtu;
	if (o->mtu != 0 && mtu_code(o->mtu) < d->mtu)
		d->mtu = mtu_code(o->mtu);

	if (o->service_level > 15) {
		rc = EINVAL;
		errf(err, errlen, "%s port %u: service_level %u is not an InfiniBand SL (0..15)",
		     o->name, d->port, o->service_level);
		goto fail;
	}
	if (o->pkey_index >= pa.pkey_tbl_len) {
		rc = EINVAL;
		errf(err, errlen,
		     "%s port %u: pkey_index %u is past the port's P_Key table (size %u: "
		     "/sys/class/infiniband/%s/ports/%u/pkeys/)",
		     o->name, d->port, o->pkey_index, pa.pkey_tbl_len, o->name, d->port);
		goto fail;
	}
	d->traffic_class = o->traffic_class;
	d->service_level = o->service_level;
	d->pkey_index = o->pkey_index;

	if (o->gid_index >= 0)
		rc = -use_gid_index(d, o->sysfs_root, o->gid_index, pa.gid_tbl_len, err, errlen);
	else if (d->link_layer == IBV_LINK_LAYER_ETHERNET)
		rc = -pick_gid(d, o->sysfs_root, pa.gid_tbl_len, err, errlen);
	else
		rc = -use_gid_index(d, o->sysfs_root, 0, pa.gid_tbl_len, err, errlen);
	if (rc != 0)
		goto fail;
	if (d->link_layer == IBV_LINK_LAYER_INFINIBAND && d->lid == 0) {
		rc = ENETDOWN;
		errf(err, errlen,
		     "%s port %u has LID 0: no subnet manager has configured it (start opensm "
		     "or the switch's SM)",
		     o->name, d->port);
		goto fail;
	}

	d->pd = ibv_alloc_pd(d->ctx);
	if (d->pd == NULL) {
		rc = errno;
		errf(err, errlen, "%s: cannot allocate a protection domain: %s", o->name,
		     strerror(rc));
		goto fail;
	}
	return d;
fail:
	if (d->ctx != NULL)
		ibv_close_device(d->ctx);
	free(d);
	errno = rc ? rc : EIO;
	return NULL;
}

/* Free the device's connections first: a PD still holding QPs cannot be released. */
void kvl_verbs_close(struct kvl_verbs_dev *d)
{
	if (d == NULL)
		return;
	for (unsigned i = 0; i < d->n_mr; i++)
		ibv_dereg_mr(d->mr[i].mr);
	if (d->pd != NULL)
		ibv_dealloc_pd(d->pd);
	ibv_close_device(d->ctx);
	free(d);
}

const char *kvl_verbs_dev_backend(const struct kvl_verbs_dev *d)
{
	return __atomic_load_n(&d->direct, __ATOMIC_RELAXED) ? "mlx5" : "verbs";
}

const char *kvl_verbs_dev_backend_note(const struct kvl_verbs_dev *d)
{
	const char *n = __atomic_load_n(&d->note, __ATOMIC_ACQUIRE);

	return n != NULL ? n : "";
}

bool kvl_verbs_dev_sge_equal_only(const struct kvl_verbs_dev *d)
{
	return d->sge_equal_only;
}

void kvl_verbs_dev_info(const struct kvl_verbs_dev *d, int *gid_index, int *gid_type, unsigned *mtu,
			bool *cq_moderation)
{
	if (gid_index != NULL)
		*gid_index = d->gid_index;
	if (gid_type != NULL)
		*gid_type = d->gid_type;
	if (mtu != NULL)
		*mtu = mtu_bytes(d->mtu);
	if (cq_moderation != NULL)
		*cq_moderation = d->max_cq_count > 0;
}

/* ---- memory ---- */

static void fmt_limit(rlim_t v, char *buf, size_t cap)
{
	if (v == RLIM_INFINITY)
		snprintf(buf, cap, "unlimited");
	else
		snprintf(buf, cap, "%llu KiB", (unsigned long long)(v / 1024));
}

int kvl_verbs_reg(struct kvl_verbs_dev *d, void *base, uint64_t len, uint32_t flags, uint32_t *rkey,
		  uint64_t *ns, char *err, size_t errlen)
{
	int access = IBV_ACCESS_LOCAL_WRITE; /* RDMA READ lands in local memory */
	struct ibv_mr *mr;
	uint64_t t0, t1;
	unsigned n;

	err_clear(err, errlen);
	if (d == NULL || base == NULL || len == 0 ||
	    (flags & ~(uint32_t)(KVL_SEG_REMOTE_READ | KVL_SEG_REMOTE_WRITE)) != 0) {
		errf(err, errlen, "%s: nothing to register (base %p, %llu bytes, flags 0x%x)",
		     d ? d->name : "?", base, (unsigned long long)len, flags);
		return -EINVAL;
	}
	n = d->n_mr;
	if (n == MAX_MRS) {
		errf(err, errlen,
		     "%s: %u regions are registered already, the most one device holds", d->name,
		     MAX_MRS);
		return -ENOSPC;
	}
	if (flags & KVL_SEG_REMOTE_READ)
		access |= IBV_ACCESS_REMOTE_READ;
	if (flags & KVL_SEG_REMOTE_WRITE)
		access |= IBV_ACCESS_REMOTE_WRITE;
	t0 = kvl_now_ns();
	mr = ibv_reg_mr(d->pd, base, len, access);
	t1 = kvl_now_ns();
	if (ns != NULL)
		*ns = t1 - t0;
	if (mr == NULL) {
		int e = errno ? errno : EIO;
		struct rlimit rl;
		char cur[32], max[32];

		if ((e == ENOMEM || e == EPERM) && getrlimit(RLIMIT_MEMLOCK, &rl) == 0) {
			fmt_limit(rl.rlim_cur, cur, sizeof(cur));
			fmt_limit(rl.rlim_max, max, sizeof(max));
			errf(err, errlen,
			     "%s: cannot register %llu KiB at %p: %s; the locked-memory limit "
			     "RLIMIT_MEMLOCK is %s (hard %s) and registration pins every page: "
			     "raise it (ulimit -l unlimited, or LimitMEMLOCK=infinity in the "
			     "systemd unit, or a memlock line in limits.conf)",
			     d->name, (unsigned long long)(len >> 10), base, strerror(e), cur, max);
		} else {
			errf(err, errlen, "%s: cannot register %llu bytes at %p: %s", d->name,
			     (unsigned long long)len, base, strerror(e));
		}
		return -e;
	}
	d->mr[n] = (struct mr_ent){ (uintptr_t)base, len, mr->lkey, mr };
	__atomic_store_n(&d->n_mr, n + 1, __ATOMIC_RELEASE);
	if (rkey != NULL)
		*rkey = mr->rkey;
	return 0;
}

/* ---- QP state machine ---- */

static int qp_modify(struct kvl_verbs_conn *c, struct ibv_qp_attr *a, int mask, const char *to,
		     char *err, size_t errlen)
{
	int rc = ibv_modify_qp(c->qp, a, mask);
	char gs[INET6_ADDRSTRLEN];

	if (rc == 0)
		return 0;
	if (rc < 0) /* some providers return -1 and set errno */
		rc = errno ? errno : EIO;
	errf(err, errlen,
	     "%s: QP 0x%x to %s failed: %s (remote QPN 0x%x, GID %s, path MTU %u, PSN 0x%x/0x%x)",
	     c->d->name, c->qp->qp_num, to, strerror(rc), c->remote.qpn,
	     gid_str((const union ibv_gid *)c->remote.gid, gs, sizeof(gs)), mtu_bytes(c->path_mtu),
	     c->local.psn, c->remote.psn);
	return -rc;
}

#define RECV_TAG (1ull << 63) /* wr_id of a receive: never a post sequence number */

/* Fill the receive queue (INIT or later; a reset empties it). */
static void post_recvs(struct kvl_verbs_conn *c)
{
	struct ibv_recv_wr w = { .wr_id = RECV_TAG | c->rq_epoch, .sg_list = NULL, .num_sge = 0 },
			   *bad;

	while (c->rq_posted < c->rq_depth) {
		if (ibv_post_recv(c->qp, &w, &bad) != 0) {
			c->stats.recv_post_errors++;
			return;
		}
		c->rq_posted++;
	}
}

static int qp_to_init(struct kvl_verbs_conn *c, char *err, size_t errlen)
{
	struct ibv_qp_attr a = {
		.qp_state = IBV_QPS_INIT,
		.pkey_index = c->d->pkey_index,
		.port_num = c->d->port,
		/* what the peer may do to us; each segment's MR narrows it */
		.qp_access_flags = IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE,
	};

	int rc = qp_modify(c, &a,
			   IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS,
			   "INIT", err, errlen);

	if (rc == 0) {
		c->rq_posted = 0; /* from RESET: the receive queue is empty */
		c->rq_epoch++;
		post_recvs(c);
	}
	return rc;
}

/* After the QP went to RESET: what the CQ still holds belongs to the last incarnation
 * (rdma-core cleans a CQ of a reset QP's entries, but not one read through mlx5dv). */
static void direct_reset(struct kvl_verbs_conn *c)
{
	struct kvl_mlx5_cqe_info e[32];
	unsigned got;

	kvl_mlx5_sq_reset(&c->sq);
	while ((got = kvl_mlx5_cq_poll(&c->dcq, e, 32)) != 0)
		c->stats.reset_discards += got;
}

/*
 * RESET -> INIT -> RTR -> RTS towards c->remote, from any state. The PSNs are those of the
 * addresses the two ends exchanged (local.psn out, remote.psn in): a peer that restarts its
 * side with the address it already holds meets us at the same numbers without a new exchange.
 */
static int qp_start(struct kvl_verbs_conn *c, char *err, size_t errlen)
{
	const struct kvl_verbs_dev *d = c->d;
	struct ibv_qp_attr a;
	int rc;

	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RESET;
	rc = qp_modify(c, &a, IBV_QP_STATE, "RESET", err, errlen);
	if (rc == 0 && c->direct)
		direct_reset(c);
	if (rc == 0)
		rc = qp_to_init(c, err, errlen);
	if (rc != 0)
		return rc;

	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = c->path_mtu;
	a.dest_qp_num = c->remote.qpn;
	a.rq_psn = c->remote.psn;
	a.max_dest_rd_atomic = d->rd_atomic;
	a.min_rnr_timer = MIN_RNR_TIMER;
	a.ah_attr.port_num = d->port;
	a.ah_attr.sl = d->service_level;
	if (d->link_layer == IBV_LINK_LAYER_ETHERNET) {
		/* RoCE has no LIDs: every packet carries a GRH (v1) or IP header (v2) */
		a.ah_attr.is_global = 1;
		memcpy(a.ah_attr.grh.dgid.raw, c->remote.gid, sizeof(a.ah_attr.grh.dgid.raw));
		a.ah_attr.grh.sgid_index = (uint8_t)d->gid_index;
		a.ah_attr.grh.hop_limit = HOP_LIMIT;
		a.ah_attr.grh.traffic_class = d->traffic_class;
	} else {
		a.ah_attr.dlid = c->remote.lid;
	}
	rc = qp_modify(c, &a,
		       IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
			       IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER,
		       "RTR", err, errlen);
	if (rc != 0)
		return rc;

	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.timeout = ACK_TIMEOUT;
	a.retry_cnt = RETRY_CNT;
	a.rnr_retry = RNR_RETRY;
	a.sq_psn = c->local.psn;
	a.max_rd_atomic = d->init_rd_atomic;
	rc = qp_modify(c, &a,
		       IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
			       IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC,
		       "RTS", err, errlen);
	if (rc != 0)
		return rc;
	c->since_sig = 0;
	return 0;
}

/* ---- connection ---- */

static uint64_t pow2_at_least(uint64_t n)
{
	uint64_t p = 1;

	while (p < n)
		p <<= 1;
	return p;
}

static uint32_t random_psn(void)
{
	uint32_t v;

	if (getrandom(&v, sizeof(v), GRND_NONBLOCK) != (ssize_t)sizeof(v))
		v = (uint32_t)kvl_now_ns() ^ ((uint32_t)getpid() << 8);
	return v & 0xffffff;
}

/*
 * Moderation coalesces completion *events*: it spares an lcore that arms the CQ and sleeps;
 * a busy poller reads every CQE either way. Selective signaling is what cuts the CQEs.
 */
static void cq_moderate(struct kvl_verbs_conn *c, unsigned count, unsigned period_us,
			struct msg *note)
{
	const struct kvl_verbs_dev *d = c->d;
	struct ibv_modify_cq_attr ma = { .attr_mask = IBV_CQ_ATTR_MODERATE };
	int rc;

	if (count == 0)
		return;
	if (d->max_cq_count == 0) {
		msg_add(note,
			"%s: CQ moderation not supported (max_cq_count 0): completion events are "
			"not coalesced; selective signaling still cuts CQEs",
			d->name);
		return;
	}
	ma.moderate.cq_count = (uint16_t)(count < d->max_cq_count ? count : d->max_cq_count);
	ma.moderate.cq_period =
		(uint16_t)(period_us < d->max_cq_period ? period_us : d->max_cq_period);
	rc = ibv_modify_cq(c->cq, &ma);
	/* mlx5 direct: the send CQ is a CQ of its own, and its events are the ones that count */
	if (rc == 0 && c->scq != NULL)
		rc = ibv_modify_cq(c->scq, &ma);
	if (rc != 0)
		msg_add(note, "%s: CQ moderation refused by the device: %s; running without it",
			d->name, strerror(rc < 0 ? errno : rc));
}

static int make_cq(struct kvl_verbs_conn *c, unsigned cqe, char *err, size_t errlen)
{
	struct ibv_cq_init_attr_ex ca = {
		.cqe = cqe,
		.channel = c->ch,
		.wc_flags = IBV_WC_EX_WITH_IMM |
			    IBV_WC_EX_WITH_BYTE_LEN, /* an unasked field reads NULL */
		.comp_mask = IBV_CQ_INIT_ATTR_MASK_FLAGS,
		.flags = IBV_CREATE_CQ_ATTR_SINGLE_THREADED, /* one lcore: skip the CQ lock */
	};
	int e1;

	c->cqx = ibv_create_cq_ex(c->d->ctx, &ca);
	if (c->cqx == NULL) {
		ca.comp_mask = 0; /* the provider may not know the flag */
		c->cqx = ibv_create_cq_ex(c->d->ctx, &ca);
	}
	if (c->cqx != NULL) {
		c->cq = ibv_cq_ex_to_cq(c->cqx);
		return 0;
	}
	e1 = errno;
	c->cq = ibv_create_cq(c->d->ctx, (int)cqe, NULL, c->ch, 0);
	if (c->cq != NULL)
		return 0;
	errf(err, errlen, "%s: cannot create a CQ of %u entries: %s (ibv_create_cq_ex: %s)",
	     c->d->name, cqe, strerror(errno), strerror(e1));
	return -(errno ? errno : EIO);
}

/* The device's shared state of the doorbell register @reg (BlueFlame buffers of @size), made
 * on first use; NULL when the table is full or @reg was seen with another size. */
static struct kvl_mlx5_bf *bf_register(struct kvl_verbs_dev *d, void *reg, uint32_t size)
{
	for (unsigned i = 0; i < d->n_bf; i++)
		if (d->bf[i].reg == reg)
			return d->bf[i].size == size ? &d->bf[i] : NULL;
	if (d->n_bf == MAX_BF_REGS)
		return NULL;
	d->bf[d->n_bf] = (struct kvl_mlx5_bf){ .reg = reg, .size = size };
	return &d->bf[d->n_bf++];
}

/*
 * mlx5 direct backend: a send CQ of its own (the fast path reads it; rdma-core leaves a CQ
 * read through mlx5dv alone) and the QP created through verbs, then read through mlx5dv and
 * checked (kvl_mlx5_hw_from_verbs). Receives stay on c->cq. 0, or -errno with the reason.
 */
static int direct_setup(struct kvl_verbs_conn *c, struct ibv_qp_init_attr_ex *qa, char *err,
			size_t errlen)
{
	struct kvl_verbs_dev *d = c->d;
	unsigned bbs = kvl_mlx5_wqe_bbs(c->max_sge);
	/* One CQE per WQE at most (flushes included), two windows' worth as for verbs */
	unsigned cqe = 2 * c->depth * bbs;
	char why[KVL_VERBS_ERR_LEN] = "";
	struct kvl_mlx5_hw hw;
	int rc;

	if (cqe > (unsigned)d->max_cqe)
		cqe = (unsigned)d->max_cqe;
	/* On the connection's completion channel too: the lcore arms it itself (kvl_verbs_arm) */
	c->scq = ibv_create_cq(d->ctx, (int)cqe, NULL, c->ch, 0);
	if (c->scq == NULL) {
		rc = -(errno ? errno : EIO);
		errf(err, errlen, "%s: mlx5: cannot create a send CQ of %u entries: %s", d->name,
		     cqe, strerror(-rc));
		return rc;
	}
	qa->send_cq = c->scq;
	qa->comp_mask = IBV_QP_INIT_ATTR_PD; /* no ibv_wr_* ops: WQEs are written here */
	qa->send_ops_flags = 0;
	/* Scatter to CQE off: a small READ must land in its buffer, never inside a CQE that
	 * this poller does not copy out (rdma-core's poll would). */
	c->qp = mlx5dv_create_qp(d->ctx, qa,
				 &(struct mlx5dv_qp_init_attr){
					 .comp_mask = MLX5DV_QP_INIT_ATTR_MASK_QP_CREATE_FLAGS,
					 .create_flags = MLX5DV_QP_CREATE_DISABLE_SCATTER_TO_CQE,
				 });
	if (c->qp == NULL) {
		rc = -(errno ? errno : EIO);
		errf(err, errlen, "%s: mlx5: cannot create an RC QP of depth %u: %s", d->name,
		     c->depth, strerror(-rc));
		goto undo;
	}
	rc = kvl_mlx5_hw_from_verbs(c->qp, c->scq, &hw, why, sizeof(why));
	if (rc == 0 && hw.sq.wqe_cnt < c->depth * bbs) {
		rc = -ENOTSUP;
		snprintf(why, sizeof(why), "mlx5: SQ of %u WQEBBs cannot hold %u WQEs of %u SGEs",
			 hw.sq.wqe_cnt, c->depth, c->max_sge);
	}
	if (rc == 0) {
		if (d->shut_up_bf)
			hw.sq.bf_size = 0; /* the provider said BlueFlame is off: doorbells only */
		hw.sq.bf = bf_register(d, hw.sq.bf_reg, hw.sq.bf_size);
		if (hw.sq.bf == NULL) {
			rc = -ENOTSUP;
			snprintf(why, sizeof(why),
				 "mlx5: doorbell register %p: %u registers in use already, or seen "
				 "with another BlueFlame size",
				 hw.sq.bf_reg, d->n_bf);
		}
	}
	if (rc == 0) {
		rc = kvl_mlx5_sq_init(&c->sq, &hw.sq);
		if (rc == 0)
			rc = kvl_mlx5_cq_init(&c->dcq, hw.cq_buf, hw.cqe_cnt, hw.cqe_size,
					      hw.cq_dbrec);
		c->dcq.uar = hw.cq_uar;
		c->dcq.cqn = hw.cqn;
		if (rc != 0) {
			kvl_mlx5_sq_fini(&c->sq);
			snprintf(why, sizeof(why), "mlx5: SQ/CQ refused by the fast path: %s",
				 strerror(-rc));
		}
	}
	if (rc != 0) {
		errf(err, errlen, "%s: %s", d->name, why);
		goto undo;
	}
	c->direct = true;
	return 0;
undo:
	if (c->qp != NULL)
		ibv_destroy_qp(c->qp);
	c->qp = NULL;
	ibv_destroy_cq(c->scq);
	c->scq = NULL;
	return rc;
}

struct kvl_verbs_conn *kvl_verbs_conn_new(struct kvl_verbs_dev *d, unsigned depth,
					  unsigned signal_every, unsigned cq_count,
					  unsigned cq_period_us, struct kvl_verbs_addr *local,
					  char *err, size_t errlen)
{
	struct kvl_verbs_conn *c;
	struct ibv_qp_init_attr_ex qa;
	struct msg note = { err, errlen, 0 };
	unsigned cqe;
	int rc;

	err_clear(err, errlen);
	if (d == NULL || depth == 0 || (int)depth > d->max_qp_wr || (int)depth > d->max_cqe) {
		errf(err, errlen,
		     "%s: queue depth %u is outside 1..%d (the device's max_qp_wr %d, "
		     "max_cqe %d)",
		     d ? d->name : "?", depth,
		     d ? (d->max_qp_wr < d->max_cqe ? d->max_qp_wr : d->max_cqe) : 0,
		     d ? d->max_qp_wr : 0, d ? d->max_cqe : 0);
		errno = EINVAL;
		return NULL;
	}
	c = calloc(1, sizeof(*c));
	if (c == NULL)
		goto nomem;
	c->d = d;
	c->depth = depth;
	c->signal_every = signal_every == 0 ? 1 : signal_every > depth ? depth : signal_every;
	c->resync_timeout_ns = 5000ull * 1000 * 1000;
	c->max_sge = d->max_sge < KVL_WR_MAX_SGE ? (unsigned)(d->max_sge > 0 ? d->max_sge : 1)
						 : KVL_WR_MAX_SGE;
	c->rq_depth = depth;
	c->notes_mask = (unsigned)pow2_at_least(depth) - 1;
	c->notes = calloc(c->notes_mask + 1, sizeof(*c->notes));
	if (c->notes == NULL)
		goto nomem;
	c->mask = pow2_at_least(depth) - 1;
	c->ring = calloc(c->mask + 1, sizeof(*c->ring));
	if (c->ring == NULL)
		goto nomem;

	/*
	 * Each WR makes at most one CQE, but after kvl_verbs_fail_all() the flushes of one
	 * incarnation may still sit in the CQ while the next one runs: room for two windows.
	 */
	cqe = 2 * (depth + c->rq_depth);
	if (cqe > (unsigned)d->max_cqe)
		cqe = (unsigned)d->max_cqe;
	/* A channel of its own, non-blocking: an lcore in hybrid idle mode sleeps on its fd
	 * (with others, in one epoll set) and takes the events without ever blocking on one.
	 * Without one the lcore naps a bounded time instead. */
	c->ch = ibv_create_comp_channel(d->ctx);
	if (c->ch != NULL &&
	    fcntl(c->ch->fd, F_SETFL, fcntl(c->ch->fd, F_GETFL) | O_NONBLOCK) < 0) {
		ibv_destroy_comp_channel(c->ch);
		c->ch = NULL;
	}
	rc = make_cq(c, cqe, err, errlen);
	if (rc != 0)
		goto fail;

	memset(&qa, 0, sizeof(qa));
	qa.send_cq = c->cq;
	qa.recv_cq = c->cq;
	qa.cap.max_send_wr = depth;
	qa.cap.max_recv_wr = c->rq_depth;
	qa.cap.max_send_sge = c->max_sge;
	qa.cap.max_recv_sge = 1;
	qa.qp_type = IBV_QPT_RC;
	qa.sq_sig_all = 0;
	qa.pd = d->pd;
	if (d->direct) {
		rc = direct_setup(c, &qa, err, errlen);
		if (rc == 0)
			goto qp_made;
		if (d->backend == KVL_VERBS_BACKEND_MLX5)
			goto fail;
		/* auto: this device's QPs are not what the fast path handles; verbs from now on */
		__atomic_store_n(&d->direct, false, __ATOMIC_RELAXED);
		snprintf(d->backend_note, sizeof(d->backend_note), "%s: verbs", err);
		publish_note(d, d->backend_note);
		err_clear(err, errlen);
		qa.send_cq = c->cq;
	}
	qa.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
	qa.send_ops_flags = IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_READ |
			    IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM;
	c->qp = ibv_create_qp_ex(d->ctx, &qa);
	if (c->qp == NULL) {
		rc = -(errno ? errno : EIO);
		errf(err, errlen,
		     "%s: cannot create an RC QP of depth %u with the ibv_wr_* API: %s", d->name,
		     depth, strerror(-rc));
		goto fail;
	}
	c->qpx = ibv_qp_to_qp_ex(c->qp);
	if (c->qpx == NULL) {
		rc = -EOPNOTSUPP;
		errf(err, errlen, "%s: the provider has no ibv_qp_ex for its QPs", d->name);
		goto fail;
	}
qp_made:
	rc = qp_to_init(c, err, errlen);
	if (rc != 0)
		goto fail;

	c->local.qpn = c->qp->qp_num;
	c->local.psn = random_psn();
	memcpy(c->local.gid, d->gid.raw, sizeof(c->local.gid));
	c->local.lid = d->link_layer == IBV_LINK_LAYER_INFINIBAND ? d->lid : 0;
	c->local.mtu = d->mtu;
	c->local.gid_type = (uint8_t)d->gid_type;
	c->local.gid_index = (uint8_t)d->gid_index;
	c->local.port = d->port;
	if (local != NULL)
		*local = c->local;
	cq_moderate(c, cq_count, cq_period_us, &note);
	return c;
nomem:
	rc = -ENOMEM;
	errf(err, errlen, "%s: out of memory for a connection of depth %u", d->name, depth);
fail:
	kvl_verbs_conn_free(c);
	errno = -rc;
	return NULL;
}

void kvl_verbs_conn_free(struct kvl_verbs_conn *c)
{
	if (c == NULL)
		return;
	if (c->qp != NULL)
		ibv_destroy_qp(c->qp);
	if (c->scq != NULL)
		ibv_destroy_cq(c->scq);
	if (c->direct)
		kvl_mlx5_sq_fini(&c->sq);
	if (c->cq != NULL) {
		kvl_verbs_take_events(c); /* destroying a CQ waits for its events to be acked */
		ibv_destroy_cq(c->cq);
	}
	if (c->ch != NULL)
		ibv_destroy_comp_channel(c->ch);
	free(c->rseg);
	free(c->ring);
	free(c->notes);
	free(c);
}

int kvl_verbs_conn_connect(struct kvl_verbs_conn *c, const struct kvl_verbs_addr *r, char *err,
			   size_t errlen)
{
	const struct kvl_verbs_dev *d = c->d;
	bool eth = d->link_layer == IBV_LINK_LAYER_ETHERNET;
	char gs[INET6_ADDRSTRLEN];
	int rc;

	err_clear(err, errlen);
	if (r == NULL || r->qpn == 0 || r->qpn > 0xffffff || r->psn > 0xffffff) {
		errf(err, errlen, "%s: the peer's address is not usable (QPN 0x%x, PSN 0x%x)",
		     d->name, r ? r->qpn : 0, r ? r->psn : 0);
		return -EINVAL;
	}
	if (mtu_bytes(r->mtu) == 0) {
		errf(err, errlen,
		     "%s: the peer's MTU code %u is not one of 1..5 (256..4096 bytes): its address "
		     "is corrupt or from another version",
		     d->name, r->mtu);
		return -EINVAL;
	}
	if (r->gid_type > 2) {
		errf(err, errlen, "%s: the peer's GID type %u is unknown (0 IB, 1 RoCE v1, 2 v2)",
		     d->name, r->gid_type);
		return -EINVAL;
	}
	if (eth != (r->gid_type != 0)) {
		errf(err, errlen,
		     "link layers differ: local %s port %u is %s, the peer's port is %s: an RC "
		     "connection needs both ends on the same link layer (Ethernet/RoCE or "
		     "InfiniBand)",
		     d->name, d->port, eth ? "Ethernet (RoCE)" : "InfiniBand",
		     r->gid_type ? "Ethernet (RoCE)" : "InfiniBand");
		return -EPROTO;
	}
	if (eth && r->gid_type != d->gid_type) {
		errf(err, errlen,
		     "GID types differ: local %s gid_index %d is %s, the peer's gid_index %u is "
		     "%s: "
		     "both ends must use the same RoCE version (set gid_index on one side to an "
		     "entry of the other's type; show_gids lists them)",
		     d->name, d->gid_index, gid_type_name(d->gid_type), r->gid_index,
		     gid_type_name(r->gid_type));
		return -EPROTO;
	}
	if (eth && gid_zero((const union ibv_gid *)r->gid)) {
		errf(err, errlen, "%s: the peer's GID is all zeros: its gid_index %u is empty",
		     d->name, r->gid_index);
		return -EINVAL;
	}
	if (!eth && r->lid == 0) {
		errf(err, errlen,
		     "%s: the peer's LID is 0: no subnet manager has configured its port %u (start "
		     "opensm or the switch's SM there)",
		     d->name, r->port);
		return -EPROTO;
	}
	if (c->done_seq < c->nic_end && !c->broken) {
		errf(err, errlen,
		     "%s: %llu requests are still on QP 0x%x: reap them, or kvl_verbs_fail_all() "
		     "first (a reset would lose their completions)",
		     d->name, (unsigned long long)(c->nic_end - c->done_seq), c->qp->qp_num);
		return -EBUSY;
	}

	c->remote = *r;
	c->path_mtu = r->mtu < d->mtu ? r->mtu : d->mtu;
	c->connected = false;
	rc = qp_start(c, err, errlen);
	if (rc != 0)
		return rc;
	c->connected = true;
	c->broken = 0;
	c->phase = PH_RUN;
	c->resp_pending = false;
	c->ack_due = false;
	c->answered = false;
	/* Completions of the last incarnation still in the CQ are stale: by sequence number
	 * they all fall before done_seq and are dropped when polled. */
	if (r->mtu != d->mtu)
		errf(err, errlen,
		     "%s: path MTU %u bytes: local side allows %u, the peer (%s) %u; the smaller "
		     "is used",
		     d->name, mtu_bytes(c->path_mtu), mtu_bytes(d->mtu),
		     gid_str((const union ibv_gid *)r->gid, gs, sizeof(gs)), mtu_bytes(r->mtu));
	return 0;
}

void kvl_verbs_conn_addrs(const struct kvl_verbs_conn *c, struct kvl_verbs_addr *local,
			  struct kvl_verbs_addr *remote)
{
	if (local != NULL)
		*local = c->local;
	if (remote != NULL)
		*remote = c->remote;
}

int kvl_verbs_set_remote(struct kvl_verbs_conn *c, const struct kvl_verbs_rseg *s, unsigned n)
{
	struct kvl_verbs_rseg *copy = NULL;

	if (n != 0 && s == NULL)
		return -EINVAL;
	for (unsigned i = 0; i < n; i++) {
		if (s[i].addr + s[i].len < s[i].addr)
			return -EINVAL; /* wraps: no real mapping does */
		for (unsigned j = 0; j < i; j++)
			if (s[j].id == s[i].id)
				return -EEXIST;
	}
	if (n != 0) {
		copy = malloc(n * sizeof(*copy));
		if (copy == NULL)
			return -ENOMEM;
		memcpy(copy, s, n * sizeof(*copy));
	}
	free(c->rseg);
	c->rseg = copy;
	c->n_rseg = n;
	c->rseg_hint = 0;
	return 0;
}

/* ---- completions ---- */

static void finish(struct kvl_verbs_conn *c, struct slot *s, int status)
{
	s->status = status;
	c->stats.completed++;
	if (status != KVL_OK)
		c->stats.failed[status]++;
	else if (s->op == KVL_OP_WRITE)
		c->stats.bytes_written += s->length;
	else
		c->stats.bytes_read += s->length;
}

/* Complete every request before @end; those that went to the NIC get @st. */
static void finish_until(struct kvl_verbs_conn *c, uint64_t end, int st)
{
	for (; c->done_seq < end; c->done_seq++) {
		struct slot *s = &c->ring[c->done_seq & c->mask];

		finish(c, s, s->nic ? st : s->status);
	}
}

/* Refused requests at the head have nothing to wait for. */
static void finish_refused(struct kvl_verbs_conn *c)
{
	while (c->done_seq != c->post_seq) {
		struct slot *s = &c->ring[c->done_seq & c->mask];

		if (s->nic)
			break;
		finish(c, s, s->status);
		c->done_seq++;
	}
}

/* Enter PH_DRAIN: the QP is (or is being put) in ERR; every WR it holds comes back flushed. */
static void start_drain(struct kvl_verbs_conn *c)
{
	if (c->phase == PH_DRAIN)
		return;
	c->phase = PH_DRAIN;
	c->flush_end = c->done_seq;
}

/*
 * A send completion for the WR at @seq: @st its kvl_status, @flush when the QP was in error
 * already (the WR is kept and posted again), @wc and @vendor what the provider said, for the
 * counters.
 */
static void on_cqe(struct kvl_verbs_conn *c, uint64_t seq, int st, bool flush, uint32_t wc,
		   uint32_t vendor_err)
{
	c->stats.cqes++;
	/* Stale: a flush of an incarnation that fail_all or a reconnect already accounted for. */
	if (seq < c->done_seq || seq >= c->post_seq)
		return;
	if (st == KVL_OK) {
		finish_until(c, seq + 1, KVL_OK);
		finish_refused(c);
		return;
	}
	c->stats.errors++;
	if (!flush) {
		c->stats.last_wc_status = wc;
		c->stats.last_vendor_err = vendor_err;
		/* RC reports an error on the oldest unfinished WR: all before it succeeded. This
		 * one alone carries the error; those behind it are flushed and posted again. */
		finish_until(c, seq, KVL_OK);
		finish_until(c, seq + 1, st);
		finish_refused(c);
	}
	/* A flush with no error of ours before it: the QP went down for a reason outside this
	 * side's requests (the peer's responder saw an error, the port died): resync too. */
	start_drain(c);
	c->flush_end = seq + 1;
}

/* A receive completed: an immediate (WRITE_WITH_IMM landed), or a flush of the queue. */
static void on_recv(struct kvl_verbs_conn *c, uint64_t wr_id, enum ibv_wc_status st, bool with_imm,
		    uint32_t imm_be, uint32_t len)
{
	if ((uint32_t)wr_id != c->rq_epoch)
		return; /* flushed before the reset that emptied its queue */
	c->rq_posted--;
	if (st != IBV_WC_SUCCESS) {
		if (st != IBV_WC_WR_FLUSH_ERR)
			c->stats.recv_errors++;
		return; /* a restart refills the queue */
	}
	if (with_imm) {
		if (c->notes_tail - c->notes_head > c->notes_mask) {
			c->stats.notes_dropped++; /* nobody takes them: count, keep the QP going */
		} else {
			c->notes[c->notes_tail++ & c->notes_mask] =
				(struct kvl_note){ be32toh(imm_be), len };
			c->stats.notes++;
		}
	}
	post_recvs(c);
}

unsigned kvl_verbs_notes(struct kvl_verbs_conn *c, struct kvl_note *out, unsigned max)
{
	unsigned n = 0;

	for (; n < max && c->notes_head != c->notes_tail; n++)
		out[n] = c->notes[c->notes_head++ & c->notes_mask];
	return n;
}

/* mlx5 direct: send completions straight from the CQ, by owner bit. A CQE names the WQE it
 * completes by its SQ index; the SQ gives back the post sequence number stored there. */
static unsigned poll_direct(struct kvl_verbs_conn *c)
{
	struct kvl_mlx5_cqe_info e[32];
	unsigned n = 0, got;

	do {
		got = kvl_mlx5_cq_poll(&c->dcq, e, 32);
		for (unsigned i = 0; i < got; i++) {
			uint64_t seq;

			if ((e[i].opcode != KVL_MLX5_CQE_REQ &&
			     e[i].opcode != KVL_MLX5_CQE_REQ_ERR) ||
			    kvl_mlx5_sq_complete(&c->sq, e[i].wqe_counter, &seq) != 0) {
				c->stats.stray_cqes++;
				continue;
			}
			if (e[i].opcode == KVL_MLX5_CQE_REQ && e[i].status != KVL_OK &&
			    seq >= c->done_seq && seq < c->post_seq) {
				/* A success CQE in a form not read here (data scattered into it,
				 * a compressed block): the request fails rather than completing
				 * with bytes that never arrived, and the QP goes to error so that
				 * the rest come back flushed and the two ends resync. */
				struct ibv_qp_attr a = { .qp_state = IBV_QPS_ERR };

				(void)ibv_modify_qp(c->qp, &a, IBV_QP_STATE);
			}
			on_cqe(c, seq, e[i].status, e[i].flush,
			       e[i].opcode == KVL_MLX5_CQE_REQ_ERR
				       ? (uint32_t)kvl_mlx5_syndrome_wc(e[i].syndrome)
			       : e[i].status != KVL_OK ? IBV_WC_GENERAL_ERR
						       : IBV_WC_SUCCESS,
			       e[i].vendor_synd);
		}
		n += got;
	} while (got == 32 && n < POLL_BUDGET);
	return n;
}

static unsigned poll_cq(struct kvl_verbs_conn *c)
{
	unsigned n = 0;

	c->stats.cq_polls++;
	if (c->direct)
		n = poll_direct(c);
	if (c->cqx != NULL) {
		/*
		 * One CQE per start/end pair, never ibv_next_poll(): rxe's next_poll (rdma-core
		 * 44) already consumes and unlocks when it finds the queue empty, and the
		 * ibv_end_poll() the man page asks for then moves the consumer index past the
		 * producer: the CQ reads as full of garbage. With selective signaling CQEs are
		 * few, and a single-threaded CQ takes no lock, so the pair costs little.
		 */
		struct ibv_poll_cq_attr pa = { .comp_mask = 0 };

		while (n < POLL_BUDGET && ibv_start_poll(c->cqx, &pa) == 0) {
			uint64_t seq = c->cqx->wr_id;
			enum ibv_wc_status st = c->cqx->status;
			uint32_t vendor = st == IBV_WC_SUCCESS ? 0 : ibv_wc_read_vendor_err(c->cqx);

			if (seq & RECV_TAG) {
				bool imm = st == IBV_WC_SUCCESS &&
					   ibv_wc_read_opcode(c->cqx) == IBV_WC_RECV_RDMA_WITH_IMM;
				uint32_t v = imm ? ibv_wc_read_imm_data(c->cqx) : 0;
				uint32_t len = imm ? ibv_wc_read_byte_len(c->cqx) : 0;

				ibv_end_poll(c->cqx);
				on_recv(c, seq, st, imm, v, len);
				n++;
				continue;
			}
			ibv_end_poll(c->cqx);
			on_cqe(c, seq, kvl_wc_status(st), st == IBV_WC_WR_FLUSH_ERR, st, vendor);
			n++;
		}
		return n;
	}
	for (;;) {
		struct ibv_wc wc[16];
		int r = ibv_poll_cq(c->cq, 16, wc);

		for (int i = 0; i < r; i++) {
			if (wc[i].wr_id & RECV_TAG)
				on_recv(c, wc[i].wr_id, wc[i].status,
					wc[i].status == IBV_WC_SUCCESS &&
						wc[i].opcode == IBV_WC_RECV_RDMA_WITH_IMM,
					wc[i].imm_data, wc[i].byte_len);
			else
				on_cqe(c, wc[i].wr_id, kvl_wc_status(wc[i].status),
				       wc[i].status == IBV_WC_WR_FLUSH_ERR, wc[i].status,
				       wc[i].vendor_err);
		}
		if (r > 0)
			n += (unsigned)r;
		if (r < 16 || n >= POLL_BUDGET)
			return n;
	}
}

/* Hand the slot at @seq to the QP (verbs: inside ibv_wr_start/complete; mlx5: a WQE in the
 * SQ, announced by the doorbell in wr_complete). False when the SQ refused it (mlx5). */
static bool wr_one(struct kvl_verbs_conn *c, uint64_t seq, bool signaled)
{
	const struct slot *s = &c->ring[seq & c->mask];

	if (c->direct) {
		struct kvl_mlx5_sge sg[KVL_WR_MAX_SGE];
		struct kvl_mlx5_wqe w = {
			.wrid = seq,
			.raddr = s->raddr,
			.rkey = s->rkey,
			.imm = s->imm,
			.sge = sg,
			.nsge = s->n_sge,
			.opcode = s->op == KVL_OP_READ	       ? KVL_MLX5_OP_RDMA_READ
				  : (s->flags & KVL_WR_NOTIFY) ? KVL_MLX5_OP_RDMA_WRITE_IMM
							       : KVL_MLX5_OP_RDMA_WRITE,
			.flags = signaled ? KVL_MLX5_F_SIGNAL : 0,
		};

		for (unsigned i = 0; i < s->n_sge; i++)
			sg[i] = (struct kvl_mlx5_sge){ s->sg[i].addr, s->sg[i].lkey,
						       s->sg[i].length };
		return kvl_mlx5_sq_post(&c->sq, &w) == 0;
	}
	c->qpx->wr_id = seq;
	c->qpx->wr_flags = signaled ? IBV_SEND_SIGNALED : 0;
	if (s->op == KVL_OP_READ)
		ibv_wr_rdma_read(c->qpx, s->rkey, s->raddr);
	else if (s->flags & KVL_WR_NOTIFY)
		ibv_wr_rdma_write_imm(c->qpx, s->rkey, s->raddr, htobe32(s->imm));
	else
		ibv_wr_rdma_write(c->qpx, s->rkey, s->raddr);
	ibv_wr_set_sge_list(c->qpx, s->n_sge, s->sg);
	return true;
}

/* The WRs [first, last] are written: one doorbell for them. On failure (verbs) none of them
 * reached the NIC. @last is the newest WR written, and it is signaled. */
static void wr_complete(struct kvl_verbs_conn *c, uint64_t first, uint64_t last, unsigned nic,
			unsigned sig)
{
	int rc;

	c->stats.posts++;
	if (c->direct) {
		kvl_mlx5_sq_ring(&c->sq);
		c->stats.doorbells = c->sq.stats.doorbells;
		c->stats.bf_copies = c->sq.stats.bf_copies;
		c->nic_end = last + 1;
		c->stats.posted += nic;
		c->stats.signaled += sig;
		return;
	}
	rc = ibv_wr_complete(c->qpx);
	if (rc == 0) {
		c->nic_end = last + 1;
		c->stats.posted += nic;
		c->stats.signaled += sig;
		c->stats.doorbells++;
		return;
	}
	/* The whole posting was dropped (QP not in RTS, a WR the provider refused). */
	for (uint64_t q = first; q <= last; q++) {
		struct slot *s = &c->ring[q & c->mask];

		if (s->nic) {
			s->nic = false;
			s->status = KVL_ERR_CONN_LOST;
		}
	}
	c->since_sig = 0;
}

/*
 * Hand the taken requests [from, post_seq) to the QP in one batch: one doorbell, one
 * signaled WR every signal_every and always the newest. Those below nic_end went to the NIC
 * before (a resync's replay): counted as replayed.
 */
static void post_range(struct kvl_verbs_conn *c, uint64_t from)
{
	uint64_t first = 0, last = 0, written = 0, old_end = c->nic_end;
	/*
	 * Completions are only learnt at signaled WRs: with few requests in flight a fixed
	 * interval would make the caller wait for a whole window before it may post again (a
	 * window of 16 and signal_every 16 drains the pipe every time). A quarter of what is in
	 * flight keeps it flowing; signal_every caps it for deep queues.
	 */
	uint64_t inflight = c->post_seq - c->done_seq;
	unsigned every =
		inflight / 4 < c->signal_every ? (unsigned)(inflight / 4) : c->signal_every;
	unsigned nic = 0, sig = 0;
	bool any = false;

	if (every == 0)
		every = 1;
	for (uint64_t q = from; q != c->post_seq; q++)
		if (c->ring[q & c->mask].nic) {
			last = q;
			any = true;
		}
	if (!any) {
		finish_refused(c);
		return;
	}
	for (uint64_t q = from; q <= last; q++) {
		struct slot *s = &c->ring[q & c->mask];
		bool signaled;

		if (!s->nic)
			continue;
		if (nic == 0) {
			if (!c->direct)
				ibv_wr_start(c->qpx);
			first = q;
		}
		signaled = ++c->since_sig >= every || q == last;
		if (!wr_one(c, q, signaled)) {
			/* mlx5: the SQ has no room or refused the WQE; the setup checks make this
			 * unreachable, but a request must never be left waiting for a CQE. */
			s->nic = false;
			s->status = KVL_ERR_PROTOCOL;
			c->stats.errors++;
			continue;
		}
		if (signaled) {
			c->since_sig = 0;
			sig++;
		}
		nic++;
		written = q;
		if (q < old_end)
			c->stats.replayed++;
		c->stats.sge_wrs += s->n_sge > 1;
	}
	if (nic != 0) {
		/* The newest WQE must make a CQE, or those before it would wait for ever (only
		 * the mlx5 path can have lost its signaled one, above). */
		if (c->direct && kvl_mlx5_sq_signal_last(&c->sq) == 1)
			sig++;
		wr_complete(c, first, written, nic, sig);
	}
	finish_refused(c);
}

/* Post again what the last incarnation flushed, and what was taken meanwhile. */
static void replay(struct kvl_verbs_conn *c)
{
	post_range(c, c->done_seq);
}

/* Both ends agreed: restart at the fresh PSNs, post again what was flushed. */
static void restart(struct kvl_verbs_conn *c, uint32_t local_psn, uint32_t remote_psn)
{
	c->local.psn = local_psn;
	c->remote.psn = remote_psn;
	c->phase = PH_RUN;
	c->resp_pending = false;
	if (qp_start(c, NULL, 0) != 0) {
		kvl_verbs_fail_all(c, KVL_ERR_CONN_LOST);
		return;
	}
	c->stats.recoveries++;
	replay(c);
}

/* Our end restarts in the peer's place when the tie says so: the lower (GID, QPN) yields,
 * so two REQs that cross resolve to one REQ and one ACK. */
static bool we_yield(const struct kvl_verbs_conn *c)
{
	int r = memcmp(c->local.gid, c->remote.gid, sizeof(c->local.gid));

	return r < 0 || (r == 0 && c->local.qpn < c->remote.qpn);
}

static void answer(struct kvl_verbs_conn *c, uint32_t my_psn, uint32_t their_psn)
{
	c->ack_due = true;
	c->ack_psn = my_psn;
	c->ack_echo = their_psn;
	c->answered = true;
	c->stats.resync_answered++;
	restart(c, my_psn, their_psn);
}

unsigned kvl_verbs_progress(struct kvl_verbs_conn *c)
{
	unsigned work;

	if (c == NULL)
		return 0;
	kvl_verbs_flush(c);
	work = poll_cq(c);
	/* After ibv_end_poll: a reset cleans the CQ, which must not happen inside a poll. */
	if (c->phase == PH_DRAIN && c->flush_end >= c->nic_end) {
		if (c->resp_pending) {
			answer(c, random_psn(), c->peer_new_psn);
		} else {
			c->phase = PH_WAIT;
			c->my_new_psn = random_psn();
			c->next_req_ns = 0;
			c->wait_deadline = kvl_now_ns() + c->resync_timeout_ns;
			c->stats.resyncs++;
		}
		work++;
	} else if (c->phase == PH_WAIT && kvl_now_ns() > c->wait_deadline) {
		/* The peer never answered: bounded, like any other failure. */
		c->stats.resync_timeouts++;
		kvl_verbs_fail_all(c, KVL_ERR_CONN_LOST);
		work++;
	}
	return work;
}

int kvl_verbs_resync_out(struct kvl_verbs_conn *c, struct kvl_resync *m)
{
	uint64_t t;

	if (c->ack_due) {
		c->ack_due = false;
		*m = (struct kvl_resync){ KVL_RESYNC_ACK, c->ack_psn, c->ack_echo };
		return 1;
	}
	if (c->phase != PH_WAIT || c->broken)
		return 0;
	t = kvl_now_ns();
	if (t < c->next_req_ns)
		return 0;
	/* Again every RESYNC_RESEND_NS until answered: a message lost with a control
	 * connection that was replaced must not leave both ends waiting. */
	c->next_req_ns = t + RESYNC_RESEND_NS;
	*m = (struct kvl_resync){ KVL_RESYNC_REQ, c->my_new_psn, 0 };
	return 1;
}

/*
 * The completion channel the lcore sleeps on, and arming before it does. mlx5 direct: the
 * receive CQ through the provider, the send CQ with its own arm doorbell (the provider's
 * ibv_req_notify_cq would use a consumer index it no longer keeps); no UAR from mlx5dv for
 * the CQ: no events, and an idle lcore naps for the bounded time instead.
 */
int kvl_verbs_event_fd(const struct kvl_verbs_conn *c)
{
	return c->ch != NULL && (!c->direct || c->dcq.uar != NULL) ? c->ch->fd : -1;
}

int kvl_verbs_arm(struct kvl_verbs_conn *c)
{
	int rc;

	if (kvl_verbs_event_fd(c) < 0)
		return -ENOTSUP;
	if (c->armed)
		return 0;
	rc = ibv_req_notify_cq(c->cq, 0);
	if (rc != 0)
		return -(rc > 0 ? rc : EIO);
	if (c->direct)
		kvl_mlx5_cq_arm(&c->dcq);
	c->armed = true;
	c->stats.arms++;
	return 0;
}

unsigned kvl_verbs_take_events(struct kvl_verbs_conn *c)
{
	struct ibv_cq *cq;
	void *ctx;
	unsigned n = 0, ns = 0;

	if (c->ch == NULL)
		return 0;
	while (ibv_get_cq_event(c->ch, &cq, &ctx) == 0) {
		if (c->direct && cq == c->scq) {
			kvl_mlx5_cq_event(&c->dcq);
			ns++;
		} else {
			n++;
		}
	}
	if (n != 0)
		ibv_ack_cq_events(c->cq, n);
	if (ns != 0)
		ibv_ack_cq_events(c->scq, ns);
	if (n + ns != 0) {
		c->armed = false;
		c->stats.cq_events += n + ns;
	}
	return n + ns;
}

void kvl_verbs_set_resync_timeout(struct kvl_verbs_conn *c, unsigned ms)
{
	c->resync_timeout_ns = (uint64_t)(ms ? ms : 1) * 1000 * 1000;
}

void kvl_verbs_resync_in(struct kvl_verbs_conn *c, const struct kvl_resync *m)
{
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_ERR };

	if (!c->connected || c->broken || m->psn > 0xffffff) {
		c->stats.resync_ignored++;
		return;
	}
	if (m->kind == KVL_RESYNC_ACK) {
		if (c->phase == PH_WAIT && m->echo == c->my_new_psn)
			restart(c, c->my_new_psn, m->psn);
		else
			c->stats.resync_ignored++; /* a repeat, or for a REQ we gave up */
		return;
	}
	if (m->kind != KVL_RESYNC_REQ) {
		c->stats.resync_ignored++;
		return;
	}
	switch (c->phase) {
	case PH_RUN:
		if (c->answered && m->psn == c->remote.psn) {
			/* We restarted for this REQ already and our ACK got lost: say it again. */
			c->ack_due = true;
			return;
		}
		/* The peer's QP went down (our access error, its port): ours must restart too. */
		(void)ibv_modify_qp(c->qp, &a, IBV_QP_STATE);
		start_drain(c);
		c->resp_pending = true;
		c->peer_new_psn = m->psn;
		return;
	case PH_DRAIN:
		if (c->resp_pending || we_yield(c)) {
			c->resp_pending = true;
			c->peer_new_psn = m->psn;
		} else {
			c->stats.resync_ignored++; /* ours will come, and the peer yields to it */
		}
		return;
	case PH_WAIT:
		if (we_yield(c))
			answer(c, c->my_new_psn, m->psn);
		else
			c->stats.resync_ignored++;
		return;
	}
}

unsigned kvl_verbs_reap(struct kvl_verbs_conn *c, struct kvl_wc *wc, unsigned max)
{
	unsigned n = 0;

	for (; n < max && c->reap_seq != c->done_seq; n++, c->reap_seq++) {
		const struct slot *s = &c->ring[c->reap_seq & c->mask];

		wc[n].wr_id = s->wr_id;
		wc[n].status = s->status;
		wc[n].bytes = s->status == KVL_OK ? s->length : 0;
	}
	return n;
}

unsigned kvl_verbs_outstanding(const struct kvl_verbs_conn *c)
{
	return (unsigned)(c->post_seq - c->reap_seq);
}

void kvl_verbs_fail_all(struct kvl_verbs_conn *c, int status)
{
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_ERR };

	/* A failed connection must read as failed: KVL_OK or a foreign value cannot be it. */
	if (status <= KVL_OK || status >= KVL_STATUS_COUNT)
		status = KVL_ERR_CANCELED;
	/* The NIC stops touching our buffers once the QP is in error; the flushes it then
	 * writes are stale by sequence number and dropped by progress. */
	(void)ibv_modify_qp(c->qp, &a, IBV_QP_STATE);
	c->broken = status;
	c->phase = PH_RUN;
	c->resp_pending = false;
	c->ack_due = false;
	finish_until(c, c->post_seq, status);
	c->nic_end = c->post_seq;
}

/* Also KVL_ERR_CONN_LOST when a recovery could not bring the QP back: that connection is as
 * good as failed on purpose, and the lcore should close it the same way. */
int kvl_verbs_failed(const struct kvl_verbs_conn *c)
{
	return c->broken;
}

/* ---- posting ---- */

/* Local range inside memory registered on this device: its lkey, or KVL_ERR_LOCAL. */
static int local_check(struct kvl_verbs_conn *c, const void *p, uint32_t len, uint32_t *lkey)
{
	const struct kvl_verbs_dev *d = c->d;
	unsigned n = __atomic_load_n(&d->n_mr, __ATOMIC_ACQUIRE);
	uintptr_t a = (uintptr_t)p;

	*lkey = 0;
	if (len == 0)
		return KVL_OK; /* touches no memory: no SGE is posted */
	for (unsigned k = 0; k < n; k++) {
		unsigned i = (c->mr_hint + k) % n;
		const struct mr_ent *m = &d->mr[i];

		if (a >= m->base && a - m->base <= m->len && len <= m->len - (a - m->base)) {
			c->mr_hint = i;
			*lkey = m->lkey;
			return KVL_OK;
		}
	}
	return KVL_ERR_LOCAL;
}

static int remote_check(struct kvl_verbs_conn *c, const struct kvl_wr *w, uint64_t *raddr,
			uint32_t *rkey)
{
	for (unsigned k = 0; k < c->n_rseg; k++) {
		unsigned i = (c->rseg_hint + k) % c->n_rseg;
		const struct kvl_verbs_rseg *r = &c->rseg[i];
		struct kvl_seg s;
		int st;

		if (r->id != w->remote_seg)
			continue;
		c->rseg_hint = i;
		s = (struct kvl_seg){ .len = r->len, .id = r->id, .flags = r->flags };
		st = kvl_seg_check(&s, w->remote_off, w->length, w->op);
		*raddr = r->addr + w->remote_off;
		*rkey = r->rkey;
		return st;
	}
	return KVL_ERR_NO_SEGMENT;
}

static uint32_t gcd32(uint32_t a, uint32_t b)
{
	while (b != 0) {
		uint32_t t = a % b;

		a = b;
		b = t;
	}
	return a;
}

/*
 * Rewrite @s's SGE list as pieces of one length (the lengths' greatest common divisor), in
 * order, so that a provider that sums num_sge times the first length gets the true total.
 * -E2BIG when that takes more pieces than the QP has SGEs.
 */
static int equal_pieces(const struct kvl_verbs_conn *c, struct slot *s)
{
	struct ibv_sge in[KVL_WR_MAX_SGE];
	uint32_t g = 0, n = 0;

	for (unsigned i = 0; i < s->n_sge; i++)
		g = gcd32(g, s->sg[i].length);
	for (unsigned i = 0; i < s->n_sge; i++)
		n += s->sg[i].length / g;
	if (n > c->max_sge)
		return -E2BIG;
	memcpy(in, s->sg, sizeof(in[0]) * s->n_sge);
	n = 0;
	for (unsigned i = 0; i < s->n_sge; i++)
		for (uint32_t off = 0; off < in[i].length; off += g)
			s->sg[n++] = (struct ibv_sge){ in[i].addr + off, g, in[i].lkey };
	s->n_sge = (uint8_t)n;
	return 0;
}

/* What the WR would complete with if it never reached the NIC; KVL_OK if it may go. */
static int check(struct kvl_verbs_conn *c, const struct kvl_wr *w, struct slot *s)
{
	uint64_t sum = 0;
	int st = KVL_OK;

	if (c->broken)
		return c->broken;
	if (!c->connected)
		return KVL_ERR_NO_PEER;
	if ((w->op != KVL_OP_WRITE && w->op != KVL_OP_READ) ||
	    ((w->flags & KVL_WR_NOTIFY) && w->op != KVL_OP_WRITE))
		return KVL_ERR_PROTOCOL; /* kvl_post() refuses these; a malformed request */
	if (w->length > c->d->max_msg_sz || w->n_sge > c->max_sge)
		return KVL_ERR_TOO_LARGE;
	if (w->n_sge <= 1) {
		s->n_sge = w->length != 0; /* 0 bytes: no SGE (mlx5 reads a 0-byte one as 2 GiB) */
		s->sg[0] = (struct ibv_sge){ (uintptr_t)w->local, w->length, 0 };
	} else {
		s->n_sge = w->n_sge;
		for (unsigned i = 0; i < w->n_sge; i++) {
			s->sg[i] =
				(struct ibv_sge){ (uintptr_t)w->sge[i].addr, w->sge[i].length, 0 };
			sum += w->sge[i].length;
			if (w->sge[i].length == 0)
				return KVL_ERR_PROTOCOL;
		}
		if (sum != w->length)
			return KVL_ERR_PROTOCOL; /* kvl_post() computes it: a malformed request */
		if (c->d->sge_equal_only && equal_pieces(c, s) != 0)
			return KVL_ERR_TOO_LARGE;
	}
	for (unsigned i = 0; i < s->n_sge && st == KVL_OK; i++)
		st = local_check(c, (const void *)(uintptr_t)s->sg[i].addr, s->sg[i].length,
				 &s->sg[i].lkey);
	if (st == KVL_OK)
		st = remote_check(c, w, &s->raddr, &s->rkey);
	return st;
}

unsigned kvl_verbs_enqueue(struct kvl_verbs_conn *c, const struct kvl_wr *wr, unsigned n)
{
	uint64_t room;

	/* Resyncing: new requests wait (the lcore keeps them) until both ends run again. */
	if (c->phase != PH_RUN)
		return 0;
	room = c->depth - (c->post_seq - c->reap_seq);
	if (n > room)
		n = (unsigned)room;
	for (unsigned i = 0; i < n; i++) {
		const struct kvl_wr *w = &wr[i];
		struct slot *s = &c->ring[c->post_seq++ & c->mask];
		int st;

		s->wr_id = w->wr_id;
		s->length = w->length;
		s->op = w->op;
		s->flags = w->flags;
		s->imm = w->imm;
		st = check(c, w, s);
		s->nic = st == KVL_OK;
		s->status = st;
	}
	finish_refused(c);
	return n;
}

void kvl_verbs_flush(struct kvl_verbs_conn *c)
{
	if (c->phase == PH_RUN && !c->broken && c->post_seq != c->nic_end)
		post_range(c, c->nic_end > c->done_seq ? c->nic_end : c->done_seq);
}

unsigned kvl_verbs_post(struct kvl_verbs_conn *c, const struct kvl_wr *wr, unsigned n)
{
	n = kvl_verbs_enqueue(c, wr, n);
	kvl_verbs_flush(c);
	return n;
}

const struct kvl_verbs_stats *kvl_verbs_stats(const struct kvl_verbs_conn *c)
{
	return &c->stats;
}

enum kvl_qp_state kvl_verbs_conn_state(const struct kvl_verbs_conn *c)
{
	if (c->broken)
		return KVL_QP_FAILED;
	if (!c->connected)
		return KVL_QP_INIT;
	return c->phase == PH_DRAIN  ? KVL_QP_DRAIN
	       : c->phase == PH_WAIT ? KVL_QP_RESYNC
				     : KVL_QP_RTS;
}

const char *kvl_qp_state_name(uint64_t state)
{
	static const char *const names[] = { "INIT", "RTS", "DRAIN", "RESYNC", "FAILED" };

	return state < sizeof(names) / sizeof(names[0]) ? names[state] : "?";
}

const char *kvl_verbs_qp_state(struct kvl_verbs_conn *c)
{
	static const char *const names[] = {
		[IBV_QPS_RESET] = "RESET", [IBV_QPS_INIT] = "INIT", [IBV_QPS_RTR] = "RTR",
		[IBV_QPS_RTS] = "RTS",	   [IBV_QPS_SQD] = "SQD",   [IBV_QPS_SQE] = "SQE",
		[IBV_QPS_ERR] = "ERR",
	};
	struct ibv_qp_attr a;
	struct ibv_qp_init_attr ia;

	if (c == NULL || c->qp == NULL || ibv_query_qp(c->qp, &a, IBV_QP_STATE, &ia) != 0)
		return "?";
	if ((unsigned)a.qp_state >= sizeof(names) / sizeof(names[0]) || names[a.qp_state] == NULL)
		return "UNKNOWN";
	return names[a.qp_state];
}

int kvl_verbs_qp_path(struct kvl_verbs_conn *c, struct kvl_verbs_qp_path *p)
{
	struct ibv_qp_attr a;
	struct ibv_qp_init_attr ia;
	int rc;

	if (c == NULL || c->qp == NULL)
		return -EINVAL;
	rc = ibv_query_qp(c->qp, &a, IBV_QP_PATH_MTU | IBV_QP_AV | IBV_QP_PKEY_INDEX, &ia);
	if (rc != 0)
		return -rc;
	p->mtu = 128u << a.path_mtu;
	p->traffic_class = a.ah_attr.grh.traffic_class;
	p->service_level = a.ah_attr.sl;
	p->pkey_index = a.pkey_index;
	return 0;
}
