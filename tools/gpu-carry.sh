#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# Pack binaries built here, and the non-system shared libraries they load, for the GPU machine.
#
# The lent GPU machine has no DPDK, rdma-core, inih or libnuma: a binary built here runs there
# only with its libraries beside it. This copies each named binary into DEST/bin and every
# library `ldd` resolves for it into DEST/lib, except the C library itself (libc, libm, libdl,
# libpthread, librt, the loader: the machine's own are newer and must be used) and the NVIDIA
# driver (libcuda: it must match the machine's kernel driver). Run there with
#   LD_LIBRARY_PATH=$PWD/DEST/lib DEST/bin/NAME ...
#
# usage: tools/gpu-carry.sh BUILD_DIR DEST BINARY...   (BINARY relative to BUILD_DIR)
set -eu

if [ $# -lt 3 ]; then
	echo "usage: $0 BUILD_DIR DEST BINARY... (e.g. $0 build .carry-gpu kvlaned tests/test_gpumem)" >&2
	exit 2
fi
build=$1
dest=$2
shift 2
mkdir -p "$dest/bin" "$dest/lib"

# Libraries the machine brings itself, matched on the whole soname (a pattern such as
# "librt" would also drop librte_*, DPDK's own libraries).
system_lib() {
	case "$1" in
	libc.so.* | libm.so.* | libdl.so.* | libpthread.so.* | librt.so.* | ld-linux*.so.* | \
		libcuda.so.* | libgcc_s.so.* | libstdc++.so.* | linux-vdso.so.*) return 0 ;;
	esac
	return 1
}

# Meson 1.0 gives nvcc no dependency flags (its ninja rule names a depfile nvcc never writes), so
# a .cu object is not rebuilt when a header it includes changes: a carried binary could then be
# built against an old struct (seen 2026-12-02: a bench SIGSEGV in cudaEventRecord). Any .cu
# object older than a header of the tree is removed, and the named binaries are built again.
src=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["directories"]["source"])' \
	"$build/meson-info/meson-info.json" 2>/dev/null || true)
if [ -n "$src" ] && [ -d "$src" ]; then
	stale=0
	for o in $(find "$build" -name '*.cu.o'); do
		if [ -n "$(find "$src" -path "$src/.*" -prune -o -path "$build" -prune -o \
			\( -name '*.h' -o -name '*.cuh' \) -newer "$o" -print | head -1)" ]; then
			rm -f "$o"
			stale=$((stale + 1))
		fi
	done
	[ "$stale" -eq 0 ] || echo "$0: $stale CUDA objects older than a header: rebuilt"
	ninja -C "$build" "$@" >/dev/null
fi

n_lib=0
for b in "$@"; do
	src=$build/$b
	if [ ! -x "$src" ]; then
		echo "$0: $src: not built (ninja -C $build first)" >&2
		exit 1
	fi
	cp "$src" "$dest/bin/"
	# "name => /path (addr)"; a "not found" line means the binary cannot run here either
	if ldd "$src" | grep -q 'not found'; then
		echo "$0: $src: ldd finds no copy of:" >&2
		ldd "$src" | grep 'not found' >&2
		exit 1
	fi
	for path in $(ldd "$src" | awk '$2 == "=>" && $3 ~ /^\// { print $1 "=" $3 }'); do
		name=${path%%=*}
		file=${path#*=}
		system_lib "$name" && continue
		# a library rebuilt since the last carry (libkvlane) is copied again
		if [ ! -e "$dest/lib/$name" ] || ! cmp -s "$file" "$dest/lib/$name"; then
			cp -L "$file" "$dest/lib/$name"
			n_lib=$((n_lib + 1))
		fi
	done
done
echo "$dest: $# binaries, $(ls "$dest/lib" | wc -l) libraries ($n_lib new or changed), $(du -sh "$dest" | cut -f1)"
