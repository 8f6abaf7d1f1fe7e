#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# Runs INSIDE the soft-RoCE VM: kvlaned on $RXE_DEV1 offers a pattern-filled segment,
# kvlane-perf on $RXE_DEV0 connects over the control path (TCP, authenticated), sets up RC
# QPs over it, and moves >= 256 MiB by RDMA WRITE and >= 256 MiB by RDMA READ with every
# byte verified; then the server's telemetry must show it served exactly that.
#   e2e.sh BUILD_DIR OUT_DIR
set -eu
. "${KVL_SRC:-$(cd "$(dirname "$0")/../.." && pwd)}/tests/rdma/lib.sh"
build=$1
out=$2
: "${RXE_DEV0:?run inside the VM harness}" "${RXE_DEV1:?}" "${RXE_IP0:?}" "${RXE_IP1:?}"
mkdir -p "$out"
tmp=$(mktemp -d)
kvl_rdma_inis "$tmp" rdma 128 yield yield
eal="-l 0-1 --no-huge -m 600 --no-pci --log-level lib.eal:warning"
export RUNTIME_DIRECTORY=$tmp/run
mkdir -p "$RUNTIME_DIRECTORY"
trap 'kill ${srv:-} 2>/dev/null || true; rm -rf "$tmp"' EXIT
kvl_rdma_server "$build" "$tmp" "$out" e2e $eal
rc=0
for op in --write --read; do
	if ! "$build/kvlane-perf" $eal --file-prefix cli -- -c "$tmp/a.ini" --segment kv --seed 1 \
		--seg-size 128M -s 1M -n 256 -t 16 $op --verify --json "$RXE_IP1:18515" \
		> "$out/perf$op.json" 2> "$out/perf$op.log"; then
		echo "e2e: kvlane-perf $op failed:"; cat "$out/perf$op.log" "$out/perf$op.json"; rc=1
	fi
done
python3 "${KVL_SRC:?}/tools/kvlane_telemetry.py" -f srv /kvlane/stats > "$out/stats.json" || rc=1
kill -TERM $srv
wait $srv || { echo "e2e: kvlaned exited with status $? after SIGTERM"; rc=1; }
cat "$out/kvlaned.log"
python3 - "$out" <<'PY' || rc=1
import json, sys
out = sys.argv[1]
moved = 0
for op in ("--write", "--read"):
    for line in open(f"{out}/perf{op}.json"):
        o = json.loads(line)
        assert o["transport"] == "verbs" and o["failed"] == 0 and o["verify_error"] is None, o
        assert o["bytes"] >= 256 << 20 and o["verified_bytes"] >= o["bytes"], o
        print(f"kvlane-perf {op[2:]}: {o['bytes'] >> 20} MiB by RDMA {op[2:].upper()} at "
              f"{o['bw_avg_MBps']:.1f} MB/s, every byte verified")
st = json.load(open(f"{out}/stats.json"))["/kvlane/stats"]
# One-sided RDMA: the serving side's CPU sees none of it; its TCP counters stay at 0, and
# its own queue pairs posted nothing and failed nothing.
assert st["tcp/served_bytes"] == 0, st
assert st["verbs/qp_posted"] == 0 and st["verbs/qp_recoveries"] == 0, st
assert all(v == 0 for k, v in st.items() if k.startswith("verbs/failed/")), st
print("server /kvlane/stats: verbs counters present, nothing failed, nothing served by its CPU")
PY
[ $rc = 0 ] || echo "e2e: FAILED (see above)"
exit $rc
