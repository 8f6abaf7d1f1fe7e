#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""`make demo`: a prefill kvlaned serves an 8K-token KV cache; a decode side pulls it, verified.

Two processes on this host, as in prefill/decode disaggregation:
  prefill  kvlaned on config/default.ini with a 1 GiB "kv" segment (Llama-3-8B shape: 32 layers,
           K and V, 512 blocks of 16 tokens = 8192 tokens), filled with a checkable pattern;
  decode   kvlane-kvdemo: connects (mutual HMAC handshake), READs each request's KV into its own
           segment (32 KiB blocks merged into 2 MiB READs), checks every byte.
Then the prefill's own counters are read through its telemetry socket, and it is stopped.
Exit 0 only when every step worked and the numbers of both sides agree.

Usage: demo.py [BUILD [CONFIG]]   (default: build config/default.ini)
"""
import configparser
import os
import queue
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from kvlane_telemetry import TelemetryClient, TelemetryError, socket_path  # noqa: E402

PREFILL_ADDR = "127.0.0.1:18515"  # when the INI has no [control] listen
BLOCKS = 512                      # 512 blocks x 16 tokens = an 8K-token request
REQUESTS = 3
GIB = 1 << 30
REQUEST_BYTES = 32 * 2 * BLOCKS * 32768  # layers x planes (K, V) x blocks x block_bytes
EAL_MB = "1536"                   # 1 GiB of KV plus the INI's own pools, on each side
READY_TIMEOUT_S = 30
DECODE_TIMEOUT_S = 40
STOP_TIMEOUT_S = 15
# Start-up lines of DPDK's telemetry library that say nothing about kvlane.
NOISE = re.compile(r"^TELEMETRY: No legacy callbacks")


class Proc:
    """A child whose stdout and stderr are read line by line into one queue (never blocks)."""

    def __init__(self, argv, env, echo=None):
        self.argv = argv
        self.lines = []  # (stream, line)
        self.q = queue.Queue()
        self.echo = echo
        self.p = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                  errors="replace", start_new_session=True)
        self.threads = [threading.Thread(target=self._read, args=(f, name), daemon=True)
                        for f, name in ((self.p.stdout, "out"), (self.p.stderr, "err"))]
        for t in self.threads:
            t.start()

    def _read(self, f, name):
        for line in f:
            self.q.put((name, line.rstrip("\n")))
        self.q.put((name, None))

    def pump(self, timeout):
        """Take one line (echoing it when asked); None on timeout, (name, None) at EOF."""
        try:
            item = self.q.get(timeout=timeout)
        except queue.Empty:
            return None
        if item[1] is not None:
            self.lines.append(item)
            if self.echo:
                self.echo(*item)
        return item

    def drain(self, timeout, also=None):
        """Everything up to EOF on both streams, at most @timeout s; meanwhile the lines
        @also has (another Proc) are taken too, so that both come in order."""
        deadline = time.monotonic() + timeout
        eofs = 0
        while eofs < 2 and time.monotonic() < deadline:
            while also is not None and also.pump(0) is not None:
                pass
            item = self.pump(min(0.05, max(deadline - time.monotonic(), 0.01)))
            if item is not None and item[1] is None:
                eofs += 1
        while also is not None and also.pump(0.05) is not None:
            pass  # what the other side logged about this one's exit

    def text(self, stream=None):
        return "\n".join(ln for s, ln in self.lines if stream is None or s == stream)

    def stop(self, sig=signal.SIGTERM, timeout=STOP_TIMEOUT_S):
        """Signal the child if it still runs; wait; kill it if it does not go. Its status."""
        if self.p.poll() is None:
            try:
                self.p.send_signal(sig)
            except ProcessLookupError:
                pass
        try:
            self.p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.p.wait()
        self.drain(2)
        return self.p.returncode


def say(msg=""):
    print(msg, flush=True)


def dump(title, proc):
    """A child's whole output, for a failure."""
    say(f"--- {title}: {shlex.join(proc.argv)} (status {proc.p.poll()}) ---")
    for s, ln in proc.lines:
        say(f"  {'!' if s == 'err' else '|'} {ln}")


FAILURES = []


def fail(msg):
    """Note why the demo failed; said last, after the children's output."""
    FAILURES.append(msg)
    return 1


def ini_control(conf):
    """[control] listen and secret_file (made absolute, as kvlaned does) of @conf."""
    cp = configparser.ConfigParser(strict=False, interpolation=None,
                                   inline_comment_prefixes=(";", "#"))
    cp.read(conf)
    listen = cp.get("control", "listen", fallback=PREFILL_ADDR)
    secret = cp.get("control", "secret_file", fallback="")
    if secret and not os.path.isabs(secret):
        secret = os.path.join(os.path.dirname(os.path.abspath(conf)), secret)
    return listen, secret


def run_demo():
    build = sys.argv[1] if len(sys.argv) > 1 else "build"
    conf = sys.argv[2] if len(sys.argv) > 2 else "config/default.ini"
    kvlaned = os.path.join(build, "kvlaned")
    kvdemo = os.path.join(build, "kvlane-kvdemo")
    for exe in (kvlaned, kvdemo):
        if not os.access(exe, os.X_OK):
            return fail(f"{exe} not found: build first (make build)")
    t_start = time.monotonic()
    tmp = tempfile.mkdtemp(prefix="kvlane-demo-")
    rundir = {side: os.path.join(tmp, side) for side in ("prefill", "decode")}
    for d in rundir.values():
        os.mkdir(d, 0o700)
    prefix = {side: f"kvlane-demo-{side}-{os.getpid()}" for side in rundir}
    addr, secret = ini_control(conf)
    common = ["-c", conf]
    # A checkout cannot keep a file's mode, so config/demo.secret reads as 0644 and both
    # sides would warn about it: they use a private 0600 copy of the same secret instead.
    if os.path.isfile(secret):
        copy = os.path.join(tmp, os.path.basename(secret))
        shutil.copyfile(secret, copy)
        os.chmod(copy, 0o600)
        common += ["--set", f"control.secret_file={copy}"]
    eal = ["-l", "0-1", "--no-huge", "-m", EAL_MB, "--no-pci", "--log-level", "lib.eal:warning"]
    prefill_argv = [kvlaned, *eal, "--file-prefix", prefix["prefill"], "--", *common,
                    "--set", f"segment.kv.blocks={BLOCKS}"]
    decode_argv = [kvdemo, *eal, "--file-prefix", prefix["decode"], "--", *common,
                   "--set", "control.listen=127.0.0.1:0", "--set", "runtime.name=decode",
                   "--requests", str(REQUESTS), addr]

    say("kvlane demo: prefill/decode KV-cache transfer between two processes on this host")
    say("(data over the TCP transport on loopback: no RDMA NIC or GPU needed)\n")
    say(f"[1/4] prefill: kvlaned with a {REQUEST_BYTES // GIB} GiB KV segment = one "
        f"{BLOCKS * 16}-token Llama-3-8B request")
    say(f"      (32 layers x K,V x {BLOCKS} blocks of 16 tokens x 32 KiB), filled with a "
        f"pattern the decode side can check")
    say(f"  $ RUNTIME_DIRECTORY={rundir['prefill']} {shlex.join(prefill_argv)}")

    def show_prefill(stream, line):
        # Its start-up table is long: show what matters here, keep the rest for failures.
        if stream == "err" and not NOISE.search(line):
            say(f"    [prefill log] {line}")
        elif re.match(r"^\s+(segment \d|control:)|^kvlaned: (ready|stopped)", line):
            say(f"    prefill| {line.strip()}")

    prefill = Proc(prefill_argv, dict(os.environ, RUNTIME_DIRECTORY=rundir["prefill"]),
                   echo=show_prefill)
    decode = None
    rc = 1
    try:
        t0 = time.monotonic()
        ready = False
        while not ready and time.monotonic() - t0 < READY_TIMEOUT_S:
            item = prefill.pump(0.2)
            if item is None:
                if prefill.p.poll() is not None and all(not t.is_alive()
                                                        for t in prefill.threads):
                    break
                continue
            ready = item[1] == "kvlaned: ready"
        if not ready:
            exited = prefill.p.poll()
            prefill.stop()
            why = (f"exited with status {exited} before it was ready" if exited is not None
                   else f"was not ready within {READY_TIMEOUT_S} s")
            if "Address already in use" in prefill.text():
                why += f": {addr} is taken (another demo or kvlaned running?)"
            return fail(f"the prefill kvlaned {why}")
        say(f"  ready after {time.monotonic() - t0:.1f} s\n")

        say(f"[2/4] decode: kvlane-kvdemo connects to {addr}, authenticates and pulls "
            f"{REQUESTS} requests' KV")
        say(f"  $ RUNTIME_DIRECTORY={rundir['decode']} {shlex.join(decode_argv)}")

        def show_decode(stream, line):
            if not NOISE.search(line):
                say(f"    {'[decode log] ' if stream == 'err' else ''}{line}")

        t0 = time.monotonic()
        decode = Proc(decode_argv, dict(os.environ, RUNTIME_DIRECTORY=rundir["decode"]),
                      echo=show_decode)
        # Both sides' lines in the order they come.
        decode.drain(DECODE_TIMEOUT_S, also=prefill)
        try:
            drc = decode.p.wait(timeout=max(1.0, DECODE_TIMEOUT_S - (time.monotonic() - t0)))
        except subprocess.TimeoutExpired:
            drc = decode.stop(signal.SIGKILL)
            return fail(f"kvlane-kvdemo did not finish within {DECODE_TIMEOUT_S} s")
        report = decode.text("out")
        if drc != 0:
            return fail(f"kvlane-kvdemo exited with status {drc}")
        if not re.search(r"^verified: every byte", report, re.M):
            return fail("kvlane-kvdemo did not report every byte verified")
        say(f"  decode side done in {time.monotonic() - t0:.1f} s (start-up, connect, "
            f"{REQUESTS} requests, stop)\n")

        say("[3/4] the prefill's side of it, read through its DPDK telemetry socket")
        tel_path = socket_path(prefix["prefill"], rundir["prefill"])
        with TelemetryClient() as tel:
            tel.connect(tel_path, wait=5)
            stats = tel.command("/kvlane/stats")
            peers = tel.command("/kvlane/peers")
        served = stats["tcp/served_bytes"]
        refused = sum(v for k, v in stats.items() if k.startswith("tcp/refused/"))
        say(f"  /kvlane/stats  served {stats['tcp/served_read']} READs, {served} bytes "
            f"({served / GIB:.2f} GiB), {refused} refused, "
            f"{stats['control/auth_failures']} failed handshakes")
        for i in range(len(peers.get("peer", []))):
            state, why = peers["state"][i], peers["fail_reason"][i]
            if state == "dead" and why:
                state += f" now that it has left (\"{why}\")"
            say(f"  /kvlane/peers  \"{peers['name'][i]}\" from {peers['addr'][i]}: served "
                f"{peers['served_bytes'][i]} bytes; state {state}")
        want = REQUESTS * REQUEST_BYTES
        if served != want:
            return fail(f"the prefill served {served} bytes, the decode side asked for "
                        f"{REQUESTS} x {REQUEST_BYTES} = {want}")
        say(f"  = {REQUESTS} requests x {REQUEST_BYTES} bytes: both sides agree\n")

        say("[4/4] stopping the prefill (SIGTERM)")
        prc = prefill.stop()
        if prc != 0:
            return fail(f"the prefill kvlaned exited with status {prc}")
        rc = 0
    except (TelemetryError, KeyError, TypeError, IndexError) as e:
        rc = fail(f"telemetry: {e}")
    finally:
        if decode is not None and decode.p.poll() is None:
            decode.stop(signal.SIGKILL)
        if prefill.p.poll() is None:
            prefill.stop()
        if rc != 0:
            dump("prefill, whole output", prefill)  # the decode side's was shown as it came
        shutil.rmtree(tmp, ignore_errors=True)
    if rc != 0:
        return rc
    say(f"\ndemo: OK: {REQUESTS} x {REQUEST_BYTES // GIB} GiB of KV moved prefill -> decode and "
        f"every byte verified; {time.monotonic() - t_start:.1f} s in all")
    return 0


def main():
    rc = run_demo()
    for msg in FAILURES:
        print(f"demo: FAILED: {msg}", file=sys.stderr, flush=True)
    return rc


if __name__ == "__main__":
    sys.exit(main())
