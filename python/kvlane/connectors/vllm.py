# SPDX-License-Identifier: BSD-3-Clause
"""kvlane as a vLLM KV connector (the KVConnectorBase_V1 method set): layer-wise loads inside
the forward (the default), or whole-request loads before it (kvlane.load_async, vLLM's async
mode as its NixlConnector uses it).

Load it with
    --kv-transfer-config '{"kv_connector": "KvlaneConnector",
                           "kv_connector_module_path": "kvlane.connectors.vllm",
                           "kv_role": "kv_consumer",
                           "kv_connector_extra_config": {"kvlane.config": "/etc/kvlane/d.ini"}}'

When vLLM is importable the class derives from vLLM's own KVConnectorBase_V1 (and its
KVConnectorMetadata / KVConnectorRole); otherwise from the fallback below, which implements the
same method set and the metadata plumbing (bind/clear/_get/has_connector_metadata) as vLLM's
base.py documents them. vLLM cannot be installed on kvlane's machines, so that fallback is what
the tests drive (tests/python/test_connectors.py, with tests/python/engine.py: a PyTorch
decode loop calling the hooks in the order vLLM's scheduler and model runner do).

How a load goes (decode side, kv_consumer):
  scheduler  get_num_new_matched_tokens: kv_transfer_params["do_remote_prefill"] -> (the
             prompt's tokens but its last, False): loaded inside the forward, layer by layer;
             with kvlane.load_async (same count, True): the scheduler holds the request
             WAITING_FOR_REMOTE_KVS until get_finished names it in finished_recving, then
             schedules it from its loaded tokens on (the count is 0 from then on);
             update_state_after_alloc: the engine's block ids for those tokens;
             build_connector_meta: one LoadSpec per such request (and the cancels).
  worker     register_kv_caches: the per-layer K/V tensors of the paged cache, each
             (2, num_blocks, num_kv_heads, block_size, head_size) (HND, get_required_
             kvcache_layout), registered as ONE kvlane segment when the layers are one
             allocation (else one per layer), a CUDA cache too: blocks land straight in it
             (tcp: its pinned bounce buffers and a copy on the lcore's stream, [gpu] enable
             and the [memory] pool). kvlane.landing = true, or kvlane refusing that (EXDEV),
             lands them in a pinned host area instead, copied into the cache per layer;
             start_load_kv: one kvlane request per sequence: steps = layers, blocks = that
             layer's K and V blocks, destinations = the engine's own blocks (KVL_REQ_ENGINE_DEST)
             or their landing slots, READY/DONE words (KVL_REQ_STEP_FLAGS); on CUDA the
             stream and every such request's words resolved once for the forward;
             wait_for_layer_load(layer): CPU: until the layer's READY word; CUDA: for every
             request at once, the current stream waits on its READY word and writes its DONE
             behind it (_kvlane.stream_layer_ops: one C call, one cuStreamBatchMemOp), or,
             for landing slots, waits, copies the landed blocks into the cache and writes
             DONE; the host does not wait;
             get_finished / get_block_ids_with_load_errors: kvlane's end events; a FAILED
             request's typed status (kvlane.Status) maps to its blocks. Whole-request loads
             (no READY words: their step events are answered as they come) are reported in
             finished_recving once they end, a failed one with its blocks as load errors.
The handshake travels in kv_transfer_params: remote_host (the peer kvlane's [control] listen
address), remote_segment (its segment's name), remote_block_ids, remote_num_tokens and, to be
checked against the peer's, geometry (layers, planes, blocks, block_bytes).

Prefill side (kv_producer) PUSHes: kv_transfer_params["do_remote_decode"] with push_host,
push_segment, push_block_ids name where; save_kv_layer WRITEs the layer's blocks (a CUDA
cache's through pinned landing slots, pushed once the stream's copy is done), wait_for_save
waits until they are on the peer, get_finished reports them as sent, and
request_finished hands the decode side its kv_transfer_params. Aborts and preemptions cancel
(kvl_req_cancel) what is still in flight.
"""
import enum
import errno
import math
import struct
import time
from dataclasses import dataclass, field

import kvlane

from . import _common

_host_layer_wait = kvlane._kvlane.host_layer_wait

try:  # vLLM's own base class when vLLM is there
    from vllm.distributed.kv_transfer.kv_connector.v1.base import (  # type: ignore
        KVConnectorBase_V1, KVConnectorMetadata, KVConnectorRole)
    HAVE_VLLM = True
except ImportError:
    HAVE_VLLM = False

    class KVConnectorRole(enum.IntEnum):
        """vLLM's KVConnectorRole: each connector is built once per role."""
        SCHEDULER = 0
        WORKER = 1

    class KVConnectorMetadata:
        """Scheduler -> worker, once per step (vLLM's KVConnectorMetadata)."""

    class KVConnectorBase_V1:
        """The method set of vLLM's KVConnectorBase_V1 (v1/base.py), used when vLLM is not
        importable: __init__(vllm_config, role, kv_cache_config), the metadata plumbing, and
        the defaults of the non-abstract hooks."""

        def __init__(self, vllm_config, role, kv_cache_config=None):
            self._connector_metadata = None
            self._vllm_config = vllm_config
            self._role = role
            self._kv_cache_config = kv_cache_config

        @property
        def role(self):
            return self._role

        def bind_connector_metadata(self, connector_metadata):
            self._connector_metadata = connector_metadata

        def clear_connector_metadata(self):
            self._connector_metadata = None

        def _get_connector_metadata(self):
            assert self._connector_metadata is not None, "no connector metadata bound"
            return self._connector_metadata

        def has_connector_metadata(self):
            return self._connector_metadata is not None

        def register_kv_caches(self, kv_caches):
            return

        def handle_preemptions(self, kv_connector_metadata):
            return

        def get_finished(self, finished_req_ids):
            return None, None

        def get_block_ids_with_load_errors(self):
            return set()

        def update_connector_output(self, connector_output):
            return

        def request_finished(self, request, block_ids):
            return False, None

        def get_kv_connector_stats(self):
            return None

        def shutdown(self):
            return

        @classmethod
        def get_required_kvcache_layout(cls, vllm_config):
            return None

        @classmethod
        def requires_piecewise_for_cudagraph(cls, extra_config):
            return False


@dataclass
class LoadSpec:
    """One sequence to load: the engine's block ids, and where the KV is on the peer."""
    req_id: str
    local_block_ids: list
    remote_block_ids: list
    remote_host: str
    remote_segment: object  # its name (str) or id (int)
    geometry: tuple = None  # (layers, planes, blocks, block_bytes) the peer's segment must have
    load_async: bool = False  # whole-request: loaded before the request is scheduled


@dataclass
class SaveSpec:
    """One sequence to PUSH (prefill side): the engine's block ids, and where they go."""
    req_id: str
    local_block_ids: list
    push_block_ids: list
    push_host: str
    push_segment: object


@dataclass
class KvlaneConnectorMetadata(KVConnectorMetadata):
    loads: list = field(default_factory=list)
    saves: list = field(default_factory=list)
    cancels: list = field(default_factory=list)  # request ids whose transfers end now


def _extra(vllm_config):
    ktc = getattr(vllm_config, "kv_transfer_config", None)
    extra = getattr(ktc, "kv_connector_extra_config", None) or {}
    role = getattr(ktc, "kv_role", None) or "kv_both"
    return extra, role


def _block_ids(blocks):
    """vLLM's KVCacheBlocks (get_block_ids() -> one list per KV cache group), or a list."""
    if hasattr(blocks, "get_block_ids"):
        ids = blocks.get_block_ids()
        return list(ids[0]) if ids and isinstance(ids[0], (list, tuple)) else list(ids)
    return [int(b) for b in blocks]


def _check_remote(ids, seg):
    """Block ids on the peer inside its segment's geometry: kvlane checks only the segment's
    bounds, and block 34 of a 32-block layer is block 2 of the next plane there."""
    bad = [b for b in ids if not 0 <= int(b) < seg.geom.blocks]
    if bad:
        raise LookupError("ERANGE: block %d is outside the peer's segment %s (%d blocks per "
                          "layer and plane)" % (int(bad[0]), seg.name, seg.geom.blocks))


class _Cache:
    """The registered paged cache: per layer (2, num_blocks, ...) tensors, their addresses."""

    def __init__(self, rt, kv_caches, landing_blocks, force_landing=False):
        import torch
        if not kv_caches:
            raise ValueError("register_kv_caches: no layers")
        self.names = list(kv_caches)
        self.index = {n: i for i, n in enumerate(self.names)}
        ts = [kv_caches[n] for n in self.names]
        t0 = ts[0]
        for n, t in zip(self.names, ts):
            if not isinstance(t, torch.Tensor):
                raise TypeError("register_kv_caches: layer %s is a %s, not a torch.Tensor"
                                % (n, type(t).__name__))
            if t.dim() < 3 or t.shape[0] != 2:
                raise ValueError("register_kv_caches: layer %s has shape %s; expected "
                                 "(2, num_blocks, num_kv_heads, block_size, head_size)"
                                 % (n, tuple(t.shape)))
            if t.shape != t0.shape or t.dtype != t0.dtype or t.device != t0.device:
                raise ValueError("register_kv_caches: layer %s is %s %s on %s, layer %s %s %s "
                                 "on %s: every layer must match" % (
                                     n, tuple(t.shape), t.dtype, t.device, self.names[0],
                                     tuple(t0.shape), t0.dtype, t0.device))
            if t.device.type not in ("cpu", "cuda"):
                raise ValueError("register_kv_caches: layer %s is on device %s: kvlane "
                                 "registers CPU or CUDA memory" % (n, t.device))
            if not t.is_contiguous():
                raise ValueError("register_kv_caches: layer %s is not contiguous (stride %s)"
                                 % (n, tuple(t.stride())))
        self.tensors = ts
        self.layers, self.num_blocks = len(ts), t0.shape[1]
        self.elem = t0.element_size()
        self.block_bytes = t0[0, 0].numel() * self.elem
        self.plane_bytes = self.num_blocks * self.block_bytes
        self.layer_bytes = 2 * self.plane_bytes
        self.cuda = t0.device.type == "cuda"
        # By default blocks land straight in the cache (KVL_REQ_ENGINE_DEST), a CUDA cache's
        # too: tcp receives into its pinned bounce buffers and copies them into VRAM on the
        # lcore's stream ([gpu] enable and the [memory] pool), and READY comes once they are
        # there, so no copy is needed per layer. 'kvlane.landing' = True makes blocks land in
        # a host area and be copied into the cache instead (the CPU cache runs the same slot
        # and copy code the CUDA path does, with host waits for the stream's); a CUDA cache
        # falls back to it when kvlane refuses the direct path (landing_reason says why).
        self.landed = bool(force_landing)
        self.landing_reason = "kvlane.landing = true" if force_landing else None
        self.rt, self.landing_blocks, self.t0 = rt, landing_blocks, t0
        self.device = t0.device
        self.bases = [t.data_ptr() for t in ts]
        self.storage = [self._storage_bytes(t) for t in ts]
        # one allocation in layer order (a pool carved layer by layer): one registration
        one = all(b == self.bases[0] + i * self.layer_bytes and st == self.storage[0]
                  for i, (b, st) in enumerate(zip(self.bases, self.storage)))
        self.segments = []
        if self.landed:
            self.use_landing(self.landing_reason)
        else:
            # VRAM: only this side's READs land there (tcp refuses a peer's access to it)
            acc = {"access": 0} if self.cuda else {}
            try:
                if one:
                    pool = ts[0].as_strided((self.layers,) + tuple(t0.shape),
                                            (t0.numel(),) + tuple(t0.stride()))
                    self.segments.append(rt.register(pool, name="vllm-kv",
                                                     geom=(self.layers, 2, self.num_blocks,
                                                           self.block_bytes), **acc))
                else:
                    for n, t in zip(self.names, ts):
                        self.segments.append(rt.register(
                            t, name="vllm-kv-" + n,
                            geom=(1, 2, self.num_blocks, self.block_bytes), **acc))
            except kvlane.Error as e:
                if not self.cuda:
                    raise
                # a CUDA cache kvlane cannot register: blocks land in host slots instead
                self.use_landing("registering the CUDA cache: %s" % e)
        self.one_registration = len(self.segments) == 1

    def use_landing(self, why):
        """Blocks land in pinned host slots from now on, and are copied into the cache behind
        READY (the stream's copy for CUDA). Slot s of layer l: (landing_blocks, 2, ...) per
        layer. @why: the reason, kept in landing_reason."""
        self.landed, self.landing_reason = True, why
        self.landing_area()

    def landing_area(self):
        """The pinned host landing area and its registration, made on first use (loads that
        land in slots; a CUDA cache's PUSHes, which tcp cannot WRITE out of VRAM)."""
        import torch
        if getattr(self, "landing", None) is not None:
            return
        t0, n = self.t0, self.landing_blocks
        self.slots = n
        self.landing = torch.empty((self.layers, n, 2) + tuple(t0.shape[2:]),
                                   dtype=t0.dtype, pin_memory=self.cuda)
        self.segments.append(self.rt.register(
            self.landing, name="vllm-landing",
            # (layers, slots, 2) blocks in that order; kvlane's geometry is only the
            # byte count here (its planes are 1 or 2)
            geom=(self.layers, 2, n, self.block_bytes)))
        self.free_slots = [(0, n)]
        if self.cuda:
            self.preload()

    def preload(self):
        """Run the copy path once now: CUDA loads kernels lazily at their first launch, and
        that load may synchronise the context, i.e. wait for a stream that waits on READY
        (kvlane.h). Engines should load their own kernels before the first wait too
        (CUDA_MODULE_LOADING=EAGER)."""
        import torch
        idx = torch.zeros(1, dtype=torch.long).pin_memory().to(self.device, non_blocking=True)
        land = self.landing[0, 0:1].to(self.device, non_blocking=True)
        scratch = torch.empty_like(self.tensors[0][:, 0:1])
        scratch.index_copy_(1, idx, land.transpose(0, 1))
        torch.cuda.synchronize(self.device)

    @staticmethod
    def _storage_bytes(t):
        st = t.untyped_storage() if hasattr(t, "untyped_storage") else t.storage()
        return st.data_ptr(), st.nbytes()

    def check_alive(self):
        """The tensors are kept alive, but their storage can still be freed or swapped under
        kvlane (storage().resize_(0), set_()): refuse to move bytes into it then."""
        for n, t, base, st in zip(self.names, self.tensors, self.bases, self.storage):
            if t.data_ptr() != base or self._storage_bytes(t) != st:
                raise RuntimeError("kvlane connector: the KV cache of layer %s was freed or "
                                   "moved since register_kv_caches (storage at 0x%x, %d bytes; "
                                   "registered 0x%x, %d bytes): register the new cache"
                                   % ((n,) + self._storage_bytes(t) + st))

    def addr(self, layer, plane, block):
        return self.bases[layer] + plane * self.plane_bytes + block * self.block_bytes

    def index_tensor(self, ids):
        """Block ids as an index tensor where the cache is: for CUDA pinned and non_blocking
        (a pageable copy would wait for the stream, which may be waiting on READY words)."""
        import torch
        t = torch.tensor([int(b) for b in ids], dtype=torch.long)
        return t.pin_memory().to(self.device, non_blocking=True) if self.cuda else t

    def copy_in(self, layer, slot, idx):
        """The landed K/V blocks of @layer (slots slot..) into the cache at blocks @idx."""
        land = self.landing[layer, slot:slot + len(idx)]
        if self.cuda:
            land = land.to(self.device, non_blocking=True)
        self.tensors[layer].index_copy_(1, idx, land.transpose(0, 1))

    def copy_out(self, layer, slot, idx):
        """The cache's K/V blocks @idx of @layer into landing slots slot.. (for a PUSH)."""
        self.landing[layer, slot:slot + len(idx)].copy_(
            self.tensors[layer].index_select(1, idx).transpose(0, 1), non_blocking=self.cuda)

    def landing_addr(self, layer, slot, plane):
        # landing layout (layers, slots, 2, ...): a sequence's slots of a layer are one run
        return self.landing.data_ptr() + ((layer * self.slots + slot) * 2 + plane) * \
            self.block_bytes

    def take_slots(self, n):
        for i, (s, k) in enumerate(self.free_slots):
            if k >= n:
                self.free_slots[i] = (s + n, k - n)
                return s
        raise RuntimeError("kvlane connector: %d landing slots asked, the largest free run "
                           "is %d of %d (kv_connector_extra_config 'kvlane.landing_blocks')"
                           % (n, max((k for _, k in self.free_slots), default=0), self.slots))

    def give_slots(self, s, n):
        self.free_slots.append((s, n))
        self.free_slots.sort()
        merged = []
        for a, k in self.free_slots:
            if merged and merged[-1][0] + merged[-1][1] == a:
                merged[-1] = (merged[-1][0], merged[-1][1] + k)
            elif k:
                merged.append((a, k))
        self.free_slots = merged


class _Load:
    """A sequence's kvlane request in flight."""

    def __init__(self, spec, req, words, slot=None):
        self.spec, self.req, self.words, self.slot = spec, req, words, slot
        self.waited = set()  # layers whose READY this step has waited on
        self.status = None  # kvlane.Status once it ended
        self.idx = None  # landing slots: the local block ids as a tensor where the cache is


class _Forward:
    """What wait_for_layer_load needs of one forward, resolved once in start_load_kv: the
    READY/DONE words of its loads that land straight in the cache, packed for one C call per
    layer for all of them: on CUDA (@stream, the forward's) _kvlane.stream_layer_ops with the
    words' device addresses, on the CPU (@stream None) _kvlane.host_layer_wait with their
    host addresses."""

    def __init__(self, stream, loads):
        self.stream, self.n, self.loads = stream, len(loads), loads
        self.waited = set()  # layers whose waits are done (enqueued); shared by the loads
        dev = stream is not None
        self.table = b"".join(
            struct.pack("=QQIIII", f.ready_dev if dev else f.ready,
                        f.done_dev if dev else f.done, f.stride, ld.words.epoch, f.n_steps, 0)
            for ld in loads for f in (ld.words.flags,))
        for ld in loads:
            ld.waited = self.waited
        self.rest = False  # other loads to wait on per request (landing slots, no table)


class KvlaneConnector(KVConnectorBase_V1):
    """vLLM KV connector over kvlane (see the module's docstring)."""

    def __init__(self, vllm_config, role, kv_cache_config=None):
        super().__init__(vllm_config, role, kv_cache_config)
        self._config = vllm_config
        self._extra, self._kv_role = _extra(vllm_config)
        cc = getattr(vllm_config, "cache_config", None)
        self._block_size = int(getattr(cc, "block_size", 0) or self._get("block_size", 16))
        # 'kvlane.load_async': whole-request loads (get_num_new_matched_tokens says (n, True):
        # the scheduler holds the request WAITING_FOR_REMOTE_KVS until get_finished reports it
        # in finished_recving), as vLLM's NixlConnector does; else layer-wise inside the forward
        self._load_async = bool(self._get("load_async", False))
        self._timeout_s = float(self._get("layer_timeout_s", 30.0))
        # scheduler side
        self._loads, self._saves, self._cancels = {}, {}, []
        self._loading = set()  # request ids whose load was handed to a worker
        self._saving = set()  # request ids whose PUSH was handed to a worker
        self._local_hit = {}  # request id -> tokens its prefix cache held (asked, not loaded)
        # worker side
        self._rt = self._cache = self._peers = self._cuda = self._layer_ops = None
        self._active = {}  # req_id -> _Load (layer-wise)
        self._async = {}  # req_id -> _Load (whole-request)
        self._recv_async = set()  # whole-request loads ended, for get_finished
        self._slot_wait = []  # (CUDA event, slot, n): landing slots freed once copied
        self._fwd = None  # this forward's _Forward (CUDA, direct landing)
        self._by_req = {}  # kvlane handle -> ("load"|"save", req_id)
        self._pushes = {}  # req_id -> [handles not DONE]
        self._cuda_saves, self._save_slots = [], {}  # CUDA: (spec, layer, slot); req -> slot
        self._push_failed = set()  # request ids with a PUSH refused this step
        self._sent, self._finished_seen, self._recv_done = set(), set(), set()
        self._errors = set()
        self._error_status = {}  # block id -> kvlane.Status (what failed it)
        self.stats = {"layer_waits": 0, "loads": 0, "load_failures": 0, "pushes": 0,
                      "push_failures": 0}

    def _get(self, key, default=None):
        return self._extra.get("kvlane." + key, default)

    # ---- class-level hooks ----

    @classmethod
    def get_required_kvcache_layout(cls, vllm_config):
        return "HND"  # a block's K (V) is one run of bytes per layer: one kvlane block

    @classmethod
    def requires_piecewise_for_cudagraph(cls, extra_config):
        return True  # wait_for_layer_load runs Python per layer: full graphs would skip it

    # ---- scheduler side ----

    def get_num_new_matched_tokens(self, request, num_computed_tokens):
        params = getattr(request, "kv_transfer_params", None) or {}
        if not params.get("do_remote_prefill") or request.request_id in self._loading:
            return 0, False
        # the prompt's KV but its last token's: the engine computes that one for its logits;
        # what its own prefix cache holds (num_computed_tokens, whole blocks) is not loaded
        n = int(params["remote_num_tokens"]) - 1 - num_computed_tokens
        self._local_hit[request.request_id] = num_computed_tokens
        if n > 0 and self._load_async:
            return n, True  # loaded before the request runs; get_finished says when
        return max(n, 0), False  # False: loaded inside this step's forward, layer by layer

    def update_state_after_alloc(self, request, blocks, num_external_tokens):
        params = getattr(request, "kv_transfer_params", None) or {}
        if num_external_tokens > 0:
            hit = self._local_hit.pop(request.request_id, 0)
            bs = self._block_size
            if hit % bs:
                raise ValueError("kvlane connector: request %s: %d tokens computed locally, "
                                 "not whole blocks of %d" % (request.request_id, hit, bs))
            first, last = hit // bs, math.ceil((hit + num_external_tokens) / bs)
            ids = _block_ids(blocks)  # the request's blocks from its first token on
            remote = list(params["remote_block_ids"])
            if len(ids) < last or len(remote) < last:
                raise ValueError("kvlane connector: request %s needs blocks %d..%d for its "
                                 "tokens %d..%d: the engine gave %d, the peer named %d" % (
                                     request.request_id, first, last - 1, hit,
                                     hit + num_external_tokens - 1, len(ids), len(remote)))
            g = params.get("geometry")
            self._loads[request.request_id] = LoadSpec(
                request.request_id, ids[first:last], remote[first:last], params["remote_host"],
                params["remote_segment"], tuple(g) if g else None, self._load_async)
        elif params.get("do_remote_decode"):
            # the prompt's blocks, pushed from the step that computes them
            nblk = math.ceil(len(request.prompt_token_ids) / self._block_size)
            ids, push = _block_ids(blocks), list(params["push_block_ids"])
            if len(ids) < nblk or len(push) < nblk:
                raise ValueError("kvlane connector: request %s pushes %d blocks for %d prompt "
                                 "tokens: the engine gave %d, push_block_ids names %d" % (
                                     request.request_id, nblk, len(request.prompt_token_ids),
                                     len(ids), len(push)))
            self._saves[request.request_id] = SaveSpec(
                request.request_id, ids[:nblk], push[:nblk], params["push_host"],
                params["push_segment"])

    def build_connector_meta(self, scheduler_output):
        meta = KvlaneConnectorMetadata(list(self._loads.values()), list(self._saves.values()),
                                       self._cancels)
        self._loading.update(self._loads)
        self._saving.update(self._saves)
        self._loads, self._saves, self._cancels = {}, {}, []
        return meta

    def request_finished(self, request, block_ids):
        params = getattr(request, "kv_transfer_params", None) or {}
        rid = request.request_id
        self._loads.pop(rid, None)  # aborted before its load was handed over
        self._saves.pop(rid, None)
        self._loading.discard(rid)
        status = getattr(request, "status", None)
        if status is not None and "ABORT" in str(status).upper():
            self._cancels.append(rid)
        if rid in self._saving:
            self._saving.discard(rid)
            # the blocks stay ours until get_finished reports the PUSH sent
            return True, {"do_remote_prefill": True, "remote_host": params["push_host"],
                          "remote_segment": params["push_segment"],
                          "remote_block_ids": list(params["push_block_ids"]),
                          "remote_num_tokens": len(getattr(request, "prompt_token_ids", ())),
                          "geometry": params.get("geometry")}
        return False, None

    # ---- worker side ----

    def register_kv_caches(self, kv_caches):
        self._rt = _common.runtime(self._get("config"), self._get("sets"), self._get("eal"))
        self._peers = _common.peers(self._rt)
        self._cache = _Cache(self._rt, kv_caches, int(self._get("landing_blocks", 256)),
                             self._get("landing", False))
        if self._cache.cuda:
            self._cuda = _common.CudaStreamOps()
            self._layer_ops = _common.stream_layer_ops()

    def _need_cache(self, what):
        if self._cache is None:
            raise RuntimeError("kvlane connector: %s before register_kv_caches" % what)
        if self._rt.closed:
            raise kvlane.Error(9, "EBADF: %s: the kvlane runtime is closed" % what)

    def _check_blocks(self, rid, ids, what):
        nb = self._cache.num_blocks
        bad = [b for b in ids if not 0 <= int(b) < nb]
        if bad:
            raise ValueError("kvlane connector: request %s names %s block %d outside the "
                             "registered cache (num_blocks %d)" % (rid, what, bad[0], nb))

    def start_load_kv(self, forward_context, **kwargs):
        self._need_cache("start_load_kv")
        meta = self._get_connector_metadata()
        if meta.loads or meta.saves:
            self._cache.check_alive()
        self._drain()
        for rid in meta.cancels:
            self._cancel(rid)
        for spec in meta.loads:
            self._check_blocks(spec.req_id, spec.local_block_ids, "local")
            self._open_load(spec)
        for spec in meta.saves:
            self._check_blocks(spec.req_id, spec.local_block_ids, "local")
        self._fwd = None
        c = self._cache
        if self._active and (c.cuda or not c.landed):
            # the loads' words (and the stream) once per forward: wait_for_layer_load then
            # makes one C call per layer (the forward runs on the stream current now)
            sp = None
            if c.cuda:
                import torch
                sp = torch.cuda.current_stream(c.device).cuda_stream
            todo = [ld for ld in self._active.values()
                    if ld.status is None and len(ld.waited) < c.layers]
            fast = [ld for ld in todo if ld.slot is None]
            if fast and (self._layer_ops or not c.cuda):
                self._fwd = _Forward(sp, fast)
                self._fwd.rest = len(fast) < len(todo)

    def _open_load(self, spec):
        c, rt = self._cache, self._rt
        try:
            peer = self._peers.peer(spec.remote_host)
            seg = self._peers.segment(peer, spec.remote_segment)
        except (kvlane.Error, LookupError) as e:
            return self._failed_open(spec, e)
        if spec.geometry is not None and tuple(seg.geom) != tuple(spec.geometry):
            return self._failed_open(spec, ValueError(
                "the peer's segment %s is %s, kv_transfer_params said %s"
                % (seg.name, tuple(seg.geom), tuple(spec.geometry))))
        g = seg.geom
        if g.layers != c.layers or g.planes != 2 or g.block_bytes != c.block_bytes:
            return self._failed_open(spec, ValueError(
                "the peer's segment %s is %s: this cache is %d layers x 2 planes of %d-byte "
                "blocks" % (seg.name, tuple(g), c.layers, c.block_bytes)))
        try:
            _check_remote(spec.remote_block_ids, seg)
        except LookupError as e:
            return self._failed_open(spec, e)
        try:
            req, slot = self._open_req(spec, peer, seg)
        except kvlane.Error as e:
            if not (e.errno == errno.EXDEV and c.cuda and not c.landed):
                return self._failed_open(spec, e)
            # tcp cannot land in this VRAM here (no GPU open or no [memory] pool: kvlane's
            # message says which): land in host slots and copy, from now on
            try:
                c.use_landing("kvlane refused the direct path: %s" % e)
                req, slot = self._open_req(spec, peer, seg)
            except kvlane.Error as e2:
                return self._failed_open(spec, e2)
        ld = _Load(spec, req, _common.Words(rt, req) if not spec.load_async else None, slot)
        if slot is not None:
            ld.idx = c.index_tensor(spec.local_block_ids)
        if c.cuda and not spec.load_async:
            if not ld.words.flags.ready_dev:
                rt.cancel(req)
                raise RuntimeError("kvlane connector: CUDA cache but the READY words are not "
                                   "mapped for the GPU: set [gpu] enable = true")
        if spec.load_async:
            self._async[spec.req_id] = ld
            self._by_req[req] = ("aload", spec.req_id)
        else:
            self._active[spec.req_id] = ld
            self._by_req[req] = ("load", spec.req_id)
        self.stats["loads"] += 1

    def _open_req(self, spec, peer, seg):
        """kvl_req_open for @spec: steps = layers, blocks straight into the cache or into
        landing slots. Returns (handle, first slot or None); kvlane.Error as kvlane refused."""
        c, rt, g = self._cache, self._rt, seg.geom
        n = len(spec.local_block_ids)
        slot = c.take_slots(n) if c.landed else None
        # (remote_seg, remote_off, length, local) tuples, layer-major: step l is layer l's
        # 2 * n blocks (K then V); built from per-block offsets once, the host cost of a load
        bb, sid = c.block_bytes, seg.id
        roffs = [int(rb) * bb for rb in spec.remote_block_ids]
        if c.landed:
            loffs = [(slot + i) * 2 * bb for i in range(n)]
        else:
            loffs = [int(lb) * bb for lb in spec.local_block_ids]
        blocks = []
        for l in range(c.layers):
            for p in range(2):
                rbase = (l * 2 + p) * g.blocks * bb
                lbase = c.landing_addr(l, 0, p) if c.landed else c.addr(l, p, 0)
                blocks.extend([(sid, rbase + ro, bb, lbase + lo)
                               for ro, lo in zip(roffs, loffs)])
        steps = [range(l * 2 * n, (l + 1) * 2 * n) for l in range(c.layers)]
        try:
            # a whole-request (async) load needs no READY/DONE words: its steps' events
            # are answered in _drain, and it ends before the request is scheduled
            return rt.open_request(peer, blocks, steps, cls=kvlane.ReqClass.KVL_REQ_DECODE,
                                   step_flags=not spec.load_async, engine_dest=True), slot
        except kvlane.Error:
            if slot is not None:
                c.give_slots(slot, n)
            raise

    def _failed_open(self, spec, err):
        """A load kvlane refused: its blocks are load errors (the engine recomputes them);
        a whole-request load is reported received too, so the scheduler stops waiting."""
        self._errors.update(int(b) for b in spec.local_block_ids)
        if spec.load_async:
            self._recv_async.add(spec.req_id)
        self.stats["load_failures"] += 1
        self.last_error = "request %s: %s" % (spec.req_id, err)

    def wait_for_layer_load(self, layer_name):
        fw = self._fwd
        if fw is not None:
            # CUDA, landed straight in the cache: per request the stream waits READY and
            # writes DONE behind it, all of them in one C call; the host never waits
            # (CPU: the host waits each READY, then writes DONE: the bytes are in the cache)
            l = self._cache.index[layer_name]
            if l not in fw.waited:
                if fw.stream is not None:
                    self._layer_ops(fw.stream, fw.table, l)
                else:
                    late = _host_layer_wait(fw.table, l, self._timeout_s)
                    if late >= 0:
                        raise TimeoutError("kvlane connector: layer %s of request %s not "
                                           "READY within %.0f s" % (
                                               layer_name, fw.loads[late].spec.req_id,
                                               self._timeout_s))
                fw.waited.add(l)
                self.stats["layer_waits"] += fw.n
            if not fw.rest:
                return
        if not self._active:
            return
        l = self._cache.index[layer_name]
        c = self._cache
        if c.cuda:
            import torch
            stream = torch.cuda.current_stream(c.device)
            sp = stream.cuda_stream
        for ld in self._active.values():
            if l in ld.waited or ld.status is not None:
                continue
            ld.waited.add(l)
            w = ld.words
            if c.cuda:
                # the stream, not the host, waits on READY; then the landed K/V blocks go
                # into the cache (from landing slots) and DONE is written behind that copy
                self._cuda.wait(sp, w.flags.ready_dev + l * w.flags.stride, w.epoch)
                if ld.slot is not None:
                    c.copy_in(l, ld.slot, ld.idx)
                self._cuda.write(sp, w.flags.done_dev + l * w.flags.stride, w.epoch)
            elif c.landed:
                if not w.wait_ready(l, self._timeout_s):
                    raise TimeoutError("kvlane connector: layer %s of request %s not READY "
                                       "within %.0f s" % (layer_name, ld.spec.req_id,
                                                          self._timeout_s))
                c.copy_in(l, ld.slot, ld.idx)
                w.set_done(l)  # copied out of the landing slots: kvlane may end the request
            else:
                if not w.wait_ready(l, self._timeout_s):
                    raise TimeoutError("kvlane connector: layer %s of request %s not READY "
                                       "within %.0f s" % (layer_name, ld.spec.req_id,
                                                          self._timeout_s))
                w.set_done(l)  # the bytes are in the engine's cache: kvlane holds nothing
            self.stats["layer_waits"] += 1

    def save_kv_layer(self, layer_name, kv_layer, attn_metadata, **kwargs):
        """Prefill side: PUSH this layer's blocks of each saving sequence (a CPU cache: from
        the cache itself, now; a CUDA cache: copied to pinned landing slots on the stream, and
        pushed from wait_for_save once that copy is done)."""
        meta = self._connector_metadata
        if meta is None or not meta.saves:
            return  # the decode side pulls: nothing to save
        c = self._cache
        l = c.index[layer_name]
        for spec in meta.saves:
            if not c.landed and not c.cuda:
                self._open_push(spec, l, lambda p, i, lb: c.addr(l, p, lb))
                continue
            c.landing_area()  # a CUDA cache pushes through pinned slots
            n = len(spec.local_block_ids)
            slot = self._save_slots.get(spec.req_id)
            if slot is None:
                slot = self._save_slots[spec.req_id] = c.take_slots(n)
            c.copy_out(l, slot, c.index_tensor(spec.local_block_ids))
            self._cuda_saves.append((spec, l, slot))

    def _open_push(self, spec, l, local_addr):
        try:
            self._open_push_req(spec, l, local_addr)
        except (kvlane.Error, LookupError) as e:
            # refused (no peer, no segment, a block past its end): counted, named, and the
            # request's blocks are handed back once its other pushes are done
            self.last_error = "push of %s, layer %d: %s" % (spec.req_id, l, e)
            self.stats["push_failures"] += 1
            self._push_failed.add(spec.req_id)

    def _open_push_req(self, spec, l, local_addr):
        c, rt = self._cache, self._rt
        peer = self._peers.peer(spec.push_host)
        seg = self._peers.segment(peer, spec.push_segment)
        g = seg.geom
        _check_remote(spec.push_block_ids, seg)
        blocks = [kvlane.Block(seg.id, ((l * 2 + p) * g.blocks + int(rb)) * g.block_bytes,
                               c.block_bytes, local_addr(p, i, int(lb)))
                  for p in range(2)
                  for i, (rb, lb) in enumerate(zip(spec.push_block_ids, spec.local_block_ids))]
        req = rt.open_request(peer, blocks, [list(range(len(blocks)))],
                              cls=kvlane.ReqClass.KVL_REQ_PREFILL,
                              dir=kvlane.ReqDir.KVL_REQ_PUSH)
        self._pushes.setdefault(spec.req_id, []).append(req)
        self._by_req[req] = ("save", spec.req_id)
        self.stats["pushes"] += 1

    def wait_for_save(self):
        """Until every PUSH of this step is on the peer (a push's bytes must stay as they are
        until then). A CUDA cache's layers were copied to landing slots on the stream: this
        waits for that copy (a host sync, on the prefill side only) and pushes them."""
        if self._cuda_saves:
            c = self._cache
            if c.cuda:
                import torch
                torch.cuda.current_stream(c.device).synchronize()
            for spec, l, slot in self._cuda_saves:
                self._open_push(spec, l, lambda p, i, lb: c.landing_addr(l, slot + i, p))
            self._cuda_saves = []
        end = time.monotonic() + self._timeout_s
        while self._pushes:
            self._drain()
            if time.monotonic() > end:
                raise TimeoutError("kvlane connector: %d PUSH requests not done within %.0f s"
                                   % (sum(map(len, self._pushes.values())), self._timeout_s))
        self._sent |= self._push_failed
        self._push_failed = set()
        for rid, slot in self._save_slots.items():
            meta = self._connector_metadata
            n = next(len(sp.local_block_ids) for sp in meta.saves if sp.req_id == rid)
            self._cache.give_slots(slot, n)
        self._save_slots = {}

    def _drain(self):
        rt = self._rt
        if rt is None or rt.closed:
            return
        E = kvlane.ReqEventType
        evq = _common.events(rt)
        evq.pump()
        for req, (kind, rid) in list(self._by_req.items()):
            for ev in evq.take(req):
                if kind == "save":
                    if ev.type == E.KVL_REQ_EV_STEP_READY:
                        rt.step_done(ev.req, ev.step)
                        continue
                    left = self._pushes.get(rid, [])
                    if ev.req in left:
                        left.remove(ev.req)
                    if ev.type == E.KVL_REQ_EV_FAILED:
                        # vLLM has no channel for it: the stats and last_error tell
                        self.last_error = "push of %s: %s" % (rid, ev.status.name)
                        self.stats["push_failures"] += 1
                    if not left:
                        self._pushes.pop(rid, None)
                        self._sent.add(rid)
                    del self._by_req[ev.req]
                elif kind == "load" and ev.type != E.KVL_REQ_EV_STEP_READY:
                    self._end_load(rid, ev)
                elif kind == "aload":
                    if ev.type != E.KVL_REQ_EV_STEP_READY:
                        self._end_load(rid, ev)
                        continue
                    ld = self._async[rid]
                    if ld.slot is not None:  # landed in host slots: into the cache now
                        self._cache.copy_in(ev.step, ld.slot, ld.idx)
                    rt.step_done(ev.req, ev.step)
        while self._slot_wait and self._slot_wait[0][0].query():
            _, slot, n = self._slot_wait.pop(0)
            self._cache.give_slots(slot, n)

    def _end_load(self, rid, ev):
        whole = rid in self._async
        ld = self._async.pop(rid) if whole else self._active.pop(rid)
        del self._by_req[ev.req]
        ld.status = kvlane.Status.KVL_OK if ev.type == kvlane.ReqEventType.KVL_REQ_EV_DONE \
            else ev.status
        if ld.slot is not None:
            n = len(ld.spec.local_block_ids)
            if whole and self._cache.cuda:
                # its copies out of the slots are on the stream (not DONE-ordered): the
                # slots are free once an event behind them has passed
                import torch
                e = torch.cuda.Event()
                e.record(torch.cuda.current_stream(self._cache.device))
                self._slot_wait.append((e, ld.slot, n))
            else:
                self._cache.give_slots(ld.slot, n)
        if whole:
            self._recv_async.add(rid)
        if ld.status != kvlane.Status.KVL_OK:
            for b in ld.spec.local_block_ids:
                self._errors.add(int(b))
                self._error_status[int(b)] = ld.status
            self.stats["load_failures"] += 1
            self.last_error = "request %s: %s" % (rid, ld.status.name)
        self._recv_done.add(rid)

    def _cancel(self, rid):
        ld = self._active.get(rid) or self._async.get(rid)
        if ld is not None and ld.status is None:
            try:
                self._rt.cancel(ld.req)  # ends FAILED(KVL_ERR_CANCELED), once READs are back
            except kvlane.Error as e:
                if e.errno not in (2, 114):  # ENOENT: it ended already; EALREADY: canceled
                    raise
        for req in self._pushes.get(rid, []):
            try:
                self._rt.cancel(req)
            except kvlane.Error as e:
                if e.errno not in (2, 114):
                    raise

    def handle_preemptions(self, kv_connector_metadata):
        """Preempted sequences' loads end now: their blocks are about to be reused."""
        for rid in getattr(kv_connector_metadata, "cancels", []):
            self._cancel(rid)

    def get_finished(self, finished_req_ids):
        self._drain()
        self._finished_seen.update(finished_req_ids)
        sent = self._sent & self._finished_seen
        self._sent -= sent
        self._finished_seen -= sent
        # sync loads end inside their step: vLLM wants no finished_recving for them; the
        # whole-request loads that ended (DONE or FAILED: their blocks are load errors then)
        self._recv_done.clear()
        recv, self._recv_async = self._recv_async, set()
        return (sent or None), (recv or None)

    def get_block_ids_with_load_errors(self):
        """The blocks of loads that failed (kvlane's typed status: block_error_status()).
        On CPU the step's loads have all written DONE, so their end events are awaited here
        (bounded): a failure is never reported a step late. On CUDA the stream writes DONE
        later; waiting would be a host sync, so a failure may show in the next step."""
        if self._cache is not None and not self._cache.cuda:
            end = time.monotonic() + self._timeout_s
            while any(len(ld.waited) == self._cache.layers for ld in self._active.values()):
                self._drain()
                if time.monotonic() > end:
                    break
        else:
            self._drain()
        errs, self._errors = self._errors, set()
        return errs

    def block_error_status(self):
        """{block id: kvlane.Status} of the failed loads reported so far."""
        return dict(self._error_status)

    def get_kv_connector_stats(self):
        return dict(self.stats)

    def shutdown(self):
        for rid in list(self._active) + list(self._async):
            self._cancel(rid)
