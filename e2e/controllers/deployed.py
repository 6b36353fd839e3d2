"""What cluster-api-operator would deploy for each of the program's provider CRs, by the CR's kind
(the operator stand-in's `on_installed` starts it): the Cluster API managers (cluster_api.py),
the IPAM in-cluster manager (ipam.py) and CAPMOX's (capmox.py)."""

from __future__ import annotations

from contextlib import ExitStack
from pathlib import Path

from e2e.controllers import capmox, cluster_api, ipam, manager
from e2e.controllers.manager import Manager, RunningManager
from e2e.engine.control_plane import ControlPlane

FOR_PROVIDER: dict[str, Manager] = {
    "CoreProvider": cluster_api.CORE,
    "ControlPlaneProvider": cluster_api.CONTROL_PLANE,
    "BootstrapProvider": cluster_api.BOOTSTRAP,
    "IPAMProvider": ipam.IN_CLUSTER,
    "InfrastructureProvider": capmox.PROXMOX,
}


def start_for(
    kind: str, cluster: ControlPlane, base: Path, address: str, *, stack: ExitStack, started: list[RunningManager]
) -> None:
    """Starts the real manager for a provider CR of `kind` against `cluster`, at `address`, its
    files under `base`/its binary, until `stack` closes, and adds it to `started`; nothing for a
    kind without one."""
    if kind in FOR_PROVIDER:
        found = FOR_PROVIDER[kind]
        started.append(stack.enter_context(manager.running(cluster, base / found.binary, address, found)))
