/* SPDX-License-Identifier: BSD-3-Clause */
/* The transports behind struct kvl_xport_ops: thin adapters, no logic of their own. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "tcp_data.h"
#include "xport.h"

/* ---- tcp ---- */

KVL_XPORT_BURST_OF(kvl_tcp_post, struct kvl_tcp_conn)

static unsigned tcp_progress(void *c)
{
	return kvl_tcp_progress(c);
}

static unsigned tcp_reap(void *c, struct kvl_wc *wc, unsigned max)
{
	return kvl_tcp_reap(c, wc, max);
}

static void tcp_fail_all(void *c, int status)
{
	kvl_tcp_fail_all(c, status);
}

static int tcp_broken(const void *c)
{
	return kvl_tcp_broken(c);
}

static unsigned tcp_outstanding(const void *c)
{
	return kvl_tcp_outstanding(c);
}

static void tcp_stats(const void *c, struct kvl_xport_stats *out)
{
	*out = *kvl_xport_stats(c);
}

static void tcp_free(void *c)
{
	kvl_tcp_conn_free(c);
}

const struct kvl_xport_ops kvl_xport_tcp = {
	.name = "tcp",
	.post = kvl_tcp_post_burst,
	.progress = tcp_progress,
	.reap = tcp_reap,
	.fail_all = tcp_fail_all,
	.broken = tcp_broken,
	.outstanding = tcp_outstanding,
	.stats = tcp_stats,
	.free = tcp_free,
};
