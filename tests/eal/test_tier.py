#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""EAL tests of this host's KV tier ([sched] tier = true): kvlane-req-client PULLs its own
pattern segment through the reserved peer KVL_PEER_LOCAL_TIER, by its NIC lcore's scheduler
and the tier transport (memcpy into host staging: no GPU here), every byte checked; the
/kvlane/tier counters are read through the real telemetry socket.

Usage: test_tier.py {tier_verify|tier_pool_flags|tier_bad_input|tier_off}
PATH-TO-KVLANED PATH-TO-REQ-CLIENT.
Exit 0 pass, 1 fail (with what was expected, what was seen, and every process's output).
"""
import errno
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kvl_harness as h  # noqa: E402  (its own folder)
import test_sched as ts  # noqa: E402
from kvl_harness import check, check_eq, cmd, log  # noqa: E402

LIMIT_S = {"tier_verify": 90, "tier_pool_flags": 90, "tier_bad_input": 60, "tier_off": 60}

SLOT = ts.SLOT
# The client alone (test_sched's client INI, its [control] unused: the tier needs no peer) with
# [sched] tier; its own [segment.kv] is the tier: 32 layers x 2 x 64 x 32 KiB = 128 MiB, the
# pattern of seed 1, as kvlaned's segment in test_sched.
SEGMENT = """[segment.kv]
layers = 32
planes = 2
blocks = 64
block_bytes = 32768
fill = pattern
pattern_seed = 1
access = {access}
"""
POOL = "[memory]\npool_size_mb = 160\nchunk_size_kb = 4096\nhugepage = false\n"


def start(ctx, mode, extra=(), tier="true", access="read", ini_extra="", mem_mb=512):
    ini = os.path.join(ctx.tmp, "tier.ini")
    with open(ini, "w") as f:
        f.write(ts.CLIENT_INI.format(secret=os.path.join(h.KVL_SRC, "config", "demo.secret"),
                                     sched_extra=f"tier = {tier}"))
        f.write(SEGMENT.format(access=access) + ini_extra)
    prefix = ctx.unique("tier")
    argv = [ctx.req_client, *h.EAL, "-m", str(mem_mb), "--file-prefix", prefix, "--", "-c",
            ini, "--peer", "tier", "--mode", mode, *extra]
    return ts.Client(ctx, argv, ctx.rundir(), prefix)


def tier_row(tel, *procs):
    r = ts.rows(cmd(tel, "/kvlane/tier", *procs))
    check_eq(len(r), 1, "/kvlane/tier: one row (one NIC lcore serves the tier)", *procs)
    return r[0]


def check_moved(tel, client, unique, what):
    """/kvlane/tier after the end: every block the scheduler READ came through the tier, by
    memcpy, nothing refused, nothing left in flight; nothing went over tcp."""
    s = ts.sched_row(tel, client)
    t = tier_row(tel, client)
    check_eq((t["nic"], t["method"], t["staging"], t["segments"]), ("lo", "memcpy", "host", 1),
             "/kvlane/tier (nic, method, staging, segments offered)", client)
    check_eq(s["posted_blocks"], unique, f"{what}: posted_blocks (each unique block once)",
             client)
    check_eq(t["bytes"], unique * SLOT, "/kvlane/tier bytes = unique blocks x 32 KiB", client)
    check_eq(t["reads"], s["posted_xfers"], "/kvlane/tier reads = the scheduler's posted READs",
             client)
    check_eq(t["done"], t["reads"], "/kvlane/tier done = reads", client)
    check_eq((t["refused"], t["inflight"], t["engine_errors"]), (0, 0, 0),
             "/kvlane/tier (refused, inflight, engine_errors)", client)
    check(t["copies"] >= t["reads"], "a copy per READ at least (one per local range)",
          f">= {t['reads']}", t["copies"], client)
    check(1 <= t["batches"] <= t["reads"], "bursts handed to the tier", f"1..{t['reads']}",
          t["batches"], client)
    check(t["copy_ns"] > 0, "/kvlane/tier copy_ns counted", "> 0", t["copy_ns"], client)
    check_eq((s["completed_err"], s["no_conn"], s["bad_completions"]), (0, 0, 0),
             "/kvlane/sched (completed_err, no_conn, bad_completions)", client)
    st = cmd(tel, "/kvlane/stats", client)
    check_eq(st["tcp/bytes_read"], 0, "tcp/bytes_read: nothing went over the network", client)
    return s, t


def scenario_tier_verify(ctx):
    """req_verify's workload from the tier: windows under the budget while it runs, READY steps
    in order, every byte of every block against the pattern."""
    n_req, steps, blocks = 4, 8, 4
    client = start(ctx, "verify", ["--requests", str(n_req), "--steps", str(steps),
                                   "--blocks", str(blocks), "--compute-us", "3000"])
    client.pause("filled")
    tel = client.telemetry()
    t = tier_row(tel, client)
    check(t["reads"] > 0 and t["bytes"] > 0, "the tier moved bytes before any DONE",
          "> 0 reads and bytes", (t["reads"], t["bytes"]), client)
    res, end, samples = ts.run_to_end(client, tel, n_req, steps, blocks)
    s, t = check_moved(tel, client, n_req * steps * 2 * blocks, "tier_verify")
    client.go()
    check_eq(client.wait_exit(20), 0, "client exit status", client)
    log(f"{res['blocks_verified']} blocks ({res['bytes_verified']} bytes) verified from the "
        f"tier; {t['reads']} READs in {t['batches']} bursts, {t['copies']} copies, "
        f"{t['copy_ns'] / 1e6:.2f} ms copying; {samples} samples within the budget")


def scenario_tier_pool_flags(ctx):
    """The tier's segment carved from the [memory] pool, requests opened with step flags: the
    client spins on READY words, checks every byte, writes DONE; nothing else frees a step."""
    n_req, steps, blocks = 4, 8, 4
    client = start(ctx, "flags", ["--requests", str(n_req), "--steps", str(steps),
                                  "--blocks", str(blocks), "--compute-us", "1000"],
                   ini_extra=POOL, mem_mb=256)
    end = client.pause("end", timeout=70)
    tel = client.telemetry()
    ts.check_result(client, end, n_req, steps, blocks)
    mem = cmd(tel, "/kvlane/memory", client)
    check(mem["chunks_used"] >= 33, "the segment (128 MiB) and staging came from the pool",
          ">= 33 chunks of 4 MiB", mem["chunks_used"], client)
    s, t = check_moved(tel, client, n_req * steps * 2 * blocks, "tier_pool_flags")
    check_eq((s["flags_ready_written"], s["flags_done_seen"], s["done_cmds"]),
             (n_req * steps, n_req * steps, 0),
             "(READY words written, DONE words seen, DONE commands)", client)
    check_eq(s["slots_free"], s["slots"], "every staging slot free again", client)
    client.go()
    check_eq(client.wait_exit(20), 0, "client exit status", client)
    log(f"pool segment: {t['bytes']} bytes through the tier, {s['flags_ready_written']} READY "
        f"words, {s['flags_done_seen']} DONE words")


TIER_BAD = {
    "tier_unknown_segment": -errno.ENOENT,
    "tier_outside_segment": -errno.ERANGE,
    "tier_offset_wraps": -errno.ERANGE,
    "tier_empty_block": -errno.EINVAL,
    "tier_block_too_long": -errno.EMSGSIZE,
    "tier_push": -errno.EACCES,
    "tier_post": -errno.ENOTCONN,
    "h_unchanged": 0,
}


def scenario_tier_bad_input(ctx):
    """Bad calls on the tier each get their documented errno, reach no lcore, and cost the good
    requests after them nothing."""
    n_req, steps, blocks = 2, 4, 4
    client = start(ctx, "tierbad", ["--requests", str(n_req), "--steps", str(steps),
                                    "--blocks", str(blocks)])
    client.pause("filled")
    c = client.checks()
    for name, rc in TIER_BAD.items():
        check_eq(c.get(name), rc, f"{name}: return value", client)
    tel = client.telemetry()
    client.go()
    end = client.pause("end")
    ts.check_result(client, end, n_req, steps, blocks)
    s = ts.sched_row(tel, client)
    check_eq((s["opened"], s["open_failed"]), (n_req, 0),
             "(opened, open_failed): the bad opens never reached the lcore", client)
    t = tier_row(tel, client)
    check_eq(t["refused"], 0, "/kvlane/tier refused: the edge caught every bad block", client)
    check_eq(t["bytes"], n_req * steps * 2 * blocks * SLOT, "/kvlane/tier bytes", client)
    client.go()
    check_eq(client.wait_exit(20), 0, "client exit status", client)
    log(f"{len(TIER_BAD)} calls returned the documented errno; the good requests lost nothing")


def scenario_tier_off(ctx):
    """[sched] tier = false: the reserved peer is not there (-ENOTCONN) and /kvlane/tier is
    empty; tier = true with no segment it may offer (access = write): none listed, -ENOENT."""
    client = start(ctx, "tieroff", tier="false")
    client.pause("end")
    c = client.checks()
    check_eq((c.get("tier_off_segments"), c.get("tier_off_open"), c.get("h_unchanged")),
             (-errno.ENOTCONN, -errno.ENOTCONN, 0),
             "tier off: (kvl_peer_segments, kvl_req_open, handle untouched)", client)
    tel = client.telemetry()
    check_eq(cmd(tel, "/kvlane/tier", client), {}, "/kvlane/tier without a tier", client)
    client.go()
    check_eq(client.wait_exit(20), 0, "client exit status", client)
    client = start(ctx, "tieroff", tier="true", access="write")
    client.pause("end")
    c = client.checks()
    check_eq((c.get("tier_off_segments"), c.get("tier_off_open"), c.get("h_unchanged")),
             (0, -errno.ENOENT, 0),
             "tier on, no readable host segment: (segments, kvl_req_open, handle)", client)
    tel = client.telemetry()
    t = tier_row(tel, client)
    check_eq((t["segments"], t["reads"]), (0, 0), "/kvlane/tier (segments, reads)", client)
    client.go()
    check_eq(client.wait_exit(20), 0, "client exit status", client)
    log("no tier: -ENOTCONN; a tier with nothing to offer: 0 segments, -ENOENT")


SCENARIOS = {
    "tier_verify": scenario_tier_verify,
    "tier_pool_flags": scenario_tier_pool_flags,
    "tier_bad_input": scenario_tier_bad_input,
    "tier_off": scenario_tier_off,
}


def main(argv):
    return h.main(argv, SCENARIOS, LIMIT_S, ["PATH-TO-KVLANED", "PATH-TO-KVLANE-REQ-CLIENT"],
                  ts.Ctx)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
