#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""gpu suite: kvlaned's VRAM probe on a real GPU, read through telemetry; exit 77 without one.

usage: test_gpu.py SCENARIO KVLANED VRAM_HOG
"""
import os
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.environ.get("KVL_SRC", "."), "tools"))
from kvlane_telemetry import TelemetryClient, socket_path  # noqa: E402

MIB = 1 << 20
RESERVE_MB = 1024


def fail(msg):
    print(f"FAIL: {msg}")
    sys.exit(1)


def gpu_or_skip(hog):
    r = subprocess.run([hog, "probe"], capture_output=True, text=True, timeout=60)
    print(r.stdout.strip())
    if r.returncode == 77:
        sys.exit(77)  # the reason was printed by the helper
    if r.returncode != 0:
        fail(f"vram_hog probe failed ({r.returncode}): {r.stderr}")
    return dict(line.split("=", 1) for line in r.stdout.splitlines() if "=" in line)


def ini(tmp, gpu_lines):
    path = os.path.join(tmp, "gpu.ini")
    with open(path, "w", encoding="utf-8") as f:
        f.write("[runtime]\nname = gputest\nidle_policy = yield\n"
                "[nic.lo]\ndevice = lo\ntransport = tcp\n"
                "[sched]\nresize_interval_ms = 5\n"
                "[gpu]\nenable = true\n" + gpu_lines)
    return path


class Daemon:
    def __init__(self, kvlaned, tmp, conf):
        self.prefix = f"kvl-gpu-{os.getpid()}"
        self.rundir = os.path.join(tmp, "run")
        os.makedirs(self.rundir, exist_ok=True)
        env = dict(os.environ, RUNTIME_DIRECTORY=self.rundir)
        self.p = subprocess.Popen(
            [kvlaned, "-l", "0-1", "--no-huge", "-m", "256", "--no-pci",
             "--file-prefix", self.prefix, "--", "-c", conf],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
        self.tel = TelemetryClient()
        try:
            self.tel.connect(socket_path(self.prefix, self.rundir), wait=30)
        except Exception as e:  # noqa: BLE001 - show the daemon's own words
            self.stop()
            fail(f"no telemetry: {e}\n{self.output}")

    def gpu(self):
        return self.tel.command("/kvlane/gpu")

    def stable_gpu(self, timeout=10):
        """Two equal consecutive samples: free and budget were published together."""
        deadline = time.monotonic() + timeout
        prev = self.gpu()
        while time.monotonic() < deadline:
            time.sleep(0.05)
            cur = self.gpu()
            if cur["free_bytes"] == prev["free_bytes"] and \
                    cur["budget_bytes"] == prev["budget_bytes"]:
                return cur
            prev = cur
        fail(f"/kvlane/gpu never settled: {prev}")

    def stop(self):
        self.tel.close()
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGTERM)
        try:
            out, _ = self.p.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            self.p.kill()
            out, _ = self.p.communicate()
        self.output = out
        return self.p.returncode


def wait_until(pred, timeout, what):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(0.02)
    fail(f"timed out waiting for {what}")


def check_budget(g):
    want = max(g["free_bytes"] - g["reserve_bytes"], 0)
    if g["budget_bytes"] != want:
        fail(f"budget {g['budget_bytes']} != free {g['free_bytes']} - reserve "
             f"{g['reserve_bytes']}")


def scenario_probe(kvlaned, hog, tmp):
    info = gpu_or_skip(hog)
    d = Daemon(kvlaned, tmp, ini(tmp, f"device_id = 0\nvram_reserve_mb = {RESERVE_MB}\n"))
    try:
        g = d.stable_gpu()
        print(f"/kvlane/gpu: {g}")
        if g["enabled"] != 1 or g["budget_source"] != "vram":
            fail(f"gpu not enabled in telemetry: {g}")
        if g["name"] != info["name"]:
            fail(f"name {g['name']!r} != CUDA's {info['name']!r}")
        if g["device_count"] != int(info["devices"]):
            fail(f"device_count {g['device_count']} != {info['devices']}")
        if not 0 < g["free_bytes"] <= g["total_bytes"]:
            fail(f"free {g['free_bytes']} not in (0, total {g['total_bytes']}]")
        if g["reserve_bytes"] != RESERVE_MB * MIB:
            fail(f"reserve_bytes {g['reserve_bytes']} != {RESERVE_MB} MiB")
        check_budget(g)
        s0 = g["samples"]
        g2 = wait_until(lambda: (x := d.gpu())["samples"] >= s0 + 20 and x, 5,
                        "20 more VRAM samples at 5 ms")
        if g2["sample_errors"] != 0:
            fail(f"sample errors: {g2}")
    finally:
        rc = d.stop()
    if rc != 0:
        fail(f"kvlaned exit {rc}\n{d.output}")
    if "gpu 0:" not in d.output:
        fail(f"start-up lines do not show the GPU:\n{d.output}")
    print(d.output)


def scenario_follows(kvlaned, hog, tmp):
    """The budget follows memory another process takes and gives back."""
    gpu_or_skip(hog)
    d = Daemon(kvlaned, tmp, ini(tmp, f"vram_reserve_mb = {RESERVE_MB}\n"))
    hold_mb = 8192
    hogp = None
    try:
        before = d.stable_gpu()
        hogp = subprocess.Popen([hog, "hold", "0", str(hold_mb)], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, text=True)
        line = hogp.stdout.readline()
        if not line.startswith("held="):
            fail(f"vram_hog did not hold memory: {line!r}")
        # Another process's context costs some VRAM too: the drop is at least what it holds.
        during = wait_until(
            lambda: (x := d.gpu())["free_bytes"] <= before["free_bytes"] - hold_mb * MIB and x,
            5, f"free VRAM to drop by {hold_mb} MiB")
        during = d.stable_gpu()
        check_budget(during)
        hogp.stdin.close()
        hogp.wait(timeout=30)
        hogp = None
        after = wait_until(
            lambda: (x := d.gpu())["free_bytes"] >= before["free_bytes"] - 64 * MIB and x,
            10, "free VRAM to come back")
        after = d.stable_gpu()
        check_budget(after)
        print(f"{'':10} {'free MiB':>10} {'budget MiB':>11}")
        for name, g in (("before", before), ("held", during), ("released", after)):
            print(f"{name:10} {g['free_bytes'] // MIB:>10} {g['budget_bytes'] // MIB:>11}")
    finally:
        if hogp is not None:
            hogp.kill()
        rc = d.stop()
    if rc != 0:
        fail(f"kvlaned exit {rc}\n{d.output}")


def scenario_bad_device(kvlaned, hog, tmp):
    info = gpu_or_skip(hog)
    n = int(info["devices"])
    conf = ini(tmp, f"device_id = {n}\n")
    rundir = os.path.join(tmp, "run")
    os.makedirs(rundir)
    r = subprocess.run([kvlaned, "-l", "0-1", "--no-huge", "--no-pci", "--file-prefix",
                        f"kvl-gpubad-{os.getpid()}", "--", "-c", conf],
                       capture_output=True, text=True, timeout=60,
                       env=dict(os.environ, RUNTIME_DIRECTORY=rundir))
    want = f"gpu.device_id = {n} but this host has {n} CUDA device"
    if r.returncode != 4 or want not in r.stderr:
        fail(f"expected exit 4 and {want!r}; got {r.returncode}\n{r.stderr}")
    if os.listdir(rundir):
        fail(f"EAL was started although the GPU check failed: {os.listdir(rundir)}")
    print(r.stderr.strip())


def main():
    if len(sys.argv) != 4:
        print(__doc__)
        return 2
    scenario, kvlaned, hog = sys.argv[1:]
    fn = globals().get(f"scenario_{scenario}")
    if fn is None:
        print(f"unknown scenario {scenario}")
        return 2
    with tempfile.TemporaryDirectory(prefix="kvl-gpu-") as tmp:
        fn(kvlaned, hog, tmp)
    print(f"PASS: {scenario}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
