"""A real Kubernetes control plane for tests: etcd, kube-apiserver and kube-controller-manager's
service account token controller (`e2e/engine/build-engine.sh control-plane`, in
LAB_MGMT_CONTROL_PLANE_BIN), at the VM's address on port 6443 (or a workload cluster's endpoint,
with more controllers and kube-scheduler: lab1), with an admin token and an audit log: every
request on HelmCharts and provider CRs (with the body, but for a provider CR's patch), on Secrets
and Cluster API's objects (reads too: whom cluster-autoscaler reads them as, and whether RBAC let
it), and every write, so that a test can tell what a script or the engine did and in which order.

It runs only inside a network namespace that the test made (e2e/engine/netns.py), where the VM's
address is on loopback.
"""

from __future__ import annotations

import base64
import datetime
import ipaddress
import json
import os
import ssl
import subprocess
import time
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat
from cryptography.x509.oid import NameOID

from e2e.engine.cli import built_bin

ADMIN_USER = "admin"
CONTROLLER_USER = "system:kube-controller-manager"
OPERATOR_USER = "capi-operator-standin"
INJECTOR_USER = "cert-manager-cainjector-standin"
CLUSTER_API_USER = "capi-controller-manager"
SCHEDULER_USER = "system:kube-scheduler"
PROVIDERS_USER = "capi-providers-standin"
KUBELET_USER = "kubelet-standin"
HELM_CONTROLLER_USER = "helm-controller"
# Who may talk to the box, each with a token and a kubeconfig (`<user>.kubeconfig`) of its own, so
# that the audit log tells the admin's requests (scripts, kubectl, the engine) from the
# controllers' (e2e/controllers/cluster_api.py's too). All are cluster admins.
TOKENS = {
    ADMIN_USER: "lab-in-a-box-admin",
    CONTROLLER_USER: "lab-in-a-box-controller",
    OPERATOR_USER: "lab-in-a-box-operator",
    INJECTOR_USER: "lab-in-a-box-cainjector",
    CLUSTER_API_USER: "lab-in-a-box-capi-manager",
    SCHEDULER_USER: "lab-in-a-box-scheduler",
    PROVIDERS_USER: "lab-in-a-box-capi-providers",
    KUBELET_USER: "lab-in-a-box-kubelet",
    HELM_CONTROLLER_USER: "lab-in-a-box-helm-controller",
}
READY_BOUND_SECONDS = 90

# A server-side apply's body is YAML, which the API server cannot write into an event as the
# request object: at Request level it drops the whole event (logging "Error in audit plugin" in its
# own log). The engine applies provider CRs, so their patches are recorded without the body.
AUDIT_POLICY = """apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: Metadata
  verbs: [patch]
  resources:
  - group: operator.cluster.x-k8s.io
- level: Request
  resources:
  - group: helm.cattle.io
  - group: operator.cluster.x-k8s.io
- level: Metadata
  resources:
  - group: ""
    resources: [secrets]
- level: Metadata
  resources:
  - group: cluster.x-k8s.io
  - group: infrastructure.cluster.x-k8s.io
- level: Metadata
  verbs: [create, update, patch, delete, deletecollection]
- level: None
"""


@dataclass(frozen=True)
class Pki:
    """Certificates made by the caller, as k3s or kubeadm init makes them: the API server's serving
    certificate and key, the CA that signed it (and its key, where the caller keeps it), and the CA
    its clients' certificates are signed by."""

    ca: Path
    cert: Path
    key: Path
    client_ca: Path
    ca_key: Path | None = None


# The other CAs kubeadm init makes beside the cluster's (etcd's and the front proxy's), by the
# stem of their files in made_pki's directory (`<stem>.crt`, `<stem>.key`); Cluster API keeps
# them in `<cluster>-etcd` and `<cluster>-proxy`.
OTHER_CAS = {"etcd": "etcd-ca", "proxy": "front-proxy-ca"}


def made_pki(directory: Path, address: str) -> Pki:
    """What kubeadm init makes for a workload cluster's API server at `address`: a CA (kept with its
    key, as Cluster API keeps it in `<cluster>-ca`) and a serving certificate it signs, with the
    names and the Service address an API server's own certificate has, and etcd's and the front
    proxy's CAs (OTHER_CAS). Made once in `directory`: a restart serves the same ones."""
    ca_key_file = directory / "ca.key"
    files = Pki(
        *(directory / "ca.crt", directory / "apiserver.crt", directory / "apiserver.key", directory / "ca.crt"),
        ca_key=ca_key_file,
    )
    if files.cert.exists():
        return files
    directory.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.UTC)

    def signed(subject: str, public_key: Any, issuer: str, signer: Any, extensions: list[Any]) -> x509.Certificate:
        builder = x509.CertificateBuilder().subject_name(_name(subject)).issuer_name(_name(issuer))
        builder = builder.public_key(public_key).serial_number(x509.random_serial_number())
        builder = builder.not_valid_before(now).not_valid_after(now + datetime.timedelta(days=365))
        for extension, critical in extensions:
            builder = builder.add_extension(extension, critical=critical)
        return builder.sign(signer, hashes.SHA256())

    ca_key, serving_key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca = signed("kubernetes", ca_key.public_key(), "kubernetes", ca_key, [(x509.BasicConstraints(True, None), True)])
    names = [x509.DNSName(n) for n in ("kubernetes", "kubernetes.default", "kubernetes.default.svc", "localhost")]
    ips = [x509.IPAddress(ipaddress.ip_address(ip)) for ip in (address, "10.43.0.1", "127.0.0.1")]
    serving = signed(
        "kube-apiserver",
        serving_key.public_key(),
        "kubernetes",
        ca_key,
        [(x509.BasicConstraints(False, None), True), (x509.SubjectAlternativeName([*names, *ips]), False)],
    )
    for path, key in ((ca_key_file, ca_key), (files.key, serving_key)):
        path.write_bytes(key.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption()))
    files.ca.write_bytes(ca.public_bytes(Encoding.PEM))
    for stem in OTHER_CAS.values():
        other_key = ec.generate_private_key(ec.SECP256R1())
        other = signed(stem, other_key.public_key(), stem, other_key, [(x509.BasicConstraints(True, None), True)])
        (directory / f"{stem}.key").write_bytes(
            other_key.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption())
        )
        (directory / f"{stem}.crt").write_bytes(other.public_bytes(Encoding.PEM))
    # Written last: its presence says the directory is whole.
    files.cert.write_bytes(serving.public_bytes(Encoding.PEM))
    return files


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


@dataclass(frozen=True)
class ControlPlane:
    bin_dir: Path
    root: Path
    address: str
    port: int = 6443
    outage: Callable[[], AbstractContextManager[None]] | None = field(default=None, compare=False, repr=False)
    pki: Pki | None = None
    """The certificates it serves, where the caller made them."""

    def apiserver_stopped(self) -> AbstractContextManager[None]:
        """For the block, its kube-apiserver stopped (clients are refused); started again on the
        same data afterwards, and ready before the block's exit returns."""
        if self.outage is None:
            raise RuntimeError(f"{self.server}: not started by control_plane.running, it cannot be stopped")
        return self.outage()

    @property
    def server(self) -> str:
        return f"https://{self.address}:{self.port}"

    @property
    def kubeconfig(self) -> Path:
        return self.kubeconfig_of(ADMIN_USER)

    def kubeconfig_of(self, user: str) -> Path:
        return self.root / f"{user.replace(':', '-')}.kubeconfig"

    def kubectl(self, *args: str, stdin: str | None = None, timeout: int = 60) -> subprocess.CompletedProcess[str]:
        """As the admin; a failure raises. `timeout`: seconds before the process is killed, above
        any `--timeout` of kubectl's own among `args` (a `kubectl wait`)."""
        done = self.kubectl_as(self.kubeconfig, *args, stdin=stdin, timeout=timeout)
        done.check_returncode()
        return done

    def kubectl_as(
        self, kubeconfig: Path, *args: str, stdin: str | None = None, timeout: int = 60
    ) -> subprocess.CompletedProcess[str]:
        """As whoever `kubeconfig` names, whatever the outcome."""
        return subprocess.run(
            [str(self.bin_dir / "kubectl"), f"--kubeconfig={kubeconfig}", *args],
            # Its discovery cache goes under $HOME: the box's own directory.
            env={**os.environ, "HOME": str(self.root)},
            input=stdin,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def audit_mark(self) -> int:
        """len(audit()), counted without parsing a log of tens of megabytes."""
        log = self.root / "audit.log"
        return log.read_bytes().count(b"\n") if log.exists() else 0

    def audit(self) -> list[dict[str, Any]]:
        """Every request the audit policy records, in order: each whole line, for the API server
        may be writing the last one as it is read (a CI run read half an event)."""
        log = self.root / "audit.log"
        text = log.read_text() if log.exists() else ""
        return [json.loads(line) for line in text[: text.rfind("\n") + 1].splitlines()]


def kubeconfig_text(server: str, ca: Path, user: str, token: str) -> str:
    """Like k3s's: the server's certificate (self-signed, so its own CA) in the file."""
    ca_data = base64.b64encode(ca.read_bytes()).decode()
    return json.dumps(
        {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "box", "cluster": {"server": server, "certificate-authority-data": ca_data}}],
            "users": [{"name": user, "user": {"token": token}}],
            "contexts": [{"name": "box", "context": {"cluster": "box", "user": user}}],
            "current-context": "box",
        }
    )


def until_ready(
    request: urllib.request.Request | str,
    exited: Callable[[], str | None],
    *,
    what: str,
    bound: float,
    interval: float,
    context: ssl.SSLContext | None = None,
) -> None:
    """`request` (a readyz) polled every `interval` seconds until it answers 200; a RuntimeError
    with what `exited()` says as soon as it says something (a process that died), or naming
    `what` after `bound` seconds."""
    deadline = time.monotonic() + bound
    while time.monotonic() < deadline:
        if (died := exited()) is not None:
            raise RuntimeError(died)
        try:
            with urllib.request.urlopen(request, timeout=2, context=context) as response:  # noqa: S310
                if response.status == 200:
                    return
        except OSError:
            pass
        time.sleep(interval)
    raise RuntimeError(f"{what} not ready within {bound}s")


def _wait_ready(server: str, processes: dict[str, subprocess.Popen[bytes]], logs: Path) -> None:
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    request = urllib.request.Request(f"{server}/readyz", headers={"Authorization": f"Bearer {TOKENS[ADMIN_USER]}"})  # noqa: S310

    def exited() -> str | None:
        return next(
            (f"{name} exited {p.returncode}; logs in {logs}" for name, p in processes.items() if p.poll() is not None),
            None,
        )

    until_ready(
        request, exited, what=f"kube-apiserver (logs in {logs})", bound=READY_BOUND_SECONDS, interval=1, context=context
    )


@contextmanager
def running(
    root: Path,
    address: str,
    *,
    bind_address: str | None = None,
    pki: Pki | None = None,
    controllers: Sequence[str] = ("serviceaccount-token-controller",),
    port: int = 6443,
    scheduler: bool = False,
    service_routing: bool = False,
) -> Iterator[ControlPlane]:
    """etcd and kube-apiserver at `address`:6443 for the block; stopped afterwards. The API server
    listens on `bind_address` (default: `address`), serving `pki`'s certificate or one of its own.
    Started again on the same `root`, it keeps its data and its service account signing key, so
    the tokens it issued stay valid, as a restarted k3s's do. kube-controller-manager runs
    `controllers` (by default the token controller alone, as k3s's does); with `scheduler`,
    kube-scheduler too (a workload cluster). `port` is the API server's (a workload cluster's
    endpoint may name another); etcd listens on `address`'s 2379 and 2380, so two clusters need
    two addresses. With `service_routing`, a webhook's Service is dialled at its EndpointSlices'
    address, as k3s does."""
    bin_dir = built_bin("LAB_MGMT_CONTROL_PLANE_BIN", "kube-apiserver")
    root.mkdir(parents=True, exist_ok=True)
    (root / "tokens.csv").write_text(
        "".join(f'{token},{user},{user},"system:masters"\n' for user, token in TOKENS.items())
    )
    (root / "audit-policy.yaml").write_text(AUDIT_POLICY)
    if not (root / "sa.key").exists():
        subprocess.run(["openssl", "genrsa", "-out", str(root / "sa.key"), "2048"], check=True, capture_output=True)
    subprocess.run(
        ["openssl", "rsa", "-in", str(root / "sa.key"), "-pubout", "-out", str(root / "sa.pub")],
        check=True,
        capture_output=True,
    )
    tls = (
        [f"--tls-cert-file={pki.cert}", f"--tls-private-key-file={pki.key}", f"--client-ca-file={pki.client_ca}"]
        if pki
        else [f"--cert-dir={root / 'pki'}"]
    )
    server = f"https://{address}:{port}"
    etcd_log = (root / "etcd.log").open("wb")
    apiserver_log = (root / "kube-apiserver.log").open("wb")
    etcd = subprocess.Popen(
        [
            str(bin_dir / "etcd"),
            f"--data-dir={root / 'etcd'}",
            # On the cluster's own address, so that two clusters can run side by side.
            *(f"--listen-client-urls=http://{address}:2379", f"--advertise-client-urls=http://{address}:2379"),
            *(f"--listen-peer-urls=http://{address}:2380", f"--initial-advertise-peer-urls=http://{address}:2380"),
            *(f"--initial-cluster=default=http://{address}:2380", "--unsafe-no-fsync"),
        ],
        stdout=etcd_log,
        stderr=subprocess.STDOUT,
    )
    apiserver_argv = [
        str(bin_dir / "kube-apiserver"),
        f"--etcd-servers=http://{address}:2379",
        f"--bind-address={bind_address or address}",
        f"--advertise-address={address}",
        f"--secure-port={port}",
        *tls,
        f"--token-auth-file={root / 'tokens.csv'}",
        "--authorization-mode=RBAC",
        "--service-cluster-ip-range=10.43.0.0/16",
        f"--service-account-issuer={server}",
        f"--service-account-key-file={root / 'sa.pub'}",
        f"--service-account-signing-key-file={root / 'sa.key'}",
        f"--audit-policy-file={root / 'audit-policy.yaml'}",
        f"--audit-log-path={root / 'audit.log'}",
        "--audit-log-mode=blocking",
        *(["--enable-aggregator-routing=true"] if service_routing else []),
    ]
    apiserver = subprocess.Popen(apiserver_argv, stdout=apiserver_log, stderr=subprocess.STDOUT)
    processes = {"etcd": etcd, "kube-apiserver": apiserver}
    logs = [etcd_log, apiserver_log]

    @contextmanager
    def outage() -> Iterator[None]:
        stop(processes["kube-apiserver"])
        try:
            yield
        finally:
            processes["kube-apiserver"] = subprocess.Popen(
                apiserver_argv, stdout=apiserver_log, stderr=subprocess.STDOUT
            )
            _wait_ready(server, processes, root)

    try:
        _wait_ready(server, processes, root)
        ca = pki.ca if pki else root / "pki" / "apiserver.crt"
        cluster = ControlPlane(bin_dir, root, address, port, outage, pki)
        for user, token in TOKENS.items():
            cluster.kubeconfig_of(user).write_text(kubeconfig_text(server, ca, user, token))
        controller_log = (root / "kube-controller-manager.log").open("wb")
        logs.append(controller_log)
        processes["kube-controller-manager"] = subprocess.Popen(
            [
                str(bin_dir / "kube-controller-manager"),
                f"--kubeconfig={cluster.kubeconfig_of(CONTROLLER_USER)}",
                f"--controllers={','.join(controllers)}",
                f"--service-account-private-key-file={root / 'sa.key'}",
                f"--root-ca-file={ca}",
                "--leader-elect=false",
                "--secure-port=0",
            ],
            stdout=controller_log,
            stderr=subprocess.STDOUT,
        )
        if scheduler:
            scheduler_log = (root / "kube-scheduler.log").open("wb")
            logs.append(scheduler_log)
            processes["kube-scheduler"] = subprocess.Popen(
                [
                    str(built_bin("LAB_MGMT_CONTROL_PLANE_BIN", "kube-scheduler") / "kube-scheduler"),
                    f"--kubeconfig={cluster.kubeconfig_of(SCHEDULER_USER)}",
                    "--leader-elect=false",
                    "--secure-port=0",
                ],
                stdout=scheduler_log,
                stderr=subprocess.STDOUT,
            )
        yield cluster
    finally:
        for process in reversed(processes.values()):
            stop(process)
        for log in logs:
            log.close()


def stop(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM, and SIGKILL if it has not exited 20 s later."""
    process.terminate()
    try:
        process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        process.kill()
