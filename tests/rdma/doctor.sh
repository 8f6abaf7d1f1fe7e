#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# Runs INSIDE the soft-RoCE VM: kvlane-doctor against the real rxe0/rxe1. Its GID line must
# name the index and IPv4 address the harness found (RXE_GID0/1, RXE_IP0/1), its port line
# ACTIVE/LinkUp, and its MTU line the active MTU ibv_devinfo reports for the port.
#   doctor.sh BUILD_DIR OUT_DIR
set -eu
build=$1
out=$2
: "${RXE_DEV0:?run inside the VM harness}" "${RXE_DEV1:?}" "${RXE_IP0:?}" "${RXE_IP1:?}"
: "${RXE_GID0:?}" "${RXE_GID1:?}"
mkdir -p "$out"
# One INI per side, as kvlaned runs here (the guest has 2 CPUs: main lcore + one NIC lcore).
for side in a b; do
	[ $side = a ] && dev=$RXE_DEV0 || dev=$RXE_DEV1
	printf '[runtime]\nname = doctor-%s\nidle_policy = yield\n[nic.%s]\ndevice = %s\ntransport = verbs\n' \
		"$side" "$side" "$dev" > "$out/$side.ini"
	ibv_devinfo -d "$dev" -i 1 > "$out/devinfo-$dev.txt" || true
done
rcs=""
for side in a b; do
	rc=0
	"$build/kvlane-doctor" -c "$out/$side.ini" -l 0-1 > "$out/table-$side.txt" || rc=$?
	cat "$out/table-$side.txt"
	drc=0
	"$build/kvlane-doctor" -c "$out/$side.ini" -l 0-1 --json > "$out/doctor-$side.json" || drc=$?
	[ "$rc" = "$drc" ] || { echo "doctor: $side: table exit $rc, --json exit $drc"; exit 1; }
	rcs="$rcs $drc"
done
python3 - "$out" $rcs <<'PY'
import json, os, re, sys
out, rcs = sys.argv[1], [int(x) for x in sys.argv[2:]]
bad = []
def want(cond, what, row):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        bad.append(f"{what}: {row}")
env = os.environ
devs = [(env["RXE_DEV0"], env["RXE_IP0"], env["RXE_GID0"], "a"),
        (env["RXE_DEV1"], env["RXE_IP1"], env["RXE_GID1"], "b")]
for (dev, ip, gid, label), rc in zip(devs, rcs):
    j = json.load(open(os.path.join(out, f"doctor-{label}.json")))
    rows = {(c["check"], c["subject"]): c for c in j["checks"]}
    r = rows[("rdma_devices", "host")]
    want(r["verdict"] == "PASS" and all(d in r["observed"] for d, *_ in devs),
         f"{label}: rdma_devices PASS listing both rxe devices", r)
    s = f"nic.{label} ({dev})"
    r = rows[("device", s)]
    want(r["verdict"] == "PASS" and "rdma_rxe" in r["observed"], f"{s}: device, rdma_rxe", r)
    r = rows[("port_state", s)]
    want(r["verdict"] == "PASS" and "state ACTIVE, physical state LinkUp" in r["observed"],
         f"{s}: port ACTIVE / LinkUp", r)
    r = rows[("gid", s)]
    want(r["verdict"] == "PASS" and f"auto -> [{gid}] {ip} RoCE v2" in r["observed"],
         f"{s}: gid auto -> [{gid}] {ip} RoCE v2 (the harness's GID index)", r)
    r = rows[("mtu", s)]
    info = open(os.path.join(out, f"devinfo-{dev}.txt")).read()
    m = re.search(r"active_mtu:\s+(\d+)", info)
    act = m.group(1) if m else "?"
    want(f"port active MTU {act} " in r["observed"],
         f"{s}: mtu line's active MTU = ibv_devinfo's active_mtu {act}", r)
    want(r["verdict"] == ("PASS" if act == "4096" else "WARN"),
         f"{s}: mtu {r['verdict']} against the INI's 4096", r)
    want(j["summary"]["fail"] == 0 and j["exit"] == rc and rc in (0, 1),
         f"{label}: no FAIL on a working rxe device (exit {rc})", j["summary"])
if bad:
    print("doctor: " + "; ".join(bad))
    sys.exit(1)
PY
