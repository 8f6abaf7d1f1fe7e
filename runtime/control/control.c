/* SPDX-License-Identifier: BSD-3-Clause */
/* Control thread: handshake, metadata exchange, data connection binding, heartbeats. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdarg.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <rte_lcore.h>
#include <rte_ring.h>
#include <rte_ring_elem.h>

#include "kvl_clock.h"
#include "control.h"
#include "kvlane/kvlane.h"
#include "peers.h"
#include "runtime.h"
#include "segments.h"
#include "staging.h"
#include "verbs.h"

#define MAX_PENDING	  128 /* data connections being bound */
#define MAX_PREAUTH	  16  /* control connections not authenticated yet */
#define MAX_CONNECT_WAITS 16
#define RECONNECT_NS	  1000000000ull
#define FRAME_MAX	  (KVL_CTRL_HDR_LEN + KVL_CTRL_MAX_PAYLOAD)
#define BIND_TIMEOUT_NS	  5000000000ull

enum pconn_state {
	PC_FREE = 0,
	PC_CONNECTING, /* client: connect() in progress */
	PC_BIND_SENT,  /* client: DATA_BIND sent, waiting for DATA_BIND_OK */
	PC_WAIT_BIND,  /* server: accepted, waiting for DATA_BIND */
};

/* A data connection between accept/connect and the hand-over to its lcore. */
struct pconn {
	int state;
	int fd;
	unsigned nic;
	uint32_t peer;
	uint32_t peer_gen;
	uint32_t conn_index;
	uint64_t deadline_ns;
	uint8_t rx[256];
	size_t rx_len;
};

/* An API thread in kvl_control_connect(), waiting for its peer to be READY or to fail. */
struct connect_wait {
	char addr[KVL_CTRL_ADDR_LEN];
	uint64_t deadline_ns;
	bool taken, done;
	int result;
	uint32_t peer;
	char msg[KVL_CTRL_TEXT_LEN];
};

/* The control thread's own view of a peer (the public part is in struct kvl_peer_pub). */
struct peer {
	int fd;
	bool auto_reconnect; /* from [control] peers: retried after a failure */
	uint64_t retry_ns;
	uint64_t deadline_ns; /* of the handshake and binding */
	uint8_t rx[FRAME_MAX];
	size_t rx_len;
	uint8_t *tx;
	size_t tx_len, tx_cap;
	struct kvl_ctrl_msg hello, challenge;
	uint64_t session_id;
	bool got_segs, got_eps;
	struct kvl_endpoint eps[KVL_CTRL_MAX_EPS];
	uint32_t n_eps;
	uint64_t next_hb_ns, hb_seq;
	unsigned want_conns, bound_conns;
	struct connect_wait *waiter;
	uint32_t segs_version_sent;
	/* RDMA: the peer's RKEYS (one message per NIC of its), our QPs waiting for its QP_INFO */
	struct kvl_ctrl_msg rkeys[KVL_CTRL_MAX_EPS];
	uint32_t n_rkeys;
	struct vpend {
		struct kvl_verbs_conn *vc;
		unsigned nic;
		uint32_t conn_index;
	} vpend[KVL_PEER_MAX_CONNS];
	unsigned n_vpend;
};

struct kvl_control {
	struct kvl_runtime *rt;
	struct kvl_secret secret;
	pthread_t thread;
	bool running;
	volatile bool stop;
	int efd; /* wakes the thread: API requests, stop, segment changes */
	int lfd; /* control listener */
	char listen_addr[KVL_CTRL_ADDR_LEN];
	int dfd[KVL_MAX_NICS]; /* data listeners of tcp NICs, -1 otherwise */
	struct kvl_endpoint eps[KVL_CTRL_MAX_EPS];
	uint32_t n_eps;
	struct peer peer[KVL_MAX_PEERS_RT];
	struct kvl_peer_pub *pub; /* the runtime's peer table (rt->peers.pub): we write it */
	struct pconn pc[MAX_PENDING];
	bool slot_used[KVL_MAX_NICS][KVL_SLOTS_PER_LCORE];
	uint32_t slot_gen[KVL_MAX_NICS][KVL_SLOTS_PER_LCORE];
	/* RDMA slots: the QPs at both ends, which name the connection in QP_RESYNC */
	uint32_t slot_lqpn[KVL_MAX_NICS][KVL_SLOTS_PER_LCORE];
	uint32_t slot_rqpn[KVL_MAX_NICS][KVL_SLOTS_PER_LCORE];
	/* and the peer's NIC it reaches, as a label: its rkeys, when its segments change */
	char slot_rnic[KVL_MAX_NICS][KVL_SLOTS_PER_LCORE][KVL_CTRL_NAME_LEN];
	uint64_t resync_unroutable; /* QP_RESYNC for no connection of that peer's */
	/* Fault injection for tests (KVLANE_TEST_BAD_RKEY): segments advertised with a wrong
	 * rkey, so that a peer's RDMA to them meets a real remote access error. */
	char bad_rkey[256];
	char bad_len[256]; /* KVLANE_TEST_BAD_LEN: advertised twice as long as they are */
	uint64_t auth_failures;
	uint64_t req_cancels_tx, req_cancels_rx; /* REQ_CANCEL sent for our lcores, received */
	uint64_t preauth_evicted; /* unauthenticated connections closed to make room */
	uint64_t warn_ns, warn_suppressed;
	uint32_t segs_version;
	pthread_mutex_t lock; /* API requests and waits */
	pthread_cond_t cond;
	struct connect_wait *req[MAX_CONNECT_WAITS];
};

static void wake(struct kvl_control *c)
{
	uint64_t one = 1;

	if (write(c->efd, &one, sizeof(one)) < 0) {
		/* The counter is full: the thread is already awake. */
	}
}

/* "host:port" or "[v6]:port" to a socket address (names resolved). */
static int resolve(const char *addr, struct sockaddr_storage *ss, socklen_t *len, char *err,
		   size_t errlen)
{
	char host[KVL_CTRL_ADDR_LEN];
	const char *colon, *h = addr, *port;
	struct addrinfo hints = { .ai_socktype = SOCK_STREAM }, *ai = NULL;
	size_t hl;
	int rc;

	if (addr[0] == '[') {
		const char *close = strchr(addr, ']');

		if (close == NULL || close[1] != ':')
			goto bad;
		h = addr + 1;
		hl = (size_t)(close - h);
		port = close + 2;
	} else {
		colon = strrchr(addr, ':');
		if (colon == NULL)
			goto bad;
		hl = (size_t)(colon - addr);
		port = colon + 1;
	}
	if (hl == 0 || hl >= sizeof(host))
		goto bad;
	memcpy(host, h, hl);
	host[hl] = '\0';
	rc = getaddrinfo(host, port, &hints, &ai);
	if (rc != 0 || ai == NULL) {
		snprintf(err, errlen, "%s: cannot resolve: %s", addr, gai_strerror(rc));
		return -EHOSTUNREACH;
	}
	memcpy(ss, ai->ai_addr, ai->ai_addrlen);
	*len = ai->ai_addrlen;
	freeaddrinfo(ai);
	return 0;
bad:
	snprintf(err, errlen, "%s: expected host:port", addr);
	return -EINVAL;
}

static void format_addr(const struct sockaddr_storage *ss, char *out, size_t len)
{
	char host[INET6_ADDRSTRLEN] = "?";
	unsigned port = 0;

	if (ss->ss_family == AF_INET) {
		const struct sockaddr_in *a = (const void *)ss;

		inet_ntop(AF_INET, &a->sin_addr, host, sizeof(host));
		port = ntohs(a->sin_port);
		snprintf(out, len, "%s:%u", host, port);
	} else if (ss->ss_family == AF_INET6) {
		const struct sockaddr_in6 *a = (const void *)ss;

		inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof(host));
		port = ntohs(a->sin6_port);
		snprintf(out, len, "[%s]:%u", host, port);
	} else {
		snprintf(out, len, "?");
	}
}

static int listen_on(const struct sockaddr_storage *ss, socklen_t len, char *bound, size_t boundlen)
{
	struct sockaddr_storage got;
	socklen_t gl = sizeof(got);
	int one = 1, fd = socket(ss->ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);

	if (fd < 0)
		return -errno;
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(fd, (const struct sockaddr *)ss, len) < 0 || listen(fd, 64) < 0 ||
	    getsockname(fd, (struct sockaddr *)&got, &gl) < 0) {
		int rc = -errno;

		close(fd);
		return rc;
	}
	format_addr(&got, bound, boundlen);
	return fd;
}

/* The IPv4 address of netdev @dev (the tcp transport binds its data path there). */
static int netdev_ipv4(const char *dev, struct in_addr *out)
{
	struct ifaddrs *ifa, *i;
	int rc = -EADDRNOTAVAIL;

	if (getifaddrs(&ifa) < 0)
		return -errno;
	for (i = ifa; i; i = i->ifa_next) {
		if (i->ifa_addr && i->ifa_addr->sa_family == AF_INET &&
		    strcmp(i->ifa_name, dev) == 0) {
			*out = ((struct sockaddr_in *)i->ifa_addr)->sin_addr;
			rc = 0;
			break;
		}
	}
	freeifaddrs(ifa);
	return rc;
}

/* ---- sending ---- */

static void peer_fail(struct kvl_control *c, uint32_t p, int status, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

static int queue_msg(struct peer *pr, struct kvl_ctrl_msg *m)
{
	int n;

	if (pr->tx_cap - pr->tx_len < FRAME_MAX) {
		size_t cap = pr->tx_cap ? pr->tx_cap * 2 : 2 * FRAME_MAX;
		uint8_t *t;

		if (cap > 64 * FRAME_MAX)
			return -ENOBUFS; /* the peer stopped reading */
		t = realloc(pr->tx, cap);
		if (t == NULL)
			return -ENOMEM;
		pr->tx = t;
		pr->tx_cap = cap;
	}
	n = kvl_ctrl_encode(m, pr->tx + pr->tx_len, pr->tx_cap - pr->tx_len);
	if (n < 0)
		return n;
	pr->tx_len += (size_t)n;
	return 0;
}

static void send_msg(struct kvl_control *c, uint32_t p, struct kvl_ctrl_msg *m)
{
	int rc = queue_msg(&c->peer[p], m);

	if (rc < 0)
		peer_fail(c, p, KVL_ERR_CONN_LOST, "cannot queue %s: %s",
			  kvl_ctrl_type_name(m->type), strerror(-rc));
}

static int flush(struct peer *pr)
{
	while (pr->tx_len > 0) {
		ssize_t n = send(pr->fd, pr->tx, pr->tx_len, MSG_NOSIGNAL);

		if (n < 0)
			return errno == EAGAIN || errno == EWOULDBLOCK ? 0 : -errno;
		memmove(pr->tx, pr->tx + n, pr->tx_len - (size_t)n);
		pr->tx_len -= (size_t)n;
	}
	return 0;
}

/* A blocking-free send of one small frame on a data connection being bound. */
static int send_small(int fd, struct kvl_ctrl_msg *m)
{
	uint8_t buf[256];
	int n = kvl_ctrl_encode(m, buf, sizeof(buf));

	if (n < 0)
		return n;
	/* The socket buffer of a fresh connection always takes a few hundred bytes. */
	return send(fd, buf, (size_t)n, MSG_NOSIGNAL) == n ? 0 : -EIO;
}

/* @name is an item of the comma-separated @list. */
static bool listed(const char *list, const char *name)
{
	size_t n = strlen(name);

	for (const char *p = list; n && *p;) {
		const char *e = strchrnul(p, ',');

		if ((size_t)(e - p) == n && memcmp(p, name, n) == 0)
			return true;
		p = *e ? e + 1 : e;
	}
	return false;
}

struct segs_msg {
	struct kvl_control *c;
	struct kvl_ctrl_msg *m;
	unsigned nic; /* RKEYS: their keys on this NIC's device */
};

static void add_seg_desc(void *arg, const struct kvl_local_seg *seg)
{
	struct segs_msg *w = arg;
	struct kvl_seg_desc *d;

	if (w->m->u.segments.n == KVL_CTRL_MAX_SEGS)
		return;
	d = &w->m->u.segments.seg[w->m->u.segments.n++];
	*d = seg->desc;
	if (listed(w->c->bad_len, d->name))
		d->length *= 2; /* fault injection: past the end of its MR */
}

static void send_segments(struct kvl_control *c, uint32_t p)
{
	struct kvl_ctrl_msg *m = calloc(1, sizeof(*m));
	struct segs_msg w = { .c = c, .m = m };

	if (m == NULL)
		return;
	m->type = KVL_CTRL_SEGMENTS;
	c->peer[p].segs_version_sent = kvl_segs_visit(&c->rt->segs, add_seg_desc, &w);
	send_msg(c, p, m);
	free(m);
}

static void send_endpoints(struct kvl_control *c, uint32_t p)
{
	struct kvl_ctrl_msg *m = calloc(1, sizeof(*m));

	if (m == NULL)
		return;
	m->type = KVL_CTRL_ENDPOINTS;
	m->u.endpoints.n = c->n_eps;
	memcpy(m->u.endpoints.ep, c->eps, sizeof(c->eps[0]) * c->n_eps);
	send_msg(c, p, m);
	free(m);
}

/* ---- peers ---- */

static void set_state(struct kvl_control *c, uint32_t p, int state)
{
	__atomic_store_n(&c->pub[p].state, state, __ATOMIC_RELEASE);
	if (state == KVL_PEER_READY || state == KVL_PEER_DEAD) {
		struct connect_wait *w = c->peer[p].waiter;

		if (w) {
			pthread_mutex_lock(&c->lock);
			w->done = true;
			w->peer = p;
			w->result = state == KVL_PEER_READY ? 0 : -ECONNREFUSED;
			if (state == KVL_PEER_DEAD)
				snprintf(w->msg, sizeof(w->msg), "%s", c->pub[p].fail_msg);
			pthread_cond_broadcast(&c->cond);
			pthread_mutex_unlock(&c->lock);
			c->peer[p].waiter = NULL;
		}
	}
}

/* Make slot @p a new peer (its previous one is free, or dead with no connection left). */
static void peer_reset(struct kvl_control *c, uint32_t p, const char *addr, bool initiator)
{
	struct kvl_peer_pub *pub = &c->pub[p];
	struct peer *pr = &c->peer[p];

	{
		/* Counters of the slot's earlier peers stay out of this one's. */
		rte_spinlock_lock(&pub->lock);
		memset(&pub->base, 0, sizeof(pub->base));
		for (unsigned n = 0; n < c->rt->cfg.n_nics; n++)
			if (c->rt->nic[n].io)
				kvl_nic_io_peer_stats(c->rt->nic[n].io, p, &pub->base);
		pub->gen++;
		pub->initiator = initiator;
		snprintf(pub->addr, sizeof(pub->addr), "%s", addr);
		pub->name[0] = '\0';
		pub->n_conns = 0;
		pub->n_segs = 0;
		pub->fail_status = 0;
		pub->fail_msg[0] = '\0';
		pub->last_rx_ns = kvl_now_ns();
		pub->rtt_us = 0;
		pub->heartbeats_rx = 0;
		rte_spinlock_unlock(&pub->lock);
		free(pr->tx);
		memset(pr, 0, sizeof(*pr));
		pr->fd = -1;
	}
}

static int peer_alloc(struct kvl_control *c, const char *addr, bool initiator)
{
	for (uint32_t p = 0; p < KVL_MAX_PEERS_RT; p++) {
		int st = c->pub[p].state;
		struct peer *pr = &c->peer[p];

		if (st != KVL_PEER_FREE && !(st == KVL_PEER_DEAD && !pr->auto_reconnect &&
					     pr->waiter == NULL && c->pub[p].n_conns == 0))
			continue;
		peer_reset(c, p, addr, initiator);
		return (int)p;
	}
	return -ENOSPC;
}

/*
 * Connections that never authenticate are anyone's to open: their warnings are limited to
 * one a second (with the count of those not shown), so they cannot flood the log.
 */
static bool warn_ok(struct kvl_control *c)
{
	uint64_t t = kvl_now_ns();

	if (t - c->warn_ns < 1000000000ull) {
		c->warn_suppressed++;
		return false;
	}
	if (c->warn_suppressed)
		KVL_LOG(WARNING, "%llu more warnings about unauthenticated connections not shown",
			(unsigned long long)c->warn_suppressed);
	c->warn_ns = t;
	c->warn_suppressed = 0;
	return true;
}

static void drop_vpend(struct peer *pr)
{
	for (unsigned i = 0; i < pr->n_vpend; i++)
		if (pr->vpend[i].vc)
			kvl_verbs_conn_free(pr->vpend[i].vc);
	pr->n_vpend = 0;
}

/* Tell every lcore to fail what it has of this peer, and close the control socket. */
static void peer_fail(struct kvl_control *c, uint32_t p, int status, const char *fmt, ...)
{
	struct kvl_peer_pub *pub = &c->pub[p];
	struct peer *pr = &c->peer[p];
	struct kvl_lcmd cmd = { .type = KVL_LCMD_FAIL_PEER, .peer = p, .status = status };
	va_list ap;

	if (pub->state == KVL_PEER_DEAD || pub->state == KVL_PEER_FREE)
		return;
	rte_spinlock_lock(&pub->lock);
	pub->fail_status = status;
	va_start(ap, fmt);
	vsnprintf(pub->fail_msg, sizeof(pub->fail_msg), fmt, ap);
	va_end(ap);
	rte_spinlock_unlock(&pub->lock);
	if (status == KVL_ERR_CANCELED)
		KVL_LOG(INFO, "peer %u (%s%s%s): %s", p, pub->addr, pub->name[0] ? ", " : "",
			pub->name, pub->fail_msg);
	else if (pub->state >= KVL_PEER_EXCHANGE || pub->initiator || warn_ok(c))
		KVL_LOG(WARNING, "peer %u (%s%s%s): %s", p, pub->addr, pub->name[0] ? ", " : "",
			pub->name, pub->fail_msg);
	for (unsigned n = 0; n < c->rt->cfg.n_nics; n++) {
		if (c->rt->nic[n].io == NULL)
			continue;
		while (rte_ring_enqueue_elem(c->rt->nic[n].io->cmd, &cmd, sizeof(cmd)) != 0)
			sched_yield();
		kvl_nic_io_kick(c->rt->nic[n].io);
	}
	for (unsigned i = 0; i < MAX_PENDING; i++) {
		if (c->pc[i].state != PC_FREE && c->pc[i].peer == p) {
			close(c->pc[i].fd);
			c->pc[i].state = PC_FREE;
		}
	}
	drop_vpend(pr);
	if (pr->fd >= 0) {
		struct kvl_ctrl_msg bye = { .type = KVL_CTRL_BYE };

		/* What is queued (an AUTH_FAIL) still goes out; a connection that never
		 * authenticated gets no BYE: nothing more from us. */
		if (pub->state >= KVL_PEER_EXCHANGE)
			queue_msg(pr, &bye);
		flush(pr);
		close(pr->fd);
		pr->fd = -1;
	}
	pr->retry_ns = kvl_now_ns() + RECONNECT_NS;
	set_state(c, p, KVL_PEER_DEAD);
}

static int start_connect(const char *addr, int *fd_out, char *err, size_t errlen,
			 const struct in_addr *src)
{
	struct sockaddr_storage ss;
	socklen_t len;
	int rc = resolve(addr, &ss, &len, err, errlen), fd, one = 1;

	if (rc < 0)
		return rc;
	fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		return -errno;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	if (src && ss.ss_family == AF_INET) {
		struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr = *src };

		if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
			rc = -errno;
			snprintf(err, errlen, "%s: cannot bind to the NIC's address: %s", addr,
				 strerror(errno));
			close(fd);
			return rc;
		}
	}
	if (connect(fd, (struct sockaddr *)&ss, len) < 0 && errno != EINPROGRESS) {
		rc = -errno;
		snprintf(err, errlen, "%s: connect: %s", addr, strerror(errno));
		close(fd);
		return rc;
	}
	*fd_out = fd;
	return 0;
}

static void peer_connect(struct kvl_control *c, uint32_t p)
{
	struct peer *pr = &c->peer[p];
	char err[KVL_CTRL_TEXT_LEN];
	int rc;

	set_state(c, p, KVL_PEER_CONNECTING);
	pr->deadline_ns =
		kvl_now_ns() + (uint64_t)c->rt->cfg.control.connect_timeout_ms * 1000000ull;
	if (pr->waiter && pr->waiter->deadline_ns < pr->deadline_ns)
		pr->deadline_ns = pr->waiter->deadline_ns;
	rc = start_connect(c->pub[p].addr, &pr->fd, err, sizeof(err), NULL);
	if (rc < 0)
		peer_fail(c, p, KVL_ERR_CONN_LOST, "%s", err);
}

/* Client: the control connection is up; say hello. */
static void client_hello(struct kvl_control *c, uint32_t p)
{
	struct peer *pr = &c->peer[p];

	memset(&pr->hello, 0, sizeof(pr->hello));
	pr->hello.type = KVL_CTRL_HELLO;
	pr->hello.u.hello.min_version = KVL_CTRL_VERSION;
	pr->hello.u.hello.max_version = KVL_CTRL_VERSION;
	snprintf(pr->hello.u.hello.name, sizeof(pr->hello.u.hello.name), "%s",
		 c->rt->cfg.runtime.name);
	if (kvl_random(pr->hello.u.hello.nonce, KVL_NONCE_LEN) < 0) {
		peer_fail(c, p, KVL_ERR_CONN_LOST, "no random bytes for the handshake");
		return;
	}
	set_state(c, p, KVL_PEER_HANDSHAKE);
	send_msg(c, p, &pr->hello);
}

static uint32_t slot_take(struct kvl_control *c, unsigned nic)
{
	for (uint32_t s = 0; s < KVL_SLOTS_PER_LCORE; s++) {
		if (!c->slot_used[nic][s]) {
			c->slot_used[nic][s] = true;
			c->slot_gen[nic][s]++;
			return s;
		}
	}
	return UINT32_MAX;
}

/* A bound data connection goes to its NIC's lcore, and into the peer's routing list. */
/* A ready connection (any transport) goes to its NIC's lcore and into the peer's routing
 * list; a client peer is READY once all it opened are there. On failure @x is freed. */
static int give_to_lcore(struct kvl_control *c, uint32_t p, unsigned nic, struct kvl_xconn x)
{
	struct kvl_peer_pub *pub = &c->pub[p];
	struct kvl_lcmd cmd;
	uint32_t slot = pub->n_conns < KVL_PEER_MAX_CONNS ? slot_take(c, nic) : UINT32_MAX;

	if (slot == UINT32_MAX) {
		x.ops->free(x.c);
		peer_fail(c, p, KVL_ERR_CONN_LOST, "no room for another data connection on nic.%s",
			  c->rt->cfg.nics[nic].label);
		return -ENOSPC;
	}
	cmd = (struct kvl_lcmd){ .type = KVL_LCMD_ADD_CONN,
				 .peer = p,
				 .slot = slot,
				 .gen = c->slot_gen[nic][slot],
				 .x = x };
	while (rte_ring_enqueue_elem(c->rt->nic[nic].io->cmd, &cmd, sizeof(cmd)) != 0)
		sched_yield();
	kvl_nic_io_kick(c->rt->nic[nic].io);
	rte_spinlock_lock(&pub->lock);
	pub->conn[pub->n_conns++] = (struct kvl_peer_conn){ .nic = (uint16_t)nic,
							    .slot = (uint16_t)slot,
							    .gen = cmd.gen };
	rte_spinlock_unlock(&pub->lock);
	if (pub->initiator) {
		c->peer[p].bound_conns++;
		if (c->peer[p].bound_conns == c->peer[p].want_conns)
			set_state(c, p, KVL_PEER_READY);
	}
	return (int)slot;
}

/* A bound TCP data connection: its fd now belongs to the transport, then the lcore. */
static void hand_over(struct kvl_control *c, struct pconn *pc)
{
	struct kvl_runtime *rt = c->rt;
	struct kvl_tcp_conn *conn;

	if (c->pub[pc->peer].gen != pc->peer_gen) {
		close(pc->fd);
		pc->state = PC_FREE;
		return;
	}
	conn = kvl_tcp_conn_new(pc->fd, &rt->segs.tab, rt->cfg.nics[pc->nic].queue_depth);
	if (conn == NULL) {
		close(pc->fd);
		pc->state = PC_FREE;
		peer_fail(c, pc->peer, KVL_ERR_CONN_LOST, "nic.%s: cannot set up a connection: %s",
			  rt->cfg.nics[pc->nic].label, strerror(errno));
		return;
	}
	pc->state = PC_FREE;
	give_to_lcore(c, pc->peer, pc->nic, (struct kvl_xconn){ .ops = &kvl_xport_tcp, .c = conn });
}

static struct pconn *pconn_alloc(struct kvl_control *c)
{
	for (unsigned i = 0; i < MAX_PENDING; i++)
		if (c->pc[i].state == PC_FREE) {
			memset(&c->pc[i], 0, sizeof(c->pc[i]));
			return &c->pc[i];
		}
	return NULL;
}

/* ---- RDMA (verbs) connections: QP addresses over the control path ---- */

static bool is_rdma(const struct kvl_runtime *rt, unsigned nic)
{
	return rt->nic[nic].vdev != NULL;
}

static void add_seg_rkey(void *arg, const struct kvl_local_seg *seg)
{
	struct segs_msg *w = arg;
	struct kvl_ctrl_msg *m = w->m;

	if (m->u.rkeys.n == KVL_CTRL_MAX_SEGS)
		return;
	m->u.rkeys.key[m->u.rkeys.n].seg_id = seg->desc.id;
	m->u.rkeys.key[m->u.rkeys.n].rkey = seg->rkey[w->nic];
	if (listed(w->c->bad_rkey, seg->desc.name))
		m->u.rkeys.key[m->u.rkeys.n].rkey ^= 0x5a; /* the key byte */
	m->u.rkeys.key[m->u.rkeys.n].addr = (uintptr_t)seg->base;
	m->u.rkeys.n++;
}

/* RKEYS for each of our RDMA NICs: where every segment is, and its rkey there. */
static void send_rkeys(struct kvl_control *c, uint32_t p)
{
	struct kvl_runtime *rt = c->rt;
	struct kvl_ctrl_msg *m = calloc(1, sizeof(*m));

	if (m == NULL)
		return;
	for (unsigned n = 0; n < rt->cfg.n_nics; n++) {
		struct segs_msg w = { .c = c, .m = m, .nic = n };

		if (!is_rdma(rt, n))
			continue;
		memset(m, 0, sizeof(*m));
		m->type = KVL_CTRL_RKEYS;
		snprintf(m->u.rkeys.nic, sizeof(m->u.rkeys.nic), "%s", rt->cfg.nics[n].label);
		kvl_segs_visit(&rt->segs, add_seg_rkey, &w);
		send_msg(c, p, m);
	}
	free(m);
}

/* The peer's segments on its RDMA NIC @nic, as a verbs connection addresses them. */
static unsigned remote_segs(struct kvl_control *c, uint32_t p, const char *nic,
			    struct kvl_verbs_rseg *out)
{
	struct peer *pr = &c->peer[p];
	struct kvl_peer_pub *pub = &c->pub[p];
	unsigned n = 0;

	for (uint32_t k = 0; k < pr->n_rkeys; k++) {
		if (strcmp(pr->rkeys[k].u.rkeys.nic, nic) != 0)
			continue;
		rte_spinlock_lock(&pub->lock);
		for (uint32_t i = 0; i < pr->rkeys[k].u.rkeys.n; i++)
			for (uint32_t s = 0; s < pub->n_segs; s++)
				if (pub->seg[s].id == pr->rkeys[k].u.rkeys.key[i].seg_id)
					out[n++] = (struct kvl_verbs_rseg){
						.id = pub->seg[s].id,
						.flags = pub->seg[s].flags,
						.addr = pr->rkeys[k].u.rkeys.key[i].addr,
						.len = pub->seg[s].length,
						.rkey = pr->rkeys[k].u.rkeys.key[i].rkey,
					};
		rte_spinlock_unlock(&pub->lock);
	}
	return n;
}

static struct kvl_verbs_conn *verbs_conn_new(struct kvl_control *c, unsigned nic,
					     struct kvl_verbs_addr *local, char *err, size_t errlen)
{
	const struct kvl_config *cfg = &c->rt->cfg;
	const struct kvl_cq_moderation_conf *cq = &cfg->cq_moderation;

	return kvl_verbs_conn_new(c->rt->nic[nic].vdev, cfg->nics[nic].queue_depth,
				  cq->signal_every, cq->enable ? cq->count : 0,
				  cq->enable ? cq->period_us : 0, local, err, errlen);
}

static void addr_to_msg(struct kvl_ctrl_msg *m, uint32_t idx, const char *nic,
			const struct kvl_verbs_addr *a)
{
	memset(m, 0, sizeof(*m));
	m->type = KVL_CTRL_QP_INFO;
	m->u.qp_info.conn_index = idx;
	snprintf(m->u.qp_info.nic, sizeof(m->u.qp_info.nic), "%s", nic);
	m->u.qp_info.qpn = a->qpn;
	m->u.qp_info.psn = a->psn;
	memcpy(m->u.qp_info.gid, a->gid, 16);
	m->u.qp_info.lid = a->lid;
	m->u.qp_info.mtu = a->mtu;
	m->u.qp_info.gid_type = a->gid_type;
	m->u.qp_info.gid_index = a->gid_index;
	m->u.qp_info.port = a->port;
}

static void msg_to_addr(const struct kvl_ctrl_msg *m, struct kvl_verbs_addr *a)
{
	memset(a, 0, sizeof(*a));
	a->qpn = m->u.qp_info.qpn;
	a->psn = m->u.qp_info.psn;
	memcpy(a->gid, m->u.qp_info.gid, 16);
	a->lid = m->u.qp_info.lid;
	a->mtu = m->u.qp_info.mtu;
	a->gid_type = m->u.qp_info.gid_type;
	a->gid_index = m->u.qp_info.gid_index;
	a->port = m->u.qp_info.port;
}

/* Connect @vc towards what the peer sent, give it the peer's segments, hand it over. The
 * mismatch messages (MTU, GID type) go to the peer too, so both ends log the same words. */
static void verbs_finish(struct kvl_control *c, uint32_t p, unsigned nic, struct kvl_verbs_conn *vc,
			 const struct kvl_ctrl_msg *m)
{
	struct kvl_verbs_rseg rs[KVL_CTRL_MAX_SEGS];
	struct kvl_verbs_addr ra;
	char err[KVL_VERBS_ERR_LEN];
	struct kvl_verbs_addr la;
	unsigned n;
	int slot;

	msg_to_addr(m, &ra);
	if (kvl_verbs_conn_connect(vc, &ra, err, sizeof(err)) < 0) {
		struct kvl_ctrl_msg e = { .type = KVL_CTRL_ERROR };

		e.u.error.code = 1;
		snprintf(e.u.error.text, sizeof(e.u.error.text), "%.*s",
			 (int)sizeof(e.u.error.text) - 1, err);
		send_msg(c, p, &e);
		kvl_verbs_conn_free(vc);
		peer_fail(c, p, KVL_ERR_CONN_LOST, "nic.%s: %s", c->rt->cfg.nics[nic].label, err);
		return;
	}
	n = remote_segs(c, p, m->u.qp_info.nic, rs);
	kvl_verbs_set_remote(vc, rs, n);
	kvl_verbs_set_resync_timeout(vc, c->rt->cfg.control.peer_timeout_ms);
	kvl_verbs_conn_addrs(vc, &la, &ra);
	slot = give_to_lcore(c, p, nic, (struct kvl_xconn){ .ops = &kvl_xport_verbs, .c = vc });
	if (slot >= 0) {
		c->slot_lqpn[nic][slot] = la.qpn;
		c->slot_rqpn[nic][slot] = ra.qpn;
		snprintf(c->slot_rnic[nic][slot], sizeof(c->slot_rnic[0][0]), "%s",
			 m->u.qp_info.nic);
	}
}

/*
 * The peer's segments changed (a segment registered after we connected): give each of its
 * RDMA connections the new table. The lcore owns the connection, so the table travels in a
 * command and the lcore swaps it in between two posts.
 */
static void refresh_remote(struct kvl_control *c, uint32_t p)
{
	struct kvl_peer_pub *pub = &c->pub[p];
	struct kvl_peer_conn conn[KVL_PEER_MAX_CONNS];
	uint32_t n_conns;

	rte_spinlock_lock(&pub->lock);
	n_conns = pub->n_conns;
	memcpy(conn, pub->conn, sizeof(conn[0]) * n_conns);
	rte_spinlock_unlock(&pub->lock);
	for (uint32_t i = 0; i < n_conns; i++) {
		unsigned nic = conn[i].nic;
		struct kvl_lcmd cmd = { .type = KVL_LCMD_SET_REMOTE,
					.peer = p,
					.slot = conn[i].slot,
					.gen = conn[i].gen };
		struct kvl_verbs_rseg *rs;

		if (!is_rdma(c->rt, nic))
			continue;
		rs = calloc(KVL_CTRL_MAX_SEGS, sizeof(*rs));
		if (rs == NULL)
			continue; /* the old table stays: the new segment is refused, nothing else
				   */
		cmd.status = (int32_t)remote_segs(c, p, c->slot_rnic[nic][conn[i].slot], rs);
		cmd.ptr = rs;
		while (rte_ring_enqueue_elem(c->rt->nic[nic].io->cmd, &cmd, sizeof(cmd)) != 0)
			sched_yield();
		kvl_nic_io_kick(c->rt->nic[nic].io);
	}
}

/* lcore -> peer: a request of ours that READs from the peer was canceled. The peer holds
 * nothing for one-sided READs, so it only counts it; a dead peer needs no message. */
static void req_cancel_send(struct kvl_control *c, const struct kvl_levt *ev)
{
	struct kvl_ctrl_msg m = { .type = KVL_CTRL_REQ_CANCEL };

	if (ev->peer >= KVL_MAX_PEERS_RT || c->peer[ev->peer].fd < 0 ||
	    __atomic_load_n(&c->pub[ev->peer].state, __ATOMIC_ACQUIRE) != KVL_PEER_READY)
		return;
	m.u.req_cancel.req = ev->req;
	m.u.req_cancel.status = (uint32_t)ev->status;
	send_msg(c, ev->peer, &m);
	__atomic_fetch_add(&c->req_cancels_tx, 1, __ATOMIC_RELAXED);
}

/* lcore -> peer: a resync message of the connection in @slot of @nic. */
static void resync_send(struct kvl_control *c, unsigned nic, const struct kvl_levt *ev)
{
	struct kvl_ctrl_msg m = { .type = KVL_CTRL_QP_RESYNC };

	if (ev->peer >= KVL_MAX_PEERS_RT || !c->slot_used[nic][ev->slot])
		return;
	m.u.qp_resync.kind = ev->rs.kind;
	m.u.qp_resync.dst_qpn = c->slot_rqpn[nic][ev->slot];
	m.u.qp_resync.src_qpn = c->slot_lqpn[nic][ev->slot];
	m.u.qp_resync.psn = ev->rs.psn;
	m.u.qp_resync.echo = ev->rs.echo;
	send_msg(c, ev->peer, &m);
}

/* peer -> lcore: find the connection by its two QPNs among this peer's own. */
static void on_qp_resync(struct kvl_control *c, uint32_t p, const struct kvl_ctrl_msg *m)
{
	struct kvl_peer_pub *pub = &c->pub[p];
	struct kvl_lcmd cmd = { .type = KVL_LCMD_RESYNC, .peer = p };
	unsigned nic = 0;
	bool found = false;

	rte_spinlock_lock(&pub->lock);
	for (uint32_t i = 0; i < pub->n_conns && !found; i++) {
		nic = pub->conn[i].nic;
		cmd.slot = pub->conn[i].slot;
		cmd.gen = pub->conn[i].gen;
		found = is_rdma(c->rt, nic) &&
			c->slot_lqpn[nic][cmd.slot] == m->u.qp_resync.dst_qpn &&
			c->slot_rqpn[nic][cmd.slot] == m->u.qp_resync.src_qpn;
	}
	rte_spinlock_unlock(&pub->lock);
	if (!found) {
		/* A connection closed meanwhile: nothing to restart. */
		__atomic_fetch_add(&c->resync_unroutable, 1, __ATOMIC_RELAXED);
		return;
	}
	cmd.rs =
		(struct kvl_resync){ m->u.qp_resync.kind, m->u.qp_resync.psn, m->u.qp_resync.echo };
	while (rte_ring_enqueue_elem(c->rt->nic[nic].io->cmd, &cmd, sizeof(cmd)) != 0)
		sched_yield();
	kvl_nic_io_kick(c->rt->nic[nic].io);
}

/* Server: a client's RDMA connection. Use our RDMA NIC of the same label, else the first. */
static void on_qp_info_server(struct kvl_control *c, uint32_t p, const struct kvl_ctrl_msg *m)
{
	struct kvl_runtime *rt = c->rt;
	struct kvl_verbs_addr local;
	struct kvl_verbs_conn *vc;
	struct kvl_ctrl_msg out;
	char err[KVL_VERBS_ERR_LEN];
	int nic = -1;

	for (unsigned n = 0; n < rt->cfg.n_nics; n++) {
		if (!is_rdma(rt, n))
			continue;
		if (nic < 0 || strcmp(rt->cfg.nics[n].label, m->u.qp_info.nic) == 0)
			nic = (int)n;
	}
	if (nic < 0) {
		peer_fail(c, p, KVL_ERR_CONN_LOST,
			  "the peer asks for RDMA but we have no RDMA NIC");
		return;
	}
	vc = verbs_conn_new(c, (unsigned)nic, &local, err, sizeof(err));
	if (vc == NULL) {
		peer_fail(c, p, KVL_ERR_CONN_LOST, "nic.%s: %s", rt->cfg.nics[nic].label, err);
		return;
	}
	addr_to_msg(&out, m->u.qp_info.conn_index, rt->cfg.nics[nic].label, &local);
	send_msg(c, p, &out);
	verbs_finish(c, p, (unsigned)nic, vc, m);
}

/* Client: the server's answer for one of the RDMA connections we opened. */
static void on_qp_info_client(struct kvl_control *c, uint32_t p, const struct kvl_ctrl_msg *m)
{
	struct peer *pr = &c->peer[p];

	for (unsigned i = 0; i < pr->n_vpend; i++) {
		if (pr->vpend[i].conn_index != m->u.qp_info.conn_index || pr->vpend[i].vc == NULL)
			continue;
		struct kvl_verbs_conn *vc = pr->vpend[i].vc;

		pr->vpend[i].vc = NULL;
		verbs_finish(c, p, pr->vpend[i].nic, vc, m);
		return;
	}
	peer_fail(c, p, KVL_ERR_PROTOCOL, "QP_INFO for a connection we did not open (%u)",
		  m->u.qp_info.conn_index);
}

/* Client: both sides know each other; open qp_count data connections from each NIC. */
static void open_data(struct kvl_control *c, uint32_t p)
{
	struct kvl_runtime *rt = c->rt;
	struct peer *pr = &c->peer[p];
	uint32_t idx = 0, ep = 0;

	set_state(c, p, KVL_PEER_BINDING);
	for (unsigned n = 0; n < rt->cfg.n_nics; n++) {
		const struct kvl_nic_conf *nc = &rt->cfg.nics[n];
		struct in_addr src;

		if (is_rdma(rt, n)) {
			/* One QP per connection; the server picks its NIC of our label. */
			for (unsigned q = 0; q < nc->qp_count; q++) {
				struct kvl_verbs_addr local;
				struct kvl_ctrl_msg m;
				char err[KVL_VERBS_ERR_LEN];
				struct kvl_verbs_conn *vc;

				if (pr->n_vpend == KVL_PEER_MAX_CONNS) {
					peer_fail(c, p, KVL_ERR_CONN_LOST,
						  "too many RDMA connections");
					return;
				}
				vc = verbs_conn_new(c, n, &local, err, sizeof(err));
				if (vc == NULL) {
					peer_fail(c, p, KVL_ERR_CONN_LOST, "nic.%s: %s", nc->label,
						  err);
					return;
				}
				pr->vpend[pr->n_vpend++] =
					(struct vpend){ .vc = vc, .nic = n, .conn_index = idx };
				addr_to_msg(&m, idx++, nc->label, &local);
				send_msg(c, p, &m);
			}
			continue;
		}
		if (rt->nic[n].info.transport != KVL_TRANSPORT_TCP || c->dfd[n] < 0)
			continue;
		if (netdev_ipv4(nc->device, &src) < 0)
			continue;
		for (unsigned q = 0; q < nc->qp_count; q++) {
			struct pconn *pc = pconn_alloc(c);
			char err[KVL_CTRL_TEXT_LEN];
			const struct kvl_endpoint *e = NULL;

			/* The peer's tcp endpoints, round robin. */
			for (uint32_t k = 0; k < pr->n_eps && e == NULL; k++) {
				const struct kvl_endpoint *cand = &pr->eps[(ep + k) % pr->n_eps];

				if (cand->transport == KVL_TRANSPORT_TCP)
					e = cand;
			}
			ep++;
			if (e == NULL) {
				peer_fail(c, p, KVL_ERR_CONN_LOST,
					  "the peer offers no tcp data endpoint");
				return;
			}
			if (pc == NULL) {
				peer_fail(c, p, KVL_ERR_CONN_LOST,
					  "too many connections in set-up");
				return;
			}
			if (start_connect(e->addr, &pc->fd, err, sizeof(err), &src) < 0) {
				peer_fail(c, p, KVL_ERR_CONN_LOST, "data connection to %s: %s",
					  e->addr, err);
				return;
			}
			pc->state = PC_CONNECTING;
			pc->nic = n;
			pc->peer = p;
			pc->peer_gen = c->pub[p].gen;
			pc->conn_index = idx++;
			pc->deadline_ns = pr->deadline_ns;
		}
	}
	pr->want_conns = idx;
	pr->bound_conns = 0;
	if (idx == 0)
		peer_fail(c, p, KVL_ERR_CONN_LOST,
			  "no local NIC to open data connections from (tcp needs an IPv4 address)");
}

static void maybe_exchanged(struct kvl_control *c, uint32_t p)
{
	struct peer *pr = &c->peer[p];

	if (c->pub[p].state != KVL_PEER_EXCHANGE || !pr->got_segs || !pr->got_eps)
		return;
	if (c->pub[p].initiator)
		open_data(c, p);
	else
		set_state(c, p, KVL_PEER_READY);
}

static void authenticated(struct kvl_control *c, uint32_t p)
{
	struct peer *pr = &c->peer[p];
	uint64_t t = kvl_now_ns();

	set_state(c, p, KVL_PEER_EXCHANGE);
	pr->next_hb_ns = t;
	send_segments(c, p);
	send_rkeys(c, p); /* before ENDPOINTS: the peer opens connections once it has those */
	send_endpoints(c, p);
	KVL_LOG(INFO, "peer %u (%s, \"%s\"): authenticated, %s", p, c->pub[p].addr, c->pub[p].name,
		c->pub[p].initiator ? "we connected" : "it connected");
}

static void handle_msg(struct kvl_control *c, uint32_t p, struct kvl_ctrl_msg *m)
{
	struct kvl_peer_pub *pub = &c->pub[p];
	struct peer *pr = &c->peer[p];
	struct kvl_ctrl_msg out;
	uint8_t mac[KVL_MAC_LEN];
	int st = pub->state;

	memset(&out, 0, sizeof(out));
	pub->last_rx_ns = kvl_now_ns();
	/* Before authentication only the handshake's own messages are accepted. */
	if (st == KVL_PEER_HANDSHAKE && pub->initiator) {
		if (m->type == KVL_CTRL_CHALLENGE && pr->challenge.type == 0) {
			pr->challenge = *m;
			pr->session_id = m->u.challenge.session_id;
			rte_spinlock_lock(&pub->lock);
			memcpy(pub->name, m->u.challenge.name, sizeof(pub->name));
			rte_spinlock_unlock(&pub->lock);
			out.type = KVL_CTRL_AUTH;
			kvl_auth_client_mac(&c->secret, &pr->hello, &pr->challenge, out.u.auth.mac);
			send_msg(c, p, &out);
		} else if (m->type == KVL_CTRL_AUTH_OK && pr->challenge.type != 0) {
			kvl_auth_server_mac(&c->secret, &pr->hello, &pr->challenge, mac);
			if (!kvl_auth_equal(mac, m->u.auth_ok.mac))
				peer_fail(c, p, KVL_ERR_CONN_LOST,
					  "the peer's proof did not verify: it does not hold our "
					  "secret");
			else
				authenticated(c, p);
		} else if (m->type == KVL_CTRL_AUTH_FAIL) {
			peer_fail(c, p, KVL_ERR_CONN_LOST, "refused by the peer: %s",
				  kvl_auth_fail_name(m->u.auth_fail.reason));
		} else {
			peer_fail(c, p, KVL_ERR_PROTOCOL, "unexpected %s during the handshake",
				  kvl_ctrl_type_name(m->type));
		}
		return;
	}
	if (st == KVL_PEER_HANDSHAKE) { /* server */
		if (m->type == KVL_CTRL_HELLO && pr->hello.type == 0) {
			pr->hello = *m;
			if (m->u.hello.min_version > KVL_CTRL_VERSION ||
			    m->u.hello.max_version < KVL_CTRL_VERSION) {
				out.type = KVL_CTRL_AUTH_FAIL;
				out.u.auth_fail.reason = KVL_AUTH_VERSION;
				send_msg(c, p, &out);
				peer_fail(c, p, KVL_ERR_PROTOCOL, "no common protocol version");
				return;
			}
			memset(&pr->challenge, 0, sizeof(pr->challenge));
			pr->challenge.type = KVL_CTRL_CHALLENGE;
			pr->challenge.u.challenge.version = KVL_CTRL_VERSION;
			snprintf(pr->challenge.u.challenge.name,
				 sizeof(pr->challenge.u.challenge.name), "%s",
				 c->rt->cfg.runtime.name);
			if (kvl_random(pr->challenge.u.challenge.nonce, KVL_NONCE_LEN) < 0 ||
			    kvl_random(&pr->session_id, sizeof(pr->session_id)) < 0) {
				peer_fail(c, p, KVL_ERR_CONN_LOST, "no random bytes");
				return;
			}
			pr->challenge.u.challenge.session_id = pr->session_id;
			send_msg(c, p, &pr->challenge);
		} else if (m->type == KVL_CTRL_AUTH && pr->challenge.type != 0) {
			kvl_auth_client_mac(&c->secret, &pr->hello, &pr->challenge, mac);
			if (!kvl_auth_equal(mac, m->u.auth.mac)) {
				__atomic_fetch_add(&c->auth_failures, 1, __ATOMIC_RELAXED);
				out.type = KVL_CTRL_AUTH_FAIL;
				out.u.auth_fail.reason = KVL_AUTH_BAD_MAC;
				send_msg(c, p, &out);
				peer_fail(
					c, p, KVL_ERR_CONN_LOST,
					"authentication failed: the peer's proof is wrong (another "
					"secret)");
				return;
			}
			rte_spinlock_lock(&pub->lock);
			memcpy(pub->name, pr->hello.u.hello.name, sizeof(pub->name));
			rte_spinlock_unlock(&pub->lock);
			out.type = KVL_CTRL_AUTH_OK;
			kvl_auth_server_mac(&c->secret, &pr->hello, &pr->challenge,
					    out.u.auth_ok.mac);
			send_msg(c, p, &out);
			authenticated(c, p);
		} else {
			peer_fail(c, p, KVL_ERR_PROTOCOL, "unexpected %s before authentication",
				  kvl_ctrl_type_name(m->type));
		}
		return;
	}
	switch (m->type) {
	case KVL_CTRL_SEGMENTS:
		rte_spinlock_lock(&pub->lock);
		pub->n_segs = m->u.segments.n;
		memcpy(pub->seg, m->u.segments.seg, sizeof(pub->seg[0]) * pub->n_segs);
		rte_spinlock_unlock(&pub->lock);
		if (pr->got_segs)
			refresh_remote(c, p); /* a later SEGMENTS: its RKEYS came just before */
		pr->got_segs = true;
		maybe_exchanged(c, p);
		break;
	case KVL_CTRL_ENDPOINTS:
		pr->n_eps = m->u.endpoints.n;
		memcpy(pr->eps, m->u.endpoints.ep, sizeof(pr->eps[0]) * pr->n_eps);
		pr->got_eps = true;
		maybe_exchanged(c, p);
		break;
	case KVL_CTRL_RKEYS: {
		uint32_t k = 0;

		/* one per NIC of the peer's; a later one (its segments changed) replaces it */
		while (k < pr->n_rkeys && strcmp(pr->rkeys[k].u.rkeys.nic, m->u.rkeys.nic) != 0)
			k++;
		if (k < KVL_CTRL_MAX_EPS) {
			pr->rkeys[k] = *m;
			if (k == pr->n_rkeys)
				pr->n_rkeys++;
		}
		break;
	}
	case KVL_CTRL_QP_INFO:
		if (pub->initiator && st == KVL_PEER_BINDING)
			on_qp_info_client(c, p, m);
		else if (!pub->initiator && (st == KVL_PEER_EXCHANGE || st == KVL_PEER_READY))
			on_qp_info_server(c, p, m);
		else
			peer_fail(c, p, KVL_ERR_PROTOCOL, "QP_INFO in state %s",
				  kvl_peer_state_name(st));
		break;
	case KVL_CTRL_QP_RESYNC:
		on_qp_resync(c, p, m);
		break;
	case KVL_CTRL_HEARTBEAT:
		out.type = KVL_CTRL_HEARTBEAT_ACK;
		out.u.heartbeat = m->u.heartbeat;
		send_msg(c, p, &out);
		break;
	case KVL_CTRL_REQ_CANCEL:
		__atomic_fetch_add(&c->req_cancels_rx, 1, __ATOMIC_RELAXED);
		KVL_LOG(DEBUG, "peer %u (%s): canceled its request %llu (%s)", p, pub->addr,
			(unsigned long long)m->u.req_cancel.req,
			kvl_status_name((int)m->u.req_cancel.status));
		break;
	case KVL_CTRL_HEARTBEAT_ACK:
		pub->rtt_us = (kvl_now_ns() - m->u.heartbeat.sent_ns) / 1000;
		pub->heartbeats_rx++;
		break;
	case KVL_CTRL_ERROR:
		KVL_LOG(WARNING, "peer %u (%s): error %u: %s", p, pub->addr, m->u.error.code,
			m->u.error.text);
		break;
	case KVL_CTRL_BYE:
		/* A clean goodbye: what was in flight with it is canceled, not lost. */
		peer_fail(c, p, KVL_ERR_CANCELED, "the peer stopped (BYE)");
		break;
	default:
		peer_fail(c, p, KVL_ERR_PROTOCOL, "unexpected %s", kvl_ctrl_type_name(m->type));
		break;
	}
}

static void peer_read(struct kvl_control *c, uint32_t p)
{
	struct peer *pr = &c->peer[p];
	struct kvl_ctrl_msg *m;
	size_t used;
	ssize_t n;
	int rc;

	n = recv(pr->fd, pr->rx + pr->rx_len, sizeof(pr->rx) - pr->rx_len, 0);
	if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) {
		peer_fail(c, p, KVL_ERR_CONN_LOST, "control connection %s",
			  n == 0 ? "closed by the peer" : strerror(errno));
		return;
	}
	if (n < 0)
		return;
	pr->rx_len += (size_t)n;
	m = malloc(sizeof(*m));
	if (m == NULL)
		return;
	while (pr->fd >= 0) {
		rc = kvl_ctrl_decode(pr->rx, pr->rx_len, m, &used);
		if (rc == 0)
			break;
		if (rc == -KVL_CTRL_E_VERSION) {
			/* the header's version: bytes 4-5, little-endian */
			peer_fail(
				c, p, KVL_ERR_PROTOCOL,
				"control protocol version %u from the peer, this kvlane speaks %u: "
				"run the same kvlane release on both ends",
				(unsigned)pr->rx[4] | (unsigned)pr->rx[5] << 8, KVL_CTRL_VERSION);
			break;
		}
		if (rc < 0) {
			/* Nothing after a bad frame can be trusted: close this peer only. */
			peer_fail(c, p, KVL_ERR_PROTOCOL, "malformed control message: %s",
				  kvl_ctrl_strerror(rc));
			break;
		}
		memmove(pr->rx, pr->rx + used, pr->rx_len - used);
		pr->rx_len -= used;
		handle_msg(c, p, m);
	}
	free(m);
}

/* ---- data connections being bound ---- */

static void pconn_event(struct kvl_control *c, struct pconn *pc, short revents)
{
	int reason;
	struct kvl_ctrl_msg m;
	size_t used;
	ssize_t n;
	int rc, soerr = 0;
	socklen_t sl = sizeof(soerr);

	if (pc->state == PC_CONNECTING) {
		if (!(revents & (POLLOUT | POLLERR | POLLHUP)))
			return;
		getsockopt(pc->fd, SOL_SOCKET, SO_ERROR, &soerr, &sl);
		if (soerr) {
			peer_fail(c, pc->peer, KVL_ERR_CONN_LOST, "data connection: %s",
				  strerror(soerr));
			return;
		}
		memset(&m, 0, sizeof(m));
		m.type = KVL_CTRL_DATA_BIND;
		m.u.data_bind.session_id = c->peer[pc->peer].session_id;
		m.u.data_bind.conn_index = pc->conn_index;
		kvl_auth_data_mac(&c->secret, c->peer[pc->peer].hello.u.hello.nonce,
				  c->peer[pc->peer].challenge.u.challenge.nonce,
				  m.u.data_bind.session_id, pc->conn_index, m.u.data_bind.mac);
		if (send_small(pc->fd, &m) < 0) {
			peer_fail(c, pc->peer, KVL_ERR_CONN_LOST, "data connection: cannot bind");
			return;
		}
		pc->state = PC_BIND_SENT;
		return;
	}
	if (!(revents & (POLLIN | POLLERR | POLLHUP)))
		return;
	/* Read only what the bind frame needs: data frames may follow right behind it. */
	n = recv(pc->fd, pc->rx + pc->rx_len, sizeof(pc->rx) - pc->rx_len, MSG_PEEK);
	if (n <= 0) {
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return;
		close(pc->fd);
		pc->state = PC_FREE;
		return;
	}
	rc = kvl_ctrl_decode(pc->rx, (size_t)n, &m, &used);
	if (rc == 0 && (size_t)n < sizeof(pc->rx))
		return; /* wait for the rest; MSG_PEEK left it in the socket */
	if (rc <= 0 || recv(pc->fd, pc->rx, used, 0) != (ssize_t)used) {
		close(pc->fd);
		if (pc->state == PC_BIND_SENT)
			peer_fail(c, pc->peer, KVL_ERR_PROTOCOL, "data connection: bad bind reply");
		pc->state = PC_FREE;
		return;
	}
	if (pc->state == PC_BIND_SENT) {
		if (m.type != KVL_CTRL_DATA_BIND_OK) {
			close(pc->fd);
			pc->state = PC_FREE;
			peer_fail(c, pc->peer, KVL_ERR_CONN_LOST, "data connection refused (%s)",
				  kvl_ctrl_type_name(m.type));
			return;
		}
		hand_over(c, pc);
		return;
	}
	/* Server: find the session and check the proof. */
	reason = KVL_AUTH_BAD_SESSION;
	if (m.type == KVL_CTRL_DATA_BIND) {
		for (uint32_t p = 0; p < KVL_MAX_PEERS_RT; p++) {
			struct peer *pr = &c->peer[p];
			uint8_t mac[KVL_MAC_LEN];
			int st = c->pub[p].state;

			if (c->pub[p].initiator || pr->session_id != m.u.data_bind.session_id ||
			    (st != KVL_PEER_EXCHANGE && st != KVL_PEER_READY))
				continue;
			kvl_auth_data_mac(&c->secret, pr->hello.u.hello.nonce,
					  pr->challenge.u.challenge.nonce, pr->session_id,
					  m.u.data_bind.conn_index, mac);
			if (!kvl_auth_equal(mac, m.u.data_bind.mac)) {
				reason = KVL_AUTH_BAD_MAC; /* a known session, the wrong proof */
				break;
			}
			memset(&m, 0, sizeof(m));
			m.type = KVL_CTRL_DATA_BIND_OK;
			if (send_small(pc->fd, &m) < 0)
				break;
			pc->peer = p;
			pc->peer_gen = c->pub[p].gen;
			hand_over(c, pc);
			return;
		}
	}
	__atomic_fetch_add(&c->auth_failures, 1, __ATOMIC_RELAXED);
	memset(&m, 0, sizeof(m));
	m.type = KVL_CTRL_AUTH_FAIL;
	m.u.auth_fail.reason = (uint16_t)reason;
	send_small(pc->fd, &m);
	close(pc->fd);
	pc->state = PC_FREE;
}

/* ---- the loop ---- */

static void take_api_requests(struct kvl_control *c)
{
	pthread_mutex_lock(&c->lock);
	for (unsigned i = 0; i < MAX_CONNECT_WAITS; i++) {
		struct connect_wait *r = c->req[i];
		int p;

		if (r == NULL || r->taken)
			continue;
		r->taken = true;
		p = peer_alloc(c, r->addr, true);
		if (p < 0) {
			r->done = true;
			r->result = -ENOSPC;
			snprintf(r->msg, sizeof(r->msg), "no free peer slot (at most %d peers)",
				 KVL_MAX_PEERS_RT);
			pthread_cond_broadcast(&c->cond);
			continue;
		}
		c->peer[p].waiter = r;
		pthread_mutex_unlock(&c->lock);
		peer_connect(c, (uint32_t)p);
		pthread_mutex_lock(&c->lock);
	}
	pthread_mutex_unlock(&c->lock);
}

static void take_lcore_events(struct kvl_control *c)
{
	struct kvl_runtime *rt = c->rt;
	struct kvl_levt ev;

	for (unsigned n = 0; n < rt->cfg.n_nics; n++) {
		if (rt->nic[n].io == NULL)
			continue;
		while (rte_ring_dequeue_elem(rt->nic[n].io->evt, &ev, sizeof(ev)) == 0) {
			struct kvl_peer_pub *pub;

			if (ev.slot >= KVL_SLOTS_PER_LCORE)
				continue;
			if (ev.type == KVL_LEVT_RESYNC) {
				resync_send(c, n, &ev);
				continue;
			}
			if (ev.type == KVL_LEVT_REQ_CANCEL) {
				req_cancel_send(c, &ev);
				continue;
			}
			if (ev.type != KVL_LEVT_CONN_CLOSED)
				continue;
			c->slot_used[n][ev.slot] = false;
			if (ev.peer >= KVL_MAX_PEERS_RT)
				continue;
			pub = &c->pub[ev.peer];
			rte_spinlock_lock(&pub->lock);
			for (uint32_t i = 0; i < pub->n_conns; i++) {
				if (pub->conn[i].nic == n && pub->conn[i].slot == ev.slot) {
					pub->conn[i] = pub->conn[--pub->n_conns];
					break;
				}
			}
			rte_spinlock_unlock(&pub->lock);
			/* A data connection that breaks breaks the peer: its requests already
			 * failed with the status the lcore saw. */
			peer_fail(c, ev.peer, ev.status, "data connection lost (%s)",
				  kvl_status_name(ev.status));
		}
	}
}

static void timers(struct kvl_control *c, uint64_t t)
{
	const struct kvl_control_conf *cc = &c->rt->cfg.control;

	for (uint32_t p = 0; p < KVL_MAX_PEERS_RT; p++) {
		struct kvl_peer_pub *pub = &c->pub[p];
		struct peer *pr = &c->peer[p];
		int st = pub->state;

		if (st == KVL_PEER_FREE)
			continue;
		if (st == KVL_PEER_DEAD) {
			/* A configured peer comes back once its connections are gone. */
			if (pr->auto_reconnect && t >= pr->retry_ns && pub->n_conns == 0) {
				char addr[KVL_CTRL_ADDR_LEN];

				snprintf(addr, sizeof(addr), "%s", pub->addr);
				peer_reset(c, p, addr, true);
				pr->auto_reconnect = true;
				peer_connect(c, p);
			}
			continue;
		}
		if (st < KVL_PEER_READY && st != KVL_PEER_EXCHANGE && t > pr->deadline_ns) {
			peer_fail(c, p, KVL_ERR_CONN_LOST, "%s did not finish within %u ms",
				  st == KVL_PEER_CONNECTING  ? "connecting"
				  : st == KVL_PEER_HANDSHAKE ? "the handshake"
							     : "binding data connections",
				  cc->connect_timeout_ms);
			continue;
		}
		if (st >= KVL_PEER_EXCHANGE) {
			if (t - pub->last_rx_ns > (uint64_t)cc->peer_timeout_ms * 1000000ull) {
				peer_fail(c, p, KVL_ERR_PEER_DEAD,
					  "no heartbeat for %u ms (peer_timeout_ms): declared dead",
					  cc->peer_timeout_ms);
				continue;
			}
			if (t >= pr->next_hb_ns) {
				struct kvl_ctrl_msg hb = { .type = KVL_CTRL_HEARTBEAT };

				hb.u.heartbeat.seq = ++pr->hb_seq;
				hb.u.heartbeat.sent_ns = t;
				send_msg(c, p, &hb);
				pr->next_hb_ns =
					t + (uint64_t)cc->heartbeat_interval_ms * 1000000ull;
			}
			if (pr->segs_version_sent !=
			    __atomic_load_n(&c->rt->segs.version, __ATOMIC_ACQUIRE)) {
				send_rkeys(c, p); /* first: the peer joins them on SEGMENTS */
				send_segments(c, p);
			}
		}
	}
	for (unsigned i = 0; i < MAX_PENDING; i++) {
		struct pconn *pc = &c->pc[i];

		if (pc->state != PC_FREE && t > pc->deadline_ns) {
			bool ours = pc->state == PC_BIND_SENT || pc->state == PC_CONNECTING;

			close(pc->fd);
			pc->state = PC_FREE;
			if (ours)
				peer_fail(c, pc->peer, KVL_ERR_CONN_LOST,
					  "data connection set-up timed out");
		}
	}
}

static void accept_control(struct kvl_control *c)
{
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	char addr[KVL_CTRL_ADDR_LEN];
	int fd = accept4(c->lfd, (struct sockaddr *)&ss, &sl, SOCK_NONBLOCK | SOCK_CLOEXEC);
	int p, one = 1;

	uint32_t oldest = UINT32_MAX;
	unsigned preauth = 0;

	if (fd < 0)
		return;
	/* Unauthenticated connections may hold only part of the peer table, so that anyone who
	 * can reach the port cannot lock real peers out: past the cap the oldest one goes. A real
	 * handshake takes a round trip or two; connections that sit silent are what is evicted. */
	for (uint32_t q = 0; q < KVL_MAX_PEERS_RT; q++) {
		if (c->pub[q].state != KVL_PEER_HANDSHAKE || c->pub[q].initiator)
			continue;
		preauth++;
		if (oldest == UINT32_MAX || c->peer[q].deadline_ns < c->peer[oldest].deadline_ns)
			oldest = q;
	}
	if (preauth >= MAX_PREAUTH) {
		__atomic_fetch_add(&c->preauth_evicted, 1, __ATOMIC_RELAXED);
		peer_fail(c, oldest, KVL_ERR_CONN_LOST,
			  "evicted: too many unauthenticated connections (%d)", MAX_PREAUTH);
	}
	format_addr(&ss, addr, sizeof(addr));
	p = peer_alloc(c, addr, false);
	if (p < 0) {
		close(fd);
		return;
	}
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	c->peer[p].fd = fd;
	c->peer[p].deadline_ns =
		kvl_now_ns() + (uint64_t)c->rt->cfg.control.connect_timeout_ms * 1000000ull;
	set_state(c, (uint32_t)p, KVL_PEER_HANDSHAKE);
}

static void accept_data(struct kvl_control *c, unsigned nic)
{
	int fd = accept4(c->dfd[nic], NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC), one = 1;
	struct pconn *pc;

	if (fd < 0)
		return;
	pc = pconn_alloc(c);
	if (pc == NULL) {
		close(fd);
		return;
	}
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	pc->fd = fd;
	pc->state = PC_WAIT_BIND;
	pc->nic = nic;
	pc->peer = UINT32_MAX;
	pc->deadline_ns = kvl_now_ns() + BIND_TIMEOUT_NS;
}

enum { FD_EVENT, FD_LISTEN, FD_DATA, FD_PEER, FD_PENDING };

static void *control_main(void *arg)
{
	struct kvl_control *c = arg;
	struct pollfd pfd[2 + KVL_MAX_NICS + KVL_MAX_PEERS_RT + MAX_PENDING];
	int kind[sizeof(pfd) / sizeof(pfd[0])], who[sizeof(pfd) / sizeof(pfd[0])];

	while (!c->stop) {
		unsigned n = 0;
		int rc;

		pfd[n] = (struct pollfd){ .fd = c->efd, .events = POLLIN };
		kind[n++] = FD_EVENT;
		if (c->lfd >= 0) {
			pfd[n] = (struct pollfd){ .fd = c->lfd, .events = POLLIN };
			kind[n++] = FD_LISTEN;
		}
		for (unsigned i = 0; i < c->rt->cfg.n_nics; i++) {
			if (c->dfd[i] < 0)
				continue;
			pfd[n] = (struct pollfd){ .fd = c->dfd[i], .events = POLLIN };
			who[n] = (int)i;
			kind[n++] = FD_DATA;
		}
		for (uint32_t p = 0; p < KVL_MAX_PEERS_RT; p++) {
			struct peer *pr = &c->peer[p];

			if (pr->fd < 0 || c->pub[p].state == KVL_PEER_FREE)
				continue;
			pfd[n] = (struct pollfd){ .fd = pr->fd, .events = POLLIN };
			if (pr->tx_len || c->pub[p].state == KVL_PEER_CONNECTING)
				pfd[n].events |= POLLOUT;
			who[n] = (int)p;
			kind[n++] = FD_PEER;
		}
		for (unsigned i = 0; i < MAX_PENDING; i++) {
			if (c->pc[i].state == PC_FREE)
				continue;
			pfd[n] = (struct pollfd){ .fd = c->pc[i].fd,
						  .events = c->pc[i].state == PC_CONNECTING
								    ? POLLOUT
								    : POLLIN };
			who[n] = (int)i;
			kind[n++] = FD_PENDING;
		}
		rc = poll(pfd, n, 10);
		for (unsigned i = 0; rc > 0 && i < n; i++) {
			short re = pfd[i].revents;

			if (re == 0)
				continue;
			switch (kind[i]) {
			case FD_EVENT: {
				uint64_t v;

				if (read(c->efd, &v, sizeof(v)) < 0) {
					/* nothing to clear */
				}
				break;
			}
			case FD_LISTEN:
				accept_control(c);
				break;
			case FD_DATA:
				accept_data(c, (unsigned)who[i]);
				break;
			case FD_PEER: {
				uint32_t p = (uint32_t)who[i];
				struct peer *pr = &c->peer[p];

				if (c->pub[p].state == KVL_PEER_CONNECTING) {
					int soerr = 0;
					socklen_t sl = sizeof(soerr);

					getsockopt(pr->fd, SOL_SOCKET, SO_ERROR, &soerr, &sl);
					if (soerr)
						peer_fail(c, p, KVL_ERR_CONN_LOST, "connect: %s",
							  strerror(soerr));
					else if (re & POLLOUT)
						client_hello(c, p);
				}
				if (pr->fd >= 0 && (re & (POLLIN | POLLHUP | POLLERR)))
					peer_read(c, p);
				if (pr->fd >= 0 && pr->tx_len && flush(pr) < 0)
					peer_fail(c, p, KVL_ERR_CONN_LOST,
						  "control connection: send failed");
				break;
			}
			case FD_PENDING:
				if (c->pc[who[i]].state != PC_FREE)
					pconn_event(c, &c->pc[who[i]], re);
				break;
			}
		}
		take_api_requests(c);
		take_lcore_events(c);
		timers(c, kvl_now_ns());
		/* Flush what handling queued, without waiting for POLLOUT. */
		for (uint32_t p = 0; p < KVL_MAX_PEERS_RT; p++)
			if (c->peer[p].fd >= 0 && c->peer[p].tx_len &&
			    c->pub[p].state != KVL_PEER_CONNECTING && flush(&c->peer[p]) < 0)
				peer_fail(c, p, KVL_ERR_CONN_LOST,
					  "control connection: send failed");
		if (c->rt->gpu.open)
			kvl_staging_sample(c->rt);
	}
	return NULL;
}

/* ---- start, stop, API ---- */

static int open_data_listeners(struct kvl_control *c, char *err, size_t errlen)
{
	struct kvl_runtime *rt = c->rt;

	for (unsigned n = 0; n < KVL_MAX_NICS; n++)
		c->dfd[n] = -1;
	for (unsigned n = 0; n < rt->cfg.n_nics; n++) {
		const struct kvl_nic_conf *nc = &rt->cfg.nics[n];
		struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons(nc->data_port) };
		struct kvl_endpoint *e;
		int fd;

		if (is_rdma(rt, n)) {
			e = &c->eps[c->n_eps++];
			snprintf(e->nic, sizeof(e->nic), "%s", nc->label);
			e->transport = KVL_TRANSPORT_VERBS; /* its QPs are set up over QP_INFO */
			continue;
		}
		if (rt->nic[n].info.transport != KVL_TRANSPORT_TCP)
			continue;
		if (netdev_ipv4(nc->device, &sa.sin_addr) < 0) {
			snprintf(err, errlen,
				 "nic.%s (%s): the netdev has no IPv4 address; the tcp transport "
				 "listens for data there",
				 nc->label, nc->device);
			return -EADDRNOTAVAIL;
		}
		e = &c->eps[c->n_eps];
		fd = listen_on((struct sockaddr_storage *)&sa, sizeof(sa), e->addr,
			       sizeof(e->addr));
		if (fd < 0) {
			snprintf(err, errlen, "nic.%s (%s): cannot listen for data on port %u: %s",
				 nc->label, nc->device, nc->data_port, strerror(-fd));
			return fd;
		}
		c->dfd[n] = fd;
		snprintf(e->nic, sizeof(e->nic), "%s", nc->label);
		e->transport = KVL_TRANSPORT_TCP;
		c->n_eps++;
	}
	return 0;
}

static void control_free(struct kvl_control *c)
{
	if (c->lfd >= 0)
		close(c->lfd);
	for (unsigned n = 0; n < KVL_MAX_NICS; n++)
		if (c->dfd[n] >= 0)
			close(c->dfd[n]);
	for (uint32_t p = 0; p < KVL_MAX_PEERS_RT; p++) {
		if (c->peer[p].fd >= 0)
			close(c->peer[p].fd);
		free(c->peer[p].tx);
	}
	for (unsigned i = 0; i < MAX_PENDING; i++)
		if (c->pc[i].state != PC_FREE)
			close(c->pc[i].fd);
	if (c->efd >= 0)
		close(c->efd);
	memset(&c->secret, 0, sizeof(c->secret));
	pthread_mutex_destroy(&c->lock);
	pthread_cond_destroy(&c->cond);
	free(c);
}

/* Fault injection for tests: segments named in @env are advertised with @what. */
static void fault(char *list, size_t cap, const char *env, const char *what)
{
	const char *v = getenv(env);

	if (v == NULL || v[0] == '\0')
		return;
	snprintf(list, cap, "%s", v);
	KVL_LOG(WARNING,
		"test fault injection: segment(s) \"%s\" are advertised to peers with %s (%s); "
		"never set it outside tests",
		list, what, env);
}

int kvl_control_start(struct kvl_runtime *rt, char *err, size_t errlen)
{
	const struct kvl_control_conf *cc = &rt->cfg.control;
	struct sockaddr_storage ss;
	socklen_t sl;
	struct kvl_control *c;
	bool warn = false;
	int rc;

	if (cc->secret_file[0] == '\0')
		return 0; /* no secret, no control path: a runtime on its own */
	c = calloc(1, sizeof(*c));
	if (c == NULL)
		return -ENOMEM;
	c->rt = rt;
	c->lfd = -1;
	for (unsigned n = 0; n < KVL_MAX_NICS; n++)
		c->dfd[n] = -1;
	c->pub = rt->peers.pub;
	for (uint32_t p = 0; p < KVL_MAX_PEERS_RT; p++) {
		c->peer[p].fd = -1;
		rte_spinlock_init(&c->pub[p].lock);
	}
	pthread_mutex_init(&c->lock, NULL);
	pthread_cond_init(&c->cond, NULL);
	c->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	rc = c->efd < 0 ? -errno : 0;
	if (rc == 0)
		rc = kvl_secret_load(cc->secret_file, &c->secret, &warn, err, errlen);
	if (rc == 0 && warn)
		KVL_LOG(WARNING, "%s", err);
	fault(c->bad_rkey, sizeof(c->bad_rkey), "KVLANE_TEST_BAD_RKEY", "a wrong rkey");
	fault(c->bad_len, sizeof(c->bad_len), "KVLANE_TEST_BAD_LEN", "twice their length");
	if (rc == 0)
		rc = resolve(cc->listen, &ss, &sl, err, errlen);
	if (rc == 0) {
		c->lfd = listen_on(&ss, sl, c->listen_addr, sizeof(c->listen_addr));
		if (c->lfd < 0) {
			rc = c->lfd;
			snprintf(err, errlen, "control.listen = %s: cannot listen: %s", cc->listen,
				 strerror(-rc));
		}
	}
	if (rc == 0)
		rc = open_data_listeners(c, err, errlen);
	if (rc == 0) {
		rt->ctl = c;
		__atomic_store_n(&rt->peers.on, true, __ATOMIC_RELEASE);
		for (uint32_t i = 0; i < cc->n_peers; i++) {
			int p = peer_alloc(c, cc->peers[i], true);

			if (p >= 0) {
				c->peer[p].auto_reconnect = true;
				peer_connect(c, (uint32_t)p);
			}
		}
		rc = rte_ctrl_thread_create(&c->thread, "kvl-ctrl", NULL, control_main, c);
		if (rc != 0) {
			snprintf(err, errlen, "cannot start the control thread: %s", strerror(rc));
			rc = -rc;
			__atomic_store_n(&rt->peers.on, false, __ATOMIC_RELEASE);
			rt->ctl = NULL;
		}
	}
	if (rc < 0) {
		control_free(c);
		return rc;
	}
	c->running = true;
	return 0;
}

void kvl_control_stop(struct kvl_runtime *rt)
{
	struct kvl_control *c = rt->ctl;

	if (c == NULL)
		return;
	c->stop = true;
	wake(c);
	pthread_join(c->thread, NULL);
	/* Say goodbye, and cancel what is in flight (the lcores still run). */
	for (uint32_t p = 0; p < KVL_MAX_PEERS_RT; p++)
		peer_fail(c, p, KVL_ERR_CANCELED, "this runtime is stopping");
	/* Wake API callers still waiting. */
	pthread_mutex_lock(&c->lock);
	for (unsigned i = 0; i < MAX_CONNECT_WAITS; i++)
		if (c->req[i] && !c->req[i]->done) {
			c->req[i]->done = true;
			c->req[i]->result = -ECANCELED;
			snprintf(c->req[i]->msg, sizeof(c->req[i]->msg), "the runtime stopped");
		}
	pthread_cond_broadcast(&c->cond);
	pthread_mutex_unlock(&c->lock);
	__atomic_store_n(&rt->peers.on, false, __ATOMIC_RELEASE);
	rt->ctl = NULL;
	control_free(c);
}

int kvl_control_connect(struct kvl_runtime *rt, const char *addr, unsigned timeout_ms,
			uint32_t *peer, char *err, size_t errlen)
{
	struct kvl_control *c = rt->ctl;
	struct connect_wait r;
	struct timespec ts;
	unsigned slot = MAX_CONNECT_WAITS;
	int rc;

	if (c == NULL) {
		snprintf(err, errlen, "the control path is off: set [control] secret_file");
		return -ENOTSUP;
	}
	memset(&r, 0, sizeof(r));
	snprintf(r.addr, sizeof(r.addr), "%s", addr);
	r.deadline_ns = kvl_now_ns() + (uint64_t)timeout_ms * 1000000ull;
	pthread_mutex_lock(&c->lock);
	for (unsigned i = 0; i < MAX_CONNECT_WAITS; i++)
		if (c->req[i] == NULL) {
			c->req[i] = &r;
			slot = i;
			break;
		}
	if (slot == MAX_CONNECT_WAITS) {
		pthread_mutex_unlock(&c->lock);
		snprintf(err, errlen, "too many connects in progress");
		return -EBUSY;
	}
	wake(c);
	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += (timeout_ms + 1000) / 1000 + 1; /* the thread enforces the real deadline */
	while (!r.done) {
		if (pthread_cond_timedwait(&c->cond, &c->lock, &ts) == ETIMEDOUT && !r.done) {
			r.result = -ETIMEDOUT;
			snprintf(r.msg, sizeof(r.msg), "no answer from the control thread");
			break;
		}
	}
	/* Detach from the peer before our stack frame goes. */
	for (uint32_t p = 0; p < KVL_MAX_PEERS_RT; p++)
		if (c->peer[p].waiter == &r)
			c->peer[p].waiter = NULL;
	c->req[slot] = NULL;
	pthread_mutex_unlock(&c->lock);
	rc = r.result;
	if (rc == 0)
		*peer = r.peer;
	else
		snprintf(err, errlen, "%s: %s", addr, r.msg[0] ? r.msg : strerror(-rc));
	return rc;
}

void kvl_control_segments_changed(struct kvl_runtime *rt)
{
	if (rt->ctl)
		wake(rt->ctl);
}

bool kvl_control_enabled(const struct kvl_runtime *rt)
{
	return rt->ctl != NULL;
}

const char *kvl_control_listen_addr(const struct kvl_runtime *rt)
{
	return rt->ctl ? rt->ctl->listen_addr : "";
}

void kvl_control_req_cancels(const struct kvl_runtime *rt, uint64_t *tx, uint64_t *rx)
{
	*tx = rt->ctl ? __atomic_load_n(&rt->ctl->req_cancels_tx, __ATOMIC_RELAXED) : 0;
	*rx = rt->ctl ? __atomic_load_n(&rt->ctl->req_cancels_rx, __ATOMIC_RELAXED) : 0;
}

uint64_t kvl_control_auth_failures(const struct kvl_runtime *rt)
{
	return rt->ctl ? __atomic_load_n(&rt->ctl->auth_failures, __ATOMIC_RELAXED) : 0;
}

uint64_t kvl_control_preauth_evicted(const struct kvl_runtime *rt)
{
	return rt->ctl ? __atomic_load_n(&rt->ctl->preauth_evicted, __ATOMIC_RELAXED) : 0;
}
