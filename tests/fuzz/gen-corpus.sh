#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# Regenerate the seed corpora of fuzz_ctl and fuzz_tcp from the real encoders (gen_corpus.c).
#   tests/fuzz/gen-corpus.sh [SRC_ROOT]
# Writes tests/fuzz/corpus/{ctl,tcp}/*.bin; commit what it changes.
set -eu
src=${1:-$(dirname "$0")/../..}
cc=${CC:-cc}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/kvl-gen.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
$cc -std=gnu11 -D_GNU_SOURCE -Wall -Wextra -Werror -I"$src/runtime" -I"$src/config" -I"$src/lcores/xport" \
	-I"$src/include" "$src/tests/fuzz/gen_corpus.c" "$src/runtime/ctrl_proto.c" \
	"$src/lcores/xport/tcp_data.c" -lssl -lcrypto -o "$tmp/gen_corpus"
for t in ctl tcp; do
	rm -rf "$src/tests/fuzz/corpus/$t"
	mkdir -p "$src/tests/fuzz/corpus/$t"
done
"$tmp/gen_corpus" "$src/tests/fuzz/corpus"
ls -l "$src/tests/fuzz/corpus/ctl" "$src/tests/fuzz/corpus/tcp"
