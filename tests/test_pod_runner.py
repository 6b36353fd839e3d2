"""The pod runner stand-in (e2e/standins/cluster/pod_process.py) fails loudly on what it cannot run
as a kubelet would, rather than running something else: an image no binary stands for, a tag other
than the one built, a command that is not the image's binary, env it cannot resolve, volumes it
does not know. Its mount script lays an overlay only where a mount point is missing."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import pytest

from e2e.standins.cluster import pod_process, pod_volumes

IMAGE = "registry.k8s.io/autoscaling/cluster-autoscaler"


def _pod(**container: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "lab1-autoscaler-abc", "namespace": "lab1", "uid": "u-1"},
        "spec": {
            "serviceAccountName": "lab1-autoscaler",
            "containers": [{"name": "ca", "image": f"{IMAGE}:v1.35.2", **container}],
        },
    }


def test_an_unknown_image_or_tag_is_refused_naming_it() -> None:
    with pytest.raises(pod_volumes.PodError, match=r"no binary stands for image nginx:1"):
        pod_process.image_of({"image": "nginx:1"})
    with pytest.raises(pod_volumes.PodError, match=r"built here is .*:v1\.35\.2"):
        pod_process.image_of({"image": f"{IMAGE}:v1.35.0"})
    assert pod_process.image_of({"image": f"{IMAGE}:v1.35.2"}).binary == "cluster-autoscaler"


def test_the_env_is_the_containers_with_what_a_kubelet_adds() -> None:
    pod = _pod()
    container = {
        "name": "ca",
        "env": [
            {"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
            {"name": "SERVICE_ACCOUNT", "valueFrom": {"fieldRef": {"fieldPath": "spec.serviceAccountName"}}},
            {"name": "PLAIN", "value": "x"},
        ],
    }
    env = pod_process.environment(_Secrets({}), pod, container, ("192.168.4.21", 6443), "10.88.0.2")  # type: ignore[arg-type]
    assert env[-3:] == ["POD_NAMESPACE=lab1", "SERVICE_ACCOUNT=lab1-autoscaler", "PLAIN=x"]
    assert {"KUBERNETES_SERVICE_HOST=192.168.4.21", "KUBERNETES_SERVICE_PORT=6443"} <= set(env)


class _Secrets:
    """The API server's answers to a Secret's GET, from `secrets` by name in the Pod's namespace."""

    def __init__(self, secrets: dict[str, dict[str, str]]) -> None:
        self.secrets = secrets

    def call(self, method: str, path: str) -> tuple[int, dict[str, Any]]:
        assert (method, path.rsplit("/", 1)[0]) == ("GET", "/api/v1/namespaces/lab1/secrets")
        name = path.rsplit("/", 1)[1]
        if name not in self.secrets:
            return 404, {"message": f'secrets "{name}" not found'}
        return 200, {"data": {k: base64.b64encode(v.encode()).decode() for k, v in self.secrets[name].items()}}


def _secret_env(api: _Secrets, **ref: Any) -> list[str]:
    container = {"name": "manager", "env": [{"name": "PROXMOX_URL", "valueFrom": {"secretKeyRef": ref}}]}
    env = pod_process.environment(api, _pod(), container, ("h", 1), "ip")  # type: ignore[arg-type]
    return [line for line in env if line.startswith("PROXMOX_URL=")]


def test_an_env_var_from_a_secret_s_key_is_read_as_the_container_starts() -> None:
    """As CAPMOX's release passes its credentials (manager_credentials_patch.yaml)."""
    api = _Secrets({"capmox-manager-credentials": {"url": "https://192.168.0.8:8006/"}})
    assert _secret_env(api, name="capmox-manager-credentials", key="url") == ["PROXMOX_URL=https://192.168.0.8:8006/"]
    with pytest.raises(pod_volumes.PodError, match="has no key 'token'"):
        _secret_env(api, name="capmox-manager-credentials", key="token")
    assert _secret_env(api, name="capmox-manager-credentials", key="token", optional=True) == []


def test_an_env_var_from_a_secret_not_there_yet_waits_for_it_unless_optional() -> None:
    with pytest.raises(pod_volumes.SecretNotYetThereError):
        _secret_env(_Secrets({}), name="capmox-manager-credentials", key="url")
    assert _secret_env(_Secrets({}), name="capmox-manager-credentials", key="url", optional=True) == []


@pytest.mark.parametrize(
    "entry",
    [
        {"name": "A", "valueFrom": {"configMapKeyRef": {"name": "c", "key": "k"}}},
        {"name": "A", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['x']"}}},
    ],
)
def test_env_it_cannot_resolve_is_refused(entry: dict[str, Any]) -> None:
    with pytest.raises(pod_volumes.PodError):
        pod_process.environment(_Secrets({}), _pod(), {"name": "ca", "env": [entry]}, ("h", 1), "ip")  # type: ignore[arg-type]


def test_a_command_other_than_the_images_binary_is_refused(tmp_path: Path) -> None:
    pod = _pod(command=["/bin/sh", "-c", "true"])
    with pytest.raises(pod_volumes.PodError, match="not the image's /cluster-autoscaler"):
        pod_process.start(None, pod, tmp_path, network=("10.88.0.2", "v"), log=tmp_path / "l", api_address=("h", 1))  # type: ignore[arg-type]


def test_an_unknown_volume_is_refused(tmp_path: Path) -> None:
    pod = _pod(volumeMounts=[{"name": "data", "mountPath": "/data"}])
    pod["spec"]["volumes"] = [{"name": "data", "hostPath": {"path": "/data"}}]
    with pytest.raises(pod_volumes.PodError, match="knows emptyDir, secret, configMap and projected volumes"):
        pod_volumes.volumes(None, pod, pod["spec"]["containers"][0], tmp_path)  # type: ignore[arg-type]


def test_the_pod_runs_in_a_root_of_its_own_where_its_mounts_are_made(tmp_path: Path) -> None:
    """A mount point the machine lacks (/config) is made in the Pod's root, an overlay of the
    machine's tree whose writes stay in the Pod's folder; a file is mounted on a file; only what
    the kubelet mounts read-only is remounted so; the process starts in that root."""
    (tmp_path / "a").mkdir()
    (tmp_path / "log").touch()
    root = tmp_path / "rootfs"
    script = pod_process._mount_script(
        [(tmp_path / "a", "/config", True), (tmp_path / "log", "/dev/termination-log", False)],
        tmp_path,
        "10.88.0.2",
        "p",
    )
    assert f"lowerdir=/,upperdir={tmp_path / 'rootfs-layer' / 'upper'}" in script
    assert f"mkdir -p {root}/config\nmount --bind {tmp_path / 'a'} {root}/config" in script
    assert f"mount -o remount,bind,ro {root}/config" in script
    assert f"touch {root}/dev/termination-log" in script
    assert f"remount,bind,ro {root}/dev/termination-log" not in script
    assert script.splitlines()[-1].startswith(f"exec chroot {root} ")


def test_a_mount_path_through_a_symlink_is_made_in_the_pods_root(tmp_path: Path) -> None:
    """The service account's /var/run/secrets/... on a machine whose /var/run links to /run: the
    mount point is made at the root's /run, never through the link into the machine's /run."""
    link = tmp_path / "var-run"
    link.symlink_to("/run")
    target = f"{link}/secrets/kubernetes.io/serviceaccount"
    script = pod_process._mount_script([(tmp_path, target, True)], tmp_path, "10.88.0.2", "p")
    assert f"mkdir -p {tmp_path / 'rootfs'}/run/secrets/kubernetes.io/serviceaccount\n" in script
