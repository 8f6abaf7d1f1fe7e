/* SPDX-License-Identifier: BSD-3-Clause */
/* kvlane's C API for Python (stable ABI, Python >= 3.11): the thin layer under kvlane/. */
#define Py_LIMITED_API 0x030B0000
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <dlfcn.h>
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <time.h>
#include <stdlib.h>
#include <string.h>

#include "kvl_clock.h"
#include "kvlane/kvlane.h"

#ifdef KVL_PY_CUDA_H
#include <cuda.h>
#endif

/*
 * One object per runtime (Handle). Every call checks it is open; calls that block
 * (kvl_start, kvl_connect, kvl_stop) release the GIL and hold @busy meanwhile, so close()
 * from another thread is refused (EBUSY) instead of freeing what a call still uses.
 * Addresses cross as Python ints; the Python layer (kvlane/__init__.py) checks and keeps the
 * objects they belong to.
 */
typedef struct {
	PyObject_HEAD struct kvl_runtime *rt;
	int busy;
} Handle;

static PyObject *Error; /* kvlane.Error: an OSError with errno and kvlane's message */

/* kvlane.Error(errno, "ENAME: message") as an instance; NULL on failure. */
static PyObject *make_error(int e, const char *msg)
{
	PyObject *mod = PyImport_ImportModule("errno"), *codes = NULL, *name = NULL, *key, *text;
	PyObject *args, *exc = NULL;
	const char *ename = NULL;

	codes = mod ? PyObject_GetAttrString(mod, "errorcode") : NULL;
	key = codes ? PyLong_FromLong(e) : NULL;
	name = key ? PyObject_GetItem(codes, key) : NULL;
	ename = name ? PyUnicode_AsUTF8AndSize(name, NULL) : NULL;
	PyErr_Clear();
	text = PyUnicode_FromFormat("%s: %s", ename ? ename : "E?",
				    msg && msg[0] ? msg : strerror(e));
	args = text ? Py_BuildValue("(iN)", e, text) : NULL;
	if (args)
		exc = PyObject_Call(Error, args, NULL);
	Py_XDECREF(args);
	Py_XDECREF(key);
	Py_XDECREF(name);
	Py_XDECREF(codes);
	Py_XDECREF(mod);
	return exc;
}

/* Raise kvlane.Error for @neg (a negative errno, or a positive one) with kvlane's @msg. */
static PyObject *raise_errno(int neg, const char *msg)
{
	PyObject *exc = make_error(neg < 0 ? -neg : neg, msg);

	if (exc) {
		PyErr_SetObject((PyObject *)Py_TYPE(exc), exc);
		Py_DECREF(exc);
	}
	return NULL;
}

static struct kvl_runtime *open_rt(Handle *h)
{
	if (h->rt == NULL) {
		raise_errno(-EBADF, "the runtime is closed (close() or the end of its with block)");
		return NULL;
	}
	return h->rt;
}

/* A list of str (or None) as a NULL-terminated char * array; strings stay owned by @keep. */
static int str_list(PyObject *seq, const char *what, char ***out, int *n, PyObject **keep)
{
	Py_ssize_t len;

	*out = NULL;
	*n = 0;
	*keep = NULL;
	if (seq == Py_None)
		return 0;
	*keep = PySequence_Fast(seq, what);
	if (*keep == NULL)
		return -1;
	len = PySequence_Size(*keep);
	*out = calloc((size_t)len + 2, sizeof(char *));
	if (*out == NULL) {
		PyErr_NoMemory();
		return -1;
	}
	for (Py_ssize_t i = 0; i < len; i++) {
		PyObject *it = PySequence_GetItem(*keep, i); /* new reference; kept by the list */
		const char *s =
			it && PyUnicode_Check(it) ? PyUnicode_AsUTF8AndSize(it, NULL) : NULL;

		Py_XDECREF(it);
		if (s == NULL) {
			if (!PyErr_Occurred())
				PyErr_Format(PyExc_TypeError, "%s: item %zd is not a str", what, i);
			return -1;
		}
		(*out)[i] = (char *)s;
	}
	*n = (int)len;
	return 0;
}

static PyObject *Handle_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = { "config", "sets", "eal", "sysfs_root", NULL };
	const char *config, *sysfs = NULL;
	PyObject *sets = Py_None, *eal = Py_None, *ksets = NULL, *keal = NULL;
	char **vsets = NULL, **veal = NULL, err[8192];
	int nsets = 0, neal = 0, stage = 0, e;
	struct kvl_start_args sa;
	struct kvl_runtime *rt;
	Handle *h = NULL;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "s|OOz", kwlist, &config, &sets, &eal, &sysfs))
		return NULL;
	if (str_list(sets, "sets", &vsets, &nsets, &ksets) < 0 ||
	    str_list(eal, "eal", &veal, &neal, &keal) < 0)
		goto out;
	if (neal > 0) { /* EAL's argv[0] first, then the caller's EAL arguments */
		memmove(veal + 1, veal, (size_t)neal * sizeof(char *));
		veal[0] = (char *)"kvlane-python";
		neal++;
	}
	sa = (struct kvl_start_args){ .eal_argc = neal,
				      .eal_argv = veal,
				      .config = config,
				      .sets = (const char *const *)vsets,
				      .n_sets = (unsigned)nsets,
				      .sysfs_root = sysfs };
	Py_BEGIN_ALLOW_THREADS;
	errno = 0;
	rt = kvl_start(&sa, err, sizeof(err), &stage);
	e = errno;
	Py_END_ALLOW_THREADS;
	if (rt == NULL) {
		/* the stage says what failed; the errno what kind of failure it was */
		int code = e == EALREADY	       ? EALREADY
			   : stage == KVL_START_CONFIG ? EINVAL
			   : stage == KVL_START_EAL    ? (e ? e : EIO)
						       : (e ? e : ENODEV);
		PyObject *exc = make_error(code, err), *st = exc ? PyLong_FromLong(stage) : NULL;

		if (st) {
			PyObject_SetAttrString(exc, "stage", st);
			Py_DECREF(st);
		}
		if (exc) {
			PyErr_SetObject((PyObject *)Py_TYPE(exc), exc);
			Py_DECREF(exc);
		}
		goto out;
	}
	h = (Handle *)PyType_GenericAlloc(type, 0);
	if (h == NULL) {
		kvl_stop(rt);
		goto out;
	}
	h->rt = rt;
out:
	free(vsets);
	free(veal);
	Py_XDECREF(ksets);
	Py_XDECREF(keal);
	return (PyObject *)h;
}

static PyObject *Handle_close(Handle *h, PyObject *unused)
{
	struct kvl_runtime *rt = h->rt;

	(void)unused;
	if (h->busy)
		return raise_errno(-EBUSY, "another thread is in a blocking call on this runtime");
	if (rt == NULL)
		Py_RETURN_NONE;
	h->rt = NULL;
	h->busy = 1;
	Py_BEGIN_ALLOW_THREADS;
	kvl_stop(rt);
	Py_END_ALLOW_THREADS;
	h->busy = 0;
	Py_RETURN_NONE;
}

static void Handle_dealloc(Handle *h)
{
	PyTypeObject *tp = Py_TYPE((PyObject *)h);
	freefunc f = (freefunc)PyType_GetSlot(tp, Py_tp_free);

	if (h->rt && !h->busy)
		kvl_stop(h->rt);
	f(h);
	Py_DECREF(tp);
}

static PyObject *Handle_closed(Handle *h, void *unused)
{
	(void)unused;
	return PyBool_FromLong(h->rt == NULL);
}

static PyObject *Handle_listen_addr(Handle *h, PyObject *unused)
{
	struct kvl_runtime *rt = open_rt(h);

	(void)unused;
	return rt ? PyUnicode_FromString(kvl_listen_addr(rt)) : NULL;
}

static PyObject *seg_tuple(const struct kvl_segment *s)
{
	return Py_BuildValue("(IKK(IIII)Ii)", s->id, (unsigned long long)(uintptr_t)s->base,
			     (unsigned long long)s->length, s->geom.layers, s->geom.planes,
			     s->geom.blocks, s->geom.block_bytes, s->mem, (int)s->gpu);
}

/* seg_alloc(name, (layers, planes, blocks, block_bytes), access, gpu=None) */
static PyObject *Handle_seg_alloc(Handle *h, PyObject *args)
{
	struct kvl_runtime *rt = open_rt(h);
	struct kvl_seg_geom g;
	struct kvl_segment s;
	const char *name;
	unsigned access;
	PyObject *gpu = Py_None;
	int rc;

	if (rt == NULL || !PyArg_ParseTuple(args, "s(IIII)I|O", &name, &g.layers, &g.planes,
					    &g.blocks, &g.block_bytes, &access, &gpu))
		return NULL;
	if (gpu == Py_None)
		rc = kvl_seg_alloc(rt, name, &g, access, &s);
	else {
		long d = PyLong_AsLong(gpu);

		if (d == -1 && PyErr_Occurred())
			return NULL;
		rc = kvl_seg_alloc_gpu(rt, name, &g, access, (int)d, &s);
	}
	if (rc < 0)
		return raise_errno(rc, gpu == Py_None ? "kvl_seg_alloc" : kvl_seg_error());
	return seg_tuple(&s);
}

/* seg_register(name, address, (layers, planes, blocks, block_bytes), access) */
static PyObject *Handle_seg_register(Handle *h, PyObject *args)
{
	struct kvl_runtime *rt = open_rt(h);
	unsigned long long addr;
	struct kvl_seg_geom g;
	struct kvl_segment s;
	const char *name;
	unsigned access;
	int rc;

	if (rt == NULL || !PyArg_ParseTuple(args, "sK(IIII)I", &name, &addr, &g.layers, &g.planes,
					    &g.blocks, &g.block_bytes, &access))
		return NULL;
	rc = kvl_seg_register(rt, name, (void *)(uintptr_t)addr, &g, access, &s);
	if (rc < 0)
		return raise_errno(rc, kvl_seg_error());
	return seg_tuple(&s);
}

static PyObject *Handle_connect(Handle *h, PyObject *args)
{
	struct kvl_runtime *rt = open_rt(h);
	const char *addr;
	unsigned timeout_ms = 10000;
	kvl_peer_t peer = 0;
	char err[1024] = "";
	int rc;

	if (rt == NULL || !PyArg_ParseTuple(args, "s|I", &addr, &timeout_ms))
		return NULL;
	h->busy++;
	Py_BEGIN_ALLOW_THREADS;
	rc = kvl_connect(rt, addr, timeout_ms, &peer, err, sizeof(err));
	Py_END_ALLOW_THREADS;
	h->busy--;
	if (rc < 0)
		return raise_errno(rc, err);
	return PyLong_FromUnsignedLong(peer);
}

static PyObject *Handle_peer_segments(Handle *h, PyObject *args)
{
	struct kvl_runtime *rt = open_rt(h);
	struct kvl_remote_seg rs[256];
	unsigned peer;
	PyObject *list;
	int n;

	if (rt == NULL || !PyArg_ParseTuple(args, "I", &peer))
		return NULL;
	n = kvl_peer_segments(rt, peer, rs, 256);
	if (n < 0)
		return raise_errno(n, "kvl_peer_segments: no such peer, or it is not connected");
	list = PyList_New(0);
	for (int i = 0; list && i < n && i < 256; i++) {
		PyObject *t = Py_BuildValue("(IIK(IIII)s)", rs[i].id, rs[i].access,
					    (unsigned long long)rs[i].length, rs[i].geom.layers,
					    rs[i].geom.planes, rs[i].geom.blocks,
					    rs[i].geom.block_bytes, rs[i].name);

		if (t == NULL || PyList_Append(list, t) < 0) {
			Py_XDECREF(t);
			Py_CLEAR(list);
			break;
		}
		Py_DECREF(t);
	}
	return list;
}

/* An unsigned field of a transfer/block tuple, with the tuple's index in the message. */
static int item_u64(PyObject *t, Py_ssize_t i, const char *what, Py_ssize_t idx, uint64_t max,
		    uint64_t *out)
{
	PyObject *o = PySequence_GetItem(t, i);
	unsigned long long v;

	if (o == NULL)
		return -1;
	if (!PyLong_Check(o)) {
		PyErr_Format(PyExc_TypeError, "%s %zd: field %zd is not an int", what, idx, i);
		Py_DECREF(o);
		return -1;
	}
	v = PyLong_AsUnsignedLongLong(o);
	Py_DECREF(o);
	if (PyErr_Occurred() || v > max) {
		PyErr_Clear();
		PyErr_Format(PyExc_OverflowError, "%s %zd: field %zd is negative or too large",
			     what, idx, i);
		return -1;
	}
	*out = v;
	return 0;
}

/* post(peer, [(cookie, local, remote_off, length, remote_seg, op, flags, notify), ...]) */
static PyObject *Handle_post(Handle *h, PyObject *args)
{
	struct kvl_runtime *rt = open_rt(h);
	struct kvl_xfer stackx[64], *x = stackx;
	PyObject *seq, *fast;
	unsigned peer;
	Py_ssize_t n;
	int rc = 0;

	if (rt == NULL || !PyArg_ParseTuple(args, "IO", &peer, &seq))
		return NULL;
	fast = PySequence_Fast(seq, "post: transfers must be a sequence of tuples");
	if (fast == NULL)
		return NULL;
	n = PySequence_Size(fast);
	if (n > 64 && (x = calloc((size_t)n, sizeof(*x))) == NULL) {
		Py_DECREF(fast);
		return PyErr_NoMemory();
	}
	memset(x, 0, (size_t)(n > 64 ? n : 64) * sizeof(*x));
	for (Py_ssize_t i = 0; i < n; i++) {
		PyObject *t = PySequence_GetItem(fast, i);
		uint64_t f[8] = { 0 };
		static const uint64_t max[8] = { UINT64_MAX, UINTPTR_MAX, UINT64_MAX, UINT32_MAX,
						 UINT32_MAX, UINT32_MAX,  UINT32_MAX, UINT32_MAX };
		Py_ssize_t len = t && PyTuple_Check(t) ? PyTuple_Size(t) : -1;

		if (len < 6 || len > 8) {
			Py_XDECREF(t);
			PyErr_Format(
				PyExc_TypeError,
				"post: transfer %zd is not a tuple (cookie, local, remote_off, "
				"length, remote_seg, op[, flags[, notify]])",
				i);
			rc = -1;
			break;
		}
		for (Py_ssize_t j = 0; j < len && rc == 0; j++)
			rc = item_u64(t, j, "post: transfer", i, max[j], &f[j]);
		Py_DECREF(t);
		if (rc < 0)
			break;
		x[i] = (struct kvl_xfer){ .cookie = f[0],
					  .local = (void *)(uintptr_t)f[1],
					  .remote_off = f[2],
					  .length = (uint32_t)f[3],
					  .remote_seg = (uint32_t)f[4],
					  .op = (uint32_t)f[5],
					  .flags = (uint32_t)f[6],
					  .notify = (uint32_t)f[7] };
	}
	Py_DECREF(fast);
	if (rc == 0) {
		rc = kvl_post(rt, peer, x, (unsigned)n);
		if (rc < 0)
			raise_errno(rc,
				    rc == -EFAULT ? "a local range is outside every local segment"
				    : rc == -ENOTCONN ? "the peer is not connected (or is dead)"
				    : rc == -EINVAL   ? "a bad transfer (op, flags, length or iov)"
						      : "kvl_post");
	}
	if (x != stackx)
		free(x);
	return rc < 0 ? NULL : PyLong_FromLong(rc);
}

/*
 * The three polls (completions, notices, request events): up to @max (at most 256) items
 * taken by @take into a stack array, each made a tuple by @item. Items taken are gone from
 * kvlane: a tuple that cannot be built (out of memory) loses them, with MemoryError raised.
 */
union poll_buf {
	struct kvl_completion c[256];
	struct kvl_notice n[256];
	struct kvl_req_event e[256];
};

static unsigned take_completions(struct kvl_runtime *rt, union poll_buf *b, unsigned max)
{
	return kvl_poll(rt, b->c, max);
}

static PyObject *completion_item(const union poll_buf *b, unsigned i)
{
	return Py_BuildValue("(KIi)", (unsigned long long)b->c[i].cookie, b->c[i].bytes,
			     (int)b->c[i].status);
}

static unsigned take_notices(struct kvl_runtime *rt, union poll_buf *b, unsigned max)
{
	return kvl_poll_notices(rt, b->n, max);
}

static PyObject *notice_item(const union poll_buf *b, unsigned i)
{
	return Py_BuildValue("(III)", b->n[i].peer, b->n[i].value, b->n[i].length);
}

static unsigned take_req_events(struct kvl_runtime *rt, union poll_buf *b, unsigned max)
{
	return kvl_req_poll(rt, b->e, max);
}

static PyObject *req_event_item(const union poll_buf *b, unsigned i)
{
	return Py_BuildValue("(KKIIi)", (unsigned long long)b->e[i].req,
			     (unsigned long long)b->e[i].user, b->e[i].type, b->e[i].step,
			     (int)b->e[i].status);
}

static PyObject *poll_list(Handle *h, PyObject *args,
			   unsigned (*take)(struct kvl_runtime *, union poll_buf *, unsigned),
			   PyObject *(*item)(const union poll_buf *, unsigned))
{
	struct kvl_runtime *rt = open_rt(h);
	union poll_buf b;
	unsigned max = 64, n;
	PyObject *list;

	if (rt == NULL || !PyArg_ParseTuple(args, "|I", &max))
		return NULL;
	n = take(rt, &b, max < 256 ? max : 256);
	list = PyList_New(n);
	for (unsigned i = 0; list && i < n; i++) {
		PyObject *t = item(&b, i);

		if (t == NULL) {
			Py_CLEAR(list);
			break;
		}
		PyList_SetItem(list, i, t);
	}
	return list;
}

static double ts_diff(const struct timespec *a, const struct timespec *b)
{
	return (double)(b->tv_sec - a->tv_sec) + (double)(b->tv_nsec - a->tv_nsec) / 1e9;
}

/* c_read_loop(peer, seg, local, span, size, iters, depth) -> (seconds, failed, in_calls): the
 * loop that tools/py_post_bench.py runs in Python (READs of @size, @depth in flight, offsets
 * wrapping at @span, sched_yield on an empty poll), in C through kvl_post/kvl_poll on this
 * same runtime and connection, so that the two alternate back to back in one process.
 * in_calls: seconds inside kvl_post/kvl_poll calls that took or gave something, as the Python
 * loop counts its own. The GIL is released. */
static PyObject *Handle_c_read_loop(Handle *h, PyObject *args)
{
	struct kvl_runtime *rt = open_rt(h);
	unsigned long long local, span, iters;
	unsigned peer, seg, size, depth;
	struct kvl_xfer x[256];
	struct kvl_completion c[64];
	uint64_t posted = 0, done = 0, off = 0, bad = 0;
	struct timespec t0, t1, c0, c1;
	double in_calls = 0;
	int rc = 0;

	if (rt == NULL ||
	    !PyArg_ParseTuple(args, "IIKKIKI", &peer, &seg, &local, &span, &size, &iters, &depth))
		return NULL;
	if (size == 0 || span < size || depth == 0 || depth > 256)
		return raise_errno(-EINVAL, "c_read_loop: size > 0, span >= size, depth 1..256");
	Py_BEGIN_ALLOW_THREADS;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	while (done < iters) {
		uint64_t want = depth - (posted - done);
		unsigned got;

		if (want > iters - posted)
			want = iters - posted;
		if (want > 0) {
			for (uint64_t i = 0; i < want; i++) {
				x[i] = (struct kvl_xfer){ .cookie = posted + i,
							  .local = (void *)(uintptr_t)(local + off),
							  .remote_off = off,
							  .length = size,
							  .remote_seg = seg,
							  .op = KVL_READ };
				off = off + 2ull * size <= span ? off + size : 0;
			}
			clock_gettime(CLOCK_MONOTONIC, &c0);
			rc = kvl_post(rt, peer, x, (unsigned)want);
			clock_gettime(CLOCK_MONOTONIC, &c1);
			if (rc < 0)
				break;
			in_calls += ts_diff(&c0, &c1);
			posted += (unsigned)rc; /* offsets not taken are skipped, as in Python */
		}
		clock_gettime(CLOCK_MONOTONIC, &c0);
		got = kvl_poll(rt, c, 64);
		clock_gettime(CLOCK_MONOTONIC, &c1);
		if (got == 0)
			sched_yield();
		else
			in_calls += ts_diff(&c0, &c1);
		for (unsigned i = 0; i < got; i++)
			bad += c[i].status != KVL_OK;
		done += got;
	}
	clock_gettime(CLOCK_MONOTONIC, &t1);
	Py_END_ALLOW_THREADS;
	if (rc < 0)
		return raise_errno(rc, "c_read_loop: kvl_post");
	return Py_BuildValue("dKd", ts_diff(&t0, &t1), (unsigned long long)bad, in_calls);
}

static PyObject *Handle_poll(Handle *h, PyObject *args)
{
	return poll_list(h, args, take_completions, completion_item);
}

static PyObject *Handle_poll_notices(Handle *h, PyObject *args)
{
	return poll_list(h, args, take_notices, notice_item);
}

static PyObject *Handle_req_poll(Handle *h, PyObject *args)
{
	return poll_list(h, args, take_req_events, req_event_item);
}

/* A sequence of ints as a uint32_t array (malloc'd). */
static uint32_t *u32_array(PyObject *seq, const char *what, uint32_t *n)
{
	PyObject *fast = PySequence_Fast(seq, what);
	Py_ssize_t len;
	uint32_t *a;

	if (fast == NULL)
		return NULL;
	len = PySequence_Size(fast);
	a = calloc((size_t)len + 1, sizeof(*a));
	if (a == NULL) {
		Py_DECREF(fast);
		PyErr_NoMemory();
		return NULL;
	}
	for (Py_ssize_t i = 0; i < len; i++) {
		PyObject *o = PySequence_GetItem(fast, i);
		unsigned long v =
			o && PyLong_Check(o) ? PyLong_AsUnsignedLong(o) : (unsigned long)-1;

		Py_XDECREF(o);
		if (PyErr_Occurred() || v > UINT32_MAX) {
			PyErr_Clear();
			PyErr_Format(PyExc_TypeError, "%s: item %zd is not an int in 0..2^32-1",
				     what, i);
			free(a);
			Py_DECREF(fast);
			return NULL;
		}
		a[i] = (uint32_t)v;
	}
	*n = (uint32_t)len;
	Py_DECREF(fast);
	return a;
}

/* req_open(peer, [(remote_seg, remote_off, length, local), ...], step_first, step_blocks,
 *          deadline_us, user, cls, dir, flags) */
static PyObject *Handle_req_open(Handle *h, PyObject *args)
{
	struct kvl_runtime *rt = open_rt(h);
	PyObject *blocks, *first, *sblocks, *fast = NULL;
	unsigned long long deadline, user;
	unsigned peer, cls, dir, flags;
	struct kvl_req_block *b = NULL;
	uint32_t *sf = NULL, *sb = NULL, nf = 0, nb = 0;
	struct kvl_req_desc d;
	kvl_req_t req = 0;
	Py_ssize_t n = 0;
	int rc = -1;

	if (rt == NULL || !PyArg_ParseTuple(args, "IOOOKKIII", &peer, &blocks, &first, &sblocks,
					    &deadline, &user, &cls, &dir, &flags))
		return NULL;
	fast = PySequence_Fast(blocks, "open_request: blocks must be a sequence");
	if (fast == NULL)
		return NULL;
	n = PySequence_Size(fast);
	b = calloc((size_t)n + 1, sizeof(*b));
	if (b == NULL) {
		PyErr_NoMemory();
		goto out;
	}
	for (Py_ssize_t i = 0; i < n; i++) {
		PyObject *t = PySequence_GetItem(fast, i);
		uint64_t f[4] = { 0 };
		static const uint64_t max[4] = { UINT32_MAX, UINT64_MAX, UINT32_MAX, UINTPTR_MAX };
		Py_ssize_t len = t && PyTuple_Check(t) ? PyTuple_Size(t) : -1;
		int r = 0;

		if (len < 3 || len > 4) {
			Py_XDECREF(t);
			PyErr_Format(
				PyExc_TypeError,
				"open_request: block %zd is not a tuple (remote_seg, remote_off, "
				"length[, local])",
				i);
			goto out;
		}
		for (Py_ssize_t j = 0; j < len && r == 0; j++)
			r = item_u64(t, j, "open_request: block", i, max[j], &f[j]);
		Py_DECREF(t);
		if (r < 0)
			goto out;
		b[i] = (struct kvl_req_block){ .remote_seg = (uint32_t)f[0],
					       .remote_off = f[1],
					       .length = (uint32_t)f[2],
					       .local = (void *)(uintptr_t)f[3] };
	}
	sf = u32_array(first, "open_request: step_first", &nf);
	sb = sf ? u32_array(sblocks, "open_request: step_blocks", &nb) : NULL;
	if (sb == NULL)
		goto out;
	d = (struct kvl_req_desc){ .blocks = b,
				   .n_blocks = (uint32_t)n,
				   .n_steps = nf ? nf - 1 : 0,
				   .step_first = sf,
				   .step_blocks = sb,
				   .deadline_us = deadline,
				   .user = user,
				   .cls = cls,
				   .dir = dir,
				   .flags = flags };
	rc = kvl_req_open(rt, peer, &d, &req);
	if (rc < 0 && kvl_req_error()[0] != '\0') {
		/* the runtime named the block, its address and the segment or NIC */
		raise_errno(rc, kvl_req_error());
		rc = -1;
	} else if (rc < 0) {
		raise_errno(rc, rc == -ENOTSUP ? "no scheduler: set [sched] staging_mb > 0"
				: rc == -EINVAL
					? "a malformed request (counts, steps, class, direction "
					  "or flags)"
				: rc == -ERANGE	  ? "a block outside its segment on the peer"
				: rc == -ENOENT	  ? "a segment the peer does not offer"
				: rc == -EMSGSIZE ? "a block longer than [sched] slot_kb"
				: rc == -EFAULT	  ? "a PUSH block's local bytes are not inside one "
						    "registered local segment"
				: rc == -ENOTCONN ? "the peer is not connected"
				: rc == -EXDEV	  ? "a GPU destination on a NIC whose transport "
						    "cannot write VRAM (tcp)"
				: rc == -EACCES	  ? "a segment the peer does not let us READ (or "
						    "WRITE, for a PUSH)"
				: rc == -ENOSPC	  ? "[sched] max_requests or max_blocks reached, "
						    "or no free run of step flags"
						  : "kvl_req_open");
		rc = -1;
	}
out:
	Py_XDECREF(fast);
	free(b);
	free(sf);
	free(sb);
	return rc < 0 ? NULL : PyLong_FromUnsignedLongLong(req);
}

static PyObject *Handle_req_step_done(Handle *h, PyObject *args)
{
	struct kvl_runtime *rt = open_rt(h);
	unsigned long long req;
	unsigned step;
	int rc;

	if (rt == NULL || !PyArg_ParseTuple(args, "KI", &req, &step))
		return NULL;
	rc = kvl_req_step_done(rt, req, step);
	if (rc < 0)
		return raise_errno(rc, rc == -ENOENT   ? "no such request, or it ended"
				       : rc == -ERANGE ? "step index past the request's steps"
				       : rc == -EINVAL
					       ? "the step is not READY (or the request uses "
						 "step flags)"
				       : rc == -EALREADY ? "the step is DONE already"
							 : "kvl_req_step_done");
	Py_RETURN_NONE;
}

static PyObject *Handle_req_cancel(Handle *h, PyObject *args)
{
	struct kvl_runtime *rt = open_rt(h);
	unsigned long long req;
	int rc;

	if (rt == NULL || !PyArg_ParseTuple(args, "K", &req))
		return NULL;
	rc = kvl_req_cancel(rt, req);
	if (rc < 0)
		return raise_errno(rc, rc == -ENOENT	 ? "no such request, or it ended"
				       : rc == -EALREADY ? "canceled already"
							 : "kvl_req_cancel");
	Py_RETURN_NONE;
}

static PyObject *Handle_req_block_addr(Handle *h, PyObject *args)
{
	struct kvl_runtime *rt = open_rt(h);
	unsigned long long req;
	unsigned block;
	void *addr = NULL;
	int rc;

	if (rt == NULL || !PyArg_ParseTuple(args, "KI", &req, &block))
		return NULL;
	rc = kvl_req_block_addr(rt, req, block, &addr);
	if (rc < 0)
		return raise_errno(rc, rc == -ENOENT   ? "no such request, or it ended"
				       : rc == -ERANGE ? "block index past the request's blocks"
				       : rc == -EAGAIN ? "the block has not landed, or was freed"
						       : "kvl_req_block_addr");
	return PyLong_FromUnsignedLongLong((uintptr_t)addr);
}

static PyObject *Handle_req_step_flags(Handle *h, PyObject *args)
{
	struct kvl_runtime *rt = open_rt(h);
	struct kvl_req_flags f;
	unsigned long long req;
	int rc;

	if (rt == NULL || !PyArg_ParseTuple(args, "K", &req))
		return NULL;
	rc = kvl_req_step_flags(rt, req, &f);
	if (rc < 0)
		return raise_errno(rc, rc == -EINVAL ? "the request was opened without step flags"
						     : "no such request, or it ended");
	return Py_BuildValue("(KKKKIII)", (unsigned long long)(uintptr_t)f.ready,
			     (unsigned long long)(uintptr_t)f.done, (unsigned long long)f.ready_dev,
			     (unsigned long long)f.done_dev, f.stride, f.epoch, f.n_steps);
}

static PyObject *Handle_req_budget_cap(Handle *h, PyObject *args)
{
	struct kvl_runtime *rt = open_rt(h);
	unsigned long long bytes;
	int rc;

	if (rt == NULL || !PyArg_ParseTuple(args, "K", &bytes))
		return NULL;
	rc = kvl_req_budget_cap(rt, bytes);
	if (rc < 0)
		return raise_errno(rc, "no scheduler: set [sched] staging_mb > 0");
	Py_RETURN_NONE;
}

static PyMethodDef handle_methods[] = {
	{ "close", (PyCFunction)Handle_close, METH_NOARGS, "kvl_stop(); idempotent." },
	{ "listen_addr", (PyCFunction)Handle_listen_addr, METH_NOARGS, "kvl_listen_addr()" },
	{ "seg_alloc", (PyCFunction)Handle_seg_alloc, METH_VARARGS, "kvl_seg_alloc[_gpu]()" },
	{ "seg_register", (PyCFunction)Handle_seg_register, METH_VARARGS, "kvl_seg_register()" },
	{ "connect", (PyCFunction)Handle_connect, METH_VARARGS, "kvl_connect() (GIL released)" },
	{ "peer_segments", (PyCFunction)Handle_peer_segments, METH_VARARGS, "kvl_peer_segments()" },
	{ "post", (PyCFunction)Handle_post, METH_VARARGS, "kvl_post()" },
	{ "c_read_loop", (PyCFunction)Handle_c_read_loop, METH_VARARGS,
	  "the benchmark's READ loop in C (tools/py_post_bench.py)" },
	{ "poll", (PyCFunction)Handle_poll, METH_VARARGS, "kvl_poll()" },
	{ "poll_notices", (PyCFunction)Handle_poll_notices, METH_VARARGS, "kvl_poll_notices()" },
	{ "req_open", (PyCFunction)Handle_req_open, METH_VARARGS, "kvl_req_open()" },
	{ "req_poll", (PyCFunction)Handle_req_poll, METH_VARARGS, "kvl_req_poll()" },
	{ "req_step_done", (PyCFunction)Handle_req_step_done, METH_VARARGS, "kvl_req_step_done()" },
	{ "req_cancel", (PyCFunction)Handle_req_cancel, METH_VARARGS, "kvl_req_cancel()" },
	{ "req_block_addr", (PyCFunction)Handle_req_block_addr, METH_VARARGS,
	  "kvl_req_block_addr()" },
	{ "req_step_flags", (PyCFunction)Handle_req_step_flags, METH_VARARGS,
	  "kvl_req_step_flags()" },
	{ "req_budget_cap", (PyCFunction)Handle_req_budget_cap, METH_VARARGS,
	  "kvl_req_budget_cap()" },
	{ NULL, NULL, 0, NULL },
};

static PyGetSetDef handle_getset[] = {
	{ "closed", (getter)Handle_closed, NULL, "True once close() ran", NULL },
	{ NULL, NULL, NULL, NULL, NULL },
};

static PyType_Slot handle_slots[] = {
	{ Py_tp_new, Handle_new },
	{ Py_tp_dealloc, Handle_dealloc },
	{ Py_tp_methods, handle_methods },
	{ Py_tp_getset, handle_getset },
	{ Py_tp_doc, "A started kvlane runtime (kvl_start): the C API's handle." },
	{ 0, NULL },
};

static PyType_Spec handle_spec = { "kvlane._kvlane.Handle", sizeof(Handle), 0, Py_TPFLAGS_DEFAULT,
				   handle_slots };

/* A writable memoryview of @length bytes at @address (a segment kvlane allocated). */
static PyObject *mod_memory(PyObject *self, PyObject *args)
{
	unsigned long long addr, len;

	(void)self;
	if (!PyArg_ParseTuple(args, "KK", &addr, &len))
		return NULL;
	if (addr == 0 || len > PY_SSIZE_T_MAX)
		return raise_errno(-EINVAL, "no memory there");
	return PyMemoryView_FromMemory((char *)(uintptr_t)addr, (Py_ssize_t)len, PyBUF_WRITE);
}

/* (address, length, readonly) of a C-contiguous buffer-protocol object, and the object that
 * holds the export (a memoryview: while it lives, a bytearray cannot be resized or freed). */
static PyObject *mod_buffer_address(PyObject *self, PyObject *obj)
{
	PyObject *view;
	Py_buffer b;
	int ro = 0;

	(void)self;
	if (PyObject_GetBuffer(obj, &b, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) < 0) {
		PyErr_Clear();
		ro = 1;
		if (PyObject_GetBuffer(obj, &b, PyBUF_C_CONTIGUOUS) < 0)
			return NULL; /* TypeError / BufferError from the object: names the cause */
	}
	PyBuffer_Release(&b);
	view = PyMemoryView_FromObject(obj); /* holds its own export */
	if (view == NULL)
		return NULL;
	if (PyObject_GetBuffer(view, &b,
			       ro ? PyBUF_C_CONTIGUOUS : (PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS)) <
	    0) {
		Py_DECREF(view);
		return NULL;
	}
	{
		PyObject *r = Py_BuildValue("(KnON)", (unsigned long long)(uintptr_t)b.buf, b.len,
					    ro ? Py_True : Py_False, view);

		PyBuffer_Release(&b);
		return r;
	}
}

/*
 * DLPack (dmlc/dlpack's ABI, version-0 capsules named "dltensor"): the struct layout as the
 * spec fixes it, written here so the binding needs no header beyond Python's.
 */
struct dl_tensor {
	void *data;
	int32_t device_type; /* 1 CPU, 2 CUDA, 3 CUDA host (pinned), 13 CUDA managed */
	int32_t device_id;
	int32_t ndim;
	uint8_t code, bits;
	uint16_t lanes;
	int64_t *shape;
	int64_t *strides; /* NULL: compact row-major */
	uint64_t byte_offset;
};

/* dlpack_address(capsule): (address, nbytes, device_type, device_id, contiguous). The capsule
 * is not consumed (not renamed): the caller keeps it, and with it the producer's memory. */
static PyObject *mod_dlpack_address(PyObject *self, PyObject *cap)
{
	const struct dl_tensor *t;
	uint64_t n = 1, item, want;
	int contiguous = 1;

	(void)self;
	t = PyCapsule_GetPointer(cap, "dltensor");
	if (t == NULL)
		return NULL; /* not an unconsumed DLPack capsule: ValueError / TypeError from Python
			      */
	if (t->ndim < 0 || (t->ndim > 0 && t->shape == NULL) || t->bits % 8 != 0)
		return raise_errno(-EINVAL, "dlpack: malformed tensor");
	item = (uint64_t)t->bits / 8 * (t->lanes ? t->lanes : 1);
	for (int32_t i = 0; i < t->ndim; i++)
		n *= (uint64_t)t->shape[i];
	/* compact row-major or nothing: kvlane registers one range */
	want = 1;
	for (int32_t i = t->ndim - 1; t->strides && i >= 0; i--) {
		if (t->shape[i] != 1 && (uint64_t)t->strides[i] != want)
			contiguous = 0;
		want *= (uint64_t)t->shape[i];
	}
	return Py_BuildValue("(KKiii)", (unsigned long long)((uintptr_t)t->data + t->byte_offset),
			     (unsigned long long)(n * item), (int)t->device_type, (int)t->device_id,
			     contiguous);
}

static PyObject *mod_status_name(PyObject *self, PyObject *arg)
{
	long s = PyLong_AsLong(arg);

	(void)self;
	if (s == -1 && PyErr_Occurred())
		return NULL;
	return PyUnicode_FromString(kvl_status_name((int)s));
}

/* pattern_check(address, length, seed, offset): kvl_pattern_check (first differing byte). */
static PyObject *mod_pattern_check(PyObject *self, PyObject *args)
{
	unsigned long long addr, len, off;
	unsigned seed;
	uint64_t r;

	(void)self;
	if (!PyArg_ParseTuple(args, "KKIK", &addr, &len, &seed, &off))
		return NULL;
	if (addr == 0)
		return raise_errno(-EINVAL, "pattern_check: address 0");
	Py_BEGIN_ALLOW_THREADS;
	r = kvl_pattern_check((const void *)(uintptr_t)addr, len, seed, off);
	Py_END_ALLOW_THREADS;
	return PyLong_FromUnsignedLongLong(r);
}

/*
 * A table of requests' step words for one forward, as the connector packs it ("=QQIIII" a
 * request): its READY and DONE words (device addresses for stream_layer_ops, host ones for
 * host_layer_wait), kvl_req_flags' stride, epoch and n_steps, 0.
 */
struct py_flagrow {
	uint64_t ready, done;
	uint32_t stride, epoch, n_steps, pad;
};
_Static_assert(sizeof(struct py_flagrow) == 32, "the table's rows are 32 bytes");

/* @tab's rows (*@count), every one checked for @layer; NULL with a ValueError naming @fn. */
static const struct py_flagrow *flag_table(const char *fn, PyObject *tab, unsigned long layer,
					   Py_ssize_t *count)
{
	const struct py_flagrow *t;
	Py_ssize_t len, i;
	char *buf;

	if (PyBytes_AsStringAndSize(tab, &buf, &len) < 0)
		return NULL;
	if (len % (Py_ssize_t)sizeof(*t)) {
		PyErr_Format(PyExc_ValueError,
			     "%s: the table is %zd bytes, not a multiple of %zu (rows packed "
			     "\"=QQIIII\": ready, done, stride, epoch, n_steps, 0)",
			     fn, len, sizeof(*t));
		return NULL;
	}
	t = (const struct py_flagrow *)buf;
	*count = len / (Py_ssize_t)sizeof(*t);
	for (i = 0; i < *count; i++) {
		if (t[i].ready == 0 || t[i].done == 0) {
			PyErr_Format(PyExc_ValueError,
				     "%s: entry %zd: a word's address is 0 (for the GPU: the flag "
				     "pool is not mapped, [gpu] enable = true)",
				     fn, i);
			return NULL;
		}
		if (layer >= t[i].n_steps) {
			PyErr_Format(PyExc_ValueError,
				     "%s: entry %zd: no such step (layer %lu of %u)", fn, i, layer,
				     (unsigned)t[i].n_steps);
			return NULL;
		}
	}
	return t;
}

#ifdef KVL_PY_CUDA_H
/*
 * The per-layer READY wait of a forward's loads in one call: for each request of @table, the
 * stream waits until its READY word of @layer reaches the epoch, then writes its DONE word
 * (ordered behind the wait), as one cuStreamBatchMemOp when the driver has it. A connector
 * builds @table once per forward (start_load_kv), so wait_for_layer_load costs one call into
 * C and one into the driver, whatever the number of requests. The driver is found through
 * libcuda.so.1 (already loaded by the engine's CUDA runtime): nothing links it, and a host
 * without it gets an error naming it. The GIL stays held: enqueueing takes microseconds.
 */
static struct {
	int state; /* 0 not tried, 1 ready, -1 failed (why says why) */
	char why[256];
	CUresult (*batch)(CUstream, unsigned, CUstreamBatchMemOpParams *, unsigned);
	CUresult (*wait)(CUstream, CUdeviceptr, cuuint32_t, unsigned);
	CUresult (*write)(CUstream, CUdeviceptr, cuuint32_t, unsigned);
	CUresult (*errstr)(CUresult, const char **);
	int batch_ok;	  /* a batch has gone through once */
	char method[200]; /* what the waits go through, for stream_ops_method() */
} cu;

static int cu_load(void)
{
	void *lib;

	if (cu.state)
		return cu.state;
	lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
	if (lib == NULL) {
		snprintf(cu.why, sizeof(cu.why),
			 "the CUDA driver (libcuda.so.1) is not loadable: %s", dlerror());
		return cu.state = -1;
	}
	/* the _v2 entry points: the CUDA 12 ABI, no capability attribute needed */
	*(void **)&cu.batch = dlsym(lib, "cuStreamBatchMemOp_v2");
	*(void **)&cu.wait = dlsym(lib, "cuStreamWaitValue32_v2");
	*(void **)&cu.write = dlsym(lib, "cuStreamWriteValue32_v2");
	*(void **)&cu.errstr = dlsym(lib, "cuGetErrorString");
	if (cu.batch == NULL && (cu.wait == NULL || cu.write == NULL)) {
		snprintf(cu.why, sizeof(cu.why),
			 "the CUDA driver has neither cuStreamBatchMemOp_v2 nor "
			 "cuStreamWaitValue32_v2 / cuStreamWriteValue32_v2");
		return cu.state = -1;
	}
	snprintf(cu.method, sizeof(cu.method), "%s",
		 cu.batch
			 ? "cuStreamBatchMemOp"
			 : "cuStreamWaitValue32 + cuStreamWriteValue32 (no cuStreamBatchMemOp_v2)");
	return cu.state = 1;
}

static PyObject *cu_fail(CUresult r, const char *what)
{
	const char *s = NULL;

	if (cu.errstr == NULL || cu.errstr(r, &s) != CUDA_SUCCESS || s == NULL)
		s = "?";
	PyErr_Format(PyExc_RuntimeError, "kvlane: %s failed: %s (CUresult %d)", what, s, (int)r);
	return NULL;
}

#define PY_BATCH_OPS 128 /* per cuStreamBatchMemOp: below the driver's limit (256) */

/* stream_layer_ops(stream, table, layer): see above. Returns the number of requests. */
static PyObject *mod_stream_layer_ops(PyObject *self, PyObject *const *args, Py_ssize_t n)
{
	CUstreamBatchMemOpParams ops[PY_BATCH_OPS];
	const struct py_flagrow *t;
	unsigned long long stream;
	unsigned long layer;
	Py_ssize_t count, i;
	unsigned k = 0;
	CUresult r;

	(void)self;
	if (n != 3) {
		PyErr_SetString(PyExc_TypeError, "stream_layer_ops(stream, table, layer)");
		return NULL;
	}
	stream = PyLong_AsUnsignedLongLong(args[0]);
	layer = PyLong_AsUnsignedLong(args[2]);
	if (PyErr_Occurred())
		return NULL;
	t = flag_table("stream_layer_ops", args[1], layer, &count);
	if (t == NULL)
		return NULL;
	if (count == 0)
		return PyLong_FromLong(0); /* nothing to wait on: no driver needed */
	if (cu_load() < 0) {
		PyErr_Format(PyExc_RuntimeError, "kvlane: %s", cu.why);
		return NULL;
	}
	for (i = 0; i < count; i++) {
		CUdeviceptr rd = t[i].ready + (uint64_t)layer * t[i].stride;
		CUdeviceptr dn = t[i].done + (uint64_t)layer * t[i].stride;

		memset(&ops[k], 0, 2 * sizeof(ops[0]));
		ops[k].waitValue.operation = CU_STREAM_MEM_OP_WAIT_VALUE_32;
		ops[k].waitValue.address = rd;
		ops[k].waitValue.value = t[i].epoch;
		ops[k].waitValue.flags = CU_STREAM_WAIT_VALUE_GEQ; /* cyclic compare */
		ops[k + 1].writeValue.operation = CU_STREAM_MEM_OP_WRITE_VALUE_32;
		ops[k + 1].writeValue.address = dn;
		ops[k + 1].writeValue.value = t[i].epoch;
		ops[k + 1].writeValue.flags = CU_STREAM_WRITE_VALUE_DEFAULT;
		k += 2;
		if (k < PY_BATCH_OPS && i < count - 1)
			continue;
		if (cu.batch != NULL) {
			r = cu.batch((CUstream)(uintptr_t)stream, k, ops, 0);
			if (r == CUDA_SUCCESS) {
				cu.batch_ok = 1;
				k = 0;
				continue;
			}
			/* a driver refusing the batch form itself (before any batch went
			 * through, for a reason about the call, not the stream): the same
			 * operations one by one from now on, said by stream_ops_method() */
			if (cu.batch_ok ||
			    (r != CUDA_ERROR_NOT_SUPPORTED && r != CUDA_ERROR_INVALID_VALUE))
				return cu_fail(r, "cuStreamBatchMemOp");
			snprintf(cu.method, sizeof(cu.method),
				 "cuStreamWaitValue32 + cuStreamWriteValue32 "
				 "(cuStreamBatchMemOp refused: CUresult %d)",
				 (int)r);
			cu.batch = NULL;
		}
		for (unsigned j = 0; j < k; j += 2) {
			r = cu.wait((CUstream)(uintptr_t)stream, ops[j].waitValue.address,
				    ops[j].waitValue.value, CU_STREAM_WAIT_VALUE_GEQ);
			if (r != CUDA_SUCCESS)
				return cu_fail(r, "cuStreamWaitValue32");
			r = cu.write((CUstream)(uintptr_t)stream, ops[j + 1].writeValue.address,
				     ops[j + 1].writeValue.value, CU_STREAM_WRITE_VALUE_DEFAULT);
			if (r != CUDA_SUCCESS)
				return cu_fail(r, "cuStreamWriteValue32");
		}
		k = 0;
	}
	return PyLong_FromSsize_t(count);
}

/* stream_ops_method(): what stream_layer_ops goes through (None before its first wait). */
static PyObject *mod_stream_ops_method(PyObject *self, PyObject *unused)
{
	(void)self;
	(void)unused;
	if (cu.state <= 0)
		return cu.state < 0 ? PyUnicode_FromFormat("unavailable: %s", cu.why)
				    : Py_NewRef(Py_None);
	return PyUnicode_FromString(cu.method);
}
#else
static PyObject *mod_stream_layer_ops(PyObject *self, PyObject *const *args, Py_ssize_t n)
{
	(void)self;
	(void)args;
	(void)n;
	return raise_errno(-ENOTSUP, "stream_layer_ops: this kvlane was built without CUDA");
}

static PyObject *mod_stream_ops_method(PyObject *self, PyObject *unused)
{
	(void)self;
	(void)unused;
	return PyUnicode_FromString("unavailable: this kvlane was built without CUDA");
}
#endif

/*
 * host_layer_wait(table, layer, timeout_s): the CPU side of the same table, with host
 * addresses (kvl_req_flags.ready / .done): for each request in order, wait until its READY
 * word of @layer reaches the epoch (acquire: its blocks are seen complete), then store DONE
 * = epoch (release), as kvlane.h says a CPU engine does. One call per layer for every
 * request; the GIL is released only when a word is not READY yet (a spin). Returns -1, or the
 * index of the first entry still not READY after @timeout_s (its DONE and the later ones'
 * are not written).
 */
static int ready_reached(const volatile uint32_t *w, uint32_t epoch)
{
	return (int32_t)(__atomic_load_n(w, __ATOMIC_ACQUIRE) - epoch) >= 0;
}

static PyObject *mod_host_layer_wait(PyObject *self, PyObject *const *args, Py_ssize_t n)
{
	const struct py_flagrow *t;
	unsigned long layer;
	Py_ssize_t count, i, late = -1;
	double timeout_s;

	(void)self;
	if (n != 3) {
		PyErr_SetString(PyExc_TypeError, "host_layer_wait(table, layer, timeout_s)");
		return NULL;
	}
	layer = PyLong_AsUnsignedLong(args[1]);
	timeout_s = PyFloat_AsDouble(args[2]);
	if (PyErr_Occurred())
		return NULL;
	if (!(timeout_s >= 0)) { /* NaN too */
		PyErr_Format(PyExc_ValueError, "host_layer_wait: timeout_s %R is not >= 0",
			     args[2]);
		return NULL;
	}
	t = flag_table("host_layer_wait", args[0], layer, &count);
	if (t == NULL)
		return NULL;
	for (i = 0; i < count; i++) {
		const volatile uint32_t *rd =
			(const volatile uint32_t *)(uintptr_t)(t[i].ready +
							       (uint64_t)layer * t[i].stride);
		volatile uint32_t *dn =
			(volatile uint32_t *)(uintptr_t)(t[i].done + (uint64_t)layer * t[i].stride);

		if (!ready_reached(rd, t[i].epoch)) {
			uint64_t end = kvl_now_ns() + (uint64_t)(timeout_s * 1e9);
			int ok;

			Py_BEGIN_ALLOW_THREADS;
			while (!(ok = ready_reached(rd, t[i].epoch)) && kvl_now_ns() < end)
				;
			Py_END_ALLOW_THREADS;
			if (!ok) {
				late = i;
				break;
			}
		}
		__atomic_store_n(dn, t[i].epoch, __ATOMIC_RELEASE);
	}
	return PyLong_FromSsize_t(late);
}

static PyMethodDef mod_methods[] = {
	{ "stream_ops_method", mod_stream_ops_method, METH_NOARGS,
	  "stream_ops_method(): what stream_layer_ops goes through (None before its first call)" },
	{ "host_layer_wait", (PyCFunction)(void (*)(void))mod_host_layer_wait, METH_FASTCALL,
	  "host_layer_wait(table, layer, timeout_s): per request of table (packed \"=QQIIII\", "
	  "host addresses), wait READY[layer] >= epoch, then store DONE[layer] = epoch; -1, or the "
	  "first entry not READY in time" },
	{ "stream_layer_ops", (PyCFunction)(void (*)(void))mod_stream_layer_ops, METH_FASTCALL,
	  "stream_layer_ops(stream, table, layer): per request of table (packed \"=QQIIII\"), "
	  "the stream waits READY[layer] >= epoch and writes DONE[layer] = epoch" },
	{ "pattern_check", mod_pattern_check, METH_VARARGS, "kvl_pattern_check()" },
	{ "memory", mod_memory, METH_VARARGS, "memoryview over kvlane-allocated memory" },
	{ "buffer_address", mod_buffer_address, METH_O,
	  "(address, length, readonly, view) of a C-contiguous buffer" },
	{ "status_name", mod_status_name, METH_O, "kvl_status_name()" },
	{ "dlpack_address", mod_dlpack_address, METH_O,
	  "(address, nbytes, device_type, device_id, contiguous) of a DLPack capsule" },
	{ NULL, NULL, 0, NULL },
};

static int mod_exec(PyObject *m)
{
	PyObject *t = PyType_FromSpec(&handle_spec);

	if (t == NULL || PyModule_AddObjectRef(m, "Handle", t) < 0) {
		Py_XDECREF(t);
		return -1;
	}
	Py_DECREF(t);
	Error = PyErr_NewExceptionWithDoc(
		"kvlane.Error",
		"A kvlane call failed: errno (e.errno, its name first in the message) and kvlane's "
		"reason.",
		PyExc_OSError, NULL);
	if (Error == NULL || PyModule_AddObjectRef(m, "Error", Error) < 0)
		return -1;
#define C(name) PyModule_AddIntConstant(m, #name, name)
	if (C(KVL_OK) || C(KVL_ERR_BOUNDS) || C(KVL_ERR_NO_SEGMENT) || C(KVL_ERR_ACCESS) ||
	    C(KVL_ERR_LOCAL) || C(KVL_ERR_CONN_LOST) || C(KVL_ERR_PEER_DEAD) ||
	    C(KVL_ERR_PROTOCOL) || C(KVL_ERR_CANCELED) || C(KVL_ERR_TOO_LARGE) ||
	    C(KVL_ERR_NO_PEER) || C(KVL_ERR_GPU_MEMORY) || C(KVL_STATUS_COUNT) || C(KVL_WRITE) ||
	    C(KVL_READ) || C(KVL_REMOTE_READ) || C(KVL_REMOTE_WRITE) || C(KVL_XFER_NOTIFY) ||
	    C(KVL_MEM_HOST) || C(KVL_MEM_GPU) || C(KVL_GPU_CONFIGURED) || C(KVL_REQ_DECODE) ||
	    C(KVL_REQ_PREFILL) || C(KVL_REQ_PULL) || C(KVL_REQ_PUSH) || C(KVL_REQ_STEP_FLAGS) ||
	    C(KVL_REQ_ENGINE_DEST) || C(KVL_REQ_EV_STEP_READY) || C(KVL_REQ_EV_DONE) ||
	    C(KVL_REQ_EV_FAILED) || C(KVLANE_VERSION_NUM) || C(KVL_MAX_IOV))
		return -1;
#undef C
	return 0;
}

static PyModuleDef_Slot mod_slots[] = { { Py_mod_exec, mod_exec }, { 0, NULL } };

static struct PyModuleDef mod_def = {
	PyModuleDef_HEAD_INIT,
	"_kvlane",
	"kvlane's C API (use the kvlane package).",
	0,
	mod_methods,
	mod_slots,
	NULL,
	NULL,
	NULL,
};

PyMODINIT_FUNC PyInit__kvlane(void)
{
	return PyModuleDef_Init(&mod_def);
}
