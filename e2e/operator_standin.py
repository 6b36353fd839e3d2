"""A stand-in for cluster-api-operator, which cannot run in the box (no kubelet, no provider
images): it does the one thing the program waits on. When a provider CR's spec is newer than what
the operator has seen (status.observedGeneration below metadata.generation), it takes a while, as
installing a provider does, then records the spec as installed: observedGeneration,
installedVersion and Ready=True, the way the operator's ProviderStatus carries them. It changes
nothing else, and records each CR it reconciled, with the generation and when.

It talks to the API server under an identity of its own, so its writes are not the engine's.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from e2e.control_plane import OPERATOR_USER, ControlPlane

POLL_SECONDS = 0.5


@dataclass
class OperatorStandIn:
    install_seconds: float
    reconciled: list[dict[str, Any]] = field(default_factory=list)
    """kind, namespace, name, generation, version and the time.time() it was marked Ready."""
    errors: list[str] = field(default_factory=list)


def _reconcile(cluster: ControlPlane, resources: str, standin: OperatorStandIn, seen: dict[str, float]) -> None:
    as_operator = cluster.kubeconfig_of(OPERATOR_USER)
    listed = cluster.kubectl_as(as_operator, "get", resources, "-A", "-o", "json")
    if listed.returncode != 0 and "doesn't have a resource type" in listed.stderr:
        return  # The operator chart has not installed its CRDs yet: no operator runs either.
    if listed.returncode != 0:
        standin.errors.append(listed.stderr.strip())
        return
    for item in json.loads(listed.stdout)["items"]:
        meta, status = item["metadata"], item.get("status") or {}
        generation = meta["generation"]
        if status.get("observedGeneration", 0) >= generation:
            continue
        key = f"{item['kind']}/{meta['namespace']}/{meta['name']}@{generation}"
        first_seen = seen.setdefault(key, time.monotonic())
        if time.monotonic() - first_seen < standin.install_seconds:
            continue
        version = item["spec"]["version"]
        ready = {
            "observedGeneration": generation,
            "installedVersion": version,
            "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": _now()}],
        }
        patched = cluster.kubectl_as(
            as_operator,
            *("patch", f"{item['kind'].lower()}.{item['apiVersion'].split('/')[0]}", meta["name"]),
            *("-n", meta["namespace"], "--subresource=status", "--type=merge", "-p", json.dumps({"status": ready})),
        )
        if patched.returncode != 0:
            standin.errors.append(patched.stderr.strip())
            continue
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


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


@contextmanager
def running(cluster: ControlPlane, kinds: Sequence[str], install_seconds: float) -> Iterator[OperatorStandIn]:
    """Reconciles the provider CRs of `kinds` (plural.group) on `cluster` for the block."""
    standin = OperatorStandIn(install_seconds)
    stop = threading.Event()
    seen: dict[str, float] = {}

    def loop() -> None:
        while not stop.wait(POLL_SECONDS):
            try:
                _reconcile(cluster, ",".join(kinds), standin, seen)
            except (KeyError, ValueError) as unknown:
                # A CR of a shape it does not know: said, not skipped in silence.
                standin.errors.append(f"cannot reconcile: {unknown!r}")

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    try:
        yield standin
    finally:
        stop.set()
        thread.join(timeout=30)
