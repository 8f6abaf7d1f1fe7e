/* SPDX-License-Identifier: BSD-3-Clause */
/* Unit test of GPU <-> NIC pairing by PCI distance, over fixture sysfs trees and real INIs. */

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvl_test.h"
#include "topo.h"

static char one[512], two[512], gpu2s[512];

/*
 * two-socket-gpu/ is modelled on a 2-socket Xeon PCIe GPU server (the 8-slot 4U shape: per
 * socket one Broadcom PEX890xx-style switch holding two GPUs and a ConnectX-7, as NVIDIA's
 * PCIe reference servers pair them), with deliberate extras for each class: a second switch
 * below the first (GPU2: PXB), a GPU alone on another root port of the same root bus (GPU3:
 * PHB), a GPU on another root bus of socket 0 (GPU4: NODE), an E810 port with rxe0 over it,
 * and a root bus whose firmware gives no NUMA node (mlx5_2). tests/fixtures/sysfs/README.md
 * lists every function. This is what `nvidia-smi topo -m` prints for that machine, written
 * by hand from its legend (PIX: one PCIe switch, PXB: several, PHB: the host bridge, NODE:
 * host bridges of one NUMA node, SYS: across nodes); the CPU/NUMA affinity columns are left
 * out, and so are mlx5_2 (node -1: nvidia-smi's answer is not documented) and rxe0 (no PCI
 * function, nvidia-smi does not list it).
 */
static const char nvidia_smi_topo[] = "\tGPU0\tGPU1\tGPU2\tGPU3\tGPU4\tGPU5\tGPU6\tNIC0\tNIC1\n"
				      "GPU0\t X \tPIX\tPXB\tPHB\tNODE\tSYS\tSYS\tPIX\tSYS\n"
				      "GPU1\tPIX\t X \tPXB\tPHB\tNODE\tSYS\tSYS\tPIX\tSYS\n"
				      "GPU2\tPXB\tPXB\t X \tPHB\tNODE\tSYS\tSYS\tPXB\tSYS\n"
				      "GPU3\tPHB\tPHB\tPHB\t X \tNODE\tSYS\tSYS\tPHB\tSYS\n"
				      "GPU4\tNODE\tNODE\tNODE\tNODE\t X \tSYS\tSYS\tNODE\tSYS\n"
				      "GPU5\tSYS\tSYS\tSYS\tSYS\tSYS\t X \tPIX\tSYS\tPIX\n"
				      "GPU6\tSYS\tSYS\tSYS\tSYS\tSYS\tPIX\t X \tSYS\tPIX\n"
				      "NIC0\tPIX\tPIX\tPXB\tPHB\tNODE\tSYS\tSYS\t X \tSYS\n"
				      "NIC1\tSYS\tSYS\tSYS\tSYS\tSYS\tPIX\tPIX\tSYS\t X \n"
				      "\n"
				      "NIC Legend:\n"
				      "\n"
				      "  NIC0: mlx5_0\n"
				      "  NIC1: mlx5_1\n";

static const char *const gpu_addrs[] = { "0000:18:00.0", "0000:19:00.0", "0000:1d:00.0",
					 "0000:1e:00.0", "0000:38:00.0", "0000:9a:00.0",
					 "0000:9b:00.0" };
#define N_GPUS 7

/* Load @ini (its [nic.*] sections only matter), discover the NICs on @root, pair them. */
struct host {
	struct kvl_config cfg;
	struct kvl_nic_info info[KVL_MAX_NICS];
	struct kvl_gpu_pair pair[KVL_MAX_NICS];
	char where[KVL_MAX_NICS][64];
	char err[2048];
};

static int pair_ini(struct host *h, const char *root, const char *ini)
{
	struct kvl_conf_errors errs;
	const char *where[KVL_MAX_NICS];
	char msg[KVL_ERR_LEN];
	int rc;

	memset(h, 0, sizeof(*h));
	rc = kvl_config_load_string("pair.ini", ini, &h->cfg, &errs);
	CHECK_INT(rc, 0);
	if (rc < 0) {
		for (unsigned i = 0; i < errs.count; i++)
			fprintf(stderr, "  %s\n", errs.msg[i]);
		return rc;
	}
	for (unsigned i = 0; i < h->cfg.n_nics; i++) {
		rc = kvl_nic_discover(root, &h->cfg.nics[i], &h->info[i], msg, sizeof(msg));
		CHECK_INT(rc, 0);
		if (rc < 0)
			fprintf(stderr, "  %s\n", msg);
		/* as the runtime words it: the file and the key's line */
		snprintf(h->where[i], sizeof(h->where[i]), "pair.ini:%u",
			 kvl_config_key_line(&h->cfg, KVL_SEC_NIC, i, "gpu"));
		where[i] = h->where[i];
	}
	strcpy(h->err, "stale");
	rc = kvl_pair_gpus(root, h->cfg.nics, h->info, where, h->cfg.n_nics, h->pair, h->err,
			   sizeof(h->err));
	if (rc == 0)
		CHECK_STR(h->err, "");
	return rc;
}

static void test_addr(void)
{
	char out[KVL_PCI_ADDR_LEN];
	static const char *const bad[] = { "",
					   "3b:00",
					   "3b.0",
					   "0000:3b:00",
					   "0000:3b:00.8",
					   "0000:3b:20.0",
					   "0000:3b:00.0x",
					   "0000:3g:00.0",
					   "0:0:3b:00.0",
					   "000000000:3b:00.0",
					   "0000::00.0",
					   " 3b:00.0",
					   "100:00.0" };

	CHECK_INT(kvl_pci_addr_normalize("0000:3b:00.0", out, sizeof(out)), 0);
	CHECK_STR(out, "0000:3b:00.0");
	CHECK_INT(kvl_pci_addr_normalize("3B:00.0", out, sizeof(out)), 0);
	CHECK_STR(out, "0000:3b:00.0");
	/* cudaDeviceGetPCIBusId / NVML spell the domain with 8 digits, in upper case */
	CHECK_INT(kvl_pci_addr_normalize("00000000:9A:00.0", out, sizeof(out)), 0);
	CHECK_STR(out, "0000:9a:00.0");
	CHECK_INT(kvl_pci_addr_normalize("10000:01:1f.7", out, sizeof(out)), 0); /* VMD */
	CHECK_STR(out, "10000:01:1f.7");
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		int rc = kvl_pci_addr_normalize(bad[i], out, sizeof(out));

		CHECK_INT(rc, -EINVAL);
		if (rc != -EINVAL)
			fprintf(stderr, "  accepted \"%s\"\n", bad[i]);
	}
	CHECK_INT(kvl_pci_addr_normalize("0000:3b:00.0", out, 12), -ENAMETOOLONG);
}

static void test_scan(void)
{
	struct kvl_pci_path g[KVL_MAX_GPUS];
	int n = kvl_gpu_scan(gpu2s, g, KVL_MAX_GPUS);

	/* the ASPEED VGA (vendor 0x1a03) and the NVIDIA bridge (class 0x0680) are not GPUs */
	CHECK_INT(n, N_GPUS);
	for (int i = 0; i < n && i < N_GPUS; i++)
		CHECK_STR(g[i].addr, gpu_addrs[i]);
	CHECK_INT(g[0].numa_node, 0);
	CHECK_INT(g[5].numa_node, 1);
	CHECK_STR(g[0].root_bus, "0000:15");
	CHECK_INT(g[0].depth, 4); /* root port, switch up, switch down, the GPU */
	CHECK_STR(g[0].chain[1], "0000:16:00.0");
	CHECK_INT(g[2].depth, 6);
	CHECK_INT(g[3].depth, 2);
	CHECK_INT(kvl_gpu_scan(gpu2s, g, 3), -E2BIG);
	CHECK_INT(kvl_gpu_scan(two, g, KVL_MAX_GPUS), 0); /* no bus/pci/devices there */
	CHECK_INT(kvl_gpu_scan(one, g, KVL_MAX_GPUS), 1);
	CHECK_STR(g[0].addr, "0000:02:00.0");
}

/* The matrix in nvidia-smi's layout, from kvl_pci_distance over what sysfs says. */
static void test_nvidia_smi_matrix(void)
{
	struct kvl_pci_path dev[N_GPUS + 2];
	static const char *const nics[] = { "mlx5_0", "mlx5_1" };
	char text[4096], why[KVL_GPU_NOTE_LEN];
	size_t len = 0;
	int n = kvl_gpu_scan(gpu2s, dev, N_GPUS);

	CHECK_INT(n, N_GPUS);
	for (int i = 0; i < 2; i++) {
		struct kvl_nic_conf c;
		struct kvl_nic_info in;
		char msg[KVL_ERR_LEN];

		memset(&c, 0, sizeof(c));
		snprintf(c.label, sizeof(c.label), "r%d", i);
		snprintf(c.device, sizeof(c.device), "%s", nics[i]);
		c.port = 1;
		c.numa_node = KVL_AUTO;
		CHECK_INT(kvl_nic_discover(gpu2s, &c, &in, msg, sizeof(msg)), 0);
		CHECK_INT(kvl_nic_pci(gpu2s, &c, &in, &dev[N_GPUS + i], why, sizeof(why)), 0);
	}
	len += snprintf(text + len, sizeof(text) - len, "\t");
	for (int c = 0; c < N_GPUS + 2; c++)
		len += snprintf(text + len, sizeof(text) - len, "%s%d%s",
				c < N_GPUS ? "GPU" : "NIC", c < N_GPUS ? c : c - N_GPUS,
				c + 1 < N_GPUS + 2 ? "\t" : "\n");
	for (int r = 0; r < N_GPUS + 2; r++) {
		len += snprintf(text + len, sizeof(text) - len, "%s%d", r < N_GPUS ? "GPU" : "NIC",
				r < N_GPUS ? r : r - N_GPUS);
		for (int c = 0; c < N_GPUS + 2; c++)
			len += snprintf(
				text + len, sizeof(text) - len, "\t%s",
				r == c ? " X "
				       : kvl_pci_dist_name(kvl_pci_distance(&dev[r], &dev[c], 2)));
		len += snprintf(text + len, sizeof(text) - len, "\n");
	}
	len += snprintf(text + len, sizeof(text) - len, "\nNIC Legend:\n\n");
	for (int i = 0; i < 2; i++)
		len += snprintf(text + len, sizeof(text) - len, "  NIC%d: %s\n", i, nics[i]);
	CHECK_STR(text, nvidia_smi_topo);
}

static const char host_ini[] = "[nic.a]\ndevice = mlx5_0\n"
			       "[nic.b]\ndevice = mlx5_1\n"
			       "[nic.c]\ndevice = mlx5_2\n"
			       "[nic.d]\ndevice = rxe0\n"
			       "[nic.e]\ndevice = ens5f0\ntransport = tcp\n"
			       "[nic.f]\ndevice = lo\n"
			       "[nic.g]\ndevice = mlx5_3\n"
			       "[nic.h]\ndevice = ens5f0.100\n";

static void test_auto(void)
{
	static struct host h;
	struct kvl_gpu_pair *p = h.pair;

	CHECK_INT(pair_ini(&h, gpu2s, host_ini), 0);
	/* two GPUs behind mlx5_0's switch: PIX both, the lower address wins */
	CHECK_STR(p[0].addr, "0000:18:00.0");
	CHECK_INT(p[0].gpu, 0);
	CHECK_STR(p[0].nic_addr, "0000:1a:00.0");
	CHECK_STR(kvl_pci_dist_name(p[0].dist), "PIX");
	CHECK_INT(p[0].best, KVL_PCI_PIX);
	CHECK(!p[0].from_conf && !p[0].warn);
	CHECK_INT(p[0].cuda_device, -1); /* the runtime fills it */
	CHECK_STR(p[0].note, "");
	CHECK_STR(p[1].addr, "0000:9a:00.0");
	CHECK_STR(kvl_pci_dist_name(p[1].dist), "PIX");
	CHECK(!p[1].warn);
	/* node unknown on a 2-node host, no GPU under its root bus: SYS, warned */
	CHECK_STR(p[2].nic_addr, "0000:b1:00.0");
	CHECK_STR(p[2].addr, "0000:18:00.0");
	CHECK_STR(kvl_pci_dist_name(p[2].dist), "SYS");
	CHECK(p[2].warn);
	CHECK_HAS(p[2].note, "across NUMA nodes (NIC node -1, GPU node 0)");
	/* rxe: no PCI function; ties at none go to the lowest address, with the reason */
	CHECK_STR(p[3].addr, "0000:18:00.0");
	CHECK_STR(kvl_pci_dist_name(p[3].dist), "none");
	CHECK_STR(p[3].nic_addr, "");
	CHECK(!p[3].warn);
	CHECK_STR(p[3].note, "rxe0 is soft-RoCE over ens5f0: no PCI function of its own");
	/* the E810 port shares root bus 37 with GPU4 */
	CHECK_STR(p[4].nic_addr, "0000:39:00.0");
	CHECK_STR(p[4].addr, "0000:38:00.0");
	CHECK_STR(kvl_pci_dist_name(p[4].dist), "PHB");
	CHECK_STR(kvl_pci_dist_name(p[5].dist), "none");
	CHECK_STR(p[5].note, "lo has no device link: a virtual netdev");
	/* an mlx5 scalable function sits where its PCI function does */
	CHECK_STR(p[6].nic_addr, "0000:1a:00.0");
	CHECK_STR(p[6].addr, "0000:18:00.0");
	CHECK_STR(kvl_pci_dist_name(p[6].dist), "PIX");
	/* a VLAN sends through its lower device */
	CHECK_STR(p[7].nic_addr, "0000:39:00.0");
	CHECK_STR(p[7].addr, "0000:38:00.0");
	CHECK_STR(kvl_pci_dist_name(p[7].dist), "PHB");
	CHECK_STR(p[7].note, "");

	/* The INI's numa_node puts mlx5_2 on socket 1: NODE to the first socket-1 GPU. */
	CHECK_INT(pair_ini(&h, gpu2s, "[nic.c]\ndevice = mlx5_2\nnuma_node = 1\n"), 0);
	CHECK_STR(p[0].addr, "0000:9a:00.0");
	CHECK_STR(kvl_pci_dist_name(p[0].dist), "NODE");
	CHECK(!p[0].warn);
}

/* mlx5_0 alone, with @gpu as its [nic.*] gpu line. */
static int pair_rail0(struct host *h, const char *gpu)
{
	char ini[128];

	snprintf(ini, sizeof(ini), "[nic.a]\ndevice = mlx5_0\n%s\n", gpu);
	return pair_ini(h, gpu2s, ini);
}

static void test_override(void)
{
	static struct host h;
	struct kvl_gpu_pair *p = h.pair;

	/* farther than the nearest: honoured, and said */
	CHECK_INT(pair_rail0(&h, "gpu = 0000:9A:00.0"), 0);
	CHECK_STR(p[0].addr, "0000:9a:00.0");
	CHECK_INT(p[0].gpu, 5);
	CHECK_STR(kvl_pci_dist_name(p[0].dist), "SYS");
	CHECK_INT(p[0].best, KVL_PCI_PIX);
	CHECK(p[0].from_conf && p[0].warn);
	CHECK_STR(p[0].note, "the INI chose 0000:9a:00.0 (SYS); 0000:18:00.0 is nearer (PIX)");
	CHECK_INT(pair_rail0(&h, "gpu = 3"), 0);
	CHECK_STR(p[0].addr, "0000:1e:00.0");
	CHECK_STR(kvl_pci_dist_name(p[0].dist), "PHB");
	CHECK(p[0].warn);
	CHECK_STR(p[0].note, "the INI chose 0000:1e:00.0 (PHB); 0000:18:00.0 is nearer (PIX)");
	/* as near as the nearest: no warning */
	CHECK_INT(pair_rail0(&h, "gpu = 1"), 0);
	CHECK_STR(p[0].addr, "0000:19:00.0");
	CHECK(p[0].from_conf && !p[0].warn);
	CHECK_STR(p[0].note, "");
	CHECK_INT(pair_rail0(&h, "gpu = none"), 0);
	CHECK_INT(p[0].gpu, -1);
	CHECK_STR(p[0].addr, "");
	CHECK(p[0].from_conf && !p[0].warn);
	CHECK_STR(kvl_pci_dist_name(p[0].dist), "none");
	CHECK_INT(p[0].best, KVL_PCI_PIX);
	CHECK_INT(pair_rail0(&h, "gpu = auto"), 0);
	CHECK_STR(p[0].addr, "0000:18:00.0");
	CHECK(!p[0].from_conf);
	/* a soft-RoCE NIC may be given a GPU: no class, said why */
	CHECK_INT(pair_ini(&h, gpu2s, "[nic.a]\ndevice = rxe0\ngpu = 0000:9b:00.0\n"), 0);
	CHECK_STR(p[0].addr, "0000:9b:00.0");
	CHECK_STR(kvl_pci_dist_name(p[0].dist), "none");
	CHECK(p[0].from_conf && !p[0].warn);
	CHECK_HAS(p[0].note, "soft-RoCE");
}

static void test_override_errors(void)
{
	static struct host h;
	char want[1024];

	/* An absent GPU: file, line and key, and the GPUs that are there. */
	CHECK_INT(pair_ini(&h, gpu2s,
			   "[nic.a]\ndevice = mlx5_0\n\n; rail 0\ngpu = 0000:3c:00.0\n"
			   "[nic.b]\ndevice = mlx5_1\ngpu = 0000:1a:00.0\n"
			   "[nic.c]\ndevice = mlx5_2\ngpu = 7\n"
			   "[nic.d]\ndevice = ens5f0\ngpu = 6\n"),
		  -ENODEV);
	snprintf(want, sizeof(want),
		 "pair.ini:5: nic.a.gpu: there is no PCI function 0000:3c:00.0; NVIDIA GPUs "
		 "under %s/bus/pci/devices, in PCI-address order: 0 = 0000:18:00.0, 1 = "
		 "0000:19:00.0, 2 = 0000:1d:00.0, 3 = 0000:1e:00.0, 4 = 0000:38:00.0, 5 = "
		 "0000:9a:00.0, 6 = 0000:9b:00.0\n",
		 gpu2s);
	CHECK_HAS(h.err, want);
	CHECK_HAS(h.err, "pair.ini:8: nic.b.gpu: 0000:1a:00.0 is not an NVIDIA GPU (vendor "
			 "0x15b3, class 0x020700); NVIDIA GPUs under ");
	CHECK_HAS(h.err, "pair.ini:11: nic.c.gpu: GPU index 7 is past the last one; ");
	CHECK(strstr(h.err, "nic.d") == NULL); /* index 6 exists */
	CHECK_STR(h.pair[3].addr, "0000:9b:00.0");

	/* On a host with no GPU, a configured one lists none. */
	CHECK_INT(pair_ini(&h, two, "[nic.a]\ndevice = mlx5_0\ngpu = 0\n"), -ENODEV);
	CHECK_HAS(h.err, "pair.ini:3: nic.a.gpu: GPU index 0 is past the last one; NVIDIA GPUs");
	CHECK_HAS(h.err, "in PCI-address order: none");
}

static void test_ini_syntax(void)
{
	struct kvl_config cfg;
	struct kvl_conf_errors errs;
	static const char *const bad[] = { "gpu = 0000:zz:00.0", "gpu = 64", "gpu = -1",
					   "gpu = first", "gpu = 0000:3b:00" };

	CHECK_INT(kvl_config_load_string("t.ini", "[nic.a]\ndevice = lo\ngpu = 3B:00.0\n", &cfg,
					 &errs),
		  0);
	CHECK_STR(cfg.nics[0].gpu, "0000:3b:00.0");
	CHECK_INT(
		kvl_config_load_string("t.ini", "[nic.a]\ndevice = lo\ngpu = NONE\n", &cfg, &errs),
		0);
	CHECK_STR(cfg.nics[0].gpu, "none");
	CHECK_INT(kvl_config_load_string("t.ini", "[nic.a]\ndevice = lo\n", &cfg, &errs), 0);
	CHECK_STR(cfg.nics[0].gpu, "auto");
	CHECK_INT(kvl_config_key_line(&cfg, KVL_SEC_NIC, 0, "gpu"), 1); /* not set: section */
	CHECK_INT(kvl_config_key_line(&cfg, KVL_SEC_NIC, 1, "gpu"), 0); /* no such NIC */
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		char ini[128];

		snprintf(ini, sizeof(ini), "[nic.a]\ndevice = lo\n%s\n", bad[i]);
		CHECK_INT(kvl_config_load_string("t.ini", ini, &cfg, &errs), -EINVAL);
		CHECK_HAS(errs.msg[0], "t.ini:3: nic.a.gpu: expected auto, none, a GPU index in "
				       "0..63 (PCI-address order) or a PCI address like "
				       "0000:3b:00.0");
	}
}

static void test_one_gpu_host(void)
{
	static struct host h;
	struct kvl_gpu_pair *p = h.pair;

	/* a 1-GPU host: every NIC shares the GPU */
	CHECK_INT(pair_ini(&h, one,
			   "[nic.a]\ndevice = mlx5_0\n[nic.b]\ndevice = enp1s0f0\n"
			   "[nic.c]\ndevice = rxe0\n[nic.d]\ndevice = enp1s0f0.100\n"),
		  0);
	CHECK_STR(p[3].nic_addr, "0000:01:00.0");
	CHECK_STR(kvl_pci_dist_name(p[3].dist), "PHB");
	for (int i = 0; i < 4; i++)
		CHECK_STR(p[i].addr, "0000:02:00.0");
	CHECK_STR(kvl_pci_dist_name(p[0].dist), "PHB");
	CHECK_STR(p[0].nic_addr, "0000:01:00.0");
	CHECK_STR(kvl_pci_dist_name(p[1].dist), "PHB");
	CHECK_STR(p[1].nic_addr, "0000:01:00.0");
	CHECK_STR(kvl_pci_dist_name(p[2].dist), "none");
	CHECK_HAS(p[2].note, "rxe0 is soft-RoCE over enp1s0f0");

	/* no GPU at all: none, and where it looked */
	CHECK_INT(pair_ini(&h, two, "[nic.a]\ndevice = mlx5_0\n[nic.b]\ndevice = lo\n"), 0);
	CHECK_INT(p[0].gpu, -1);
	CHECK_STR(p[0].addr, "");
	CHECK_STR(p[0].nic_addr, "0000:01:00.0");
	CHECK_HAS(p[0].note, "no NVIDIA GPU under ");
	CHECK_HAS(p[0].note, "/bus/pci/devices");
	CHECK_HAS(p[1].note, "lo has no device link: a virtual netdev; no NVIDIA GPU under ");
}

int main(void)
{
	const char *fx = getenv("KVL_FIXTURES");

	if (fx == NULL || fx[0] == '\0') {
		fprintf(stderr, "test_gpu_pair: KVL_FIXTURES is not set (meson sets it to "
				"<source>/tests/fixtures)\n");
		return 1;
	}
	snprintf(one, sizeof(one), "%s/sysfs/one-node", fx);
	snprintf(two, sizeof(two), "%s/sysfs/two-node", fx);
	snprintf(gpu2s, sizeof(gpu2s), "%s/sysfs/two-socket-gpu", fx);

	test_addr();
	test_scan();
	test_nvidia_smi_matrix();
	test_auto();
	test_override();
	test_override_errors();
	test_ini_syntax();
	test_one_gpu_host();
	return kvl_test_done("gpu_pair");
}
