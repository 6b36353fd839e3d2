"""What an owner set by hand on a workload cluster's objects, and the entry's `keptFields` that
keeps it (docs/adoption.md, W1).

A cluster clusterctl made carries phase 1's hand work: `kubectl annotate`, `label`, `patch` and
`edit` after clusterctl's apply, or fields added to the manifest before it. The run that makes the
cluster the program's (W6) takes every field that a manager whose name starts with `kubectl`
holds (pulumi-kubernetes 4.32 `fixCSAFieldManagers`, provider/pkg/await/await.go, a prefix match;
never in a preview), and server-side apply then removes each such field the program does not
declare: on a KubeadmControlPlane, a rollout of the control plane. So each of them is found
before that run, from the objects' managedFields (`held`), and either kept, as the entry's
`keptFields.<role>` that the program renders beside its own fields (`merge`), or refused, naming
the field, its manager, the key that keeps it and the kubectl line that removes it (`advice`).
"""

from __future__ import annotations

import copy
import json
import re
import shlex
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from components import field_manager

# The key under keptFields for each of the seven objects (components.cluster_template.ClusterObjects.roles).
ROLES = (
    *("cluster", "proxmoxCluster", "controlPlane", "controlPlaneTemplate", "workerTemplate", "workerConfig"),
    "machineDeployment",
)
# Annotations that are never the owner's to keep: kubectl's record of its last apply (the apply
# that takes kubectl's fields drops it, as it should), pulumi-kubernetes's own
# (pkg/metadata/annotations.go) and the program's stack mark (components.hand_made_clusters).
RESERVED_ANNOTATIONS = ("kubectl.kubernetes.io/last-applied-configuration", "lab-mgmt.homelab/stack")
RESERVED_ANNOTATION_PREFIXES = ("pulumi.com/",)
# The managers of hand work whose fields fixCSAFieldManagers hands to the program's, by name
# prefix and operation; a field only they hold is removed when the program's apply leaves it out.
# fixCSA takes pulumi-kubernetes's own create (`pulumi-kubernetes`, Update) too, but that is no
# hand work: what it holds beyond what the program renders is what the API server defaulted at the
# create (found by the box's recovery: a ProxmoxCluster's ipv4Config.metric), which comes back.
TAKEN_MANAGERS = (
    ("kubectl", ("Apply", "Update")),
    ("before-first-apply", ("Update",)),
)
# The program's own applies, under its name or a name pulumi-kubernetes drew for a stack before it:
# hand work, in the eyes of a recovery, whose stack applies under the same name and so drops what
# the lost stack applied and the recovered settings do not render (review 5, finding 2).
PROGRAM_APPLIES = ((f"{field_manager.CREATE}-", ("Apply",)),)
# kubectl apply's manager: its record of what it sent is the object's last-applied annotation.
CLIENT_SIDE_APPLY = "kubectl-client-side-apply"
_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]*$")


class KeptFieldError(Exception):
    """A kept field the program renders itself (the caller raises it as a RunError of its own)."""


def reserved(annotation: str) -> bool:
    return annotation in RESERVED_ANNOTATIONS or annotation.startswith(RESERVED_ANNOTATION_PREFIXES)


def merge(body: dict[str, Any], kept: Mapping[str, Any], where: str) -> None:
    """`kept` (an object's `keptFields.<role>`) added to its rendering `body`. A field the program
    renders itself is not the owner's to keep: KeptFieldError naming it at `where` (its key)."""
    for key, value in kept.items():
        if key not in body:
            body[key] = copy.deepcopy(value)
        elif isinstance(body[key], dict) and isinstance(value, Mapping):
            merge(body[key], value, f"{where}{_segment(key)}")
        else:
            raise KeptFieldError(
                f"{where}{_segment(key)}: the program renders this field itself "
                f"({json.dumps(body[key])}): take it out of keptFields"
            )


@dataclass(frozen=True)
class HandSet:
    """A field the rendering lacks, held by a manager whose fields the program's apply takes."""

    path: tuple[str | int, ...]
    """From the object's root: a key of an object, or the index of an element in a list."""
    value: Any
    managers: tuple[str, ...]

    @property
    def shown(self) -> str:
        return "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in self.path).lstrip(".")


def held(
    live: Mapping[str, Any],
    rendered: Mapping[str, Any],
    skipped: tuple[tuple[str, ...], ...],
    applied: Mapping[str, Any] | None = None,
    taken: tuple[tuple[str, tuple[str, ...]], ...] = (),
) -> list[HandSet]:
    """Each field of `live` under metadata.labels, metadata.annotations or spec that a taken
    manager holds (TAKEN_MANAGERS and `taken`, not a subresource's entry) and that `rendered`
    lacks, at its highest level the rendering lacks that no manager that stays holds anything
    under (what a staying manager holds itself survives; server-side apply removes per field, so
    the rest of the container goes); unless it is one of `skipped` (what the program leaves to
    others on purpose). Of what kubectl apply's create holds, only what its record `applied`
    (last-applied-configuration) has: the API server gives the creator the fields the CRD's schema
    defaults too (found by the box: a ProxmoxCluster's `ipv4Config.metric`), which its apply did
    not send and which come back."""
    held_by: dict[tuple[str | int, ...], set[str]] = {}
    taken_nodes: list[tuple[tuple[str | int, ...], Mapping[str, Any], str]] = []
    staying: set[tuple[str | int, ...]] = set()
    for entry in live.get("metadata", {}).get("managedFields") or []:
        if entry.get("subresource"):
            continue
        fields = entry.get("fieldsV1") or {}
        if _taken(entry, taken):
            manager = str(entry.get("manager", ""))
            taken_nodes += [(path, sub, manager) for path, sub in _absent(fields, live, rendered, ())]
        else:
            staying.update(_owned(fields, live, ()))
    for path, sub, manager in taken_nodes:
        for lost in _lost(path, sub, live, staying):
            if manager != CLIENT_SIDE_APPLY or applied is None or _has(applied, lost, live):
                held_by.setdefault(lost, set()).add(manager)
    found = []
    for path, managers in sorted(held_by.items(), key=lambda item: [str(p) for p in item[0]]):
        if _skipped(path, skipped):
            continue
        found.append(HandSet(path, _at(live, path), tuple(sorted(managers))))
    return found


def _taken(entry: Mapping[str, Any], taken: tuple[tuple[str, tuple[str, ...]], ...] = ()) -> bool:
    manager = str(entry.get("manager", ""))
    return not entry.get("subresource") and any(
        manager.startswith(prefix) and entry.get("operation") in operations
        for prefix, operations in (*TAKEN_MANAGERS, *taken)
    )


def at_other_versions(live: Mapping[str, Any]) -> list[tuple[int, Mapping[str, Any]]]:
    """Each entry (with its index) of a manager whose fields the program's apply takes, recorded
    at an apiVersion other than the one `live` is read at: kubectl's work on a lab made before
    Cluster API v1.11, at v1beta1 (review 5, 10i). fixCSAFieldManagers (fluxcd/pkg/ssa's
    PatchReplaceFieldsManagers) renames the first taken entry to the program's manager, keeping
    its apiVersion, and merges every later one's fields into it whatever theirs: the set the API
    server then prunes by is labelled with one version and may hold paths of another (a v1beta1
    `extraArgs` map under a v1beta2 label), so what the run would remove cannot be read
    beforehand, nor can `held` read such an entry against the object as it is read."""
    version = live.get("apiVersion")
    return [
        (index, entry)
        for index, entry in enumerate(live.get("metadata", {}).get("managedFields") or [])
        if _taken(entry) and entry.get("apiVersion", version) != version
    ]


def version_advice(
    index: int, entry: Mapping[str, Any], *, read_at: str, kind: str, name: str, namespace: str, kubeconfig: str
) -> str:
    """The lines that name an entry `at_other_versions` found and the way out: the entry taken off
    the object's record by a JSON patch that first checks it is still that entry (Cluster API's
    own CRD migrator patches managedFields the same way, for versions no longer served). Its
    fields stay as they are, held by no manager: server-side apply removes only what its applier
    held, so no run removes them, and what the settings declare is compared as ever."""
    pointer = f"/metadata/managedFields/{index}"
    patch = json.dumps(
        [
            {"op": "test", "path": f"{pointer}/manager", "value": entry.get("manager")},
            {"op": "test", "path": f"{pointer}/apiVersion", "value": entry.get("apiVersion")},
            {"op": "remove", "path": pointer},
        ]
    )
    target = f"-n {namespace} {kind.lower()} {name}"
    return "\n        ".join(
        [
            f"metadata.managedFields[{index}]: {entry.get('manager')} ({entry.get('operation')}) holds its fields at "
            f"{entry.get('apiVersion')}, and this run reads the object at {read_at}: the run that takes kubectl's "
            "fields would merge them into the program's at one version, so which of them it would remove cannot "
            "be told beforehand",
            "take the entry off the object's record first (its fields stay as they are, held by no one, so no run "
            "removes them; set again by hand what the program should name to keep): "
            f"kubectl --kubeconfig {kubeconfig} patch {target} --type=json -p {shlex.quote(patch)}",
        ]
    )


def defaulted(schema: Mapping[str, Any] | None, path: tuple[str | int, ...], value: Any) -> bool:
    """Whether `value` at `path` is what the CRD's `schema` (openAPIV3Schema) defaults there, or a
    map of nothing else: the API server sets it again on the write that drops it (found for a
    cluster made with `kubectl create`, whose creator holds the defaults: review 5, 10c)."""
    node: Any = schema
    for key in path:
        if not isinstance(node, Mapping):
            return False
        node = node.get("items") if isinstance(key, int) else (node.get("properties") or {}).get(key)
    return _is_default(node, value)


def _is_default(node: Any, value: Any) -> bool:
    if not isinstance(node, Mapping):
        return False
    if "default" in node:
        return bool(node["default"] == value)
    properties = node.get("properties") or {}
    return (
        isinstance(value, Mapping)
        and bool(value)
        and all(_is_default(properties.get(key), sub) for key, sub in value.items())
    )


def _has(applied: Mapping[str, Any], path: tuple[str | int, ...], live: Mapping[str, Any]) -> bool:
    """Whether the record `applied` has the field at `path` of `live` (a list element matched as
    _counterpart matches it)."""
    node: Any = applied
    here: Any = live
    for key in path:
        here = here[key]
        node = _counterpart(node, key, here)
        if node is _ABSENT:
            return False
    return True


def _skipped(path: tuple[str | int, ...], skipped: tuple[tuple[str, ...], ...]) -> bool:
    return (path[:2] == ("metadata", "annotations") and reserved(str(path[2]))) or any(
        path[: len(s)] == s for s in skipped
    )


def _children(fields: Mapping[str, Any], live: Any) -> Iterator[tuple[str | int, Any, Any]]:
    """(key or index, its fieldsV1, its live value) for each member fieldsV1 names that `live` has."""
    for key, sub in fields.items():
        if key.startswith("f:") and isinstance(live, Mapping) and key[2:] in live:
            yield key[2:], sub, live[key[2:]]
        elif key[:2] in ("k:", "v:", "i:") and isinstance(live, list):
            index = _element(key, live)
            if index is not None:
                yield index, sub, live[index]


def _element(key: str, items: list[Any]) -> int | None:
    """The index in `items` of the list element a fieldsV1 key names (`k:{...}`, `v:...`, `i:n`)."""
    kind, text = key[:2], key[2:]
    if kind == "i:":
        index = int(text)
        return index if index < len(items) else None
    wanted = json.loads(text)
    for index, item in enumerate(items):
        if kind == "v:" and item == wanted:
            return index
        if kind == "k:" and isinstance(item, Mapping) and all(item.get(k) == v for k, v in wanted.items()):
            return index
    return None


def _absent(
    fields: Mapping[str, Any], live: Any, rendered: Any, path: tuple[str | int, ...]
) -> Iterator[tuple[tuple[str | int, ...], Mapping[str, Any]]]:
    """The paths of the fields `fields` names that `rendered` lacks, each at its highest such
    level, with what `fields` holds under it."""
    for key, sub, value in _children(fields, live):
        here = (*path, key)
        if not path and key not in ("metadata", "spec"):
            continue
        if len(here) == 2 and here[0] == "metadata" and key not in ("labels", "annotations"):
            continue
        counterpart = _counterpart(rendered, key, value)
        if counterpart is _ABSENT:
            yield here, sub if isinstance(sub, Mapping) else {}
        elif isinstance(sub, Mapping) and set(sub) - {"."}:
            yield from _absent(sub, value, counterpart, here)


def _owned(fields: Mapping[str, Any], live: Any, path: tuple[str | int, ...]) -> Iterator[tuple[str | int, ...]]:
    """The paths a manager owns itself: its leaves (`{}`), and the members it made whole (`.`), not
    each container its fields pass through."""
    for key, sub, value in _children(fields, live):
        here = (*path, key)
        if not isinstance(sub, Mapping) or not sub or "." in sub:
            yield here
        if isinstance(sub, Mapping):
            yield from _owned(sub, value, here)


def _lost(
    path: tuple[str | int, ...], fields: Mapping[str, Any], live: Mapping[str, Any], staying: set[tuple[str | int, ...]]
) -> Iterator[tuple[str | int, ...]]:
    """What the apply removes of the field at `path` that a taken manager holds with `fields` under
    it: the field whole where no staying manager owns anything at or under it, else each of the
    taken manager's fields under it apart, down to those a staying manager owns, which survive."""
    if path in staying:
        return
    if not any(owned[: len(path)] == path for owned in staying):
        yield path
        return
    for key, sub, _ in _children(fields, _at(live, path)):
        yield from _lost((*path, key), sub if isinstance(sub, Mapping) else {}, live, staying)


def _counterpart(rendered: Any, key: str | int, value: Any) -> Any:
    """What the rendering has where the live object has `value` under `key`: a list element is
    matched by equality, or by its `name` or `path` (how Cluster API keys its lists)."""
    if isinstance(key, str):
        return rendered.get(key, _ABSENT) if isinstance(rendered, Mapping) else _ABSENT
    if not isinstance(rendered, list):
        return _ABSENT
    for item in rendered:
        if item == value:
            return item
        for identity in ("name", "path"):
            if (
                isinstance(item, Mapping)
                and isinstance(value, Mapping)
                and identity in value
                and item.get(identity) == value[identity]
            ):
                return item
    return _ABSENT


def _at(body: Any, path: tuple[str | int, ...]) -> Any:
    for key in path:
        body = body[key]
    return body


_ABSENT = object()


KEEP = "keep it: "
"""Opens each line of a refusal that keeps a field: docs/adoption.md step 5 collects them with sed."""


def advice(found: HandSet, *, entry: str, role: str, kind: str, name: str, namespace: str, kubeconfig: str) -> str:
    """The lines that name `found` on the object `kind name` and the two ways out: the entry's key
    that keeps it (not for a field inside a list the program renders), one `keep it:` line per
    value, and the kubectl command that takes it off the object first, through `kubeconfig` (the
    admin kubeconfig's file: the owner's shell may point kubectl at another cluster)."""
    managers = ", ".join(found.managers)
    lines = [f"{found.shown}: running {json.dumps(found.value)}, set by {managers}, the settings render nothing"]
    if any(isinstance(p, int) for p in found.path):
        lines.append(
            "no keptFields key reaches into a list the program renders: set the entry's key it comes from "
            "(docs/adoption.md, W1's table)"
        )
    else:
        key = f"{entry}.keptFields.{role}" + "".join(_segment(str(p)) for p in found.path)
        lines += list(_config_set(key, found.value))
    target = f"-n {namespace} {kind.lower()} {name}"
    lines.append(f"or take it off first: {_removal(found, f'--kubeconfig {kubeconfig}', target)}")
    return "\n        ".join(lines)


def _segment(key: str) -> str:
    """A key as one step of a Pulumi config path (`.name`, or `["a.b/c"]` where it must be quoted)."""
    return f".{key}" if _IDENTIFIER.fullmatch(key) else f"[{json.dumps(key)}]"


def _config_set(key: str, value: Any) -> Iterator[str]:
    """The `keep it:` lines that write `value` under `key`, one `pulumi config set --path` per
    leaf, each typed as JSON types it (the CLI's --type: string, bool, int, float); `--` before
    the value, which the CLI would read as a flag where it starts with `-`. An empty map or list,
    or a null, no such line can write: the line says what to write in the stack's file instead,
    and is not one that docs/adoption.md step 5 collects."""
    if isinstance(value, Mapping) and value:
        for child, sub in value.items():
            yield from _config_set(f"{key}{_segment(str(child))}", sub)
    elif isinstance(value, list) and value:
        for index, sub in enumerate(value):
            yield from _config_set(f"{key}[{index}]", sub)
    elif value is None or isinstance(value, Mapping | list):
        yield (
            f"keep it by hand: write {json.dumps(value)} at {key} in the stack's file (Pulumi.<stack>.yaml), "
            "which pulumi config set cannot"
        )
    else:
        kind = {bool: "bool", int: "int", float: "float"}.get(type(value), "string")
        shown = json.dumps(value) if isinstance(value, bool | float) else str(value)
        yield f"{KEEP}pulumi config set --path {shlex.quote(key)} --type {kind} -- {shlex.quote(shown)}"


def _removal(found: HandSet, kubectl: str, target: str) -> str:
    """The kubectl command (`kubectl`: its global flags) that takes `found` off the object `target`."""
    if len(found.path) == 3 and found.path[:2] == ("metadata", "annotations"):
        return f"kubectl {kubectl} annotate {target} {shlex.quote(str(found.path[2]) + '-')}"
    if len(found.path) == 3 and found.path[:2] == ("metadata", "labels"):
        return f"kubectl {kubectl} label {target} {shlex.quote(str(found.path[2]) + '-')}"
    pointer = "".join("/" + str(p).replace("~", "~0").replace("/", "~1") for p in found.path)
    patch = json.dumps([{"op": "remove", "path": pointer}])
    return f"kubectl {kubectl} patch {target} --type=json -p {shlex.quote(patch)}"
