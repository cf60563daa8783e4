#include <stdlib.h>
#include "collectives.h"

tprun__collectives_holder *tprun__collectives_hold(const tprun_collectives *c, void *user) {
	tprun__collectives_holder *h = malloc(sizeof *h);
	if (h != NULL) {
		h->c = *c;
		h->user = user;
	}
	return h;
}

int tprun__call_allgather(const tprun__collectives_holder *h, const void *in, size_t n, void *out) {
	return h->c.allgather(h->user, in, n, out);
}

int tprun__call_barrier(const tprun__collectives_holder *h) {
	return h->c.barrier(h->user);
}
