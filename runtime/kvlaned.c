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
#include "runtime.h"

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

/* EAL's argv plus "--no-telemetry" when the INI turns telemetry off. */
static char **eal_argv_for(const struct kvl_args *a, const struct kvl_config *cfg, int *argc)
{
	char **v = calloc((size_t)a->eal_argc + 2, sizeof(*v));
	int n = 0;

	if (v == NULL)
		return NULL;
	for (int i = 0; i < a->eal_argc; i++)
		v[n++] = a->eal_argv[i];
	if (!cfg->telemetry.enable)
		v[n++] = (char *)"--no-telemetry";
	v[n] = NULL;
	*argc = n;
	return v;
}

/* Housekeeping on the main lcore: VRAM sampling now; the control path and timers later. */
static void main_loop(struct kvl_runtime *rt, unsigned run_seconds)
{
	uint64_t now = rte_get_tsc_cycles();
	uint64_t end = run_seconds ? now + (uint64_t)run_seconds * rt->tsc_hz : 0;
	uint64_t interval = rt->tsc_hz * rt->cfg.sched.resize_interval_ms / 1000;
	uint64_t next_sample = now + interval;
	unsigned nap_us = 10000;

	if (rt->gpu.open && rt->cfg.sched.resize_interval_ms * 1000 < nap_us)
		nap_us = rt->cfg.sched.resize_interval_ms * 1000;
	while (!stop_signal) {
		now = rte_get_tsc_cycles();
		if (end && now >= end)
			break;
		if (rt->gpu.open && now >= next_sample) {
			kvl_gpu_sample(&rt->gpu);
			next_sample = now + interval;
		}
		rte_delay_us_sleep(nap_us);
	}
}

static void print_summary(const struct kvl_runtime *rt, double secs)
{
	struct kvl_lcore_stats s, tot = { 0 };
	const char *why = stop_signal == SIGINT	   ? "SIGINT"
			  : stop_signal == SIGTERM ? "SIGTERM"
						   : "run-seconds elapsed";

	for (unsigned i = 0; i < rt->cfg.n_nics; i++) {
		kvl_lcore_stats_read(rt->nic_lcore[i], &s);
		tot.iterations += s.iterations;
		tot.busy_cycles += s.busy_cycles;
		tot.idle_cycles += s.idle_cycles;
	}
	printf("kvlaned: stopped (%s) after %.2f s: %u NIC lcore%s, %llu loop iterations, "
	       "%.1f%% busy\n",
	       why, secs, rt->cfg.n_nics, rt->cfg.n_nics == 1 ? "" : "s",
	       (unsigned long long)tot.iterations, kvl_lcore_busy_pct(&tot));
}

int main(int argc, char **argv)
{
	static struct kvl_runtime rt; /* large: keep it off the stack */
	static struct kvl_conf_errors errs;
	struct kvl_args a;
	char err[4096], **eal_argv;
	int eal_argc, rc;
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

	/* Everything that can be wrong in the INI is found before anything starts. */
	rc = kvl_config_load_sets(a.config, a.sets, a.n_sets, &rt.cfg, &errs);
	if (rc < 0) {
		for (unsigned i = 0; i < errs.count; i++)
			fprintf(stderr, "%s\n", errs.msg[i]);
		if (errs.dropped)
			fprintf(stderr, "(%u more errors not shown)\n", errs.dropped);
		fprintf(stderr, "kvlaned: %s: %u error%s; nothing started\n", a.config,
			errs.count + errs.dropped, errs.count + errs.dropped == 1 ? "" : "s");
		return EXIT_CONFIG;
	}
	if (a.print_config) {
		kvl_config_print(stdout, &rt.cfg);
		return 0;
	}
	snprintf(rt.sysfs_root, sizeof(rt.sysfs_root), "%s", a.sysfs_root);
	if (kvl_runtime_discover(&rt, err, sizeof(err)) < 0) {
		fprintf(stderr, "%s\nkvlaned: host check failed; nothing started\n", err);
		return EXIT_HOST;
	}

	eal_argv = eal_argv_for(&a, &rt.cfg, &eal_argc);
	if (eal_argv == NULL) {
		fprintf(stderr, "kvlaned: out of memory\n");
		return EXIT_EAL;
	}
	rc = rte_eal_init(eal_argc, eal_argv);
	if (rc < 0) {
		/* Some EAL failures (a --file-prefix already in use) leave rte_errno at 0: then
		 * EAL's own lines above are the explanation. */
		fprintf(stderr,
			"kvlaned: EAL initialisation failed: %s; check the EAL arguments before "
			"\"--\" (kvlaned --help)\n",
			rte_errno ? rte_strerror(rte_errno) : "see EAL's messages above");
		free(eal_argv);
		return EXIT_EAL;
	}
	rc = install_signals();
	if (rc == 0)
		rc = kvl_runtime_start(&rt, err, sizeof(err));
	if (rc < 0) {
		fprintf(stderr, "kvlaned: %s\nkvlaned: not started\n",
			err[0] ? err : strerror(-rc));
		rte_eal_cleanup();
		free(eal_argv);
		return EXIT_HOST;
	}
	kvl_telemetry_attach(&rt);

	printf("kvlaned %s \"%s\": %u NIC%s, %u lcores (main %u), idle policy %s, config %s\n",
	       KVL_VERSION, rt.cfg.runtime.name, rt.cfg.n_nics, rt.cfg.n_nics == 1 ? "" : "s",
	       rte_lcore_count(), rt.main_lcore, kvl_idle_policy_name(rt.cfg.runtime.idle_policy),
	       rt.cfg.path);
	kvl_runtime_print(&rt, stdout);
	if (rt.gpu.open)
		printf("  gpu %d: %s (%s), %llu MiB total, %llu MiB free, reserve %u MiB, "
		       "GPUDirect RDMA %s\n",
		       rt.gpu.device_id, rt.gpu.name, rt.gpu.pci_bus_id,
		       (unsigned long long)(rt.gpu.total_bytes >> 20),
		       (unsigned long long)(rt.gpu.free_bytes >> 20), rt.cfg.gpu.vram_reserve_mb,
		       rt.gpu.gpudirect_rdma ? "supported" : "not supported");
	else
		printf("  gpu: none ([gpu] enable = false); staging budget %u MiB from [sched]\n",
		       rt.cfg.sched.budget_mb);
	if (rt.cfg.telemetry.enable)
		printf("  telemetry: %s/dpdk_telemetry.v2 (/kvlane/info, /kvlane/config, "
		       "/kvlane/lcores, /kvlane/nics, /kvlane/gpu; /help lists them)\n",
		       rte_eal_get_runtime_dir());
	else
		printf("  telemetry: off ([telemetry] enable = false)\n");
	printf("kvlaned: ready\n");

	t0 = rte_get_tsc_cycles();
	main_loop(&rt, a.run_seconds);
	kvl_runtime_stop(&rt);
	kvl_telemetry_attach(NULL);
	print_summary(&rt, (double)(rte_get_tsc_cycles() - t0) / (double)rt.tsc_hz);
	/* The lcore states stay: a telemetry reply may still be reading them, and
	 * rte_eal_cleanup() releases EAL memory as a whole. */
	rte_eal_cleanup();
	free(eal_argv);
	return 0;
}
