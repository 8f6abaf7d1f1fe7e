#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""EAL inside a library (issue 17): kvl_start with no EAL arguments takes them from the INI's
[eal] section, as EAL's own /eal/params shows through telemetry; a second kvl_start in the
process, running or stopped, is refused with EALREADY and a message.

usage: test_embed.py EMBED_START
"""
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from kvl_harness import kt  # noqa: E402

LCORES = "0@(0-1),1@(0-1)"


def fail(msg):
    sys.exit("FAIL: " + msg)


def main():
    exe = sys.argv[1]
    with tempfile.TemporaryDirectory(prefix="kvl-embed-") as tmp:
        prefix = "kvl_embed_%d" % os.getpid()
        ini = os.path.join(tmp, "embed.ini")
        with open(ini, "w") as f:
            f.write("[runtime]\nname = embed\nidle_policy = yield\n"
                    "[nic.lo]\ndevice = lo\ntransport = tcp\n"
                    "[eal]\nlcores = %s\nmemory_mb = 128\nfile_prefix = %s\nno_huge = true\n"
                    "no_pci = true\nextra_args = --log-level=lib.eal:notice  --no-shconf\n"
                    % (LCORES, prefix))
        env = dict(os.environ, RUNTIME_DIRECTORY=tmp)
        p = subprocess.Popen([exe, ini], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True, env=env)
        out = []
        try:
            for line in p.stdout:
                out.append(line)
                if line.startswith("started") or line.startswith("FAIL"):
                    break
            if not out or not out[-1].startswith("started"):
                fail("kvl_start from [eal] did not start:\n" + "".join(out))
            # The prefix names EAL's runtime folder: the socket is there only if it was used.
            sock = os.path.join(tmp, "dpdk", prefix, "dpdk_telemetry.v2")
            if not kt.wait_for_socket(sock, 5.0, alive=lambda: p.poll() is None):
                fail("no telemetry socket at %s: [eal] file_prefix not used" % sock)
            c = kt.TelemetryClient(timeout=5.0)
            c.connect(sock, wait=2.0)
            params = c.command("/eal/params")
            c.close()
            print("EAL's /eal/params: %s" % params)
            want = ["--lcores", LCORES, "-m", "128", "--file-prefix", prefix, "--no-huge",
                    "--no-pci", "--log-level=lib.eal:notice", "--no-shconf"]
            # EAL lists argv after the program name, in order: [eal] keys as documented
            if list(params[1:]) != want and list(params) != want:
                fail("EAL was given %s, expected %s from [eal]" % (params, want))
            rest, _ = p.communicate("go\n", timeout=30)
            out.append(rest)
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
        text = "".join(out)
        print(text)
        for when in ("while running", "after kvl_stop"):
            ok = [l for l in text.splitlines() if l.startswith("ok " + when + ": refused, errno EALREADY")]
            if not ok or "EAL starts once per process" not in ok[0]:
                fail("a second kvl_start %s was not refused with EALREADY and the reason" % when)
        if p.returncode != 0:
            fail("embed_start exited %d" % p.returncode)
    print("ok: [eal] gave EAL its arguments; a second start refused running and stopped")


if __name__ == "__main__":
    main()
