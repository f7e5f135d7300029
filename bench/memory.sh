#!/usr/bin/env bash
# Peak memory (maximum resident set size, from /usr/bin/time -v) of
# `redlock run -k b -- true` next to `flock -n FILE true`, as the median of RUNS runs.
#
# The figure is getrusage's ru_maxrss for the command's process tree: the largest single
# process in it, which is the wrapper (redlock or flock) since `true` is smaller.
#
#   bash bench/memory.sh                # RUNS=21 by default
set -euo pipefail
source "$(dirname "$0")/lib.sh"
need redis-server flock python3
[[ -x /usr/bin/time ]] || {
    echo "bench: /usr/bin/time is missing; run scripts/setup.sh (package time)" >&2
    exit 1
}

runs=${RUNS:-21}
bin=$(redlock_bin)
describe_binary "$bin"
start_redis
lockfile="$bench_tmp/flock.lock"

# Prints the median max RSS in KiB of "$@" over $runs runs.
max_rss() {
    local i
    for ((i = 0; i < runs; i++)); do
        /usr/bin/time -v "$@" 2>&1 >/dev/null | sed -n 's/^\s*Maximum resident set size (kbytes): //p'
    done | python3 -c 'import statistics, sys; print(int(statistics.median(int(l) for l in sys.stdin)))'
}

redlock_kb=$(max_rss "$bin" -s "$redis_url" run -k b -- true)
version_kb=$(max_rss "$bin" --version)
flock_kb=$(max_rss flock -n "$lockfile" true)
true_kb=$(max_rss true)

echo
echo "max RSS, median of $runs runs:"
printf '  redlock run -- true   %6s KiB\n' "$redlock_kb"
printf '  redlock --version     %6s KiB   (start-up alone)\n' "$version_kb"
printf '  flock -n FILE true    %6s KiB\n' "$flock_kb"
printf '  true                  %6s KiB\n' "$true_kb"
echo "redlock/flock = $(ratio "$redlock_kb" "$flock_kb")"
