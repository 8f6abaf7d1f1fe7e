/* SPDX-License-Identifier: BSD-3-Clause */
/* kvlane-serve-bench's CPU backend: decode attention over bf16 KV blocks in host memory. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvl_clock.h"
#include "kvlane_serve_bench.h"

static struct sb_shape sh;
static unsigned n_slots;
static uint32_t max_blk;
static uint8_t *cache;
static uint8_t *wbuf;	       /* the weights, read once per step */
static float *q;	       /* [layer][q_heads][dim] */
static float *out;	       /* [slot][layer][q_heads][dim] */
static uint8_t ****tab;	       /* [slot][layer][block]: the block's address */
static float *score, *kf;      /* scratch */
static volatile uint64_t wsum; /* keeps the weight read */
static uint64_t t_step;

static float bf(uint16_t v)
{
	uint32_t u = (uint32_t)v << 16;
	float f;

	memcpy(&f, &u, 4);
	return f;
}

static int cpu_init(const struct sb_shape *s, unsigned slots, uint32_t max_blocks,
		    uint64_t cache_bytes, uint64_t seed, char *err, unsigned errlen)
{
	size_t nq = (size_t)s->layers * s->q_heads * s->head_dim;

	sh = *s;
	n_slots = slots;
	max_blk = max_blocks;
	wbuf = malloc(s->weight_bytes ? s->weight_bytes : 1);
	q = malloc(nq * sizeof(float));
	out = calloc((size_t)slots * nq, sizeof(float));
	tab = calloc(slots, sizeof(*tab));
	score = malloc((size_t)max_blocks * SB_BLOCK_TOKENS * sizeof(float));
	kf = malloc(s->head_dim * sizeof(float));
	cache = cache_bytes ? malloc(cache_bytes) : NULL;
	if (!wbuf || !q || !out || !tab || !score || !kf || (cache_bytes && !cache)) {
		snprintf(err, errlen, "CPU backend: out of memory (cache %llu bytes)",
			 (unsigned long long)cache_bytes);
		return -ENOMEM;
	}
	for (unsigned i = 0; i < slots; i++) {
		tab[i] = calloc(s->layers, sizeof(**tab));
		if (tab[i] == NULL)
			return -ENOMEM;
		for (uint32_t l = 0; l < s->layers; l++) {
			tab[i][l] = calloc(max_blocks, sizeof(uint8_t *));
			if (tab[i][l] == NULL)
				return -ENOMEM;
		}
	}
	memset(wbuf, 1, s->weight_bytes);
	for (size_t i = 0; i < nq; i++) {
		seed = seed * 6364136223846793005ull + 1442695040888963407ull;
		q[i] = (float)((seed >> 40) & 0xFFFF) / 65536.0f - 0.5f;
	}
	return 0;
}

static uint8_t *cpu_cache(void)
{
	return cache;
}

static void *cpu_host_alloc(uint64_t len)
{
	void *p = malloc(len ? len : 1);

	if (p)
		memset(p, 0, len); /* touched once: the receive path is not its page faults */
	return p;
}

static void cpu_host_free(void *p)
{
	free(p);
}

/* The CPU stand-in for the DMA: a copy, done when it returns. */
static int cpu_upload_async(void *dst, const void *src, uint64_t len, unsigned buf)
{
	(void)buf;
	memcpy(dst, src, len);
	return 0;
}

static int cpu_upload_wait(unsigned buf)
{
	(void)buf;
	return 0;
}

static int cpu_gather(void *const *dst, void *const *src, unsigned n, uint32_t len)
{
	for (unsigned k = 0; k < n; k++)
		memcpy(dst[k], src[k], len);
	return 0;
}

static int cpu_fill(void *dst, uint64_t len, uint64_t h, uint64_t off)
{
	uint64_t *w = dst;

	for (uint64_t i = 0; i < len / 8; i++)
		w[i] = sb_pat_word(h, off / 8 + i);
	return 0;
}

static int cpu_fill_blocks(void *const *blk, const uint64_t *off, unsigned n, uint32_t len,
			   uint64_t h)
{
	for (unsigned k = 0; k < n; k++)
		cpu_fill(blk[k], len, h, off[k]);
	return 0;
}

static uint64_t cpu_verify(void *const *blk, const uint64_t *off, unsigned n, uint32_t len,
			   uint64_t h)
{
	uint64_t bad = 0;

	for (unsigned k = 0; k < n; k++) {
		const uint64_t *w = blk[k];

		for (uint32_t i = 0; i < len / 8; i++)
			bad += w[i] != sb_pat_word(h, off[k] / 8 + i) ? 8 : 0;
	}
	return bad;
}

static int cpu_table(unsigned slot, uint32_t layer, void *const *blk, uint32_t nblk)
{
	if (slot >= n_slots || nblk > max_blk)
		return -EINVAL;
	memcpy(tab[slot][layer], blk, nblk * sizeof(void *));
	return 0;
}

static void cpu_step_begin(void)
{
	t_step = kvl_now_ns();
}

static void cpu_weights(uint32_t layer)
{
	uint64_t per = sh.weight_bytes / sh.layers, s = 0;
	const uint64_t *w = (const uint64_t *)(wbuf + per * layer);

	for (uint64_t i = 0; i < per / 8; i++)
		s += w[i];
	wsum += s;
}

/* Exact softmax attention, one query head at a time, over the unit layout of the header. */
static void cpu_attn(unsigned slot, uint32_t layer, uint32_t nblk)
{
	uint32_t gh = sb_group_heads(&sh), d = sh.head_dim, qpk = sh.q_heads / sh.kv_heads;
	uint64_t unit = 2ull * gh * SB_BLOCK_TOKENS * d * 2;
	float scale = 1.0f / sqrtf((float)d);

	for (uint32_t kvh = 0; kvh < sh.kv_heads; kvh++) {
		uint32_t g = kvh / gh, hh = kvh % gh;

		for (uint32_t j = 0; j < qpk; j++) {
			uint32_t qh = kvh * qpk + j, nt = nblk * SB_BLOCK_TOKENS;
			const float *qv = q + ((size_t)layer * sh.q_heads + qh) * d;
			float *o = out + (((size_t)slot * sh.layers + layer) * sh.q_heads + qh) * d;
			float m = -INFINITY, sum = 0;

			for (uint32_t t = 0; t < nt; t++) {
				const uint16_t *k =
					(const uint16_t *)(tab[slot][layer][t / SB_BLOCK_TOKENS] +
							   g * unit) +
					((size_t)hh * SB_BLOCK_TOKENS + t % SB_BLOCK_TOKENS) * d;
				float s = 0;

				for (uint32_t e = 0; e < d; e++)
					s += qv[e] * bf(k[e]);
				score[t] = s * scale;
				if (score[t] > m)
					m = score[t];
			}
			memset(o, 0, d * sizeof(float));
			for (uint32_t t = 0; t < nt; t++) {
				const uint16_t *v =
					(const uint16_t *)(tab[slot][layer][t / SB_BLOCK_TOKENS] +
							   g * unit) +
					((size_t)(gh + hh) * SB_BLOCK_TOKENS +
					 t % SB_BLOCK_TOKENS) *
						d;
				float p = expf(score[t] - m);

				sum += p;
				for (uint32_t e = 0; e < d; e++)
					o[e] += p * bf(v[e]);
			}
			for (uint32_t e = 0; e < d; e++)
				o[e] /= sum;
		}
	}
}

static void cpu_step_submit(void)
{
	/* computed as called */
}

static uint64_t cpu_bad_total(void)
{
	return 0; /* cpu_verify returns every bad byte it finds */
}

static double cpu_step_end(void)
{
	return (double)(kvl_now_ns() - t_step) / 1e9;
}

static uint64_t cpu_out_hash(unsigned slot)
{
	size_t n = (size_t)sh.layers * sh.q_heads * sh.head_dim;
	const uint32_t *w = (const uint32_t *)(out + slot * n);
	uint64_t h = 1469598103934665603ull;

	for (size_t i = 0; i < n; i++)
		h = (h ^ w[i]) * 1099511628211ull;
	return h;
}

static double cpu_probe_weights(void)
{
	uint64_t t = kvl_now_ns();

	for (uint32_t l = 0; l < sh.layers; l++)
		cpu_weights(l);
	return (double)(kvl_now_ns() - t) / 1e9;
}

static void cpu_fini(void)
{
	for (unsigned i = 0; tab && i < n_slots; i++) {
		for (uint32_t l = 0; tab[i] && l < sh.layers; l++)
			free(tab[i][l]);
		free(tab[i]);
	}
	free(tab);
	free(cache);
	free(wbuf);
	free(q);
	free(out);
	free(score);
	free(kf);
}

const struct sb_backend kvl_sb_cpu = {
	.name = "cpu",
	.device = false,
	.init = cpu_init,
	.cache = cpu_cache,
	.host_alloc = cpu_host_alloc,
	.host_free = cpu_host_free,
	.upload_async = cpu_upload_async,
	.upload_wait = cpu_upload_wait,
	.gather = cpu_gather,
	.fill = cpu_fill,
	.fill_blocks = cpu_fill_blocks,
	.verify = cpu_verify,
	.table = cpu_table,
	.step_begin = cpu_step_begin,
	.weights = cpu_weights,
	.attn = cpu_attn,
	.step_end = cpu_step_end,
	.out_hash = cpu_out_hash,
	.probe_weights = cpu_probe_weights,
	.fini = cpu_fini,
	.step_submit = cpu_step_submit,
	.bad_total = cpu_bad_total,
};
