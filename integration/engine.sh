#!/usr/bin/env bash
# A Docker engine for the integration suite.
#
#   eval "$(integration/engine.sh start)"   # exports DOCKER_HOST (and DOCKHAND_ENGINE_DIR)
#   integration/engine.sh stop              # stops the engine `start` started, if any
#   integration/engine.sh restart           # restarts that engine (a daemon restart test)
#
# `start` uses the engine at DOCKER_HOST, or at the default socket, when `docker
# info` answers. Otherwise, as root with `dockerd` installed, it starts a
# throwaway engine whose data, sockets and state all live in one folder under
# /tmp (vfs storage, so it needs no overlay support), and waits until it answers.
# It runs with --live-restore, so its containers keep running (and serving)
# while it restarts, as a production engine configured that way would.
# `stop` tears down only an engine this script started: it is identified by the
# folder in DOCKHAND_ENGINE_DIR, which holds a marker file and the engine's pid.
# Messages go to stderr; stdout carries only the `export` lines for `eval`.
set -euo pipefail

say() { echo "engine: $*" >&2; }

answers() { timeout 10 docker info >/dev/null 2>&1; }

# Mounts a dead engine may leave under its folder (container shm, netns).
unmount_under() {
    local dir=$1
    awk -v d="$dir/" 'index($2, d) == 1 { print $2 }' /proc/self/mounts |
        sort -r | while read -r mount; do umount -l "$mount" 2>/dev/null || true; done
}

# Folders of throwaway engines whose process is gone (a run that was killed).
sweep_stale() {
    local dir
    for dir in /tmp/dhe.*; do
        [ -f "$dir/started-by-dockhand" ] || continue
        if [ -f "$dir/pid" ] && kill -0 "$(cat "$dir/pid")" 2>/dev/null; then
            continue
        fi
        say "removing the folder of a stopped engine: $dir"
        unmount_under "$dir"
        rm -rf "$dir" 2>/dev/null || true
    done
}

# launch DIR: dockerd with everything under DIR, until it answers.
launch() {
    local dir=$1
    local host="unix://$dir/docker.sock"
    setsid dockerd \
        --storage-driver=vfs \
        --live-restore \
        --data-root "$dir/data" \
        --exec-root "$dir/exec" \
        -H "$host" \
        --pidfile "$dir/pid" \
        </dev/null >>"$dir/dockerd.log" 2>&1 &
    local pid=$!
    echo "$pid" >"$dir/launcher-pid"
    local waited=0
    until DOCKER_HOST=$host answers; do
        if ! kill -0 "$pid" 2>/dev/null; then
            say "dockerd exited while starting; the end of its log ($dir/dockerd.log):"
            tail -n 20 "$dir/dockerd.log" >&2
            return 1
        fi
        if [ "$waited" -ge 60 ]; then
            say "dockerd did not answer within 30 s; the end of its log:"
            tail -n 20 "$dir/dockerd.log" >&2
            return 1
        fi
        sleep 0.5
        waited=$((waited + 1))
    done
    say "engine ready at $host ($(DOCKER_HOST=$host docker version --format '{{.Server.Version}}'))"
}

# ours: DOCKHAND_ENGINE_DIR names a folder this script made.
ours() {
    [ -n "${DOCKHAND_ENGINE_DIR:-}" ] && [ -f "$DOCKHAND_ENGINE_DIR/started-by-dockhand" ]
}

# halt DIR: dockerd gone (SIGTERM, SIGKILL after 30 s); containers stay (live-restore).
halt() {
    local dir=$1 pid=""
    if [ -f "$dir/pid" ]; then
        pid=$(cat "$dir/pid")
    elif [ -f "$dir/launcher-pid" ]; then
        pid=$(cat "$dir/launcher-pid")
    fi
    if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
        kill -TERM "$pid" 2>/dev/null || true
        local waited=0
        while kill -0 "$pid" 2>/dev/null && [ "$waited" -lt 60 ]; do
            sleep 0.5
            waited=$((waited + 1))
        done
        if kill -0 "$pid" 2>/dev/null; then
            say "dockerd did not stop within 30 s; killing it"
            kill -KILL "$pid" 2>/dev/null || true
        fi
    fi
}

start() {
    if ! command -v docker >/dev/null; then
        say "the docker CLI is not installed (Debian: apt-get install docker.io)"
        exit 1
    fi
    if [ -n "${DOCKER_HOST:-}" ]; then
        if answers; then
            say "using the engine at DOCKER_HOST=$DOCKER_HOST"
            echo "export DOCKER_HOST='$DOCKER_HOST'"
            return
        fi
        say "DOCKER_HOST=$DOCKER_HOST is set but no engine answers there"
        exit 1
    fi
    if answers; then
        say "using the engine at the default socket"
        echo "export DOCKER_HOST='unix:///var/run/docker.sock'"
        return
    fi
    if [ "$(id -u)" != 0 ] || ! command -v dockerd >/dev/null; then
        say "no Docker engine answers, and a throwaway one needs root and dockerd"
        say "(Debian: apt-get install docker.io; or start Docker and set DOCKER_HOST)"
        exit 1
    fi

    sweep_stale
    # Short: the engine's sockets live below it, and a unix socket path must
    # fit in 108 bytes.
    local dir
    dir=$(mktemp -d /tmp/dhe.XXXXXX)
    touch "$dir/started-by-dockhand"
    say "no engine answers; starting a throwaway dockerd in $dir"
    if ! launch "$dir"; then
        DOCKHAND_ENGINE_DIR=$dir stop
        exit 1
    fi
    echo "export DOCKER_HOST='unix://$dir/docker.sock'"
    echo "export DOCKHAND_ENGINE_DIR='$dir'"
}

stop() {
    ours || return 0 # not ours: leave it alone
    local dir=$DOCKHAND_ENGINE_DIR
    local host="unix://$dir/docker.sock"
    if DOCKER_HOST=$host answers; then
        # With --live-restore, containers would outlive the engine.
        local ids
        ids=$(DOCKER_HOST=$host docker ps -aq 2>/dev/null || true)
        if [ -n "$ids" ]; then
            # shellcheck disable=SC2086 # one id a word
            DOCKER_HOST=$host docker rm -f -v $ids >/dev/null 2>&1 || true
        fi
    fi
    say "stopping the throwaway engine in $dir"
    halt "$dir"
    # The containerd that dockerd started for itself, should it outlive it.
    local containerd_pid="$dir/exec/containerd/containerd.pid"
    if [ -f "$containerd_pid" ] && kill -0 "$(cat "$containerd_pid")" 2>/dev/null; then
        kill -TERM "$(cat "$containerd_pid")" 2>/dev/null || true
    fi
    unmount_under "$dir"
    rm -rf "$dir" 2>/dev/null || say "could not remove all of $dir"
}

restart() {
    if ! ours; then
        say "restart: the engine at ${DOCKER_HOST:-the default socket} is not one this script started"
        exit 3
    fi
    say "restarting the throwaway engine in $DOCKHAND_ENGINE_DIR"
    halt "$DOCKHAND_ENGINE_DIR"
    launch "$DOCKHAND_ENGINE_DIR"
}

case "${1:-}" in
start) start ;;
stop) stop ;;
restart) restart ;;
*)
    echo "usage: $0 start|stop|restart" >&2
    exit 2
    ;;
esac
