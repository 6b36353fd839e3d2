"""The workload clusters' stand-ins together, on a management cluster, for a block: the
KubeadmControlPlane stand-in and the kubelets of the VMs that CAPMOX cloned and booted (`guests`,
the workload VMs' insides on the Proxmox stand-in: vm_guest.py), one pass over all of them every
`interval` seconds (a real controller's watch answers sooner), each part on its own so that one
refusing an object does not stop the others. Each workload control plane they start stops with
the block; a VM stopped or destroyed takes its kubelet with it.

    with providers.running(mgmt, root, guests) as standins: ... standins.record.errors, .timeline
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from e2e.engine import control_plane
from e2e.engine.control_plane import PROVIDERS_USER, ControlPlane
from e2e.engine.kube_api import UnreachableError
from e2e.standins.cluster.controller_loop import looping
from e2e.standins.workload import kubeadm_control_plane, kubelet
from e2e.standins.workload.objects import Client, Record
from e2e.standins.workload.vm_guest import WorkloadGuests

# What lab1's kube-controller-manager runs: all its default controllers (the node lifecycle one
# among them, which is why the kubelets heartbeat), as kubeadm's does.
WORKLOAD_CONTROLLERS = ("*",)


@dataclass
class WorkloadStandIns:
    record: Record = field(default_factory=Record)
    running: dict[str, ControlPlane] = field(default_factory=dict)
    """Each workload cluster's control plane, by `namespace/cluster`."""
    registered: set[str] = field(default_factory=set)
    """`namespace/cluster/node` of each Node a kubelet stand-in runs, the control planes' among them."""
    control_plane_nodes: dict[str, str] = field(default_factory=dict)
    """The newest Node each workload control plane registered, by `namespace/cluster`."""
    started_in: dict[str, float] = field(default_factory=dict)
    """Seconds each workload control plane took to answer, by `namespace/cluster`."""
    renewed: dict[str, float] = field(default_factory=dict)
    """When each Node's Lease was last renewed (time.monotonic()), by `namespace/cluster/node`."""


@contextmanager
def running(
    mgmt: ControlPlane, root: Path, guests: WorkloadGuests, *, interval: float = 1.0
) -> Iterator[WorkloadStandIns]:
    standins = WorkloadStandIns()
    guests.on_destroy = lambda boot: kubelet.forget(standins.registered, boot)
    client = Client(mgmt, PROVIDERS_USER)
    with ExitStack() as stack:

        def start(key: str, host: str, port: int) -> ControlPlane:
            began = time.monotonic()
            lab = stack.enter_context(
                control_plane.running(
                    (base := root / key.replace("/", "-")),
                    host,
                    port=port,
                    pki=control_plane.made_pki(base / "kubeadm-pki", host),
                    controllers=WORKLOAD_CONTROLLERS,
                    scheduler=True,
                )
            )
            standins.started_in[key] = round(time.monotonic() - began, 1)
            return lab

        parts: dict[str, Callable[[], None]] = {
            "KubeadmControlPlanes": lambda: kubeadm_control_plane.reconcile_control_planes(
                client,
                standins.record,
                standins.running,
                start,
                registered=standins.registered,
                control_plane_nodes=standins.control_plane_nodes,
                guests=guests,
            ),
            "kubelets": lambda: kubelet.reconcile(
                client, standins.record, standins.running, standins.registered, guests, renewed=standins.renewed
            ),
        }

        def step() -> None:
            client.reread()
            for doing, part in parts.items():
                try:
                    part()
                except UnreachableError as down:
                    # A kubelet or a controller whose API server does not answer tries again at its
                    # next pass; a scenario that stops one reads when.
                    standins.record.did(f"cannot reconcile {doing}: {down}", "unreachable")
                except (KeyError, ValueError, RuntimeError) as refused:
                    message = f"cannot reconcile {doing}: {refused}"
                    if message not in standins.record.errors:
                        standins.record.errors.append(message)

        # The stack's last exit (the first entered) stops the loop before the control planes.
        with looping(mgmt, PROVIDERS_USER, step, standins.record.errors, "reconcile", interval=interval):
            yield standins
