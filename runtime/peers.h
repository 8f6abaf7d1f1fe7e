/* SPDX-License-Identifier: BSD-3-Clause */
/* The peer table: each peer's state, routes and segments (the control thread writes it). */
#ifndef KVL_RUNTIME_PEERS_H
#define KVL_RUNTIME_PEERS_H

#include <stdbool.h>
#include <stdint.h>

#include <rte_spinlock.h>

#include "config.h"
#include "kvlane/kvlane.h"
#include "ctrl_proto.h"
#include "nic_io.h"

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
_Static_assert(KVL_PEER_MAX_CONNS == KVL_CONF_MAX_PEER_CONNS, "the INI checks qp_count by it");

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
	struct kvl_xport_stats base; /* counters of earlier peers of this slot: subtracted */
	/* issue 20 (runtime/control/ipc.c): -1 not known (an older peer, or no HOST yet), 0
	 * another host, 1 this host; whether its READs go over ipc here, else why not */
	int8_t same_host;
	bool ipc;
	uint32_t ipc_segs; /* GPU segments it exported to us */
	char ipc_why[KVL_CTRL_TEXT_LEN];
};

/*
 * One slot per peer the runtime knows (KVL_MAX_PEERS_RT). The control thread owns the slots
 * and writes them; the C API, the request path and telemetry read them (@lock, or the state
 * alone with an acquire load).
 */
struct kvl_peer_table {
	bool on; /* the control path runs: without it there are no peers */
	struct kvl_peer_pub pub[KVL_MAX_PEERS_RT];
};

/* Slot @peer, or NULL when the control path is off or @peer is out of range. */
struct kvl_peer_pub *kvl_peer_get(struct kvl_peer_table *t, uint32_t peer);

/* Slot @peer when transfers may be posted to it (READY), else NULL. */
struct kvl_peer_pub *kvl_peer_ready(struct kvl_peer_table *t, uint32_t peer);

/* What kvl_peer_segments() shows of segment @d, for a remote peer's segments and this host's
 * tier's alike (runtime/tier.c): @access is what a request may do with it. */
void kvl_peer_seg_out(const struct kvl_seg_desc *d, uint32_t access, struct kvl_remote_seg *out);

#endif /* KVL_RUNTIME_PEERS_H */
