/* SPDX-License-Identifier: BSD-3-Clause */
/* The control thread as the runtime calls it: start, stop, connect, its address and counters. */
/* One thread authenticates peers, exchanges metadata, binds data connections, sends
 * heartbeats and declares peers dead (runtime/control/). */
#ifndef KVL_RUNTIME_CONTROL_H
#define KVL_RUNTIME_CONTROL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct kvl_runtime;

/* Start the control thread (when [control] secret_file is set): listeners, data listeners,
 * the configured peers. Returns 0, or a negative errno with a message in @err. */
int kvl_control_start(struct kvl_runtime *rt, char *err, size_t errlen);

/* Stop the thread and close every control socket (data connections belong to lcores). */
void kvl_control_stop(struct kvl_runtime *rt);

/* Connect to @addr and wait until the peer is READY or failed, at most @timeout_ms.
 * Returns 0 with *@peer set, or a negative errno with a message in @err. */
int kvl_control_connect(struct kvl_runtime *rt, const char *addr, unsigned timeout_ms,
			uint32_t *peer, char *err, size_t errlen);

/*
 * The cluster's watch saw the node at control endpoint @addr, whose handshake name is @name,
 * leave (its key deleted or its lease expired): fail it at once, with its transfers, as a
 * missed heartbeat does (KVL_ERR_PEER_DEAD), with @why in its failure. A peer we connected
 * to matches by @addr; one that connected to us by @name and the host part of @addr. Never
 * blocks on the control thread. 0, -ENOTSUP without a control path, -ENOBUFS when too many
 * wait (the heartbeat timeout still catches those).
 */
int kvl_control_peer_gone(struct kvl_runtime *rt, const char *addr, const char *name,
			  const char *why);
struct kvl_ctrl_link;

/* kvlane-doctor --peer: send this end's link facts to READY peer @peer and wait (at most
 * @timeout_ms) for its own, copied to @theirs (up to @max, the count in *@n). The peer logs
 * what differs on its side. 0, or a negative errno with a message in @err. */
int kvl_control_doctor(struct kvl_runtime *rt, uint32_t peer, unsigned timeout_ms,
		       struct kvl_ctrl_link *theirs, unsigned max, unsigned *n, char *err,
		       size_t errlen);

/* Tell peers that the local segment list changed. */
void kvl_control_segments_changed(struct kvl_runtime *rt);

/* Whether it runs, its listener address and counters, for the API and telemetry. */
bool kvl_control_enabled(const struct kvl_runtime *rt);
const char *kvl_control_listen_addr(const struct kvl_runtime *rt); /* "host:port" bound */
uint64_t kvl_control_auth_failures(const struct kvl_runtime *rt);
uint64_t kvl_control_preauth_evicted(const struct kvl_runtime *rt);
uint64_t kvl_control_data_preauth_evicted(const struct kvl_runtime *rt);
/* [control] tls = on: TLS handshakes that failed (strangers, a tls mismatch, another secret). */
uint64_t kvl_control_tls_failures(const struct kvl_runtime *rt);
/* REQ_CANCEL messages sent for this side's canceled requests, and received from peers. */
void kvl_control_req_cancels(const struct kvl_runtime *rt, uint64_t *tx, uint64_t *rx);

#endif /* KVL_RUNTIME_CONTROL_H */
