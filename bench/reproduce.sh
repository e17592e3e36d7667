#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# reproduce.sh - run every measurement of docs/PERFORMANCE.md and plot it.
#
#   bench/reproduce.sh [--build DIR] [--out DIR] [--img DIR] [--quick] [--only WHAT]
#
# WHAT: cluster | shm | knobs | all (default all). The cluster part needs an
# emulated cluster (tools/ovl-cluster up --hosts 2 --rate 1gbit) and root;
# it leaves the cluster as it found it. Before each run it waits until the
# machine is idle (other processes would steal the two cores the benchmark
# measures). CSVs go to --out (default results/perf), PNGs to --img
# (default docs/img).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=$ROOT/build-bench
OUT=$ROOT/results/perf
IMG=$ROOT/docs/img
ONLY=all
REPS=20
CLREPS=1000
PY=python3
/usr/bin/python3 -c 'import matplotlib' 2>/dev/null && PY=/usr/bin/python3

while [ $# -gt 0 ]; do
    case $1 in
    --build) BUILD=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    --img) IMG=$2; shift 2 ;;
    --quick) REPS=5; CLREPS=200; shift ;;
    --only) ONLY=$2; shift 2 ;;
    -h|--help) sed -n '2,12p' "$0"; exit 0 ;;
    *) echo "reproduce.sh: unknown option $1" >&2; exit 2 ;;
    esac
done

BENCH=$BUILD/bench/ovl-bench
CLUSTER=$ROOT/tools/ovl-cluster
[ -x "$BENCH" ] || { echo "reproduce.sh: build first: cmake -S $ROOT -B $BUILD -DCMAKE_BUILD_TYPE=Release && cmake --build $BUILD --target ovl-bench" >&2; exit 2; }
mkdir -p "$OUT" "$IMG"

# Wait until both cores are (nearly) idle for 3 s in a row, at most 10 min.
wait_idle() {
    local quiet=0 tries=0
    while [ $quiet -lt 3 ] && [ $tries -lt 600 ]; do
        read -r _ u1 n1 s1 i1 w1 q1 sq1 st1 _ < /proc/stat
        sleep 1
        read -r _ u2 n2 s2 i2 w2 q2 sq2 st2 _ < /proc/stat
        local busy=$(( (u2+n2+s2+q2+sq2+st2) - (u1+n1+s1+q1+sq1+st1) ))
        local idle=$(( (i2+w2) - (i1+w1) ))
        if [ $(( 100 * idle / (busy + idle + 1) )) -ge 90 ]; then
            quiet=$((quiet + 1))
        else
            quiet=0
        fi
        tries=$((tries + 1))
    done
}

on_cluster() { "$CLUSTER" run --np 2 --ppn 1 -- "$@"; }
on_shm() { mpiexec -n 2 "$@"; }

# run WHERE NAME ARGS...: one benchmark, its table saved beside its CSV.
run() {
    local where=$1 name=$2; shift 2
    wait_idle
    echo "== $where: $name: $*"
    "on_$where" "$BENCH" "$@" --csv "$OUT/$where-$name.csv" | tee "$OUT/$where-$name.txt"
    [ "${NOPLOT:-0}" = 1 ] || "$PY" "$ROOT/bench/plot.py" "$OUT/$where-$name.csv" -o "$IMG/$where-$name.png"
}

if [ "$ONLY" = all ] || [ "$ONLY" = cluster ]; then
    "$CLUSTER" status -q || { echo "reproduce.sh: the cluster is down: $CLUSTER up --hosts 2 --rate 1gbit" >&2; exit 2; }
    run cluster latency-hiding latency-hiding --reps "$REPS" --marshal
    run cluster callback-latency callback-latency --reps "$CLREPS"
    run cluster overview overview
fi
if [ "$ONLY" = all ] || [ "$ONLY" = shm ]; then
    run shm latency-hiding latency-hiding --reps "$REPS" --marshal
    run shm callback-latency callback-latency --reps "$CLREPS"
    run shm overview overview
fi
if [ "$ONLY" = all ] || [ "$ONLY" = knobs ]; then
    # one knob at a time, the others at their defaults; ovl variants only; CSV only
    export NOPLOT=1
    K="latency-hiding --variants ovl,ovl-marshal --sizes 64k,256k,1m --reps $REPS"
    for v in 10 25 50 100 200; do
        OVL_POLL_MAX_US=$v run cluster "knob-poll$v" $K
    done
    for v in 0 20 100; do
        OVL_SPIN_US=$v run cluster "knob-spin$v" $K
    done
    for v in 16k 64k 256k; do
        OVL_FRAGMENT_SIZE=$v run cluster "knob-frag$v" $K
    done
    for v in 2 8 32; do
        OVL_STREAM_WINDOW=$v run cluster "knob-win$v" $K
    done
fi
