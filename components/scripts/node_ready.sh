#!/usr/bin/env bash
# Waits, at most $1 seconds, until the node has registered and is Ready.
set -euo pipefail

bound_seconds="$1"
deadline=$((SECONDS + bound_seconds))

# Right after a (re)start the node object may not exist yet, and `kubectl wait --all` fails at once
# when nothing matches: poll for it first, within the same bound.
until [ -n "$(k3s kubectl get nodes -o name --request-timeout=10s 2>/dev/null)" ]; do
  if [ "$SECONDS" -ge "$deadline" ]; then
    echo "no node registered within ${bound_seconds}s" >&2
    exit 1
  fi
  sleep 2
done

remaining=$((deadline - SECONDS))
[ "$remaining" -ge 1 ] || remaining=1
k3s kubectl wait --for=condition=Ready node --all --timeout="${remaining}s"
