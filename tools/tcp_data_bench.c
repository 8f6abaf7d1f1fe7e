/* SPDX-License-Identifier: BSD-3-Clause */
/* Micro-benchmark of the TCP data transport: loopback throughput, ops/s, syscalls per request. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "kvl_clock.h"
#include "tcp_data.h"

/*
 * The transport calls sendmsg()/recvmsg() and nothing else on its hot path. Defining them
 * here takes precedence over libc's for the transport linked into this executable, so every
 * call is counted (per fd, and whether it moved bytes) without touching the transport.
 */
#define MAX_FD 1024

struct sys_count {
	uint64_t send, recv;		 /* calls that moved bytes */
	uint64_t send_empty, recv_empty; /* calls that moved nothing (EAGAIN) */
};

static struct sys_count counts[MAX_FD];

ssize_t sendmsg(int fd, const struct msghdr *msg, int flags)
{
	ssize_t r = syscall(SYS_sendmsg, fd, msg, flags);

	if (fd >= 0 && fd < MAX_FD) {
		if (r > 0)
			counts[fd].send++;
		else
			counts[fd].send_empty++;
	}
	return r;
}

ssize_t recvmsg(int fd, struct msghdr *msg, int flags)
{
	ssize_t r = syscall(SYS_recvmsg, fd, msg, flags);

	if (fd >= 0 && fd < MAX_FD) {
		if (r > 0)
			counts[fd].recv++;
		else
			counts[fd].recv_empty++;
	}
	return r;
}

static int tcp_pair(int fds[2])
{
	struct sockaddr_in sa = { .sin_family = AF_INET };
	socklen_t len = sizeof(sa);
	int l = socket(AF_INET, SOCK_STREAM, 0);

	if (l < 0)
		return -1;
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	fds[0] = fds[1] = -1;
	if (bind(l, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(l, 1) < 0 ||
	    getsockname(l, (struct sockaddr *)&sa, &len) < 0)
		goto fail;
	fds[0] = socket(AF_INET, SOCK_STREAM, 0);
	if (fds[0] < 0 || fds[0] >= MAX_FD ||
	    connect(fds[0], (struct sockaddr *)&sa, sizeof(sa)) < 0)
		goto fail;
	fds[1] = accept(l, NULL, NULL);
	if (fds[1] < 0 || fds[1] >= MAX_FD)
		goto fail;
	close(l);
	return 0;
fail:
	if (fds[0] >= 0)
		close(fds[0]);
	if (fds[1] >= 0)
		close(fds[1]);
	close(l);
	return -1;
}

struct result {
	uint64_t ops, errors;
	double secs;
	struct sys_count ini, tgt; /* initiator's fd, target's fd */
	uint64_t tx_bytes;	   /* initiator's socket bytes, headers included */
};

/* Keep @depth requests of @len bytes in flight from A to B for @secs seconds. */
static int run(uint8_t op, uint32_t len, unsigned depth, double secs, struct result *res)
{
	const unsigned slots = depth < 32 ? depth : 32; /* distinct buffers, bounded memory */
	struct kvl_seg_table segs;
	struct kvl_tcp_conn *a, *b;
	struct kvl_wc wc[256];
	uint8_t *seg, *local;
	uint64_t posted = 0;
	unsigned inflight = 0;
	int fds[2];
	double t0, stop;

	memset(res, 0, sizeof(*res));
	memset(&segs, 0, sizeof(segs));
	seg = malloc((size_t)slots * len);
	local = malloc((size_t)slots * len);
	if (seg == NULL || local == NULL || tcp_pair(fds) < 0) {
		perror("setup");
		free(seg);
		free(local);
		return -1;
	}
	/* Fault the pages in now, not during the measurement. */
	memset(seg, 0xa5, (size_t)slots * len);
	memset(local, 0x5a, (size_t)slots * len);
	segs.seg[0] = (struct kvl_seg){ .base = seg,
					.len = (uint64_t)slots * len,
					.id = 1,
					.flags = KVL_SEG_REMOTE_READ | KVL_SEG_REMOTE_WRITE };
	segs.live[0] = true;
	a = kvl_tcp_conn_new(fds[0], NULL, depth);
	b = kvl_tcp_conn_new(fds[1], &segs, depth);
	if (a == NULL || b == NULL) {
		perror("kvl_tcp_conn_new");
		return -1;
	}
	memset(counts, 0, sizeof(counts));
	t0 = kvl_now_s();
	stop = t0 + secs;
	for (uint64_t turn = 0;; turn++) {
		unsigned n;

		if (kvl_now_s() < stop) {
			while (inflight < depth) {
				unsigned s = (unsigned)(posted % slots);
				struct kvl_wr wr = { .wr_id = posted,
						     .local = local + (size_t)s * len,
						     .remote_off = (uint64_t)s * len,
						     .length = len,
						     .remote_seg = 1,
						     .op = op };

				if (kvl_tcp_post(a, &wr) != 0)
					break;
				posted++;
				inflight++;
			}
		} else if (inflight == 0) {
			break;
		}
		kvl_tcp_progress(a);
		kvl_tcp_progress(b);
		n = kvl_tcp_reap(a, wc, 256);
		for (unsigned i = 0; i < n; i++)
			res->errors += wc[i].status != KVL_OK || wc[i].bytes != len;
		res->ops += n;
		inflight -= n;
		if (kvl_tcp_broken(a) || kvl_tcp_broken(b)) {
			fprintf(stderr, "connection broke: %d/%d\n", kvl_tcp_broken(a),
				kvl_tcp_broken(b));
			res->errors++;
			break;
		}
	}
	res->secs = kvl_now_s() - t0;
	res->ini = counts[fds[0]];
	res->tgt = counts[fds[1]];
	res->tx_bytes = kvl_xport_stats(a)->tx_bytes;
	kvl_tcp_conn_free(a);
	kvl_tcp_conn_free(b);
	free(seg);
	free(local);
	return 0;
}

int main(int argc, char **argv)
{
	static const uint32_t sizes[] = { 16u << 10, 64u << 10, 2u << 20 };
	unsigned depth = argc > 1 ? (unsigned)strtoul(argv[1], NULL, 0) : 64;
	double secs = argc > 2 ? strtod(argv[2], NULL) : 1.0;
	bool reads = argc > 3 && strcmp(argv[3], "read") == 0;
	uint64_t errors = 0;

	if (depth == 0 || secs <= 0) {
		fprintf(stderr, "usage: %s [depth (64)] [seconds per size (1.0)] [read]\n",
			argv[0]);
		return 2;
	}
	printf("kvlane TCP data transport, loopback, both ends on one thread, depth %u, %.1f s "
	       "per size\n",
	       depth, secs);
	printf("syscalls per request: sendmsg+recvmsg that moved bytes (those that only said "
	       "EAGAIN in brackets)\n\n");
	printf("| op    |     size |     ops |   GB/s |  kops/s | initiator   | target      |\n");
	printf("|-------|----------|---------|--------|---------|-------------|-------------|\n");
	for (int o = 0; o < (reads ? 2 : 1); o++) {
		for (unsigned i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
			struct result r;
			uint8_t op = o ? KVL_OP_READ : KVL_OP_WRITE;
			double ops, ini, tgt, ini_e, tgt_e;

			if (run(op, sizes[i], depth, secs, &r) < 0)
				return 1;
			errors += r.errors;
			ops = r.ops ? (double)r.ops : 1;
			ini = (double)(r.ini.send + r.ini.recv) / ops;
			tgt = (double)(r.tgt.send + r.tgt.recv) / ops;
			ini_e = (double)(r.ini.send_empty + r.ini.recv_empty) / ops;
			tgt_e = (double)(r.tgt.send_empty + r.tgt.recv_empty) / ops;
			printf("| %-5s | %5u KiB | %7llu | %6.2f | %7.1f | %4.2f (%4.2f) | %4.2f "
			       "(%4.2f) |\n",
			       o ? "READ" : "WRITE", sizes[i] >> 10, (unsigned long long)r.ops,
			       (double)r.ops * sizes[i] / r.secs / 1e9,
			       (double)r.ops / r.secs / 1e3, ini, ini_e, tgt, tgt_e);
		}
	}
	if (errors != 0) {
		fprintf(stderr, "%llu requests did not complete OK\n", (unsigned long long)errors);
		return 1;
	}
	return 0;
}
