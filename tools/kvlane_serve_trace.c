/* SPDX-License-Identifier: BSD-3-Clause */
/* kvlane-serve-bench's workload: Mooncake-style JSON-lines traces, and synthetic ones. */
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "kvlane_serve_trace.h"

/* "FILE:LINE: field 'NAME': why" (or without the field) into @err; -EINVAL. */
static int fail(const char *file, unsigned line, const char *field, const char *what, char *err,
		unsigned errlen)
{
	if (field)
		snprintf(err, errlen, "%s:%u: field '%s': %s", file, line, field, what);
	else
		snprintf(err, errlen, "%s:%u: %s", file, line, what);
	return -EINVAL;
}

/* A whole number 0..@max (an integer, or a real with no fraction: 10.0). */
static bool whole(const json_t *v, double max, uint32_t *out)
{
	double d;

	if (!json_is_number(v))
		return false;
	d = json_number_value(v);
	if (!isfinite(d) || d < 0 || d != floor(d) || d > max)
		return false;
	*out = (uint32_t)d;
	return true;
}

/* Field @k of @o, a count of tokens (1 or more) into *@out: NULL, or why not (@zero for 0). */
static const char *tokens(const json_t *o, const char *k, uint32_t *out, const char *zero)
{
	const json_t *v = json_object_get(o, k);

	if (v == NULL)
		return "missing";
	if (!whole(v, 1e9, out))
		return "expected a whole number of tokens, 0 or more";
	return *out == 0 ? zero : NULL;
}

/* One line: an object with timestamp, input_length, output_length and hash_ids (jansson;
 * other keys are ignored, as Mooncake's traces may carry more). */
static int parse_line(const char *text, const char *file, unsigned line, struct sb_treq *r,
		      char *err, unsigned errlen)
{
	json_error_t je;
	json_t *o = json_loads(text, JSON_REJECT_DUPLICATES, &je), *v, *id;
	const char *bad = NULL, *why = NULL;
	size_t i;

	if (o == NULL) {
		char what[256];

		snprintf(what, sizeof(what), "not JSON (column %d: %s)", je.column, je.text);
		return fail(file, line, NULL, what, err, errlen);
	}
	if (!json_is_object(o)) {
		json_decref(o);
		return fail(file, line, NULL, "expected a JSON object ('{')", err, errlen);
	}
	v = json_object_get(o, "timestamp");
	if (v == NULL)
		bad = "timestamp", why = "missing";
	else if (!json_is_number(v) || !isfinite(json_number_value(v)))
		bad = "timestamp", why = "expected a number (ms)";
	else if ((r->arrival_ms = json_number_value(v)) < 0)
		bad = "timestamp", why = "a negative time (ms)";
	if (bad == NULL &&
	    (why = tokens(o, "input_length", &r->input, "0: a request has a prompt")) != NULL)
		bad = "input_length";
	if (bad == NULL && (why = tokens(o, "output_length", &r->output,
					 "0: a request decodes at least one token")) != NULL)
		bad = "output_length";
	if (bad == NULL) {
		v = json_object_get(o, "hash_ids");
		if (v == NULL)
			bad = "hash_ids", why = "missing";
		else if (!json_is_array(v))
			bad = "hash_ids", why = "expected a list of block ids";
		r->n_hash = 0;
		if (bad == NULL)
			json_array_foreach(v, i, id)
			{
				uint32_t x;

				if (!whole(id, 4294967295.0, &x)) {
					bad = "hash_ids";
					why = "expected whole numbers 0 .. 2^32-1 (block ids)";
					break;
				}
				r->n_hash++;
			}
	}
	json_decref(o);
	return bad ? fail(file, line, bad, why, err, errlen) : 0;
}

int kvl_sb_trace_load(const char *path, const struct sb_trace_opts *o, struct sb_trace *t,
		      char *err, unsigned errlen)
{
	FILE *f = fopen(path, "r");
	char *line = NULL;
	size_t cap = 0;
	ssize_t n;
	unsigned lineno = 0;
	double first = -1;
	int rc = 0;

	memset(t, 0, sizeof(*t));
	if (f == NULL) {
		snprintf(err, errlen, "%s: %s", path, strerror(errno));
		return -errno;
	}
	while ((n = getline(&line, &cap, f)) >= 0) {
		struct sb_treq r = { 0 };

		lineno++;
		if (line[strspn(line, " \t\r\n")] == 0)
			continue; /* blank lines */
		if (o->max_requests && t->n == o->max_requests)
			break; /* lines past the ones asked for are not read */
		rc = parse_line(line, path, lineno, &r, err, errlen);
		if (rc < 0)
			break;
		if (first < 0)
			first = r.arrival_ms;
		if (r.arrival_ms < first) {
			rc = fail(path, lineno, "timestamp",
				  "earlier than the trace's first request", err, errlen);
			break;
		}
		r.arrival_ms = (r.arrival_ms - first) * o->time_scale;
		r.line = lineno;
		if (o->max_input && r.input > o->max_input) {
			r.input = o->max_input;
			t->clipped++;
		}
		if (t->n == t->cap) {
			unsigned nc = t->cap ? 2 * t->cap : 256;
			struct sb_treq *p = realloc(t->r, nc * sizeof(*p));

			if (p == NULL) {
				rc = -ENOMEM;
				snprintf(err, errlen, "%s: out of memory", path);
				break;
			}
			t->r = p;
			t->cap = nc;
		}
		t->r[t->n++] = r;
	}
	free(line);
	fclose(f);
	if (rc == 0 && t->n == 0) {
		snprintf(err, errlen, "%s: no requests", path);
		rc = -EINVAL;
	}
	return rc;
}

static double uni(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return ((double)(*s >> 11) + 0.5) / 9007199254740992.0;
}

int kvl_sb_trace_synth(const struct sb_synth *y, const struct sb_trace_opts *o, struct sb_trace *t)
{
	uint64_t s = y->seed * 0x9E3779B97F4A7C15ull + 1;
	double at = 0;
	unsigned n = o->max_requests ? o->max_requests : 64;

	memset(t, 0, sizeof(*t));
	t->r = calloc(n, sizeof(*t->r));
	if (t->r == NULL)
		return -ENOMEM;
	for (unsigned i = 0; i < n; i++) {
		struct sb_treq *r = &t->r[t->n++];
		double z = sqrt(-2 * log(uni(&s))) * cos(2 * M_PI * uni(&s));
		double in = y->input_median * exp(y->input_sigma * z);

		if (i)
			at += -log(uni(&s)) / y->rate * 1000.0;
		r->arrival_ms = at * o->time_scale;
		r->input = in < 16 ? 16 : (uint32_t)in;
		if (o->max_input && r->input > o->max_input) {
			r->input = o->max_input;
			t->clipped++;
		}
		r->output = y->output;
		r->n_hash = (r->input + 511) / 512;
		r->line = i + 1;
	}
	return 0;
}

int kvl_sb_trace_write(const char *path, const struct sb_trace *t)
{
	FILE *f = fopen(path, "w");
	uint64_t id = 0;

	if (f == NULL)
		return -errno;
	for (unsigned i = 0; i < t->n; i++) {
		fprintf(f,
			"{\"timestamp\": %.3f, \"input_length\": %u, \"output_length\": %u, "
			"\"hash_ids\": [",
			t->r[i].arrival_ms, t->r[i].input, t->r[i].output);
		for (uint32_t k = 0; k < t->r[i].n_hash; k++)
			fprintf(f, "%s%llu", k ? ", " : "", (unsigned long long)id++);
		fprintf(f, "]}\n");
	}
	return fclose(f) ? -errno : 0;
}
