"""k3s's deploy controller in the k3s stand-in (k3s_standin.py), as k3s-io/k3s pkg/deploy/controller.go
has it (read at the newest stored commit, 0301210f): the manifests folder walked at start and every
15 s, subfolders included; a dotfile, a file not ending in .yaml, .yml or .json, and a file that a
`<name>.skip` sits beside are left alone; each other file an Addon in kube-system named by its name
up to the first dot, holding its path and its content's sha256. At start every file is applied
whatever its checksum (`force`); later only a file whose mtime changed, and only if its checksum is
not its Addon's. Its objects are applied as wrangler's apply does with the Addon as owner: created
where absent, with the owner annotations and the set's hash label (wrangler apply/desiredset.go
getLabelsAndAnnotations, objectSetHash) and the applied object kept gzipped in an annotation. A
file that goes is not undone: its Addon and objects stay. A kind the server does not serve yet
fails that file until a later pass, with `force` kept, as k3s's listFiles does.

What it does not know, it refuses loudly (k3s exits): a manifest changed after its Addon recorded
it, or an object it made changed under it (wrangler would patch or prune them); a file of a
disabled name (k3s deletes it and its objects).
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import json
import os
import sys
import threading
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml

from e2e.engine.kube_api import Api, ApiError

ADDON_GROUP = "k3s.cattle.io"
ADDON_VERSION = f"{ADDON_GROUP}/v1"
NAMESPACE = "kube-system"
PERIOD_SECONDS = 15
ESTABLISHED_TRIES = 150
GVKS = "addon.k3s.cattle.io/gvks"
APPLIED = "objectset.rio.cattle.io/applied"
OWNER_GVK = "objectset.rio.cattle.io/owner-gvk"
OWNER = {
    "objectset.rio.cattle.io/id": "",
    OWNER_GVK: f"{ADDON_VERSION}, Kind=Addon",
    "objectset.rio.cattle.io/owner-namespace": NAMESPACE,
}
OWNER_NAME = "objectset.rio.cattle.io/owner-name"
HASH = "objectset.rio.cattle.io/hash"
# What the set's hash is taken of, in wrangler's order (hashOrder): id, owner's kind, name, namespace.
HASH_ORDER = (*list(OWNER)[:2], OWNER_NAME, list(OWNER)[2])
# k3s's Addon CRD as its own schema gives it (k3s-io/api k3s.cattle.io/v1 Addon: spec.source,
# spec.checksum); the stand-in's is structural with those two alone.
ADDON = f"addons.{ADDON_GROUP}"
ADDON_CRD: dict[str, Any] = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": ADDON},
    "spec": {
        "group": ADDON_GROUP,
        "names": {"kind": "Addon", "listKind": "AddonList", "plural": "addons", "singular": "addon"},
        "scope": "Namespaced",
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "properties": {
                            "spec": {
                                "type": "object",
                                "properties": {"source": {"type": "string"}, "checksum": {"type": "string"}},
                            },
                            "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                        },
                    }
                },
            }
        ],
    },
}


def started(kubeconfig: Path, folder: Path, disabled: Iterable[str]) -> Deploy:
    """What a k3s started on `folder` applies of it first, in the caller's process (a box with no
    guest's k3s): its CRD, then its forced pass; an error raises."""
    deploy = Deploy(Api.from_kubeconfig(kubeconfig), folder, disabled)
    deploy.crd()
    deploy.one_pass(force=True)
    return deploy


class UnknownError(Exception):
    """What the stand-in does not do: k3s stops."""


class Deploy:
    def __init__(self, api: Api, folder: Path, disabled: Iterable[str]) -> None:
        self.api, self.folder, self.disabled = api, folder, set(disabled)
        self.seen: dict[Path, float] = {}

    def start(self) -> None:
        """The passes in a thread of their own, the first forced, once the Addon CRD is there."""
        self.crd()
        threading.Thread(target=self._passes, name="deploy", daemon=True).start()

    def crd(self) -> None:
        """The Addon CRD, Established, as k3s makes its CRDs before its controllers start."""
        self.api.create_or_merge(ADDON_CRD)
        crd = self.api.object_path(ADDON_CRD)
        for _ in range(ESTABLISHED_TRIES):
            conditions = (self.api.get(crd).get("status") or {}).get("conditions") or []
            if any(c["type"] == "Established" and c["status"] == "True" for c in conditions):
                break
            time.sleep(0.2)
        else:
            raise UnknownError(f"{ADDON} not Established")

    def _passes(self) -> None:
        force = True
        while True:
            try:
                self.one_pass(force=force)
                force = False
            except UnknownError as unknown:
                print(f"k3s stand-in: deploy: {unknown}", file=sys.stderr, flush=True)
                os._exit(70)
            except (ApiError, OSError, ValueError) as error:
                print(f"Failed to process config: {error}", file=sys.stderr, flush=True)
            time.sleep(PERIOD_SECONDS)

    def files(self) -> list[Path]:
        """The files k3s would apply, in its (sorted) order."""
        found = sorted(path for path in self.folder.rglob("*") if path.is_file()) if self.folder.is_dir() else []
        skipped = {path.name.removesuffix(".skip") for path in found if path.name.endswith(".skip")}
        kept = []
        for path in found:
            name = path.name
            if name.lower().endswith((".yaml", ".yml", ".json")) and path.stem in self.disabled:
                raise UnknownError(f"{path}: a disabled name; k3s deletes such a file and its objects")
            if name.startswith(".") or name in skipped or not name.lower().endswith((".yaml", ".yml", ".json")):
                continue
            kept.append(path)
        return kept

    def one_pass(self, *, force: bool) -> None:
        failed = []
        for path in self.files():
            mtime = path.stat().st_mtime
            if not force and self.seen.get(path) == mtime:
                continue
            try:
                self.deploy(path, compare=not force)
            except ApiError as error:
                failed.append(f"failed to process {path}: {error}")
                continue
            self.seen[path] = mtime
        if failed:
            raise ValueError("; ".join(failed))

    def deploy(self, path: Path, *, compare: bool) -> None:
        name = path.name.split(".", 1)[0]
        addon_path = self.api.path(ADDON_VERSION, "addons", NAMESPACE, name)
        addon = self.api.find(addon_path) or self.api.must(
            "POST",
            addon_path.rsplit("/", 1)[0],
            {"apiVersion": ADDON_VERSION, "kind": "Addon", "metadata": {"name": name, "namespace": NAMESPACE}},
        )
        content = path.read_bytes()
        checksum = hashlib.sha256(content).hexdigest()
        recorded = (addon.get("spec") or {}).get("checksum")
        if compare and checksum == recorded:
            return
        if recorded and checksum != recorded:
            raise UnknownError(f"{path} changed since its Addon {name} recorded it; wrangler would patch and prune")
        objects = [doc for doc in yaml.safe_load_all(content) if doc]
        for obj in objects:
            self.apply(obj, name)
        gvks = ";".join(f"{o['apiVersion']}, Kind={o['kind']}" for o in objects)
        addon["spec"] = {"source": str(path), "checksum": checksum}
        addon["metadata"].setdefault("annotations", {})[GVKS] = gvks
        self.api.must("PUT", addon_path, addon)

    def apply(self, obj: dict[str, Any], owner: str) -> None:
        annotations = {**OWNER, OWNER_NAME: owner}
        digest = hashlib.sha1(  # noqa: S324 - wrangler's set hash, not a secret
            "".join(annotations[key] for key in HASH_ORDER).encode()
        )
        meta = obj.setdefault("metadata", {})
        meta.setdefault("labels", {})[HASH] = digest.hexdigest()
        meta.setdefault("annotations", {}).update(annotations)
        applied = base64.b64encode(gzip.compress(json.dumps(obj, sort_keys=True).encode(), mtime=0)).decode()
        meta["annotations"][APPLIED] = applied
        path = self.api.object_path(obj)
        live = self.api.find(path)
        if live is None:
            self.api.must("POST", path.rsplit("/", 1)[0] + "?fieldManager=k3s", obj)
        elif (live["metadata"].get("annotations") or {}).get(APPLIED) != applied:
            raise UnknownError(
                f"{obj['kind']} {meta.get('namespace', '')}/{meta['name']} differs from what was applied"
            )
