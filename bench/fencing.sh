#!/usr/bin/env bash
# What fencing tokens and the pause watchdog cost: `redlock run -k bench -- true` over 1
# and 5 redis-servers, this build against a baseline built from the last commit before
# them (BASELINE_REV), both measured in the same run. One server pays nothing extra on
# the wire (the acquire script increments the counter); five pay one more round trip
# (the fence write) before PROGRAM starts. Both pay the watchdog, now started before
# PROGRAM instead of 50 ms into it.
#
#   bash bench/fencing.sh     # RUNS=200 per command in ROUNDS=5; BASELINE_REV=<commit>
set -euo pipefail
source "$(dirname "$0")/lib.sh"
need hyperfine redis-server python3 git cmake

runs=${RUNS:-200}
rounds=${ROUNDS:-5}
warmup=${WARMUP:-5}
rev=${BASELINE_REV:-3180466}
bin=$(redlock_bin)
describe_binary "$bin"

# The baseline, built once into bench/.baseline-<rev> (a git worktree; ignored by git).
base_dir="$bench_dir/.baseline-$rev"
if [[ ! -x "$base_dir/build/redlock" ]]; then
    echo "building the baseline $rev into $base_dir (once)"
    rm -rf "$base_dir"
    git -C "$repo_root" worktree add --detach --force "$base_dir/src" "$rev" >/dev/null
    cmake -S "$base_dir/src" -B "$base_dir/build" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
        -DREDLOCK_BUILD_TESTS=OFF >/dev/null
    cmake --build "$base_dir/build" --target redlock -j"${JOBS:-2}" >/dev/null
fi
base="$base_dir/build/redlock"
echo "baseline: $base ($rev)"

urls=()
for _ in 1 2 3 4 5; do
    start_redis
    urls+=("$redis_url")
done
one="-s ${urls[0]}"
five=""
for u in "${urls[@]}"; do five+=" -s $u"; done

out=$(results_dir)/fencing.json
hyperfine_rounds "$out" \
    "baseline, 1 server" "$base $one run -k bench -- true" \
    "fenced, 1 server" "$bin $one run -k bench -- true" \
    "baseline, 5 servers" "$base$five run -k bench -- true" \
    "fenced, 5 servers" "$bin$five run -k bench -- true"
print_load

b1=$(hf_median "$out" 0)
f1=$(hf_median "$out" 1)
b5=$(hf_median "$out" 2)
f5=$(hf_median "$out" 3)
echo
echo "medians ($runs runs each):"
echo "  1 server   baseline $(ms "$b1")  fenced $(ms "$f1")  ($(ratio "$f1" "$b1")x)"
echo "  5 servers  baseline $(ms "$b5")  fenced $(ms "$f5")  ($(ratio "$f5" "$b5")x)"
echo "JSON: $out"
