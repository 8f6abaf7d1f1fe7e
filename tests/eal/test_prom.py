#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""EAL tests of Prometheus /metrics ([telemetry] prometheus_listen).

  prom_scrape  kvlaned with the key, kvlane-perf READs and WRITEs through it (every byte
               verified), then /metrics scraped with curl and every line parsed with
               python3-prometheus-client's text parser: names kvlane_*, HELP and TYPE on each
               family, counters ending _total; the byte counters equal what the telemetry
               socket reports at the same quiet moment and are >= the bytes moved; the lcore
               loop counter only grows between two scrapes; 404 / 405 off /metrics.
  prom_requests kvlane-req-client (a scheduler) with the key: while its requests wait on
               DONE, the scheduler's gauges equal /kvlane/sched; once 4 requests of 8 steps
               x 3 ms of compute end, kvlane_request_duration_seconds counts 4 (= telemetry's
               latency_count), none in a bucket below 24 ms, and the READ bytes equal
               /kvlane/stats.
  prom_bad     the port taken (FILE:LINE: telemetry.prometheus_listen: ... in use), a bad
               address (a validation error naming file:line:key), a host that does not
               resolve, and the key off by default (nothing listening, no banner line).

Usage: test_prom.py SCENARIO PATH-TO-KVLANED PATH-TO-KVLANE-PERF PATH-TO-REQ-CLIENT, with KVL_SRC in the
environment. Exit 0 pass, 1 fail, 77 skipped (with the reason).
"""
import os
import shutil
import socket
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kvl_harness as h  # noqa: E402  (its own folder)
import test_dataplane as dp  # noqa: E402
import test_sched as ts  # noqa: E402
from kvlane_chaos import free_port  # noqa: E402  (tools/, on the path through kvl_harness)
from kvl_harness import Fail, check, check_eq, cmd, log, wait_for  # noqa: E402

try:
    from prometheus_client.parser import text_string_to_metric_families
except ImportError:  # meson's python3 may not be Debian's: its package lives here
    sys.path.append("/usr/lib/python3/dist-packages")
    try:
        from prometheus_client.parser import text_string_to_metric_families
    except ImportError:
        text_string_to_metric_families = None

LIMIT_S = {"prom_scrape": 150, "prom_requests": 120, "prom_bad": 90}
PROM_RE = r"^\s*prometheus: http://(\S+)/metrics$"
SIZES = "64K,1M"
ITERS = 20


def skip_if_missing():
    if text_string_to_metric_families is None:
        print("skipped: python3-prometheus-client is not installed "
              "(apt-get install python3-prometheus-client)")
        sys.exit(77)
    if shutil.which("curl") is None:
        print("skipped: curl is not installed (apt-get install curl)")
        sys.exit(77)


def curl(url, *extra):
    """(HTTP status, body) through Debian's curl, as a scraper would fetch it."""
    r = subprocess.run(["curl", "-sS", "-m", "10", "-o", "-", "-w", "\n%{http_code}", *extra,
                        url], capture_output=True, text=True, timeout=20)
    if r.returncode != 0:
        raise Fail(f"curl {url}\n  expected: exit 0\n  seen:     {r.returncode}: {r.stderr}")
    body, _, code = r.stdout.rpartition("\n")
    return int(code), body


def parse(text, *procs):
    """Every family and sample of @text, parsed by prometheus_client; every line accounted."""
    try:
        fams = list(text_string_to_metric_families(text))
    except Exception as e:  # the parser raises ValueError and others on a bad line
        raise Fail(f"/metrics: prometheus_client's parser\n  expected: every line parses\n"
                   f"  seen:     {type(e).__name__}: {e}\n" + h.describe(*procs)) from e
    lines = [ln for ln in text.split("\n") if ln]
    samples = [s for f in fams for s in f.samples]
    n_samples = sum(1 for ln in lines if not ln.startswith("#"))
    check_eq(len(samples), n_samples, "/metrics: samples the parser returned, one per line")
    for ln in lines:
        if ln.startswith("#"):
            check(ln.startswith("# HELP kvlane_") or ln.startswith("# TYPE kvlane_"),
                  "/metrics: comment lines", "# HELP kvlane_... or # TYPE kvlane_...", ln)
    for f in fams:
        check(f.name.startswith("kvlane_"), "/metrics: family name", "kvlane_ prefix", f.name)
        check(f.documentation != "", f"/metrics: {f.name} HELP", "a HELP text", "none")
        check(f.type in ("counter", "gauge", "histogram"), f"/metrics: {f.name} TYPE",
              "counter, gauge or histogram", f.type)
        for s in f.samples:
            if f.type == "counter":
                check(s.name.endswith("_total"), f"/metrics: counter {s.name}",
                      "a name ending _total", s.name)
            check(s.value == s.value, f"/metrics: {s.name}{s.labels}", "a number", s.value)
    return {f.name: f for f in fams}, samples


def sample(samples, metric, **labels):
    """The value of the one sample @metric whose labels include @labels."""
    name = metric
    hits = [s for s in samples if s.name == name
            and all(s.labels.get(k) == str(v) for k, v in labels.items())]
    check(len(hits) == 1, f"/metrics: {name}{labels}", "exactly one sample",
          [(s.name, s.labels, s.value) for s in hits] or "none")
    return hits[0].value


def prom_scrape(ctx):
    skip_if_missing()
    port = free_port()
    server = ctx.kvlaned("srv", mem_mb=512, args=[
        *dp.KV_RW, "--set", f"telemetry.prometheus_listen=127.0.0.1:{port}"])
    url = "http://" + server.wait_line(PROM_RE, 1, what="kvlaned: the prometheus line")[1] \
        + "/metrics"
    check_eq(url, f"http://127.0.0.1:{port}/metrics", "kvlaned: where /metrics is served",
             server)
    tel = server.telemetry()

    # Before any traffic: parses, and the scheduler and lcore tables are there.
    code, text0 = curl(url)
    check_eq(code, 200, "GET /metrics before traffic: status", server)
    _, s0 = parse(text0, server)

    moved = 0
    for op in ("read", "write"):
        rc, p = ctx.perf_run(op, [f"--{op}", "--verify", "--json", "-s", SIZES, "-n",
                                  str(ITERS), "--segment", "kv", "--seed", dp.KV_SEED,
                                  "--seg-size", "64M", server.addr], mem_mb=256, timeout=90)
        check_eq(rc, 0, f"kvlane-perf --{op} --verify: exit status", p, server)
        for o in dp.json_lines(p, f"kvlane-perf --{op}"):
            check_eq((o["result"], o["verify"], o["verify_error"]), ("ok", True, None),
                     f"kvlane-perf --{op} {o['bytes_per_msg']} B: result", p)
            moved += o["bytes"]
    log(f"kvlane-perf moved {moved} bytes (READ and WRITE, verified)")

    # Quiet now: the clients are gone once the server's peer rows say dead with no conns.
    def quiet():
        rows = dp.peer_rows(tel, server)
        return rows and all(r["state"] == "dead" and r["data_conns"] == 0 for r in rows)
    check(wait_for(quiet, 10), "the server's /kvlane/peers after the clients left",
          "every row dead with 0 data connections", dp.peer_rows(tel, server), server)

    stats = cmd(tel, "/kvlane/stats", server)
    peers = dp.peer_rows(tel, server)
    sched = h.table_rows(cmd(tel, "/kvlane/sched", server), (), "/kvlane/sched", server)
    gpu = cmd(tel, "/kvlane/gpu", server)
    lcores = h.table_rows(cmd(tel, "/kvlane/lcores", server), ("lcore", "loop_iterations"),
                          "/kvlane/lcores", server)
    code, text1 = curl(url)
    check_eq(code, 200, "GET /metrics after traffic: status", server)
    fams, s1 = parse(text1, server)
    log(f"/metrics: {len(fams)} families, {len(s1)} samples, {len(text1)} bytes")

    # Transport totals: the same numbers as /kvlane/stats, and at least what was moved.
    served = sample(s1, "kvlane_xport_served_bytes_total", transport="tcp")
    check_eq(served, stats["tcp/served_bytes"], "kvlane_xport_served_bytes_total{tcp} = "
             "/kvlane/stats tcp/served_bytes", server)
    check(served >= moved, "kvlane_xport_served_bytes_total{tcp}", f">= {moved} bytes moved",
          served, server)
    for f, m in (("served_read", "kvlane_xport_served_reads_total"),
                 ("served_write", "kvlane_xport_served_writes_total"),
                 ("tx_bytes", "kvlane_xport_tx_bytes_total"),
                 ("rx_bytes", "kvlane_xport_rx_bytes_total")):
        check_eq(sample(s1, m, transport="tcp"), stats[f"tcp/{f}"],
                 f"{m}{{tcp}} = /kvlane/stats tcp/{f}", server)
    check_eq(sample(s1, "kvlane_xport_failed_total", transport="tcp", status="conn_lost"),
             stats["tcp/failed/conn_lost"], "kvlane_xport_failed_total{tcp,conn_lost}", server)
    check_eq(sample(s1, "kvlane_control_auth_failures_total"), stats["control/auth_failures"],
             "kvlane_control_auth_failures_total", server)

    # Per peer: each client's served bytes, labelled by its peer index, address and name.
    check(len(peers) >= 1, "/kvlane/peers", "the kvlane-perf clients' rows", peers, server)
    total = 0
    for r in peers:
        v = sample(s1, "kvlane_peer_served_bytes_total", peer=r["peer"])
        check_eq(v, r["served_bytes"], f"kvlane_peer_served_bytes_total{{peer={r['peer']}}}",
                 server)
        check_eq(sample(s1, "kvlane_peer_info", peer=r["peer"], state=r["state"],
                        name=r["name"]), 1, "kvlane_peer_info", server)
        total += v
    check(total >= moved, "sum of kvlane_peer_served_bytes_total", f">= {moved}", total,
          server)

    # The scheduler's budget and windows, VRAM (none here: the [sched] budget).
    for r in sched:
        check_eq(sample(s1, "kvlane_sched_budget_bytes", nic=r["nic"]), r["budget"],
                 f"kvlane_sched_budget_bytes{{nic={r['nic']}}}", server)
        check_eq(sample(s1, "kvlane_sched_windows_bytes", nic=r["nic"]), r["windows"],
                 f"kvlane_sched_windows_bytes{{nic={r['nic']}}}", server)
        check_eq(sample(s1, "kvlane_sched_requests_opened_total", nic=r["nic"]), r["opened"],
                 f"kvlane_sched_requests_opened_total{{nic={r['nic']}}}", server)
    check_eq(sample(s1, "kvlane_staging_budget_bytes"), gpu["budget_bytes"],
             "kvlane_staging_budget_bytes = /kvlane/gpu budget_bytes", server)
    check_eq(sample(s1, "kvlane_gpu_enabled"), gpu["enabled"], "kvlane_gpu_enabled", server)

    # The lcores keep looping: monotone between the telemetry read and the scrape after it.
    for r in lcores:
        v = sample(s1, "kvlane_lcore_loop_iterations_total", lcore=r["lcore"])
        check(v >= r["loop_iterations"], f"kvlane_lcore_loop_iterations_total{{{r['lcore']}}}",
              f">= {r['loop_iterations']} (read before it)", v, server)
        v0 = [s.value for s in s0 if s.name == "kvlane_lcore_loop_iterations_total"
              and s.labels["lcore"] == str(r["lcore"])]
        check(v0 and v >= v0[0], "kvlane_lcore_loop_iterations_total: monotone",
              f">= {v0} (first scrape)", v, server)

    # Off /metrics: 404; not a GET: 405; kvlaned still serves after.
    check_eq(curl(url.replace("/metrics", "/other"))[0], 404, "GET /other: status", server)
    check_eq(curl(url, "-X", "POST", "-d", "x=1")[0], 405, "POST /metrics: status", server)
    check_eq(curl(url)[0], 200, "GET /metrics after the bad requests: status", server)
    server.stop()


def prom_requests(ctx):
    skip_if_missing()
    port = free_port()
    n_req, steps, blocks, compute_us = 4, 8, 4, 3000
    server, client = ts.start(
        ctx, "verify", ["--requests", str(n_req), "--steps", str(steps), "--blocks",
                        str(blocks), "--compute-us", str(compute_us)],
        sched_extra=f"[telemetry]\nprometheus_listen = 127.0.0.1:{port}")
    url = f"http://127.0.0.1:{port}/metrics"
    client.pause("filled")
    tel = client.telemetry()
    # Requests hold their windows and wait on DONE: nothing moves, so both readers agree.
    s = ts.sched_row(tel, client)
    code, text = curl(url)
    check_eq(code, 200, "GET /metrics (requests waiting): status", client)
    _, smp = parse(text, client)
    for f, m in (("budget", "kvlane_sched_budget_bytes"), ("in_use", "kvlane_sched_staged_bytes"),
                 ("windows", "kvlane_sched_windows_bytes"),
                 ("active", "kvlane_sched_requests_active"),
                 ("waiting", "kvlane_sched_requests_waiting"),
                 ("slots_free", "kvlane_sched_slots_free"),
                 ("opened", "kvlane_sched_requests_opened_total")):
        check_eq(sample(smp, m, nic="lo"), s[f], f"{m} = /kvlane/sched {f} (waiting)", client)
    check(s["in_use"] > 0, "/kvlane/sched in_use while waiting", "> 0", s["in_use"], client)
    check_eq(sample(smp, "kvlane_request_duration_seconds_count", nic="lo"), 0,
             "kvlane_request_duration_seconds_count before any request ended", client)

    ts.run_to_end(client, tel, n_req, steps, blocks)
    s = ts.sched_row(tel, client)
    st = cmd(tel, "/kvlane/stats", client)
    code, text = curl(url)
    check_eq(code, 200, "GET /metrics (requests ended): status", client)
    _, smp = parse(text, client)
    count = sample(smp, "kvlane_request_duration_seconds_count", nic="lo")
    check_eq(count, n_req, "kvlane_request_duration_seconds_count: requests that ended", client)
    check_eq(count, s["latency_count"], "= /kvlane/sched latency_count", client)
    total = sample(smp, "kvlane_request_duration_seconds_sum", nic="lo")
    check_eq(round(total * 1e6), s["latency_sum_us"], "_sum = /kvlane/sched latency_sum_us",
             client)
    floor_s = steps * compute_us * 1e-6  # each request computed 8 steps of 3 ms at least
    check(total >= n_req * floor_s, "kvlane_request_duration_seconds_sum",
          f">= {n_req} x {floor_s} s of compute", total, client)
    buckets = sorted(((float(x.labels["le"]), x.value) for x in smp
                      if x.name == "kvlane_request_duration_seconds_bucket"))
    check(len(buckets) == 17 and buckets[-1] == (float("inf"), n_req),
          "kvlane_request_duration_seconds_bucket", f"17 buckets, +Inf = {n_req}", buckets,
          client)
    check(all(a[1] <= b[1] for a, b in zip(buckets, buckets[1:])), "buckets cumulative",
          "non-decreasing", buckets, client)
    below = [(le, v) for le, v in buckets if le < floor_s and v != 0]
    check(not below, "buckets below a request's compute time", "0 in each", below, client)
    check_eq(sample(smp, "kvlane_xport_read_bytes_total", transport="tcp"), st["tcp/bytes_read"],
             "kvlane_xport_read_bytes_total{tcp} = /kvlane/stats tcp/bytes_read", client)
    log(f"{count:.0f} requests ended, {total:.3f} s in all; buckets {buckets}")
    client.go()
    check_eq(client.wait_exit(30), 0, "kvlane-req-client: exit status", client)
    server.stop()


def ini_with(ctx, line):
    """default.ini with @line under [telemetry]; (path, line number of @line)."""
    with open(h.DEFAULT_INI) as f:
        text = f.read().split("\n")
    at = text.index("[telemetry]") + 1
    text.insert(at, line)
    path = os.path.join(ctx.tmp, "prom.ini")
    with open(path, "w") as f:
        f.write("\n".join(text))
    # default.ini names files relative to its folder (the secret): keep them reachable
    for name in os.listdir(os.path.dirname(h.DEFAULT_INI)):
        src = os.path.join(os.path.dirname(h.DEFAULT_INI), name)
        dst = os.path.join(ctx.tmp, name)
        if not os.path.exists(dst) and os.path.isfile(src):
            os.symlink(src, dst)
    return path, at + 1


def start_fails(ctx, tag, ini, want_rc):
    prefix = ctx.unique(tag)
    p = h.Proc(ctx, [ctx.kvlaned_exe, *h.EAL, "-m", "256", "--file-prefix", prefix, "--",
                     "-c", ini, "--set", h.LISTEN_ANY], ctx.rundir(prefix), prefix,
               f"kvlaned {tag}")
    rc = p.wait_exit(h.READY_TIMEOUT_S)
    check_eq(rc, want_rc, f"kvlaned {tag}: exit status (3: config, 4: host; not started)", p)
    return p


def prom_bad(ctx):
    skip_if_missing()
    # The port taken by someone else: the start fails, naming file, line and key.
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen(1)
    ctx.clients.append(taken)
    port = taken.getsockname()[1]
    ini, line = ini_with(ctx, f"prometheus_listen = 127.0.0.1:{port}")
    p = start_fails(ctx, "taken", ini, 4)
    want = (f"{ini}:{line}: telemetry.prometheus_listen: cannot listen on 127.0.0.1:{port}: "
            "Address already in use")
    check(want in p.stderr, "kvlaned with the port taken: its error", want, p.stderr, p)
    log(f"port taken: {want}")

    # Bad addresses: refused by validation, file:line:key.
    for bad in ("127.0.0.1", "300.1.2.3:9100", "127.0.0.1:70000"):
        ini, line = ini_with(ctx, f"prometheus_listen = {bad}")
        p = start_fails(ctx, "badaddr", ini, 3)
        want = f"{ini}:{line}: telemetry.prometheus_listen: "
        check(want in p.stderr, f"kvlaned with prometheus_listen = {bad}: its error",
              want + "...", p.stderr, p)
        log(f"{bad!r}: {[ln for ln in p.stderr.split(chr(10)) if want in ln][0]}")

    # A host name that does not resolve: the start fails, naming file, line and key.
    ini, line = ini_with(ctx, "prometheus_listen = no-such-host.invalid:9100")
    p = start_fails(ctx, "noresolve", ini, 4)
    want = f"{ini}:{line}: telemetry.prometheus_listen: cannot resolve no-such-host.invalid"
    check(want in p.stderr, "kvlaned with an unknown host: its error", want, p.stderr, p)

    # Off by default: no banner line, the key empty in /kvlane/config, nothing listening.
    srv = ctx.kvlaned("off")
    check(not any("prometheus" in ln for ln in srv.out), "kvlaned without the key: banner",
          "no prometheus line", srv.stdout, srv)
    tel = srv.telemetry()
    check_eq(cmd(tel, "/kvlane/config", srv).get("telemetry/prometheus_listen"), "",
             "/kvlane/config telemetry/prometheus_listen", srv)
    srv.stop()


SCENARIOS = {"prom_scrape": prom_scrape, "prom_requests": prom_requests, "prom_bad": prom_bad}


class Ctx(dp.Ctx):
    def __init__(self, scenario, kvlaned, perf, req_client):
        super().__init__(scenario, kvlaned, perf)
        self.req_client = req_client


if __name__ == "__main__":
    sys.exit(h.main(sys.argv, SCENARIOS, LIMIT_S, ["KVLANED", "KVLANE_PERF", "REQ_CLIENT"],
                    Ctx))
