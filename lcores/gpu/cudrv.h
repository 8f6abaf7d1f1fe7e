/* SPDX-License-Identifier: BSD-3-Clause */
/* The few CUDA driver calls kvlane needs, resolved through cudart so no binary links libcuda. */
#ifndef KVL_LCORES_CUDRV_H
#define KVL_LCORES_CUDRV_H

#include <stddef.h>

#include <cuda.h>

#ifdef __cplusplus
extern "C" { /* the benchmarks are CUDA C++ */
#endif

/*
 * Linking libcuda.so directly would make every binary fail to load on a host without the
 * driver (CI): it must start, see no GPU and skip. cudart loads the driver itself, and
 * cudaGetDriverEntryPointByVersion hands out its functions when there is one.
 */
struct kvl_cudrv {
	CUresult (*stream_wait_value32)(CUstream, CUdeviceptr, cuuint32_t, unsigned);
	CUresult (*stream_write_value32)(CUstream, CUdeviceptr, cuuint32_t, unsigned);
	CUresult (*mem_get_handle)(void *, CUdeviceptr, size_t, CUmemRangeHandleType,
				   unsigned long long);
	CUresult (*get_error_string)(CUresult, const char **);
	CUresult (*device_get_attribute)(int *, CUdevice_attribute, CUdevice);
	CUresult (*pointer_get_attribute)(void *, CUpointer_attribute, CUdeviceptr);
	/* unlike the above, answers for any address (defaults for one CUDA does not know) */
	CUresult (*pointer_get_attributes)(unsigned, CUpointer_attribute *, void **, CUdeviceptr);
	/* the host -> device copies of tcp's bounce buffers (h2d.c) */
	CUresult (*device_get)(CUdevice *, int);
	CUresult (*primary_ctx_retain)(CUcontext *, CUdevice);
	CUresult (*primary_ctx_release)(CUdevice);
	CUresult (*ctx_set_current)(CUcontext);
	CUresult (*ctx_get_current)(CUcontext *);
	CUresult (*stream_create)(CUstream *, unsigned);
	CUresult (*stream_destroy)(CUstream);
	CUresult (*stream_synchronize)(CUstream);
	CUresult (*event_create)(CUevent *, unsigned);
	CUresult (*event_destroy)(CUevent);
	CUresult (*event_record)(CUevent, CUstream);
	CUresult (*event_query)(CUevent);
	CUresult (*memcpy_htod_async)(CUdeviceptr, const void *, size_t, CUstream);
	/* CUDA IPC between processes of one host (runtime/ipc.c): optional, NULL when the
	 * driver lacks one (kvl_cudrv_ipc) */
	CUresult (*ipc_get_mem_handle)(CUipcMemHandle *, CUdeviceptr);
	CUresult (*ipc_open_mem_handle)(CUdeviceptr *, CUipcMemHandle, unsigned);
	CUresult (*ipc_close_mem_handle)(CUdeviceptr);
	CUresult (*mem_get_address_range)(CUdeviceptr *, size_t *, CUdeviceptr);
	CUresult (*device_get_uuid)(CUuuid *, CUdevice);
	CUresult (*device_get_count)(int *);
	CUresult (*device_can_access_peer)(int *, CUdevice, CUdevice);
};

/* Resolve them once (later calls return the same table). Returns NULL with a message naming
 * the cause (no driver, no device, a function the driver lacks). */
const struct kvl_cudrv *kvl_cudrv_get(char *err, size_t errlen);

/* NULL when every CUDA IPC call above resolved, else the name of the first that did not. */
const char *kvl_cudrv_ipc(const struct kvl_cudrv *d);

/* The driver's words for @r ("CUDA_ERROR_NOT_SUPPORTED: operation not supported"). */
const char *kvl_cudrv_strerror(CUresult r);

#ifdef __cplusplus
}
#endif

#endif /* KVL_LCORES_CUDRV_H */
