/* SPDX-License-Identifier: BSD-3-Clause */
/* GPU <-> NIC pairing from the PCI tree in sysfs, ranked as `nvidia-smi topo -m` ranks it. */

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sysfs.h"
#include "topo.h"

#define PCI_DEVICES   "bus/pci/devices"
#define NVIDIA_VENDOR 0x10de
#define PCI_CLASS_VGA 0x0300 /* class code's upper 16 bits: base class + subclass */
#define PCI_CLASS_3D  0x0302 /* "3D controller": datacenter GPUs without a display */
#define GPU_SEL_NONE  -2

const char *kvl_pci_dist_name(int dist)
{
	switch (dist) {
	case KVL_PCI_PIX:
		return "PIX";
	case KVL_PCI_PXB:
		return "PXB";
	case KVL_PCI_PHB:
		return "PHB";
	case KVL_PCI_NODE:
		return "NODE";
	case KVL_PCI_SYS:
		return "SYS";
	default:
		return "none";
	}
}

/* @s is a PCI address spelled exactly as sysfs names functions. */
static bool is_pci_name(const char *s)
{
	char norm[KVL_PCI_ADDR_LEN];

	return kvl_pci_addr_normalize(s, norm, sizeof(norm)) == 0 && strcmp(norm, s) == 0;
}

int kvl_pci_distance(const struct kvl_pci_path *a, const struct kvl_pci_path *b, int n_nodes)
{
	unsigned common = 0, shared, sa, sb;

	if (strcmp(a->root_bus, b->root_bus) != 0) {
		if (n_nodes <= 1)
			return KVL_PCI_NODE;
		return a->numa_node >= 0 && a->numa_node == b->numa_node ? KVL_PCI_NODE
									 : KVL_PCI_SYS;
	}
	/*
	 * Under one host bridge the chain is root port, then per switch its upstream and a
	 * downstream port, then the function: the switches above a function are the upstream
	 * ports at odd positions. The path crosses the deepest switch both share and every
	 * switch below it on either side; sharing none means crossing the host bridge.
	 */
	while (common + 1 < a->depth && common + 1 < b->depth &&
	       strcmp(a->chain[common], b->chain[common]) == 0)
		common++;
	shared = common / 2;
	if (shared == 0)
		return KVL_PCI_PHB;
	sa = (a->depth - 1) / 2;
	sb = (b->depth - 1) / 2;
	return (sa - shared) + (sb - shared) + 1 == 1 ? KVL_PCI_PIX : KVL_PCI_PXB;
}

int kvl_pci_locate(const char *sysfs_root, const char *link_rel, struct kvl_pci_path *out,
		   char *why, size_t whylen)
{
	char path[PATH_MAX], real[PATH_MAX], devs[PATH_MAX], rdevs[PATH_MAX], *rest, *tok, *save;
	size_t cut = 0, dl;
	long v;

	memset(out, 0, sizeof(*out));
	out->numa_node = -1;
	if (kvl_sysfs_path(path, sizeof(path), sysfs_root, "%s", link_rel) < 0 ||
	    kvl_sysfs_path(devs, sizeof(devs), sysfs_root, "devices") < 0) {
		snprintf(why, whylen, "path too long");
		return -ENODEV;
	}
	if (realpath(path, real) == NULL) {
		snprintf(why, whylen, "no %s", link_rel);
		return -ENODEV;
	}
	if (realpath(devs, rdevs) == NULL) {
		snprintf(why, whylen, "no devices/ under the sysfs root");
		return -ENODEV;
	}
	dl = strlen(rdevs);
	if (strncmp(real, rdevs, dl) != 0 || strncmp(real + dl, "/pci", 4) != 0) {
		snprintf(why, whylen, "%s is not on a PCI bus (%s)", link_rel,
			 strncmp(real, rdevs, dl) == 0 ? real + dl + 1 : real);
		return -ENODEV;
	}
	/* devices/pci<domain>:<bus>/<root port>/.../<function>[/<not PCI>...] */
	rest = real + dl + 1;
	tok = strtok_r(rest, "/", &save);
	kvl_copy_str(out->root_bus, sizeof(out->root_bus), tok + 3);
	while ((tok = strtok_r(NULL, "/", &save)) != NULL && is_pci_name(tok)) {
		if (out->depth == KVL_PCI_MAX_DEPTH) {
			snprintf(why, whylen, "%s: PCI tree deeper than %d", link_rel,
				 KVL_PCI_MAX_DEPTH);
			return -ENODEV;
		}
		kvl_copy_str(out->chain[out->depth++], KVL_PCI_ADDR_LEN, tok);
		cut = (size_t)(tok - real) + strlen(tok);
	}
	if (out->depth == 0) {
		snprintf(why, whylen, "%s is a host bridge, not a PCI function", link_rel);
		return -ENODEV;
	}
	kvl_copy_str(out->addr, sizeof(out->addr), out->chain[out->depth - 1]);
	/* strtok_r put NULs in @real; rebuild the function's directory for its numa_node. */
	for (size_t i = 0; i < cut; i++)
		if (real[i] == '\0')
			real[i] = '/';
	real[cut] = '\0';
	if (strlen(real) + sizeof("/numa_node") <= sizeof(real)) {
		strcat(real, "/numa_node");
		if (kvl_sysfs_read_long(real, &v) == 0 && v >= 0 && v <= INT_MAX)
			out->numa_node = (int)v;
	}
	return 0;
}

static long read_hex(const char *sysfs_root, const char *name, const char *attr)
{
	char path[PATH_MAX], buf[32], *end;
	unsigned long v;

	if (kvl_sysfs_path(path, sizeof(path), sysfs_root, PCI_DEVICES "/%s/%s", name, attr) < 0 ||
	    kvl_sysfs_read(path, buf, sizeof(buf)) <= 0)
		return -1;
	errno = 0;
	v = strtoul(buf, &end, 16);
	return errno || *end != '\0' || v > LONG_MAX ? -1 : (long)v;
}

/* PCI-address order; a wider (5+ digit) domain sorts after every 4-digit one. */
static int addr_cmp(const char *a, const char *b)
{
	size_t la = strlen(a), lb = strlen(b);

	return la != lb ? (la < lb ? -1 : 1) : strcmp(a, b);
}

static int path_cmp(const void *a, const void *b)
{
	return addr_cmp(((const struct kvl_pci_path *)a)->addr,
			((const struct kvl_pci_path *)b)->addr);
}

int kvl_gpu_scan(const char *sysfs_root, struct kvl_pci_path *gpus, unsigned max)
{
	struct dirent **names;
	char path[PATH_MAX], rel[PATH_MAX], why[128];
	unsigned count = 0;
	int n, rc = 0;

	if (kvl_sysfs_path(path, sizeof(path), sysfs_root, PCI_DEVICES) < 0)
		return 0;
	n = kvl_sysfs_list(path, &names);
	if (n < 0)
		return 0; /* no PCI bus at all (a container's sysfs): no GPU either */
	for (int i = 0; i < n; i++) {
		const char *name = names[i]->d_name;
		long cls;

		if (read_hex(sysfs_root, name, "vendor") != NVIDIA_VENDOR)
			continue;
		cls = read_hex(sysfs_root, name, "class");
		if (cls < 0 || ((cls >> 8) != PCI_CLASS_VGA && (cls >> 8) != PCI_CLASS_3D))
			continue;
		if (count == max) {
			rc = -E2BIG;
			break;
		}
		snprintf(rel, sizeof(rel), PCI_DEVICES "/%s", name);
		if (kvl_pci_locate(sysfs_root, rel, &gpus[count], why, sizeof(why)) == 0)
			count++;
	}
	kvl_sysfs_free_list(names, n);
	if (rc < 0)
		return rc;
	qsort(gpus, count, sizeof(*gpus), path_cmp);
	return (int)count;
}

/* Bonds over VLANs over bonds: as deep as the NUMA lookup follows them (topo.c). */
#define NETDEV_MAX_DEPTH 4

/*
 * A netdev's PCI function; a VLAN or bond (no device link) has its first lower device's,
 * where the bytes go. Returns 0, or -ENODEV with the reason.
 */
static int netdev_pci(const char *sysfs_root, const char *netdev, int depth,
		      struct kvl_pci_path *out, char *why, size_t whylen)
{
	struct dirent **names;
	char rel[PATH_MAX], path[PATH_MAX];
	int n, rc = -ENODEV;

	snprintf(rel, sizeof(rel), "class/net/%s/device", netdev);
	rc = kvl_pci_locate(sysfs_root, rel, out, why, whylen);
	if (rc == 0 || strncmp(why, "no ", 3) != 0)
		return rc; /* found, or a device that is not on a PCI bus */
	rc = -ENODEV;
	if (depth < NETDEV_MAX_DEPTH &&
	    kvl_sysfs_path(path, sizeof(path), sysfs_root, "class/net/%s", netdev) == 0 &&
	    (n = kvl_sysfs_list(path, &names)) >= 0) {
		for (int i = 0; i < n && rc < 0; i++)
			if (strncmp(names[i]->d_name, "lower_", 6) == 0)
				rc = netdev_pci(sysfs_root, names[i]->d_name + 6, depth + 1, out,
						why, whylen);
		kvl_sysfs_free_list(names, n);
	}
	if (rc < 0 && depth == 0)
		snprintf(why, whylen, "%s has no device link: a virtual netdev", netdev);
	return rc;
}

int kvl_nic_pci(const char *sysfs_root, const struct kvl_nic_conf *nic,
		const struct kvl_nic_info *info, struct kvl_pci_path *out, char *why, size_t whylen)
{
	char rel[PATH_MAX], sub[128];
	int rc;

	memset(out, 0, sizeof(*out));
	out->numa_node = -1;
	why[0] = '\0';
	if (info->kind == KVL_NIC_RDMA && strcmp(info->driver, "rdma_rxe") == 0) {
		/* Before 5.11 rxe hung under its netdev's function: that is not a DMA engine. */
		snprintf(why, whylen, "%s is soft-RoCE over %s: no PCI function of its own",
			 nic->device, info->netdev[0] ? info->netdev : "a netdev");
		return -ENODEV;
	}
	if (info->kind == KVL_NIC_NETDEV) {
		rc = netdev_pci(sysfs_root, nic->device, 0, out, why, whylen);
	} else {
		snprintf(rel, sizeof(rel), "class/infiniband/%s/device", nic->device);
		rc = kvl_pci_locate(sysfs_root, rel, out, sub, sizeof(sub));
		if (rc < 0 && strncmp(sub, "no ", 3) == 0)
			snprintf(why, whylen, "%s has no device link: a software RDMA device",
				 nic->device);
		else if (rc < 0)
			snprintf(why, whylen, "%s: %s", nic->device, sub);
	}
	if (rc < 0)
		return rc;
	/* The INI's numa_node override wins, as it does for the lcore pairing. */
	out->numa_node = info->numa_node;
	return 0;
}

/* gpu = auto | none | <index> | <address> (the parser stored it normalised). */
static int gpu_sel(const char *s, long *index, const char **addr)
{
	char *end;

	*addr = NULL;
	if (s[0] == '\0' || strcmp(s, "auto") == 0)
		return KVL_AUTO;
	if (strcmp(s, "none") == 0)
		return GPU_SEL_NONE;
	if (strchr(s, ':') == NULL) {
		*index = strtol(s, &end, 10);
		return *end == '\0' && *index >= 0 ? 0 : -EINVAL;
	}
	*addr = s;
	return 0;
}

static void msg_gpus(struct kvl_msg *m, const struct kvl_pci_path *gpus, int n_gpus)
{
	if (n_gpus == 0) {
		kvl_msg_add(m, "none");
		return;
	}
	for (int g = 0; g < n_gpus; g++)
		kvl_msg_add(m, "%s%d = %s", g ? ", " : "", g, gpus[g].addr);
}

/* What is at a configured address that is not a GPU, for the error. */
static void msg_not_gpu(struct kvl_msg *m, const char *sysfs_root, const char *addr)
{
	long vendor = read_hex(sysfs_root, addr, "vendor");
	long cls = read_hex(sysfs_root, addr, "class");

	if (vendor < 0)
		kvl_msg_add(m, "there is no PCI function %s", addr);
	else
		kvl_msg_add(m, "%s is not an NVIDIA GPU (vendor 0x%04lx, class 0x%06lx)", addr,
			    vendor, cls < 0 ? 0 : cls);
}

static int pair_one(const char *sysfs_root, const struct kvl_nic_conf *nic,
		    const struct kvl_nic_info *info, const char *where,
		    const struct kvl_pci_path *gpus, int n_gpus, int n_nodes,
		    struct kvl_gpu_pair *p, struct kvl_msg *m)
{
	struct kvl_pci_path np;
	char why[KVL_GPU_NOTE_LEN], devs[PATH_MAX];
	int dist[KVL_MAX_GPUS], best_g = -1, pick = -1, sel;
	const char *addr;
	long index = -1;
	bool nic_pci;

	memset(p, 0, sizeof(*p));
	p->gpu = -1;
	p->cuda_device = -1;
	p->dist = p->best = KVL_PCI_NONE;
	kvl_sysfs_path(devs, sizeof(devs), sysfs_root, PCI_DEVICES);

	nic_pci = kvl_nic_pci(sysfs_root, nic, info, &np, why, sizeof(why)) == 0;
	if (nic_pci)
		kvl_copy_str(p->nic_addr, sizeof(p->nic_addr), np.addr);
	for (int g = 0; g < n_gpus; g++) {
		dist[g] = nic_pci ? kvl_pci_distance(&np, &gpus[g], n_nodes) : KVL_PCI_NONE;
		/* strictly better only: ties keep the lowest PCI address (the list is sorted) */
		if (best_g < 0 || dist[g] < dist[best_g])
			best_g = g;
	}
	if (best_g >= 0)
		p->best = dist[best_g];

	sel = gpu_sel(nic->gpu, &index, &addr);
	if (sel == GPU_SEL_NONE) {
		p->from_conf = true;
		snprintf(p->note, sizeof(p->note), "gpu = none in the INI");
		return 0;
	}
	if (sel == KVL_AUTO) {
		if (n_gpus == 0) {
			struct kvl_msg nm;

			kvl_msg_init(&nm, p->note, sizeof(p->note));
			if (!nic_pci)
				kvl_msg_add(&nm, "%s; ", why);
			kvl_msg_add(&nm, "no NVIDIA GPU under %s", devs);
			return 0;
		}
		pick = best_g;
	} else {
		p->from_conf = true;
		if (addr) {
			for (int g = 0; g < n_gpus && pick < 0; g++)
				if (strcmp(gpus[g].addr, addr) == 0)
					pick = g;
		} else if (sel == 0 && index < n_gpus) {
			pick = (int)index;
		}
		if (pick < 0) {
			kvl_msg_add(m, "%s%s%snic.%s.gpu: ", m->len ? "\n" : "", where ? where : "",
				    where ? ": " : "", nic->label);
			if (addr)
				msg_not_gpu(m, sysfs_root, addr);
			else
				kvl_msg_add(m, "GPU index %ld is past the last one", index);
			kvl_msg_add(m, "; NVIDIA GPUs under %s, in PCI-address order: ", devs);
			msg_gpus(m, gpus, n_gpus);
			return -ENODEV;
		}
	}
	p->gpu = pick;
	p->dist = dist[pick];
	kvl_copy_str(p->addr, sizeof(p->addr), gpus[pick].addr);
	if (!nic_pci) {
		kvl_copy_str(p->note, sizeof(p->note), why);
	} else if (p->dist > p->best) {
		p->warn = true;
		snprintf(p->note, sizeof(p->note), "the INI chose %s (%s); %s is nearer (%s)",
			 p->addr, kvl_pci_dist_name(p->dist), gpus[best_g].addr,
			 kvl_pci_dist_name(p->best));
	} else if (p->dist == KVL_PCI_SYS) {
		p->warn = true;
		snprintf(p->note, sizeof(p->note),
			 "across NUMA nodes (NIC node %d, GPU node %d): no GPU is nearer",
			 np.numa_node, gpus[pick].numa_node);
	}
	return 0;
}

int kvl_pair_gpus(const char *sysfs_root, const struct kvl_nic_conf *nics,
		  const struct kvl_nic_info *infos, const char *const *where, unsigned n,
		  struct kvl_gpu_pair *out, char *err, size_t errlen)
{
	struct kvl_pci_path gpus[KVL_MAX_GPUS]; /* 23 KiB, once at start */
	struct kvl_msg m;
	int n_gpus, n_nodes, rc = 0;

	kvl_msg_init(&m, err, errlen);
	n_gpus = kvl_gpu_scan(sysfs_root, gpus, KVL_MAX_GPUS);
	if (n_gpus < 0) {
		kvl_msg_add(&m, "more than %d NVIDIA GPUs under the PCI bus: not supported",
			    KVL_MAX_GPUS);
		return n_gpus;
	}
	n_nodes = kvl_numa_node_count(sysfs_root);
	for (unsigned i = 0; i < n; i++) {
		int r = pair_one(sysfs_root, &nics[i], &infos[i], where ? where[i] : NULL, gpus,
				 n_gpus, n_nodes, &out[i], &m);

		if (r < 0)
			rc = r;
	}
	return rc;
}
