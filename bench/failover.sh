#!/usr/bin/env bash
# Failover: how long after a holding redlock is SIGKILLed a waiting redlock starts its own
# PROGRAM. Since 0.4 the killed run's watchdog kills PROGRAM's tree, proves it gone and
# releases with the run's token, which wakes the waiter at once (issue 37); before, the
# lock lived on until its lease ran out (between 2/3 of the TTL and all of it).
#
# Each of RUNS kills hits a holding `run -t TTL` at a random moment of its lease
# (0.05 s to 1.05 s after it acquired), with a waiter already waiting; over 1, 3 and 5
# servers (SERVERS). p50/p99/max, kill to the waiter's PROGRAM start.
#
#   bash bench/failover.sh                            # TTL=30s RUNS=20 SERVERS="1 3 5"
#   TTL=3s RUNS=5 REDLOCK_BIN=old/redlock bash bench/failover.sh    # before: the TTL
set -euo pipefail
source "$(dirname "$0")/lib.sh"
need redis-server redis-cli python3

ttl=${TTL:-30s}
runs=${RUNS:-20}
counts=${SERVERS:-1 3 5}
bin=$(redlock_bin)
describe_binary "$bin"
urls=()
for _ in $(seq 5); do
    start_redis
    urls+=("$redis_url")
done

now() { date +%s.%N; }
for n in $counts; do
    servers=()
    for url in "${urls[@]:0:n}"; do servers+=(-s "$url"); done
    times=()
    for i in $(seq "$runs"); do
        rm -f "$bench_tmp/b.started" "$bench_tmp/a.started"
        "$bin" -q "${servers[@]}" run -k failover -t "$ttl" -- \
            sh -c ': > "$1"; exec sleep 1000' sh "$bench_tmp/a.started" &
        holder=$!
        until [[ -e "$bench_tmp/a.started" ]]; do sleep 0.01; done
        "$bin" -q "${servers[@]}" run -k failover -t "$ttl" -w 600s -- \
            sh -c 'date +%s.%N > "$1"; exec true' sh "$bench_tmp/b.started" &
        waiter=$!
        # The waiter is on the wait list (of the first server) before the kill.
        until [[ "$(redis-cli -u "${urls[0]}" zcard '{lock:failover}:waiters')" == 1 ]]; do
            sleep 0.01
        done
        sleep "$(python3 -c "import random; print(0.05 + random.random())")"
        killed_at=$(now)
        kill -KILL "$holder"
        wait "$holder" 2>/dev/null || true
        wait "$waiter" || true
        started_at=$(cat "$bench_tmp/b.started")
        times+=("$(python3 -c "print(f'{$started_at - $killed_at:.4f}')")")
    done
    python3 - "$ttl" "$n" "${times[@]}" <<'PY'
import statistics, sys
ttl, n, times = sys.argv[1], sys.argv[2], sorted(float(t) for t in sys.argv[3:])
p99 = times[min(len(times) - 1, round(0.99 * (len(times) - 1)))]
print(f"failover with -t {ttl} over {n} server(s): p50 {statistics.median(times) * 1000:.0f} ms, "
      f"p99 {p99 * 1000:.0f} ms, max {times[-1] * 1000:.0f} ms over {len(times)} kills")
PY
done
