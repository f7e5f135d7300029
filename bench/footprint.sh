#!/usr/bin/env bash
# Footprint: what a name leaves on the servers (issue 47). NAMES new names (10000) are run
# once each in every mode, over 1 and over 3 throwaway loopback redis-servers, with the
# default history_max_age (30d); then the servers are emptied, EXPIRY_NAMES (200) names a
# mode are run with history_max_age = AGE (1m, the least the config takes), and nothing may
# be left once the age (and a sixteenth) has passed. For each mode, on each server:
#   bytes/name  used_memory after the names' runs minus before (MEMORY PURGE first, both
#               times), over NAMES: the mean per server
#   keys/name   DBSIZE after minus before, over NAMES
#   ttl         the least and the largest PTTL of the keys of 20 of its names, in seconds
#               ("none": a key with no TTL, which would live forever)
# and at the end, after AGE + AGE/16 + 10 s, the keys left on every server (0 expected;
# --once-per's records are kept two slots, 2 h, and left out of that count).
# MODES ("plain waited limit fair once-per history-0"); SERVERS ("1 3"); JOBS (4) runs at
# once. A waited name: a holder, and a waiter that waits for it (one in 20 names, since each
# takes a holder's hand-over).
#
#   bash bench/footprint.sh                        # NAMES=10000
#   NAMES=1000 SERVERS=1 bash bench/footprint.sh   # a quick look (a run takes ~20 ms)
set -euo pipefail
source "$(dirname "$0")/lib.sh"
need redis-server redis-cli python3 xargs

names=${NAMES:-10000}
expiry_names=${EXPIRY_NAMES:-200}
age=${AGE:-1m}
jobs=${JOBS:-4}
bin=$(redlock_bin)
describe_binary "$bin"
export REDLOCK_BIN="$bin"

# The age in seconds.
age_s=$(python3 -c "import re, sys; m = re.fullmatch(r'(\d+)([smhd])', sys.argv[1]); \
print(int(m.group(1)) * {'s': 1, 'm': 60, 'h': 3600, 'd': 86400}[m.group(2)])" "$age")

ports=()
cli_all() { # cli_all COMMAND...: on every server, one reply a line
    local p
    for p in "${ports[@]}"; do redis-cli -p "$p" "$@"; done
}
used_memory() { # the used_memory of every server, after a MEMORY PURGE
    local p
    for p in "${ports[@]}"; do
        redis-cli -p "$p" MEMORY PURGE >/dev/null
        redis-cli -p "$p" INFO memory | sed -n 's/^used_memory:\([0-9]*\).*/\1/p'
    done
}
dbsize() { cli_all DBSIZE; }

run_mode() { # run_mode MODE CONFIG COUNT: runs COUNT names of MODE, JOBS at once
    local mode=$1 config=$2 names=$3
    case $mode in
    plain | history-0) seq "$names" | xargs -P "$jobs" -I{} "$bin" -c "$config" run -k "$mode-{}" -- true ;;
    limit) seq "$names" | xargs -P "$jobs" -I{} "$bin" -c "$config" run -k "$mode-{}" --limit 3 -- true ;;
    fair) seq "$names" | xargs -P "$jobs" -I{} "$bin" -c "$config" run -k "$mode-{}" --fair -- true ;;
    once-per) seq "$names" | xargs -P "$jobs" -I{} "$bin" -c "$config" run -k "$mode-{}" --once-per 1h -- true ;;
    waited)
        # A holder for 0.3 s and a waiter started behind it, for each name.
        seq "$names" | xargs -P "$jobs" -I{} sh -c '
            "$REDLOCK_BIN" -c "$1" run -k "waited-$2" -- sleep 0.3 &
            sleep 0.1
            "$REDLOCK_BIN" -c "$1" run -k "waited-$2" -w 30s -- true
            wait' sh "$config" {}
        ;;
    *)
        echo "bench: unknown mode $mode" >&2
        exit 1
        ;;
    esac
}

ttls() { # the PTTLs of the keys of 20 names of MODE on every server
    local mode=$1 i p key
    for ((i = 1; i <= 20 && i <= names; i++)); do
        for p in "${ports[@]}"; do
            for key in $(redis-cli -p "$p" --scan --pattern "*$mode-$i[}:]*") \
                $(redis-cli -p "$p" --scan --pattern "*$mode-$i"); do
                redis-cli -p "$p" PTTL "$key"
            done
        done
    done
}

report() { # report MODE SERVERS BEFORE AFTER KEYS_BEFORE KEYS_AFTER TTLS COUNT
    python3 - "$@" <<'PY'
import sys
mode, servers, before, after, kb, ka, ttls, names = sys.argv[1:9]
names = int(names)
before, after = [int(x) for x in before.split()], [int(x) for x in after.split()]
kb, ka = [int(x) for x in kb.split()], [int(x) for x in ka.split()]
per = sum(a - b for a, b in zip(after, before)) / len(after) / names
keys = sum(a - b for a, b in zip(ka, kb)) / len(ka) / names
t = [int(x) for x in ttls.split()]
if not t:
    ttl = "-"
elif min(t) < 0:
    ttl = "none"
else:
    ttl = f"{min(t) / 1000:.0f}-{max(t) / 1000:.0f} s"
print(f"  {mode:<10} {servers:>7} {per:>11.0f} {keys:>9.2f} {ttl:>16}")
PY
}

for n in ${SERVERS:-1 3}; do
    ports=()
    servers_toml=""
    for ((s = 0; s < n; s++)); do
        start_redis
        ports+=("${redis_url##*:}")
        servers_toml+=$'[[servers]]\nurl = "'"$redis_url"$'"\n'
    done
    echo
    echo "$names names a mode over $n server(s), history_max_age = 30d:"
    printf '  %-10s %7s %11s %9s %16s\n' mode servers bytes/name keys/name ttl
    for mode in ${MODES:-plain waited limit fair once-per history-0}; do
        config="$bench_tmp/$mode-$n.toml"
        {
            [[ $mode == history-0 ]] && echo "history = 0"
            printf '%s' "$servers_toml"
        } >"$config"
        before=$(used_memory | tr '\n' ' ')
        keys_before=$(dbsize | tr '\n' ' ')
        count=$names
        [[ $mode == waited ]] && count=$(((names + 19) / 20))
        run_mode "$mode" "$config" "$count"
        sleep 1 # the stragglers' requests (a release returns once a majority answered)
        after=$(used_memory | tr '\n' ' ')
        keys_after=$(dbsize | tr '\n' ' ')
        report "$mode" "$n" "$before" "$after" "$keys_before" "$keys_after" "$(ttls "$mode" | tr '\n' ' ')" "$count"
    done
    # The expiry: the same modes, EXPIRY_NAMES names each, history_max_age = AGE, on
    # emptied servers. --once-per's records are kept two slots (2 h) when that is longer
    # than the age: not waited for.
    cli_all FLUSHALL >/dev/null
    for mode in ${MODES:-plain waited limit fair once-per history-0}; do
        [[ $mode == once-per ]] && continue
        config="$bench_tmp/$mode-$n-expiry.toml"
        {
            echo "history_max_age = \"$age\""
            [[ $mode == history-0 ]] && echo "history = 0"
            printf '%s' "$servers_toml"
        } >"$config"
        count=$expiry_names
        [[ $mode == waited ]] && count=$(((expiry_names + 19) / 20))
        run_mode "$mode" "$config" "$count"
    done
    echo "  keys after $expiry_names names a mode with history_max_age = $age: $(dbsize | tr '\n' ' ')"
    wait_s=$((age_s + age_s / 16 + 10))
    echo "  waiting ${wait_s}s (the age and a sixteenth) ..."
    sleep "$wait_s"
    echo "  keys left after the age, by server: $(dbsize | tr '\n' ' ')"
done
