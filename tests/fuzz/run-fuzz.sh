#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# Run one libFuzzer binary for N seconds over a throw-away copy of its seed corpus.
#
#   tests/fuzz/run-fuzz.sh FUZZER CORPUS_DIR SECONDS [extra libFuzzer args...]
#
# The corpus is copied to a temp dir so that what the fuzzer adds never lands in the repo.
# Exits 0 when the run ended cleanly; 1 on a crash, leak, timeout or OOM, after printing
# the tail of the fuzzer's report and keeping the temp dir with the crashing input.
set -u

if [ $# -lt 3 ]; then
	echo "usage: $0 FUZZER CORPUS_DIR SECONDS [libFuzzer args...]" >&2
	exit 2
fi
fuzzer=$1
corpus=$2
secs=$3
shift 3

if [ ! -x "$fuzzer" ]; then
	echo "$0: $fuzzer: not an executable (build the fuzzers first)" >&2
	exit 2
fi
if [ ! -d "$corpus" ]; then
	echo "$0: $corpus: no such corpus directory" >&2
	exit 2
fi
case $secs in
'' | *[!0-9]*)
	echo "$0: SECONDS must be a whole number, not '$secs'" >&2
	exit 2
	;;
esac

work=$(mktemp -d "${TMPDIR:-/tmp}/kvl-fuzz.XXXXXX") || exit 2
mkdir "$work/corpus" "$work/artifacts"
cp -R "$corpus"/. "$work/corpus"/

log="$work/fuzz.log"
name=$(basename "$fuzzer")
echo "$name: ${secs}s over a copy of $corpus in $work"
"$fuzzer" -max_total_time="$secs" -rss_limit_mb=2048 -timeout=5 -print_final_stats=1 \
	-artifact_prefix="$work/artifacts/" "$@" "$work/corpus" >"$log" 2>&1
rc=$?

found=$(find "$work/artifacts" -type f | head -n 1)
if [ $rc -ne 0 ] || [ -n "$found" ]; then
	echo "$name: FAILED (exit $rc)" >&2
	tail -n 60 "$log" >&2
	if [ -n "$found" ]; then
		echo "--- input: $found ($(wc -c <"$found") bytes); reproduce with: $fuzzer $found" >&2
		od -A d -t x1z -v "$found" | head -n 32 >&2
	fi
	echo "$name: kept $work for the crashing input and the full log" >&2
	# Always 1: libFuzzer's own codes (77 for a crash) would read as "skipped" to meson.
	exit 1
fi

# libFuzzer's own summary: executions and speed, for the record.
grep -E '^(#[0-9]+[[:space:]]+DONE|stat::number_of_executed_units|stat::average_exec_per_sec|stat::new_units_added|stat::peak_rss_mb)' "$log"
echo "$name: OK"
rm -rf "$work"
exit 0
