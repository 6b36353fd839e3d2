"""What the program changes through cluster-api-operator's real manager once the providers run
(issue 68), the last steps of the operator trial (operator_trial.py): a pin bumped, upgraded in
place; a pin older than the installed version, refused; CAPMOX's token rotated as the program
rotates it, which must reach a new manager Pod; a pin with no release, named. And what the
trial's steps share: a send retried while the operator's webhooks start, the provider CRs'
conditions, and the wait on them.
"""

from __future__ import annotations

import base64
import json
import time
from pathlib import Path
from typing import Any

from components.cluster_api import (
    CREDENTIALS_ROLLOUT_ENV,
    INFRASTRUCTURE,
    PROVIDERS,
    credentials_data,
    credentials_rollout,
    credentials_secret_name,
)
from e2e.box.scenarios import CAPMOX_SECRET, CAPMOX_TOKEN, PROXMOX_ADDRESS, PROXMOX_PORT
from e2e.engine import control_plane
from e2e.standins.cluster import pod_runner

BOUND_SECONDS = 90.0
# What marks the operator's cache of a provider's fetched components.
CACHE_LABEL = "managed-by.operator.cluster.x-k8s.io=true"
# The program's configSecret for CAPMOX, at the Proxmox VE stand-in that answers its manager.
CREDENTIALS = credentials_data(f"https://{PROXMOX_ADDRESS}:{PROXMOX_PORT}/", CAPMOX_TOKEN, CAPMOX_SECRET)
# The token's secret after docs/operations.md's rotation, made in Proxmox before the stack moves to it.
ROTATED = credentials_data(CREDENTIALS["PROXMOX_URL"], CAPMOX_TOKEN, "b2c3d4e5-f6a7-4b8c-9d0e-1f2a3b4c5d6e")
# The Secret the operator renders from the InfrastructureProvider's configSecret for CAPMOX's manager.
MANAGER_CREDENTIALS = "capmox-manager-credentials"
IPAM = next(p for p in PROVIDERS if p.kind == "IPAMProvider")
CAPMOX_MANAGER = "capmox-controller-manager"
# A minor below the IPAM pin, as an older stack file would send once the pin is installed.
OLDER = "v1.0.0"
# A minor above the IPAM pin that its repository never released: a mistyped pin.
UNRELEASED = "v1.2.0"


def credentials_secret(credentials: dict[str, str]) -> dict[str, Any]:
    """The program's configSecret for CAPMOX (components/cluster_api.py `_credentials`)."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": credentials_secret_name(credentials), "namespace": INFRASTRUCTURE.namespace},
        "type": "Opaque",
        "immutable": True,
        "stringData": credentials,
    }


def sent(cluster: control_plane.ControlPlane, items: list[dict[str, Any]]) -> dict[str, Any]:
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


def providers(cluster: control_plane.ControlPlane) -> dict[str, Any]:
    """Each provider CR by kind/namespace/name: its spec and conditions."""
    kinds = ",".join(resource_of(p.kind) for p in PROVIDERS)
    listed = json.loads(cluster.kubectl("get", kinds, "-A", "-o", "json").stdout)["items"]
    return {
        key_of(i): {
            "spec": i["spec"],
            "conditions": {c["type"]: c for c in (i.get("status") or {}).get("conditions", [])},
        }
        for i in listed
    }


def until(cluster: control_plane.ControlPlane, what: str, done: Any, runner: pod_runner.PodRunner) -> float:
    """Seconds until `done(providers)`; past BOUND_SECONDS a RuntimeError with the operator's log."""
    began = time.monotonic()
    while not done(providers(cluster)):
        if time.monotonic() > began + BOUND_SECONDS:
            raise RuntimeError(f"{what} not within {BOUND_SECONDS}s; the operator's log:\n{runner.logs()}")
        time.sleep(1)
    return round(time.monotonic() - began, 1)


def resource_of(kind: str) -> str:
    """The provider kind's resource, as kubectl names it."""
    return f"{kind.lower()}s.operator.cluster.x-k8s.io"


def key_of(item: dict[str, Any]) -> str:
    return f"{item['kind']}/{item['metadata']['namespace']}/{item['metadata']['name']}"


def reason(providers: dict[str, Any], key: str, condition: str = "PreflightCheckPassed") -> str:
    return str(providers.get(key, {}).get("conditions", {}).get(condition, {}).get("reason", ""))


def status(providers: dict[str, Any], key: str, condition: str) -> str:
    return str(providers.get(key, {}).get("conditions", {}).get(condition, {}).get("status", ""))


def bumped(
    cluster: control_plane.ControlPlane, program_cr: dict[str, Any], runner: pod_runner.PodRunner
) -> dict[str, Any]:
    """The IPAMProvider, installed and Ready at the module's version, bumped to the program's pin
    as the program's one-at-a-time upgrade sends it: upgraded in place by the operator (the
    components of the new release, its manager's new image), and what it leaves of the old
    version's cache."""
    key, pin = key_of(program_cr), program_cr["spec"]["version"]

    def installed() -> str:
        return _ipam_field(cluster, ".status.installedVersion")

    before = installed()
    answered = sent(cluster, [program_cr])
    seconds = until(
        cluster,
        "the IPAM provider upgraded",
        lambda found: installed() == pin and status(found, key, "Ready") == "True",
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
        "sent": answered,
        "seconds": seconds,
        "images": [c["image"] for d in deployments["items"] for c in d["spec"]["template"]["spec"]["containers"]],
        "caches": caches,
    }


def downgraded(
    cluster: control_plane.ControlPlane, program_cr: dict[str, Any], runner: pod_runner.PodRunner
) -> dict[str, Any]:
    """The IPAMProvider the operator installed at the program's pin, then a pin a minor below it
    applied over it, as a recovery from an older stack file would: what the operator said."""
    key = key_of(program_cr)
    installed = _ipam_field(cluster, ".status.installedVersion")
    older = json.loads(json.dumps(program_cr))
    older["spec"]["version"] = OLDER
    answered = sent(cluster, [older])
    seconds = until(
        cluster, "the downgrade's preflight", lambda f: status(f, key, "PreflightCheckPassed") == "False", runner
    )
    return {"installed": installed, "sent": answered, "seconds": seconds, "found": providers(cluster)[key]}


def rotated(
    cluster: control_plane.ControlPlane, program_cr: dict[str, Any], runner: pod_runner.PodRunner
) -> dict[str, Any]:
    """CAPMOX's token rotated as the program does it (docs/operations.md): the new secret in a
    Secret of a new name, the InfrastructureProvider pointed at it and its manager container's env
    naming it (components/cluster_api.py `credentials_rollout`; the old Secret left: the program
    deletes it after). What the operator renders for the manager, and the manager's Deployment
    rolled to read it: its generation, and its one Pod the new one."""
    name = credentials_secret_name(ROTATED)
    cr = json.loads(json.dumps(program_cr))
    cr["spec"] |= {"configSecret": {"name": name}, "deployment": credentials_rollout(name)}
    generation = _deployment(cluster)["metadata"]["generation"]
    answered = sent(cluster, [credentials_secret(ROTATED), cr])
    secret = ("get", "secret", MANAGER_CREDENTIALS, "-n", INFRASTRUCTURE.namespace, "-o", "jsonpath={.data.secret}")
    wanted = base64.b64encode(ROTATED["PROXMOX_SECRET"].encode()).decode()
    rendered = until(
        cluster, "the rotated credentials rendered", lambda _: cluster.kubectl(*secret).stdout == wanted, runner
    )

    def rolled(_: Any) -> bool:
        live = _deployment(cluster)
        current, observed = live["metadata"]["generation"], live.get("status") or {}
        counts = [observed.get(k) for k in ("replicas", "updatedReplicas", "availableReplicas")]
        return current > generation and observed.get("observedGeneration") == current and counts == [1, 1, 1]

    return {
        "sent": answered,
        "rendered_seconds": rendered,
        "rolled_seconds": until(cluster, "CAPMOX's manager rolled", rolled, runner),
        "generation": (generation, _deployment(cluster)["metadata"]["generation"]),
    }


def _deployment(cluster: control_plane.ControlPlane) -> dict[str, Any]:
    found = cluster.kubectl(
        "get", "deployment", "capmox-controller-manager", "-n", INFRASTRUCTURE.namespace, "-o", "json"
    )
    live: dict[str, Any] = json.loads(found.stdout)
    return live


def credentials_of(events: list[dict[str, Any]]) -> dict[str, str]:
    """The credentials in the environment of the process of the last Pod started among `events`."""
    pid = [event for event in events if event["event"] == "started"][-1]["pid"]
    environ = Path(f"/proc/{pid}/environ").read_bytes().decode().split("\0")
    found = dict(line.split("=", 1) for line in environ if "=" in line)
    # The variables the release's Deployment reads from its Secret (manager_credentials_patch.yaml).
    return {
        key: found.get(key, "") for key in ("PROXMOX_URL", "PROXMOX_TOKEN", "PROXMOX_SECRET", CREDENTIALS_ROLLOUT_ENV)
    }


def unreleased(
    cluster: control_plane.ControlPlane, program_cr: dict[str, Any], runner: pod_runner.PodRunner
) -> dict[str, Any]:
    """The IPAMProvider sent at a version its repository never released (UNRELEASED), as a pin
    mistyped in the program would send it: what the operator says, the version it keeps, and the
    generation its conditions are of."""
    key = key_of(program_cr)
    cr = json.loads(json.dumps(program_cr))
    cr["spec"]["version"] = UNRELEASED
    answered = sent(cluster, [cr])

    def said(found: dict[str, Any]) -> bool:
        conditions = found.get(key, {}).get("conditions", {}).values()
        return any(UNRELEASED in str(c.get("message", "")) for c in conditions)

    return {
        "sent": answered,
        "seconds": until(cluster, "the operator's word on an unreleased version", said, runner),
        "installed": _ipam_field(cluster, ".status.installedVersion"),
        "generation": int(_ipam_field(cluster, ".metadata.generation")),
        "conditions": providers(cluster)[key]["conditions"],
    }


def _ipam_field(cluster: control_plane.ControlPlane, path: str) -> str:
    jsonpath = f"jsonpath={{{path}}}"
    return cluster.kubectl("get", resource_of(IPAM.kind), IPAM.name, "-n", IPAM.namespace, "-o", jsonpath).stdout
