#!/usr/bin/env bash
# Two proxies loaded at the same time, for a ratio that this machine's drift
# does not move: CPU per keep-alive request of B over A's.
#
#   bench/paired.sh A B            # each a dockhand binary, nginx or haproxy
#
# Both proxies are pinned to CPU 0, which they share: while both are busy
# the kernel gives each half of it, so the one that spends less on a
# request answers more of them. The backend (its own nginx instance,
# `return 200`) and two wrk instances, one a proxy with CONNECTIONS each,
# share CPU 1. Each round starts both afresh, loads both for DURATION
# seconds, and prints each one's requests and CPU µs per request (its
# utime+stime from /proc, as bench/run.sh reads it); the last line is the median of B's CPU per
# request over A's, with its least and most.
#
# Why: in runs that alternate peers (bench/run.sh), the requests/s of one
# peer moved by ±15% from one minute to the next on this shared machine,
# while here the ratio of two proxies running together moved by about 1%.
# What one started instance costs a request also differs from the next
# start of the same binary by 2-4% (where its memory landed): the rounds
# start new instances, so the median is over several starts.
# The figure is not the standalone one of bench/run.sh: two proxies on one
# CPU also share its caches.
#
# Environment: ROUNDS=6 DURATION=6 CONNECTIONS=250 BASE_PORT=24080 (it
# uses BASE_PORT to BASE_PORT+4 on 127.0.0.1). Needs nginx and wrk, and
# haproxy to compare with it. nginx and HAProxy are set up as bench/run.sh
# sets them up, from the same configurations (bench/loopback.sh).
set -euo pipefail

[[ $# == 2 ]] || {
    echo "usage: $0 A B (each a dockhand binary, nginx or haproxy)" >&2
    exit 2
}
rounds=${ROUNDS:-6}
duration=${DURATION:-6}
connections=${CONNECTIONS:-250}
base=${BASE_PORT:-24080}
# shellcheck source=loopback.sh
source "$(dirname "$0")/loopback.sh"
scratch_dir

mkdir -p "$WORK/logs"
backend_conf "$WORK" "$base" >"$WORK/nginx.conf"
taskset -c 1 nginx -e "$WORK/logs/error.log" -p "$WORK" -c "$WORK/nginx.conf" &
PIDS+=($!)
routes_json 0 bench.test "127.0.0.1:$base" >"$WORK/routes.json"

# start_proxy WHAT PORT: WHAT on CPU 0 at PORT; sets PROXY to its pid.
start_proxy() {
    local what=$1 port=$2 dir=$WORK/proxy.$2
    mkdir -p "$dir/logs"
    if [[ $what == nginx ]]; then
        proxy_nginx_conf "$dir" "$port" "$base" >"$dir/nginx.conf"
        taskset -c 0 nginx -e "$dir/logs/error.log" -p "$dir" -c "$dir/nginx.conf" &
    elif [[ $what == haproxy ]]; then
        proxy_haproxy_conf "127.0.0.1:$base" "$((connections + 1000))" "127.0.0.1:$port" >"$dir/haproxy.cfg"
        # -db: in the foreground, one process, no master.
        taskset -c 0 haproxy -db -f "$dir/haproxy.cfg" >"$dir/logs/out.log" 2>&1 &
    else
        taskset -c 0 "$what" --no-docker --routes "$WORK/routes.json" \
            --http-listen "127.0.0.1:$port" --admin-listen "127.0.0.1:$((port + 1))" \
            --workers 1 --log-level warn >"$dir/logs/out.log" 2>&1 &
    fi
    PROXY=$!
    PIDS+=("$PROXY")
    for _ in $(seq 100); do
        curl -sf -o /dev/null -H 'Host: bench.test' "http://127.0.0.1:$port/" && return 0
        sleep 0.1
    done
    echo "$what does not answer on $port: $(tail -3 "$dir"/logs/*)" >&2
    exit 1
}

results=$(dirname "$0")/results.py
cpu_ticks() { python3 "$results" cpu-ticks "$1"; }

# load PORT SECONDS: wrk's keep-alive load, with its latencies.
load() {
    timeout -k 5 $(($2 + 30)) taskset -c 1 wrk -t1 -c"$connections" -d"$2s" --latency \
        -H 'Host: bench.test' "http://127.0.0.1:$1/"
}

ratios=()
for round in $(seq "$rounds"); do
    start_proxy "$1" $((base + 1))
    a=$PROXY
    start_proxy "$2" $((base + 3))
    b=$PROXY
    # An unmeasured second each: pools filled, allocators warm.
    load $((base + 1)) 1 >/dev/null &
    load $((base + 3)) 1 >/dev/null
    wait %%
    a_before=$(cpu_ticks "$a")
    b_before=$(cpu_ticks "$b")
    load $((base + 1)) "$duration" >"$WORK/a.out" &
    load $((base + 3)) "$duration" >"$WORK/b.out"
    wait %%
    a_after=$(cpu_ticks "$a")
    b_after=$(cpu_ticks "$b")
    kill "$a" "$b"
    wait "$a" "$b" 2>/dev/null || true
    line=$(python3 "$results" paired --a "$WORK/a.out" --b "$WORK/b.out" \
        --a-ticks $((a_after - a_before)) --b-ticks $((b_after - b_before)))
    ratios+=("${line%% *}")
    echo "round $round: ${line#* }, B/A CPU per request ${line%% *}"
done
printf '%s\n' "${ratios[@]}" | sort -n | awk '{ r[NR] = $1 } END {
    m = (NR % 2) ? r[(NR + 1) / 2] : (r[NR / 2] + r[NR / 2 + 1]) / 2
    printf "B/A CPU per request: median %.3f, least %.3f, most %.3f (%d rounds)\n", m, r[1], r[NR], NR
}'
