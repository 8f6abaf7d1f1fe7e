/* SPDX-License-Identifier: BSD-3-Clause */
/* kvlane-serve-bench's prefill on the GPU: our own GEMM, RoPE, RMSNorm, FlashAttention kernels. */
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvlane_serve_prefill.h"

typedef __nv_bfloat16 bf16;
typedef __nv_bfloat162 bf162;

#define HD	   128 /* head_dim: the only one the kernels take */
#define BLK_TOK	   16  /* tokens per KV block */
#define GROUP_MAX  8   /* KV heads per unit of a block (kvlane_serve_bench.h's SB_GROUP_HEADS) */
#define ROPE_THETA 500000.0
#define RMS_EPS	   1e-5f

/* ---- PTX helpers: cp.async, ldmatrix, mma.sync m16n8k16 bf16 ---- */

static __device__ __forceinline__ uint32_t smem_u32(const void *p)
{
	return (uint32_t)__cvta_generic_to_shared(p);
}

/* 16 bytes global -> shared, bypassing L1; @ok false: 16 zero bytes (src not read) */
static __device__ __forceinline__ void cp16z(uint32_t dst, const void *src, bool ok)
{
	asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
		     "r"(ok ? 16 : 0));
}

static __device__ __forceinline__ void cp_commit(void)
{
	asm volatile("cp.async.commit_group;\n");
}

template <int N> static __device__ __forceinline__ void cp_wait(void)
{
	asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

static __device__ __forceinline__ void ldm4(uint32_t *r, uint32_t a)
{
	asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
		     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
		     : "r"(a));
}

static __device__ __forceinline__ void ldm4t(uint32_t *r, uint32_t a)
{
	asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
		     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
		     : "r"(a));
}

/* d += A(16x16, row) B(16x8, col), fp32 accumulators */
static __device__ __forceinline__ void mma(float *d, const uint32_t *a, uint32_t b0, uint32_t b1)
{
	asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
		     "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
		     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
		     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* bf16 pairs in 32-bit words (the lower address in the low half), without type punning */
static __device__ __forceinline__ float lo_f(uint32_t w)
{
	return __uint_as_float(w << 16);
}

static __device__ __forceinline__ float hi_f(uint32_t w)
{
	return __uint_as_float(w & 0xffff0000u);
}

static __device__ __forceinline__ uint32_t pack2(float lo, float hi)
{
	return (uint32_t)__bfloat16_as_ushort(__float2bfloat16_rn(lo)) |
	       (uint32_t)__bfloat16_as_ushort(__float2bfloat16_rn(hi)) << 16;
}

/*
 * ---- GEMM: acc[m][n] = sum_k A[m][k] B[n][k] ----
 *
 * CTA tile 128 x 256, K in steps of 32 through a 4-stage cp.async ring; 8 warps as 2 x 4, each
 * 64 x 64 of the tile (4 x 8 mma tiles of 16 x 8: 128 fp32 accumulators a thread). Shared rows
 * are 32 + 8 bf16 (80 bytes): the 8 row addresses of an ldmatrix phase fall in distinct 16-byte
 * bank groups. A and B are both K-contiguous, so both go through plain (non-.trans) ldmatrix.
 * Rows of A past M and of B past N load as zeros (cp.async's src-size 0) and are not stored.
 * CTAs are ordered in groups of 8 M tiles (all N tiles of a group before the next), so a wave
 * shares its A and B tiles in L2 instead of streaming all of B once per M tile.
 */
#define GM_BM	 128
#define GM_BN	 256
#define GM_BK	 32
#define GM_ST	 4
#define GM_LD	 (GM_BK + 8)
#define GM_AEL	 (GM_BM * GM_LD)
#define GM_BEL	 (GM_BN * GM_LD)
#define GM_SMEM	 (GM_ST * (GM_AEL + GM_BEL) * 2) /* 122880 bytes */
#define GM_GROUP 8

struct gm_args {
	const bf16 *A, *B, *R;
	bf16 *C;
	uint32_t M, N, K, tiles_m, tiles_n;
};

template <int EPI> static __global__ void __launch_bounds__(256, 1) pf_gemm_kernel(const gm_args g)
{
	extern __shared__ __align__(16) bf16 gsm[];
	const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
	const int wm = warp >> 2, wn = warp & 3;
	const uint32_t grp = GM_GROUP * g.tiles_n, pid = blockIdx.x;
	const uint32_t first = pid / grp * GM_GROUP,
		       gsz = min(g.tiles_m - first, (uint32_t)GM_GROUP);
	const uint32_t tm = first + pid % grp % gsz, tn = pid % grp / gsz;
	const uint32_t m0 = tm * GM_BM, n0 = tn * GM_BN;
	const uint32_t base = smem_u32(gsm);
	const int kt_n = g.K / GM_BK;
	/* this lane's ldmatrix row address, in bytes from a stage's A and B: A's 4 matrices are
	 * (rows 0-7 | 8-15) x (k 0-7 | 8-15) in a0..a3 order; B's are (n 0-7, k 0-7), (n 0-7, k
	 * 8-15), (n 8-15, k 0-7), (n 8-15, k 8-15): b0, b1 of two n tiles of 8 */
	const uint32_t a_lane = ((wm * 64 + (lane & 15)) * GM_LD + (lane >> 4) * 8) * 2;
	const uint32_t b_lane =
		((wn * 64 + (lane & 7) + ((lane >> 4) << 3)) * GM_LD + ((lane >> 3) & 1) * 8) * 2;
	const bf16 *asrc[2], *bsrc[4];
	bool aok[2], bok[4];
	uint32_t adst[2], bdst[4];
	float acc[4][8][4];

	/* this thread's chunks of 16 bytes: A 128 rows x 4, B 256 rows x 4 */
#pragma unroll
	for (int i = 0; i < 2; i++) {
		int c = tid + 256 * i, row = c >> 2, col = (c & 3) * 8;

		aok[i] = m0 + row < g.M;
		asrc[i] = g.A + (size_t)(aok[i] ? m0 + row : 0) * g.K + col;
		adst[i] = (row * GM_LD + col) * 2;
	}
#pragma unroll
	for (int i = 0; i < 4; i++) {
		int c = tid + 256 * i, row = c >> 2, col = (c & 3) * 8;

		bok[i] = n0 + row < g.N;
		bsrc[i] = g.B + (size_t)(bok[i] ? n0 + row : 0) * g.K + col;
		bdst[i] = (GM_AEL + row * GM_LD + col) * 2;
	}
#pragma unroll
	for (int i = 0; i < 4; i++) {
#pragma unroll
		for (int j = 0; j < 8; j++)
			acc[i][j][0] = acc[i][j][1] = acc[i][j][2] = acc[i][j][3] = 0.f;
	}
	/* prologue: stages 0 .. ST-2 in flight */
#pragma unroll
	for (int s = 0; s < GM_ST - 1; s++) {
		if (s < kt_n) {
			uint32_t sb = base + s * (GM_AEL + GM_BEL) * 2;

#pragma unroll
			for (int i = 0; i < 2; i++)
				cp16z(sb + adst[i], asrc[i] + s * GM_BK, aok[i]);
#pragma unroll
			for (int i = 0; i < 4; i++)
				cp16z(sb + bdst[i], bsrc[i] + s * GM_BK, bok[i]);
		}
		cp_commit();
	}
	for (int kt = 0; kt < kt_n; kt++) {
		/* tile kt has landed, and every warp is done with tile kt - 1's stage: refill it */
		cp_wait<GM_ST - 2>();
		__syncthreads();
		{
			int nx = kt + GM_ST - 1;

			if (nx < kt_n) {
				uint32_t sb = base + (nx % GM_ST) * (GM_AEL + GM_BEL) * 2;

#pragma unroll
				for (int i = 0; i < 2; i++)
					cp16z(sb + adst[i], asrc[i] + (size_t)nx * GM_BK, aok[i]);
#pragma unroll
				for (int i = 0; i < 4; i++)
					cp16z(sb + bdst[i], bsrc[i] + (size_t)nx * GM_BK, bok[i]);
			}
			cp_commit();
		}
		{
			const uint32_t sa = base + (kt % GM_ST) * (GM_AEL + GM_BEL) * 2;
			const uint32_t sb = sa + GM_AEL * 2;

#pragma unroll
			for (int kk = 0; kk < GM_BK; kk += 16) {
				uint32_t af[4][4], bfr[8][2];

#pragma unroll
				for (int i = 0; i < 4; i++) {
					ldm4(af[i], sa + a_lane + (i * 16 * GM_LD + kk) * 2);
				}
#pragma unroll
				for (int j = 0; j < 4; j++) {
					uint32_t r[4];

					ldm4(r, sb + b_lane + (j * 16 * GM_LD + kk) * 2);
					bfr[2 * j][0] = r[0];
					bfr[2 * j][1] = r[1];
					bfr[2 * j + 1][0] = r[2];
					bfr[2 * j + 1][1] = r[3];
				}
#pragma unroll
				for (int i = 0; i < 4; i++)
#pragma unroll
					for (int j = 0; j < 8; j++)
						mma(acc[i][j], af[i], bfr[j][0], bfr[j][1]);
			}
		}
	}
	cp_wait<0>();

	/* epilogue: this lane holds rows g, g + 8 and columns 2c, 2c + 1 of each mma tile */
	{
		const int gr = lane >> 2, gc = lane & 3;

#pragma unroll
		for (int i = 0; i < 4; i++)
#pragma unroll
			for (int j = 0; j < 8; j++) {
				uint32_t col = n0 + wn * 64 + j * 8 + 2 * gc;

				if (col >= g.N)
					continue;
#pragma unroll
				for (int h = 0; h < 2; h++) {
					uint32_t row = m0 + wm * 64 + i * 16 + gr + 8 * h;
					float v0 = acc[i][j][2 * h], v1 = acc[i][j][2 * h + 1];

					if (row >= g.M)
						continue;
					if (EPI == SB_PF_EPI_STORE) {
						*(bf162 *)(g.C + (size_t)row * g.N + col) =
							__floats2bfloat162_rn(v0, v1);
					} else if (EPI == SB_PF_EPI_RESID) {
						bf162 r = *(const bf162 *)(g.R + (size_t)row * g.N +
									   col);

						*(bf162 *)(g.C + (size_t)row * g.N + col) =
							__floats2bfloat162_rn(__low2float(r) + v0,
									      __high2float(r) + v1);
					} else {
						g.C[(size_t)row * (g.N / 2) + col / 2] =
							__float2bfloat16_rn(
								v0 / (1.0f + expf(-v0)) * v1);
					}
				}
			}
	}
}

static int gm_launch(cudaStream_t s, enum sb_pf_epi epi, const bf16 *A, const bf16 *B, bf16 *C,
		     const bf16 *R, uint32_t m, uint32_t n, uint32_t k)
{
	gm_args g;
	unsigned grid;

	g.A = A;
	g.B = B;
	g.C = C;
	g.R = R;
	g.M = m;
	g.N = n;
	g.K = k;
	g.tiles_m = (m + GM_BM - 1) / GM_BM;
	g.tiles_n = (n + GM_BN - 1) / GM_BN;
	grid = g.tiles_m * g.tiles_n;
	switch (epi) {
	case SB_PF_EPI_STORE:
		pf_gemm_kernel<SB_PF_EPI_STORE><<<grid, 256, GM_SMEM, s>>>(g);
		break;
	case SB_PF_EPI_RESID:
		pf_gemm_kernel<SB_PF_EPI_RESID><<<grid, 256, GM_SMEM, s>>>(g);
		break;
	case SB_PF_EPI_SILU:
		pf_gemm_kernel<SB_PF_EPI_SILU><<<grid, 256, GM_SMEM, s>>>(g);
		break;
	default:
		return -1;
	}
	return cudaPeekAtLastError() == cudaSuccess ? 0 : -1;
}

/*
 * ---- causal GQA attention, FlashAttention-2 style ----
 *
 * A CTA takes 64 queries of one q head (4 warps, 16 query rows each) and walks the key tiles
 * 0 .. its own (64 keys each; the tiles past the diagonal are all masked and skipped), K and V
 * double-buffered through cp.async. S = Q K^T on mma.sync (K rows are the col-major B operand:
 * plain ldmatrix); the fp32 online softmax in exp2 units; P packed to bf16 straight from the
 * S accumulators, which are the A operand's layout; O += P V with V through ldmatrix.trans.
 * Only the diagonal tile is masked: every row has key q0 <= its query there, so no row's max
 * is -inf. Grid: x = q head (heads sharing a KV head adjacent: K and V reused in L2), y = query
 * tile, heaviest (last) tiles first so the causal triangle's long CTAs do not trail.
 * Rows of 128 + 8 bf16 (272 bytes): ldmatrix's 8 rows in distinct bank groups.
 */
#define AT_BM	64
#define AT_BN	64
#define AT_LD	(HD + 8)
#define AT_TILE (AT_BN * AT_LD)
#define AT_SMEM ((AT_BM * AT_LD + 4 * AT_TILE) * 2) /* Q + 2 x (K, V): 87040 bytes */

struct at_args {
	const bf16 *qkv;
	bf16 *out;
	uint32_t T, ld, qh, kvh, tiles;
	float scale_log2;
};

/* rows r0 .. r0 + 63 of one head (128 bf16 at @src + row * ld) into @dst, rows >= T as zeros:
 * 1024 chunks of 16 bytes, 8 a thread */
static __device__ __forceinline__ void at_load64(uint32_t dst, const bf16 *src, uint32_t ld,
						 uint32_t r0, uint32_t T, int tid)
{
#pragma unroll
	for (int i = 0; i < 8; i++) {
		int c = tid + 128 * i, row = c >> 4, col = (c & 15) * 8;
		bool ok = r0 + row < T;

		cp16z(dst + (row * AT_LD + col) * 2, src + (size_t)(ok ? r0 + row : 0) * ld + col,
		      ok);
	}
}

static __global__ void __launch_bounds__(128, 2) pf_attn_kernel(const at_args a)
{
	extern __shared__ __align__(16) bf16 asmem[];
	const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
	const int gr = lane >> 2, gc = lane & 3;
	const uint32_t h = blockIdx.x, qt = a.tiles - 1 - blockIdx.y;
	const uint32_t kvh = h / (a.qh / a.kvh), q0 = qt * AT_BM;
	const bf16 *qg = a.qkv + (size_t)h * HD;
	const bf16 *kg = a.qkv + (size_t)(a.qh + kvh) * HD;
	const bf16 *vg = a.qkv + (size_t)(a.qh + a.kvh + kvh) * HD;
	const uint32_t sq = smem_u32(asmem);
	const uint32_t skv = sq + AT_BM * AT_LD * 2; /* stage s: K at skv + s * 2 tiles, then V */
	/* ldmatrix row addresses: Q as A operands (as the GEMM's A), K as B operands (as the
	 * GEMM's B: keys are n), V transposed (rows = keys 0-15, dims 0-7 | 8-15) */
	const uint32_t q_lane = ((warp * 16 + (lane & 15)) * AT_LD + (lane >> 4) * 8) * 2;
	const uint32_t k_lane =
		(((lane & 7) + ((lane >> 4) << 3)) * AT_LD + ((lane >> 3) & 1) * 8) * 2;
	const uint32_t v_lane = ((lane & 15) * AT_LD + (lane >> 4) * 8) * 2;
	uint32_t qf[8][4];
	float o[16][4], m[2] = { -INFINITY, -INFINITY }, l[2] = { 0.f, 0.f };

	at_load64(sq, qg, a.ld, q0, a.T, tid);
	cp_commit();
	at_load64(skv, kg, a.ld, 0, a.T, tid);
	at_load64(skv + AT_TILE * 2, vg, a.ld, 0, a.T, tid);
	cp_commit();
	cp_wait<1>();
	__syncthreads();
#pragma unroll
	for (int kk = 0; kk < 8; kk++)
		ldm4(qf[kk], sq + q_lane + kk * 32);
#pragma unroll
	for (int j = 0; j < 16; j++)
		o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.f;

	for (uint32_t kt = 0; kt <= qt; kt++) {
		const uint32_t sk = skv + (kt & 1) * 4 * AT_TILE, sv = sk + AT_TILE * 2;
		float s[8][4];
		uint32_t pa[4][4];

		if (kt + 1 <= qt) {
			uint32_t nk = skv + ((kt + 1) & 1) * 4 * AT_TILE;

			at_load64(nk, kg, a.ld, (kt + 1) * AT_BN, a.T, tid);
			at_load64(nk + AT_TILE * 2, vg, a.ld, (kt + 1) * AT_BN, a.T, tid);
		}
		cp_commit();
		cp_wait<1>();
		__syncthreads();

		/* S = Q K^T: 8 key tiles of 8 x 8 dim steps of 16 */
#pragma unroll
		for (int j = 0; j < 8; j++)
			s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.f;
#pragma unroll
		for (int kk = 0; kk < 8; kk++) {
#pragma unroll
			for (int j = 0; j < 4; j++) {
				uint32_t r[4];

				ldm4(r, sk + k_lane + (j * 16 * AT_LD + kk * 16) * 2);
				mma(s[2 * j], qf[kk], r[0], r[1]);
				mma(s[2 * j + 1], qf[kk], r[2], r[3]);
			}
		}
		/* scale (log2 units), the diagonal's mask, the online softmax of rows gr, gr + 8 */
#pragma unroll
		for (int hh = 0; hh < 2; hh++) {
			const uint32_t q = q0 + warp * 16 + gr + 8 * hh;
			float mx = -INFINITY, mn, corr, sum = 0.f;

#pragma unroll
			for (int j = 0; j < 8; j++)
#pragma unroll
				for (int e = 0; e < 2; e++) {
					uint32_t key = kt * AT_BN + j * 8 + 2 * gc + e;
					float x = s[j][2 * hh + e] * a.scale_log2;

					if (kt == qt && key > q)
						x = -INFINITY;
					s[j][2 * hh + e] = x;
					mx = fmaxf(mx, x);
				}
			mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
			mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
			mn = fmaxf(m[hh], mx);
			corr = exp2f(m[hh] - mn);
			m[hh] = mn;
#pragma unroll
			for (int j = 0; j < 8; j++)
#pragma unroll
				for (int e = 0; e < 2; e++) {
					float p = exp2f(s[j][2 * hh + e] - mn);

					s[j][2 * hh + e] = p;
					sum += p;
				}
			l[hh] = l[hh] * corr + sum; /* this lane's share: quad-summed at the end */
#pragma unroll
			for (int j = 0; j < 16; j++) {
				o[j][2 * hh] *= corr;
				o[j][2 * hh + 1] *= corr;
			}
		}
		/* P as A operands: k step kk covers key tiles 2kk (a0, a1) and 2kk + 1 (a2, a3) */
#pragma unroll
		for (int kk = 0; kk < 4; kk++) {
			pa[kk][0] = pack2(s[2 * kk][0], s[2 * kk][1]);
			pa[kk][1] = pack2(s[2 * kk][2], s[2 * kk][3]);
			pa[kk][2] = pack2(s[2 * kk + 1][0], s[2 * kk + 1][1]);
			pa[kk][3] = pack2(s[2 * kk + 1][2], s[2 * kk + 1][3]);
		}
		/* O += P V: ldmatrix.trans on V rows 16kk .. 16kk + 15, dims 16t .. 16t + 15 gives
		 * the B operands of dim tiles 2t, 2t + 1 */
#pragma unroll
		for (int kk = 0; kk < 4; kk++) {
#pragma unroll
			for (int t = 0; t < 8; t++) {
				uint32_t r[4];

				ldm4t(r, sv + v_lane + (kk * 16 * AT_LD + t * 16) * 2);
				mma(o[2 * t], pa[kk], r[0], r[1]);
				mma(o[2 * t + 1], pa[kk], r[2], r[3]);
			}
		}
		/* every warp done with this stage before the next iteration refills it */
		__syncthreads();
	}
	cp_wait<0>();
#pragma unroll
	for (int hh = 0; hh < 2; hh++) {
		const uint32_t q = q0 + warp * 16 + gr + 8 * hh;
		float L = l[hh];

		L += __shfl_xor_sync(0xffffffffu, L, 1);
		L += __shfl_xor_sync(0xffffffffu, L, 2);
		if (q < a.T) {
			const float inv = 1.0f / L;
			bf16 *dst = a.out + (size_t)q * a.qh * HD + (size_t)h * HD + 2 * gc;

#pragma unroll
			for (int j = 0; j < 16; j++)
				*(bf162 *)(dst + j * 8) = __floats2bfloat162_rn(
					o[j][2 * hh] * inv, o[j][2 * hh + 1] * inv);
		}
	}
}

static int at_launch(cudaStream_t s, const bf16 *qkv, bf16 *out, uint32_t T, uint32_t qh,
		     uint32_t kvh)
{
	at_args a;

	a.qkv = qkv;
	a.out = out;
	a.T = T;
	a.ld = (qh + 2 * kvh) * HD;
	a.qh = qh;
	a.kvh = kvh;
	a.tiles = (T + AT_BM - 1) / AT_BM;
	a.scale_log2 = (float)(1.4426950408889634 / sqrt((double)HD));
	pf_attn_kernel<<<dim3(qh, a.tiles), 128, AT_SMEM, s>>>(a);
	return cudaPeekAtLastError() == cudaSuccess ? 0 : -1;
}

/* ---- the small kernels: embedding stand-in, RMSNorm, RoPE + the KV write, weights, sums ---- */

/* x0: rows < T hashed from the key, rows T .. M - 1 zero (pad rows stay zero in every layer) */
static __global__ void pf_emb_kernel(bf16 *x, uint64_t key, uint32_t T, uint32_t M, uint32_t hidden)
{
	const uint64_t n = (uint64_t)M * hidden;

	for (uint64_t e = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; e < n;
	     e += (uint64_t)gridDim.x * blockDim.x) {
		uint32_t t = (uint32_t)(e / hidden), i = (uint32_t)(e % hidden);

		x[e] = __float2bfloat16_rn(t < T ? sb_pf_embed(key, t, i) : 0.f);
	}
}

/* One CTA (128 threads) per row: y = bf16(x * rsqrt(mean(x^2) + eps) * gamma). */
static __global__ void __launch_bounds__(128)
	pf_rms_kernel(const bf16 *x, const bf16 *gamma, bf16 *y, uint32_t hidden)
{
	__shared__ float part[4];
	const bf16 *xr = x + (size_t)blockIdx.x * hidden;
	bf16 *yr = y + (size_t)blockIdx.x * hidden;
	float ss = 0.f, rstd;

	for (uint32_t c = threadIdx.x * 8; c < hidden; c += 128 * 8) {
		const uint4 v = *(const uint4 *)(xr + c);
		const uint32_t w[4] = { v.x, v.y, v.z, v.w };

#pragma unroll
		for (int e = 0; e < 4; e++) {
			float a = lo_f(w[e]), b = hi_f(w[e]);

			ss += a * a + b * b;
		}
	}
#pragma unroll
	for (int o = 16; o > 0; o >>= 1)
		ss += __shfl_xor_sync(0xffffffffu, ss, o);
	if ((threadIdx.x & 31) == 0)
		part[threadIdx.x >> 5] = ss;
	__syncthreads();
	ss = part[0] + part[1] + part[2] + part[3];
	rstd = rsqrtf(ss / (float)hidden + RMS_EPS);
	for (uint32_t c = threadIdx.x * 8; c < hidden; c += 128 * 8) {
		const uint4 v = *(const uint4 *)(xr + c), gv = *(const uint4 *)(gamma + c);
		const uint32_t w[4] = { v.x, v.y, v.z, v.w }, g[4] = { gv.x, gv.y, gv.z, gv.w };
		uint32_t o[4];

#pragma unroll
		for (int e = 0; e < 4; e++)
			o[e] = pack2(lo_f(w[e]) * rstd * lo_f(g[e]),
				     hi_f(w[e]) * rstd * hi_f(g[e]));
		*(uint4 *)(yr + c) = make_uint4(o[0], o[1], o[2], o[3]);
	}
}

struct rope_args {
	bf16 *qkv;
	const float2 *cs; /* [max tokens][64]: cos, sin */
	uint8_t *kv;	  /* this layer's first block */
	uint64_t block_bytes;
	uint32_t T, ld, qh, kvh, hg;
};

/*
 * One CTA per token slot of the layer's blocks (ceil(T / 16) * 16): RoPE (rotate-half: channel
 * i with i + 64) on its q and k heads in place, 8 channels of each half a thread; K (roped)
 * and V copied into the block, 16 bytes at a time. Pad slots (t >= T) get zero K and V.
 */
static __global__ void pf_rope_kernel(const rope_args a)
{
	const uint32_t t = blockIdx.x, heads = a.qh + a.kvh;
	const uint32_t n_rope = heads * 8, n = n_rope + a.kvh * 16;
	bf16 *row = a.qkv + (size_t)t * a.ld;
	uint8_t *blk = a.kv + (size_t)(t / BLK_TOK) * a.block_bytes;
	const uint32_t slot = t % BLK_TOK;

	for (uint32_t w = threadIdx.x; w < n; w += blockDim.x) {
		uint32_t kvh, d0, kv_off;
		uint4 lo = make_uint4(0, 0, 0, 0), hi = make_uint4(0, 0, 0, 0);

		if (w < n_rope) {
			uint32_t head = w / 8, i0 = (w % 8) * 8;

			if (t < a.T) {
				bf16 *p = row + head * HD + i0;
				const uint4 x1 = *(const uint4 *)p, x2 = *(const uint4 *)(p + 64);
				const uint32_t w1[4] = { x1.x, x1.y, x1.z, x1.w };
				const uint32_t w2[4] = { x2.x, x2.y, x2.z, x2.w };
				const float2 *cs = a.cs + (size_t)t * 64 + i0;
				uint32_t y1[4], y2[4];

#pragma unroll
				for (int e = 0; e < 4; e++) {
					float u0 = lo_f(w1[e]), u1 = hi_f(w1[e]);
					float v0 = lo_f(w2[e]), v1 = hi_f(w2[e]);
					float2 c0 = cs[2 * e], c1 = cs[2 * e + 1];

					y1[e] = pack2(u0 * c0.x - v0 * c0.y, u1 * c1.x - v1 * c1.y);
					y2[e] = pack2(v0 * c0.x + u0 * c0.y, v1 * c1.x + u1 * c1.y);
				}
				lo = make_uint4(y1[0], y1[1], y1[2], y1[3]);
				hi = make_uint4(y2[0], y2[1], y2[2], y2[3]);
				*(uint4 *)p = lo;
				*(uint4 *)(p + 64) = hi;
			}
			if (head < a.qh)
				continue;
			kvh = head - a.qh;
			d0 = i0;
			kv_off = 0;
		} else {
			uint32_t v = w - n_rope;

			kvh = v / 16;
			d0 = (v % 16) * 8;
			kv_off = a.hg * BLK_TOK * HD; /* V after the unit's K */
			if (t < a.T)
				lo = *(const uint4 *)(row + (size_t)(heads + kvh) * HD + d0);
		}
		{
			/* unit kvh / hg: [K|V][hg][16][128]; head kvh % hg, slot, channel d0 */
			size_t e = (size_t)(kvh / a.hg) * 2 * a.hg * BLK_TOK * HD + kv_off +
				   ((size_t)(kvh % a.hg) * BLK_TOK + slot) * HD + d0;
			bf16 *dst = (bf16 *)blk + e;

			*(uint4 *)dst = lo;
			if (w < n_rope)
				*(uint4 *)(dst + 64) = hi;
		}
	}
}

static __global__ void pf_winit_kernel(bf16 *w, uint64_t n, uint64_t seed, uint32_t layer,
				       uint32_t mat, float a)
{
	for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < n;
	     i += (uint64_t)gridDim.x * blockDim.x)
		w[i] = __float2bfloat16_rn(mat <= SB_PF_GAMMA2
						   ? sb_pf_gamma(seed, layer, mat, (uint32_t)i)
						   : sb_pf_wval(seed, layer, mat, i, a));
}

/* One CTA (256 threads) per block: the sum of the words' hashes. */
static __global__ void __launch_bounds__(256)
	pf_sums_kernel(const uint64_t *blk, uint32_t words, uint64_t *out)
{
	__shared__ unsigned long long part[8];
	const uint64_t *w = (const uint64_t *)blk[blockIdx.x];
	unsigned long long s = 0;

	for (uint32_t i = threadIdx.x; i < words; i += 256)
		s += sb_pf_word_hash(w[i], i);
#pragma unroll
	for (int o = 16; o > 0; o >>= 1)
		s += __shfl_xor_sync(0xffffffffu, s, o);
	if ((threadIdx.x & 31) == 0)
		part[threadIdx.x >> 5] = s;
	__syncthreads();
	if (threadIdx.x == 0) {
		for (int i = 1; i < 8; i++)
			s += part[i];
		out[blockIdx.x] = s;
	}
}

/* ---- the model ---- */

struct sb_pf {
	struct sb_pf_dims d;
	uint32_t max_tokens, nqkv, hg;
	uint64_t seed, wbytes, block_bytes;
	uint64_t off[SB_PF_MATS], layer_el; /* a layer's arrays: element offsets, total */
	bf16 *w;			    /* every layer's weights */
	bf16 *x, *xn, *qkv, *att, *act;	    /* [max rows][..] */
	float2 *cs;			    /* [max tokens][64] */
};

static uint32_t up128(uint32_t v)
{
	return (v + 127) / 128 * 128;
}

extern "C" void sb_pf_rope_cs(uint32_t t, uint32_t i, float *c, float *s)
{
	double ang = (double)t * pow(ROPE_THETA, -2.0 * i / HD);

	*c = (float)cos(ang);
	*s = (float)sin(ang);
}

extern "C" uint64_t sb_pf_block_bytes(const struct sb_pf_dims *d)
{
	return 2ull * d->kv_heads * BLK_TOK * d->head_dim * 2;
}

extern "C" uint64_t sb_pf_weight_bytes(const struct sb_pf *p)
{
	return p->wbytes;
}

extern "C" double sb_pf_flops(const struct sb_pf_dims *d, uint32_t tokens)
{
	const double m = up128(tokens), h = d->hidden, f = d->ffn;
	const double nqkv = (double)(d->q_heads + 2 * d->kv_heads) * d->head_dim;
	const double gemm = 2.0 * m * (nqkv * h + h * h + 2.0 * f * h + f * h);
	const double attn = 4.0 * d->head_dim * d->q_heads * ((double)tokens * (tokens + 1) / 2);

	return d->layers * (gemm + attn);
}

static int kernels_init(void)
{
	/* the opt-in shared memory, and every kernel loaded now rather than at a first launch */
	if (cudaFuncSetAttribute(pf_gemm_kernel<SB_PF_EPI_STORE>,
				 cudaFuncAttributeMaxDynamicSharedMemorySize,
				 GM_SMEM) != cudaSuccess ||
	    cudaFuncSetAttribute(pf_gemm_kernel<SB_PF_EPI_RESID>,
				 cudaFuncAttributeMaxDynamicSharedMemorySize,
				 GM_SMEM) != cudaSuccess ||
	    cudaFuncSetAttribute(pf_gemm_kernel<SB_PF_EPI_SILU>,
				 cudaFuncAttributeMaxDynamicSharedMemorySize,
				 GM_SMEM) != cudaSuccess ||
	    cudaFuncSetAttribute(pf_attn_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
				 AT_SMEM) != cudaSuccess)
		return -1;
	return 0;
}

static double gib(uint64_t b)
{
	return (double)b / (1ull << 30);
}

extern "C" void sb_pf_free(struct sb_pf *p)
{
	if (!p)
		return;
	cudaFree(p->w);
	cudaFree(p->x);
	cudaFree(p->xn);
	cudaFree(p->qkv);
	cudaFree(p->att);
	cudaFree(p->act);
	cudaFree(p->cs);
	free(p);
}

extern "C" int sb_pf_new(struct sb_pf **out, const struct sb_pf_dims *d, uint32_t max_tokens,
			 uint64_t seed, char *err, unsigned errlen)
{
	struct sb_pf *p;
	uint64_t rows, act_bytes;
	cudaStream_t s = NULL;
	float2 *cs = NULL;
	cudaError_t ce;

	*out = NULL;
	if (d->head_dim != HD) {
		snprintf(err, errlen, "prefill: head_dim %u: the kernels take head_dim 128 only",
			 d->head_dim);
		return -1;
	}
	if (d->layers == 0 || d->q_heads == 0 || d->kv_heads == 0 || d->ffn == 0 ||
	    d->layers >= 4096) {
		snprintf(err, errlen,
			 "prefill: layers %u, q_heads %u, kv_heads %u, ffn %u: each "
			 "must be >= 1 (layers < 4096)",
			 d->layers, d->q_heads, d->kv_heads, d->ffn);
		return -1;
	}
	if (d->hidden != d->q_heads * d->head_dim || d->q_heads % d->kv_heads || d->hidden % 128 ||
	    d->ffn % 128) {
		snprintf(err, errlen,
			 "prefill: hidden %u, q_heads %u, kv_heads %u, ffn %u: hidden must be "
			 "q_heads * head_dim, q_heads a multiple of kv_heads, hidden and ffn "
			 "multiples of 128",
			 d->hidden, d->q_heads, d->kv_heads, d->ffn);
		return -1;
	}
	if (d->kv_heads > GROUP_MAX && d->kv_heads % GROUP_MAX) {
		snprintf(err, errlen,
			 "prefill: kv_heads %u: more than %u must be a multiple of %u (a block's "
			 "units of %u heads)",
			 d->kv_heads, GROUP_MAX, GROUP_MAX, GROUP_MAX);
		return -1;
	}
	if (max_tokens == 0 || max_tokens > (1u << 24)) {
		snprintf(err, errlen, "prefill: max_tokens %u: must be 1 .. %u", max_tokens,
			 1u << 24);
		return -1;
	}
	p = (struct sb_pf *)calloc(1, sizeof(*p));
	if (!p) {
		snprintf(err, errlen, "prefill: out of host memory");
		return -1;
	}
	p->d = *d;
	p->max_tokens = max_tokens;
	p->seed = seed;
	p->nqkv = (d->q_heads + 2 * d->kv_heads) * HD;
	p->hg = d->kv_heads < GROUP_MAX ? d->kv_heads : GROUP_MAX;
	p->block_bytes = sb_pf_block_bytes(d);
	{
		const uint64_t h = d->hidden, f = d->ffn;
		const uint64_t n[SB_PF_MATS] = { h,	h,	   (uint64_t)p->nqkv * h,
						 h * h, 2 * f * h, h * f };
		uint64_t at = 0;

		for (int m = 0; m < SB_PF_MATS; m++) {
			p->off[m] = at;
			at += n[m];
		}
		p->layer_el = at;
	}
	p->wbytes = p->layer_el * d->layers * 2;
	ce = cudaMalloc(&p->w, p->wbytes);
	if (ce != cudaSuccess) {
		snprintf(err, errlen, "prefill: %.1f GiB of weights: %s", gib(p->wbytes),
			 cudaGetErrorString(ce));
		goto fail;
	}
	rows = up128(max_tokens);
	act_bytes = rows * 2 * (3ull * d->hidden + p->nqkv + d->ffn);
	if ((ce = cudaMalloc(&p->x, rows * d->hidden * 2)) != cudaSuccess ||
	    (ce = cudaMalloc(&p->xn, rows * d->hidden * 2)) != cudaSuccess ||
	    (ce = cudaMalloc(&p->att, rows * d->hidden * 2)) != cudaSuccess ||
	    (ce = cudaMalloc(&p->qkv, rows * p->nqkv * 2)) != cudaSuccess ||
	    (ce = cudaMalloc(&p->act, rows * d->ffn * 2)) != cudaSuccess ||
	    (ce = cudaMalloc(&p->cs, (size_t)max_tokens * 64 * sizeof(float2))) != cudaSuccess) {
		snprintf(err, errlen, "prefill: %.2f GiB of activations for %u tokens: %s",
			 gib(act_bytes), max_tokens, cudaGetErrorString(ce));
		goto fail;
	}
	if (kernels_init()) {
		snprintf(err, errlen, "prefill: the kernels' shared memory (%u, %u bytes): %s",
			 GM_SMEM, AT_SMEM, cudaGetErrorString(cudaGetLastError()));
		goto fail;
	}
	cs = (float2 *)malloc((size_t)max_tokens * 64 * sizeof(float2));
	if (!cs) {
		snprintf(err, errlen, "prefill: out of host memory");
		goto fail;
	}
	for (uint32_t t = 0; t < max_tokens; t++)
		for (uint32_t i = 0; i < 64; i++)
			sb_pf_rope_cs(t, i, &cs[(size_t)t * 64 + i].x, &cs[(size_t)t * 64 + i].y);
	if ((ce = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking)) != cudaSuccess ||
	    (ce = cudaMemcpyAsync(p->cs, cs, (size_t)max_tokens * 64 * sizeof(float2),
				  cudaMemcpyHostToDevice, s)) != cudaSuccess ||
	    (ce = cudaMemsetAsync(p->x, 0, rows * d->hidden * 2, s)) != cudaSuccess ||
	    (ce = cudaMemsetAsync(p->att, 0, rows * d->hidden * 2, s)) != cudaSuccess) {
		snprintf(err, errlen, "prefill: initialising: %s", cudaGetErrorString(ce));
		goto fail;
	}
	for (uint32_t l = 0; l < d->layers; l++) {
		const uint32_t kin[SB_PF_MATS] = { 1, 1, d->hidden, d->hidden, d->hidden, d->ffn };
		const uint64_t n[SB_PF_MATS] = { p->off[1] - p->off[0], p->off[2] - p->off[1],
						 p->off[3] - p->off[2], p->off[4] - p->off[3],
						 p->off[5] - p->off[4], p->layer_el - p->off[5] };

		for (uint32_t m = 0; m < SB_PF_MATS; m++)
			pf_winit_kernel<<<1024, 256, 0, s>>>(p->w + l * p->layer_el + p->off[m],
							     n[m], seed, l, m,
							     (float)sqrt(3.0 / kin[m]));
	}
	if ((ce = cudaPeekAtLastError()) != cudaSuccess ||
	    (ce = cudaStreamSynchronize(s)) != cudaSuccess) {
		snprintf(err, errlen, "prefill: initialising %.1f GiB of weights: %s",
			 gib(p->wbytes), cudaGetErrorString(ce));
		goto fail;
	}
	cudaStreamDestroy(s);
	free(cs);
	*out = p;
	return 0;
fail:
	if (s)
		cudaStreamDestroy(s);
	free(cs);
	sb_pf_free(p);
	return -1;
}

extern "C" int sb_pf_run(struct sb_pf *p, void *stream, uint64_t key, uint32_t tokens, void *kv,
			 char *err, unsigned errlen)
{
	const struct sb_pf_dims *d = &p->d;
	cudaStream_t s = (cudaStream_t)stream;
	const uint32_t T = tokens, M = up128(tokens), nb = (tokens + BLK_TOK - 1) / BLK_TOK;
	cudaError_t ce;
	int rc = 0;

	if (tokens == 0 || tokens > p->max_tokens) {
		snprintf(err, errlen, "prefill: %u tokens: must be 1 .. %u (max_tokens)", tokens,
			 p->max_tokens);
		return -1;
	}
	if (!kv || (uintptr_t)kv % 16) {
		snprintf(err, errlen, "prefill: the KV destination %p is not 16-byte aligned", kv);
		return -1;
	}
	pf_emb_kernel<<<1024, 256, 0, s>>>(p->x, key, T, M, d->hidden);
	/* attention writes rows < T only: its pad rows zero, as x's (each GEMM keeps them so) */
	if (M > T && (ce = cudaMemsetAsync(p->att + (size_t)T * d->hidden, 0,
					   (size_t)(M - T) * d->hidden * 2, s)) != cudaSuccess) {
		snprintf(err, errlen, "prefill: memset: %s", cudaGetErrorString(ce));
		return -1;
	}
	for (uint32_t l = 0; l < d->layers && !rc; l++) {
		const bf16 *w = p->w + l * p->layer_el;
		rope_args ra;

		pf_rms_kernel<<<M, 128, 0, s>>>(p->x, w + p->off[SB_PF_GAMMA1], p->xn, d->hidden);
		rc |= gm_launch(s, SB_PF_EPI_STORE, p->xn, w + p->off[SB_PF_WQKV], p->qkv, NULL, M,
				p->nqkv, d->hidden);
		ra.qkv = p->qkv;
		ra.cs = p->cs;
		ra.kv = (uint8_t *)kv + (uint64_t)l * nb * p->block_bytes;
		ra.block_bytes = p->block_bytes;
		ra.T = T;
		ra.ld = p->nqkv;
		ra.qh = d->q_heads;
		ra.kvh = d->kv_heads;
		ra.hg = p->hg;
		pf_rope_kernel<<<nb * BLK_TOK, 128, 0, s>>>(ra);
		rc |= at_launch(s, p->qkv, p->att, T, d->q_heads, d->kv_heads);
		rc |= gm_launch(s, SB_PF_EPI_RESID, p->att, w + p->off[SB_PF_WO], p->x, p->x, M,
				d->hidden, d->hidden);
		pf_rms_kernel<<<M, 128, 0, s>>>(p->x, w + p->off[SB_PF_GAMMA2], p->xn, d->hidden);
		rc |= gm_launch(s, SB_PF_EPI_SILU, p->xn, w + p->off[SB_PF_WGU], p->act, NULL, M,
				2 * d->ffn, d->hidden);
		rc |= gm_launch(s, SB_PF_EPI_RESID, p->act, w + p->off[SB_PF_WD], p->x, p->x, M,
				d->hidden, d->ffn);
	}
	if ((ce = cudaGetLastError()) != cudaSuccess || rc) {
		snprintf(err, errlen, "prefill: %u tokens: launch: %s", tokens,
			 cudaGetErrorString(ce));
		return -1;
	}
	return 0;
}

extern "C" int sb_pf_block_sums(void *stream, const uint64_t *blk, unsigned n, uint32_t len,
				uint64_t *out)
{
	if (len % 8)
		return -1;
	if (n == 0)
		return 0;
	pf_sums_kernel<<<n, 256, 0, (cudaStream_t)stream>>>(blk, len / 8, out);
	return cudaPeekAtLastError() == cudaSuccess ? 0 : -1;
}

extern "C" int sb_pf_gemm(void *stream, enum sb_pf_epi epi, const void *a, const void *b, void *c,
			  const void *r, uint32_t m, uint32_t n, uint32_t k)
{
	if (m == 0 || n == 0 || n % 8 || k == 0 || k % GM_BK || (epi == SB_PF_EPI_RESID && !r) ||
	    kernels_init())
		return -1;
	return gm_launch((cudaStream_t)stream, epi, (const bf16 *)a, (const bf16 *)b, (bf16 *)c,
			 (const bf16 *)r, m, n, k);
}

extern "C" int sb_pf_attn(void *stream, const void *qkv, void *out, uint32_t tokens,
			  uint32_t q_heads, uint32_t kv_heads)
{
	if (tokens == 0 || q_heads == 0 || kv_heads == 0 || q_heads % kv_heads || kernels_init())
		return -1;
	return at_launch((cudaStream_t)stream, (const bf16 *)qkv, (bf16 *)out, tokens, q_heads,
			 kv_heads);
}
