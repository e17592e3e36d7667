#!/usr/bin/env bash
# Run the ported HPCCG mini-app: plain MPI and ovl, alternately.
#
#   bench/ports/hpccg/run.sh [options] OUT_DIR RANKS NX NY NZ R
#
# OUT_DIR     what build.sh built (OUT_DIR/bin/hpccg-*)
# RANKS       MPI ranks
# NX NY NZ    HPCCG's local sub-block per rank (weak scaling: the ranks are
#             stacked in z, so the problem is NX x NY x (NZ*RANKS))
# R           rounds: each round runs every variant once, in order
#
# Variants (-V): plain         HPCCG unchanged
#                ovl           the port, OVL_PROGRESS=inline
#                ovl-thread    the port, OVL_PROGRESS=thread
#                ovl-aligned, ovl-aligned-thread   the same with p from
#                              ovl_alloc (not HPCCG's layout; README)
#
# Options:
#   -l PREFIX   launcher; {np} is replaced by RANKS (default "mpiexec -n {np}").
#               On the emulated cluster (docs/CLUSTER.md), from the ovl tree:
#               -l "testbed/ovl-cluster run --np {np} --pin --timeout 900 --"
#   -t SECONDS  kill a run after this long (default 900; counts as invalid)
#   -V LIST     variants, comma-separated (default plain,ovl,ovl-thread)
#   -k DIR      keep every run's output and HPCCG's yaml file in DIR
#               (default: a temporary directory, removed at the end unless a
#               run failed)
#
# Other OVL_* variables in the environment (OVL_MONITOR, OVL_STATS, ...)
# reach the ovl runs; OVL_PROGRESS is set per variant.
#
# Output (stdout): CSV "variant,run,total,ddot,waxpby,sparsemv,exchange,
# residual,same,valid": HPCCG's own Time Summary (seconds, rank 0: Total,
# DDOT, WAXPBY, SPARSEMV) and its "Bdry Exch Time"; its Final residual; same
# = 1 when every residual HPCCG printed (Initial, each Iteration, Final) is
# identical, to all printed digits, to the first plain run's (the first
# run's without plain); valid = 1 when the job exited 0, printed its Time
# Summary and same = 1. Then comment lines (#) with each variant's median
# times (of valid runs) and the ratios variant/plain of the medians (below
# 1: faster than plain). Exit 1 if any run was invalid.
set -uo pipefail

usage() { sed -n '2,39p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }

launcher="mpiexec -n {np}"
tmo=900
variants="plain,ovl,ovl-thread"
keep=""
while getopts "l:t:V:k:h" opt; do
    case $opt in
    l) launcher=$OPTARG ;;
    t) tmo=$OPTARG ;;
    V) variants=$OPTARG ;;
    k) keep=$OPTARG ;;
    *) usage ;;
    esac
done
shift $((OPTIND - 1))
[ $# -eq 6 ] || usage
out=$(cd "$1" && pwd) || exit 2
np=$2 nx=$3 ny=$4 nz=$5 rounds=$6

IFS=, read -r -a vlist <<<"$variants"
for v in "${vlist[@]}"; do
    case $v in
    plain | ovl | ovl-thread | ovl-aligned | ovl-aligned-thread) ;;
    *) echo "run.sh: unknown variant '$v'" >&2; exit 2 ;;
    esac
    b=hpccg-${v%-thread}
    [ -x "$out/bin/$b" ] || { echo "run.sh: no $out/bin/$b (run build.sh first)" >&2; exit 2; }
done
read -r -a launch <<<"${launcher//\{np\}/$np}"

if [ -n "$keep" ]; then
    mkdir -p "$keep"
    logs=$(cd "$keep" && pwd)
else
    logs=$(mktemp -d "${TMPDIR:-/tmp}/hpccg-run.XXXXXX")
fi

csv=$logs/results.csv
echo "variant,run,total,ddot,waxpby,sparsemv,exchange,residual,same,valid" | tee "$csv"
failed=0
ref=""
for ((r = 1; r <= rounds; r++)); do
    for v in "${vlist[@]}"; do
        bin=$out/bin/hpccg-${v%-thread}
        case $v in
        plain) envs=() ;;
        *-thread) envs=(OVL_PROGRESS=thread) ;;
        *) envs=(OVL_PROGRESS=inline) ;;
        esac
        # HPCCG writes its yaml file into the current directory: one per run.
        dir=$logs/$v-$r
        mkdir -p "$dir"
        log=$dir/output.log
        cmd=(env "${envs[@]}" "${launch[@]}" "$bin" "$nx" "$ny" "$nz")
        echo "# ${cmd[*]}" >"$log"
        (cd "$dir" && timeout "$tmo" "${cmd[@]}") >>"$log" 2>&1
        rc=$?
        # HPCCG's Time Summary ("  Total   : 0.27", ...; the same labels
        # appear again under FLOPS and MFLOPS Summary) and overheads.
        read -r total ddot waxpby spmv exch res < <(awk '
            /^Time Summary:/ { ts = 1; next }
            /^[^ ]/ { ts = 0 }
            ts && /^  Total   :/ { t = $NF }   ts && /^  DDOT    :/ { d = $NF }
            ts && /^  WAXPBY  :/ { w = $NF }   ts && /^  SPARSEMV:/ { s = $NF }
            /Bdry Exch Time:/ { e = $NF }
            /^Final residual:/ { f = $NF }
            END { printf "%s %s %s %s %s %s\n", t == "" ? "NA" : t, d == "" ? "NA" : d,
                  w == "" ? "NA" : w, s == "" ? "NA" : s, e == "" ? "NA" : e, f == "" ? "NA" : f }
        ' "$log")
        # every residual HPCCG printed, as printed
        grep -E '^(Initial Residual = |Iteration = .*Residual = |Final residual: )' "$log" \
            >"$dir/residuals.txt"
        same=0
        if [ -s "$dir/residuals.txt" ]; then
            if [ -z "$ref" ] && { [ "$v" = plain ] || [[ ",$variants," != *,plain,* ]]; }; then
                ref=$dir/residuals.txt
            fi
            if [ -n "$ref" ] && cmp -s "$ref" "$dir/residuals.txt"; then same=1; fi
        fi
        valid=0
        if [ $rc -eq 0 ] && [ "$total" != NA ] && [ $same -eq 1 ]; then valid=1; fi
        if [ $valid -eq 0 ]; then
            failed=$((failed + 1))
            echo "run.sh: $v run $r failed (exit $rc, residuals same as plain: $same)," \
                 "output in $log" >&2
        fi
        echo "$v,$r,$total,$ddot,$waxpby,$spmv,$exch,$res,$same,$valid" | tee -a "$csv"
    done
done

# medians of the valid runs, and the ratios to plain
awk -F, -v variants="$variants" '
function median(list,   n, a, i, j, t) {
    n = split(list, a, " ")
    for (i = 2; i <= n; i++) for (j = i; j > 1 && a[j-1] + 0 > a[j] + 0; j--) { t = a[j]; a[j] = a[j-1]; a[j-1] = t }
    if (n == 0) return ""
    return n % 2 ? a[(n+1)/2] : (a[n/2] + a[n/2+1]) / 2
}
NR > 1 { total[$1]++ }
NR > 1 && $10 == 1 { n[$1]++; for (c = 3; c <= 7; c++) col[$1, c] = col[$1, c] " " $c }
END {
    split("total ddot waxpby sparsemv exchange", name, " ")
    nv = split(variants, v, ",")
    for (i = 1; i <= nv; i++) {
        line = sprintf("# median %s:", v[i])
        for (c = 3; c <= 7; c++) {
            m[v[i], c] = median(col[v[i], c])
            line = line sprintf(" %s %s", name[c-2], m[v[i], c] == "" ? "NA" : m[v[i], c])
        }
        printf "%s (%d of %d runs valid)\n", line, n[v[i]], total[v[i]]
    }
    for (i = 1; i <= nv; i++) {
        if (v[i] == "plain") continue
        line = sprintf("# ratio %s/plain:", v[i])
        for (c = 3; c <= 7; c++) {
            if (m[v[i], c] != "" && m["plain", c] + 0 > 0)
                line = line sprintf(" %s %.3f", name[c-2], m[v[i], c] / m["plain", c])
            else
                line = line sprintf(" %s NA", name[c-2])
        }
        print line
    }
}' "$csv"

if [ $failed -ne 0 ]; then
    echo "run.sh: $failed runs failed; outputs kept in $logs" >&2
    exit 1
fi
[ -n "$keep" ] || rm -rf "$logs"
exit 0
