#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# Build the libFuzzer targets with clang and run each for a bounded time over its seed corpus.
#   tests/fuzz/fuzz.sh SRC_ROOT OUT_DIR SECONDS_EACH
# Exit 77 (skipped, reason printed) without clang's libFuzzer; 1 on any crash or build error.
set -u
src=$1
out=$2
secs=$3
cc=$(command -v clang-14 || command -v clang || true)
if [ -z "$cc" ]; then
	echo "skipped: no clang (apt-get install clang libclang-rt-14-dev)"
	exit 77
fi
mkdir -p "$out"
flags="-g -O1 -std=gnu11 -D_GNU_SOURCE -Wall -Wextra -Werror \
	-fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined -I$src/runtime -I$src/config -I$src/lcores/xport -I$src/include"
if ! echo 'int LLVMFuzzerTestOneInput(const char *d, long n){(void)d;(void)n;return 0;}' |
	$cc -fsanitize=fuzzer -x c - -o "$out/probe" 2>/dev/null; then
	echo "skipped: $cc cannot link libFuzzer (apt-get install libclang-rt-14-dev)"
	exit 77
fi
$cc $flags "$src/tests/fuzz/fuzz_ctrl.c" "$src/runtime/ctrl_proto.c" -lcrypto \
	-o "$out/fuzz_ctrl" || exit 1
$cc $flags "$src/tests/fuzz/fuzz_ini.c" "$src/config/config.c" -linih \
	-o "$out/fuzz_ini" || exit 1
# The data port's state machine: the real handlers on socketpairs (DPDK for the ring and log).
# shellcheck disable=SC2046  # pkg-config prints several words on purpose
$cc $flags $(pkg-config --cflags libdpdk) -I"$src/runtime/control" -I"$src/lcores" \
	-I"$src/lcores/topo" -I"$src/lcores/gpu" -I"$src/tests/unit" \
	"$src/tests/fuzz/fuzz_bind.c" "$src/runtime/ctrl_proto.c" "$src/runtime/log.c" \
	"$src/config/config.c" -lssl -lcrypto -linih $(pkg-config --libs libdpdk) \
	-o "$out/fuzz_bind" || exit 1
rc=0
"$src/tests/fuzz/run-fuzz.sh" "$out/fuzz_ctrl" "$src/tests/fuzz/corpus/ctrl" "$secs" || rc=1
"$src/tests/fuzz/run-fuzz.sh" "$out/fuzz_ini" "$src/tests/fuzz/corpus/ini" "$secs" || rc=1
"$src/tests/fuzz/run-fuzz.sh" "$out/fuzz_bind" "$src/tests/fuzz/corpus/bind" "$secs" -timeout=5 || rc=1
exit $rc
