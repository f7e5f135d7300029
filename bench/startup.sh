#!/usr/bin/env bash
# Start-up at the floor: redlock next to bench/floor.c, the least a Redis lock wrapper can
# do (connect, SET NX PX to every server at once, vfork+exec, wait, release script; libc
# only), over 1 and 5 servers, and flock(1). Wall time (hyperfine medians, same run,
# interleaved rounds) and instructions (callgrind, the wrapper process alone).
# Targets (issue 13): redlock <= 1.15 x floor for 1 and 5 servers; fewer instructions
# than flock.
#
#   bash bench/startup.sh        # RUNS=300 per command in ROUNDS=5, WARMUP=10 a round
set -euo pipefail
source "$(dirname "$0")/lib.sh"
need hyperfine valgrind flock redis-server python3 cc

runs=${RUNS:-300}
rounds=${ROUNDS:-5}
warmup=${WARMUP:-10}
bin=$(redlock_bin)
describe_binary "$bin"
floor="$bench_tmp/floor"
cc -O2 -o "$floor" "$bench_dir/floor.c"

urls=() ports=()
for _ in 1 2 3 4 5; do
    start_redis
    urls+=("-s" "$redis_url")
    ports+=("${redis_url##*:}")
done
one_port=${ports[0]}
five_ports=$(IFS=,; echo "${ports[*]}")
out_dir=$(results_dir)
out="$out_dir/startup.json"
lockfile="$bench_tmp/flock.lock"
# The first run against a server loads the scripts: not what a cron host pays every time.
"$bin" "${urls[@]:0:2}" run -k b -- true
"$bin" "${urls[@]}" run -k b -- true

hyperfine_rounds "$out" \
    floor-1 "$floor $one_port -- true" \
    redlock-1 "$bin ${urls[*]:0:2} run -k b -- true" \
    floor-5 "$floor $five_ports -- true" \
    redlock-5 "$bin ${urls[*]} run -k b -- true" \
    flock "flock -n $lockfile true"
print_load

callgrind_total() {
    local log="$bench_tmp/cg.log" file pid
    valgrind --tool=callgrind --trace-children=no --callgrind-out-file="$bench_tmp/cg.%p" \
        "$@" >/dev/null 2>"$log" &
    pid=$!
    wait "$pid"
    file="$bench_tmp/cg.$pid"
    python3 "$bench_dir/callgrind_by_object.py" "$file" 0 | sed -n 's/^total Ir: //p' | tr -d ,
}
ir_floor=$(callgrind_total "$floor" "$one_port" -- true)
ir_redlock=$(callgrind_total "$bin" "${urls[@]:0:2}" run -k b -- true)
ir_redlock5=$(callgrind_total "$bin" "${urls[@]}" run -k b -- true)
ir_flock=$(callgrind_total flock -n "$lockfile" true)

f1=$(hf_median "$out" 0) r1=$(hf_median "$out" 1) f5=$(hf_median "$out" 2)
r5=$(hf_median "$out" 3) fl=$(hf_median "$out" 4)
echo
echo "medians ($runs runs each): floor $(ms "$f1") / redlock $(ms "$r1") with 1 server;" \
    "floor $(ms "$f5") / redlock $(ms "$r5") with 5; flock $(ms "$fl")"
echo "redlock/floor, 1 server  = $(ratio "$r1" "$f1")  (target <= 1.15: $(verdict "$(ratio "$r1" "$f1")" 1.15))"
echo "redlock/floor, 5 servers = $(ratio "$r5" "$f5")  (target <= 1.15: $(verdict "$(ratio "$r5" "$f5")" 1.15))"
echo "cpu (user+sys): floor $(ms "$(hf_cpu "$out" 0)"), redlock $(ms "$(hf_cpu "$out" 1)"), flock $(ms "$(hf_cpu "$out" 4)")"
echo "instructions: floor $ir_floor, redlock $ir_redlock (5 servers: $ir_redlock5), flock $ir_flock" \
    "(target: redlock < flock: $( ((ir_redlock < ir_flock)) && echo met || echo MISSED))"
echo "JSON: $out"
