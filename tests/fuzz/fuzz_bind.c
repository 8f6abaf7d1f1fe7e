/* SPDX-License-Identifier: BSD-3-Clause */
/* libFuzzer target for the data port's state machine: connections, frames and binds in any order.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/*
 * The real handlers (runtime/control/bind.c, the command backlog, the socket helpers, the
 * codec and the proofs), on real sockets (socketpairs), against a control thread of one tcp
 * NIC and one live server-side session whose secret the harness holds. The input is a
 * program: each byte an operation on the connections it opened, some of them the right bind
 * (computed here, as a client holding the secret would), most of them anything at all. After
 * every operation the harness checks what an attacker must never get: a connection handed to
 * the lcore without a right bind on it, an index bound twice, or beyond the count, a count
 * changed; and what must never be lost: the session itself, a pending slot's descriptor.
 */
#include "../../runtime/control/bind.c"
#include "../../runtime/control/lcmd.c"
#include "../../runtime/control/sockets.c"
#include "../../runtime/control/tls.c"
#pragma GCC diagnostic ignored "-Wunused-function" /* fake_xport.h: only its heap ring */
#include "../unit/fake_xport.h"

#define CONNS 8

static struct kvl_runtime rt;
static struct kvl_control ctl;
static struct kvl_nic_io io;
static struct {
	int fd;		  /* our (the client's) end, -1 when closed or never opened */
	struct pconn *pc; /* the server's pending slot for it */
	bool right_bind;  /* a right DATA_BIND was written on it (and nothing before it) */
	bool dirty;	  /* other bytes were written first */
	uint32_t idx, cnt;
	bool handed;
} conn[CONNS];
static unsigned handed, failed_peer;
static int handed_conn = -1;

/* ---- what bind.c calls beyond the files included ---- */

void kvl_ctl_peer_fail(struct kvl_control *c, uint32_t p, int status, const char *fmt, ...)
{
	(void)c;
	(void)p;
	(void)status;
	(void)fmt;
	failed_peer++;
}

void kvl_ctl_set_state(struct kvl_control *c, uint32_t p, int state)
{
	c->pub[p].state = state;
}

#include "no_lcore.h"

struct kvl_tcp_conn *kvl_tcp_conn_new(int fd, const struct kvl_seg_table *segs, unsigned depth)
{
	(void)segs;
	(void)depth;
	for (int k = 0; k < CONNS; k++)
		if (conn[k].pc != NULL && conn[k].pc->fd == fd)
			handed_conn = k;
	close(fd);
	return malloc(16);
}

/* ---- the harness ---- */

#define FAIL(...)                                           \
	do {                                                \
		fprintf(stderr, "fuzz_bind: " __VA_ARGS__); \
		fputc('\n', stderr);                        \
		abort();                                    \
	} while (0)

static void setup_once(void)
{
	static bool done;

	if (done)
		return;
	done = true;
	signal(SIGPIPE, SIG_IGN); /* the server writes to connections the input closed */
	kvl_config_defaults(&rt.cfg);
	rt.cfg.n_nics = 1;
	snprintf(rt.cfg.nics[0].label, sizeof(rt.cfg.nics[0].label), "lo");
	rt.cfg.nics[0].queue_depth = 64;
	io.cmd = fake_ring_create("cmd", sizeof(struct kvl_lcmd), 1024, 0,
				  RING_F_SP_ENQ | RING_F_SC_DEQ | RING_F_EXACT_SZ);
	if (io.cmd == NULL)
		FAIL("no ring");
	rt.nic[0].io = &io;
	ctl.rt = &rt;
	ctl.pub = rt.peers.pub;
	memcpy(ctl.secret.key, "fuzz-secret-0123456789abcdefghijklmnop", 38);
	ctl.secret.len = 38;
}

/* A fresh session: peer 0, server side, authenticated (EXCHANGE), nothing bound. */
static void reset(void)
{
	struct kvl_lcmd cmd;

	for (int k = 0; k < CONNS; k++) {
		if (conn[k].fd >= 0)
			close(conn[k].fd);
		conn[k] = (typeof(conn[k])){ .fd = -1 };
	}
	for (unsigned i = 0; i < MAX_PENDING; i++)
		if (ctl.pc[i].state != PC_FREE) {
			close(ctl.pc[i].fd);
			ctl.pc[i].state = PC_FREE;
		}
	while (rte_ring_dequeue_elem(io.cmd, &cmd, sizeof(cmd)) == 0)
		if (cmd.type == KVL_LCMD_ADD_CONN)
			cmd.x.ops->free(cmd.x.c);
	memset(&ctl.peer[0], 0, sizeof(ctl.peer[0]));
	memset(ctl.slot, 0, sizeof(ctl.slot));
	memset(ctl.lcmd, 0, sizeof(ctl.lcmd));
	ctl.pub[0] = (struct kvl_peer_pub){ .state = KVL_PEER_EXCHANGE };
	ctl.peer[0].fd = -1;
	ctl.peer[0].session_id = 0x5e5510d5e5510d01ull;
	for (int i = 0; i < KVL_NONCE_LEN; i++) {
		ctl.peer[0].hello.u.hello.nonce[i] = (uint8_t)(i * 7);
		ctl.peer[0].challenge.u.challenge.nonce[i] = (uint8_t)(i * 13 + 1);
	}
	handed = failed_peer = 0;
}

/* accept_data's part: a pending slot with its own nonce, its DATA_CHALLENGE on the wire. */
static void open_conn(int k, const uint8_t *nonce)
{
	struct kvl_ctrl_msg m = { .type = KVL_CTRL_DATA_CHALLENGE };
	int sv[2];
	struct pconn *pc;

	if (conn[k].fd >= 0 || socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv) != 0)
		return;
	pc = kvl_ctl_pconn_alloc(&ctl);
	if (pc == NULL) {
		close(sv[0]);
		close(sv[1]);
		return;
	}
	pc->fd = sv[1];
	pc->nic = 0;
	pc->peer = UINT32_MAX;
	memcpy(pc->nonce, nonce, KVL_NONCE_LEN);
	memcpy(m.u.data_challenge.nonce, nonce, KVL_NONCE_LEN);
	if (kvl_ctl_send_small(pc->fd, &m) != 0)
		FAIL("cannot send the challenge");
	pc->state = PC_WAIT_BIND;
	conn[k] = (typeof(conn[k])){ .fd = sv[0], .pc = pc };
}

/* The server's turn: what poll() would report, handled until nothing moves. */
static void serve(int k)
{
	for (int round = 0; round < 64 && conn[k].pc && conn[k].pc->state == PC_WAIT_BIND;
	     round++) {
		struct pollfd p = { .fd = conn[k].pc->fd, .events = POLLIN };

		if (poll(&p, 1, 0) <= 0)
			break;
		handed_conn = -1;
		kvl_ctl_pconn_event(&ctl, conn[k].pc, p.revents);
		if (handed_conn >= 0) {
			if (handed_conn != k)
				FAIL("connection %d handed over while serving %d", handed_conn, k);
			if (!conn[k].right_bind || conn[k].dirty)
				FAIL("connection %d handed over without a right bind first on it",
				     k);
			conn[k].handed = true;
			handed++;
		}
	}
	if (conn[k].pc && conn[k].pc->state == PC_FREE)
		conn[k].pc = NULL; /* refused, closed or handed over: the slot is free again */
}

static void check_session(void)
{
	const struct peer *pr = &ctl.peer[0];
	unsigned bits = (unsigned)__builtin_popcount(pr->bind_mask);

	if (failed_peer)
		FAIL("the live session was failed by a stranger's bytes");
	if (bits != handed)
		FAIL("%u indexes marked bound, %u connections handed over", bits, handed);
	if (pr->bind_count == 0
		    ? pr->bind_mask != 0
		    : (pr->bind_count > 32 || (pr->bind_mask >> (pr->bind_count - 1)) > 1))
		FAIL("bind_mask 0x%x beyond count %u", pr->bind_mask, pr->bind_count);
	for (int a = 0; a < CONNS; a++)
		for (int b = a + 1; b < CONNS; b++)
			if (conn[a].handed && conn[b].handed && conn[a].idx == conn[b].idx)
				FAIL("index %u handed over twice", conn[a].idx);
	for (unsigned i = 0; i < MAX_PENDING; i++)
		if (ctl.pc[i].state != PC_FREE && fcntl(ctl.pc[i].fd, F_GETFD) < 0)
			FAIL("pending slot %u holds a closed fd", i);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	size_t i = 0;
	uint8_t nonce[KVL_NONCE_LEN];
	unsigned opened = 0;

	setup_once();
	reset();
	while (i < size) {
		uint8_t op = data[i++];
		int k = op & (CONNS - 1);

		switch (op >> 5) {
		case 0: /* open connection k: the server picks its nonce (a different one each) */
			opened++;
			for (size_t j = 0; j < sizeof(nonce); j++)
				nonce[j] = (uint8_t)(opened * 31 + j * 7 + op);
			open_conn(k, nonce);
			break;
		case 1:
		case 2: { /* write up to 63 raw bytes on k, then the server's turn */
			size_t n = op & 0x3f;

			n = n > size - i ? size - i : n;
			if (conn[k].fd >= 0 && n) {
				if (write(conn[k].fd, data + i, n) > 0)
					conn[k].dirty = !conn[k].right_bind;
			}
			i += n;
			serve(k);
			break;
		}
		case 3:
		case 4: { /* a right bind on k: index and count from the input */
			struct kvl_ctrl_msg m = { .type = KVL_CTRL_DATA_BIND };
			uint8_t buf[256];
			int len;

			if (i + 2 > size || conn[k].fd < 0 || conn[k].pc == NULL)
				return 0;
			m.u.data_bind.session_id = ctl.peer[0].session_id;
			m.u.data_bind.conn_index = data[i] % 40;
			m.u.data_bind.conn_count = data[i + 1] % 40;
			i += 2;
			kvl_auth_data_mac(&ctl.secret, ctl.peer[0].hello.u.hello.nonce,
					  ctl.peer[0].challenge.u.challenge.nonce,
					  conn[k].pc->nonce, m.u.data_bind.session_id,
					  m.u.data_bind.conn_index, m.u.data_bind.conn_count,
					  m.u.data_bind.mac);
			len = kvl_ctrl_encode(&m, buf, sizeof(buf));
			if (len <= 0)
				FAIL("cannot encode a bind");
			if (!conn[k].dirty) {
				conn[k].right_bind = true;
				conn[k].idx = m.u.data_bind.conn_index;
				conn[k].cnt = m.u.data_bind.conn_count;
			}
			/* A right bind, split anywhere: the reader waits for the rest. */
			for (int off = 0; off < len;) {
				int piece = 1 + (op & 0x1f) % 20;

				piece = piece > len - off ? len - off : piece;
				if (write(conn[k].fd, buf + off, (size_t)piece) != piece)
					break;
				off += piece;
				serve(k);
			}
			serve(k);
			break;
		}
		case 5: /* the client closes k */
			if (conn[k].fd >= 0) {
				close(conn[k].fd);
				conn[k].fd = -1;
			}
			serve(k);
			break;
		default: /* the session's count for the next right bind is taken as given */
			serve(k);
			break;
		}
		check_session();
		/* A right bind below the count, on a clean connection, of an index not yet
		 * bound, with the session's count: it must have been taken. */
		for (int c = 0; c < CONNS; c++) {
			const struct peer *pr = &ctl.peer[0];

			if (conn[c].right_bind && !conn[c].dirty && !conn[c].handed &&
			    conn[c].cnt > 0 && conn[c].cnt <= 32 && conn[c].idx < conn[c].cnt &&
			    (pr->bind_count == 0 || pr->bind_count == conn[c].cnt) &&
			    !(pr->bind_mask & (1u << conn[c].idx)) && conn[c].pc == NULL)
				FAIL("a right bind (index %u of %u) on connection %d was refused",
				     conn[c].idx, conn[c].cnt, c);
		}
	}
	reset();
	return 0;
}
