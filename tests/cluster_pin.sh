#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# `ovl-cluster run --pin`: every emulated host's ranks run on that host's own
# CPUs. Runs 2 ranks on 2 hosts (1 per host) and 4 ranks (2 per host), each
# printing its host name and allowed CPUs, then checks: all ranks of one host
# share one CPU set; with at least as many CPUs as hosts, the sets of
# different hosts are disjoint; and without --pin nobody is restricted.
#   cluster_pin.sh TOOL
set -u
tool=$1
if ! "$tool" status -q >/dev/null 2>&1; then
    echo "cluster_pin.sh: the cluster is not up (setup skipped or failed): skipping"
    exit 77
fi
# shellcheck disable=SC2016  # expanded by the ranks' shell
probe='echo "$(hostname) $(sed -n "s/^Cpus_allowed_list:[[:space:]]*//p" /proc/self/status)"'
ncpu=$(nproc)  # the CPUs this process may use, as ovl-cluster counts them
all=$(sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' /proc/self/status)
fail=0
check() { # $1 label, $2 output, $3 expected hosts, $4 pinned (1/0)
    echo "$1:"
    printf '%s\n' "$2" | sed 's/^/    /'
    printf '%s\n' "$2" | awk -v hosts="$3" -v pinned="$4" -v ncpu="$ncpu" -v all="$all" '
        function expand(l,   n, p, i, a, b, c, out) {
            n = split(l, p, ","); out = ""
            for (i = 1; i <= n; i++) {
                if (split(p[i], a, "-") == 2) { for (c = a[1]; c <= a[2]; c++) out = out " " c }
                else out = out " " p[i]
            }
            return out " "
        }
        NF == 2 { if (($1 in set) && set[$1] != $2) { print "FAIL: host " $1 " has ranks on " set[$1] " and " $2; bad = 1 }
                  set[$1] = $2; ranks++ }
        END {
            n = 0; for (h in set) n++
            if (n != hosts) { print "FAIL: " n " hosts reported, expected " hosts; bad = 1 }
            for (h in set) {
                if (!pinned && set[h] != all) { print "FAIL: without --pin, " h " is restricted to " set[h]; bad = 1 }
                if (pinned && set[h] == all && ncpu >= hosts && ncpu > 1) { print "FAIL: " h " is not pinned"; bad = 1 }
            }
            if (pinned && ncpu >= hosts)
                for (h in set) for (g in set) if (h < g) {
                    split(expand(set[h]), x, " "); e = expand(set[g])
                    for (i in x) if (index(e, " " x[i] " ")) { print "FAIL: " h " and " g " share CPU " x[i]; bad = 1 }
                }
            exit bad
        }' || fail=1
}
out=$("$tool" run --np 2 --ppn 1 --pin --timeout 60 -- sh -c "$probe") || { echo "FAIL: run --pin exited $?"; exit 1; }
check "2 hosts, 1 rank each, --pin" "$out" 2 1
out=$("$tool" run --np 4 --ppn 2 --pin --timeout 60 -- sh -c "$probe") || { echo "FAIL: run --pin exited $?"; exit 1; }
check "2 hosts, 2 ranks each, --pin" "$out" 2 1
out=$("$tool" run --np 2 --ppn 1 --timeout 60 -- sh -c "$probe") || { echo "FAIL: run exited $?"; exit 1; }
check "2 hosts, no --pin" "$out" 2 0
# a bad CPU list reaches nslaunch only by hand: it must refuse, ssh-style
out=$(OVL_NSLAUNCH_CPUS="0;x" "$(dirname "$tool")/nslaunch" ovl-h1 true 2>&1)
rc=$?
echo "nslaunch with OVL_NSLAUNCH_CPUS='0;x': exit $rc: $out"
if [ $rc -ne 255 ] || ! printf '%s' "$out" | grep -q "not a CPU list"; then
    echo "FAIL: expected exit 255 and 'not a CPU list'"
    fail=1
fi
[ $fail -eq 0 ] && echo "cluster_pin.sh: ok"
exit $fail
