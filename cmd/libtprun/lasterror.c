// The per-thread last error of the C interface (tprun.h, "STATUS AND THE
// LAST ERROR"). The Go side stores it through tprun__set_error on the
// thread that called into the library: an exported Go function runs on its
// caller's thread, and so does every C call it makes.

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "tprun.h"
#include "lasterror.h"

// The state lives in a thread-specific slot whose destructor frees it when
// the thread exits; the thread-local pointer is its fast path.
struct last_error {
	char *msg;
	int *ranks;
	int nranks;
};

static pthread_key_t key;
static pthread_once_t key_once = PTHREAD_ONCE_INIT;
static _Thread_local struct last_error *mine;

static void free_state(void *p) {
	struct last_error *e = p;
	free(e->msg);
	free(e->ranks);
	free(e);
}

static void make_key(void) { pthread_key_create(&key, free_state); }

void tprun__set_error(char *msg, const int *ranks, int nranks) {
	if (mine == NULL) {
		pthread_once(&key_once, make_key);
		mine = calloc(1, sizeof *mine);
		if (mine == NULL) {
			free(msg);
			return;
		}
		pthread_setspecific(key, mine);
	}
	free(mine->msg);
	mine->msg = msg;
	free(mine->ranks);
	mine->ranks = NULL;
	mine->nranks = 0;
	if (nranks > 0) {
		mine->ranks = malloc((size_t)nranks * sizeof(int));
		if (mine->ranks != NULL) {
			memcpy(mine->ranks, ranks, (size_t)nranks * sizeof(int));
			mine->nranks = nranks;
		}
	}
}

const char *tprun_last_error(void) { return mine != NULL && mine->msg != NULL ? mine->msg : ""; }

int tprun_last_error_rank(void) { return mine != NULL && mine->nranks > 0 ? mine->ranks[0] : -1; }

int tprun_last_error_ranks(int *ranks, int cap) {
	if (mine == NULL) {
		return 0;
	}
	if (ranks != NULL) {
		for (int i = 0; i < mine->nranks && i < cap; i++) {
			ranks[i] = mine->ranks[i];
		}
	}
	return mine->nranks;
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
