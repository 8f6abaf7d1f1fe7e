/* SPDX-License-Identifier: BSD-3-Clause */
/* What the operators' checklists read from sysfs: GID tables, PCIe link training, modules. */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "sysfs.h"
#include "topo.h"

/* "IB/RoCE v1" serves both InfiniBand and RoCE v1, as in verbs_dev.c: the link layer decides. */
static int gid_type_word(const char *t, bool ethernet)
{
	if (strcmp(t, "RoCE v2") == 0)
		return 2;
	if (strcmp(t, "IB/RoCE v1") == 0 || strcmp(t, "RoCE v1") == 0)
		return ethernet ? 1 : 0;
	return -1;
}

/* sysfs writes a GID as eight groups of four hex digits. */
static bool gid_parse(const char *s, unsigned char raw[16])
{
	return inet_pton(AF_INET6, s, raw) == 1;
}

static bool gid_is_zero(const unsigned char raw[16])
{
	for (int i = 0; i < 16; i++)
		if (raw[i])
			return false;
	return true;
}

int kvl_port_gids(const char *sysfs_root, const char *dev, unsigned port, struct kvl_gid_entry *out,
		  unsigned max)
{
	static const unsigned char v4pfx[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };
	char path[PATH_MAX], buf[64], ll[32] = "";
	struct dirent **names;
	unsigned count = 0;
	bool ethernet;
	int n;

	if (kvl_sysfs_path(path, sizeof(path), sysfs_root,
			   "class/infiniband/%s/ports/%u/link_layer", dev, port) == 0)
		kvl_sysfs_read(path, ll, sizeof(ll));
	ethernet = strcmp(ll, "Ethernet") == 0;
	if (kvl_sysfs_path(path, sizeof(path), sysfs_root, "class/infiniband/%s/ports/%u/gids", dev,
			   port) < 0)
		return -ENAMETOOLONG;
	n = kvl_sysfs_list(path, &names);
	if (n < 0)
		return n;
	/* The directory lists names sorted as strings ("10" before "2"): walk by number. */
	for (long idx = 0, seen = 0; seen < n && idx < KVL_MAX_GIDS && count < max; idx++) {
		struct kvl_gid_entry *e = &out[count];
		unsigned char raw[16];

		if (kvl_sysfs_path(path, sizeof(path), sysfs_root,
				   "class/infiniband/%s/ports/%u/gids/%ld", dev, port, idx) < 0 ||
		    kvl_sysfs_read(path, buf, sizeof(buf)) < 0)
			continue;
		seen++;
		if (!gid_parse(buf, raw) || gid_is_zero(raw))
			continue;
		memset(e, 0, sizeof(*e));
		e->index = (int)idx;
		kvl_copy_str(e->gid, sizeof(e->gid), buf);
		e->type = -1;
		if (kvl_sysfs_path(path, sizeof(path), sysfs_root,
				   "class/infiniband/%s/ports/%u/gid_attrs/types/%ld", dev, port,
				   idx) == 0 &&
		    kvl_sysfs_read(path, buf, sizeof(buf)) > 0)
			e->type = gid_type_word(buf, ethernet);
		else if (!ethernet)
			e->type = 0;
		if (kvl_sysfs_path(path, sizeof(path), sysfs_root,
				   "class/infiniband/%s/ports/%u/gid_attrs/ndevs/%ld", dev, port,
				   idx) == 0)
			kvl_sysfs_read(path, e->netdev, sizeof(e->netdev));
		e->ipv4 = memcmp(raw, v4pfx, sizeof(v4pfx)) == 0;
		if (e->ipv4)
			inet_ntop(AF_INET, raw + 12, e->ipv4_addr, sizeof(e->ipv4_addr));
		count++;
	}
	kvl_sysfs_free_list(names, n);
	return (int)count;
}

/* "16.0 GT/s PCIe" (5.x kernels and later), "8 GT/s" (older), "Unknown" on virtual links. */
static double read_gts(const char *sysfs_root, const char *addr, const char *attr)
{
	char path[PATH_MAX], buf[64];
	double v;

	if (kvl_sysfs_path(path, sizeof(path), sysfs_root, "bus/pci/devices/%s/%s", addr, attr) <
		    0 ||
	    kvl_sysfs_read(path, buf, sizeof(buf)) <= 0)
		return 0;
	v = strtod(buf, NULL);
	return v > 0 && v < 1000 ? v : 0;
}

static unsigned read_width(const char *sysfs_root, const char *addr, const char *attr)
{
	char path[PATH_MAX];
	long v;

	if (kvl_sysfs_path(path, sizeof(path), sysfs_root, "bus/pci/devices/%s/%s", addr, attr) <
		    0 ||
	    kvl_sysfs_read_long(path, &v) < 0 || v <= 0 || v > 64)
		return 0;
	return (unsigned)v;
}

int kvl_pci_link_read(const char *sysfs_root, const char *addr, struct kvl_pci_link *out)
{
	memset(out, 0, sizeof(*out));
	out->cur_width = read_width(sysfs_root, addr, "current_link_width");
	out->max_width = read_width(sysfs_root, addr, "max_link_width");
	out->cur_gts = read_gts(sysfs_root, addr, "current_link_speed");
	out->max_gts = read_gts(sysfs_root, addr, "max_link_speed");
	return out->cur_width || out->cur_gts ? 0 : -ENOENT;
}

double kvl_pci_link_gbps(unsigned lanes, double gts)
{
	/* Gen1/2 lose 20% to 8b/10b; Gen3 and later 128b/130b (Gen6's FLIT mode is close). */
	double coding = gts <= 5.0 ? 0.8 : 128.0 / 130.0;

	return lanes * gts * coding;
}

bool kvl_module_loaded(const char *sysfs_root, const char *name)
{
	char path[PATH_MAX];
	struct stat st;

	return kvl_sysfs_path(path, sizeof(path), sysfs_root, "module/%s", name) == 0 &&
	       stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}
