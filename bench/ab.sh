#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# ab.sh - compare two builds of ovl on one ovl-bench command, runs
# alternated in one sitting (old, new, new, old, ...), and print per row the
# median and range of each metric for each build.
#
#   bench/ab.sh [options] OLD_BUILD NEW_BUILD -- COMMAND [ARGS...]
#
# Each run writes its CSV (--csv) under OUT; rows are matched by the key
# columns. A new median within the old build's range, or better, is what
# "no slowdown" means on a noisy machine; the verdict column says which
# (for a metric where lower is better, name it with a leading '-').
#
# Options:
#   -r, --rounds R      runs per build (default 3)
#   -o, --out DIR       where the CSVs go (default results/ab-COMMAND)
#   -l, --launch CMD    how to start the ranks (default "testbed/ovl-cluster run
#                       --np 2 --pin --")
#   -k, --key COLS      key columns, comma-separated (default: variant,payload_bytes)
#   -m, --metrics COLS  metric columns (default: util_send,util_recv,-comm_send_ms_med)
#   --old-args ARGS     ARGS for the old build instead of the command's (a renamed
#                       option)
#   --merge-only        only summarise the CSVs already in OUT
#   -h, --help          this text
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
ROUNDS=3
OUT=
LAUNCH="$ROOT/testbed/ovl-cluster run --np 2 --pin --"
KEY=variant,payload_bytes
METRICS=util_send,util_recv,-comm_send_ms_med
OLD_ARGS=
MERGE_ONLY=0
usage() { sed -n '3,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; }
while [ $# -gt 0 ]; do
    case $1 in
    -r|--rounds) ROUNDS=$2; shift 2 ;;
    -o|--out) OUT=$2; shift 2 ;;
    -l|--launch) LAUNCH=$2; shift 2 ;;
    -k|--key) KEY=$2; shift 2 ;;
    -m|--metrics) METRICS=$2; shift 2 ;;
    --old-args) OLD_ARGS=$2; shift 2 ;;
    --merge-only) MERGE_ONLY=1; shift ;;
    -h|--help) usage; exit 0 ;;
    -*) echo "ab.sh: unknown option $1" >&2; exit 2 ;;
    *) break ;;
    esac
done
[ $# -ge 3 ] || { usage >&2; exit 2; }
OLD=$1; NEW=$2; shift 2
[ "$1" = -- ] && shift
CMD=$1; shift
OUT=${OUT:-results/ab-$CMD}
mkdir -p "$OUT"
if [ "$MERGE_ONLY" = 0 ]; then
    for ((r = 1; r <= ROUNDS; r++)); do
        order="old new"
        [ $((r % 2)) = 0 ] && order="new old"
        for b in $order; do
            dir=$OLD; args=("$@")
            if [ "$b" = old ]; then
                [ -n "$OLD_ARGS" ] && read -r -a args <<<"$OLD_ARGS"
            else
                dir=$NEW
            fi
            echo "== ab.sh: round $r, $b build ($dir)" >&2
            # shellcheck disable=SC2086
            $LAUNCH "$dir/bench/ovl-bench" "$CMD" "${args[@]}" --csv "$OUT/$b-$r.csv" >"$OUT/$b-$r.txt"
        done
    done
fi
python3 - "$OUT" "$KEY" "$METRICS" <<'PY'
import csv, glob, os, statistics, sys
out, key, metrics = sys.argv[1], sys.argv[2].split(","), sys.argv[3].split(",")
vals = {}  # (build, key tuple, metric) -> [values]
keys = []
for b in ("old", "new"):
    for f in sorted(glob.glob(os.path.join(out, f"{b}-*.csv"))):
        for row in csv.DictReader(open(f)):
            k = tuple(row.get(c, "") for c in key)
            if k not in keys:
                keys.append(k)
            for m in metrics:
                col = m.lstrip("-")
                try:
                    vals.setdefault((b, k, m), []).append(float(row[col]))
                except (KeyError, ValueError):
                    pass
print("| " + " | ".join(key) + " | metric | old median [range] | new median [range] | verdict |")
print("|" + "---|" * (len(key) + 4))
for k in keys:
    for m in metrics:
        o, n = vals.get(("old", k, m)), vals.get(("new", k, m))
        if not o or not n:
            continue
        lower = m.startswith("-")
        mo, mn = statistics.median(o), statistics.median(n)
        better = mn < mo if lower else mn > mo
        inside = min(o) <= mn <= max(o)
        verdict = "better" if better else "within" if inside else "WORSE"
        f = lambda v: f"{v:.4g}"
        print(f"| {' | '.join(k)} | {m.lstrip('-')}{' (lower is better)' if lower else ''} | "
              f"{f(mo)} [{f(min(o))}-{f(max(o))}] | {f(mn)} [{f(min(n))}-{f(max(n))}] | {verdict} |")
PY
