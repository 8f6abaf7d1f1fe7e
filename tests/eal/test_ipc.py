#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""EAL tests of the host identity over the control path (issue 20: the ipc transport's gate).

Usage: test_ipc.py SCENARIO PATH-TO-KVLANED, with KVL_SRC in the environment. Exit 0 pass.

  host_same   two kvlaneds on this host, one a [control] peers client of the other: both
              /kvlane/peers rows say same_host true; neither has a GPU segment or VRAM here,
              so transport_ipc says why not and the data connections are tcp's.
  host_other  the same with KVLANE_TEST_HOST_ID set on the client (another machine id): both
              say same_host false, transport_ipc "another host".
  host_ipc_off the client with [nic.lo] ipc = off: same_host still true, transport_ipc
              "ipc = off".
  host_raw    a hand-written level-4 client: CHALLENGE answers version 4, HOST comes right
              after AUTH_OK with the id this test computes from /etc/machine-id and boot_id
              and kvlaned's pid; a garbled id gets same_host false and IPC_SEGS with n = 0;
              handles it then sends are refused (logged), and the server stays up. A second
              client sends the right id: same_host true; then another HOST: closed.
  host_level3 a level-3 client (an older kvlane) gets no HOST, and a HOST it sends anyway
              closes the connection.
"""
import hashlib
import os
import secrets
import struct
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kvl_harness as h  # noqa: E402
import test_peers as tp  # noqa: E402  (the raw control-protocol client)
from kvl_harness import KVL_SRC, Fail, check, check_eq, log, wait_for  # noqa: E402

LIMIT_S = 85
HOST, IPC_SEGS = 20, 21
FEATURE_HOST = 4
NAMES = {**tp.TYPE_NAMES, HOST: "HOST", IPC_SEGS: "IPC_SEGS", 15: "RKEYS"}


def host_id():
    """kvl_host_id(): SHA-256 of the label, the machine id and the boot id, each NUL-ended."""
    def first_line(path):
        try:
            with open(path, "rb") as f:
                return f.read().split(b"\n")[0]
        except OSError:
            return b""
    mid = first_line("/etc/machine-id") or first_line("/var/lib/dbus/machine-id")
    boot = first_line("/proc/sys/kernel/random/boot_id")
    return hashlib.sha256(b"kvlane host id v1\0" + mid + b"\0" + boot + b"\0").digest()


class Ctx(h.Ctx):
    def __init__(self, scenario, kvlaned):
        super().__init__(scenario, kvlaned, "ipc")

    def sock(self, addr):
        return tp.Ctx.sock(self, addr)


def row_of(tel, proc, role):
    rows = [r for r in tp.peers_rows(tel, proc) if r["role"] == role]
    return rows[0] if len(rows) == 1 else None


def nic_lo(tel, proc):
    """The lo row of /kvlane/nics: its ipc, ipc_opened and ipc_note columns (issue 20)."""
    rows = h.table_rows(h.cmd(tel, "/kvlane/nics", proc), ["nic", "ipc", "ipc_opened", "ipc_note"],
                        "/kvlane/nics", proc)
    rows = [r for r in rows if r["nic"] == "lo"]
    check_eq(len(rows), 1, "/kvlane/nics rows of lo", proc)
    return rows[0]


def check_nic_note(tel, proc, ipc, note, *procs):
    """/kvlane/nics says why the NIC does not read the peer over ipc: @note, within 5 s (the
    decision is taken as the data connections are made)."""
    n = {}

    def seen():
        n.update(nic_lo(tel, proc))
        return n["ipc_note"] == note
    wait_for(seen, 5)
    check_eq({k: n[k] for k in ("ipc", "ipc_opened", "ipc_note")},
             {"ipc": ipc, "ipc_opened": 0, "ipc_note": note},
             "/kvlane/nics lo: ipc, ipc_opened, ipc_note", *procs)


def pair(ctx, client_env=None):
    srv = ctx.kvlaned("srv", eal_extra=tp.LOG_LEVEL)
    old = dict(os.environ)
    if client_env:
        os.environ.update(client_env)
    try:
        cli = ctx.kvlaned("cli", eal_extra=tp.LOG_LEVEL,
                          args=h.sets(f"control.peers={srv.addr}", "runtime.name=cli"))
    finally:
        os.environ.clear()
        os.environ.update(old)
    ts, tc = srv.telemetry(), cli.telemetry()

    def ready():
        a, b = row_of(ts, srv, "server"), row_of(tc, cli, "client")
        return a and b and a["state"] == "ready" and b["state"] == "ready"
    if not wait_for(ready, 20):
        raise Fail("both peers ready within 20 s\n" + h.describe(srv, cli))
    return srv, cli, row_of(ts, srv, "server"), row_of(tc, cli, "client")


def scenario_host_same(ctx):
    srv, cli, s, c = pair(ctx)
    log(f"server row: {s}\nclient row: {c}")
    check_eq(s["same_host"], "true", "the server's view of a client on this host", srv, cli)
    check_eq(c["same_host"], "true", "the client's view of a server on this host", srv, cli)
    check_eq(c["ipc_segments"], 0, "GPU segments the server exported (it has none)", srv, cli)
    check_eq(c["transport_ipc"], "the peer exports no GPU segment",
             "why the client does not read over ipc", srv, cli)
    check_nic_note(cli.telemetry(), cli, "auto",
                   f"peer {c['name']} ({c['addr']}): the peer exports no GPU segment", srv, cli)
    check(c["data_conns"] >= 1, "the client's data connections", ">= 1 (tcp)",
          c["data_conns"], srv, cli)


def scenario_host_other(ctx):
    srv, cli, s, c = pair(ctx, {"KVLANE_TEST_HOST_ID": "another-machine"})
    check_eq(s["same_host"], "false", "the server's view of a client with another id", srv, cli)
    check_eq(c["same_host"], "false", "the client's view", srv, cli)
    check_eq(c["transport_ipc"], "another host", "why not ipc", srv, cli)
    check_eq(s["transport_ipc"], "another host", "why not ipc (server)", srv, cli)
    check_nic_note(cli.telemetry(), cli, "auto", f"peer {c['name']} ({c['addr']}): another host",
                   srv, cli)
    check(c["data_conns"] >= 1, "the client's data connections", ">= 1 (tcp)",
          c["data_conns"], srv, cli)


def scenario_host_ipc_off(ctx):
    srv = ctx.kvlaned("srv", eal_extra=tp.LOG_LEVEL)
    cli = ctx.kvlaned("cli", eal_extra=tp.LOG_LEVEL,
                      args=h.sets(f"control.peers={srv.addr}", "runtime.name=cli",
                                  "nic.lo.ipc=off"))
    tc = cli.telemetry()
    if not wait_for(lambda: (row_of(tc, cli, "client") or {}).get("state") == "ready", 20):
        raise Fail("the client ready within 20 s\n" + h.describe(srv, cli))
    c = row_of(tc, cli, "client")
    check_eq(c["same_host"], "true", "same_host with ipc = off (still known)", srv, cli)
    check_eq(c["transport_ipc"], "ipc = off", "why not ipc", srv, cli)
    check_nic_note(tc, cli, "off", f"peer {c['name']} ({c['addr']}): ipc = off", srv, cli)
    check_eq(h.cmd(tc, "/kvlane/config", cli).get("nic/lo/ipc"), "off",
             "/kvlane/config nic/lo/ipc", cli)


def level4_session(ctx, srv, name):
    """Handshake offering feature level 4: socket, buffer, and the frames after AUTH."""
    secret = tp.load_secret(os.path.join(KVL_SRC, "config", "demo.secret"))
    s = ctx.sock(srv.addr)
    nonce = secrets.token_bytes(tp.NONCE_LEN)
    hello = (tp.VERSION, FEATURE_HOST, name, nonce)
    s.sendall(tp.frame(tp.HELLO, tp.hello_payload(name, nonce, tp.VERSION, FEATURE_HOST)))
    (t, _, p), buf = tp.recv_frame(s, b"", "answer to HELLO", srv)
    check_eq(NAMES.get(t, t), "CHALLENGE", "the answer to HELLO", srv)
    challenge = tp.parse_challenge(p)
    check_eq(challenge[0], FEATURE_HOST, "CHALLENGE version to a client offering 4", srv)
    s.sendall(tp.frame(tp.AUTH, tp.handshake_mac(secret, "kvlane-v1 client proof", hello,
                                                  challenge), seq=1))
    got = []
    while len(got) < 4:
        f, buf = recv(s, buf, "AUTH_OK, HOST, SEGMENTS, ENDPOINTS", srv)
        got.append(f)
    check_eq([NAMES.get(t, t) for t, _, _ in got], ["AUTH_OK", "HOST", "SEGMENTS", "ENDPOINTS"],
             "what a right AUTH gets at level 4", srv)
    return s, buf, got


def recv(s, buf, what, srv):
    """The next frame that is not the server's own HEARTBEAT (it sends them at any time)."""
    while True:
        (t, seq, p), buf = tp.recv_frame(s, buf, what, srv)
        if t != tp.HEARTBEAT:
            return (t, seq, p), buf


def host_frame(hid, inc=0x1234, pid=1):
    return tp.frame(HOST, hid + struct.pack("<QI", inc, pid), seq=2)


def ipc_segs_frame(inc, segs):
    p = struct.pack("<QI", inc, len(segs))
    for sid in segs:
        p += struct.pack("<II", sid, 1) + bytes(16) + bytes([7] * 64) + struct.pack("<QQ", 0, 4096)
    return tp.frame(IPC_SEGS, p, seq=3)


def logs(p):
    return p.stdout + "\n" + p.stderr


def scenario_host_raw(ctx):
    srv = ctx.kvlaned("srv", eal_extra=tp.LOG_LEVEL)
    tel = srv.telemetry()
    s, buf, got = level4_session(ctx, srv, "raw4")
    hp = got[1][2]
    check_eq(len(hp), 32 + 8 + 4, "HOST payload length", srv)
    check_eq(hp[:32].hex(), host_id().hex(), "the server's host id (sha256 of machine-id, "
             "boot_id)", srv)
    check_eq(struct.unpack_from("<I", hp, 40)[0], srv.pid, "the server's pid in HOST", srv)
    # a garbled id: another host; the answer carries no handle
    s.sendall(host_frame(secrets.token_bytes(32), inc=77))
    (t, _, p), buf = recv(s, buf, "IPC_SEGS answering HOST", srv)
    check_eq(NAMES.get(t, t), "IPC_SEGS", "the answer to HOST", srv)
    check_eq(struct.unpack_from("<I", p, 8)[0], 0, "segments exported to another host", srv)
    check_eq(len(p), 12, "IPC_SEGS to another host: no handle bytes", srv)
    rows = [r for r in tp.peers_rows(tel, srv) if r["name"] == "raw4"]
    check(rows and rows[0]["same_host"] == "false", "/kvlane/peers same_host of a garbled id",
          "false", rows, srv)
    # handles from it: refused, logged, nothing else happens
    s.sendall(ipc_segs_frame(77, [1]))
    if not wait_for(lambda: "handles from a peer on another host refused" in logs(srv), 5):
        raise Fail("IPC_SEGS from another host refused (log)\n" + h.describe(srv))
    s.sendall(tp.frame(tp.HEARTBEAT, struct.pack("<QQ", 1, 2), seq=4))
    (t, _, p), buf = recv(s, buf, "HEARTBEAT_ACK after refused handles", srv)
    check_eq(NAMES.get(t, t), "HEARTBEAT_ACK", "the server still answers", srv)
    # stale incarnation from a peer on this host: refused too
    s2, buf2, _ = level4_session(ctx, srv, "raw4b")
    s2.sendall(host_frame(host_id(), inc=5))
    (t, _, p), buf2 = recv(s2, buf2, "IPC_SEGS answering HOST", srv)
    check_eq(NAMES.get(t, t), "IPC_SEGS", "the answer to a same-host HOST", srv)
    rows = [r for r in tp.peers_rows(tel, srv) if r["name"] == "raw4b"]
    check(rows and rows[0]["same_host"] == "true", "/kvlane/peers same_host of our own id",
          "true", rows, srv)
    s2.sendall(ipc_segs_frame(6, [1]))
    if not wait_for(lambda: "stale incarnation refused" in logs(srv), 5):
        raise Fail("IPC_SEGS of another incarnation refused (log)\n" + h.describe(srv))
    # its identity changing on a live connection: closed
    s2.sendall(host_frame(secrets.token_bytes(32), inc=5))
    tp.read_until_closed(s2, "a second, different HOST", srv)
    if not wait_for(lambda: "HOST changed on a live connection" in logs(srv), 5):
        raise Fail("the reason logged\n" + h.describe(srv))
    check(srv.running(), "kvlaned after all that", "running", "exited", srv)


def scenario_host_level3(ctx):
    srv = ctx.kvlaned("srv", eal_extra=tp.LOG_LEVEL)
    s, secret, hello, challenge, got = tp.raw_session(ctx, srv, "raw3")  # checks no HOST
    check_eq(challenge[0], 3, "CHALLENGE version to a level-3 client", srv)
    s.sendall(host_frame(host_id()))
    tp.read_until_closed(s, "HOST from a level-3 client", srv)
    if not wait_for(lambda: "HOST from a peer that did not negotiate it" in logs(srv), 5):
        raise Fail("the reason logged\n" + h.describe(srv))
    check(srv.running(), "kvlaned", "running", "exited", srv)


SCENARIOS = {"host_same": scenario_host_same, "host_other": scenario_host_other,
             "host_ipc_off": scenario_host_ipc_off,
             "host_raw": scenario_host_raw, "host_level3": scenario_host_level3}


if __name__ == "__main__":
    sys.exit(h.main(sys.argv, SCENARIOS, LIMIT_S, ["PATH-TO-KVLANED"], Ctx))
