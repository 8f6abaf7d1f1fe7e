#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""EAL tests of two kvlanes talking: a refused handshake, hostile clients, and `make demo`.

Usage: test_peers.py SCENARIO PATH-TO-KVLANED PATH-TO-KVLANE-KVDEMO, with KVL_SRC (repository
root) and optionally KVL_BUILD (build folder) in the environment. Exit 0 pass, 1 fail.

  wrong_secret  a kvlaned on config/default.ini, then: (a) kvlane-kvdemo holding another
                secret is refused and learns nothing; (b) a hand-written client that speaks
                the control protocol byte by byte sends a wrong proof: AUTH_FAIL, closed,
                nothing about the server's segments or data port; (c) garbage on the control
                port and an impossible frame header: closed, the server keeps answering;
                (d) a DATA_BIND with a made-up session on the data port: AUTH_FAIL
                (bad-session), closed. Controls: (b') the same probe with the right secret
                gets AUTH_OK, SEGMENTS and ENDPOINTS (so (b) is a real test), and (d') a
                DATA_BIND with that live session's id but no proof is refused too. Then the
                same kvlaned serves a good kvlane-kvdemo run, every byte verified.
  demo          tools/demo.py (what `make demo` runs): exit 0, every byte verified, 1 GiB per
                request, and the prefill served exactly requests x 1 GiB.
"""
import hashlib
import hmac
import os
import re
import secrets
import signal
import socket
import struct
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kvl_harness as h  # noqa: E402  (its own folder)
from kvl_harness import KVL_SRC, Fail, check, check_eq, cmd, log, wait_for  # noqa: E402

SCENARIO_LIMIT_S = 85  # the whole scenario, daemons included (meson's limit is higher)
RUN_TIMEOUT_S = 30     # one kvlane-kvdemo run
DEMO_TIMEOUT_S = 75    # the whole demo (it takes < 60 s)
SOCK_TIMEOUT_S = 5     # a raw client waiting for the server

LOG_LEVEL = ["--log-level", "lib.eal:warning"]
GIB = 1 << 30
KV_BYTES_DEFAULT = 32 * 2 * 16 * 32768  # [segment.kv] of default.ini: 32 MiB

# ---- the control protocol, written out from runtime/ctrl_proto.h and ctrl_proto.c ----
MAGIC = 0x434C564B  # "KVLC"
VERSION = 2
HDR = struct.Struct("<IHHII")  # magic, version, type, payload length, seq
HELLO, CHALLENGE, AUTH, AUTH_OK, AUTH_FAIL, SEGMENTS, ENDPOINTS = 1, 2, 3, 4, 5, 6, 7
HEARTBEAT, HEARTBEAT_ACK, DATA_BIND, DATA_BIND_OK, ERROR, BYE = 8, 9, 10, 11, 12, 13
TYPE_NAMES = {1: "HELLO", 2: "CHALLENGE", 3: "AUTH", 4: "AUTH_OK", 5: "AUTH_FAIL",
              6: "SEGMENTS", 7: "ENDPOINTS", 8: "HEARTBEAT", 9: "HEARTBEAT_ACK",
              10: "DATA_BIND", 11: "DATA_BIND_OK", 12: "ERROR", 13: "BYE"}
BAD_MAC, BAD_SESSION = 1, 2
NONCE_LEN = MAC_LEN = 32
# Frame types tolerated (empty) after AUTH_FAIL. The server sends nothing after it, and the
# test requires exactly that: () means silence. (BYE, ) would let an empty BYE through.
TOLERATED_AFTER_FAIL = ()


def frame(mtype, payload=b"", seq=0):
    return HDR.pack(MAGIC, VERSION, mtype, len(payload), seq) + payload


def wire_str(s):
    b = s.encode()
    assert len(b) < 64
    return bytes([len(b)]) + b


def hello_payload(name, nonce, min_v=VERSION, max_v=VERSION):
    return struct.pack("<HH", min_v, max_v) + wire_str(name) + nonce


def parse_frames(data):
    """[(type, seq, payload)] of the whole frames in @data, and the bytes left over."""
    out, off = [], 0
    while len(data) - off >= HDR.size:
        magic, ver, mtype, length, seq = HDR.unpack_from(data, off)
        if magic != MAGIC or ver != VERSION:
            raise Fail(f"a frame from the server\n  expected: magic 0x{MAGIC:08x} version "
                       f"{VERSION}\n  seen:     magic 0x{magic:08x} version {ver} at byte "
                       f"{off} of {data.hex()}\n")
        if len(data) - off - HDR.size < length:
            break
        out.append((mtype, seq, data[off + HDR.size:off + HDR.size + length]))
        off += HDR.size + length
    return out, data[off:]


def parse_challenge(p):
    """CHALLENGE {u16 version, str name, nonce[32], u64 session_id}."""
    version = struct.unpack_from("<H", p, 0)[0]
    n = p[2]
    name = p[3:3 + n].decode(errors="replace")
    nonce = p[3 + n:3 + n + NONCE_LEN]
    (session,) = struct.unpack_from("<Q", p, 3 + n + NONCE_LEN)
    if len(p) != 3 + n + NONCE_LEN + 8:
        raise Fail(f"CHALLENGE payload\n  expected: {3 + n + NONCE_LEN + 8} bytes\n"
                   f"  seen:     {len(p)} bytes: {p.hex()}\n")
    return version, name, nonce, session


def parse_segment_names(p):
    """SEGMENTS {u32 n, then per segment 48 fixed bytes and a name}: the names."""
    (n,), off, names = struct.unpack_from("<I", p, 0), 4, []
    for _ in range(n):
        off += 48
        names.append(p[off + 1:off + 1 + p[off]].decode(errors="replace"))
        off += 1 + p[off]
    return names


def parse_endpoints(p):
    """ENDPOINTS {u32 n, then per endpoint str nic, u8 transport, str addr}: the addresses."""
    (n,), off, addrs = struct.unpack_from("<I", p, 0), 4, []
    for _ in range(n):
        off += 1 + p[off]
        off += 1
        addrs.append(p[off + 1:off + 1 + p[off]].decode(errors="replace"))
        off += 1 + p[off]
    return addrs


def load_secret(path):
    """The secret as kvl_secret_load reads it: the file's bytes, one trailing newline off."""
    with open(path, "rb") as f:
        b = f.read()
    return b[:-2] if b.endswith(b"\r\n") else b[:-1] if b.endswith(b"\n") else b


def handshake_mac(secret, label, hello, challenge):
    """kvl_auth_client_mac / kvl_auth_server_mac: HMAC-SHA256 over a length-prefixed label,
    the HELLO (min, max, name, nonce) and the CHALLENGE (version, name, nonce, session)."""
    (min_v, max_v, name_c, nonce_c), (ver, name_s, nonce_s, session) = hello, challenge
    msg = (wire_str(label) + struct.pack("<HH", min_v, max_v) + wire_str(name_c) + nonce_c
           + struct.pack("<H", ver) + wire_str(name_s) + nonce_s + struct.pack("<Q", session))
    return hmac.new(secret, msg, hashlib.sha256).digest()


def describe_frames(frames):
    return ", ".join(f"{TYPE_NAMES.get(t, t)}({p.hex() or '-'})" for t, _, p in frames) or "none"


class Ctx(h.Ctx):
    """A scenario with kvlaned and kvlane-kvdemo, and raw sockets to the kvlaned."""

    def __init__(self, scenario, kvlaned, kvdemo):
        super().__init__(scenario, kvlaned, "peers")
        self.kvdemo = kvdemo

    def kvlaned_start(self):
        # In its own session, as the kvlane-kvdemo runs: a signal to this test's process
        # group (a terminal's ^C) reaches the test, which stops what it started.
        return self.kvlaned("srv", eal_extra=LOG_LEVEL, new_session=True)

    def kvdemo_run(self, addr, sets=(), args=(), name="decode"):
        prefix = self.unique(name)
        argv = [self.kvdemo, *h.EAL, "-m", "256", "--file-prefix", prefix, *LOG_LEVEL, "--",
                "-c", h.DEFAULT_INI, *h.sets(h.LISTEN_ANY, f"runtime.name={name}", *sets),
                *args, addr]
        return h.Run(argv, self.rundir(prefix), RUN_TIMEOUT_S)

    def sock(self, addr):
        host, port = addr.rsplit(":", 1)
        s = socket.create_connection((host, int(port)), timeout=SOCK_TIMEOUT_S)
        s.settimeout(SOCK_TIMEOUT_S)
        self.clients.append(s)
        return s


def read_until_closed(s, what, *subjects):
    """Every byte the server sends until it closes; a Fail if it keeps the connection open."""
    data = b""
    while True:
        try:
            chunk = s.recv(65536)
        except socket.timeout:
            raise Fail(f"{what}\n  expected: the server closes the connection within "
                       f"{SOCK_TIMEOUT_S} s\n  seen:     still open; received "
                       f"{len(data)} bytes: {data.hex()}\n" + h.describe(*subjects)) from None
        except ConnectionResetError:
            return data, "reset"
        if not chunk:
            return data, "closed"
        data += chunk


def recv_frame(s, buf, what, *subjects):
    """One whole frame (waiting for it), and what is left in the buffer."""
    while True:
        frames, rest = parse_frames(buf)
        if frames:
            t, seq, p = frames[0]
            consumed = HDR.size + len(p)
            return (t, seq, p), buf[consumed:]
        try:
            chunk = s.recv(65536)
        except socket.timeout:
            chunk = None
        check(chunk, what, "a frame from the server",
              "nothing within 5 s" if chunk is None else f"connection closed after "
              f"{buf.hex() or 'nothing'}", *subjects)
        buf += chunk


def listening_ports(pid):
    """TCP ports @pid listens on at 127.0.0.1 (from /proc/net/tcp and its fds)."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        m = re.match(r"socket:\[(\d+)\]", target)
        if m:
            inodes.add(m.group(1))
    ports = []
    with open("/proc/net/tcp") as f:
        next(f)
        for line in f:
            col = line.split()
            local, state, inode = col[1], col[3], col[9]
            ip, port = local.split(":")
            if state == "0A" and inode in inodes and ip == "0100007F":
                ports.append(int(port, 16))
    return sorted(ports)


def peers_rows(tel, *procs):
    """/kvlane/peers (column form) as a list of row dicts."""
    return h.table_rows(cmd(tel, "/kvlane/peers", *procs), (), "/kvlane/peers", *procs)


# ---- scenarios ----

def scenario_wrong_secret(ctx):
    srv = ctx.kvlaned_start()
    tel = srv.telemetry()
    ctl_port = int(srv.addr.rsplit(":", 1)[1])
    ports = listening_ports(srv.pid)
    data_ports = [p for p in ports if p != ctl_port]
    check(ctl_port in ports and len(data_ports) == 1, "kvlaned's listening ports on 127.0.0.1",
          f"the control port {ctl_port} and one data port (nic.lo)", ports, srv)
    data_port = data_ports[0]
    log(f"kvlaned up: control {srv.addr}, data port {data_port} (found in /proc/net/tcp)")
    stats = cmd(tel, "/kvlane/stats", srv)
    check_eq(stats["control/auth_failures"], 0, "auth_failures at start", srv)

    # (a) kvlane-kvdemo with another secret: refused, learns nothing.
    other = os.path.join(ctx.tmp, "other.secret")
    with open(other, "w") as f:
        f.write(secrets.token_hex(16))  # 32 bytes, not the demo's
    os.chmod(other, 0o600)
    r = ctx.kvdemo_run(srv.addr, sets=[f"control.secret_file={other}"], name="intruder")
    both = r.stdout + "\n" + r.stderr
    check(r.rc not in (0, None) and not r.timed_out, "kvlane-kvdemo with another secret",
          "a non-zero exit", f"status {r.rc}", r)
    check(re.search(r"cannot connect.*(refused|proof)", both, re.I), "its message",
          "'cannot connect ... refused' or '... proof ...'", "neither", r)
    leaked = [ln for ln in both.splitlines()
              if re.search(r'"kv"|layers|blocks|segment \S|verified', ln)]
    check(not leaked, "kvlane-kvdemo refused", "no line about the server's segments",
          leaked, r)
    msg = next(ln for ln in both.splitlines() if re.search(r"cannot connect", ln))
    log(f"(a) another secret: exit {r.rc} in {r.secs:.1f} s: {msg.strip()}")
    check_eq(cmd(tel, "/kvlane/stats", srv)["control/auth_failures"], 1,
             "/kvlane/stats control/auth_failures after (a)", srv)
    rows = wait_for(lambda: [x for x in peers_rows(tel, srv) if x["state"] == "dead"], 5)
    rows_all = peers_rows(tel, srv)
    check(len(rows_all) == 1 and rows, "/kvlane/peers after (a)",
          "one row, state dead", rows_all, srv)
    row = rows_all[0]
    check_eq((row["state"], row["segments"], row["data_conns"], row["name"]),
             ("dead", 0, 0, ""), "the refused peer's row (state, segments, data_conns, name)",
             srv)
    log(f"    /kvlane/peers: {row['addr']} state {row['state']}, segments {row['segments']}, "
        f"fail_reason {row['fail_reason']!r}; auth_failures 1")

    # (b) The handshake by hand, with a wrong proof.
    s = ctx.sock(srv.addr)
    nonce_c = secrets.token_bytes(NONCE_LEN)
    s.sendall(frame(HELLO, hello_payload("raw-probe", nonce_c)))
    (t, _, p), buf = recv_frame(s, b"", "answer to HELLO", srv)
    check_eq(TYPE_NAMES.get(t, t), "CHALLENGE", "the answer to a well-formed HELLO", srv)
    version, name, nonce_s, session = parse_challenge(p)
    check_eq((version, name), (VERSION, "kvlane-default"), "CHALLENGE version and name", srv)
    s.sendall(frame(AUTH, secrets.token_bytes(MAC_LEN), seq=1))
    rest, how = read_until_closed(s, "after a wrong AUTH", srv)
    frames, tail = parse_frames(buf + rest)
    types = [TYPE_NAMES.get(ft, ft) for ft, _, _ in frames]
    check(frames and frames[0][0] == AUTH_FAIL, "the answer to a wrong AUTH", "AUTH_FAIL",
          describe_frames(frames), srv)
    check_eq(struct.unpack("<H", frames[0][2])[0], BAD_MAC, "AUTH_FAIL reason (1 = bad-mac)",
             srv)
    extra = [(ft, fp) for ft, _, fp in frames[1:]
             if not (ft in TOLERATED_AFTER_FAIL and fp == b"")]
    check(not extra and not tail, "what follows AUTH_FAIL",
          "nothing" + (" (an empty BYE tolerated)" if TOLERATED_AFTER_FAIL else "")
          + ", then the connection closed",
          describe_frames(frames[1:]) + (f", and {len(tail)} stray bytes" if tail else ""), srv)
    check(not any(ft in (SEGMENTS, ENDPOINTS, AUTH_OK) for ft, _, _ in frames),
          "frames after a wrong AUTH", "no AUTH_OK, SEGMENTS or ENDPOINTS", types, srv)
    after = buf + rest
    check(b"kv" not in after and str(data_port).encode() not in after,
          "bytes after the CHALLENGE", f"neither \"kv\" nor the data port {data_port}",
          after.hex(), srv)
    log(f"(b) raw HELLO -> CHALLENGE from \"{name}\" (session {session:#x}); wrong AUTH -> "
        f"{', '.join(types)}; connection {how}")
    check_eq(cmd(tel, "/kvlane/stats", srv)["control/auth_failures"], 2,
             "control/auth_failures after (b)", srv)
    rows = wait_for(lambda: [(x["state"], x["segments"]) for x in peers_rows(tel, srv)
                             if (x["state"], x["segments"]) != ("dead", 0)] == [], 5)
    check(rows, "/kvlane/peers after (b)", "every row dead, 0 segments", peers_rows(tel, srv), srv)

    # (b') The same probe with the right secret, as a control: the proofs computed here verify
    # both ways and the server then tells what (b) did not get. Its connection stays open so
    # that (d') can try its session id.
    secret = load_secret(os.path.join(KVL_SRC, "config", "demo.secret"))
    good = ctx.sock(srv.addr)
    nonce_c = secrets.token_bytes(NONCE_LEN)
    hello = (VERSION, VERSION, "raw-probe-ok", nonce_c)
    good.sendall(frame(HELLO, hello_payload("raw-probe-ok", nonce_c)))
    (t, _, p), buf = recv_frame(good, b"", "answer to HELLO", srv)
    check_eq(TYPE_NAMES.get(t, t), "CHALLENGE", "the answer to HELLO (right secret)", srv)
    challenge = parse_challenge(p)
    good.sendall(frame(AUTH, handshake_mac(secret, "kvlane-v1 client proof", hello,
                                           challenge), seq=1))
    got = []
    while len(got) < 3:
        f, buf = recv_frame(good, buf, "AUTH_OK, SEGMENTS, ENDPOINTS after a right AUTH", srv)
        got.append(f)
    check_eq([TYPE_NAMES.get(t, t) for t, _, _ in got], ["AUTH_OK", "SEGMENTS", "ENDPOINTS"],
             "what a right AUTH gets", srv)
    check_eq(got[0][2], handshake_mac(secret, "kvlane-v1 server proof", hello, challenge),
             "the server's proof in AUTH_OK (as computed here)", srv)
    names, addrs = parse_segment_names(got[1][2]), parse_endpoints(got[2][2])
    check("kv" in names and f"127.0.0.1:{data_port}" in addrs, "SEGMENTS and ENDPOINTS",
          f"segment \"kv\" and endpoint 127.0.0.1:{data_port}", (names, addrs), srv)
    log(f"(b') control, right secret: AUTH_OK (server proof verified here), SEGMENTS {names}, "
        f"ENDPOINTS {addrs}")

    # (c) Garbage: 64 random bytes (never the magic), then a header with an impossible length.
    garbage = secrets.token_bytes(64)
    while garbage[:4] == struct.pack("<I", MAGIC):
        garbage = secrets.token_bytes(64)
    for what, payload in (("64 random bytes", garbage),
                          ("a header announcing a 1 GiB HELLO",
                           HDR.pack(MAGIC, VERSION, HELLO, GIB, 0))):
        s = ctx.sock(srv.addr)
        s.sendall(payload)
        got, how = read_until_closed(s, f"after {what}", srv)
        frames, _ = parse_frames(got) if got[:4] == struct.pack("<I", MAGIC) else ([], got)
        check(all(ft in (BYE, ERROR) for ft, _, _ in frames) and len(got) ==
              sum(HDR.size + len(fp) for _, _, fp in frames), f"the answer to {what}",
              "at most BYE or ERROR frames, then closed", got.hex() or "nothing", srv)
        check(srv.running(), f"kvlaned after {what}", "still running", "exited", srv)
        info = h.query(tel, "/kvlane/info", srv)
        check(isinstance(info, dict) and info.get("pid") == srv.pid,
              f"/kvlane/info after {what}", f"pid {srv.pid}", info, srv)
        log(f"(c) {what}: connection {how} after {describe_frames(frames)}; server answers "
            f"telemetry")

    # (c') A HELLO from a kvlane of protocol version 1: refused, and the log names both versions.
    # Warnings about unauthenticated connections are limited to one a second: wait that out.
    time.sleep(1.1)
    s = ctx.sock(srv.addr)
    old = hello_payload("old-kvlane", secrets.token_bytes(NONCE_LEN), 1, 1)
    s.sendall(HDR.pack(MAGIC, 1, HELLO, len(old), 0) + old)
    got, how = read_until_closed(s, "after a version 1 HELLO", srv)
    rx = re.compile(r"control protocol version 1 from the peer, this kvlane speaks "
                    rf"{VERSION}: run the same kvlane release on both ends")
    deadline = time.monotonic() + 5
    while not rx.search(srv.stderr) and time.monotonic() < deadline:
        time.sleep(0.05)
    m = rx.search(srv.stderr)
    check(m is not None, "the log after a version 1 HELLO", rx.pattern,
          "nothing within 5 s", srv)
    check(srv.running(), "kvlaned after a version 1 HELLO", "still running", "exited", srv)
    log(f"(c') version 1 HELLO: connection {how}; log: {m.group(0)}")

    # (d) A data connection that claims a session nobody opened.
    s = ctx.sock(f"127.0.0.1:{data_port}")
    bind = struct.pack("<QI", int.from_bytes(secrets.token_bytes(8), "little"), 0) + \
        secrets.token_bytes(MAC_LEN)
    s.sendall(frame(DATA_BIND, bind))
    got, how = read_until_closed(s, "after a DATA_BIND with a made-up session", srv)
    frames, tail = parse_frames(got)
    check(len(frames) == 1 and frames[0][0] == AUTH_FAIL and not tail,
          "the answer to DATA_BIND with a made-up session", "AUTH_FAIL only, then closed",
          describe_frames(frames) + (f" + {tail.hex()}" if tail else ""), srv)
    check_eq(struct.unpack("<H", frames[0][2])[0], BAD_SESSION,
             "AUTH_FAIL reason (2 = bad-session)", srv)
    log(f"(d) DATA_BIND on data port {data_port} with a made-up session -> AUTH_FAIL "
        f"(bad-session); connection {how}")
    check_eq(cmd(tel, "/kvlane/stats", srv)["control/auth_failures"], 3,
             "control/auth_failures after (d)", srv)

    # (d') The session id is no secret (CHALLENGE carries it before any proof): with the id
    # of the live session of (b') but no proof of the secret, a DATA_BIND is still refused.
    session = challenge[3]
    s = ctx.sock(f"127.0.0.1:{data_port}")
    s.sendall(frame(DATA_BIND, struct.pack("<QI", session, 0) + secrets.token_bytes(MAC_LEN)))
    got, how = read_until_closed(s, "after a DATA_BIND with a live session and a wrong proof",
                                 srv)
    frames, tail = parse_frames(got)
    check(len(frames) == 1 and frames[0][0] == AUTH_FAIL and not tail,
          "the answer to DATA_BIND with a live session id and a wrong proof",
          "AUTH_FAIL only, then closed",
          describe_frames(frames) + (f" + {tail.hex()}" if tail else ""), srv)
    log(f"(d') DATA_BIND with the live session id of (b') and a wrong proof -> AUTH_FAIL "
        f"(reason {struct.unpack('<H', frames[0][2])[0]}); connection {how}")
    good.close()
    stats = cmd(tel, "/kvlane/stats", srv)
    check_eq(stats["control/auth_failures"], 4, "control/auth_failures after (d')", srv)
    check_eq(stats["tcp/served_bytes"], 0, "bytes served to the bad clients", srv)

    # The bad clients cost nothing: a good client is served, every byte verified.
    r = ctx.kvdemo_run(srv.addr, args=["--requests", "2"])
    check(r.rc == 0 and re.search(r"^verified: every byte", r.stdout, re.M),
          "kvlane-kvdemo with the right secret, after the bad clients",
          "exit 0 and 'verified: every byte'", f"status {r.rc}", r)
    m = re.search(r"^\s*request 2/2 (\d+) bytes in", r.stdout, re.M)
    check(m and int(m.group(1)) == KV_BYTES_DEFAULT, "bytes per request",
          KV_BYTES_DEFAULT, m and m.group(1), r)
    stats = cmd(tel, "/kvlane/stats", srv)
    check_eq(stats["tcp/served_bytes"], 2 * KV_BYTES_DEFAULT,
             "tcp/served_bytes after the good run", srv)
    refused = {k: v for k, v in stats.items() if k.startswith("tcp/refused/") and v}
    check_eq(refused, {}, "requests the server refused", srv)
    check_eq(stats["control/auth_failures"], 4, "auth_failures after the good run", srv)
    log(f"good kvlane-kvdemo: exit 0 in {r.secs:.1f} s, 2 x {KV_BYTES_DEFAULT} bytes served "
        f"and verified; auth_failures still 4")

    srv.stop(signal.SIGTERM)  # and expects exit 0
    srv.wait_line(r"^kvlaned: stopped \(SIGTERM\)", 2, what="the stop summary")


def demo_leftovers(demo_pid):
    """Processes the demo started (by their --file-prefix) that still run."""
    left = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                words = f.read().split(b"\0")
        except OSError:
            continue
        if any(re.fullmatch(rb"kvlane-demo-(prefill|decode)-%d" % demo_pid, a) for a in words):
            left.append(int(pid))
    return left


def scenario_demo(ctx):
    build = os.environ.get("KVL_BUILD") or os.path.dirname(os.path.abspath(ctx.kvlaned))
    argv = [sys.executable, os.path.join(KVL_SRC, "tools", "demo.py"), build,
            "config/default.ini"]
    # Without RUNTIME_DIRECTORY: the demo makes its own, one per process.
    seen = h.Run(argv, None, DEMO_TIMEOUT_S, cwd=KVL_SRC, merge=True)
    out, secs = seen.stdout, seen.secs
    left = demo_leftovers(seen.pid)
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    check(not seen.timed_out, "make demo's duration", f"< {DEMO_TIMEOUT_S} s",
          f"still running after {secs:.0f} s", seen)
    check_eq(left, [], "processes the demo left running", seen)
    check_eq(seen.rc, 0, "demo.py exit status", seen)
    check(re.search(r"^\s*verified: every byte", out, re.M), "the decode report",
          "'verified: every byte'", "no such line", seen)
    reqs = re.findall(r"^\s*request (\d+)/(\d+) (\d+) bytes in", out, re.M)
    check(reqs and len(reqs) == int(reqs[0][1]), "per-request lines",
          "one 'request i/N ... bytes in' line per request", reqs, seen)
    n = len(reqs)
    check(all(int(b) == GIB for _, _, b in reqs), "bytes moved per request",
          f"{GIB} (1 GiB) each", [int(b) for _, _, b in reqs], seen)
    m = re.search(r"/kvlane/stats\s+served \d+ READs, (\d+) bytes", out)
    check(m, "the prefill's served bytes in the demo output", "a '/kvlane/stats served ...' "
          "line", "none", seen)
    check_eq(int(m.group(1)), n * GIB, f"bytes the prefill served ({n} requests x 1 GiB)",
             seen)
    check(re.search(r"^demo: OK", out, re.M), "the demo's last word", "'demo: OK ...'",
          "none", seen)
    rate = re.search(r"moved .*?: ([\d.]+) GB/s", out)
    log(f"demo: exit 0 in {secs:.1f} s, {n} x {GIB} bytes verified, prefill served "
        f"{m.group(1)} bytes" + (f", {rate.group(1)} GB/s" if rate else ""))


def scenario_preauth_flood(ctx):
    """Anyone who reaches the port may open connections: unauthenticated ones hold at most
    16 peer slots, the oldest is evicted past that, and a real peer still gets in."""
    srv = ctx.kvlaned_start()
    tel = srv.telemetry()
    idle = []
    try:
        for _ in range(40):
            idle.append(ctx.sock(srv.addr))
        closed = wait_for(lambda: sum(closed_now(s) for s in idle) >= 24, 5)
        n_closed = sum(closed_now(s) for s in idle)
        check(closed and n_closed == 24, "40 silent connections to the control port",
              "24 closed (the oldest, 16 left to the handshake timeout)", n_closed, srv)
        check(all(closed_now(s) for s in idle[:24]) and not any(closed_now(s) for s in idle[24:]),
              "which connections were closed", "the 24 oldest",
              [i for i, s in enumerate(idle) if closed_now(s)], srv)
        evicted = cmd(tel, "/kvlane/stats", srv)["control/preauth_evicted"]
        check_eq(evicted, 24, "/kvlane/stats control/preauth_evicted", srv)
        r = ctx.kvdemo_run(srv.addr)
        check(r.rc == 0 and "verified: every byte" in r.stdout,
              "a real peer while 16 unauthenticated connections wait",
              "connects and verifies", f"exit {r.rc}", r)
        check(closed_now(idle[24]), "the oldest waiting connection when the real peer came",
              "evicted to make room", "still open", srv)
        log(f"40 idle connections: the 24 oldest evicted (preauth_evicted {evicted}); a real "
            f"peer evicted the next oldest, connected and verified its KV")
    finally:
        for s in idle:
            s.close()


def closed_now(s):
    """True once the server has closed @s (EOF or reset), without blocking."""
    try:
        s.setblocking(False)
        return s.recv(1, socket.MSG_PEEK) == b""
    except BlockingIOError:
        return False
    except OSError:
        return True


SCENARIOS = {"wrong_secret": scenario_wrong_secret, "demo": scenario_demo,
             "preauth_flood": scenario_preauth_flood}


def main(argv):
    return h.main(argv, SCENARIOS, SCENARIO_LIMIT_S, ["PATH-TO-KVLANED", "PATH-TO-KVLANE-KVDEMO"],
                  Ctx)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
