#!/usr/bin/env bash
# `redlock exporter` over NAMES lock names (default 1000), each with history and counters
# (RUNS_PER_NAME runs of `run -- true`), on SERVERS servers (default 1): the time a
# /metrics scrape takes (scrapes 2.5 s apart), the commands sent per name between two
# scrapes (INFO commandstats: the read script's calls against the names; since issue 47 a
# scrape reads nothing, and these are the sweeps', a thousand names read again every 2 s),
# and the exporter's memory (VmRSS, VmHWM) after the scrapes. Targets (issue 39): a scrape
# <= 100 ms, a bounded number of commands per name (pipelined), memory <= 20 MiB.
# bench/exporter-scale.sh measures 100,000 names.
#
#   bash bench/exporter.sh              # NAMES=1000 SERVERS=1 SCRAPES=10 RUNS_PER_NAME=2
set -euo pipefail
source "$(dirname "$0")/lib.sh"
need redis-server redis-cli curl python3

names=${NAMES:-1000}
servers=${SERVERS:-1}
scrapes=${SCRAPES:-10}
runs_per_name=${RUNS_PER_NAME:-2}
bin=$(redlock_bin)
describe_binary "$bin"

urls=() ports=()
for ((i = 0; i < servers; i++)); do
    start_redis
    urls+=("-s" "$redis_url")
    ports+=("${redis_url##*:}")
done

echo "filling $names names with $runs_per_name runs each over $servers server(s)..."
seq "$names" | xargs -P 2 -I{} sh -c '
    for r in $(seq '"$runs_per_name"'); do
        "$0" "$@" run -k "bench-{}" -- true || exit 1
    done' "$bin" "${urls[@]}"

"$bin" "${urls[@]}" exporter --listen 127.0.0.1:0 2>"$bench_tmp/exporter.err" &
exporter=$!
trap 'kill $exporter 2>/dev/null || true; bench_cleanup' EXIT
for _ in $(seq 200); do
    grep -q "http://" "$bench_tmp/exporter.err" 2>/dev/null && break
    sleep 0.05
done
address=$(grep -o 'http://[0-9.:]*' "$bench_tmp/exporter.err")
curl -sf "$address/metrics" >/dev/null # the first reading, and the script loaded

for port in "${ports[@]}"; do redis-cli -p "$port" config resetstat >/dev/null; done
# CPU time (user + system, clock ticks) of the exporter and of the servers: what a scrape
# costs whatever else the machine runs.
ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }
server_cpu() {
    local port total=0
    for port in "${ports[@]}"; do
        total=$(redis-cli -p "$port" info cpu | tr -d '\r' |
            awk -F: -v t="$total" '/^used_cpu_(user|sys):/ { t += $2 } END { print t }')
    done
    echo "$total"
}
exporter_before=$(ticks "$exporter")
servers_before=$(server_cpu)
times=()
for ((i = 0; i < scrapes; i++)); do
    sleep 2.5
    times+=("$(curl -sf -o "$bench_tmp/metrics.txt" -w '%{time_total}' "$address/metrics")")
done
exporter_ms=$((($(ticks "$exporter") - exporter_before) * 1000 / $(getconf CLK_TCK) / scrapes))
servers_ms=$(python3 -c "print(round(($(server_cpu) - $servers_before) * 1000 / $scrapes))")
series=$(grep -vc '^#' "$bench_tmp/metrics.txt")
counted=$(grep -c '^redlock_runs_total{name="bench-[0-9]*",outcome="ran"} '"$runs_per_name"'$' \
    "$bench_tmp/metrics.txt" || true)

echo
echo "exporter over $names names x $runs_per_name runs, $servers server(s); load $(cut -d' ' -f1-3 /proc/loadavg)"
printf '%s\n' "${times[@]}" | python3 -c '
import statistics, sys
t = sorted(float(l) * 1000 for l in sys.stdin)
print(f"  scrape reading every lock: median {statistics.median(t):.1f} ms, min {t[0]:.1f}, "
      f"max {t[-1]:.1f} ({len(t)} scrapes); target <= 100 ms")'
echo "  /metrics: $series samples; $counted of $names names show ran=$runs_per_name"
echo "  CPU per scrape: exporter ${exporter_ms} ms, the servers ${servers_ms} ms in all"
for port in "${ports[@]}"; do
    redis-cli -p "$port" info commandstats | tr -d '\r' | python3 -c '
import sys
names, scrapes, port = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
calls = {}
for line in sys.stdin:
    if line.startswith("cmdstat_"):
        name, _, fields = line[8:].partition(":")
        calls[name] = int(dict(f.split("=") for f in fields.split(","))["calls"])
reads = sum(calls.get(k, 0) for k in ("evalsha_ro", "evalsha", "eval_ro", "eval"))
listing = sum(calls.get(k, 0) for k in ("scan", "cluster|nodes", "script|load"))
inner = sum(calls.values()) - reads - listing - calls.get("config|resetstat", 0) - calls.get("info", 0)
per_name = reads / scrapes / names
print(f"  server {port}: per scrape and name {per_name:.2f} command(s) sent (pipelined), "
      f"{inner / scrapes / names:.1f} run inside the read script; per scrape "
      f"{listing / scrapes:.0f} more (SCAN pages, CLUSTER NODES)")' "$names" "$scrapes" "$port"
done
awk '/^VmRSS|^VmHWM/ { printf "  exporter %s %d KiB (%.1f MiB)\n", $1, $2, $2 / 1024 }' \
    "/proc/$exporter/status"
echo "  target: memory <= 20 MiB"
kill "$exporter"
wait "$exporter" 2>/dev/null || true
