/* SPDX-License-Identifier: BSD-3-Clause */
/* Paged decode attention (bf16, GQA 32q/8kv, head dim 128, 16-token blocks) on tensor cores. */
#ifndef KVL_TOOLS_GPU_ATTN_CUH
#define KVL_TOOLS_GPU_ATTN_CUH

#include <cuda_bf16.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include <algorithm>
#include <vector>

/*
 * KV cache layout, one 64 KiB block per 16 tokens of one layer, all KV heads:
 *   [K|V][kv_head 0..7][token 0..15][dim 0..127] bf16  (FlashInfer's paged "HND" with K and V
 * side by side). A sequence is a list of block addresses (the block table holds pointers, so a
 * block may live in the resident pool or in a prefetch staging slot).
 *
 * Decode reads every byte of K and V once and does 4 FLOP per byte-pair: it is bound by HBM,
 * so the kernel's job is to keep enough bytes in flight and spend few instructions per byte:
 * one warp takes a whole block, S = Q K^T and O += P V run on mma.sync (the 4 query heads
 * of a KV head padded to 16 rows: the tensor cores have the slack), blocks stream through a
 * per-warp cp.async ring in shared memory.
 */
#define ATT_HD	   128
#define ATT_BS	   16
#define ATT_QH	   32
#define ATT_KVH	   8
#define ATT_GROUP  (ATT_QH / ATT_KVH)
#define ATT_BLOCK  (2u * ATT_KVH * ATT_BS * ATT_HD * 2u) /* 65536 bytes */
#define ATT_WARPS  4
#define ATT_STAGES 4
#define ATT_ROW	   (ATT_HD + 8) /* smem row in bf16: +16 B so ldmatrix rows hit distinct banks */
#define ATT_STAGE_ELEMS (2 * ATT_BS * ATT_ROW)
#define ATT_SMEM   (ATT_WARPS * ATT_STAGES * ATT_STAGE_ELEMS * 2)

struct att_args {
	const __nv_bfloat16 *q;	   /* [B][32][128] */
	const uint64_t *table;	   /* [B][nblk]: device address of each block */
	int nblk;		   /* blocks per sequence (all full) */
	int splits;		   /* CTAs per (sequence, kv head) */
	float *part_o;		   /* [B][32][splits][128], unnormalised */
	float *part_ml;		   /* [B][32][splits][2]: running max (log2 units) and sum */
	__nv_bfloat16 *out;	   /* [B][32][128] */
	float scale_log2;	   /* softmax scale * log2(e) */
};

static __device__ __forceinline__ uint32_t smem_u32(const void *p)
{
	return (uint32_t)__cvta_generic_to_shared(p);
}

static __device__ __forceinline__ void cp16(void *dst, const void *src)
{
	asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(smem_u32(dst)), "l"(src));
}

static __device__ __forceinline__ void ldm_x4(uint32_t *r, const void *p)
{
	asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
		     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
		     : "r"(smem_u32(p)));
}

static __device__ __forceinline__ void ldm_x4_t(uint32_t *r, const void *p)
{
	asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
		     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
		     : "r"(smem_u32(p)));
}

/* D = A(16x16 bf16) * B(16x8 bf16) + D, fp32 accumulators. */
static __device__ __forceinline__ void mma16816(float *d, const uint32_t *a, uint32_t b0,
						uint32_t b1)
{
	asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
		     "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
		     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
		     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

static __device__ __forceinline__ uint32_t pack_bf16(float lo, float hi)
{
	__nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);

	return *(uint32_t *)&v;
}

/* One warp's block: K and V of its KV head, 16 rows each, padded rows. */
static __device__ __forceinline__ void load_block(__nv_bfloat16 *st, const uint8_t *blk, int kvh,
						  int lane)
{
	const uint8_t *k = blk + (size_t)kvh * ATT_BS * ATT_HD * 2;
	const uint8_t *v = blk + (size_t)(ATT_KVH + kvh) * ATT_BS * ATT_HD * 2;

	/* 2 x 4 KiB = 512 chunks of 16 B, 16 per lane; consecutive lanes, consecutive chunks */
#pragma unroll
	for (int i = 0; i < 8; i++) {
		int c = i * 32 + lane; /* chunk in the 4 KiB: row c / 16, column (c % 16) * 8 */
		int row = c >> 4, col = (c & 15) * 8;

		cp16(st + row * ATT_ROW + col, k + c * 16);
		cp16(st + (ATT_BS + row) * ATT_ROW + col, v + c * 16);
	}
}

/*
 * The variable-length form: one launch for a whole batch of sequences of unequal lengths, as
 * vLLM's paged attention takes seq_lens. Each sequence names its own queries, block table and
 * outputs (so a batch may pick any rows of a caller's arrays), and computes exactly as the
 * fixed-length form computes it alone with min(nblk, splits) splits: the same splits, the
 * same blocks per CTA, the same merge order, so a request's output does not depend on what
 * else is in its batch. A separate struct, not new att_args fields: the fixed-length callers
 * fill att_args field by field and would leave new ones unset.
 */
struct att_seq {
	const __nv_bfloat16 *q; /* [32][128] */
	const uint64_t *table;	/* [nblk]: device address of each block */
	__nv_bfloat16 *out;	/* [32][128] */
	int nblk;		/* its blocks (all full); 0: its outputs are zero */
	int pad;
};

struct att_vargs {
	const struct att_seq *seq; /* [B], device memory; grid z = B */
	int splits;	/* most CTAs per (sequence, kv head); grid x = min(max nblk, this) */
	float *part_o;	/* [B][32][splits][128] */
	float *part_ml; /* [B][32][splits][2] */
	float scale_log2;
};

/* One CTA's share of one sequence: blocks [split * per, ...) of @tab for KV head @kvh, its 4
 * query heads' partial results at @po / @pml ([32][pstride][...] of this sequence, of which
 * it uses @splits). */
static __device__ __forceinline__ void att_split_body(const __nv_bfloat16 *qs, const uint64_t *tab,
						      int nblk, int splits, int pstride, int split,
						      int kvh, float *po, float *pml,
						      float scale_log2)
{
	extern __shared__ __align__(16) __nv_bfloat16 sm[];
	const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
	const int g = lane >> 2, c = lane & 3;
	const int per = (nblk + splits - 1) / splits;
	const int b0 = split * per, b1 = min(nblk, b0 + per);
	__nv_bfloat16 *ring = sm + warp * ATT_STAGES * ATT_STAGE_ELEMS;
	uint32_t qf[8][4];
	float o[16][4];
	float m = -INFINITY, l = 0.f;
	int n = 0; /* blocks of this warp: b0 + warp, b0 + warp + 4, ... */

	/* Q as the A operand: rows g < 4 are the group's query heads, the rest zero. */
#pragma unroll
	for (int kk = 0; kk < 8; kk++) {
		const __nv_bfloat16 *q = qs + ((size_t)kvh * ATT_GROUP + g) * ATT_HD;

		qf[kk][0] = g < ATT_GROUP ? *(const uint32_t *)(q + kk * 16 + 2 * c) : 0u;
		qf[kk][1] = 0u;
		qf[kk][2] = g < ATT_GROUP ? *(const uint32_t *)(q + kk * 16 + 2 * c + 8) : 0u;
		qf[kk][3] = 0u;
	}
#pragma unroll
	for (int j = 0; j < 16; j++)
		o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.f;

	for (int i = b0 + warp; i < b1; i += ATT_WARPS)
		n++;
	/* prologue: STAGES - 1 blocks in flight */
#pragma unroll
	for (int s = 0; s < ATT_STAGES - 1; s++) {
		if (s < n)
			load_block(ring + s * ATT_STAGE_ELEMS,
				   (const uint8_t *)tab[b0 + warp + s * ATT_WARPS], kvh, lane);
		asm volatile("cp.async.commit_group;\n");
	}
	for (int it = 0; it < n; it++) {
		const __nv_bfloat16 *st = ring + (it % ATT_STAGES) * ATT_STAGE_ELEMS;
		float s[2][4];

		{
			int nx = it + ATT_STAGES - 1;

			if (nx < n)
				load_block(ring + (nx % ATT_STAGES) * ATT_STAGE_ELEMS,
					   (const uint8_t *)tab[b0 + warp + nx * ATT_WARPS], kvh,
					   lane);
			asm volatile("cp.async.commit_group;\n");
			asm volatile("cp.async.wait_group %0;\n" ::"n"(ATT_STAGES - 1));
			__syncwarp();
		}
		/* S = Q K^T: 2 token tiles x 8 dim steps. ldmatrix.x4 on K rows [8j..8j+7],
		 * columns [32p, 32p + 32): b0/b1 of dim steps 2p and 2p + 1. */
#pragma unroll
		for (int j = 0; j < 2; j++) {
			s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.f;
#pragma unroll
			for (int p = 0; p < 4; p++) {
				uint32_t r[4];
				const __nv_bfloat16 *addr =
					st + (8 * j + (lane & 7)) * ATT_ROW + 32 * p + 8 * (lane >> 3);

				ldm_x4(r, addr);
				mma16816(s[j], qf[2 * p], r[0], r[1]);
				mma16816(s[j], qf[2 * p + 1], r[2], r[3]);
			}
		}
		/* Online softmax on row g (this lane holds tokens 2c, 2c+1 and 8+2c, 9+2c). */
		{
			float x0 = s[0][0] * scale_log2, x1 = s[0][1] * scale_log2;
			float x2 = s[1][0] * scale_log2, x3 = s[1][1] * scale_log2;
			float mx = fmaxf(fmaxf(x0, x1), fmaxf(x2, x3));
			float mn, corr, p0, p1, p2, p3;
			uint32_t pa[4];

			mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
			mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
			mn = fmaxf(m, mx);
			corr = exp2f(m - mn);
			p0 = exp2f(x0 - mn);
			p1 = exp2f(x1 - mn);
			p2 = exp2f(x2 - mn);
			p3 = exp2f(x3 - mn);
			l = l * corr + (p0 + p1 + p2 + p3); /* this lane's share; quad-summed at end */
			m = mn;
			/* P as the A operand of P V: the S accumulator layout is A's layout. */
			pa[0] = pack_bf16(p0, p1);
			pa[1] = 0u;
			pa[2] = pack_bf16(p2, p3);
			pa[3] = 0u;
#pragma unroll
			for (int j = 0; j < 16; j++) {
				o[j][0] *= corr;
				o[j][1] *= corr;
			}
			/* O += P V: 16 dim tiles; ldmatrix.x4.trans on V rows [0,16) gives the B
			 * operands of two dim tiles (columns [16t, 16t + 16)). */
#pragma unroll
			for (int t = 0; t < 8; t++) {
				uint32_t r[4];
				const __nv_bfloat16 *addr = st + (ATT_BS + (lane & 15)) * ATT_ROW +
							    16 * t + 8 * (lane >> 4);

				ldm_x4_t(r, addr);
				mma16816(o[2 * t], pa, r[0], r[1]);
				mma16816(o[2 * t + 1], pa, r[2], r[3]);
			}
		}
		__syncwarp();
	}
	asm volatile("cp.async.wait_group 0;\n");
	l += __shfl_xor_sync(0xffffffffu, l, 1);
	l += __shfl_xor_sync(0xffffffffu, l, 2);
	__syncthreads();
	/* Combine the 4 warps through shared memory: per warp m[4], l[4], O[4][128]. */
	{
		float *cm = (float *)sm;		     /* [warps][4] */
		float *cl = cm + ATT_WARPS * 4;		     /* [warps][4] */
		float *co = cl + ATT_WARPS * 4;		     /* [warps][4][128] */

		if (g < ATT_GROUP) {
			if (c == 0) {
				cm[warp * 4 + g] = n > 0 ? m : -INFINITY;
				cl[warp * 4 + g] = n > 0 ? l : 0.f;
			}
#pragma unroll
			for (int j = 0; j < 16; j++) {
				co[(warp * 4 + g) * ATT_HD + 8 * j + 2 * c] = o[j][0];
				co[(warp * 4 + g) * ATT_HD + 8 * j + 2 * c + 1] = o[j][1];
			}
		}
		__syncthreads();
		for (int e = threadIdx.x; e < ATT_GROUP * ATT_HD; e += ATT_WARPS * 32) {
			int h = e / ATT_HD, d = e % ATT_HD;
			float M = -INFINITY, L = 0.f, O = 0.f;

			for (int w = 0; w < ATT_WARPS; w++)
				M = fmaxf(M, cm[w * 4 + h]);
			for (int w = 0; w < ATT_WARPS; w++) {
				float f = cm[w * 4 + h] == -INFINITY ? 0.f : exp2f(cm[w * 4 + h] - M);

				L += cl[w * 4 + h] * f;
				O += co[(w * 4 + h) * ATT_HD + d] * f;
			}
			{
				size_t qh = (size_t)kvh * ATT_GROUP + h;

				po[(qh * pstride + split) * ATT_HD + d] = O;
				if (d == 0) {
					pml[(qh * pstride + split) * 2] = M;
					pml[(qh * pstride + split) * 2 + 1] = L;
				}
			}
		}
	}
}

__global__ void __launch_bounds__(ATT_WARPS * 32, 1) att_split_kernel(const struct att_args a)
{
	const size_t b = blockIdx.z;

	att_split_body(a.q + b * ATT_QH * ATT_HD, a.table + b * a.nblk, a.nblk, a.splits, a.splits,
		       blockIdx.x, blockIdx.y, a.part_o + b * ATT_QH * a.splits * ATT_HD,
		       a.part_ml + b * ATT_QH * a.splits * 2, a.scale_log2);
}

/* One query head's merge of its @splits partial results at @po / @pml; thread d's output. */
static __device__ __forceinline__ float att_reduce_body(const float *po, const float *pml,
							int splits, int d)
{
	float M = -INFINITY, L = 0.f, O = 0.f;

	for (int s = 0; s < splits; s++)
		M = fmaxf(M, pml[s * 2]);
	for (int s = 0; s < splits; s++) {
		float ms = pml[s * 2];
		float f = ms == -INFINITY ? 0.f : exp2f(ms - M);

		L += pml[s * 2 + 1] * f;
		O += po[s * ATT_HD + d] * f;
	}
	return O / L;
}

/* One block per (sequence, query head): merge the splits, normalise, write bf16. */
__global__ void att_reduce_kernel(const struct att_args a)
{
	const size_t qh = blockIdx.x;
	const int d = threadIdx.x;

	a.out[qh * ATT_HD + d] = __float2bfloat16(att_reduce_body(
		a.part_o + qh * a.splits * ATT_HD, a.part_ml + qh * a.splits * 2, a.splits, d));
}

/* Sequence z's splits in the variable-length form: as many as the fixed form would use for
 * it alone (min(nblk, splits)), so both compute the same. */
static __device__ __forceinline__ int att_seq_splits(int nblk, int splits)
{
	return nblk < splits ? nblk : splits;
}

/* grid (splits, 8, B): CTAs past a shorter sequence's splits return at once. */
__global__ void __launch_bounds__(ATT_WARPS * 32, 1)
	att_split_varlen_kernel(const struct att_vargs a)
{
	const size_t z = blockIdx.z;
	const struct att_seq s = a.seq[z];
	const int sp = att_seq_splits(s.nblk, a.splits);

	if ((int)blockIdx.x >= sp)
		return;
	att_split_body(s.q, s.table, s.nblk, sp, a.splits, blockIdx.x, blockIdx.y,
		       a.part_o + z * ATT_QH * a.splits * ATT_HD,
		       a.part_ml + z * ATT_QH * a.splits * 2, a.scale_log2);
}

/* grid B x 32 blocks of 128 threads: one per (sequence, query head). The partial results of
 * sequence z sit at stride a.splits, of which it used its own min(nblk, splits). */
__global__ void att_reduce_varlen_kernel(const struct att_vargs a)
{
	const size_t z = blockIdx.x / ATT_QH, h = blockIdx.x % ATT_QH;
	const struct att_seq s = a.seq[z];
	const int sp = att_seq_splits(s.nblk, a.splits), d = threadIdx.x;
	const size_t qh = z * ATT_QH + h;

	s.out[h * ATT_HD + d] =
		__float2bfloat16(sp > 0 ? att_reduce_body(a.part_o + qh * a.splits * ATT_HD,
							  a.part_ml + qh * a.splits * 2, sp, d)
					: 0.f);
}

/* KV and queries for tests and benches: bf16 in [-1, 1) from a hash of (index, seed). */
__global__ void att_fill_kernel(__nv_bfloat16 *p, size_t n, uint64_t seed)
{
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x) {
		uint64_t x = (i + 1) * 0x9e3779b97f4a7c15ull ^ seed;

		x ^= x >> 31;
		x *= 0xbf58476d1ce4e5b9ull;
		x ^= x >> 29;
		p[i] = __float2bfloat16((float)((x >> 40) & 0xffffff) / 8388608.0f - 1.0f);
	}
}

/* bf16 to float on the host (the top half of the float's bits). */
static inline float att_bf2f(__nv_bfloat16 v)
{
	uint16_t u;
	uint32_t w;
	float f;

	memcpy(&u, &v, 2);
	w = (uint32_t)u << 16;
	memcpy(&f, &w, 4);
	return f;
}

/* Float64 attention on the host for query head @h (32 of them) of one sequence: @q its 128
 * values, @blk[j] the bytes of the sequence's block j (host memory, the layout above), @nblk
 * blocks; @o the head's 128 outputs. The reference the tests and the bench check against. */
static inline void att_reference(const uint8_t *const *blk, int nblk, const __nv_bfloat16 *q,
				 int h, double *o)
{
	const int kvh = h / ATT_GROUP, T = nblk * ATT_BS;
	std::vector<double> s(T);
	double mx = -1e300, sum = 0;

	for (int t = 0; t < T; t++) {
		const __nv_bfloat16 *k = (const __nv_bfloat16 *)blk[t / ATT_BS] +
					 ((size_t)kvh * ATT_BS + t % ATT_BS) * ATT_HD;
		double d = 0;

		for (int i = 0; i < ATT_HD; i++)
			d += (double)att_bf2f(q[i]) * att_bf2f(k[i]);
		s[t] = d / sqrt((double)ATT_HD);
		mx = std::max(mx, s[t]);
	}
	for (int t = 0; t < T; t++)
		sum += (s[t] = exp(s[t] - mx));
	for (int i = 0; i < ATT_HD; i++) {
		double r = 0;

		for (int t = 0; t < T; t++) {
			const __nv_bfloat16 *v = (const __nv_bfloat16 *)blk[t / ATT_BS] +
						 ((size_t)(ATT_KVH + kvh) * ATT_BS + t % ATT_BS) *
							 ATT_HD;

			r += s[t] / sum * att_bf2f(v[i]);
		}
		o[i] = r;
	}
}

#endif /* KVL_TOOLS_GPU_ATTN_CUH */
