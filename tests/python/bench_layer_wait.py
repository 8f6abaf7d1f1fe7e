#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""wait_for_layer_load's host time per layer for a 32-layer decode step with N requests
(issue 17's target: <= 5 us per layer, and no host sync on the READY path).

A kvlaned on loopback holds a 32-layer segment; each step, the vLLM-shaped connector
(kvlane.connectors.vllm) opens one kvlane request per sequence (--requests N of them, each
--blocks blocks per layer and plane, steps = layers) into the engine's paged cache, and the
step calls wait_for_layer_load for each of the 32 layers, timed one by one (perf_counter_ns):
one call per layer covers all N requests. Paths: "direct" (the default: blocks land straight
in the cache, KVL_REQ_ENGINE_DEST; on CUDA through tcp's bounce buffers, [memory] pool) and,
on CUDA, "landing" ('kvlane.landing': host slots, copied into the cache per layer), the
path the connector took checked (landing_reason) so a row names what it timed.
  CPU cache:  "landed": every layer's READY word set before the calls (waited for outside the
              timing), so the time is the call's own host cost; "in-line": called right after
              start_load_kv, as a forward does (includes waiting for the bytes over tcp).
  CUDA cache (torch.cuda, kvlane built with CUDA, [gpu] enable = true): called right after
              start_load_kv, before the bytes have landed. The call enqueues, per layer, the
              stream's wait on READY (cuStreamWaitValue32), the landed blocks' copy into the
              cache and the DONE write, and returns: the host does not wait. Shown by the
              stream still busy (stream.query() false) after all 32 calls while READY words
              were still unset; and the driver calls alone are timed too (ctypes
              cuStreamWaitValue32; _kvlane.stream_layer_ops on N satisfied words).
Prints one line per figure, JSON lines, and the table last. Run by meson (benchmark
layer_wait) with KVL_KVLANED, KVL_SRC, PYTHONPATH=build/python; --steps, --blocks,
--requests 1,8, --device cpu|cuda|auto.
"""
import argparse
import json
import os
import random
import statistics
import struct
import sys
import time

import torch

import kvlane
from kvlane import connectors
from kvlane.connectors import vllm as kvv

SRC = os.environ["KVL_SRC"]
sys.path.insert(0, os.path.join(SRC, "tests", "eal"))
import kvl_harness as h  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pyini  # noqa: E402

LAYERS, HEADS, BS, HEAD_DIM = 32, 8, 16, 128  # 32 KiB blocks in fp16, as Llama-3-8B's
PEER_BLOCKS = 64
CACHE_BLOCKS = 256


class Cfg:
    def __init__(self, role, extra):
        class K:
            kv_role, kv_connector_extra_config = role, dict(extra)

        class C:
            block_size = BS
        self.kv_transfer_config, self.cache_config = K(), C()


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


class Req:
    pass


def run_case(rt, srv, a, cuda, nreq, path):
    """One (N, path) case: a.steps timed steps after 3 warm-up ones. Returns {mode: [us per
    call]}, start_load_kv's times, the stream-busy counts and the connector."""
    dev = "cuda" if cuda else "cpu"
    pool = torch.zeros((LAYERS, 2, CACHE_BLOCKS, HEADS, BS, HEAD_DIM), dtype=torch.float16,
                       device=dev)
    names = ["l%d" % i for i in range(LAYERS)]
    extra = {"kvlane.landing_blocks": max(64, nreq * a.blocks)}
    if path == "landing":
        extra["kvlane.landing"] = True
    sc = kvv.KvlaneConnector(Cfg("kv_consumer", extra), kvv.KVConnectorRole.SCHEDULER)
    wc = kvv.KvlaneConnector(Cfg("kv_consumer", extra), kvv.KVConnectorRole.WORKER)
    wc.register_kv_caches({n: pool[i] for i, n in enumerate(names)})
    if cuda:
        torch.cuda.synchronize()
    ntok = a.blocks * BS + 1
    per_layer = {"enqueue": []} if cuda else {"landed": [], "inline": []}
    opens, busy, unset_words = [], 0, 0
    rng = random.Random(nreq * 1000 + len(path))
    last = None
    for step in range(a.steps + 3):  # 3 warm-up steps
        local = rng.sample(range(CACHE_BLOCKS), nreq * a.blocks)  # distinct destinations
        remote = rng.sample(range(PEER_BLOCKS), nreq * a.blocks)
        rids = []
        for r in range(nreq):
            q = Req()
            q.request_id = "%s-%d-s%d-r%d" % (path, nreq, step, r)
            lb = local[r * a.blocks:(r + 1) * a.blocks]
            rb = remote[r * a.blocks:(r + 1) * a.blocks]
            q.kv_transfer_params = {
                "do_remote_prefill": True, "remote_host": srv.addr,
                "remote_segment": "bench", "remote_num_tokens": ntok, "remote_block_ids": rb}
            n, _ = sc.get_num_new_matched_tokens(q, 0)
            sc.update_state_after_alloc(q, lb, n)
            rids.append(q.request_id)
            last = (lb, rb)
        wc.bind_connector_metadata(sc.build_connector_meta(None))
        t0 = time.perf_counter_ns()
        wc.start_load_kv(None)
        t1 = time.perf_counter_ns()
        lds = [wc._active[r] for r in rids]
        want_landed = path == "landing"
        assert wc._cache.landed == want_landed, \
            "the %s path was asked, the connector took %s (%s)" % (
                path, "landing" if wc._cache.landed else "direct", wc._cache.landing_reason)
        mode = "enqueue" if cuda else ("landed" if step % 2 == 0 else "inline")
        if mode == "landed":
            for ld in lds:
                for l in range(LAYERS):
                    assert ld.words.wait_ready(l, 30), "layer %d never READY" % l
        ts = []
        for name in names:
            c0 = time.perf_counter_ns()
            wc.wait_for_layer_load(name)
            ts.append(time.perf_counter_ns() - c0)
        if cuda:
            stream = torch.cuda.current_stream()
            not_ready = sum(not ld.words.is_ready(l) for ld in lds for l in range(LAYERS))
            if not_ready and not stream.query():
                busy += 1
            unset_words += not_ready
            torch.cuda.synchronize()
        wc.wait_for_save()
        wc.get_finished(set())
        errs = wc.get_block_ids_with_load_errors()
        assert not errs, "load errors %s: %s" % (errs, getattr(wc, "last_error", ""))
        wc.clear_connector_metadata()
        if step >= 3:
            per_layer[mode] += [t / 1e3 for t in ts]
            opens.append((t1 - t0) / 1e3)
    # the bytes landed where they should: the pattern of the last step's last request
    if cuda:
        torch.cuda.synchronize()
    lb, rb = last
    bb = HEADS * BS * HEAD_DIM * 2
    for l in (0, LAYERS - 1):
        for p in range(2):
            for i in (0, len(lb) - 1):
                got = pool[l, p, lb[i]].contiguous().cpu().view(torch.uint8).numpy()
                off = ((l * 2 + p) * PEER_BLOCKS + rb[i]) * bb
                assert kvlane.pattern_check(bytearray(got.tobytes()), 1, off) == bb, \
                    "%s N=%d layer %d plane %d: bytes differ from the peer's" % (
                        path, nreq, l, p)
    assert wc.stats["layer_waits"] == (a.steps + 3) * nreq * LAYERS, wc.stats
    wc.shutdown()
    return per_layer, opens, busy, unset_words


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--blocks", type=int, default=4, help="blocks per layer and plane")
    ap.add_argument("--requests", default="1,8", help="requests per step, comma-separated")
    ap.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    a = ap.parse_args()
    if a.device == "cuda" and not torch.cuda.is_available():
        print("skipped: --device cuda but torch sees no CUDA device")
        sys.exit(77)
    cuda = a.device == "cuda" or (a.device == "auto" and torch.cuda.is_available())
    nreqs = [int(x) for x in a.requests.split(",")]
    bb = HEADS * BS * HEAD_DIM * 2
    ctx = h.Ctx("pybench", os.environ["KVL_KVLANED"], "pyl")
    srv = ctx.kvlaned("srv", args=h.sets(
        "segment.bench.layers=%d" % LAYERS, "segment.bench.planes=2",
        "segment.bench.blocks=%d" % PEER_BLOCKS, "segment.bench.block_bytes=%d" % bb,
        "segment.bench.access=read", "segment.bench.fill=pattern"))
    # CUDA: [gpu] enable (READY/DONE words mapped) and the pinned [memory] pool (tcp's bounce
    # buffers into VRAM: the direct path); max_blocks for 8 requests of 256 blocks
    ini = pyini.fresh_runtime_ini(
        "pybench", "kvlpyl",
        "[gpu]\nenable = true\n[memory]\npool_size_mb = 64\nchunk_size_kb = 2048\n"
        if cuda else "")
    rows, failed = [], []
    try:
        with kvlane.Runtime(config=ini) as rt:
            connectors.use_runtime(rt)
            for nreq in nreqs:
                for path in (("direct", "landing") if cuda else ("direct",)):
                    try:
                        per_layer, opens, busy, unset = run_case(rt, srv, a, cuda, nreq, path)
                    except (AssertionError, RuntimeError, kvlane.Error) as e:
                        # one case failing leaves the others' figures: said, and exit 1
                        print("FAILED: %s path, N=%d: %s: %s" % (path, nreq,
                                                                 type(e).__name__, e))
                        failed.append((path, nreq))
                        continue
                    for mode, xs in per_layer.items():
                        out = {"device": "cuda" if cuda else "cpu", "path": path,
                               "requests": nreq, "mode": mode, "layers": LAYERS,
                               "blocks": a.blocks, "block_bytes": bb, "steps": a.steps,
                               "us_per_layer_median": round(statistics.median(xs), 2),
                               "us_per_layer_p90": round(pct(xs, 0.9), 2),
                               "start_load_kv_us_median": round(statistics.median(opens), 1)}
                        if cuda:
                            out["steps_stream_busy_after_calls"] = busy
                            out["ready_words_unset_after_calls"] = unset
                            print("%s N=%d: the stream was still waiting after all 32 calls "
                                  "returned in %d of %d steps (READY words unset then: %d): "
                                  "no host sync" % (path, nreq, busy, a.steps + 3, unset))
                        print(json.dumps(out))
                        rows.append(out)
            if cuda:
                sp = torch.cuda.current_stream().cuda_stream
                word = torch.zeros(1, dtype=torch.int32, device="cuda")
                ops, n = kvv._common.CudaStreamOps(), 2000
                c0 = time.perf_counter_ns()
                for _ in range(n):
                    ops.wait(sp, word.data_ptr(), 0)
                ctypes_us = (time.perf_counter_ns() - c0) / n / 1e3
                floor = {}
                for nreq in nreqs:
                    # N entries on one satisfied word (READY = DONE = that word, epoch 0)
                    tab = struct.pack("=QQIIII", word.data_ptr(), word.data_ptr(), 0, 0,
                                      LAYERS, 0) * nreq
                    try:
                        c0 = time.perf_counter_ns()
                        for _ in range(n):
                            kvlane._kvlane.stream_layer_ops(sp, tab, 0)
                        floor[nreq] = (time.perf_counter_ns() - c0) / n / 1e3
                    except RuntimeError as e:
                        print("FAILED: stream_layer_ops alone, N=%d: %s" % (nreq, e))
                        failed.append(("alone", nreq))
                        break
                torch.cuda.synchronize()
                print("cuStreamWaitValue32 alone through ctypes: %.2f us; "
                      "_kvlane.stream_layer_ops alone (wait + DONE write per request): %s; "
                      "through %s"
                      % (ctypes_us, ", ".join("N=%d %.2f us" % kv for kv in floor.items()),
                         kvlane._kvlane.stream_ops_method()))
    finally:
        ctx.cleanup()
    print("\nwait_for_layer_load host time per layer, %d-layer decode step, %d blocks per "
          "request, layer and plane (%d KiB blocks), %d steps:" % (LAYERS, a.blocks, bb >> 10,
                                                                     a.steps))
    print("%-6s %-8s %3s  %-8s %12s %10s %16s %14s" % (
        "device", "path", "N", "mode", "median us", "p90 us", "median us / req",
        "start_load_kv"))
    for r in rows:
        print("%-6s %-8s %3d  %-8s %12.2f %10.2f %16.2f %11.0f us" % (
            r["device"], r["path"], r["requests"], r["mode"], r["us_per_layer_median"],
            r["us_per_layer_p90"], r["us_per_layer_median"] / r["requests"],
            r["start_load_kv_us_median"]))
    for path, nreq in failed:
        print("%-6s %-8s %3d  FAILED (above)" % ("cuda" if cuda else "cpu", path, nreq))
    if failed:
        sys.exit(1)


if __name__ == "__main__":
    main()
