/* SPDX-License-Identifier: BSD-3-Clause */
/* [cluster]: this node's registration in etcd, the cluster's view, and its thread. */
#ifndef KVL_RUNTIME_CLUSTER_H
#define KVL_RUNTIME_CLUSTER_H

#include <stddef.h>

struct kvl_runtime;

/*
 * After the control path is up (the record names its listener): start the cluster thread,
 * which grants a lease, publishes this node's record under it, keeps it alive, lists and
 * watches the prefix, and fails peers whose key goes (kvl_control_peer_gone). etcd being
 * unreachable is not an error here: the thread retries with backoff. 0 when [cluster] is off;
 * a negative errno with @err for what the INI alone cannot check (a wildcard control address
 * without [cluster] advertise, a password file that cannot be read, a build without libcurl).
 */
int kvl_cluster_start(struct kvl_runtime *rt, char *err, size_t errlen);

/* Delete this node's key and revoke its lease (bounded by request_timeout_ms), stop the
 * thread. Nothing when [cluster] is off. */
void kvl_cluster_stop(struct kvl_runtime *rt);

#endif /* KVL_RUNTIME_CLUSTER_H */
