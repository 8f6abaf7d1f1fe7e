/* SPDX-License-Identifier: BSD-3-Clause */
/* A node's record under the cluster prefix: what it publishes in etcd, as JSON (jansson). */
#ifndef KVL_RUNTIME_CLUSTER_REC_H
#define KVL_RUNTIME_CLUSTER_REC_H

#include <stddef.h>
#include <stdint.h>

/*
 * Pure C over jansson (no EAL): the runtime (runtime/cluster.c), the load tool and the unit
 * test share it. The record says how to reach a node and what it offers; it never carries
 * the shared secret or an rkey (those travel only over the authenticated control path).
 */

#define KVL_CLUSTER_REC_VERSION 1
#define KVL_CLUSTER_RECORD_MAX	16384 /* bytes of JSON: larger records are refused/skipped */
#define KVL_CLUSTER_REC_NICS	16
#define KVL_CLUSTER_REC_GPUS	8
#define KVL_CLUSTER_REC_SEGS	32

struct kvl_cluster_rec_nic {
	char label[32];
	char device[64];
	char transport[16];  /* tcp, verbs, mlx5 */
	char link_layer[16]; /* Ethernet, InfiniBand; "" for a netdev */
	char gid[40];	     /* RDMA: the GID in use, fe80:0000:...; "" otherwise */
	uint32_t lid;
	uint32_t rate_mbps;
	int32_t numa_node;
};

struct kvl_cluster_rec_gpu {
	int32_t index;
	char pci[32];
};

struct kvl_cluster_rec_seg {
	uint32_t id;
	char name[64];
	uint32_t layers, planes, blocks, block_bytes;
	uint64_t length;
	char access[12]; /* read, write, readwrite */
};

struct kvl_cluster_rec {
	uint32_t version;   /* KVL_CLUSTER_REC_VERSION */
	uint32_t proto;	    /* the control protocol's version (ctrl_proto.h) */
	char name[64];	    /* [cluster] name: the key's last part */
	char peer_name[64]; /* [runtime] name: what the node says in its handshake */
	int32_t role;	    /* enum kvl_cluster_role (config.h) */
	char control[80];   /* host:port of its [control] listener */
	char host[64];	    /* its host name, for operators */
	struct kvl_cluster_rec_nic nic[KVL_CLUSTER_REC_NICS];
	uint32_t n_nics;
	struct kvl_cluster_rec_gpu gpu[KVL_CLUSTER_REC_GPUS];
	uint32_t n_gpus;
	struct kvl_cluster_rec_seg seg[KVL_CLUSTER_REC_SEGS];
	uint32_t n_segs;
};

/* JSON of @r into @out (NUL-terminated): its length, or -EMSGSIZE over @cap or
 * KVL_CLUSTER_RECORD_MAX, -ENOMEM. */
int kvl_cluster_rec_encode(const struct kvl_cluster_rec *r, char *out, size_t cap);

/* Parse @len bytes of someone's record: 0, -EMSGSIZE (over KVL_CLUSTER_RECORD_MAX) or
 * -EINVAL, with what was wrong in @why ("role: expected prefill, decode or tier"). */
int kvl_cluster_rec_decode(const char *s, size_t len, struct kvl_cluster_rec *r, char *why,
			   size_t whylen);

/* "prefill", "decode", "tier" -> enum kvl_cluster_role; -1 for anything else. */
int kvl_cluster_role_parse(const char *s);

#endif /* KVL_RUNTIME_CLUSTER_REC_H */
