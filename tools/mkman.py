#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
# Man page from a program's --help text: one source for both, so they never disagree.
"""Usage: mkman.py PROGRAM NAME SECTION VERSION SUMMARY OUTPUT

Runs PROGRAM --help and writes a man(7) page. The help texts follow one shape: a
"Usage: PROG ..." line, paragraphs, headings ending in ":" at column 0, option lines
"  -x, --long ARG    text" with continuation lines indented under the text, and other
indented lines (examples) kept as they are.
"""
import datetime
import os
import re
import subprocess
import sys

OPT = re.compile(r"^ {2,8}(-\S.*?)(?:\s{2,}(\S.*))?$")


def esc(s):
    s = s.replace("\\", "\\e").replace("-", "\\-")
    return "\\&" + s if s[:1] in (".", "'") else s


def page(help_text, name, section, version, summary):
    lines = help_text.rstrip("\n").split("\n")
    usage = lines[0]
    if not usage.startswith("Usage: "):
        raise SystemExit(f"mkman: {name} --help does not start with 'Usage: '")
    synopsis = usage[len("Usage: "):].split(" ", 1)
    body = lines[1:]
    epoch = os.environ.get("SOURCE_DATE_EPOCH")  # reproducible builds set it
    date = (datetime.datetime.fromtimestamp(int(epoch), datetime.timezone.utc).date()
            if epoch else datetime.date.today()).isoformat()
    out = [f'.TH {name.upper()} {section} "{date}" "kvlane {version}" "kvlane"',
           ".SH NAME", f"{esc(name)} \\- {esc(summary)}",
           ".SH SYNOPSIS", f".B {esc(name)}",
           esc(synopsis[1]) if len(synopsis) > 1 else "", ".SH DESCRIPTION"]
    literal = False
    in_opt = False
    for ln in body:
        m = OPT.match(ln)
        if literal and not (ln.startswith("  ") and not m):
            out.append(".fi")
            literal = False
        if not ln.strip():
            out.append(".PP")
            in_opt = False
        elif not ln.startswith(" ") and ln.rstrip().endswith(":") and len(ln) < 60:
            out.append(".SS " + esc(ln.rstrip().rstrip(":")))
            in_opt = False
        elif m:
            opt, text = m.group(1).strip(), m.group(2)
            if text is None and len(ln) > 24 and ln[23] == " ":
                # the text column is 24; an option as long as it leaves one space
                opt, text = ln[:24].strip(), ln[24:].strip()
            out.append(".TP")
            out.append(".B " + esc(opt))
            if text:
                out.append(esc(text))
            in_opt = True
        elif in_opt and ln.startswith(" " * 16):
            out.append(esc(ln.strip()))
        elif ln.startswith("  "):
            if not literal:
                out.append(".nf")
                literal = True
            out.append(esc(ln))
        else:
            out.append(esc(ln.strip()))
            in_opt = False
    if literal:
        out.append(".fi")
    out += [".SH SEE ALSO", "kvlaned(8), kvlane-perf(1), kvlane-doctor(1); docs/doctor.md and "
            "config/README.md in the kvlane sources"]
    return "\n".join(x for x in out if x != "") + "\n"


def main(argv):
    if len(argv) != 7:
        print(__doc__, file=sys.stderr)
        return 2
    prog, name, section, version, summary, output = argv[1:]
    r = subprocess.run([prog, "--help"], capture_output=True, text=True, timeout=30)
    if r.returncode != 0:
        print(f"mkman: {prog} --help exited {r.returncode}: {r.stderr}", file=sys.stderr)
        return 1
    text = r.stdout.replace(prog, name)
    with open(output, "w", encoding="utf-8") as f:
        f.write(page(text, name, section, version, summary))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
