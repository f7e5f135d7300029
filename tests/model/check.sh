#!/usr/bin/env bash
# Model-checks the fencing-token protocol (fence.pml) with SPIN: every reachable state of
# the bounded configurations below, exhaustively (no hashing, no bitstate), must keep the
# fences unique and ordered; and each broken variant (the negative controls) must be
# caught, which shows the properties and the model have teeth.
#
#   bash tests/model/check.sh            # the CI set: about 50 s on 2 cores
#   bash tests/model/check.sh --long     # adds two that took over 5 min here (by hand)
#
# Exit status 0 when every check went as expected, 1 otherwise, 77 (CTest: skipped) when
# spin or a C compiler is missing.
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
command -v spin >/dev/null || { echo "check.sh: spin is not installed (apt install spin)"; exit 77; }
cc=${CC:-cc}
command -v "$cc" >/dev/null || { echo "check.sh: no C compiler ($cc)"; exit 77; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp "$here/fence.pml" "$work/"
cd "$work" || exit 1

# expected ("pass": no assertion violation; "fail": one found), -D flags, why.
checks=(
    "pass|-DNS=3 -DNC=2 -DNA=1|three servers, two clients, one attempt each"
    "pass|-DNS=1 -DNC=2 -DNA=2|one server, two clients retrying"
    "pass|-DNS=1 -DNC=3 -DNA=1|one server, three clients"
    "pass|-DNS=2 -DNC=2 -DNA=1|two servers (majority: both)"
    "pass|-DNS=3 -DNC=2 -DNA=1 -DLATE|requests executed after the client gave up"
    "pass|-DNS=3 -DNC=2 -DNA=1 -DREAD_ROUND1 -DALWAYS_ROUND2|the earlier protocol: round 1 reads, round 2 always"
    "fail|-DNS=3 -DNC=2 -DNA=1 -DREAD_ROUND1 -DALWAYS_ROUND2 -DLITERAL|earlier protocol, a round-2 ok counted from any server"
    "fail|-DNS=3 -DNC=2 -DNA=1 -DSKIP_ROUND2|no round 2, even when the yes replies differ"
    "fail|-DNS=3 -DNC=2 -DNA=1 -DREAD_ROUND1|round 1 only reads, round 2 skipped when they agree"
    "fail|-DNS=3 -DNC=2 -DNA=1 -DCOUNTER_LOST|a server restarts with its counter lost"
    "pass|-DNS=2 -DNC=2 -DNA=1 -DRESEED|counters expire while unused and start again from the clock"
    "pass|-DNS=1 -DNC=2 -DNA=2 -DRESEED|one server, counters expiring, clients retrying"
    "fail|-DNS=3 -DNC=2 -DNA=1 -DRESEED -DCLOCK_BACK|a counter started again from a clock stepped back"
    "fail|-DNS=3 -DNC=2 -DNA=1 -DREACH_SUCCESS2|sanity: two acquisitions succeed"
    "fail|-DNS=3 -DNC=2 -DNA=1 -DREACH_OVERLAP|sanity: two holders at once"
)
if [[ ${1:-} == --long ]]; then
    checks+=(
        "pass|-DNS=3 -DNC=2 -DNA=2|three servers, two clients retrying (long)"
        "pass|-DNS=5 -DNC=2 -DNA=1|five servers (long)"
    )
fi

passed=0
failed=0
for check in "${checks[@]}"; do
    IFS='|' read -r expect flags why <<<"$check"
    rm -f pan pan.* _spin_nvr.tmp ./*.trail
    # shellcheck disable=SC2086 # the flags are words
    if ! spin -a $flags fence.pml >spin.out 2>&1 ||
        ! "$cc" -O2 -DSAFETY -DMEMLIM=2048 -o pan pan.c 2>cc.out; then
        echo "FAIL [$flags] $why: the model does not build"
        cat spin.out cc.out
        failed=$((failed + 1))
        continue
    fi
    start=$(date +%s.%N)
    ./pan -m100000 >pan.out 2>&1
    took=$(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN { printf "%.1f", e - s }')
    errors=$(sed -nE 's/.*errors: ([0-9]+).*/\1/p' pan.out | tail -1)
    states=$(sed -nE 's/^ *([0-9.e+]+) states, stored.*/\1/p' pan.out | tail -1)
    if [[ -z $errors ]]; then
        got="no result"
    elif grep -q "max search depth too small\|out of memory" pan.out; then
        got="incomplete" # a search that was cut short proves nothing
    elif ((errors == 0)); then
        got=pass
    else
        got=fail
    fi
    if [[ $got == "$expect" ]]; then
        echo "ok   [$flags] $why: $got as expected (${states:-?} states, ${took}s)"
        passed=$((passed + 1))
    else
        echo "FAIL [$flags] $why: expected $expect, got $got (${states:-?} states, ${took}s)"
        tail -20 pan.out
        failed=$((failed + 1))
    fi
done
echo "model: $passed passed, $failed failed"
((failed == 0))
