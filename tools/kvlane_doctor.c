/* SPDX-License-Identifier: BSD-3-Clause */
/* kvlane-doctor: check a host (and an INI's NICs) against the RDMA checklists, with fixes. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <inttypes.h>
#include <time.h>

#include "config.h"
#include "control/control.h"
#include "ctrl_proto.h"
#include "doctor.h"
#include "kvlane/kvlane.h"

static void usage(FILE *fp, const char *prog)
{
	fprintf(fp,
		"Usage: %s [-c FILE.ini] [options] [--peer HOST:PORT [-- EAL options]]\n"
		"\n"
		"Checks this host the way the RDMA checklists do by hand, each line PASS, WARN,\n"
		"FAIL or SKIP with what was observed, what was expected and the fix: RDMA devices\n"
		"and kernel modules; per NIC the device, port state (ibstat), link layer, the GID\n"
		"table (show_gids) against gid_index, lid/pkey on InfiniBand, the port MTU "
		"against\n"
		"the netdev's and the INI's; ulimit -l against what the INI pins; hugepages for\n"
		"[memory]; PCIe width and speed of the NIC and its GPU (trained down?) and the\n"
		"ceiling against the port's rate; NIC <-> NUMA node <-> lcores; GPU <-> NIC\n"
		"distance (PIX/PXB/PHB/NODE/SYS); GPUDirect (nvidia_peermem or dma-buf); the\n"
		"CUDA device, its GPUDirect RDMA attribute and free VRAM against the reserve; the\n"
		"polling cores' isolation, governor and the NIC's IRQs; UDP 4791 and the control\n"
		"port against iptables-save / nft list ruleset. docs/doctor.md explains\n"
		"every line.\n"
		"\n"
		"Without -c, every RDMA device of the host is checked with the INI defaults.\n"
		"\n"
		"Options:\n"
		"  -c, --config FILE     the INI kvlaned runs with: its NICs, gid_index, mtu,\n"
		"                        [memory], [gpu], [runtime] idle_policy\n"
		"      --set SEC.KEY=VAL override one INI key (repeatable), as kvlaned takes it\n"
		"  -l, --lcores LIST     the CPUs given to EAL (-l), main lcore first, e.g. 0-3:\n"
		"                        enables the NUMA, isolation, governor and IRQ checks\n"
		"      --json            one JSON object instead of the table\n"
		"  -q, --quiet           print only WARN and FAIL lines and the totals, and\n"
		"                        exit 0 on warnings (systemd's ExecStartPre)\n"
		"      --sysfs-root DIR  read DIR instead of /sys (fixture trees in tests)\n"
		"      --proc-root DIR   read DIR instead of /proc (limits, IRQs, kernel release)\n"
		"      --no-gpu          do not open the GPU through CUDA (the cuda_gpu check);\n"
		"                        by default it is opened as kvlaned would, when [gpu]\n"
		"                        enable = true, or without -c when sysfs shows a GPU\n"
		"  -h, --help            this text\n"
		"\n"
		"Two ends (--peer HOST:PORT, with -c): this host's checks, then the peer "
		"kvlaned's\n"
		"over the authenticated control path ([control] secret_file): both ends' MTU, GID\n"
		"type (RoCE v1 vs v2), link layer, port rate and traffic class compared NIC by "
		"NIC\n"
		"in INI order (the peer logs the same mismatches), then a short link test: READs "
		"of\n"
		"--size bytes (default 1M) from the peer's first readable segment for --seconds\n"
		"(default 1), GB/s against the slower port's rate: >= 80%% healthy, < 50%% look\n"
		"at PCIe and NUMA first. It starts a kvlane runtime (EAL options after --, else\n"
		"the INI's [eal]) whose control listener is 127.0.0.1:0.\n"
		"      --peer HOST:PORT  the peer kvlaned's [control] listen\n"
		"      --size SIZE       link test message size in bytes (K, M suffixes; default "
		"1M)\n"
		"      --seconds S       link test duration (default 1, at most 60)\n"
		"      --rate-gbps N     the rate to judge the link test against where sysfs has\n"
		"                        none (tcp on lo or a veth)\n"
		"\n"
		"Exit status: 0 every check passed (or was skipped), 1 a WARN (0 with -q), 2 a "
		"FAIL,\n"
		"3 bad command line or INI.\n",
		prog);
}

/* ---- --peer: the two ends ---- */

struct peer_args {
	const char *peer, *ini;
	const char **sets;
	unsigned n_sets;
	uint32_t size;
	double seconds;
	uint32_t rate_mbps; /* --rate-gbps; 0: the ports' */
	int eal_argc;
	char **eal_argv;
};

#define TEST_DEPTH 8

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static void fail_row(struct kvl_doc_report *r, const char *check, const char *subject,
		     const char *observed, const char *expected, const char *fix)
{
	struct kvl_doc_row *w;

	if (r->n >= KVL_DOC_MAX_ROWS)
		return;
	w = &r->rows[r->n++];
	memset(w, 0, sizeof(*w));
	snprintf(w->check, sizeof(w->check), "%s", check);
	snprintf(w->subject, sizeof(w->subject), "%s", subject);
	w->verdict = KVL_DOC_FAIL;
	snprintf(w->observed, sizeof(w->observed), "%s", observed);
	snprintf(w->expected, sizeof(w->expected), "%s", expected);
	snprintf(w->fix, sizeof(w->fix), "%s", fix);
	r->count[KVL_DOC_FAIL]++;
}

/*
 * The link test: READs of @size bytes from the peer's first readable segment, TEST_DEPTH in
 * flight, for @seconds, over the same kvl_post / kvl_poll path kvlane-perf measures. Returns
 * GB/s, or a negative errno with @why.
 */
static double link_test(struct kvl_runtime *rt, kvl_peer_t peer, uint32_t size, double seconds,
			char *why, size_t whylen)
{
	static struct kvl_remote_seg segs[64];
	struct kvl_seg_geom g = {
		.layers = 1, .planes = 1, .blocks = TEST_DEPTH, .block_bytes = size
	};
	struct kvl_segment local;
	struct kvl_completion cpl[TEST_DEPTH];
	const struct kvl_remote_seg *rs = NULL;
	uint64_t bytes = 0, slots, next = 0;
	unsigned inflight = 0;
	double t0, t1;
	int n = kvl_peer_segments(rt, peer, segs, 64), rc;

	for (int i = 0; i < n && i < 64 && rs == NULL; i++)
		if ((segs[i].access & KVL_REMOTE_READ) && segs[i].length >= size)
			rs = &segs[i];
	if (rs == NULL) {
		snprintf(why, whylen,
			 "the peer offers no readable segment of %" PRIu32 " B or more", size);
		return -ENOENT;
	}
	rc = kvl_seg_alloc(rt, "doctor-link-test", &g, 0, &local);
	if (rc < 0) {
		snprintf(why, whylen, "no local segment of %u x %" PRIu32 " B: %s", TEST_DEPTH,
			 size, strerror(-rc));
		return rc;
	}
	slots = rs->length / size;
	t0 = now_s();
	t1 = t0 + seconds;
	while (now_s() < t1 || inflight) {
		while (inflight < TEST_DEPTH && now_s() < t1) {
			struct kvl_xfer x = {
				.cookie = next,
				.local = (uint8_t *)local.base + (next % TEST_DEPTH) * size,
				.remote_off = (next % slots) * size,
				.length = size,
				.remote_seg = rs->id,
				.op = KVL_READ,
			};

			rc = kvl_post(rt, peer, &x, 1);
			if (rc < 0) {
				snprintf(why, whylen, "kvl_post: %s", strerror(-rc));
				return rc;
			}
			if (rc == 0)
				break; /* queues full: reap first */
			inflight++;
			next++;
		}
		n = (int)kvl_poll(rt, cpl, TEST_DEPTH);
		for (int i = 0; i < n; i++) {
			inflight--;
			if (cpl[i].status != 0) {
				snprintf(why, whylen, "a READ completed with %s",
					 kvl_status_name(cpl[i].status));
				return -EIO;
			}
			bytes += cpl[i].bytes;
		}
		if (now_s() > t1 + 30) {
			snprintf(why, whylen, "%u READs still in flight 30 s after the test",
				 inflight);
			return -ETIMEDOUT;
		}
	}
	return (double)bytes / (now_s() - t0) / 1e9;
}

static void two_ended(const struct peer_args *pa, const struct kvl_config *cfg,
		      const struct kvl_doc_opts *o, struct kvl_doc_report *r)
{
	static struct kvl_ctrl_link mine[KVL_CTRL_MAX_EPS], theirs[KVL_CTRL_MAX_EPS];
	const char *sets[40];
	char err[1024], why[256], subj[112];
	struct kvl_start_args sa;
	struct kvl_runtime *rt;
	unsigned n_sets = 0, n_mine, n_theirs = 0;
	uint32_t rate;
	kvl_peer_t peer;
	int stage = 0, rc;
	double gbps;

	snprintf(subj, sizeof(subj), "peer %s", pa->peer);
	sets[n_sets++] = "control.listen=127.0.0.1:0"; /* this end only connects */
	sets[n_sets++] = "runtime.name=kvlane-doctor";
	for (unsigned i = 0; i < pa->n_sets && n_sets < 40; i++)
		sets[n_sets++] = pa->sets[i];
	sa = (struct kvl_start_args){ .eal_argc = pa->eal_argc,
				      .eal_argv = pa->eal_argv,
				      .config = pa->ini,
				      .sets = sets,
				      .n_sets = n_sets };
	rt = kvl_start(&sa, err, sizeof(err), &stage);
	if (rt == NULL) {
		fail_row(r, "peer_connect", subj, err, "a kvlane runtime here, to reach the peer",
			 "fix what the message says (EAL options after --, or the INI's [eal])");
		return;
	}
	rc = kvl_connect(rt, pa->peer, 10000, &peer, err, sizeof(err));
	if (rc < 0) {
		fail_row(r, "peer_connect", subj, err, "the peer kvlaned authenticated and READY",
			 "is kvlaned running there with this [control] listen, the same "
			 "secret_file and tls setting, and the port open?");
		kvl_stop(rt);
		return;
	}
	rc = kvl_control_doctor(rt, peer, 5000, theirs, KVL_CTRL_MAX_EPS, &n_theirs, err,
				sizeof(err));
	if (rc < 0) {
		fail_row(r, "peer_connect", subj, err, "the peer's DOCTOR answer",
			 "run the same kvlane version at both ends");
		kvl_stop(rt);
		return;
	}
	n_mine = kvl_doctor_links(o->sysfs_root, cfg, mine, KVL_CTRL_MAX_EPS);
	kvl_doctor_compare(mine, n_mine, theirs, n_theirs, "peer", r);
	rate = pa->rate_mbps;
	if (rate == 0 && n_mine && n_theirs && mine[0].rate_mbps && theirs[0].rate_mbps)
		rate = mine[0].rate_mbps < theirs[0].rate_mbps ? mine[0].rate_mbps
							       : theirs[0].rate_mbps;
	gbps = link_test(rt, peer, pa->size, pa->seconds, why, sizeof(why));
	if (gbps < 0)
		fail_row(r, "link_test", subj, why, "READs of the peer's segment complete OK",
			 "see the peer_* rows above and the peer's log");
	else
		kvl_doctor_link_verdict(subj, gbps, pa->size, rate, r);
	kvl_stop(rt);
}

int main(int argc, char **argv)
{
	static struct kvl_config cfg;
	static struct kvl_conf_errors errs;
	static struct kvl_doc_report rep;
	static struct kvl_doc_cuda cuda;
	static struct kvl_doc_firewall fw;
	struct kvl_doc_opts o = { 0 };
	const char *ini = NULL, *sets[32];
	unsigned n_sets = 0;
	bool json = false, quiet = false, no_gpu = false;
	struct peer_args pa = { .size = 1u << 20, .seconds = 1.0 };
	char **eal_argv = NULL;
	int eal_argc = 0;

	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];

		if (strcmp(a, "--") == 0) { /* EAL options for --peer's runtime */
			eal_argc = argc - i;
			eal_argv = argv + i; /* "--" stands for the program name */
			break;
		}
		bool val = strcmp(a, "-c") == 0 || strcmp(a, "--config") == 0 ||
			   strcmp(a, "--set") == 0 || strcmp(a, "-l") == 0 ||
			   strcmp(a, "--lcores") == 0 || strcmp(a, "--sysfs-root") == 0 ||
			   strcmp(a, "--proc-root") == 0 || strcmp(a, "--peer") == 0 ||
			   strcmp(a, "--size") == 0 || strcmp(a, "--seconds") == 0 ||
			   strcmp(a, "--rate-gbps") == 0;
		const char *v = NULL;

		if (val) {
			if (i + 1 >= argc || argv[i + 1][0] == '\0') {
				fprintf(stderr, "kvlane-doctor: %s needs a value\n", a);
				return 3;
			}
			v = argv[++i];
		}
		if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
			usage(stdout, argv[0]);
			return 0;
		} else if (strcmp(a, "-c") == 0 || strcmp(a, "--config") == 0) {
			ini = v;
		} else if (strcmp(a, "--set") == 0) {
			if (n_sets == 32) {
				fprintf(stderr, "kvlane-doctor: at most 32 --set options\n");
				return 3;
			}
			sets[n_sets++] = v;
		} else if (strcmp(a, "-l") == 0 || strcmp(a, "--lcores") == 0) {
			o.lcores = v;
		} else if (strcmp(a, "--sysfs-root") == 0) {
			o.sysfs_root = v;
		} else if (strcmp(a, "--proc-root") == 0) {
			o.proc_root = v;
		} else if (strcmp(a, "--peer") == 0) {
			pa.peer = v;
		} else if (strcmp(a, "--size") == 0) {
			char *end;
			unsigned long long n = strtoull(v, &end, 10);

			n <<= *end == 'K' || *end == 'k' ? 10 : *end == 'M' || *end == 'm' ? 20 : 0;
			if (*end && strchr("KkMm", *end))
				end++;
			if (*end || n == 0 || n > (64u << 20)) {
				fprintf(stderr, "kvlane-doctor: --size %s: expected 1 B .. 64M\n",
					v);
				return 3;
			}
			pa.size = (uint32_t)n;
		} else if (strcmp(a, "--seconds") == 0) {
			char *end;

			pa.seconds = strtod(v, &end);
			if (*end || !(pa.seconds > 0 && pa.seconds <= 60)) {
				fprintf(stderr,
					"kvlane-doctor: --seconds %s: expected 0 < S <= 60\n", v);
				return 3;
			}
		} else if (strcmp(a, "--rate-gbps") == 0) {
			char *end;
			double g = strtod(v, &end);

			if (*end || !(g > 0 && g <= 10000)) {
				fprintf(stderr,
					"kvlane-doctor: --rate-gbps %s: expected 0 < N <= 10000\n",
					v);
				return 3;
			}
			pa.rate_mbps = (uint32_t)(g * 1000);
		} else if (strcmp(a, "--no-gpu") == 0) {
			no_gpu = true;
		} else if (strcmp(a, "--json") == 0) {
			json = true;
		} else if (strcmp(a, "-q") == 0 || strcmp(a, "--quiet") == 0) {
			quiet = true;
		} else {
			fprintf(stderr, "kvlane-doctor: unknown option \"%s\" (see --help)\n", a);
			return 3;
		}
	}
	if (pa.peer && !ini) {
		fprintf(stderr,
			"kvlane-doctor: --peer needs -c FILE.ini (its [control] secret_file "
			"authenticates this end)\n");
		return 3;
	}
	if (n_sets && !ini) {
		fprintf(stderr, "kvlane-doctor: --set needs -c FILE.ini\n");
		return 3;
	}
	if (ini) {
		if (kvl_config_load_sets(ini, sets, n_sets, &cfg, &errs) < 0) {
			for (unsigned k = 0; k < errs.count; k++)
				fprintf(stderr, "%s\n", errs.msg[k]);
			fprintf(stderr, "kvlane-doctor: %s: %u error%s; nothing checked\n", ini,
				errs.count + errs.dropped,
				errs.count + errs.dropped == 1 ? "" : "s");
			return 3;
		}
		o.have_ini = true;
	} else {
		kvl_doctor_host_config(o.sysfs_root, &cfg);
	}
	if (!no_gpu) {
		kvl_doctor_probe_cuda(&cfg, !o.have_ini, o.sysfs_root, &cuda);
		o.cuda = &cuda;
	}
	if (!o.sysfs_root) { /* a fixture tree is not this host: its packet filter is not it */
		kvl_doctor_read_firewall(&fw);
		o.firewall = &fw;
	}
	kvl_doctor_run(&cfg, &o, &rep);
	if (pa.peer) {
		pa.ini = ini;
		pa.sets = sets;
		pa.n_sets = n_sets;
		pa.eal_argc = eal_argc;
		pa.eal_argv = eal_argv;
		two_ended(&pa, &cfg, &o, &rep);
	}
	if (json)
		kvl_doctor_print_json(stdout, &rep);
	else
		kvl_doctor_print(stdout, &rep, quiet);
	/* --quiet is for ExecStartPre: a WARN is in the journal, only a FAIL stops the start. */
	if (quiet && kvl_doctor_exit_code(&rep) == 1)
		return 0;
	return kvl_doctor_exit_code(&rep);
}
