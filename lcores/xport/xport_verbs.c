/* SPDX-License-Identifier: BSD-3-Clause */
/* The verbs transport behind struct kvl_xport_ops. */
#include <errno.h>
#include <string.h>

#include "verbs.h"
#include "xport.h"

/* ---- verbs: a QP recovers from its errors by itself, so "broken" means only that the
 * connection was failed on purpose (peer dead, shutdown) and is to be closed. ---- */

static unsigned verbs_post(void *c, const struct kvl_wr *wr, unsigned n, int *err)
{
	/* kept, and handed to the QP as one batch by the next progress (one doorbell); the
	 * checks a request fails become its completion, so only a full ring refuses */
	unsigned k = kvl_verbs_enqueue(c, wr, n);

	if (k < n)
		*err = -EAGAIN;
	return k;
}

static unsigned verbs_progress(void *c)
{
	return kvl_verbs_progress(c);
}

static unsigned verbs_reap(void *c, struct kvl_wc *wc, unsigned max)
{
	return kvl_verbs_reap(c, wc, max);
}

static void verbs_fail_all(void *c, int status)
{
	kvl_verbs_fail_all(c, status);
}

static int verbs_broken(const void *c)
{
	return kvl_verbs_failed(c);
}

static unsigned verbs_outstanding(const void *c)
{
	return kvl_verbs_outstanding(c);
}

static void verbs_stats(const void *c, struct kvl_xport_stats *out)
{
	const struct kvl_verbs_stats *v = kvl_verbs_stats(c);

	memset(out, 0, sizeof(*out));
	out->bytes_written = v->bytes_written;
	out->bytes_read = v->bytes_read;
	out->tx_bytes = v->bytes_written;
	out->rx_bytes = v->bytes_read;
	memcpy(out->failed, v->failed, sizeof(out->failed));
	out->qp_posted = v->posted;
	out->qp_signaled = v->signaled;
	out->qp_cqes = v->cqes;
	out->qp_posts = v->posts;
	out->qp_recoveries = v->recoveries;
	out->qp_resyncs = v->resyncs;
	out->qp_replayed = v->replayed;
	out->qp_stall_resets = v->stall_resets;
	out->qp_drain_timeouts = v->drain_timeouts;
	out->qp_notes = v->notes;
	out->qp_sge_wrs = v->sge_wrs;
	out->qp_notes_dropped = v->notes_dropped;
	out->qp_outstanding = kvl_verbs_outstanding(c);
	out->qp_last_wc_status = v->last_wc_status;
	out->qp_completed = v->completed;
	out->qp_state = kvl_verbs_conn_state(c);
	out->qp_last_vendor_err = v->last_vendor_err;
	out->qp_arms = v->arms;
	out->qp_cq_events = v->cq_events;
	out->qp_doorbells = v->doorbells;
	out->qp_bf_copies = v->bf_copies;
	out->qp_stray_cqes = v->stray_cqes;
}

static void verbs_free(void *c)
{
	kvl_verbs_conn_free(c);
}

static int verbs_resync_out(void *c, struct kvl_resync *m)
{
	return kvl_verbs_resync_out(c, m);
}

static unsigned verbs_notes(void *c, struct kvl_note *out, unsigned max)
{
	return kvl_verbs_notes(c, out, max);
}

static int verbs_set_remote(void *c, const void *segs, unsigned n)
{
	return kvl_verbs_set_remote(c, segs, n);
}

static int verbs_event_fd(const void *c)
{
	return kvl_verbs_event_fd(c);
}

static int verbs_arm(void *c)
{
	return kvl_verbs_arm(c);
}

static unsigned verbs_take_events(void *c)
{
	return kvl_verbs_take_events(c);
}

static void verbs_resync_in(void *c, const struct kvl_resync *m)
{
	kvl_verbs_resync_in(c, m);
}

const struct kvl_xport_ops kvl_xport_verbs = {
	.name = "verbs",
	.post = verbs_post,
	.progress = verbs_progress,
	.reap = verbs_reap,
	.fail_all = verbs_fail_all,
	.broken = verbs_broken,
	.outstanding = verbs_outstanding,
	.stats = verbs_stats,
	.free = verbs_free,
	.resync_out = verbs_resync_out,
	.resync_in = verbs_resync_in,
	.event_fd = verbs_event_fd,
	.notes = verbs_notes,
	.set_remote = verbs_set_remote,
	.arm = verbs_arm,
	.take_events = verbs_take_events,
};
