#!/bin/sh
# Builds lab/cgap/cgap against bin/libtprun.so (run from the repository
# root; it builds the library first when bin/libtprun.so is missing and Go
# is here). The program finds the library at run time beside itself or in
# bin/ two folders up, so bin/ and lab/cgap/cgap travel together.
set -eu
cd "$(dirname "$0")/../.."
if [ ! -f bin/libtprun.so ]; then
	go build -ldflags='-s -w' -buildmode=c-shared -o bin/libtprun.so ./cmd/libtprun
	rm -f bin/libtprun.h
fi
${CC:-gcc} -std=c11 -O2 -Wall -Wextra -Werror -I include \
	-o lab/cgap/cgap lab/cgap/cgap.c lab/cgap/dumpparams.c \
	-L bin -ltprun -Wl,-rpath,'$ORIGIN:$ORIGIN/../../bin' -ldl -lm
# The same program as a library (its main as cgap_main) for in_torch.py,
# which calls it from a Python process with and without PyTorch.
${CC:-gcc} -std=c11 -O2 -Wall -Wextra -Werror -I include -fPIC -shared -Dmain=cgap_main \
	-o lab/cgap/libcgap.so lab/cgap/cgap.c lab/cgap/dumpparams.c \
	-L bin -ltprun -Wl,-rpath,'$ORIGIN:$ORIGIN/../../bin' -ldl -lm
