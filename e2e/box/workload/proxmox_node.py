"""The Proxmox node a box's workload cluster is cloned on: the Proxmox VE stand-in at the program's
proxmoxEndpoint (e2e/standins/proxmox/), which the real CAPMOX manager drives with the token the
program's credentials Secret holds, the template VMs the scenario names made on it as the owner
makes a CAPMOX template (`qm create` and `qm template`), and the workload VMs' insides (vm_guest.py)
told of each power change.

    with proxmox_node.serving(base, entry, tokens) as (pve, guests): ...   # the workload box
    proxmox_node.equip(pve, guests, templates_of(entry))            # a box whose stand-in runs already
"""

from __future__ import annotations

import collections
import re
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from e2e.box import scenarios
from e2e.standins.proxmox import pve_api_standin
from e2e.standins.workload.vm_guest import WorkloadGuests

# The owner's template (an Ubuntu cloud image with the kubelet, CAPMOX's image-builder recipe): a
# disk no larger than any boot volume a scenario declares, since Proxmox VE refuses to shrink one.
TEMPLATE_DISK_GIB = 10
TEMPLATE_CORES = 2
TEMPLATE_MEMORY_MIB = 2048
# The owner's node as CAPMOX's scheduler reserves memory on it: room for the management VM, lab1's
# control plane and its most workers at the template's default 16 GiB, with a rollout's surge.
NODE_MEMORY = 128 << 30
_ID = re.compile(r"/(qemu|tasks)/[^/]+")
_VOLUME = re.compile(r"/content/.+$")
# The template VM an owner builds for the next Kubernetes version (image-builder): one up from the
# entry's, where the rollout scenario moves templateVmId (e2e/box/workload/lab1_rollouts.py).
TEMPLATE_STEP = 1


def templates_of(entry: Mapping[str, Any]) -> tuple[int, ...]:
    """The template VMIDs a scenario of the workload cluster `entry` clones from."""
    first = int(entry["templateVmId"])
    return (first, first + TEMPLATE_STEP)


def equip(pve: pve_api_standin.PveApiStandIn, guests: WorkloadGuests, templates: Iterable[int]) -> None:
    """The node ready for CAPMOX: `guests` read the ISOs it stores, its templates made."""
    guests.volume_path = pve.volume_path
    make_templates(pve, templates)


def make_templates(pve: pve_api_standin.PveApiStandIn, vmids: Iterable[int]) -> None:
    for vmid in vmids:
        pve.made_template(
            vmid,
            f"ubuntu-2404-kube-{vmid}",
            cores=TEMPLATE_CORES,
            disk_gib=TEMPLATE_DISK_GIB,
            memory_mib=TEMPLATE_MEMORY_MIB,
        )


def calls_by_route(pve: pve_api_standin.PveApiStandIn) -> dict[str, int]:
    """How many calls the stand-in answered, by method and path with each VMID, UPID and volume
    as a placeholder: what CAPMOX asks of a node over a scenario."""
    counted = collections.Counter(f"{call.method} {_route(call.path)}" for call in pve.calls)
    return dict(counted.most_common())


def _route(path: str) -> str:
    return _VOLUME.sub("/content/{volume}", _ID.sub(r"/\1/{id}", path))


@contextmanager
def template_gone(pve: pve_api_standin.PveApiStandIn, vmid: int) -> Iterator[None]:
    """The template `qm destroy`ed on the node for the block (a clone from it fails as Proxmox VE
    fails it), and made again after."""
    pve.qm_destroy(vmid)
    try:
        yield
    finally:
        make_templates(pve, (vmid,))


@contextmanager
def serving(
    base: Path, entry: Mapping[str, Any], tokens: Mapping[tuple[str, str], Mapping[str, Mapping[str, int]]]
) -> Iterator[tuple[pve_api_standin.PveApiStandIn, WorkloadGuests]]:
    """The stand-in at the program's proxmoxEndpoint (the namespace must hold its address) with
    `tokens`, serving the node `entry` clones on, with its templates, for the block."""
    guests = WorkloadGuests()
    base.mkdir(parents=True, exist_ok=True)
    with pve_api_standin.serve(
        tokens,
        base,
        (scenarios.PROXMOX_ADDRESS, scenarios.PROXMOX_PORT),
        guest=guests,
        node=entry["sourceNode"],
        node_memory=NODE_MEMORY,
    ) as pve:
        equip(pve, guests, templates_of(entry))
        yield pve, guests
