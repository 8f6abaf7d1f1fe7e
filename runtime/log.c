/* SPDX-License-Identifier: BSD-3-Clause */
/* Registers the runtime's log type before main(), as DPDK's own libraries do. */
#include "log.h"

RTE_LOG_REGISTER(kvl_logtype_runtime, kvlane.runtime, INFO);
