# What the scripts that load dockhand on loopback share (sourced, not run):
# bench/instructions.sh, bench/paired.sh, pgo/build.sh and bench/run.sh.
#
#   scratch_dir            WORK: a temp dir, removed on exit with every pid
#                          in PIDS stopped first
#   backend_conf DIR PORT [LOCATION...]
#                          an nginx configuration for a backend living in
#                          DIR: one process, `return 200` at / on
#                          127.0.0.1:PORT, and the extra locations given
#   proxy_nginx_conf DIR PORT BACKEND_PORT
#                          an nginx configuration for a proxy living in
#                          DIR: one worker on 127.0.0.1:PORT, keeping
#                          upstream connections to the backend
#   proxy_haproxy_conf BACKEND MAXCONN BIND...
#                          a HAProxy configuration for a proxy: one
#                          thread, room for MAXCONN connections, a bind
#                          line for each BIND, `http-reuse always` to
#                          BACKEND (host:port)
#   loopback_lua FILE      a wrk script that resolves every host to 127.0.0.1
#   routes_json FILLER HOST BACKEND [REDIRECT]
#                          a routes file: HOST after FILLER other hosts
#                          (h{i}.scale.test), all to BACKEND; REDIRECT
#                          "off" sets HOST's https_redirect to false

# A temp dir for the caller's files (WORK) and the pids of what it starts
# (PIDS), both gone when the shell exits, however it exits.
scratch_dir() {
    WORK=$(mktemp -d)
    PIDS=()
    trap stop_scratch EXIT
}

stop_scratch() {
    local pid
    for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$WORK"
}

# What both configurations open with: one process (no master, one worker),
# so that it reads a temp dir as its owner, files in DIR, and kept client
# connections that last as long as the loads; the http block is left open.
nginx_opening() {
    cat <<CONF
worker_processes 1;
master_process off;
daemon off;
pid $1/nginx.pid;
error_log $1/logs/error.log warn;
events { worker_connections 4096; }
http {
    access_log off;
    keepalive_requests 100000000;
CONF
}

backend_conf() {
    local dir=$1 port=$2 location
    shift 2
    nginx_opening "$dir"
    cat <<CONF
    server {
        listen 127.0.0.1:$port;
        location / { return 200 "hello from the backend\n"; }
CONF
    for location in "$@"; do echo "        $location"; done
    echo "    }"
    echo "}"
}

# nginx as the proxy a benchmark compares dockhand with: one process, kept
# upstream connections (as many as 4,096 clients need), access log off.
proxy_nginx_conf() {
    local dir=$1 port=$2 backend_port=$3
    nginx_opening "$dir"
    cat <<CONF
    upstream backend { server 127.0.0.1:$backend_port; keepalive 1024; }
    server {
        listen 127.0.0.1:$port;
        location / {
            proxy_pass http://backend;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
        }
    }
}
CONF
}

# HAProxy as the proxy a benchmark compares dockhand with: one thread, kept
# upstream connections (`http-reuse always`), room for MAXCONN connections,
# in front of BACKEND (host:port); each further argument is a `bind` line.
proxy_haproxy_conf() {
    local backend=$1 maxconn=$2 bind
    shift 2
    cat <<CONF
global
    nbthread 1
    maxconn $maxconn
    # HAProxy sizes its descriptors for a server connection per client one;
    # idle clients need far fewer, so a lower system limit is not fatal.
    no strict-limits
defaults
    mode http
    maxconn $maxconn
    timeout connect 5s
    timeout client 60s
    timeout server 60s
    timeout http-keep-alive 60s
    http-reuse always
frontend proxy
CONF
    for bind in "$@"; do echo "    bind $bind"; done
    cat <<CONF
    default_backend backend
backend backend
    server backend $backend
CONF
}

# wrk connects to the address its URL's host resolves to and sends that host
# as SNI: with this, a URL naming a test host reaches 127.0.0.1 without
# touching /etc/hosts. There is no request() function, so wrk's requests
# stay static.
loopback_lua() {
    cat >"$1" <<'EOF'
wrk.resolve = function(host, service)
   wrk.addrs = wrk.lookup("127.0.0.1", service)
end
EOF
}

# The large table of the benchmark's scale row, and of the profile's training.
routes_json() {
    awk -v filler="$1" -v host="$2" -v backend="$3" -v redirect="${4:-}" 'BEGIN {
        location = "\"location\":{\"/\":{\"upstream\":{\"" backend "\":{}}}}"
        printf "{\"host\":{"
        for (i = 0; i < filler; i++) printf "\"h%d.scale.test\":{%s},", i, location
        printf "\"%s\":{%s%s}}}\n", host, (redirect == "off" ? "\"https_redirect\":false," : ""), location
    }'
}
