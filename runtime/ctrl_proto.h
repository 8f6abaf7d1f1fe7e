/* SPDX-License-Identifier: BSD-3-Clause */
/* Control protocol: framed, versioned messages, their codec, and the HMAC handshake proofs. */
#ifndef KVL_RUNTIME_CTRL_PROTO_H
#define KVL_RUNTIME_CTRL_PROTO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/*
 * Pure C: no sockets, no EAL. The control path feeds received bytes to kvl_ctrl_decode() and
 * sends what kvl_ctrl_encode() writes. Everything on the wire is little-endian and packed by
 * explicit byte encoding (no struct is sent as memory).
 *
 * Frame: 16-byte header, then `length` payload bytes.
 *   u32 magic "KVLC" (0x434c564b)  u16 version (1)  u16 type  u32 length  u32 seq
 * Strings on the wire: u8 length + bytes (no NUL); a decoded string must fit its field
 * (including the NUL the decoder adds) and contain no NUL byte.
 *
 * Handshake (client = the side that connects):
 *   C -> S  HELLO      {min_version, max_version, name, nonce_c[32]}
 *   S -> C  CHALLENGE  {version, name, nonce_s[32], session_id}
 *   C -> S  AUTH       {mac_c[32] = kvl_auth_client_mac(...)}
 *   S -> C  AUTH_OK    {mac_s[32] = kvl_auth_server_mac(...)}   or AUTH_FAIL {reason}
 * The server sends nothing about itself beyond its name and nonce until AUTH verifies; the
 * client checks mac_s before it trusts anything the server says (mutual authentication).
 * Then either side may send at any time:
 *   SEGMENTS   {segment descriptors of the sender}
 *   ENDPOINTS  {data endpoints of the sender: per NIC, transport + address:port}
 *   HEARTBEAT  {seq, sent_ns}     answered by HEARTBEAT_ACK {seq, sent_ns (echoed)}
 *   ERROR      {code, text}       BYE {}
 *   QP_INFO    {conn_index, nic, qpn, psn, gid, lid, mtu, gid_type, gid_index, port}:
 *              the client sends one per RDMA connection it opens, the server answers with
 *              its own for the same conn_index; both then connect their QPs
 *   RKEYS      {nic, [seg_id, rkey, addr]...}: per RDMA NIC, sent after SEGMENTS
 *   REQ_CANCEL {req, status}: the sender canceled its request @req (which READs from the
 *              receiver); one-sided READs hold nothing on the receiver, which counts it
 *   DOCTOR     {reply, [nic, device, transport, link_layer, gid_type, gid_index,
 *              traffic_class, port_mtu, netdev_mtu, ini_mtu, rate_mbps]...}: kvlane-doctor
 *              --peer sends its NICs' link facts (reply 0); the receiver compares them with
 *              its own, logs each mismatch, and answers with its own (reply 1)
 * A data connection (tcp) opens with a challenge of its own, so that a bind seen on the wire
 * cannot be replayed on another connection, then carries only data frames (tcp_data.h):
 *   S -> C  DATA_CHALLENGE {nonce_d[32]}   sent by the server as it accepts
 *   C -> S  DATA_BIND      {session_id, conn_index, conn_count, mac = kvl_auth_data_mac(...)}
 *   S -> C  DATA_BIND_OK {} or AUTH_FAIL {reason}
 * The proof covers both handshake nonces, the session, this connection's nonce_d, its index and
 * how many data connections the client opens in all; the server accepts each index once,
 * below that count, and the same count from every bind of the session.
 */

#define KVL_CTRL_MAGIC 0x434c564bu
/* 2: QP_RESYNC and REQ_CANCEL (a version 1 peer closed the connection on them). 3: the data
 * connection's own challenge (DATA_CHALLENGE; DATA_BIND carries conn_count). A frame of another
 * version is refused, and the log names both versions. */
#define KVL_CTRL_VERSION 3
/*
 * Feature levels above the frame version, negotiated in the handshake without changing the
 * frames: a client offers HELLO max_version = KVL_CTRL_FEATURE_HOST (min_version stays 3, so
 * an older server, which checks only that 3 is inside [min, max], answers CHALLENGE version 3);
 * a server that knows the level answers CHALLENGE version = min(max_version, its own). Both
 * proofs cover these fields. At level 4 both ends send HOST after authentication, and IPC_SEGS
 * once they have the other's HOST; an older peer (level 3) is never sent either: its decoder
 * would refuse the unknown type and close the connection.
 */
#define KVL_CTRL_FEATURE_HOST 4
#define KVL_HOST_ID_LEN	      32
#define KVL_IPC_HANDLE_LEN    64 /* CUipcMemHandle */
#define KVL_GPU_UUID_LEN      16
#define KVL_CTRL_HDR_LEN      16
#define KVL_CTRL_MAX_PAYLOAD  (64u << 10)
#define KVL_CTRL_NAME_LEN     64 /* names: runtime.name, NIC labels, segment names */
#define KVL_CTRL_ADDR_LEN     80
#define KVL_CTRL_TEXT_LEN     160
#define KVL_NONCE_LEN	      32
#define KVL_MAC_LEN	      32 /* HMAC-SHA256 */
#define KVL_CTRL_MAX_SEGS     64
#define KVL_CTRL_MAX_EPS      16

enum kvl_ctrl_type {
	KVL_CTRL_HELLO = 1,
	KVL_CTRL_CHALLENGE = 2,
	KVL_CTRL_AUTH = 3,
	KVL_CTRL_AUTH_OK = 4,
	KVL_CTRL_AUTH_FAIL = 5,
	KVL_CTRL_SEGMENTS = 6,
	KVL_CTRL_ENDPOINTS = 7,
	KVL_CTRL_HEARTBEAT = 8,
	KVL_CTRL_HEARTBEAT_ACK = 9,
	KVL_CTRL_DATA_BIND = 10,
	KVL_CTRL_DATA_BIND_OK = 11,
	KVL_CTRL_ERROR = 12,
	KVL_CTRL_BYE = 13,
	KVL_CTRL_QP_INFO = 14,	  /* RDMA: one RC connection's address (QPN, PSN, GID, MTU) */
	KVL_CTRL_RKEYS = 15,	  /* RDMA: where the sender's segments are on one NIC, and rkeys */
	KVL_CTRL_QP_RESYNC = 16,  /* RDMA: restart both QPs of a connection after an error */
	KVL_CTRL_REQ_CANCEL = 17, /* the sender canceled a request that reads from the receiver */
	KVL_CTRL_DATA_CHALLENGE =
		18,	      /* data port: the accepting side's nonce for this connection */
	KVL_CTRL_DOCTOR = 19, /* kvlane-doctor --peer: both ends' link facts (MTU, GID type...) */
	/* Feature level KVL_CTRL_FEATURE_HOST (below) only: sent to a peer that negotiated it. */
	KVL_CTRL_HOST = 20,	/* the sender's host identity and runtime incarnation */
	KVL_CTRL_IPC_SEGS = 21, /* CUDA IPC handles of the sender's GPU segments (same host) */
	KVL_CTRL_TYPE_MAX = 21,
};

/* Why a frame was refused: kvl_ctrl_decode() returns the negative of one of these. */
enum kvl_ctrl_err {
	KVL_CTRL_E_MAGIC = 1,	/* not a kvlane control stream */
	KVL_CTRL_E_VERSION = 2, /* a protocol version this side does not speak */
	KVL_CTRL_E_TYPE = 3,	/* unknown message type */
	KVL_CTRL_E_LENGTH = 4,	/* payload length over KVL_CTRL_MAX_PAYLOAD, or not the length
				 * the message's fields add up to */
	KVL_CTRL_E_FIELD = 5,	/* a field out of range: string too long or with NUL, count
				 * over its maximum, unknown enum value, ... */
	KVL_CTRL_E_COUNT,
};

/* A segment as advertised to peers: enough to address (segment, layer, plane, block). */
struct kvl_seg_desc {
	uint32_t id;
	uint32_t flags; /* enum kvl_seg_flags (remote read / write) */
	uint64_t length;
	uint32_t block_size;   /* bytes of one block */
	uint32_t block_count;  /* blocks per layer and plane */
	uint32_t n_layers;     /* >= 1 */
	uint32_t n_planes;     /* 1 (K and V together) or 2 (K and V apart) */
	uint64_t layer_stride; /* bytes from layer l to l + 1 */
	uint64_t plane_stride; /* bytes from plane 0 (K) to plane 1 (V) */
	char name[KVL_CTRL_NAME_LEN];
};

/* Where a peer's NIC takes data connections. */
struct kvl_endpoint {
	char nic[KVL_CTRL_NAME_LEN];  /* NIC label */
	uint8_t transport;	      /* enum kvl_transport (tcp now; verbs/mlx5 later) */
	char addr[KVL_CTRL_ADDR_LEN]; /* host:port */
};

/* One NIC's link as kvlane-doctor compares it between the two ends (runtime/doctor.c). */
#define KVL_CTRL_LL_LEN 16
#define KVL_CTRL_NONE	0xff /* gid_type, gid_index: not RDMA, or not known */

struct kvl_ctrl_link {
	char nic[KVL_CTRL_NAME_LEN];	  /* the INI's label */
	char device[KVL_CTRL_NAME_LEN];	  /* mlx5_0, rxe0, lo */
	uint8_t transport;		  /* enum kvl_transport, resolved */
	char link_layer[KVL_CTRL_LL_LEN]; /* "Ethernet", "InfiniBand"; "" for a netdev */
	uint8_t gid_type;		  /* 0 InfiniBand, 1 RoCE v1, 2 RoCE v2, or NONE */
	uint8_t gid_index;		  /* the one kvlane uses, or NONE */
	uint8_t traffic_class;		  /* [nic.*] traffic_class */
	uint32_t port_mtu;		  /* bytes kvlane's QPs use: min(active, INI); 0 none */
	uint32_t netdev_mtu;		  /* bytes; 0 unknown */
	uint32_t ini_mtu;		  /* [nic.*] mtu (RDMA), 0 for tcp */
	uint32_t rate_mbps;		  /* the port's (netdev's) rate; 0 unknown */
};

enum kvl_auth_fail_reason {
	KVL_AUTH_BAD_MAC = 1,	  /* the proof did not verify: wrong secret */
	KVL_AUTH_BAD_SESSION = 2, /* not sent since protocol 3: a DATA_BIND for an unknown session
				   * gets BAD_MAC, like a wrong proof for a live one */
	KVL_AUTH_VERSION = 3,	  /* no common protocol version */
	KVL_AUTH_BAD_BIND = 4,	  /* DATA_BIND of a connection the session did not announce, or
				   * an index bound already (a replay or a duplicate) */
	KVL_AUTH_FAIL_MAX = 4,
};

struct kvl_ctrl_msg {
	uint16_t type;
	uint16_t version; /* of the frame header */
	uint32_t seq;
	union {
		struct {
			uint16_t min_version, max_version;
			char name[KVL_CTRL_NAME_LEN];
			uint8_t nonce[KVL_NONCE_LEN];
		} hello;
		struct {
			uint16_t version;
			char name[KVL_CTRL_NAME_LEN];
			uint8_t nonce[KVL_NONCE_LEN];
			uint64_t session_id;
		} challenge;
		struct {
			uint8_t mac[KVL_MAC_LEN];
		} auth, auth_ok;
		struct {
			uint16_t reason; /* enum kvl_auth_fail_reason */
		} auth_fail;
		struct {
			uint32_t n;
			struct kvl_seg_desc seg[KVL_CTRL_MAX_SEGS];
		} segments;
		struct {
			uint32_t n;
			struct kvl_endpoint ep[KVL_CTRL_MAX_EPS];
		} endpoints;
		struct {
			uint64_t seq;
			uint64_t sent_ns;
		} heartbeat; /* also HEARTBEAT_ACK */
		struct {
			uint64_t session_id;
			uint32_t conn_index;
			uint32_t conn_count; /* data connections the client opens in all */
			uint8_t mac[KVL_MAC_LEN];
		} data_bind;
		struct {
			uint8_t nonce[KVL_NONCE_LEN];
		} data_challenge;
		struct {
			uint16_t code;
			char text[KVL_CTRL_TEXT_LEN];
		} error;
		struct {
			uint32_t conn_index;
			char nic[KVL_CTRL_NAME_LEN];
			uint32_t qpn; /* 24 bits */
			uint32_t psn; /* 24 bits */
			uint8_t gid[16];
			uint16_t lid;
			uint8_t mtu;	  /* enum ibv_mtu: 1 (256) .. 5 (4096) */
			uint8_t gid_type; /* 0 InfiniBand, 1 RoCE v1, 2 RoCE v2 */
			uint8_t gid_index;
			uint8_t port; /* >= 1 */
		} qp_info;
		struct {
			char nic[KVL_CTRL_NAME_LEN];
			uint32_t n;
			struct {
				uint32_t seg_id; /* >= 1 */
				uint32_t rkey;
				uint64_t addr;
			} key[KVL_CTRL_MAX_SEGS];
		} rkeys;
		struct {
			uint32_t kind;	  /* 1 REQ, 2 ACK (enum kvl_resync_kind) */
			uint32_t dst_qpn; /* the receiver's QP: which connection */
			uint32_t src_qpn; /* the sender's */
			uint32_t psn;	  /* the sender's fresh PSN (24 bits) */
			uint32_t echo;	  /* ACK: the PSN of the REQ it answers */
		} qp_resync;
		struct {
			uint64_t req;	 /* the sender's request handle */
			uint32_t status; /* enum kvl_status: why (canceled) */
		} req_cancel;
		struct {
			uint8_t host_id[KVL_HOST_ID_LEN]; /* kvl_host_id(): never a secret */
			uint64_t incarnation; /* the sender runtime's, random at start */
			uint32_t pid;	      /* CUDA IPC cannot open its own process's */
		} host;
		struct {
			uint64_t incarnation; /* the sender runtime's (as in its HOST) */
			uint32_t n; /* 0: nothing to export (another host, no GPU segment) */
			struct kvl_ctrl_ipc_seg {
				uint32_t seg_id;  /* as in SEGMENTS, >= 1 */
				uint32_t seg_gen; /* bumped when the id's segment changes */
				uint8_t gpu_uuid[KVL_GPU_UUID_LEN]; /* the device it lives on */
				uint8_t handle[KVL_IPC_HANDLE_LEN]; /* of the allocation's base */
				uint64_t offset; /* of the segment in that allocation */
				uint64_t length; /* of the segment (== its SEGMENTS length) */
			} seg[KVL_CTRL_MAX_SEGS];
		} ipc_segs;
		struct {
			uint8_t reply; /* 0: kvlane-doctor asks (answer with yours), 1: the answer
					*/
			uint32_t n;
			struct kvl_ctrl_link link[KVL_CTRL_MAX_EPS];
		} doctor;
	} u;
};

/*
 * Decode one frame from @buf (@len bytes available). Returns 1 and fills @msg and *@consumed
 * when a whole, valid frame is there; 0 when more bytes are needed (nothing consumed); or
 * -KVL_CTRL_E_* when the bytes can never become a valid frame (the connection must be closed:
 * there is no way to resynchronise). The header is checked as soon as 16 bytes are there, so
 * a bad magic or an oversized length is refused without waiting for the payload.
 */
int kvl_ctrl_decode(const uint8_t *buf, size_t len, struct kvl_ctrl_msg *msg, size_t *consumed);

/* Encode @msg (type, seq and the matching union member; version is set to KVL_CTRL_VERSION).
 * Returns the frame length, or -ENOSPC if @cap is too small, -EINVAL for an invalid message
 * (the same rules the decoder enforces: what encodes, decodes). */
int kvl_ctrl_encode(const struct kvl_ctrl_msg *msg, uint8_t *buf, size_t cap);

const char *kvl_ctrl_type_name(int type);   /* "HELLO", ... or "?" */
const char *kvl_ctrl_strerror(int err);	    /* for -KVL_CTRL_E_* or KVL_CTRL_E_*: words */
const char *kvl_auth_fail_name(int reason); /* "bad-mac", ... */

/* ---- authentication (OpenSSL libcrypto: RAND_bytes, HMAC-SHA256, CRYPTO_memcmp) ---- */

#define KVL_SECRET_MIN 32
#define KVL_SECRET_MAX 1024

struct kvl_secret {
	uint8_t key[KVL_SECRET_MAX];
	size_t len;
};

/*
 * Read the shared secret from @path: the file's bytes, one trailing newline (\n or \r\n)
 * removed. Refused (negative errno, message in @err naming the path and the fix): missing or
 * unreadable file, not a regular file, fewer than KVL_SECRET_MIN or more than KVL_SECRET_MAX
 * bytes, one byte repeated, and any access for others or for the group (-EPERM), except group
 * read with @group_read (mode 0640: [control] secret_group_readable).
 */
int kvl_secret_load(const char *path, struct kvl_secret *s, bool group_read, char *err,
		    size_t errlen);

/* Cryptographically random bytes (nonces, session ids). Returns 0 or -EIO. */
int kvl_random(void *out, size_t len);

/*
 * The proofs. Each is HMAC-SHA256 under the secret over a domain-separation label and every
 * value of the handshake that an attacker could otherwise swap (both nonces, the session id,
 * both names, the version), so a proof from one role, session or connection never verifies
 * in another.
 */
void kvl_auth_client_mac(const struct kvl_secret *s, const struct kvl_ctrl_msg *hello,
			 const struct kvl_ctrl_msg *challenge, uint8_t out[KVL_MAC_LEN]);
void kvl_auth_server_mac(const struct kvl_secret *s, const struct kvl_ctrl_msg *hello,
			 const struct kvl_ctrl_msg *challenge, uint8_t out[KVL_MAC_LEN]);
/* A data connection's bind: also covers that connection's own nonce (@nonce_d, from its
 * DATA_CHALLENGE), so a bind proves nothing on any other connection. */
void kvl_auth_data_mac(const struct kvl_secret *s, const uint8_t nonce_c[KVL_NONCE_LEN],
		       const uint8_t nonce_s[KVL_NONCE_LEN], const uint8_t nonce_d[KVL_NONCE_LEN],
		       uint64_t session_id, uint32_t conn_index, uint32_t conn_count,
		       uint8_t out[KVL_MAC_LEN]);

/* Constant-time comparison of two MACs. */
bool kvl_auth_equal(const uint8_t a[KVL_MAC_LEN], const uint8_t b[KVL_MAC_LEN]);

#endif /* KVL_RUNTIME_CTRL_PROTO_H */
