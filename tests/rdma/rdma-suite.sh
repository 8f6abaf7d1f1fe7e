#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# rdma-suite.sh NAME BINARY [ARGS...] - one check of meson's 'rdma' suite: build or refresh
# the soft-RoCE VM image (vm/build-image.sh, cached), boot the VM once (vm/run-in-vm.sh) and
# run BINARY ARGS inside it, with rxe0 <-> rxe1 ready and RXE_DEV0/1, RXE_IP0/1, RXE_GID0/1
# exported. Uses the project's own harness (tests/rdma/vm/, adapted from the reference harness
# of the steering repository).
#
# Exit: BINARY's exit code (0 pass, 77 skip); 77 with the reason printed when the VM cannot
#       run here at all (image prerequisites missing, no qemu, the VM does not boot); 97 RDMA
#       set-up failed in the guest, 98 the VM died or timed out after booting; 1 other errors.
# Results: $RXE_VM_RW/NAME/ (meson: <build>/tests/rdma/results/NAME): output.log, console.log
#       (guest kernel log), build-image.log, and what BINARY writes in its working folder.
# Env: RXE_VM_STATE (image cache, default /var/tmp/kvlane-rxe-vm), RXE_VM_TIMEOUT (s, 300);
#      KVL_*, ASAN/UBSAN/LSAN_OPTIONS, N_SMALL N_BIG N_LAT PT_TIMEOUT are passed to the guest.
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
VM=$HERE/vm
[ $# -ge 2 ] || { echo "usage: $0 NAME BINARY [ARGS...]" >&2; exit 1; }
NAME=$1 BIN=$2
shift 2
skip() { echo "skipped: rdma/$NAME: $*"; exit 77; }
fail() { echo "rdma/$NAME: $*" >&2; exit 1; }
T0=$(date +%s.%N)
el() { awk "BEGIN{printf \"%.1f\", $(date +%s.%N) - $T0}"; }

case $BIN in /*) ;; *) BIN=$PWD/$BIN ;; esac
[ -f "$BIN" ] && [ -x "$BIN" ] || fail "$BIN is not an executable file"
RW=${RXE_VM_RW:-$PWD/rdma-results}/$NAME
rm -rf "$RW" && mkdir -p "$RW" || fail "cannot create the results folder $RW"
RW=$(cd "$RW" && pwd)

# 1. the image (kernel + initramfs), cached; exit 3 means it cannot be built here
"$VM/build-image.sh" > "$RW/build-image.log" 2>&1
rc=$?
cat "$RW/build-image.log"
case $rc in
0) ;;
3) skip "the VM image cannot be built here: $(grep 'cannot build the VM image' "$RW/build-image.log" | tail -1 | sed 's/.*cannot build the VM image: //')" ;;
*) fail "vm/build-image.sh failed (exit $rc), log: $RW/build-image.log" ;;
esac
command -v qemu-system-x86_64 > /dev/null || skip "qemu-system-x86_64 not found (Debian package qemu-system-x86)"
echo "rdma/$NAME: VM image ready after $(el) s; results in $RW"

# 2. one VM boot running BINARY ARGS in $RW
shq() { printf "'%s'" "${1//\'/\'\\\'\'}"; }
cmd="exec $(shq "$BIN")"
for a in "$@"; do cmd="$cmd $(shq "$a")"; done
passenv=$(compgen -e | grep -E '^(KVL_[A-Za-z0-9_]*|ASAN_OPTIONS|UBSAN_OPTIONS|LSAN_OPTIONS|N_SMALL|N_BIG|N_LAT|PT_TIMEOUT)$' | xargs)
cd "$RW" || fail "cannot enter $RW"
RXE_VM_RW=$RW RXE_VM_KLOG=$RW/console.log RXE_VM_TIMEOUT=${RXE_VM_TIMEOUT:-300} RXE_VM_PASSENV=$passenv \
	"$VM/run-in-vm.sh" "$cmd" 2>&1 | tee "$RW/output.log"
rc=${PIPESTATUS[0]}
booted=0
grep -q 'rxe-vm: init ready' "$RW/console.log" 2> /dev/null && booted=1
echo "rdma/$NAME: exit $rc after $(el) s"
case $rc in
97) echo "rdma/$NAME: RDMA set-up failed in the guest (exit 97; guest kernel log: $RW/console.log)" >&2
	exit 97 ;;
98) [ $booted = 1 ] || skip "the VM does not boot here (qemu exit, no 'init ready' on the console: $RW/console.log)"
	echo "rdma/$NAME: the VM died or timed out (exit 98; guest kernel log: $RW/console.log)" >&2
	exit 98 ;;
esac
exit "$rc"
