/* SPDX-License-Identifier: BSD-3-Clause */
/* The request API's handle table (the kvl_req_* calls themselves are in kvlane.h). */
#ifndef KVL_RUNTIME_REQ_API_H
#define KVL_RUNTIME_REQ_API_H

#include <stddef.h>

struct kvl_runtime;

/* After kvl_staging_start(): room for [sched] max_requests per scheduler (none without one:
 * then kvl_req_open() answers -ENOTSUP). Returns 0 or -ENOMEM with a message in @err. */
int kvl_req_table_start(struct kvl_runtime *rt, char *err, size_t errlen);

/* After the loops stopped: frees the requests still open. */
void kvl_req_table_stop(struct kvl_runtime *rt);

#endif /* KVL_RUNTIME_REQ_API_H */
