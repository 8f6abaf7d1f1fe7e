/* SPDX-License-Identifier: BSD-3-Clause */
/* kvlane-doctor's checks on fixture hosts: each verdict, observed and expected value, fix. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctrl_proto.h"
#include "doctor.h"
#include "kvl_test.h"

static char fixtures[512];
static struct kvl_config cfg;
static struct kvl_conf_errors errs;
static struct kvl_doc_report rep;

static const char *fx(const char *rel)
{
	static char bufs[8][768];
	static unsigned k;
	char *b = bufs[k++ % 8];

	snprintf(b, sizeof(bufs[0]), "%s/%s", fixtures, rel);
	return b;
}

/* Load @ini (fixture-relative) with @sets, then run on sysfs/@host and proc/@proc. */
static void run(const char *ini, const char *const *sets, unsigned n_sets, const char *host,
		const char *proc, const char *lcores)
{
	struct kvl_doc_opts o = { .sysfs_root = fx(host),
				  .proc_root = proc ? fx(proc) : NULL,
				  .lcores = lcores,
				  .have_ini = ini != NULL };

	if (ini) {
		int rc = kvl_config_load_sets(fx(ini), sets, n_sets, &cfg, &errs);

		CHECK_INT(rc, 0);
		for (unsigned i = 0; i < errs.count; i++)
			fprintf(stderr, "%s\n", errs.msg[i]);
	} else {
		kvl_doctor_host_config(fx(host), &cfg);
	}
	kvl_doctor_run(&cfg, &o, &rep);
}

/* The row of @check for @subject (a prefix: "nic.rail0" or "host"); NULL if absent. */
static const struct kvl_doc_row *find(const char *check, const char *subject)
{
	for (unsigned i = 0; i < rep.n; i++)
		if (strcmp(rep.rows[i].check, check) == 0 &&
		    strncmp(rep.rows[i].subject, subject, strlen(subject)) == 0)
			return &rep.rows[i];
	return NULL;
}

/* Assert a row's verdict and that observed / expected / fix contain the given texts. */
static void expect(const char *check, const char *subject, int verdict, const char *obs,
		   const char *exp, const char *fix)
{
	const struct kvl_doc_row *w = find(check, subject);

	CHECK(w != NULL);
	if (w == NULL) {
		fprintf(stderr, "no row %s for %s\n", check, subject);
		return;
	}
	if (w->verdict != verdict)
		fprintf(stderr, "%s %s: %s, observed: %s\n", check, subject,
			kvl_doc_verdict_name(w->verdict), w->observed);
	CHECK_STR(kvl_doc_verdict_name(w->verdict), kvl_doc_verdict_name(verdict));
	if (obs)
		CHECK_HAS(w->observed, obs);
	if (exp)
		CHECK_HAS(w->expected, exp);
	if (fix)
		CHECK_HAS(w->fix, fix);
	if (verdict == KVL_DOC_PASS || verdict == KVL_DOC_SKIP)
		CHECK_STR(w->fix, "");
}

/* Every check passes on the host built for the INI: exit status 0. */
static void test_good(void)
{
	run("doctor/good.ini", NULL, 0, "sysfs/doctor-good", "proc/doctor-good", "0-1");
	expect("rdma_devices", "host", KVL_DOC_PASS, "1 RDMA device", NULL, NULL);
	expect("modules", "host", KVL_DOC_PASS, "ib_core, mlx5_ib", NULL, NULL);
	expect("device", "nic.rail0", KVL_DOC_PASS, "driver mlx5_core, transport mlx5", NULL, NULL);
	expect("port_state", "nic.rail0", KVL_DOC_PASS, "state ACTIVE, physical state LinkUp", NULL,
	       NULL);
	expect("link_layer", "nic.rail0", KVL_DOC_PASS, "Ethernet (RoCE) over netdev ens1f0np0",
	       NULL, NULL);
	expect("gid", "nic.rail0", KVL_DOC_PASS, "auto -> [3] 10.0.0.1 RoCE v2 on ens1f0np0", NULL,
	       NULL);
	expect("mtu", "nic.rail0", KVL_DOC_PASS, "active MTU 4096 (netdev ens1f0np0 MTU 9000",
	       "needs a netdev MTU >= 4192", NULL);
	expect("memlock", "host", KVL_DOC_PASS, "soft unlimited, hard unlimited",
	       "[memory] pool 256 MiB", NULL);
	expect("hugepages", "host", KVL_DOC_PASS, "2048 kB: 1024 reserved, 1024 free",
	       "256 MiB pool on 2048 kB pages", NULL);
	expect("pcie_nic", "nic.rail0", KVL_DOC_PASS, "x16 at 32.0 GT/s (max x16 at 32.0 GT/s)",
	       NULL, NULL);
	expect("pcie_nic", "nic.rail0", KVL_DOC_PASS, "ceiling 504.1 Gb/s, port 200 Gb/s", NULL,
	       NULL);
	expect("gpu_nic", "nic.rail0", KVL_DOC_PASS, "is PIX from the NIC", NULL, NULL);
	expect("pcie_gpu", "gpu 0", KVL_DOC_PASS, "0000:03:00.0: x16", NULL, NULL);
	expect("numa_lcores", "nic.rail0", KVL_DOC_PASS, "NIC on node 0, polled by lcore 1", NULL,
	       NULL);
	expect("gpudirect", "host", KVL_DOC_PASS, "nvidia_peermem loaded", NULL, NULL);
	expect("cpu_isolation", "host", KVL_DOC_PASS, ": none", NULL, NULL);
	expect("cpu_governor", "host", KVL_DOC_PASS, "performance on every polling core", NULL,
	       NULL);
	expect("nic_irqs", "nic.rail0", KVL_DOC_PASS, "0 of 2 IRQs", NULL, NULL);
	CHECK_INT(rep.count[KVL_DOC_WARN] + rep.count[KVL_DOC_FAIL], 0);
	CHECK_INT(kvl_doctor_exit_code(&rep), 0);
}

/* The write-ups' troubleshooting rows on one host: each cause named with its fix. */
static void test_bad(void)
{
	run("doctor/bad.ini", NULL, 0, "sysfs/doctor-bad", "proc/doctor-bad", "0,4-7");
	/* port DOWN */
	expect("port_state", "nic.rail0", KVL_DOC_FAIL, "state DOWN, physical state Disabled",
	       "state ACTIVE, physical state LinkUp", "ip link set dev ens1f0 up");
	/* no RoCE v2 GID for the netdev's IPv4 address: only a v1 one */
	expect("gid", "nic.rail0", KVL_DOC_FAIL, "no RoCE v2 GID with an IPv4 address of ens1f0",
	       "RoCE v2 GID of ens1f0's IPv4 address", "RoCE v1 GID for 10.0.0.2 ([2]) but no v2");
	/* GID v1 chosen */
	expect("gid", "nic.rail1", KVL_DOC_WARN, "gid_index 2 is RoCE v1 (10.0.1.2 on ens2f0)",
	       "handshake fine, bulk terrible", "gid_index = 3 (RoCE v2, 10.0.1.2)");
	/* MTU 1024 (netdev 1500) against the INI's 4096 */
	expect("mtu", "nic.rail0", KVL_DOC_WARN, "active MTU 1024 (netdev ens1f0 MTU 1500",
	       "mtu 4096 needs a netdev MTU >= 4192", "ip link set dev ens1f0 mtu 9000");
	expect("mtu", "nic.rail1", KVL_DOC_PASS, "active MTU 4096", NULL, NULL);
	/* memlock 64 KiB against a 1 GiB pool */
	expect("memlock", "host", KVL_DOC_FAIL, "soft 64 KiB, hard 64 KiB",
	       ">= 1024.8 MiB: [memory] pool 1024 MiB", "LimitMEMLOCK=infinity");
	/* no hugepages */
	expect("hugepages", "host", KVL_DOC_FAIL, "2048 kB: 0 reserved, 0 free",
	       "the 1024 MiB pool on hugepages (hugepage = true)",
	       "needs 512 hugepages of 2048 kB and HugePages_Free is 0");
	CHECK_HAS(find("hugepages", "host")->fix, "reserve them: echo 512 > ");
	/* x4 slot, Gen3 link */
	expect("pcie_nic", "nic.rail0", KVL_DOC_WARN, "x4 at 8.0 GT/s (max x16 at 16.0 GT/s)",
	       "trained at its maximum (x16, 16.0 GT/s)", "trained to x4 of x16");
	expect("pcie_nic", "nic.rail0", KVL_DOC_WARN, "ceiling 31.5 Gb/s, port 100 Gb/s", NULL,
	       "below the port's 100 Gb/s");
	expect("pcie_nic", "nic.rail1", KVL_DOC_PASS, "x16 at 16.0 GT/s", NULL, NULL);
	expect("pcie_gpu", "gpu 0", KVL_DOC_WARN, "x16 at 8.0 GT/s (max x16 at 16.0 GT/s)", NULL,
	       "trained to 8.0 of 16.0 GT/s");
	/* GPU on the other socket */
	expect("gpu_nic", "nic.rail0", KVL_DOC_WARN, "is SYS from the NIC", "not SYS",
	       "on its own socket");
	/* peermem missing, proprietary module: no dma-buf either */
	expect("gpudirect", "host", KVL_DOC_WARN, "nvidia_peermem not loaded",
	       "kernel >= 5.12 and the open kernel module", "modprobe nvidia_peermem");
	/* NIC lcores on node 1: right; but nothing isolated, powersave, an IRQ on them */
	expect("numa_lcores", "nic.rail0", KVL_DOC_PASS, "NIC on node 1, polled by lcore 4", NULL,
	       NULL);
	expect("cpu_isolation", "host", KVL_DOC_WARN, "4,5,6,7", NULL,
	       "isolcpus=4,5,6,7 nohz_full=4,5,6,7");
	expect("cpu_governor", "host", KVL_DOC_WARN, "governor powersave on polling cores 4,5,6,7",
	       NULL, "cpupower frequency-set -g performance");
	expect("nic_irqs", "nic.rail1", KVL_DOC_WARN, "1 of 2 IRQs land on polling cores", NULL,
	       "smp_affinity_list");
	CHECK_HAS(find("nic_irqs", "nic.rail1") ? find("nic_irqs", "nic.rail1")->observed : NULL,
		  "200->4-7");
	CHECK_INT(rep.count[KVL_DOC_FAIL], 4);
	CHECK_INT(kvl_doctor_exit_code(&rep), 2);
}

/* root's CAP_IPC_LOCK lifts RLIMIT_MEMLOCK for mlock and memory registration alike. */
static void test_memlock_cap(void)
{
	const char *huge[] = { "memory.pool_size_mb=64", "memory.hugepage=true" };
	const char *small[] = { "memory.pool_size_mb=64", "memory.hugepage=false" };

	run("doctor/bad.ini", NULL, 0, "sysfs/doctor-bad", "proc/doctor-root", "0,4-7");
	expect("memlock", "host", KVL_DOC_PASS,
	       "soft 64 KiB, hard 64 KiB, but the process has "
	       "CAP_IPC_LOCK",
	       ">= 1024.8 MiB", NULL);
	/* a pool on hugepages with no RDMA NIC pins nothing that the limit counts */
	run("../../config/default.ini", huge, 2, "sysfs/doctor-good", "proc/doctor-bad", NULL);
	expect("memlock", "host", KVL_DOC_PASS, "soft 64 KiB",
	       "nothing: the pool is on hugepages and no RDMA NIC", NULL);
	/* on 4 KiB pages it is mlock'd: 64 MiB against 64 KiB */
	run("../../config/default.ini", huge, 1, "sysfs/doctor-good", "proc/doctor-bad", NULL);
	expect("memlock", "host", KVL_DOC_PASS, "soft 64 KiB", "nothing", NULL);
	run("../../config/default.ini", small, 2, "sysfs/doctor-good", "proc/doctor-bad", NULL);
	expect("memlock", "host", KVL_DOC_FAIL, "soft 64 KiB", ">= 64 MiB: [memory] pool 64 MiB",
	       "memlock unlimited");
}

/* The NICs on socket 1, EAL's workers on socket 0: kvlaned would not start; allowed: WARN. */
static void test_numa(void)
{
	const char *allow[] = { "runtime.allow_remote_numa=true" };

	run("doctor/bad.ini", NULL, 0, "sysfs/doctor-bad", "proc/doctor-bad", "0-3");
	expect("numa_lcores", "host", KVL_DOC_FAIL, "on NUMA node 1, but no free worker lcore",
	       "on the NIC's NUMA node (main lcore 0 excluded)", "allow_remote_numa = true");
	run("doctor/bad.ini", allow, 1, "sysfs/doctor-bad", "proc/doctor-bad", "0-3");
	expect("numa_lcores", "nic.rail0", KVL_DOC_WARN,
	       "NIC on node 1, polled by lcore 1 (CPU 1, node 0)", "its lcore on the NIC's node 1",
	       "add a core of node 1");
	/* a CPU the host does not have: EAL would refuse it */
	run("doctor/bad.ini", NULL, 0, "sysfs/doctor-bad", "proc/doctor-bad", "0,4-9");
	expect("numa_lcores", "host", KVL_DOC_FAIL,
	       "CPU 8,9 of the EAL list is not online here "
	       "(online: 0-7)",
	       "online CPU", "--lcores");
	/* without the lcores the check says what it needs instead of guessing */
	run("doctor/bad.ini", NULL, 0, "sysfs/doctor-bad", "proc/doctor-bad", NULL);
	expect("numa_lcores", "nic.rail0", KVL_DOC_SKIP, "NIC on NUMA node 1 (CPUs 4-7)",
	       "--lcores", NULL);
	expect("cpu", "host", KVL_DOC_SKIP, "not known", NULL, NULL);
}

/* No RDMA at all (a VM like this one): a FAIL naming the drivers to load, and no crash. */
static void test_no_rdma(void)
{
	run(NULL, NULL, 0, "sysfs/three-node", NULL, NULL);
	CHECK_INT(cfg.n_nics, 0);
	expect("rdma_devices", "host", KVL_DOC_FAIL, "class/infiniband does not exist",
	       "at least one RDMA device", "modprobe rdma_rxe && rdma link add rxe0 type rxe");
	expect("modules", "host", KVL_DOC_FAIL, "none of ib_core", NULL, "mlx5_ib");
	CHECK_INT(kvl_doctor_exit_code(&rep), 2);

	run("doctor/good.ini", NULL, 0, "sysfs/three-node", "proc/doctor-good", NULL);
	expect("rdma_devices", "host", KVL_DOC_FAIL, "does not exist", "the RDMA devices the INI",
	       "mlx5_ib");
	expect("device", "nic.rail0", KVL_DOC_FAIL, "no RDMA device \"mlx5_0\"", NULL,
	       "set [nic.rail0] device");
	CHECK(find("port_state", "nic.rail0") == NULL);

	/* tcp only (the shipped default.ini on lo): no RDMA needed, so its absence only warns */
	run("../../config/default.ini", NULL, 0, "sysfs/three-node", "proc/doctor-good", NULL);
	expect("rdma_devices", "host", KVL_DOC_WARN, "does not exist", "tcp only", "rdma_rxe");
	expect("device", "nic.lo", KVL_DOC_FAIL, "no netdev \"lo\"", NULL, NULL);
	run("../../config/default.ini", NULL, 0, "sysfs/one-node", "proc/doctor-good", NULL);
	expect("device", "nic.lo", KVL_DOC_PASS, "netdev lo", NULL, NULL);
	expect("port_state", "nic.lo", KVL_DOC_PASS, "operstate unknown", NULL, NULL);
	CHECK(find("gid", "nic.lo") == NULL);
}

/* Without -c: every RDMA device of the host, on defaults. InfiniBand: lid/pkey, no MTU. */
static void test_host_config(void)
{
	run(NULL, NULL, 0, "sysfs/two-socket-gpu", "proc/doctor-good", NULL);
	CHECK_INT(cfg.n_nics, 5);
	CHECK_STR(cfg.nics[0].device, "mlx5_0");
	expect("lid_pkey", "nic.mlx5_0", KVL_DOC_FAIL, "lid unreadable", "unicast LID",
	       "run opensm");
	expect("mtu", "nic.mlx5_0", KVL_DOC_SKIP, "subnet manager's", "ibv_devinfo", NULL);
	expect("gpu_nic", "nic.mlx5_2", KVL_DOC_WARN, "is SYS from the NIC", NULL, NULL);
	expect("gpu_nic", "nic.rxe0", KVL_DOC_SKIP, "soft-RoCE", NULL, NULL);
	expect("pcie_nic", "nic.rxe0", KVL_DOC_SKIP, "no PCI function of its own", NULL, NULL);
	expect("mtu", "nic.rxe0", KVL_DOC_PASS, "less 80 B of RoCE headers", NULL, NULL);
}

/* cuda_gpu judges what the CUDA probe (doctor_gpu.c, kvl_gpu_open) reported. */
static void run_cuda(const struct kvl_doc_cuda *c)
{
	struct kvl_doc_opts o = { .sysfs_root = fx("sysfs/doctor-good"),
				  .proc_root = fx("proc/doctor-good"),
				  .have_ini = true,
				  .cuda = c };

	CHECK_INT(kvl_config_load_sets(fx("doctor/good.ini"), NULL, 0, &cfg, &errs), 0);
	kvl_doctor_run(&cfg, &o, &rep);
}

static void test_cuda(void)
{
	struct kvl_doc_cuda c = { .probed = true,
				  .required = true,
				  .device_id = 0,
				  .device_count = 1,
				  .name = "NVIDIA H200",
				  .pci = "0000:03:00.0",
				  .gpudirect_rdma = true,
				  .total = 143771ull << 20,
				  .free = 143000ull << 20,
				  .reserve = 2048ull << 20 };

	run_cuda(&c);
	expect("cuda_gpu", "host", KVL_DOC_PASS,
	       "GPU 0 of 1: NVIDIA H200 (0000:03:00.0), 143771 MiB total, 143000 MiB free, "
	       "reserve 2048 MiB: budget 140952 MiB; GPUDirect RDMA attribute 1",
	       NULL, NULL);
	c.free = 1000ull << 20; /* another process holds the GPU */
	run_cuda(&c);
	expect("cuda_gpu", "host", KVL_DOC_WARN, "budget 0 MiB", "vram_reserve_mb",
	       "staging budget is 0");
	c.free = 143000ull << 20;
	c.gpudirect_rdma = false;
	run_cuda(&c);
	expect("cuda_gpu", "host", KVL_DOC_WARN, "GPUDirect RDMA attribute 0", NULL,
	       "staging goes through host memory");
	c.rc = -ENODEV;
	snprintf(c.err, sizeof(c.err), "gpu.enable = true but no CUDA device is usable: no device");
	run_cuda(&c);
	expect("cuda_gpu", "host", KVL_DOC_FAIL, "no CUDA device is usable", "CUDA device 0 usable",
	       "[gpu] enable = false");
	c.required = false; /* no INI: a GPU in sysfs the driver does not serve */
	run_cuda(&c);
	expect("cuda_gpu", "host", KVL_DOC_WARN, "no CUDA device is usable", NULL, "nvidia-smi");
	run_cuda(NULL); /* [gpu] enable = true but nobody probed */
	expect("cuda_gpu", "host", KVL_DOC_SKIP, "not probed", NULL, NULL);
}

/* The GPU machine's case: a GPU, no NIC, peermem missing. */
static void test_gpu_only(void)
{
	run(NULL, NULL, 0, "sysfs/doctor-gpu-only", "proc/doctor-bad", "0-1");
	expect("rdma_devices", "host", KVL_DOC_FAIL, "does not exist", NULL, "mlx5_ib");
	expect("gpu_nic", "host", KVL_DOC_SKIP, "1 GPU (0000:06:00.0) and no NIC", NULL, NULL);
	expect("pcie_gpu", "gpu 0 (0000:06:00.0)", KVL_DOC_PASS, "x16 at 32.0 GT/s", NULL, NULL);
	expect("gpudirect", "host", KVL_DOC_WARN, "nvidia_peermem not loaded", NULL,
	       "modprobe nvidia_peermem");
}

/* UDP 4791 and the control port against iptables-save and nft list ruleset texts. */
static void test_firewall(void)
{
	static struct kvl_doc_firewall f;
	const char *ctl[] = { "control.listen=0.0.0.0:18515", "control.secret_file=/dev/null" };
	struct kvl_doc_opts o = { .sysfs_root = fx("sysfs/doctor-good"),
				  .proc_root = fx("proc/doctor-good"),
				  .lcores = "0-1",
				  .have_ini = true,
				  .firewall = &f };
	const struct kvl_doc_row *w;

	CHECK_INT(kvl_config_load_sets(fx("doctor/good.ini"), ctl, 2, &cfg, &errs), 0);
	memset(&f, 0, sizeof(f));
	f.read = true;
	snprintf(f.iptables, sizeof(f.iptables),
		 "*filter\n:INPUT DROP [0:0]\n:FORWARD DROP [0:0]\n:OUTPUT ACCEPT [0:0]\n"
		 "-A INPUT -s 10.0.0.0/8 -p udp -m udp --dport 4791 -j ACCEPT\n"
		 "-A INPUT -p tcp -m multiport --dports 22,18000:19000 -j ACCEPT\nCOMMIT\n");
	kvl_doctor_run(&cfg, &o, &rep);
	w = find("firewall", "host");
	CHECK(w != NULL);
	if (w) {
		/* the source-restricted ACCEPT may not apply: the policy DROP decides */
		CHECK_STR(kvl_doc_verdict_name(w->verdict), "WARN");
		CHECK_HAS(w->observed, "udp 4791 (RoCE v2): iptables DROP (:INPUT DROP [0:0], the "
				       "chain's policy)");
		CHECK_HAS(w->fix, "iptables -I INPUT -p udp --dport 4791 -j ACCEPT");
		w++; /* the control port's row follows */
		CHECK_STR(w->check, "firewall");
		CHECK_STR(kvl_doc_verdict_name(w->verdict), "PASS");
		CHECK_HAS(w->observed, "tcp 18515 (the control port): iptables ACCEPT (-A INPUT -p "
				       "tcp -m multiport --dports 22,18000:19000 -j ACCEPT)");
	}
	memset(&f, 0, sizeof(f));
	f.read = true;
	snprintf(f.nft, sizeof(f.nft),
		 "table inet filter {\n\tchain input {\n\t\ttype filter hook input priority "
		 "filter; policy accept;\n\t\tct state established,related accept\n"
		 "\t\tudp dport { 4000-4800, 5000 } drop\n\t}\n\tchain output {\n\t\ttype "
		 "filter hook output priority filter; policy accept;\n\t}\n}\n");
	kvl_doctor_run(&cfg, &o, &rep);
	w = find("firewall", "host");
	CHECK(w != NULL);
	if (w) {
		CHECK_STR(kvl_doc_verdict_name(w->verdict), "WARN");
		CHECK_HAS(w->observed, "nft drop (udp dport { 4000-4800, 5000 } drop)");
		w++;
		CHECK_STR(kvl_doc_verdict_name(w->verdict), "PASS");
		CHECK_HAS(w->observed, "tcp 18515 (the control port): iptables no INPUT chain; nft "
				       "accept (type filter hook input");
	}
	memset(&f, 0, sizeof(f));
	f.read = true;
	snprintf(f.why, sizeof(f.why), "neither gave rules");
	kvl_doctor_run(&cfg, &o, &rep);
	expect("firewall", "host", KVL_DOC_SKIP, "neither gave rules", NULL, NULL);
}

/* --json: one object, every row, strings escaped; the exit code inside matches. */
static void test_json(void)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *fp;

	run("doctor/bad.ini", NULL, 0, "sysfs/doctor-bad", "proc/doctor-bad", "0,4-7");
	fp = open_memstream(&buf, &len);
	kvl_doctor_print_json(fp, &rep);
	fclose(fp);
	CHECK_HAS(buf, "{\"checks\": [");
	CHECK_HAS(buf,
		  "\"check\": \"gid\", \"subject\": \"nic.rail1 (mlx5_1)\", \"verdict\": \"WARN\"");
	CHECK_HAS(buf, "\\\"handshake fine, bulk terrible\\\"");
	CHECK_HAS(buf, "\"exit\": 2}");
	free(buf);
	fp = open_memstream(&buf, &len);
	kvl_doctor_print(fp, &rep, true);
	fclose(fp);
	CHECK(strstr(buf, "PASS ") == NULL);
	CHECK_HAS(buf, "FAIL  port_state    nic.rail0 (mlx5_0)\n      observed: port 1 state DOWN");
	CHECK_HAS(buf,
		  "      fix:      the port is administratively down: ip link set dev ens1f0 up\n");
	CHECK_HAS(buf, "kvlane-doctor: 11 pass, 10 warn, 4 fail, 1 skipped");
	free(buf);
}

static void test_eal_lcores(void)
{
	char *a1[] = { "kvlaned", "-l", "0-3", "--no-huge", "--", "-c", "x.ini", NULL };
	char *a2[] = { "kvlaned", "-l2,4", "--", NULL };
	char *a3[] = { "kvlaned", "--lcores", "0@(0-1),1@1", "--", NULL };
	char *a4[] = { "kvlaned", "--no-huge", "--", "-l", "5", NULL };
	char *a5[] = { "kvlaned", "-c", "0xf", "--", NULL };
	char out[64];

	CHECK_INT(kvl_doctor_eal_lcores(7, a1, out, sizeof(out)), 0);
	CHECK_STR(out, "0-3");
	CHECK_INT(kvl_doctor_eal_lcores(3, a2, out, sizeof(out)), 0);
	CHECK_STR(out, "2,4");
	CHECK_INT(kvl_doctor_eal_lcores(4, a3, out, sizeof(out)), -ENOTSUP);
	CHECK_INT(kvl_doctor_eal_lcores(5, a4, out, sizeof(out)), -ENOENT); /* after --: ours */
	CHECK_INT(kvl_doctor_eal_lcores(4, a5, out, sizeof(out)), -ENOTSUP);
	/* a bad list is a FAIL row, not a crash */
	run("doctor/good.ini", NULL, 0, "sysfs/doctor-good", "proc/doctor-good", "zero");
	expect("lcores", "host", KVL_DOC_FAIL, "\"zero\" is not a CPU list", NULL, "-l");
}

/* ---- two ends: link facts, their comparison, the wire, the link test's verdict ---- */

static struct kvl_ctrl_link here[KVL_CTRL_MAX_EPS], there[KVL_CTRL_MAX_EPS];

static unsigned links_of(const char *ini, const char *const *sets, unsigned n_sets,
			 const char *host, struct kvl_ctrl_link *out)
{
	CHECK_INT(kvl_config_load_sets(fx(ini), sets, n_sets, &cfg, &errs), 0);
	return kvl_doctor_links(fx(host), &cfg, out, KVL_CTRL_MAX_EPS);
}

/* Through the codec as the control path sends it: what the peer compares is what arrived. */
static unsigned over_the_wire(const struct kvl_ctrl_link *l, unsigned n, struct kvl_ctrl_link *out)
{
	static struct kvl_ctrl_msg m, d;
	static uint8_t buf[KVL_CTRL_HDR_LEN + KVL_CTRL_MAX_PAYLOAD];
	size_t used = 0;
	int len;

	memset(&m, 0, sizeof(m));
	m.type = KVL_CTRL_DOCTOR;
	m.u.doctor.reply = 1;
	m.u.doctor.n = n;
	memcpy(m.u.doctor.link, l, n * sizeof(l[0]));
	len = kvl_ctrl_encode(&m, buf, sizeof(buf));
	CHECK(len > KVL_CTRL_HDR_LEN);
	CHECK_INT(kvl_ctrl_decode(buf, (size_t)len, &d, &used), 1);
	CHECK_INT(used, len);
	memcpy(out, d.u.doctor.link, d.u.doctor.n * sizeof(out[0]));
	return d.u.doctor.n;
}

static void test_two_ends(void)
{
	static const char *const auto_gid[] = { "nic.rail1.gid_index=auto" };
	static const char *const mtu1024[] = { "nic.rail1.mtu=1024" };
	unsigned nh, nt;

	/* The facts: doctor-bad's rail1 pins gid_index 2, a RoCE v1 entry; rail0 takes auto's
	 * RoCE v2 choice; the port MTU is min(active, INI). */
	nh = links_of("doctor/bad.ini", NULL, 0, "sysfs/doctor-bad", here);
	CHECK_INT(nh, 2);
	CHECK_STR(here[1].nic, "rail1");
	CHECK_INT(here[1].gid_type, 1);
	CHECK_INT(here[1].gid_index, 2);
	CHECK_STR(here[1].link_layer, "Ethernet");

	/* v1 meets v2: the other end leaves rail1 at auto (RoCE v2). Named from both ends. */
	nt = over_the_wire(here, nh, there);
	CHECK_INT(nt, 2);
	nt = links_of("doctor/bad.ini", auto_gid, 1, "sysfs/doctor-bad", there);
	CHECK_INT(there[1].gid_type, 2);
	memset(&rep, 0, sizeof(rep));
	kvl_doctor_compare(here, nh, there, nt, "peer", &rep);
	expect("peer_gid_type", "nic.rail1", KVL_DOC_FAIL, "gid_index 2 RoCE v1, there gid_index",
	       "the same RoCE version", "RoCE v1 meets RoCE v2");
	expect("peer_link_layer", "nic.rail1", KVL_DOC_PASS, "here Ethernet, there Ethernet", NULL,
	       NULL);
	expect("peer_mtu", "nic.rail1", KVL_DOC_PASS, NULL, NULL, NULL);
	memset(&rep, 0, sizeof(rep));
	kvl_doctor_compare(there, nt, here, nh, "peer", &rep);
	expect("peer_gid_type", "nic.rail1", KVL_DOC_FAIL, "RoCE v2, there gid_index 2 RoCE v1",
	       NULL, "RoCE v2 meets RoCE v1");
	CHECK_INT(kvl_doctor_exit_code(&rep), 2);

	/* MTU 4096 here, 1024 there (the INI): the connection runs at 1024. */
	nt = links_of("doctor/bad.ini", mtu1024, 1, "sysfs/doctor-bad", there);
	memset(&rep, 0, sizeof(rep));
	kvl_doctor_compare(here, nh, there, nt, "peer", &rep);
	CHECK_INT(here[1].port_mtu, 4096); /* netdev 9000 */
	CHECK_INT(here[0].port_mtu, 1024); /* netdev 1500: 1500 - 96 B of headers */
	expect("peer_mtu", "nic.rail1", KVL_DOC_WARN,
	       "here port 4096 (INI 4096, netdev 9000), there port 1024 (INI 1024", "the same MTU",
	       "runs at the smaller (1024)");
	expect("peer_mtu", "nic.rail0", KVL_DOC_PASS, NULL, NULL, NULL);
	/* One NIC there, two here: the pairs compared are said. */
	memset(&rep, 0, sizeof(rep));
	kvl_doctor_compare(here, nh, there, 1, "peer", &rep);
	expect("peer_nics", "peer", KVL_DOC_WARN, "2 NICs here, 1 there", NULL, "first 1 pair");

	/* The link test's verdict against the slower port (100 Gb/s = 12.5 GB/s). */
	memset(&rep, 0, sizeof(rep));
	kvl_doctor_link_verdict("peer x", 11.0, 1u << 20, 100000, &rep);
	expect("link_test", "peer x", KVL_DOC_PASS, "88 % of the slower port's 100.0 Gb/s",
	       ">= 80 %", NULL);
	memset(&rep, 0, sizeof(rep));
	kvl_doctor_link_verdict("peer x", 5.0, 1u << 20, 100000, &rep);
	expect("link_test", "peer x", KVL_DOC_WARN, "40 %", NULL, "PCIe");
	CHECK_HAS(rep.rows[0].fix, "NUMA");
	memset(&rep, 0, sizeof(rep));
	kvl_doctor_link_verdict("peer x", 8.0, 1u << 20, 100000, &rep);
	expect("link_test", "peer x", KVL_DOC_WARN, "64 %", NULL, "below 80 %");
	memset(&rep, 0, sizeof(rep));
	kvl_doctor_link_verdict("peer x", 11.0, 64u << 10, 100000, &rep);
	expect("link_test", "peer x", KVL_DOC_WARN, "64 KiB", NULL, ">= 1 MiB");
	memset(&rep, 0, sizeof(rep));
	kvl_doctor_link_verdict("peer x", 1.5, 1u << 20, 0, &rep);
	expect("link_test", "peer x", KVL_DOC_SKIP, "rate is known", NULL, NULL);
}

int main(void)
{
	const char *f = getenv("KVL_FIXTURES");

	snprintf(fixtures, sizeof(fixtures), "%s", f ? f : "tests/fixtures");
	test_good();
	test_bad();
	test_numa();
	test_memlock_cap();
	test_cuda();
	test_gpu_only();
	test_firewall();
	test_no_rdma();
	test_host_config();
	test_json();
	test_eal_lcores();
	test_two_ends();
	printf("test_doctor: %d checks, %d failed\n", kvl_test_checks, kvl_test_failures);
	return kvl_test_failures ? 1 : 0;
}
