/* SPDX-License-Identifier: BSD-3-Clause */
/* rte_zmalloc / rte_free on the heap, for unit tests of runtime files that start no EAL. */
#ifndef KVL_TEST_HEAP_RTE_MALLOC_H
#define KVL_TEST_HEAP_RTE_MALLOC_H

#include <stdlib.h>
#include <string.h>

#include <rte_malloc.h>

void *rte_zmalloc_socket(const char *type, size_t size, unsigned align, int socket)
{
	void *p = aligned_alloc(align ? align : 64, (size + 4095) & ~(size_t)4095);

	(void)type, (void)socket;
	if (p)
		memset(p, 0, size);
	return p;
}

void *rte_zmalloc(const char *type, size_t size, unsigned align)
{
	return rte_zmalloc_socket(type, size, align, SOCKET_ID_ANY);
}

void rte_free(void *p)
{
	free(p);
}

#endif /* KVL_TEST_HEAP_RTE_MALLOC_H */
