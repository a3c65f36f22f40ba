#!/usr/bin/env bash
# The sustained-load test of tests/core/load.rs for 60 s instead of CI's 10:
# dockhand (the debug binary, as the test suite builds it) in front of a
# loopback backend, driven by `wrk -t1 -c50`; it fails on any non-2xx
# response, any socket error (a request over 30 s counts as one), or a
# resident memory over the test's bound at the end, and prints the figures.
#
#   bench/load.sh              # 60 s
#   SECONDS_OF_LOAD=300 bench/load.sh
#
# Needs wrk (Debian: apt-get install wrk).
set -euo pipefail
cd "$(dirname "$0")/.."

command -v wrk >/dev/null || { echo "load.sh: wrk is not installed" >&2; exit 1; }
DOCKHAND_LOAD_SECONDS=${SECONDS_OF_LOAD:-60} \
    cargo test --locked --test core -- --exact load::a_sustained_load_has_no_failed_request --nocapture
