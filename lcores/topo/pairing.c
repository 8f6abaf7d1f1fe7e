/* SPDX-License-Identifier: BSD-3-Clause */
/* NIC-to-lcore pairing: one worker lcore per NIC, on the NIC's NUMA node when there is one. */

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sysfs.h"
#include "topo.h"

/* Enough for the suggestion in an error message; larger CPU ids are left out of it. */
#define EXAMPLE_CPUS 1024

static const char *nic_name(const char *const *names, unsigned i, char *buf, size_t cap)
{
	if (names && names[i] && names[i][0])
		return names[i];
	snprintf(buf, cap, "NIC %u", i);
	return buf;
}

/* CPUs of @node from sysfs, for suggestions; 0 bits set when sysfs does not say. */
static int node_cpus(const char *sysfs_root, int node, uint64_t *bits, char *text, size_t tcap)
{
	char path[PATH_MAX], list[4096];

	text[0] = '\0';
	memset(bits, 0, EXAMPLE_CPUS / 8);
	if (node < 0 ||
	    kvl_sysfs_path(path, sizeof(path), sysfs_root, "devices/system/node/node%d/cpulist",
			   node) < 0 ||
	    kvl_sysfs_read(path, list, sizeof(list)) <= 0 ||
	    kvl_parse_cpulist(list, bits, EXAMPLE_CPUS) <= 0)
		return 0;
	kvl_copy_str(text, tcap, list);
	return 1;
}

static bool bit_test(const uint64_t *bits, unsigned b)
{
	return (bits[b / 64] >> (b % 64)) & 1;
}

static void bit_set(uint64_t *bits, unsigned b)
{
	bits[b / 64] |= UINT64_C(1) << (b % 64);
}

/* Lowest CPU set in @from and not in @taken; -1 if none. */
static int first_free(const uint64_t *from, const uint64_t *taken)
{
	for (unsigned c = 0; c < EXAMPLE_CPUS; c++)
		if (bit_test(from, c) && !bit_test(taken, c))
			return (int)c;
	return -1;
}

/* "0-2,5" */
static void msg_cpulist(struct kvl_msg *m, const uint64_t *bits)
{
	bool first = true;

	for (unsigned c = 0; c < EXAMPLE_CPUS; c++) {
		unsigned e = c;

		if (!bit_test(bits, c))
			continue;
		while (e + 1 < EXAMPLE_CPUS && bit_test(bits, e + 1))
			e++;
		if (e == c)
			kvl_msg_add(m, "%s%u", first ? "" : ",", c);
		else
			kvl_msg_add(m, "%s%u-%u", first ? "" : ",", c, e);
		first = false;
		c = e;
	}
}

/*
 * An EAL lcore list that would work on this host: a main lcore, then per NIC the lowest free CPU
 * of its node (known nodes first, as the pairing serves them). Lcore ids equal CPU ids with a
 * plain -l, so the CPUs are the list.
 */
static void msg_example(struct kvl_msg *m, const char *sysfs_root, const int *nic_node,
			unsigned n_nics)
{
	uint64_t chosen[EXAMPLE_CPUS / 64] = { 0 }, all[EXAMPLE_CPUS / 64] = { 0 };
	uint64_t cpus[EXAMPLE_CPUS / 64];
	int n_nodes = kvl_numa_node_count(sysfs_root), cpu;
	char text[8];

	for (int node = 0; node < n_nodes; node++)
		if (node_cpus(sysfs_root, node, cpus, text, sizeof(text)))
			for (unsigned w = 0; w < EXAMPLE_CPUS / 64; w++)
				all[w] |= cpus[w];
	if (first_free(all, chosen) < 0) {
		kvl_msg_add(m, "-l 0-%u", n_nics);
		return;
	}
	bit_set(chosen, (unsigned)first_free(all, chosen)); /* main lcore */
	for (int pass = 0; pass < 2; pass++) {
		for (unsigned i = 0; i < n_nics; i++) {
			if ((pass == 0) != (nic_node[i] >= 0))
				continue;
			cpu = -1;
			if (nic_node[i] >= 0 &&
			    node_cpus(sysfs_root, nic_node[i], cpus, text, sizeof(text)))
				cpu = first_free(cpus, chosen);
			if (cpu < 0)
				cpu = first_free(all, chosen);
			if (cpu < 0) {
				kvl_msg_add(m, "-l 0-%u", n_nics);
				return;
			}
			bit_set(chosen, (unsigned)cpu);
		}
	}
	kvl_msg_add(m, "-l ");
	msg_cpulist(m, chosen);
}

static void msg_lcores(struct kvl_msg *m, const struct kvl_lcore_desc *lcores, unsigned n_lcores)
{
	if (n_lcores == 0) {
		kvl_msg_add(m, "none");
		return;
	}
	for (unsigned j = 0; j < n_lcores; j++)
		kvl_msg_add(m, "%slcore %u (cpu %u, socket %d)", j ? ", " : "", lcores[j].lcore_id,
			    lcores[j].cpu, lcores[j].socket);
}

/* Free lcore on @node with the lowest lcore id; -1 if none. */
static int pick_local(const struct kvl_lcore_desc *lcores, unsigned n_lcores, const int *owner,
		      int node)
{
	int best = -1;

	for (unsigned j = 0; j < n_lcores; j++) {
		if (owner[j] >= 0 || lcores[j].socket != node)
			continue;
		if (best < 0 || lcores[j].lcore_id < lcores[best].lcore_id)
			best = (int)j;
	}
	return best;
}

/* Free lcore nearest to @node by SLIT distance, then lowest lcore id; -1 if none. */
static int pick_near(const char *sysfs_root, const struct kvl_lcore_desc *lcores, unsigned n_lcores,
		     const int *owner, int node)
{
	int best = -1, best_d = INT_MAX;

	for (unsigned j = 0; j < n_lcores; j++) {
		int d;

		if (owner[j] >= 0)
			continue;
		d = node >= 0 ? kvl_numa_distance(sysfs_root, node, lcores[j].socket) : 0;
		if (best < 0 || d < best_d ||
		    (d == best_d && lcores[j].lcore_id < lcores[best].lcore_id)) {
			best = (int)j;
			best_d = d;
		}
	}
	return best;
}

int kvl_pair_nics(const char *sysfs_root, const int *nic_node, const char *const *nic_names,
		  unsigned n_nics, const struct kvl_lcore_desc *lcores, unsigned n_lcores,
		  bool allow_remote, struct kvl_pairing *out, char *err, size_t errlen)
{
	char name[32], other[32];
	int *owner, rc = 0;
	struct kvl_msg m;

	kvl_msg_init(&m, err, errlen);
	if (n_nics == 0)
		return 0;
	if (nic_node == NULL || out == NULL || (n_lcores > 0 && lcores == NULL)) {
		kvl_msg_add(&m, "pairing: missing NIC nodes, lcores or output array");
		return -EINVAL;
	}
	if (n_lcores < n_nics) {
		/* Advice before the list: a long list is what gets clipped. */
		kvl_msg_add(&m, "%u NIC%s need%s %u worker lcore%s (one each), EAL gave %u; ",
			    n_nics, n_nics == 1 ? "" : "s", n_nics == 1 ? "s" : "", n_nics,
			    n_nics == 1 ? "" : "s", n_lcores);
		kvl_msg_add(&m, "give EAL a main lcore plus one per NIC, e.g. ");
		msg_example(&m, sysfs_root, nic_node, n_nics);
		kvl_msg_add(&m, "; worker lcores now: ");
		msg_lcores(&m, lcores, n_lcores);
		return -ENOSPC;
	}

	/* owner[j]: the NIC that lcore j serves, -1 while free */
	owner = malloc(n_lcores * sizeof(*owner));
	if (owner == NULL) {
		kvl_msg_add(&m, "pairing: out of memory");
		return -ENOMEM;
	}
	for (unsigned j = 0; j < n_lcores; j++)
		owner[j] = -1;
	for (unsigned i = 0; i < n_nics; i++)
		out[i].lcore_idx = UINT_MAX;

	/*
	 * Local pairs first, for every NIC whose node is known; only then remote fallbacks and
	 * NICs of unknown node, so neither can take the one lcore another NIC's node has.
	 */
	for (unsigned i = 0; i < n_nics; i++) {
		int j;

		if (nic_node[i] < 0)
			continue;
		j = pick_local(lcores, n_lcores, owner, nic_node[i]);
		if (j < 0)
			continue;
		owner[j] = (int)i;
		out[i].lcore_idx = (unsigned)j;
		out[i].remote = false;
	}

	for (unsigned i = 0; i < n_nics; i++) {
		int j;

		if (nic_node[i] < 0 || out[i].lcore_idx != UINT_MAX)
			continue;
		if (!allow_remote) {
			char cpus_text[64];
			uint64_t cpus[EXAMPLE_CPUS / 64];
			int taken_by = -1;

			for (unsigned k = 0; k < n_lcores; k++)
				if (lcores[k].socket == nic_node[i] && owner[k] >= 0)
					taken_by = owner[k];
			kvl_msg_add(&m,
				    "%s: on NUMA node %d, but no free worker lcore on socket %d",
				    nic_name(nic_names, i, name, sizeof(name)), nic_node[i],
				    nic_node[i]);
			if (taken_by >= 0)
				kvl_msg_add(&m, " (taken by %s)",
					    nic_name(nic_names, (unsigned)taken_by, other,
						     sizeof(other)));
			kvl_msg_add(&m, "; add a node %d CPU", nic_node[i]);
			if (node_cpus(sysfs_root, nic_node[i], cpus, cpus_text, sizeof(cpus_text)))
				kvl_msg_add(&m, " (%s)", cpus_text);
			kvl_msg_add(
				&m,
				" to the EAL lcore list, or set allow_remote_numa in [runtime]; "
				"worker lcores: ");
			msg_lcores(&m, lcores, n_lcores);
			rc = -ENODEV;
			goto out;
		}
		j = pick_near(sysfs_root, lcores, n_lcores, owner, nic_node[i]);
		/* n_lcores >= n_nics, so a free lcore is left for every NIC still unpaired. */
		owner[j] = (int)i;
		out[i].lcore_idx = (unsigned)j;
		out[i].remote = true;
	}

	for (unsigned i = 0; i < n_nics; i++) {
		int j;

		if (nic_node[i] >= 0)
			continue;
		j = pick_near(sysfs_root, lcores, n_lcores, owner, -1);
		owner[j] = (int)i;
		out[i].lcore_idx = (unsigned)j;
		out[i].remote = false; /* nothing to be remote from */
	}
out:
	free(owner);
	return rc;
}
