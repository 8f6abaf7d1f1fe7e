#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# Runs INSIDE the soft-RoCE VM (meson test `bad_peer`, suite rdma): bad peer data end to end.
# kvlaned on $RXE_DEV1 offers "kv", "bad" and "big", advertising a wrong rkey for "bad"
# (KVLANE_TEST_BAD_RKEY) and "big" as twice its length (KVLANE_TEST_BAD_LEN): fault injection,
# so that only the NIC can refuse those accesses. The client (tests/rdma/bad_peer.c, the
# public API on $RXE_DEV0) sends 2 x 256 WRITEs of 256 KiB over the same QPs, every 16th to
# "bad" and another every 16th into "big"'s second half: each of those must end `access`,
# every other one OK, and what landed in "kv" must READ back equal. Then both sides'
# telemetry, read through the socket: the client failed exactly those requests and resynced
# once per bad request, the server's QPs restarted as many times and posted nothing, and
# every QP is back in RTS.
#   badpeer.sh BUILD_DIR OUT_DIR
set -eu
. "${KVL_SRC:-$(cd "$(dirname "$0")/../.." && pwd)}/tests/rdma/lib.sh"
build=$1
out=$2
kvl_rdma_setup "$out"
kvl_rdma_inis "$tmp" badpeer 64
cat >> "$tmp/b.ini" <<INI
[segment.bad]
layers = 1
planes = 1
blocks = 64
block_bytes = 1048576
access = readwrite
[segment.big]
layers = 1
planes = 1
blocks = 64
block_bytes = 1048576
access = readwrite
INI
eal="-l 0-1 --no-huge -m 600 --no-pci --log-level lib.eal:warning"
KVLANE_TEST_BAD_RKEY=bad KVLANE_TEST_BAD_LEN=big kvl_rdma_server "$build" "$tmp" "$out" badpeer $eal
[ "$(grep -c 'test fault injection' "$out/kvlaned.log")" = 2 ] ||
	{ echo "badpeer: the two fault-injection warnings are missing"; cat "$out/kvlaned.log"; exit 1; }
"$build/tests/rdma/bad_peer" $eal --file-prefix cli -- "$tmp/a.ini" "$RXE_IP1:18515" \
	> "$out/client.json" 2> "$out/client.log" &
cli=$!
if ! kvl_rdma_wait_line "$out/client.log" 'bad_peer: lingering' $cli; then
	echo "badpeer: the client did not finish:"; cat "$out/client.log"; exit 1
fi
rc=0
tel="python3 ${KVL_SRC:?}/tools/kvlane_telemetry.py"
$tel -f cli /kvlane/stats > "$out/cli_stats.json" || rc=1
$tel -f cli /kvlane/qps > "$out/cli_qps.json" || rc=1
$tel -f srv /kvlane/stats > "$out/srv_stats.json" || rc=1
$tel -f srv /kvlane/qps > "$out/srv_qps.json" || rc=1
kill -TERM $cli
wait $cli || { echo "badpeer: the client failed (exit $?):"; cat "$out/client.log"; rc=1; }
kill -TERM $srv
wait $srv || { echo "badpeer: kvlaned exited with status $? after SIGTERM"; rc=1; }
grep -i 'resync\|peer\|warn' "$out/kvlaned.log" | head -20 || true
python3 - "$out" <<'PY' || rc=1
import json, sys
out = sys.argv[1]
r = json.load(open(f"{out}/client.json"))
cs = json.load(open(f"{out}/cli_stats.json"))["/kvlane/stats"]
cq = json.load(open(f"{out}/cli_qps.json"))["/kvlane/qps"]
ss = json.load(open(f"{out}/srv_stats.json"))["/kvlane/stats"]
sq = json.load(open(f"{out}/srv_qps.json"))["/kvlane/qps"]
bad = r["bad_writes"]
print(f"client: {bad} WRITEs to a wrong rkey or past an MR's end ended access ({r['bad_access']}); "
      f"{r['ok_writes']} others OK, {r['verified_bytes'] >> 20} MiB read back equal")
assert bad > 0 and r["bad_access"] == bad, r
assert r["other_failures"] == 0 and r["mismatched_ranges"] == 0, r
assert r["verified_bytes"] == r["written_bytes"] > 0, r
# Initiator counters, through its telemetry socket, against what it moved.
assert cs["verbs/failed/access"] == bad, cs
assert all(v == 0 for k, v in cs.items() if k.startswith("verbs/failed/") and k != "verbs/failed/access"), cs
assert cs["verbs/bytes_written"] == r["written_bytes"], (cs["verbs/bytes_written"], r)
assert cs["verbs/bytes_read"] == 2 * 256 * 256 * 1024, cs
assert cs["verbs/qp_resyncs"] == bad and cs["verbs/qp_recoveries"] == bad, cs
assert sum(cq["recoveries"]) == bad and all(s == 0 for s in cq["outstanding"]), cq
assert all(s == "RTS" for s in cq["state"]), cq  # every QP recovered
print(f"client telemetry: failed/access {cs['verbs/failed/access']}, {cs['verbs/qp_resyncs']} "
      f"resyncs, {cs['verbs/qp_replayed']} requests posted again, bytes_written "
      f"{cs['verbs/bytes_written']} = what it wrote OK")
# The responder: its QPs went to error on each bad access and restarted on each resync.
assert sum(sq["recoveries"]) == bad and all(s == "RTS" for s in sq["state"]), sq
assert ss["verbs/qp_posted"] == 0 and ss["tcp/served_bytes"] == 0, ss
print(f"server telemetry: {sum(sq['recoveries'])} QP restarts over {len(sq['recoveries'])} "
      f"QPs, nothing posted by its CPU")
PY
[ $rc = 0 ] || { echo "badpeer: FAILED"; cat "$out/client.log"; }
exit $rc
