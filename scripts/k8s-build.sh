#!/usr/bin/env bash
# Builds the Kubernetes test cluster's programs from their Go modules, once per machine, into a cache outside the
# checkout keyed by their versions (reused by every clone and by CI; never committed): kube-apiserver,
# kube-controller-manager, kube-scheduler, kubelet and etcd at the release that kube-apiserver's own go.mod pins, the
# simulated-GPU device plugin (scripts/k8s/fake-gpu-plugin) and the pod sandbox's pause, all in ONE Go module graph so
# that the Kubernetes packages they share compile once; kwok (fake nodes) in its own, as v0.7.0 does not build against
# the 1.34 libraries (metav1.InitialEventsListBlueprintAnnotationKey is gone from them); Kueue (`kueue`) in its own.
#
#   bash scripts/k8s-build.sh            # the cluster's programs (core); prints the bin folder
#   bash scripts/k8s-build.sh kueue      # Kueue's manager too
#   bash scripts/k8s-build.sh bin        # the bin folder, building nothing (exit 1 if not built)
#
# GPUSCHED_K8S_CACHE (default ~/.cache/gpusched-k8s) holds the programs, Go's build cache and module downloads.
# docs/kubernetes.md "The test cluster" has the measured times.
set -euo pipefail
K8S_VERSION=v1.34.4   # the last release whose kubelet runs on cgroup v1 by default (these machines: v1)
KWOK_VERSION=v0.7.0
KUEUE_VERSION=v0.17.0
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
CACHE="${GPUSCHED_K8S_CACHE:-$HOME/.cache/gpusched-k8s}"
KEY="k8s-$K8S_VERSION-kwok-$KWOK_VERSION-plugin-$(sha256sum "$HERE/k8s/fake-gpu-plugin/main.go" "$HERE/k8s/etcd/main.go" "$HERE/k8s/pause/main.go" | sha256sum | cut -c1-10)"
BIN="$CACHE/$KEY/bin"
KUEUE_BIN="$CACHE/kueue-$KUEUE_VERSION/bin"
CORE=(kube-apiserver kube-controller-manager kube-scheduler kubelet etcd kwok fake-gpu-plugin pause)
export GOCACHE="$CACHE/go-build" GOMODCACHE="$CACHE/go-mod" GOFLAGS=-mod=mod GOTOOLCHAIN="${GOTOOLCHAIN:-local}"
export CGO_ENABLED=0

say() { echo "[k8s-build] $*" >&2; }

built() {
  local dir="$1"; shift
  local p
  for p in "$@"; do [ -x "$dir/$p" ] || return 1; done
}

ldflags() {  # the release in each program's /version, as a release build has it
  local v="$1" minor
  minor="$(echo "$v" | cut -d. -f2)"
  local f
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    f+=" -X $pkg.gitVersion=$v -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor -X $pkg.gitTreeState=clean"
  done
  echo "-s -w$f"
}

build_core() {
  if built "$BIN" "${CORE[@]}"; then echo "$BIN"; return; fi
  command -v go >/dev/null || { say "go is not on PATH: the cluster's programs are built from Go modules"; exit 1; }
  local src="$CACHE/$KEY/src" start=$SECONDS
  rm -rf "$src" && mkdir -p "$src/cmd"
  local p
  for p in fake-gpu-plugin etcd pause; do mkdir -p "$src/cmd/$p" && cp "$HERE/k8s/$p/main.go" "$src/cmd/$p/main.go"; done
  say "resolving k8s.io/kubernetes $K8S_VERSION's modules (its staging modules at ${K8S_VERSION/v1/v0})"
  local gomod
  gomod="$(cd "$src" && go mod download -json "k8s.io/kubernetes@$K8S_VERSION" | python3 -c 'import json,sys; print(json.load(sys.stdin)["GoMod"])')"
  {
    echo "module gpusched.local/k8s-test-cluster"
    echo
    echo "go $(sed -n 's/^go //p' "$gomod")"
    echo
    echo "require k8s.io/kubernetes $K8S_VERSION"
    echo
    # each staging module the release replaces with a local path, at the release's own tag instead
    sed -n 's#^[[:space:]]*\(k8s.io/[a-z0-9-]*\) => ./staging/src/k8s.io/[a-z0-9-]*$#replace \1 => \1 '"${K8S_VERSION/v1/v0}"'#p' "$gomod"
  } > "$src/go.mod"
  (
    cd "$src"
    etcd="$(sed -n 's#^[[:space:]]*go.etcd.io/etcd/server/v3 \(v[0-9.]*\).*#\1#p' "$gomod")"
    go get "k8s.io/kubernetes@$K8S_VERSION" "go.etcd.io/etcd/server/v3@$etcd" "google.golang.org/grpc" >&2
    say "building ${CORE[*]} (one module graph; the first build takes a while on 2 cores)"
    mkdir -p "$CACHE/$KEY/bin.tmp"
    go build -trimpath -ldflags "$(ldflags "$K8S_VERSION")" -o "$CACHE/$KEY/bin.tmp/" \
      k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
      k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubelet \
      ./cmd/etcd ./cmd/fake-gpu-plugin ./cmd/pause >&2
  )
  say "building kwok $KWOK_VERSION (its own module graph)"
  GOBIN="$CACHE/$KEY/bin.tmp" GOFLAGS= go install -trimpath -ldflags "-s -w" "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION" >&2
  rm -rf "$BIN" && mv "$CACHE/$KEY/bin.tmp" "$BIN"
  say "built in $((SECONDS - start)) s: $BIN"
  echo "$BIN"
}

build_kueue() {
  if built "$KUEUE_BIN" kueue; then echo "$KUEUE_BIN"; return; fi
  local start=$SECONDS
  say "building Kueue $KUEUE_VERSION (its own module graph)"
  mkdir -p "$KUEUE_BIN.tmp"
  GOBIN="$KUEUE_BIN.tmp" GOFLAGS= go install -trimpath -ldflags "-s -w" "sigs.k8s.io/kueue/cmd/kueue@$KUEUE_VERSION" >&2
  rm -rf "$KUEUE_BIN" && mv "$KUEUE_BIN.tmp" "$KUEUE_BIN"
  say "built in $((SECONDS - start)) s: $KUEUE_BIN"
  echo "$KUEUE_BIN"
}

mkdir -p "$CACHE"
exec 9>"$CACHE/.build.lock"
case "${1:-core}" in
  core) flock 9; build_core ;;
  kueue) flock 9; build_kueue ;;
  all) flock 9; build_core; build_kueue ;;
  bin) built "$BIN" "${CORE[@]}" && echo "$BIN" ;;
  kueue-bin) built "$KUEUE_BIN" kueue && echo "$KUEUE_BIN" ;;
  *) say "usage: k8s-build.sh [core|kueue|all|bin|kueue-bin]"; exit 2 ;;
esac
