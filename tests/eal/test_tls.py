#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""EAL tests of [control] tls = on: kvlaned and kvlane-perf on loopback TCP.

  tls_move      kvlaned and kvlane-perf both on tls = on: READ and WRITE over the tcp
                transport, every byte verified, the server's served_bytes matching, and
                kvlaned saying its data connections run TLS 1.3 (and whether the kernel
                offloads it).
  tls_sniff     every TCP byte of the server's control and data ports captured off lo
                (AF_PACKET, as tcpdump would): with tls = off the segment's pattern, the
                data frames' "KVLD", the control frames' "KVLC" and the client's name are on
                the wire; with tls = on none of them, only TLS records.
  tls_mismatch  tls = on meeting tls = off, both ways: the client fails fast (well inside
                connect_timeout_ms) with "TLS mismatch" naming each side's setting, and so
                does the server's log.
  tls_stranger  garbage and partial TLS records on a tls = on kvlaned's control and data
                ports: closed like any bad frame, the control thread idle while partial
                records wait (/proc/PID/task/*/stat), a real client still served after.
  tls_cost      (benchmark) kvlane-perf --bw over the tcp transport, tls off and on in one
                run, interleaved: GB/s and the ratio (docs/tls.md).

Usage: test_tls.py SCENARIO PATH-TO-KVLANED PATH-TO-KVLANE-PERF, with KVL_SRC in the
environment. Exit 0 pass, 1 fail, 77 skipped (with the reason).
"""
import os
import socket
import struct
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kvl_harness as h  # noqa: E402  (its own folder)
import test_dataplane as dp  # noqa: E402
import test_peers as tp  # noqa: E402
from kvlane_chaos import free_port  # noqa: E402  (tools/, on the path through kvl_harness)
from kvl_harness import Fail, check, check_eq, cmd, log, wait_for  # noqa: E402

LIMIT_S = {"tls_move": 120, "tls_sniff": 120, "tls_mismatch": 90, "tls_stranger": 90,
           "tls_cost": 300}
KV_RW = dp.KV_RW
KV_SEED = 1      # default.ini's [segment.kv] pattern_seed
TLS_ON = ["--set", "control.tls=on"]
TLS_OFF = ["--set", "control.tls=off"]
TLS_LOG = "tcp data connections over TLS 1.3 (TLS_AES_128_GCM_SHA256); kernel TLS offload"
FAST_S = 5.0     # a mismatch must end well before connect_timeout_ms (10 s by default)


def pattern(seed, offset, length):
    """runtime/pattern.c's bytes of (seed) at [offset, offset + length), offset 8-aligned."""
    m = (1 << 64) - 1
    out = bytearray()
    for idx in range(offset // 8, (offset + length + 7) // 8):
        z = (idx + 0x9e3779b97f4a7c15 * (seed + 1)) & m
        z = ((z ^ (z >> 30)) * 0xbf58476d1ce4e5b9) & m
        z = ((z ^ (z >> 27)) * 0x94d049bb133111eb) & m
        out += struct.pack("<Q", z ^ (z >> 31))
    return bytes(out[:length])


def log_lines(p):
    with p.cond:
        return p.out + p.err


def wait_log(p, needle, timeout, what):
    got = wait_for(lambda: any(needle in ln for ln in log_lines(p)), timeout)
    check(got, what, f"a line with {needle!r}", "none", p)


def verify_run(ctx, srv, op, tls, sizes="16K,1M", iters=100):
    """kvlane-perf --OP --verify against @srv's [segment.kv]; returns the bytes it moved."""
    args = [*tls, f"--{op}", "--verify", "--json", "-s", sizes, "-n", str(iters),
            "--segment", "kv", "--seed", str(KV_SEED), "--seg-size", "16M", srv.addr]
    rc, p = ctx.perf_run(op, args, mem_mb=512, timeout=90)
    check_eq(rc, 0, f"kvlane-perf --{op} --verify: exit status", p, srv)
    moved = 0
    for o in dp.json_lines(p, f"kvlane-perf --{op}"):
        s = o["bytes_per_msg"]
        want = {"result": "ok", "completed_ok": iters, "failed": 0, "verify": True,
                "verified_bytes": s * iters, "verify_error": None}
        check_eq({k: o.get(k) for k in want}, want, f"--{op} {s} B over TLS: counts", p)
        moved += o["bytes"] + o["verify_read_bytes"] + o["verify_write_bytes"]
    return moved, p


# ---- tls_move ----

def scenario_tls_move(ctx):
    srv = ctx.kvlaned("srv", args=[*KV_RW, *TLS_ON])
    tel = srv.telemetry()
    total = 0
    for op in ("read", "write"):
        moved, p = verify_run(ctx, srv, op, TLS_ON)
        total += moved
        wait_log(p, TLS_LOG, 1, f"kvlane-perf --{op}: its data connections' TLS")
        log(f"--{op} --verify over TLS: {moved / 2**20:.1f} MiB, every byte verified")
    wait_log(srv, TLS_LOG, 1, "kvlaned: its data connections' TLS")
    line = [ln for ln in log_lines(srv) if TLS_LOG in ln][0]
    log(f"kvlaned: {line.split('kvlane: ', 1)[-1]}")
    seen = wait_for(lambda: cmd(tel, "/kvlane/stats", srv).get("tcp/served_bytes") == total,
                    dp.SETTLE_TIMEOUT_S)
    check(seen, "kvlaned's tcp/served_bytes", total,
          cmd(tel, "/kvlane/stats", srv).get("tcp/served_bytes"), srv)
    srv.stop()


# ---- tls_sniff ----

ETH_P_ALL, PACKET_OUTGOING = 0x0003, 4


class Sniffer:
    """TCP payloads on lo of connections made to @ports while it runs, each packet once (as it
    leaves), by direction. A connection counts only when its SYN went to one of @ports: another
    test's connection on lo whose ephemeral port happens to equal one of them (the ports are
    picked free before kvlaned binds them) is left out and counted in @foreign."""

    def __init__(self, ports):
        self.ports = set(ports)
        self.flows = {}
        self.conns = set()  # (client port, server port) from SYNs to @ports
        self.packets = 0
        self.foreign = 0
        self.stop = threading.Event()
        self.s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
        try:
            self.s.setsockopt(socket.SOL_SOCKET, 33, 64 << 20)  # SO_RCVBUFFORCE: no drops
        except OSError:
            self.s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 << 20)
        self.s.bind(("lo", 0))
        self.s.settimeout(0.1)
        self.t = threading.Thread(target=self._run, daemon=True)
        self.t.start()

    def _run(self):
        while not self.stop.is_set():
            try:
                pkt, addr = self.s.recvfrom(1 << 18)
            except socket.timeout:
                continue
            if addr[2] != PACKET_OUTGOING or len(pkt) < 34 or pkt[12:14] != b"\x08\x00":
                continue
            ip = pkt[14:]
            ihl = (ip[0] & 15) * 4
            if ip[9] != 6:
                continue
            tot = struct.unpack(">H", ip[2:4])[0]
            tcp = ip[ihl:tot]
            sport, dport = struct.unpack(">HH", tcp[:4])
            if sport not in self.ports and dport not in self.ports:
                continue
            if tcp[13] & 0x12 == 0x02 and dport in self.ports:  # SYN without ACK: ours
                self.conns.add((sport, dport))
            payload = tcp[(tcp[12] >> 4) * 4:]
            if payload and (sport, dport) not in self.conns and (dport, sport) not in self.conns:
                self.foreign += 1
                continue
            if payload:
                self.packets += 1
                self.flows.setdefault((sport, dport), bytearray()).extend(payload)

    def finish(self):
        time.sleep(0.3)
        self.stop.set()
        self.t.join(2)
        self.s.close()
        return self.flows


def sniff_run(ctx, mode):
    """kvlaned and kvlane-perf on tls = @mode, captured; returns (wire bytes, bytes moved)."""
    data_port = free_port()
    tls = TLS_ON if mode == "on" else TLS_OFF
    srv = ctx.kvlaned(f"srv_{mode}", args=[*KV_RW, *tls, "--set",
                                           f"nic.lo.data_port={data_port}"])
    ctl_port = int(srv.addr.rsplit(":", 1)[1])
    sn = Sniffer([ctl_port, data_port])
    moved, p = verify_run(ctx, srv, "read", tls, sizes="64K", iters=20)
    flows = sn.finish()
    srv.stop()
    wire = b"".join(bytes(b) for b in flows.values())
    data = sum(len(b) for (s, d), b in flows.items() if data_port in (s, d))
    log(f"tls = {mode}: {sn.packets} TCP segments of {len(sn.conns)} connections to kvlaned, "
        f"{len(wire)} payload bytes captured ({data} on the data port {data_port}), {moved} "
        f"bytes moved; {sn.foreign} segments of other connections on those ports left out")
    # The capture saw the whole transfer: what is absent below was on the wire, encrypted.
    check(data >= moved, f"tls = {mode}: bytes captured on the data port",
          f">= the {moved} bytes moved", data, srv, p)
    return wire


def scenario_tls_sniff(ctx):
    try:
        socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL)).close()
    except PermissionError:
        print("SKIP tls_sniff: capturing lo needs CAP_NET_RAW (run as root)", flush=True)
        sys.exit(77)
    secret_view = {
        "the segment's pattern (its first 64 bytes)": pattern(KV_SEED, 0, 64),
        "the pattern 64 KiB in": pattern(KV_SEED, 65536, 64),
        "a data frame's magic KVLD": b"KVLD",
        "a control frame's magic KVLC": b"KVLC",
        "the client's name in its HELLO": b"kvlane-perf",
    }
    off = sniff_run(ctx, "off")
    for what, needle in secret_view.items():
        check(needle in off, f"tls = off: {what} on the wire", "present (cleartext)",
              "absent: the capture is not seeing the session", ctx)
    log("tls = off: " + ", ".join(secret_view) + ": all on the wire")
    on = sniff_run(ctx, "on")
    for what, needle in secret_view.items():
        check(needle not in on, f"tls = on: {what} on the wire", "absent",
              f"found at byte {on.find(needle)}", ctx)
    records = on.count(b"\x17\x03\x03")
    check(records > 0 and on[:3] == b"\x16\x03\x01", "tls = on: what the wire carries",
          "a TLS ClientHello first, then application-data records",
          f"first bytes {on[:3].hex()}, {records} record headers", ctx)
    log(f"tls = on: none of them on the wire; a ClientHello, then {records} "
        "application-data record headers")


# ---- tls_mismatch ----

def scenario_tls_mismatch(ctx):
    for srv_mode, cli_mode, cli_says, srv_says in (
            ("on", "off",
             ["TLS mismatch", "the peer runs [control] tls = on",
              "this side has [control] tls = off"],
             "the peer speaks kvlane in cleartext ([control] tls = off there), this side "
             "has [control] tls = on"),
            ("off", "on",
             ["TLS mismatch", "the peer speaks kvlane in cleartext ([control] tls = off "
              "there)", "this side has [control] tls = on"],
             "the peer opened TLS ([control] tls = on there), this side has [control] tls = "
             "off")):
        srv = ctx.kvlaned(f"srv_{srv_mode}", args=TLS_ON if srv_mode == "on" else TLS_OFF)
        t0 = time.monotonic()
        rc, p = ctx.perf_run(f"cli_{cli_mode}", [*(TLS_ON if cli_mode == "on" else TLS_OFF),
                                                 "--read", "-s", "4K", "-n", "10", srv.addr])
        secs = time.monotonic() - t0
        check(rc != 0, f"client tls = {cli_mode} against a server on {srv_mode}: exit status",
              "not 0", rc, p, srv)
        err = [ln for ln in p.err if "cannot connect" in ln]
        check(err and all(w in err[0] for w in cli_says), f"client tls = {cli_mode}: its error",
              " and ".join(repr(w) for w in cli_says), err, p)
        check(secs < FAST_S, f"client tls = {cli_mode}: how fast it failed",
              f"under {FAST_S} s (connect_timeout_ms is 10 s)", f"{secs:.2f} s", p)
        wait_log(srv, "TLS mismatch: " + srv_says, 2, f"server tls = {srv_mode}: its log")
        check(srv.running(), f"server tls = {srv_mode} after the mismatch", "running",
              "exited", srv)
        log(f"server {srv_mode}, client {cli_mode}: client exit {rc} after {secs:.2f} s: "
            f"{err[0]}")
        srv.stop()


# ---- tls_stranger ----

def scenario_tls_stranger(ctx):
    srv = ctx.kvlaned("srv", args=[*KV_RW, *TLS_ON])
    data_port = tp.data_port_of(srv)
    ports = {"control": srv.addr, "data": f"127.0.0.1:{data_port}"}
    tel = srv.telemetry()

    def sock(addr):
        host, port = addr.rsplit(":", 1)
        s = socket.create_connection((host, int(port)), timeout=5)
        ctx.clients.append(s)
        return s

    # Garbage, and a TLS record header announcing a 16 KiB record of bytes that never
    # decrypt: each connection closed by the server, like any bad frame.
    bad = {"an HTTP request": b"GET / HTTP/1.0\r\n\r\n" + os.urandom(300),
           "a bogus TLS record": b"\x16\x03\x01\x00\x40" + os.urandom(64)}
    for port_name, addr in ports.items():
        for what, data in bad.items():
            s = sock(addr)
            s.sendall(data)
            closed = wait_for(lambda: tp.drained_closed(s), 3)
            check(closed, f"{what} on the {port_name} port", "closed by kvlaned within 3 s",
                  "still open", srv)
    fails = cmd(tel, "/kvlane/stats", srv)["control/tls_failures"]
    check_eq(fails, 2 * len(bad), "/kvlane/stats control/tls_failures after them", srv)
    log(f"garbage and a bogus TLS record on the control and data ports: each closed, "
        f"control/tls_failures {fails}")

    # Partial records wait without costing the control thread a core.
    window_s = 3.0
    time.sleep(0.5)
    t0 = tp.thread_cpu_s(srv.pid, "kvl-ctrl")
    time.sleep(window_s)
    idle = tp.thread_cpu_s(srv.pid, "kvl-ctrl") - t0
    partial = []
    for port_name, addr in ports.items():
        for data in (b"\x16", b"\x16\x03\x01\x40\x00" + os.urandom(10)):
            for _ in range(2):
                s = sock(addr)
                s.sendall(data)
                partial.append(s)
    t0 = tp.thread_cpu_s(srv.pid, "kvl-ctrl")
    time.sleep(window_s)
    busy = tp.thread_cpu_s(srv.pid, "kvl-ctrl") - t0
    log(f"control thread CPU over {window_s:.0f} s: {idle:.2f} s idle, {busy:.2f} s with "
        f"{len(partial)} partial TLS records waiting")
    check(busy <= 0.1 * window_s + idle, "the control thread's CPU while partial records wait",
          f"at most {0.1 * window_s + idle:.2f} s in {window_s:.0f} s", f"{busy:.2f} s", srv)
    check(srv.running(), "kvlaned after the strangers", "running", "exited", srv)
    moved, _ = verify_run(ctx, srv, "read", TLS_ON, sizes="64K", iters=50)
    log(f"a real tls = on client after them: {moved} bytes read and verified")
    for s in partial:
        s.close()
    srv.stop()


# ---- tls_cost ----

COST_ITERS = int(os.environ.get("KVL_TLS_COST_ITERS", "2000"))


def bw_run(ctx, srv, tls, op, size):
    args = [*tls, f"--{op}", "--bw", "--json", "-s", size, "-n", str(COST_ITERS),
            "--segment", "kv", "--seg-size", "16M", srv.addr]
    rc, p = ctx.perf_run(f"bw_{op}", args, mem_mb=512, timeout=200)
    check_eq(rc, 0, f"kvlane-perf {' '.join(args)}: exit status", p, srv)
    o = dp.json_lines(p, "kvlane-perf --bw")[0]
    check_eq((o["result"], o["completed_ok"]), ("ok", COST_ITERS), "--bw: every transfer ok",
             p)
    return o["bw_avg_MBps"] * 2**20 / 1e9


def scenario_tls_cost(ctx):
    srv = {m: ctx.kvlaned(f"srv_{m}", args=[*KV_RW, *(TLS_ON if m == "on" else TLS_OFF)])
           for m in ("off", "on")}
    rows = []
    for op in ("read", "write"):
        for size in ("64K", "1M"):
            got = {"off": [], "on": []}
            for _ in range(2):  # interleaved: the host's load moves both the same way
                for m in ("off", "on"):
                    got[m].append(bw_run(ctx, srv[m], TLS_ON if m == "on" else TLS_OFF, op,
                                         size))
            best = {m: max(v) for m, v in got.items()}
            rows.append((op, size, best["off"], best["on"], best["on"] / best["off"]))
            log(f"{op} {size}: tls off {[round(x, 3) for x in got['off']]}, on "
                f"{[round(x, 3) for x in got['on']]} GB/s")
    print("| op | size | tls off GB/s | tls on GB/s | on/off |", flush=True)
    print("|---|---|---|---|---|", flush=True)
    for op, size, off, on, r in rows:
        print(f"| {op} | {size} | {off:.3f} | {on:.3f} | {r:.2f} |", flush=True)
    for s in srv.values():
        s.stop()


SCENARIOS = {
    "tls_move": scenario_tls_move,
    "tls_sniff": scenario_tls_sniff,
    "tls_mismatch": scenario_tls_mismatch,
    "tls_stranger": scenario_tls_stranger,
    "tls_cost": scenario_tls_cost,
}


def main(argv):
    return h.main(argv, SCENARIOS, LIMIT_S, ["PATH-TO-KVLANED", "PATH-TO-KVLANE-PERF"],
                  lambda sc, kvlaned, perf: dp.Ctx(sc, kvlaned, perf))


if __name__ == "__main__":
    sys.exit(main(sys.argv))
