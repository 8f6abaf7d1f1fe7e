/* SPDX-License-Identifier: BSD-3-Clause */
/* Verbs transport, QP_RESYNC: after an error both ends restart their QPs at fresh PSNs. */
#include <string.h>

#include "kvl_clock.h"
#include "verbs_priv.h"

/* Post again what the last incarnation flushed, and what was taken meanwhile. */
static void replay(struct kvl_verbs_conn *c)
{
	kvl_verbs_post_range(c, c->done_seq);
}

/* Both ends agreed: restart at the fresh PSNs, post again what was flushed. */
static void restart(struct kvl_verbs_conn *c, uint32_t local_psn, uint32_t remote_psn)
{
	c->local.psn = local_psn;
	c->remote.psn = remote_psn;
	c->phase = PH_RUN;
	c->resp_pending = false;
	if (kvl_verbs_qp_start(c, NULL, 0) != 0) {
		kvl_verbs_fail_all(c, KVL_ERR_CONN_LOST);
		return;
	}
	c->stats.recoveries++;
	replay(c);
}

/* Our end restarts in the peer's place when the tie says so: the lower (GID, QPN) yields,
 * so two REQs that cross resolve to one REQ and one ACK. */
static bool we_yield(const struct kvl_verbs_conn *c)
{
	int r = memcmp(c->local.gid, c->remote.gid, sizeof(c->local.gid));

	return r < 0 || (r == 0 && c->local.qpn < c->remote.qpn);
}

static void answer(struct kvl_verbs_conn *c, uint32_t my_psn, uint32_t their_psn)
{
	c->ack_due = true;
	c->ack_psn = my_psn;
	c->ack_echo = their_psn;
	c->answered = true;
	c->stats.resync_answered++;
	restart(c, my_psn, their_psn);
}

/* Every receive the QP held came back flushed (RQ_DRAIN_NS says why it matters), or the
 * provider took too long to flush them. */
static bool rq_drained(struct kvl_verbs_conn *c)
{
	if (c->rq_posted == 0)
		return true;
	if (kvl_now_ns() < c->rq_drain_deadline)
		return false;
	c->stats.rq_drain_timeouts++;
	return true;
}

unsigned kvl_verbs_resync_step(struct kvl_verbs_conn *c)
{
	if (c->phase == PH_DRAIN && c->flush_end >= c->nic_end && rq_drained(c)) {
		/* Everything the QP held came back: ask the peer, or answer its REQ. */
		if (c->resp_pending) {
			answer(c, kvl_verbs_random_psn(), c->peer_new_psn);
		} else {
			c->phase = PH_WAIT;
			c->my_new_psn = kvl_verbs_random_psn();
			c->next_req_ns = 0;
			c->wait_deadline = kvl_now_ns() + c->resync_timeout_ns;
			c->stats.resyncs++;
		}
		return 1;
	}
	if (c->phase == PH_DRAIN && kvl_now_ns() > c->drain_deadline) {
		/* A flush that never came (or a completion we never saw): bounded too. */
		c->stats.drain_timeouts++;
		kvl_verbs_fail_all(c, KVL_ERR_CONN_LOST);
		return 1;
	}
	if (c->phase == PH_WAIT && kvl_now_ns() > c->wait_deadline) {
		/* The peer never answered: bounded, like any other failure. */
		c->stats.resync_timeouts++;
		kvl_verbs_fail_all(c, KVL_ERR_CONN_LOST);
		return 1;
	}
	return 0;
}

int kvl_verbs_resync_out(struct kvl_verbs_conn *c, struct kvl_resync *m)
{
	uint64_t t;

	if (c->ack_due) {
		c->ack_due = false;
		*m = (struct kvl_resync){ KVL_RESYNC_ACK, c->ack_psn, c->ack_echo };
		return 1;
	}
	if (c->phase != PH_WAIT || c->broken)
		return 0;
	t = kvl_now_ns();
	if (t < c->next_req_ns)
		return 0;
	/* Again every RESYNC_RESEND_NS until answered: a message lost with a control
	 * connection that was replaced must not leave both ends waiting. */
	c->next_req_ns = t + RESYNC_RESEND_NS;
	*m = (struct kvl_resync){ KVL_RESYNC_REQ, c->my_new_psn, 0 };
	return 1;
}

void kvl_verbs_set_resync_timeout(struct kvl_verbs_conn *c, unsigned ms)
{
	c->resync_timeout_ns = (uint64_t)(ms ? ms : 1) * 1000 * 1000;
}

void kvl_verbs_set_stall_timeout(struct kvl_verbs_conn *c, unsigned ms)
{
	c->stall_ns = (uint64_t)(ms ? ms : 1) * 1000 * 1000;
}

void kvl_verbs_resync_in(struct kvl_verbs_conn *c, const struct kvl_resync *m)
{
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_ERR };

	if (!c->connected || c->broken || m->psn > 0xffffff) {
		c->stats.resync_ignored++;
		return;
	}
	if (m->kind == KVL_RESYNC_ACK) {
		if (c->phase == PH_WAIT && m->echo == c->my_new_psn)
			restart(c, c->my_new_psn, m->psn);
		else
			c->stats.resync_ignored++; /* a repeat, or for a REQ we gave up */
		return;
	}
	if (m->kind != KVL_RESYNC_REQ) {
		c->stats.resync_ignored++;
		return;
	}
	switch (c->phase) {
	case PH_RUN:
		if (c->answered && m->psn == c->remote.psn) {
			/* We restarted for this REQ already and our ACK got lost: say it again. */
			c->ack_due = true;
			return;
		}
		/* The peer's QP went down (our access error, its port): ours must restart too. */
		(void)ibv_modify_qp(c->qp, &a, IBV_QP_STATE);
		kvl_verbs_start_drain(c);
		c->resp_pending = true;
		c->peer_new_psn = m->psn;
		return;
	case PH_DRAIN:
		if (c->resp_pending || we_yield(c)) {
			c->resp_pending = true;
			c->peer_new_psn = m->psn;
		} else {
			c->stats.resync_ignored++; /* ours will come, and the peer yields to it */
		}
		return;
	case PH_WAIT:
		if (we_yield(c))
			answer(c, c->my_new_psn, m->psn);
		else
			c->stats.resync_ignored++;
		return;
	}
}
