/* SPDX-License-Identifier: BSD-3-Clause */
/* The READs of a copy-engine transport (the host tier, ipc) from their post to their end. */
#ifndef KVL_XPORT_TREQ_H
#define KVL_XPORT_TREQ_H

#include <stdint.h>

#include "xport.h"

/* One READ taken by the transport: it ends once each of its engine requests has (left 0). */
struct kvl_treq {
	uint64_t wr_id;
	uint32_t len;
	uint16_t left; /* engine requests not completed yet */
	int32_t status;
};

/*
 * The completions of the ring [*head, tail), in posting order (the engine completes in order
 * too, so the first READ with copies left ends the pass): at most @max into @wc, *head moved
 * past them. Returns how many; *ok and *bytes count those that ended OK.
 */
static inline unsigned kvl_treq_reap(const struct kvl_treq *ring, uint32_t mask, uint32_t *head,
				     uint32_t tail, struct kvl_wc *wc, unsigned max, uint64_t *ok,
				     uint64_t *bytes)
{
	unsigned n = 0;

	while (n < max && *head != tail) {
		const struct kvl_treq *r = &ring[*head & mask];

		if (r->left != 0)
			break;
		wc[n++] = (struct kvl_wc){ .wr_id = r->wr_id,
					   .bytes = r->status == KVL_OK ? r->len : 0,
					   .status = r->status };
		if (r->status == KVL_OK) {
			(*ok)++;
			*bytes += r->len;
		}
		(*head)++;
	}
	return n;
}

#endif /* KVL_XPORT_TREQ_H */
