/* SPDX-License-Identifier: BSD-3-Clause */
/* Allocators of the scheduler: staging slots (a bitmap) and pool ranges (free extents). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "sched_priv.h"

int kvl_slots_init(struct kvl_slots *sl, uint32_t n)
{
	memset(sl, 0, sizeof(*sl));
	if (n == 0)
		return -EINVAL;
	sl->n = n;
	sl->nwords = (n + 63) / 64;
	sl->nsum = (sl->nwords + 63) / 64;
	sl->word = calloc(sl->nwords, sizeof(*sl->word));
	sl->sum = calloc(sl->nsum, sizeof(*sl->sum));
	if (sl->word == NULL || sl->sum == NULL) {
		kvl_slots_fini(sl);
		return -ENOMEM;
	}
	for (uint32_t i = 0; i < sl->nwords; i++) {
		/* Bits past n stay 0 so they are never handed out. */
		uint32_t left = n - i * 64;

		sl->word[i] = left >= 64 ? ~0ull : (1ull << left) - 1;
		sl->sum[i >> 6] |= 1ull << (i & 63);
	}
	sl->nfree = n;
	return 0;
}

void kvl_slots_fini(struct kvl_slots *sl)
{
	free(sl->word);
	free(sl->sum);
	sl->word = sl->sum = NULL;
}

uint32_t kvl_slots_get_any(struct kvl_slots *sl)
{
	if (sl->nfree == 0)
		return KVL_NONE;
	for (uint32_t k = 0; k < sl->nsum; k++) {
		uint32_t s = sl->cursor + k;

		if (s >= sl->nsum)
			s -= sl->nsum;
		if (sl->sum[s] == 0)
			continue;
		uint32_t w = s * 64 + (uint32_t)__builtin_ctzll(sl->sum[s]);
		uint32_t i = w * 64 + (uint32_t)__builtin_ctzll(sl->word[w]);

		sl->cursor = s;
		kvl_slots_take(sl, i);
		return i;
	}
	return KVL_NONE; /* unreachable while nfree is right */
}

int kvl_ranges_init(struct kvl_ranges *r, uint32_t total, uint32_t max_ranges)
{
	memset(r, 0, sizeof(*r));
	r->cap = max_ranges + 1;
	r->ext = calloc(r->cap, sizeof(*r->ext));
	if (r->ext == NULL)
		return -ENOMEM;
	r->total = r->nfree = total;
	if (total) {
		r->ext[0] = (struct kvl_range){ 0, total };
		r->n = 1;
	}
	return 0;
}

void kvl_ranges_fini(struct kvl_ranges *r)
{
	free(r->ext);
	r->ext = NULL;
}

uint32_t kvl_ranges_get(struct kvl_ranges *r, uint32_t len)
{
	if (len == 0 || len > r->nfree)
		return KVL_NONE;
	for (uint32_t i = 0; i < r->n; i++) {
		if (r->ext[i].len < len)
			continue;
		uint32_t start = r->ext[i].start;

		r->ext[i].start += len;
		r->ext[i].len -= len;
		if (r->ext[i].len == 0) {
			memmove(&r->ext[i], &r->ext[i + 1], (r->n - i - 1) * sizeof(*r->ext));
			r->n--;
		}
		r->nfree -= len;
		return start;
	}
	return KVL_NONE;
}

void kvl_ranges_put(struct kvl_ranges *r, uint32_t start, uint32_t len)
{
	uint32_t lo = 0, hi = r->n;

	if (len == 0)
		return;
	while (lo < hi) { /* first extent starting after @start */
		uint32_t mid = (lo + hi) / 2;

		if (r->ext[mid].start < start)
			lo = mid + 1;
		else
			hi = mid;
	}
	bool join_prev = lo > 0 && r->ext[lo - 1].start + r->ext[lo - 1].len == start;
	bool join_next = lo < r->n && start + len == r->ext[lo].start;

	if (join_prev && join_next) {
		r->ext[lo - 1].len += len + r->ext[lo].len;
		memmove(&r->ext[lo], &r->ext[lo + 1], (r->n - lo - 1) * sizeof(*r->ext));
		r->n--;
	} else if (join_prev) {
		r->ext[lo - 1].len += len;
	} else if (join_next) {
		r->ext[lo].start = start;
		r->ext[lo].len += len;
	} else {
		/* cap = outstanding ranges + 1 bounds n: this one was outstanding. */
		memmove(&r->ext[lo + 1], &r->ext[lo], (r->n - lo) * sizeof(*r->ext));
		r->ext[lo] = (struct kvl_range){ start, len };
		r->n++;
	}
	r->nfree += len;
}
