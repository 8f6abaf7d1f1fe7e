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
# The five targets build in parallel; each build's log is kept.
build() {
	name=$1
	shift
	# shellcheck disable=SC2086  # $flags is a list of words
	$cc $flags "$@" -o "$out/$name" >"$out/$name.build.log" 2>&1
}
# shellcheck disable=SC2046  # pkg-config prints several words on purpose
dpdk_cflags=$(pkg-config --cflags libdpdk)
dpdk_libs=$(pkg-config --libs libdpdk)
ctl_inc="-I$src/runtime/control -I$src/lcores -I$src/lcores/topo -I$src/lcores/gpu -I$src/tests/unit"
build fuzz_ctrl "$src/tests/fuzz/fuzz_ctrl.c" "$src/runtime/ctrl_proto.c" -lcrypto &
b1=$!
build fuzz_ini "$src/tests/fuzz/fuzz_ini.c" "$src/config/config.c" -linih &
b2=$!
# The data port's state machine: the real handlers on socketpairs (DPDK for the ring and log).
# shellcheck disable=SC2086
build fuzz_bind $dpdk_cflags $ctl_inc "$src/tests/fuzz/fuzz_bind.c" "$src/runtime/ctrl_proto.c" \
	"$src/runtime/log.c" "$src/config/config.c" -lssl -lcrypto -linih $dpdk_libs &
b3=$!
# A control connection through handshake and exchange, accepting and connecting.
# shellcheck disable=SC2086
build fuzz_ctl $dpdk_cflags $ctl_inc "$src/tests/fuzz/fuzz_ctl.c" "$src/runtime/ctrl_proto.c" \
	"$src/runtime/log.c" "$src/runtime/status.c" "$src/runtime/peers.c" \
	"$src/lcores/xport/xport_ipc.c" "$src/config/config.c" -lssl -lcrypto -linih $dpdk_libs &
b4=$!
# The tcp transport's data protocol, target and initiator, against guarded segments.
build fuzz_tcp "$src/tests/fuzz/fuzz_tcp.c" "$src/lcores/xport/tcp_data.c" -lssl -lcrypto &
b5=$!
rc=0
for b in $b1 $b2 $b3 $b4 $b5; do
	wait "$b" || rc=1
done
if [ $rc -ne 0 ]; then
	cat "$out"/*.build.log
	exit 1
fi
"$src/tests/fuzz/run-fuzz.sh" "$out/fuzz_ctrl" "$src/tests/fuzz/corpus/ctrl" "$secs" || rc=1
"$src/tests/fuzz/run-fuzz.sh" "$out/fuzz_ini" "$src/tests/fuzz/corpus/ini" "$secs" || rc=1
"$src/tests/fuzz/run-fuzz.sh" "$out/fuzz_bind" "$src/tests/fuzz/corpus/bind" "$secs" -timeout=5 || rc=1
"$src/tests/fuzz/run-fuzz.sh" "$out/fuzz_ctl" "$src/tests/fuzz/corpus/ctl" "$secs" || rc=1
"$src/tests/fuzz/run-fuzz.sh" "$out/fuzz_tcp" "$src/tests/fuzz/corpus/tcp" "$secs" || rc=1
exit $rc
