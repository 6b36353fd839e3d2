#!/usr/bin/env bash
# Prints k3s's admin kubeconfig; the program rewrites it and keeps it only as a secret.
set -euo pipefail

cat "${K3S_KUBECONFIG_FILE:-/etc/rancher/k3s/k3s.yaml}"
