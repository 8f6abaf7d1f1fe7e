/* SPDX-License-Identifier: BSD-3-Clause */
/* The NIC lcore's I/O stage: route submissions to connections, drive them, return completions. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include <rte_errno.h>
#include <rte_ring.h>
#include <rte_ring_elem.h>

#include "nic_io.h"

#define BURST	      KVL_NIC_IO_BURST
#define KICK_TAG      UINT32_MAX /* epoll data of the eventfd; connections carry their slot */
#define PUBLISH_EVERY 256u	 /* do_connections() passes between two publications at most */

_Static_assert(sizeof(struct kvl_sub) % 4 == 0, "ring elements are multiples of 4 bytes");
_Static_assert(sizeof(struct kvl_sub) == 48 && sizeof(struct kvl_sub_ext) == sizeof(struct kvl_sub),
	       "a submission is 48 bytes, and an extension element carries 3 SGEs in as many");
_Static_assert(KVL_SUB_MAX_ELEMS == 4, "8 SGEs: a head and 3 extensions");
_Static_assert(sizeof(struct kvl_wc) % 4 == 0, "ring elements are multiples of 4 bytes");
_Static_assert(sizeof(struct kvl_lcmd) % 4 == 0, "ring elements are multiples of 4 bytes");
_Static_assert(sizeof(struct kvl_levt) % 4 == 0, "ring elements are multiples of 4 bytes");
_Static_assert(sizeof(struct kvl_notice) % 4 == 0, "ring elements are multiples of 4 bytes");

struct rte_ring *kvl_nic_ring(const char *what, unsigned nic, size_t esize, unsigned count,
			      int socket, unsigned flags)
{
	char name[RTE_RING_NAMESIZE];

	snprintf(name, sizeof(name), "kvl_%s%u", what, nic);
	return rte_ring_create_elem(name, (unsigned)esize, rte_align32pow2(count), socket,
				    flags | RING_F_EXACT_SZ);
}

_Static_assert(KVL_SLOTS_PER_LCORE <= 64, "struct kvl_nic_io.live has a bit per slot");

int kvl_nic_io_init(struct kvl_nic_io *io, unsigned nic, int socket, unsigned depth)
{
	/* Every connection may hold @depth requests: the completion ring takes them all, plus
	 * a ring of submissions, so completing never waits for the API to poll mid-batch. */
	unsigned subs = depth * 4 < 4096 ? 4096 : depth * 4;
	unsigned cpls = subs + depth * KVL_SLOTS_PER_LCORE;

	memset(io, 0, sizeof(*io));
	snprintf(io->name, sizeof(io->name), "nic%u", nic);
	io->epfd = epoll_create1(EPOLL_CLOEXEC);
	io->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (io->epfd >= 0 && io->efd >= 0) {
		struct epoll_event ev = { .events = EPOLLIN, .data.u32 = KICK_TAG };

		if (epoll_ctl(io->epfd, EPOLL_CTL_ADD, io->efd, &ev) != 0) {
			close(io->epfd);
			io->epfd = -1;
		}
	}
	if (io->epfd < 0 || io->efd < 0) {
		int rc = -errno;

		if (io->epfd >= 0)
			close(io->epfd);
		if (io->efd >= 0)
			close(io->efd);
		return rc ? rc : -EMFILE;
	}
	io->sub = kvl_nic_ring("sub", nic, sizeof(union kvl_sub_elem), subs, socket, RING_F_SC_DEQ);
	io->cpl = kvl_nic_ring("cpl", nic, sizeof(struct kvl_wc), cpls, socket,
			       RING_F_SP_ENQ | RING_F_SC_DEQ);
	io->cmd = kvl_nic_ring("cmd", nic, sizeof(struct kvl_lcmd), 1024, socket,
			       RING_F_SP_ENQ | RING_F_SC_DEQ);
	io->evt = kvl_nic_ring("evt", nic, sizeof(struct kvl_levt), 1024, socket,
			       RING_F_SP_ENQ | RING_F_SC_DEQ);
	io->ntf = kvl_nic_ring("ntf", nic, sizeof(struct kvl_notice), 4096, socket,
			       RING_F_SP_ENQ | RING_F_SC_DEQ);
	if (!io->sub || !io->cpl || !io->cmd || !io->evt || !io->ntf) {
		int rc = -rte_errno;

		kvl_nic_io_fini(io);
		return rc ? rc : -ENOMEM;
	}
	return 0;
}

void kvl_nic_io_fini(struct kvl_nic_io *io)
{
	struct kvl_lcmd cmd;

	for (unsigned i = 0; i < KVL_SLOTS_PER_LCORE; i++) {
		if (io->slot[i].x.ops)
			io->slot[i].x.ops->free(io->slot[i].x.c);
		io->slot[i].x.ops = NULL;
	}
	io->live = 0;
	/* Connections handed over but never taken in. */
	while (io->cmd && rte_ring_dequeue_elem(io->cmd, &cmd, sizeof(cmd)) == 0)
		if (cmd.type == KVL_LCMD_ADD_CONN && cmd.x.ops)
			cmd.x.ops->free(cmd.x.c);
		else if (cmd.type == KVL_LCMD_SET_REMOTE)
			free(cmd.ptr);
	rte_ring_free(io->sub);
	rte_ring_free(io->cpl);
	rte_ring_free(io->cmd);
	rte_ring_free(io->evt);
	rte_ring_free(io->ntf);
	io->sub = io->cpl = io->cmd = io->evt = io->ntf = NULL;
	if (io->epfd >= 0)
		close(io->epfd);
	if (io->efd >= 0)
		close(io->efd);
	io->epfd = io->efd = -1;
}

void kvl_nic_io_kick(struct kvl_nic_io *io)
{
	uint64_t one = 1;

	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	if (__atomic_load_n(&io->sleeping, __ATOMIC_RELAXED) && write(io->efd, &one, 8) < 0) {
		/* EAGAIN: the counter is full of kicks already; the lcore wakes either way */
	}
}

/* Watch a new connection's completion channel (if it has one). */
static void watch(struct kvl_nic_io *io, unsigned slot)
{
	const struct kvl_xport_ops *ops = io->slot[slot].x.ops;
	struct epoll_event ev = { .events = EPOLLIN, .data.u32 = slot };
	int fd = ops->event_fd ? ops->event_fd(io->slot[slot].x.c) : -1;

	if (fd >= 0)
		(void)epoll_ctl(io->epfd, EPOLL_CTL_ADD, fd, &ev);
}

static void unwatch(struct kvl_nic_io *io, unsigned slot)
{
	const struct kvl_xport_ops *ops = io->slot[slot].x.ops;
	int fd = ops->event_fd ? ops->event_fd(io->slot[slot].x.c) : -1;

	if (fd >= 0)
		(void)epoll_ctl(io->epfd, EPOLL_CTL_DEL, fd, NULL);
}

unsigned kvl_nic_io_sleep(void *arg, uint32_t max_us)
{
	struct kvl_nic_io *io = arg;
	struct epoll_event ev[16];
	struct timespec ts = { .tv_sec = max_us / 1000000,
			       .tv_nsec = (long)(max_us % 1000000) * 1000 };
	unsigned work;
	int n;

	for (unsigned i = 0; i < KVL_SLOTS_PER_LCORE; i++) {
		struct kvl_conn_slot *s = &io->slot[i];

		if (s->x.ops && s->x.ops->arm)
			(void)s->x.ops->arm(
				s->x.c); /* cannot arm: the timeout still bounds the nap */
	}
	work = kvl_nic_io_stage(NULL, io);
	if (work) {
		io->sleep.sleep_skipped++;
		return work;
	}
	__atomic_store_n(&io->sleeping, 1, __ATOMIC_RELAXED);
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	if (rte_ring_count(io->sub) != 0 || rte_ring_count(io->cmd) != 0 ||
	    (io->watch != NULL && rte_ring_count(io->watch) != 0)) {
		__atomic_store_n(&io->sleeping, 0, __ATOMIC_RELAXED);
		io->sleep.sleep_skipped++;
		return 0;
	}
	io->sleep.sleeps++;
	n = epoll_pwait2(io->epfd, ev, 16, &ts, NULL);
	__atomic_store_n(&io->sleeping, 0, __ATOMIC_RELAXED);
	if (n <= 0) {
		io->sleep.wake_timeout++;
		return 0;
	}
	for (int i = 0; i < n; i++) {
		uint32_t slot = ev[i].data.u32;

		if (slot == KICK_TAG) {
			uint64_t v;

			if (read(io->efd, &v, 8) == 8)
				io->sleep.wake_kick++;
		} else if (slot < KVL_SLOTS_PER_LCORE && io->slot[slot].x.ops &&
			   io->slot[slot].x.ops->take_events) {
			if (io->slot[slot].x.ops->take_events(io->slot[slot].x.c))
				io->sleep.wake_cq++;
		}
	}
	return 0;
}

void kvl_xport_stats_add(struct kvl_xport_stats *a, const struct kvl_xport_stats *b)
{
	uint64_t *pa = (uint64_t *)a;
	const uint64_t *pb = (const uint64_t *)b;

	_Static_assert(sizeof(*a) % sizeof(uint64_t) == 0, "kvl_xport_stats is all uint64_t");
	for (size_t i = 0; i < sizeof(*a) / sizeof(uint64_t); i++)
		pa[i] += __atomic_load_n(&pb[i], __ATOMIC_RELAXED);
}

/* Publish a connection's counters where telemetry reads them: field by field, relaxed, so a
 * reader never sees a torn value. */
static void publish_stats(struct kvl_slot_stats *dst, const struct kvl_xport_stats *src)
{
	uint64_t *d = (uint64_t *)&dst->tcp;
	const uint64_t *s = (const uint64_t *)src;

	for (size_t i = 0; i < sizeof(*src) / sizeof(uint64_t); i++)
		if (d[i] != s[i])
			__atomic_store_n(&d[i], s[i], __ATOMIC_RELAXED);
}

/* The counters (and state) of the connection in @slot, where telemetry reads them. */
static void publish(struct kvl_nic_io *io, unsigned slot)
{
	struct kvl_xport_stats st;

	io->slot[slot].x.ops->stats(io->slot[slot].x.c, &st);
	publish_stats(&io->stats[slot], &st);
}

static void do_commands(struct kvl_nic_io *io, unsigned *work)
{
	struct kvl_lcmd cmd[8];
	unsigned n = rte_ring_dequeue_burst_elem(io->cmd, cmd, sizeof(cmd[0]), 8, NULL);

	for (unsigned i = 0; i < n; i++) {
		struct kvl_conn_slot *s;

		if (cmd[i].type == KVL_LCMD_ADD_CONN && cmd[i].slot < KVL_SLOTS_PER_LCORE) {
			s = &io->slot[cmd[i].slot];
			if (s->x.ops) /* the control thread owns slot numbers: never happens */
				s->x.ops->free(s->x.c);
			s->x = cmd[i].x;
			io->live |= 1ull << cmd[i].slot;
			s->peer = cmd[i].peer;
			s->gen = cmd[i].gen;
			s->closing = false;
			watch(io, cmd[i].slot);
			io->stats[cmd[i].slot].peer = cmd[i].peer;
			io->stats[cmd[i].slot].gen = cmd[i].gen;
			memset(&io->stats[cmd[i].slot].tcp, 0, sizeof(io->stats[0].tcp));
			publish(io, cmd[i].slot); /* its state, before any traffic */
		} else if (cmd[i].type == KVL_LCMD_RESYNC && cmd[i].slot < KVL_SLOTS_PER_LCORE) {
			s = &io->slot[cmd[i].slot];
			if (s->x.ops && s->x.ops->resync_in && s->gen == cmd[i].gen &&
			    !s->closing) {
				s->x.ops->resync_in(s->x.c, &cmd[i].rs);
				publish(io, cmd[i].slot);
			}
		} else if (cmd[i].type == KVL_LCMD_SET_REMOTE &&
			   cmd[i].slot < KVL_SLOTS_PER_LCORE) {
			s = &io->slot[cmd[i].slot];
			if (s->x.ops && s->x.ops->set_remote && s->gen == cmd[i].gen)
				s->x.ops->set_remote(s->x.c, cmd[i].ptr, (unsigned)cmd[i].status);
			free(cmd[i].ptr);
		} else if (cmd[i].type == KVL_LCMD_FAIL_PEER) {
			for (unsigned j = 0; j < KVL_SLOTS_PER_LCORE; j++) {
				s = &io->slot[j];
				if (s->x.ops && s->peer == cmd[i].peer && !s->closing)
					s->x.ops->fail_all(s->x.c, cmd[i].status);
			}
		}
	}
	*work += n;
}

/* Room left in the completion ring: a completion is never dropped, so nothing is taken that
 * could not complete at once. */
static unsigned cpl_room(const struct kvl_nic_io *io)
{
	return rte_ring_free_count(io->cpl);
}

void kvl_nic_io_complete(struct kvl_nic_io *io, struct kvl_wc *wc, unsigned n)
{
	unsigned api = io->take_wc ? io->take_wc(io->take_wc_arg, wc, n) : n;

	if (api)
		rte_ring_enqueue_burst_elem(io->cpl, wc, sizeof(wc[0]), api, NULL);
}

void kvl_nic_io_fail(struct kvl_nic_io *io, uint64_t wr_id, int status)
{
	struct kvl_wc wc = { .wr_id = wr_id, .bytes = 0, .status = status };

	kvl_nic_io_complete(io, &wc, 1);
}

int kvl_xport_status(const struct kvl_xconn *x, int err)
{
	if (err == -EPIPE)
		return x->ops->broken(x->c) ?: KVL_ERR_CONN_LOST;
	if (err == -EXDEV) /* GPU memory the transport cannot reach (tcp_data.c) */
		return KVL_ERR_GPU_MEMORY;
	return err == -EMSGSIZE ? KVL_ERR_TOO_LARGE : KVL_ERR_PROTOCOL;
}

unsigned kvl_nic_io_post(struct kvl_nic_io *io, const struct kvl_xconn *x, const struct kvl_wr *wr,
			 unsigned n, int *err, unsigned *failed)
{
	unsigned done = 0;

	*err = 0;
	while (done < n) {
		int rc = 0;

		done += x->ops->post(x->c, wr + done, n - done, &rc);
		if (done == n)
			break;
		if (rc == -EAGAIN || rc == -EPIPE) {
			*err = rc;
			break;
		}
		/* refused for good: it completes now, the rest goes on */
		kvl_nic_io_fail(io, wr[done].wr_id, kvl_xport_status(x, rc));
		(*failed)++;
		done++;
	}
	return done;
}

void kvl_sub_unpack(const union kvl_sub_elem *e, struct kvl_sub_full *out)
{
	const struct kvl_sub *h = &e[0].head;

	/* field by field: kvl_wr's SGE array stays untouched unless there is a list */
	out->wr.wr_id = h->wr.wr_id;
	out->wr.local = h->wr.local;
	out->wr.remote_off = h->wr.remote_off;
	out->wr.length = h->wr.length;
	out->wr.remote_seg = h->wr.remote_seg;
	out->wr.op = h->wr.op;
	out->wr.n_sge = h->wr.n_sge;
	out->wr.flags = h->wr.flags;
	out->wr.reserved = 0;
	out->wr.imm = h->wr.imm;
	out->slot = h->slot;
	out->gen = h->gen;
	for (unsigned k = 0; h->wr.n_sge > 1 && k < h->wr.n_sge; k++)
		out->wr.sge[k] = e[1 + k / KVL_SUB_EXT_SGES].ext.sge[k % KVL_SUB_EXT_SGES];
}

/* Returns false when @sub must wait: its connection has @depth requests outstanding. An API
 * transfer is bound to its connection (the API chose it), so a broken one fails it. */
static bool submit_one(struct kvl_nic_io *io, const struct kvl_sub_full *sub)
{
	struct kvl_conn_slot *s = sub->slot < KVL_SLOTS_PER_LCORE ? &io->slot[sub->slot] : NULL;
	unsigned failed = 0;
	int err;

	if (s == NULL || s->x.ops == NULL || s->gen != sub->gen) {
		io->unroutable++;
		kvl_nic_io_fail(io, sub->wr.wr_id, KVL_ERR_NO_PEER);
		return true;
	}
	if (kvl_nic_io_post(io, &s->x, &sub->wr, 1, &err, &failed) == 1)
		return true;
	if (err == -EAGAIN)
		return false;
	kvl_nic_io_fail(io, sub->wr.wr_id, kvl_xport_status(&s->x, err));
	return true;
}

/*
 * Submissions whose connection is full wait in the stash and are retried first, in order, so
 * requests on one connection keep the order the API posted them in. New ones are taken only
 * while the stash has room and the completion ring can take an immediate completion. A
 * request with an SGE list takes several ring elements (struct kvl_sub): when a burst ends
 * inside one, the rest of it is taken at once (it was enqueued with its head, in one bulk).
 */
static void do_submissions(struct kvl_nic_io *io, unsigned *work)
{
	union kvl_sub_elem e[BURST + KVL_SUB_MAX_ELEMS - 1];
	unsigned room = cpl_room(io), keep = 0, n;

	for (unsigned i = 0; i < io->n_stash; i++) {
		if (room > 0 && submit_one(io, &io->stash[i])) {
			room--;
			(*work)++;
		} else {
			io->stash[keep++] = io->stash[i];
		}
	}
	io->n_stash = keep;
	while (room > 0 && io->n_stash < BURST) {
		unsigned max = BURST - io->n_stash;

		n = rte_ring_dequeue_burst_elem(io->sub, e, sizeof(e[0]), room < max ? room : max,
						NULL);
		if (n == 0)
			return;
		for (unsigned i = 0; i < n;) {
			struct kvl_sub_full f;
			unsigned sges = e[i].head.wr.n_sge, ext = KVL_SUB_EXT(sges);

			(*work)++;
			if (sges > KVL_WR_MAX_SGE) {
				/* never packed so by kvl_post(): fail it, read nothing behind it */
				io->unroutable++;
				kvl_nic_io_fail(io, e[i].head.wr.wr_id, KVL_ERR_PROTOCOL);
				room--;
				i++;
				continue;
			}
			if (i + 1 + ext > n) {
				unsigned more = i + 1 + ext - n;

				if (rte_ring_sc_dequeue_bulk_elem(io->sub, &e[n], sizeof(e[0]),
								  more, NULL) != more) {
					/* cannot happen (one bulk enqueue): fail it rather than
					 * post a list that is not all there */
					kvl_nic_io_fail(io, e[i].head.wr.wr_id, KVL_ERR_PROTOCOL);
					room--;
					break;
				}
				n += more;
			}
			kvl_sub_unpack(&e[i], &f);
			i += 1 + ext;
			if (submit_one(io, &f))
				room--;
			else
				io->stash[io->n_stash++] = f;
		}
	}
}

static void do_connections(struct kvl_nic_io *io, unsigned *work, struct kvl_lcore *lc)
{
	struct kvl_xport_stats st;
	struct kvl_wc wc[BURST];

	/* Counters are published where a connection did work, and every PUBLISH_EVERY passes
	 * anyway: posting alone does no work, and telemetry must not show a QP's posted and
	 * outstanding counts from before its last posts while those wait for completions. */
	bool publish = (++io->passes & (PUBLISH_EVERY - 1)) == 0;

	/* the live slots only: an lcore with few connections pays for no empty ones */
	for (uint64_t m = io->live; m != 0; m &= m - 1) {
		unsigned i = (unsigned)__builtin_ctzll(m);
		struct kvl_conn_slot *s = &io->slot[i];
		const struct kvl_xport_ops *ops = s->x.ops;
		unsigned did, n, room;
		int broken;

		did = ops->progress(s->x.c);
		*work += did;
		if (ops->due)
			kvl_lcore_due(lc, ops->due(s->x.c));
		if (ops->notes) {
			struct kvl_note nt[BURST];
			unsigned k = ops->notes(s->x.c, nt, BURST);

			for (unsigned j = 0; j < k; j++) {
				struct kvl_notice v = { .peer = s->peer,
							.value = nt[j].imm,
							.length = nt[j].length };

				if (rte_ring_enqueue_elem(io->ntf, &v, sizeof(v)) != 0)
					io->ntf_dropped++;
				else
					io->ntf_queued++;
			}
			*work += k;
		}
		if (ops->resync_out) {
			struct kvl_levt ev = { .type = KVL_LEVT_RESYNC,
					       .peer = s->peer,
					       .slot = i };

			/* A message lost to a full ring is asked for again: REQs repeat until
			 * answered, and a repeated REQ gets its ACK again. */
			if (ops->resync_out(s->x.c, &ev.rs) &&
			    rte_ring_enqueue_elem(io->evt, &ev, sizeof(ev)) != 0)
				io->evt_dropped++;
		}
		room = cpl_room(io);
		n = ops->reap(s->x.c, wc, room < BURST ? room : BURST);
		if (n) {
			kvl_nic_io_complete(io, wc, n);
			*work += n;
		}
		if (did || n || publish) {
			ops->stats(s->x.c, &st);
			publish_stats(&io->stats[i], &st);
		}
		broken = ops->broken(s->x.c);
		if (broken && ops->outstanding(s->x.c) == 0) {
			struct kvl_levt ev = { .type = KVL_LEVT_CONN_CLOSED,
					       .peer = s->peer,
					       .slot = i,
					       .status = broken };

			/* Report first: if the ring is full, try again next iteration. */
			if (rte_ring_enqueue_elem(io->evt, &ev, sizeof(ev)) != 0)
				continue;
			ops->stats(s->x.c, &st);
			publish_stats(&io->stats[i], &st);
			if (s->peer < KVL_MAX_PEERS_RT)
				kvl_xport_stats_add(&io->closed[s->peer], &io->stats[i].tcp);
			memset(&io->stats[i].tcp, 0, sizeof(io->stats[i].tcp));
			unwatch(io, i);
			ops->free(s->x.c);
			s->x.ops = NULL;
			io->live &= ~(1ull << i);
			(*work)++;
		}
	}
}

unsigned kvl_nic_io_stage(struct kvl_lcore *lc, void *arg)
{
	struct kvl_nic_io *io = arg;
	unsigned work = 0;

	do_commands(io, &work);
	do_submissions(io, &work);
	do_connections(io, &work, lc);
	return work;
}

void kvl_nic_io_peer_stats(const struct kvl_nic_io *io, uint32_t peer, struct kvl_xport_stats *sum)
{
	for (unsigned i = 0; i < KVL_SLOTS_PER_LCORE; i++)
		if (__atomic_load_n(&io->slot[i].x.ops, __ATOMIC_RELAXED) != NULL &&
		    io->stats[i].peer == peer)
			kvl_xport_stats_add(sum, &io->stats[i].tcp);
	if (peer < KVL_MAX_PEERS_RT)
		kvl_xport_stats_add(sum, &io->closed[peer]);
}

void kvl_nic_io_total(const struct kvl_nic_io *io, struct kvl_xport_stats *sum)
{
	for (unsigned i = 0; i < KVL_SLOTS_PER_LCORE; i++)
		if (__atomic_load_n(&io->slot[i].x.ops, __ATOMIC_RELAXED) != NULL)
			kvl_xport_stats_add(sum, &io->stats[i].tcp);
	for (unsigned p = 0; p < KVL_MAX_PEERS_RT; p++)
		kvl_xport_stats_add(sum, &io->closed[p]);
}
