#!/usr/bin/env bash
# Instructions executed (callgrind's total Ir) by `redlock run -k b -- true` and by
# `flock -n FILE true`: a count that a busy machine does not disturb, unlike wall time.
#
# --trace-children=no: the count covers the wrapper process only (redlock or flock, up
# to its exit), not PROGRAM; both fork and exec `true` the same way. The split by object
# shows where redlock's instructions go (ld.so = dynamic loading and symbol binding).
#
#   bash bench/instructions.sh          # TOP=15 functions listed per command
#   RUN_ARGS="--metrics /tmp/m.prom" bash bench/instructions.sh   # with run options
#   PRELOAD=/lib/x86_64-linux-gnu/libsystemd.so.0 bash bench/instructions.sh
#                                       # what linking a library would cost at start-up
set -euo pipefail
source "$(dirname "$0")/lib.sh"
need valgrind flock redis-server python3

top=${TOP:-15}
# Options added to `run` (word-split), and a library preloaded into redlock (as if linked).
read -r -a run_args <<<"${RUN_ARGS:-}"
preload=${PRELOAD:-}
bin=$(redlock_bin)
describe_binary "$bin"
start_redis
out_dir=$(results_dir)
lockfile="$bench_tmp/flock.lock"

# Runs valgrind on "$@" and prints the callgrind file of the traced process itself.
callgrind() {
    local name=$1 pid
    shift
    rm -f "$out_dir/callgrind.$name".*
    LD_PRELOAD=${preload_for:-} valgrind --tool=callgrind --trace-children=no \
        --callgrind-out-file="$out_dir/callgrind.$name.%p" \
        "$@" >/dev/null 2>"$bench_tmp/valgrind.$name.log" &
    pid=$!
    wait "$pid" || {
        cat "$bench_tmp/valgrind.$name.log" >&2
        echo "bench: $name failed under valgrind" >&2
        exit 1
    }
    # valgrind keeps the pid it was started with: this file is the wrapper's, not a child's.
    printf '%s\n' "$out_dir/callgrind.$name.$pid"
}

# One run first so that the lock scripts are cached on the server (EVALSHA hits, as
# for every run but the very first against a server).
"$bin" -s "$redis_url" run -k b "${run_args[@]}" -- true

redlock_out=$(preload_for=$preload callgrind redlock "$bin" -s "$redis_url" run -k b "${run_args[@]}" -- true)
flock_out=$(callgrind flock flock -n "$lockfile" true)
version_out=$(preload_for=$preload callgrind redlock-version "$bin" --version)

total() { python3 "$bench_dir/callgrind_by_object.py" "$1" 0 | sed -n 's/^total Ir: //p' | tr -d ,; }
redlock_ir=$(total "$redlock_out")
flock_ir=$(total "$flock_out")
version_ir=$(total "$version_out")

echo
echo "== redlock -s URL run -k b ${run_args[*]} -- true${preload:+ (LD_PRELOAD=$preload)}"
python3 "$bench_dir/callgrind_by_object.py" "$redlock_out" "$top"
echo
echo "== flock -n FILE true"
python3 "$bench_dir/callgrind_by_object.py" "$flock_out" 5
echo
commas() { python3 -c 'import sys; print(f"{int(sys.argv[1]):,}")' "$1"; }
printf 'instructions (Ir), wrapper process only:\n'
printf '  redlock run -- true   %12s\n' "$(commas "$redlock_ir")"
printf '  redlock --version     %12s   (start-up and exit alone)\n' "$(commas "$version_ir")"
printf '  flock -n FILE true    %12s\n' "$(commas "$flock_ir")"
echo "redlock/flock = $(ratio "$redlock_ir" "$flock_ir")"
echo "callgrind files: $out_dir/callgrind.*  (open with callgrind_annotate or kcachegrind)"
