#!/usr/bin/env bash
# `redlock exporter` over many names (issue 47): NAMES (100000) names that have run once,
# on one throwaway redis-server. One real `redlock run` makes a template name; its keys are
# copied to the other names with DUMP and RESTORE (pipelined, so 100,000 names take
# seconds, and the copies are whatever a run leaves, whatever the key layout). Then: the
# exporter's start (until it listens), SCRAPES /metrics scrapes INTERVAL seconds apart
# (wall time, body size), the same with PAGES pages open (each asks /api/locks every 2 s,
# as the page's script does), the page and /api/locks themselves, and the exporter's
# VmRSS and VmHWM (/proc). Targets (contract, round 5): a scrape within 2 s and RSS within
# 128 MiB, whatever pages are open.
#
#   bash bench/exporter-scale.sh      # NAMES=100000 SCRAPES=5 INTERVAL=3 PAGES=2
set -euo pipefail
source "$(dirname "$0")/lib.sh"
need redis-server redis-cli curl python3

names=${NAMES:-100000}
scrapes=${SCRAPES:-5}
interval=${INTERVAL:-3}
pages=${PAGES:-2}
bin=$(redlock_bin)
describe_binary "$bin"
print_load

start_redis
port=${redis_url##*:}
"$bin" -s "$redis_url" run -k scale-template -- true

echo "copying the template's keys to $names names..."
fill_started=$(date +%s.%N)
python3 - "$port" "$names" <<'PY'
import socket, sys, threading

port, names = int(sys.argv[1]), int(sys.argv[2])
sock = socket.create_connection(("127.0.0.1", port))
reader = sock.makefile("rb")

def encode(*args):
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        a = a if isinstance(a, bytes) else str(a).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(a), a))
    return b"".join(out)

def reply():
    line = reader.readline()
    kind, rest = line[:1], line[1:-2]
    if kind == b"-":
        raise RuntimeError(rest.decode())
    if kind == b"$":
        n = int(rest)
        return None if n < 0 else reader.read(n + 2)[:-2]
    if kind == b"*":
        return [reply() for _ in range(int(rest))]
    return rest

def call(*args):
    sock.sendall(encode(*args))
    return reply()

template = b"scale-template"
keys, cursor = [], b"0"
while True:
    cursor, found = call("SCAN", cursor, "MATCH", b"*" + template + b"*", "COUNT", 1000)
    keys += found
    if cursor == b"0":
        break
dumps = [(k, call("DUMP", k), max(int(call("PTTL", k)), 0)) for k in keys]
print(f"  template keys: {', '.join(k.decode() for k, _, _ in dumps)}")

def send():
    # Written while the replies are read: a loaded machine would otherwise make every
    # batch wait for its replies.
    batch = []
    for i in range(1, names):
        name = b"scale-%06d" % i
        batch += [encode("RESTORE", key.replace(template, name), ttl, payload, "REPLACE")
                  for key, payload, ttl in dumps]
        if len(batch) >= 4000 or i == names - 1:
            sock.sendall(b"".join(batch))
            batch = []
writer = threading.Thread(target=send)
writer.start()
for _ in range((names - 1) * len(dumps)):
    reply()
writer.join()
PY
echo "  filled in $(python3 -c "import time; print(f'{time.time() - $fill_started:.1f}')") s;" \
    "the server's memory: $(redis-cli -p "$port" info memory | tr -d '\r' | sed -n 's/^used_memory_human://p')"

started=$(date +%s.%N)
"$bin" -s "$redis_url" exporter --listen 127.0.0.1:0 2>"$bench_tmp/exporter.err" &
exporter=$!
page_pids=()
trap 'kill $exporter "${page_pids[@]}" 2>/dev/null || true; bench_cleanup' EXIT
until grep -q "http://" "$bench_tmp/exporter.err" 2>/dev/null; do
    kill -0 "$exporter" 2>/dev/null || {
        cat "$bench_tmp/exporter.err" >&2
        exit 1
    }
    sleep 0.05
done
echo "exporter listening after $(python3 -c "import time; print(f'{time.time() - $started:.1f}')") s"
address=$(grep -o 'http://[0-9.:]*' "$bench_tmp/exporter.err")

memory() {
    awk '/^VmRSS|^VmHWM/ { printf "%s %.1f MiB  ", $1, $2 / 1024 }' "/proc/$exporter/status"
    echo
}
# CPU time (user + system, clock ticks) of the exporter: what its work costs, whatever else
# the machine runs.
ticks() { awk '{ print $14 + $15 }' "/proc/$exporter/stat"; }
# SCRAPES scrapes INTERVAL s apart: wall time and body size of each, then their median, and
# the exporter's CPU time over the round (scrapes, and whatever else it did meanwhile).
scrape_round() {
    local label=$1 times=() i before
    before=$(ticks)
    for ((i = 0; i < scrapes; i++)); do
        sleep "$interval"
        times+=("$(curl -sf -o "$bench_tmp/metrics.txt" -w '%{time_total} %{size_download}' \
            "$address/metrics")")
    done
    printf '%s\n' "${times[@]}" | python3 -c '
import statistics, sys
rows = [l.split() for l in sys.stdin]
t = sorted(float(r[0]) * 1000 for r in rows)
size = int(rows[-1][1])
cpu = int(sys.argv[2]) * 1000 / int(sys.argv[3]) / len(t)
print(f"  {sys.argv[1]}: scrape median {statistics.median(t):.0f} ms, max {t[-1]:.0f} ms "
      f"({len(t)} scrapes); body {size / 1e6:.1f} MB; exporter CPU {cpu:.0f} ms per scrape "
      f"and interval; target <= 2000 ms")' "$label" "$(($(ticks) - before))" "$(getconf CLK_TCK)"
}

memory
scrape_round "no page open"
ran=$(grep -c '^redlock_runs_total{name="scale-[-a-z0-9]*",outcome="ran"} 1$' "$bench_tmp/metrics.txt" || true)
echo "  /metrics: $(grep -vc '^#' "$bench_tmp/metrics.txt") samples; $ran of $names names show ran=1"
memory
for path in / /api/locks; do
    curl -sf -o /dev/null -w "  $path: %{time_total} s, %{size_download} bytes\n" "$address$path"
done
for ((p = 0; p < pages; p++)); do
    (
        curl -sf -o /dev/null "$address/"
        while curl -sf -o /dev/null "$address/api/locks"; do sleep 2; done
    ) &
    page_pids+=($!)
done
scrape_round "$pages page(s) open"
memory
echo "  target: RSS <= 128 MiB"
