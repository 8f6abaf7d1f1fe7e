/* SPDX-License-Identifier: BSD-3-Clause */
/* libFuzzer target for the control-protocol decoder: stream decoding plus a re-encode check. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctrl_proto.h"

/* Static: a message is ~7 KiB and the frame buffer 64 KiB. */
static struct kvl_ctrl_msg a, b;
static uint8_t frame[KVL_CTRL_HDR_LEN + KVL_CTRL_MAX_PAYLOAD];

#define FAIL(...)                                           \
	do {                                                \
		fprintf(stderr, "fuzz_ctrl: " __VA_ARGS__); \
		fputc('\n', stderr);                        \
		abort();                                    \
	} while (0)

static bool rc_ok(int rc)
{
	return rc == 1 || rc == 0 || (rc <= -1 && rc >= -(KVL_CTRL_E_COUNT - 1));
}

/*
 * What a peer sending only prefixes of these bytes could observe must agree with the whole:
 * a prefix asks for more or is refused, a refusal never turns into a frame later, and a frame
 * is never complete before its last byte.
 */
static void check_prefixes(const uint8_t *data, size_t size)
{
	size_t used, full_used;
	int full = kvl_ctrl_decode(data, size, &a, &full_used);

	for (size_t k = 0; k <= size && k <= 64; k++) {
		int rc = kvl_ctrl_decode(data, k, &b, &used);

		if (!rc_ok(rc))
			FAIL("prefix %zu: rc %d", k, rc);
		if (rc != 1 && used != 0)
			FAIL("prefix %zu: rc %d consumed %zu", k, rc, used);
		if (rc == 1 && (used > k || full != 1 || used != full_used))
			FAIL("prefix %zu: frame of %zu, whole buffer rc %d", k, used, full);
		if (rc < 0 && full != rc)
			FAIL("prefix %zu refused (%d), whole buffer %d", k, rc, full);
		if (full == 1 && k < full_used && rc != 0)
			FAIL("prefix %zu of a %zu-byte frame: rc %d", k, full_used, rc);
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	size_t off = 0;

	check_prefixes(data, size);

	while (off < size) {
		size_t used = 0, used2 = 0;
		int rc = kvl_ctrl_decode(data + off, size - off, &a, &used);
		int n;

		if (!rc_ok(rc))
			FAIL("rc %d at %zu", rc, off);
		if (rc != 1)
			break;
		if (used < KVL_CTRL_HDR_LEN || used > size - off)
			FAIL("consumed %zu of %zu", used, size - off);

		/* Differential: what decoded must encode, to the very same bytes (the format has
		 * one encoding per message), and decode again to the same message. */
		n = kvl_ctrl_encode(&a, frame, sizeof(frame));
		if (n < 0 || (size_t)n != used)
			FAIL("%s: re-encode gave %d, frame was %zu", kvl_ctrl_type_name(a.type), n,
			     used);
		if (memcmp(frame, data + off, used) != 0)
			FAIL("%s: re-encoded bytes differ", kvl_ctrl_type_name(a.type));
		if (kvl_ctrl_decode(frame, (size_t)n, &b, &used2) != 1 || used2 != (size_t)n)
			FAIL("%s: re-encoded frame does not decode", kvl_ctrl_type_name(a.type));
		if (memcmp(&a, &b, sizeof(a)) != 0)
			FAIL("%s: re-decoded message differs", kvl_ctrl_type_name(a.type));
		if (kvl_ctrl_encode(&a, frame, (size_t)n - 1) != -ENOSPC)
			FAIL("%s: encode into %d bytes did not say ENOSPC",
			     kvl_ctrl_type_name(a.type), n - 1);
		off += used;
	}
	return 0;
}
