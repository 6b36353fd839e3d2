#!/usr/bin/env bash
# Writes k3s's config.yaml (given base64-encoded as $1) when its content differs, and restarts an
# installed k3s so that it takes the new content; the k3s installer never manages this file.
set -euo pipefail

config_file="${K3S_CONFIG_FILE:-/etc/rancher/k3s/config.yaml}"
wanted="$(printf '%s' "$1" | base64 -d)"

if [ -f "$config_file" ] && [ "$(cat "$config_file")" = "$wanted" ]; then
  echo "k3s config unchanged"
  exit 0
fi

install -d -m 0755 "$(dirname "$config_file")"
staged="$(mktemp "$config_file.XXXXXX")"
printf '%s\n' "$wanted" >"$staged"
chmod 0600 "$staged"
mv -f "$staged" "$config_file"

if command -v k3s >/dev/null 2>&1; then
  systemctl restart k3s
  echo "k3s config changed; k3s restarted"
else
  echo "k3s config written"
fi
