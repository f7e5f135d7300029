#!/usr/bin/env bash
# Latency of one acquisition and release (`redlock run -k bench -- true`, uncontended)
# against 1, 3, 5 and 7 redis-servers given as repeated -s, and against 5 of which one is
# frozen (SIGSTOP: it accepts connections in the kernel but never answers, like a server
# stuck in a long fork or a swap storm). Every server is thawed and stopped on exit.
#
# Targets (medians): 5 servers <= 1.2 x 1 server (requests go to all servers at once);
# one frozen server of 5 adds < 5 ms (a majority answered, so nobody waits for it).
#
#   bash bench/redlock-servers.sh       # RUNS=200 per command in ROUNDS=5, WARMUP=5 a round
set -euo pipefail
source "$(dirname "$0")/lib.sh"
need hyperfine redis-server python3

runs=${RUNS:-200}
rounds=${ROUNDS:-5}
warmup=${WARMUP:-5}
bin=$(redlock_bin)
describe_binary "$bin"

urls=()
pids=()
for _ in 1 2 3 4 5 6 7; do
    start_redis
    urls+=("$redis_url")
    pids+=("$redis_pid")
done
# The one to freeze. Every run leaves one connection in its accept queue (it never
# accepts), so the backlog must outlast warmup + runs; past it, connects would time out.
start_redis --tcp-backlog $((2 * (runs + rounds * warmup) + 64))
frozen_url=$redis_url
frozen_pid=$redis_pid

servers() {
    local n=$1 i args=""
    for ((i = 0; i < n; i++)); do
        args+=" -s ${urls[i]}"
    done
    printf '%s\n' "$args"
}

out=$(results_dir)/redlock-servers.json
freeze "$frozen_pid"
echo "frozen: $frozen_url (pid $frozen_pid, SIGSTOP)"

hyperfine_rounds "$out" \
    "1 server" "$bin$(servers 1) run -k bench -- true" \
    "3 servers" "$bin$(servers 3) run -k bench -- true" \
    "5 servers" "$bin$(servers 5) run -k bench -- true" \
    "7 servers" "$bin$(servers 7) run -k bench -- true" \
    "5 servers, 1 frozen" "$bin$(servers 4) -s $frozen_url run -k bench -- true"
print_load

thaw "$frozen_pid"

one=$(hf_median "$out" 0)
three=$(hf_median "$out" 1)
five=$(hf_median "$out" 2)
seven=$(hf_median "$out" 3)
frozen=$(hf_median "$out" 4)
five_vs_one=$(ratio "$five" "$one")

# The client's own cost per server, in instructions (callgrind; load does not move it):
# wall time on a busy machine mostly measures how long each redis-server waits for a
# CPU, and a majority of 5 must be scheduled where one server needed one wake-up.
instructions() {
    local pid
    valgrind --tool=callgrind --trace-children=no --callgrind-out-file="$bench_tmp/cg.%p" \
        "$@" >/dev/null 2>"$bench_tmp/cg.log" &
    pid=$!
    wait "$pid" || {
        cat "$bench_tmp/cg.log" >&2
        exit 1
    }
    python3 "$bench_dir/callgrind_by_object.py" "$bench_tmp/cg.$pid" 0 | sed -n 's/^total Ir: //p' | tr -d ,
}
if command -v valgrind >/dev/null; then
    ir_one=$(instructions "$bin"$(servers 1) run -k bench -- true)
    ir_five=$(instructions "$bin"$(servers 5) run -k bench -- true)
    ir_seven=$(instructions "$bin"$(servers 7) run -k bench -- true)
fi
added_ms=$(python3 -c 'import sys; print(f"{(float(sys.argv[1]) - float(sys.argv[2])) * 1000:.2f}")' "$frozen" "$five")

echo
echo "medians ($runs runs each):"
echo "  1 server             $(ms "$one")"
echo "  3 servers            $(ms "$three")   ($(ratio "$three" "$one")x one server)"
echo "  5 servers            $(ms "$five")   (${five_vs_one}x one server)"
echo "  7 servers            $(ms "$seven")   ($(ratio "$seven" "$one")x one server)"
echo "  5 servers, 1 frozen  $(ms "$frozen")"
echo "5 servers / 1 server = $five_vs_one  (target <= 1.2: $(verdict "$five_vs_one" 1.2))"
echo "one frozen server of 5 adds $added_ms ms to the median  (target < 5 ms: $(verdict "$added_ms" 4.999))"
if [[ -n "${ir_one:-}" ]]; then
    echo "instructions (redlock process alone): 1 server $ir_one, 5 servers $ir_five" \
        "($(ratio "$ir_five" "$ir_one")x), 7 servers $ir_seven ($(ratio "$ir_seven" "$ir_one")x);" \
        "$(((ir_five - ir_one) / 4)) per extra server"
fi
echo "JSON: $out"
