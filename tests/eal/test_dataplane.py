#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""EAL tests of the data path between processes: kvlane-perf against kvlaned on loopback TCP.

Usage: test_dataplane.py {move_1gib|sigkill|sigstop|perf_cli} PATH-TO-KVLANED PATH-TO-KVLANE-PERF,
with KVL_SRC (repository root) in the environment. Exit 0 pass, 1 fail (with what was
expected, what was seen, and every process's command line and output).
"""
import json
import os
import re
import shlex
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kvl_harness as h  # noqa: E402  (its own folder)
from kvl_harness import Fail, check, check_eq, cmd, log, wait_for  # noqa: E402

CONFIG = h.DEFAULT_INI
LIMIT_S = {"move_1gib": 120, "sigkill": 60, "sigstop": 60, "perf_cli": 60}  # whole scenario
READY_TIMEOUT_S = 15      # start until ready (EAL, telemetry, the segment filled)
RUN_TIMEOUT_S = 30        # a command that should exit by itself
SETTLE_TIMEOUT_S = 5      # telemetry or /proc reaching the expected state

EAL = h.EAL
PERF_SERVER_RE = r"^kvlane-perf server: listening on (\S+), segment (\d+) (\d+)$"
GIB = 1 << 30

# kvlaned's [segment.kv] of default.ini, made writable: kvlane-perf --segment kv --seed 1.
KV_RW = ["--set", "segment.kv.access=readwrite"]
KV_SEED = "1"  # default.ini leaves pattern_seed at its default


class Ctx(h.Ctx):
    """A scenario with kvlaned and kvlane-perf."""

    def __init__(self, scenario, kvlaned, perf):
        super().__init__(scenario, kvlaned, "dp")
        self.perf = perf

    def perf_argv(self, prefix, args, mem_mb=256):
        return [self.perf, *EAL, "-m", str(mem_mb), "--file-prefix", prefix, "--",
                "-c", CONFIG, *args]

    def perf_start(self, tag, args, mem_mb=256):
        prefix = self.unique(tag)
        return h.Proc(self, self.perf_argv(prefix, args, mem_mb), self.rundir(), prefix,
                      f"kvlane-perf {tag}")

    def perf_run(self, tag, args, mem_mb=256, timeout=RUN_TIMEOUT_S, rundir=None):
        """kvlane-perf until it exits by itself; returns (exit status, proc)."""
        prefix = self.unique(tag)
        p = h.Proc(self, self.perf_argv(prefix, args, mem_mb), rundir or self.rundir(), prefix,
                   f"kvlane-perf {tag}")
        return p.wait_exit(timeout), p

    def perf_raw(self, args, timeout=RUN_TIMEOUT_S):
        """kvlane-perf with @args exactly as given (no EAL or INI added)."""
        rundir = self.rundir()
        p = h.Proc(self, [self.perf, *args], rundir, "none", "kvlane-perf")
        return p.wait_exit(timeout), p


def json_lines(p, what):
    """Every stdout line of @p parsed as JSON (kvlane-perf --json)."""
    objs = []
    for line in p.out:
        try:
            objs.append(json.loads(line))
        except json.JSONDecodeError as e:
            raise Fail(f"{what}: JSON\n  expected: one JSON object per stdout line\n"
                       f"  seen:     {line!r}: {e}\n" + p.describe()) from e
    return objs


def peer_rows(c, *procs):
    """/kvlane/peers (column form) as a list of row dicts."""
    return h.table_rows(cmd(c, "/kvlane/peers", *procs), (), "/kvlane/peers", *procs)


def check_counters_zero(stats, prefix, what, *procs):
    bad = {k: v for k, v in stats.items() if k.startswith(prefix) and v != 0}
    check(not bad, what, f"every {prefix}* counter 0", bad, *procs)


# ---- move_1gib ----

MOVE_SIZES = "16K,64K,256K,1M,2M"
MOVE_ITERS = 200  # per size and op: 200 x (16K + 64K + 256K + 1M + 2M) = 666 MiB per op


def move_run(ctx, server, addr, op, tel):
    """One kvlane-perf --verify run against @server; returns (its JSON objects, total)."""
    args = [f"--{op}", "--verify", "--json", "-s", MOVE_SIZES, "-n", str(MOVE_ITERS),
            "--segment", "kv", "--seed", KV_SEED, "--seg-size", "128M", addr]
    t0 = time.monotonic()
    rc, p = ctx.perf_run(op, args, mem_mb=512, timeout=90)
    secs = time.monotonic() - t0
    check_eq(rc, 0, f"kvlane-perf --{op} --verify: exit status", p, server)
    objs = json_lines(p, f"kvlane-perf --{op}")
    sizes = [o.get("bytes_per_msg") for o in objs]
    check_eq(sizes, [16384, 65536, 262144, 1048576, 2097152], f"--{op}: one object per size",
             p)
    total = 0
    for o in objs:
        s = o["bytes_per_msg"]
        want = {"op": op, "result": "ok", "iterations": MOVE_ITERS, "completed_ok": MOVE_ITERS,
                "failed": 0, "bytes": s * MOVE_ITERS, "verify": True,
                "verified_bytes": s * MOVE_ITERS, "verify_error": None}
        check_eq({k: o.get(k) for k in want}, want, f"--{op} {s} B: counts", p)
        check_eq(o["servers"][0]["status"], {"ok": MOVE_ITERS}, f"--{op} {s} B: statuses", p)
        if op == "write":
            # every byte written was read back once, and the pattern written back after
            check_eq(o["verify_read_bytes"], s * MOVE_ITERS, f"--write {s} B: read back", p)
            check(o["verify_write_bytes"] > 0, f"--write {s} B: pattern written back",
                  "verify_write_bytes > 0", o["verify_write_bytes"], p)
        else:
            check_eq((o["verify_read_bytes"], o["verify_write_bytes"]), (0, 0),
                     f"--read {s} B: no extra transfers", p)
        total += o["bytes"] + o["verify_read_bytes"] + o["verify_write_bytes"]
    moved = sum(o["bytes"] for o in objs)
    log(f"--{op} --verify: {moved / 2**20:.0f} MiB in 5 sizes, every byte verified, "
        f"{total / 2**20:.0f} MiB on the wire with the verification, {secs:.1f} s")

    # The server counted exactly that, and it shows this client's share in /kvlane/peers
    # once the client is gone.
    def client_row():
        rows = [r for r in peer_rows(tel, server) if r["name"] == "kvlane-perf"
                and r["state"] == "dead" and r["data_conns"] == 0
                and r["served_bytes"] == total]
        return rows[0] if rows else None
    row = wait_for(client_row, SETTLE_TIMEOUT_S)
    check(row is not None, f"--{op}: the client's row of the server's /kvlane/peers",
          f"name kvlane-perf, state dead, data_conns 0, served_bytes {total}",
          peer_rows(tel, server), p, server)
    return objs, moved, total


def scenario_move_1gib(ctx):
    server = ctx.kvlaned("srv", mem_mb=512, args=[*KV_RW, "--set", "segment.kv.blocks=64"])
    addr = server.addr
    server.wait_line(r'segment \d+ "kv": 128 MiB .*peers may read and write', 1,
                     what="the 128 MiB readwrite segment")
    tel = server.telemetry()
    stats = cmd(tel, "/kvlane/stats", server)
    check_eq(stats.get("tcp/served_bytes"), 0, "tcp/served_bytes before any client", server)

    _, w_moved, w_total = move_run(ctx, server, addr, "write", tel)
    stats = cmd(tel, "/kvlane/stats", server)
    check_eq(stats.get("tcp/served_bytes"), w_total,
             "server's tcp/served_bytes after --write (bytes + read back + written back)",
             server)
    # After the writes (and their restore) the segment must hold its pattern again: the
    # READ run checks every byte it reads against it.
    _, r_moved, r_total = move_run(ctx, server, addr, "read", tel)
    check(w_moved + r_moved >= GIB, "bytes moved by WRITE and READ", ">= 1 GiB",
          f"{(w_moved + r_moved) / GIB:.2f} GiB", server)
    stats = cmd(tel, "/kvlane/stats", server)
    check_eq(stats.get("tcp/served_bytes"), w_total + r_total,
             "server's tcp/served_bytes after both runs", server)
    # no WRITE_WITH_IMM over tcp: nothing queued for kvl_poll_notices, nothing lost
    check_eq((stats.get("notices/queued"), stats.get("notices/dropped")), (0, 0),
             "server's notices/queued and notices/dropped after plain WRITEs", server)
    check_counters_zero(stats, "tcp/refused/", "server refused nothing", server)
    check_counters_zero(stats, "tcp/failed/", "server initiated nothing that failed", server)
    log(f"server: tcp/served_bytes = {w_total + r_total} = what the two runs reported "
        f"({(w_moved + r_moved) / GIB:.2f} GiB measured + verification); refused/* all 0")
    tel.close()
    server.stop()
    log("kvlaned stopped: exit 0")


# ---- sigkill ----

PEER_TIMEOUT_MS = 1500
HEARTBEAT_MS = 200
TIMERS = ["--set", f"control.peer_timeout_ms={PEER_TIMEOUT_MS}",
          "--set", f"control.heartbeat_interval_ms={HEARTBEAT_MS}"]
DURATION_S = 6.0
KILL_AFTER_S = 2.0
DEAD_STATUSES = {"conn-lost", "peer-dead"}


def scenario_sigkill(ctx):
    server_loss(ctx, signal.SIGKILL)


def scenario_sigstop(ctx):
    server_loss(ctx, signal.SIGSTOP)


def all_stopped(pid):
    """Whether every thread of @pid is stopped (state T or t in /proc/PID/task/*/stat)."""
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
        states = []
        for t in tasks:
            with open(f"/proc/{pid}/task/{t}/stat") as f:
                states.append(f.read().rsplit(")", 1)[1].split()[0])
    except OSError:
        return False
    return bool(states) and all(st in ("T", "t") for st in states)


def server_loss(ctx, sig):
    """S1 dies (SIGKILL: its sockets close at once) or stops answering (SIGSTOP: nothing
    closes; only the missing heartbeats tell) in the middle of a run over S1 and S2."""
    s1 = ctx.kvlaned("s1", args=[*KV_RW, *TIMERS])
    s2 = ctx.kvlaned("s2", args=[*KV_RW, *TIMERS])
    a1, a2 = s1.addr, s2.addr
    tel2 = s2.telemetry()
    cmd(tel2, "/kvlane/info", s2)
    fds_before = s2.fds()
    log(f"S1 {a1} (pid {s1.pid}), S2 {a2} (pid {s2.pid}, {fds_before} fds)")

    client = ctx.perf_start("client", ["--bw", "--json", "-s", "64K", "--duration",
                                       str(DURATION_S), "--segment", "kv", "--seed", KV_SEED,
                                       *TIMERS, f"{a1},{a2}"])
    # The header (stderr with --json) comes once both servers are connected.
    client.wait_line(r"^ Operation\s+: WRITE", 15, stream="err",
                     what="kvlane-perf connected to both servers")
    time.sleep(KILL_AFTER_S)  # let transfers to both run before the kill
    check(client.running(), "kvlane-perf before the kill", "running", "exited", client)
    t_kill = time.monotonic()
    s1.proc.send_signal(sig)
    if sig == signal.SIGKILL:
        s1.wait_exit(5)
    else:  # SIGSTOP is delivered to each thread in its own time: wait until all are stopped
        check(wait_for(lambda: all_stopped(s1.proc.pid), 5), "S1 stopped",
              "every thread of it in state T within 5 s", "some still running", s1)
    t_dead = time.monotonic()  # S1 no longer answers: nothing posted after this can be OK
    log(f"{signal.Signals(sig).name} S1 {KILL_AFTER_S} s into the run")

    rc = client.wait_exit(DURATION_S + 30)
    check_eq(rc, 0, "kvlane-perf exit status (S2 did everything it was given)", client, s2)
    objs = json_lines(client, "kvlane-perf")
    check_eq(len(objs), 1, "JSON objects (one size)", client)
    o = objs[0]
    check_eq(o.get("result"), "ok", "JSON result", client)
    srv = {s["addr"]: s for s in o["servers"]}
    check_eq(sorted(srv), sorted([a1, a2]), "servers in the JSON", client)
    r1, r2 = srv[a1], srv[a2]
    check("typed status of a dead server" in client.stderr, "kvlane-perf says why it exits 0",
          "a line naming the dead server's typed failures", "none", client)

    # S1: its outstanding transfers failed with typed statuses, after the kill, in time.
    fails1 = {k: v for k, v in r1["status"].items() if k != "ok"}
    # A stopped peer closes nothing: only the heartbeat timeout can declare it dead.
    want = {"peer-dead"} if sig == signal.SIGSTOP else DEAD_STATUSES
    check(r1["dead"], "S1 marked dead", True, r1["dead"], client)
    check(fails1 and set(fails1) <= want, "S1's failed transfers",
          f"at least one, each with a status in {sorted(want)}", fails1, client)
    check_eq(r1["posted"], r1["ok"] + sum(fails1.values()),
             "S1: every posted transfer completed once", client)
    first, drained = r1["first_failure_mono"], r1["last_outstanding_done_mono"]
    check(first is not None and first >= t_kill, "S1's first failure",
          f"after the kill (monotonic {t_kill:.6f})", first, client)
    if sig == signal.SIGSTOP:
        # Declared dead peer_timeout_ms after the last frame it sent (a heartbeat at most
        # heartbeat_interval_ms before the stop), not sooner.
        check(first - t_kill >= (PEER_TIMEOUT_MS - 2 * HEARTBEAT_MS) / 1000,
              "S1's first failure", f"only once about peer_timeout_ms = {PEER_TIMEOUT_MS} ms "
              "of silence had passed", f"{1e3 * (first - t_kill):.1f} ms after the stop",
              client)
    check(drained is not None and drained - t_kill <= PEER_TIMEOUT_MS / 1000 + 0.25,
          "S1's last outstanding transfer completed",
          f"within peer_timeout_ms = {PEER_TIMEOUT_MS} ms of the kill",
          f"{1e3 * (drained - t_kill):.1f} ms" if drained else None, client)
    check(r1["last_ok_posted_mono"] is not None and r1["last_ok_posted_mono"] < t_dead,
          "S1: no OK completion of a transfer posted after S1 was gone",
          f"the last OK one posted before {t_dead:.6f}", r1["last_ok_posted_mono"], client)
    log(f"S1: {r1['ok']} ok before the kill, then {fails1}; first failure "
        f"{1e3 * (first - t_kill):.1f} ms after the kill, all of S1's outstanding transfers "
        f"completed {r1['failure_to_drained_ms']:.2f} ms after that")

    # S2: everything OK, and still taking transfers after the kill.
    check_eq(r2["status"], {"ok": r2["posted"]}, "S2: every transfer OK", client)
    check(not r2["dead"], "S2 alive", "not dead", r2["dead"], client)
    tl, t0 = r2["ok_timeline"], o["t0_mono"]
    step = o["timeline_interval_ms"] / 1000
    after_kill = sum(n for i, n in enumerate(tl) if t0 + i * step >= t_dead)
    second_half = sum(n for i, n in enumerate(tl) if i * step >= DURATION_S / 2)
    check(after_kill > 0 and second_half > 0, "S2's OK completions after the kill",
          "some after S1 died and some in the second half of the run",
          f"{after_kill} after the kill, {second_half} in the second half; timeline {tl}",
          client)
    log(f"S2: {r2['ok']} ok, none failed; {after_kill} after the kill, {second_half} in the "
        f"second half")

    # Nothing leaks on S2: the client is dead there, its connections and fds gone.
    check(s2.running(), "S2 after the client exited", "running", "exited", s2)

    def client_gone():
        rows = [r for r in peer_rows(tel2, s2) if r["name"] == "kvlane-perf"]
        return rows if rows and all(r["state"] == "dead" and r["data_conns"] == 0
                                    for r in rows) else None
    rows = wait_for(client_gone, SETTLE_TIMEOUT_S)
    check(rows is not None, "S2's /kvlane/peers after the client exited",
          "the kvlane-perf row dead with data_conns 0", peer_rows(tel2, s2), s2)
    fds = wait_for(lambda: s2.fds() == fds_before and s2.fds(), SETTLE_TIMEOUT_S)
    check(fds == fds_before, "S2's open fds after the client exited",
          f"{fds_before}, as before the client connected", s2.fds(), s2)
    stats = cmd(tel2, "/kvlane/stats", s2)
    check_eq(stats.get("tcp/served_bytes"), r2["bytes"],
             "S2's tcp/served_bytes = the bytes kvlane-perf reports for S2", s2, client)
    log(f"S2: client dead with data_conns 0, {fds} fds as before, tcp/served_bytes matches")
    tel2.close()
    s2.stop()
    log("S2 stopped: exit 0")
    if sig == signal.SIGSTOP:
        s1.proc.send_signal(signal.SIGKILL)
        s1.proc.send_signal(signal.SIGCONT)
        s1.wait_exit(5)


# ---- perf_cli ----

OPTIONS = ["-c", "--config", "--set", "-s", "--size", "-a", "--all", "-n", "--iters", "-q",
           "--qp", "--write", "--read", "--bw", "--lat", "-t", "--tx-depth", "--verify",
           "--json", "--duration", "-d", "--device", "--segment", "--seed", "--seg-size",
           "--nap", "--warmup",
           "-h", "--help"]


def expect_usage_error(ctx, args, needles, what):
    rc, p = ctx.perf_raw(args)
    check_eq(rc, 2, f"{what}: exit status", p)
    for n in needles:
        check(n in p.stderr, f"{what}: message on stderr", repr(n), "not in stderr", p)
    check(not os.path.isdir(os.path.join(p.rundir, "dpdk")), f"{what}: EAL must not start",
          "no runtime directory", "EAL started", p)
    log(f"{what}: exit 2, {p.stderr.strip().splitlines()[-1]!r}")


def scenario_perf_cli(ctx):
    for args in (["--help"], ["--", "-h"], ["--", "--help"]):
        rc, p = ctx.perf_raw(args)
        check_eq(rc, 0, f"kvlane-perf {shlex.join(args)}: exit status", p)
        words = set(re.findall(r"(?<![\w-])(--?[a-z][\w-]*)", p.stdout))
        missing = [o for o in OPTIONS if o not in words]
        check(not missing, f"kvlane-perf {shlex.join(args)}: every option in the help",
              OPTIONS, f"missing {missing}", p)
    log(f"--help: exit 0, mentions all {len(OPTIONS)} option spellings")

    eal = [*EAL, "-m", "256", "--file-prefix", ctx.unique("bad"), "--"]
    srv = "127.0.0.1:1"
    expect_usage_error(ctx, [*eal, "-c", CONFIG, "--bogus", srv], ["unknown option", "--bogus"],
                       "unknown option")
    expect_usage_error(ctx, [*eal, "-c", CONFIG, "-s", "0", srv], ["-s 0", "at least 1 byte"],
                       "-s 0")
    expect_usage_error(ctx, [*eal, "-c", CONFIG, "-s", "9G", srv], ["-s 9G", "at most 64M"],
                       "-s 9G")
    expect_usage_error(ctx, [*eal, "-c", CONFIG, "-d", "nosuchdev", srv],
                       ["-d nosuchdev", "no [nic.*] section", "NICs: lo"], "-d nosuchdev")
    expect_usage_error(ctx, [*eal, "-s", "4K", srv], ["-c FILE.ini is required"],
                       "missing -c")
    expect_usage_error(ctx, [*eal, "-c", CONFIG, "--lat", "--duration", "2", srv],
                       ["--duration needs --bw"], "--duration with --lat")
    expect_usage_error(ctx, [*eal, "-c", CONFIG, "--read"], ["--read is a client option"],
                       "client option in server mode")
    expect_usage_error(ctx, [*eal, "-c", CONFIG, "--lat", "--nap", "50", srv],
                       ["--nap needs --bw"], "--nap with --lat")
    expect_usage_error(ctx, [*eal, "-c", CONFIG, "--nap", "1ms", srv],
                       ["--nap 1ms", "expected microseconds"], "--nap 1ms")
    expect_usage_error(ctx, [*eal, "-c", CONFIG, "--read", "--verify", "--warmup", "8", srv],
                       ["--warmup needs --bw without --verify"], "--warmup with --verify")

    # A kvlane-perf server for the runs.
    server = ctx.perf_start("server", ["--set", h.LISTEN_ANY])
    m = server.wait_line(PERF_SERVER_RE, READY_TIMEOUT_S, what="kvlane-perf server start-up")
    addr, seg_bytes = m[1], int(m[3])
    check_eq(seg_bytes, 64 << 20, "kvlane-perf server: default segment size", server)
    tel = server.telemetry()
    log(f"kvlane-perf server on {addr}: segment {m[2]}, {seg_bytes} bytes")

    rc, p = ctx.perf_run("lat", ["--lat", "-n", "100", "-s", "4K", "-d", "lo", addr])
    check_eq(rc, 0, "--lat -n 100 -s 4K: exit status", p, server)
    for col in ("#bytes", "#iterations", "t_min[usec]", "t_typical[usec]", "t_p99[usec]",
                "t_max[usec]"):
        check(col in p.stdout, "--lat: table header", repr(col), "not in stdout", p)
    for s in ("Transport", "tcp", addr, "Connections", "WRITE"):
        check(s in p.stdout, "--lat: header", repr(s), "not in stdout", p)
    rows = [ln.split() for ln in p.out if re.match(r"^\s*4096\s", ln)]
    check_eq(len(rows), 1, "--lat: rows for 4096 bytes", p)
    row = rows[0]
    check_eq(row[1], "100", "--lat: #iterations", p)
    t = [float(x) for x in row[2:6]]
    check(0 < t[0] <= t[1] <= t[2] <= t[3], "--lat: t_min <= t_typical <= t_p99 <= t_max",
          "positive and ordered", t, p)
    log(f"--lat 4 KiB x 100: t_min {t[0]} t_typical {t[1]} t_p99 {t[2]} t_max {t[3]} usec")

    rc, p = ctx.perf_run("json", ["--json", "--bw", "-s", "4K,64K", "-n", "300", "-q", "1",
                                  addr])
    check_eq(rc, 0, "--json --bw: exit status", p, server)
    objs = json_lines(p, "--json --bw")
    check_eq([o.get("bytes_per_msg") for o in objs], [4096, 65536], "--json: one per size", p)
    for o in objs:
        s = o["bytes_per_msg"]
        got = {k: o.get(k) for k in ("iterations", "completed_ok", "bytes", "connections",
                                     "mode", "op", "result")}
        want = {"iterations": 300, "completed_ok": 300, "bytes": s * 300, "connections": 1,
                "mode": "bw", "op": "write", "result": "ok"}
        check_eq(got, want, f"--json {s} B: fields", p)
        check_eq(o["servers"][0]["bytes"], s * 300, f"--json {s} B: the server's bytes", p)
        check(o["bw_peak_MBps"] >= o["bw_avg_MBps"] > 0, f"--json {s} B: bandwidth",
              "peak >= average > 0", (o["bw_peak_MBps"], o["bw_avg_MBps"]), p)
        check_eq((o.get("nap_us"), o.get("warmup")), (50, 0), f"--json {s} B: --nap, --warmup "
                 "defaults", p)
        check(0 < o["first_ok_ms"] <= o["seconds"] * 1e3, f"--json {s} B: first_ok_ms",
              "inside the run", (o["first_ok_ms"], o["seconds"]), p)
    log("--json --bw 4K,64K x 300: parses, bytes = size x iterations")

    # A verification that fails says where: the server's seed is 7, not 8.
    rc, p = ctx.perf_run("badseed", ["--read", "--verify", "--seed", "8", "-s", "4K", "-n",
                                     "10", addr])
    check_eq(rc, 1, "--read --verify with the wrong --seed: exit status", p)
    check("remote offset 0" in p.stderr, "--verify mismatch message", "names remote offset 0",
          "no", p)
    log("--read --verify --seed 8 (server's is 7): exit 1 naming remote offset 0")

    # The server served exactly what the clients report (4 KiB x 100, then the JSON runs,
    # then 10 reads of 4 KiB).
    want = 4096 * 100 + sum(o["bytes"] for o in objs) + 4096 * 10

    def served():
        return cmd(tel, "/kvlane/stats", server).get("tcp/served_bytes")

    def served_then_stop(want, what):
        seen = wait_for(lambda: served() == want, SETTLE_TIMEOUT_S) and want or served()
        check_eq(seen, want, what, server)
        tel.close()
        server.stop(signal.SIGINT)
        server.wait_line(r"^kvlane-perf server: stopped \(SIGINT\)$", 1,
                         what="server stop line")
    served_then_stop(want, "kvlane-perf server's tcp/served_bytes")
    log("kvlane-perf server: served_bytes matches, SIGINT -> exit 0")

    # --warmup: the warm-up transfers go to the server but not into the figures
    server = ctx.perf_start("server2", ["--set", h.LISTEN_ANY])
    m = server.wait_line(PERF_SERVER_RE, READY_TIMEOUT_S, what="kvlane-perf server start-up")
    addr = m[1]
    tel = server.telemetry()
    rc, p = ctx.perf_run("warmup", ["--json", "--bw", "-s", "4K", "-n", "100", "--warmup", "40",
                                    "--nap", "0", "-q", "1", addr])
    check_eq(rc, 0, "--warmup 40: exit status", p, server)
    o = json_lines(p, "--warmup 40")[0]
    got = {k: o.get(k) for k in ("iterations", "completed_ok", "bytes", "warmup", "nap_us")}
    check_eq(got, {"iterations": 100, "completed_ok": 100, "bytes": 4096 * 100, "warmup": 40,
                   "nap_us": 0}, "--warmup 40: fields count only the measured run", p)
    served_then_stop(4096 * 140, "--warmup 40: the server served warm-up and run")
    log("--warmup 40 -n 100: 100 counted, 140 served")


SCENARIOS = {
    "move_1gib": scenario_move_1gib,
    "sigkill": scenario_sigkill,
    "sigstop": scenario_sigstop,
    "perf_cli": scenario_perf_cli,
}


def main(argv):
    return h.main(argv, SCENARIOS, LIMIT_S, ["PATH-TO-KVLANED", "PATH-TO-KVLANE-PERF"], Ctx)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
