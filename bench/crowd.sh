#!/usr/bin/env bash
# Crowds: what a crowd of N waiters on one lock costs, next to flock's crowd in the same
# run, for this build and a baseline (BASELINE_REV, built once; BASELINE_BIN instead names
# a binary), on throwaway loopback redis-servers.
#
# A crowd: N copies of `redlock run -k KEY -w 300s [--fair|--limit 4] -- sleep CRITICAL`
# (an 8 ms critical section) started at once, over 1 and over 5 servers; flock's is N
# copies of `flock -w 300 FILE sleep CRITICAL` (one at a time, where --limit 4 lets
# four). For each crowd:
#   wall      first start to last exit; /flock is that over flock's crowd of the same N
#             in the same round
#   cmds/h    commands each server executed during the crowd (INFO commandstats after a
#             CONFIG RESETSTAT; the calls made by scripts count too), divided by N, the
#             number of hand-overs: the largest among the servers, which is the one all
#             the waiters go to first over Redlock
#   runnable  the mean of /proc/stat's procs_running, sampled every 50 ms during the
#             crowd: the instantaneous load average (the 1-minute one lags a crowd of a
#             few seconds); flock's crowd, asleep in the kernel, shows what waiting
#             costs nothing looks like
#   cpu       user + system seconds of the crowd's processes (redlock and PROGRAM), from
#             the shell's `times`
# CONTENDERS ("20 100 250"), SERVERS ("1 5"), MODES ("plain fair limit"), ROUNDS (3); the
# order of the crowds rotates every round; medians. Each redis-server gets --maxclients
# 4096, and the shell's open-file limit is raised to fit: a crowd of 250 over several
# servers opens 500-750 connections to each, more than the 992 a default redis-server
# accepts under a 1024 descriptor limit.
#
# Raw figures: $(results_dir)/crowd.txt, one line per crowd; the summary is computed from
# that file alone (--summary FILE prints it again). The baseline's crowds of 250 over five
# servers took about a minute each on 2 cores: ROUNDS=1 for a quick look.
#
#   bash bench/crowd.sh                  # CONTENDERS="20 100 250" ROUNDS=3 CRITICAL=0.008
#   BASELINE_REV=9fd566c bash bench/crowd.sh
#   bash bench/crowd.sh --summary bench/results/crowd.txt
set -euo pipefail
source "$(dirname "$0")/lib.sh"
need redis-server redis-cli flock python3 git cmake

summarize() {
    python3 - "$1" <<'PY'
import collections, statistics, sys

rows = collections.defaultdict(list)  # (n, kind) -> [(wall, cmds, runnable, cpu, failed)]
flock = collections.defaultdict(dict)  # n -> round -> wall
order = []
for line in open(sys.argv[1]):
    if line.startswith("#") or not line.strip():
        continue
    _, n, rnd, kind, wall, cmds, runnable, cpu, failed = line.rstrip("\n").split("\t")
    n, wall = int(n), int(wall) / 1e6
    if kind == "flock":
        flock[n][rnd] = wall
    key = (n, kind)
    if key not in rows:
        order.append(key)
    rows[key].append((rnd, wall, float(cmds), float(runnable), float(cpu), int(failed)))

med = statistics.median
print(f"\n{'crowd':<34} {'rounds':>6} {'wall':>9} {'/flock':>7} {'cmds/h':>7}"
      f" {'runnable':>9} {'cpu':>8} {'failed':>6}")
for n, kind in sorted(order, key=lambda k: (k[0], order.index(k))):
    rs = rows[(n, kind)]
    ratios = [wall / flock[n][rnd] for rnd, wall, *_ in rs if rnd in flock[n]]
    cmds = med([r[2] for r in rs])
    print(f"{f'{n} x {kind}':<34} {len(rs):>6} {med([r[1] for r in rs]):>7.2f} s"
          f" {med(ratios):>7.2f} {('-' if kind == 'flock' else f'{cmds:.1f}'):>7}"
          f" {med([r[3] for r in rs]):>9.1f} {med([r[4] for r in rs]):>6.1f} s"
          f" {sum(r[5] for r in rs):>6}")
PY
}
if [[ "${1:-}" == --summary ]]; then
    summarize "${2:?usage: crowd.sh --summary FILE}"
    exit 0
fi

rounds=${ROUNDS:-3}
read -r -a sizes <<<"${CONTENDERS:-20 100 250}"
read -r -a server_counts <<<"${SERVERS:-1 5}"
read -r -a modes <<<"${MODES:-plain fair limit}"
critical=${CRITICAL:-0.008}
bin=$(redlock_bin)
describe_binary "$bin"
cp "$bin" "$bench_tmp/redlock" # a rebuild during the run changes nothing
bin_name=$bin
bin="$bench_tmp/redlock"
if [[ -n "${BASELINE_BIN:-}" ]]; then
    base=$BASELINE_BIN
    base_name=$base
else
    base_name=${BASELINE_REV:-9fd566c}
    base=$(baseline_bin "$base_name")
fi
describe_binary "$base"
cp "$base" "$bench_tmp/baseline"
base="$bench_tmp/baseline"

ulimit -n 8192 2>/dev/null || ulimit -n "$(ulimit -Hn)" || true
urls=()
ports=()
for _ in 1 2 3 4 5; do
    start_redis --maxclients 4096
    urls+=("$redis_url")
    ports+=("${redis_url##*:}")
done
lockfile="$bench_tmp/flock.lock"

raw=$(results_dir)/crowd.txt
{
    echo "# bench/crowd.sh, $(date -u +%Y-%m-%dT%H:%M:%SZ); $(nproc) cores; sleep $critical each"
    echo "# new:      $bin_name ($("$bin" --version | head -1); copied at the start)"
    echo "# baseline: $base_name"
    echo "# crowd N ROUND KIND WALL_US CMDS_PER_HANDOVER RUNNABLE CPU_S FAILED"
} >"$raw"

bg_pids=()
sampler=
stop_bg() {
    [[ -n "$sampler" ]] && kill "$sampler" 2>/dev/null
    if ((${#bg_pids[@]})); then
        kill "${bg_pids[@]}" 2>/dev/null || true
        wait "${bg_pids[@]}" 2>/dev/null || true
    fi
    bg_pids=()
}
trap 'trap "" INT TERM HUP; stop_bg; bench_cleanup' EXIT

# Samples procs_running every 50 ms into $1 until killed.
sample_runnable() {
    local key value
    while :; do
        while read -r key value _; do
            if [[ $key == procs_running ]]; then
                echo "$value"
                break
            fi
        done </proc/stat
        sleep 0.05
    done >"$1"
}

# Writes the user + system seconds of this shell's children so far to file $1. Not in a
# command substitution: there `times` would count the subshell's children, none.
children_cpu() {
    times >"$bench_tmp/times"
    python3 -c '
import re, sys
t = open(sys.argv[1]).read().splitlines()[-1]  # "1m2.5s 0m0.4s": children user, system
total = sum(int(m) * 60 + float(s) for m, s in re.findall(r"(\d+)m([\d.]+)s", t))
print(f"{total:.3f}")
' "$bench_tmp/times" >"$1"
}

# crowd ROUND N KIND: KIND is "flock", or "BINARY, S server(s)[, --fair]".
crowd() {
    local round=$1 n=$2 kind=$3 i t0 t1 key failed=0 rc
    local cmd=()
    local servers=1 b=$bin
    [[ $kind == baseline* ]] && b=$base
    [[ $kind == *"5 servers"* ]] && servers=5
    key="crowd-$round-$n-${kind//[^a-z0-9]/}"
    if [[ $kind == flock ]]; then
        cmd=(flock -w 300 "$lockfile" sleep "$critical")
    else
        cmd=("$b")
        for ((i = 0; i < servers; i++)); do cmd+=(-s "${urls[i]}"); done
        cmd+=(run -k "$key" -w 300s)
        [[ $kind == *--fair* ]] && cmd+=(--fair)
        [[ $kind == *--limit* ]] && cmd+=(--limit 4)
        cmd+=(-- sleep "$critical")
    fi
    for p in "${ports[@]}"; do redis-cli -p "$p" CONFIG RESETSTAT >/dev/null; done
    sample_runnable "$bench_tmp/runnable" &
    sampler=$!
    children_cpu "$bench_tmp/cpu0"
    t0=${EPOCHREALTIME//[!0-9]/}
    for ((i = 0; i < n; i++)); do
        "${cmd[@]}" >/dev/null 2>"$bench_tmp/bg.$i.err" &
        bg_pids+=($!)
    done
    for i in "${!bg_pids[@]}"; do
        rc=0
        wait "${bg_pids[i]}" || rc=$?
        if ((rc)); then
            ((failed++ == 0)) && {
                echo "bench: $kind: a contender exited $rc:" >&2
                sed 's/^/    /' "$bench_tmp/bg.$i.err" >&2
            }
        fi
    done
    bg_pids=()
    t1=${EPOCHREALTIME//[!0-9]/}
    kill "$sampler" 2>/dev/null
    wait "$sampler" 2>/dev/null || true
    sampler=
    children_cpu "$bench_tmp/cpu1"
    local most=0 calls
    if [[ $kind != flock ]]; then
        for ((i = 0; i < servers; i++)); do
            calls=$(redis-cli -p "${ports[i]}" INFO commandstats | tr -d '\r' |
                sed -n 's/^cmdstat_\([^:]*\):calls=\([0-9]*\),.*/\1 \2/p' |
                awk '$1 != "info" && $1 != "config|resetstat" { s += $2 } END { print s + 0 }')
            ((calls > most)) && most=$calls
        done
    fi
    python3 - "$raw" "$n" "$round" "$kind" $((t1 - t0)) "$most" "$bench_tmp/runnable" \
        "$(<"$bench_tmp/cpu0")" "$(<"$bench_tmp/cpu1")" "$failed" <<'PY'
import statistics, sys
raw, n, rnd, kind, wall, most, runnable, cpu0, cpu1, failed = sys.argv[1:]
samples = [int(x) for x in open(runnable).read().split()] or [0]
# The sampler itself is running when it reads: one less.
load = max(statistics.fmean(samples) - 1, 0)
with open(raw, "a") as f:
    f.write(f"crowd\t{n}\t{rnd}\t{kind}\t{wall}\t{int(most) / int(n):.2f}\t{load:.2f}"
            f"\t{float(cpu1) - float(cpu0):.2f}\t{failed}\n")
print(f"  {n:>4} x {kind:<30} {int(wall) / 1e6:7.2f} s  {int(most) / int(n):6.1f} cmds/h"
      f"  runnable {load:5.1f}{'  FAILED ' + failed if failed != '0' else ''}")
PY
}

kinds=()
for s in "${server_counts[@]}"; do
    label="$s servers"
    ((s == 1)) && label="1 server"
    for m in "${modes[@]}"; do
        suffix=""
        [[ $m == fair ]] && suffix=", --fair"
        [[ $m == limit ]] && suffix=", --limit 4"
        kinds+=("baseline, $label$suffix" "new, $label$suffix")
    done
done
for ((r = 1; r <= rounds; r++)); do
    echo "round $r/$rounds"
    for n in "${sizes[@]}"; do
        all=(flock "${kinds[@]}")
        for ((k = 0; k < ${#all[@]}; k++)); do
            crowd "$r" "$n" "${all[(k + r) % ${#all[@]}]}"
        done
    done
done
echo "# $(print_load)" >>"$raw"
print_load
summarize "$raw"
echo
echo "raw: $raw"
