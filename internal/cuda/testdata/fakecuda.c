/*
 * A fake libcuda for the CPU tests: built by fake_test.go with gcc into a
 * shared object and opened with OpenLibrary. It exercises what the real
 * driver cannot on a machine without a GPU: the dlsym table, every
 * trampoline's argument order, the structs as the callee reads them, error
 * names from cuGetErrorName, and optional versus required symbols.
 *
 * "Device memory" is host memory: a CUdeviceptr is a host address. VMM
 * allocations are memfds, so an exported POSIX FD imported again maps the
 * same bytes, as on a GPU.
 *
 * FABRIC handles: without FAKECUDA_FABRIC_DIR in the environment, creating
 * or importing one fails with CUDA_ERROR_NOT_PERMITTED, as on a node
 * without an IMEX channel. With it, that directory is the fabric: a FABRIC
 * allocation is a file there, its handle carries the file's name, and any
 * process that sees the directory (a rank on another "node" of a test)
 * imports it by opening the file, mapping the same bytes. The creator's
 * release removes the file.
 *
 * -DFAKE_NO_MULTICAST leaves out the multicast functions (an old driver);
 * -DFAKE_NO_LAUNCH leaves out cuLaunchKernelEx (a required function).
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include "../cutypes.h"

#define API __attribute__((visibility("default")))

#define CUDA_ERROR_OUT_OF_MEMORY ((CUresult)2)
#define CUDA_ERROR_INVALID_DEVICE ((CUresult)101)
#define CUDA_ERROR_INVALID_IMAGE ((CUresult)200)
#define CUDA_ERROR_INVALID_HANDLE ((CUresult)400)

#define FAKE_MAX_PARAMS 16

static const size_t fake_min_granularity = 1 << 16;
static const size_t fake_rec_granularity = 2 << 20;

API CUresult cuGetErrorName(CUresult e, const char **s) {
    switch ((int)e) {
    case 0: *s = "CUDA_SUCCESS"; return CUDA_SUCCESS;
    case 1: *s = "CUDA_ERROR_INVALID_VALUE"; return CUDA_SUCCESS;
    case 500: *s = "CUDA_ERROR_NOT_FOUND"; return CUDA_SUCCESS;
    case 800: *s = "CUDA_ERROR_NOT_PERMITTED"; return CUDA_SUCCESS;
    }
    *s = NULL;
    return CUDA_ERROR_INVALID_VALUE;
}

API CUresult cuGetErrorString(CUresult e, const char **s) {
    switch ((int)e) {
    case 0: *s = "fake: no error"; return CUDA_SUCCESS;
    case 1: *s = "fake: invalid argument"; return CUDA_SUCCESS;
    case 500: *s = "fake: named symbol not found"; return CUDA_SUCCESS;
    case 800: *s = "fake: operation not permitted"; return CUDA_SUCCESS;
    }
    *s = NULL;
    return CUDA_ERROR_INVALID_VALUE;
}

API CUresult cuInit(unsigned int flags) { return flags == 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE; }
API CUresult cuDriverGetVersion(int *v) { *v = 13000; return CUDA_SUCCESS; }

/* ---- devices: values encode their arguments so tests see the order ---- */

API CUresult cuDeviceGetCount(int *n) { *n = 2; return CUDA_SUCCESS; }
API CUresult cuDeviceGet(CUdevice *d, int ordinal) {
    if (ordinal < 0 || ordinal >= 2) return CUDA_ERROR_INVALID_DEVICE;
    *d = ordinal;
    return CUDA_SUCCESS;
}
API CUresult cuDeviceGetAttribute(int *v, CUdevice_attribute attr, CUdevice d) {
    *v = (int)attr * 10 + d;
#ifdef FAKECUDA_CC_MAJOR
    /* Built with -DFAKECUDA_CC_MAJOR=X -DFAKECUDA_CC_MINOR=Y: every device
       reports compute capability X.Y (an older GPU, say). */
    if (attr == CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR) *v = FAKECUDA_CC_MAJOR;
    if (attr == CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR) *v = FAKECUDA_CC_MINOR;
#endif
    return CUDA_SUCCESS;
}
API CUresult cuDeviceGetName(char *name, int len, CUdevice d) {
    snprintf(name, (size_t)len, "Fake GPU %d", d);
    return CUDA_SUCCESS;
}
API CUresult cuDeviceGetPCIBusId(char *id, int len, CUdevice d) {
    snprintf(id, (size_t)len, "0000:%02x:00.0", 0x10 + d);
    return CUDA_SUCCESS;
}
API CUresult cuDeviceGetUuid_v2(CUuuid *u, CUdevice d) {
    for (int i = 0; i < 16; i++) u->bytes[i] = (char)(i * 16 + d);
    return CUDA_SUCCESS;
}
API CUresult cuDeviceTotalMem_v2(size_t *b, CUdevice d) { *b = ((size_t)d + 1) << 30; return CUDA_SUCCESS; }
API CUresult cuDeviceCanAccessPeer(int *can, CUdevice d, CUdevice peer) { *can = d != peer; return CUDA_SUCCESS; }

/* ---- contexts ---------------------------------------------------------- */

static __thread CUcontext fake_current;

API CUresult cuDevicePrimaryCtxRetain(CUcontext *c, CUdevice d) {
    *c = (CUcontext)(uintptr_t)(0x1000 + d);
    return CUDA_SUCCESS;
}
API CUresult cuDevicePrimaryCtxRelease_v2(CUdevice d) { return d < 2 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE; }
API CUresult cuCtxSetCurrent(CUcontext c) { fake_current = c; return CUDA_SUCCESS; }
API CUresult cuCtxGetCurrent(CUcontext *c) { *c = fake_current; return CUDA_SUCCESS; }
API CUresult cuCtxSynchronize(void) { return CUDA_SUCCESS; }

/* ---- streams and events ------------------------------------------------ */

API CUresult cuStreamCreate(CUstream *s, unsigned int flags) {
    *s = (CUstream)(uintptr_t)(0x2000 + flags);
    return CUDA_SUCCESS;
}
API CUresult cuStreamDestroy_v2(CUstream s) { return s ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE; }
API CUresult cuStreamSynchronize(CUstream s) { (void)s; return CUDA_SUCCESS; }
API CUresult cuStreamWaitEvent(CUstream s, CUevent e, unsigned int flags) {
    (void)s;
    return e && flags == 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

/* An event holds the fake clock (ms) when it was recorded; every record
 * advances the clock by 1.5 ms. */
static float fake_clock;

API CUresult cuEventCreate(CUevent *e, unsigned int flags) {
    float *t = calloc(1, sizeof(float));
    (void)flags;
    if (!t) return CUDA_ERROR_OUT_OF_MEMORY;
    *e = (CUevent)t;
    return CUDA_SUCCESS;
}
API CUresult cuEventDestroy_v2(CUevent e) { free(e); return CUDA_SUCCESS; }
API CUresult cuEventRecord(CUevent e, CUstream s) {
    (void)s;
    fake_clock += 1.5f;
    *(float *)e = fake_clock;
    return CUDA_SUCCESS;
}
API CUresult cuEventSynchronize(CUevent e) { return e ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE; }
API CUresult cuEventElapsedTime(float *ms, CUevent start, CUevent end) {
    *ms = *(float *)end - *(float *)start;
    return CUDA_SUCCESS;
}

/* ---- memory ------------------------------------------------------------ */

API CUresult cuMemGetInfo_v2(size_t *f, size_t *t) { *f = (size_t)1 << 30; *t = (size_t)2 << 30; return CUDA_SUCCESS; }
API CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t n) {
    void *m = calloc(1, n);
    if (!m) return CUDA_ERROR_OUT_OF_MEMORY;
    *p = (CUdeviceptr)(uintptr_t)m;
    return CUDA_SUCCESS;
}
API CUresult cuMemFree_v2(CUdeviceptr p) { free((void *)(uintptr_t)p); return CUDA_SUCCESS; }
API CUresult cuMemHostAlloc(void **p, size_t n, unsigned int flags) {
    (void)flags;
    *p = calloc(1, n);
    return *p ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}
API CUresult cuMemFreeHost(void *p) { free(p); return CUDA_SUCCESS; }
API CUresult cuMemHostGetDevicePointer_v2(CUdeviceptr *d, void *p, unsigned int flags) {
    if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
    *d = (CUdeviceptr)(uintptr_t)p;
    return CUDA_SUCCESS;
}
API CUresult cuMemcpyHtoD_v2(CUdeviceptr d, const void *s, size_t n) { memcpy((void *)(uintptr_t)d, s, n); return CUDA_SUCCESS; }
API CUresult cuMemcpyDtoH_v2(void *d, CUdeviceptr s, size_t n) { memcpy(d, (void *)(uintptr_t)s, n); return CUDA_SUCCESS; }
API CUresult cuMemcpyDtoD_v2(CUdeviceptr d, CUdeviceptr s, size_t n) {
    memmove((void *)(uintptr_t)d, (void *)(uintptr_t)s, n);
    return CUDA_SUCCESS;
}
API CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr d, CUdeviceptr s, size_t n, CUstream st) {
    (void)st;
    return cuMemcpyDtoD_v2(d, s, n);
}
API CUresult cuMemsetD8_v2(CUdeviceptr p, unsigned char v, size_t n) { memset((void *)(uintptr_t)p, v, n); return CUDA_SUCCESS; }
API CUresult cuMemsetD32_v2(CUdeviceptr p, unsigned int v, size_t n) {
    unsigned int *w = (unsigned int *)(uintptr_t)p;
    for (size_t i = 0; i < n; i++) w[i] = v;
    return CUDA_SUCCESS;
}
API CUresult cuMemsetD8Async(CUdeviceptr p, unsigned char v, size_t n, CUstream s) { (void)s; return cuMemsetD8_v2(p, v, n); }
API CUresult cuMemsetD32Async(CUdeviceptr p, unsigned int v, size_t n, CUstream s) { (void)s; return cuMemsetD32_v2(p, v, n); }

/* ---- modules and launch ------------------------------------------------ */

/* A module image must start with "FAKEBIN" and be NUL-terminated within
 * 1 MiB. A function named "record@<hex address>:<size>,<size>,..." writes
 * what cuLaunchKernelEx received to that address (see fake_record). */
typedef struct fake_func {
    CUdeviceptr out;
    unsigned int n;
    unsigned int sizes[FAKE_MAX_PARAMS];
} fake_func;

API CUresult cuModuleLoadData(CUmodule *m, const void *image) {
    if (strncmp((const char *)image, "FAKEBIN", 7) != 0 || memchr(image, 0, 1 << 20) == NULL) {
        return CUDA_ERROR_INVALID_IMAGE;
    }
    *m = (CUmodule)strdup((const char *)image);
    return *m ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}
API CUresult cuModuleUnload(CUmodule m) { free(m); return CUDA_SUCCESS; }
API CUresult cuModuleGetFunction(CUfunction *f, CUmodule m, const char *name) {
    fake_func *ff;
    char *end;
    (void)m;
    if (strncmp(name, "record@", 7) != 0) return CUDA_ERROR_NOT_FOUND;
    ff = calloc(1, sizeof(*ff));
    if (!ff) return CUDA_ERROR_OUT_OF_MEMORY;
    ff->out = strtoull(name + 7, &end, 16);
    if (*end == ':') {
        end++;
        while (*end && ff->n < FAKE_MAX_PARAMS) {
            ff->sizes[ff->n++] = (unsigned int)strtoul(end, &end, 10);
            if (*end == ',') end++;
        }
    }
    *f = (CUfunction)ff; /* leaked on purpose: modules own functions */
    return CUDA_SUCCESS;
}
API CUresult cuFuncSetAttribute(CUfunction f, CUfunction_attribute attr, int v) {
    (void)f;
    if (v == -917) return (CUresult)917; /* a code the fake has no name for */
    if (attr == CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES && v > 232448) return CUDA_ERROR_NOT_PERMITTED;
    return CUDA_SUCCESS;
}
API CUresult cuFuncGetAttribute(int *v, CUfunction_attribute attr, CUfunction f) {
    (void)f;
    *v = (int)attr + 100;
    return CUDA_SUCCESS;
}

#ifndef FAKE_NO_LAUNCH
/* Record layout (little-endian uint32 unless noted):
 *   grid[3] block[3] smem numAttrs
 *   4 x { id, v0, v1, v2 }      (v0 = int value or cluster x)
 *   uint64 stream
 *   nparams, extraIsNull
 *   the parameters' bytes, back to back, at their declared sizes */
API CUresult cuLaunchKernelEx(const CUlaunchConfig *cfg, CUfunction f, void **params, void **extra) {
    fake_func *ff = (fake_func *)f;
    unsigned char *out = (unsigned char *)(uintptr_t)ff->out;
    uint32_t hdr[8 + 16];
    uint64_t stream = (uint64_t)(uintptr_t)cfg->hStream;
    uint32_t tail[2];
    size_t off = 0;

    if (cfg->numAttrs > 4 || (cfg->numAttrs > 0 && cfg->attrs == NULL)) return CUDA_ERROR_INVALID_VALUE;
    memset(hdr, 0, sizeof(hdr));
    hdr[0] = cfg->gridDimX; hdr[1] = cfg->gridDimY; hdr[2] = cfg->gridDimZ;
    hdr[3] = cfg->blockDimX; hdr[4] = cfg->blockDimY; hdr[5] = cfg->blockDimZ;
    hdr[6] = cfg->sharedMemBytes; hdr[7] = cfg->numAttrs;
    for (unsigned int i = 0; i < cfg->numAttrs; i++) {
        const CUlaunchAttribute *a = &cfg->attrs[i];
        hdr[8 + 4 * i] = (uint32_t)a->id;
        if (a->id == CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION) {
            hdr[9 + 4 * i] = a->value.clusterDim.x;
            hdr[10 + 4 * i] = a->value.clusterDim.y;
            hdr[11 + 4 * i] = a->value.clusterDim.z;
        } else if (a->id == CU_LAUNCH_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE) {
            hdr[9 + 4 * i] = (uint32_t)a->value.clusterSchedulingPolicyPreference;
        } else if (a->id == CU_LAUNCH_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT) {
            hdr[9 + 4 * i] = a->value.sharedMemCarveout;
        } else {
            hdr[9 + 4 * i] = (uint32_t)a->value.programmaticStreamSerializationAllowed;
        }
    }
    memcpy(out + off, hdr, sizeof(hdr)); off += sizeof(hdr);
    memcpy(out + off, &stream, sizeof(stream)); off += sizeof(stream);
    tail[0] = ff->n;
    tail[1] = extra == NULL;
    memcpy(out + off, tail, sizeof(tail)); off += sizeof(tail);
    if (ff->n > 0 && params == NULL) return CUDA_ERROR_INVALID_VALUE;
    for (unsigned int i = 0; i < ff->n; i++) {
        memcpy(out + off, params[i], ff->sizes[i]);
        off += ff->sizes[i];
    }
    return CUDA_SUCCESS;
}
#endif

/* ---- capture and graphs: handles encode what they were made from ------- */

static __thread int fake_capture_mode = -1;

API CUresult cuStreamBeginCapture_v2(CUstream s, CUstreamCaptureMode mode) {
    (void)s;
    if (fake_capture_mode != -1) return CUDA_ERROR_INVALID_VALUE;
    fake_capture_mode = (int)mode;
    return CUDA_SUCCESS;
}
API CUresult cuStreamEndCapture(CUstream s, CUgraph *g) {
    (void)s;
    if (fake_capture_mode == -1) return CUDA_ERROR_INVALID_VALUE;
    *g = (CUgraph)(uintptr_t)(0x3000 + fake_capture_mode);
    fake_capture_mode = -1;
    return CUDA_SUCCESS;
}
API CUresult cuGraphInstantiateWithFlags(CUgraphExec *e, CUgraph g, unsigned long long flags) {
    *e = (CUgraphExec)((uintptr_t)g + 0x100 * (uintptr_t)flags + 0x10000);
    return CUDA_SUCCESS;
}
API CUresult cuGraphUpload(CUgraphExec e, CUstream s) { (void)s; return e ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE; }
API CUresult cuGraphLaunch(CUgraphExec e, CUstream s) { (void)s; return e ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE; }
API CUresult cuGraphExecDestroy(CUgraphExec e) { return e ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE; }
API CUresult cuGraphDestroy(CUgraph g) { return g ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE; }
/* A graph as DOT: the fake's graphs hold no nodes, so an empty digraph. */
API CUresult cuGraphDebugDotPrint(CUgraph g, const char *path, unsigned int flags) {
    (void)flags;
    if (!g || !path) return CUDA_ERROR_INVALID_VALUE;
    FILE *f = fopen(path, "w");
    if (!f) return CUDA_ERROR_INVALID_VALUE;
    fputs("digraph dot {\n}\n", f);
    fclose(f);
    return CUDA_SUCCESS;
}

/* ---- virtual memory management: memfd-backed ---------------------------- */

/* kind tells allocations and multicast objects apart, since both are
 * released with cuMemRelease. */
enum { FAKE_ALLOC = 0x411c, FAKE_MC = 0x3c3c };

typedef struct fake_alloc {
    int kind;
    int fd;
    size_t size;
    int device;
    unsigned int handleTypes;
    char fabric[48]; /* the fabric file's name, "" when none */
    int owner;       /* this process made the fabric file */
} fake_alloc;

/* The fabric directory, or NULL: no IMEX channel here. */
static const char *fake_fabric_dir(void) {
    const char *d = getenv("FAKECUDA_FABRIC_DIR");
    return d && *d ? d : NULL;
}

/* fake_fabric_path writes dir/name into buf; 0 when it does not fit. */
static int fake_fabric_path(char *buf, size_t n, const char *dir, const char *name) {
    int w = snprintf(buf, n, "%s/%s", dir, name);
    return w > 0 && (size_t)w < n;
}

static int fake_prop_ok(const CUmemAllocationProp *p) {
    return p->type == CU_MEM_ALLOCATION_TYPE_PINNED && p->location.type == CU_MEM_LOCATION_TYPE_DEVICE &&
           p->location.id >= 0 && p->location.id < 2 && p->win32HandleMetaData == NULL &&
           p->allocFlags.compressionType == 0 && p->allocFlags.usage == 0;
}

API CUresult cuMemGetAllocationGranularity(size_t *g, const CUmemAllocationProp *p,
                                           CUmemAllocationGranularity_flags o) {
    if (!fake_prop_ok(p)) return CUDA_ERROR_INVALID_VALUE;
    *g = o == CU_MEM_ALLOC_GRANULARITY_RECOMMENDED ? fake_rec_granularity : fake_min_granularity;
    return CUDA_SUCCESS;
}

static CUresult fake_wrap_fd(CUmemGenericAllocationHandle *h, int fd, size_t size, int device, unsigned int types) {
    fake_alloc *a = calloc(1, sizeof(*a));
    if (!a) return CUDA_ERROR_OUT_OF_MEMORY;
    a->kind = FAKE_ALLOC;
    a->fd = fd;
    a->size = size;
    a->device = device;
    a->handleTypes = types;
    *h = (CUmemGenericAllocationHandle)(uintptr_t)a;
    return CUDA_SUCCESS;
}

API CUresult cuMemCreate(CUmemGenericAllocationHandle *h, size_t size, const CUmemAllocationProp *p,
                         unsigned long long flags) {
    int fd;
    if (!fake_prop_ok(p) || flags != 0 || size == 0 || size % fake_min_granularity != 0) return CUDA_ERROR_INVALID_VALUE;
    if (p->requestedHandleTypes & CU_MEM_HANDLE_TYPE_FABRIC) {
        const char *dir = fake_fabric_dir();
        char path[4096];
        fake_alloc *a;
        CUresult r;
        /* Like the GPU machines without an IMEX channel. */
        if (!dir) return CUDA_ERROR_NOT_PERMITTED;
        if (!fake_fabric_path(path, sizeof path, dir, "fabric-XXXXXX")) return CUDA_ERROR_INVALID_VALUE;
        fd = mkostemp(path, O_CLOEXEC);
        if (fd < 0) return CUDA_ERROR_OUT_OF_MEMORY;
        if (ftruncate(fd, (off_t)size) != 0) {
            close(fd);
            unlink(path);
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
        r = fake_wrap_fd(h, fd, size, p->location.id, (unsigned int)p->requestedHandleTypes);
        if (r != CUDA_SUCCESS) {
            close(fd);
            unlink(path);
            return r;
        }
        a = (fake_alloc *)(uintptr_t)*h;
        snprintf(a->fabric, sizeof a->fabric, "%s", strrchr(path, '/') + 1);
        a->owner = 1;
        return CUDA_SUCCESS;
    }
    fd = memfd_create("fakecuda", MFD_CLOEXEC);
    if (fd < 0) return CUDA_ERROR_OUT_OF_MEMORY;
    if (ftruncate(fd, (off_t)size) != 0) {
        close(fd);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    return fake_wrap_fd(h, fd, size, p->location.id, (unsigned int)p->requestedHandleTypes);
}

API CUresult cuMemRelease(CUmemGenericAllocationHandle h) {
    fake_alloc *a = (fake_alloc *)(uintptr_t)h;
    if (!a) return CUDA_ERROR_INVALID_HANDLE;
    if (a->kind == FAKE_MC) {
        free(a);
        return CUDA_SUCCESS;
    }
    if (a->kind != FAKE_ALLOC) return CUDA_ERROR_INVALID_HANDLE;
    close(a->fd);
    if (a->owner && a->fabric[0] && fake_fabric_dir()) {
        char path[4096];
        if (fake_fabric_path(path, sizeof path, fake_fabric_dir(), a->fabric)) unlink(path);
    }
    free(a);
    return CUDA_SUCCESS;
}

API CUresult cuMemExportToShareableHandle(void *out, CUmemGenericAllocationHandle h, CUmemAllocationHandleType t,
                                          unsigned long long flags) {
    fake_alloc *a = (fake_alloc *)(uintptr_t)h;
    if (!a || flags != 0) return CUDA_ERROR_INVALID_VALUE;
    if (!(a->handleTypes & (unsigned int)t)) return CUDA_ERROR_INVALID_VALUE;
    if (t == CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) {
        int fd = dup(a->fd);
        if (fd < 0) return CUDA_ERROR_OUT_OF_MEMORY;
        *(int *)out = fd;
        return CUDA_SUCCESS;
    }
    if (t == CU_MEM_HANDLE_TYPE_FABRIC && a->fabric[0]) {
        CUmemFabricHandle *fh = out;
        memset(fh, 0, sizeof *fh);
        fh->data[0] = 'F';
        memcpy(fh->data + 1, a->fabric, strlen(a->fabric));
        fh->data[63] = 'Z';
        return CUDA_SUCCESS;
    }
    return CUDA_ERROR_NOT_SUPPORTED;
}

API CUresult cuMemImportFromShareableHandle(CUmemGenericAllocationHandle *h, void *os, CUmemAllocationHandleType t) {
    if (t == CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) {
        int fd = dup((int)(uintptr_t)os); /* the caller keeps its fd */
        off_t size;
        if (fd < 0) return CUDA_ERROR_INVALID_VALUE;
        size = lseek(fd, 0, SEEK_END);
        return fake_wrap_fd(h, fd, (size_t)size, -1, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    }
    if (t == CU_MEM_HANDLE_TYPE_FABRIC) {
        const CUmemFabricHandle *fh = os;
        const char *dir = fake_fabric_dir();
        char name[64], path[4096];
        int fd;
        off_t size;
        if (fh->data[0] != 'F' || fh->data[63] != 'Z') return CUDA_ERROR_INVALID_VALUE;
        if (!dir) return CUDA_ERROR_NOT_PERMITTED;
        memcpy(name, fh->data + 1, 62);
        name[62] = 0;
        if (strncmp(name, "fabric-", 7) != 0 || strchr(name, '/') || !fake_fabric_path(path, sizeof path, dir, name)) {
            return CUDA_ERROR_INVALID_VALUE;
        }
        fd = open(path, O_RDWR | O_CLOEXEC);
        if (fd < 0) return CUDA_ERROR_INVALID_VALUE;
        size = lseek(fd, 0, SEEK_END);
        return fake_wrap_fd(h, fd, (size_t)size, -1, CU_MEM_HANDLE_TYPE_FABRIC);
    }
    return CUDA_ERROR_INVALID_VALUE;
}

API CUresult cuMemAddressReserve(CUdeviceptr *p, size_t size, size_t align, CUdeviceptr addr, unsigned long long flags) {
    void *m;
    if (addr != 0 || flags != 0 || size == 0 || align > fake_rec_granularity) return CUDA_ERROR_INVALID_VALUE;
    m = mmap(NULL, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
    *p = (CUdeviceptr)(uintptr_t)m;
    return CUDA_SUCCESS;
}
API CUresult cuMemAddressFree(CUdeviceptr p, size_t size) {
    return munmap((void *)(uintptr_t)p, size) == 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}
API CUresult cuMemMap(CUdeviceptr p, size_t size, size_t offset, CUmemGenericAllocationHandle h, unsigned long long flags) {
    fake_alloc *a = (fake_alloc *)(uintptr_t)h;
    if (!a || flags != 0 || offset + size > a->size) return CUDA_ERROR_INVALID_VALUE;
    if (mmap((void *)(uintptr_t)p, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, a->fd, (off_t)offset) == MAP_FAILED) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    return CUDA_SUCCESS;
}
API CUresult cuMemUnmap(CUdeviceptr p, size_t size) {
    void *m = mmap((void *)(uintptr_t)p, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
    return m == MAP_FAILED ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
}
API CUresult cuMemSetAccess(CUdeviceptr p, size_t size, const CUmemAccessDesc *desc, size_t count) {
    (void)p;
    (void)size;
    for (size_t i = 0; i < count; i++) {
        if (desc[i].location.type != CU_MEM_LOCATION_TYPE_DEVICE || desc[i].location.id < 0 ||
            desc[i].location.id >= 2 || desc[i].flags != CU_MEM_ACCESS_FLAGS_PROT_READWRITE) {
            return CUDA_ERROR_INVALID_VALUE;
        }
    }
    return count > 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

/* ---- multicast --------------------------------------------------------- */

#ifndef FAKE_NO_MULTICAST
typedef struct fake_mc {
    int kind;
    CUmulticastObjectProp prop;
    unsigned int added;
    unsigned int bound;
} fake_mc;

static int fake_mc_prop_ok(const CUmulticastObjectProp *p) {
    return p->numDevices > 0 && p->size > 0 && p->flags == 0 &&
           (p->handleTypes & ~(unsigned long long)(CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR | CU_MEM_HANDLE_TYPE_FABRIC)) == 0;
}

API CUresult cuMulticastGetGranularity(size_t *g, const CUmulticastObjectProp *p, CUmulticastGranularity_flags o) {
    if (!fake_mc_prop_ok(p)) return CUDA_ERROR_INVALID_VALUE;
    *g = o == CU_MULTICAST_GRANULARITY_RECOMMENDED ? 2 * fake_rec_granularity : fake_rec_granularity;
    return CUDA_SUCCESS;
}
API CUresult cuMulticastCreate(CUmemGenericAllocationHandle *h, const CUmulticastObjectProp *p) {
    fake_mc *mc;
    if (!fake_mc_prop_ok(p) || p->size % fake_rec_granularity != 0) return CUDA_ERROR_INVALID_VALUE;
    mc = calloc(1, sizeof(*mc));
    if (!mc) return CUDA_ERROR_OUT_OF_MEMORY;
    mc->kind = FAKE_MC;
    mc->prop = *p;
    *h = (CUmemGenericAllocationHandle)(uintptr_t)mc;
    return CUDA_SUCCESS;
}
API CUresult cuMulticastAddDevice(CUmemGenericAllocationHandle h, CUdevice d) {
    fake_mc *mc = (fake_mc *)(uintptr_t)h;
    if (!mc || d < 0 || d >= 2 || mc->bound) return CUDA_ERROR_INVALID_VALUE;
    mc->added++;
    return CUDA_SUCCESS;
}
API CUresult cuMulticastBindMem(CUmemGenericAllocationHandle h, size_t mcOffset, CUmemGenericAllocationHandle mem,
                                size_t memOffset, size_t size, unsigned long long flags) {
    fake_mc *mc = (fake_mc *)(uintptr_t)h;
    fake_alloc *a = (fake_alloc *)(uintptr_t)mem;
    /* Binding before every device was added is the order bug to catch. */
    if (!mc || !a || flags != 0 || mc->added != mc->prop.numDevices) return CUDA_ERROR_INVALID_VALUE;
    if (mcOffset + size > mc->prop.size || memOffset + size > a->size) return CUDA_ERROR_INVALID_VALUE;
    mc->bound++;
    return CUDA_SUCCESS;
}
API CUresult cuMulticastUnbind(CUmemGenericAllocationHandle h, CUdevice d, size_t mcOffset, size_t size) {
    fake_mc *mc = (fake_mc *)(uintptr_t)h;
    if (!mc || d < 0 || d >= 2 || mc->bound == 0 || mcOffset + size > mc->prop.size) return CUDA_ERROR_INVALID_VALUE;
    mc->bound--;
    return CUDA_SUCCESS;
}
#endif
