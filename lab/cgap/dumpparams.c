// cgap_dump_graph: writes the parameter block of every kernel node of a
// CUDA graph (the first kernel argument, 248 bytes: tprun_skinny_params)
// as one hex line per node, then each kernel node's function and launch
// attributes (cluster, scheduling policy, priority, shared memory
// carveout) and the graph's edges with their ports and types, for
// comparing the steps one process captured with another's field by field.
// Part of libcgap.so and cgap.
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
	// The kernel nodes' functions and launch attributes (a driver without
	// an entry point prints what it has).
	int (*getName)(const char **, void *) = (int (*)(const char **, void *))dlsym(lib, "cuFuncGetName");
	int (*getAttr)(void *, int, void *) = (int (*)(void *, int, void *))dlsym(lib, "cuGraphKernelNodeGetAttribute");
	for (size_t i = 0; i < n; ++i) {
		int t = -1;
		if (nodeType(nodes[i], &t) != 0 || t != 0) continue;
		cgap_knp_v2 p;
		memset(&p, 0, sizeof p);
		if (kparams(nodes[i], &p) != 0) return -6;
		const char *name = "?";
		if (getName != NULL && p.func != NULL) getName(&name, p.func);
		fprintf(f, "node %zu function %s", i, name);
		// CU_LAUNCH_ATTRIBUTE_*: 4 cluster dimension, 5 scheduling
		// policy, 8 priority, 14 shared memory carveout (the value is a
		// 64-byte union; its first words hold these).
		static const int ids[] = {4, 5, 8, 14};
		static const char *names[] = {"cluster", "policy", "priority", "carveout"};
		for (int a = 0; getAttr != NULL && a < 4; ++a) {
			unsigned v[16];
			memset(v, 0, sizeof v);
			int rc = getAttr(nodes[i], ids[a], v);
			if (rc != 0)
				fprintf(f, " %s (error %d)", names[a], rc);
			else if (ids[a] == 4)
				fprintf(f, " %s %ux%ux%u", names[a], v[0], v[1], v[2]);
			else
				fprintf(f, " %s %u", names[a], v[0]);
		}
		fprintf(f, "\n");
	}
	// The edges, with CUgraphEdgeData (from port, to port, type) where the
	// driver has cuGraphGetEdges_v2: programmatic edges are PDL's.
	int (*edges2)(void *, void **, void **, unsigned char *, size_t *) =
	    (int (*)(void *, void **, void **, unsigned char *, size_t *))dlsym(lib, "cuGraphGetEdges_v2");
	size_t ne = 0;
	if (edges2 != NULL && edges2(graph, NULL, NULL, NULL, &ne) == 0 && ne > 0) {
		void **from = calloc(ne, sizeof *from), **to = calloc(ne, sizeof *to);
		unsigned char *data = calloc(ne, 8);
		if (edges2(graph, from, to, data, &ne) == 0) {
			for (size_t e = 0; e < ne; ++e) {
				size_t a = n, b = n;
				for (size_t i = 0; i < n; ++i) {
					if (nodes[i] == from[e]) a = i;
					if (nodes[i] == to[e]) b = i;
				}
				fprintf(f, "edge %zu -> %zu from_port %u to_port %u type %u\n", a, b, data[8 * e], data[8 * e + 1],
					data[8 * e + 2]);
			}
		}
		free(from);
		free(to);
		free(data);
	}
	fclose(f);
	free(nodes);
	return (int)n;
}
