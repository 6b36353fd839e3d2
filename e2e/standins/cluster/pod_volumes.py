"""A Pod's volumes and the files the kubelet gives every container, as the pod runner
(pod_runner.py, pod_process.py) materializes them in a folder of the Pod's own, to be bind-mounted
at their paths in the Pod's root: a Secret's or ConfigMap's keys as files, an emptyDir, a projected
volume (the service account token from the TokenRequest API, bound to the Pod, as the kubelet asks
for it; `kube-root-ca.crt`; Secrets' keys; the namespace); the Pod's /etc/hosts, its termination
message file, and the CAs that stand for the public ones to a Pod that reaches the internet's
stand-ins. A volume or a field it does not know is refused, naming it (PodError).
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from e2e.engine.kube_api import Api


class PodError(ValueError):
    """A Pod the runner cannot run as a kubelet would: said, never skipped."""


class SecretNotYetThereError(PodError):
    """A volume's Secret that is not there yet (a certificate cert-manager has still to issue): the
    kubelet keeps the Pod in ContainerCreating and mounts it again a little later."""


def field_value(pod: dict[str, Any], path: str, pod_ip: str) -> str:
    fields = {
        "metadata.name": pod["metadata"]["name"],
        "metadata.namespace": pod["metadata"]["namespace"],
        "metadata.uid": pod["metadata"]["uid"],
        "spec.serviceAccountName": pod["spec"].get("serviceAccountName", "default"),
        "spec.nodeName": pod["spec"].get("nodeName", ""),
        "status.podIP": pod_ip,
    }
    if path not in fields:
        raise PodError(f"pod {pod['metadata']['name']}: the runner does not resolve fieldRef {path}")
    return str(fields[path])


def _write(folder: Path, files: dict[str, bytes], mode: int) -> bool:
    """Each file written whole (a rename, so a reader never sees half of it) where it differs;
    whether any did."""
    folder.mkdir(parents=True, exist_ok=True)
    changed = False
    for path, data in files.items():
        target = folder / path
        if target.exists() and target.read_bytes() == data:
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = target.with_name(f".{target.name}.partial")
        partial.write_bytes(data)
        partial.chmod(mode)
        partial.rename(target)
        changed = True
    return changed


def _token(api: Api, pod: dict[str, Any], source: dict[str, Any]) -> bytes:
    meta = pod["metadata"]
    account = pod["spec"].get("serviceAccountName", "default")
    request = {
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenRequest",
        "spec": {
            **({"audiences": [source["audience"]]} if source.get("audience") else {}),
            "expirationSeconds": source.get("expirationSeconds", 3600),
            "boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": meta["name"], "uid": meta["uid"]},
        },
    }
    path = f"/api/v1/namespaces/{meta['namespace']}/serviceaccounts/{account}/token"
    code, answer = api.call("POST", path, request)
    if code != 201:
        raise PodError(f"TokenRequest for {meta['namespace']}/{account}: {code} {answer.get('message', '')}")
    return str(answer["status"]["token"]).encode()


def _keys(data: dict[str, str], items: list[dict[str, str]] | None, encoded: bool, what: str) -> dict[str, bytes]:
    decoded = {key: base64.b64decode(value) if encoded else value.encode() for key, value in data.items()}
    if items is None:
        return decoded
    missing = [item["key"] for item in items if item["key"] not in decoded]
    if missing:
        raise PodError(f"{what} has no key {missing}")
    return {item["path"]: decoded[item["key"]] for item in items}


def _secret_files(api: Api, namespace: str, source: dict[str, Any], name_key: str) -> dict[str, bytes]:
    """A Secret's keys as files (its `items` only, where given); an optional Secret that is not
    there gives none, as the kubelet mounts it."""
    name = source[name_key]
    code, secret = api.call("GET", f"/api/v1/namespaces/{namespace}/secrets/{name}")
    if code == 404 and source.get("optional"):
        return {}
    if code == 404:
        raise SecretNotYetThereError(f"Secret {name} is not there yet")
    if code != 200:
        raise PodError(f"Secret {name}: {code} {secret.get('message', '')}")
    return _keys(secret.get("data", {}), source.get("items"), True, f"Secret {name}")


def secret_key(api: Api, namespace: str, ref: dict[str, Any]) -> str | None:
    """An env var's value from a Secret's key (`valueFrom.secretKeyRef`), or None where an
    optional one is not there (the variable is not set). A Secret not there yet keeps the container
    from starting, as the kubelet's CreateContainerConfigError does until it comes; a key it lacks
    is said."""
    name, key = ref["name"], ref["key"]
    code, secret = api.call("GET", f"/api/v1/namespaces/{namespace}/secrets/{name}")
    if code == 404 and ref.get("optional"):
        return None
    if code == 404:
        raise SecretNotYetThereError(f"Secret {name} is not there yet")
    if code != 200:
        raise PodError(f"Secret {name}: {code} {secret.get('message', '')}")
    data = secret.get("data") or {}
    if key not in data:
        if ref.get("optional"):
            return None
        raise PodError(f"Secret {name} has no key {key!r}")
    return base64.b64decode(data[key]).decode()


def _config_map_files(api: Api, namespace: str, source: dict[str, Any]) -> dict[str, bytes]:
    name = source["name"]
    config_map = api.get(f"/api/v1/namespaces/{namespace}/configmaps/{name}")
    return _keys(config_map.get("data", {}), source.get("items"), False, f"ConfigMap {name}")


def _volume(api: Api, pod: dict[str, Any], volume: dict[str, Any], folder: Path) -> bool:
    """The volume's files written into `folder`, as the kubelet's volume plugins write them
    (an emptyDir: the folder, empty); whether any changed."""
    namespace = pod["metadata"]["namespace"]
    if set(volume) == {"name", "emptyDir"}:
        folder.mkdir(parents=True, exist_ok=True)
        return False
    if set(volume) == {"name", "secret"}:
        files = _secret_files(api, namespace, volume["secret"], "secretName")
        return _write(folder, files, volume["secret"].get("defaultMode", 0o644))
    if set(volume) == {"name", "configMap"}:
        files = _config_map_files(api, namespace, volume["configMap"])
        return _write(folder, files, volume["configMap"].get("defaultMode", 0o644))
    if set(volume) == {"name", "projected"}:
        files = {}
        for source in volume["projected"]["sources"]:
            if "serviceAccountToken" in source:
                files[source["serviceAccountToken"]["path"]] = _token(api, pod, source["serviceAccountToken"])
            elif "configMap" in source:
                files |= _config_map_files(api, namespace, source["configMap"])
            elif "secret" in source:
                files |= _secret_files(api, namespace, source["secret"], "name")
            elif "downwardAPI" in source:
                for item in source["downwardAPI"]["items"]:
                    files[item["path"]] = field_value(pod, item["fieldRef"]["fieldPath"], "").encode()
            else:
                raise PodError(f"volume {volume['name']}: the runner does not project {sorted(source)}")
        return _write(folder, files, volume["projected"].get("defaultMode", 0o644))
    raise PodError(
        f"volume {volume['name']}: the runner knows emptyDir, secret, configMap and projected volumes, "
        f"not {sorted(volume)}"
    )


def refresh_secrets(api: Api, pod: dict[str, Any], pod_dir: Path) -> list[str]:
    """The Pod's Secret volumes written again from their Secrets, as the kubelet's periodic sync
    updates a mounted Secret (the process sees the new files at once: its mounts are binds of these
    folders); the names of the volumes that changed."""
    changed = []
    for volume in pod["spec"].get("volumes", []):
        folder = pod_dir / "volumes" / volume["name"]
        if "secret" in volume and folder.exists() and _volume(api, pod, volume, folder):
            changed.append(volume["name"])
    return changed


# What the runner mounts: (what, where, read-only), `what` a folder or a file.
Mount = tuple[Path, str, bool]


def volumes(api: Api, pod: dict[str, Any], container: dict[str, Any], pod_dir: Path) -> list[Mount]:
    """Each of the container's volume mounts, the folder filled in: read-only where the kubelet
    mounts it so (every volume but an emptyDir, and any mount that asks)."""
    by_name = {volume["name"]: volume for volume in pod["spec"].get("volumes", [])}
    mounts = []
    for mount in container.get("volumeMounts", []):
        if mount.get("subPath") or mount.get("subPathExpr"):
            raise PodError(f"container {container['name']}: the runner does not mount subPaths")
        folder = pod_dir / "volumes" / mount["name"]
        volume = by_name[mount["name"]]
        if not folder.exists():
            _volume(api, pod, volume, folder)
        mounts.append((folder, mount["mountPath"], "emptyDir" not in volume or bool(mount.get("readOnly"))))
    return mounts


@dataclass(frozen=True)
class Internet:
    """What stands for the internet to a Pod: host names (as DNS answers them) -> the address of
    the stand-in serving them, and the CA certificates that sign the stand-ins' certificates,
    which the image trusts as it trusts the public CAs (its /etc/ssl/certs)."""

    hosts: dict[str, str]
    trusted: tuple[Path, ...]


# Where the kubelet puts a container's termination message file unless its spec says otherwise.
TERMINATION_LOG = "/dev/termination-log"


def pod_files(
    pod: dict[str, Any], container: dict[str, Any], pod_dir: Path, pod_ip: str, internet: Internet | None
) -> list[Mount]:
    """What the kubelet and the runtime give every container besides its volumes: the Pod's
    /etc/hosts (localhost, the Pod's own name at its IP, and `internet`'s names), its termination
    message file (read back by termination_message), and the image's trusted CAs."""
    files = pod_dir / "pod-files"
    files.mkdir(parents=True, exist_ok=True)
    names = [f"{address}\t{name}" for name, address in sorted((internet.hosts if internet else {}).items())]
    hosts = ["127.0.0.1\tlocalhost", f"{pod_ip}\t{pod['metadata']['name']}", *names]
    (files / "hosts").write_text("\n".join(hosts) + "\n")
    (files / "termination-log").touch()
    mounts = [
        (files / "hosts", "/etc/hosts", True),
        (files / "termination-log", container.get("terminationMessagePath", TERMINATION_LOG), False),
    ]
    if internet:
        certs = files / "certs"
        certs.mkdir(exist_ok=True)
        for index, ca in enumerate(internet.trusted):
            (certs / f"internet-{index}.pem").write_bytes(ca.read_bytes())
        mounts.append((certs, "/etc/ssl/certs", True))
    return mounts


def termination_message(pod_dir: Path) -> str:
    """What the container wrote to its termination message file, as the kubelet reports it."""
    written = pod_dir / "pod-files" / "termination-log"
    return written.read_text(errors="replace") if written.exists() else ""
