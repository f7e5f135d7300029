#!/usr/bin/env bash
# How short a TTL holds up: runs `redlock run -t TTL -- sleep 0.5` RUNS times for each
# TTL, on one server, with LOAD busy loops competing for the CPUs (default: one per core),
# and counts the runs that lost the lease (79). The documented minimum TTL is the smallest
# one with no loss here. A finding, not a speed: it depends on the machine and its load.
#
#   bash bench/min-ttl.sh                       # TTLS="10ms 20ms 50ms 100ms", RUNS=20
#   TTLS="100ms 200ms" RUNS=50 LOAD=4 bash bench/min-ttl.sh
set -euo pipefail
source "$(dirname "$0")/lib.sh"
need redis-server redis-cli python3

runs=${RUNS:-20}
ttls=${TTLS:-"10ms 20ms 50ms 100ms"}
load=${LOAD:-$(nproc)}
bin=$(redlock_bin)
describe_binary "$bin"
start_redis

busy=()
stop_busy() { ((${#busy[@]})) && kill "${busy[@]}" 2>/dev/null; wait "${busy[@]}" 2>/dev/null || true; }
trap 'stop_busy; bench_cleanup' EXIT
for _ in $(seq "$load"); do
    (while :; do :; done) &
    busy+=($!)
done
echo "load: $load busy loops on $(nproc) cpus; $runs runs of 'run -t TTL -- sleep 0.5' per ttl"

for ttl in $ttls; do
    lost=0 other=0
    for _ in $(seq "$runs"); do
        rc=0
        "$bin" -s "$redis_url" run -k "min-ttl" -t "$ttl" -- sleep 0.5 2>"$bench_tmp/err" || rc=$?
        case $rc in
        0) ;;
        79) lost=$((lost + 1)) ;;
        *) other=$((other + 1)); sed 's/^/    /' "$bench_tmp/err" ;;
        esac
    done
    printf '%-6s lost %2d of %d%s\n' "$ttl" "$lost" "$runs" \
        "$( ((other)) && printf ', %d other failures' "$other")"
done
