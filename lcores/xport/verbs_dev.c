/* SPDX-License-Identifier: BSD-3-Clause */
/* Verbs transport, the device: open it, check its port, choose the GID, the backend. */
#include <arpa/inet.h>
#include <errno.h>
#include <infiniband/mlx5dv.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "verbs_priv.h"

__attribute__((format(printf, 3, 4))) void kvl_verbs_errf(char *err, size_t errlen, const char *fmt,
							  ...)
{
	va_list ap;

	if (err == NULL || errlen == 0)
		return;
	va_start(ap, fmt);
	vsnprintf(err, errlen, fmt, ap);
	va_end(ap);
}

void kvl_verbs_err_clear(char *err, size_t errlen)
{
	if (err != NULL && errlen != 0)
		err[0] = '\0';
}

unsigned kvl_verbs_mtu_bytes(unsigned m)
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

const char *kvl_verbs_gid_type_name(int t)
{
	return t == 0 ? "InfiniBand" : t == 1 ? "RoCE v1" : t == 2 ? "RoCE v2" : "unknown";
}

const char *kvl_verbs_gid_str(const union ibv_gid *g, char *buf, size_t cap)
{
	if (inet_ntop(AF_INET6, g->raw, buf, (socklen_t)cap) == NULL)
		snprintf(buf, cap, "?");
	return buf;
}

bool kvl_verbs_gid_zero(const union ibv_gid *g)
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

/* gid_attrs/<attr>/<index> of the device's port. */
static int gid_attr(const struct kvl_verbs_dev *d, const char *root, const char *attr, int index,
		    char *buf, size_t cap)
{
	char path[512];
	int rc = kvl_sysfs_path(path, sizeof(path), root,
				"class/infiniband/%s/ports/%u/gid_attrs/%s/%d", d->name, d->port,
				attr, index);

	return rc != 0 ? rc : kvl_sysfs_read(path, buf, cap);
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
static void list_gids(const struct kvl_verbs_dev *d, const char *root, int tbl_len,
		      struct kvl_msg *m)
{
	unsigned shown = 0;

	for (int i = 0; i < tbl_len; i++) {
		union ibv_gid g;
		char gs[INET6_ADDRSTRLEN], nd[64];
		int t;

		if (ibv_query_gid(d->ctx, d->port, i, &g) != 0 || kvl_verbs_gid_zero(&g))
			continue;
		t = gid_type_of(d, root, i);
		if (gid_attr(d, root, "ndevs", i, nd, sizeof(nd)) < 0)
			snprintf(nd, sizeof(nd), "-");
		kvl_msg_add(m, "%s[%d] %s %s %s", shown++ ? ", " : "", i,
			    kvl_verbs_gid_str(&g, gs, sizeof(gs)), kvl_verbs_gid_type_name(t), nd);
	}
	if (shown == 0)
		kvl_msg_add(m, "empty");
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
	struct kvl_msg m;

	kvl_msg_init(&m, err, errlen);

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
		char path[512];

		kvl_sysfs_path(path, sizeof(path), root,
			       "class/infiniband/%s/ports/%u/gid_attrs/types", d->name, d->port);
		kvl_msg_add(&m,
			    "%s port %u: gid_index auto reads GID types from %s, which has none "
			    "readable (is /sys mounted?): set gid_index",
			    d->name, d->port, path);
		return -ENOENT;
	}
	kvl_msg_add(&m,
		    "%s port %u: no RoCE v2 GID with an IPv4 address of %s (GID table: ", d->name,
		    d->port, netdev[0] ? netdev : "its netdev");
	list_gids(d, root, tbl_len, &m);
	kvl_msg_add(&m, "): give %s an IPv4 address, or set gid_index to a RoCE v2 entry",
		    netdev[0] ? netdev : "the netdev");
	return -EADDRNOTAVAIL;
}

static int use_gid_index(struct kvl_verbs_dev *d, const char *root, int idx, int tbl_len, char *err,
			 size_t errlen)
{
	struct kvl_msg m;

	kvl_msg_init(&m, err, errlen);

	if (idx >= tbl_len) {
		kvl_msg_add(&m, "%s port %u: gid_index %d is past the GID table (%d entries)",
			    d->name, d->port, idx, tbl_len);
		return -EINVAL;
	}
	if (ibv_query_gid(d->ctx, d->port, idx, &d->gid) != 0 || kvl_verbs_gid_zero(&d->gid)) {
		kvl_msg_add(&m,
			    "%s port %u: gid_index %d is an empty GID entry (GID table: ", d->name,
			    d->port, idx);
		list_gids(d, root, tbl_len, &m);
		kvl_msg_add(&m, ")");
		return -EADDRNOTAVAIL;
	}
	d->gid_index = idx;
	d->gid_type = d->link_layer == IBV_LINK_LAYER_ETHERNET ? gid_type_of(d, root, idx) : 0;
	if (d->gid_type < 0) {
		kvl_msg_add(&m, "%s port %u: gid_index %d has no known GID type", d->name, d->port,
			    idx);
		return -EADDRNOTAVAIL;
	}
	return 0;
}

static void no_such_device(const char *name, struct ibv_device **list, int n, char *err,
			   size_t errlen)
{
	struct kvl_msg m;

	kvl_msg_init(&m, err, errlen);

	if (n == 0) {
		kvl_msg_add(
			&m,
			"no RDMA device \"%s\": this host has none (load the NIC's RDMA driver, "
			"or rdma_rxe and 'rdma link add' for soft-RoCE)",
			name);
		return;
	}
	kvl_msg_add(&m, "no RDMA device \"%s\"; devices here: ", name);
	for (int i = 0; i < n; i++)
		kvl_msg_add(&m, "%s%s", i ? ", " : "", ibv_get_device_name(list[i]));
}

/* Set the backend note once: @text (copied unless it is backend_note itself), then visible. */
void kvl_verbs_publish_note(struct kvl_verbs_dev *d, const char *text)
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

	kvl_verbs_err_clear(err, errlen);
	if (o == NULL || o->name == NULL || o->name[0] == '\0') {
		kvl_verbs_errf(err, errlen, "no RDMA device named");
		errno = EINVAL;
		return NULL;
	}
	if (o->mtu != 0 && mtu_code(o->mtu) == 0) {
		kvl_verbs_errf(
			err, errlen,
			"%s: mtu %u is not an RDMA path MTU: use 256, 512, 1024, 2048 or 4096 "
			"(it is not the Ethernet MTU)",
			o->name, o->mtu);
		errno = EINVAL;
		return NULL;
	}
	list = ibv_get_device_list(&n);
	if (list == NULL) {
		rc = errno;
		kvl_verbs_errf(err, errlen, "%s: cannot list RDMA devices: %s", o->name,
			       strerror(rc));
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
		kvl_verbs_errf(err, errlen, "%s: out of memory", o->name);
		errno = ENOMEM;
		return NULL;
	}
	snprintf(d->name, sizeof(d->name), "%s", o->name);
	d->port = (uint8_t)(o->port ? o->port : 1);
	d->ctx = ibv_open_device(dev);
	rc = errno;
	ibv_free_device_list(list);
	if (d->ctx == NULL) {
		kvl_verbs_errf(
			err, errlen, "%s: cannot open the device: %s%s", o->name, strerror(rc),
			rc == EACCES || rc == EPERM ? " (no access to /dev/infiniband/uverbs*)"
						    : "");
		goto fail;
	}

	memset(&ax, 0, sizeof(ax));
	rc = ibv_query_device_ex(d->ctx, NULL, &ax);
	if (rc != 0 && ibv_query_device(d->ctx, &ax.orig_attr) != 0) {
		rc = errno;
		kvl_verbs_errf(err, errlen, "%s: cannot query the device: %s", o->name,
			       strerror(rc));
		goto fail;
	}
	if (o->port == 0 || o->port > ax.orig_attr.phys_port_cnt) {
		rc = EINVAL;
		kvl_verbs_errf(err, errlen,
			       "%s: port %u does not exist: the device has %u port%s (1-based)",
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
		kvl_verbs_errf(err, errlen, "%s: unknown backend %d", o->name, o->backend);
		goto fail;
	}
	if (o->backend != KVL_VERBS_BACKEND_VERBS) {
		d->direct = mlx5dv_is_supported(d->ctx->device);
		if (!d->direct && o->backend == KVL_VERBS_BACKEND_MLX5) {
			rc = ENOTSUP;
			kvl_verbs_errf(
				err, errlen,
				"%s: transport mlx5 needs a ConnectX (mlx5) device, and "
				"mlx5dv_is_supported() says this is not one: use transport = verbs "
				"(or auto)",
				o->name);
			goto fail;
		}
		if (!d->direct)
			kvl_verbs_publish_note(d,
					       "not an mlx5 device (mlx5dv_is_supported): verbs");
	}
	if (d->direct) {
		char why[KVL_VERBS_ERR_LEN];

		if (kvl_mlx5_env_check(&d->shut_up_bf, why, sizeof(why)) != 0) {
			if (o->backend == KVL_VERBS_BACKEND_MLX5) {
				rc = ENOTSUP;
				kvl_verbs_errf(err, errlen, "%s: %s", o->name, why);
				goto fail;
			}
			d->direct = false;
			snprintf(d->backend_note, sizeof(d->backend_note), "%s: verbs", why);
			kvl_verbs_publish_note(d, d->backend_note);
		}
	}

	rc = ibv_query_port(d->ctx, d->port, &pa);
	if (rc != 0) {
		kvl_verbs_errf(err, errlen, "%s: cannot query port %u: %s", o->name, d->port,
			       strerror(rc));
		goto fail;
	}
	if (pa.state != IBV_PORT_ACTIVE) {
		rc = ENETDOWN;
		kvl_verbs_errf(
			err, errlen,
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
		kvl_verbs_errf(err, errlen,
			       "%s port %u: service_level %u is not an InfiniBand SL (0..15)",
			       o->name, d->port, o->service_level);
		goto fail;
	}
	if (o->pkey_index >= pa.pkey_tbl_len) {
		rc = EINVAL;
		kvl_verbs_errf(err, errlen,
			       "%s port %u: pkey_index %u is past the port's P_Key table (size %u: "
			       "/sys/class/infiniband/%s/ports/%u/pkeys/)",
			       o->name, d->port, o->pkey_index, pa.pkey_tbl_len, o->name, d->port);
		goto fail;
	}
	if (o->ack_timeout > 31 || o->retry_count > RETRY_CNT) {
		rc = EINVAL;
		kvl_verbs_errf(err, errlen,
			       "%s port %u: ack_timeout %u / retry_count %u: expected 1..31 and "
			       "1..%d",
			       o->name, d->port, o->ack_timeout, o->retry_count, RETRY_CNT);
		goto fail;
	}
	d->traffic_class = o->traffic_class;
	d->service_level = o->service_level;
	d->pkey_index = o->pkey_index;
	d->ack_timeout = o->ack_timeout != 0 ? o->ack_timeout : ACK_TIMEOUT;
	d->retry_cnt = o->retry_count != 0 ? o->retry_count : RETRY_CNT;

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
		kvl_verbs_errf(
			err, errlen,
			"%s port %u has LID 0: no subnet manager has configured it (start opensm "
			"or the switch's SM)",
			o->name, d->port);
		goto fail;
	}

	d->pd = ibv_alloc_pd(d->ctx);
	if (d->pd == NULL) {
		rc = errno;
		kvl_verbs_errf(err, errlen, "%s: cannot allocate a protection domain: %s", o->name,
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
		*mtu = kvl_verbs_mtu_bytes(d->mtu);
	if (cq_moderation != NULL)
		*cq_moderation = d->max_cq_count > 0;
}
