#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# What a user does to adopt ovl, checked end to end (README, "Using it from
# your project"): install the built library into a fresh prefix, then build
# one example against the installed copy twice, once as a CMake project with
# find_package(ovl) and once with plain mpicc and pkg-config, and run both
# under mpiexec with 2 ranks (the example verifies its own data); and a C++
# program that includes ovl.h compiles and links.
#
#   install_check.sh BUILD_DIR SOURCE_DIR MPICC MPIEXEC [MPIEXEC flags...]
set -eu
build=$1 src=$2 mpicc=$3 mpiexec=$4
shift 4
work=$(mktemp -d "${TMPDIR:-/tmp}/ovl-install-check.XXXXXX")
trap 'rm -rf "$work"' EXIT
prefix=$work/prefix
example=$src/examples/rma_halo.c

echo "== install into $prefix"
cmake --install "$build" --prefix "$prefix" >"$work/install.log" ||
    { cat "$work/install.log"; echo "FAIL: cmake --install"; exit 1; }
libdir=$(dirname "$(find "$prefix" -name ovl.pc | head -n 1)")
[ -n "$libdir" ] || { echo "FAIL: ovl.pc not installed"; exit 1; }
libdir=$(dirname "$libdir")

echo "== a CMake project: find_package(ovl), target_link_libraries(... ovl::ovl)"
mkdir -p "$work/app"
cp "$example" "$work/app/app.c"
cat >"$work/app/CMakeLists.txt" <<'EOF'
cmake_minimum_required(VERSION 3.20)
project(app C)
find_package(ovl REQUIRED)
add_executable(app app.c)
target_link_libraries(app PRIVATE ovl::ovl m)
EOF
cmake -S "$work/app" -B "$work/app/build" -DCMAKE_PREFIX_PATH="$prefix" \
    -DMPI_C_COMPILER="$mpicc" >"$work/app.log" 2>&1 &&
    cmake --build "$work/app/build" >>"$work/app.log" 2>&1 ||
    { cat "$work/app.log"; echo "FAIL: CMake consumer did not build"; exit 1; }
"$mpiexec" "$@" -n 2 "$work/app/build/app" ||
    { echo "FAIL: CMake consumer run"; exit 1; }

echo "== plain mpicc with pkg-config"
flags=$(PKG_CONFIG_PATH="$libdir/pkgconfig" pkg-config --cflags --libs ovl) ||
    { echo "FAIL: pkg-config ovl"; exit 1; }
# shellcheck disable=SC2086 # flags are words
"$mpicc" "$example" $flags -lm -o "$work/app_pc" ||
    { echo "FAIL: mpicc with pkg-config flags: $flags"; exit 1; }
LD_LIBRARY_PATH="$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
    "$mpiexec" "$@" -n 2 "$work/app_pc" ||
    { echo "FAIL: pkg-config consumer run"; exit 1; }
# C++ programs include the same header (extern "C", no C-only syntax).
mpicxx=$(printf '%s' "$mpicc" | sed 's/mpicc\([^/]*\)$/mpicxx\1/')
if [ "$mpicxx" != "$mpicc" ] && command -v "$mpicxx" >/dev/null 2>&1; then
    echo "== C++: $mpicxx includes ovl.h"
    printf '#include <ovl.h>\nint main() { return ovl_strerror(OVL_SUCCESS) == nullptr; }\n' \
        >"$work/app.cpp"
    # shellcheck disable=SC2086
    # (MPI's own C++ bindings, which Open MPI's mpi.h pulls in, are not
    # ovl's to check: left out, as most C++ MPI codes leave them out)
    "$mpicxx" -Wall -Wextra -Werror -DOMPI_SKIP_MPICXX -DMPICH_SKIP_MPICXX "$work/app.cpp" \
        $flags -o "$work/app_cxx" ||
        { echo "FAIL: ovl.h in C++"; exit 1; }
else
    echo "== C++: no MPI C++ compiler next to $mpicc, not checked"
fi
echo "install_check: ok"
