/* SPDX-License-Identifier: BSD-3-Clause */
/* kvlane-cluster-sim: N simulated nodes register, keep alive and watch through kvlane's etcd
 * client. */
#include <errno.h>
#include <getopt.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "cluster_rec.h"
#include "config.h"
#include "etcd.h"
#include "kvl_clock.h"

/*
 * What one cluster costs etcd, measured with the code kvlaned runs (runtime/etcd.c and the
 * record of runtime/cluster_rec.c, the same JSON a real node publishes):
 *   1. W watch streams on the prefix (in a real cluster every node watches it): with
 *      --watch-during before the nodes register (a cold start), else after (a node lists,
 *      then watches from the revision listed, as kvlaned does);
 *   2. N nodes register from T threads: lease grant + create-if-absent transaction each;
 *      the time until every one is in and until every watcher has seen every PUT;
 *   3. steady state for --steady seconds: every lease kept alive each ttl/3, as kvlaned does;
 *      etcd's CPU and RSS from /proc/<--etcd-pid>;
 *   4. K nodes stop their keepalives: the DELETE each watcher sees, timed from the lease's
 *      due expiry (its last keepalive's answer + ttl); then K more keys deleted outright,
 *      timed from the delete call: the watch fan-out alone.
 * One line "key value" per result, for tools/cluster-scale.sh and docs/cluster.md.
 */

struct opts {
	const char *etcd;
	unsigned nodes, watchers, threads, ttl, expire, steady_s;
	int watch_during; /* watchers present while the nodes register (the cold-start storm) */
	int etcd_pid;
	const char *prefix;
};

static struct opts o = { .etcd = "http://127.0.0.1:2379",
			 .nodes = 100,
			 .watchers = 0,
			 .threads = 2,
			 .ttl = 5,
			 .expire = 10,
			 .steady_s = 10,
			 .etcd_pid = 0,
			 .prefix = "/kvlane/sim/nodes/" };

struct node {
	int64_t lease;
	uint64_t last_ka_ns;  /* when the last keepalive answer came */
	int64_t ttl_at_ka;    /* what it said */
	volatile int stop_ka; /* phase 4: this one dies */
	uint64_t due_ns;      /* its expected expiry, or the delete's call time */
	uint64_t del_ns;
	int mode; /* 0 alive, 1 expiring, 2 deleted */
};

static struct node *nodes;
static volatile int phase; /* 2 steady, 3 expiring, 4 done */

/* watch side (one thread) */
static uint64_t *seen_put; /* bitmap per watcher would be large: count PUTs per node */
static uint64_t puts_seen, dels_seen;
static double *lat_exp, *lat_del;
static size_t n_exp, n_del;
static pthread_mutex_t lat_lock = PTHREAD_MUTEX_INITIALIZER;

static void die(const char *what, const char *why)
{
	fprintf(stderr, "kvlane-cluster-sim: %s: %s\n", what, why);
	exit(1);
}

static int node_of(const struct kvl_etcd_kv *kv)
{
	const char *p = kv->key + strlen(o.prefix);
	unsigned i;

	if (strncmp(kv->key, o.prefix, strlen(o.prefix)) != 0 || sscanf(p, "sim-%u", &i) != 1 ||
	    i >= o.nodes)
		return -1;
	return (int)i;
}

static void on_event(void *arg, int type, const struct kvl_etcd_kv *kv)
{
	int i = node_of(kv);
	uint64_t now = kvl_now_ns();

	(void)arg;
	if (i < 0)
		return;
	if (type == KVL_ETCD_PUT) {
		struct kvl_cluster_rec r;
		char why[128];

		/* decoded as a node does, so the cost of reading records is in the numbers */
		if (kvl_cluster_rec_decode(kv->val, kv->vlen, &r, why, sizeof(why)) == 0)
			__atomic_fetch_add(&puts_seen, 1, __ATOMIC_RELAXED);
		(void)seen_put;
		return;
	}
	__atomic_fetch_add(&dels_seen, 1, __ATOMIC_RELAXED);
	pthread_mutex_lock(&lat_lock);
	if (nodes[i].mode == 1)
		lat_exp[n_exp++] = ((double)now - (double)nodes[i].due_ns) / 1e6;
	else if (nodes[i].mode == 2)
		lat_del[n_del++] = ((double)now - (double)nodes[i].del_ns) / 1e6;
	pthread_mutex_unlock(&lat_lock);
}

static struct kvl_etcd *client(void)
{
	struct kvl_etcd_opts eo = { .endpoints = o.etcd, .timeout_ms = 5000 };
	char err[KVL_ETCD_ERR_LEN];
	struct kvl_etcd *e = kvl_etcd_new(&eo, err, sizeof(err));

	if (e == NULL)
		die("etcd client", err);
	if (kvl_etcd_connect(e) < 0)
		die("etcd connect", kvl_etcd_error(e));
	return e;
}

static volatile int watch_stop;
static unsigned watches_created;

static void *watch_main(void *arg)
{
	struct kvl_etcd *e = client();
	CURLM *m = curl_multi_init();
	struct kvl_etcd_watch **w = calloc(o.watchers, sizeof(*w));
	int running = 0;

	(void)arg;
	for (unsigned i = 0; i < o.watchers; i++) {
		w[i] = kvl_etcd_watch_new(e, o.prefix, 0, on_event, NULL);
		if (w[i] == NULL)
			die("watch", strerror(errno));
		curl_multi_add_handle(m, kvl_etcd_watch_easy(w[i]));
	}
	while (!watch_stop) {
		unsigned created = 0;
		CURLMsg *msg;
		int left;

		curl_multi_perform(m, &running);
		curl_multi_poll(m, NULL, 0, 20, NULL);
		curl_multi_perform(m, &running);
		while ((msg = curl_multi_info_read(m, &left)) != NULL)
			if (msg->msg == CURLMSG_DONE)
				fprintf(stderr, "kvlane-cluster-sim: a watch ended: %s\n",
					curl_easy_strerror(msg->data.result));
		for (unsigned i = 0; i < o.watchers; i++)
			created += kvl_etcd_watch_created(w[i]);
		__atomic_store_n(&watches_created, created, __ATOMIC_RELEASE);
	}
	for (unsigned i = 0; i < o.watchers; i++)
		kvl_etcd_watch_free(m, w[i]);
	curl_multi_cleanup(m);
	kvl_etcd_free(e);
	free(w);
	return NULL;
}

/* registration and keepalive: thread t owns nodes t, t + T, ... */
static double *lat_reg;
static uint64_t reg_done_ns[64];
static uint64_t kas, ka_fail;
static double ka_ms_sum;

static void record_of(unsigned i, char *out, size_t cap)
{
	struct kvl_cluster_rec r;
	int n;

	/* the shape of a real node's: two RoCE NICs, one GPU, one KV segment */
	memset(&r, 0, sizeof(r));
	r.version = KVL_CLUSTER_REC_VERSION;
	r.proto = 3;
	snprintf(r.name, sizeof(r.name), "sim-%05u", i);
	snprintf(r.peer_name, sizeof(r.peer_name), "sim-%05u", i);
	r.role = i % 4 == 0 ? KVL_CLUSTER_PREFILL : KVL_CLUSTER_DECODE;
	snprintf(r.control, sizeof(r.control), "10.%u.%u.%u:18515", (i >> 16) & 255, (i >> 8) & 255,
		 i & 255);
	snprintf(r.host, sizeof(r.host), "host-%05u", i);
	r.n_nics = 2;
	for (unsigned k = 0; k < 2; k++) {
		snprintf(r.nic[k].label, sizeof(r.nic[k].label), "rdma%u", k);
		snprintf(r.nic[k].device, sizeof(r.nic[k].device), "mlx5_%u", k);
		snprintf(r.nic[k].transport, sizeof(r.nic[k].transport), "mlx5");
		snprintf(r.nic[k].link_layer, sizeof(r.nic[k].link_layer), "Ethernet");
		snprintf(r.nic[k].gid, sizeof(r.nic[k].gid),
			 "0000:0000:0000:0000:0000:ffff:0a%02x:%04x", k, i & 0xffff);
		r.nic[k].rate_mbps = 400000;
		r.nic[k].numa_node = (int)k;
	}
	r.n_gpus = 1;
	snprintf(r.gpu[0].pci, sizeof(r.gpu[0].pci), "0000:3b:00.0");
	r.n_segs = 1;
	r.seg[0] = (struct kvl_cluster_rec_seg){ .id = 1,
						 .layers = 80,
						 .planes = 2,
						 .blocks = 4096,
						 .block_bytes = 65536,
						 .length = 80ull * 2 * 4096 * 65536 };
	snprintf(r.seg[0].name, sizeof(r.seg[0].name), "kv");
	snprintf(r.seg[0].access, sizeof(r.seg[0].access), "read");
	n = kvl_cluster_rec_encode(&r, out, cap);
	if (n < 0)
		die("record", "does not fit");
}

/* Keep alive each of thread @t's first @upto leases that is due (every ttl/3, as
 * runtime/cluster.c does); true if any was. A lease found gone is counted once, not retried. */
static bool ka_pass(struct kvl_etcd *e, unsigned t, unsigned upto)
{
	uint64_t period = (uint64_t)o.ttl * 1000000000ull / 3;
	bool any = false;

	for (unsigned i = t; i < upto; i += o.threads) {
		uint64_t now = kvl_now_ns(), t0;
		int64_t ttl = 0;

		if (nodes[i].stop_ka || nodes[i].mode != 0 || nodes[i].lease == 0 ||
		    now - nodes[i].last_ka_ns < period)
			continue;
		any = true;
		t0 = now;
		if (kvl_etcd_keepalive(e, nodes[i].lease, &ttl) < 0 || ttl <= 0) {
			__atomic_fetch_add(&ka_fail, 1, __ATOMIC_RELAXED);
			if (ttl <= 0)
				nodes[i].mode = 3; /* lost: expired before its keepalive */
			continue;
		}
		nodes[i].last_ka_ns = kvl_now_ns();
		nodes[i].ttl_at_ka = ttl;
		pthread_mutex_lock(&lat_lock);
		kas++;
		ka_ms_sum += (double)(nodes[i].last_ka_ns - t0) / 1e6;
		pthread_mutex_unlock(&lat_lock);
	}
	return any;
}

static void *node_main(void *arg)
{
	unsigned t = (unsigned)(uintptr_t)arg;
	struct kvl_etcd *e = client();
	char key[128], rec[KVL_CLUSTER_RECORD_MAX + 1], held[64];

	for (unsigned i = t; i < o.nodes; i += o.threads) {
		uint64_t t0 = kvl_now_ns();

		snprintf(key, sizeof(key), "%ssim-%05u", o.prefix, i);
		record_of(i, rec, sizeof(rec));
		if (kvl_etcd_grant(e, o.ttl, &nodes[i].lease) < 0)
			die("grant", kvl_etcd_error(e));
		if (kvl_etcd_create(e, key, rec, strlen(rec), nodes[i].lease, held, sizeof(held)) <
		    0)
			die("create", kvl_etcd_error(e));
		nodes[i].last_ka_ns = kvl_now_ns();
		nodes[i].ttl_at_ka = o.ttl;
		lat_reg[i] = (double)(nodes[i].last_ka_ns - t0) / 1e6;
		ka_pass(e, t, i); /* the ones registered earlier stay alive meanwhile */
	}
	reg_done_ns[t] = kvl_now_ns();
	while (phase < 4)
		if (!ka_pass(e, t, o.nodes))
			usleep(2000);
	kvl_etcd_free(e);
	return NULL;
}

static int cmp_d(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

static double pct(double *v, size_t n, double p)
{
	if (n == 0)
		return -1;
	qsort(v, n, sizeof(*v), cmp_d);
	return v[(size_t)(p * (double)(n - 1) + 0.5)];
}

/* etcd's CPU seconds (utime + stime) and RSS in KiB, from /proc. */
static void etcd_usage(double *cpu_s, long *rss_kb)
{
	char path[64], buf[4096];
	FILE *f;
	unsigned long ut = 0, st = 0;

	*cpu_s = -1;
	*rss_kb = -1;
	if (o.etcd_pid <= 0)
		return;
	snprintf(path, sizeof(path), "/proc/%d/stat", o.etcd_pid);
	f = fopen(path, "r");
	if (f && fgets(buf, sizeof(buf), f)) {
		char *p = strrchr(buf, ')');

		if (p && sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut,
				&st) == 2)
			*cpu_s = (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
	}
	if (f)
		fclose(f);
	snprintf(path, sizeof(path), "/proc/%d/status", o.etcd_pid);
	f = fopen(path, "r");
	while (f && fgets(buf, sizeof(buf), f))
		if (sscanf(buf, "VmRSS: %ld", rss_kb) == 1)
			break;
	if (f)
		fclose(f);
}

static void start_watchers(pthread_t *wt)
{
	uint64_t t0 = kvl_now_ns();

	pthread_create(wt, NULL, watch_main, NULL);
	while (__atomic_load_n(&watches_created, __ATOMIC_ACQUIRE) < o.watchers) {
		if (kvl_now_ns() - t0 > 60000000000ull)
			die("watches", "not all created within 60 s");
		usleep(10000);
	}
	printf("watches_created_s %.3f\n", (double)(kvl_now_ns() - t0) / 1e9);
}

/* This process's CPU seconds (all threads). */
static double sim_cpu_s(void)
{
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 +
	       (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
}

static void usage(void)
{
	fprintf(stderr,
		"usage: kvlane-cluster-sim [--etcd URL] [--nodes N] [--watchers W] [--threads T]\n"
		"       [--ttl S] [--expire K] [--steady S] [--etcd-pid PID] [--prefix P]\n"
		"       [--watch-during]\n");
	exit(2);
}

int main(int argc, char **argv)
{
	static const struct option lo[] = { { "etcd", 1, 0, 'e' },     { "nodes", 1, 0, 'n' },
					    { "watchers", 1, 0, 'w' }, { "threads", 1, 0, 't' },
					    { "ttl", 1, 0, 'l' },      { "expire", 1, 0, 'x' },
					    { "steady", 1, 0, 's' },   { "etcd-pid", 1, 0, 'p' },
					    { "prefix", 1, 0, 'P' },   { 0, 0, 0, 0 } };
	pthread_t wt, nt[64];
	struct rlimit rl;
	uint64_t t0, t_reg, t_seen, t1;
	double cpu0, cpu1, cpu2, cpu3, sim0;
	long rss0, rss1, rss2, rss3;
	unsigned kill_n;
	int c;

	while ((c = getopt_long(argc, argv, "", lo, NULL)) != -1) {
		switch (c) {
		case 'e':
			o.etcd = optarg;
			break;
		case 'n':
			o.nodes = (unsigned)atoi(optarg);
			break;
		case 'w':
			o.watchers = (unsigned)atoi(optarg);
			break;
		case 't':
			o.threads = (unsigned)atoi(optarg);
			break;
		case 'l':
			o.ttl = (unsigned)atoi(optarg);
			break;
		case 'x':
			o.expire = (unsigned)atoi(optarg);
			break;
		case 's':
			o.steady_s = (unsigned)atoi(optarg);
			break;
		case 'p':
			o.etcd_pid = atoi(optarg);
			break;
		case 'P':
			o.prefix = optarg;
			break;
		default:
			usage();
		}
	}
	if (o.watchers == 0)
		o.watchers = o.nodes; /* each node watches the prefix */
	if (o.nodes == 0 || o.threads == 0 || o.threads > 64 || o.ttl < 2 || 2 * o.expire > o.nodes)
		usage();
	/* one socket per watcher and per thread: raise the soft limit to the hard one */
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
	nodes = calloc(o.nodes, sizeof(*nodes));
	lat_reg = calloc(o.nodes, sizeof(*lat_reg));
	lat_exp = calloc((size_t)o.expire * o.watchers + 1, sizeof(double));
	lat_del = calloc((size_t)o.expire * o.watchers + 1, sizeof(double));
	if (!nodes || !lat_reg || !lat_exp || !lat_del)
		die("memory", strerror(ENOMEM));
	etcd_usage(&cpu0, &rss0);
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (o.watch_during)
		start_watchers(&wt);
	phase = 1;
	t0 = kvl_now_ns();
	for (unsigned t = 0; t < o.threads; t++)
		pthread_create(&nt[t], NULL, node_main, (void *)(uintptr_t)t);
	t_reg = 0;
	for (;;) {
		unsigned done = 0;

		for (unsigned t = 0; t < o.threads; t++)
			done += __atomic_load_n(&reg_done_ns[t], __ATOMIC_ACQUIRE) != 0;
		if (done == o.threads && t_reg == 0) {
			for (unsigned t = 0; t < o.threads; t++)
				t_reg = reg_done_ns[t] > t_reg ? reg_done_ns[t] : t_reg;
		}
		if (t_reg && (!o.watch_during || __atomic_load_n(&puts_seen, __ATOMIC_RELAXED) >=
							 (uint64_t)o.nodes * o.watchers))
			break;
		if (kvl_now_ns() - t0 > 300000000000ull)
			die("registration", "not seen by every watcher within 300 s");
		usleep(1000);
	}
	t_seen = kvl_now_ns();
	etcd_usage(&cpu1, &rss1);
	printf("nodes %u\nwatchers %u (%s)\nthreads %u\nttl_s %u\n", o.nodes, o.watchers,
	       o.watch_during ? "watching while the nodes register" : "started after registration",
	       o.threads, o.ttl);
	printf("register_all_s %.3f\n", (double)(t_reg - t0) / 1e9);
	if (o.watch_during)
		printf("register_seen_by_all_watchers_s %.3f\n", (double)(t_seen - t0) / 1e9);
	printf("register_p50_ms %.2f\nregister_p99_ms %.2f\n", pct(lat_reg, o.nodes, 0.5),
	       pct(lat_reg, o.nodes, 0.99));
	printf("etcd_cpu_register_s %.2f\n", cpu1 - cpu0);
	printf("leases_lost_registering %llu\n", (unsigned long long)ka_fail);
	if (!o.watch_during)
		start_watchers(&wt);
	/* steady state */
	phase = 2;
	pthread_mutex_lock(&lat_lock);
	kas = 0;
	ka_ms_sum = 0;
	pthread_mutex_unlock(&lat_lock);
	t1 = kvl_now_ns();
	sleep(o.steady_s);
	etcd_usage(&cpu2, &rss2);
	pthread_mutex_lock(&lat_lock);
	printf("keepalives_per_s %.1f\nkeepalive_mean_ms %.2f\nkeepalive_failures %llu\n",
	       (double)kas * 1e9 / (double)(kvl_now_ns() - t1), kas ? ka_ms_sum / (double)kas : 0,
	       (unsigned long long)ka_fail);
	pthread_mutex_unlock(&lat_lock);
	printf("etcd_cpu_steady_pct %.1f\n",
	       cpu2 >= 0 ? 100.0 * (cpu2 - cpu1) * 1e9 / (double)(kvl_now_ns() - t1) : -1.0);
	printf("etcd_rss_mb %.1f\n", rss2 >= 0 ? (double)rss2 / 1024 : -1.0);
	/* expiry: K nodes stop their keepalives; then K keys deleted outright */
	phase = 3;
	kill_n = o.expire;
	etcd_usage(&cpu2, &rss2);
	sim0 = sim_cpu_s();
	t1 = kvl_now_ns();
	/* one departure at a time, 0.5 s apart: the fan-out of each, not a burst */
	for (unsigned k = 0; k < kill_n; k++) {
		struct node *n = &nodes[k * (o.nodes / kill_n)];

		n->stop_ka = 1;
		usleep(200000); /* a keepalive in flight lands before its due time is taken */
		n->due_ns = n->last_ka_ns + (uint64_t)n->ttl_at_ka * 1000000000ull;
		n->mode = 1;
		usleep(300000);
	}
	{
		uint64_t end = kvl_now_ns() + (uint64_t)(o.ttl + 10) * 1000000000ull;

		while (__atomic_load_n(&dels_seen, __ATOMIC_RELAXED) <
			       (uint64_t)kill_n * o.watchers &&
		       kvl_now_ns() < end)
			usleep(5000);
	}
	{
		struct kvl_etcd *e = client();
		char key[128];
		uint64_t base = __atomic_load_n(&dels_seen, __ATOMIC_RELAXED), end;

		for (unsigned k = 0; k < kill_n; k++) {
			unsigned i = k * (o.nodes / kill_n) + 1;

			snprintf(key, sizeof(key), "%ssim-%05u", o.prefix, i);
			nodes[i].del_ns = kvl_now_ns();
			nodes[i].mode = 2;
			if (kvl_etcd_delete(e, key) < 0)
				printf("delete_error %s\n", kvl_etcd_error(e));
			usleep(250000);
		}
		end = kvl_now_ns() + 10000000000ull;
		while (__atomic_load_n(&dels_seen, __ATOMIC_RELAXED) <
			       base + (uint64_t)kill_n * o.watchers &&
		       kvl_now_ns() < end)
			usleep(5000);
		kvl_etcd_free(e);
	}
	etcd_usage(&cpu3, &rss3);
	pthread_mutex_lock(&lat_lock);
	printf("expiry_events %zu of %u\n", n_exp, kill_n * o.watchers);
	printf("expiry_to_watch_p50_ms %.1f\nexpiry_to_watch_p99_ms %.1f\n",
	       pct(lat_exp, n_exp, 0.5), pct(lat_exp, n_exp, 0.99));
	printf("delete_events %zu of %u\n", n_del, kill_n * o.watchers);
	printf("delete_to_watch_p50_ms %.2f\ndelete_to_watch_p99_ms %.2f\n",
	       pct(lat_del, n_del, 0.5), pct(lat_del, n_del, 0.99));
	pthread_mutex_unlock(&lat_lock);
	printf("etcd_rss_end_mb %.1f\n", rss3 >= 0 ? (double)rss3 / 1024 : -1.0);
	{
		double secs = (double)(kvl_now_ns() - t1) / 1e9;

		/* who was busy while the departures fanned out: etcd, or this process's watchers */
		printf("etcd_cpu_departures_pct %.1f\nsim_cpu_departures_pct %.1f\n",
		       cpu3 >= 0 ? 100.0 * (cpu3 - cpu2) / secs : -1.0,
		       100.0 * (sim_cpu_s() - sim0) / secs);
	}
	(void)rss0;
	(void)rss1;
	phase = 4;
	for (unsigned t = 0; t < o.threads; t++)
		pthread_join(nt[t], NULL);
	/* the watchers go first: revoking N leases under N watchers is N^2 events */
	watch_stop = 1;
	pthread_join(wt, NULL);
	{
		struct kvl_etcd *e = client();

		for (unsigned i = 0; i < o.nodes; i++)
			if (nodes[i].mode == 0)
				kvl_etcd_revoke(e, nodes[i].lease);
		kvl_etcd_free(e);
	}
	return 0;
}
