/*
 * One static inline trampoline per driver function: it takes the pointer
 * that dlsym returned and calls it with the real signature. Go never calls a
 * CUDA symbol by name (see cutypes.h for why).
 *
 * Handles (CUcontext, CUstream, ...) cross into Go as uintptr_t, converted
 * here in C, so that Go holds them as plain integers: no unsafe.Pointer
 * arithmetic on the Go side, and fakes in other packages can mint handles.
 */
#ifndef TPRUN_TRAMPOLINES_H
#define TPRUN_TRAMPOLINES_H

#include <stdint.h>
#include <stddef.h>
#include <string.h>
#include "cutypes.h"

#define TP_FN(ret, ...) ((ret (*)(__VA_ARGS__))fn)

/* ---- errors, init, version ------------------------------------------- */

static inline CUresult tp_cuGetErrorName(void *fn, CUresult e, const char **s) {
    return TP_FN(CUresult, CUresult, const char **)(e, s);
}
static inline CUresult tp_cuGetErrorString(void *fn, CUresult e, const char **s) {
    return TP_FN(CUresult, CUresult, const char **)(e, s);
}
static inline CUresult tp_cuInit(void *fn, unsigned int flags) {
    return TP_FN(CUresult, unsigned int)(flags);
}
static inline CUresult tp_cuDriverGetVersion(void *fn, int *v) {
    return TP_FN(CUresult, int *)(v);
}

/* ---- devices ---------------------------------------------------------- */

static inline CUresult tp_cuDeviceGetCount(void *fn, int *n) {
    return TP_FN(CUresult, int *)(n);
}
static inline CUresult tp_cuDeviceGet(void *fn, CUdevice *d, int ordinal) {
    return TP_FN(CUresult, CUdevice *, int)(d, ordinal);
}
static inline CUresult tp_cuDeviceGetAttribute(void *fn, int *v, int attr, CUdevice d) {
    return TP_FN(CUresult, int *, CUdevice_attribute, CUdevice)(v, (CUdevice_attribute)attr, d);
}
static inline CUresult tp_cuDeviceGetName(void *fn, char *name, int len, CUdevice d) {
    return TP_FN(CUresult, char *, int, CUdevice)(name, len, d);
}
static inline CUresult tp_cuDeviceGetPCIBusId(void *fn, char *id, int len, CUdevice d) {
    return TP_FN(CUresult, char *, int, CUdevice)(id, len, d);
}
static inline CUresult tp_cuDeviceGetUuid_v2(void *fn, CUuuid *u, CUdevice d) {
    return TP_FN(CUresult, CUuuid *, CUdevice)(u, d);
}
static inline CUresult tp_cuDeviceTotalMem_v2(void *fn, size_t *bytes, CUdevice d) {
    return TP_FN(CUresult, size_t *, CUdevice)(bytes, d);
}
static inline CUresult tp_cuDeviceCanAccessPeer(void *fn, int *can, CUdevice d, CUdevice peer) {
    return TP_FN(CUresult, int *, CUdevice, CUdevice)(can, d, peer);
}

/* ---- contexts --------------------------------------------------------- */

static inline CUresult tp_cuDevicePrimaryCtxRetain(void *fn, uintptr_t *ctx, CUdevice d) {
    CUcontext c = NULL;
    CUresult r = TP_FN(CUresult, CUcontext *, CUdevice)(&c, d);
    *ctx = (uintptr_t)c;
    return r;
}
static inline CUresult tp_cuDevicePrimaryCtxRelease_v2(void *fn, CUdevice d) {
    return TP_FN(CUresult, CUdevice)(d);
}
static inline CUresult tp_cuCtxSetCurrent(void *fn, uintptr_t ctx) {
    return TP_FN(CUresult, CUcontext)((CUcontext)ctx);
}
static inline CUresult tp_cuCtxGetCurrent(void *fn, uintptr_t *ctx) {
    CUcontext c = NULL;
    CUresult r = TP_FN(CUresult, CUcontext *)(&c);
    *ctx = (uintptr_t)c;
    return r;
}
static inline CUresult tp_cuCtxSynchronize(void *fn) {
    return TP_FN(CUresult, void)();
}

/* ---- streams and events ----------------------------------------------- */

static inline CUresult tp_cuStreamCreate(void *fn, uintptr_t *s, unsigned int flags) {
    CUstream h = NULL;
    CUresult r = TP_FN(CUresult, CUstream *, unsigned int)(&h, flags);
    *s = (uintptr_t)h;
    return r;
}
static inline CUresult tp_cuStreamDestroy_v2(void *fn, uintptr_t s) {
    return TP_FN(CUresult, CUstream)((CUstream)s);
}
static inline CUresult tp_cuStreamSynchronize(void *fn, uintptr_t s) {
    return TP_FN(CUresult, CUstream)((CUstream)s);
}
static inline CUresult tp_cuStreamWaitEvent(void *fn, uintptr_t s, uintptr_t e, unsigned int flags) {
    return TP_FN(CUresult, CUstream, CUevent, unsigned int)((CUstream)s, (CUevent)e, flags);
}
static inline CUresult tp_cuEventCreate(void *fn, uintptr_t *e, unsigned int flags) {
    CUevent h = NULL;
    CUresult r = TP_FN(CUresult, CUevent *, unsigned int)(&h, flags);
    *e = (uintptr_t)h;
    return r;
}
static inline CUresult tp_cuEventDestroy_v2(void *fn, uintptr_t e) {
    return TP_FN(CUresult, CUevent)((CUevent)e);
}
static inline CUresult tp_cuEventRecord(void *fn, uintptr_t e, uintptr_t s) {
    return TP_FN(CUresult, CUevent, CUstream)((CUevent)e, (CUstream)s);
}
static inline CUresult tp_cuEventSynchronize(void *fn, uintptr_t e) {
    return TP_FN(CUresult, CUevent)((CUevent)e);
}
static inline CUresult tp_cuEventElapsedTime(void *fn, float *ms, uintptr_t start, uintptr_t end) {
    return TP_FN(CUresult, float *, CUevent, CUevent)(ms, (CUevent)start, (CUevent)end);
}

/* ---- memory ----------------------------------------------------------- */

static inline CUresult tp_cuMemGetInfo_v2(void *fn, size_t *free_, size_t *total) {
    return TP_FN(CUresult, size_t *, size_t *)(free_, total);
}
static inline CUresult tp_cuMemAlloc_v2(void *fn, CUdeviceptr *p, size_t n) {
    return TP_FN(CUresult, CUdeviceptr *, size_t)(p, n);
}
static inline CUresult tp_cuMemFree_v2(void *fn, CUdeviceptr p) {
    return TP_FN(CUresult, CUdeviceptr)(p);
}
static inline CUresult tp_cuMemHostAlloc(void *fn, void **p, size_t n, unsigned int flags) {
    return TP_FN(CUresult, void **, size_t, unsigned int)(p, n, flags);
}
static inline CUresult tp_cuMemFreeHost(void *fn, void *p) {
    return TP_FN(CUresult, void *)(p);
}
static inline CUresult tp_cuMemHostGetDevicePointer_v2(void *fn, CUdeviceptr *d, void *p, unsigned int flags) {
    return TP_FN(CUresult, CUdeviceptr *, void *, unsigned int)(d, p, flags);
}
static inline CUresult tp_cuMemcpyHtoD_v2(void *fn, CUdeviceptr dst, const void *src, size_t n) {
    return TP_FN(CUresult, CUdeviceptr, const void *, size_t)(dst, src, n);
}
static inline CUresult tp_cuMemcpyDtoH_v2(void *fn, void *dst, CUdeviceptr src, size_t n) {
    return TP_FN(CUresult, void *, CUdeviceptr, size_t)(dst, src, n);
}
static inline CUresult tp_cuMemcpyDtoD_v2(void *fn, CUdeviceptr dst, CUdeviceptr src, size_t n) {
    return TP_FN(CUresult, CUdeviceptr, CUdeviceptr, size_t)(dst, src, n);
}
static inline CUresult tp_cuMemcpyDtoDAsync_v2(void *fn, CUdeviceptr dst, CUdeviceptr src, size_t n, uintptr_t s) {
    return TP_FN(CUresult, CUdeviceptr, CUdeviceptr, size_t, CUstream)(dst, src, n, (CUstream)s);
}
static inline CUresult tp_cuMemsetD8_v2(void *fn, CUdeviceptr p, unsigned char v, size_t n) {
    return TP_FN(CUresult, CUdeviceptr, unsigned char, size_t)(p, v, n);
}
static inline CUresult tp_cuMemsetD32_v2(void *fn, CUdeviceptr p, unsigned int v, size_t n) {
    return TP_FN(CUresult, CUdeviceptr, unsigned int, size_t)(p, v, n);
}
static inline CUresult tp_cuMemsetD8Async(void *fn, CUdeviceptr p, unsigned char v, size_t n, uintptr_t s) {
    return TP_FN(CUresult, CUdeviceptr, unsigned char, size_t, CUstream)(p, v, n, (CUstream)s);
}
static inline CUresult tp_cuMemsetD32Async(void *fn, CUdeviceptr p, unsigned int v, size_t n, uintptr_t s) {
    return TP_FN(CUresult, CUdeviceptr, unsigned int, size_t, CUstream)(p, v, n, (CUstream)s);
}

/* ---- modules, functions, launch --------------------------------------- */

static inline CUresult tp_cuModuleLoadData(void *fn, uintptr_t *m, const void *image) {
    CUmodule h = NULL;
    CUresult r = TP_FN(CUresult, CUmodule *, const void *)(&h, image);
    *m = (uintptr_t)h;
    return r;
}
static inline CUresult tp_cuModuleUnload(void *fn, uintptr_t m) {
    return TP_FN(CUresult, CUmodule)((CUmodule)m);
}
static inline CUresult tp_cuModuleGetFunction(void *fn, uintptr_t *f, uintptr_t m, const char *name) {
    CUfunction h = NULL;
    CUresult r = TP_FN(CUresult, CUfunction *, CUmodule, const char *)(&h, (CUmodule)m, name);
    *f = (uintptr_t)h;
    return r;
}
static inline CUresult tp_cuFuncSetAttribute(void *fn, uintptr_t f, int attr, int v) {
    return TP_FN(CUresult, CUfunction, CUfunction_attribute, int)((CUfunction)f, (CUfunction_attribute)attr, v);
}
static inline CUresult tp_cuFuncGetAttribute(void *fn, int *v, int attr, uintptr_t f) {
    return TP_FN(CUresult, int *, CUfunction_attribute, CUfunction)(v, (CUfunction_attribute)attr, (CUfunction)f);
}

/* Scalars of one launch, filled by Go (no pointers inside, so Go may pass
 * its address). The CUlaunchConfig and its attributes are built here on the
 * C stack, which keeps cgo's pointer rules trivially satisfied. */
typedef struct tp_launch {
    unsigned int grid[3];
    unsigned int block[3];
    unsigned int sharedMem;
    int programmatic;        /* CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION */
    unsigned int cluster[3]; /* CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION when x != 0 */
    int clusterPolicy;       /* CU_LAUNCH_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE when != 0 */
    int carveout;            /* CU_LAUNCH_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT (percent) when >= 0 */
    uintptr_t stream;
} tp_launch;

#define TP_MAX_KERNEL_PARAMS 256

/* blob holds the parameter values (C memory); offsets[i] is where param i
 * starts in it. */
static inline CUresult tp_cuLaunchKernelEx(void *fn, const tp_launch *l, uintptr_t f,
                                           void *blob, const uint32_t *offsets, unsigned int n) {
    CUlaunchAttribute attrs[4];
    unsigned int na = 0;
    void *kp[TP_MAX_KERNEL_PARAMS];
    CUlaunchConfig cfg;
    unsigned int i;

    if (n > TP_MAX_KERNEL_PARAMS) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    for (i = 0; i < n; i++) {
        kp[i] = (char *)blob + offsets[i];
    }
    memset(attrs, 0, sizeof(attrs));
    if (l->programmatic) {
        attrs[na].id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
        attrs[na].value.programmaticStreamSerializationAllowed = 1;
        na++;
    }
    if (l->cluster[0] != 0) {
        attrs[na].id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
        attrs[na].value.clusterDim.x = l->cluster[0];
        attrs[na].value.clusterDim.y = l->cluster[1];
        attrs[na].value.clusterDim.z = l->cluster[2];
        na++;
    }
    if (l->clusterPolicy != 0) {
        attrs[na].id = CU_LAUNCH_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE;
        attrs[na].value.clusterSchedulingPolicyPreference = (CUclusterSchedulingPolicy)l->clusterPolicy;
        na++;
    }
    if (l->carveout >= 0) {
        attrs[na].id = CU_LAUNCH_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT;
        attrs[na].value.sharedMemCarveout = (unsigned int)l->carveout;
        na++;
    }
    cfg.gridDimX = l->grid[0];
    cfg.gridDimY = l->grid[1];
    cfg.gridDimZ = l->grid[2];
    cfg.blockDimX = l->block[0];
    cfg.blockDimY = l->block[1];
    cfg.blockDimZ = l->block[2];
    cfg.sharedMemBytes = l->sharedMem;
    cfg.hStream = (CUstream)l->stream;
    cfg.attrs = na ? attrs : NULL;
    cfg.numAttrs = na;
    return TP_FN(CUresult, const CUlaunchConfig *, CUfunction, void **, void **)(
        &cfg, (CUfunction)f, n ? kp : NULL, NULL);
}

/* ---- stream capture and graphs ---------------------------------------- */

static inline CUresult tp_cuStreamBeginCapture_v2(void *fn, uintptr_t s, int mode) {
    return TP_FN(CUresult, CUstream, CUstreamCaptureMode)((CUstream)s, (CUstreamCaptureMode)mode);
}
static inline CUresult tp_cuStreamEndCapture(void *fn, uintptr_t s, uintptr_t *g) {
    CUgraph h = NULL;
    CUresult r = TP_FN(CUresult, CUstream, CUgraph *)((CUstream)s, &h);
    *g = (uintptr_t)h;
    return r;
}
static inline CUresult tp_cuGraphInstantiateWithFlags(void *fn, uintptr_t *e, uintptr_t g, unsigned long long flags) {
    CUgraphExec h = NULL;
    CUresult r = TP_FN(CUresult, CUgraphExec *, CUgraph, unsigned long long)(&h, (CUgraph)g, flags);
    *e = (uintptr_t)h;
    return r;
}
static inline CUresult tp_cuGraphUpload(void *fn, uintptr_t e, uintptr_t s) {
    return TP_FN(CUresult, CUgraphExec, CUstream)((CUgraphExec)e, (CUstream)s);
}
static inline CUresult tp_cuGraphLaunch(void *fn, uintptr_t e, uintptr_t s) {
    return TP_FN(CUresult, CUgraphExec, CUstream)((CUgraphExec)e, (CUstream)s);
}
static inline CUresult tp_cuGraphExecDestroy(void *fn, uintptr_t e) {
    return TP_FN(CUresult, CUgraphExec)((CUgraphExec)e);
}
static inline CUresult tp_cuGraphDestroy(void *fn, uintptr_t g) {
    return TP_FN(CUresult, CUgraph)((CUgraph)g);
}
static inline CUresult tp_cuGraphDebugDotPrint(void *fn, uintptr_t g, const char *path, unsigned int flags) {
    return TP_FN(CUresult, CUgraph, const char *, unsigned int)((CUgraph)g, path, flags);
}

/* ---- virtual memory management ---------------------------------------- */

static inline CUresult tp_cuMemCreate(void *fn, CUmemGenericAllocationHandle *h, size_t size,
                                      const CUmemAllocationProp *prop, unsigned long long flags) {
    return TP_FN(CUresult, CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *,
                 unsigned long long)(h, size, prop, flags);
}
static inline CUresult tp_cuMemRelease(void *fn, CUmemGenericAllocationHandle h) {
    return TP_FN(CUresult, CUmemGenericAllocationHandle)(h);
}
/* POSIX FD export: the driver writes an int. */
static inline CUresult tp_cuMemExportToShareableHandle_fd(void *fn, int *fd, CUmemGenericAllocationHandle h) {
    return TP_FN(CUresult, void *, CUmemGenericAllocationHandle, CUmemAllocationHandleType,
                 unsigned long long)(fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
}
/* FABRIC export: the driver writes a CUmemFabricHandle. */
static inline CUresult tp_cuMemExportToShareableHandle_fabric(void *fn, CUmemFabricHandle *fh,
                                                              CUmemGenericAllocationHandle h) {
    return TP_FN(CUresult, void *, CUmemGenericAllocationHandle, CUmemAllocationHandleType,
                 unsigned long long)(fh, h, CU_MEM_HANDLE_TYPE_FABRIC, 0);
}
/* POSIX FD import: the fd itself travels in the void* argument. */
static inline CUresult tp_cuMemImportFromShareableHandle_fd(void *fn, CUmemGenericAllocationHandle *h, int fd) {
    return TP_FN(CUresult, CUmemGenericAllocationHandle *, void *, CUmemAllocationHandleType)(
        h, (void *)(uintptr_t)fd, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
}
/* FABRIC import: the argument points at the handle bytes. */
static inline CUresult tp_cuMemImportFromShareableHandle_fabric(void *fn, CUmemGenericAllocationHandle *h,
                                                                CUmemFabricHandle *fh) {
    return TP_FN(CUresult, CUmemGenericAllocationHandle *, void *, CUmemAllocationHandleType)(
        h, (void *)fh, CU_MEM_HANDLE_TYPE_FABRIC);
}
static inline CUresult tp_cuMemAddressReserve(void *fn, CUdeviceptr *p, size_t size, size_t align,
                                              CUdeviceptr addr, unsigned long long flags) {
    return TP_FN(CUresult, CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long)(
        p, size, align, addr, flags);
}
static inline CUresult tp_cuMemAddressFree(void *fn, CUdeviceptr p, size_t size) {
    return TP_FN(CUresult, CUdeviceptr, size_t)(p, size);
}
static inline CUresult tp_cuMemMap(void *fn, CUdeviceptr p, size_t size, size_t offset,
                                   CUmemGenericAllocationHandle h, unsigned long long flags) {
    return TP_FN(CUresult, CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle,
                 unsigned long long)(p, size, offset, h, flags);
}
static inline CUresult tp_cuMemUnmap(void *fn, CUdeviceptr p, size_t size) {
    return TP_FN(CUresult, CUdeviceptr, size_t)(p, size);
}
static inline CUresult tp_cuMemSetAccess(void *fn, CUdeviceptr p, size_t size,
                                         const CUmemAccessDesc *desc, size_t count) {
    return TP_FN(CUresult, CUdeviceptr, size_t, const CUmemAccessDesc *, size_t)(p, size, desc, count);
}
static inline CUresult tp_cuMemGetAllocationGranularity(void *fn, size_t *g, const CUmemAllocationProp *prop,
                                                        int option) {
    return TP_FN(CUresult, size_t *, const CUmemAllocationProp *, CUmemAllocationGranularity_flags)(
        g, prop, (CUmemAllocationGranularity_flags)option);
}

/* ---- multicast (CUDA 12.1+, optional) --------------------------------- */

static inline CUresult tp_cuMulticastCreate(void *fn, CUmemGenericAllocationHandle *h,
                                            const CUmulticastObjectProp *prop) {
    return TP_FN(CUresult, CUmemGenericAllocationHandle *, const CUmulticastObjectProp *)(h, prop);
}
static inline CUresult tp_cuMulticastAddDevice(void *fn, CUmemGenericAllocationHandle h, CUdevice d) {
    return TP_FN(CUresult, CUmemGenericAllocationHandle, CUdevice)(h, d);
}
static inline CUresult tp_cuMulticastBindMem(void *fn, CUmemGenericAllocationHandle mc, size_t mcOffset,
                                             CUmemGenericAllocationHandle mem, size_t memOffset,
                                             size_t size, unsigned long long flags) {
    return TP_FN(CUresult, CUmemGenericAllocationHandle, size_t, CUmemGenericAllocationHandle, size_t,
                 size_t, unsigned long long)(mc, mcOffset, mem, memOffset, size, flags);
}
static inline CUresult tp_cuMulticastUnbind(void *fn, CUmemGenericAllocationHandle mc, CUdevice d,
                                            size_t mcOffset, size_t size) {
    return TP_FN(CUresult, CUmemGenericAllocationHandle, CUdevice, size_t, size_t)(mc, d, mcOffset, size);
}
static inline CUresult tp_cuMulticastGetGranularity(void *fn, size_t *g, const CUmulticastObjectProp *prop,
                                                    int option) {
    return TP_FN(CUresult, size_t *, const CUmulticastObjectProp *, CUmulticastGranularity_flags)(
        g, prop, (CUmulticastGranularity_flags)option);
}

#endif /* TPRUN_TRAMPOLINES_H */
