#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""EAL tests of kvlane-perf's SERVER forms: a bare host as perftest takes it (ib_write_bw
SERVER), its port from -p or from the INI's [control] listen, beside host:port.

  perf_bare_host  against a kvlaned on a fixed port: "127.0.0.1 -p PORT", "localhost -p PORT",
                  and bare "127.0.0.1" with the port from the client INI's [control] listen,
                  each a --read --verify run that moves every byte right (the server's
                  /kvlane/peers counts each client); a server-mode kvlane-perf with -p listens
                  on that port; the bad forms ("127.0.0.1:", "[::1", -p 0, -p 70000, a bare
                  host when the INI's listen port is 0) are usage errors (exit 2) that say why.

Usage: test_perf_host.py perf_bare_host PATH-TO-KVLANED PATH-TO-KVLANE-PERF, with KVL_SRC in
the environment. Exit 0 pass, 1 fail.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kvl_harness as h  # noqa: E402  (its own folder)
import test_dataplane as dp  # noqa: E402
from kvlane_chaos import free_port  # noqa: E402  (tools/, on the path through kvl_harness)
from kvl_harness import check, check_eq, log  # noqa: E402

LIMIT_S = {"perf_bare_host": 150}
MSG = 65536
ITERS = 32


def client_ini(ctx, listen):
    """default.ini with [control] listen = @listen, beside links to its own files."""
    cdir = os.path.dirname(h.DEFAULT_INI)
    with open(h.DEFAULT_INI) as f:
        lines = f.read().split("\n")
    out, section = [], None
    for ln in lines:
        s = ln.strip()
        if s.startswith("["):
            section = s
        if section == "[control]" and s.split("=")[0].strip() == "listen":
            continue  # ours goes right under the header
        out.append(ln)
        if s == "[control]":
            out.append(f"listen = {listen}")
    check("[control]" in lines, "default.ini", "a [control] section", "none")
    path = os.path.join(ctx.tmp, f"client-{listen.replace(':', '_')}.ini")
    with open(path, "w") as f:
        f.write("\n".join(out))
    for name in os.listdir(cdir):
        src, dst = os.path.join(cdir, name), os.path.join(ctx.tmp, name)
        if os.path.isfile(src) and not os.path.exists(dst):
            os.symlink(src, dst)
    return path


def perf(ctx, tag, ini, args, timeout=90):
    prefix = ctx.unique(tag)
    p = h.Proc(ctx, [ctx.perf, *h.EAL, "-m", "256", "--file-prefix", prefix, "--", "-c", ini,
                     *args], ctx.rundir(), prefix, f"kvlane-perf {tag}")
    return p.wait_exit(timeout), p


def verified_read(ctx, tag, ini, server_args, server):
    args = ["--read", "--verify", "--json", "-s", str(MSG), "-n", str(ITERS), "--segment", "kv",
            "--seed", dp.KV_SEED, "--seg-size", "16M", *server_args]
    rc, p = perf(ctx, tag, ini, args)
    check_eq(rc, 0, f"kvlane-perf {' '.join(server_args)}: exit status", p, server)
    o = dp.json_lines(p, f"kvlane-perf {tag}")[0]
    want = {"result": "ok", "completed_ok": ITERS, "bytes": MSG * ITERS, "verify": True,
            "verified_bytes": MSG * ITERS, "verify_error": None}
    check_eq({k: o.get(k) for k in want}, want, f"kvlane-perf {' '.join(server_args)}: result",
             p, server)
    return p


def usage_error(ctx, tag, ini, args, words):
    rc, p = perf(ctx, tag, ini, args, timeout=30)
    check_eq(rc, 2, f"kvlane-perf {' '.join(args)}: exit status (usage)", p)
    for w in words:
        check(w in p.stderr, f"kvlane-perf {' '.join(args)}: its message", repr(w), p.stderr, p)
    log(f"{' '.join(args)!r}: {p.stderr.strip().splitlines()[-1]}")


def perf_bare_host(ctx):
    port = free_port()
    server = ctx.kvlaned("srv", args=[*dp.KV_RW, "--set", f"control.listen=127.0.0.1:{port}"])
    check_eq(server.addr, f"127.0.0.1:{port}", "kvlaned: control address", server)
    tel = server.telemetry()

    def count_clients():
        rows = dp.peer_rows(tel, server)
        return sum(1 for r in rows if r["name"] == "kvlane-perf")

    # host:port as before, then the bare forms: -p, a name with -p, the INI's port.
    plain = h.DEFAULT_INI
    for tag, ini, args in (("hostport", plain, [f"127.0.0.1:{port}"]),
                           ("bare_p", plain, ["127.0.0.1", "-p", str(port)]),
                           ("name_p", plain, ["-p", str(port), "localhost"]),
                           ("bare_ini", client_ini(ctx, f"127.0.0.1:{port}"), ["127.0.0.1"])):
        verified_read(ctx, tag, ini, args, server)
        log(f"kvlane-perf {' '.join(args)}: {ITERS} x {MSG} B READ, every byte verified")
    check(count_clients() >= 1, "the server's /kvlane/peers", "kvlane-perf rows",
          dp.peer_rows(tel, server), server)

    # Server mode: -p puts its listener on that port, on the INI's host.
    sport = free_port()
    sp = ctx.perf_start("srvp", ["-p", str(sport)])
    m = sp.wait_line(dp.PERF_SERVER_RE, 15, what="kvlane-perf server -p: its listening line")
    check_eq(m[1], f"127.0.0.1:{sport}", "kvlane-perf server -p PORT: where it listens", sp)
    rc, p = perf(ctx, "to_srvp", plain, ["--read", "-s", "4K", "-n", "16", "127.0.0.1", "-p",
                                         str(sport)])
    check_eq(rc, 0, "kvlane-perf 127.0.0.1 -p SPORT against kvlane-perf server -p", p, sp)
    sp.stop(timeout=15)

    # What is not a SERVER, or not a port.
    usage_error(ctx, "colon", plain, ["127.0.0.1:"], ["127.0.0.1:", "host:port"])
    usage_error(ctx, "bracket", plain, ["[::1"], ["[::1", "host:port"])
    usage_error(ctx, "port0", plain, ["127.0.0.1", "-p", "0"], ["-p 0", "1..65535"])
    usage_error(ctx, "port_big", plain, ["127.0.0.1", "-p", "70000"], ["-p 70000", "1..65535"])
    usage_error(ctx, "ini_port0", client_ini(ctx, "127.0.0.1:0"), ["127.0.0.1"],
                ["listen port is 0", "-p PORT"])
    server.stop()


SCENARIOS = {"perf_bare_host": perf_bare_host}

if __name__ == "__main__":
    sys.exit(h.main(sys.argv, SCENARIOS, LIMIT_S, ["KVLANED", "KVLANE_PERF"],
                    lambda s, kvlaned, p: dp.Ctx(s, kvlaned, p)))
