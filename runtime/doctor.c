/* SPDX-License-Identifier: BSD-3-Clause */
/* kvlane-doctor's checks: read the host through lcores/topo/ and pool.c, judge, say the fix. */
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "ctrl_proto.h"
#include "doctor.h"
#include "pool.h"
#include "sysfs.h"
#include "topo.h"

#define MAX_CPUS 1024

/* Everything one run needs, so each check is a short function over it. */
struct doc {
	const struct kvl_config *cfg;
	const char *sys;
	const char *proc;
	struct kvl_doc_report *r;
	bool have_ini;
	/* the EAL CPUs: main first, then the workers that can poll a NIC */
	bool have_cpus;
	unsigned cpus[MAX_CPUS];
	unsigned n_cpus;
	/* per NIC, from discovery */
	struct kvl_nic_info info[KVL_MAX_NICS];
	bool found[KVL_MAX_NICS];
	char name[KVL_MAX_NICS][KVL_LABEL_LEN + KVL_NAME_LEN + 8];
	bool rdma_needed;
	int n_rdma_devs;
};

const char *kvl_doc_verdict_name(int v)
{
	switch (v) {
	case KVL_DOC_PASS:
		return "PASS";
	case KVL_DOC_SKIP:
		return "SKIP";
	case KVL_DOC_WARN:
		return "WARN";
	default:
		return "FAIL";
	}
}

static struct kvl_doc_row *row(struct doc *d, const char *check, const char *subject, int verdict)
{
	static struct kvl_doc_row spill; /* past the cap: written and dropped, never overflowing */
	struct kvl_doc_row *w;

	if (d->r->n >= KVL_DOC_MAX_ROWS) {
		memset(&spill, 0, sizeof(spill));
		return &spill;
	}
	w = &d->r->rows[d->r->n++];
	memset(w, 0, sizeof(*w));
	kvl_copy_str(w->check, sizeof(w->check), check);
	kvl_copy_str(w->subject, sizeof(w->subject), subject);
	w->verdict = verdict;
	d->r->count[verdict]++;
	return w;
}

__attribute__((format(printf, 3, 4))) static void put(char *dst, size_t cap, const char *fmt, ...)
{
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(dst, cap, fmt, ap);
	va_end(ap);
	if (n >= (int)cap && cap > 4)
		memcpy(dst + cap - 4, "...", 4);
}

#define OBS(w, ...) put((w)->observed, sizeof((w)->observed), __VA_ARGS__)
#define EXP(w, ...) put((w)->expected, sizeof((w)->expected), __VA_ARGS__)
#define FIX(w, ...) put((w)->fix, sizeof((w)->fix), __VA_ARGS__)

static bool nic_is_rdma(const struct doc *d, unsigned i)
{
	return d->found[i] && d->info[i].kind == KVL_NIC_RDMA;
}

/* ---- RDMA devices and modules ---- */

/* Soft-RoCE needs a netdev to sit on: name one the fix can use. */
static void some_netdev(const char *sys, char *out, size_t cap)
{
	struct dirent **names;
	char path[PATH_MAX];
	int n;

	kvl_copy_str(out, cap, "<netdev>");
	if (kvl_sysfs_path(path, sizeof(path), sys, "class/net") < 0)
		return;
	n = kvl_sysfs_list(path, &names);
	if (n < 0)
		return;
	for (int i = 0; i < n; i++)
		if (strcmp(names[i]->d_name, "lo") != 0) {
			kvl_copy_str(out, cap, names[i]->d_name);
			break;
		}
	kvl_sysfs_free_list(names, n);
}

static void check_devices(struct doc *d)
{
	struct dirent **names;
	char path[PATH_MAX], list[256] = "", nd[64];
	struct kvl_msg m;
	struct kvl_doc_row *w;
	int n;

	kvl_sysfs_path(path, sizeof(path), d->sys, "class/infiniband");
	n = kvl_sysfs_list(path, &names);
	kvl_msg_init(&m, list, sizeof(list));
	for (int i = 0; i < n; i++)
		kvl_msg_add(&m, "%s%s", i ? ", " : "", names[i]->d_name);
	if (n > 0)
		kvl_sysfs_free_list(names, n);
	d->n_rdma_devs = n > 0 ? n : 0;
	if (n > 0) {
		w = row(d, "rdma_devices", "host", KVL_DOC_PASS);
		OBS(w, "%d RDMA device%s under %s: %s", n, n == 1 ? "" : "s", path, list);
		EXP(w, "at least one RDMA device (as ibv_devices lists them)");
		return;
	}
	w = row(d, "rdma_devices", "host", d->rdma_needed ? KVL_DOC_FAIL : KVL_DOC_WARN);
	if (n == -ENOENT)
		OBS(w, "no RDMA device: %s does not exist (ib_core is not loaded)", path);
	else
		OBS(w, "no RDMA device under %s", path);
	EXP(w, "%s",
	    !d->have_ini     ? "at least one RDMA device (ibv_devices)"
	    : d->rdma_needed ? "the RDMA devices the INI names"
			     : "an RDMA device (the INI uses tcp only: kvlane runs, over TCP)");
	some_netdev(d->sys, nd, sizeof(nd));
	FIX(w,
	    "load the NIC's RDMA driver (modprobe mlx5_ib for ConnectX), or soft-RoCE: "
	    "modprobe rdma_rxe && rdma link add rxe0 type rxe netdev %s",
	    nd);
}

static void check_modules(struct doc *d)
{
	static const char *const providers[] = { "mlx5_ib", "rdma_rxe", "siw", "irdma", "bnxt_re" };
	char have[128] = "";
	struct kvl_msg m;
	struct kvl_doc_row *w;
	bool core = kvl_module_loaded(d->sys, "ib_core"), prov = false;

	kvl_msg_init(&m, have, sizeof(have));
	if (core)
		kvl_msg_add(&m, "ib_core");
	for (unsigned i = 0; i < sizeof(providers) / sizeof(providers[0]); i++)
		if (kvl_module_loaded(d->sys, providers[i])) {
			kvl_msg_add(&m, "%s%s", m.len ? ", " : "", providers[i]);
			prov = true;
		}
	/* Built-in drivers without parameters have no module directory: devices prove them. */
	if (core && prov) {
		w = row(d, "modules", "host", KVL_DOC_PASS);
	} else if (d->n_rdma_devs > 0) {
		w = row(d, "modules", "host", KVL_DOC_PASS);
		kvl_msg_add(&m, "%s(RDMA devices present: built-in drivers)", m.len ? " " : "");
	} else {
		w = row(d, "modules", "host", d->rdma_needed ? KVL_DOC_FAIL : KVL_DOC_WARN);
		FIX(w, "modprobe mlx5_ib (ConnectX), or modprobe rdma_rxe / siw for software RDMA");
	}
	OBS(w, "loaded: %s", have[0] ? have : "none of ib_core, mlx5_ib, rdma_rxe, siw");
	EXP(w, "ib_core and a provider (mlx5_ib, rdma_rxe or siw)");
}

/* ---- per NIC: the device, its port, link layer, GIDs, MTU ---- */

static void check_nic_found(struct doc *d, unsigned i)
{
	const struct kvl_nic_conf *nic = &d->cfg->nics[i];
	char err[KVL_ERR_LEN];
	struct kvl_doc_row *w;
	int rc;

	rc = kvl_nic_discover(d->sys, nic, &d->info[i], err, sizeof(err));
	d->found[i] = rc == 0;
	if (rc == 0) {
		w = row(d, "device", d->name[i], KVL_DOC_PASS);
		OBS(w, "%s %s, driver %s, transport %s",
		    d->info[i].kind == KVL_NIC_RDMA ? "RDMA device" : "netdev", nic->device,
		    d->info[i].driver[0] ? d->info[i].driver : "none",
		    kvl_transport_name(d->info[i].transport));
		EXP(w, "[nic.%s] device = %s present", nic->label, nic->device);
		return;
	}
	w = row(d, "device", d->name[i], KVL_DOC_FAIL);
	OBS(w, "%s", err);
	EXP(w, "[nic.%s] device = %s present", nic->label, nic->device);
	FIX(w,
	    "set [nic.%s] device to a device ibv_devices (RDMA) or ip link (tcp) lists, "
	    "or load its driver",
	    nic->label);
}

static void check_port(struct doc *d, unsigned i)
{
	const struct kvl_nic_info *in = &d->info[i];
	const char *nd = in->netdev[0] ? in->netdev : "<netdev>";
	bool ib = strcmp(in->link_layer, "InfiniBand") == 0;
	struct kvl_doc_row *w;

	if (in->kind == KVL_NIC_NETDEV) {
		/* lo says "unknown": it has no carrier to report, and it works. */
		bool up = strcmp(in->state, "up") == 0 || strcmp(in->state, "unknown") == 0;

		w = row(d, "port_state", d->name[i], up ? KVL_DOC_PASS : KVL_DOC_FAIL);
		OBS(w, "netdev operstate %s", in->state[0] ? in->state : "unreadable");
		EXP(w, "up");
		if (!up)
			FIX(w, "ip link set dev %s up; check the cable and the switch port", nd);
		return;
	}
	w = row(d, "port_state", d->name[i],
		strcmp(in->state, "ACTIVE") == 0 &&
				(in->phys_state[0] == '\0' || strcmp(in->phys_state, "LinkUp") == 0)
			? KVL_DOC_PASS
			: KVL_DOC_FAIL);
	OBS(w, "port %u state %s, physical state %s", d->cfg->nics[i].port,
	    in->state[0] ? in->state : "unreadable",
	    in->phys_state[0] ? in->phys_state : "unknown");
	EXP(w, "state ACTIVE, physical state LinkUp (ibstat)");
	if (w->verdict == KVL_DOC_PASS)
		return;
	if (strcmp(in->phys_state, "LinkUp") == 0 && ib)
		FIX(w,
		    "the link is up but no subnet manager configured the port (state %s): run "
		    "opensm on a host of the fabric, or enable the switch's SM",
		    in->state);
	else if (strcmp(in->phys_state, "Disabled") == 0 && ib)
		FIX(w, "the port is administratively down: ibportstate <lid> %u enable",
		    d->cfg->nics[i].port);
	else if (strcmp(in->phys_state, "Disabled") == 0)
		FIX(w, "the port is administratively down: ip link set dev %s up", nd);
	else if (strcmp(in->phys_state, "Polling") == 0)
		FIX(w, "no link partner: check the cable, the transceiver and the switch port "
		       "(ibstat shows Polling while it waits)");
	else
		FIX(w,
		    "bring the link up: ip link set dev %s up; check the cable, transceiver and "
		    "switch port; ibstat %s shows the state",
		    nd, d->cfg->nics[i].device);
}

static void check_link_layer(struct doc *d, unsigned i)
{
	const struct kvl_nic_info *in = &d->info[i];
	struct kvl_doc_row *w;
	bool eth = strcmp(in->link_layer, "Ethernet") == 0,
	     ib = strcmp(in->link_layer, "InfiniBand") == 0;

	w = row(d, "link_layer", d->name[i], eth || ib ? KVL_DOC_PASS : KVL_DOC_WARN);
	if (eth)
		OBS(w, "Ethernet (RoCE) over netdev %s", in->netdev[0] ? in->netdev : "unknown");
	else
		OBS(w, "%s", in->link_layer[0] ? in->link_layer : "unreadable");
	EXP(w, "Ethernet (RoCE) or InfiniBand");
	if (w->verdict != KVL_DOC_PASS)
		FIX(w, "sysfs shows no link layer for the port: is the driver loaded fully?");
}

static const char *gid_type_name(int t)
{
	return t == 0 ? "IB" : t == 1 ? "RoCE v1" : t == 2 ? "RoCE v2" : "unknown";
}

/* The entry kvlaned's gid_index = auto takes: RoCE v2, IPv4, on the netdev of GID 0. */
static const struct kvl_gid_entry *auto_gid(const struct kvl_gid_entry *g, int n)
{
	const char *nd = n > 0 && g[0].index == 0 ? g[0].netdev : "";

	for (int k = 0; k < n; k++)
		if (g[k].type == 2 && g[k].ipv4 && (nd[0] == '\0' || strcmp(g[k].netdev, nd) == 0))
			return &g[k];
	return NULL;
}

static void list_gids(char *buf, size_t cap, const struct kvl_gid_entry *g, int n)
{
	struct kvl_msg m;

	kvl_msg_init(&m, buf, cap);
	for (int k = 0; k < n; k++)
		kvl_msg_add(&m, "%s[%d] %s %s %s", k ? ", " : "", g[k].index,
			    g[k].ipv4 ? g[k].ipv4_addr : g[k].gid, gid_type_name(g[k].type),
			    g[k].netdev[0] ? g[k].netdev : "-");
	if (n == 0)
		kvl_msg_add(&m, "empty");
}

static void check_gid(struct doc *d, unsigned i)
{
	static struct kvl_gid_entry g[KVL_MAX_GIDS];
	const struct kvl_nic_conf *nic = &d->cfg->nics[i];
	const struct kvl_nic_info *in = &d->info[i];
	const struct kvl_gid_entry *best, *sel = NULL;
	char table[KVL_DOC_TEXT];
	struct kvl_doc_row *w;
	int n;

	n = kvl_port_gids(d->sys, nic->device, nic->port, g, KVL_MAX_GIDS);
	if (n < 0)
		n = 0;
	list_gids(table, sizeof(table), g, n);
	best = auto_gid(g, n);
	if (nic->gid_index >= 0)
		for (int k = 0; k < n; k++)
			if (g[k].index == nic->gid_index)
				sel = &g[k];

	if (nic->gid_index < 0) {
		w = row(d, "gid", d->name[i], best ? KVL_DOC_PASS : KVL_DOC_FAIL);
		if (best)
			OBS(w, "gid_index auto -> [%d] %s RoCE v2 on %s (table: %s)", best->index,
			    best->ipv4_addr, best->netdev, table);
		else
			OBS(w, "no RoCE v2 GID with an IPv4 address of %s (table: %s)",
			    in->netdev[0] ? in->netdev : "the netdev", table);
		EXP(w, "a RoCE v2 GID of %s's IPv4 address (show_gids)",
		    in->netdev[0] ? in->netdev : "the netdev");
		for (int k = 0; k < n && !best; k++)
			if (g[k].type == 1 && g[k].ipv4) {
				FIX(w,
				    "%s has a RoCE v1 GID for %s ([%d]) but no v2 one: the driver "
				    "or "
				    "firmware has RoCE v2 off (ConnectX-3: mlx4_core roce_mode; "
				    "others: "
				    "update the firmware), or pin gid_index = %d on both ends (v1 "
				    "stays "
				    "in one L2 domain)",
				    nic->device, g[k].ipv4_addr, g[k].index, g[k].index);
				return;
			}
		if (!best)
			FIX(w,
			    "give %s an IPv4 address (ip addr add 10.0.0.1/24 dev %s; the kernel "
			    "adds its RoCE v2 GID), or set [nic.%s] gid_index to a RoCE v2 entry",
			    in->netdev[0] ? in->netdev : "the netdev",
			    in->netdev[0] ? in->netdev : "<netdev>", nic->label);
		return;
	}
	if (sel == NULL) {
		w = row(d, "gid", d->name[i], KVL_DOC_FAIL);
		OBS(w, "gid_index %d is empty or past the table (table: %s)", nic->gid_index,
		    table);
		EXP(w, "gid_index names a RoCE v2 entry");
	} else if (sel->type != 2) {
		w = row(d, "gid", d->name[i], KVL_DOC_WARN);
		OBS(w, "gid_index %d is %s (%s on %s); table: %s", nic->gid_index,
		    gid_type_name(sel->type), sel->ipv4 ? sel->ipv4_addr : sel->gid,
		    sel->netdev[0] ? sel->netdev : "-", table);
		EXP(w, "a RoCE v2 GID: v1 is not routable and a v1 end against a v2 end connects "
		       "but never moves data (\"handshake fine, bulk terrible\")");
	} else {
		w = row(d, "gid", d->name[i], sel->ipv4 ? KVL_DOC_PASS : KVL_DOC_WARN);
		OBS(w, "gid_index %d is RoCE v2 %s on %s", nic->gid_index,
		    sel->ipv4 ? sel->ipv4_addr : sel->gid, sel->netdev[0] ? sel->netdev : "-");
		EXP(w, "a RoCE v2 GID of an IPv4 address%s",
		    sel->ipv4 ? "" : " (an IPv6 link-local GID reaches only its own subnet)");
	}
	if (w->verdict == KVL_DOC_PASS)
		return;
	if (best)
		FIX(w, "set [nic.%s] gid_index = %d (RoCE v2, %s), or gid_index = auto", nic->label,
		    best->index, best->ipv4_addr);
	else
		FIX(w, "give %s an IPv4 address (ip addr add ... dev %s), then gid_index = auto",
		    in->netdev[0] ? in->netdev : "the netdev",
		    in->netdev[0] ? in->netdev : "<netdev>");
}

/* InfiniBand: the subnet manager's LID and the INI's P_Key index. */
static void check_lid(struct doc *d, unsigned i)
{
	const struct kvl_nic_conf *nic = &d->cfg->nics[i];
	char path[PATH_MAX], lid[32] = "", pkey[32] = "";
	struct kvl_doc_row *w;
	long v = 0;
	bool ok;

	kvl_sysfs_path(path, sizeof(path), d->sys, "class/infiniband/%s/ports/%u/lid", nic->device,
		       nic->port);
	kvl_sysfs_read(path, lid, sizeof(lid));
	v = strtol(lid, NULL, 0);
	kvl_sysfs_path(path, sizeof(path), d->sys, "class/infiniband/%s/ports/%u/pkeys/%u",
		       nic->device, nic->port, nic->pkey_index);
	kvl_sysfs_read(path, pkey, sizeof(pkey));
	ok = v > 0 && v < 0xc000 && pkey[0] && strtol(pkey, NULL, 0) != 0;
	w = row(d, "lid_pkey", d->name[i], ok ? KVL_DOC_PASS : KVL_DOC_FAIL);
	OBS(w, "lid %s, pkey_index %u = %s", lid[0] ? lid : "unreadable", nic->pkey_index,
	    pkey[0] ? pkey : "absent");
	EXP(w, "a unicast LID from the subnet manager and a non-zero P_Key at pkey_index");
	if (!ok)
		FIX(w, "%s",
		    v <= 0 ? "no LID (0 or unreadable): no subnet manager has swept the port; run "
			     "opensm on the fabric"
			   : "set [nic.*] pkey_index to a valid entry (cat .../pkeys/*)");
}

/* The port MTU RoCE gets from its netdev, as the kernel derives it (iboe_get_mtu; rxe's
 * own header budget): the netdev MTU less the RoCE headers, rounded down to an IB MTU. */
static unsigned roce_active_mtu(const char *driver, unsigned netdev_mtu, unsigned *headers)
{
	unsigned h = strcmp(driver, "rdma_rxe") == 0 ? 80 : 96, avail;

	*headers = h;
	if (netdev_mtu <= h)
		return 0;
	avail = netdev_mtu - h;
	for (unsigned m = 4096; m >= 256; m /= 2)
		if (avail >= m)
			return m;
	return 0;
}

static void check_mtu(struct doc *d, unsigned i)
{
	const struct kvl_nic_conf *nic = &d->cfg->nics[i];
	const struct kvl_nic_info *in = &d->info[i];
	unsigned h, act, want = nic->mtu ? nic->mtu : 4096;
	struct kvl_doc_row *w;

	if (strcmp(in->link_layer, "Ethernet") != 0) {
		w = row(d, "mtu", d->name[i], KVL_DOC_SKIP);
		OBS(w, "InfiniBand: the port's MTU is the subnet manager's, not in sysfs");
		EXP(w, "ibv_devinfo -v shows active_mtu; kvlane uses min(it, INI mtu %u)", want);
		return;
	}
	act = roce_active_mtu(in->driver, in->netdev_mtu, &h);
	if (in->netdev_mtu == 0 || act == 0) {
		w = row(d, "mtu", d->name[i], KVL_DOC_WARN);
		OBS(w, "netdev %s MTU %s", in->netdev[0] ? in->netdev : "unknown",
		    in->netdev_mtu ? "too small for any RoCE MTU" : "unreadable");
		EXP(w, "a netdev MTU >= %u for mtu %u", want + h, want);
		FIX(w, "ip link set dev %s mtu 9000 (and on the switch ports)",
		    in->netdev[0] ? in->netdev : "<netdev>");
		return;
	}
	w = row(d, "mtu", d->name[i], act >= want ? KVL_DOC_PASS : KVL_DOC_WARN);
	OBS(w, "port active MTU %u (netdev %s MTU %u less %u B of RoCE headers), INI mtu %u", act,
	    in->netdev, in->netdev_mtu, h, want);
	EXP(w, "INI mtu <= the port's MTU; mtu %u needs a netdev MTU >= %u%s", want, want + h,
	    want == 4096 ? " (jumbo frames)" : "");
	if (act < want)
		FIX(w,
		    "kvlane runs at %u (the smaller); for %u: ip link set dev %s mtu 9000 here, on "
		    "the peer and on every switch port between, or set [nic.%s] mtu = %u to say so",
		    act, want, in->netdev, nic->label, act);
}

/* ---- memory: locked-memory limit, hugepages ---- */

/* "Max locked memory  65536  65536  bytes" from <proc>/self/limits; UINT64_MAX = unlimited. */
static int read_memlock(const char *proc, uint64_t *soft, uint64_t *hard)
{
	char path[PATH_MAX], buf[4096], *p;
	int n;

	if (kvl_sysfs_path(path, sizeof(path), proc, "self/limits") < 0)
		return -ENAMETOOLONG;
	n = kvl_sysfs_read(path, buf, sizeof(buf));
	if (n < 0)
		return n;
	p = strstr(buf, "Max locked memory");
	if (p == NULL)
		return -ENOENT;
	p += strlen("Max locked memory");
	for (int k = 0; k < 2; k++) {
		uint64_t *v = k == 0 ? soft : hard;

		while (*p == ' ')
			p++;
		if (strncmp(p, "unlimited", 9) == 0) {
			*v = UINT64_MAX;
			p += 9;
		} else {
			char *end;

			*v = strtoull(p, &end, 10);
			if (end == p)
				return -EINVAL;
			p = end;
		}
	}
	return 0;
}

/* CAP_IPC_LOCK (bit 14 of CapEff in <proc>/self/status) lifts RLIMIT_MEMLOCK for mlock and
 * for memory registration alike (ib_umem_get checks it): root usually has it. */
static bool has_ipc_lock(const char *proc)
{
	char path[PATH_MAX], buf[4096], *p;

	if (kvl_sysfs_path(path, sizeof(path), proc, "self/status") < 0 ||
	    kvl_sysfs_read(path, buf, sizeof(buf)) < 0 || (p = strstr(buf, "CapEff:")) == NULL)
		return false;
	return (strtoull(p + 7, NULL, 16) >> 14) & 1;
}

static void fmt_bytes(char *buf, size_t cap, uint64_t v)
{
	if (v == UINT64_MAX)
		snprintf(buf, cap, "unlimited");
	else if (v >= (1ull << 20) && v % (1ull << 20) == 0)
		snprintf(buf, cap, "%" PRIu64 " MiB", v >> 20);
	else if (v >= (1ull << 20))
		snprintf(buf, cap, "%.1f MiB", (double)v / (1 << 20));
	else if (v >= 1024)
		snprintf(buf, cap, "%" PRIu64 " KiB", v >> 10);
	else
		snprintf(buf, cap, "%" PRIu64 " B", v);
}

/*
 * What kvlaned pins: the pool (mlock'd on 4 KiB pages, and registered whole on every RDMA
 * NIC), else what each RDMA NIC registers (host segments and its staging), plus the QP and
 * CQ rings verbs pin (64 B WQEs and CQEs, both directions, per QP). Memory registration
 * counts against RLIMIT_MEMLOCK even on hugepages.
 */
static uint64_t memlock_need(const struct doc *d, char *why, size_t cap)
{
	const struct kvl_config *c = d->cfg;
	uint64_t pool = (uint64_t)c->memory.pool_size_mb << 20, segs = 0, stag = 0, rings = 0;
	unsigned rdma = 0;
	struct kvl_msg m;

	for (unsigned i = 0; i < c->n_nics; i++)
		if (nic_is_rdma(d, i)) {
			rdma++;
			rings += (uint64_t)c->nics[i].qp_count * c->nics[i].queue_depth * 64 * 3;
		}
	for (unsigned s = 0; s < c->n_segments; s++) {
		const struct kvl_segment_conf *g = &c->segments[s];
		uint64_t b;

		if (g->memory == KVL_SEG_MEM_HOST &&
		    kvl_seg_bytes(g->layers, g->planes, g->blocks, g->block_bytes, &b) == 0)
			segs += b;
	}
	stag = (uint64_t)c->sched.staging_mb << 20;
	kvl_msg_init(&m, why, cap);
	if (pool && rdma == 0) {
		struct kvl_pool_pages pg;
		char err[KVL_POOL_MSG_LEN];

		/* Hugepages are pinned by the kernel, not mlock'd: only 4 KiB pages count. */
		if (kvl_pool_pick_pages(d->sys, &c->memory, pool, &pg, err, sizeof(err)) == 0 &&
		    pg.hugepage) {
			kvl_msg_add(&m, "nothing: the pool is on hugepages and no RDMA NIC "
					"registers it");
			return 0;
		}
	}
	if (pool) {
		kvl_msg_add(&m, "[memory] pool %u MiB", c->memory.pool_size_mb);
		if (rdma)
			kvl_msg_add(&m, " + QP/CQ rings %" PRIu64 " KiB", rings >> 10);
		return pool + rings;
	}
	if (rdma == 0) {
		kvl_msg_add(&m, "nothing: no pool and no RDMA NIC (tcp pins no memory)");
		return 0;
	}
	kvl_msg_add(&m,
		    "segments %" PRIu64
		    " MiB + staging %u MiB x %u RDMA NIC%s + QP/CQ rings %" PRIu64 " KiB",
		    segs >> 20, c->sched.staging_mb, rdma, rdma == 1 ? "" : "s", rings >> 10);
	return segs + stag * rdma + rings;
}

static void check_memlock(struct doc *d)
{
	char why[256], s[32], h[32], n[32];
	uint64_t soft, hard, need;
	struct kvl_doc_row *w;
	int rc;

	need = memlock_need(d, why, sizeof(why));
	rc = read_memlock(d->proc, &soft, &hard);
	fmt_bytes(n, sizeof(n), need);
	if (rc < 0) {
		w = row(d, "memlock", "host", KVL_DOC_WARN);
		OBS(w, "cannot read %s/self/limits: %s", d->proc ? d->proc : "/proc",
		    strerror(-rc));
		EXP(w, "ulimit -l >= %s (%s)", n, why);
		FIX(w, "check ulimit -l by hand");
		return;
	}
	fmt_bytes(s, sizeof(s), soft);
	fmt_bytes(h, sizeof(h), hard);
	if (soft < need && has_ipc_lock(d->proc)) {
		w = row(d, "memlock", "host", KVL_DOC_PASS);
		OBS(w,
		    "ulimit -l: soft %s, hard %s, but the process has CAP_IPC_LOCK: the limit does "
		    "not apply (it does to a kvlaned run as another user)",
		    s, h);
		EXP(w, ">= %s: %s", n, why);
		return;
	}
	w = row(d, "memlock", "host", soft >= need ? KVL_DOC_PASS : KVL_DOC_FAIL);
	OBS(w, "ulimit -l: soft %s, hard %s", s, h);
	EXP(w, ">= %s: %s", n, why);
	if (soft >= need)
		return;
	if (hard >= need)
		FIX(w,
		    "ulimit -l unlimited (or >= %s) in the shell that starts kvlaned; under "
		    "systemd LimitMEMLOCK=infinity in the unit",
		    n);
	else
		FIX(w,
		    "the hard limit is below it too: raise it in /etc/security/limits.d/ "
		    "(\"<user> - memlock unlimited\", then log in again) or LimitMEMLOCK=infinity "
		    "in the systemd unit; containers: --ulimit memlock=-1");
}

static void check_hugepages(struct doc *d)
{
	const struct kvl_memory_conf *mc = &d->cfg->memory;
	struct kvl_hugepages hp[8];
	struct kvl_pool_pages pages;
	char err[KVL_POOL_MSG_LEN], have[160] = "";
	struct kvl_doc_row *w;
	struct kvl_msg m;
	unsigned nh;
	int rc;

	nh = kvl_pool_hugepages(d->sys, hp, 8);
	kvl_msg_init(&m, have, sizeof(have));
	for (unsigned k = 0; k < nh; k++)
		kvl_msg_add(&m, "%s%" PRIu64 " kB: %" PRIu64 " reserved, %" PRIu64 " free",
			    k ? "; " : "", hp[k].page_size >> 10, hp[k].nr, hp[k].free);
	if (nh == 0)
		kvl_msg_add(&m, "no hugepage sizes in sysfs");
	if (mc->pool_size_mb == 0) {
		w = row(d, "hugepages", "host", KVL_DOC_SKIP);
		OBS(w, "%s", have);
		EXP(w, "nothing: no [memory] pool (pool_size_mb = 0)");
		return;
	}
	rc = kvl_pool_pick_pages(d->sys, mc, (uint64_t)mc->pool_size_mb << 20, &pages, err,
				 sizeof(err));
	if (rc < 0) {
		/* pool.c's refusal names HugePages_Free and the echo: it is the fix as it stands.
		 */
		w = row(d, "hugepages", "host", KVL_DOC_FAIL);
		OBS(w, "%s", have);
		EXP(w, "the %u MiB pool on hugepages (hugepage = %s)", mc->pool_size_mb,
		    kvl_tristate_name(mc->hugepage));
		FIX(w, "%s", err);
		return;
	}
	w = row(d, "hugepages", "host", pages.note[0] ? KVL_DOC_WARN : KVL_DOC_PASS);
	OBS(w, "%s", have);
	if (pages.note[0]) {
		EXP(w, "%s", pages.note);
		FIX(w,
		    "reserve hugepages for the %u MiB pool: echo %u > "
		    "/sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages",
		    mc->pool_size_mb, mc->pool_size_mb / 2);
	} else {
		EXP(w, "the %u MiB pool on %" PRIu64 " kB pages (%s)", mc->pool_size_mb,
		    pages.page_size >> 10, pages.hugepage ? "hugepages" : "hugepage = false");
	}
}

/* ---- PCIe links ---- */

static void check_pcie(struct doc *d, const char *check, const char *subject, const char *addr,
		       uint32_t port_mbps)
{
	struct kvl_pci_link l;
	struct kvl_doc_row *w;
	double ceil_gbps, port_gbps = port_mbps / 1000.0;
	bool down, slow;

	if (kvl_pci_link_read(d->sys, addr, &l) < 0) {
		w = row(d, check, subject, KVL_DOC_SKIP);
		OBS(w, "%s: sysfs shows no PCIe link (current_link_width/speed)", addr);
		EXP(w, "a PCIe function with link attributes (a VM's virtual bus has none)");
		return;
	}
	ceil_gbps = kvl_pci_link_gbps(l.cur_width, l.cur_gts);
	down = (l.max_width && l.cur_width < l.max_width) || (l.max_gts && l.cur_gts < l.max_gts);
	slow = port_gbps > 0 && ceil_gbps < port_gbps;
	w = row(d, check, subject, down || slow ? KVL_DOC_WARN : KVL_DOC_PASS);
	OBS(w, "%s: x%u at %.1f GT/s (max x%u at %.1f GT/s): ceiling %.1f Gb/s%s%.0f%s", addr,
	    l.cur_width, l.cur_gts, l.max_width, l.max_gts, ceil_gbps,
	    port_gbps > 0 ? ", port " : "", port_gbps, port_gbps > 0 ? " Gb/s" : "");
	EXP(w, "trained at its maximum (x%u, %.1f GT/s)%s", l.max_width, l.max_gts,
	    port_gbps > 0 ? " with a ceiling above the port's rate" : "");
	if (down && l.cur_width < l.max_width)
		FIX(w,
		    "the link trained to x%u of x%u: the card sits in a narrower slot (or riser, "
		    "or bifurcated slot): move it to a full x%u slot; lspci -vv shows LnkSta",
		    l.cur_width, l.max_width, l.max_width);
	if (down && slow)
		put(w->fix + strlen(w->fix), sizeof(w->fix) - strlen(w->fix),
		    "; as trained its ceiling (%.1f Gb/s) is below the port's %.0f Gb/s", ceil_gbps,
		    port_gbps);
	else if (down)
		FIX(w,
		    "the link trained to %.1f of %.1f GT/s: check the BIOS PCIe speed setting, "
		    "the riser, and reseat the card; lspci -vv shows LnkSta",
		    l.cur_gts, l.max_gts);
	else if (slow)
		FIX(w,
		    "the slot's ceiling (%.1f Gb/s) is below the port (%.0f Gb/s): the port "
		    "cannot run at its rate here",
		    ceil_gbps, port_gbps);
}

static void check_pcie_nic(struct doc *d, unsigned i)
{
	struct kvl_pci_path p;
	struct kvl_doc_row *w;
	char why[KVL_ERR_LEN];

	if (kvl_nic_pci(d->sys, &d->cfg->nics[i], &d->info[i], &p, why, sizeof(why)) < 0) {
		w = row(d, "pcie_nic", d->name[i], KVL_DOC_SKIP);
		OBS(w, "%s", why);
		EXP(w, "a PCIe NIC (software RDMA and virtual netdevs have no link)");
		return;
	}
	check_pcie(d, "pcie_nic", d->name[i], p.addr, d->info[i].rate_mbps);
}

/* ---- topology: NIC <-> NUMA <-> lcores, GPU <-> NIC ---- */

static void check_numa_lcores(struct doc *d)
{
	struct kvl_lcore_desc lc[MAX_CPUS];
	struct kvl_pairing pairs[KVL_MAX_NICS];
	const char *names[KVL_MAX_NICS];
	int nodes[KVL_MAX_NICS];
	char err[1024];
	struct kvl_doc_row *w;
	unsigned n = 0;
	int rc;

	for (unsigned i = 0; i < d->cfg->n_nics; i++) {
		names[i] = d->name[i];
		nodes[i] = d->found[i] ? d->info[i].numa_node : -1;
	}
	if (!d->have_cpus) {
		for (unsigned i = 0; i < d->cfg->n_nics; i++) {
			char path[PATH_MAX], cpus[128] = "";

			if (!d->found[i])
				continue;
			kvl_sysfs_path(path, sizeof(path), d->sys,
				       "devices/system/node/node%d/cpulist",
				       nodes[i] < 0 ? 0 : nodes[i]);
			kvl_sysfs_read(path, cpus, sizeof(cpus));
			w = row(d, "numa_lcores", d->name[i], KVL_DOC_SKIP);
			OBS(w, "NIC on NUMA node %d%s%s%s; the EAL lcores are not known", nodes[i],
			    cpus[0] ? " (CPUs " : "", cpus, cpus[0] ? ")" : "");
			EXP(w,
			    "a worker lcore on node %d: give the EAL list (kvlane-doctor --lcores "
			    "0-3, or kvlaned --doctor reads -l)",
			    nodes[i]);
		}
		return;
	}
	/* EAL refuses a CPU the host does not have ("lcore 2 unavailable"): say so first. */
	{
		static uint64_t online[MAX_CPUS / 64];
		char path[PATH_MAX], list[512], missing[256] = "";
		struct kvl_msg m;

		kvl_msg_init(&m, missing, sizeof(missing));
		kvl_sysfs_path(path, sizeof(path), d->sys, "devices/system/cpu/online");
		if (kvl_sysfs_read(path, list, sizeof(list)) > 0 &&
		    kvl_parse_cpulist(list, online, MAX_CPUS) > 0)
			for (unsigned k = 0; k < d->n_cpus; k++)
				if (d->cpus[k] >= MAX_CPUS ||
				    !(online[d->cpus[k] / 64] >> (d->cpus[k] % 64) & 1))
					kvl_msg_add(&m, "%s%u", m.len ? "," : "", d->cpus[k]);
		if (missing[0]) {
			w = row(d, "numa_lcores", "host", KVL_DOC_FAIL);
			OBS(w, "CPU %s of the EAL list is not online here (online: %s)", missing,
			    list);
			EXP(w, "every EAL lcore an online CPU");
			FIX(w,
			    "give EAL CPUs from %s (-l), or map lcores onto them with --lcores "
			    "'0@0,1@1,...' when the host has fewer cores than lcores",
			    list);
			return;
		}
	}
	/* EAL's main lcore (the first) runs control; each NIC needs a worker of its own. */
	for (unsigned k = 1; k < d->n_cpus && n < MAX_CPUS; k++) {
		lc[n].lcore_id = d->cpus[k];
		lc[n].cpu = d->cpus[k];
		lc[n].socket = kvl_cpu_numa_node(d->sys, d->cpus[k]);
		n++;
	}
	rc = kvl_pair_nics(d->sys, nodes, names, d->cfg->n_nics, lc, n,
			   d->cfg->runtime.allow_remote_numa, pairs, err, sizeof(err));
	if (rc < 0) {
		w = row(d, "numa_lcores", "host", KVL_DOC_FAIL);
		OBS(w, "%s", err);
		EXP(w, "one worker lcore per NIC on the NIC's NUMA node (main lcore %u excluded)",
		    d->cpus[0]);
		FIX(w, "give EAL a worker core on each NIC's node (-l), or set [runtime] "
		       "allow_remote_numa = true to accept a remote one (slower)");
		return;
	}
	for (unsigned i = 0; i < d->cfg->n_nics; i++) {
		const struct kvl_lcore_desc *l = &lc[pairs[i].lcore_idx];

		w = row(d, "numa_lcores", d->name[i],
			pairs[i].remote ? KVL_DOC_WARN : KVL_DOC_PASS);
		OBS(w, "NIC on node %d, polled by lcore %u (CPU %u, node %d)", nodes[i],
		    l->lcore_id, l->cpu, l->socket);
		EXP(w, "its lcore on the NIC's node %d", nodes[i]);
		if (pairs[i].remote)
			FIX(w,
			    "every DMA and doorbell crosses the socket link: add a core of node %d "
			    "to -l",
			    nodes[i]);
	}
}

/* Returns how many GPUs sysfs shows (0 on none or an error). */
static int check_gpu_pairs(struct doc *d, struct kvl_gpu_pair *pairs)
{
	struct kvl_nic_info infos[KVL_MAX_NICS];
	struct kvl_nic_conf nics[KVL_MAX_NICS];
	struct kvl_pci_path gpus[KVL_MAX_GPUS];
	unsigned idx[KVL_MAX_NICS], n = 0;
	char err[1024];
	struct kvl_doc_row *w;
	int ng, rc;

	ng = kvl_gpu_scan(d->sys, gpus, KVL_MAX_GPUS);
	for (unsigned i = 0; i < d->cfg->n_nics; i++) {
		pairs[i].gpu = -1;
		if (!d->found[i])
			continue;
		nics[n] = d->cfg->nics[i];
		infos[n] = d->info[i];
		idx[n++] = i;
	}
	if (ng <= 0) {
		w = row(d, "gpu_nic", "host", d->cfg->gpu.enable ? KVL_DOC_FAIL : KVL_DOC_SKIP);
		OBS(w, "no NVIDIA GPU under %s/bus/pci/devices", d->sys);
		EXP(w, "%s", d->cfg->gpu.enable ? "a GPU: [gpu] enable = true" : "nothing: no GPU");
		if (d->cfg->gpu.enable)
			FIX(w, "load the NVIDIA driver (nvidia-smi lists the GPUs), or set [gpu] "
			       "enable = false");
		return 0;
	}
	if (n == 0) {
		char list[256];
		struct kvl_msg m;

		kvl_msg_init(&m, list, sizeof(list));
		for (int g = 0; g < ng; g++)
			kvl_msg_add(&m, "%s%s", g ? ", " : "", gpus[g].addr);
		w = row(d, "gpu_nic", "host", KVL_DOC_SKIP);
		OBS(w, "%d GPU%s (%s) and no NIC found to pair with", ng, ng == 1 ? "" : "s", list);
		EXP(w, "a GPU <-> NIC distance once a NIC is there");
		for (int g = 0; g < ng; g++) {
			char subj[64];

			put(subj, sizeof(subj), "gpu %d (%s)", g, gpus[g].addr);
			check_pcie(d, "pcie_gpu", subj, gpus[g].addr, 0);
		}
		return ng;
	}
	rc = kvl_pair_gpus(d->sys, nics, infos, NULL, n, pairs + KVL_MAX_NICS, err, sizeof(err));
	if (rc < 0) {
		w = row(d, "gpu_nic", "host", KVL_DOC_FAIL);
		OBS(w, "%s", err);
		EXP(w, "each [nic.*] gpu names a GPU of this host");
		FIX(w, "set [nic.*] gpu = auto, or to one of the GPUs listed");
		return ng;
	}
	for (unsigned k = 0; k < n; k++) {
		const struct kvl_gpu_pair *p = &pairs[KVL_MAX_NICS + k];
		unsigned i = idx[k];

		pairs[i] = *p;
		if (p->gpu < 0 || p->dist == KVL_PCI_NONE) {
			w = row(d, "gpu_nic", d->name[i], KVL_DOC_SKIP);
			OBS(w, "no GPU path%s%s", p->note[0] ? ": " : "", p->note);
			EXP(w, "a GPU for a PCIe NIC (software RDMA has no DMA engine of its own)");
			continue;
		}
		w = row(d, "gpu_nic", d->name[i],
			p->dist == KVL_PCI_SYS || p->warn ? KVL_DOC_WARN : KVL_DOC_PASS);
		OBS(w, "GPU %d (%s) is %s from the NIC (%s)%s%s", p->gpu, p->addr,
		    kvl_pci_dist_name(p->dist), p->nic_addr, p->note[0] ? "; " : "", p->note);
		EXP(w, "PIX/PXB (one PCIe switch), PHB or NODE; not SYS (across sockets), as "
		       "nvidia-smi topo -m prints it");
		if (w->verdict == KVL_DOC_WARN)
			FIX(w,
			    "GPUDirect across the socket link runs at a fraction of the port: pair "
			    "the NIC with a GPU on its own socket ([nic.%s] gpu = auto picks the "
			    "nearest, %s here), or move the card",
			    d->cfg->nics[i].label, kvl_pci_dist_name(p->best));
	}
	return ng;
}

static void check_pcie_gpus(struct doc *d, const struct kvl_gpu_pair *pairs)
{
	char subj[160];

	for (unsigned i = 0; i < d->cfg->n_nics; i++) {
		bool seen = false;

		if (pairs[i].gpu < 0 || pairs[i].dist == KVL_PCI_NONE)
			continue;
		for (unsigned j = 0; j < i; j++)
			seen |= pairs[j].gpu == pairs[i].gpu;
		if (seen)
			continue;
		snprintf(subj, sizeof(subj), "gpu %d (%s)", pairs[i].gpu, pairs[i].addr);
		check_pcie(d, "pcie_gpu", subj, pairs[i].addr, d->info[i].rate_mbps);
	}
}

/* ---- GPUDirect ---- */

static void check_gpudirect(struct doc *d, bool any_gpu)
{
	char path[PATH_MAX], ver[256] = "", rel[64] = "";
	struct kvl_doc_row *w;
	bool peermem = kvl_module_loaded(d->sys, "nvidia_peermem") ||
		       kvl_module_loaded(d->sys, "nv_peer_mem");
	bool open_km;
	int major = 0, minor = 0;

	if (!d->cfg->gpu.enable && !any_gpu) {
		w = row(d, "gpudirect", "host", KVL_DOC_SKIP);
		OBS(w, "no GPU and [gpu] enable = false");
		EXP(w, "nothing");
		return;
	}
	kvl_sysfs_path(path, sizeof(path), d->proc, "driver/nvidia/version");
	kvl_sysfs_read(path, ver, sizeof(ver));
	open_km = strstr(ver, "Open Kernel Module") != NULL;
	kvl_sysfs_path(path, sizeof(path), d->proc, "sys/kernel/osrelease");
	kvl_sysfs_read(path, rel, sizeof(rel));
	sscanf(rel, "%d.%d", &major, &minor);
	/* dma-buf export of VRAM needs the open kernel module and ib_umem_dmabuf (5.12). */
	if (peermem || (open_km && (major > 5 || (major == 5 && minor >= 12)))) {
		w = row(d, "gpudirect", "host", KVL_DOC_PASS);
		OBS(w, "%s%s%s (kernel %s)", peermem ? "nvidia_peermem loaded" : "",
		    peermem && open_km ? ", " : "",
		    open_km ? "dma-buf (NVIDIA open kernel module)" : "", rel[0] ? rel : "unknown");
		EXP(w, "nvidia_peermem loaded, or dma-buf (kernel >= 5.12 and the open kernel "
		       "module)");
		return;
	}
	w = row(d, "gpudirect", "host", KVL_DOC_WARN);
	OBS(w, "nvidia_peermem not loaded; dma-buf: %s, kernel %s",
	    open_km  ? "open kernel module"
	    : ver[0] ? "proprietary kernel module"
		     : "no NVIDIA driver version",
	    rel[0] ? rel : "unknown");
	EXP(w, "nvidia_peermem loaded, or dma-buf (kernel >= 5.12 and the open kernel module)");
	FIX(w, "modprobe nvidia_peermem (ships with the NVIDIA driver), or install the open kernel "
	       "module for dma-buf; without either VRAM cannot be registered: segments and staging "
	       "in VRAM are refused");
}

/* The GPU kvlaned opens: present, its GPUDirect RDMA attribute, free VRAM against the reserve. */
static void check_cuda(struct doc *d, const struct kvl_doc_cuda *c)
{
	uint64_t budget;
	struct kvl_doc_row *w;

	if (c == NULL || !c->probed) {
		if (d->cfg->gpu.enable) {
			w = row(d, "cuda_gpu", "host", KVL_DOC_SKIP);
			OBS(w, "not probed: this build has no CUDA, or the caller did not ask");
			EXP(w, "CUDA device %u usable (kvlaned's start-up checks it)",
			    d->cfg->gpu.device_id);
		}
		return;
	}
	if (c->rc < 0) {
		w = row(d, "cuda_gpu", "host", c->required ? KVL_DOC_FAIL : KVL_DOC_WARN);
		OBS(w, "%s", c->err);
		EXP(w, "CUDA device %d usable", c->device_id);
		FIX(w, "%s",
		    c->required ? "the cause above says which key or driver; [gpu] enable = "
				  "false runs without a GPU"
				: "load the NVIDIA driver (nvidia-smi must list the GPU)");
		return;
	}
	budget = c->free > c->reserve ? c->free - c->reserve : 0;
	w = row(d, "cuda_gpu", "host", budget && c->gpudirect_rdma ? KVL_DOC_PASS : KVL_DOC_WARN);
	OBS(w,
	    "GPU %d of %d: %s (%s), %" PRIu64 " MiB total, %" PRIu64 " MiB free, reserve %" PRIu64
	    " MiB: budget %" PRIu64 " MiB; GPUDirect RDMA attribute %s",
	    c->device_id, c->device_count, c->name, c->pci, c->total >> 20, c->free >> 20,
	    c->reserve >> 20, budget >> 20, c->gpudirect_rdma ? "1" : "0");
	EXP(w, "free VRAM above [gpu] vram_reserve_mb, and the GPUDirect RDMA attribute set");
	if (!budget)
		FIX(w, "free VRAM is below the reserve: the staging budget is 0 (no VRAM staging); "
		       "free memory on the GPU or lower [gpu] vram_reserve_mb");
	else if (!c->gpudirect_rdma)
		FIX(w, "the device reports no GPUDirect RDMA: VRAM cannot be an RDMA target, "
		       "staging goes through host memory ([gpu] gpudirect = auto)");
}

/* ---- CPU: isolation, governor, NIC interrupts ---- */

static void cpus_str(char *buf, size_t cap, const unsigned *c, unsigned n)
{
	struct kvl_msg m;

	kvl_msg_init(&m, buf, cap);
	for (unsigned k = 0; k < n; k++)
		kvl_msg_add(&m, "%s%u", k ? "," : "", c[k]);
	if (n == 0)
		kvl_msg_add(&m, "none");
}

static void check_cpu(struct doc *d)
{
	uint64_t iso[MAX_CPUS / 64], nohz[MAX_CPUS / 64];
	unsigned bad[MAX_CPUS] = { 0 }, nb = 0, slow[MAX_CPUS] = { 0 }, ns = 0;
	char path[PATH_MAX], list[256], s1[256], s2[256], gov[32], seen[32] = "";
	bool poll = d->cfg->runtime.idle_policy != KVL_IDLE_YIELD, any_freq = false;
	struct kvl_doc_row *w;

	if (!d->have_cpus || d->n_cpus < 2) {
		w = row(d, "cpu", "host", KVL_DOC_SKIP);
		OBS(w, "the EAL lcores are not known");
		EXP(w, "the polling cores isolated and at full clock: give --lcores");
		return;
	}
	memset(iso, 0, sizeof(iso));
	memset(nohz, 0, sizeof(nohz));
	kvl_sysfs_path(path, sizeof(path), d->sys, "devices/system/cpu/isolated");
	if (kvl_sysfs_read(path, list, sizeof(list)) >= 0)
		kvl_parse_cpulist(list, iso, MAX_CPUS);
	kvl_sysfs_path(path, sizeof(path), d->sys, "devices/system/cpu/nohz_full");
	if (kvl_sysfs_read(path, list, sizeof(list)) >= 0 && strcmp(list, "(null)") != 0)
		kvl_parse_cpulist(list, nohz, MAX_CPUS);
	for (unsigned k = 1; k < d->n_cpus; k++) {
		unsigned c = d->cpus[k];

		if (c >= MAX_CPUS)
			continue;
		if (!(iso[c / 64] >> (c % 64) & 1) || !(nohz[c / 64] >> (c % 64) & 1))
			bad[nb++] = c;
		kvl_sysfs_path(path, sizeof(path), d->sys,
			       "devices/system/cpu/cpu%u/cpufreq/scaling_governor", c);
		if (kvl_sysfs_read(path, gov, sizeof(gov)) > 0) {
			any_freq = true;
			if (strcmp(gov, "performance") != 0) {
				slow[ns++] = c;
				kvl_copy_str(seen, sizeof(seen), gov);
			}
		}
	}
	cpus_str(s1, sizeof(s1), bad, nb);
	w = row(d, "cpu_isolation", "host", nb && poll ? KVL_DOC_WARN : KVL_DOC_PASS);
	OBS(w, "polling cores not in both isolcpus and nohz_full: %s", s1);
	EXP(w, "the NIC lcores' cores isolated (isolcpus= and nohz_full=)%s",
	    poll ? "" : "; with idle_policy = yield sharing them is intended");
	if (nb && poll) {
		cpus_str(s2, sizeof(s2), d->cpus + 1, d->n_cpus - 1);
		FIX(w,
		    "add isolcpus=%s nohz_full=%s to the kernel command line (or a cpuset), so "
		    "the scheduler and the timer tick leave the polling cores alone",
		    s2, s2);
	}
	if (!any_freq) {
		w = row(d, "cpu_governor", "host", KVL_DOC_SKIP);
		OBS(w, "no cpufreq under devices/system/cpu/cpu*/cpufreq (a VM, or no driver)");
		EXP(w, "governor performance on the polling cores");
		return;
	}
	cpus_str(s1, sizeof(s1), slow, ns);
	w = row(d, "cpu_governor", "host", ns ? KVL_DOC_WARN : KVL_DOC_PASS);
	if (ns)
		OBS(w, "governor %s on polling cores %s", seen, s1);
	else
		OBS(w, "governor performance on every polling core");
	EXP(w, "performance: a polling loop at a low clock adds latency to every completion");
	if (ns)
		FIX(w, "cpupower frequency-set -g performance (or echo performance > "
		       "/sys/devices/system/cpu/cpu*/cpufreq/scaling_governor)");
}

/* The NIC's MSI-X vectors (bus/pci/devices/<addr>/msi_irqs/<irq>) against the polling cores. */
static void check_irqs(struct doc *d, unsigned i)
{
	struct kvl_pci_path p;
	struct dirent **names;
	char path[PATH_MAX], why[KVL_ERR_LEN], aff[256], hit[256] = "", s[128];
	uint64_t bits[MAX_CPUS / 64];
	struct kvl_doc_row *w;
	struct kvl_msg m;
	int n, nirq = 0, nhit = 0;

	if (!d->have_cpus ||
	    kvl_nic_pci(d->sys, &d->cfg->nics[i], &d->info[i], &p, why, sizeof(why)) < 0)
		return;
	kvl_sysfs_path(path, sizeof(path), d->sys, "bus/pci/devices/%s/msi_irqs", p.addr);
	n = kvl_sysfs_list(path, &names);
	if (n <= 0)
		return;
	kvl_msg_init(&m, hit, sizeof(hit));
	for (int k = 0; k < n; k++) {
		bool on = false;

		kvl_sysfs_path(path, sizeof(path), d->proc, "irq/%s/smp_affinity_list",
			       names[k]->d_name);
		if (kvl_sysfs_read(path, aff, sizeof(aff)) <= 0 ||
		    kvl_parse_cpulist(aff, bits, MAX_CPUS) < 0)
			continue;
		nirq++;
		for (unsigned c = 1; c < d->n_cpus && !on; c++)
			on = d->cpus[c] < MAX_CPUS &&
			     (bits[d->cpus[c] / 64] >> (d->cpus[c] % 64) & 1);
		if (on) {
			kvl_msg_add(&m, "%s%s->%s", nhit ? ", " : "", names[k]->d_name, aff);
			nhit++;
		}
	}
	kvl_sysfs_free_list(names, n);
	if (nirq == 0)
		return;
	cpus_str(s, sizeof(s), d->cpus + 1, d->n_cpus - 1);
	w = row(d, "nic_irqs", d->name[i], nhit ? KVL_DOC_WARN : KVL_DOC_PASS);
	OBS(w, "%d of %d IRQs land on polling cores %s%s%s", nhit, nirq, s, nhit ? ": " : "", hit);
	EXP(w, "the NIC's interrupts on housekeeping cores, not on the polling ones");
	if (nhit)
		FIX(w,
		    "steer them away: echo <housekeeping cpus> > /proc/irq/<n>/smp_affinity_list "
		    "(and keep irqbalance off those IRQs: IRQBALANCE_BANNED_CPULIST=%s)",
		    s);
}

/* ---- firewall: UDP 4791 (RoCE v2) and the control port ---- */

/* @port in an iptables "--dport N", "--dport A:B" or "--dports A,B:C" value. */
static bool port_in_list(const char *v, unsigned port)
{
	while (*v && *v != ' ') {
		char *end;
		unsigned long a = strtoul(v, &end, 10), b = a;

		if (end == v)
			return false;
		if (*end == ':' || *end == '-')
			b = strtoul(end + 1, &end, 10);
		if (port >= a && port <= b)
			return true;
		if (*end != ',')
			return false;
		v = end + 1;
	}
	return false;
}

/* The next line of @*text into @buf (terminated, at most @cap - 1 bytes: longer lines come
 * back empty); false at the end. */
static bool next_line(const char **text, char *buf, size_t cap)
{
	const char *line = *text, *nl;
	size_t n;

	if (line == NULL || *line == '\0')
		return false;
	nl = strchr(line, '\n');
	n = nl ? (size_t)(nl - line) : strlen(line);
	*text = nl ? nl + 1 : NULL;
	if (n >= cap)
		n = 0;
	memcpy(buf, line, n);
	buf[n] = '\0';
	return true;
}

/*
 * What the INPUT chain of `iptables-save` does to a new @proto packet to @port: the first
 * rule that matches only on protocol and port decides (rules with other matches, such as a
 * source address or an interface, are passed over: they may not apply), else the chain's
 * policy. Returns "DROP", "REJECT", "ACCEPT" (or another target), with the deciding line in
 * @rule; NULL when the text has no INPUT chain.
 */
static const char *ipt_verdict(const char *text, const char *proto, unsigned port, char *rule,
			       size_t cap)
{
	static char target[32], policy[32];
	char policy_line[128] = "";
	const char *line = text;
	char tok[512], whole[512];
	bool have = false;

	while (next_line(&line, tok, sizeof(tok))) {
		bool other = false, pmatch = true, dmatch = true, jump = false;
		char *p, *save = NULL;

		kvl_copy_str(whole, sizeof(whole), tok);
		if (strncmp(tok, ":INPUT ", 7) == 0) {
			have = true;
			kvl_copy_str(policy_line, sizeof(policy_line), tok);
			sscanf(tok + 7, "%31s", policy);
			continue;
		}
		if (strncmp(tok, "-A INPUT ", 9) != 0)
			continue;
		for (p = strtok_r(tok + 9, " ", &save); p; p = strtok_r(NULL, " ", &save)) {
			char *v = strtok_r(NULL, " ", &save);

			if (v == NULL)
				break;
			if (strcmp(p, "-j") == 0) {
				jump = true;
				kvl_copy_str(target, sizeof(target), v);
				break;
			}
			if (strcmp(p, "-p") == 0)
				pmatch = strcmp(v, proto) == 0;
			else if (strcmp(p, "--dport") == 0 || strcmp(p, "--dports") == 0)
				dmatch = port_in_list(v, port);
			else if (strcmp(p, "-m") != 0)
				other = true;
		}
		if (!jump || other || !pmatch || !dmatch)
			continue;
		put(rule, cap, "%s", whole);
		return target;
	}
	if (!have)
		return NULL;
	put(rule, cap, "%s, the chain's policy", policy_line);
	return policy;
}

/*
 * The same over `nft list ruleset`: in a chain hooked on input, the first rule whose only
 * match is "<proto> dport <port>" (a number, a range or a set holding it), or that has no
 * match at all, decides; else the chain's policy. Rules matching anything else (addresses,
 * interfaces, conntrack state) are passed over.
 */
static bool nft_port_match(const char *d, unsigned port)
{
	bool set = *d == '{';

	if (set)
		d++;
	for (;;) {
		char *end;
		unsigned long a, b;

		while (*d == ' ' || *d == ',')
			d++;
		a = strtoul(d, &end, 10);
		if (end == d)
			return false;
		b = a;
		if (*end == '-')
			b = strtoul(end + 1, &end, 10);
		if (port >= a && port <= b)
			return true;
		if (!set)
			return false;
		d = end;
	}
}

static const char *nft_verdict(const char *text, const char *proto, unsigned port, char *rule,
			       size_t cap)
{
	static char verdict[16];
	const char *line = text;
	bool in_input = false, found = false;
	char buf[512];

	while (next_line(&line, buf, sizeof(buf))) {
		char want[16], *t, *v;

		for (t = buf; *t == ' ' || *t == '\t'; t++)
			;
		if (strncmp(t, "chain ", 6) == 0) {
			in_input = false;
			continue;
		}
		if (strncmp(t, "type filter hook input", 22) == 0) {
			in_input = found = true;
			v = strstr(t, "policy ");
			kvl_copy_str(verdict, sizeof(verdict), v ? v + 7 : "accept");
			verdict[strcspn(verdict, "; ")] = '\0';
			put(rule, cap, "%s, the input chain's policy", t);
			continue;
		}
		if (!in_input)
			continue;
		v = strrchr(t, ' ');
		v = v ? v + 1 : t;
		if (strcmp(v, "accept") != 0 && strcmp(v, "drop") != 0 && strcmp(v, "reject") != 0)
			continue;
		snprintf(want, sizeof(want), "%s dport ", proto);
		if (v != t && (strncmp(t, want, strlen(want)) != 0 ||
			       !nft_port_match(t + strlen(want), port)))
			continue; /* another match (ip saddr, iifname, ct state), or another port */
		kvl_copy_str(rule, cap, t);
		kvl_copy_str(verdict, sizeof(verdict), v);
		return verdict;
	}
	return found ? verdict : NULL;
}

static bool dropping(const char *v)
{
	return v && (strcasecmp(v, "DROP") == 0 || strcasecmp(v, "REJECT") == 0);
}

static void check_firewall(struct doc *d, const struct kvl_doc_firewall *f)
{
	static const char *const proto[2] = { "udp", "tcp" };
	static const char *const what[2] = { "RoCE v2", "the control port" };
	const char *colon = strrchr(d->cfg->control.listen, ':');
	bool rdma = false;

	if (f == NULL || !f->read)
		return;
	for (unsigned i = 0; i < d->cfg->n_nics; i++)
		rdma |= nic_is_rdma(d, i);
	if (!f->iptables[0] && !f->nft[0]) {
		struct kvl_doc_row *w = row(d, "firewall", "host", KVL_DOC_SKIP);

		OBS(w, "%s", f->why[0] ? f->why : "no rules could be read");
		EXP(w, "UDP 4791 and the control port not dropped on input");
		return;
	}
	for (unsigned k = 0; k < 2; k++) {
		char r1[256] = "", r2[256] = "";
		const char *v1, *v2;
		struct kvl_doc_row *w;
		unsigned port = 4791;

		if (k == 0 && !rdma)
			continue;
		if (k == 1) {
			/* no control path, or an ephemeral port: nothing to look up */
			if (d->cfg->control.secret_file[0] == '\0' || colon == NULL ||
			    (port = (unsigned)strtoul(colon + 1, NULL, 10)) == 0)
				continue;
		}
		v1 = f->iptables[0] ? ipt_verdict(f->iptables, proto[k], port, r1, sizeof(r1))
				    : NULL;
		v2 = f->nft[0] ? nft_verdict(f->nft, proto[k], port, r2, sizeof(r2)) : NULL;
		w = row(d, "firewall", "host",
			dropping(v1) || dropping(v2) ? KVL_DOC_WARN : KVL_DOC_PASS);
		OBS(w, "%s %u (%s): iptables %s%s%s%s; nft %s%s%s%s", proto[k], port, what[k],
		    v1 ? v1 : "no INPUT chain", v1 ? " (" : "", v1 ? r1 : "", v1 ? ")" : "",
		    v2 ? v2 : "no input hook", v2 ? " (" : "", v2 ? r2 : "", v2 ? ")" : "");
		EXP(w, "%s %u accepted on input", proto[k], port);
		if (w->verdict == KVL_DOC_WARN && k == 0)
			FIX(w,
			    "accept it: iptables -I INPUT -p udp --dport 4791 -j ACCEPT (nft: udp "
			    "dport 4791 accept); hardware RoCE bypasses the host's filter, "
			    "soft-RoCE (rxe) and the switches' ACLs do not");
		else if (w->verdict == KVL_DOC_WARN)
			FIX(w,
			    "accept it: iptables -I INPUT -p tcp --dport %u -j ACCEPT (nft: tcp "
			    "dport %u accept), or peers cannot connect",
			    port, port);
	}
}

static void read_cmd(const char *cmd, char *buf, size_t cap)
{
	FILE *p = popen(cmd, "r");
	size_t n = 0, got;

	buf[0] = '\0';
	if (p == NULL)
		return;
	while (n + 1 < cap && (got = fread(buf + n, 1, cap - 1 - n, p)) > 0)
		n += got;
	buf[n] = '\0';
	if (pclose(p) != 0)
		buf[0] = '\0'; /* absent, or not allowed: nothing read */
}

void kvl_doctor_read_firewall(struct kvl_doc_firewall *f)
{
	memset(f, 0, sizeof(*f));
	f->read = true;
	read_cmd("iptables-save 2>/dev/null", f->iptables, sizeof(f->iptables));
	read_cmd("nft list ruleset 2>/dev/null", f->nft, sizeof(f->nft));
	if (!f->iptables[0] && !f->nft[0])
		snprintf(f->why, sizeof(f->why),
			 "neither iptables-save nor nft list ruleset gave rules (not installed, no "
			 "rules, or not root)");
}

/* ---- the run ---- */

static bool class_has(const char *sys, const char *cls, const char *name)
{
	char path[PATH_MAX];
	struct stat st;

	return kvl_sysfs_path(path, sizeof(path), sys, "%s/%s", cls, name) == 0 &&
	       stat(path, &st) == 0;
}

static int parse_cpus(struct doc *d, const char *list)
{
	static uint64_t bits[MAX_CPUS / 64];
	unsigned first;
	char *end;
	int n;

	n = kvl_parse_cpulist(list, bits, MAX_CPUS);
	if (n <= 0)
		return -EINVAL;
	/* EAL's main lcore is the first one listed; kvl_parse_cpulist keeps no order. */
	first = (unsigned)strtoul(list, &end, 10);
	d->cpus[d->n_cpus++] = first;
	for (unsigned c = 0; c < MAX_CPUS; c++)
		if ((bits[c / 64] >> (c % 64) & 1) && c != first)
			d->cpus[d->n_cpus++] = c;
	d->have_cpus = true;
	return 0;
}

void kvl_doctor_run(const struct kvl_config *cfg, const struct kvl_doc_opts *o,
		    struct kvl_doc_report *r)
{
	static struct kvl_gpu_pair pairs[2 * KVL_MAX_NICS];
	static struct doc d;
	bool any_gpu = false;

	memset(&d, 0, sizeof(d));
	memset(r, 0, sizeof(*r));
	d.cfg = cfg;
	d.sys = o->sysfs_root ? o->sysfs_root : "/sys"; /* pool.c needs a string */
	d.proc = o->proc_root ? o->proc_root : "/proc";
	d.r = r;
	d.have_ini = o->have_ini;
	if (o->lcores && parse_cpus(&d, o->lcores) < 0) {
		struct kvl_doc_row *w = row(&d, "lcores", "host", KVL_DOC_FAIL);

		OBS(w, "\"%s\" is not a CPU list", o->lcores);
		EXP(w, "a list such as 0-3 or 0,2,4");
		FIX(w, "give the list EAL gets with -l");
	}
	/* Without an INI the host's own RDMA devices are what is checked; with one, a NIC needs
	 * RDMA unless it is tcp, or auto on a name that is a netdev and no RDMA device. */
	d.rdma_needed = !o->have_ini;
	for (unsigned i = 0; i < cfg->n_nics; i++) {
		const struct kvl_nic_conf *nic = &cfg->nics[i];

		snprintf(d.name[i], sizeof(d.name[i]), "nic.%s (%s)", nic->label, nic->device);
		if (nic->transport == KVL_TRANSPORT_TCP)
			continue;
		if (nic->transport == KVL_TRANSPORT_AUTO &&
		    class_has(d.sys, "class/net", nic->device) &&
		    !class_has(d.sys, "class/infiniband", nic->device))
			continue;
		d.rdma_needed = true;
	}

	check_devices(&d);
	check_modules(&d);
	for (unsigned i = 0; i < cfg->n_nics; i++) {
		check_nic_found(&d, i);
		if (!d.found[i])
			continue;
		check_port(&d, i);
		if (d.info[i].kind != KVL_NIC_RDMA)
			continue;
		check_link_layer(&d, i);
		if (strcmp(d.info[i].link_layer, "InfiniBand") == 0)
			check_lid(&d, i);
		else
			check_gid(&d, i);
		check_mtu(&d, i);
	}
	check_memlock(&d);
	check_hugepages(&d);
	for (unsigned i = 0; i < cfg->n_nics; i++)
		if (d.found[i])
			check_pcie_nic(&d, i);
	memset(pairs, 0, sizeof(pairs));
	any_gpu = check_gpu_pairs(&d, pairs) > 0;
	check_pcie_gpus(&d, pairs);
	check_numa_lcores(&d);
	check_gpudirect(&d, any_gpu);
	check_cuda(&d, o->cuda);
	check_firewall(&d, o->firewall);
	check_cpu(&d);
	for (unsigned i = 0; i < cfg->n_nics; i++)
		if (d.found[i])
			check_irqs(&d, i);
}

unsigned kvl_doctor_host_config(const char *sysfs_root, struct kvl_config *cfg)
{
	struct dirent **names;
	char path[PATH_MAX];
	int n;

	kvl_config_defaults(cfg);
	kvl_sysfs_path(path, sizeof(path), sysfs_root, "class/infiniband");
	n = kvl_sysfs_list(path, &names);
	if (n <= 0)
		return 0;
	for (int i = 0; i < n && cfg->n_nics < KVL_MAX_NICS; i++) {
		struct kvl_nic_conf *nic = &cfg->nics[cfg->n_nics++];

		/* The defaults of a [nic.*] section, as the INI would give them. */
		memset(nic, 0, sizeof(*nic));
		kvl_copy_str(nic->label, sizeof(nic->label), names[i]->d_name);
		kvl_copy_str(nic->device, sizeof(nic->device), names[i]->d_name);
		nic->port = 1;
		nic->transport = KVL_TRANSPORT_AUTO;
		nic->gid_index = KVL_AUTO;
		nic->mtu = 4096;
		nic->qp_count = 1;
		nic->queue_depth = 256;
		nic->numa_node = KVL_AUTO;
		kvl_copy_str(nic->gpu, sizeof(nic->gpu), "auto");
	}
	kvl_sysfs_free_list(names, n);
	return cfg->n_nics;
}

int kvl_doctor_exit_code(const struct kvl_doc_report *r)
{
	return r->count[KVL_DOC_FAIL] ? 2 : r->count[KVL_DOC_WARN] ? 1 : 0;
}

void kvl_doctor_print(FILE *fp, const struct kvl_doc_report *r, bool quiet)
{
	for (unsigned k = 0; k < r->n; k++) {
		const struct kvl_doc_row *w = &r->rows[k];
		bool bad = w->verdict == KVL_DOC_WARN || w->verdict == KVL_DOC_FAIL;

		if (quiet && !bad)
			continue;
		fprintf(fp, "%-4s  %-13s %s\n", kvl_doc_verdict_name(w->verdict), w->check,
			w->subject);
		fprintf(fp, "      observed: %s\n", w->observed);
		if (bad || w->verdict == KVL_DOC_SKIP)
			fprintf(fp, "      expected: %s\n", w->expected);
		if (w->fix[0])
			fprintf(fp, "      fix:      %s\n", w->fix);
	}
	fprintf(fp, "kvlane-doctor: %u pass, %u warn, %u fail, %u skipped\n",
		r->count[KVL_DOC_PASS], r->count[KVL_DOC_WARN], r->count[KVL_DOC_FAIL],
		r->count[KVL_DOC_SKIP]);
}

static void json_str(FILE *fp, const char *s)
{
	fputc('"', fp);
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;

		if (c == '"' || c == '\\')
			fprintf(fp, "\\%c", c);
		else if (c < 0x20)
			fprintf(fp, "\\u%04x", c);
		else
			fputc(c, fp);
	}
	fputc('"', fp);
}

void kvl_doctor_print_json(FILE *fp, const struct kvl_doc_report *r)
{
	fprintf(fp, "{\"checks\": [");
	for (unsigned k = 0; k < r->n; k++) {
		const struct kvl_doc_row *w = &r->rows[k];

		fprintf(fp, "%s\n  {\"check\": ", k ? "," : "");
		json_str(fp, w->check);
		fprintf(fp, ", \"subject\": ");
		json_str(fp, w->subject);
		fprintf(fp,
			", \"verdict\": \"%s\", \"observed\": ", kvl_doc_verdict_name(w->verdict));
		json_str(fp, w->observed);
		fprintf(fp, ", \"expected\": ");
		json_str(fp, w->expected);
		fprintf(fp, ", \"fix\": ");
		json_str(fp, w->fix);
		fputc('}', fp);
	}
	fprintf(fp,
		"\n],\n \"summary\": {\"pass\": %u, \"warn\": %u, \"fail\": %u, \"skip\": %u},\n "
		"\"exit\": %d}\n",
		r->count[KVL_DOC_PASS], r->count[KVL_DOC_WARN], r->count[KVL_DOC_FAIL],
		r->count[KVL_DOC_SKIP], kvl_doctor_exit_code(r));
}

int kvl_doctor_eal_lcores(int argc, char **argv, char *out, size_t cap)
{
	const char *v = NULL;

	for (int i = 1; i < argc && strcmp(argv[i], "--") != 0; i++) {
		const char *a = argv[i];

		if ((strcmp(a, "-l") == 0 || strcmp(a, "--lcores") == 0) && i + 1 < argc)
			v = argv[++i];
		else if (strncmp(a, "-l", 2) == 0 && a[2] != '\0' && a[2] != '-')
			v = a + 2;
		else if (strncmp(a, "--lcores=", 9) == 0)
			v = a + 9;
		else if (strcmp(a, "-c") == 0 || strncmp(a, "--coremask", 10) == 0)
			return -ENOTSUP;
	}
	if (v == NULL)
		return -ENOENT;
	if (strpbrk(v, "@()") != NULL)
		return -ENOTSUP;
	kvl_copy_str(out, cap, v);
	return 0;
}

/* ---- two ends: each side's link facts (the DOCTOR message) and their comparison ---- */

unsigned kvl_doctor_links(const char *sysfs_root, const struct kvl_config *cfg,
			  struct kvl_ctrl_link *out, unsigned max)
{
	static struct kvl_gid_entry g[KVL_MAX_GIDS];
	const char *sys = sysfs_root ? sysfs_root : "/sys";
	unsigned n = 0;

	for (unsigned i = 0; i < cfg->n_nics && n < max; i++) {
		const struct kvl_nic_conf *nic = &cfg->nics[i];
		struct kvl_ctrl_link *l = &out[n++];
		struct kvl_nic_info in;
		char err[KVL_ERR_LEN], path[PATH_MAX];
		unsigned h, act;
		long speed;

		memset(l, 0, sizeof(*l));
		kvl_copy_str(l->nic, sizeof(l->nic), nic->label);
		kvl_copy_str(l->device, sizeof(l->device), nic->device);
		l->transport = (uint8_t)nic->transport;
		l->traffic_class = (uint8_t)nic->traffic_class;
		l->gid_type = l->gid_index = KVL_CTRL_NONE;
		if (kvl_nic_discover(sys, nic, &in, err, sizeof(err)) < 0)
			continue; /* the single-host rows say why; nothing to compare but the INI */
		l->transport = (uint8_t)in.transport;
		kvl_copy_str(l->link_layer, sizeof(l->link_layer), in.link_layer);
		l->netdev_mtu = in.netdev_mtu;
		l->rate_mbps = in.rate_mbps;
		if (in.kind != KVL_NIC_RDMA) {
			/* tcp: the netdev's speed where it has one (lo and veth say nothing) */
			if (kvl_sysfs_path(path, sizeof(path), sys, "class/net/%s/speed",
					   nic->device) == 0 &&
			    kvl_sysfs_read_long(path, &speed) == 0 && speed > 0)
				l->rate_mbps = (uint32_t)speed;
			continue;
		}
		l->ini_mtu = nic->mtu ? nic->mtu : 4096;
		l->port_mtu = l->ini_mtu; /* InfiniBand: the subnet manager's, not in sysfs */
		if (strcmp(in.link_layer, "Ethernet") == 0) {
			act = roce_active_mtu(in.driver, in.netdev_mtu, &h);
			l->port_mtu = act < l->ini_mtu ? act : l->ini_mtu;
		}
		if (strcmp(in.link_layer, "InfiniBand") == 0) {
			l->gid_type = 0;
			l->gid_index = nic->gid_index >= 0 ? (uint8_t)nic->gid_index : 0;
		} else {
			int k = kvl_port_gids(sys, nic->device, nic->port, g, KVL_MAX_GIDS);
			const struct kvl_gid_entry *e = NULL;

			for (int j = 0; nic->gid_index >= 0 && j < k; j++)
				if (g[j].index == nic->gid_index)
					e = &g[j];
			if (nic->gid_index < 0 && k > 0)
				e = auto_gid(g, k);
			if (e && e->type >= 0 && e->type <= 2) {
				l->gid_type = (uint8_t)e->type;
				l->gid_index = (uint8_t)e->index;
			}
		}
	}
	return n;
}

static bool is_rdma_link(const struct kvl_ctrl_link *l)
{
	return l->transport != KVL_TRANSPORT_TCP && l->link_layer[0] != '\0';
}

static void mtu_text(char *buf, size_t cap, const struct kvl_ctrl_link *l)
{
	if (is_rdma_link(l))
		put(buf, cap, "port %u (INI %u, netdev %u)", l->port_mtu, l->ini_mtu,
		    l->netdev_mtu);
	else
		put(buf, cap, "netdev %u", l->netdev_mtu);
}

static void compare_one(struct doc *d, const char *subj, const struct kvl_ctrl_link *a,
			const struct kvl_ctrl_link *b)
{
	struct kvl_doc_row *w;
	bool ra = is_rdma_link(a), rb = is_rdma_link(b);
	char ma[96], mb[96];

	/* link layer: InfiniBand and Ethernet never meet; tcp meets only tcp */
	if (ra && rb) {
		bool same = strcmp(a->link_layer, b->link_layer) == 0;

		w = row(d, "peer_link_layer", subj, same ? KVL_DOC_PASS : KVL_DOC_FAIL);
		OBS(w, "here %s, there %s", a->link_layer, b->link_layer);
		EXP(w, "the same link layer at both ends");
		if (!same)
			FIX(w,
			    "an InfiniBand port cannot reach a RoCE one: pair NICs on one fabric "
			    "(the INI's [nic.*] order is the pairing)");
	} else {
		w = row(d, "peer_link_layer", subj, ra == rb ? KVL_DOC_PASS : KVL_DOC_WARN);
		OBS(w, "here %s, there %s", ra ? a->link_layer : "tcp", rb ? b->link_layer : "tcp");
		EXP(w, "the same transport at both ends");
		if (ra != rb)
			FIX(w, "one end is tcp, the other RDMA: data connections fall back to the "
			       "transport both have, or none; give both ends the same [nic.*]");
	}

	/* GID type: "handshake fine, bulk terrible" when v1 meets v2 */
	if (ra && rb && a->gid_type != KVL_CTRL_NONE && b->gid_type != KVL_CTRL_NONE &&
	    strcmp(a->link_layer, "Ethernet") == 0 && strcmp(b->link_layer, "Ethernet") == 0) {
		bool same = a->gid_type == b->gid_type;

		w = row(d, "peer_gid_type", subj, same ? KVL_DOC_PASS : KVL_DOC_FAIL);
		OBS(w, "here gid_index %u %s, there gid_index %u %s", a->gid_index,
		    gid_type_name(a->gid_type), b->gid_index, gid_type_name(b->gid_type));
		EXP(w, "the same RoCE version at both ends (v2 where the network routes UDP)");
		if (!same)
			FIX(w,
			    "%s meets %s: the control path connects but no RDMA packet is "
			    "understood; set gid_index to the RoCE v2 entry on both ends "
			    "(gid_index = auto picks it)",
			    gid_type_name(a->gid_type), gid_type_name(b->gid_type));
	} else {
		w = row(d, "peer_gid_type", subj, KVL_DOC_SKIP);
		OBS(w, "here %s, there %s", ra ? gid_type_name(a->gid_type) : "tcp",
		    rb ? gid_type_name(b->gid_type) : "tcp");
		EXP(w, "RoCE at both ends to compare GID types");
	}

	/* MTU: the QPs of the two ends, or the two netdevs for tcp */
	{
		uint32_t x = ra ? a->port_mtu : a->netdev_mtu, y = rb ? b->port_mtu : b->netdev_mtu;
		bool same = x == y;

		mtu_text(ma, sizeof(ma), a);
		mtu_text(mb, sizeof(mb), b);
		w = row(d, "peer_mtu", subj,
			x == 0 || y == 0 ? KVL_DOC_SKIP
			: same		 ? KVL_DOC_PASS
					 : KVL_DOC_WARN);
		OBS(w, "here %s, there %s", ma, mb);
		EXP(w, "the same MTU at both ends");
		if (x && y && !same)
			FIX(w,
			    "the connection runs at the smaller (%u): every message is cut into "
			    "more packets; set the same [nic.*] mtu and netdev MTU on both ends "
			    "(ip link set dev ... mtu 9000 for 4096) and on the switch ports",
			    x < y ? x : y);
	}

	/* rate: the slower port bounds the link */
	w = row(d, "peer_rate", subj,
		a->rate_mbps == 0 || b->rate_mbps == 0 ? KVL_DOC_SKIP
		: a->rate_mbps == b->rate_mbps	       ? KVL_DOC_PASS
						       : KVL_DOC_WARN);
	OBS(w, "here %.1f Gb/s, there %.1f Gb/s (0: unknown)", a->rate_mbps / 1000.0,
	    b->rate_mbps / 1000.0);
	EXP(w, "the same port rate at both ends");
	if (a->rate_mbps && b->rate_mbps && a->rate_mbps != b->rate_mbps)
		FIX(w,
		    "the link runs at the slower port's %.1f Gb/s: check the cable, the port "
		    "speed (ethtool) and the switch",
		    (a->rate_mbps < b->rate_mbps ? a->rate_mbps : b->rate_mbps) / 1000.0);

	/* traffic class: PFC / ECN classes must agree end to end */
	w = row(d, "peer_tclass", subj,
		a->traffic_class == b->traffic_class ? KVL_DOC_PASS : KVL_DOC_WARN);
	OBS(w, "here traffic_class %u, there %u", a->traffic_class, b->traffic_class);
	EXP(w, "the same traffic class at both ends");
	if (a->traffic_class != b->traffic_class)
		FIX(w, "the two directions land in different switch classes (PFC, ECN): set the "
		       "same [nic.*] traffic_class on both ends");
}

void kvl_doctor_compare(const struct kvl_ctrl_link *here, unsigned n_here,
			const struct kvl_ctrl_link *there, unsigned n_there, const char *peer,
			struct kvl_doc_report *r)
{
	struct doc *d = calloc(1, sizeof(*d)); /* row() needs only d->r; it is large */
	unsigned n = n_here < n_there ? n_here : n_there;

	if (d == NULL)
		return;
	d->r = r;
	if (n_here != n_there || n == 0) {
		struct kvl_doc_row *w = row(d, "peer_nics", peer, n ? KVL_DOC_WARN : KVL_DOC_FAIL);

		OBS(w, "%u NIC%s here, %u there", n_here, n_here == 1 ? "" : "s", n_there);
		EXP(w, "the same NICs at both ends, paired in INI order");
		FIX(w, "compared the first %u pair%s only; give both INIs the same [nic.*] list", n,
		    n == 1 ? "" : "s");
	}
	for (unsigned i = 0; i < n; i++) {
		char subj[sizeof(d->r->rows[0].subject)];

		snprintf(subj, sizeof(subj), "nic.%s (%s) <-> %s nic.%s (%s)", here[i].nic,
			 here[i].device, peer, there[i].nic, there[i].device);
		compare_one(d, subj, &here[i], &there[i]);
	}
	free(d);
}

void kvl_doctor_link_verdict(const char *subject, double gbps, uint64_t msg_bytes,
			     uint32_t rate_mbps, struct kvl_doc_report *r)
{
	struct doc *d = calloc(1, sizeof(*d));
	double port_gbps = rate_mbps / 8000.0, pct = port_gbps > 0 ? 100 * gbps / port_gbps : 0;
	struct kvl_doc_row *w;
	int v;

	if (d == NULL)
		return;
	d->r = r;
	v = rate_mbps == 0			   ? KVL_DOC_SKIP
	    : pct >= 80 && msg_bytes >= (1u << 20) ? KVL_DOC_PASS
						   : KVL_DOC_WARN;
	w = row(d, "link_test", subject, v);
	if (rate_mbps)
		OBS(w,
		    "%.3f GB/s with %" PRIu64 " KiB messages: %.0f %% of the slower port's %.1f "
		    "Gb/s (%.2f GB/s)",
		    gbps, msg_bytes >> 10, pct, rate_mbps / 1000.0, port_gbps);
	else
		OBS(w, "%.3f GB/s with %" PRIu64 " KiB messages; neither port's rate is known",
		    gbps, msg_bytes >> 10);
	if (v == KVL_DOC_SKIP)
		EXP(w, "a port rate to judge against: --rate-gbps N (a netdev such as lo or a veth "
		       "has none in sysfs)");
	else
		EXP(w, ">= 80 %% of the slower port's rate at >= 1 MiB messages");
	if (v == KVL_DOC_SKIP)
		goto out;
	if (msg_bytes < (1u << 20))
		FIX(w, "measure with >= 1 MiB messages (--size 1M) before judging the link");
	else if (pct < 50)
		FIX(w, "under half the port's rate: look at PCIe (the pcie_nic / pcie_gpu rows: a "
		       "slot trained down in width or speed) and NUMA (the numa rows: NIC, lcores "
		       "and memory on one node) first, at both ends");
	else if (pct < 80)
		FIX(w, "below 80 %%: check the MTU (peer_mtu), the polling cores' isolation and "
		       "governor, and the NIC's IRQs on the polling cores, at both ends");
out:
	free(d);
}
