#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# Runs INSIDE the soft-RoCE VM: the [memory] pool over real RDMA. kvlaned on $RXE_DEV1 and
# kvlane-perf on $RXE_DEV0 each map a 16 MiB pool and register it ONCE on their device; their
# segments (the INI's kv, the client's kvl_seg_alloc local segment) are carved from it and use
# its MR: /kvlane/segments shows no registration time of their own, /kvlane/memory shows the
# pool's one registration and the chunks they take. RDMA READ from the server's pool-carved
# segment into the client's, every byte verified. (WRITE is left to e2e: on this loaded
# emulated guest an occasional WRITE completes with a remote access error with or without a
# pool, seen side by side in one boot; a READ has not.)
#   pool.sh BUILD_DIR OUT_DIR
set -eu
. "${KVL_SRC:-$(cd "$(dirname "$0")/../.." && pwd)}/tests/rdma/lib.sh"
build=$1
out=$2
: "${RXE_DEV0:?run inside the VM harness}" "${RXE_DEV1:?}" "${RXE_IP0:?}" "${RXE_IP1:?}"
kvl_rdma_setup "$out"
kvl_rdma_inis "$tmp" pool 8 yield yield # kv: 8 x 1 MiB
# Small: zeroing and pinning pages is slow under TCG (the handshake bound is lib.sh's).
for side in a b; do
	printf '[memory]\npool_size_mb = 16\nchunk_size_kb = 1024\nhugepage = auto\n' \
		>> "$tmp/$side.ini"
done
eal="-l 0-1 --no-huge -m 256 --no-pci --log-level lib.eal:warning"
kvl_rdma_server "$build" "$tmp" "$out" pool $eal
rc=0
tel="python3 ${KVL_SRC:?}/tools/kvlane_telemetry.py"
for op in --read; do
	kvl_rdma_perf pool $op 8M 32 "/kvlane/memory /kvlane/segments" $eal || rc=1
done
$tel -f srv /kvlane/memory > "$out/memory.json" || rc=1
$tel -f srv /kvlane/segments > "$out/segments.json" || rc=1
kill -TERM $srv
wait $srv || { echo "pool: kvlaned exited with status $? after SIGTERM"; rc=1; }
cat "$out/kvlaned.log"
python3 - "$out" <<'PY' || rc=1
import json, sys
out = sys.argv[1]
MIB = 1 << 20


def check_side(mem, segs, who, names):
    """Every segment inside the pool, none registered on its own, the pool once."""
    assert mem["enabled"] == 1 and mem["size_bytes"] == 16 * MIB, (who, mem)
    assert mem["chunk_bytes"] == MIB and mem["chunks_total"] == 16, (who, mem)
    assert sorted(segs["name"]) == sorted(names), (who, segs)
    want = sum(-(-n // MIB) for n in segs["length"])
    assert mem["chunks_used"] == want and mem["segments"] == len(names), (who, mem, segs)
    regs = {k: v for k, v in mem.items() if k.startswith("reg_ns/")}
    assert list(regs) == ["reg_ns/r"] and regs["reg_ns/r"] > 0, (who, mem)
    # one registration for the whole pool: the segments took none of their own
    assert all(n == 1 for n in segs["rdma_nics"]), (who, segs)
    assert all(us == 0 for us in segs["reg_us"]), (who, segs)
    print(f"{who}: pool 16 MiB registered once on its NIC in {regs['reg_ns/r'] / 1e3:.0f} us, "
          f"page {mem['page_size']} B; {mem['chunks_used']} chunks for {segs['name']}, "
          f"each segment reg_us 0 (the pool's MR)")


for op in ("--read",):
    for line in open(f"{out}/perf{op}.json"):
        o = json.loads(line)
        assert o["transport"] == "verbs" and o["failed"] == 0 and o["verify_error"] is None, o
        assert o["bytes"] == 32 * MIB and o["verified_bytes"] >= o["bytes"], o
        print(f"kvlane-perf {op[2:]}: {o['bytes'] >> 20} MiB by RDMA {op[2:].upper()} between "
              f"pool-carved segments at {o['bw_avg_MBps']:.1f} MB/s, every byte verified")
    mem = json.load(open(f"{out}/cli_memory{op}.json"))["/kvlane/memory"]
    segs = json.load(open(f"{out}/cli_segments{op}.json"))["/kvlane/segments"]
    check_side(mem, segs, f"client ({op[2:]})", ["kv", "kvlane-perf-local"])
mem = json.load(open(f"{out}/memory.json"))["/kvlane/memory"]
segs = json.load(open(f"{out}/segments.json"))["/kvlane/segments"]
check_side(mem, segs, "server", ["kv"])
PY
[ $rc = 0 ] || echo "pool: FAILED (see above)"
exit $rc
