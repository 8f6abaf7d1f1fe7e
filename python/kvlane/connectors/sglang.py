# SPDX-License-Identifier: BSD-3-Clause
"""kvlane shaped for SGLang's disaggregation (base/conn.py: BaseKVManager, BaseKVSender,
BaseKVReceiver, KVPoll), over the request API.

SGLang describes its KV pool as KVArgs: kv_data_ptrs (K of every layer, then V of every layer,
or one buffer per layer for MLA), kv_data_lens, kv_item_lens (bytes of one page of one buffer)
and page_size; a transfer names pages (np.int32 page indices). Here:
  - KvlaneKVManager registers each distinct (ptr, len) buffer once with kvlane (duplicates are
    dropped, as SGLang's Mooncake backend does);
  - KvlaneKVSender (prefill) PUSHes: send(kv_indices) per chunk maps its pages onto the
    destination pages, merges runs consecutive on both sides, cuts runs at kvlane's block size
    limit, and opens one PUSH request per chunk, one step per buffer pair (layer);
  - KvlaneKVReceiver (decode) PULLs: send_metadata(kv_indices) names the pages that receive,
    and the same mapping PULLs them straight into the pool (KVL_REQ_ENGINE_DEST);
  - poll() -> KVPoll from kvlane's events: Bootstrapping until the room's peer pages are
    known, WaitingForInput until send()/send_metadata(), Transferring, Success (every chunk
    DONE) or Failed (failure_exception() carries kvlane's typed status).
The peer's segment is laid out as the pool is: buffer b's page p at (b * pages + p) *
item_len, i.e. geometry (buffers, 1, pages, item_len). What SGLang carries over ZMQ and its
bootstrap server (which pages the other side holds or gave) is not kvlane's: the engine hands
it over with KvlaneKVManager.set_room(room, segment, pages); the kvlane address is
bootstrap_addr. When SGLang is importable, its KVPoll and base classes are used.
"""
import enum
import time

import kvlane

from . import _common

try:
    from sglang.srt.disaggregation.base.conn import (  # type: ignore
        BaseKVManager, BaseKVReceiver, BaseKVSender, KVArgs, KVPoll)
    HAVE_SGLANG = True
except ImportError:
    HAVE_SGLANG = False

    class KVPoll(enum.IntEnum):
        """SGLang's KVPoll states."""
        Failed = 0
        Bootstrapping = 1
        WaitingForInput = 2
        Transferring = 3
        Success = 4

    class KVArgs:
        """SGLang's KVArgs: plain attributes (the ones kvlane reads are set here)."""

        def __init__(self, **kw):
            self.engine_rank = 0
            self.kv_data_ptrs, self.kv_data_lens, self.kv_item_lens = [], [], []
            self.aux_data_ptrs, self.aux_data_lens, self.aux_item_lens = [], [], []
            self.page_size = 1
            self.gpu_id = 0
            self.__dict__.update(kw)

    class BaseKVManager:
        def __init__(self, args, disaggregation_mode, server_args, is_mla_backend=False):
            pass

    class BaseKVSender:
        def __init__(self, mgr, bootstrap_addr, bootstrap_room, dest_tp_ranks=None, pp_rank=0,
                     req_has_disagg_prefill_dp_rank=False):
            pass

    class BaseKVReceiver:
        def __init__(self, mgr, bootstrap_addr, bootstrap_room=None):
            pass


class KVTransferError(Exception):
    """A transfer of @room failed: status is kvlane's typed Status (or None: refused)."""

    def __init__(self, room, msg, status=None):
        super().__init__("room %s: %s" % (room, msg))
        self.room, self.status = room, status


class KvlaneKVManager(BaseKVManager):
    """One per engine rank: the registered pool and the rooms' peer pages.
    server_args: kvlane_config / kvlane_sets / kvlane_eal (attributes or dict keys) start the
    Runtime unless kvlane.connectors.use_runtime() gave one; kvlane_block_bytes caps a block
    (kvlane's [sched] slot_kb, 64 KiB by default)."""

    def __init__(self, args, disaggregation_mode, server_args, is_mla_backend=False):
        super().__init__(args, disaggregation_mode, server_args, is_mla_backend)

        def opt(k, d=None):
            if isinstance(server_args, dict):
                return server_args.get(k, d)
            return getattr(server_args, k, d)
        self.args, self.mode = args, disaggregation_mode
        self.rt = _common.runtime(opt("kvlane_config"), opt("kvlane_sets"), opt("kvlane_eal"))
        self.peers = _common.peers(self.rt)
        self.max_block = int(opt("kvlane_block_bytes", 65536))
        self.timeout_s = float(opt("kvlane_timeout_s", 30.0))
        ptrs, lens, items = args.kv_data_ptrs, args.kv_data_lens, args.kv_item_lens
        if not (len(ptrs) == len(lens) and len(items) in (1, len(ptrs))) or not ptrs:
            raise ValueError("KvlaneKVManager: kv_data_ptrs (%d), kv_data_lens (%d) and "
                             "kv_item_lens (%d) do not describe one pool"
                             % (len(ptrs), len(lens), len(items)))
        self.item_lens = list(items) * (len(ptrs) if len(items) == 1 else 1)
        self.ptrs, self.lens = [int(p) for p in ptrs], [int(n) for n in lens]
        self.pages = min(n // i for n, i in zip(self.lens, self.item_lens))
        # distinct buffers (SGLang pools can share one), and those adjacent in memory (one
        # allocation carved into layers) as one registration each
        spans = []
        for p, n in sorted(set(zip(self.ptrs, self.lens))):
            if spans and spans[-1][0] + spans[-1][1] >= p:
                spans[-1][1] = max(spans[-1][1], p + n - spans[-1][0])
            else:
                spans.append([p, n])
        self.segments = [self.rt.register(kvlane._kvlane.memory(p, n), name="sgl-%x" % p,
                                          geom=(1, 1, 1, n))
                         for p, n in spans]
        self.rooms = {}

    def register_to_bootstrap(self):
        return  # the peer is reached by its kvlane address (bootstrap_addr)

    def set_room(self, room, segment, pages):
        """The other side's pages for @room (what SGLang's bootstrap/ZMQ carries): the name
        (or id) of the peer's segment and its page indices, in the order kv_indices name
        ours."""
        self.rooms[room] = (segment, [int(x) for x in pages])

    def plan(self, room, segment, local_pages, peer_pages, push):
        """kvlane blocks and steps for @local_pages <-> @peer_pages: runs merged, cut at
        max_block bytes; step b//2 (a layer) holds buffer b's blocks (MHA: K_l and V_l)."""
        if len(local_pages) > len(peer_pages):
            raise KVTransferError(room, "%d pages to move, %d peer pages known"
                                  % (len(local_pages), len(peer_pages)))
        for p in local_pages:
            if not 0 <= int(p) < self.pages:
                raise KVTransferError(room, "page %d outside the registered pool (%d pages)"
                                      % (int(p), self.pages))
        n_buf = len(self.ptrs)
        g = segment.geom
        if g.layers * g.planes != n_buf or g.block_bytes != self.item_lens[0]:
            raise KVTransferError(room, "the peer's segment %s is %s: this pool is %d buffers "
                                  "of %d-byte pages" % (segment.name, tuple(g), n_buf,
                                                        self.item_lens[0]))
        for p in peer_pages:  # kvlane checks the segment's bounds, not its pages
            if not 0 <= int(p) < g.blocks:
                raise KVTransferError(room, "ERANGE: page %d is outside the peer's segment %s "
                                      "(%d pages)" % (int(p), segment.name, g.blocks))
        runs = _common.merge_runs(local_pages, peer_pages)
        per_layer = 2 if n_buf % 2 == 0 and n_buf > 1 else 1
        layers = n_buf // per_layer
        blocks, steps = [], [[] for _ in range(layers)]
        for b in range(n_buf):
            item = self.item_lens[b]
            per = max(1, self.max_block // item)
            # K buffers are 0..L-1 and V buffers L..2L-1: layer b % layers
            step = steps[b % layers]
            for lp, pp, n in runs:
                for k in range(0, n, per):
                    m = min(per, n - k)
                    step.append(len(blocks))
                    blocks.append(kvlane.Block(segment.id, (b * g.blocks + pp + k) * item,
                                               m * item, self.ptrs[b] + (lp + k) * item))
        return blocks, steps, len(runs)


class _Transfer:
    """The state one sender or receiver shares: its chunks' kvlane requests and KVPoll."""

    def __init__(self, mgr, addr, room):
        self.mgr, self.addr, self.room = mgr, addr, room
        self.reqs = []  # handles not ended
        self.exc = None
        self.metric = {"bytes": 0, "t0": None, "t1": None, "runs": 0, "blocks": 0}
        self.expected = None  # pages in all
        self.moved = 0  # pages handed to kvlane
        self.last_called = False

    def _open(self, local_pages, push):
        m = self.mgr
        try:
            if self.room not in m.rooms:
                raise KVTransferError(self.room, "no peer pages for the room (set_room)")
            segname, peer_pages = m.rooms[self.room]
            peer = m.peers.peer(self.addr)
            seg = m.peers.segment(peer, segname)
            off = self.moved
            blocks, steps, runs = m.plan(self.room, seg, list(local_pages),
                                         peer_pages[off:off + len(local_pages)], push)
            req = m.rt.open_request(peer, blocks, steps,
                                    cls=kvlane.ReqClass.KVL_REQ_PREFILL if push
                                    else kvlane.ReqClass.KVL_REQ_DECODE,
                                    dir=kvlane.ReqDir.KVL_REQ_PUSH if push
                                    else kvlane.ReqDir.KVL_REQ_PULL,
                                    engine_dest=not push)
        except (KVTransferError, LookupError, kvlane.Error) as e:
            self.exc = e if isinstance(e, KVTransferError) else KVTransferError(self.room, str(e))
            return
        if self.metric["t0"] is None:
            self.metric["t0"] = time.monotonic()
        self.metric["runs"] += runs
        self.metric["blocks"] += len(blocks)
        self.metric["bytes"] += sum(b.length for b in blocks)
        self.moved += len(local_pages)
        self.reqs.append(req)

    def _progress(self):
        rt = self.mgr.rt
        if rt.closed:
            if self.exc is None and self.reqs:
                self.exc = KVTransferError(self.room, "the kvlane runtime is closed")
            return
        E = kvlane.ReqEventType
        evq = _common.events(rt)
        evq.pump()
        for req in list(self.reqs):
            for ev in evq.take(req):
                if ev.type == E.KVL_REQ_EV_STEP_READY:
                    rt.step_done(req, ev.step)
                    continue
                self.reqs.remove(req)
                if ev.type == E.KVL_REQ_EV_FAILED and self.exc is None:
                    self.exc = KVTransferError(self.room, "kvlane request failed: %s (%s)"
                                               % (ev.status.name, ev.status), ev.status)
        if not self.reqs and self.last_called and self.metric["t1"] is None:
            self.metric["t1"] = time.monotonic()

    def poll(self):
        if self.exc is not None:
            return KVPoll.Failed
        if self.room not in self.mgr.rooms:
            return KVPoll.Bootstrapping
        self._progress()
        if self.exc is not None:
            return KVPoll.Failed
        if not self.last_called:
            return KVPoll.WaitingForInput if not self.reqs and self.moved == 0 \
                else KVPoll.Transferring
        return KVPoll.Transferring if self.reqs else KVPoll.Success

    def failure_exception(self):
        raise self.exc if self.exc is not None else KVTransferError(self.room, "no failure")

    def abort(self):
        for req in self.reqs:
            try:
                self.mgr.rt.cancel(req)  # ends FAILED(KVL_ERR_CANCELED)
            except kvlane.Error:
                pass
        if self.exc is None:
            self.exc = KVTransferError(self.room, "aborted", kvlane.Status.KVL_ERR_CANCELED)

    def wait(self, timeout_s=None):
        """Poll until Success or Failed (a convenience for tests and tools)."""
        end = time.monotonic() + (timeout_s or self.mgr.timeout_s)
        while (st := self.poll()) not in (KVPoll.Success, KVPoll.Failed):
            if time.monotonic() > end:
                return st
        return st

    def get_transfer_metric(self):
        t0, t1 = self.metric["t0"], self.metric["t1"]
        return {"transfer_latency_s": (t1 - t0) if t0 and t1 else None,
                "transfer_total_bytes": self.metric["bytes"], "runs": self.metric["runs"],
                "blocks": self.metric["blocks"]}

    def clear(self):
        self.reqs, self.moved, self.last_called = [], 0, False


class KvlaneKVSender(_Transfer, BaseKVSender):
    """Prefill side: PUSHes its pages onto the room's peer pages, chunk by chunk."""

    def __init__(self, mgr, bootstrap_addr, bootstrap_room, dest_tp_ranks=None, pp_rank=0,
                 req_has_disagg_prefill_dp_rank=False):
        _Transfer.__init__(self, mgr, bootstrap_addr, bootstrap_room)

    def init(self, num_kv_indices, aux_index=None):
        self.expected = int(num_kv_indices)

    def send(self, kv_indices, state_indices=None, token_position_offset=0):
        """One prefill chunk's pages (np.int32 or a list); the chunk that reaches
        num_kv_indices is the last."""
        pages = [int(p) for p in kv_indices]
        self._open(pages, push=True)
        if self.expected is None or self.moved >= self.expected:
            self.last_called = True


class KvlaneKVReceiver(_Transfer, BaseKVReceiver):
    """Decode side: PULLs the room's peer pages into the pages it names."""

    def __init__(self, mgr, bootstrap_addr, bootstrap_room=None):
        _Transfer.__init__(self, mgr, bootstrap_addr, bootstrap_room)

    def init(self, prefill_dp_rank=None):
        return

    def send_metadata(self, kv_indices, aux_index=None, state_indices=None,
                      decode_prefix_len=None):
        pages = [int(p) for p in kv_indices]
        self.expected = len(pages)
        self._open(pages, push=False)
        self.last_called = True
