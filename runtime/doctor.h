/* SPDX-License-Identifier: BSD-3-Clause */
/* kvlane-doctor: the operators' RDMA checklists as checks, each with a verdict and its fix. */
#ifndef KVL_RUNTIME_DOCTOR_H
#define KVL_RUNTIME_DOCTOR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "config.h"

/*
 * Pure C over a sysfs tree and a proc tree (no DPDK, verbs or CUDA), so the unit suite runs
 * every check on fixture hosts (tests/fixtures/sysfs/doctor-good, doctor-bad;
 * tests/fixtures/proc/). The facts come from lcores/topo/ (devices, ports, GIDs, PCI paths and
 * links, NUMA, GPU pairing) and runtime/pool.c (hugepages); this file only judges them.
 *
 * A FAIL is a condition under which kvlaned does not start or no transfer can succeed on
 * that NIC; `kvlaned --doctor` refuses to start on any FAIL. A WARN runs, but slower or
 * fragile (a PCIe link trained down, a GPU on the other socket, a RoCE v1 GID). SKIP: the
 * check does not apply (a tcp NIC has no GID table) or lacks its input (no --lcores).
 */

enum kvl_doc_verdict {
	KVL_DOC_PASS = 0,
	KVL_DOC_SKIP,
	KVL_DOC_WARN,
	KVL_DOC_FAIL,
};

#define KVL_DOC_MAX_ROWS 320
#define KVL_DOC_TEXT	 384

struct kvl_doc_row {
	char check[24];	   /* "port_state", "gid", ... (docs/doctor.md lists them) */
	char subject[112]; /* "host" or "nic.rail0 (mlx5_0)" */
	int verdict;	   /* enum kvl_doc_verdict */
	char observed[KVL_DOC_TEXT];
	char expected[KVL_DOC_TEXT];
	char fix[KVL_DOC_TEXT]; /* "" on PASS and SKIP */
};

struct kvl_doc_report {
	unsigned n;
	unsigned count[4]; /* by verdict */
	struct kvl_doc_row rows[KVL_DOC_MAX_ROWS];
};

/*
 * What CUDA says about the GPU kvlaned would open ([gpu] device_id), for the cuda_gpu check.
 * This file does not call CUDA: the caller fills it (kvl_doctor_probe_cuda, doctor_gpu.c,
 * through runtime/gpu.c's kvl_gpu_open, the start-up's own).
 */
struct kvl_doc_cuda {
	bool probed;
	bool required; /* [gpu] enable = true: a failure stops kvlaned */
	int rc;	       /* kvl_gpu_open's: 0 or a negative errno with @err */
	char err[320];
	int device_id;
	int device_count;
	char name[128];
	char pci[32];
	bool gpudirect_rdma; /* CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED */
	uint64_t total, free, reserve;
};

/*
 * Open the GPU as kvlaned would: when @cfg's [gpu] enable is true, or when @host_mode (no
 * INI) and sysfs under @sysfs_root shows an NVIDIA GPU (then device 0, no reserve). Leaves
 * @c->probed false when neither. Needs CUDA: link kvl_runtime_lib (gpu.c) with it.
 */
void kvl_doctor_probe_cuda(const struct kvl_config *cfg, bool host_mode, const char *sysfs_root,
			   struct kvl_doc_cuda *c);

/* The host's packet filter as text, for the firewall check: `iptables-save` and
 * `nft list ruleset` output ("" when that tool is absent or refused). */
struct kvl_doc_firewall {
	bool read; /* false: not asked for; the check is skipped */
	char iptables[16384];
	char nft[16384];
	char why[160]; /* why neither could be read */
};

/* Run iptables-save and nft list ruleset (as the caller's user: root reads them). */
void kvl_doctor_read_firewall(struct kvl_doc_firewall *f);

struct kvl_doc_opts {
	const char *sysfs_root; /* NULL: "/sys" */
	const char *proc_root;	/* NULL: "/proc" */
	/* The CPUs given to EAL, main lcore first ("0-3", as -l takes it); NULL: not known, the
	 * lcore checks are skipped. */
	const char *lcores;
	bool have_ini; /* false: @cfg's NICs are every RDMA device found (no -c given) */
	const struct kvl_doc_cuda *cuda; /* NULL: not probed (the unit tests fill their own) */
	const struct kvl_doc_firewall *firewall; /* NULL: not read */
};

/* Run every check on @cfg's NICs in the checklist's order. @r is filled; never fails. */
void kvl_doctor_run(const struct kvl_config *cfg, const struct kvl_doc_opts *o,
		    struct kvl_doc_report *r);

/*
 * A configuration naming each RDMA device under @sysfs_root as [nic.<dev>] with every other
 * key at its default: what kvlane-doctor checks without -c. Returns how many.
 */
unsigned kvl_doctor_host_config(const char *sysfs_root, struct kvl_config *cfg);

/* 0 all PASS (or SKIP), 1 a WARN, 2 a FAIL. */
int kvl_doctor_exit_code(const struct kvl_doc_report *r);

const char *kvl_doc_verdict_name(int v);

/* The table for people; @quiet prints only WARN and FAIL rows, then the totals. */
void kvl_doctor_print(FILE *fp, const struct kvl_doc_report *r, bool quiet);

/* One JSON object: {"checks": [...], "summary": {...}, "exit": N}. */
void kvl_doctor_print_json(FILE *fp, const struct kvl_doc_report *r);

/*
 * The CPUs EAL gets from @argv's -l / --lcores (a plain list such as "0-3" or "1,3,5"): 0
 * with the list copied to @out, -ENOENT when neither is given, -ENOTSUP for an lcore map
 * ("0@(0-1),1@1") or a -c mask, which the check does not read.
 */
int kvl_doctor_eal_lcores(int argc, char **argv, char *out, size_t cap);

/* ---- two ends (kvlane-doctor --peer; the DOCTOR control message) ---- */

struct kvl_ctrl_link;

/*
 * The link facts of @cfg's NICs under @sysfs_root, one per NIC (up to @max), as the DOCTOR
 * message carries them: transport, link layer, the GID kvlane uses (gid_index, or auto's
 * choice) and its type, the MTU its QPs get (min of the port's active MTU and the INI's), the
 * netdev MTU, the rate, the traffic class. Returns how many.
 */
unsigned kvl_doctor_links(const char *sysfs_root, const struct kvl_config *cfg,
			  struct kvl_ctrl_link *out, unsigned max);

/*
 * Compare this end's links with the peer's (@peer names it in the rows), NIC by NIC in INI
 * order: rows peer_link_layer, peer_gid_type, peer_mtu, peer_rate, peer_tclass (and
 * peer_nics when the counts differ) appended to @r.
 */
void kvl_doctor_compare(const struct kvl_ctrl_link *here, unsigned n_here,
			const struct kvl_ctrl_link *there, unsigned n_there, const char *peer,
			struct kvl_doc_report *r);

/*
 * The link test's row (link_test) appended to @r: @gbps (GB/s, 10^9 B) measured with
 * @msg_bytes messages against @rate_mbps, the slower port's rate (0: unknown, SKIP):
 * >= 80 % at >= 1 MiB is healthy; under 50 %: PCIe and NUMA first.
 */
void kvl_doctor_link_verdict(const char *subject, double gbps, uint64_t msg_bytes,
			     uint32_t rate_mbps, struct kvl_doc_report *r);

#endif /* KVL_RUNTIME_DOCTOR_H */
