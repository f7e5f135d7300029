# Shared by the bench/*.sh scripts (sourced, not run): finds the redlock binary, starts
# throwaway redis-servers on loopback and always stops them (and thaws frozen ones).
# shellcheck shell=bash

bench_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo_root=$(dirname "$bench_dir")

# $REDLOCK_BIN, else build/redlock (build it with scripts/demo.sh, or cmake -B build).
redlock_bin() {
    local bin=${REDLOCK_BIN:-$repo_root/build/redlock}
    if [[ ! -x "$bin" ]]; then
        echo "bench: no redlock binary at $bin; build one (bash scripts/demo.sh, or" >&2
        echo "  cmake -S . -B build -DCMAKE_BUILD_TYPE=Release && cmake --build build -j2)" >&2
        echo "  or set REDLOCK_BIN" >&2
        exit 1
    fi
    printf '%s\n' "$bin"
}

# The redlock built from git revision $1, once, into bench/.baseline-<rev> (a git worktree;
# ignored by git); prints its path. A worktree left by an earlier, interrupted build is
# reused. JOBS (2) parallel compile jobs.
baseline_bin() {
    local rev=$1 base_dir want
    base_dir="$bench_dir/.baseline-$rev"
    if [[ ! -x "$base_dir/build/redlock" ]]; then
        echo "building the baseline $rev into $base_dir (once)" >&2
        want=$(git -C "$repo_root" rev-parse --verify "$rev^{commit}")
        if [[ "$(git -C "$base_dir/src" rev-parse HEAD 2>/dev/null)" != "$want" ]]; then
            rm -rf "$base_dir"
            git -C "$repo_root" worktree prune
            git -C "$repo_root" worktree add --detach --force "$base_dir/src" "$rev" >/dev/null
        fi
        cmake -S "$base_dir/src" -B "$base_dir/build" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
            -DREDLOCK_BUILD_TESTS=OFF >/dev/null
        cmake --build "$base_dir/build" --target redlock -j"${JOBS:-2}" >/dev/null
    fi
    printf '%s\n' "$base_dir/build/redlock"
}

# Tells which build is measured: a benchmark of a Debug or sanitizer build means little.
describe_binary() {
    local bin=$1 cache
    cache="$(dirname "$bin")/CMakeCache.txt"
    local type="unknown build type" sanitize=""
    if [[ -f "$cache" ]]; then
        type=$(sed -n 's/^CMAKE_BUILD_TYPE:[A-Z]*=//p' "$cache")
        sanitize=$(sed -n 's/^REDLOCK_SANITIZE:[A-Z]*=//p' "$cache")
    fi
    echo "binary: $bin ($("$bin" --version | head -1); ${type:-no build type}${sanitize:+, sanitize=$sanitize})"
    if [[ -n "$sanitize" || "$type" == Debug ]]; then
        echo "bench: warning: this is not an optimized build; figures will be pessimistic" >&2
    fi
}

bench_tmp=$(mktemp -d -t redlock-bench.XXXXXX)
redis_pids=()
frozen_pids=()

bench_cleanup() {
    local pid
    # A stopped process cannot act on SIGTERM: thaw first, then stop.
    for pid in "${frozen_pids[@]}"; do
        kill -CONT "$pid" 2>/dev/null || true
    done
    for pid in "${redis_pids[@]}"; do
        kill "$pid" 2>/dev/null || true
    done
    for pid in "${redis_pids[@]}"; do
        wait "$pid" 2>/dev/null || true
    done
    rm -rf "$bench_tmp"
}
trap bench_cleanup EXIT
trap 'exit 130' INT TERM HUP

# The config file search must not pick up a user's or the machine's config: an empty one.
: >"$bench_tmp/empty.toml"
export REDLOCK_CONFIG="$bench_tmp/empty.toml"

free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# Starts a redis-server on a free loopback port with no persistence; extra arguments go
# to redis-server. Sets $redis_url and $redis_pid; the server is stopped on exit.
start_redis() {
    local port dir
    for _ in 1 2 3; do
        port=$(free_port)
        dir=$(mktemp -d "$bench_tmp/redis.XXXXXX")
        redis-server --bind 127.0.0.1 --port "$port" --save '' --appendonly no --dir "$dir" \
            --logfile "$dir/redis.log" --daemonize no "$@" &
        redis_pid=$!
        redis_pids+=("$redis_pid")
        for _ in $(seq 100); do
            if redis-cli -p "$port" ping >/dev/null 2>&1; then
                redis_url="redis://127.0.0.1:$port"
                return 0
            fi
            kill -0 "$redis_pid" 2>/dev/null || break
            sleep 0.05
        done
        # Lost the race for the port (or slow start): try another one.
        kill "$redis_pid" 2>/dev/null || true
    done
    echo "bench: could not start redis-server" >&2
    exit 1
}

freeze() {
    kill -STOP "$1"
    frozen_pids+=("$1")
}

thaw() {
    kill -CONT "$1" 2>/dev/null || true
}

# Runs hyperfine on NAME COMMAND pairs in $rounds rounds of $runs/$rounds runs each,
# rotating the order every round, and pools every round's timings into JSON $1 (same
# shape as hyperfine's: results[i].command/median/mean/min/max/times, in the order
# given). On a shared machine the load drifts over minutes; interleaving the commands
# spreads that drift over all of them instead of charging it to whichever ran last.
#   hyperfine_rounds OUT.json NAME1 CMD1 NAME2 CMD2 ...
hyperfine_rounds() {
    local out=$1
    shift
    local names=() cmds=()
    while (($# >= 2)); do
        names+=("$1")
        cmds+=("$2")
        shift 2
    done
    local n=${#names[@]} r i k per_round=$(((runs + rounds - 1) / rounds))
    local round_files=()
    for ((r = 0; r < rounds; r++)); do
        local args=()
        for ((k = 0; k < n; k++)); do
            i=$(((k + r) % n))
            args+=(-n "${names[i]}" "${cmds[i]}")
        done
        echo "-- round $((r + 1))/$rounds ($per_round runs per command)"
        if ! hyperfine -N --style basic --warmup "$warmup" --runs "$per_round" \
            --export-json "$bench_tmp/round.$r.json" "${args[@]}" >"$bench_tmp/round.log" 2>&1; then
            tail -n 20 "$bench_tmp/round.log" >&2
            echo "bench: hyperfine failed (a command exited non-zero?)" >&2
            exit 1
        fi
        grep -E '^(Benchmark|  Time)' "$bench_tmp/round.log" || true
        round_files+=("$bench_tmp/round.$r.json")
    done
    python3 - "$out" "${names[@]}" -- "${round_files[@]}" <<'PY'
import json, statistics, sys
args = sys.argv[1:]
out, rest = args[0], args[1:]
sep = rest.index("--")
names, files = rest[:sep], rest[sep + 1:]
times = {name: [] for name in names}
cpu = {name: [] for name in names}
for path in files:
    for result in json.load(open(path))["results"]:
        times[result["command"]].extend(result["times"])
        cpu[result["command"]].append(result["user"] + result["system"])
results = []
for name in names:
    t = times[name]
    # cpu: the command's own user+system time (mean of the rounds' means), which a busy
    # machine inflates far less than wall time; it leaves out the redis-server's share.
    results.append({"command": name, "runs": len(t), "median": statistics.median(t),
                    "mean": statistics.fmean(t), "stddev": statistics.pstdev(t),
                    "min": min(t), "max": max(t), "cpu": statistics.fmean(cpu[name]),
                    "times": t})
json.dump({"results": results}, open(out, "w"), indent=1)
print(f"{'command':<28} {'runs':>5} {'median':>10} {'mean':>10} {'min':>10} {'cpu':>10}")
for r in results:
    print(f"{r['command']:<28} {r['runs']:>5} {r['median'] * 1e3:>7.2f} ms {r['mean'] * 1e3:>7.2f} ms"
          f" {r['min'] * 1e3:>7.2f} ms {r['cpu'] * 1e3:>7.2f} ms")
PY
}

# Prints the median (seconds) of command number $2 (0-based) in hyperfine JSON $1.
hf_median() {
    python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["results"][int(sys.argv[2])]["median"])' \
        "$1" "$2"
}

# Prints the mean user+system time (seconds) of command number $2 in pooled JSON $1.
hf_cpu() {
    python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["results"][int(sys.argv[2])]["cpu"])' \
        "$1" "$2"
}

# Prints $1 / $2 with 2 decimals.
ratio() {
    python3 -c 'import sys; print(f"{float(sys.argv[1]) / float(sys.argv[2]):.2f}")' "$1" "$2"
}

# Prints seconds $1 as milliseconds with 2 decimals.
ms() {
    python3 -c 'import sys; print(f"{float(sys.argv[1]) * 1000:.2f} ms")' "$1"
}

# Prints "PASS" or "MISS" for "$1 <= $2".
verdict() {
    python3 -c 'import sys; print("PASS" if float(sys.argv[1]) <= float(sys.argv[2]) else "MISS")' "$1" "$2"
}

# The machine's load, printed with every result: a busy machine inflates every median.
print_load() {
    echo "machine: $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg) ($(date -u +%Y-%m-%dT%H:%MZ))"
}

need() {
    local tool
    for tool in "$@"; do
        command -v "$tool" >/dev/null ||
            {
                echo "bench: $tool is missing; run scripts/setup.sh" >&2
                exit 1
            }
    done
}

# Where results are kept: bench/results/ (ignored by git unless you add them).
results_dir() {
    local dir=${BENCH_RESULTS:-$bench_dir/results}
    mkdir -p "$dir"
    printf '%s\n' "$dir"
}
