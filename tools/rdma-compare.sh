#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# rdma-compare.sh BUILD_DIR OUT_DIR [MIB] - runs INSIDE the soft-RoCE VM (tests/rdma/vm): on one
# rxe0 <-> rxe1 link in one boot, perftest's ib_write_bw / ib_read_bw against kvlane-perf
# --write / --read --bw (kvlaned on rxe1 serving its segment), at 64 KiB and 1 MiB, MIB MiB
# (default 64) per run, and one table: size, op, ib_*_bw MB/s, kvlane-perf MB/s, ratio
# (kvlane/perftest). MB = 2^20 bytes in both tools. A measurement: the ratio never fails it;
# it fails (exit 1) only when a tool fails (non-zero exit, no result row, a failed transfer).
#
#   meson:   meson test -C BUILD --suite rdma compare     (RXE_VM_MEM 2048)
#   by hand: RXE_VM_MEM=2048 tests/rdma/rdma-suite.sh compare tools/rdma-compare.sh BUILD OUT
#            (OUT: where the logs go, e.g. the results folder rdma-suite.sh prints;
#             rdma-suite.sh's results land in $RXE_VM_RW/compare, default ./rdma-results)
#
# Each pair runs back to back, perftest first: server on rxe1, client on rxe0, -x the RoCE v2
# GID index, the same -s, -n (MIB MiB / size) and -t (transfers in flight, KVL_COMPARE_TX_DEPTH,
# default 64: kvlane-perf's default; perftest's is 128); ib_read_bw keeps its default -o.
# kvlaned idles with `hybrid` (it has no part in one-sided transfers; both ends share the VM's
# 2 vCPUs), kvlane-perf with KVL_COMPARE_IDLE (default yield, as e2e.sh). Under TCG the
# figures move with the host's load: read the ratios, not the absolute MB/s.
# Output: OUT_DIR/compare.tsv (the table), kvlaned.log, pt-*.client/.server, kl-*.json/.log.
set -u
. "${KVL_SRC:-$(cd "$(dirname "$0")/.." && pwd)}/tests/rdma/lib.sh"
build=${1:?usage: rdma-compare.sh BUILD_DIR OUT_DIR [MIB]}
out=${2:?usage: rdma-compare.sh BUILD_DIR OUT_DIR [MIB]}
mib=${3:-${KVL_COMPARE_MIB:-64}}
depth=${KVL_COMPARE_TX_DEPTH:-64}
idle=${KVL_COMPARE_IDLE:-yield}
: "${RXE_DEV0:?run inside the VM harness (tests/rdma/rdma-suite.sh)}" "${RXE_DEV1:?}" "${RXE_IP0:?}" "${RXE_IP1:?}" "${RXE_GID0:?}" "${RXE_GID1:?}"
command -v ib_write_bw > /dev/null || { echo "compare: ib_write_bw not found (Debian package perftest)"; exit 1; }
mkdir -p "$out" || exit 1
tmp=$(mktemp -d)
t0=$(date +%s.%N)
el() { awk "BEGIN{printf \"%.1f\", $(date +%s.%N) - $1}"; }

# kvlaned on rxe1: a 64 MiB pattern-filled readwrite segment "kv", as e2e.sh
kvl_rdma_inis "$tmp" cmp 64 hybrid "$idle"
eal="-l 0-1 --no-huge -m 500 --no-pci --log-level lib.eal:warning"
export RUNTIME_DIRECTORY=$tmp/run
mkdir -p "$RUNTIME_DIRECTORY"
trap 'kill ${srv:-} 2> /dev/null || true; rm -rf "$tmp"' EXIT
kvl_rdma_server "$build" "$tmp" "$out" compare $eal

FAIL=0
PORT=18600
# rxe's counters of retransmission, to read a slow or failed run by: ctr0 before, ctr_delta after
CTRS="$RXE_DEV0:completer_retry_err $RXE_DEV0:rcvd_seq_err $RXE_DEV0:retry_exceeded_err $RXE_DEV1:duplicate_request $RXE_DEV1:out_of_seq_request"
ctr_read() { for c in $CTRS; do v=0; read -r v < /sys/class/infiniband/${c%%:*}/ports/1/hw_counters/${c#*:} 2> /dev/null; printf '%s ' "$v"; done; }
ctr0() { C0=$(ctr_read); }
ctr_delta() {
	set -- $C0; d=
	for c in $CTRS; do
		read -r v < /sys/class/infiniband/${c%%:*}/ports/1/hw_counters/${c#*:} 2> /dev/null || v=${1:-0}
		[ "$v" != "${1:-0}" ] && d="$d, ${c%%:*} ${c#*:} +$((v - ${1:-0}))"
		shift
	done
	echo "${d:+; rxe:${d#,}}"
}
# perftest NAME TOOL SIZE ITERS: server on rxe1, client on rxe0; sets PT to the average MB/s
perftest() {
	name=$1 tool=$2 size=$3 iters=$4
	PORT=$((PORT + 1)) PT=
	s0=$(date +%s.%N)
	ctr0
	timeout 120 $tool -d $RXE_DEV1 -x $RXE_GID1 -p $PORT -F -s $size -n $iters -t $depth > "$out/$name.server" 2>&1 &
	spid=$!
	i=0
	until ss -ltn 2> /dev/null | grep -q ":$PORT "; do
		i=$((i + 1)); [ $i -gt 300 ] && { echo "server not listening on port $PORT after 30 s" > "$out/$name.client"; break; }
		sleep 0.1
	done
	timeout 120 $tool -d $RXE_DEV0 -x $RXE_GID0 -p $PORT -F -s $size -n $iters -t $depth $RXE_IP1 >> "$out/$name.client" 2>&1
	crc=$?
	wait $spid; src=$?
	# the result row follows the " #bytes" header: bytes iters BWpeak BWavg MsgRate
	PT=$(awk '/#bytes/{getline; print $4; exit}' "$out/$name.client")
	if [ $crc != 0 ] || [ $src != 0 ] || [ -z "$PT" ]; then
		echo "compare: $tool -s $size -n $iters FAILED (client exit $crc, server exit $src):"
		tail -n 8 "$out/$name.client" "$out/$name.server"
		FAIL=$((FAIL + 1)) PT=
	fi
	echo "compare: $tool -s $size -n $iters: ${PT:-?} MB/s ($(el $s0) s$(ctr_delta))"
}
# kvlane OP SIZE ITERS: kvlane-perf on rxe0 against kvlaned; sets KL to the average MB/s
kvlane() {
	op=$1 size=$2 iters=$3 KL=
	name=kl-$op-$size
	s0=$(date +%s.%N)
	read -r u0 _ < /proc/uptime
	ctr0
	timeout 120 "$build/kvlane-perf" $eal --file-prefix cli -- -c "$tmp/a.ini" --segment kv --seed 1 \
		--seg-size 64M -s $size -n $iters -t $depth --$op --bw --json "$RXE_IP1:18515" \
		> "$out/$name.json" 2> "$out/$name.log"
	krc=$?
	read -r u1 _ < /proc/uptime
	# KL: MB/s, or empty when the run failed; KT: where the process's wall time went
	# (/proc/uptime and the JSON's *_mono are the same clock in the guest)
	res=$(python3 -c '
import json, sys
o = json.loads(open(sys.argv[1]).readline())
ok = o["transport"] == "verbs" and o["failed"] == 0 and o["not_posted"] == 0 and o["completed_ok"] == int(sys.argv[2]) and o.get("result") == "ok"
u0, u1 = float(sys.argv[3]), float(sys.argv[4])
print("%.2f" % o["bw_avg_MBps"] if ok else "-", "start-up %.1f s, run %.2f s, exit %.1f s" % (o["t0_mono"] - u0, o["seconds"], u1 - o["t0_mono"] - o["seconds"]))' \
		"$out/$name.json" $iters $u0 $u1 2> /dev/null)
	KL=${res%% *} KT=${res#* }
	[ "$KL" = - ] && KL=
	if [ $krc != 0 ] || [ -z "$KL" ]; then
		echo "compare: kvlane-perf --$op -s $size -n $iters FAILED (exit $krc):"
		tail -n 8 "$out/$name.log"; head -c 2000 "$out/$name.json"; echo
		FAIL=$((FAIL + 1)) KL=
	fi
	echo "compare: kvlane-perf --$op -s $size -n $iters: ${KL:-?} MB/s ($(el $s0) s: ${KT:-no result}$(ctr_delta))"
}

echo "# compare: $(ib_write_bw --version 2> /dev/null | awk '{print "perftest " $NF; exit}') vs kvlane-perf, $RXE_DEV0 -> $RXE_DEV1, $mib MiB per run, -t $depth, kvlane-perf idle_policy $idle, veth mtu $(cat /sys/class/net/vethA/mtu)"
printf 'size\top\tib_bw_MBps\tkvlane_MBps\tratio\n' > "$out/compare.tsv"
for op in write read; do
	for size in 65536 1048576; do
		iters=$((mib * 1048576 / size))
		case $size in 65536) sz=64K ;; *) sz=1M ;; esac
		perftest pt-$op-$sz ib_${op}_bw $size $iters
		kvlane $op $sz $iters
		ratio=$(awk -v a="$KL" -v b="$PT" 'BEGIN{ if (a != "" && b + 0 > 0) printf "%.2f", a / b; else print "-" }')
		printf '%s\t%s\t%s\t%s\t%s\n' $sz $op "${PT:--}" "${KL:--}" $ratio >> "$out/compare.tsv"
	done
done
kill -TERM $srv
wait $srv || { echo "compare: kvlaned exited with status $? after SIGTERM"; tail -n 5 "$out/kvlaned.log"; FAIL=$((FAIL + 1)); }
echo
echo "rxe0 <-> rxe1, $mib MiB per run, MB/s (2^20 B/s), ratio = kvlane-perf / perftest"
awk -F'\t' 'NR == 1 { printf "%-5s %-6s %14s %17s %7s\n", "size", "op", "ib_*_bw MB/s", "kvlane-perf MB/s", "ratio"; next }
	{ printf "%-5s %-6s %14s %17s %7s\n", $1, $2, $3, $4, $5 }' "$out/compare.tsv"
echo "compare: $([ $FAIL = 0 ] && echo done || echo "$FAIL tool run(s) FAILED") after $(el $t0) s in the guest"
[ $FAIL = 0 ]
