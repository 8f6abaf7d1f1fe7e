/* SPDX-License-Identifier: BSD-3-Clause */
/* Where a segment's memory is: detected for memory the caller registers, VRAM when asked. */
#ifndef KVL_RUNTIME_SEG_PLACE_H
#define KVL_RUNTIME_SEG_PLACE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gpu.h"
#include "segments.h"

/*
 * A segment of @d's geometry in VRAM of GPU @device (cudaMalloc, zeroed; filled with
 * kvl_pattern_fill()'s bytes for @seed when @fill), registered as @name. Refused when the build
 * has no CUDA (-ENOTSUP), the host no such GPU (-ENODEV), or @g is open ([gpu] enable) on
 * another device (-EXDEV: the runtime's NICs and staging pair with that one). 0 with *@id and
 * *@base, or a negative errno with the message in @err (nothing kept).
 */
int kvl_seg_place_gpu(struct kvl_local_segs *s, const struct kvl_gpu *g, const char *name,
		      int device, const struct kvl_seg_desc *d, bool fill, uint32_t seed,
		      uint32_t *id, void **base, char *err, size_t errlen);

/*
 * Register memory the caller owns: host memory as before (kvl_segs_add), GPU memory through
 * kvl_segs_add_gpu(); which one it is comes from kvl_gpu_mem_detect(). Refused: a range
 * crossing two allocations or past its allocation's end (-ERANGE), a freed or unmapped pointer
 * (-EFAULT), managed memory (-ENOTSUP), a GPU other than @g's when @g is open (-EXDEV). 0 with
 * *@id and what was detected in @mi, or a negative errno with the message in @err.
 */
int kvl_seg_place_register(struct kvl_local_segs *s, const struct kvl_gpu *g, const char *name,
			   void *base, const struct kvl_seg_desc *d, uint32_t *id,
			   struct kvl_mem_info *mi, char *err, size_t errlen);

#endif /* KVL_RUNTIME_SEG_PLACE_H */
