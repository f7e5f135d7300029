#!/usr/bin/env bash
# How fast a waiter gets a lock that is released, and what its waiting costs the servers:
# this build against a baseline built from BASELINE_REV (the last commit before waiters
# were woken by the release over pub/sub; it polls every 20-200 ms), both measured in the
# same run, on throwaway loopback redis-servers.
#
# 1. crowd: CONTENDERS (20) copies of `redlock run -k crowd-.. -w 60s -- sleep CRITICAL`
#    (an 8 ms critical section) started at once; the wall time from the first start to
#    the last exit, over 1 and over 5 servers, next to `flock -w 60 FILE sleep CRITICAL`
#    x CONTENDERS. ROUNDS rounds, the order of the commands rotated every round; medians.
#    The floor is CONTENDERS x CRITICAL (160 ms), which flock nearly reaches.
# 2. hand-over: PAIRS (30) times, per binary, a holder whose PROGRAM's last act is
#    `date +%s%N` and, started while it holds, a waiter (-w 30s) whose PROGRAM is
#    `date +%s%N`: latency = the waiter's time - the holder's, i.e. the holder's PROGRAM
#    ends -> the release -> the waiter acquires -> its PROGRAM starts. Over 1 and over 5
#    servers; median and p90. The two binaries alternate, pair by pair.
# 3. commands: a holder holding HOLD (3) s, and a waiter (-w 30s) started once the holder
#    holds; what the server executed in all (CONFIG RESETSTAT before, INFO commandstats
#    after), minus what the same holder costs alone: the waiter's commands, its own
#    acquire and release included (an uncontended `run -- true` is measured too, for that
#    part). Commands run by scripts count too (a script's SET is one more "set").
#    1 server, CMD_ROUNDS (3) rounds, medians.
#
# Raw figures: $(results_dir)/waiting.txt, one line per measurement; the summary printed
# at the end is computed from that file alone (--summary FILE prints it again). The binary
# under test is copied at the start, so a rebuild during the run changes nothing. With the
# defaults a run takes 70-80 s on 2 cores, plus building the baseline once (about 40 s).
#
#   bash bench/waiting.sh   # ROUNDS=5 CONTENDERS=20 CRITICAL=0.008 PAIRS=30 PAIR_HOLD=0.3
#                           # HOLD=3 CMD_ROUNDS=3 BASELINE_REV=5a070fb JOBS=2 (baseline build)
#   bash bench/waiting.sh --summary bench/results/waiting.txt
set -euo pipefail
source "$(dirname "$0")/lib.sh"
need redis-server redis-cli flock python3 git cmake date

# Prints the summary tables from raw file $1 alone.
summarize() {
    python3 - "$1" <<'PY'
import collections, statistics, sys

crowd = collections.defaultdict(list)
handover = collections.defaultdict(list)
# (binary, run) -> round -> command -> calls
cmds = collections.defaultdict(lambda: collections.defaultdict(dict))
for line in open(sys.argv[1]):
    if line.startswith("#") or not line.strip():
        continue
    f = line.rstrip("\n").split("\t")
    if f[0] == "crowd":
        crowd[f[2]].append(int(f[3]) / 1e3)
    elif f[0] == "handover":
        handover[f[2]].append(int(f[3]) / 1e6)
    elif f[0] == "commands":
        cmds[(f[2], f[3])][f[1]][f[4]] = int(f[5])

med = statistics.median

def p90(xs):
    return statistics.quantiles(xs, n=10, method="inclusive")[8] if len(xs) > 1 else xs[0]

if crowd:
    n = len(crowd["flock"])
    print(f"\ncrowd: wall time, first start to last exit (median of {n} rounds)")
    print(f"  {'':<24} {'median':>10} {'min':>10} {'max':>10} {'/flock':>7} {'/baseline':>10}")
    fl = med(crowd["flock"])
    for name in ["flock", "baseline, 1 server", "new, 1 server", "baseline, 5 servers",
                 "new, 5 servers", "new, 5 servers, --fair"]:
        if name not in crowd:
            continue
        xs = crowd[name]
        m = med(xs)
        vs_base = ""
        if name.startswith("new"):
            b = crowd.get(name.replace("new", "baseline").removesuffix(", --fair"))
            vs_base = f"{m / med(b):.2f}" if b else ""
        print(f"  {name:<24} {m:>7.1f} ms {min(xs):>7.1f} ms {max(xs):>7.1f} ms"
              f" {m / fl:>7.2f} {vs_base:>10}")

if handover:
    print(f"\nhand-over: holder's PROGRAM ends -> waiter's PROGRAM starts")
    print(f"  {'':<20} {'pairs':>5} {'median':>10} {'p90':>10} {'min':>10} {'max':>10}")
    for name in ("baseline", "new", "baseline, 5 servers", "new, 5 servers"):
        xs = handover.get(name)
        if not xs:
            continue
        print(f"  {name:<20} {len(xs):>5} {med(xs):>7.2f} ms {p90(xs):>7.2f} ms"
              f" {min(xs):>7.2f} ms {max(xs):>7.2f} ms")
    for servers, suffix in (("1 server", ""), ("5 servers", ", 5 servers")):
        b, n = handover.get("baseline" + suffix), handover.get("new" + suffix)
        if b and n:
            print(f"  new/baseline, {servers}: median {med(n) / med(b):.2f}, "
                  f"p90 {p90(n) / p90(b):.2f}")

if cmds:
    shown = ["evalsha", "eval", "subscribe", "publish", "pttl"]
    def group(cmd):
        if cmd in ("subscribe", "psubscribe", "ssubscribe"):
            return "subscribe"
        if cmd in ("evalsha", "evalsha_ro"):
            return "evalsha"
        if cmd in ("eval", "eval_ro"):
            return "eval"
        return cmd if cmd in shown else "other"
    def per_round(binary, run):
        out = {}
        for rnd, stats in cmds[(binary, run)].items():
            row = collections.Counter()
            for cmd, calls in stats.items():
                row["total"] += calls
                row[group(cmd)] += calls
            out[rnd] = row
        return out
    def waiters_by_cmd(binary):
        alone, both = cmds[(binary, "holder")], cmds[(binary, "holder+waiter")]
        names = {c for r in both for c in both[r]} | {c for r in alone for c in alone[r]}
        return {c: med([both[r].get(c, 0) - alone.get(r, {}).get(c, 0) for r in both])
                for c in names}
    cols = ["total"] + shown + ["other"]
    rounds = len(cmds[("baseline", "holder")])
    print(f"\ncommands executed by the server, 1 server (median of {rounds} rounds;"
          " calls made by scripts included)")
    print("  " + f"{'':<34}" + "".join(f"{c:>10}" for c in cols))
    waiters = {}
    for binary in ("baseline", "new"):
        alone = per_round(binary, "holder")
        both = per_round(binary, "holder+waiter")
        unc = per_round(binary, "uncontended")
        waiter = {r: collections.Counter({c: both[r][c] - alone[r][c] for c in cols})
                  for r in both if r in alone}
        waiters[binary] = waiter
        for label, rows in ((f"{binary}: holder alone", alone),
                            (f"{binary}: waiter (both - holder)", waiter),
                            (f"{binary}: uncontended run", unc)):
            cells = "".join(f"{med([rows[r][c] for r in rows]):>10g}" for c in cols)
            print(f"  {label:<34}{cells}")
    # What was spent on waiting itself: the waiter less one uncontended acquire+release.
    for binary in ("baseline", "new"):
        unc = per_round(binary, "uncontended")
        w = waiters[binary]
        extra = med([w[r]["total"] - unc[r]["total"] for r in w if r in unc])
        print(f"  {binary}: waiting itself (waiter - uncontended): {extra:g} commands")
    for binary in ("baseline", "new"):
        w = waiters_by_cmd(binary)
        print(f"  {binary} waiter, by command: "
              + ", ".join(f"{c} {v:g}" for c, v in sorted(w.items(), key=lambda i: -i[1]) if v))
PY
}
if [[ "${1:-}" == --summary ]]; then
    summarize "${2:?usage: waiting.sh --summary FILE}"
    exit 0
fi

rounds=${ROUNDS:-5}
contenders=${CONTENDERS:-20}
critical=${CRITICAL:-0.008}
pairs=${PAIRS:-30}
pair_hold=${PAIR_HOLD:-0.3}
hold=${HOLD:-3}
cmd_rounds=${CMD_ROUNDS:-3}
rev=${BASELINE_REV:-5a070fb}
bin=$(redlock_bin)
describe_binary "$bin"
# A copy, measured throughout: a rebuild of $bin during the run must not change (or, while
# it links, remove) the binary under test half-way.
cp "$bin" "$bench_tmp/redlock"
bin_name=$bin
bin="$bench_tmp/redlock"

base=$(baseline_bin "$rev")
describe_binary "$base"
echo "baseline: $rev"

# Every process started in the background, so that an interrupted run leaves none behind
# (redlock passes the TERM on to its PROGRAM and releases).
bg_pids=()
stop_bg() {
    if ((${#bg_pids[@]})); then
        kill "${bg_pids[@]}" 2>/dev/null || true
        wait "${bg_pids[@]}" 2>/dev/null || true
    fi
    bg_pids=()
}
# A second Ctrl-C (or a TERM sent to the whole group) must not cut the clean-up short.
trap 'trap "" INT TERM HUP; stop_bg; bench_cleanup' EXIT

urls=()
for _ in 1 2 3 4 5; do
    start_redis
    urls+=("$redis_url")
done
port=${urls[0]##*:}
one=(-s "${urls[0]}")
five=()
for u in "${urls[@]}"; do five+=(-s "$u"); done
lockfile="$bench_tmp/flock.lock"
flag="$bench_tmp/held"

raw=$(results_dir)/waiting.txt
{
    echo "# bench/waiting.sh, $(date -u +%Y-%m-%dT%H:%M:%SZ); $(nproc) cores"
    echo "# new:      $bin_name ($("$bin" --version | head -1); copied at the start)"
    echo "# baseline: $base ($rev)"
    echo "# crowd ROUND NAME MICROSECONDS    ($contenders x sleep $critical, first start to last exit)"
    echo "# handover PAIR BINARY NANOSECONDS (holder's PROGRAM ends -> waiter's PROGRAM starts)"
    echo "# commands ROUND BINARY RUN COMMAND CALLS (RUN: holder, holder+waiter, uncontended; HOLD=${hold}s)"
} >"$raw"

# Waits for the holder (pid $1) to create $flag, i.e. to hold the lock: at most 10 s.
wait_held() {
    local i
    for ((i = 0; i < 1000; i++)); do
        [[ -e "$flag" ]] && return 0
        kill -0 "$1" 2>/dev/null || break
        sleep 0.01
    done
    echo "bench: the holder never held the lock" >&2
    sed 's/^/    /' "$bench_tmp/bg.0.err" >&2
    exit 1
}

# Waits for every pid in bg_pids; exits with the stderr of those that failed.
reap() {
    local what=$1 i rc failed=0
    for i in "${!bg_pids[@]}"; do
        rc=0
        wait "${bg_pids[i]}" || rc=$?
        if ((rc)); then
            echo "bench: $what: process $i exited $rc" >&2
            sed 's/^/    /' "$bench_tmp/bg.$i.err" >&2
            failed=1
        fi
    done
    bg_pids=()
    ((failed == 0)) || exit 1
}

# One contender of crowd NAME: exec'd, so that every kind costs one fork and one exec.
contender() {
    local name=$1 key=$2
    case $name in
    flock) exec flock -w 60 "$lockfile" sleep "$critical" ;;
    "baseline, 1 server") exec "$base" "${one[@]}" run -k "$key" -w 60s -- sleep "$critical" ;;
    "new, 1 server") exec "$bin" "${one[@]}" run -k "$key" -w 60s -- sleep "$critical" ;;
    "baseline, 5 servers") exec "$base" "${five[@]}" run -k "$key" -w 60s -- sleep "$critical" ;;
    "new, 5 servers") exec "$bin" "${five[@]}" run -k "$key" -w 60s -- sleep "$critical" ;;
    "new, 5 servers, --fair") exec "$bin" "${five[@]}" run -k "$key" -w 60s --fair -- sleep "$critical" ;;
    esac
}

# crowd ROUND NAME: starts $contenders contenders at once and records the wall time from
# the first start to the last exit. A fresh key per crowd: nothing left from the last one.
crowd() {
    local round=$1 name=$2 i t0 t1 key
    key="crowd-$round-${name//[^a-z0-9]/}"
    t0=${EPOCHREALTIME//[!0-9]/}
    for ((i = 0; i < contenders; i++)); do
        contender "$name" "$key" >/dev/null 2>"$bench_tmp/bg.$i.err" &
        bg_pids+=($!)
    done
    reap "crowd '$name'"
    t1=${EPOCHREALTIME//[!0-9]/}
    printf 'crowd\t%d\t%s\t%d\n' "$round" "$name" $((t1 - t0)) >>"$raw"
    printf '  %-20s %6d ms\n' "$name" $(((t1 - t0) / 1000))
}

names=(flock "baseline, 1 server" "new, 1 server" "baseline, 5 servers" "new, 5 servers"
    "new, 5 servers, --fair")
echo "-- crowd: $contenders contenders x sleep $critical, $rounds rounds"
for ((r = 0; r < rounds; r++)); do
    echo "round $((r + 1))/$rounds"
    for ((k = 0; k < ${#names[@]}; k++)); do
        crowd "$((r + 1))" "${names[(k + r) % ${#names[@]}]}"
    done
done

# handover PAIR NAME BIN SERVERS: one holder and one waiter over SERVERS (the name of an
# array of -s options); records the waiter's PROGRAM start minus the holder's PROGRAM end,
# in nanoseconds.
handover() {
    local pair=$1 name=$2 b=$3 end start key
    local -n servers=$4
    key="handover-${name//[^a-z0-9]/}"
    rm -f "$flag" "$bench_tmp/end" "$bench_tmp/start"
    "$b" "${servers[@]}" run -k "$key" -- \
        sh -c ': >"$1"; sleep "$2"; exec date +%s%N' sh "$flag" "$pair_hold" \
        >"$bench_tmp/end" 2>"$bench_tmp/bg.0.err" &
    bg_pids+=($!)
    wait_held "${bg_pids[0]}"
    "$b" "${servers[@]}" run -k "$key" -w 30s -- date +%s%N >"$bench_tmp/start" 2>"$bench_tmp/bg.1.err" &
    bg_pids+=($!)
    reap "hand-over '$name'"
    end=$(tail -n 1 "$bench_tmp/end")
    start=$(tail -n 1 "$bench_tmp/start")
    printf 'handover\t%d\t%s\t%d\n' "$pair" "$name" $((start - end)) >>"$raw"
    if ((start < end)); then
        echo "bench: warning: $name: the waiter's PROGRAM started $(((end - start) / 1000)) us" \
            "before the holder's ended: the lock was not exclusive" >&2
    fi
}

echo "-- hand-over: $pairs pairs per binary (holder holds ${pair_hold}s), 1 and 5 servers"
for ((p = 1; p <= pairs; p++)); do
    if ((p % 2)); then
        handover "$p" baseline "$base" one
        handover "$p" new "$bin" one
        handover "$p" "baseline, 5 servers" "$base" five
        handover "$p" "new, 5 servers" "$bin" five
    else
        handover "$p" "new, 5 servers" "$bin" five
        handover "$p" "baseline, 5 servers" "$base" five
        handover "$p" new "$bin" one
        handover "$p" baseline "$base" one
    fi
    ((p % 10)) || echo "  $p/$pairs"
done

# Appends the server's commandstats since the last CONFIG RESETSTAT, leaving out the
# script's own INFO and CONFIG RESETSTAT.
record_stats() {
    local round=$1 name=$2 run=$3
    redis-cli -p "$port" INFO commandstats | tr -d '\r' |
        sed -n 's/^cmdstat_\([^:]*\):calls=\([0-9]*\),.*/\1 \2/p' |
        while read -r cmd calls; do
            [[ "$cmd" == info || "$cmd" == "config|resetstat" ]] && continue
            printf 'commands\t%d\t%s\t%s\t%s\t%d\n' "$round" "$name" "$run" "$cmd" "$calls"
        done >>"$raw"
}

reset_stats() {
    redis-cli -p "$port" CONFIG RESETSTAT >/dev/null
}

# count_commands ROUND NAME BIN: the holder alone, the holder and one waiter, one uncontended run.
count_commands() {
    local round=$1 name=$2 b=$3 key="commands-$2"
    local holder=(sh -c ': >"$1"; sleep "$2"' sh "$flag" "$hold")

    rm -f "$flag"
    reset_stats
    "$b" "${one[@]}" run -k "$key" -- "${holder[@]}" 2>"$bench_tmp/bg.0.err" &
    bg_pids+=($!)
    reap "holder alone '$name'"
    record_stats "$round" "$name" holder

    rm -f "$flag"
    reset_stats
    "$b" "${one[@]}" run -k "$key" -- "${holder[@]}" 2>"$bench_tmp/bg.0.err" &
    bg_pids+=($!)
    wait_held "${bg_pids[0]}"
    "$b" "${one[@]}" run -k "$key" -w 30s -- true 2>"$bench_tmp/bg.1.err" &
    bg_pids+=($!)
    reap "holder and waiter '$name'"
    record_stats "$round" "$name" holder+waiter

    reset_stats
    "$b" "${one[@]}" run -k "$key" -- true 2>"$bench_tmp/bg.0.err" &
    bg_pids+=($!)
    reap "uncontended '$name'"
    record_stats "$round" "$name" uncontended
}

echo "-- commands: one waiter while a holder holds ${hold}s, $cmd_rounds rounds, 1 server"
for ((r = 1; r <= cmd_rounds; r++)); do
    if ((r % 2)); then
        count_commands "$r" baseline "$base"
        count_commands "$r" new "$bin"
    else
        count_commands "$r" new "$bin"
        count_commands "$r" baseline "$base"
    fi
    echo "  round $r/$cmd_rounds"
done
echo "# $(print_load)" >>"$raw"
print_load

summarize "$raw"
echo
echo "raw: $raw"
