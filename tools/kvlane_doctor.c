/* SPDX-License-Identifier: BSD-3-Clause */
/* kvlane-doctor: check a host (and an INI's NICs) against the RDMA checklists, with fixes. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "doctor.h"

static void usage(FILE *fp, const char *prog)
{
	fprintf(fp,
		"Usage: %s [-c FILE.ini] [options]\n"
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
		"Exit status: 0 every check passed (or was skipped), 1 a WARN (0 with -q), 2 a "
		"FAIL,\n"
		"3 bad command line or INI.\n",
		prog);
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

	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		bool val = strcmp(a, "-c") == 0 || strcmp(a, "--config") == 0 ||
			   strcmp(a, "--set") == 0 || strcmp(a, "-l") == 0 ||
			   strcmp(a, "--lcores") == 0 || strcmp(a, "--sysfs-root") == 0 ||
			   strcmp(a, "--proc-root") == 0;
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
	if (json)
		kvl_doctor_print_json(stdout, &rep);
	else
		kvl_doctor_print(stdout, &rep, quiet);
	/* --quiet is for ExecStartPre: a WARN is in the journal, only a FAIL stops the start. */
	if (quiet && kvl_doctor_exit_code(&rep) == 1)
		return 0;
	return kvl_doctor_exit_code(&rep);
}
