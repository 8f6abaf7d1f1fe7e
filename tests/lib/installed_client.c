/* SPDX-License-Identifier: BSD-3-Clause */
/* An engine's first program, built only from the installed tree (pkg-config kvlane). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <kvlane/kvlane.h>

#if KVLANE_VERSION_NUM < 0x000100
#error "the installed kvlane.h has no usable version"
#endif

/*
 * installed_client INI [EAL options]
 * Starts kvlane from INI (EAL options as given; none: the INI's [eal]), allocates a segment
 * and registers a heap buffer, writes and reads back both, then stops. Prints one line per
 * step; exit 0 when each held.
 */
int main(int argc, char **argv)
{
	struct kvl_seg_geom g = { 2, 2, 4, 4096 };
	struct kvl_start_args sa = { 0 };
	struct kvl_segment seg, reg;
	struct kvl_runtime *rt;
	char err[1024];
	int stage = 0, rc;
	uint8_t *heap;

	if (argc < 2) {
		fprintf(stderr, "usage: %s INI [EAL options]\n", argv[0]);
		return 2;
	}
	sa.config = argv[1];
	if (argc > 2) {
		argv[1] = argv[0]; /* EAL's argv: program name, then its options */
		sa.eal_argc = argc - 1;
		sa.eal_argv = argv + 1;
	}
	rt = kvl_start(&sa, err, sizeof(err), &stage);
	if (rt == NULL) {
		printf("FAIL kvl_start (stage %d): %s\n", stage, err);
		return 1;
	}
	printf("ok kvl_start, kvlane %d.%d.%d, status 0 is \"%s\"\n", KVLANE_VERSION_MAJOR,
	       KVLANE_VERSION_MINOR, KVLANE_VERSION_PATCH, kvl_status_name(KVL_OK));
	rc = kvl_seg_alloc(rt, "installed", &g, KVL_REMOTE_READ, &seg);
	if (rc < 0 || seg.length != 2ull * 2 * 4 * 4096 || seg.base == NULL) {
		printf("FAIL kvl_seg_alloc: %d (%s), length %llu\n", rc, strerror(-rc),
		       (unsigned long long)seg.length);
		kvl_stop(rt);
		return 1;
	}
	for (uint64_t i = 0; i < seg.length; i++)
		((uint8_t *)seg.base)[i] = (uint8_t)(i * 7 + 1);
	for (uint64_t i = 0; i < seg.length; i++)
		if (((uint8_t *)seg.base)[i] != (uint8_t)(i * 7 + 1)) {
			printf("FAIL segment byte %llu\n", (unsigned long long)i);
			kvl_stop(rt);
			return 1;
		}
	printf("ok kvl_seg_alloc: segment %u, %llu bytes written and read back\n", seg.id,
	       (unsigned long long)seg.length);
	heap = aligned_alloc(4096, 4 * 4096);
	if (heap == NULL) {
		kvl_stop(rt);
		return 1;
	}
	memset(heap, 0x5a, 4 * 4096);
	rc = kvl_seg_register(rt, "heap", heap, &(struct kvl_seg_geom){ 1, 1, 4, 4096 },
			      KVL_REMOTE_READ | KVL_REMOTE_WRITE, &reg);
	if (rc < 0 || reg.mem != KVL_MEM_HOST || reg.base != heap) {
		printf("FAIL kvl_seg_register: %d (%s) %s\n", rc, strerror(-rc), kvl_seg_error());
		kvl_stop(rt);
		return 1;
	}
	printf("ok kvl_seg_register: segment %u, host memory\n", reg.id);
	kvl_stop(rt);
	free(heap);
	printf("ok kvl_stop\n");
	return 0;
}
