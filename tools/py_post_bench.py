#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""Python post/poll throughput against the C API's, the same run (issue 17's target: >= 0.5x
at 64 KiB): a kvlane-perf server on loopback; READs of --size bytes, --depth in flight, by
kvlane-perf (C) and by the binding (this file, --client), alternated --rounds times; medians.

usage: py_post_bench.py KVLANE_PERF [--size 65536] [--iters 20000] [--depth 64] [--rounds 3]
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


def client(a):
    """The binding's side: same work as kvlane-perf --read --bw (window, wrap at seg-size)."""
    import kvlane
    with kvlane.Runtime(config=INI, sets=["control.listen=127.0.0.1:0",
                                          "runtime.name=py-bench", "telemetry.enable=false"],
                        eal=EAL + ["--file-prefix", "pyb%d" % os.getpid()]) as rt:
        peer = rt.connect(a.server)
        seg = [s for s in rt.peer_segments(peer) if s.name == "perf"][0]
        span = min(seg.length, 64 << 20) // a.size * a.size
        local = rt.alloc_segment("py-bench", (1, 1, span // a.size, a.size), 0)
        Xfer, READ, post, poll = kvlane.Xfer, kvlane.Op.KVL_READ, rt.post, rt.poll
        yield_ = os.sched_yield
        n_posted = n_done = bad = 0
        in_calls = 0.0  # seconds inside post() and poll() calls that took or gave something
        clock = time.perf_counter
        off = 0
        t0 = time.perf_counter()
        while n_done < a.iters:
            want = min(a.depth - (n_posted - n_done), a.iters - n_posted)
            if want > 0:
                xs = []
                for _ in range(want):
                    xs.append(Xfer(n_posted + len(xs), local.base + off, off, a.size, seg.id,
                                   READ))
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
    print(json.dumps({"bytes": a.size, "iters": a.iters, "bad": bad,
                      "mb_s": a.iters * a.size / dt / (1 << 20),
                      "us_per_xfer_in_calls": in_calls / a.iters * 1e6}))


def perf_c(a, perf, server, rundir):
    env = dict(os.environ, RUNTIME_DIRECTORY=rundir)
    p = subprocess.run([perf, *EAL, "--file-prefix", "pbc%d" % time.monotonic_ns(), "--", "-c",
                        INI, "--set", "telemetry.enable=false", "--read", "--bw", "-s",
                        str(a.size), "-n", str(a.iters), "-t", str(a.depth), "--nap", "0", "--json", server],
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
    ap.add_argument("--rounds", type=int, default=3)
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
            c_mb, py_mb, py_us = [], [], []
            for r in range(a.rounds):
                j = perf_c(a, a.perf, server, tmp)
                c_mb.append(j["bw_avg_MBps"])
                p = subprocess.run([sys.executable, __file__, "--client", "--server", server,
                                    "--size", str(a.size), "--iters", str(a.iters), "--depth",
                                    str(a.depth)], stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, text=True, env=env, timeout=300)
                if p.returncode != 0:
                    sys.exit("python client failed:\n" + p.stderr[-2000:])
                pj = json.loads(p.stdout.strip().splitlines()[-1])
                if pj["bad"]:
                    sys.exit("python client: %d transfers failed" % pj["bad"])
                py_mb.append(pj["mb_s"])
                py_us.append(pj["us_per_xfer_in_calls"])
                print("round %d: C %.0f MB/s, Python %.0f MB/s (%.2f us per transfer inside "
                      "post+poll, Xfer building not counted)"
                      % (r + 1, c_mb[-1], py_mb[-1], py_us[-1]))
            c, py = statistics.median(c_mb), statistics.median(py_mb)
            print("size=%d depth=%d iters=%d C_median_mb_s=%.0f python_median_mb_s=%.0f "
                  "ratio=%.2f python_us_per_xfer_in_calls=%.2f"
                  % (a.size, a.depth, a.iters, c, py, py / c, statistics.median(py_us)))
        finally:
            srv.terminate()
            srv.wait(10)


if __name__ == "__main__":
    main()
