#!/usr/bin/env bash
# Leader failover: how long after the leader's redlock is SIGKILLed (its host gone, as
# far as the lock can tell) a waiting redlock starts its own PROGRAM. The killed run's
# watchdog stops its PROGRAM at once, but its lock lives on the server until its lease
# runs out: the failover is bounded by the TTL (between 2/3 of it, just after a renewal,
# and all of it), plus the waiter's reaction. A finding, not a speed.
#
#   bash bench/failover.sh                      # TTL=3s RUNS=5
#   TTL=10s RUNS=3 bash bench/failover.sh
set -euo pipefail
source "$(dirname "$0")/lib.sh"
need redis-server redis-cli python3

ttl=${TTL:-3s}
runs=${RUNS:-5}
bin=$(redlock_bin)
describe_binary "$bin"
start_redis

now() { date +%s.%N; }
times=()
for i in $(seq "$runs"); do
    rm -f "$bench_tmp/b.started"
    "$bin" -s "$redis_url" run -k leader -t "$ttl" -- sleep 1000 &
    leader=$!
    until redis-cli -u "$redis_url" exists lock:leader | grep -q 1; do sleep 0.01; done
    "$bin" -q -s "$redis_url" run -k leader -t "$ttl" -- \
        sh -c 'date +%s.%N > "$1"; exec sleep 1000' sh "$bench_tmp/b.started" &
    standby=$!
    # Kill at a random point of the renewal cycle (renewals every ttl/3).
    sleep "$(python3 -c "import random; print(1 + random.random() * 2)")"
    killed_at=$(now)
    kill -KILL "$leader"
    wait "$leader" 2>/dev/null || true
    until [[ -s "$bench_tmp/b.started" ]]; do sleep 0.01; done
    started_at=$(cat "$bench_tmp/b.started")
    t=$(python3 -c "print(f'{$started_at - $killed_at:.3f}')")
    times+=("$t")
    echo "run $i: the standby's PROGRAM started ${t}s after the leader's redlock was killed"
    kill -TERM "$standby"
    wait "$standby" 2>/dev/null || true
done
python3 - "$ttl" "${times[@]}" <<'PY'
import statistics, sys
ttl, times = sys.argv[1], [float(t) for t in sys.argv[2:]]
print(f"failover with -t {ttl}: min {min(times):.2f}s, median {statistics.median(times):.2f}s, "
      f"max {max(times):.2f}s over {len(times)} runs")
PY
