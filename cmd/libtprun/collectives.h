// The calls from Go into a caller's tprun_collectives (collectives.c): cgo
// cannot call a C function pointer itself. The callbacks and the caller's
// user pointer live in C memory (a holder), so that no Go value holds
// either.
#ifndef TPRUN_COLLECTIVES_H
#define TPRUN_COLLECTIVES_H

#include <stddef.h>
#include "tprun.h"

// The const-qualified type of the exported function's argument (see
// lasterror.h for why).
typedef const tprun_collectives tprun__ccollectives;

typedef struct tprun__collectives_holder {
	tprun_collectives c;
	void *user;
} tprun__collectives_holder;

// tprun__collectives_hold copies c and user into a new holder (malloc'd;
// free it with free), or returns NULL when out of memory.
tprun__collectives_holder *tprun__collectives_hold(const tprun_collectives *c, void *user);

int tprun__call_allgather(const tprun__collectives_holder *h, const void *in, size_t n, void *out);
int tprun__call_barrier(const tprun__collectives_holder *h);

#endif
