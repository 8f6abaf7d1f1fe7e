#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# kvlane-serve-bench on the lent H200, one call (about 5 minutes): iperf3 beside the tcp path's
# raw socket rate (two socket-buffer settings), the four modes on the default synthetic workload
# at 100 Gb/s pacing with a --rate sweep, the same with the prefill calibrated by a GEMM, a
# context over the KV budget streamed, and the 32x32x128 shape briefly. Run there from the repository root:
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
T0=$(date +%s)
END=${SERVE_H200_BUDGET_S:-540} # the whole call stops itself by then (a GPU call has 600 s)
r() { # r NAME LIMIT_S CMD...: one step, its exit status and time, inside the call's budget
	n=$1 lim=$2
	shift 2
	case " ${SERVE_H200_ONLY:-$n} " in # SERVE_H200_ONLY="writeup main": those steps alone
	*" $n "*) ;;
	*) return ;;
	esac
	left=$((END - ($(date +%s) - T0)))
	[ "$lim" -gt "$left" ] && lim=$left
	if [ "$lim" -le 5 ]; then
		echo "== $n skipped: the call's ${END} s budget is spent"
		return
	fi
	echo "== $n ($(date -u +%T), limit ${lim} s)"
	t0=$(date +%s)
	timeout -s KILL "$lim" "$@"
	echo "rc=$? $n $(($(date +%s) - t0)) s"
}
nvidia-smi --query-gpu=name,memory.total,memory.used,clocks.max.sm --format=csv,noheader
echo "cores: $(nproc); python3 matplotlib: $(python3 -c 'import matplotlib; print(matplotlib.__version__)' 2>&1 | tail -1)"

# 1. the kernel's loopback TCP, one stream (the bench's tcp mode uses one connection)
case " ${SERVE_H200_ONLY:-iperf3} " in
*" iperf3 "*)
	"$B/iperf3" -s -1 -p 5299 -D
	sleep 1
	;;
esac
r iperf3 20 "$B/iperf3" -c 127.0.0.1 -p 5299 -t 5 -P 1 -f g
# 2. the link rates unpaced: tcp (socket time only; pinned receive buffers, the copy engine
#    behind them) beside dual (the PCIe ceiling), then tcp again with 16 MiB socket buffers
r raw 60 "$B/kvlane-serve-bench" $EAL --file-prefix sbraw -- --synthetic --preset llama3-8b --backend gpu \
	--modes tcp,dual --link-gbps 0 --max-requests 8 --rate 50 --input-median 16384 \
	--input-sigma 0.2 --output-len 4 --host-mb 8192 --out "$W/raw" --no-plot --quiet
r rawbuf 40 "$B/kvlane-serve-bench" $EAL --file-prefix sbrawb -- --synthetic --preset llama3-8b --backend gpu \
	--modes tcp --link-gbps 0 --max-requests 8 --rate 50 --input-median 16384 \
	--input-sigma 0.2 --output-len 4 --sock-buf-kb 16384 --tcp-bufs 8 --out "$W/rawb" --no-plot --quiet
# 3. the default workload, 100 Gb/s pacing, 24 requests, and a sweep point at 6x the rate (its
#    KV, ~1.4 GB a request, is then more than the 100 Gb/s link carries); prefill: the stated
#    model (400 TFLOP/s)
r main 180 "$B/kvlane-serve-bench" $EAL --file-prefix sbmain -- --synthetic --preset llama3-8b --backend gpu \
	--max-requests 24 --rate 2 --max-input 32768 --host-mb 8192 --sweep 12 --out "$W/main" --quiet
# 4. the same with the prefill time calibrated by a bf16 GEMM on this GPU (tcp and dual)
r calib 100 "$B/kvlane-serve-bench" $EAL --file-prefix sbcal -- --synthetic --preset llama3-8b --backend gpu \
	--modes tcp,dual --calibrate-prefill --max-requests 24 --rate 2 --max-input 32768 \
	--host-mb 8192 --sweep 12 --out "$W/calib" --no-plot --quiet
# 5. a context over the VRAM budget: request 1's KV (32768 tokens, 4 GiB) > --kv-budget-mb 2048;
#    dual streams it through the window every token, resident (all in the cache) refuses it;
#    then the same trace with a budget that holds it, whose outputs must equal the streamed ones
printf '%s\n' '{"timestamp": 0, "input_length": 4096, "output_length": 32, "hash_ids": []}' \
	'{"timestamp": 100, "input_length": 32768, "output_length": 8, "hash_ids": []}' \
	'{"timestamp": 200, "input_length": 8192, "output_length": 32, "hash_ids": []}' >"$W/long.jsonl"
r long 60 "$B/kvlane-serve-bench" $EAL --file-prefix sblong -- --trace "$W/long.jsonl" --preset llama3-8b \
	--backend gpu --modes dual,resident --kv-budget-mb 2048 --host-mb 8192 --out "$W/long" --no-plot --quiet
r longref 60 "$B/kvlane-serve-bench" $EAL --file-prefix sblongr -- --trace "$W/long.jsonl" --preset llama3-8b \
	--backend gpu --modes dual,resident --host-mb 8192 --out "$W/longref" --no-plot --quiet
[ -f "$W/longref/results.json" ] && python3 - "$W/long/results.json" "$W/longref/results.json" <<'PY'
import json, sys
def hashes(p, mode):
    for m in json.load(open(p))["runs"][0]["modes"]:
        if m["mode"] == mode:
            return {r["id"]: r["out_hash"] for r in m["requests"]}, m
try:
    got, d = hashes(sys.argv[1], "dual")
    want, _ = hashes(sys.argv[2], "resident")
    print(f"long-check: streamed {d['streamed']}, dual (2 GiB budget) outputs = resident (64 GiB budget): "
          f"{sum(got.get(i) == h for i, h in want.items())} of {len(want)}; bytes checked {d['bytes_checked']} "
          f"= used {d['bytes_used']}, bad {d['bytes_bad']}")
except Exception as e:
    print(f"long-check: failed: {e}")
PY
# 6. the write-up's 32 x 32 x 128 shape (4 kernel units per layer), briefly; --host-mb 4096 <
#    its 8192 MiB window is what failed before (the pool now holds the larger); --max-input 8000
#    (4000 MiB a request at 512 KiB a token) so the tier holds the largest request
r writeup 60 "$B/kvlane-serve-bench" $EAL --file-prefix sbwu -- --synthetic --preset writeup-32x32 --backend gpu \
	--modes tcp,dual,resident --max-requests 6 --rate 4 --input-median 4096 --output-len 16 \
	--kv-budget-mb 32768 --host-mb 4096 --max-input 8000 --out "$W/wu" --no-plot --quiet
for f in results.json results.csv cdf.png sweep.png dual_vram.png; do
	[ -f "$W/main/$f" ] && cp "$W/main/$f" "$OUT/$f"
done
for d in raw rawb calib long longref wu; do
	[ -f "$W/$d/results.csv" ] && cp "$W/$d/results.csv" "$OUT/$d-results.csv"
done
echo "== summary"
# every table row, rc line and check; the CPU split and step lines of main, calib and long
# only (the whole log is serve-h200.log), so the summary fits the call's last 12,000 characters
awk '/^== summary/ { exit }
/^== / { step = $2; print; next }
/^\|---/ || (/^\| path/ && hdr++) { next }
/^(cpu|steps) / { if (step == "main" || step == "calib" || step == "long") print; next }
/^(rc=|\|| *\[ *[0-9]+\].*(sender|receiver)|tcp: the socket|outputs:|serve-bench:|stream |long-check:|prefill calibrated:|cpu dual\/tcp)/ ||
/ requests, offered / { print }' "$OUT/serve-h200.log"
