# SPDX-License-Identifier: BSD-3-Clause
"""The connectors (python/kvlane/connectors) driven by a real PyTorch decode engine
(tests/python/engine.py) against a kvlaned prefill peer over tcp:

  - a prefill engine (the vLLM-shaped connector as kv_producer) computes a prompt and PUSHes
    its KV, layer by layer from save_kv_layer, into the kvlaned's segment;
  - a decode engine (kv_consumer) is handed the producer's kv_transfer_params, loads that KV
    into its own paged cache (engine destinations, one kvlane request, steps = layers, waited
    layer by layer), and decodes; its logits and tokens equal, bit for bit, those of the same
    engine that computed the prompt's KV itself;
  - the SGLang-shaped sender/receiver move a prefill pool's pages through the same kvlaned;
  - bad input: a cache of the wrong dtype, shape or device, blocks outside the cache, a
    cache freed while registered, and every call after close() raise naming the problem.
With CUDA (torch.cuda sees a GPU; KVL_PY_CUDA=0 turns it off), test_cuda_decode_layer_wise
puts the prefill and decode engines' caches on the GPU: READY is waited for on the stream
(cuStreamWaitValue32), never on the host, and outputs are compared with the same engine on
the GPU computing its KV itself. One Runtime per process (EAL starts once): the tests share
it, in file order; the last one closes it. Run by meson (suite python).
"""
import os
import sys
import time

import pytest

torch = pytest.importorskip("torch")

import kvlane  # noqa: E402
from kvlane import connectors  # noqa: E402
from kvlane.connectors import sglang as sgl  # noqa: E402
from kvlane.connectors import vllm as kvv  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import engine as eng  # noqa: E402
import pyini  # noqa: E402

sys.path.insert(0, os.path.join(os.environ["KVL_SRC"], "tests", "eal"))
import kvl_harness as h  # noqa: E402

CFG = eng.ModelConfig()
PROMPT_BLOCKS = 32  # blocks per layer and plane of the kvlaned's "prompt" segment
SGL_PAGES = 32
# KVL_PY_CUDA: unset = when torch sees a GPU (kvlane must then be built with CUDA: the
# Runtime starts with [gpu] enable = true), 0 = never, 1 = wanted (skipped, saying so, without)
WANT_CUDA = os.environ.get("KVL_PY_CUDA", "auto")
CUDA = WANT_CUDA != "0" and torch.cuda.is_available()
DEVICE = "cuda" if CUDA else "cpu"


def cuda_only():
    if WANT_CUDA == "0":
        pytest.skip("CUDA part: KVL_PY_CUDA=0")
    if not torch.cuda.is_available():
        pytest.skip("CUDA part: torch sees no CUDA device (it runs on a machine with a GPU, "
                    "kvlane built with CUDA; KVL_PY_CUDA=0 turns it off)")


@pytest.fixture(scope="module")
def server():
    ctx = h.Ctx("pyconn", os.environ["KVL_KVLANED"], "pyc")
    args = h.sets("segment.prompt.layers=%d" % CFG.layers, "segment.prompt.planes=2",
                  "segment.prompt.blocks=%d" % PROMPT_BLOCKS,
                  "segment.prompt.block_bytes=%d" % CFG.block_bytes,
                  "segment.prompt.access=readwrite",
                  "segment.sglpool.layers=%d" % (2 * CFG.layers), "segment.sglpool.planes=1",
                  "segment.sglpool.blocks=%d" % SGL_PAGES,
                  "segment.sglpool.block_bytes=%d" % CFG.block_bytes,
                  "segment.sglpool.access=readwrite",
                  "segment.sglro.layers=%d" % (2 * CFG.layers), "segment.sglro.planes=1",
                  "segment.sglro.blocks=4", "segment.sglro.block_bytes=%d" % CFG.block_bytes,
                  "segment.sglro.access=read",
                  # a segment peers may only WRITE: a PULL from it is refused (EACCES)
                  "segment.wonly.layers=%d" % CFG.layers, "segment.wonly.planes=2",
                  "segment.wonly.blocks=4", "segment.wonly.block_bytes=%d" % CFG.block_bytes,
                  "segment.wonly.access=write")
    try:
        yield ctx.kvlaned("srv", args=args)
    finally:
        ctx.cleanup()


@pytest.fixture(scope="module")
def rt(server):
    # CUDA: [gpu] enable maps the READY/DONE words; the pinned [memory] pool gives tcp its
    # bounce buffers into VRAM, so blocks land straight in a CUDA cache (the direct path):
    # 8 MiB per data connection (the H200 run of 2026-12-01 ran 64 MiB out with the tests'
    # connections), 8 MiB of staging
    r = kvlane.Runtime(config=pyini.fresh_runtime_ini(
        "pyconn", "kvlpyc", "[gpu]\nenable = true\n[memory]\npool_size_mb = 256\n"
        "chunk_size_kb = 2048\n" if CUDA else ""))
    connectors.use_runtime(r)
    yield r
    r.close()


class KVTransferConfig:
    def __init__(self, role, extra=None):
        self.kv_role, self.kv_connector_extra_config = role, dict(extra or {})
        self.kv_connector = "KvlaneConnector"
        self.kv_connector_module_path = "kvlane.connectors.vllm"


class VllmConfig:
    def __init__(self, role, extra=None):
        self.kv_transfer_config = KVTransferConfig(role, extra)

        class CacheConfig:
            block_size = CFG.block_size
        self.cache_config = CacheConfig()


def connector_pair(role, extra=None):
    cfg = VllmConfig(role, extra)
    return (kvv.KvlaneConnector(cfg, kvv.KVConnectorRole.SCHEDULER),
            kvv.KvlaneConnector(cfg, kvv.KVConnectorRole.WORKER))


def prompt(n, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, CFG.vocab, (n,), generator=g).tolist()


def prefill_and_push(server, rt, model, toks, push_blocks, rid, device="cpu", extra=None):
    """The prefill engine (kv_producer): computes @toks, PUSHes their KV to the kvlaned's
    "prompt" segment at @push_blocks; returns the params request_finished hands the decode
    side, and the engine."""
    sc, wc = connector_pair("kv_producer", extra)
    pe = eng.Engine(model, eng.make_cache(CFG, device), sc, wc, device=device)
    req = eng.Request(rid, toks, max_tokens=1, kv_transfer_params={
        "do_remote_decode": True, "push_host": server.addr, "push_segment": "prompt",
        "push_block_ids": push_blocks,
        "geometry": (CFG.layers, 2, PROMPT_BLOCKS, CFG.block_bytes)})
    pe.add_request(req)
    pe.run()
    assert req.status == "FINISHED_LENGTH" and not pe.delayed, \
        "the prefill's blocks were handed back once get_finished said they were sent"
    assert wc.stats["pushes"] == CFG.layers
    return req.finished_params, pe


def reference(model, toks, max_tokens, device="cpu"):
    """The same engine, no connector: it computes the prompt's KV itself (the whole prompt,
    as the prefill engine does), then decodes from the prompt's last token."""
    e = eng.Engine(model, eng.make_cache(CFG, device), device=device)
    req = eng.Request("ref", toks, max_tokens)
    req.block_ids = e.blocks.allocate(-(-(len(toks) + max_tokens) // CFG.block_size))
    out = eng.SchedulerOutput([(req, 0, toks)], set())
    e.forward(out)  # every prompt position's KV, as the prefill engine computes it
    e.blocks.release(req.block_ids)
    req.block_ids = []

    class Prefix:  # the engine's own "connector": the prefix is already in the cache
        def get_num_new_matched_tokens(self, r, n):
            return len(toks) - 1, False

        def update_state_after_alloc(self, r, blocks, n):
            pass

        def build_connector_meta(self, so):
            return None

        def request_finished(self, r, ids):
            return False, None
    e.sc = Prefix()
    # the same block ids as the forward above used (BlockManager hands them out again)
    e.blocks = eng.BlockManager(CFG.num_blocks)
    e.add_request(req)
    e.run()
    return req


def decode_remote(model, params, max_tokens, device="cpu", one_pool=True, rid="d0",
                  extra=None, async_loads=False):
    if async_loads:
        extra = dict(extra or {}, **{"kvlane.load_async": True})
    sc, wc = connector_pair("kv_consumer", extra)
    de = eng.Engine(model, eng.make_cache(CFG, device, one_pool), sc, wc, device=device,
                    async_loads=async_loads)
    req = eng.Request(rid, list(params.pop("_prompt")), max_tokens, kv_transfer_params=params)
    de.add_request(req)
    de.run()
    return req, de, wc


VLLM_ORDER = ["bind_connector_metadata", "start_load_kv"] + \
    ["wait_for_layer_load", "save_kv_layer"] * CFG.layers + \
    ["wait_for_save", "get_finished", "get_block_ids_with_load_errors",
     "clear_connector_metadata"]


def check_same(got, ref):
    assert got.status == "FINISHED_LENGTH", (got.status, got.load_errors)
    assert got.output_token_ids == ref.output_token_ids
    for i, (a, b) in enumerate(zip(got.logits, ref.logits)):
        assert torch.equal(a.cpu(), b.cpu()), "step %d: logits differ by %g" % (
            i, float((a.cpu() - b.cpu()).abs().max()))


def test_vllm_prefill_push_then_decode_pull(server, rt):
    model = eng.Model(CFG)
    toks = prompt(21, 1)  # 3 blocks of 8, the last one partial
    push_blocks = [5, 6, 17]  # where on the peer: not the engine's ids, not one run
    params, pe = prefill_and_push(server, rt, model, toks, push_blocks, "p0")
    assert params["remote_block_ids"] == push_blocks and params["remote_num_tokens"] == 21
    params["_prompt"] = toks
    got, de, wc = decode_remote(model, dict(params), 6)
    ref = reference(model, toks, 6)
    check_same(got, ref)
    assert len(got.output_token_ids) == 6
    # one registration of the whole pool; one kvlane request; a wait per layer
    assert wc._cache.one_registration and wc.stats["loads"] == 1
    assert wc.stats["layer_waits"] == CFG.layers and wc.stats["load_failures"] == 0
    # the hooks in vLLM's order, scheduler side first
    log = [hk for hk, _ in de.hook_log]
    assert log[:5] == ["register_kv_caches", "get_num_new_matched_tokens",
                       "update_state_after_alloc", "build_connector_meta",
                       "bind_connector_metadata"], log[:5]
    assert log[4:4 + len(VLLM_ORDER)] == VLLM_ORDER, log[4:4 + len(VLLM_ORDER)]
    assert ("update_state_after_alloc", ("d0", 20)) in de.hook_log  # all but the last token
    # the engine's blocks really came from the peer: with the peer's KV zeroed first the
    # same decode differs (the test can fail)
    assert got.output_token_ids != decode_zeroed(server, rt, model, params, toks), \
        "decode with the peer's blocks zeroed gave the same tokens"


def decode_zeroed(server, rt, model, params, toks, device="cpu", async_loads=False):
    # the connectors' connection to the server (one per address): each kvl_connect is a
    # connection of its own, and with a GPU open each data connection takes 8 MiB of bounce
    # buffers from the [memory] pool
    peer = connectors._common.peers(rt).peer(server.addr)
    seg = [s for s in rt.peer_segments(peer) if s.name == "prompt"][0]
    zero = bytearray(CFG.block_bytes)
    z = rt.register(zero, name="zero")
    g = seg.geom
    xs = [kvlane.Xfer(i, z.base, ((l * 2 + p) * g.blocks + b) * g.block_bytes, g.block_bytes,
                      seg.id, kvlane.Op.KVL_WRITE)
          for i, (l, p, b) in enumerate((l, p, b) for l in range(CFG.layers) for p in range(2)
                                        for b in params["remote_block_ids"])]
    assert rt.post(peer, xs) == len(xs)
    got, end = [], time.monotonic() + 20
    while len(got) < len(xs) and time.monotonic() < end:
        got += rt.poll()
    assert len(got) == len(xs) and all(c.status == kvlane.Status.KVL_OK for c in got)
    p = dict(params, _prompt=toks)
    req, _, _ = decode_remote(model, p, 6, device=device, rid="dz" + device,
                              async_loads=async_loads)
    return req.output_token_ids


ASYNC_FIRST_STEP = ["get_num_new_matched_tokens", "update_state_after_alloc",
                    "build_connector_meta", "bind_connector_metadata", "start_load_kv",
                    "wait_for_save", "get_finished", "get_block_ids_with_load_errors",
                    "clear_connector_metadata"]


def check_async_order(de, rid, ext):
    """vLLM's whole-request order: (n, True) -> WAITING_FOR_REMOTE_KVS, steps without the
    request's forward until get_finished names it in finished_recving, then it is scheduled
    from its loaded tokens on (not asked again: update_state_after_alloc with 0 tokens)."""
    log = de.hook_log
    hooks = [hk for hk, _ in log]
    assert hooks[0] == "register_kv_caches" and hooks[1:10] == ASYNC_FIRST_STEP, hooks[:10]
    assert log[2] == ("update_state_after_alloc", (rid, ext)), log[2]
    recv = [i for i, e in enumerate(log) if e[0] == "finished_recving" and rid in e[1]]
    assert len(recv) == 1, "finished_recving named %s %d times" % (rid, len(recv))
    # no layer of a forward ran before the load was reported, one ran right after
    assert "wait_for_layer_load" not in hooks[:recv[0]]
    nxt = log.index(("update_state_after_alloc", (rid, 0)), recv[0])
    assert ("get_num_new_matched_tokens", rid) not in log[recv[0]:nxt], log[recv[0]:nxt]
    assert hooks[nxt + 1:nxt + 4] == ["build_connector_meta", "bind_connector_metadata",
                                      "start_load_kv"], hooks[nxt + 1:nxt + 4]
    assert "wait_for_layer_load" in hooks[nxt:]


def test_vllm_whole_request_async_load(server, rt):
    # the second mode: kvlane.load_async, the engine driving it in vLLM's order
    model = eng.Model(CFG)
    toks = prompt(21, 1)
    params, _ = prefill_and_push(server, rt, model, toks, [10, 11, 12], "pas")
    p = dict(params, _prompt=toks)
    got, de, wc = decode_remote(model, dict(p), 6, rid="das", async_loads=True)
    ref = reference(model, toks, 6)
    check_same(got, ref)
    assert wc.stats["loads"] == 1 and wc.stats["load_failures"] == 0
    assert wc.stats["layer_waits"] == 0, "a whole-request load waited on layers"
    check_async_order(de, "das", 20)
    assert not wc._async and not wc._active, "loads left in flight"
    # through landing slots (the copy path), the same outputs, the slots given back
    got2, _, wc2 = decode_remote(model, dict(p), 6, rid="das2", async_loads=True,
                                 extra={"kvlane.landing": True, "kvlane.landing_blocks": 8})
    check_same(got2, ref)
    assert wc2._cache.landed and wc2._cache.free_slots == [(0, 8)]
    # and the peer's bytes mattered
    assert got.output_token_ids != decode_zeroed(server, rt, model, params, toks,
                                                 async_loads=True)


def test_vllm_async_load_failure(server, rt):
    # a whole-request load kvlane refuses: reported in finished_recving (the scheduler stops
    # waiting) with its blocks as load errors
    model = eng.Model(CFG)
    params = {"do_remote_prefill": True, "remote_host": server.addr,
              "remote_segment": "wonly", "remote_block_ids": [0, 1, 2],
              "remote_num_tokens": 21}
    sc, wc = connector_pair("kv_consumer", {"kvlane.load_async": True})
    de = eng.Engine(model, eng.make_cache(CFG), sc, wc, async_loads=True)
    req = eng.Request("abad", prompt(21, 6), 2, kv_transfer_params=params)
    de.add_request(req)
    de.run()
    assert req.status == "FINISHED_ERROR" and req.load_errors == set(req.block_ids[:3])
    assert "request abad: [Errno 13] EACCES" in wc.last_error, wc.last_error
    assert ("finished_recving", ["abad"]) in de.hook_log
    assert "wait_for_layer_load" not in [hk for hk, _ in de.hook_log]


def test_vllm_layer_wait_times_out_naming_the_request(rt):
    # the CPU table path (one host_layer_wait per layer): a READY word that never comes
    # raises after kvlane.layer_timeout_s, naming the layer and the request; nothing is marked
    # waited, and the requests before it in the table got their DONE
    sc, wc = connector_pair("kv_consumer", {"kvlane.layer_timeout_s": 0.05})
    kv = eng.make_cache(CFG)
    wc.register_kv_caches(kv)
    words = bytearray(4 * 4)
    mem = memoryview(words).cast("I")
    base = kvlane._kvlane.buffer_address(words)[0]

    class W:  # step words as kvlane.Words has them: READY at +0 / +8, DONE at +4 / +12
        def __init__(self, i, epoch):
            self.epoch = epoch
            # (stride 0: every layer on the same two words)
            self.flags = kvlane.StepFlags(base + 8 * i, base + 8 * i + 4, 0, 0, 0, epoch,
                                          CFG.layers)

    ok, late = kvv._Load(None, 0, W(0, 3), None), kvv._Load(None, 0, W(1, 9), None)
    late.spec = kvv.LoadSpec("slow", [1], [1], "-", "-")
    mem[0] = 3  # the first request's READY reached, the second's (9) never
    wc._active = {"ok": ok, "slow": late}
    wc._fwd = kvv._Forward(None, [ok, late])
    name = next(iter(kv))
    with pytest.raises(TimeoutError, match="layer %s of request slow not READY" % name):
        wc.wait_for_layer_load(name)
    assert mem[1] == 3 and mem[3] == 0, "DONE of the first written, of the late one not"
    assert not ok.waited and wc.stats["layer_waits"] == 0
    mem[2] = 9  # it comes: the same call goes through, both DONE
    wc.wait_for_layer_load(name)
    assert mem[3] == 9 and ok.waited == {0} and wc.stats["layer_waits"] == 2
    wc._active, wc._fwd = {}, None


def test_vllm_per_layer_registration_and_two_sequences(server, rt):
    # separate per-layer tensors: one registration per layer; two sequences in one batch
    model = eng.Model(CFG)
    ta, tb = prompt(16, 2), prompt(9, 3)
    pa, _ = prefill_and_push(server, rt, model, ta, [0, 1], "pa")
    pb, _ = prefill_and_push(server, rt, model, tb, [30, 2], "pb")
    sc, wc = connector_pair("kv_consumer")
    de = eng.Engine(model, eng.make_cache(CFG, one_pool=False), sc, wc)
    ra = eng.Request("a", ta, 4, kv_transfer_params=pa)
    rb = eng.Request("b", tb, 4, kv_transfer_params=pb)
    de.add_request(ra)
    de.add_request(rb)
    de.run()
    assert not wc._cache.one_registration and len(wc._cache.segments) == CFG.layers
    assert wc.stats["loads"] == 2
    check_same(ra, reference(model, ta, 4))
    check_same(rb, reference(model, tb, 4))


def test_vllm_through_landing_slots(server, rt):
    # 'kvlane.landing' on a CPU cache: blocks land in a host area and are copied in (and out,
    # for the PUSH) by the code a CUDA cache uses, with host waits where CUDA's stream waits
    model = eng.Model(CFG)
    toks = prompt(19, 16)
    land = {"kvlane.landing": True, "kvlane.landing_blocks": 8}
    params, pe = prefill_and_push(server, rt, model, toks, [23, 24, 25], "pl", extra=land)
    assert pe.wc._cache.landed and pe.wc._cache.free_slots == [(0, 8)], "slots not given back"
    got, de, wc = decode_remote(model, dict(params, _prompt=toks), 5, rid="dl", extra=land)
    check_same(got, reference(model, toks, 5))
    assert wc._cache.landed and wc.stats["layer_waits"] == CFG.layers
    assert wc._cache.free_slots == [(0, 8)], wc._cache.free_slots
    # more blocks than landing slots: refused, naming the setting
    sc2, wc2 = connector_pair("kv_consumer", {"kvlane.landing": True,
                                              "kvlane.landing_blocks": 2})
    wc2.register_kv_caches(eng.make_cache(CFG))
    wc2.bind_connector_metadata(kvv.KvlaneConnectorMetadata(loads=[kvv.LoadSpec(
        "big", [1, 2, 3], [1, 2, 3], server.addr, "prompt")]))
    with pytest.raises(RuntimeError, match="3 landing slots asked, the largest free run is 2 "
                       "of 2 .*kvlane.landing_blocks"):
        wc2.start_load_kv(None)


def test_vllm_scheduler_side_prefix_hit():
    # a local prefix-cache hit of one block (8 tokens): the connector loads the blocks after
    # it, from the peer's matching blocks, and counts only those tokens
    sc, _ = connector_pair("kv_consumer")
    r = eng.Request("hit", prompt(21, 17), 2, kv_transfer_params={
        "do_remote_prefill": True, "remote_host": "h:1", "remote_segment": "prompt",
        "remote_block_ids": [10, 11, 12], "remote_num_tokens": 21})
    n, is_async = sc.get_num_new_matched_tokens(r, 8)
    assert (n, is_async) == (12, False)
    sc.update_state_after_alloc(r, [40, 41, 42, 43], n)
    (spec,) = sc.build_connector_meta(None).loads
    assert (spec.local_block_ids, spec.remote_block_ids) == ([41, 42], [11, 12])
    # asked again while its load is handed over: nothing more to match
    assert sc.get_num_new_matched_tokens(r, 8) == (0, False)
    r2 = eng.Request("odd", prompt(21, 18), 2, kv_transfer_params=r.kv_transfer_params)
    n2, _ = sc.get_num_new_matched_tokens(r2, 5)
    with pytest.raises(ValueError, match="5 tokens computed locally, not whole blocks of 8"):
        sc.update_state_after_alloc(r2, [1, 2, 3], n2)


def test_vllm_load_failure_maps_to_blocks(server, rt):
    # the peer's segment has 32 blocks per layer and plane: block 40 is past them. The
    # connector refuses the load (ERANGE) and reports exactly that request's blocks as load
    # errors
    model = eng.Model(CFG)
    params = {"do_remote_prefill": True, "remote_host": server.addr,
              "remote_segment": "prompt", "remote_block_ids": [3, 40, 4],
              "remote_num_tokens": 21}
    sc, wc = connector_pair("kv_consumer")
    de = eng.Engine(model, eng.make_cache(CFG), sc, wc)
    req = eng.Request("bad", prompt(21, 4), 2, kv_transfer_params=params)
    de.add_request(req)
    de.step()
    assert req.status == "FINISHED_ERROR" and req.load_errors == set(req.block_ids[:3])
    assert "ERANGE: block 40 is outside the peer's segment prompt" in wc.last_error and \
        "request bad" in wc.last_error, wc.last_error
    # a segment the peer does not offer
    params2 = dict(params, remote_segment="nope", remote_block_ids=[1, 2, 3])
    req2 = eng.Request("bad2", prompt(21, 5), 2, kv_transfer_params=params2)
    de.add_request(req2)
    de.step()
    assert req2.status == "FINISHED_ERROR" and "no segment 'nope'" in wc.last_error
    # kvlane's own refusal: a segment the peer does not let us READ
    params3 = dict(params, remote_segment="wonly", remote_block_ids=[0, 1, 2])
    req3 = eng.Request("bad3", prompt(21, 6), 2, kv_transfer_params=params3)
    de.add_request(req3)
    de.step()
    assert req3.status == "FINISHED_ERROR" and req3.load_errors == set(req3.block_ids[:3])
    assert "request bad3: [Errno 13] EACCES" in wc.last_error, wc.last_error


def test_vllm_push_refused(server, rt):
    # a push past the end of the peer's segment: the prefill engine goes on, the failure is
    # counted and named, and its blocks still come back to the engine
    model = eng.Model(CFG)
    sc, wc = connector_pair("kv_producer")
    pe = eng.Engine(model, eng.make_cache(CFG), sc, wc)
    req = eng.Request("pbad", prompt(21, 12), max_tokens=1, kv_transfer_params={
        "do_remote_decode": True, "push_host": server.addr, "push_segment": "prompt",
        "push_block_ids": [1, PROMPT_BLOCKS + 2, 3]})
    free0 = len(pe.blocks.free)
    pe.add_request(req)
    pe.run()
    assert wc.stats["push_failures"] == CFG.layers and wc.stats["pushes"] == 0, \
        (wc.stats, wc.last_error)
    # every layer refused by the connector: kvlane alone would have taken layers 0-6, whose
    # "block 34" is block 2 of the next plane inside the segment
    assert "push of pbad, layer 7" in wc.last_error and "ERANGE: block 34 is outside the " \
        "peer's segment prompt (32 blocks" in wc.last_error, wc.last_error
    assert not pe.delayed and len(pe.blocks.free) == free0
    with pytest.raises(ValueError, match="pushes 3 blocks for 21 prompt tokens: the engine "
                       "gave .*, push_block_ids names 2"):
        sc.update_state_after_alloc(eng.Request("short", prompt(21, 13), 1, {
            "do_remote_decode": True, "push_host": server.addr, "push_segment": "prompt",
            "push_block_ids": [1, 2]}), list(range(4)), 0)


def test_vllm_geometry_checked(server, rt):
    # a cache whose blocks are not the peer's size (another dtype) is refused, named
    model = eng.Model(CFG)
    params = {"do_remote_prefill": True, "remote_host": server.addr,
              "remote_segment": "prompt", "remote_block_ids": [1, 2, 3],
              "remote_num_tokens": 21}
    import dataclasses
    half = dataclasses.replace(CFG, dtype=torch.float64)
    sc, wc = connector_pair("kv_consumer")
    wc.register_kv_caches(eng.make_cache(half))
    sc_req = eng.Request("g", prompt(21, 6), 1, kv_transfer_params=params)
    n, _ = sc.get_num_new_matched_tokens(sc_req, 0)
    sc.update_state_after_alloc(sc_req, [9, 10, 11], n)
    wc.bind_connector_metadata(sc.build_connector_meta(None))
    wc.start_load_kv(None)
    assert wc.get_block_ids_with_load_errors() == {9, 10, 11}
    assert "2048-byte blocks" in wc.last_error and "prompt" in wc.last_error, wc.last_error


def test_vllm_bad_caches(rt):
    _, wc = connector_pair("kv_consumer")
    good = eng.make_cache(CFG)
    names = list(good)
    mixed = dict(good)
    mixed[names[3]] = good[names[3]].to(torch.float16)
    with pytest.raises(ValueError, match="layer %s is .*float16.*every layer must match"
                       % names[3].replace(".", r"\.")):
        wc.register_kv_caches(mixed)
    bad_shape = dict(good)
    bad_shape[names[0]] = torch.zeros(3, 4, 5)
    with pytest.raises(ValueError, match="expected \\(2, num_blocks"):
        wc.register_kv_caches(bad_shape)
    strided = {n: t.transpose(2, 3) for n, t in good.items()}
    with pytest.raises(ValueError, match="not contiguous"):
        wc.register_kv_caches(strided)
    with pytest.raises(TypeError, match="not a torch.Tensor"):
        wc.register_kv_caches({names[0]: bytearray(16)})
    meta_dev = {n: torch.empty(t.shape, device="meta") for n, t in good.items()}
    with pytest.raises((ValueError, TypeError), match="device meta"):
        wc.register_kv_caches(meta_dev)


def test_vllm_blocks_outside_the_cache(server, rt):
    sc, wc = connector_pair("kv_consumer")
    wc.register_kv_caches(eng.make_cache(CFG))
    meta = kvv.KvlaneConnectorMetadata(loads=[kvv.LoadSpec("oob", [1, CFG.num_blocks + 5],
                                                           [1, 2], server.addr, "prompt")])
    wc.bind_connector_metadata(meta)
    with pytest.raises(ValueError, match="request oob names local block %d outside the "
                       "registered cache \\(num_blocks %d\\)" % (CFG.num_blocks + 5,
                                                                CFG.num_blocks)):
        wc.start_load_kv(None)
    # the same through the binding: a destination no registered segment holds
    peer = rt.connect(server.addr)
    seg = [s for s in rt.peer_segments(peer) if s.name == "prompt"][0]
    stray = bytearray(CFG.block_bytes)
    with pytest.raises(kvlane.Error) as e:
        rt.open_request(peer, [kvlane.Block(seg.id, 0, CFG.block_bytes,
                                            kvlane._kvlane.buffer_address(stray)[0])],
                        [[0]], engine_dest=True)
    assert e.value.errno == 14 and "EFAULT" in str(e.value) and "block 0" in str(e.value), \
        str(e.value)


def test_vllm_cache_freed_while_registered(server, rt):
    sc, wc = connector_pair("kv_consumer")
    cache = eng.make_cache(CFG)
    wc.register_kv_caches(cache)
    # the tensors are kept, but their storage can still be freed under kvlane
    t = cache[next(iter(cache))]
    st = t.untyped_storage() if hasattr(t, "untyped_storage") else t.storage()
    st.resize_(0)
    meta = kvv.KvlaneConnectorMetadata(loads=[kvv.LoadSpec("freed", [1, 2], [1, 2],
                                                           server.addr, "prompt")])
    wc.bind_connector_metadata(meta)
    with pytest.raises(RuntimeError, match="freed or moved since register_kv_caches"):
        wc.start_load_kv(None)


def test_vllm_abort_and_preemption_cancel(server, rt):
    # the scheduler side: an aborted request's load is canceled in the next step's metadata
    sc, wc = connector_pair("kv_consumer")
    r = eng.Request("ab", prompt(21, 8), 2, kv_transfer_params={
        "do_remote_prefill": True, "remote_host": server.addr, "remote_segment": "prompt",
        "remote_block_ids": [1, 2, 3], "remote_num_tokens": 21})
    n, _ = sc.get_num_new_matched_tokens(r, 0)
    sc.update_state_after_alloc(r, [4, 5, 6], n)
    assert [sp.req_id for sp in sc.build_connector_meta(None).loads] == ["ab"]
    r.status = "FINISHED_ABORTED"
    assert sc.request_finished(r, [4, 5, 6]) == (False, None)
    assert sc.build_connector_meta(None).cancels == ["ab"]
    # the worker side: a 32 MiB load (default.ini's 32-layer pattern segment "kv") canceled
    # right after it opened (handle_preemptions) ends FAILED(canceled): its blocks are load
    # errors with that status, and no layer's wait hangs (a failed request's READY words are
    # set too)
    pool = torch.zeros((32, 2, 16, 8, 16, 128), dtype=torch.float16)  # one registration
    big = {"l%d" % i: pool[i] for i in range(32)}
    _, wc = connector_pair("kv_consumer")
    wc.register_kv_caches(big)
    ids = list(range(16))
    wc.bind_connector_metadata(kvv.KvlaneConnectorMetadata(loads=[kvv.LoadSpec(
        "pre", ids, list(range(16)), server.addr, "kv")]))
    wc.start_load_kv(None)
    wc.handle_preemptions(kvv.KvlaneConnectorMetadata(cancels=["pre"]))
    t0 = time.monotonic()
    for name in big:
        wc.wait_for_layer_load(name)
    assert time.monotonic() - t0 < 10
    errs = wc.get_block_ids_with_load_errors()
    assert errs == set(ids), (errs, getattr(wc, "last_error", ""))
    assert set(wc.block_error_status().values()) == {kvlane.Status.KVL_ERR_CANCELED}
    assert "KVL_ERR_CANCELED" in wc.last_error
    wc.clear_connector_metadata()


def sgl_pool(device="cpu"):
    """SGLang's MHA pool: per layer a K and a V buffer of pages (page_size tokens)."""
    shape = (SGL_PAGES, CFG.heads, CFG.block_size, CFG.head_dim)
    pool = torch.zeros((2 * CFG.layers,) + shape, dtype=CFG.dtype, device=device)
    bufs = list(pool)  # K of every layer, then V of every layer: one allocation
    args = sgl.KVArgs(kv_data_ptrs=[b.data_ptr() for b in bufs],
                      kv_data_lens=[b.numel() * b.element_size() for b in bufs],
                      kv_item_lens=[b[0].numel() * b.element_size() for b in bufs],
                      page_size=CFG.block_size)
    return bufs, args


def test_sglang_sender_and_receiver(server, rt):
    g = torch.Generator().manual_seed(9)
    src, sargs = sgl_pool()
    for b in src:
        b.copy_(torch.randn(b.shape, generator=g))
    dst, dargs = sgl_pool()
    opts = {"kvlane_block_bytes": 2 * CFG.block_bytes}  # runs are cut at 2 pages
    pm = sgl.KvlaneKVManager(sargs, "prefill", opts)
    dm = sgl.KvlaneKVManager(dargs, "decode", opts)
    src_pages = [3, 4, 5, 6, 7, 12, 20, 21]
    peer_pages = [10, 11, 12, 13, 14, 1, 2, 3]  # runs: 3-7/10-14, 12/1, 20-21/2-3
    dst_pages = [0, 1, 2, 30, 31, 8, 9, 16]
    tx = sgl.KvlaneKVSender(pm, server.addr, 77)
    assert tx.poll() == sgl.KVPoll.Bootstrapping
    pm.set_room(77, "sglpool", peer_pages)  # what the decode side said (ZMQ in SGLang)
    tx.init(len(src_pages))
    assert tx.poll() == sgl.KVPoll.WaitingForInput
    tx.send(src_pages[:5])  # a first chunk
    assert tx.poll() == sgl.KVPoll.Transferring, "not Transferring (or Success) before the "\
        "last chunk"
    tx.send(src_pages[5:])
    assert tx.wait() == sgl.KVPoll.Success, tx.exc
    m = tx.get_transfer_metric()
    # runs consecutive on both sides: 3-7 -> 10-14 (chunk 1); 12 -> 1 and 20-21 -> 2-3
    assert m["runs"] == 1 + 2 and m["transfer_total_bytes"] == 8 * 2 * CFG.layers * \
        CFG.block_bytes
    # each of the 16 buffers: the run of 5 pages cut at 2 pages -> 3 blocks, then 1, then 1
    assert m["blocks"] == 2 * CFG.layers * 5, m
    rx = sgl.KvlaneKVReceiver(dm, server.addr, 78)
    assert rx.poll() == sgl.KVPoll.Bootstrapping
    dm.set_room(78, "sglpool", peer_pages)  # where the prefill put them
    assert rx.poll() == sgl.KVPoll.WaitingForInput
    rx.send_metadata(dst_pages)
    assert rx.wait() == sgl.KVPoll.Success, rx.exc
    for b_src, b_dst in zip(src, dst):
        assert torch.equal(b_dst[dst_pages], b_src[src_pages])
        others = [p for p in range(SGL_PAGES) if p not in dst_pages]
        assert not b_dst[others].any(), "bytes landed outside the named pages"


def test_connectors_share_the_runtime(server, rt):
    # a vLLM load and an SGLang PUSH in flight at once on one runtime: each connector gets its
    # own requests' events, whichever polls first (kvl_req_poll hands out everyone's)
    model = eng.Model(CFG)
    toks = prompt(17, 14)
    params, _ = prefill_and_push(server, rt, model, toks, [20, 21, 22], "psh")
    g = torch.Generator().manual_seed(15)
    src, sargs = sgl_pool()
    for b in src:
        b.copy_(torch.randn(b.shape, generator=g))
    pm = sgl.KvlaneKVManager(sargs, "prefill", {})
    pm.set_room(300, "sglpool", [25, 26, 27, 28])
    tx = sgl.KvlaneKVSender(pm, server.addr, 300)
    tx.init(4)
    tx.send([0, 1, 2, 3])  # in flight while the decode engine below loads and polls
    got, _, wc = decode_remote(model, dict(params, _prompt=toks), 3, rid="dsh")
    assert wc.stats["load_failures"] == 0
    check_same(got, reference(model, toks, 3))
    assert tx.wait() == sgl.KVPoll.Success, tx.exc


def sgl_refused(mgr, server, room, segment, peer_pages, pages, why):
    """A one-chunk send that must end Failed, failure_exception() matching @why."""
    mgr.set_room(room, segment, peer_pages)
    tx = sgl.KvlaneKVSender(mgr, server.addr, room)
    tx.init(len(pages))
    tx.send(pages)
    assert tx.wait() == sgl.KVPoll.Failed
    with pytest.raises(sgl.KVTransferError, match=why):
        tx.failure_exception()


def test_sglang_failures(server, rt):
    _, args = sgl_pool()
    mgr = sgl.KvlaneKVManager(args, "prefill", {})
    # a peer page past the segment's pages
    sgl_refused(mgr, server, 90, "sglpool", [SGL_PAGES + 1], [0],
                "room 90: ERANGE: page 33 is outside the peer's segment sglpool")
    # a peer segment of another shape: default.ini's "kv" is 32 x 2 x 16 x 32768
    sgl_refused(mgr, server, 93, "kv", [0], [0], "the peer's segment kv is \\(32, 2, 16, "
                "32768\\): this pool is 16 buffers of 1024-byte pages")
    # kvlane's own refusal, its status kept: a PUSH into a segment peers may only READ
    sgl_refused(mgr, server, 94, "sglro", [0], [0], "room 94: .*EACCES")
    # a local page outside the registered pool
    sgl_refused(mgr, server, 91, "sglpool", [0], [SGL_PAGES + 3],
                "page %d outside the registered pool" % (SGL_PAGES + 3))
    with pytest.raises(ValueError, match="do not describe one pool"):
        sgl.KvlaneKVManager(sgl.KVArgs(kv_data_ptrs=[1, 2], kv_data_lens=[4096],
                                       kv_item_lens=[64]), "prefill", {})
    # an abort ends a transfer in flight with a canceled status
    tx3 = sgl.KvlaneKVSender(mgr, server.addr, 92)
    mgr.set_room(92, "sglpool", list(range(SGL_PAGES)))
    tx3.init(SGL_PAGES)
    tx3.send(list(range(SGL_PAGES)))
    tx3.abort()
    assert tx3.poll() == sgl.KVPoll.Failed
    with pytest.raises(sgl.KVTransferError, match="aborted"):
        tx3.failure_exception()


def test_cuda_decode_layer_wise(server, rt):
    cuda_only()
    # the same weights on the GPU for the prefill, the decode and the reference: the prompt's
    # KV is computed by the same kernels in the prefill engine and in the reference
    model = eng.Model(CFG, device="cuda")
    toks = prompt(21, 11)
    params, _ = prefill_and_push(server, rt, model, toks, [7, 8, 9], "pcu", device="cuda")
    p = dict(params, _prompt=toks)
    got, de, wc = decode_remote(model, p, 6, device="cuda", rid="dcu")
    ref = reference(model, toks, 6, device="cuda")
    check_same(got, ref)
    assert wc._cache.cuda and wc.stats["layer_waits"] == CFG.layers
    assert wc.stats["load_failures"] == 0
    # and it depended on the peer's bytes: zeroed there, the same decode differs
    assert got.output_token_ids != decode_zeroed(server, rt, model, params, toks, "cuda")


def test_cuda_direct_landing_slots_and_async(server, rt):
    cuda_only()
    # the three CUDA paths against the same reference: straight into the cache (the default:
    # one stream_layer_ops call per layer, no copy), through landing slots (copied on the
    # stream per layer), and whole-request loads (vLLM's async mode)
    model = eng.Model(CFG, device="cuda")
    toks = prompt(21, 11)
    params, _ = prefill_and_push(server, rt, model, toks, [13, 14, 15], "pcd", device="cuda")
    p = dict(params, _prompt=toks)
    ref = reference(model, toks, 6, device="cuda")
    got, _, wc = decode_remote(model, dict(p), 6, device="cuda", rid="dcd")
    check_same(got, ref)
    assert not wc._cache.landed, "direct path not taken: %s" % wc._cache.landing_reason
    assert wc._layer_ops is not None and wc.stats["layer_waits"] == CFG.layers
    got2, _, wc2 = decode_remote(model, dict(p), 6, device="cuda", rid="dcl",
                                 extra={"kvlane.landing": True})
    check_same(got2, ref)
    assert wc2._cache.landed and wc2.stats["layer_waits"] == CFG.layers
    got3, de3, wc3 = decode_remote(model, dict(p), 6, device="cuda", rid="dca",
                                   async_loads=True)
    check_same(got3, ref)
    assert wc3.stats["layer_waits"] == 0 and wc3.stats["load_failures"] == 0
    check_async_order(de3, "dca", 20)
    assert got.output_token_ids != decode_zeroed(server, rt, model, params, toks, "cuda")


def test_register_wrong_device(rt):
    # a tensor with no memory kvlane can register is refused, naming its device
    with pytest.raises(ValueError, match="the tensor is on device meta: kvlane registers CPU "
                       "or CUDA memory"):
        rt.register(torch.empty(1024, device="meta"))


def test_telemetry_module(server):
    # python -m kvlane.telemetry against the kvlaned's own telemetry socket
    import subprocess
    env = dict(os.environ)
    run = [sys.executable, "-m", "kvlane.telemetry", "-s", server.socket_path, "-w", "5"]
    r = subprocess.run(run + ["/kvlane/info", "/kvlane/segments"], capture_output=True,
                       text=True, timeout=30, env=env)
    assert r.returncode == 0, r.stderr
    info, segs = [__import__("json").loads(x) for x in r.stdout.splitlines()]
    assert info["/kvlane/info"]["pid"] == server.proc.pid
    assert {"prompt", "sglpool", "kv"} <= set(segs["/kvlane/segments"]["name"])
    r = subprocess.run(run + ["--list"], capture_output=True, text=True, timeout=30, env=env)
    assert r.returncode == 0 and "/kvlane/info" in r.stdout, r.stdout + r.stderr
    r = subprocess.run(run + ["-i", "0.05", "-n", "3", "/kvlane/info"], capture_output=True,
                       text=True, timeout=30, env=env)
    assert r.returncode == 0 and len(r.stdout.splitlines()) == 3, r.stdout + r.stderr
    r = subprocess.run(run + ["/kvlane/nothing"], capture_output=True, text=True, timeout=30,
                       env=env)
    assert r.returncode == 1 and "/kvlane/nothing: null reply" in r.stderr, r.stderr
    r = subprocess.run([sys.executable, "-m", "kvlane.telemetry", "-f", "no-such-prefix",
                        "/kvlane/info"], capture_output=True, text=True, timeout=30, env=env)
    assert r.returncode == 1 and "no telemetry socket at" in r.stderr, r.stderr


def test_after_close(server, rt):
    sc, wc = connector_pair("kv_consumer")
    wc.register_kv_caches(eng.make_cache(CFG))
    _, args = sgl_pool()
    mgr = sgl.KvlaneKVManager(args, "prefill", {})
    tx = sgl.KvlaneKVSender(mgr, server.addr, 99)
    mgr.set_room(99, "sglpool", [0])
    rt.close()
    meta = kvv.KvlaneConnectorMetadata(loads=[kvv.LoadSpec("late", [1], [1], server.addr,
                                                           "prompt")])
    wc.bind_connector_metadata(meta)
    with pytest.raises(kvlane.Error, match="EBADF: start_load_kv: the kvlane runtime is "
                       "closed"):
        wc.start_load_kv(None)
    _, wc2 = connector_pair("kv_consumer")
    with pytest.raises(RuntimeError, match="no Runtime"):
        wc2.register_kv_caches(eng.make_cache(CFG))
    tx.init(1)
    tx.send([0])
    assert tx.poll() == sgl.KVPoll.Failed
    with pytest.raises(sgl.KVTransferError, match="EBADF"):
        tx.failure_exception()
