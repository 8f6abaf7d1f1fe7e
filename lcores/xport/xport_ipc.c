/* SPDX-License-Identifier: BSD-3-Clause */
/* The same-host transport: a co-located peer's GPU segments opened by IPC, READs to an engine. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvl_clock.h"
#include "xport_ipc.h"
#include "treq.h"

#define MAX_MAPS   (2 * KVL_MAX_SEGS) /* the peer's segments and replaced ones still in use */
#define REAP_BURST 64

enum map_state { M_FREE = 0, M_OPEN, M_REFUSED, M_RETIRED };

/* One of the peer's segments as this side sees it: mapped (or refused) under engine id
 * (slot + 1). A retired one is no longer the peer's: it waits for its copies to land. */
struct map {
	int state;
	struct kvl_ipc_rseg s;
	uint64_t dptr;	   /* the allocation's base here */
	uint32_t inflight; /* engine requests on it not completed */
	bool in_engine;	   /* add_src succeeded */
};

struct part {
	uint32_t seq; /* its READ */
	uint16_t map;
	bool done;
};

struct kvl_ipc_conn {
	struct kvl_ipc_opts o;
	struct kvl_treq *ring;
	uint32_t mask, head, tail;
	struct part *pr;
	uint32_t pmask, phead, ptail; /* [phead, ptail): handed to the engine, not all done */
	struct map map[MAX_MAPS];
	/* the table set_segments was given, applied on the lcore (where handles are opened) */
	struct kvl_ipc_rseg *want;
	unsigned n_want;
	bool dirty;
	int failed;
	struct kvl_ipc_stats st;
};

/* One writer (the lcore); telemetry loads each counter relaxed. */
#define ST_ADD(c, f, v) __atomic_store_n(&(c)->st.f, (c)->st.f + (v), __ATOMIC_RELAXED)
#define ST_SET(c, f, v) __atomic_store_n(&(c)->st.f, (v), __ATOMIC_RELAXED)

static bool pow2(unsigned v)
{
	return v != 0 && (v & (v - 1)) == 0 && v <= (1u << 24);
}

struct kvl_ipc_conn *kvl_ipc_new(const struct kvl_ipc_opts *o)
{
	struct kvl_ipc_conn *c;
	unsigned depth = o->depth ? o->depth : 8192,
		 edepth = o->engine_depth ? o->engine_depth : 8192;

	if (o->drv.open == NULL || o->drv.close == NULL || o->engine.x.ops == NULL ||
	    o->engine.add_src == NULL || o->engine.del_src == NULL || !pow2(depth) ||
	    !pow2(edepth)) {
		errno = EINVAL;
		return NULL;
	}
	c = calloc(1, sizeof(*c));
	if (c != NULL) {
		c->ring = calloc(depth, sizeof(*c->ring));
		c->pr = calloc(edepth, sizeof(*c->pr));
		c->want = calloc(KVL_MAX_SEGS, sizeof(*c->want));
	}
	if (c == NULL || c->ring == NULL || c->pr == NULL || c->want == NULL) {
		if (c != NULL) {
			free(c->ring);
			free(c->pr);
			free(c->want);
		}
		free(c);
		errno = ENOMEM;
		return NULL;
	}
	c->o = *o;
	c->o.depth = depth;
	c->o.engine_depth = edepth;
	c->mask = depth - 1;
	c->pmask = edepth - 1;
	return c;
}

int kvl_ipc_set_segments(struct kvl_ipc_conn *c, const struct kvl_ipc_rseg *segs, unsigned n)
{
	int open = 0;

	if (n > KVL_MAX_SEGS)
		n = KVL_MAX_SEGS;
	memcpy(c->want, segs, sizeof(*segs) * n);
	c->n_want = n;
	c->dirty = true;
	for (unsigned i = 0; i < MAX_MAPS; i++)
		open += c->map[i].state == M_OPEN;
	return open;
}

static void map_close(struct kvl_ipc_conn *c, unsigned i)
{
	struct map *m = &c->map[i];

	if (m->in_engine)
		c->o.engine.del_src(c->o.engine.x.c, i + 1);
	if (m->state != M_REFUSED && m->dptr != 0) {
		c->o.drv.close(c->o.drv.arg, m->dptr);
		ST_ADD(c, closes, 1);
	}
	memset(m, 0, sizeof(*m));
}

/* No longer the peer's: its engine id takes no more posts; the mapping goes once idle. */
static void map_retire(struct kvl_ipc_conn *c, unsigned i)
{
	struct map *m = &c->map[i];

	if (m->in_engine) {
		c->o.engine.del_src(c->o.engine.x.c, i + 1);
		m->in_engine = false;
	}
	if (m->inflight == 0)
		map_close(c, i);
	else
		m->state = M_RETIRED;
}

static void map_open(struct kvl_ipc_conn *c, const struct kvl_ipc_rseg *s)
{
	char why[96] = "";
	unsigned i = 0;
	struct map *m;
	int rc;

	while (i < MAX_MAPS && c->map[i].state != M_FREE)
		i++;
	if (i == MAX_MAPS) {
		ST_ADD(c, open_failures, 1);
		snprintf(c->st.last_open_error, sizeof(c->st.last_open_error),
			 "segment %u: every mapping slot is taken (replaced ones still in use)",
			 s->id);
		return;
	}
	m = &c->map[i];
	*m = (struct map){ .state = M_REFUSED, .s = *s };
	rc = c->o.drv.open(c->o.drv.arg, s->handle, &m->dptr, why, sizeof(why));
	if (rc == 0 && m->dptr + s->offset < m->dptr) /* a base that wraps: never trust it */
		rc = -ERANGE;
	if (rc == 0)
		rc = c->o.engine.add_src(c->o.engine.x.c, i + 1, m->dptr + s->offset, s->length,
					 why, sizeof(why));
	if (rc == 0) {
		m->in_engine = true;
		m->state = M_OPEN;
		ST_ADD(c, opens, 1);
		return;
	}
	if (m->dptr != 0) /* opened, refused by the engine */
		c->o.drv.close(c->o.drv.arg, m->dptr);
	m->dptr = 0;
	ST_ADD(c, open_failures, 1);
	snprintf(c->st.last_open_error, sizeof(c->st.last_open_error), "segment %u: %s (%s)", s->id,
		 why[0] ? why : "refused", strerror(-rc));
}

/* Make the maps what set_segments asked (on the lcore: handles open on its context). */
static void apply(struct kvl_ipc_conn *c)
{
	c->dirty = false;
	for (unsigned i = 0; i < MAX_MAPS; i++) {
		struct map *m = &c->map[i];
		int keep = -1;

		if (m->state != M_OPEN && m->state != M_REFUSED)
			continue;
		for (unsigned k = 0; k < c->n_want && keep < 0; k++)
			if (c->want[k].id == m->s.id && c->want[k].gen == m->s.gen &&
			    memcmp(c->want[k].handle, m->s.handle, sizeof(m->s.handle)) == 0 &&
			    c->want[k].offset == m->s.offset && c->want[k].length == m->s.length)
				keep = (int)k;
		if (keep >= 0)
			m->s.flags = c->want[keep].flags; /* what peers may do may change */
		else
			map_retire(c, i);
	}
	for (unsigned k = 0; k < c->n_want; k++) {
		bool have = false;

		for (unsigned i = 0; i < MAX_MAPS && !have; i++)
			have = (c->map[i].state == M_OPEN || c->map[i].state == M_REFUSED) &&
			       c->map[i].s.id == c->want[k].id;
		if (!have)
			map_open(c, &c->want[k]);
	}
}

/* The live map of segment @id, or -1; *@stale when a replaced or freed one had that id. */
static int map_find(const struct kvl_ipc_conn *c, uint32_t id, bool *stale)
{
	for (unsigned i = 0; i < MAX_MAPS; i++) {
		if (c->map[i].s.id != id)
			continue;
		if (c->map[i].state == M_OPEN || c->map[i].state == M_REFUSED)
			return (int)i;
		if (c->map[i].state == M_RETIRED)
			*stale = true;
	}
	return -1;
}

/* The status @wr gets here, and its map when KVL_OK. */
static int check(struct kvl_ipc_conn *c, const struct kvl_wr *wr, int *mi)
{
	const struct map *m;
	bool stale = false;
	uint64_t sum = 0;

	if (c->failed)
		return c->failed;
	if (wr->op != KVL_OP_READ || (wr->flags & KVL_WR_NOTIFY))
		return KVL_ERR_ACCESS; /* one-sided READs of the peer's memory, nothing else */
	*mi = map_find(c, wr->remote_seg, &stale);
	if (*mi < 0) {
		/* freed or replaced on the serving side (or never exported) */
		if (stale)
			ST_ADD(c, stale, 1);
		return KVL_ERR_NO_SEGMENT;
	}
	m = &c->map[*mi];
	if (m->state == M_REFUSED || !(m->s.flags & KVL_SEG_REMOTE_READ))
		return KVL_ERR_ACCESS;
	if (wr->remote_off > m->s.length || wr->length > m->s.length - wr->remote_off)
		return KVL_ERR_BOUNDS;
	if (wr->n_sge <= 1)
		return wr->local != NULL ? KVL_OK : KVL_ERR_LOCAL;
	if (wr->n_sge > KVL_WR_MAX_SGE)
		return KVL_ERR_LOCAL;
	for (unsigned k = 0; k < wr->n_sge; k++)
		sum += wr->sge[k].length;
	return sum == wr->length ? KVL_OK : KVL_ERR_LOCAL;
}

static void part_done(struct kvl_ipc_conn *c, struct part *p, int status)
{
	struct kvl_treq *r = &c->ring[p->seq & c->mask];

	p->done = true;
	c->map[p->map].inflight--;
	r->left--;
	if (status != KVL_OK && r->status == KVL_OK)
		r->status = status;
}

static void parts_retire(struct kvl_ipc_conn *c)
{
	while (c->phead != c->ptail && c->pr[c->phead & c->pmask].done)
		c->phead++;
}

/* The engine's requests of one READ (one per local range); the engine checks the local side
 * (VRAM it was given) and completes a bad one with KVL_ERR_LOCAL. */
static void hand(struct kvl_ipc_conn *c, const struct kvl_wr *wr, int mi, uint32_t seq)
{
	unsigned n = wr->n_sge > 1 ? wr->n_sge : 1, taken;
	struct kvl_wr e[KVL_WR_MAX_SGE > 1 ? KVL_WR_MAX_SGE : 1];
	uint64_t off = wr->remote_off;
	int err = 0;

	for (unsigned k = 0; k < n; k++) {
		struct part *p = &c->pr[(c->ptail + k) & c->pmask];
		uint32_t len = wr->n_sge > 1 ? wr->sge[k].length : wr->length;

		*p = (struct part){ .seq = seq, .map = (uint16_t)mi };
		e[k] = (struct kvl_wr){ .wr_id = c->ptail + k,
					.local = wr->n_sge > 1 ? wr->sge[k].addr : wr->local,
					.remote_off = off,
					.length = len,
					.remote_seg = (uint32_t)mi + 1,
					.op = KVL_OP_READ,
					.flags = KVL_WR_CHECKED };
		off += len;
	}
	c->ring[seq & c->mask].left = (uint16_t)n;
	c->map[mi].inflight += n;
	taken = c->o.engine.x.ops->post(c->o.engine.x.c, e, n, &err);
	c->ptail += taken;
	ST_ADD(c, copies, taken);
	if (taken < n) { /* room was kept for them: the engine is broken */
		for (unsigned k = taken; k < n; k++) {
			struct part *p = &c->pr[c->ptail & c->pmask];

			c->ptail++;
			part_done(c, p, KVL_ERR_CONN_LOST);
		}
		ST_ADD(c, engine_errors, 1);
		parts_retire(c);
	}
}

static unsigned ipc_post(void *p, const struct kvl_wr *wr, unsigned n, int *err)
{
	struct kvl_ipc_conn *c = p;
	unsigned k;

	if (c->dirty)
		apply(c);
	for (k = 0; k < n; k++) {
		struct kvl_treq *r = &c->ring[c->tail & c->mask];
		unsigned parts = wr[k].n_sge > 1 ? wr[k].n_sge : 1;
		int mi = -1, st;

		if (c->tail - c->head == c->o.depth ||
		    c->ptail - c->phead + parts > c->o.engine_depth) {
			*err = -EAGAIN;
			break;
		}
		st = check(c, &wr[k], &mi);
		*r = (struct kvl_treq){ .wr_id = wr[k].wr_id, .len = wr[k].length, .status = st };
		if (st == KVL_OK) {
			hand(c, &wr[k], mi, c->tail);
		} else {
			ST_ADD(c, refused, 1);
			ST_SET(c, last_refusal, st);
		}
		c->tail++;
	}
	ST_ADD(c, reads, k);
	ST_SET(c, inflight, c->tail - c->head);
	return k;
}

static unsigned engine_reap(struct kvl_ipc_conn *c)
{
	const struct kvl_xport_ops *ops = c->o.engine.x.ops;
	struct kvl_wc wc[REAP_BURST];
	unsigned n, total = 0;

	while ((n = ops->reap(c->o.engine.x.c, wc, REAP_BURST)) > 0) {
		for (unsigned i = 0; i < n; i++) {
			uint32_t seq = (uint32_t)wc[i].wr_id;

			/* only what was handed and not done: a confused engine moves nothing here
			 */
			if (seq - c->phead >= c->ptail - c->phead || c->pr[seq & c->pmask].done) {
				ST_ADD(c, engine_errors, 1);
				continue;
			}
			part_done(c, &c->pr[seq & c->pmask], wc[i].status);
		}
		total += n;
	}
	parts_retire(c);
	return total;
}

/* Replaced or freed segments whose copies have all landed: unmapped now. */
static void close_idle(struct kvl_ipc_conn *c)
{
	for (unsigned i = 0; i < MAX_MAPS; i++)
		if (c->map[i].state == M_RETIRED && c->map[i].inflight == 0)
			map_close(c, i);
}

static unsigned ipc_progress(void *p)
{
	struct kvl_ipc_conn *c = p;
	unsigned work = 0;

	if (c->dirty) {
		apply(c);
		work++;
	}
	work += c->o.engine.x.ops->progress(c->o.engine.x.c);
	work += engine_reap(c);
	close_idle(c);
	return work; /* copies in flight: ipc_due says when to look again */
}

/* Copies in flight: the lcore passes again when the engine says the oldest should end (a
 * copy's end raises no event to wake a napping lcore); at once, for an engine that cannot. */
static uint64_t ipc_due(const void *p)
{
	const struct kvl_ipc_conn *c = p;
	const struct kvl_xport_ops *e = c->o.engine.x.ops;

	if (c->ptail == c->phead)
		return UINT64_MAX;
	return e->due ? e->due(c->o.engine.x.c) : kvl_now_ns();
}

static unsigned ipc_reap(void *p, struct kvl_wc *wc, unsigned max)
{
	struct kvl_ipc_conn *c = p;
	uint64_t ok = 0, bytes = 0;
	unsigned n = kvl_treq_reap(c->ring, c->mask, &c->head, c->tail, wc, max, &ok, &bytes);

	if (n) {
		ST_ADD(c, done, ok);
		ST_ADD(c, bytes, bytes);
		ST_SET(c, inflight, c->tail - c->head);
	}
	return n;
}

static void ipc_fail_all(void *p, int status)
{
	struct kvl_ipc_conn *c = p;

	if (!c->failed)
		c->failed = status;
	/* lets what is on the stream land, then completes it with @status */
	c->o.engine.x.ops->fail_all(c->o.engine.x.c, status);
	engine_reap(c);
	close_idle(c);
}

static int ipc_broken(const void *p)
{
	const struct kvl_ipc_conn *c = p;

	return c->failed; /* the status it closes with (fail_all's) */
}

static unsigned ipc_outstanding(const void *p)
{
	const struct kvl_ipc_conn *c = p;

	return c->tail - c->head;
}

void kvl_ipc_stats_read(const struct kvl_ipc_conn *c, struct kvl_ipc_stats *out)
{
	*out = (struct kvl_ipc_stats){
		.reads = __atomic_load_n(&c->st.reads, __ATOMIC_RELAXED),
		.done = __atomic_load_n(&c->st.done, __ATOMIC_RELAXED),
		.bytes = __atomic_load_n(&c->st.bytes, __ATOMIC_RELAXED),
		.refused = __atomic_load_n(&c->st.refused, __ATOMIC_RELAXED),
		.opens = __atomic_load_n(&c->st.opens, __ATOMIC_RELAXED),
		.open_failures = __atomic_load_n(&c->st.open_failures, __ATOMIC_RELAXED),
		.closes = __atomic_load_n(&c->st.closes, __ATOMIC_RELAXED),
		.stale = __atomic_load_n(&c->st.stale, __ATOMIC_RELAXED),
		.copies = __atomic_load_n(&c->st.copies, __ATOMIC_RELAXED),
		.engine_errors = __atomic_load_n(&c->st.engine_errors, __ATOMIC_RELAXED),
		.inflight = __atomic_load_n(&c->st.inflight, __ATOMIC_RELAXED),
		.last_refusal = __atomic_load_n(&c->st.last_refusal, __ATOMIC_RELAXED),
	};
	/* a racy read of a diagnostic string: at worst a torn message, never a fault */
	memcpy(out->last_open_error, c->st.last_open_error, sizeof(out->last_open_error));
	out->last_open_error[sizeof(out->last_open_error) - 1] = '\0';
}

static void ipc_stats(const void *p, struct kvl_xport_stats *out)
{
	struct kvl_ipc_stats s;

	kvl_ipc_stats_read(p, &s);
	memset(out, 0, sizeof(*out));
	out->posted_read = s.reads;
	out->done_read = s.done;
	out->bytes_read = s.bytes;
	out->qp_posts = s.copies;
	out->qp_outstanding = s.inflight;
}

static int ipc_set_remote(void *p, const void *segs, unsigned n)
{
	return kvl_ipc_set_segments(p, segs, n);
}

static void ipc_free(void *p)
{
	struct kvl_ipc_conn *c = p;

	if (c == NULL)
		return;
	/* the engine waits for its stream first: nothing reads a mapping after this */
	c->o.engine.x.ops->free(c->o.engine.x.c);
	for (unsigned i = 0; i < MAX_MAPS; i++) {
		c->map[i].in_engine = false; /* the engine is gone */
		if (c->map[i].state != M_FREE)
			map_close(c, i);
	}
	free(c->o.drv_owned);
	free(c->want);
	free(c->pr);
	free(c->ring);
	free(c);
}

int kvl_ipc_usable(const struct kvl_ipc_facts *f, char *why, size_t whylen)
{
	const char *no = NULL;

	if (!f->enabled)
		no = "ipc = off";
	else if (!f->peer_level)
		no = "the peer does not exchange host identities (an older kvlane): another host";
	else if (!f->same_host)
		no = "another host";
	else if (f->same_process)
		no = "the peer is this process (CUDA IPC opens handles of other processes only)";
	else if (f->n_exported == 0)
		no = "the peer exports no GPU segment";
	else if (!f->local_gpu)
		no = f->gpu_error ? f->gpu_error : "no GPU here (staging = host)";
	else if (f->access < 0)
		no = "the peer's GPU is not a device here (UUID unknown)";
	else if (f->access == 0)
		no = "no peer access between the two GPUs (cuDeviceCanAccessPeer = 0)";
	if (no != NULL) {
		snprintf(why, whylen, "%s", no);
		return 0;
	}
	snprintf(why, whylen, "ipc");
	return 1;
}

const struct kvl_xport_ops kvl_xport_ipc = {
	.name = "ipc",
	.post = ipc_post,
	.progress = ipc_progress,
	.reap = ipc_reap,
	.fail_all = ipc_fail_all,
	.broken = ipc_broken,
	.outstanding = ipc_outstanding,
	.stats = ipc_stats,
	.set_remote = ipc_set_remote,
	.free = ipc_free,
	.due = ipc_due,
};
