#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""EAL tests of the request API: kvlane-req-client pulls a kvlaned's pattern segment over TCP
loopback through its NIC lcore's scheduler, and its telemetry is read through the socket.

Usage: test_sched.py {req_verify|req_ready_ahead|req_push|req_cancel|req_bad_input|
                      req_step_flags|req_dest|req_dest_gpu}
PATH-TO-KVLANED PATH-TO-REQ-CLIENT.
Exit 0 pass, 1 fail (with what was expected, what was seen, and every process's output).
"""
import errno
import json
import os
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kvl_harness as h  # noqa: E402  (its own folder)
from kvl_harness import check, check_eq, cmd, log  # noqa: E402

LIMIT_S = {"req_verify": 90, "req_ready_ahead": 90, "req_push": 90, "req_cancel": 60,
           "req_bad_input": 60, "req_step_flags": 90, "req_dest": 90,
           "req_dest_gpu": 90}

SLOT = 32768
BUDGET = 1 << 20
# The client: a scheduler with 4 MiB of staging and a 1 MiB budget, so that windows bind.
CLIENT_INI = """[runtime]
name = req-client
idle_policy = yield
[nic.lo]
device = lo
transport = tcp
[sched]
staging_mb = 4
budget_mb = 1
slot_kb = 32
window_min_kb = 64
{sched_extra}
[control]
listen = 127.0.0.1:0
secret_file = {secret}
"""
SERVER_SETS = ["--set", "segment.kv.blocks=64"]  # 32 layers x 2 x 64 x 32 KiB = 128 MiB


class Client(h.Proc):
    """kvlane-req-client, driven through its stdin at its PAUSE lines."""

    def __init__(self, ctx, argv, rundir, prefix):
        super().__init__(ctx, argv, rundir, prefix, "kvlane-req-client", stdin=subprocess.PIPE)

    def pause(self, tag, timeout=30):
        m = self.wait_line(rf"^PAUSE {tag} (.*)$", timeout, what=f"client pause '{tag}'")
        return json.loads(m[1])

    def go(self):
        self.proc.stdin.write("go\n")
        self.proc.stdin.flush()

    def checks(self):
        out = {}
        for line in self.out:
            if line.startswith("CHECK "):
                _, name, rc = line.split()
                out[name] = int(rc)
        return out

    def result(self):
        m = self.wait_line(r"^RESULT (.*)$", 1, what="client result")
        return json.loads(m[1])


class Ctx(h.Ctx):
    """A scenario with kvlaned and kvlane-req-client."""

    def __init__(self, scenario, kvlaned, req_client):
        super().__init__(scenario, kvlaned, "sched")
        self.req_client = req_client


def start(ctx, mode, extra=(), sched_extra="", server_sets=()):
    server = ctx.kvlaned("srv", mem_mb=512, args=[*SERVER_SETS, *server_sets])
    ini = os.path.join(ctx.tmp, "client.ini")
    with open(ini, "w") as f:
        f.write(CLIENT_INI.format(secret=os.path.join(h.KVL_SRC, "config", "demo.secret"),
                                  sched_extra=sched_extra))
    prefix = ctx.unique("cli")
    argv = [ctx.req_client, *h.EAL, "-m", "256", "--file-prefix", prefix, "--", "-c", ini,
            "--peer", server.addr, "--mode", mode, *extra]
    client = Client(ctx, argv, ctx.rundir(), prefix)
    return server, client


def another_client(ctx, server, mode, args, sched_extra="", ini_name="client.ini"):
    """One more kvlane-req-client against @server, on an INI of its own."""
    ini = os.path.join(ctx.tmp, ini_name)
    with open(ini, "w") as f:
        f.write(CLIENT_INI.format(secret=os.path.join(h.KVL_SRC, "config", "demo.secret"),
                                  sched_extra=sched_extra))
    prefix = ctx.unique("cli")
    return Client(ctx, [ctx.req_client, *h.EAL, "-m", "256", "--file-prefix", prefix, "--",
                        "-c", ini, "--peer", server.addr, "--mode", mode, *args],
                  ctx.rundir(), prefix)


def check_dest_line(client, what):
    """The client's DEST line: not one guard byte around the destinations changed, and every
    kvl_req_block_addr was the engine's own address."""
    m = client.wait_line(r"^DEST (.*)$", 1, what="client DEST line")
    dest = json.loads(m[1])
    check_eq((dest["guard_bad"], dest["addr_errors"]), (0, 0),
             f"{what}(guard bytes changed, block_addr not the engine's address)", client)
    return dest


def rows(v):
    """A column-form reply as a list of row dicts."""
    cols = {k: x for k, x in v.items() if isinstance(x, list)}
    n = len(next(iter(cols.values()))) if cols else 0
    return [{k: cols[k][i] for k in cols} for i in range(n)]


def sched_row(tel, *procs):
    r = rows(cmd(tel, "/kvlane/sched", *procs))
    check_eq(len(r), 1, "/kvlane/sched: one row (one NIC lcore)", *procs)
    return r[0]


def run_to_end(client, tel, n_req, steps, blocks):
    """Lets the client compute and mark steps DONE to the end, sampling /kvlane/sched: the
    budget holds at every sample; then every step DONE and every block checked byte by byte.
    Returns the client's result, its 'end' pause and the number of samples."""
    samples, over = 0, []
    client.go()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if any(line.startswith("PAUSE end") for line in client.out):
            break
        s = sched_row(tel, client)
        samples += 1
        if s["in_use"] > s["budget"] or s["windows"] > s["budget"]:
            over.append((s["in_use"], s["windows"], s["budget"]))
        time.sleep(0.005)
    end = client.pause("end")
    check(not over, "the budget is never exceeded while requests run",
          f"in_use and windows <= {BUDGET} at every sample", over[:5], client)
    check(samples >= 5, "telemetry sampled while requests ran", ">= 5 samples", samples, client)
    res = check_result(client, end, n_req, steps, blocks)
    return res, end, samples


def check_result(client, end, n_req, steps, blocks):
    """The client's RESULT line: every request DONE, every byte of every step checked."""
    res = client.result()
    check_eq(res["requests_ok"], n_req, "requests that ended DONE", client)
    check_eq(res["order_errors"], 0, "READY steps out of order", client)
    check_eq(res["bad_bytes"], 0, "bytes that differ from the server's pattern", client)
    check_eq(res["errors"], 0, "API errors in the client", client)
    check_eq(res["steps_done"], n_req * steps, "steps marked DONE", client)
    # Every block of every step: 2 planes x blocks per step, plus the shared one from step 1.
    per_req = steps * 2 * blocks + (steps - 1)
    check_eq(res["blocks_verified"], n_req * per_req, "blocks verified byte by byte", client)
    check_eq(end["done"], [steps] * n_req, "steps DONE per request", client)
    return res


# ---- req_verify ----

def scenario_req_verify(ctx):
    n_req, steps, blocks = 4, 8, 4
    server, client = start(ctx, "verify", ["--requests", str(n_req), "--steps", str(steps),
                                           "--blocks", str(blocks), "--compute-us", "3000"])
    filled = client.pause("filled")
    tel = client.telemetry()
    s = sched_row(tel, client)
    check_eq(s["budget"], BUDGET, "/kvlane/sched budget ([sched] budget_mb = 1)", client)
    check_eq((s["staging"], s["staging_gpu"], s["staging_why"]),
             ("host", -1, "auto: [gpu] enable = false"),
             "/kvlane/sched staging (auto, no [gpu]: host, and why)", client)
    check(s["in_use"] <= s["budget"], "/kvlane/sched in_use <= budget", f"<= {s['budget']}",
          s["in_use"], client)
    check(s["in_use"] > 0, "staging filled while no step is DONE", "> 0", s["in_use"], client)
    check(s["windows"] <= s["budget"], "sum of windows <= budget", f"<= {s['budget']}",
          s["windows"], client)
    check_eq(s["active"] + s["waiting"], n_req, "active + waiting requests", client)
    check(s["waiting"] >= 1, "a request waits: 4 floors do not fit 1 MiB", ">= 1",
          s["waiting"], client)
    check_eq(s["opened"], n_req, "opened", client)
    req = rows(cmd(tel, "/kvlane/requests", client))
    check_eq(sorted(r["req"] for r in req), sorted(filled["handles"]),
             "/kvlane/requests: one row per open handle", client)
    for r in req:
        i = filled["handles"].index(r["req"])
        check_eq(r["steps_done"], 0, f"request {r['req']}: steps_done (none marked)", client)
        check_eq(r["steps_ready"], filled["ready"][i],
                 f"request {r['req']}: steps_ready = READY events the client saw", client)
        check_eq(r["landed"], r["blocks_landed"] * SLOT,
                 f"request {r['req']}: landed bytes = blocks_landed x 32 KiB", client)
        check_eq(r["steps"], steps, f"request {r['req']}: steps", client)
        check_eq(r["evicted"], 0, f"request {r['req']}: evicted ([sched] ready_ahead = 0)",
                 client)
    check_eq(sum(r["landed"] + r["in_flight"] for r in req), s["in_use"],
             "sum of the requests' landed + in flight = in_use", client)
    log(f"filled: in_use {s['in_use']} of {s['budget']}, active {s['active']}, "
        f"waiting {s['waiting']}; rows match the client's READY events")

    res, end, samples = run_to_end(client, tel, n_req, steps, blocks)

    s = sched_row(tel, client)
    unique = n_req * steps * 2 * blocks
    check_eq((s["in_use"], s["active"], s["waiting"], s["windows"]), (0, 0, 0, 0),
             "after the end: (in_use, active, waiting, windows)", client)
    check_eq(s["posted_blocks"], unique, "posted_blocks: each unique block READ once", client)
    check_eq((s["evicted_blocks"], s["evicted_bytes"]), (0, 0),
             "(evicted_blocks, evicted_bytes): nothing evicted with ready_ahead = 0", client)
    check_eq(s["completed_ok"], s["posted_xfers"], "completed_ok = posted_xfers", client)
    check_eq(s["completed_err"] + s["cmd_errors"] + s["bad_completions"], 0,
             "errors, refused commands, stray completions", client)
    check_eq(s["done_cmds"], n_req * steps, "done_cmds", client)
    check(s["posted_xfers"] < unique, "coalescing merged blocks into fewer READs",
          f"< {unique}", s["posted_xfers"], client)
    check_eq(rows(cmd(tel, "/kvlane/requests", client)), [], "/kvlane/requests after the end",
             client)
    st = cmd(tel, "/kvlane/stats", client)
    check_eq(st["tcp/bytes_read"], unique * SLOT, "tcp/bytes_read = unique blocks x 32 KiB",
             client)
    client.go()
    check_eq(client.wait_exit(20), 0, "client exit status", client)
    log(f"{res['blocks_verified']} blocks ({res['bytes_verified']} bytes) verified in step "
        f"order; {s['posted_blocks']} blocks in {s['posted_xfers']} READs; {samples} samples "
        f"within the budget")
    server.stop(signal.SIGINT)


# ---- req_ready_ahead ----

def scenario_req_ready_ahead(ctx):
    """req_verify's workload with [sched] ready_ahead = 1: at most one step announced ahead
    of DONE per request, and what landed beyond it may be evicted when a request is
    blocked (here: when the requests admitted later shrink the first one's window). Every
    byte is still checked, and each block is READ once plus once per eviction."""
    n_req, steps, blocks = 4, 8, 4
    server, client = start(ctx, "verify", ["--requests", str(n_req), "--steps", str(steps),
                                           "--blocks", str(blocks), "--compute-us", "3000"],
                           sched_extra="ready_ahead = 1")
    filled = client.pause("filled")
    tel = client.telemetry()
    check(max(filled["ready"]) <= 1, "READY events per request before any DONE",
          "<= 1 (ready_ahead = 1)", filled["ready"], client)
    req = rows(cmd(tel, "/kvlane/requests", client))
    landed_ahead = sum(r["steps_ready"] > 1 for r in req)
    for r in req:
        i = filled["handles"].index(r["req"])
        check(r["steps_ready"] >= filled["ready"][i],
              f"request {r['req']}: steps landed >= steps announced",
              f">= {filled['ready'][i]}", r["steps_ready"], client)
    res, end, samples = run_to_end(client, tel, n_req, steps, blocks)
    s = sched_row(tel, client)
    unique = n_req * steps * 2 * blocks
    check_eq((s["in_use"], s["active"], s["waiting"]), (0, 0, 0),
             "after the end: (in_use, active, waiting)", client)
    check_eq(s["posted_blocks"], unique + s["evicted_blocks"],
             "posted_blocks: each unique block READ once, plus once per eviction", client)
    check_eq(s["evicted_bytes"], s["evicted_blocks"] * SLOT, "evicted_bytes = evicted x 32 KiB",
             client)
    check_eq(s["completed_err"] + s["cmd_errors"] + s["bad_completions"], 0,
             "errors, refused commands, stray completions", client)
    st = cmd(tel, "/kvlane/stats", client)
    check_eq(st["tcp/bytes_read"], s["posted_blocks"] * SLOT,
             "tcp/bytes_read = posted blocks x 32 KiB", client)
    client.go()
    check_eq(client.wait_exit(20), 0, "client exit status", client)
    log(f"ready_ahead 1: READY before any DONE {filled['ready']}, {landed_ahead} requests had "
        f"landed more; {res['blocks_verified']} blocks verified; {s['posted_blocks']} blocks "
        f"READ for {unique} unique ({s['evicted_blocks']} evicted and read again)")
    server.stop(signal.SIGINT)


# ---- req_push ----

# A segment the client may WRITE: 4 layers x 2 x 32 blocks x 32 KiB = 8 MiB, zeroed.
KVW_SETS = [x for k, v in (("layers", 4), ("planes", 2), ("blocks", 32),
                           ("block_bytes", 32768), ("access", "readwrite"))
            for x in ("--set", f"segment.kvw.{k}={v}")]


def scenario_req_push(ctx):
    """PUSH through kvl_req_open: bad local ranges refused before anything is posted; then
    every request WRITEs its blocks from a local segment through the NIC lcore's scheduler
    and the tcp transport, and a PULL of the same blocks reads back every byte."""
    n_req, steps, blocks = 4, 4, 4
    server, client = start(ctx, "push", ["--requests", str(n_req), "--steps", str(steps),
                                         "--blocks", str(blocks), "--segment", "kvw",
                                         "--ro-segment", "kv"], server_sets=KVW_SETS)
    client.pause("bad")
    got = client.checks()
    want = {"push_unregistered": -errno.EFAULT, "push_past_segment": -errno.EFAULT,
            "push_null": -errno.EFAULT, "push_read_only": -errno.EACCES,
            "push_from_staging": -errno.EINVAL, "pull_with_local": -errno.EINVAL,
            "bad_dir": -errno.EINVAL, "h_unchanged": 0}
    check_eq({k: got.get(k) for k in want}, want, "bad PUSH calls: their errno", client)
    tel = client.telemetry()
    s = sched_row(tel, client)
    # one request did open: the one-block PULL whose staging slot the staging PUSH named
    check_eq((s["opened"], s["open_failed"], s["posted_blocks"], s["in_use"]), (1, 0, 1, 0),
             "after the bad calls: (opened, open_failed, posted_blocks, in_use)", client)
    st0 = cmd(tel, "/kvlane/stats", client)
    client.go()
    client.pause("pushed")
    s = sched_row(tel, client)
    st = cmd(tel, "/kvlane/stats", client)
    unique = n_req * steps * 2 * blocks
    check_eq(s["posted_blocks"], unique + 1,
             "posted_blocks after the PUSH: each block once (+ the probe's)", client)
    check_eq(st["tcp/bytes_written"] - st0.get("tcp/bytes_written", 0), unique * SLOT,
             "tcp/bytes_written by the PUSH = unique blocks x 32 KiB", client)
    check_eq((s["in_use"], s["active"], s["completed_err"]), (0, 0, 0),
             "after the PUSH: (in_use, active, completed_err)", client)
    client.go()
    end = client.pause("end")
    res = client.result()
    check_eq(res["requests_ok"], n_req, "PULL requests that ended DONE", client)
    check_eq((res["errors"], res["order_errors"], res["push_addr_errors"], res["bad_bytes"]),
             (0, 0, 0, 0), "(errors, order errors, PUSH addresses, bad bytes)", client)
    per_req = steps * 2 * blocks + (steps - 1)
    check_eq(res["blocks_verified"], n_req * per_req,
             "blocks read back and checked byte by byte", client)
    check_eq(end["done"], [steps] * n_req, "steps DONE per request", client)
    s = sched_row(tel, client)
    check_eq(s["posted_blocks"], 2 * unique + 1,
             "posted_blocks: PUSH then PULL, once each (+ the probe's)", client)
    client.go()
    check_eq(client.wait_exit(20), 0, "client exit status", client)
    log(f"PUSH: bad calls {want}; {unique} blocks ({unique * SLOT} bytes) written through the "
        f"scheduler, {res['blocks_verified']} read back and verified")
    server.stop(signal.SIGINT)


# ---- req_cancel ----

def scenario_req_cancel(ctx):
    server, client = start(ctx, "cancel", ["--steps", "8", "--blocks", "8"])
    client.pause("filled")
    tel = client.telemetry()
    before = sched_row(tel, client)
    check(before["in_use"] > 0, "staging held before the cancel", "> 0", before["in_use"],
          client)
    client.go()
    client.pause("canceled")
    c = client.checks()
    check_eq(c.get("cancel"), 0, "kvl_req_cancel", client)
    check_eq(c.get("cancel_again"), -114, "a second cancel: -EALREADY", client)
    check_eq(c.get("addr_after_cancel"), -2, "block address after cancel: -ENOENT", client)
    check_eq(c.get("done_after_cancel"), -2, "DONE after cancel: -ENOENT", client)
    check_eq(c.get("failed_status"), 8, "the FAILED event's status: canceled (8)", client)
    check_eq(c.get("cancel_after_end"), -2, "cancel after the FAILED event: -ENOENT", client)
    # Freed at once: only READs still in flight may hold staging (orphans), briefly.
    s = sched_row(tel, client)
    check_eq(s["in_use"] - s["orphan_bytes"], 0, "in_use minus orphans right after the cancel",
             client)
    s = h.wait_for(lambda: (lambda r: r if r["in_use"] == 0 else None)(sched_row(tel, client)),
                    2.0)
    check(s, "in_use returns to 0 once in-flight READs complete", "0 within 2 s",
          sched_row(tel, client)["in_use"], client)
    check_eq((s["cancels"], s["cancel_cmds"], s["active"], s["windows"]), (1, 1, 0, 0),
             "(cancels, cancel_cmds, active, windows)", client)
    check_eq(s["peer_cancels"], 1, "the cancel was handed to the control path for the peer",
             client)
    stel = server.telemetry()
    got = h.wait_for(lambda: cmd(stel, "/kvlane/stats", server).get("control/req_cancels_rx"),
                      3.0)
    check_eq(got, 1, "the server counted the peer's cancel (control/req_cancels_rx)", client,
             server)
    log(f"cancel: {before['in_use']} bytes held, 0 right after; the server counted it")
    client.go()
    check_eq(client.wait_exit(20), 0, "client exit status", client)
    server.stop(signal.SIGINT)


# ---- req_bad_input ----

EXPECT = {
    "open_unknown_peer": -107,  # ENOTCONN
    "open_peer_out_of_range": -107,
    "open_block_too_long": -90,  # EMSGSIZE
    "open_unknown_segment": -2,  # ENOENT
    "open_outside_segment": -34,  # ERANGE
    "open_block_index": -22,  # EINVAL
    "open_empty_step": -22,
    "open_bad_class": -22,
    "done_unknown_handle": -2,
    "cancel_unknown_handle": -2,
    "h_unchanged": 0,
    "open_good": 0,
    "done_out_of_range": -34,
    "done_not_ready": -22,
    "addr_out_of_range": -34,
    "addr_not_ready": -11,  # EAGAIN
    "first_event_step": 0,
    "done_step0": 0,
    "done_twice": -114,  # EALREADY
}


def scenario_req_bad_input(ctx):
    server, client = start(ctx, "bad", ["--steps", "8", "--blocks", "4"])
    client.pause("end")
    tel = client.telemetry()
    c = client.checks()
    for name, rc in EXPECT.items():
        check_eq(c.get(name), rc, f"{name}: return value", client)
    res = client.result()
    check_eq((res["requests_ok"], res["bad_bytes"], res["errors"], res["order_errors"]),
             (1, 0, 0, 0), "the good request after the bad calls: (ok, bad bytes, errors, "
             "order errors)", client)
    check_eq(res["blocks_verified"], 8 * 2 * 4 + 7, "blocks verified", client)
    s = sched_row(tel, client)
    # Bad calls never reached the lcore: one open, its 8 DONEs, nothing refused there.
    check_eq((s["opened"], s["open_failed"], s["done_cmds"], s["cmd_errors"], s["in_use"]),
             (1, 0, 8, 0, 0), "(opened, open_failed, done_cmds, cmd_errors, in_use)", client)
    log(f"{len(EXPECT)} calls returned the documented errno; the good request lost nothing")
    client.go()
    check_eq(client.wait_exit(20), 0, "client exit status", client)
    server.stop(signal.SIGINT)


# ---- req_step_flags ----

def scenario_req_step_flags(ctx):
    """req_verify's workload opened with KVL_REQ_STEP_FLAGS: the client never polls for READY
    nor calls kvl_req_step_done; it spins on the READY words, checks every byte, writes DONE,
    and the lcore's DONE polling alone slides the windows to the end."""
    n_req, steps, blocks = 4, 8, 4
    server, client = start(ctx, "flags", ["--requests", str(n_req), "--steps", str(steps),
                                          "--blocks", str(blocks), "--compute-us", "1000"])
    end = client.pause("end", timeout=70)
    tel = client.telemetry()
    res = check_result(client, end, n_req, steps, blocks)
    check_eq(client.checks().get("flags_step_done"), -errno.EINVAL,
             "kvl_req_step_done on a flags request", client)
    s = sched_row(tel, client)
    check_eq((s["in_use"], s["active"], s["waiting"], s["windows"]), (0, 0, 0, 0),
             "after the end: (in_use, active, waiting, windows)", client)
    check_eq(s["slots_free"], s["slots"], "every staging slot free again", client)
    check_eq(s["done_cmds"], 0, "done_cmds: no DONE command was sent", client)
    check_eq(s["flag_requests"], n_req, "flag_requests", client)
    check_eq(s["flags_ready_written"], n_req * steps, "READY words written", client)
    check_eq(s["flags_done_seen"], n_req * steps, "DONE words seen", client)
    check_eq((s["flags_in_use"], s["flag_nospc"]), (0, 0),
             "(flags_in_use, flag_nospc): every range back in the pool", client)
    check_eq(s["completed_err"] + s["cmd_errors"] + s["bad_completions"], 0,
             "errors, refused commands, stray completions", client)
    check_eq(rows(cmd(tel, "/kvlane/requests", client)), [], "/kvlane/requests after the end",
             client)
    client.go()
    check_eq(client.wait_exit(20), 0, "client exit status", client)
    log(f"{res['blocks_verified']} blocks ({res['bytes_verified']} bytes) verified from READY "
        f"words; {s['flags_done_seen']} steps freed by DONE words, 0 DONE commands")
    server.stop(signal.SIGINT)


# ---- req_dest ----

def scenario_req_dest(ctx):
    """Engine-owned destinations: the client registers its own paged KV cache (8 layers x K/V x
    36 blocks of 32 KiB, host memory it allocated) and PULLs every request with
    KVL_REQ_ENGINE_DEST into block ids of its own, scattered for two requests and contiguous
    for the other two. Every byte is checked where the engine asked for it, every byte around
    the destinations is still the guard, and /kvlane/sched shows that no staging slot was
    taken, while the window and the budget still ordered the READs."""
    n_req, steps, blocks = 4, 8, 4
    server, client = start(ctx, "dest", ["--requests", str(n_req), "--steps", str(steps),
                                         "--blocks", str(blocks), "--compute-us", "1000"])
    filled = client.pause("filled")
    tel = client.telemetry()
    s = sched_row(tel, client)
    check_eq(s["slots_free"], s["slots"], "no staging slot held while steps wait for DONE",
             client)
    check(s["in_use"] <= s["budget"], "in_use <= budget", f"<= {s['budget']}", s["in_use"],
          client)
    check(sum(filled["ready"]) > 0, "steps READY before any DONE", "> 0", filled["ready"],
          client)
    req = rows(cmd(tel, "/kvlane/requests", client))
    for r in req:
        i = filled["handles"].index(r["req"])
        check_eq(r["steps_ready"], filled["ready"][i],
                 f"request {r['req']}: steps_ready = READY events the client saw", client)
        check_eq(r["landed"], 0, f"request {r['req']}: landed bytes held (none: the "
                 "engine's memory)", client)
    client.go()
    end = client.pause("end", timeout=70)
    res = check_result(client, end, n_req, steps, blocks)
    dest = check_dest_line(client, "")
    s = sched_row(tel, client)
    unique = n_req * steps * 2 * blocks
    check_eq(s["dest_blocks"], unique, "dest_blocks: every block landed in the engine's cache",
             client)
    check_eq(s["posted_blocks"], unique, "posted_blocks: each unique block READ once", client)
    check_eq(s["slots_free"], s["slots"], "slots_free = slots: none was ever taken", client)
    check_eq((s["in_use"], s["active"], s["waiting"], s["windows"]), (0, 0, 0, 0),
             "after the end: (in_use, active, waiting, windows)", client)
    check(s["posted_xfers"] < s["posted_blocks"],
          "contiguous destinations merged into fewer READs", f"< {s['posted_blocks']}",
          s["posted_xfers"], client)
    check_eq(s["completed_err"] + s["cmd_errors"] + s["bad_completions"], 0,
             "errors, refused commands, stray completions", client)
    client.go()
    check_eq(client.wait_exit(20), 0, "client exit status", client)
    log(f"{res['blocks_verified']} blocks ({res['bytes_verified']} bytes) verified in the "
        f"engine's cache of {dest['cache_bytes']} bytes, guards intact; {s['posted_xfers']} "
        f"READs for {s['posted_blocks']} blocks; slots_free {s['slots_free']}/{s['slots']}")
    # The same with KVL_REQ_STEP_FLAGS: READY words fire per step once its blocks landed in
    # the engine's cache; the engine reads them there and stores DONE, with no call per step.
    flags = another_client(ctx, server, "dest",
                           ["--dest-flags", "1", "--requests", str(n_req), "--steps", str(steps),
                            "--blocks", str(blocks), "--compute-us", "1000"])
    end = flags.pause("end", timeout=70)
    tel = flags.telemetry()
    res = check_result(flags, end, n_req, steps, blocks)
    check_dest_line(flags, "step flags: ")
    s = sched_row(tel, flags)
    check_eq((s["flags_ready_written"], s["flags_done_seen"], s["done_cmds"]),
             (n_req * steps, n_req * steps, 0),
             "step flags: (READY words written, DONE words seen, DONE commands)", flags)
    check_eq((s["dest_blocks"], s["slots_free"]), (unique, s["slots"]),
             "step flags: (dest_blocks, slots_free)", flags)
    flags.go()
    check_eq(flags.wait_exit(20), 0, "client exit status (step flags)", flags)
    log(f"with step flags: {res['blocks_verified']} blocks verified from READY words, "
        f"{s['flags_done_seen']} steps freed by DONE words, guards intact")
    server.stop(signal.SIGINT)


def scenario_req_dest_gpu(ctx):
    """(gpu suite) The engine's paged cache in VRAM (kvl_seg_alloc_gpu). Over tcp it is refused
    at open, by design: tcp moves bytes with the CPU and has no bounce path into VRAM, so
    kvl_req_open says -EXDEV and kvl_req_error() names the block, the GPU segment and the NIC,
    and nothing reaches the lcore. With [sched] null_transport (nothing moves) the same
    requests open, every step comes READY in order, kvl_req_block_addr gives back the engine's
    device pointers, and no staging slot is taken. Exit 77 without a GPU, with the reason."""
    n_req, steps, blocks = 2, 4, 2
    args = ["--requests", str(n_req), "--steps", str(steps), "--blocks", str(blocks)]
    server, client = start(ctx, "dest-gpu", args)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and client.proc.poll() is None and \
            not any(line.startswith(("PAUSE", "SKIP")) for line in client.out):
        time.sleep(0.05)
    skip = [line for line in client.out if line.startswith("SKIP ")]
    if skip:
        client.wait_exit(20)
        server.stop(signal.SIGINT)
        print(f"skipped: {skip[0][5:]}")
        sys.exit(77)
    client.pause("end")
    tel = client.telemetry()
    check_eq(client.checks().get("gpu_dest_open"), -errno.EXDEV,
             "kvl_req_open into a GPU destination over tcp", client)
    reason = next((line[7:] for line in client.out if line.startswith("REASON ")), "")
    for words in ("block 0", "GPU segment", "NIC lo uses the tcp transport"):
        check(words in reason, "kvl_req_error() names the cause", words, reason, client)
    s = sched_row(tel, client)
    check_eq((s["opened"], s["open_failed"], s["dest_blocks"]), (0, 0, 0),
             "(opened, open_failed, dest_blocks): refused at the API, not by the lcore", client)
    client.go()
    check_eq(client.wait_exit(20), 0, "client exit status (refusal run)", client)
    log(f"tcp: refused with -EXDEV: {reason}")
    client2 = another_client(ctx, server, "dest-gpu", args,
                             "null_transport = true\nnull_transport_ack = true",
                             "client-null.ini")
    end = client2.pause("end", timeout=40)
    tel2 = client2.telemetry()
    res = client2.result()
    check_eq((res["requests_ok"], res["errors"], res["order_errors"], res["push_addr_errors"]),
             (n_req, 0, 0, 0), "(ok, errors, order errors, addresses not the engine's)", client2)
    check_eq(end["done"], [steps] * n_req, "steps DONE per request", client2)
    s = sched_row(tel2, client2)
    check_eq(s["dest_blocks"], n_req * steps * 2 * blocks, "dest_blocks", client2)
    check_eq(s["slots_free"], s["slots"], "slots_free = slots", client2)
    client2.go()
    check_eq(client2.wait_exit(20), 0, "client exit status (null transport run)", client2)
    log(f"null transport: {n_req} requests into VRAM destinations READY and DONE, "
        f"{s['dest_blocks']} blocks at the engine's device addresses, no slot taken")
    server.stop(signal.SIGINT)


SCENARIOS = {
    "req_dest_gpu": scenario_req_dest_gpu,
    "req_dest": scenario_req_dest,
    "req_step_flags": scenario_req_step_flags,
    "req_verify": scenario_req_verify,
    "req_ready_ahead": scenario_req_ready_ahead,
    "req_push": scenario_req_push,
    "req_cancel": scenario_req_cancel,
    "req_bad_input": scenario_req_bad_input,
}


def main(argv):
    return h.main(argv, SCENARIOS, LIMIT_S, ["PATH-TO-KVLANED", "PATH-TO-KVLANE-REQ-CLIENT"],
                  Ctx)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
