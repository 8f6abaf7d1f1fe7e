/* SPDX-License-Identifier: BSD-3-Clause */
/* For targets that run the control thread's files with no NIC lcore: the calls into one. */
#ifndef KVL_TESTS_FUZZ_NO_LCORE_H
#define KVL_TESTS_FUZZ_NO_LCORE_H

#include <stdlib.h>

#include "nic_io.h"
#include "tcp_vram.h"
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

/* [control] tls stays off here (ctl.tls is NULL): bind.c never hands over a TLS connection,
 * and tls.c's I/O is never reached. */
void kvl_tcp_tls_sockopts(int fd)
{
	(void)fd;
	abort();
}

ssize_t kvl_tcp_tls_result(struct ssl_st *ssl, int rc, size_t done)
{
	(void)ssl;
	(void)rc;
	(void)done;
	abort();
}

/* [control] tls stays off here (ctl.tls is NULL): bind.c never hands over a TLS connection. */
struct kvl_tcp_conn *kvl_tcp_conn_new_tls(int fd, struct ssl_st *ssl,
					  const struct kvl_seg_table *segs, unsigned depth)
{
	(void)fd;
	(void)ssl;
	(void)segs;
	(void)depth;
	abort();
}

/* No GPU here: a handed-over connection gets no bounce buffers (runtime/tcp_vram.c), so the
 * connection is never freed on that path either. */
int kvl_tcp_vram_attach(struct kvl_runtime *rt, unsigned nic, struct kvl_tcp_conn *conn, char *err,
			size_t errlen)
{
	(void)rt;
	(void)nic;
	(void)conn;
	(void)err;
	(void)errlen;
	return 0;
}

void kvl_tcp_conn_free(struct kvl_tcp_conn *c)
{
	free(c); /* the harness's heap block */
}

#endif /* KVL_TESTS_FUZZ_NO_LCORE_H */
