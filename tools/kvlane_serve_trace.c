/* SPDX-License-Identifier: BSD-3-Clause */
/* kvlane-serve-bench's workload: Mooncake-style JSON-lines traces, and synthetic ones. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvlane_serve_trace.h"

struct cur {
	const char *p;
	const char *file;
	unsigned line;
	char *err;
	unsigned errlen;
};

static void ws(struct cur *c)
{
	while (*c->p == ' ' || *c->p == '\t' || *c->p == '\r')
		c->p++;
}

static int fail(struct cur *c, const char *field, const char *what)
{
	if (field)
		snprintf(c->err, c->errlen, "%s:%u: field '%s': %s", c->file, c->line, field, what);
	else
		snprintf(c->err, c->errlen, "%s:%u: %s", c->file, c->line, what);
	return -EINVAL;
}

static int number(struct cur *c, const char *field, double *v)
{
	char *end;

	ws(c);
	if (!(*c->p == '-' || (*c->p >= '0' && *c->p <= '9')))
		return fail(c, field, "expected a number");
	*v = strtod(c->p, &end);
	if (end == c->p || !isfinite(*v))
		return fail(c, field, "expected a finite number");
	c->p = end;
	return 0;
}

static int string(struct cur *c, char *out, size_t len)
{
	size_t n = 0;

	ws(c);
	if (*c->p != '"')
		return fail(c, NULL, "expected a string");
	c->p++;
	while (*c->p && *c->p != '"') {
		if (*c->p == '\\' && c->p[1])
			c->p++;
		if (out && n + 1 < len)
			out[n++] = *c->p;
		c->p++;
	}
	if (*c->p != '"')
		return fail(c, NULL, "unterminated string");
	c->p++;
	if (out)
		out[n] = 0;
	return 0;
}

/* Any value, skipped (a field this tool does not read). */
static int skip(struct cur *c, unsigned depth)
{
	double d;

	ws(c);
	if (depth > 32)
		return fail(c, NULL, "nested too deep");
	if (*c->p == '"')
		return string(c, NULL, 0);
	if (*c->p == '{' || *c->p == '[') {
		char close = *c->p == '{' ? '}' : ']';

		c->p++;
		ws(c);
		if (*c->p == close) {
			c->p++;
			return 0;
		}
		for (;;) {
			if (close == '}') {
				if (string(c, NULL, 0) < 0)
					return -EINVAL;
				ws(c);
				if (*c->p++ != ':')
					return fail(c, NULL, "expected ':'");
			}
			if (skip(c, depth + 1) < 0)
				return -EINVAL;
			ws(c);
			if (*c->p == ',') {
				c->p++;
				continue;
			}
			if (*c->p++ != close)
				return fail(c, NULL, "expected ',' or the end of a list/object");
			return 0;
		}
	}
	if (!strncmp(c->p, "true", 4) || !strncmp(c->p, "null", 4)) {
		c->p += 4;
		return 0;
	}
	if (!strncmp(c->p, "false", 5)) {
		c->p += 5;
		return 0;
	}
	return number(c, NULL, &d);
}

static int count(struct cur *c, const char *field, double max, uint32_t *out)
{
	double v;

	if (number(c, field, &v) < 0)
		return -EINVAL;
	if (v < 0 || v != floor(v) || v > max)
		return fail(c, field, "expected a whole number of tokens, 0 or more");
	*out = (uint32_t)v;
	return 0;
}

/* One line: an object with timestamp, input_length, output_length and hash_ids. */
static int parse_line(struct cur *c, struct sb_treq *r)
{
	enum { F_TS = 1, F_IN = 2, F_OUT = 4, F_HASH = 8 };
	unsigned seen = 0;
	char key[64];

	ws(c);
	if (*c->p++ != '{')
		return fail(c, NULL, "expected a JSON object ('{')");
	ws(c);
	if (*c->p == '}')
		c->p++;
	else
		for (;;) {
			if (string(c, key, sizeof(key)) < 0)
				return -EINVAL;
			ws(c);
			if (*c->p++ != ':')
				return fail(c, key, "expected ':' after the key");
			if (!strcmp(key, "timestamp")) {
				if (number(c, key, &r->arrival_ms) < 0)
					return -EINVAL;
				if (r->arrival_ms < 0)
					return fail(c, key, "a negative time (ms)");
				seen |= F_TS;
			} else if (!strcmp(key, "input_length")) {
				if (count(c, key, 1e9, &r->input) < 0)
					return -EINVAL;
				seen |= F_IN;
			} else if (!strcmp(key, "output_length")) {
				if (count(c, key, 1e9, &r->output) < 0)
					return -EINVAL;
				seen |= F_OUT;
			} else if (!strcmp(key, "hash_ids")) {
				ws(c);
				if (*c->p++ != '[')
					return fail(c, key, "expected a list of block ids");
				r->n_hash = 0;
				ws(c);
				if (*c->p == ']')
					c->p++;
				else
					for (;;) {
						uint32_t id;

						if (count(c, key, 4294967295.0, &id) < 0)
							return -EINVAL;
						r->n_hash++;
						ws(c);
						if (*c->p == ',') {
							c->p++;
							continue;
						}
						if (*c->p++ != ']')
							return fail(c, key, "expected ',' or ']'");
						break;
					}
				seen |= F_HASH;
			} else if (skip(c, 0) < 0) {
				return -EINVAL;
			}
			ws(c);
			if (*c->p == ',') {
				c->p++;
				continue;
			}
			if (*c->p++ != '}')
				return fail(c, NULL, "expected ',' or '}'");
			break;
		}
	ws(c);
	if (*c->p && *c->p != '\n')
		return fail(c, NULL, "text after the object");
	if (!(seen & F_TS))
		return fail(c, "timestamp", "missing");
	if (!(seen & F_IN))
		return fail(c, "input_length", "missing");
	if (!(seen & F_OUT))
		return fail(c, "output_length", "missing");
	if (!(seen & F_HASH))
		return fail(c, "hash_ids", "missing");
	if (r->output == 0)
		return fail(c, "output_length", "0: a request decodes at least one token");
	if (r->input == 0)
		return fail(c, "input_length", "0: a request has a prompt");
	return 0;
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
		struct cur c = { line, path, ++lineno, err, errlen };
		struct sb_treq r = { 0 };

		ws(&c);
		if (*c.p == '\n' || *c.p == 0)
			continue; /* blank lines */
		if (o->max_requests && t->n == o->max_requests)
			break; /* lines past the ones asked for are not read */
		rc = parse_line(&c, &r);
		if (rc < 0)
			break;
		if (first < 0)
			first = r.arrival_ms;
		if (r.arrival_ms < first) {
			rc = fail(&c, "timestamp", "earlier than the trace's first request");
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
