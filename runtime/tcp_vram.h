/* SPDX-License-Identifier: BSD-3-Clause */
/* tcp's road into VRAM: each data connection's pinned bounce buffers and its copier. */
#ifndef KVL_RUNTIME_TCP_VRAM_H
#define KVL_RUNTIME_TCP_VRAM_H

#include <stddef.h>

struct kvl_runtime;
struct kvl_tcp_conn;

/* Each tcp data connection's bounce: KVL_TCP_VRAM_BUFS buffers of KVL_TCP_VRAM_BUF bytes (8 MiB
 * of the [memory] pool per connection, given back when it closes). */
#define KVL_TCP_VRAM_BUF  (512u << 10)
#define KVL_TCP_VRAM_BUFS 16u

/*
 * Give the tcp data connection @conn of NIC @nic its bounce buffers (carved from the [memory]
 * pool, which is pinned for CUDA) and a copier on a stream of its own on the NIC's GPU
 * (lcores/gpu/h2d.c), so that READs into GPU segments land (lcores/xport/tcp_data.h). Where
 * the runtime cannot (kvl_tcp_vram_ok: no GPU, no pool) it returns 0 and @conn keeps refusing
 * VRAM with gpu-memory. -ENOMEM (the pool has no 8 MiB left) or -ENODEV (no stream or events)
 * with the cause in @err: the connection cannot serve this runtime then.
 */
int kvl_tcp_vram_attach(struct kvl_runtime *rt, unsigned nic, struct kvl_tcp_conn *conn, char *err,
			size_t errlen);

#endif /* KVL_RUNTIME_TCP_VRAM_H */
