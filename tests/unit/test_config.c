/* SPDX-License-Identifier: BSD-3-Clause */
/* Unit tests of the INI configuration: every error message, good inputs, shipped files, docs. */
#include <dirent.h>
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config.h"
#include "kvl_test.h"

/* Large structs live here, not on the stack. */
static struct kvl_config cfg, defaults;
static struct kvl_conf_errors errs;

/* The smallest NIC that makes a file valid: appended after the lines a case is about, so the
 * line numbers in the cases count from the top of the text. */
#define NIC_LO "[nic.lo]\ndevice = lo\ntransport = tcp\n"

static const char *src_root(void)
{
	const char *s = getenv("KVL_SRC");

	return s && s[0] ? s : ".";
}

static void dump_errors(const struct kvl_conf_errors *e)
{
	for (unsigned i = 0; i < e->count; i++)
		fprintf(stderr, "    [%u] %s\n", i, e->msg[i]);
	if (e->dropped)
		fprintf(stderr, "    (%u dropped)\n", e->dropped);
}

/* Index of the first message that starts with @prefix and contains @frag, or -1. */
static int find_msg(const struct kvl_conf_errors *e, const char *prefix, const char *frag)
{
	for (unsigned i = 0; i < e->count; i++)
		if (strncmp(e->msg[i], prefix, strlen(prefix)) == 0 &&
		    strstr(e->msg[i] + strlen(prefix), frag) != NULL)
			return (int)i;
	return -1;
}

/* @e holds a message "@prefix ...@frag..."; say which case and what was there if not. */
static void expect_msg(const char *what, const struct kvl_conf_errors *e, const char *prefix,
		       const char *frag)
{
	int at = find_msg(e, prefix, frag);

	if (at < 0) {
		fprintf(stderr, "  case \"%s\": no message \"%s ...%s...\"; got %u:\n", what,
			prefix, frag, e->count);
		dump_errors(e);
	}
	CHECK(at >= 0);
}

/* A failed load returns -EINVAL, reports the one expected message, and leaves defaults. */
static void expect_bad(const char *what, const char *text, unsigned n_msgs, const char *prefix,
		       const char *frag)
{
	int rc = kvl_config_load_string("t.ini", text, &cfg, &errs);

	if (rc != -EINVAL)
		fprintf(stderr, "  case \"%s\": rc %d\n", what, rc);
	CHECK_INT(rc, -EINVAL);
	expect_msg(what, &errs, prefix, frag);
	if (errs.count != n_msgs) {
		fprintf(stderr, "  case \"%s\": %u messages, expected %u:\n", what, errs.count,
			n_msgs);
		dump_errors(&errs);
	}
	CHECK_INT(errs.count, n_msgs);
	CHECK_INT(cfg.n_nics, 0);
	CHECK(memcmp(&cfg, &defaults, sizeof(cfg)) == 0);
}

static int load_good(const char *what, const char *text)
{
	int rc = kvl_config_load_string("t.ini", text, &cfg, &errs);

	if (rc != 0 || errs.count != 0) {
		fprintf(stderr, "  case \"%s\": rc %d, %u messages:\n", what, rc, errs.count);
		dump_errors(&errs);
	}
	CHECK_INT(rc, 0);
	CHECK_INT(errs.count, 0);
	return rc;
}

struct bad_case {
	const char *what;
	const char *text;
	const char *prefix; /* "t.ini:LINE: section.key:" */
	const char *frag;   /* what follows, in part */
};

/* clang-format off */
static const struct bad_case bad_cases[] = {
	/* ---- one key of each type ---- */
	{ "bool word", "[gpu]\nenable = maybe\n" NIC_LO,
	  "t.ini:2: gpu.enable:", "expected true or false; got \"maybe\"" },
	{ "bool number", "[telemetry]\nenable = 2\n" NIC_LO,
	  "t.ini:2: telemetry.enable:", "expected true or false; got \"2\"" },
	{ "uint below range", "[runtime]\nhybrid_sleep_us = 0\n" NIC_LO,
	  "t.ini:2: runtime.hybrid_sleep_us:", "expected an integer in 1..100000; got \"0\"" },
	{ "uint above range", "[cq_moderation]\nperiod_us = 4096\n" NIC_LO,
	  "t.ini:2: cq_moderation.period_us:", "expected an integer in 0..4095; got \"4096\"" },
	{ "uint above range (nic)", "[nic.r0]\ndevice = mlx5_0\nqp_count = 1025\n",
	  "t.ini:3: nic.r0.qp_count:", "expected an integer in 1..32; got \"1025\"" },
	{ "not an integer", "[nic.r0]\ndevice = mlx5_0\nqp_count = many\n",
	  "t.ini:3: nic.r0.qp_count:", "expected an integer in 1..32; got \"many\"" },
	{ "trailing garbage", "[sched]\nresize_interval_ms = 12abc\n" NIC_LO,
	  "t.ini:2: sched.resize_interval_ms:", "expected an integer in 1..60000; got \"12abc\"" },
	{ "above range (sched)", "[sched]\nready_ahead = 65537\n" NIC_LO,
	  "t.ini:2: sched.ready_ahead:", "expected an integer in 0..65536; got \"65537\"" },
	{ "negative", "[control]\nconnect_timeout_ms = -1\n" NIC_LO,
	  "t.ini:2: control.connect_timeout_ms:", "expected an integer in 100..600000; got \"-1\"" },
	{ "fraction", "[memory]\npool_size_mb = 1.5\n" NIC_LO,
	  "t.ini:2: memory.pool_size_mb:", "expected an integer in 0..4194304; got \"1.5\"" },
	{ "empty integer", "[cq_moderation]\ncount =\n" NIC_LO,
	  "t.ini:2: cq_moderation.count:", "expected an integer in 1..65535; got \"\"" },
	{ "hex parsed, out of range", "[nic.r0]\ndevice = mlx5_0\nservice_level = 0x10\n",
	  "t.ini:3: nic.r0.service_level:", "expected an integer in 0..15; got \"0x10\"" },
	{ "hex without digits", "[nic.r0]\ndevice = mlx5_0\ntraffic_class = 0x\n",
	  "t.ini:3: nic.r0.traffic_class:", "expected an integer in 0..255; got \"0x\"" },
	{ "retry for ever", "[nic.r0]\ndevice = mlx5_0\nretry_count = 7\n",
	  "t.ini:3: nic.r0.retry_count:", "expected an integer in 1..6; got \"7\"" },
	{ "ack timeout past the verbs field", "[nic.r0]\ndevice = mlx5_0\nack_timeout = 32\n",
	  "t.ini:3: nic.r0.ack_timeout:", "expected an integer in 1..31; got \"32\"" },
	{ "ack timeout on tcp", "[nic.t]\ndevice = lo\ntransport = tcp\nack_timeout = 18\n",
	  "t.ini:4: nic.t.ack_timeout:", "tcp" },
	{ "quoted number keeps its spaces", "[runtime]\nhybrid_idle_us = \" 5\"\n" NIC_LO,
	  "t.ini:2: runtime.hybrid_idle_us:", "expected an integer in 0..10000000; got \" 5\"" },
	{ "power of two", "[memory]\nchunk_size_kb = 3000\n" NIC_LO,
	  "t.ini:2: memory.chunk_size_kb:", "expected a power of two in 4..1048576; got \"3000\"" },
	{ "Ethernet MTU is not an RDMA MTU", "[nic.r0]\ndevice = mlx5_0\nmtu = 1500\n",
	  "t.ini:3: nic.r0.mtu:", "expected a power of two in 256..4096; got \"1500\"" },
	{ "power of two below range", "[nic.r0]\ndevice = mlx5_0\nqueue_depth = 8\n",
	  "t.ini:3: nic.r0.queue_depth:", "expected a power of two in 16..32768; got \"8\"" },
	{ "auto-or-int above range", "[nic.r0]\ndevice = mlx5_0\ngid_index = 256\n",
	  "t.ini:3: nic.r0.gid_index:", "expected auto or an integer in 0..255; got \"256\"" },
	{ "auto-or-int word", "[nic.r0]\ndevice = mlx5_0\nnuma_node = any\n",
	  "t.ini:3: nic.r0.numa_node:", "expected auto or an integer in 0..1023; got \"any\"" },
	{ "auto-or-int: -1 is not auto", "[nic.r0]\ndevice = mlx5_0\nnuma_node = -1\n",
	  "t.ini:3: nic.r0.numa_node:", "expected auto or an integer in 0..1023; got \"-1\"" },
	{ "enum", "[runtime]\nidle_policy = spin\n" NIC_LO,
	  "t.ini:2: runtime.idle_policy:", "expected one of poll, yield, hybrid; got \"spin\"" },
	{ "enum (transport)", "[nic.r0]\ndevice = mlx5_0\ntransport = rdma\n",
	  "t.ini:3: nic.r0.transport:", "expected one of auto, mlx5, verbs, tcp; got \"rdma\"" },
	{ "tristate", "[memory]\nhugepage = maybe\n" NIC_LO,
	  "t.ini:2: memory.hugepage:", "expected true, false or auto; got \"maybe\"" },
	{ "tristate (gpudirect)", "[gpu]\ngpudirect = sometimes\n" NIC_LO,
	  "t.ini:2: gpu.gpudirect:", "expected true, false or auto; got \"sometimes\"" },
	{ "name charset", "[runtime]\nname = my node\n" NIC_LO,
	  "t.ini:2: runtime.name:", "expected a name of letters, digits, '_', '-', '.' and ':'" },
	{ "name too long (64)",
	  "[runtime]\nname = "
	  "nnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnn\n" NIC_LO,
	  "t.ini:2: runtime.name:", "expected a name of 1..63 characters" },
	{ "name empty in quotes", "[runtime]\nname = \"\"\n" NIC_LO,
	  "t.ini:2: runtime.name:", "expected a name of 1..63 characters; got \"\"" },
	{ "device charset", "[nic.r0]\ndevice = mlx5/0\n",
	  "t.ini:2: nic.r0.device:", "expected a name of letters, digits" },
	/* ---- addresses ---- */
	{ "address without port", "[control]\nlisten = 127.0.0.1\n" NIC_LO,
	  "t.ini:2: control.listen:", "expected host:port (e.g. 10.0.0.2:18515" },
	{ "bad IPv4", "[control]\nlisten = 10.0.0.256:18515\n" NIC_LO,
	  "t.ini:2: control.listen:", "expected a valid IPv4 address before the ':'" },
	{ "short IPv4", "[control]\nlisten = 10.0.1:18515\n" NIC_LO,
	  "t.ini:2: control.listen:", "expected a valid IPv4 address before the ':'" },
	{ "bad [IPv6]", "[control]\nlisten = [fe80::zz]:18515\n" NIC_LO,
	  "t.ini:2: control.listen:", "expected a valid IPv6 address inside [ ]" },
	{ "[IPv6] without ':' after ']'", "[control]\nlisten = [::1]18515\n" NIC_LO,
	  "t.ini:2: control.listen:", "expected [ipv6]:port; got \"[::1]18515\"" },
	{ "IPv6 without brackets", "[control]\nlisten = ::1:18515\n" NIC_LO,
	  "t.ini:2: control.listen:", "IPv6 as [addr]:port" },
	{ "port out of range", "[control]\nlisten = 0.0.0.0:65536\n" NIC_LO,
	  "t.ini:2: control.listen:", "expected host:port with a port in 0..65535" },
	{ "peer port 0", "[control]\npeers = 10.0.0.2:0\n" NIC_LO,
	  "t.ini:2: control.peers:", "expected host:port with a port in 1..65535" },
	{ "peer without host", "[control]\npeers = :18515\n" NIC_LO,
	  "t.ini:2: control.peers:", "expected host:port with a host before the ':'" },
	{ "peer host name charset", "[control]\npeers = node_b:18515\n" NIC_LO,
	  "t.ini:2: control.peers:", "expected a host name of letters, digits, '-' and '.'" },
	{ "peers with an empty entry", "[control]\npeers = 10.0.0.2:18515, , 10.0.0.3:18515\n" NIC_LO,
	  "t.ini:2: control.peers:", "without empty entries" },
	{ "duplicate peer", "[control]\npeers = 10.0.0.2:18515, 10.0.0.3:18515, 10.0.0.2:18515\n"
	  NIC_LO,
	  "t.ini:2: control.peers:", "expected each peer once (10.0.0.2:18515 is listed twice)" },
	{ "33 peers",
	  "[control]\npeers = h:1,h:2,h:3,h:4,h:5,h:6,h:7,h:8,h:9,h:10,h:11,h:12,h:13,h:14,h:15,"
	  "h:16,h:17,h:18,h:19,h:20,h:21,h:22,h:23,h:24,h:25,h:26,h:27,h:28,h:29,h:30,h:31,h:32,"
	  "h:33\n" NIC_LO,
	  "t.ini:2: control.peers:", "expected at most 32 peers" },
	/* ---- sections ---- */
	{ "section typo", "[runtme]\nname = x\n" NIC_LO,
	  "t.ini:1: [runtme]:", "unknown section; did you mean [runtime]?" },
	{ "section typo 2", "[nic.lo]\ndevice = lo\ntransport = tcp\n[contrl]\nlisten = x\n",
	  "t.ini:4: [contrl]:", "unknown section; did you mean [control]?" },
	{ "section unknown", "[frobnicator]\n" NIC_LO,
	  "t.ini:1: [frobnicator]:", "unknown section; sections are [runtime], [nic.<label>]" },
	{ "[nic]", "[nic]\ndevice = mlx5_0\n" NIC_LO,
	  "t.ini:1: [nic]:", "NIC sections are named [nic.<label>]" },
	{ "[nic.]", "[nic.]\ndevice = mlx5_0\n" NIC_LO,
	  "t.ini:1: [nic.]:", "bad NIC label \"\"; expected 1..31 letters, digits" },
	{ "[nic.bad label!]", "[nic.bad label!]\ndevice = mlx5_0\n" NIC_LO,
	  "t.ini:1: [nic.bad label!]:", "bad NIC label \"bad label!\"" },
	{ "NIC label with '-' (not a telemetry name)", "[nic.rail-0]\ndevice = mlx5_0\n" NIC_LO,
	  "t.ini:1: [nic.rail-0]:", "bad NIC label \"rail-0\"" },
	{ "[nics.x]", "[nics.x]\ndevice = mlx5_0\n" NIC_LO,
	  "t.ini:1: [nics.x]:", "unknown section; NIC sections are named [nic.<label>]" },
	{ "NIC label of 32", NIC_LO "[nic.aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa]\n",
	  "t.ini:4: [nic.aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa]:", "bad NIC label" },
	/* ---- keys ---- */
	{ "key typo", "[runtime]\nidle_polcy = poll\n" NIC_LO,
	  "t.ini:2: runtime.idle_polcy:", "unknown key in [runtime]; did you mean \"idle_policy\"?" },
	{ "key typo (nic)", "[nic.r0]\ndevice = mlx5_0\nqp_cnt = 8\n",
	  "t.ini:3: nic.r0.qp_cnt:", "unknown key in [nic.r0]; did you mean \"qp_count\"?" },
	{ "key in the wrong section", "[runtime]\npool_size_mb = 64\n" NIC_LO,
	  "t.ini:2: runtime.pool_size_mb:", "unknown key in [runtime]; \"pool_size_mb\" belongs "
					    "in [memory]" },
	{ "NIC key in a singleton section", "[memory]\nmtu = 4096\n" NIC_LO,
	  "t.ini:2: memory.mtu:", "\"mtu\" belongs in [nic.<label>]" },
	{ "singleton key in a NIC section", "[nic.r0]\ndevice = mlx5_0\nname = a\n",
	  "t.ini:3: nic.r0.name:", "\"name\" belongs in [runtime]" },
	{ "unknown key", "[gpu]\nfrobnicate = 1\n" NIC_LO,
	  "t.ini:2: gpu.frobnicate:", "unknown key in [gpu]" },
	{ "key before any section", "; header\nidle_policy = yield\n[runtime]\n" NIC_LO,
	  "t.ini:2: idle_policy:", "key outside any section; put it under [runtime]" },
	{ "NIC key before any section", "mtu = 4096\n" NIC_LO,
	  "t.ini:1: mtu:", "key outside any section; put it under [nic.<label>]" },
	{ "duplicate key", "[runtime]\nname = a\nidle_policy = poll\nname = b\n" NIC_LO,
	  "t.ini:4: runtime.name:", "set twice (first at line 2)" },
	{ "duplicate key across a reopened section",
	  "[nic.r0]\ndevice = mlx5_0\nqp_count = 4\n[memory]\n[nic.r0]\nqp_count = 8\n",
	  "t.ini:6: nic.r0.qp_count:", "set twice (first at line 3)" },
	/* ---- what one key cannot say ---- */
	{ "qp_count over the NICs past what a peer holds",
	  "[nic.a]\ndevice = mlx5_0\nqp_count = 20\n[nic.b]\ndevice = mlx5_1\nqp_count = 13\n",
	  "t.ini:6: nic.b.qp_count:",
	  "33 data connections per peer over the NICs so far; a peer holds at most 32" },
	{ "segment geometry past 2^64 (each key in range)",
	  "[segment.big]\nlayers = 1024\nplanes = 2\nblocks = 16777216\nblock_bytes = "
	  "1073741824\n" NIC_LO,
	  "t.ini:1: segment.big:", "1024 x 2 x 16777216 x 1073741824 overflows 64 bits" },
	{ "connect_timeout_ms under 100", "[control]\nconnect_timeout_ms = 99\n" NIC_LO,
	  "t.ini:2: control.connect_timeout_ms:", "expected an integer in 100..600000" },
	{ "missing device", "[runtime]\nname = x\n\n[nic.r0]\nport = 2\n",
	  "t.ini:4: nic.r0.device:", "required key missing" },
	{ "no NIC section", "[runtime]\nname = x\n",
	  "t.ini:1: nic:", "no [nic.<label>] section; at least one NIC is needed" },
	{ "empty file", "",
	  "t.ini:1: nic:", "no [nic.<label>] section" },
	{ "RDMA-only key on tcp", "[nic.lo]\ndevice = lo\ntransport = tcp\ngid_index = 3\n",
	  "t.ini:4: nic.lo.gid_index:", "applies only to RDMA transports, but transport = tcp" },
	{ "RDMA-only key on tcp, before transport",
	  "[nic.lo]\ndevice = lo\npkey_index = 0\ntransport = tcp\n",
	  "t.ini:3: nic.lo.pkey_index:", "applies only to RDMA transports" },
	{ "two NICs on one device and port",
	  "[nic.a]\ndevice = mlx5_0\n[nic.b]\ndevice = mlx5_0\nport = 1\n",
	  "t.ini:4: nic.b.device:", "mlx5_0 port 1 is already used by [nic.a] (t.ini:2)" },
	{ "signal_every > queue_depth, signal_every set",
	  "[cq_moderation]\nsignal_every = 256\n[nic.r0]\ndevice = mlx5_0\nqueue_depth = 128\n",
	  "t.ini:2: cq_moderation.signal_every:",
	  "256 is larger than nic.r0.queue_depth = 128 (t.ini:5)" },
	{ "signal_every > queue_depth, only queue_depth set",
	  "[cq_moderation]\ncount = 8\n[nic.r0]\ndevice = mlx5_0\nqueue_depth = 32\n",
	  "t.ini:5: nic.r0.queue_depth:", "32 is smaller than cq_moderation.signal_every = 64" },
	{ "pool not a multiple of chunk, chunk set",
	  "[memory]\npool_size_mb = 6\nchunk_size_kb = 4096\n" NIC_LO,
	  "t.ini:3: memory.chunk_size_kb:",
	  "pool_size_mb = 6 MiB is not a whole number of chunk_size_kb = 4096 KiB chunks" },
	{ "pool smaller than default chunk, only pool set", "[memory]\npool_size_mb = 2\n" NIC_LO,
	  "t.ini:2: memory.pool_size_mb:", "pool_size_mb = 2 MiB is not a whole number" },
	{ "window_min > window_max", "[sched]\nwindow_min_kb = 4096\nwindow_max_mb = 2\n" NIC_LO,
	  "t.ini:2: sched.window_min_kb:", "window_min_kb = 4096 KiB exceeds window_max_mb = 2 MiB" },
	{ "null transport without its acknowledgement",
	  "[sched]\nstaging_mb = 8\nnull_transport = true\n" NIC_LO,
	  "t.ini:3: sched.null_transport:",
	  "moves no data (for measuring kvlane's own cost); set sched.null_transport_ack = true" },
	{ "null transport acknowledged only in a comment",
	  "[sched]\nnull_transport = yes\n; null_transport_ack = true\n" NIC_LO,
	  "t.ini:2: sched.null_transport:", "set sched.null_transport_ack = true as well" },
	{ "staging slot larger than the staging", "[sched]\nstaging_mb = 1\nslot_kb = 2048\n" NIC_LO,
	  "t.ini:3: sched.slot_kb:", "2048 KiB is larger than staging_mb = 1 MiB" },
	{ "an unknown tier copy method", "[sched]\nstaging_mb = 8\ntier_copy = fast\n" NIC_LO,
	  "t.ini:3: sched.tier_copy:", "expected one of auto, gather, batch, each; got \"fast\"" },
	{ "host tier without a scheduler", "[sched]\ntier = true\n" NIC_LO,
	  "t.ini:2: sched.tier:", "true needs a scheduler to serve it: set sched.staging_mb > 0" },
	{ "host tier into VRAM without the pool",
	  "[gpu]\nenable = true\n[sched]\nstaging_mb = 8\nstaging = gpu\ntier = true\n" NIC_LO,
	  "t.ini:6: sched.tier:", "with staging = gpu needs the [memory] pool" },
	{ "VRAM staging on a tcp NIC without the pool (tcp's bounce buffers)",
	  "[gpu]\nenable = true\n[sched]\nstaging_mb = 8\nstaging = gpu\n" NIC_LO,
	  "t.ini:5: sched.staging:",
	  "gpu, but nic.lo has transport = tcp (t.ini:8), which cannot land bytes in VRAM yet "
	  "without its bounce buffers, carved from the [memory] pool: set memory.pool_size_mb > 0" },
	{ "gpudirect without gpu", "[gpu]\ngpudirect = true\n" NIC_LO,
	  "t.ini:2: gpu.gpudirect:", "true needs gpu.enable = true" },
	{ "peer_timeout < 2x heartbeat, both set",
	  "[control]\nheartbeat_interval_ms = 1000\npeer_timeout_ms = 1500\n" NIC_LO,
	  "t.ini:3: control.peer_timeout_ms:",
	  "peer_timeout_ms = 1500 must be at least twice heartbeat_interval_ms = 1000" },
	{ "peer_timeout < 2x heartbeat, only heartbeat set",
	  "[control]\nheartbeat_interval_ms = 4000\n" NIC_LO,
	  "t.ini:2: control.heartbeat_interval_ms:", "peer_timeout_ms = 5000 must be at least twice" },
	/* ---- syntax ---- */
	{ "line without '='", "[runtime]\nidle_policy yield\n" NIC_LO,
	  "t.ini:2:", "expected \"[section]\" or \"key = value\", got \"idle_policy yield\"" },
	{ "header without ']'", NIC_LO "[memory\npool_size_mb = 64\n",
	  "t.ini:4:", "section header \"[memory\" is missing its ']'" },
	{ "continuation line", "[runtime]\nname = node\n  -a\n" NIC_LO,
	  "t.ini:3: runtime.name:", "continuation lines are not supported" },
	{ "indented key after a key is a continuation", "[runtime]\nname = a\n  idle_policy = yield\n"
	  NIC_LO,
	  "t.ini:3: runtime.name:", "continuation lines are not supported" },
};
/* clang-format on */

static void test_bad_table(void)
{
	unsigned n = sizeof(bad_cases) / sizeof(bad_cases[0]);

	CHECK(n >= 30);
	for (unsigned i = 0; i < n; i++)
		expect_bad(bad_cases[i].what, bad_cases[i].text, 1, bad_cases[i].prefix,
			   bad_cases[i].frag);
}

/* Cases whose text is built: long lines, 17 NICs, the upper bounds. */
static void test_bad_generated(void)
{
	static char text[8192];
	char line[256];
	size_t len;

	/* 198 characters is the longest line inih's 200-byte buffer holds with "\n" and NUL. */
	memset(line, 'x', sizeof(line));
	snprintf(text, sizeof(text), "[runtime]\n; %.196s\nname = ok\n" NIC_LO, line);
	load_good("198-character line", text);
	snprintf(text, sizeof(text), "[runtime]\n; %.197s\nname = ok\n" NIC_LO, line);
	expect_bad("199-character line", text, 1, "t.ini:2:", "line longer than 198 characters");

	/* After a long line the count goes on: the error two lines below names its own line. */
	snprintf(text, sizeof(text),
		 "[runtime]\nname = %.240s\nidle_policy = yield\n[gpu]\nenable = perhaps\n" NIC_LO,
		 line);
	expect_bad("long line, then an error", text, 2, "t.ini:2:", "line longer than");
	expect_msg("long line, then an error", &errs,
		   "t.ini:5: gpu.enable:", "expected true or false; got \"perhaps\"");
	/* The same at the very end of a text without a final newline. */
	snprintf(text, sizeof(text), NIC_LO "[gpu]\nenable = perhaps\n; %.240s", line);
	expect_bad("long last line", text, 2, "t.ini:6:", "line longer than");
	expect_msg("long last line", &errs, "t.ini:5: gpu.enable:", "got \"perhaps\"");

	/* 16 NICs load; a 17th is refused on its own header line. */
	len = 0;
	for (int i = 0; i < KVL_MAX_NICS; i++)
		len += snprintf(text + len, sizeof(text) - len, "[nic.n%d]\ndevice = mlx5_%d\n", i,
				i);
	if (load_good("16 NICs", text) == 0)
		CHECK_INT(cfg.n_nics, KVL_MAX_NICS);
	snprintf(text + len, sizeof(text) - len, "[nic.n16]\ndevice = mlx5_16\n");
	expect_bad("17 NICs", text, 1, "t.ini:33: [nic.n16]:", "too many NIC sections; at most 16");

	/* 32 peers load, 33 do not (the 33rd is in the table). */
	len = snprintf(text, sizeof(text), NIC_LO "[control]\nsecret_file = s.key\npeers = ");
	for (int i = 1; i <= KVL_MAX_PEERS; i++)
		len += snprintf(text + len, sizeof(text) - len, "%sh:%d", i > 1 ? "," : "", i);
	snprintf(text + len, sizeof(text) - len, "\n");
	if (load_good("32 peers", text) == 0) {
		CHECK_INT(cfg.control.n_peers, KVL_MAX_PEERS);
		CHECK_STR(cfg.control.peers[31], "h:32");
	}

	/* A 63-character name is the longest. */
	snprintf(text, sizeof(text), "[runtime]\nname = %.63s\n" NIC_LO, line);
	if (load_good("63-character name", text) == 0)
		CHECK_INT(strlen(cfg.runtime.name), 63);
}

/* One run reports every problem, each on its own line, in file order. */
static void test_many_errors(void)
{
	static char text[4096];
	const char *t = "[runtime]\n"		 /* 1 */
			"idle_policy = spin\n"	 /* 2 */
			"[memory]\n"		 /* 3 */
			"chunk_size_kb = 3000\n" /* 4 */
			"[nic.r0]\n"		 /* 5 */
			"device = mlx5_0\n"	 /* 6 */
			"mtu = 1500\n"		 /* 7 */
			"[contrl]\n"		 /* 8 */
			"listen = nowhere\n"	 /* 9: in a bad section, not reported again */
			"[gpu]\n"		 /* 10 */
			"enable = perhaps\n"	 /* 11 */
			"device_id = 64\n";	 /* 12 */
	const char *expect[][2] = {
		{ "t.ini:2: runtime.idle_policy:", "one of poll, yield, hybrid" },
		{ "t.ini:4: memory.chunk_size_kb:", "a power of two" },
		{ "t.ini:7: nic.r0.mtu:", "a power of two in 256..4096" },
		{ "t.ini:8: [contrl]:", "did you mean [control]?" },
		{ "t.ini:11: gpu.enable:", "true or false" },
		{ "t.ini:12: gpu.device_id:", "an integer in 0..63" },
	};
	size_t len = 0;

	expect_bad("six errors", t, 6, expect[0][0], expect[0][1]);
	CHECK(errs.count >= 3);
	for (unsigned i = 0; i < sizeof(expect) / sizeof(expect[0]); i++) {
		expect_msg("six errors", &errs, expect[i][0], expect[i][1]);
		/* in file order */
		if (i < errs.count)
			CHECK(strncmp(errs.msg[i], expect[i][0], strlen(expect[i][0])) == 0);
	}

	/* Beyond KVL_CONF_MAX_ERRORS messages are counted, not kept. */
	len = snprintf(text, sizeof(text), "[runtime]\n");
	for (int i = 0; i < KVL_CONF_MAX_ERRORS + 8; i++)
		len += snprintf(text + len, sizeof(text) - len, "zzz%d = 1\n", i);
	CHECK_INT(kvl_config_load_string("t.ini", text, &cfg, &errs), -EINVAL);
	CHECK_INT(errs.count, KVL_CONF_MAX_ERRORS);
	CHECK_INT(errs.dropped, 8);
	CHECK_HAS(errs.msg[KVL_CONF_MAX_ERRORS - 1], "t.ini:33: runtime.zzz31:");
}

/* Everything an operator may write: quotes, comments, BOM, CRLF, any case, reopened sections. */
static const char good_text[] =
	"\xEF\xBB\xBF; kvlane good-input test\r\n"			/* 1: BOM, comment */
	"# a hash comment\r\n"						/* 2 */
	"\r\n"								/* 3 */
	"[runtime] ; inline comment on a header\r\n"			/* 4 */
	"name = \"node-a\" ; quoted, then a comment\r\n"		/* 5 */
	"idle_policy = HYBRID\r\n"					/* 6 */
	"allow_remote_numa = TRUE\r\n"					/* 7 */
	"   ; an indented comment\r\n"					/* 8 */
	"\r\n"								/* 9 */
	"[nic.r0]\r\n"							/* 10 */
	"device = mlx5_0\r\n"						/* 11 */
	"qp_count = 0x10\r\n"						/* 12: hex accepted */
	"gid_index = 3\r\n"						/* 13 */
	"[telemetry]\r\n"						/* 14 */
	"enable = off\r\n"						/* 15 */
	"[cq_moderation]\r\n"						/* 16 */
	"enable = No\r\n"						/* 17 */
	"[gpu]\r\n"							/* 18 */
	"enable = Yes\r\n"						/* 19 */
	"gpudirect = TRUE\r\n"						/* 20 */
	"[control]\r\n"							/* 21 */
	"listen = \"[::1]:0\"\r\n"					/* 22: port 0 listens */
	"peers = 10.0.0.2:18515 , [fe80::1]:18515,node-b.example:1\r\n" /* 23 */
	"[memory]\r\n"							/* 24 */
	"hugepage = Off\r\n"						/* 25 */
	"[nic.r0]\r\n"							/* 26: reopened */
	"queue_depth = 0X400\r\n"					/* 27 */
	"traffic_class = 0x6a\r\n"					/* 28 */
	"[nic.r1]\r\n"							/* 29 */
	"device = mlx5_0\r\n"						/* 30: same device, */
	"port = 2\r\n"							/* 31: other port */
	"numa_node = 1\r\n"						/* 32 */
	"[runtime]\r\n"							/* 33: reopened */
	"hybrid_idle_us = 0\r\n"					/* 34 */
	"[nic.lo]\r\n"							/* 35 */
	"device = lo\r\n"						/* 36 */
	"transport = TCP\r\n"						/* 37 */
	"[control]\r\n"							/* 38: reopened */
	"secret_file = /etc/kvlane/s.key";				/* 39: no final newline */

static void check_good_values(void)
{
	const struct kvl_nic_conf *n = &cfg.nics[0];

	CHECK_STR(cfg.runtime.name, "node-a");
	CHECK_INT(cfg.runtime.idle_policy, KVL_IDLE_HYBRID);
	CHECK(cfg.runtime.allow_remote_numa);
	CHECK_INT(cfg.runtime.hybrid_idle_us, 0);
	CHECK_INT(cfg.runtime.hybrid_sleep_us, 50); /* default */
	CHECK(!cfg.telemetry.enable);
	CHECK(!cfg.cq_moderation.enable);
	CHECK(cfg.gpu.enable);
	CHECK_INT(cfg.gpu.gpudirect, KVL_TRI_ON);
	CHECK_STR(cfg.control.listen, "[::1]:0");
	CHECK_INT(cfg.control.n_peers, 3);
	CHECK_STR(cfg.control.peers[0], "10.0.0.2:18515");
	CHECK_STR(cfg.control.peers[1], "[fe80::1]:18515");
	CHECK_STR(cfg.control.peers[2], "node-b.example:1");
	CHECK_INT(cfg.memory.hugepage, KVL_TRI_OFF);
	CHECK_STR(cfg.control.secret_file, "/etc/kvlane/s.key");
	CHECK_INT(cfg.memory.pool_size_mb, 0); /* default: no pool */
	CHECK_INT(cfg.n_nics, 3);
	CHECK_STR(n->label, "r0");
	CHECK_STR(n->device, "mlx5_0");
	CHECK_INT(n->qp_count, 16);
	CHECK_INT(n->gid_index, 3);
	CHECK_INT(n->queue_depth, 1024);
	CHECK_INT(n->traffic_class, 0x6a);
	CHECK_INT(n->port, 1);
	CHECK_INT(n->numa_node, KVL_AUTO);
	CHECK_INT(n->transport, KVL_TRANSPORT_AUTO);
	CHECK_INT(cfg.nic_origin[0].section_line, 10);
	CHECK_STR(cfg.nics[1].label, "r1");
	CHECK_INT(cfg.nics[1].port, 2);
	CHECK_INT(cfg.nics[1].numa_node, 1);
	CHECK_INT(cfg.nics[1].gid_index, KVL_AUTO);
	CHECK_STR(cfg.nics[2].label, "lo");
	CHECK_INT(cfg.nics[2].transport, KVL_TRANSPORT_TCP);
}

static char *print_to_string(const struct kvl_config *c)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);

	if (f == NULL) {
		CHECK(f != NULL);
		return NULL;
	}
	CHECK_INT(kvl_config_print(f, c), 0);
	fclose(f);
	return buf;
}

static const char *after_first_line(const char *s)
{
	const char *nl = s ? strchr(s, '\n') : NULL;

	return nl ? nl + 1 : "";
}

/* Write @text to a fresh file; returns its path in @path, 0 or -1. */
static int write_temp(char *path, size_t len, const char *text)
{
	const char *dir = getenv("TMPDIR");
	int fd;
	FILE *f;

	snprintf(path, len, "%s/kvl_test_config_XXXXXX", dir && dir[0] ? dir : "/tmp");
	fd = mkstemp(path);
	if (fd < 0)
		return -1;
	f = fdopen(fd, "w");
	if (f == NULL) {
		close(fd);
		return -1;
	}
	fputs(text, f);
	return fclose(f) == 0 ? 0 : -1;
}

static void test_good(void)
{
	char path[512], *p_string = NULL, *p_file = NULL;
	static char text[1024];

	if (load_good("good text", good_text) == 0) {
		check_good_values();
		CHECK_STR(cfg.path, "t.ini");
		p_string = print_to_string(&cfg);
	}

	/* The same bytes through a file (the fgets reader): same result. */
	if (write_temp(path, sizeof(path), good_text) == 0) {
		int rc = kvl_config_load(path, &cfg, &errs);

		if (rc != 0)
			dump_errors(&errs);
		CHECK_INT(rc, 0);
		if (rc == 0) {
			check_good_values();
			CHECK_STR(cfg.path, path);
			p_file = print_to_string(&cfg);
			CHECK_HAS(p_file, path); /* the first line names the file */
			CHECK_STR(after_first_line(p_file), after_first_line(p_string));
		}
		unlink(path);
	} else {
		CHECK(!"cannot write a temporary file");
	}
	free(p_string);
	free(p_file);

	/* Printing a tcp NIC leaves out the keys that are refused on tcp. */
	if (load_good("tcp nic", NIC_LO) == 0) {
		p_string = print_to_string(&cfg);
		CHECK_HAS(p_string, "[nic.lo]\ndevice = lo\nport = 1\ntransport = tcp\n");
		CHECK(strstr(p_string, "gid_index") == NULL);
		CHECK(strstr(p_string, "mtu") == NULL);
		free(p_string);
	}

	/* The long line and the errors after it, through a file too. */
	memset(text, 0, sizeof(text));
	snprintf(text, sizeof(text), "[runtime]\n; %0250d\nname = ok\n[gpu]\nenable = perhaps\n",
		 0);
	if (write_temp(path, sizeof(path), text) == 0) {
		char prefix[600];

		CHECK_INT(kvl_config_load(path, &cfg, &errs), -EINVAL);
		snprintf(prefix, sizeof(prefix), "%s:2:", path);
		expect_msg("long line in a file", &errs, prefix, "line longer than 198 characters");
		snprintf(prefix, sizeof(prefix), "%s:5: gpu.enable:", path);
		expect_msg("long line in a file", &errs, prefix, "got \"perhaps\"");
		CHECK_INT(errs.count, 2);
		unlink(path);
	}

	/* A file that does not exist: its errno, and a message naming the path. */
	CHECK_INT(kvl_config_load("/nonexistent-kvlane/missing.ini", &cfg, &errs), -ENOENT);
	CHECK_INT(errs.count, 1);
	CHECK_HAS(errs.msg[0], "/nonexistent-kvlane/missing.ini: cannot open configuration file");
	CHECK_INT(cfg.n_nics, 0);

	/* Not a regular file: refused at once, never read (a FIFO would block, /dev/zero never
	 * end); a directory; a file over 1 MiB (issue 16, 8). */
	{
		char fifo[] = "/tmp/kvl_conf_fifo_XXXXXX";
		int fd = mkstemp(fifo);

		CHECK(fd >= 0);
		close(fd);
		unlink(fifo);
		CHECK(mkfifo(fifo, 0600) == 0);
		CHECK_INT(kvl_config_load(fifo, &cfg, &errs), -EINVAL);
		CHECK_INT(errs.count, 1);
		CHECK_HAS(errs.msg[0], fifo);
		CHECK_HAS(errs.msg[0], "not a regular file (a FIFO)");
		unlink(fifo);
	}
	CHECK_INT(kvl_config_load("/dev/zero", &cfg, &errs), -EINVAL);
	CHECK_HAS(errs.msg[0], "/dev/zero: not a regular file (a character device)");
	CHECK_INT(kvl_config_load("/tmp", &cfg, &errs), -EISDIR);
	CHECK_HAS(errs.msg[0], "/tmp: not a regular file (a directory)");
	{
		char big[] = "/tmp/kvl_conf_big_XXXXXX";
		int fd = mkstemp(big);

		CHECK(fd >= 0 && ftruncate(fd, (2 << 20)) == 0);
		close(fd);
		CHECK_INT(kvl_config_load(big, &cfg, &errs), -EFBIG);
		CHECK_HAS(errs.msg[0], "2097152 bytes: larger than 1048576");
		unlink(big);
	}
	/* A NUL byte ends no line early: the line is an error that names it, and the file
	 * does not load ("name = good\0evil" loaded "good"). */
	{
		static const char text[] = "[runtime]\nname = good\0evil\n[nic.lo]\ndevice = lo\n"
					   "transport = tcp\n";
		char path[] = "/tmp/kvl_conf_nul_XXXXXX", prefix[64];
		int fd = mkstemp(path);

		CHECK(fd >= 0 && write(fd, text, sizeof(text) - 1) == (ssize_t)sizeof(text) - 1);
		close(fd);
		CHECK_INT(kvl_config_load(path, &cfg, &errs), -EINVAL);
		snprintf(prefix, sizeof(prefix), "%s:2:", path);
		expect_msg("NUL byte", &errs, prefix, "a NUL byte at column 12");
		CHECK_INT(errs.count, 1);
		CHECK_STR(cfg.runtime.name, "kvlane"); /* defaults, never half a file */
		unlink(path);
	}

	/* A good load after a bad one starts from a clean slate. */
	CHECK_INT(kvl_config_load_string("t.ini", "[gpu]\nenable = x\n", &cfg, &errs), -EINVAL);
	load_good("good after bad", NIC_LO);
	CHECK_INT(cfg.n_nics, 1);
}

static int ini_filter(const struct dirent *d)
{
	size_t n = strlen(d->d_name);

	return n > 4 && strcmp(d->d_name + n - 4, ".ini") == 0;
}

/* Every shipped file loads clean, and prints to text that loads back to the same print. */
static void test_shipped(void)
{
	char dir[512], path[1024];
	struct dirent **list = NULL;
	int n;

	snprintf(dir, sizeof(dir), "%s/config", src_root());
	n = scandir(dir, &list, ini_filter, alphasort);
	if (n < 4)
		fprintf(stderr, "  %s: %d .ini files, expected at least 4 (is KVL_SRC right?)\n",
			dir, n);
	CHECK(n >= 4);
	for (int i = 0; i < n; i++) {
		char *p1 = NULL, *p2 = NULL;
		int rc;

		snprintf(path, sizeof(path), "%s/%s", dir, list[i]->d_name);
		rc = kvl_config_load(path, &cfg, &errs);
		if (rc != 0 || errs.count) {
			fprintf(stderr, "  shipped %s: rc %d\n", path, rc);
			dump_errors(&errs);
		}
		CHECK_INT(rc, 0);
		CHECK_INT(errs.count, 0);
		if (rc == 0) {
			CHECK(cfg.n_nics >= 1);
			p1 = print_to_string(&cfg);
			CHECK_HAS(p1, list[i]->d_name);
			rc = kvl_config_load_string("printed.ini", p1, &cfg, &errs);
			if (rc != 0)
				dump_errors(&errs);
			CHECK_INT(rc, 0);
			p2 = print_to_string(&cfg);
			if (p1 && p2 && strcmp(after_first_line(p1), after_first_line(p2)) != 0)
				fprintf(stderr, "  %s: print does not round-trip:\n%s\n---\n%s\n",
					path, p1, p2);
			CHECK_STR(after_first_line(p1), after_first_line(p2));
		}
		/* The CI default must run on any host: loopback over tcp, no GPU. */
		if (rc == 0 && strcmp(list[i]->d_name, "default.ini") == 0) {
			CHECK_INT(cfg.n_nics, 1);
			CHECK_STR(cfg.nics[0].device, "lo");
			CHECK_INT(cfg.nics[0].transport, KVL_TRANSPORT_TCP);
			CHECK(!cfg.gpu.enable);
			CHECK_INT(cfg.runtime.idle_policy, KVL_IDLE_YIELD);
		}
		free(p1);
		free(p2);
		free(list[i]);
	}
	free(list);
}

/* ---- the README documents every key, with the schema's default ---- */

struct schema_key {
	char section[16]; /* "runtime", ..., "nic.*" */
	char key[32];
	char def[64];
};

static struct schema_key schema[128];
static unsigned n_schema;

static void collect(void *arg, const char *section, const char *key, const char *def)
{
	(void)arg;
	if (n_schema < sizeof(schema) / sizeof(schema[0])) {
		snprintf(schema[n_schema].section, sizeof(schema[n_schema].section), "%s", section);
		snprintf(schema[n_schema].key, sizeof(schema[n_schema].key), "%s", key);
		snprintf(schema[n_schema].def, sizeof(schema[n_schema].def), "%s", def);
	}
	n_schema++;
}

static char *read_all(const char *path)
{
	FILE *f = fopen(path, "r");
	char *buf = NULL;
	size_t len = 0, got;
	FILE *m;
	char chunk[4096];

	if (f == NULL)
		return NULL;
	m = open_memstream(&buf, &len);
	if (m == NULL) {
		fclose(f);
		return NULL;
	}
	while ((got = fread(chunk, 1, sizeof(chunk), f)) > 0)
		fwrite(chunk, 1, got, m);
	fclose(f);
	fclose(m);
	return buf;
}

/* The README heading of a schema section: "### [runtime]", "### [nic.<label>]". */
static void heading_of(const char *section, char *out, size_t len)
{
	size_t n = strlen(section);

	/* repeated sections: "nic.*" -> "### [nic.<label>]" */
	if (n > 2 && strcmp(section + n - 2, ".*") == 0)
		snprintf(out, len, "### [%.*s.<label>]", (int)(n - 2), section);
	else
		snprintf(out, len, "### [%s]", section);
}

/* The part of @doc under the line @heading, up to the next "## " or "### " heading. */
static const char *doc_part(const char *doc, const char *heading, size_t *len)
{
	size_t hl = strlen(heading);
	const char *p = doc, *end, *h2, *h3;

	for (;;) {
		p = strstr(p, heading);
		if (p == NULL)
			return NULL;
		if ((p == doc || p[-1] == '\n') && (p[hl] == '\n' || p[hl] == ' '))
			break;
		p += hl;
	}
	p += hl;
	h2 = strstr(p, "\n## ");
	h3 = strstr(p, "\n### ");
	end = h2 && (!h3 || h2 < h3) ? h2 : h3;
	*len = end ? (size_t)(end - p) : strlen(p);
	return p;
}

/* Trim the cell [s, e) into @out. */
static void cell(const char *s, const char *e, char *out, size_t len)
{
	while (s < e && (*s == ' ' || *s == '\t'))
		s++;
	while (e > s && (e[-1] == ' ' || e[-1] == '\t' || e[-1] == '\r'))
		e--;
	snprintf(out, len, "%.*s", (int)(e - s), s);
}

/* Cell @idx (1 = key) of the table row at @row, which ends at a newline. */
static int row_cell(const char *row, int idx, char *out, size_t len)
{
	const char *p = row, *eol = strchr(row, '\n');

	if (eol == NULL)
		eol = row + strlen(row);
	for (int i = 0; i < idx; i++) {
		p = memchr(p, '|', (size_t)(eol - p));
		if (p == NULL)
			return -1;
		p++;
	}
	{
		const char *q = memchr(p, '|', (size_t)(eol - p));

		if (q == NULL)
			return -1;
		cell(p, q, out, len);
	}
	return 0;
}

/* The row "| `key` |" in @part (of @len bytes), or NULL. */
static const char *find_row(const char *part, size_t len, const char *key)
{
	char needle[64];
	const char *p = part;
	size_t nl;

	snprintf(needle, sizeof(needle), "| `%s` |", key);
	nl = strlen(needle);
	while (p < part + len) {
		if (strncmp(p, needle, nl) == 0)
			return p;
		p = memchr(p, '\n', (size_t)(part + len - p));
		if (p == NULL)
			break;
		p++;
	}
	return NULL;
}

static void test_docs(void)
{
	char path[1024], heading[64], def_cell[128], want[96];
	char *doc;

	n_schema = 0;
	kvl_config_schema_visit(collect, NULL);
	CHECK(n_schema >= 30 && n_schema <= sizeof(schema) / sizeof(schema[0]));
	if (n_schema > sizeof(schema) / sizeof(schema[0]))
		return;

	snprintf(path, sizeof(path), "%s/config/README.md", src_root());
	doc = read_all(path);
	if (doc == NULL)
		fprintf(stderr, "  %s: cannot read\n", path);
	CHECK(doc != NULL);
	if (doc == NULL)
		return;

	/* Each key has a row under its section's heading, showing the schema's default:
	 * "`value`", or "(none)" where the schema has no default. */
	for (unsigned i = 0; i < n_schema; i++) {
		const struct schema_key *k = &schema[i];
		const char *part, *row;
		size_t len;

		heading_of(k->section, heading, sizeof(heading));
		part = doc_part(doc, heading, &len);
		if (part == NULL) {
			fprintf(stderr, "  config/README.md: no heading \"%s\" (for key %s.%s)\n",
				heading, k->section, k->key);
			CHECK(part != NULL);
			continue;
		}
		row = find_row(part, len, k->key);
		if (row == NULL) {
			fprintf(stderr,
				"  config/README.md: key %s.%s is not documented: no row \"| `%s` "
				"|\" "
				"under \"%s\"\n",
				k->section, k->key, k->key, heading);
			CHECK(row != NULL);
			continue;
		}
		if (k->def[0])
			snprintf(want, sizeof(want), "`%s`", k->def);
		else
			snprintf(want, sizeof(want), "(none)");
		if (row_cell(row, 4, def_cell, sizeof(def_cell)) < 0 || strcmp(def_cell, want) != 0)
			fprintf(stderr,
				"  config/README.md: %s.%s: default column says \"%s\", the schema "
				"says %s\n",
				k->section, k->key, def_cell, want);
		CHECK_STR(def_cell, want);
	}

	/* And no row documents a key the parser does not know. */
	for (unsigned s = 0; s < n_schema; s++) {
		const char *part, *p;
		size_t len;

		if (s > 0 && strcmp(schema[s].section, schema[s - 1].section) == 0)
			continue; /* each section once */
		heading_of(schema[s].section, heading, sizeof(heading));
		part = doc_part(doc, heading, &len);
		for (p = part; p && p < part + len;) {
			if (strncmp(p, "| `", 3) == 0) {
				char key[64];
				bool known = false;

				row_cell(p, 1, key, sizeof(key));
				for (unsigned i = 0; i < n_schema; i++)
					if (strcmp(schema[i].section, schema[s].section) == 0 &&
					    strlen(key) == strlen(schema[i].key) + 2 &&
					    strncmp(key + 1, schema[i].key,
						    strlen(schema[i].key)) == 0)
						known = true;
				if (!known)
					fprintf(stderr,
						"  config/README.md: \"%s\" documents %s, which "
						"the "
						"parser does not accept\n",
						heading, key);
				CHECK(known);
			}
			p = memchr(p, '\n', (size_t)(part + len - p));
			if (p)
				p++;
		}
	}
	free(doc);
}

/* Regression tests: bugs these tests found in config.c, each fixed since. */
static void test_fixed_bugs(void)
{
	char path[512];

	/* 1. parse_peers() splits with strtok_r(), which merges ",," and drops a trailing ",":
	 *    the "without empty entries" rule only catches entries made of blanks. */
	expect_bad("peers with ,, (bug 1)",
		   "[control]\npeers = 10.0.0.2:18515,,10.0.0.3:18515\n" NIC_LO, 1,
		   "t.ini:2: control.peers:", "without empty entries");
	expect_bad("peers with a trailing comma (bug 1)",
		   "[control]\npeers = 10.0.0.2:18515,\n" NIC_LO, 1,
		   "t.ini:2: control.peers:", "without empty entries");

	/* 2. parse_u64() skips "0x", then strtoull(base 16) takes a second "0x": 0x0x10 is 16. */
	expect_bad("double hex prefix (bug 2)", "[nic.r0]\ndevice = mlx5_0\nqp_count = 0x0x10\n", 1,
		   "t.ini:3: nic.r0.qp_count:", "expected an integer in 1..32");

	/* 3. A directory opens with fopen("r"); every read fails, ferror() is only looked at when
	 *    load() returned 0, so the operator is told the file has no [nic.<label>] section. */
	snprintf(path, sizeof(path), "%s/config", src_root());
	{
		int rc = kvl_config_load(path, &cfg, &errs);
		bool misleading = find_msg(&errs, path, "no [nic.<label>]") >= 0;

		if (rc >= 0 || rc == -EINVAL || misleading) {
			fprintf(stderr, "  directory as config (bug 3): rc %d:\n", rc);
			dump_errors(&errs);
		}
		CHECK(rc < 0 && rc != -EINVAL); /* a read error, -EISDIR best */
		CHECK(!misleading);
		CHECK(errs.count >= 1 && strstr(errs.msg[0], path) == errs.msg[0]);
		CHECK_INT(cfg.n_nics, 0);
	}

	/* 4. After a header without ']', key_seen still holds from the previous section, so an
	 *    indented line is blamed on that section's last key (nic.lo.transport, line 3). */
	expect_bad("continuation after a broken header (bug 4)", NIC_LO "[runtime\n  name = x\n", 1,
		   "t.ini:4:", "section header \"[runtime\" is missing its ']'");
	CHECK(find_msg(&errs, "t.ini:5: nic.lo.transport:", "") < 0);
}

/* [control] peers may be repeated: each line appends; the printer writes one per line. */
static void test_peer_lines(void)
{
	char text[8192], *printed = NULL;
	size_t len = 0, plen = 0;
	FILE *mem;

	len = snprintf(text, sizeof(text), NIC_LO "[control]\nsecret_file = s.key\n");
	for (int i = 1; i <= KVL_MAX_PEERS; i += 4)
		len += snprintf(text + len, sizeof(text) - len,
				"peers = 10.0.1.%d:18515, 10.0.1.%d:18515, 10.0.1.%d:18515, "
				"10.0.1.%d:18515\n",
				i, i + 1, i + 2, i + 3);
	if (load_good("32 IPv4 peers on 8 lines", text) == 0) {
		CHECK_INT(cfg.control.n_peers, KVL_MAX_PEERS);
		CHECK_STR(cfg.control.peers[0], "10.0.1.1:18515");
		CHECK_STR(cfg.control.peers[31], "10.0.1.32:18515");
		mem = open_memstream(&printed, &plen);
		kvl_config_print(mem, &cfg);
		fclose(mem);
		CHECK_HAS(printed, "peers = 10.0.1.1:18515\npeers = 10.0.1.2:18515\n");
		/* What was printed loads back to the same list. */
		if (load_good("printed peers", printed) == 0) {
			CHECK_INT(cfg.control.n_peers, KVL_MAX_PEERS);
			CHECK_STR(cfg.control.peers[31], "10.0.1.32:18515");
		}
		free(printed);
	}
	expect_bad("a peer repeated on another line",
		   "[control]\npeers = 10.0.0.2:18515\npeers = 10.0.0.2:18515\n" NIC_LO, 1,
		   "t.ini:3: control.peers:",
		   "expected each peer once (10.0.0.2:18515 is listed twice)");
	len = snprintf(text, sizeof(text), NIC_LO "[control]\nsecret_file = s.key\n");
	for (int i = 1; i <= KVL_MAX_PEERS + 1; i++)
		len += snprintf(text + len, sizeof(text) - len, "peers = 10.0.2.%d:1\n", i);
	expect_bad("33 peers on 33 lines", text, 1,
		   "t.ini:38: control.peers:", "expected at most 32 peers");
	expect_bad("a line with no key", NIC_LO "= 5\n", 1,
		   "t.ini:4:", "expected \"key = value\", got no key before the '='");
}

/* xorshift: a fixed sequence, so a failure reproduces. */
static uint32_t rng_state = 0x2545f491;

static uint32_t rnd(void)
{
	rng_state ^= rng_state << 13;
	rng_state ^= rng_state >> 17;
	rng_state ^= rng_state << 5;
	return rng_state;
}

/*
 * Random damage to every shipped config: bytes flipped, deleted, duplicated, lines spliced
 * in from other files. Whatever comes out, the parser must not crash (ASan/UBSan watch in
 * CI), must answer 0 or -EINVAL, every error must name the file, a failed load must leave
 * the defaults, and an accepted file must print and load back to the same print.
 */
static void test_mutations(void)
{
	static const char *const noise[] = { "[",  "]",	   "=",	   ";",	 "#",  "\n",
					     " ",  "\"",   ".",	   ":",	 ",",  "0x",
					     "-1", "auto", "nic.", "\t", "\r", "\xff" };
	char dir[512], path[1024], *src[8] = { 0 };
	struct dirent **list = NULL;
	int n, loaded = 0, rejected = 0;

	snprintf(dir, sizeof(dir), "%s/config", src_root());
	n = scandir(dir, &list, ini_filter, alphasort);
	for (int i = 0; i < n; i++) {
		if (i < 8) {
			snprintf(path, sizeof(path), "%s/%s", dir, list[i]->d_name);
			src[i] = read_all(path);
		}
		free(list[i]);
	}
	free(list);
	if (n > 8)
		n = 8;
	for (int iter = 0; n > 0 && iter < 3000; iter++) {
		const char *base = src[iter % n];
		size_t len = base ? strlen(base) : 0, out = 0;
		char text[16384];
		int rc;

		if (len == 0 || len >= sizeof(text) / 2)
			continue;
		memcpy(text, base, len + 1);
		out = len;
		for (int m = 1 + (int)(rnd() % 4); m > 0; m--) {
			size_t at = rnd() % out, k = 1 + rnd() % 8;
			const char *ins = noise[rnd() % (sizeof(noise) / sizeof(noise[0]))];

			switch (rnd() % 4) {
			case 0: /* overwrite one byte */
				text[at] = ins[0];
				break;
			case 1: /* delete a run */
				if (at + k > out)
					k = out - at;
				memmove(text + at, text + at + k, out - at - k + 1);
				out -= k;
				break;
			case 2: /* insert a token */
				if (out + strlen(ins) + 1 < sizeof(text) / 2) {
					memmove(text + at + strlen(ins), text + at, out - at + 1);
					memcpy(text + at, ins, strlen(ins));
					out += strlen(ins);
				}
				break;
			default: /* splice the start of another file in */
				if (src[rnd() % n] && out + 64 < sizeof(text) / 2) {
					const char *o = src[rnd() % n];
					size_t ol = strlen(o) < 64 ? strlen(o) : 64;

					if (o) {
						memmove(text + at + ol, text + at, out - at + 1);
						memcpy(text + at, o, ol);
						out += ol;
					}
				}
				break;
			}
			if (out == 0)
				break;
		}
		rc = kvl_config_load_string("m.ini", text, &cfg, &errs);
		CHECK(rc == 0 || rc == -EINVAL);
		if (rc == 0) {
			char *p1 = print_to_string(&cfg), *p2;

			loaded++;
			CHECK_INT(kvl_config_load_string("p.ini", p1, &cfg, &errs), 0);
			p2 = print_to_string(&cfg);
			CHECK_STR(after_first_line(p1), after_first_line(p2));
			free(p1);
			free(p2);
		} else {
			rejected++;
			CHECK(errs.count >= 1);
			for (unsigned e = 0; e < errs.count; e++)
				CHECK(strncmp(errs.msg[e], "m.ini", 5) == 0);
			CHECK(memcmp(&cfg, &defaults, sizeof(cfg)) == 0);
		}
	}
	/* The mutations must exercise both outcomes, or this test proves little. */
	CHECK(loaded > 50);
	CHECK(rejected > 500);
	printf("mutations: %d loaded, %d rejected\n", loaded, rejected);
	for (int i = 0; i < 8; i++)
		free(src[i]);
}

/* A relative path in a file is taken from the file's folder; one from --set is kept. */
static void test_paths_and_sets(void)
{
	const char *sets[] = { "control.listen=127.0.0.1:0", "nic.lo.data_port = 7000",
			       "nic.extra.device=lo",	     "nic.extra.port=2",
			       "nic.extra.transport=tcp",    "control.peers=10.0.0.9:1" };
	const char *bad_sets[] = { "control.listen", "listen=1.2.3.4:5", "control.listen=nope",
				   "runtme.name=x" };
	char path[512];
	int rc;

	if (write_temp(path, sizeof(path),
		       NIC_LO "[control]\nsecret_file = s.key\npeers = 10.0.0.2:1\n") != 0) {
		CHECK(!"cannot write a temporary file");
		return;
	}
	rc = kvl_config_load(path, &cfg, &errs);
	CHECK_INT(rc, 0);
	CHECK_STR(cfg.control.secret_file, "/tmp/s.key");

	rc = kvl_config_load_sets(path, sets, 6, &cfg, &errs);
	if (rc != 0)
		dump_errors(&errs);
	CHECK_INT(rc, 0);
	CHECK_STR(cfg.control.listen, "127.0.0.1:0");
	CHECK_INT(cfg.nics[0].data_port, 7000);
	CHECK_INT(cfg.n_nics, 2);
	CHECK_STR(cfg.nics[1].label, "extra");
	/* --set control.peers replaces the file's list. */
	CHECK_INT(cfg.control.n_peers, 1);
	CHECK_STR(cfg.control.peers[0], "10.0.0.9:1");

	rc = kvl_config_load_sets(path, bad_sets, 4, &cfg, &errs);
	CHECK_INT(rc, -EINVAL);
	CHECK_INT(errs.count, 4);
	CHECK_HAS(errs.msg[0], "--set:1: expected section.key=value");
	CHECK_HAS(errs.msg[1], "--set:2: expected section.key=value");
	CHECK_HAS(errs.msg[2], "--set:3: control.listen: expected host:port");
	CHECK_HAS(errs.msg[3], "--set:4: [runtme]: unknown section; did you mean [runtime]?");
	CHECK_INT(cfg.n_nics, 0);
	unlink(path);
}

/* The scheduler's keys reach the struct; the null transport loads once acknowledged. */
static void test_sched_keys(void)
{
	/* tcp lands PULLs in VRAM through bounce buffers carved from the pool */
	if (load_good("VRAM staging on a tcp NIC with the pool",
		      "[gpu]\nenable = true\n[memory]\npool_size_mb = 16\nchunk_size_kb = 1024\n"
		      "[sched]\nstaging_mb = 8\nstaging = gpu\n" NIC_LO) == 0)
		CHECK_INT(cfg.sched.staging, KVL_STAGING_GPU);
	if (load_good("null transport acknowledged",
		      "[sched]\nstaging_mb = 8\nslot_kb = 16\nmax_msg_kb = 0\nnull_transport = "
		      "true\nnull_transport_ack = true\nready_ahead = 1\n" NIC_LO) == 0) {
		CHECK(cfg.sched.null_transport && cfg.sched.null_transport_ack);
		CHECK_INT(cfg.sched.staging_mb, 8);
		CHECK_INT(cfg.sched.slot_kb, 16);
		CHECK_INT(cfg.sched.max_msg_kb, 0);
		CHECK_INT(cfg.sched.max_requests, 256);
		CHECK_INT(cfg.sched.ready_ahead, 1);
		CHECK_INT(cfg.sched.tier_copy, KVL_TIER_COPY_AUTO); /* the default */
	}
	/* the tier's copy method: each name to its value */
	if (load_good("tier_copy = each", "[sched]\nstaging_mb = 8\ntier_copy = each\n" NIC_LO) ==
	    0)
		CHECK_INT(cfg.sched.tier_copy, KVL_TIER_COPY_EACH);
	CHECK_STR(kvl_tier_copy_name(KVL_TIER_COPY_GATHER), "gather");
	CHECK_STR(kvl_tier_copy_name(9), "?");
}

/* [memory]: 0 is no pool (the default); a pool must hold what the INI carves from it. */
static void test_memory_keys(void)
{
	static const char seg[] = "[segment.kv]\nlayers = 4\nplanes = 2\nblocks = 16\n"
				  "block_bytes = 65536\n"; /* 8 MiB */
#define SEG8 "[segment.kv]\nlayers = 4\nplanes = 2\nblocks = 16\nblock_bytes = 65536\n"

	if (load_good("no [memory]", NIC_LO) == 0)
		CHECK_INT(cfg.memory.pool_size_mb, 0);
	if (load_good("pool 0 whatever chunk_size_kb says",
		      "[memory]\npool_size_mb = 0\nchunk_size_kb = 1048576\n" NIC_LO) == 0)
		CHECK_INT(cfg.memory.pool_size_mb, 0);
	/* 8 MiB of segment + 2 NICs x 4 MiB of staging = 16 MiB: fits exactly */
	if (load_good("segments and staging fit",
		      "[memory]\npool_size_mb = 16\nchunk_size_kb = 1024\n[sched]\nstaging_mb = 4\n"
		      "[nic.a]\ndevice = lo\ntransport = tcp\n"
		      "[nic.b]\ndevice = lo\nport = 2\ntransport = tcp\n" /* line 10 */
		      "[segment.kv]\nlayers = 4\nplanes = 2\nblocks = 16\nblock_bytes = 65536\n") ==
	    0)
		CHECK_INT(cfg.memory.pool_size_mb, 16);
	expect_bad(
		"segments + staging over the pool",
		"[memory]\npool_size_mb = 14\nchunk_size_kb = 1024\n[sched]\nstaging_mb = 4\n"
		"[nic.a]\ndevice = lo\ntransport = tcp\n"
		"[nic.b]\ndevice = lo\nport = 2\ntransport = tcp\n"
		"[segment.kv]\nlayers = 4\nplanes = 2\nblocks = 16\nblock_bytes = 65536\n",
		1, "t.ini:2: memory.pool_size_mb:",
		"14 MiB cannot hold 1 [segment.*] (8 MiB) + sched.staging_mb on 2 NICs (8 MiB) = "
		"16 MiB in 1024 KiB chunks; raise it to at least 16, or 0 to take them from DPDK "
		"memory");
	/* Staging in VRAM takes nothing of the pool: 8 MiB of segment in a 10 MiB pool beside
	 * 2 x 64 MiB of staging, with staging = gpu (tier: tcp NICs allowed), or auto on RDMA
	 * NICs; auto with a tcp NIC, or with transport = auto (which may become tcp), stays in
	 * host memory and is counted. */
	if (load_good("staging = gpu is not the pool's",
		      "[memory]\npool_size_mb = 10\nchunk_size_kb = 1024\n[gpu]\nenable = true\n"
		      "[sched]\nstaging_mb = 64\nstaging = gpu\ntier = true\n"
		      "[nic.a]\ndevice = lo\ntransport = tcp\n"
		      "[nic.b]\ndevice = lo\nport = 2\ntransport = tcp\n" SEG8) == 0)
		CHECK_INT(cfg.memory.pool_size_mb, 10);
	if (load_good(
		    "staging = auto, GPU on, RDMA NICs: VRAM",
		    "[memory]\npool_size_mb = 10\nchunk_size_kb = 1024\n[gpu]\nenable = true\n"
		    "[sched]\nstaging_mb = 64\n[nic.a]\ndevice = rxe0\ntransport = verbs\n" SEG8) ==
	    0)
		CHECK_INT(cfg.memory.pool_size_mb, 10);
	expect_bad("staging = auto, GPU on, a tcp NIC: host memory, counted",
		   "[memory]\npool_size_mb = 10\nchunk_size_kb = 1024\n[gpu]\nenable = true\n"
		   "[sched]\nstaging_mb = 64\n[nic.a]\ndevice = lo\ntransport = tcp\n" SEG8,
		   1, "t.ini:2: memory.pool_size_mb:",
		   "10 MiB cannot hold 1 [segment.*] (8 MiB) + sched.staging_mb on 1 NIC (64 MiB)");
	expect_bad("staging = auto, GPU on, transport = auto: may be tcp, counted",
		   "[memory]\npool_size_mb = 10\nchunk_size_kb = 1024\n[gpu]\nenable = true\n"
		   "[sched]\nstaging_mb = 64\n[nic.a]\ndevice = lo\n" SEG8,
		   1, "t.ini:2: memory.pool_size_mb:", "+ sched.staging_mb on 1 NIC (64 MiB)");
	/* each segment takes whole chunks: 3 x 1 KiB blocks still take one 2 MiB chunk each */
	expect_bad("rounded up to whole chunks",
		   "[memory]\npool_size_mb = 2\nchunk_size_kb = 2048\n" NIC_LO
		   "[segment.a]\nblocks = 1\nplanes = 1\nblock_bytes = 1024\n"
		   "[segment.b]\nblocks = 1\nplanes = 1\nblock_bytes = 1024\n",
		   1, "t.ini:2: memory.pool_size_mb:",
		   "2 [segment.*] (4 MiB) + sched.staging_mb on 0 NICs (0 MiB) = 4 MiB in 2048 KiB "
		   "chunks; raise it to at least 4,");
	/* --set blames its own line, as every other key does */
	{
		const char *sets[] = { "segment.kv.blocks=64" };
		char path[] = "/tmp/kvl_test_memory_XXXXXX";
		int fd = mkstemp(path);
		FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
		int rc;

		CHECK(f != NULL);
		if (f == NULL)
			return;
		fprintf(f, "[memory]\npool_size_mb = 16\nchunk_size_kb = 1024\n" NIC_LO "%s", seg);
		fclose(f);
		rc = kvl_config_load_sets(path, sets, 1, &cfg, &errs);
		CHECK_INT(rc, -EINVAL);
		CHECK_INT(errs.count, 1);
		CHECK_HAS(errs.msg[0], ":2: memory.pool_size_mb: 16 MiB cannot hold 1 [segment.*] "
				       "(32 MiB)");
		unlink(path);
	}
}

/* ---- [eal] (issue 17): EAL's arguments from the INI ---- */
static void test_eal_keys(void)
{
	if (load_good("no [eal]", NIC_LO) == 0) {
		CHECK_STR(cfg.eal.lcores, "");
		CHECK_INT(cfg.eal.memory_mb, 0);
		CHECK(!cfg.eal.no_huge && !cfg.eal.in_memory && !cfg.eal.no_pci);
	}
	if (load_good("every [eal] key",
		      "[eal]\nlcores = 0@(0-1),1@(0-1)\nmemory_mb = 256\nfile_prefix = eng_1\n"
		      "no_huge = true\nno_pci = true\n"
		      "extra_args = --log-level=lib.eal:info  --vdev=net_null0\n" NIC_LO) == 0) {
		CHECK_STR(cfg.eal.lcores, "0@(0-1),1@(0-1)");
		CHECK_INT(cfg.eal.memory_mb, 256);
		CHECK_STR(cfg.eal.file_prefix, "eng_1");
		CHECK(cfg.eal.no_huge && cfg.eal.no_pci && !cfg.eal.in_memory);
		CHECK_STR(cfg.eal.extra_args, "--log-level=lib.eal:info  --vdev=net_null0");
	}
	expect_bad("lcores with a letter", "[eal]\nlcores = 0-a\n" NIC_LO, 1,
		   "t.ini:2: eal.lcores:", "an EAL --lcores map of digits");
	expect_bad("file_prefix with a slash", "[eal]\nfile_prefix = a/b\n" NIC_LO, 1,
		   "t.ini:2: eal.file_prefix:", "a name of letters");
	expect_bad("memory_mb not a number", "[eal]\nmemory_mb = lots\n" NIC_LO, 1,
		   "t.ini:2: eal.memory_mb:", "an integer in 0..4194304");
	expect_bad("no_huge with in_memory", "[eal]\nin_memory = true\nno_huge = yes\n" NIC_LO, 1,
		   "t.ini:3: eal.no_huge:", "EAL cannot combine --no-huge with --in-memory");
	expect_bad("a quote in extra_args", "[eal]\nextra_args = --vdev='net_null0'\n" NIC_LO, 1,
		   "t.ini:2: eal.extra_args:", "without quotes");
	expect_bad("an own key in extra_args", "[eal]\nno_pci = true\nextra_args = -m256\n" NIC_LO,
		   1, "t.ini:3: eal.extra_args:", "-m256 has its own key, eal.memory_mb");
	expect_bad("--lcores= in extra_args", "[eal]\nextra_args = --lcores=0@0\n" NIC_LO, 1,
		   "t.ini:2: eal.extra_args:", "has its own key, eal.lcores");
	expect_bad("-- in extra_args", "[eal]\nextra_args = --no-shconf -- x\n" NIC_LO, 1,
		   "t.ini:2: eal.extra_args:", "\"--\" would end EAL's arguments");
	/* --log-level starts like neither -l nor --lcores: taken */
	if (load_good("--log-level is not -l", "[eal]\nextra_args = --log-level=8\n" NIC_LO) == 0)
		CHECK_STR(cfg.eal.extra_args, "--log-level=8");
}

int main(void)
{
	kvl_config_defaults(&defaults);
	CHECK_INT(defaults.n_nics, 0);
	CHECK_STR(defaults.path, "");

	test_bad_table();
	test_bad_generated();
	test_many_errors();
	test_good();
	test_shipped();
	test_docs();
	test_fixed_bugs();
	test_peer_lines();
	test_mutations();
	test_paths_and_sets();
	test_sched_keys();
	test_memory_keys();
	test_eal_keys();
	return kvl_test_done("config");
}
