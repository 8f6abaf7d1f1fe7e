/* SPDX-License-Identifier: BSD-3-Clause */
/* Inside sched/ only: the staging slot allocator and the pool range allocator. */
#ifndef KVL_SCHED_PRIV_H
#define KVL_SCHED_PRIV_H

#include <stdbool.h>
#include <stdint.h>

#define KVL_NONE UINT32_MAX

/*
 * Staging slots: a two-level bitmap (1 = free). The summary level says which words still have
 * a free slot, so finding one costs a few word scans even over a million slots.
 */
struct kvl_slots {
	uint64_t *word;
	uint64_t *sum;
	uint32_t n;
	uint32_t nwords;
	uint32_t nsum;
	uint32_t nfree;
	uint32_t cursor; /* summary word where the last search succeeded: next fit */
};

int kvl_slots_init(struct kvl_slots *sl, uint32_t n);
void kvl_slots_fini(struct kvl_slots *sl);
uint32_t kvl_slots_get_any(struct kvl_slots *sl);

static inline bool kvl_slots_is_free(const struct kvl_slots *sl, uint32_t i)
{
	return i < sl->n && (sl->word[i >> 6] >> (i & 63) & 1);
}

/* Take slot @i, which must be free. */
static inline void kvl_slots_take(struct kvl_slots *sl, uint32_t i)
{
	uint32_t w = i >> 6;

	sl->word[w] &= ~(1ull << (i & 63));
	if (sl->word[w] == 0)
		sl->sum[w >> 6] &= ~(1ull << (w & 63));
	sl->nfree--;
}

/* Mark slot @i free in the two levels; the caller counts it in nfree (a loop that frees many
 * keeps @word and @sum in registers and adds to nfree once). */
static inline void kvl_slots_set(uint64_t *word, uint64_t *sum, uint32_t i)
{
	uint32_t w = i >> 6;

	word[w] |= 1ull << (i & 63);
	sum[w >> 6] |= 1ull << (w & 63);
}

/* Give slot @i back (inline: one per PULL block freed). */
static inline void kvl_slots_put(struct kvl_slots *sl, uint32_t i)
{
	kvl_slots_set(sl->word, sl->sum, i);
	sl->nfree++;
}

/*
 * Contiguous index ranges out of a pool of `total` entries (a request's blocks, steps, step
 * references): first fit over a sorted array of free extents. Outstanding ranges are at most
 * max_requests, so there are at most max_requests + 1 free extents: the array never grows.
 * Costs O(extents) per request, never per descriptor.
 */
struct kvl_range {
	uint32_t start;
	uint32_t len;
};

struct kvl_ranges {
	struct kvl_range *ext;
	uint32_t n;
	uint32_t cap;
	uint32_t total;
	uint32_t nfree;
};

int kvl_ranges_init(struct kvl_ranges *r, uint32_t total, uint32_t max_ranges);
void kvl_ranges_fini(struct kvl_ranges *r);
/* Start of @len free entries, or KVL_NONE. @len 0 gives KVL_NONE too. */
uint32_t kvl_ranges_get(struct kvl_ranges *r, uint32_t len);
void kvl_ranges_put(struct kvl_ranges *r, uint32_t start, uint32_t len);

#endif /* KVL_SCHED_PRIV_H */
