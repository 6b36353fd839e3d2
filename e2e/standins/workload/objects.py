"""What the workload cluster's stand-ins share: reading and writing objects through kubectl as a
user of their own, reading the fields they need (a missing one is a loud KeyError naming the object
and the field, never a default), and the shape of a metav1.Condition."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

from e2e.engine.control_plane import ControlPlane

# The API versions the stand-ins know, as Cluster API v1.12 and CAPMOX v0.9 serve them (storage
# versions); a resource is always read at its version, so an object is never read in a shape the
# stand-in was not written for.
CORE = "cluster.x-k8s.io/v1beta2"
CONTROL_PLANE = "controlplane.cluster.x-k8s.io/v1beta2"
BOOTSTRAP = "bootstrap.cluster.x-k8s.io/v1beta2"
INFRASTRUCTURE = "infrastructure.cluster.x-k8s.io/v1alpha2"
CLUSTER_NAME_LABEL = "cluster.x-k8s.io/cluster-name"
SECRET_TYPE = "cluster.x-k8s.io/secret"
# Where a worker's bootstrap data (the KubeadmConfig stand-in's) writes its kubeadm JoinConfiguration.
JOIN_CONFIG_PATH = "/run/kubeadm/kubeadm-join-config.yaml"


@dataclass
class Record:
    """What the stand-ins did and could not do, for a test to read."""

    errors: list[str] = field(default_factory=list)
    timeline: list[dict[str, Any]] = field(default_factory=list)
    """{"at": time.time(), "what": ..., "object": kind/namespace/name}, in order."""

    def did(self, what: str, obj: str) -> None:
        self.timeline.append({"at": time.time(), "what": what, "object": obj})


@dataclass(frozen=True)
class Client:
    """kubectl on `cluster` as `user`; each failure raises with kubectl's message."""

    cluster: ControlPlane
    user: str

    def run(self, *args: str, stdin: str | None = None) -> str:
        done = self.cluster.kubectl_as(self.cluster.kubeconfig_of(self.user), *args, stdin=stdin)
        if done.returncode != 0:
            raise RuntimeError(f"kubectl {' '.join(args[:4])} on {self.cluster.address}: {done.stderr.strip()}")
        return done.stdout

    def items(self, resource: str, api_version: str, namespace: str | None = None) -> list[dict[str, Any]]:
        """Every object of `resource` (plural) at `api_version`, in `namespace` or all."""
        group, _, version = api_version.rpartition("/")
        name = f"{resource}.{version}.{group}" if group else resource
        where = ("-n", namespace) if namespace else ("-A",)
        done = self.cluster.kubectl_as(self.cluster.kubeconfig_of(self.user), "get", name, *where, "-o", "json")
        if done.returncode != 0 and "doesn't have a resource type" in done.stderr:
            return []  # its CRD is not installed yet: nor is its provider
        if done.returncode != 0:
            raise RuntimeError(f"kubectl get {name} on {self.cluster.address}: {done.stderr.strip()}")
        found: list[dict[str, Any]] = json.loads(done.stdout)["items"]
        for item in found:
            if item.get("apiVersion") != api_version:
                raise ValueError(f"{ident(item)} read as {item.get('apiVersion')}, not {api_version}")
        return found

    def get(self, resource: str, api_version: str, namespace: str, name: str) -> dict[str, Any] | None:
        group, _, version = api_version.rpartition("/")
        full = f"{resource}.{version}.{group}" if group else resource
        done = self.cluster.kubectl_as(
            self.cluster.kubeconfig_of(self.user), "get", full, name, "-n", namespace, "-o", "json"
        )
        if done.returncode != 0 and "NotFound" in done.stderr:
            return None
        if done.returncode != 0:
            raise RuntimeError(f"kubectl get {full} {namespace}/{name}: {done.stderr.strip()}")
        found: dict[str, Any] = json.loads(done.stdout)
        return found

    def patch(self, obj: dict[str, Any], body: dict[str, Any], *, status: bool = False) -> None:
        """A merge patch of `obj` (as read), of its status subresource with `status`."""
        kind, meta = obj["kind"], obj["metadata"]
        group, _, version = obj["apiVersion"].rpartition("/")
        resource = f"{kind.lower()}.{version}.{group}" if group else kind.lower()
        where = ("-n", meta["namespace"]) if "namespace" in meta else ()
        sub = ("--subresource=status",) if status else ()
        self.run("patch", resource, meta["name"], *where, *sub, "--type=merge", "-p", json.dumps(body))

    def apply(self, obj: dict[str, Any]) -> None:
        """Created or replaced as a whole (client-side), as a controller's CreateOrUpdate."""
        self.run("apply", "-f", "-", stdin=json.dumps(obj))


def need(obj: dict[str, Any], path: str) -> Any:
    """The field at dotted `path` of `obj`; a KeyError naming both where it is missing."""
    value: Any = obj
    for key in path.split("."):
        if not isinstance(value, dict) or key not in value:
            raise KeyError(f"{ident(obj)} has no {path}")
        value = value[key]
    return value


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
