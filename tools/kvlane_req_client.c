/* SPDX-License-Identifier: BSD-3-Clause */
/* A client of the request API: pulls a peer's pattern segment step by step and checks it, or
 * pushes its own blocks to the peer and reads them back. */
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "kvlane/kvlane.h"

/*
 * kvlane-req-client EAL-ARGS -- -c INI [--set S.K=V]... --peer HOST:PORT --mode MODE
 *        [--requests R] [--steps S] [--blocks B] [--seed N] [--compute-us U]
 *        [--segment NAME] [--ro-segment NAME] [--duration S] [--cancel-pct P] [--cap-ms M]
 *        [--chaos-seed N]
 *
 * Request i, step k needs the K and V blocks [i*B, i*B + B) of layer k of the peer's first
 * segment (plus, from step 1 on, the first K block of layer 0, which every step shares): the
 * blocks of one plane are contiguous on the peer, so READs can merge.
 *
 * Modes, each printing JSON lines a test reads ("PAUSE <tag> <json>" waits for a line on
 * stdin, so the test can read telemetry at a known point; "RESULT <json>" at the end):
 *   verify  open every request, check that READY steps come in order, every byte of every
 *           block of a READY step against the pattern, mark it DONE after --compute-us
 *   cancel  one request: first READY, pause, cancel, the FAILED(canceled) event, pause
 *   bad     bad calls (each "CHECK name rc"), then one good request verified to the end
 *   push    bad PUSH calls (CHECK lines; --ro-segment: one the peer only lets us read), pause
 *           "bad"; then every request PUSHes the same layout from a local segment filled
 *           with the pattern of seed + 1000 (READY: kvl_req_block_addr must give the local
 *           address back), pause "pushed"; then PULLs it back, every byte checked against
 *           that pattern, pause "end"
 *   tierbad (--peer tier) bad calls on this host's KV tier (CHECK lines), then verify
 *   tieroff [sched] tier off: the reserved peer answers -ENOTCONN (CHECK lines); pause "end"
 *   flags   every request opened with KVL_REQ_STEP_FLAGS: no kvl_req_poll for READY and no
 *           kvl_req_step_done; this thread spins on the READY words (acquire loads), checks
 *           every byte of the step once READY >= epoch, stores DONE = epoch (release), then
 *           polls only for the requests' ends; pause "end"
 *   dest    every request PULLs with KVL_REQ_ENGINE_DEST into a paged cache segment of its
 *           own (mode_dest()): pause "filled", then verified and DONE to the end, the guard
 *           bytes around every destination checked ("DEST <json>"); pause "end"; with
 *           --dest-flags 1 also KVL_REQ_STEP_FLAGS, run on the words as flags does (no pause
 *           "filled")
 *   dest-gpu  the same cache in VRAM (kvl_seg_alloc_gpu; exit 77 without a GPU): each open
 *           prints "CHECK gpu_dest_open rc" and "REASON <kvl_req_error()>"; what opened is run
 *           to the end with only the addresses checked; pause "end"
 *   chaos   rounds of --requests verified requests for --duration seconds against a peer that
 *           may die, stop or lose connections (tools/kvlane_chaos.py): each READY step is
 *           canceled with probability --cancel-pct %, the budget cap moves every --cap-ms ms
 *           (a random cap, or none; both drawn from --chaos-seed), and a lost peer is connected
 * again. Every handle opened must end exactly once: "RESULT <json>" counts opens, ends by typed
 * status, stray and duplicate events, requests that never ended; then pause "end"
 * --segment picks the peer's segment by name (default: its first). --peer tier pulls from this
 * host's KV tier (KVL_PEER_LOCAL_TIER: its own segments, [sched] tier = true) instead of a peer.
 * Exit 0 when every check held, 1 otherwise.
 */

#define MAX_REQ 64

struct req {
	kvl_req_t h;
	uint32_t n_blocks, n_steps, next_ready, done;
	struct kvl_req_block *b;
	uint32_t *first, *refs;
	bool ended, push, dest;
	int status;
};

static struct kvl_runtime *rt;
static kvl_peer_t peer;
static struct kvl_remote_seg seg;
static uint32_t seed = 1, n_req = 4, n_steps = 8, n_blk = 4, compute_us;
static struct req rq[MAX_REQ];
static uint64_t bytes_ok, blocks_ok, steps_ok, bad_bytes, order_errors, fails, push_addr_errors;
static uint32_t check_seed; /* the pattern READY blocks must hold: seed, or push's */
static bool addr_only;	    /* dest-gpu: the CPU cannot read the blocks, only their address */
static uint32_t chaos_secs = 10, cancel_pct = 10, cap_ms = 500, chaos_seed = 1;
static const char *peer_addr, *peer_seg_name;

#define CHAOS_QUIET_MS	30000 /* open requests, no event for this long: they never ended */
#define CHAOS_MAX_ERRNO 256

static uint64_t rng = 1;
static bool chaos;
static struct {
	uint64_t rounds, opened, done, failed[KVL_STATUS_COUNT], bad_status, dup_end, stray;
	uint64_t never_ended, cancels, cancel_refused, cancel_lost, budget_moves, cap_errors;
	uint64_t connects, connect_failures, step_done_errors, gone_blocks, canceled_unasked;
	uint64_t open_refused[CHAOS_MAX_ERRNO];
} cs;

static void usage(const char *p)
{
	fprintf(stderr,
		"usage: %s EAL-ARGS -- -c INI [--set S.K=V]... --peer HOST:PORT|tier --mode "
		"verify|cancel|bad|push|flags|dest|dest-gpu|tierbad|tieroff [--requests R] "
		"[--steps S] [--blocks "
		"B] [--seed N] "
		"[--compute-us U] [--segment NAME] [--ro-segment NAME]\n"
		"       chaos mode: --mode chaos [--duration S] [--cancel-pct P] [--cap-ms M] "
		"[--chaos-seed N]\n",
		p);
	exit(2);
}

static void pause_at(const char *tag, const char *json)
{
	char line[64];

	printf("PAUSE %s %s\n", tag, json);
	fflush(stdout);
	if (fgets(line, sizeof(line), stdin) == NULL)
		exit(1);
}

/* Layout of request @i on the peer's segment @g (see the top). */
static void build(struct req *r, uint32_t i)
{
	const struct kvl_seg_geom *g = &seg.geom;
	uint32_t nb = n_steps * 2 * n_blk, j = 0, nref = 0;

	r->n_blocks = nb;
	r->n_steps = n_steps;
	r->b = calloc(nb, sizeof(*r->b));
	r->first = calloc(n_steps + 1, sizeof(uint32_t));
	r->refs = calloc(nb + n_steps, sizeof(uint32_t));
	for (uint32_t k = 0; k < n_steps; k++) {
		r->first[k] = nref;
		if (k > 0)
			r->refs[nref++] =
				0; /* the shared block: K, layer 0, first of this request */
		for (uint32_t p = 0; p < 2; p++)
			for (uint32_t b = 0; b < n_blk; b++) {
				r->b[j] = (struct kvl_req_block){
					.remote_off = kvl_block_offset(g, k, p, i * n_blk + b),
					.remote_seg = seg.id,
					.length = g->block_bytes,
				};
				r->refs[nref++] = j++;
			}
	}
	r->first[n_steps] = nref;
}

static uint32_t open_flags; /* kvl_req_desc.flags of the requests opened */

/* @r afresh as request @i (what an earlier request left in it freed). */
static void reset_req(struct req *r, uint32_t i)
{
	free(r->b);
	free(r->first);
	free(r->refs);
	memset(r, 0, sizeof(*r));
	build(r, i);
}

static int open_req(struct req *r, uint64_t user)
{
	struct kvl_req_desc d = { .blocks = r->b,
				  .n_blocks = r->n_blocks,
				  .n_steps = r->n_steps,
				  .step_first = r->first,
				  .step_blocks = r->refs,
				  .user = user,
				  .cls = KVL_REQ_DECODE,
				  .dir = r->push ? KVL_REQ_PUSH : KVL_REQ_PULL,
				  .flags = open_flags };

	return kvl_req_open(rt, peer, &d, &r->h);
}

/* Every byte of the step's blocks, where the API says they are (PUSH: the local address it
 * was given back; the bytes are checked on the peer by reading them back). */
static void verify_step(struct req *r, uint32_t step)
{
	for (uint32_t j = r->first[step]; j < r->first[step + 1]; j++) {
		const struct kvl_req_block *b = &r->b[r->refs[j]];
		void *p;
		int rc = kvl_req_block_addr(rt, r->h, r->refs[j], &p);
		uint64_t ok;

		if (rc == -ENOENT && chaos) {
			cs.gone_blocks++; /* it failed after READY: its FAILED event follows */
			continue;
		}
		if (rc < 0) {
			printf("ERROR block_addr(step %u, block %u) = %d\n", step, r->refs[j], rc);
			bad_bytes += b->length;
			continue;
		}
		if (r->push || r->dest) {
			if (p != b->local) {
				printf("ERROR push step %u block %u: address %p, given %p\n", step,
				       r->refs[j], p, b->local);
				push_addr_errors++;
			}
			if (r->push || addr_only)
				continue;
		}
		ok = kvl_pattern_check(p, b->length, check_seed, b->remote_off);
		if (ok != b->length) {
			printf("ERROR step %u block %u: byte %" PRIu64 " differs\n", step,
			       r->refs[j], ok);
			bad_bytes += b->length;
		} else {
			bytes_ok += b->length;
			blocks_ok++;
		}
	}
}

static struct req *by_handle(kvl_req_t h)
{
	for (uint32_t i = 0; i < MAX_REQ; i++)
		if (rq[i].h == h)
			return &rq[i];
	return NULL;
}

/* Poll until every request ended or @until_quiet ms pass without an event (0: never).
 * READY steps are verified and (when @done) marked DONE after compute_us. */
static unsigned pump(bool done, unsigned until_quiet_ms, unsigned max_ms)
{
	struct kvl_req_event ev[64];
	struct timespec t0, t;
	uint64_t last = 0, start;
	unsigned open_left = 1, total = 0;

	/* Steps that became READY (and were verified) while nothing was marked DONE. */
	for (uint32_t i = 0; done && i < n_req; i++)
		while (rq[i].h && !rq[i].ended && rq[i].done < rq[i].next_ready) {
			int rc = kvl_req_step_done(rt, rq[i].h, rq[i].done);

			if (rc < 0) {
				printf("ERROR step_done(%u) = %d\n", rq[i].done, rc);
				fails++;
				break;
			}
			rq[i].done++;
			steps_ok++;
		}
	clock_gettime(CLOCK_MONOTONIC, &t0);
	start = (uint64_t)t0.tv_sec * 1000 + t0.tv_nsec / 1000000;
	last = start;
	while (open_left) {
		unsigned n = kvl_req_poll(rt, ev, 64);
		uint64_t now;

		clock_gettime(CLOCK_MONOTONIC, &t);
		now = (uint64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
		total += n;
		if (n)
			last = now;
		for (unsigned i = 0; i < n; i++) {
			struct req *r = by_handle(ev[i].req);

			if (r == NULL) {
				printf("ERROR event for unknown handle %" PRIu64 "\n", ev[i].req);
				fails++;
				continue;
			}
			if (ev[i].type == KVL_REQ_EV_STEP_READY) {
				if (ev[i].step != r->next_ready)
					order_errors++;
				r->next_ready = ev[i].step + 1;
				verify_step(r, ev[i].step);
				if (done) {
					if (compute_us)
						usleep(compute_us);
					int rc = kvl_req_step_done(rt, r->h, ev[i].step);

					if (rc < 0) {
						printf("ERROR step_done(%u) = %d\n", ev[i].step,
						       rc);
						fails++;
					} else {
						r->done++;
						steps_ok++;
					}
				}
			} else {
				r->ended = true;
				r->status = ev[i].type == KVL_REQ_EV_DONE ? 0 : ev[i].status;
			}
		}
		open_left = 0;
		for (uint32_t i = 0; i < n_req; i++)
			open_left += rq[i].h && !rq[i].ended;
		if (until_quiet_ms && now - last >= until_quiet_ms)
			break;
		if (now - start > max_ms) {
			printf("ERROR no progress within %u ms\n", max_ms);
			fails++;
			break;
		}
		if (n == 0)
			usleep(50);
	}
	return total;
}

static void handles_json(char *buf, size_t len)
{
	size_t o = snprintf(buf, len, "{\"handles\": [");

	for (uint32_t i = 0; i < n_req && o < len; i++)
		o += snprintf(buf + o, len - o, "%s%" PRIu64, i ? ", " : "", rq[i].h);
	o += snprintf(buf + o, o < len ? len - o : 0, "], \"ready\": [");
	for (uint32_t i = 0; i < n_req && o < len; i++)
		o += snprintf(buf + o, len - o, "%s%u", i ? ", " : "", rq[i].next_ready);
	o += snprintf(buf + o, o < len ? len - o : 0, "], \"done\": [");
	for (uint32_t i = 0; i < n_req && o < len; i++)
		o += snprintf(buf + o, len - o, "%s%u", i ? ", " : "", rq[i].done);
	snprintf(buf + o, o < len ? len - o : 0, "]}");
}

static void result(void)
{
	unsigned ok = 0;

	for (uint32_t i = 0; i < n_req; i++)
		ok += rq[i].ended && rq[i].status == 0;
	printf("RESULT {\"requests\": %u, \"requests_ok\": %u, \"steps_done\": %" PRIu64
	       ", \"blocks_verified\": %" PRIu64 ", \"bytes_verified\": %" PRIu64
	       ", \"bad_bytes\": %" PRIu64 ", \"order_errors\": %" PRIu64 ", \"errors\": %" PRIu64
	       ", \"push_addr_errors\": %" PRIu64 ", \"unique_blocks\": %u, \"block_bytes\": %u}\n",
	       n_req, ok, steps_ok, blocks_ok, bytes_ok, bad_bytes, order_errors, fails,
	       push_addr_errors, n_req * n_steps * 2 * n_blk, seg.geom.block_bytes);
	fflush(stdout);
}

static int mode_verify(void)
{
	char js[2048];

	for (uint32_t i = 0; i < n_req; i++) {
		int rc;

		build(&rq[i], i);
		rc = open_req(&rq[i], i);
		if (rc < 0) {
			printf("ERROR open %u: %s\n", i, strerror(-rc));
			return 1;
		}
	}
	/* Until the scheduler has filled what the budget allows and nothing moves. */
	pump(false, 300, 10000);
	handles_json(js, sizeof(js));
	pause_at("filled", js);
	pump(true, 0, 60000);
	handles_json(js, sizeof(js));
	result();
	pause_at("end", js);
	return fails || bad_bytes || order_errors ? 1 : 0;
}

/* The engine of a KVL_REQ_STEP_FLAGS request on a CPU: the words only, no call per step. */
static void flags_engine(const struct kvl_req_flags *fl);

static int mode_flags(void)
{
	struct kvl_req_flags fl[MAX_REQ];
	char js[2048];

	open_flags = KVL_REQ_STEP_FLAGS;
	for (uint32_t i = 0; i < n_req; i++) {
		int rc;

		build(&rq[i], i);
		rc = open_req(&rq[i], i);
		if (rc == 0)
			rc = kvl_req_step_flags(rt, rq[i].h, &fl[i]);
		if (rc < 0) {
			printf("ERROR open %u with step flags: %s\n", i, strerror(-rc));
			return 1;
		}
		if (fl[i].n_steps != n_steps || fl[i].stride < 2 * sizeof(uint32_t)) {
			printf("ERROR request %u: %u steps of stride %u\n", i, fl[i].n_steps,
			       fl[i].stride);
			fails++;
		}
	}
	printf("CHECK flags_step_done %d\n", kvl_req_step_done(rt, rq[0].h, 0));
	flags_engine(fl);
	handles_json(js, sizeof(js));
	result();
	pause_at("end", js);
	return fails || bad_bytes || order_errors ? 1 : 0;
}

/* The words only: spin on each request's next READY, check its blocks, store DONE; then poll
 * for the ends alone. */
static void flags_engine(const struct kvl_req_flags *fl)
{
	struct kvl_req_event ev[64];
	uint64_t t0 = 0;
	unsigned left = n_req;

	for (struct timespec t; left;) {
		left = 0;
		for (uint32_t i = 0; i < n_req; i++) {
			struct req *r = &rq[i];
			uint32_t k = r->done;
			const volatile uint32_t *rd;

			if (k == n_steps)
				continue;
			left++;
			rd = (const volatile uint32_t *)((const volatile uint8_t *)fl[i].ready +
							 (size_t)k * fl[i].stride);
			if ((int32_t)(__atomic_load_n(rd, __ATOMIC_ACQUIRE) - fl[i].epoch) < 0)
				continue;
			r->next_ready = k + 1;
			verify_step(r, k);
			if (compute_us)
				usleep(compute_us);
			__atomic_store_n((volatile uint32_t *)((volatile uint8_t *)fl[i].done +
							       (size_t)k * fl[i].stride),
					 fl[i].epoch, __ATOMIC_RELEASE);
			r->done++;
			steps_ok++;
		}
		clock_gettime(CLOCK_MONOTONIC, &t);
		if (t0 == 0)
			t0 = (uint64_t)t.tv_sec;
		if ((uint64_t)t.tv_sec - t0 > 60) {
			printf("ERROR steps not READY within 60 s\n");
			fails++;
			break;
		}
	}
	/* Only the ends now (the STEP_READY events came too: not looked at). */
	for (unsigned spins = 0; spins < 2000000; spins++) {
		unsigned n = kvl_req_poll(rt, ev, 64), open_left = 0;

		for (unsigned i = 0; i < n; i++) {
			struct req *r = by_handle(ev[i].req);

			if (r && ev[i].type != KVL_REQ_EV_STEP_READY) {
				r->ended = true;
				r->status = ev[i].type == KVL_REQ_EV_DONE ? 0 : ev[i].status;
			}
		}
		for (uint32_t i = 0; i < n_req; i++)
			open_left += !rq[i].ended;
		if (open_left == 0)
			break;
		if (n == 0)
			usleep(50);
	}
}

static int mode_cancel(void)
{
	char js[2048];
	void *p;
	int rc;

	n_req = 1;
	build(&rq[0], 0);
	rc = open_req(&rq[0], 7);
	if (rc < 0) {
		printf("ERROR open: %s\n", strerror(-rc));
		return 1;
	}
	pump(false, 300, 10000);
	handles_json(js, sizeof(js));
	pause_at("filled", js);
	rc = kvl_req_cancel(rt, rq[0].h);
	printf("CHECK cancel %d\n", rc);
	printf("CHECK cancel_again %d\n", kvl_req_cancel(rt, rq[0].h));
	printf("CHECK addr_after_cancel %d\n", kvl_req_block_addr(rt, rq[0].h, 0, &p));
	printf("CHECK done_after_cancel %d\n", kvl_req_step_done(rt, rq[0].h, 0));
	pump(false, 0, 5000);
	printf("CHECK failed_status %d\n", rq[0].status);
	printf("CHECK cancel_after_end %d\n", kvl_req_cancel(rt, rq[0].h));
	handles_json(js, sizeof(js));
	pause_at("canceled", js);
	return fails ? 1 : 0;
}

/* tieroff: [sched] tier is off, so the reserved peer is not there. */
/* A request of one block in one step. */
static struct kvl_req_desc one_block(struct kvl_req_block *b)
{
	static const uint32_t first1[2] = { 0, 1 }, ref0[1] = { 0 };

	return (struct kvl_req_desc){
		.blocks = b, .n_blocks = 1, .n_steps = 1, .step_first = first1, .step_blocks = ref0
	};
}

static int mode_tier_off(void)
{
	struct kvl_req_block one = { .remote_off = 0, .remote_seg = 1, .length = 4096 };
	struct kvl_req_desc d = one_block(&one);
	struct kvl_remote_seg rs[4];
	kvl_req_t h = 0;

	printf("CHECK tier_off_segments %d\n", kvl_peer_segments(rt, KVL_PEER_LOCAL_TIER, rs, 4));
	printf("CHECK tier_off_open %d\n", kvl_req_open(rt, KVL_PEER_LOCAL_TIER, &d, &h));
	printf("CHECK h_unchanged %d\n", h == 0 ? 0 : -1);
	fflush(stdout);
	pause_at("end", "{}");
	return 0;
}

/* tierbad: bad calls on the tier (each "CHECK name rc"), then requests verified to the end. */
static int mode_tier_bad(void)
{
	struct kvl_req_block one = { .remote_off = 0, .remote_seg = 999, .length = 4096 };
	struct kvl_req_desc d = one_block(&one);
	struct kvl_xfer x = {
		.cookie = 1, .local = &one, .length = 8, .remote_seg = seg.id, .op = KVL_READ
	};
	kvl_req_t h = 0;

	printf("CHECK tier_unknown_segment %d\n", kvl_req_open(rt, KVL_PEER_LOCAL_TIER, &d, &h));
	one.remote_seg = seg.id;
	one.remote_off = seg.length - 100;
	printf("CHECK tier_outside_segment %d\n", kvl_req_open(rt, KVL_PEER_LOCAL_TIER, &d, &h));
	one.remote_off = UINT64_MAX - 10;
	printf("CHECK tier_offset_wraps %d\n", kvl_req_open(rt, KVL_PEER_LOCAL_TIER, &d, &h));
	one.remote_off = 0;
	one.length = 0;
	printf("CHECK tier_empty_block %d\n", kvl_req_open(rt, KVL_PEER_LOCAL_TIER, &d, &h));
	one.length = 1u << 30;
	printf("CHECK tier_block_too_long %d\n", kvl_req_open(rt, KVL_PEER_LOCAL_TIER, &d, &h));
	one.length = 4096;
	d.dir = KVL_REQ_PUSH; /* refused for the direction, before any local check */
	printf("CHECK tier_push %d\n", kvl_req_open(rt, KVL_PEER_LOCAL_TIER, &d, &h));
	d.dir = KVL_REQ_PULL;
	printf("CHECK tier_post %d\n", kvl_post(rt, KVL_PEER_LOCAL_TIER, &x, 1));
	printf("CHECK h_unchanged %d\n", h == 0 ? 0 : -1);
	fflush(stdout);
	return mode_verify();
}

static int mode_bad(void)
{
	struct kvl_req_block big = { .remote_off = 0, .remote_seg = seg.id, .length = 1u << 30 };
	struct kvl_req_block one = { .remote_off = 0, .remote_seg = seg.id, .length = 4096 };
	uint32_t first1[2] = { 0, 1 }, ref0[1] = { 0 }, bad_ref[1] = { 5 }, empty[3] = { 0, 1, 1 };
	struct kvl_req_desc d = { .blocks = &one,
				  .n_blocks = 1,
				  .n_steps = 1,
				  .step_first = first1,
				  .step_blocks = ref0 };
	kvl_req_t h = 0;
	void *p;
	char js[2048];

	printf("CHECK open_unknown_peer %d\n", kvl_req_open(rt, 63, &d, &h));
	printf("CHECK open_peer_out_of_range %d\n", kvl_req_open(rt, 100000, &d, &h));
	d.blocks = &big;
	printf("CHECK open_block_too_long %d\n", kvl_req_open(rt, peer, &d, &h));
	one.remote_seg = 999;
	d.blocks = &one;
	printf("CHECK open_unknown_segment %d\n", kvl_req_open(rt, peer, &d, &h));
	one.remote_seg = seg.id;
	one.remote_off = seg.length - 100;
	printf("CHECK open_outside_segment %d\n", kvl_req_open(rt, peer, &d, &h));
	one.remote_off = 0;
	d.step_blocks = bad_ref;
	printf("CHECK open_block_index %d\n", kvl_req_open(rt, peer, &d, &h));
	d.step_blocks = ref0;
	d.n_steps = 2;
	d.step_first = empty;
	printf("CHECK open_empty_step %d\n", kvl_req_open(rt, peer, &d, &h));
	d.n_steps = 1;
	d.step_first = first1;
	d.cls = 9;
	printf("CHECK open_bad_class %d\n", kvl_req_open(rt, peer, &d, &h));
	printf("CHECK done_unknown_handle %d\n", kvl_req_step_done(rt, 12345, 0));
	printf("CHECK cancel_unknown_handle %d\n", kvl_req_cancel(rt, 0));
	printf("CHECK h_unchanged %d\n", h == 0 ? 0 : -1);

	/* A good request: the errors above must have cost it nothing. */
	n_req = 1;
	build(&rq[0], 1);
	printf("CHECK open_good %d\n", open_req(&rq[0], 1));
	printf("CHECK done_out_of_range %d\n", kvl_req_step_done(rt, rq[0].h, n_steps));
	/* Nothing polled yet: no step is READY for the engine. */
	printf("CHECK done_not_ready %d\n", kvl_req_step_done(rt, rq[0].h, 1));
	printf("CHECK addr_out_of_range %d\n", kvl_req_block_addr(rt, rq[0].h, rq[0].n_blocks, &p));
	printf("CHECK addr_not_ready %d\n",
	       kvl_req_block_addr(rt, rq[0].h, rq[0].n_blocks - 1, &p));
	/* Step 0 READY, verified, DONE; then DONE again. */
	{
		struct kvl_req_event ev;
		int n = 0;

		for (int i = 0; i < 200000 && n == 0; i++) {
			n = (int)kvl_req_poll(rt, &ev, 1);
			if (n == 0)
				usleep(50);
		}
		printf("CHECK first_event_step %d\n",
		       n == 1 && ev.type == KVL_REQ_EV_STEP_READY ? (int)ev.step : -1);
		rq[0].next_ready = 1;
		verify_step(&rq[0], 0);
		printf("CHECK done_step0 %d\n", kvl_req_step_done(rt, rq[0].h, 0));
		rq[0].done = 1;
		steps_ok = 1;
		printf("CHECK done_twice %d\n", kvl_req_step_done(rt, rq[0].h, 0));
	}
	pump(true, 0, 30000);
	result();
	handles_json(js, sizeof(js));
	pause_at("end", js);
	return fails || bad_bytes || order_errors ? 1 : 0;
}

/* Open every request (PUSH or PULL); pump them to the end, marking steps DONE. */
static int run_all(bool push, const uint8_t *local)
{
	for (uint32_t i = 0; i < n_req; i++) {
		struct req *r = &rq[i];
		int rc;

		reset_req(r, i);
		r->push = push;
		for (uint32_t j = 0; push && j < r->n_blocks; j++)
			r->b[j].local = (void *)(local + r->b[j].remote_off); /* mirrors the peer */
		rc = open_req(r, i);
		if (rc < 0) {
			printf("ERROR open %s %u: %s\n", push ? "push" : "pull", i, strerror(-rc));
			return -1;
		}
	}
	pump(true, 0, 60000);
	return 0;
}

/*
 * A PUSH whose bytes are in the scheduler's own staging: a one-block PULL lands there first
 * (kvl_req_block_addr gives the place), then @d (PUSH, one block) names that place; what
 * kvl_req_open says is returned. The PULL is then finished (its step DONE). A staging address
 * that cannot be had is reported as 1, which the caller's check takes for a failure.
 */
static int push_from_staging(struct kvl_req_desc *d, struct kvl_req_block *one)
{
	uint32_t first[2] = { 0, 1 }, ref[1] = { 0 };
	struct kvl_req_block b = { .remote_off = 0, .remote_seg = seg.id, .length = 4096 };
	struct kvl_req_desc pd = { .blocks = &b,
				   .n_blocks = 1,
				   .n_steps = 1,
				   .step_first = first,
				   .step_blocks = ref,
				   .dir = KVL_REQ_PULL };
	struct kvl_req_event ev;
	kvl_req_t ph = 0, h = 0;
	void *slot = NULL;
	int rc = kvl_req_open(rt, peer, &pd, &ph), n = 0;

	if (rc < 0)
		return 1;
	for (int i = 0; i < 200000 && n == 0; i++) {
		n = (int)kvl_req_poll(rt, &ev, 1);
		if (n == 0)
			usleep(50);
	}
	if (n != 1 || ev.type != KVL_REQ_EV_STEP_READY || kvl_req_block_addr(rt, ph, 0, &slot) != 0)
		return 1;
	one->local = slot;
	rc = kvl_req_open(rt, peer, d, &h);
	kvl_req_step_done(rt, ph, 0);
	for (int i = 0; i < 200000; i++) { /* its DONE event, so that nothing is left over */
		if (kvl_req_poll(rt, &ev, 1) == 1)
			break;
		usleep(50);
	}
	return rc;
}

static int mode_push(const struct kvl_remote_seg *ro)
{
	struct kvl_segment src;
	uint32_t first1[2] = { 0, 1 }, ref0[1] = { 0 };
	static uint8_t heap_buf[4096];
	struct kvl_req_block one = { .remote_off = 0, .remote_seg = seg.id, .length = 4096 };
	struct kvl_req_desc d = { .blocks = &one,
				  .n_blocks = 1,
				  .n_steps = 1,
				  .step_first = first1,
				  .step_blocks = ref0,
				  .dir = KVL_REQ_PUSH };
	kvl_req_t h = 0;
	char js[2048];
	int rc = kvl_seg_alloc(rt, "push-src", &seg.geom, 0, &src);

	if (rc < 0) {
		printf("ERROR seg_alloc: %s\n", strerror(-rc));
		return 1;
	}
	kvl_pattern_fill(src.base, src.length, seed + 1000, 0);
	/* Bad calls: each refused before anything is posted. */
	one.local = heap_buf;
	printf("CHECK push_unregistered %d\n", kvl_req_open(rt, peer, &d, &h));
	one.local = (uint8_t *)src.base + src.length - 100;
	printf("CHECK push_past_segment %d\n", kvl_req_open(rt, peer, &d, &h));
	one.local = NULL;
	printf("CHECK push_null %d\n", kvl_req_open(rt, peer, &d, &h));
	one.local = src.base;
	if (ro) {
		one.remote_seg = ro->id;
		printf("CHECK push_read_only %d\n", kvl_req_open(rt, peer, &d, &h));
		one.remote_seg = seg.id;
	}
	printf("CHECK push_from_staging %d\n", push_from_staging(&d, &one));
	one.local = src.base;
	d.dir = KVL_REQ_PULL;
	printf("CHECK pull_with_local %d\n", kvl_req_open(rt, peer, &d, &h));
	d.dir = 7;
	printf("CHECK bad_dir %d\n", kvl_req_open(rt, peer, &d, &h));
	printf("CHECK h_unchanged %d\n", h == 0 ? 0 : -1);
	handles_json(js, sizeof(js));
	pause_at("bad", js);

	if (run_all(true, src.base) < 0)
		return 1;
	handles_json(js, sizeof(js));
	pause_at("pushed", js);
	check_seed = seed + 1000;
	steps_ok = 0;
	if (run_all(false, NULL) < 0)
		return 1;
	handles_json(js, sizeof(js));
	result();
	pause_at("end", js);
	return fails || bad_bytes || order_errors || push_addr_errors ? 1 : 0;
}

/* ---- chaos: requests against a peer that may die, stop or lose its connections ---- */

static uint32_t rnd(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return (uint32_t)(rng >> 11);
}

static uint64_t mono_ms(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (uint64_t)t.tv_sec * 1000 + (uint64_t)t.tv_nsec / 1000000;
}

/* A new cap now and then: a random one from 64 KiB to 2 MiB in slots, or none. */
static void chaos_cap(uint64_t *next)
{
	uint64_t now = mono_ms(), cap;

	if (cap_ms == 0 || now < *next)
		return;
	*next = now + cap_ms;
	cap = rnd() % 4 == 0 ? UINT64_MAX : (uint64_t)(2 + rnd() % 63) * 32768;
	if (kvl_req_budget_cap(rt, cap) < 0)
		cs.cap_errors++;
	cs.budget_moves++;
}

static bool lost_status(int st)
{
	return st == KVL_ERR_CONN_LOST || st == KVL_ERR_PEER_DEAD || st == KVL_ERR_NO_PEER;
}

/* One round: --requests opened, pumped until each ended once. Returns true when the peer
 * looks lost (an open refused, or a request failed for the connection's sake). */
static bool chaos_round(uint64_t *next_cap)
{
	struct kvl_req_event ev[64];
	uint64_t last;
	unsigned open_left = 0;
	bool lost = false;

	for (uint32_t i = 0; i < n_req; i++) {
		struct req *r = &rq[i];
		int rc;

		reset_req(r, i);
		rc = open_req(r, i);
		if (rc < 0) {
			cs.open_refused[-rc < CHAOS_MAX_ERRNO ? -rc : 0]++;
			r->h = 0;
			r->ended = true;
			lost = true;
			continue;
		}
		cs.opened++;
		open_left++;
	}
	last = mono_ms();
	while (open_left) {
		unsigned n = kvl_req_poll(rt, ev, 64);
		uint64_t now = mono_ms();

		chaos_cap(next_cap);
		if (n)
			last = now;
		for (unsigned i = 0; i < n; i++) {
			struct req *r = ev[i].req ? by_handle(ev[i].req) : NULL;

			if (r == NULL) {
				printf("ERROR event for unknown handle %" PRIu64 "\n", ev[i].req);
				cs.stray++;
				continue;
			}
			if (r->ended) {
				printf("ERROR event type %u for handle %" PRIu64 " that ended\n",
				       ev[i].type, ev[i].req);
				cs.dup_end++;
				continue;
			}
			if (ev[i].type == KVL_REQ_EV_STEP_READY) {
				int rc;

				if (r->status == -ECANCELED)
					continue; /* canceled: its staging is gone */
				if (ev[i].step != r->next_ready)
					order_errors++;
				r->next_ready = ev[i].step + 1;
				verify_step(r, ev[i].step);
				if (rnd() % 100 < cancel_pct) {
					rc = kvl_req_cancel(rt, r->h);
					cs.cancels++;
					if (rc == 0)
						r->status = -ECANCELED;
					else if (rc == -ENOENT)
						cs.cancel_lost++; /* it failed; the event follows */
					else
						cs.cancel_refused++;
					continue;
				}
				rc = kvl_req_step_done(rt, r->h, ev[i].step);
				if (rc == 0) {
					r->done++;
					steps_ok++;
				} else if (rc !=
					   -ENOENT) { /* -ENOENT: it failed; the event follows */
					printf("ERROR step_done(%u) = %d\n", ev[i].step, rc);
					cs.step_done_errors++;
				}
				continue;
			}
			r->ended = true;
			open_left--;
			if (ev[i].type == KVL_REQ_EV_DONE) {
				cs.done++;
			} else if (ev[i].type == KVL_REQ_EV_FAILED && ev[i].status > 0 &&
				   ev[i].status < KVL_STATUS_COUNT) {
				cs.failed[ev[i].status]++;
				/* canceled, and not by us: the peer's BYE (or our runtime stopping)
				 */
				cs.canceled_unasked +=
					ev[i].status == KVL_ERR_CANCELED && r->status != -ECANCELED;
				lost |= lost_status(ev[i].status);
			} else {
				printf("ERROR handle %" PRIu64 " ended with type %u status %d\n",
				       ev[i].req, ev[i].type, ev[i].status);
				cs.bad_status++;
			}
		}
		if (open_left && now - last >= CHAOS_QUIET_MS) {
			printf("ERROR %u requests never ended (no event for %u ms)\n", open_left,
			       CHAOS_QUIET_MS);
			cs.never_ended += open_left;
			for (uint32_t i = 0; i < n_req; i++)
				rq[i].ended = true; /* their late events count as stray */
			break;
		}
		if (n == 0)
			usleep(100);
	}
	return lost;
}

static void chaos_result(const char *tag)
{
	bool first = true;

	printf("%s {\"rounds\": %" PRIu64 ", \"opened\": %" PRIu64 ", \"done\": %" PRIu64
	       ", \"failed\": {",
	       tag, cs.rounds, cs.opened, cs.done);
	for (int st = 1; st < KVL_STATUS_COUNT; st++)
		if (cs.failed[st]) {
			printf("%s\"%s\": %" PRIu64, first ? "" : ", ", kvl_status_name(st),
			       cs.failed[st]);
			first = false;
		}
	printf("}, \"open_refused\": {");
	first = true;
	for (int e = 0; e < CHAOS_MAX_ERRNO; e++)
		if (cs.open_refused[e]) {
			printf("%s\"%d\": %" PRIu64, first ? "" : ", ", e, cs.open_refused[e]);
			first = false;
		}
	printf("}, \"bad_status\": %" PRIu64 ", \"dup_end\": %" PRIu64 ", \"stray\": %" PRIu64
	       ", \"never_ended\": %" PRIu64 ", \"cancels\": %" PRIu64
	       ", \"cancel_refused\": %" PRIu64 ", \"cancel_lost\": %" PRIu64
	       ", \"budget_moves\": %" PRIu64 ", \"cap_errors\": %" PRIu64
	       ", \"connects\": %" PRIu64 ", \"connect_failures\": %" PRIu64
	       ", \"step_done_errors\": %" PRIu64 ", \"steps_done\": %" PRIu64
	       ", \"blocks_verified\": %" PRIu64 ", \"bytes_verified\": %" PRIu64
	       ", \"bad_bytes\": %" PRIu64 ", \"gone_blocks\": %" PRIu64
	       ", \"order_errors\": %" PRIu64 ", \"canceled_unasked\": %" PRIu64 "}\n",
	       cs.bad_status, cs.dup_end, cs.stray, cs.never_ended, cs.cancels, cs.cancel_refused,
	       cs.cancel_lost, cs.budget_moves, cs.cap_errors, cs.connects, cs.connect_failures,
	       cs.step_done_errors, steps_ok, blocks_ok, bytes_ok, bad_bytes, cs.gone_blocks,
	       order_errors, cs.canceled_unasked);
	fflush(stdout);
}

/* The peer again after it was lost (its segment found by name, or its first). */
static int chaos_connect(void)
{
	struct kvl_remote_seg rs[16];
	char err[4096];
	int n, rc = kvl_connect(rt, peer_addr, 3000, &peer, err, sizeof(err));

	if (rc < 0) {
		cs.connect_failures++;
		return rc;
	}
	n = kvl_peer_segments(rt, peer, rs, 16);
	if (n <= 0) {
		cs.connect_failures++;
		return -ENOENT;
	}
	seg = rs[0];
	for (int k = 0; k < n && peer_seg_name; k++)
		if (strcmp(rs[k].name, peer_seg_name) == 0)
			seg = rs[k];
	cs.connects++;
	return 0;
}

static int mode_chaos(void)
{
	uint64_t end = mono_ms() + (uint64_t)chaos_secs * 1000, next_cap = 0, next_progress = 0;
	bool up = true;

	chaos = true;
	rng = (uint64_t)chaos_seed * 0x9E3779B97F4A7C15ull + 1;
	while (mono_ms() < end) {
		if (!up) {
			if (chaos_connect() < 0) {
				usleep(200000);
				continue;
			}
			up = true;
		}
		up = !chaos_round(&next_cap);
		cs.rounds++;
		if (mono_ms() >= next_progress) {
			chaos_result("PROGRESS");
			next_progress = mono_ms() + 2000;
		}
	}
	if (kvl_req_budget_cap(rt, UINT64_MAX) < 0)
		cs.cap_errors++;
	chaos_result("RESULT");
	pause_at("end", "{}");
	return cs.bad_status || cs.dup_end || cs.stray || cs.never_ended || cs.step_done_errors ||
			       cs.cap_errors || bad_bytes || order_errors
		       ? 1
		       : 0;
}

/*
 * dest: the engine's paged KV cache is a segment of its own (layers x K/V x cache_blocks
 * blocks, as vLLM lays out per-layer K/V block tensors), registered with kvl_seg_register
 * (host memory it allocated) or, with --dest-gpu, kvl_seg_alloc_gpu; every request PULLs
 * with KVL_REQ_ENGINE_DEST into block ids of its own, no staging slot. Even requests take
 * scattered ids, none adjacent to another destination; odd requests take a contiguous run
 * (their READs merge). Every byte outside the destinations is a guard (0xA5) and is checked
 * at the end, as is every destination's content again.
 */
#define GUARD 0xA5

static uint32_t dest_id(uint32_t i, uint32_t b, uint32_t cache_blocks)
{
	uint32_t x = i / 2 * n_blk + b, span = (n_req + 1) / 2 * n_blk;

	if (i % 2 == 0) /* odd ids 1, 3, 5, ... of the low half, permuted: gaps between */
		return 2 * ((x * 7 + 3) % span) + 1;
	return cache_blocks / 2 + 1 + x; /* contiguous runs in the high half */
}

static bool dest_flags; /* --dest-flags: the dest requests also take KVL_REQ_STEP_FLAGS */

static int mode_dest(bool gpu)
{
	struct kvl_req_flags fl[MAX_REQ];
	struct kvl_seg_geom g = { .layers = n_steps,
				  .planes = 2,
				  .blocks = 4 * ((n_req + 1) / 2) * n_blk + 4,
				  .block_bytes = seg.geom.block_bytes };
	struct kvl_segment cache;
	uint64_t len = (uint64_t)g.layers * g.planes * g.blocks * g.block_bytes, guard_bad = 0;
	uint8_t *mem = NULL, *in_dest;
	char js[2048];
	int rc;

	if (gpu) {
		rc = kvl_seg_alloc_gpu(rt, "paged-cache", &g, 0, KVL_GPU_CONFIGURED, &cache);
		if (rc == -ENOTSUP || rc == -ENODEV) {
			printf("SKIP no GPU segment here: %s (%s)\n", kvl_seg_error(),
			       strerror(-rc));
			fflush(stdout);
			return 77;
		}
	} else {
		mem = aligned_alloc(4096, len);
		if (mem == NULL)
			return 1;
		memset(mem, GUARD, len);
		rc = kvl_seg_register(rt, "paged-cache", mem, &g, 0, &cache);
	}
	if (rc < 0) {
		printf("ERROR paged cache segment: %s (%s)\n", kvl_seg_error(), strerror(-rc));
		return 1;
	}
	in_dest = calloc(len / 64, 1); /* 64-byte granules the destinations cover */
	open_flags = KVL_REQ_ENGINE_DEST | (dest_flags ? KVL_REQ_STEP_FLAGS : 0);
	for (uint32_t i = 0; i < n_req; i++) {
		struct req *r = &rq[i];

		reset_req(r, i);
		r->dest = true;
		for (uint32_t k = 0, j = 0; k < n_steps; k++)
			for (uint32_t p = 0; p < 2; p++)
				for (uint32_t b = 0; b < n_blk; b++, j++) {
					uint64_t o =
						kvl_block_offset(&g, k, p, dest_id(i, b, g.blocks));

					r->b[j].local = (uint8_t *)cache.base + o;
					for (uint64_t q = 0; q < g.block_bytes / 64; q++)
						in_dest[o / 64 + q] = 1;
				}
		rc = open_req(r, i);
		if (gpu) {
			/* tcp cannot land in VRAM: refused at open, with the reason */
			printf("CHECK gpu_dest_open %d\n", rc);
			printf("REASON %s\n", kvl_req_error());
			if (rc < 0) {
				n_req = i;
				break;
			}
			continue;
		}
		if (rc == 0 && dest_flags)
			rc = kvl_req_step_flags(rt, r->h, &fl[i]);
		if (rc < 0) {
			printf("ERROR open dest %u: %s (%s)\n", i, strerror(-rc), kvl_req_error());
			return 1;
		}
	}
	if (gpu) {
		/* null_transport: nothing moves, but READY comes and the addresses are the
		 * engine's device pointers (checked in verify_step, the bytes are not) */
		addr_only = true;
		pump(true, 0, 30000);
		handles_json(js, sizeof(js));
		result();
		pause_at("end", js);
		return fails || order_errors || push_addr_errors ? 1 : 0;
	}
	if (dest_flags) { /* READY words, not events; DONE words, not calls */
		flags_engine(fl);
	} else {
		pump(false, 300, 10000);
		handles_json(js, sizeof(js));
		pause_at("filled", js);
		pump(true, 0, 60000);
	}
	/* The engine's memory after the end: destinations still hold the peer's bytes, and not
	 * one byte around them was written. */
	for (uint32_t i = 0; i < n_req; i++)
		for (uint32_t j = 0; j < rq[i].n_blocks; j++)
			if (kvl_pattern_check(rq[i].b[j].local, rq[i].b[j].length, check_seed,
					      rq[i].b[j].remote_off) != rq[i].b[j].length)
				bad_bytes += rq[i].b[j].length;
	for (uint64_t o = 0; o < len; o++)
		guard_bad += !in_dest[o / 64] && mem[o] != GUARD;
	printf("DEST {\"cache_bytes\": %" PRIu64 ", \"guard_bad\": %" PRIu64
	       ", \"addr_errors\": %" PRIu64 "}\n",
	       len, guard_bad, push_addr_errors);
	handles_json(js, sizeof(js));
	result();
	pause_at("end", js);
	free(in_dest);
	return fails || bad_bytes || order_errors || guard_bad || push_addr_errors ? 1 : 0;
}

int main(int argc, char **argv)
{
	const char *sets[32], *ini = NULL, *addr = NULL, *mode = NULL, *seg_name = NULL,
			      *ro_name = NULL;
	const struct kvl_remote_seg *ro = NULL;
	unsigned n_sets = 0;
	int sep = -1, stage, rc, n;
	char err[4096];
	struct kvl_remote_seg rs[16];

	setvbuf(stdout, NULL, _IOLBF, 0);
	for (int i = 1; i < argc; i++)
		if (strcmp(argv[i], "--") == 0) {
			sep = i;
			break;
		}
	if (sep < 0)
		usage(argv[0]);
	for (int i = sep + 1; i < argc; i++) {
		const char *a = argv[i];

		if (i + 1 >= argc)
			usage(argv[0]);
		if (strcmp(a, "-c") == 0)
			ini = argv[++i];
		else if (strcmp(a, "--set") == 0 && n_sets < 32)
			sets[n_sets++] = argv[++i];
		else if (strcmp(a, "--peer") == 0)
			addr = argv[++i];
		else if (strcmp(a, "--mode") == 0)
			mode = argv[++i];
		else if (strcmp(a, "--requests") == 0)
			n_req = (uint32_t)atoi(argv[++i]);
		else if (strcmp(a, "--steps") == 0)
			n_steps = (uint32_t)atoi(argv[++i]);
		else if (strcmp(a, "--blocks") == 0)
			n_blk = (uint32_t)atoi(argv[++i]);
		else if (strcmp(a, "--seed") == 0)
			seed = (uint32_t)atoi(argv[++i]);
		else if (strcmp(a, "--compute-us") == 0)
			compute_us = (uint32_t)atoi(argv[++i]);
		else if (strcmp(a, "--segment") == 0)
			seg_name = argv[++i];
		else if (strcmp(a, "--ro-segment") == 0)
			ro_name = argv[++i];
		else if (strcmp(a, "--duration") == 0)
			chaos_secs = (uint32_t)atoi(argv[++i]);
		else if (strcmp(a, "--cancel-pct") == 0)
			cancel_pct = (uint32_t)atoi(argv[++i]);
		else if (strcmp(a, "--cap-ms") == 0)
			cap_ms = (uint32_t)atoi(argv[++i]);
		else if (strcmp(a, "--chaos-seed") == 0)
			chaos_seed = (uint32_t)atoi(argv[++i]);
		else if (strcmp(a, "--dest-flags") == 0) /* every option takes a value */
			dest_flags = atoi(argv[++i]) != 0;
		else
			usage(argv[0]);
	}
	if (!ini || !addr || !mode || n_req == 0 || n_req > MAX_REQ || n_steps == 0 || n_blk == 0)
		usage(argv[0]);
	struct kvl_start_args a = {
		.eal_argc = sep, .eal_argv = argv, .config = ini, .sets = sets, .n_sets = n_sets
	};
	rt = kvl_start(&a, err, sizeof(err), &stage);
	if (rt == NULL) {
		fprintf(stderr, "kvl_start: %s\n", err);
		return stage;
	}
	if (strcmp(mode, "tieroff") == 0) {
		rc = mode_tier_off();
		kvl_stop(rt);
		return rc;
	}
	/* "tier": this host's KV tier ([sched] tier = true), no connection to make */
	if (strcmp(addr, "tier") == 0) {
		peer = KVL_PEER_LOCAL_TIER;
		rc = 0;
	} else
		rc = kvl_connect(rt, addr, 5000, &peer, err, sizeof(err));
	if (rc < 0) {
		fprintf(stderr, "kvl_connect %s: %s\n", addr, err);
		kvl_stop(rt);
		return 1;
	}
	n = kvl_peer_segments(rt, peer, rs, 16);
	if (n <= 0) {
		fprintf(stderr, "the peer offers no segment (%d)\n", n);
		kvl_stop(rt);
		return 1;
	}
	seg = rs[0];
	for (int k = 0; k < n; k++) {
		if (seg_name && strcmp(rs[k].name, seg_name) == 0)
			seg = rs[k];
		if (ro_name && strcmp(rs[k].name, ro_name) == 0)
			ro = &rs[k];
	}
	if ((seg_name && strcmp(seg.name, seg_name) != 0) || (ro_name && ro == NULL)) {
		fprintf(stderr, "the peer offers no segment %s\n", seg_name ? seg_name : ro_name);
		kvl_stop(rt);
		return 1;
	}
	check_seed = seed;
	peer_addr = addr;
	peer_seg_name = seg_name;
	printf("connected peer %u, segment %u \"%s\" (%u x %u x %u x %u B)\n", peer, seg.id,
	       seg.name, seg.geom.layers, seg.geom.planes, seg.geom.blocks, seg.geom.block_bytes);
	if (n_steps > seg.geom.layers || (uint64_t)(n_req + 1) * n_blk > seg.geom.blocks ||
	    seg.geom.planes != 2) {
		fprintf(stderr, "the segment is too small for this load\n");
		kvl_stop(rt);
		return 1;
	}
	if (strcmp(mode, "verify") == 0)
		rc = mode_verify();
	else if (strcmp(mode, "chaos") == 0)
		rc = mode_chaos();
	else if (strcmp(mode, "cancel") == 0)
		rc = mode_cancel();
	else if (strcmp(mode, "bad") == 0)
		rc = mode_bad();
	else if (strcmp(mode, "push") == 0)
		rc = mode_push(ro);
	else if (strcmp(mode, "flags") == 0)
		rc = mode_flags();
	else if (strcmp(mode, "tierbad") == 0)
		rc = mode_tier_bad();
	else if (strcmp(mode, "dest") == 0 || strcmp(mode, "dest-gpu") == 0)
		rc = mode_dest(strcmp(mode, "dest-gpu") == 0);
	else
		usage(argv[0]);
	kvl_stop(rt);
	return rc;
}
