"""Where the program's lab1 scenario (lab1_autoscaling.py) runs: the workload cluster it declares
at each site, and what the site's network namespace must hold."""

from __future__ import annotations

from typing import Any

import yaml

from e2e.box.workload import workload_box
from e2e.engine.cli import PROJECT, REPO, STACK

# Where the scenario runs: the lab's own declaration (Pulumi.lab.yaml's first workload cluster as
# the owner keeps it), or another site's, with every name, address, network and size changed.
SITES: dict[str, dict[str, Any]] = {
    "lab": {},
    "other": {
        "name": "edge1",
        "namespace": "edge",
        "controlPlaneEndpoint": "10.20.30.40",
        "nodeIpRanges": ["10.20.30.41-10.20.30.60"],
        "gateway": "10.20.30.1",
        "dnsServers": ["10.20.30.1"],
        "vlan": 30,
        "sourceNode": "pve2",
        "allowedNodes": ["pve2"],
        "templateVmId": 9100,
        "bridge": "vmbr1",
        "workers": {"minSize": 0, "maxSize": 3, "sockets": 1, "cores": 2, "memoryMib": 2048, "diskGib": 20},
    },
}
# CAPMOX's template's own sizing (its variables' defaults), where the declaration sets none.
TEMPLATE_SIZING = {"sockets": 2, "cores": 4, "memoryMib": 16384, "diskGib": 100}


def declared(site: str) -> dict[str, Any]:
    """The workload cluster the scenario declares at `site`: Pulumi.lab.yaml's first one with the
    site's values over it, and the template's sizing where the workers set none."""
    stack = yaml.safe_load((REPO / f"Pulumi.{STACK}.yaml").read_text())["config"]
    entry = {**stack[f"{PROJECT}:workloadClusters"][0], **SITES[site]}
    return entry | {"workers": TEMPLATE_SIZING | entry.get("workers", {})}


def addresses(site: str) -> list[str]:
    """What the scenario's network namespace must hold (workload_box.addresses)."""
    return workload_box.addresses(declared(site))
