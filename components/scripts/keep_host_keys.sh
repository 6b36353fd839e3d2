#!/usr/bin/env bash
# Proxmox derives the NoCloud instance-id from the cloud-init user-data and network config, so a
# change to the VM's user, keys, name, address, gateway or DNS is a new instance at the next boot.
# cloud-init's ssh module then deletes the host keys (ssh_deletekeys, true unless set) and makes
# new ones, and every pinned SSH step would be refused. With it false, the module keeps the keys
# and generates only the types that are missing. A drop-in of the system config is read at every
# boot, and Proxmox's user-data never sets the key, so nothing overrides it.
set -euo pipefail

drop_in="${CLOUD_CFG_DROP_IN:-/etc/cloud/cloud.cfg.d/99-lab-mgmt-keep-host-keys.cfg}"
wanted="# Written by lab-mgmt (keep_host_keys.sh): a new instance-id keeps the SSH host keys.
ssh_deletekeys: false"

if [ -f "$drop_in" ] && [ "$(cat "$drop_in")" = "$wanted" ]; then
  echo "SSH host keys kept across a new cloud-init instance (unchanged)"
  exit 0
fi

install -d -m 0755 "$(dirname "$drop_in")"
staged="$(mktemp "$drop_in.XXXXXX")"
printf '%s\n' "$wanted" >"$staged"
chmod 0644 "$staged"
mv -f "$staged" "$drop_in"
echo "SSH host keys kept across a new cloud-init instance ($drop_in written)"
