#!/usr/bin/env bash
# The Docker integration suite, start to finish:
#   1. an engine: the one at DOCKER_HOST or the default socket, else a throwaway
#      dockerd (root, dockerd installed) that is stopped again on exit;
#   2. the images dockhand:test and dockhand-testbackend:test, built locally;
#   3. a second throwaway engine, a one-node swarm manager with those images,
#      for the swarm scenarios (integration/swarm.rs), stopped again on exit;
#   4. `cargo test --test integration`; its exit code is this script's.
# Arguments go to the test binary: `integration/run.sh websocket` runs the
# tests whose name contains "websocket".
#
# Without an engine the suite fails; DOCKHAND_SKIP_DOCKER=1 makes that a skip on
# a developer's machine, never under CI=true. Likewise without the swarm engine
# (it needs root and dockerd): DOCKHAND_SKIP_SWARM=1 skips the swarm scenarios.
set -euo pipefail
cd "$(dirname "$0")/.."

say() { echo "integration: $*" >&2; }

# Each engine's folder names this script as its owner: should this run be
# killed, the next one stops the engines it left.
if ! engine=$(DOCKHAND_ENGINE_OWNER=$$ integration/engine.sh start); then
    if [ "${CI:-}" = true ]; then
        say "no Docker engine, and under CI the Docker suite is never skipped"
        exit 1
    fi
    if [ "${DOCKHAND_SKIP_DOCKER:-}" = 1 ]; then
        say "no Docker engine: SKIPPED the Docker suite (DOCKHAND_SKIP_DOCKER=1)"
        exit 0
    fi
    say "no Docker engine: the Docker suite cannot run."
    say "Start Docker (or run as root with dockerd installed), or set DOCKHAND_SKIP_DOCKER=1 to skip it."
    exit 1
fi
eval "$engine"
trap 'integration/engine.sh stop-swarm; integration/engine.sh stop' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

started=$(date +%s)
integration/images.sh
say "images ready in $(($(date +%s) - started)) s"

started=$(date +%s)
if swarm=$(DOCKHAND_ENGINE_OWNER=$$ integration/engine.sh start-swarm); then
    eval "$swarm"
    say "swarm engine ready in $(($(date +%s) - started)) s"
elif [ "${DOCKHAND_SKIP_SWARM:-}" = 1 ] && [ "${CI:-}" != true ]; then
    say "no swarm engine: SKIPPED the swarm scenarios (DOCKHAND_SKIP_SWARM=1)"
else
    say "no swarm engine: the swarm scenarios cannot run (DOCKHAND_SKIP_SWARM=1 skips them, never under CI)"
    exit 1
fi

# Figures the scenarios measure (never assert) are appended here; shown at the end.
figures="${CARGO_TARGET_DIR:-target}/tmp/integration-figures.txt"
rm -f "$figures"

started=$(date +%s)
status=0
cargo test --locked --test integration -- --test-threads="${DOCKHAND_TEST_THREADS:-2}" "$@" || status=$?
say "tests finished in $(($(date +%s) - started)) s (exit $status)"
if [ -s "$figures" ]; then
    say "measured:"
    sed 's/^/  /' "$figures" >&2
fi
exit "$status"
