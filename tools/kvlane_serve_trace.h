/* SPDX-License-Identifier: BSD-3-Clause */
/* kvlane-serve-bench's workload: one request per trace line, as Mooncake's traces have it. */
#ifndef KVL_TOOLS_SERVE_TRACE_H
#define KVL_TOOLS_SERVE_TRACE_H

#include <stdint.h>

struct sb_treq {
	double arrival_ms; /* from the first request, after --time-scale */
	uint32_t input, output;
	uint32_t n_hash; /* 512-token prefix blocks named (shared prefixes are not reused here) */
	unsigned line;
};

struct sb_trace {
	struct sb_treq *r;
	unsigned n, cap;
	unsigned clipped; /* inputs cut to --max-input */
};

struct sb_trace_opts {
	double time_scale; /* arrival times multiplied by it */
	unsigned max_requests;
	uint32_t max_input; /* 0: no clip */
};

/* Poisson arrivals, log-normal input lengths, a fixed output length. */
struct sb_synth {
	double rate;	     /* requests per second */
	double input_median; /* tokens */
	double input_sigma;  /* of ln(input): the tail */
	uint32_t output;
	uint64_t seed;
};

/* 0, or -EINVAL with "FILE:LINE: field 'NAME': why" in @err (or another negative errno). */
int kvl_sb_trace_load(const char *path, const struct sb_trace_opts *o, struct sb_trace *t,
		      char *err, unsigned errlen);
int kvl_sb_trace_synth(const struct sb_synth *y, const struct sb_trace_opts *o, struct sb_trace *t);
/* The trace as JSON lines a later --trace reads back (the run's own record of its workload). */
int kvl_sb_trace_write(const char *path, const struct sb_trace *t);

#endif
