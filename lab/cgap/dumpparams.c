// cgap_dump_graph: writes the parameter block of every kernel node of a
// CUDA graph (the first kernel argument, 248 bytes: tprun_skinny_params)
// as one hex line per node, for comparing the steps one process captured
// with another's field by field. Part of libcgap.so and cgap.
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
	void *func;
	unsigned gx, gy, gz, bx, by, bz, smem;
	void **kernelParams;
	void **extra;
	void *kern;
	void *ctx;
} cgap_knp_v2;

int cgap_dump_graph(void *graph, const char *path, int bytes) {
	void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
	if (lib == NULL) return -1;
	int (*getNodes)(void *, void **, size_t *) = (int (*)(void *, void **, size_t *))dlsym(lib, "cuGraphGetNodes");
	int (*nodeType)(void *, int *) = (int (*)(void *, int *))dlsym(lib, "cuGraphNodeGetType");
	int (*kparams)(void *, cgap_knp_v2 *) = (int (*)(void *, cgap_knp_v2 *))dlsym(lib, "cuGraphKernelNodeGetParams_v2");
	if (getNodes == NULL || nodeType == NULL || kparams == NULL) return -2;
	size_t n = 0;
	if (getNodes(graph, NULL, &n) != 0) return -3;
	void **nodes = calloc(n ? n : 1, sizeof *nodes);
	if (getNodes(graph, nodes, &n) != 0) return -4;
	FILE *f = fopen(path, "w");
	if (f == NULL) return -5;
	for (size_t i = 0; i < n; ++i) {
		int t = -1;
		if (nodeType(nodes[i], &t) != 0 || t != 0) continue;  // CU_GRAPH_NODE_TYPE_KERNEL
		cgap_knp_v2 p;
		memset(&p, 0, sizeof p);
		if (kparams(nodes[i], &p) != 0) return -6;
		fprintf(f, "node %zu grid %u block %u smem %u:", i, p.gx, p.bx, p.smem);
		const unsigned char *b = p.kernelParams ? (const unsigned char *)p.kernelParams[0] : NULL;
		for (int j = 0; b != NULL && j < bytes; ++j) fprintf(f, "%s%02x", j % 8 ? "" : " ", b[j]);
		fprintf(f, "\n");
	}
	fclose(f);
	free(nodes);
	return (int)n;
}
