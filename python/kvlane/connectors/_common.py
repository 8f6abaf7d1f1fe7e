# SPDX-License-Identifier: BSD-3-Clause
"""What both connectors share: the process's one Runtime, a peer cache, READY/DONE words as
Python sees them, and the CUDA stream memory operations that order a layer behind its READY
word without a host sync."""
import ctypes
import errno
import time

import kvlane

_RUNTIME = None


def use_runtime(rt):
    """Make @rt (a kvlane.Runtime) the one the connectors of this process use. EAL starts once
    per process, so an engine that opened its own Runtime hands it over here."""
    global _RUNTIME
    if rt is not None and not isinstance(rt, kvlane.Runtime):
        raise TypeError("use_runtime: expected a kvlane.Runtime, got %s" % type(rt).__name__)
    _RUNTIME = rt


def runtime(config=None, sets=None, eal=None):
    """The process's Runtime: the one given to use_runtime(), else one started from @config
    (the INI's path; sets/eal as kvlane.Runtime takes them) on first use."""
    global _RUNTIME
    if _RUNTIME is not None and not _RUNTIME.closed:
        return _RUNTIME
    if config is None:
        raise RuntimeError("kvlane connector: no Runtime: call kvlane.connectors.use_runtime(rt) "
                           "or set kv_connector_extra_config['kvlane.config'] to the INI's path")
    _RUNTIME = kvlane.Runtime(config=config, sets=list(sets or []), eal=list(eal or []))
    return _RUNTIME


_PEERS = {}


def peers(rt):
    """The Peers of @rt, shared by every connector on it: one connection per address."""
    p = _PEERS.get(id(rt))
    if p is None or p.rt is not rt:
        p = _PEERS[id(rt)] = Peers(rt)
    return p


_EVENTS = {}


def events(rt):
    """The request-event router of @rt, shared by every connector on it: kvl_req_poll hands
    out every request's events to whoever polls, so one poller keeps them per request."""
    e = _EVENTS.get(id(rt))
    if e is None or e.rt is not rt:
        e = _EVENTS[id(rt)] = Events(rt)
    return e


class Events:
    """Events of kvl_req_poll, kept per request until its owner takes them."""

    def __init__(self, rt):
        self.rt, self.q = rt, {}

    def pump(self):
        if self.rt.closed:
            return
        while True:
            evs = self.rt.poll_requests(256)
            if not evs:
                return
            for ev in evs:
                self.q.setdefault(ev.req, []).append(ev)

    def take(self, req):
        return self.q.pop(req, ())


class Peers:
    """kvl_connect once per address; segments looked up by name (or id)."""

    def __init__(self, rt, timeout_ms=10000):
        self.rt, self.timeout_ms, self._by_addr, self._segs = rt, timeout_ms, {}, {}

    def peer(self, addr):
        p = self._by_addr.get(addr)
        if p is None:
            p = self._by_addr[addr] = self.rt.connect(addr, self.timeout_ms)
            self._segs[p] = {s.name: s for s in self.rt.peer_segments(p)}
        return p

    def segment(self, peer, name):
        segs = self._segs[peer]
        if isinstance(name, int):
            for s in segs.values():
                if s.id == name:
                    return s
        elif name in segs:
            return segs[name]
        raise LookupError("kvlane: the peer offers no segment %r (it offers %s)"
                          % (name, sorted(segs)))


class Words:
    """A request's READY and DONE words (kvl_req_step_flags) as the CPU reads and writes them:
    compared cyclically with the epoch, as the lcore and a GPU's wait do."""

    def __init__(self, rt, req):
        f = rt.step_flags(req)
        self.flags = f
        self.step = f.stride // 4
        self.ready = kvlane._kvlane.memory(f.ready, f.n_steps * f.stride).cast("I")
        self.done = kvlane._kvlane.memory(f.done, f.n_steps * f.stride).cast("I")
        self.epoch = f.epoch

    def is_ready(self, k):
        return ((self.ready[k * self.step] - self.epoch) & 0xFFFFFFFF) < 0x80000000

    def wait_ready(self, k, timeout_s):
        """Spin until step k is READY; False after timeout_s (a FAILED request's steps are set
        READY too: its end event says so, the caller checks it)."""
        if self.is_ready(k):
            return True
        end = time.monotonic() + timeout_s
        while not self.is_ready(k):
            if time.monotonic() > end:
                return False
        return True

    def set_done(self, k):
        self.done[k * self.step] = self.epoch


class CudaStreamOps:
    """cuStreamWaitValue32 / cuStreamWriteValue32 on a CUDA stream (torch's
    current_stream().cuda_stream), from the driver library, CUDA 12 ABI (the _v2 entry
    points): the stream waits on a READY word, the host does not."""

    GEQ = 0x0  # CU_STREAM_WAIT_VALUE_GEQ: cyclic, (int32_t)(*addr - value) >= 0
    WRITE_DEFAULT = 0x0  # CU_STREAM_WRITE_VALUE_DEFAULT: after prior work's memory accesses

    def __init__(self):
        try:
            lib = ctypes.CDLL("libcuda.so.1")
        except OSError as e:
            raise RuntimeError("kvlane: the CUDA driver (libcuda.so.1) is not loadable: %s" % e)
        self._err = lib.cuGetErrorString
        self._err.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)]
        fns = []
        for name in ("cuStreamWaitValue32", "cuStreamWriteValue32"):
            fn = getattr(lib, name + "_v2", None) or getattr(lib, name)
            fn.argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint32, ctypes.c_uint]
            fn.restype = ctypes.c_int
            fns.append(fn)
        self._wait, self._write = fns

    def _check(self, r, what):
        if r != 0:
            s = ctypes.c_char_p()
            self._err(r, ctypes.byref(s))
            raise RuntimeError("kvlane: %s failed: %s (CUresult %d)"
                               % (what, (s.value or b"?").decode(), r))

    def wait(self, stream, dev_addr, value):
        self._check(self._wait(stream, dev_addr, value, self.GEQ), "cuStreamWaitValue32")

    def write(self, stream, dev_addr, value):
        self._check(self._write(stream, dev_addr, value, self.WRITE_DEFAULT),
                    "cuStreamWriteValue32")


def stream_layer_ops():
    """_kvlane.stream_layer_ops (one C call per layer for every request's READY wait and DONE
    write on a stream), or None where kvlane was built without CUDA (then CudaStreamOps, a
    ctypes call per word, does it)."""
    try:
        kvlane._kvlane.stream_layer_ops(0, b"", 0)  # an empty table: checks the build only
    except kvlane.Error as e:
        if e.errno == errno.ENOTSUP:
            return None
        raise
    return kvlane._kvlane.stream_layer_ops


def merge_runs(src, dst):
    """Pairs of page indices as runs consecutive on both sides: [(src0, dst0, n), ...]
    (SGLang's page lists, and vLLM's block ids, are mostly such runs)."""
    runs = []
    for s, d in zip(src, dst):
        s, d = int(s), int(d)
        if runs and runs[-1][0] + runs[-1][2] == s and runs[-1][1] + runs[-1][2] == d:
            runs[-1][2] += 1
        else:
            runs.append([s, d, 1])
    return [tuple(r) for r in runs]
