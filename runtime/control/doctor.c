/* SPDX-License-Identifier: BSD-3-Clause */
/* DOCTOR: kvlane-doctor --peer's exchange of link facts, and the mismatches logged here too. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ctl.h"
#include "doctor.h"
#include "kvl_clock.h"
#include "log.h"

/* The control thread is one thread: these are its alone, kept off its stack (they are big). */
static struct kvl_ctrl_msg doc_out;
static struct kvl_doc_report doc_rep;

static void fill_ours(struct kvl_control *c, struct kvl_ctrl_msg *m, uint8_t reply)
{
	memset(m, 0, sizeof(*m));
	m->type = KVL_CTRL_DOCTOR;
	m->u.doctor.reply = reply;
	m->u.doctor.n = kvl_doctor_links(c->rt->sysfs_root, &c->rt->cfg, m->u.doctor.link,
					 KVL_CTRL_MAX_EPS);
}

/* A peer's kvlane-doctor asked: compare, log each mismatch on this side as well, answer. */
static void answer(struct kvl_control *c, uint32_t p, const struct kvl_ctrl_msg *m)
{
	const struct kvl_peer_pub *pub = &c->pub[p];
	char who[KVL_CTRL_ADDR_LEN + KVL_CTRL_NAME_LEN + 16];

	fill_ours(c, &doc_out, 1);
	snprintf(who, sizeof(who), "peer %u (%s, %s)", p, pub->addr, pub->name);
	memset(&doc_rep, 0, sizeof(doc_rep));
	kvl_doctor_compare(doc_out.u.doctor.link, doc_out.u.doctor.n, m->u.doctor.link,
			   m->u.doctor.n, "peer", &doc_rep);
	for (unsigned i = 0; i < doc_rep.n; i++) {
		const struct kvl_doc_row *w = &doc_rep.rows[i];

		if (w->verdict == KVL_DOC_WARN || w->verdict == KVL_DOC_FAIL)
			KVL_LOG(WARNING, "doctor: %s: %s %s %s: %s; expected %s; fix: %s", who,
				kvl_doc_verdict_name(w->verdict), w->check, w->subject, w->observed,
				w->expected, w->fix);
	}
	KVL_LOG(INFO,
		"doctor: %s (kvlane-doctor --peer) compared %u NIC%s: %u PASS, %u WARN, %u FAIL",
		who, doc_out.u.doctor.n, doc_out.u.doctor.n == 1 ? "" : "s",
		doc_rep.count[KVL_DOC_PASS], doc_rep.count[KVL_DOC_WARN],
		doc_rep.count[KVL_DOC_FAIL]);
	kvl_ctl_send_msg(c, p, &doc_out);
}

void kvl_ctl_on_doctor(struct kvl_control *c, uint32_t p, const struct kvl_ctrl_msg *m)
{
	if (m->u.doctor.reply == 0) {
		answer(c, p, m);
		return;
	}
	pthread_mutex_lock(&c->lock);
	if (c->doc && c->doc->peer == p && c->doc->sent && !c->doc->done) {
		c->doc->reply = *m;
		c->doc->done = true;
		pthread_cond_broadcast(&c->cond);
	} /* else an answer nobody waits for (timed out): dropped */
	pthread_mutex_unlock(&c->lock);
}

void kvl_ctl_take_doctor(struct kvl_control *c)
{
	struct doctor_wait *w;

	pthread_mutex_lock(&c->lock);
	w = c->doc;
	if (w == NULL || w->sent) {
		pthread_mutex_unlock(&c->lock);
		return;
	}
	w->sent = true;
	if (w->peer >= KVL_MAX_PEERS_RT || c->pub[w->peer].state != KVL_PEER_READY) {
		w->done = true;
		w->result = -ENOTCONN;
		pthread_cond_broadcast(&c->cond);
		pthread_mutex_unlock(&c->lock);
		return;
	}
	pthread_mutex_unlock(&c->lock);
	fill_ours(c, &doc_out, 0);
	kvl_ctl_send_msg(c, w->peer, &doc_out);
}

void kvl_ctl_doctor_cancel(struct kvl_control *c)
{
	if (c->doc && !c->doc->done) {
		c->doc->done = true;
		c->doc->result = -ECANCELED;
	}
}

int kvl_control_doctor(struct kvl_runtime *rt, uint32_t peer, unsigned timeout_ms,
		       struct kvl_ctrl_link *theirs, unsigned max, unsigned *n, char *err,
		       size_t errlen)
{
	struct kvl_control *c = rt->ctl;
	struct doctor_wait w = { .peer = peer };
	struct timespec ts;
	uint64_t one = 1;

	if (c == NULL) {
		snprintf(err, errlen, "the control path is off: set [control] secret_file");
		return -ENOTSUP;
	}
	pthread_mutex_lock(&c->lock);
	if (c->doc) {
		pthread_mutex_unlock(&c->lock);
		snprintf(err, errlen, "another doctor exchange is in progress");
		return -EBUSY;
	}
	c->doc = &w;
	if (write(c->efd, &one, sizeof(one)) < 0) {
		/* the counter is full: the thread is awake already */
	}
	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += timeout_ms / 1000;
	ts.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
	if (ts.tv_nsec >= 1000000000L) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000L;
	}
	while (!w.done)
		if (pthread_cond_timedwait(&c->cond, &c->lock, &ts) == ETIMEDOUT && !w.done) {
			w.result = -ETIMEDOUT;
			break;
		}
	c->doc = NULL; /* before our stack frame goes */
	pthread_mutex_unlock(&c->lock);
	if (w.result < 0) {
		snprintf(err, errlen, "%s",
			 w.result == -ETIMEDOUT	 ? "no DOCTOR answer in time (a kvlane without "
						   "the doctor message closes the connection)"
			 : w.result == -ENOTCONN ? "the peer is not ready"
						 : "the runtime stopped");
		return w.result;
	}
	*n = w.reply.u.doctor.n < max ? w.reply.u.doctor.n : max;
	memcpy(theirs, w.reply.u.doctor.link, sizeof(theirs[0]) * *n);
	return 0;
}
