#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# The man pages made from the --help texts (tools/mkman.py): groff reads each without a
# warning, and every long option the program's --help lists is in its page.
#   check-man.sh BUILD_DIR
set -eu
build=$(cd "$1" && pwd)
command -v groff > /dev/null || { echo "skipped: no groff (Debian: groff-base)"; exit 77; }
rc=0
for page in kvlaned.8 kvlane-perf.1 kvlane-doctor.1; do
	f=$build/tools/dist/$page
	[ -s "$f" ] || { echo "check-man: $f missing or empty"; rc=1; continue; }
	warn=$(groff -man -Tutf8 -ww -z "$f" 2>&1) || true
	[ -z "$warn" ] || { echo "check-man: $page: $warn"; rc=1; }
	text=$(groff -man -Tascii "$f" 2> /dev/null | sed 's/.\x08//g')
	n=0
	for opt in $("$build/${page%.*}" --help | grep -oE -- '--[a-z][a-z0-9-]+' | sort -u); do
		n=$((n + 1))
		printf '%s\n' "$text" | grep -q -- "$opt" || { echo "check-man: $page lacks $opt"; rc=1; }
	done
	echo "check-man: $page: $n long options of --help present, groff quiet"
done
exit $rc
