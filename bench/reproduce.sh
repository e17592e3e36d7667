#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# reproduce.sh - run the standard benchmark sets and plot them (the sets of
# docs/perf-log/2026-11-21.md; docs/PERFORMANCE.md names each table's command).
#
#   bench/reproduce.sh [--build DIR] [--out DIR] [--img DIR] [--quick] [--only WHAT]
#
# WHAT: cluster | shm | knobs | delta | rma | all (default all). The cluster part needs an
# emulated cluster (testbed/ovl-cluster up --hosts 2 --rate 1gbit) and root;
# it leaves the cluster as it found it. The delta part (issue 3: delta
# send/receive kernels and the delta-size sweep) needs 4 hosts
# (testbed/ovl-cluster up --hosts 4 --rate 1gbit) and runs each command
# DELTA_RUNS times (default 5) into numbered CSVs. Before each run it waits until the
# machine is idle (other processes would steal the two cores the benchmark
# measures). CSVs go to --out (default results/perf), PNGs to --img
# (default: the --out directory).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=$ROOT/build-bench
OUT=$ROOT/results/perf
IMG=
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
    -h|--help) sed -n '2,17p' "$0"; exit 0 ;;
    *) echo "reproduce.sh: unknown option $1" >&2; exit 2 ;;
    esac
done

IMG=${IMG:-$OUT}
BENCH=$BUILD/bench/ovl-bench
CLUSTER=$ROOT/testbed/ovl-cluster
[ -x "$BENCH" ] || { echo "reproduce.sh: build first: cmake -S $ROOT -B $BUILD -DCMAKE_BUILD_TYPE=Release && cmake --build $BUILD --target ovl-bench" >&2; exit 2; }
mkdir -p "$OUT" "$IMG"

# wait_idle: bench/idle.sh
. "$ROOT/bench/idle.sh"

on_cluster() { "$CLUSTER" run --np 2 --ppn 1 -- "$@"; }
on_cluster2() { "$CLUSTER" run --np 2 --ppn 1 --timeout 170 -- "$@"; }
on_cluster4() { "$CLUSTER" run --np 4 --ppn 1 --timeout 170 -- "$@"; }
on_shm() { mpiexec -n 2 "$@"; }

# run WHERE NAME ARGS...: one benchmark, its table saved beside its CSV.
run() {
    local where=$1 name=$2; shift 2
    wait_idle
    echo "== $where: $name: $* (load average: $(cut -d' ' -f1-3 /proc/loadavg))"
    if ! "on_$where" "$BENCH" "$@" --csv "$OUT/$where-$name.csv" | tee "$OUT/$where-$name.txt"; then
        return 1
    fi
    [ "${NOPLOT:-0}" = 1 ] || "$PY" "$ROOT/bench/plot.py" "$OUT/$where-$name.csv" -o "$IMG/$where-$name.png"
}

if [ "$ONLY" = all ] || [ "$ONLY" = cluster ]; then
    "$CLUSTER" status -q || { echo "reproduce.sh: the cluster is down: $CLUSTER up --hosts 2 --rate 1gbit" >&2; exit 2; }
    run cluster latency-hiding latency-hiding --reps "$REPS" --marshal
    run cluster callback-latency callback-latency --reps "$CLREPS"
    # the progress thread under SCHED_FIFO (docs/PERFORMANCE.md, "A real-time progress thread")
    OVL_PROGRESS_PRIORITY=1 run cluster callback-priority callback-latency --reps "$CLREPS" \
        --lateness 10,25,50 --no-spin-thread
    run cluster overview overview
    run cluster wakeup-cost wakeup-cost
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
    for v in 10 30 100; do
        OVL_LATENESS_US=$v run cluster "knob-lateness$v" $K
    done
    for v in 16k 64k 256k; do
        OVL_FRAGMENT_SIZE=$v run cluster "knob-frag$v" $K
    done
    for v in 2 8 32; do
        OVL_STREAM_WINDOW=$v run cluster "knob-win$v" $K
    done
fi
if [ "$ONLY" = all ] || [ "$ONLY" = delta ]; then
    # issue 3: every kernel x variant on 4 hosts, the pair sweep on 2 of them;
    # each invocation stays under 2 minutes. Each command is repeated until
    # DELTA_RUNS (default 5) invocations succeeded, at most twice as many
    # attempts; a failed invocation (crash, wrong data, hang) keeps its output
    # as NAME.txt/NAME.csv.failed and is listed in $OUT/delta-failures.txt.
    # An invocation that fails after printing "CSV written to" (so after all
    # its measurements) is listed there too, but its data is kept.
    "$CLUSTER" status -q || { echo "reproduce.sh: the cluster is down: $CLUSTER up --hosts 4 --rate 1gbit" >&2; exit 2; }
    RUNS=${DELTA_RUNS:-5}
    DREPS=5
    [ "$REPS" = 5 ] && DREPS=3 # --quick
    export NOPLOT=1
    : > "$OUT/delta-failures.txt"
    repeat() { # repeat WHERE KIND ARGS...
        local where=$1 kind=$2 ok=0 try=0; shift 2
        rm -f "$OUT/$where-$kind"-[0-9]*.csv "$OUT/$where-$kind"-[0-9]*.csv.failed
        while [ $ok -lt "$RUNS" ] && [ $try -lt $((2 * RUNS)) ]; do
            try=$((try + 1))
            if run "$where" "$kind-$try" "$@"; then
                ok=$((ok + 1))
            elif grep -q "^CSV written to" "$OUT/$where-$kind-$try.txt"; then
                # every measurement finished and was verified, the CSV is
                # closed; the failure came after it (ovl_finalize, MPI_Finalize)
                echo "$where $kind-$try: failed after its CSV was complete; data kept ($*)" |
                    tee -a "$OUT/delta-failures.txt"
                ok=$((ok + 1))
            else
                echo "$where $kind-$try: failed ($*)" | tee -a "$OUT/delta-failures.txt"
                mv -f "$OUT/$where-$kind-$try.csv" "$OUT/$where-$kind-$try.csv.failed" 2>/dev/null || true
            fi
        done
    }
    repeat cluster4 delta delta --reps "$DREPS"
    # the same with mpi/part waiting in MPI_Test + 50 us sleeps instead of
    # spinning: what the spinning waits cost on the shared cores
    RUNS=$(( (RUNS + 1) / 2 )) repeat cluster4 delta-sleep delta --reps "$DREPS" --mpi-wait sleep
    repeat cluster2 delta-sweep delta-sweep --reps "$DREPS"
    repeat cluster4 overview4 overview --reps "$DREPS"
    # medians over the successful runs (bench/delta_summary.py), then the plots
    for kind in delta delta-sleep delta-sweep overview4; do
        where=cluster4; [ $kind = delta-sweep ] && where=cluster2
        ls "$OUT/$where-$kind"-[0-9]*.csv >/dev/null 2>&1 || continue
        "$PY" "$ROOT/bench/delta_summary.py" "$OUT/$where-$kind"-[0-9]*.csv \
            -o "$OUT/cluster-$kind.csv" | tee "$OUT/cluster-$kind-summary.md"
    done
    for kind in delta delta-sleep delta-sweep; do
        [ -f "$OUT/cluster-$kind.csv" ] && "$PY" "$ROOT/bench/plot.py" "$OUT/cluster-$kind.csv" -o "$IMG/cluster-$kind.png"
    done
fi
if [ "$ONLY" = all ] || [ "$ONLY" = rma ]; then
    # issue 4: one-sided get/put (HUNT Table 2, Figures 8-9) on 2 hosts,
    # 1 Gbit/s; tables and CSVs only
    "$CLUSTER" status -q || { echo "reproduce.sh: the cluster is down: $CLUSTER up --hosts 2 --rate 1gbit" >&2; exit 2; }
    export NOPLOT=1
    # the model's figures for this link: calibrate on it once, then every
    # run loads that database (the split decisions depend on it)
    CAL=$BUILD/tools/ovl-calibrate
    [ -x "$CAL" ] || { echo "reproduce.sh: build the calibrator: cmake --build $BUILD --target ovl-calibrate" >&2; exit 2; }
    wait_idle
    on_cluster2 "$CAL" -o "$OUT/cluster2.perfdb" | tee "$OUT/cluster2-calibrate.txt"
    export OVL_PERFDB=$OUT/cluster2.perfdb
    run cluster2 rma-dds dds --reps $((REPS * 50))
    run cluster2 rma-decomposition decomposition --reps "$REPS"
fi
