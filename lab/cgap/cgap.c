// cgap: the stream-ordered step of tprun_op_step_weight, captured into a
// CUDA graph and timed from plain C through the C interface (tprun.h),
// with no Python and no PyTorch in the process. It mirrors
// `tprun bench --tp 1 --hidden 896 --graph enqueue`
// (cmd/tprun/internal/job/bench.go): the same op, weight copies, pools,
// output blocks, capture, instantiation, warm-up, check and event timing,
// so that its figures answer whether the C interface alone shows the gap
// lab/torch_gap.py measures against Go. Run under the launcher:
//
//	tprun --tp 1 -- lab/cgap/cgap [flags]
//
// Flags (each changes one thing towards what lab/torch_gap.py does):
//
//	--own-weight     also give the op a weight of its own
//	                 (tprun_op_set_weight_host), as tprun.Group.up_projection
//	                 does; Go's enqueue form gives it none
//	--op-first       create the op before the device memory; Go allocates
//	                 the memory first
//	--pools blocks   a latent and residual block of M rows per step, side
//	                 by side (k*M rows), as torch_gap's "pools"; the default
//	                 "go" is bench.go's pool of 16 rows, step i at row
//	                 i % (17 - M)
//	--seed N         the inputs' seed (default: drawn from the clock)
//	--warmup N, --replays N   untimed and timed replays per M (20, 200)
//	--host-check     no GPU: run steps 0, 1 and k-1 of every M on the host
//	                 backend (tprun_op_step_host_weight) through the same
//	                 pools and check, to show the check itself works (and
//	                 that it catches one spoiled value)
//
// With CGAP_GRAPH_DOT=PREFIX set it writes each M's graph as Graphviz DOT
// to PREFIX.M.dot (verbose, as TPRUN_DEV_GRAPH_DOT does for Go's), to
// compare node for node.
//
// Output: a "# ..." header naming the device, then per M
//
//	M  median_us  p90_us  err/tol  #wrong  ok
//
// median and p90 over the timed replays of one replay's time over its k
// steps. After the warm-up the output blocks are poisoned (NaN), one
// replay runs, and every one of its k blocks is checked against a float64
// reference: |out - (S + shared)| within the bound the kernel package's
// reference uses (one bf16 rounding of the sum, one of the result, and
// fp32 accumulation error); err/tol is the largest ratio, #wrong the
// values beyond it or not finite.
//
// Exit status: 0 when every block checked, 1 on a wrong value or a
// failure, 2 where there is no CUDA driver or GPU (the host backend).

#define _GNU_SOURCE
#include <dlfcn.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "tprun.h"

enum { HIDDEN = 896, LATENT = 3584, MAX_M = 8, ROTATE_MB = 512 };

// ---- the CUDA driver, loaded at run time ----------------------------------
//
// Declared here with plain C types (no cuda.h is needed to build), as
// internal/cuda/cutypes.h does, and looked up by the same symbol names
// internal/cuda uses.

typedef int CUresult;
typedef unsigned long long CUdeviceptr;

enum {
	CU_STREAM_NON_BLOCKING = 1,            // tp.CaptureStream's stream
	CU_STREAM_CAPTURE_MODE_THREAD_LOCAL = 1,
	CU_EVENT_DEFAULT = 0,
	CU_GRAPH_DEBUG_DOT_VERBOSE = 1,
};

static struct {
	CUresult (*Init)(unsigned flags);
	CUresult (*DriverGetVersion)(int *version);
	CUresult (*DeviceGet)(int *dev, int ordinal);
	CUresult (*DeviceGetName)(char *name, int len, int dev);
	CUresult (*DevicePrimaryCtxRetain)(void **ctx, int dev);
	CUresult (*DevicePrimaryCtxRelease)(int dev);
	CUresult (*CtxSetCurrent)(void *ctx);
	CUresult (*MemAlloc)(CUdeviceptr *p, size_t bytes);
	CUresult (*MemFree)(CUdeviceptr p);
	CUresult (*MemcpyHtoD)(CUdeviceptr dst, const void *src, size_t bytes);
	CUresult (*MemcpyDtoH)(void *dst, CUdeviceptr src, size_t bytes);
	CUresult (*StreamCreate)(void **stream, unsigned flags);
	CUresult (*StreamDestroy)(void *stream);
	CUresult (*StreamSynchronize)(void *stream);
	CUresult (*StreamBeginCapture)(void *stream, int mode);
	CUresult (*StreamEndCapture)(void *stream, void **graph);
	CUresult (*GraphInstantiateWithFlags)(void **exec, void *graph, unsigned long long flags);
	CUresult (*GraphUpload)(void *exec, void *stream);
	CUresult (*GraphLaunch)(void *exec, void *stream);
	CUresult (*GraphDestroy)(void *graph);
	CUresult (*GraphExecDestroy)(void *exec);
	CUresult (*GraphDebugDotPrint)(void *graph, const char *path, unsigned flags);
	CUresult (*EventCreate)(void **event, unsigned flags);
	CUresult (*EventDestroy)(void *event);
	CUresult (*EventRecord)(void *event, void *stream);
	CUresult (*EventElapsedTime)(float *ms, void *start, void *end);
	CUresult (*GetErrorName)(CUresult r, const char **name);
} cu;

// ---- failures ---------------------------------------------------------------

static tprun_group *grp;

// leave prints "cgap: " prefix and the message to stderr, ends this rank's
// part in the job (abort: the peers, if any, learn the message; else a
// clean close) and exits with code.
static void leave(int code, bool abort, const char *prefix, const char *suffix, const char *fmt, va_list ap)
	__attribute__((format(printf, 5, 0), noreturn));
static void leave(int code, bool abort, const char *prefix, const char *suffix, const char *fmt, va_list ap) {
	char msg[1024];
	vsnprintf(msg, sizeof msg, fmt, ap);
	fflush(stdout);
	fprintf(stderr, "cgap: %s%s%s\n", prefix, msg, suffix);
	if (grp != NULL) {
		if (abort)
			tprun_group_abort(grp, msg);
		else
			tprun_group_close(grp);
	}
	exit(code);
}

// fail says what went wrong, fails the job (the peers, if any, learn it
// from tprun_group_abort) and exits 1.
static void fail(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void fail(const char *fmt, ...) {
	va_list ap;
	va_start(ap, fmt);
	leave(1, true, "", "", fmt, ap);
}

// no_gpu leaves the job cleanly and exits 2: nothing here can be timed.
static void no_gpu(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void no_gpu(const char *fmt, ...) {
	va_list ap;
	va_start(ap, fmt);
	leave(2, false, "no GPU to time the step on: ", " (run it on a machine with an NVIDIA GPU and its driver)", fmt, ap);
}

static void cu_check(CUresult r, const char *what) {
	if (r == 0)
		return;
	const char *name = NULL;
	if (cu.GetErrorName == NULL || cu.GetErrorName(r, &name) != 0 || name == NULL)
		name = "unknown";
	fail("%s: CUresult %d (%s)", what, r, name);
}

static void tp_check(int st, const char *what) {
	if (st != TPRUN_OK)
		fail("%s: %s: %s", what, tprun_status_name(st), tprun_last_error());
}

static void *xmalloc(size_t n) {
	void *p = malloc(n);
	if (p == NULL)
		fail("out of host memory (%zu bytes)", n);
	return p;
}

// load_cuda opens libcuda.so.1 and looks up every function; it returns a
// reason on failure, NULL on success.
static const char *load_cuda(void) {
	static char why[512];
	void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
	if (lib == NULL) {
		snprintf(why, sizeof why, "cannot load the CUDA driver: %s", dlerror());
		return why;
	}
#define LOAD(field, sym)                                                                    \
	do {                                                                                \
		void *p_ = dlsym(lib, sym);                                                 \
		if (p_ == NULL) {                                                           \
			snprintf(why, sizeof why, "the CUDA driver has no %s: %s", sym, dlerror()); \
			return why;                                                         \
		}                                                                           \
		memcpy(&cu.field, &p_, sizeof p_);                                          \
	} while (0)
	LOAD(GetErrorName, "cuGetErrorName");
	LOAD(Init, "cuInit");
	LOAD(DriverGetVersion, "cuDriverGetVersion");
	LOAD(DeviceGet, "cuDeviceGet");
	LOAD(DeviceGetName, "cuDeviceGetName");
	LOAD(DevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain");
	LOAD(DevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2");
	LOAD(CtxSetCurrent, "cuCtxSetCurrent");
	LOAD(MemAlloc, "cuMemAlloc_v2");
	LOAD(MemFree, "cuMemFree_v2");
	LOAD(MemcpyHtoD, "cuMemcpyHtoD_v2");
	LOAD(MemcpyDtoH, "cuMemcpyDtoH_v2");
	LOAD(StreamCreate, "cuStreamCreate");
	LOAD(StreamDestroy, "cuStreamDestroy_v2");
	LOAD(StreamSynchronize, "cuStreamSynchronize");
	LOAD(StreamBeginCapture, "cuStreamBeginCapture_v2");
	LOAD(StreamEndCapture, "cuStreamEndCapture");
	LOAD(GraphInstantiateWithFlags, "cuGraphInstantiateWithFlags");
	LOAD(GraphUpload, "cuGraphUpload");
	LOAD(GraphLaunch, "cuGraphLaunch");
	LOAD(GraphDestroy, "cuGraphDestroy");
	LOAD(GraphExecDestroy, "cuGraphExecDestroy");
	LOAD(GraphDebugDotPrint, "cuGraphDebugDotPrint");
	LOAD(EventCreate, "cuEventCreate");
	LOAD(EventDestroy, "cuEventDestroy_v2");
	LOAD(EventRecord, "cuEventRecord");
	LOAD(EventElapsedTime, "cuEventElapsedTime");
#undef LOAD
	return NULL;
}

// ---- bf16 and random inputs -------------------------------------------------

static uint64_t rng_state;

static uint64_t next_u64(void) {  // splitmix64
	uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
	return z ^ (z >> 31);
}

static double normal(void) {  // Box-Muller
	double u1 = ((double)(next_u64() >> 11) + 0.5) * 0x1p-53;
	double u2 = ((double)(next_u64() >> 11) + 0.5) * 0x1p-53;
	return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

static uint16_t bf16_from_float(float f) {  // round to nearest even
	uint32_t u;
	memcpy(&u, &f, sizeof u);
	if ((u & 0x7FFFFFFFu) > 0x7F800000u)
		return 0x7FC0;
	u += 0x7FFFu + ((u >> 16) & 1u);
	return (uint16_t)(u >> 16);
}

static double bf16_to_double(uint16_t b) {
	uint32_t u = (uint32_t)b << 16;
	float f;
	memcpy(&f, &u, sizeof f);
	return f;
}

// fill draws bf16(scale * x), x standard normal; a draw that rounds to zero
// becomes +-scale, as kernel.FillRandom does: no check hinges on zeros.
static void fill(uint16_t *dst, size_t n, float scale) {
	for (size_t i = 0; i < n; i++) {
		uint16_t v = bf16_from_float((float)normal() * scale);
		if ((v & 0x7FFF) == 0)
			v = bf16_from_float(scale) | (v & 0x8000);
		dst[i] = v;
	}
}

// ---- the float64 reference --------------------------------------------------

struct reference {
	int rows;
	const uint16_t *shared;  // [rows, HIDDEN]
	double *lat;             // [rows, LATENT]
	double *w;               // [HIDDEN, LATENT]
	double *sum, *abs;       // [rows, HIDDEN], row r valid once done[r]
	char *done;
	double gamma, tol_const;
};

static void reference_init(struct reference *r, int rows, const uint16_t *lat, const uint16_t *w,
			   const uint16_t *shared) {
	r->rows = rows;
	r->shared = shared;
	r->lat = xmalloc(sizeof(double) * (size_t)rows * LATENT);
	r->w = xmalloc(sizeof(double) * (size_t)HIDDEN * LATENT);
	r->sum = xmalloc(sizeof(double) * (size_t)rows * HIDDEN);
	r->abs = xmalloc(sizeof(double) * (size_t)rows * HIDDEN);
	r->done = calloc((size_t)rows, 1);
	if (r->done == NULL)
		fail("out of host memory");
	for (size_t i = 0; i < (size_t)rows * LATENT; i++)
		r->lat[i] = bf16_to_double(lat[i]);
	for (size_t i = 0; i < (size_t)HIDDEN * LATENT; i++)
		r->w[i] = bf16_to_double(w[i]);
	// kernel/reference.go's toleranceTerms.
	double ku = LATENT * 0x1p-24;
	r->gamma = ku / (1 - ku);
	r->tol_const = (1 + 0x1p-6) * LATENT * 0x1p-149 + 0x1p-132;
}

// reference_row computes sum_k lat[row,k]*w[n,k] and its absolute sum for
// every n (each product of two bf16 values is exact in float64).
static void reference_row(struct reference *r, int row) {
	if (r->done[row])
		return;
	const double *l = r->lat + (size_t)row * LATENT;
	for (int n = 0; n < HIDDEN; n++) {
		const double *w = r->w + (size_t)n * LATENT;
		double s[4] = {0, 0, 0, 0}, a[4] = {0, 0, 0, 0};
		for (int k = 0; k < LATENT; k += 4)
			for (int j = 0; j < 4; j++) {
				double p = l[k + j] * w[k + j];
				s[j] += p;
				a[j] += fabs(p);
			}
		r->sum[(size_t)row * HIDDEN + n] = (s[0] + s[1]) + (s[2] + s[3]);
		r->abs[(size_t)row * HIDDEN + n] = (a[0] + a[1]) + (a[2] + a[3]);
	}
	r->done[row] = 1;
}

// check compares a block of m rows from pool row o with the reference,
// the bound of kernel/reference.go's Expect.
static void check(struct reference *r, const uint16_t *out, int m, int o, double *worst, long *wrong) {
	for (int i = 0; i < m; i++) {
		reference_row(r, o + i);
		for (int n = 0; n < HIDDEN; n++) {
			size_t at = (size_t)(o + i) * HIDDEN + n;
			double sum = r->sum[at];
			double ideal = sum + bf16_to_double(r->shared[at]);
			double tol = (0x1p-8 + 0x1p-15) * (fabs(sum) + fabs(ideal)) + (1 + 0x1p-6) * (r->gamma * r->abs[at]) +
				     r->tol_const;
			double got = bf16_to_double(out[(size_t)i * HIDDEN + n]);
			if (!isfinite(got)) {
				(*wrong)++;
				continue;
			}
			double e = fabs(got - ideal) / tol;
			if (e > *worst)
				*worst = e;
			if (e > 1)
				(*wrong)++;
		}
	}
}

// ---- the packed layout ------------------------------------------------------

// packed_at is where element (n, k) of the row-major weight lies in the
// packed layout, as tprun.h writes it out.
static size_t packed_at(int n, int k) {
	size_t C = (LATENT + 31) / 32;
	size_t g = (size_t)n / 16, c = (size_t)k / 32;
	size_t l = 4 * (size_t)(n % 8) + (size_t)(k % 32) / 8, q = (size_t)(k % 8) / 4;
	size_t e = 2 * (2 * (size_t)((k % 4) / 2) + (size_t)(n % 16) / 8) + (size_t)(k % 2);
	return (g * C + c) * 512 + (q * 32 + l) * 8 + e;
}

// ---- settings ---------------------------------------------------------------

struct settings {
	int own_weight, op_first, blocks, warmup, replays, host_check;
	uint64_t seed;
};

static void usage(void) {
	fprintf(stderr, "usage: tprun --tp 1 -- cgap [--own-weight] [--op-first] [--pools go|blocks] [--seed N] "
			"[--warmup N] [--replays N] [--host-check]\n");
	exit(1);
}

static long parse_long(const char *flag, const char *v, long min) {
	char *end;
	long x = v == NULL ? 0 : strtol(v, &end, 10);
	if (v == NULL || *v == 0 || *end != 0 || x < min) {
		fprintf(stderr, "cgap: %s %s: want an integer of at least %ld\n", flag, v == NULL ? "(missing)" : v, min);
		usage();
	}
	return x;
}

static struct settings parse(int argc, char **argv) {
	struct settings s = {.warmup = 20, .replays = 200};
	s.seed = (uint64_t)time(NULL) * 1000003u ^ (uint64_t)getpid();
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (strcmp(a, "--own-weight") == 0) {
			s.own_weight = 1;
		} else if (strcmp(a, "--host-check") == 0) {
			s.host_check = 1;
		} else if (strcmp(a, "--op-first") == 0) {
			s.op_first = 1;
		} else if (strcmp(a, "--pools") == 0) {
			if (v == NULL || (strcmp(v, "go") != 0 && strcmp(v, "blocks") != 0)) {
				fprintf(stderr, "cgap: --pools %s: want go or blocks\n", v == NULL ? "(missing)" : v);
				usage();
			}
			s.blocks = strcmp(v, "blocks") == 0;
			i++;
		} else if (strcmp(a, "--seed") == 0) {
			s.seed = (uint64_t)parse_long(a, v, 0);
			i++;
		} else if (strcmp(a, "--warmup") == 0) {
			s.warmup = (int)parse_long(a, v, 0);
			i++;
		} else if (strcmp(a, "--replays") == 0) {
			s.replays = (int)parse_long(a, v, 1);
			i++;
		} else {
			fprintf(stderr, "cgap: unknown argument %s\n", a);
			usage();
		}
	}
	return s;
}

// ---- the device operands ----------------------------------------------------

struct rig {
	int k, rows;
	size_t packed_bytes, out_bytes;  // one weight copy; one output block (MAX_M rows, as bench.go)
	CUdeviceptr lat, shared, weights, outs;
};

static CUdeviceptr upload(const void *src, size_t bytes, const char *what) {
	CUdeviceptr p;
	char msg[128];
	snprintf(msg, sizeof msg, "cuMemAlloc (%s, %zu bytes)", what, bytes);
	cu_check(cu.MemAlloc(&p, bytes), msg);
	if (src != NULL) {
		snprintf(msg, sizeof msg, "cuMemcpyHtoD (%s)", what);
		cu_check(cu.MemcpyHtoD(p, src, bytes), msg);
	}
	return p;
}

// rig_upload allocates and fills the device memory in bench.go's order
// (newBenchRig): the latent pool, the residual pool, the k weight copies
// side by side in one allocation, the k output blocks.
static void rig_upload(struct rig *g, const uint16_t *lat, const uint16_t *shared, const uint16_t *packed) {
	g->lat = upload(lat, sizeof(uint16_t) * (size_t)g->rows * LATENT, "latent pool");
	g->shared = upload(shared, sizeof(uint16_t) * (size_t)g->rows * HIDDEN, "residual pool");
	g->weights = upload(NULL, g->packed_bytes * (size_t)g->k, "weight copies");
	for (int i = 0; i < g->k; i++)
		cu_check(cu.MemcpyHtoD(g->weights + (CUdeviceptr)i * g->packed_bytes, packed, g->packed_bytes),
			 "cuMemcpyHtoD (a weight copy)");
	g->outs = upload(NULL, g->out_bytes * (size_t)g->k, "output blocks");
}

// offset is the first pool row of step i at m rows.
static int offset(const struct settings *s, const struct rig *g, int i, int m) {
	return s->blocks ? i * m : i % (g->rows - m + 1);
}

static int cmp_double(const void *a, const void *b) {
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

// percentile is bench.go's: the element at ceil(q*n)-1 of the sorted times.
static double percentile(const double *sorted, int n, double q) {
	int i = (int)ceil(q * n) - 1;
	return sorted[i < 0 ? 0 : (i >= n ? n - 1 : i)];
}

// launch queues n replays and waits for them, then for the op's verdict on
// its steps (bench.go's replay: Replay, then Synchronize).
static void launch(tprun_op *op, void *exec, void *stream, int n, const char *what) {
	for (int i = 0; i < n; i++)
		cu_check(cu.GraphLaunch(exec, stream), what);
	cu_check(cu.StreamSynchronize(stream), what);
	tp_check(tprun_op_synchronize(op, stream), what);
}

// run_m captures, checks and times the graph for m rows; it prints the row.
static int run_m(const struct settings *s, const struct rig *g, tprun_op *op, struct reference *ref, int m) {
	char what[128];
	void *stream, *graph, *exec;
	// tp.CaptureStream: a non-blocking stream, thread-local capture.
	cu_check(cu.StreamCreate(&stream, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
	cu_check(cu.StreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL), "cuStreamBeginCapture");
	for (int i = 0; i < g->k; i++) {
		int o = offset(s, g, i, m);
		const void *lat = (const void *)(uintptr_t)(g->lat + (CUdeviceptr)2 * o * LATENT);
		const void *w = (const void *)(uintptr_t)(g->weights + (CUdeviceptr)i * g->packed_bytes);
		const void *sh = (const void *)(uintptr_t)(g->shared + (CUdeviceptr)2 * o * HIDDEN);
		void *out = (void *)(uintptr_t)(g->outs + (CUdeviceptr)i * g->out_bytes);
		int st = tprun_op_step_weight(op, m, lat, w, sh, HIDDEN, out, stream);
		if (st != TPRUN_OK) {
			char msg[1024];
			snprintf(msg, sizeof msg, "%s", tprun_last_error());
			cu.StreamEndCapture(stream, &graph);
			fail("M %d: step %d of %d under capture: %s: %s", m, i, g->k, tprun_status_name(st), msg);
		}
	}
	cu_check(cu.StreamEndCapture(stream, &graph), "cuStreamEndCapture");
	const char *dot = getenv("CGAP_GRAPH_DOT");
	if (dot != NULL && *dot != 0) {
		char path[4096];
		snprintf(path, sizeof path, "%s.%d.dot", dot, m);
		cu_check(cu.GraphDebugDotPrint(graph, path, CU_GRAPH_DEBUG_DOT_VERBOSE), "cuGraphDebugDotPrint");
	}
	const char *pdump = getenv("CGAP_PARAMS");
	if (pdump != NULL && *pdump != 0) {
		char path[4096];
		snprintf(path, sizeof path, "%s.%d.txt", pdump, m);
		int cgap_dump_graph(void *graph, const char *path, int bytes);
		if (cgap_dump_graph(graph, path, 248) < 0) fail("M %d: dumping the kernel parameters to %s", m, path);
	}
	cu_check(cu.GraphInstantiateWithFlags(&exec, graph, 0), "cuGraphInstantiateWithFlags");
	cu_check(cu.GraphDestroy(graph), "cuGraphDestroy");
	cu_check(cu.GraphUpload(exec, stream), "cuGraphUpload");
	cu_check(cu.StreamSynchronize(stream), "cuStreamSynchronize after the upload");

	snprintf(what, sizeof what, "M %d: warm-up replays", m);
	launch(op, exec, stream, s->warmup, what);

	// The checked replay writes over poisoned blocks.
	size_t out_elems = g->out_bytes / 2 * (size_t)g->k;
	uint16_t *host = xmalloc(g->out_bytes * (size_t)g->k);
	for (size_t i = 0; i < out_elems; i++)
		host[i] = 0x7FC0;
	cu_check(cu.MemcpyHtoD(g->outs, host, g->out_bytes * (size_t)g->k), "cuMemcpyHtoD (poisoning the output blocks)");
	snprintf(what, sizeof what, "M %d: the checked replay", m);
	launch(op, exec, stream, 1, what);
	cu_check(cu.MemcpyDtoH(host, g->outs, g->out_bytes * (size_t)g->k), "cuMemcpyDtoH (the output blocks)");
	double worst = 0;
	long wrong = 0;
	for (int i = 0; i < g->k; i++)
		check(ref, host + (size_t)i * (g->out_bytes / 2), m, offset(s, g, i, m), &worst, &wrong);
	free(host);

	// StreamGraph.TimeReplays: an event before each replay and one after
	// the last, all queued back to back, then one wait.
	int n = s->replays;
	void **ev = xmalloc(sizeof(void *) * (size_t)(n + 1));
	for (int i = 0; i <= n; i++)
		cu_check(cu.EventCreate(&ev[i], CU_EVENT_DEFAULT), "cuEventCreate");
	for (int i = 0; i < n; i++) {
		cu_check(cu.EventRecord(ev[i], stream), "cuEventRecord");
		cu_check(cu.GraphLaunch(exec, stream), "cuGraphLaunch (timed)");
	}
	cu_check(cu.EventRecord(ev[n], stream), "cuEventRecord");
	cu_check(cu.StreamSynchronize(stream), "cuStreamSynchronize after the timed replays");
	snprintf(what, sizeof what, "M %d: the timed replays", m);
	tp_check(tprun_op_synchronize(op, stream), what);
	double *us = xmalloc(sizeof(double) * (size_t)n);
	for (int i = 0; i < n; i++) {
		float ms;
		cu_check(cu.EventElapsedTime(&ms, ev[i], ev[i + 1]), "cuEventElapsedTime");
		us[i] = ms * 1000.0 / g->k;
	}
	qsort(us, (size_t)n, sizeof us[0], cmp_double);
	int ok = wrong == 0;
	printf("  %d %10.2f %8.2f %8.3f %7ld %3s\n", m, percentile(us, n, 0.5), percentile(us, n, 0.9), worst, wrong,
	       ok ? "yes" : "NO");
	fflush(stdout);

	for (int i = 0; i <= n; i++)
		cu_check(cu.EventDestroy(ev[i]), "cuEventDestroy");
	free(ev);
	free(us);
	cu_check(cu.GraphExecDestroy(exec), "cuGraphExecDestroy");
	cu_check(cu.StreamDestroy(stream), "cuStreamDestroy");
	return ok;
}

// host_check runs steps 0, 1 and k-1 of every M on the host backend with
// the pools and offsets the graph uses, and checks them as run_m does;
// it also spoils one value of a checked block and wants it found.
static int host_check(const struct settings *s, const struct rig *g, const uint16_t *lat, const uint16_t *w,
		      const uint16_t *shared, struct reference *ref) {
	tprun_op *op;
	tp_check(tprun_op_create(grp, HIDDEN, LATENT, MAX_M, TPRUN_DEVICE_HOST, &op), "tprun_op_create (host)");
	uint16_t *out = xmalloc(g->out_bytes);
	int ok = 1;
	printf("# host check: steps 0, 1 and %d of each M on the host backend (%s), checked as on the GPU\n", g->k - 1,
	       tprun_op_backend(op));
	printf("#  M  err/tol  #wrong  ok  spoiled-found\n");
	for (int m = 1; m <= MAX_M; m++) {
		double worst = 0;
		long wrong = 0;
		int steps[3] = {0, 1, g->k - 1};
		for (int j = 0; j < 3; j++) {
			int o = offset(s, g, steps[j], m);
			for (size_t i = 0; i < g->out_bytes / 2; i++)
				out[i] = 0x7FC0;
			tp_check(tprun_op_step_host_weight(op, m, lat + (size_t)o * LATENT, w, shared + (size_t)o * HIDDEN,
							   HIDDEN, out),
				 "tprun_op_step_host_weight");
			check(ref, out, m, o, &worst, &wrong);
		}
		// One value moved away from zero by half a unit and a quarter of
		// itself, far beyond the bound, must count as wrong.
		double w2 = 0;
		long spoiled = 0;
		size_t at = (size_t)(m - 1) * HIDDEN + HIDDEN / 2;
		double v = bf16_to_double(out[at]);
		out[at] = bf16_from_float((float)(v + copysign(0.5 + 0.25 * fabs(v), v)));
		check(ref, out, m, offset(s, g, g->k - 1, m), &w2, &spoiled);
		int good = wrong == 0 && spoiled == 1;
		ok &= good;
		printf("  %d %8.3f %7ld %3s %s\n", m, worst, wrong, wrong == 0 ? "yes" : "NO", spoiled == 1 ? "yes" : "NO");
	}
	free(out);
	tp_check(tprun_op_close(op), "tprun_op_close (host)");
	return ok;
}

static tprun_op *create_op(const struct settings *s, const uint16_t *w) {
	tprun_op *op;
	tp_check(tprun_op_create(grp, HIDDEN, LATENT, MAX_M, TPRUN_DEVICE_GROUP, &op), "tprun_op_create");
	const char *backend = tprun_op_backend(op);
	if (backend != NULL && strcmp(backend, "host") == 0)
		no_gpu("the op runs the host backend (%s)", tprun_op_backend_reason(op));
	if (s->own_weight)
		tp_check(tprun_op_set_weight_host(op, w, (size_t)HIDDEN * LATENT), "tprun_op_set_weight_host");
	return op;
}

int main(int argc, char **argv) {
	struct settings s = parse(argc, argv);
	if (tprun_abi_version() != TPRUN_ABI_VERSION)
		fail("libtprun speaks interface version %d, this program %d", tprun_abi_version(), TPRUN_ABI_VERSION);
	tp_check(tprun_join(&grp), "tprun_join");
	if (tprun_group_size(grp) != 1)
		fail("run it at tp 1 (tprun --tp 1 -- cgap): the check holds the whole weight, this job has %d ranks",
		     tprun_group_size(grp));
	int ordinal = tprun_group_device(grp);
	if (ordinal < 0)
		tp_check(ordinal, "tprun_group_device");

	// The inputs: bench.go's scales (latent and residual 1, weight
	// latent^-0.5, keeping S about N(0, 1)).
	size_t plen;
	tp_check(tprun_packed_weight_len(HIDDEN, LATENT, &plen), "tprun_packed_weight_len");
	struct rig g = {.packed_bytes = 2 * plen, .out_bytes = sizeof(uint16_t) * MAX_M * HIDDEN};
	g.k = (int)(((size_t)ROTATE_MB << 20) / g.packed_bytes + (((size_t)ROTATE_MB << 20) % g.packed_bytes != 0));
	g.rows = s.blocks ? g.k * MAX_M : 2 * MAX_M;
	rng_state = s.seed;
	uint16_t *w = xmalloc(sizeof(uint16_t) * (size_t)HIDDEN * LATENT);
	uint16_t *lat = xmalloc(sizeof(uint16_t) * (size_t)g.rows * LATENT);
	uint16_t *shared = xmalloc(sizeof(uint16_t) * (size_t)g.rows * HIDDEN);
	uint16_t *packed = xmalloc(g.packed_bytes);
	fill(lat, (size_t)g.rows * LATENT, 1);
	fill(shared, (size_t)g.rows * HIDDEN, 1);
	fill(w, (size_t)HIDDEN * LATENT, (float)(1 / sqrt(LATENT)));
	tp_check(tprun_pack_weight(packed, w, HIDDEN, LATENT), "tprun_pack_weight");
	// A wrong layout would only show as wrong blocks on the device: say so
	// here first if the packed form is not the one tprun.h describes.
	for (int n = 0; n < HIDDEN; n++)
		for (int k = 0; k < LATENT; k++)
			if (packed[packed_at(n, k)] != w[(size_t)n * LATENT + k])
				fail("tprun_pack_weight put element (%d, %d) elsewhere than tprun.h says", n, k);
	struct reference ref;
	reference_init(&ref, g.rows, lat, w, shared);

	if (s.host_check) {
		int ok = host_check(&s, &g, lat, w, shared, &ref);
		tp_check(tprun_group_close(grp), "tprun_group_close");
		printf("# host check %s\n", ok ? "passed" : "FAILED");
		return ok ? 0 : 1;
	}

	const char *why = load_cuda();
	if (why != NULL)
		no_gpu("%s", why);
	CUresult r = cu.Init(0);
	if (r != 0) {
		const char *rn = NULL;
		if (cu.GetErrorName(r, &rn) != 0 || rn == NULL)
			rn = "unknown";
		no_gpu("cuInit: CUresult %d (%s)", r, rn);
	}
	int dev, drv;
	void *ctx;
	char name[256];
	cu_check(cu.DeviceGet(&dev, ordinal), "cuDeviceGet");
	cu_check(cu.DeviceGetName(name, sizeof name, dev), "cuDeviceGetName");
	cu_check(cu.DriverGetVersion(&drv), "cuDriverGetVersion");
	// The interface takes pointers in the device's primary context.
	cu_check(cu.DevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain");
	cu_check(cu.CtxSetCurrent(ctx), "cuCtxSetCurrent");

	tprun_op *op = NULL;
	if (s.op_first)
		op = create_op(&s, w);
	rig_upload(&g, lat, shared, packed);
	if (!s.op_first)
		op = create_op(&s, w);
	tp_check(tprun_group_barrier(grp), "tprun_group_barrier");

	printf("# cgap: %s; device %d %s, CUDA driver %d.%d; tp 1, hidden %d, latent %d, shard %d, M 1..%d; "
	       "mailbox %s: %s\n",
	       tprun_version(), ordinal, name, drv / 1000, drv % 1000 / 10, HIDDEN, LATENT, HIDDEN, MAX_M,
	       tprun_op_backend(op), tprun_op_backend_reason(op));
	printf("# one graph = %d tprun_op_step_weight calls on one op (weight copy i, packed, %.1f MB each, %.0f MB in "
	       "one cuMemAlloc), captured on a non-blocking stream (thread-local), instantiated with flags 0 and "
	       "uploaded; %d warm-up and %d timed replays per M, an event pair around each\n",
	       g.k, g.packed_bytes / 1e6, g.k * g.packed_bytes / 1e6, s.warmup, s.replays);
	printf("# pools %s (%d rows), own weight %s, op %s the device memory, seed %llu\n",
	       s.blocks ? "blocks (step i at row i*M)" : "go (step i at row i % (17 - M))", g.rows,
	       s.own_weight ? "yes" : "no", s.op_first ? "created before" : "created after",
	       (unsigned long long)s.seed);
	printf("#  M  median_us   p90_us  err/tol  #wrong  ok\n");
	fflush(stdout);

	int ok = 1;
	for (int m = 1; m <= MAX_M; m++)
		ok &= run_m(&s, &g, op, &ref, m);

	tp_check(tprun_op_close(op), "tprun_op_close");
	cu_check(cu.MemFree(g.outs), "cuMemFree");
	cu_check(cu.MemFree(g.weights), "cuMemFree");
	cu_check(cu.MemFree(g.shared), "cuMemFree");
	cu_check(cu.MemFree(g.lat), "cuMemFree");
	cu_check(cu.DevicePrimaryCtxRelease(dev), "cuDevicePrimaryCtxRelease");
	tp_check(tprun_group_close(grp), "tprun_group_close");
	grp = NULL;
	if (!ok) {
		printf("# FAILED: wrong values (see #wrong)\n");
		return 1;
	}
	printf("# every block of every checked replay within tolerance\n");
	return 0;
}
