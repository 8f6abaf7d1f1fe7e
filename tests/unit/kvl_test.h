/* SPDX-License-Identifier: BSD-3-Clause */
/* A minimal assertion kit for kvlane's unit tests: count failures, report them, go on. */
#ifndef KVL_TEST_H
#define KVL_TEST_H

#include <stdint.h>
#include <stdio.h>
#include <string.h>

static int kvl_test_failures;
static int kvl_test_checks;

#define CHECK(cond)                                                                              \
	do {                                                                                     \
		kvl_test_checks++;                                                               \
		if (!(cond)) {                                                                   \
			kvl_test_failures++;                                                     \
			fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
		}                                                                                \
	} while (0)

#define CHECK_INT(a, b)                                                                       \
	do {                                                                                  \
		long long a_ = (long long)(a), b_ = (long long)(b);                           \
		kvl_test_checks++;                                                            \
		if (a_ != b_) {                                                               \
			kvl_test_failures++;                                                  \
			fprintf(stderr,                                                       \
				"%s:%d: CHECK_INT failed: %s == %lld, expected %s == %lld\n", \
				__FILE__, __LINE__, #a, a_, #b, b_);                          \
		}                                                                             \
	} while (0)

#define CHECK_STR(a, b)                                                                            \
	do {                                                                                       \
		const char *a_ = (a), *b_ = (b);                                                   \
		kvl_test_checks++;                                                                 \
		if (a_ == NULL || b_ == NULL || strcmp(a_, b_) != 0) {                             \
			kvl_test_failures++;                                                       \
			fprintf(stderr, "%s:%d: CHECK_STR failed: %s = \"%s\", expected \"%s\"\n", \
				__FILE__, __LINE__, #a, a_ ? a_ : "(null)", b_ ? b_ : "(null)");   \
		}                                                                                  \
	} while (0)

/* @hay contains @needle */
#define CHECK_HAS(hay, needle)                                                             \
	do {                                                                               \
		const char *h_ = (hay), *n_ = (needle);                                    \
		kvl_test_checks++;                                                         \
		if (h_ == NULL || strstr(h_, n_) == NULL) {                                \
			kvl_test_failures++;                                               \
			fprintf(stderr, "%s:%d: CHECK_HAS failed: \"%s\" not in \"%s\"\n", \
				__FILE__, __LINE__, n_, h_ ? h_ : "(null)");               \
		}                                                                          \
	} while (0)

/* Fill @n bytes with xorshift data: a fixed sequence, so a failure reproduces. */
static uint64_t kvl_test_rng = 0x9e3779b97f4a7c15ull;

static inline void kvl_test_fill_random(uint8_t *p, size_t n)
{
	size_t i = 0;

	for (; i + 8 <= n; i += 8) {
		kvl_test_rng ^= kvl_test_rng << 13;
		kvl_test_rng ^= kvl_test_rng >> 7;
		kvl_test_rng ^= kvl_test_rng << 17;
		memcpy(p + i, &kvl_test_rng, 8);
	}
	for (; i < n; i++)
		p[i] = (uint8_t)(kvl_test_rng >> (i % 8 * 8)) ^ (uint8_t)i;
}

/* Print a summary and give main()'s exit status. */
static inline int kvl_test_done(const char *name)
{
	printf("%s: %d checks, %d failed\n", name, kvl_test_checks, kvl_test_failures);
	return kvl_test_failures ? 1 : 0;
}

#endif /* KVL_TEST_H */
