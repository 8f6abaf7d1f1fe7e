/* SPDX-License-Identifier: BSD-3-Clause */
/* Names of the transfer statuses (enum kvl_status), for logs, telemetry and callers. */
#include "kvlane/kvlane.h"

static const char *const status_names[KVL_STATUS_COUNT] = {
	[KVL_OK] = "ok",
	[KVL_ERR_BOUNDS] = "bounds",
	[KVL_ERR_NO_SEGMENT] = "no-segment",
	[KVL_ERR_ACCESS] = "access",
	[KVL_ERR_LOCAL] = "local",
	[KVL_ERR_CONN_LOST] = "conn-lost",
	[KVL_ERR_PEER_DEAD] = "peer-dead",
	[KVL_ERR_PROTOCOL] = "protocol",
	[KVL_ERR_CANCELED] = "canceled",
	[KVL_ERR_TOO_LARGE] = "too-large",
	[KVL_ERR_NO_PEER] = "no-peer",
	[KVL_ERR_GPU_MEMORY] = "gpu-memory",
};

const char *kvl_status_name(int status)
{
	return status >= 0 && status < KVL_STATUS_COUNT ? status_names[status] : "?";
}
