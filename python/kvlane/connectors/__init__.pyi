# SPDX-License-Identifier: BSD-3-Clause
# Type stubs of kvlane.connectors.
from typing import Optional, Sequence

import kvlane

def use_runtime(rt: Optional[kvlane.Runtime]) -> None: ...
def runtime(config: Optional[str] = ..., sets: Optional[Sequence[str]] = ...,
            eal: Optional[Sequence[str]] = ...) -> kvlane.Runtime: ...
def merge_runs(src: Sequence[int], dst: Sequence[int]) -> list[tuple[int, int, int]]: ...
