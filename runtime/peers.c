/* SPDX-License-Identifier: BSD-3-Clause */
/* The peer table: lookups for its readers, and the names of a peer's states. */
#include <stdio.h>

#include "peers.h"

static const char *const state_names[] = { "free",    "connecting", "handshake", "exchange",
					   "binding", "ready",	    "dead" };

const char *kvl_peer_state_name(int s)
{
	return s >= 0 && s <= KVL_PEER_DEAD ? state_names[s] : "?";
}

struct kvl_peer_pub *kvl_peer_get(struct kvl_peer_table *t, uint32_t peer)
{
	if (!__atomic_load_n(&t->on, __ATOMIC_ACQUIRE) || peer >= KVL_MAX_PEERS_RT)
		return NULL;
	return &t->pub[peer];
}

struct kvl_peer_pub *kvl_peer_ready(struct kvl_peer_table *t, uint32_t peer)
{
	struct kvl_peer_pub *pub = kvl_peer_get(t, peer);

	if (pub == NULL || __atomic_load_n(&pub->state, __ATOMIC_ACQUIRE) != KVL_PEER_READY)
		return NULL;
	return pub;
}

void kvl_peer_seg_out(const struct kvl_seg_desc *d, uint32_t access, struct kvl_remote_seg *out)
{
	*out = (struct kvl_remote_seg){ .id = d->id,
					.access = access,
					.length = d->length,
					.geom = { .layers = d->n_layers,
						  .planes = d->n_planes,
						  .blocks = d->block_count,
						  .block_bytes = d->block_size } };
	snprintf(out->name, sizeof(out->name), "%s", d->name);
}
