/* SPDX-License-Identifier: BSD-3-Clause */
/* gpu suite: kvlane-serve-bench's prefill kernels and whole layers against host references. */
/*
 * tools/kvlane_serve_prefill.cu, part by part, each against a host reference that rounds to
 * bf16 where the GPU does:
 *   gemm       each epilogue at sizes with partial M and N tiles, on inputs that are multiples
 *              of 1/8 (fp32 sums exact): store and residual equal bit for bit, silu within one
 *              bf16 ulp (the host's expf and the device's may differ in the last float bit);
 *              rows and columns past the matrix untouched
 *   attention  causal GQA 4:1 and 1:1 at T = 1, 17, 64, 200, 333 (buffers of exactly T rows)
 *              against float64: max abs error < 2e-2
 *   prefill    sb_pf_run on 2 small layers (hidden 512, q 4, kv 2, ffn 1024; and hidden 2048,
 *              q 16, kv 16: two units a block) at T = 1, 16, 200: every layer's K and V against
 *              a host model of the whole computation (99.9 % within 3e-2 relative, none
 *              non-finite), pad slots zero, the first tokens bitwise the same at every T, the
 *              same key twice the same bytes and sums, another key other sums, the sums equal
 *              to the host's hash of the same bytes
 *   errors     tokens 0 and past max_tokens refused, head_dim 64 refused naming head_dim
 * test_prefill_gpu bench: llama3-8b's shape at T = 1024, 4096, 8192, the parts alone (exits
 * 77 without a GPU, as the rest).
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <thread>
#include <vector>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "gpu_test.h"
#include "kvlane_serve_prefill.h"

typedef std::vector<uint16_t> bfvec; /* bf16 bits */

static uint16_t f2bf(float f)
{
	uint32_t u;

	memcpy(&u, &f, 4);
	if ((u & 0x7fffffffu) > 0x7f800000u)
		return (uint16_t)((u >> 16) | 0x40);
	u += 0x7fffu + ((u >> 16) & 1);
	return (uint16_t)(u >> 16);
}

static float bf2f(uint16_t h)
{
	uint32_t u = (uint32_t)h << 16;
	float f;

	memcpy(&f, &u, 4);
	return f;
}

static float rbf(float f)
{
	return bf2f(f2bf(f));
}

/* fn(i) for i in [0, n), spread over the host's cores */
template <typename F> static void par_for(size_t n, F fn)
{
	unsigned nt = std::max(1u, std::min(32u, std::thread::hardware_concurrency()));
	std::vector<std::thread> th;

	for (unsigned k = 0; k < nt; k++)
		th.emplace_back([=]() {
			for (size_t i = n * k / nt; i < n * (k + 1) / nt; i++)
				fn(i);
		});
	for (auto &t : th)
		t.join();
}

/* small exact values from a hash: k / 2^@shift, k in [-@half, @half) */
static float hval(uint64_t i, uint64_t salt, int half, int shift)
{
	uint64_t h = sb_pf_mix64(i * 0x9E3779B97F4A7C15ull + salt);

	return (float)((int)(h % (2 * half)) - half) / (float)(1 << shift);
}

static void *dup_dev(const void *h, size_t len)
{
	void *d;

	CK(cudaMalloc(&d, len));
	CK(cudaMemcpy(d, h, len, cudaMemcpyHostToDevice));
	return d;
}

/* ---- 1. the GEMM alone ---- */

static void test_gemm(cudaStream_t s, uint32_t m, uint32_t n, uint32_t k)
{
	const uint32_t guard = 64; /* rows past m: must stay as they were */
	std::vector<int8_t> a((size_t)m * k), b((size_t)n * k);
	bfvec ha((size_t)m * k), hb((size_t)n * k), hr((size_t)m * n), got((size_t)(m + guard) * n);
	std::vector<float> acc((size_t)m * n);
	void *da, *db, *dr, *dc;
	size_t bad_st = 0, bad_res = 0, bad_silu = 0, bad_guard = 0;

	for (size_t i = 0; i < a.size(); i++) {
		a[i] = (int8_t)(hval(i, 1, 8, 0));
		ha[i] = f2bf(a[i] / 8.0f);
	}
	for (size_t i = 0; i < b.size(); i++) {
		b[i] = (int8_t)(hval(i, 2, 8, 0));
		hb[i] = f2bf(b[i] / 8.0f);
	}
	for (size_t i = 0; i < hr.size(); i++)
		hr[i] = f2bf(hval(i, 3, 128, 4));
	par_for(m, [&](size_t r) {
		for (uint32_t c = 0; c < n; c++) {
			int64_t sum = 0;

			for (uint32_t x = 0; x < k; x++)
				sum += a[r * k + x] * b[(size_t)c * k + x];
			acc[r * n + c] = (float)sum / 64.0f; /* exact: |sum| < 2^24 */
		}
	});
	da = dup_dev(ha.data(), ha.size() * 2);
	db = dup_dev(hb.data(), hb.size() * 2);
	dr = dup_dev(hr.data(), hr.size() * 2);
	CK(cudaMalloc(&dc, got.size() * 2));

	/* store */
	CK(cudaMemset(dc, 0xff, got.size() * 2));
	EXPECT(sb_pf_gemm(s, SB_PF_EPI_STORE, da, db, dc, NULL, m, n, k) == 0, "gemm store");
	CK(cudaStreamSynchronize(s));
	CK(cudaMemcpy(got.data(), dc, got.size() * 2, cudaMemcpyDeviceToHost));
	for (size_t i = 0; i < (size_t)m * n; i++)
		bad_st += got[i] != f2bf(acc[i]);
	for (size_t i = (size_t)m * n; i < got.size(); i++)
		bad_guard += got[i] != 0xffff;

	/* residual, in place (C = R), as the layers run it */
	CK(cudaMemset(dc, 0xff, got.size() * 2));
	CK(cudaMemcpy(dc, dr, hr.size() * 2, cudaMemcpyDeviceToDevice));
	EXPECT(sb_pf_gemm(s, SB_PF_EPI_RESID, da, db, dc, dc, m, n, k) == 0, "gemm resid");
	CK(cudaStreamSynchronize(s));
	CK(cudaMemcpy(got.data(), dc, got.size() * 2, cudaMemcpyDeviceToHost));
	for (size_t i = 0; i < (size_t)m * n; i++)
		bad_res += got[i] != f2bf(bf2f(hr[i]) + acc[i]);
	for (size_t i = (size_t)m * n; i < got.size(); i++)
		bad_guard += got[i] != 0xffff;

	/* silu(gate) * up of column pairs: C is m x n/2 */
	CK(cudaMemset(dc, 0xff, got.size() * 2));
	EXPECT(sb_pf_gemm(s, SB_PF_EPI_SILU, da, db, dc, NULL, m, n, k) == 0, "gemm silu");
	CK(cudaStreamSynchronize(s));
	CK(cudaMemcpy(got.data(), dc, got.size() * 2, cudaMemcpyDeviceToHost));
	for (size_t r = 0; r < m; r++)
		for (uint32_t j = 0; j < n / 2; j++) {
			float g = acc[r * n + 2 * j], u = acc[r * n + 2 * j + 1];
			float want = bf2f(f2bf(g / (1.0f + expf(-g)) * u));
			float have = bf2f(got[r * (n / 2) + j]);

			bad_silu += !(fabsf(have - want) <= fabsf(want) / 128.0f);
		}
	for (size_t i = (size_t)m * (n / 2); i < got.size(); i++)
		bad_guard += got[i] != 0xffff;

	EXPECT(bad_st == 0 && bad_res == 0 && bad_silu == 0 && bad_guard == 0,
	       "gemm %ux%ux%u: %zu store, %zu residual, %zu silu entries wrong, %zu guard entries "
	       "written",
	       m, n, k, bad_st, bad_res, bad_silu, bad_guard);
	printf("PASS gemm %ux%ux%u: store and residual (in place) exact, silu*up within 1 bf16 "
	       "ulp, nothing written past the matrix\n",
	       m, n, k);
	cudaFree(da);
	cudaFree(db);
	cudaFree(dr);
	cudaFree(dc);
}

/* ---- 2. the attention alone ---- */

/* out[t][h][d] in float64 from bf16 q, k, v in the qkv layout (RoPE is not the kernel's) */
static void attn_ref(const bfvec &qkv, uint32_t T, uint32_t qh, uint32_t kvh,
		     std::vector<double> &out, uint32_t t_lo)
{
	const uint32_t ld = (qh + 2 * kvh) * 128;

	out.assign((size_t)T * qh * 128, 0.0);
	par_for((size_t)(T - t_lo) * qh, [&](size_t w) {
		const uint32_t t = t_lo + (uint32_t)(w / qh), h = (uint32_t)(w % qh);
		const uint32_t kh = h / (qh / kvh);
		std::vector<double> sc(t + 1);
		double mx = -INFINITY, sum = 0;

		for (uint32_t j = 0; j <= t; j++) {
			double d = 0;

			for (int e = 0; e < 128; e++)
				d += (double)bf2f(qkv[(size_t)t * ld + h * 128 + e]) *
				     bf2f(qkv[(size_t)j * ld + (qh + kh) * 128 + e]);
			sc[j] = d / sqrt(128.0);
			mx = std::max(mx, sc[j]);
		}
		for (uint32_t j = 0; j <= t; j++) {
			sc[j] = exp(sc[j] - mx);
			sum += sc[j];
		}
		for (int e = 0; e < 128; e++) {
			double o = 0;

			for (uint32_t j = 0; j <= t; j++)
				o += sc[j] * bf2f(qkv[(size_t)j * ld + (qh + kvh + kh) * 128 + e]);
			out[((size_t)t * qh + h) * 128 + e] = o / sum;
		}
	});
}

static void test_attn(cudaStream_t s, uint32_t T, uint32_t qh, uint32_t kvh)
{
	const uint32_t ld = (qh + 2 * kvh) * 128;
	bfvec qkv((size_t)T * ld), got((size_t)T * qh * 128);
	std::vector<double> want;
	void *dq, *dout;
	double err = 0;

	/* q, k in [-2, 2) (scores of a few units: a peaked softmax), v in [-1, 1) */
	for (size_t i = 0; i < qkv.size(); i++)
		qkv[i] = f2bf(i % ld < (qh + kvh) * 128 ? hval(i, 4 + T, 128, 6)
							: hval(i, 5 + T, 128, 7));
	attn_ref(qkv, T, qh, kvh, want, 0);
	dq = dup_dev(qkv.data(), qkv.size() * 2);
	CK(cudaMalloc(&dout, got.size() * 2));
	CK(cudaMemset(dout, 0xff, got.size() * 2));
	EXPECT(sb_pf_attn(s, dq, dout, T, qh, kvh) == 0, "sb_pf_attn T=%u", T);
	CK(cudaStreamSynchronize(s));
	CK(cudaMemcpy(got.data(), dout, got.size() * 2, cudaMemcpyDeviceToHost));
	for (size_t i = 0; i < got.size(); i++) {
		double e = fabs((double)bf2f(got[i]) - want[i]);

		EXPECT(e < 2e-2,
		       "attention T=%u q_heads %u kv_heads %u: token %zu head %zu dim %zu: "
		       "%g, want %g",
		       T, qh, kvh, i / (qh * 128), i / 128 % qh, i % 128, bf2f(got[i]), want[i]);
		err = std::max(err, e);
	}
	printf("PASS attention T=%u q_heads %u kv_heads %u: max |err| %.2e vs float64\n", T, qh,
	       kvh, err);
	cudaFree(dq);
	cudaFree(dout);
}

/* ---- 3. whole layers ---- */

/* One layer's weights on the host, rounded to bf16 as the device holds them. */
struct hlayer {
	std::vector<float> g1, g2, wqkv, wo, wgu, wd;
};

static void gen(std::vector<float> &v, size_t n, uint64_t seed, uint32_t l, uint32_t mat,
		uint32_t kin)
{
	const float a = (float)sqrt(3.0 / kin);

	v.resize(n);
	par_for(n, [&](size_t i) {
		v[i] = rbf(mat <= SB_PF_GAMMA2 ? sb_pf_gamma(seed, l, mat, (uint32_t)i)
					       : sb_pf_wval(seed, l, mat, i, a));
	});
}

/* y[m][n] = sum_k x[m][k] w[n][k] in float (eight partial sums) */
static void mm(const std::vector<float> &x, uint32_t M, uint32_t K, const std::vector<float> &w,
	       uint32_t N, std::vector<float> &y)
{
	y.assign((size_t)M * N, 0.f);
	par_for(N, [&](size_t n) {
		const float *wr = &w[n * K];

		for (uint32_t m = 0; m < M; m++) {
			const float *xr = &x[(size_t)m * K];
			float p[8] = { 0 };

			for (uint32_t k = 0; k < K; k += 8)
				for (int e = 0; e < 8; e++)
					p[e] += xr[k + e] * wr[k + e];
			y[(size_t)m * N + n] =
				((p[0] + p[1]) + (p[2] + p[3])) + ((p[4] + p[5]) + (p[6] + p[7]));
		}
	});
}

static void rms(const std::vector<float> &x, uint32_t T, uint32_t H, const std::vector<float> &g,
		std::vector<float> &y)
{
	y.resize((size_t)T * H);
	for (uint32_t t = 0; t < T; t++) {
		float ss = 0, r;

		for (uint32_t i = 0; i < H; i++)
			ss += x[(size_t)t * H + i] * x[(size_t)t * H + i];
		r = 1.0f / sqrtf(ss / H + 1e-5f);
		for (uint32_t i = 0; i < H; i++)
			y[(size_t)t * H + i] = rbf(x[(size_t)t * H + i] * r * g[i]);
	}
}

/* K and V of every layer, [layer][token][kv head][128] each, for tokens 0 .. T - 1 */
static void host_prefill(const struct sb_pf_dims *d, uint64_t seed, uint64_t key, uint32_t T,
			 std::vector<float> &K, std::vector<float> &V)
{
	const uint32_t H = d->hidden, F = d->ffn, qh = d->q_heads, kvh = d->kv_heads;
	const uint32_t nq = (qh + 2 * kvh) * 128;
	std::vector<float> x((size_t)T * H), xn, qkv, o, att((size_t)T * H), gu, act((size_t)T * F);
	bfvec qb;
	std::vector<double> ad;

	K.resize((size_t)d->layers * T * kvh * 128);
	V.resize(K.size());
	for (uint32_t t = 0; t < T; t++)
		for (uint32_t i = 0; i < H; i++)
			x[(size_t)t * H + i] = sb_pf_embed(key, t, i);
	for (uint32_t l = 0; l < d->layers; l++) {
		hlayer w;

		gen(w.g1, H, seed, l, SB_PF_GAMMA1, 1);
		gen(w.g2, H, seed, l, SB_PF_GAMMA2, 1);
		gen(w.wqkv, (size_t)nq * H, seed, l, SB_PF_WQKV, H);
		gen(w.wo, (size_t)H * H, seed, l, SB_PF_WO, H);
		gen(w.wgu, (size_t)2 * F * H, seed, l, SB_PF_WGU, H);
		gen(w.wd, (size_t)H * F, seed, l, SB_PF_WD, F);

		rms(x, T, H, w.g1, xn);
		mm(xn, T, H, w.wqkv, nq, qkv);
		for (auto &v : qkv)
			v = rbf(v);
		for (uint32_t t = 0; t < T; t++)
			for (uint32_t h = 0; h < qh + kvh; h++)
				for (uint32_t i = 0; i < 64; i++) {
					float *p = &qkv[(size_t)t * nq + h * 128], c, sn;
					float u = p[i], v = p[i + 64];

					sb_pf_rope_cs(t, i, &c, &sn);
					p[i] = rbf(u * c - v * sn);
					p[i + 64] = rbf(v * c + u * sn);
				}
		for (uint32_t t = 0; t < T; t++)
			for (uint32_t h = 0; h < kvh; h++)
				for (uint32_t e = 0; e < 128; e++) {
					size_t at = (((size_t)l * T + t) * kvh + h) * 128 + e;

					K[at] = qkv[(size_t)t * nq + (qh + h) * 128 + e];
					V[at] = qkv[(size_t)t * nq + (qh + kvh + h) * 128 + e];
				}
		qb.resize(qkv.size());
		for (size_t i = 0; i < qkv.size(); i++)
			qb[i] = f2bf(qkv[i]);
		attn_ref(qb, T, qh, kvh, ad, 0);
		for (size_t i = 0; i < att.size(); i++)
			att[i] = rbf((float)ad[i]);
		mm(att, T, H, w.wo, H, o);
		for (size_t i = 0; i < x.size(); i++)
			x[i] = rbf(x[i] + o[i]);
		rms(x, T, H, w.g2, xn);
		mm(xn, T, H, w.wgu, 2 * F, gu);
		for (size_t t = 0; t < T; t++)
			for (uint32_t j = 0; j < F; j++) {
				float g = gu[t * 2 * F + 2 * j], u = gu[t * 2 * F + 2 * j + 1];

				act[t * F + j] = rbf(g / (1.0f + expf(-g)) * u);
			}
		mm(act, T, F, w.wd, H, o);
		for (size_t i = 0; i < x.size(); i++)
			x[i] = rbf(x[i] + o[i]);
	}
}

/* element index of (layer, token, K or V, kv head, dim) in a request's KV of @nb blocks a layer */
static size_t kv_at(const struct sb_pf_dims *d, uint32_t nb, uint32_t l, uint32_t t, int v,
		    uint32_t h, uint32_t e)
{
	const uint32_t hg = std::min(d->kv_heads, 8u);
	const size_t blk_el = sb_pf_block_bytes(d) / 2;

	return ((size_t)l * nb + t / 16) * blk_el + (size_t)(h / hg) * 2 * hg * 16 * 128 +
	       (size_t)v * hg * 16 * 128 + ((size_t)(h % hg) * 16 + t % 16) * 128 + e;
}

struct run_out {
	bfvec kv;
	std::vector<uint64_t> sums;
};

/* sb_pf_run into a buffer of 0xff bytes; its bytes and its device-computed block sums */
static void run_once(struct sb_pf *p, const struct sb_pf_dims *d, cudaStream_t s, uint64_t key,
		     uint32_t T, run_out &r)
{
	const uint32_t nb = (T + 15) / 16, n = d->layers * nb;
	const uint64_t bb = sb_pf_block_bytes(d);
	std::vector<uint64_t> addr(n);
	uint8_t *kv;
	uint64_t *dblk, *dsum;
	char err[256];

	CK(cudaMalloc(&kv, n * bb));
	CK(cudaMemset(kv, 0xff, n * bb));
	EXPECT(sb_pf_run(p, s, key, T, kv, err, sizeof(err)) == 0, "sb_pf_run T=%u: %s", T, err);
	for (uint32_t i = 0; i < n; i++)
		addr[i] = (uint64_t)(uintptr_t)(kv + i * bb);
	dblk = (uint64_t *)dup_dev(addr.data(), n * 8);
	CK(cudaMalloc(&dsum, n * 8));
	EXPECT(sb_pf_block_sums(s, dblk, n, (uint32_t)bb, dsum) == 0, "sb_pf_block_sums");
	CK(cudaStreamSynchronize(s));
	r.kv.resize(n * bb / 2);
	r.sums.resize(n);
	CK(cudaMemcpy(r.kv.data(), kv, n * bb, cudaMemcpyDeviceToHost));
	CK(cudaMemcpy(r.sums.data(), dsum, n * 8, cudaMemcpyDeviceToHost));
	cudaFree(kv);
	cudaFree(dblk);
	cudaFree(dsum);
}

static void test_prefill(cudaStream_t s, const struct sb_pf_dims *d, const char *name)
{
	const uint32_t Ts[] = { 1, 16, 200 }, T_max = 200, kvh = d->kv_heads;
	const uint64_t seed = 11, key = 0x5eed0001, key2 = 0x5eed0002;
	const uint64_t bb = sb_pf_block_bytes(d);
	std::vector<float> K, V;
	struct sb_pf *p;
	run_out big;
	char err[256];

	EXPECT(sb_pf_new(&p, d, T_max, seed, err, sizeof(err)) == 0, "sb_pf_new %s: %s", name, err);
	host_prefill(d, seed, key, T_max, K, V);
	for (uint32_t T : Ts) {
		const uint32_t nb = (T + 15) / 16, n = d->layers * nb;
		size_t checked = 0, off = 0, pad_bad = 0, nonfinite = 0;
		double max_err = 0;
		run_out r, again, other;

		run_once(p, d, s, key, T, r);
		/* each row of 128 values: (layer, token slot, K or V, kv head) */
		for (size_t row = 0; row < (size_t)d->layers * nb * 16 * 2 * kvh; row++) {
			const uint32_t l = (uint32_t)(row / ((size_t)nb * 16 * 2 * kvh));
			const uint32_t t = (uint32_t)(row / (2 * kvh) % (nb * 16));
			const int v = (int)(row / kvh % 2);
			const uint32_t h = (uint32_t)(row % kvh);
			const uint16_t *got = &r.kv[kv_at(d, nb, l, t, v, h, 0)];
			const float *want;

			if (t >= T) {
				for (int e = 0; e < 128; e++)
					pad_bad += got[e] != 0;
				continue;
			}
			want = &(v ? V : K)[(((size_t)l * T_max + t) * kvh + h) * 128];
			for (int e = 0; e < 128; e++) {
				const float a = bf2f(got[e]), b = want[e];

				if (!isfinite(a)) {
					nonfinite++;
					continue;
				}
				checked++;
				off += fabsf(a - b) > 3e-2f * std::max(1.f, fabsf(b));
				max_err = std::max(max_err, (double)fabsf(a - b));
			}
		}
		EXPECT(nonfinite == 0 && pad_bad == 0,
		       "%s T=%u: %zu non-finite K/V values, %zu pad entries not zero", name, T,
		       nonfinite, pad_bad);
		EXPECT(off <= checked / 1000,
		       "%s T=%u: %zu of %zu K/V values off the host model by more than 3e-2 "
		       "relative (max |err| %.3g)",
		       name, T, off, checked, max_err);
		printf("PASS prefill %s T=%u: %zu K/V values vs the host model, %zu beyond 3e-2 "
		       "relative, max |err| %.3g; pad slots zero\n",
		       name, T, checked, off, max_err);
		{
			std::vector<uint64_t> host(n, 0);
			const uint64_t *w = (const uint64_t *)r.kv.data();

			for (uint32_t b = 0; b < n; b++)
				for (uint64_t i = 0; i < bb / 8; i++)
					host[b] += sb_pf_word_hash(w[b * (bb / 8) + i], i);
			EXPECT(host == r.sums, "%s T=%u: device block sums differ from the host's",
			       name, T);
		}
		run_once(p, d, s, key, T, again);
		EXPECT(again.kv == r.kv && again.sums == r.sums,
		       "%s T=%u: the same key twice gave other bytes", name, T);
		run_once(p, d, s, key2, T, other);
		for (uint32_t b = 0; b < n; b++)
			EXPECT(other.sums[b] != r.sums[b],
			       "%s T=%u: block %u: another key, same sum", name, T, b);
		if (T == T_max)
			big = r;
		printf("PASS prefill %s T=%u: block sums equal the host's, the same key twice "
		       "identical, another key other sums in all %u blocks\n",
		       name, T, n);
	}
	/* causal and row-independent: a prompt's first tokens' KV does not depend on its length */
	for (uint32_t T : Ts) {
		const uint32_t nb = (T + 15) / 16, nb_big = (T_max + 15) / 16;
		run_out r;

		if (T == T_max)
			continue;
		run_once(p, d, s, key, T, r);
		for (size_t row = 0; row < (size_t)d->layers * T * 2 * kvh; row++) {
			const uint32_t l = (uint32_t)(row / ((size_t)T * 2 * kvh));
			const uint32_t t = (uint32_t)(row / (2 * kvh) % T);
			const int v = (int)(row / kvh % 2);
			const uint32_t h = (uint32_t)(row % kvh);

			EXPECT(memcmp(&r.kv[kv_at(d, nb, l, t, v, h, 0)],
				      &big.kv[kv_at(d, nb_big, l, t, v, h, 0)], 256) == 0,
			       "%s: layer %u token %u %c head %u: T=%u differs from T=%u", name, l,
			       t, v ? 'V' : 'K', h, T, T_max);
		}
	}
	printf("PASS prefill %s: the first 1 and 16 tokens' K/V bitwise those of T=%u\n", name,
	       T_max);
	sb_pf_free(p);
}

/* ---- 4. refused input ---- */

static void test_errors(cudaStream_t s)
{
	struct sb_pf_dims d = { 1, 512, 4, 2, 128, 256 };
	struct sb_pf *p;
	char err[256];
	void *kv;

	EXPECT(sb_pf_new(&p, &d, 64, 1, err, sizeof(err)) == 0, "sb_pf_new: %s", err);
	CK(cudaMalloc(&kv, 8 << 20));
	err[0] = 0;
	EXPECT(sb_pf_run(p, s, 1, 0, kv, err, sizeof(err)) == -1 && err[0], "0 tokens accepted");
	printf("PASS refused: %s\n", err);
	err[0] = 0;
	EXPECT(sb_pf_run(p, s, 1, 65, kv, err, sizeof(err)) == -1 && err[0],
	       "65 tokens of 64 accepted");
	printf("PASS refused: %s\n", err);
	CK(cudaStreamSynchronize(s));
	cudaFree(kv);
	sb_pf_free(p);
	d.head_dim = 64;
	d.hidden = 256;
	err[0] = 0;
	EXPECT(sb_pf_new(&p, &d, 64, 1, err, sizeof(err)) == -1 && strstr(err, "head_dim"),
	       "head_dim 64: %s", err);
	printf("PASS refused: %s\n", err);
	d.head_dim = 128;
	d.hidden = 512;
	d.ffn = 1000;
	err[0] = 0;
	EXPECT(sb_pf_new(&p, &d, 64, 1, err, sizeof(err)) == -1 && err[0], "ffn 1000 accepted");
	printf("PASS refused: %s\n", err);
}

/* ---- 5. bench ---- */

static __global__ void fill_exact(__nv_bfloat16 *p, uint64_t n, uint64_t salt)
{
	for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < n;
	     i += (uint64_t)gridDim.x * blockDim.x)
		p[i] = __float2bfloat16_rn(
			(float)((int)(sb_pf_mix64(i * 0x9E3779B97F4A7C15ull + salt) >> 60) - 8) /
			8.0f);
}

static float host_exact(uint64_t i, uint64_t salt)
{
	return (float)((int)(sb_pf_mix64(i * 0x9E3779B97F4A7C15ull + salt) >> 60) - 8) / 8.0f;
}

/* best of 3 after a warm-up, in ms; @fn queues the work on @s */
template <typename F> static double best_ms(cudaStream_t s, F fn)
{
	cudaEvent_t a, b;
	float ms, best = 1e30f;

	CK(cudaEventCreate(&a));
	CK(cudaEventCreate(&b));
	fn();
	for (int rep = 0; rep < 3; rep++) {
		CK(cudaEventRecord(a, s));
		fn();
		CK(cudaEventRecord(b, s));
		CK(cudaEventSynchronize(b));
		CK(cudaEventElapsedTime(&ms, a, b));
		best = std::min(best, ms);
	}
	CK(cudaGetLastError());
	cudaEventDestroy(a);
	cudaEventDestroy(b);
	return best;
}

static double gemm_tflops(cudaStream_t s, enum sb_pf_epi epi, void *A, void *B, void *C, uint32_t m,
			  uint32_t n, uint32_t k)
{
	double ms = best_ms(s, [&]() {
		EXPECT(sb_pf_gemm(s, epi, A, B, C, C, m, n, k) == 0, "gemm %ux%ux%u", m, n, k);
	});

	return 2.0 * m * n * k / (ms * 1e-3) / 1e12;
}

static int bench(cudaStream_t s)
{
	const struct sb_pf_dims d = { 32, 4096, 32, 8, 128, 14336 };
	const uint32_t Ts[] = { 1024, 4096, 8192 }, T_max = 8192;
	const uint64_t bb = sb_pf_block_bytes(&d);
	struct sb_pf *p;
	char err[256];
	void *A, *B, *C, *kv, *qkv, *att;
	double ms_run[3], g_sq, g_ffn, at_tf[3], layer_g[4];
	const uint32_t lg[4][3] = { { T_max, 6144, 4096 },
				    { T_max, 4096, 4096 },
				    { T_max, 28672, 4096 },
				    { T_max, 4096, 14336 } };
	const enum sb_pf_epi lepi[4] = { SB_PF_EPI_STORE, SB_PF_EPI_RESID, SB_PF_EPI_SILU,
					 SB_PF_EPI_RESID };
	unsigned bad = 0;

	printf("prefill bench: llama3-8b (32 layers, hidden 4096, 32 q / 8 kv heads, ffn 14336), "
	       "bf16 on the bench's own kernels (mma.sync GEMM and FlashAttention-2-style "
	       "attention), not cuBLAS / FlashAttention\n");
	EXPECT(sb_pf_new(&p, &d, T_max, 1, err, sizeof(err)) == 0, "sb_pf_new: %s", err);
	printf("weights %.2f GiB\n", sb_pf_weight_bytes(p) / 1073741824.0);
	CK(cudaMalloc(&kv, (size_t)d.layers * (T_max / 16) * bb));
	for (int i = 0; i < 3; i++) {
		const uint32_t T = Ts[i];

		ms_run[i] = best_ms(s, [&]() {
			EXPECT(sb_pf_run(p, s, 42, T, kv, err, sizeof(err)) == 0, "%s", err);
		});
	}
	{
		/* the 8192-token KV (the last run's) finite everywhere, and its scale */
		const size_t n = (size_t)d.layers * (T_max / 16) * bb / 2;
		bfvec h(n);
		size_t nonfinite = 0;
		float mx = 0;

		CK(cudaMemcpy(h.data(), kv, n * 2, cudaMemcpyDeviceToHost));
		for (size_t i = 0; i < n; i++) {
			float v = bf2f(h[i]);

			if (!isfinite(v))
				nonfinite++;
			else
				mx = std::max(mx, fabsf(v));
		}
		EXPECT(nonfinite == 0, "T=8192: %zu non-finite K/V values", nonfinite);
		printf("T=8192 K/V: all %zu finite, max |value| %.2f\n", n, mx);
	}
	sb_pf_free(p);
	CK(cudaFree(kv));

	/* GEMMs alone on exact inputs, a few entries checked (a wrong kernel has no rate) */
	CK(cudaMalloc(&A, (size_t)8192 * 14336 * 2));
	CK(cudaMalloc(&B, (size_t)28672 * 4096 * 2));
	CK(cudaMalloc(&C, (size_t)8192 * 28672 * 2));
	fill_exact<<<1024, 256, 0, s>>>((__nv_bfloat16 *)A, (uint64_t)8192 * 14336, 1);
	fill_exact<<<1024, 256, 0, s>>>((__nv_bfloat16 *)B, (uint64_t)28672 * 4096, 2);
	g_sq = gemm_tflops(s, SB_PF_EPI_STORE, A, B, C, 8192, 4096, 4096);
	g_ffn = gemm_tflops(s, SB_PF_EPI_STORE, A, B, C, 8192, 28672, 4096);
	CK(cudaStreamSynchronize(s));
	for (unsigned t = 0; t < 64; t++) {
		uint64_t r = (t * 2654435761u) % 8192, c = (t * 40503u + 7) % 28672;
		double want = 0;
		uint16_t got;

		for (uint64_t x = 0; x < 4096; x++)
			want += (double)host_exact(r * 4096 + x, 1) * host_exact(c * 4096 + x, 2);
		CK(cudaMemcpy(&got, (uint16_t *)C + r * 28672 + c, 2, cudaMemcpyDeviceToHost));
		bad += got != f2bf((float)want);
	}
	EXPECT(bad == 0, "GEMM 8192x28672x4096: %u of 64 checked entries wrong", bad);
	for (int i = 0; i < 4; i++)
		layer_g[i] = gemm_tflops(s, lepi[i], A, B, C, lg[i][0], lg[i][1], lg[i][2]);
	CK(cudaFree(A));
	CK(cudaFree(B));
	CK(cudaFree(C));

	/* one layer's attention: 32 q heads over 8 kv heads, causal */
	CK(cudaMalloc(&qkv, (size_t)T_max * 6144 * 2));
	CK(cudaMalloc(&att, (size_t)T_max * 4096 * 2));
	fill_exact<<<1024, 256, 0, s>>>((__nv_bfloat16 *)qkv, (uint64_t)T_max * 6144, 3);
	for (int i = 0; i < 3; i++) {
		const uint32_t T = Ts[i];
		double ms = best_ms(s, [&]() {
			EXPECT(sb_pf_attn(s, qkv, att, T, 32, 8) == 0, "attention T=%u", T);
		});

		at_tf[i] = 4.0 * 128 * 32 * ((double)T * (T + 1) / 2) / (ms * 1e-3) / 1e12;
	}
	CK(cudaFree(qkv));
	CK(cudaFree(att));

	printf("GEMM alone: 8192x4096x4096 %.0f TFLOP/s, 8192x28672x4096 %.0f TFLOP/s (entries "
	       "checked exact)\n",
	       g_sq, g_ffn);
	printf("one layer's GEMMs at T=8192: qkv 8192x6144x4096 %.0f, o (+residual) "
	       "8192x4096x4096 %.0f, gate/up (silu*up) 8192x28672x4096 %.0f, down (+residual) "
	       "8192x4096x14336 %.0f TFLOP/s\n",
	       layer_g[0], layer_g[1], layer_g[2], layer_g[3]);
	printf("%8s %12s %10s %16s\n", "T", "ms/prefill", "TFLOP/s", "attn TFLOP/s");
	for (int i = 0; i < 3; i++)
		printf("%8u %12.2f %10.1f %16.1f\n", Ts[i], ms_run[i],
		       sb_pf_flops(&d, Ts[i]) / (ms_run[i] * 1e-3) / 1e12, at_tf[i]);
	printf("BENCH prefill tokens=8192 ms=%.2f tflops=%.1f gemm_tflops=%.1f attn_tflops=%.1f\n",
	       ms_run[2], sb_pf_flops(&d, 8192) / (ms_run[2] * 1e-3) / 1e12, g_sq, at_tf[2]);
	return 0;
}

int main(int argc, char **argv)
{
	cudaStream_t s;

	if (gpu_test_devices() == 0)
		return GPU_TEST_SKIP;
	CK(cudaSetDevice(0));
	CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
	if (argc > 1 && strcmp(argv[1], "bench") == 0)
		return bench(s);

	test_gemm(s, 128, 128, 128);
	test_gemm(s, 256, 384, 256); /* N: a half-empty 256-wide tile */
	test_gemm(s, 200, 512, 1024);
	test_gemm(s, 333, 640, 512);
	test_gemm(s, 128, 256, 4096);
	for (uint32_t T : { 1u, 17u, 64u, 200u, 333u }) {
		test_attn(s, T, 8, 2);
		test_attn(s, T, 2, 2);
	}
	{
		const struct sb_pf_dims small = { 2, 512, 4, 2, 128, 1024 };
		const struct sb_pf_dims units = { 2, 2048, 16, 16, 128, 1024 };

		test_prefill(s, &small, "{2 layers, hidden 512, q 4, kv 2, ffn 1024}");
		test_prefill(s, &units, "{2 layers, hidden 2048, q 16, kv 16 (2 units), ffn 1024}");
	}
	test_errors(s);
	printf("PASS: prefill\n");
	return 0;
}
