"""The real Cluster API managers of v1.12.11, built by `e2e/engine/build-engine.sh workload` from
the archive (their directory in LAB_MGMT_CLUSTER_API_BIN), each running against a box's management
API server (e2e/engine/control_plane.py) as cluster-api-operator would deploy it for its provider
CR (`FOR_PROVIDER`):

- CORE, the core manager (the archive's root main.go): the Cluster, MachineDeployment, MachineSet
  and Machine controllers and the webhooks (defaulting and validation; replicas are defaulted
  there) of upstream, unchanged;
- BOOTSTRAP, the kubeadm bootstrap manager (bootstrap/kubeadm): its webhooks and its KubeadmConfig
  controller, which renders each worker's bootstrap data from the program's KubeadmConfigTemplate
  (cloud-config running `kubeadm join`) with a bootstrap token it makes in the workload cluster and
  the pin of the CA in `<cluster>-ca`; the VMs boot with that data (e2e/standins/workload/vm_boot.py);
- CONTROL_PLANE, the KubeadmControlPlane manager (controlplane/kubeadm), webhooks only (issue 57):
  every KubeadmControlPlane the program or clusterctl sends goes through upstream's defaulting and
  validation, while its controller is kept idle by `--watch-filter` (a label value no object
  carries), since what it drives (kubeadm init on the VMs, etcd through port-forwards) is the KCP
  stand-in's (e2e/standins/workload/kubeadm_control_plane.py).

How the box starts each, where upstream's Deployment would (config/manager/manager.yaml):

- as a process in the test's network namespace, with a kubeconfig and a token of its own
  (`control_plane.CLUSTER_API_USER`), so the audit log tells its writes from everyone else's;
- its webhook server on `address` at a port of its own (not 9443: the operator's webhook stand-in
  may hold it) with a throwaway serving certificate made as the box's HTTPS stand-ins make theirs
  (e2e/standins/https_server.py), its health and diagnostics endpoints on `address`, leader
  election off;
- once it is ready, the webhook configurations upstream ships (its `config/webhook/manifests.yaml`
  in the archive, read at run time, named with the prefix of its config/default) are registered
  with each webhook's Service rewritten to a `url:` at the manager's address, and the certificate
  as caBundle: the box's API server reaches no Service. They are written under the operator
  stand-in's identity, as cluster-api-operator installs a provider's components.

The CRDs' conversion webhooks are not registered: the CRDs as the operator stand-in installs them
(`config/crd/bases`, e2e/standins/cluster/provider_crds.py) carry no conversion section, so the API
server serves v1beta1 by relabelling v1beta2 (strategy None). That holds only while nothing
requests v1beta1: `v1beta1_requests` tells a test whether anything did.

A manager needs the CRDs of the kinds it watches before it starts (the operator stand-in with
`real_crds=True` installs them); a manager that exits, or is not ready within READY_BOUND_SECONDS,
stops the block with the end of its log.
"""

from __future__ import annotations

import base64
import json
import subprocess
import time
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from e2e.engine import vendor
from e2e.engine.cli import built_bin
from e2e.engine.control_plane import CLUSTER_API_USER, OPERATOR_USER, ControlPlane
from e2e.standins import https_server

READY_BOUND_SECONDS = 120
# A label value no object carries: the managers run for their webhooks have nothing to reconcile.
IDLE_WATCH_FILTER = "lab-mgmt-webhooks-only"


@dataclass(frozen=True)
class Manager:
    """One manager of the Cluster API tree, as the box runs it."""

    binary: str
    manifests: str
    """Its webhook configurations: the archive's member."""
    prefix: str
    """config/default's namePrefix, which names its webhook configurations."""
    webhook_port: int
    health_port: int
    diagnostics_port: int
    webhooks_only: bool


CORE = Manager("cluster-api-manager", "config/webhook/manifests.yaml", "capi-", 9445, 9440, 8443, webhooks_only=False)
CONTROL_PLANE = Manager(
    "kubeadm-control-plane-manager",
    "controlplane/kubeadm/config/webhook/manifests.yaml",
    "capi-kubeadm-control-plane-",
    9446,
    9441,
    8444,
    webhooks_only=True,
)
BOOTSTRAP = Manager(
    "kubeadm-bootstrap-manager",
    "bootstrap/kubeadm/config/webhook/manifests.yaml",
    "capi-kubeadm-bootstrap-",
    9447,
    9442,
    8445,
    webhooks_only=False,
)
FOR_PROVIDER = {"CoreProvider": CORE, "ControlPlaneProvider": CONTROL_PLANE, "BootstrapProvider": BOOTSTRAP}


@dataclass(frozen=True)
class ClusterApiManager:
    manager: Manager
    address: str
    log: Path
    started_seconds: float
    """From the process's start until its readyz answered 200."""
    configurations: tuple[str, ...]
    """kind/name of each webhook configuration registered for it."""
    args: tuple[str, ...]

    def log_tail(self, lines: int = 40) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])


def core(managers: Sequence[ClusterApiManager]) -> ClusterApiManager | None:
    """The core manager among `managers`, once it started."""
    return next((m for m in managers if m.manager is CORE), None)


def webhook_configurations(manager: Manager, url: str, ca_bundle: str) -> list[dict[str, Any]]:
    """`manager`'s webhook configurations as upstream ships them, each webhook calling `url` + its
    Service path, trusting `ca_bundle` (PEM in base64)."""
    configurations = []
    for document in yaml.safe_load_all(vendor.member(vendor.CLUSTER_API_ARCHIVE, manager.manifests)):
        if not document:
            continue
        document["metadata"]["name"] = manager.prefix + document["metadata"]["name"]
        for webhook in document["webhooks"]:
            service = webhook["clientConfig"]["service"]  # a KeyError if upstream ever ships a url
            webhook["clientConfig"] = {"url": url + service["path"], "caBundle": ca_bundle}
        configurations.append(document)
    return configurations


def v1beta1_requests(cluster: ControlPlane) -> dict[str, int]:
    """How many requests the API server counted for each cluster.x-k8s.io group at v1beta1 (its
    apiserver_request_total metric), by `group resource verb`; empty when none came."""
    metrics = cluster.kubectl("get", "--raw", "/metrics").stdout
    counted: dict[str, int] = {}
    for line in metrics.splitlines():
        if not line.startswith("apiserver_request_total{") or 'version="v1beta1"' not in line:
            continue
        labels = dict(part.split("=", 1) for part in line[line.index("{") + 1 : line.rindex("}")].split(","))
        group = labels.get("group", "").strip('"')
        if group.endswith("cluster.x-k8s.io"):
            key = " ".join(labels.get(name, "").strip('"') for name in ("group", "resource", "verb"))
            counted[key] = counted.get(key, 0) + int(float(line.rsplit(" ", 1)[1]))
    return counted


def _wait_ready(process: subprocess.Popen[bytes], health: str, log: Path) -> None:
    deadline = time.monotonic() + READY_BOUND_SECONDS
    while time.monotonic() < deadline:
        if process.poll() is not None:
            tail = "\n".join(log.read_text(errors="replace").splitlines()[-30:])
            raise RuntimeError(f"{log.stem} exited {process.returncode}; the end of {log}:\n{tail}")
        try:
            with urllib.request.urlopen(f"{health}/readyz", timeout=2) as response:  # noqa: S310
                if response.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"{log.stem} not ready within {READY_BOUND_SECONDS}s; its log: {log}")


@contextmanager
def running(
    cluster: ControlPlane, directory: Path, address: str, manager: Manager = CORE
) -> Iterator[ClusterApiManager]:
    """`manager` against `cluster`, at `address`, ready and its webhooks registered, for the
    block; stopped afterwards. Its certificate, log and kubeconfig's files are under `directory`."""
    bin_dir = built_bin("LAB_MGMT_CLUSTER_API_BIN", manager.binary)
    directory.mkdir(parents=True, exist_ok=True)
    service = f"{manager.prefix}webhook-service"
    key, cert = https_server.self_signed_certificate(directory, service, address, (f"{service}.svc",))
    args = (
        f"--kubeconfig={cluster.kubeconfig_of(CLUSTER_API_USER)}",
        "--leader-elect=false",
        f"--webhook-port={manager.webhook_port}",
        f"--webhook-cert-dir={directory}",
        f"--webhook-cert-name={cert.name}",
        f"--webhook-key-name={key.name}",
        f"--health-addr={address}:{manager.health_port}",
        f"--diagnostics-address={address}:{manager.diagnostics_port}",
        *((f"--watch-filter={IDLE_WATCH_FILTER}",) if manager.webhooks_only else ()),
    )
    log = directory / f"{manager.binary}.log"
    with log.open("wb") as output:
        started = time.monotonic()
        process = subprocess.Popen([str(bin_dir / manager.binary), *args], stdout=output, stderr=subprocess.STDOUT)
        try:
            _wait_ready(process, f"http://{address}:{manager.health_port}", log)
            ready = time.monotonic() - started
            bundle = base64.b64encode(cert.read_bytes()).decode()
            configurations = webhook_configurations(manager, f"https://{address}:{manager.webhook_port}", bundle)
            listed = json.dumps({"apiVersion": "v1", "kind": "List", "items": configurations})
            applied = cluster.kubectl_as(
                cluster.kubeconfig_of(OPERATOR_USER),
                *("apply", "--server-side", "--field-manager=capi-operator", "-f", "-"),
                stdin=listed,
            )
            if applied.returncode != 0:
                raise RuntimeError(f"cannot register {manager.binary}'s webhooks: {applied.stderr.strip()}")
            yield ClusterApiManager(
                manager,
                address,
                log,
                round(ready, 2),
                tuple(f"{item['kind']}/{item['metadata']['name']}" for item in configurations),
                args,
            )
        finally:
            process.terminate()
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
