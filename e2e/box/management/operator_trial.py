"""cluster-api-operator's real manager on a real control plane, with cert-manager's real three, without
the rest of the box (issue 68): the operator's release as the program renders it laid out, its
webhook certificate issued by cert-manager and its CA injected by cert-manager's injector, and its
Deployment's Pod run by the pod runner as the binary built here (`build-engine.sh operator`), its
certificate Secret mounted where the chart mounts it, its webhooks reached through its Service at
the Pod's address (the real endpoint slice controller writes it), the five providers' releases
answered where it asks for them on the owner's lab (provider_releases.py), and the Proxmox VE
stand-in at the program's CAPMOX credentials. Then the program's five provider CRs
(components/cluster_api.py's names, namespaces, pins, wait annotation and CAPMOX's configSecret)
through the operator's webhooks (IPAM's at its module's version, as a stack from before a bump
would), and what it makes of each: the core installed, Ready once the pod runner runs its
manager's Pod, then the other four, each Ready with its manager's Pod (CAPMOX's with the
credentials the operator rendered from the configSecret). Then IPAM bumped to the pin, upgraded in
place; beside them, what the program must never send: a provider name the operator does not know,
and a pin older than the version a provider runs; CAPMOX's token rotated as the program rotates
it, which must reach a new manager Pod; last, a pin with no release.

tests/test_operator_real.py runs it (`in_new_netns("management.operator_trial.preflight", ...)`).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from components import waits
from components.cluster_api import (
    INFRASTRUCTURE,
    OPERATOR_NAMESPACE,
    PROVIDER_API_VERSION,
    PROVIDERS,
    credentials_rollout,
    credentials_secret_name,
)
from e2e.box.management import cert_manager_trial, operator_changes
from e2e.box.management.operator_changes import key_of, providers, reason, resource_of, sent, status, until
from e2e.box.scenarios import CAPMOX_SECRET, CAPMOX_TOKEN, PROXMOX_ADDRESS, PROXMOX_PORT, VM_ADDRESS
from e2e.controllers import cert_manager
from e2e.engine import control_plane, pins, vendor
from e2e.standins.cluster import chart_repo_standin, pod_process, pod_runner, pod_volumes, provider_releases
from e2e.standins.proxmox import pve_api_standin

HTTPS = 443
OPERATOR = "cluster-api-operator"
# What makes the operator's Pod from its Deployment and reaches it through its Service.
CONTROLLERS = (
    "serviceaccount-token-controller",
    "deployment-controller",
    "replicaset-controller",
    "endpointslice-controller",
    # The kubelet mounts kube-root-ca.crt into every Pod's token volume.
    "root-ca-certificate-publisher-controller",
    # The providers' managers hold aggregated ClusterRoles (Cluster API's manager role aggregation).
    "clusterrole-aggregation-controller",
)
# CAPMOX's token on the stand-in, with both secrets: its manager reads the version as it starts,
# which every token may.
PROXMOX_TOKENS: dict[tuple[str, str], dict[str, dict[str, int]]] = {
    (CAPMOX_TOKEN, CAPMOX_SECRET): {},
    (CAPMOX_TOKEN, operator_changes.ROTATED["PROXMOX_SECRET"]): {},
}
# A name clusterctl's list of providers does not hold (the program's is `proxmox`).
UNKNOWN = ("InfrastructureProvider", "proxmox-ve", "capmox-other")
CORE = next(p for p in PROVIDERS if p.kind == "CoreProvider")
# The Deployments the served releases hold, whose Pods run the managers built here.
CORE_MANAGER = "capi-controller-manager"
MANAGERS = (
    (CORE.namespace, CORE_MANAGER),
    ("capi-kubeadm-bootstrap-system", "capi-kubeadm-bootstrap-controller-manager"),
    ("capi-kubeadm-control-plane-system", "capi-kubeadm-control-plane-controller-manager"),
    (operator_changes.IPAM.namespace, "capi-ipam-in-cluster-controller-manager"),
    (INFRASTRUCTURE.namespace, operator_changes.CAPMOX_MANAGER),
)
# What preflight says of a provider while the CoreProvider is not Ready.
WAITING_FOR_CORE = "WaitingForCoreProviderReady"


def provider_crs() -> list[dict[str, Any]]:
    """The program's five provider CRs as it declares them (components/cluster_api.py _provider_crs)."""
    crs = []
    for p in PROVIDERS:
        spec: dict[str, Any] = {"version": pins.pinned(p.config_key)}
        if p is INFRASTRUCTURE:
            spec["configSecret"] = {"name": credentials_secret_name(operator_changes.CREDENTIALS)}
            spec["deployment"] = credentials_rollout(credentials_secret_name(operator_changes.CREDENTIALS))
        metadata = {"name": p.name, "namespace": p.namespace, "annotations": waits.wait_for("condition=Ready")}
        crs.append({"apiVersion": PROVIDER_API_VERSION, "kind": p.kind, "metadata": metadata, "spec": spec})
    return crs


def _namespaces_and_credentials() -> list[dict[str, Any]]:
    namespaces = {p.namespace for p in PROVIDERS} | {UNKNOWN[2]}
    listed = ({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": n}} for n in sorted(namespaces))
    return [*listed, operator_changes.credentials_secret(operator_changes.CREDENTIALS)]


def preflight(root: str) -> dict[str, Any]:
    """cert-manager's three and the operator run; the program's CRs sent, then the two it must
    never send; what the operator said of each."""
    base = Path(root)
    release, operator_release = cert_manager_trial.releases(base)
    out: dict[str, Any] = {}
    with (
        control_plane.running(
            base / "control-plane", VM_ADDRESS, service_routing=True, controllers=CONTROLLERS
        ) as cluster,
        cert_manager_trial.cert_manager_running(cluster, base, release) as runs,
    ):
        own = cert_manager.served(cluster, release, VM_ADDRESS)
        cert_manager_trial.until_filled(cluster, set(own), runs)
        cert_manager.installed(cluster, operator_release)
        cert_manager.apply(cluster, [d for d in operator_release if d["kind"] not in cert_manager.LAID_OUT])
        awaited = {
            f"{d['kind']}/{d['metadata']['name']}"
            for d in operator_release
            if d["kind"] in cert_manager.WEBHOOK_CONFIGURATIONS
        }
        out["injected_seconds"] = cert_manager_trial.until_filled(cluster, awaited, runs)
        address = pod_process.route_through_the_box()
        (base / "releases").mkdir()
        (base / "proxmox").mkdir()
        assets = {
            **provider_releases.cluster_api(base / "releases"),
            **provider_releases.ipam(base / "releases"),
            **provider_releases.capmox(base / "releases"),
        }
        hosts = provider_releases.HOSTS
        with (
            pve_api_standin.serve(PROXMOX_TOKENS, base / "proxmox", (PROXMOX_ADDRESS, PROXMOX_PORT)) as proxmox,
            chart_repo_standin.serve(
                {}, base / "releases", assets, address=(address, HTTPS), hostnames=hosts
            ) as releases,
            pod_runner.running(
                cluster,
                OPERATOR_NAMESPACE,
                OPERATOR,
                base / "pods",
                internet=pod_volumes.Internet(dict.fromkeys(hosts, address), (releases.certificate,)),
            ) as runner,
            ExitStack() as manager_pods,
        ):
            manager_runners: list[pod_runner.PodRunner] = []

            def run_managers() -> None:
                for namespace, deployment in MANAGERS:
                    running = pod_runner.running(cluster, namespace, deployment, base / "provider-pods")
                    manager_runners.append(manager_pods.enter_context(running))

            try:
                _through_the_operator(cluster, runner, out, run_managers)
            except RuntimeError as failed:
                out["failed"] = str(failed)
            out["providers"] = providers(cluster)
            out["operator_log"] = runner.logs()
            out["runner_errors"] = runner.errors + [e for r in manager_runners for e in r.errors]
            out["runner_events"] = runner.events
            out["manager_events"] = [e for r in manager_runners for e in r.events]
            out["capmox_credentials"] = operator_changes.credentials_of(
                [e for e in out["manager_events"] if "capmox" in e["pod"]]
            )
            out["manager_logs"] = {name: log for r in manager_runners for name, log in r.logs().items()}
            out["release_requests"] = releases.requests
            out["release_unknown"] = releases.unknown
            out["proxmox_calls"] = [(call.method, call.path) for call in proxmox.calls]
        out["writes"] = cert_manager_trial.writes(
            cluster, {f"system:serviceaccount:{OPERATOR_NAMESPACE}:capi-operator-manager"}
        )
    return out


def _through_the_operator(
    cluster: control_plane.ControlPlane,
    runner: pod_runner.PodRunner,
    out: dict[str, Any],
    run_managers: Callable[[], None],
) -> None:
    """Into `out`, as it goes: what was sent and answered, and what the operator said."""
    out["laid_out"] = sent(cluster, _namespaces_and_credentials())
    crs = provider_crs()
    # IPAM as a stack from before a bump of its pin sends it: at the module's own version.
    ipam = next(c for c in crs if c["kind"] == operator_changes.IPAM.kind)
    before_the_bump = json.loads(json.dumps(ipam))
    before_the_bump["spec"]["version"] = vendor.IPAM_VERSION
    out["program"] = sent(cluster, [c if c is not ipam else before_the_bump for c in crs])
    others = [key_of(c) for c in crs if c["kind"] != "CoreProvider"]
    out["preflight_seconds"] = until(
        cluster,
        "the preflight of every provider but the core",
        lambda found: all(reason(found, key) for key in others),
        runner,
    )
    before_the_core = providers(cluster)
    out["before_the_core"] = {key: reason(before_the_core, key) for key in others}
    kind, name, namespace = UNKNOWN
    unknown = {
        "apiVersion": PROVIDER_API_VERSION,
        "kind": kind,
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"version": "v0.9.1"},
    }
    out["unknown_sent"] = sent(cluster, [unknown])
    key = f"{kind}/{namespace}/{name}"
    out["unknown_seconds"] = until(cluster, "the unknown name's preflight", lambda f: reason(f, key), runner)
    out["unknown_preflight"] = providers(cluster)[key]["conditions"]["PreflightCheckPassed"]
    # Gone again, as its owner would take it away: a provider CR the operator refused stops the
    # upgrade of every other (clusterctl's plan reads each provider's version: `failed to parse
    # target version for the capmox-other/infrastructure-proxmox-ve provider`, seen here when it
    # stayed).
    out["unknown_deleted"] = cluster.kubectl(
        "delete", resource_of(kind), name, "-n", namespace, "--timeout=60s"
    ).returncode
    core = f"{CORE.kind}/{CORE.namespace}/{CORE.name}"
    out["installed_seconds"] = until(
        cluster,
        "the core's components installed",
        lambda found: status(found, core, "ProviderInstalled") == "True" and status(found, core, "Ready"),
        runner,
    )
    out["core_before_its_pod"] = providers(cluster)[core]["conditions"]["Ready"]
    cached = cluster.kubectl(
        "get", "configmaps", "-n", CORE.namespace, "-l", operator_changes.CACHE_LABEL, "-o", "json"
    )
    out["cache"] = [
        {
            "name": i["metadata"]["name"],
            "labels": i["metadata"]["labels"],
            "keys": sorted([*i.get("data", {}), *i.get("binaryData", {})]),
        }
        for i in json.loads(cached.stdout)["items"]
    ]
    deployments = json.loads(cluster.kubectl("get", "deployments", "-n", CORE.namespace, "-o", "json").stdout)
    out["core_deployments"] = {
        d["metadata"]["name"]: [c["image"] for c in d["spec"]["template"]["spec"]["containers"]]
        for d in deployments["items"]
    }
    run_managers()
    out["core_ready_seconds"] = until(
        cluster, "the core's Ready", lambda found: status(found, core, "Ready") == "True", runner
    )
    fetched = [key_of(c) for c in crs if c["kind"] != "CoreProvider"]
    out["others_ready_seconds"] = until(
        cluster,
        "the kubeadm, IPAM and CAPMOX providers' Ready",
        lambda found: all(status(found, k, "Ready") == "True" for k in fetched),
        runner,
    )
    out["once_ready"] = providers(cluster)
    out["bump"] = operator_changes.bumped(cluster, ipam, runner)
    out["downgrade"] = operator_changes.downgraded(cluster, ipam, runner)
    out["rotation"] = operator_changes.rotated(
        cluster, next(c for c in crs if c["kind"] == INFRASTRUCTURE.kind), runner
    )
    # Last: a provider CR the operator cannot act on stops the upgrade of every other.
    out["unreleased"] = operator_changes.unreleased(cluster, ipam, runner)
