#!/usr/bin/env bash
# Hands the k3s HelmCharts named in the arguments (namespace kube-system) over to whatever manages
# their Helm releases next: k3s and its helm-controller let go of them, while the releases (their
# Secrets) and the workloads stay exactly as they are. A second run finds nothing left to do.
set -euo pipefail

namespace="kube-system"
manifests_dir="${K3S_MANIFESTS_DIR:-/var/lib/rancher/k3s/server/manifests}"
manifests_dir="${manifests_dir%/}"
# k3s applies every .yaml/.yml/.json file under the manifests directory, subdirectories included,
# so the files go to a sibling directory that k3s never reads. Renaming them to *.skip in place
# would stop k3s too, but leaves them one rename away from being applied again, and a
# `NAME.yaml.skip` also hides any later `NAME.yaml` that someone puts there on purpose.
handed_over_dir="${manifests_dir}-handed-over"

# The files k3s would apply (as it picks them: .yaml, .yml or .json, no dotfiles, subdirectories
# too) holding a HelmChart called $1 in kube-system. Read as YAML, because file names and layout
# vary; a file that is no YAML stops the run, named but not shown (values may hold secrets).
defining_files() {
  python3 -c '
import os, sys, yaml
base, name = sys.argv[1:]
for root, dirs, files in os.walk(base):
    dirs.sort()
    for file in sorted(files):
        if file.startswith(".") or not file.lower().endswith((".yaml", ".yml", ".json")):
            continue
        path = os.path.join(root, file)
        try:
            with open(path, "rb") as stream:
                documents = list(yaml.safe_load_all(stream))
        except yaml.YAMLError:
            sys.exit(f"{path}: not valid YAML; cannot tell whether it defines {name}")
        for doc in documents:
            meta = doc.get("metadata") if isinstance(doc, dict) else None
            if isinstance(meta, dict) and doc.get("kind") == "HelmChart" and meta.get("name") == name \
                    and meta.get("namespace", "kube-system") == "kube-system":
                print(path)
                break
' "$manifests_dir" "$1"
}

if [ "$#" -eq 0 ]; then
  echo "usage: $0 HELMCHART..." >&2
  exit 2
fi
for name in "$@"; do
  if ! [[ "$name" =~ ^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$ ]]; then
    echo "$name: not a HelmChart name" >&2
    exit 2
  fi
done

for name in "$@"; do
  files="$(defining_files "$name")"
  present="$(k3s kubectl -n "$namespace" get helmchart "$name" --ignore-not-found -o name)"
  if [ -z "$present" ] && [ -z "$files" ]; then
    echo "$name: not present"
    continue
  fi

  if [ -n "$present" ]; then
    echo "$name: HelmChart found in $namespace"
    # First: from here on the helm-controller leaves the chart alone, its finalizer included, so
    # nothing below can make it run a helm-delete job.
    k3s kubectl -n "$namespace" annotate helmchart "$name" helmcharts.helm.cattle.io/unmanaged=true \
      --overwrite >/dev/null
    echo "$name: annotated helmcharts.helm.cattle.io/unmanaged=true"
  else
    echo "$name: HelmChart not present, but k3s would create it again from its manifest"
  fi

  # Before the object goes: k3s re-applies these files (at the latest when it starts), which
  # would bring back a managed HelmChart that installs over the release.
  if [ -z "$files" ]; then
    echo "$name: no manifest file defines it"
  fi
  while IFS= read -r file; do
    [ -n "$file" ] || continue
    target="$handed_over_dir/${file#"$manifests_dir"/}"
    if [ -e "$target" ]; then
      echo "$name: $target exists already; not overwriting it" >&2
      exit 1
    fi
    install -d -m 0700 "$handed_over_dir" "$(dirname "$target")"
    mv "$file" "$target"
    echo "$name: moved $file to $target"
  done <<<"$files"

  if [ -n "$present" ]; then
    # Finalizer off before the delete: the controller's remove handler behind it is what runs
    # helm delete, and for an unmanaged chart nothing would ever remove it (the delete would hang).
    k3s kubectl -n "$namespace" patch helmchart "$name" --type=merge \
      -p '{"metadata":{"finalizers":null}}' >/dev/null
    echo "$name: finalizers removed"
    k3s kubectl -n "$namespace" delete helmchart "$name" --ignore-not-found --timeout=60s >/dev/null
    echo "$name: HelmChart deleted; its Helm release and workloads are left as they are"
  fi
done
