#!/usr/bin/env bash
# Waits, at most $1 seconds, until every node runs k3s $2 and is Ready on a heartbeat sent after k3s
# last started. After a restart or an upgrade the Node object keeps its old Ready=True (and the old
# kubeletVersion) until the node-monitor grace period ends: that stale Ready must not count.
set -euo pipefail

bound_seconds="$1"
version="$2"
deadline=$((SECONDS + bound_seconds))

# When the running k3s process started: its kubelet posts a fresh status (and heartbeat) at once.
started_at="$(systemctl show k3s -p ExecMainStartTimestamp --value)"
if [ -z "$started_at" ] || [ "$started_at" = n/a ]; then
  echo "k3s is not running" >&2
  exit 1
fi
started="$(date -d "$started_at" +%s)"

# One line a node: name, kubelet version, Ready status, Ready's last heartbeat.
columns='{range .items[*]}{.metadata.name}{" "}{.status.nodeInfo.kubeletVersion}{" "}'
columns+='{.status.conditions[?(@.type=="Ready")].status}{" "}'
columns+='{.status.conditions[?(@.type=="Ready")].lastHeartbeatTime}{"\n"}{end}'

# Prints why a node is not done yet, nothing once every node is.
pending() {
  local nodes name kubelet ready heartbeat
  nodes="$(k3s kubectl get nodes --request-timeout=10s -o jsonpath="$columns" 2>&1)" || {
    echo "the API server does not answer yet: $nodes"
    return
  }
  if [ -z "$nodes" ]; then
    echo "no node registered"
    return
  fi
  while read -r name kubelet ready heartbeat; do
    if [ "$kubelet" != "$version" ]; then
      echo "node $name runs $kubelet, not $version"
    elif [ "$ready" != True ]; then
      echo "node $name is not Ready (${ready:-no status})"
    elif [ -z "$heartbeat" ] || [ "$(date -d "$heartbeat" +%s)" -le "$started" ]; then
      echo "node $name is Ready only as of ${heartbeat:-never}, before k3s started at $started_at"
    fi
  done <<<"$nodes"
}

while why="$(pending)" && [ -n "$why" ]; do
  if [ "$SECONDS" -ge "$deadline" ]; then
    echo "not ready within ${bound_seconds}s: $why" >&2
    exit 1
  fi
  sleep 2
done
echo "every node Ready on k3s $version"
