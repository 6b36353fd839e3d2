"""The VM part of the program for the lab in a box: components.management_vm (the cloud image and
the VM) as __main__.py wires it, alone, under the real engine and proxmoxve plugin against the
Proxmox VE API stand-in (e2e/standins/proxmox/pve_api_standin.py). The box's engine runs this file as the project's
`__main__.py` (e2e.engine.cli.fresh_engine's `main`).

Alone, because `pulumi up --target` on the whole program still creates the untargeted Kubernetes
provider, whose parent and kubeconfig come from the k3s steps, and fails on it.
"""

from __future__ import annotations

from components.management_vm import ManagementVm
from components.run_records import RunRecords
from components.settings import load_settings

settings = load_settings()
records = RunRecords()
vm = ManagementVm("mgmt", settings.proxmox, settings.vm, settings.image, adopt=settings.adopt, records=records)
# What the box's VM scenarios read: the instance the next boot is of.
records.keep("instanceKey", vm.instance_key)
records.write()
