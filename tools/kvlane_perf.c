/* SPDX-License-Identifier: BSD-3-Clause */
/* kvlane-perf: perftest-style bandwidth and latency of kvlane's transports (tcp, verbs). */
#include <errno.h>
#include <inttypes.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include <ini.h>

#include "config.h"
#include "kvl_clock.h"
#include "kvlane/kvlane.h"

enum {
	EXIT_FAIL = 1,	 /* a transfer failed, verification failed, a server could not be used */
	EXIT_USAGE = 2,	 /* bad command line */
	EXIT_CONFIG = 3, /* the INI, as kvlaned */
	EXIT_HOST = 4,
	EXIT_EAL = 5,
};

#define MAX_SETS	32
#define MAX_SERVERS	16
#define MAX_SIZES	32
#define MAX_NICS	16
#define MAX_MSG		(64u << 20) /* the tcp transport's largest message */
#define ALL_MAX		(8u << 20)  /* -a: 2 B .. 8 MiB */
#define DEFAULT_ITERS	1000u
#define ITERS_BYTES_CAP (1ull << 30) /* default iterations move at most 1 GiB per size */
#define DEFAULT_DEPTH	64u
#define MAX_DEPTH	16384u
#define DEFAULT_SEG	(64ull << 20)
#define MAX_SEG		(1ull << 30)
#define MAX_PASS_SLOTS	65536u /* distinct remote offsets one pass uses */
#define DEFAULT_SEED	7u
#define POST_BATCH	16u
#define POLL_BATCH	256u
#define INTERVAL_NS	100000000ull   /* peak bandwidth and the timeline: 100 ms */
#define BUCKET_NS	1000000ull     /* bytes are counted per 1 ms of the run for the peak */
#define STALL_NS	30000000000ull /* nothing completes for 30 s: the runtime is stuck */
#define STALL_PROBE_NS	60000000000ull /* then: do they come late? (stall_probe) */
#define NAP_AFTER_NS	100000ull      /* --nap: empty polls sched_yield this long before napping */
#define DEFAULT_NAP_US	50u
#define CONNECT_MS	10000u
#define VERIFY_CHUNK	(1u << 20)
#define MB		1048576.0 /* perftest's MB: 2^20 bytes */

static const char *prog = "kvlane-perf";
static volatile sig_atomic_t stop_signal;

/* ---- options ---- */

enum mode { MODE_BW, MODE_LAT };

struct opts {
	const char *config;
	const char *sets[MAX_SETS];
	unsigned n_sets;
	uint32_t sizes[MAX_SIZES];
	unsigned n_sizes;
	bool all;
	uint64_t iters; /* 0: the default */
	unsigned qps;	/* 0: the INI's qp_count */
	int op;		/* KVL_WRITE, KVL_READ */
	enum mode mode;
	unsigned depth;
	bool verify, json;
	double duration; /* 0: run ITERS */
	const char *device;
	int gid_index;	 /* -1: the INI's */
	double linger;	 /* client: seconds to stay up after the run (telemetry) */
	unsigned nap_us; /* --bw: sleep this long per empty poll after NAP_AFTER_NS (0: never) */
	unsigned warmup; /* --bw: transfers per size run before the measured ones */
	bool nap_set;
	const char *segment;
	uint32_t seed;
	uint64_t seg_size;
	const char *servers[MAX_SERVERS];
	unsigned n_servers;
	char *server_buf[MAX_SERVERS]; /* a bare host made host:port (resolve_servers) */
	unsigned port;		       /* -p: 0 = none given */
	bool help;
	const char *client_only; /* the first client-only option given, for server mode */
};

/* The help text, one line each; "%s" is the program name (at most 3 per line). */
static const char *const help[] = {
	"Usage: %s [EAL options] -- -c FILE.ini [--set S.K=V ...] [options] [SERVER[,SERVER...]]",
	"",
	"Bandwidth and latency of kvlane's own data path, in the manner of perftest (ib_write_bw,",
	"ib_write_lat), over the INI's NIC: tcp, or verbs on an RDMA device. EAL options",
	"come first, as for kvlaned:",
	"  server: %s -l 0-1 --no-huge -m 256 --no-pci --file-prefix ps -- -c config/default.ini",
	"  client: %s -l 0-1 --no-huge -m 256 --no-pci --file-prefix pc -- -c config/default.ini "
	"\\",
	"              -a 127.0.0.1:18515",
	"",
	"Server mode (no SERVER): starts the runtime (control listener from the INI and --set),",
	"offers a readwrite segment named --segment (default \"perf\") of --seg-size bytes, filled",
	"with the pattern of --seed (kvl_pattern_fill), prints",
	"  kvlane-perf server: listening on ADDR, segment ID BYTES",
	"and runs until SIGINT or SIGTERM (exit 0), or for --duration seconds (exit 0).",
	"",
	"Client mode: SERVER is the host:port of a kvlane control listener (kvlaned, or "
	"kvlane-perf",
	"in server mode), or a bare host as perftest takes it (ib_write_bw SERVER): 10.0.0.2,",
	"node7, [fe80::1] or ::1, whose port is -p's, else the port of the INI's [control]",
	"listen (after --set). kvlane-perf connects to each, finds the segment named --segment, "
	"and",
	"moves messages between a local segment and it: local offset = remote offset, each new",
	"transfer at the next message-sized offset, wrapping at the end of the range used",
	"(--seg-size). Transfers go round robin over the servers, up to 16 per turn. Client mode",
	"adds --set control.listen=127.0.0.1:0 and --set runtime.name=kvlane-perf before yours.",
	"",
	"Options (after --):",
	"  -c, --config FILE     kvlane INI (required)",
	"      --set S.K=V       override one INI key, as kvlaned (repeatable, at most 32)",
	"  -p, --port PORT       client: the control port of every bare-host SERVER (default: the",
	"                        INI's [control] listen port); server: listen on PORT (the host",
	"                        stays the INI's), as perftest's -p on both ends",
	"  -s, --size SIZE[,..]  message size(s) in bytes, or with K, M, G (2^10, 2^20, 2^30);",
	"                        1 B .. 64M, the tcp transport's largest message (default 64K)",
	"  -a, --all             every power of two from 2 B to 8M",
	"  -n, --iters N         transfers per size, over all servers (default 1000, but at most",
	"                        1 GiB per size: 2M runs 512, 8M runs 128)",
	"  -q, --qp N            data connections per server: adds --set nic.<NIC>.qp_count=N for",
	"                        the tcp NIC in use (default: the INI's qp_count)",
	"      --write           WRITE: local segment -> the server's segment (default)",
	"      --read            READ: the server's segment -> local segment",
	"      --bw              bandwidth: keep -t transfers in flight (default)",
	"      --lat             latency: one transfer at a time, kvl_post() to its completion",
	"  -t, --tx-depth N      transfers in flight with --bw, 1..16384 (default 64)",
	"      --verify          check every byte. --read: each range read is checked against the",
	"                        server's pattern (--seed, remote offset). --write: the source",
	"                        holds the pattern of another seed for its remote offset; what was",
	"                        written is READ back and checked, and the server's own pattern",
	"                        is written back at the end of each size. The run stops at the",
	"                        end of each pass over the range to check it; that time is not",
	"                        counted. A mismatch names the server and the remote offset",
	"      --json            one JSON object per size on stdout instead of the table (the",
	"                        header goes to stderr)",
	"      --duration SECS   --bw: run each size for SECS instead of -n transfers. Server",
	"                        mode: stop after SECS",
	"  -d, --device DEV      the NIC whose device is DEV (default: the INI's first NIC).",
	"                        Other NICs of the INI still open data connections and",
	"                        carry transfers too",
	"  -x, --gid-index N     RDMA: the GID index of that NIC, as perftest's -x: adds",
	"                        --set nic.<NIC>.gid_index=N (default: the INI's, auto = the",
	"                        RoCE v2 GID of the device's IPv4 address)",
	"      --nap US          --bw: once kvl_poll() has found nothing for 100 us, sleep US",
	"                        microseconds per empty poll instead of sched_yield(), so the",
	"                        waiting main thread leaves the CPU to the NIC lcore and the",
	"                        kernel (soft-RoCE does its copies there); 0: sched_yield()",
	"                        only (default 50; --lat always yields, its times stay exact)",
	"      --warmup N        --bw: before each size's measured run, N transfers of it at",
	"                        the same window, not counted (perftest --perform_warm_up,",
	"                        ucx_perftest -w); default 0",
	"      --linger SECS     client: keep the runtime up SECS after the run, printing",
	"                        \"kvlane-perf: lingering\" on stderr, so its telemetry",
	"                        (/kvlane/stats, /kvlane/qps) can be read; SIGTERM ends it",
	"      --segment NAME    the server's segment (default \"perf\"; kvlaned's is \"kv\")",
	"      --seed N          the pattern seed of that segment (default 7, kvlane-perf "
	"server's;",
	"                        kvlaned: [segment.*] pattern_seed, default 1)",
	"      --seg-size SIZE   server: the segment's size. Client: the most of each server's",
	"                        segment used, and the local memory per server (default 64M, at",
	"                        most 1G). It must fit where segments come from: the INI's",
	"                        [memory] pool when pool_size_mb > 0, else EAL's memory (-m)",
	"  -h, --help            this text",
	"",
	"Output: a header (transport, servers, connections, op, window), then a row per size:",
	"  --bw:  #bytes #iterations BW peak[MB/sec] BW average[MB/sec] MsgRate[Mpps]",
	"  --lat: #bytes #iterations t_min[usec] t_typical[usec] t_p99[usec] t_max[usec]",
	"MB is 2^20 bytes, as in perftest. BW average = bytes completed OK / wall time of the",
	"size's run (verification pauses left out). BW peak = the best rate of that run cut into",
	"n = run / 100 ms equal intervals (each at least 100 ms, so peak >= average); a run",
	"shorter than 100 ms reports its average as its peak (JSON: peak_intervals 0). MsgRate =",
	"transfers completed OK per second. --lat times each transfer from kvl_post() to its",
	"completion in kvl_poll(); t_typical is the median, t_p99 the 99th percentile. Times come",
	"from clock_gettime(CLOCK_MONOTONIC); JSON fields ending in _mono are that clock in",
	"seconds, comparable with other processes of the host.",
	"With several servers, or when one fails, lines per server follow the row (JSON:",
	"\"servers\"): transfers posted, completions by status (ok, conn-lost, peer-dead, ...),",
	"bytes, and for a server that died the time from its first failure to the moment its",
	"last outstanding transfer completed. JSON also gives each server's OK completions per",
	"100 ms of the run (ok_timeline, from t0_mono) and the bytes the verification moved",
	"(verify_read_bytes, verify_write_bytes).",
	"",
	"A server dies when one of its transfers completes with conn-lost, peer-dead or no-peer,",
	"or kvl_post() answers -ENOTCONN for it: it leaves the rotation at once and the run goes",
	"on with the others, for the following sizes too (with -n, its share is not posted",
	"again). A transfer that completes with any other status fails the run, and so does a",
	"run where nothing in flight completes for 30 s (each posted transfer must complete",
	"exactly once).",
	"",
	"Exit status: 0 when, for every size, either every transfer completed OK (and verified),",
	"or at least one server completed everything it was given OK and every failure was a",
	"conn-lost, peer-dead or no-peer completion of a server that died (a line says so).",
	"1 otherwise: any other status, a verification mismatch, a server that cannot be used,",
	"a stuck transfer, or SIGINT/SIGTERM in client mode (what was measured is printed).",
	"2: bad command line. 3, 4, 5: the runtime did not start (configuration, host, EAL), as",
	"kvlaned.",
	NULL,
};

static void usage(FILE *fp)
{
	for (unsigned i = 0; help[i]; i++) {
		fprintf(fp, help[i], prog, prog, prog);
		fputc('\n', fp);
	}
}

static int usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static int usage_error(const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "%s: ", prog);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, " (see --help)\n");
	return -EINVAL;
}

/* "65536", "64K", "8M", "1G" -> bytes. Returns 0, or -EINVAL with nothing parsed. */
static int parse_size(const char *s, uint64_t *out)
{
	char *end;
	unsigned long long v;
	unsigned shift = 0;

	if (s[0] < '0' || s[0] > '9')
		return -EINVAL;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno)
		return -EINVAL;
	switch (*end) {
	case 'k':
	case 'K':
		shift = 10;
		end++;
		break;
	case 'm':
	case 'M':
		shift = 20;
		end++;
		break;
	case 'g':
	case 'G':
		shift = 30;
		end++;
		break;
	default:
		break;
	}
	if (*end != '\0' || v > (UINT64_MAX >> shift))
		return -EINVAL;
	*out = (uint64_t)v << shift;
	return 0;
}

static int parse_uint(const char *s, uint64_t min, uint64_t max, uint64_t *out)
{
	char *end;
	unsigned long long v;

	if (s[0] < '0' || s[0] > '9')
		return -EINVAL;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno || *end != '\0' || v < min || v > max)
		return -EINVAL;
	*out = v;
	return 0;
}

static int parse_msg_sizes(const char *arg, struct opts *o)
{
	char buf[512], *save = NULL;

	snprintf(buf, sizeof(buf), "%s", arg);
	for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		uint64_t v;

		if (parse_size(tok, &v) < 0)
			return usage_error("-s %s: expected a size in bytes, or with K, M or G",
					   tok);
		if (v == 0)
			return usage_error("-s %s: the message size must be at least 1 byte", tok);
		if (v > MAX_MSG)
			return usage_error("-s %s: the message size must be at most 64M (the tcp "
					   "transport's largest message)",
					   tok);
		if (o->n_sizes == MAX_SIZES)
			return usage_error("-s: at most %u sizes", MAX_SIZES);
		o->sizes[o->n_sizes++] = (uint32_t)v;
	}
	if (o->n_sizes == 0)
		return usage_error("-s \"%s\": no size", arg);
	return 0;
}

static int add_servers(const char *arg, struct opts *o)
{
	const char *p = arg;

	while (*p) {
		const char *comma = strchr(p, ',');
		size_t len = comma ? (size_t)(comma - p) : strlen(p);
		char *s;

		if (len == 0)
			return usage_error("\"%s\": an empty SERVER (host:port, or a host)", arg);
		if (o->n_servers == MAX_SERVERS)
			return usage_error("at most %u servers", MAX_SERVERS);
		s = strndup(p, len);
		if (s == NULL)
			return -ENOMEM;
		o->servers[o->n_servers++] = s;
		p += len + (comma != NULL);
	}
	return 0;
}

/* Options that take a value. */
static bool takes_value(const char *o)
{
	static const char *const v[] = { "-c",	       "--config", "--set",	  "-s",
					 "--size",     "-n",	   "--iters",	  "-q",
					 "--qp",       "-t",	   "--tx-depth",  "--duration",
					 "-d",	       "--device", "--segment",	  "--seed",
					 "--seg-size", "-x",	   "--gid-index", "--linger",
					 "--nap",      "--warmup", "-p",	  "--port",
					 NULL };

	for (unsigned i = 0; v[i]; i++)
		if (strcmp(o, v[i]) == 0)
			return true;
	return false;
}

static int parse_opts(int argc, char **argv, struct opts *o)
{
	bool op_set = false, mode_set = false, dur_set = false;
	int rc;

	for (int i = 0; i < argc; i++) {
		char name[64];
		const char *a = argv[i], *v = NULL, *eq;
		uint64_t n;

		if (a[0] != '-' || a[1] == '\0') {
			rc = add_servers(a, o);
			if (rc < 0)
				return rc;
			continue;
		}
		/* --long=value */
		eq = a[1] == '-' ? strchr(a, '=') : NULL;
		snprintf(name, sizeof(name), "%.*s", eq ? (int)(eq - a) : (int)strlen(a), a);
		if (takes_value(name)) {
			if (eq)
				v = eq + 1;
			else if (i + 1 < argc)
				v = argv[++i];
			if (v == NULL || v[0] == '\0')
				return usage_error("%s needs a value", name);
		} else if (eq) {
			return usage_error("%s takes no value", name);
		}
		if (strcmp(name, "-h") == 0 || strcmp(name, "--help") == 0) {
			o->help = true;
		} else if (strcmp(name, "-c") == 0 || strcmp(name, "--config") == 0) {
			if (o->config)
				return usage_error("%s given twice", name);
			o->config = v;
		} else if (strcmp(name, "--set") == 0) {
			if (o->n_sets == MAX_SETS)
				return usage_error("at most %u --set options", MAX_SETS);
			if (strchr(v, '=') == NULL || strchr(v, '.') == NULL)
				return usage_error("--set %s: expected section.key=value", v);
			o->sets[o->n_sets++] = v;
		} else if (strcmp(name, "-s") == 0 || strcmp(name, "--size") == 0) {
			rc = parse_msg_sizes(v, o);
			if (rc < 0)
				return rc;
			o->client_only = o->client_only ?: "-s";
		} else if (strcmp(name, "-a") == 0 || strcmp(name, "--all") == 0) {
			o->all = true;
			o->client_only = o->client_only ?: "-a";
		} else if (strcmp(name, "-n") == 0 || strcmp(name, "--iters") == 0) {
			if (parse_uint(v, 1, UINT32_MAX, &o->iters) < 0)
				return usage_error("-n %s: expected a number of transfers, 1..%u",
						   v, UINT32_MAX);
			o->client_only = o->client_only ?: "-n";
		} else if (strcmp(name, "-q") == 0 || strcmp(name, "--qp") == 0) {
			if (parse_uint(v, 1, 1024, &n) < 0)
				return usage_error(
					"-q %s: expected a number of connections, 1..1024", v);
			o->qps = (unsigned)n;
			o->client_only = o->client_only ?: "-q";
		} else if (strcmp(name, "--write") == 0 || strcmp(name, "--read") == 0) {
			int op = name[2] == 'w' ? KVL_WRITE : KVL_READ;

			if (op_set && o->op != op)
				return usage_error("--write and --read: choose one");
			o->op = op;
			op_set = true;
			o->client_only = o->client_only ?: name[2] == 'w' ? "--write" : "--read";
		} else if (strcmp(name, "--bw") == 0 || strcmp(name, "--lat") == 0) {
			enum mode m = name[2] == 'b' ? MODE_BW : MODE_LAT;

			if (mode_set && o->mode != m)
				return usage_error("--bw and --lat: choose one");
			o->mode = m;
			mode_set = true;
			o->client_only = o->client_only ?: m == MODE_BW ? "--bw" : "--lat";
		} else if (strcmp(name, "-t") == 0 || strcmp(name, "--tx-depth") == 0) {
			if (parse_uint(v, 1, MAX_DEPTH, &n) < 0)
				return usage_error("-t %s: expected transfers in flight, 1..%u", v,
						   MAX_DEPTH);
			o->depth = (unsigned)n;
			o->client_only = o->client_only ?: "-t";
		} else if (strcmp(name, "--verify") == 0) {
			o->verify = true;
			o->client_only = o->client_only ?: "--verify";
		} else if (strcmp(name, "--json") == 0) {
			o->json = true;
			o->client_only = o->client_only ?: "--json";
		} else if (strcmp(name, "--duration") == 0) {
			char *end;

			errno = 0;
			o->duration = strtod(v, &end);
			if (errno || *end || !(o->duration > 0) || o->duration > 86400)
				return usage_error(
					"--duration %s: expected seconds, above 0 and at "
					"most 86400",
					v);
			dur_set = true;
		} else if (strcmp(name, "-p") == 0 || strcmp(name, "--port") == 0) {
			if (parse_uint(v, 1, 65535, &n) < 0)
				return usage_error("%s %s: expected a port 1..65535", name, v);
			o->port = (unsigned)n;
		} else if (strcmp(name, "-d") == 0 || strcmp(name, "--device") == 0) {
			o->device = v;
		} else if (strcmp(name, "-x") == 0 || strcmp(name, "--gid-index") == 0) {
			if (parse_uint(v, 0, 255, &n) < 0)
				return usage_error("%s %s: expected a GID index 0..255", name, v);
			o->gid_index = (int)n;
		} else if (strcmp(name, "--nap") == 0) {
			if (parse_uint(v, 0, 100000, &n) < 0)
				return usage_error("--nap %s: expected microseconds 0..100000", v);
			o->nap_us = (unsigned)n;
			o->nap_set = true;
			o->client_only = o->client_only ?: "--nap";
		} else if (strcmp(name, "--warmup") == 0) {
			if (parse_uint(v, 0, 1000000, &n) < 0)
				return usage_error("--warmup %s: expected transfers 0..1000000", v);
			o->warmup = (unsigned)n;
			o->client_only = o->client_only ?: "--warmup";
		} else if (strcmp(name, "--linger") == 0) {
			char *end;

			o->linger = strtod(v, &end);
			if (*end != '\0' || !(o->linger > 0 && o->linger <= 3600))
				return usage_error("--linger %s: expected seconds, above 0 and at "
						   "most 3600",
						   v);
			o->client_only = o->client_only ?: "--linger";
		} else if (strcmp(name, "--segment") == 0) {
			if (strlen(v) > 63)
				return usage_error("--segment %s: at most 63 characters", v);
			o->segment = v;
		} else if (strcmp(name, "--seed") == 0) {
			if (parse_uint(v, 0, 2147483647u, &n) < 0)
				return usage_error("--seed %s: expected 0..2147483647", v);
			o->seed = (uint32_t)n;
		} else if (strcmp(name, "--seg-size") == 0) {
			if (parse_size(v, &n) < 0 || n == 0 || n > MAX_SEG)
				return usage_error("--seg-size %s: expected a size of 1 B .. 1G",
						   v);
			o->seg_size = n;
		} else {
			return usage_error("unknown option \"%s\"", a);
		}
	}
	if (o->help)
		return 0;
	if (o->config == NULL)
		return usage_error("no configuration: -c FILE.ini is required");
	if (o->n_servers == 0) {
		if (o->client_only)
			return usage_error("%s is a client option, and no SERVER was given (server "
					   "mode)",
					   o->client_only);
		return 0;
	}
	if (o->all && o->n_sizes)
		return usage_error("-a and -s: choose one");
	if (o->all)
		for (uint32_t s = 2; s <= ALL_MAX; s <<= 1)
			o->sizes[o->n_sizes++] = s;
	if (o->n_sizes == 0)
		o->sizes[o->n_sizes++] = 65536;
	for (unsigned i = 0; i < o->n_sizes; i++)
		if (o->sizes[i] > o->seg_size)
			return usage_error("message size %" PRIu32 " is above --seg-size %" PRIu64,
					   o->sizes[i], o->seg_size);
	if (dur_set && o->mode == MODE_LAT)
		return usage_error("--duration needs --bw (--lat runs -n transfers)");
	if (o->nap_set && o->nap_us && o->mode != MODE_BW)
		return usage_error(
			"--nap needs --bw (--lat always yields, so its times stay exact)");
	if (o->warmup && (o->mode != MODE_BW || o->verify))
		return usage_error("--warmup needs --bw without --verify");
	if (!o->nap_set)
		o->nap_us = o->mode == MODE_BW ? DEFAULT_NAP_US : 0;
	if (o->mode == MODE_LAT)
		o->depth = 1;
	return 0;
}

/* ---- SERVER: host:port, or a bare host (perftest's way) with -p's or the INI's port ---- */

enum srv_form { SRV_HOSTPORT, SRV_BARE, SRV_BAD };

/* "h:p" / "[v6]:p": host:port; "h", "[v6]", "v6" (two colons or more): a bare host. */
static enum srv_form server_form(const char *a)
{
	const char *colon = strchr(a, ':');

	if (a[0] == '[') {
		const char *close = strchr(a, ']');

		if (close == NULL || close == a + 1)
			return SRV_BAD;
		if (close[1] == '\0')
			return SRV_BARE;
		return close[1] == ':' && close[2] != '\0' ? SRV_HOSTPORT : SRV_BAD;
	}
	if (colon == NULL)
		return SRV_BARE;
	if (strchr(colon + 1, ':') != NULL)
		return SRV_BARE; /* an IPv6 address without brackets */
	return colon != a && colon[1] != '\0' ? SRV_HOSTPORT : SRV_BAD;
}

/* The port of [control] listen as the runtime will read it (the file, its defaults, --set). */
static int ini_listen_port(const struct opts *o, unsigned *port, char *host, size_t hlen)
{
	struct kvl_conf_errors errs;
	struct kvl_config *cfg = malloc(sizeof(*cfg));
	const char *colon;
	int rc;

	if (cfg == NULL)
		return -ENOMEM;
	rc = kvl_config_load_sets(o->config, o->sets, o->n_sets, cfg, &errs);
	if (rc == 0) {
		colon = strrchr(cfg->control.listen, ':');
		*port = colon ? (unsigned)strtoul(colon + 1, NULL, 10) : 0;
		if (host && colon)
			snprintf(host, hlen, "%.*s", (int)(colon - cfg->control.listen),
				 cfg->control.listen);
	}
	free(cfg);
	return rc < 0 ? rc : errs.count ? -EINVAL : 0;
}

/* Bare hosts get their port: -p, or the INI's. Returns 0 or a negative exit status. */
static int resolve_servers(struct opts *o)
{
	unsigned port = o->port;
	bool any_bare = false;

	for (unsigned i = 0; i < o->n_servers; i++) {
		enum srv_form f = server_form(o->servers[i]);

		if (f == SRV_BAD) {
			usage_error("SERVER \"%s\": expected host:port, [ipv6]:port or a host",
				    o->servers[i]);
			return -EXIT_USAGE;
		}
		any_bare |= f == SRV_BARE;
	}
	if (!any_bare)
		return 0;
	if (port == 0) {
		if (ini_listen_port(o, &port, NULL, 0) < 0) {
			/* kvl_start() reports the INI's errors in full; say what they block here */
			fprintf(stderr,
				"%s: %s: cannot read [control] listen for the port of a "
				"bare-host SERVER (give -p PORT, or fix the errors below)\n",
				prog, o->config);
			return 0; /* kvl_start() fails on the same INI, with every detail */
		}
		if (port == 0) {
			usage_error(
				"SERVER without a port, and the INI's [control] listen port is 0 "
				"(any): give -p PORT or host:port");
			return -EXIT_USAGE;
		}
	}
	for (unsigned i = 0; i < o->n_servers; i++) {
		const char *a = o->servers[i];
		char *s;
		int n;

		if (server_form(a) != SRV_BARE)
			continue;
		if (a[0] != '[' && strchr(a, ':'))
			n = asprintf(&s, "[%s]:%u", a, port);
		else
			n = asprintf(&s, "%s:%u", a, port);
		if (n < 0)
			return -EXIT_USAGE;
		free(o->server_buf[i]);
		o->server_buf[i] = s;
		o->servers[i] = s;
	}
	return 0;
}

/* Server mode with -p: the INI's listen host on -p's port, as one more --set. */
static int server_listen_set(struct opts *o, char *buf, size_t len)
{
	char host[96];
	unsigned ini_port;

	if (o->port == 0)
		return 0;
	if (ini_listen_port(o, &ini_port, host, sizeof(host)) < 0)
		return 0; /* kvl_start() reports the INI's errors */
	snprintf(buf, len, "control.listen=%s:%u", host, o->port);
	return 1;
}

/* ---- the INI's NICs: which one is tcp, for -d and -q ---- */

struct nic_scan {
	char label[MAX_NICS][32];
	char device[MAX_NICS][64];
	char transport[MAX_NICS][16];
	unsigned qp_count[MAX_NICS];
	unsigned n;
};

static int scan_nic(struct nic_scan *s, const char *label)
{
	for (unsigned i = 0; i < s->n; i++)
		if (strcmp(s->label[i], label) == 0)
			return (int)i;
	if (s->n == MAX_NICS || strlen(label) >= sizeof(s->label[0]))
		return -1;
	snprintf(s->label[s->n], sizeof(s->label[0]), "%s", label);
	s->device[s->n][0] = s->transport[s->n][0] = '\0';
	s->qp_count[s->n] = 2; /* the runtime's default */
	return (int)s->n++;
}

static void scan_key(struct nic_scan *s, const char *section, const char *key, const char *val)
{
	char v[64];
	size_t n;
	int i;

	if (strncmp(section, "nic.", 4) != 0)
		return;
	i = scan_nic(s, section + 4);
	if (i < 0)
		return;
	snprintf(v, sizeof(v), "%s", val);
	n = strlen(v);
	if (n >= 2 && v[0] == '"' && v[n - 1] == '"') {
		memmove(v, v + 1, n - 2);
		v[n - 2] = '\0';
	}
	if (strcmp(key, "device") == 0)
		snprintf(s->device[i], sizeof(s->device[0]), "%s", v);
	else if (strcmp(key, "transport") == 0)
		snprintf(s->transport[i], sizeof(s->transport[0]), "%s", v);
	else if (strcmp(key, "qp_count") == 0)
		s->qp_count[i] = (unsigned)strtoul(v, NULL, 0);
}

static int scan_handler(void *user, const char *section, const char *key, const char *val)
{
	scan_key(user, section, key, val);
	return 1;
}

/* The runtime's rule: tcp when said, or when "auto" finds no RDMA device of that name. */
static bool nic_is_tcp(const struct nic_scan *s, unsigned i)
{
	char path[128];

	if (strcasecmp(s->transport[i], "tcp") == 0)
		return true;
	if (s->transport[i][0] != '\0' && strcasecmp(s->transport[i], "auto") != 0)
		return false;
	snprintf(path, sizeof(path), "/sys/class/infiniband/%s", s->device[i]);
	return access(path, F_OK) != 0;
}

/* Pick the NIC: -d's, or the first tcp one. Returns its index, or a negative exit status. */
static int pick_nic(const struct opts *o, struct nic_scan *s)
{
	char tcp[256] = "";
	size_t len = 0;
	int pick = -1;

	memset(s, 0, sizeof(*s));
	if (access(o->config, R_OK) != 0) {
		fprintf(stderr, "%s: %s: cannot read the configuration: %s\n", prog, o->config,
			strerror(errno));
		return -EXIT_CONFIG;
	}
	/* Syntax errors are kvl_start()'s to report, with every detail. */
	(void)ini_parse(o->config, scan_handler, s);
	for (unsigned i = 0; i < o->n_sets; i++) {
		const char *eq = strchr(o->sets[i], '='), *dot;
		char sec[64], key[64];

		dot = eq ? memrchr(o->sets[i], '.', (size_t)(eq - o->sets[i])) : NULL;
		if (dot == NULL || (size_t)(dot - o->sets[i]) >= sizeof(sec) ||
		    (size_t)(eq - dot) > sizeof(key))
			continue;
		snprintf(sec, sizeof(sec), "%.*s", (int)(dot - o->sets[i]), o->sets[i]);
		snprintf(key, sizeof(key), "%.*s", (int)(eq - dot - 1), dot + 1);
		scan_key(s, sec, key, eq + 1);
	}
	for (unsigned i = 0; i < s->n; i++) {
		len += (size_t)snprintf(tcp + len, len < sizeof(tcp) ? sizeof(tcp) - len : 0,
					"%s%s", len ? ", " : "", s->device[i]);
		if (pick < 0 && (o->device == NULL || strcmp(o->device, s->device[i]) == 0))
			pick = (int)i;
	}
	if (o->device && pick < 0) {
		usage_error("-d %s: no [nic.*] section of %s has device = %s (its NICs: %s)",
			    o->device, o->config, o->device, tcp[0] ? tcp : "none");
		return -EXIT_USAGE;
	}
	if (pick < 0) {
		usage_error("%s has no [nic.*] section", o->config);
		return -EXIT_USAGE;
	}
	return pick;
}

/* ---- clock ---- */

static double mono_s(uint64_t ns)
{
	return (double)ns / 1e9;
}

/* Wall time of a run with the verification pauses left out. */
struct run_clock {
	uint64_t acc, since;
	bool running;
};

static void clock_resume(struct run_clock *c)
{
	c->since = kvl_now_ns();
	c->running = true;
}

static void clock_pause(struct run_clock *c)
{
	if (c->running)
		c->acc += kvl_now_ns() - c->since;
	c->running = false;
}

static uint64_t clock_read(const struct run_clock *c)
{
	return c->acc + (c->running ? kvl_now_ns() - c->since : 0);
}

/* ---- client state ---- */

struct server {
	const char *addr;
	kvl_peer_t peer;
	uint32_t seg_id;
	uint64_t seg_len;
	uint8_t *local; /* its own part of the local segment: local offset = remote offset */

	/* per size */
	bool dead;		      /* a dead-server status, or -ENOTCONN: out of the rotation */
	uint64_t posted, outstanding; /* transfers */
	uint64_t ok, bytes_ok;	      /* completed OK */
	uint64_t status[KVL_STATUS_COUNT];
	uint64_t first_fail, last_done; /* ns; 0: none */
	uint64_t last_ok_post;		/* ns, post time of the latest-posted OK transfer */
	uint64_t next_slot;		/* slots used in this pass (verify) or ever (bw) */
	uint64_t touched;		/* bytes from offset 0 that this size wrote */
	uint8_t *slot_ok;		/* verify: this pass's slots that completed OK */
	uint32_t *timeline;		/* OK completions per 100 ms since the size started */
	unsigned tl_n, tl_cap;
	bool unverified; /* died before its range could be read back */
	bool gone;	 /* died during an earlier size: stays out of the rotation */
};

struct inflight {
	uint32_t server;
	uint32_t slot;
	uint64_t posted_ns;
	bool busy; /* posted, not completed yet */
};

struct client {
	struct opts *o;
	struct kvl_runtime *rt;
	struct server srv[MAX_SERVERS];
	unsigned n_srv, rr;
	uint64_t area; /* bytes of each server's segment used */
	uint8_t *local;
	const char *nic_label, *nic_device, *nic_transport;
	unsigned conns;

	/* per size */
	uint32_t size;
	uint64_t slots;	      /* per pass */
	uint64_t empty_since; /* --nap: when the polls started finding nothing (0: they find) */
	uint64_t naps;	      /* --nap: sleeps of this size's run */
	uint64_t first_ok_ns; /* run clock at the first OK completion (0: none yet) */
	uint64_t iters;	      /* 0 in --duration */
	uint64_t posted;
	struct inflight *inf;
	uint32_t *free_inf;
	unsigned n_free;
	uint64_t t0, last_progress;
	struct run_clock clk;
	uint64_t *bucket; /* bytes completed OK per BUCKET_NS of the run's clock */
	uint64_t n_buckets, bucket_cap;
	uint64_t *lat;
	uint64_t n_lat;
	uint64_t verify_read, verify_write, verified;
	uint32_t pass;
	bool bad_status, verify_failed, stalled;
	char verify_msg[256];
};

static const bool dead_status[KVL_STATUS_COUNT] = {
	[KVL_ERR_CONN_LOST] = true,
	[KVL_ERR_PEER_DEAD] = true,
	[KVL_ERR_NO_PEER] = true,
};

static void server_died(struct server *s, uint64_t t)
{
	if (!s->dead) {
		s->dead = true;
		s->first_fail = t;
	}
	if (s->outstanding == 0 && s->last_done == 0)
		s->last_done = t;
}

static void timeline_add(struct client *c, struct server *s, uint64_t t)
{
	unsigned b = (unsigned)((t - c->t0) / INTERVAL_NS);

	if (b >= s->tl_cap) {
		unsigned cap = s->tl_cap ? s->tl_cap : 64;
		uint32_t *p;

		while (cap <= b)
			cap *= 2;
		p = realloc(s->timeline, cap * sizeof(*p));
		if (p == NULL)
			return; /* the timeline is a report, not a result */
		memset(p + s->tl_cap, 0, (cap - s->tl_cap) * sizeof(*p));
		s->timeline = p;
		s->tl_cap = cap;
	}
	s->timeline[b]++;
	if (b + 1 > s->tl_n)
		s->tl_n = b + 1;
}

static void bucket_add(struct client *c, uint64_t run_ns, uint64_t bytes)
{
	uint64_t b = run_ns / BUCKET_NS;

	if (b >= c->bucket_cap) {
		uint64_t cap = c->bucket_cap ? c->bucket_cap : 1024;
		uint64_t *p;

		while (cap <= b)
			cap *= 2;
		p = realloc(c->bucket, cap * sizeof(*p));
		if (p == NULL)
			return; /* the peak only: the average does not need it */
		memset(p + c->bucket_cap, 0, (cap - c->bucket_cap) * sizeof(*p));
		c->bucket = p;
		c->bucket_cap = cap;
	}
	c->bucket[b] += bytes;
	if (b + 1 > c->n_buckets)
		c->n_buckets = b + 1;
}

/*
 * The run of @run_ns split into n = run / 100 ms equal intervals (each at least 100 ms), and
 * the best of their rates: as they partition the run, the peak is never below the average.
 * Returns n (0: the run was shorter than one interval).
 */
static uint64_t peak_rate(const struct client *c, uint64_t run_ns, uint64_t total, double *bps)
{
	uint64_t n = run_ns / INTERVAL_NS, *sum;
	double best = 0;

	*bps = run_ns ? (double)total * 1e9 / (double)run_ns : 0;
	if (n == 0 || c->bucket == NULL)
		return 0;
	sum = calloc(n, sizeof(*sum));
	if (sum == NULL)
		return 0;
	for (uint64_t b = 0; b < c->n_buckets; b++) {
		/* by its start; one that starts past the end (rounding) joins the last */
		uint64_t i = (uint64_t)((double)(b * BUCKET_NS) * (double)n / (double)run_ns);

		sum[i < n ? i : n - 1] += c->bucket[b];
	}
	for (uint64_t i = 0; i < n; i++) {
		double r = (double)sum[i] * 1e9 * (double)n / (double)run_ns;

		if (r > best)
			best = r;
	}
	free(sum);
	*bps = best;
	return n;
}

static void on_completion(struct client *c, const struct kvl_completion *k, uint64_t t,
			  uint64_t run_ns)
{
	struct inflight *f = k->cookie < c->o->depth ? &c->inf[k->cookie] : NULL;
	struct server *s;

	if (f == NULL || !f->busy) {
		/* the runtime's promise is exactly one completion per transfer taken */
		fprintf(stderr,
			"%s: a completion (cookie %" PRIu64 ", status %s) for no transfer in "
			"flight: completed twice, or never posted\n",
			prog, (uint64_t)k->cookie, kvl_status_name(k->status));
		c->bad_status = true;
		return;
	}
	f->busy = false;
	s = &c->srv[f->server];
	s->outstanding--;
	c->free_inf[c->n_free++] = (uint32_t)k->cookie;
	c->last_progress = t;
	if (k->status >= 0 && k->status < KVL_STATUS_COUNT)
		s->status[k->status]++;
	if (k->status == KVL_OK) {
		if (c->first_ok_ns == 0)
			c->first_ok_ns = run_ns ? run_ns : 1;
		s->ok++;
		s->bytes_ok += k->bytes;
		bucket_add(c, run_ns, k->bytes);
		if (f->posted_ns > s->last_ok_post)
			s->last_ok_post = f->posted_ns;
		if (s->slot_ok)
			s->slot_ok[f->slot] = 1;
		timeline_add(c, s, t);
		if (c->lat)
			c->lat[c->n_lat++] = t - f->posted_ns;
	} else if (k->status > 0 && k->status < KVL_STATUS_COUNT && dead_status[k->status]) {
		server_died(s, t);
	} else {
		if (!c->bad_status)
			fprintf(stderr,
				"%s: server %s: %s of %" PRIu32 " bytes at remote offset %" PRIu64
				" completed with status %s (%d)\n",
				prog, s->addr, c->o->op == KVL_WRITE ? "WRITE" : "READ", c->size,
				(uint64_t)f->slot * c->size, kvl_status_name(k->status), k->status);
		c->bad_status = true;
	}
	if (s->dead && s->outstanding == 0 && s->last_done == 0)
		s->last_done = t;
}

static unsigned poll_once(struct client *c)
{
	struct kvl_completion k[POLL_BATCH];
	unsigned n = kvl_poll(c->rt, k, POLL_BATCH);
	uint64_t t, run_ns;

	if (n == 0)
		return 0;
	t = kvl_now_ns();
	run_ns = clock_read(&c->clk);
	for (unsigned i = 0; i < n; i++)
		on_completion(c, &k[i], t, run_ns);
	return n;
}

static uint64_t outstanding(const struct client *c)
{
	uint64_t n = 0;

	for (unsigned i = 0; i < c->n_srv; i++)
		n += c->srv[i].outstanding;
	return n;
}

/*
 * An empty poll. The main thread only waits here: the NIC lcore does the transfers, and on
 * soft-RoCE the kernel does their copies (responder and completer), on the same few CPUs. A
 * sched_yield() loop never leaves its CPU idle, so the kernel's work gets only its fair
 * share of it; after NAP_AFTER_NS of empty polls (a completion is not due soon) it sleeps
 * --nap microseconds per poll instead, late by at most that much for a window of transfers
 * still in flight.
 */
static void idle_wait(struct client *c)
{
	uint64_t now;

	if (c->o->nap_us == 0) {
		sched_yield(); /* two cores are shared with the lcores */
		return;
	}
	now = kvl_now_ns();
	if (c->empty_since == 0)
		c->empty_since = now;
	if (now - c->empty_since < NAP_AFTER_NS) {
		sched_yield();
	} else {
		struct timespec ts = { 0, (long)c->o->nap_us * 1000 };

		nanosleep(&ts, NULL);
		c->naps++;
	}
}

/*
 * The run has failed already; whether the runtime completes the transfers late, or never,
 * tells a stuck QP from a lost completion: poll up to STALL_PROBE_NS more and say when they
 * came (each still counted once, by its status).
 */
static void stall_probe(struct client *c)
{
	uint64_t t0 = kvl_now_ns(), first = 0, last = 0, out0 = outstanding(c), got = 0;

	while (outstanding(c) && kvl_now_ns() - t0 < STALL_PROBE_NS && !stop_signal) {
		unsigned n = poll_once(c);

		if (n == 0) {
			idle_wait(c);
			continue;
		}
		last = kvl_now_ns() - t0;
		if (first == 0)
			first = last;
		got += n;
		c->empty_since = 0;
	}
	if (got == 0)
		fprintf(stderr,
			"%s: none of the %" PRIu64
			" came in %llu s more (from %.3f s, CLOCK_MONOTONIC)\n",
			prog, out0, STALL_PROBE_NS / 1000000000ull, t0 / 1e9);
	else
		fprintf(stderr,
			"%s: %" PRIu64 " of the %" PRIu64 " came late: the first %.1f s after "
			"that, the last %.1f s after (from %.3f s, CLOCK_MONOTONIC)\n",
			prog, got, out0, first / 1e9, last / 1e9, t0 / 1e9);
}

/* Poll once; false when nothing has completed for STALL_NS while transfers are out. */
static bool poll_or_stall(struct client *c)
{
	if (poll_once(c) == 0) {
		if (outstanding(c) && kvl_now_ns() - c->last_progress > STALL_NS) {
			fprintf(stderr,
				"%s: %" PRIu64
				" transfers outstanding and none completed for %llu s: "
				"the runtime did not complete them (each posted transfer must "
				"complete exactly once)\n",
				prog, outstanding(c), STALL_NS / 1000000000ull);
			c->stalled = true;
			stall_probe(c);
			return false;
		}
		idle_wait(c);
	} else {
		c->empty_since = 0;
	}
	return true;
}

/* ---- verification ---- */

static uint32_t write_seed(const struct client *c)
{
	/* Differs from the server's seed and from the previous pass's. */
	return c->o->seed + 1 + (c->pass & 1);
}

/*
 * Move [0, len) of @s's range as chunks, local offset = remote offset, @depth in flight, and
 * wait for all. Returns 0, 1 when the server died (typed), or -1 on any other failure.
 */
static int move_range(struct client *c, struct server *s, int op, uint64_t len, uint64_t *bytes)
{
	uint32_t chunk = c->size > VERIFY_CHUNK ? c->size : VERIFY_CHUNK;
	uint64_t off = 0, done = 0, out = 0, last = kvl_now_ns();
	bool died = false, bad = false;

	while ((off < len && !died && !bad) || out) {
		struct kvl_completion k[POLL_BATCH];
		unsigned n;

		while (off < len && !died && !bad && out < c->o->depth) {
			uint32_t l = len - off < chunk ? (uint32_t)(len - off) : chunk;
			struct kvl_xfer x = { .cookie = off,
					      .local = s->local + off,
					      .remote_off = off,
					      .length = l,
					      .remote_seg = s->seg_id,
					      .op = (uint32_t)op };
			int rc = kvl_post(c->rt, s->peer, &x, 1);

			if (rc == 0)
				break;
			if (rc < 0) {
				died = rc == -ENOTCONN;
				bad |= !died;
				if (!died)
					fprintf(stderr, "%s: server %s: kvl_post: %s\n", prog,
						s->addr, strerror(-rc));
				break;
			}
			off += l;
			out++;
		}
		n = kvl_poll(c->rt, k, POLL_BATCH);
		for (unsigned i = 0; i < n; i++) {
			if (out == 0 || k[i].cookie >= off || k[i].cookie % chunk) {
				fprintf(stderr,
					"%s: server %s: a verification completion (cookie %" PRIu64
					") for no transfer in flight\n",
					prog, s->addr, (uint64_t)k[i].cookie);
				bad = true;
				continue;
			}
			out--;
			if (k[i].status == KVL_OK) {
				done += k[i].bytes;
			} else if (k[i].status > 0 && k[i].status < KVL_STATUS_COUNT &&
				   dead_status[k[i].status]) {
				died = true;
			} else {
				fprintf(stderr,
					"%s: server %s: verification %s at remote offset %" PRIu64
					": status %s\n",
					prog, s->addr, op == KVL_READ ? "READ" : "WRITE",
					(uint64_t)k[i].cookie, kvl_status_name(k[i].status));
				bad = true;
			}
		}
		if (n) {
			last = kvl_now_ns();
		} else if (kvl_now_ns() - last > STALL_NS) {
			fprintf(stderr, "%s: server %s: verification transfers did not complete\n",
				prog, s->addr);
			c->stalled = true;
			return -1;
		} else {
			sched_yield();
		}
	}
	*bytes += done;
	if (died)
		server_died(s, kvl_now_ns());
	return bad ? -1 : died ? 1 : 0;
}

/* Before a pass: the source holds this pass's pattern (writes), or zeros to be overwritten
 * (reads), so that a transfer that did not land is seen. */
static void pass_prepare(struct client *c)
{
	uint64_t slots = c->slots;

	/* no server takes more than what is left of -n */
	if (c->iters && c->iters - c->posted < slots)
		slots = c->iters - c->posted;
	for (unsigned i = 0; i < c->n_srv; i++) {
		struct server *s = &c->srv[i];

		if (s->dead)
			continue;
		if (c->o->op == KVL_WRITE)
			kvl_pattern_fill(s->local, slots * c->size, write_seed(c), 0);
		else
			memset(s->local, 0, slots * c->size);
		memset(s->slot_ok, 0, c->slots);
	}
}

static void mismatch(struct client *c, const struct server *s, uint64_t slot_off, uint64_t at,
		     const char *what)
{
	if (!c->verify_failed)
		snprintf(c->verify_msg, sizeof(c->verify_msg),
			 "server %s: %s of %" PRIu32 " bytes at remote offset %" PRIu64
			 ": byte at remote offset %" PRIu64 " differs from the pattern",
			 s->addr, what, c->size, slot_off, at);
	c->verify_failed = true;
}

/* Check the first @used slots of @s after a drained pass (writes: read back first). */
static void check_server(struct client *c, struct server *s, uint64_t used)
{
	uint64_t len = used * c->size;
	uint32_t seed = c->o->op == KVL_WRITE ? write_seed(c) : c->o->seed;

	if (c->o->op == KVL_WRITE) {
		int rc;

		if (len > s->touched)
			s->touched = len;
		if (s->dead) {
			s->unverified = true;
			return;
		}
		for (uint64_t k = 0; k < used; k++)
			if (!s->slot_ok[k])
				return; /* a failure that is not a death: the run fails anyway */
		memset(s->local, 0, len);
		rc = move_range(c, s, KVL_READ, len, &c->verify_read);
		if (rc != 0) {
			s->unverified = rc > 0;
			c->bad_status |= rc < 0;
			return;
		}
	}
	for (uint64_t k = 0; k < used; k++) {
		uint64_t off = k * c->size, at;

		if (!s->slot_ok[k])
			continue;
		at = kvl_pattern_check(s->local + off, c->size, seed, off);
		if (at != c->size) {
			mismatch(c, s, off, off + at,
				 c->o->op == KVL_WRITE ? "WRITE (read back)" : "READ");
			return;
		}
		c->verified += c->size;
	}
}

/* After a drained pass: check every slot that completed OK, then start the next pass. */
static void pass_check(struct client *c)
{
	for (unsigned i = 0; i < c->n_srv; i++) {
		struct server *s = &c->srv[i];

		if (s->next_slot && !c->verify_failed)
			check_server(c, s, s->next_slot);
		s->next_slot = 0;
	}
	c->pass++;
}

/* After a size's writes: the server's pattern back where this size wrote, so a later --read
 * --verify (or another client) finds it; the local range holds it again too. */
static void restore(struct client *c)
{
	for (unsigned i = 0; i < c->n_srv; i++) {
		struct server *s = &c->srv[i];

		if (s->touched == 0)
			continue;
		kvl_pattern_fill(s->local, s->touched, c->o->seed, 0);
		if (!s->dead && move_range(c, s, KVL_WRITE, s->touched, &c->verify_write) < 0)
			c->bad_status = true;
	}
}

/* ---- one size ---- */

/* The next server that may take a transfer, round robin; -1 when none may now. */
static int next_server(struct client *c)
{
	for (unsigned k = 0; k < c->n_srv; k++) {
		unsigned i = (c->rr + k) % c->n_srv;
		struct server *s = &c->srv[i];

		if (s->dead || (c->o->verify && s->next_slot == c->slots))
			continue;
		c->rr = i + 1;
		return (int)i;
	}
	return -1;
}

static bool all_dead(const struct client *c)
{
	for (unsigned i = 0; i < c->n_srv; i++)
		if (!c->srv[i].dead)
			return false;
	return true;
}

/* Post up to a batch to the next server. Returns false when nothing could be posted now. */
static bool post_some(struct client *c, uint64_t budget)
{
	struct kvl_xfer x[POST_BATCH];
	uint32_t idx[POST_BATCH];
	unsigned n = 0;
	struct server *s;
	uint64_t t;
	int i = next_server(c), rc;

	if (i < 0 || budget == 0 || c->n_free == 0)
		return false;
	s = &c->srv[i];
	while (n < POST_BATCH && n < budget && n < c->n_free) {
		uint64_t slot;

		if (c->o->verify && s->next_slot + n == c->slots)
			break;
		slot = (s->next_slot + n) % c->slots;
		idx[n] = c->free_inf[c->n_free - 1 - n];
		x[n] = (struct kvl_xfer){ .cookie = idx[n],
					  .local = s->local + slot * c->size,
					  .remote_off = slot * c->size,
					  .length = c->size,
					  .remote_seg = s->seg_id,
					  .op = (uint32_t)c->o->op };
		c->inf[idx[n]] = (struct inflight){ .server = (uint32_t)i, .slot = (uint32_t)slot };
		n++;
	}
	t = kvl_now_ns();
	rc = kvl_post(c->rt, s->peer, x, n);
	if (rc == -ENOTCONN) {
		server_died(s, t);
		return true; /* the rotation changed: try the next one */
	}
	if (rc < 0) {
		fprintf(stderr, "%s: server %s: kvl_post: %s\n", prog, s->addr, strerror(-rc));
		c->bad_status = true;
		return false;
	}
	for (int k = 0; k < rc; k++) {
		c->inf[idx[k]].posted_ns = t;
		c->inf[idx[k]].busy = true;
	}
	c->n_free -= (unsigned)rc;
	s->next_slot += (uint64_t)rc;
	if (!c->o->verify)
		s->next_slot %= c->slots;
	s->posted += (uint64_t)rc;
	s->outstanding += (uint64_t)rc;
	c->posted += (uint64_t)rc;
	return rc > 0;
}

static bool want_more(struct client *c)
{
	if (stop_signal || c->bad_status || c->stalled || all_dead(c))
		return false;
	if (c->iters)
		return c->posted < c->iters;
	return clock_read(&c->clk) < (uint64_t)(c->o->duration * 1e9);
}

/* The engine of run_bw and run_lat: @depth transfers in flight until -n or --duration. */
static void run_size(struct client *c)
{
	c->t0 = c->last_progress = kvl_now_ns();
	c->clk = (struct run_clock){ 0 };
	if (c->o->verify)
		pass_prepare(c);
	clock_resume(&c->clk);
	for (;;) {
		bool more = want_more(c), posted = false;

		if (more)
			posted = post_some(c, c->iters ? c->iters - c->posted : POST_BATCH);
		if (!poll_or_stall(c))
			break;
		if (!more && outstanding(c) == 0)
			break;
		/* --verify: the pass is over when no live server may take more and all is in */
		if (c->o->verify && more && !posted && outstanding(c) == 0 && next_server(c) < 0 &&
		    !all_dead(c)) {
			clock_pause(&c->clk);
			pass_check(c);
			if (c->verify_failed || c->bad_status)
				break;
			pass_prepare(c);
			clock_resume(&c->clk);
			/* The stall bound counts from here: the check (a READ-back and a compare
			 * of the whole range) and the next pattern took their own time, with
			 * nothing of this pass in flight. Under TCG beside a CPU hog they took
			 * over 30 s, and the pass's first empty poll was taken for a stall. */
			c->last_progress = kvl_now_ns();
		}
	}
	clock_pause(&c->clk);
	if (c->o->verify && !c->stalled) {
		if (!c->verify_failed)
			pass_check(c);
		if (c->o->op == KVL_WRITE)
			restore(c);
	}
}

static void reset_size(struct client *c, uint32_t size);

/* --warmup: that many transfers through the same engine first, then the counters start over
 * (a failed warm-up is the run's result: the servers are not usable). */
static void run_bw(struct client *c)
{
	if (c->o->warmup) {
		uint64_t iters = c->iters;

		c->iters = c->o->warmup;
		run_size(c);
		if (c->stalled || c->bad_status || all_dead(c) || stop_signal)
			return;
		reset_size(c, c->size);
		c->iters = iters;
	}
	run_size(c);
}

static void run_lat(struct client *c)
{
	c->lat = malloc(c->iters * sizeof(*c->lat));
	if (c->lat == NULL) {
		fprintf(stderr, "%s: no memory for %" PRIu64 " latency samples\n", prog, c->iters);
		c->bad_status = true;
		return;
	}
	run_size(c);
}

/* ---- results ---- */

struct result {
	uint64_t ok, bytes, failed, dead_failed, not_posted;
	double secs, avg_bps, peak_bps, rate;
	uint64_t peak_intervals;
	double t_min, t_typ, t_p99, t_max, t_avg; /* usec */
	bool ok_run;
	unsigned dead, clean;
};

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

static void summarize(struct client *c, struct result *r)
{
	memset(r, 0, sizeof(*r));
	for (unsigned i = 0; i < c->n_srv; i++) {
		const struct server *s = &c->srv[i];
		uint64_t fails = s->posted - s->ok;

		r->ok += s->ok;
		r->bytes += s->bytes_ok;
		r->failed += fails;
		for (int st = 1; st < KVL_STATUS_COUNT; st++)
			if (dead_status[st])
				r->dead_failed += s->status[st];
		r->dead += s->dead && !s->gone;
		r->clean += s->posted > 0 && fails == 0 && !s->dead && !s->unverified;
	}
	if (c->iters && c->posted < c->iters)
		r->not_posted = c->iters - c->posted;
	r->secs = (double)c->clk.acc / 1e9;
	r->avg_bps = r->secs > 0 ? (double)r->bytes / r->secs : 0;
	r->peak_intervals = peak_rate(c, c->clk.acc, r->bytes, &r->peak_bps);
	r->rate = r->secs > 0 ? (double)r->ok / r->secs : 0;
	if (c->lat && c->n_lat) {
		double sum = 0;

		qsort(c->lat, c->n_lat, sizeof(*c->lat), cmp_u64);
		for (uint64_t i = 0; i < c->n_lat; i++)
			sum += (double)c->lat[i];
		r->t_min = (double)c->lat[0] / 1e3;
		r->t_typ = (double)c->lat[c->n_lat / 2] / 1e3;
		/* the ceil(0.99 n)-th smallest */
		r->t_p99 = (double)c->lat[(99 * c->n_lat + 99) / 100 - 1] / 1e3;
		r->t_max = (double)c->lat[c->n_lat - 1] / 1e3;
		r->t_avg = sum / (double)c->n_lat / 1e3;
	}
	/* Failures are forgiven only as the death of some servers while another did it all. */
	r->ok_run = !c->bad_status && !c->verify_failed && !c->stalled && !stop_signal &&
		    r->failed == r->dead_failed && r->clean > 0 && (r->not_posted == 0 || r->dead);
}

static const char *op_name(int op)
{
	return op == KVL_WRITE ? "WRITE" : "READ";
}

static void rule(FILE *fp)
{
	fprintf(fp, "---------------------------------------------------------------------------"
		    "------------\n");
}

static void print_header(struct client *c, FILE *fp)
{
	const struct opts *o = c->o;

	rule(fp);
	fprintf(fp, "                    kvlane %s %s (kvlane-perf)\n", op_name(o->op),
		o->mode == MODE_BW ? "bandwidth" : "latency");
	fprintf(fp, " Transport       : %s (nic.%s, device %s)\n", c->nic_transport, c->nic_label,
		c->nic_device);
	for (unsigned i = 0; i < c->n_srv; i++)
		fprintf(fp, " %-16s%s %s, segment \"%s\" id %" PRIu32 " of %" PRIu64 " bytes\n",
			i ? "" : (c->n_srv > 1 ? "Servers" : "Server"), i ? " " : ":",
			c->srv[i].addr, o->segment, c->srv[i].seg_id, c->srv[i].seg_len);
	fprintf(fp, " Range used      : %" PRIu64 " bytes of each (--seg-size)\n", c->area);
	fprintf(fp, " Connections     : %u per server\n", c->conns);
	fprintf(fp, " Operation       : %s\n", op_name(o->op));
	if (o->mode == MODE_BW)
		fprintf(fp, " Window          : %u transfers in flight\n", o->depth);
	if (o->mode == MODE_BW && o->nap_us)
		fprintf(fp,
			" Waiting         : sched_yield, after 100 us empty %u us naps (--nap)\n",
			o->nap_us);
	else if (o->mode == MODE_BW)
		fprintf(fp, " Waiting         : sched_yield per empty poll (--nap 0)\n");
	if (o->mode != MODE_BW)
		fprintf(fp, " Window          : 1 (one transfer at a time)\n");
	if (o->duration > 0)
		fprintf(fp, " Duration        : %.3g s per size\n", o->duration);
	fprintf(fp, " Verify          : %s\n",
		!o->verify	    ? "off"
		: o->op == KVL_READ ? "every byte read, against the server's pattern"
				    : "every byte written, read back (not timed)");
	if (o->mode == MODE_BW)
		fprintf(fp,
			" Units           : MB = 2^20 bytes; peak = best interval of >= 100 ms\n");
	rule(fp);
	if (o->json)
		return;
	if (o->mode == MODE_BW)
		fprintf(fp, " %-10s %-13s %-18s %-20s %s\n", "#bytes", "#iterations",
			"BW peak[MB/sec]", "BW average[MB/sec]", "MsgRate[Mpps]");
	else
		fprintf(fp, " %-10s %-13s %-14s %-17s %-14s %s\n", "#bytes", "#iterations",
			"t_min[usec]", "t_typical[usec]", "t_p99[usec]", "t_max[usec]");
}

static void status_list(const struct server *s, char *buf, size_t len)
{
	size_t n = 0;

	buf[0] = '\0';
	for (int st = 0; st < KVL_STATUS_COUNT; st++)
		if (s->status[st] || st == KVL_OK)
			n += (size_t)snprintf(buf + n, n < len ? len - n : 0, "%s%" PRIu64 " %s",
					      n ? ", " : "", s->status[st], kvl_status_name(st));
}

static void print_servers(struct client *c)
{
	char st[256];

	for (unsigned i = 0; i < c->n_srv; i++) {
		const struct server *s = &c->srv[i];

		if (c->n_srv == 1 && !s->dead && s->ok == s->posted)
			continue;
		if (s->gone) {
			printf("# server %s: dead since an earlier size, out of the rotation\n",
			       s->addr);
			continue;
		}
		status_list(s, st, sizeof(st));
		printf("# server %s: %" PRIu64 " posted: %s; %" PRIu64 " bytes\n", s->addr,
		       s->posted, st, s->bytes_ok);
		if (!s->dead)
			continue;
		printf("#   died %.3f s into the run", (double)(s->first_fail - c->t0) / 1e9);
		if (s->posted == s->ok)
			printf(", with none of its measured transfers in flight");
		else
			printf("; its last outstanding transfer completed %.3f ms after its first "
			       "failure",
			       (double)(s->last_done - s->first_fail) / 1e6);
		printf("%s\n", s->unverified ? "; what it took last was not verified" : "");
	}
}

static void json_mono(FILE *fp, const char *key, uint64_t ns)
{
	if (ns)
		fprintf(fp, ",\"%s\":%.6f", key, mono_s(ns));
	else
		fprintf(fp, ",\"%s\":null", key);
}

static void print_json(struct client *c, const struct result *r)
{
	const struct opts *o = c->o;

	printf("{\"transport\":\"%s\",\"nic\":\"%s\",\"device\":\"%s\",\"op\":\"%s\","
	       "\"mode\":\"%s\",\"bytes_per_msg\":%" PRIu32 ",\"iterations\":%" PRIu64
	       ",\"window\":%u,\"connections\":%u,\"duration_s\":%.3f",
	       c->nic_transport, c->nic_label, c->nic_device, o->op == KVL_WRITE ? "write" : "read",
	       o->mode == MODE_BW ? "bw" : "lat", c->size, c->posted, o->depth, c->conns,
	       o->duration);
	printf(",\"completed_ok\":%" PRIu64 ",\"failed\":%" PRIu64 ",\"not_posted\":%" PRIu64
	       ",\"bytes\":%" PRIu64 ",\"seconds\":%.6f",
	       r->ok, r->failed, r->not_posted, r->bytes, r->secs);
	if (o->mode == MODE_BW)
		printf(",\"bw_peak_MBps\":%.2f,\"bw_avg_MBps\":%.2f,\"peak_intervals\":%" PRIu64
		       ",\"msg_rate_Mpps\":%.6f,\"nap_us\":%u,\"naps\":%" PRIu64
		       ",\"warmup\":%u,\"first_ok_ms\":%.3f",
		       r->peak_bps / MB, r->avg_bps / MB, r->peak_intervals, r->rate / 1e6,
		       o->nap_us, c->naps, o->warmup, (double)c->first_ok_ns / 1e6);
	else
		printf(",\"t_min_us\":%.3f,\"t_typical_us\":%.3f,\"t_p99_us\":%.3f,"
		       "\"t_max_us\":%.3f,\"t_avg_us\":%.3f",
		       r->t_min, r->t_typ, r->t_p99, r->t_max, r->t_avg);
	printf(",\"verify\":%s,\"verified_bytes\":%" PRIu64 ",\"verify_read_bytes\":%" PRIu64
	       ",\"verify_write_bytes\":%" PRIu64,
	       o->verify ? "true" : "false", c->verified, c->verify_read, c->verify_write);
	printf(",\"verify_error\":");
	if (c->verify_failed)
		printf("\"%s\"", c->verify_msg);
	else
		printf("null");
	json_mono(stdout, "t0_mono", c->t0);
	printf(",\"timeline_interval_ms\":%llu,\"servers\":[", INTERVAL_NS / 1000000ull);
	for (unsigned i = 0; i < c->n_srv; i++) {
		const struct server *s = &c->srv[i];
		bool first = true;

		printf("%s{\"addr\":\"%s\",\"posted\":%" PRIu64 ",\"ok\":%" PRIu64
		       ",\"bytes\":%" PRIu64 ",\"status\":{",
		       i ? "," : "", s->addr, s->posted, s->ok, s->bytes_ok);
		for (int st = 0; st < KVL_STATUS_COUNT; st++) {
			if (!s->status[st] && st != KVL_OK)
				continue;
			printf("%s\"%s\":%" PRIu64, first ? "" : ",", kvl_status_name(st),
			       s->status[st]);
			first = false;
		}
		printf("},\"dead\":%s,\"dead_before\":%s,\"unverified\":%s",
		       s->dead ? "true" : "false", s->gone ? "true" : "false",
		       s->unverified ? "true" : "false");
		json_mono(stdout, "first_failure_mono", s->first_fail);
		json_mono(stdout, "last_outstanding_done_mono", s->last_done);
		if (s->first_fail)
			printf(",\"failure_to_drained_ms\":%.3f",
			       (double)(s->last_done - s->first_fail) / 1e6);
		else
			printf(",\"failure_to_drained_ms\":null");
		json_mono(stdout, "last_ok_posted_mono", s->last_ok_post);
		printf(",\"ok_timeline\":[");
		for (unsigned b = 0; b < s->tl_n; b++)
			printf("%s%" PRIu32, b ? "," : "", s->timeline[b]);
		printf("]}");
	}
	printf("],\"result\":\"%s\"}\n", r->ok_run ? "ok" : "failed");
}

static void print_row(struct client *c, const struct result *r)
{
	if (c->o->json) {
		print_json(c, r);
	} else {
		if (c->o->mode == MODE_BW)
			printf(" %-10" PRIu32 " %-13" PRIu64 " %-18.2f %-20.2f %.6f\n", c->size,
			       c->posted, r->peak_bps / MB, r->avg_bps / MB, r->rate / 1e6);
		else
			printf(" %-10" PRIu32 " %-13" PRIu64 " %-14.2f %-17.2f %-14.2f %.2f\n",
			       c->size, c->posted, r->t_min, r->t_typ, r->t_p99, r->t_max);
		print_servers(c);
	}
	if (c->verify_failed)
		fprintf(stderr, "%s: verification failed: %s\n", prog, c->verify_msg);
	fflush(stdout);
}

/* ---- client and server ---- */

static uint64_t iters_for(const struct opts *o, uint32_t size)
{
	uint64_t cap;

	if (o->duration > 0)
		return 0;
	if (o->iters)
		return o->iters;
	cap = ITERS_BYTES_CAP / size;
	return cap < DEFAULT_ITERS ? (cap ? cap : 1) : DEFAULT_ITERS;
}

static void reset_size(struct client *c, uint32_t size)
{
	free(c->lat);
	c->lat = NULL;
	c->n_lat = 0;
	c->size = size;
	c->slots = c->area / size;
	if (c->slots > MAX_PASS_SLOTS)
		c->slots = MAX_PASS_SLOTS;
	c->iters = iters_for(c->o, size);
	c->posted = 0;
	c->empty_since = c->naps = c->first_ok_ns = 0;
	c->n_free = c->o->depth;
	for (unsigned i = 0; i < c->o->depth; i++)
		c->free_inf[i] = c->o->depth - 1 - i;
	c->n_buckets = 0;
	if (c->bucket)
		memset(c->bucket, 0, c->bucket_cap * sizeof(*c->bucket));
	c->verify_read = c->verify_write = c->verified = 0;
	c->pass = 0;
	c->bad_status = c->verify_failed = c->stalled = false;
	for (unsigned i = 0; i < c->n_srv; i++) {
		struct server *s = &c->srv[i];

		s->gone |= s->dead;
		s->dead = s->gone;
		s->unverified = false;
		s->posted = s->outstanding = s->ok = s->bytes_ok = 0;
		memset(s->status, 0, sizeof(s->status));
		s->first_fail = s->last_done = s->last_ok_post = 0;
		s->next_slot = s->touched = 0;
		s->tl_n = 0;
		if (s->timeline)
			memset(s->timeline, 0, s->tl_cap * sizeof(*s->timeline));
	}
}

/* Connect, find the segment; returns 0 or an exit status. */
static int setup_servers(struct client *c)
{
	const struct opts *o = c->o;
	unsigned need = o->op == KVL_WRITE ? KVL_REMOTE_WRITE : KVL_REMOTE_READ;
	char err[512];

	if (o->verify && o->op == KVL_WRITE)
		need |= KVL_REMOTE_READ; /* to read back */
	c->area = o->seg_size;
	for (unsigned i = 0; i < c->n_srv; i++) {
		struct server *s = &c->srv[i];
		struct kvl_remote_seg rs[64];
		int n, rc = kvl_connect(c->rt, s->addr, CONNECT_MS, &s->peer, err, sizeof(err));

		if (rc < 0) {
			fprintf(stderr, "%s: cannot connect to %s\n", prog, err);
			return EXIT_FAIL;
		}
		n = kvl_peer_segments(c->rt, s->peer, rs, 64);
		if (n < 0) {
			fprintf(stderr, "%s: %s: cannot list its segments: %s\n", prog, s->addr,
				strerror(-n));
			return EXIT_FAIL;
		}
		for (int k = 0; k < n && k < 64; k++)
			if (strcmp(rs[k].name, o->segment) == 0) {
				s->seg_id = rs[k].id;
				s->seg_len = rs[k].length;
				if ((rs[k].access & need) != need) {
					fprintf(stderr,
						"%s: %s: segment \"%s\" does not allow %s (its "
						"access: "
						"%s%s)\n",
						prog, s->addr, o->segment,
						need == (KVL_REMOTE_READ | KVL_REMOTE_WRITE)
							? "WRITE and READ (--write --verify)"
							: op_name(o->op),
						rs[k].access & KVL_REMOTE_READ ? "read" : "",
						rs[k].access & KVL_REMOTE_WRITE ? " write" : "");
					return EXIT_FAIL;
				}
			}
		if (s->seg_len == 0) {
			fprintf(stderr, "%s: %s offers no segment named \"%s\" (--segment)\n", prog,
				s->addr, o->segment);
			return EXIT_FAIL;
		}
		if (s->seg_len < c->area)
			c->area = s->seg_len;
	}
	for (unsigned i = 0; i < o->n_sizes; i++)
		if (o->sizes[i] > c->area) {
			fprintf(stderr,
				"%s: message size %" PRIu32 " is above the %" PRIu64
				" bytes of segment \"%s\" this run can use\n",
				prog, o->sizes[i], c->area, o->segment);
			return EXIT_FAIL;
		}
	return 0;
}

static int setup_local(struct client *c)
{
	struct kvl_seg_geom g = {
		.layers = 1, .planes = 1, .blocks = c->n_srv, .block_bytes = (uint32_t)c->area
	};
	struct kvl_segment seg;
	int rc = kvl_seg_alloc(c->rt, "kvlane-perf-local", &g, 0, &seg);

	if (rc < 0) {
		fprintf(stderr,
			"%s: cannot allocate the local segment (%u x %" PRIu64 " bytes): %s%s\n",
			prog, c->n_srv, c->area, strerror(-rc),
			rc == -ENOMEM
				? "; lower --seg-size, or raise [memory] pool_size_mb (with a "
				  "pool) or EAL's -m (without)"
				: "");
		return EXIT_FAIL;
	}
	c->local = seg.base;
	for (unsigned i = 0; i < c->n_srv; i++) {
		c->srv[i].local = c->local + (uint64_t)i * c->area;
		/* The server's own pattern: plain writes leave its segment as it was. */
		kvl_pattern_fill(c->srv[i].local, c->area, c->o->seed, 0);
		if (c->o->verify) {
			c->srv[i].slot_ok = calloc(MAX_PASS_SLOTS, 1);
			if (c->srv[i].slot_ok == NULL)
				return EXIT_FAIL;
		}
	}
	c->inf = calloc(c->o->depth, sizeof(*c->inf));
	c->free_inf = calloc(c->o->depth, sizeof(*c->free_inf));
	return c->inf && c->free_inf ? 0 : EXIT_FAIL;
}

static int run_client(struct client *c)
{
	struct opts *o = c->o;
	FILE *hdr = o->json ? stderr : stdout;
	int rc, status = 0;

	c->n_srv = o->n_servers;
	for (unsigned i = 0; i < c->n_srv; i++)
		c->srv[i].addr = o->servers[i];
	rc = setup_servers(c);
	if (rc == 0)
		rc = setup_local(c);
	if (rc)
		return rc;
	print_header(c, hdr);
	fflush(hdr);
	for (unsigned i = 0; i < o->n_sizes && !stop_signal; i++) {
		struct result r;

		reset_size(c, o->sizes[i]);
		if (o->mode == MODE_BW)
			run_bw(c);
		else
			run_lat(c);
		summarize(c, &r);
		print_row(c, &r);
		if (!r.ok_run)
			status = EXIT_FAIL;
		if (r.ok_run && r.dead) {
			char why[128] = "none of their measured transfers failed";

			if (r.failed)
				snprintf(why, sizeof(why),
					 "each of their %" PRIu64 " failed transfers has a typed "
					 "status of a dead server",
					 r.failed);
			fprintf(hdr,
				"# %u of %u servers died during this size; %s, and %u server%s "
				"completed everything %s given OK: not an error\n",
				r.dead, c->n_srv, why, r.clean, r.clean == 1 ? "" : "s",
				r.clean == 1 ? "it was" : "they were");
		}
		if (c->stalled || c->bad_status || all_dead(c))
			break; /* the servers are not usable for the next size */
	}
	if (!o->json)
		rule(stdout);
	if (stop_signal) {
		fprintf(stderr, "%s: interrupted by %s: stopped early\n", prog,
			stop_signal == SIGINT ? "SIGINT" : "SIGTERM");
		status = EXIT_FAIL;
	}
	return status;
}

static int run_server(struct opts *o, struct kvl_runtime *rt)
{
	struct kvl_seg_geom g = { .layers = 1, .planes = 1, .blocks = 1 };
	struct kvl_segment seg;
	uint64_t end = o->duration > 0 ? kvl_now_ns() + (uint64_t)(o->duration * 1e9) : 0;
	int rc;

	g.block_bytes = (uint32_t)o->seg_size;
	rc = kvl_seg_alloc(rt, o->segment, &g, KVL_REMOTE_READ | KVL_REMOTE_WRITE, &seg);
	if (rc < 0) {
		fprintf(stderr,
			"%s server: cannot allocate segment \"%s\" of %" PRIu64 " bytes: %s%s\n",
			prog, o->segment, o->seg_size, strerror(-rc),
			rc == -ENOMEM
				? "; lower --seg-size, or raise [memory] pool_size_mb (with a "
				  "pool) or EAL's -m (without)"
				: "");
		return EXIT_FAIL;
	}
	kvl_pattern_fill(seg.base, seg.length, o->seed, 0);
	if (kvl_listen_addr(rt)[0] == '\0') {
		fprintf(stderr, "%s server: the control path is off: set [control] secret_file\n",
			prog);
		return EXIT_FAIL;
	}
	printf("kvlane-perf server: listening on %s, segment %" PRIu32 " %" PRIu64 "\n",
	       kvl_listen_addr(rt), seg.id, seg.length);
	fflush(stdout);
	while (!stop_signal && (end == 0 || kvl_now_ns() < end)) {
		struct timespec ts = { 0, 20000000 };

		nanosleep(&ts, NULL);
	}
	printf("kvlane-perf server: stopped (%s)\n", stop_signal == SIGINT ? "SIGINT"
						     : stop_signal == SIGTERM
							     ? "SIGTERM"
							     : "--duration elapsed");
	return 0;
}

static void on_signal(int sig)
{
	stop_signal = sig;
}

int main(int argc, char **argv)
{
	static struct opts o = { .op = KVL_WRITE,
				 .mode = MODE_BW,
				 .depth = DEFAULT_DEPTH,
				 .segment = "perf",
				 .seed = DEFAULT_SEED,
				 .seg_size = DEFAULT_SEG,
				 .gid_index = -1 };
	static struct client c;
	const char *sets[MAX_SETS + 4];
	char qp_set[96], gid_set[96], listen_set[128];
	struct nic_scan nics;
	struct kvl_start_args sa;
	struct sigaction act;
	char err[8192];
	int dd = -1, stage = 0, nic, status, n_sets = 0, rc;

	setvbuf(stdout, NULL, _IOLBF, 0);
	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--") == 0) {
			dd = i;
			break;
		}
		if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0)
			o.help = true; /* before "--" too: EAL's usage says nothing of ours */
	}
	if (dd < 0 && !o.help) {
		usage_error(
			"no kvlane-perf arguments: put them after \"--\", e.g. %s [EAL options] "
			"-- -c config/default.ini",
			argv[0]);
		return EXIT_USAGE;
	}
	if (dd >= 0 && parse_opts(argc - dd - 1, argv + dd + 1, &o) < 0)
		return EXIT_USAGE;
	if (o.help) {
		usage(stdout);
		return 0;
	}
	nic = pick_nic(&o, &nics);
	if (nic < 0)
		return -nic;
	rc = resolve_servers(&o);
	if (rc < 0)
		return -rc;
	for (unsigned i = 0; i < nics.n; i++)
		if ((int)i != nic)
			fprintf(stderr,
				"%s: note: nic.%s (device %s) is in the INI too: its data "
				"connections carry transfers as well\n",
				prog, nics.label[i], nics.device[i]);
	if (o.n_servers) {
		sets[n_sets++] = "control.listen=127.0.0.1:0";
		sets[n_sets++] = "runtime.name=kvlane-perf";
	} else {
		sets[n_sets++] = "runtime.name=kvlane-perf-server";
	}
	for (unsigned i = 0; i < o.n_sets; i++)
		sets[n_sets++] = o.sets[i];
	if (o.n_servers == 0 && server_listen_set(&o, listen_set, sizeof(listen_set)))
		sets[n_sets++] = listen_set; /* after the user's: -p wins, as perftest's */
	if (o.qps) {
		snprintf(qp_set, sizeof(qp_set), "nic.%s.qp_count=%u", nics.label[nic], o.qps);
		sets[n_sets++] = qp_set;
	}
	if (o.gid_index >= 0) {
		snprintf(gid_set, sizeof(gid_set), "nic.%s.gid_index=%d", nics.label[nic],
			 o.gid_index);
		sets[n_sets++] = gid_set;
	}

	memset(&act, 0, sizeof(act));
	act.sa_handler = on_signal;
	sigemptyset(&act.sa_mask);
	sigaction(SIGINT, &act, NULL);
	sigaction(SIGTERM, &act, NULL);

	sa = (struct kvl_start_args){ .eal_argc = dd,
				      .eal_argv = argv,
				      .config = o.config,
				      .sets = sets,
				      .n_sets = (unsigned)n_sets };
	c.rt = kvl_start(&sa, err, sizeof(err), &stage);
	if (c.rt == NULL) {
		fprintf(stderr, "%s\n%s: the runtime did not start\n", err, prog);
		return stage == KVL_START_CONFIG ? EXIT_CONFIG
		       : stage == KVL_START_EAL	 ? EXIT_EAL
						 : EXIT_HOST;
	}
	if (o.n_servers == 0) {
		status = run_server(&o, c.rt);
	} else {
		c.o = &o;
		c.nic_label = nics.label[nic];
		c.nic_device = nics.device[nic];
		c.nic_transport = nic_is_tcp(&nics, nic) ? "tcp" : "verbs";
		c.conns = o.qps ? o.qps : nics.qp_count[nic];
		status = run_client(&c);
		if (o.linger > 0 && !stop_signal) {
			uint64_t end = kvl_now_ns() + (uint64_t)(o.linger * 1e9);

			fprintf(stderr,
				"%s: lingering %.0f s (telemetry stays up; SIGTERM ends it)\n",
				prog, o.linger);
			while (!stop_signal && kvl_now_ns() < end)
				usleep(20000);
		}
	}
	kvl_stop(c.rt);
	return status;
}
