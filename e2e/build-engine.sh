#!/usr/bin/env bash
# Builds the real Pulumi engine from Go modules (release binaries cannot be downloaded here) into
# a cache outside the repository, keyed by version; what is built already is skipped. It prints
# one VARIABLE=directory line per thing built, for `export $(e2e/build-engine.sh ...)`:
#
#   e2e/build-engine.sh                the pulumi CLI: LAB_MGMT_ENGINE_BIN
#   ... control-plane                  also etcd, kube-apiserver, kube-controller-manager and
#                                      kubectl at the Kubernetes minor of the pinned k3s:
#                                      LAB_MGMT_CONTROL_PLANE_BIN
#   ... plugins                        also the provider plugins that can be built here (only
#                                      kubernetes: LAB_MGMT_KUBERNETES_PLUGIN_BIN), naming those
#                                      that cannot, and the Helm client whose repositories that
#                                      plugin reads: LAB_MGMT_HELM_BIN
#
# The Go module proxy serves github.com/pulumi/pulumi/pkg/v3 from v3.274.0 on, while PyPI's newest
# pulumi is 3.272.0: the CLI is built at the oldest served version not older than the SDK pin
# (docs/versions.md). A module the proxy does not serve stops the build, naming it.
set -euo pipefail

repo="$(cd "$(dirname "$0")/.." && pwd)"
# Go is installed under /usr/local/go on this project's machines, not always on PATH.
command -v go >/dev/null 2>&1 || export PATH="$PATH:/usr/local/go/bin"
cache="${LAB_MGMT_ENGINE_CACHE:-$HOME/.cache/lab-mgmt-engine}"
export GOMODCACHE="$cache/gomod" GOCACHE="$cache/gocache" GOFLAGS=-mod=mod CGO_ENABLED=0
export GOTOOLCHAIN=local GOPROXY="${GOPROXY:-https://proxy.golang.org}"
mkdir -p "$GOMODCACHE" "$GOCACHE"

say() { printf '[build-engine %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

pinned() { # the version requirements.txt pins for a Python package
  sed -n "s/^$1==\\([0-9.]*\\).*/\\1/p" "$repo/requirements.txt"
}

# `go mod download -json MODULE@VERSION`'s directory, or a failure that names what is missing.
module_dir() {
  local json dir
  json="$(cd "$cache" && { go mod download -json "$1" 2>/dev/null || true; })"
  dir="$(printf '%s' "$json" | python3 -c 'import json,sys; d=json.load(sys.stdin); print(d.get("Dir","") if not d.get("Error") else "")' 2>/dev/null || true)"
  if [ -z "$dir" ]; then
    say "cannot get Go module $1 from $GOPROXY: $(printf '%s' "$json" | python3 -c 'import json,sys; print(json.load(sys.stdin).get("Error","no answer"))' 2>/dev/null || echo 'no answer')"
    return 1
  fi
  printf '%s\n' "$dir"
}

# The oldest version of pkg/v3 that the proxy lists and that is not older than the SDK pin.
cli_version() {
  local sdk="$1"
  (cd "$cache" && go list -m -versions github.com/pulumi/pulumi/pkg/v3) | tr ' ' '\n' | sed -n 's/^v//p' |
    python3 -c '
import sys
sdk = tuple(int(p) for p in sys.argv[1].split("."))
served = sorted(tuple(int(p) for p in line.split(".")) for line in sys.stdin if line.strip())
newer = [v for v in served if v >= sdk]
print(".".join(map(str, newer[0])) if newer else "")' "$sdk"
}

build_cli() {
  local sdk version out src pkg_dir sdk_dir
  sdk="$(pinned pulumi)"
  version="$(cli_version "$sdk")"
  if [ -z "$version" ]; then
    say "the Go module proxy serves no github.com/pulumi/pulumi/pkg/v3 at or after v$sdk (the SDK pin)"
    return 1
  fi
  out="$cache/pulumi-v$version/bin"
  if [ -x "$out/pulumi" ]; then
    say "pulumi v$version: cached"
  else
    say "pulumi v$version (Python SDK pinned at $sdk): downloading github.com/pulumi/pulumi/{pkg,sdk}/v3@v$version"
    pkg_dir="$(module_dir "github.com/pulumi/pulumi/pkg/v3@v$version")"
    sdk_dir="$(module_dir "github.com/pulumi/pulumi/sdk/v3@v$version")"
    # pkg/go.mod replaces sdk/v3 with ../sdk, as in the monorepo: lay the two side by side.
    src="$cache/src/pulumi-v$version"
    rm -rf "$src" && mkdir -p "$src" "$out"
    cp -a "$pkg_dir" "$src/pkg" && cp -a "$sdk_dir" "$src/sdk" && chmod -R u+w "$src"
    say "pulumi v$version: building (about 4 minutes cold on 2 cores)"
    (cd "$src/pkg" && go build -trimpath -tags osusergo,grpcnotrace \
      -ldflags "-s -w -X github.com/pulumi/pulumi/sdk/v3/go/common/version.Version=v$version" \
      -o "$out/pulumi.partial" ./cmd/pulumi)
    mv "$out/pulumi.partial" "$out/pulumi"
    rm -rf "$src"
  fi
  printf 'LAB_MGMT_ENGINE_BIN=%s\n' "$out"
}

# The proxy serves the kubernetes provider's module only at one pseudo-version, which is the
# commit tagged v4.25.0, not at the pinned SDK's 4.34.2: the newest there is. The CLI runs it from
# PATH in place of 4.34.2 and says so in its output (docs/versions.md).
KUBERNETES_PLUGIN_VERSION=4.25.0
KUBERNETES_PLUGIN_MODULE_VERSION=v4.0.0-20260115033456-f47bc2d6f199

build_kubernetes_plugin() {
  local out="$cache/pulumi-resource-kubernetes-v$KUBERNETES_PLUGIN_VERSION/bin" src cmd
  if [ -x "$out/pulumi-resource-kubernetes" ]; then
    say "pulumi-resource-kubernetes v$KUBERNETES_PLUGIN_VERSION: cached"
  else
    src="$cache/src/pulumi-kubernetes-v$KUBERNETES_PLUGIN_VERSION"
    rm -rf "$src" && mkdir -p "$out"
    cp -a "$(module_dir "github.com/pulumi/pulumi-kubernetes/provider/v4@$KUBERNETES_PLUGIN_MODULE_VERSION")" "$src"
    chmod -R u+w "$src"
    # Its go.mod points the SDK at the monorepo's ../sdk: take the version it requires instead.
    (cd "$src" && go mod edit -dropreplace=github.com/pulumi/pulumi-kubernetes/sdk/v4)
    # The release build embeds the schema with its version set (cmd/.../generate.go does this).
    cmd="$src/cmd/pulumi-resource-kubernetes"
    python3 -c 'import json, sys
schema = json.load(open(sys.argv[1]))
schema["version"] = sys.argv[2]
json.dump(schema, open(sys.argv[3], "w"))' "$cmd/schema.json" "$KUBERNETES_PLUGIN_VERSION" "$cmd/schema-embed.json"
    cp "$cmd/terraform-mapping.json" "$cmd/terraform-mapping-embed.json"
    say "pulumi-resource-kubernetes v$KUBERNETES_PLUGIN_VERSION: building (about 7 minutes cold on 2 cores)"
    (cd "$src" && go build -trimpath \
      -ldflags "-s -w -X github.com/pulumi/pulumi-kubernetes/provider/v4/pkg/version.Version=$KUBERNETES_PLUGIN_VERSION" \
      -o "$out/pulumi-resource-kubernetes.partial" ./cmd/pulumi-resource-kubernetes)
    mv "$out/pulumi-resource-kubernetes.partial" "$out/pulumi-resource-kubernetes"
    rm -rf "$src"
  fi
  printf 'LAB_MGMT_KUBERNETES_PLUGIN_BIN=%s\n' "$out"
}

# The Helm client at the version the kubernetes plugin embeds: an adoption lists the chart
# repositories with it (docs/adoption.md), and the plugin reads what it wrote.
HELM_VERSION=3.18.6

build_helm() {
  local out="$cache/helm-v$HELM_VERSION/bin" src="$cache/src/helm-v$HELM_VERSION"
  if [ -x "$out/helm" ]; then
    say "helm v$HELM_VERSION: cached"
  else
    rm -rf "$src" && mkdir -p "$src" "$out"
    say "helm v$HELM_VERSION: building"
    (cd "$src" && go mod init lab-mgmt/helm >/dev/null 2>&1 && go get "helm.sh/helm/v3@v$HELM_VERSION" >&2 &&
      go build -trimpath -ldflags "-s -w -X helm.sh/helm/v3/internal/version.version=v$HELM_VERSION" \
        -o "$out/helm.partial" helm.sh/helm/v3/cmd/helm)
    mv "$out/helm.partial" "$out/helm"
    rm -rf "$src"
  fi
  printf 'LAB_MGMT_HELM_BIN=%s\n' "$out"
}

# The other two plugins, at the pseudo-versions of the commits the pinned SDKs were released from:
# named, so that the day the proxy serves them is noticed.
report_unbuildable_plugins() {
  module_dir "github.com/pulumi/pulumi-command/provider@v0.0.0-20260304002345-f0839b236d7b" >/dev/null ||
    say "pulumi-resource-command $(pinned pulumi-command): not buildable here"
  module_dir "github.com/muhlba91/pulumi-proxmoxve/provider@v0.0.0-20260705145838-fb7a0201b341" >/dev/null ||
    say "pulumi-resource-proxmoxve $(pinned pulumi-proxmoxve): not buildable here"
}

# The newest patch release of the pinned k3s's Kubernetes minor that the proxy serves, and an etcd
# release that Kubernetes supports at that minor.
KUBERNETES_VERSION=1.35.4
ETCD_VERSION=3.6.16

KUBERNETES_COMMANDS="kube-apiserver kube-controller-manager kubectl"

build_control_plane() {
  local out="$cache/kubernetes-v$KUBERNETES_VERSION-etcd-v$ETCD_VERSION/bin" src kube_mod staging version_flags="" missing=""
  mkdir -p "$out"
  if [ -x "$out/etcd" ]; then
    say "etcd v$ETCD_VERSION: cached"
  else
    src="$cache/src/etcd-v$ETCD_VERSION"
    rm -rf "$src" && mkdir -p "$src"
    say "etcd v$ETCD_VERSION: building"
    # The server module's own go.mod replaces its siblings by path: build it as a dependency.
    (cd "$src" && go mod init lab-mgmt/etcd >/dev/null 2>&1 && go get "go.etcd.io/etcd/server/v3@v$ETCD_VERSION" >&2 &&
      go build -trimpath -ldflags "-s -w" -o "$out/etcd.partial" go.etcd.io/etcd/server/v3)
    mv "$out/etcd.partial" "$out/etcd"
    rm -rf "$src"
  fi

  for command in $KUBERNETES_COMMANDS; do
    [ -x "$out/$command" ] || missing="$missing $command"
  done
  if [ -z "$missing" ]; then
    say "Kubernetes v$KUBERNETES_VERSION ($KUBERNETES_COMMANDS): cached"
    printf 'LAB_MGMT_CONTROL_PLANE_BIN=%s\n' "$out"
    return
  fi
  src="$cache/src/kubernetes-v$KUBERNETES_VERSION"
  rm -rf "$src" && mkdir -p "$src"
  kube_mod="$(module_dir "k8s.io/kubernetes@v$KUBERNETES_VERSION")/go.mod"
  # k8s.io/kubernetes requires its staging modules at v0.0.0 and replaces them by path, which a
  # dependent module does not see: point each at its published v0.<minor>.<patch>.
  staging="v0.${KUBERNETES_VERSION#1.}"
  (cd "$src" && go mod init lab-mgmt/kubernetes >/dev/null 2>&1 &&
    go mod edit -require="k8s.io/kubernetes@v$KUBERNETES_VERSION" &&
    sed -n 's/^[[:space:]]*\(k8s\.io\/[a-z0-9-]*\) v0\.0\.0$/\1/p' "$kube_mod" | sort -u |
    while read -r staged; do go mod edit -replace="$staged=$staged@$staging"; done)
  for package in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    version_flags="$version_flags -X $package.gitVersion=v$KUBERNETES_VERSION -X $package.gitMajor=1"
    version_flags="$version_flags -X $package.gitMinor=$(echo "$KUBERNETES_VERSION" | cut -d. -f2) -X $package.gitTreeState=clean"
  done
  for command in $missing; do
    say "$command v$KUBERNETES_VERSION: building"
    (cd "$src" && go build -trimpath -ldflags "-s -w$version_flags" -o "$out/$command.partial" "k8s.io/kubernetes/cmd/$command")
    mv "$out/$command.partial" "$out/$command"
  done
  rm -rf "$src"
  printf 'LAB_MGMT_CONTROL_PLANE_BIN=%s\n' "$out"
}

build_cli
for target in "$@"; do
  case "$target" in
    control-plane) build_control_plane ;;
    plugins) build_kubernetes_plugin && build_helm && report_unbuildable_plugins ;;
    *) say "unknown target $target; expected control-plane or plugins" && exit 2 ;;
  esac
done
say "done"
