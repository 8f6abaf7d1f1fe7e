/* SPDX-License-Identifier: BSD-3-Clause */
/* Both handshakes, client and server: HELLO, CHALLENGE, AUTH and their proofs. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "ctl.h"
#include "kvl_clock.h"

/* Client: the control connection is up; say hello. */
void kvl_ctl_client_hello(struct kvl_control *c, uint32_t p)
{
	struct peer *pr = &c->peer[p];

	memset(&pr->hello, 0, sizeof(pr->hello));
	pr->hello.type = KVL_CTRL_HELLO;
	pr->hello.u.hello.min_version = KVL_CTRL_VERSION;
	/* feature level 4 (HOST, IPC_SEGS) offered; frames stay version 3 (ctrl_proto.h) */
	pr->hello.u.hello.max_version = KVL_CTRL_FEATURE_HOST;
	snprintf(pr->hello.u.hello.name, sizeof(pr->hello.u.hello.name), "%s",
		 c->rt->cfg.runtime.name);
	if (kvl_random(pr->hello.u.hello.nonce, KVL_NONCE_LEN) < 0) {
		kvl_ctl_peer_fail(c, p, KVL_ERR_CONN_LOST, "no random bytes for the handshake");
		return;
	}
	kvl_ctl_set_state(c, p, KVL_PEER_HANDSHAKE);
	kvl_ctl_send_msg(c, p, &pr->hello);
}

static void authenticated(struct kvl_control *c, uint32_t p)
{
	struct peer *pr = &c->peer[p];
	uint64_t t = kvl_now_ns();

	kvl_ctl_set_state(c, p, KVL_PEER_EXCHANGE);
	pr->next_hb_ns = t;
	kvl_ctl_send_host(c, p); /* level 4 only; first: the peer answers it with IPC_SEGS */
	if (c->pub[p].state != KVL_PEER_EXCHANGE)
		return;
	/* Each send may fail the peer (a message that cannot be built or queued): then the
	 * rest is not sent, and it is not called authenticated in the log. */
	kvl_ctl_send_segments(c, p);
	if (c->pub[p].state == KVL_PEER_EXCHANGE)
		kvl_ctl_send_rkeys(c,
				   p); /* before ENDPOINTS: the peer connects once it has those */
	if (c->pub[p].state == KVL_PEER_EXCHANGE)
		kvl_ctl_send_endpoints(c, p);
	if (c->pub[p].state != KVL_PEER_EXCHANGE)
		return;
	KVL_LOG(INFO, "peer %u (%s, \"%s\"): authenticated, %s", p, c->pub[p].addr, c->pub[p].name,
		c->pub[p].initiator ? "we connected" : "it connected");
}

/* Client, before authentication: the server's CHALLENGE, then AUTH_OK (its proof) or AUTH_FAIL. */
void kvl_ctl_handshake_client(struct kvl_control *c, uint32_t p, struct kvl_ctrl_msg *m)
{
	struct kvl_peer_pub *pub = &c->pub[p];
	struct peer *pr = &c->peer[p];
	struct kvl_ctrl_msg out;
	uint8_t mac[KVL_MAC_LEN];

	memset(&out, 0, sizeof(out));
	if (m->type == KVL_CTRL_CHALLENGE && pr->challenge.type == 0) {
		pr->challenge = *m;
		pr->session_id = m->u.challenge.session_id;
		/* the level the server chose, never above what we offered */
		pr->level = m->u.challenge.version < KVL_CTRL_FEATURE_HOST ? m->u.challenge.version
									   : KVL_CTRL_FEATURE_HOST;
		rte_spinlock_lock(&pub->lock);
		memcpy(pub->name, m->u.challenge.name, sizeof(pub->name));
		rte_spinlock_unlock(&pub->lock);
		out.type = KVL_CTRL_AUTH;
		kvl_auth_client_mac(&c->secret, &pr->hello, &pr->challenge, out.u.auth.mac);
		kvl_ctl_send_msg(c, p, &out);
	} else if (m->type == KVL_CTRL_AUTH_OK && pr->challenge.type != 0) {
		kvl_auth_server_mac(&c->secret, &pr->hello, &pr->challenge, mac);
		if (!kvl_auth_equal(mac, m->u.auth_ok.mac))
			kvl_ctl_peer_fail(c, p, KVL_ERR_CONN_LOST,
					  "the peer's proof did not verify: it does not hold our "
					  "secret");
		else
			authenticated(c, p);
	} else if (m->type == KVL_CTRL_ERROR && m->u.error.code == KVL_CTL_ERROR_TLS) {
		/* A TLS server answers a cleartext HELLO so, in the clear: we run tls = off. */
		kvl_ctl_peer_fail(
			c, p, KVL_ERR_PROTOCOL,
			"TLS mismatch: refused by the peer (%s), this side has [control] tls "
			"= off: set the same [control] tls on both ends",
			m->u.error.text);
	} else if (m->type == KVL_CTRL_AUTH_FAIL) {
		kvl_ctl_peer_fail(c, p, KVL_ERR_CONN_LOST, "refused by the peer: %s",
				  kvl_auth_fail_name(m->u.auth_fail.reason));
	} else {
		kvl_ctl_peer_fail(c, p, KVL_ERR_PROTOCOL, "unexpected %s during the handshake",
				  kvl_ctrl_type_name(m->type));
	}
}

/* Server, before authentication: the client's HELLO, then AUTH (its proof). */
void kvl_ctl_handshake_server(struct kvl_control *c, uint32_t p, struct kvl_ctrl_msg *m)
{
	struct kvl_peer_pub *pub = &c->pub[p];
	struct peer *pr = &c->peer[p];
	struct kvl_ctrl_msg out;
	uint8_t mac[KVL_MAC_LEN];

	memset(&out, 0, sizeof(out));
	if (m->type == KVL_CTRL_HELLO && pr->hello.type == 0) {
		pr->hello = *m;
		if (m->u.hello.min_version > KVL_CTRL_VERSION ||
		    m->u.hello.max_version < KVL_CTRL_VERSION) {
			out.type = KVL_CTRL_AUTH_FAIL;
			out.u.auth_fail.reason = KVL_AUTH_VERSION;
			kvl_ctl_send_msg(c, p, &out);
			kvl_ctl_peer_fail(c, p, KVL_ERR_PROTOCOL, "no common protocol version");
			return;
		}
		memset(&pr->challenge, 0, sizeof(pr->challenge));
		pr->challenge.type = KVL_CTRL_CHALLENGE;
		/* 3, or the feature level both know (an older client offers 3 only) */
		pr->level = m->u.hello.max_version < KVL_CTRL_FEATURE_HOST ? KVL_CTRL_VERSION
									   : KVL_CTRL_FEATURE_HOST;
		pr->challenge.u.challenge.version = pr->level;
		snprintf(pr->challenge.u.challenge.name, sizeof(pr->challenge.u.challenge.name),
			 "%s", c->rt->cfg.runtime.name);
		if (kvl_random(pr->challenge.u.challenge.nonce, KVL_NONCE_LEN) < 0 ||
		    kvl_random(&pr->session_id, sizeof(pr->session_id)) < 0) {
			kvl_ctl_peer_fail(c, p, KVL_ERR_CONN_LOST, "no random bytes");
			return;
		}
		pr->challenge.u.challenge.session_id = pr->session_id;
		kvl_ctl_send_msg(c, p, &pr->challenge);
	} else if (m->type == KVL_CTRL_AUTH && pr->challenge.type != 0) {
		kvl_auth_client_mac(&c->secret, &pr->hello, &pr->challenge, mac);
		if (!kvl_auth_equal(mac, m->u.auth.mac)) {
			__atomic_fetch_add(&c->auth_failures, 1, __ATOMIC_RELAXED);
			out.type = KVL_CTRL_AUTH_FAIL;
			out.u.auth_fail.reason = KVL_AUTH_BAD_MAC;
			kvl_ctl_send_msg(c, p, &out);
			kvl_ctl_peer_fail(
				c, p, KVL_ERR_CONN_LOST,
				"authentication failed: the peer's proof is wrong (another "
				"secret)");
			return;
		}
		rte_spinlock_lock(&pub->lock);
		memcpy(pub->name, pr->hello.u.hello.name, sizeof(pub->name));
		rte_spinlock_unlock(&pub->lock);
		out.type = KVL_CTRL_AUTH_OK;
		kvl_auth_server_mac(&c->secret, &pr->hello, &pr->challenge, out.u.auth_ok.mac);
		kvl_ctl_send_msg(c, p, &out);
		authenticated(c, p);
	} else {
		kvl_ctl_peer_fail(c, p, KVL_ERR_PROTOCOL, "unexpected %s before authentication",
				  kvl_ctrl_type_name(m->type));
	}
}
