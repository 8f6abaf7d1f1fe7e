# SPDX-License-Identifier: BSD-3-Clause
"""The INI of the Runtime a Python test or benchmark starts in its own process: one tcp NIC
on loopback, a scheduler, no telemetry, EAL's arguments from [eal] (two lcores, no hugepages,
a file prefix of its own). One place for tests/python's copies of it."""
import os
import tempfile

# git keeps no mode but the x bit: a fresh clone has config/demo.secret at 0644, which kvlaned
# and the runtime refuse (make build chmods it; tests/eal's harness main() does too, but
# pytest runs no main). Done at import, before any fixture starts a kvlaned.
_SECRET = os.path.join(os.environ.get("KVL_SRC", ""), "config", "demo.secret")
if os.path.exists(_SECRET) and os.stat(_SECRET).st_mode & 0o077:
    os.chmod(_SECRET, 0o600)


def runtime_ini(tmp, name, prefix, extra=""):
    """Write @tmp/@name.ini and return its path; @extra: more sections (e.g. "[gpu]...")."""
    path = os.path.join(tmp, name + ".ini")
    with open(path, "w") as f:
        f.write("[runtime]\nname = %s\nidle_policy = yield\n"
                "[nic.lo]\ndevice = lo\ntransport = tcp\n"
                "[control]\nlisten = 127.0.0.1:0\nsecret_file = %s\n"
                "[sched]\nstaging_mb = 8\n[telemetry]\nenable = false\n%s"
                # no eal=[] given to Runtime(): EAL's arguments come from here
                "[eal]\nlcores = 0@(0-1),1@(0-1)\nmemory_mb = 256\nno_huge = true\n"
                "no_pci = true\nfile_prefix = %s%d\n"
                % (name, os.path.join(os.environ["KVL_SRC"], "config", "demo.secret"), extra,
                   prefix, os.getpid()))
    return path


def fresh_runtime_ini(name, prefix, extra=""):
    """runtime_ini() in a new temporary directory, which becomes RUNTIME_DIRECTORY (EAL's
    runtime files and the telemetry socket go there)."""
    tmp = tempfile.mkdtemp(prefix="kvl-%s-" % prefix)
    os.environ["RUNTIME_DIRECTORY"] = tmp
    return runtime_ini(tmp, name, prefix, extra)
