/* SPDX-License-Identifier: BSD-3-Clause */
/* unit: the cluster record round trip, what it refuses, and the [cluster] keys' checks. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cluster_rec.h"
#include "config.h"
#include "kvl_test.h"

static void fill(struct kvl_cluster_rec *r)
{
	memset(r, 0, sizeof(*r));
	r->version = KVL_CLUSTER_REC_VERSION;
	r->proto = 3;
	snprintf(r->name, sizeof(r->name), "prefill-3");
	snprintf(r->peer_name, sizeof(r->peer_name), "kvlane");
	r->role = KVL_CLUSTER_PREFILL;
	snprintf(r->control, sizeof(r->control), "10.0.0.3:18515");
	r->n_nics = 1;
	snprintf(r->nic[0].device, sizeof(r->nic[0].device), "mlx5_0");
	snprintf(r->nic[0].transport, sizeof(r->nic[0].transport), "mlx5");
	snprintf(r->nic[0].link_layer, sizeof(r->nic[0].link_layer), "Ethernet");
	snprintf(r->nic[0].gid, sizeof(r->nic[0].gid), "0000:0000:0000:0000:0000:ffff:0a00:0003");
	r->nic[0].rate_mbps = 200000;
	r->nic[0].numa_node = 1;
	r->n_gpus = 1;
	r->gpu[0].index = 0;
	snprintf(r->gpu[0].pci, sizeof(r->gpu[0].pci), "0000:3b:00.0");
	r->n_segs = 1;
	r->seg[0] = (struct kvl_cluster_rec_seg){ .id = 7,
						  .layers = 32,
						  .planes = 2,
						  .blocks = 1024,
						  .block_bytes = 65536,
						  .length = 32ull * 2 * 1024 * 65536 };
	snprintf(r->seg[0].name, sizeof(r->seg[0].name), "kv");
	snprintf(r->seg[0].access, sizeof(r->seg[0].access), "read");
}

static int decode_str(const char *s, char *why, size_t whylen)
{
	struct kvl_cluster_rec r;

	return kvl_cluster_rec_decode(s, strlen(s), &r, why, whylen);
}

static void test_round_trip(void)
{
	struct kvl_cluster_rec a, b;
	char json[KVL_CLUSTER_RECORD_MAX + 1], why[160] = "";
	int n;

	fill(&a);
	n = kvl_cluster_rec_encode(&a, json, sizeof(json));
	CHECK(n > 0);
	/* what it must never say: the record is readable by anyone with etcd access */
	CHECK(strstr(json, "rkey") == NULL && strstr(json, "secret") == NULL);
	CHECK_INT(kvl_cluster_rec_decode(json, (size_t)n, &b, why, sizeof(why)), 0);
	CHECK_STR(b.name, "prefill-3");
	CHECK_STR(b.control, "10.0.0.3:18515");
	CHECK_INT(b.role, KVL_CLUSTER_PREFILL);
	CHECK_INT(b.n_nics, 1);
	CHECK_STR(b.nic[0].gid, a.nic[0].gid);
	CHECK_INT(b.nic[0].rate_mbps, 200000);
	CHECK_INT(b.nic[0].numa_node, 1);
	CHECK_STR(b.gpu[0].pci, "0000:3b:00.0");
	CHECK_INT(b.seg[0].length, a.seg[0].length);
	CHECK_INT(b.seg[0].blocks, 1024);
	CHECK_STR(b.seg[0].access, "read");
	CHECK(memcmp(&a, &b, sizeof(a)) == 0);
	CHECK_INT(kvl_cluster_rec_encode(&a, json, 16), -EMSGSIZE);
}

static void test_refused(void)
{
	static const struct {
		const char *json, *why;
	} bad[] = {
		{ "{not json", "not a JSON object" },
		{ "[1,2]", "not a JSON object" },
		{ "{\"v\":2,\"name\":\"a\",\"role\":\"decode\",\"control\":\"h:1\"}",
		  "record version 2" },
		{ "{\"v\":1,\"role\":\"decode\",\"control\":\"h:1\"}", "name:" },
		{ "{\"v\":1,\"name\":\"a\",\"role\":\"boss\",\"control\":\"h:1\"}",
		  "role: expected" },
		{ "{\"v\":1,\"name\":\"a\",\"role\":\"decode\",\"control\":\"nohost\"}",
		  "control:" },
		{ "{\"v\":1,\"name\":\"a\",\"role\":\"decode\",\"control\":\"h:1\",\"nics\":{}}",
		  "nics:" },
		{ "{\"v\":1,\"name\":\"a\",\"role\":\"decode\",\"control\":\"h:1\",\"segments\":[{"
		  "\"id\":-1}]}",
		  "id:" },
		{ "{\"v\":1,\"name\":\"a\",\"name\":\"b\",\"role\":\"decode\",\"control\":\"h:1\"}",
		  "not a JSON object" },
		{ "{\"v\":1,\"name\":\"a\\u0000b\",\"role\":\"decode\",\"control\":\"h:1\"}",
		  "not a JSON object" },
	};
	char why[160];

	for (unsigned i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		why[0] = '\0';
		CHECK_INT(decode_str(bad[i].json, why, sizeof(why)), -EINVAL);
		if (strstr(why, bad[i].why) == NULL)
			fprintf(stderr, "  record %u: why \"%s\", expected \"%s\"\n", i, why,
				bad[i].why);
		CHECK(strstr(why, bad[i].why) != NULL);
	}
	{
		size_t n = KVL_CLUSTER_RECORD_MAX + 100;
		char *big = malloc(n + 1);
		struct kvl_cluster_rec r;

		CHECK(big != NULL);
		if (big) {
			memset(big, ' ', n);
			big[n] = '\0';
			CHECK_INT(kvl_cluster_rec_decode(big, n, &r, why, sizeof(why)), -EMSGSIZE);
			CHECK(strstr(why, "limit") != NULL);
			free(big);
		}
	}
}

static void test_config(void)
{
	static struct kvl_config cfg;
	static struct kvl_conf_errors errs;
	const char *base = "[runtime]\nname = n\n[nic.lo]\ndevice = lo\ntransport = tcp\n"
			   "[control]\nsecret_file = /etc/kvlane/secret\n[cluster]\n";
	char text[1024];

	snprintf(text, sizeof(text),
		 "%setcd_endpoints = http://10.0.0.1:2379, https://e2:2379\n"
		 "role = prefill\nlease_ttl_s = 5\n",
		 base);
	CHECK_INT(kvl_config_load_string("c.ini", text, &cfg, &errs), 0);
	CHECK_STR(cfg.cluster.etcd_endpoints, "http://10.0.0.1:2379,https://e2:2379");
	CHECK_INT(cfg.cluster.role, KVL_CLUSTER_PREFILL);
	CHECK_INT(cfg.cluster.lease_ttl_s, 5);
	CHECK_STR(cfg.cluster.cluster, "default");

	/* off by default: no [cluster] at all */
	CHECK_INT(kvl_config_load_string("c.ini",
					 "[runtime]\nname = n\n[nic.lo]\ndevice = lo\n"
					 "transport = tcp\n",
					 &cfg, &errs),
		  0);
	CHECK_STR(cfg.cluster.etcd_endpoints, "");

	snprintf(text, sizeof(text), "%setcd_endpoints = 10.0.0.1:2379\n", base);
	CHECK_INT(kvl_config_load_string("c.ini", text, &cfg, &errs), -EINVAL);
	CHECK(errs.count == 1 && strstr(errs.msg[0], "c.ini:9: cluster.etcd_endpoints: expected "
						     "etcd client URLs") != NULL);
	snprintf(text, sizeof(text), "%setcd_endpoints = https://h:1\ntls_cert_file = /c.pem\n",
		 base);
	CHECK_INT(kvl_config_load_string("c.ini", text, &cfg, &errs), -EINVAL);
	CHECK(errs.count == 1 && strstr(errs.msg[0], "cluster.tls_key_file: tls_cert_file and "
						     "tls_key_file go together") != NULL);
	snprintf(text, sizeof(text), "%setcd_endpoints = http://h:1\nprefix = /a//b\n", base);
	CHECK_INT(kvl_config_load_string("c.ini", text, &cfg, &errs), -EINVAL);
	CHECK(errs.count == 1 && strstr(errs.msg[0], "c.ini:10: cluster.prefix") != NULL);
	CHECK_INT(
		kvl_config_load_string("c.ini",
				       "[runtime]\nname = n\n[nic.lo]\ndevice = lo\n"
				       "transport = tcp\n[cluster]\netcd_endpoints = http://h:1\n",
				       &cfg, &errs),
		-EINVAL);
	CHECK(errs.count == 1 && strstr(errs.msg[0], "needs control.secret_file") != NULL);
}

int main(void)
{
	test_round_trip();
	test_refused();
	test_config();
	return kvl_test_done("cluster_rec");
}
