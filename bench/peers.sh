#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# peers.sh - measure the exchange variants against mpi-async, MPICH's own
# progress thread, which needs a process of its own.
#
#   bench/peers.sh [options] [--] latency-hiding|overview [ARGS...]
#
# MPICH starts its asynchronous progress thread at MPI_Init when the ranks
# see MPIR_CVAR_ASYNC_PROGRESS=1, and the thread then spins on the cores of
# everything the process measures. So each round runs the command twice: once
# as usual (the other variants, and the bound), once with the variable set and
# only mpi-async (latency-hiding --variants mpi-async, overview --mpi-async).
# ARGS go to both runs. After R rounds it prints, per variant and payload, the
# median over the rounds (and the range of util), and writes OUT/median.csv in
# the command's own CSV format (bench/plot.py draws it when matplotlib is there).
#
# Options:
#   -r, --rounds R     rounds (default 3)
#   -o, --out DIR      where the CSVs and tables go (default results/peers-COMMAND)
#   -b, --build DIR    build directory holding bench/ovl-bench (default build)
#   -l, --launch CMD   how to start 2 ranks (default "testbed/ovl-cluster run --np 2
#                      --pin --"; e.g. "mpiexec -n 2" on one node)
#   --variants LIST    latency-hiding: the variants of the normal runs (default the
#                      command's default); mpi-async is always the other run
#   --wait-idle        before each run, wait (at most IDLE_MAX s, default 600) until
#                      the CPUs are 90 % idle for 3 s: the bound needs an idle machine
#   --merge-only       only merge the CSVs already in OUT
#   -h, --help         this text
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
ROUNDS=3
OUT=
BUILD=$ROOT/build
LAUNCH="$ROOT/testbed/ovl-cluster run --np 2 --pin --"
VARIANTS=
WAIT_IDLE=0
MERGE_ONLY=0

usage() { sed -n '3,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; }

while [ $# -gt 0 ]; do
    case $1 in
    -r|--rounds) ROUNDS=$2; shift 2 ;;
    -o|--out) OUT=$2; shift 2 ;;
    -b|--build) BUILD=$2; shift 2 ;;
    -l|--launch) LAUNCH=$2; shift 2 ;;
    --variants) VARIANTS=$2; shift 2 ;;
    --wait-idle) WAIT_IDLE=1; shift ;;
    --merge-only) MERGE_ONLY=1; shift ;;
    -h|--help) usage; exit 0 ;;
    --) shift; break ;;
    -*) echo "peers.sh: unknown option $1" >&2; exit 2 ;;
    *) break ;;
    esac
done
[ $# -ge 1 ] || { usage >&2; exit 2; }
CMD=$1; shift
case $CMD in
latency-hiding|overview) ;;
*) echo "peers.sh: COMMAND is latency-hiding or overview, not '$CMD'" >&2; exit 2 ;;
esac
case $ROUNDS in
''|*[!0-9]*|0) echo "peers.sh: --rounds needs a positive integer" >&2; exit 2 ;;
esac
for a in "$@"; do
    case $a in
    --csv|--variants|--mpi-async|--marshal)
        echo "peers.sh: $a is peers.sh's to set (--variants goes before COMMAND)" >&2; exit 2 ;;
    esac
done
[ -z "$VARIANTS" ] || [ "$CMD" = latency-hiding ] ||
    { echo "peers.sh: --variants is for latency-hiding" >&2; exit 2; }
case ",$VARIANTS," in
*,mpi-async,*) echo "peers.sh: mpi-async runs in its own process; leave it out of --variants" >&2
    exit 2 ;;
esac

OUT=${OUT:-$ROOT/results/peers-$CMD}
BENCH=$BUILD/bench/ovl-bench
mkdir -p "$OUT"

# wait_idle: both cores (nearly) idle for 3 s in a row (bench/idle.sh)
. "$(dirname "$0")/idle.sh"

# run KIND ROUND: one run, its table beside its CSV
run() {
    local kind=$1 i=$2 extra=()
    shift 2
    local csv=$OUT/$kind-$i.csv
    if [ "$kind" = normal ]; then
        [ -z "$VARIANTS" ] || extra=(--variants "$VARIANTS")
    elif [ "$CMD" = latency-hiding ]; then
        extra=(--variants mpi-async)
    else
        extra=(--mpi-async)
    fi
    [ $WAIT_IDLE = 0 ] || wait_idle
    echo "== round $i/$ROUNDS, $kind: $CMD $* ${extra[*]} (load average: $(cut -d' ' -f1-3 /proc/loadavg))"
    if [ "$kind" = async ]; then
        # shellcheck disable=SC2086 # LAUNCH is a command line
        MPIR_CVAR_ASYNC_PROGRESS=1 $LAUNCH "$BENCH" "$CMD" "$@" "${extra[@]}" --csv "$csv" |
            tee "$OUT/$kind-$i.txt"
    else
        # shellcheck disable=SC2086
        $LAUNCH "$BENCH" "$CMD" "$@" "${extra[@]}" --csv "$csv" | tee "$OUT/$kind-$i.txt"
    fi
}

if [ $MERGE_ONLY = 0 ]; then
    [ -x "$BENCH" ] || { echo "peers.sh: $BENCH not built (-b DIR)" >&2; exit 2; }
    rm -f "$OUT"/normal-*.csv "$OUT"/async-*.csv "$OUT"/median.csv
    for i in $(seq 1 "$ROUNDS"); do
        run normal "$i" "$@"
        run async "$i" "$@"
    done
fi

python3 - "$OUT" <<'EOF'
"""Medians over the rounds of peers.sh, per variant and payload."""
import csv
import glob
import os
import statistics
import sys

out = sys.argv[1]


def load(kind):
    rows = []
    for path in sorted(glob.glob(os.path.join(out, f"{kind}-*.csv"))):
        with open(path, newline="") as f:
            for r in csv.DictReader(f):
                r["_round"] = os.path.basename(path).split("-")[-1].split(".")[0]
                rows.append(r)
    return rows


def num(s):
    try:
        return float(s)
    except (TypeError, ValueError):
        return None


normal, peer = load("normal"), load("async")
rows = normal + peer
if not rows:
    sys.exit(f"peers.sh: no normal-*.csv or async-*.csv in {out}")
bench = rows[0]["bench"]
keycols = ("variant", "payload_bytes") if bench == "latency-hiding" else \
    ("sub", "variant", "payload_bytes")
groups = {}
for r in rows:
    groups.setdefault(tuple(r[k] for k in keycols), []).append(r)


def med(rs, col):
    v = [x for x in (num(r.get(col)) for r in rs) if x is not None]
    return statistics.median(v) if v else None


# the bound is a property of the payload, measured in the normal runs only
bound_cols = [c for c in (rows[0].keys()) if c.startswith("bound")]
bound = {}
for r in normal:
    bound.setdefault(r["payload_bytes"], []).append(r)

cols = [c for c in rows[0].keys() if not c.startswith("_")]
for r in rows:
    for c in r:
        if not c.startswith("_") and c not in cols:
            cols.append(c)
medrows = []
for key, rs in groups.items():
    m = {}
    for c in cols:
        if c in keycols or c == "bench":
            m[c] = rs[0].get(c, "")
            continue
        v = med(rs, c)
        if v is None and c in bound_cols and key[-1] in bound:
            v = med(bound[key[-1]], c)
        m[c] = "" if v is None else f"{v:.6g}"
        if v is None and not any(num(r.get(c)) is not None for r in rs):
            m[c] = rs[0].get(c, "")
    m["_n"] = len(rs)
    m["_util"] = [num(r.get("util_send")) for r in rs]
    medrows.append(m)
order = {}
for r in rows:
    order.setdefault(r["variant"], len(order))
medrows.sort(key=lambda m: (m.get("sub", ""), int(m["payload_bytes"]), order[m["variant"]]))
with open(os.path.join(out, "median.csv"), "w", newline="") as f:
    w = csv.DictWriter(f, fieldnames=cols, extrasaction="ignore")
    w.writeheader()
    w.writerows(medrows)


def pct(v):
    return "-" if v in (None, "") else f"{100 * float(v):5.1f}%"


def rng(vals):
    v = [x for x in vals if x is not None]
    return f"{100 * min(v):.0f}..{100 * max(v):.0f}%" if v else "-"


rounds = len({r["_round"] for r in rows})
print(f"\npeers.sh: medians over {rounds} round(s) ({len(normal)} normal and {len(peer)} "
      f"mpi-async rows), {out}/median.csv")
if bench == "latency-hiding":
    print(f"{'variant':<20} {'payload':>8} {'transfer':>9} {'util':>7} {'util':>7} "
          f"{'util send':>10} {'bound':>7} {'comm':>6} {'comm':>6} {'n':>3}")
    print(f"{'':<20} {'':>8} {'ms':>9} {'send':>7} {'recv':>7} {'range':>10} {'':>7} "
          f"{'send':>6} {'recv':>6}")
    for m in medrows:
        t = num(m["transfer_ms_med"]) or 0
        cs, cr = num(m["comm_send_ms_med"]), num(m["comm_recv_ms_med"])
        print(f"{m['variant']:<20} {int(m['payload_bytes']) >> 10:>6}KB {t:9.3f} "
              f"{pct(m['util_send']):>7} {pct(m['util_recv']):>7} {rng(m['_util']):>10} "
              f"{pct(m.get('bound')):>7} {cs / t if t and cs else 0:6.2f} "
              f"{cr / t if t and cr else 0:6.2f} {m['_n']:3d}")
else:
    print(f"{'sub':<17} {'variant':<14} {'payload':>8} {'time ms':>9} {'speedup':>8} "
          f"{'util send':>9} {'util recv':>9} {'n':>3}")
    for m in medrows:
        if m["sub"] not in ("compute+exchange", "useful-cpu"):
            continue
        sp = num(m["speedup"])
        tm = num(m["time_ms"])
        print(f"{m['sub']:<17} {m['variant']:<14} {int(m['payload_bytes']) >> 10:>6}KB "
              f"{tm if tm is not None else float('nan'):9.3f} "
              f"{(f'{sp:.2f}x' if sp is not None else '-'):>8} "
              f"{pct(m['util_send']):>9} {pct(m['util_recv']):>9} {m['_n']:3d}")
EOF

PY=
for p in python3 /usr/bin/python3; do
    if "$p" -c 'import matplotlib' 2>/dev/null; then PY=$p; break; fi
done
if [ -n "$PY" ]; then
    "$PY" "$ROOT/bench/plot.py" "$OUT/median.csv" -o "$OUT/median.png" ||
        echo "peers.sh: plot.py failed (the medians are in $OUT/median.csv)" >&2
else
    echo "(no matplotlib: no plot; bench/plot.py $OUT/median.csv draws it)"
fi
