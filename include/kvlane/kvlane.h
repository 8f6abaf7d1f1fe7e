/* SPDX-License-Identifier: BSD-3-Clause */
/* kvlane public C API: the only header an inference engine includes. */
#ifndef KVLANE_H
#define KVLANE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define KVLANE_VERSION_MAJOR 0
#define KVLANE_VERSION_MINOR 1
#define KVLANE_VERSION_PATCH 0

/* Encoded as (major << 16) | (minor << 8) | patch, for compile-time checks. */
#define KVLANE_VERSION_NUM \
	((KVLANE_VERSION_MAJOR << 16) | (KVLANE_VERSION_MINOR << 8) | KVLANE_VERSION_PATCH)

/*
 * Typed completion status of a transfer. Every transfer completes exactly once, with one of
 * these; none of them stops the process.
 */
enum kvl_status {
	KVL_OK = 0,
	KVL_ERR_BOUNDS = 1,	/* remote offset + length outside the remote segment */
	KVL_ERR_NO_SEGMENT = 2, /* the remote segment id is not registered there */
	KVL_ERR_ACCESS = 3,	/* the remote segment does not allow this operation */
	KVL_ERR_LOCAL = 4,	/* the local range is not inside a registered local segment */
	KVL_ERR_CONN_LOST = 5,	/* the data connection broke while the transfer was in flight */
	KVL_ERR_PEER_DEAD = 6,	/* the peer missed heartbeats for [control] peer_timeout_ms */
	KVL_ERR_PROTOCOL = 7,	/* the peer sent something malformed; its connection was closed */
	KVL_ERR_CANCELED = 8,	/* the runtime stopped before the transfer finished */
	KVL_ERR_TOO_LARGE = 9,	/* longer than the transport's largest message */
	KVL_ERR_NO_PEER = 10,	/* unknown peer handle, or the peer is not connected */
	KVL_STATUS_COUNT
};

/* "ok", "bounds", "no-segment", ... (stable names, used in telemetry too). */
const char *kvl_status_name(int status);

#ifdef __cplusplus
}
#endif

#endif /* KVLANE_H */
