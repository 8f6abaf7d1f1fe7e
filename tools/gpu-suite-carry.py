#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""Pack the gpu suite, as meson registers it, for the lent GPU machine, and write its runner.

The GPU machine has no build tree: each test's command names binaries and folders of this
build and files of this source tree. This reads the tests from `meson introspect --tests`
(suite gpu, and any test named with --also), carries every binary they run with
tools/gpu-carry.sh (the binary and the non-system libraries it loads), copies every build
folder they name (the Python package), and writes DEST/run-suite.sh: each test with its own
environment and meson's timeout, its exit status, and a table at the end (77 = skipped).
Paths in the source tree become relative: the machine runs in a copy of this tree.

usage: tools/gpu-suite-carry.py BUILD DEST [--also TEST]...
then, on the GPU machine from the tree's root:  sh DEST/run-suite.sh [LOG_DIR]
"""
import argparse
import json
import os
import shlex
import shutil
import subprocess
import sys

SRC = os.path.realpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("build", help="the meson build folder (configured with CUDA)")
    ap.add_argument("dest", help="the carry folder to write (under the tree, git-ignored)")
    ap.add_argument("--also", action="append", default=[],
                    help="a test of another suite to run there too (e.g. connectors)")
    a = ap.parse_args()
    build = os.path.realpath(a.build)
    dest = a.dest.rstrip("/")
    if os.path.isabs(dest) or dest.startswith(".."):
        sys.exit(f"{sys.argv[0]}: DEST must be relative to the tree's root ({SRC}): "
                 "the machine runs in a copy of it")
    try:
        tests = json.loads(subprocess.run(["meson", "introspect", "--tests", build],
                                          check=True, capture_output=True, text=True).stdout)
    except (OSError, subprocess.CalledProcessError) as e:
        sys.exit(f"{sys.argv[0]}: meson introspect --tests {build}: {e}")
    chosen = [t for t in tests if "kvlane:gpu" in t["suite"] or t["name"] in a.also]
    missing = set(a.also) - {t["name"] for t in chosen}
    if missing:
        sys.exit(f"{sys.argv[0]}: no such test: {', '.join(sorted(missing))}")
    if not chosen:
        sys.exit(f"{sys.argv[0]}: no gpu test in {build} (configured without CUDA?)")

    bins, dirs = set(), set()

    def where(p):
        """A path of the build or the tree as the machine sees it; anything else as is."""
        if not p.startswith("/"):
            return p
        r = os.path.realpath(p)
        if r == build or r.startswith(build + "/"):
            rel = os.path.relpath(r, build)
            if os.path.isdir(r):
                if rel != ".":
                    dirs.add(rel)
                return f"$R/{dest}/build/{rel}" if rel != "." else f"$R/{dest}/lib"
            if os.access(r, os.X_OK):
                bins.add(rel)
                return f"$R/{dest}/bin/{os.path.basename(rel)}"
            return f"$R/{dest}/build/{rel}"
        if r == SRC or r.startswith(SRC + "/"):
            rel = os.path.relpath(r, SRC)
            return "$R" if rel == "." else f"$R/{rel}"
        if os.path.basename(p).startswith("python3"):
            return "python3"  # the machine's own (PyTorch is there)
        return p

    def value(v):
        return ":".join(where(x) for x in v.split(":"))

    lines = []
    for t in chosen:
        cmd = [where(c) for c in t["cmd"]]
        env = {k: value(v) for k, v in t["env"].items() if k != "LD_LIBRARY_PATH"}
        ld = [value(x) for x in t["env"].get("LD_LIBRARY_PATH", "").split(":") if x]
        env["LD_LIBRARY_PATH"] = ":".join(dict.fromkeys([f"$R/{dest}/lib"] + ld))
        envs = " ".join(f'{k}="{v}"' for k, v in sorted(env.items()))
        lines.append(f"t {shlex.quote(t['name'])} {int(t['timeout'] or 120)} env {envs} " +
                     " ".join(c if c.startswith("$R") else shlex.quote(c) for c in cmd))

    if os.path.exists(dest):
        shutil.rmtree(dest)
    rc = subprocess.run([os.path.join(SRC, "tools", "gpu-carry.sh"), build, dest] +
                        sorted(bins)).returncode
    if rc != 0:
        sys.exit(f"{sys.argv[0]}: tools/gpu-carry.sh failed ({rc})")
    for d in sorted(dirs):
        shutil.copytree(os.path.join(build, d), os.path.join(dest, "build", d),
                        symlinks=False, ignore=shutil.ignore_patterns("*.p", "*.o"),
                        dirs_exist_ok=True)
    commit = subprocess.run(["git", "-C", SRC, "describe", "--always", "--dirty"],
                            capture_output=True, text=True).stdout.strip()
    with open(os.path.join(dest, "run-suite.sh"), "w", encoding="utf-8") as f:
        f.write(f"""#!/bin/sh
# The gpu suite of {commit}, as meson registered it in {build} (tools/gpu-suite-carry.py).
# Run from the tree's root: sh {dest}/run-suite.sh [LOG_DIR]; one log per test in LOG_DIR.
R=$PWD
L=${{1:-$R/{dest}/logs}}
mkdir -p "$L"
ulimit -l unlimited 2>/dev/null
: > "$L/summary"
t() {{
	n=$1 s=$2
	shift 2
	t0=$(date +%s.%N)
	echo "== $n"
	stdbuf -oL -eL timeout -s KILL "$s" "$@" > "$L/$n.log" 2>&1
	rc=$?
	tail -n 15 "$L/$n.log"
	sec=$(awk "BEGIN{{printf \\"%.1f\\", $(date +%s.%N) - $t0}}")
	echo "rc=$rc $n ($sec s)"
	echo "$n $rc $sec" >> "$L/summary"
}}
nvidia-smi --query-gpu=name,driver_version,memory.used,memory.total --format=csv,noheader
""")
        for ln in lines:
            f.write(ln + "\n")
        f.write("""echo "## the gpu suite of %s" """ % commit + """
awk '{ v = $2 == 0 ? "PASS" : $2 == 77 ? "SKIP" : $2 == 137 ? "TIMEOUT" : "FAIL";
	printf "%-26s %-7s rc=%-4s %7s s\\n", $1, v, $2, $3; c[v]++ }
	END { printf "%d passed, %d failed, %d skipped\\n", c["PASS"], c["FAIL"] + c["TIMEOUT"],
		c["SKIP"] }' "$L/summary"
""")
    size = subprocess.run(["du", "-sh", dest], capture_output=True, text=True).stdout.split()[0]
    print(f"{dest}: {len(chosen)} tests, {len(bins)} binaries, {len(dirs)} folders, {size}; "
          f"on the machine: sh {dest}/run-suite.sh")


if __name__ == "__main__":
    main()
