# syntax=docker/dockerfile:1
# Where the binary comes from: `build` (the default) compiles it below; `context` takes
# `akritas` from the build context, a binary built outside (e2e/release.sh builds it, and
# e2e/image.sh assembles that context): the stage not named is never built.
ARG BINARY_FROM=build

# Build: release binary with the locked dependency tree. The build context is
# the repository filtered by .dockerignore, so every path the manifest names
# (benches, workspace members, path dependencies) is present.
FROM rust:1.95-bookworm AS build
WORKDIR /src
COPY . .
# The registry and target directories are cache mounts: rebuilds reuse compiled
# dependencies. A cache mount is not part of the image, so the binary is copied
# out of it.
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/usr/local/cargo/git/db \
    --mount=type=cache,target=/src/target,sharing=locked \
    cargo build --release --locked --bin akritas \
    && install -D -m 0755 target/release/akritas /out/akritas

# A binary built outside, from the context.
FROM scratch AS context
COPY akritas /out/akritas

FROM ${BINARY_FROM} AS binary

# Run: small Debian base (CA roots for outbound TLS), non-root. Workspaces use
# libgit2 (linked in), so no git CLI is installed.
FROM debian:bookworm-slim
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --uid 10001 --user-group --home-dir /var/lib/akritas --create-home --shell /usr/sbin/nologin akritas \
    && mkdir -p /etc/akritas/resources
COPY --from=binary /out/akritas /usr/local/bin/akritas
COPY instructions /usr/share/akritas/instructions
COPY skills /usr/share/akritas/skills
COPY config/examples/server.container.json /etc/akritas/server.json
ENV AKRITAS_CONFIG=/etc/akritas/server.json
USER 10001:10001
WORKDIR /var/lib/akritas
EXPOSE 8090
# Liveness, as the chart's livenessProbe: /health answers 200 while the process serves, whatever
# its status (a resource that is not Ready makes it "degraded", not unhealthy). It needs no
# credentials; bash's /dev/tcp avoids shipping curl.
HEALTHCHECK --interval=30s --timeout=5s --start-period=10s --retries=3 \
    CMD ["bash", "-c", "exec 3<>/dev/tcp/127.0.0.1/8090 && printf 'GET /health HTTP/1.0\\r\\n\\r\\n' >&3 && head -n 1 <&3 | grep -q '^HTTP/1.[01] 200 '"]
ENTRYPOINT ["akritas"]
CMD ["serve"]
