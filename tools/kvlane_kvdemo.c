/* SPDX-License-Identifier: BSD-3-Clause */
/* kvlane-kvdemo: the decode side of `make demo`: pull requests' KV from a prefill, verified. */
#include <errno.h>
#include <inttypes.h>
#include <sched.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kvl_clock.h"
#include "kvlane/kvlane.h"

#define MAX_SETS	   32
#define MAX_REMOTE_SEGS	   64
#define DEFAULT_MERGE_KB   2048		  /* one READ moves at most this much: 2 MiB */
#define DEFAULT_WINDOW	   16		  /* READs in flight */
#define STALL_TIMEOUT_NS   10000000000ull /* no completion for this long: give up */
#define CONNECT_TIMEOUT_MS 5000

enum {
	EXIT_FAIL = 1,	/* connect, segment, transfer or verification failed */
	EXIT_USAGE = 2, /* bad command line */
	EXIT_HOST = 4,	/* as kvl_start's KVL_START_HOST: here, no EAL memory for the segment */
};

struct opts {
	int eal_argc; /* argv[0] and everything before "--" */
	char **eal_argv;
	const char *config;
	const char *sets[MAX_SETS];
	unsigned n_sets;
	const char *addr;
	const char *segment;
	unsigned requests;
	uint64_t tokens; /* 0: all of the segment's blocks */
	unsigned block_tokens;
	unsigned window;
	unsigned merge_kb;
	unsigned seed;
	unsigned timeout_ms;
	bool help;
};

/* One READ: a run of blocks contiguous on both sides, and where it starts in KV terms. */
struct xfer_plan {
	uint64_t local_off;
	uint64_t remote_off;
	uint32_t length;
	uint32_t layer, plane, block; /* of its first block */
};

static void usage(const char *prog, FILE *fp)
{
	fprintf(fp,
		"Usage: %s [EAL options] -- -c FILE.ini [options] PREFILL_ADDR\n"
		"\n"
		"The decode side of a prefill/decode pair: connect to the prefill kvlane at\n"
		"PREFILL_ADDR (host:port of its [control] listen), find its KV segment and, for\n"
		"each request, READ the KV of a T-token request (every layer, K and V) into a\n"
		"local segment of the same geometry. Blocks contiguous on both sides are merged\n"
		"into one READ of at most --merge-kb; every byte is checked on arrival against\n"
		"the pattern the prefill holds. A request of T tokens uses blocks 0 .. "
		"ceil(T/B)-1\n"
		"of every layer and plane, on both sides; the report gives each request's wall\n"
		"time (checking included) and the rate.\n"
		"\n"
		"The prefill's segment must be filled with `fill = pattern` (seed --seed), as\n"
		"[segment.kv] of config/default.ini is; any other content fails verification.\n"
		"\n"
		"EAL options come first, as for kvlaned, e.g.\n"
		"  %s -l 0-1 --no-huge -m 1536 --no-pci --file-prefix decode -- \\\n"
		"      -c config/default.ini --set control.listen=127.0.0.1:0 \\\n"
		"      --set runtime.name=decode 127.0.0.1:18515\n"
		"The local segment is allocated from EAL memory: -m must hold it (1 GiB for an\n"
		"8K-token Llama-3-8B request) plus the INI's own segments.\n"
		"\n"
		"Options (after --):\n"
		"  -c, --config FILE     INI of this (decode) side (required)\n"
		"      --set SEC.KEY=VAL override one INI key (repeatable)\n"
		"      --requests N      requests to pull, one after the other (default 3)\n"
		"      --tokens T        tokens per request (default: all of the segment's\n"
		"                        blocks x --block-tokens); T <= blocks x block-tokens\n"
		"      --block-tokens B  tokens per KV block (default 16, as vLLM)\n"
		"      --segment NAME    the prefill's segment to read (default kv)\n"
		"      --merge-kb K      largest merged READ in KiB (default %u; the block size\n"
		"                        moves blocks one by one, for comparison)\n"
		"      --window N        READs in flight (default %u)\n"
		"      --seed S          pattern seed of the prefill's segment (default 1)\n"
		"      --timeout-ms MS   connect timeout (default %u)\n"
		"  -h, --help            this text\n"
		"\n"
		"Exit status: 0 every byte verified; 1 connect, segment, transfer or\n"
		"verification failed; 2 bad command line; 3 configuration error; 4 host error\n"
		"(e.g. EAL memory too small for the local segment); 5 EAL initialisation failed.\n",
		prog, prog, DEFAULT_MERGE_KB, DEFAULT_WINDOW, CONNECT_TIMEOUT_MS);
}

static int parse_uint(const char *opt, const char *v, uint64_t min, uint64_t max, uint64_t *out)
{
	char *end;
	unsigned long long n;

	errno = 0;
	n = strtoull(v, &end, 10);
	if (errno || end == v || *end || v[0] == '-' || n < min || n > max) {
		fprintf(stderr,
			"kvlane-kvdemo: %s: expected a whole number from %" PRIu64 " to %" PRIu64
			", got \"%s\"\n",
			opt, min, max, v);
		return -EINVAL;
	}
	*out = n;
	return 0;
}

static int parse_args(int argc, char **argv, struct opts *o)
{
	int dd = -1;

	memset(o, 0, sizeof(*o));
	o->segment = "kv";
	o->requests = 3;
	o->block_tokens = 16;
	o->window = DEFAULT_WINDOW;
	o->merge_kb = DEFAULT_MERGE_KB;
	o->seed = 1;
	o->timeout_ms = CONNECT_TIMEOUT_MS;
	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--") == 0) {
			dd = i;
			break;
		}
		if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0)
			o->help = true;
	}
	o->eal_argc = dd < 0 ? argc : dd;
	o->eal_argv = argv;
	if (dd < 0) {
		if (o->help)
			return 0;
		fprintf(stderr,
			"kvlane-kvdemo: no arguments of its own: put them after \"--\", e.g. %s "
			"[EAL options] -- -c config/default.ini 127.0.0.1:18515\n",
			argv[0]);
		return -EINVAL;
	}
	for (int i = dd + 1; i < argc; i++) {
		const char *a = argv[i];
		static const char *const valued[] = { "-c",	    "--config",	   "--set",
						      "--requests", "--tokens",	   "--block-tokens",
						      "--segment",  "--merge-kb",  "--window",
						      "--seed",	    "--timeout-ms" };
		bool has_val = false;
		const char *v = NULL;
		uint64_t n;
		int rc = 0;

		for (size_t k = 0; k < sizeof(valued) / sizeof(valued[0]); k++)
			has_val |= strcmp(a, valued[k]) == 0;
		if (has_val) {
			if (i + 1 >= argc || argv[i + 1][0] == '\0') {
				fprintf(stderr, "kvlane-kvdemo: %s needs a value\n", a);
				return -EINVAL;
			}
			v = argv[++i];
		}
		if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
			o->help = true;
		} else if (strcmp(a, "-c") == 0 || strcmp(a, "--config") == 0) {
			o->config = v;
		} else if (strcmp(a, "--set") == 0) {
			if (o->n_sets == MAX_SETS) {
				fprintf(stderr, "kvlane-kvdemo: at most %d --set options\n",
					MAX_SETS);
				return -EINVAL;
			}
			o->sets[o->n_sets++] = v;
		} else if (strcmp(a, "--requests") == 0) {
			rc = parse_uint(a, v, 1, 100000, &n);
			o->requests = (unsigned)n;
		} else if (strcmp(a, "--tokens") == 0) {
			rc = parse_uint(a, v, 1, UINT32_MAX, &n);
			o->tokens = n;
		} else if (strcmp(a, "--block-tokens") == 0) {
			rc = parse_uint(a, v, 1, 1u << 20, &n);
			o->block_tokens = (unsigned)n;
		} else if (strcmp(a, "--segment") == 0) {
			o->segment = v;
		} else if (strcmp(a, "--merge-kb") == 0) {
			rc = parse_uint(a, v, 1, 65536, &n);
			o->merge_kb = (unsigned)n;
		} else if (strcmp(a, "--window") == 0) {
			rc = parse_uint(a, v, 1, 4096, &n);
			o->window = (unsigned)n;
		} else if (strcmp(a, "--seed") == 0) {
			rc = parse_uint(a, v, 0, UINT32_MAX, &n);
			o->seed = (unsigned)n;
		} else if (strcmp(a, "--timeout-ms") == 0) {
			rc = parse_uint(a, v, 1, 600000, &n);
			o->timeout_ms = (unsigned)n;
		} else if (a[0] == '-') {
			fprintf(stderr, "kvlane-kvdemo: unknown option \"%s\" (see --help)\n", a);
			return -EINVAL;
		} else if (o->addr == NULL) {
			o->addr = a;
		} else {
			fprintf(stderr,
				"kvlane-kvdemo: one PREFILL_ADDR only, got \"%s\" and \"%s\"\n",
				o->addr, a);
			return -EINVAL;
		}
		if (rc)
			return rc;
	}
	if (o->help)
		return 0;
	if (o->config == NULL) {
		fprintf(stderr, "kvlane-kvdemo: no configuration: -c FILE.ini is required\n");
		return -EINVAL;
	}
	if (o->addr == NULL) {
		fprintf(stderr, "kvlane-kvdemo: no PREFILL_ADDR (host:port of the prefill's "
				"[control] listen, e.g. 127.0.0.1:18515)\n");
		return -EINVAL;
	}
	return 0;
}

/* "1.00 GiB", "32 KiB": sizes for people (exact byte counts are printed beside them). */
static const char *human(uint64_t b, char *buf, size_t len)
{
	if (b >= (1ull << 30))
		snprintf(buf, len, "%.2f GiB", (double)b / (double)(1ull << 30));
	else if (b >= (1ull << 20))
		snprintf(buf, len, "%.2f MiB", (double)b / (double)(1ull << 20));
	else if (b >= 1024)
		snprintf(buf, len, "%.2f KiB", (double)b / 1024.0);
	else
		snprintf(buf, len, "%" PRIu64 " B", b);
	return buf;
}

/*
 * The request occupies blocks 0..nb-1 of every (layer, plane) on both sides. Walk its block
 * descriptors in address order and merge each into the previous READ when it follows it on
 * both sides and the READ stays within @cap bytes. Returns the READs (count in *@n_out).
 */
static struct xfer_plan *plan_reads(const struct kvl_seg_geom *lg, const struct kvl_seg_geom *rg,
				    uint32_t nb, uint64_t cap, uint64_t *n_desc, size_t *n_out)
{
	size_t n = 0, max = (size_t)lg->layers * lg->planes * nb;
	struct xfer_plan *p;
	/* A block larger than the cap is moved in cap-sized pieces. */
	uint32_t pieces = (uint32_t)((rg->block_bytes + cap - 1) / cap);

	p = calloc(max * pieces, sizeof(*p));
	if (p == NULL)
		return NULL;
	*n_desc = 0;
	for (uint32_t l = 0; l < lg->layers; l++) {
		for (uint32_t pl = 0; pl < lg->planes; pl++) {
			for (uint32_t b = 0; b < nb; b++) {
				uint64_t lo = kvl_block_offset(lg, l, pl, b);
				uint64_t ro = kvl_block_offset(rg, l, pl, b);

				(*n_desc)++;
				for (uint64_t done = 0; done < rg->block_bytes;) {
					uint64_t len = rg->block_bytes - done;
					struct xfer_plan *prev = n ? &p[n - 1] : NULL;

					if (len > cap)
						len = cap;
					if (prev && prev->local_off + prev->length == lo + done &&
					    prev->remote_off + prev->length == ro + done &&
					    prev->length + len <= cap) {
						prev->length += (uint32_t)len;
					} else {
						p[n++] =
							(struct xfer_plan){ .local_off = lo + done,
									    .remote_off = ro + done,
									    .length = (uint32_t)len,
									    .layer = l,
									    .plane = pl,
									    .block = b };
					}
					done += len;
				}
			}
		}
	}
	*n_out = n;
	return p;
}

/* Where byte @off of a segment of geometry @g lies, for a mismatch report. */
static void locate(const struct kvl_seg_geom *g, uint64_t off, char *buf, size_t len)
{
	uint64_t block = off / g->block_bytes;
	uint64_t in = off % g->block_bytes;
	uint64_t b = block % g->blocks, lp = block / g->blocks;

	snprintf(buf, len, "layer %" PRIu64 ", %s, block %" PRIu64 ", byte %" PRIu64,
		 lp / g->planes, g->planes == 1 ? "K+V" : (lp % g->planes ? "V" : "K"), b, in);
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

struct run {
	struct kvl_runtime *rt;
	kvl_peer_t peer;
	uint32_t remote_id;
	uint8_t *local;
	const struct kvl_seg_geom *rg;
	const struct xfer_plan *plan;
	size_t n_plan;
	unsigned window;
	uint32_t seed;
	uint64_t verify_ns; /* time spent checking bytes, all requests */
};

/*
 * One request: keep @window READs in flight, check each one's bytes as it completes. Returns
 * 0, or -1 after printing what failed (a transfer status or the first byte that differs).
 */
static int pull_request(struct run *r, unsigned req)
{
	size_t next = 0, done = 0, inflight = 0;
	uint64_t last_progress = kvl_now_ns();
	int failed = 0;

	while (done < r->n_plan) {
		struct kvl_completion cpl[64];
		unsigned got;

		/* Post up to the window; the queues may take fewer: the rest goes next round. */
		while (!failed && next < r->n_plan && inflight < r->window) {
			struct kvl_xfer x[64];
			unsigned k = 0;
			int rc;

			while (k < 64 && next + k < r->n_plan && inflight + k < r->window) {
				const struct xfer_plan *p = &r->plan[next + k];

				x[k] = (struct kvl_xfer){ .cookie = next + k,
							  .local = r->local + p->local_off,
							  .remote_off = p->remote_off,
							  .length = p->length,
							  .remote_seg = r->remote_id,
							  .op = KVL_READ };
				k++;
			}
			rc = kvl_post(r->rt, r->peer, x, k);
			if (rc < 0) {
				fprintf(stderr,
					"kvlane-kvdemo: request %u: cannot post READs: %s (the "
					"prefill went away?)\n",
					req, strerror(-rc));
				failed = 1;
				break;
			}
			next += (size_t)rc;
			inflight += (size_t)rc;
			if ((unsigned)rc < k)
				break;
		}
		if (failed && inflight == 0)
			break;
		got = kvl_poll(r->rt, cpl, 64);
		if (got == 0) {
			if (kvl_now_ns() - last_progress > STALL_TIMEOUT_NS) {
				fprintf(stderr,
					"kvlane-kvdemo: request %u: %zu READs in flight and no "
					"completion for %llu s; giving up\n",
					req, inflight, STALL_TIMEOUT_NS / 1000000000ull);
				return -1;
			}
			/* Two cores here: let the lcores that move the bytes run. */
			sched_yield();
			continue;
		}
		last_progress = kvl_now_ns();
		for (unsigned i = 0; i < got; i++) {
			const struct xfer_plan *p = &r->plan[cpl[i].cookie];
			uint64_t t0, bad;
			char where[128];

			inflight--;
			done++;
			if (failed)
				continue; /* draining: the first failure is the one reported */
			if (cpl[i].status != KVL_OK || cpl[i].bytes != p->length) {
				fprintf(stderr,
					"kvlane-kvdemo: request %u: READ of %u bytes at layer %u, "
					"plane %u, block %u failed: %s (%u bytes)\n",
					req, p->length, p->layer, p->plane, p->block,
					kvl_status_name(cpl[i].status), cpl[i].bytes);
				failed = 1;
				continue;
			}
			t0 = kvl_now_ns();
			bad = kvl_pattern_check(r->local + p->local_off, p->length, r->seed,
						p->remote_off);
			r->verify_ns += kvl_now_ns() - t0;
			if (bad != p->length) {
				uint8_t want;

				kvl_pattern_fill(&want, 1, r->seed, p->remote_off + bad);
				locate(r->rg, p->remote_off + bad, where, sizeof(where));
				printf("verified: MISMATCH in request %u at remote offset %" PRIu64
				       " (%s): got 0x%02x, expected 0x%02x\n",
				       req, p->remote_off + bad, where,
				       r->local[p->local_off + bad], want);
				printf("  (the prefill's segment must hold `fill = pattern`, "
				       "seed %u, and nothing may write to it)\n",
				       r->seed);
				failed = 1;
			}
		}
	}
	return failed ? -1 : 0;
}

static void print_ms(const char *what, uint64_t ns)
{
	printf("%s %.1f ms", what, (double)ns / 1e6);
}

int main(int argc, char **argv)
{
	struct kvl_remote_seg segs[MAX_REMOTE_SEGS];
	const struct kvl_remote_seg *rs = NULL;
	struct kvl_start_args sa;
	struct kvl_runtime *rt;
	struct kvl_segment loc;
	struct kvl_seg_geom rg, lg;
	struct xfer_plan *plan;
	struct opts o;
	struct run r;
	kvl_peer_t peer;
	char err[4096], h1[32], h2[32];
	uint64_t n_desc = 0, req_bytes, max_tokens, *lat, total_ns = 0, t_zero;
	size_t n_plan;
	uint32_t nb;
	int n, rc, stage = 0, status = EXIT_FAIL;

	setvbuf(stdout, NULL, _IOLBF, 0);
	if (parse_args(argc, argv, &o) < 0)
		return EXIT_USAGE;
	if (o.help) {
		usage(argv[0], stdout);
		return 0;
	}
	sa = (struct kvl_start_args){ .eal_argc = o.eal_argc,
				      .eal_argv = o.eal_argv,
				      .config = o.config,
				      .sets = o.sets,
				      .n_sets = o.n_sets };
	rt = kvl_start(&sa, err, sizeof(err), &stage);
	if (rt == NULL) {
		fprintf(stderr, "kvlane-kvdemo: cannot start the runtime:\n%s\n", err);
		return stage;
	}

	rc = kvl_connect(rt, o.addr, o.timeout_ms, &peer, err, sizeof(err));
	if (rc < 0) {
		fprintf(stderr, "kvlane-kvdemo: cannot connect to the prefill: %s\n", err);
		goto out;
	}
	n = kvl_peer_segments(rt, peer, segs, MAX_REMOTE_SEGS);
	if (n < 0) {
		fprintf(stderr, "kvlane-kvdemo: %s: cannot list the prefill's segments: %s\n",
			o.addr, strerror(-n));
		goto out;
	}
	for (int i = 0; i < n && i < MAX_REMOTE_SEGS; i++)
		if (strcmp(segs[i].name, o.segment) == 0)
			rs = &segs[i];
	if (rs == NULL) {
		fprintf(stderr, "kvlane-kvdemo: %s offers no \"%s\" segment (it offers %d:", o.addr,
			o.segment, n);
		for (int i = 0; i < n && i < MAX_REMOTE_SEGS; i++)
			fprintf(stderr, "%s \"%s\"", i ? "," : "", segs[i].name);
		fprintf(stderr, "%s); give the prefill a [segment.%s] section\n", n ? "" : " none",
			o.segment);
		goto out;
	}
	if (!(rs->access & KVL_REMOTE_READ)) {
		fprintf(stderr,
			"kvlane-kvdemo: %s: segment \"%s\" does not let peers read it; set "
			"segment.%s.access = read on the prefill\n",
			o.addr, rs->name, rs->name);
		goto out;
	}
	rg = rs->geom;
	max_tokens = (uint64_t)rg.blocks * o.block_tokens;
	if (o.tokens == 0)
		o.tokens = max_tokens;
	if (o.tokens > max_tokens) {
		fprintf(stderr,
			"kvlane-kvdemo: geometry too small: %" PRIu64 " tokens need %" PRIu64
			" blocks of %u tokens per layer and plane, segment \"%s\" of %s has %u "
			"(at most %" PRIu64 " tokens); raise segment.%s.blocks on the prefill\n",
			o.tokens, (o.tokens + o.block_tokens - 1) / o.block_tokens, o.block_tokens,
			rs->name, o.addr, rg.blocks, max_tokens, rs->name);
		goto out;
	}
	nb = (uint32_t)((o.tokens + o.block_tokens - 1) / o.block_tokens);
	req_bytes = (uint64_t)rg.layers * rg.planes * nb * rg.block_bytes;

	lg = rg;
	rc = kvl_seg_alloc(rt, "kvdemo-decode", &lg, 0, &loc);
	if (rc < 0) {
		fprintf(stderr,
			"kvlane-kvdemo: cannot allocate the local segment (%" PRIu64 " bytes, %s): "
			"%s%s\n",
			rs->length, human(rs->length, h1, sizeof(h1)), strerror(-rc),
			rc == -ENOMEM ? "; raise EAL -m above the segment's size plus the INI's "
					"own segments"
				      : "");
		status = EXIT_HOST;
		goto out;
	}
	plan = plan_reads(&lg, &rg, nb, (uint64_t)o.merge_kb << 10, &n_desc, &n_plan);
	lat = calloc(o.requests, sizeof(*lat));
	if (plan == NULL || lat == NULL) {
		fprintf(stderr, "kvlane-kvdemo: out of memory for the transfer plan\n");
		free(plan);
		free(lat);
		goto out;
	}

	printf("kvlane-kvdemo: decode side, pulling KV from the prefill at %s\n", o.addr);
	printf("  segment     \"%s\" (id %u): %u layers x %u planes (%s) x %u blocks x %s\n",
	       rs->name, rs->id, rg.layers, rg.planes, rg.planes == 2 ? "K, V" : "K+V", rg.blocks,
	       human(rg.block_bytes, h1, sizeof(h1)));
	if ((uint64_t)rg.block_bytes * rg.planes % o.block_tokens == 0)
		printf("  model shape %" PRIu64
		       " bytes per token per layer (K+V), %s per token over "
		       "%u layers (blocks of %u tokens)\n",
		       (uint64_t)rg.block_bytes * rg.planes / o.block_tokens,
		       human((uint64_t)rg.block_bytes * rg.planes * rg.layers / o.block_tokens, h1,
			     sizeof(h1)),
		       rg.layers, o.block_tokens);
	else
		printf("  model shape %.1f bytes per token per layer (K+V) (blocks of %u tokens)\n",
		       (double)rg.block_bytes * rg.planes / o.block_tokens, o.block_tokens);
	printf("  request     %" PRIu64 " tokens = %u blocks per layer and plane = %" PRIu64
	       " bytes (%s)\n",
	       o.tokens, nb, req_bytes, human(req_bytes, h1, sizeof(h1)));
	/* The pages' first touch is slow (page faults, more so in a VM): done here, once, and
	 * said, so that it is not mistaken for transfer time. */
	t_zero = kvl_now_ns();
	memset(loc.base, 0, loc.length);
	t_zero = kvl_now_ns() - t_zero;
	printf("  local       segment \"kvdemo-decode\" of the same geometry, %s, first touched "
	       "in %.2f s\n",
	       human(loc.length, h1, sizeof(h1)), (double)t_zero / 1e9);
	printf("  merging     %" PRIu64 " block descriptors of %s -> %zu READs of up to %s "
	       "(contiguous on both sides), %u in flight\n",
	       n_desc, human(rg.block_bytes, h1, sizeof(h1)), n_plan,
	       human((uint64_t)o.merge_kb << 10, h2, sizeof(h2)), o.window);

	r = (struct run){ .rt = rt,
			  .peer = peer,
			  .remote_id = rs->id,
			  .local = loc.base,
			  .rg = &rg,
			  .plan = plan,
			  .n_plan = n_plan,
			  .window = o.window,
			  .seed = o.seed };
	for (unsigned q = 0; q < o.requests; q++) {
		uint64_t t0;

		/* Stale bytes of the previous request must not pass for this one's. */
		for (size_t i = 0; i < n_plan; i++)
			memset((uint8_t *)loc.base + plan[i].local_off, 0, plan[i].length);
		t0 = kvl_now_ns();
		if (pull_request(&r, q + 1) < 0) {
			free(plan);
			free(lat);
			goto out;
		}
		lat[q] = kvl_now_ns() - t0;
		total_ns += lat[q];
		printf("  request %u/%u %" PRIu64 " bytes in %.1f ms, %.2f GB/s, verified\n", q + 1,
		       o.requests, req_bytes, (double)lat[q] / 1e6,
		       (double)req_bytes / (double)lat[q]);
	}
	qsort(lat, o.requests, sizeof(*lat), cmp_u64);
	printf("  latency    ");
	print_ms(" min", lat[0]);
	print_ms(" / median", o.requests % 2 ? lat[o.requests / 2]
					     : (lat[o.requests / 2 - 1] + lat[o.requests / 2]) / 2);
	print_ms(" / max", lat[o.requests - 1]);
	printf(" per request (wall time, checking included)\n");
	printf("  moved       %" PRIu64 " bytes in %u request%s, %" PRIu64 " blocks, %" PRIu64
	       " READs: %.2f GB/s (%.1f ms of it checking bytes)\n",
	       req_bytes * o.requests, o.requests, o.requests == 1 ? "" : "s", n_desc * o.requests,
	       (uint64_t)n_plan * o.requests, (double)(req_bytes * o.requests) / (double)total_ns,
	       (double)r.verify_ns / 1e6);
	printf("verified: every byte (%u x %" PRIu64 " bytes against pattern seed %u)\n",
	       o.requests, req_bytes, o.seed);
	free(plan);
	free(lat);
	status = 0;
out:
	kvl_stop(rt);
	return status;
}
