"""k3s's helm-controller as little as the box needs of it, until issue 67 runs the real one in every
playbook lab (this module then goes; tests/test_box_handover.py already runs the real one, and
checks `made` against what it makes): what it left of installing each of the playbook's HelmCharts, written by hand
when the playbook's lab is laid out (`leave_installed`, from playbook_lab.py), and a small stand-in
for the one behaviour the takeover meets (`running`): when a HelmChart goes, what helm-controller
made for it goes too, `unmanaged` or not. Step 3 of docs/adoption.md sets that off on the owner's
lab, which is why its step 6 leaves k3s's install pods out.

As read in k3s-io/helm-controller v0.16.26 (commit 1a0f6eb; these lines are the same from v0.16.10
to v0.17.7, which span what k3s v1.35 embeds) and rancher/wrangler v3.2.1 (the same in v3.7.0):

- helm-controller registers its chart handler as a wrangler generating handler with the set ID
  `<managedBy>-chart-registration` (pkg/controllers/chart/chart.go:180-183); k3s registers it with
  managedBy `helm-controller`, the Jobs' cluster role `cluster-admin` and an apply that sets no
  owner references (k3s pkg/server/server.go, where it calls `helmchart.Register`);
- for each chart, that handler (OnChange, chart.go:307-417) applies the `chart-values-<chart>`
  Secret, the `chart-content-<chart>` ConfigMap (empty for a chart from a repository), the
  `helm-<chart>` ServiceAccount, the `helm-<namespace>-<chart>` ClusterRoleBinding and the
  `helm-install-<chart>` Job (chart.go:692-697 and 416: valuesSecret:1061, contentConfigMap:1275,
  serviceAccount:1160, roleBinding:1136, job:830-870 with the label `helmcharts.helm.cattle.io/chart`
  on the Job and its pods, jobName:1590), no TTL on the Job, so a Completed Job and its pod stay;
  wrangler puts on each the annotations `objectset.rio.cattle.io/id`, `-owner-gvk`, `-owner-name`,
  `-owner-namespace` and the label `objectset.rio.cattle.io/hash`, the SHA-1 of the four
  (pkg/apply/desiredset_apply.go:26-34, 201-229, 275-281);
- the generated controller runs the handler's `Remove` on every HelmChart that goes
  (pkg/generated/controllers/helm.cattle.io/v1/helmchart.go:82, `controller.OnChange(ctx, name,
  statusHandler.Remove)`), with no condition: the `unmanaged` annotation is read by
  `shouldManage` (chart.go:510) for OnChange and for the finalizer's scoped OnRemove alone;
  `Remove` (helmchart.go:141-159) applies an empty set owned by the deleted chart, and wrangler
  deletes every object of the handler's kinds with that owner's hash label, with background
  propagation (desiredset_crud.go:15, 55-70), so the garbage collector (which the box's k3s runs)
  then deletes the Job's pod.

The stand-in does only that: every two seconds it lists the HelmCharts, and once one it has seen
is gone, it deletes the objects of those five kinds whose objectset annotations name it as their
owner, as k3s (the controller manager's identity, so that the audit log tells it from the owner's
admin). What it does not know it says in `errors`, and its block then ends in a RuntimeError naming
it: an object of those kinds with another objectset owner or set, or a hash label its annotations
do not give, and a HelmChart held by a finalizer while it is deleted (the real helm-controller would
run its `helm-delete` Job: the uninstall that the hand-over exists to avoid).
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import yaml

from e2e.engine.control_plane import CONTROLLER_USER, ControlPlane
from e2e.engine.kube_api import Api, ApiError
from e2e.standins.cluster.controller_loop import looping

SET_ID_KEY, OWNER_GVK_KEY, OWNER_NAME_KEY, OWNER_NAMESPACE_KEY, HASH_KEY = (
    f"objectset.rio.cattle.io/{key}" for key in ("id", "owner-gvk", "owner-name", "owner-namespace", "hash")
)
SET_ID = "helm-controller-chart-registration"
HELMCHART_GVK = "helm.cattle.io/v1, Kind=HelmChart"
# The kinds OnChange applies, as apiVersion and resource.
MADE_FOR_A_CHART = (
    ("v1", "secrets"),
    ("v1", "configmaps"),
    ("v1", "serviceaccounts"),
    ("rbac.authorization.k8s.io/v1", "clusterrolebindings"),
    ("batch/v1", "jobs"),
)
BACKGROUND = {"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": "Background"}
# What OnChange applies for the HelmChart {chart} in {namespace}, as chart.go makes it; the Job's
# container abridged to what the API server asks for (k3s pins the image's tag; nothing here runs
# it). The objectset metadata is added to each (owned_by).
MADE = """\
{{apiVersion: v1, kind: Secret, type: helmcharts.helm.cattle.io/values,
  metadata: {{name: chart-values-{chart}, namespace: {namespace}}}}}
---
{{apiVersion: v1, kind: ConfigMap, metadata: {{name: chart-content-{chart}, namespace: {namespace}}}}}
---
{{apiVersion: v1, kind: ServiceAccount, automountServiceAccountToken: true,
  metadata: {{name: helm-{chart}, namespace: {namespace}}}}}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {{name: helm-{namespace}-{chart}}}
roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: cluster-admin}}
subjects: [{{kind: ServiceAccount, name: helm-{chart}, namespace: {namespace}}}]
---
apiVersion: batch/v1
kind: Job
metadata: {{name: helm-install-{chart}, namespace: {namespace}, labels: {{helmcharts.helm.cattle.io/chart: {chart}}}}}
spec:
  backoffLimit: 1000
  template:
    metadata: {{labels: {{helmcharts.helm.cattle.io/chart: {chart}}}}}
    spec:
      restartPolicy: OnFailure
      serviceAccountName: helm-{chart}
      containers:
      - {{name: helm, image: rancher/klipper-helm, args: [install], env: [{{name: NAME, value: {chart}}}]}}
"""
# What the kubelet reported of the Job's pod once `helm install` was done, and the job controller of
# the Job, between the times {started} and {done}.
DONE = """\
pod:
  phase: Succeeded
  startTime: "{started}"
  conditions:
  - {{type: PodScheduled, status: "True", lastTransitionTime: "{started}"}}
  - {{type: Initialized, status: "True", reason: PodCompleted, lastTransitionTime: "{started}"}}
  - {{type: ContainersReady, status: "False", reason: PodCompleted, lastTransitionTime: "{done}"}}
  - {{type: Ready, status: "False", reason: PodCompleted, lastTransitionTime: "{done}"}}
  containerStatuses:
  - {{name: helm, image: rancher/klipper-helm, imageID: "", ready: false, started: false, restartCount: 0,
     state: {{terminated: {{exitCode: 0, reason: Completed, startedAt: "{started}", finishedAt: "{done}"}}}}}}
job:
  startTime: "{started}"
  completionTime: "{done}"
  succeeded: 1
  ready: 0
  terminating: 0
  conditions:
  - {{type: SuccessCriteriaMet, status: "True", reason: CompletionsReached, lastTransitionTime: "{done}"}}
  - {{type: Complete, status: "True", reason: CompletionsReached, lastTransitionTime: "{done}"}}
"""


def owned_by(chart: str, namespace: str) -> dict[str, dict[str, str]]:
    """The annotations and label wrangler's apply puts on what the generating handler makes for
    the HelmChart `namespace/chart`."""
    annotations = {
        SET_ID_KEY: SET_ID,
        OWNER_GVK_KEY: HELMCHART_GVK,
        OWNER_NAME_KEY: chart,
        OWNER_NAMESPACE_KEY: namespace,
    }
    return {"annotations": annotations, "labels": {HASH_KEY: _hash(annotations)}}


def _hash(annotations: dict[str, str]) -> str:
    keys = (SET_ID_KEY, OWNER_GVK_KEY, OWNER_NAME_KEY, OWNER_NAMESPACE_KEY)
    return hashlib.sha1("".join(annotations.get(key, "") for key in keys).encode(), usedforsecurity=False).hexdigest()


def made(chart: dict[str, Any]) -> list[dict[str, Any]]:
    """What OnChange applies for the HelmChart `chart`, as this reading has it."""
    meta = chart["metadata"]
    made = list(yaml.safe_load_all(MADE.format(chart=meta["name"], namespace=meta["namespace"])))
    owned = owned_by(meta["name"], meta["namespace"])
    for obj in made:
        obj["metadata"]["annotations"] = owned["annotations"]
        obj["metadata"]["labels"] = obj["metadata"].get("labels", {}) | owned["labels"]
    if values := chart["spec"].get("valuesContent"):
        made[0]["data"] = {"HelmChartValuesContent": base64.b64encode(values.encode()).decode()}
    return made


def leave_installed(cluster: ControlPlane, charts: list[dict[str, Any]], started: str, done: str) -> None:
    """What helm-controller left of installing each of the HelmCharts `charts` between the times
    `started` and `done`: what OnChange applied, the Job Completed, and its pod as the job
    controller made it from the Job's template, Succeeded on k3s's node (a bare control plane has
    none: there the pod stays unbound)."""
    applied = {"apiVersion": "v1", "kind": "List", "items": [obj for chart in charts for obj in made(chart)]}
    # kubectl prints each object it creates as a document of its own.
    created = yaml.safe_load_all(cluster.kubectl("create", "-o", "yaml", "-f", "-", stdin=json.dumps(applied)).stdout)
    nodes = cluster.kubectl("get", "nodes", "-o", "jsonpath={.items[*].metadata.name}").stdout.split()
    # On k3s's one node, where there is one.
    placed = {"nodeName": nodes[0]} if nodes else {}
    reported = yaml.safe_load(DONE.format(started=started, done=done))
    for job in (item for item in created if item["kind"] == "Job"):
        meta, template = job["metadata"], job["spec"]["template"]
        owner = {"apiVersion": "batch/v1", "kind": "Job", "name": meta["name"], "uid": meta["uid"]}
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                **{"generateName": f"{meta['name']}-", "namespace": meta["namespace"]},
                "labels": template["metadata"]["labels"],
                "ownerReferences": [owner | {"controller": True, "blockOwnerDeletion": True}],
            },
            "spec": template["spec"] | placed,
        }
        made_pod = json.loads(cluster.kubectl("create", "-o", "json", "-f", "-", stdin=json.dumps(pod)).stdout)
        for kind, name in (("pod", made_pod["metadata"]["name"]), ("job", meta["name"])):
            status = json.dumps({"status": reported[kind]})
            cluster.kubectl(
                "patch", kind, name, "-n", meta["namespace"], "--subresource=status", "--type=merge", "-p", status
            )


@dataclass
class HelmControllerStandIn:
    seen: set[tuple[str, str]] = field(default_factory=set)
    """Namespace and name of each HelmChart there at the last pass."""
    removed: list[str] = field(default_factory=list)
    """Kind/namespace/name of each object deleted, in order."""
    errors: list[str] = field(default_factory=list)


def _owner(item: dict[str, Any]) -> tuple[str, str]:
    """The HelmChart that the generating handler made `item` for; anything else is not known."""
    meta = item["metadata"]
    annotations, where = meta.get("annotations") or {}, f"{item['kind']}/{meta.get('namespace', '')}/{meta['name']}"
    if annotations.get(SET_ID_KEY) != SET_ID or annotations.get(OWNER_GVK_KEY) != HELMCHART_GVK:
        raise ValueError(f"{where}: objectset {annotations.get(SET_ID_KEY)!r} of {annotations.get(OWNER_GVK_KEY)!r}")
    if meta["labels"][HASH_KEY] != _hash(annotations):
        raise ValueError(f"{where}: the hash label is not its annotations'")
    return annotations[OWNER_NAMESPACE_KEY], annotations[OWNER_NAME_KEY]


def _step(cluster: ControlPlane, standin: HelmControllerStandIn) -> None:
    api = Api.from_kubeconfig(cluster.kubeconfig_of(CONTROLLER_USER))
    charts = api.items("helm.cattle.io/v1", "helmcharts") or []
    for chart in charts:
        meta = chart["metadata"]
        if meta.get("deletionTimestamp") and meta.get("finalizers"):
            raise ValueError(
                f"HelmChart {meta['namespace']}/{meta['name']} deleted with finalizers {meta['finalizers']}"
            )
    present = {(chart["metadata"]["namespace"], chart["metadata"]["name"]) for chart in charts}
    if gone := standin.seen - present:
        for api_version, resource in MADE_FOR_A_CHART:
            for item in api.items(api_version, resource, labelSelector=HASH_KEY) or []:
                if _owner(item) in gone:
                    _delete(api, item, standin)
    standin.seen = present


def _delete(api: Api, item: dict[str, Any], standin: HelmControllerStandIn) -> None:
    path = api.object_path(item)
    code, answer = api.call("DELETE", path, BACKGROUND)
    if code not in (200, 202, 404):
        raise ApiError(f"DELETE {path}: {code} {answer.get('message', '')}")
    meta = item["metadata"]
    standin.removed.append(f"{item['kind']}/{meta.get('namespace', '')}/{meta['name']}")


@contextmanager
def running(cluster: ControlPlane) -> Iterator[HelmControllerStandIn]:
    """Removes, on `cluster` for the block, what helm-controller made for each HelmChart that goes;
    a RuntimeError at the end if it met what it does not know."""
    standin = HelmControllerStandIn()
    with looping(cluster, CONTROLLER_USER, lambda: _step(cluster, standin), standin.errors, "remove a chart's objects"):
        yield standin
    if standin.errors:
        # Each once: a pass that fails is tried again every two seconds, as a controller retries.
        raise RuntimeError(f"the helm-controller stand-in met what it does not know: {sorted(set(standin.errors))}")
