#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# kvlane-serve-bench on the lent H200, one call (about 8 minutes with bg and steady): the batched attention kernel's
# check (test_attn_gpu varlen), iperf3 beside the tcp path's raw socket rate, the four modes on
# the default synthetic workload (64 requests) at 100 Gb/s pacing at 12 and 24 req/s and 24 of
# them at 2 req/s, a context over the KV budget streamed, dual with the runtime's own hybrid
# idle settings, and tcp's send/receive sizes one at a time. Run there from the repository root:
#   sh tools/kvlane_serve_bench_h200.sh CARRY_DIR   (CARRY_DIR from tools/gpu-carry.sh, with
#   bin/kvlane-serve-bench, bin/iperf3 and optionally bin/test_attn_gpu, serve_plot.py)
# SERVE_H200_ONLY="main raw" runs those steps alone; SERVE_H200_BUDGET_S (235) bounds the call
# (the main and bg steps alone take about 280 s since tcp's load is blocking by default).
# The 32x32x128 shape and the calibrated prefill ran at dff9e06/3eaab3f (docs/serve-bench.md);
# they run again only when named: SERVE_H200_ONLY="main calib writeup".
# What comes back under $OUT (7 files): results.json/.csv and the plots of the main run, the
# whole log (serve-h200.log), extras.tar (the other runs' CSVs, the low run's results.json);
# stdout ends with a summary of it and the yardsticks (iperf3, varlen, tcp's socket rates).
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
# the plotter: the carry's own copy if it has one (the tree there may be another branch's)
P=$PWD/tools/serve_plot.py
[ -f "$C/serve_plot.py" ] && P=$PWD/$C/serve_plot.py
export LD_LIBRARY_PATH=$PWD/$C/lib KVL_SERVE_PLOT=$P PYTHONUNBUFFERED=1
ulimit -l unlimited
mkdir -p "$OUT" "$W"
EAL="-l 0-1 --no-huge --no-pci -m 1024"
T0=$(date +%s)
END=${SERVE_H200_BUDGET_S:-235} # the whole call stops itself by then (a GPU call has 600 s)
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
	rc=$?
	echo "rc=$rc $n $(($(date +%s) - t0)) s"
	# a killed step's mode process may still hold VRAM for a few seconds: the next step
	# waits for the GPU to be free again (at most 30 s) instead of failing on it
	if [ "$rc" -ge 128 ]; then
		for _ in $(seq 30); do
			u=$(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits | head -1)
			[ "${u:-0}" -lt 2048 ] && break
			sleep 1
		done
		echo "   (after the kill: ${u:-?} MiB of VRAM in use)"
	fi
}
nvidia-smi --query-gpu=name,memory.total,memory.used,clocks.max.sm --format=csv,noheader
echo "cores: $(nproc); python3 matplotlib: $(python3 -c 'import matplotlib; print(matplotlib.__version__)' 2>&1 | tail -1)"

# 0. the batched attention kernel (tools/gpu_attn.cuh's variable-length form) against the
#    fixed-length one per sequence and float64, if test_attn_gpu was carried
[ -x "$B/test_attn_gpu" ] && r varlen 30 "$B/test_attn_gpu" varlen
# 1. the kernel's loopback TCP, one stream (the bench's tcp mode uses one connection); then,
#    as diagnostics only (the yardstick stays the default), iperf3 with the bench's send size
#    (1 MiB) and with 4 MiB: what the size of a send() costs the kernel's own path
case " ${SERVE_H200_ONLY:-iperf3} " in
*" iperf3 "*)
	"$B/iperf3" -s -p 5299 -D -I "$W/iperf3.pid"
	sleep 1
	;;
esac
r iperf3 20 "$B/iperf3" -c 127.0.0.1 -p 5299 -t 5 -P 1 -f g
r iperf3l1m 12 "$B/iperf3" -c 127.0.0.1 -p 5299 -t 3 -P 1 -f g -l 1M
r iperf3l4m 12 "$B/iperf3" -c 127.0.0.1 -p 5299 -t 3 -P 1 -f g -l 4M
# 2. the default synthetic workload (64 requests), 100 Gb/s pacing, at 12 req/s and 24 req/s
#    (beyond what the 100 Gb/s link carries: 1.53 GB of KV a request is 8.18 req/s), the four
#    modes; prefill: the stated model (400 TFLOP/s). Then 24 of them at 2 req/s (low load).
#    tcp and single load blocking (the default: the step that takes a request in waits for its
#    KV, the write-up's baseline); then the same with their load in the background (an
#    asynchronous connector, the stronger baseline), dual beside them again
r main 240 "$B/kvlane-serve-bench" $EAL --file-prefix sbmain -- --synthetic --preset llama3-8b --backend gpu \
	--max-requests 64 --rate 12 --max-input 32768 --host-mb 8192 --sweep 24 --out "$W/main" --quiet
r bg 180 "$B/kvlane-serve-bench" $EAL --file-prefix sbbg -- --synthetic --preset llama3-8b --backend gpu \
	--modes tcp,single,dual --baseline-load background --max-requests 64 --rate 12 --max-input 32768 \
	--host-mb 8192 --sweep 24 --out "$W/bg" --no-plot --quiet
# 2b. the same offered load, 192 requests, tcp and dual: a blocking tcp completes in waves (a
#     batch loaded, then decoded together), so 64 requests hold two of them and the 10-90 %
#     window misses the first one's load; with 192 the steady rates are compared again
r steady 200 "$B/kvlane-serve-bench" $EAL --file-prefix sbst -- --synthetic --preset llama3-8b --backend gpu \
	--modes tcp,dual --max-requests 192 --rate 12 --max-input 32768 --host-mb 8192 \
	--out "$W/steady" --no-plot --quiet
r low 90 "$B/kvlane-serve-bench" $EAL --file-prefix sblow -- --synthetic --preset llama3-8b --backend gpu \
	--max-requests 24 --rate 2 --max-input 32768 --host-mb 8192 --out "$W/low" --no-plot --quiet
# 3. the link rates unpaced: tcp (socket time only; pinned receive buffers, the copy engine
#    behind them) beside dual (the PCIe ceiling)
r raw 40 "$B/kvlane-serve-bench" $EAL --file-prefix sbraw -- --synthetic --preset llama3-8b --backend gpu \
	--modes tcp,dual --link-gbps 0 --max-requests 8 --rate 50 --input-median 16384 \
	--input-sigma 0.2 --output-len 4 --host-mb 8192 --out "$W/raw" --no-plot --quiet
# 4. a context over the VRAM budget: request 1's KV (32768 tokens, 4 GiB) > --kv-budget-mb 2048;
#    dual streams it through the window every token, resident (all in the cache) refuses it;
#    then the same trace with a budget that holds it, whose outputs must equal the streamed ones
printf '%s\n' '{"timestamp": 0, "input_length": 4096, "output_length": 32, "hash_ids": []}' \
	'{"timestamp": 100, "input_length": 32768, "output_length": 8, "hash_ids": []}' \
	'{"timestamp": 200, "input_length": 8192, "output_length": 32, "hash_ids": []}' >"$W/long.jsonl"
r long 40 "$B/kvlane-serve-bench" $EAL --file-prefix sblong -- --trace "$W/long.jsonl" --preset llama3-8b \
	--backend gpu --modes dual,resident --kv-budget-mb 2048 --host-mb 8192 --out "$W/long" --no-plot --quiet
r longref 40 "$B/kvlane-serve-bench" $EAL --file-prefix sblongr -- --trace "$W/long.jsonl" --preset llama3-8b \
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
# 5. dual at 12 req/s with the runtime's own hybrid defaults (spin 100 us after work, naps of
#    50 us) instead of the bench's (nap at once, up to 100 us): what the NIC lcore's spinning costs
r idle100 40 "$B/kvlane-serve-bench" $EAL --file-prefix sbidle -- --synthetic --preset llama3-8b --backend gpu \
	--modes dual --max-requests 24 --rate 12 --max-input 32768 --host-mb 8192 \
	--hybrid-idle-us 100 --hybrid-sleep-us 50 --out "$W/idle100" --no-plot --quiet
# 6. tcp's sender and receiver, unpaced, one knob at a time against raw's defaults (16 x 256
#    KiB receive buffers, 1 MiB a send()): the first runs' 4 x 4 MiB receive buffers, 16 x 512
#    KiB, 128 KiB a send() (iperf3's), 4 MiB a send(), one pattern-fill thread (not 4)
for v in "bufs4m --tcp-bufs 4 --tcp-buf-kb 4096" "bufs512k --tcp-bufs 16 --tcp-buf-kb 512" \
	"send128k --send-kb 128" "send4m --send-kb 4096" "fill1 --fill-threads 1"; do
	set -- $v
	n=$1
	shift
	r "tcp$n" 25 "$B/kvlane-serve-bench" $EAL --file-prefix "sbt$n" -- --synthetic --preset llama3-8b --backend gpu \
		--modes tcp --link-gbps 0 --max-requests 8 --rate 50 --input-median 16384 \
		--input-sigma 0.2 --output-len 4 --host-mb 8192 "$@" --out "$W/t$n" --no-plot --quiet
done
# 7. only when named in SERVE_H200_ONLY (each ran once before, docs/serve-bench.md): the
#    prefill time calibrated by a bf16 GEMM on this GPU (tcp and dual), and the write-up's
#    32x32x128 shape (512 KiB of KV a token; --max-input 8000: 4000 MiB, which the tier holds);
#    steady24: the steady step's 192 requests at 24 req/s
opt() { case " ${SERVE_H200_ONLY:-} " in *" $1 "*) r "$@" ;; esac; }
opt steady24 200 "$B/kvlane-serve-bench" $EAL --file-prefix sbst24 -- --synthetic --preset llama3-8b \
	--backend gpu --modes tcp,dual --max-requests 192 --rate 24 --max-input 32768 --host-mb 8192 \
	--out "$W/steady24" --no-plot --quiet
opt calib 100 "$B/kvlane-serve-bench" $EAL --file-prefix sbcal -- --synthetic --preset llama3-8b --backend gpu \
	--modes tcp,dual --calibrate-prefill --max-requests 24 --rate 2 --max-input 32768 \
	--host-mb 8192 --sweep 12 --out "$W/calib" --no-plot --quiet
# --prefill real: the preset's layers computed on this GPU per prompt (the bench's own kernels),
# prefill and decode sharing it; the KV they produce is what each mode moves (named only:
# SERVE_H200_ONLY="real"); its plots come back as real-*.png
opt real 300 "$B/kvlane-serve-bench" $EAL --file-prefix sbreal -- --synthetic --preset llama3-8b \
	--backend gpu --prefill real --max-requests 24 --rate ${SERVE_REAL_RATE:-1} --max-input 32768 \
	--host-mb 8192 --out "$W/real" --quiet
# the same with both CUDA streams at one priority (the prefill no longer yields the SMs to
# decode's kernels): SERVE_H200_ONLY="real realeq" for the two side by side
opt realeq 300 "$B/kvlane-serve-bench" $EAL --file-prefix sbreale -- --synthetic --preset llama3-8b \
	--backend gpu --prefill real --prefill-priority equal --max-requests 24 \
	--rate ${SERVE_REAL_RATE:-1} --max-input 32768 --host-mb 8192 --out "$W/realeq" --no-plot --quiet
# --prefill-peer: single's and dual's prefill side a process of its own (tcp's: its sender) on GPU
# SERVE_PREFILL_DEVICE (0; 1 on nvidia-h200-x2: prefill on GPU 1, decode on GPU 0, dual over
# NVLink), read as a kvlane peer's over the ipc transport (SERVE_H200_ONLY="realpeer")
opt realpeer 300 "$B/kvlane-serve-bench" $EAL --file-prefix sbrealp -- --synthetic --preset llama3-8b \
	--backend gpu --prefill real --prefill-peer --prefill-device ${SERVE_PREFILL_DEVICE:-0} \
	--modes ${SERVE_PEER_MODES:-tcp,single,dual,resident} --max-requests 24 --rate ${SERVE_REAL_RATE:-1} \
	--max-input 32768 --host-mb 8192 --out "$W/realpeer" --no-plot --quiet
# --prefill real on the write-up's 32x32x128 shape (MHA: four 8-head units a block, 512 KiB of
# KV a token): 8 requests at 0.5 req/s (SERVE_H200_ONLY="realwu")
opt realwu 150 "$B/kvlane-serve-bench" $EAL --file-prefix sbrealwu -- --synthetic --preset writeup-32x32 \
	--backend gpu --prefill real --max-requests 8 --rate 0.5 --input-median 4096 --output-len 32 \
	--kv-budget-mb 32768 --host-mb 8192 --max-input 8000 --out "$W/realwu" --no-plot --quiet
opt writeup 60 "$B/kvlane-serve-bench" $EAL --file-prefix sbwu -- --synthetic --preset writeup-32x32 --backend gpu \
	--modes tcp,dual,resident --max-requests 6 --rate 4 --input-median 4096 --output-len 16 \
	--kv-budget-mb 32768 --host-mb 4096 --max-input 8000 --out "$W/wu" --no-plot --quiet
[ -f "$W/iperf3.pid" ] && kill "$(cat "$W/iperf3.pid")" 2>/dev/null
# at most 7 files under $OUT (the device brings back 8): the main run's, the log, and one tar
# with every other run's results.csv, the low-load run's results.json and sweep.png again (it
# did not come back on its own once)
for f in results.json results.csv cdf.png sweep.png dual_vram.png; do
	[ -f "$W/main/$f" ] && cp "$W/main/$f" "$OUT/$f"
done
for f in results.json results.csv cdf.png dual_vram.png; do
	[ -f "$W/real/$f" ] && cp "$W/real/$f" "$OUT/real-$f"
done
(cd "$W" && for d in bg steady steady24 low raw long longref idle100 calib wu real realeq realwu realpeer t*; do
	[ -f "$d/results.csv" ] && echo "$d/results.csv"
done; [ -f low/results.json ] && echo low/results.json
[ -f main/sweep.png ] && echo main/sweep.png) >"$W/extras.list"
tar -C "$W" -cf "$OUT/extras.tar" -T "$W/extras.list" 2>/dev/null
echo "== summary"
# every table row, rc line and check; the cpu, steps and loop lines of main and low only (the
# whole log is serve-h200.log), then the yardsticks again last, so that they stay within the
# call's last 12,000 characters
awk '/^== summary/ { exit }
/^== / { step = $2; print; next }
/^\|---/ || (/^\| path/ && hdr++) { next }
/^(cpu|steps|loop) / { if (step == "main" || step == "low" || step == "bg") print; next }
/^(rc=|\||tcp: the socket|outputs:|serve-bench:|stream |long-check:|prefill calibrated:|varlen|PASS|FAIL|skipped|  [a-z]+: prefill)/ ||
/ requests, offered / { print }' "$OUT/serve-h200.log"
echo "== yardsticks"
awk '/^== summary/ { exit }
/^== / { step = $2; next }
/ *\[ *[0-9]+\].*sender/ { print step ": " $0; next }
/^(varlen|PASS|FAIL)/ { print step ": " $0; next }
/^tcp: the socket/ { print step ": " substr($0, 1, 160); next }
/^cpu dual\/tcp/ { print step ": " $0 }' "$OUT/serve-h200.log"
