/* SPDX-License-Identifier: BSD-3-Clause */
/* What the rdma suite's public-API test programs share: a stop flag for SIGTERM, a clock. */
#ifndef KVL_RDMA_API_TEST_H
#define KVL_RDMA_API_TEST_H

#include <signal.h>
#include <time.h>

#include "kvl_clock.h"

static volatile sig_atomic_t stop; /* set by SIGTERM / SIGINT: the harness ends a lingerer */

static void on_term(int sig)
{
	(void)sig;
	stop = 1;
}

static inline void catch_term(void)
{
	signal(SIGTERM, on_term);
	signal(SIGINT, on_term);
}

#endif /* KVL_RDMA_API_TEST_H */
