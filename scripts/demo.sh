#!/usr/bin/env bash
# A first look at redlock: builds it, starts a throwaway redis-server on loopback, and
# shows what `redlock run` does when two programs want the same lock at once.
#
#   bash scripts/demo.sh
#
# Nothing is left behind: the redis-server runs on a free port with no persistence, its
# files live in a temp dir, and both are removed on exit. Exit status 0 means every
# step behaved as described.
set -euo pipefail

cd "$(dirname "$0")/.."
root=$(pwd)

bold=$'\e[1m' green=$'\e[32m' red=$'\e[31m' dim=$'\e[2m' off=$'\e[0m'
if [[ ! -t 1 || -n "${NO_COLOR:-}" ]]; then
    bold='' green='' red='' dim='' off=''
fi
step() { printf '\n%s== %s ==%s\n' "$bold" "$*" "$off"; }
say() { printf '%s\n' "$*"; }
ok() { printf '%s✔ %s%s\n' "$green" "$*" "$off"; }
fail() {
    printf '%s✘ %s%s\n' "$red" "$*" "$off" >&2
    exit 1
}

step "1. Installing what redlock needs (scripts/setup.sh)"
bash scripts/setup.sh

step "2. Building redlock (Release) into build/"
tmp_configure_log=$(mktemp)
cmake -S "$root" -B "$root/build" -DCMAKE_BUILD_TYPE=Release -DREDLOCK_WERROR=OFF -DREDLOCK_SANITIZE= >"$tmp_configure_log" 2>&1 ||
    {
        cat "$tmp_configure_log"
        fail "cmake could not configure the build"
    }
say "(a minute or two on a fresh checkout; the compiler's output goes to build/demo-build.log)"
cmake --build "$root/build" -j"${JOBS:-2}" --target redlock >"$root/build/demo-build.log" 2>&1 ||
    {
        tail -40 "$root/build/demo-build.log"
        fail "the build failed; the whole log is in build/demo-build.log"
    }
rm -f "$tmp_configure_log"
redlock="$root/build/redlock"
[[ -x "$redlock" ]] || fail "the build did not produce build/redlock"
ok "$("$redlock" --version | head -1)"

step "3. Starting a throwaway redis-server on loopback"
tmp=$(mktemp -d -t redlock-demo.XXXXXX)
redis_pid=''
cleanup() {
    if [[ -n "$redis_pid" ]] && kill -0 "$redis_pid" 2>/dev/null; then
        kill "$redis_pid" 2>/dev/null || true
        wait "$redis_pid" 2>/dev/null || true
    fi
    rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
redis-server --bind 127.0.0.1 --port "$port" --save '' --appendonly no --dir "$tmp" \
    --logfile "$tmp/redis.log" --daemonize no &
redis_pid=$!
for _ in $(seq 100); do
    redis-cli -p "$port" ping >/dev/null 2>&1 && break
    kill -0 "$redis_pid" 2>/dev/null || fail "redis-server did not start: $(tail -3 "$tmp/redis.log")"
    sleep 0.05
done
redis-cli -p "$port" ping >/dev/null 2>&1 || fail "redis-server did not answer on port $port"
url="redis://127.0.0.1:$port"
ok "redis-server (pid $redis_pid) is listening at $url — no persistence, removed on exit"

step "4. Two programs want the lock 'demo' at the same moment"
say "Both run:  redlock -s $url run -k demo -n -- sh -c 'echo ...; sleep 2'"
say "-n (--no-wait) means: if someone else holds the lock, give up at once (status 75)."
say ""
contend() {
    "$redlock" -s "$url" run -k demo -n -- \
        sh -c "echo \"  contender $1 (pid \$\$) has the lock and works for 2 s\"; sleep 2" \
        >"$tmp/$1.out" 2>"$tmp/$1.err"
}
contend A &
pid_A=$!
contend B &
pid_B=$!
sleep 0.5
say "While the winner works, Redis holds the key lock:demo = the winner's random token:"
say "  $(redis-cli -p "$port" get lock:demo) $dim(expires in $(redis-cli -p "$port" pttl lock:demo) ms unless renewed)$off"
status_A=0 status_B=0
wait "$pid_A" || status_A=$?
wait "$pid_B" || status_B=$?
say ""
for who in A B; do
    status_var="status_$who"
    cat "$tmp/$who.out"
    say "  contender $who exited with status ${!status_var}$([[ -s $tmp/$who.err ]] && printf ', saying: %s' "$(cat "$tmp/$who.err")")"
done
winners=$(((status_A == 0) + (status_B == 0)))
losers=$(((status_A == 75) + (status_B == 75)))
((winners == 1 && losers == 1)) ||
    fail "expected one contender to run (0) and one to be turned away (75); got A=$status_A B=$status_B"
ok "exactly one ran; the other was turned away with status 75 (EX_TEMPFAIL) without running"
[[ -z "$(redis-cli -p "$port" get lock:demo)" ]] || fail "the lock key is still there after the holder exited"
ok "the winner released the lock when its program finished: lock:demo is gone"

step "5. A patient contender waits for the lock (-w 10s)"
say "A holder takes the lock for 3 s; a second one asks with -w 10s (wait at most 10 s)."
say ""
"$redlock" -s "$url" run -k demo -- sh -c 'echo "  holder has the lock for 3 s"; sleep 3; echo "  holder done, releasing"' &
holder=$!
for _ in $(seq 100); do
    [[ -n "$(redis-cli -p "$port" get lock:demo)" ]] && break
    sleep 0.05
done
start=$(date +%s.%N)
waiter_status=0
"$redlock" -s "$url" run -k demo -w 10s -- sh -c 'echo "  waiter got the lock and runs now"' || waiter_status=$?
waited=$(python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.1f}')" "$start" "$(date +%s.%N)")
holder_status=0
wait "$holder" || holder_status=$?
say ""
((holder_status == 0)) || fail "the holder exited with status $holder_status"
((waiter_status == 0)) || fail "the waiter exited with status $waiter_status"
ok "the waiter blocked for ${waited} s, ran as soon as the holder released, and exited 0"

step "6. Waiting has a limit"
"$redlock" -s "$url" run -k demo -- sleep 3 &
holder=$!
for _ in $(seq 100); do
    [[ -n "$(redis-cli -p "$port" get lock:demo)" ]] && break
    sleep 0.05
done
say "A holder keeps the lock for 3 s; this one asks with -w 1s -E 3 (status 3 if not acquired):"
say ""
impatient=0
"$redlock" -s "$url" run -k demo -w 1s -E 3 -- echo "never printed" 2>"$tmp/impatient.err" || impatient=$?
say "  exited with status $impatient$([[ -s $tmp/impatient.err ]] && printf ', saying: %s' "$(cat "$tmp/impatient.err")")"
wait "$holder" || true
((impatient == 3)) || fail "expected status 3 after waiting 1 s, got $impatient"
ok "gave up after 1 s with the chosen status 3; its program never ran"

step "Done"
say "redlock ran each program only while it held the lock, turned away (-n) or made wait"
say "(-w) everyone else, and released the lock as each program finished. Try it yourself:"
say "  redis-server --bind 127.0.0.1 --port 6379 --save '' &   # or -s your own Redis"
say "  build/redlock -s redis://127.0.0.1:6379 run -k backup -w 5m -- ./backup.sh"
say "Run the full test suite with: ./scripts/test.sh"
