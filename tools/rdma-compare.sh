#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# rdma-compare.sh BUILD_DIR OUT_DIR [MIB] - runs INSIDE the soft-RoCE VM (tests/rdma/vm): on one
# rxe0 <-> rxe1 link in one boot, kvlane-perf --write / --read --bw (kvlaned on rxe1 serving its
# segment) beside two peers, perftest's ib_write_bw / ib_read_bw and UCX's ucx_perftest
# (UCT put_bw / get on its rc_verbs transport; UCP cannot run on rxe, below), at 64 KiB and 1 MiB, MIB MiB (default 32)
# per run. One table: size, op, each tool's MB/s, kvlane/perftest and kvlane/UCX. MB = 2^20 bytes
# in all three tools. A measurement: the ratios never fail it; it fails (exit 1) only when
# perftest or kvlane-perf fails (non-zero exit, no result row, a failed transfer). UCX is a
# guest: when it cannot run, its column says "not run" and why (in the log), and that is all.
#
#   meson:   meson test -C BUILD --benchmark rdma_compare     (RXE_VM_MEM 2048)
#   by hand: RXE_VM_MEM=2048 tests/rdma/rdma-suite.sh compare tools/rdma-compare.sh BUILD OUT
#            (OUT: where the logs go, e.g. the results folder rdma-suite.sh prints;
#             rdma-suite.sh's results land in $RXE_VM_RW/compare, default ./rdma-results)
#
# What is held equal (the fairness rules; docs/cpu-cost.md "READ beside perftest and UCX"):
#   * message size, bytes per run (-n = MIB MiB / size) and transfers in flight (-t, UCX -O:
#     KVL_COMPARE_TX_DEPTH, default 16: as many as READs may be outstanding, so every READ in
#     flight is on the wire; and 1 MiB runs still span two windows in 32 MiB);
#   * one QP (ib_*_bw's default -q 1, kvlane-perf --qp 1, one UCX endpoint = one rc QP);
#   * READs outstanding per QP (the responder resources): kvlane's QPs take
#     min(device max_qp_rd_atom, 16) (RD_ATOMIC_MAX in lcores/xport/verbs_priv.h), so ib_read_bw gets
#     -o KVL_COMPARE_RD_ATOMIC (default 16) and UCX UCX_RC_VERBS_MAX_RD_ATOMIC the same; perftest's
#     own default would be the device's 128 on rxe;
#   * the ACK timeout: kvlane's 15 (134 ms), so ib_*_bw -u 15 and UCX_RC_VERBS_TIMEOUT=134ms;
#     perftest's default 14 retransmits READs that a loaded TCG guest answers late;
#   * the servers idle: perftest's and UCX's servers wait in a socket (ucx_perftest -o: the
#     responder is not progressed in one-sided tests), kvlaned with `hybrid`. The clients poll
#     with one thread: ib_*_bw and ucx_perftest their one; kvlane-perf its main thread
#     (kvl_poll; sched_yield when empty, and after 100 us of empty polls 50 us naps, its
#     --nap default) while its NIC lcore (-l 0-1) idles with `hybrid`
#     (spins 100 us, then sleeps on the CQ's channel; hybrid_sleep_us 10000 on both sides:
#     the bound only serves TCP, and waking every 50 us costs a TCG guest dearly): `yield`
#     would keep a second vCPU of two polling and take it from rxe's kernel work (the READ
#     responder and completer copy every byte). KVL_COMPARE_IDLE (default "hybrid
#     hybrid_nap0") lists kvlane-perf's variants, one column each, the ratios use the first:
#     the NIC lcore's idle policy, "_nap0" = its main thread only sched_yields (--nap 0);
#   * the warm-up: KVL_COMPARE_WARMUP (default 16, one window; 0: none) transfers before the
#     measured ones in all three: ib_*_bw --perform_warm_up (perftest posts -t of them),
#     kvlane-perf --warmup, ucx_perftest -w. kvlane-perf's JSON still says when its first
#     measured completion came (first_ok_ms, in the log);
#   * the load: the host is shared and TCG makes every byte CPU work, so one run of each is
#     noise. KVL_COMPARE_ROUNDS (default 3) rounds run the tools in turn per (op, size), in one
#     boot (KVL_COMPARE_OPS: "write read"); the table shows each tool's median and the ratios are of medians. Every sample,
#     with rxe's retransmission counters and the guest's CPU split (/proc/stat: over the
#     tool's whole window, and over its measured run alone, "run:"), is in the log and in
#     OUT_DIR/samples.tsv.
# Output: OUT_DIR/compare.tsv (the table), samples.tsv, kvlaned.log, pt-*.client/.server,
# kl-*.json/.log, ucx-*.client/.server.
set -u
. "${KVL_SRC:-$(cd "$(dirname "$0")/.." && pwd)}/tests/rdma/lib.sh"
build=${1:?usage: rdma-compare.sh BUILD_DIR OUT_DIR [MIB]}
out=${2:?usage: rdma-compare.sh BUILD_DIR OUT_DIR [MIB]}
mib=${3:-${KVL_COMPARE_MIB:-32}}
depth=${KVL_COMPARE_TX_DEPTH:-16}
idles=${KVL_COMPARE_IDLE:-hybrid hybrid_nap0}
warm=${KVL_COMPARE_WARMUP:-16}
rounds=${KVL_COMPARE_ROUNDS:-3}
rd=${KVL_COMPARE_RD_ATOMIC:-16}
ops=${KVL_COMPARE_OPS:-write read}
ack=15 # ACK_TIMEOUT in lcores/xport/verbs_priv.h: 4.096 us << 15 = 134 ms
: "${RXE_DEV0:?run inside the VM harness (tests/rdma/rdma-suite.sh)}" "${RXE_DEV1:?}" "${RXE_IP0:?}" "${RXE_IP1:?}" "${RXE_GID0:?}" "${RXE_GID1:?}"
command -v ib_write_bw > /dev/null || { echo "compare: ib_write_bw not found (Debian package perftest)"; exit 1; }
mkdir -p "$out" || exit 1
tmp=$(mktemp -d)
t0=$(date +%s.%N)
el() { awk "BEGIN{printf \"%.1f\", $(date +%s.%N) - $1}"; }

# kvlaned on rxe1: a 64 MiB pattern-filled readwrite segment "kv", as e2e.sh; one client INI
# per idle policy compared
# kvlane's default ACK timeout, 15, as the peers are given (-u 15, UCX_RC_VERBS_TIMEOUT)
KVL_RDMA_ACK_TIMEOUT=15 kvl_rdma_inis "$tmp" cmp 64 hybrid yield
# hybrid_sleep_us 10000 on both sides: on verbs a completion, a submission or a command wakes a
# sleeping lcore at once, the bound only serves TCP (config/README.md). At its default 50 us a
# TCG guest spends the vCPU on wake-ups that find nothing (64 KiB READ, kvlane-perf's lcore,
# 3 rounds in one boot: 7.0, 10.6, 6.2 MB/s at 50 us against 12.0, 16.2, 31.4 at 10 ms)
kvl_sleep() { sed -i "/^idle_policy/a hybrid_sleep_us = 10000" "$1"; }
kvl_sleep "$tmp/b.ini"
for v in $idles; do
	sed "s/^idle_policy = .*/idle_policy = ${v%%_*}/" "$tmp/a.ini" > "$tmp/a-$v.ini"
	kvl_sleep "$tmp/a-$v.ini"
done
eal="-l 0-1 --no-huge -m 500 --no-pci --log-level lib.eal:warning"
export RUNTIME_DIRECTORY=$tmp/run
mkdir -p "$RUNTIME_DIRECTORY"
trap 'kill ${srv:-} ${sampler:-} 2> /dev/null || true; rm -rf "$tmp"' EXIT
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
# the guest's CPU time while a tool runs (/proc/stat, both vCPUs): user (the tools' polling),
# system, softirq (rxe's requester/responder/completer tasklets and the veth), idle, in %
cpu_read() { awk '/^cpu /{ print $2 + $3, $4, $7 + $8, $5 + $6; exit }' /proc/stat; }
cpu0() { P0=$(cpu_read); }
cpu_delta() {
	echo "$P0 $(cpu_read)" | awk '{ u = $5 - $1; s = $6 - $2; q = $7 - $3; i = $8 - $4; t = u + s + q + i
		if (t > 0) printf "; cpu user %d%% sys %d%% softirq %d%% idle %d%%", 100 * u / t, 100 * s / t, 100 * q / t, 100 * i / t }'
}
# ... and in the measured part alone: a sampler writes "uptime cpu-line" of /proc/stat every
# 0.1 s to $tmp/stat (for every tool alike); cpu_win T0 T1 is the split between two uptimes.
# kvlane-perf's JSON gives its run's start (t0_mono, the guest's uptime clock) and length;
# perftest's and UCX's run is taken as the MIB MiB at their average rate before they exit.
( while :; do read -r u _ < /proc/uptime; read -r l < /proc/stat; echo "$u $l"; sleep 0.1; done ) > "$tmp/stat" &
sampler=$!
cpu_win() {
	awk -v a="$1" -v b="$2" '$1 >= a && !n { n = 1; u0 = $3 + $4; s0 = $5; i0 = $6 + $7; q0 = $8 + $9 }
		n && $1 <= b { u = $3 + $4; s = $5; i = $6 + $7; q = $8 + $9 }
		END { t = (u - u0) + (s - s0) + (i - i0) + (q - q0)
			if (t > 0) printf "; run: user %d%% sys %d%% softirq %d%% idle %d%%", 100 * (u - u0) / t, 100 * (s - s0) / t, 100 * (q - q0) / t, 100 * (i - i0) / t }' "$tmp/stat"
}
# cpu_tail U1 MBPS: the last MIB MiB at MBPS before uptime U1 (0.3 s for the sampler to pass it)
cpu_tail() { [ -n "$2" ] || return 0; sleep 0.3; cpu_win $(awk -v u="$1" -v b="$2" -v m=$mib 'BEGIN { printf "%.2f %.2f", u - m / b, u }'); }
# wait_port PORT FILE: until a server listens on PORT (30 s; FILE gets the complaint)
wait_port() {
	i=0
	until ss -ltn 2> /dev/null | grep -q ":$1 "; do
		i=$((i + 1)); [ $i -gt 300 ] && { echo "server not listening on port $1 after 30 s" >> "$2"; return 1; }
		sleep 0.1
	done
}
# perftest NAME TOOL SIZE ITERS: server on rxe1, client on rxe0; sets PT to the average MB/s
perftest() {
	name=$1 tool=$2 size=$3 iters=$4
	PORT=$((PORT + 1)) PT=
	# the fairness rules (header): same -s -n -t, one QP, kvlane's ACK timeout; READs: -o
	args="-F -s $size -n $iters -t $depth -q 1 -u $ack"
	[ $tool = ib_read_bw ] && args="$args -o $rd"
	[ "$warm" = 0 ] || args="$args --perform_warm_up"
	s0=$(date +%s.%N)
	ctr0; cpu0
	timeout 120 $tool -d $RXE_DEV1 -x $RXE_GID1 -p $PORT $args > "$out/$name.server" 2>&1 &
	spid=$!
	: > "$out/$name.client"
	wait_port $PORT "$out/$name.client"
	timeout 120 $tool -d $RXE_DEV0 -x $RXE_GID0 -p $PORT $args $RXE_IP1 >> "$out/$name.client" 2>&1
	crc=$?
	read -r pu1 _ < /proc/uptime
	wait $spid; src=$?
	# the result row follows the " #bytes" header: bytes iters BWpeak BWavg MsgRate
	PT=$(awk '/#bytes/{getline; print $4; exit}' "$out/$name.client")
	if [ $crc != 0 ] || [ $src != 0 ] || [ -z "$PT" ]; then
		echo "compare: $tool $args FAILED (client exit $crc, server exit $src):"
		tail -n 8 "$out/$name.client" "$out/$name.server"
		FAIL=$((FAIL + 1)) PT=
	fi
	echo "compare: $tool $args: ${PT:-?} MB/s ($(el $s0) s$(ctr_delta)$(cpu_delta)$(cpu_tail $pu1 "$PT"))"
}
# kvlane NAME OP SIZE ITERS POLICY: kvlane-perf on rxe0 against kvlaned, one QP; sets KL to the
# average MB/s
kvlane() {
	name=$1 op=$2 size=$3 iters=$4 pol=$5 KL= kx=
	# VARIANT: the NIC lcore's idle policy, "_nap0": the main thread's empty polls only
	# sched_yield (kvlane-perf --nap 0, as before 2026-12-01's fix), else its default --nap
	case $pol in *_nap0) kx="--nap 0" ;; esac
	s0=$(date +%s.%N)
	read -r u0 _ < /proc/uptime
	ctr0; cpu0
	timeout 120 "$build/kvlane-perf" $eal --file-prefix cli -- -c "$tmp/a-$pol.ini" --segment kv --seed 1 \
		--seg-size 64M -s $size -n $iters -t $depth --qp 1 --$op --bw --json $kx --warmup $warm "$RXE_IP1:18515" \
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
print("%.2f" % o["bw_avg_MBps"] if ok else "-", "%.3f %.3f" % (o["t0_mono"], o["t0_mono"] + o["seconds"]), "start-up %.1f s, run %.2f s, first READ/WRITE done %.0f ms into it, %d naps, exit %.1f s" % (o["t0_mono"] - u0, o["seconds"], o["first_ok_ms"], o["naps"], u1 - o["t0_mono"] - o["seconds"]))' \
		"$out/$name.json" $iters $u0 $u1 2> /dev/null)
	KL=${res%% *} KT=${res#* } KW=
	case $KL in ''|-) ;; *) KW=${KT%% start-up*} KT=start-up${KT#* start-up} ;; esac
	[ "$KL" = - ] && KL=
	if [ $krc != 0 ] || [ -z "$KL" ]; then
		echo "compare: kvlane-perf --$op -s $size -n $iters ($pol) FAILED (exit $krc):"
		tail -n 8 "$out/$name.log"; head -c 2000 "$out/$name.json"; echo
		FAIL=$((FAIL + 1)) KL=
	fi
	echo "compare: kvlane-perf --$op -s $size -n $iters -t $depth --qp 1, idle $pol: ${KL:-?} MB/s ($(el $s0) s: ${KT:-no result}$(ctr_delta)$(cpu_delta)$([ -z "$KW" ] || { sleep 0.3; cpu_win $KW; }))"
}
# UCX on its rc_verbs transport over rxe, at UCT level (ucx_perftest -x rc_verbs -d DEV:1,
# put_bw / get, zero-copy): UCP's ucp_put_bw / ucp_get cannot run on rxe here. rc_verbs needs an
# auxiliary transport for UCP's wire-up: ud_verbs' wire-up times out ("UD endpoint ...:
# unhandled timeout error" after UCX_UD_VERBS_TIMEOUT, 30 s) although ibv_ud_pingpong passes on
# the same link, and tcp cannot be one ("no auxiliary transport"); see docs/cpu-cost.md. UCT
# connects the rc QPs itself over ucx_perftest's TCP socket. UCX_NO: why UCX does not run.
UCX_ENV="UCX_RC_VERBS_MAX_RD_ATOMIC=$rd UCX_RC_VERBS_TIMEOUT=134ms UCX_WARN_UNUSED_ENV_VARS=n"
UCX_NO=
command -v ucx_perftest > /dev/null || UCX_NO="ucx_perftest not found (Debian package ucx-utils)"
# ucx NAME TEST SIZE ITERS: ucx_perftest server on rxe1, client on rxe0; sets UX to MB/s
ucx() {
	name=$1 test=$2 size=$3 iters=$4 UX=
	[ -z "$UCX_NO" ] || return 0
	PORT=$((PORT + 1))
	s0=$(date +%s.%N)
	ctr0; cpu0
	env $UCX_ENV UCX_IB_GID_INDEX=$RXE_GID1 \
		timeout 60 ucx_perftest -p $PORT -x rc_verbs -d $RXE_DEV1:1 > "$out/$name.server" 2>&1 &
	spid=$!
	: > "$out/$name.client"
	wait_port $PORT "$out/$name.client"
	# -o: the server's worker is not progressed (one-sided: it has nothing to do), as
	# perftest's server waits in its socket
	env $UCX_ENV UCX_IB_GID_INDEX=$RXE_GID0 \
		timeout 60 ucx_perftest $RXE_IP1 -p $PORT -x rc_verbs -d $RXE_DEV0:1 -t $test -D zcopy \
		-s $size -n $iters -w $warm -O $depth -o -f >> "$out/$name.client" 2>&1
	crc=$?
	read -r pu1 _ < /proc/uptime
	wait $spid; src=$?
	# -f: one row, "iterations lat50 lat_avg lat_overall bw_avg bw_overall mr_avg mr_overall"
	UX=$(awk 'NF == 8 && $1 == '"$iters"' { print $6 }' "$out/$name.client" | tail -n 1)
	if [ $crc != 0 ] || [ $src != 0 ] || [ -z "$UX" ]; then
		why=$(grep -h -m 1 -E 'Fatal|ERROR|rror' "$out/$name.client" "$out/$name.server" | sed 's/^\[[^]]*\] *//' | head -n 1)
		UCX_NO="ucx_perftest -t $test failed (client exit $crc, server exit $src): ${why:-no result row}"
		echo "compare: UCX: $UCX_NO; the UCX column is not run from here on (logs: $name.client/.server)"
		UX=
		return 0
	fi
	echo "compare: ucx_perftest -x rc_verbs -t $test -D zcopy -s $size -n $iters -O $depth: $UX MB/s ($(el $s0) s$(ctr_delta)$(cpu_delta)$(cpu_tail $pu1 "$UX"))"
}
# median of the words on stdin ("-" when none)
median() { tr ' ' '\n' | grep -v '^$' | sort -n | awk '{ v[NR] = $1 } END { if (NR == 0) print "-"; else if (NR % 2) print v[(NR + 1) / 2]; else printf "%.2f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN{ if (a != "-" && b != "-" && b + 0 > 0) printf "%.2f", a / b; else print "-" }'; }

echo "# compare: $(ib_write_bw --version 2> /dev/null | awk '{print "perftest " $NF; exit}'), $(ucx_info -v 2> /dev/null | awk '/Version/{print "UCX " $NF; exit}') vs kvlane-perf, $RXE_DEV0 -> $RXE_DEV1, $mib MiB per run, -t $depth, one QP, READs outstanding $rd, ACK timeout $ack, warm-up $warm, $rounds rounds, kvlane-perf idle_policy $idles, veth mtu $(cat /sys/class/net/vethA/mtu)"
printf 'size\top\tround\ttool\tMBps\n' > "$out/samples.tsv"
hdr="size\top\tib_bw_MBps"
for pol in $idles; do hdr="$hdr\tkvlane_${pol}_MBps"; done
printf "$hdr\tucx_MBps\tkvlane_per_perftest\tkvlane_per_ucx\n" > "$out/compare.tsv"
for op in $ops; do
	case $op in write) ut=put_bw ;; *) ut=get ;; esac
	for size in 65536 1048576; do
		iters=$((mib * 1048576 / size))
		case $size in 65536) sz=64K ;; *) sz=1M ;; esac
		PTS= UXS=
		for pol in $idles; do eval "KLS_$pol="; done
		r=1
		while [ $r -le $rounds ]; do
			perftest pt-$op-$sz-$r ib_${op}_bw $size $iters
			PTS="$PTS ${PT:-}"
			printf '%s\t%s\t%s\tperftest\t%s\n' $sz $op $r "${PT:--}" >> "$out/samples.tsv"
			for pol in $idles; do
				kvlane kl-$op-$sz-$pol-$r $op $size $iters $pol
				eval "KLS_$pol=\"\$KLS_$pol ${KL:-}\""
				printf '%s\t%s\t%s\tkvlane-%s\t%s\n' $sz $op $r $pol "${KL:--}" >> "$out/samples.tsv"
			done
			ucx ucx-$op-$sz-$r $ut $size $iters
			UXS="$UXS ${UX:-}"
			printf '%s\t%s\t%s\tucx\t%s\n' $sz $op $r "${UX:--}" >> "$out/samples.tsv"
			r=$((r + 1))
		done
		pt=$(echo "$PTS" | median) ux=$(echo "$UXS" | median) row="$sz\t$op\t$pt" kl1=
		for pol in $idles; do
			eval "m=\$(echo \"\$KLS_$pol\" | median)"
			row="$row\t$m"
			[ -n "$kl1" ] || kl1=$m
		done
		printf "$row\t$ux\t$(ratio $kl1 $pt)\t$(ratio $kl1 $ux)\n" >> "$out/compare.tsv"
	done
done
kill $sampler
kill -TERM $srv
wait $srv || { echo "compare: kvlaned exited with status $? after SIGTERM"; tail -n 5 "$out/kvlaned.log"; FAIL=$((FAIL + 1)); }
echo
echo "rxe0 <-> rxe1, $mib MiB per run, median of $rounds rounds, MB/s (2^20 B/s); ratios: kvlane-perf (idle $(echo $idles | cut -d' ' -f1)) / peer"
[ -z "$UCX_NO" ] || echo "UCX not run: $UCX_NO"
awk -F'\t' '{ line = sprintf("%-5s %-6s", $1, $2); for (i = 3; i <= NF; i++) line = line sprintf(" %20s", $i); print line }' "$out/compare.tsv"
echo "compare: $([ $FAIL = 0 ] && echo done || echo "$FAIL tool run(s) FAILED") after $(el $t0) s in the guest"
[ $FAIL = 0 ]
