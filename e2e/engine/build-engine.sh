#!/usr/bin/env bash
# Builds the real Pulumi engine from Go modules (release binaries cannot be downloaded here) into
# a cache outside the repository, keyed by version; what is built already is skipped. It prints
# one VARIABLE=directory line per thing built, for `export $(e2e/engine/build-engine.sh ...)`:
#
#   e2e/engine/build-engine.sh         the pulumi CLI: LAB_MGMT_ENGINE_BIN
#   ... control-plane                  also etcd, kube-apiserver, kube-controller-manager and
#                                      kubectl at the Kubernetes minor of the pinned k3s:
#                                      LAB_MGMT_CONTROL_PLANE_BIN
#   ... plugins                        also the provider plugins and the Python language host:
#                                      kubernetes, proxmoxve and command
#                                      (LAB_MGMT_KUBERNETES_PLUGIN_BIN, LAB_MGMT_PROXMOXVE_PLUGIN_BIN,
#                                      LAB_MGMT_COMMAND_PLUGIN_BIN) and pulumi-language-python
#                                      (beside the CLI), each at the version its pin asks for, from the
#                                      upstream archives in $LAB_MGMT_VENDOR
#   ... workload                       also what runs a workload cluster for real: kube-scheduler
#                                      (beside the control plane), the Cluster API core manager
#                                      (LAB_MGMT_CLUSTER_API_BIN) with clusterctl beside it and
#                                      cluster-autoscaler built with its clusterapi provider
#                                      (LAB_MGMT_AUTOSCALER_BIN), from the upstream archives in
#                                      $LAB_MGMT_VENDOR; the helm CLI and the IPAM in-cluster
#                                      provider's manager (with its upstream config/ beside its
#                                      bin/) from the Go module proxy (LAB_MGMT_HELM_BIN,
#                                      LAB_MGMT_IPAM_BIN); CAPMOX's manager from its upstream
#                                      archive, with Cluster API's (LAB_MGMT_CAPMOX_BIN)
#                                      and the sources of the charts of cluster-api-operator and
#                                      cert-manager from the Go module proxy
#                                      (LAB_MGMT_OPERATOR_SOURCE, LAB_MGMT_CERT_MANAGER_CHART_SOURCE),
#                                      which e2e/controllers/upstream_charts.py rebuilds
#   ... helm-controller                also k3s's helm-controller at the version the pinned k3s
#                                      embeds, from the Go module proxy
#                                      (LAB_MGMT_HELM_CONTROLLER_BIN), and its Jobs' image,
#                                      klipper-helm's `entry` from its upstream archive in
#                                      $LAB_MGMT_VENDOR with Helm v4 from the module proxy
#                                      (LAB_MGMT_KLIPPER_HELM_BIN)
#   ... cert-manager                   also cert-manager's controller, webhook, cainjector and
#                                      startupapicheck, from the upstream archives in
#                                      $LAB_MGMT_VENDOR (LAB_MGMT_CERT_MANAGER_BIN)
#   ... operator                       also cluster-api-operator at the chart's pin, from the Go
#                                      module proxy with the Cluster API archive in $LAB_MGMT_VENDOR
#                                      (LAB_MGMT_OPERATOR_BIN)
#
# The Go module proxy serves github.com/pulumi/pulumi/pkg/v3 from v3.274.0 on, while PyPI's newest
# pulumi is 3.272.0: the CLI is built at the oldest served version not older than the SDK pin
# (docs/versions.md). A module the proxy does not serve stops the build, naming it.
set -euo pipefail

repo="$(cd "$(dirname "$0")/../.." && pwd)"
# Go is installed under /usr/local/go on this project's machines, not always on PATH.
command -v go >/dev/null 2>&1 || export PATH="$PATH:/usr/local/go/bin"
cache="${LAB_MGMT_ENGINE_CACHE:-$HOME/.cache/lab-mgmt-engine}"
export GOMODCACHE="$cache/gomod" GOCACHE="$cache/gocache" GOFLAGS=-mod=mod CGO_ENABLED=0
export GOTOOLCHAIN=local GOPROXY="${GOPROXY:-https://proxy.golang.org}"
mkdir -p "$GOMODCACHE" "$GOCACHE"

say() { printf '[build-engine %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

# Two runs that share the cache (a `make box` beside a `make test-engine`, issue 67) must never
# write the same file: each run links its binaries into a directory of its own in the cache (the
# same file system, so the rename that puts a binary in place is atomic), removed when it exits.
partials="$(mktemp -d "$cache/.partial.XXXXXX")"
trap 'rm -rf "$partials"' EXIT
trap 'exit 130' INT TERM
partial_of() { # where this run links the binary that goes to $1
  printf '%s/%s\n' "$partials" "${1//\//%}"
}

# Moves a finished binary into place and says how long it took since `started` ($SECONDS then).
finish() {
  mv "$(partial_of "$1")" "$1"
  say "$(basename "$1"): built in $((SECONDS - $2)) s"
}

# Each build step holds an exclusive lock of its own under locks/ while it runs: a second run that
# wants the same thing waits for the first and then finds it cached, instead of both unpacking into
# the same src/ directory. A lane that fails exits, and its lock goes with its descriptor.
locks="$cache/locks"
mkdir -p "$locks"
locked() {
  local name="$1" fd
  shift
  exec {fd}>"$locks/$name.lock"
  if ! flock --nonblock "$fd"; then
    say "$name: another run holds its lock ($locks/$name.lock), waiting"
    flock "$fd"
  fi
  "$@"
  exec {fd}>&-
}

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
  local started=$SECONDS
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
      -o "$(partial_of "$out/pulumi")" ./cmd/pulumi)
    finish "$out/pulumi" "$started"
    rm -rf "$src"
  fi
  cli_bin="$out"
  printf 'LAB_MGMT_ENGINE_BIN=%s\n' "$out"
}

# pulumi-kubernetes at the version requirements.txt pins: 4.32.0, the newest whose source can be had
# (docs/versions.md says why the pin stepped back from 4.34.2). The proxy serves its provider module
# only at the v4.25.0 commit, so it comes from the archive of tag v4.32.0's provider/, which lacks
# two generated files: schema.json is generated by the tree's own pulumi-gen-kubernetes, as
# upstream's Makefile does (`make k8sgen schema`); terraform.json is what the generator reads after
# writing schema.json, for the terraform mapping the archive already holds, so the generator is
# left to stop there (a stand-in file would make it overwrite that mapping with an empty one).
# Where this departs from the Makefile, and why:
# - the proxy refuses three versions go.mod names: pulumi-language-dotnet v3.106.2 (imported by the
#   generator alone, for the .NET SDK that `schema` never writes: it gets a stand-in module, below;
#   the plugin's go.mod drops it), a fluxcd/pkg/ssa
#   pseudo-version whose ssa/ tree equals tag ssa/v0.72.0 (served), and pulumi pkg/sdk v3.243.0 and
#   v3.244.0 (the plugin takes v3.245.0, the nearest served; k8s.io/*, client-go, Helm v3.20.2, grpc
#   and fluxcd stay at go.mod's versions);
# - the generator is built on the plugin's module graph (the same versions of every module), so
#   that the plugin's build finds most of its packages compiled already: the real .NET generator
#   (v3.107.1) requires pulumi v3.246.0 and newer golang.org/x modules, which made the two graphs
#   differ under golang.org/x/sys and compiled everything twice (1345 s for this lane, cold);
# - sdk/v4 is the proxy's v4.32.0 in place of the monorepo's ../sdk;
# - the Kubernetes swagger files (the Makefile's KUBE_VERSION v1.36.1 and the eight older ones the
#   generator merges in) come from the k8s.io/kubernetes modules at those tags, which the proxy serves.
KUBERNETES_PLUGIN_VERSION=4.32.0
KUBERNETES_SWAGGER_VERSIONS="1.36.1 1.17.0 1.18.0 1.19.0 1.20.0 1.26.0 1.28.0 1.30.0 1.31.0"
FLUXCD_SSA_PSEUDO=github.com/fluxcd/pkg/ssa@v0.71.1-0.20260424094917-4f94dc680419

build_kubernetes_plugin() {
  local out="$cache/pulumi-resource-kubernetes-v$KUBERNETES_PLUGIN_VERSION/bin" src provider cmd specs v mapping_sum
  local started=$SECONDS
  local archive="pulumi-kubernetes-v$KUBERNETES_PLUGIN_VERSION-provider.tar.gz"
  local dotnet=github.com/pulumi/pulumi-dotnet/pulumi-language-dotnet/v3
  local sdk_pin="github.com/pulumi/pulumi-kubernetes/sdk/v4@v$KUBERNETES_PLUGIN_VERSION"
  local version_flag="-X github.com/pulumi/pulumi-kubernetes/provider/v4/pkg/version.Version=$KUBERNETES_PLUGIN_VERSION"
  if [ "$(pinned pulumi-kubernetes)" != "$KUBERNETES_PLUGIN_VERSION" ]; then
    say "requirements.txt pins pulumi-kubernetes $(pinned pulumi-kubernetes), this build makes $KUBERNETES_PLUGIN_VERSION: change both together"
    return 1
  fi
  if [ -x "$out/pulumi-resource-kubernetes" ]; then
    say "pulumi-resource-kubernetes v$KUBERNETES_PLUGIN_VERSION: cached"
  elif ! have_archives "$archive"; then
    out="$(released_plugin kubernetes "$KUBERNETES_PLUGIN_VERSION" "$archive")"
  else
    src="$cache/src/pulumi-kubernetes-v$KUBERNETES_PLUGIN_VERSION"
    provider="$src/kubernetes/provider" cmd="$src/kubernetes/provider/cmd/pulumi-resource-kubernetes"
    specs="$provider/pkg/gen/openapi-specs"
    rm -rf "$src" && mkdir -p "$src/gen" "$out"
    unpack "$archive" "$src/kubernetes"
    write_dotnet_codegen_standin "$src/dotnet-codegen"
    mkdir -p "$specs"
    for v in $KUBERNETES_SWAGGER_VERSIONS; do
      cp "$(module_dir "k8s.io/kubernetes@v$v")/api/openapi-spec/swagger.json" "$specs/swagger-v$v.json"
    done
    mapping_sum="$(sha256sum <"$cmd/terraform-mapping.json")"
    say "pulumi-gen-kubernetes v$KUBERNETES_PLUGIN_VERSION: building, then generating schema.json"
    (cd "$provider" && go mod edit -dropreplace=github.com/pulumi/pulumi-kubernetes/sdk/v4 -require="$sdk_pin" \
      -replace="$FLUXCD_SSA_PSEUDO=github.com/fluxcd/pkg/ssa@v0.72.0" \
      -require=github.com/pulumi/pulumi/pkg/v3@v3.245.0 -require=github.com/pulumi/pulumi/sdk/v3@v3.245.0 \
      -replace="$dotnet=$src/dotnet-codegen" &&
      go build -trimpath -ldflags "-s -w $version_flag" -o "$src/gen/pulumi-gen-kubernetes" ./cmd/pulumi-gen-kubernetes)
    "$src/gen/pulumi-gen-kubernetes" schema "$specs/swagger-v1.36.1.json" "$src/kubernetes" >"$src/gen/schema.log" 2>&1 || true
    if ! grep -q 'terraform.json: no such file' "$src/gen/schema.log" || [ ! -s "$cmd/schema.json" ] ||
      [ "$(sha256sum <"$cmd/terraform-mapping.json")" != "$mapping_sum" ]; then
      say "pulumi-gen-kubernetes did not stop where expected (after schema.json, on terraform.json):"
      cat "$src/gen/schema.log" >&2
      return 1
    fi
    (cd "$provider" && go mod edit -droprequire="$dotnet" -dropreplace="$dotnet")
    # The Makefile's `go generate`: the schema and the terraform mapping embedded with the version set.
    (cd "$cmd" && VERSION="$KUBERNETES_PLUGIN_VERSION" go run ./generate.go)
    say "pulumi-resource-kubernetes v$KUBERNETES_PLUGIN_VERSION: building (about 12 minutes cold on 2 cores)"
    (cd "$provider" && go build -trimpath -ldflags "-s -w $version_flag" \
      -o "$(partial_of "$out/pulumi-resource-kubernetes")" ./cmd/pulumi-resource-kubernetes)
    finish "$out/pulumi-resource-kubernetes" "$started"
    rm -rf "$src"
  fi
  printf 'LAB_MGMT_KUBERNETES_PLUGIN_BIN=%s\n' "$out"
}

# What the Go module proxy refuses comes as exact upstream archives (`git archive` of the tagged
# commits, ../shared/vendor/README.md) from the directory LAB_MGMT_VENDOR names: by default the
# shared folder beside the clone, which CI has. Each is checked against its sha256 in
# e2e/engine/vendor-archives.sha256 (sha256sum's format; the box's tests read the same file,
# e2e/engine/vendor.py) before anything is unpacked from it.
vendor="${LAB_MGMT_VENDOR:-$repo/../shared/vendor}"
declare -A ARCHIVE_SHA256=()
while read -r digest archive; do
  ARCHIVE_SHA256[$archive]="$digest"
done <"$repo/e2e/engine/vendor-archives.sha256"

have_archives() {
  local archive
  for archive in "$@"; do [ -f "$vendor/$archive" ] || return 1; done
}

# Unpacks a checked archive into $2 (its top directory stripped); a wrong checksum stops the build.
unpack() {
  local archive="$1" into="$2" actual
  actual="$(sha256sum "$vendor/$archive" | cut -d' ' -f1)"
  if [ -z "${ARCHIVE_SHA256[$archive]:-}" ]; then
    say "$archive has no sha256 in e2e/engine/vendor-archives.sha256: refusing to build from it"
    return 1
  elif [ "$actual" != "${ARCHIVE_SHA256[$archive]}" ]; then
    say "$vendor/$archive has sha256 $actual, expected ${ARCHIVE_SHA256[$archive]}: refusing to build from it"
    return 1
  fi
  mkdir -p "$into" && tar -xzf "$vendor/$archive" -C "$into" --strip-components=1
}

# Without the archives, a machine that reaches the plugins' release downloads installs the released
# plugin into a cache PULUMI_HOME and uses its binary; on one that reaches neither, one line says
# what is missing and where to put it.
released_plugin() {
  local name="$1" version="$2" archive="$3" home="$cache/released-plugins"
  if PULUMI_HOME="$home" "$cli_bin/pulumi" plugin install resource "$name" "$version" >/dev/null 2>&1; then
    say "pulumi-resource-$name v$version: no $archive in $vendor, installed the released plugin"
    printf '%s\n' "$home/plugins/resource-$name-v$version"
    return
  fi
  say "pulumi-resource-$name v$version: missing $archive (put it in $vendor or set LAB_MGMT_VENDOR), and its release cannot be downloaded"
  return 1
}

# The plugin versions the pinned Python SDKs ask the engine for (docs/versions.md).
PROXMOXVE_VERSION=8.3.0
TERRAFORM_PROXMOX_VERSION=0.111.1
COMMAND_VERSION=1.2.1
LANGUAGE_HOST_VERSION=3.259.0

# pulumi-terraform-bridge's tfgen (linked in for schema generation, unused here: the plugin embeds
# its schema) imports example converters from two modules that are neither served by the Go module
# proxy nor among the archives. Each stand-in module has the one function signature tfgen calls.
# A stand-in module's go.mod: the two modules its one function's signature takes types from.
standin_go_mod() {
  printf 'module %s\n\ngo 1.24\n\nrequire (\n\tgithub.com/hashicorp/hcl/v2 v2.24.0\n\tgithub.com/pulumi/pulumi/pkg/v3 v3.246.0\n)\n' "$1"
}

write_converter_standins() {
  local into="$1"
  mkdir -p "$into/pulumi-java/pkg/codegen/java" "$into/pulumi-hcl/pkg/codegen"
  standin_go_mod github.com/pulumi/pulumi-java >"$into/pulumi-java/go.mod"
  cat >"$into/pulumi-java/pkg/codegen/java/standin.go" <<'GO'
// Package java stands in for pulumi-java's program generator, which the Go module proxy does not
// serve. pulumi-terraform-bridge's tfgen calls it only to translate documentation examples while
// generating SDKs; the provider plugin never calls it while serving a program.
package java

import (
	"errors"

	"github.com/hashicorp/hcl/v2"
	"github.com/pulumi/pulumi/pkg/v3/codegen/pcl"
)

func GenerateProgram(*pcl.Program) (map[string][]byte, hcl.Diagnostics, error) {
	return nil, nil, errors.New("lab-mgmt build: Java example conversion is not available in this plugin build")
}
GO
  standin_go_mod github.com/pulumi-labs/pulumi-hcl >"$into/pulumi-hcl/go.mod"
  cat >"$into/pulumi-hcl/pkg/codegen/standin.go" <<'GO'
// Package codegen stands in for pulumi-hcl's program generator, which the Go module proxy does not
// serve at the version the bridge requires. pulumi-terraform-bridge's tfgen calls it only to
// translate documentation examples while generating SDKs; the provider plugin never calls it while
// serving a program.
package codegen

import (
	"errors"

	"github.com/hashicorp/hcl/v2"
	"github.com/pulumi/pulumi/pkg/v3/codegen/pcl"
)

type GenerateProgramOption func()

func SkipRequiredProvidersVersion() GenerateProgramOption { return func() {} }

func GenerateProgram(*pcl.Program, ...GenerateProgramOption) (map[string][]byte, hcl.Diagnostics, error) {
	return nil, nil, errors.New("lab-mgmt build: HCL example conversion is not available in this plugin build")
}
GO
}

# pulumi-gen-kubernetes's .NET SDK writer, which `schema` never calls: the two functions it imports,
# on the pulumi version the plugin takes, so that the generator's module graph is the plugin's.
write_dotnet_codegen_standin() {
  mkdir -p "$1/codegen"
  printf 'module %s\n\ngo 1.24\n\nrequire github.com/pulumi/pulumi/pkg/v3 v3.245.0\n' \
    github.com/pulumi/pulumi-dotnet/pulumi-language-dotnet/v3 >"$1/go.mod"
  cat >"$1/codegen/standin.go" <<'GO'
// Package codegen stands in for pulumi-language-dotnet's SDK generator in pulumi-gen-kubernetes,
// which the lab-mgmt build runs only to write schema.json; the .NET SDK is never generated.
package codegen

import (
	"errors"

	"github.com/pulumi/pulumi/pkg/v3/codegen/schema"
)

var errNoDotnet = errors.New("lab-mgmt build: the .NET SDK generator is not available in this generator build")

type LanguageResource struct {
	*schema.Resource

	Name    string
	Package string
}

func LanguageResources(string, *schema.Package) (map[string]LanguageResource, error) {
	return nil, errNoDotnet
}

func GeneratePackage(string, *schema.Package, map[string][]byte, map[string]string) (map[string][]byte, error) {
	return nil, errNoDotnet
}
GO
}

build_proxmoxve_plugin() {
  local out="$cache/pulumi-resource-proxmoxve-v$PROXMOXVE_VERSION/bin" src="$cache/src/pulumi-proxmoxve-v$PROXMOXVE_VERSION"
  local started=$SECONDS
  local archives=("pulumi-proxmoxve-v$PROXMOXVE_VERSION-provider.tar.gz" "terraform-provider-proxmox-v$TERRAFORM_PROXMOX_VERSION.tar.gz"
    pulumi-yaml-v1.36.0.tar.gz pulumi-language-dotnet-v3.107.1.tar.gz)
  if [ -x "$out/pulumi-resource-proxmoxve" ]; then
    say "pulumi-resource-proxmoxve v$PROXMOXVE_VERSION: cached"
  elif ! have_archives "${archives[@]}"; then
    out="$(released_plugin proxmoxve "$PROXMOXVE_VERSION" "${archives[0]} (and the three it needs)")"
  else
    rm -rf "$src" && mkdir -p "$src" "$out"
    unpack "${archives[0]}" "$src/pulumi-proxmoxve"
    unpack "${archives[1]}" "$src/terraform-provider-proxmox"
    unpack "${archives[2]}" "$src/pulumi-yaml"
    unpack "${archives[3]}" "$src/pulumi-dotnet"
    write_converter_standins "$src"
    (cd "$src/pulumi-proxmoxve/provider" && go mod edit \
      -replace="github.com/bpg/terraform-provider-proxmox=$src/terraform-provider-proxmox" \
      -replace="github.com/pulumi/pulumi-yaml=$src/pulumi-yaml" \
      -replace="github.com/pulumi/pulumi-dotnet/pulumi-language-dotnet/v3=$src/pulumi-dotnet/pulumi-language-dotnet" \
      -replace="github.com/pulumi/pulumi-java=$src/pulumi-java" \
      -replace="github.com/pulumi-labs/pulumi-hcl=$src/pulumi-hcl")
    say "pulumi-resource-proxmoxve v$PROXMOXVE_VERSION: building (about 7 minutes cold on 2 cores)"
    (cd "$src/pulumi-proxmoxve/provider" && go build -trimpath \
      -ldflags "-s -w -X github.com/muhlba91/pulumi-proxmoxve/provider/pkg/version.Version=$PROXMOXVE_VERSION" \
      -o "$(partial_of "$out/pulumi-resource-proxmoxve")" ./cmd/pulumi-resource-proxmoxve)
    finish "$out/pulumi-resource-proxmoxve" "$started"
    rm -rf "$src"
  fi
  printf 'LAB_MGMT_PROXMOXVE_PLUGIN_BIN=%s\n' "$out"
}

build_command_plugin() {
  local out="$cache/pulumi-resource-command-v$COMMAND_VERSION/bin" src="$cache/src/pulumi-command-v$COMMAND_VERSION"
  local started=$SECONDS
  local archive=pulumi-command-v$COMMAND_VERSION-provider.tar.gz
  if [ -x "$out/pulumi-resource-command" ]; then
    say "pulumi-resource-command v$COMMAND_VERSION: cached"
  elif ! have_archives "$archive"; then
    out="$(released_plugin command "$COMMAND_VERSION" "$archive")"
  else
    rm -rf "$src" && mkdir -p "$out"
    unpack "$archive" "$src"
    say "pulumi-resource-command v$COMMAND_VERSION: building (about 5 minutes cold on 2 cores)"
    (cd "$src/provider" && go build -trimpath \
      -ldflags "-s -w -X github.com/pulumi/pulumi-command/provider/pkg/version.Version=$COMMAND_VERSION" \
      -o "$(partial_of "$out/pulumi-resource-command")" ./cmd/pulumi-resource-command)
    finish "$out/pulumi-resource-command" "$started"
    rm -rf "$src"
  fi
  printf 'LAB_MGMT_COMMAND_PLUGIN_BIN=%s\n' "$out"
}

# The language host's module is not served either; its newest archived tag is v3.259.0, whose
# main.go builds against the CLI's own pkg/sdk modules laid out as in the monorepo. It goes beside
# the CLI, as a released CLI ships it (the CLI warns of a language host found anywhere else), with
# pulumi-language-python-exec, which the sdk module carries and the host runs from beside itself.
build_language_host() {
  local version out="$cli_bin" src archive=pulumi-language-python-v$LANGUAGE_HOST_VERSION.tar.gz
  local started=$SECONDS
  version="$(cli_version "$(pinned pulumi)")"
  src="$cache/src/pulumi-language-python-v$LANGUAGE_HOST_VERSION"
  if [ -x "$out/pulumi-language-python" ]; then
    say "pulumi-language-python: beside the CLI"
  elif ! have_archives "$archive"; then
    say "pulumi-language-python: missing $archive (put it in $vendor or set LAB_MGMT_VENDOR), or use a released CLI, which ships it"
    return 1
  else
    rm -rf "$src" && mkdir -p "$src"
    cp -a "$(module_dir "github.com/pulumi/pulumi/pkg/v3@v$version")" "$src/pkg"
    cp -a "$(module_dir "github.com/pulumi/pulumi/sdk/v3@v$version")" "$src/sdk"
    chmod -R u+w "$src"
    unpack "$archive" "$src"
    say "pulumi-language-python v$LANGUAGE_HOST_VERSION on v$version packages: building (about 3 minutes cold on 2 cores)"
    (cd "$src/sdk/python/cmd/pulumi-language-python" && go build -trimpath \
      -ldflags "-s -w -X github.com/pulumi/pulumi/sdk/v3/go/common/version.Version=v$LANGUAGE_HOST_VERSION" \
      -o "$(partial_of "$out/pulumi-language-python")" .)
    install -m 0755 "$src/sdk/python/cmd/pulumi-language-python-exec" "$out/pulumi-language-python-exec"
    finish "$out/pulumi-language-python" "$started"
    rm -rf "$src"
  fi
}

# The newest patch release of the pinned k3s's Kubernetes minor that the proxy serves, and an etcd
# release that Kubernetes supports at that minor.
KUBERNETES_VERSION=1.35.4
ETCD_VERSION=3.6.16

KUBERNETES_COMMANDS="kube-apiserver kube-controller-manager kubectl"
# With a workload cluster, the box's second control plane really schedules pods: that decides which
# ones fit nowhere, which is what cluster-autoscaler acts on.

build_control_plane() {
  local out="$cache/kubernetes-v$KUBERNETES_VERSION-etcd-v$ETCD_VERSION/bin" src kube_mod staging version_flags="" missing=""
  local started=$SECONDS
  wants workload && KUBERNETES_COMMANDS="$KUBERNETES_COMMANDS kube-scheduler"
  mkdir -p "$out"
  if [ -x "$out/etcd" ]; then
    say "etcd v$ETCD_VERSION: cached"
  else
    src="$cache/src/etcd-v$ETCD_VERSION"
    rm -rf "$src" && mkdir -p "$src"
    say "etcd v$ETCD_VERSION: building"
    # The server module's own go.mod replaces its siblings by path: build it as a dependency.
    (cd "$src" && go mod init lab-mgmt/etcd >/dev/null 2>&1 && go get "go.etcd.io/etcd/server/v3@v$ETCD_VERSION" >&2 &&
      go build -trimpath -ldflags "-s -w" -o "$(partial_of "$out/etcd")" go.etcd.io/etcd/server/v3)
    finish "$out/etcd" "$started"
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
    started=$SECONDS
    say "$command v$KUBERNETES_VERSION: building"
    (cd "$src" && go build -trimpath -ldflags "-s -w$version_flags" -o "$(partial_of "$out/$command")" "k8s.io/kubernetes/cmd/$command")
    finish "$out/$command" "$started"
  done
  rm -rf "$src"
  printf 'LAB_MGMT_CONTROL_PLANE_BIN=%s\n' "$out"
}

# The main module of each is an archive (the proxy refuses sigs.k8s.io/cluster-api at v1.12.x and
# serves the autoscaler only as part of nothing); their dependencies come from the proxy.
CLUSTER_API_VERSION=1.12.11
AUTOSCALER_VERSION=1.35.2

# build_from_archive VARIABLE NAME VERSION ARCHIVE "BINARY=PACKAGE ..." [go build flags...]: prints
# VARIABLE's line. One archive can give several binaries (the Cluster API tree gives the manager and
# clusterctl); only those missing from the cache are built, from one unpacking.
build_from_archive() {
  local variable="$1" name="$2" version="$3" archive="$4" binaries="$5"
  shift 5
  local out="$cache/$name-v$version/bin" src="$cache/src/$name-v$version" started pair missing=""
  for pair in $binaries; do
    if [ -x "$out/${pair%%=*}" ]; then
      say "${pair%%=*} v$version: cached"
    else
      missing="$missing $pair"
    fi
  done
  if [ -n "$missing" ] && ! have_archives "$archive"; then
    say "$(for pair in $missing; do printf '%s ' "${pair%%=*}"; done)v$version: missing $archive (put it in $vendor or set LAB_MGMT_VENDOR)"
    return 1
  elif [ -n "$missing" ]; then
    rm -rf "$src" && mkdir -p "$out"
    unpack "$archive" "$src"
    for pair in $missing; do
      started=$SECONDS
      say "${pair%%=*} v$version: building"
      (cd "$src" && go build -trimpath "$@" -o "$(partial_of "$out/${pair%%=*}")" "${pair#*=}")
      finish "$out/${pair%%=*}" "$started"
    done
    rm -rf "$src"
  fi
  printf '%s=%s\n' "$variable" "$out"
}

# The core manager, the kubeadm control-plane and bootstrap managers (run for their webhooks,
# e2e/controllers/cluster_api.py), and clusterctl, which the box runs as the owner did (`clusterctl
# generate cluster`) to leave a workload cluster as clusterctl leaves it. The two kubeadm managers
# are increments of the core's build: 37 s and 6 s on 2 cores with its packages cached.
build_cluster_api() {
  build_from_archive LAB_MGMT_CLUSTER_API_BIN cluster-api "$CLUSTER_API_VERSION" \
    "cluster-api-v$CLUSTER_API_VERSION.tar.gz" \
    "cluster-api-manager=. kubeadm-control-plane-manager=./controlplane/kubeadm kubeadm-bootstrap-manager=./bootstrap/kubeadm clusterctl=./cmd/clusterctl" \
    -ldflags "-s -w -X sigs.k8s.io/cluster-api/version.gitVersion=v$CLUSTER_API_VERSION"
}

build_autoscaler() {
  build_from_archive LAB_MGMT_AUTOSCALER_BIN cluster-autoscaler "$AUTOSCALER_VERSION" \
    "cluster-autoscaler-$AUTOSCALER_VERSION.tar.gz" "cluster-autoscaler=." -tags clusterapi -ldflags "-s -w"
}

# The helm CLI, which the box runs as the owner ran it from the laptop (Cilium's release on a
# workload cluster made with clusterctl): the Helm inside the kubernetes plugin (v3.20.2, in its
# go.mod), from the Go module proxy, built as a dependency like etcd.
HELM_VERSION=3.20.2

build_helm() {
  local out="$cache/helm-v$HELM_VERSION/bin" src="$cache/src/helm-v$HELM_VERSION" started=$SECONDS
  if [ -x "$out/helm" ]; then
    say "helm v$HELM_VERSION: cached"
  else
    rm -rf "$src" && mkdir -p "$src" "$out"
    say "helm v$HELM_VERSION: building"
    (cd "$src" && go mod init lab-mgmt/helm >/dev/null 2>&1 && go get "helm.sh/helm/v3@v$HELM_VERSION" >&2 &&
      go build -trimpath -ldflags "-s -w -X helm.sh/helm/v3/internal/version.version=v$HELM_VERSION" \
        -o "$(partial_of "$out/helm")" helm.sh/helm/v3/cmd/helm)
    finish "$out/helm" "$started"
    rm -rf "$src"
  fi
  printf 'LAB_MGMT_HELM_BIN=%s\n' "$out"
}

# The IPAM in-cluster provider's manager, which the box runs as cluster-api-operator deploys it for
# the program's IPAMProvider (e2e/controllers/ipam.py), with the CRDs and webhook configurations of
# its module's config/ copied beside bin/: the box reads them at run time, as the others' from their
# archives. v1.1.0 for the v1.1.1 pin: the proxy refuses v1.1.1 (docs/testing.md's versions).
IPAM_VERSION=1.1.0

build_ipam() {
  local home="$cache/ipam-in-cluster-v$IPAM_VERSION" module=sigs.k8s.io/cluster-api-ipam-provider-in-cluster
  local out="$home/bin" src="$cache/src/ipam-in-cluster-v$IPAM_VERSION" started=$SECONDS dir config
  if [ -x "$out/cluster-api-ipam-in-cluster-manager" ] && [ -f "$home/config/metadata.yaml" ]; then
    say "ipam in-cluster v$IPAM_VERSION: cached"
  else
    rm -rf "$src" "$home/config" && mkdir -p "$src" "$out"
    say "ipam in-cluster v$IPAM_VERSION: building"
    (cd "$src" && go mod init lab-mgmt/ipam >/dev/null 2>&1 && go get "$module@v$IPAM_VERSION" >&2 &&
      go build -trimpath -ldflags "-s -w" -o "$(partial_of "$out/cluster-api-ipam-in-cluster-manager")" "$module")
    dir="$(module_dir "$module@v$IPAM_VERSION")"
    config="$(partial_of "$home/config")"
    mkdir -p "$config"
    # Its whole config/ and metadata.yaml: the CRDs and webhooks the box lays out, and what its
    # release is rendered from (e2e/standins/cluster/provider_releases.py).
    cp -r "$dir/config/." "$dir/metadata.yaml" "$config/"
    chmod -R u+w "$config"
    mv "$config" "$home/config"
    finish "$out/cluster-api-ipam-in-cluster-manager" "$started"
    rm -rf "$src"
  fi
  printf 'LAB_MGMT_IPAM_BIN=%s\n' "$out"
}

# The sources of the two charts the program's Releases install, at the versions they pin
# (Pulumi.lab.yaml), which e2e/controllers/upstream_charts.py rebuilds as each project's Makefile
# releases them: what those targets read, copied out of the modules the proxy serves, with the
# LICENSE. cert-manager's chart is in its root module (its cmd/ binaries are not: build_cert_manager).
stack_pin() {
  sed -n "s/^ *lab-mgmt:$1: *//p" "$repo/Pulumi.lab.yaml"
}

# $1: the cache's name for them, $2: module@version, $3: what to copy out of the module.
fetch_sources() {
  local home="$cache/$1" dir copy path
  if [ -d "$home/source" ]; then
    say "$1 sources: cached"
  else
    dir="$(module_dir "$2")" || return 1
    copy="$(partial_of "$home/source")"
    mkdir -p "$home"
    for path in $3 LICENSE; do
      mkdir -p "$copy/$(dirname "$path")"
      cp -r "$dir/$path" "$copy/$path"
    done
    chmod -R u+w "$copy"
    mv "$copy" "$home/source"
    say "$1 sources: copied from $2"
  fi
  printf '%s\n' "$home/source"
}

fetch_chart_sources() {
  local operator cert_manager source
  operator="$(stack_pin capiOperatorVersion)" cert_manager="$(stack_pin certManagerVersion)"
  source="$(fetch_sources "cluster-api-operator-v$operator" "sigs.k8s.io/cluster-api-operator@v$operator" \
    "hack/charts/cluster-api-operator config")" || return 1
  printf 'LAB_MGMT_OPERATOR_SOURCE=%s\n' "$source"
  source="$(fetch_sources "cert-manager-chart-v${cert_manager#v}" "github.com/cert-manager/cert-manager@$cert_manager" \
    "deploy/charts/cert-manager")" || return 1
  printf 'LAB_MGMT_CERT_MANAGER_CHART_SOURCE=%s\n' "$source"
}

# CAPMOX's manager, which the box runs as cluster-api-operator deploys it for the program's
# InfrastructureProvider (e2e/controllers/capmox.py), against the Proxmox stand-in. v0.9.0 for the
# v0.9.1 pin (docs/testing.md's versions): its archive is the main module, and its Cluster API
# requirement (v1.12.9, refused by the proxy) is replaced by the unpacked Cluster API archive, so
# one Cluster API source runs across the box. Only its e2e tests (test/, dropped) import
# sigs.k8s.io/cluster-api/test, which the proxy refuses too.
CAPMOX_VERSION=0.9.0

build_capmox() {
  local archive="cluster-api-provider-proxmox-v$CAPMOX_VERSION.tar.gz" capi="cluster-api-v$CLUSTER_API_VERSION.tar.gz"
  local out="$cache/capmox-v$CAPMOX_VERSION/bin" src="$cache/src/capmox-v$CAPMOX_VERSION" started=$SECONDS
  if [ -x "$out/capmox-manager" ]; then
    say "capmox v$CAPMOX_VERSION: cached"
  elif ! have_archives "$archive" "$capi"; then
    say "capmox v$CAPMOX_VERSION: missing $archive or $capi (put them in $vendor or set LAB_MGMT_VENDOR)"
    return 1
  else
    rm -rf "$src" && mkdir -p "$out"
    unpack "$archive" "$src/capmox"
    unpack "$capi" "$src/cluster-api"
    say "capmox v$CAPMOX_VERSION: building"
    (cd "$src/capmox" && rm -rf test &&
      go mod edit -replace="sigs.k8s.io/cluster-api=$src/cluster-api" -droprequire=sigs.k8s.io/cluster-api/test &&
      go build -trimpath -ldflags "-s -w" -o "$(partial_of "$out/capmox-manager")" ./cmd)
    finish "$out/capmox-manager" "$started"
    rm -rf "$src"
  fi
  printf 'LAB_MGMT_CAPMOX_BIN=%s\n' "$out"
}

# cluster-api-operator (issue 68), which the owner's lab runs from the chart the program pins, at
# that version: the proxy serves its module, built in a copy of itself so that its own go.mod and
# go.sum decide every version, but not the Cluster API it requires (v1.12.10, refused at v1.12.x
# like the core's own), which the unpacked Cluster API archive replaces, v1.12.11: one Cluster API
# source across the box, as for CAPMOX.
build_operator() {
  local version module=sigs.k8s.io/cluster-api-operator capi="cluster-api-v$CLUSTER_API_VERSION.tar.gz" dir
  version="$(stack_pin capiOperatorVersion)"
  local out="$cache/cluster-api-operator-v$version/bin" src="$cache/src/cluster-api-operator-v$version" started=$SECONDS
  if [ -x "$out/cluster-api-operator" ]; then
    say "cluster-api-operator v$version: cached"
  elif ! have_archives "$capi"; then
    say "cluster-api-operator v$version: missing $capi (put it in $vendor or set LAB_MGMT_VENDOR)"
    return 1
  else
    dir="$(module_dir "$module@v$version")" || return 1
    rm -rf "$src" && mkdir -p "$src" "$out"
    cp -a "$dir" "$src/operator" && chmod -R u+w "$src/operator"
    unpack "$capi" "$src/cluster-api"
    say "cluster-api-operator v$version: building"
    (cd "$src/operator" && rm -rf test &&
      go mod edit -replace="sigs.k8s.io/cluster-api=$src/cluster-api" &&
      go build -trimpath -ldflags "-s -w -X sigs.k8s.io/cluster-api-operator/version.gitVersion=v$version" \
        -o "$(partial_of "$out/cluster-api-operator")" ./cmd)
    finish "$out/cluster-api-operator" "$started"
    rm -rf "$src"
  fi
  printf 'LAB_MGMT_OPERATOR_BIN=%s\n' "$out"
}

# k3s's helm-controller, which k3s runs inside its server process and which the lab's k3s (v1.35.8+k3s1,
# `k3sVersion`) has at v0.17.7: its release-1.35 branch took v0.17.7 on 2026-07-28 (k3s PR #14476,
# with klipper-helm v0.13.3-build20260727 as the Jobs' image), before v1.35.8-k3s1 (PR #14544,
# 2026-08-20); docs/testing.md says how that was read. The proxy serves the module (tag v0.17.7,
# commit 21a911f8); it is built in a copy of itself, so that its own go.mod and go.sum decide every
# version, as upstream's scripts/build does, with the version stamped the same way.
HELM_CONTROLLER_VERSION=0.17.7

build_helm_controller() {
  local module=github.com/k3s-io/helm-controller
  local out="$cache/helm-controller-v$HELM_CONTROLLER_VERSION/bin" src="$cache/src/helm-controller-v$HELM_CONTROLLER_VERSION"
  local started=$SECONDS dir
  if [ -x "$out/helm-controller" ]; then
    say "helm-controller v$HELM_CONTROLLER_VERSION: cached"
  else
    if ! dir="$(module_dir "$module@v$HELM_CONTROLLER_VERSION")"; then
      say "helm-controller v$HELM_CONTROLLER_VERSION: not served by $GOPROXY; it needs a git archive of its tag in $vendor"
      return 1
    fi
    rm -rf "$src" && mkdir -p "$cache/src" "$out"
    cp -a "$dir" "$src" && chmod -R u+w "$src"
    say "helm-controller v$HELM_CONTROLLER_VERSION: building"
    (cd "$src" && go build -trimpath \
      -ldflags "-s -w -X $module/pkg/version.Version=v$HELM_CONTROLLER_VERSION" \
      -o "$(partial_of "$out/helm-controller")" .)
    finish "$out/helm-controller" "$started"
    rm -rf "$src"
  fi
  printf 'LAB_MGMT_HELM_CONTROLLER_BIN=%s\n' "$out"
}

# The image of helm-controller's Jobs in the lab's k3s (k3s PR #14476, beside helm-controller v0.17.7):
# klipper-helm v0.13.3-build20260727, whose `entry` script runs the HelmChart's install with Helm
# v4.1.4 (its Dockerfile's HELM_VERSION, commit 05fa3797). The image is stood for by its two files:
# `entry` from the archive of the tag, and helm built from the module at that version as the
# Dockerfile builds it (its go-mod-overrides applied, the same -X stamps). Its two Helm plugins
# (helm-set-status, helm-mapkubeapis) come by commit from GitHub, which the proxy does not serve;
# `entry` calls them only to upgrade or repair a release, which the box's installs never reach.
KLIPPER_HELM_VERSION=0.13.3-build20260727
KLIPPER_HELM_HELM_VERSION=4.1.4

build_klipper_helm() {
  local archive="klipper-helm-v$KLIPPER_HELM_VERSION.tar.gz" module=helm.sh/helm/v4
  local out="$cache/klipper-helm-v$KLIPPER_HELM_VERSION/bin" src="$cache/src/klipper-helm-v$KLIPPER_HELM_VERSION"
  local started=$SECONDS dir k8s
  if [ -x "$out/helm" ] && [ -x "$out/entry" ]; then
    say "klipper-helm v$KLIPPER_HELM_VERSION (helm v$KLIPPER_HELM_HELM_VERSION): cached"
  elif ! have_archives "$archive"; then
    say "klipper-helm v$KLIPPER_HELM_VERSION: missing $archive (put it in $vendor or set LAB_MGMT_VENDOR)"
    return 1
  elif ! dir="$(module_dir "$module@v$KLIPPER_HELM_HELM_VERSION")"; then
    say "klipper-helm v$KLIPPER_HELM_VERSION: helm v$KLIPPER_HELM_HELM_VERSION is not served by $GOPROXY"
    return 1
  else
    rm -rf "$src" && mkdir -p "$src" "$out"
    unpack "$archive" "$src/klipper-helm"
    cp -a "$dir" "$src/helm" && chmod -R u+w "$src/helm"
    say "klipper-helm v$KLIPPER_HELM_VERSION: building helm v$KLIPPER_HELM_HELM_VERSION"
    # The archive's own script applies its overrides, as the Dockerfile runs it.
    (cd "$src/helm" &&
      sh "$src/klipper-helm/scripts/go-mod-overrides.sh" "$src/klipper-helm/go-mod-overrides" >&2 &&
      k8s="$(go list -f '{{.Version}}' -m k8s.io/client-go | tr -d v)" &&
      go build -trimpath -ldflags "-w -s \
        -X $module/internal/version.version=v$KLIPPER_HELM_HELM_VERSION \
        -X $module/internal/version.gitTreeState=clean \
        -X $module/pkg/lint/rules.k8sVersionMajor=$((${k8s%%.*} + 1)) \
        -X $module/pkg/lint/rules.k8sVersionMinor=$(cut -d. -f2 <<<"$k8s") \
        -X $module/pkg/chartutil.k8sVersionMajor=$((${k8s%%.*} + 1)) \
        -X $module/pkg/chartutil.k8sVersionMinor=$(cut -d. -f2 <<<"$k8s")" \
        -o "$(partial_of "$out/helm")" ./cmd/helm)
    install -m 0755 "$src/klipper-helm/entry" "$(partial_of "$out/entry")"
    finish "$out/entry" "$started"
    finish "$out/helm" "$started"
    rm -rf "$src"
  fi
  printf 'LAB_MGMT_KLIPPER_HELM_BIN=%s\n' "$out"
}

# cert-manager's four binaries (issue 68), for the chart v1.21.2 the program pins: the proxy serves
# cert-manager's root module but not the modules of its cmd/ (`<x>-binary`, each with a `replace`
# of the root to ../../), which exist only in git, and the stored history's tags stop at v1.21.1;
# so they come from the archive of v1.21.1, with Venafi's vcert v5.13.7, which the controller's
# Venafi issuer requires and the proxy refuses at every version, from its archive (a `replace`).
CERT_MANAGER_VERSION=1.21.1
VCERT_VERSION=5.13.7
CERT_MANAGER_BINARIES=(controller webhook cainjector startupapicheck)

build_cert_manager() {
  local archive="cert-manager-v$CERT_MANAGER_VERSION.tar.gz" vcert="vcert-v$VCERT_VERSION.tar.gz"
  local out="$cache/cert-manager-v$CERT_MANAGER_VERSION/bin" src="$cache/src/cert-manager-v$CERT_MANAGER_VERSION"
  local started=$SECONDS binary missing=()
  for binary in "${CERT_MANAGER_BINARIES[@]}"; do
    [ -x "$out/cert-manager-$binary" ] || missing+=("$binary")
  done
  if [ "${#missing[@]}" -eq 0 ]; then
    say "cert-manager v$CERT_MANAGER_VERSION: cached"
  elif ! have_archives "$archive" "$vcert"; then
    say "cert-manager v$CERT_MANAGER_VERSION: missing $archive or $vcert (put them in $vendor or set LAB_MGMT_VENDOR)"
    return 1
  else
    rm -rf "$src" && mkdir -p "$out"
    unpack "$archive" "$src/cert-manager"
    unpack "$vcert" "$src/vcert"
    say "cert-manager v$CERT_MANAGER_VERSION: building ${missing[*]}"
    for binary in "${missing[@]}"; do
      (cd "$src/cert-manager/cmd/$binary" &&
        go mod edit -replace="github.com/Venafi/vcert/v5=$src/vcert" &&
        go build -trimpath \
          -ldflags "-s -w -X github.com/cert-manager/cert-manager/pkg/util.AppVersion=v$CERT_MANAGER_VERSION" \
          -o "$(partial_of "$out/cert-manager-$binary")" .)
      finish "$out/cert-manager-$binary" "$started"
    done
    rm -rf "$src"
  fi
  printf 'LAB_MGMT_CERT_MANAGER_BIN=%s\n' "$out"
}

# Two lanes build side by side, so that both cores stay busy while one links or downloads (Go's
# module and build caches are safe for concurrent builds), each printing its lines as it goes:
# the CLI and what builds on its packages; beside it, the control plane, then the plugins that
# come from archives. Each lane is a sequence of plain commands, so the first failure ends it.
targets=" $* "
wants() { [[ "$targets" == *" $1 "* ]]; }

# The proxmoxve and command plugins wait for the other lane's CLI (a plugin whose archive is
# missing is installed by it): its binary appears whole (finish), unless that lane ended without it.
await_cli() {
  cli_bin="$cache/pulumi-v$(cli_version "$(pinned pulumi)")/bin"
  until [ -x "$cli_bin/pulumi" ]; do
    if ! kill -0 "$1" 2>/dev/null; then
      say "no pulumi CLI to install plugins with (its build failed above)"
      return 1
    fi
    sleep 2
  done
}

# From an empty cache the kubernetes plugin's lane is the longer (2026-12-05: the CLI lane ended
# at 28 min 26 s without the autoscaler, the other at 26 min 58 s), so cluster-autoscaler goes
# beside it: both then ended within 6 s of each other, at 29 min 51 s.
cli_lane() {
  locked pulumi build_cli
  if wants plugins; then
    locked pulumi-resource-kubernetes build_kubernetes_plugin
    locked pulumi-language-python build_language_host
  fi
  if wants workload; then
    locked helm build_helm
    locked ipam-in-cluster build_ipam
    locked chart-sources fetch_chart_sources
  fi
}

# helm-controller and cert-manager go in this lane, which is empty before the plugins: asked for
# alone, they build beside the CLI rather than after it.
beside_lane() {
  if wants control-plane; then
    locked control-plane build_control_plane
  fi
  if wants helm-controller; then
    locked helm-controller build_helm_controller
    locked klipper-helm build_klipper_helm
  fi
  if wants cert-manager; then
    locked cert-manager build_cert_manager
  fi
  if wants operator; then
    locked cluster-api-operator build_operator
  fi
  if wants plugins; then
    await_cli "$1"
    locked pulumi-resource-proxmoxve build_proxmoxve_plugin
    locked pulumi-resource-command build_command_plugin
  fi
  if wants workload; then
    locked cluster-api build_cluster_api
    locked cluster-autoscaler build_autoscaler
    locked capmox build_capmox
  fi
}

for target in "$@"; do
  case "$target" in
    control-plane | plugins | workload | helm-controller | cert-manager | operator) ;;
    *) say "unknown target $target; expected control-plane, plugins, workload, helm-controller, cert-manager or operator" && exit 2 ;;
  esac
done
started=$SECONDS
cli_lane &
cli_pid=$!
beside_lane "$cli_pid" &
beside_pid=$!
failed=0
wait "$cli_pid" || failed=1
wait "$beside_pid" || failed=1
if [ "$failed" -ne 0 ]; then
  say "a build failed (its error is above)"
  exit 1
fi
say "done in $((SECONDS - started)) s"
