#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""`make demo`: run kvlaned on config/default.ini, read it through telemetry, stop it.

Until the data path exists this is the whole main job: the runtime starts, pairs its NIC with
an lcore, and what it reports through the telemetry socket is printed as a table.
"""
import os
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from kvlane_telemetry import TelemetryClient, TelemetryError, socket_path  # noqa: E402


def main():
    build = sys.argv[1] if len(sys.argv) > 1 else "build"
    conf = sys.argv[2] if len(sys.argv) > 2 else "config/default.ini"
    kvlaned = os.path.join(build, "kvlaned")
    prefix = f"kvlane-demo-{os.getpid()}"
    rundir = tempfile.mkdtemp(prefix="kvlane-demo-")
    cmd = [kvlaned, "-l", "0-1", "--no-huge", "-m", "256", "--no-pci",
           "--file-prefix", prefix, "--log-level", "lib.eal:warning", "--", "-c", conf]
    print("$ RUNTIME_DIRECTORY=" + rundir + " " + " ".join(cmd), flush=True)
    p = subprocess.Popen(cmd, env=dict(os.environ, RUNTIME_DIRECTORY=rundir))
    rc = 1
    try:
        with TelemetryClient() as tel:
            tel.connect(socket_path(prefix, rundir), wait=20)
            time.sleep(0.5)  # let the loops run a little, so the counters say something
            info = tel.command("/kvlane/info")
            lc = tel.command("/kvlane/lcores")
            nics = tel.command("/kvlane/nics")
            gpu = tel.command("/kvlane/gpu")
        print(f"\nthrough telemetry ({socket_path(prefix, rundir)}):")
        print(f"  /kvlane/info: {info['name']} {info['version']}, pid {info['pid']}, "
              f"up {info['uptime_ms']} ms, config {info['config']}")
        print(f"  /kvlane/gpu: budget {gpu['budget_bytes'] >> 20} MiB "
              f"(from {gpu['budget_source']})")
        print(f"  /kvlane/lcores:\n    {'lcore':>5} {'cpu':>3} {'socket':>6} {'role':<6} "
              f"{'nic':<8} {'iterations':>11} {'busy %':>6}")
        for i in range(len(lc["lcore"])):
            print(f"    {lc['lcore'][i]:>5} {lc['cpu'][i]:>3} {lc['socket'][i]:>6} "
                  f"{lc['role'][i]:<6} {lc['nic'][i] or '-':<8} "
                  f"{lc['loop_iterations'][i]:>11} {lc['busy_pct'][i]:>6}")
        print(f"  /kvlane/nics:\n    {'nic':<8} {'device':<8} {'kind':<7} {'transport':<9} "
              f"{'numa':>4} {'lcore':>5}")
        for i in range(len(nics["nic"])):
            print(f"    {nics['nic'][i]:<8} {nics['device'][i]:<8} {nics['kind'][i]:<7} "
                  f"{nics['transport'][i]:<9} {nics['numa_node'][i]:>4} "
                  f"{nics['lcore'][i]:>5}\n", flush=True)
        rc = 0
    except (TelemetryError, KeyError, TypeError) as e:
        print(f"demo: telemetry failed: {e}", file=sys.stderr)
    finally:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
        try:
            prc = p.wait(timeout=20)
        except subprocess.TimeoutExpired:
            p.kill()
            prc = p.wait()
        try:
            os.rmdir(rundir)
        except OSError:
            pass
    if prc != 0:
        print(f"demo: kvlaned exited with status {prc}", file=sys.stderr)
        return prc if prc > 0 else 1
    print("demo: kvlaned stopped cleanly" if rc == 0 else "demo: failed")
    return rc


if __name__ == "__main__":
    sys.exit(main())
