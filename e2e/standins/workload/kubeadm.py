"""Stand-ins for Cluster API's kubeadm providers where they cannot run here (kubeadm on VMs, and
KCP's etcd health checks through a port-forward to control-plane pods):

- KubeadmControlPlane (controlplane.cluster.x-k8s.io/v1beta2): once its Cluster owns it and the
  Cluster's infrastructure is provisioned with a control-plane endpoint, the workload cluster's
  control plane starts for real at that endpoint (etcd, kube-apiserver, kube-controller-manager,
  kube-scheduler; e2e/engine/control_plane.py), its admin kubeconfig is written where Cluster API
  writes it (Secret `<cluster>-kubeconfig`, key `value`, type cluster.x-k8s.io/secret, labelled
  with the cluster's name, owned by the KCP), and the KCP's status says what the contract asks:
  initialization.controlPlaneInitialized, the replica counts, selector, version,
  observedGeneration and the conditions Available (which the Cluster's ControlPlaneAvailable
  mirrors), Initialized, CertificatesAvailable, EtcdClusterHealthy, ControlPlaneComponentsHealthy.
  It makes no control-plane Machines: in v1beta2 the Cluster's ControlPlaneInitialized comes from
  the KCP's status (internal/controllers/cluster), and one control plane runs here whatever a VM
  would be, so spec.replicas other than 1 is refused (MachinesReady says NoReplicas).
- KubeadmConfig (bootstrap.cluster.x-k8s.io/v1beta2), a worker's, made from its
  KubeadmConfigTemplate by the MachineSet controller: once a Machine owns it and the Cluster's
  control plane is initialized (a join waits for it, as the real provider does), a bootstrap data
  Secret named after it (cloud-config writing the kubeadm JoinConfiguration, as the real one
  does), then status.initialization.dataSecretCreated, status.dataSecretName and the conditions
  Ready, DataSecretAvailable and CertificatesAvailable. A control plane's (initConfiguration) or a
  non-cloud-config format is refused.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from typing import Any

from e2e.engine.control_plane import ADMIN_USER, ControlPlane
from e2e.standins.workload.capmox import need_true
from e2e.standins.workload.objects import (
    BOOTSTRAP,
    CLUSTER_NAME_LABEL,
    CONTROL_PLANE,
    CORE,
    SECRET_TYPE,
    Client,
    Record,
    conditions,
    ident,
    need,
    owner,
    owner_ref,
)

JOIN_CONFIG_PATH = "/run/kubeadm/kubeadm-join-config.yaml"
KCP_CONDITIONS = {
    "Available": "Available",
    "Initialized": "Initialized",
    "CertificatesAvailable": "Available",
    "EtcdClusterHealthy": "Healthy",
    "ControlPlaneComponentsHealthy": "Healthy",
    "MachinesReady": "NoReplicas",
    "MachinesUpToDate": "NoReplicas",
    "RollingOut": "NotRollingOut",
    "ScalingUp": "NotScalingUp",
    "ScalingDown": "NotScalingDown",
    "Remediating": "NotRemediating",
    "Deleting": "NotDeleting",
    "Paused": "NotPaused",
}


def reconcile_control_planes(
    client: Client, record: Record, running: dict[str, ControlPlane], start: Callable[[str, str, int], ControlPlane]
) -> None:
    """`running` holds each workload cluster's control plane by `namespace/cluster`;
    `start(key, host, port)` starts one for the rest of the stand-ins' block."""
    for kcp in client.items("kubeadmcontrolplanes", CONTROL_PLANE):
        meta = kcp["metadata"]
        cluster_name = owner(kcp, "Cluster", "cluster.x-k8s.io")
        if cluster_name is None or "deletionTimestamp" in meta:
            continue
        cluster = client.get("clusters", CORE, meta["namespace"], cluster_name)
        if cluster is None or not need_true(cluster, "status.initialization.infrastructureProvisioned"):
            continue
        endpoint = cluster["spec"].get("controlPlaneEndpoint") or {}
        if not endpoint.get("host"):
            continue  # the Cluster controller copies it from the ProxmoxCluster
        if (replicas := need(kcp, "spec.replicas")) != 1:
            raise ValueError(f"{ident(kcp)} spec.replicas={replicas}: the stand-in runs one control plane")
        version = need(kcp, "spec.version")
        key = f"{meta['namespace']}/{cluster_name}"
        if key not in running:
            running[key] = start(key, endpoint["host"], int(endpoint["port"]))
            record.did(f"control plane up at {endpoint['host']}:{endpoint['port']}", ident(kcp))
        _write_kubeconfig(client, record, kcp, cluster_name, running[key])
        status = kcp.get("status") or {}
        if (
            need_true(kcp, "status.initialization.controlPlaneInitialized")
            and status.get("observedGeneration") == meta["generation"]
        ):
            continue
        selector = f"{CLUSTER_NAME_LABEL}={cluster_name},cluster.x-k8s.io/control-plane"
        counts = dict.fromkeys(("replicas", "readyReplicas", "availableReplicas", "upToDateReplicas"), 1)
        status = {
            "initialization": {"controlPlaneInitialized": True},
            **counts,
            **{"selector": selector, "version": version, "observedGeneration": meta["generation"]},
            "conditions": conditions(meta["generation"], KCP_CONDITIONS),
        }
        client.patch(kcp, {"status": status}, status=True)
        record.did("control plane initialized", ident(kcp))


def _write_kubeconfig(
    client: Client, record: Record, kcp: dict[str, Any], cluster_name: str, lab: ControlPlane
) -> None:
    namespace, name = kcp["metadata"]["namespace"], f"{cluster_name}-kubeconfig"
    value = lab.kubeconfig_of(ADMIN_USER).read_text()
    existing = client.get("secrets", "v1", namespace, name)
    if existing is not None and base64.b64decode(existing["data"]["value"]).decode() == value:
        return
    client.apply(
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "type": SECRET_TYPE,
            "metadata": {
                **{"name": name, "namespace": namespace, "labels": {CLUSTER_NAME_LABEL: cluster_name}},
                "ownerReferences": [owner_ref(kcp)],
            },
            "data": {"value": base64.b64encode(value.encode()).decode()},
        }
    )
    record.did("kubeconfig written", f"Secret/{namespace}/{name}")


def reconcile_configs(client: Client, record: Record) -> None:
    for config in client.items("kubeadmconfigs", BOOTSTRAP):
        meta, spec = config["metadata"], config.get("spec") or {}
        if need_true(config, "status.initialization.dataSecretCreated") or "deletionTimestamp" in meta:
            continue
        if owner(config, "Machine", "cluster.x-k8s.io") is None:
            continue
        if "initConfiguration" in spec or "clusterConfiguration" in spec:
            raise ValueError(f"{ident(config)}: a control plane's config; the stand-in bootstraps workers only")
        if spec.get("format", "cloud-config") != "cloud-config":
            raise ValueError(f"{ident(config)} spec.format={spec['format']}: the stand-in writes cloud-config only")
        cluster_name = meta.get("labels", {}).get(CLUSTER_NAME_LABEL)
        if not cluster_name:
            raise KeyError(f"{ident(config)} has no label {CLUSTER_NAME_LABEL}")
        cluster = client.get("clusters", CORE, meta["namespace"], cluster_name)
        if cluster is None or not need_true(cluster, "status.initialization.controlPlaneInitialized"):
            continue
        join = {
            "apiVersion": "kubeadm.k8s.io/v1beta4",
            "kind": "JoinConfiguration",
            **spec.get("joinConfiguration", {}),
        }
        cloud_config = {
            "write_files": [
                {"path": JOIN_CONFIG_PATH, "owner": "root:root", "permissions": "0640", "content": json.dumps(join)}
            ],
            "runcmd": [f"kubeadm join --config {JOIN_CONFIG_PATH}"],
            "users": spec.get("users", []),
        }
        value = "## template: jinja\n#cloud-config\n" + json.dumps(cloud_config, indent=1)
        client.apply(
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "type": SECRET_TYPE,
                "metadata": {
                    **{"name": meta["name"], "namespace": meta["namespace"]},
                    **{"labels": {CLUSTER_NAME_LABEL: cluster_name}, "ownerReferences": [owner_ref(config)]},
                },
                "data": {
                    key: base64.b64encode(text.encode()).decode()
                    for key, text in (("value", value), ("format", "cloud-config"))
                },
            }
        )
        status = {
            "initialization": {"dataSecretCreated": True},
            "dataSecretName": meta["name"],
            "observedGeneration": meta["generation"],
            "conditions": conditions(
                meta["generation"],
                {"Ready": "Ready", "DataSecretAvailable": "Available", "CertificatesAvailable": "Available"},
            ),
        }
        client.patch(config, {"status": status}, status=True)
        record.did("bootstrap data written", ident(config))


def join_configuration(bootstrap_value: str) -> dict[str, Any]:
    """The kubeadm JoinConfiguration a worker's bootstrap data (as written above) holds."""
    body = bootstrap_value.split("#cloud-config\n", 1)
    if len(body) != 2:
        raise ValueError("the bootstrap data is no cloud-config")
    for written in json.loads(body[1]).get("write_files", []):
        if written["path"] == JOIN_CONFIG_PATH:
            found: dict[str, Any] = json.loads(written["content"])
            return found
    raise ValueError(f"the bootstrap data writes no {JOIN_CONFIG_PATH}")
