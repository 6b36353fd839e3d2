"""The real Cluster API core manager (`cluster-api-manager` v1.12.11, built by
`e2e/engine/build-engine.sh workload` from the archive's root main.go; its directory in
LAB_MGMT_CLUSTER_API_BIN) running against a box's management API server
(e2e/engine/control_plane.py): the Cluster, MachineDeployment, MachineSet and Machine controllers
and the webhooks (defaulting and validation; replicas are defaulted there) of upstream, unchanged.

How the box starts it, where upstream's Deployment would (config/manager/manager.yaml):

- as a process in the test's network namespace, with a kubeconfig and a token of its own
  (`control_plane.CLUSTER_API_USER`), so the audit log tells its writes from everyone else's;
- its webhook server on `address`:WEBHOOK_PORT (not 9443: the operator's webhook stand-in may hold
  it) with a throwaway serving certificate made as the box's HTTPS stand-ins make theirs
  (e2e/standins/https_server.py), its health and diagnostics endpoints on `address`, leader
  election off;
- once it is ready, the webhook configurations upstream ships (`config/webhook/manifests.yaml` in
  the archive, read at run time, named with the `capi-` prefix of config/default) are registered
  with each webhook's Service rewritten to a `url:` at the manager's address, and the certificate
  as caBundle: the box's API server reaches no Service. They are written under the operator
  stand-in's identity, as cluster-api-operator installs a provider's components.

The CRDs' conversion webhooks are not registered: the CRDs as the operator stand-in installs them
(`config/crd/bases`, e2e/standins/cluster/provider_crds.py) carry no conversion section, so the API
server serves v1beta1 by relabelling v1beta2 (strategy None). That holds only while nothing
requests v1beta1: `v1beta1_requests` tells a test whether anything did.

The manager needs the CRDs of the kinds it watches before it starts (the operator stand-in with
`real_crds=True` installs them); a manager that exits, or is not ready within READY_BOUND_SECONDS,
stops the block with the end of its log.
"""

from __future__ import annotations

import base64
import json
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from e2e.engine import vendor
from e2e.engine.cli import built_bin
from e2e.engine.control_plane import CLUSTER_API_USER, OPERATOR_USER, ControlPlane
from e2e.standins import https_server

WEBHOOK_PORT = 9445
HEALTH_PORT = 9440
DIAGNOSTICS_PORT = 8443
READY_BOUND_SECONDS = 120
# config/default/kustomization.yaml's namePrefix, which names the Service the certificate is for.
NAME_PREFIX = "capi-"
SERVICE_HOST = f"{NAME_PREFIX}webhook-service.capi-system.svc"
WEBHOOK_MANIFESTS = "config/webhook/manifests.yaml"


@dataclass(frozen=True)
class ClusterApiManager:
    address: str
    log: Path
    started_seconds: float
    """From the process's start until its readyz answered 200."""
    configurations: tuple[str, ...]
    """kind/name of each webhook configuration registered for it."""
    args: tuple[str, ...]

    def log_tail(self, lines: int = 40) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])


def webhook_configurations(url: str, ca_bundle: str) -> list[dict[str, Any]]:
    """Upstream's webhook configurations, each webhook calling `url` + its Service path, trusting
    `ca_bundle` (PEM in base64)."""
    configurations = []
    for document in yaml.safe_load_all(vendor.member(vendor.CLUSTER_API_ARCHIVE, WEBHOOK_MANIFESTS)):
        if not document:
            continue
        document["metadata"]["name"] = NAME_PREFIX + document["metadata"]["name"]
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
            raise RuntimeError(f"cluster-api-manager exited {process.returncode}; the end of {log}:\n{tail}")
        try:
            with urllib.request.urlopen(f"{health}/readyz", timeout=2) as response:  # noqa: S310
                if response.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"cluster-api-manager not ready within {READY_BOUND_SECONDS}s; its log: {log}")


@contextmanager
def running(cluster: ControlPlane, directory: Path, address: str) -> Iterator[ClusterApiManager]:
    """The manager against `cluster`, at `address`, ready and its webhooks registered, for the
    block; stopped afterwards. Its certificate, log and kubeconfig's files are under `directory`."""
    bin_dir = built_bin("LAB_MGMT_CLUSTER_API_BIN", "cluster-api-manager")
    directory.mkdir(parents=True, exist_ok=True)
    key, cert = https_server.self_signed_certificate(directory, "capi-webhook-service", address, (SERVICE_HOST,))
    args = (
        f"--kubeconfig={cluster.kubeconfig_of(CLUSTER_API_USER)}",
        "--leader-elect=false",
        f"--webhook-port={WEBHOOK_PORT}",
        f"--webhook-cert-dir={directory}",
        f"--webhook-cert-name={cert.name}",
        f"--webhook-key-name={key.name}",
        f"--health-addr={address}:{HEALTH_PORT}",
        f"--diagnostics-address={address}:{DIAGNOSTICS_PORT}",
    )
    log = directory / "cluster-api-manager.log"
    with log.open("wb") as output:
        started = time.monotonic()
        process = subprocess.Popen(
            [str(bin_dir / "cluster-api-manager"), *args], stdout=output, stderr=subprocess.STDOUT
        )
        try:
            _wait_ready(process, f"http://{address}:{HEALTH_PORT}", log)
            ready = time.monotonic() - started
            bundle = base64.b64encode(cert.read_bytes()).decode()
            configurations = webhook_configurations(f"https://{address}:{WEBHOOK_PORT}", bundle)
            listed = json.dumps({"apiVersion": "v1", "kind": "List", "items": configurations})
            applied = cluster.kubectl_as(
                cluster.kubeconfig_of(OPERATOR_USER),
                *("apply", "--server-side", "--field-manager=capi-operator", "-f", "-"),
                stdin=listed,
            )
            if applied.returncode != 0:
                raise RuntimeError(f"cannot register Cluster API's webhooks: {applied.stderr.strip()}")
            yield ClusterApiManager(
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
