# SPDX-License-Identifier: BSD-3-Clause
"""A small PyTorch decode engine for the connector tests: random weights (seeded, no
download), a paged KV cache per layer ((2, num_blocks, heads, block_size, head_dim): vLLM's HND
layout), a block manager, per-layer attention over the paged cache, greedy sampling, and a
scheduler/model-runner loop that calls a vLLM-shaped connector's hooks in the order vLLM's
do (docs: /work/shared/ENGINES.md 1.2):

  scheduler: get_num_new_matched_tokens -> allocate -> update_state_after_alloc ->
             build_connector_meta
  worker:    bind_connector_metadata -> start_load_kv -> per layer: wait_for_layer_load ->
             attention (writes the layer's KV, reads the cache) -> save_kv_layer ->
             wait_for_save -> get_finished -> get_block_ids_with_load_errors ->
             clear_connector_metadata
  scheduler: update_connector_output, sample, request_finished for finished requests.

Second mode (Engine(async_loads=True), vLLM's whole-request loads): a request the connector
answers (n, True) for is allocated, told to update_state_after_alloc and parked
WAITING_FOR_REMOTE_KVS, unscheduled; the worker hooks run every step (a step with nothing to
schedule runs them without a forward, as vLLM's kv_connector_no_forward does); once
get_finished names it in finished_recving, the next schedule sets its computed tokens
(vLLM's _update_waiting_for_remote_kv: its blocks' tokens, all but the last of the request's)
and schedules it without asking the connector again.
"""
import math
import time
from dataclasses import dataclass, field

import torch


@dataclass
class ModelConfig:
    layers: int = 8
    heads: int = 2
    head_dim: int = 16
    vocab: int = 97
    block_size: int = 8
    num_blocks: int = 64
    dtype: torch.dtype = torch.float32
    seed: int = 1234

    @property
    def hidden(self):
        return self.heads * self.head_dim

    @property
    def block_bytes(self):  # one block of one plane (K or V) of one layer
        return self.heads * self.block_size * self.head_dim * torch.empty(
            0, dtype=self.dtype).element_size()


class Model:
    """Random weights, deterministic for a seed; one attention + MLP block per layer."""

    def __init__(self, cfg, device="cpu"):
        g = torch.Generator().manual_seed(cfg.seed)
        d, dt = cfg.hidden, cfg.dtype

        def w(*shape, scale=None):
            t = torch.randn(*shape, generator=g) * (scale or 1.0 / math.sqrt(shape[0]))
            return t.to(dtype=dt, device=device)
        self.cfg = cfg
        self.embed = w(cfg.vocab, d, scale=1.0)
        self.wq = [w(d, d) for _ in range(cfg.layers)]
        self.wk = [w(d, d) for _ in range(cfg.layers)]
        self.wv = [w(d, d) for _ in range(cfg.layers)]
        self.wo = [w(d, d) for _ in range(cfg.layers)]
        self.w1 = [w(d, 2 * d) for _ in range(cfg.layers)]
        self.w2 = [w(2 * d, d) for _ in range(cfg.layers)]
        self.out = w(d, cfg.vocab)
        self.layer_names = ["model.layers.%d.self_attn.attn" % i for i in range(cfg.layers)]


def make_cache(cfg, device="cpu", one_pool=True):
    """{layer name: (2, num_blocks, heads, block_size, head_dim)}: views of one allocation
    in layer order (one kvlane registration), or separate tensors."""
    shape = (2, cfg.num_blocks, cfg.heads, cfg.block_size, cfg.head_dim)
    names = ["model.layers.%d.self_attn.attn" % i for i in range(cfg.layers)]
    if one_pool:
        pool = torch.zeros((cfg.layers,) + shape, dtype=cfg.dtype, device=device)
        return {n: pool[i] for i, n in enumerate(names)}
    return {n: torch.zeros(shape, dtype=cfg.dtype, device=device) for n in names}


class BlockManager:
    """Free block ids handed out in a scattered order (ids are not one run), as a cache that
    has run a while does."""

    def __init__(self, num_blocks, seed=7):
        g = torch.Generator().manual_seed(seed)
        self.free = torch.randperm(num_blocks, generator=g).tolist()

    def allocate(self, n):
        if n > len(self.free):
            raise RuntimeError("out of KV blocks: %d asked, %d free" % (n, len(self.free)))
        ids, self.free = self.free[:n], self.free[n:]
        return ids

    def release(self, ids):
        self.free.extend(ids)


@dataclass
class Request:
    request_id: str
    prompt_token_ids: list
    max_tokens: int
    kv_transfer_params: dict = None
    output_token_ids: list = field(default_factory=list)
    logits: list = field(default_factory=list)  # one (vocab,) tensor per sampled token
    block_ids: list = field(default_factory=list)
    num_computed_tokens: int = 0
    status: str = "WAITING"
    load_errors: set = field(default_factory=set)

    @property
    def num_tokens(self):
        return len(self.prompt_token_ids) + len(self.output_token_ids)

    def all_token_ids(self):
        return list(self.prompt_token_ids) + list(self.output_token_ids)


class SchedulerOutput:
    def __init__(self, scheduled, finished_req_ids):
        self.scheduled = scheduled  # [(request, first position, token ids)]
        self.finished_req_ids = finished_req_ids
        self.kv_connector_metadata = None


class Engine:
    """One engine: a scheduler side and a worker side in one process, each with its own
    connector instance (role SCHEDULER / WORKER), as vLLM builds them."""

    def __init__(self, model, kv_caches, sched_conn=None, worker_conn=None, device="cpu",
                 async_loads=False):
        self.m, self.cfg, self.device = model, model.cfg, device
        # async_loads: the second mode, vLLM's whole-request loads: a request the connector
        # answers (n, True) for waits WAITING_FOR_REMOTE_KVS, unscheduled, until get_finished
        # names it in finished_recving; then it is scheduled from its loaded tokens on
        self.async_loads = async_loads
        self.remote_waiting = []  # WAITING_FOR_REMOTE_KVS
        self.finished_recving = set()  # reported by the worker, seen by the next schedule
        self.kv = kv_caches
        self.caches = [kv_caches[n] for n in model.layer_names]
        self.blocks = BlockManager(self.cfg.num_blocks)
        self.sc, self.wc = sched_conn, worker_conn
        self.waiting, self.running, self.finished = [], [], {}
        self.finished_req_ids = set()  # finished in the last step, told to the worker next
        self.delayed = {}  # request id -> blocks the connector still owns
        self.hook_log = []  # (hook, detail) in call order: the tests check vLLM's order
        self.step_errors = []
        if worker_conn is not None:
            self._log("register_kv_caches")
            worker_conn.register_kv_caches(kv_caches)

    def _log(self, hook, detail=None):
        self.hook_log.append((hook, detail))

    def add_request(self, req):
        self.waiting.append(req)

    # ---- scheduler ----

    def _schedule(self):
        scheduled = []
        # vLLM's _update_waiting_for_remote_kv: a request whose load finished goes back to
        # WAITING with its loaded tokens computed (its blocks' tokens, at most all but the
        # last of the request's: that one is computed for its logits)
        for req in [r for r in self.remote_waiting if r.request_id in self.finished_recving]:
            self.remote_waiting.remove(req)
            self.finished_recving.discard(req.request_id)
            if req.load_errors:
                req.status = "FINISHED_ERROR"
                self._finish(req)
                continue
            n = min(len(req.block_ids) * self.cfg.block_size, req.num_tokens)
            req.num_computed_tokens = n - 1 if n == req.num_tokens else n
            req.status = "WAITING"
            self.waiting.insert(0, req)
        for req in self.waiting:
            ext, is_async = 0, False
            # vLLM asks the connector only for a request with nothing computed yet: one whose
            # remote KV was loaded (num_computed_tokens set above) is not asked again
            if self.sc is not None and req.num_computed_tokens == 0:
                self._log("get_num_new_matched_tokens", req.request_id)
                ext, is_async = self.sc.get_num_new_matched_tokens(req, req.num_computed_tokens)
                if not self.async_loads:
                    assert not is_async, "the engine runs sync (layer-wise) loads only"
            if not req.block_ids:
                total = len(req.prompt_token_ids) + req.max_tokens
                req.block_ids = self.blocks.allocate(math.ceil(total / self.cfg.block_size))
            if self.sc is not None:
                self._log("update_state_after_alloc", (req.request_id, ext))
                self.sc.update_state_after_alloc(req, list(req.block_ids), ext)
            if is_async:
                req.status = "WAITING_FOR_REMOTE_KVS"
                self.remote_waiting.append(req)
                continue
            first = req.num_computed_tokens + ext
            req.num_computed_tokens = first
            req.status = "RUNNING"
            self.running.append(req)
            scheduled.append((req, first, req.prompt_token_ids[first:]))
        self.waiting = []
        for req in self.running:
            if not any(r is req for r, _, _ in scheduled):
                scheduled.append((req, req.num_tokens - 1, [req.output_token_ids[-1]]))
        out = SchedulerOutput(scheduled, set(self.finished_req_ids))
        self.finished_req_ids = set()
        if self.sc is not None:
            self._log("build_connector_meta")
            out.kv_connector_metadata = self.sc.build_connector_meta(out)
        return out

    # ---- model ----

    def _slots(self, req, first, n):
        bs = self.cfg.block_size
        pos = torch.arange(first, first + n)
        blk = torch.tensor(req.block_ids, dtype=torch.long)[pos // bs]
        return blk.to(self.device), (pos % bs).to(self.device)

    def _attention(self, l, req, first, x):
        """Layer l for @x (n, hidden) at positions first..first+n-1: its K/V into the paged
        cache, then causal attention over positions 0..first+n-1 read back from it."""
        cfg, m = self.cfg, self.m
        n, H, D, bs = x.shape[0], cfg.heads, cfg.head_dim, cfg.block_size
        q = (x @ m.wq[l]).view(n, H, D)
        k = (x @ m.wk[l]).view(n, H, D)
        v = (x @ m.wv[l]).view(n, H, D)
        cache = self.caches[l]
        blk, off = self._slots(req, first, n)
        cache[0, blk, :, off, :] = k
        cache[1, blk, :, off, :] = v
        ctx = first + n
        nblk = math.ceil(ctx / bs)
        ids = torch.tensor(req.block_ids[:nblk], dtype=torch.long, device=self.device)
        K = cache[0, ids].permute(1, 0, 2, 3).reshape(H, nblk * bs, D)[:, :ctx]
        V = cache[1, ids].permute(1, 0, 2, 3).reshape(H, nblk * bs, D)[:, :ctx]
        s = torch.einsum("nhd,hcd->hnc", q, K) / math.sqrt(D)
        qpos = torch.arange(first, ctx, device=self.device).view(1, n, 1)
        kpos = torch.arange(ctx, device=self.device).view(1, 1, ctx)
        s = s.masked_fill(kpos > qpos, float("-inf"))
        o = torch.einsum("hnc,hcd->nhd", torch.softmax(s, dim=-1), V).reshape(n, H * D)
        return x + o @ m.wo[l]

    def forward(self, out):
        """Layer-major over the batch, with the connector's per-layer hooks around each
        layer's attention; logits of each request's last position."""
        m, wc = self.m, self.wc
        xs = [m.embed[torch.tensor(toks, device=self.device)] for _, _, toks in out.scheduled]
        for l, name in enumerate(m.layer_names):
            if wc is not None:
                self._log("wait_for_layer_load", l)
                wc.wait_for_layer_load(name)
            for i, (req, first, _) in enumerate(out.scheduled):
                x = self._attention(l, req, first, xs[i])
                xs[i] = x + torch.relu(x @ m.w1[l]) @ m.w2[l]
            if wc is not None:
                self._log("save_kv_layer", l)
                wc.save_kv_layer(name, self.caches[l], attn_metadata=out)
        return [x[-1] @ m.out for x in xs]

    # ---- one step ----

    def step(self):
        out = self._schedule()
        wc = self.wc
        if wc is not None:
            self._log("bind_connector_metadata")
            wc.bind_connector_metadata(out.kv_connector_metadata)
            self._log("start_load_kv")
            wc.start_load_kv(forward_context=None)
        logits = self.forward(out) if out.scheduled else []
        sending = recving = None
        errors = set()
        if wc is not None:
            self._log("wait_for_save")
            wc.wait_for_save()
            self._log("get_finished")
            sending, recving = wc.get_finished(out.finished_req_ids)
            self._log("get_block_ids_with_load_errors")
            errors = wc.get_block_ids_with_load_errors()
            if recving:
                assert self.async_loads, "finished_recving %s from sync loads" % recving
                self._log("finished_recving", sorted(recving))
                self.finished_recving |= set(recving)
            self._log("clear_connector_metadata")
            wc.clear_connector_metadata()
        if errors:
            self.step_errors.append(errors)
            for req in self.remote_waiting:
                req.load_errors |= errors & set(req.block_ids)
        for rid in sending or ():
            self.blocks.release(self.delayed.pop(rid))
        for (req, first, toks), lg in zip(out.scheduled, logits):
            req.num_computed_tokens = first + len(toks)
            if errors & set(req.block_ids):
                # vLLM recomputes (or fails) a request whose loaded blocks are bad: this
                # engine fails it, so a test sees the error
                req.load_errors = errors & set(req.block_ids)
                req.status = "FINISHED_ERROR"
            else:
                req.logits.append(lg)
                req.output_token_ids.append(int(torch.argmax(lg)))
                if len(req.output_token_ids) >= req.max_tokens:
                    req.status = "FINISHED_LENGTH"
            if req.status.startswith("FINISHED"):
                self._finish(req)
        return out

    def _finish(self, req):
        self.running = [r for r in self.running if r is not req]
        self.finished[req.request_id] = req
        self.finished_req_ids.add(req.request_id)
        delay, params = False, None
        if self.sc is not None:
            self._log("request_finished", req.request_id)
            delay, params = self.sc.request_finished(req, list(req.block_ids))
        req.finished_params = params
        if delay:
            self.delayed[req.request_id] = req.block_ids
        else:
            self.blocks.release(req.block_ids)

    def abort(self, req):
        req.status = "FINISHED_ABORTED"
        self.waiting = [r for r in self.waiting if r is not req]
        self.remote_waiting = [r for r in self.remote_waiting if r is not req]
        self._finish(req)

    def run(self, max_steps=64, max_s=60.0):
        """Steps until nothing is left; @max_steps counts steps that ran a forward (a
        whole-request load spends steps with none, bounded by @max_s)."""
        end, n = time.monotonic() + max_s, 0
        while n < max_steps and time.monotonic() < end:
            if not (self.waiting or self.running or self.remote_waiting):
                break
            if self.step().scheduled:
                n += 1
            elif self.remote_waiting:
                time.sleep(0.0005)
        # the last finished requests' delayed blocks: one more step reports them
        if self.delayed and self.wc is not None:
            self.step()


def prefill_locally(engine, req):
    """The reference: the same engine with no connector computes the whole prompt itself."""
    engine.add_request(req)
    engine.run()
    return req
