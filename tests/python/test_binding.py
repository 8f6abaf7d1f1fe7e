# SPDX-License-Identifier: BSD-3-Clause
"""The Python binding (python/kvlane) against a kvlaned on loopback, over tcp: bytes READ from
its pattern segment and checked, bytes WRITTEN and READ back, the request API, and bad input.
One Runtime per process (EAL starts once), so the tests share it, in file order; the last ones
close it. Run by meson (suite python): KVL_KVLANED, KVL_SRC, PYTHONPATH=build/python.
"""
import errno
import os
import socket
import struct
import sys
import gc
import threading
import time
import weakref

import pytest

import kvlane

sys.path.insert(0, os.path.join(os.environ["KVL_SRC"], "tests", "eal"))
import kvl_harness as h  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pyini  # noqa: E402

SEED = 1  # config/default.ini: [segment.kv] fill = pattern, pattern_seed default
WAIT_S = 20.0


@pytest.fixture(scope="module")
def server():
    ctx = h.Ctx("python", os.environ["KVL_KVLANED"], "py")
    # a writable segment beside default.ini's read-only pattern segment "kv"
    inbox = h.sets("segment.inbox.blocks=8", "segment.inbox.block_bytes=65536",
                   "segment.inbox.planes=1", "segment.inbox.access=readwrite")
    try:
        yield ctx.kvlaned("srv", args=inbox)
    finally:
        ctx.cleanup()


@pytest.fixture(scope="module")
def rt(server):
    r = kvlane.Runtime(config=pyini.fresh_runtime_ini("python", "kvlpy"))
    yield r
    r.close()


@pytest.fixture(scope="module")
def peer(rt, server):
    return rt.connect(server.addr, 10000)


def kv_seg(rt, peer, name="kv"):
    segs = {s.name: s for s in rt.peer_segments(peer)}
    assert name in segs, "kvlaned offers %s" % list(segs)
    return segs[name]


def wait_completions(rt, n):
    got, end = [], time.monotonic() + WAIT_S
    while len(got) < n and time.monotonic() < end:
        got += rt.poll()
    assert len(got) == n, "%d of %d completions within %s s" % (len(got), n, WAIT_S)
    return got


def test_enums_carry_the_c_names():
    assert kvlane.Status.KVL_OK == 0 and kvlane.Status(1).name == "KVL_ERR_BOUNDS"
    assert str(kvlane.Status.KVL_ERR_CONN_LOST) == "conn-lost"
    assert int(kvlane.Op.KVL_READ) == 2 and int(kvlane.Access.KVL_REMOTE_WRITE) == 2


def test_peer_segments(rt, peer):
    kv = kv_seg(rt, peer)
    assert kv.geom == kvlane.Geom(32, 2, 16, 32768)
    assert kv.length == 32 * 2 * 16 * 32768 and kv.access == int(kvlane.Access.KVL_REMOTE_READ)


def test_read_pattern_into_allocated_segment(rt, peer):
    kv = kv_seg(rt, peer)
    local = rt.alloc_segment("py-read", (1, 1, 8, kv.geom.block_bytes), 0)
    bb = kv.geom.block_bytes
    # 8 blocks from all over the peer's segment: (layer, plane, block)
    where = [(0, 0, 0), (0, 1, 15), (3, 1, 7), (17, 0, 2), (31, 1, 15), (8, 0, 8), (9, 1, 1),
             (30, 0, 0)]
    offs = [((l * 2 + p) * 16 + b) * bb for l, p, b in where]
    xs = [kvlane.Xfer(i, local.base + i * bb, off, bb, kv.id, kvlane.Op.KVL_READ)
          for i, off in enumerate(offs)]
    assert rt.post(peer, xs) == len(xs)
    done = wait_completions(rt, len(xs))
    assert sorted(c.cookie for c in done) == list(range(len(xs)))
    assert all(c.status is kvlane.Status.KVL_OK and c.bytes == bb for c in done), done
    for i, off in enumerate(offs):
        block = local.view[i * bb:(i + 1) * bb]
        assert kvlane.pattern_check(block, SEED, off) == bb, "block %d differs" % i
    # and the check itself sees a changed byte
    local.view[5] ^= 0xFF
    assert kvlane.pattern_check(local.view[:bb], SEED, offs[0]) == 5


def test_write_then_read_back_registered_buffers(rt, peer):
    inbox = kv_seg(rt, peer, "inbox")
    n = 3 * 65536
    src = bytearray(os.urandom(n))
    dst = bytearray(n)
    s = rt.register(src, name="py-src", geom=(1, 1, 3, 65536))
    d = rt.register(dst, name="py-dst")
    assert s.base != d.base and d.length == n
    assert rt.post(peer, [kvlane.Xfer(10 + i, s.base + i * 65536, (i + 2) * 65536, 65536,
                                      inbox.id, kvlane.Op.KVL_WRITE) for i in range(3)]) == 3
    assert all(c.status == kvlane.Status.KVL_OK for c in wait_completions(rt, 3))
    assert rt.post(peer, [kvlane.Xfer(20, d.base, 2 * 65536, n, inbox.id,
                                      kvlane.Op.KVL_READ)]) == 1
    (c,) = wait_completions(rt, 1)
    assert c.status == kvlane.Status.KVL_OK and c.bytes == n
    assert dst == src


def test_registered_bytearray_cannot_be_resized(rt):
    buf = bytearray(8192)
    rt.register(buf, name="py-pinned")
    with pytest.raises(BufferError):
        buf.extend(b"x")  # kvlane holds the export: the memory cannot move under it


KEPT = []  # weak references to objects registered and dropped by the test: alive until close()


def test_numpy_and_torch(rt):
    np = pytest.importorskip("numpy")
    a = np.zeros((4, 4096), dtype=np.uint8)
    seg = rt.register(a, name="py-numpy")
    assert seg.base == a.ctypes.data and seg.length == a.nbytes
    with pytest.raises(ValueError, match="not contiguous"):
        rt.register(a[:, ::2])
    KEPT.append(weakref.ref(a))
    del a
    gc.collect()
    assert KEPT[-1]() is not None, "a registered array was freed while registered"
    torch = pytest.importorskip("torch")
    t = torch.zeros((8, 1024), dtype=torch.float32)
    seg = rt.register(t, name="py-torch")
    assert seg.base == t.data_ptr() and seg.length == t.numel() * 4
    with pytest.raises(ValueError, match="not contiguous"):
        rt.register(t.t())
    KEPT.append(weakref.ref(t))
    del t
    gc.collect()
    assert KEPT[-1]() is not None, "a registered tensor was freed while registered"


def test_dlpack(rt):
    torch = pytest.importorskip("torch")
    from torch.utils import dlpack
    t = torch.arange(4096, dtype=torch.int32)
    cap = dlpack.to_dlpack(t)
    seg = rt.register(cap, name="py-dlpack")
    assert seg.base == t.data_ptr() and seg.length == 4096 * 4
    with pytest.raises(ValueError, match="DLPack tensor is not contiguous"):
        rt.register(dlpack.to_dlpack(t.view(64, 64).t()))
    with pytest.raises(TypeError, match="DLPack capsule that is still unconsumed"):
        used = dlpack.to_dlpack(t)
        dlpack.from_dlpack(used)  # consumed: renamed used_dltensor
        rt.register(used)


def test_cuda_tensor(rt):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device for torch")
    t = torch.zeros((16, 4096), dtype=torch.uint8, device="cuda")
    seg = rt.register(t, name="py-cuda")
    # detected as device memory (cuPointerGetAttributes), not declared
    assert seg.mem == 1 and seg.gpu == t.device.index and seg.base == t.data_ptr()
    with pytest.raises(ValueError, match="not contiguous"):
        rt.register(t[:, ::2])


def test_request_api_pull(rt, peer):
    kv = kv_seg(rt, peer)
    bb = kv.geom.block_bytes
    offs = [0, 5 * bb, 40 * bb, 1023 * bb]
    blocks = [kvlane.Block(kv.id, o, bb) for o in offs]
    req = rt.open_request(peer, blocks, [[0, 1], [2, 3]], user=77)
    seen, end = [], time.monotonic() + WAIT_S
    while time.monotonic() < end:
        for ev in rt.poll_requests():
            assert ev.req == req and ev.user == 77
            seen.append(ev.type)
            if ev.type == kvlane.ReqEventType.KVL_REQ_EV_STEP_READY:
                for b in ([0, 1] if ev.step == 0 else [2, 3]):
                    assert kvlane.pattern_check((rt.block_addr(req, b), bb), SEED,
                                                offs[b]) == bb
                rt.step_done(req, ev.step)
        if kvlane.ReqEventType.KVL_REQ_EV_DONE in seen:
            break
    assert seen == [kvlane.ReqEventType.KVL_REQ_EV_STEP_READY] * 2 + \
        [kvlane.ReqEventType.KVL_REQ_EV_DONE], seen
    with pytest.raises(kvlane.Error, match="^.*ENOENT: no such request"):
        rt.step_done(req, 0)


def test_request_api_step_flags(rt, peer):
    # a CPU engine on the READY/DONE words alone: no poll per step, no step_done
    kv = kv_seg(rt, peer)
    bb = kv.geom.block_bytes
    offs = [7 * bb, 300 * bb, 301 * bb]
    req = rt.open_request(peer, [kvlane.Block(kv.id, o, bb) for o in offs], [[0], [1, 2]],
                          step_flags=True)
    f = rt.step_flags(req)
    assert f.n_steps == 2 and f.stride >= 64
    ready = kvlane._kvlane.memory(f.ready, f.n_steps * f.stride).cast("I")
    done = kvlane._kvlane.memory(f.done, f.n_steps * f.stride).cast("I")
    words = f.stride // 4
    for k, blocks in enumerate([[0], [1, 2]]):
        end = time.monotonic() + WAIT_S
        while ((ready[k * words] - f.epoch) & 0xFFFFFFFF) >= 0x80000000:
            assert time.monotonic() < end, "step %d never READY" % k
        for b in blocks:
            assert kvlane.pattern_check((rt.block_addr(req, b), bb), SEED, offs[b]) == bb
        with pytest.raises(kvlane.Error, match="EINVAL"):
            rt.step_done(req, k)  # a flags request's DONE is its word, one way only
        done[k * words] = f.epoch
    seen, end = [], time.monotonic() + WAIT_S
    while kvlane.ReqEventType.KVL_REQ_EV_DONE not in seen and time.monotonic() < end:
        seen += [ev.type for ev in rt.poll_requests() if ev.req == req]
    assert seen[-1:] == [kvlane.ReqEventType.KVL_REQ_EV_DONE], seen


def test_layer_waits_in_one_call(rt, peer):
    # host_layer_wait on a real request's words: it waits each READY, writes DONE, and the
    # request ends DONE without a step_done or a word written from Python
    kv = kv_seg(rt, peer)
    bb = kv.geom.block_bytes
    offs = [11 * bb, 12 * bb]
    req = rt.open_request(peer, [kvlane.Block(kv.id, o, bb) for o in offs], [[0], [1]],
                          step_flags=True)
    f = rt.step_flags(req)
    tab = struct.pack("=QQIIII", f.ready, f.done, f.stride, f.epoch, f.n_steps, 0)
    for k in range(2):
        assert kvlane._kvlane.host_layer_wait(tab, k, WAIT_S) == -1, "step %d not READY" % k
        assert kvlane.pattern_check((rt.block_addr(req, k), bb), SEED, offs[k]) == bb
    seen, end = [], time.monotonic() + WAIT_S
    while kvlane.ReqEventType.KVL_REQ_EV_DONE not in seen and time.monotonic() < end:
        seen += [ev.type for ev in rt.poll_requests() if ev.req == req]
    assert seen[-1:] == [kvlane.ReqEventType.KVL_REQ_EV_DONE], seen
    # words never READY: the first late entry's index after the timeout, its DONE unwritten;
    # compared cyclically, as the lcore and the GPU do
    words = bytearray(8)
    a = kvlane._kvlane.buffer_address(words)[0]
    mem = memoryview(words).cast("I")
    mem[0] = 4
    late = struct.pack("=QQIIII", a, a + 4, 0, 5, 1, 0)
    t0 = time.monotonic()
    assert kvlane._kvlane.host_layer_wait(late * 2, 0, 0.05) == 0
    assert time.monotonic() - t0 >= 0.05 and mem[1] == 0
    mem[0] = 0xFFFFFFFF  # READY wrapped past the epoch's predecessor, not at it: still late
    assert kvlane._kvlane.host_layer_wait(late, 0, 0.01) == 0
    mem[0] = 6  # past the epoch: reached (cyclic >=)
    assert kvlane._kvlane.host_layer_wait(late, 0, 0.01) == -1 and mem[1] == 5
    # bad tables: named, nothing written
    with pytest.raises(ValueError,
                       match="host_layer_wait: the table is 3 bytes, not a multiple of 32"):
        kvlane._kvlane.host_layer_wait(b"123", 0, 1.0)
    with pytest.raises(ValueError,
                       match=r"host_layer_wait: entry 0: no such step \(layer 1 of 1\)"):
        kvlane._kvlane.host_layer_wait(late, 1, 1.0)
    with pytest.raises(ValueError, match="host_layer_wait: timeout_s -1.0 is not >= 0"):
        kvlane._kvlane.host_layer_wait(late, 0, -1.0)
    with pytest.raises(ValueError, match="host_layer_wait: entry 1: a word's address is 0"):
        kvlane._kvlane.host_layer_wait(late + struct.pack("=QQIIII", 0, 0, 0, 5, 1, 0), 0, 1.0)
    try:
        kvlane._kvlane.stream_layer_ops(0, b"", 0)
    except kvlane.Error as e:  # a build without CUDA: says so
        assert e.errno == errno.ENOTSUP and "built without CUDA" in str(e)
        return
    with pytest.raises(ValueError,
                       match=r"stream_layer_ops: entry 0: no such step \(layer 3 of 1\)"):
        kvlane._kvlane.stream_layer_ops(0, late, 3)
    with pytest.raises(ValueError,
                       match=r"stream_layer_ops: entry 0: a word's address is 0 .*\[gpu\] enable"):
        kvlane._kvlane.stream_layer_ops(0, struct.pack("=QQIIII", 0, 0, 0, 5, 1, 0), 0)
    assert kvlane._kvlane.stream_layer_ops(0, b"", 0) == 0  # nothing to wait on


def test_request_api_push(rt, peer):
    inbox = kv_seg(rt, peer, "inbox")
    src = bytearray(os.urandom(2 * 65536))
    s = rt.register(src, name="py-push", geom=(1, 1, 2, 65536))
    req = rt.open_request(peer, [kvlane.Block(inbox.id, (6 + i) * 65536, 65536,
                                              s.base + i * 65536) for i in range(2)],
                          [[0], [1]], dir=kvlane.ReqDir.KVL_REQ_PUSH)
    seen, end = [], time.monotonic() + WAIT_S
    while kvlane.ReqEventType.KVL_REQ_EV_DONE not in seen and time.monotonic() < end:
        for ev in rt.poll_requests():
            seen.append(ev.type)
            if ev.type == kvlane.ReqEventType.KVL_REQ_EV_STEP_READY:
                rt.step_done(req, ev.step)
    assert seen[-1:] == [kvlane.ReqEventType.KVL_REQ_EV_DONE], seen
    back = bytearray(2 * 65536)
    d = rt.register(back, name="py-push-back")
    assert rt.post(peer, [kvlane.Xfer(30, d.base, 6 * 65536, len(back), inbox.id,
                                      kvlane.Op.KVL_READ)]) == 1
    (c,) = wait_completions(rt, 1)
    assert c.status == kvlane.Status.KVL_OK and back == src


def test_bad_input(rt, peer):
    kv = kv_seg(rt, peer)
    with pytest.raises(TypeError, match="expected a PyTorch tensor"):
        rt.register(12345)
    with pytest.raises(TypeError, match="transfer 0 is not a tuple"):
        rt.post(peer, ["not a transfer"])
    with pytest.raises(TypeError):
        rt.post(peer, [kvlane.Xfer("cookie", 0, 0, 1, kv.id, kvlane.Op.KVL_READ)])
    with pytest.raises(OverflowError):
        rt.post(peer, [kvlane.Xfer(-1, 0, 0, 1, kv.id, kvlane.Op.KVL_READ)])
    heap = bytearray(4096)  # not registered
    with pytest.raises(kvlane.Error) as e:
        rt.post(peer, [kvlane.Xfer(1, kvlane._kvlane.buffer_address(heap)[0], 0, 4096, kv.id,
                                   kvlane.Op.KVL_READ)])
    assert e.value.errno == 14 and str(e.value).startswith("[Errno 14] EFAULT: ")
    with pytest.raises(kvlane.Error, match="EINVAL"):
        rt.open_request(peer, [kvlane.Block(kv.id, 0, 4096)], [[]])
    with pytest.raises(kvlane.Error, match="ENOENT: a segment the peer does not offer"):
        rt.open_request(peer, [kvlane.Block(999, 0, 4096)], [[0]])
    with pytest.raises(ValueError, match="geom"):
        rt.register(bytearray(4096), geom=(1, 1, 2, 4096))
    # a READ past the remote end is taken, and completes with a typed status
    local = rt.alloc_segment("py-bounds", (1, 1, 1, 4096), 0)
    assert rt.post(peer, [kvlane.Xfer(99, local.base, kv.length - 100, 4096, kv.id,
                                      kvlane.Op.KVL_READ)]) == 1
    (c,) = wait_completions(rt, 1)
    assert c.status is kvlane.Status.KVL_ERR_BOUNDS and c.cookie == 99


def test_connect_releases_the_gil(rt):
    # a listener that never answers: kvl_connect waits out its timeout with the GIL released
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(1)
    ticks, stop = [0], threading.Event()

    def count():
        while not stop.is_set():
            ticks[0] += 1
            time.sleep(0.001)

    t = threading.Thread(target=count)
    t.start()
    t0 = time.monotonic()
    try:
        with pytest.raises(kvlane.Error) as e:
            rt.connect("127.0.0.1:%d" % s.getsockname()[1], 1000)
    finally:
        stop.set()
        t.join()
        s.close()
    took = time.monotonic() - t0
    assert took >= 0.9, "connect returned after %.2f s" % took
    assert ticks[0] > 100, "the other thread ran %d times in %.2f s" % (ticks[0], took)
    assert str(e.value).split("] ")[1].split(":")[0].startswith("E"), str(e.value)


def test_second_runtime_refused(rt):
    with pytest.raises(kvlane.Error) as e:
        kvlane.Runtime(config="/dev/null/unused.ini")
    assert e.value.errno == 114 and "EAL starts once per process" in str(e.value)  # EALREADY
    with pytest.raises(TypeError, match="config must be a str"):
        kvlane.Runtime(config=None)
    with pytest.raises(TypeError, match="sets must be a list of str"):
        kvlane.Runtime(config="x.ini", sets="runtime.name=x")
    with pytest.raises(TypeError, match="item 1 is not a str"):
        kvlane.Runtime(config="x.ini", eal=["--no-huge", 256])


def test_after_close(rt, peer):
    seg = rt.register(bytearray(4096), name="py-last")
    rt.close()
    assert rt.closed
    rt.close()  # twice is fine
    gc.collect()
    assert all(w() is None for w in KEPT), "close() keeps registered objects alive"
    assert KEPT or "numpy" not in sys.modules, "no registered object was checked"
    for call in (lambda: rt.connect("127.0.0.1:1"), lambda: rt.poll(),
                 lambda: rt.peer_segments(peer), lambda: rt.register(bytearray(16)),
                 lambda: rt.post(peer, [kvlane.Xfer(1, seg.base, 0, 16, 1, 2)]),
                 lambda: rt.poll_requests(), lambda: rt.listen_addr):
        with pytest.raises(kvlane.Error) as e:
            call()
        assert e.value.errno == 9 and "EBADF: the runtime is closed" in str(e.value)
