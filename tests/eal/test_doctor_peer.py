#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""EAL tests of kvlane-doctor --peer against a kvlaned over tcp on loopback.

  doctor_peer           the compare rows (peer_link_layer, peer_gid_type, peer_mtu, peer_rate,
                        peer_tclass) and the link test with its verdict: READs that move
                        bytes, GB/s against --rate-gbps 1 (healthy) and 400 (under half: PCIe
                        and NUMA first); the kvlaned logs the exchange.
  doctor_peer_mismatch  a traffic_class given to one end through its INI: WARN peer_tclass on
                        the doctor's side (here 0, there 96) and the same row in the kvlaned's
                        log (here 96, there 0): named on both ends.
  doctor_peer_bad       --peer without -c (exit 3), a port nobody listens on and another
                        secret (a FAIL row peer_connect naming the cause, exit 2).

Usage: test_doctor_peer.py SCENARIO PATH-TO-KVLANED PATH-TO-KVLANE-DOCTOR, with KVL_SRC in
the environment. Exit 0 pass, 1 fail.
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kvl_harness as h  # noqa: E402  (its own folder)
from kvlane_chaos import free_port  # noqa: E402  (tools/, on the path through kvl_harness)
from kvl_harness import check, check_eq, log  # noqa: E402

LIMIT_S = {"doctor_peer": 120, "doctor_peer_mismatch": 90, "doctor_peer_bad": 90}
COMPARE = ("peer_link_layer", "peer_gid_type", "peer_mtu", "peer_rate", "peer_tclass")


class Ctx(h.Ctx):
    def __init__(self, scenario, kvlaned, doctor):
        super().__init__(scenario, kvlaned, "docpeer")
        self.doctor = doctor


def doctor(ctx, peer, *args, ini=h.DEFAULT_INI, timeout=60):
    """kvlane-doctor --peer @peer --json; (exit status, its rows by check, the proc)."""
    prefix = ctx.unique("doc")
    argv = [ctx.doctor, "--no-gpu", "--json", *(["-c", ini] if ini else []), "--peer", peer,
            *args, "--", "-l", "0-1", "--no-huge", "--no-pci", "-m", "256", "--file-prefix",
            prefix]
    p = h.Proc(ctx, argv, ctx.rundir(prefix), prefix, "kvlane-doctor --peer")
    rc = p.wait_exit(timeout)
    try:
        out = json.loads(p.stdout) if ini else None
    except json.JSONDecodeError as e:
        raise h.Fail(f"kvlane-doctor --json\n  expected: one JSON object\n  seen:     {e}\n"
                     + p.describe()) from e
    rows = {}
    for r in (out or {}).get("checks", []):
        rows.setdefault(r["check"], []).append(r)
    return rc, rows, p


def one(rows, check_name, p):
    got = rows.get(check_name, [])
    check_eq(len(got), 1, f"kvlane-doctor: rows {check_name}", p)
    return got[0]


def server(ctx, *sets):
    port = free_port()
    s = ctx.kvlaned("srv", args=["--set", f"control.listen=127.0.0.1:{port}", *sets])
    return s, s.addr


def doctor_peer(ctx):
    srv, addr = server(ctx)
    rc, rows, p = doctor(ctx, addr, "--rate-gbps", "1")
    for c in COMPARE:
        r = one(rows, c, p)
        check(r["subject"].startswith("nic.lo (lo) <-> peer nic.lo (lo)"), f"{c}: subject",
              "nic.lo (lo) <-> peer nic.lo (lo)", r["subject"], p)
        log(f"{c}: {r['verdict']}: {r['observed']}")
    check_eq(one(rows, "peer_link_layer", p)["observed"], "here tcp, there tcp",
             "peer_link_layer: observed", p)
    check_eq(one(rows, "peer_link_layer", p)["verdict"], "PASS", "peer_link_layer", p)
    mtu = one(rows, "peer_mtu", p)
    check_eq(mtu["verdict"], "PASS", "peer_mtu (both lo)", p)
    check(mtu["observed"].startswith("here netdev ") and "there netdev" in mtu["observed"],
          "peer_mtu: observed", "both netdev MTUs", mtu["observed"], p)
    check_eq(one(rows, "peer_gid_type", p)["verdict"], "SKIP", "peer_gid_type on tcp", p)
    check_eq(one(rows, "peer_tclass", p)["verdict"], "PASS", "peer_tclass (both 0)", p)
    lt = one(rows, "link_test", p)
    check_eq((lt["subject"], lt["verdict"]), (f"peer {addr}", "PASS"),
             "link_test against 1 Gb/s: healthy", p)
    gbps = float(lt["observed"].split(" GB/s")[0])
    check(gbps > 0.125 * 0.8, "link_test GB/s", "> 80 % of 1 Gb/s (0.1 GB/s)", gbps, p)
    check(rc in (0, 1), "kvlane-doctor exit status", "0 or 1 (no FAIL)", rc, p)
    log(f"link_test: {lt['observed']}")
    check(any("doctor: peer" in ln and "compared 1 NIC: " in ln for ln in srv.err),
          "kvlaned's log of the exchange", "a 'doctor: peer ... compared 1 NIC' line",
          srv.stderr, srv)

    # Against a rate far above loopback's: under half, PCIe and NUMA first.
    rc, rows, p = doctor(ctx, addr, "--rate-gbps", "400", "--seconds", "0.5")
    lt = one(rows, "link_test", p)
    check_eq(lt["verdict"], "WARN", "link_test against 400 Gb/s", p)
    check("PCIe" in lt["fix"] and "NUMA" in lt["fix"], "link_test fix under 50 %",
          "PCIe and NUMA first", lt["fix"], p)
    check_eq(rc, 1, "kvlane-doctor exit status with a WARN", p)
    # No rate at all (lo has none in sysfs): SKIP, with the GB/s still said.
    rc, rows, p = doctor(ctx, addr, "--seconds", "0.3")
    lt = one(rows, "link_test", p)
    check_eq(lt["verdict"], "SKIP", "link_test without a rate", p)
    check("GB/s" in lt["observed"] and "--rate-gbps" in lt["expected"], "link_test SKIP text",
          "GB/s observed, --rate-gbps expected", lt, p)
    srv.stop()


def doctor_peer_mismatch(ctx):
    srv, addr = server(ctx, "--set", "nic.lo.traffic_class=96")
    rc, rows, p = doctor(ctx, addr, "--rate-gbps", "1", "--seconds", "0.3")
    tc = one(rows, "peer_tclass", p)
    check_eq((tc["verdict"], tc["observed"]), ("WARN", "here traffic_class 0, there 96"),
             "peer_tclass on the doctor's end", p)
    check("traffic_class" in tc["fix"], "peer_tclass fix", "names traffic_class", tc["fix"], p)
    check_eq(rc, 1, "kvlane-doctor exit status (a WARN)", p)
    want = "WARN peer_tclass nic.lo (lo) <-> peer nic.lo (lo): here traffic_class 96, there 0"
    line = h.wait_for(lambda: [ln for ln in srv.err if want in ln], 5)
    check(line, "the kvlaned end names the same mismatch", want, srv.stderr, srv)
    log(f"doctor end: {tc['observed']}; kvlaned end: {line[0].split('doctor: ')[1][:120]}")
    srv.stop()


def doctor_peer_bad(ctx):
    rc, _, p = doctor(ctx, "127.0.0.1:1", ini=None)
    check_eq(rc, 3, "kvlane-doctor --peer without -c: exit status", p)
    check("--peer needs -c" in p.stderr, "its message", "--peer needs -c", p.stderr, p)

    port = free_port()  # nobody listens there
    rc, rows, p = doctor(ctx, f"127.0.0.1:{port}", "--seconds", "0.3")
    r = one(rows, "peer_connect", p)
    check_eq(r["verdict"], "FAIL", "peer_connect to a closed port", p)
    check(f"127.0.0.1:{port}" in r["observed"], "peer_connect observed", "names the address",
          r["observed"], p)
    check_eq(rc, 2, "kvlane-doctor exit status (a FAIL)", p)
    check("link_test" not in rows, "no link test without a peer", "no link_test row",
          list(rows), p)

    # Another secret: the handshake refuses, the row says so.
    srv, addr = server(ctx)
    other = os.path.join(ctx.tmp, "other.secret")
    with open(other, "w") as f:
        f.write("a-different-secret-of-32-bytes-or-more-0123456789\n")
    os.chmod(other, 0o600)
    rc, rows, p = doctor(ctx, addr, "--set", f"control.secret_file={other}", "--seconds", "0.3")
    r = one(rows, "peer_connect", p)
    check_eq((r["verdict"], rc), ("FAIL", 2), "peer_connect with another secret", p)
    log(f"another secret: {r['observed']}")
    srv.stop()


SCENARIOS = {"doctor_peer": doctor_peer, "doctor_peer_mismatch": doctor_peer_mismatch,
             "doctor_peer_bad": doctor_peer_bad}

if __name__ == "__main__":
    sys.exit(h.main(sys.argv, SCENARIOS, LIMIT_S, ["KVLANED", "KVLANE_DOCTOR"], Ctx))
