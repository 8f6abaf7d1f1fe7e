#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# issue 20 on one GPU: the ipc transport between two processes of one host, every byte checked.
#
# usage (from the repository root on the GPU machine): sh tests/gpu/h200_ipc.sh CARRY
# CARRY: what tools/gpu-carry.sh packed (kvlaned, test_tcp_vram, test_tier_gpu, test_cudma,
# kvlane-ipc-bench). Logs go to $OUT (or /tmp); a summary per run, then the bench's table last.
# About 2 minutes; at most 6 min 10 s if every run hangs to its limit. On one GPU the copy is HBM to HBM: same-GPU IPC, not NVLink (that needs
# two GPUs: nvidia-h200-x2).
set -u
C=${1:?usage: $0 CARRY}
export LD_LIBRARY_PATH=$PWD/$C/lib
B=$C/bin
L=${OUT:-/tmp}
ulimit -l unlimited 2>/dev/null || true
nvidia-smi -L 2>&1 | head -4

run() {
	name=$1
	limit=$2
	shift 2
	timeout "$limit" "$@" >"$L/ipc-$name.log" 2>&1
	rc=$?
	echo "== $name: rc $rc ($*)"
	grep -E '^(PASS|FAIL|BENCH|skipped)|blocks \(|/kvlane/peers: bytes|guards:|/kvlane/stats' \
		"$L/ipc-$name.log" | cut -c1-400
	[ "$rc" = 0 ] || [ "$rc" = 77 ] || tail -n 25 "$L/ipc-$name.log" | cut -c1-400
}

# the new paths: 1 GiB from a kvlaned serving its VRAM, over ipc, into VRAM staging and into
# engine-owned GPU destinations (guards checked)
run ipc_staging 70 "$B/test_tcp_vram" "$B/kvlaned" ipc_staging
run ipc_dest 70 "$B/test_tcp_vram" "$B/kvlaned" ipc_dest
# regressions of what the branch touched: the same test's tcp mode, cudma, the tier over it
run tcp_staging 50 "$B/test_tcp_vram" "$B/kvlaned" staging
run cudma 40 "$B/test_cudma"
run tier_gpu 50 "$B/test_tier_gpu"
# the table last
timeout 90 "$B/kvlane-ipc-bench" --reps 5 --mib 1024 >"$L/ipc-bench.log" 2>&1
echo "== kvlane-ipc-bench: rc $?"
cat "$L/ipc-bench.log" | cut -c1-400
