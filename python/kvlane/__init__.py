# SPDX-License-Identifier: BSD-3-Clause
"""kvlane for Python: the C API of include/kvlane/kvlane.h over libkvlane.so.

    import kvlane
    with kvlane.Runtime(config="node.ini", sets=["control.listen=127.0.0.1:0"],
                        eal=["--lcores", "0@(0-1),1@(0-1)", "--no-huge", "-m", "256",
                             "--no-pci"]) as rt:
        peer = rt.connect("10.0.0.2:18515")
        kv = rt.peer_segments(peer)[0]
        buf = bytearray(kv.geom.block_bytes)
        local = rt.register(buf)                       # kept alive while registered
        rt.post(peer, [kvlane.Xfer(cookie=1, local=local.base, remote_off=0,
                                   length=len(buf), remote_seg=kv.id, op=kvlane.Op.KVL_READ)])
        while not (done := rt.poll()):
            pass
        assert done[0].status == kvlane.Status.KVL_OK

Errors are kvlane.Error (an OSError): e.errno, and a message that starts with the errno's
name and carries kvlane's reason. Completion statuses are Status, an IntEnum with the C names.
Blocking calls (Runtime(), connect, close) release the GIL; nothing blocks in poll.
"""
import enum
import math
from collections import namedtuple

from . import _kvlane

__all__ = ["Runtime", "Error", "Status", "Op", "Access", "ReqClass", "ReqDir", "ReqEventType",
           "Geom", "Segment", "RemoteSegment", "Xfer", "Completion", "Notice", "Block",
           "ReqEvent", "StepFlags", "VERSION", "pattern_check", "REQ_STEP_FLAGS",
           "REQ_ENGINE_DEST", "XFER_NOTIFY"]

Error = _kvlane.Error
VERSION = _kvlane.KVLANE_VERSION_NUM
MAX_IOV = _kvlane.KVL_MAX_IOV


def _c_enum(name, doc, *names):
    e = enum.IntEnum(name, [(n, getattr(_kvlane, n)) for n in names])
    e.__doc__ = doc
    return e


Status = _c_enum("Status", "Typed completion status (enum kvl_status); str() is kvl_status_name.",
                 "KVL_OK", "KVL_ERR_BOUNDS", "KVL_ERR_NO_SEGMENT", "KVL_ERR_ACCESS",
                 "KVL_ERR_LOCAL", "KVL_ERR_CONN_LOST", "KVL_ERR_PEER_DEAD", "KVL_ERR_PROTOCOL",
                 "KVL_ERR_CANCELED", "KVL_ERR_TOO_LARGE", "KVL_ERR_NO_PEER",
                 "KVL_ERR_GPU_MEMORY")
Status.__str__ = lambda self: _kvlane.status_name(int(self))
Op = _c_enum("Op", "Transfer direction (enum kvl_op_code).", "KVL_WRITE", "KVL_READ")
Access = _c_enum("Access", "What peers may do with a local segment (enum kvl_access).",
                 "KVL_REMOTE_READ", "KVL_REMOTE_WRITE")
ReqClass = _c_enum("ReqClass", "Request class (enum kvl_req_class).",
                   "KVL_REQ_DECODE", "KVL_REQ_PREFILL")
ReqDir = _c_enum("ReqDir", "Request direction (enum kvl_req_dir).", "KVL_REQ_PULL", "KVL_REQ_PUSH")
ReqEventType = _c_enum("ReqEventType", "Request event (enum kvl_req_ev_type).",
                       "KVL_REQ_EV_STEP_READY", "KVL_REQ_EV_DONE", "KVL_REQ_EV_FAILED")
XFER_NOTIFY = _kvlane.KVL_XFER_NOTIFY
REQ_STEP_FLAGS = _kvlane.KVL_REQ_STEP_FLAGS
REQ_ENGINE_DEST = _kvlane.KVL_REQ_ENGINE_DEST

Geom = namedtuple("Geom", "layers planes blocks block_bytes")
Geom.__doc__ = "struct kvl_seg_geom: layers x planes (K, V) x blocks of block_bytes."
Segment = namedtuple("Segment", "id base length geom mem gpu view")
Segment.__doc__ = ("A local segment (struct kvl_segment); view: a memoryview of its bytes for "
                   "host memory kvlane allocated, else None.")
RemoteSegment = namedtuple("RemoteSegment", "id access length geom name")
Xfer = namedtuple("Xfer", "cookie local remote_off length remote_seg op flags notify",
                  defaults=(0, 0))
Xfer.__doc__ = "struct kvl_xfer (without iov): local is an address inside a local segment."
Completion = namedtuple("Completion", "cookie bytes status")
Notice = namedtuple("Notice", "peer value length")
Block = namedtuple("Block", "remote_seg remote_off length local", defaults=(0,))
Block.__doc__ = ("struct kvl_req_block: local is 0 for a PULL into staging, the bytes' address "
                 "for a PUSH, where the block lands for a PULL with engine_dest=True.")
ReqEvent = namedtuple("ReqEvent", "req user type step status")
StepFlags = namedtuple("StepFlags", "ready done ready_dev done_dev stride epoch n_steps")
StepFlags.__doc__ = ("kvl_req_step_flags: step k's READY word at ready + k * stride (host "
                     "address), ready_dev + k * stride as the GPU sees it (0: not mapped).")


def _geom(g, what):
    try:
        g = Geom(*g)
    except TypeError:
        raise TypeError("%s: geom must be (layers, planes, blocks, block_bytes)" % what) from None
    for v in g:
        if not isinstance(v, int) or isinstance(v, bool) or v < 0:
            raise TypeError("%s: geom fields must be non-negative ints, got %r" % (what, g))
    return g


def _nbytes(g):
    return g.layers * g.planes * g.blocks * g.block_bytes


_TYPESTR_BYTES = {"b1": 1, "i1": 1, "u1": 1, "i2": 2, "u2": 2, "f2": 2, "i4": 4, "u4": 4,
                  "f4": 4, "i8": 8, "u8": 8, "f8": 8, "c8": 8, "c16": 16, "V2": 2}


def _memory_of(obj):
    """(address, nbytes, what, keep) of @obj's memory: a PyTorch tensor (data_ptr), a
    C-contiguous buffer, a DLPack capsule (or __dlpack__), an object with
    __cuda_array_interface__, in that order; keep: what must stay alive while registered."""
    if hasattr(obj, "data_ptr") and hasattr(obj, "is_contiguous"):  # torch.Tensor
        dev = getattr(obj, "device", None)
        if dev is not None and getattr(dev, "type", "cpu") not in ("cpu", "cuda"):
            raise ValueError("register: the tensor is on device %s: kvlane registers CPU or "
                             "CUDA memory" % dev)
        if not obj.is_contiguous():
            raise ValueError("register: the tensor is not contiguous (shape %s, stride %s): "
                             "kvlane registers one range; pass tensor.contiguous()"
                             % (tuple(obj.shape), tuple(obj.stride())))
        return obj.data_ptr(), obj.numel() * obj.element_size(), "tensor on %s" % obj.device, obj
    try:
        addr, n, _ro, view = _kvlane.buffer_address(obj)
        return addr, n, "buffer", (obj, view)
    except (TypeError, BufferError, ValueError) as e:
        why = e  # not a buffer, or not a C-contiguous one: DLPack says which
    if type(obj).__name__ == "PyCapsule" or hasattr(obj, "__dlpack__"):
        cap = obj if type(obj).__name__ == "PyCapsule" else obj.__dlpack__()
        try:
            addr, n, dev, dev_id, contiguous = _kvlane.dlpack_address(cap)
        except ValueError as e:
            raise TypeError("register: not a DLPack capsule that is still unconsumed (%s)" % e) \
                from None
        if not contiguous:
            raise ValueError("register: the DLPack tensor is not contiguous: kvlane registers "
                             "one range")
        # the capsule owns the producer's memory: kept with the object until close()
        return addr, n, "DLPack tensor (device type %d:%d)" % (dev, dev_id), (obj, cap)
    cai = getattr(obj, "__cuda_array_interface__", None)
    if cai is not None:
        shape, typestr = tuple(cai["shape"]), cai["typestr"]
        item = _TYPESTR_BYTES.get(typestr[1:])
        if item is None:
            raise ValueError("register: __cuda_array_interface__ typestr %r unknown" % typestr)
        strides = cai.get("strides")
        if strides is not None:
            want, acc = [], item
            for d in reversed(shape):
                want.insert(0, acc)
                acc *= d
            if tuple(strides) != tuple(want) and math.prod(shape) > 1:
                raise ValueError("register: the CUDA array is not C-contiguous (strides %s)"
                                 % (tuple(strides),))
        return cai["data"][0], math.prod(shape) * item, "CUDA array", obj
    raise TypeError("register: expected a PyTorch tensor, a DLPack capsule or __dlpack__, an "
                    "object with __cuda_array_interface__ or a C-contiguous buffer (bytearray, "
                    "numpy array, mmap); got %s (%s)" % (type(obj).__name__, why))


def pattern_check(obj, seed, offset=0):
    """kvl_pattern_check over a buffer (or (address, length)): the index of the first byte
    that differs from a `fill = pattern` segment's bytes at offset, len() if none."""
    if isinstance(obj, tuple):
        addr, n = obj
        return _kvlane.pattern_check(addr, n, seed, offset)
    addr, n, _ro, view = _kvlane.buffer_address(obj)
    r = _kvlane.pattern_check(addr, n, seed, offset)
    view.release()
    return r


class Runtime:
    """A kvlane runtime in this process (kvl_start ... kvl_stop); one per process, as EAL.

    Runtime(config, sets=None, eal=None, sysfs_root=None): config is the INI file, sets its
    "section.key=value" overrides, eal EAL's arguments (None or []: the INI's [eal] section).
    Use it as a context manager, or call close(). After close() every call raises Error
    (EBADF).
    """

    def __init__(self, config, sets=None, eal=None, sysfs_root=None):
        if not isinstance(config, str):
            raise TypeError("Runtime: config must be a str (the INI file's path), got %s"
                            % type(config).__name__)
        for what, v in (("sets", sets), ("eal", eal)):
            if isinstance(v, (str, bytes)):
                raise TypeError("Runtime: %s must be a list of str, not one %s"
                                % (what, type(v).__name__))
        self._h = _kvlane.Handle(config, list(sets or []), list(eal or []), sysfs_root)
        self._kept = []  # objects registered: alive until close()

    def close(self):
        """kvl_stop(): stop the lcores, the control thread and EAL; drop registrations."""
        self._h.close()
        self._kept = []

    @property
    def closed(self):
        return self._h.closed

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __repr__(self):
        return "<kvlane.Runtime %s>" % ("closed" if self.closed else self.listen_addr or "open")

    @property
    def listen_addr(self):
        """The control listener's bound address ("" when the control path is off)."""
        return self._h.listen_addr()

    def connect(self, addr, timeout_ms=10000):
        """kvl_connect: authenticate to the kvlane at addr ("host:port"); the peer's id."""
        return self._h.connect(addr, timeout_ms)

    def peer_segments(self, peer):
        """kvl_peer_segments: the segments peer offers, as RemoteSegment."""
        return [RemoteSegment(i, a, n, Geom(*g), name)
                for i, a, n, g, name in self._h.peer_segments(peer)]

    def _segment(self, t, view):
        sid, base, length, g, mem, gpu = t
        return Segment(sid, base, length, Geom(*g), mem, gpu, view)

    def alloc_segment(self, name, geom, access=Access.KVL_REMOTE_READ, gpu=None):
        """kvl_seg_alloc (gpu=None) or kvl_seg_alloc_gpu: a zeroed segment; host ones come
        with a writable memoryview (Segment.view)."""
        g = _geom(geom, "alloc_segment")
        t = self._h.seg_alloc(name, tuple(g), int(access), gpu)
        view = _kvlane.memory(t[1], t[2]) if gpu is None and t[4] == _kvlane.KVL_MEM_HOST else None
        return self._segment(t, view)

    def register(self, obj, name=None, geom=None,
                 access=Access.KVL_REMOTE_READ | Access.KVL_REMOTE_WRITE):
        """kvl_seg_register the memory of obj (a tensor, CPU or CUDA, through data_ptr(); a
        DLPack capsule or an object with __dlpack__; an object with __cuda_array_interface__;
        a C-contiguous buffer: bytearray, numpy, mmap).
        geom defaults to one block of all its bytes. obj is kept until close()."""
        if self.closed:
            self._h.listen_addr()  # raises Error(EBADF) with the reason
        addr, nbytes, what, keep = _memory_of(obj)
        if geom is None:
            if nbytes == 0 or nbytes > (1 << 30):
                raise ValueError("register: %s of %d bytes: give geom=(layers, planes, blocks, "
                                 "block_bytes)" % (what, nbytes))
            geom = (1, 1, 1, nbytes)
        g = _geom(geom, "register")
        if _nbytes(g) > nbytes:
            raise ValueError("register: geom %s is %d bytes, the %s has %d"
                             % (tuple(g), _nbytes(g), what, nbytes))
        t = self._h.seg_register(name or "py-%d" % len(self._kept), addr, tuple(g), int(access))
        self._kept.append(keep)
        return self._segment(t, None)

    def post(self, peer, transfers):
        """kvl_post: Xfer tuples to peer; how many were taken (fewer when queues are full)."""
        return self._h.post(peer, transfers if isinstance(transfers, list) else list(transfers))

    def poll(self, max=64):
        """kvl_poll: up to max Completion; never blocks."""
        return [Completion(c, b, Status(s)) for c, b, s in self._h.poll(max)]

    def poll_notices(self, max=64):
        """kvl_poll_notices: up to max Notice of peers' KVL_XFER_NOTIFY writes."""
        return [Notice(*n) for n in self._h.poll_notices(max)]

    # ---- the request API ----

    def open_request(self, peer, blocks, steps, cls=ReqClass.KVL_REQ_DECODE, deadline_us=0,
                     dir=ReqDir.KVL_REQ_PULL, user=0, step_flags=False, engine_dest=False):
        """kvl_req_open: blocks are Block tuples; steps a list, step k the indices of the
        blocks it needs. step_flags: KVL_REQ_STEP_FLAGS (READY/DONE words, step_flags());
        engine_dest: KVL_REQ_ENGINE_DEST (a PULL lands at each Block.local, inside memory
        registered here, instead of staging). Returns the request's handle (an int).
        A refused request raises Error naming the block and segment (kvl_req_error)."""
        first, flat = [0], []
        for k, s in enumerate(steps):
            if isinstance(s, (str, bytes)) or not hasattr(s, "__iter__"):
                raise TypeError("open_request: step %d must be a list of block indices" % k)
            flat.extend(s)
            first.append(len(flat))
        return self._h.req_open(peer, list(blocks), first, flat, deadline_us, user, int(cls),
                                int(dir), (REQ_STEP_FLAGS if step_flags else 0) |
                                (REQ_ENGINE_DEST if engine_dest else 0))

    def poll_requests(self, max=64):
        """kvl_req_poll: up to max ReqEvent (type ReqEventType, status Status)."""
        return [ReqEvent(r, u, ReqEventType(t), st, Status(s))
                for r, u, t, st, s in self._h.req_poll(max)]

    def step_done(self, req, step):
        """kvl_req_step_done."""
        self._h.req_step_done(req, step)

    def cancel(self, req):
        """kvl_req_cancel."""
        self._h.req_cancel(req)

    def block_addr(self, req, block):
        """kvl_req_block_addr: the address of a landed block (a device pointer with VRAM
        staging)."""
        return self._h.req_block_addr(req, block)

    def block_view(self, req, block, length):
        """The bytes of a landed block in host staging, as a memoryview (valid until the last
        step naming it is DONE)."""
        return _kvlane.memory(self.block_addr(req, block), length)

    def step_flags(self, req):
        """kvl_req_step_flags of a request opened with step_flags=True."""
        return StepFlags(*self._h.req_step_flags(req))

    def budget_cap(self, nbytes):
        """kvl_req_budget_cap (2**64 - 1 lifts the cap)."""
        self._h.req_budget_cap(nbytes)
