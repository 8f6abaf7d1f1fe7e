#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""The telemetry client under its old name, for its callers (tests/eal, tests/gpu, tests/rdma
inside the VM, tools/demo.py, kvlane_chaos.py): python/kvlane/telemetry.py, which is also
`python3 -m kvlane.telemetry`. Loaded by path, so it needs neither the build nor _kvlane."""
import importlib.util
import os
import sys

_PATH = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "python",
                     "kvlane", "telemetry.py")
_spec = importlib.util.spec_from_file_location("kvlane_telemetry_impl", _PATH)
_impl = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_impl)
globals().update({k: v for k, v in vars(_impl).items() if not k.startswith("__")})

if __name__ == "__main__":
    sys.exit(main())
