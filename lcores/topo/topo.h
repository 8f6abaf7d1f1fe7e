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
 *   bus/pci/devices/<addr>/{vendor,class,numa_node} PCI functions (GPUs: vendor 0x10de)
 *   the targets of the links above under devices/pci<domain>:<bus>/...: the bridge chain
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
	char phys_state[16]; /* RDMA port: "LinkUp", "Disabled", "Polling", ... ("" unknown) */
	uint32_t rate_mbps;  /* RDMA port: its rate ("100 Gb/sec (4X EDR)"); 0 unknown */
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

/* This process's locked-memory limit (RLIMIT_MEMLOCK, soft and hard) as text ("8192 KiB",
 * "unlimited"), for the messages of whatever fails to pin memory under it. */
void kvl_memlock_limits(char *cur, char *max, size_t cap);

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

/* ---- GPU <-> NIC pairing by PCI distance (gpu_topo.c) ---- */

/*
 * Distance classes as `nvidia-smi topo -m` names them, nearest first, so a lower value is a
 * better pair. Devices under one root bus (host bridge, "pci0000:15" in sysfs) are ranked by
 * the PCIe switches between them: a switch is its upstream port and the downstream ports
 * below it, so the path walks the chain two functions at a time, as NCCL reads sysfs.
 */
enum kvl_pci_dist {
	KVL_PCI_PIX = 1, /* through one PCIe switch: both behind the same switch */
	KVL_PCI_PXB,	 /* through several switches, not through the host bridge */
	KVL_PCI_PHB,	 /* through the host bridge (root complex) they share */
	KVL_PCI_NODE,	 /* between host bridges of one NUMA node */
	KVL_PCI_SYS,	 /* across NUMA nodes (UPI/xGMI), or a node that sysfs does not give */
	KVL_PCI_NONE,	 /* no PCI path: a software device (rxe, siw), a virtual netdev, no GPU */
};

/* "PIX", "PXB", "PHB", "NODE", "SYS", "none". */
const char *kvl_pci_dist_name(int dist);

/* kvl_pci_addr_normalize() and KVL_PCI_ADDR_LEN are in config.h: the INI checks them. */
#define KVL_PCI_MAX_DEPTH 16 /* root port, switches, the function: deeper trees are refused */
#define KVL_MAX_GPUS	  64

/* A PCI function's place in the tree, from its resolved sysfs path. */
struct kvl_pci_path {
	char addr[KVL_PCI_ADDR_LEN]; /* the function itself */
	char root_bus[16];	     /* "0000:15": its host bridge (devices/pci0000:15) */
	int numa_node;		     /* -1: sysfs does not say */
	unsigned depth;		     /* functions in @chain: root port ... the function */
	char chain[KVL_PCI_MAX_DEPTH][KVL_PCI_ADDR_LEN];
};

/*
 * Class between two PCI functions. @n_nodes is the host's NUMA node count: on a one-node
 * host an unknown node (-1, common in VMs) is that node; on more, devices on different host
 * bridges whose nodes are not both known rank SYS (nothing shows them local).
 */
int kvl_pci_distance(const struct kvl_pci_path *a, const struct kvl_pci_path *b, int n_nodes);

/*
 * Locate the PCI function behind the sysfs link <root>/@link_rel (e.g. "class/net/eth0/device"):
 * the link is resolved and the path below devices/pci<domain>:<bus>/ gives the chain; a link
 * that ends below a function (an mlx5 sub-function on the auxiliary bus) yields that function.
 * Returns 0, or -ENODEV with the reason in @why (no such link, not a PCI device).
 */
int kvl_pci_locate(const char *sysfs_root, const char *link_rel, struct kvl_pci_path *out,
		   char *why, size_t whylen);

/*
 * The NVIDIA GPUs (vendor 0x10de, class 0x0300xx VGA or 0x0302xx 3D controller; NVSwitches
 * and audio functions are not GPUs) under bus/pci/devices, in PCI-address order, which is
 * the order `gpu = <index>` counts in (nvidia-smi's; CUDA's default order can differ unless
 * CUDA_DEVICE_ORDER=PCI_BUS_ID). Returns the count (0: none, -E2BIG past @max).
 */
int kvl_gpu_scan(const char *sysfs_root, struct kvl_pci_path *gpus, unsigned max);

/*
 * Where a configured NIC sits in the PCI tree: an RDMA device's class/infiniband/<dev>/device,
 * a netdev's class/net/<dev>/device. Soft-RoCE and siw are software (their "PCI parent", on
 * old kernels, is the netdev's and no DMA engine of theirs), lo and VLANs have none: -ENODEV
 * with the reason in @why. @info->numa_node (the INI override included) is the NIC's node.
 */
int kvl_nic_pci(const char *sysfs_root, const struct kvl_nic_conf *nic,
		const struct kvl_nic_info *info, struct kvl_pci_path *out, char *why,
		size_t whylen);

#define KVL_GPU_NOTE_LEN 128 /* fits a telemetry string (DPDK cuts them at 127) */

/* One NIC's GPU, as kvl_pair_gpus() chose it. */
struct kvl_gpu_pair {
	int gpu;			 /* index in kvl_gpu_scan() order; -1: none */
	char addr[KVL_PCI_ADDR_LEN];	 /* its PCI address; "" when none */
	char nic_addr[KVL_PCI_ADDR_LEN]; /* the NIC's PCI function; "" when it has none */
	int dist;			 /* enum kvl_pci_dist of this pair (KVL_PCI_NONE: none) */
	int best;			 /* the nearest class any GPU has from this NIC */
	bool from_conf;			 /* [nic.*] gpu chose it (an address, an index, none) */
	bool warn;			 /* SYS, or the INI chose farther than @best: log it */
	int cuda_device;		 /* filled by the runtime: CUDA index if opened, else -1 */
	char note[KVL_GPU_NOTE_LEN];	 /* why there is none, or what @warn is about */
};

/*
 * Pair each of @n NICs with a GPU: by [nic.*] gpu (auto | none | a PCI address | an index in
 * PCI-address order), auto meaning the nearest GPU (lowest class, ties to the lowest PCI
 * address; several NICs may share one). @where[i] locates NIC i's gpu key for messages
 * ("file.ini:12"; NULL: "nic.<label>" alone). Returns 0, or -ENODEV when a configured GPU is
 * not there, with "<where>: nic.<label>.gpu: ..." listing the GPUs found in @err.
 */
int kvl_pair_gpus(const char *sysfs_root, const struct kvl_nic_conf *nics,
		  const struct kvl_nic_info *infos, const char *const *where, unsigned n,
		  struct kvl_gpu_pair *out, char *err, size_t errlen);

/* ---- what the operators' checklists read (links.c; kvlane-doctor) ---- */

#define KVL_MAX_GIDS 256

/* One non-empty entry of a port's GID table, as `show_gids` prints it. */
struct kvl_gid_entry {
	int index;
	char gid[48];	 /* "fe80:0000:...", as sysfs writes it */
	int type;	 /* 0 InfiniBand, 1 RoCE v1, 2 RoCE v2, -1 unknown (as verbs_dev.c) */
	char netdev[32]; /* gid_attrs/ndevs/<i> ("" where unreadable: InfiniBand) */
	bool ipv4;	 /* ::ffff:a.b.c.d, the GID of an IPv4 address */
	char ipv4_addr[16];
};

/*
 * The non-empty GIDs of @dev port @port (ports/<p>/gids/<i>, gid_attrs/types/<i>,
 * gid_attrs/ndevs/<i>), lowest index first. Returns the count (up to @max) or a negative
 * errno (-ENOENT: no gids directory).
 */
int kvl_port_gids(const char *sysfs_root, const char *dev, unsigned port, struct kvl_gid_entry *out,
		  unsigned max);

/* A PCI function's link as it trained and as it could (current_link_* / max_link_*). */
struct kvl_pci_link {
	unsigned cur_width, max_width; /* lanes; 0 unknown */
	double cur_gts, max_gts;       /* GT/s per lane ("16.0 GT/s PCIe"); 0 unknown */
};

/* Read @addr's link under bus/pci/devices. 0, or -ENOENT when sysfs shows no link fields. */
int kvl_pci_link_read(const char *sysfs_root, const char *addr, struct kvl_pci_link *out);

/* Payload bandwidth of @lanes at @gts GT/s in Gb/s after line coding (8b/10b up to 5 GT/s,
 * 128b/130b from 8 GT/s), before TLP overhead. */
double kvl_pci_link_gbps(unsigned lanes, double gts);

/* A kernel module is loaded (or built in with parameters): <sysfs>/module/<name> exists. */
bool kvl_module_loaded(const char *sysfs_root, const char *name);

#endif /* KVL_LCORES_TOPO_H */
