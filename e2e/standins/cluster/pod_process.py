"""How the pod runner (pod_runner.py) starts a Pod's container as a process, as a kubelet and a
container runtime would, where no image can run: the binary built here from the same upstream
source stands for the image (IMAGES; any other image is refused, naming it), started with exactly
the container's command and args, its env (values and the fieldRefs a kubelet resolves, plus the
KUBERNETES_SERVICE_HOST/PORT it adds, pointing at the API server), and its volumes materialized in
a folder of the Pod's own and bind-mounted at their mountPaths:

- a Secret volume: the Secret's keys as files (the kubeconfig Secret's `value` at /etc/kubernetes/value);
- the projected service account volume the API server's ServiceAccount admission adds: a token
  for the Pod's serviceAccountName from the TokenRequest API, bound to the Pod, as the kubelet asks
  for it; the ConfigMap `kube-root-ca.crt` (published by kube-controller-manager); the namespace.

The process runs in a mount namespace of its own (`unshare --mount --propagation private`), so
the absolute mount paths are the Pod's alone; a missing mount point's nearest existing folder gets
a private overlay there, so nothing is written on the machine's own tree. It runs in a network
namespace of its own too, as a Pod has: a veth pair joins it to the test's namespace, with the
Pod's IP (POD_SUBNET) on its side, so two Pods of one Deployment can both listen on the same port
during a rollout; and a UTS namespace, whose hostname is the Pod's name (the identity a leader
election records). They need root: the runner refuses to start otherwise, saying why.
"""

from __future__ import annotations

import base64
import itertools
import os
import shlex
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from e2e.engine.cli import built_bin
from e2e.engine.kube_api import Api


@dataclass(frozen=True)
class Image:
    bin_variable: str
    """The build-engine.sh line naming the folder of the binary built from the image's source."""
    binary: str
    path: str
    """Where the image holds the binary; its WORKDIR is `/`."""
    tag: str
    """The only tag the built binary stands for."""


IMAGES = {
    "registry.k8s.io/autoscaling/cluster-autoscaler": Image(
        "LAB_MGMT_AUTOSCALER_BIN", "cluster-autoscaler", "/cluster-autoscaler", "v1.35.2"
    ),
}
# The image's own environment (distroless's PATH), which the runtime sets before the container's.
IMAGE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
POD_SUBNET = "10.88.0."
HOST_SIDE_IP = f"{POD_SUBNET}1"
NETNS_BOUND_SECONDS = 10.0
# Every runner of a box draws from these, so that two Deployments' Pods never share an address.
_POD_NUMBERS = itertools.count(2)
_VETH_NUMBERS = itertools.count()


def new_pod_ip() -> str:
    number = next(_POD_NUMBERS)
    if number > 254:
        raise PodError(f"the runner has no address left in {POD_SUBNET}0/24")
    return f"{POD_SUBNET}{number}"


def new_veth_name() -> str:
    return f"podveth{next(_VETH_NUMBERS)}"


class PodError(ValueError):
    """A Pod the runner cannot run as a kubelet would: said, never skipped."""


@dataclass
class Started:
    process: subprocess.Popen[bytes]
    log: Path
    started_at: str


def image_of(container: dict[str, Any]) -> Image:
    repository, _, tag = container["image"].rpartition(":")
    if repository not in IMAGES:
        raise PodError(f"no binary stands for image {container['image']} (known: {', '.join(IMAGES)})")
    if tag != IMAGES[repository].tag:
        raise PodError(f"image {container['image']}: the binary built here is {repository}:{IMAGES[repository].tag}")
    return IMAGES[repository]


def _field(pod: dict[str, Any], path: str, pod_ip: str) -> str:
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


def environment(pod: dict[str, Any], container: dict[str, Any], api_host: str, api_port: int, pod_ip: str) -> list[str]:
    """NAME=value, the image's PATH and the kubelet's additions first, then the container's own."""
    if container.get("envFrom"):
        raise PodError(f"container {container['name']}: the runner does not resolve envFrom")
    env = {
        "PATH": IMAGE_PATH,
        "HOSTNAME": pod["metadata"]["name"],
        "KUBERNETES_SERVICE_HOST": api_host,
        "KUBERNETES_SERVICE_PORT": str(api_port),
        "KUBERNETES_SERVICE_PORT_HTTPS": str(api_port),
    }
    for entry in container.get("env", []):
        if "value" in entry or not entry.get("valueFrom"):
            env[entry["name"]] = entry.get("value", "")
        elif set(entry["valueFrom"]) == {"fieldRef"}:
            env[entry["name"]] = _field(pod, entry["valueFrom"]["fieldRef"]["fieldPath"], pod_ip)
        else:
            raise PodError(f"container {container['name']}: env {entry['name']} from {entry['valueFrom']}")
    return [f"{name}={value}" for name, value in env.items()]


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


def _volume(api: Api, pod: dict[str, Any], volume: dict[str, Any], folder: Path) -> bool:
    """The volume's files written into `folder`, as the kubelet's volume plugins write them;
    whether any changed."""
    namespace = pod["metadata"]["namespace"]
    if set(volume) == {"name", "secret"}:
        name = volume["secret"]["secretName"]
        secret = api.get(f"/api/v1/namespaces/{namespace}/secrets/{name}")
        files = _keys(secret.get("data", {}), volume["secret"].get("items"), True, f"Secret {name}")
        return _write(folder, files, volume["secret"].get("defaultMode", 0o644))
    if set(volume) == {"name", "projected"}:
        files = {}
        for source in volume["projected"]["sources"]:
            if "serviceAccountToken" in source:
                files[source["serviceAccountToken"]["path"]] = _token(api, pod, source["serviceAccountToken"])
            elif "configMap" in source:
                name = source["configMap"]["name"]
                config_map = api.get(f"/api/v1/namespaces/{namespace}/configmaps/{name}")
                files |= _keys(config_map.get("data", {}), source["configMap"].get("items"), False, f"ConfigMap {name}")
            elif "downwardAPI" in source:
                for item in source["downwardAPI"]["items"]:
                    files[item["path"]] = _field(pod, item["fieldRef"]["fieldPath"], "").encode()
            else:
                raise PodError(f"volume {volume['name']}: the runner does not project {sorted(source)}")
        return _write(folder, files, volume["projected"].get("defaultMode", 0o644))
    raise PodError(f"volume {volume['name']}: the runner knows secret and projected volumes, not {sorted(volume)}")


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


def volumes(api: Api, pod: dict[str, Any], container: dict[str, Any], pod_dir: Path) -> list[tuple[Path, str]]:
    """(folder, mountPath) of each of the container's volume mounts, the folder filled in."""
    by_name = {volume["name"]: volume for volume in pod["spec"].get("volumes", [])}
    mounts = []
    for mount in container.get("volumeMounts", []):
        if mount.get("subPath") or mount.get("subPathExpr"):
            raise PodError(f"container {container['name']}: the runner does not mount subPaths")
        folder = pod_dir / "volumes" / mount["name"]
        if not folder.exists():
            _volume(api, pod, by_name[mount["name"]], folder)
        mounts.append((folder, mount["mountPath"]))
    return mounts


def _mount_script(mounts: list[tuple[Path, str]], pod_dir: Path, pod_ip: str, hostname: str) -> str:
    """What runs first in the Pod's namespaces: the overlays and bind mounts, then the Pod's side of
    the network once the runner has put its veth there; then the container's process."""
    lines = ["set -eu"]
    overlaid: set[Path] = set()
    for index, (folder, target) in enumerate(mounts):
        existing = Path(target)
        while not existing.exists():
            existing = existing.parent
        existing = existing.resolve()
        if not Path(target).exists() and existing not in overlaid:
            if existing == Path("/"):
                raise PodError(f"mount path {target}: no folder below / to lay an overlay on")
            upper, work = pod_dir / f"overlay-{index}" / "upper", pod_dir / f"overlay-{index}" / "work"
            upper.mkdir(parents=True, exist_ok=True)
            work.mkdir(parents=True, exist_ok=True)
            options = f"lowerdir={existing},upperdir={upper},workdir={work}"
            lines.append(f"mount -t overlay overlay -o {shlex.quote(options)} {shlex.quote(str(existing))}")
            overlaid.add(existing)
        quoted = shlex.quote(target)
        lines += [f"mkdir -p {quoted}", f"mount --bind {shlex.quote(str(folder))} {quoted}"]
        lines.append(f"mount -o remount,bind,ro {quoted}")
    lines += [
        f"echo {shlex.quote(hostname)} >/proc/sys/kernel/hostname",
        "ip link set lo up",
        "tries=0; until ip link show eth0 >/dev/null 2>&1; do",
        f"  tries=$((tries+1)); [ $tries -lt {int(NETNS_BOUND_SECONDS * 20)} ] || exit 96; sleep 0.05",
        "done",
        f"ip addr add {pod_ip}/32 dev eth0 && ip link set eth0 up",
        f"ip route add {HOST_SIDE_IP}/32 dev eth0 && ip route add default via {HOST_SIDE_IP} dev eth0",
        f"cd {shlex.quote(str(pod_dir / 'root'))}",
        'exec env -i "$@"',
    ]
    return "\n".join(lines)


def _join_network(process: subprocess.Popen[bytes], veth: str, pod_ip: str) -> None:
    """The Pod's veth pair: `eth0` in the process's network namespace, `veth` in the test's, routed
    to the Pod's IP."""
    own = os.readlink("/proc/self/ns/net")
    deadline = time.monotonic() + NETNS_BOUND_SECONDS
    while os.readlink(f"/proc/{process.pid}/ns/net") == own:
        if process.poll() is not None or time.monotonic() > deadline:
            raise PodError(f"the process of {veth} never entered a network namespace of its own")
        time.sleep(0.01)
    for command in (
        ["ip", "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", str(process.pid)],
        ["ip", "addr", "replace", f"{HOST_SIDE_IP}/32", "dev", veth],
        ["ip", "link", "set", veth, "up"],
        ["ip", "route", "replace", f"{pod_ip}/32", "dev", veth, "src", HOST_SIDE_IP],
    ):
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise PodError(f"{' '.join(command)}: {done.stderr.strip()}")


def start(
    api: Api, pod: dict[str, Any], pod_dir: Path, *, network: tuple[str, str], log: Path, api_address: tuple[str, int]
) -> Started:
    """The Pod's one container started as a process, joined to the Pod's network (its IP, and the
    name of its veth on the test's side)."""
    pod_ip, veth = network
    containers = pod["spec"]["containers"]
    if len(containers) != 1 or pod["spec"].get("initContainers"):
        raise PodError(f"pod {pod['metadata']['name']}: the runner runs one container and no init container")
    container = containers[0]
    image = image_of(container)
    argv = [*(container.get("command") or [image.path]), *container.get("args", [])]
    # The command as the image's WORKDIR (/) resolves it: the binary, under the path it is given.
    root = pod_dir / "root"
    root.mkdir(parents=True, exist_ok=True)
    if os.path.normpath(os.path.join("/", argv[0])) != image.path:
        raise PodError(f"container {container['name']}: command {argv[0]} is not the image's {image.path}")
    binary = built_bin(image.bin_variable, image.binary) / image.binary
    if argv[0].startswith("/"):
        argv[0] = str(binary)
    else:
        (root / image.path.lstrip("/")).unlink(missing_ok=True)
        (root / image.path.lstrip("/")).symlink_to(binary)
    env = environment(pod, container, *api_address, pod_ip)
    script = _mount_script(volumes(api, pod, container, pod_dir), pod_dir, pod_ip, pod["metadata"]["name"])
    started_at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    with log.open("ab") as output:
        process = subprocess.Popen(
            [
                "unshare",
                "--mount",
                "--propagation",
                "private",
                "--net",
                "--uts",
                "--",
                "sh",
                "-c",
                script,
                "pod",
                *env,
                *argv,
            ],
            stdin=subprocess.DEVNULL,
            stdout=output,
            stderr=subprocess.STDOUT,
        )
    try:
        _join_network(process, veth, pod_ip)
    except PodError:
        process.kill()
        process.wait()
        raise
    return Started(process, log, started_at)
