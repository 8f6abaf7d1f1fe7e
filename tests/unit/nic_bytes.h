/* SPDX-License-Identifier: BSD-3-Clause */
/* Big-endian PRM fields at any alignment and RDMA data moves, for the unit tests' software NICs. */
#ifndef KVL_TEST_NIC_BYTES_H
#define KVL_TEST_NIC_BYTES_H

#include <endian.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

static inline uint32_t rd32(const uint8_t *p)
{
	uint32_t v;

	memcpy(&v, p, 4);
	return be32toh(v);
}

static inline uint64_t rd64(const uint8_t *p)
{
	uint64_t v;

	memcpy(&v, p, 8);
	return be64toh(v);
}

static inline void wr32(uint8_t *p, uint32_t v)
{
	v = htobe32(v);
	memcpy(p, &v, 4);
}

/* A data segment as the NIC read it. */
struct sge {
	uint64_t addr;
	uint32_t lkey, len;
};

/* What an RDMA WRITE (gather the SGEs, in order, to @raddr) or READ (scatter from @raddr)
 * does to memory, both ends being in this process. */
static inline void nic_move(bool read, uint64_t raddr, const struct sge *sg, unsigned n)
{
	uint8_t *r = (uint8_t *)(uintptr_t)raddr;

	for (unsigned i = 0; i < n; i++) {
		uint8_t *l = (uint8_t *)(uintptr_t)sg[i].addr;

		if (read)
			memmove(l, r, sg[i].len);
		else
			memmove(r, l, sg[i].len);
		r += sg[i].len;
	}
}

#endif /* KVL_TEST_NIC_BYTES_H */
