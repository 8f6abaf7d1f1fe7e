/* SPDX-License-Identifier: BSD-3-Clause */
/* libFuzzer target for a control connection's state machine: handshake and exchange, both sides.
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
#include <sys/un.h>
#include <unistd.h>

/*
 * The real control thread's code (runtime/control/control.c's accept and read paths, peer.c,
 * handshake.c, exchange.c, bind.c's command backlog, sockets.c, the codec and the proofs) on
 * real sockets, one peer at a time, single-threaded: the harness plays what control_main()'s
 * poll loop does (accept_control(), peer_read(), the flush, the lcore backlog, timers()). The
 * input is a program for the other end: the first byte picks the side we fuzz (accepting, or
 * connecting), each next byte an operation: raw bytes, a right HELLO / CHALLENGE, a proof
 * computed from what actually came over the wire (as the holder of the secret would), a wrong
 * proof, any other message with fields from the input, a close. After every step it checks:
 *  - nothing but the handshake's own frames leaves before the other end proved the secret
 *    (our SEGMENTS, ENDPOINTS, RKEYS, heartbeats are for authenticated peers only);
 *  - the peer is never EXCHANGE / BINDING / READY without a right proof having been sent,
 *    AUTH_OK only answers a right AUTH, and our own proofs are the right ones;
 *  - a stranger's bytes never reach the lcores (no FAIL_PEER for a peer that never
 *    authenticated) nor name the peer in telemetry;
 *  - a dead peer's socket is closed, and nothing more comes from it.
 */
#include "../../runtime/control/bind.c"
#include "../../runtime/control/control.c"
#include "../../runtime/control/doctor.c"
#include "../../runtime/control/exchange.c"
#include "../../runtime/control/handshake.c"
#include "../../runtime/control/ipc.c"
#include "../../runtime/control/lcmd.c"
#include "../../runtime/control/peer.c"
#include "../../runtime/control/sockets.c"
#include "../../runtime/control/tls.c"
#pragma GCC diagnostic ignored "-Wunused-function" /* fake_xport.h: only its heap ring */
#include "../unit/fake_xport.h"

/* ---- what the included files call beyond them: no RDMA NIC, one segment, no GPU ---- */

bool kvl_ctl_is_rdma(const struct kvl_runtime *rt, unsigned nic)
{
	(void)rt;
	(void)nic;
	return false;
}

/* Never reached without an RDMA NIC: reaching one is a finding. */
static void not_here(const char *fn)
{
	fprintf(stderr, "fuzz_ctl: %s called without an RDMA NIC\n", fn);
	abort();
}

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-parameter"
struct kvl_verbs_conn *kvl_ctl_verbs_conn_new(struct kvl_control *c, unsigned nic,
					      struct kvl_verbs_addr *local, char *err,
					      size_t errlen)
{
	not_here(__func__);
	return NULL;
}

void kvl_ctl_addr_to_msg(struct kvl_ctrl_msg *m, uint32_t idx, const char *nic,
			 const struct kvl_verbs_addr *a)
{
	not_here(__func__);
}

/* runtime/ipc.c without CUDA: one host id for both ends of the fuzzed connection (so HOST and
 * IPC_SEGS take their same-host paths), no GPU segment to export, no GPU to read them into. */
int kvl_host_id(uint8_t out[KVL_HOST_ID_LEN], char *err, size_t errlen)
{
	memset(out, 0x5a, KVL_HOST_ID_LEN);
	return 0;
}

int kvl_ipc_export(struct kvl_runtime *rt, uint32_t gen, struct kvl_ctrl_ipc_seg *out, unsigned max,
		   char *why, size_t whylen)
{
	snprintf(why, whylen, "no GPU in the fuzz target");
	return 0;
}

int kvl_ipc_access(struct kvl_runtime *rt, unsigned nic, const uint8_t uuid[KVL_GPU_UUID_LEN],
		   char *why, size_t whylen)
{
	snprintf(why, whylen, "no GPU in the fuzz target");
	return -1;
}

int kvl_ipc_conn_open(struct kvl_runtime *rt, unsigned nic, const struct kvl_ipc_rseg *segs,
		      unsigned n, struct kvl_xconn *out, char *err, size_t errlen)
{
	snprintf(err, errlen, "no GPU in the fuzz target");
	return -ENODEV;
}

void kvl_verbs_conn_free(struct kvl_verbs_conn *vc)
{
	not_here(__func__);
}

void kvl_ctl_resync_send(struct kvl_control *c, unsigned nic, const struct kvl_levt *ev)
{
	not_here(__func__);
}
#pragma GCC diagnostic pop

/* Without RDMA these find nothing of theirs and fail the peer for it, as rdma.c does. */
void kvl_ctl_refresh_remote(struct kvl_control *c, uint32_t p)
{
	(void)c;
	(void)p;
}

void kvl_ctl_on_qp_resync(struct kvl_control *c, uint32_t p, const struct kvl_ctrl_msg *m)
{
	(void)m;
	c->resync_unroutable++;
	(void)p;
}

void kvl_ctl_on_qp_info_server(struct kvl_control *c, uint32_t p, const struct kvl_ctrl_msg *m)
{
	kvl_ctl_peer_fail(c, p, KVL_ERR_PROTOCOL, "QP_INFO for NIC \"%.16s\": no RDMA NIC here",
			  m->u.qp_info.nic);
}

void kvl_ctl_on_qp_info_client(struct kvl_control *c, uint32_t p, const struct kvl_ctrl_msg *m)
{
	kvl_ctl_on_qp_info_server(c, p, m);
}

static struct kvl_local_seg the_seg;

uint32_t kvl_segs_visit(struct kvl_local_segs *s,
			void (*fn)(void *arg, const struct kvl_local_seg *seg), void *arg)
{
	(void)s;
	fn(arg, &the_seg);
	return 1;
}

void kvl_staging_sample(struct kvl_runtime *rt)
{
	(void)rt;
}

void kvl_nic_io_peer_stats(const struct kvl_nic_io *io, uint32_t peer, struct kvl_xport_stats *s)
{
	(void)io;
	(void)peer;
	(void)s;
}

/* kvlane-doctor's facts read sysfs (runtime/doctor.c): the state machine's DOCTOR paths (an
 * answer, a reply nobody waits for) run on one fixed link instead. */
unsigned kvl_doctor_links(const char *sysfs_root, const struct kvl_config *cfg,
			  struct kvl_ctrl_link *out, unsigned max)
{
	(void)sysfs_root;
	(void)cfg;
	if (max == 0)
		return 0;
	memset(out, 0, sizeof(*out));
	snprintf(out->nic, sizeof(out->nic), "lo");
	snprintf(out->device, sizeof(out->device), "lo");
	out->transport = KVL_TRANSPORT_TCP;
	out->gid_type = out->gid_index = KVL_CTRL_NONE;
	out->netdev_mtu = 65536;
	return 1;
}

void kvl_doctor_compare(const struct kvl_ctrl_link *here, unsigned n_here,
			const struct kvl_ctrl_link *there, unsigned n_there, const char *peer,
			struct kvl_doc_report *r)
{
	(void)here;
	(void)n_here;
	(void)there;
	(void)n_there;
	(void)peer;
	(void)r;
}

const char *kvl_doc_verdict_name(int v)
{
	return v == 0 ? "PASS" : "?";
}

#include "no_lcore.h"

struct kvl_tcp_conn *kvl_tcp_conn_new(int fd, const struct kvl_seg_table *segs, unsigned depth)
{
	(void)fd;
	(void)segs;
	(void)depth;
	fprintf(stderr, "fuzz_ctl: a data connection handed over from a control connection\n");
	abort();
}

/* ---- the harness ---- */

#define FAIL(...)                                          \
	do {                                               \
		fprintf(stderr, "fuzz_ctl: " __VA_ARGS__); \
		fputc('\n', stderr);                       \
		abort();                                   \
	} while (0)

static struct kvl_runtime rt;
static struct kvl_control *ctl;
static struct kvl_nic_io io;
static struct kvl_secret wrong;
static char lname[sizeof(((struct sockaddr_un *)0)->sun_path)];

/* One input's story, as the other end (the harness) sees it. */
static struct {
	bool server; /* the side under test accepts (the harness is the client) */
	int fd;	     /* the harness's end, -1 once closed */
	uint32_t p;  /* the peer slot under test */
	struct kvl_ctrl_msg hello, challenge; /* as they went over the wire */
	bool got_hello, got_challenge, sent_hello, sent_challenge;
	bool right_proof_sent; /* a right AUTH (server) / AUTH_OK (client) was written */
	bool got_auth_ok, got_auth;
	bool dead_seen;
	bool raw_sent; /* raw bytes went out: what the other side parsed is not known exactly */
	uint8_t rx[FRAME_MAX * 4];
	size_t rx_len;
} h;

static void setup_once(void)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	socklen_t sl;

	if (ctl != NULL)
		return;
	signal(SIGPIPE, SIG_IGN);
	rte_log_set_global_level(RTE_LOG_EMERG); /* the harness checks, the log would only flood */
	kvl_config_defaults(&rt.cfg);
	snprintf(rt.cfg.runtime.name, sizeof(rt.cfg.runtime.name), "fuzz-node");
	rt.cfg.n_nics = 1;
	snprintf(rt.cfg.nics[0].label, sizeof(rt.cfg.nics[0].label), "lo");
	rt.cfg.nics[0].queue_depth = 64;
	/* a tcp NIC on lo: once both sides know each other the client opens its data
	 * connections (towards the harness's endpoints, 127.0.0.1:1, which refuses them) */
	snprintf(rt.cfg.nics[0].device, sizeof(rt.cfg.nics[0].device), "lo");
	rt.cfg.nics[0].qp_count = 2;
	rt.nic[0].info.transport = KVL_TRANSPORT_TCP;
	io.cmd = fake_ring_create("cmd", sizeof(struct kvl_lcmd), 1024, 0,
				  RING_F_SP_ENQ | RING_F_SC_DEQ | RING_F_EXACT_SZ);
	if (io.cmd == NULL)
		FAIL("no ring");
	rt.nic[0].io = &io;
	the_seg.live = true;
	the_seg.desc.id = 1;
	the_seg.desc.flags = 3;
	the_seg.desc.length = 1 << 20;
	the_seg.desc.block_size = 4096;
	the_seg.desc.block_count = 256;
	the_seg.desc.n_layers = 1;
	the_seg.desc.n_planes = 1;
	snprintf(the_seg.desc.name, sizeof(the_seg.desc.name), "kv");
	ctl = calloc(1, sizeof(*ctl));
	if (ctl == NULL)
		FAIL("no memory");
	ctl->rt = &rt;
	ctl->pub = rt.peers.pub;
	ctl->efd = -1;
	for (unsigned n = 0; n < KVL_MAX_NICS; n++)
		ctl->dfd[n] = -1;
	ctl->dfd[0] = open("/dev/null", O_RDONLY | O_CLOEXEC); /* "listening": never polled */
	for (uint32_t p = 0; p < KVL_MAX_PEERS_RT; p++) {
		ctl->peer[p].fd = -1;
		rte_spinlock_init(&ctl->pub[p].lock);
	}
	pthread_mutex_init(&ctl->lock, NULL);
	pthread_cond_init(&ctl->cond, NULL);
	/* the demo secret of the tests; the wrong one differs in one byte */
	memcpy(ctl->secret.key, "kvlane-demo-secret-0123456789abcdef!!", 37);
	ctl->secret.len = 37;
	wrong = ctl->secret;
	wrong.key[5] ^= 1;
	/* the control listener: a unix socket, so accept_control() itself takes the client */
	ctl->lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0);
	snprintf(lname, sizeof(lname), "#kvl-fuzz-ctl-%d", (int)getpid());
	memcpy(sa.sun_path, lname, strlen(lname));
	sa.sun_path[0] = '\0'; /* abstract: nothing on disk */
	sl = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + strlen(lname));
	if (ctl->lfd < 0 || bind(ctl->lfd, (struct sockaddr *)&sa, sl) != 0 ||
	    listen(ctl->lfd, 16) != 0)
		FAIL("control listener: %s", strerror(errno));
}

static unsigned fail_peer_cmds(void)
{
	struct kvl_lcmd cmd;
	unsigned n = 0;

	while (rte_ring_dequeue_elem(io.cmd, &cmd, sizeof(cmd)) == 0)
		n += cmd.type == KVL_LCMD_FAIL_PEER;
	return n;
}

static void reset(void)
{
	for (uint32_t p = 0; p < KVL_MAX_PEERS_RT; p++) {
		if (ctl->pub[p].state == KVL_PEER_FREE && ctl->peer[p].fd < 0)
			continue; /* never used: clearing 64 peers' buffers each run costs the most
				   */
		if (ctl->peer[p].fd >= 0)
			close(ctl->peer[p].fd);
		free(ctl->peer[p].tx);
		memset(&ctl->peer[p], 0, sizeof(ctl->peer[p]));
		ctl->peer[p].fd = -1;
		memset(&ctl->pub[p], 0, sizeof(ctl->pub[p]));
		rte_spinlock_init(&ctl->pub[p].lock);
	}
	for (unsigned i = 0; i < MAX_PENDING; i++)
		if (ctl->pc[i].state != PC_FREE) {
			close(ctl->pc[i].fd);
			ctl->pc[i].state = PC_FREE;
		}
	memset(ctl->fail_owed, 0, sizeof(ctl->fail_owed));
	memset(ctl->lcmd, 0, sizeof(ctl->lcmd));
	(void)fail_peer_cmds();
	if (h.fd >= 0)
		close(h.fd);
	memset(&h, 0, sizeof(h));
	h.fd = -1;
}

static bool authed_state(int st)
{
	return st == KVL_PEER_EXCHANGE || st == KVL_PEER_BINDING || st == KVL_PEER_READY;
}

/* A frame the side under test sent: is it one it may send now? */
static void check_frame(const struct kvl_ctrl_msg *m)
{
	uint8_t mac[KVL_MAC_LEN];

	if (h.dead_seen)
		FAIL("%s sent after the peer was failed", kvl_ctrl_type_name(m->type));
	if (h.server) {
		if (m->type == KVL_CTRL_CHALLENGE) {
			if (h.got_challenge)
				FAIL("a second CHALLENGE");
			h.challenge = *m;
			h.got_challenge = true;
		} else if (m->type == KVL_CTRL_AUTH_OK) {
			if (!h.right_proof_sent)
				FAIL("AUTH_OK without a right proof from the client");
			kvl_auth_server_mac(&ctl->secret, &h.hello, &h.challenge, mac);
			if (!kvl_auth_equal(mac, m->u.auth_ok.mac))
				FAIL("AUTH_OK with a wrong server proof");
			h.got_auth_ok = true;
		} else if (m->type != KVL_CTRL_AUTH_FAIL && !h.got_auth_ok) {
			FAIL("%s sent to a client that never proved the secret",
			     kvl_ctrl_type_name(m->type));
		}
		return;
	}
	if (m->type == KVL_CTRL_HELLO) {
		if (h.got_hello)
			FAIL("a second HELLO");
		h.hello = *m;
		h.got_hello = true;
	} else if (m->type == KVL_CTRL_AUTH) {
		if (h.got_auth)
			FAIL("AUTH twice");
		if (!h.raw_sent && !h.sent_challenge)
			FAIL("AUTH before any CHALLENGE");
		kvl_auth_client_mac(&ctl->secret, &h.hello, &h.challenge, mac);
		if (!h.raw_sent && !kvl_auth_equal(mac, m->u.auth.mac))
			FAIL("our AUTH carries a wrong proof");
		h.got_auth = true;
	} else if (!h.right_proof_sent) {
		FAIL("%s sent to a server that never proved the secret",
		     kvl_ctrl_type_name(m->type));
	}
}

static void read_side(void)
{
	static struct kvl_ctrl_msg m;

	while (h.fd >= 0) {
		ssize_t r = recv(h.fd, h.rx + h.rx_len, sizeof(h.rx) - h.rx_len, MSG_DONTWAIT);
		size_t used;
		int rc;

		if (r <= 0)
			break;
		h.rx_len += (size_t)r;
		while ((rc = kvl_ctrl_decode(h.rx, h.rx_len, &m, &used)) == 1) {
			check_frame(&m);
			memmove(h.rx, h.rx + used, h.rx_len - used);
			h.rx_len -= used;
		}
		if (rc < 0)
			FAIL("the side under test sent a malformed frame: %s",
			     kvl_ctrl_strerror(rc));
	}
}

/* What control_main() does for this peer in one turn, until nothing moves. */
static void serve(void)
{
	struct peer *pr = &ctl->peer[h.p];

	for (int round = 0; round < 16; round++) {
		struct pollfd pf = { .fd = pr->fd, .events = POLLIN };
		int st0 = ctl->pub[h.p].state;
		unsigned cmds;

		if (pr->fd >= 0 && poll(&pf, 1, 0) == 1 &&
		    (pf.revents & (POLLIN | POLLHUP | POLLERR)))
			peer_read(ctl, h.p);
		if (pr->fd >= 0 && pr->tx_len && kvl_ctl_flush(pr) < 0)
			kvl_ctl_peer_fail(ctl, h.p, KVL_ERR_CONN_LOST,
					  "control connection: send failed");
		for (unsigned k = 0; k < MAX_PENDING; k++) { /* our data connections, if any */
			struct pollfd pp = { .fd = ctl->pc[k].fd,
					     .events = ctl->pc[k].state == PC_CONNECTING ? POLLOUT
											 : POLLIN };

			if (ctl->pc[k].state != PC_FREE && poll(&pp, 1, 0) == 1)
				kvl_ctl_pconn_event(ctl, &ctl->pc[k], pp.revents);
		}
		kvl_ctl_lcmd_drain(ctl, kvl_now_ns());
		timers(ctl, kvl_now_ns());
		if (pr->fd >= 0 && pr->tx_len)
			(void)kvl_ctl_flush(pr);
		read_side();
		/* the invariants on the side under test */
		cmds = fail_peer_cmds();
		if (authed_state(ctl->pub[h.p].state) && !h.right_proof_sent)
			FAIL("peer in state %s without a right proof",
			     kvl_peer_state_name(ctl->pub[h.p].state));
		if (cmds && !h.right_proof_sent)
			FAIL("a stranger's connection reached the lcores (%u FAIL_PEER)", cmds);
		if (h.server && !authed_state(ctl->pub[h.p].state) && !h.right_proof_sent &&
		    ctl->pub[h.p].name[0] != '\0')
			FAIL("an unauthenticated client named itself \"%s\"", ctl->pub[h.p].name);
		if (ctl->pub[h.p].state == KVL_PEER_DEAD) {
			if (pr->fd >= 0)
				FAIL("a dead peer's socket is still open");
			h.dead_seen = true;
		}
		if (ctl->pub[h.p].state == KVL_PEER_READY && (!pr->got_segs || !pr->got_eps))
			FAIL("READY before both SEGMENTS and ENDPOINTS");
		for (unsigned k = 0; k < MAX_PENDING; k++)
			if (ctl->pc[k].state != PC_FREE && !h.right_proof_sent)
				FAIL("a data connection opened towards a peer that never proved "
				     "the secret");
		if (st0 != ctl->pub[h.p].state && getenv("KVL_FUZZ_TRACE"))
			fprintf(stderr, "fuzz_ctl: %s -> %s%s%s\n", kvl_peer_state_name(st0),
				kvl_peer_state_name(ctl->pub[h.p].state),
				ctl->pub[h.p].fail_msg[0] ? ": " : "", ctl->pub[h.p].fail_msg);
		if (st0 == ctl->pub[h.p].state && (pf.revents == 0 || pr->fd < 0))
			break;
	}
}

/* Write @m as the real encoder frames it; the opening frames are recorded as the other side
 * decodes them (the proofs hash those). */
static void send_msg(const struct kvl_ctrl_msg *m)
{
	static uint8_t buf[FRAME_MAX];
	static struct kvl_ctrl_msg seen;
	int n = kvl_ctrl_encode(m, buf, sizeof(buf));
	size_t used;

	if (n > 0 && h.fd >= 0 && send(h.fd, buf, (size_t)n, MSG_DONTWAIT | MSG_NOSIGNAL) == n &&
	    kvl_ctrl_decode(buf, (size_t)n, &seen, &used) == 1) {
		if (h.server && seen.type == KVL_CTRL_HELLO && !h.sent_hello) {
			h.hello = seen;
			h.sent_hello = true;
		} else if (!h.server && seen.type == KVL_CTRL_CHALLENGE && !h.sent_challenge &&
			   h.got_hello) {
			h.challenge = seen;
			h.sent_challenge = true;
		}
	}
	serve();
}

static void start(bool server)
{
	int sv[2];

	h.server = server;
	if (server) {
		struct sockaddr_un sa = { .sun_family = AF_UNIX };

		h.fd = socket(AF_UNIX, SOCK_STREAM, 0);
		memcpy(sa.sun_path + 1, lname + 1, strlen(lname) - 1);
		if (h.fd < 0 || connect(h.fd, (struct sockaddr *)&sa,
					(socklen_t)(offsetof(struct sockaddr_un, sun_path) +
						    strlen(lname))) != 0)
			FAIL("connect: %s", strerror(errno));
		accept_control(ctl);
		for (uint32_t p = 0; p < KVL_MAX_PEERS_RT; p++)
			if (ctl->pub[p].state == KVL_PEER_HANDSHAKE)
				h.p = p;
		if (ctl->pub[h.p].state != KVL_PEER_HANDSHAKE)
			FAIL("accept_control() took no peer");
		return;
	}
	/* The connecting side: kvl_ctl_peer_connect() up to the socket, then what the poll
	 * loop does once it is writable. */
	h.p = (uint32_t)kvl_ctl_peer_alloc(ctl, "fuzz-server:1", true);
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv) != 0)
		FAIL("socketpair: %s", strerror(errno));
	h.fd = sv[0];
	ctl->peer[h.p].fd = sv[1];
	ctl->peer[h.p].deadline_ns = kvl_now_ns() + 10000000000ull;
	kvl_ctl_set_state(ctl, h.p, KVL_PEER_CONNECTING);
	kvl_ctl_client_hello(ctl, h.p);
	serve();
}

static void fill(void *dst, size_t cap, const uint8_t *d, size_t size, size_t *i, size_t n)
{
	n = n > cap ? cap : n;
	n = n > size - *i ? size - *i : n;
	memcpy(dst, d + *i, n);
	*i += n;
}

/* Any message, its fields from the input, counts kept in range so the encoder takes it. */
static void any_msg(uint8_t type, const uint8_t *d, size_t size, size_t *i)
{
	static struct kvl_ctrl_msg m;
	uint8_t n = *i < size ? d[(*i)++] : 0;

	memset(&m, 0, sizeof(m));
	m.type = type;
	switch (type) {
	case KVL_CTRL_SEGMENTS:
		m.u.segments.n = n % (KVL_CTRL_MAX_SEGS + 1);
		for (uint32_t k = 0; k < m.u.segments.n; k++) {
			m.u.segments.seg[k] = (struct kvl_seg_desc){
				.id = k + 1,
				.flags = 3,
				.length = 4096u << (k % 8),
				.block_size = 4096,
				.block_count = 1u << (k % 8),
				.n_layers = 1,
				.n_planes = 1,
			};
			snprintf(m.u.segments.seg[k].name, sizeof(m.u.segments.seg[k].name), "s%u",
				 k);
		}
		break;
	case KVL_CTRL_ENDPOINTS:
		m.u.endpoints.n = n % (KVL_CTRL_MAX_EPS + 1);
		for (uint32_t k = 0; k < m.u.endpoints.n; k++) {
			m.u.endpoints.ep[k].transport = KVL_TRANSPORT_TCP;
			snprintf(m.u.endpoints.ep[k].nic, sizeof(m.u.endpoints.ep[k].nic), "n%u",
				 k);
			snprintf(m.u.endpoints.ep[k].addr, sizeof(m.u.endpoints.ep[k].addr),
				 "127.0.0.1:1");
			if (n & 0x80)
				m.u.endpoints.ep[k].transport = KVL_TRANSPORT_VERBS;
		}
		break;
	default:
		fill(&m.u, sizeof(m.u), d, size, i, n % 96);
		break;
	}
	send_msg(&m);
}

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t size)
{
	size_t i = 1;

	if (size == 0)
		return 0;
	setup_once();
	reset();
	start(d[0] & 1);
	while (i < size) {
		uint8_t op = d[i++];
		struct kvl_ctrl_msg m;

		memset(&m, 0, sizeof(m));
		switch (op >> 5) {
		case 0: { /* raw bytes */
			size_t n = (op & 0x1f) + 1u;

			n = n > size - i ? size - i : n;
			h.raw_sent = true;
			if (h.fd >= 0 && send(h.fd, d + i, n, MSG_DONTWAIT | MSG_NOSIGNAL) < 0) {
				/* closed or full: the bytes are lost, as on a real socket */
			}
			i += n;
			serve();
			break;
		}
		case 1: /* the opening frame: HELLO to a server, CHALLENGE to a client */
			if (h.server) {
				m.type = KVL_CTRL_HELLO;
				m.u.hello.min_version = op & 1 ? 1 : KVL_CTRL_VERSION;
				m.u.hello.max_version = op & 2 ? 2 : KVL_CTRL_VERSION;
				snprintf(m.u.hello.name, sizeof(m.u.hello.name), "fuzz-client");
				fill(m.u.hello.nonce, KVL_NONCE_LEN, d, size, &i, op & 0x1c);
			} else {
				m.type = KVL_CTRL_CHALLENGE;
				m.u.challenge.version = KVL_CTRL_VERSION;
				snprintf(m.u.challenge.name, sizeof(m.u.challenge.name),
					 "fuzz-srv");
				fill(m.u.challenge.nonce, KVL_NONCE_LEN, d, size, &i, op & 0x1c);
				fill(&m.u.challenge.session_id, 8, d, size, &i, op & 8);
			}
			send_msg(&m);
			break;
		case 2:	  /* the right proof, from what went over the wire */
		case 3: { /* a wrong one (another secret) */
			bool right = (op >> 5) == 2;
			const struct kvl_secret *s = right ? &ctl->secret : &wrong;

			if (h.server) {
				m.type = KVL_CTRL_AUTH;
				kvl_auth_client_mac(s, &h.hello, &h.challenge, m.u.auth.mac);
				/* right only if the server has the HELLO we hashed and sent a
				 * CHALLENGE: a proof over anything else is a wrong one */
				if (right && h.sent_hello && h.got_challenge)
					h.right_proof_sent = true;
			} else {
				m.type = KVL_CTRL_AUTH_OK;
				kvl_auth_server_mac(s, &h.hello, &h.challenge, m.u.auth_ok.mac);
				if (right && h.got_hello && h.sent_challenge && h.got_auth)
					h.right_proof_sent = true;
			}
			send_msg(&m);
			break;
		}
		case 4:
		case 5: /* any other message */
			any_msg((uint8_t)(1 + op % KVL_CTRL_TYPE_MAX), d, size, &i);
			break;
		case 6: /* the other end goes */
			if (h.fd >= 0) {
				if (op & 1) {
					close(h.fd);
					h.fd = -1;
				} else {
					shutdown(h.fd, SHUT_WR);
				}
			}
			serve();
			break;
		default:
			serve();
			break;
		}
	}
	reset();
	return 0;
}
