/* SPDX-License-Identifier: BSD-3-Clause */
/* Host -> device copies on a stream of one lcore's own, completed by polled events. */
#ifndef KVL_LCORES_H2D_H
#define KVL_LCORES_H2D_H

#include <stddef.h>
#include <stdint.h>

/*
 * What tcp's bounce buffers need to reach VRAM (lcores/xport/tcp_data.h): cuMemcpyHtoDAsync
 * of pinned host memory on a non-blocking stream of this copier's own, one event recorded
 * behind each copy, completions counted by querying the events in order (cuEventQuery: never
 * a wait). Copies complete in the order started. One thread uses a copier (the NIC lcore
 * that owns the connection); the context it needs (the device's primary context, the one
 * cudart and the engine use) is made current on that thread at its first copy.
 */
struct kvl_h2d;

/* A copier on CUDA device @device holding up to @depth copies in flight. Made on any thread,
 * whose current context it leaves as it was. NULL with errno and the cause in @err (no GPU,
 * a driver without the calls, a stream or events that cannot be made). */
struct kvl_h2d *kvl_h2d_new(int device, unsigned depth, char *err, size_t errlen);

/* Start copying @len bytes from pinned host @src to device address @dst: 0, -EAGAIN with
 * @depth copies in flight, -EIO when the driver refused (the copier has failed). */
int kvl_h2d_start(struct kvl_h2d *h, uint64_t dst, const void *src, size_t len);

/* Copies completed since creation (polled, never blocks); -EIO once a copy failed. */
int64_t kvl_h2d_completed(struct kvl_h2d *h);

/* The driver's words for the failure that made the copier fail ("" while none). */
const char *kvl_h2d_error(const struct kvl_h2d *h);

/* Wait for every copy started (teardown, not the loop), then free the stream and events. */
void kvl_h2d_free(struct kvl_h2d *h);

#endif /* KVL_LCORES_H2D_H */
