#!/usr/bin/env bash
# Builds the real kube-apiserver, etcd and helm from their Go modules (versions pinned in
# e2e/kube/go.mod and e2e/helm/go.mod, cache key in e2e/kube/VERSION) into
#   ${AKRITAS_E2E_BIN:-<cache>/e2e-bin}/<VERSION>/   (<cache>: what e2e/cache.sh prints)
# Idempotent: a binary that is already there is not rebuilt. Prints the three paths.
# testkit/src/kube_api.rs looks for the binaries in the same place.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
export PATH="$PATH:/usr/local/go/bin"

key="$(tr -d '[:space:]' <"$here/VERSION")"
out="${AKRITAS_E2E_BIN:-$("$repo/e2e/cache.sh")/e2e-bin}/$key"
mkdir -p "$out"

# Two cores: keep the compiler's parallelism (and so its memory, about 1.8 GB peak) bounded.
# -mod=readonly: go.mod/go.sum are complete (go mod tidy); a build never edits them.
export CGO_ENABLED=0 GOFLAGS="-mod=readonly -buildvcs=false" GOMAXPROCS="${GOMAXPROCS:-2}"
build_flags=(-p 2 -trimpath)

mod_version() { # module directory, module path
  (cd "$1" && go list -m -f '{{.Version}}' "$2")
}

# The cache key must name what go.mod pins, or a stale binary would be reused.
kube_version="$(mod_version "$here" k8s.io/kubernetes)"
etcd_version="$(mod_version "$here" go.etcd.io/etcd/server/v3)"
helm_version="$(mod_version "$here/../helm" helm.sh/helm/v3)"
client_go="$(mod_version "$here/../helm" k8s.io/client-go)"
expected="kube-${kube_version}_etcd-${etcd_version}_helm-${helm_version}"
if [ "$key" != "$expected" ]; then
  echo "e2e/kube/VERSION says '$key' but go.mod pins '$expected'; update e2e/kube/VERSION" >&2
  exit 1
fi

build() { # name, module directory, ldflags, package
  local name="$1" dir="$2" ldflags="$3" pkg="$4"
  if [ -x "$out/$name" ]; then
    echo "$out/$name"
    return
  fi
  local started=$SECONDS
  echo "building $name ($pkg) ..." >&2
  (cd "$dir" && go build "${build_flags[@]}" -ldflags "$ldflags" -o "$out/.$name.tmp" "$pkg")
  mv "$out/.$name.tmp" "$out/$name"
  echo "built $name in $((SECONDS - started)) s ($(du -h "$out/$name" | cut -f1))" >&2
  echo "$out/$name"
}

kube_minor="$(echo "$kube_version" | cut -d. -f2)"
cv=k8s.io/component-base/version
build kube-apiserver "$here" "-s -w -X $cv.gitVersion=$kube_version -X $cv.gitMajor=1 -X $cv.gitMinor=$kube_minor \
  -X $cv.gitTreeState=clean -X $cv.buildDate=1970-01-01T00:00:00Z" k8s.io/kubernetes/cmd/kube-apiserver

# In etcd 3.5 the server module's root package is etcd's main.
build etcd "$here" "-s -w" go.etcd.io/etcd/server/v3

# The same ldflags as helm's Makefile: its version, and the Kubernetes version that `helm
# template`/`helm lint` assume (client-go v0.X.Y means Kubernetes 1.X).
hv=helm.sh/helm/v3
k8s_minor="$(echo "$client_go" | cut -d. -f2)"
build helm "$here/../helm" "-s -w -X $hv/internal/version.version=$helm_version -X $hv/internal/version.gitTreeState=clean \
  -X $hv/pkg/lint/rules.k8sVersionMajor=1 -X $hv/pkg/lint/rules.k8sVersionMinor=$k8s_minor \
  -X $hv/pkg/chartutil.k8sVersionMajor=1 -X $hv/pkg/chartutil.k8sVersionMinor=$k8s_minor" "$hv/cmd/helm"

# kubectl from the same Kubernetes release (the tests use it when $KUBECTL is unset).
build kubectl "$here" "-s -w -X $cv.gitVersion=$kube_version -X $cv.gitMajor=1 -X $cv.gitMinor=$kube_minor \
  -X $cv.gitTreeState=clean -X $cv.buildDate=1970-01-01T00:00:00Z" k8s.io/kubernetes/cmd/kubectl
