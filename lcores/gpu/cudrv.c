/* SPDX-License-Identifier: BSD-3-Clause */
/* CUDA driver entry points through cudart: no link-time dependency on libcuda. */
#include <errno.h>
#include <stdio.h>

#include <cuda_runtime_api.h>

#include "cudrv.h"

static struct kvl_cudrv drv;
static int drv_state; /* 0 not tried, 1 ready, -1 failed (err_saved says why) */
static char err_saved[256];

static int resolve(const char *sym, void **fn)
{
	enum cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
	/* 12000: the CUDA 12 ABI of each call (cuStreamWaitValue32 is its _v2 there). */
	cudaError_t ce = cudaGetDriverEntryPointByVersion(sym, fn, 12000, cudaEnableDefault, &q);

	if (ce != cudaSuccess || q != cudaDriverEntryPointSuccess || *fn == NULL) {
		snprintf(err_saved, sizeof(err_saved),
			 "the CUDA driver does not provide %s (%s, query result %d)", sym,
			 ce != cudaSuccess ? cudaGetErrorString(ce) : "no error", (int)q);
		return -1;
	}
	return 0;
}

const struct kvl_cudrv *kvl_cudrv_get(char *err, size_t errlen)
{
	int n = 0;
	cudaError_t ce;

	if (drv_state == 0) {
		/* The runtime starts the driver on its first call; no device means no table. */
		ce = cudaGetDeviceCount(&n);
		if (ce != cudaSuccess || n == 0) {
			snprintf(err_saved, sizeof(err_saved), "no usable CUDA device (%s)",
				 ce != cudaSuccess ? cudaGetErrorString(ce) : "device count 0");
			drv_state = -1;
		} else if (resolve("cuStreamWaitValue32", (void **)&drv.stream_wait_value32) ||
			   resolve("cuStreamWriteValue32", (void **)&drv.stream_write_value32) ||
			   resolve("cuMemGetHandleForAddressRange", (void **)&drv.mem_get_handle) ||
			   resolve("cuGetErrorString", (void **)&drv.get_error_string) ||
			   resolve("cuDeviceGetAttribute", (void **)&drv.device_get_attribute) ||
			   resolve("cuPointerGetAttribute", (void **)&drv.pointer_get_attribute) ||
			   resolve("cuPointerGetAttributes",
				   (void **)&drv.pointer_get_attributes) ||
			   resolve("cuDeviceGet", (void **)&drv.device_get) ||
			   resolve("cuDevicePrimaryCtxRetain", (void **)&drv.primary_ctx_retain) ||
			   resolve("cuDevicePrimaryCtxRelease",
				   (void **)&drv.primary_ctx_release) ||
			   resolve("cuCtxSetCurrent", (void **)&drv.ctx_set_current) ||
			   resolve("cuCtxGetCurrent", (void **)&drv.ctx_get_current) ||
			   resolve("cuStreamCreate", (void **)&drv.stream_create) ||
			   resolve("cuStreamDestroy", (void **)&drv.stream_destroy) ||
			   resolve("cuStreamSynchronize", (void **)&drv.stream_synchronize) ||
			   resolve("cuEventCreate", (void **)&drv.event_create) ||
			   resolve("cuEventDestroy", (void **)&drv.event_destroy) ||
			   resolve("cuEventRecord", (void **)&drv.event_record) ||
			   resolve("cuEventQuery", (void **)&drv.event_query) ||
			   resolve("cuMemcpyHtoDAsync", (void **)&drv.memcpy_htod_async) ||
			   resolve("cuIpcGetMemHandle", (void **)&drv.ipc_get_mem_handle) ||
			   resolve("cuIpcOpenMemHandle", (void **)&drv.ipc_open_mem_handle) ||
			   resolve("cuIpcCloseMemHandle", (void **)&drv.ipc_close_mem_handle) ||
			   resolve("cuMemGetAddressRange", (void **)&drv.mem_get_address_range) ||
			   resolve("cuDeviceGetUuid", (void **)&drv.device_get_uuid) ||
			   resolve("cuDeviceGetCount", (void **)&drv.device_get_count) ||
			   resolve("cuDeviceCanAccessPeer", (void **)&drv.device_can_access_peer) ||
			   resolve("cuMemcpyDtoDAsync", (void **)&drv.memcpy_dtod_async)) {
			drv_state = -1;
		} else {
			drv_state = 1;
		}
	}
	if (drv_state < 0) {
		if (err != NULL && errlen > 0)
			snprintf(err, errlen, "%s", err_saved);
		errno = ENODEV;
		return NULL;
	}
	return &drv;
}

const char *kvl_cudrv_strerror(CUresult r)
{
	const char *s = NULL;

	if (drv_state == 1 && drv.get_error_string(r, &s) == CUDA_SUCCESS && s != NULL)
		return s;
	return "unknown CUDA driver error";
}
