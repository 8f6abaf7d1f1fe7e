/* SPDX-License-Identifier: BSD-3-Clause */
/* libFuzzer target for the INI configuration loader: messages name the file, printing reloads. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"

#define NAME "fuzz.ini"

/* Static: the config and the error list are tens of KiB. */
static struct kvl_config cfg, cfg2;
static struct kvl_conf_errors errs, errs2;

static void dump(const struct kvl_conf_errors *e)
{
	for (unsigned i = 0; i < e->count && i < KVL_CONF_MAX_ERRORS; i++)
		fprintf(stderr, "  [%u] %s\n", i, e->msg[i]);
}

#define FAIL(...)                                          \
	do {                                               \
		fprintf(stderr, "fuzz_ini: " __VA_ARGS__); \
		fputc('\n', stderr);                       \
		abort();                                   \
	} while (0)

/* The effective configuration as INI text (malloc'd), or NULL. */
static char *print(const struct kvl_config *c)
{
	char *out = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&out, &len);

	if (f == NULL)
		return NULL;
	if (kvl_config_print(f, c) != 0)
		FAIL("kvl_config_print failed");
	fclose(f);
	return out;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *text = malloc(size + 1);
	char *out, *out2;
	int rc;

	if (text == NULL)
		return 0;
	memcpy(text, data, size);
	text[size] = '\0';

	rc = kvl_config_load_string(NAME, text, &cfg, &errs);
	if (rc != 0 && rc != -EINVAL)
		FAIL("load returned %d", rc);
	if (rc != 0) {
		if (errs.count == 0)
			FAIL("-EINVAL without a message");
		for (unsigned i = 0; i < errs.count && i < KVL_CONF_MAX_ERRORS; i++)
			if (strncmp(errs.msg[i], NAME ":", strlen(NAME ":")) != 0) {
				dump(&errs);
				FAIL("message %u does not start with \"" NAME ":\"", i);
			}
		free(text);
		return 0;
	}

	/* What loads must print as INI that loads back, and prints the same again. */
	out = print(&cfg);
	if (out == NULL) {
		free(text);
		return 0;
	}
	rc = kvl_config_load_string(NAME, out, &cfg2, &errs2);
	if (rc != 0) {
		fprintf(stderr, "--- printed:\n%s---\n", out);
		dump(&errs2);
		FAIL("printed configuration does not load back: %d", rc);
	}
	out2 = print(&cfg2);
	if (out2 != NULL && strcmp(out, out2) != 0) {
		fprintf(stderr, "--- first:\n%s--- second:\n%s---\n", out, out2);
		FAIL("printing is not stable across a reload");
	}
	free(out2);
	free(out);
	free(text);
	return 0;
}
