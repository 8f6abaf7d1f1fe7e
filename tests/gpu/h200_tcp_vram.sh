#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# tcp into VRAM on the lent H200, one call: the copier alone, the three test_tcp_vram modes, and
# the gpu tests this path touches. usage: sh tests/gpu/h200_tcp_vram.sh CARRY_DIR
# (CARRY_DIR from tools/gpu-carry.sh BUILD CARRY_DIR kvlaned kvlane-req-client tests/test_h2d
#  tests/test_tcp_vram tests/test_gpuseg tests/test_tier_gpu; run from the tree's root.)
# Writes $OUT/h-vram.log (everything) and prints its PASS/FAIL/BENCH/rc lines at the end.
set -u
carry=${1:-.carry-gpu}
out=${OUT:-/tmp}
export LD_LIBRARY_PATH=$PWD/$carry/lib
B=$carry/bin
ulimit -l unlimited 2>/dev/null
nvidia-smi --query-gpu=name,driver_version,memory.used,memory.total --format=csv,noheader 2>&1
{
	echo "== h2d"
	timeout 120 "$B/test_h2d"
	echo "rc=$? h2d"
	for m in staging dest host; do
		echo "== tcp_vram $m"
		timeout 150 "$B/test_tcp_vram" "$B/kvlaned" "$m"
		echo "rc=$? tcp_vram $m"
	done
	for m in gpu auto; do
		echo "== gpuseg $m"
		timeout 120 "$B/test_gpuseg" "$m"
		echo "rc=$? gpuseg $m"
	done
	echo "== tier_gpu"
	timeout 180 "$B/test_tier_gpu"
	echo "rc=$? tier_gpu"
	echo "== req_dest_gpu"
	KVL_SRC=$PWD timeout 120 python3 tests/eal/test_sched.py req_dest_gpu "$B/kvlaned" \
		"$B/kvlane-req-client"
	echo "rc=$? req_dest_gpu"
} > "$out/h-vram.log" 2>&1
echo "== summary"
grep -E '^(PASS|FAIL|BENCH|rc=|skipped|/kvlane/stats|[0-9]+ blocks|guards|h2d:|refused:)' \
	"$out/h-vram.log"
