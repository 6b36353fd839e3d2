"""How the box runs a provider's real controller-runtime manager, where cluster-api-operator would
deploy it for the provider's CR (upstream's config/manager/manager.yaml):

- as a process in the test's network namespace, with a kubeconfig and a token of its own
  (`control_plane.CLUSTER_API_USER`), so the audit log tells its writes from everyone else's;
- its webhook server on `address` at a port of its own (9443, where controller-runtime puts it, for
  CAPMOX's, whose main has no flag for it) with a throwaway serving certificate made as the box's
  HTTPS stand-ins make theirs (e2e/standins/https_server.py), its health and diagnostics endpoints
  on `address`, leader election off; its environment as the operator fills it in;
- once it is ready, the webhook configurations upstream ships (its `config/webhook/manifests.yaml`,
  read at run time, named with the prefix of its config/default) are registered with each
  webhook's Service rewritten to a `url:` at the manager's address, and the certificate as
  caBundle: the box's API server reaches no Service. They are written under the operator
  stand-in's identity, as cluster-api-operator installs a provider's components.

The CRDs' conversion webhooks are not registered: the CRDs as the operator stand-in installs them
(e2e/standins/cluster/provider_crds.py) carry no conversion section, so the API server serves an
older version by relabelling the stored one (strategy None). That holds only while nothing
requests an older version (cluster_api.v1beta1_requests tells a test whether anything did).

A manager needs the CRDs of the kinds it watches before it starts (the operator stand-in with
`real_crds=True` installs them); a manager that exits, or is not ready within READY_BOUND_SECONDS,
stops the block with the end of its log.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from e2e.engine.cli import built_bin
from e2e.engine.control_plane import CLUSTER_API_USER, OPERATOR_USER, ControlPlane, stop, until_ready
from e2e.standins import https_server

READY_BOUND_SECONDS = 120


@dataclass(frozen=True)
class Manager:
    """One provider's manager, as the box runs it."""

    binary: str
    bin_variable: str
    """build-engine.sh's variable that names the directory `binary` is in."""
    manifests: Callable[[], str]
    """Its webhook configurations as upstream ships them (YAML)."""
    prefix: str
    """config/default's namePrefix, which names its webhook configurations."""
    webhook_port: int
    health_port: int
    diagnostics_port: int
    health_flag: str
    """Its main's flag for the health endpoint's address."""
    watch_filter: str | None = None
    """A `--watch-filter` value; one no object carries keeps its controllers idle (webhooks only)."""
    webhook_flags: bool = True
    """Whether its main takes the webhook server's port and certificate as flags. CAPMOX's does
    not: controller-runtime's defaults hold, its `webhook_port` (9443) on every address and the
    certificate as tls.crt and tls.key in $TMPDIR/k8s-webhook-server/serving-certs."""
    environment: Callable[[ControlPlane], dict[str, str]] | None = None
    """Its container's environment as the operator fills it in from the cluster (CAPMOX's
    credentials, from the provider CR's configSecret)."""


@dataclass(frozen=True)
class RunningManager:
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


def webhook_configurations(manager: Manager, url: str, ca_bundle: str) -> list[dict[str, Any]]:
    """`manager`'s webhook configurations as upstream ships them, each webhook calling `url` + its
    Service path, trusting `ca_bundle` (PEM in base64)."""
    configurations = []
    for document in yaml.safe_load_all(manager.manifests()):
        if not document:
            continue
        document["metadata"]["name"] = manager.prefix + document["metadata"]["name"]
        for webhook in document["webhooks"]:
            service = webhook["clientConfig"]["service"]  # a KeyError if upstream ever ships a url
            webhook["clientConfig"] = {"url": url + service["path"], "caBundle": ca_bundle}
        configurations.append(document)
    return configurations


def _wait_ready(process: subprocess.Popen[bytes], health: str, log: Path) -> None:
    def exited() -> str | None:
        if process.poll() is None:
            return None
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-30:])
        return f"{log.stem} exited {process.returncode}; the end of {log}:\n{tail}"

    until_ready(
        f"{health}/readyz", exited, what=f"{log.stem} (its log: {log})", bound=READY_BOUND_SECONDS, interval=0.2
    )


@contextmanager
def running(cluster: ControlPlane, directory: Path, address: str, manager: Manager) -> Iterator[RunningManager]:
    """`manager` against `cluster`, at `address`, ready and its webhooks registered, for the
    block; stopped afterwards. Its certificate, log and kubeconfig's files are under `directory`."""
    bin_dir = built_bin(manager.bin_variable, manager.binary)
    directory.mkdir(parents=True, exist_ok=True)
    service = f"{manager.prefix}webhook-service"
    environment = dict(manager.environment(cluster)) if manager.environment else {}
    webhook_args: tuple[str, ...] = ()
    if manager.webhook_flags:
        key, cert = https_server.self_signed_certificate(directory, service, address, (f"{service}.svc",))
        webhook_args = (
            *(f"--webhook-port={manager.webhook_port}", f"--webhook-cert-dir={directory}"),
            *(f"--webhook-cert-name={cert.name}", f"--webhook-key-name={key.name}"),
        )
    else:
        environment["TMPDIR"] = str(directory)
        defaults = directory / "k8s-webhook-server" / "serving-certs"
        defaults.mkdir(parents=True, exist_ok=True)
        made = https_server.self_signed_certificate(defaults, service, address, (f"{service}.svc",))
        key, cert = made[0].rename(defaults / "tls.key"), made[1].rename(defaults / "tls.crt")
    args = (
        f"--kubeconfig={cluster.kubeconfig_of(CLUSTER_API_USER)}",
        "--leader-elect=false",
        *webhook_args,
        f"{manager.health_flag}={address}:{manager.health_port}",
        f"--diagnostics-address={address}:{manager.diagnostics_port}",
        *((f"--watch-filter={manager.watch_filter}",) if manager.watch_filter else ()),
    )
    log = directory / f"{manager.binary}.log"
    with log.open("wb") as output:
        started = time.monotonic()
        process = subprocess.Popen(
            [str(bin_dir / manager.binary), *args],
            stdout=output,
            stderr=subprocess.STDOUT,
            env={**os.environ, **environment} if environment else None,
        )
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
            yield RunningManager(
                manager,
                address,
                log,
                round(ready, 2),
                tuple(f"{item['kind']}/{item['metadata']['name']}" for item in configurations),
                args,
            )
        finally:
            stop(process)
