#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# build-image.sh - prepare what run-in-vm.sh boots: Debian 12's 6.1 kernel and a busybox
# initramfs with the soft-RoCE (rdma_rxe), veth and netem modules, for kvlane's 'rdma' suite.
# Adapted from the reference harness of the steering repository (../shared/rxe-vm/); nothing
# is fetched from outside Debian: the kernel comes from Debian's package (apt-get download).
#
#   $RXE_VM_STATE/out/vmlinux          uncompressed kernel (PVH boot, ~3 s faster under TCG)
#   $RXE_VM_STATE/out/vmlinuz          the package's bzImage (fallback)
#   $RXE_VM_STATE/out/initramfs.cpio.gz busybox + guest/init + the modules below
#   $RXE_VM_STATE/cache/               the kernel .deb, unpacked (full module tree for modprobe)
#
# The guest's root filesystem is the host's own / (read-only 9p + tmpfs overlay), so no disk
# image is built and host-built binaries run unchanged in the guest.
# Cached: a second run only re-packs the initramfs when guest/init, the module list, busybox
# or the kernel changed (~1 s), else it does nothing.
#
# Env: RXE_VM_STATE=DIR  kernel cache and boot files (default /var/tmp/kvlane-rxe-vm)
#      RXE_VM_NO_APT=1   never run apt-get (missing host packages are then an error)
#      RXE_VM_KPKG=NAME  kernel package (default: what linux-image-amd64 depends on)
# Exit: 0 ready; 3 a prerequisite cannot be provided here (host packages missing and not
#       installable, kernel package not downloadable): the VM cannot run; 1 any other error.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
STATE=${RXE_VM_STATE:-/var/tmp/kvlane-rxe-vm}
CACHE=$STATE/cache
OUT=$STATE/out
log() { echo "build-image: $*" >&2; }
unavailable() { log "cannot build the VM image: $*"; exit 3; }
trap 'log "failed at line $LINENO (exit $?): $BASH_COMMAND"' ERR

mkdir -p "$CACHE" "$OUT" 2>/dev/null || unavailable "cannot create RXE_VM_STATE=$STATE"
[ -w "$STATE" ] || unavailable "RXE_VM_STATE=$STATE is not writable"
# One builder at a time; run-in-vm.sh holds a shared lock while qemu reads the boot files.
exec 9>>"$STATE/.lock"
flock -w 900 9 || unavailable "$STATE/.lock still held after 900 s"

# ---- 1. host packages: qemu, busybox, module tools, the RDMA userland the guest runs -------
# rdma (iproute2) creates the rxe links, tc (iproute2) adds netem, perftest and ibv_devinfo
# (ibverbs-utils) are the reference tools, ibverbs-providers brings librxe.
PKGS="qemu-system-x86 busybox-static cpio kmod xz-utils iproute2 ibverbs-providers
      ibverbs-utils perftest"
missing=$(for p in $PKGS; do
	dpkg-query -W -f='${Status}\n' "$p" 2>/dev/null | grep -q "install ok installed" || echo "$p"
done | xargs)
if [ -n "$missing" ]; then
	[ "${RXE_VM_NO_APT:-0}" != 1 ] || unavailable "missing Debian packages: $missing (RXE_VM_NO_APT=1)"
	[ "$(id -u)" = 0 ] || unavailable "missing Debian packages: $missing (run as root, or: sudo apt-get install $missing)"
	log "installing: $missing"
	aptlog=$STATE/apt.log
	if [ -z "$(find /var/lib/apt/lists -name '*Packages*' -mmin -1440 2>/dev/null | head -1)" ]; then
		apt-get update -qq > "$aptlog" 2>&1 || { tail -n 20 "$aptlog" >&2; unavailable "apt-get update failed"; }
	fi
	DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $missing > "$aptlog" 2>&1 ||
		{ tail -n 20 "$aptlog" >&2; unavailable "apt-get install $missing failed (log: $aptlog)"; }
fi
command -v qemu-system-x86_64 > /dev/null || unavailable "qemu-system-x86_64 not found after installing qemu-system-x86"
[ -x /bin/busybox ] || unavailable "/bin/busybox not found (busybox-static)"

# ---- 2. the kernel: Debian's linux-image-6.1.0-*-amd64, downloaded once -----------------
kpkg_lookup() { apt-cache depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-[0-9]/{print $2; exit}'; }
newest_cached() { ls "$CACHE"/linux-image-[0-9]*-amd64_*.deb 2>/dev/null | sort -V | tail -1 || true; }
KPKG=${RXE_VM_KPKG:-$(kpkg_lookup)}
if [ -z "$KPKG" ] && [ -z "$(newest_cached)" ] && [ "$(id -u)" = 0 ]; then
	log "apt lists know no linux-image-amd64: apt-get update"
	apt-get update -qq >&2 || true
	KPKG=$(kpkg_lookup)
fi
if [ -n "$KPKG" ]; then
	DEB=$(ls "$CACHE/${KPKG}"_*.deb 2>/dev/null | sort -V | tail -1 || true)
else
	DEB=$(newest_cached)
fi
if [ -z "$DEB" ]; then
	[ -n "$KPKG" ] || unavailable "no kernel package known: apt-cache has no linux-image-amd64 (apt-get update?) and $CACHE is empty"
	log "downloading $KPKG (Debian package, ~70 MB)"
	# apt's _apt user cannot write here: apt warns that the download runs unsandboxed.
	if ! (cd "$CACHE" && apt-get download -q "$KPKG" 2>&1 | grep -v unsandboxed >&2; exit "${PIPESTATUS[0]}"); then
		DEB=$(newest_cached)
		[ -n "$DEB" ] || unavailable "apt-get download $KPKG failed"
		log "download failed: using the cached $(basename "$DEB")"
	else
		DEB=$(ls "$CACHE/${KPKG}"_*.deb 2>/dev/null | sort -V | tail -1 || true)
		[ -n "$DEB" ] || unavailable "apt-get download $KPKG left no .deb in $CACHE"
	fi
fi
KDIR=$CACHE/$(basename "$DEB" .deb)
if [ ! -f "$KDIR/.done" ]; then
	log "unpacking $(basename "$DEB")"
	rm -rf "$KDIR"; mkdir -p "$KDIR"
	dpkg-deb -x "$DEB" "$KDIR" || { rm -f "$DEB"; log "corrupt package removed: $DEB"; exit 1; }
	touch "$KDIR/.done"
fi
KV=$(ls "$KDIR/lib/modules" 2>/dev/null | head -1)
[ -n "$KV" ] || { log "no lib/modules in $DEB"; exit 1; }

# ---- 3. initramfs -------------------------------------------------------------------------
# crc32_generic (not crc32_pclmul): rxe computes a CRC32 ICRC over every packet and TCG
# emulates PCLMULQDQ slowly; the generic table code is 15-50 % faster here.
# rdma_ucm: rdma_cm from user space (perftest -R). sch_netem: loss and delay on the veth
# wire (tc qdisc add dev vethA root netem loss 1%).
MODS="virtio_pci 9pnet_virtio 9p overlay veth crc32_generic rdma_rxe ib_uverbs rdma_ucm sch_netem"
STAMP="$KV $(sha256sum "$HERE/guest/init" | cut -c1-16) $MODS $(sha256sum /bin/busybox | cut -c1-16)"
if [ -f "$OUT/initramfs.cpio.gz" ] && [ -f "$OUT/vmlinuz" ] && [ "$(cat "$OUT/.stamp" 2>/dev/null)" = "$STAMP" ]; then
	log "up to date (kernel $KV, $STATE)"
	exit 0
fi
log "building the initramfs for $KV"
[ -f "$KDIR/lib/modules/$KV/modules.dep" ] || depmod -b "$KDIR" "$KV"
IR=$(mktemp -d "$OUT/ir.XXXX")
D=$(mktemp -d)
trap 'rm -rf "$IR" "$D"' EXIT
mkdir -p "$IR"/{bin,sbin,etc,proc,sys,dev,newroot,ovl,lib/modules}
cp /bin/busybox "$IR/bin/busybox"
cp "$HERE/guest/init" "$IR/init"; chmod 755 "$IR/init"
: > "$IR/etc/modload"
for m in $MODS; do
	deps=$(modprobe -d "$KDIR" -S "$KV" --show-depends "$m") || { log "module $m not in kernel $KV"; exit 1; }
	echo "$deps" | awk '$1=="insmod"{print $2}'
done | awk '!seen[$0]++' | while read -r ko; do
	rel=${ko#"$KDIR/lib/modules/$KV/"}
	mkdir -p "$IR/lib/modules/$(dirname "$rel")"
	cp "$ko" "$IR/lib/modules/$rel"
	echo "$rel" >> "$IR/etc/modload"
done
cp "$KDIR/lib/modules/$KV"/modules.{order,builtin,builtin.modinfo} "$IR/lib/modules/" 2>/dev/null || true
# depmod wants <base>/lib/modules/<kv>: build the index in a scratch tree
mkdir -p "$D/lib/modules"; ln -s "$IR/lib/modules" "$D/lib/modules/$KV"
depmod -b "$D" "$KV"
(cd "$IR" && find . -print0 | cpio --null -o -H newc --quiet | gzip -1) > "$OUT/initramfs.cpio.gz.tmp"
cp "$KDIR/boot/vmlinuz-$KV" "$OUT/vmlinuz.tmp"
# Uncompressed ELF vmlinux: qemu boots it through its PVH entry point (CONFIG_PVH=y), which
# skips SeaBIOS' bzImage loader and the in-guest xz decompression: ~3 s less per boot under TCG.
rm -f "$OUT/vmlinux" "$OUT/vmlinux.tmp"
off=$(LC_ALL=C grep -obUaP '\xfd7zXZ\x00' "$OUT/vmlinuz.tmp" | head -1 | cut -d: -f1 || true)
if [ -n "$off" ]; then
	tail -c +$((off + 1)) "$OUT/vmlinuz.tmp" | xz -dcq > "$OUT/vmlinux.tmp" 2>/dev/null || true # trailing data: rc 1
	if [ "$(head -c 4 "$OUT/vmlinux.tmp" | od -An -tx1 | tr -d ' ')" = 7f454c46 ]; then
		mv "$OUT/vmlinux.tmp" "$OUT/vmlinux"
	fi
	rm -f "$OUT/vmlinux.tmp"
fi
[ -f "$OUT/vmlinux" ] || log "note: could not extract vmlinux, the VM boots the bzImage (slower)"
mv "$OUT/initramfs.cpio.gz.tmp" "$OUT/initramfs.cpio.gz"
mv "$OUT/vmlinuz.tmp" "$OUT/vmlinuz"
echo "$KV" > "$OUT/KERNEL_VERSION"
echo "$KDIR/lib/modules/$KV" > "$OUT/MODULES_DIR"
echo "$STAMP" > "$OUT/.stamp"
log "done: kernel $KV, initramfs $(du -h "$OUT/initramfs.cpio.gz" | cut -f1), $(wc -l < "$IR/etc/modload") modules, in $STATE"
