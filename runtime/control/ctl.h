/* SPDX-License-Identifier: BSD-3-Clause */
/* Inside the control thread: its state (peers, pending data connections, slots) and calls. */
#ifndef KVL_RUNTIME_CONTROL_CTL_H
#define KVL_RUNTIME_CONTROL_CTL_H

#include <netinet/in.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include <openssl/ssl.h>

#include "control.h"
#include "ctrl_proto.h"
#include "lcmd.h"
#include "nic_io.h"
#include "peers.h"
#include "runtime.h"
#include "verbs.h"
#include "xport_ipc.h"

#define MAX_PENDING 128 /* data connections being bound, both ways */
/* Of those, accepted ones not bound yet: the rest stays for our own outgoing connections,
 * which a flood on our data port must never starve. */
#define MAX_DATA_PREAUTH  64
#define MAX_PREAUTH	  16 /* control connections not authenticated yet */
#define MAX_CONNECT_WAITS 16
#define RECONNECT_NS	  1000000000ull
#define FRAME_MAX	  (KVL_CTRL_HDR_LEN + KVL_CTRL_MAX_PAYLOAD)
#define BIND_TIMEOUT_NS	  5000000000ull

/* ERROR code of a peer that speaks TLS to one that does not (sent in the clear, the text says
 * which side runs what); 1 is a QP set-up failure (rdma.c). */
#define KVL_CTL_ERROR_TLS 2

/* The first bytes a TLS handshake read off the wire: "KVLC" is a peer with tls = off. */
struct kvl_tls_first {
	uint8_t b[4];
	uint8_t n;
};

enum pconn_state {
	PC_FREE = 0,
	PC_CONNECTING,	   /* client: connect() in progress */
	PC_WAIT_CHALLENGE, /* client: connected, waiting for the server's DATA_CHALLENGE */
	PC_BIND_SENT,	   /* client: DATA_BIND sent, waiting for DATA_BIND_OK */
	PC_WAIT_BIND,	   /* server: accepted, DATA_CHALLENGE sent, waiting for DATA_BIND */
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
	uint8_t nonce[KVL_NONCE_LEN]; /* this connection's DATA_CHALLENGE (sent or received) */
	uint64_t accepted_ns;	      /* server: when it was accepted (eviction order) */
	/* [control] tls = on: the connection's TLS (owned with the fd); tls_hs while its
	 * handshake runs, polled for tls_events; the first bytes it read (a cleartext peer?) */
	SSL *ssl;
	bool tls_hs;
	short tls_events;
	struct kvl_tls_first tls_first;
	/* One frame at a time, read exactly (never peeked: data frames may follow it) */
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

/* kvlane-doctor --peer's exchange (doctor.c): one at a time, under kvl_control.lock. */
struct doctor_wait {
	uint32_t peer;
	bool sent, done;
	int result;
	struct kvl_ctrl_msg reply; /* the peer's DOCTOR (reply 1) */
};

/* A data connection slot of a NIC lcore, as the control thread hands them out. */
struct ctl_slot {
	bool used;
	uint32_t gen; /* bumped at every hand-out: the lcore drops what names an older one */
	/* RDMA: the QPs at both ends, which name the connection in QP_RESYNC */
	uint32_t lqpn, rqpn;
	/* and the peer's NIC it reaches, as a label: its rkeys, when its segments change */
	char rnic[KVL_CTRL_NAME_LEN];
};

/* The control thread's own view of a peer (the public part is in struct kvl_peer_pub). */
struct peer {
	int fd;
	/* [control] tls = on: the connection's TLS (owned with the fd); tls_hs while its
	 * handshake runs, polled for tls_events; the first bytes it read (a cleartext peer?) */
	SSL *ssl;
	bool tls_hs;
	short tls_events;
	struct kvl_tls_first tls_first;
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
	/* server: the data connections the client announced in its first bind, and which of
	 * their indexes are bound (each once) */
	uint32_t bind_count;
	uint32_t bind_mask;
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
	/* issue 20 (ipc.c): the feature level both ends speak (handshake), the peer's HOST,
	 * and the GPU segments it exported (IPC_SEGS) */
	uint16_t level;
	bool got_host, got_ipc;
	uint8_t host_id[KVL_HOST_ID_LEN];
	uint64_t incarnation;
	uint32_t pid;
	struct kvl_ipc_rseg ipc_seg[KVL_CTRL_MAX_SEGS];
	uint32_t n_ipc;
	bool ipc_nic[KVL_MAX_NICS]; /* its connection on that NIC is ipc (no other there) */
};

/* A peer the cluster's watch saw leave (runtime/cluster.c): failed as a missed heartbeat
 * fails one. Queued under the control thread's lock, taken each turn. */
#define MAX_GONE 64
struct gone {
	char addr[KVL_CTRL_ADDR_LEN]; /* its advertised control endpoint */
	char name[KVL_CTRL_NAME_LEN]; /* the name its handshake gives */
	char why[KVL_CTRL_TEXT_LEN];
};

struct kvl_control {
	struct kvl_runtime *rt;
	struct kvl_secret secret;
	SSL_CTX *tls;	       /* [control] tls = on, else NULL (tls.c) */
	SSL_SESSION *tls_psk;  /* the external PSK derived from the secret */
	uint64_t tls_failures; /* TLS handshakes that failed (strangers, mismatches) */
	bool ktls_logged;      /* the first TLS data connection said whether the kernel offloads */
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
	struct ctl_slot slot[KVL_MAX_NICS][KVL_SLOTS_PER_LCORE];
	/* Commands a NIC lcore's ring had no room for (lcmd.h), and the peers whose FAIL_PEER
	 * even the backlog refused: sent again each turn, their slots not reused till then. */
	struct kvl_lcmd_backlog lcmd[KVL_MAX_NICS];
	uint64_t fail_owed[KVL_MAX_NICS];
	uint64_t resync_unroutable; /* QP_RESYNC for no connection of that peer's */
	/* Fault injection for tests (KVLANE_TEST_BAD_RKEY): segments advertised with a wrong
	 * rkey, so that a peer's RDMA to them meets a real remote access error. */
	char bad_rkey[256];
	char bad_len[256]; /* KVLANE_TEST_BAD_LEN: advertised twice as long as they are */
	uint64_t auth_failures;
	uint64_t req_cancels_tx, req_cancels_rx; /* REQ_CANCEL sent for our lcores, received */
	uint64_t preauth_evicted;      /* unauthenticated connections closed to make room */
	uint64_t data_preauth_evicted; /* likewise, data connections not bound yet */
	uint64_t warn_ns, warn_suppressed;
	uint32_t segs_version;
	pthread_mutex_t lock; /* API requests and waits */
	pthread_cond_t cond;
	struct connect_wait *req[MAX_CONNECT_WAITS];
	struct gone gone[MAX_GONE]; /* under @lock */
	unsigned n_gone;
	struct doctor_wait *doc; /* kvl_control_doctor() waiting, or NULL */
	/* issue 20: this host's identity and this runtime's incarnation (ipc.c) */
	uint8_t host_id[KVL_HOST_ID_LEN];
	uint64_t incarnation;
	uint64_t ipc_refused; /* IPC_SEGS not taken: another host, a stale incarnation */
};

/* sockets.c */
int kvl_ctl_resolve(const char *addr, struct sockaddr_storage *ss, socklen_t *len, char *err,
		    size_t errlen);
void kvl_ctl_format_addr(const struct sockaddr_storage *ss, char *out, size_t len);
int kvl_ctl_listen_on(const struct sockaddr_storage *ss, socklen_t len, char *bound,
		      size_t boundlen);
int kvl_ctl_netdev_ipv4(const char *dev, struct in_addr *out);
int kvl_ctl_start_connect(const char *addr, int *fd_out, char *err, size_t errlen,
			  const struct in_addr *src);
int kvl_ctl_send_small(int fd, struct kvl_ctrl_msg *m);
/* The same over @ssl's TLS when it is not NULL. */
int kvl_ctl_send_small_tls(int fd, SSL *ssl, struct kvl_ctrl_msg *m);

/* peer.c */
void kvl_ctl_send_msg(struct kvl_control *c, uint32_t p, struct kvl_ctrl_msg *m);
int kvl_ctl_flush(struct peer *pr);
void kvl_ctl_set_state(struct kvl_control *c, uint32_t p, int state);
void kvl_ctl_peer_reset(struct kvl_control *c, uint32_t p, const char *addr, bool initiator);
int kvl_ctl_peer_alloc(struct kvl_control *c, const char *addr, bool initiator);
void kvl_ctl_peer_fail(struct kvl_control *c, uint32_t p, int status, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
void kvl_ctl_peer_connect(struct kvl_control *c, uint32_t p);

/* bind.c */
int kvl_ctl_give_to_lcore(struct kvl_control *c, uint32_t p, unsigned nic, struct kvl_xconn x);
struct pconn *kvl_ctl_pconn_alloc(struct kvl_control *c);
/* Send @cmd to NIC @nic's lcore without ever waiting for it (lcmd.h) and wake the lcore.
 * 0, or -ENOBUFS when the lcore has not taken commands for long: nothing was sent (free what
 * @cmd carries; the caller fails the peer). */
int kvl_ctl_lcmd(struct kvl_control *c, unsigned nic, const struct kvl_lcmd *cmd);
/* Each turn of the loop: what waits moves on; a warning once per stall. */
void kvl_ctl_lcmd_drain(struct kvl_control *c, uint64_t now_ns);
void kvl_ctl_pconn_event(struct kvl_control *c, struct pconn *pc, short revents);
/* Server: send @pc its DATA_CHALLENGE (a fresh nonce). 0 or negative. */
int kvl_ctl_pconn_challenge(struct pconn *pc);
/* Close a pending data connection (its TLS too) and free its slot. */
void kvl_ctl_pconn_close(struct pconn *pc);
/* The poll() events a pending data connection waits for. */
short kvl_ctl_pconn_events(const struct pconn *pc);

/* rdma.c */
bool kvl_ctl_is_rdma(const struct kvl_runtime *rt, unsigned nic);
struct kvl_verbs_conn *kvl_ctl_verbs_conn_new(struct kvl_control *c, unsigned nic,
					      struct kvl_verbs_addr *local, char *err,
					      size_t errlen);
void kvl_ctl_addr_to_msg(struct kvl_ctrl_msg *m, uint32_t idx, const char *nic,
			 const struct kvl_verbs_addr *a);
void kvl_ctl_refresh_remote(struct kvl_control *c, uint32_t p);
void kvl_ctl_resync_send(struct kvl_control *c, unsigned nic, const struct kvl_levt *ev);
void kvl_ctl_on_qp_resync(struct kvl_control *c, uint32_t p, const struct kvl_ctrl_msg *m);

/* doctor.c: a DOCTOR from peer @p (answered with ours, or the reply a waiter expects); the
 * waiter's request sent (from the thread's loop); waiters woken at stop. */
void kvl_ctl_on_doctor(struct kvl_control *c, uint32_t p, const struct kvl_ctrl_msg *m);
void kvl_ctl_take_doctor(struct kvl_control *c);
void kvl_ctl_doctor_cancel(struct kvl_control *c);
void kvl_ctl_on_qp_info_server(struct kvl_control *c, uint32_t p, const struct kvl_ctrl_msg *m);
void kvl_ctl_on_qp_info_client(struct kvl_control *c, uint32_t p, const struct kvl_ctrl_msg *m);

/* exchange.c */
void kvl_ctl_send_segments(struct kvl_control *c, uint32_t p);
void kvl_ctl_send_endpoints(struct kvl_control *c, uint32_t p);
void kvl_ctl_send_rkeys(struct kvl_control *c, uint32_t p);
void kvl_ctl_exchange_msg(struct kvl_control *c, uint32_t p, struct kvl_ctrl_msg *m);

/* tls.c: TLS 1.3 with an external PSK from the secret (SSL_OP_ENABLE_KTLS). */
int kvl_ctl_tls_init(struct kvl_control *c, char *err, size_t errlen); /* 0 when tls = off */
void kvl_ctl_tls_free(struct kvl_control *c);
/* A TLS connection on @fd; @first (which must live until the handshake ends) gets the first
 * bytes read. NULL on failure. */
SSL *kvl_ctl_tls_new(struct kvl_control *c, int fd, bool server, struct kvl_tls_first *first);
/* One step of a handshake: 1 done, 0 to be polled again for *@events, negative with @err set
 * (-EPROTO: a kvlane peer in cleartext, the tls mismatch; -ECONNRESET: closed; -EBADMSG: TLS
 * failed, e.g. another secret). Never loops: each WANT_READ/WRITE goes back to poll(). */
int kvl_ctl_tls_step(SSL *ssl, struct kvl_tls_first *first, short *events, char *err,
		     size_t errlen);
/* recv()/send() (MSG_NOSIGNAL) on @fd when @ssl is NULL, else over TLS; -1 with errno
 * EAGAIN when TLS wants the socket, EPROTO for bad records. */
ssize_t kvl_ctl_recv(int fd, SSL *ssl, void *buf, size_t len);
ssize_t kvl_ctl_send(int fd, SSL *ssl, const void *buf, size_t len);
bool kvl_ctl_tls_pending(SSL *ssl); /* decrypted bytes wait inside TLS (poll() cannot tell) */
void kvl_ctl_tls_close(SSL *ssl);   /* free (NULL is fine); the fd stays the caller's */

/* ipc.c (issue 20): HOST after authentication at level 4, the peer's HOST and IPC_SEGS, our
 * IPC_SEGS to a peer on this host (n = 0 to any other), and the ipc connections of a client. */
void kvl_ctl_ipc_init(struct kvl_control *c);
void kvl_ctl_send_host(struct kvl_control *c, uint32_t p);
void kvl_ctl_send_ipc_segs(struct kvl_control *c, uint32_t p);
void kvl_ctl_on_host(struct kvl_control *c, uint32_t p, const struct kvl_ctrl_msg *m);
void kvl_ctl_on_ipc_segs(struct kvl_control *c, uint32_t p, const struct kvl_ctrl_msg *m);
/* Client, opening data connections: NIC @nic's ipc connection for peer @p into *@x (1), or 0
 * with pub->ipc_why saying why not (the NIC's own transport then serves the peer). */
int kvl_ctl_ipc_conn(struct kvl_control *c, uint32_t p, unsigned nic, struct kvl_xconn *x);

/* handshake.c */
void kvl_ctl_client_hello(struct kvl_control *c, uint32_t p);
void kvl_ctl_handshake_client(struct kvl_control *c, uint32_t p, struct kvl_ctrl_msg *m);
void kvl_ctl_handshake_server(struct kvl_control *c, uint32_t p, struct kvl_ctrl_msg *m);

#endif /* KVL_RUNTIME_CONTROL_CTL_H */
