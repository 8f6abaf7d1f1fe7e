/* SPDX-License-Identifier: BSD-3-Clause */
/* Host topology from a sysfs tree: RDMA device and netdev discovery, NUMA node layout. */

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sysfs.h"
#include "topo.h"

#define IB_CLASS  "class/infiniband"
#define NET_CLASS "class/net"
#define NODE_DIR  "devices/system/node"

/* Bonds over VLANs over bonds: deep enough for real stacks, bounded against loops. */
#define NETDEV_MAX_DEPTH 4

/* Kernel driver of a device: the last component of its "driver" symlink. */
static int link_basename(const char *path, char *buf, size_t cap)
{
	char target[PATH_MAX];
	const char *base;
	ssize_t n;

	n = readlink(path, target, sizeof(target) - 1);
	if (n < 0)
		return -errno;
	target[n] = '\0';
	base = strrchr(target, '/');
	kvl_copy_str(buf, cap, base ? base + 1 : target);
	return 0;
}

static bool is_dir(const char *path)
{
	struct stat st;

	return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

/* "(found: a, b)" for a class directory, or why there is nothing to find. */
static void msg_found(struct kvl_msg *m, const char *sysfs_root, const char *class_rel,
		      const char *what)
{
	struct dirent **names;
	char path[PATH_MAX];
	int n;

	if (kvl_sysfs_path(path, sizeof(path), sysfs_root, "%s", class_rel) < 0) {
		kvl_msg_add(m, "(path too long)");
		return;
	}
	n = kvl_sysfs_list(path, &names);
	if (n == -ENOENT) {
		/* No class/infiniband at all means ib_core is not even loaded. */
		kvl_msg_add(m, "(the directory does not exist%s)",
			    strcmp(class_rel, IB_CLASS) == 0 ? ": no RDMA driver is loaded" : "");
		return;
	}
	if (n < 0) {
		kvl_msg_add(m, "(cannot list it: %s)", strerror(-n));
		return;
	}
	if (n == 0) {
		kvl_msg_add(m, "(no %s present)", what);
	} else {
		kvl_msg_add(m, "(found: ");
		for (int i = 0; i < n; i++)
			kvl_msg_add(m, "%s%s", i ? ", " : "", names[i]->d_name);
		kvl_msg_add(m, ")");
	}
	kvl_sysfs_free_list(names, n);
}

/* NUMA node of a netdev; virtual ones (VLAN, bond) inherit it from their first lower device. */
static int netdev_numa(const char *sysfs_root, const char *netdev, int depth)
{
	struct dirent **names;
	char path[PATH_MAX];
	int n, node = -1;
	long v;

	if (depth > NETDEV_MAX_DEPTH)
		return -1;
	if (kvl_sysfs_path(path, sizeof(path), sysfs_root, NET_CLASS "/%s/device/numa_node",
			   netdev) == 0 &&
	    kvl_sysfs_read_long(path, &v) == 0 && v >= 0 && v <= INT_MAX)
		return (int)v;
	if (kvl_sysfs_path(path, sizeof(path), sysfs_root, NET_CLASS "/%s", netdev) < 0)
		return -1;
	n = kvl_sysfs_list(path, &names);
	if (n < 0)
		return -1;
	for (int i = 0; i < n && node < 0; i++)
		if (strncmp(names[i]->d_name, "lower_", 6) == 0)
			node = netdev_numa(sysfs_root, names[i]->d_name + 6, depth + 1);
	kvl_sysfs_free_list(names, n);
	return node;
}

static uint32_t netdev_mtu(const char *sysfs_root, const char *netdev)
{
	char path[PATH_MAX];
	long v;

	if (kvl_sysfs_path(path, sizeof(path), sysfs_root, NET_CLASS "/%s/mtu", netdev) < 0 ||
	    kvl_sysfs_read_long(path, &v) < 0 || v < 0 || v > (long)UINT32_MAX)
		return 0;
	return (uint32_t)v;
}

/*
 * Driver of an RDMA device. Soft-RoCE is recognised by its "parent" attribute (the netdev it
 * runs over) before the driver link is looked at: kernels before 5.11 hung rxe under the
 * netdev's PCI function, so device/driver named the Ethernet driver (mlx5_core included) and
 * would have made a software device look like hardware.
 */
static void rdma_driver(const char *sysfs_root, const char *dev, char *drv, size_t cap,
			char *parent, size_t pcap)
{
	char path[PATH_MAX];

	drv[0] = '\0';
	parent[0] = '\0';
	if (kvl_sysfs_path(path, sizeof(path), sysfs_root, IB_CLASS "/%s/parent", dev) == 0 &&
	    kvl_sysfs_read(path, parent, pcap) > 0) {
		kvl_copy_str(drv, cap, "rdma_rxe");
		return;
	}
	if (kvl_sysfs_path(path, sizeof(path), sysfs_root, IB_CLASS "/%s/device/driver", dev) == 0)
		link_basename(path, drv, cap);
}

/* mlx5_core for a PCI function, mlx5_core.sf for a sub-function on the auxiliary bus. */
static bool is_mlx5_driver(const char *drv)
{
	return strncmp(drv, "mlx5_core", 9) == 0 && (drv[9] == '\0' || drv[9] == '.');
}

/* Netdev behind a port: GID 0's netdev for RoCE, else the rxe parent. "" if none. */
static void rdma_port_netdev(const char *sysfs_root, const char *dev, const char *port,
			     const char *parent, char *buf, size_t cap)
{
	char path[PATH_MAX];

	buf[0] = '\0';
	if (kvl_sysfs_path(path, sizeof(path), sysfs_root,
			   IB_CLASS "/%s/ports/%s/gid_attrs/ndevs/0", dev, port) == 0 &&
	    kvl_sysfs_read(path, buf, cap) > 0)
		return;
	kvl_copy_str(buf, cap, parent);
}

/*
 * RDMA devices sitting on @netdev, for "set device = ..." hints; mlx5-bound ones only when
 * @mlx5_only. Returns how many were listed.
 */
static int msg_rdma_on_netdev(struct kvl_msg *m, const char *sysfs_root, const char *netdev,
			      bool mlx5_only)
{
	struct dirent **devs, **ports;
	char path[PATH_MAX], drv[32], parent[64], nd[64];
	int ndev, nport, found = 0;

	if (kvl_sysfs_path(path, sizeof(path), sysfs_root, IB_CLASS) < 0)
		return 0;
	ndev = kvl_sysfs_list(path, &devs);
	if (ndev < 0)
		return 0;
	for (int i = 0; i < ndev; i++) {
		const char *dev = devs[i]->d_name;
		bool on = false;

		rdma_driver(sysfs_root, dev, drv, sizeof(drv), parent, sizeof(parent));
		if (mlx5_only && !is_mlx5_driver(drv))
			continue;
		if (strcmp(parent, netdev) == 0)
			on = true;
		if (!on &&
		    kvl_sysfs_path(path, sizeof(path), sysfs_root, IB_CLASS "/%s/ports", dev) ==
			    0 &&
		    (nport = kvl_sysfs_list(path, &ports)) >= 0) {
			for (int p = 0; p < nport && !on; p++) {
				rdma_port_netdev(sysfs_root, dev, ports[p]->d_name, "", nd,
						 sizeof(nd));
				on = strcmp(nd, netdev) == 0;
			}
			kvl_sysfs_free_list(ports, nport);
		}
		if (on)
			kvl_msg_add(m, "%s%s", found++ ? ", " : "", dev);
	}
	kvl_sysfs_free_list(devs, ndev);
	return found;
}

static const char *transport_word(int t)
{
	switch (t) {
	case KVL_TRANSPORT_MLX5:
		return "mlx5";
	case KVL_TRANSPORT_VERBS:
		return "verbs";
	case KVL_TRANSPORT_TCP:
		return "tcp";
	default:
		return "auto";
	}
}

/* "4: ACTIVE", "5: LinkUp": the number is the IB spec's state, the word is for people. */
static void port_word(const char *sysfs_root, const char *dev, const char *port, const char *attr,
		      char *out, size_t cap)
{
	char path[PATH_MAX], buf[64];
	const char *word;

	if (kvl_sysfs_path(path, sizeof(path), sysfs_root, IB_CLASS "/%s/ports/%s/%s", dev, port,
			   attr) < 0 ||
	    kvl_sysfs_read(path, buf, sizeof(buf)) <= 0)
		return;
	word = strchr(buf, ':');
	word = word ? word + 1 : buf;
	while (*word == ' ')
		word++;
	kvl_copy_str(out, cap, word);
}

static int discover_rdma(const char *sysfs_root, const struct kvl_nic_conf *nic,
			 struct kvl_nic_info *info, struct kvl_msg *m)
{
	const char *dev = nic->device;
	char path[PATH_MAX], parent[64], port[16], buf[64], rel[sizeof(nic->device) + 32];
	long v;

	rdma_driver(sysfs_root, dev, info->driver, sizeof(info->driver), parent, sizeof(parent));
	snprintf(port, sizeof(port), "%u", (unsigned)nic->port);

	if (nic->transport == KVL_TRANSPORT_TCP) {
		rdma_port_netdev(sysfs_root, dev, port, parent, buf, sizeof(buf));
		kvl_sysfs_path(path, sizeof(path), sysfs_root, IB_CLASS);
		kvl_msg_add(
			m,
			"transport = tcp needs a netdev, but \"%s\" is an RDMA device under %s; ",
			dev, path);
		if (buf[0])
			kvl_msg_add(m, "its netdev is %s (set device = %s, or transport = auto)",
				    buf, buf);
		else
			kvl_msg_add(m, "it has no netdev on port %s (use transport = auto)", port);
		return -EINVAL;
	}
	if (nic->transport == KVL_TRANSPORT_MLX5 && !is_mlx5_driver(info->driver)) {
		if (info->driver[0])
			kvl_msg_add(m,
				    "transport = mlx5 needs a device bound to mlx5_core, but %s is "
				    "driven by %s (use transport = verbs or auto)",
				    dev, info->driver);
		else
			kvl_msg_add(m,
				    "transport = mlx5 needs a device bound to mlx5_core, but sysfs "
				    "shows no driver for %s (use transport = verbs or auto)",
				    dev);
		return -EINVAL;
	}

	kvl_sysfs_path(path, sizeof(path), sysfs_root, IB_CLASS "/%s/ports/%s", dev, port);
	if (nic->port == 0 || !is_dir(path)) {
		kvl_msg_add(m, "no port %s under ", port);
		kvl_sysfs_path(path, sizeof(path), sysfs_root, IB_CLASS "/%s/ports", dev);
		kvl_msg_add(m, "%s ", path);
		snprintf(rel, sizeof(rel), IB_CLASS "/%s/ports", dev);
		msg_found(m, sysfs_root, rel, "ports");
		return -ENODEV;
	}

	info->kind = KVL_NIC_RDMA;
	info->transport = nic->transport != KVL_TRANSPORT_AUTO ? nic->transport
			  : is_mlx5_driver(info->driver)       ? KVL_TRANSPORT_MLX5
							       : KVL_TRANSPORT_VERBS;

	/* A device without its own PCI function (rxe) lives where its netdev does. */
	info->numa_node = -1;
	if (kvl_sysfs_path(path, sizeof(path), sysfs_root, IB_CLASS "/%s/device/numa_node", dev) ==
		    0 &&
	    kvl_sysfs_read_long(path, &v) == 0 && v >= 0 && v <= INT_MAX)
		info->numa_node = (int)v;
	else if (parent[0])
		info->numa_node = netdev_numa(sysfs_root, parent, 0);

	port_word(sysfs_root, dev, port, "state", info->state, sizeof(info->state));
	port_word(sysfs_root, dev, port, "phys_state", info->phys_state, sizeof(info->phys_state));
	/* "100 Gb/sec (4X EDR)", "2.5 Gb/sec (1X SDR)": the number is what matters. */
	if (kvl_sysfs_path(path, sizeof(path), sysfs_root, IB_CLASS "/%s/ports/%s/rate", dev,
			   port) == 0 &&
	    kvl_sysfs_read(path, buf, sizeof(buf)) > 0) {
		double gb = strtod(buf, NULL);

		if (gb > 0 && gb < 1e6)
			info->rate_mbps = (uint32_t)(gb * 1000.0 + 0.5);
	}
	if (kvl_sysfs_path(path, sizeof(path), sysfs_root, IB_CLASS "/%s/ports/%s/link_layer", dev,
			   port) == 0 &&
	    kvl_sysfs_read(path, buf, sizeof(buf)) > 0)
		kvl_copy_str(info->link_layer, sizeof(info->link_layer), buf);

	rdma_port_netdev(sysfs_root, dev, port, parent, buf, sizeof(buf));
	kvl_copy_str(info->netdev, sizeof(info->netdev), buf);
	if (info->netdev[0])
		info->netdev_mtu = netdev_mtu(sysfs_root, info->netdev);
	return 0;
}

static int discover_netdev(const char *sysfs_root, const struct kvl_nic_conf *nic,
			   struct kvl_nic_info *info, struct kvl_msg *m)
{
	const char *dev = nic->device;
	char path[PATH_MAX], buf[64];

	if (nic->transport == KVL_TRANSPORT_MLX5 || nic->transport == KVL_TRANSPORT_VERBS) {
		bool mlx5 = nic->transport == KVL_TRANSPORT_MLX5;

		kvl_sysfs_path(path, sizeof(path), sysfs_root, IB_CLASS);
		kvl_msg_add(
			m,
			"transport = %s needs an RDMA device, but \"%s\" is a netdev, not a device "
			"under %s; ",
			transport_word(nic->transport), dev, path);
		kvl_msg_add(m, "%sRDMA devices on it: ", mlx5 ? "mlx5_core " : "");
		if (msg_rdma_on_netdev(m, sysfs_root, dev, mlx5) == 0) {
			kvl_msg_add(m, "none ");
			msg_found(m, sysfs_root, IB_CLASS, "RDMA devices");
		} else {
			kvl_msg_add(m, " (set device = one of them)");
		}
		return -EINVAL;
	}

	info->kind = KVL_NIC_NETDEV;
	info->transport = KVL_TRANSPORT_TCP;
	info->numa_node = netdev_numa(sysfs_root, dev, 0);
	if (kvl_sysfs_path(path, sizeof(path), sysfs_root, NET_CLASS "/%s/device/driver", dev) == 0)
		link_basename(path, info->driver, sizeof(info->driver));
	if (kvl_sysfs_path(path, sizeof(path), sysfs_root, NET_CLASS "/%s/operstate", dev) == 0 &&
	    kvl_sysfs_read(path, buf, sizeof(buf)) > 0)
		kvl_copy_str(info->state, sizeof(info->state), buf);
	kvl_copy_str(info->netdev, sizeof(info->netdev), dev);
	info->netdev_mtu = netdev_mtu(sysfs_root, dev);
	return 0;
}

int kvl_nic_discover(const char *sysfs_root, const struct kvl_nic_conf *nic,
		     struct kvl_nic_info *info, char *err, size_t errlen)
{
	const char *dev;
	char path[PATH_MAX];
	bool rdma, net;
	struct kvl_msg m;
	int rc;

	kvl_msg_init(&m, err, errlen);
	if (nic == NULL || info == NULL) {
		kvl_msg_add(&m, "nic discovery: no NIC configuration or result given");
		return -EINVAL;
	}
	dev = nic->device;
	memset(info, 0, sizeof(*info));
	info->numa_node = -1;
	kvl_msg_add(&m, "nic.%s (%s): ", nic->label, dev);

	/* The name becomes a path component: keep it from walking out of the class dir. */
	if (dev[0] == '\0' || dev[0] == '.' || strchr(dev, '/') != NULL) {
		kvl_msg_add(&m, "device must name an RDMA device or netdev, found \"%s\"", dev);
		return -EINVAL;
	}
	if (nic->transport < KVL_TRANSPORT_AUTO || nic->transport > KVL_TRANSPORT_TCP) {
		kvl_msg_add(&m, "unknown transport %d", nic->transport);
		return -EINVAL;
	}

	rc = kvl_sysfs_path(path, sizeof(path), sysfs_root, IB_CLASS "/%s", dev);
	rdma = rc == 0 && is_dir(path);
	rc = kvl_sysfs_path(path, sizeof(path), sysfs_root, NET_CLASS "/%s", dev);
	net = rc == 0 && is_dir(path);

	if (rdma && nic->transport != KVL_TRANSPORT_TCP)
		rc = discover_rdma(sysfs_root, nic, info, &m);
	else if (net && nic->transport != KVL_TRANSPORT_MLX5 &&
		 nic->transport != KVL_TRANSPORT_VERBS)
		rc = discover_netdev(sysfs_root, nic, info, &m);
	else if (rdma)
		rc = discover_rdma(sysfs_root, nic, info, &m); /* tcp on an RDMA device */
	else if (net)
		rc = discover_netdev(sysfs_root, nic, info, &m); /* mlx5/verbs on a netdev */
	else {
		/* Nothing of that name: say where we looked and what is there. */
		if (nic->transport != KVL_TRANSPORT_TCP) {
			kvl_sysfs_path(path, sizeof(path), sysfs_root, IB_CLASS);
			kvl_msg_add(&m, "no RDMA device \"%s\" under %s ", dev, path);
			msg_found(&m, sysfs_root, IB_CLASS, "RDMA devices");
		}
		if (nic->transport == KVL_TRANSPORT_AUTO)
			kvl_msg_add(&m, " and ");
		if (nic->transport == KVL_TRANSPORT_AUTO || nic->transport == KVL_TRANSPORT_TCP) {
			kvl_sysfs_path(path, sizeof(path), sysfs_root, NET_CLASS);
			kvl_msg_add(&m, "no netdev \"%s\" under %s ", dev, path);
			msg_found(&m, sysfs_root, NET_CLASS, "netdevs");
		}
		return -ENODEV;
	}
	if (rc < 0)
		return rc;

	/* KVL_AUTO (-1) keeps what sysfs said. */
	if (nic->numa_node >= 0) {
		info->numa_node = nic->numa_node;
		info->numa_from_conf = true;
	}
	kvl_msg_init(&m, err, errlen);
	return 0;
}

/* Ids of the node<N> directories (online nodes), in @ids (up to @max). Returns how many. */
static int node_ids(const char *sysfs_root, int *ids, int max)
{
	struct dirent **names;
	char path[PATH_MAX];
	int n, count = 0;

	if (kvl_sysfs_path(path, sizeof(path), sysfs_root, NODE_DIR) < 0)
		return 0;
	n = kvl_sysfs_list(path, &names);
	if (n < 0)
		return 0;
	for (int i = 0; i < n; i++) {
		const char *s = names[i]->d_name;
		char *end;
		long id;

		if (strncmp(s, "node", 4) != 0 || !isdigit((unsigned char)s[4]))
			continue;
		id = strtol(s + 4, &end, 10);
		if (*end != '\0' || id < 0 || id > INT_MAX)
			continue;
		if (count < max)
			ids[count] = (int)id;
		count++;
	}
	kvl_sysfs_free_list(names, n);
	return count < max ? count : max;
}

#define MAX_NODES 1024

int kvl_numa_node_count(const char *sysfs_root)
{
	int ids[MAX_NODES], n, top = -1;

	/*
	 * Node ids can have holes (node0, node2 on some CXL/HBM boxes); callers index arrays by
	 * node id, so "count" is the highest id + 1 rather than the number of directories.
	 */
	n = node_ids(sysfs_root, ids, MAX_NODES);
	for (int i = 0; i < n; i++)
		if (ids[i] > top)
			top = ids[i];
	return top < 0 ? 1 : top + 1;
}

/*
 * Walk a cpulist ("0-3,8,10-11", as sysfs prints it; "" for a CPU-less node), calling @fn on
 * each range. Returns 0, -EINVAL on a syntax error, or what @fn returned if non-zero.
 */
static int cpulist_walk(const char *s, int (*fn)(void *arg, unsigned lo, unsigned hi), void *arg)
{
	const char *p = s;

	if (s == NULL)
		return -EINVAL;
	while (isspace((unsigned char)*p))
		p++;
	if (*p == '\0')
		return 0;
	for (;;) {
		unsigned long lo, hi;
		char *end;
		int rc;

		if (!isdigit((unsigned char)*p))
			return -EINVAL;
		errno = 0;
		lo = strtoul(p, &end, 10);
		if (errno || lo > UINT_MAX)
			return -EINVAL;
		p = end;
		hi = lo;
		if (*p == '-') {
			p++;
			if (!isdigit((unsigned char)*p))
				return -EINVAL;
			hi = strtoul(p, &end, 10);
			if (errno || hi > UINT_MAX || hi < lo)
				return -EINVAL;
			p = end;
		}
		rc = fn(arg, (unsigned)lo, (unsigned)hi);
		if (rc)
			return rc;
		if (*p == ',') {
			p++;
			continue;
		}
		while (isspace((unsigned char)*p))
			p++;
		return *p == '\0' ? 0 : -EINVAL;
	}
}

struct bitmap_arg {
	uint64_t *bits;
	unsigned nbits;
};

static int set_range(void *arg, unsigned lo, unsigned hi)
{
	struct bitmap_arg *b = arg;

	/* A CPU the bitmap cannot hold would silently vanish from the mask: refuse instead. */
	if (hi >= b->nbits)
		return -EINVAL;
	for (unsigned c = lo; c <= hi; c++)
		b->bits[c / 64] |= UINT64_C(1) << (c % 64);
	return 0;
}

int kvl_parse_cpulist(const char *s, uint64_t *bits, unsigned nbits)
{
	struct bitmap_arg b = { bits, nbits };
	unsigned words = (nbits + 63) / 64;
	int rc, count = 0;

	if (nbits > 0 && bits == NULL)
		return -EINVAL;
	if (words)
		memset(bits, 0, words * sizeof(*bits));
	rc = cpulist_walk(s, set_range, &b);
	if (rc < 0) {
		if (words)
			memset(bits, 0, words * sizeof(*bits));
		return rc;
	}
	for (unsigned w = 0; w < words; w++)
		count += __builtin_popcountll(bits[w]);
	return count;
}

static int has_cpu(void *arg, unsigned lo, unsigned hi)
{
	unsigned cpu = *(unsigned *)arg;

	return cpu >= lo && cpu <= hi ? 1 : 0;
}

int kvl_cpu_numa_node(const char *sysfs_root, unsigned cpu)
{
	int ids[MAX_NODES], n;
	char path[PATH_MAX], list[4096];

	n = node_ids(sysfs_root, ids, MAX_NODES);
	for (int i = 0; i < n; i++) {
		if (kvl_sysfs_path(path, sizeof(path), sysfs_root, NODE_DIR "/node%d/cpulist",
				   ids[i]) < 0 ||
		    kvl_sysfs_read(path, list, sizeof(list)) < 0)
			continue;
		if (cpulist_walk(list, has_cpu, &cpu) == 1)
			return ids[i];
	}
	return -1;
}

/* Position of @node among the online nodes: the column it has in every distance row. */
static int online_index(const char *sysfs_root, int node)
{
	int ids[MAX_NODES], n, idx = 0;
	bool online = false;

	n = node_ids(sysfs_root, ids, MAX_NODES);
	for (int i = 0; i < n; i++) {
		if (ids[i] < node)
			idx++;
		else if (ids[i] == node)
			online = true;
	}
	return online ? idx : -1;
}

int kvl_numa_distance(const char *sysfs_root, int a, int b)
{
	int def = a == b ? 10 : 20, col;
	char path[PATH_MAX], row[4096], *p, *end;

	if (a < 0 || b < 0)
		return def;
	if (kvl_sysfs_path(path, sizeof(path), sysfs_root, NODE_DIR "/node%d/distance", a) < 0 ||
	    kvl_sysfs_read(path, row, sizeof(row)) <= 0)
		return def;
	/*
	 * The kernel prints one entry per online node, skipping holes in the ids: with nodes 0
	 * and 2, node0/distance is "10 21" and node 2 is the second column, not the third.
	 */
	col = online_index(sysfs_root, b);
	if (col < 0)
		return def;
	p = row;
	for (int i = 0;; i++) {
		long d;

		errno = 0;
		d = strtol(p, &end, 10);
		if (end == p || errno || d <= 0 || d > 255)
			return def;
		if (i == col)
			return (int)d;
		p = end;
	}
}
