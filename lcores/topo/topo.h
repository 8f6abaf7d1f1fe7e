/* SPDX-License-Identifier: BSD-3-Clause */
/* Host topology from sysfs: NIC discovery, CPU/NUMA layout, and NIC-to-lcore pairing. */
#ifndef KVL_LCORES_TOPO_H
#define KVL_LCORES_TOPO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "config.h"

/*
 * Pure C over a sysfs tree: no DPDK, no verbs. Every function takes the sysfs root ("/sys"
 * on a real host, a fixture tree under tests/fixtures/sysfs/ in tests), so the unit suite runs
 * it on made-up machines with one or two NUMA nodes, mlx5 and rxe devices.
 *
 * Paths read, relative to the root:
 *   class/infiniband/<dev>/device/numa_node         NUMA node of an RDMA device (-1: unknown)
 *   class/infiniband/<dev>/device/driver            symlink; basename = kernel driver
 *   class/infiniband/<dev>/ports/<p>/state          "4: ACTIVE"
 *   class/infiniband/<dev>/ports/<p>/link_layer     "Ethernet" | "InfiniBand"
 *   class/infiniband/<dev>/ports/<p>/gid_attrs/ndevs/0   netdev behind a RoCE port
 *   class/net/<netdev>/device/numa_node             NUMA node of a netdev's device
 *   class/net/<netdev>/operstate, mtu
 *   devices/system/node/node<N>/cpulist             CPUs of node N ("0-3,8-11")
 *   devices/system/node/node<N>/distance            SLIT row of node N ("10 21")
 */

#define KVL_ERR_LEN 320

enum kvl_nic_kind {
	KVL_NIC_RDMA = 0, /* under class/infiniband */
	KVL_NIC_NETDEV,	  /* under class/net (tcp transport) */
};

struct kvl_nic_info {
	int kind;      /* enum kvl_nic_kind */
	int transport; /* resolved: never KVL_TRANSPORT_AUTO */
	int numa_node; /* from sysfs, or the INI override; -1 = unknown */
	bool numa_from_conf;
	char driver[32];     /* "mlx5_core", "rdma_rxe", ... ("" if none, e.g. lo) */
	char link_layer[16]; /* "Ethernet", "InfiniBand"; "" for a netdev */
	char state[16];	     /* RDMA port: "ACTIVE", "DOWN", ...; netdev: operstate */
	char netdev[32];     /* RoCE: netdev behind the port; tcp: the device itself */
	uint32_t netdev_mtu; /* 0 if unknown */
};

/*
 * Find @nic in the sysfs tree and fill @info. Resolves transport "auto" (mlx5 for a device
 * bound to mlx5_core, verbs for any other RDMA device, tcp for a netdev) and checks that an
 * explicit transport fits the device. Returns 0, or a negative errno with a message in @err
 * that names the NIC section and device, says what was looked for and where, and lists what
 * was found instead (e.g. the RDMA devices present), so an operator can fix the INI.
 */
int kvl_nic_discover(const char *sysfs_root, const struct kvl_nic_conf *nic,
		     struct kvl_nic_info *info, char *err, size_t errlen);

/* Number of NUMA nodes described under devices/system/node (at least 1). */
int kvl_numa_node_count(const char *sysfs_root);

/* NUMA node of @cpu from the nodes' cpulists; -1 if no node lists it. */
int kvl_cpu_numa_node(const char *sysfs_root, unsigned cpu);

/* SLIT distance between two nodes; 10 when a == b and 20 otherwise if sysfs says nothing. */
int kvl_numa_distance(const char *sysfs_root, int a, int b);

/* Parse a cpulist ("0-3,8,10-11") into a bitmap of @nbits bits. Returns count or -EINVAL. */
int kvl_parse_cpulist(const char *s, uint64_t *bits, unsigned nbits);

/* A worker lcore EAL gave us, as the pairing sees it. */
struct kvl_lcore_desc {
	unsigned lcore_id;
	unsigned cpu;
	int socket; /* NUMA node */
};

struct kvl_pairing {
	unsigned lcore_idx; /* index into the lcore array given to kvl_pair_nics() */
	bool remote;	    /* the lcore is not on the NIC's node (allow_remote_numa) */
};

/*
 * Give each NIC its own worker lcore on the NIC's NUMA node. @nic_node[i] is the node of NIC i
 * (-1: unknown, any lcore will do). NICs with a known node are served first, so a NIC of
 * unknown node or a remote fallback never takes the last local lcore of another NIC. When a
 * NIC's node has no free lcore: with @allow_remote the nearest node's free lcore is taken (by
 * kvl_numa_distance over @sysfs_root, then lowest lcore id) and marked remote; without it,
 * -ENODEV with a message naming the NIC, its node, and the lcores/sockets available. Fewer
 * lcores than NICs: -ENOSPC with how many are needed and an example lcore list.
 * @nic_names[i] names NIC i in messages (e.g. "nic.rail0 (mlx5_0)").
 */
int kvl_pair_nics(const char *sysfs_root, const int *nic_node, const char *const *nic_names,
		  unsigned n_nics, const struct kvl_lcore_desc *lcores, unsigned n_lcores,
		  bool allow_remote, struct kvl_pairing *out, char *err, size_t errlen);

#endif /* KVL_LCORES_TOPO_H */
