#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""kvlane chaos run: kvlaned peers and API clients on loopback under random faults, then the
invariants that must hold whatever happened (docs/chaos.md).

Processes (each in its own --file-prefix and RUNTIME_DIRECTORY, as the eal tests start them):
  --servers kvlaned on config/default.ini (tcp on lo), each on a fixed control port so that a
  restarted one is found again; one kvlane-req-client per server in --mode chaos (requests
  through the scheduler, every landed byte checked, steps canceled at random, the budget cap
  moved); episodes of kvlane-perf --read --verify and of kvlane-kvdemo against a random
  server.
Faults, from one seeded schedule (the same --seed gives the same schedule): a server SIGKILLed
and restarted, SIGSTOPped then SIGCONTed, its data connections reset (ss -K), hostile
connections (garbage, half frames, wrong proofs, bad binds on the control and data ports);
all the while telemetry is hammered on every socket.
At the end: every request and transfer ended exactly once with a typed status, every byte
reported OK matched, the clients' staging back to 0 (/kvlane/sched through the telemetry
socket), each surviving server's RSS and fds back near their start, no process crashed.
Exit 0 when every invariant held, 1 otherwise, 2 on a bad command line.
"""
import argparse
import errno
import json
import os
import random
import re
import secrets
import signal
import socket
import struct
import subprocess
import sys
import threading
import time

KVL_SRC = os.environ.get("KVL_SRC") or os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(KVL_SRC, "tests", "eal"))
import kvl_harness as h  # noqa: E402  (processes, telemetry)
import test_peers as tp  # noqa: E402  (the control protocol written out)
import test_sched as tsched  # noqa: E402  (the request client's INI)
import kvlane_telemetry as kt  # noqa: E402  (tools/, put on the path by kvl_harness)

LONG_DEFAULT_S = 1800
EAL_LOG = ["--log-level", "lib.eal:warning"]
SERVER_SETS = ["segment.kv.blocks=32"]  # 64 MiB: room for 4 requests x 4 blocks + 1
SERVER_MEM_MB = 384
CLIENT_MEM_MB = 256
READY_S = 60             # a (re)started kvlaned until ready, on a loaded host
CLIENT_END_S = 90        # the req client's last round: it declares never_ended after 30 s
EPISODE_S = 3            # kvlane-perf --duration per episode
EPISODE_LIMIT_S = 90     # one perf / kvdemo episode, start-up included
DRAIN_S = 15             # staging, fds and RSS settling after the clients stop
RSS_SLACK = 16 << 20     # RSS "near its start": + max(16 MiB, 10 %)
FD_SLACK = 2
LOST = ("conn-lost", "peer-dead", "no-peer")  # what a fault may do to a transfer
TELEMETRY_CMDS = ["/kvlane/info", "/kvlane/config", "/kvlane/lcores", "/kvlane/nics",
                  "/kvlane/peers", "/kvlane/stats", "/kvlane/sched", "/kvlane/requests",
                  "/kvlane/qps", "/kvlane/gpu", "/help", "/info", "/kvlane/nosuch",
                  "/kvlane/peers,99", "/kvlane/stats,x", "/", "/kvlane/requests,-1"]
HOSTILE = ["ctl_garbage", "ctl_half_frame", "ctl_bad_header", "ctl_wrong_proof",
           "data_garbage", "data_half_bind", "data_bad_bind"]
# Each invariant, and the kind its failures are filed under.
INVARIANTS = [
    ("requests", "every request ended exactly once, with a typed status"),
    ("perf", "every perf transfer completed exactly once, with a typed status"),
    ("bytes", "every byte reported OK matched (--verify, the clients' checks)"),
    ("kvdemo", "every kvdemo run verified, or failed with a typed status"),
    ("staging", "no staging slot or block leaked (/kvlane/sched in_use, active, waiting 0)"),
    ("rss_fds", "each kvlaned's RSS and fds back near their start"),
    ("crash", "no process crashed or hung, no kvlaned died by itself"),
    ("other", "the run itself completed"),
]
FAULT_WEIGHTS = [("kill", 2), ("stop", 3), ("reset", 3), ("hostile", 4)]


def now():
    return time.monotonic()


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def rss_fds(pid):
    """(RSS bytes, open fds) of @pid, or None when it is gone."""
    try:
        with open(f"/proc/{pid}/statm") as f:
            rss = int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
        return rss, len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return None


def exit_desc(rc):
    return f"signal {signal.Signals(-rc).name}" if rc is not None and rc < 0 else f"exit {rc}"


class Stats:
    """Everything counted, under one lock (threads add to it)."""

    def __init__(self):
        self.lock = threading.Lock()
        self.faults = {}         # kind -> injected
        self.skipped = {}        # kind -> not possible at that moment (why in notes)
        self.notes = []
        self.failures = []       # invariant violations, as sentences
        self.perf = {"episodes": 0, "posted": 0, "completed": 0, "verified_bytes": 0,
                     "status": {}, "connect_refused": 0, "exits": {}}
        self.kvdemo = {"episodes": 0, "verified": 0, "status": {}, "connect_refused": 0,
                       "exits": {}}
        self.telemetry = {"commands": 0, "replies": 0, "errors": 0}

    def add(self, d, key, n=1):
        with self.lock:
            d[key] = d.get(key, 0) + n

    def fault(self, kind, n=1):
        self.add(self.faults, kind, n)

    def fail(self, cat, msg):
        """A violated invariant of kind @cat (one of INVARIANTS)."""
        with self.lock:
            self.failures.append((cat, msg))
        print(f"  INVARIANT FAILED: {msg}", flush=True)


class Server:
    """A kvlaned on a fixed control port; restarted in a fresh prefix after a kill."""

    def __init__(self, run, i):
        self.run, self.i, self.port = run, i, free_port()
        self.addr = f"127.0.0.1:{self.port}"
        self.proc, self.killed_by_us, self.stopped = None, False, False
        self.starts, self.history = 0, []  # history: (tag, exit description) of each end
        self.base = None
        self.data_port = None
        self.lock = threading.Lock()

    def start(self):
        ctx = self.run.ctx
        prefix = ctx.unique(f"srv{self.i}_")
        argv = [self.run.a.kvlaned, *h.EAL, "-m", str(SERVER_MEM_MB), "--file-prefix", prefix,
                *EAL_LOG, "--", "-c", h.DEFAULT_INI,
                *h.sets(f"control.listen={self.addr}", f"runtime.name=chaos-srv{self.i}",
                        *SERVER_SETS)]
        p = h.Proc(ctx, argv, ctx.rundir(prefix), prefix, f"kvlaned srv{self.i}",
                   new_session=True)
        p.wait_line(h.READY_RE, READY_S, what=f"kvlaned srv{self.i}: start-up")
        self.proc, self.killed_by_us, self.stopped = p, False, False
        self.starts += 1
        ports = [x for x in tp.listening_ports(p.pid) if x != self.port]
        self.data_port = ports[0] if len(ports) == 1 else None
        self.base = rss_fds(p.pid)

    def alive(self):
        return self.proc is not None and self.proc.running()

    def reap(self):
        """Its exit recorded; a death we did not cause is a failure."""
        rc = self.proc.proc.poll()
        if rc is None:
            return False
        self.history.append((self.proc.tag, exit_desc(rc)))
        if not self.killed_by_us:
            self.run.stats.fail("crash", f"kvlaned srv{self.i} (pid {self.proc.pid}) died by itself: "
                                f"{exit_desc(rc)}; stderr tail: "
                                f"{self.proc.stderr[-600:]!r}")
        return True


class ReqClient(h.Proc):
    """kvlane-req-client --mode chaos against one server."""

    def __init__(self, run, srv):
        ctx = run.ctx
        ini = os.path.join(ctx.tmp, f"req{srv.i}.ini")
        with open(ini, "w") as f:
            f.write(tsched.CLIENT_INI.format(
                secret=os.path.join(KVL_SRC, "config", "demo.secret"), sched_extra=""))
        prefix = ctx.unique(f"req{srv.i}_")
        argv = [run.a.req_client, *h.EAL, "-m", str(CLIENT_MEM_MB), "--file-prefix", prefix,
                *EAL_LOG, "--", "-c", ini, "--peer", srv.addr, "--mode", "chaos",
                "--requests", "4", "--steps", "8", "--blocks", "4",
                "--chaos-seed", str(run.a.seed * 7 + srv.i), "--duration", str(run.a.duration),
                "--cancel-pct", "8", "--cap-ms", "400"]
        super().__init__(ctx, argv, ctx.rundir(prefix), prefix, f"kvlane-req-client {srv.i}",
                         stdin=subprocess.PIPE, new_session=True)
        self.srv = srv

    def last(self, tag):
        with self.cond:
            for line in reversed(self.out):
                if line.startswith(tag + " "):
                    return json.loads(line[len(tag) + 1:])
        return None


class Chaos:
    def __init__(self, a):
        self.a = a
        self.ctx = h.Ctx("run", a.kvlaned, "chaos")
        self.stats = Stats()
        self.rng = random.Random(a.seed)
        self.stop = threading.Event()
        self.faults_over = threading.Event()
        self.servers = []
        self.clients = []
        self.t0 = now()
        self.result = {}

    def log(self, msg):
        print(f"[{now() - self.t0:7.1f} s] {msg}", flush=True)

    # ---- faults ----

    def schedule(self):
        """The whole fault schedule from the seed alone: (time, kind, server, parameter)."""
        out, t = [], 3.0
        kinds = [k for k, w in FAULT_WEIGHTS for _ in range(w) if k in self.a.faults]
        while t < self.a.duration - 8:
            kind = self.rng.choice(kinds)
            srv = self.rng.randrange(self.a.servers)
            if kind == "kill":
                param = round(self.rng.uniform(0.2, 2.0), 2)  # down for
            elif kind == "stop":
                # mostly below the 5 s peer timeout; sometimes past it (peers declared dead)
                param = round(self.rng.choice([self.rng.uniform(0.2, 2.5),
                                               self.rng.uniform(0.2, 2.5),
                                               self.rng.uniform(5.5, 7.0)]), 2)
            elif kind == "hostile":
                param = self.rng.choice(HOSTILE)
            else:
                param = None
            out.append((round(t, 2), kind, srv, param))
            t += self.rng.uniform(0.8, 3.0)
        return out

    def inject(self, kind, srv, param):
        if not srv.alive():
            self.stats.add(self.stats.skipped, kind)
            return
        pid = srv.proc.pid
        if kind == "kill":
            with srv.lock:
                srv.killed_by_us = True
                os.kill(pid, signal.SIGKILL)
                srv.proc.wait_exit(10)
                srv.reap()
            self.stats.fault("kill")
            self.log(f"fault: SIGKILL srv{srv.i} (pid {pid}); restart in {param} s")
            time.sleep(param)
            srv.start()
            self.stats.fault("restart")
            self.log(f"srv{srv.i} restarted (pid {srv.proc.pid}), start {srv.starts}")
        elif kind == "stop":
            os.kill(pid, signal.SIGSTOP)
            srv.stopped = True
            self.stats.fault("stop")
            self.log(f"fault: SIGSTOP srv{srv.i} for {param} s")
            time.sleep(param)
            os.kill(pid, signal.SIGCONT)
            srv.stopped = False
        elif kind == "reset":
            if srv.data_port is None:
                self.stats.add(self.stats.skipped, kind)
                return
            r = subprocess.run(["ss", "-K", "-tn", "state", "established",
                                f"( sport = :{srv.data_port} )"],
                               capture_output=True, text=True, timeout=10)
            n = sum(1 for line in r.stdout.splitlines()
                    if re.search(rf":{srv.data_port}\s", line))
            if r.returncode != 0:
                self.stats.add(self.stats.skipped, kind)
                self.stats.notes.append(f"ss -K failed: {r.stderr.strip()[:200]}")
                return
            self.stats.fault("reset")
            self.stats.fault("reset_sockets", n)
            self.log(f"fault: ss -K on srv{srv.i}'s data port {srv.data_port}: {n} reset")
        elif kind == "hostile":
            self.hostile(srv, param)
            self.stats.fault("hostile")
            self.stats.fault(f"hostile:{param}")

    def hostile(self, srv, what):
        """One hostile connection; what the server answers is not checked here (test_peers
        does), only that it survives it and everything else goes on."""
        port = srv.data_port if what.startswith("data") else srv.port
        if port is None:
            return
        try:
            s = socket.create_connection(("127.0.0.1", port), timeout=3)
            s.settimeout(3)
            if what == "ctl_garbage" or what == "data_garbage":
                s.sendall(secrets.token_bytes(self.rng.randrange(1, 4096)))
            elif what == "ctl_half_frame":
                s.sendall(tp.frame(tp.HELLO, secrets.token_bytes(80))[:7])
                time.sleep(0.5)
            elif what == "ctl_bad_header":
                s.sendall(tp.HDR.pack(tp.MAGIC, tp.VERSION, tp.HELLO, 0xFFFFFFF0, 0))
            elif what == "ctl_wrong_proof":
                nonce = secrets.token_bytes(tp.NONCE_LEN)
                s.sendall(tp.frame(tp.HELLO, tp.hello_payload("chaos-hostile", nonce)))
                buf = b""
                while True:
                    chunk = s.recv(65536)
                    if not chunk:
                        break
                    buf += chunk
                    frames, _ = tp.parse_frames(buf)
                    if frames:
                        break
                s.sendall(tp.frame(tp.AUTH, secrets.token_bytes(tp.MAC_LEN)))
                s.recv(65536)
            elif what == "data_half_bind":
                s.sendall(tp.bind_frame(0, 0, 1, b"\0" * tp.MAC_LEN)[:10])
                time.sleep(0.5)
            elif what == "data_bad_bind":
                s.sendall(tp.bind_frame(int.from_bytes(secrets.token_bytes(8), "little"), 0,
                                        1, secrets.token_bytes(tp.MAC_LEN)))
                s.recv(65536)
            s.close()
        except (OSError, socket.timeout, h.Fail):
            pass  # refused, reset or closed on us: what a hostile client should get

    def fault_loop(self):
        sched = self.schedule()
        self.result["schedule"] = sched
        kinds = {}
        for _, kind, _, _ in sched:
            kinds[kind] = kinds.get(kind, 0) + 1
        self.log(f"fault schedule: {len(sched)} faults {kinds} (seed {self.a.seed})")
        for t, kind, si, param in sched:
            while not self.stop.is_set() and now() - self.t0 < t:
                time.sleep(0.05)
            if self.stop.is_set():
                break
            try:
                self.inject(kind, self.servers[si], param)
            except h.Fail as e:
                self.stats.fail("crash", f"srv{si} did not come back after a {kind}: {e}")
        self.faults_over.set()

    # ---- load ----

    def watch_loop(self):
        """A server that died by itself: recorded as a failure, and started again."""
        while not self.stop.is_set():
            for srv in self.servers:
                with srv.lock:
                    if srv.proc is not None and not srv.killed_by_us and srv.reap():
                        try:
                            srv.start()
                        except h.Fail as e:
                            self.stats.fail("crash", f"srv{srv.i} could not be restarted: {e}")
            time.sleep(0.2)

    def telemetry_loop(self):
        """Many commands on every telemetry socket, reconnecting when one goes away."""
        conns = {}
        i = 0
        while not self.stop.is_set():
            targets = [s.proc for s in self.servers if s.alive() and not s.stopped]
            targets += [c for c in self.clients if c.running()]
            if not targets:
                time.sleep(0.1)
                continue
            p = targets[i % len(targets)]
            i += 1
            c = conns.get(p.pid)
            try:
                if c is None:
                    c = kt.TelemetryClient(timeout=2.0)
                    c.connect(p.socket_path, wait=0.5)
                    conns[p.pid] = c
                for cmd in TELEMETRY_CMDS:
                    self.stats.add(self.stats.telemetry, "commands")
                    c.command(cmd)
                    self.stats.add(self.stats.telemetry, "replies")
            except (kt.TelemetryError, OSError):
                self.stats.add(self.stats.telemetry, "errors")
                if c is not None:
                    c.close()
                conns.pop(p.pid, None)
            time.sleep(0.01)
        for c in conns.values():
            c.close()

    def episode_argv(self, exe, tag, mem, args):
        prefix = self.ctx.unique(tag)
        argv = [exe, *h.EAL, "-m", str(mem), "--file-prefix", prefix, *EAL_LOG, "--",
                "-c", h.DEFAULT_INI, *h.sets(h.LISTEN_ANY, f"runtime.name=chaos-{tag}"),
                *args]
        return argv, self.ctx.rundir(prefix)

    def perf_episode(self, srv):
        """kvlane-perf --read --verify for EPISODE_S s: every posted transfer must complete
        once (posted = sum of its statuses), failures only as a lost peer, no bad byte."""
        st = self.stats.perf
        argv, rundir = self.episode_argv(
            self.a.perf, "perf", CLIENT_MEM_MB,
            ["--read", "--verify", "--json", "--duration", str(EPISODE_S), "--segment", "kv",
             "--seed", "1", "--seg-size", "8M", "-s", "64K", "-t", "16", srv.addr])
        r = h.Run(argv, rundir, EPISODE_LIMIT_S)
        self.stats.add(st, "episodes")
        self.stats.add(st["exits"], exit_desc(r.rc))
        what = f"kvlane-perf episode against srv{srv.i}"
        if r.timed_out or r.rc < 0 or r.rc not in (0, 1):
            self.stats.fail("crash", f"{what}: {exit_desc(r.rc)}"
                            f"{' (killed at the limit)' if r.timed_out else ''}\n"
                            + r.describe()[-2000:])
            return
        rows = [json.loads(x) for x in r.stdout.splitlines() if x.startswith("{")]
        if not rows:
            if r.rc == 1 and re.search(r"kvlane-perf: (cannot connect to|\S+: cannot list its "
                                       r"segments)", r.stderr):
                self.stats.add(st, "connect_refused")
            else:
                self.stats.fail("perf", f"{what}: no JSON result\n" + r.describe()[-2000:])
            return
        for row in rows:
            for s in row["servers"]:
                done = sum(s["status"].values())
                self.stats.add(st, "posted", s["posted"])
                self.stats.add(st, "completed", done)
                for k, n in s["status"].items():
                    self.stats.add(st["status"], k, n)
                if done != s["posted"]:
                    self.stats.fail("perf", f"{what}: {s['posted']} transfers posted, {done} "
                                    "completed")
                bad = {k: n for k, n in s["status"].items() if k != "ok" and k not in LOST}
                if bad:
                    self.stats.fail("perf", f"{what}: completions with statuses a fault cannot "
                                    f"explain: {bad}")
            self.stats.add(st, "verified_bytes", row["verified_bytes"])
            if row["verify_error"] is not None:
                self.stats.fail("bytes", f"{what}: verification failed: {row['verify_error']}")
            if row["result"] != "ok" and not any(s["dead"] for s in row["servers"]):
                self.stats.fail("perf", f"{what}: result {row['result']} with no server lost\n"
                                + r.describe()[-2000:])

    def kvdemo_episode(self, srv):
        """kvlane-kvdemo, 2 requests: every byte verified, or a typed failure."""
        st = self.stats.kvdemo
        argv, rundir = self.episode_argv(self.a.kvdemo, "kvdemo", SERVER_MEM_MB,
                                         ["--requests", "2", srv.addr])
        r = h.Run(argv, rundir, EPISODE_LIMIT_S)
        self.stats.add(st, "episodes")
        self.stats.add(st["exits"], exit_desc(r.rc))
        what = f"kvlane-kvdemo episode against srv{srv.i}"
        out = r.stdout + "\n" + r.stderr
        if r.timed_out or r.rc < 0 or r.rc not in (0, 1):
            self.stats.fail("crash", f"{what}: {exit_desc(r.rc)}\n" + r.describe()[-2000:])
        elif "MISMATCH" in out:
            self.stats.fail("bytes", f"{what}: a byte differs\n" + r.describe()[-2000:])
        elif "giving up" in out:
            self.stats.fail("kvdemo", f"{what}: transfers never completed\n" + r.describe()[-2000:])
        elif r.rc == 0:
            if "verified: every byte" not in out:
                self.stats.fail("kvdemo", f"{what}: exit 0 without 'verified: every byte'")
            else:
                self.stats.add(st, "verified")
        else:
            m = re.search(r"failed: ([a-z-]+) \(", out)
            if m:
                self.stats.add(st["status"], m[1])
                if m[1] not in LOST:
                    self.stats.fail("kvdemo", f"{what}: a READ failed with {m[1]}, which no fault "
                                    "explains\n" + r.describe()[-2000:])
            elif "cannot post READs: Transport endpoint is not connected" in out:
                self.stats.add(st["status"], "post refused: ENOTCONN")  # nothing posted
            elif re.search(r"cannot connect|cannot list", out):
                self.stats.add(st, "connect_refused")
            else:
                self.stats.fail("kvdemo", f"{what}: exit 1 without a typed reason\n"
                                + r.describe()[-2000:])

    def episode_loop(self, kind, rng):
        while not self.faults_over.is_set() and not self.stop.is_set():
            srv = self.servers[rng.randrange(len(self.servers))]
            if not srv.alive():
                time.sleep(0.2)
                continue
            (self.perf_episode if kind == "perf" else self.kvdemo_episode)(srv)

    # ---- the run ----

    def progress(self):
        reqs = [c.last("PROGRESS") or {} for c in self.clients]
        with self.stats.lock:
            f = dict(self.stats.faults)
            p, k, t = dict(self.stats.perf), dict(self.stats.kvdemo), dict(self.stats.telemetry)
            nfail = len(self.stats.failures)
        self.log(f"faults {sum(v for x, v in f.items() if ':' not in x and x not in ('restart', 'reset_sockets'))} "
                 f"{ {x: v for x, v in f.items() if ':' not in x} }; requests opened "
                 f"{sum(r.get('opened', 0) for r in reqs)} done "
                 f"{sum(r.get('done', 0) for r in reqs)}; perf {p['episodes']} episodes "
                 f"{p['posted']} transfers; kvdemo {k['episodes']}; telemetry "
                 f"{t['commands']} commands; invariant failures {nfail}")

    def run(self):
        a = self.a
        self.log(f"chaos run: seed {a.seed}, {a.duration} s, {a.servers} servers")
        for i in range(a.servers):
            srv = Server(self, i)
            srv.start()
            self.servers.append(srv)
            self.log(f"srv{i}: kvlaned pid {srv.proc.pid} on {srv.addr}, data port "
                     f"{srv.data_port}, rss {srv.base[0] >> 20} MiB, fds {srv.base[1]}")
        for srv in self.servers:
            c = ReqClient(self, srv)
            c.wait_line(r"^connected peer", READY_S, what=f"{c.tag}: connect")
            self.clients.append(c)
        self.t0 = now()  # the fault schedule is relative to the start of the load
        threads = [threading.Thread(target=self.fault_loop, daemon=True),
                   threading.Thread(target=self.watch_loop, daemon=True),
                   threading.Thread(target=self.telemetry_loop, daemon=True),
                   threading.Thread(target=self.episode_loop,
                                    args=("perf", random.Random(a.seed * 31 + 1)), daemon=True),
                   threading.Thread(target=self.episode_loop,
                                    args=("kvdemo", random.Random(a.seed * 31 + 2)),
                                    daemon=True)]
        for t in threads:
            t.start()
        next_progress = now() + a.progress
        while not self.faults_over.is_set():
            time.sleep(0.2)
            if now() >= next_progress:
                self.progress()
                next_progress = now() + a.progress
        self.log("faults over; waiting for the episodes and the request clients to end")
        for t in threads[3:]:
            t.join(EPISODE_LIMIT_S + 10)
        for srv in self.servers:
            if srv.alive() and srv.stopped:
                os.kill(srv.proc.pid, signal.SIGCONT)
        self.finish_clients()
        self.stop.set()
        for t in threads[:3]:
            t.join(15)
        self.finish_servers()

    def finish_clients(self):
        st = self.stats
        self.result["requests"] = []
        for c in self.clients:
            try:
                c.wait_line(r"^PAUSE end", CLIENT_END_S, what=f"{c.tag}: end of its rounds")
            except h.Fail as e:
                st.fail("requests", f"{c.tag}: did not reach its end: {str(e)[:3000]}")
                continue
            res = c.last("RESULT")
            ended = res["done"] + sum(res["failed"].values())
            for k in ("dup_end", "stray", "never_ended", "bad_status"):
                if res[k]:
                    st.fail("requests", f"{c.tag}: {k} = {res[k]}")
            if ended != res["opened"]:
                st.fail("requests", f"{c.tag}: {res['opened']} requests opened, {ended} ended")
            if res["bad_bytes"] or res["order_errors"]:
                st.fail("bytes", f"{c.tag}: {res['bad_bytes']} bad bytes, {res['order_errors']} "
                        "READY steps out of order")
            for k in ("step_done_errors", "cap_errors", "cancel_refused"):
                if res[k]:
                    st.fail("requests", f"{c.tag}: {k} = {res[k]}")
            # Staging back to nothing, read through the client's own telemetry socket.
            sched = None
            try:
                tel = c.telemetry()
                deadline = now() + DRAIN_S
                while True:
                    rows = tsched.rows(h.cmd(tel, "/kvlane/sched", c))
                    sched = {k: sum(r[k] for r in rows) for k in
                             ("in_use", "active", "waiting", "windows")}
                    if not any(sched.values()) or now() > deadline:
                        break
                    time.sleep(0.2)
                tel.close()
            except h.Fail as e:
                st.fail("staging", f"{c.tag}: /kvlane/sched unreadable: {str(e)[:500]}")
            if sched is not None and any(sched.values()):
                st.fail("staging", f"{c.tag}: staging not back to 0 after every request ended: "
                        f"/kvlane/sched {sched}")
            c.proc.stdin.write("go\n")
            c.proc.stdin.flush()
            try:
                rc = c.wait_exit(30)
            except h.Fail as e:
                st.fail("crash", str(e)[:2000])
                rc = None
            explained = any(f.startswith(c.tag + ":") for _, f in st.failures)
            if rc != 0 and not (rc == 1 and explained):  # exit 1: its own checks, filed above
                st.fail("crash" if rc is None or rc < 0 else "requests", f"{c.tag}: {exit_desc(rc)}; its ERROR lines: "
                        f"{[x for x in c.out if x.startswith('ERROR')][:10]}")
            self.result["requests"].append({"client": c.tag, "result": res, "sched": sched,
                                            "exit": exit_desc(rc)})

    def finish_servers(self):
        st = self.stats
        self.result["servers"] = []
        for srv in self.servers:
            row = {"server": f"srv{srv.i}", "starts": srv.starts, "base": srv.base}
            if not srv.alive():
                srv.reap()
                st.fail("crash", f"srv{srv.i}: not running at the end")
                self.result["servers"].append(row)
                continue
            deadline = now() + DRAIN_S
            while True:
                cur = rss_fds(srv.proc.pid)
                ok = cur and cur[1] <= srv.base[1] + FD_SLACK and \
                    cur[0] <= srv.base[0] + max(RSS_SLACK, srv.base[0] // 10)
                if ok or now() > deadline:
                    break
                time.sleep(0.5)
            row["end"] = cur
            if not ok:
                st.fail("rss_fds", f"srv{srv.i}: (rss, fds) {cur} after the clients stopped, at start "
                        f"{srv.base} (slack {FD_SLACK} fds, max(16 MiB, 10 %) rss)")
            srv.proc.send(signal.SIGINT)
            try:
                rc = srv.proc.wait_exit(20, " of SIGINT")
            except h.Fail as e:
                st.fail("crash", str(e)[:2000])
                rc = None
            srv.history.append((srv.proc.tag, exit_desc(rc)))
            if rc != 0:
                st.fail("crash", f"srv{srv.i}: {exit_desc(rc)} after SIGINT at the end")
            row["exit"] = exit_desc(rc)
            self.result["servers"].append(row)

    # ---- the report ----

    def report(self):
        st, res = self.stats, self.result
        reqs = [r["result"] for r in res.get("requests", [])]

        def tot(key):
            return sum(r[key] for r in reqs)

        req_failed = {}
        for r in reqs:
            for k, n in r["failed"].items():
                req_failed[k] = req_failed.get(k, 0) + n
        refused = {}
        for r in reqs:
            for k, n in r["open_refused"].items():
                name = errno.errorcode.get(int(k), k)
                refused[name] = refused.get(name, 0) + n
        cats = {c for c, _ in st.failures}
        if len(reqs) != len(self.clients):
            cats.add("requests")
        inv = [(name, cat not in cats) for cat, name in INVARIANTS]
        lines = ["", f"kvlane chaos run: seed {self.a.seed}, {self.a.duration} s, "
                 f"{self.a.servers} servers, {len(self.clients)} request clients", ""]
        lines += ["| faults injected | count |", "|---|---:|"]
        for k in sorted(st.faults):
            lines.append(f"| {k} | {st.faults[k]} |")
        for k in sorted(st.skipped):
            lines.append(f"| {k} (skipped: server down) | {st.skipped[k]} |")
        lines.append(f"| telemetry commands ({st.telemetry['replies']} answered, "
                     f"{st.telemetry['errors']} connections lost) | "
                     f"{st.telemetry['commands']} |")
        lines.append(f"| budget cap moves (request clients) | {tot('budget_moves') if reqs else 0} |")
        lines.append(f"| cancels mid-flight (request clients) | {tot('cancels') if reqs else 0} |")
        lines += ["", "| started | count | completions by typed status |", "|---|---:|---|"]
        if reqs:
            lines.append(f"| requests opened | {tot('opened')} | done {tot('done')}, "
                         + ", ".join(f"{k} {v}" for k, v in sorted(req_failed.items()))
                         + f"; never ended {tot('never_ended')}, twice {tot('dup_end')}; "
                         f"canceled without our cancel {tot('canceled_unasked')} |")
            lines.append(f"| request opens refused | {sum(refused.values())} | "
                         + ", ".join(f"{k} {v}" for k, v in sorted(refused.items())) + " |")
            lines.append(f"| request blocks verified | {tot('blocks_verified')} | "
                         f"{tot('bytes_verified')} bytes, {tot('bad_bytes')} bad |")
            lines.append(f"| request reconnects | {tot('connects')} | "
                         f"{tot('connect_failures')} attempts refused |")
        p, k = st.perf, st.kvdemo
        lines.append(f"| perf transfers posted ({p['episodes']} episodes) | {p['posted']} | "
                     + ", ".join(f"{x} {v}" for x, v in sorted(p["status"].items()))
                     + f"; {p['verified_bytes']} bytes verified; connect refused "
                     f"{p['connect_refused']} |")
        lines.append(f"| kvdemo runs | {k['episodes']} | "
                     + ", ".join([f"verified {k['verified']}"]
                                 + [f"{x} {v}" for x, v in sorted(k["status"].items())])
                     + f"; connect refused {k['connect_refused']} |")
        lines += ["", "| process | start | end |", "|---|---|---|"]
        for r in res.get("servers", []):
            b, e = r.get("base"), r.get("end")
            lines.append(f"| kvlaned {r['server']} ({r['starts']} starts) | "
                         + (f"rss {b[0] >> 20} MiB, {b[1]} fds" if b else "-") + " | "
                         + (f"rss {e[0] >> 20} MiB, {e[1]} fds, " if e else "")
                         + f"{r.get('exit', '-')} |")
        for r in res.get("requests", []):
            lines.append(f"| {r['client']} | - | /kvlane/sched {r['sched']}, {r['exit']} |")
        lines += ["", "| invariant | held |", "|---|---|"]
        all_ok = not st.failures and all(ok for _, ok in inv)
        for name, ok in inv:
            lines.append(f"| {name} | {'yes' if ok else 'NO'} |")
        if st.notes:
            lines += ["", "notes: " + "; ".join(st.notes[:5])]
        lines.append("")
        lines.append(f"RESULT {'PASS' if all_ok else 'FAIL'}: {len(st.failures)} invariant "
                     f"failures (seed {self.a.seed})")
        for c, f in st.failures[:20]:  # in full above, as each happened, and in --json
            lines.append(f"  - [{c}] " + f.split("\n", 1)[0][:400])
        print("\n".join(lines), flush=True)
        if self.a.json:
            with open(self.a.json, "w") as f:
                json.dump({"seed": self.a.seed, "duration_s": self.a.duration,
                           "faults": st.faults, "skipped": st.skipped,
                           "telemetry": st.telemetry, "perf": st.perf, "kvdemo": st.kvdemo,
                           "requests": res.get("requests"), "servers": res.get("servers"),
                           "schedule": res.get("schedule"),
                           "invariants": {n: bool(ok) for n, ok in inv},
                           "failures": [{"invariant": c, "what": f} for c, f in st.failures],
                           "pass": all_ok}, f, indent=1)
        return 0 if all_ok else 1


def parse(argv):
    build = os.environ.get("KVL_BUILD") or os.path.join(KVL_SRC, "build")
    ap = argparse.ArgumentParser(
        description="kvlane chaos run: kvlaned peers and API clients on loopback under random "
        "faults (kills, stops, data connection resets, hostile connections, telemetry load, "
        "budget cap moves, cancels), then the invariants (docs/chaos.md). Exit 0 when every "
        "invariant held, 1 otherwise.")
    ap.add_argument("--duration", type=int, default=60, help="seconds of faults (default 60)")
    ap.add_argument("--long", action="store_true",
                    help=f"the long run: $KVL_CHAOS_DURATION seconds (default {LONG_DEFAULT_S})")
    ap.add_argument("--seed", type=int, default=None,
                    help="fault schedule seed (default: random, printed)")
    ap.add_argument("--servers", type=int, default=2, help="kvlaned peers (default 2)")
    ap.add_argument("--faults", default="kill,stop,reset,hostile",
                    help="the fault kinds to draw from, comma-separated (default: all of "
                    "kill,stop,reset,hostile; telemetry load, cancels and budget cap moves "
                    "run always)")
    ap.add_argument("--json", metavar="FILE", help="write the results as JSON to FILE")
    ap.add_argument("--progress", type=float, default=10, help="seconds between progress lines")
    for name, exe in (("kvlaned", "kvlaned"), ("perf", "kvlane-perf"),
                      ("req-client", "kvlane-req-client"), ("kvdemo", "kvlane-kvdemo")):
        ap.add_argument(f"--{name}", default=os.path.join(build, exe),
                        help=f"path of {exe} (default {os.path.join(build, exe)})")
    a = ap.parse_args(argv)
    a.faults = [f for f in a.faults.split(",") if f]
    bad = [f for f in a.faults if f not in [k for k, _ in FAULT_WEIGHTS]]
    if bad or not a.faults:
        ap.error(f"--faults: unknown kind {bad} (kill, stop, reset, hostile)")
    if a.long:
        a.duration = int(os.environ.get("KVL_CHAOS_DURATION", LONG_DEFAULT_S))
    if a.duration < 20 or not 1 <= a.servers <= 4:
        ap.error("--duration must be at least 20 s, --servers 1..4")
    if a.seed is None:
        a.seed = random.SystemRandom().randrange(1, 1 << 31)
    for x in (a.kvlaned, a.perf, a.req_client, a.kvdemo):
        if not os.access(x, os.X_OK):
            ap.error(f"{x} is not an executable (build first, or give its path)")
    return a


def main(argv=None):
    a = parse(sys.argv[1:] if argv is None else argv)
    demo_secret = os.path.join(KVL_SRC, "config", "demo.secret")
    if os.stat(demo_secret).st_mode & 0o077:
        os.chmod(demo_secret, 0o600)  # git keeps no mode; kvlaned refuses 0644
    run = Chaos(a)
    signal.signal(signal.SIGTERM, lambda s, f: (_ for _ in ()).throw(KeyboardInterrupt()))
    try:
        run.run()
    except KeyboardInterrupt:
        run.stats.fail("other", "interrupted")
    except h.Fail as e:
        run.stats.fail("other", f"the run could not go on: {e}")
    finally:
        run.stop.set()
        for srv in run.servers:
            if srv.alive() and srv.stopped:
                os.kill(srv.proc.pid, signal.SIGCONT)
    rc = run.report()
    run.ctx.cleanup()
    return rc


if __name__ == "__main__":
    sys.exit(main())
