#!/usr/bin/env bash
# Waits, at most $1 seconds, until the Cluster API Operator can take provider CRs: its CRDs are
# Established, its deployment is Available, and its admission webhook answers. The operator's
# Helm release reports ready before cert-manager's CA injector has patched the webhook's CA
# bundle, and a CR sent in that moment fails.
set -euo pipefail

bound_seconds="$1"
namespace="capi-operator-system"
deadline=$((SECONDS + bound_seconds))

remaining() {
  local left=$((deadline - SECONDS))
  echo $((left > 1 ? left : 1))
}

for kind in core bootstrap controlplane infrastructure ipam; do
  k3s kubectl wait --for=condition=Established --timeout="$(remaining)s" \
    "crd/${kind}providers.operator.cluster.x-k8s.io"
done
k3s kubectl -n "$namespace" wait --for=condition=Available --timeout="$(remaining)s" deployment --all

# A server-side dry run goes through the webhook without creating anything. A denial (say, "a
# CoreProvider exists already") is an answer too; only a webhook that cannot be called is not.
probe='{"apiVersion": "operator.cluster.x-k8s.io/v1alpha2", "kind": "CoreProvider",
  "metadata": {"name": "webhook-probe", "namespace": "'"$namespace"'"}, "spec": {"version": "v0.0.0"}}'
until answer="$(printf '%s' "$probe" | k3s kubectl create --dry-run=server -o name -f - 2>&1)" ||
  [[ "$answer" == *"denied the request"* ]]; do
  if [ "$SECONDS" -ge "$deadline" ]; then
    echo "the operator's webhook did not answer within ${bound_seconds}s: $answer" >&2
    exit 1
  fi
  sleep 2
done
echo "cluster-api-operator ready"
