#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""Python post/poll throughput against the C API's, the same run (issue 17's target: >= 0.5x
at 64 KiB): a kvlane-perf server on loopback; READs of --size bytes, --depth in flight.
 1. The figure: one client process, one runtime, one connection, the binding's post/poll loop
    and the same loop in C (_kvlane's c_read_loop, kvl_post/kvl_poll) alternated in short
    rounds, the order swapped every round; the ratio is the median of the rounds' ratios
    (quartiles beside it). Both halves of a round see the same load, so the ratio holds on a
    loaded host where absolute rates wander.
 2. The cross-check: kvlane-perf (a C program) and the Python client, each its own process,
    alternated --rounds times, per-round ratios as above.

usage: py_post_bench.py KVLANE_PERF [--size 65536] [--iters 20000] [--depth 64] [--rounds 5]
       [--inproc-rounds 15] [--inproc-iters 4000]
(PYTHONPATH must reach build/python; KVL_SRC the source tree.)
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

SRC = os.environ.get("KVL_SRC") or os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
INI = os.path.join(SRC, "config", "default.ini")
EAL = ["--lcores", "0@(0-1),1@(0-1)", "--no-huge", "-m", "256", "--no-pci"]


def py_loop(rt, peer, seg, local, span, a, iters):
    """The binding's side: same work as kvlane-perf --read --bw (window, wrap at span)."""
    import kvlane
    Xfer, READ, post, poll = kvlane.Xfer, kvlane.Op.KVL_READ, rt.post, rt.poll
    yield_ = os.sched_yield
    n_posted = n_done = bad = 0
    in_calls = 0.0  # seconds inside post() and poll() calls that took or gave something
    clock = time.perf_counter
    off = 0
    t0 = time.perf_counter()
    while n_done < iters:
        want = min(a.depth - (n_posted - n_done), iters - n_posted)
        if want > 0:
            xs = []
            for _ in range(want):
                xs.append(Xfer(n_posted + len(xs), local.base + off, off, a.size, seg.id, READ))
                off = off + a.size if off + 2 * a.size <= span else 0
            c0 = clock()
            n_posted += post(peer, xs)
            in_calls += clock() - c0
        c0 = clock()
        got = poll(64)
        if got:
            in_calls += clock() - c0
        if not got:
            yield_()  # as kvlane-perf --nap 0 does on an empty poll
        for c in got:
            n_done += 1
            bad += c.status != 0
    dt = time.perf_counter() - t0
    return iters * a.size / dt / (1 << 20), in_calls / iters * 1e6, bad


def client(a):
    """One process, one runtime, one connection: --inproc alternates the Python loop and the
    same loop in C (_kvlane's c_read_loop: kvl_post/kvl_poll) --rounds times, each round's
    order swapped; else the Python loop once (against kvlane-perf in its own process)."""
    import kvlane
    with kvlane.Runtime(config=INI, sets=["control.listen=127.0.0.1:0",
                                          "runtime.name=py-bench", "telemetry.enable=false"],
                        eal=EAL + ["--file-prefix", "pyb%d" % os.getpid()]) as rt:
        peer = rt.connect(a.server)
        seg = [s for s in rt.peer_segments(peer) if s.name == "perf"][0]
        span = min(seg.length, 64 << 20) // a.size * a.size
        local = rt.alloc_segment("py-bench", (1, 1, span // a.size, a.size), 0)
        if not a.inproc:
            mb, us, bad = py_loop(rt, peer, seg, local, span, a, a.iters)
            print(json.dumps({"bytes": a.size, "iters": a.iters, "bad": bad, "mb_s": mb,
                              "us_per_xfer_in_calls": us}))
            return
        rows = []
        for r in range(a.rounds + 1):  # round 0 warms both up and is not counted
            order = ("py", "c") if r % 2 == 0 else ("c", "py")
            got = {}
            for who in order:
                if who == "py":
                    mb, us, bad = py_loop(rt, peer, seg, local, span, a, a.iters)
                    got["py"], got["us"] = mb, us
                else:
                    secs, bad, c_calls = rt._h.c_read_loop(peer, seg.id, local.base, span,
                                                           a.size, a.iters, a.depth)
                    got["c"] = a.iters * a.size / secs / (1 << 20)
                    got["c_us"] = c_calls / a.iters * 1e6
                if bad:
                    sys.exit("%s loop: %d transfers failed" % (who, bad))
            if r:
                rows.append(got)
                print("in-process round %d (%s first): C %.0f MB/s, Python %.0f MB/s, ratio "
                      "%.2f; us per transfer inside post+poll: C %.2f, Python %.2f"
                      % (r, "Python" if order[0] == "py" else "C", got["c"], got["py"],
                         got["py"] / got["c"], got["c_us"], got["us"]), flush=True)
        print(json.dumps({"rows": rows}))


def perf_c(a, perf, server, rundir):
    env = dict(os.environ, RUNTIME_DIRECTORY=rundir)
    p = subprocess.run([perf, *EAL, "--file-prefix", "pbc%d" % time.monotonic_ns(), "--", "-c",
                        INI, "--set", "telemetry.enable=false", "--read", "--bw", "-s",
                        str(a.size), "-n", str(a.iters), "-t", str(a.depth), "--nap", "0",
                        "--json", server],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                       timeout=300)
    if p.returncode != 0:
        sys.exit("kvlane-perf client failed:\n" + p.stderr[-2000:])
    return json.loads(p.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("perf", nargs="?")
    ap.add_argument("--client", action="store_true")
    ap.add_argument("--server")
    ap.add_argument("--size", type=int, default=65536)
    ap.add_argument("--iters", type=int, default=20000)
    ap.add_argument("--depth", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--inproc", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--inproc-rounds", type=int, default=15,
                    help="rounds of the in-process side by side (default %(default)s)")
    ap.add_argument("--inproc-iters", type=int, default=4000)
    a = ap.parse_args()
    if a.client:
        return client(a)
    with tempfile.TemporaryDirectory(prefix="kvl-pyb-") as tmp:
        env = dict(os.environ, RUNTIME_DIRECTORY=tmp)
        srv = subprocess.Popen([a.perf, *EAL, "--file-prefix", "pbs%d" % os.getpid(), "--",
                                "-c", INI, "--set", "control.listen=127.0.0.1:0", "--set",
                                "telemetry.enable=false"],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               env=env)
        try:
            for line in srv.stdout:
                m = re.search(r"listening on (\S+),", line)
                if m:
                    server = m.group(1)
                    break
            else:
                sys.exit("kvlane-perf server did not start")
            # 1. side by side in one process: the Python loop and the same loop in C on one
            # runtime and one connection, alternated in short rounds: the clean ratio
            p = subprocess.run([sys.executable, __file__, "--client", "--inproc", "--server",
                                server, "--size", str(a.size), "--iters", str(a.inproc_iters),
                                "--depth", str(a.depth), "--rounds", str(a.inproc_rounds)],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env=env, timeout=600)
            if p.returncode != 0:
                sys.exit("in-process client failed:\n" + p.stderr[-2000:])
            lines = p.stdout.strip().splitlines()
            print("\n".join(lines[:-1]))
            rows = json.loads(lines[-1])["rows"]
            ir = sorted(r["py"] / r["c"] for r in rows)
            print("in-process: size=%d depth=%d iters=%d rounds=%d C_median_mb_s=%.0f "
                  "python_median_mb_s=%.0f ratio=%.2f ratio_q1=%.2f ratio_q3=%.2f "
                  "c_us_per_xfer_in_calls=%.2f python_us_per_xfer_in_calls=%.2f"
                  % (a.size, a.depth, a.inproc_iters, len(rows),
                     statistics.median(r["c"] for r in rows),
                     statistics.median(r["py"] for r in rows), statistics.median(ir),
                     ir[len(ir) // 4], ir[(3 * len(ir)) // 4],
                     statistics.median(r["c_us"] for r in rows),
                     statistics.median(r["us"] for r in rows)), flush=True)
            # 2. the cross-check: kvlane-perf (a C program, its own process) against the
            # Python client, alternated
            c_mb, py_mb, py_us, ratios = [], [], [], []

            def run_py():
                p = subprocess.run([sys.executable, __file__, "--client", "--server", server,
                                    "--size", str(a.size), "--iters", str(a.iters), "--depth",
                                    str(a.depth)], stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, text=True, env=env, timeout=300)
                if p.returncode != 0:
                    sys.exit("python client failed:\n" + p.stderr[-2000:])
                pj = json.loads(p.stdout.strip().splitlines()[-1])
                if pj["bad"]:
                    sys.exit("python client: %d transfers failed" % pj["bad"])
                return pj

            for r in range(a.rounds):
                if r % 2 == 0:
                    j, pj = perf_c(a, a.perf, server, tmp), run_py()
                else:
                    pj = run_py()
                    j = perf_c(a, a.perf, server, tmp)
                c_mb.append(j["bw_avg_MBps"])
                py_mb.append(pj["mb_s"])
                py_us.append(pj["us_per_xfer_in_calls"])
                ratios.append(py_mb[-1] / c_mb[-1])
                print("kvlane-perf round %d (%s first): C %.0f MB/s, Python %.0f MB/s, ratio "
                      "%.2f (%.2f us per transfer inside post+poll, Xfer building not counted)"
                      % (r + 1, "C" if r % 2 == 0 else "Python", c_mb[-1], py_mb[-1],
                         ratios[-1], py_us[-1]))
            c, py = statistics.median(c_mb), statistics.median(py_mb)
            rs = sorted(ratios)
            print("kvlane-perf: size=%d depth=%d iters=%d rounds=%d C_median_mb_s=%.0f "
                  "python_median_mb_s=%.0f ratio=%.2f ratio_min=%.2f ratio_max=%.2f "
                  "python_us_per_xfer_in_calls=%.2f"
                  % (a.size, a.depth, a.iters, a.rounds, c, py, statistics.median(ratios),
                     rs[0], rs[-1], statistics.median(py_us)))
        finally:
            srv.terminate()
            srv.wait(10)


if __name__ == "__main__":
    main()
