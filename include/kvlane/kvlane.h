/* SPDX-License-Identifier: BSD-3-Clause */
/* kvlane public C API: the only header an inference engine includes. */
#ifndef KVLANE_H
#define KVLANE_H

#ifdef __cplusplus
extern "C" {
#endif

/*
 * So far kvlane runs as the kvlaned daemon only. The embedding API (start the runtime in
 * process from EAL arguments and an INI file, register KV segments, connect peers, post block
 * transfers, poll completions) is added here with the TCP data path; nothing below is a
 * placeholder for it.
 */

#define KVLANE_VERSION_MAJOR 0
#define KVLANE_VERSION_MINOR 1
#define KVLANE_VERSION_PATCH 0

/* Encoded as (major << 16) | (minor << 8) | patch, for compile-time checks. */
#define KVLANE_VERSION_NUM \
	((KVLANE_VERSION_MAJOR << 16) | (KVLANE_VERSION_MINOR << 8) | KVLANE_VERSION_PATCH)

#ifdef __cplusplus
}
#endif

#endif /* KVLANE_H */
