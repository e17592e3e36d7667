#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# ctest wrapper around testbed/ovl-cluster for the `cluster` fixture:
#   cluster.sh up   TOOL STAMP [up options]    bring the emulated cluster up
#   cluster.sh run  TOOL STAMP [run options]   run a program on it
#   cluster.sh down TOOL STAMP                 take it down if `up` created it
# Exit code 77 (ctest: skipped) whenever the cluster cannot be used here; the
# reason is printed. A cluster that was already up (someone else's) is used
# as it is and left up.
set -u
mode=$1 tool=$2 stamp=$3
shift 3
if [ ! -x "$tool" ]; then
    echo "cluster.sh: $tool is missing or not executable: skipping"
    exit 77
fi
case $mode in
up)
    if "$tool" status -q >/dev/null 2>&1; then
        echo "cluster.sh: the cluster is already up: using it (and leaving it up)"
        "$tool" status
        exit 0
    fi
    "$tool" up "$@"
    rc=$?
    [ $rc -eq 0 ] && : >"$stamp"
    [ $rc -eq 77 ] && echo "cluster.sh: ovl-cluster cannot run here (exit 77): skipping"
    exit $rc
    ;;
run)
    if ! "$tool" status -q >/dev/null 2>&1; then
        echo "cluster.sh: the cluster is not up (setup skipped or failed): skipping"
        exit 77
    fi
    exec "$tool" run "$@"
    ;;
down)
    if [ -e "$stamp" ]; then
        rm -f "$stamp"
        exec "$tool" down
    fi
    echo "cluster.sh: the cluster was not brought up by this test run: leaving it alone"
    exit 0
    ;;
*)
    echo "cluster.sh: unknown mode '$mode'" >&2
    exit 2
    ;;
esac
