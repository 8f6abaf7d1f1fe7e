/* SPDX-License-Identifier: BSD-3-Clause */
/* kvlane-serve-bench's prefill: Llama-style layers on the GPU (own kernels) that write the KV. */
#ifndef KVL_TOOLS_SERVE_PREFILL_H
#define KVL_TOOLS_SERVE_PREFILL_H

#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/*
 * The model, per layer (bf16 storage, fp32 accumulation):
 *   xn = RMSNorm(x) * gamma1;  qkv = xn Wqkv^T;  RoPE on q and k;  K, V -> the KV blocks
 *   x += attn(q, k, v) Wo^T    (causal GQA, scale 1/sqrt(128))
 *   xn = RMSNorm(x) * gamma2;  a = silu(xn Wg^T) * (xn Wu^T);  x += a Wd^T
 * The residual stream x starts from a hashed vector per (key, token, channel) in place of an
 * embedding lookup. There is no final norm and no lm_head: only the KV matters to the
 * benchmark (the first token's logits would be a 1-row GEMM).
 *
 * A layer's KV block (16 tokens) is G units of [K|V][hg heads][16 tokens][head_dim] bf16,
 * hg = min(kv_heads, 8), G = kv_heads / hg: the decode side's layout (kvlane_serve_bench.h).
 */
struct sb_pf_dims {
	uint32_t layers, hidden, q_heads, kv_heads, head_dim, ffn;
};
struct sb_pf; /* opaque */

/* Weights for every layer in VRAM of the current device (hashed from @seed: deterministic),
 * and the activations for prompts of up to @max_tokens tokens. 0, or -1 with @err naming what
 * failed. Dims: head_dim 128 only, hidden == q_heads * head_dim, q_heads % kv_heads == 0,
 * hidden and ffn multiples of 128, max_tokens >= 1. */
int sb_pf_new(struct sb_pf **out, const struct sb_pf_dims *d, uint32_t max_tokens, uint64_t seed,
	      char *err, unsigned errlen);
void sb_pf_free(struct sb_pf *p);
uint64_t sb_pf_weight_bytes(const struct sb_pf *p);
/* 2 * kv_heads * 16 * head_dim * 2 */
uint64_t sb_pf_block_bytes(const struct sb_pf_dims *d);

/* The prefill of prompt @key (@tokens tokens, 1..max_tokens) queued on CUDA stream @stream
 * (a cudaStream_t): every layer's K and V written to @kv (device memory, 16-byte aligned) in
 * request order: layer l's block b (tokens 16b..16b+15) at byte offset (l * nb + b) *
 * block_bytes, nb = ceil(tokens / 16); the last block's pad token slots are zero. 0, or -1
 * with @err (bad tokens, launch error). Asynchronous: the caller synchronises the stream. One
 * run at a time per sb_pf (its activations are shared): queue them on one stream. */
int sb_pf_run(struct sb_pf *p, void *stream, uint64_t key, uint32_t tokens, void *kv, char *err,
	      unsigned errlen);
/* The FLOPs sb_pf_run performs for @tokens: the GEMMs as launched (rows padded to 128) plus
 * the causal attention's QK^T and PV, 4 * head_dim per (query, key <= query) pair per q head. */
double sb_pf_flops(const struct sb_pf_dims *d, uint32_t tokens);
/* Per-block checksums, queued on @stream: out[k] = the sum (mod 2^64) over the @len / 8 words
 * w_i at blk[k] of sb_pf_word_hash(w_i, i): order-independent, so deterministic; equal sums
 * mean the same bytes. @blk and @out device-visible, @len a multiple of 8. 0 or -1 (launch). */
int sb_pf_block_sums(void *stream, const uint64_t *blk, unsigned n, uint32_t len, uint64_t *out);

/* ---- the parts alone (the test's and the benchmark's entries) ---- */

enum sb_pf_epi {
	SB_PF_EPI_STORE, /* C = bf16(A B^T) */
	SB_PF_EPI_RESID, /* C = bf16(R + A B^T) (C may be R) */
	SB_PF_EPI_SILU,	 /* C[m][j] = bf16(silu(acc[m][2j]) * acc[m][2j+1]): C is m x n/2 */
};
/* acc = A B^T in fp32: A bf16 m x k row-major, B bf16 n x k row-major (nn.Linear's [out][in]),
 * C bf16 row-major. Any m >= 1; n a multiple of 8; k a multiple of 32; 16-byte aligned rows.
 * Queued on @stream; 0, or -1 (bad sizes, launch error). */
int sb_pf_gemm(void *stream, enum sb_pf_epi epi, const void *a, const void *b, void *c,
	       const void *r, uint32_t m, uint32_t n, uint32_t k);
/* Causal GQA attention over @qkv (bf16 [tokens][(q_heads + 2 kv_heads) * 128]: q heads, then
 * k heads, then v heads, RoPE applied) into @out (bf16 [tokens][q_heads * 128]); rows past
 * @tokens are neither read nor written. Queued on @stream; 0 or -1. */
int sb_pf_attn(void *stream, const void *qkv, void *out, uint32_t tokens, uint32_t q_heads,
	       uint32_t kv_heads);
/* RoPE's cos and sin of token @t, frequency @i (0..63; channels i and i + 64 rotate
 * together): theta 500000, as the device's table holds them (fp32). */
void sb_pf_rope_cs(uint32_t t, uint32_t i, float *c, float *s);

/* ---- the hashed values, shared by the device and a host reference ---- */

#ifdef __CUDACC__
#define SB_PF_HD __host__ __device__
#else
#define SB_PF_HD
#endif

static inline SB_PF_HD uint64_t sb_pf_mix64(uint64_t x)
{
	x ^= x >> 30;
	x *= 0xBF58476D1CE4E5B9ull;
	x ^= x >> 27;
	x *= 0x94D049BB133111EBull;
	x ^= x >> 31;
	return x;
}

/* sb_pf_block_sums's term for word @w at word index @i of a block */
static inline SB_PF_HD uint64_t sb_pf_word_hash(uint64_t w, uint64_t i)
{
	return sb_pf_mix64(w ^ (i * 0x9E3779B97F4A7C15ull) ^ 0xD1B54A32D192ED03ull);
}

/* x0[t][i], the embedding's stand-in: k / 128, k in [-128, 128), so values in [-1, 1) exact
 * in bf16 */
static inline SB_PF_HD float sb_pf_embed(uint64_t key, uint32_t t, uint32_t i)
{
	uint64_t h =
		sb_pf_mix64(sb_pf_mix64(key ^ 0x6A09E667F3BCC909ull) + (((uint64_t)t << 24) | i));

	return (float)((int)(h >> 56) - 128) / 128.0f;
}

/* A layer's weight arrays, in the order they lie in VRAM. */
enum sb_pf_mat {
	SB_PF_GAMMA1, /* [hidden] */
	SB_PF_GAMMA2, /* [hidden] */
	SB_PF_WQKV,   /* [(q_heads + 2 kv_heads) * 128][hidden]: q rows, k rows, v rows */
	SB_PF_WO,     /* [hidden][hidden] */
	SB_PF_WGU,    /* [2 ffn][hidden]: row 2j gate j, row 2j + 1 up j */
	SB_PF_WD,     /* [hidden][ffn] */
	SB_PF_MATS
};

static inline SB_PF_HD uint64_t sb_pf_whash(uint64_t seed, uint32_t layer, uint32_t mat,
					    uint64_t idx)
{
	return sb_pf_mix64(sb_pf_mix64(seed ^ 0xBB67AE8584CAA73Bull) ^
			   (((uint64_t)layer << 52) | ((uint64_t)mat << 48) | idx));
}

/* Element @idx of a weight matrix before its rounding to bf16: uniform in [-@a, @a), @a =
 * (float)sqrt(3.0 / K) for the GEMM's inner dimension K (unit variance out of unit-variance
 * inputs: activations stay O(1) over 32 layers). Exact up to the one multiply by @a. */
static inline SB_PF_HD float sb_pf_wval(uint64_t seed, uint32_t layer, uint32_t mat, uint64_t idx,
					float a)
{
	uint64_t h = sb_pf_whash(seed, layer, mat, idx);

	return ((float)(h >> 40) * (1.0f / 8388608.0f) - 1.0f) * a;
}

/* RMSNorm's gamma @i: 1 + j / 128, j in [-8, 8) (exact in bf16) */
static inline SB_PF_HD float sb_pf_gamma(uint64_t seed, uint32_t layer, uint32_t mat, uint32_t i)
{
	return 1.0f + (float)((int)(sb_pf_whash(seed, layer, mat, i) >> 60) - 8) / 128.0f;
}

#ifdef __cplusplus
}
#endif

#endif
