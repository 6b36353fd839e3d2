#!/usr/bin/env bash
# qemu-guest-agent lets Proxmox see the VM's addresses and shut it down cleanly; the Ubuntu cloud
# image does not ship it.
set -euo pipefail

if ! dpkg-query -W -f='${Status}' qemu-guest-agent 2>/dev/null | grep -q 'install ok installed'; then
  # On a first boot unattended-upgrades may hold the dpkg lock for a while: wait for it, bounded.
  apt-get -o DPkg::Lock::Timeout=600 update -q
  DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -q qemu-guest-agent
fi
# The unit is static on Ubuntu (started by udev when the virtio port exists): is-enabled says so.
systemctl is-enabled --quiet qemu-guest-agent || systemctl enable qemu-guest-agent
systemctl is-active --quiet qemu-guest-agent || systemctl start qemu-guest-agent
echo "qemu-guest-agent running"
