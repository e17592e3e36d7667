#!/usr/bin/env bash
# Port the Mantevo HPCCG mini-app to ovl and build it, out of the tree.
#
#   bench/ports/hpccg/build.sh HPCCG_SRC OUT_DIR OVL_BUILD_DIR
#
# HPCCG_SRC      a checkout of https://github.com/Mantevo/HPCCG
# OUT_DIR        where the copied and ported sources and the binaries go
#                (outside the ovl tree: HPCCG's code is never part of ovl)
# OVL_BUILD_DIR  an ovl CMake build directory holding libovl.a
#
# Binaries: OUT_DIR/bin/hpccg-plain (HPCCG unchanged), OUT_DIR/bin/hpccg-ovl
# (the port) and OUT_DIR/bin/hpccg-ovl-aligned (the port with p allocated
# by ovl_alloc: not HPCCG's layout, a comparison), all with the same
# compiler flags: HPCCG's Makefile's (CPP_OPT_FLAGS = -O3 -ftree-vectorize,
# USE_MPI = -DUSING_MPI, its MPI setting; no OpenMP, its default). The ovl
# binaries add -I include and libovl.a -lpthread. Any compiler output fails
# the build (ALLOW_WARNINGS=1 only reports it). Environment: MPICXX
# (default mpicxx), HPCCG_CXXFLAGS (replaces the flags above).
set -euo pipefail

if [ $# -ne 3 ]; then
    echo "usage: $0 HPCCG_SRC OUT_DIR OVL_BUILD_DIR" >&2
    exit 2
fi
here=$(cd "$(dirname "$0")" && pwd)
ovl_root=$(cd "$here/../../.." && pwd)
src=$1
out=$2
ovlbuild=$(cd "$3" && pwd)

lib=$ovlbuild/libovl.a
if [ ! -f "$lib" ]; then
    echo "build.sh: no $lib (build ovl first: cmake -S $ovl_root -B $ovlbuild" \
         "-DCMAKE_BUILD_TYPE=Release && cmake --build $ovlbuild -j2)" >&2
    exit 2
fi

python3 "$here/port.py" "$src" "$out"
out=$(cd "$out" && pwd)

MPICXX=${MPICXX:-mpicxx}
cxxflags=${HPCCG_CXXFLAGS:--O3 -ftree-vectorize}
defs="-DUSING_MPI"
# HPCCG's Makefile: TEST_CPP
sources="main.cpp generate_matrix.cpp read_HPC_row.cpp compute_residual.cpp
         mytimer.cpp dump_matlab_matrix.cpp HPC_sparsemv.cpp HPCCG.cpp waxpby.cpp
         ddot.cpp make_local_matrix.cpp exchange_externals.cpp YAML_Element.cpp
         YAML_Doc.cpp"

mkdir -p "$out/bin"
warnings=0
compile() { # variant extra-flags libraries
    local variant=$1 incs=$2 libs=$3
    local log files=()
    for f in $sources; do files+=("$out/$variant/$f"); done
    # shellcheck disable=SC2086
    if ! log=$($MPICXX $cxxflags $defs -I"$out/$variant" $incs "${files[@]}" \
            $libs -lm -o "$out/bin/hpccg-$variant" 2>&1); then
        printf '%s\n' "$log" >&2
        echo "build.sh: hpccg-$variant failed to compile" >&2
        exit 1
    fi
    if [ -n "$log" ]; then
        printf '%s\n' "$log" >&2
        echo "build.sh: hpccg-$variant: compiler output above" >&2
        warnings=$((warnings + 1))
    fi
    echo "built $out/bin/hpccg-$variant"
}

compile plain "" ""
compile ovl "-I$ovl_root/include" "$lib -lpthread"
compile ovl-aligned "-I$ovl_root/include" "$lib -lpthread"

if [ "$warnings" -ne 0 ] && [ "${ALLOW_WARNINGS:-0}" != 1 ]; then
    echo "build.sh: $warnings binaries built with warnings (ALLOW_WARNINGS=1 accepts them)" >&2
    exit 1
fi
