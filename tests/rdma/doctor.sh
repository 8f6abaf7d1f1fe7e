#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# Runs INSIDE the soft-RoCE VM: kvlane-doctor against the real rxe0/rxe1. Its GID line must
# name the index and IPv4 address the harness found (RXE_GID0/1, RXE_IP0/1), its port line
# ACTIVE/LinkUp, and its MTU line the active MTU ibv_devinfo reports for the port.
# Then two ends: kvlaned on rxe1, kvlane-doctor --peer from rxe0 over the authenticated
# control path: the compare rows (RoCE v2 both ends, Ethernet, MTU, rate) and a link test of
# RDMA READs with its verdict; again with mtu = 1024 in kvlaned's INI, which both ends name.
#   doctor.sh BUILD_DIR OUT_DIR
set -eu
build=$1
out=$2
. "${KVL_SRC:-$(cd "$(dirname "$0")/../.." && pwd)}/tests/rdma/lib.sh"
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

# ---- two ends: kvlaned on rxe1, kvlane-doctor --peer from rxe0 ----
kvl_rdma_setup "$out"
kvl_rdma_inis "$tmp" doctor 8
eal="-l 0-1 --no-huge -m 600 --no-pci --log-level lib.eal:warning"
peer_run() { # TAG: kvlaned on b.ini, the doctor against it, kvlaned's log kept
	kvl_rdma_server "$build" "$tmp" "$out" "doctor $1" $eal
	prc=0
	"$build/kvlane-doctor" -c "$tmp/a.ini" --set "nic.r.gid_index=$RXE_GID0" --no-gpu --json \
		--peer "$RXE_IP1:18515" --seconds 2 -- $eal --file-prefix doc \
		> "$out/peer-$1.json" 2> "$out/peer-$1.log" || prc=$?
	echo "$prc" > "$out/peer-$1.rc"
	kill -TERM $srv
	wait $srv || { echo "doctor: kvlaned ($1) exited with status $? after SIGTERM"; exit 1; }
	cp "$out/kvlaned.log" "$out/kvlaned-$1.log"
}
peer_run same
sed -i 's/^queue_depth = 256$/queue_depth = 256\nmtu = 1024/' "$tmp/b.ini"
peer_run mtu1024
python3 - "$out" <<'PY'
import json, os, sys
out = sys.argv[1]
bad = []
def want(cond, what, row):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        bad.append(f"{what}: {row}")
def rows(tag):
    j = json.load(open(os.path.join(out, f"peer-{tag}.json")))
    return {c["check"]: c for c in j["checks"] if c["check"].startswith(("peer_", "link_test"))}
r = rows("same")
want(r["peer_link_layer"]["verdict"] == "PASS"
     and r["peer_link_layer"]["observed"] == "here Ethernet, there Ethernet",
     "two ends: link layer Ethernet at both", r.get("peer_link_layer"))
g = r["peer_gid_type"]
want(g["verdict"] == "PASS" and g["observed"].count("RoCE v2") == 2,
     "two ends: RoCE v2 at both (the handshake's GIDs)", g)
want(r["peer_mtu"]["verdict"] == "PASS", "two ends: the same MTU", r["peer_mtu"])
want(r["peer_rate"]["verdict"] in ("PASS", "SKIP"), "two ends: rate", r["peer_rate"])
lt = r.get("link_test", {})
gbps = float(lt.get("observed", "0 GB/s").split(" GB/s")[0] or 0)
want(lt.get("verdict") in ("PASS", "WARN", "SKIP") and gbps > 0,
     f"two ends: link test moved bytes by RDMA READ ({lt.get('observed')})", lt)
if lt.get("verdict") == "WARN" and "% of" in lt.get("observed", ""):
    pct = float(lt["observed"].split(": ")[1].split(" %")[0])
    want(pct >= 80 or ("PCIe" in lt["fix"] if pct < 50 else "80" in lt["fix"]),
         "two ends: the verdict's fix follows the write-ups' thresholds", lt)
srv = open(os.path.join(out, "kvlaned-same.log")).read()
want("compared 1 NIC: " in srv and "0 FAIL" in srv, "two ends: kvlaned logged the exchange",
     [ln for ln in srv.splitlines() if "doctor" in ln])
m = rows("mtu1024")["peer_mtu"]
want(m["verdict"] == "WARN" and "there port 1024 (INI 1024" in m["observed"],
     "mtu 1024 at kvlaned's end: WARN on the doctor's end", m)
srv = open(os.path.join(out, "kvlaned-mtu1024.log")).read()
hits = [ln for ln in srv.splitlines() if "WARN peer_mtu" in ln]
want(hits and "here port 1024 (INI 1024" in hits[0], "mtu 1024: named at kvlaned's end too",
     hits or srv[-2000:])
for tag in ("same", "mtu1024"):
    print(f"doctor --peer ({tag}):")
    for k, v in rows(tag).items():
        print(f"  {v['verdict']:5} {k:16} {v['observed']}")
if bad:
    print("doctor: " + "; ".join(bad))
    sys.exit(1)
PY
