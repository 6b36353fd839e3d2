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
and a pin older than the version a provider runs; last, CAPMOX's token rotated as the program
rotates it, which must reach a new manager Pod.

tests/test_operator_real.py runs it (`in_new_netns("management.operator_trial.preflight", ...)`).
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from components import waits
from components.cluster_api import (
    CREDENTIALS_ROLLOUT_ENV,
    INFRASTRUCTURE,
    OPERATOR_NAMESPACE,
    PROVIDER_API_VERSION,
    PROVIDERS,
    credentials_data,
    credentials_rollout,
    credentials_secret_name,
)
from e2e.box.management import cert_manager_trial
from e2e.box.scenarios import CAPMOX_SECRET, CAPMOX_TOKEN, PROXMOX_ADDRESS, PROXMOX_PORT, VM_ADDRESS
from e2e.controllers import cert_manager
from e2e.engine import control_plane, pins, vendor
from e2e.standins.cluster import chart_repo_standin, pod_process, pod_runner, pod_volumes, provider_releases
from e2e.standins.proxmox import pve_api_standin

BOUND_SECONDS = 90.0
HTTPS = 443
# What marks the operator's cache of a provider's fetched components.
CACHE_LABEL = "managed-by.operator.cluster.x-k8s.io=true"
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
# The program's configSecret for CAPMOX, at the Proxmox VE stand-in that answers its manager.
CREDENTIALS = credentials_data(f"https://{PROXMOX_ADDRESS}:{PROXMOX_PORT}/", CAPMOX_TOKEN, CAPMOX_SECRET)
# The token's secret after docs/operations.md's rotation, made in Proxmox before the stack moves to it.
ROTATED = credentials_data(CREDENTIALS["PROXMOX_URL"], CAPMOX_TOKEN, "b2c3d4e5-f6a7-4b8c-9d0e-1f2a3b4c5d6e")
# CAPMOX's token on the stand-in, with both secrets: its manager reads the version as it starts,
# which every token may.
PROXMOX_TOKENS: dict[tuple[str, str], dict[str, dict[str, int]]] = {
    (CAPMOX_TOKEN, CAPMOX_SECRET): {},
    (CAPMOX_TOKEN, ROTATED["PROXMOX_SECRET"]): {},
}
# The Secret the operator renders from the InfrastructureProvider's configSecret for CAPMOX's manager.
MANAGER_CREDENTIALS = "capmox-manager-credentials"
# A name clusterctl's list of providers does not hold (the program's is `proxmox`).
UNKNOWN = ("InfrastructureProvider", "proxmox-ve", "capmox-other")
IPAM = next(p for p in PROVIDERS if p.kind == "IPAMProvider")
CORE = next(p for p in PROVIDERS if p.kind == "CoreProvider")
# The Deployments the served releases hold, whose Pods run the managers built here.
CORE_MANAGER = "capi-controller-manager"
CAPMOX_MANAGER = "capmox-controller-manager"
MANAGERS = (
    (CORE.namespace, CORE_MANAGER),
    ("capi-kubeadm-bootstrap-system", "capi-kubeadm-bootstrap-controller-manager"),
    ("capi-kubeadm-control-plane-system", "capi-kubeadm-control-plane-controller-manager"),
    (IPAM.namespace, "capi-ipam-in-cluster-controller-manager"),
    (INFRASTRUCTURE.namespace, CAPMOX_MANAGER),
)
# A minor below the IPAM pin, as an older stack file would send once the pin is installed.
OLDER = "v1.0.0"
# What preflight says of a provider while the CoreProvider is not Ready.
WAITING_FOR_CORE = "WaitingForCoreProviderReady"


def provider_crs() -> list[dict[str, Any]]:
    """The program's five provider CRs as it declares them (components/cluster_api.py _provider_crs)."""
    crs = []
    for p in PROVIDERS:
        spec: dict[str, Any] = {"version": pins.pinned(p.config_key)}
        if p is INFRASTRUCTURE:
            spec["configSecret"] = {"name": credentials_secret_name(CREDENTIALS)}
            spec["deployment"] = credentials_rollout(credentials_secret_name(CREDENTIALS))
        metadata = {"name": p.name, "namespace": p.namespace, "annotations": waits.wait_for("condition=Ready")}
        crs.append({"apiVersion": PROVIDER_API_VERSION, "kind": p.kind, "metadata": metadata, "spec": spec})
    return crs


def _namespaces_and_credentials() -> list[dict[str, Any]]:
    namespaces = {p.namespace for p in PROVIDERS} | {UNKNOWN[2]}
    listed = ({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": n}} for n in sorted(namespaces))
    return [*listed, _credentials_secret(CREDENTIALS)]


def _credentials_secret(credentials: dict[str, str]) -> dict[str, Any]:
    """The program's configSecret for CAPMOX (components/cluster_api.py `_credentials`)."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": credentials_secret_name(credentials), "namespace": INFRASTRUCTURE.namespace},
        "type": "Opaque",
        "immutable": True,
        "stringData": credentials,
    }


def _sent(cluster: control_plane.ControlPlane, items: list[dict[str, Any]]) -> dict[str, Any]:
    """`items` applied server-side, retried while the operator's webhook is not yet answering
    (its Pod starting): what the API server answered last and after how many seconds."""
    began = time.monotonic()
    listed = json.dumps({"apiVersion": "v1", "kind": "List", "items": items})
    while True:
        done = cluster.kubectl_as(cluster.kubeconfig, "apply", "--server-side", "-f", "-", stdin=listed)
        answer = {"rc": done.returncode, "stderr": done.stderr, "seconds": round(time.monotonic() - began, 1)}
        if done.returncode == 0 or "failed calling webhook" not in done.stderr or time.monotonic() > began + 60:
            return answer
        time.sleep(1)


def _providers(cluster: control_plane.ControlPlane) -> dict[str, Any]:
    """Each provider CR by kind/namespace/name: its spec and conditions."""
    kinds = ",".join(f"{p.kind.lower()}s.operator.cluster.x-k8s.io" for p in PROVIDERS)
    listed = json.loads(cluster.kubectl("get", kinds, "-A", "-o", "json").stdout)["items"]
    return {
        key_of(i): {
            "spec": i["spec"],
            "conditions": {c["type"]: c for c in (i.get("status") or {}).get("conditions", [])},
        }
        for i in listed
    }


def _until(cluster: control_plane.ControlPlane, what: str, done: Any, runner: pod_runner.PodRunner) -> float:
    """Seconds until `done(providers)`; past BOUND_SECONDS a RuntimeError with the operator's log."""
    began = time.monotonic()
    while not done(_providers(cluster)):
        if time.monotonic() > began + BOUND_SECONDS:
            raise RuntimeError(f"{what} not within {BOUND_SECONDS}s; the operator's log:\n{runner.logs()}")
        time.sleep(1)
    return round(time.monotonic() - began, 1)


def key_of(item: dict[str, Any]) -> str:
    return f"{item['kind']}/{item['metadata']['namespace']}/{item['metadata']['name']}"


def _reason(providers: dict[str, Any], key: str, condition: str = "PreflightCheckPassed") -> str:
    return str(providers.get(key, {}).get("conditions", {}).get(condition, {}).get("reason", ""))


def _status(providers: dict[str, Any], key: str, condition: str) -> str:
    return str(providers.get(key, {}).get("conditions", {}).get(condition, {}).get("status", ""))


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
            out["providers"] = _providers(cluster)
            out["operator_log"] = runner.logs()
            out["runner_errors"] = runner.errors + [e for r in manager_runners for e in r.errors]
            out["runner_events"] = runner.events
            out["manager_events"] = [e for r in manager_runners for e in r.events]
            out["capmox_credentials"] = _credentials_of([e for e in out["manager_events"] if "capmox" in e["pod"]])
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
    out["laid_out"] = _sent(cluster, _namespaces_and_credentials())
    crs = provider_crs()
    # IPAM as a stack from before a bump of its pin sends it: at the module's own version.
    ipam = next(c for c in crs if c["kind"] == IPAM.kind)
    before_the_bump = json.loads(json.dumps(ipam))
    before_the_bump["spec"]["version"] = vendor.IPAM_VERSION
    out["program"] = _sent(cluster, [c if c is not ipam else before_the_bump for c in crs])
    others = [key_of(c) for c in crs if c["kind"] != "CoreProvider"]
    out["preflight_seconds"] = _until(
        cluster,
        "the preflight of every provider but the core",
        lambda found: all(_reason(found, key) for key in others),
        runner,
    )
    before_the_core = _providers(cluster)
    out["before_the_core"] = {key: _reason(before_the_core, key) for key in others}
    kind, name, namespace = UNKNOWN
    unknown = {
        "apiVersion": PROVIDER_API_VERSION,
        "kind": kind,
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"version": "v0.9.1"},
    }
    out["unknown_sent"] = _sent(cluster, [unknown])
    key = f"{kind}/{namespace}/{name}"
    out["unknown_seconds"] = _until(cluster, "the unknown name's preflight", lambda f: _reason(f, key), runner)
    out["unknown_preflight"] = _providers(cluster)[key]["conditions"]["PreflightCheckPassed"]
    # Gone again, as its owner would take it away: a provider CR the operator refused stops the
    # upgrade of every other (clusterctl's plan reads each provider's version: `failed to parse
    # target version for the capmox-other/infrastructure-proxmox-ve provider`, seen here when it
    # stayed).
    out["unknown_deleted"] = cluster.kubectl(
        "delete", f"{kind.lower()}s.operator.cluster.x-k8s.io", name, "-n", namespace, "--timeout=60s"
    ).returncode
    core = f"{CORE.kind}/{CORE.namespace}/{CORE.name}"
    out["installed_seconds"] = _until(
        cluster,
        "the core's components installed",
        lambda found: _status(found, core, "ProviderInstalled") == "True" and _status(found, core, "Ready"),
        runner,
    )
    out["core_before_its_pod"] = _providers(cluster)[core]["conditions"]["Ready"]
    cached = cluster.kubectl("get", "configmaps", "-n", CORE.namespace, "-l", CACHE_LABEL, "-o", "json")
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
    out["core_ready_seconds"] = _until(
        cluster, "the core's Ready", lambda found: _status(found, core, "Ready") == "True", runner
    )
    fetched = [key_of(c) for c in crs if c["kind"] != "CoreProvider"]
    out["others_ready_seconds"] = _until(
        cluster,
        "the kubeadm, IPAM and CAPMOX providers' Ready",
        lambda found: all(_status(found, k, "Ready") == "True" for k in fetched),
        runner,
    )
    out["bump"] = _bumped(cluster, ipam, runner)
    out["downgrade"] = _downgraded(cluster, ipam, runner)
    out["rotation"] = _rotated(cluster, next(c for c in crs if c["kind"] == INFRASTRUCTURE.kind), runner)


def _bumped(
    cluster: control_plane.ControlPlane, program_cr: dict[str, Any], runner: pod_runner.PodRunner
) -> dict[str, Any]:
    """The IPAMProvider, installed and Ready at the module's version, bumped to the program's pin
    as the program's one-at-a-time upgrade sends it: upgraded in place by the operator (the
    components of the new release, its manager's new image), and what it leaves of the old
    version's cache."""
    key, pin = key_of(program_cr), program_cr["spec"]["version"]
    resource = f"{IPAM.kind.lower()}s.operator.cluster.x-k8s.io"

    def installed() -> str:
        jsonpath = "jsonpath={.status.installedVersion}"
        return cluster.kubectl("get", resource, IPAM.name, "-n", IPAM.namespace, "-o", jsonpath).stdout

    before = installed()
    sent = _sent(cluster, [program_cr])
    seconds = _until(
        cluster,
        "the IPAM provider upgraded",
        lambda found: installed() == pin and _status(found, key, "Ready") == "True",
        runner,
    )
    deployments = json.loads(cluster.kubectl("get", "deployments", "-n", IPAM.namespace, "-o", "json").stdout)
    caches = {
        kind: sorted(
            i["metadata"]["name"]
            for i in json.loads(
                cluster.kubectl("get", kind, "-n", IPAM.namespace, "-l", CACHE_LABEL, "-o", "json").stdout
            )["items"]
        )
        for kind in ("configmaps", "secrets")
    }
    return {
        "installed": (before, installed()),
        "sent": sent,
        "seconds": seconds,
        "images": [c["image"] for d in deployments["items"] for c in d["spec"]["template"]["spec"]["containers"]],
        "caches": caches,
    }


def _downgraded(
    cluster: control_plane.ControlPlane, program_cr: dict[str, Any], runner: pod_runner.PodRunner
) -> dict[str, Any]:
    """The IPAMProvider the operator installed at the program's pin, then a pin a minor below it
    applied over it, as a recovery from an older stack file would: what the operator said."""
    key = key_of(program_cr)
    resource = f"{IPAM.kind.lower()}s.operator.cluster.x-k8s.io"
    installed = cluster.kubectl(
        "get", resource, IPAM.name, "-n", IPAM.namespace, "-o", "jsonpath={.status.installedVersion}"
    ).stdout
    older = json.loads(json.dumps(program_cr))
    older["spec"]["version"] = OLDER
    sent = _sent(cluster, [older])
    seconds = _until(
        cluster, "the downgrade's preflight", lambda f: _status(f, key, "PreflightCheckPassed") == "False", runner
    )
    return {"installed": installed, "sent": sent, "seconds": seconds}


def _rotated(
    cluster: control_plane.ControlPlane, program_cr: dict[str, Any], runner: pod_runner.PodRunner
) -> dict[str, Any]:
    """CAPMOX's token rotated as the program does it (docs/operations.md): the new secret in a
    Secret of a new name, the InfrastructureProvider pointed at it and its manager container's env
    naming it (components/cluster_api.py `credentials_rollout`; the old Secret left: the program
    deletes it after). What the operator renders for the manager, and the manager's Deployment
    rolled to read it: its generation, and its one Pod the new one."""
    name = credentials_secret_name(ROTATED)
    rotated = json.loads(json.dumps(program_cr))
    rotated["spec"] |= {"configSecret": {"name": name}, "deployment": credentials_rollout(name)}
    generation = _deployment(cluster)["metadata"]["generation"]
    sent = _sent(cluster, [_credentials_secret(ROTATED), rotated])
    secret = ("get", "secret", MANAGER_CREDENTIALS, "-n", INFRASTRUCTURE.namespace, "-o", "jsonpath={.data.secret}")
    wanted = base64.b64encode(ROTATED["PROXMOX_SECRET"].encode()).decode()
    rendered = _until(
        cluster, "the rotated credentials rendered", lambda _: cluster.kubectl(*secret).stdout == wanted, runner
    )

    def rolled(_: Any) -> bool:
        live = _deployment(cluster)
        current, status = live["metadata"]["generation"], live.get("status") or {}
        counts = [status.get(k) for k in ("replicas", "updatedReplicas", "availableReplicas")]
        return current > generation and status.get("observedGeneration") == current and counts == [1, 1, 1]

    return {
        "sent": sent,
        "rendered_seconds": rendered,
        "rolled_seconds": _until(cluster, "CAPMOX's manager rolled", rolled, runner),
        "generation": (generation, _deployment(cluster)["metadata"]["generation"]),
    }


def _deployment(cluster: control_plane.ControlPlane) -> dict[str, Any]:
    found = cluster.kubectl(
        "get", "deployment", "capmox-controller-manager", "-n", INFRASTRUCTURE.namespace, "-o", "json"
    )
    live: dict[str, Any] = json.loads(found.stdout)
    return live


def _credentials_of(events: list[dict[str, Any]]) -> dict[str, str]:
    """The credentials in the environment of the process of the last Pod started among `events`."""
    pid = [event for event in events if event["event"] == "started"][-1]["pid"]
    environ = Path(f"/proc/{pid}/environ").read_bytes().decode().split("\0")
    found = dict(line.split("=", 1) for line in environ if "=" in line)
    # The variables the release's Deployment reads from its Secret (manager_credentials_patch.yaml).
    return {
        key: found.get(key, "") for key in ("PROXMOX_URL", "PROXMOX_TOKEN", "PROXMOX_SECRET", CREDENTIALS_ROLLOUT_ENV)
    }
