# Build: release binary with the locked dependency tree.
FROM rust:1.95-bookworm AS build
WORKDIR /src
COPY Cargo.toml Cargo.lock ./
COPY src ./src
RUN cargo build --release --locked --bin akritas

# Run: small Debian base (git for workspaces, CA roots for outbound TLS), non-root.
FROM debian:bookworm-slim
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates git \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --uid 10001 --user-group --home-dir /var/lib/akritas --create-home --shell /usr/sbin/nologin akritas \
    && mkdir -p /etc/akritas/resources
COPY --from=build /src/target/release/akritas /usr/local/bin/akritas
COPY instructions /usr/share/akritas/instructions
COPY skills /usr/share/akritas/skills
COPY config/examples/server.container.json /etc/akritas/server.json
ENV AKRITAS_CONFIG=/etc/akritas/server.json
USER 10001:10001
WORKDIR /var/lib/akritas
EXPOSE 8090
# /health needs no credentials; bash's /dev/tcp avoids shipping curl.
HEALTHCHECK --interval=30s --timeout=5s --start-period=10s --retries=3 \
    CMD ["bash", "-c", "exec 3<>/dev/tcp/127.0.0.1/8090 && printf 'GET /health HTTP/1.0\\r\\n\\r\\n' >&3 && grep -q '\"status\":\"ok\"' <&3"]
ENTRYPOINT ["akritas"]
CMD ["serve"]
