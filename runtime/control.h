/* SPDX-License-Identifier: BSD-3-Clause */
/* The control path: one thread that authenticates peers, exchanges metadata, binds data
 * connections, sends heartbeats and declares peers dead. */
#ifndef KVL_RUNTIME_CONTROL_H
#define KVL_RUNTIME_CONTROL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <rte_spinlock.h>

#include "ctrl_proto.h"
#include "nic_io.h"

struct kvl_runtime;

enum kvl_peer_state {
	KVL_PEER_FREE = 0,
	KVL_PEER_CONNECTING, /* client: TCP connect in progress */
	KVL_PEER_HANDSHAKE,  /* HELLO / CHALLENGE / AUTH in progress */
	KVL_PEER_EXCHANGE,   /* authenticated: waiting for the peer's SEGMENTS and ENDPOINTS */
	KVL_PEER_BINDING,    /* client: opening and binding data connections */
	KVL_PEER_READY,	     /* transfers may be posted */
	KVL_PEER_DEAD,	     /* failed or closed; kept for telemetry until the slot is reused */
};

const char *kvl_peer_state_name(int s);

#define KVL_PEER_MAX_CONNS 32

/* A data connection of a peer, as the API routes to it. */
struct kvl_peer_conn {
	uint16_t nic;
	uint16_t slot;
	uint32_t gen;
};

/* What the API and telemetry may read of a peer; guarded by @lock. */
struct kvl_peer_pub {
	rte_spinlock_t lock;
	int state; /* also read without the lock (atomic) */
	uint32_t gen;
	bool initiator;
	char addr[KVL_CTRL_ADDR_LEN];
	char name[KVL_CTRL_NAME_LEN];
	struct kvl_peer_conn conn[KVL_PEER_MAX_CONNS];
	uint32_t n_conns;
	uint32_t rr;
	struct kvl_seg_desc seg[KVL_CTRL_MAX_SEGS];
	uint32_t n_segs;
	uint64_t last_rx_ns;
	uint64_t rtt_us;
	uint64_t heartbeats_rx;
	int fail_status;
	char fail_msg[KVL_CTRL_TEXT_LEN];
	struct kvl_tcp_stats base; /* counters of earlier peers of this slot: subtracted */
};

/* Start the control thread (when [control] secret_file is set): listeners, data listeners,
 * the configured peers. Returns 0, or a negative errno with a message in @err. */
int kvl_control_start(struct kvl_runtime *rt, char *err, size_t errlen);

/* Stop the thread and close every control socket (data connections belong to lcores). */
void kvl_control_stop(struct kvl_runtime *rt);

/* Connect to @addr and wait until the peer is READY or failed, at most @timeout_ms.
 * Returns 0 with *@peer set, or a negative errno with a message in @err. */
int kvl_control_connect(struct kvl_runtime *rt, const char *addr, unsigned timeout_ms,
			uint32_t *peer, char *err, size_t errlen);

/* Tell peers that the local segment list changed. */
void kvl_control_segments_changed(struct kvl_runtime *rt);

/* Peer table and listener addresses, for the API and telemetry. */
struct kvl_peer_pub *kvl_control_peer(struct kvl_runtime *rt, uint32_t peer);
bool kvl_control_enabled(const struct kvl_runtime *rt);
const char *kvl_control_listen_addr(const struct kvl_runtime *rt); /* "host:port" bound */
uint64_t kvl_control_auth_failures(const struct kvl_runtime *rt);
uint64_t kvl_control_preauth_evicted(const struct kvl_runtime *rt);
/* REQ_CANCEL messages sent for this side's canceled requests, and received from peers. */
void kvl_control_req_cancels(const struct kvl_runtime *rt, uint64_t *tx, uint64_t *rx);

#endif /* KVL_RUNTIME_CONTROL_H */
