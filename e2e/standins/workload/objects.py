"""What the workload cluster's stand-ins share: reading and writing objects through the API as a
user of their own, reading the fields they need (a missing one is a loud KeyError naming the object
and the field, never a default), and the shape of a metav1.Condition."""

from __future__ import annotations

import functools
import time
from dataclasses import dataclass, field
from typing import Any

from e2e.engine.control_plane import ControlPlane
from e2e.engine.kube_api import Api

# The API versions the stand-ins know, as Cluster API v1.12 and CAPMOX v0.9 serve them (storage
# versions); a resource is always read at its version, so an object is never read in a shape the
# stand-in was not written for.
CORE = "cluster.x-k8s.io/v1beta2"
CONTROL_PLANE = "controlplane.cluster.x-k8s.io/v1beta2"
BOOTSTRAP = "bootstrap.cluster.x-k8s.io/v1beta2"
INFRASTRUCTURE = "infrastructure.cluster.x-k8s.io/v1alpha2"
CLUSTER_NAME_LABEL = "cluster.x-k8s.io/cluster-name"
# On a control-plane Machine, and on a MachineDeployment's Machines (api/core/v1beta2/machine_types.go).
CONTROL_PLANE_MACHINE_LABEL = "cluster.x-k8s.io/control-plane"
DEPLOYMENT_NAME_LABEL = "cluster.x-k8s.io/deployment-name"
SECRET_TYPE = "cluster.x-k8s.io/secret"
# Listed a namespace at a time: Helm's release records make every Secret of a management cluster
# the heaviest list it serves. Every other kind is listed across all namespaces, once a pass.
LISTED_BY_NAMESPACE = frozenset({"secrets"})


@dataclass
class Record:
    """What the stand-ins did and could not do, for a test to read."""

    errors: list[str] = field(default_factory=list)
    timeline: list[dict[str, Any]] = field(default_factory=list)
    """{"at": time.time(), "what": ..., "object": kind/namespace/name}, in order."""

    def did(self, what: str, obj: str) -> None:
        self.timeline.append({"at": time.time(), "what": what, "object": obj})


class Client:
    """The API of `cluster` as `user` (e2e/engine/kube_api.py); each failure raises with the
    API server's message. The kubeconfig is read at the first request: in the whole box it exists
    only once the program has installed k3s.

    Reads come from a cache, as a controller's come from its informers: each kind is listed once
    (across all namespaces but LISTED_BY_NAMESPACE) and kept until
    `reread` (the start of each pass) or a write of that kind. An idle lab1 box's stand-ins made
    about 690 requests a minute of its management API server with one GET per object read; one
    LIST per kind and pass is a fraction of it."""

    def __init__(self, cluster: ControlPlane, user: str) -> None:
        self.cluster, self.user = cluster, user
        self._listed: dict[tuple[str, str, str | None], list[dict[str, Any]]] = {}

    @functools.cached_property
    def api(self) -> Api:
        return Api.from_kubeconfig(self.cluster.kubeconfig_of(self.user))

    def reread(self) -> None:
        """What the next reads answer listed anew: a pass starts from the API server's state."""
        self._listed.clear()

    def items(self, resource: str, api_version: str, namespace: str | None = None) -> list[dict[str, Any]]:
        """Every object of `resource` (plural) at `api_version`, in `namespace` or all; none while
        its CRD is not installed (nor is its provider)."""
        if namespace is not None and resource not in LISTED_BY_NAMESPACE:
            everywhere = self.items(resource, api_version)
            return [item for item in everywhere if item["metadata"].get("namespace") == namespace]
        key = (resource, api_version, namespace)
        if key not in self._listed:
            self._listed[key] = self.api.items(api_version, resource, namespace) or []
        return self._listed[key]

    def get(self, resource: str, api_version: str, namespace: str, name: str) -> dict[str, Any] | None:
        return next(
            (item for item in self.items(resource, api_version, namespace) if item["metadata"]["name"] == name), None
        )

    def patch(self, obj: dict[str, Any], body: dict[str, Any], *, status: bool = False) -> None:
        """A merge patch of `obj` (as read), of its status subresource with `status`."""
        self.api.merge_patch(obj, body, subresource="status" if status else "")
        self._written(obj)

    def apply(self, obj: dict[str, Any]) -> None:
        """Created or merged into the live one (each item of a List), as a controller's CreateOrUpdate."""
        for item in obj["items"] if obj["kind"] == "List" else [obj]:
            self.api.create_or_merge(item)
            self._written(item)

    def delete(self, obj: dict[str, Any], *, grace_seconds: int | None = None) -> None:
        self.api.delete(obj, grace_seconds=grace_seconds)
        self._written(obj)

    def _written(self, obj: dict[str, Any]) -> None:
        """The cached lists of `obj`'s kind forgotten: a read after a write sees it."""
        resource = self.api.plural(obj["apiVersion"], obj["kind"])
        for key in [key for key in self._listed if key[:2] == (resource, obj["apiVersion"])]:
            del self._listed[key]


def need(obj: dict[str, Any], path: str) -> Any:
    """The field at dotted `path` of `obj`; a KeyError naming both where it is missing."""
    value: Any = obj
    for key in path.split("."):
        if not isinstance(value, dict) or key not in value:
            raise KeyError(f"{ident(obj)} has no {path}")
        value = value[key]
    return value


def need_true(obj: dict[str, Any], path: str) -> bool:
    """Whether the boolean at `path` is set and true (absent is false, as the contract reads it)."""
    try:
        return need(obj, path) is True
    except KeyError:
        return False


def ident(obj: dict[str, Any]) -> str:
    meta = obj.get("metadata", {})
    return f"{obj.get('kind')}/{meta.get('namespace', '')}/{meta.get('name')}"


def owner(obj: dict[str, Any], kind: str, api_group: str) -> str | None:
    """The name of `obj`'s owner of `kind` in `api_group` (as Cluster API's util.GetOwner* reads
    it), or None while there is none yet."""
    for ref in obj["metadata"].get("ownerReferences", []):
        if ref["kind"] == kind and ref["apiVersion"].split("/")[0] == api_group:
            name: str = ref["name"]
            return name
    return None


def owner_ref(obj: dict[str, Any]) -> dict[str, Any]:
    """A controller reference to `obj`, as a provider puts on what it makes for it."""
    meta = obj["metadata"]
    return {
        "apiVersion": obj["apiVersion"],
        "kind": obj["kind"],
        "name": meta["name"],
        "uid": meta["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def conditions(generation: int, reasons: dict[str, str]) -> list[dict[str, Any]]:
    """metav1.Conditions, one for each type in `reasons`, True unless its reason starts with
    `Not` (as Cluster API names its reasons: Available, NotScalingUp, ...)."""
    stamp = now()
    return [
        {
            **{
                "type": kind,
                "status": "False" if reason.startswith("Not") else "True",
                "reason": reason,
                "message": "",
            },
            **{"observedGeneration": generation, "lastTransitionTime": stamp},
        }
        for kind, reason in reasons.items()
    ]
