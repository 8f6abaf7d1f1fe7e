#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""Runs kvlane-sim-bench against a kvlaned on TCP loopback that serves a pattern KV segment.

Usage: sim_bench.py PATH-TO-KVLANED PATH-TO-KVLANE-SIM-BENCH [--layers L] [--requests R]
       [--tokens T] [--ready-ahead N] [BENCH-OPTION...]
The segment is Llama-3-8B-shaped per layer (K and V apart, 16-token blocks of 8 KV heads x 128
dims x 16 bits = 32 KiB) with L layers and R x T tokens, one slice per request. Everything
after the known options goes to kvlane-sim-bench (--rounds, --q-per-kv, --vram-steps, ...).
Exit status: the bench's (0: every step verified, the budget held), or 1 if a process failed.
"""
import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

SRC = os.environ.get("KVL_SRC") or os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EAL = ["--no-huge", "--no-pci"]
BLOCK_TOKENS = 16

CLIENT_INI = """[runtime]
name = sim-bench
idle_policy = yield
[nic.lo]
device = lo
transport = tcp
[memory]
pool_size_mb = 64
chunk_size_kb = 2048
[sched]
staging_mb = {staging_mb}
budget_mb = {budget_mb}
slot_kb = 32
window_min_kb = 256
window_max_mb = {window_max_mb}
ready_ahead = {ready_ahead}
[control]
listen = 127.0.0.1:0
secret_file = {secret}
"""


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("kvlaned")
    ap.add_argument("bench")
    ap.add_argument("--layers", type=int, default=16)
    ap.add_argument("--requests", type=int, default=4)
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--ready-ahead", type=int, default=0,
                    help="[sched] ready_ahead of the bench (1 with --lockstep 1: see "
                         "docs/sim-bench.md)")
    args, rest = ap.parse_known_args()

    blocks = args.requests * args.tokens // BLOCK_TOKENS
    req_mb = -(-args.layers * 2 * (args.tokens // BLOCK_TOKENS) * 32 // 1024)
    budget_mb = args.requests * req_mb  # fetch-all holds every request whole at once
    seg_mb = args.layers * 2 * blocks * 32 // 1024
    tmp = tempfile.mkdtemp(prefix="kvl-sim-")
    procs = []
    try:
        env = dict(os.environ, RUNTIME_DIRECTORY=tmp)
        srv_argv = [args.kvlaned, "-l", "0-1", *EAL, "-m", str(seg_mb + 192),
                    "--file-prefix", f"simsrv{os.getpid()}", "--",
                    "-c", os.path.join(SRC, "config", "default.ini"),
                    "--set", "control.listen=127.0.0.1:0",
                    "--set", f"segment.kv.layers={args.layers}",
                    "--set", f"segment.kv.blocks={blocks}"]
        print("server:", " ".join(srv_argv), flush=True)
        srv = subprocess.Popen(srv_argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               env=env, text=True, errors="replace")
        procs.append(srv)
        addr, lines = None, []
        deadline = time.monotonic() + 60
        for line in srv.stdout:
            lines.append(line)
            m = re.search(r"control: listening on (\S+) ", line)
            if m:
                addr = m[1]
            if re.search(r"^kvlaned: ready$", line.rstrip("\n")) or time.monotonic() > deadline:
                break
        if addr is None or srv.poll() is not None:
            sys.stderr.write("kvlaned did not start:\n" + "".join(lines))
            return 1
        threading.Thread(target=lambda: [None for _ in srv.stdout], daemon=True).start()

        ini = os.path.join(tmp, "client.ini")
        with open(ini, "w") as f:
            f.write(CLIENT_INI.format(staging_mb=budget_mb + 8, budget_mb=budget_mb,
                                      window_max_mb=req_mb, ready_ahead=args.ready_ahead,
                                      secret=os.path.join(SRC, "config", "demo.secret")))
        cli_argv = [args.bench, "-l", "0-1", *EAL, "-m", str(budget_mb + 384),
                    "--file-prefix", f"simcli{os.getpid()}", "--", "-c", ini, "--peer", addr,
                    "--requests", str(args.requests), "--tokens", str(args.tokens),
                    "--layers", str(args.layers), *rest]
        print("client:", " ".join(cli_argv), flush=True)
        cli = subprocess.Popen(cli_argv, env=env)
        procs.append(cli)
        rc = cli.wait(timeout=600)
        srv.send_signal(signal.SIGINT)
        srv.wait(timeout=15)
        return rc
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
