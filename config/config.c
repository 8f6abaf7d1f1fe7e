/* SPDX-License-Identifier: BSD-3-Clause */
/* INI configuration: one schema table drives parsing, validation, defaults and printing. */
#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <ini.h>

#include "config.h"

enum key_type {
	KT_BOOL,      /* bool */
	KT_UINT,      /* uint32_t in [min, max] */
	KT_INT_AUTO,  /* int: "auto" (KVL_AUTO) or [min, max] */
	KT_ENUM,      /* int: index into names[] */
	KT_TRI,	      /* int: enum kvl_tristate */
	KT_NAME,      /* char[size]: [A-Za-z0-9_.:-]+ */
	KT_ADDR,      /* char[size]: host:port; port may be 0 when min == 0 */
	KT_ADDR_LIST, /* struct kvl_control_conf peers/n_peers: comma-separated host:port */
	KT_PATH,      /* char[size]: a file path; relative ones are taken from the INI's folder */
	KT_GPU_SEL,   /* char[size]: auto | none | a GPU index | a PCI address (normalised) */
	KT_LCORES,    /* char[size]: an EAL --lcores map: digits and @ ( ) , - only */
	KT_ARGS,      /* char[size]: options split on blanks; no quotes, '\\' or ';' */
	KT_URL_LIST,  /* char[size]: comma-separated http(s)://host:port, stored joined by ',' */
};

#define F_REQUIRED  0x1
#define F_POW2	    0x2
#define F_RDMA_ONLY 0x4	 /* meaningless on the tcp transport: setting it there is an error */
#define F_APPEND    0x8	 /* a list: each line with this key adds to it (inih lines are short) */
#define F_EMPTY_OFF 0x10 /* KT_ADDR: an empty value is allowed and means off */

struct key_def {
	const char *name;
	uint8_t type;
	uint8_t flags;
	uint16_t off;
	uint16_t size;
	int64_t min, max;
	const char *const *names;
	const char *def;
};

struct section_def {
	const char *name; /* "nic" for [nic.<label>] */
	const struct key_def *keys;
	unsigned n_keys;
	size_t off; /* of the section struct in struct kvl_config (first element if repeated) */
	/* repeated sections ([name.<label>]): an array of elements that start with the label */
	bool multi;
	unsigned max;
	size_t elem_size;
	size_t count_off;  /* uint32_t element count in struct kvl_config */
	size_t origin_off; /* struct kvl_conf_origin[max] in struct kvl_config */
};

static const char *const idle_names[] = { "poll", "yield", "hybrid", NULL };
static const char *const transport_names[] = { "auto", "mlx5", "verbs", "tcp", NULL };
static const char *const ipc_names[] = { "auto", "off", NULL };
static const char *const tri_names[] = { "false", "true", "auto", NULL };
static const char *const access_names[] = { "read", "write", "readwrite", NULL };
static const char *const fill_names[] = { "zero", "pattern", NULL };
static const char *const seg_memory_names[] = { "host", "gpu", NULL };
static const char *const staging_names[] = { "auto", "host", "gpu", NULL };
static const char *const tier_copy_names[] = { "auto", "gather", "batch", "each", NULL };
static const char *const tls_names[] = { "off", "on", NULL };
static const char *const role_names[] = { "prefill", "decode", "tier", NULL };

#define K(s, field, t, fl, lo, hi, nm, d)                                                 \
	{                                                                                 \
		.name = #field, .type = (t), .flags = (fl), .off = offsetof(s, field),    \
		.size = sizeof(((s *)0)->field), .min = (lo), .max = (hi), .names = (nm), \
		.def = (d)                                                                \
	}

#define RT struct kvl_runtime_conf
static const struct key_def runtime_keys[] = {
	K(RT, name, KT_NAME, 0, 1, KVL_NAME_LEN - 1, NULL, "kvlane"),
	K(RT, idle_policy, KT_ENUM, 0, 0, 0, idle_names, "poll"),
	K(RT, hybrid_idle_us, KT_UINT, 0, 0, 10000000, NULL, "100"),
	K(RT, hybrid_sleep_us, KT_UINT, 0, 1, 100000, NULL, "50"),
	K(RT, allow_remote_numa, KT_BOOL, 0, 0, 0, NULL, "false"),
};
#undef RT

#define CQ struct kvl_cq_moderation_conf
static const struct key_def cq_keys[] = {
	K(CQ, enable, KT_BOOL, 0, 0, 0, NULL, "true"),
	K(CQ, count, KT_UINT, 0, 1, 65535, NULL, "16"),
	K(CQ, period_us, KT_UINT, 0, 0, 4095, NULL, "50"),
	K(CQ, signal_every, KT_UINT, 0, 1, 32768, NULL, "64"),
};
#undef CQ

#define MEM struct kvl_memory_conf
static const struct key_def memory_keys[] = {
	K(MEM, pool_size_mb, KT_UINT, 0, 0, 4194304, NULL, "0"),
	K(MEM, chunk_size_kb, KT_UINT, F_POW2, 4, 1048576, NULL, "4096"),
	K(MEM, hugepage, KT_TRI, 0, 0, 0, NULL, "auto"),
};
#undef MEM

#define GPU struct kvl_gpu_conf
static const struct key_def gpu_keys[] = {
	K(GPU, enable, KT_BOOL, 0, 0, 0, NULL, "false"),
	K(GPU, device_id, KT_UINT, 0, 0, 63, NULL, "0"),
	K(GPU, vram_reserve_mb, KT_UINT, 0, 0, 1048576, NULL, "2048"),
	K(GPU, gpudirect, KT_TRI, 0, 0, 0, NULL, "auto"),
};
#undef GPU

#define SCH struct kvl_sched_conf
static const struct key_def sched_keys[] = {
	K(SCH, window_min_kb, KT_UINT, 0, 4, 16777216, NULL, "256"),
	K(SCH, window_max_mb, KT_UINT, 0, 1, 1048576, NULL, "512"),
	K(SCH, budget_mb, KT_UINT, 0, 1, 16777216, NULL, "1024"),
	K(SCH, resize_interval_ms, KT_UINT, 0, 1, 60000, NULL, "10"),
	K(SCH, staging_mb, KT_UINT, 0, 0, 1048576, NULL, "0"),
	K(SCH, slot_kb, KT_UINT, F_POW2, 4, 65536, NULL, "64"),
	K(SCH, max_msg_kb, KT_UINT, 0, 0, 65536, NULL, "2048"),
	K(SCH, starvation_ms, KT_UINT, 0, 0, 60000, NULL, "50"),
	K(SCH, ready_ahead, KT_UINT, 0, 0, 65536, NULL, "0"),
	K(SCH, max_requests, KT_UINT, 0, 1, 65536, NULL, "256"),
	K(SCH, max_blocks, KT_UINT, 0, 1, 16777216, NULL, "65536"),
	K(SCH, null_transport, KT_BOOL, 0, 0, 0, NULL, "false"),
	K(SCH, null_transport_ack, KT_BOOL, 0, 0, 0, NULL, "false"),
	K(SCH, staging, KT_ENUM, 0, 0, 0, staging_names, "auto"),
	K(SCH, tier, KT_BOOL, 0, 0, 0, NULL, "false"),
	K(SCH, tier_rate_mbps, KT_UINT, 0, 0, 10000000, NULL, "0"),
	K(SCH, tier_copy, KT_ENUM, 0, 0, 0, tier_copy_names, "auto"),
};
#undef SCH

#define CTL struct kvl_control_conf
static const struct key_def control_keys[] = {
	K(CTL, listen, KT_ADDR, 0, 0, 65535, NULL, "127.0.0.1:18515"),
	K(CTL, secret_file, KT_PATH, 0, 0, KVL_PATH_LEN - 1, NULL, ""),
	K(CTL, secret_group_readable, KT_BOOL, 0, 0, 0, NULL, "false"),
	K(CTL, peers, KT_ADDR_LIST, F_APPEND, 1, 65535, NULL, ""),
	/* A handshake and the binds take round trips and a thread wake-up or two: under 100 ms
	 * fails on any loaded host, and 3 s (the old default) failed on busy CI hosts. */
	K(CTL, connect_timeout_ms, KT_UINT, 0, 100, 600000, NULL, "10000"),
	K(CTL, heartbeat_interval_ms, KT_UINT, 0, 10, 600000, NULL, "1000"),
	K(CTL, peer_timeout_ms, KT_UINT, 0, 20, 3600000, NULL, "5000"),
	/* TLS 1.3 under the control and tcp data connections (runtime/control/tls.c) */
	K(CTL, tls, KT_ENUM, 0, 0, 0, tls_names, "off"),
};
#undef CTL

#define TEL struct kvl_telemetry_conf
static const struct key_def telemetry_keys[] = {
	K(TEL, enable, KT_BOOL, 0, 0, 0, NULL, "true"),
	/* Prometheus /metrics (runtime/prometheus.c): off unless given; port 0 = any free one */
	K(TEL, prometheus_listen, KT_ADDR, F_EMPTY_OFF, 0, 65535, NULL, ""),
};
#undef TEL

/* ---- [eal] (issue 17) ---- */
#define EAL struct kvl_eal_conf
static const struct key_def eal_keys[] = {
	K(EAL, lcores, KT_LCORES, 0, 0, KVL_EAL_LCORES_LEN - 1, NULL, ""),
	K(EAL, memory_mb, KT_UINT, 0, 0, 4194304, NULL, "0"),
	K(EAL, file_prefix, KT_NAME, 0, 0, KVL_NAME_LEN - 1, NULL, ""),
	K(EAL, in_memory, KT_BOOL, 0, 0, 0, NULL, "false"),
	K(EAL, no_huge, KT_BOOL, 0, 0, 0, NULL, "false"),
	K(EAL, no_pci, KT_BOOL, 0, 0, 0, NULL, "false"),
	K(EAL, extra_args, KT_ARGS, 0, 0, KVL_EAL_ARGS_LEN - 1, NULL, ""),
};
#undef EAL
/* ---- end [eal] ---- */

/* ---- [cluster] (issue 19) ---- */
#define CLU struct kvl_cluster_conf
static const struct key_def cluster_keys[] = {
	K(CLU, etcd_endpoints, KT_URL_LIST, 0, 1, 65535, NULL, ""),
	K(CLU, name, KT_NAME, 0, 0, KVL_NAME_LEN - 1, NULL, ""),
	K(CLU, cluster, KT_NAME, 0, 1, KVL_NAME_LEN - 1, NULL, "default"),
	K(CLU, prefix, KT_PATH, 0, 0, 200, NULL, ""),
	K(CLU, role, KT_ENUM, 0, 0, 0, role_names, "decode"),
	K(CLU, advertise, KT_ADDR, 0, 1, 65535, NULL, ""),
	/* etcd itself refuses a TTL under about 2 s (1.5 election timeouts) */
	K(CLU, lease_ttl_s, KT_UINT, 0, 2, 3600, NULL, "10"),
	K(CLU, request_timeout_ms, KT_UINT, 0, 50, 60000, NULL, "1000"),
	K(CLU, tls_ca_file, KT_PATH, 0, 0, KVL_PATH_LEN - 1, NULL, ""),
	K(CLU, tls_cert_file, KT_PATH, 0, 0, KVL_PATH_LEN - 1, NULL, ""),
	K(CLU, tls_key_file, KT_PATH, 0, 0, KVL_PATH_LEN - 1, NULL, ""),
	K(CLU, user, KT_NAME, 0, 0, KVL_NAME_LEN - 1, NULL, ""),
	K(CLU, password_file, KT_PATH, 0, 0, KVL_PATH_LEN - 1, NULL, ""),
};
#undef CLU
/* ---- end [cluster] ---- */

/* [nic.*] gpu = <index>: as many GPUs as the topology scans (KVL_MAX_GPUS in topo.h). */
#define KVL_MAX_GPU_INDEX 63

#define NIC struct kvl_nic_conf
static const struct key_def nic_keys[] = {
	K(NIC, device, KT_NAME, F_REQUIRED, 1, KVL_NAME_LEN - 1, NULL, ""),
	K(NIC, port, KT_UINT, 0, 1, 255, NULL, "1"),
	K(NIC, transport, KT_ENUM, 0, 0, 0, transport_names, "auto"),
	K(NIC, gid_index, KT_INT_AUTO, F_RDMA_ONLY, 0, 255, NULL, "auto"),
	K(NIC, mtu, KT_UINT, F_POW2 | F_RDMA_ONLY, 256, 4096, NULL, "4096"),
	K(NIC, traffic_class, KT_UINT, 0, 0, 255, NULL, "0"),
	K(NIC, service_level, KT_UINT, F_RDMA_ONLY, 0, 15, NULL, "0"),
	K(NIC, pkey_index, KT_UINT, F_RDMA_ONLY, 0, 65535, NULL, "0"),
	K(NIC, ack_timeout, KT_UINT, F_RDMA_ONLY, 1, 31, NULL, "15"),
	K(NIC, retry_count, KT_UINT, F_RDMA_ONLY, 1, 6, NULL, "6"),
	K(NIC, qp_count, KT_UINT, 0, 1, KVL_CONF_MAX_PEER_CONNS, NULL, "2"),
	K(NIC, queue_depth, KT_UINT, F_POW2, 16, 32768, NULL, "1024"),
	K(NIC, numa_node, KT_INT_AUTO, 0, 0, 1023, NULL, "auto"),
	K(NIC, data_port, KT_UINT, 0, 0, 65535, NULL, "0"),
	K(NIC, ipc, KT_ENUM, 0, 0, 0, ipc_names, "auto"),
	K(NIC, gpu, KT_GPU_SEL, 0, 0, KVL_MAX_GPU_INDEX, NULL, "auto"),
};
#undef NIC

#define SEG struct kvl_segment_conf
static const struct key_def segment_keys[] = {
	K(SEG, layers, KT_UINT, 0, 1, 1024, NULL, "1"),
	K(SEG, planes, KT_UINT, 0, 1, 2, NULL, "2"),
	K(SEG, blocks, KT_UINT, F_REQUIRED, 1, 16777216, NULL, ""),
	K(SEG, block_bytes, KT_UINT, F_REQUIRED, 1, 1 << 30, NULL, ""),
	K(SEG, access, KT_ENUM, 0, 0, 0, access_names, "read"),
	K(SEG, fill, KT_ENUM, 0, 0, 0, fill_names, "zero"),
	K(SEG, pattern_seed, KT_UINT, 0, 0, INT32_MAX, NULL, "1"),
	K(SEG, memory, KT_ENUM, 0, 0, 0, seg_memory_names, "host"),
	K(SEG, gpu, KT_UINT, 0, 0, 63, NULL, "0"),
};
#undef SEG
#undef K

#define SEC(id, nm, tbl, field)                          \
	[id] = { .name = nm,                             \
		 .keys = tbl,                            \
		 .n_keys = sizeof(tbl) / sizeof(tbl[0]), \
		 .off = offsetof(struct kvl_config, field) }
#define MULTI(id, nm, keys, field, cnt, org, mx)             \
	[id] = { nm,                                         \
		 keys,                                       \
		 sizeof(keys) / sizeof(keys[0]),             \
		 offsetof(struct kvl_config, field),         \
		 true,                                       \
		 mx,                                         \
		 sizeof(((struct kvl_config *)0)->field[0]), \
		 offsetof(struct kvl_config, cnt),           \
		 offsetof(struct kvl_config, org) }
static const struct section_def sections[KVL_SEC_COUNT] = {
	SEC(KVL_SEC_RUNTIME, "runtime", runtime_keys, runtime),
	SEC(KVL_SEC_CQ_MODERATION, "cq_moderation", cq_keys, cq_moderation),
	SEC(KVL_SEC_MEMORY, "memory", memory_keys, memory),
	SEC(KVL_SEC_GPU, "gpu", gpu_keys, gpu),
	SEC(KVL_SEC_SCHED, "sched", sched_keys, sched),
	SEC(KVL_SEC_CONTROL, "control", control_keys, control),
	SEC(KVL_SEC_TELEMETRY, "telemetry", telemetry_keys, telemetry),
	SEC(KVL_SEC_EAL, "eal", eal_keys, eal),
	SEC(KVL_SEC_CLUSTER, "cluster", cluster_keys, cluster),
	MULTI(KVL_SEC_NIC, "nic", nic_keys, nics, n_nics, nic_origin, KVL_MAX_NICS),
	MULTI(KVL_SEC_SEGMENT, "segment", segment_keys, segments, n_segments, seg_origin,
	      KVL_MAX_SEG_CONF),
};
#undef SEC
#undef MULTI

_Static_assert(sizeof(nic_keys) / sizeof(nic_keys[0]) <= KVL_MAX_SECT_KEYS, "origin too small");
_Static_assert(sizeof(control_keys) / sizeof(control_keys[0]) <= KVL_MAX_SECT_KEYS,
	       "origin too small");

const char *kvl_cluster_role_name(int r)
{
	return r >= 0 && r <= KVL_CLUSTER_TIER ? role_names[r] : "?";
}

const char *kvl_idle_policy_name(int p)
{
	return p >= 0 && p <= KVL_IDLE_HYBRID ? idle_names[p] : "?";
}

const char *kvl_transport_name(int t)
{
	return t >= 0 && t <= KVL_TRANSPORT_TCP ? transport_names[t] : "?";
}

const char *kvl_tristate_name(int t)
{
	return t >= 0 && t <= KVL_TRI_AUTO ? tri_names[t] : "?";
}

const char *kvl_seg_access_name(int a)
{
	return a >= 0 && a <= KVL_ACCESS_READWRITE ? access_names[a] : "?";
}

const char *kvl_seg_fill_name(int f)
{
	return f >= 0 && f <= KVL_FILL_PATTERN ? fill_names[f] : "?";
}

const char *kvl_seg_memory_name(int m)
{
	return m >= 0 && m <= KVL_SEG_MEM_GPU ? seg_memory_names[m] : "?";
}

const char *kvl_staging_place_name(int p)
{
	return p >= 0 && p <= KVL_STAGING_GPU ? staging_names[p] : "?";
}

const char *kvl_tier_copy_name(int m)
{
	return m >= 0 && m <= KVL_TIER_COPY_EACH ? tier_copy_names[m] : "?";
}

/* ---- errors ---- */

static void add_error(struct kvl_conf_errors *errs, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static void add_error(struct kvl_conf_errors *errs, const char *fmt, ...)
{
	va_list ap;

	if (errs->count >= KVL_CONF_MAX_ERRORS) {
		errs->dropped++;
		return;
	}
	va_start(ap, fmt);
	vsnprintf(errs->msg[errs->count], KVL_CONF_MSG_LEN, fmt, ap);
	va_end(ap);
	errs->count++;
}

/* Edit distance, for "did you mean". Names are short; a stack row is plenty. */
static unsigned edit_distance(const char *a, const char *b)
{
	unsigned la = strlen(a), lb = strlen(b), row[64], i, j;

	if (la >= 63 || lb >= 63)
		return UINT_MAX;
	for (j = 0; j <= lb; j++)
		row[j] = j;
	for (i = 1; i <= la; i++) {
		unsigned diag = row[0], up;

		row[0] = i;
		for (j = 1; j <= lb; j++) {
			unsigned best;

			up = row[j];
			best = diag + (tolower((unsigned char)a[i - 1]) !=
				       tolower((unsigned char)b[j - 1]));
			if (up + 1 < best)
				best = up + 1;
			if (row[j - 1] + 1 < best)
				best = row[j - 1] + 1;
			row[j] = best;
			diag = up;
		}
	}
	return row[lb];
}

/* Close enough to be a typo of @cand: at most a third of the longer name, and at least 2. */
static bool near(const char *word, const char *cand, unsigned *best)
{
	unsigned d = edit_distance(word, cand), la = strlen(word), lb = strlen(cand);
	unsigned limit = (la > lb ? la : lb) / 3;

	if (limit < 2)
		limit = 2;
	if (d > limit || d >= *best)
		return false;
	*best = d;
	return true;
}

/* ---- value parsing: each returns NULL on success or what was expected ---- */

static const char *parse_u64(const char *v, uint64_t *out)
{
	char *end;
	int base = 10;

	if (v[0] == '0' && (v[1] == 'x' || v[1] == 'X')) {
		base = 16;
		v += 2;
	}
	if (v[0] == '\0' ||
	    v[strspn(v, base == 16 ? "0123456789abcdefABCDEF" : "0123456789")] != '\0')
		return "an integer";
	errno = 0;
	*out = strtoull(v, &end, base);
	if (errno || *end != '\0')
		return "an integer";
	return NULL;
}

static const char *parse_bool(const char *v, bool *out)
{
	static const char *const yes[] = { "true", "yes", "on", "1" };
	static const char *const no[] = { "false", "no", "off", "0" };

	for (unsigned i = 0; i < 4; i++) {
		if (strcasecmp(v, yes[i]) == 0) {
			*out = true;
			return NULL;
		}
		if (strcasecmp(v, no[i]) == 0) {
			*out = false;
			return NULL;
		}
	}
	return "true or false";
}

static bool name_char_ok(char c)
{
	return isalnum((unsigned char)c) || c == '_' || c == '-' || c == '.' || c == ':';
}

/* host:port, [v6]:port or name:port. Host syntax only: names are resolved at connect time. */
static bool addr_ok(const char *v, int64_t min_port, char *why, size_t whylen)
{
	char host[KVL_ADDR_LEN];
	const char *colon, *h = v, *p;
	size_t hl;
	uint64_t port;

	if (v[0] == '[') {
		const char *close = strchr(v, ']');

		if (close == NULL || close[1] != ':') {
			snprintf(why, whylen, "[ipv6]:port");
			return false;
		}
		h = v + 1;
		hl = close - h;
		p = close + 2;
	} else {
		colon = strrchr(v, ':');
		if (colon == NULL || strchr(v, ':') != colon) {
			snprintf(why, whylen,
				 "host:port (e.g. 10.0.0.2:18515; IPv6 as [addr]:port)");
			return false;
		}
		hl = colon - v;
		p = colon + 1;
	}
	if (hl == 0 || hl >= sizeof(host)) {
		snprintf(why, whylen, "host:port with a host before the ':'");
		return false;
	}
	memcpy(host, h, hl);
	host[hl] = '\0';
	if (parse_u64(p, &port) != NULL || (int64_t)port < min_port || port > 65535) {
		snprintf(why, whylen, "host:port with a port in %lld..65535", (long long)min_port);
		return false;
	}
	if (v[0] == '[') {
		struct in6_addr a6;

		if (inet_pton(AF_INET6, host, &a6) != 1) {
			snprintf(why, whylen, "a valid IPv6 address inside [ ]");
			return false;
		}
		return true;
	}
	if (strspn(host, "0123456789.") == hl) {
		struct in_addr a4;

		if (inet_pton(AF_INET, host, &a4) != 1) {
			snprintf(why, whylen, "a valid IPv4 address before the ':'");
			return false;
		}
		return true;
	}
	for (size_t i = 0; i < hl; i++) {
		if (!isalnum((unsigned char)host[i]) && host[i] != '-' && host[i] != '.') {
			snprintf(why, whylen, "a host name of letters, digits, '-' and '.'");
			return false;
		}
	}
	return true;
}

static void trim(char *s)
{
	size_t n = strlen(s), i = 0;

	while (n > 0 && isspace((unsigned char)s[n - 1]))
		s[--n] = '\0';
	while (isspace((unsigned char)s[i]))
		i++;
	memmove(s, s + i, n - i + 1);
}

static const char *parse_peers(const char *v, const struct key_def *k, struct kvl_control_conf *c,
			       char *why, size_t whylen)
{
	char buf[KVL_MAX_PEERS * KVL_ADDR_LEN], *save = NULL, *tok;
	unsigned n = c->n_peers; /* each peers line appends */

	if (strlen(v) >= sizeof(buf))
		return "a shorter list";
	strcpy(buf, v);
	trim(buf);
	if (buf[0] == '\0')
		return NULL;
	for (save = buf; (tok = strsep(&save, ",")) != NULL;) {
		trim(tok);
		if (tok[0] == '\0')
			return "a comma-separated list of host:port without empty entries";
		if (n == KVL_MAX_PEERS) {
			snprintf(why, whylen, "at most %d peers", KVL_MAX_PEERS);
			return why;
		}
		if (strlen(tok) >= KVL_ADDR_LEN || !addr_ok(tok, k->min, why, whylen))
			return why[0] ? why : "host:port";
		for (unsigned i = 0; i < n; i++) {
			if (strcmp(c->peers[i], tok) == 0) {
				snprintf(why, whylen, "each peer once (%s is listed twice)", tok);
				return why;
			}
		}
		strcpy(c->peers[n++], tok);
	}
	c->n_peers = n;
	return NULL;
}

/* etcd_endpoints: http(s)://host:port, comma-separated, each once; stored joined by ','. */
static const char *parse_urls(const char *v, const struct key_def *k, char *field, char *why,
			      size_t whylen)
{
	char buf[KVL_CLUSTER_ENDPOINTS_LEN], out[KVL_CLUSTER_ENDPOINTS_LEN], *save, *tok;
	size_t len = 0;
	unsigned n = 0;

	if (strlen(v) >= sizeof(buf))
		return "a shorter list";
	strcpy(buf, v);
	trim(buf);
	out[0] = '\0';
	if (buf[0] == '\0') {
		field[0] = '\0';
		return NULL;
	}
	for (save = buf; (tok = strsep(&save, ",")) != NULL;) {
		const char *hp;

		trim(tok);
		if (tok[0] == '\0')
			return "a comma-separated list of http://host:port without empty entries";
		if (strncmp(tok, "http://", 7) == 0)
			hp = tok + 7;
		else if (strncmp(tok, "https://", 8) == 0)
			hp = tok + 8;
		else
			return "etcd client URLs, each http://host:port or https://host:port";
		if (n == KVL_CLUSTER_MAX_ENDPOINTS) {
			snprintf(why, whylen, "at most %d endpoints", KVL_CLUSTER_MAX_ENDPOINTS);
			return why;
		}
		if (strlen(tok) >= KVL_CLUSTER_URL_LEN || strlen(hp) >= KVL_ADDR_LEN ||
		    !addr_ok(hp, k->min, why, whylen))
			return why[0] ? why : "http(s)://host:port";
		for (char *p = out; *p;) {
			size_t l = strcspn(p, ",");

			if (l == strlen(tok) && strncmp(p, tok, l) == 0) {
				snprintf(why, whylen, "each endpoint once (%s is listed twice)",
					 tok);
				return why;
			}
			p += l + (p[l] == ',');
		}
		len += (size_t)snprintf(out + len, sizeof(out) - len, "%s%s", n ? "," : "", tok);
		n++;
	}
	memcpy(field, out, len + 1);
	return NULL;
}

/* 1..@max hex digits at *@p; advances it. */
static int hex_field(const char **p, unsigned max, unsigned long *v)
{
	unsigned n = 0;

	*v = 0;
	while (isxdigit((unsigned char)**p) && n < max) {
		int c = tolower((unsigned char)**p);

		*v = *v * 16 + (unsigned long)(isdigit(c) ? c - '0' : c - 'a' + 10);
		(*p)++;
		n++;
	}
	return n > 0 && !isxdigit((unsigned char)**p) ? 0 : -EINVAL;
}

int kvl_pci_addr_normalize(const char *in, char *out, size_t cap)
{
	unsigned long f[3], dev, fn, domain = 0, bus;
	const char *p = in;
	unsigned nf = 0;
	int n;

	if (in == NULL)
		return -EINVAL;
	/* [domain:]bus:device.function: fields before the '.', colon-separated */
	for (;;) {
		if (nf == 3 || hex_field(&p, 8, &f[nf]) < 0)
			return -EINVAL;
		nf++;
		if (*p == ':') {
			p++;
			continue;
		}
		break;
	}
	if (*p != '.' || nf < 2)
		return -EINVAL;
	p++;
	if (hex_field(&p, 1, &fn) < 0 || *p != '\0')
		return -EINVAL;
	if (nf == 3)
		domain = f[0];
	bus = f[nf - 2];
	dev = f[nf - 1];
	if (bus > 0xff || dev > 0x1f || fn > 7 || domain > 0xffffffffUL)
		return -EINVAL;
	n = snprintf(out, cap, "%04lx:%02lx:%02lx.%lx", domain, bus, dev, fn);
	return n < 0 || (size_t)n >= cap ? -ENAMETOOLONG : 0;
}

/*
 * [nic.*] gpu: which GPU the NIC works with. Only the form is checked here; whether that GPU
 * exists is known at start, from sysfs (lcores/topo: kvl_pair_gpus).
 */
static const char *parse_gpu_sel(const char *value, const struct key_def *k, char *field, char *why,
				 size_t whylen)
{
	uint64_t u;

	if (strcasecmp(value, "auto") == 0 || strcasecmp(value, "none") == 0) {
		snprintf(field, k->size, "%s",
			 tolower((unsigned char)value[0]) == 'a' ? "auto" : "none");
		return NULL;
	}
	if (strchr(value, ':') == NULL) {
		if (parse_u64(value, &u) != NULL || u > (uint64_t)k->max)
			goto bad;
		snprintf(field, k->size, "%u", (unsigned)u);
		return NULL;
	}
	if (kvl_pci_addr_normalize(value, field, k->size) == 0)
		return NULL;
bad:
	snprintf(why, whylen,
		 "auto, none, a GPU index in 0..%lld (PCI-address order) or a PCI address "
		 "like 0000:3b:00.0",
		 (long long)k->max);
	return why;
}

/*
 * Store @value into the field of @k in @base. Returns NULL, or a description of what was
 * expected (possibly written into @why).
 */
static const char *set_value(const struct key_def *k, void *base, const char *value, char *why,
			     size_t whylen)
{
	char *field = (char *)base + k->off;
	uint64_t u;
	size_t len;

	why[0] = '\0';
	switch (k->type) {
	case KT_BOOL:
		return parse_bool(value, (bool *)field);
	case KT_TRI:
		if (strcasecmp(value, "auto") == 0) {
			*(int *)field = KVL_TRI_AUTO;
			return NULL;
		} else {
			bool b;

			if (parse_bool(value, &b) != NULL)
				return "true, false or auto";
			*(int *)field = b ? KVL_TRI_ON : KVL_TRI_OFF;
			return NULL;
		}
	case KT_ENUM:
		for (int i = 0; k->names[i]; i++) {
			if (strcasecmp(value, k->names[i]) == 0) {
				*(int *)field = i;
				return NULL;
			}
		}
		len = snprintf(why, whylen, "one of ");
		for (int i = 0; k->names[i] && len < whylen; i++)
			len += snprintf(why + len, whylen - len, "%s%s", i ? ", " : "",
					k->names[i]);
		return why;
	case KT_INT_AUTO:
	case KT_UINT:
		if (k->type == KT_INT_AUTO && strcasecmp(value, "auto") == 0) {
			*(int *)field = KVL_AUTO;
			return NULL;
		}
		if (parse_u64(value, &u) != NULL || (int64_t)u < k->min || (int64_t)u > k->max ||
		    u > INT32_MAX) {
			snprintf(why, whylen, "%s%s in %lld..%lld",
				 k->type == KT_INT_AUTO ? "auto or " : "",
				 k->flags & F_POW2 ? "a power of two" : "an integer",
				 (long long)k->min, (long long)k->max);
			return why;
		}
		if ((k->flags & F_POW2) && (u & (u - 1)) != 0) {
			snprintf(why, whylen, "a power of two in %lld..%lld", (long long)k->min,
				 (long long)k->max);
			return why;
		}
		if (k->type == KT_UINT)
			*(uint32_t *)field = (uint32_t)u;
		else
			*(int *)field = (int)u;
		return NULL;
	case KT_NAME:
		len = strlen(value);
		if (len < (size_t)k->min || len > (size_t)k->max) {
			snprintf(why, whylen, "a name of %lld..%lld characters", (long long)k->min,
				 (long long)k->max);
			return why;
		}
		for (size_t i = 0; i < len; i++)
			if (!name_char_ok(value[i]))
				return "a name of letters, digits, '_', '-', '.' and ':'";
		memcpy(field, value, len + 1);
		return NULL;
	case KT_ADDR:
		if (value[0] == '\0' && (k->flags & F_EMPTY_OFF)) {
			field[0] = '\0';
			return NULL;
		}
		if (strlen(value) >= k->size)
			return "a shorter address";
		if (value[0] == '\0' && k->def[0] == '\0') { /* optional: "" means unset */
			*(char *)field = '\0';
			return NULL;
		}
		if (!addr_ok(value, k->min, why, whylen))
			return why;
		strcpy(field, value);
		return NULL;
	case KT_ADDR_LIST:
		return parse_peers(value, k, (struct kvl_control_conf *)base, why, whylen);
	case KT_URL_LIST:
		return parse_urls(value, k, field, why, whylen);
	case KT_GPU_SEL:
		return parse_gpu_sel(value, k, field, why, whylen);
	case KT_LCORES:
		len = strlen(value);
		if (len > (size_t)k->max)
			return "a shorter lcore map";
		/* EAL's --lcores grammar: lcore sets, '@' and cpu sets, in ( ) and , - lists */
		for (size_t i = 0; i < len; i++)
			if (!isdigit((unsigned char)value[i]) && !strchr("@(),-", value[i]))
				return "an EAL --lcores map of digits, '@', '(', ')', ',' and '-' "
				       "(like 0@(0-1),1@1)";
		memcpy(field, value, len + 1);
		return NULL;
	case KT_ARGS:
		len = strlen(value);
		if (len > (size_t)k->max)
			return "shorter arguments";
		/* split on blanks, never through a shell: a quote would be taken literally */
		for (size_t i = 0; i < len; i++)
			if (!isprint((unsigned char)value[i]) || strchr("\"'\\;", value[i]))
				return "options separated by blanks, without quotes, '\\' or ';'";
		memcpy(field, value, len + 1);
		return NULL;
	case KT_PATH:
		len = strlen(value);
		if (len > (size_t)k->max)
			return "a shorter path";
		/* ';' could start an inline comment when the value is written back out. */
		for (size_t i = 0; i < len; i++)
			if (iscntrl((unsigned char)value[i]) || value[i] == ';')
				return "a path without control characters or ';'";
		memcpy(field, value, len + 1);
		return NULL;
	}
	return "a value";
}

/* Value of @k in @base as INI text. */
static void format_value(const struct key_def *k, const void *base, char *out, size_t outlen)
{
	const char *field = (const char *)base + k->off;

	switch (k->type) {
	case KT_BOOL:
		snprintf(out, outlen, "%s", *(const bool *)field ? "true" : "false");
		break;
	case KT_TRI:
		snprintf(out, outlen, "%s", kvl_tristate_name(*(const int *)field));
		break;
	case KT_ENUM:
		snprintf(out, outlen, "%s", k->names[*(const int *)field]);
		break;
	case KT_UINT:
		snprintf(out, outlen, "%u", *(const uint32_t *)field);
		break;
	case KT_INT_AUTO:
		if (*(const int *)field == KVL_AUTO)
			snprintf(out, outlen, "auto");
		else
			snprintf(out, outlen, "%d", *(const int *)field);
		break;
	case KT_NAME:
	case KT_ADDR:
	case KT_PATH:
	case KT_GPU_SEL:
	case KT_LCORES:
	case KT_ARGS:
	case KT_URL_LIST:
		snprintf(out, outlen, "%s", field);
		break;
	case KT_ADDR_LIST: {
		const struct kvl_control_conf *c = base;
		size_t len = 0;

		out[0] = '\0';
		for (unsigned i = 0; i < c->n_peers && len < outlen; i++)
			len += snprintf(out + len, outlen - len, "%s%s", i ? ", " : "",
					c->peers[i]);
		break;
	}
	}
}

/* The struct of section @sec (element @idx of a repeated one). */
static void *section_base(struct kvl_config *cfg, int sec, int idx)
{
	const struct section_def *sd = &sections[sec];

	return (char *)cfg + sd->off + (sd->multi ? (size_t)idx * sd->elem_size : 0);
}

static uint32_t *multi_count(struct kvl_config *cfg, int sec)
{
	return (uint32_t *)((char *)cfg + sections[sec].count_off);
}

static uint32_t multi_ccount(const struct kvl_config *cfg, int sec)
{
	return *multi_count((struct kvl_config *)cfg, sec);
}

static struct kvl_conf_origin *origin_of(struct kvl_config *cfg, int sec, int idx)
{
	if (sections[sec].multi)
		return (struct kvl_conf_origin *)((char *)cfg + sections[sec].origin_off) + idx;
	return &cfg->origin[sec];
}

static const struct kvl_conf_origin *corigin_of(const struct kvl_config *cfg, int sec, int idx)
{
	return origin_of((struct kvl_config *)cfg, sec, idx);
}

/* Repeated sections keep their label first: [nic.<label>], [segment.<label>]. */
static const char *label_of(const struct kvl_config *cfg, int sec, int idx)
{
	return (const char *)section_base((struct kvl_config *)cfg, sec, idx);
}

static const void *section_cbase(const struct kvl_config *cfg, int sec, int nic)
{
	return section_base((struct kvl_config *)cfg, sec, nic);
}

static void apply_defaults(void *base, int sec)
{
	char why[160];

	for (unsigned i = 0; i < sections[sec].n_keys; i++) {
		const struct key_def *k = &sections[sec].keys[i];

		if (k->flags & F_REQUIRED)
			continue;
		/* Defaults go through the same parser as the file: one path, checked at start. */
		if (set_value(k, base, k->def, why, sizeof(why)) != NULL)
			abort(); /* a broken schema table is a build bug, caught by every test */
	}
}

void kvl_config_defaults(struct kvl_config *cfg)
{
	memset(cfg, 0, sizeof(*cfg));
	for (int s = 0; s < KVL_SEC_COUNT; s++)
		if (!sections[s].multi)
			apply_defaults(section_base(cfg, s, 0), s);
}

/* ---- parsing ---- */

/* key_line of a value given with --set: it has no line in the file. */
#define LINE_SET UINT32_MAX

struct parse_ctx {
	struct kvl_config *cfg;
	struct kvl_conf_errors *errs;
	const char *file;
	/* input */
	FILE *fp;
	const char *text;
	/* position */
	unsigned line;
	bool bad_line; /* this line was already reported by the reader */
	bool indented; /* this line starts with white space */
	/* current section: -1 none yet, -2 invalid (its keys are skipped) */
	int sec;
	int idx;	       /* element of a repeated section */
	bool overriding;       /* applying --set: a key may replace what the file said */
	bool peers_overridden; /* --set control.peers replaces the file's list */
	char sec_name[KVL_LABEL_LEN + 8];
	bool key_seen; /* a key was set in the current section (inih continuation rule) */
	char last_key[64];
	unsigned last_key_line;
	int read_errno; /* fgets failed: a directory, an I/O error */
};

static int find_key(int sec, const char *name)
{
	for (unsigned i = 0; i < sections[sec].n_keys; i++)
		if (strcmp(sections[sec].keys[i].name, name) == 0)
			return (int)i;
	return -1;
}

static void suggest_section(char *out, size_t outlen, const char *name)
{
	unsigned best = UINT_MAX;
	const char *cand = NULL;

	out[0] = '\0';
	if (strncasecmp(name, "nic", 3) == 0 || strncasecmp(name, "port", 4) == 0 ||
	    strncasecmp(name, "rdma", 4) == 0) {
		snprintf(out, outlen, "; NIC sections are named [nic.<label>], e.g. [nic.rail0]");
		return;
	}
	if (strncasecmp(name, "seg", 3) == 0) {
		snprintf(out, outlen,
			 "; segment sections are named [segment.<label>], e.g. "
			 "[segment.kv0]");
		return;
	}
	for (int s = 0; s < KVL_SEC_COUNT; s++)
		if (!sections[s].multi && near(name, sections[s].name, &best))
			cand = sections[s].name;
	if (cand)
		snprintf(out, outlen, "; did you mean [%s]?", cand);
	else
		snprintf(
			out, outlen,
			"; sections are [runtime], [nic.<label>], [segment.<label>], "
			"[cq_moderation], [memory], [gpu], [sched], [control], [telemetry], [eal], "
			"[cluster]");
}

static bool label_ok(const char *l)
{
	size_t n = strlen(l);

	if (n == 0 || n >= KVL_LABEL_LEN)
		return false;
	for (size_t i = 0; i < n; i++)
		if (!isalnum((unsigned char)l[i]) && l[i] != '_')
			return false; /* telemetry names allow only [A-Za-z0-9_/] */
	return true;
}

static void start_section(struct parse_ctx *c, const char *name)
{
	char hint[160];

	c->key_seen = false;
	c->idx = -1;
	snprintf(c->sec_name, sizeof(c->sec_name), "%s", name);
	for (int sec = 0; sec < KVL_SEC_COUNT; sec++) {
		const struct section_def *sd = &sections[sec];
		size_t nl = strlen(sd->name);
		const char *noun = sec == KVL_SEC_NIC ? "NIC" : sd->name;
		struct kvl_config *cfg = c->cfg;
		uint32_t *count, i;
		const char *label;

		if (!sd->multi) {
			if (strcmp(name, sd->name) != 0)
				continue;
			c->sec = sec;
			if (cfg->origin[sec].section_line == 0)
				cfg->origin[sec].section_line = c->line;
			return;
		}
		if (strncmp(name, sd->name, nl) != 0 || name[nl] != '.')
			continue;
		label = name + nl + 1;
		if (!label_ok(label)) {
			add_error(c->errs,
				  "%s:%u: [%s]: bad %s label \"%s\"; expected 1..%d letters, "
				  "digits or "
				  "'_' after \"%s.\"",
				  c->file, c->line, name, noun, label, KVL_LABEL_LEN - 1, sd->name);
			c->sec = -2;
			return;
		}
		count = multi_count(cfg, sec);
		for (i = 0; i < *count; i++)
			if (strcmp(label_of(cfg, sec, (int)i), label) == 0)
				break; /* reopened: keys merge, duplicates are still caught */
		if (i == *count) {
			if (*count == sd->max) {
				add_error(c->errs, "%s:%u: [%s]: too many %s sections; at most %u",
					  c->file, c->line, name, noun, sd->max);
				c->sec = -2;
				return;
			}
			apply_defaults(section_base(cfg, sec, (int)i), sec);
			memcpy(section_base(cfg, sec, (int)i), label, strlen(label) + 1);
			origin_of(cfg, sec, (int)i)->section_line = c->line;
			(*count)++;
		}
		c->sec = sec;
		c->idx = (int)i;
		return;
	}
	suggest_section(hint, sizeof(hint), name);
	add_error(c->errs, "%s:%u: [%s]: unknown section%s", c->file, c->line, name, hint);
	c->sec = -2;
}

/* The reader sees raw lines: it counts them, reports what inih would only count, and tracks
 * sections itself so that empty sections are validated too. */
static void inspect_line(struct parse_ctx *c, char *raw)
{
	char line[512], *s;
	size_t n;

	snprintf(line, sizeof(line), "%s", raw);
	if (c->line == 1 && (unsigned char)line[0] == 0xEF && (unsigned char)line[1] == 0xBB &&
	    (unsigned char)line[2] == 0xBF)
		memmove(line, line + 3, strlen(line + 3) + 1);
	c->indented = line[0] == ' ' || line[0] == '\t';
	s = line;
	while (isspace((unsigned char)*s))
		s++;
	n = strlen(s);
	while (n > 0 && isspace((unsigned char)s[n - 1]))
		s[--n] = '\0';
	if (n == 0 || s[0] == ';' || s[0] == '#')
		return;
	if (c->indented && c->key_seen)
		return; /* a continuation line: the handler reports it */
	if (s[0] == '[') {
		char *close = strchr(s, ']');

		if (close == NULL) {
			add_error(c->errs, "%s:%u: section header \"%s\" is missing its ']'",
				  c->file, c->line, s);
			c->bad_line = true;
			c->sec = -2;
			c->key_seen = false;
			return;
		}
		*close = '\0';
		trim(s + 1);
		start_section(c, s + 1);
		return;
	}
	if (strpbrk(s, "=:") == NULL) {
		add_error(c->errs,
			  "%s:%u: expected \"[section]\" or \"key = value\", got \"%.60s\"",
			  c->file, c->line, s);
		c->bad_line = true;
	}
}

static char *reader(char *str, int num, void *stream)
{
	struct parse_ctx *c = stream;
	size_t n, nul_at = 0;
	bool nul = false;

	if (c->fp) {
		/* fgets would hide a NUL byte: the line would end there, silently
		 * ("name = good\0evil" loading "good"). */
		int ch = 0;

		n = 0;
		while (n < (size_t)num - 1 && (ch = fgetc(c->fp)) != EOF) {
			if (ch == '\0' && !nul) {
				nul = true;
				nul_at = n + 1;
			}
			str[n++] = ch == '\0' ? ' ' : (char)ch;
			if (ch == '\n')
				break;
		}
		str[n] = '\0';
		if (n == 0) {
			if (ferror(c->fp))
				c->read_errno = errno ? errno : EIO;
			return NULL;
		}
	} else {
		const char *nl;

		if (*c->text == '\0')
			return NULL;
		nl = strchr(c->text, '\n');
		n = nl ? (size_t)(nl - c->text + 1) : strlen(c->text);
		if (n > (size_t)num - 1)
			n = (size_t)num - 1;
		memcpy(str, c->text, n);
		str[n] = '\0';
		c->text += n;
	}
	c->line++;
	c->bad_line = false;
	if (nul) {
		add_error(c->errs,
			  "%s:%u: a NUL byte at column %zu: an INI file is text (is this a binary "
			  "file?)",
			  c->file, c->line, nul_at);
		str[0] = '\n';
		str[1] = '\0';
		return str;
	}
	n = strlen(str);
	if (n == (size_t)num - 1 && str[n - 1] != '\n') {
		/* Longer than inih's line buffer: swallow the rest so line numbers stay true. */
		int ch = 0;

		if (c->fp) {
			while ((ch = fgetc(c->fp)) != EOF && ch != '\n')
				;
		} else {
			while (*c->text && *c->text != '\n')
				c->text++;
			if (*c->text == '\n')
				c->text++;
		}
		add_error(c->errs, "%s:%u: line longer than %d characters", c->file, c->line,
			  num - 2);
		str[0] = '\n';
		str[1] = '\0';
		return str;
	}
	inspect_line(c, str);
	if (c->bad_line) {
		str[0] = '\n';
		str[1] = '\0';
	}
	return str;
}

/* Where else a key of this name lives, for a key put in the wrong section. */
static const char *home_of(const char *name)
{
	static char buf[KVL_SEC_COUNT][24];

	for (int s = 0; s < KVL_SEC_COUNT; s++) {
		if (find_key(s, name) < 0)
			continue;
		if (!sections[s].multi)
			return sections[s].name;
		snprintf(buf[s], sizeof(buf[s]), "%s.<label>", sections[s].name);
		return buf[s];
	}
	return NULL;
}

static void unknown_key(struct parse_ctx *c, const char *name)
{
	const struct section_def *sd = &sections[c->sec];
	const char *cand = NULL, *home = home_of(name);
	unsigned best = UINT_MAX;

	for (unsigned i = 0; i < sd->n_keys; i++)
		if (near(name, sd->keys[i].name, &best))
			cand = sd->keys[i].name;
	if (cand)
		add_error(c->errs, "%s:%u: %s.%s: unknown key in [%s]; did you mean \"%s\"?",
			  c->file, c->line, c->sec_name, name, c->sec_name, cand);
	else if (home)
		add_error(c->errs, "%s:%u: %s.%s: unknown key in [%s]; \"%s\" belongs in [%s]",
			  c->file, c->line, c->sec_name, name, c->sec_name, name, home);
	else
		add_error(c->errs, "%s:%u: %s.%s: unknown key in [%s]", c->file, c->line,
			  c->sec_name, name, c->sec_name);
}

/* A relative path in the file is relative to the file's folder, as an operator expects; one
 * given with --set, to the working directory. Either is stored absolute, so that what
 * --print-config writes means the same wherever it is loaded from. */
static const char *resolve_path(const struct parse_ctx *c, char *field, size_t size)
{
	const char *slash = c->overriding ? NULL : strrchr(c->file, '/');
	char dir[KVL_PATH_LEN], abs_dir[PATH_MAX], out[KVL_PATH_LEN];
	int n;

	if (field[0] == '\0' || field[0] == '/')
		return NULL;
	if (slash)
		snprintf(dir, sizeof(dir), "%.*s", (int)(slash - c->file), c->file);
	else
		snprintf(dir, sizeof(dir), ".");
	if (slash == c->file)
		snprintf(abs_dir, sizeof(abs_dir), "/");
	else if (realpath(dir, abs_dir) == NULL)
		return "a path whose folder exists (it is taken relative to the INI file's folder)";
	n = snprintf(out, sizeof(out), "%s/%s", strcmp(abs_dir, "/") ? abs_dir : "", field);
	if (n < 0 || (size_t)n >= size)
		return "a shorter path (it is taken relative to the INI file's folder)";
	memcpy(field, out, (size_t)n + 1);
	return NULL;
}

static int handler(void *user, const char *section, const char *name, const char *value)
{
	struct parse_ctx *c = user;
	struct kvl_conf_origin *org;
	const struct key_def *k;
	char why[200], val[512];
	const char *bad;
	size_t vl;
	int ki;

	(void)section; /* tracked by the reader, which also sees empty sections */
	if (name[0] == '\0') {
		add_error(c->errs, "%s:%u: expected \"key = value\", got no key before the '='",
			  c->file, c->line);
		return 1;
	}
	if (c->indented && c->key_seen && strcmp(name, c->last_key) == 0 &&
	    c->last_key_line != c->line) {
		add_error(c->errs,
			  "%s:%u: %s.%s: continuation lines are not supported; put the whole value "
			  "on one line",
			  c->file, c->line, c->sec_name, name);
		return 1;
	}
	if (c->sec == -2)
		return 1; /* already reported: the section itself is wrong */
	if (c->sec == -1) {
		const char *home = home_of(name);

		add_error(c->errs, "%s:%u: %s: key outside any section; put it under [%s]", c->file,
			  c->line, name, home ? home : "runtime");
		return 1;
	}
	c->key_seen = true;
	snprintf(c->last_key, sizeof(c->last_key), "%s", name);
	c->last_key_line = c->line;
	ki = find_key(c->sec, name);
	if (ki < 0) {
		unknown_key(c, name);
		return 1;
	}
	k = &sections[c->sec].keys[ki];
	org = origin_of(c->cfg, c->sec, c->idx);
	if (org->key_line[ki] != 0 && !(k->flags & F_APPEND) && !c->overriding) {
		add_error(c->errs, "%s:%u: %s.%s: set twice (first at line %u)", c->file, c->line,
			  c->sec_name, name, org->key_line[ki]);
		return 1;
	}
	if (c->overriding && k->type == KT_ADDR_LIST && !c->peers_overridden) {
		c->cfg->control.n_peers = 0; /* --set control.peers replaces the file's list */
		c->peers_overridden = true;
	}
	org->key_line[ki] = c->overriding ? LINE_SET : c->line;
	/* Quotes are optional around any value. */
	snprintf(val, sizeof(val), "%s", value);
	vl = strlen(val);
	if (vl >= 2 && val[0] == '"' && val[vl - 1] == '"') {
		memmove(val, val + 1, vl - 2);
		val[vl - 2] = '\0';
	}
	bad = set_value(k, section_base(c->cfg, c->sec, c->idx), val, why, sizeof(why));
	if (bad == NULL && k->type == KT_PATH)
		bad = resolve_path(c, (char *)section_base(c->cfg, c->sec, c->idx) + k->off,
				   k->size);
	if (bad)
		add_error(c->errs, "%s:%u: %s.%s: expected %s; got \"%.80s\"", c->file, c->line,
			  c->sec_name, name, bad, val);
	return 1;
}

/* Line to blame for a cross-key problem: the key's own line if set, else its section's. */
static unsigned key_line(const struct kvl_config *cfg, int sec, int idx, const char *key)
{
	const struct kvl_conf_origin *org = corigin_of(cfg, sec, idx);
	int ki = find_key(sec, key);

	if (ki >= 0 && org->key_line[ki] && org->key_line[ki] != LINE_SET)
		return org->key_line[ki];
	return org->section_line;
}

unsigned kvl_config_key_line(const struct kvl_config *cfg, int sec, unsigned idx, const char *key)
{
	if (sec < 0 || sec >= KVL_SEC_COUNT ||
	    (sections[sec].multi && idx >= multi_ccount(cfg, sec)))
		return 0;
	return key_line(cfg, sec, (int)idx, key);
}

static bool key_set(const struct kvl_config *cfg, int sec, int idx, const char *key)
{
	const struct kvl_conf_origin *org = corigin_of(cfg, sec, idx);
	int ki = find_key(sec, key);

	return ki >= 0 && org->key_line[ki] != 0;
}

/*
 * With a [memory] pool, the INI's [segment.*] and every NIC lcore's staging are carved from
 * it at start, each rounded up to whole chunks: a pool too small for them is found here, not
 * halfway through start-up. (kvl_seg_alloc() takes what is left, at run time.)
 */
static void validate_pool_fits(const struct kvl_config *cfg, const char *file,
			       struct kvl_conf_errors *errs)
{
	uint64_t chunk = (uint64_t)cfg->memory.chunk_size_kb << 10;
	uint64_t pool = (uint64_t)cfg->memory.pool_size_mb << 20;
	uint64_t segs = 0, staging = 0, stage_one, unit;
	bool tcp = false, in_vram;
	unsigned n_stage;

	/* Staging in VRAM takes nothing of the pool: staging = gpu, or auto with the GPU on and
	 * no NIC that is or may become tcp (transport = auto falls back to it without an RDMA
	 * device; runtime/staging.c then resolves auto to host memory). */
	for (unsigned i = 0; i < cfg->n_nics; i++)
		tcp = tcp || cfg->nics[i].transport == KVL_TRANSPORT_TCP ||
		      cfg->nics[i].transport == KVL_TRANSPORT_AUTO;
	in_vram = cfg->sched.staging == KVL_STAGING_GPU ||
		  (cfg->sched.staging == KVL_STAGING_AUTO && cfg->gpu.enable && !tcp);
	n_stage = cfg->sched.staging_mb > 0 && !in_vram ? cfg->n_nics : 0;

	for (uint32_t i = 0; i < cfg->n_segments; i++) {
		const struct kvl_segment_conf *g = &cfg->segments[i];
		uint64_t len = (uint64_t)g->layers * g->planes * g->blocks * g->block_bytes;

		segs += (len + chunk - 1) / chunk * chunk;
	}
	if (n_stage > 0) {
		uint64_t slot = (uint64_t)cfg->sched.slot_kb << 10;

		stage_one = ((uint64_t)cfg->sched.staging_mb << 20) / slot * slot;
		stage_one = (stage_one + chunk - 1) / chunk * chunk;
		staging = stage_one * cfg->n_nics;
	}
	if (segs + staging <= pool)
		return;
	/* the smallest pool_size_mb that holds them and is a whole number of chunks */
	unit = chunk > (1u << 20) ? chunk : (1u << 20);
	add_error(errs,
		  "%s:%u: memory.pool_size_mb: %u MiB cannot hold %u [segment.*] (%llu MiB) + "
		  "sched.staging_mb on %u NIC%s (%llu MiB) = %llu MiB in %u KiB chunks; raise it "
		  "to at least %llu, or 0 to take them from DPDK memory",
		  file, key_line(cfg, KVL_SEC_MEMORY, 0, "pool_size_mb"), cfg->memory.pool_size_mb,
		  cfg->n_segments, (unsigned long long)(segs >> 20), n_stage,
		  n_stage == 1 ? "" : "s", (unsigned long long)(staging >> 20),
		  (unsigned long long)((segs + staging) >> 20), cfg->memory.chunk_size_kb,
		  (unsigned long long)((segs + staging + unit - 1) / unit * unit >> 20));
}

/* ---- [eal] (issue 17) ---- */
/*
 * What EAL itself would refuse, found at the INI's line: --in-memory with --no-huge, and an
 * option in extra_args that has a key of its own (said twice, EAL keeps one silently) or "--"
 * (it would end EAL's arguments there).
 */
static void validate_eal(const struct kvl_config *cfg, const char *file,
			 struct kvl_conf_errors *errs)
{
	static const struct {
		const char *opt, *key;
	} own[] = { { "-l", "lcores" },
		    { "--lcores", "lcores" },
		    { "-m", "memory_mb" },
		    { "--file-prefix", "file_prefix" },
		    { "--in-memory", "in_memory" },
		    { "--no-huge", "no_huge" },
		    { "--no-pci", "no_pci" },
		    { "--", NULL } };
	const struct kvl_eal_conf *e = &cfg->eal;
	char args[KVL_EAL_ARGS_LEN], *save = NULL;

	if (e->in_memory && e->no_huge)
		add_error(errs,
			  "%s:%u: eal.no_huge: EAL cannot combine --no-huge with --in-memory "
			  "(eal.in_memory = true); without hugepages set no_huge alone",
			  file, key_line(cfg, KVL_SEC_EAL, 0, "no_huge"));
	snprintf(args, sizeof(args), "%s", e->extra_args);
	for (char *t = strtok_r(args, " \t", &save); t; t = strtok_r(NULL, " \t", &save))
		for (unsigned i = 0; i < sizeof(own) / sizeof(own[0]); i++) {
			size_t n = strlen(own[i].opt);

			/* "--opt", "--opt=v"; "-l0-1" and "-m256" glue their values on */
			if (strncmp(t, own[i].opt, n) != 0 ||
			    (t[n] != '\0' && t[n] != '=' && !(own[i].opt[1] != '-' && own[i].key)))
				continue;
			if (own[i].key)
				add_error(errs,
					  "%s:%u: eal.extra_args: %s has its own key, eal.%s: "
					  "set it there",
					  file, key_line(cfg, KVL_SEC_EAL, 0, "extra_args"), t,
					  own[i].key);
			else
				add_error(
					errs,
					"%s:%u: eal.extra_args: \"--\" would end EAL's arguments; "
					"kvlane's own settings are INI keys",
					file, key_line(cfg, KVL_SEC_EAL, 0, "extra_args"));
			break;
		}
}
/* ---- end [eal] ---- */

/* ---- [cluster] (issue 19) ---- */
/* Two [cluster] keys set both or neither: the error is on the one missing. */
static void together(const struct kvl_config *cfg, const char *file, struct kvl_conf_errors *errs,
		     const char *ka, const char *va, const char *kb, const char *vb,
		     const char *why)
{
	const char *k = va[0] ? kb : ka;

	if ((va[0] == '\0') == (vb[0] == '\0'))
		return;
	add_error(errs, "%s:%u: cluster.%s: %s and %s go together (%s)", file,
		  key_line(cfg, KVL_SEC_CLUSTER, 0, k), k, ka, kb, why);
}

static void validate_cluster(const struct kvl_config *cfg, const char *file,
			     struct kvl_conf_errors *errs)
{
	const struct kvl_cluster_conf *cl = &cfg->cluster;
	const char *p = cl->prefix;
	size_t pl = strlen(p);

	if (cl->etcd_endpoints[0] == '\0')
		return; /* off: the other keys are not read */
	if (cfg->control.secret_file[0] == '\0')
		add_error(errs,
			  "%s:%u: cluster.etcd_endpoints: a cluster node needs control.secret_file "
			  "(peers found by name are reached over the authenticated control path)",
			  file, key_line(cfg, KVL_SEC_CLUSTER, 0, "etcd_endpoints"));
	if (pl > 0 && (p[0] != '/' || p[pl - 1] == '/' || strstr(p, "//") != NULL ||
		       strpbrk(p, " \t") != NULL))
		add_error(
			errs,
			"%s:%u: cluster.prefix: expected an etcd key prefix that starts with '/', "
			"has no empty part, no blank and no trailing '/'; got \"%s\"",
			file, key_line(cfg, KVL_SEC_CLUSTER, 0, "prefix"), p);
	together(cfg, file, errs, "tls_cert_file", cl->tls_cert_file, "tls_key_file",
		 cl->tls_key_file, "a client certificate needs its key");
	if ((cl->tls_ca_file[0] || cl->tls_cert_file[0]) &&
	    strstr(cl->etcd_endpoints, "https://") == NULL)
		add_error(errs,
			  "%s:%u: cluster.etcd_endpoints: TLS files are set but no endpoint is "
			  "https://",
			  file, key_line(cfg, KVL_SEC_CLUSTER, 0, "etcd_endpoints"));
	together(cfg, file, errs, "user", cl->user, "password_file", cl->password_file,
		 "etcd authentication needs both");
}
/* ---- end [cluster] ---- */

static void validate(struct kvl_config *cfg, const char *file, struct kvl_conf_errors *errs)
{
	const struct kvl_cq_moderation_conf *cq = &cfg->cq_moderation;
	const struct kvl_control_conf *ctl = &cfg->control;
	uint64_t pool_kb = (uint64_t)cfg->memory.pool_size_mb * 1024;

	for (int sec = 0; sec < KVL_SEC_COUNT; sec++) {
		if (!sections[sec].multi)
			continue;
		for (uint32_t i = 0; i < multi_ccount(cfg, sec); i++) {
			const struct kvl_conf_origin *org = corigin_of(cfg, sec, (int)i);

			for (unsigned j = 0; j < sections[sec].n_keys; j++)
				if ((sections[sec].keys[j].flags & F_REQUIRED) &&
				    org->key_line[j] == 0)
					add_error(errs, "%s:%u: %s.%s.%s: required key missing",
						  file, org->section_line, sections[sec].name,
						  label_of(cfg, sec, (int)i),
						  sections[sec].keys[j].name);
		}
	}
	for (uint32_t i = 0; i < cfg->n_segments; i++) {
		const struct kvl_segment_conf *g = &cfg->segments[i];
		uint64_t total;

		/* Each key is in range, their product may not be: 1024 x 2 x 2^24 x 2^30 = 2^65. */
		if (kvl_seg_bytes(g->layers, g->planes, g->blocks, g->block_bytes, &total) != 0)
			add_error(
				errs,
				"%s:%u: segment.%s: layers x planes x blocks x block_bytes = %u x "
				"%u x %u x %u overflows 64 bits; at most 1 TiB per segment",
				file, cfg->seg_origin[i].section_line, g->label, g->layers,
				g->planes, g->blocks, g->block_bytes);
		else if (total > (1ull << 40))
			add_error(
				errs,
				"%s:%u: segment.%s: layers x planes x blocks x block_bytes = %llu "
				"bytes; at most 1 TiB per segment",
				file, cfg->seg_origin[i].section_line, g->label,
				(unsigned long long)total);
		/* gpu = N (not the default) next to memory = host: memory = gpu was forgotten */
		if (g->memory != KVL_SEG_MEM_GPU && g->gpu != 0)
			add_error(errs,
				  "%s:%u: segment.%s.gpu: applies only to memory = gpu, but memory "
				  "= host; set memory = gpu or remove gpu",
				  file, key_line(cfg, KVL_SEC_SEGMENT, (int)i, "gpu"), g->label);
		if (g->memory == KVL_SEG_MEM_GPU && cfg->gpu.enable && g->gpu != cfg->gpu.device_id)
			add_error(errs,
				  "%s:%u: segment.%s.gpu: GPU %u is not the runtime's GPU "
				  "(gpu.device_id = %u): its NICs and staging pair with that one",
				  file, key_line(cfg, KVL_SEC_SEGMENT, (int)i, "gpu"), g->label,
				  g->gpu, cfg->gpu.device_id);
	}
	if (ctl->n_peers > 0 && ctl->secret_file[0] == '\0')
		add_error(errs,
			  "%s:%u: control.peers: peers need control.secret_file (the shared secret "
			  "that authenticates them)",
			  file, key_line(cfg, KVL_SEC_CONTROL, 0, "peers"));
	if (cfg->n_nics == 0)
		add_error(errs,
			  "%s:%u: nic: no [nic.<label>] section; at least one NIC is needed "
			  "(for loopback: [nic.lo] with device = lo and transport = tcp)",
			  file, 1u);

	{
		/* A peer holds at most KVL_CONF_MAX_PEER_CONNS data connections over all NICs:
		 * more would fail every connect with "no room", long after start-up. */
		uint32_t sum = 0;

		for (unsigned i = 0; i < cfg->n_nics; i++) {
			sum += cfg->nics[i].qp_count;
			if (sum > KVL_CONF_MAX_PEER_CONNS) {
				add_error(
					errs,
					"%s:%u: nic.%s.qp_count: %u data connections per peer over "
					"the NICs so far; a peer holds at most %u: lower qp_count",
					file, key_line(cfg, KVL_SEC_NIC, (int)i, "qp_count"),
					cfg->nics[i].label, sum, KVL_CONF_MAX_PEER_CONNS);
				break;
			}
		}
	}
	for (unsigned i = 0; i < cfg->n_nics; i++) {
		const struct kvl_nic_conf *n = &cfg->nics[i];

		for (unsigned j = 0; j < sections[KVL_SEC_NIC].n_keys; j++) {
			const struct key_def *k = &nic_keys[j];

			if ((k->flags & F_RDMA_ONLY) && n->transport == KVL_TRANSPORT_TCP &&
			    cfg->nic_origin[i].key_line[j] != 0)
				add_error(
					errs,
					"%s:%u: nic.%s.%s: applies only to RDMA transports, but "
					"transport = tcp; remove it or choose auto, verbs or mlx5",
					file, cfg->nic_origin[i].key_line[j], n->label, k->name);
		}
		if (n->device[0] == '\0')
			continue;
		for (unsigned j = 0; j < i; j++) {
			if (strcmp(cfg->nics[j].device, n->device) == 0 &&
			    cfg->nics[j].port == n->port) {
				add_error(errs,
					  "%s:%u: nic.%s.device: %s port %u is already used by "
					  "[nic.%s] (%s:%u); one lcore owns a port",
					  file, key_line(cfg, KVL_SEC_NIC, i, "device"), n->label,
					  n->device, n->port, cfg->nics[j].label, file,
					  key_line(cfg, KVL_SEC_NIC, j, "device"));
				break;
			}
		}
		if (cq->signal_every > n->queue_depth) {
			/* Blame whichever of the two keys the file set (signal_every if both). */
			bool blame_q = !key_set(cfg, KVL_SEC_CQ_MODERATION, 0, "signal_every");

			if (blame_q)
				add_error(errs,
					  "%s:%u: nic.%s.queue_depth: %u is smaller than "
					  "cq_moderation.signal_every = %u; the queue would fill "
					  "before a signaled WQE frees it",
					  file, key_line(cfg, KVL_SEC_NIC, i, "queue_depth"),
					  n->label, n->queue_depth, cq->signal_every);
			else
				add_error(errs,
					  "%s:%u: cq_moderation.signal_every: %u is larger than "
					  "nic.%s.queue_depth = %u (%s:%u); the queue would fill "
					  "before a signaled WQE frees it",
					  file,
					  key_line(cfg, KVL_SEC_CQ_MODERATION, 0, "signal_every"),
					  cq->signal_every, n->label, n->queue_depth, file,
					  key_line(cfg, KVL_SEC_NIC, i, "queue_depth"));
		}
	}

	if (pool_kb == 0) {
		/* no pool: segments and staging come from DPDK memory, as before [memory] */
	} else if (cfg->memory.chunk_size_kb > pool_kb ||
		   pool_kb % cfg->memory.chunk_size_kb != 0) {
		bool blame_chunk = key_set(cfg, KVL_SEC_MEMORY, 0, "chunk_size_kb");

		add_error(errs,
			  "%s:%u: memory.%s: pool_size_mb = %u MiB is not a whole number of "
			  "chunk_size_kb = %u KiB chunks",
			  file,
			  key_line(cfg, KVL_SEC_MEMORY, 0,
				   blame_chunk ? "chunk_size_kb" : "pool_size_mb"),
			  blame_chunk ? "chunk_size_kb" : "pool_size_mb", cfg->memory.pool_size_mb,
			  cfg->memory.chunk_size_kb);
	} else {
		validate_pool_fits(cfg, file, errs);
	}
	validate_eal(cfg, file, errs);
	validate_cluster(cfg, file, errs);
	if ((uint64_t)cfg->sched.window_min_kb > (uint64_t)cfg->sched.window_max_mb * 1024) {
		bool blame_min = key_set(cfg, KVL_SEC_SCHED, 0, "window_min_kb");
		const char *key = blame_min ? "window_min_kb" : "window_max_mb";

		add_error(errs,
			  "%s:%u: sched.%s: window_min_kb = %u KiB exceeds window_max_mb = %u MiB",
			  file, key_line(cfg, KVL_SEC_SCHED, 0, key), key, cfg->sched.window_min_kb,
			  cfg->sched.window_max_mb);
	}
	/* The null transport moves nothing: a file copied from a benchmark must not silently
	 * serve empty KV, so it needs a second key that says so. */
	if (cfg->sched.null_transport && !cfg->sched.null_transport_ack)
		add_error(errs,
			  "%s:%u: sched.null_transport: true completes every transfer at once and "
			  "moves no data (for measuring kvlane's own cost); set "
			  "sched.null_transport_ack = true as well to run it",
			  file, key_line(cfg, KVL_SEC_SCHED, 0, "null_transport"));
	if (cfg->sched.staging_mb > 0 &&
	    (uint64_t)cfg->sched.slot_kb > (uint64_t)cfg->sched.staging_mb * 1024)
		add_error(errs, "%s:%u: sched.slot_kb: %u KiB is larger than staging_mb = %u MiB",
			  file, key_line(cfg, KVL_SEC_SCHED, 0, "slot_kb"), cfg->sched.slot_kb,
			  cfg->sched.staging_mb);
	if (cfg->sched.staging == KVL_STAGING_GPU && !cfg->gpu.enable)
		add_error(errs,
			  "%s:%u: sched.staging: gpu needs gpu.enable = true (staging lives in "
			  "that GPU's VRAM); set [gpu] enable = true, or staging = auto or host",
			  file, key_line(cfg, KVL_SEC_SCHED, 0, "staging"));
	/* PULLs land in staging through the NIC; over tcp that takes its pinned bounce buffers,
	 * carved from the [memory] pool (runtime/tcp_vram.c). A NIC resolved to tcp at start-up
	 * without them is refused there. */
	/* With the host tier, VRAM staging is what the tier lands in by the copy engine; a tcp
	 * peer's PULL into it without the pool fails with gpu-memory, typed. */
	for (unsigned i = 0; i < cfg->n_nics && cfg->sched.staging == KVL_STAGING_GPU &&
			     cfg->sched.staging_mb > 0 && !cfg->sched.null_transport &&
			     !cfg->sched.tier && cfg->memory.pool_size_mb == 0;
	     i++)
		if (cfg->nics[i].transport == KVL_TRANSPORT_TCP)
			add_error(errs,
				  "%s:%u: sched.staging: gpu, but nic.%s has transport = tcp "
				  "(%s:%u), which cannot land bytes in VRAM yet without its bounce "
				  "buffers, carved from the [memory] pool: set memory.pool_size_mb "
				  "> 0, or use staging = host (or auto) with tcp NICs",
				  file, key_line(cfg, KVL_SEC_SCHED, 0, "staging"),
				  cfg->nics[i].label, file,
				  key_line(cfg, KVL_SEC_NIC, i, "transport"));
	if (cfg->sched.tier && cfg->sched.staging_mb == 0)
		add_error(errs,
			  "%s:%u: sched.tier: true needs a scheduler to serve it: set "
			  "sched.staging_mb > 0 (the tier's blocks land in that staging)",
			  file, key_line(cfg, KVL_SEC_SCHED, 0, "tier"));
	if (cfg->sched.tier && cfg->sched.staging == KVL_STAGING_GPU &&
	    cfg->memory.pool_size_mb == 0)
		add_error(errs,
			  "%s:%u: sched.tier: true with staging = gpu needs the [memory] pool "
			  "(memory.pool_size_mb > 0): the copy engine reads only memory pinned for "
			  "CUDA, and the tier's segments are carved from the pool",
			  file, key_line(cfg, KVL_SEC_SCHED, 0, "tier"));
	if (cfg->gpu.gpudirect == KVL_TRI_ON && !cfg->gpu.enable)
		add_error(errs,
			  "%s:%u: gpu.gpudirect: true needs gpu.enable = true; set enable, or "
			  "gpudirect = auto",
			  file, key_line(cfg, KVL_SEC_GPU, 0, "gpudirect"));
	if ((uint64_t)ctl->peer_timeout_ms < 2ull * ctl->heartbeat_interval_ms) {
		bool blame_t = key_set(cfg, KVL_SEC_CONTROL, 0, "peer_timeout_ms");
		const char *key = blame_t ? "peer_timeout_ms" : "heartbeat_interval_ms";

		add_error(errs,
			  "%s:%u: control.%s: peer_timeout_ms = %u must be at least twice "
			  "heartbeat_interval_ms = %u, or one late heartbeat kills a live peer",
			  file, key_line(cfg, KVL_SEC_CONTROL, 0, key), key, ctl->peer_timeout_ms,
			  ctl->heartbeat_interval_ms);
	}
}

/* --set section.key=value, applied after the file as if it were its section's last line. */
static void apply_set(struct parse_ctx *c, const char *set, unsigned n)
{
	const char *eq = strchr(set, '='), *dot;
	char sec[KVL_LABEL_LEN + 16], key[64], val[512];

	c->file = "--set";
	c->line = n;
	c->overriding = true;
	c->key_seen = false;
	c->indented = false;
	dot = eq ? memrchr(set, '.', (size_t)(eq - set)) : NULL;
	if (eq == NULL || dot == NULL || dot == set || dot + 1 == eq ||
	    (size_t)(dot - set) >= sizeof(sec) || (size_t)(eq - dot - 1) >= sizeof(key)) {
		add_error(c->errs, "--set:%u: expected section.key=value, got \"%.80s\"", n, set);
		return;
	}
	snprintf(sec, sizeof(sec), "%.*s", (int)(dot - set), set);
	snprintf(key, sizeof(key), "%.*s", (int)(eq - dot - 1), dot + 1);
	snprintf(val, sizeof(val), "%s", eq + 1);
	trim(key);
	trim(val);
	start_section(c, sec);
	if (c->sec >= 0)
		handler(c, sec, key, val);
}

static int load(struct parse_ctx *c, struct kvl_config *cfg, const char *path,
		const char *const *sets, unsigned n_sets)
{
	int rc;

	kvl_config_defaults(cfg);
	snprintf(cfg->path, sizeof(cfg->path), "%s", path);
	c->cfg = cfg;
	c->sec = -1;
	c->idx = -1;
	rc = ini_parse_stream(reader, c, handler, c);
	for (unsigned i = 0; i < n_sets && c->read_errno == 0; i++)
		apply_set(c, sets[i], i + 1);
	if (c->read_errno) {
		add_error(c->errs, "%s: cannot read configuration file: %s", c->file,
			  strerror(c->read_errno));
		kvl_config_defaults(cfg);
		return -c->read_errno;
	}
	if (rc > 0 && c->errs->count == 0)
		add_error(c->errs, "%s:%d: syntax error", c->file, rc);
	else if (rc < 0)
		add_error(c->errs, "%s: out of memory while parsing", c->file);
	if (c->errs->count == 0)
		validate(cfg, cfg->path, c->errs);
	/* A failed load leaves defaults behind, never half a file. */
	if (c->errs->count) {
		kvl_config_defaults(cfg);
		return -EINVAL;
	}
	return 0;
}

/*
 * Open @path for reading only if it is a regular file of at most KVL_CONF_MAX_BYTES: a FIFO,
 * /dev/zero or a directory would hang or never end the parse (even of --print-config). The
 * open does not block on a FIFO (O_NONBLOCK); fstat then refuses it.
 */
#define KVL_CONF_MAX_BYTES (1u << 20)

static int open_regular(const char *path, FILE **fp, struct kvl_conf_errors *errs)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK), rc;
	struct stat st;

	*fp = NULL;
	if (fd < 0) {
		rc = -errno;
		add_error(errs, "%s: cannot open configuration file: %s", path, strerror(-rc));
		return rc;
	}
	if (fstat(fd, &st) != 0) {
		rc = -errno;
		add_error(errs, "%s: cannot stat configuration file: %s", path, strerror(-rc));
		close(fd);
		return rc;
	}
	if (!S_ISREG(st.st_mode)) {
		add_error(errs, "%s: not a regular file (%s): give the path of an INI file", path,
			  S_ISDIR(st.st_mode)	 ? "a directory"
			  : S_ISFIFO(st.st_mode) ? "a FIFO"
			  : S_ISCHR(st.st_mode)	 ? "a character device"
			  : S_ISSOCK(st.st_mode) ? "a socket"
						 : "a special file");
		close(fd);
		return S_ISDIR(st.st_mode) ? -EISDIR : -EINVAL;
	}
	if (st.st_size > (off_t)KVL_CONF_MAX_BYTES) {
		add_error(errs,
			  "%s: %lld bytes: larger than %u, not an INI file kvlane would write",
			  path, (long long)st.st_size, KVL_CONF_MAX_BYTES);
		close(fd);
		return -EFBIG;
	}
	*fp = fdopen(fd, "r");
	if (*fp == NULL) {
		rc = -errno;
		add_error(errs, "%s: cannot read configuration file: %s", path, strerror(-rc));
		close(fd);
		return rc;
	}
	return 0;
}

int kvl_config_load(const char *path, struct kvl_config *cfg, struct kvl_conf_errors *errs)
{
	return kvl_config_load_sets(path, NULL, 0, cfg, errs);
}

int kvl_config_load_sets(const char *path, const char *const *sets, unsigned n_sets,
			 struct kvl_config *cfg, struct kvl_conf_errors *errs)
{
	struct parse_ctx c = { .errs = errs, .file = path };
	int rc;

	memset(errs, 0, sizeof(*errs));
	rc = open_regular(path, &c.fp, errs);
	if (rc < 0) {
		kvl_config_defaults(cfg);
		return rc;
	}
	rc = load(&c, cfg, path, sets, n_sets);
	fclose(c.fp);
	return rc;
}

int kvl_config_load_string(const char *name, const char *text, struct kvl_config *cfg,
			   struct kvl_conf_errors *errs)
{
	struct parse_ctx c = { .errs = errs, .file = name, .text = text };

	memset(errs, 0, sizeof(*errs));
	return load(&c, cfg, name, NULL, 0);
}

/* ---- walking ---- */

/* @split_lists: call @fn once per element of a list key (the printer's one line per peer,
 * which keeps every line under inih's length limit), instead of once with them joined. */
static int visit_section(const struct kvl_config *cfg, int sec, int idx, bool split_lists,
			 kvl_config_visit_fn fn, void *arg)
{
	const void *base = section_cbase(cfg, sec, idx);
	char name[KVL_LABEL_LEN + 16], val[KVL_MAX_PEERS * KVL_ADDR_LEN];
	int rc = 0;

	if (sections[sec].multi)
		snprintf(name, sizeof(name), "%s.%s", sections[sec].name, label_of(cfg, sec, idx));
	else
		snprintf(name, sizeof(name), "%s", sections[sec].name);
	for (unsigned i = 0; rc == 0 && i < sections[sec].n_keys; i++) {
		const struct key_def *k = &sections[sec].keys[i];

		/* RDMA-only keys are rejected on a tcp NIC, so they are not part of its config. */
		if (sec == KVL_SEC_NIC && (k->flags & F_RDMA_ONLY) &&
		    cfg->nics[idx].transport == KVL_TRANSPORT_TCP)
			continue;
		if (split_lists && k->type == KT_ADDR_LIST && cfg->control.n_peers > 0) {
			for (unsigned j = 0; rc == 0 && j < cfg->control.n_peers; j++)
				rc = fn(arg, name, k->name, cfg->control.peers[j]);
			continue;
		}
		format_value(k, base, val, sizeof(val));
		rc = fn(arg, name, k->name, val);
	}
	return rc;
}

static int visit_all(const struct kvl_config *cfg, bool split_lists, kvl_config_visit_fn fn,
		     void *arg)
{
	int rc = visit_section(cfg, KVL_SEC_RUNTIME, 0, split_lists, fn, arg);

	/* [runtime], then the repeated sections, then the other singletons: file order. */
	for (int s = 0; rc == 0 && s < KVL_SEC_COUNT; s++)
		for (uint32_t i = 0; sections[s].multi && rc == 0 && i < multi_ccount(cfg, s); i++)
			rc = visit_section(cfg, s, (int)i, split_lists, fn, arg);
	for (int s = KVL_SEC_RUNTIME + 1; rc == 0 && s < KVL_SEC_COUNT; s++)
		if (!sections[s].multi)
			rc = visit_section(cfg, s, 0, split_lists, fn, arg);
	return rc;
}

int kvl_config_visit(const struct kvl_config *cfg, kvl_config_visit_fn fn, void *arg)
{
	return visit_all(cfg, false, fn, arg);
}

void kvl_config_schema_visit(kvl_schema_visit_fn fn, void *arg)
{
	char multi[32];

	for (int s = 0; s < KVL_SEC_COUNT; s++) {
		snprintf(multi, sizeof(multi), "%s.*", sections[s].name);
		for (unsigned i = 0; i < sections[s].n_keys; i++)
			fn(arg, sections[s].multi ? multi : sections[s].name,
			   sections[s].keys[i].name, sections[s].keys[i].def);
	}
}

struct print_state {
	FILE *out;
	char section[KVL_LABEL_LEN + 8];
};

static int print_one(void *arg, const char *section, const char *key, const char *value)
{
	struct print_state *ps = arg;

	if (strcmp(ps->section, section) != 0) {
		fprintf(ps->out, "%s[%s]\n", ps->section[0] ? "\n" : "", section);
		snprintf(ps->section, sizeof(ps->section), "%s", section);
	}
	fprintf(ps->out, "%s = %s\n", key, value);
	return 0;
}

int kvl_config_print(FILE *out, const struct kvl_config *cfg)
{
	struct print_state ps = { .out = out };

	fprintf(out, "# kvlane effective configuration%s%s (defaults filled in)\n",
		cfg->path[0] ? " of " : "", cfg->path);
	visit_all(cfg, true, print_one, &ps);
	return ferror(out) ? -EIO : 0;
}
