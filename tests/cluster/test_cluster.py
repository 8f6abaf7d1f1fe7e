#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""Cluster tests: kvlaned nodes register in a real etcd (Debian's etcd-server, started here on
127.0.0.1 with a private data dir and free ports) and find each other by name.

Usage: test_cluster.py SCENARIO PATH-TO-KVLANED PATH-TO-CLUSTER-CLIENT, with KVL_SRC in the
environment. Exit 0 pass, 1 fail, 77 when etcd is not installed.

  register   three kvlaned register (two prefill, one decode); a client lists them by role,
             connects to each prefill by name and READs its segment, every byte checked; the
             records in etcd carry no secret and no rkey; /kvlane/cluster on a node shows the
             view; a clean stop deletes the key at once.
  tls_failover  etcd over TLS (a CA of the test's own): a node whose first endpoint is dead
             fails over and registers with tls_ca_file; one without the CA stays out with the
             certificate error in /kvlane/cluster.
  sigkill    a prefill SIGKILLed: its key is gone within lease_ttl_s and the client marks its
             peer dead from the watch (failure "etcd: ... left the cluster"), long before its
             peer_timeout_ms; restarted, it is a new incarnation, found and read afresh.
  etcd_down  etcd SIGKILLed mid-run: READs from the known peer go on; an unknown name fails
             with "etcd is unreachable"; one warning, not one per retry; etcd restarted: the
             view converges (a node started meanwhile is seen, etcd_ok back).
  bad_input  an unreachable endpoint (node starts and serves; state unreachable), records
             written by someone else under the prefix (not JSON, wrong name, over the size
             limit, a key that is not a node's), a duplicate name, and bad [cluster] keys:
             each a clear error or a skipped record, never a crash.
"""
import json
import os
import re
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "eal"))
import kvl_harness as h  # noqa: E402
from kvl_harness import KVL_SRC, Fail, check, check_eq, log, wait_for  # noqa: E402

LIMITS = {"register": 60, "tls_failover": 60, "sigkill": 60, "etcd_down": 60, "bad_input": 60}
SECRET = os.path.join(KVL_SRC, "config", "demo.secret")
EAL = ["--lcores", "0@(0-1),1@(0-1)", "--no-huge", "--no-pci", "-m", "128"]
SEG_BYTES = 2 * 2 * 16 * 4096  # the nodes' [segment.kv]: 256 KiB


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class Etcd:
    """Debian's etcd on 127.0.0.1: a private data dir, free client and peer ports."""

    def __init__(self, ctx, tls=False):
        self.ctx = ctx
        self.data = os.path.join(ctx.tmp, "etcd")
        self.client, self.peer = free_port(), free_port()
        self.tls = tls
        self.url = f"{'https' if tls else 'http'}://127.0.0.1:{self.client}"
        self.p = None
        if tls:
            self.make_certs()
        self.start()

    def make_certs(self):
        """A CA of the test's own and a server certificate for 127.0.0.1 it signs."""
        d = self.ctx.tmp
        self.ca = os.path.join(d, "ca.pem")
        ext = self.ctx.write("san.ext", "subjectAltName=IP:127.0.0.1\n")
        for argv in (
                ["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{d}/ca.key",
                 "-out", self.ca, "-days", "1", "-subj", "/CN=kvl-test-ca"],
                ["req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{d}/srv.key", "-out",
                 f"{d}/srv.csr", "-subj", "/CN=127.0.0.1"],
                ["x509", "-req", "-in", f"{d}/srv.csr", "-CA", self.ca, "-CAkey", f"{d}/ca.key",
                 "-CAcreateserial", "-out", f"{d}/srv.pem", "-days", "1", "-extfile", ext]):
            r = subprocess.run(["openssl", *argv], capture_output=True, text=True, timeout=30)
            check(r.returncode == 0, f"openssl {argv[0]}", "exit 0", r.stderr, self.ctx)

    def start(self):
        argv = ["etcd", "--name", "kvl", "--data-dir", self.data,
                "--listen-client-urls", self.url, "--advertise-client-urls", self.url,
                "--listen-peer-urls", f"http://127.0.0.1:{self.peer}",
                "--initial-advertise-peer-urls", f"http://127.0.0.1:{self.peer}",
                "--initial-cluster", f"kvl=http://127.0.0.1:{self.peer}",
                "--logger", "zap", "--log-level", "error"]
        if self.tls:
            argv += ["--cert-file", f"{self.ctx.tmp}/srv.pem",
                     "--key-file", f"{self.ctx.tmp}/srv.key"]
        self.p = h.Proc(self.ctx, argv, self.ctx.rundir("etcd"), "etcd", "etcd")
        ok = wait_for(self.healthy, 15, 0.1)
        check(ok, "etcd start", f"{self.url}/health true within 15 s", "no", self.p)

    def healthy(self):
        ctx = ssl.create_default_context(cafile=self.ca) if self.tls else None
        try:
            with urllib.request.urlopen(self.url + "/health", timeout=1, context=ctx) as r:
                return json.load(r).get("health") == "true"
        except (OSError, ValueError):
            return False

    def kill(self):
        self.p.proc.send_signal(signal.SIGKILL)
        self.p.wait_exit(5)

    def ctl(self, *args, value=None):
        env = dict(os.environ, ETCDCTL_API="3")
        tls = ["--cacert", self.ca] if self.tls else []
        r = subprocess.run(["etcdctl", "--endpoints", self.url, *tls, *args], env=env, text=True,
                           input=value, capture_output=True, timeout=10)
        check(r.returncode == 0, f"etcdctl {' '.join(args)}", "exit 0",
              f"{r.returncode}: {r.stderr}", self.p)
        return r.stdout

    def keys(self, prefix):
        return [k for k in self.ctl("get", "--prefix", "--keys-only", prefix).split("\n") if k]


def node_ini(name, role, etcd, seed=1, extra="", cluster_extra="", runtime_extra=""):
    return (f"[runtime]\nname = {name}\nidle_policy = yield\n{runtime_extra}"
            f"[nic.lo]\ndevice = lo\ntransport = tcp\n"
            f"[segment.kv]\nlayers = 2\nplanes = 2\nblocks = 16\nblock_bytes = 4096\n"
            f"access = read\nfill = pattern\npattern_seed = {seed}\n"
            f"[control]\nsecret_file = {SECRET}\nlisten = 127.0.0.1:0\n{extra}"
            f"[cluster]\netcd_endpoints = {etcd}\nrole = {role}\ncluster = t\n"
            f"{cluster_extra}")


class Ctx(h.Ctx):
    def __init__(self, scenario, kvlaned, client):
        super().__init__(scenario, kvlaned, "cluster")
        self.client_exe = client

    def write(self, name, text):
        path = os.path.join(self.tmp, name)
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
        return path

    def node(self, name, role, etcd, seed=1, wait=True, **kw):
        ini = self.write(f"{name}-{self.n}.ini", node_ini(name, role, etcd, seed, **kw))
        prefix = self.unique(name)
        argv = [self.kvlaned_exe, *EAL, "--file-prefix", prefix, "--", "-c", ini]
        p = h.Proc(self, argv, self.rundir(prefix), prefix, f"kvlaned {name}")
        p.name = name
        p.wait_line(h.READY_RE, h.READY_TIMEOUT_S, what=f"kvlaned {name}: start-up")
        p.addr = p.wait_line(h.LISTEN_RE, 1, what=f"kvlaned {name}: control address")[1]
        if wait:
            p.wait_line(r"cluster: registered as", 10, "err", f"kvlaned {name}: registered")
        return p

    def client(self, etcd, name="client", extra=""):
        prefix = self.unique("client")
        ini = self.write(f"client-{self.n}.ini", (
            f"[runtime]\nname = {name}\nidle_policy = yield\n"
            f"[nic.lo]\ndevice = lo\ntransport = tcp\n"
            f"[control]\nsecret_file = {SECRET}\nlisten = 127.0.0.1:0\n{extra}"
            f"[cluster]\netcd_endpoints = {etcd}\nrole = decode\ncluster = t\nlease_ttl_s = 5\n"
            f"[eal]\nlcores = 0@(0-1),1@(0-1)\nno_huge = true\nno_pci = true\nmemory_mb = 128\n"
            f"file_prefix = {prefix}\n"))
        p = h.Proc(self, [self.client_exe, ini], self.rundir(prefix), prefix, "client",
                   stdin=subprocess.PIPE)
        p.wait_line(r"^started$", h.READY_TIMEOUT_S, what="client: start-up")
        return p


def ask(p, line, pattern, timeout=20):
    """Send @line to the client; the first new stdout line matching @pattern (re.match)."""
    with p.cond:
        start = len(p.out)
    p.proc.stdin.write(line + "\n")
    p.proc.stdin.flush()
    rx = re.compile(pattern)
    deadline = time.monotonic() + timeout
    with p.cond:
        while True:
            for s in p.out[start:]:
                m = rx.match(s)
                if m:
                    return m
            left = deadline - time.monotonic()
            if left <= 0 or p.proc.poll() is not None:
                break
            p.cond.wait(min(left, 0.1))
    raise Fail(f"client: {line!r}\n  expected: a line matching {pattern!r}\n"
               f"  seen:     {p.out[start:]}\n" + p.describe())


def listing(p, role):
    """The client's view of @role: {name: (role, control, incarnation)}."""
    with p.cond:
        start = len(p.out)
    end = ask(p, f"list {role}", r"^end (-?\d+)$")
    with p.cond:
        lines = p.out[start:]
    nodes = {}
    for s in lines:
        m = re.match(r"^node (\S+) (\S+) (\S+) (\S+)$", s)
        if m:
            nodes[m[1]] = (m[2], m[3], m[4])
    check_eq(len(nodes), int(end[1]), f"list {role}: lines and count", p)
    return nodes


def read_ok(p, name, seed, what):
    m = ask(p, f"read {name} {seed} 10000", r"^read (ok|fail) (.*)$")
    check(m[1] == "ok", what, f"read ok {name}", m[0], p)
    b = re.search(r"bytes (\d+)", m[2])
    check_eq(int(b[1]), SEG_BYTES, f"{what}: bytes read and checked", p)
    return int(re.search(r"peer (\d+)", m[2])[1])


def cluster_tel(p):
    c = p.telemetry()
    try:
        return h.cmd(c, "/kvlane/cluster", p)
    finally:
        c.close()


def peer_row(p, addr):
    c = p.telemetry()
    try:
        rows = h.table_rows(h.cmd(c, "/kvlane/peers", p), ["addr", "state"], "/kvlane/peers", p)
    finally:
        c.close()
    return [r for r in rows if r["addr"] == addr]


# ---- scenarios ----

def scenario_register(ctx):
    etcd = Etcd(ctx)
    p1 = ctx.node("p1", "prefill", etcd.url, seed=11)
    p2 = ctx.node("p2", "prefill", etcd.url, seed=22)
    d1 = ctx.node("d1", "decode", etcd.url, seed=33)
    cl = ctx.client(etcd.url)
    ask(cl, "wait any 4 10000", r"^wait ok 4$")
    pre = listing(cl, "prefill")
    check_eq(sorted(pre), ["p1", "p2"], "prefill nodes", cl)
    check_eq(pre["p1"][1], p1.addr, "p1's control endpoint in the view", cl, p1)
    check_eq(sorted(listing(cl, "decode")), ["client", "d1"], "decode nodes", cl)
    log("three kvlaned and the client registered; listed by role")
    for p, seed in ((p1, 11), (p2, 22)):
        read_ok(cl, p.name, seed, f"READ from {p.name} by name")
    log(f"connected to p1 and p2 by name: {SEG_BYTES} bytes from each, every byte checked")
    with open(SECRET, "rb") as f:
        secret = f.read().strip()
    for k in etcd.keys("/kvlane/t/nodes/"):
        v = etcd.ctl("get", "--print-value-only", k).strip()
        rec = json.loads(v)
        bad = [w for w in ("rkey", "secret", "psk") if w in v.lower()]
        check(not bad and secret.decode(errors="replace") not in v, f"record {k}",
              "no secret, no rkey", f"found {bad}: {v}", p1)
        check(rec["name"] == k.rsplit("/", 1)[1], f"record {k}: name", k, rec["name"], p1)
    rec = json.loads(etcd.ctl("get", "--print-value-only", "/kvlane/t/nodes/p1"))
    check_eq((rec["role"], rec["control"], rec["segments"][0]["length"], rec["nics"][0]["device"]),
             ("prefill", p1.addr, SEG_BYTES, "lo"), "p1's record", p1)
    tel = cluster_tel(p1)
    check_eq((tel["state"], tel["etcd_ok"], tel["node_count"], tel["roles"].get("d1"),
              tel["control"].get("p2")), ("registered", 1, 4, "decode", p2.addr),
             "/kvlane/cluster on p1", p1)
    check(tel["keepalives"] >= 0 and tel["etcd_api"] == "/v3", "/kvlane/cluster etcd_api",
          "/v3 (etcd 3.4's gateway)", tel["etcd_api"], p1)
    log("records carry no secret or rkey; /kvlane/cluster on p1 shows the view of 4")
    # someone deletes a live node's key: the node sees it in its watch and publishes again
    etcd.ctl("del", "/kvlane/t/nodes/p2")
    p2.wait_line(r"our key /kvlane/t/nodes/p2 was deleted by someone", 5, "err",
                 "p2 seeing its key deleted")
    ok = wait_for(lambda: etcd.keys("/kvlane/t/nodes/p2") == ["/kvlane/t/nodes/p2"], 5)
    check(ok, "p2's key after someone deleted it", "published again within 5 s", "missing", p2)
    rec2 = json.loads(etcd.ctl("get", "--print-value-only", "/kvlane/t/nodes/p2"))
    check_eq(rec2["control"], p2.addr, "p2's record, published again", p2)
    # its peers took the deletion for a departure (a key that goes is a node that left) and
    # reach it afresh once it is back
    ask(cl, "wait prefill 2 5000", r"^wait ok 2$")
    read_ok(cl, "p2", 22, "READ from p2 after its key came back")
    log("p2's key deleted by someone else: p2 published it again, the client read it afresh")
    t0 = time.monotonic()
    d1.stop()
    check(etcd.keys("/kvlane/t/nodes/d1") == [], "d1's key after a clean stop", "deleted",
          "still there", d1)
    m = ask(cl, "gone d1 5000", r"^gone (ok \d+|timeout)$")
    check(m[1].startswith("ok"), "the client's view after d1's clean stop", "d1 gone", m[0], cl)
    log(f"d1 stopped cleanly: key deleted, gone from the client's view "
        f"{time.monotonic() - t0:.2f} s after SIGTERM")
    for p in (p1, p2):
        p.stop()


def scenario_sigkill(ctx):
    etcd = Etcd(ctx)
    ttl = 3
    p1 = ctx.node("p1", "prefill", etcd.url, seed=5, cluster_extra=f"lease_ttl_s = {ttl}\n")
    # Heartbeats would take 30 s to declare p1 dead here: only the watch can be that fast.
    cl = ctx.client(etcd.url, extra="heartbeat_interval_ms = 1000\npeer_timeout_ms = 30000\n")
    ask(cl, "wait prefill 1 10000", r"^wait ok 1$")
    inc1 = listing(cl, "prefill")["p1"][2]
    read_ok(cl, "p1", 5, "READ from p1 before the kill")
    # A host that hangs: SIGSTOP keeps its sockets open (a SIGKILL on loopback would close
    # them and fail the peer as conn-lost at once), so only the lease and the watch can tell.
    t0 = time.monotonic()
    p1.proc.send_signal(signal.SIGSTOP)
    m = ask(cl, f"gone p1 {(ttl + 3) * 1000}", r"^gone (ok \d+|timeout)$", ttl + 5)
    gone_s = time.monotonic() - t0
    check(m[1].startswith("ok") and gone_s <= ttl + 1.5, "p1's key after SIGSTOP",
          f"gone from the view within lease_ttl_s = {ttl} s (+1.5 s etcd's expiry tick)",
          f"{m[0]} after {gone_s:.2f} s", cl)
    ok = wait_for(lambda: [r for r in peer_row(cl, p1.addr) if r["state"] == "dead"], 3)
    rows = peer_row(cl, p1.addr)
    dead_s = time.monotonic() - t0
    check(ok and rows[0]["fail_status"] == "peer-dead" and
          "left the cluster" in rows[0]["fail_reason"], "p1's peer on the client",
          "dead, peer-dead, 'etcd: node \"p1\" left the cluster ...'", rows, cl)
    check(dead_s < 30, "declared dead before peer_timeout_ms", "< 30 s", f"{dead_s:.1f} s", cl)
    m = ask(cl, "read p1 5 3000", r"^read (ok|fail) (\S+) (.*)$")
    check(m[1] == "fail" and m[2] == "ENOENT", "a READ from p1 once it left",
          "read fail ENOENT (no node named p1)", m[0], cl)
    log(f"p1 hung (SIGSTOP): gone from etcd's view in {gone_s:.2f} s (ttl {ttl} s), its peer "
        f"dead from the watch ({rows[0]['fail_reason']!r}) in {dead_s:.2f} s; heartbeats "
        f"would have taken 30 s")
    p1.proc.send_signal(signal.SIGKILL)
    p1.wait_exit(5)
    # A plain SIGKILL of the new incarnation: its key goes within the TTL too.
    p1b = ctx.node("p1", "prefill", etcd.url, seed=5, cluster_extra=f"lease_ttl_s = {ttl}\n")
    ask(cl, "wait prefill 1 10000", r"^wait ok 1$")
    now = listing(cl, "prefill")["p1"]
    check(now[2] != inc1 and now[1] == p1b.addr, "p1 restarted", "a new incarnation at its "
          f"new address {p1b.addr}", f"{now} (was {inc1})", cl)
    read_ok(cl, "p1", 5, "READ from the restarted p1")
    log(f"p1 restarted: incarnation {inc1} -> {now[2]}, reached afresh at {p1b.addr}")
    t0 = time.monotonic()
    p1b.proc.send_signal(signal.SIGKILL)
    p1b.wait_exit(5)
    m = ask(cl, f"gone p1 {(ttl + 3) * 1000}", r"^gone (ok \d+|timeout)$", ttl + 5)
    gone_s = time.monotonic() - t0
    check(m[1].startswith("ok") and gone_s <= ttl + 1.5, "p1's key after SIGKILL",
          f"gone within lease_ttl_s = {ttl} s (+1.5 s)", f"{m[0]} after {gone_s:.2f} s", cl)
    log(f"the new p1 SIGKILLed: its key gone in {gone_s:.2f} s")


def scenario_etcd_down(ctx):
    etcd = Etcd(ctx)
    p1 = ctx.node("p1", "prefill", etcd.url, seed=7, cluster_extra="lease_ttl_s = 20\n")
    cl = ctx.client(etcd.url)
    ask(cl, "wait any 2 10000", r"^wait ok 2$")
    peer = read_ok(cl, "p1", 7, "READ from p1 with etcd up")
    etcd.kill()
    for i in range(3):
        check_eq(read_ok(cl, "p1", 7, f"READ {i + 1} from p1 with etcd down"), peer,
                 "the same peer", cl)
        time.sleep(0.3)
    m = ask(cl, "read nobody 1 2000", r"^read (ok|fail) (\S+) (.*)$")
    check(m[1] == "fail" and m[2] == "EHOSTUNREACH" and "etcd is unreachable" in m[3],
          "a new name with etcd down", "read fail EHOSTUNREACH ... etcd is unreachable ...",
          m[0], cl)
    ok = wait_for(lambda: cluster_tel(p1)["state"] == "unreachable", 5)
    tel = cluster_tel(p1)
    check(ok and tel["etcd_ok"] == 0 and "127.0.0.1" in tel["last_error"],
          "/kvlane/cluster on p1 with etcd down", "unreachable, last_error names etcd", tel, p1)
    log(f"etcd killed: READs from p1 go on (same peer {peer}); a new name fails: {m[3]!r}")
    time.sleep(1.0)
    etcd.start()
    p2 = ctx.node("p2", "prefill", etcd.url, seed=8)
    m = ask(cl, "wait any 3 15000", r"^wait (ok|timeout) (\d+)$", 20)
    check(m[1] == "ok", "the client's view after etcd's restart", "3 nodes (p2 seen)", m[0], cl)
    ok = wait_for(lambda: cluster_tel(p1)["etcd_ok"] == 1, 10)
    check(ok, "p1 after etcd's restart", "etcd_ok 1", cluster_tel(p1), p1)
    read_ok(cl, "p2", 8, "READ from p2, registered after etcd came back")
    warns = [s for s in p1.err if "etcd unreachable" in s]
    check_eq(len(warns), 1, "p1's 'etcd unreachable' warnings (once per state change)", p1)
    back = [s for s in p1.err if re.search(r"cluster: etcd \S+ at", s)]
    check(len(back) == 2, "p1's 'etcd ... at' lines", "2 (start, and after the outage)",
          back, p1)
    log("etcd restarted: the view converged (p2 seen, p1 kept its lease); one warning for the "
        "outage, one line when etcd came back")
    p1.stop()
    p2.stop()


def scenario_bad_input(ctx):
    etcd = Etcd(ctx)
    # (a) an unreachable endpoint: the node starts and serves; one warning, state unreachable
    dead = f"http://127.0.0.1:{free_port()}"
    u = ctx.node("u1", "prefill", dead, wait=False)
    ok = wait_for(lambda: cluster_tel(u)["state"] == "unreachable", 5)
    tel = cluster_tel(u)
    check(ok and dead in tel["last_error"], "/kvlane/cluster with an unreachable endpoint",
          f"state unreachable, last_error naming {dead}", tel, u)
    time.sleep(1.5)  # several retries
    check_eq(len([s for s in u.err if "etcd unreachable" in s]), 1,
             "warnings for an unreachable endpoint (once, not per retry)", u)
    u.stop()
    log(f"an unreachable endpoint: kvlaned serves, /kvlane/cluster says unreachable: "
        f"{tel['last_error']!r}")
    # (b) records written by someone else under the prefix
    p1 = ctx.node("p1", "prefill", etcd.url, seed=3)
    etcd.ctl("put", "/kvlane/t/nodes/junk", "{not json")
    etcd.ctl("put", "/kvlane/t/nodes/liar", json.dumps({"v": 1, "name": "p1", "role": "decode",
                                                        "control": "127.0.0.1:1"}))
    etcd.ctl("put", "/kvlane/t/nodes/badrole", json.dumps({"v": 1, "name": "badrole",
                                                           "role": "boss", "control": "x:1"}))
    etcd.ctl("put", "/kvlane/t/nodes/big", json.dumps({"v": 1, "name": "big", "role": "decode",
                                                       "control": "h:1", "host": "x" * 20000}))
    etcd.ctl("put", "/kvlane/t/nodes/a/b", "{}")
    cl = ctx.client(etcd.url)
    ask(cl, "wait any 2 10000", r"^wait ok 2$")
    check_eq(sorted(listing(cl, "any")), ["client", "p1"], "the view beside bad records", cl)
    etcd.ctl("put", "/kvlane/t/nodes/junk2", "[1,2")  # seen by the watch this time
    time.sleep(0.5)
    tel = cluster_tel(p1)
    got = (tel["skipped_malformed"], tel["skipped_oversize"], tel["skipped_bad_key"])
    check(got[0] >= 4 and got[1] >= 1 and got[2] >= 1 and tel["node_count"] == 2,
          "p1's skipped records", "malformed >= 4 (junk, liar, badrole, junk2), oversize >= 1, "
          "bad key >= 1, 2 nodes", tel, p1)
    check(any("skipped /kvlane/t/nodes/liar" in s and "name" in s for s in p1.err),
          "p1's warning for the record under another's key", "names key and field", "none", p1)
    read_ok(cl, "p1", 3, "READ from p1 beside bad records")
    log(f"bad records under the prefix skipped (malformed {got[0]}, oversize {got[1]}, "
        f"bad key {got[2]}); the view and p1 unaffected")
    # (c) a duplicate name
    dup = ctx.node("p1", "prefill", etcd.url, seed=4, wait=False)
    dup.wait_line(r"cluster\.name = p1 is registered already, by " + re.escape(p1.addr), 10,
                  "err", "the duplicate's error")
    ok = wait_for(lambda: cluster_tel(dup)["state"] == "name-taken", 5)
    check(ok and cluster_tel(dup)["held_by"] == p1.addr, "/kvlane/cluster of the duplicate",
          f"name-taken, held_by {p1.addr}", cluster_tel(dup), dup)
    rec = json.loads(etcd.ctl("get", "--print-value-only", "/kvlane/t/nodes/p1"))
    check_eq(rec["control"], p1.addr, "p1's record after the duplicate tried", p1, dup)
    read_ok(cl, "p1", 3, "READ from the first p1 (bytes of seed 3, not the duplicate's 4)")
    dup.stop()
    log("a duplicate name: refused with who holds it; the first node's record untouched")
    # (d) bad [cluster] keys: exit 3 with file:line:key
    for body, want in (
            ("etcd_endpoints = ftp://127.0.0.1:1\n", "cluster.etcd_endpoints: expected etcd client URLs"),
            ("etcd_endpoints = http://127.0.0.1:1\nlease_ttl_s = 1\n", "cluster.lease_ttl_s: expected an integer in 2..3600"),
            ("etcd_endpoints = http://127.0.0.1:1\nuser = root\n", "cluster.password_file: user and password_file go together"),
            ("etcd_endpoints = http://127.0.0.1:1\nprefix = kvlane/\n", "cluster.prefix: expected an etcd key prefix"),
            ("etcd_endpoints = http://a:1, http://a:1\n", "each endpoint once")):
        ini = ctx.write(f"bad{ctx.n}.ini", "[runtime]\nname = b\n[nic.lo]\ndevice = lo\n"
                        "transport = tcp\n[control]\nsecret_file = " + SECRET + "\n[cluster]\n" + body)
        ctx.n += 1
        r = h.Run([ctx.kvlaned_exe, "--", "-c", ini, "--print-config"], ctx.rundir("bad"), 10)
        check(r.rc == 3 and re.search(re.escape(ini) + r":\d+: ", r.stderr) and want in r.stderr,
              f"bad [cluster]: {body.strip()!r}", f"exit 3, {ini}:LINE: ... {want}",
              f"{r.rc}: {r.stderr.strip()[-300:]}", r)
    r = h.Run([ctx.kvlaned_exe, "--", "-c", ctx.write("nosecret.ini", "[runtime]\nname = b\n"
               "[nic.lo]\ndevice = lo\ntransport = tcp\n[cluster]\netcd_endpoints = "
               "http://127.0.0.1:1\n"), "--print-config"], ctx.rundir("bad"), 10)
    check(r.rc == 3 and "a cluster node needs control.secret_file" in r.stderr,
          "[cluster] without a secret", "exit 3, needs control.secret_file", r.stderr, r)
    log("bad [cluster] keys: exit 3, each error with file:line:key")
    p1.stop()
    # (e) etcd with authentication on: a node with the user's password registers; one with a
    # wrong password starts, serves, and says why it is not in the cluster
    etcd.ctl("user", "add", "root", "--new-user-password=kvl-test-pw")
    etcd.ctl("auth", "enable")
    good = ctx.write("pw", "kvl-test-pw\n")
    bad = ctx.write("badpw", "wrong\n")
    a1 = ctx.node("a1", "prefill", etcd.url, cluster_extra=f"user = root\npassword_file = {good}\n")
    ok = wait_for(lambda: cluster_tel(a1)["state"] == "registered", 5)
    check(ok, "a node with etcd's user and password", "registered", cluster_tel(a1), a1)
    a2 = ctx.node("a2", "prefill", etcd.url, wait=False,
                  cluster_extra=f"user = root\npassword_file = {bad}\n")
    ok = wait_for(lambda: "authentication failed" in cluster_tel(a2)["last_error"], 5)
    tel = cluster_tel(a2)
    check(ok and tel["state"] == "auth-failed", "a node with a wrong etcd password",
          "state auth-failed, last_error 'authentication failed'", tel, a2)
    a2.wait_line(r"cluster: etcd refused this node's credentials", 1, "err", "a2's error")
    out = subprocess.run(["etcdctl", "--endpoints", etcd.url, "--user", "root:kvl-test-pw", "get",
                          "--prefix", "--keys-only", "/kvlane/t/nodes/a"], text=True,
                         capture_output=True, env=dict(os.environ, ETCDCTL_API="3"), timeout=10)
    check_eq(sorted(k for k in out.stdout.split("\n") if k in ("/kvlane/t/nodes/a1",
                                                                "/kvlane/t/nodes/a2")),
             ["/kvlane/t/nodes/a1"], "keys under auth", a1, a2)
    a2.stop()
    a1.stop()
    log(f"etcd with auth: the right password registers, a wrong one: {tel['last_error']!r}")


def scenario_tls_failover(ctx):
    etcd = Etcd(ctx, tls=True)
    dead = f"https://127.0.0.1:{free_port()}"
    # the first endpoint refuses connections: calls fail over to the second
    n1 = ctx.node("n1", "prefill", f"{dead}, {etcd.url}", seed=9,
                  cluster_extra=f"tls_ca_file = {etcd.ca}\n")
    tel = cluster_tel(n1)
    check_eq((tel["state"], tel["etcd_endpoint"]), ("registered", etcd.url),
             "n1 over TLS, its first endpoint dead", n1)
    check(etcd.keys("/kvlane/t/nodes/n1") == ["/kvlane/t/nodes/n1"], "n1's key", "in etcd",
          "missing", n1)
    # without the CA, etcd's certificate does not verify: a clear error, no registration
    n2 = ctx.node("n2", "prefill", etcd.url, wait=False)
    ok = wait_for(lambda: cluster_tel(n2)["state"] == "unreachable", 5)
    tel2 = cluster_tel(n2)
    check(ok and re.search(r"certificate|SSL", tel2["last_error"]), "n2 without the CA",
          "unreachable, last_error about the certificate", tel2, n2)
    log(f"etcd over TLS: n1 registered through {etcd.url} after {dead} refused; without the "
        f"CA: {tel2['last_error']!r}")
    n2.stop()
    n1.stop()
    check(etcd.keys("/kvlane/t/nodes/") == [], "keys after both stopped", "none", "some", n1)


SCENARIOS = {"register": scenario_register, "tls_failover": scenario_tls_failover, "sigkill": scenario_sigkill,
             "etcd_down": scenario_etcd_down, "bad_input": scenario_bad_input}

if __name__ == "__main__":
    need = {"etcd": "etcd-server", "etcdctl": "etcd-client"}
    if len(sys.argv) > 1 and sys.argv[1] == "tls_failover":
        need["openssl"] = "openssl"  # the scenario makes its own CA
    for tool, pkg in need.items():
        if shutil.which(tool) is None:
            print(f"skipped: {tool} is not installed (apt-get install {pkg})")
            sys.exit(77)
    sys.exit(h.main(sys.argv, SCENARIOS, LIMITS, ["KVLANED", "CLUSTER_CLIENT"], Ctx))
