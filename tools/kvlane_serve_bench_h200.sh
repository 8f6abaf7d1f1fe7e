#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# kvlane-serve-bench on the lent H200, one call: iperf3 beside the tcp path's raw socket rate,
# the four modes on the default synthetic workload at 100 Gb/s pacing with a --rate sweep, and
# the 32x32x128 shape briefly. Run there from the repository root:
#   sh tools/kvlane_serve_bench_h200.sh CARRY_DIR   (CARRY_DIR from tools/gpu-carry.sh, with
#   bin/kvlane-serve-bench and bin/iperf3)
# What comes back under $OUT: results.json/.csv and the plots of the main run, the raw and
# writeup runs' CSVs, the whole log (serve-h200.log); stdout ends with a summary of it.
set -u
if [ "${SERVE_H200_LOGGED:-}" = "" ]; then # everything into $OUT/serve-h200.log as well
	mkdir -p "${OUT:-/tmp/serve-out}"
	SERVE_H200_LOGGED=1 sh "$0" "$@" 2>&1 | tee "${OUT:-/tmp/serve-out}/serve-h200.log"
	exit 0
fi
C=${1:-.carry/serve}
OUT=${OUT:-/tmp/serve-out}
W=/tmp/serve-bench
B=$C/bin
export LD_LIBRARY_PATH=$PWD/$C/lib KVL_SERVE_PLOT=$PWD/tools/serve_plot.py PYTHONUNBUFFERED=1
ulimit -l unlimited
mkdir -p "$OUT" "$W"
EAL="-l 0-1 --no-huge --no-pci -m 1024"
r() { # r NAME LIMIT_S CMD...: one step, its exit status and time
	n=$1 lim=$2
	shift 2
	echo "== $n ($(date -u +%T))"
	t0=$(date +%s)
	timeout -s KILL "$lim" "$@"
	echo "rc=$? $n $(($(date +%s) - t0)) s"
}
nvidia-smi --query-gpu=name,memory.total,memory.used,clocks.max.sm --format=csv,noheader
echo "cores: $(nproc); python3 matplotlib: $(python3 -c 'import matplotlib; print(matplotlib.__version__)' 2>&1 | tail -1)"

# 1. the kernel's loopback TCP, one stream (the bench's tcp mode uses one connection)
"$B/iperf3" -s -1 -p 5299 -D
sleep 1
r iperf3 20 "$B/iperf3" -c 127.0.0.1 -p 5299 -t 5 -P 1 -f g
# 2. the bench's link rates unpaced: tcp (socket time only) and dual (the PCIe ceiling)
r raw 100 "$B/kvlane-serve-bench" $EAL --file-prefix sbraw -- --synthetic --preset llama3-8b --backend gpu \
	--modes tcp,dual --link-gbps 0 --max-requests 8 --rate 50 --input-median 16384 \
	--input-sigma 0.2 --output-len 4 --host-mb 8192 --out "$W/raw" --no-plot --quiet
# 3. the default workload, 100 Gb/s pacing, 24 requests, and a sweep point at 6x the rate (its
#    KV, ~1.4 GB a request, is then more than the 100 Gb/s link carries)
r main 360 "$B/kvlane-serve-bench" $EAL --file-prefix sbmain -- --synthetic --preset llama3-8b --backend gpu \
	--max-requests 24 --rate 2 --max-input 32768 --host-mb 8192 --sweep 12 --out "$W/main" --quiet
# 4. the write-up's 32 x 32 x 128 shape (4 kernel units per layer), briefly
r writeup 80 "$B/kvlane-serve-bench" $EAL --file-prefix sbwu -- --synthetic --preset writeup-32x32 --backend gpu \
	--modes dual,resident --max-requests 6 --rate 4 --input-median 4096 --output-len 16 \
	--kv-budget-mb 32768 --host-mb 4096 --out "$W/wu" --no-plot --quiet
for f in results.json results.csv cdf.png sweep.png dual_vram.png; do
	[ -f "$W/main/$f" ] && cp "$W/main/$f" "$OUT/$f"
done
[ -f "$W/raw/results.csv" ] && cp "$W/raw/results.csv" "$OUT/raw-results.csv"
[ -f "$W/wu/results.csv" ] && cp "$W/wu/results.csv" "$OUT/writeup-results.csv"
echo "== summary"
grep -E '^(tcp: the socket|== |rc=|\[ *[0-9]+\].*(sender|receiver)|\||.* requests, offered |outputs:|kvlane-serve-bench:|workload:|synthetic:|modelled:|serve-bench:)' "$OUT/serve-h200.log" | grep -v '^== summary'
