# SPDX-License-Identifier: BSD-3-Clause
# Sourced by bench/reproduce.sh and bench/peers.sh.
#
# wait_idle: wait until both cores are (nearly) idle for 3 s in a row, at most IDLE_MAX
# seconds (default 600); the load average at the start of each run goes to
# the log either way.
wait_idle() {
    local quiet=0 tries=0
    while [ $quiet -lt 3 ] && [ $tries -lt "${IDLE_MAX:-600}" ]; do
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
