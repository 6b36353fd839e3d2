#!/usr/bin/env bash
# First contact with a (new) VM: wait until cloud-init has finished the first boot, then print the
# host's ed25519 public key, which every later SSH command pins.
set -euo pipefail

cloud_init_bound_seconds=1200
host_key_file="${HOST_KEY_FILE:-/etc/ssh/ssh_host_ed25519_key.pub}"

rc=0
timeout "$cloud_init_bound_seconds" cloud-init status --wait >/dev/null || rc=$?
# 2 means "done with recoverable errors", which Proxmox-generated user-data always causes: it sets
# `user:` as a string, deprecated since cloud-init 22.2. Anything else is a real failure.
if [ "$rc" -ne 0 ] && [ "$rc" -ne 2 ]; then
  echo "cloud-init did not finish cleanly (exit $rc):" >&2
  cloud-init status --long >&2 || true
  exit "$rc"
fi

# Only type and key: the comment is the host name, which is not part of the key's identity.
cut -d ' ' -f 1,2 "$host_key_file"
