#!/usr/bin/env bash
# Wall time of one uncontended `redlock run -k bench -- true` against a local
# redis-server, next to `flock -n FILE true` (the local lock users already know) and bare
# `true` (the cost of starting any process). Target: redlock/flock <= 1.3 (median).
#
#   bash bench/run-vs-flock.sh          # RUNS=300 per command in ROUNDS=5, WARMUP=10 a round
set -euo pipefail
source "$(dirname "$0")/lib.sh"
need hyperfine flock redis-server python3

runs=${RUNS:-300}
rounds=${ROUNDS:-5}
warmup=${WARMUP:-10}
bin=$(redlock_bin)
describe_binary "$bin"
start_redis
out=$(results_dir)/run-vs-flock.json
lockfile="$bench_tmp/flock.lock"

hyperfine_rounds "$out" \
    redlock "$bin -s $redis_url run -k bench -- true" \
    flock "flock -n $lockfile true" \
    true "true"
print_load

redlock_s=$(hf_median "$out" 0)
flock_s=$(hf_median "$out" 1)
true_s=$(hf_median "$out" 2)
rf=$(ratio "$redlock_s" "$flock_s")
echo
echo "medians: redlock $(ms "$redlock_s"), flock $(ms "$flock_s"), true $(ms "$true_s") ($runs runs each)"
echo "redlock/flock = $rf  (target <= 1.3: $(verdict "$rf" 1.3))"
echo "redlock/true  = $(ratio "$redlock_s" "$true_s")"
echo "cpu (user+sys, the wrapper alone): redlock $(ms "$(hf_cpu "$out" 0)"), flock $(ms "$(hf_cpu "$out" 1)"), ratio $(ratio "$(hf_cpu "$out" 0)" "$(hf_cpu "$out" 1)")"
echo "JSON: $out"
