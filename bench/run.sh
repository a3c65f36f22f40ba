#!/usr/bin/env bash
# dockhand side by side with nginx, HAProxy and Caddy, on this machine, in one run.
#
#   bench/run.sh                                   # the full run (about 25 minutes)
#   ROUNDS=1 DURATION=3 IDLE_CONNECTIONS=2000 bench/run.sh   # a quick check
#
# What it does, unattended, as root (or with sudo on PATH for apt-get):
#  - builds dockhand as it is shipped (`pgo/build.sh`: release, optimised
#    with a profile of a workload of its own) and the route_table criterion
#    benchmark, and installs the Debian packages it lacks (nginx-light
#    haproxy caddy wrk nghttp2-client openssl, and what `pgo/build.sh
#    --needs` lists: llvm-N for llvm-profdata without rustup's llvm-tools);
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
#  - the same over HTTPS (TLS 1.3, keep-alive and a new TLS connection per
#    request) against dockhand, nginx, HAProxy and Caddy, all serving one ECDSA
#    P-256 certificate made for this run with openssl (a CA and a leaf for the
#    bench host, in the temp dir; curl checks the chain against that CA before
#    the load, wrk verifies nothing);
#  - after dockhand's runs, reads its admin listener's /metrics and checks that
#    dockhand_requests_total for the bench host is the requests the load
#    generators completed against it, plus the ones in flight when each run
#    stopped (at most one per connection), every one answered 200; otherwise
#    the script says so loudly and exits non-zero;
#  - dockhand with 10,000 hosts in its route table against 1 host;
#  - dockhand with 2 workers against 1 worker, both free to run on either CPU:
#    CPU seconds per request, what this 2-core machine can show of scaling;
#    nginx with 2 workers against 1 the same way, for what a second worker
#    costs here whatever the proxy;
#  - resident memory per idle keep-alive client connection (IDLE_CONNECTIONS
#    of them, one request each, kept idle), for each proxy freshly started;
#  - the in-process time to apply one changed container among 1,000
#    (`cargo bench --bench route_table`).
# Tables go to stdout and to RESULTS_FILE; progress goes to stderr.
# Every process it starts is stopped on exit, Ctrl-C or error.
#
# Environment:
#   ROUNDS=3            rounds of each shape (each peer once per round)
#   DURATION=10         seconds per run
#   IDLE_CONNECTIONS=10000
#   SCALE_HOSTS=10000   hosts in the large route table
#   BASE_PORT=21000     ports used: BASE_PORT+80..+95, +180..+183 and +281..+284, on 127.0.0.1
#   SHAPES="..."        what to run, any of: h1_c50 h1_c500 h2c h1_close
#                       https_c50 https_close scale workers idle_memory route_table
#                       (default: all)
#   PEERS="..."         peers of the load shapes, any of: dockhand nginx haproxy
#                       caddy direct (default: all; dockhand first for the ratios)
#   RESULTS_FILE=path   where the tables go (default bench/RESULTS.md)
#   DOCKHAND_BIN=path   use this binary instead of building one
#   KEEP_WORK=1         keep the temp dir (configs, raw outputs, logs)

set -euo pipefail

ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-10}
IDLE_CONNECTIONS=${IDLE_CONNECTIONS:-10000}
SCALE_HOSTS=${SCALE_HOSTS:-10000}
BASE_PORT=${BASE_PORT:-21000}
ALL_SHAPES="h1_c50 h1_c500 h2c h1_close https_c50 https_close scale workers idle_memory route_table"
SHAPES=${SHAPES:-$ALL_SHAPES}
PEERS=${PEERS:-dockhand nginx haproxy caddy direct}
PROXY_CPU=0
LOAD_CPU=1
BENCH_HOST=bench.test

BENCH_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(dirname "$BENCH_DIR")
# shellcheck source=loopback.sh
source "$BENCH_DIR/loopback.sh"
RESULTS_FILE=${RESULTS_FILE:-$BENCH_DIR/RESULTS.md}
COMMAND="ROUNDS=$ROUNDS DURATION=$DURATION IDLE_CONNECTIONS=$IDLE_CONNECTIONS SCALE_HOSTS=$SCALE_HOSTS"
[[ $SHAPES != "$ALL_SHAPES" ]] && COMMAND+=" SHAPES='$SHAPES'"
[[ $PEERS != "dockhand nginx haproxy caddy direct" ]] && COMMAND+=" PEERS='$PEERS'"
COMMAND+=" bench/run.sh"

# Whether WORD is one of the words of LIST.
wanted() {
    [[ " $2 " == *" $1 "* ]]
}

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
        taskset:util-linux ss:iproute2 python3:python3 openssl:openssl; do
        package=${command#*:}
        command -v "${command%%:*}" >/dev/null || missing+=("$package")
    done
    # And what the build (pgo/build.sh) needs, llvm-profdata among it.
    if [[ -z ${DOCKHAND_BIN:-} ]]; then
        for package in $("$REPO/pgo/build.sh" --needs); do
            [[ " ${missing[*]} " == *" $package "* ]] || missing+=("$package")
        done
    fi
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
        DOCKHAND_BUILT="given as DOCKHAND_BIN=$DOCKHAND_BIN"
    else
        log "building dockhand (release, profile-guided: pgo/build.sh)"
        DOCKHAND_BIN=$("$REPO/pgo/build.sh" | tail -1)
        DOCKHAND_BUILT="built by \`pgo/build.sh\` (release, profile-guided)"
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

declare -A PID PORT_H1 PORT_H2 PORT_TLS PORT_ADMIN
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
PORT_H1[dockhand_w1]=$((BASE_PORT + 92))
PORT_H1[dockhand_w2]=$((BASE_PORT + 93))
PORT_H1[nginx_w1]=$((BASE_PORT + 94))
PORT_H1[nginx_w2]=$((BASE_PORT + 95))
# HTTPS: every proxy but the backend (which the proxies reach over plain HTTP).
PORT_TLS[dockhand]=$((BASE_PORT + 281))
PORT_TLS[nginx]=$((BASE_PORT + 282))
PORT_TLS[haproxy]=$((BASE_PORT + 283))
PORT_TLS[caddy]=$((BASE_PORT + 284))
# dockhand's admin listener, where /metrics is read.
PORT_ADMIN[dockhand]=$((BASE_PORT + 85))
PORT_ADMIN[dockhand_10k]=$((BASE_PORT + 86))
PORT_ADMIN[dockhand_w1]=$((BASE_PORT + 87))
PORT_ADMIN[dockhand_w2]=$((BASE_PORT + 88))
BACKEND=127.0.0.1:${PORT_H1[direct]}
TLS_DIR=""

# One ECDSA P-256 CA and a leaf for the bench host signed by it, for this run
# only: dockhand reads the leaf from its --certs-dir, nginx and Caddy the same
# files, HAProxy their concatenation. The chain sent is the leaf alone.
make_certificates() {
    TLS_DIR=$WORK/tls
    mkdir -p "$TLS_DIR/certs"
    local p256=(genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256)
    (
        cd "$TLS_DIR"
        openssl "${p256[@]}" -out ca.key
        openssl req -x509 -new -key ca.key -sha256 -days 2 -subj "/CN=dockhand bench CA" \
            -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign -out ca.crt
        openssl "${p256[@]}" -out "certs/$BENCH_HOST.key"
        openssl req -new -key "certs/$BENCH_HOST.key" -subj "/CN=$BENCH_HOST" -out leaf.csr
        printf '%s\n' basicConstraints=critical,CA:FALSE keyUsage=critical,digitalSignature \
            extendedKeyUsage=serverAuth "subjectAltName=DNS:$BENCH_HOST" >leaf.ext
        openssl x509 -req -in leaf.csr -CA ca.crt -CAkey ca.key -set_serial 1 -sha256 -days 2 \
            -extfile leaf.ext -out "certs/$BENCH_HOST.crt"
        cat "certs/$BENCH_HOST.crt" "certs/$BENCH_HOST.key" >haproxy.pem
    ) >"$WORK/openssl.log" 2>&1 || die "openssl: $(cat "$WORK/openssl.log")"
    LEAF_CRT=$TLS_DIR/certs/$BENCH_HOST.crt
    LEAF_KEY=$TLS_DIR/certs/$BENCH_HOST.key
    # wrk's URLs name the bench host (so that SNI matches the certificate).
    loopback_lua "$TLS_DIR/loopback.lua"
}

# The top of an nginx configuration living in DIR: WORKERS (default one)
# worker processes, in the foreground.
nginx_main_context() {
    local dir=$1 workers=${2:-1}
    cat <<EOF
worker_processes $workers;
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

# The bench host has a certificate, so a dockhand that redirects plain HTTP
# to HTTPS would answer the HTTP rows with 308s: the routes file turns that
# off for it (`"https_redirect": false`) where this dockhand knows the key.
write_dockhand_routes() {
    local file=$1 filler=$2 redirect=off
    "$DOCKHAND_BIN" check --no-docker --routes <(echo '{"host":{"a.test":{"https_redirect":false,"location":{"/":{"upstream":{"127.0.0.1:1":{}}}}}}}') \
        >/dev/null 2>&1 || redirect=""
    routes_json "$filler" "$BENCH_HOST" "$BACKEND" "$redirect" >"$file"
}

# start_dockhand_instance NAME PORT FILLER_HOSTS [WORKERS [CPUS]]
start_dockhand_instance() {
    local name=$1 port=$2 filler=$3 workers=${4:-1} cpus=${5:-$PROXY_CPU} https=()
    write_dockhand_routes "$WORK/$name.routes.json" "$filler"
    if [[ -n ${PORT_TLS[$name]:-} ]]; then
        https=(--https-listen "127.0.0.1:${PORT_TLS[$name]}" --certs-dir "$TLS_DIR/certs")
    fi
    spawn "$cpus" "$WORK/$name.log" "$DOCKHAND_BIN" --no-docker \
        --routes "$WORK/$name.routes.json" --http-listen "127.0.0.1:$port" \
        "${https[@]}" --admin-listen "127.0.0.1:${PORT_ADMIN[$name]}" \
        --workers "$workers" --log-level warn
    PID[$name]=$LAST_PID
}

start_dockhand() { start_dockhand_instance dockhand "${PORT_H1[dockhand]}" 0; }
start_dockhand_10k() { start_dockhand_instance dockhand_10k "${PORT_H1[dockhand_10k]}" "$SCALE_HOSTS"; }
# The workers shape: both instances may run on either CPU, so the only
# difference between them is the number of workers.
start_dockhand_w1() { start_dockhand_instance dockhand_w1 "${PORT_H1[dockhand_w1]}" 0 1 "$PROXY_CPU,$LOAD_CPU"; }
start_dockhand_w2() { start_dockhand_instance dockhand_w2 "${PORT_H1[dockhand_w2]}" 0 2 "$PROXY_CPU,$LOAD_CPU"; }

# start_nginx_instance NAME [WORKERS [CPUS]]: nginx as a proxy to the
# backend, on NAME's ports (h2c and HTTPS where NAME has them). With
# WORKERS, each worker has its own listening socket (reuseport), as each
# of dockhand's does.
start_nginx_instance() {
    local name=$1 workers=${2:-} cpus=${3:-$PROXY_CPU} dir=$WORK/$1 listen
    mkdir -p "$dir/logs"
    listen="listen 127.0.0.1:${PORT_H1[$name]}${workers:+ reuseport};"
    if [[ -n ${PORT_H2[$name]:-} ]]; then
        # nginx 1.22 speaks h2c (prior knowledge only) on a port of its own.
        listen+=" listen 127.0.0.1:${PORT_H2[$name]} http2;"
    fi
    if [[ -n ${PORT_TLS[$name]:-} ]]; then
        listen+=" listen 127.0.0.1:${PORT_TLS[$name]} ssl http2;"
        listen+=" ssl_certificate $LEAF_CRT; ssl_certificate_key $LEAF_KEY;"
        listen+=" ssl_protocols TLSv1.2 TLSv1.3;"
    fi
    {
        nginx_main_context "$dir" "${workers:-1}"
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
        $listen
        location / {
            proxy_pass http://backend;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
        }
    }
}
EOF
    } >"$dir/nginx.conf"
    spawn "$cpus" "$WORK/$name.log" nginx -e "$dir/logs/error.log" -p "$dir" -c "$dir/nginx.conf"
    PID[$name]=$LAST_PID
}

start_nginx() { start_nginx_instance nginx; }
# The workers shape's yardstick: nginx set up as dockhand_w1 and dockhand_w2 are.
start_nginx_w1() { start_nginx_instance nginx_w1 1 "$PROXY_CPU,$LOAD_CPU"; }
start_nginx_w2() { start_nginx_instance nginx_w2 2 "$PROXY_CPU,$LOAD_CPU"; }

start_haproxy() {
    local dir=$WORK/haproxy IDLE_CONNECTIONS_PLUS=$((IDLE_CONNECTIONS + 1000))
    mkdir -p "$dir"
    proxy_haproxy_conf "$BACKEND" "$IDLE_CONNECTIONS_PLUS" \
        "127.0.0.1:${PORT_H1[haproxy]}" \
        "127.0.0.1:${PORT_H2[haproxy]} proto h2" \
        "127.0.0.1:${PORT_TLS[haproxy]} ssl crt $TLS_DIR/haproxy.pem ssl-min-ver TLSv1.2 alpn h2,http/1.1" \
        >"$dir/haproxy.cfg"
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
    servers :${PORT_H1[caddy]} {
        protocols h1 h2c
    }
    servers :${PORT_TLS[caddy]} {
        protocols h1 h2
    }
}
(backend) {
    reverse_proxy ${BACKEND} {
        transport http {
            keepalive_idle_conns_per_host 1024
        }
    }
}
http://:${PORT_H1[caddy]} {
    bind 127.0.0.1
    import backend
}
# With auto_https off, the certificate is the one given here and nothing is ordered.
https://${BENCH_HOST}:${PORT_TLS[caddy]} {
    bind 127.0.0.1
    tls $LEAF_CRT $LEAF_KEY
    import backend
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
    if [[ -n ${PORT_TLS[$peer]:-} ]]; then
        wait_listening "${PORT_TLS[$peer]}" "${PID[$peer]}" "$peer"
    fi
}

stop_peer() {
    stop_tree "${PID[$1]}"
    wait "${PID[$1]}" 2>/dev/null || true
    forget "${PID[$1]}"
}

# One request over HTTP/1.1 and, where the peer has them, ten over h2c and
# the HTTPS checks.
check_peer() {
    local peer=$1
    local out=$WORK/check.$peer
    timeout 20 taskset -c "$LOAD_CPU" wrk -t1 -c1 -d1s -H "Host: $BENCH_HOST" \
        "http://127.0.0.1:${PORT_H1[$peer]}/" >"$out" 2>&1 ||
        die "$peer: wrk failed: $(cat "$out")"
    tally "$peer" wrk "$out" 1 "check_peer wrk -c1"
    grep -q "Non-2xx" "$out" && die "$peer answers HTTP/1.1 with errors: $(cat "$out")"
    if [[ -n ${PORT_H2[$peer]:-} ]]; then
        timeout 20 h2load -n 10 -c 1 -H ":authority: $BENCH_HOST" \
            "http://127.0.0.1:${PORT_H2[$peer]}/" >"$out.h2" 2>&1 || true
        tally "$peer" h2load "$out.h2" 1 "check_peer h2load -n 10"
        if ! grep -q "10 succeeded" "$out.h2" || ! grep -q "10 2xx" "$out.h2"; then
            log "$peer: no h2c prior knowledge, its h2c runs are left out: $(grep -E 'requests:|status codes' "$out.h2" | tr '\n' ' ')"
            unset "PORT_H2[$peer]"
        fi
    fi
    check_tls "$peer"
}

# HTTPS: one request from curl, which verifies the chain and the name against
# the run's CA; then what a new connection negotiates and whether the next one
# resumes its session (openssl s_client, no request), as wrk's new connections
# would. A line of $TLS_SUMMARY per peer.
check_tls() {
    local peer=$1 port=${PORT_TLS[$1]:-}
    [[ -z $port ]] && return 0
    local out=$WORK/check.$peer.tls session=$WORK/check.$peer.session first second
    timeout 20 curl -sS --cacert "$TLS_DIR/ca.crt" --resolve "$BENCH_HOST:$port:127.0.0.1" \
        -o /dev/null -w '%{http_code} HTTP/%{http_version}' "https://$BENCH_HOST:$port/" >"$out" 2>&1 ||
        die "$peer: an HTTPS request verified against the bench CA failed: $(cat "$out")"
    if [[ $peer == dockhand ]]; then echo "1 0 check_tls curl" >>"$LEDGER"; fi
    [[ $(cat "$out") == "200 "* ]] || die "$peer answers HTTPS with $(cat "$out")"
    # s_client stops at the end of its input: the half second lets the
    # session ticket, sent after the handshake, arrive.
    first=$(sleep 0.5 | timeout 20 openssl s_client -connect "127.0.0.1:$port" \
        -servername "$BENCH_HOST" -sess_out "$session" 2>&1) || true
    second=$(sleep 0.5 | timeout 20 openssl s_client -connect "127.0.0.1:$port" \
        -servername "$BENCH_HOST" -sess_in "$session" 2>&1) || true
    local protocol cipher group resumed=no
    protocol=$(sed -n 's/^New, \([^,]*\), Cipher is .*/\1/p' <<<"$first")
    cipher=$(sed -n 's/^New, [^,]*, Cipher is //p' <<<"$first")
    group=$(sed -n 's/^Server Temp Key: \([^,]*\),.*/\1/p' <<<"$first")
    grep -q '^Reused,' <<<"$second" && resumed=yes
    [[ -n $protocol ]] || die "$peer: openssl s_client got no TLS session: $(tail -3 <<<"$first")"
    log "$peer: HTTPS $(cat "$out"), $protocol $cipher $group, session resumed: $resumed"
    echo "$peer|$protocol|$cipher|$group|$resumed" >>"$TLS_SUMMARY"
}

# ---------------------------------------------------------------- runs

RAW=""
LEDGER=""
TLS_SUMMARY=""

# tally PEER TOOL OUTPUT IN_FLIGHT WHAT: when PEER is dockhand's main
# instance, the requests OUTPUT says were completed go to its ledger, with the
# most that can have been in flight when the generator stopped (dockhand counts
# a request whose response it produced; the generator, one it read).
tally() {
    local peer=$1 tool=$2 output=$3 in_flight=$4 what=$5
    [[ $peer == dockhand || $peer == dockhand_1host ]] || return 0
    echo "$(python3 "$BENCH_DIR/results.py" completed --tool "$tool" --output "$output") $in_flight $what" >>"$LEDGER"
}

# load_command SHAPE PEER SECONDS OUT: sets LOAD (the bounded load generator
# command for one run), TOOL and IN_FLIGHT (the most requests it has out at
# once); LOAD stays empty when the peer lacks the protocol.
load_command() {
    local shape=$1 peer=$2 seconds=$3 out=$4 port=${PORT_H1[$2]}
    local wrk=(wrk -t1 -d"${seconds}s" --latency -H "Host: $BENCH_HOST")
    # wrk over TLS: the URL names the bench host for SNI, loopback.lua points it at 127.0.0.1.
    local tls=(-s "$TLS_DIR/loopback.lua" "https://$BENCH_HOST:${PORT_TLS[$peer]:-}/")
    LOAD=(timeout -k 5 "$((seconds + 60))" taskset -c "$LOAD_CPU")
    TOOL=wrk
    IN_FLIGHT=50
    case $shape in
    h1_c50 | scale | workers) LOAD+=("${wrk[@]}" -c50 "http://127.0.0.1:$port/") ;;
    h1_c500) LOAD+=("${wrk[@]}" -c500 "http://127.0.0.1:$port/") && IN_FLIGHT=500 ;;
    h1_close) LOAD+=("${wrk[@]}" -c50 -H "Connection: close" "http://127.0.0.1:$port/") ;;
    https_c50 | https_close)
        [[ -z ${PORT_TLS[$peer]:-} ]] && LOAD=() && return 0
        if [[ $shape == https_close ]]; then
            # wrk opens a new connection (and TLS handshake) after each response.
            LOAD+=("${wrk[@]}" -c50 -H "Connection: close" "${tls[@]}")
        else
            LOAD+=("${wrk[@]}" -c50 "${tls[@]}")
        fi
        ;;
    h2c)
        port=${PORT_H2[$peer]:-}
        [[ -z $port ]] && LOAD=() && return 0
        TOOL=h2load
        IN_FLIGHT=100
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
        local out=$WORK/runs/warm-up.$shape.$peer
        load_command "$shape" "$peer" 1 "$out"
        [[ ${#LOAD[@]} == 0 ]] && continue
        "${LOAD[@]}" >"$out" 2>&1 || true
        tally "$peer" "$TOOL" "$out" "$IN_FLIGHT" "$shape warm-up"
        rm -f "$out.log"
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
    tally "$peer" "$TOOL" "$out" "$IN_FLIGHT" "$shape round $round"
    python3 "$BENCH_DIR/results.py" record --shape "$shape" --peer "$peer" --round "$round" \
        --tool "$TOOL" --output "$out" --log "$out.log" --cpu-ticks $((after - before)) >>"$RAW"
    rm -f "$out.log"
    # Let the connections of one run close before the next peer's run.
    sleep 1
}

# side_by_side SHAPE INSTANCE...: SHAPE against INSTANCEs in turn,
# ROUNDS times; those not running yet are started first and stopped after.
side_by_side() {
    local shape=$1 peer round started=()
    shift
    for peer in "$@"; do
        [[ -n ${PID[$peer]:-} ]] && continue
        start_peer "$peer"
        check_peer "$peer"
        started+=("$peer")
    done
    warm_up "$shape" "$@"
    for round in $(seq "$ROUNDS"); do
        for peer in "$@"; do run "$shape" "$peer" "$round"; done
    done
    for peer in "${started[@]}"; do stop_peer "$peer"; done
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

# ---------------------------------------------------------------- metrics

METRICS_CHECK=""

# dockhand's own count of the bench host's requests (its admin /metrics)
# against the ledger of what the load generators and checks sent it. Writes
# $WORK/metrics-check.md; sets METRICS_CHECK to passed or failed.
check_metrics() {
    local out=$WORK/metrics
    log "reading dockhand's /metrics"
    if ! timeout 20 curl -sS "http://127.0.0.1:${PORT_ADMIN[dockhand]}/metrics" >"$out" 2>"$out.err"; then
        METRICS_CHECK=failed
        log "!!! dockhand's /metrics could not be read: $(cat "$out.err")"
        return 0
    fi
    if python3 "$BENCH_DIR/results.py" metrics-check --metrics "$out" --ledger "$LEDGER" \
        --host "$BENCH_HOST" >"$WORK/metrics-check.md"; then
        METRICS_CHECK=passed
        log "metrics check passed: $(grep -m1 'Check' "$WORK/metrics-check.md")"
    else
        METRICS_CHECK=failed
        log "!!! METRICS CHECK FAILED: $(grep -m1 'Check' "$WORK/metrics-check.md")"
    fi
}

# ---------------------------------------------------------------- report

metrics_check_section() {
    if [[ -f $WORK/metrics-check.md ]]; then
        echo
        cat "$WORK/metrics-check.md"
    fi
}

versions() {
    echo "dockhand $DOCKHAND_REV ($("$DOCKHAND_BIN" --version 2>/dev/null || echo '?')),"
    echo "$(nginx -v 2>&1 | sed 's/.*: //'),"
    echo "HAProxy $(haproxy -v | head -1 | awk '{print $3}'),"
    echo "Caddy $(caddy version | awk '{print $1}'),"
    echo "wrk $(wrk -v 2>&1 | head -1 | awk '{print $2}'),"
    echo "h2load $(h2load --version | awk '{print $NF}'),"
    echo "rustls $(sed -n '/^name = "rustls"$/{n;s/version = "\(.*\)"/\1/p;}' "$REPO/Cargo.lock") (dockhand),"
    echo "$(openssl version | awk '{print $1, $2}') (nginx, HAProxy, wrk)"
}

# The HTTPS set-up and what each peer negotiated (from check_tls).
https_note() {
    wanted https_c50 "$SHAPES" || wanted https_close "$SHAPES" || return 0
    cat <<EOF
- HTTPS: one ECDSA P-256 certificate, a leaf for \`$BENCH_HOST\` signed by a CA that
  \`openssl\` made for this run, served by dockhand (\`--certs-dir\`), nginx
  (\`ssl_certificate\`), HAProxy (\`crt\`) and Caddy (\`tls cert key\`, \`auto_https off\`);
  TLS 1.2 and 1.3 on, ALPN h2 and http/1.1 offered; session tickets on (each one's
  default). wrk speaks HTTP/1.1 over TLS and verifies nothing; before the load, curl
  fetched a page from each verifying the chain against the run's CA. The proxies reach
  the backend over plain HTTP; "direct" has no HTTPS rows. What a new connection
  negotiates (\`openssl s_client\`), and whether a second one resumes its session:

  | | protocol | cipher | key exchange | session resumed |
  |---|---|---|---|---|
EOF
    local peer protocol cipher group resumed
    while IFS='|' read -r peer protocol cipher group resumed; do
        echo "  | $peer | $protocol | $cipher | $group | $resumed |"
    done <"$TLS_SUMMARY"
    cat <<EOF

  With \`Connection: close\`, wrk opens a new TCP connection and TLS handshake for each
  request, and offers the session of the connection before (OpenSSL keeps it across
  \`SSL_clear\`): the "new TLS connection per request" rows are resumed TLS 1.3
  handshakes (PSK with an X25519 exchange, no certificate signature), as browsers make
  them on return visits, not full handshakes.
EOF
}

short_run_note() {
    if ((ROUNDS < 3 || DURATION < 10)); then
        echo "- **A short run ($ROUNDS round(s) of $DURATION s): a check that the benchmark works, not figures to quote.**"
    fi
}

# Other work on the machine takes CPU from the peers and the load generator alike.
shared_machine_note() {
    local start=${LOAD_AT_START%% *}
    if python3 -c 'import sys; sys.exit(float(sys.argv[1]) < 0.5)' "$start"; then
        echo "- **The machine was shared**: load average $LOAD_AT_START at the start, so other work ran on these $(nproc) cores during the run; ratios between peers measured in the same run hold better than the absolute figures."
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
- dockhand's binary: $DOCKHAND_BUILT
EOF
    short_run_note
    shared_machine_note
    cat <<EOF
- Set-up: everything on 127.0.0.1. Each proxy has one worker (dockhand \`--workers 1\`,
  nginx \`worker_processes 1\`, HAProxy \`nbthread 1\`, Caddy \`GOMAXPROCS=1\`) pinned to CPU 0.
  The load generator (wrk / h2load) **and the backend** (one nginx worker answering
  \`return 200\`) share CPU 1: with 2 cores there is no better split, so the backend's
  work and the client's compete, for every peer alike. Access logs are off everywhere.
  nginx keeps 1,024 idle upstream connections, HAProxy uses \`http-reuse always\`, Caddy
  keeps 1,024 idle upstream connections per host; keep-alive request limits are lifted.
- Each shape runs every peer in turn ($PEERS), $ROUNDS
  round(s) of ${DURATION} s; figures are medians. CPU is the peer's whole process tree
  (utime+stime from /proc), per 100k requests; for "direct" it is the backend's.
  "direct" is the backend without a proxy: the limit of this set-up.
EOF
    https_note
}

footer() {
    echo
    echo "Notes:"
    if wanted idle_memory "$SHAPES"; then
        cat <<EOF
- Memory: each proxy is restarted, warmed with 1 s of \`wrk -c50\`, then
  \`bench/idle_clients.py\` opens $IDLE_CONNECTIONS HTTP/1.1 connections, sends one request on
  each (at most 50 at a time, so the upstream pool stays small), keeps them idle and reads
  the resident memory of the proxy's process tree; the figure is (after − before) ÷
  connections. dockhand closes idle keep-alive client connections after 10 s, so the
  measurement is taken within that window ("measured after first response").
EOF
    fi
    if wanted scale "$SHAPES"; then
        cat <<EOF
- Route table size: the $SCALE_HOSTS extra hosts are exact names (\`h{i}.scale.test\`) sharing the
  benchmark's upstream; requests go to the benchmark host. The two dockhand instances
  alternate, $ROUNDS round(s) of ${DURATION} s.
EOF
    fi
    if wanted workers "$SHAPES"; then
        cat <<EOF
- Workers: two more dockhand instances, \`--workers 1\` and \`--workers 2\`, each free to
  run on both CPUs (the load generator and the backend stay on CPU 1, so the second
  worker shares a CPU with them), and two nginx instances set up the same way
  (\`worker_processes 1\` and \`2\`, each worker with its own socket: \`reuseport\`).
  They alternate, $ROUNDS round(s) of ${DURATION} s. With 2 cores this shows what a second
  worker costs per request, not how far it scales; nginx's ratio is what it costs
  on this machine whatever the proxy.
EOF
    fi
    if wanted route_table "$SHAPES"; then
        cat <<EOF
- Applying one changed container: \`cargo bench --bench route_table\` (labels of 1,000
  containers → \`build_hosts\` → \`Router::publish\`, one address changed per iteration).
EOF
    fi
    if [[ -f $WORK/metrics-check.md ]]; then
        cat <<EOF
- Metrics check: dockhand counts a request in \`dockhand_requests_total\` once its response
  is produced, a load generator once it has read it; when a run's time is up, wrk and
  h2load stop reading with requests still out (at most one per connection, or per stream
  for h2load), so dockhand's count may exceed their sum by that much, never fall short.
  The sum covers every run against dockhand's main instance: warm-ups, rounds, the
  route-table runs with 1 host, the checks (wrk, h2load) and curl's HTTPS request. Every
  answer must be a 200, as the backend's are. TLS handshakes completed against requests
  made over a new TLS connection each shows that wrk did open one per request.
EOF
    fi
    cat <<EOF
- CPU 1 carries both the load generator and the backend, so a proxy on CPU 0 may not
  be saturated and requests/s also depends on how the proxy's timing suits CPU 1; CPU
  seconds per 100k requests is the figure that depends on the proxy alone. This holds
  most for a new TLS connection per request: wrk's own handshakes take most of CPU 1.
- Load average at the end: $(cut -d' ' -f1-3 /proc/loadavg). Figures from a busy machine are indicative only.
EOF
}

# ---------------------------------------------------------------- main

main() {
    local word
    for word in $SHAPES; do
        wanted "$word" "$ALL_SHAPES" || die "unknown shape '$word' in SHAPES (known: $ALL_SHAPES)"
    done
    for word in $PEERS; do
        wanted "$word" "dockhand nginx haproxy caddy direct" || die "unknown peer '$word' in PEERS"
    done
    install_packages
    build
    if wanted route_table "$SHAPES"; then
        log "building the route_table benchmark"
        (cd "$REPO" && cargo bench --locked --bench route_table --no-run >&2)
    fi

    WORK=$(mktemp -d /tmp/dockhand-bench.XXXXXX)
    mkdir -p "$WORK/runs"
    RAW=$WORK/raw.jsonl
    LEDGER=$WORK/dockhand.ledger
    TLS_SUMMARY=$WORK/tls.summary
    : >"$RAW"
    : >"$LEDGER"
    : >"$TLS_SUMMARY"
    raise_file_limit
    LOAD_AT_START=$(cut -d' ' -f1-3 /proc/loadavg)
    # Read before the tables are written: RESULTS_FILE is in the work tree.
    DOCKHAND_REV=$(git -C "$REPO" describe --always --dirty 2>/dev/null || echo unknown)
    make_certificates

    local criterion=()
    if wanted route_table "$SHAPES"; then
        route_table_bench
        criterion=(--criterion "$REPO/target/criterion/route_table")
    fi

    # shellcheck disable=SC2206
    local peers=($PEERS) peer shape round
    check_ports "${PORT_H1[@]}" "${PORT_H2[@]}" "${PORT_TLS[@]}" "${PORT_ADMIN[@]}"
    # The backend runs whether or not "direct" is a peer: the proxies need it.
    start_peer direct
    for peer in dockhand nginx haproxy caddy; do
        if wanted "$peer" "$PEERS"; then start_peer "$peer"; fi
    done
    PID[dockhand_1host]=${PID[dockhand]:-}
    for peer in "${peers[@]}"; do check_peer "$peer"; done

    for shape in h1_c50 h1_c500 h2c h1_close https_c50 https_close; do
        wanted "$shape" "$SHAPES" || continue
        warm_up "$shape" "${peers[@]}"
        for round in $(seq "$ROUNDS"); do
            for peer in "${peers[@]}"; do run "$shape" "$peer" "$round"; done
        done
    done

    if wanted dockhand "$PEERS"; then
        if wanted scale "$SHAPES"; then side_by_side scale dockhand_1host dockhand_10k; fi
        if wanted workers "$SHAPES"; then
            side_by_side workers dockhand_w1 dockhand_w2 nginx_w1 nginx_w2
        fi
    fi

    # Before idle_memory, which restarts dockhand (and so its counters).
    if wanted dockhand "$PEERS"; then check_metrics; else METRICS_CHECK=passed; fi

    if wanted idle_memory "$SHAPES"; then
        for peer in dockhand nginx haproxy caddy; do
            if wanted "$peer" "$PEERS"; then idle_memory "$peer"; fi
        done
    fi

    local tables
    tables=$(python3 "$BENCH_DIR/results.py" table "$RAW" --scale-hosts "$SCALE_HOSTS" "${criterion[@]}")
    { header; echo; echo "$tables"; metrics_check_section; footer; } | tee "$RESULTS_FILE"
    log "written to $RESULTS_FILE"
    if [[ $METRICS_CHECK != passed ]]; then
        log "!!! METRICS CHECK FAILED: dockhand's dockhand_requests_total does not match the load generators' totals"
        log "!!! $(grep -m1 'Check' "$WORK/metrics-check.md" 2>/dev/null || echo 'no /metrics read')"
        exit 1
    fi
}

main "$@"
