#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""EAL tests of the [memory] pool: what kvlaned carves from it (read through the real
telemetry socket), a peer's READ of a pool-carved segment over tcp with every byte checked,
and the start-up errors (pool too small, chunks not dividing it, hugepages short, memlock).

Usage: test_memory.py {mem_carve|mem_read|mem_bad|mem_gpu} PATH-TO-KVLANED PATH-TO-KVLANE-PERF,
with KVL_SRC (repository root) in the environment. Exit 0 pass, 1 fail, 77 skipped (mem_gpu
on a host without a usable GPU, with the reason).
"""
import json
import os
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kvl_harness as h  # noqa: E402  (its own folder)
from kvl_harness import Fail, check, check_eq, cmd, log  # noqa: E402

LIMIT_S = {"mem_carve": 60, "mem_read": 120, "mem_bad": 90, "mem_gpu": 60}
RUN_TIMEOUT_S = 30
MIB = 1 << 20
POOL_MB = 64     # [segment.kv] of default.ini is 32 MiB
CHUNK_KB = 2048  # default.ini's chunk_size_kb
STAGING_MB = 4
KV_SEED = "1"
HP_ROOT = "/sys/kernel/mm/hugepages"


class Ctx(h.Ctx):
    def __init__(self, scenario, kvlaned, perf):
        super().__init__(scenario, kvlaned, "mem")
        self.perf = perf

    def run(self, exe, args, what):
        """@exe with the harness's EAL arguments and default.ini, to its exit."""
        prefix = self.unique(what)
        argv = [exe, *h.EAL, "-m", "256", "--file-prefix", prefix, "--", "-c", h.DEFAULT_INI,
                "--set", h.LISTEN_ANY, *args]
        return h.Run(argv, self.rundir(prefix), RUN_TIMEOUT_S)


def pool_args(mb=POOL_MB, *more):
    return h.sets(f"memory.pool_size_mb={mb}", *more)


def free_hugepages():
    """{page size in bytes: free pages} as this host's sysfs shows them."""
    out = {}
    if os.path.isdir(HP_ROOT):
        for d in os.listdir(HP_ROOT):
            if d.startswith("hugepages-") and d.endswith("kB"):
                with open(os.path.join(HP_ROOT, d, "free_hugepages")) as f:
                    out[int(d[len("hugepages-"):-2]) << 10] = int(f.read())
    return out


def expected_pages(pool_bytes):
    """(page_size, hugepage) that hugepage = auto must pick on this host."""
    hp = free_hugepages()
    for size in sorted(hp, reverse=True):
        if size <= 1 << 30 and hp[size] >= -(-pool_bytes // size):
            return size, 1
    return 4096, 0


def seg_rows(c, *procs):
    return h.table_rows(cmd(c, "/kvlane/segments", *procs), ("id", "name", "length"),
                        "/kvlane/segments", *procs)


def check_pool(c, pool_mb, chunk_kb, pages, what, *procs, cuda=0):
    """/kvlane/memory against /kvlane/segments: every live segment is in the pool, and the
    chunks used are exactly theirs, each rounded up to whole chunks; the pages are @pages,
    what expected_pages() said before the process started (its pool takes them). Returns
    both replies."""
    mem = cmd(c, "/kvlane/memory", *procs)
    segs = seg_rows(c, *procs)
    chunk = chunk_kb << 10
    want_used = sum(-(-r["length"] // chunk) for r in segs)
    page, huge = pages
    want = {"enabled": 1, "size_bytes": pool_mb * MIB, "chunk_bytes": chunk,
            "chunks_total": pool_mb * MIB // chunk, "chunks_used": want_used,
            "chunks_free": pool_mb * MIB // chunk - want_used, "segments": len(segs),
            "segment_bytes": sum(r["length"] for r in segs), "allocations": len(segs),
            "page_size": page, "hugepage": huge, "cuda_registered": cuda}
    check_eq({k: mem.get(k) for k in want}, want,
             f"{what}: /kvlane/memory against /kvlane/segments {[(r['name'], r['length']) for r in segs]}",
             *procs)
    check(mem.get("map_ns", 0) > 0, f"{what}: map_ns", "> 0 (mapping and pinning took time)",
          mem.get("map_ns"), *procs)
    check(not [k for k in mem if k.startswith("reg_ns/")], f"{what}: RDMA registrations",
          "none (tcp NICs only)", [k for k in mem if k.startswith("reg_ns/")], *procs)
    return mem, segs


# ---- mem_carve ----

def scenario_mem_carve(ctx):
    # Off (default.ini's pool_size_mb = 0): the command says so, nothing else changes.
    p = ctx.kvlaned("off")
    c = p.telemetry()
    mem = cmd(c, "/kvlane/memory", p)
    check_eq(mem.get("enabled"), 0, "pool_size_mb = 0: /kvlane/memory enabled", p)
    c.close()
    p.stop()

    # On, with the INI's [segment.kv] (32 MiB) and 4 MiB of staging on the NIC lcore.
    pages = expected_pages(POOL_MB * MIB)
    p = ctx.kvlaned("on", args=pool_args(POOL_MB, f"sched.staging_mb={STAGING_MB}"))
    c = p.telemetry()
    mem, segs = check_pool(c, POOL_MB, CHUNK_KB, pages, "segment + staging", p)
    names = sorted(r["name"] for r in segs)
    check_eq(names, ["kv", "staging.lo"], "segments carved at start", p)
    check_eq(mem["chunks_used"], 32 * MIB // (CHUNK_KB << 10) + STAGING_MB * MIB //
             (CHUNK_KB << 10), "chunks used: 16 for kv + 2 for staging", p)
    if not pages[1]:
        # hugepage = auto without enough free: the logged note names the count and the fix
        p.wait_line(r"memory\.hugepage = auto: pool_size_mb = 64 needs 32 hugepages of 2048 "
                    r"kB and HugePages_Free is \d+ .*echo \d+ > .*nr_hugepages; using 4 KiB "
                    r"pages", 1, stream="err", what="the 4 KiB fallback's note")
    p.wait_line(r"memory: pool of 64 MiB, 32 chunks of 2048 KiB", 1, stream="err",
                what="the pool's start-up line")
    log(f"pool 64 MiB: chunks used {mem['chunks_used']} = kv 16 + staging 2, free "
        f"{mem['chunks_free']}, page {mem['page_size']} B, mapped+pinned in "
        f"{mem['map_ns'] / 1e6:.1f} ms")
    c.close()
    p.stop()


# ---- mem_read ----

def scenario_mem_read(ctx):
    """A peer READs the pool-carved [segment.kv] over tcp, every byte checked against its
    pattern; the peer's own local segment is carved from its own pool (seen through its
    telemetry while it lingers)."""
    pages = expected_pages(POOL_MB * MIB)
    server = ctx.kvlaned("srv", args=pool_args())
    tel = server.telemetry()
    mem, segs = check_pool(tel, POOL_MB, CHUNK_KB, pages, "server", server)
    check_eq([r["name"] for r in segs], ["kv"], "server: segments", server)

    prefix = ctx.unique("client")
    argv = [ctx.perf, *h.EAL, "-m", "256", "--file-prefix", prefix, "--", "-c", h.DEFAULT_INI,
            *pool_args(), "--read", "--verify", "--json", "-s", "64K,1M", "-n", "256",
            "--segment", "kv", "--seed", KV_SEED, "--seg-size", "32M", "--linger", "30",
            server.addr]
    pages = expected_pages(POOL_MB * MIB)  # what the server left
    client = h.Proc(ctx, argv, ctx.rundir(prefix), prefix, "kvlane-perf client")
    client.wait_line(r"kvlane-perf: lingering", RUN_TIMEOUT_S + 30, stream="err",
                     what="the client's run, then lingering")
    ctel = client.telemetry()
    cmem, csegs = check_pool(ctel, POOL_MB, CHUNK_KB, pages, "client", client)
    check("kvlane-perf-local" in [r["name"] for r in csegs], "client: its local segment",
          "kvlane-perf-local among its segments (kvl_seg_alloc, carved from its pool)",
          [r["name"] for r in csegs], client)
    stats = cmd(tel, "/kvlane/stats", server)
    check(stats.get("tcp/served_bytes", 0) >= 256 * (65536 + MIB), "server: tcp/served_bytes",
          f">= {256 * (65536 + MIB)}", stats.get("tcp/served_bytes"), server)
    ctel.close()
    client.stop()  # its stdout is complete once it has exited
    objs = [json.loads(ln) for ln in client.out if ln.startswith("{")]
    check_eq([o.get("bytes_per_msg") for o in objs], [65536, MIB], "one JSON object per size",
             client)
    for o in objs:
        s = o["bytes_per_msg"]
        want = {"op": "read", "result": "ok", "completed_ok": 256, "failed": 0,
                "verify": True, "verified_bytes": 256 * s, "verify_error": None}
        check_eq({k: o.get(k) for k in want}, want, f"--read --verify {s} B", client, server)
    log(f"READ 256 x 64 KiB + 256 x 1 MiB from the pool-carved kv, every byte verified; "
        f"client pool: {cmem['chunks_used']} chunks for {[r['name'] for r in csegs]}")
    tel.close()
    server.stop()


# ---- mem_bad ----

def expect_refused(r, rc, frags, what):
    check_eq(r.rc, rc, f"{what}: exit status", r)
    for f in frags:
        check(f in r.stderr, f"{what}: the error", repr(f), "not on stderr", r)
    check("kvlaned: ready" not in r.stdout, f"{what}: not started", "no ready line", "ready", r)
    log(f"{what}: exit {rc}, {frags[0]!r}")


def scenario_mem_bad(ctx):
    exe = ctx.kvlaned_exe
    # Too small for [segment.kv] (32 MiB) + staging: refused as an INI error, nothing runs.
    r = ctx.run(exe, pool_args(16, "sched.staging_mb=8"), "small")
    expect_refused(r, 3, ["memory.pool_size_mb: 16 MiB cannot hold 1 [segment.*] (32 MiB) + "
                          "sched.staging_mb on 1 NIC (8 MiB) = 40 MiB in 2048 KiB chunks; "
                          "raise it to at least 40, or 0 to take them from DPDK memory"],
                   "pool too small")
    # Chunks that do not divide the pool.
    r = ctx.run(exe, pool_args(63), "chunk")
    expect_refused(r, 3, ["memory.chunk_size_kb: pool_size_mb = 63 MiB is not a whole number "
                          "of chunk_size_kb = 2048 KiB chunks"], "chunk not dividing")
    # hugepage = true with fewer free than the pool needs (sized past what this host has).
    hp = free_hugepages()
    free2m = hp.get(2 * MIB, 0)
    mb = max(POOL_MB, (free2m + 1) * 2, (hp.get(1 << 30, 0) + 1) * 1024)
    mb = -(-mb // 2) * 2
    r = ctx.run(exe, pool_args(mb, "memory.hugepage=true"), "huge")
    expect_refused(r, 4, [f"memory.hugepage = true: pool_size_mb = {mb} needs {mb // 2} "
                          f"hugepages of 2048 kB and HugePages_Free is {free2m} (",
                          "reserve them: echo ",
                          " > /sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages, or set "
                          "hugepage = auto"], "hugepages short")
    # 4 KiB pages that cannot be locked: without CAP_IPC_LOCK, under an 8 MiB memlock limit.
    setpriv, prlimit = shutil.which("setpriv"), shutil.which("prlimit")
    if setpriv and prlimit and os.geteuid() == 0:
        prefix = ctx.unique("memlock")
        argv = [prlimit, f"--memlock={8 * MIB}", setpriv, "--inh-caps=-ipc_lock",
                "--bounding-set=-ipc_lock", exe, *h.EAL, "-m", "256", "--file-prefix", prefix,
                "--", "-c", h.DEFAULT_INI, "--set", h.LISTEN_ANY,
                *pool_args(POOL_MB, "memory.hugepage=false")]
        r = h.Run(argv, ctx.rundir(prefix), RUN_TIMEOUT_S)
        expect_refused(r, 4, ["memory.pool_size_mb = 64: cannot lock the pool in RAM (mlock: ",
                              "RLIMIT_MEMLOCK (ulimit -l) is 8192 KiB (hard 8192 KiB) and the "
                              "pool needs 65536 KiB: raise it (ulimit -l unlimited"],
                       "memlock")
    elif os.geteuid() != 0 and os.path.exists("/proc/self/limits"):
        log("memlock: not root; the unit test (pool) covers the message")
    else:
        log("memlock: setpriv or prlimit missing; the unit test (pool) covers the message")


# ---- mem_gpu (the gpu suite) ----

def scenario_mem_gpu(ctx):
    """With [gpu] enable, the pool is pinned for CUDA once (cudaHostRegister) and
    /kvlane/memory says what it took."""
    args = pool_args(POOL_MB, "gpu.enable=true", "gpu.vram_reserve_mb=0")
    prefix = ctx.unique("gpu")
    argv = [ctx.kvlaned_exe, *h.EAL, "-m", "256", "--file-prefix", prefix, "--", "-c",
            h.DEFAULT_INI, "--set", h.LISTEN_ANY, *args]
    pages = expected_pages(POOL_MB * MIB)
    p = h.Proc(ctx, argv, ctx.rundir(prefix), prefix, "kvlaned gpu")
    try:
        p.wait_line(h.READY_RE, h.READY_TIMEOUT_S, what="kvlaned gpu: start-up")
    except Fail:
        rc = p.wait_exit(5)
        if rc == 4 and ("no CUDA device is usable" in p.stderr
                        or "built without CUDA" in p.stderr):
            line = [ln for ln in p.err if "gpu.enable" in ln][:1]
            print(f"skipped: mem_gpu: no usable GPU here ({line[0] if line else p.stderr})")
            sys.exit(77)
        raise
    c = p.telemetry()
    mem = cmd(c, "/kvlane/memory", p)
    check_eq((mem.get("enabled"), mem.get("cuda_registered")), (1, 1),
             "/kvlane/memory: the pool, registered with CUDA", p)
    check(mem.get("cuda_reg_ns", 0) > 0, "/kvlane/memory cuda_reg_ns", "> 0",
          mem.get("cuda_reg_ns"), p)
    p.wait_line(r"memory: the pool registered with CUDA in [\d.]+ ms", 1, stream="err",
                what="the CUDA registration's log line")
    check_pool(c, POOL_MB, CHUNK_KB, pages, "with a GPU", p, cuda=1)
    log(f"pool 64 MiB pinned for CUDA in {mem['cuda_reg_ns'] / 1e6:.2f} ms "
        f"(mapped and pinned in {mem['map_ns'] / 1e6:.1f} ms)")
    c.close()
    p.stop()


SCENARIOS = {"mem_carve": scenario_mem_carve, "mem_read": scenario_mem_read,
             "mem_bad": scenario_mem_bad, "mem_gpu": scenario_mem_gpu}


def main(argv):
    return h.main(argv, SCENARIOS, LIMIT_S, ["PATH-TO-KVLANED", "PATH-TO-KVLANE-PERF"], Ctx)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
