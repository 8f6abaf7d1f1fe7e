/* SPDX-License-Identifier: BSD-3-Clause */
/* kvlaned: parse kvlane's arguments and INI first, then start EAL, the lcores and telemetry. */
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <rte_cycles.h>
#include <rte_eal.h>
#include <rte_errno.h>
#include <rte_lcore.h>

#include "args.h"
#include "control/control.h"
#include "doctor.h"
#include "kvlane/kvlane.h"
#include "lifecycle.h"
#include "prometheus.h"
#include "runtime.h"
#include "segments.h"
#include "staging.h"
#include "telemetry.h"

enum {
	EXIT_USAGE = 2,
	EXIT_CONFIG = 3,
	EXIT_HOST = 4,
	EXIT_EAL = 5,
};

static volatile sig_atomic_t stop_signal;

static void on_signal(int sig)
{
	stop_signal = sig;
}

static int install_signals(void)
{
	struct sigaction sa;

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_signal;
	sigemptyset(&sa.sa_mask);
	if (sigaction(SIGINT, &sa, NULL) < 0 || sigaction(SIGTERM, &sa, NULL) < 0)
		return -errno;
	return 0;
}

/* Waits for a signal or the end of --run-seconds: housekeeping (free VRAM into the budget)
 * is the control thread's, or the runtime's own sampler thread's without one. */
static void main_loop(struct kvl_runtime *rt, unsigned run_seconds)
{
	uint64_t end = run_seconds ? rte_get_tsc_cycles() + (uint64_t)run_seconds * rt->tsc_hz : 0;

	while (!stop_signal) {
		if (end && rte_get_tsc_cycles() >= end)
			break;
		rte_delay_us_sleep(1000);
	}
}

static void print_segment(void *arg, const struct kvl_local_seg *s)
{
	(void)arg;
	printf("  segment %u \"%s\": %llu MiB (%u layers x %u planes x %u blocks x %u B), "
	       "peers may %s%s\n",
	       s->desc.id, s->desc.name, (unsigned long long)(s->desc.length >> 20),
	       s->desc.n_layers, s->desc.n_planes, s->desc.block_count, s->desc.block_size,
	       s->desc.flags & KVL_SEG_REMOTE_READ ? "read" : "",
	       s->desc.flags == (KVL_SEG_REMOTE_READ | KVL_SEG_REMOTE_WRITE) ? " and write"
	       : s->desc.flags & KVL_SEG_REMOTE_WRITE			     ? "write"
									     : "");
}

static void print_summary(const struct kvl_runtime *rt, double secs)
{
	struct kvl_lcore_stats s, tot = { 0 };
	const char *why = stop_signal == SIGINT	   ? "SIGINT"
			  : stop_signal == SIGTERM ? "SIGTERM"
						   : "run-seconds elapsed";

	for (unsigned i = 0; i < rt->cfg.n_nics; i++) {
		kvl_lcore_stats_read(rt->nic[i].lcore, &s);
		tot.iterations += s.iterations;
		tot.busy_cycles += s.busy_cycles;
		tot.idle_cycles += s.idle_cycles;
	}
	printf("kvlaned: stopped (%s) after %.2f s: %u NIC lcore%s, %llu loop iterations, "
	       "%.1f%% busy\n",
	       why, secs, rt->cfg.n_nics, rt->cfg.n_nics == 1 ? "" : "s",
	       (unsigned long long)tot.iterations, kvl_lcore_busy_pct(&tot));
}

/*
 * --doctor: kvlane-doctor's checks on the INI's NICs before anything starts. Returns 0 to go
 * on, or the exit status: a FAIL is a condition kvlaned does not start under, or under which
 * nothing can move on that NIC (runtime/doctor.h), so it refuses and names each with its fix.
 */
static int run_doctor(const struct kvl_args *a)
{
	static struct kvl_conf_errors errs;
	static struct kvl_doc_report rep;
	static struct kvl_doc_cuda cuda;
	static struct kvl_doc_firewall fw;
	static struct kvl_config cfg;
	struct kvl_doc_opts o = { .sysfs_root = a->sysfs_root, .have_ini = true };
	char lcores[256];

	if (kvl_config_load_sets(a->config, a->sets, a->n_sets, &cfg, &errs) < 0)
		return 0; /* the start-up reports the INI's errors, as without --doctor */
	if (kvl_doctor_eal_lcores(a->eal_argc, a->eal_argv, lcores, sizeof(lcores)) == 0)
		o.lcores = lcores;
	kvl_doctor_probe_cuda(&cfg, false, a->sysfs_root, &cuda);
	o.cuda = &cuda;
	if (strcmp(a->sysfs_root, "/sys") == 0) { /* a fixture tree's host is not this one */
		kvl_doctor_read_firewall(&fw);
		o.firewall = &fw;
	}
	kvl_doctor_run(&cfg, &o, &rep);
	printf("kvlaned: --doctor (kvlane-doctor's checks on %s):\n", a->config);
	kvl_doctor_print(stdout, &rep, true);
	if (rep.count[KVL_DOC_FAIL] == 0)
		return 0;
	for (unsigned k = 0; k < rep.n; k++)
		if (rep.rows[k].verdict == KVL_DOC_FAIL)
			fprintf(stderr, "kvlaned: --doctor: FAIL %s %s: %s; fix: %s\n",
				rep.rows[k].check, rep.rows[k].subject, rep.rows[k].observed,
				rep.rows[k].fix);
	fprintf(stderr, "kvlaned: --doctor found %u FAIL%s: not started\n", rep.count[KVL_DOC_FAIL],
		rep.count[KVL_DOC_FAIL] == 1 ? "" : "s");
	return EXIT_HOST;
}

int main(int argc, char **argv)
{
	static struct kvl_conf_errors errs;
	static struct kvl_config cfg;
	struct kvl_start_args sa;
	struct kvl_runtime *rtp;
	struct kvl_args a;
	char err[8192];
	int rc, stage = 0;
	uint64_t t0;

	setvbuf(stdout, NULL, _IOLBF, 0);
	if (kvl_args_parse(argc, argv, &a, err, sizeof(err)) < 0) {
		fprintf(stderr, "kvlaned: %s\n", err);
		return EXIT_USAGE;
	}
	if (a.help) {
		kvl_args_usage(argv[0], stdout);
		return 0;
	}
	if (a.version) {
		printf("kvlaned %s\n", KVL_VERSION);
		return 0;
	}
	if (a.print_config) {
		rc = kvl_config_load_sets(a.config, a.sets, a.n_sets, &cfg, &errs);
		if (rc == 0) {
			kvl_config_print(stdout, &cfg);
			return 0;
		}
		for (unsigned i = 0; i < errs.count; i++)
			fprintf(stderr, "%s\n", errs.msg[i]);
		fprintf(stderr, "kvlaned: %s: %u error%s; nothing started\n", a.config,
			errs.count + errs.dropped, errs.count + errs.dropped == 1 ? "" : "s");
		return EXIT_CONFIG;
	}
	if (a.doctor) {
		rc = run_doctor(&a);
		if (rc)
			return rc;
	}
	rc = install_signals();
	if (rc < 0) {
		fprintf(stderr, "kvlaned: cannot install signal handlers: %s\n", strerror(-rc));
		return EXIT_HOST;
	}
	sa = (struct kvl_start_args){ .eal_argc = a.eal_argc,
				      .eal_argv = a.eal_argv,
				      .config = a.config,
				      .sets = a.sets,
				      .n_sets = a.n_sets,
				      .sysfs_root = a.sysfs_root };
	rtp = kvl_start(&sa, err, sizeof(err), &stage);
	if (rtp == NULL) {
		unsigned lines = 1;

		for (const char *p = err; *p; p++)
			lines += *p == '\n';
		if (stage == KVL_START_CONFIG) {
			fprintf(stderr, "%s\nkvlaned: %s: %u error%s; nothing started\n", err,
				a.config, lines, lines == 1 ? "" : "s");
			return EXIT_CONFIG;
		}
		if (stage == KVL_START_EAL) {
			fprintf(stderr, "kvlaned: %s before \"--\" (kvlaned --help)\n", err);
			return EXIT_EAL;
		}
		/* Host errors may span lines (one per NIC): each gets the prefix. */
		for (char *line = strtok(err, "\n"); line; line = strtok(NULL, "\n"))
			fprintf(stderr, "kvlaned: %s\n", line);
		fprintf(stderr, "kvlaned: not started\n");
		return EXIT_HOST;
	}
	printf("kvlaned %s \"%s\": %u NIC%s, %u lcores (main %u), idle policy %s, config %s\n",
	       KVL_VERSION, rtp->cfg.runtime.name, rtp->cfg.n_nics, rtp->cfg.n_nics == 1 ? "" : "s",
	       rte_lcore_count(), rtp->main_lcore,
	       kvl_idle_policy_name(rtp->cfg.runtime.idle_policy), rtp->cfg.path);
	kvl_runtime_print(rtp, stdout);
	if (rtp->gpu.open)
		printf("  gpu %d: %s (%s), %llu MiB total, %llu MiB free, reserve %u MiB, "
		       "GPUDirect RDMA %s\n",
		       rtp->gpu.device_id, rtp->gpu.name, rtp->gpu.pci_bus_id,
		       (unsigned long long)(rtp->gpu.total_bytes >> 20),
		       (unsigned long long)(rtp->gpu.free_bytes >> 20),
		       rtp->cfg.gpu.vram_reserve_mb,
		       rtp->gpu.gpudirect_rdma ? "supported" : "not supported");
	else
		printf("  gpu: none ([gpu] enable = false); staging budget %u MiB from [sched]\n",
		       rtp->cfg.sched.budget_mb);
	if (rtp->cfg.telemetry.enable)
		printf("  telemetry: %s/dpdk_telemetry.v2 (/kvlane/info, /kvlane/config, "
		       "/kvlane/lcores, /kvlane/nics, /kvlane/gpu; /help lists them)\n",
		       rte_eal_get_runtime_dir());
	else
		printf("  telemetry: off ([telemetry] enable = false)\n");
	if (kvl_prom_addr())
		printf("  prometheus: http://%s/metrics\n", kvl_prom_addr());
	kvl_segs_visit(&rtp->segs, print_segment, NULL);
	if (kvl_control_enabled(rtp))
		printf("  control: listening on %s (authenticated with %s)\n", kvl_listen_addr(rtp),
		       rtp->cfg.control.secret_file);
	else
		printf("  control: off (no [control] secret_file): no peers\n");
	printf("kvlaned: ready\n");

	t0 = rte_get_tsc_cycles();
	main_loop(rtp, a.run_seconds);
	/* Stop the loops first, so the summary counts everything they did. */
	kvl_telemetry_attach(NULL);
	kvl_runtime_stop(rtp);
	print_summary(rtp, (double)(rte_get_tsc_cycles() - t0) / (double)rtp->tsc_hz);
	kvl_stop(rtp);
	return 0;
}
