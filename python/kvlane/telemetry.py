#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""Client for DPDK's v2 telemetry socket (SOCK_SEQPACKET): send /cmd[,params], get JSON.

    python3 -m kvlane.telemetry -f demo /kvlane/info /kvlane/nic,lo
    python3 -m kvlane.telemetry -f demo --list        # the commands the application offers
    python3 -m kvlane.telemetry -f demo -i 1 -n 5 /kvlane/sched   # every second, 5 times

Pure Python (no _kvlane): tools/kvlane_telemetry.py loads this file under its old name."""
import argparse
import errno
import json
import os
import socket
import stat
import sys
import time

SOCKET_NAME = "dpdk_telemetry.v2"
DEFAULT_PREFIX = "rte"
DEFAULT_TIMEOUT = 5.0


class TelemetryError(Exception):
    """The socket is missing, refused us, or replied with something that is not JSON."""


def default_runtime_dir():
    """DPDK's runtime directory root, as EAL and dpdk-telemetry.py choose it."""
    run_dir = os.environ.get("RUNTIME_DIRECTORY")
    if not run_dir:
        run_dir = "/var/run" if os.getuid() == 0 else os.environ.get("XDG_RUNTIME_DIR", "/tmp")
    return run_dir


def socket_path(prefix=DEFAULT_PREFIX, runtime_dir=None):
    """$RUNTIME_DIRECTORY/dpdk/<prefix>/dpdk_telemetry.v2."""
    return os.path.join(runtime_dir or default_runtime_dir(), "dpdk", prefix, SOCKET_NAME)


def is_socket(path):
    try:
        return stat.S_ISSOCK(os.stat(path).st_mode)
    except OSError:
        return False


def wait_for_socket(path, timeout, alive=None, interval=0.02):
    """Poll until @path is a socket; False after @timeout s, or as soon as alive() is false."""
    deadline = time.monotonic() + timeout
    while True:
        if is_socket(path):
            return True
        if alive is not None and not alive():
            return False
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval)


class TelemetryClient:
    """One connection to one telemetry socket. Also a context manager."""

    wait_for_socket = staticmethod(wait_for_socket)

    def __init__(self, timeout=DEFAULT_TIMEOUT):
        self.timeout = timeout
        self.sock = None
        self.path = None
        self.greeting = None
        self.max_output_len = 16384

    def connect(self, path=None, prefix=None, runtime_dir=None, wait=0.0):
        """Connect to @path, or to the socket of @prefix under @runtime_dir. With @wait > 0,
        wait that long for the socket to appear and accept. Returns the greeting dict."""
        if path is None:
            path = socket_path(prefix or DEFAULT_PREFIX, runtime_dir)
        self.close()
        deadline = time.monotonic() + max(wait, 0.0)
        while True:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            sock.settimeout(self.timeout)
            try:
                sock.connect(path)
                break
            except OSError as e:
                sock.close()
                # Bound but not yet listening, or not created yet: retry until the deadline.
                retry = e.errno in (errno.ENOENT, errno.ECONNREFUSED, errno.EAGAIN)
                if not retry or time.monotonic() >= deadline:
                    raise TelemetryError(
                        f"cannot connect to telemetry socket {path}: {e.strerror}") from e
                time.sleep(0.02)
        self.sock = sock
        self.path = path
        try:
            self.greeting = self._recv()
        except TelemetryError:
            self.close()
            raise
        if not isinstance(self.greeting, dict):
            self.close()
            raise TelemetryError(f"{path}: unexpected greeting {self.greeting!r}")
        self.max_output_len = int(self.greeting.get("max_output_len", self.max_output_len))
        return self.greeting

    def _recv(self):
        try:
            # SOCK_SEQPACKET: one reply is one message; a short buffer would cut it.
            data = self.sock.recv(max(self.max_output_len, 16384) * 2)
        except socket.timeout as e:
            raise TelemetryError(f"{self.path}: no reply within {self.timeout} s") from e
        except OSError as e:
            raise TelemetryError(f"{self.path}: {e.strerror}") from e
        if not data:
            raise TelemetryError(f"{self.path}: connection closed by the application")
        try:
            return json.loads(data.decode("utf-8", errors="replace"))
        except json.JSONDecodeError as e:
            raise TelemetryError(f"{self.path}: reply is not JSON: {data[:200]!r}") from e

    def raw_command(self, cmd):
        """Send @cmd ("/cmd" or "/cmd,params") and return the whole reply, {"/cmd": value}."""
        if self.sock is None:
            raise TelemetryError("not connected")
        try:
            self.sock.send(cmd.encode())
        except OSError as e:
            raise TelemetryError(f"{self.path}: cannot send {cmd!r}: {e.strerror}") from e
        return self._recv()

    def command(self, cmd):
        """The value of the reply to @cmd; None when the command failed (a null reply)."""
        reply = self.raw_command(cmd)
        if not isinstance(reply, dict) or len(reply) != 1:
            raise TelemetryError(f"{self.path}: unexpected reply to {cmd!r}: {reply!r}")
        return next(iter(reply.values()))

    def close(self):
        if self.sock is not None:
            self.sock.close()
            self.sock = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


def main(argv=None):
    ap = argparse.ArgumentParser(
        description="Send commands to a DPDK telemetry socket and print one JSON reply per "
        "command. Exit 1 when the socket is missing or a reply is null.")
    ap.add_argument("-f", "--file-prefix", default=DEFAULT_PREFIX,
                    help="EAL --file-prefix of the application (default %(default)s)")
    ap.add_argument("-d", "--runtime-dir", default=None,
                    help="runtime directory root (default: $RUNTIME_DIRECTORY, as EAL)")
    ap.add_argument("-s", "--socket", default=None, help="socket path (overrides -f and -d)")
    ap.add_argument("-w", "--wait", type=float, default=0.0,
                    help="seconds to wait for the socket to appear (default 0)")
    ap.add_argument("-t", "--timeout", type=float, default=DEFAULT_TIMEOUT,
                    help="seconds to wait for each reply (default %(default)s)")
    ap.add_argument("-p", "--pretty", action="store_true", help="indent the JSON")
    ap.add_argument("-l", "--list", action="store_true",
                    help="print the commands the application offers (DPDK's /) and exit")
    ap.add_argument("-i", "--interval", type=float, default=0.0,
                    help="repeat the commands every this many seconds (default: once)")
    ap.add_argument("-n", "--count", type=int, default=0,
                    help="with --interval: this many rounds (default: until interrupted)")
    ap.add_argument("cmds", nargs="*", metavar="CMD",
                    help="e.g. /kvlane/info or /kvlane/nic,lo (default: one per stdin line)")
    args = ap.parse_args(argv)

    path = args.socket or socket_path(args.file_prefix, args.runtime_dir)
    prog = os.path.basename(sys.argv[0])
    if not wait_for_socket(path, args.wait):
        print(f"{prog}: no telemetry socket at {path} (is the application running with "
              f"--file-prefix {args.file_prefix} and telemetry on, and RUNTIME_DIRECTORY the "
              f"same as its own?)", file=sys.stderr)
        return 1
    if args.list:
        cmds = ["/"]
    else:
        cmds = args.cmds or [line.strip() for line in sys.stdin if line.strip()]
    rc = 0
    rounds = 1 if args.interval <= 0 or args.list else args.count
    try:
        with TelemetryClient(timeout=args.timeout) as c:
            c.connect(path, wait=args.wait)
            done = 0
            while True:
                rc |= _round(c, cmds, args, prog)
                done += 1
                if rounds and done >= rounds:
                    break
                time.sleep(args.interval)
    except TelemetryError as e:
        print(f"{prog}: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return rc
    return rc


def _round(c, cmds, args, prog):
    """Send each command once, print each reply; 1 when one was refused or null."""
    rc = 0
    for cmd in cmds:
        if not cmd.startswith("/"):
            print(f"{prog}: {cmd!r}: commands start with '/'", file=sys.stderr)
            rc = 1
            continue
        reply = c.raw_command(cmd)
        print(json.dumps(reply, indent=2 if args.pretty else None), flush=True)
        if not isinstance(reply, dict) or any(v is None for v in reply.values()):
            print(f"{prog}: {cmd}: null reply (unknown command or bad parameter)",
                  file=sys.stderr)
            rc = 1
    return rc


if __name__ == "__main__":
    sys.exit(main())
