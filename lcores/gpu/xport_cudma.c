/* SPDX-License-Identifier: BSD-3-Clause */
/* Local DMA transport: requests merged into copies, small copies gathered, batches on a stream. */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvl_clock.h"
#include "xport.h"
#include "xport_cudma.h"
#include "xport_cudma_pick.h"

#define N_BATCH 256 /* batches in flight; a flush waits for a free one */

struct req {
	uint64_t wr_id;
	uint64_t src, dst; /* device-visible addresses (UVA: the host's too) */
	uint32_t len;
	int32_t status;
	uint8_t op;
};

struct batch {
	cudaEvent_t ev;
	uint32_t end;		  /* request sequence number after the batch's last */
	uint64_t t_launch, bytes; /* its service time is measured from here (rates) */
	uint8_t how;		  /* its small copies: 0 none, 1 the copy engine, 2 the gather */
	uint8_t cls;		  /* their size class (kvl_cudma_rate_class) */
};

struct rseg {
	struct kvl_seg s;
};

struct lseg {
	uintptr_t base;
	uint64_t len;
};

struct kvl_cudma_conn {
	struct kvl_cudma_opts o;
	cudaStream_t st;
	bool own_stream;
	/* ce_share: the copy engine's part of a batch runs on st2, forked from and joined back
	 * into st, so the batch's event still covers it. */
	cudaStream_t st2;
	cudaEvent_t ev_fork, ev_join;
	/* Requests by sequence number (mod depth): reaped < done <= launched <= tail. */
	struct req *ring;
	uint32_t mask;
	uint32_t head, done, launched, tail;
	struct batch b[N_BATCH];
	uint32_t bhead, btail;
	bool events_made;
	struct rseg remote[KVL_MAX_SEGS];
	unsigned n_remote;
	struct lseg local[KVL_MAX_SEGS];
	unsigned n_local;
	int failed;				 /* the status fail_all was given */
	uint64_t est_compute_ns, est_step_bytes; /* AUTO: kvl_cudma_set_estimates */
	uint64_t last_done_ns;			 /* the previous batch's completion, seen */
	/* The current device is per thread: the thread that posts (a NIC lcore, not the one that
	 * created the connection) makes it its own once, before its first launch. */
	bool bound;
	/* Scratch for one flush, depth entries each. */
	struct kvl_cudma_copy *cp;
	struct kvl_cudma_copy *small;
	void **dsts;
	const void **srcs;
	size_t *sizes;
	struct kvl_cudma_stats stats;
};

static void note_cuda(struct kvl_cudma_conn *c, cudaError_t ce, const char *what)
{
	c->stats.cuda_errors++;
	snprintf(c->stats.last_cuda_error, sizeof(c->stats.last_cuda_error), "%s: %s", what,
		 cudaGetErrorString(ce));
}

struct kvl_cudma_conn *kvl_cudma_new(const struct kvl_cudma_opts *o, char *err, size_t errlen)
{
	struct kvl_cudma_conn *c = calloc(1, sizeof(*c));
	struct cudaDeviceProp prop;
	unsigned depth;
	cudaError_t ce;
	int prio_least = 0, prio_greatest = 0;

	if (c == NULL) {
		snprintf(err, errlen, "cudma: out of memory");
		return NULL;
	}
	c->o = *o;
	depth = o->depth ? o->depth : 8192;
	if (depth & (depth - 1) || depth > (1u << 30)) {
		snprintf(err, errlen, "cudma: depth %u is not a power of two", depth);
		errno = EINVAL;
		goto fail;
	}
	c->o.depth = depth;
	c->mask = depth - 1;
	if (c->o.merge_max == 0)
		c->o.merge_max = 64ull << 20;
	if (c->o.copy_min == 0)
		c->o.copy_min = 1ull << 20;
	ce = cudaSetDevice(o->device);
	if (ce == cudaSuccess)
		ce = cudaGetDeviceProperties(&prop, o->device);
	if (ce != cudaSuccess) {
		snprintf(err, errlen, "cudma: CUDA device %d: %s", o->device,
			 cudaGetErrorString(ce));
		errno = ENODEV;
		goto fail;
	}
	/*
	 * 8 blocks of 4 warps, 8 loads of 16 bytes in flight per thread: 128 KiB in flight. On
	 * the H200 (docs/gpu-bench.md, run 2026-11-29b) alone this moves as fast as 264 blocks (the
	 * SMs' PCIe reads top out near 49.5 GB/s at 64 KiB whatever the grid), and beside the
	 * attention it slows it least of what was tried: +5% against +41-51% at 32-264 blocks.
	 * What costs the attention is the bytes in flight, not the blocks: long PCIe reads held
	 * in the memory system delay the HBM loads beside them.
	 */
	if (c->o.batch_max == 0)
		c->o.batch_max = 64;
	if (c->o.ce_min == 0)
		c->o.ce_min = 32 << 10;
	if (c->o.gather_ctas == 0)
		c->o.gather_ctas = 8;
	if (c->o.gather_depth == 0)
		c->o.gather_depth = 8;
	if (c->o.auto_batch_max == 0)
		c->o.auto_batch_max = 32;
	if (c->o.auto_ce_ps == 0)
		c->o.auto_ce_ps = 36;
	if (c->o.auto_gather_ps == 0)
		c->o.auto_gather_ps = 23;
	if (c->o.auto_ce_slow_pm == 0)
		c->o.auto_ce_slow_pm = 27;
	if (c->o.auto_gather_slow_pm == 0)
		c->o.auto_gather_slow_pm = 56;
	if ((unsigned)c->o.small > KVL_CUDMA_AUTO) {
		/* else its small copies would never be launched: requests done, nothing moved */
		snprintf(err, errlen, "cudma: unknown small-copy method %u", (unsigned)c->o.small);
		errno = EINVAL;
		goto fail;
	}
	if (c->o.gather_depth != 4 && c->o.gather_depth != 8 && c->o.gather_depth != 16) {
		snprintf(err, errlen, "cudma: gather_depth %u is not 4, 8 or 16",
			 c->o.gather_depth);
		errno = EINVAL;
		goto fail;
	}
	if (c->o.ce_share > 100) {
		snprintf(err, errlen, "cudma: ce_share %u is over 100 percent", c->o.ce_share);
		errno = EINVAL;
		goto fail;
	}
	(void)prop;
	c->ring = calloc(depth, sizeof(*c->ring));
	c->cp = calloc(depth, sizeof(*c->cp));
	c->small = calloc(depth, sizeof(*c->small));
	c->dsts = calloc(depth, sizeof(*c->dsts));
	c->srcs = calloc(depth, sizeof(*c->srcs));
	c->sizes = calloc(depth, sizeof(*c->sizes));
	if (!c->ring || !c->cp || !c->small || !c->dsts || !c->srcs || !c->sizes) {
		snprintf(err, errlen, "cudma: out of memory for %u requests", depth);
		errno = ENOMEM;
		goto fail;
	}
	/*
	 * Its own streams at the greatest priority: the block scheduler then starts the gather
	 * kernel's blocks ahead of the pending blocks of an engine's kernels at the default
	 * (lowest) priority, instead of behind them (at 16 KiB the kernel beside the attention
	 * moved 26 GB/s against 39-46 alone, docs/gpu-bench.md). Running blocks are not preempted.
	 */
	ce = cudaDeviceGetStreamPriorityRange(&prio_least, &prio_greatest);
	if (ce != cudaSuccess) {
		snprintf(err, errlen, "cudma: CUDA device %d: stream priorities: %s", o->device,
			 cudaGetErrorString(ce));
		errno = ENODEV;
		goto fail;
	}
	if (o->stream != NULL) {
		c->st = o->stream;
	} else {
		ce = cudaStreamCreateWithPriority(&c->st, cudaStreamNonBlocking, prio_greatest);
		if (ce != cudaSuccess) {
			snprintf(err, errlen, "cudma: cannot create a stream: %s",
				 cudaGetErrorString(ce));
			errno = EIO;
			goto fail;
		}
		c->own_stream = true;
	}
	for (unsigned i = 0; i < N_BATCH; i++) {
		/* No timing: an event without it is cheaper to record and to query. */
		ce = cudaEventCreateWithFlags(&c->b[i].ev, cudaEventDisableTiming);
		if (ce != cudaSuccess) {
			snprintf(err, errlen, "cudma: cannot create events: %s",
				 cudaGetErrorString(ce));
			errno = EIO;
			for (unsigned j = 0; j < i; j++)
				cudaEventDestroy(c->b[j].ev);
			goto fail;
		}
	}
	c->events_made = true;
	if (c->o.small == KVL_CUDMA_GATHER || c->o.small == KVL_CUDMA_AUTO) {
		/* not at the first launch: that may wait for an engine's stream blocked on READY */
		ce = kvl_cudma_gather_load();
		if (ce != cudaSuccess) {
			snprintf(err, errlen, "cudma: cannot load the gather kernel: %s",
				 cudaGetErrorString(ce));
			errno = EIO;
			goto fail;
		}
		/* ce_min, ce_share: the engine beside it */
		ce = cudaStreamCreateWithPriority(&c->st2, cudaStreamNonBlocking, prio_greatest);
		if (ce == cudaSuccess)
			ce = cudaEventCreateWithFlags(&c->ev_fork, cudaEventDisableTiming);
		if (ce == cudaSuccess)
			ce = cudaEventCreateWithFlags(&c->ev_join, cudaEventDisableTiming);
		if (ce != cudaSuccess) {
			snprintf(err, errlen, "cudma: cannot create the copy engine's stream: %s",
				 cudaGetErrorString(ce));
			errno = EIO;
			goto fail;
		}
	}
	return c;
fail:
	kvl_cudma_free(c);
	return NULL;
}

void kvl_cudma_free(struct kvl_cudma_conn *c)
{
	if (c == NULL)
		return;
	if (c->st != NULL)
		cudaStreamSynchronize(c->st); /* nothing may still write into freed memory */
	if (c->events_made)
		for (unsigned i = 0; i < N_BATCH; i++)
			cudaEventDestroy(c->b[i].ev);
	if (c->st2 != NULL) {
		cudaStreamSynchronize(c->st2);
		cudaStreamDestroy(c->st2);
	}
	if (c->ev_fork != NULL)
		cudaEventDestroy(c->ev_fork);
	if (c->ev_join != NULL)
		cudaEventDestroy(c->ev_join);
	if (c->own_stream)
		cudaStreamDestroy(c->st);
	free(c->ring);
	free(c->cp);
	free(c->small);
	free(c->dsts);
	free(c->srcs);
	free(c->sizes);
	free(c);
}

/*
 * Add remote segment @id: page-locked host memory CUDA knows (@gpu false) or GPU memory this
 * process can address (@gpu true). 0, or a negative errno with why in @err.
 */
static int add_remote(struct kvl_cudma_conn *c, uint32_t id, void *base, uint64_t len,
		      uint32_t flags, bool gpu, char *err, size_t errlen)
{
	struct cudaPointerAttributes a;
	cudaError_t ce;

	if (id == 0 || base == NULL || len == 0 || c->n_remote == KVL_MAX_SEGS) {
		snprintf(err, errlen, "cudma: remote segment %u: nothing to add, or table full",
			 id);
		return -EINVAL;
	}
	for (unsigned i = 0; i < c->n_remote; i++)
		if (c->remote[i].s.id == id) {
			snprintf(err, errlen, "cudma: remote segment %u is there already", id);
			return -EEXIST;
		}
	ce = cudaPointerGetAttributes(&a, base);
	if (ce != cudaSuccess || a.type != (gpu ? cudaMemoryTypeDevice : cudaMemoryTypeHost)) {
		snprintf(err, errlen, "cudma: remote segment %u at %p is not %s%s%s", id, base,
			 gpu ? "GPU memory"
			     : "page-locked host memory CUDA knows (cudaHostAlloc or "
			       "cudaHostRegister it first)",
			 ce != cudaSuccess ? ": " : "",
			 ce != cudaSuccess ? cudaGetErrorString(ce) : "");
		cudaGetLastError();
		return -EINVAL;
	}
	/* The gather kernel dereferences the host address itself: it must be the GPU's too. */
	if (!gpu && a.devicePointer != base) {
		snprintf(err, errlen,
			 "cudma: remote segment %u at %p is mapped at %p on the GPU; only memory "
			 "with one address on both sides is supported",
			 id, base, a.devicePointer);
		return -ENOTSUP;
	}
	c->remote[c->n_remote++].s =
		(struct kvl_seg){ .base = base, .len = len, .id = id, .flags = flags };
	return 0;
}

int kvl_cudma_add_remote(struct kvl_cudma_conn *c, uint32_t id, void *base, uint64_t len,
			 uint32_t flags, char *err, size_t errlen)
{
	return add_remote(c, id, base, len, flags, false, err, errlen);
}

int kvl_cudma_add_remote_gpu(struct kvl_cudma_conn *c, uint32_t id, void *base, uint64_t len,
			     uint32_t flags, char *err, size_t errlen)
{
	return add_remote(c, id, base, len, flags, true, err, errlen);
}

void kvl_cudma_del_remote(struct kvl_cudma_conn *c, uint32_t id)
{
	for (unsigned i = 0; i < c->n_remote; i++)
		if (c->remote[i].s.id == id) {
			c->remote[i] = c->remote[--c->n_remote];
			return;
		}
}

int kvl_cudma_add_local(struct kvl_cudma_conn *c, void *base, uint64_t len, char *err,
			size_t errlen)
{
	struct cudaPointerAttributes a;
	cudaError_t ce;

	if (base == NULL || len == 0 || c->n_local == KVL_MAX_SEGS) {
		snprintf(err, errlen, "cudma: local segment: nothing to add, or table full");
		return -EINVAL;
	}
	ce = cudaPointerGetAttributes(&a, base);
	if (ce != cudaSuccess || a.type != cudaMemoryTypeDevice || a.device != c->o.device) {
		snprintf(err, errlen, "cudma: local segment %p is not memory of CUDA device %d%s%s",
			 base, c->o.device, ce != cudaSuccess ? ": " : "",
			 ce != cudaSuccess ? cudaGetErrorString(ce) : "");
		cudaGetLastError();
		return -EINVAL;
	}
	c->local[c->n_local++] = (struct lseg){ (uintptr_t)base, len };
	return 0;
}

static const struct kvl_seg *remote_lookup(const struct kvl_cudma_conn *c, uint32_t id)
{
	for (unsigned i = 0; i < c->n_remote; i++)
		if (c->remote[i].s.id == id)
			return &c->remote[i].s;
	return NULL;
}

static bool local_ok(const struct kvl_cudma_conn *c, const void *p, uint64_t len)
{
	uintptr_t a = (uintptr_t)p;

	for (unsigned i = 0; i < c->n_local; i++)
		if (a >= c->local[i].base && a - c->local[i].base <= c->local[i].len &&
		    len <= c->local[i].len - (a - c->local[i].base))
			return true;
	return false;
}

bool kvl_cudma_has_local(const struct kvl_cudma_conn *c, const void *p, uint64_t len)
{
	return local_ok(c, p, len);
}

int kvl_cudma_post(struct kvl_cudma_conn *c, const struct kvl_wr *wr)
{
	struct req *r;
	const struct kvl_seg *s;
	int st;

	if (c->failed)
		return -EPIPE;
	if (c->tail - c->head == c->o.depth)
		return -EAGAIN;
	if (!c->bound) {
		cudaSetDevice(c->o.device);
		c->bound = true;
	}
	r = &c->ring[c->tail & c->mask];
	*r = (struct req){ .wr_id = wr->wr_id, .len = wr->length, .op = wr->op };
	s = remote_lookup(c, wr->remote_seg);
	st = wr->op == KVL_OP_READ || wr->op == KVL_OP_WRITE
		     ? kvl_seg_check(s, wr->remote_off, wr->length, wr->op)
		     : KVL_ERR_ACCESS;
	if (st == KVL_OK && (wr->n_sge > 1 || (wr->flags & KVL_WR_NOTIFY)))
		st = KVL_ERR_TOO_LARGE; /* one local range per request; no peer to notify */
	if (st == KVL_OK && !local_ok(c, wr->local, wr->length))
		st = KVL_ERR_LOCAL;
	r->status = st;
	if (st != KVL_OK) {
		r->len = 0; /* moves nothing, completes with its batch */
		c->stats.refused++;
	} else if (wr->op == KVL_OP_READ) {
		r->src = (uint64_t)(uintptr_t)(s->base + wr->remote_off);
		r->dst = (uint64_t)(uintptr_t)wr->local;
	} else {
		r->src = (uint64_t)(uintptr_t)wr->local;
		r->dst = (uint64_t)(uintptr_t)(s->base + wr->remote_off);
	}
	c->tail++;
	c->stats.posted++;
	return 0;
}

/* Everything outstanding completes with @status (the stream is idle or dead by then). */
static void complete_all(struct kvl_cudma_conn *c, int status)
{
	for (uint32_t i = c->done; i != c->tail; i++) {
		struct req *r = &c->ring[i & c->mask];

		if (r->status == KVL_OK)
			r->status = status;
	}
	c->done = c->launched = c->tail;
	c->bhead = c->btail;
}

static void broke(struct kvl_cudma_conn *c, cudaError_t ce, const char *what)
{
	note_cuda(c, ce, what);
	cudaGetLastError();
	c->failed = KVL_ERR_CONN_LOST;
	complete_all(c, KVL_ERR_CONN_LOST);
}

/* @n small copies (a run of c->small) as one cudaMemcpyBatchAsync on @st: the copy engine, one
 * driver call. Each run has its own part of the address arrays, so that no call of a flush
 * rewrites what an earlier one was given. */
static cudaError_t batch_copy(struct kvl_cudma_conn *c, const struct kvl_cudma_copy *cp, unsigned n,
			      cudaStream_t st)
{
	struct cudaMemcpyAttributes attr = {
		.srcAccessOrder = cudaMemcpySrcAccessOrderStream,
		.flags = cudaMemcpyFlagPreferOverlapWithCompute,
	};
	size_t idx0 = 0, off = (size_t)(cp - c->small);

	for (unsigned i = 0; i < n; i++) {
		c->dsts[off + i] = (void *)(uintptr_t)cp[i].dst;
		c->srcs[off + i] = (const void *)(uintptr_t)cp[i].src;
		c->sizes[off + i] = cp[i].len;
	}
	c->stats.launches++;
	return cudaMemcpyBatchAsync(c->dsts + off, c->srcs + off, c->sizes + off, n, &attr, &idx0,
				    1, st);
}

/*
 * GATHER: put the small copies for the copy engine first and return their count: those of at
 * least ce_min bytes, then of the others the first that make up ce_share percent of their
 * bytes. The rest go to the gather kernel.
 */
static unsigned ce_part(struct kvl_cudma_conn *c, unsigned n_small)
{
	struct kvl_cudma_copy *s = c->small, t;
	uint64_t total = 0, want, got = 0;
	unsigned n = 0, i;

	for (i = 0; i < n_small; i++) {
		if (s[i].len < c->o.ce_min)
			continue;
		t = s[n];
		s[n++] = s[i];
		s[i] = t;
	}
	for (i = n; i < n_small; i++)
		total += s[i].len;
	want = total * c->o.ce_share / 100;
	for (i = n; i < n_small && got < want; i++)
		got += s[i].len;
	return i > n ? i : n;
}

/* @n copies of c->small from @first on @st, @per a cudaMemcpyBatchAsync call. */
static cudaError_t batch_copies(struct kvl_cudma_conn *c, unsigned first, unsigned n, unsigned per,
				cudaStream_t st)
{
	cudaError_t ce = cudaSuccess;

	for (unsigned i = first; i < first + n && ce == cudaSuccess; i += per)
		ce = batch_copy(c, c->small + i, first + n - i < per ? first + n - i : per, st);
	return ce;
}

void kvl_cudma_set_estimates(struct kvl_cudma_conn *c, uint64_t compute_ns, uint64_t step_bytes)
{
	c->est_compute_ns = compute_ns;
	c->est_step_bytes = step_bytes;
}

/*
 * AUTO: the method this batch's small copies take. A step lasts the longer of its compute
 * (slowed by the copies running beside it) and its transfer; the copy engine slows the
 * compute less and moves 16 KiB blocks slower than the gather kernel. So the engine when a
 * step predicted that way is not longer: where the transfer hides under the compute
 * (transfer <= compute) it takes no SMs from it; where the step is transfer-bound the kernel's
 * rate decides it. The choice ("use the engine when the link is idle") that only the transport
 * could see was tried and sent everything to the engine (docs/gpu-bench.md): it needs the
 * consumer's compute, which the scheduler estimates from its DONEs.
 */
static enum kvl_cudma_small auto_method(struct kvl_cudma_conn *c, unsigned cls)
{
	const struct kvl_cudma_pick_model m = { c->o.auto_ce_ps, c->o.auto_gather_ps,
						c->o.auto_ce_slow_pm, c->o.auto_gather_slow_pm };
	bool probe = false, engine;

	engine = c->o.auto_measured
			 ? kvl_cudma_pick_auto(&c->stats.rates, &m, cls, c->est_compute_ns,
					       c->est_step_bytes, &probe)
			 : kvl_cudma_pick_engine(&m, c->est_compute_ns, c->est_step_bytes);
	return engine ? KVL_CUDMA_BATCH : KVL_CUDMA_GATHER;
}

/*
 * Batches [@from, @to) seen complete at @now, in one progress: the time since the later of the
 * first one's launch and the previous completion is theirs, shared by bytes (the stream ran
 * them one after another; one poll cannot tell when each ended), into each method's sums,
 * then one rate sample per method.
 */
static void batches_served(struct kvl_cudma_conn *c, uint32_t from, uint32_t to, uint64_t now)
{
	const struct batch *f = &c->b[from % N_BATCH];
	uint64_t start = f->t_launch > c->last_done_ns ? f->t_launch : c->last_done_ns;
	uint64_t ns = now > start ? now - start : 0, total = 0, by[3] = { 0, 0, 0 };
	uint64_t cls_of[3] = { 0, 0, 0 };

	c->last_done_ns = now;
	for (uint32_t i = from; i != to; i++) {
		const struct batch *b = &c->b[i % N_BATCH];

		total += b->bytes;
		by[b->how] += b->bytes;
		cls_of[b->how] = b->cls;
	}
	for (unsigned m = 1; m <= 2 && total > 0; m++) {
		uint64_t part = (uint64_t)((double)ns * (double)by[m] / (double)total);

		if (by[m] == 0)
			continue;
		if (m == 1) {
			c->stats.svc_ns_engine += part;
			c->stats.svc_bytes_engine += by[m];
		} else {
			c->stats.svc_ns_gather += part;
			c->stats.svc_bytes_gather += by[m];
		}
		kvl_cudma_rate_sample(&c->stats.rates, (unsigned)cls_of[m], m == 1, by[m], part);
	}
}

/* Issue the copies of requests [launched, tail) and an event behind them. */
static int flush(struct kvl_cudma_conn *c)
{
	unsigned n_cp = 0, n_small = 0, per = c->o.batch_max;
	enum kvl_cudma_small how = c->o.small;
	cudaError_t ce = cudaSuccess;
	uint64_t bytes = 0, small_bytes = 0, t0 = kvl_now_ns();
	unsigned cls;
	struct batch *b;

	if (c->launched == c->tail)
		return 0;
	if (c->btail - c->bhead == N_BATCH)
		return 0; /* all batch slots busy: the next progress tries again */
	for (uint32_t i = c->launched; i != c->tail; i++) {
		const struct req *r = &c->ring[i & c->mask];
		struct kvl_cudma_copy *p = n_cp ? &c->cp[n_cp - 1] : NULL;

		if (r->status != KVL_OK || r->len == 0)
			continue;
		/* Contiguous on both sides: one longer copy instead of two. */
		if (p != NULL && p->src + p->len == r->src && p->dst + p->len == r->dst &&
		    p->len + r->len <= c->o.merge_max) {
			p->len += r->len;
			c->stats.merged++;
			continue;
		}
		c->cp[n_cp++] =
			(struct kvl_cudma_copy){ .dst = r->dst, .src = r->src, .len = r->len };
	}
	for (unsigned i = 0; i < n_cp && ce == cudaSuccess; i++) {
		const struct kvl_cudma_copy *p = &c->cp[i];

		bytes += p->len;
		if (p->len >= c->o.copy_min || c->o.small == KVL_CUDMA_EACH) {
			ce = cudaMemcpyAsync((void *)(uintptr_t)p->dst,
					     (const void *)(uintptr_t)p->src, p->len,
					     cudaMemcpyDefault, c->st);
			c->stats.engine_copies++;
		} else {
			c->small[n_small++] = *p;
			small_bytes += p->len;
		}
	}
	if (ce != cudaSuccess) {
		broke(c, ce, "cudaMemcpyAsync");
		return -EIO;
	}
	c->stats.small_copies += n_small;
	cls = kvl_cudma_rate_class(n_small ? small_bytes / n_small : 0);
	if (how == KVL_CUDMA_AUTO && n_small > 0) {
		how = auto_method(c, cls);
		if (how == KVL_CUDMA_BATCH) {
			per = c->o.auto_batch_max;
			c->stats.auto_engine++;
		} else {
			c->stats.auto_gather++;
		}
	}
	if (n_small > 0 && how == KVL_CUDMA_GATHER)
		c->stats.batches_gather++;
	else if (n_small > 0 && how == KVL_CUDMA_BATCH)
		c->stats.batches_engine++;
	if (how == KVL_CUDMA_GATHER) {
		unsigned n_ce = ce_part(c, n_small);
		unsigned i;

		/* The copy engine's part first, so that it runs while the kernel starts. */
		if (n_ce > 0) {
			ce = cudaEventRecord(c->ev_fork, c->st);
			if (ce == cudaSuccess)
				ce = cudaStreamWaitEvent(c->st2, c->ev_fork, 0);
			if (ce == cudaSuccess)
				ce = batch_copies(c, 0, n_ce, per, c->st2);
			if (ce == cudaSuccess)
				ce = cudaEventRecord(c->ev_join, c->st2);
			if (ce != cudaSuccess) {
				broke(c, ce, "copy engine beside the gather kernel");
				return -EIO;
			}
			c->stats.ce_shared += n_ce;
		}
		for (i = n_ce; i < n_small && ce == cudaSuccess; i += KVL_CUDMA_GATHER_MAX) {
			unsigned n = n_small - i < KVL_CUDMA_GATHER_MAX ? n_small - i
									: KVL_CUDMA_GATHER_MAX;

			ce = kvl_cudma_gather_launch(&c->small[i], n, c->o.gather_ctas,
						     c->o.gather_depth, c->st);
			c->stats.launches++;
		}
		if (ce == cudaSuccess && n_ce > 0)
			ce = cudaStreamWaitEvent(c->st, c->ev_join, 0);
	} else if (how == KVL_CUDMA_BATCH) {
		ce = batch_copies(c, 0, n_small, per, c->st);
	}
	if (ce != cudaSuccess) {
		broke(c, ce, how == KVL_CUDMA_GATHER ? "gather kernel" : "cudaMemcpyBatchAsync");
		return -EIO;
	}
	b = &c->b[c->btail % N_BATCH];
	ce = cudaEventRecord(b->ev, c->st);
	if (ce != cudaSuccess) {
		broke(c, ce, "cudaEventRecord");
		return -EIO;
	}
	b->end = c->tail;
	b->t_launch = t0;
	b->bytes = bytes;
	b->cls = (uint8_t)cls;
	b->how = n_small == 0 ? 0 : how == KVL_CUDMA_BATCH ? 1 : how == KVL_CUDMA_GATHER ? 2 : 0;
	c->btail++;
	c->launched = c->tail;
	c->stats.batches++;
	return 1;
}

unsigned kvl_cudma_progress(struct kvl_cudma_conn *c)
{
	unsigned work = 0;
	uint32_t first = c->bhead;

	if (c->failed)
		return 0;
	if (flush(c) > 0)
		work++;
	while (c->bhead != c->btail) {
		struct batch *b = &c->b[c->bhead % N_BATCH];
		cudaError_t ce = cudaEventQuery(b->ev);

		if (ce == cudaErrorNotReady)
			break;
		if (ce != cudaSuccess) {
			broke(c, ce, "batch");
			return work + 1;
		}
		c->done = b->end;
		c->bhead++;
		work++;
	}
	if (c->bhead != first)
		batches_served(c, first, c->bhead, kvl_now_ns());
	return work;
}

/* Picoseconds a byte the batch's method delivers: measured (batches_served), else the fixed
 * model's. A batch of large copies only (how 0) is the copy engine's, of the large class. */
static uint32_t batch_ps(const struct kvl_cudma_conn *c, const struct batch *b)
{
	unsigned cls = b->how == 0 ? 1 : b->cls, m = b->how == 2 ? 1 : 0;
	const struct kvl_cudma_rate *r =
		&c->stats.rates.cls[cls < KVL_CUDMA_RATE_CLASSES ? cls : 0];

	if (r->samples[m] > 0 && r->ps[m] > 0)
		return r->ps[m];
	return m == 1 ? c->o.auto_gather_ps : c->o.auto_ce_ps;
}

/*
 * When the oldest batch in flight should have ended: from the later of its launch and the
 * previous completion, its bytes at its method's rate. The first look is at 7/8 of that, then
 * every 1/16 (at least DUE_LATE_NS): the rates are measured from what the looks see
 * (batches_served), and a look only after the estimate could never find a batch faster than
 * it, so an estimate that was once slow would stay slow. Requests not yet launched, or
 * complete and not reaped: now.
 */
#define DUE_LATE_NS 5000
uint64_t kvl_cudma_due(const struct kvl_cudma_conn *c, uint64_t now)
{
	const struct batch *b;
	uint64_t start, est, first, step;

	if (c->head != c->done)
		return now; /* complete, not reaped yet */
	if (c->failed)
		return UINT64_MAX;
	if (c->launched != c->tail && c->btail - c->bhead < N_BATCH)
		return now; /* the next progress launches them */
	if (c->bhead == c->btail)
		return UINT64_MAX;
	b = &c->b[c->bhead % N_BATCH];
	start = b->t_launch > c->last_done_ns ? b->t_launch : c->last_done_ns;
	est = b->bytes * batch_ps(c, b) / 1000;
	first = start + est - est / 8;
	if (first > now)
		return first;
	step = est / 16 > DUE_LATE_NS ? est / 16 : DUE_LATE_NS;
	return now + step;
}

unsigned kvl_cudma_reap(struct kvl_cudma_conn *c, struct kvl_wc *wc, unsigned max)
{
	unsigned n = 0;

	while (n < max && c->head != c->done) {
		const struct req *r = &c->ring[c->head & c->mask];

		wc[n].wr_id = r->wr_id;
		wc[n].status = r->status;
		wc[n].bytes = r->status == KVL_OK ? r->len : 0;
		if (r->status == KVL_OK) {
			if (r->op == KVL_OP_READ)
				c->stats.bytes_read += r->len;
			else
				c->stats.bytes_written += r->len;
		} else {
			c->stats.failed++;
		}
		c->stats.completed++;
		c->head++;
		n++;
	}
	return n;
}

unsigned kvl_cudma_outstanding(const struct kvl_cudma_conn *c)
{
	return c->tail - c->head;
}

void kvl_cudma_fail_all(struct kvl_cudma_conn *c, int status)
{
	/* Copies already on the stream cannot be called back: let them land, then fail the
	 * requests that have not been reaped as successes. */
	cudaStreamSynchronize(c->st);
	if (c->st2 != NULL)
		cudaStreamSynchronize(c->st2); /* a batch that broke between fork and join */
	cudaGetLastError();
	if (!c->failed)
		c->failed = status;
	complete_all(c, status);
}

cudaStream_t kvl_cudma_stream(const struct kvl_cudma_conn *c)
{
	return c->st;
}

const struct kvl_cudma_stats *kvl_cudma_stats(const struct kvl_cudma_conn *c)
{
	return &c->stats;
}

/* ---- struct kvl_xport_ops ---- */

KVL_XPORT_BURST_OF(kvl_cudma_post, struct kvl_cudma_conn)

static unsigned op_progress(void *c)
{
	return kvl_cudma_progress(c);
}

static unsigned op_reap(void *c, struct kvl_wc *wc, unsigned max)
{
	return kvl_cudma_reap(c, wc, max);
}

static void op_fail_all(void *c, int status)
{
	kvl_cudma_fail_all(c, status);
}

static int op_broken(const void *c)
{
	return ((const struct kvl_cudma_conn *)c)->failed;
}

static unsigned op_outstanding(const void *c)
{
	return kvl_cudma_outstanding(c);
}

static void op_stats(const void *cv, struct kvl_xport_stats *out)
{
	const struct kvl_cudma_conn *c = cv;
	const struct kvl_cudma_stats *s = &c->stats;

	memset(out, 0, sizeof(*out));
	out->bytes_read = s->bytes_read;
	out->bytes_written = s->bytes_written;
	out->qp_posted = s->posted;
	out->qp_posts = s->batches;
	out->qp_outstanding = kvl_cudma_outstanding(c);
}

static void op_free(void *c)
{
	kvl_cudma_free(c);
}

static uint64_t op_due(const void *c)
{
	return kvl_cudma_due(c, kvl_now_ns());
}

const struct kvl_xport_ops kvl_xport_cudma = {
	.name = "cudma",
	.post = kvl_cudma_post_burst,
	.progress = op_progress,
	.reap = op_reap,
	.fail_all = op_fail_all,
	.broken = op_broken,
	.outstanding = op_outstanding,
	.stats = op_stats,
	.free = op_free,
	.due = op_due,
};
