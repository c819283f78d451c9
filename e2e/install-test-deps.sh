#!/usr/bin/env bash
# Installs the real third-party programs the test suite drives. Idempotent; run from
# anywhere. Debian packages need root (CI and our machines run as root).
set -euo pipefail
cd "$(dirname "$0")/.."

need_apt=()
command -v victoria-metrics >/dev/null 2>&1 || need_apt+=(victoria-metrics)
command -v openssl >/dev/null 2>&1 || need_apt+=(openssl)
command -v prometheus >/dev/null 2>&1 || need_apt+=(prometheus)
command -v prometheus-alertmanager >/dev/null 2>&1 || need_apt+=(prometheus-alertmanager)
# The sample ValidatorProfile's program (its preflight decides the profile's readiness), and
# the validator the change pipeline's end-to-end tests run.
command -v yamllint >/dev/null 2>&1 || need_apt+=(yamllint)
# Git workspaces: the tests build repositories with git and serve them with git http-backend.
{ command -v git >/dev/null 2>&1 && [ -x "$(git --exec-path)/git-http-backend" ]; } || need_apt+=(git)
# The web UI's browser tests drive Debian's Chromium with playwright-core.
command -v chromium >/dev/null 2>&1 || need_apt+=(chromium)
command -v python3 >/dev/null 2>&1 || need_apt+=(python3 python3-venv)
# The Ollama smoke builds Ollama's ggml CPU backends (e2e/real-models.sh).
command -v cmake >/dev/null 2>&1 || need_apt+=(cmake)
command -v g++ >/dev/null 2>&1 || need_apt+=(g++)
# The database backend of the durable stores: the tests start their own PostgreSQL clusters
# (initdb and pg_ctl as the package's `postgres` user; the package starts none by itself here).
compgen -G "/usr/lib/postgresql/*/bin/pg_ctl" >/dev/null || need_apt+=(postgresql)
# The validator sandbox in the chart's container: podman builds the image from a debootstrap
# base (e2e/sandbox-image.sh) and runs it, with no registry.
command -v podman >/dev/null 2>&1 || need_apt+=(podman runc conmon catatonit fuse-overlayfs uidmap slirp4netns)
command -v buildah >/dev/null 2>&1 || need_apt+=(buildah)
command -v debootstrap >/dev/null 2>&1 || need_apt+=(debootstrap)
command -v objcopy >/dev/null 2>&1 || need_apt+=(binutils)
# e2e/release.sh profiles the release build's `ask` with callgrind to lay its code out.
command -v valgrind >/dev/null 2>&1 || need_apt+=(valgrind)
if [ ${#need_apt[@]} -gt 0 ]; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_apt[@]}"
fi

everything=target/npm/node_modules/@modelcontextprotocol/server-everything/dist/index.js
if [ ! -f "$everything" ]; then
  mkdir -p target/npm
  npm install --silent --no-audit --no-fund --prefix target/npm @modelcontextprotocol/server-everything@2026.8.31
fi

playwright=target/npm/node_modules/playwright-core/package.json
PLAYWRIGHT_VERSION=1.65.1
if [ ! -f "$playwright" ] || ! grep -q "\"version\": \"$PLAYWRIGHT_VERSION\"" "$playwright"; then
  mkdir -p target/npm
  npm install --silent --no-audit --no-fund --prefix target/npm "playwright-core@$PLAYWRIGHT_VERSION"
fi

# Python clients (openai, mcp, schemathesis) in a venv under target/py, reinstalled when
# e2e/python-requirements.txt changes.
stamp=target/py/.requirements.sha256
want=$(sha256sum e2e/python-requirements.txt | cut -d' ' -f1)
if [ ! -x target/py/bin/python ] || [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  python3 -m venv target/py
  target/py/bin/pip install --quiet --disable-pip-version-check -r e2e/python-requirements.txt
  echo "$want" >"$stamp"
fi

# etcd, kube-apiserver and helm built from their Go modules (testkit/src/kube_api.rs). Cached in
# <cache>/e2e-bin/<version>/ (<cache>: what e2e/cache.sh prints, outside the clone; or
# $AKRITAS_E2E_BIN); the first build takes about 12 minutes on two
# cores, later ones only link from Go's build cache (about 15 s) or are skipped.
e2e/kube/build.sh >/dev/null
