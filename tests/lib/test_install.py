#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""`meson install --destdir` into a temporary folder, then a C program built only from that
tree through `pkg-config --cflags --libs kvlane`, run against the installed libkvlane.so.

usage: test_install.py BUILD_DIR SOURCE_DIR
"""
import glob
import os
import subprocess
import sys
import tempfile

INI = """[runtime]
name = installed
idle_policy = yield
[nic.lo]
device = lo
transport = tcp
[telemetry]
enable = false
"""


def run(cmd, env=None, check=True, show=True):
    p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       timeout=120)
    print("$ " + " ".join(cmd) + ("\n" + p.stdout.rstrip() if show else ""))
    if check and p.returncode != 0:
        sys.exit("FAIL: exit %d: %s" % (p.returncode, " ".join(cmd)))
    return p


def main():
    build, src = sys.argv[1], sys.argv[2]
    with tempfile.TemporaryDirectory(prefix="kvl-install-") as tmp:
        dest = os.path.join(tmp, "root")
        run(["meson", "install", "-C", build, "--no-rebuild", "--quiet", "--destdir", dest])
        pcs = glob.glob(os.path.join(dest, "**", "pkgconfig", "kvlane.pc"), recursive=True)
        heads = glob.glob(os.path.join(dest, "**", "include", "kvlane", "kvlane.h"), recursive=True)
        libs = glob.glob(os.path.join(dest, "**", "libkvlane.so.*"), recursive=True)
        if len(pcs) != 1 or len(heads) != 1 or not libs:
            sys.exit("FAIL: installed tree lacks kvlane.pc / kvlane.h / libkvlane.so.*: %s %s %s"
                     % (pcs, heads, libs))
        env = dict(os.environ, PKG_CONFIG_PATH=os.path.dirname(pcs[0]),
                   PKG_CONFIG_SYSROOT_DIR=dest)
        flags = run(["pkg-config", "--cflags", "--libs", "kvlane"], env=env).stdout.split()
        # Everything must come from the installed tree, not from the sources or the build.
        paths = [f[2:] for f in flags if f.startswith(("-I", "-L"))]
        if not paths or any(not p.startswith(dest) for p in paths) or "-lkvlane" not in flags:
            sys.exit("FAIL: pkg-config flags do not point into the installed tree: %s" % flags)
        exe = os.path.join(tmp, "installed_client")
        cc = os.environ.get("CC", "cc")
        run([cc, "-std=c11", "-Wall", "-Wextra", "-Werror", "-pedantic", "-o", exe,
             os.path.join(src, "tests", "lib", "installed_client.c")] + flags)
        libdir = [p for p in paths if p.endswith(("lib", "lib64")) or "/lib/" in p + "/"][0]
        needed = run(["readelf", "-d", exe], show=False).stdout
        if "[libkvlane.so." not in needed:
            sys.exit("FAIL: the program does not need libkvlane.so.N")
        renv = dict(os.environ, LD_LIBRARY_PATH=libdir, RUNTIME_DIRECTORY=os.path.join(tmp, "run"))
        os.mkdir(renv["RUNTIME_DIRECTORY"])
        ldd = run(["ldd", exe], env=renv, show=False).stdout
        line = [l for l in ldd.splitlines() if "libkvlane.so" in l]
        if not line or dest not in line[0]:
            sys.exit("FAIL: libkvlane.so is not loaded from the installed tree: %s" % line)
        print("libkvlane.so from the installed tree: " + line[0].strip())
        ini = os.path.join(tmp, "installed.ini")
        with open(ini, "w") as f:
            f.write(INI)
        p = run([exe, ini, "--lcores", "0@(0-1),1@(0-1)", "--no-huge", "-m", "128", "--no-pci",
                 "--file-prefix", "kvl_install_%d" % os.getpid()], env=renv, check=False)
        if p.returncode != 0 or "ok kvl_stop" not in p.stdout:
            sys.exit("FAIL: the installed-tree program failed (exit %d)" % p.returncode)
        # the Python binding, where it was built: imported from the installed tree alone
        exts = glob.glob(os.path.join(dest, "**", "kvlane", "_kvlane.abi3.so"), recursive=True)
        if glob.glob(os.path.join(build, "python", "kvlane", "_kvlane.abi3.so")):
            if len(exts) != 1 or not os.path.exists(os.path.join(os.path.dirname(exts[0]),
                                                                 "__init__.py")):
                sys.exit("FAIL: the Python binding is not installed: %s" % exts)
            penv = dict(renv, PYTHONPATH=os.path.dirname(os.path.dirname(exts[0])))
            p = run([sys.executable, "-c", "import kvlane, kvlane._kvlane as k; "
                     "print(kvlane.__file__, k.__file__, hex(kvlane.VERSION), "
                     "str(kvlane.Status.KVL_ERR_BOUNDS))"], env=penv, check=False)
            if p.returncode != 0 or p.stdout.count(dest) != 2 or "bounds" not in p.stdout:
                sys.exit("FAIL: the installed binding does not import from the installed tree")
    print("ok: installed tree (kvlane.pc, kvlane.h, libkvlane.so) builds and runs a program")


if __name__ == "__main__":
    main()
