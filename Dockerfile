# dockhand from source: one static binary in an image that holds nothing else
# but the CA certificates (for upstreams reached over TLS).
#
#   docker build -t dockhand .
#   docker run -d --name dockhand -p 80:80 -p 443:443 \
#     -v /var/run/docker.sock:/var/run/docker.sock:ro \
#     --group-add "$(stat -c %g /var/run/docker.sock)" \
#     dockhand
#
# It runs as user 65534 (nobody). The Docker socket usually belongs to root and
# the `docker` group with mode 0660, so the container needs that group id added
# to read it: `--group-add <gid>` as above, or in compose
#
#   services:
#     dockhand:
#       image: dockhand
#       group_add: ["${DOCKER_GID:-999}"]   # stat -c %g /var/run/docker.sock
#       volumes: ["/var/run/docker.sock:/var/run/docker.sock:ro"]
#
# dockhand only reads the Docker API (GET calls), so the read-only mount is all
# it needs. Binding ports 80 and 443 as a non-root user works on Docker 20.10
# and later, which let containers bind any port (ip_unprivileged_port_start=0);
# with `network_mode: host` give it `cap_add: [NET_BIND_SERVICE]` or listen on
# ports above 1023.

FROM rust:1-bookworm AS build
# What pgo/build.sh trains the binary with: a backend, two load generators,
# openssl for a throwaway certificate, and llvm-profdata (rustup's llvm-tools).
RUN apt-get update \
 && apt-get install -y --no-install-recommends nginx-light nghttp2-client wrk openssl curl \
 && rm -rf /var/lib/apt/lists/* \
 && rustup component add llvm-tools
WORKDIR /src
COPY . .
# A static glibc binary (crt-static), optimised with a profile of a workload
# served on loopback inside this stage (pgo/build.sh: two release builds,
# about twice as long as one). The explicit --target keeps the flags away
# from build scripts and proc-macros, which must stay dynamic.
RUN target="$(rustc -vV | sed -n 's/^host: //p')" \
 && binary="$(RUSTFLAGS='-C target-feature=+crt-static' pgo/build.sh --target "$target" | tail -1)" \
 && mkdir -p /out/acme \
 && cp "$binary" /out/dockhand

FROM scratch
COPY --from=build /etc/ssl/certs/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
COPY --from=build /out/dockhand /dockhand
# The default --acme-storage, owned by the user dockhand runs as: a fresh named
# volume mounted there takes this owner, so ACME can write its account and
# certificates with no chown step.
COPY --from=build --chown=65534:65534 /out/acme /var/lib/dockhand/acme

# Where the source came from: `docker build --build-arg SOURCE=<repository URL> .`
ARG SOURCE=""
LABEL org.opencontainers.image.title="dockhand" \
      org.opencontainers.image.description="A Docker-label-driven edge reverse proxy" \
      org.opencontainers.image.source="${SOURCE}" \
      org.opencontainers.image.licenses="Apache-2.0"

USER 65534:65534
EXPOSE 80 443
# The image has no shell or curl: the binary asks its own admin listener's
# /readyz (same DOCKHAND_ADMIN_* settings as the server).
HEALTHCHECK --interval=10s --timeout=5s --start-period=5s CMD ["/dockhand", "healthcheck"]
ENTRYPOINT ["/dockhand"]
