#!/usr/bin/env bash
# dockhand side by side with nginx, HAProxy and Caddy, on this machine, in one run.
#
#   bench/run.sh                                   # the full run (about 20 minutes)
#   ROUNDS=1 DURATION=3 IDLE_CONNECTIONS=2000 bench/run.sh   # a quick check
#
# What it does, unattended, as root (or with sudo on PATH for apt-get):
#  - builds dockhand (`cargo build --release --locked`) and the route_table
#    criterion benchmark, and installs the Debian packages it lacks
#    (nginx-light haproxy caddy wrk nghttp2-client);
#  - on loopback only, starts one fast backend (its own nginx instance,
#    `return 200`, config and prefix in a temp dir, never the system service)
#    and in front of it dockhand, nginx, HAProxy and Caddy, each with one
#    worker and pinned to CPU 0; the load generators and the backend share
#    CPU 1 (with 2 cores there is no better split). Access logs are off
#    everywhere;
#  - runs each load shape (HTTP/1.1 keep-alive with 50 and 500 connections,
#    h2c prior knowledge, a new connection per request) against dockhand,
#    nginx, HAProxy, Caddy and the backend directly, alternating peers, ROUNDS
#    times, and reports medians: requests/s, p50 and p99 latency, the peer's
#    CPU seconds per 100k requests (its whole process tree), and dockhand's
#    ratio to each;
#  - dockhand with 10,000 hosts in its route table against 1 host;
#  - resident memory per idle keep-alive client connection (IDLE_CONNECTIONS
#    of them, one request each, kept idle), for each proxy freshly started;
#  - the in-process time to apply one changed container among 1,000
#    (`cargo bench --bench route_table`).
# Tables go to stdout and to bench/RESULTS.md; progress goes to stderr.
# Every process it starts is stopped on exit, Ctrl-C or error.
#
# Environment:
#   ROUNDS=3            rounds of each shape (each peer once per round)
#   DURATION=10         seconds per run
#   IDLE_CONNECTIONS=10000
#   SCALE_HOSTS=10000   hosts in the large route table
#   BASE_PORT=21000     ports used: BASE_PORT+80..+91 and +180..+183, on 127.0.0.1
#   DOCKHAND_BIN=path   use this binary instead of building one
#   KEEP_WORK=1         keep the temp dir (configs, raw outputs, logs)

set -euo pipefail

ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-10}
IDLE_CONNECTIONS=${IDLE_CONNECTIONS:-10000}
SCALE_HOSTS=${SCALE_HOSTS:-10000}
BASE_PORT=${BASE_PORT:-21000}
PROXY_CPU=0
LOAD_CPU=1
BENCH_HOST=bench.test

BENCH_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(dirname "$BENCH_DIR")
COMMAND="ROUNDS=$ROUNDS DURATION=$DURATION IDLE_CONNECTIONS=$IDLE_CONNECTIONS SCALE_HOSTS=$SCALE_HOSTS bench/run.sh"

log() { printf '[bench %(%H:%M:%S)T] %s\n' -1 "$*" >&2; }
die() { log "error: $*"; exit 1; }

# ---------------------------------------------------------------- processes

STARTED=()
WORK=""

descendants() {
    local pid
    for pid in $(ps -o pid= --ppid "$1" 2>/dev/null); do
        echo "$pid"
        descendants "$pid"
    done
}

stop_tree() {
    local root=$1 pids pid
    pids="$root $(descendants "$root" | tr '\n' ' ')"
    # shellcheck disable=SC2086
    kill -TERM $pids 2>/dev/null || true
    for _ in $(seq 50); do
        local alive=""
        for pid in $pids; do kill -0 "$pid" 2>/dev/null && alive="$alive $pid"; done
        [[ -z $alive ]] && return 0
        sleep 0.1
    done
    # shellcheck disable=SC2086
    kill -KILL $alive 2>/dev/null || true
}

cleanup() {
    local status=$? pid
    trap - EXIT INT TERM
    for pid in "${STARTED[@]}"; do stop_tree "$pid"; done
    wait 2>/dev/null || true
    if [[ -n $WORK && -d $WORK ]]; then
        if [[ ${KEEP_WORK:-0} == 1 || $status != 0 ]]; then
            log "work files kept in $WORK"
        else
            rm -rf "$WORK"
        fi
    fi
    exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# Starts "$@" in the background on CPU $1 with its output in $2; sets LAST_PID.
spawn() {
    local cpu=$1 output=$2
    shift 2
    taskset -c "$cpu" "$@" >"$output" 2>&1 &
    LAST_PID=$!
    STARTED+=("$LAST_PID")
}

forget() {
    local keep=() pid
    for pid in "${STARTED[@]}"; do [[ $pid != "$1" ]] && keep+=("$pid"); done
    STARTED=("${keep[@]}")
}

port_listening() {
    ss -Hltn "sport = :$1" | grep -q .
}

wait_listening() {
    local port=$1 pid=$2 name=$3
    for _ in $(seq 100); do
        port_listening "$port" && return 0
        kill -0 "$pid" 2>/dev/null || die "$name exited while starting: $(tail -5 "$WORK/$name.log")"
        sleep 0.1
    done
    die "$name does not listen on $port after 10 s: $(tail -5 "$WORK/$name.log")"
}

# ---------------------------------------------------------------- set-up

install_packages() {
    local missing=() command package
    for command in nginx:nginx-light haproxy:haproxy caddy:caddy wrk:wrk h2load:nghttp2-client \
        taskset:util-linux ss:iproute2 python3:python3; do
        package=${command#*:}
        command -v "${command%%:*}" >/dev/null || missing+=("$package")
    done
    [[ ${#missing[@]} == 0 ]] && return 0
    log "installing ${missing[*]}"
    local apt=(apt-get)
    [[ $(id -u) != 0 ]] && apt=(sudo apt-get)
    DEBIAN_FRONTEND=noninteractive "${apt[@]}" update -qq
    # policy-rc.d keeps the packages' own services from starting.
    local policy=/usr/sbin/policy-rc.d created_policy=0
    if [[ $(id -u) == 0 && ! -e $policy ]]; then
        printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod +x "$policy" && created_policy=1
    fi
    DEBIAN_FRONTEND=noninteractive "${apt[@]}" install -y -qq "${missing[@]}" >&2
    [[ $created_policy == 1 ]] && rm -f "$policy"
    return 0
}

build() {
    if [[ -n ${DOCKHAND_BIN:-} ]]; then
        log "using $DOCKHAND_BIN"
    else
        log "building dockhand (release)"
        (cd "$REPO" && cargo build --release --locked >&2)
        DOCKHAND_BIN=$REPO/target/release/dockhand
    fi
    [[ -x $DOCKHAND_BIN ]] || die "no dockhand binary at $DOCKHAND_BIN"
}

# Every idle client connection holds a descriptor in the client and one in the proxy.
raise_file_limit() {
    local hard
    hard=$(ulimit -Hn)
    [[ $hard == unlimited || $hard -gt 65536 ]] && hard=65536
    ulimit -n "$hard"
    NOFILE=$hard
    ((IDLE_CONNECTIONS + 2000 <= NOFILE)) ||
        die "IDLE_CONNECTIONS=$IDLE_CONNECTIONS needs more descriptors than the limit of $NOFILE"
}

check_ports() {
    local port
    for port in "$@"; do
        port_listening "$port" && die "port $port is in use (set BASE_PORT to move every port)"
    done
    return 0
}

# ---------------------------------------------------------------- peers

declare -A PID PORT_H1 PORT_H2
LOAD=()
TOOL=""

PORT_H1[direct]=$((BASE_PORT + 80))
PORT_H2[direct]=$((BASE_PORT + 180))
PORT_H1[dockhand]=$((BASE_PORT + 81))
PORT_H2[dockhand]=$((BASE_PORT + 81))
PORT_H1[nginx]=$((BASE_PORT + 82))
PORT_H2[nginx]=$((BASE_PORT + 182))
PORT_H1[haproxy]=$((BASE_PORT + 83))
PORT_H2[haproxy]=$((BASE_PORT + 183))
PORT_H1[caddy]=$((BASE_PORT + 84))
PORT_H2[caddy]=$((BASE_PORT + 84))
PORT_H1[dockhand_1host]=${PORT_H1[dockhand]}
PORT_H1[dockhand_10k]=$((BASE_PORT + 91))
BACKEND=127.0.0.1:${PORT_H1[direct]}

# The top of an nginx configuration living in DIR: one worker, in the foreground.
nginx_main_context() {
    local dir=$1
    cat <<EOF
worker_processes 1;
daemon off;
pid $dir/nginx.pid;
error_log $dir/logs/error.log warn;
worker_rlimit_nofile $NOFILE;
events { worker_connections $NOFILE; }
EOF
}

start_direct() {
    local dir=$WORK/backend
    mkdir -p "$dir/logs"
    {
        nginx_main_context "$dir"
        cat <<EOF
http {
    access_log off;
    default_type text/plain;
    keepalive_requests 100000000;
    keepalive_timeout 300s;
    server {
        listen ${BACKEND};
        listen 127.0.0.1:${PORT_H2[direct]} http2;
        location / { return 200 "hello from the backend\n"; }
    }
}
EOF
    } >"$dir/nginx.conf"
    # The backend has no CPU of its own: it shares CPU 1 with the load generator.
    spawn "$LOAD_CPU" "$WORK/direct.log" nginx -e "$dir/logs/error.log" -p "$dir" -c "$dir/nginx.conf"
    PID[direct]=$LAST_PID
}

write_dockhand_routes() {
    local file=$1 filler=$2
    python3 - "$file" "$filler" "$BENCH_HOST" "$BACKEND" <<'EOF'
import json, sys
path, filler, bench_host, backend = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
location = {"/": {"upstream": {backend: {}}}}
hosts = {f"h{i}.scale.test": {"location": location} for i in range(filler)}
hosts[bench_host] = {"location": location}
with open(path, "w") as out:
    json.dump({"host": hosts}, out)
EOF
}

start_dockhand_instance() {
    local name=$1 port=$2 filler=$3
    write_dockhand_routes "$WORK/$name.routes.json" "$filler"
    spawn "$PROXY_CPU" "$WORK/$name.log" "$DOCKHAND_BIN" --no-docker \
        --routes "$WORK/$name.routes.json" --http-listen "127.0.0.1:$port" --admin-listen 127.0.0.1:0 \
        --workers 1 --log-level warn
    PID[$name]=$LAST_PID
}

start_dockhand() { start_dockhand_instance dockhand "${PORT_H1[dockhand]}" 0; }
start_dockhand_10k() { start_dockhand_instance dockhand_10k "${PORT_H1[dockhand_10k]}" "$SCALE_HOSTS"; }

start_nginx() {
    local dir=$WORK/nginx
    mkdir -p "$dir/logs"
    {
        nginx_main_context "$dir"
        cat <<EOF
http {
    access_log off;
    keepalive_requests 100000000;
    keepalive_timeout 75s;
    upstream backend {
        server ${BACKEND};
        keepalive 1024;
        keepalive_requests 100000000;
    }
    server {
        listen 127.0.0.1:${PORT_H1[nginx]};
        # nginx 1.22 speaks h2c (prior knowledge only) on a port of its own.
        listen 127.0.0.1:${PORT_H2[nginx]} http2;
        location / {
            proxy_pass http://backend;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
        }
    }
}
EOF
    } >"$dir/nginx.conf"
    spawn "$PROXY_CPU" "$WORK/nginx.log" nginx -e "$dir/logs/error.log" -p "$dir" -c "$dir/nginx.conf"
    PID[nginx]=$LAST_PID
}

start_haproxy() {
    local dir=$WORK/haproxy IDLE_CONNECTIONS_PLUS=$((IDLE_CONNECTIONS + 1000))
    mkdir -p "$dir"
    cat >"$dir/haproxy.cfg" <<EOF
global
    nbthread 1
    maxconn $IDLE_CONNECTIONS_PLUS
    # HAProxy sizes its descriptors for a server connection per client one;
    # idle clients need far fewer, so a lower system limit is not fatal.
    no strict-limits
defaults
    mode http
    maxconn $IDLE_CONNECTIONS_PLUS
    timeout connect 5s
    timeout client 60s
    timeout server 60s
    timeout http-keep-alive 60s
    http-reuse always
frontend bench
    bind 127.0.0.1:${PORT_H1[haproxy]}
    bind 127.0.0.1:${PORT_H2[haproxy]} proto h2
    default_backend backend
backend backend
    server backend ${BACKEND}
EOF
    # -db: in the foreground, one process, no master.
    spawn "$PROXY_CPU" "$WORK/haproxy.log" haproxy -db -f "$dir/haproxy.cfg"
    PID[haproxy]=$LAST_PID
}

start_caddy() {
    local dir=$WORK/caddy
    mkdir -p "$dir"
    cat >"$dir/Caddyfile" <<EOF
{
    admin off
    auto_https off
    servers {
        protocols h1 h2c
    }
}
http://:${PORT_H1[caddy]} {
    bind 127.0.0.1
    reverse_proxy ${BACKEND} {
        transport http {
            keepalive_idle_conns_per_host 1024
        }
    }
}
EOF
    spawn "$PROXY_CPU" "$WORK/caddy.log" env GOMAXPROCS=1 HOME="$dir" XDG_DATA_HOME="$dir" \
        XDG_CONFIG_HOME="$dir" caddy run --config "$dir/Caddyfile" --adapter caddyfile
    PID[caddy]=$LAST_PID
}

start_peer() {
    local peer=$1
    "start_$peer"
    wait_listening "${PORT_H1[$peer]}" "${PID[$peer]}" "$peer"
    if [[ -n ${PORT_H2[$peer]:-} ]]; then
        wait_listening "${PORT_H2[$peer]}" "${PID[$peer]}" "$peer"
    fi
}

stop_peer() {
    stop_tree "${PID[$1]}"
    wait "${PID[$1]}" 2>/dev/null || true
    forget "${PID[$1]}"
}

# One request over HTTP/1.1 and, where the peer has it, one over h2c.
check_peer() {
    local peer=$1
    local out=$WORK/check.$peer
    timeout 20 taskset -c "$LOAD_CPU" wrk -t1 -c1 -d1s -H "Host: $BENCH_HOST" \
        "http://127.0.0.1:${PORT_H1[$peer]}/" >"$out" 2>&1 ||
        die "$peer: wrk failed: $(cat "$out")"
    grep -q "Non-2xx" "$out" && die "$peer answers HTTP/1.1 with errors: $(cat "$out")"
    if [[ -n ${PORT_H2[$peer]:-} ]]; then
        timeout 20 h2load -n 10 -c 1 -H ":authority: $BENCH_HOST" \
            "http://127.0.0.1:${PORT_H2[$peer]}/" >"$out.h2" 2>&1 || true
        if ! grep -q "10 succeeded" "$out.h2" || ! grep -q "10 2xx" "$out.h2"; then
            log "$peer: no h2c prior knowledge, its h2c runs are left out: $(grep -E 'requests:|status codes' "$out.h2" | tr '\n' ' ')"
            unset "PORT_H2[$peer]"
        fi
    fi
}

# ---------------------------------------------------------------- runs

RAW=""

# load_command SHAPE PEER SECONDS OUT: sets LOAD (the bounded load generator
# command for one run) and TOOL; LOAD stays empty when the peer lacks the protocol.
load_command() {
    local shape=$1 peer=$2 seconds=$3 out=$4 port=${PORT_H1[$2]}
    local wrk=(wrk -t1 -d"${seconds}s" --latency -H "Host: $BENCH_HOST")
    LOAD=(timeout -k 5 "$((seconds + 60))" taskset -c "$LOAD_CPU")
    TOOL=wrk
    case $shape in
    h1_c50 | scale) LOAD+=("${wrk[@]}" -c50 "http://127.0.0.1:$port/") ;;
    h1_c500) LOAD+=("${wrk[@]}" -c500 "http://127.0.0.1:$port/") ;;
    h1_close) LOAD+=("${wrk[@]}" -c50 -H "Connection: close" "http://127.0.0.1:$port/") ;;
    h2c)
        port=${PORT_H2[$peer]:-}
        [[ -z $port ]] && LOAD=() && return 0
        TOOL=h2load
        # h2load 1.52's --warm-up-time makes no request at all: warm-ups are runs of their own.
        LOAD+=(h2load -t1 -c10 -m10 -D "$seconds" --log-file="$out.log"
            -H ":authority: $BENCH_HOST" "http://127.0.0.1:$port/")
        ;;
    *) die "unknown shape $shape" ;;
    esac
}

# One unrecorded second of SHAPE against each of PEERS..., so no peer's first
# measured run pays for its start.
warm_up() {
    local shape=$1 peer
    shift
    log "$shape: warming up"
    for peer in "$@"; do
        load_command "$shape" "$peer" 1 "$WORK/runs/warm-up"
        [[ ${#LOAD[@]} == 0 ]] && continue
        "${LOAD[@]}" >/dev/null 2>&1 || true
        rm -f "$WORK/runs/warm-up.log"
    done
    sleep 1
}

# run SHAPE PEER ROUND: one bounded run, recorded as a JSON line in $RAW.
run() {
    local shape=$1 peer=$2 round=$3
    local out=$WORK/runs/$shape.$peer.$round before after
    load_command "$shape" "$peer" "$DURATION" "$out"
    [[ ${#LOAD[@]} == 0 ]] && return 0
    log "$shape round $round: $peer"
    before=$(python3 "$BENCH_DIR/results.py" cpu-ticks "${PID[$peer]}")
    "${LOAD[@]}" >"$out" 2>&1 || log "$shape $peer: the load generator exited with $? (recorded as failed if unreadable)"
    after=$(python3 "$BENCH_DIR/results.py" cpu-ticks "${PID[$peer]}")
    python3 "$BENCH_DIR/results.py" record --shape "$shape" --peer "$peer" --round "$round" \
        --tool "$TOOL" --output "$out" --log "$out.log" --cpu-ticks $((after - before)) >>"$RAW"
    rm -f "$out.log"
    # Let the connections of one run close before the next peer's run.
    sleep 1
}

idle_memory() {
    local peer=$1
    local out=$WORK/runs/idle.$peer
    log "idle connections: $peer (restarted fresh, $IDLE_CONNECTIONS connections)"
    stop_peer "$peer"
    start_peer "$peer"
    # A short warm-up sets up the upstream pool and the allocator before the baseline.
    timeout 30 taskset -c "$LOAD_CPU" wrk -t1 -c50 -d1s -H "Host: $BENCH_HOST" \
        "http://127.0.0.1:${PORT_H1[$peer]}/" >/dev/null 2>&1 || true
    sleep 1
    if timeout -k 5 120 taskset -c "$LOAD_CPU" python3 "$BENCH_DIR/idle_clients.py" \
        --pid "${PID[$peer]}" --port "${PORT_H1[$peer]}" --host "$BENCH_HOST" \
        --connections "$IDLE_CONNECTIONS" >"$out" 2>"$out.err"; then
        python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); r.update(shape="idle_memory", peer=sys.argv[2], round=1); print(json.dumps(r))' \
            "$out" "$peer" >>"$RAW"
    else
        log "idle connections: $peer failed: $(tail -3 "$out.err")"
        printf '{"shape":"idle_memory","peer":"%s","round":1,"failed":"client exited with an error"}\n' "$peer" >>"$RAW"
    fi
}

route_table_bench() {
    log "criterion: one changed container among 1,000"
    rm -rf "$REPO/target/criterion/route_table"
    (cd "$REPO" && taskset -c "$PROXY_CPU" cargo bench --locked --bench route_table -- \
        --warm-up-time 1 --measurement-time 3 >&2) ||
        log "the route_table benchmark failed; its figure is left out"
}

# ---------------------------------------------------------------- report

versions() {
    local dockhand_rev
    dockhand_rev=$(git -C "$REPO" describe --always --dirty 2>/dev/null || echo unknown)
    echo "dockhand $dockhand_rev ($("$DOCKHAND_BIN" --version 2>/dev/null || echo '?')),"
    echo "$(nginx -v 2>&1 | sed 's/.*: //'),"
    echo "HAProxy $(haproxy -v | head -1 | awk '{print $3}'),"
    echo "Caddy $(caddy version | awk '{print $1}'),"
    echo "wrk $(wrk -v 2>&1 | head -1 | awk '{print $2}'),"
    echo "h2load $(h2load --version | awk '{print $NF}')"
}

short_run_note() {
    if ((ROUNDS < 3 || DURATION < 10)); then
        echo "- **A short run ($ROUNDS round(s) of $DURATION s): a check that the benchmark works, not figures to quote.**"
    fi
}

header() {
    local cpu_model
    cpu_model=$(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //')
    cat <<EOF
# dockhand against nginx, HAProxy and Caddy

- Date: $(date -u '+%Y-%m-%d %H:%M UTC')
- Command: \`$COMMAND\`
- Machine: $(nproc) CPUs, $cpu_model, Linux $(uname -r); load average at start: $LOAD_AT_START
- Versions: $(versions | tr '\n' ' ')
EOF
    short_run_note
    cat <<EOF
- Set-up: everything on 127.0.0.1. Each proxy has one worker (dockhand \`--workers 1\`,
  nginx \`worker_processes 1\`, HAProxy \`nbthread 1\`, Caddy \`GOMAXPROCS=1\`) pinned to CPU 0.
  The load generator (wrk / h2load) **and the backend** (one nginx worker answering
  \`return 200\`) share CPU 1: with 2 cores there is no better split, so the backend's
  work and the client's compete, for every peer alike. Access logs are off everywhere.
  nginx keeps 1,024 idle upstream connections, HAProxy uses \`http-reuse always\`, Caddy
  keeps 1,024 idle upstream connections per host; keep-alive request limits are lifted.
- Each shape runs every peer in turn (dockhand, nginx, HAProxy, Caddy, direct), $ROUNDS
  round(s) of ${DURATION} s; figures are medians. CPU is the peer's whole process tree
  (utime+stime from /proc), per 100k requests; for "direct" it is the backend's.
  "direct" is the backend without a proxy: the limit of this set-up.
EOF
}

footer() {
    cat <<EOF

Notes:
- Memory: each proxy is restarted, warmed with 1 s of \`wrk -c50\`, then
  \`bench/idle_clients.py\` opens $IDLE_CONNECTIONS HTTP/1.1 connections, sends one request on
  each (at most 50 at a time, so the upstream pool stays small), keeps them idle and reads
  the resident memory of the proxy's process tree; the figure is (after − before) ÷
  connections. dockhand closes idle keep-alive client connections after 10 s, so the
  measurement is taken within that window ("measured after first response").
- Route table size: the 10,000 extra hosts are exact names (\`h{i}.scale.test\`) sharing the
  benchmark's upstream; requests go to the benchmark host. The two dockhand instances
  alternate, $ROUNDS round(s) of ${DURATION} s.
- Applying one changed container: \`cargo bench --bench route_table\` (labels of 1,000
  containers → \`build_hosts\` → \`Router::publish\`, one address changed per iteration).
- CPU 1 carries both the load generator and the backend, so a proxy on CPU 0 may not
  be saturated and requests/s also depends on how the proxy's timing suits CPU 1; CPU
  seconds per 100k requests is the figure that depends on the proxy alone.
- Load average at the end: $(cut -d' ' -f1-3 /proc/loadavg). Figures from a busy machine are indicative only.
EOF
}

# ---------------------------------------------------------------- main

main() {
    install_packages
    build
    log "building the route_table benchmark"
    (cd "$REPO" && cargo bench --locked --bench route_table --no-run >&2)

    WORK=$(mktemp -d /tmp/dockhand-bench.XXXXXX)
    mkdir -p "$WORK/runs"
    RAW=$WORK/raw.jsonl
    : >"$RAW"
    raise_file_limit
    LOAD_AT_START=$(cut -d' ' -f1-3 /proc/loadavg)

    route_table_bench

    local peers=(dockhand nginx haproxy caddy direct) peer shape round
    check_ports "${PORT_H1[@]}" "${PORT_H2[@]}"
    for peer in direct dockhand nginx haproxy caddy; do start_peer "$peer"; done
    PID[dockhand_1host]=${PID[dockhand]}
    for peer in "${peers[@]}"; do check_peer "$peer"; done

    for shape in h1_c50 h1_c500 h2c h1_close; do
        warm_up "$shape" "${peers[@]}"
        for round in $(seq "$ROUNDS"); do
            for peer in "${peers[@]}"; do run "$shape" "$peer" "$round"; done
        done
    done

    start_peer dockhand_10k
    check_peer dockhand_10k
    warm_up scale dockhand_1host dockhand_10k
    for round in $(seq "$ROUNDS"); do
        for peer in dockhand_1host dockhand_10k; do run scale "$peer" "$round"; done
    done
    stop_peer dockhand_10k

    for peer in dockhand nginx haproxy caddy; do idle_memory "$peer"; done

    local tables
    tables=$(python3 "$BENCH_DIR/results.py" table "$RAW" --criterion "$REPO/target/criterion/route_table")
    { header; echo; echo "$tables"; footer; } | tee "$BENCH_DIR/RESULTS.md"
    log "written to $BENCH_DIR/RESULTS.md"
}

main "$@"
