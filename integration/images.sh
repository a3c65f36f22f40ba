#!/usr/bin/env bash
# Builds the integration suite's two images from local static binaries; nothing
# is pulled. Needs DOCKER_HOST (or the default socket) to reach an engine.
#
#   dockhand:test               /dockhand,    ENTRYPOINT ["/dockhand"]
#   dockhand-testbackend:test   /testbackend, ENTRYPOINT ["/testbackend"], a
#                               HEALTHCHECK on /healthz every second
#   dockhand-socketproxy:test   Debian's nginx (nginx-light), the libraries
#                               `ldd` lists and integration/socket-proxy/nginx.conf:
#                               a read-only Docker API on port 2375
#
# All are `FROM scratch` with the binary alone in the build context (and
# nginx's libraries and configuration). Re-running
# with nothing changed takes seconds: cargo has nothing to do and the engine's
# layer cache matches the binaries' contents.
set -euo pipefail
cd "$(dirname "$0")/.."

target=x86_64-unknown-linux-gnu
# `integration`: release without fat LTO (see Cargo.toml), so a clean build stays short.
profile=${DOCKHAND_IMAGE_PROFILE:-integration}
target_dir=${CARGO_TARGET_DIR:-target}
bin_dir="$target_dir/$target/$profile"
[ "$profile" = dev ] && bin_dir="$target_dir/$target/debug"

say() { echo "images: $*" >&2; }

say "building static binaries (profile $profile, target $target)"
# The explicit --target keeps RUSTFLAGS away from build scripts and proc-macros,
# which must stay dynamic; only the two binaries are linked statically.
RUSTFLAGS='-C target-feature=+crt-static' \
    cargo build --locked --profile "$profile" --target "$target" \
    -p dockhand -p dockhand-testbackend

for bin in dockhand testbackend; do
    if readelf -lW "$bin_dir/$bin" | grep -q 'program interpreter'; then
        say "$bin_dir/$bin is dynamically linked; a FROM scratch image cannot run it"
        exit 1
    fi
done

contexts="$target_dir/integration-images"

# build IMAGE BINARY DOCKERFILE: an image from a context holding only BINARY.
build() {
    local image=$1 bin=$2 dockerfile=$3
    local context="$contexts/$bin"
    rm -rf "$context"
    mkdir -p "$context"
    cp "$bin_dir/$bin" "$context/$bin"
    printf '%s\n' "$dockerfile" >"$context/Dockerfile"
    say "docker build $image"
    # The classic builder: present in every engine, no buildx plugin needed.
    if ! DOCKER_BUILDKIT=0 docker build --quiet --tag "$image" "$context" >"$context.log" 2>&1; then
        cat "$context.log" >&2
        say "building $image failed"
        exit 1
    fi
}

build dockhand:test dockhand '
FROM scratch
COPY dockhand /dockhand
EXPOSE 80
ENTRYPOINT ["/dockhand"]'

build dockhand-testbackend:test testbackend '
FROM scratch
COPY testbackend /testbackend
EXPOSE 8080
HEALTHCHECK --interval=1s --timeout=3s --retries=2 \
    CMD ["/testbackend", "probe", "http://127.0.0.1:8080/healthz"]
ENTRYPOINT ["/testbackend"]'

# The socket proxy: nginx as this machine has it, with what it loads.
nginx=$(command -v nginx || echo /usr/sbin/nginx)
if [ ! -x "$nginx" ]; then
    say "no nginx: install nginx-light (the socket proxy image is built from it)"
    exit 1
fi
context="$contexts/socket-proxy"
rm -rf "$context"
mkdir -p "$context/root/etc/nginx" "$context/root/tmp" "$context/root/var/log/nginx" \
    "$context/root/var/lib/nginx"
cp --parents "$nginx" "$context/root"
for lib in $(ldd "$nginx" | awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// { print $1 }'); do
    cp --parents --dereference "$lib" "$context/root"
done
cp integration/socket-proxy/nginx.conf "$context/root/etc/nginx/nginx.conf"
# `user root;` is looked up by name.
printf 'root:x:0:0:root:/:/nonexistent\n' >"$context/root/etc/passwd"
printf 'root:x:0:\n' >"$context/root/etc/group"
chmod 1777 "$context/root/tmp"
cat >"$context/Dockerfile" <<DOCKERFILE
FROM scratch
COPY root/ /
EXPOSE 2375
ENTRYPOINT ["$nginx", "-e", "stderr", "-c", "/etc/nginx/nginx.conf", "-g", "daemon off;"]
DOCKERFILE
say "docker build dockhand-socketproxy:test"
if ! DOCKER_BUILDKIT=0 docker build --quiet --tag dockhand-socketproxy:test "$context" >"$context.log" 2>&1; then
    cat "$context.log" >&2
    say "building dockhand-socketproxy:test failed"
    exit 1
fi

say "ready: dockhand:test, dockhand-testbackend:test, dockhand-socketproxy:test"
