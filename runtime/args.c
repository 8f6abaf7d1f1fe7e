/* SPDX-License-Identifier: BSD-3-Clause */
/* kvlaned's command line: split at "--", parse kvlane's arguments without EAL. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "args.h"

void kvl_args_usage(const char *prog, FILE *fp)
{
	fprintf(fp,
		"Usage: %s [EAL options] -- -c FILE.ini [options]\n"
		"\n"
		"kvlane daemon: one polling lcore per NIC, paired by NUMA node, observed through\n"
		"DPDK telemetry (/kvlane/info, /kvlane/config, /kvlane/lcores, /kvlane/nics).\n"
		"\n"
		"EAL options come first, as for any DPDK application; the main lcore runs control\n"
		"and housekeeping and each NIC needs one more worker lcore, e.g.\n"
		"  %s -l 0-1 --no-huge -m 256 --no-pci --file-prefix demo -- -c "
		"config/default.ini\n"
		"With none (%s -- -c FILE.ini), EAL's come from the INI's [eal] section.\n"
		"\n"
		"kvlane options (after --):\n"
		"  -c, --config FILE     INI configuration (required; see config/README.md)\n"
		"  -p, --print-config    print the effective configuration (defaults filled in)\n"
		"                        as INI and exit; nothing is started\n"
		"      --set SEC.KEY=VAL override one INI key (repeatable), e.g.\n"
		"                        --set control.listen=127.0.0.1:0\n"
		"      --sysfs-root DIR  read NICs and NUMA topology from DIR instead of /sys\n"
		"                        (fixture trees for tests and dry runs: RDMA devices\n"
		"                        are then not opened)\n"
		"      --run-seconds N   stop by itself after N seconds (default 0: run until\n"
		"                        SIGINT or SIGTERM)\n"
		"      --doctor          run kvlane-doctor's checks on the INI's NICs and this\n"
		"                        host first (the lcore checks read -l); print the WARN\n"
		"                        and FAIL lines with their fixes, and refuse to start on\n"
		"                        a FAIL (exit 4); docs/doctor.md\n"
		"  -V, --version         print the version and exit\n"
		"  -h, --help            this text\n"
		"\n"
		"Exit status: 0 stopped cleanly (also on SIGINT/SIGTERM), 2 bad command line,\n"
		"3 configuration error, 4 host error (NIC not found, no lcore for a NIC),\n"
		"5 EAL initialisation failed.\n",
		prog, prog, prog);
}

static int fail(char *err, size_t errlen, const char *fmt, const char *arg)
{
	snprintf(err, errlen, fmt, arg);
	return -EINVAL;
}

int kvl_args_parse(int argc, char **argv, struct kvl_args *a, char *err, size_t errlen)
{
	int dd = -1, i;

	memset(a, 0, sizeof(*a));
	a->sysfs_root = "/sys";
	err[0] = '\0';
	for (i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--") == 0) {
			dd = i;
			break;
		}
		/* --help before "--" is ours too: EAL's own usage says nothing about kvlane. */
		if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0)
			a->help = true;
		if (strcmp(argv[i], "-V") == 0 || strcmp(argv[i], "--version") == 0)
			a->version = true;
	}
	a->eal_argc = dd < 0 ? argc : dd;
	a->eal_argv = argv;
	if (dd < 0) {
		if (a->help || a->version)
			return 0;
		return fail(
			err, errlen,
			"no kvlane arguments: put them after \"--\", e.g. %s [EAL options] -- -c "
			"config/default.ini",
			argv[0]);
	}
	for (i = dd + 1; i < argc; i++) {
		const char *o = argv[i];
		bool has_val = strcmp(o, "-c") == 0 || strcmp(o, "--config") == 0 ||
			       strcmp(o, "--sysfs-root") == 0 || strcmp(o, "--run-seconds") == 0 ||
			       strcmp(o, "--set") == 0;
		const char *v = NULL;

		if (has_val) {
			if (i + 1 >= argc || argv[i + 1][0] == '\0')
				return fail(err, errlen, "%s needs a value", o);
			v = argv[++i];
		}
		if (strcmp(o, "-c") == 0 || strcmp(o, "--config") == 0) {
			if (a->config)
				return fail(err, errlen, "%s given twice", o);
			a->config = v;
		} else if (strcmp(o, "--set") == 0) {
			if (a->n_sets == KVL_ARGS_MAX_SETS)
				return fail(err, errlen, "at most %s --set options",
					    "32"); /* KVL_ARGS_MAX_SETS */
			a->sets[a->n_sets++] = v;
		} else if (strcmp(o, "--sysfs-root") == 0) {
			a->sysfs_root = v;
		} else if (strcmp(o, "--run-seconds") == 0) {
			char *end;
			unsigned long n;

			errno = 0;
			n = strtoul(v, &end, 10);
			if (errno || *end || v[0] == '-' || n > 86400 * 365)
				return fail(
					err, errlen,
					"--run-seconds: expected a whole number of seconds, got "
					"\"%s\"",
					v);
			a->run_seconds = (unsigned)n;
		} else if (strcmp(o, "--doctor") == 0) {
			a->doctor = true;
		} else if (strcmp(o, "-p") == 0 || strcmp(o, "--print-config") == 0) {
			a->print_config = true;
		} else if (strcmp(o, "-h") == 0 || strcmp(o, "--help") == 0) {
			a->help = true;
		} else if (strcmp(o, "-V") == 0 || strcmp(o, "--version") == 0) {
			a->version = true;
		} else {
			return fail(err, errlen, "unknown option \"%s\" (see --help)", o);
		}
	}
	if (!a->help && !a->version && a->config == NULL)
		return fail(err, errlen, "%s", "no configuration: -c FILE.ini is required");
	return 0;
}
