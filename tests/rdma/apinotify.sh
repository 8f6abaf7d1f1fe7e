#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# Runs INSIDE the soft-RoCE VM (meson test `api_notify`, suite rdma): two processes on the
# public API (tests/rdma/api_notify.c), the server on $RXE_DEV1, the client on $RXE_DEV0.
# The client WRITEs N messages, each gathered from 4 scattered local ranges (one RDMA WRITE
# with 4 SGEs) and flagged KVL_XFER_NOTIFY (WRITE_WITH_IMM); the server must get N notices
# through kvl_poll_notices(), in order, each with its value and length, with the bytes already
# in its segment. The client READs each message back scattered and checks it, and checks
# kvl_post()'s refusals of malformed scatter lists.
#   apinotify.sh BUILD_DIR OUT_DIR [N (64)]
set -eu
. "${KVL_SRC:-$(cd "$(dirname "$0")/../.." && pwd)}/tests/rdma/lib.sh"
build=$1
out=$2
n=${3:-64}
kvl_rdma_setup "$out"
kvl_rdma_inis "$tmp" apin 1
eal="-l 0-1 --no-huge -m 400 --no-pci --log-level lib.eal:warning"
bin=$build/tests/rdma/api_notify
"$bin" $eal --file-prefix srv -- server "$tmp/b.ini" $n > "$out/server.out" 2> "$out/server.log" &
srv=$!
if ! kvl_rdma_wait_line "$out/server.out" 'api_notify: ready' $srv 60; then
	echo "api_notify: the server did not start:"; cat "$out/server.log"; exit 1
fi
rc=0
"$bin" $eal --file-prefix cli -- client "$tmp/a.ini" "$RXE_IP1:18515" $n \
	> "$out/client.out" 2> "$out/client.log" || rc=1
kvl_rdma_wait_line "$out/server.out" '"role":"server"' $srv 30 || true
kill -TERM $srv 2> /dev/null || true
wait $srv || rc=1
cat "$out/server.out" "$out/client.out"
[ $rc = 0 ] || { echo "api_notify: FAILED"; cat "$out/server.log" "$out/client.log"; }
exit $rc
