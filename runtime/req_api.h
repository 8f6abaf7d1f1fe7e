/* SPDX-License-Identifier: BSD-3-Clause */
/* The request API's handle table (the kvl_req_* calls themselves are in kvlane.h). */
#ifndef KVL_RUNTIME_REQ_API_H
#define KVL_RUNTIME_REQ_API_H

#include <stddef.h>
#include <stdint.h>

struct kvl_runtime;

/* After kvl_staging_start(): room for [sched] max_requests per scheduler (none without one:
 * then kvl_req_open() answers -ENOTSUP). Returns 0 or -ENOMEM with a message in @err. */
int kvl_req_table_start(struct kvl_runtime *rt, char *err, size_t errlen);

/* After the loops stopped: frees the requests still open. */
void kvl_req_table_stop(struct kvl_runtime *rt);

struct kvl_req_desc;

/* KVL_REQ_ENGINE_DEST (runtime/req_dest.c), what needs no runtime state: a PULL, every block
 * with a destination. 0 or -EINVAL (@err). */
int kvl_req_dest_shape(const struct kvl_req_desc *d, char *err, size_t errlen);

/*
 * And against the NIC: every block of @d (a PULL) names a destination
 * inside one live local segment, outside the staging, that NIC @nic's transport can write
 * (registered on its RDMA device; host memory for tcp), and no two destinations overlap. The
 * segment of block i in @seg_of[i] (n_blocks entries). 0, or -EINVAL, -EFAULT, -EXDEV,
 * -ENOMEM with the block, its address and the cause in @err.
 */
int kvl_req_dest_check(struct kvl_runtime *rt, const struct kvl_req_desc *d, unsigned nic,
		       uint32_t *seg_of, char *err, size_t errlen);

#endif /* KVL_RUNTIME_REQ_API_H */
