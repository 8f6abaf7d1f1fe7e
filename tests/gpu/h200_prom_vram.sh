#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# On the GPU machine (carry built with: tools/gpu-carry.sh BUILD .carry-mid kvlaned tests/kvl_vram_hog):
# kvlaned with [gpu] enable and Prometheus /metrics, the VRAM gauges scraped before, while and
# after kvl_vram_hog holds 20 GiB, beside nvidia-smi. Run from the tree: sh tests/gpu/h200_prom_vram.sh
R=$PWD; C=${CARRY:-$R/.carry-mid}; export LD_LIBRARY_PATH=$C/lib RUNTIME_DIRECTORY=/tmp/promrun
mkdir -p $RUNTIME_DIRECTORY; ulimit -l unlimited
cat > /tmp/prom.ini <<INI
[runtime]
name = prom-gpu
[nic.lo]
device = lo
transport = tcp
[gpu]
enable = true
vram_reserve_mb = 1024
[sched]
resize_interval_ms = 5
[telemetry]
prometheus_listen = 127.0.0.1:19464
INI
$C/bin/kvlaned -l 0-1 --no-huge --no-pci -m 512 --file-prefix prom -- -c /tmp/prom.ini > /tmp/kvlaned.log 2>&1 &
K=$!
for i in $(seq 1 100); do grep -q "kvlaned: ready" /tmp/kvlaned.log && break; sleep 0.1; done
grep -E "prometheus|ready|gpu 0" /tmp/kvlaned.log
scrape() { python3 -c "import urllib.request; print(urllib.request.urlopen('http://127.0.0.1:19464/metrics', timeout=5).read().decode())" > /tmp/m.txt; echo "-- $1: nvidia-smi used $(nvidia-smi --query-gpu=memory.used,memory.free --format=csv,noheader)"; grep -E "^kvlane_(gpu_|staging_budget)" /tmp/m.txt; }
scrape before
sleep 5 | $C/bin/kvl_vram_hog hold 0 20480 > /tmp/hog.log 2>&1 &
sleep 2; scrape "hog holds 20 GiB"
sleep 4; scrape after
python3 - <<PY
import re
t = open('/tmp/m.txt').read()
n = [l for l in t.splitlines() if l and not l.startswith('#')]
print(len(n), "samples in the last scrape;", len(set(l.split('{')[0].split(' ')[0] for l in n)), "metric names")
PY
kill -TERM $K; wait $K; echo "kvlaned rc=$?"; cat /tmp/hog.log | tail -3
