#!/usr/bin/env bash
# dockhand's release binary, built with profile-guided optimisation: an
# instrumented build serves a short, bounded workload on loopback, and the
# release build is compiled with the counts it wrote. The compiler then lays
# out the code a request runs in a few contiguous pieces and keeps the rest
# apart: a keep-alive request runs a quarter fewer instructions and misses the
# instruction cache half as often (`bench/instructions.sh`). The image
# (`Dockerfile`) and the benchmark (`bench/run.sh`) both build this way, so
# the binary measured is the binary shipped.
#
#   pgo/build.sh [--target TRIPLE]      (default: the host's triple)
#   pgo/build.sh --needs                the Debian packages it lacks, a line each
#
# Prints the binary's path as its last line of output:
# target/pgo/release/TRIPLE/release/dockhand. RUSTFLAGS is passed to both
# builds (the image adds crt-static); the explicit --target keeps the
# instrumentation away from build scripts and proc-macros. Each build has
# its own target directory under target/pgo, so neither rebuilds the other's
# dependencies, nor those of a plain `cargo build --release`.
#
# The workload covers what a proxy mostly serves: HTTP/1.1 keep-alive at 50
# and 500 connections, a new connection per request, request bodies, large
# and chunked responses, h2c, HTTPS (HTTP/1.1 and h2, kept and new TLS
# connections), and a route table of one host and of 10,001. Code it does
# not reach is still compiled, for size rather than speed.
#
# Needs nginx (the backend), h2load (nghttp2-client), wrk, openssl, and an
# llvm-profdata of rustc's LLVM major version: rustup's llvm-tools component
# (`rustup component add llvm-tools`) or the system's llvm-profdata-N
# (Debian: llvm-N). BASE_PORT (default 23400) and the 3 ports after it are
# used on 127.0.0.1.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=../bench/loopback.sh
source "$REPO/bench/loopback.sh"
HOST_TRIPLE=$(rustc -vV | sed -n 's/^host: //p')
TRIPLE=$HOST_TRIPLE
NEEDS=0
if [[ ${1:-} == --target ]]; then
    TRIPLE=${2:?--target needs a triple}
elif [[ ${1:-} == --needs ]]; then
    NEEDS=1
elif [[ $# -gt 0 ]]; then
    echo "usage: pgo/build.sh [--target TRIPLE | --needs]" >&2
    exit 2
fi
LLVM_MAJOR=$(rustc -vV | sed -n 's/^LLVM version: \([0-9]*\).*/\1/p')
BASE_PORT=${BASE_PORT:-23400}
PGO_DIR=$REPO/target/pgo
PROFILE=$PGO_DIR/dockhand.profdata
log() { echo "pgo: $*" >&2; }
die() {
    log "$*"
    exit 1
}

# The llvm-profdata that reads what rustc's LLVM writes: the same major version.
find_profdata() {
    local candidate
    for candidate in "$(rustc --print sysroot)/lib/rustlib/$HOST_TRIPLE/bin/llvm-profdata" \
        "llvm-profdata-$LLVM_MAJOR" llvm-profdata; do
        command -v "$candidate" >/dev/null || continue
        if "$candidate" --version 2>/dev/null | grep -q "LLVM version $LLVM_MAJOR\."; then
            echo "$candidate"
            return 0
        fi
    done
    return 1
}

# What is missing, as the Debian packages that have it.
missing=()
for tool in nginx:nginx-light h2load:nghttp2-client wrk:wrk openssl:openssl curl:curl; do
    command -v "${tool%%:*}" >/dev/null || missing+=("${tool#*:}")
done
PROFDATA=$(find_profdata) || missing+=("llvm-$LLVM_MAJOR")
if [[ $NEEDS == 1 ]]; then
    printf '%s\n' "${missing[@]}"
    exit 0
fi
[[ ${#missing[@]} == 0 ]] ||
    die "missing: ${missing[*]} (Debian packages; for llvm-profdata, rustup component add llvm-tools also does)"

scratch_dir

build() {
    local target_dir=$1 flags=$2
    (cd "$REPO" && CARGO_TARGET_DIR=$target_dir RUSTFLAGS="${RUSTFLAGS:-} $flags" \
        cargo build --release --locked --target "$TRIPLE" -p dockhand >&2)
}

log "building the instrumented binary"
rm -rf "$PGO_DIR/counts"
build "$PGO_DIR/train" "-Cprofile-generate=$PGO_DIR/counts"

# The backend: small answers, a large one, a chunked one (gzip made on the
# fly has no length), and request bodies read and answered.
mkdir -p "$WORK/logs" "$WORK/files" "$WORK/certs"
head -c 262144 /dev/zero | tr '\0' 'x' >"$WORK/files/large"
backend_conf "$WORK" "$BASE_PORT" \
    "location /large { alias $WORK/files/large; }" \
    "location /chunked { gzip on; gzip_min_length 0; gzip_types *; return 200 \"$(printf 'chunk%.0s' $(seq 200))\n\"; }" \
    >"$WORK/nginx.conf"
nginx -e "$WORK/logs/error.log" -p "$WORK" -c "$WORK/nginx.conf" &
PIDS+=($!)

host=pgo.test
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 -subj "/CN=$host" \
    -addext "subjectAltName=DNS:$host" -keyout "$WORK/certs/$host.key" -out "$WORK/certs/$host.crt" \
    >"$WORK/openssl.log" 2>&1 || die "openssl: $(cat "$WORK/openssl.log")"
http=127.0.0.1:$((BASE_PORT + 1))
https=127.0.0.1:$((BASE_PORT + 2))

# Starts the instrumented dockhand with a table of FILLER hosts besides the
# trained one, serving plain HTTP on $http and its admin API, and the rest
# of its arguments; sets TRAINEE to its pid once it answers.
start_trainee() {
    local name=$1 filler=$2
    shift 2
    routes_json "$filler" "$host" "127.0.0.1:$BASE_PORT" off >"$WORK/$name.routes.json"
    LLVM_PROFILE_FILE="$PGO_DIR/counts/dockhand-%p-%m.profraw" \
        "$PGO_DIR/train/$TRIPLE/release/dockhand" --no-docker --routes "$WORK/$name.routes.json" \
        --http-listen "$http" --admin-listen "127.0.0.1:$((BASE_PORT + 3))" "$@" \
        --workers 1 --log-level warn >"$WORK/$name.log" 2>&1 &
    TRAINEE=$!
    PIDS+=("$TRAINEE")
    for _ in $(seq 100); do
        curl -sf -o /dev/null -H "Host: $host" "http://$http/" && return 0
        kill -0 "$TRAINEE" 2>/dev/null || break
        sleep 0.2
    done
    die "the instrumented dockhand ($name) does not answer: $(tail -5 "$WORK/$name.log")"
}

# A graceful stop: the counts are written as the process exits.
stop_trainee() {
    kill -TERM "$TRAINEE"
    wait "$TRAINEE" || die "the instrumented dockhand ($1) failed: $(tail -5 "$WORK/$1.log")"
}

log "training"
start_trainee one_host 0 --https-listen "$https" --certs-dir "$WORK/certs"
loopback_lua "$WORK/loopback.lua"
head -c 16384 /dev/zero >"$WORK/body"
# Each run is bounded in requests or seconds. One with a failed request or
# an answer other than 2xx fails the build: its path would go untrained.
load() {
    timeout -k 5 120 "$@" >"$WORK/load.log" 2>&1 || die "$*: $(tail -3 "$WORK/load.log")"
    case $1 in
    h2load) grep -Eq ' 0 failed, 0 errored, 0 timeout' "$WORK/load.log" &&
        grep -Eq 'status codes: [1-9][0-9]* 2xx, 0 3xx, 0 4xx, 0 5xx' "$WORK/load.log" ;;
    wrk) grep -Eq '^ +[1-9][0-9]* requests in' "$WORK/load.log" &&
        ! grep -q 'Non-2xx' "$WORK/load.log" ;;
    esac || die "$*: not every request was answered with 2xx: $(grep -E 'requests|status|Non-2xx' "$WORK/load.log")"
}
h1=(h2load --h1 -t1 -H ":authority: $host")
tls=(--connect-to "$https" "https://$host/")
load "${h1[@]}" -n 100000 -c 50 "http://$http/"
load "${h1[@]}" -n 50000 -c 500 "http://$http/"
load "${h1[@]}" -n 5000 -c 10 "http://$http/large"
load "${h1[@]}" -n 20000 -c 50 -H 'accept-encoding: gzip' "http://$http/chunked"
load "${h1[@]}" -n 10000 -c 10 -d "$WORK/body" "http://$http/"
load wrk -t1 -c50 -d2s -H "Host: $host" -H 'Connection: close' "http://$http/"
load h2load -t1 -n 50000 -c 10 -m 10 -H ":authority: $host" "http://$http/"
load h2load --h1 -t1 -n 30000 -c 50 "${tls[@]}"
load h2load -t1 -n 30000 -c 10 -m 10 "${tls[@]}"
load wrk -t1 -c50 -d2s -H 'Connection: close' -s "$WORK/loopback.lua" "https://$host:${https#*:}/"
stop_trainee one_host
# The lookup in a large table (the benchmark's scale row): the same
# requests, with 10,000 other hosts in the table.
start_trainee large_table 10000
load "${h1[@]}" -n 50000 -c 50 "http://$http/"
stop_trainee large_table
"$PROFDATA" merge -o "$PROFILE" "$PGO_DIR/counts"

log "building with the profile"
build "$PGO_DIR/release" "-Cprofile-use=$PROFILE"
echo "$PGO_DIR/release/$TRIPLE/release/dockhand"
