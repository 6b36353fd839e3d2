"""How the pod runner (pod_runner.py) starts a Pod's container as a process, as a kubelet and a
container runtime would, where no image can run: what was built here from the same upstream
source stands for the image (IMAGES; any other image is refused, naming it): its binary, and for an
image with an entrypoint (klipper-helm's `entry`, a script) the files beside it, laid at their
paths in the image. It is started with exactly the container's command (or the image's entrypoint)
and args, its env (values and the fieldRefs a kubelet resolves, the image's HOME, plus the
KUBERNETES_SERVICE_HOST/PORT it adds, pointing at the API server), and its volumes and the files
the kubelet gives every container (pod_volumes.py) bind-mounted at their paths.

The process runs in a mount namespace of its own (`unshare --mount --propagation private`), in a
root of its own: the machine's tree under an overlay whose writes stay in the Pod's folder
(/proc, /sys and /dev's mounts bound in, /dev under an overlay too), where the absolute mount paths
are the Pod's alone and a mount point the machine lacks (/config) is made; a symlink on a mount
path is followed as that root has it (/var/run is /run there), so nothing is written on the
machine's own tree. It runs in a network namespace of its own too, as a Pod has: a veth pair joins
it to the test's namespace, with the Pod's IP (POD_SUBNET) on its side, so two Pods of one
Deployment can both listen on the same port during a rollout; and a UTS namespace, whose hostname
is the Pod's name (the identity a leader election records). They need root: the runner refuses to
start otherwise, saying why.
"""

from __future__ import annotations

import itertools
import os
import shlex
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from e2e.engine import pins, vendor
from e2e.engine.cli import built_bin
from e2e.engine.kube_api import Api
from e2e.standins.cluster import provider_releases
from e2e.standins.cluster.pod_volumes import Internet, Mount, PodError, field_value, pod_files, secret_key, volumes


@dataclass(frozen=True)
class Image:
    bin_variable: str
    """The build-engine.sh line naming the folder of the binary built from the image's source."""
    binary: str
    path: str
    """Where the image holds the binary; its WORKDIR is `/`."""
    tag: str
    """The tag the built binary stands for: the pin."""
    also: tuple[str, ...] = ()
    """Other tags it stands for: its own version, where it is served as the pin too."""
    entrypoint: str = ""
    """The image's ENTRYPOINT, found on its PATH, where it has one: then the binary and `beside`
    are laid at their paths in the image, over the folder they are in (an overlay)."""
    beside: tuple[str, ...] = ()
    """The other built files the image holds in the binary's folder."""
    home: str = ""
    """The image user's home, which the container runtime sets as HOME (where the program reads it)."""
    workdir: str = ""
    """The image's WORKDIR, where it has one besides /: the process starts there."""


IMAGES = {
    "registry.k8s.io/autoscaling/cluster-autoscaler": Image(
        "LAB_MGMT_AUTOSCALER_BIN", "cluster-autoscaler", "/cluster-autoscaler", "v1.35.2"
    ),
    # Cluster API's managers as its release's components name them (its Dockerfile: /manager).
    **{
        f"{provider_releases.IMAGES}/{image}": Image(
            "LAB_MGMT_CLUSTER_API_BIN", binary, "/manager", provider_releases.CLUSTER_API_VERSION
        )
        for _config, image, binary in provider_releases.CLUSTER_API_PROVIDERS.values()
    },
    # The IPAM in-cluster provider's (its Dockerfile: /manager); v1.1.0 built for the v1.1.1 pin.
    provider_releases.IPAM_IMAGE: Image(
        vendor.IPAM_BIN_VARIABLE,
        vendor.IPAM_BINARY,
        "/manager",
        provider_releases.IPAM_SERVED_AS,
        also=(vendor.IPAM_VERSION,),
    ),
    # The operator's image as its Makefile builds it: the manager at /manager (its Dockerfile).
    pins.OPERATOR_IMAGE[0]: Image("LAB_MGMT_OPERATOR_BIN", "cluster-api-operator", "/manager", pins.OPERATOR_IMAGE[1]),
    # CAPMOX's manager as its Dockerfile lays it out (/manager); v0.9.0 built for the v0.9.1 pin.
    provider_releases.CAPMOX_IMAGE: Image(
        "LAB_MGMT_CAPMOX_BIN", "capmox-manager", "/manager", provider_releases.CAPMOX_SERVED_AS
    ),
    # helm-controller's Jobs as the lab's k3s runs them: `entry` (a bash script, run by the
    # machine's bash, with its jq and coreutils for Alpine's) and Helm v4.1.4 in /usr/bin, as the
    # image user klipper-helm's (build-engine.sh build_klipper_helm). The process runs as root, not
    # as uid 1000: nothing the script does depends on it.
    "rancher/klipper-helm": Image(
        "LAB_MGMT_KLIPPER_HELM_BIN",
        "entry",
        "/usr/bin/entry",
        "v0.13.3-build20260727",
        entrypoint="entry",
        beside=("helm",),
        home="/home/klipper-helm",
        workdir="/home/klipper-helm",
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


def route_through_the_box() -> str:
    """What the box's side of the pods' network needs before any Pod starts: forwarding on (a
    network namespace starts with it off), so that a Pod reaches the VMs' API servers through the
    box and they answer through their default route, the box; and HOST_SIDE_IP held by the
    loopback too, so that a stand-in serving the Pods binds it before any veth exists. Returns it."""
    Path("/proc/sys/net/ipv4/ip_forward").write_text("1\n")
    done = subprocess.run(
        ["ip", "addr", "replace", f"{HOST_SIDE_IP}/32", "dev", "lo"], capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise PodError(f"cannot hold {HOST_SIDE_IP} on the loopback: {done.stderr.strip()}")
    return HOST_SIDE_IP


def new_pod_ip() -> str:
    number = next(_POD_NUMBERS)
    if number > 254:
        raise PodError(f"the runner has no address left in {POD_SUBNET}0/24")
    return f"{POD_SUBNET}{number}"


def new_veth_name() -> str:
    return f"podveth{next(_VETH_NUMBERS)}"


@dataclass
class Started:
    process: subprocess.Popen[bytes]
    log: Path
    started_at: str


def image_of(container: dict[str, Any]) -> Image:
    repository, _, tag = container["image"].rpartition(":")
    if repository not in IMAGES:
        raise PodError(f"no binary stands for image {container['image']} (known: {', '.join(IMAGES)})")
    if tag != IMAGES[repository].tag and tag not in IMAGES[repository].also:
        raise PodError(f"image {container['image']}: the binary built here is {repository}:{IMAGES[repository].tag}")
    return IMAGES[repository]


def environment(
    api: Api,
    pod: dict[str, Any],
    container: dict[str, Any],
    api_address: tuple[str, int],
    pod_ip: str,
    *,
    home: str = "",
) -> list[str]:
    """NAME=value, the image's PATH and HOME and the kubelet's additions first, then the
    container's own (values, fieldRefs, and Secrets' keys read as the container starts)."""
    api_host, api_port = api_address
    if container.get("envFrom"):
        raise PodError(f"container {container['name']}: the runner does not resolve envFrom")
    env = {
        "PATH": IMAGE_PATH,
        **({"HOME": home} if home else {}),
        "HOSTNAME": pod["metadata"]["name"],
        "KUBERNETES_SERVICE_HOST": api_host,
        "KUBERNETES_SERVICE_PORT": str(api_port),
        "KUBERNETES_SERVICE_PORT_HTTPS": str(api_port),
    }
    for entry in container.get("env", []):
        if "value" in entry or not entry.get("valueFrom"):
            env[entry["name"]] = entry.get("value", "")
        elif set(entry["valueFrom"]) == {"fieldRef"}:
            env[entry["name"]] = field_value(pod, entry["valueFrom"]["fieldRef"]["fieldPath"], pod_ip)
        elif set(entry["valueFrom"]) == {"secretKeyRef"}:
            value = secret_key(api, pod["metadata"]["namespace"], entry["valueFrom"]["secretKeyRef"])
            if value is not None:
                env[entry["name"]] = value
        else:
            raise PodError(f"container {container['name']}: env {entry['name']} from {entry['valueFrom']}")
    return [f"{name}={value}" for name, value in env.items()]


def _image_files(image: Image, pod_dir: Path, root: str) -> list[str]:
    """The mount lines that lay an image's binary and the files beside it at their paths in the
    image, over the folder they are in (an image with an entrypoint, which finds them on PATH)."""
    if not image.entrypoint:
        return []
    folder = Path(image.path).parent
    mount = _overlay(str(folder), pod_dir / "image-layer", root + str(folder))
    built = built_bin(image.bin_variable, image.binary)
    for name in (image.binary, *image.beside):
        (pod_dir / "image-layer" / "upper" / name).unlink(missing_ok=True)
        (pod_dir / "image-layer" / "upper" / name).symlink_to(built / name)
    return [mount]


# What runs in the Pod's root: from the image's WORKDIR ($0), the container's environment alone
# and its command.
IN_ROOT = 'cd "$0" && exec env -i "$@"'


def _in_root(target: str) -> str:
    """`target` with each symlink on its way followed as the Pod's root has it (the machine's
    tree, an absolute link read from that root), so that a mount point made through one stays in
    the root: /var/run/secrets is /run/secrets there, never the machine's."""
    path = Path("/")
    for part in Path(target).parts[1:]:
        path /= part
        for _ in range(40):
            if not path.is_symlink():
                break
            path = Path(os.path.normpath(path.parent / os.readlink(path)))
        else:
            raise PodError(f"mount path {target}: too many symbolic links")
    return str(path)


def _overlay(lower: str, layer: Path, at: str) -> str:
    """The line that mounts `lower` at `at` under an overlay whose writes go to `layer`."""
    upper, work = layer / "upper", layer / "work"
    upper.mkdir(parents=True, exist_ok=True)
    work.mkdir(parents=True, exist_ok=True)
    options = f"lowerdir={lower},upperdir={upper},workdir={work}"
    return f"mount -t overlay overlay -o {shlex.quote(options)} {shlex.quote(at)}"


def _mount_script(
    mounts: list[Mount],
    pod_dir: Path,
    pod_ip: str,
    hostname: str,
    *,
    image_files: list[str] | None = None,
    workdir: str = "/",
) -> str:
    """What runs first in the Pod's namespaces: its root (the machine's tree under an overlay of
    the Pod's own, so that a mount point the machine lacks, /config, is made there and nothing is
    written on the machine's tree; /proc, /sys and /dev's mounts bound into it, /dev under an
    overlay too, for the termination message file), the image's files and the bind mounts in it;
    the Pod's side of the network once the runner has put its veth there; then the container's
    process, in that root."""
    root = str(pod_dir / "rootfs")
    Path(root).mkdir(parents=True, exist_ok=True)
    lines = [
        "set -eu",
        _overlay("/", pod_dir / "rootfs-layer", root),
        *(f"mount --rbind /{name} {shlex.quote(f'{root}/{name}')}" for name in ("proc", "sys")),
        _overlay("/dev", pod_dir / "dev-layer", f"{root}/dev"),
        *(f"mount --rbind /dev/{name} {shlex.quote(f'{root}/dev/{name}')}" for name in ("pts", "shm")),
        *(image_files or []),
    ]
    for source, target, read_only in mounts:
        quoted = shlex.quote(root + _in_root(target))
        made = f"mkdir -p {quoted}" if source.is_dir() else f"[ -e {quoted} ] || touch {quoted}"
        lines += [made, f"mount --bind {shlex.quote(str(source))} {quoted}"]
        if read_only:
            lines.append(f"mount -o remount,bind,ro {quoted}")
    lines += [
        f"echo {shlex.quote(hostname)} >/proc/sys/kernel/hostname",
        "ip link set lo up",
        "tries=0; until ip link show eth0 >/dev/null 2>&1; do",
        f"  tries=$((tries+1)); [ $tries -lt {int(NETNS_BOUND_SECONDS * 20)} ] || exit 96; sleep 0.05",
        "done",
        f"ip addr add {pod_ip}/32 dev eth0 && ip link set eth0 up",
        f"ip route add {HOST_SIDE_IP}/32 dev eth0 && ip route add default via {HOST_SIDE_IP} dev eth0",
        f"mkdir -p {shlex.quote(root + workdir)}",
        f'exec chroot {shlex.quote(root)} sh -c {shlex.quote(IN_ROOT)} {shlex.quote(workdir)} "$@"',
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
    api: Api,
    pod: dict[str, Any],
    pod_dir: Path,
    *,
    network: tuple[str, str],
    log: Path,
    api_address: tuple[str, int],
    internet: Internet | None = None,
) -> Started:
    """The Pod's one container started as a process, joined to the Pod's network (its IP, and the
    name of its veth on the test's side), reaching `internet`'s stand-ins by their names."""
    pod_ip, veth = network
    containers = pod["spec"]["containers"]
    if len(containers) != 1 or pod["spec"].get("initContainers"):
        raise PodError(f"pod {pod['metadata']['name']}: the runner runs one container and no init container")
    container = containers[0]
    image = image_of(container)
    argv = [*(container.get("command") or [image.entrypoint or image.path]), *container.get("args", [])]
    if image.entrypoint and container.get("command"):
        raise PodError(
            f"container {container['name']}: the runner starts {image.binary} by its image's entrypoint only"
        )
    # The command as the image's WORKDIR (/) resolves it: the binary, under the path it is given,
    # from a folder that stands for that WORKDIR (pod_dir/root). An image with an entrypoint finds
    # it on its PATH, where _image_files lays it, from its own WORKDIR.
    root = pod_dir / "root"
    root.mkdir(parents=True, exist_ok=True)
    if not image.entrypoint:
        if os.path.normpath(os.path.join("/", argv[0])) != image.path:
            raise PodError(f"container {container['name']}: command {argv[0]} is not the image's {image.path}")
        binary = built_bin(image.bin_variable, image.binary) / image.binary
        if argv[0].startswith("/"):
            argv[0] = str(binary)
        else:
            (root / image.path.lstrip("/")).unlink(missing_ok=True)
            (root / image.path.lstrip("/")).symlink_to(binary)
    env = environment(api, pod, container, api_address, pod_ip, home=image.home)
    mounts = [*volumes(api, pod, container, pod_dir), *pod_files(pod, container, pod_dir, pod_ip, internet)]
    image_files = _image_files(image, pod_dir, str(pod_dir / "rootfs"))
    workdir = image.workdir or str(root)
    script = _mount_script(mounts, pod_dir, pod_ip, pod["metadata"]["name"], image_files=image_files, workdir=workdir)
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
