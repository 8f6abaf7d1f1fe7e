#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# Runs INSIDE the soft-RoCE VM (meson test `hybrid`, suite rdma): hybrid idle mode sleeps on
# the completion channel. kvlane-perf --lat on $RXE_DEV0 with idle_policy = hybrid,
# hybrid_idle_us = 0 (sleep as soon as a pass finds nothing) and hybrid_sleep_us = 100000:
# its NIC lcore sleeps in epoll whenever a pass finds nothing, and is woken by completion
# events and by kicks from new submissions, not only by the 100 ms bound. Checked on its
# /kvlane/lcores counters, read through its telemetry socket: sleeps, completion wake-ups and
# kick wake-ups all happened (soft-RoCE often completes a READ before the lcore sleeps, so
# not every request sleeps; the bound's wake-ups also count the lingering after the run);
# every request OK and verified.
#   hybrid.sh BUILD_DIR OUT_DIR
set -eu
. "${KVL_SRC:-$(cd "$(dirname "$0")/../.." && pwd)}/tests/rdma/lib.sh"
build=$1
out=$2
n=200
kvl_rdma_setup "$out"
kvl_rdma_inis "$tmp" hybrid 16 hybrid hybrid
eal="-l 0-1 --no-huge -m 400 --no-pci --log-level lib.eal:warning"
kvl_rdma_server "$build" "$tmp" "$out" hybrid $eal
"$build/kvlane-perf" $eal --file-prefix cli -- -c "$tmp/a.ini" \
	--set runtime.hybrid_idle_us=0 --set runtime.hybrid_sleep_us=100000 \
	--segment kv --seed 1 --seg-size 16M -s 4K -n $n --read --lat --verify --json \
	--linger 120 "$RXE_IP1:18515" > "$out/perf.json" 2> "$out/perf.log" &
cli=$!
kvl_rdma_wait_line "$out/perf.log" lingering $cli || true
rc=0
python3 "${KVL_SRC:?}/tools/kvlane_telemetry.py" -f cli /kvlane/lcores > "$out/lcores.json" || rc=1
python3 "${KVL_SRC:?}/tools/kvlane_telemetry.py" -f cli /kvlane/qps > "$out/qps.json" || rc=1
kill -TERM $cli 2> /dev/null || true
wait $cli || { echo "hybrid: kvlane-perf failed:"; cat "$out/perf.log"; rc=1; }
kill -TERM $srv
wait $srv || { echo "hybrid: kvlaned exited with status $? after SIGTERM"; rc=1; }
python3 - "$out" $n <<'PY' || rc=1
import json, sys
out, n = sys.argv[1], int(sys.argv[2])
o = json.loads(open(f"{out}/perf.json").readline())
assert o["transport"] == "verbs" and o["failed"] == 0 and o["verify_error"] is None, o
assert o["completed_ok"] == n, o
lc = json.load(open(f"{out}/lcores.json"))["/kvlane/lcores"]
i = lc["role"].index("nic")
row = {k: v[i] for k, v in lc.items()}
print(f"kvlane-perf --lat, 4 KiB READs: {n} OK and verified, typical {o['t_typical_us']:.0f} us, "
      f"p99 {o['t_p99_us']:.0f} us (a sleep bound is 100000 us)")
print(f"NIC lcore: {row['sleeps']} sleeps, woken by completion events {row['wake_cq']}, by "
      f"kicks {row['wake_kick']}, by the bound {row['wake_timeout']}; busy {row['busy_pct']} %")
assert row["sleeps"] >= 20, row
assert row["wake_cq"] >= 5 and row["wake_kick"] >= 5, row
# the QPs' side of it (/kvlane/qps): events taken, every one after an arm (verbs: one CQ, one
# event per arm); the verbs backend rings one doorbell per post and has no direct-path
# counters
qp = json.load(open(f"{out}/qps.json"))["/kvlane/qps"]
arms, evs = sum(qp["arms"]), sum(qp["cq_events"])
print(f"QPs: armed {arms} times, {evs} completion events taken; doorbells {sum(qp['doorbells'])} "
      f"for {sum(qp['posts'])} posts")
assert evs >= 1 and arms >= evs, (qp, row)
assert qp["doorbells"] == qp["posts"], qp
assert sum(qp["bf_copies"]) == 0 and sum(qp["stray_cqes"]) == 0, qp
PY
[ $rc = 0 ] || echo "hybrid: FAILED"
exit $rc
