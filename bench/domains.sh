#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Threads against processes, alternated: `ovl-bench domains` launched as
# 2P processes of one thread and as 2 processes of P threads, in turn (the
# order swapped every round), then the medians over rounds and the ratio
# threads / processes per variant and size.
#
#   bench/domains.sh [-r ROUNDS] [-p P] [-1] [-o DIR] [-b BUILD] [-l LAUNCH] -- [domains options]
#
# -r rounds (3), -p workers per side (2), -1 one process against P
# processes on one host (its P threads exchange in pairs, no wire; P even),
# -o where the CSVs go (a new
# directory under /tmp), -b the build directory (build), -l the launcher
# with {np} for the rank count ("mpiexec -n {np}"; on the emulated cluster
# "testbed/ovl-cluster run --np {np} --ppn {ppn} --pin --", where {ppn} is
# the ranks per host: P for processes, 1 for threads). Under MPICH 5 set
# MPIR_CVAR_CH4_RESERVE_VCIS=P in the environment for the mpix variant.
set -euo pipefail

rounds=3 p=2 dir="" build=build launch="mpiexec -n {np}" onehost=0
while getopts "r:p:1o:b:l:" o; do
  case $o in
    1) onehost=1 ;;
    r) rounds=$OPTARG ;;
    p) p=$OPTARG ;;
    o) dir=$OPTARG ;;
    b) build=$OPTARG ;;
    l) launch=$OPTARG ;;
    *) sed -n '2,18p' "$0" >&2; exit 2 ;;
  esac
done
shift $((OPTIND - 1))
[ "${1:-}" = "--" ] && shift
[ -n "$dir" ] || dir=$(mktemp -d /tmp/ovl-domains.XXXXXX)
mkdir -p "$dir"
bench=$build/bench/ovl-bench
[ -x "$bench" ] || { echo "domains.sh: no $bench (build it first)" >&2; exit 2; }

one() { # shape np threads ppn round
  local cmd=${launch//\{np\}/$2}
  cmd=${cmd//\{ppn\}/$4}
  echo "== round $5, $1: $cmd $bench domains --threads $3 ${extra[*]}" >&2
  # shellcheck disable=SC2086
  $cmd "$bench" domains --threads "$3" --csv "$dir/r$5-$1.csv" "${extra[@]}" >"$dir/r$5-$1.txt"
}
extra=("$@")
if [ "$onehost" = 1 ]; then pnp=$p tnp=1; else pnp=$((2 * p)) tnp=2; fi
for r in $(seq 1 "$rounds"); do
  if [ $((r % 2)) -eq 1 ]; then
    one procs "$pnp" 1 "$p" "$r"; one threads "$tnp" "$p" 1 "$r"
  else
    one threads "$tnp" "$p" 1 "$r"; one procs "$pnp" 1 "$p" "$r"
  fi
done

python3 - "$dir" <<'EOF'
import csv, glob, os, statistics, sys
d = sys.argv[1]
rows = {}
for path in glob.glob(os.path.join(d, "r*-*.csv")):
    shape = os.path.basename(path).split("-", 1)[1][:-4]
    for r in csv.DictReader(open(path)):
        key = (r["variant"], int(r["msg_bytes"]), shape)
        rows.setdefault(key, []).append(float(r["us_per_iter_med"]))
variants = sorted({k[0] for k in rows})
sizes = sorted({k[1] for k in rows})
print(f"medians over rounds, us per iteration (slowest worker); dir {d}")
print(f"{'variant':8} {'bytes':>8} {'procs':>10} {'threads':>10} {'threads/procs':>14}")
for v in variants:
    for s in sizes:
        pr = rows.get((v, s, "procs")); th = rows.get((v, s, "threads"))
        if not pr and not th:
            continue
        mp = statistics.median(pr) if pr else float("nan")
        mt = statistics.median(th) if th else float("nan")
        print(f"{v:8} {s:>8} {mp:>10.2f} {mt:>10.2f} {mt / mp if pr and th else float('nan'):>14.2f}")
EOF
