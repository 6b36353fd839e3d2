"""k3s in a box guest (guest.py), as the box's installer (k3s_release_standin.py) puts it in
/usr/local/bin: `k3s --version` reports the version it was downloaded as (K3S_STANDIN_VERSION),
`k3s kubectl` is the real kubectl on /etc/rancher/k3s/k3s.yaml, and `k3s server` runs the real
etcd, kube-apiserver and kube-controller-manager (e2e/engine/control_plane.py) on all the guest's
addresses at port 6443, with certificates of its own as k3s makes them (the node's address,
127.0.0.1 and config.yaml's tls-san in the serving certificate's SANs; an admin client
certificate in k3s.yaml), registers the node with its kubelet version and keeps its heartbeat,
applies the manifests folder as k3s's deploy controller does (k3s_deploy.py), and tells systemd it
is ready. Any other command, or a config.yaml key it does not know, fails.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import FrameType
from typing import Any

import yaml

from e2e.engine import control_plane
from e2e.engine.cli import built_bin
from e2e.engine.kube_api import Api
from e2e.standins.guest import k3s_deploy

CONFIG = Path("/etc/rancher/k3s/config.yaml")
KUBECONFIG = Path("/etc/rancher/k3s/k3s.yaml")
DATA = Path("/var/lib/rancher/k3s/server")
MANIFESTS = DATA / "manifests"
KNOWN_CONFIG = {"disable", "tls-san", "write-kubeconfig-mode"}
HEARTBEAT_SECONDS = 10
# Of the controllers k3s runs, those a chart's workload needs to become Available: a namespace's
# default ServiceAccount (a Pod is refused without it), a Deployment's ReplicaSet, its Pods, their
# status (whoever stands in for the kubelet sets the Pods' own), the `kube-root-ca.crt` ConfigMap a
# Pod's service account volume projects (the pod runner's autoscaler reads it). And the garbage collector:
# pulumi-kubernetes deletes in the foreground, and only the collector lifts that finalizer, so
# without it a deleted object (the CAPMOX Secret a token rotation replaces) stays, and the run waits.
# And the built-in `view`, `edit` and `admin` roles filled in from their aggregated parts: the
# owner's inspector's role is bound to `view`. And the job controller, which makes the pods of
# helm-controller's install Jobs (e2e/box/management/k3s_charts.py).
CONTROLLERS = (
    *("serviceaccount-token-controller", "serviceaccount-controller", "clusterrole-aggregation-controller"),
    *("deployment-controller", "replicaset-controller", "garbage-collector-controller", "job-controller"),
    "root-ca-certificate-publisher-controller",
)


def _openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True)


def _ca(tls: Path, name: str) -> tuple[Path, Path]:
    """A CA that outlives restarts, as k3s keeps its own under server/tls."""
    cert, key = tls / f"{name}.crt", tls / f"{name}.key"
    if not cert.exists():
        _openssl(
            *("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-days", "3650"),
            *("-subj", f"/CN=k3s-{name}@{int(time.time())}", "-keyout", str(key), "-out", str(cert)),
        )
    return cert, key


def _issue(tls: Path, name: str, subject: str, ca: tuple[Path, Path], extensions: str) -> tuple[Path, Path]:
    cert, key, request = tls / f"{name}.crt", tls / f"{name}.key", tls / f"{name}.csr"
    _openssl(
        *("req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"),
        *("-subj", subject, "-keyout", str(key), "-out", str(request)),
    )
    with tempfile.NamedTemporaryFile("w", suffix=".cnf") as ext:
        ext.write(extensions)
        ext.flush()
        _openssl(
            *("x509", "-req", "-in", str(request), "-CA", str(ca[0]), "-CAkey", str(ca[1]), "-CAcreateserial"),
            *("-days", "365", "-extfile", ext.name, "-out", str(cert)),
        )
    return cert, key


def _san(names: list[str]) -> str:
    def one(name: str) -> str:
        try:
            ipaddress.ip_address(name)
        except ValueError:
            return f"DNS:{name}"
        return f"IP:{name}"

    return "subjectAltName=" + ",".join(dict.fromkeys(one(name) for name in names))


def _node_address() -> str:
    """The guest's first global IPv4 address, as k3s picks the node IP."""
    listed = json.loads(
        subprocess.run(
            ["ip", "-j", "-4", "addr", "show", "scope", "global"], capture_output=True, text=True, check=True
        ).stdout
    )
    return str(next(info["local"] for link in listed for info in link.get("addr_info", [])))


def _config() -> dict[str, Any]:
    config: dict[str, Any] = (yaml.safe_load(CONFIG.read_text()) or {}) if CONFIG.exists() else {}
    unknown = set(config) - KNOWN_CONFIG
    if unknown:
        raise SystemExit(f"k3s stand-in: {CONFIG}: does not know {', '.join(sorted(unknown))}")
    return config


def _kubeconfig(ca: Path, admin: tuple[Path, Path], mode: int) -> None:
    def data(path: Path) -> str:
        import base64  # noqa: PLC0415 - only here

        return base64.b64encode(path.read_bytes()).decode()

    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": "default", "cluster": {"server": "https://127.0.0.1:6443", "certificate-authority-data": data(ca)}}
        ],
        "contexts": [{"name": "default", "context": {"cluster": "default", "user": "default"}}],
        "current-context": "default",
        "preferences": {},
        "users": [
            {"name": "default", "user": {"client-certificate-data": data(admin[0]), "client-key-data": data(admin[1])}}
        ],
    }
    KUBECONFIG.parent.mkdir(parents=True, exist_ok=True)
    KUBECONFIG.write_text(yaml.safe_dump(doc, sort_keys=False))
    KUBECONFIG.chmod(mode)


def _notify_ready() -> None:
    path = os.environ.get("NOTIFY_SOCKET")
    if path:
        # k3s goes on when no one listens any more (a start job that gave up), as sd_notify's
        # callers do.
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as notify, contextlib.suppress(ConnectionRefusedError):
            notify.sendto(b"READY=1", path)


def _node_status(version: str, address: str) -> dict[str, Any]:
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    ready = {
        "type": "Ready",
        "status": "True",
        "reason": "KubeletReady",
        "message": "kubelet is posting ready status",
        "lastHeartbeatTime": now,
        "lastTransitionTime": now,
    }
    return {
        "status": {
            "conditions": [ready],
            "addresses": [
                {"type": "InternalIP", "address": address},
                {"type": "Hostname", "address": socket.gethostname()},
            ],
            "nodeInfo": {
                "kubeletVersion": version,
                "kubeProxyVersion": version,
                "containerRuntimeVersion": "containerd://2.1.4-k3s1",
            },
        }
    }


def server(version: str) -> None:
    config = _config()
    address = _node_address()
    hostname = socket.gethostname()
    tls = DATA / "tls"
    tls.mkdir(parents=True, exist_ok=True)
    server_ca, client_ca = _ca(tls, "server-ca"), _ca(tls, "client-ca")
    sans = [
        *("kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"),
        *("localhost", hostname, "127.0.0.1", "::1", "10.43.0.1", address),
        *(str(name) for name in config.get("tls-san", [])),
    ]
    serving = _issue(
        tls, "serving-kube-apiserver", "/O=k3s/CN=k3s", server_ca, f"{_san(sans)}\nextendedKeyUsage=serverAuth\n"
    )
    admin = _issue(tls, "client-admin", "/O=system:masters/CN=system:admin", client_ca, "extendedKeyUsage=clientAuth\n")
    _kubeconfig(server_ca[0], admin, int(str(config.get("write-kubeconfig-mode", "0600")), 8))
    pki = control_plane.Pki(ca=server_ca[0], cert=serving[0], key=serving[1], client_ca=client_ca[0])

    def stop(_signum: int, _frame: FrameType | None) -> None:
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, stop)
    with control_plane.running(
        DATA / "box",
        address,
        bind_address="0.0.0.0",  # noqa: S104 - k3s listens on all
        pki=pki,
        controllers=CONTROLLERS,
    ) as cluster:
        node = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": hostname, "labels": {"node-role.kubernetes.io/control-plane": "true"}},
        }
        api = Api.from_kubeconfig(cluster.kubeconfig)
        code, answer = api.call("POST", "/api/v1/nodes", node)
        if code not in (201, 409):  # 409: registered before this start
            raise SystemExit(f"k3s stand-in: registering node {hostname}: {code} {answer.get('message', '')}")
        print(f"k3s {version}: node {hostname} at {address}; SANs {sans}", flush=True)
        api.merge_patch(node, _node_status(version, address), subresource="status")
        disabled = config.get("disable", [])
        k3s_deploy.Deploy(api, MANIFESTS, disabled.split(",") if isinstance(disabled, str) else disabled).start()
        # Once, as k3s does: systemd listens for it only while the start job waits.
        _notify_ready()
        while True:
            time.sleep(HEARTBEAT_SECONDS)
            api.merge_patch(node, _node_status(version, address), subresource="status")


def main() -> None:
    version = os.environ["K3S_STANDIN_VERSION"]
    args = sys.argv[1:]
    if args in (["--version"], ["-v"], ["version"]):
        print(f"k3s version {version} (b0x5ta1d)\ngo version go1.24.11")
    elif args[:1] == ["kubectl"]:
        kubectl = built_bin("LAB_MGMT_CONTROL_PLANE_BIN", "kubectl") / "kubectl"
        env = {"KUBECONFIG": str(KUBECONFIG), **os.environ}
        os.execve(kubectl, ["kubectl", *args[1:]], env)  # noqa: S606 - k3s kubectl is kubectl
    elif args == ["server"]:
        server(version)
    else:
        raise SystemExit(f"k3s stand-in: does not know `k3s {' '.join(args)}`")


if __name__ == "__main__":
    main()
