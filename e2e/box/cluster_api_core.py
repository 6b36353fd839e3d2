"""The real Cluster API core controllers in the box (tests/test_box_cluster_api.py): a management API
server, the operator stand-in installing each provider's real CRDs from the archives
(`real_crds=True`), and the real Cluster API manager with its webhooks
(e2e/controllers/cluster_api.py). As the admin, with kubectl, it creates a workload cluster's
objects as CAPMOX's default template has them (v1beta2, a MachineDeployment with the autoscaler's
min and max size annotations and no replicas), then scales the MachineDeployment to 1 through its
/scale subresource. It reports what the real controllers and webhooks did, read from the objects
and the audit log, and how long each part took. No control plane, bootstrap or infrastructure
provider runs: no object of theirs gets a status.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from e2e.box.scenarios import VM_ADDRESS
from e2e.controllers import cluster_api
from e2e.engine import control_plane
from e2e.standins.cluster import operator_standin, playbook_lab

NAME, NAMESPACE = "lab1", "default"
WORKERS = f"{NAME}-workers"
MIN_SIZE, MAX_SIZE = "0", "3"
SIZE_ANNOTATION = "cluster.x-k8s.io/cluster-api-autoscaler-node-group-{}-size"
BOUND_SECONDS = 120.0
# The control's second cluster, and what Cluster API says of a CRD without its contract label.
UNLABELLED = "lab2"
CONTRACT_ERROR = "cannot find any versions matching contract versions"
POLL_SECONDS = 0.25


def lab_objects(name: str = NAME) -> list[dict[str, Any]]:
    """The Cluster, its ProxmoxCluster, the worker ProxmoxMachineTemplate and KubeadmConfigTemplate,
    and the worker MachineDeployment, as CAPMOX v0.9.0's cluster-template.yaml renders them, less
    the control plane (no KubeadmControlPlane: its controller does not run here) and with no
    `spec.replicas` on the MachineDeployment."""
    label = {"cluster.x-k8s.io/cluster-name": name}
    infra, bootstrap = "infrastructure.cluster.x-k8s.io", "bootstrap.cluster.x-k8s.io"
    return [
        {
            "apiVersion": "cluster.x-k8s.io/v1beta2",
            "kind": "Cluster",
            "metadata": {"name": name, "namespace": NAMESPACE, "labels": label},
            "spec": {
                "clusterNetwork": {"pods": {"cidrBlocks": ["10.244.0.0/16"]}},
                "infrastructureRef": {"apiGroup": infra, "kind": "ProxmoxCluster", "name": name},
            },
        },
        {
            "apiVersion": f"{infra}/v1alpha2",
            "kind": "ProxmoxCluster",
            "metadata": {"name": name, "namespace": NAMESPACE, "labels": label},
            "spec": {
                "controlPlaneEndpoint": {"host": "192.168.4.50", "port": 6443},
                "ipv4Config": {"addresses": ["192.168.4.60-192.168.4.69"], "prefix": 24, "gateway": "192.168.4.8"},
                "dnsServers": ["8.8.8.8", "2.2.2.2"],
                "allowedNodes": [],
            },
        },
        {
            "apiVersion": f"{infra}/v1alpha2",
            "kind": "ProxmoxMachineTemplate",
            "metadata": {"name": f"{name}-worker", "namespace": NAMESPACE},
            "spec": {
                "template": {
                    "spec": {
                        **{"sourceNode": "pv1-1", "templateID": 9000, "format": "qcow2", "full": True},
                        **{"numSockets": 2, "numCores": 4, "memoryMiB": 16384},
                        "disks": {"bootVolume": {"disk": "scsi0", "sizeGb": 100}},
                        "network": {"networkDevices": [{"bridge": "vmbr0", "model": "virtio", "name": "net0"}]},
                    }
                }
            },
        },
        {
            "apiVersion": f"{bootstrap}/v1beta2",
            "kind": "KubeadmConfigTemplate",
            "metadata": {"name": f"{name}-worker", "namespace": NAMESPACE},
            "spec": {
                "template": {"spec": {"users": [{"name": "root", "sshAuthorizedKeys": ["ssh-ed25519 AAAA box"]}]}}
            },
        },
        {
            "apiVersion": "cluster.x-k8s.io/v1beta2",
            "kind": "MachineDeployment",
            "metadata": {
                "name": f"{name}-workers",
                "namespace": NAMESPACE,
                "labels": label,
                "annotations": {SIZE_ANNOTATION.format("min"): MIN_SIZE, SIZE_ANNOTATION.format("max"): MAX_SIZE},
            },
            "spec": {
                "clusterName": name,
                "selector": {"matchLabels": {}},
                "template": {
                    "metadata": {"labels": label},
                    "spec": {
                        "clusterName": name,
                        "version": "v1.35.9",
                        "bootstrap": {
                            "configRef": {
                                "apiGroup": bootstrap,
                                "kind": "KubeadmConfigTemplate",
                                "name": f"{name}-worker",
                            }
                        },
                        "infrastructureRef": {
                            "apiGroup": infra,
                            "kind": "ProxmoxMachineTemplate",
                            "name": f"{name}-worker",
                        },
                    },
                },
            },
        },
    ]


def _until(what: str, found: Callable[[], Any]) -> tuple[Any, float]:
    """`found()`'s first truthy answer and the seconds it took; polls, bounded."""
    started = time.monotonic()
    while time.monotonic() - started < BOUND_SECONDS:
        if answer := found():
            return answer, round(time.monotonic() - started, 2)
        time.sleep(POLL_SECONDS)
    raise AssertionError(f"no {what} within {BOUND_SECONDS}s")


def _get(cluster: control_plane.ControlPlane, *args: str) -> Any:
    done = cluster.kubectl_as(cluster.kubeconfig, "get", *args, "-n", NAMESPACE, "-o", "json")
    return json.loads(done.stdout) if done.returncode == 0 else None


def _writes(cluster: control_plane.ControlPlane, mark: int) -> list[dict[str, Any]]:
    """Each write to a cluster.x-k8s.io group after the audit log's `mark`: who, verb, resource,
    name, and which mutating webhooks changed it."""
    writes = []
    for event in cluster.audit()[mark:]:
        ref = event.get("objectRef", {})
        if not ref.get("apiGroup", "").endswith("cluster.x-k8s.io") or event["verb"] not in {
            "create",
            "update",
            "patch",
        }:
            continue
        mutated = [
            json.loads(value)["webhook"]
            for key, value in (event.get("annotations") or {}).items()
            if key.startswith("mutation.webhook.admission.k8s.io/") and json.loads(value).get("mutated")
        ]
        writes.append(
            {
                "user": event["user"]["username"],
                "verb": event["verb"],
                "resource": ref.get("resource", "") + (f"/{ref['subresource']}" if ref.get("subresource") else ""),
                "name": ref.get("name", ""),
                "code": event.get("responseStatus", {}).get("code"),
                "mutated_by": mutated,
            }
        )
    return writes


def _condition(cluster: control_plane.ControlPlane, name: str, kind: str = "InfrastructureReady") -> str:
    """`reason: message` of the Cluster's condition, or "" while it has none."""
    found = _get(cluster, "cluster", name) or {}
    for condition in found.get("status", {}).get("conditions", []):
        if condition["type"] == kind:
            return f"{condition['reason']}: {condition.get('message', '')}"
    return ""


def _without_contract_labels(
    cluster: control_plane.ControlPlane, manager: cluster_api.ClusterApiManager
) -> dict[str, Any]:
    """The control: with the contract labels taken off the ProxmoxCluster CRD, a second Cluster's
    infrastructure cannot be resolved, and the manager says why."""
    crd = "crd/proxmoxclusters.infrastructure.cluster.x-k8s.io"
    cluster.kubectl("label", crd, "cluster.x-k8s.io/v1beta1-", "cluster.x-k8s.io/v1beta2-")
    cluster.kubectl("create", "-f", "-", stdin=yaml.safe_dump_all(lab_objects(UNLABELLED)[:2]))
    said, _ = _until(
        "the manager refusing an unlabelled CRD",
        lambda: [
            line for line in manager.log.read_text().splitlines() if CONTRACT_ERROR in line and UNLABELLED in line
        ],
    )
    return {"log": said[0], "condition": _condition(cluster, UNLABELLED)}


def core_controllers(root: str) -> dict[str, Any]:
    base, started = Path(root), time.monotonic()
    with (
        control_plane.running(base / "control-plane", VM_ADDRESS) as cluster,
        operator_standin.running(cluster, playbook_lab.PROVIDER_RESOURCES, 0.0, real_crds=True) as operator,
    ):
        operator_crds = [playbook_lab.provider_crd(kind) for kind in playbook_lab.PROVIDERS]
        cluster.kubectl("apply", "-f", "-", stdin="---\n".join(operator_crds))
        cluster.kubectl(
            "wait",
            "--for=condition=Established",
            "--timeout=60s",
            *(f"crd/{kind.lower()}s.{playbook_lab.PROVIDER_GROUP}" for kind in playbook_lab.PROVIDERS),
        )
        cluster.kubectl("apply", "-f", "-", stdin=playbook_lab.capi_providers_yaml({}))
        _, providers_seconds = _until(
            "provider Ready", lambda: len(operator.reconciled) == len(playbook_lab.PROVIDERS) or operator.errors
        )
        with cluster_api.running(cluster, base / "cluster-api", VM_ADDRESS) as manager:
            mark = len(cluster.audit())
            created = cluster.kubectl_as(
                cluster.kubeconfig, "create", "-f", "-", stdin=yaml.safe_dump_all(lab_objects())
            )
            machine_sets, machine_set_seconds = _until(
                "MachineSet", lambda: (_get(cluster, "machinesets") or {}).get("items")
            )
            deployment = _get(cluster, "machinedeployment", WORKERS)
            _until("Cluster reading its ProxmoxCluster", lambda: "ProxmoxCluster" in _condition(cluster, NAME))
            scaled = cluster.kubectl_as(
                cluster.kubeconfig, "scale", "-n", NAMESPACE, f"machinedeployment/{WORKERS}", "--replicas=1"
            )
            machines, machine_seconds = _until("Machine", lambda: (_get(cluster, "machines") or {}).get("items"))
            lab1 = _get(cluster, "cluster", NAME)
            unlabelled = _without_contract_labels(cluster, manager)
            return {
                "crds_applied": operator.crds_applied,
                "operator_notes": operator.notes,
                "operator_errors": operator.errors,
                "providers_seconds": providers_seconds,
                "manager_ready_seconds": manager.started_seconds,
                "manager_args": list(manager.args),
                "webhook_configurations": list(manager.configurations),
                "created": {"rc": created.returncode, "stderr": created.stderr},
                "deployment": deployment,
                "machine_sets": machine_sets,
                "machine_set_seconds": machine_set_seconds,
                "scaled": {"rc": scaled.returncode, "stderr": scaled.stderr},
                "machines": machines,
                "machine_seconds": machine_seconds,
                "cluster": lab1,
                "crd_labels": {
                    crd["metadata"]["name"]: crd["metadata"].get("labels", {})
                    for crd in json.loads(cluster.kubectl("get", "crd", "-o", "json").stdout)["items"]
                },
                "writes": _writes(cluster, mark),
                "unlabelled": unlabelled,
                "v1beta1_requests": cluster_api.v1beta1_requests(cluster),
                "manager_log_tail": manager.log_tail(60),
                "seconds": round(time.monotonic() - started, 2),
            }
