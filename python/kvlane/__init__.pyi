# SPDX-License-Identifier: BSD-3-Clause
# Type stubs of kvlane (python/kvlane/__init__.py); they follow include/kvlane/kvlane.h.
import enum
from typing import Any, Iterable, NamedTuple, Optional, Sequence

VERSION: int
MAX_IOV: int
XFER_NOTIFY: int
REQ_STEP_FLAGS: int
REQ_ENGINE_DEST: int

class Error(OSError):
    stage: int  # only from Runtime(): enum kvl_start_stage

class Status(enum.IntEnum):
    KVL_OK: int
    KVL_ERR_BOUNDS: int
    KVL_ERR_NO_SEGMENT: int
    KVL_ERR_ACCESS: int
    KVL_ERR_LOCAL: int
    KVL_ERR_CONN_LOST: int
    KVL_ERR_PEER_DEAD: int
    KVL_ERR_PROTOCOL: int
    KVL_ERR_CANCELED: int
    KVL_ERR_TOO_LARGE: int
    KVL_ERR_NO_PEER: int
    KVL_ERR_GPU_MEMORY: int

class Op(enum.IntEnum):
    KVL_WRITE: int
    KVL_READ: int

class Access(enum.IntEnum):
    KVL_REMOTE_READ: int
    KVL_REMOTE_WRITE: int

class ReqClass(enum.IntEnum):
    KVL_REQ_DECODE: int
    KVL_REQ_PREFILL: int

class ReqDir(enum.IntEnum):
    KVL_REQ_PULL: int
    KVL_REQ_PUSH: int

class ReqEventType(enum.IntEnum):
    KVL_REQ_EV_STEP_READY: int
    KVL_REQ_EV_DONE: int
    KVL_REQ_EV_FAILED: int

class Geom(NamedTuple):
    layers: int
    planes: int
    blocks: int
    block_bytes: int

class Segment(NamedTuple):
    id: int
    base: int
    length: int
    geom: Geom
    mem: int
    gpu: int
    view: Optional[memoryview]

class RemoteSegment(NamedTuple):
    id: int
    access: int
    length: int
    geom: Geom
    name: str

class Xfer(NamedTuple):
    cookie: int
    local: int
    remote_off: int
    length: int
    remote_seg: int
    op: int
    flags: int = 0
    notify: int = 0

class Completion(NamedTuple):
    cookie: int
    bytes: int
    status: Status

class Notice(NamedTuple):
    peer: int
    value: int
    length: int

class Block(NamedTuple):
    remote_seg: int
    remote_off: int
    length: int
    local: int = 0

class ReqEvent(NamedTuple):
    req: int
    user: int
    type: ReqEventType
    step: int
    status: Status

class StepFlags(NamedTuple):
    ready: int
    done: int
    ready_dev: int
    done_dev: int
    stride: int
    epoch: int
    n_steps: int

def pattern_check(obj: Any, seed: int, offset: int = ...) -> int: ...

class Runtime:
    def __init__(self, config: str, sets: Optional[Sequence[str]] = ...,
                 eal: Optional[Sequence[str]] = ..., sysfs_root: Optional[str] = ...) -> None: ...
    def close(self) -> None: ...
    @property
    def closed(self) -> bool: ...
    def __enter__(self) -> "Runtime": ...
    def __exit__(self, *exc: Any) -> bool: ...
    @property
    def listen_addr(self) -> str: ...
    def connect(self, addr: str, timeout_ms: int = ...) -> int: ...
    def peer_segments(self, peer: int) -> list[RemoteSegment]: ...
    def alloc_segment(self, name: str, geom: Sequence[int], access: int = ...,
                      gpu: Optional[int] = ...) -> Segment: ...
    def register(self, obj: Any, name: Optional[str] = ..., geom: Optional[Sequence[int]] = ...,
                 access: int = ...) -> Segment: ...
    def post(self, peer: int, transfers: Iterable[Xfer]) -> int: ...
    def poll(self, max: int = ...) -> list[Completion]: ...
    def poll_notices(self, max: int = ...) -> list[Notice]: ...
    def open_request(self, peer: int, blocks: Sequence[Block], steps: Sequence[Sequence[int]],
                     cls: int = ..., deadline_us: int = ..., dir: int = ..., user: int = ...,
                     step_flags: bool = ..., engine_dest: bool = ...) -> int: ...
    def poll_requests(self, max: int = ...) -> list[ReqEvent]: ...
    def step_done(self, req: int, step: int) -> None: ...
    def cancel(self, req: int) -> None: ...
    def block_addr(self, req: int, block: int) -> int: ...
    def block_view(self, req: int, block: int, length: int) -> memoryview: ...
    def step_flags(self, req: int) -> StepFlags: ...
    def budget_cap(self, nbytes: int) -> None: ...
