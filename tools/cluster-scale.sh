#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# [cluster] at scale: a private etcd on free ports, then kvlane-cluster-sim at each node count
# given (default 100 300 1000), a fresh etcd each time. Prints the sim's "key value" lines
# under a "== N nodes ==" header. docs/cluster.md has the numbers and the exact command.
#   tools/cluster-scale.sh BUILD_DIR [N...]
set -euo pipefail
build=${1:?usage: $0 BUILD_DIR [N...]}
shift
[ $# -gt 0 ] && counts=("$@") || counts=(100 300 1000)
command -v etcd >/dev/null || { echo "etcd is not installed (apt-get install etcd-server)"; exit 77; }
sim="$build/kvlane-cluster-sim"
[ -x "$sim" ] || { echo "$sim: not built (needs libcurl and jansson)"; exit 1; }
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
tmp=$(mktemp -d /tmp/kvl-cluster-scale.XXXXXX)
pid=""
cleanup() { [ -n "$pid" ] && kill "$pid" 2>/dev/null; wait 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT
for n in "${counts[@]}"; do
	c=$(free_port); p=$(free_port)
	rm -rf "$tmp/etcd"
	etcd --name s --data-dir "$tmp/etcd" --listen-client-urls "http://127.0.0.1:$c" \
		--advertise-client-urls "http://127.0.0.1:$c" --listen-peer-urls "http://127.0.0.1:$p" \
		--initial-advertise-peer-urls "http://127.0.0.1:$p" \
		--initial-cluster "s=http://127.0.0.1:$p" --logger zap --log-level error \
		>"$tmp/etcd.log" 2>&1 &
	pid=$!
	for _ in $(seq 100); do
		curl -sf "http://127.0.0.1:$c/health" >/dev/null 2>&1 && break
		sleep 0.1
	done
	echo "== $n nodes (etcd $(etcd --version | head -1 | awk '{print $3}'), pid $pid) =="
	"$sim" --etcd "http://127.0.0.1:$c" --nodes "$n" --threads 8 --ttl 10 --steady 15 \
		--expire 10 --etcd-pid "$pid"
	kill "$pid"; wait "$pid" 2>/dev/null || true; pid=""
done
