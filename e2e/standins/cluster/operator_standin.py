"""A stand-in for cluster-api-operator, which cannot run in the box (no kubelet, no provider
images): it does the one thing the program waits on. When a provider CR's spec is newer than what
the operator has seen (status.observedGeneration below metadata.generation), it takes a while, as
installing a provider does, then records the spec as installed: observedGeneration,
installedVersion and Ready=True, the way the operator's ProviderStatus carries them. It changes
nothing else, and records each CR it reconciled, with the generation and when. A CR it is told to
withhold it leaves as it is, never Ready, until it is told to release it: an operator whose
provider never becomes Available. As the operator does, it installs the CoreProvider before any
other provider.

Where the operator's own Pods must run too (a chart stand-in whose operator is a Deployment, whose
Available status a step waits for), it also stands in for the scheduler and the kubelet of the one
node for that namespace: each Pending Pod is bound to the node and reported running and ready, so
the cluster's own controllers make its ReplicaSet ready and its Deployment Available.

Where a box asks for them (opt-in: `real_crds=True`; the boxes without a workload cluster keep
their speed), it also installs each provider's real CRDs before it marks the provider Ready, as the
operator applies a provider's components: read from the upstream archives with their contract
labels (e2e/standins/cluster/provider_crds.py), applied server-side and waited for until
Established. A box can have it start what the operator would deploy for a provider
(`on_installed`: the real Cluster API manager once the CoreProvider's CRDs are in), before the
provider is marked Ready.

It talks to the API server under an identity of its own, so its writes are not the engine's. Until
the cluster exists (its kubeconfig is written once the API server answers, as when the box's k3s is
installed during a run) it waits.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from e2e.engine.control_plane import OPERATOR_USER, ControlPlane
from e2e.engine.kube_api import Api, ApiError
from e2e.standins.cluster import pod_status, provider_crds
from e2e.standins.cluster.controller_loop import looping, refused

CRDS_ESTABLISHED_SECONDS = 60
# What kubectl's wait says of an object whose status.conditions is null.
NULL_CONDITIONS = ".status.conditions accessor error: <nil> is of the type <nil>"


@dataclass
class OperatorStandIn:
    install_seconds: float
    resources: tuple[str, ...]
    """The provider CRs' resources (plural.group) it reconciles."""
    reconciled: list[dict[str, Any]] = field(default_factory=list)
    """kind, namespace, name, generation, version and the time.time() it was marked Ready."""
    errors: list[str] = field(default_factory=list)
    pods_run: list[str] = field(default_factory=list)
    """namespace/name of each Pod it started, in order."""
    withheld: set[str] = field(default_factory=set)
    """kind/namespace/name of each CR it leaves not Ready."""
    applies_crds: bool = False
    crds_applied: list[dict[str, Any]] = field(default_factory=list)
    """kind, name, the CRDs' names and the seconds their apply and Established took, per provider."""
    on_installed: Callable[[str, str], None] | None = None
    """Called with a provider CR's kind and name once its CRDs are in, before it is marked Ready
    (where the operator would start the provider's Deployment: a box starts a real manager)."""
    started: set[str] = field(default_factory=set)
    """kind/name of each provider `on_installed` was called for (once each)."""

    def withhold(self, kind: str, namespace: str, name: str) -> None:
        """From now on, until `release`, that CR is never marked Ready."""
        # A kind it does not reconcile would never be Ready anyway: withholding it proves nothing.
        if not any(resource.startswith(f"{kind.lower()}s.") for resource in self.resources):
            raise ValueError(f"the operator stand-in reconciles {', '.join(self.resources)}, not {kind}")
        self.withheld.add(_cr(kind, namespace, name))

    def release(self, kind: str, namespace: str, name: str) -> None:
        """That CR is reconciled again, as any other."""
        cr = _cr(kind, namespace, name)
        if cr not in self.withheld:
            raise KeyError(f"{cr} is not withheld")
        self.withheld.remove(cr)


def _cr(kind: str, namespace: str, name: str) -> str:
    return f"{kind}/{namespace}/{name}"


def _reconcile(cluster: ControlPlane, standin: OperatorStandIn, seen: dict[str, float]) -> None:
    api = Api.from_kubeconfig(cluster.kubeconfig_of(OPERATOR_USER))
    try:
        listed = _provider_crs(api, standin.resources)
    except ApiError as error:
        refused(standin.errors, error)
        return
    # None: the operator chart has not installed its CRDs yet, nor runs an operator. The CoreProvider
    # first: cluster-api-operator requeues every other provider until the core provider is
    # installed (its docs, "Installing a Provider"), so no provider's manager starts without Cluster
    # API's own CRDs (the IPAM manager exits without the IPAddress CRDs).
    ordered = sorted(listed or [], key=lambda item: item["kind"] != "CoreProvider")
    core_installed = any(_installed(item) for item in ordered if item["kind"] == "CoreProvider")
    for item in ordered:
        meta, status = item["metadata"], item.get("status") or {}
        generation, cr = meta["generation"], _cr(item["kind"], meta["namespace"], meta["name"])
        if status.get("observedGeneration", 0) >= generation or cr in standin.withheld:
            continue
        if item["kind"] != "CoreProvider" and not core_installed:
            continue
        first_seen = seen.setdefault(f"{cr}@{generation}", time.monotonic())
        if time.monotonic() - first_seen < standin.install_seconds:
            continue
        version = item["spec"]["version"]
        if standin.applies_crds and not _install_crds(cluster, standin, item["kind"], meta["name"]):
            continue
        if standin.on_installed is not None and f"{item['kind']}/{meta['name']}" not in standin.started:
            try:
                standin.on_installed(item["kind"], meta["name"])
            except RuntimeError as failed:
                standin.errors.append(f"{item['kind']}/{meta['name']}: {failed}")
                continue
            standin.started.add(f"{item['kind']}/{meta['name']}")
        ready = {
            "observedGeneration": generation,
            "installedVersion": version,
            "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": pod_status.now()}],
        }
        try:
            api.merge_patch(item, {"status": ready}, subresource="status")
        except ApiError as error:
            refused(standin.errors, error)
            continue
        core_installed = core_installed or item["kind"] == "CoreProvider"
        standin.reconciled.append(
            {
                "kind": item["kind"],
                "namespace": meta["namespace"],
                "name": meta["name"],
                "generation": generation,
                "version": version,
                "at": time.time(),
            }
        )


def _installed(item: dict[str, Any]) -> bool:
    """Whether the operator has installed the provider (at some version): it said so in its status."""
    return bool((item.get("status") or {}).get("installedVersion"))


def _provider_crs(api: Api, resources: Sequence[str]) -> list[dict[str, Any]] | None:
    """Every CR of `resources` (plural.group), or None while one of them is not served."""
    found: list[dict[str, Any]] = []
    for resource in resources:
        plural, _, group = resource.partition(".")
        version = api.preferred(group)
        items = None if version is None else api.items(version, plural)
        if items is None:
            return None
        found += items
    return found


def _established(cluster: ControlPlane, kubeconfig: Path, names: list[str]) -> subprocess.CompletedProcess[str]:
    """`kubectl wait --for=condition=Established` on the CRDs `names`, again while it fails on a
    CRD whose `status.conditions` is still null: kubectl's wait fails at once on that rather than
    waiting (k8s.io/kubectl v0.35 pkg/cmd/wait/condition.go reads it with NestedSlice), and the
    apiextensions controller has not written them yet just after the apply (the box's takeover met
    it once in a suite run)."""
    deadline = time.monotonic() + CRDS_ESTABLISHED_SECONDS
    while True:
        done = cluster.kubectl_as(
            kubeconfig, "wait", "--for=condition=Established", f"--timeout={CRDS_ESTABLISHED_SECONDS}s", *names
        )
        if done.returncode == 0 or NULL_CONDITIONS not in done.stderr or time.monotonic() > deadline:
            return done
        time.sleep(0.2)


def _install_crds(cluster: ControlPlane, standin: OperatorStandIn, kind: str, name: str) -> bool:
    """The provider's real CRDs applied and Established (once per provider); False on a failure,
    said in `errors`."""
    if any(done["kind"] == kind and done["name"] == name for done in standin.crds_applied):
        return True
    started = time.monotonic()
    crds = provider_crds.crds(kind, name)
    as_operator = cluster.kubeconfig_of(OPERATOR_USER)
    listed = json.dumps({"apiVersion": "v1", "kind": "List", "items": crds})
    applied = cluster.kubectl_as(
        as_operator, "apply", "--server-side", "--field-manager=capi-operator", "-f", "-", stdin=listed
    )
    names = [f"crd/{crd['metadata']['name']}" for crd in crds]
    established = applied.returncode == 0 and _established(cluster, as_operator, names)
    for done in (applied, established):
        if done and done.returncode != 0:
            standin.errors.append(f"{kind}/{name} CRDs: {done.stderr.strip()}")
            return False
    standin.crds_applied.append(
        {
            "kind": kind,
            "name": name,
            "crds": [crd["metadata"]["name"] for crd in crds],
            "seconds": round(time.monotonic() - started, 2),
        }
    )
    return True


def _run_pods(cluster: ControlPlane, namespace: str, standin: OperatorStandIn) -> None:
    api = Api.from_kubeconfig(cluster.kubeconfig_of(OPERATOR_USER))
    try:
        pending = [pod for pod in api.items("v1", "pods", namespace) or [] if pod["status"].get("phase") == "Pending"]
        nodes = [node["metadata"]["name"] for node in api.items("v1", "nodes") or []] if pending else []
    except ApiError as error:
        refused(standin.errors, error)
        return
    if pending and len(nodes) != 1:
        standin.errors.append(f"cannot schedule onto nodes {nodes}: the stand-in runs the Pods of one node")
        return
    for pod in pending:
        name, spec = pod["metadata"]["name"], pod["spec"]
        now = pod_status.now()
        status = pod_status.status([pod_status.running(container, now) for container in spec["containers"]], now)
        try:
            if not spec.get("nodeName"):
                api.must(
                    "POST", f"/api/v1/namespaces/{namespace}/pods/{name}/binding", pod_status.binding(name, nodes[0])
                )
            api.merge_patch(pod, {"status": status}, subresource="status")
        except ApiError as error:
            refused(standin.errors, error)
            continue
        standin.pods_run.append(f"{namespace}/{name}")


@contextmanager
def running(
    cluster: ControlPlane,
    kinds: Sequence[str],
    install_seconds: float,
    *,
    runs_pods_in: str | None = None,
    real_crds: bool = False,
    on_installed: Callable[[str, str], None] | None = None,
) -> Iterator[OperatorStandIn]:
    """Reconciles the provider CRs of `kinds` (plural.group) on `cluster` for the block, installing
    each provider's real CRDs first if `real_crds` and calling `on_installed(kind, name)` once per
    provider before it is Ready (a RuntimeError keeps it not Ready, said in `errors`, and it is
    called again on the next pass), and runs the Pods of namespace `runs_pods_in`."""
    standin = OperatorStandIn(install_seconds, tuple(kinds), applies_crds=real_crds, on_installed=on_installed)
    seen: dict[str, float] = {}

    def step() -> None:
        _reconcile(cluster, standin, seen)
        if runs_pods_in is not None:
            _run_pods(cluster, runs_pods_in, standin)

    with looping(cluster, OPERATOR_USER, step, standin.errors, "reconcile"):
        yield standin
