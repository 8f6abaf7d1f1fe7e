#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# kvlaned@.service as meson configured it, checked by systemd-analyze verify on an instance
# whose paths point at this build (the installed ones may not exist yet): the unit parses,
# its directives are known, its executables exist. Exit 77 without systemd-analyze.
#   check-unit.sh BUILD_DIR SRC_DIR
set -eu
build=$(cd "$1" && pwd)
src=$(cd "$2" && pwd)
command -v systemd-analyze > /dev/null || { echo "skipped: no systemd-analyze (Debian: systemd)"; exit 77; }
unit=$build/tools/dist/kvlaned@.service
[ -f "$unit" ] || { echo "check-unit: $unit was not generated"; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
bindir=$(sed -n 's|^ExecStart=\(.*\)/kvlaned .*|\1|p' "$unit")
etc=$(sed -n 's|^EnvironmentFile=-\(.*\)/kvlane/%i.env$|\1|p' "$unit")
[ -n "$bindir" ] && [ -n "$etc" ] || { echo "check-unit: cannot find bindir/sysconfdir in $unit"; exit 1; }
mkdir -p "$tmp/etc/kvlane"
cp "$src/config/default.ini" "$tmp/etc/kvlane/demo.ini"
sed -e "s|$bindir/|$build/|g" -e "s|$etc/kvlane|$tmp/etc/kvlane|g" "$unit" \
	> "$tmp/kvlaned@demo.service"
for want in 'LimitMEMLOCK=infinity' 'RuntimeDirectory=kvlane-%i' 'Restart=on-failure' \
	'ExecStartPre=.*/kvlane-doctor --quiet -c .*/kvlane/%i.ini'; do
	grep -q "^$want" "$tmp/kvlaned@demo.service" || { echo "check-unit: no line ^$want"; exit 1; }
done
out=$(SYSTEMD_LOG_LEVEL=notice systemd-analyze verify --man=no "$tmp/kvlaned@demo.service" 2>&1) || {
	echo "$out"; echo "check-unit: systemd-analyze verify failed"; exit 1; }
# verify reports unknown directives and missing executables as warnings on stderr
if printf '%s\n' "$out" | grep -E "kvlaned@demo.service" | grep -qvE "^$"; then
	echo "$out"; echo "check-unit: systemd-analyze verify warned about the unit"; exit 1
fi
echo "check-unit: $unit verified (systemd-analyze verify, paths in $build)"
# The ExecStartPre command as systemd would run it, on this host: --quiet exits 0 or 2.
rc=0
"$build/kvlane-doctor" --quiet -c "$tmp/etc/kvlane/demo.ini" -l 0-1 > "$tmp/doctor.txt" || rc=$?
cat "$tmp/doctor.txt"
case $rc in 0|2) ;; *) echo "check-unit: kvlane-doctor --quiet exited $rc (0 or 2 expected)"; exit 1 ;; esac
