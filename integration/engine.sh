#!/usr/bin/env bash
# A Docker engine for the integration suite.
#
#   eval "$(integration/engine.sh start)"   # exports DOCKER_HOST (and DOCKHAND_ENGINE_DIR)
#   integration/engine.sh stop              # stops the engine `start` started, if any
#   integration/engine.sh restart           # restarts that engine (a daemon restart test)
#   eval "$(integration/engine.sh start-swarm)"  # exports DOCKHAND_SWARM_HOST (and _DIR)
#   integration/engine.sh stop-swarm        # leaves the swarm and stops that engine
#
# `start` uses the engine at DOCKER_HOST, or at the default socket, when `docker
# info` answers. Otherwise, as root with `dockerd` installed, it starts a
# throwaway engine whose data, sockets and state all live in one folder under
# /tmp (vfs storage, so it needs no overlay support), and waits until it answers.
# It runs with --live-restore, so its containers keep running (and serving)
# while it restarts, as a production engine configured that way would.
# `stop` tears down only an engine this script started: it is identified by the
# folder in DOCKHAND_ENGINE_DIR, which holds a marker file and the engine's pid.
# The folder also names the process the engine serves (DOCKHAND_ENGINE_OWNER,
# which run.sh sets to itself, else the caller): when that process is gone (a
# killed run; the engine outlives it), the next start stops the engine and
# removes its folder. The engine holds none of its caller's descriptors, so
# it never keeps the suite's lock (/tmp/dockhand-docker.lock) held.
#
# `start-swarm` starts a second throwaway engine, a one-node swarm manager, for
# the swarm scenarios: swarm mode refuses --live-restore, so the first engine
# cannot be it. It lives in its own folder (/tmp/dhs.*) with its own socket and
# touches nothing of the first: no default bridge, no iptables rules, address
# pools of its own (10.231.0.0/16 local, 10.232.0.0/16 overlay), and the
# images dockhand:test and dockhand-testbackend:test copied from the engine at
# DOCKER_HOST. `stop-swarm` leaves the swarm, then stops it as `stop` does.
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

# still_runs FILE: the process whose pid FILE holds runs.
still_runs() { [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

# sweep_stale GLOB TEAR_DOWN: throwaway engines in folders matching GLOB that
# belong to a run that is gone (its owner or its dockerd no longer runs, as
# when the run was killed) are torn down with TEAR_DOWN DIR. A folder without
# an owner (made by an older version of this script) is judged by its dockerd.
sweep_stale() {
    local glob=$1 tear_down=$2 dir
    for dir in $glob; do
        [ -f "$dir/started-by-dockhand" ] || continue
        if still_runs "$dir/pid" && { [ ! -f "$dir/owner-pid" ] || still_runs "$dir/owner-pid"; }; then
            continue
        fi
        say "removing the engine of a run that is gone: $dir"
        "$tear_down" "$dir"
    done
}

# mark_ours DIR: DIR is a throwaway engine's folder, owned by
# DOCKHAND_ENGINE_OWNER (run.sh), else by the caller.
mark_ours() {
    touch "$1/started-by-dockhand"
    echo "${DOCKHAND_ENGINE_OWNER:-$PPID}" >"$1/owner-pid"
}

# Closes every descriptor above 2 of this shell. An engine outlives a killed
# run, and one it inherited (the lock of `flock /tmp/dockhand-docker.lock
# integration/run.sh`) would stay held as long as it runs.
close_inherited_descriptors() {
    local fd
    for fd in /proc/$BASHPID/fd/*; do
        fd=${fd##*/}
        [ "$fd" -gt 2 ] && eval "exec $fd>&-"
    done
    return 0
}

# launch DIR FLAGS...: dockerd with everything under DIR and FLAGS, until it answers.
launch() {
    local dir=$1
    shift
    local host="unix://$dir/docker.sock"
    (
        close_inherited_descriptors
        exec setsid dockerd \
            "$@" \
            --storage-driver=vfs \
            --data-root "$dir/data" \
            --exec-root "$dir/exec" \
            -H "$host" \
            --pidfile "$dir/pid"
    ) </dev/null >>"$dir/dockerd.log" 2>&1 &
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

    sweep_stale '/tmp/dhe.*' tear_down
    # Short: the engine's sockets live below it, and a unix socket path must
    # fit in 108 bytes.
    local dir
    dir=$(mktemp -d /tmp/dhe.XXXXXX)
    mark_ours "$dir"
    say "no engine answers; starting a throwaway dockerd in $dir"
    if ! launch "$dir" --live-restore; then
        DOCKHAND_ENGINE_DIR=$dir stop
        exit 1
    fi
    echo "export DOCKER_HOST='unix://$dir/docker.sock'"
    echo "export DOCKHAND_ENGINE_DIR='$dir'"
}

stop() {
    ours || return 0 # not ours: leave it alone
    say "stopping the throwaway engine in $DOCKHAND_ENGINE_DIR"
    tear_down "$DOCKHAND_ENGINE_DIR"
}

# tear_down DIR: the engine in DIR stopped, its containers gone, DIR removed.
tear_down() {
    local dir=$1
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
    launch "$DOCKHAND_ENGINE_DIR" --live-restore
}

# ---------------------------------------------------------------------------
# The swarm engine

# Address pools of the swarm engine's own: its local networks (the bridge
# docker_gwbridge, which reaches its containers' published ports) and its
# overlays. The first engine's bridges come from Docker's defaults (172.17-31,
# 192.168), so the two never hand out the same subnet.
swarm_local_pool=10.231.0.0/16
swarm_overlay_pool=10.232.0.0/16
# docker_gwbridge's subnet, made before `swarm init` so that it is known: its
# gateway, an address of this machine on a bridge of the swarm engine's own,
# is what the swarm advertises and listens on (loopback is refused).
swarm_gateway_subnet=10.231.255.0/24
swarm_gateway=10.231.255.1

# swarm_ours: DOCKHAND_SWARM_DIR names a folder this script made.
swarm_ours() {
    [ -n "${DOCKHAND_SWARM_DIR:-}" ] && [ -f "$DOCKHAND_SWARM_DIR/started-by-dockhand" ]
}

# The host interface of a swarm engine's docker_gwbridge: named after its
# folder, so a sweep removes exactly the one a dead engine left.
gateway_bridge() { echo "dhs-${1#/tmp/dhs.}"; }

# tear_down_swarm DIR: out of the swarm, then as any engine; its bridge removed
# (an engine leaves its networks' interfaces behind when it stops).
tear_down_swarm() {
    local dir=$1
    if DOCKER_HOST="unix://$dir/docker.sock" answers; then
        DOCKER_HOST="unix://$dir/docker.sock" timeout 30 docker swarm leave --force >/dev/null 2>&1 ||
            say "could not leave the swarm of $dir"
    fi
    tear_down "$dir"
    ip link delete "$(gateway_bridge "$dir")" 2>/dev/null || true
}

# swarm_init HOST DIR: docker_gwbridge on the engine's own subnet, then a
# one-node swarm advertised on its gateway.
swarm_init() {
    local host=$1 dir=$2
    DOCKER_HOST=$host docker network create \
        --subnet "$swarm_gateway_subnet" \
        --opt com.docker.network.bridge.name="$(gateway_bridge "$dir")" \
        --opt com.docker.network.bridge.enable_icc=false \
        --opt com.docker.network.bridge.enable_ip_masquerade=false \
        docker_gwbridge >/dev/null
    DOCKER_HOST=$host docker swarm init \
        --advertise-addr "$swarm_gateway" \
        --listen-addr "$swarm_gateway:2377" \
        --default-addr-pool "$swarm_overlay_pool" \
        --default-addr-pool-mask-length 24 >/dev/null
}

# The suite's images, from the first engine (DOCKER_HOST) into HOST.
load_images() {
    local host=$1
    docker save dockhand:test dockhand-testbackend:test | DOCKER_HOST=$host docker load >/dev/null
}

start_swarm() {
    if [ "$(id -u)" != 0 ] || ! command -v dockerd >/dev/null; then
        say "the swarm engine is a throwaway dockerd: it needs root and dockerd"
        exit 1
    fi
    # Also frees the addresses of a swarm engine a killed run left.
    sweep_stale '/tmp/dhs.*' tear_down_swarm
    local pool
    for pool in "${swarm_local_pool%.0.0/16}." "${swarm_overlay_pool%.0.0/16}."; do
        if ip -4 route show | grep -q "^$pool"; then
            say "this machine already routes $pool*, the swarm engine's address pool:"
            ip -4 route show | grep "^$pool" >&2
            exit 1
        fi
    done
    local dir
    dir=$(mktemp -d /tmp/dhs.XXXXXX)
    mark_ours "$dir"
    local host="unix://$dir/docker.sock"
    say "starting the swarm engine in $dir"
    # No --live-restore: swarm mode refuses it. No default bridge and no
    # iptables rules: those belong to the first engine.
    if ! launch "$dir" --bridge=none --iptables=false \
        --default-address-pool "base=$swarm_local_pool,size=24"; then
        tear_down_swarm "$dir"
        exit 1
    fi
    if ! swarm_init "$host" "$dir" || ! load_images "$host"; then
        say "the swarm engine did not become a manager with the images; the end of its log:"
        tail -n 20 "$dir/dockerd.log" >&2
        tear_down_swarm "$dir"
        exit 1
    fi
    say "swarm manager ready at $host"
    echo "export DOCKHAND_SWARM_HOST='$host'"
    echo "export DOCKHAND_SWARM_DIR='$dir'"
}

stop_swarm() {
    swarm_ours || return 0 # not ours: leave it alone
    say "stopping the swarm engine in $DOCKHAND_SWARM_DIR"
    tear_down_swarm "$DOCKHAND_SWARM_DIR"
}

case "${1:-}" in
start) start ;;
stop) stop ;;
restart) restart ;;
start-swarm) start_swarm ;;
stop-swarm) stop_swarm ;;
*)
    echo "usage: $0 start|stop|restart|start-swarm|stop-swarm" >&2
    exit 2
    ;;
esac
