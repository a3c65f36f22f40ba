#!/usr/bin/env bash
# User-space instructions per keep-alive request of a dockhand binary, counted
# by callgrind: a figure a shared, noisy machine does not disturb, for
# comparing builds a few percent apart (requests/s can't show that here).
#
#   bench/instructions.sh target/release/dockhand [REQUESTS]
#   bench/instructions.sh nginx [REQUESTS]
#
# The second counts nginx's, as a proxy configured as bench/run.sh
# configures it (one worker, kept upstream connections), for a figure to
# compare with.
#
# On 127.0.0.1: a backend (its own nginx instance, `return 200`) on port
# BASE_PORT, dockhand under callgrind in front of it on BASE_PORT+1 (admin
# +2), and h2load sending REQUESTS (default 20,000) HTTP/1.1 requests over 50
# keep-alive connections after 2,000 unmeasured ones. Only those REQUESTS are
# counted (callgrind's instrumentation is switched on around them). Needs
# valgrind, nginx and h2load (nghttp2-client). With PROFILE=FILE, the
# callgrind profile is kept there, for callgrind_annotate.
#
# It also counts the atomic read-modify-writes per request (bench/atomics.py,
# which needs objdump): one instruction each to callgrind, but a dozen
# cycles or more each to the processor. With TOP=N, the N functions that run most
# of them are listed.
#
# CONNECTIONS=N sends over N connections instead of 50. With CACHE_SIM=1,
# callgrind also simulates the caches, with this machine's second-level
# cache (from sysfs; 1 MiB if it says none) as the last level, and the
# script prints the misses per request (first-level instruction and data,
# last-level reads and writes): the last-level figure grows with the connections
# while the instructions hardly move (each connection's state is pushed out
# of the cache by the others' before its next request).
set -euo pipefail

bin=$1
requests=${2:-20000}
base=${BASE_PORT:-22080}
# shellcheck source=loopback.sh
source "$(dirname "$0")/loopback.sh"
scratch_dir

mkdir -p "$WORK/logs"
backend_conf "$WORK" "$base" >"$WORK/nginx.conf"
nginx -e "$WORK/logs/error.log" -p "$WORK" -c "$WORK/nginx.conf" &
PIDS+=($!)
if [ "$bin" = nginx ]; then
    mkdir -p "$WORK/proxy/logs"
    proxy_nginx_conf "$WORK/proxy" "$((base + 1))" "$base" >"$WORK/proxy/nginx.conf"
    set -- nginx -e "$WORK/proxy/logs/error.log" -p "$WORK/proxy" -c "$WORK/proxy/nginx.conf"
else
    echo "{\"host\":{\"bench.test\":{\"location\":{\"/\":{\"upstream\":{\"127.0.0.1:$base\":{}}}}}}}" >"$WORK/routes.json"
    set -- "$bin" --no-docker --routes "$WORK/routes.json" \
        --http-listen "127.0.0.1:$((base + 1))" --admin-listen "127.0.0.1:$((base + 2))" \
        --workers 1 --log-level warn
fi
cache_sim=()
if [ "${CACHE_SIM:-0}" = 1 ]; then
    l2=/sys/devices/system/cpu/cpu0/cache/index2
    size=$(sed 's/K$//' "$l2/size" 2>/dev/null || echo 1024)
    ways=$(cat "$l2/ways_of_associativity" 2>/dev/null || echo 8)
    cache_sim=(--cache-sim=yes "--LL=$((size * 1024)),$ways,64")
fi
valgrind --tool=callgrind --instr-atstart=no "${cache_sim[@]}" \
    --dump-instr=yes --compress-pos=no --compress-strings=no --callgrind-out-file="$WORK/callgrind.out" \
    "$@" >"$WORK/proxy.log" 2>&1 &
proxy=$!
PIDS+=("$proxy")

url="http://127.0.0.1:$((base + 1))/"
load() { h2load --h1 -n "$1" -c "${CONNECTIONS:-50}" -t 1 -H ':authority: bench.test' "$url"; }
for _ in $(seq 1 100); do
    curl -sf -o /dev/null -H 'Host: bench.test' "$url" && break
    sleep 0.3
done
load 2000 >/dev/null
callgrind_control -i on "$proxy" >/dev/null
summary=$(load "$requests" | grep '^requests:')
callgrind_control -i off "$proxy" >/dev/null
kill "$proxy"
wait "$proxy" 2>/dev/null || true
case $summary in
*" $requests succeeded"*) ;;
*) echo "not every request succeeded: $summary" >&2; exit 1 ;;
esac
total=$(callgrind_annotate "$WORK/callgrind.out" | awk '/PROGRAM TOTALS/ && !seen { gsub(",", "", $1); print $1; seen = 1 }')
if [ -n "${PROFILE:-}" ]; then cp "$WORK/callgrind.out" "$PROFILE"; fi
atomics=$(python3 "$(dirname "$0")/atomics.py" "$WORK/callgrind.out" "$requests" "${TOP:-0}")
echo "$bin: $((total / requests)) instructions and $atomics atomic read-modify-writes per request ($total instructions over $requests requests)"
if [ "${CACHE_SIM:-0}" = 1 ]; then
    callgrind_annotate "$WORK/callgrind.out" | awk -v requests="$requests" '
        /^Events shown:/ { for (i = 3; i <= NF; i++) event[i - 2] = $i }
        /PROGRAM TOTALS/ && !seen {
            # The counts, each followed by its share in parentheses.
            n = 0
            for (i = 1; i < NF; i++) if ($i !~ /^\(/) { gsub(",", "", $i); total[event[++n]] = $i }
            printf "misses per request: %.1f first-level instruction, %.1f first-level data, %.1f last-level (reads %.1f, writes %.1f)\n",
                total["I1mr"] / requests, (total["D1mr"] + total["D1mw"]) / requests,
                (total["ILmr"] + total["DLmr"] + total["DLmw"]) / requests,
                (total["ILmr"] + total["DLmr"]) / requests, total["DLmw"] / requests
            seen = 1
        }'
fi
