#!/usr/bin/env bash
# Port three Parallel Research Kernels to ovl and build them, out of the tree.
#
#   bench/ports/prk/build.sh PRK_SRC OUT_DIR OVL_BUILD_DIR
#
# PRK_SRC        a checkout of https://github.com/ParRes/Kernels
# OUT_DIR        where the copied and ported sources and the binaries go
#                (outside the ovl tree: PRK's code is never part of ovl)
# OVL_BUILD_DIR  an ovl CMake build directory holding libovl.a
#
# Binaries: OUT_DIR/bin/{transpose-plain,transpose-ovl,transpose-ovl-irecv,
# stencil-plain,stencil-ovl,stencil-ovl-isend,transpose-rma-plain,
# transpose-rma-plan}. Plain and ovl binaries get the same
# compiler flags: PRK's GCC flags (common/make.defs.gcc: -O3 -mtune=native
# -ffast-math -Wall, C11) and the defines of PRK's Makefiles with their
# default values. Two warnings that PRK's own, unchanged code raises under
# -Wall (unused static functions in par-res-kern_mpi.h, maybe-uninitialized
# buffer pointers that are set when Num_procs > 1) are switched off; any
# other compiler output fails the build (ALLOW_WARNINGS=1 to only report).
# Environment: MPICC (default mpicc), PRK_CFLAGS (replaces the flags above).
set -euo pipefail

if [ $# -ne 3 ]; then
    echo "usage: $0 PRK_SRC OUT_DIR OVL_BUILD_DIR" >&2
    exit 2
fi
here=$(cd "$(dirname "$0")" && pwd)
ovl_root=$(cd "$here/../../.." && pwd)
prk=$1
out=$2
ovlbuild=$(cd "$3" && pwd)

lib=$ovlbuild/libovl.a
if [ ! -f "$lib" ]; then
    echo "build.sh: no $lib (build ovl first: cmake -S $ovl_root -B $ovlbuild" \
         "-DCMAKE_BUILD_TYPE=Release && cmake --build $ovlbuild -j2)" >&2
    exit 2
fi

python3 "$here/port.py" "$prk" "$out"
out=$(cd "$out" && pwd)

MPICC=${MPICC:-mpicc}
cflags=${PRK_CFLAGS:--std=c11 -O3 -mtune=native -ffast-math -Wall -Wno-unused-function -Wno-maybe-uninitialized}
# PRK's Makefiles: PROG_ENV=-DMPI (common/MPI.defs) and each kernel's TUNEFLAGS.
common_defs="-DMPI -DVERBOSE=0 -DRESTRICT_KEYWORD=0"
transpose_defs="-DSYNCHRONOUS=0"
stencil_defs="-DDOUBLE=1 -DRADIUS=2 -DSTAR=1 -DLOOPGEN=0"
ovl_inc="-I$ovl_root/include"
ovl_libs="$lib -lpthread -lm"

mkdir -p "$out/bin"
warnings=0
compile() { # name source defines include-flags libraries
    local name=$1 src=$2 defs=$3 incs=$4 libs=$5
    local log
    # shellcheck disable=SC2086
    if ! log=$($MPICC $cflags $common_defs $defs -I"$out/include" $incs \
            "$src" "$out/common/wtime.c" "$out/common/MPI_bail_out.c" \
            $libs -o "$out/bin/$name" 2>&1); then
        printf '%s\n' "$log" >&2
        echo "build.sh: $name failed to compile" >&2
        exit 1
    fi
    if [ -n "$log" ]; then
        printf '%s\n' "$log" >&2
        echo "build.sh: $name: compiler output above" >&2
        warnings=$((warnings + 1))
    fi
    echo "built $out/bin/$name"
}

compile transpose-plain   "$out/transpose/plain/transpose.c" "$transpose_defs" "" -lm
compile transpose-ovl     "$out/transpose/ovl/transpose.c"   "$transpose_defs" "$ovl_inc" "$ovl_libs"
compile transpose-ovl-irecv "$out/transpose/ovl-irecv/transpose.c" "$transpose_defs" "$ovl_inc" "$ovl_libs"
compile stencil-plain     "$out/stencil/plain/stencil.c"     "$stencil_defs" "" -lm
compile stencil-ovl       "$out/stencil/ovl/stencil.c"       "$stencil_defs" "$ovl_inc" "$ovl_libs"
compile stencil-ovl-isend "$out/stencil/ovl-isend/stencil.c" "$stencil_defs" "$ovl_inc" "$ovl_libs"
# MPIRMA/Transpose's Makefile adds no define of its own
compile transpose-rma-plain "$out/transpose-rma/plain/transpose.c" "" "" -lm
compile transpose-rma-plan  "$out/transpose-rma/plan/transpose.c"  "" "$ovl_inc" "$ovl_libs"

if [ "$warnings" -ne 0 ] && [ "${ALLOW_WARNINGS:-0}" != 1 ]; then
    echo "build.sh: $warnings binaries built with warnings (ALLOW_WARNINGS=1 accepts them)" >&2
    exit 1
fi
