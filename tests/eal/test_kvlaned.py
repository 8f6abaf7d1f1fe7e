#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""EAL tests of kvlaned: command line, INI errors, telemetry, signals, NUMA pairing, EAL errors.

Usage: test_kvlaned.py SCENARIO PATH-TO-KVLANED, with KVL_SRC (repository root) and
KVL_FIXTURES (tests/fixtures) in the environment. Exit 0 pass, 1 fail.
"""
import glob
import json
import os
import re
import shlex
import shutil
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kvl_harness as h  # noqa: E402  (its own folder)
from kvl_harness import KVL_SRC, Fail, check, check_eq, log, kt  # noqa: E402

KVL_FIXTURES = os.environ.get("KVL_FIXTURES") or os.path.join(KVL_SRC, "tests", "fixtures")

SCENARIO_LIMIT_S = 28     # the whole scenario, daemons included
RUN_TIMEOUT_S = 10        # a command that should exit by itself
READY_TIMEOUT_S = 10      # start until "kvlaned: ready"
STOCK_CLIENT_TIMEOUT_S = 15

EAL_COMMON = ["--no-huge", "-m", "256", "--no-pci"]
LCORES_1NIC = ["-l", "0-1"]
LCORES_2NIC = ["--lcores", "0@0,1@1,2@1"]

FIXED_SECTIONS = ["runtime", "cq_moderation", "memory", "gpu", "sched", "control", "telemetry"]
LCORE_COLUMNS = ["lcore", "cpu", "socket", "role", "nic", "device", "remote_numa",
                 "loop_iterations", "busy_cycles", "idle_cycles", "busy_pct", "work", "naps",
                 "sleeps", "wake_cq", "wake_kick", "wake_timeout"]
SEGMENT_COLUMNS = ["id", "name", "length", "access", "rdma_nics", "reg_us", "reg_us_max"]
LCORE_STATIC = ["lcore", "cpu", "socket", "role", "nic", "device", "remote_numa"]
LCORE_COUNTERS = ["loop_iterations", "busy_cycles", "idle_cycles", "work", "naps"]
NIC_COLUMNS = ["nic", "device", "kind", "port", "transport", "transport_conf", "transport_note",
               "numa_node",
               "numa_source", "lcore", "lcore_socket", "remote_numa", "driver", "link_layer",
               "state", "netdev"]
INFO_KEYS = ["version", "name", "pid", "uptime_ms", "config", "sysfs_root", "idle_policy",
             "main_lcore", "nic_count", "cuda"]
SUMMARY_RE = (r"^kvlaned: stopped \((?P<why>SIGTERM|SIGINT|run-seconds elapsed)\) after "
              r"(?P<secs>\d+\.\d\d) s: (?P<n>\d+) NIC lcores?, (?P<iter>\d+) loop iterations, "
              r"(?P<pct>\d+(\.\d+)?)% busy$")


def minimal_ini(name, runtime_extra="", nics=None, extra=""):
    """[runtime] with @name and idle_policy = yield, then NIC sections (label -> body)."""
    if nics is None:
        nics = {"lo": "device = lo\ntransport = tcp\n"}
    text = f"[runtime]\nname = {name}\nidle_policy = yield\n{runtime_extra}"
    for label, body in nics.items():
        text += f"[nic.{label}]\n{body}"
    return text + extra


# ---- processes ----

class Daemon(h.Proc):
    """A kvlaned running in the background, its stdout and stderr collected line by line."""

    def __init__(self, ctx, argv, rundir, prefix):
        super().__init__(ctx, argv, rundir, prefix, "daemon")

    def wait_ready(self, timeout=READY_TIMEOUT_S):
        self.wait_line(r"^kvlaned: ready$", timeout, what="start-up")

    def stop(self, sig=signal.SIGTERM, timeout=h.STOP_TIMEOUT_S):
        """Signal, wait, expect exit 0 and the summary line; returns the summary match."""
        name = signal.Signals(sig).name
        super().stop(sig, timeout)
        m = None
        for line in self.out:
            m = re.search(SUMMARY_RE, line) or m
        check(m is not None, f"summary line after {name}", f"a line matching {SUMMARY_RE!r}",
              "none", self)
        check_eq(m["why"], name, "reason in the summary line", self)
        return m


def kvl_lines(r):
    """kvlaned's own messages on stderr ("kvlaned: ..." lines)."""
    return [ln for ln in r.stderr.splitlines() if ln.startswith("kvlaned: ")]


class Ctx(h.Ctx):
    """One scenario of kvlaned alone."""

    def __init__(self, scenario, exe):
        super().__init__(scenario, exe, "eal")
        self.exe = exe

    def ini(self, name, text):
        path = os.path.join(self.tmp, name)
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
        return path

    def argv(self, ini, lcores=LCORES_1NIC, prefix=None, eal_extra=(), kvl_extra=()):
        return ([self.exe, *lcores, *EAL_COMMON, "--file-prefix", prefix, *eal_extra, "--",
                 "-c", ini, *kvl_extra])

    def run(self, args, rundir=None, timeout=RUN_TIMEOUT_S):
        """Run kvlaned with @args (after the program name) until it exits."""
        r = h.Run([self.exe, *args], rundir or self.rundir(), timeout)
        if r.timed_out:
            raise Fail(f"exit\n  expected: kvlaned exits by itself within {timeout} s\n"
                       f"  seen:     still running; killed it\n" + r.describe())
        return r

    def run_ini(self, ini, lcores=LCORES_1NIC, eal_extra=(), kvl_extra=(), rundir=None):
        return self.run(self.argv(ini, lcores, self.unique("r"), eal_extra, kvl_extra)[1:],
                        rundir)

    def start(self, ini, lcores=LCORES_1NIC, prefix=None, rundir=None, eal_extra=(),
              kvl_extra=()):
        prefix = prefix or self.unique("d")
        rundir = rundir or self.rundir()
        return Daemon(self, self.argv(ini, lcores, prefix, eal_extra, kvl_extra), rundir, prefix)


def expect_rc(r, rc, what):
    check(r.rc is not None and r.rc >= 0, f"{what}: no crash",
          "a normal exit", f"killed by signal {-r.rc}" if r.rc is not None else "?", r)
    check_eq(r.rc, rc, f"{what}: exit status", r)


def expect_no_runtime_dir(r, what):
    """EAL never started: nothing under $RUNTIME_DIRECTORY/dpdk."""
    path = os.path.join(r.rundir, "dpdk")
    found = sorted(os.listdir(path)) if os.path.isdir(path) else None
    check(found is None, f"{what}: EAL must not start (no runtime directory)",
          f"no {path}", f"{path} exists with {found}", r)


def expect_kvl_message(r, pattern, what, flags=0):
    """A "kvlaned: ..." line on stderr matching @pattern."""
    lines = kvl_lines(r)
    check(any(re.search(pattern, ln, flags) for ln in lines), f"{what}: message",
          f'a "kvlaned: ..." line on stderr matching {pattern!r}', lines or "no such line", r)


# ---- scenarios ----

def scenario_cli(ctx):
    ini = ctx.ini("min.ini", minimal_ini("cli"))
    eal = [*LCORES_1NIC, *EAL_COMMON, "--file-prefix", ctx.unique("cli")]

    for args in (["--help"], ["-h"], ["--", "--help"], [*eal, "--", "-c", ini, "-h"]):
        r = ctx.run(args)
        expect_rc(r, 0, f"kvlaned {shlex.join(args)}")
        for s in ("Usage:", "--print-config"):
            check(s in r.stdout, f"kvlaned {shlex.join(args)}: usage on stdout", repr(s),
                  "not in stdout", r)
        expect_no_runtime_dir(r, "help")
    log("--help with and without --: exit 0, usage on stdout")

    versions = set()
    for args in (["--version"], ["-V"], ["--", "--version"]):
        r = ctx.run(args)
        expect_rc(r, 0, f"kvlaned {shlex.join(args)}")
        m = re.fullmatch(r"kvlaned (\d+\.\d+\.\d+\S*)\n", r.stdout)
        check(m is not None, f"kvlaned {shlex.join(args)}: stdout", "one line 'kvlaned X.Y.Z'",
              repr(r.stdout), r)
        versions.add(m[1])
        expect_no_runtime_dir(r, "version")
    check_eq(len(versions), 1, f"the same version every time (got {versions})")
    log(f"--version: {versions.pop()}")

    bad = [
        ("no --", [*eal, "-c", ini], r'"?--"?'),
        ("no --, nothing at all", [], r'"?--"?'),
        ("-- without -c", [*eal, "--"], r"-c\b"),
        ("-- without -c, other options", [*eal, "--", "--run-seconds", "1"], r"-c\b"),
        ("unknown option", [*eal, "--", "-c", ini, "--frobnicate"], r"--frobnicate"),
        ("unknown short option", [*eal, "--", "-c", ini, "-x"], r"-x\b"),
        ("--run-seconds abc", [*eal, "--", "-c", ini, "--run-seconds", "abc"], "--run-seconds"),
        ("--run-seconds -1", [*eal, "--", "-c", ini, "--run-seconds", "-1"], "--run-seconds"),
        ("--run-seconds 1.5", [*eal, "--", "-c", ini, "--run-seconds", "1.5"], "--run-seconds"),
        ("--run-seconds without value", [*eal, "--", "-c", ini, "--run-seconds"],
         "--run-seconds"),
    ]
    for what, args, rx in bad:
        r = ctx.run(args)
        expect_rc(r, 2, what)
        expect_kvl_message(r, rx, what)
        check("kvlaned: ready" not in r.stdout, f"{what}: not started", "no 'kvlaned: ready'",
              "ready", r)
        expect_no_runtime_dir(r, what)
        if what == "no --":
            expect_kvl_message(r, r'"--"', what)
    log(f"{len(bad)} bad command lines: exit 2, 'kvlaned: ...' message, no runtime dir")


def scenario_config_errors(ctx):
    # Parse errors: every one is reported, each on its own line with its own line number.
    text = ("; a file with five mistakes, each on a known line\n"  # 1
            "[runtime]\n"                                         # 2
            "name = cfgerr\n"                                     # 3
            "idle_policy = sometimes\n"                           # 4 bad enum
            "hybrid_sleep_us = 0\n"                               # 5 out of range
            "\n"                                                  # 6
            "[nic.lo]\n"                                          # 7
            "device = lo\n"                                       # 8
            "transport = tcp\n"                                   # 9
            "queue_depth = 1000\n"                                # 10 not a power of two
            "\n"                                                  # 11
            "[memory]\n"                                          # 12
            "pool_size_mb = lots\n"                               # 13 not a number
            "chunk_sise_kb = 4096\n")                             # 14 unknown key
    parse_errors = [(4, "runtime.idle_policy"), (5, "runtime.hybrid_sleep_us"),
                    (10, "nic.lo.queue_depth"), (13, "memory.pool_size_mb"),
                    (14, "memory.chunk_sise_kb")]
    # Cross-key errors, found after parsing.
    text2 = ("[runtime]\n"               # 1
             "name = cfgerr2\n"          # 2
             "idle_policy = yield\n"     # 3
             "[nic.lo]\n"                # 4
             "device = lo\n"             # 5
             "transport = tcp\n"         # 6
             "mtu = 1024\n"              # 7 RDMA only, on tcp
             "[gpu]\n"                   # 8
             "gpudirect = true\n")       # 9 needs gpu.enable
    semantic_errors = [(7, "nic.lo.mtu"), (9, "gpu.gpudirect")]

    for name, body, errors in (("parse.ini", text, parse_errors),
                               ("semantic.ini", text2, semantic_errors)):
        ini = ctx.ini(name, body)
        r = ctx.run_ini(ini)
        expect_rc(r, 3, name)
        lines = r.stderr.splitlines()
        err_rx = re.compile(rf"^{re.escape(ini)}:(\d+): ([A-Za-z0-9_.]+): ")
        seen = [(int(m[1]), m[2]) for m in map(err_rx.match, lines) if m]
        for line, key in errors:
            check((line, key) in seen, f"{name}: error for {key}",
                  f"a stderr line '{ini}:{line}: {key}: ...'", f"errors at {seen}", r)
        check_eq(sorted(seen), sorted(errors), f"{name}: exactly these errors (line, key)", r)
        n = len(errors)
        summary = f"kvlaned: {ini}: {n} error{'s' if n != 1 else ''}; nothing started"
        check(summary in lines, f"{name}: summary line", repr(summary), lines, r)
        check("kvlaned: ready" not in r.stdout, f"{name}: not started", "no ready", "ready", r)
        expect_no_runtime_dir(r, name)
        log(f"{name}: exit 3, {n} errors at lines {[ln for ln, _ in errors]}, no runtime dir")

    missing = os.path.join(ctx.tmp, "no-such-dir", "missing.ini")
    r = ctx.run_ini(missing)
    expect_rc(r, 3, "missing INI")
    check(any(ln.startswith(missing) for ln in r.stderr.splitlines()), "missing INI: message",
          f"a stderr line starting with {missing}", "none", r)
    expect_kvl_message(r, r"nothing started", "missing INI")
    expect_no_runtime_dir(r, "missing INI")
    log("missing INI: exit 3 naming the path")

    # A FIFO and /dev/zero as the INI: refused at once (they hung kvlaned, --print-config too).
    fifo = os.path.join(ctx.tmp, "fifo.ini")
    os.mkfifo(fifo)
    for path, what in ((fifo, "a FIFO"), ("/dev/zero", "a character device")):
        for extra in ((), ("--print-config",)):
            r = ctx.run(["--", "-c", path, *extra], timeout=10)
            expect_rc(r, 3, f"{path} as the INI {' '.join(extra)}")
            check(f"{path}: not a regular file ({what})" in r.stderr, f"{path}: message",
                  f"'{path}: not a regular file ({what})'", r.stderr.splitlines()[-2:], r)
    log("a FIFO and /dev/zero as the INI (also with --print-config): exit 3 at once")

    # An RDMA device that the sysfs root does not have: a host error before EAL.
    ini = ctx.ini("m7.ini", minimal_ini("m7", nics={"m7": "device = mlx5_7\n"}))
    roots = [os.path.join(KVL_FIXTURES, "sysfs", "one-node")]
    if not any(os.path.exists(f"/sys/class/{c}/mlx5_7") for c in ("infiniband", "net")):
        roots.append("/sys")
    for root in roots:
        r = ctx.run_ini(ini, kvl_extra=["--sysfs-root", root])
        what = f"absent device mlx5_7 under {root}"
        expect_rc(r, 4, what)
        for s in ("nic.m7", "mlx5_7"):
            check(s in r.stderr, f"{what}: message names {s}", repr(s), "not on stderr", r)
        expect_no_runtime_dir(r, what)
        log(f"{what}: exit 4 naming nic.m7 and mlx5_7, no runtime dir")


def read_sections(path):
    with open(path, encoding="utf-8") as f:
        return [m[1].strip() for m in re.finditer(r"^\s*\[([^\]\n]+)\]", f.read(), re.M)]


def read_keys(text):
    """(section, key) -> list of values for simple INI text. A list value ("a, b") gives its
    items, and a repeated key (list keys such as [control] peers may be) adds to them."""
    out, sec = {}, None
    for line in text.splitlines():
        s = line.strip()
        if not s or s[0] in ";#":
            continue
        if s.startswith("["):
            sec = s[1:s.index("]")].strip()
        elif "=" in s:
            k, v = s.split("=", 1)
            out.setdefault((sec, k.strip()), []).extend(x.strip() for x in v.split(","))
    return out


def scenario_print_config(ctx):
    shipped = sorted(glob.glob(os.path.join(KVL_SRC, "config", "*.ini")))
    if not shipped:
        log(f"NOTE: no shipped config/*.ini under {KVL_SRC} yet; checking own INIs only")
    own = [
        ("min.ini", minimal_ini("pc_min")),
        ("rich.ini", minimal_ini(
            "pc_rich", runtime_extra="allow_remote_numa = true\n",
            nics={"r0": "device = mlx5_0\nport = 1\nqp_count = 4\nqueue_depth = 256\n",
                  "lo": "device = lo\ntransport = tcp\nnuma_node = 0\n"},
            extra="[memory]\npool_size_mb = 64\nchunk_size_kb = 1024\n"
                  "[control]\nsecret_file = /etc/kvlane/secret\n"
                  "peers = 10.0.0.2:18515, 10.0.0.3:18515\n"
                  "[telemetry]\nenable = false\n")),
    ]
    cases = [(p, False) for p in shipped] + [(ctx.ini(n, t), True) for n, t in own]
    for ini, own_file in cases:
        name = os.path.relpath(ini, KVL_SRC) if not own_file else os.path.basename(ini)
        r = ctx.run_ini(ini, kvl_extra=["--print-config"])
        expect_rc(r, 0, f"{name} --print-config")
        expect_no_runtime_dir(r, f"{name} --print-config")
        lines = r.stdout.splitlines()
        check(bool(lines) and lines[0].startswith("#"), f"{name}: first line",
              "a '# ...' comment", lines[:1], r)
        headers = [m[1] for m in map(re.compile(r"^\[([^\]]+)\]$").match, lines) if m]
        want = list(dict.fromkeys(read_sections(ini) + FIXED_SECTIONS))
        missing = [s for s in want if s not in headers]
        check(not missing, f"{name}: section headers in the output", want,
              f"missing {missing}; printed {headers}", r)
        if own_file:
            with open(ini, encoding="utf-8") as f:
                given = read_keys(f.read())
            printed = read_keys(r.stdout)
            wrong = {f"{s}.{k}": (v, printed.get((s, k))) for (s, k), v in given.items()
                     if printed.get((s, k)) != v}
            check(not wrong, f"{name}: every key of the file printed with its value",
                  "the file's values", f"(given, printed): {wrong}", r)
        again = ctx.ini(f"again-{os.path.basename(ini)}", r.stdout)
        r2 = ctx.run_ini(again, kvl_extra=["--print-config"])
        expect_rc(r2, 0, f"{name}: --print-config of its own output")
        expect_no_runtime_dir(r2, f"{name}: --print-config of its own output")
        a, b = lines[1:], r2.stdout.splitlines()[1:]
        if a != b:
            diff = [f"line {i + 2}: {x!r} != {y!r}" for i, (x, y) in
                    enumerate(zip(a + [None] * len(b), b + [None] * len(a))) if x != y][:5]
            raise Fail(f"{name}: printing the printed config again gives the same text\n"
                       f"  expected: identical output after the first line\n"
                       f"  seen:     {diff}\n" + r.describe() + r2.describe())
        log(f"{name}: exit 0, {len(headers)} sections, round trip identical")


def check_info(c, d, name, ini, nic_count, sysfs_root="/sys"):
    info = h.cmd(c, "/kvlane/info", d)
    missing = [k for k in INFO_KEYS if k not in info]
    check(not missing, "/kvlane/info keys", INFO_KEYS, f"missing {missing}: {info}", d)
    check_eq(info["name"], name, "/kvlane/info name", d)
    check_eq(info["pid"], d.pid, "/kvlane/info pid", d)
    check_eq(info["nic_count"], nic_count, "/kvlane/info nic_count", d)
    check_eq(info["config"], ini, "/kvlane/info config", d)
    check_eq(info["sysfs_root"], sysfs_root, "/kvlane/info sysfs_root", d)
    check_eq(info["idle_policy"], "yield", "/kvlane/info idle_policy", d)
    check_eq(info["main_lcore"], 0, "/kvlane/info main_lcore", d)
    check(info["cuda"] in (0, 1), "/kvlane/info cuda", "0 or 1", info["cuda"], d)
    return info


def scenario_telemetry(ctx):
    ini = ctx.ini("tel.ini", minimal_ini(
        "tel1", extra="[segment.kvt]\nlayers = 2\nplanes = 2\nblocks = 4\n"
                      "block_bytes = 4096\naccess = read\n"))
    d = ctx.start(ini)
    m = d.wait_line(r'^kvlaned (\S+) "(.*)": (\d+) NICs?, (\d+) lcores \(main (\d+)\), '
                    r'idle policy (\S+), config (.*)$', READY_TIMEOUT_S, what="start line")
    check_eq(m.groups()[1:], ("tel1", "1", "2", "0", "yield", ini), "start line fields", d)
    d.wait_ready()
    tl = d.wait_line(r"^\s*telemetry: (\S+)", 1, what="telemetry line")
    check_eq(tl[1], d.socket_path, "socket path on the telemetry line", d)
    # DPDK takes 10 clients and never drops an idle one: only the owner may connect.
    mode = os.stat(d.socket_path).st_mode & 0o777
    check_eq(oct(mode), oct(0o600), "the telemetry socket's mode (the owner's alone)", d)
    c = d.telemetry()
    check(isinstance(c.greeting.get("max_output_len"), int), "greeting", "max_output_len",
          c.greeting, d)

    info = check_info(c, d, "tel1", ini, 1)
    check_eq(info["version"], m[1], "/kvlane/info version (as on the start line)", d)
    time.sleep(0.05)
    info2 = h.cmd(c, "/kvlane/info", d)
    check(info2["uptime_ms"] > info["uptime_ms"], "/kvlane/info uptime_ms grows",
          f"> {info['uptime_ms']}", info2["uptime_ms"], d)
    log(f"/kvlane/info: name, pid {d.pid}, nic_count 1, uptime {info['uptime_ms']} -> "
        f"{info2['uptime_ms']} ms")

    conf = h.cmd(c, "/kvlane/config", d)
    for k, v in (("runtime/name", "tel1"), ("runtime/idle_policy", "yield"),
                 ("nic/lo/device", "lo"), ("nic/lo/transport", "tcp")):
        check_eq(conf.get(k), v, f"/kvlane/config {k}", d)
    check(all(isinstance(v, str) for v in conf.values()), "/kvlane/config values",
          "strings", conf, d)
    sec = h.cmd(c, "/kvlane/config,nic.lo", d)
    check_eq(sec.get("device"), "lo", "/kvlane/config,nic.lo device", d)
    check_eq(sec.get("transport"), "tcp", "/kvlane/config,nic.lo transport", d)
    check(not any("/" in k for k in sec), "/kvlane/config,nic.lo keys", "bare key names",
          list(sec), d)
    rt = h.cmd(c, "/kvlane/config,runtime", d)
    check_eq(rt.get("name"), "tel1", "/kvlane/config,runtime name", d)
    check("device" not in rt, "/kvlane/config,runtime", "only [runtime] keys", list(rt), d)
    check_eq(h.query(c, "/kvlane/config,bogus", d), None, "/kvlane/config,bogus", d)
    log("/kvlane/config: flat dict, per-section form, unknown section -> null")

    rows = h.table_rows(h.cmd(c, "/kvlane/lcores", d), LCORE_COLUMNS, "/kvlane/lcores", d)
    check_eq(len(rows), 2, "/kvlane/lcores: number of lcores", d)
    roles = sorted(r["role"] for r in rows)
    check_eq(roles, ["main", "nic"], "/kvlane/lcores roles", d)
    main = next(r for r in rows if r["role"] == "main")
    nic = next(r for r in rows if r["role"] == "nic")
    check_eq(main["lcore"], 0, "main lcore id", d)
    check_eq((nic["nic"], nic["device"]), ("lo", "lo"), "nic lcore's NIC and device", d)
    for r in rows:
        try:
            pct = float(r["busy_pct"])
        except (TypeError, ValueError):
            pct = None
        check(pct is not None and 0.0 <= pct <= 100.0, f"lcore {r['lcore']} busy_pct",
              "a float string in [0, 100]", repr(r["busy_pct"]), d)
    time.sleep(0.2)
    rows2 = h.table_rows(h.cmd(c, "/kvlane/lcores", d), LCORE_COLUMNS, "/kvlane/lcores", d)
    nic2 = next(r for r in rows2 if r["lcore"] == nic["lcore"])
    check(nic2["loop_iterations"] > nic["loop_iterations"],
          "nic lcore loop_iterations grows over 200 ms", f"> {nic['loop_iterations']}",
          nic2["loop_iterations"], d)
    log(f"/kvlane/lcores: main 0, nic {nic['lcore']} (lo), iterations "
        f"{nic['loop_iterations']} -> {nic2['loop_iterations']}")

    one = h.cmd(c, f"/kvlane/lcore,{nic['lcore']}", d)
    check_eq(sorted(one), sorted(nic2), f"/kvlane/lcore,{nic['lcore']} keys", d)
    check_eq({k: one[k] for k in LCORE_STATIC}, {k: nic2[k] for k in LCORE_STATIC},
             f"/kvlane/lcore,{nic['lcore']} equals its /kvlane/lcores row", d)
    for k in LCORE_COUNTERS:
        check(one[k] >= nic2[k], f"/kvlane/lcore,{nic['lcore']} {k} (read later)",
              f">= {nic2[k]}", one[k], d)
    for bad in ("99", "abc", ""):
        check_eq(h.query(c, f"/kvlane/lcore,{bad}", d), None, f"/kvlane/lcore,{bad}", d)
    log(f"/kvlane/lcore,{nic['lcore']} matches its row; bad ids -> null")

    segs = h.table_rows(h.cmd(c, "/kvlane/segments", d), SEGMENT_COLUMNS, "/kvlane/segments", d)
    check_eq([(s["id"], s["name"], s["length"], s["access"], s["rdma_nics"], s["reg_us"])
              for s in segs], [(1, "kvt", 2 * 2 * 4 * 4096, "read", 0, 0)],
             "/kvlane/segments rows (tcp only: nothing registered for RDMA)", d)
    log("/kvlane/segments: the INI's segment, its size and access, no RDMA registration")
    check_eq([(s["kind"], s["gpu"], s["pci_bus_id"], s["reg"]) for s in segs],
             [("host", -1, "", "lo:none")],
             "/kvlane/segments kind, gpu, pci_bus_id, reg (host memory; tcp registers nothing)", d)
    log("/kvlane/segments: kind host, no GPU, registration per NIC lo:none")

    nics = h.table_rows(h.cmd(c, "/kvlane/nics", d), NIC_COLUMNS, "/kvlane/nics", d)
    check_eq(len(nics), 1, "/kvlane/nics rows", d)
    n = nics[0]
    want = {"nic": "lo", "device": "lo", "kind": "netdev", "transport": "tcp",
            "transport_conf": "tcp", "lcore": nic["lcore"]}
    check_eq({k: n[k] for k in want}, want, "/kvlane/nics row of lo", d)
    # tcp into VRAM needs a GPU and the pinned pool: off here, and why
    check_eq(n.get("tcp_vram"), "off: no GPU is open ([gpu] enable = false)",
             "/kvlane/nics tcp_vram of lo", d)
    check_eq(h.cmd(c, "/kvlane/nic,lo", d), n, "/kvlane/nic,lo equals its /kvlane/nics row",
             d)
    check_eq(h.query(c, "/kvlane/nic,nope", d), None, "/kvlane/nic,nope", d)
    log("/kvlane/nics and /kvlane/nic,lo: lo, netdev, tcp, on the nic lcore; nope -> null")

    c.close()
    s = d.stop(signal.SIGTERM)
    check_eq(s["n"], "1", "summary: NIC lcores", d)
    check(int(s["iter"]) >= nic2["loop_iterations"], "summary: loop iterations",
          f">= {nic2['loop_iterations']}", s["iter"], d)
    log(f"SIGTERM: exit 0, {s[0]!r}")

    # Two RDMA NICs from the one-node fixture, transports resolved from "auto".
    root = os.path.join(KVL_FIXTURES, "sysfs", "one-node")
    ini = ctx.ini("tel2.ini", minimal_ini("tel2", nics={"m0": "device = mlx5_0\n",
                                                        "r0": "device = rxe0\n"}))
    d = ctx.start(ini, lcores=LCORES_2NIC, kvl_extra=["--sysfs-root", root])
    d.wait_ready()
    c = d.telemetry()
    check_info(c, d, "tel2", ini, 2, sysfs_root=root)
    nics = {r["nic"]: r for r in h.table_rows(h.cmd(c, "/kvlane/nics", d), NIC_COLUMNS,
                                              "/kvlane/nics", d)}
    check_eq(sorted(nics), ["m0", "r0"], "/kvlane/nics labels", d)
    for label, dev, tr in (("m0", "mlx5_0", "mlx5"), ("r0", "rxe0", "verbs")):
        row = nics[label]
        want = {"device": dev, "kind": "rdma", "transport": tr, "transport_conf": "auto"}
        check_eq({k: row[k] for k in want}, want, f"/kvlane/nics row of {label}", d)
        check_eq(h.cmd(c, f"/kvlane/nic,{label}", d), row, f"/kvlane/nic,{label}", d)
    check_eq((nics["m0"]["numa_node"], nics["m0"]["numa_source"]), (0, "sysfs"),
             "mlx5_0 NUMA node (fixture: node 0)", d)
    lc = h.table_rows(h.cmd(c, "/kvlane/lcores", d), LCORE_COLUMNS, "/kvlane/lcores", d)
    check_eq(len(lc), 3, "/kvlane/lcores: number of lcores", d)
    nic_lcores = {r["lcore"]: r["nic"] for r in lc if r["role"] == "nic"}
    check_eq(sorted(nic_lcores), [1, 2], "nic lcores", d)
    check(nics["m0"]["lcore"] != nics["r0"]["lcore"], "each NIC on its own lcore",
          "distinct lcores", (nics["m0"]["lcore"], nics["r0"]["lcore"]), d)
    check_eq({nics[lb]["lcore"]: lb for lb in nics}, nic_lcores,
             "/kvlane/nics lcore agrees with /kvlane/lcores nic", d)
    c.close()
    d.stop(signal.SIGTERM)
    log(f"2 NICs on one-node fixture: mlx5_0 -> mlx5 on lcore {nics['m0']['lcore']}, "
        f"rxe0 -> verbs on lcore {nics['r0']['lcore']}, 3 lcores")


def find_stock_client():
    for p in ("/usr/bin/dpdk-telemetry.py", shutil.which("dpdk-telemetry.py")):
        if p and os.access(p, os.X_OK):
            return p
    return None


def scenario_stock_client(ctx):
    tool = find_stock_client()
    check(tool is not None, "stock client", "/usr/bin/dpdk-telemetry.py (DPDK's own client)",
          "not installed")
    ini = ctx.ini("stock.ini", minimal_ini("stock1"))
    d = ctx.start(ini)
    d.wait_ready()
    check(kt.wait_for_socket(d.socket_path, 5, alive=d.running), "telemetry socket",
          d.socket_path, "missing", d)
    r = h.Run([sys.executable, tool, "-f", d.prefix], d.rundir, STOCK_CLIENT_TIMEOUT_S,
              input="/kvlane/info\n")
    if r.timed_out:
        raise Fail(f"{tool}\n  expected: exits within {STOCK_CLIENT_TIMEOUT_S} s\n"
                   f"  seen:     still running; killed it\n" + r.describe() + d.describe())
    expect_rc(r, 0, tool)
    info = None
    for line in r.stdout.splitlines():
        try:
            v = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(v, dict) and "/kvlane/info" in v:
            info = v["/kvlane/info"]
    check(isinstance(info, dict), f"{tool}: /kvlane/info reply", "a JSON line with a dict",
          repr(r.stdout[-300:]), r, d)
    check_eq(info.get("name"), "stock1", f"{tool}: /kvlane/info name", r, d)
    check_eq(info.get("pid"), d.pid, f"{tool}: /kvlane/info pid", r, d)
    d.stop(signal.SIGTERM)
    log(f"{os.path.basename(tool)} -f {d.prefix}: name stock1 in {r.secs:.2f} s")


def scenario_signals(ctx):
    ini = ctx.ini("sig.ini", minimal_ini("sig1"))
    for sig in (signal.SIGTERM, signal.SIGINT):
        d = ctx.start(ini)
        d.wait_ready()
        s = d.stop(sig)
        check(int(s["iter"]) > 0, f"{sig.name}: loop iterations in the summary", "> 0",
              s["iter"], d)
        log(f"{sig.name}: exit 0, {s[0]!r}")

    d = ctx.start(ini, kvl_extra=["--run-seconds", "1"])
    d.wait_ready()
    rc = d.wait_exit(6)
    secs = time.monotonic() - d.t0
    check_eq(rc, 0, "--run-seconds 1: exit status", d)
    check(secs >= 0.9, "--run-seconds 1: ran about a second", ">= 0.9 s since start",
          f"{secs:.2f} s", d)
    s = None
    for line in d.out:
        s = re.search(SUMMARY_RE, line) or s
    check(s is not None and s["why"] == "run-seconds elapsed", "--run-seconds 1: summary",
          "stopped (run-seconds elapsed)", s[0] if s else "no summary line", d)
    check(0.9 <= float(s["secs"]) <= 3.0, "--run-seconds 1: time in the summary",
          "about 1 s", s["secs"], d)
    log(f"--run-seconds 1: exited by itself after {secs:.2f} s, {s[0]!r}")


def scenario_side_by_side(ctx):
    rundir = ctx.rundir()
    a = ctx.start(ctx.ini("a.ini", minimal_ini("side_a")), rundir=rundir)
    b = ctx.start(ctx.ini("b.ini", minimal_ini("side_b")), rundir=rundir)
    a.wait_ready()
    b.wait_ready()
    ca, cb = a.telemetry(), b.telemetry()
    for d, c, name in ((a, ca, "side_a"), (b, cb, "side_b")):
        info = h.cmd(c, "/kvlane/info", d)
        check_eq((info["name"], info["pid"]), (name, d.pid),
                 f"{d.prefix}: /kvlane/info name and pid", a, b)
    log(f"two daemons: {a.prefix} -> side_a pid {a.pid}, {b.prefix} -> side_b pid {b.pid}")

    # A second primary with a's prefix: EAL refuses it, a keeps running.
    r = ctx.run(ctx.argv(ctx.ini("c.ini", minimal_ini("side_c")), prefix=a.prefix)[1:],
                rundir=rundir)
    expect_rc(r, 5, "same --file-prefix as a running daemon")
    expect_kvl_message(r, r"EAL initialisation failed: see EAL.s messages above",
                       "same --file-prefix")
    check("kvlaned: ready" not in r.stdout, "same --file-prefix: not started", "no ready",
          "ready", r)
    check(a.running(), "first daemon after the clash", "still running", "exited", a, r)
    info = h.cmd(ca, "/kvlane/info", a)
    check_eq((info["name"], info["pid"]), ("side_a", a.pid),
             "first daemon answers on its open connection", a, r)
    ca.close()
    ca = a.telemetry()
    info = h.cmd(ca, "/kvlane/info", a)
    check_eq((info["name"], info["pid"]), ("side_a", a.pid),
             "first daemon answers a new connection", a, r)
    log(f"same prefix {a.prefix}: exit 5 (EAL), side_a still answers")

    ca.close()
    a.stop(signal.SIGTERM)
    info = h.cmd(cb, "/kvlane/info", b)
    check_eq(info["name"], "side_b", "second daemon after the first stopped", b)
    cb.close()
    b.stop(signal.SIGTERM)
    log("both stopped with exit 0")


def scenario_no_telemetry(ctx):
    ini = ctx.ini("notel.ini", minimal_ini("notel", extra="[telemetry]\nenable = false\n"))
    d = ctx.start(ini)
    d.wait_ready()
    d.wait_line(r"^\s*telemetry: off", 1, what="telemetry line")
    eal_dir = os.path.dirname(d.socket_path)
    check(os.path.isdir(eal_dir), "EAL runtime directory", eal_dir, "missing", d)
    appeared = kt.wait_for_socket(d.socket_path, 2.0, alive=d.running)
    check(not appeared, "no telemetry socket for 2 s", f"no {d.socket_path}",
          "the socket appeared" if appeared else "daemon exited", d)
    check(d.running(), "daemon still running", "running", "exited", d)
    others = glob.glob(os.path.join(eal_dir, "dpdk_telemetry*"))
    check_eq(others, [], f"telemetry sockets in {eal_dir}", d)
    d.stop(signal.SIGTERM)
    log("[telemetry] enable = false: ready, 'telemetry: off', no socket for 2 s, SIGTERM -> 0")


def remote_warnings(d, label):
    """Lines (stdout or stderr) warning that nic.<label> runs off its NUMA node."""
    return [ln for ln in d.out + d.err
            if f"nic.{label}" in ln and re.search(r"remote", ln, re.I) and "NUMA node" in ln]


def scenario_numa_fixture(ctx):
    root = os.path.join(KVL_FIXTURES, "sysfs", "two-node")
    sysfs = ["--sysfs-root", root]

    ini = ctx.ini("local.ini", minimal_ini("numa1", nics={"r1": "device = mlx5_1\n"}))
    r = ctx.run_ini(ini, kvl_extra=sysfs)
    expect_rc(r, 4, "mlx5_1 on node 1, lcores on node 0")
    for s in ("nic.r1", "mlx5_1", "node 1"):
        check(s in r.stderr, f"pairing error names {s!r}", repr(s), "not on stderr", r)
    check("kvlaned: ready" not in r.stdout, "not started", "no ready", "ready", r)
    log("mlx5_1 (node 1) with lcores on node 0: exit 4 naming nic.r1, mlx5_1, node 1")

    ini = ctx.ini("remote.ini", minimal_ini("numa2", runtime_extra="allow_remote_numa = true\n",
                                            nics={"r1": "device = mlx5_1\n"}))
    d = ctx.start(ini, kvl_extra=sysfs)
    d.wait_ready()
    c = d.telemetry()
    n = h.cmd(c, "/kvlane/nic,r1", d)
    want = {"device": "mlx5_1", "numa_node": 1, "numa_source": "sysfs", "remote_numa": 1,
            "lcore": 1, "lcore_socket": 0}
    check_eq({k: n.get(k) for k in want}, want, "/kvlane/nic,r1 with allow_remote_numa", d)
    lc = h.cmd(c, "/kvlane/lcore,1", d)
    check_eq((lc["nic"], lc["socket"], lc["remote_numa"]), ("r1", 0, 1),
             "/kvlane/lcore,1 (nic, socket, remote_numa)", d)
    c.close()
    d.stop(signal.SIGTERM)
    warn = remote_warnings(d, "r1")
    check(bool(warn), "remote NUMA warning", "a line naming nic.r1, 'remote' and 'NUMA node 1'",
          "none", d)
    log(f"allow_remote_numa: runs, node 1 from sysfs, remote_numa 1; warning {warn[0]!r}")

    ini = ctx.ini("pinned.ini", minimal_ini("numa3", nics={"r1": "device = mlx5_1\n"
                                                                 "numa_node = 0\n"}))
    d = ctx.start(ini, kvl_extra=sysfs)
    d.wait_ready()
    c = d.telemetry()
    n = h.cmd(c, "/kvlane/nic,r1", d)
    want = {"numa_node": 0, "numa_source": "config", "remote_numa": 0, "lcore_socket": 0}
    check_eq({k: n.get(k) for k in want}, want, "/kvlane/nic,r1 with numa_node = 0", d)
    c.close()
    d.stop(signal.SIGTERM)
    check_eq(remote_warnings(d, "r1"), [], "no remote NUMA warning with numa_node = 0", d)
    log("numa_node = 0 in [nic.r1]: runs, numa_source config, remote_numa 0")


GPU_COLUMNS = ["pci", "gpu", "gpu_cuda_device", "gpu_distance", "gpu_source", "gpu_note"]


def host_gpus():
    """NVIDIA GPUs (vendor 0x10de, class 0x0300xx/0x0302xx) under /sys/bus/pci/devices."""
    base = "/sys/bus/pci/devices"
    found = []
    for name in sorted(os.listdir(base)) if os.path.isdir(base) else []:
        try:
            with open(os.path.join(base, name, "vendor")) as f:
                vendor = int(f.read(), 16)
            with open(os.path.join(base, name, "class")) as f:
                cls = int(f.read(), 16)
        except (OSError, ValueError):
            continue
        if vendor == 0x10DE and (cls >> 8) in (0x0300, 0x0302):
            found.append(name)
    return found


def gpu_lines(d, label):
    return [ln for ln in d.out + d.err if f"nic.{label} " in ln and "GPU" in ln]


def scenario_gpu_pair(ctx):
    # This host: lo has no PCI device; the GPU field says none and why (no GPU here).
    ini = ctx.ini("gpu0.ini", minimal_ini("gpu0"))
    d = ctx.start(ini)
    d.wait_ready()
    c = d.telemetry()
    rows = h.table_rows(h.cmd(c, "/kvlane/nics", d), NIC_COLUMNS + GPU_COLUMNS,
                        "/kvlane/nics", d)
    n = rows[0]
    gpus = host_gpus()
    want = {"pci": "", "gpu": gpus[0] if gpus else "none", "gpu_cuda_device": -1,
            "gpu_distance": "none", "gpu_source": "topology"}
    check_eq({k: n[k] for k in want}, want, "/kvlane/nics GPU fields of lo on this host", d)
    note = "lo has no device link: a virtual netdev"
    if not gpus:
        note += "; no NVIDIA GPU under /sys/bus/pci/devices"
    check_eq(n["gpu_note"], note, "/kvlane/nics gpu_note of lo", d)
    check_eq(h.cmd(c, "/kvlane/nic,lo", d)["gpu_note"], note, "/kvlane/nic,lo gpu_note", d)
    cuda = h.cmd(c, "/kvlane/info", d)["cuda"]
    c.close()
    d.stop(signal.SIGTERM)
    log(f"this host: lo -> gpu {n['gpu']!r}, distance none, note {n['gpu_note']!r}")

    # With [gpu] enable on a host with a GPU (the H200), the opened device's CUDA index
    # shows on the NIC paired with it, matched by PCI bus id.
    if gpus and cuda and os.path.exists("/dev/nvidiactl"):
        ini = ctx.ini("gpuc.ini", minimal_ini("gpuc", extra="[gpu]\nenable = true\n"))
        d = ctx.start(ini)
        d.wait_ready()
        c = d.telemetry()
        bus = h.cmd(c, "/kvlane/gpu", d)["pci_bus_id"]
        n = h.table_rows(h.cmd(c, "/kvlane/nics", d), NIC_COLUMNS + GPU_COLUMNS,
                         "/kvlane/nics", d)[0]
        norm = bus.lower()
        if norm.count(":") == 2 and len(norm.split(":")[0]) == 8:
            norm = norm[4:]  # CUDA/NVML's 8-digit domain, as sysfs spells it (4)
        check_eq(n["gpu"], gpus[0], "lo pairs with the lowest-address GPU", d)
        check_eq(n["gpu_cuda_device"], 0 if norm == gpus[0] else -1,
                 f"gpu_cuda_device of lo (CUDA device 0 is {bus})", d)
        c.close()
        d.stop(signal.SIGTERM)
        log(f"[gpu] enable: CUDA device 0 = {bus}; lo -> {n['gpu']}, "
            f"gpu_cuda_device {n['gpu_cuda_device']}")
    else:
        log(f"GPUs here: {gpus or 'none'}, kvlaned built with CUDA: {bool(cuda)}: the "
            "CUDA-index match is checked on a GPU machine")

    # The two-socket fixture: PIX by topology, SYS for the NIC of unknown node, an INI
    # override to a GPU on the other socket; both far pairs warned at start.
    root = os.path.join(KVL_FIXTURES, "sysfs", "two-socket-gpu")
    ini = ctx.ini("gpu1.ini", minimal_ini(
        "gpu1", runtime_extra="allow_remote_numa = true\n",
        nics={"a": "device = mlx5_0\n", "c": "device = mlx5_2\n",
              "b": "device = mlx5_1\ngpu = 0000:18:00.0\n"}))
    d = ctx.start(ini, lcores=["--lcores", "0@0,1@1,2@1,3@0"], kvl_extra=["--sysfs-root", root])
    d.wait_ready()
    c = d.telemetry()
    rows = {r["nic"]: r for r in h.table_rows(h.cmd(c, "/kvlane/nics", d),
                                              NIC_COLUMNS + GPU_COLUMNS, "/kvlane/nics", d)}
    want = {"a": ("0000:1a:00.0", "0000:18:00.0", -1, "PIX", "topology"),
            "c": ("0000:b1:00.0", "0000:18:00.0", -1, "SYS", "topology"),
            "b": ("0000:9c:00.0", "0000:18:00.0", -1, "SYS", "config")}
    for label, w in want.items():
        check_eq(tuple(rows[label][k] for k in GPU_COLUMNS[:5]), w,
                 f"/kvlane/nics GPU fields of nic.{label} (pci, gpu, cuda, class, source)", d)
    check_eq(rows["b"]["gpu_note"],
             "the INI chose 0000:18:00.0 (SYS); 0000:9a:00.0 is nearer (PIX)",
             "/kvlane/nics gpu_note of the forced pair", d)
    c.close()
    d.stop(signal.SIGTERM)
    for label, dev in (("c", "mlx5_2"), ("b", "mlx5_1")):
        warn = [ln for ln in gpu_lines(d, label) if dev in ln and "SYS" in ln
                and "0000:18:00.0" in ln]
        check(bool(warn), f"start-up warning for nic.{label}",
              f"a line naming nic.{label}, {dev}, GPU 0000:18:00.0 and SYS",
              gpu_lines(d, label) or "none", d)
    check(not any("SYS" in ln for ln in gpu_lines(d, "a")), "no warning for the PIX pair",
          "no SYS line for nic.a", gpu_lines(d, "a"), d)
    log("fixture: mlx5_0 PIX to 0000:18:00.0; mlx5_2 (node ?) SYS, warned; mlx5_1 forced "
        "to 0000:18:00.0, SYS, warned")

    # A GPU that is not there: file, line, key, and the GPUs found.
    ini = ctx.ini("gpu2.ini", minimal_ini("gpu2", nics={"a": "device = mlx5_0\n"
                                                              "gpu = 0000:3c:00.0\n"}))
    r = ctx.run_ini(ini, kvl_extra=["--sysfs-root", root])
    expect_rc(r, 4, "gpu = an absent GPU")
    expect_kvl_message(r, re.escape(f"{ini}:6: nic.a.gpu: there is no PCI function "
                                    "0000:3c:00.0; NVIDIA GPUs under ") + ".*" +
                       re.escape("0 = 0000:18:00.0, 1 = 0000:19:00.0"), "gpu = absent")
    expect_no_runtime_dir(r, "gpu = absent")
    log("gpu = 0000:3c:00.0: exit 4 before EAL, naming the file, line 6, nic.a.gpu, the GPUs")


def scenario_eal_errors(ctx):
    ini = ctx.ini("eal.ini", minimal_ini("eal1"))
    r = ctx.run_ini(ini, eal_extra=["--no-such-eal-flag"])
    expect_rc(r, 5, "unknown EAL flag")
    expect_kvl_message(r, r"^kvlaned: EAL initialisation failed", "unknown EAL flag")
    check("kvlaned: ready" not in r.stdout, "unknown EAL flag: not started", "no ready",
          "ready", r)
    log("unknown EAL flag: exit 5, 'EAL initialisation failed'")

    r = ctx.run_ini(ini, lcores=["-l", "0"])
    expect_rc(r, 4, "-l 0 (no worker lcore for the NIC)")
    expect_kvl_message(r, r"lcore", "-l 0", re.I)
    check("kvlaned: ready" not in r.stdout, "-l 0: not started", "no ready", "ready", r)
    log("-l 0: exit 4 with a message about lcores")

    ini2 = ctx.ini("eal2.ini", minimal_ini("eal2", nics={"m0": "device = mlx5_0\n",
                                                         "r0": "device = rxe0\n"}))
    r = ctx.run_ini(ini2, kvl_extra=["--sysfs-root",
                                     os.path.join(KVL_FIXTURES, "sysfs", "one-node")])
    expect_rc(r, 4, "2 NICs, -l 0-1 (one worker lcore)")
    expect_kvl_message(r, r"lcore", "2 NICs, -l 0-1", re.I)
    log("2 NICs with one worker lcore: exit 4 with a message about lcores")


def scenario_secret_policy(ctx):
    """kvlaned refuses a secret file others or its group may read (unless the INI allows
    0640), one shorter than 32 bytes, and one byte repeated: each with the path, the cause and
    the fix, before EAL starts; the allowed ones start (issue 16, 6)."""
    def secret(name, data, mode):
        path = os.path.join(ctx.tmp, name)
        with open(path, "wb") as f:
            f.write(data)
        os.chmod(path, mode)
        return path

    good = os.urandom(24).hex().encode() + b"\n"  # 48 bytes
    cases = [  # name, bytes, mode, [control] extra, None (starts) or what the error says
        ("world.secret", good, 0o644, "",
         r"secret file mode 644 lets every user at it; run chmod 600"),
        ("group.secret", good, 0o640, "",
         r"secret file mode 640 lets its group at it; run chmod 600 "
         r".*secret_group_readable = true"),
        ("groupw.secret", good, 0o660, "secret_group_readable = true\n",
         r"secret file mode 660 lets its group at it; run chmod 600 \S+$"),
        ("short.secret", b"0123456789abcdef0123456789abcde\n", 0o600, "",
         r"secret is 31 bytes, at least 32 are needed"),
        ("same.secret", b"a" * 40 + b"\n", 0o600, "",
         r"secret is one byte repeated \(40 x 0x61\)"),
        ("owner.secret", good, 0o600, "", None),
        ("readonly.secret", good, 0o400, "", None),
        ("group-ok.secret", good, 0o640, "secret_group_readable = true\n", None),
    ]
    for name, data, mode, extra, want in cases:
        path = secret(name, data, mode)
        ini = ctx.ini(f"{name}.ini", minimal_ini(
            "secret", extra=f"[control]\nlisten = 127.0.0.1:0\nsecret_file = {path}\n{extra}"))
        if want is None:
            d = ctx.start(ini)
            d.wait_ready()
            d.stop()
            log(f"{name} (mode {mode:03o}{', ' + extra.strip() if extra else ''}): started")
            continue
        r = ctx.run_ini(ini)
        check(r.rc not in (0, None) and r.rc > 0, f"{name}: exit status", "a non-zero exit",
              r.rc, r)
        check("kvlaned: ready" not in r.stdout, f"{name}: not started", "no ready", "ready", r)
        rx = re.compile(re.escape(path) + ": " + want, re.M)
        check(rx.search(r.stderr), f"{name}: the message", rx.pattern, kvl_lines(r) or
              r.stderr.splitlines()[-3:], r)
        log(f"{name} (mode {mode:03o}): exit {r.rc}: {rx.search(r.stderr).group(0)}")


def scenario_gpu_segment_refused(ctx):
    """A GPU segment on a GPU this host does not have (here: no GPU at all, or no CUDA in the
    build; on a GPU host: no GPU 63): kvlaned refuses to start and names the segment and why."""
    ini = ctx.ini("gseg.ini", minimal_ini("gseg1", extra="[segment.kv]\nblocks = 4\n"
                                          "block_bytes = 4096\nmemory = gpu\ngpu = 63\n"))
    r = ctx.run_ini(ini)
    expect_rc(r, 4, "[segment.kv] memory = gpu, gpu = 63")
    expect_kvl_message(r, r"segment\.kv\.memory = gpu: GPU segment \"kv\" cannot be placed on "
                       r"GPU 63: (no usable CUDA device on this host|this kvlane was built "
                       r"without CUDA|GPU 63 does not exist: this host has \d+ CUDA device)",
                       "GPU segment on a missing GPU")
    check("kvlaned: ready" not in r.stdout, "GPU segment: not started", "no ready", "ready", r)
    log("[segment.kv] memory = gpu on a missing GPU: exit 4, the segment and the cause")

def doctor_exe():
    build = os.environ.get("KVL_BUILD") or os.path.join(KVL_SRC, "build")
    return os.path.join(build, "kvlane-doctor")


def scenario_doctor(ctx):
    """kvlaned --doctor refuses to start on a FAIL, naming it with its fix, before EAL; starts
    when there is none. kvlane-doctor itself: --json, exit status, this host (no RDMA)."""
    bad = ["--sysfs-root", os.path.join(KVL_FIXTURES, "sysfs", "doctor-bad"), "--doctor"]
    ini = os.path.join(KVL_FIXTURES, "doctor", "bad.ini")
    r = ctx.run_ini(ini, lcores=["-l", "0,4-5"], kvl_extra=bad)
    expect_rc(r, 4, "--doctor on doctor-bad")
    expect_no_runtime_dir(r, "--doctor on doctor-bad")
    for pat in (r"^kvlaned: --doctor: FAIL port_state nic\.rail0 \(mlx5_0\): port 1 state DOWN, "
                r"physical state Disabled; fix: .*ip link set dev ens1f0 up",
                r"^kvlaned: --doctor: FAIL gid nic\.rail0 \(mlx5_0\): no RoCE v2 GID",
                r"^kvlaned: --doctor: FAIL hugepages host: .*fix: .*echo 512 >",
                r"^kvlaned: --doctor found \d+ FAILs: not started$"):
        expect_kvl_message(r, pat, "--doctor refusal")
    check("WARN  mtu           nic.rail0 (mlx5_0)" in r.stdout, "the WARN lines are printed too",
          "the mtu WARN on stdout", r.stdout[-600:], r)
    check("nic.rail1" not in " ".join(ln for ln in kvl_lines(r) if "FAIL port_state" in ln),
          "a fine port is not refused", "no port_state FAIL for rail1", kvl_lines(r), r)
    log("--doctor on doctor-bad: exit 4 before EAL, port_state/gid/hugepages FAILs with fixes")

    good = ctx.ini("good.ini", minimal_ini("doctor", nics={"r0": "device = mlx5_0\n"}))
    d = ctx.start(good, kvl_extra=["--sysfs-root",
                                   os.path.join(KVL_FIXTURES, "sysfs", "doctor-good"), "--doctor"])
    d.wait_ready()
    d.stop(signal.SIGTERM)
    out = "\n".join(d.out)
    check(re.search(r"kvlane-doctor: \d+ pass, 0 warn, 0 fail", out) is not None,
          "--doctor with nothing wrong", "0 warn, 0 fail, then ready", out[-600:], d)
    log("--doctor on doctor-good: no FAIL, kvlaned starts and stops cleanly")

    exe = doctor_exe()
    r = h.Run([exe, "-c", ini, "--sysfs-root", os.path.join(KVL_FIXTURES, "sysfs", "doctor-bad"),
               "--proc-root", os.path.join(KVL_FIXTURES, "proc", "doctor-bad"), "-l", "0,4-7",
               "--json", "--no-gpu"], ctx.rundir(), RUN_TIMEOUT_S)
    expect_rc(r, 2, "kvlane-doctor --json on doctor-bad")
    j = json.loads(r.stdout)
    rows = {(c["check"], c["subject"]): c for c in j["checks"]}
    check_eq(rows[("mtu", "nic.rail0 (mlx5_0)")]["verdict"], "WARN", "mtu 1024 vs 4096", r)
    check_eq(rows[("memlock", "host")]["verdict"], "FAIL", "memlock 64 KiB", r)
    check_eq((j["summary"]["fail"], j["exit"]), (4, 2), "summary fail count and exit", r)
    r = h.Run([exe], ctx.rundir(), RUN_TIMEOUT_S)
    if os.path.isdir("/sys/class/infiniband") and os.listdir("/sys/class/infiniband"):
        log("this host has RDMA devices: the no-RDMA case is covered by the unit test")
    else:
        expect_rc(r, 2, "kvlane-doctor on this host (no RDMA device)")
        check("FAIL  rdma_devices  host" in r.stdout and "rdma_rxe" in r.stdout,
              "no RDMA here: a FAIL naming rdma_rxe", "FAIL rdma_devices ... rdma_rxe",
              r.stdout[:800], r)
        log("kvlane-doctor on this host: exit 2, rdma_devices FAIL with the modprobe fix")
    r = h.Run([exe, "--help"], ctx.rundir(), RUN_TIMEOUT_S)
    expect_rc(r, 0, "kvlane-doctor --help")
    check("Exit status: 0" in r.stdout, "--help", "the exit statuses", r.stdout[-300:], r)


SCENARIOS = {
    "cli": scenario_cli,
    "config_errors": scenario_config_errors,
    "print_config": scenario_print_config,
    "telemetry": scenario_telemetry,
    "stock_client": scenario_stock_client,
    "signals": scenario_signals,
    "side_by_side": scenario_side_by_side,
    "no_telemetry": scenario_no_telemetry,
    "numa_fixture": scenario_numa_fixture,
    "eal_errors": scenario_eal_errors,
    "gpu_pair": scenario_gpu_pair,
    "secret_policy": scenario_secret_policy,
    "gpu_segment_refused": scenario_gpu_segment_refused,
    "doctor": scenario_doctor,
}


def main(argv):
    return h.main(argv, SCENARIOS, SCENARIO_LIMIT_S, ["PATH-TO-KVLANED"], Ctx)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
