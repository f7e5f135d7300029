#!/usr/bin/env bash
# `redlock cron`, the daemon, on one redis-server:
# - slot start latency: DAEMONS (3) daemons on one crontab of 5 jobs firing every second
#   (bash, `$EPOCHREALTIME` as the command's first word) for DURATION (60 s): the command's
#   start minus its slot's instant, on the host that ran it (the winner): p50, p99, max.
#   Target (issue 48): p99 <= 50 ms.
# - server commands per slot: one job every second, one daemon (the winner's cost), then
#   DAEMONS daemons (the losers' share), over SLOT_SECONDS (20) each: the commands the
#   server executed (INFO commandstats, scripts' own calls included) and the requests the
#   daemons sent (EVALSHA, EVAL and the rest: the round trips), per slot.
# - an idle daemon with IDLE_JOBS (1000) jobs, none due for months, over IDLE_SECONDS (30):
#   its wake-ups per second (voluntary context switches: each sleep in poll() is one),
#   the commands it sent the server (none between slots), its VmRSS and VmHWM. Targets:
#   at most one wake-up a second, no command, RSS < 8 MiB.
#
#   bash bench/cron.sh                  # DURATION=60 DAEMONS=3 SLOT_SECONDS=20 IDLE_JOBS=1000
set -euo pipefail
source "$(dirname "$0")/lib.sh"
need redis-server redis-cli python3 bash

seconds=${DURATION:-60}
daemons=${DAEMONS:-3}
slot_seconds=${SLOT_SECONDS:-20}
idle_jobs=${IDLE_JOBS:-1000}
idle_seconds=${IDLE_SECONDS:-30}
bin=$(redlock_bin)
describe_binary "$bin"
start_redis
url=$redis_url
port=${url##*:}
echo "load $(cut -d' ' -f1-3 /proc/loadavg)"

pids=()
start_daemons() { # N CRONTAB OUT
    local i
    for ((i = 0; i < $1; i++)); do
        "$bin" -s "$url" cron "$2" >"$3.$i.out" 2>"$3.$i.err" &
        pids+=($!)
    done
}
stop_daemons() {
    local pid
    for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
    for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
    pids=()
}
trap 'stop_daemons; bench_cleanup' EXIT

calls() { # every command the server executed, and the requests clients sent
    redis-cli -p "$port" INFO commandstats | tr -d '\r' |
        sed -n 's/^cmdstat_\([^:]*\):calls=\([0-9]*\),.*/\1 \2/p' |
        awk '{ all += $2 } $1 ~ /^(evalsha|eval|evalsha_ro|eval_ro|subscribe|unsubscribe|auth|select|hello|client.*)$/ { asked += $2 }
             END { printf "%d %d\n", all, asked }'
}

# --- slot start latency
log=$bench_tmp/latency.log
{
    echo "SHELL=/bin/bash"
    for j in 1 2 3 4 5; do
        echo "# redlock: name=latency-$j"
        echo "* * * * * * echo \"\$EPOCHREALTIME \$REDLOCK_SLOT\" >> $log"
    done
} >"$bench_tmp/latency.tab"
: >"$log"
start_daemons "$daemons" "$bench_tmp/latency.tab" "$bench_tmp/latency"
sleep "$seconds"
stop_daemons
python3 - "$log" "$seconds" <<'EOF'
import datetime, statistics, sys
lat = []
for line in open(sys.argv[1]):
    started, slot = line.split()
    instant = datetime.datetime.strptime(slot, "%Y-%m-%dT%H:%M:%SZ").replace(
        tzinfo=datetime.timezone.utc).timestamp()
    lat.append((float(started) - instant) * 1000)
lat = sorted(lat[5:])  # not the first second's (daemons starting)
p = lambda q: lat[min(len(lat) - 1, int(q * len(lat)))]
print(f"slot start latency ({len(lat)} slots, winner): p50 {p(0.5):.1f} ms, p99 {p(0.99):.1f} ms, "
      f"max {lat[-1]:.1f} ms; target p99 <= 50 ms")
EOF

# --- server commands per slot
{
    echo "# redlock: name=counted"
    echo "* * * * * * true"
} >"$bench_tmp/count.tab"
per_slot() { # DAEMONS
    redis-cli -p "$port" config resetstat >/dev/null
    start_daemons "$1" "$bench_tmp/count.tab" "$bench_tmp/count"
    sleep "$slot_seconds"
    read -r all asked < <(calls)
    stop_daemons
    python3 -c "print(f'{$all / $slot_seconds:.1f} {$asked / $slot_seconds:.1f}')"
}
read -r one_all one_asked < <(per_slot 1)
read -r many_all many_asked < <(per_slot "$daemons")
python3 - "$one_all" "$one_asked" "$many_all" "$many_asked" "$daemons" <<'EOF'
import sys
one_all, one_asked, many_all, many_asked = map(float, sys.argv[1:5])
n = int(sys.argv[5])
print(f"commands per slot: the winner {one_asked:.1f} requests ({one_all:.1f} executed with "
      f"the scripts' own); each loser {(many_asked - one_asked) / (n - 1):.1f} requests "
      f"({(many_all - one_all) / (n - 1):.1f} executed)")
EOF

# --- an idle daemon with many jobs
python3 - "$idle_jobs" >"$bench_tmp/idle.tab" <<'EOF'
import datetime, sys
month = (datetime.datetime.now(datetime.timezone.utc).month + 5) % 12 + 1  # months away
for i in range(int(sys.argv[1])):
    print(f"# redlock: name=idle-{i}")
    print(f"{i % 60} {i // 60 % 60} {i % 24} {1 + i % 28} {month} * true")
EOF
redis-cli -p "$port" config resetstat >/dev/null
start_daemons 1 "$bench_tmp/idle.tab" "$bench_tmp/idle"
pid=${pids[0]}
sleep 5 # its start: the file read, every job's next fire computed
switches() { awk '/^voluntary_ctxt_switches/ { print $2 }' "/proc/$pid/status"; }
read -r before_all before_asked < <(calls)
before=$(switches)
sleep "$idle_seconds"
after=$(switches)
read -r after_all after_asked < <(calls)
rss=$(awk '/^VmRSS/ { print $2 }' "/proc/$pid/status")
hwm=$(awk '/^VmHWM/ { print $2 }' "/proc/$pid/status")
stop_daemons
python3 -c "
print(f'idle daemon, $idle_jobs jobs, ${idle_seconds}s: {($after - $before) / $idle_seconds:.2f} '
      f'wake-ups/s, {$after_asked - $before_asked} requests ({$after_all - $before_all} commands) '
      f'to the server, VmRSS {$rss / 1024:.1f} MiB (peak {$hwm / 1024:.1f}); targets <= 1/s, 0, '
      f'< 8 MiB')"
