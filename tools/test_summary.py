#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""Summarise meson's testlog.json files as one line: "N passed, N failed, N skipped".

usage: test_summary.py TESTLOG[:LABEL] ...   (LABEL tags that run's suites, e.g. unit:asan)
"""
import collections
import json
import sys

MAX_CHECKS = 10  # failed checks printed per failed test


def describe_failure(label, r):
    """One failed test as a few lines: name, meson's verdict, exit status, time, output tail."""
    name = r.get("name", "?").split(":", 1)[-1]
    head = f"  FAILED {name}{' [' + label + ']' if label else ''}: {r.get('result', '?')}, " \
        f"exit {r.get('returncode', '?')}, {r.get('duration', 0):.0f} s"
    out = (r.get("stdout") or "") + (r.get("stderr") or "")
    lines = [line.strip()[:200] for line in out.splitlines() if line.strip()]
    # The first failed checks (kvl_test.h's "CHECK failed", a FAIL line) say what went wrong;
    # the tail says how the run ended. Both, with the count of the checks left out.
    checks = [line for line in lines if "CHECK" in line and "failed" in line
              or line.startswith(("FAIL", "ERROR"))]
    shown = checks[:MAX_CHECKS]
    if len(checks) > len(shown):
        shown.append(f"... {len(checks) - len(shown)} more failed checks")
    tail = [line for line in lines[-4:] if line not in shown]
    return "\n".join([head] + [f"    | {line}" for line in shown + tail])


def main():
    args = sys.argv[1:] or ["build/meson-logs/testlog.json"]
    count = collections.Counter()
    suites = collections.defaultdict(collections.Counter)
    results = []
    failures = []
    for arg in args:
        path, _, label = arg.partition(":")
        try:
            with open(path, encoding="utf-8") as f:
                run = [json.loads(line) for line in f if line.strip()]
        except OSError as e:
            print(f"test_summary: cannot read {path}: {e.strerror}", file=sys.stderr)
            count["failed"] += 1
            continue
        results += run
        for r in run:
            # meson: OK, EXPECTEDFAIL pass; SKIP skips; FAIL, TIMEOUT, ERROR, UNEXPECTEDPASS
            # fail.
            res = r.get("result", "ERROR")
            kind = "passed" if res in ("OK", "EXPECTEDFAIL") else \
                "skipped" if res == "SKIP" else "failed"
            count[kind] += 1
            if kind == "failed":
                failures.append((label, r))
            # "name" is "project:suite / test".
            name = r.get("name", "?").split(" / ")[0].split(":")[-1]
            suites[f"{name}:{label}" if label else name][kind] += 1
    for name in sorted(suites):
        c = suites[name]
        print(f"  suite {name}: {c['passed']} passed, {c['failed']} failed, "
              f"{c['skipped']} skipped")
    # The failed tests last but one, so that a CI page showing only the tail still names them.
    for label, r in failures:
        print(describe_failure(label, r))
    if not results:
        print("test_summary: no test ran", file=sys.stderr)
        count["failed"] += 1
    print(f"{count['passed']} passed, {count['failed']} failed, {count['skipped']} skipped")
    return 1 if count["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
