/* SPDX-License-Identifier: BSD-3-Clause */
/* The request API (kvl_req_*): handles, checks, and the rings to each NIC lcore's scheduler. */
#include <errno.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include <rte_ring.h>
#include <rte_ring_elem.h>

#include "kvl_build_config.h"
#include "kvl_clock.h"
#include "kvlane/kvlane.h"
#include "nic_sched.h"
#include "peers.h"
#include "req_api.h"
#include "runtime.h"
#include "segments.h"
#include "staging.h"
#include "tier.h"

#if KVL_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

_Static_assert((int)KVL_REQ_DECODE == (int)KVL_SCHED_DECODE &&
		       (int)KVL_REQ_PREFILL == (int)KVL_SCHED_PREFILL,
	       "public and scheduler classes agree");

/* How long an API call waits for its lcore (a stopped or wedged loop): then -ETIMEDOUT. */
#define LCORE_WAIT_NS 5000000000ull
/* OPENs an unanswering lcore may still take, tracked until they end. */
#define KVL_REQ_ORPHANS 64

enum { ST_PENDING = 0, ST_READY = 1, ST_DONE = 2 };

/* The API's bookkeeping of one request beside what the lcore reads (struct kvl_nsreq). */
struct req_state {
	uint64_t user;
	uint32_t idx;
	bool cancel_sent;
	bool orphan; /* kvl_req_open gave up on the lcore: no handle names it (see orphans) */
	uint8_t *step_state; /* ST_* */
	uint32_t *refs;	     /* per block: steps naming it not DONE yet */
	uint8_t *known;	     /* per block: a READY step names it (off[] is valid) */
};

/* Handles: index + 1 in the low 32 bits, a generation above, so a stale one is refused. */
struct kvl_req_table {
	uint32_t n;
	uint32_t free_head;
	uint32_t *next;
	uint32_t *gen;
	struct kvl_nsreq **r;
	/* Requests whose OPEN kvl_req_open stopped waiting for (-ETIMEDOUT). The lcore may
	 * still take it: kvl_req_poll then cancels it, frees it at its end and shows none of
	 * its events, so a late open can neither hold staging nor touch the handle table. */
	struct kvl_nsreq *orphan[KVL_REQ_ORPHANS];
	unsigned n_orphans;
};

/* ---- the handle table ---- */

/*
 * Each NIC lcore's step-flag pool (allocated by its stage, page-aligned) mapped for the GPU,
 * when one is open: the engine's streams then wait on and write its words. Registered, not
 * cudaHostAlloc'd: the lcore side allocates it without CUDA. Before the loops start.
 */
static int map_flag_pools(struct kvl_runtime *rt, char *err, size_t errlen)
{
#if KVL_HAVE_CUDA
	if (!rt->cfg.gpu.enable || !rt->gpu.open)
		return 0;
	for (unsigned i = 0; i < rt->cfg.n_nics; i++) {
		struct kvl_nic_sched *ns = rt->nic[i].sched;
		size_t len;
		void *dev = NULL;
		cudaError_t ce;

		if (ns == NULL)
			continue;
		len = (size_t)ns->n_flags * sizeof(struct kvl_nsched_flag);
		ce = cudaHostRegister(ns->flags, len,
				      cudaHostRegisterMapped | cudaHostRegisterPortable);
		if (ce == cudaSuccess)
			ce = cudaHostGetDevicePointer(&dev, ns->flags, 0);
		if (ce != cudaSuccess) {
			snprintf(err, errlen,
				 "cannot map the step flags of NIC %s (%zu bytes) for GPU %d: %s",
				 rt->cfg.nics[i].label, len, rt->gpu.device_id,
				 cudaGetErrorString(ce));
			return -EIO;
		}
		ns->flags_dev = (uint64_t)(uintptr_t)dev;
	}
#else
	(void)rt, (void)err, (void)errlen;
#endif
	return 0;
}

static void unmap_flag_pools(struct kvl_runtime *rt)
{
#if KVL_HAVE_CUDA
	for (unsigned i = 0; i < rt->cfg.n_nics; i++)
		if (rt->nic[i].sched && rt->nic[i].sched->flags_dev) {
			cudaHostUnregister(rt->nic[i].sched->flags);
			rt->nic[i].sched->flags_dev = 0;
		}
#else
	(void)rt;
#endif
}

int kvl_req_table_start(struct kvl_runtime *rt, char *err, size_t errlen)
{
	uint32_t total = kvl_staging_count(rt) * rt->cfg.sched.max_requests;

	if (total == 0)
		return 0; /* no scheduler: the calls answer -ENOTSUP */
	rt->reqs = calloc(1, sizeof(*rt->reqs));
	if (rt->reqs) {
		rt->reqs->n = total;
		rt->reqs->next = calloc(total, sizeof(uint32_t));
		rt->reqs->gen = calloc(total, sizeof(uint32_t));
		rt->reqs->r = calloc(total, sizeof(rt->reqs->r[0]));
	}
	if (rt->reqs == NULL || !rt->reqs->next || !rt->reqs->gen || !rt->reqs->r) {
		snprintf(err, errlen, "out of memory for the request table");
		return -ENOMEM;
	}
	for (uint32_t i = 0; i < total; i++)
		rt->reqs->next[i] = i + 1 < total ? i + 1 : UINT32_MAX;
	return map_flag_pools(rt, err, errlen);
}

void kvl_req_table_stop(struct kvl_runtime *rt)
{
	if (rt->reqs == NULL)
		return;
	unmap_flag_pools(rt);
	for (uint32_t i = 0; i < rt->reqs->n; i++)
		free(rt->reqs->r[i]); /* requests still open when the runtime stops */
	for (unsigned i = 0; i < rt->reqs->n_orphans; i++)
		free(rt->reqs->orphan[i]); /* the lcores are stopped: nothing reads them now */
	free(rt->reqs->next);
	free(rt->reqs->gen);
	free(rt->reqs->r);
	free(rt->reqs);
	rt->reqs = NULL;
}

/* ---- handles ---- */

static struct kvl_nsreq *lookup(struct kvl_runtime *rt, kvl_req_t h)
{
	struct kvl_req_table *t = rt->reqs;
	uint32_t i = (uint32_t)h - 1;

	if (t == NULL || (uint32_t)h == 0 || i >= t->n || t->r[i] == NULL ||
	    t->gen[i] != (uint32_t)(h >> 32))
		return NULL;
	return t->r[i];
}

static void release(struct kvl_runtime *rt, struct kvl_nsreq *r)
{
	struct kvl_req_table *t = rt->reqs;
	struct req_state *a = r->priv;

	t->r[a->idx] = NULL;
	t->gen[a->idx]++; /* the ended request's handle names nothing from now on */
	t->next[a->idx] = t->free_head;
	t->free_head = a->idx;
	free(r);
}

/* ---- the calls ---- */

/* One allocation: the lcore's view, the copied tables, the API's own state. */
static struct kvl_nsreq *req_alloc(const struct kvl_runtime *rt, const struct kvl_req_desc *d,
				   uint32_t nref, const uint32_t *dest_seg)
{
	size_t sz = sizeof(struct kvl_nsreq) + sizeof(struct req_state) +
		    (size_t)d->n_blocks * (sizeof(struct kvl_sched_block) + sizeof(uint64_t) +
					   sizeof(uint32_t) + 1) +
		    ((size_t)d->n_steps + 1 + nref) * sizeof(uint32_t) + d->n_steps + 64;
	struct kvl_nsreq *r = calloc(1, sz);
	uint8_t *p;
	struct req_state *a;
	struct kvl_sched_block *b;
	uint32_t *first, *refs;

	if (r == NULL)
		return NULL;
	p = (uint8_t *)(r + 1);
	r->off = (uint64_t *)p;
	p += (size_t)d->n_blocks * sizeof(uint64_t);
	b = (struct kvl_sched_block *)p;
	p += (size_t)d->n_blocks * sizeof(*b);
	a = (struct req_state *)p;
	p += sizeof(*a);
	first = (uint32_t *)p;
	p += ((size_t)d->n_steps + 1) * sizeof(uint32_t);
	refs = (uint32_t *)p;
	p += (size_t)nref * sizeof(uint32_t);
	a->refs = (uint32_t *)p;
	p += (size_t)d->n_blocks * sizeof(uint32_t);
	a->known = p;
	p += d->n_blocks;
	a->step_state = p;
	for (uint32_t i = 0; i < d->n_blocks; i++)
		b[i] = (struct kvl_sched_block){
			.remote_off = d->blocks[i].remote_off,
			/* PUSH: the address itself (the lcore
			 * posts it as it is) */
			.local_off = (uint64_t)(uintptr_t)d->blocks[i].local,
			.remote_seg = d->blocks[i].remote_seg,
			.length = d->blocks[i].length,
			/* a WRITE never spans two segments that
			 * happen to touch in memory */
			.local_seg = d->dir == KVL_REQ_PUSH
					     ? kvl_segs_find(&rt->segs, d->blocks[i].local,
							     d->blocks[i].length)
				     : dest_seg ? dest_seg[i] /* engine-owned: found by the check */
						: 0
		};
	memcpy(first, d->step_first, ((size_t)d->n_steps + 1) * sizeof(uint32_t));
	memcpy(refs, d->step_blocks, (size_t)nref * sizeof(uint32_t));
	for (uint32_t j = 0; j < nref; j++)
		a->refs[refs[j]]++;
	r->priv = a;
	r->d = (struct kvl_sched_req_desc){ .blocks = b,
					    .n_blocks = d->n_blocks,
					    .n_steps = d->n_steps,
					    .step_first = first,
					    .step_blocks = refs,
					    .dir = d->dir == KVL_REQ_PUSH ? KVL_SCHED_PUSH
									  : KVL_SCHED_PULL,
					    .cls = (uint8_t)d->cls,
					    .dest = dest_seg != NULL,
					    .user = (uint64_t)(uintptr_t)r,
					    /* relative: the lcore adds its clock */
					    .deadline = d->deadline_us * 1000 };
	return r;
}

/* The peer's segments as the control path learnt them: block by block, before anything. */
static int check_remote(struct kvl_peer_pub *pub, const struct kvl_req_desc *d, uint32_t slot)
{
	uint32_t access = d->dir == KVL_REQ_PUSH ? KVL_SEG_REMOTE_WRITE : KVL_SEG_REMOTE_READ;
	int rc = 0;

	rte_spinlock_lock(&pub->lock);
	for (uint32_t i = 0; i < d->n_blocks && rc == 0; i++) {
		const struct kvl_req_block *b = &d->blocks[i];
		const struct kvl_seg_desc *s = NULL;

		if (b->length == 0) {
			rc = -EINVAL;
			break;
		}
		if (b->length > slot) {
			rc = -EMSGSIZE;
			break;
		}
		for (uint32_t k = 0; k < pub->n_segs && s == NULL; k++)
			if (pub->seg[k].id == b->remote_seg)
				s = &pub->seg[k];
		if (s == NULL)
			rc = -ENOENT;
		else if (!(s->flags & access))
			rc = -EACCES;
		else if (b->remote_off > s->length || b->length > s->length - b->remote_off)
			rc = -ERANGE;
	}
	rte_spinlock_unlock(&pub->lock);
	return rc;
}

/* PUSH: each block's local bytes inside one registered segment (what kvl_post() checks);
 * PULL: no local address (the scheduler picks staging). */
static int check_local(const struct kvl_runtime *rt, const struct kvl_req_desc *d)
{
	for (uint32_t i = 0; i < d->n_blocks; i++) {
		const struct kvl_req_block *b = &d->blocks[i];

		if (d->dir == KVL_REQ_PULL && b->local != NULL && !(d->flags & KVL_REQ_ENGINE_DEST))
			return -EINVAL;
		if (d->dir == KVL_REQ_PUSH && kvl_segs_find(&rt->segs, b->local, b->length) == 0)
			return -EFAULT;
		if (d->dir == KVL_REQ_PUSH && kvl_staging_touches(rt, b->local, b->length))
			return -EINVAL;
	}
	return 0;
}

/* The NIC whose lcore owns a request to @pub: one its connections use (round robin). */
static int pick_nic(struct kvl_runtime *rt, struct kvl_peer_pub *pub)
{
	static unsigned rr;
	int nic = -1;

	rte_spinlock_lock(&pub->lock);
	for (uint32_t k = 0; k < pub->n_conns && nic < 0; k++) {
		const struct kvl_peer_conn *c = &pub->conn[(rr + k) % pub->n_conns];

		if (c->nic < KVL_MAX_NICS && rt->nic[c->nic].sched)
			nic = c->nic;
	}
	rte_spinlock_unlock(&pub->lock);
	rr++;
	if (nic < 0 && rt->cfg.sched.null_transport)
		nic = 0; /* nothing moves: no connection needed */
	return nic;
}

static int send_cmd(struct kvl_runtime *rt, unsigned nic, struct kvl_nsched_cmd *c, bool wait)
{
	uint64_t until = wait ? kvl_now_ns() + LCORE_WAIT_NS : 0;

	while (rte_ring_mp_enqueue_elem(rt->nic[nic].sched->cmd, c, sizeof(*c)) != 0) {
		if (!wait)
			return -EAGAIN;
		if (kvl_now_ns() > until)
			return -ETIMEDOUT;
		sched_yield();
	}
	kvl_nic_io_kick(rt->nic[nic].io); /* a sleeping lcore (hybrid idle) wakes */
	return 0;
}

static void orphan_add(struct kvl_req_table *t, struct kvl_nsreq *r)
{
	((struct req_state *)r->priv)->orphan = true;
	if (t->n_orphans < KVL_REQ_ORPHANS)
		t->orphan[t->n_orphans++] = r;
	else /* left allocated for the lcore; if it opens it, its window stays held */
		KVL_LOG(WARNING,
			"request %#llx: its lcore did not answer OPEN in %.0f s, and %d "
			"such requests are pending already: it is not tracked (not canceled if it "
			"opens late)",
			(unsigned long long)r->handle, LCORE_WAIT_NS / 1e9, KVL_REQ_ORPHANS);
}

static void orphan_drop(struct kvl_req_table *t, unsigned i)
{
	free(t->orphan[i]);
	t->orphan[i] = t->orphan[--t->n_orphans];
}

/* What became of the OPENs kvl_req_open gave up on: refused ones are freed; opened ones are
 * canceled (their end, an event, frees them in kvl_req_poll). */
static void orphans_sweep(struct kvl_runtime *rt)
{
	struct kvl_req_table *t = rt->reqs;

	for (unsigned i = 0; i < t->n_orphans;) {
		struct kvl_nsreq *r = t->orphan[i];
		struct req_state *a = r->priv;
		int rc = __atomic_load_n(&r->open_rc, __ATOMIC_ACQUIRE);

		if (rc < 0) {
			orphan_drop(t, i);
			continue;
		}
		if (rc == 0 && !a->cancel_sent) {
			struct kvl_nsched_cmd c = { .type = KVL_NSCHED_CANCEL, .r = r };

			a->cancel_sent = send_cmd(rt, r->nic, &c, false) == 0;
		}
		i++;
	}
}

/* A late-opened orphan's event: shown to nobody; its end frees it. */
static void orphan_event(struct kvl_runtime *rt, struct kvl_nsreq *r, uint16_t type)
{
	struct kvl_req_table *t = rt->reqs;

	if (type == KVL_SCHED_EV_STEP_READY)
		return;
	for (unsigned i = 0; i < t->n_orphans; i++)
		if (t->orphan[i] == r) {
			orphan_drop(t, i);
			return;
		}
}

/* Why the thread's last kvl_req_open failed, where a check has words for it. */
static __thread char req_err[320];

const char *kvl_req_error(void)
{
	return req_err;
}

/* KVL_REQ_ENGINE_DEST: the destinations checked against the NIC the request will use (its
 * transport and registrations decide what it can write). A malloc'd segment id per block, or
 * NULL with *@rc set and the reason in req_err (logged: a refusal, not a per-block event). */
static uint32_t *dest_segs(struct kvl_runtime *rt, const struct kvl_req_desc *d, unsigned nic,
			   int *rc)
{
	uint32_t *seg = calloc(d->n_blocks, sizeof(*seg));

	if (seg == NULL) {
		*rc = -ENOMEM;
		return NULL;
	}
	*rc = kvl_req_dest_check(rt, d, nic, seg, req_err, sizeof(req_err));
	if (*rc < 0) {
		KVL_LOG(ERR, "kvl_req_open: %s", req_err);
		free(seg);
		return NULL;
	}
	return seg;
}

static int req_open(struct kvl_runtime *rt, kvl_peer_t peer, const struct kvl_req_desc *d,
		    kvl_req_t *req, uint32_t **dseg);

/* The destinations' segment ids live only while the OPEN is checked and copied. */
int kvl_req_open(struct kvl_runtime *rt, kvl_peer_t peer, const struct kvl_req_desc *d,
		 kvl_req_t *req)
{
	uint32_t *dseg = NULL;
	int rc;

	req_err[0] = '\0';
	/* Malformed destinations are the caller's input, refused before peer or NIC matter. */
	if (rt->reqs != NULL && d != NULL && (d->flags & KVL_REQ_ENGINE_DEST) &&
	    (rc = kvl_req_dest_shape(d, req_err, sizeof(req_err))) < 0)
		return rc;
	rc = req_open(rt, peer, d, req, &dseg);
	free(dseg);
	return rc;
}

static int req_open(struct kvl_runtime *rt, kvl_peer_t peer, const struct kvl_req_desc *d,
		    kvl_req_t *req, uint32_t **dseg)
{
	struct kvl_req_table *t = rt->reqs;
	struct kvl_peer_pub *pub;
	struct kvl_nsreq *r;
	struct kvl_nsched_cmd c;
	uint32_t nref, idx;
	uint64_t until;
	int nic, rc;

	if (t == NULL)
		return -ENOTSUP;
	if (d == NULL || req == NULL || d->blocks == NULL || d->step_first == NULL ||
	    d->step_blocks == NULL || d->n_blocks == 0 || d->n_steps == 0 ||
	    d->cls > KVL_REQ_PREFILL || d->dir > KVL_REQ_PUSH || d->step_first[0] != 0 ||
	    (d->flags & ~(KVL_REQ_STEP_FLAGS | KVL_REQ_ENGINE_DEST)) != 0)
		return -EINVAL;
	/* this host's tier is a peer of its own (runtime/tier.c): no entry in the peer table */
	pub = peer == KVL_PEER_LOCAL_TIER ? NULL : kvl_peer_ready(&rt->peers, peer);
	if (pub == NULL && peer != KVL_PEER_LOCAL_TIER)
		return -ENOTCONN;
	/* Indices first: the copy below counts references through them. */
	for (uint32_t k = 0; k < d->n_steps; k++)
		if (d->step_first[k + 1] <= d->step_first[k])
			return -EINVAL;
	nref = d->step_first[d->n_steps];
	for (uint32_t j = 0; j < nref; j++)
		if (d->step_blocks[j] >= d->n_blocks)
			return -EINVAL;
	rc = pub ? check_remote(pub, d, rt->cfg.sched.slot_kb << 10)
		 : kvl_tier_check(rt, d, rt->cfg.sched.slot_kb << 10);
	if (rc < 0)
		return rc;
	rc = check_local(rt, d);
	if (rc < 0)
		return rc;
	nic = pub ? pick_nic(rt, pub) : kvl_tier_nic(rt);
	if (nic < 0)
		return -ENOTCONN;
	if ((d->flags & KVL_REQ_ENGINE_DEST) &&
	    (*dseg = dest_segs(rt, d, (unsigned)nic, &rc)) == NULL)
		return rc;
	if (t->free_head == UINT32_MAX)
		return -ENOSPC;
	r = req_alloc(rt, d, nref, *dseg);
	if (r == NULL)
		return -ENOMEM;
	idx = t->free_head;
	((struct req_state *)r->priv)->idx = idx;
	((struct req_state *)r->priv)->user = d->user;
	r->nic = (uint32_t)nic;
	r->d.peer = peer;
	if (d->flags & KVL_REQ_STEP_FLAGS) {
		/* block_addr answers from READY on, before any event: no offset until then */
		r->want_flags = 1;
		memset(r->off, 0xff, (size_t)d->n_blocks * sizeof(r->off[0]));
	}
	r->open_rc = 1;
	r->handle = (uint64_t)t->gen[idx] << 32 | (idx + 1);
	c = (struct kvl_nsched_cmd){ .type = KVL_NSCHED_OPEN, .r = r };
	rc = send_cmd(rt, (unsigned)nic, &c, true);
	if (rc < 0) {
		free(r);
		return rc;
	}
	/* The scheduler's own checks and pools answer synchronously: errors keep nothing. */
	until = kvl_now_ns() + LCORE_WAIT_NS;
	while ((rc = __atomic_load_n(&r->open_rc, __ATOMIC_ACQUIRE)) == 1) {
		if (kvl_now_ns() > until) {
			orphan_add(t, r); /* the lcore may still read @r: it stays allocated */
			return -ETIMEDOUT;
		}
		sched_yield();
	}
	if (rc < 0) {
		free(r);
		return rc;
	}
	t->free_head = t->next[idx];
	t->r[idx] = r;
	*req = r->handle;
	return 0;
}

int kvl_req_step_done(struct kvl_runtime *rt, kvl_req_t req, uint32_t step)
{
	struct kvl_nsreq *r = lookup(rt, req);
	struct req_state *a;
	struct kvl_nsched_cmd c;
	int rc;

	if (r == NULL)
		return -ENOENT;
	a = r->priv;
	if (a->cancel_sent)
		return -ENOENT;
	if (step >= r->d.n_steps)
		return -ERANGE;
	if (r->want_flags)
		return -EINVAL; /* its DONE words say it: two ways would free a step twice */
	if (a->step_state[step] == ST_DONE)
		return -EALREADY;
	if (a->step_state[step] != ST_READY)
		return -EINVAL;
	c = (struct kvl_nsched_cmd){ .type = KVL_NSCHED_DONE, .step = step, .r = r };
	rc = send_cmd(rt, r->nic, &c, false);
	if (rc < 0)
		return rc;
	a->step_state[step] = ST_DONE;
	for (uint32_t j = r->d.step_first[step]; j < r->d.step_first[step + 1]; j++)
		a->refs[r->d.step_blocks[j]]--;
	return 0;
}

int kvl_req_cancel(struct kvl_runtime *rt, kvl_req_t req)
{
	struct kvl_nsreq *r = lookup(rt, req);
	struct req_state *a;
	struct kvl_nsched_cmd c;
	int rc;

	if (r == NULL)
		return -ENOENT;
	a = r->priv;
	if (a->cancel_sent)
		return -EALREADY;
	c = (struct kvl_nsched_cmd){ .type = KVL_NSCHED_CANCEL, .r = r };
	rc = send_cmd(rt, r->nic, &c, false);
	if (rc < 0)
		return rc;
	a->cancel_sent = true; /* its blocks are gone: no address, no DONE */
	return 0;
}

unsigned kvl_req_poll(struct kvl_runtime *rt, struct kvl_req_event *ev, unsigned max)
{
	struct kvl_sched_event se[64];
	unsigned got = 0;

	if (rt->reqs != NULL && rt->reqs->n_orphans != 0)
		orphans_sweep(rt);
	for (unsigned nic = 0; nic < rt->cfg.n_nics && got < max; nic++) {
		unsigned n;

		if (rt->nic[nic].sched == NULL)
			continue;
		n = rte_ring_sc_dequeue_burst_elem(rt->nic[nic].sched->ev, se, sizeof(se[0]),
						   max - got < 64 ? max - got : 64, NULL);
		for (unsigned i = 0; i < n; i++) {
			struct kvl_nsreq *r = (struct kvl_nsreq *)(uintptr_t)se[i].user;
			struct req_state *a = r->priv;
			struct kvl_req_event *e;

			if (a->orphan) {
				orphan_event(rt, r, se[i].type);
				continue;
			}
			e = &ev[got++];

			*e = (struct kvl_req_event){ .req = r->handle,
						     .user = a->user,
						     .step = se[i].step,
						     .status = se[i].status };
			switch (se[i].type) {
			case KVL_SCHED_EV_STEP_READY:
				e->type = KVL_REQ_EV_STEP_READY;
				a->step_state[se[i].step] = ST_READY;
				for (uint32_t j = r->d.step_first[se[i].step];
				     j < r->d.step_first[se[i].step + 1]; j++)
					a->known[r->d.step_blocks[j]] = 1;
				break;
			case KVL_SCHED_EV_REQ_DONE:
				e->type = KVL_REQ_EV_DONE;
				break;
			default:
				e->type = KVL_REQ_EV_FAILED;
				break;
			}
			if (e->type != KVL_REQ_EV_STEP_READY)
				release(rt, r);
		}
	}
	return got;
}

int kvl_req_block_addr(struct kvl_runtime *rt, kvl_req_t req, uint32_t block, void **addr)
{
	struct kvl_nsreq *r = lookup(rt, req);
	struct req_state *a;

	if (r == NULL)
		return -ENOENT;
	a = r->priv;
	if (a->cancel_sent)
		return -ENOENT;
	if (block >= r->d.n_blocks)
		return -ERANGE;
	if (r->want_flags) {
		/* the lcore writes it before the READY word the engine saw (release/acquire) */
		uint64_t o = __atomic_load_n(&r->off[block], __ATOMIC_RELAXED);

		if (o == UINT64_MAX)
			return -EAGAIN;
		*addr = r->d.dir == KVL_SCHED_PUSH || r->d.dest ? (void *)(uintptr_t)o
								: rt->nic[r->nic].staging + o;
		return 0;
	}
	if (!a->known[block] || a->refs[block] == 0 || r->off[block] == UINT64_MAX)
		return -EAGAIN;
	/* PUSH, engine-owned destinations: the scheduler keeps the caller's address as the
	 * block's offset. */
	*addr = r->d.dir == KVL_SCHED_PUSH || r->d.dest ? (void *)(uintptr_t)r->off[block]
							: rt->nic[r->nic].staging + r->off[block];
	return 0;
}

int kvl_req_step_flags(struct kvl_runtime *rt, kvl_req_t req, struct kvl_req_flags *out)
{
	struct kvl_nsreq *r = lookup(rt, req);
	const struct kvl_nic_sched *ns;
	size_t at;

	if (r == NULL)
		return -ENOENT;
	if (!r->want_flags || out == NULL)
		return -EINVAL;
	ns = rt->nic[r->nic].sched;
	at = (size_t)r->flag_base * sizeof(struct kvl_nsched_flag);
	*out = (struct kvl_req_flags){
		.ready = &ns->flags[r->flag_base].ready,
		.done = &ns->flags[r->flag_base].done,
		.ready_dev = ns->flags_dev
				     ? ns->flags_dev + at + offsetof(struct kvl_nsched_flag, ready)
				     : 0,
		.done_dev = ns->flags_dev
				    ? ns->flags_dev + at + offsetof(struct kvl_nsched_flag, done)
				    : 0,
		.stride = sizeof(struct kvl_nsched_flag),
		.epoch = r->flag_epoch,
		.n_steps = r->d.n_steps,
	};
	return 0;
}

int kvl_req_budget_cap(struct kvl_runtime *rt, uint64_t bytes)
{
	if (rt->reqs == NULL)
		return -ENOTSUP;
	__atomic_store_n(&rt->budget_cap, bytes, __ATOMIC_RELAXED);
	kvl_staging_publish_budget(rt);
	return 0;
}
