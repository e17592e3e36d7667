#!/usr/bin/env bash
# Run a ported Parallel Research Kernel: plain MPI and ovl, alternately.
#
#   bench/ports/prk/run.sh [options] OUT_DIR KERNEL RANKS SIZE ITERATIONS R [TILE [SYNC...]]
#
# OUT_DIR     what build.sh built (OUT_DIR/bin/...)
# KERNEL      transpose      plain vs the delta send/receive port
#             transpose-irecv plain vs ovl_irecv + the delta send (carved buffers)
#             stencil        plain vs the delta send/receive port
#             stencil-isend  plain vs the ovl_isend/ovl_irecv port
#             transpose-rma  MPIRMA/Transpose (puts) vs the loop-nest planner
#                            port (reads, transpose-rma-plan)
# RANKS       MPI ranks
# SIZE        matrix order (transpose) or grid size (stencil)
# ITERATIONS  PRK's iteration count (it adds one untimed warm-up iteration)
# R           rounds: each round runs plain, ovl (OVL_PROGRESS=inline) and
#             ovl-thread (OVL_PROGRESS=thread) once, in that order
# TILE        transpose kernels only: PRK's tile size (0 = untiled; PRK's
#             default 32). MPIRMA/Transpose refuses to run without it, so
#             transpose-rma passes 32 when it is not given
# SYNC...     transpose-rma only, up to three: PRK's [sync (0=fence,
#             1=flush)] [flush local?] [flush bundle], given to both binaries
#             (the plan binary reads and ignores them)
#
# Options:
#   -l PREFIX   launcher; {np} is replaced by RANKS (default "mpiexec -n {np}").
#               On the emulated cluster (docs/CLUSTER.md), from the ovl tree:
#               -l "testbed/ovl-cluster run --np {np} --pin --timeout 900 --"
#   -t SECONDS  kill a run after this long (default 900; counts as invalid)
#   -V LIST     variants, comma-separated (default plain,ovl,ovl-thread)
#   -k DIR      keep every run's output in DIR (default: a temporary directory,
#               removed at the end unless a run failed)
#
# Other OVL_* variables in the environment (OVL_MONITOR, OVL_STATS, ...)
# reach the ovl runs; OVL_PROGRESS is set per variant.
#
# Output (stdout): CSV "variant,run,seconds,rate,valid", seconds and rate as
# PRK reports them (Avg time (s), Rate (MB/s) or (MFlops/s)), valid 1 when
# PRK printed "Solution validates" and the job exited 0; then comment lines
# (#) with the median seconds and rate of each variant and the ratios
# ovl/plain (time: below 1 means ovl is faster).
set -uo pipefail

usage() { sed -n '2,41p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }

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
[ $# -ge 6 ] && [ $# -le 10 ] || usage
out=$1 kernel=$2 np=$3 size=$4 iters=$5 rounds=$6 tile=${7:-}
sync=("${@:8}")

case $kernel in
transpose) plain=transpose-plain ovlbin=transpose-ovl ;;
transpose-irecv) plain=transpose-plain ovlbin=transpose-ovl-irecv ;;
stencil) plain=stencil-plain ovlbin=stencil-ovl ;;
stencil-isend) plain=stencil-plain ovlbin=stencil-ovl-isend ;;
transpose-rma) plain=transpose-rma-plain ovlbin=transpose-rma-plan tile=${tile:-32} ;;
*) echo "run.sh: unknown kernel '$kernel' (transpose, transpose-irecv, stencil, stencil-isend, transpose-rma)" >&2; exit 2 ;;
esac
if [ -n "$tile" ] && [ "${kernel#transpose}" = "$kernel" ]; then
    echo "run.sh: TILE is for the transpose kernels only" >&2; exit 2
fi
if [ ${#sync[@]} -gt 0 ] && [ "$kernel" != transpose-rma ]; then
    echo "run.sh: SYNC arguments are for transpose-rma only" >&2; exit 2
fi
for b in "$plain" "$ovlbin"; do
    [ -x "$out/bin/$b" ] || { echo "run.sh: no $out/bin/$b (run build.sh first)" >&2; exit 2; }
done
args=("$iters" "$size")
[ -n "$tile" ] && args+=("$tile")
args+=("${sync[@]}")
read -r -a launch <<<"${launcher//\{np\}/$np}"

if [ -n "$keep" ]; then
    logs=$keep
    mkdir -p "$logs"
else
    logs=$(mktemp -d "${TMPDIR:-/tmp}/prk-run.XXXXXX")
fi
IFS=, read -r -a vlist <<<"$variants"
for v in "${vlist[@]}"; do
    case $v in plain | ovl | ovl-thread) ;; *) echo "run.sh: unknown variant '$v'" >&2; exit 2 ;; esac
done

csv=$logs/results.csv
echo "variant,run,seconds,rate,valid" | tee "$csv"
failed=0
for ((r = 1; r <= rounds; r++)); do
    for v in "${vlist[@]}"; do
        log=$logs/$kernel-$v-$r.log
        case $v in
        plain) cmd=(env "${launch[@]}" "$out/bin/$plain" "${args[@]}") ;;
        ovl) cmd=(env OVL_PROGRESS=inline "${launch[@]}" "$out/bin/$ovlbin" "${args[@]}") ;;
        ovl-thread) cmd=(env OVL_PROGRESS=thread "${launch[@]}" "$out/bin/$ovlbin" "${args[@]}") ;;
        esac
        echo "# ${cmd[*]}" >"$log"
        timeout "$tmo" "${cmd[@]}" >>"$log" 2>&1
        rc=$?
        # PRK: "Rate (MB/s): R Avg time (s): T" / "Rate (MFlops/s): R  Avg time (s): T"
        line=$(grep -m1 '^Rate (' "$log")
        rate=$(sed -n 's/^Rate ([^)]*): *\([0-9.eE+-]*\).*/\1/p' <<<"$line")
        secs=$(sed -n 's/.*Avg time (s): *\([0-9.eE+-]*\).*/\1/p' <<<"$line")
        valid=0
        if [ $rc -eq 0 ] && grep -q '^Solution validates' "$log"; then valid=1; fi
        if [ $valid -eq 0 ]; then
            failed=$((failed + 1))
            echo "run.sh: $v run $r failed (exit $rc), output in $log" >&2
        fi
        echo "$v,$r,${secs:-NA},${rate:-NA},$valid" | tee -a "$csv"
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
NR > 1 && $5 == 1 { s[$1] = s[$1] " " $3; r[$1] = r[$1] " " $4; n[$1]++ }
NR > 1 { total[$1]++ }
END {
    nv = split(variants, v, ",")
    for (i = 1; i <= nv; i++) {
        ms[v[i]] = median(s[v[i]]); mr[v[i]] = median(r[v[i]])
        printf "# median %s: seconds %s rate %s (%d of %d runs valid)\n", v[i], \
            ms[v[i]] == "" ? "NA" : ms[v[i]], mr[v[i]] == "" ? "NA" : mr[v[i]], n[v[i]], total[v[i]]
    }
    for (i = 1; i <= nv; i++) {
        if (v[i] == "plain") continue
        if (ms[v[i]] != "" && ms["plain"] != "" && ms["plain"] + 0 > 0 && mr["plain"] + 0 > 0)
            printf "# ratio %s/plain: time %.3f rate %.3f\n", v[i], ms[v[i]] / ms["plain"], mr[v[i]] / mr["plain"]
        else
            printf "# ratio %s/plain: NA\n", v[i]
    }
}' "$csv"

if [ $failed -ne 0 ]; then
    echo "run.sh: $failed runs failed; outputs kept in $logs" >&2
    exit 1
fi
[ -n "$keep" ] || rm -rf "$logs"
exit 0
