#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""wait_for_layer_load's host time per layer for a 32-layer decode step (issue 17's target:
<= 5 us per layer, and no host sync on the READY path).

A kvlaned on loopback holds a 32-layer segment; each step, the vLLM-shaped connector
(kvlane.connectors.vllm) opens one kvlane request for a sequence of --blocks blocks per layer
and plane (steps = layers) into the engine's paged cache, and the step calls
wait_for_layer_load for each of the 32 layers, timed one by one (perf_counter_ns):
  CPU cache:  "landed": every layer's READY word set before the calls (waited for outside the
              timing), so the time is the call's own host cost; "in-line": called right after
              start_load_kv, as a forward does (includes waiting for the bytes over tcp).
  CUDA cache (torch.cuda, kvlane built with CUDA, [gpu] enable = true): called right after
              start_load_kv, before the bytes have landed. The call enqueues, per layer, the
              stream's wait on READY (cuStreamWaitValue32), the landed blocks' copy into the
              cache and the DONE write, and returns: the host does not wait. Shown by the
              stream still busy (stream.query() false) after all 32 calls while READY words
              were still unset; and the ctypes wait alone is timed too.
Prints one line per figure and a JSON line. Run by meson (benchmark layer_wait) with
KVL_KVLANED, KVL_SRC, PYTHONPATH=build/python; --steps, --blocks, --device cpu|cuda|auto.
"""
import argparse
import json
import os
import statistics
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


class Cfg:
    def __init__(self, role):
        class K:
            kv_role, kv_connector_extra_config = role, {"kvlane.landing_blocks": 64}

        class C:
            block_size = BS
        self.kv_transfer_config, self.cache_config = K(), C()


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--blocks", type=int, default=4, help="blocks per layer and plane")
    ap.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    a = ap.parse_args()
    if a.device == "cuda" and not torch.cuda.is_available():
        print("skipped: --device cuda but torch sees no CUDA device")
        sys.exit(77)
    cuda = a.device == "cuda" or (a.device == "auto" and torch.cuda.is_available())
    dtype = torch.float16
    bb = HEADS * BS * HEAD_DIM * 2
    ctx = h.Ctx("pybench", os.environ["KVL_KVLANED"], "pyl")
    srv = ctx.kvlaned("srv", args=h.sets(
        "segment.bench.layers=%d" % LAYERS, "segment.bench.planes=2",
        "segment.bench.blocks=%d" % PEER_BLOCKS, "segment.bench.block_bytes=%d" % bb,
        "segment.bench.access=read", "segment.bench.fill=pattern"))
    ini = pyini.fresh_runtime_ini("pybench", "kvlpyl", "[gpu]\nenable = true\n" if cuda else "")
    out = {"device": "cuda" if cuda else "cpu", "layers": LAYERS, "blocks": a.blocks,
           "block_bytes": bb, "steps": a.steps}
    try:
        with kvlane.Runtime(config=ini) as rt:
            connectors.use_runtime(rt)
            dev = "cuda" if cuda else "cpu"
            pool = torch.zeros((LAYERS, 2, 256, HEADS, BS, HEAD_DIM), dtype=dtype, device=dev)
            names = ["l%d" % i for i in range(LAYERS)]
            sc = kvv.KvlaneConnector(Cfg("kv_consumer"), kvv.KVConnectorRole.SCHEDULER)
            wc = kvv.KvlaneConnector(Cfg("kv_consumer"), kvv.KVConnectorRole.WORKER)
            wc.register_kv_caches({n: pool[i] for i, n in enumerate(names)})
            # time Runtime.open_request (kvl_req_open: it waits for the NIC lcore to take
            # the OPEN) apart from the connector's own Python in start_load_kv
            open_ns, open_request = [], rt.open_request

            def timed_open(*args, **kw):
                c0 = time.perf_counter_ns()
                try:
                    return open_request(*args, **kw)
                finally:
                    open_ns.append(time.perf_counter_ns() - c0)
            rt.open_request = timed_open
            if cuda:
                torch.cuda.synchronize()
            ntok = a.blocks * BS + 1
            per_layer = {"landed": [], "inline": []} if not cuda else {"enqueue": []}
            opens, busy, unset_words = [], 0, 0

            class Req:
                pass
            for step in range(a.steps + 3):  # 3 warm-up steps
                r = Req()
                r.request_id = "s%d" % step
                r.kv_transfer_params = {
                    "do_remote_prefill": True, "remote_host": srv.addr,
                    "remote_segment": "bench", "remote_num_tokens": ntok,
                    "remote_block_ids": [(step * a.blocks + i) % PEER_BLOCKS
                                         for i in range(a.blocks)]}
                n, _ = sc.get_num_new_matched_tokens(r, 0)
                local = [(step * 7 + 3 * i) % 256 for i in range(a.blocks)]
                sc.update_state_after_alloc(r, local, n)
                wc.bind_connector_metadata(sc.build_connector_meta(None))
                t0 = time.perf_counter_ns()
                wc.start_load_kv(None)
                t1 = time.perf_counter_ns()
                ld = wc._active[r.request_id]
                mode = "enqueue" if cuda else ("landed" if step % 2 == 0 else "inline")
                if mode == "landed":
                    for l in range(LAYERS):
                        assert ld.words.wait_ready(l, 30), "layer %d never READY" % l
                ts = []
                for name in names:
                    c0 = time.perf_counter_ns()
                    wc.wait_for_layer_load(name)
                    ts.append(time.perf_counter_ns() - c0)
                if cuda:
                    stream = torch.cuda.current_stream()
                    not_ready = sum(not ld.words.is_ready(l) for l in range(LAYERS))
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
            # the bytes landed where they should: the pattern of the last step's blocks
            last = a.steps + 2
            rb = [(last * a.blocks + i) % PEER_BLOCKS for i in range(a.blocks)]
            lb = [(last * 7 + 3 * i) % 256 for i in range(a.blocks)]
            if cuda:
                torch.cuda.synchronize()
            for l in (0, LAYERS - 1):
                for p in range(2):
                    got = pool[l, p, lb[-1]].contiguous().cpu().view(torch.uint8).numpy()
                    off = ((l * 2 + p) * PEER_BLOCKS + rb[-1]) * bb
                    assert kvlane.pattern_check(bytearray(got.tobytes()), 1, off) == bb, \
                        "layer %d plane %d: bytes differ from the peer's" % (l, p)
            for mode, xs in per_layer.items():
                out[mode + "_us_median"] = round(statistics.median(xs), 2)
                out[mode + "_us_p90"] = round(pct(xs, 0.9), 2)
                print("wait_for_layer_load %-8s per layer: median %.2f us, p90 %.2f us "
                      "(%d calls, %d-layer steps)" % (mode, statistics.median(xs),
                                                     pct(xs, 0.9), len(xs), LAYERS))
            reqs = [t / 1e3 for t in open_ns[3:]]
            out["start_load_kv_us_median"] = round(statistics.median(opens), 1)
            out["open_request_us_median"] = round(statistics.median(reqs), 1)
            print("start_load_kv (one request, %d blocks): median %.1f us, of which "
                  "Runtime.open_request (kvl_req_open) %.1f us"
                  % (LAYERS * 2 * a.blocks, statistics.median(opens), statistics.median(reqs)))
            if cuda:
                ops = wc._cuda
                sp = torch.cuda.current_stream().cuda_stream
                # the READY path alone: one stream wait on a word already satisfied
                word = torch.zeros(1, dtype=torch.int32, device="cuda")
                n = 2000
                c0 = time.perf_counter_ns()
                for _ in range(n):
                    ops.wait(sp, word.data_ptr(), 0)
                ready_path = (time.perf_counter_ns() - c0) / n / 1e3
                torch.cuda.synchronize()
                out["stream_wait_only_us"] = round(ready_path, 2)
                out["steps_stream_busy_after_calls"] = busy
                out["ready_words_unset_after_calls"] = unset_words
                print("cuStreamWaitValue32 alone (the READY path): %.2f us per layer"
                      % ready_path)
                print("steps where the stream was still waiting after all 32 calls returned: "
                      "%d of %d (READY words still unset then: %d): no host sync"
                      % (busy, a.steps + 3, unset_words))
            print(json.dumps(out))
    finally:
        ctx.cleanup()


if __name__ == "__main__":
    main()
