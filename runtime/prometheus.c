/* SPDX-License-Identifier: BSD-3-Clause */
/* Prometheus /metrics ([telemetry] prometheus_listen): the telemetry tables as text, over MHD. */
#include <errno.h>
#include <inttypes.h>
#include <netdb.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "kvl_build_config.h"
#include "kvlane/kvlane.h"
#include "log.h"
#include "prometheus.h"
#include "runtime.h"
#include "telemetry.h"

/*
 * Every sample comes from kvl_telemetry_walk(): the row functions and snapshots the telemetry
 * socket's replies are built from, read on the HTTP thread. Nothing here runs on an lcore or
 * writes what an lcore reads, so a scrape costs the data path nothing but the cache lines the
 * telemetry commands read as well.
 */

/* ---- collecting the tables ---- */

#define FIELD_NAME_LEN 48
#define FIELD_STR_LEN  64 /* label values: names, addresses, states */

struct field {
	char name[FIELD_NAME_LEN];
	uint8_t type; /* enum kvl_tel_type */
	uint64_t u;
	int64_t i;
	char s[FIELD_STR_LEN];
};

struct row {
	unsigned n, cap;
	struct field *f;
};

struct table {
	unsigned n, cap;
	struct row *rows;
	/* /kvlane/stats: "tcp/x" and "verbs/x" become rows of their own, labelled transport */
	bool split_transport;
	char transport[16];
	int rc;
};

/* Room for one more element of *@arr (@n used of @cap, @size bytes each): doubles it. */
static int grow(void *arr, unsigned n, unsigned *cap, size_t size, unsigned first)
{
	void **p = arr, *q;
	unsigned c = *cap ? 2 * *cap : first;

	if (n < *cap)
		return 0;
	q = realloc(*p, c * size);
	if (q == NULL)
		return -ENOMEM;
	*p = q;
	*cap = c;
	return 0;
}

static struct row *new_row(struct table *t)
{
	if (grow(&t->rows, t->n, &t->cap, sizeof(*t->rows), 8) < 0) {
		t->rc = -ENOMEM;
		return NULL;
	}
	t->rows[t->n] = (struct row){ 0 };
	return &t->rows[t->n++];
}

static struct field *new_field(struct table *t, const char *name)
{
	struct row *r;

	if (t->n == 0 && new_row(t) == NULL)
		return NULL;
	r = &t->rows[t->n - 1];
	if (grow(&r->f, r->n, &r->cap, sizeof(*r->f), 32) < 0) {
		t->rc = -ENOMEM;
		return NULL;
	}
	r->f[r->n] = (struct field){ 0 };
	snprintf(r->f[r->n].name, FIELD_NAME_LEN, "%s", name);
	return &r->f[r->n++];
}

static void collect(void *arg, const struct kvl_tel_value *v)
{
	struct table *t = arg;
	struct field *f;
	const char *name = v->name;

	if (t->rc)
		return;
	if (v->type == KVL_TEL_ROW) {
		new_row(t);
		t->transport[0] = '\0';
		return;
	}
	if (t->split_transport) {
		const char *slash = strchr(name, '/');
		size_t len = slash ? (size_t)(slash - name) : 0;

		if (slash && ((len == 3 && strncmp(name, "tcp", 3) == 0) ||
			      (len == 5 && strncmp(name, "verbs", 5) == 0))) {
			if (strlen(t->transport) != len || strncmp(t->transport, name, len) != 0) {
				snprintf(t->transport, sizeof(t->transport), "%.*s", (int)len,
					 name);
				if (new_row(t) == NULL || (f = new_field(t, "transport")) == NULL)
					return;
				f->type = KVL_TEL_STR;
				snprintf(f->s, sizeof(f->s), "%s", t->transport);
			}
			name = slash + 1;
		} else if (t->transport[0]) {
			/* the rest (notices/, control/) goes to a row without a transport */
			t->transport[0] = '\0';
			if (new_row(t) == NULL)
				return;
		}
	}
	if ((f = new_field(t, name)) == NULL)
		return;
	f->type = (uint8_t)v->type;
	f->u = v->u;
	f->i = v->i;
	if (v->type == KVL_TEL_STR)
		snprintf(f->s, sizeof(f->s), "%s", v->s ? v->s : "");
}

static void table_free(struct table *t)
{
	for (unsigned i = 0; i < t->n; i++)
		free(t->rows[i].f);
	free(t->rows);
	*t = (struct table){ 0 };
}

static const struct field *row_get(const struct row *r, const char *name)
{
	for (unsigned i = 0; i < r->n; i++)
		if (strcmp(r->f[i].name, name) == 0)
			return &r->f[i];
	return NULL;
}

/* ---- the metrics ---- */

enum mtype { COUNTER, GAUGE, INFO, HIST };

struct metric {
	uint8_t table; /* enum kvl_tel_table */
	uint8_t type;  /* enum mtype; INFO: a gauge of 1 whose labels are @info */
	/* the telemetry field; one ending in '/' is a family: "failed/conn_lost" -> status */
	const char *field;
	const char *name;
	double scale; /* 0: the value as it is; else multiplied (us -> seconds: 1e-6) */
	const char *help;
	const char *const *info; /* INFO: the row's string fields that become labels */
	const char *sub_label;	 /* a family's label for the part after the '/' */
	/* HIST: @field the buckets' prefix ("<prefix><bound_us>", "<prefix>inf", in order,
	 * each counting its own bucket only), these the sum (scaled by @scale) and the count */
	const char *sum, *count;
};

/* Labels every metric of a table carries: the row's identity. */
static const char *const table_labels[KVL_TEL_TABLES][4] = {
	[KVL_TEL_NICS] = { "nic", "device" },
	[KVL_TEL_LCORES] = { "lcore", "role", "nic" },
	[KVL_TEL_PEERS] = { "peer", "addr", "name" },
	[KVL_TEL_QPS] = { "nic", "slot", "peer" },
	[KVL_TEL_SCHED] = { "nic" },
	[KVL_TEL_TIER] = { "nic" },
	[KVL_TEL_GPU] = { NULL },
	[KVL_TEL_STATS] = { "transport" },
};

static const char *const nic_info[] = { "kind",	  "transport", "link_layer",   "state",
					"netdev", "gpu",       "gpu_distance", NULL };
static const char *const peer_info[] = { "state", "role", "fail_status", NULL };
static const char *const qp_info[] = { "state", "last_error", NULL };
static const char *const sched_info[] = { "transport", "staging", NULL };
static const char *const gpu_info[] = { "budget_source", "name", "pci_bus_id", NULL };

/* Designated: each kind names only the members it uses. */
#define C(t, f, n, h)                                                                   \
	{                                                                               \
		.table = KVL_TEL_##t, .type = COUNTER, .field = f, .name = n, .help = h \
	}
#define CS(t, f, n, s, h)                                                                 \
	{                                                                                 \
		.table = KVL_TEL_##t, .type = COUNTER, .field = f, .name = n, .scale = s, \
		.help = h                                                                 \
	}
#define G(t, f, n, h)                                                                 \
	{                                                                             \
		.table = KVL_TEL_##t, .type = GAUGE, .field = f, .name = n, .help = h \
	}
#define GS(t, f, n, s, h)                                                                         \
	{                                                                                         \
		.table = KVL_TEL_##t, .type = GAUGE, .field = f, .name = n, .scale = s, .help = h \
	}
#define I(t, n, l, h)                                                               \
	{                                                                           \
		.table = KVL_TEL_##t, .type = INFO, .name = n, .help = h, .info = l \
	}
#define FAM(t, f, n, sub, h)                                                             \
	{                                                                                \
		.table = KVL_TEL_##t, .type = COUNTER, .field = f, .name = n, .help = h, \
		.sub_label = sub                                                         \
	}
#define H(t, f, n, sm, s, cnt, h)                                                                 \
	{                                                                                         \
		.table = KVL_TEL_##t, .type = HIST, .field = f, .name = n, .scale = s, .help = h, \
		.sum = sm, .count = cnt                                                           \
	}

static const struct metric metrics[] = {
	/* /kvlane/nics */
	I(NICS, "kvlane_nic_info", nic_info, "A NIC of the INI: its transport, link and GPU (1)"),
	G(NICS, "numa_node", "kvlane_nic_numa_node", "NUMA node of the NIC (-1: unknown)"),
	G(NICS, "lcore", "kvlane_nic_lcore", "The lcore that polls the NIC"),
	/* /kvlane/lcores */
	C(LCORES, "loop_iterations", "kvlane_lcore_loop_iterations_total",
	  "Passes of the lcore's run-to-completion loop"),
	C(LCORES, "busy_cycles", "kvlane_lcore_busy_cycles_total",
	  "TSC cycles of loop passes that found work"),
	C(LCORES, "idle_cycles", "kvlane_lcore_idle_cycles_total",
	  "TSC cycles of loop passes that found nothing"),
	C(LCORES, "work", "kvlane_lcore_work_items_total", "Items of work the loop handled"),
	C(LCORES, "naps", "kvlane_lcore_naps_total", "Idle naps (yield or bounded sleep)"),
	C(LCORES, "naps_due", "kvlane_lcore_naps_due_total",
	  "Hybrid idle: naps cut short to when a copy in flight was due"),
	C(LCORES, "due_spins", "kvlane_lcore_due_spins_total",
	  "Hybrid idle: idle passes that spun, work being due within 2 us"),
	C(LCORES, "sleeps", "kvlane_lcore_sleeps_total", "Hybrid idle: sleeps in epoll"),
	C(LCORES, "wake_cq", "kvlane_lcore_wakeups_cq_total", "Hybrid idle: woken by a CQ event"),
	C(LCORES, "wake_kick", "kvlane_lcore_wakeups_kick_total",
	  "Hybrid idle: woken by a submission"),
	C(LCORES, "wake_timeout", "kvlane_lcore_wakeups_timeout_total",
	  "Hybrid idle: woken by the timeout"),
	/* /kvlane/peers */
	I(PEERS, "kvlane_peer_info", peer_info, "A peer the control path knows: state, role (1)"),
	GS(PEERS, "last_heartbeat_ms", "kvlane_peer_last_heartbeat_age_seconds", 1e-3,
	   "Time since the peer was last heard from"),
	GS(PEERS, "rtt_us", "kvlane_peer_rtt_seconds", 1e-6, "Control-path round trip"),
	G(PEERS, "data_conns", "kvlane_peer_data_connections", "Data connections to the peer"),
	G(PEERS, "segments", "kvlane_peer_segments", "Segments the peer announced"),
	C(PEERS, "tx_bytes", "kvlane_peer_tx_bytes_total", "Bytes sent to the peer (tcp)"),
	C(PEERS, "rx_bytes", "kvlane_peer_rx_bytes_total", "Bytes received from the peer (tcp)"),
	C(PEERS, "bytes_written", "kvlane_peer_written_bytes_total",
	  "Bytes this side wrote into the peer's segments"),
	C(PEERS, "bytes_read", "kvlane_peer_read_bytes_total",
	  "Bytes this side read from the peer's segments"),
	C(PEERS, "served_bytes", "kvlane_peer_served_bytes_total",
	  "Bytes of the peer's READs and WRITEs this side's CPU served (tcp)"),
	/* /kvlane/qps */
	I(QPS, "kvlane_qp_info", qp_info, "An RDMA queue pair: its state and last error (1)"),
	C(QPS, "posted", "kvlane_qp_wqes_posted_total", "Work requests posted"),
	C(QPS, "signaled", "kvlane_qp_wqes_signaled_total", "Work requests posted signaled"),
	C(QPS, "cqes", "kvlane_qp_cqes_total", "Completions polled"),
	C(QPS, "posts", "kvlane_qp_post_calls_total", "Post calls (batches of work requests)"),
	C(QPS, "completed", "kvlane_qp_completed_total", "Work requests completed"),
	C(QPS, "errors", "kvlane_qp_errors_total", "Work requests completed with an error"),
	C(QPS, "recoveries", "kvlane_qp_recoveries_total", "QP recoveries from the error state"),
	C(QPS, "resyncs", "kvlane_qp_resyncs_total", "QP resynchronisations with the peer"),
	C(QPS, "replayed", "kvlane_qp_replayed_total", "Work requests replayed after a resync"),
	C(QPS, "stall_resets", "kvlane_qp_stall_resets_total",
	  "QPs put in error by the stall watchdog (work out, no completion)"),
	C(QPS, "drain_timeouts", "kvlane_qp_drain_timeouts_total",
	  "Drains that never ended (the connection failed)"),
	G(QPS, "outstanding", "kvlane_qp_outstanding", "Work requests in flight"),
	C(QPS, "bytes_written", "kvlane_qp_written_bytes_total", "Bytes RDMA-written"),
	C(QPS, "bytes_read", "kvlane_qp_read_bytes_total", "Bytes RDMA-read"),
	C(QPS, "arms", "kvlane_qp_cq_arms_total", "CQ arms before a sleep"),
	C(QPS, "cq_events", "kvlane_qp_cq_events_total", "CQ events taken"),
	C(QPS, "doorbells", "kvlane_qp_doorbells_total", "Doorbells rung"),
	C(QPS, "bf_copies", "kvlane_qp_blueflame_copies_total", "BlueFlame WQE copies"),
	C(QPS, "stray_cqes", "kvlane_qp_stray_cqes_total", "CQEs for no work request in flight"),
	/* /kvlane/sched: the budget, windows and requests of each NIC lcore's scheduler */
	I(SCHED, "kvlane_sched_info", sched_info, "A NIC lcore's scheduler (1)"),
	G(SCHED, "budget", "kvlane_sched_budget_bytes",
	  "Staging budget in force (free VRAM - reserve, or [sched] budget_mb)"),
	G(SCHED, "budget_in", "kvlane_sched_budget_source_bytes", "What the budget source said"),
	G(SCHED, "in_use", "kvlane_sched_staged_bytes", "Bytes in flight or landed, unconsumed"),
	G(SCHED, "staging_bytes", "kvlane_sched_staging_bytes", "Staging region size"),
	G(SCHED, "slot_bytes", "kvlane_sched_slot_bytes", "Staging slot size"),
	G(SCHED, "slots", "kvlane_sched_slots", "Staging slots"),
	G(SCHED, "slots_free", "kvlane_sched_slots_free", "Staging slots free"),
	G(SCHED, "windows", "kvlane_sched_windows_bytes", "Sum of the requests' windows"),
	G(SCHED, "active", "kvlane_sched_requests_active", "Requests holding a window"),
	G(SCHED, "waiting", "kvlane_sched_requests_waiting", "Requests waiting for budget"),
	G(SCHED, "runnable", "kvlane_sched_requests_runnable", "Requests with work to post"),
	G(SCHED, "xfers_inflight", "kvlane_sched_xfers_inflight", "Descriptors in flight"),
	C(SCHED, "opened", "kvlane_sched_requests_opened_total", "Requests opened"),
	C(SCHED, "open_failed", "kvlane_sched_requests_open_failed_total", "Requests refused"),
	C(SCHED, "cancels", "kvlane_sched_requests_canceled_total", "Requests canceled"),
	C(SCHED, "posted_xfers", "kvlane_sched_xfers_posted_total", "Descriptors posted"),
	C(SCHED, "posted_blocks", "kvlane_sched_blocks_posted_total", "Blocks posted"),
	C(SCHED, "completed_ok", "kvlane_sched_xfers_completed_total", "Descriptors completed"),
	C(SCHED, "completed_err", "kvlane_sched_xfers_failed_total", "Descriptors failed"),
	C(SCHED, "evicted_blocks", "kvlane_sched_evicted_blocks_total",
	  "Landed blocks evicted for budget"),
	C(SCHED, "evicted_bytes", "kvlane_sched_evicted_bytes_total",
	  "Bytes of landed blocks evicted for budget"),
	C(SCHED, "stalled", "kvlane_sched_stalled_total", "Passes with every connection full"),
	C(SCHED, "no_conn", "kvlane_sched_no_connection_total",
	  "Descriptors for a peer with no data connection"),
	C(SCHED, "budget_changes", "kvlane_sched_budget_changes_total", "Budget changes applied"),
	GS(SCHED, "xfer_ps_per_byte", "kvlane_sched_transfer_seconds_per_byte", 1e-12,
	   "Estimated transfer time per byte"),
	GS(SCHED, "compute_ns_decode", "kvlane_sched_decode_step_seconds", 1e-9,
	   "Estimated compute time of a decode step"),
	GS(SCHED, "compute_ns_prefill", "kvlane_sched_prefill_step_seconds", 1e-9,
	   "Estimated compute time of a prefill step"),
	/* request latency: OPEN taken to the request's end, per NIC lcore (lcores/nic_sched.c) */
	H(SCHED, "latency_hist/", "kvlane_request_duration_seconds", "latency_sum_us", 1e-6,
	  "latency_count", "Requests that ended DONE, by time from open to end"),
	/* /kvlane/tier */
	C(TIER, "reads", "kvlane_tier_reads_total", "READs from this host's KV tier"),
	C(TIER, "done", "kvlane_tier_reads_completed_total", "Tier READs completed"),
	C(TIER, "refused", "kvlane_tier_reads_refused_total", "Tier READs refused"),
	C(TIER, "bytes", "kvlane_tier_bytes_total", "Bytes moved from the tier"),
	C(TIER, "copies", "kvlane_tier_copies_total", "Copies issued"),
	C(TIER, "batches", "kvlane_tier_batches_total", "Copy batches issued"),
	CS(TIER, "copy_ns", "kvlane_tier_copy_seconds_total", 1e-9, "Time spent copying"),
	G(TIER, "inflight", "kvlane_tier_inflight", "Tier READs in flight"),
	/* /kvlane/gpu: VRAM and the staging budget */
	I(GPU, "kvlane_gpu_info", gpu_info, "Where the staging budget comes from (1)"),
	G(GPU, "enabled", "kvlane_gpu_enabled", "1: a GPU is open and sampled"),
	G(GPU, "budget_bytes", "kvlane_staging_budget_bytes", "Staging budget"),
	G(GPU, "total_bytes", "kvlane_gpu_memory_total_bytes", "VRAM of the GPU"),
	G(GPU, "free_bytes", "kvlane_gpu_memory_free_bytes", "Free VRAM at the last sample"),
	G(GPU, "reserve_bytes", "kvlane_gpu_memory_reserve_bytes", "[gpu] vram_reserve_mb"),
	C(GPU, "samples", "kvlane_gpu_memory_samples_total", "Free-VRAM samples taken"),
	C(GPU, "sample_errors", "kvlane_gpu_memory_sample_errors_total", "Samples that failed"),
	/* /kvlane/stats: per transport */
	C(STATS, "posted_write", "kvlane_xport_writes_posted_total", "WRITEs posted"),
	C(STATS, "posted_read", "kvlane_xport_reads_posted_total", "READs posted"),
	C(STATS, "done_write", "kvlane_xport_writes_completed_total", "WRITEs completed"),
	C(STATS, "done_read", "kvlane_xport_reads_completed_total", "READs completed"),
	C(STATS, "bytes_written", "kvlane_xport_written_bytes_total", "Bytes written to peers"),
	C(STATS, "bytes_read", "kvlane_xport_read_bytes_total", "Bytes read from peers"),
	C(STATS, "served_write", "kvlane_xport_served_writes_total", "Peers' WRITEs served"),
	C(STATS, "served_read", "kvlane_xport_served_reads_total", "Peers' READs served"),
	C(STATS, "served_bytes", "kvlane_xport_served_bytes_total", "Bytes of peers' ops served"),
	C(STATS, "tx_bytes", "kvlane_xport_tx_bytes_total", "Bytes sent on data connections"),
	C(STATS, "rx_bytes", "kvlane_xport_rx_bytes_total", "Bytes received on data connections"),
	C(STATS, "qp_resyncs", "kvlane_xport_qp_resyncs_total", "QP resynchronisations"),
	C(STATS, "qp_recoveries", "kvlane_xport_qp_recoveries_total", "QP recoveries"),
	FAM(STATS, "failed/", "kvlane_xport_failed_total", "status",
	    "Operations initiated here that completed with an error, by status"),
	FAM(STATS, "refused/", "kvlane_xport_refused_total", "status",
	    "Peers' operations refused here, by status"),
	C(STATS, "notices/queued", "kvlane_notices_queued_total", "WRITE_WITH_IMM notices queued"),
	C(STATS, "notices/dropped", "kvlane_notices_dropped_total",
	  "WRITE_WITH_IMM notices lost to a full ring"),
	C(STATS, "control/auth_failures", "kvlane_control_auth_failures_total",
	  "Control connections that failed authentication"),
	C(STATS, "control/preauth_evicted", "kvlane_control_preauth_evicted_total",
	  "Unauthenticated control connections evicted"),
	C(STATS, "control/data_preauth_evicted", "kvlane_control_data_preauth_evicted_total",
	  "Unauthenticated data connections evicted"),
	C(STATS, "control/tls_failures", "kvlane_control_tls_failures_total", "TLS failures"),
	C(STATS, "control/req_cancels_tx", "kvlane_control_request_cancels_sent_total",
	  "Request cancels sent to peers"),
	C(STATS, "control/req_cancels_rx", "kvlane_control_request_cancels_received_total",
	  "Request cancels received from peers"),
};

#undef C
#undef CS
#undef G
#undef GS
#undef I
#undef FAM
#undef H

/* ---- the text format ---- */

struct out {
	char *buf;
	size_t len, cap;
	int rc;
};

static void outf(struct out *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void outf(struct out *o, const char *fmt, ...)
{
	va_list ap;
	int n;

	if (o->rc)
		return;
	for (;;) {
		va_start(ap, fmt);
		n = vsnprintf(o->buf + o->len, o->cap - o->len, fmt, ap);
		va_end(ap);
		if (n < 0) {
			o->rc = -EINVAL;
			return;
		}
		if ((size_t)n < o->cap - o->len) {
			o->len += (size_t)n;
			return;
		}
		size_t cap = (o->cap + (size_t)n + 1) * 2;
		char *b = realloc(o->buf, cap);

		if (b == NULL) {
			o->rc = -ENOMEM;
			return;
		}
		o->buf = b;
		o->cap = cap;
	}
}

/* A label value: backslash, double quote and newline escaped, as the format says. */
static void out_label(struct out *o, bool *first, const char *name, const struct field *f)
{
	char num[24];
	const char *v = num;

	if (f->type == KVL_TEL_STR)
		v = f->s;
	else if (f->type == KVL_TEL_INT)
		snprintf(num, sizeof(num), "%" PRId64, f->i);
	else
		snprintf(num, sizeof(num), "%" PRIu64, f->u);
	outf(o, "%s%s=\"", *first ? "{" : ",", name);
	*first = false;
	for (; *v; v++) {
		if (*v == '\\' || *v == '"')
			outf(o, "\\%c", *v);
		else if (*v == '\n')
			outf(o, "\\n");
		else
			outf(o, "%c", *v);
	}
	outf(o, "\"");
}

static void out_labels(struct out *o, const struct row *r, unsigned tab, const char *const *extra,
		       const char *sub_label, const char *sub)
{
	bool first = true;

	for (unsigned i = 0; i < 4 && table_labels[tab][i]; i++) {
		const struct field *f = row_get(r, table_labels[tab][i]);

		if (f)
			out_label(o, &first, table_labels[tab][i], f);
	}
	for (unsigned i = 0; extra && extra[i]; i++) {
		const struct field *f = row_get(r, extra[i]);

		if (f)
			out_label(o, &first, extra[i], f);
	}
	if (sub_label) {
		struct field s = { .type = KVL_TEL_STR };

		snprintf(s.s, sizeof(s.s), "%s", sub);
		out_label(o, &first, sub_label, &s);
	}
	if (!first)
		outf(o, "}");
}

static void out_value(struct out *o, const struct field *f, double scale)
{
	if (f->type == KVL_TEL_STR) {
		outf(o, " NaN\n"); /* a metric is never mapped to a string field: a schema bug */
		return;
	}
	if (scale != 0) {
		double v = f->type == KVL_TEL_INT ? (double)f->i : (double)f->u;

		outf(o, " %.15g\n", v * scale); /* 15 digits: 0.0001, not 0.000100..01 */
	} else if (f->type == KVL_TEL_INT) {
		outf(o, " %" PRId64 "\n", f->i);
	} else {
		outf(o, " %" PRIu64 "\n", f->u);
	}
}

static void out_header(struct out *o, const struct metric *m, bool *done)
{
	if (*done)
		return;
	*done = true;
	outf(o, "# HELP %s %s\n# TYPE %s %s\n", m->name, m->help, m->name,
	     m->type == COUNTER ? "counter"
	     : m->type == HIST	? "histogram"
				: "gauge");
}

/* One row's histogram: cumulative buckets with le in seconds, then _sum and _count. */
static void out_hist(struct out *o, const struct metric *m, const struct row *row, bool *header)
{
	size_t plen = strlen(m->field);
	const struct field *sum = row_get(row, m->sum), *count = row_get(row, m->count);
	uint64_t cum = 0;
	bool inf = false;

	if (sum == NULL || count == NULL)
		return;
	for (unsigned i = 0; i < row->n; i++) {
		const char *bound = row->f[i].name + plen;
		char le[32];

		if (strncmp(row->f[i].name, m->field, plen) != 0)
			continue;
		out_header(o, m, header);
		cum += row->f[i].u;
		inf = strcmp(bound, "inf") == 0;
		if (inf)
			snprintf(le, sizeof(le), "+Inf");
		else
			snprintf(le, sizeof(le), "%.15g", strtod(bound, NULL) / 1e6);
		outf(o, "%s_bucket", m->name);
		out_labels(o, row, m->table, NULL, "le", le);
		outf(o, " %" PRIu64 "\n", cum);
	}
	if (!*header)
		return;
	if (!inf) { /* the format wants a +Inf bucket: every count is in it */
		outf(o, "%s_bucket", m->name);
		out_labels(o, row, m->table, NULL, "le", "+Inf");
		outf(o, " %" PRIu64 "\n", count->u);
	}
	outf(o, "%s_sum", m->name);
	out_labels(o, row, m->table, NULL, NULL, NULL);
	out_value(o, sum, m->scale);
	outf(o, "%s_count", m->name);
	out_labels(o, row, m->table, NULL, NULL, NULL);
	out_value(o, count, 0);
}

static void out_metric(struct out *o, const struct metric *m, const struct table *t)
{
	bool header = false;
	size_t plen = m->field ? strlen(m->field) : 0;
	bool family = plen && m->field[plen - 1] == '/';

	for (unsigned r = 0; r < t->n; r++) {
		const struct row *row = &t->rows[r];

		if (m->type == HIST) {
			out_hist(o, m, row, &header);
			continue;
		}
		if (m->type == INFO) {
			if (row->n == 0 ||
			    row_get(row, table_labels[m->table][0] ?: "enabled") == NULL)
				continue;
			out_header(o, m, &header);
			outf(o, "%s", m->name);
			out_labels(o, row, m->table, m->info, NULL, NULL);
			outf(o, " 1\n");
			continue;
		}
		if (family) {
			for (unsigned i = 0; i < row->n; i++) {
				if (strncmp(row->f[i].name, m->field, plen) != 0)
					continue;
				out_header(o, m, &header);
				outf(o, "%s", m->name);
				out_labels(o, row, m->table, NULL, m->sub_label,
					   row->f[i].name + plen);
				out_value(o, &row->f[i], m->scale);
			}
			continue;
		}
		const struct field *f = row_get(row, m->field);

		if (f == NULL)
			continue;
		out_header(o, m, &header);
		outf(o, "%s", m->name);
		out_labels(o, row, m->table, NULL, NULL, NULL);
		out_value(o, f, m->scale);
	}
}

int kvl_prom_render(char **text, size_t *len)
{
	struct table t[KVL_TEL_TABLES] = { 0 };
	struct out o = { 0 };
	int rc = 0;

	for (unsigned i = 0; i < KVL_TEL_TABLES && rc == 0; i++) {
		t[i].split_transport = i == KVL_TEL_STATS;
		rc = kvl_telemetry_walk((enum kvl_tel_table)i, collect, &t[i]);
		if (rc == 0)
			rc = t[i].rc;
	}
	if (rc == 0) {
		outf(&o,
		     "# HELP kvlane_build_info kvlane's version (1)\n"
		     "# TYPE kvlane_build_info gauge\n"
		     "kvlane_build_info{version=\"%s\"} 1\n",
		     KVL_VERSION);
		for (size_t m = 0; m < sizeof(metrics) / sizeof(metrics[0]); m++)
			out_metric(&o, &metrics[m], &t[metrics[m].table]);
		rc = o.rc;
	}
	for (unsigned i = 0; i < KVL_TEL_TABLES; i++)
		table_free(&t[i]);
	if (rc < 0) {
		free(o.buf);
		return rc;
	}
	*text = o.buf;
	*len = o.len;
	return 0;
}

/* ---- HTTP: libmicrohttpd's one internal thread ---- */

#if KVL_HAVE_MHD
#include <microhttpd.h>

/* A scrape is small and quick: a few connections at once, idle ones dropped soon. */
#define PROM_MAX_CONNS	    8
#define PROM_CONN_TIMEOUT_S 10

static struct MHD_Daemon *prom_daemon;
static char prom_addr[KVL_ADDR_LEN + 8];

static enum MHD_Result reply(struct MHD_Connection *c, unsigned status, const char *type,
			     char *body, size_t len, enum MHD_ResponseMemoryMode mode)
{
	struct MHD_Response *r = MHD_create_response_from_buffer(len, body, mode);
	enum MHD_Result ret;

	if (r == NULL) {
		if (mode == MHD_RESPMEM_MUST_FREE)
			free(body);
		return MHD_NO;
	}
	MHD_add_response_header(r, "Content-Type", type);
	ret = MHD_queue_response(c, status, r);
	MHD_destroy_response(r);
	return ret;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
				  const char *method, const char *version, const char *upload_data,
				  size_t *upload_data_size, void **state)
{
	static const char text[] = "text/plain; charset=utf-8";
	char *body;
	size_t len;
	int rc;

	(void)cls;
	(void)version;
	(void)upload_data;
	/* Not a GET: refused at once, whatever body follows (MHD discards it). */
	if (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0)
		return reply(c, MHD_HTTP_METHOD_NOT_ALLOWED, text, (char *)"GET /metrics only\n",
			     18, MHD_RESPMEM_PERSISTENT);
	if (*state == NULL) { /* first call: headers only; answer on the next */
		*state = (void *)1;
		return MHD_YES;
	}
	if (*upload_data_size != 0) { /* a body on a GET: read and ignored */
		*upload_data_size = 0;
		return MHD_YES;
	}
	if (strcmp(url, "/metrics") != 0)
		return reply(c, MHD_HTTP_NOT_FOUND, text, (char *)"kvlane serves /metrics\n", 23,
			     MHD_RESPMEM_PERSISTENT);
	rc = kvl_prom_render(&body, &len);
	if (rc == -EAGAIN)
		return reply(c, MHD_HTTP_SERVICE_UNAVAILABLE, text, (char *)"kvlane stopping\n", 16,
			     MHD_RESPMEM_PERSISTENT);
	if (rc < 0)
		return reply(c, MHD_HTTP_INTERNAL_SERVER_ERROR, text, (char *)"out of memory\n", 14,
			     MHD_RESPMEM_PERSISTENT);
	return reply(c, MHD_HTTP_OK, "text/plain; version=0.0.4; charset=utf-8", body, len,
		     MHD_RESPMEM_MUST_FREE);
}

/* "host:port" / "[v6]:port" (the INI's syntax, checked already) into host and port. */
static void split_addr(const char *a, char *host, size_t hlen, char *port, size_t plen)
{
	const char *colon = strrchr(a, ':');

	if (a[0] == '[')
		snprintf(host, hlen, "%.*s", (int)(strchr(a, ']') - a - 1), a + 1);
	else
		snprintf(host, hlen, "%.*s", (int)(colon - a), a);
	snprintf(port, plen, "%s", colon + 1);
}

/* The listening socket is ours, so that a taken port is a clear errno, not MHD's NULL. */
static int listen_on(const char *addr, char *why, size_t whylen, char *bound, size_t blen)
{
	char host[KVL_ADDR_LEN], port[8], h[NI_MAXHOST], p[NI_MAXSERV];
	struct addrinfo hints = { .ai_socktype = SOCK_STREAM,
				  .ai_flags = AI_PASSIVE | AI_NUMERICSERV };
	struct addrinfo *res, *ai;
	int fd = -1, err = 0, one = 1, g;

	split_addr(addr, host, sizeof(host), port, sizeof(port));
	g = getaddrinfo(host, port, &hints, &res);
	if (g != 0) {
		snprintf(why, whylen, "cannot resolve %s: %s", host, gai_strerror(g));
		return -EINVAL;
	}
	for (ai = res; ai; ai = ai->ai_next) {
		fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
		if (fd < 0) {
			err = errno;
			continue;
		}
		setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
		if (bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && listen(fd, 16) == 0)
			break;
		err = errno;
		close(fd);
		fd = -1;
	}
	freeaddrinfo(res);
	if (fd < 0) {
		snprintf(why, whylen, "cannot listen on %s: %s", addr, strerror(err));
		return -err;
	}
	{
		struct sockaddr_storage ss;
		socklen_t sl = sizeof(ss);

		if (getsockname(fd, (struct sockaddr *)&ss, &sl) == 0 &&
		    getnameinfo((struct sockaddr *)&ss, sl, h, sizeof(h), p, sizeof(p),
				NI_NUMERICHOST | NI_NUMERICSERV) == 0)
			snprintf(bound, blen, strchr(h, ':') ? "[%s]:%s" : "%s:%s", h, p);
		else
			snprintf(bound, blen, "%s", addr);
	}
	return fd;
}

int kvl_prom_start(struct kvl_runtime *rt, char *err, size_t errlen)
{
	const char *addr = rt->cfg.telemetry.prometheus_listen;
	char why[160];
	int fd;

	if (addr[0] == '\0')
		return 0; /* off */
	fd = listen_on(addr, why, sizeof(why), prom_addr, sizeof(prom_addr));
	if (fd < 0) {
		snprintf(err, errlen, "%s:%u: telemetry.prometheus_listen: %s", rt->cfg.path,
			 kvl_config_key_line(&rt->cfg, KVL_SEC_TELEMETRY, 0, "prometheus_listen"),
			 why);
		return fd;
	}
	/* One internal thread polls every connection: a scrape never reaches an lcore. */
	prom_daemon = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG, 0, NULL,
				       NULL, on_request, NULL, MHD_OPTION_LISTEN_SOCKET, fd,
				       MHD_OPTION_CONNECTION_LIMIT, (unsigned)PROM_MAX_CONNS,
				       MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)PROM_CONN_TIMEOUT_S,
				       MHD_OPTION_END);
	if (prom_daemon == NULL) {
		close(fd);
		snprintf(err, errlen,
			 "%s:%u: telemetry.prometheus_listen: libmicrohttpd could not start on %s "
			 "(its message is above)",
			 rt->cfg.path,
			 kvl_config_key_line(&rt->cfg, KVL_SEC_TELEMETRY, 0, "prometheus_listen"),
			 addr);
		return -EIO;
	}
	KVL_LOG(INFO, "prometheus: serving http://%s/metrics", prom_addr);
	return 0;
}

void kvl_prom_stop(void)
{
	if (prom_daemon == NULL)
		return;
	MHD_stop_daemon(prom_daemon); /* joins its thread; closes the listening socket */
	prom_daemon = NULL;
	prom_addr[0] = '\0';
}

const char *kvl_prom_addr(void)
{
	return prom_daemon ? prom_addr : NULL;
}

#else /* !KVL_HAVE_MHD */

int kvl_prom_start(struct kvl_runtime *rt, char *err, size_t errlen)
{
	if (rt->cfg.telemetry.prometheus_listen[0] == '\0')
		return 0;
	snprintf(err, errlen,
		 "%s:%u: telemetry.prometheus_listen: this kvlane was built without "
		 "libmicrohttpd (Debian: libmicrohttpd-dev); rebuild with it or remove the key",
		 rt->cfg.path,
		 kvl_config_key_line(&rt->cfg, KVL_SEC_TELEMETRY, 0, "prometheus_listen"));
	return -ENOTSUP;
}

void kvl_prom_stop(void)
{
}

const char *kvl_prom_addr(void)
{
	return NULL;
}

#endif
