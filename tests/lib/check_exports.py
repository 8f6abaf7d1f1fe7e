#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""libkvlane.so's dynamic symbol table: only kvl_* defined, the soname carries kvlane.h's
major version, and every function kvlane.h declares is there.

usage: check_exports.py LIBKVLANE.so include/kvlane/kvlane.h [OTHER.so]
OTHER.so: a library known to export non-kvl_ names (libinih): the same check must refuse
it, so this test is seen to fail on a library that leaks.
"""
import re
import sys

from elftools.elf.dynamic import DynamicSection
from elftools.elf.elffile import ELFFile


def exports(path):
    """(soname, defined global/weak names, version-definition names) of a shared library."""
    with open(path, "rb") as f:
        elf = ELFFile(f)
        soname = None
        for sec in elf.iter_sections():
            if isinstance(sec, DynamicSection):
                for tag in sec.iter_tags():
                    if tag.entry.d_tag == "DT_SONAME":
                        soname = tag.soname
        verdefs = set()
        vd = elf.get_section_by_name(".gnu.version_d")
        if vd is not None:
            for _, aux in vd.iter_versions():
                for a in aux:
                    verdefs.add(a.name)
        names = []
        for sym in elf.get_section_by_name(".dynsym").iter_symbols():
            if not sym.name or sym["st_shndx"] == "SHN_UNDEF":
                continue
            if sym["st_info"]["bind"] not in ("STB_GLOBAL", "STB_WEAK", "STB_GNU_UNIQUE"):
                continue
            # the version node itself (KVLANE_0) is an absolute symbol, not code or data
            if sym["st_shndx"] == "SHN_ABS" and sym.name in verdefs:
                continue
            names.append(sym.name)
        return soname, names


def leaks(names):
    return sorted(n for n in names if not n.startswith("kvl_"))


def main():
    lib, header = sys.argv[1], sys.argv[2]
    text = open(header).read()
    major = re.search(r"#define KVLANE_VERSION_MAJOR (\d+)", text).group(1)
    # Declarations, not static inline helpers or function-pointer typedefs.
    text_nc = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    declared = set()
    for m in re.finditer(r"(?m)^(?!static|typedef|#)[A-Za-z_][\w \t\*]*?\b(kvl_\w+)\s*\(", text_nc):
        declared.add(m.group(1))
    soname, names = exports(lib)
    bad = []
    if soname != "libkvlane.so." + major:
        bad.append("soname is %r, expected 'libkvlane.so.%s' (KVLANE_VERSION_MAJOR)" % (soname, major))
    for n in leaks(names):
        bad.append("exports non-kvl_ symbol %s" % n)
    missing = sorted(declared - set(names))
    for n in missing:
        bad.append("kvlane.h declares %s but the library does not export it" % n)
    if len(declared) < 20:
        bad.append("found only %d declarations in %s: the header parse is broken" % (len(declared), header))
    print("%s: soname %s, %d exported symbols, %d functions declared in kvlane.h, all exported"
          % (lib, soname, len(names), len(declared)) if not bad else "")
    if len(sys.argv) > 3:
        other_soname, other = exports(sys.argv[3])
        if not leaks(other):
            bad.append("the check found no leak in %s (exports %s...): it cannot fail"
                       % (sys.argv[3], other[:3]))
        else:
            print("control: %s exports %d non-kvl_ symbols (%s, ...): refused as it should be"
                  % (sys.argv[3], len(leaks(other)), leaks(other)[0]))
    for b in bad:
        print("FAIL: " + b)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
