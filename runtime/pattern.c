/* SPDX-License-Identifier: BSD-3-Clause */
/* The test pattern (kvl_pattern_fill/check): 64-bit words mixed from (seed, word index). */
#include <string.h>

#include "kvlane/kvlane.h"

static uint64_t pattern_word(uint32_t seed, uint64_t idx)
{
	uint64_t z = idx + 0x9e3779b97f4a7c15ull * ((uint64_t)seed + 1);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

void kvl_pattern_fill(void *buf, uint64_t len, uint32_t seed, uint64_t offset)
{
	uint8_t *p = buf;
	uint64_t i = 0;

	for (; i < len && ((offset + i) & 7); i++)
		p[i] = (uint8_t)(pattern_word(seed, (offset + i) >> 3) >> (8 * ((offset + i) & 7)));
	for (; i + 8 <= len; i += 8) {
		uint64_t w = pattern_word(seed, (offset + i) >> 3);

		memcpy(p + i, &w, 8); /* little-endian hosts: byte k of the word at offset+k */
	}
	for (; i < len; i++)
		p[i] = (uint8_t)(pattern_word(seed, (offset + i) >> 3) >> (8 * ((offset + i) & 7)));
}

uint64_t kvl_pattern_check(const void *buf, uint64_t len, uint32_t seed, uint64_t offset)
{
	const uint8_t *p = buf;
	uint64_t i = 0;

	for (; i < len && ((offset + i) & 7); i++)
		if (p[i] !=
		    (uint8_t)(pattern_word(seed, (offset + i) >> 3) >> (8 * ((offset + i) & 7))))
			return i;
	for (; i + 8 <= len; i += 8) {
		uint64_t w = pattern_word(seed, (offset + i) >> 3), got;

		memcpy(&got, p + i, 8);
		if (got != w)
			break; /* find the byte below */
	}
	for (; i < len; i++)
		if (p[i] !=
		    (uint8_t)(pattern_word(seed, (offset + i) >> 3) >> (8 * ((offset + i) & 7))))
			return i;
	return len;
}
