#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# Runs INSIDE the soft-RoCE VM (meson test `sched_rdma`, suite rdma): the request API over
# RDMA. kvlaned on $RXE_DEV1 serves a layered pattern segment; kvlane-req-client on $RXE_DEV0
# opens requests whose steps need K and V blocks of successive layers, and its NIC lcore's
# scheduler READs them into staging (windows under a 1 MiB budget, remote-contiguous blocks
# merged, scattered slots as several SGEs of one READ). Every byte of every READY step is
# checked against the pattern; then the client's own telemetry, read through its socket
# while it waits at its last pause: what the scheduler posted, what the QPs moved. Then
# engine-owned destinations (below): the client registers its own paged cache (host
# memory it allocated, kvl_seg_register: an ibv_reg_mr of its own on rxe0) and PULLs 2 short
# requests with KVL_REQ_ENGINE_DEST; the READs land at the engine's addresses with that
# segment's lkey, no staging slot, every byte and every guard byte around them checked. Then
# PUSH.
#   sched.sh BUILD_DIR OUT_DIR
set -eu
. "${KVL_SRC:-$(cd "$(dirname "$0")/../.." && pwd)}/tests/rdma/lib.sh"
build=$1
out=$2
kvl_rdma_setup "$out"
kvl_rdma_inis "$tmp" schedr 32
# the server's segment: 8 layers x K,V x 32 blocks of 32 KiB, as the client's requests expect
sed -i 's/^layers = 1$/layers = 8/; s/^planes = 1$/planes = 2/; s/^block_bytes = 1048576$/block_bytes = 32768/' \
	"$tmp/b.ini"
cat >> "$tmp/a.ini" <<INI
[sched]
staging_mb = 4
budget_mb = 1
slot_kb = 32
window_min_kb = 64
INI
eal="-l 0-1 --no-huge -m 400 --no-pci --log-level lib.eal:warning"
kvl_rdma_server "$build" "$tmp" "$out" sched $eal
mkfifo "$tmp/in"
"$build/kvlane-req-client" $eal --file-prefix cli -- -c "$tmp/a.ini" --peer "$RXE_IP1:18515" \
	--mode verify --requests 4 --steps 8 --blocks 4 --compute-us 2000 \
	< "$tmp/in" > "$out/client.out" 2> "$out/client.log" &
cli=$!
exec 3> "$tmp/in"
rc=0
tel="python3 ${KVL_SRC:?}/tools/kvlane_telemetry.py"
if kvl_rdma_wait_line "$out/client.out" '^PAUSE filled' $cli 120; then
	$tel -f cli /kvlane/sched > "$out/sched_filled.json" || rc=1
	echo go >&3
else
	echo "sched: the client did not fill its windows"; rc=1
fi
if kvl_rdma_wait_line "$out/client.out" '^PAUSE end' $cli 180; then
	$tel -f cli /kvlane/sched > "$out/sched_end.json" || rc=1
	$tel -f cli /kvlane/stats > "$out/stats_end.json" || rc=1
	$tel -f cli /kvlane/qps > "$out/qps_end.json" || rc=1
	echo go >&3
else
	echo "sched: the client did not finish"; rc=1
fi
exec 3>&-
wait $cli || { echo "sched: kvlane-req-client failed (exit $?)"; rc=1; }
# Engine-owned destinations over RDMA, the same server (before PUSH rewrites its blocks):
# 2 requests x 8 steps x 2 x 2 blocks.
mkfifo "$tmp/in3"
"$build/kvlane-req-client" $eal --file-prefix clid -- -c "$tmp/a.ini" --peer "$RXE_IP1:18515" \
	--mode dest --requests 2 --steps 8 --blocks 2 --compute-us 1000 \
	< "$tmp/in3" > "$out/dest.out" 2> "$out/dest.log" &
cld=$!
exec 5> "$tmp/in3"
for p in filled end; do
	if ! kvl_rdma_wait_line "$out/dest.out" "^PAUSE $p" $cld 180; then
		echo "sched: the dest client did not reach its pause \"$p\""; rc=1; break
	fi
	$tel -f clid /kvlane/sched > "$out/dest_sched_$p.json" || rc=1
	if [ $p = end ]; then
		$tel -f clid /kvlane/stats > "$out/dest_stats.json" || rc=1
		$tel -f clid /kvlane/segments > "$out/dest_segments.json" || rc=1
	fi
	echo go >&5
done
exec 5>&-
wait $cld || { echo "sched: kvlane-req-client --mode dest failed (exit $?)"; rc=1; }
# PUSH over RDMA: the same requests WRITE their blocks from a local segment into the server's
# (its verbs WRITE path through the scheduler), then PULL them back, every byte checked.
mkfifo "$tmp/in2"
"$build/kvlane-req-client" $eal --file-prefix clip -- -c "$tmp/a.ini" --peer "$RXE_IP1:18515" \
	--mode push --requests 4 --steps 8 --blocks 4 \
	< "$tmp/in2" > "$out/push.out" 2> "$out/push.log" &
clp=$!
exec 4> "$tmp/in2"
for p in bad pushed end; do
	if ! kvl_rdma_wait_line "$out/push.out" "^PAUSE $p" $clp 180; then
		echo "sched: the PUSH client did not reach its pause \"$p\""; rc=1; break
	fi
	case $p in
	bad) $tel -f clip /kvlane/stats > "$out/push_stats0.json" || rc=1 ;;
	pushed)
		$tel -f clip /kvlane/stats > "$out/push_stats1.json" || rc=1
		$tel -f clip /kvlane/sched > "$out/push_sched.json" || rc=1 ;;
	esac
	echo go >&4
done
exec 4>&-
wait $clp || { echo "sched: kvlane-req-client --mode push failed (exit $?)"; rc=1; }
kill -TERM $srv
wait $srv || { echo "sched: kvlaned exited with status $? after SIGTERM"; rc=1; }
cat "$out/client.out" "$out/push.out" "$out/dest.out"
[ $rc = 0 ] || { cat "$out/client.log" "$out/push.log" "$out/dest.log" "$out/qps_end.json"; echo "sched: FAILED"; exit 1; }
python3 - "$out" <<'PY'
import json, sys
out = sys.argv[1]
res = next(json.loads(l[7:]) for l in open(f"{out}/client.out") if l.startswith("RESULT "))
assert res["requests_ok"] == res["requests"] == 4, res
assert res["bad_bytes"] == 0 and res["order_errors"] == 0 and res["errors"] == 0, res
f = json.load(open(f"{out}/sched_filled.json"))["/kvlane/sched"]
e = json.load(open(f"{out}/sched_end.json"))["/kvlane/sched"]
st = json.load(open(f"{out}/stats_end.json"))["/kvlane/stats"]
assert f["in_use"][0] <= f["budget"][0] and f["windows"][0] <= f["budget"][0], f
assert e["posted_blocks"][0] == res["unique_blocks"], (e, res)
assert e["completed_ok"][0] == e["posted_xfers"][0] and e["completed_err"][0] == 0, e
assert e["posted_xfers"][0] < e["posted_blocks"][0], e  # remote-contiguous blocks merged
# the scheduler's READs are the QPs' reads: every block's bytes, once
assert st["verbs/bytes_read"] == res["unique_blocks"] * res["block_bytes"], (st, res)
assert all(v == 0 for k, v in st.items() if k.startswith("verbs/failed/")), st
pres = next(json.loads(l[7:]) for l in open(f"{out}/push.out") if l.startswith("RESULT "))
checks = dict(l.split()[1:3] for l in open(f"{out}/push.out") if l.startswith("CHECK "))
assert checks.pop("h_unchanged") == "0" and checks and all(int(v) < 0 for v in checks.values()), checks
assert pres["requests_ok"] == 4 and pres["bad_bytes"] == 0 and pres["errors"] == 0, pres
assert pres["order_errors"] == 0 and pres["push_addr_errors"] == 0, pres
s0 = json.load(open(f"{out}/push_stats0.json"))["/kvlane/stats"]
s1 = json.load(open(f"{out}/push_stats1.json"))["/kvlane/stats"]
ps = json.load(open(f"{out}/push_sched.json"))["/kvlane/sched"]
pushed = s1["verbs/bytes_written"] - s0.get("verbs/bytes_written", 0)
assert pushed == pres["unique_blocks"] * pres["block_bytes"], (pushed, pres)
# + 1: the one-block PULL whose staging slot the push_from_staging call named
assert ps["posted_blocks"][0] == pres["unique_blocks"] + 1 and ps["completed_err"][0] == 0, ps
assert all(v == 0 for k, v in s1.items() if k.startswith("verbs/failed/")), s1
print(f"PUSH over RDMA: {len(checks)} bad calls refused; {pres['unique_blocks']} blocks "
      f"({pushed >> 10} KiB) WRITTEN by the scheduler, {pres['blocks_verified']} block reads "
      f"back verified, 4 of 4 requests OK")
lines = open(f"{out}/dest.out").read().splitlines()
dres = next(json.loads(l[7:]) for l in lines if l.startswith("RESULT "))
dest = next(json.loads(l[5:]) for l in lines if l.startswith("DEST "))
assert dres["requests_ok"] == dres["requests"] == 2, dres
assert dres["bad_bytes"] == 0 and dres["order_errors"] == 0 and dres["errors"] == 0, dres
assert dres["blocks_verified"] == 2 * (8 * 4 + 7), dres
assert dest["guard_bad"] == 0 and dest["addr_errors"] == 0, dest
df = json.load(open(f"{out}/dest_sched_filled.json"))["/kvlane/sched"]
de = json.load(open(f"{out}/dest_sched_end.json"))["/kvlane/sched"]
dst = json.load(open(f"{out}/dest_stats.json"))["/kvlane/stats"]
dsg = json.load(open(f"{out}/dest_segments.json"))["/kvlane/segments"]
assert df["slots_free"][0] == df["slots"][0] and df["in_use"][0] <= df["budget"][0], df
assert de["slots_free"][0] == de["slots"][0], de
assert de["dest_blocks"][0] == de["posted_blocks"][0] == dres["unique_blocks"], (de, dres)
assert de["completed_ok"][0] == de["posted_xfers"][0] and de["completed_err"][0] == 0, de
# the scheduler's READs are the QPs' reads: every block's bytes, once, into the engine's cache
assert dst["verbs/bytes_read"] == dres["unique_blocks"] * dres["block_bytes"], (dst, dres)
assert all(v == 0 for k, v in dst.items() if k.startswith("verbs/failed/")), dst
assert dsg["rdma_nics"][dsg["name"].index("paged-cache")] == 1, dsg  # its own MR on rxe0
print(f"engine-owned destinations over RDMA: 2 of 2 OK, {dres['blocks_verified']} block reads "
      f"verified in the engine's {dest['cache_bytes'] >> 10} KiB cache, guards intact; "
      f"{de['dest_blocks'][0]} blocks in {de['posted_xfers'][0]} READs, slots_free "
      f"{de['slots_free'][0]}/{de['slots'][0]}; verbs/bytes_read {dst['verbs/bytes_read']}")
print(f"requests over RDMA: {res['requests_ok']} of 4 OK, {res['blocks_verified']} block "
      f"reads verified ({res['bytes_verified'] >> 10} KiB); scheduler posted "
      f"{e['posted_blocks'][0]} blocks in {e['posted_xfers'][0]} READs "
      f"({st['verbs/qp_sge_wrs']} with several SGEs); filled: in_use {f['in_use'][0]} of "
      f"budget {f['budget'][0]}")
PY
