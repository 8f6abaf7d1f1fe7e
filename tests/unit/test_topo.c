/* SPDX-License-Identifier: BSD-3-Clause */
/* Unit test of the sysfs topology layer and NIC pairing, over the fixture trees. */

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvl_test.h"
#include "topo.h"

static char one[512], two[512], three[512], nowhere[512];

static struct kvl_nic_conf mknic(const char *label, const char *dev, int transport, unsigned port)
{
	struct kvl_nic_conf c;

	memset(&c, 0, sizeof(c));
	snprintf(c.label, sizeof(c.label), "%s", label);
	snprintf(c.device, sizeof(c.device), "%s", dev);
	c.transport = transport;
	c.port = port;
	c.gid_index = KVL_AUTO;
	c.numa_node = KVL_AUTO;
	return c;
}

/*
 * Messages print paths under the root, which is long here and "/sys" on a host: check that the
 * host's version of @msg would fit the buffer a caller gives (KVL_ERR_LEN), unclipped.
 */
static size_t host_len(const char *msg, const char *root)
{
	size_t len = strlen(msg), rl = strlen(root);

	for (const char *p = strstr(msg, root); p; p = strstr(p + rl, root))
		len -= rl - 4;
	return len;
}

static int discover(const char *root, struct kvl_nic_conf c, struct kvl_nic_info *info, char *err)
{
	int rc;

	/* Prefilled so a success that leaves an old message behind is caught. */
	strcpy(err, "stale");
	rc = kvl_nic_discover(root, &c, info, err, 1024);
	CHECK(host_len(err, root) < KVL_ERR_LEN);
	if (rc == 0)
		CHECK_STR(err, "");
	return rc;
}

static void test_cpulist(void)
{
	uint64_t b[2];
	static const char *const bad[] = { "abc", "1,",	 ",1",	 "3-1",	  "1-", "-1",
					   "1 2", "0x3", "1,,2", "1-2-3", "+1", "1;2" };

	CHECK_INT(kvl_parse_cpulist("0-3,8,10-11", b, 64), 7);
	CHECK(b[0] == (UINT64_C(0xf) | UINT64_C(1) << 8 | UINT64_C(3) << 10));
	CHECK_INT(kvl_parse_cpulist("5", b, 64), 1);
	CHECK(b[0] == UINT64_C(1) << 5);
	CHECK_INT(kvl_parse_cpulist("0-3\n", b, 64), 4);   /* as read from sysfs */
	CHECK_INT(kvl_parse_cpulist("0-1,1-2", b, 64), 3); /* overlaps count once */
	CHECK_INT(kvl_parse_cpulist("", b, 64), 0);	   /* a CPU-less (memory) node */
	CHECK(b[0] == 0);
	CHECK_INT(kvl_parse_cpulist("\n", b, 64), 0);

	/* A second word, and the bitmap is cleared before parsing. */
	b[0] = b[1] = ~UINT64_C(0);
	CHECK_INT(kvl_parse_cpulist("0,127", b, 128), 2);
	CHECK(b[0] == 1 && b[1] == UINT64_C(1) << 63);
	CHECK_INT(kvl_parse_cpulist("64-65", b, 128), 2);
	CHECK(b[0] == 0 && b[1] == 3);

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		b[0] = 0xff;
		CHECK_INT(kvl_parse_cpulist(bad[i], b, 64), -EINVAL);
		CHECK(b[0] == 0);
	}
	CHECK_INT(kvl_parse_cpulist(NULL, b, 64), -EINVAL);
	CHECK_INT(kvl_parse_cpulist("99999999999999999999", b, 64), -EINVAL);

	/* A CPU the bitmap cannot hold is an error, not silently dropped. */
	CHECK_INT(kvl_parse_cpulist("64", b, 64), -EINVAL);
	CHECK_INT(kvl_parse_cpulist("60-70", b, 64), -EINVAL);
	CHECK_INT(kvl_parse_cpulist("8", b, 8), -EINVAL);
	CHECK_INT(kvl_parse_cpulist("7", b, 8), 1);
	CHECK_INT(kvl_parse_cpulist("", NULL, 0), 0);
	CHECK_INT(kvl_parse_cpulist("0", NULL, 0), -EINVAL);
}

static void test_numa(void)
{
	CHECK_INT(kvl_numa_node_count(one), 1);
	CHECK_INT(kvl_numa_node_count(two), 2);
	CHECK_INT(kvl_numa_node_count(three), 4); /* ids 0, 1, 3: highest + 1 */
	CHECK_INT(kvl_numa_node_count(nowhere), 1);

	CHECK_INT(kvl_cpu_numa_node(one, 0), 0);
	CHECK_INT(kvl_cpu_numa_node(one, 7), 0);
	CHECK_INT(kvl_cpu_numa_node(one, 8), -1);
	CHECK_INT(kvl_cpu_numa_node(two, 0), 0);
	CHECK_INT(kvl_cpu_numa_node(two, 3), 0);
	CHECK_INT(kvl_cpu_numa_node(two, 4), 1);
	CHECK_INT(kvl_cpu_numa_node(two, 7), 1);
	CHECK_INT(kvl_cpu_numa_node(two, 8), -1);
	CHECK_INT(kvl_cpu_numa_node(three, 5), 3);
	CHECK_INT(kvl_cpu_numa_node(nowhere, 0), -1);

	CHECK_INT(kvl_numa_distance(two, 0, 0), 10);
	CHECK_INT(kvl_numa_distance(two, 0, 1), 21);
	CHECK_INT(kvl_numa_distance(two, 1, 0), 21);
	CHECK_INT(kvl_numa_distance(two, 1, 1), 10);
	/* node 3 sits in the third column: the kernel skips the hole at 2 */
	CHECK_INT(kvl_numa_distance(three, 0, 3), 30);
	CHECK_INT(kvl_numa_distance(three, 3, 1), 20);
	CHECK_INT(kvl_numa_distance(three, 1, 3), 20);
	CHECK_INT(kvl_numa_distance(three, 0, 2), 20); /* offline node: default */
	/* Defaults when sysfs says nothing. */
	CHECK_INT(kvl_numa_distance(one, 0, 0), 10);
	CHECK_INT(kvl_numa_distance(one, 0, 1), 20);
	CHECK_INT(kvl_numa_distance(nowhere, 0, 0), 10);
	CHECK_INT(kvl_numa_distance(nowhere, 2, 5), 20);
	CHECK_INT(kvl_numa_distance(two, -1, 0), 20);
}

static void test_discover_ok(void)
{
	struct kvl_nic_info in;
	struct kvl_nic_conf c;
	char err[1024];

	CHECK_INT(discover(one, mknic("rail0", "mlx5_0", KVL_TRANSPORT_AUTO, 1), &in, err), 0);
	CHECK_INT(in.kind, KVL_NIC_RDMA);
	CHECK_INT(in.transport, KVL_TRANSPORT_MLX5);
	CHECK_INT(in.numa_node, 0);
	CHECK(!in.numa_from_conf);
	CHECK_STR(in.driver, "mlx5_core");
	CHECK_STR(in.link_layer, "Ethernet");
	CHECK_STR(in.state, "ACTIVE");
	CHECK_STR(in.netdev, "enp1s0f0");
	CHECK_INT(in.netdev_mtu, 9000);

	/* verbs is a valid explicit choice on mlx5 hardware */
	CHECK_INT(discover(one, mknic("rail0", "mlx5_0", KVL_TRANSPORT_VERBS, 1), &in, err), 0);
	CHECK_INT(in.transport, KVL_TRANSPORT_VERBS);

	/* Soft-RoCE: no PCI function, node from the parent netdev. */
	CHECK_INT(discover(one, mknic("soft", "rxe0", KVL_TRANSPORT_AUTO, 1), &in, err), 0);
	CHECK_INT(in.kind, KVL_NIC_RDMA);
	CHECK_INT(in.transport, KVL_TRANSPORT_VERBS);
	CHECK_STR(in.driver, "rdma_rxe");
	CHECK_INT(in.numa_node, 0);
	CHECK_STR(in.netdev, "enp1s0f0");
	CHECK_STR(in.state, "ACTIVE");
	CHECK_INT(in.netdev_mtu, 9000);

	CHECK_INT(discover(one, mknic("tcp0", "lo", KVL_TRANSPORT_AUTO, 1), &in, err), 0);
	CHECK_INT(in.kind, KVL_NIC_NETDEV);
	CHECK_INT(in.transport, KVL_TRANSPORT_TCP);
	CHECK_INT(in.numa_node, -1);
	CHECK_STR(in.driver, "");
	CHECK_STR(in.link_layer, "");
	CHECK_STR(in.state, "unknown");
	CHECK_STR(in.netdev, "lo");
	CHECK_INT(in.netdev_mtu, 65536);

	CHECK_INT(discover(one, mknic("tcp0", "enp1s0f0", KVL_TRANSPORT_TCP, 1), &in, err), 0);
	CHECK_INT(in.kind, KVL_NIC_NETDEV);
	CHECK_INT(in.transport, KVL_TRANSPORT_TCP);
	CHECK_INT(in.numa_node, 0);
	CHECK_STR(in.driver, "mlx5_core");
	CHECK_STR(in.state, "up");
	CHECK_INT(in.netdev_mtu, 9000);

	/* A VLAN has no device of its own: its node is its lower device's. */
	CHECK_INT(discover(one, mknic("vlan", "enp1s0f0.100", KVL_TRANSPORT_AUTO, 1), &in, err), 0);
	CHECK_INT(in.transport, KVL_TRANSPORT_TCP);
	CHECK_INT(in.numa_node, 0);
	CHECK_STR(in.driver, "");

	/* A trailing '/' on the root changes nothing. */
	{
		char root[600];

		snprintf(root, sizeof(root), "%s/", one);
		CHECK_INT(discover(root, mknic("rail0", "mlx5_0", KVL_TRANSPORT_AUTO, 1), &in, err),
			  0);
		CHECK_INT(in.numa_node, 0);
	}

	CHECK_INT(discover(two, mknic("rail1", "mlx5_1", KVL_TRANSPORT_MLX5, 1), &in, err), 0);
	CHECK_INT(in.transport, KVL_TRANSPORT_MLX5);
	CHECK_INT(in.numa_node, 1);
	CHECK_STR(in.netdev, "ens2f0");
	CHECK_INT(in.netdev_mtu, 4200);

	CHECK_INT(discover(two, mknic("ib", "mlx5_2", KVL_TRANSPORT_AUTO, 1), &in, err), 0);
	CHECK_INT(in.transport, KVL_TRANSPORT_MLX5);
	CHECK_INT(in.numa_node, 1);
	CHECK_STR(in.link_layer, "InfiniBand");
	CHECK_STR(in.netdev, "");
	CHECK_INT(in.netdev_mtu, 0);

	/* A port that is down is reported, not refused: the caller decides. */
	CHECK_INT(discover(two, mknic("down", "mlx5_3", KVL_TRANSPORT_AUTO, 1), &in, err), 0);
	CHECK_STR(in.state, "DOWN");
	CHECK_STR(in.netdev, "ens1f1");

	CHECK_INT(discover(two, mknic("t1", "ens2f0", KVL_TRANSPORT_AUTO, 1), &in, err), 0);
	CHECK_INT(in.transport, KVL_TRANSPORT_TCP);
	CHECK_INT(in.numa_node, 1);

	/* The INI's numa_node wins over sysfs, and says so. */
	c = mknic("rail1", "mlx5_1", KVL_TRANSPORT_AUTO, 1);
	c.numa_node = 0;
	CHECK_INT(discover(two, c, &in, err), 0);
	CHECK_INT(in.numa_node, 0);
	CHECK(in.numa_from_conf);
	c = mknic("tcp0", "lo", KVL_TRANSPORT_AUTO, 1);
	c.numa_node = 1;
	CHECK_INT(discover(one, c, &in, err), 0);
	CHECK_INT(in.numa_node, 1);
	CHECK(in.numa_from_conf);
}

static void test_discover_errors(void)
{
	struct kvl_nic_info in;
	char err[1024], path[1024];

	CHECK_INT(discover(one, mknic("rail0", "rxe0", KVL_TRANSPORT_MLX5, 1), &in, err), -EINVAL);
	CHECK_HAS(err, "nic.rail0 (rxe0): ");
	CHECK_HAS(err, "transport = mlx5 needs a device bound to mlx5_core");
	CHECK_HAS(err, "driven by rdma_rxe");
	CHECK_HAS(err, "transport = verbs");

	/* An RDMA transport on a netdev: point at the RDMA devices that sit on it. */
	snprintf(path, sizeof(path), "%s/class/infiniband", one);
	CHECK_INT(discover(one, mknic("r", "enp1s0f0", KVL_TRANSPORT_VERBS, 1), &in, err), -EINVAL);
	CHECK_HAS(err, "nic.r (enp1s0f0): transport = verbs needs an RDMA device");
	CHECK_HAS(err, "\"enp1s0f0\" is a netdev");
	CHECK_HAS(err, path);
	CHECK_HAS(err, "RDMA devices on it: mlx5_0, rxe0 (set device = one of them)");
	CHECK_INT(discover(one, mknic("r", "enp1s0f0", KVL_TRANSPORT_MLX5, 1), &in, err), -EINVAL);
	CHECK_HAS(err, "mlx5_core RDMA devices on it: mlx5_0 (set device");
	CHECK(strstr(err, "rxe0") == NULL);
	CHECK_INT(discover(one, mknic("r", "lo", KVL_TRANSPORT_VERBS, 1), &in, err), -EINVAL);
	CHECK_HAS(err, "nic.r (lo): ");
	CHECK_HAS(err, "RDMA devices on it: none (found: mlx5_0, rxe0)");

	/* tcp on an RDMA device: name its netdev. */
	CHECK_INT(discover(one, mknic("t", "mlx5_0", KVL_TRANSPORT_TCP, 1), &in, err), -EINVAL);
	CHECK_HAS(err, "nic.t (mlx5_0): transport = tcp needs a netdev");
	CHECK_HAS(err, "\"mlx5_0\" is an RDMA device");
	CHECK_HAS(err, "set device = enp1s0f0");
	CHECK_INT(discover(two, mknic("t", "mlx5_2", KVL_TRANSPORT_TCP, 1), &in, err), -EINVAL);
	CHECK_HAS(err, "it has no netdev on port 1");

	snprintf(path, sizeof(path), "%s/class/infiniband/mlx5_0/ports (found: 1)", one);
	CHECK_INT(discover(one, mknic("rail0", "mlx5_0", KVL_TRANSPORT_AUTO, 2), &in, err),
		  -ENODEV);
	CHECK_HAS(err, "nic.rail0 (mlx5_0): no port 2 under ");
	CHECK_HAS(err, path);
	CHECK_INT(discover(one, mknic("rail0", "mlx5_0", KVL_TRANSPORT_AUTO, 0), &in, err),
		  -ENODEV);
	CHECK_HAS(err, "no port 0 under ");

	/* Unknown name: where we looked and what is there. */
	CHECK_INT(discover(one, mknic("rail0", "mlx5_9", KVL_TRANSPORT_AUTO, 1), &in, err),
		  -ENODEV);
	snprintf(path, sizeof(path),
		 "nic.rail0 (mlx5_9): no RDMA device \"mlx5_9\" under "
		 "%s/class/infiniband (found: mlx5_0, rxe0)",
		 one);
	CHECK_HAS(err, path);
	snprintf(path, sizeof(path),
		 "no netdev \"mlx5_9\" under %s/class/net (found: enp1s0f0, enp1s0f0.100, lo)",
		 one);
	CHECK_HAS(err, path);
	CHECK_INT(discover(two, mknic("rail0", "mlx5_9", KVL_TRANSPORT_MLX5, 1), &in, err),
		  -ENODEV);
	CHECK_HAS(err, "(found: mlx5_0, mlx5_1, mlx5_2, mlx5_3)");
	CHECK(strstr(err, "netdev") == NULL);
	CHECK_INT(discover(two, mknic("t", "eth9", KVL_TRANSPORT_TCP, 1), &in, err), -ENODEV);
	CHECK_HAS(err, "nic.t (eth9): no netdev \"eth9\"");
	CHECK_HAS(err, "(found: ens1f0, ens1f1, ens2f0, lo)");
	CHECK(strstr(err, "RDMA") == NULL);

	/* No RDMA stack at all (no class/infiniband): say so rather than "found: nothing". */
	CHECK_INT(discover(nowhere, mknic("rail0", "mlx5_0", KVL_TRANSPORT_AUTO, 1), &in, err),
		  -ENODEV);
	CHECK_HAS(err, "nic.rail0 (mlx5_0): no RDMA device \"mlx5_0\"");
	CHECK_HAS(err, "(the directory does not exist: no RDMA driver is loaded)");

	/* Names that would walk out of the class directory. */
	CHECK_INT(discover(one, mknic("x", "../net/lo", KVL_TRANSPORT_AUTO, 1), &in, err), -EINVAL);
	CHECK_HAS(err, "nic.x (../net/lo): device must name");
	CHECK_INT(discover(one, mknic("x", "", KVL_TRANSPORT_AUTO, 1), &in, err), -EINVAL);
	CHECK_INT(discover(one, mknic("x", "..", KVL_TRANSPORT_AUTO, 1), &in, err), -EINVAL);
}

static void test_pairing(void)
{
	struct kvl_pairing out[4];
	char err[KVL_ERR_LEN];
	struct kvl_nic_info in;
	char derr[1024];
	int rc;

	/* One node: NICs take lcores in order. */
	{
		const struct kvl_lcore_desc lc[] = { { 1, 1, 0 }, { 2, 2, 0 }, { 3, 3, 0 } };
		const int node[] = { 0, 0 };
		const char *const names[] = { "nic.a (mlx5_0)", "nic.b (rxe0)" };

		strcpy(err, "stale");
		rc = kvl_pair_nics(one, node, names, 2, lc, 3, false, out, err, sizeof(err));
		CHECK_INT(rc, 0);
		CHECK_STR(err, "");
		CHECK_INT(out[0].lcore_idx, 0);
		CHECK_INT(out[1].lcore_idx, 1);
		CHECK(!out[0].remote && !out[1].remote);
	}

	/* Two nodes, NIC nodes and lcore sockets both read from the fixture. */
	struct kvl_lcore_desc lc[3];
	const unsigned cpus[] = { 1, 2, 5 };
	int node[3];
	const char *const names[] = { "nic.rail0 (mlx5_0)", "nic.rail1 (mlx5_1)",
				      "nic.ib (mlx5_2)" };

	for (unsigned i = 0; i < 3; i++) {
		lc[i].lcore_id = cpus[i];
		lc[i].cpu = cpus[i];
		lc[i].socket = kvl_cpu_numa_node(two, cpus[i]);
	}
	CHECK_INT(lc[0].socket, 0);
	CHECK_INT(lc[1].socket, 0);
	CHECK_INT(lc[2].socket, 1);
	CHECK_INT(discover(two, mknic("rail0", "mlx5_0", KVL_TRANSPORT_AUTO, 1), &in, derr), 0);
	node[0] = in.numa_node;
	CHECK_INT(discover(two, mknic("rail1", "mlx5_1", KVL_TRANSPORT_AUTO, 1), &in, derr), 0);
	node[1] = in.numa_node;
	CHECK_INT(discover(two, mknic("ib", "mlx5_2", KVL_TRANSPORT_AUTO, 1), &in, derr), 0);
	node[2] = in.numa_node;
	CHECK_INT(node[0], 0);
	CHECK_INT(node[1], 1);
	CHECK_INT(node[2], 1);

	/* The node-1 NIC comes second and node 1's lcore id is the highest: it still gets it. */
	rc = kvl_pair_nics(two, node, names, 2, lc, 3, false, out, err, sizeof(err));
	CHECK_INT(rc, 0);
	CHECK_INT(out[0].lcore_idx, 0);
	CHECK_INT(out[1].lcore_idx, 2);
	CHECK(!out[0].remote && !out[1].remote);

	/* Lowest lcore id, not array position, among a node's free lcores. */
	{
		const struct kvl_lcore_desc sh[] = { { 2, 2, 0 }, { 5, 5, 1 }, { 1, 1, 0 } };

		rc = kvl_pair_nics(two, node, names, 2, sh, 3, false, out, err, sizeof(err));
		CHECK_INT(rc, 0);
		CHECK_INT(out[0].lcore_idx, 2);
		CHECK_INT(out[1].lcore_idx, 1);
	}

	/* No node-1 lcore: refuse, naming the NIC, its node and what there is. */
	rc = kvl_pair_nics(two, node, names, 2, lc, 2, false, out, err, sizeof(err));
	CHECK_INT(rc, -ENODEV);
	CHECK_HAS(err, "nic.rail1 (mlx5_1): on NUMA node 1, but no free worker lcore on socket 1");
	CHECK_HAS(err, "lcore 1 (cpu 1, socket 0), lcore 2 (cpu 2, socket 0)");
	CHECK_HAS(err, "add a node 1 CPU (4-7)");
	CHECK_HAS(err, "allow_remote_numa");

	/* ... unless remote is allowed. */
	rc = kvl_pair_nics(two, node, names, 2, lc, 2, true, out, err, sizeof(err));
	CHECK_INT(rc, 0);
	CHECK_INT(out[0].lcore_idx, 0);
	CHECK(!out[0].remote);
	CHECK_INT(out[1].lcore_idx, 1);
	CHECK(out[1].remote);

	/* Two node-1 NICs, one node-1 lcore: the second is told who has it. */
	{
		const int n11[] = { 1, 1 };
		const char *const nm[] = { "nic.rail1 (mlx5_1)", "nic.ib (mlx5_2)" };

		rc = kvl_pair_nics(two, n11, nm, 2, lc, 3, false, out, err, sizeof(err));
		CHECK_INT(rc, -ENODEV);
		CHECK_HAS(err, "nic.ib (mlx5_2): on NUMA node 1");
		CHECK_HAS(err, "(taken by nic.rail1 (mlx5_1))");
	}

	/* Fewer lcores than NICs: how many, and an lcore list that would work here. */
	rc = kvl_pair_nics(two, node, names, 3, lc, 2, false, out, err, sizeof(err));
	CHECK_INT(rc, -ENOSPC);
	CHECK_HAS(err, "3 NICs need 3 worker lcores (one each), EAL gave 2");
	CHECK_HAS(err, "lcore 2 (cpu 2, socket 0)");
	CHECK_HAS(err, "e.g. -l 0-1,4-5"); /* main on cpu 0, then node 0, node 1, node 1 */

	/* A NIC of unknown node must not take the only node-0 lcore from a node-0 NIC. */
	{
		const struct kvl_lcore_desc l2[] = { { 1, 1, 0 }, { 5, 5, 1 } };
		const int nu[] = { -1, 0 };

		rc = kvl_pair_nics(two, nu, NULL, 2, l2, 2, false, out, err, sizeof(err));
		CHECK_INT(rc, 0);
		CHECK_INT(out[1].lcore_idx, 0);
		CHECK(!out[1].remote);
		CHECK_INT(out[0].lcore_idx, 1);
		CHECK(!out[0].remote);
	}

	/* A remote fallback must not either: node 1 is nearest to node 3, but node 1's NIC
	 * keeps its lcore and node 3's NIC goes to node 0. */
	{
		const struct kvl_lcore_desc l3[] = { { 2, 2, 1 }, { 0, 0, 0 } };
		const int n3[] = { 3, 1 };

		rc = kvl_pair_nics(three, n3, NULL, 2, l3, 2, true, out, err, sizeof(err));
		CHECK_INT(rc, 0);
		CHECK_INT(out[1].lcore_idx, 0);
		CHECK(!out[1].remote);
		CHECK_INT(out[0].lcore_idx, 1);
		CHECK(out[0].remote);
	}

	/* Remote fallback goes to the nearest node, even past a lower lcore id. */
	{
		const struct kvl_lcore_desc l4[] = { { 1, 4, 3 }, { 2, 2, 1 } };
		const int n0[] = { 0 };

		rc = kvl_pair_nics(three, n0, NULL, 1, l4, 2, true, out, err, sizeof(err));
		CHECK_INT(rc, 0);
		CHECK_INT(out[0].lcore_idx, 1);
		CHECK(out[0].remote);
		rc = kvl_pair_nics(three, n0, NULL, 1, l4, 2, false, out, err, sizeof(err));
		CHECK_INT(rc, -ENODEV);
		CHECK_HAS(err, "NIC 0: on NUMA node 0");
		CHECK_HAS(err, "lcore 1 (cpu 4, socket 3)");
		CHECK_HAS(err, "add a node 0 CPU (0-1)");
	}

	CHECK_INT(kvl_pair_nics(two, NULL, NULL, 0, NULL, 0, false, NULL, err, sizeof(err)), 0);
	rc = kvl_pair_nics(two, node, names, 1, NULL, 0, false, out, err, sizeof(err));
	CHECK_INT(rc, -ENOSPC);
	CHECK_HAS(err, "1 NIC needs 1 worker lcore (one each), EAL gave 0;");
	CHECK_HAS(err, "worker lcores now: none");

	/* Many lcores: the list is clipped, visibly, and the advice before it survives. */
	{
		struct kvl_lcore_desc many[24];
		const int n1[] = { 1 };

		for (unsigned i = 0; i < 24; i++)
			many[i] = (struct kvl_lcore_desc){ 100 + i, i % 4, 0 };
		rc = kvl_pair_nics(two, n1, names + 1, 1, many, 24, false, out, err, sizeof(err));
		CHECK_INT(rc, -ENODEV);
		CHECK_INT(strlen(err), KVL_ERR_LEN - 1);
		CHECK_STR(err + KVL_ERR_LEN - 4, "...");
		CHECK_HAS(err, "nic.rail1 (mlx5_1): on NUMA node 1");
		CHECK_HAS(err, "allow_remote_numa");
		CHECK_HAS(err, "lcore 100 (cpu 0, socket 0)");
	}
}

int main(void)
{
	const char *fx = getenv("KVL_FIXTURES");

	if (fx == NULL || fx[0] == '\0') {
		fprintf(stderr, "test_topo: KVL_FIXTURES is not set (meson sets it to "
				"<source>/tests/fixtures)\n");
		return 1;
	}
	snprintf(one, sizeof(one), "%s/sysfs/one-node", fx);
	snprintf(two, sizeof(two), "%s/sysfs/two-node", fx);
	snprintf(three, sizeof(three), "%s/sysfs/three-node", fx);
	snprintf(nowhere, sizeof(nowhere), "%s/sysfs/no-such-host", fx);

	test_cpulist();
	test_numa();
	test_discover_ok();
	test_discover_errors();
	test_pairing();
	return kvl_test_done("topo");
}
