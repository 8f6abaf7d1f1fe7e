#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# Runs INSIDE the soft-RoCE VM: kvlaned on $RXE_DEV1 offers a pattern-filled segment,
# kvlane-perf on $RXE_DEV0 connects over the control path (TCP, authenticated), sets up RC
# QPs over it, and moves >= 256 MiB by RDMA WRITE and >= 256 MiB by RDMA READ with every
# byte verified. kvlane-perf is the initiating kvlane runtime (the same library, EAL, INI and
# control path as kvlaned, started with perftest's -d and -x): its own counters, read through
# its telemetry socket while it lingers, must equal the bytes it moved; the server's must show
# its CPU served nothing.
#   e2e.sh BUILD_DIR OUT_DIR
set -eu
. "${KVL_SRC:-$(cd "$(dirname "$0")/../.." && pwd)}/tests/rdma/lib.sh"
build=$1
out=$2
: "${RXE_DEV0:?run inside the VM harness}" "${RXE_DEV1:?}" "${RXE_IP0:?}" "${RXE_IP1:?}"
kvl_rdma_setup "$out"
kvl_rdma_inis "$tmp" rdma 128 yield yield
eal="-l 0-1 --no-huge -m 600 --no-pci --log-level lib.eal:warning"
kvl_rdma_server "$build" "$tmp" "$out" e2e $eal
rc=0
tel="python3 ${KVL_SRC:?}/tools/kvlane_telemetry.py"
# The client is a kvlane runtime too: it lingers after each run so that its own telemetry can
# be read through its socket. -d and -x as perftest's (the device and its RoCE v2 GID index).
for op in --write --read; do
	: > "$out/rxe$op.0"; : > "$out/rxe$op.1"
	kvl_rdma_snap "$out/rxe$op.0"
	kvl_rdma_perf e2e $op 128M 256 "/kvlane/stats /kvlane/qps /kvlane/lcores" $eal || rc=1
	kvl_rdma_snap "$out/rxe$op.1"
	# what rxe did under this run: a failure is read beside it (retransmissions, send errors)
	echo "e2e: rxe during $op: $(kvl_rdma_snap_diff "$out/rxe$op.0" "$out/rxe$op.1")"
	[ $rc = 0 ] || dmesg | grep -i rxe | tail -n 20
done
$tel -f srv /kvlane/stats > "$out/stats.json" || rc=1
$tel -f srv /kvlane/segments > "$out/segments.json" || rc=1
kill -TERM $srv
wait $srv || { echo "e2e: kvlaned exited with status $? after SIGTERM"; rc=1; }
cat "$out/kvlaned.log"
python3 - "$out" <<'PY' || rc=1
import json, sys
out = sys.argv[1]
for op in ("--write", "--read"):
    for line in open(f"{out}/perf{op}.json"):
        o = json.loads(line)
        assert o["transport"] == "verbs" and o["failed"] == 0 and o["verify_error"] is None, o
        assert o["bytes"] >= 256 << 20 and o["verified_bytes"] >= o["bytes"], o
        print(f"kvlane-perf {op[2:]}: {o['bytes'] >> 20} MiB by RDMA {op[2:].upper()} at "
              f"{o['bw_avg_MBps']:.1f} MB/s, every byte verified")
    # The initiator's own counters, read through its telemetry socket: exactly the bytes it
    # moved (measured transfers plus the verification's READs and WRITEs), nothing failed.
    cs = json.load(open(f"{out}/cli_stats{op}.json"))["/kvlane/stats"]
    cq = json.load(open(f"{out}/cli_qps{op}.json"))["/kvlane/qps"]
    main_w = o["bytes"] if op == "--write" else 0
    main_r = o["bytes"] if op == "--read" else 0
    assert cs["verbs/bytes_written"] == main_w + o["verify_write_bytes"], (cs, o)
    assert cs["verbs/bytes_read"] == main_r + o["verify_read_bytes"], (cs, o)
    assert all(v == 0 for k, v in cs.items() if k.startswith("verbs/failed/")), cs
    assert cs["verbs/qp_recoveries"] == 0 and cs["verbs/qp_resyncs"] == 0, cs
    assert sum(cq["bytes_written"]) == cs["verbs/bytes_written"], cq
    assert sum(cq["bytes_read"]) == cs["verbs/bytes_read"], cq
    assert cs["verbs/qp_signaled"] < cs["verbs/qp_posted"], cs
    print(f"  initiator telemetry: {cs['verbs/bytes_written']} B written, "
          f"{cs['verbs/bytes_read']} B read = what it moved; {cs['verbs/qp_posted']} WRs, "
          f"{cs['verbs/qp_signaled']} signaled, over {len(cq['slot'])} QPs "
          f"({', '.join(cq['device'])})")
st = json.load(open(f"{out}/stats.json"))["/kvlane/stats"]
# One-sided RDMA: the serving side's CPU sees none of it; its TCP counters stay at 0, and
# its own queue pairs posted nothing and failed nothing.
assert st["tcp/served_bytes"] == 0, st
assert st["verbs/qp_posted"] == 0 and st["verbs/qp_recoveries"] == 0, st
assert all(v == 0 for k, v in st.items() if k.startswith("verbs/failed/")), st
print("server /kvlane/stats: verbs counters present, nothing failed, nothing served by its CPU")
sg = json.load(open(f"{out}/segments.json"))["/kvlane/segments"]
i = sg["name"].index("kv")
assert sg["rdma_nics"][i] == 1 and sg["reg_us"][i] > 0 and sg["length"][i] == 128 << 20, sg
print(f"server /kvlane/segments: kv, 128 MiB, registered for RDMA in {sg['reg_us'][i]} us")
PY
[ $rc = 0 ] || echo "e2e: FAILED (see above)"
exit $rc
