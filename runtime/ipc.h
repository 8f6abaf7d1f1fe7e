/* SPDX-License-Identifier: BSD-3-Clause */
/* Same-host peers (issue 20): this host's identity, GPU segment export, ipc connections. */
#ifndef KVL_RUNTIME_IPC_H
#define KVL_RUNTIME_IPC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ctrl_proto.h"
#include "xport.h"
#include "xport_ipc.h"

struct kvl_runtime;

/*
 * This host's identity: SHA-256 over a label, /etc/machine-id and the kernel's boot_id (a
 * reboot is another host: handles of the old boot mean nothing). Not a secret, and never
 * trusted alone: a peer claiming our id is only given handles, which open nowhere else, and
 * only after the control path authenticated it. KVLANE_TEST_HOST_ID (tests) replaces the
 * machine id, to play another host on this one. 0, or -errno with why (neither file
 * readable: the id is all zeros, which matches no one).
 */
int kvl_host_id(uint8_t out[KVL_HOST_ID_LEN], char *err, size_t errlen);

/* Whether @id could be a host's (not all zeros). Inline: the fuzz target, which stubs the rest
 * of this file, takes the same rule. */
static inline bool kvl_host_id_valid(const uint8_t id[KVL_HOST_ID_LEN])
{
	for (unsigned i = 0; i < KVL_HOST_ID_LEN; i++)
		if (id[i] != 0)
			return true;
	return false;
}

/*
 * The GPU segments peers may READ, as IPC_SEGS entries: each one's handle of its allocation's
 * base (cuMemGetAddressRange + cuIpcGetMemHandle) and its offset there, its GPU's UUID, and
 * @gen (the runtime's incarnation: segment ids are never reused within it). A segment whose
 * memory cannot be exported (not cudaMalloc'd, e.g. VMM or managed) is left out and named in
 * @why. Returns how many (0 without CUDA or GPU segments).
 */
int kvl_ipc_export(struct kvl_runtime *rt, uint32_t gen, struct kvl_ctrl_ipc_seg *out, unsigned max,
		   char *why, size_t whylen);

/* NIC @nic's GPU against a peer GPU's @uuid: 1 the same device or peer access, 0 none, -1 no
 * device here has that UUID; -2 NIC @nic has no GPU (VRAM staging off) with why. */
int kvl_ipc_access(struct kvl_runtime *rt, unsigned nic, const uint8_t uuid[KVL_GPU_UUID_LEN],
		   char *why, size_t whylen);

/* An ipc connection for NIC @nic's lcore reading @n exported segments: the copy engine on the
 * NIC's GPU into its VRAM staging and this runtime's GPU segments there. 0 with *@out, or
 * -errno with why. */
int kvl_ipc_conn_open(struct kvl_runtime *rt, unsigned nic, const struct kvl_ipc_rseg *segs,
		      unsigned n, struct kvl_xconn *out, char *err, size_t errlen);

/* The same without a runtime (kvlane-ipc-bench): the copy engine on CUDA device @device into
 * @staging (may be NULL) and, when @tab is given, the GPU segments of that table; @eo: the copy
 * engine's options (NULL: what the runtime uses, see ipc.c; device and depth are set here). */
struct kvl_seg_table;
struct kvl_cudma_opts;
int kvl_ipc_conn_cuda(int device, void *staging, uint64_t staging_len,
		      const struct kvl_seg_table *tab, const struct kvl_ipc_rseg *segs, unsigned n,
		      const struct kvl_cudma_opts *eo, struct kvl_xconn *out, char *err,
		      size_t errlen);

#endif /* KVL_RUNTIME_IPC_H */
