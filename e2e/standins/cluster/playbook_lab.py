"""The Kubernetes side of the lab as the Ansible playbook left it (the spec's "What the playbook
left on the running lab"), laid out on the box's real API server: k3s's HelmCharts with
helm-controller's finalizer and their manifest files (the playbook's two charts: the owner's k3s
disables traefik), which k3s's real helm-controller and its Jobs install (the Completed
`helm-install-<chart>` Job, its Succeeded pod and the Job's helpers, the two Helm releases as
Helm v4 records them: e2e/box/management/k3s_charts.py), the provider objects applied client-side
from capi-providers.yaml, the inspector's RBAC and the workload cluster lab1's kubeconfig Secret;
and inside lab1 (a second API server), the inspector's RBAC.

`snapshot` reads back every object the playbook made, with its UID and resourceVersion, so a test
can tell whether anything was re-created or written.
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from e2e.engine import pins
from e2e.engine.control_plane import ControlPlane
from e2e.standins.cluster import cainjector_standin

# helm-controller's finalizer: while it is on, deleting the HelmChart waits for the controller,
# which would run `helm delete` for a chart it still manages.
HELM_CONTROLLER_FINALIZER = "wrangler.cattle.io/on-helm-chart-remove"
# Chart name -> (target namespace, repository, version, values): the playbook's two charts.
PLAYBOOK_CHARTS: dict[str, tuple[str, str, str, dict[str, Any]]] = {
    "cert-manager": ("cert-manager", "https://charts.jetstack.io", "v1.21.2", {"crds": {"enabled": True}}),
    "cluster-api-operator": (
        "capi-operator-system",
        "https://kubernetes-sigs.github.io/cluster-api-operator",
        "0.28.0",
        {},
    ),
}
HANDED_OVER = list(PLAYBOOK_CHARTS)
PROVIDER_GROUP = "operator.cluster.x-k8s.io"
# Kind -> (namespace, name, the stack setting that pins its version).
PROVIDERS = {
    "CoreProvider": ("capi-system", "cluster-api", "capiCoreVersion"),
    "BootstrapProvider": ("capi-kubeadm-bootstrap-system", "kubeadm", "capiBootstrapVersion"),
    "ControlPlaneProvider": ("capi-kubeadm-control-plane-system", "kubeadm", "capiControlPlaneVersion"),
    "InfrastructureProvider": ("capmox-system", "proxmox", "capmoxVersion"),
    "IPAMProvider": ("capi-ipam-in-cluster-system", "in-cluster", "ipamInClusterVersion"),
}
CAPMOX_SECRET = "capmox-variables"
INSPECTOR = "capi-readonly"

# What `snapshot` reads: every kind the playbook made objects of (lab1 has the core ones only).
CORE_KINDS = ["namespaces", "secrets", "configmaps", "serviceaccounts", "clusterroles", "clusterrolebindings"]
PROVIDER_RESOURCES = [f"{kind.lower()}s.{PROVIDER_GROUP}" for kind in PROVIDERS]
SNAPSHOT_KINDS = [*CORE_KINDS, *PROVIDER_RESOURCES]


def provider_crd(kind: str) -> str:
    plural = f"{kind.lower()}s"
    return f"""apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: {plural}.{PROVIDER_GROUP}
spec:
  group: {PROVIDER_GROUP}
  names: {{kind: {kind}, listKind: {kind}List, plural: {plural}, singular: {kind.lower()}}}
  scope: Namespaced
  versions:
  - name: v1alpha2
    served: true
    storage: true
    subresources: {{status: {{}}}}
    schema:
      openAPIV3Schema: {{type: object, x-kubernetes-preserve-unknown-fields: true}}
"""


def helmchart(name: str) -> str:
    target, repo, version, values = PLAYBOOK_CHARTS[name]
    return yaml.safe_dump(
        {
            "apiVersion": "helm.cattle.io/v1",
            "kind": "HelmChart",
            "metadata": {"name": name, "namespace": "kube-system", "finalizers": [HELM_CONTROLLER_FINALIZER]},
            "spec": {
                "chart": name,
                "repo": repo,
                "version": version,
                "targetNamespace": target,
                "createNamespace": True,
                "valuesContent": yaml.safe_dump(values) if values else "",
            },
        }
    )


def capi_providers_yaml(capmox_data: dict[str, str]) -> str:
    """/opt/lab-mgmt/capi-providers.yaml: the provider namespaces, CAPMOX's Secret, the CRs."""
    documents: list[dict[str, Any]] = [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}
        for namespace, _, _ in PROVIDERS.values()
    ]
    documents.append(
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": CAPMOX_SECRET, "namespace": "capmox-system"},
            "type": "Opaque",
            "data": {key: base64.b64encode(value.encode()).decode() for key, value in capmox_data.items()},
        }
    )
    for kind, (namespace, name, setting) in PROVIDERS.items():
        # The versions the lab's stack file pins, which the playbook deployed.
        spec: dict[str, Any] = {"version": pins.pinned(setting)}
        if kind == "InfrastructureProvider":
            spec["configSecret"] = {"name": CAPMOX_SECRET}
        documents.append(
            {
                "apiVersion": f"{PROVIDER_GROUP}/v1alpha2",
                "kind": kind,
                "metadata": {"name": name, "namespace": namespace},
                "spec": spec,
            }
        )
    return yaml.safe_dump_all(documents)


# The inspector's rbac.yaml: the built-in `view` (pods, logs, events, PodDisruptionBudgets) and
# Cluster API's, the operator's and k3s's groups, nodes and namespaces.
INSPECTOR_RBAC = f"""apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {{name: {INSPECTOR}}}
rules:
- apiGroups: [cluster.x-k8s.io, {PROVIDER_GROUP}, helm.cattle.io]
  resources: ["*"]
  verbs: [get, list, watch]
- apiGroups: [""]
  resources: [nodes, namespaces]
  verbs: [get, list, watch]
---
apiVersion: v1
kind: ServiceAccount
metadata: {{name: {INSPECTOR}, namespace: kube-system}}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {{name: {INSPECTOR}}}
roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: {INSPECTOR}}}
subjects:
- {{kind: ServiceAccount, name: {INSPECTOR}, namespace: kube-system}}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {{name: {INSPECTOR}-view}}
roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: view}}
subjects:
- {{kind: ServiceAccount, name: {INSPECTOR}, namespace: kube-system}}
"""

# How long the playbook's lab waits for cert-manager's CA injector to fill in the webhook
# configurations that ask for it.
INJECTED_BOUND_SECONDS = 120


def _wait_injected(cluster: ControlPlane) -> None:
    """Until every webhook configuration that names a certificate for cert-manager's CA injector
    has its CA bundle: only then can the API server call the webhooks, which fail closed."""
    kinds = ",".join(cainjector_standin.KINDS.values())
    deadline = time.monotonic() + INJECTED_BOUND_SECONDS
    while True:
        waiting = [
            f"{item['kind']}/{item['metadata']['name']}"
            for item in json.loads(cluster.kubectl("get", kinds, "-o", "json").stdout)["items"]
            if cainjector_standin.INJECT_CA_FROM in (item["metadata"].get("annotations") or {})
            and not all(webhook["clientConfig"].get("caBundle") for webhook in item.get("webhooks") or [])
        ]
        if not waiting:
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"no CA bundle injected within {INJECTED_BOUND_SECONDS}s into {', '.join(waiting)}")
        time.sleep(1)


# What lab1-kubeconfig holds where the box runs no lab1.
NO_CLUSTER_KUBECONFIG = "apiVersion: v1\nkind: Config\n"


def workload_kubeconfig_secret(name: str, kubeconfig: str) -> str:
    """The Secret `<name>-kubeconfig` that CAPI keeps of a workload cluster's admin kubeconfig."""
    return yaml.safe_dump(
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": f"{name}-kubeconfig", "namespace": "default"},
            "type": "cluster.x-k8s.io/secret",
            "data": {"value": base64.b64encode(kubeconfig.encode()).decode()},
        }
    )


# What the playbook's k3s config disables (its Ansible template, e2e/box/management/playbook_vm.py).
K3S_DISABLES = ("traefik",)


def lay_out(
    cluster: ControlPlane,
    manifests: Path,
    capmox_data: dict[str, str],
    lab1_kubeconfig: str = NO_CLUSTER_KUBECONFIG,
    *,
    k3s: Callable[[Path], object],
    installed: Callable[[], object],
) -> None:
    """The playbook's end state on `cluster`, where k3s's real helm-controller runs
    (e2e/controllers/helm_controller.py) and its Jobs' pods run (e2e/box/management/k3s_charts.py):
    the HelmCharts' files in `manifests`, which `k3s` applies as k3s's deploy controller does
    (e2e/standins/guest/k3s_deploy.py), and from which helm-controller and its Jobs make the rest,
    until `installed` returns. The provider objects are applied once the webhook
    configurations of the operator's release have their CA bundle (which a CA injector,
    e2e/standins/cluster/cainjector_standin.py, must give them), as on the lab, where their webhooks
    refuse every provider CR until then. The provider CRs become Ready when an operator
    (e2e/standins/cluster/operator_standin.py) reconciles them."""
    cluster.kubectl("apply", "-f", "-", stdin="---\n".join(provider_crd(kind) for kind in PROVIDERS))
    cluster.kubectl("wait", "--for=condition=Established", "crd", "--all", "--timeout=60s")
    manifests.mkdir(parents=True)
    for name, (namespace, _, _, _) in PLAYBOOK_CHARTS.items():
        cluster.kubectl("create", "namespace", namespace)
        (manifests / f"{name}.yaml").write_text(helmchart(name))
    k3s(manifests)
    installed()
    _wait_injected(cluster)
    cluster.kubectl("apply", "-f", "-", stdin=capi_providers_yaml(capmox_data))
    cluster.kubectl("apply", "-f", "-", stdin=INSPECTOR_RBAC)
    cluster.kubectl("apply", "-f", "-", stdin=workload_kubeconfig_secret("lab1", lab1_kubeconfig))


def snapshot(cluster: ControlPlane, kinds: list[str] = SNAPSHOT_KINDS) -> dict[str, list[str]]:
    """kind/namespace/name -> [uid, resourceVersion] of every object of `kinds`."""
    listed = json.loads(cluster.kubectl("get", ",".join(kinds), "-A", "-o", "json").stdout)
    objects = {}
    for item in listed["items"]:
        meta = item["metadata"]
        key = f"{item['kind']}/{meta.get('namespace', '')}/{meta['name']}"
        objects[key] = [meta["uid"], meta["resourceVersion"]]
    return objects
