#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""EAL tests of kvlane-serve-bench's machinery, reduced (docs/serve-bench.md): the tiny preset, a
few requests, CPU attention, tcp from a prefill process over a real socket, single and dual
through kvlane's scheduler and the host tier (memcpy on the lcore: the CPU stand-in for the DMA
path, paced by [sched] tier_rate_mbps), resident. Asserted: every byte the decode side used was
checked (and matched), every request completed exactly once, dual's outputs equal resident's,
the report files are written and parse, a bad trace line is refused naming its line and field.
Never a timing.

Usage: test_serve.py {serve_modes|serve_trace|serve_long} PATH-TO-KVLANED PATH-TO-SERVE-BENCH
Exit 0 pass, 1 fail (with what was expected, what was seen, and the tool's output).
"""
import csv
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kvl_harness as h  # noqa: E402  (its own folder)
from kvl_harness import Fail, check, check_eq, log  # noqa: E402

LIMIT_S = {"serve_modes": 240, "serve_trace": 120, "serve_long": 120, "serve_real": 400, "serve_real_peer": 400}
MODES = ["tcp", "single", "dual", "resident"]
# tiny: 2 layers x 2 KV heads x 64, 16-token blocks of 8 KiB; a 4 MiB KV budget holds 512
# blocks, so the longest prompts (clipped at 2048 tokens = 256 blocks) wait for memory
TOOL = ["--preset", "tiny", "--backend", "cpu", "--kv-budget-mb", "4", "--host-mb", "8",
        "--max-batch", "4", "--window-mb", "2", "--link-gbps", "1", "--idle", "yield",
        "--quiet"]


class Ctx(h.Ctx):
    def __init__(self, scenario, kvlaned, bench):
        super().__init__(scenario, kvlaned, "serve")
        self.bench = bench


class Output:
    """One run of the tool, as the harness's checks describe a subject."""

    def __init__(self, text):
        self.text = text

    def describe(self):
        return h.indent(self.text)


def run(ctx, args, timeout=180):
    prefix = ctx.unique("serve")
    argv = [ctx.bench, *h.EAL, "-m", "256", "--file-prefix", prefix, "--", *TOOL, *args]
    env = dict(os.environ, RUNTIME_DIRECTORY=ctx.rundir())
    p = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env)
    return p, Output(f"$ {' '.join(argv)}\nrc {p.returncode}\n--- stdout\n{p.stdout}\n"
                     f"--- stderr\n{p.stderr[-6000:]}")


def check_run(run_, n, what, out, modes_=MODES, load="blocking"):
    modes = {m["mode"]: m for m in run_["modes"]}
    check_eq(sorted(modes), sorted(modes_), f"{what}: modes reported", out)
    hashes = {}
    for name, m in modes.items():
        ids = [r["id"] for r in m["requests"]]
        check_eq(sorted(ids), list(range(n)), f"{what} {name}: each request completed once "
                 "(ids of the completed)", out)
        check_eq((m["completed"], m["completed_twice"], m["refused_count"]), (n, 0, 0),
                 f"{what} {name}: (completed, completed twice, refused)", out)
        used = sum(r["kv_bytes"] for r in m["requests"])
        check(used > 0, f"{what} {name}: KV bytes used", "> 0", used, out)
        check_eq((m["bytes_checked"], m["bytes_bad"], m["bytes_used"]), (used, 0, used),
                 f"{what} {name}: (bytes checked, bad, used) = every byte the decode side "
                 "used, checked", out)
        # the tcp bytes crossed the socket; single/dual came through the scheduler's READY
        # addresses; resident moved nothing
        check_eq(m["kv_bytes_moved"], 0 if name == "resident" else used,
                 f"{what} {name}: KV bytes moved", out)
        if name == "tcp":
            check_eq(m["link_bytes"], used, f"{what} tcp: bytes the prefill process sent", out)
        for r in m["requests"]:
            check_eq(len(r["gaps_ms"]), r["output"] - 1,
                     f"{what} {name} request {r['id']}: token gaps (output - 1)", out)
            check(r["arrival_s"] <= r["prefill_done_s"] <= r["first_token_s"] <= r["finish_s"],
                  f"{what} {name} request {r['id']}: arrival <= prefill <= first <= finish",
                  "ordered", r, out)
        hashes[name] = {r["id"]: r["out_hash"] for r in m["requests"]}
        # the CPU split: the NIC lcore exists only with kvlane (single/dual), and its loop's
        # busy cycles, read from the runtime's telemetry socket, are > 0 once it moved bytes
        if name in ("single", "dual"):
            check(m["cpu_nic_lcore_busy_s"] > 0, f"{what} {name}: the NIC lcore's busy "
                  "seconds from /kvlane/lcores", "> 0", m["cpu_nic_lcore_busy_s"], out)
        else:
            check_eq((m["cpu_nic_lcore_s"], m["cpu_nic_lcore_busy_s"]), (0, 0),
                     f"{what} {name}: no NIC lcore (rusage, busy)", out)
        check_eq(m["streamed"], 0, f"{what} {name}: nothing streamed (all fit the budget)", out)
        # the batch waits for another request's KV only in tcp's and single's blocking load:
        # dual prefetches, resident moves nothing, a background load never holds a step
        if name in ("dual", "resident") or load == "background":
            check_eq((m["load_stalls"], m["load_stall_s"]), (0, 0),
                     f"{what} {name} ({load} load): the batch never waited for a load", out)
        else:
            check((m["load_stalls"] > 0) == (m["load_stall_s"] > 0),
                  f"{what} {name}: load stalls counted with their time", "both 0 or both > 0",
                  (m["load_stalls"], m["load_stall_s"]), out)
        # the decode loop's CPU by phase (admit, poll, launch, sync, after, idle): six
        # non-negative figures, and a loop that ran steps spent some; the steps' wall time
        # (step_begin to step_end's return) holds their compute time
        ph = m["loop_phase_s"]
        check(len(ph) == 6 and min(ph) >= 0 and sum(ph) > 0, f"{what} {name}: loop_phase_s",
              "6 figures >= 0, some > 0", ph, out)
        check(m["step_wall_s"] + 1e-5 >= m["compute_busy_s"] > 0,
              f"{what} {name}: steps' wall time >= their compute time > 0", "wall >= busy",
              (m["step_wall_s"], m["compute_busy_s"]), out)
    for name in ("dual", "single"):
        if name in hashes:
            check_eq(hashes[name], hashes["resident"], f"{what}: {name}'s outputs = resident's",
                     out)


def scenario_serve_modes(ctx):
    out_dir = os.path.join(ctx.tmp, "out")
    n = 10
    p, out = run(ctx, ["--synthetic", "--max-requests", str(n), "--rate", "50",
                       "--input-median", "300", "--input-sigma", "1.2", "--max-input", "2048",
                       "--output-len", "6", "--seed", "3", "--sweep", "20,80", "--out", out_dir])
    check_eq(p.returncode, 0, "kvlane-serve-bench exit status", out)
    for m in MODES:
        check(f"| {m} |" in p.stdout, f"the table's row for {m} on stdout", "present", "absent",
              out)
    with open(os.path.join(out_dir, "results.json")) as f:
        res = json.load(f)
    par = res["params"]
    check_eq((par["preset"], par["requests"], par["synthetic"], par["seed"], par["rate"]),
             ("tiny", n, True, 3, 50), "results.json params (preset, requests, synthetic, "
             "seed, rate)", out)
    check("modelled" in par and "link" in par["modelled"], "params say what is modelled",
          "the link", par.get("modelled"), out)
    check_eq(par["baseline_load"], "blocking", "params: tcp's and single's load (default)", out)
    check_eq(len(res["runs"]), 3, "runs: the main one and the two sweep rates", out)
    for k, run_ in enumerate(res["runs"]):
        check_run(run_, n, f"run {k} ({run_['tag']})", out)
    stalls = {m["mode"]: (m["load_stalls"], round(m["load_stall_s"], 4))
              for m in res["runs"][0]["modes"]}
    with open(os.path.join(out_dir, "results.csv")) as f:
        rows = list(csv.DictReader(f))
    check_eq(len(rows), 12, "results.csv rows (3 runs x 4 modes)", out)
    for r in rows:
        check_eq(int(r["completed"]), n, f"results.csv {r['run']} {r['mode']} completed", out)
        float(r["tpot_p99_ms"]), float(r["req_s_all"])  # parse
    with open(os.path.join(out_dir, "main-dual.vram.csv")) as f:
        vr = list(csv.DictReader(f))
    check(len(vr) > 0 and all(float(r["in_use_bytes"]) <= float(r["budget_bytes"]) for r in vr),
          "dual's VRAM series: rows, in use within the budget", "> 0 rows, in <= budget",
          len(vr), out)
    delayed = sum(m["delayed_for_memory"] for m in res["runs"][0]["modes"])
    log(f"{n} requests x 4 modes x 3 runs: every byte checked; {delayed} admissions waited "
        f"for memory in the main run; the batch waited for loads (times, s): {stalls}")
    # the background load (an asynchronous connector): the same checks, no step held
    bg_dir = os.path.join(ctx.tmp, "bg")
    p, out = run(ctx, ["--synthetic", "--max-requests", str(n), "--rate", "50",
                       "--input-median", "300", "--input-sigma", "1.2", "--max-input", "2048",
                       "--output-len", "6", "--seed", "3", "--modes", "tcp,single,resident",
                       "--baseline-load", "background", "--out", bg_dir, "--no-plot"])
    check_eq(p.returncode, 0, "kvlane-serve-bench --baseline-load background: exit status", out)
    with open(os.path.join(bg_dir, "results.json")) as f:
        res = json.load(f)
    check_eq(res["params"]["baseline_load"], "background", "params: --baseline-load", out)
    check_run(res["runs"][0], n, "background", out, ("tcp", "single", "resident"),
              "background")
    check("in the background" in p.stdout, "stdout says how tcp and single load",
          "in the background", p.stdout[:400], out)
    p, out = run(ctx, ["--synthetic", "--baseline-load", "later", "--out", bg_dir])
    check(p.returncode == 2 and "--baseline-load later: give blocking or background"
          in p.stderr, "--baseline-load later: exit 2 and the values it takes",
          "rc 2, blocking or background", (p.returncode, p.stderr[-300:]), out)
    log("--baseline-load background: tcp, single, resident, no step held; a bad value refused")
    # --prefill: a value it does not take, and real (the preset's layers on a GPU) with the CPU
    # backend, refused before anything starts, naming the option and what it needs
    p, out = run(ctx, ["--synthetic", "--prefill", "later", "--out", bg_dir])
    check(p.returncode == 2 and "--prefill later: give model or real" in p.stderr,
          "--prefill later: exit 2 and the values it takes", "rc 2, model or real",
          (p.returncode, p.stderr[-300:]), out)
    p, out = run(ctx, ["--synthetic", "--prefill", "real", "--out", bg_dir])
    check(p.returncode == 2 and "--prefill real" in p.stderr and "GPU backend" in p.stderr,
          "--prefill real with --backend cpu: exit 2, naming the GPU backend it needs",
          "rc 2, --prefill real ... GPU backend", (p.returncode, p.stderr[-300:]), out)
    p, out = run(ctx, ["--synthetic", "--prefill-peer", "--out", bg_dir])
    check(p.returncode == 2 and "--prefill-peer" in p.stderr and "--prefill real" in p.stderr,
          "--prefill-peer without --prefill real: exit 2, naming what it needs",
          "rc 2, --prefill-peer ... --prefill real", (p.returncode, p.stderr[-300:]), out)
    p, out = run(ctx, ["--synthetic", "--prefill-priority", "first", "--out", bg_dir])
    check(p.returncode == 2 and "--prefill-priority first: give decode or equal" in p.stderr,
          "--prefill-priority first: exit 2 and the values it takes", "rc 2, decode or equal",
          (p.returncode, p.stderr[-300:]), out)
    log("--prefill, --prefill-priority: bad values and real without a GPU refused before "
        "anything starts")
    # the tool plots with the PATH's python3, else /usr/bin/python3 (python3-matplotlib)
    have = [py for py in ("python3", "/usr/bin/python3")
            if subprocess.run([py, "-c", "import matplotlib"], capture_output=True).returncode == 0]
    if not have:
        log("matplotlib missing: the plots are not checked (apt-get install python3-matplotlib)")
        return
    for png in ("cdf.png", "sweep.png", "dual_vram.png"):
        path = os.path.join(out_dir, png)
        check(os.path.exists(path), f"plot {png} written", "exists", "missing", out)
        with open(path, "rb") as f:
            check_eq(f.read(8), b"\x89PNG\r\n\x1a\n", f"{png} is a PNG", out)
    log("plots: cdf.png, sweep.png, dual_vram.png")


MOONCAKE = [  # the published traces' shape: extra keys are ignored
    {"timestamp": 27482, "input_length": 700, "output_length": 5, "hash_ids": [0, 1]},
    {"timestamp": 27490, "input_length": 300, "output_length": 3, "hash_ids": [0], "x": [1]},
    {"timestamp": 27502, "input_length": 5000, "output_length": 4, "hash_ids": [2, 3, 4, 5]},
]


def scenario_serve_trace(ctx):
    # a path results.json must escape: the params stay JSON and name it exactly
    good = os.path.join(ctx.tmp, 'tr"a\\ce.jsonl')
    with open(good, "w") as f:
        for r in MOONCAKE:
            f.write(json.dumps(r) + "\n")
    out_dir = os.path.join(ctx.tmp, "out")
    p, out = run(ctx, ["--trace", good, "--max-input", "2048", "--time-scale", "2", "--out",
                       out_dir, "--no-plot"])
    check_eq(p.returncode, 0, "a Mooncake-shaped trace: exit status", out)
    with open(os.path.join(out_dir, "results.json")) as f:
        res = json.load(f)
    check_eq((res["params"]["requests"], res["params"]["clipped"]), (3, 1),
             "(requests, inputs clipped to --max-input)", out)
    check_eq(res["params"]["trace"], good, "params.trace: the path, escaped in JSON", out)
    check_run(res["runs"][0], 3, "trace", out)
    arr = sorted(r["arrival_s"] for r in res["runs"][0]["modes"][0]["requests"])
    check_eq([round(a, 3) for a in arr], [0.0, 0.016, 0.04],
             "arrivals from the first timestamp, x --time-scale 2", out)
    bad_cases = [
        ('{"timestamp": 1, "input_length": "abc", "output_length": 2, "hash_ids": []}',
         "field 'input_length'"),
        ('{"timestamp": 1, "input_length": 10, "hash_ids": [1]}', "field 'output_length'"),
        ('{"timestamp": 1, "input_length": 10, "output_length": 2, "hash_ids": [1, -2]}',
         "field 'hash_ids'"),
        ('{"timestamp": 1, "input_length": 10.5, "output_length": 2, "hash_ids": []}',
         "field 'input_length'"),
        ('{"timestamp": 1, "input_length": 10, "output_length": 2, "hash_ids": []',
         "not JSON (column"),
        ('not json', "not JSON (column"),
        ('[{"timestamp": 1, "input_length": 10, "output_length": 2, "hash_ids": []}]',
         "expected a JSON object"),
        ('{"timestamp": 1, "timestamp": 2, "input_length": 10, "output_length": 2, '
         '"hash_ids": []}', "duplicate"),
        ('{"timestamp": -1, "input_length": 10, "output_length": 2, "hash_ids": []}',
         "field 'timestamp'"),
    ]
    for k, (line, want) in enumerate(bad_cases):
        bad = os.path.join(ctx.tmp, f"bad{k}.jsonl")
        with open(bad, "w") as f:
            f.write(json.dumps(MOONCAKE[0]) + "\n\n" + line + "\n")
        p, out = run(ctx, ["--trace", bad, "--out", out_dir, "--no-plot"])
        check_eq(p.returncode, 2, f"bad trace {k}: exit status", out)
        check(f"{bad}:3: " in p.stderr and want in p.stderr,
              f"bad trace {k}: the error names the file, line 3 and the field",
              f"{bad}:3: ... {want}", p.stderr.strip(), out)
    log(f"a Mooncake-shaped trace served in all four modes; {len(bad_cases)} malformed lines "
        "refused by file:line and field")


def scenario_serve_long(ctx):
    """A request whose KV (2 MiB) is larger than the whole 1 MiB KV budget: dual streams it
    from the tier through the window every token (no OOM, no refusal), resident (fetch-all
    semantics: all of it in the cache) cannot hold it. Its outputs equal those of a run whose
    budget holds it, bit for bit; every streamed byte checked each token."""
    trace = os.path.join(ctx.tmp, "long.jsonl")
    reqs = [(0, 300, 5), (5, 2048, 4), (10, 500, 6)]  # (ms, input tokens, output tokens)
    with open(trace, "w") as f:
        for ts, inp, outp in reqs:
            f.write(json.dumps({"timestamp": ts, "input_length": inp, "output_length": outp,
                                "hash_ids": []}) + "\n")
    runs = {}
    for budget in (1, 4):
        out_dir = os.path.join(ctx.tmp, f"out{budget}")
        p, out = run(ctx, ["--trace", trace, "--modes", "dual,resident", "--kv-budget-mb",
                           str(budget), "--out", out_dir, "--no-plot"])
        check_eq(p.returncode, 0, f"budget {budget} MiB: exit status", out)
        with open(os.path.join(out_dir, "results.json")) as f:
            runs[budget] = ({m["mode"]: m for m in json.load(f)["runs"][0]["modes"]}, out,
                            out_dir, p.stdout)
    modes, out, out_dir, stdout = runs[1]
    dual, res = modes["dual"], modes["resident"]
    kv = {r["id"]: r["kv_bytes"] for r in dual["requests"]}
    check_eq(sorted(kv), [0, 1, 2], "budget 1 MiB, dual: every request completed once", out)
    check(kv[1] > 1 << 20, "the long request's KV", "> the 1 MiB budget", kv[1], out)
    check_eq((dual["completed"], dual["refused_count"], dual["completed_twice"],
              dual["streamed"]), (3, 0, 0, 1),
             "budget 1 MiB, dual: (completed, refused, twice, streamed)", out)
    used = kv[0] + kv[2] + kv[1] * reqs[1][2]  # the streamed one read whole every token
    check_eq((dual["bytes_checked"], dual["bytes_bad"], dual["bytes_used"],
              dual["kv_bytes_moved"]), (used, 0, used, used),
             "budget 1 MiB, dual: (checked, bad, used, moved): the streamed request's KV "
             "crossed and was checked once per token", out)
    check_eq((res["refused"], res["completed"]), ([1], 2),
             "budget 1 MiB, resident (all KV in the cache): (refused ids, completed)", out)
    check("stream dual: 1 request over the 1 MiB KV budget" in stdout,
          "stdout says what was streamed", "present", "absent", out)
    with open(os.path.join(out_dir, "main-dual.vram.csv")) as f:
        vr = list(csv.DictReader(f))
    check(len(vr) > 0 and all(float(r["in_use_bytes"]) <= (1 << 20) for r in vr),
          "dual's KV cache in use stays within the 1 MiB budget", "<= 1048576",
          max((float(r["in_use_bytes"]) for r in vr), default=None), out)
    big = runs[4][0]
    check_eq(big["dual"]["streamed"], 0, "budget 4 MiB: nothing streamed", runs[4][1])
    want = {r["id"]: r["out_hash"] for r in big["resident"]["requests"]}
    got = {r["id"]: r["out_hash"] for r in dual["requests"]}
    check_eq(got, want, "streamed dual's outputs = resident's with a budget that holds it "
             "(every request, bit for bit)", out)
    # single: a request larger than the whole KV budget is refused at admission after the
    # prefill side filled it into the tier; its tier room must come back, or the next one
    # (which needs that room: 826 + 376 blocks of a 1024-block tier) waits for it forever
    trace2 = os.path.join(ctx.tmp, "refused.jsonl")
    with open(trace2, "w") as f:
        for ts, inp in ((0, 6599), (5, 3000)):
            f.write(json.dumps({"timestamp": ts, "input_length": inp, "output_length": 3,
                                "hash_ids": []}) + "\n")
    p, out = run(ctx, ["--trace", trace2, "--modes", "single", "--out",
                       os.path.join(ctx.tmp, "refused"), "--no-plot"], timeout=90)
    check_eq(p.returncode, 0, "single, the first request over the budget: exit status", out)
    with open(os.path.join(ctx.tmp, "refused", "results.json")) as f:
        one = json.load(f)["runs"][0]["modes"][0]
    check_eq((one["refused"], [r["id"] for r in one["requests"]]), ([0], [1]),
             "single: (refused ids, completed ids): the refused request's tier room went back",
             out)
    # two requests over the 4 MiB budget stream side by side through a window that holds one
    # of their layers (3.2 and 3.9 MiB of 4): each token's next opens only once its current
    # one has landed, so no prefetched layer takes the room the current token needs (they
    # stalled each other until the 60-s check failed the run, and the scheduler's block pool
    # was sized for one streamed request: kvl_req_open said ENOSPC)
    trace3 = os.path.join(ctx.tmp, "two-streams.jsonl")
    with open(trace3, "w") as f:
        for ts, inp in ((0, 6600), (100, 7900)):
            f.write(json.dumps({"timestamp": ts, "input_length": inp, "output_length": 6,
                                "hash_ids": []}) + "\n")
    p, out = run(ctx, ["--trace", trace3, "--modes", "dual", "--kv-budget-mb", "4",
                       "--host-mb", "16", "--window-mb", "4", "--out",
                       os.path.join(ctx.tmp, "two"), "--no-plot"], timeout=90)
    check_eq(p.returncode, 0, "dual, two streamed requests, a window of one layer: exit status",
             out)
    with open(os.path.join(ctx.tmp, "two", "results.json")) as f:
        two = json.load(f)["runs"][0]["modes"][0]
    used2 = sum(r["kv_bytes"] * r["output"] for r in two["requests"])
    check_eq((two["completed"], two["streamed"], two["bytes_checked"], two["bytes_bad"],
              two["bytes_used"]), (2, 2, used2, 0, used2),
             "two streams side by side: (completed, streamed, checked, bad, used): every "
             "token read and checked its request's whole KV", out)
    # sizes that cannot work are refused before anything starts, naming the option
    p, out = run(ctx, ["--trace", trace, "--modes", "dual", "--host-mb", "1", "--out",
                       os.path.join(ctx.tmp, "bad"), "--no-plot"])
    check_eq(p.returncode, 2, "--host-mb 1 (smaller than a request): exit status", out)
    check("--host-mb 1" in p.stderr and "raise --host-mb to at least 2" in p.stderr,
          "the error names --host-mb and the size needed", "--host-mb 1 ... at least 2",
          p.stderr.strip()[-300:], out)
    # tcp's receive buffer of 0 KiB, and a send() larger than the sender's 4 MiB chunks, are
    # refused before anything starts, naming the option
    for bad in (["--tcp-buf-kb", "0"], ["--send-kb", "8192"]):
        p, out = run(ctx, ["--trace", trace, "--modes", "tcp", *bad, "--out",
                           os.path.join(ctx.tmp, "bad"), "--no-plot"])
        check_eq(p.returncode, 2, f"{' '.join(bad)}: exit status", out)
        check(bad[0] in p.stderr, f"the error names {bad[0]}", bad[0], p.stderr.strip()[-300:],
              out)
    log(f"a {kv[1] >> 10} KiB request over a 1 MiB KV budget streamed {reqs[1][2]} times "
        "through the window, every byte checked, outputs = the in-budget run's")


# the gpu suite's runs of --prefill real: llama3-8b, REAL_N short prompts
REAL_N = 4
REAL_ARGS = ["--synthetic", "--preset", "llama3-8b", "--backend", "gpu", "--max-requests",
             str(REAL_N), "--rate", "4", "--input-median", "1000", "--input-sigma", "0.6",
             "--max-input", "3000", "--output-len", "8", "--seed", "5", "--kv-budget-mb", "4096",
             "--host-mb", "2048", "--window-mb", "1024", "--link-gbps", "100", "--no-plot"]


def scenario_serve_real(ctx):
    """gpu suite: --prefill real on llama3-8b (the preset's layers computed on the GPU per
    prompt, prefill and decode sharing it): every mode serves each request once, every landed
    block equal to the prefill's checksum, single's, dual's and tcp's outputs equal to
    resident's, and unlike the modelled prefill's (so the KV is the model's, not the pattern);
    exit 77 where the bench has no GPU backend."""
    n = REAL_N
    base = REAL_ARGS
    real_dir, model_dir = os.path.join(ctx.tmp, "real"), os.path.join(ctx.tmp, "model")
    p, out = run(ctx, [*base, "--prefill", "real", "--out", real_dir], timeout=240)
    if p.returncode == 77:
        print(f"skipped: {p.stderr.strip()[-200:]}")
        sys.exit(77)
    check_eq(p.returncode, 0, "kvlane-serve-bench --prefill real: exit status", out)
    with open(os.path.join(real_dir, "results.json")) as f:
        res = json.load(f)
    check_eq((res["params"]["prefill"], res["params"]["prefill_priority"]), ("real", "decode"),
             "params: --prefill, --prefill-priority (default)", out)
    check_run(res["runs"][0], n, "real", out)
    modes = {m["mode"]: m for m in res["runs"][0]["modes"]}
    toks = None
    for name, m in modes.items():
        got = (m["prefill"], m["prefill_count"])
        check_eq(got, ("real", n), f"{name}: (prefill, prompts prefilled)", out)
        toks = toks or m["prefill_tokens"]
        check_eq(m["prefill_tokens"], toks, f"{name}: prompt tokens prefilled (as the others)",
                 out)
        check(m["prefill_gpu_s"] > 0 and m["prefill_flops"] > 0, f"{name}: prefill GPU time and "
              "FLOPs", "> 0", (m["prefill_gpu_s"], m["prefill_flops"]), out)
        for r in m["requests"]:
            check(r["arrival_s"] <= r["prefill_start_s"] <= r["prefill_done_s"]
                  and r["prefill_gpu_s"] > 0, f"{name} request {r['id']}: arrival <= prefill "
                  "start <= prefill done, GPU time > 0", "ordered", r, out)
        check(f"{name}: prefill (real, this GPU): {n} prompts" in p.stdout,
              f"stdout: {name}'s prefill line", "present", p.stdout[-1500:], out)
    hashes = {name: {r["id"]: r["out_hash"] for r in m["requests"]} for name, m in modes.items()}
    check_eq(hashes["tcp"], hashes["resident"], "real: tcp's outputs = resident's", out)
    p, out = run(ctx, [*base, "--modes", "resident", "--out", model_dir], timeout=120)
    check_eq(p.returncode, 0, "the same trace with the modelled prefill: exit status", out)
    with open(os.path.join(model_dir, "results.json")) as f:
        mod = {r["id"]: r["out_hash"] for r in json.load(f)["runs"][0]["modes"][0]["requests"]}
    same = [i for i, h_ in mod.items() if hashes["resident"].get(i) == h_]
    check_eq(same, [], "requests whose outputs with the real prefill equal the pattern's", out)
    log(f"{n} prompts ({toks} tokens) prefilled on the GPU in 4 modes: every landed block equal "
        "to the prefill's checksum, outputs equal across modes and unlike the pattern's")


def scenario_serve_real_peer(ctx):
    """gpu suite: --prefill real --prefill-peer: single's and dual's prefill side a process of
    its own (its own kvlane runtime, its KV in its VRAM on GPU 0), read by the decode side as
    a peer's; on one host the runtime reads it over the ipc transport (one GPU: an HBM copy,
    not NVLink); tcp's prefill in its sender process, its times and checksums sent back
    through shared memory. Every landed block equal to the prefill's checksum, outputs equal to
    resident's (whose prefill runs in the decode process); exit 77 without a GPU."""
    n = REAL_N
    out_dir = os.path.join(ctx.tmp, "peer")
    p, out = run(ctx, [*REAL_ARGS, "--prefill", "real", "--prefill-peer", "--out", out_dir],
                 timeout=360)
    if p.returncode == 77:
        print(f"skipped: {p.stderr.strip()[-200:]}")
        sys.exit(77)
    check_eq(p.returncode, 0, "kvlane-serve-bench --prefill real --prefill-peer: exit status",
             out)
    with open(os.path.join(out_dir, "results.json")) as f:
        res = json.load(f)
    check_run(res["runs"][0], n, "peer", out)
    where = {"tcp": "in the sender process on GPU 0",
             "single": "a process of its own read as a peer, on GPU 0",
             "dual": "a process of its own read as a peer, on GPU 0", "resident": "this GPU"}
    for m in res["runs"][0]["modes"]:
        name = m["mode"]
        check(f"{name}: prefill (real, {where[name]}): {n} prompts" in p.stdout,
              f"stdout: {name}'s prefill line", "present", p.stdout[-2000:], out)
        check_eq(m["prefill_count"], n, f"{name}: prompts prefilled (as the decode side "
                 "was told)", out)
        for r in m["requests"]:
            check(r["arrival_s"] <= r["prefill_start_s"] <= r["prefill_done_s"]
                  and r["prefill_gpu_s"] > 0, f"{name} request {r['id']}: arrival <= prefill "
                  "start <= prefill done, GPU time > 0 (the prefill process's times)",
                  "ordered", r, out)
    for name in ("single", "dual"):
        check(f'{name}: the prefill process at 127.0.0.1:' in p.stdout
              and '"transport_ipc":["ipc"' in p.stdout.replace(" ", ""),
              f"{name}: the prefill process read as a peer over the ipc transport "
              "(/kvlane/peers)", "transport_ipc ipc", p.stdout[-2000:], out)
    log(f"{n} prompts prefilled in a process of their own (tcp: the sender; single, dual: a "
        "peer read over ipc): every landed block equal to the prefill's checksum, outputs "
        "equal to resident's")


SCENARIOS = {"serve_modes": scenario_serve_modes, "serve_trace": scenario_serve_trace,
             "serve_long": scenario_serve_long, "serve_real": scenario_serve_real,
             "serve_real_peer": scenario_serve_real_peer}


def main(argv):
    return h.main(argv, SCENARIOS, LIMIT_S, ["PATH-TO-KVLANED", "PATH-TO-SERVE-BENCH"], Ctx)


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv))
    except Fail as e:
        print(f"FAIL: {e}")
        sys.exit(1)
