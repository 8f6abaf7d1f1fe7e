/* SPDX-License-Identifier: BSD-3-Clause */
/* For targets that run the control thread's files with no NIC lcore: the calls into one. */
#ifndef KVL_TESTS_FUZZ_NO_LCORE_H
#define KVL_TESTS_FUZZ_NO_LCORE_H

#include <stdlib.h>

#include "nic_io.h"
#include "xport.h"

/* Nothing to wake: the harness reads the command ring itself. */
void kvl_nic_io_kick(struct kvl_nic_io *i)
{
	(void)i;
}

/* A connection handed over is the harness's heap block (its kvl_tcp_conn_new()). */
static void tcp_free(void *c)
{
	free(c);
}

const struct kvl_xport_ops kvl_xport_tcp = { .name = "tcp", .free = tcp_free };

#endif /* KVL_TESTS_FUZZ_NO_LCORE_H */
