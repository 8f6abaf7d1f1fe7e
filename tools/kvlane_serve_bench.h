/* SPDX-License-Identifier: BSD-3-Clause */
/* kvlane-serve-bench: what its C core and its compute backends (CPU, CUDA) share. */
#ifndef KVL_TOOLS_SERVE_BENCH_H
#define KVL_TOOLS_SERVE_BENCH_H

#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define SB_BLOCK_TOKENS 16 /* tokens per KV block (one block per layer) */
#define SB_GROUP_HEADS	8  /* KV heads per attention unit: the GPU kernel's shape */

/* A model's decode-side shape. A layer's block is G units of [K|V][heads][16 tokens][dim]
 * bf16, heads = min(kv_heads, 8), G = kv_heads / heads (the GPU kernel takes one unit). */
struct sb_shape {
	const char *name;
	uint32_t layers, kv_heads, head_dim, q_heads;
	uint64_t weight_bytes; /* read once per decode step (all layers) */
	double params;	       /* for the prefill model's FLOPs (2 per parameter per token) */
	uint32_t ffn;	       /* the MLP's width, for --prefill real (0: that preset has none) */
};

static inline uint32_t sb_group_heads(const struct sb_shape *s)
{
	return s->kv_heads < SB_GROUP_HEADS ? s->kv_heads : SB_GROUP_HEADS;
}

static inline uint32_t sb_groups(const struct sb_shape *s)
{
	return s->kv_heads / sb_group_heads(s);
}

static inline uint32_t sb_block_bytes(const struct sb_shape *s)
{
	return 2u * s->kv_heads * SB_BLOCK_TOKENS * s->head_dim * 2u;
}

/*
 * The KV pattern: 64-bit word i of request key @h (its byte offset 8i in the request's KV,
 * layer-major) is 0x3F80 in every bf16 lane's high bits (values in [1, 2): attention stays
 * finite) and 7 bits of a sequence distinct per request and offset in each lane's low bits.
 * Cheap enough that filling it runs at memory speed.
 */
#define SB_PAT_HI  0x3F803F803F803F80ull
#define SB_PAT_LO  0x007F007F007F007Full
#define SB_PAT_MUL 0x9E3779B97F4A7C15ull

#ifdef __CUDACC__
#define SB_HD __host__ __device__
#else
#define SB_HD
#endif

static inline SB_HD uint64_t sb_pat_word(uint64_t h, uint64_t i)
{
	return SB_PAT_HI | ((h + i * SB_PAT_MUL) & SB_PAT_LO);
}

/* A compute backend: where the decode side's KV lives and how a step is computed. */
struct sb_backend {
	const char *name;
	bool device; /* KV pointers are device memory */
	/* weights, queries, outputs for @slots requests of up to @max_blocks blocks per layer,
	 * and an own KV cache of @cache_bytes (0: none, the scheduler's staging is the cache) */
	int (*init)(const struct sb_shape *s, unsigned slots, uint32_t max_blocks,
		    uint64_t cache_bytes, uint64_t seed, char *err, unsigned errlen);
	uint8_t *(*cache)(void);
	/* tcp's receive buffers: pinned host memory (GPU: cudaHostAlloc), so the copy into the
	 * cache is a DMA the CPU only starts */
	void *(*host_alloc)(uint64_t len);
	void (*host_free)(void *p);
	/* @len host bytes at @src into the cache at @dst, queued behind receive buffer @buf's
	 * earlier copies (GPU: cudaMemcpyAsync on tcp's own stream, an event per buffer) */
	int (*upload_async)(void *dst, const void *src, uint64_t len, unsigned buf);
	/* waits until every copy queued for @buf has completed (the buffer may be reused) */
	int (*upload_wait)(unsigned buf);
	/* @n blocks of @len bytes from @src[k] to @dst[k], inside the decode side's memory (the
	 * scheduler's staging window into the KV cache) */
	int (*gather)(void *const *dst, void *const *src, unsigned n, uint32_t len);
	/* the pattern of key @h at request offset @off written in place (host memory: the
	 * prefill side's tier) */
	int (*fill)(void *dst, uint64_t len, uint64_t h, uint64_t off);
	/* the same into @n blocks of @len bytes at @blk[k], request offset @off[k], in the decode
	 * side's memory, in one pass (resident: its KV is in VRAM already) */
	int (*fill_blocks)(void *const *blk, const uint64_t *off, unsigned n, uint32_t len,
			   uint64_t h);
	/* @n blocks of @len bytes at @blk[k], request offset @off[k]: bytes unlike the pattern */
	uint64_t (*verify)(void *const *blk, const uint64_t *off, unsigned n, uint32_t len,
			   uint64_t h);
	/* the block table of @slot's layer @layer: @nblk blocks, in token order */
	int (*table)(unsigned slot, uint32_t layer, void *const *blk, uint32_t nblk);
	/* a decode step: weights(l) then attn(.., l, ..) for each request computing layer l,
	 * layer by layer; they may be only queued (GPU: one weight read and one batched
	 * attention launch per layer, issued by step_submit) and are computed by step_end */
	void (*step_begin)(void);
	void (*weights)(uint32_t layer);
	void (*attn)(unsigned slot, uint32_t layer, uint32_t nblk);
	/* waits for the step; returns its compute seconds (GPU: CUDA events) */
	double (*step_end)(void);
	/* a hash of @slot's last outputs, every layer */
	uint64_t (*out_hash)(unsigned slot);
	/* seconds of one decode step reading the weights alone (every layer, no attention):
	 * the floor of any step's time, measured once at init (TPOT's bound) */
	double (*probe_weights)(void);
	void (*fini)(void);
	/* issues the step's queued work (the CPU-side cost of launching it, timed apart from
	 * step_end's wait) */
	void (*step_submit)(void);
	/* bytes unlike the pattern that verify found without returning them (GPU: its kernels
	 * count on the device and verify returns 0): waits for every verify queued so far */
	uint64_t (*bad_total)(void);
	/* --prefill real: @n blocks of @len bytes at @blk[k] whose checksums (the prefill's,
	 * sb_pf_block_sums) are not @want[k]: their bytes counted as bad, on the device, read
	 * by bad_total as verify's are. NULL: the backend has no real prefill */
	uint64_t (*verify_sums)(void *const *blk, const uint64_t *want, unsigned n, uint32_t len);
};

extern const struct sb_backend kvl_sb_cpu;
#ifdef KVL_SB_GPU
extern const struct sb_backend kvl_sb_gpu;
int kvl_sb_gpu_present(char *why, unsigned len);
/* A bf16 GEMM of @m x @k by @k x @n (fp32 accumulation, the bench's own tensor-core kernel),
 * checked against the host and timed: its rate in FLOP/s in *@flops. 0, or -1 with @why. */
int kvl_sb_gpu_gemm_rate(uint32_t m, uint32_t n, uint32_t k, double *flops, char *why,
			 unsigned len);
/*
 * --prefill real: the preset's layers (tools/kvlane_serve_prefill.h: its GEMMs and causal
 * attention, the bench's own kernels) run per prompt on this process's GPU, on a stream of
 * their own beside the decode steps. init: the weights and the activations for prompts of up
 * to @max_tokens, and a VRAM buffer for one prompt's KV. run: the prefill of prompt @key of
 * @tokens tokens, its KV checksummed block by block into @sums (host, layers x nb words), then
 * copied out to @n destination blocks of @len bytes at @dst[k] (request order, host memory
 * registered with CUDA or device memory; adjacent blocks in one copy), all waited for; the
 * prefill's own GPU seconds in *@gpu_s. 0, or -1 with @why. @decode_first: the decode steps'
 * stream at the highest priority and the prefill's at the lowest (else both at the default).
 */
int kvl_sb_gpu_pf_init(const struct sb_shape *s, uint32_t max_tokens, uint64_t seed,
		       bool decode_first, char *why, unsigned len);
int kvl_sb_gpu_pf_run(uint64_t key, uint32_t tokens, void *const *dst, uint32_t n, uint32_t len,
		      uint64_t *sums, double *gpu_s, char *why, unsigned whylen);
double kvl_sb_gpu_pf_flops(uint32_t tokens);
uint64_t kvl_sb_gpu_pf_weight_bytes(void);
void kvl_sb_gpu_pf_fini(void);
/* This thread's CUDA device: @dev (the prefill process's --prefill-device); 0 or -1 with @why */
int kvl_sb_gpu_use_device(int dev, char *why, unsigned len);
/* cudaHostRegister of @len bytes at @p (tcp's prefill output, shared with its sender): 0 or
 * -1 with @why */
int kvl_sb_gpu_host_register(void *p, uint64_t len, char *why, unsigned whylen);
void kvl_sb_gpu_host_unregister(void *p);
#endif

#ifdef __cplusplus
}
#endif

#endif
