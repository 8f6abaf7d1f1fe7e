#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# run-in-vm.sh "COMMAND" - boot the kernel prepared by build-image.sh under qemu (TCG, no KVM
# needed), run COMMAND as root inside it (sh -c), print its output, exit with its exit code.
# Adapted from the reference harness of the steering repository (../shared/rxe-vm/).
#
# Inside the guest:
#   * the root filesystem is the host's / (read-only 9p + tmpfs overlay: writes vanish)
#   * $RXE_VM_RW (default: the current directory) is shared READ-WRITE at the same path:
#     results go there; the command starts in the current directory
#   * with RXE_VM_RXE=1 (default) two soft-RoCE devices are ready before COMMAND runs
#     (guest/rxe-setup.sh):  rxe0 on vethA 10.77.0.1  <== veth ==>  rxe1 on vethB 10.77.0.2
#     and exported: RXE_DEV0 RXE_DEV1 RXE_IP0 RXE_IP1 RXE_GID0 RXE_GID1 (RoCE v2 GID indexes)
#   * sch_netem is loaded: `tc qdisc add dev vethA root netem loss 1%` drops on rxe0 -> rxe1
#
# Exit: COMMAND's exit code; 98 the VM died or timed out (no exit code came back);
#       97 the RDMA set-up in the guest failed; 2 the VM cannot start here (usage, no image:
#       run build-image.sh, no qemu).
# Env: RXE_VM_STATE (default /var/tmp/kvlane-rxe-vm, as for build-image.sh)
#      RXE_VM_RW=DIR  the read-write share     RXE_VM_TIMEOUT (s, default 1800)
#      RXE_VM_MEM (MiB, default 1024)  RXE_VM_SMP (default 2)
#      RXE_VM_RXE=0 no rxe set-up   RXE_VM_MTU (veth MTU, default 9000: RoCE path MTU 4096)
#      RXE_VM_PASSENV="NAME..."  host variables exported to COMMAND (the guest starts clean)
#      RXE_VM_KLOG=FILE  keep the guest console (kernel log) in FILE
#      RXE_VM_APPEND="..."  extra kernel command line   RXE_VM_VERBOSE=1  print the console
#      RXE_VM_KEEP=1  keep the per-run job folder (.rxe-vm-job.*) in $RXE_VM_RW
#      RXE_VM_BOOT_TIMEOUT (s, default 180): the job must have started by then, else the VM
#        is booted once more (below)
#
# A guest that never reaches the job is booted a second time, once: under TCG a vCPU of the
# guest was seen idle with its timer never firing from the first seconds of boot ("rcu_preempt
# kthread timer wakeup didn't happen ... Possible timer handling issue on cpu=1", repeated
# for 400 s, init never ready, on a quiet host). Nothing of COMMAND has run then, so a second
# boot hides nothing of it; the first console is kept beside ($JOBDIR/console.boot1.log) and
# its tail printed.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
STATE=${RXE_VM_STATE:-/var/tmp/kvlane-rxe-vm}
OUT=$STATE/out
die() { echo "run-in-vm: $*" >&2; exit 2; }
[ $# -ge 1 ] || die "usage: $0 \"COMMAND\""
command -v qemu-system-x86_64 > /dev/null || die "qemu-system-x86_64 not found (Debian package qemu-system-x86; build-image.sh installs it as root)"
[ -f "$OUT/vmlinuz" ] && [ -f "$OUT/initramfs.cpio.gz" ] || die "no VM image in $OUT: run $HERE/build-image.sh first (same RXE_VM_STATE)"

CWD=$(pwd)
RW=${RXE_VM_RW:-$CWD}
[ "$RW" = / ] && RW=$STATE/share
mkdir -p "$RW" || die "cannot create RXE_VM_RW=$RW"
RW=$(cd "$RW" && pwd)
case "$RW$CWD" in *[[:space:]]*) die "paths with spaces are not supported: $RW $CWD" ;; esac

# build-image.sh holds this lock exclusively while it rewrites the boot files
exec 9>>"$STATE/.lock"
flock -s -w 900 9 || die "$STATE/.lock held by a build-image.sh for 900 s"

JOBDIR=$(mktemp -d "$RW/.rxe-vm-job.XXXXXX")
LOG=${RXE_VM_KLOG:-$JOBDIR/console.log}
: > "$LOG"
TAILPID='' QPID=''
cleanup() {
	[ -z "$TAILPID" ] || kill "$TAILPID" 2> /dev/null || true
	if [ "${RXE_VM_KEEP:-0}" = 1 ]; then echo "run-in-vm: kept $JOBDIR" >&2; else rm -rf "$JOBDIR"; fi
}
trap cleanup EXIT

# single-quote a value for the guest's /bin/sh (dash)
shq() { printf "'%s'" "${1//\'/\'\\\'\'}"; }
{
	for v in ${RXE_VM_PASSENV:-}; do
		[ -z "${!v+x}" ] || printf 'export %s=%s\n' "$v" "$(shq "${!v}")"
	done
	printf '%s\n' "$*" # the command, exactly as given (all arguments joined, as sh -c sees them)
} > "$JOBDIR/cmd.sh"
cat > "$JOBDIR/job.sh" << EOF
#!/bin/sh
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root TERM=dumb LANG=C.UTF-8
export RXE_VM=1 RXE_VM_MTU=${RXE_VM_MTU:-9000}
: > "$JOBDIR/started"
finish() { echo \$1 > "$JOBDIR/rc"; exit \$1; }
if [ "${RXE_VM_RXE:-1}" = 1 ]; then
	. "$HERE/guest/rxe-setup.sh" > "$JOBDIR/rxe-setup.log" 2>&1 || { echo "rxe-vm: rxe set-up failed:"; cat "$JOBDIR/rxe-setup.log"; finish 97; }
fi
cd "$CWD" || { echo "rxe-vm: cannot cd to $CWD in the guest"; finish 96; }
sh "$JOBDIR/cmd.sh" > "$JOBDIR/stdout" 2>&1 < /dev/null
finish \$?
EOF

# stream the command's output while the VM runs
: > "$JOBDIR/stdout"
tail -n +1 -F -s 0.3 "$JOBDIR/stdout" 2> /dev/null &
TAILPID=$!

# the uncompressed PVH-bootable vmlinux boots 3 s faster under TCG
KERNEL=${RXE_VM_KERNEL:-$OUT/vmlinux}
[ -f "$KERNEL" ] || KERNEL=$OUT/vmlinuz
TMO=${RXE_VM_TIMEOUT:-1800}
BOOT=${RXE_VM_BOOT_TIMEOUT:-180}
boot_vm() { # boot_vm SECONDS: one VM, its qemu exit status in $qrc
	set +e
	timeout -k 10 "$1" \
		qemu-system-x86_64 \
		-machine q35 -accel tcg,thread=multi,tb-size=256 -cpu max \
		-smp "${RXE_VM_SMP:-2}" -m "${RXE_VM_MEM:-1024}" \
		-kernel "$KERNEL" -initrd "$OUT/initramfs.cpio.gz" \
		-append "console=ttyS0 quiet loglevel=4 panic=-1 oops=panic rdinit=/init mitigations=off tsc=reliable no_timer_check random.trust_cpu=on module_blacklist=crc32_pclmul rxevm.rw=$RW rxevm.job=$JOBDIR/job.sh rxevm.mods=$(cat "$OUT/MODULES_DIR" 2> /dev/null) ${RXE_VM_APPEND:-}" \
		-virtfs local,path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap \
		-virtfs local,path="$RW",mount_tag=rw,security_model=none,multidevs=remap \
		-nic none -display none -no-reboot -monitor none -serial file:"$LOG" \
		-device virtio-rng-pci &
	QPID=$!
	trap 'kill $QPID 2> /dev/null; wait $QPID 2> /dev/null; cleanup; exit 130' INT TERM
	# the boot watchdog: the job's first act is to create $JOBDIR/started
	_b=0
	while kill -0 $QPID 2> /dev/null && [ ! -f "$JOBDIR/started" ]; do
		if [ $_b -ge "$BOOT" ]; then
			: > "$JOBDIR/boot-stuck"
			kill $QPID 2> /dev/null
			break
		fi
		sleep 1
		_b=$((_b + 1))
	done
	wait $QPID
	qrc=$?
	set -e
}
t_start=$(date +%s)
boot_vm "$TMO"
if [ -f "$JOBDIR/boot-stuck" ] && [ ! -f "$JOBDIR/started" ]; then
	cp "$LOG" "$JOBDIR/console.boot1.log"
	echo "run-in-vm: the guest did not start the job within $BOOT s (RXE_VM_BOOT_TIMEOUT); its console's last lines:" >&2
	tail -n 6 "$LOG" >&2
	echo "run-in-vm: booting it once more (nothing of the command had run)" >&2
	rm -f "$JOBDIR/boot-stuck"
	: > "$LOG"
	left=$((TMO - ($(date +%s) - t_start)))
	[ $left -gt 60 ] || left=60
	boot_vm "$left"
fi
sleep 0.4
kill "$TAILPID" 2> /dev/null || true
wait "$TAILPID" 2> /dev/null || true
TAILPID=

if [ -f "$JOBDIR/rc" ]; then
	rc=$(cat "$JOBDIR/rc")
else
	if [ -f "$JOBDIR/boot-stuck" ]; then
		echo "run-in-vm: the guest did not start the job within $BOOT s, twice; console log:" >&2
	else
		case $qrc in
		124 | 137) echo "run-in-vm: the VM timed out after $TMO s (RXE_VM_TIMEOUT); console log:" >&2 ;;
		*) echo "run-in-vm: no exit code from the guest (qemu exit $qrc); console log:" >&2 ;;
		esac
	fi
	tail -n 40 "$LOG" >&2
	rc=98
fi
if [ "${RXE_VM_VERBOSE:-0}" = 1 ] || [ "$rc" = 97 ]; then
	echo "---- guest console ----" >&2
	cat "$LOG" >&2
fi
exit "$rc"
