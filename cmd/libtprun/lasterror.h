// Declarations shared by the cgo preamble and lasterror.c: the types that
// let the exported Go functions carry tprun.h's const qualifiers (cgo drops
// qualifiers, but keeps a typedef's name in the prototypes it writes, so
// the compiler checks them against tprun.h), and the setter of the last
// error.
#ifndef TPRUN_LASTERROR_H
#define TPRUN_LASTERROR_H

#include <stdint.h>

typedef const char tprun__cchar;
typedef const uint16_t tprun__cu16;
typedef const void *tprun__cptr;
typedef const struct tprun_group tprun__cgroup;
typedef const struct tprun_op tprun__cop;

// tprun__set_error makes msg (malloc'd; the library frees it) and the
// blamed ranks (copied) the calling thread's last error.
void tprun__set_error(char *msg, const int *ranks, int nranks);

#endif
