/* SPDX-License-Identifier: BSD-3-Clause */
/* A fake libibverbs + libmlx5 whose data path is a software mlx5 NIC running in its own thread. */
#ifndef KVL_TEST_FAKE_NIC_H
#define KVL_TEST_FAKE_NIC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/*
 * fake_verbs.c defines the exported libibverbs / libmlx5 functions that lcores/xport/verbs_*.c and
 * lcores/xport/mlx5/mlx5_setup.c call; a test binary links it instead of -libverbs -lmlx5 (it uses
 * their headers only). Two devices, mlx5_0 and mlx5_1, one RoCE v2 port each (ACTIVE, MTU
 * 4096), GIDs as a ConnectX with one IPv4 address shows them:
 *   [0] fe80::... RoCE v1, [1] fe80::... RoCE v2, [2] ::ffff:10.77.0.N RoCE v1,
 *   [3] ::ffff:10.77.0.N RoCE v2   (N = 1 for mlx5_0, 2 for mlx5_1)
 *
 * The NIC (a thread started with the first open device) plays both ends of every QP:
 *  - send queues as the PRM lays them out, read through mlx5dv_init_obj: it executes the
 *    WQEs the doorbell record announces (word 1, big-endian WQEBB counter), every field
 *    of the ctrl / raddr / data segments checked; RDMA WRITE, WRITE_WITH_IMM, READ;
 *  - lkeys (LOCAL_PROT) and rkeys (REMOTE_ACCESS, on the responder's device) with bounds and
 *    access flags; bytes moved between the two in-process regions;
 *  - RC state: RESET/INIT/RTR/RTS/ERR transitions checked; one PSN per WQE; a WQE runs only
 *    when the requester's PSN is the responder's expected PSN and the responder is in
 *    RTR/RTS; a PSN behind (a duplicate) is acknowledged and dropped (dup_dropped: the
 *    silent loss resync exists to prevent); a responder in RESET/INIT/ERR or a PSN ahead:
 *    retried, then TRANSPORT_RETRY (retry_cnt of the QP);
 *  - CQEs of 64 bytes with owner bits on every CQ (the receive CQ too: ibv_poll_cq decodes
 *    them as rdma-core's mlx5 provider does); error CQE then QP in ERR and flush CQEs;
 *    receives consumed by WRITE_WITH_IMM (RNR when none: rnr_retry, 7 = for ever);
 *  - ibv_modify_qp(RESET) cleans the QP's CQEs from its CQs except those that
 *    mlx5dv_init_obj handed out (DV-owned), as rdma-core does.
 * Verbs as a ConnectX offers them where verbs_*.c look: ibv_query_device_ex with CQ moderation
 * caps (ibv_modify_cq takes count and period, events are not coalesced), ibv_create_cq_ex
 * with start/next/end_poll and read_* for the receive CQ, ibv_create_qp for the PD-only
 * mask of the direct backend; registration under the kernel's RLIMIT_MEMLOCK rule (past the
 * limit only with CAP_IPC_LOCK). GID table of 256 entries (gid_tbl_len of a ConnectX port).
 *
 * What the NIC cannot do: see a store to the doorbell register (UAR) from another thread;
 * the single-threaded model (mlx5_model.c) checks those bytes instead. Not modelled: the
 * ibv_wr_* API (create_qp_ex with send ops: a verbs-backend connection is refused
 * EOPNOTSUPP), SENDs, atomics, inline data, arming a CQ read through mlx5dv, ACK timeouts
 * in real time (a retry every fake_nic_retry_interval_us), packets on a wire (a WQE runs
 * whole, at once), memory windows.
 */

#define FAKE_NIC_FAIL_LEN 512

struct fake_nic_stats {
	uint64_t wqes, bytes, cqes, req_cqes, err_cqes, flush_cqes, recv_cqes, recv_flushes;
	uint64_t dup_dropped;	      /* duplicates acknowledged without executing: must be 0 */
	uint64_t retries, rnr_naks;   /* retransmissions modelled */
	uint64_t cq_overruns;	      /* CQEs with no free slot (not written): must be 0 */
	uint64_t resets, cq_cleaned;  /* QPs reset, CQEs removed from verbs CQs by a reset */
	uint64_t events;	      /* completion events raised */
	uint64_t arm_doorbells;	      /* arms rung on DV CQs' UAR doorbells */
	uint64_t stale_arms;	      /* of those, with an old sequence number: ignored */
	uint64_t dv_cqs_moderated;    /* ibv_modify_cq on CQs read through mlx5dv */
	uint64_t last_syndrome;	      /* of the newest error CQE that was not a flush */
	uint64_t scattered_cqes;      /* READs completed with their data in the CQE */
	char fail[FAKE_NIC_FAIL_LEN]; /* the first thing a real NIC would choke on; "" if none */
};

/* A copy of the counters, taken under the NIC's lock. */
void fake_nic_stats(struct fake_nic_stats *out);

/* Knobs (set before traffic): flush CQEs only for signaled WQEs (default: for every WQE);
 * the interval between retransmissions of a WQE the responder did not take. */
void fake_nic_flush_signaled_only(bool on);
/* Wedge the NIC (as soft-RoCE under load was seen to): QPs in RTS keep the WQEs they are
 * given, with no completion, error or retransmission, until any QP is moved to ERR. */
void fake_nic_wedge(bool on);
void fake_nic_retry_interval_us(unsigned us);
/* The CQE size mlx5dv_init_obj reports from now on (as rdma-core with MLX5_CQE_SIZE=128 set):
 * the fast path must refuse it. 0: back to 64. No CQE is ever written at that size. */
void fake_nic_cqe_size(unsigned bytes);

/*
 * Requester scatter to CQE (a signaled READ of <= 32 bytes completes with its data inside the
 * CQE, op_own bit 2, and the local buffer is not written) on QPs created from now on:
 * 0 as the kernel configures it (only QPs with sq_sig_all, or created through
 * mlx5dv_create_qp with MLX5DV_QP_CREATE_ALLOW_SCATTER_TO_CQE); 1 on every QP that does not
 * disable it (MLX5DV_QP_CREATE_DISABLE_SCATTER_TO_CQE); 2 on every QP, the flag ignored (a
 * CQE the direct poller must refuse to read as a plain success). mlx5dv_init_obj records a
 * failure for a QP not created with the flag.
 */
void fake_nic_scatter_to_cqe(int mode);

/* Record @fmt as a failure (the first one is kept): for the test's own checks of the fake. */
void fake_nic_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* A sysfs tree for both devices' gid_attrs (types, ndevs) under a new temporary folder, for
 * kvl_verbs_dev_opts.sysfs_root. Returns 0 and the folder in @root, or -errno. */
int fake_nic_make_sysfs(char *root, size_t cap);
void fake_nic_rm_sysfs(const char *root);

/* The GID of @dev ("mlx5_0"/"mlx5_1") at @index, 16 bytes; false if none. */
bool fake_nic_gid(const char *dev, int index, uint8_t gid[16]);

#define FAKE_NIC_GID_V2 3 /* the RoCE v2 IPv4 entry of each device */

#endif /* KVL_TEST_FAKE_NIC_H */
