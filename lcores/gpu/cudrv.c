/* SPDX-License-Identifier: BSD-3-Clause */
/* CUDA driver entry points through cudart: no link-time dependency on libcuda. */
#include <errno.h>
#include <stddef.h>
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

/* CUDA IPC's calls: optional, so that a driver without one costs only the ipc transport
 * (kvl_cudrv_ipc says which is missing), never the paths above. */
static char ipc_missing[64];

static void resolve_ipc(void)
{
	static const struct {
		const char *sym;
		size_t off;
	} t[] = {
		{ "cuIpcGetMemHandle", offsetof(struct kvl_cudrv, ipc_get_mem_handle) },
		{ "cuIpcOpenMemHandle", offsetof(struct kvl_cudrv, ipc_open_mem_handle) },
		{ "cuIpcCloseMemHandle", offsetof(struct kvl_cudrv, ipc_close_mem_handle) },
		{ "cuMemGetAddressRange", offsetof(struct kvl_cudrv, mem_get_address_range) },
		{ "cuDeviceGetUuid", offsetof(struct kvl_cudrv, device_get_uuid) },
		{ "cuDeviceGetCount", offsetof(struct kvl_cudrv, device_get_count) },
		{ "cuDeviceCanAccessPeer", offsetof(struct kvl_cudrv, device_can_access_peer) },
	};

	for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
		enum cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
		void **fn = (void **)((char *)&drv + t[i].off);

		if (cudaGetDriverEntryPointByVersion(t[i].sym, fn, 12000, cudaEnableDefault, &q) !=
			    cudaSuccess ||
		    q != cudaDriverEntryPointSuccess || *fn == NULL) {
			*fn = NULL;
			cudaGetLastError();
			if (ipc_missing[0] == '\0')
				snprintf(ipc_missing, sizeof(ipc_missing), "%s", t[i].sym);
		}
	}
}

const char *kvl_cudrv_ipc(const struct kvl_cudrv *d)
{
	(void)d;
	return ipc_missing[0] ? ipc_missing : NULL;
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
			   resolve("cuMemcpyHtoDAsync", (void **)&drv.memcpy_htod_async)) {
			drv_state = -1;
		} else {
			drv_state = 1;
			resolve_ipc();
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
