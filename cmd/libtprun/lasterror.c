// The per-thread last error of the C interface (tprun.h, "STATUS AND THE
// LAST ERROR"). The Go side stores it through tprun__set_error on the
// thread that called into the library: an exported Go function runs on its
// caller's thread, and so does every C call it makes.

#include <stdlib.h>
#include <string.h>

#include "tprun.h"
#include "lasterror.h"

static _Thread_local char *last_msg;
static _Thread_local int *last_ranks;
static _Thread_local int last_nranks;

void tprun__set_error(char *msg, const int *ranks, int nranks) {
	free(last_msg);
	last_msg = msg;
	free(last_ranks);
	last_ranks = NULL;
	last_nranks = 0;
	if (nranks > 0) {
		last_ranks = malloc((size_t)nranks * sizeof(int));
		if (last_ranks != NULL) {
			memcpy(last_ranks, ranks, (size_t)nranks * sizeof(int));
			last_nranks = nranks;
		}
	}
}

const char *tprun_last_error(void) { return last_msg != NULL ? last_msg : ""; }

int tprun_last_error_rank(void) { return last_nranks > 0 ? last_ranks[0] : -1; }

int tprun_last_error_ranks(int *ranks, int cap) {
	if (ranks != NULL) {
		for (int i = 0; i < last_nranks && i < cap; i++) {
			ranks[i] = last_ranks[i];
		}
	}
	return last_nranks;
}

const char *tprun_status_name(int status) {
	switch (status) {
	case TPRUN_OK:
		return "TPRUN_OK";
	case TPRUN_EINVAL:
		return "TPRUN_EINVAL";
	case TPRUN_EABORTED:
		return "TPRUN_EABORTED";
	case TPRUN_ETIMEOUT:
		return "TPRUN_ETIMEOUT";
	case TPRUN_EUNAVAILABLE:
		return "TPRUN_EUNAVAILABLE";
	case TPRUN_EBUSY:
		return "TPRUN_EBUSY";
	case TPRUN_ECLOSED:
		return "TPRUN_ECLOSED";
	case TPRUN_EINTERNAL:
		return "TPRUN_EINTERNAL";
	}
	return "unknown status";
}

int tprun_abi_version(void) { return TPRUN_ABI_VERSION; }
