#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""kvlane-serve-bench's plots from its results.json: TTFT and TPOT CDFs per mode, req/s and p99
TPOT against offered load (the --rate sweep), and the KV budget, window and in-use over time for
dual. Usage: serve_plot.py RESULTS.json OUTDIR. Exit 0, or 1 when matplotlib is missing or the
JSON is not the tool's (the reason on stderr)."""
import csv
import json
import os
import sys


def pct(v, p):
    v = sorted(v)
    return v[min(len(v) - 1, int(p / 100.0 * len(v)))] if v else float("nan")


def cdf(ax, values, label):
    v = sorted(values)
    if v:
        ax.plot(v, [(i + 1) / len(v) for i in range(len(v))], label=label)


def save(plt, fig, axes, title, path, written):
    """Grid and legend on each of @axes, the title, then the PNG at @path."""
    for a in axes:
        a.grid(alpha=0.3)
        a.legend()
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    written.append(path)


def main():
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:
        print(f"serve_plot: matplotlib missing ({e}): apt-get install python3-matplotlib",
              file=sys.stderr)
        return 1
    res_path, out = sys.argv[1], sys.argv[2]
    with open(res_path) as f:
        res = json.load(f)
    p = res["params"]
    title = f"{p['preset']}, link {p['link_gbps']} Gb/s (modelled), backend {p['backend']}"
    if p.get("prefill") == "real":  # the preset's layers computed on the decode GPU
        title += f", prefill real (decode GPU, priority {p.get('prefill_priority', 'decode')})"
    main_run = res["runs"][0]
    written = []

    fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 4))
    for m in main_run["modes"]:
        rs = m["requests"]
        cdf(a1, [r["first_token_s"] - r["arrival_s"] for r in rs], m["mode"])
        cdf(a2, [g for r in rs for g in r["gaps_ms"]], m["mode"])
    a1.set_xlabel("TTFT (s)")
    a2.set_xlabel("time between tokens (ms)")
    for a in (a1, a2):
        a.set_ylabel("fraction")
    save(plt, fig, (a1, a2), title, os.path.join(out, "cdf.png"), written)

    if len(res["runs"]) > 1:
        by_mode = {}
        for run in res["runs"]:
            for m in run["modes"]:
                rs = m["requests"]
                fin = sorted(r["finish_s"] for r in rs)
                n = len(fin)
                lo, hi = (n // 10, n - 1 - n // 10) if n >= 10 else (0, n - 1)
                rps = (hi - lo) / (fin[hi] - fin[lo]) if n > 1 and fin[hi] > fin[lo] else 0
                # over the whole run (first arrival to last completion), as the bench's
                # req/s (all)
                a0 = min((r["arrival_s"] for r in rs), default=0)
                rps_all = n / (fin[-1] - a0) if n and fin[-1] > a0 else 0
                tpot = [(r["finish_s"] - r["first_token_s"]) / max(1, r["output"] - 1) * 1e3
                        for r in rs]
                by_mode.setdefault(m["mode"], []).append((run["rate"], rps, pct(tpot, 99),
                                                          rps_all))
        fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 4))
        for mode, pts in by_mode.items():
            pts.sort()
            line, = a1.plot([x[0] for x in pts], [x[1] for x in pts], "o-",
                            label=f"{mode} (10-90 %)")
            a1.plot([x[0] for x in pts], [x[3] for x in pts], "s--", color=line.get_color(),
                    label=f"{mode} (all)")
            a2.plot([x[0] for x in pts], [x[2] for x in pts], "o-", label=mode)
        a1.set_ylabel("completed req/s")
        a2.set_ylabel("p99 TPOT (ms)")
        for a in (a1, a2):
            a.set_xlabel("offered load (req/s)")
        save(plt, fig, (a1, a2), title, os.path.join(out, "sweep.png"), written)

    for m in main_run["modes"]:
        if m["mode"] != "dual":
            continue
        rows = []
        with open(os.path.join(out, m["vram_series"])) as f:
            rows = list(csv.DictReader(f))
        if not rows:
            continue
        fig, a = plt.subplots(figsize=(8, 4))
        t = [float(r["t_s"]) for r in rows]
        for key, label in (("budget_bytes", "KV cache budget"),
                           ("window_bytes", "kvlane staging window"),
                           ("in_use_bytes", "KV cache in use"),
                           ("landing_bytes", "still to land (open requests)")):
            a.plot(t, [float(r[key]) / 2**30 for r in rows], label=label)
        a.set_xlabel("time (s)")
        a.set_ylabel("GiB")
        a.set_title("dual: KV budget, window, in use and still to land")
        save(plt, fig, (a,), None, os.path.join(out, "dual_vram.png"), written)
    for w in written:
        print(f"plot: {w}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
