"""The lab in a box, whole: the program's own `__main__.py` through the real CLI, language host and
its three provider plugins, against a box that stands in for the lab, in a network namespace:

- the Proxmox VE API stand-in at the lab's address (e2e/standins/proxmox/pve_api_standin.py), both tokens holding
  every privilege the program checks, downloading the cloud image from a box-local HTTPS server
  and telling the guests of each power change;
- VM 201 as a real host (e2e/standins/guest/guest.py) at 192.168.4.21 on bridge vmbr0, installing k3s from the
  box's releases (e2e/standins/guest/k3s_release_standin.py), whose server is a real control plane;
- the Helm chart repositories (e2e/standins/cluster/chart_repo_standin.py): the operator's chart runs a Deployment;
- the operator stand-in (e2e/standins/cluster/operator_standin.py) against the guest's API server once k3s is up:
  it marks provider CRs Ready and runs the operator's Pods;
- the operator's admission webhook server (e2e/standins/cluster/admission_webhook_standin.py), which the guest's
  API server calls for every provider CR, and cert-manager's CA injector
  (e2e/standins/cluster/cainjector_standin.py), which makes those calls possible a while after the operator's
  chart is installed.

`whole_box_lifecycle(root)` is the scenario that tests/test_box_whole.py and
tests/test_box_lifecycle.py read (`in_new_netns("box.whole_box_lifecycle", ...)`, run once for both):
the README's first run, `pulumi up` on the empty box, a second run that must do nothing, then a
lab's life. `python -m e2e.box.box up DIRECTORY` (`make box`) runs the same first `up` and keeps the
box up for a user until `make box-down`; `make box-shell` opens a shell inside it.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from components import credentials
from e2e.box import scenarios
from e2e.engine import control_plane
from e2e.engine.cli import REPO, Engine, EngineRun, built_bin, fresh_engine
from e2e.engine.netns import in_new_netns, netns_command
from e2e.standins import https_server
from e2e.standins.cluster import (
    admission_webhook_standin,
    cainjector_standin,
    chart_repo_standin,
    operator_standin,
    playbook_lab,
)
from e2e.standins.guest import guest, k3s_release_standin, k3s_standin
from e2e.standins.proxmox import pve_api_standin

VMID = scenarios.VMID
IMAGE_PATH = "noble/20260926/noble-server-cloudimg-amd64.img"
# A later build of the same image, under another dated serial: what a rebuild moves to.
NEXT_IMAGE_PATH = "noble/20261010/noble-server-cloudimg-amd64.img"
# The second version each stand-in serves, for the bumps docs/graph.md's table lists.
K3S_BUMP = scenarios.K3S_BUMP
CERT_MANAGER_BUMP = "v1.21.3"
CAPMOX_BUMP = scenarios.BUMPED_CAPMOX
SIZE_BUMP = "4"
# The CAPMOX token made anew in Proxmox for a rotation; the old one is removed only afterwards.
ROTATED_CAPMOX_SECRET = "5e4d3c2b-1a09-4f8e-9d7c-6b5a49382716"
OPERATOR_NAMESPACE = "capi-operator-system"
# The operator as its chart runs it: a Deployment whose Available status its Helm release waits for,
# named as chart 0.28.0's `capi-operator.fullname` names it for a release called after the chart.
OPERATOR_DEPLOYMENT = """apiVersion: apps/v1
kind: Deployment
metadata:
  name: cluster-api-operator
  namespace: {{ .Release.Namespace }}
spec:
  replicas: 1
  selector: {matchLabels: {control-plane: controller-manager}}
  template:
    metadata: {labels: {control-plane: controller-manager}}
    spec:
      containers:
      - name: manager
        image: registry.k8s.io/capi-operator/cluster-api-operator:v{{ .Chart.Version }}
"""
# The templates of the box's charts besides the stand-in's ConfigMap, by chart: the operator's
# Deployment and its webhook configurations.
CHART_TEMPLATES = {
    "cluster-api-operator": (
        OPERATOR_DEPLOYMENT,
        *admission_webhook_standin.configurations(
            f"https://{admission_webhook_standin.HOST}:{admission_webhook_standin.PORT}"
        ),
    )
}
# How long after the webhook configurations appear the injector fills them in: longer than the
# operator's release takes to be ready, so that the program's wait for the bundle really waits.
INJECT_SECONDS = 10.0
# Every privilege components/credentials.py checks, on `/`, for both tokens.
ALL_PRIVILEGES = {
    "/": dict.fromkeys(
        (*credentials.PROGRAM_PRIVILEGES, *credentials.CAPMOX_ROOT_PRIVILEGES, *credentials.CAPMOX_PRIVILEGES), 1
    )
}
TOKENS = {
    (scenarios.PROGRAM_TOKEN, scenarios.PROGRAM_SECRET): ALL_PRIVILEGES,
    (scenarios.CAPMOX_TOKEN, scenarios.CAPMOX_SECRET): ALL_PRIVILEGES,
    (scenarios.CAPMOX_TOKEN, ROTATED_CAPMOX_SECRET): ALL_PRIVILEGES,
}
K8S_WRITES = {"create", "update", "patch", "delete", "deletecollection"}
# Who writes to the guest's API server for the program: k3s's admin certificate, which the
# kubeconfig the program reads carries, as do the host scripts' `k3s kubectl`. The box's own
# upkeep (the k3s stand-in's heartbeat, the controllers, the operator stand-in) is someone else.
PROGRAM_USER = "system:admin"


@dataclass(frozen=True)
class Site:
    """Where the lab's VM lives: the spec's lab by default (Pulumi.lab.yaml); another site stands
    for a lab the playbook set up with other values, which the box's settings then point at."""

    node: str = pve_api_standin.NODE
    vmid: int = scenarios.VMID
    address: str = scenarios.VM_ADDRESS
    gateway: str = scenarios.GATEWAY
    k3s_version: str = scenarios.K3S_VERSION

    def settings(self) -> list[tuple[str, str]]:
        """The stack settings that differ from Pulumi.lab.yaml's, to point the program at this lab."""
        spec = Site()
        wanted = {
            "proxmoxNode": (self.node, spec.node),
            "vmId": (str(self.vmid), str(spec.vmid)),
            "vmAddress": (f"{self.address}/24", f"{spec.address}/24"),
            "vmGateway": (self.gateway, spec.gateway),
            "k3sVersion": (self.k3s_version, spec.k3s_version),
        }
        return [(key, value) for key, (value, default) in wanted.items() if value != default]


SPEC_SITE = Site()


@dataclass
class Box:
    engine: Engine
    pve: pve_api_standin.PveApiStandIn
    guests: guest.Guests
    charts: chart_repo_standin.ChartRepoStandIn
    releases: k3s_release_standin.K3sReleases
    operator: operator_standin.OperatorStandIn
    webhook: admission_webhook_standin.WebhookStandIn
    injector: cainjector_standin.CainjectorStandIn
    cluster: control_plane.ControlPlane
    """The guest's k3s control plane as the box reaches it: its files on the VM's disk, its API
    server at the VM's address; there once the program has installed k3s."""
    steps: list[dict[str, Any]]
    """The README's first run and the settings pointing the program at the box."""
    images: dict[str, tuple[str, str]]
    """URL and sha256 of each cloud image the box serves, by its path."""
    operating: ExitStack
    """Holds the operator and CA injector stand-ins on the current VM's control plane."""
    site: Site

    def follow_new_vm(self) -> None:
        """The VM is about to be re-created: from now on the box reaches the next VM's control
        plane, where the operator and CA injector stand-ins run instead (the old ones would only
        fail on a cluster that is going away)."""
        self._operate(len(self.guests.log_dirs(self.site.vmid)))

    @contextmanager
    def rebooting(self) -> Iterator[None]:
        """The VM reboots in the block: the operator and the CA injector, which run on its
        cluster, are down with it and run again after it."""
        self.operating.close()
        yield
        self._operate(len(self.guests.log_dirs(self.site.vmid)) - 1)

    def _operate(self, instance: int) -> None:
        """The operator and CA injector stand-ins on the `instance`-th disk's control plane from
        now on."""
        self.operating.close()
        self.cluster, self.operator, self.injector = _operated(
            self.guests, self.site, instance, self.operating, self.webhook
        )

    def guest_log(self, name: str) -> list[str]:
        """The guest's log `name` (sshd.log, installer.log) over every VM of the lab's VMID there
        has been, so that a count taken before a run that re-creates the VM still marks where the
        run began."""
        return [line for logs in self.guests.log_dirs(self.site.vmid) for line in scenarios._lines(logs / name)]

    def kubectl(self, kubeconfig: Path, *args: str) -> dict[str, Any]:
        """The real kubectl as a user runs it with a kubeconfig of the stack's."""
        kubectl = built_bin("LAB_MGMT_CONTROL_PLANE_BIN", "kubectl") / "kubectl"
        done = subprocess.run(
            [str(kubectl), f"--kubeconfig={kubeconfig}", *args],
            env={"PATH": "/usr/bin:/bin", "HOME": str(self.engine.root)},
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        return {"rc": done.returncode, "stdout": done.stdout, "stderr": done.stderr}


def _cloud_images(base: Path) -> tuple[Path, dict[str, str]]:
    """Stand-in cloud images under dated serial directories, as settings.py wants the URL, each
    with different bytes; their sha256 by path."""
    digests = {}
    for build, path in enumerate((IMAGE_PATH, NEXT_IMAGE_PATH)):
        image = base / "images" / path
        image.parent.mkdir(parents=True)
        image.write_bytes(b"QFI\xfb" + bytes([build]) + bytes(range(256)) * 4096)
        digests[path] = hashlib.sha256(image.read_bytes()).hexdigest()
    return base / "images", digests


def _chart_repos() -> dict[str, list[chart_repo_standin.Chart]]:
    operator_version = playbook_lab.PLAYBOOK_CHARTS["cluster-api-operator"][2]
    cert_manager_version = playbook_lab.PLAYBOOK_CHARTS["cert-manager"][2]
    return {
        "jetstack": [
            chart_repo_standin.Chart("cert-manager", version) for version in (cert_manager_version, CERT_MANAGER_BUMP)
        ],
        "capi-operator": [
            chart_repo_standin.Chart(
                "cluster-api-operator",
                operator_version,
                tuple(playbook_lab.provider_crd(kind) for kind in playbook_lab.PROVIDERS),
                CHART_TEMPLATES["cluster-api-operator"],
            )
        ],
    }


def _operated(
    guests: guest.Guests,
    site: Site,
    instance: int,
    stack: ExitStack,
    webhook: admission_webhook_standin.WebhookStandIn,
) -> tuple[control_plane.ControlPlane, operator_standin.OperatorStandIn, cainjector_standin.CainjectorStandIn]:
    """The control plane of the site's VM's `instance`-th disk, and the operator stand-in and the
    CA injector (of `webhook`'s certificate) on it until `stack` closes."""
    cluster = control_plane.ControlPlane(
        built_bin("LAB_MGMT_CONTROL_PLANE_BIN", "kube-apiserver"),
        guests.disk_path(site.vmid, str(k3s_standin.DATA / "box"), instance),
        site.address,
    )
    operator = stack.enter_context(
        operator_standin.running(
            cluster,
            playbook_lab.PROVIDER_RESOURCES,
            scenarios.OPERATOR_INSTALL_SECONDS,
            runs_pods_in=OPERATOR_NAMESPACE,
        )
    )
    injector = stack.enter_context(
        cainjector_standin.running(
            cluster, {admission_webhook_standin.CERTIFICATE: webhook.certificate}, INJECT_SECONDS
        )
    )
    return cluster, operator, injector


@contextmanager
def running(base: Path, site: Site = SPEC_SITE) -> Iterator[Box]:
    """The box, up for the block, with a fresh engine configured as the README's first run and
    pointed at it and at `site`. Only inside a network namespace of its own (e2e/engine/netns.py) with the
    Proxmox address on loopback."""
    guest.add_bridge("vmbr0", f"{site.gateway}/24")
    images, digests = _cloud_images(base)
    key, cert = https_server.self_signed_certificate(base, "images", "127.0.0.1")
    with ExitStack() as stack:
        releases = stack.enter_context(
            k3s_release_standin.serve(sorted({scenarios.K3S_VERSION, K3S_BUMP, site.k3s_version}), base, site.gateway)
        )
        # On the lab network, where a guest's API server reaches it by the name the chart's
        # webhook configurations call; its certificate is not among those the guests trust.
        webhook = stack.enter_context(admission_webhook_standin.serve(base, site.gateway))
        guests = stack.enter_context(
            guest.Guests(
                base / "guests",
                hosts={**releases.hosts, admission_webhook_standin.HOST: site.gateway},
                trusted=[releases.certificate],
            )
        )
        files = stack.enter_context(https_server.serving_files(images, ("127.0.0.1", 0), key, cert))
        pve = stack.enter_context(
            pve_api_standin.serve(
                TOKENS,
                base,
                (scenarios.PROXMOX_ADDRESS, scenarios.PROXMOX_PORT),
                node=site.node,
                guest=guests,
                trusted_certificates=cert,
            )
        )
        charts = stack.enter_context(chart_repo_standin.serve(_chart_repos(), base))
        operating = stack.enter_context(ExitStack())
        cluster, operator, injector = _operated(guests, site, 0, operating, webhook)
        # Only the chart repositories' certificate: the program trusts the Proxmox API as the lab
        # does (proxmoxInsecure), and the stand-in, not the program, fetches the image.
        engine = fresh_engine(base / "engine", extra_env={"SSL_CERT_FILE": str(charts.certificate)})
        steps = scenarios._readme_first_run(engine, scenarios._lab_secrets())
        served = {
            path: (f"https://127.0.0.1:{files.server_address[1]}/{path}", digest) for path, digest in digests.items()
        }
        for setting in (
            ("imageUrl", served[IMAGE_PATH][0]),
            ("imageSha256", served[IMAGE_PATH][1]),
            ("certManagerChartRepo", f"{charts.url}/jetstack"),
            ("capiOperatorChartRepo", f"{charts.url}/capi-operator"),
            *site.settings(),
        ):
            steps.append(scenarios._step(engine, ("config", "set", *setting)))
        yield Box(
            engine, pve, guests, charts, releases, operator, webhook, injector, cluster, steps, served, operating, site
        )


@dataclass(frozen=True)
class Marks:
    """Where each record stood before a run."""

    pve: int
    ssh: int
    installs: int
    audit: int

    @classmethod
    def of(cls, box: Box) -> Marks:
        return cls(
            len(box.pve.calls),
            len(box.guest_log("sshd.log")),
            len(box.guest_log("installer.log")),
            len(box.cluster.audit()),
        )


def _observed(box: Box, action: str, *args: str) -> dict[str, Any]:
    """One `pulumi preview` or `up` with its wall time, and what it made the box do: SSH sessions
    on the guest, Proxmox VE writes, and the program's Kubernetes writes."""
    marks = Marks.of(box)
    started = time.monotonic()
    run: EngineRun = box.engine.run(action, *args)
    seconds = time.monotonic() - started
    ssh = box.guest_log("sshd.log")[marks.ssh :]
    return {
        "rc": run.rc,
        "output": run.output,
        "seconds": round(seconds, 1),
        "steps": run.steps(),
        "summary": run.summary(),
        "warnings": run.diagnostics("warning"),
        "ssh_connections": [line for line in ssh if "Connection from" in line],
        "ssh_sessions": [line for line in ssh if "Accepted publickey" in line],
        "installs": box.guest_log("installer.log")[marks.installs :],
        "pve_writes": [
            [call.method, call.path, list(call.params)]
            for call in box.pve.calls[marks.pve :]
            if call.method in pve_api_standin.WRITES
        ],
        "k8s_writes": [
            [event["verb"], event.get("objectRef", {}).get("resource", ""), event.get("objectRef", {}).get("name", "")]
            for event in box.cluster.audit()[marks.audit :]
            if event["verb"] in K8S_WRITES
            and event.get("user", {}).get("username") == PROGRAM_USER
            # A preview's server-side dry runs change nothing.
            and "dryRun=All" not in event.get("requestURI", "")
        ],
    }


def _saved_kubeconfigs(box: Box, outputs: dict[str, Any]) -> tuple[Path, Path]:
    """The admin and read-only kubeconfigs as a user saves them from the stack's outputs."""
    admin, readonly = box.engine.root / "lab-mgmt.yaml", box.engine.root / "lab-mgmt-readonly.yaml"
    for path, output in ((admin, "kubeconfig"), (readonly, "readonlyKubeconfig")):
        path.write_text(outputs[output])
        path.chmod(0o600)
    return admin, readonly


def _kubeconfig_use(box: Box, outputs: dict[str, Any]) -> dict[str, Any]:
    """The stack's kubeconfigs as a user saves and uses them: the admin's lists namespaces; the
    read-only one lists pods but may neither read Secrets nor delete."""
    admin, readonly = _saved_kubeconfigs(box, outputs)
    return {
        "namespaces": box.kubectl(admin, "get", "namespaces", "-o", "name"),
        "readonly_pods": box.kubectl(readonly, "get", "pods", "-A", "-o", "name"),
        "readonly_can_get_secrets": box.kubectl(readonly, "auth", "can-i", "get", "secrets", "-A"),
        "readonly_can_delete_namespaces": box.kubectl(readonly, "auth", "can-i", "delete", "namespaces"),
        "readonly_can_delete_pods": box.kubectl(readonly, "auth", "can-i", "delete", "pods", "-A"),
    }


# What each stand-in could not answer or do, by the key a scenario reports it under; each must be
# empty.
STANDIN_RECORDS: dict[str, Callable[[Box], list[str]]] = {
    "pve_unknown": lambda box: box.pve.unknown,
    "chart_unknown": lambda box: box.charts.unknown,
    "release_unknown": lambda box: box.releases.unknown,
    "operator_errors": lambda box: box.operator.errors,
    "webhook_unknown": lambda box: box.webhook.unknown,
    "injector_errors": lambda box: box.injector.errors,
}


def _standins(box: Box) -> dict[str, Any]:
    return {key: record(box) for key, record in STANDIN_RECORDS.items()}


def _admission(box: Box) -> list[dict[str, Any]]:
    """From the API server's audit log, in order: the CA injector's and the program's writes to
    the webhook configurations and to provider CRs (server-side apply creates one by a patch
    answered 201), each with when it was received and answered (RFC 3339 to the microsecond, so
    they compare as text) and how."""
    resources = {*cainjector_standin.KINDS.values(), *(f"{kind.lower()}s" for kind in playbook_lab.PROVIDERS)}
    found = []
    for event in box.cluster.audit():
        ref, user = event.get("objectRef", {}), event.get("user", {}).get("username")
        if (
            user in {control_plane.INJECTOR_USER, PROGRAM_USER}
            and ref.get("resource") in resources
            and event["verb"] in K8S_WRITES
        ):
            found.append(
                {
                    "user": user,
                    "verb": event["verb"],
                    "resource": ref["resource"],
                    "name": ref.get("name", ""),
                    "dry_run": "dryRun=All" in event.get("requestURI", ""),
                    "received": event["requestReceivedTimestamp"],
                    "answered": event["stageTimestamp"],
                    "code": event.get("responseStatus", {}).get("code"),
                }
            )
    return found


def _installed(box: Box) -> dict[str, Any]:
    """The README's first run, `pulumi up` of the whole program on the empty box, the stack's
    kubeconfigs used, then `pulumi preview --expect-no-changes` and a second `pulumi up`."""
    first = _observed(box, "up")
    admission = _admission(box)
    outputs = box.engine.outputs() if first["rc"] == 0 else {}
    use = _kubeconfig_use(box, outputs) if outputs else {}
    no_changes = _observed(box, "preview", "--expect-no-changes")
    second = _observed(box, "up")
    return {
        "steps": box.steps,
        "first_up": first,
        "outputs": {key: value for key, value in outputs.items() if "ubeconfig" not in key},
        "secret_outputs": box.engine.secret_outputs() if outputs else [],
        "kubeconfig_use": use,
        "no_changes_preview": no_changes,
        "second_up": second,
        # As they are now: a scenario that goes on (whole_box_lifecycle) adds to the live ones.
        "pods_run": list(box.operator.pods_run),
        "providers_reconciled": [f"{entry['kind']}/{entry['name']}" for entry in box.operator.reconciled],
        "admission": admission,
        "webhook_reviews": list(box.webhook.reviews),
        "injected": list(box.injector.injected),
    }


def _change(
    box: Box,
    settings: tuple[tuple[str, str], ...],
    *,
    secrets: tuple[tuple[str, str], ...] = (),
    before_up: Callable[[], None] | None = None,
) -> dict[str, Any]:
    """A change as docs/operations.md makes one: the config set, `pulumi preview` to see what it
    touches, `pulumi up`, and the zero-change preview again."""
    steps = [scenarios._step(box.engine, ("config", "set", *setting)) for setting in settings]
    steps += [scenarios._step(box.engine, ("config", "set", "--secret", key), stdin=value) for key, value in secrets]
    preview = _observed(box, "preview")
    if before_up is not None:
        before_up()
    up = _observed(box, "up")
    return {
        "steps": steps,
        "preview": preview,
        "up": up,
        "no_changes_preview": _observed(box, "preview", "--expect-no-changes"),
    }


def _node_versions(box: Box) -> dict[str, Any]:
    """kubectl with the admin kubeconfig the stack outputs now: each Node's reported version."""
    admin, _ = _saved_kubeconfigs(box, box.engine.outputs())
    return box.kubectl(admin, "get", "nodes", "-o", "jsonpath={.items[*].status.nodeInfo.kubeletVersion}")


def _capmox_config(box: Box) -> dict[str, Any]:
    """The CAPMOX config Secrets there are and the one the InfrastructureProvider points at."""
    admin, _ = _saved_kubeconfigs(box, box.engine.outputs())
    secrets = box.kubectl(admin, "get", "secrets", "-n", "capmox-system", "-o", "name")
    provider = box.kubectl(
        admin,
        "get",
        "infrastructureprovider",
        "proxmox",
        "-n",
        "capmox-system",
        "-o",
        "jsonpath={.spec.configSecret.name}",
    )
    return {
        "secrets": sorted(secrets["stdout"].split()),
        "config_secret": provider["stdout"],
        "errors": [done["stderr"] for done in (secrets, provider) if done["rc"] != 0],
    }


def _reconciled_since(box: Box, count: int) -> list[str]:
    return [f"{entry['kind']}/{entry['name']}@{entry['version']}" for entry in box.operator.reconciled[count:]]


def _k3s_bump(box: Box) -> dict[str, Any]:
    return {**_change(box, (("k3sVersion", K3S_BUMP),)), "node_versions": _node_versions(box)}


def _bumps(box: Box) -> dict[str, Any]:
    """docs/graph.md's bumps, one at a time: k3s, the cert-manager chart, the CAPMOX provider,
    the CAPMOX token rotated, and the VM's size."""
    result: dict[str, Any] = {"k3s": _k3s_bump(box)}
    result["cert_manager"] = _change(box, (("certManagerVersion", CERT_MANAGER_BUMP),))
    reconciled = len(box.operator.reconciled)
    result["capmox"] = _change(box, (("capmoxVersion", CAPMOX_BUMP),))
    result["capmox"]["reconciled"] = _reconciled_since(box, reconciled)
    result["capmox"]["provider_versions"] = box.engine.outputs()["providerVersions"]
    before = _capmox_config(box)
    result["capmox_token"] = _change(box, (), secrets=(("capmoxTokenSecret", ROTATED_CAPMOX_SECRET),))
    result["capmox_token"]["config_before"] = before
    result["capmox_token"]["config_after"] = _capmox_config(box)
    result["size"] = _change(box, (("vmCores", SIZE_BUMP),))
    return result


def _pinned_host_key(box: Box) -> str:
    """The host key the stack recorded at first contact (mgmt-host-ready's output), which every
    later host step pins."""
    done = box.engine.pulumi("stack", "export", "--stack", "lab", "--show-secrets")
    done.check_returncode()
    for resource in json.loads(done.stdout)["deployment"]["resources"]:
        if resource["urn"].endswith("::mgmt-host-ready"):
            stdout = resource["outputs"]["stdout"]
            # A secret output is kept as its plaintext's JSON.
            return str(json.loads(stdout["plaintext"]) if isinstance(stdout, dict) else stdout).strip()
    raise LookupError("no mgmt-host-ready in the stack")


def _guest_host_key(box: Box) -> str:
    """The ed25519 host key VM 201's sshd serves now, as its disk holds it (type and key)."""
    instance = len(box.guests.log_dirs(VMID)) - 1
    key = box.guests.disk_path(VMID, "/etc/ssh/ssh_host_ed25519_key.pub", instance).read_text()
    return " ".join(key.split()[:2])


def _rebuild(box: Box) -> dict[str, Any]:
    """docs/operations.md's "Rebuilding the VM from a new image": the locks lifted alone, the new
    image with the rebuild allowed, then locked again."""
    result: dict[str, Any] = {"host_key_before": _guest_host_key(box), "pinned_before": _pinned_host_key(box)}
    result["unlock"] = _change(box, (("vmProtected", "false"),))
    url, digest = box.images[NEXT_IMAGE_PATH]
    result["rebuild"] = _change(
        box,
        (("imageUrl", url), ("imageSha256", digest), ("vmRebuildFromImage", "true")),
        before_up=box.follow_new_vm,
    )
    result["host_key_after"] = _guest_host_key(box)
    result["pinned_after"] = _pinned_host_key(box)
    outputs = box.engine.outputs()
    result["kubeconfig_use"] = _kubeconfig_use(box, outputs)
    result["vm_protected_output"] = outputs["vmProtected"]
    result["pods_run"] = box.operator.pods_run
    result["providers_reconciled"] = _reconciled_since(box, 0)
    result["lock"] = _change(box, (("vmRebuildFromImage", "false"), ("vmProtected", "true")))
    return result


def whole_box_k3s_bump(root: str) -> dict[str, Any]:
    """`make bench`'s: the first run, the no-op second one and a k3s bump."""
    with running(Path(root)) as box:
        result = _installed(box)
        if result["second_up"]["rc"] == 0:
            result["k3s_bump"] = _k3s_bump(box)
        return {**result, **_standins(box)}


def whole_box_lifecycle(root: str) -> dict[str, Any]:
    """The first run and the no-op second one (`_installed`), then the bumps, a rebuild from a
    new image, and a `pulumi destroy` that the locks refuse."""
    with running(Path(root)) as box:
        result = _installed(box)
        if result["second_up"]["rc"] == 0:
            result["bumps"] = _bumps(box)
            result["rebuild"] = _rebuild(box)
            result["destroy"] = _observed(box, "destroy")
            result["vm_running_after_destroy"] = box.guests.running(VMID)
        return {**result, **_standins(box)}


# `make box`: the box in a network namespace of its own, detached, until `make box-down`.
PID_FILE = "box.pid"
LOG_FILE = "box.log"
SHELL_RC = "shell.rc"
READY_MARK = "lab-mgmt-box: ready"
FAILED_MARK = "lab-mgmt-box: failed"


def shell_rc(env: dict[str, str], path: list[Path], kubeconfig: Path, project: Path) -> str:
    """What `make box-shell` runs before its prompt: the box engine's CLI with its state, plugins
    and passphrase (`env`), `path` before the user's PATH (the CLI, kubectl), the admin
    kubeconfig, and the project the box deployed as the working directory."""
    # The chart stand-in's certificate too, which the kubernetes plugin must trust to read the
    # releases' charts.
    names = ("PULUMI_HOME", "PULUMI_BACKEND_URL", "PULUMI_CONFIG_PASSPHRASE", "PULUMI_SKIP_UPDATE_CHECK")
    exports = {name: env[name] for name in (*names, "SSL_CERT_FILE") if name in env} | {"KUBECONFIG": str(kubeconfig)}
    return "\n".join(
        [
            "[ -f ~/.bashrc ] && . ~/.bashrc",
            *(f"export {name}={shlex.quote(value)}" for name, value in exports.items()),
            f'export PATH={shlex.quote(os.pathsep.join(map(str, path)))}:"$PATH"',
            f"cd {shlex.quote(str(project))}",
            'PS1="(lab-mgmt box) ${PS1:-\\$ }"',
            "",
        ]
    )


def _usage(box: Box, first: dict[str, Any], outputs: dict[str, Any]) -> str:
    engine = box.engine
    kubeconfig = engine.root / "lab-mgmt.yaml"
    kubeconfig.write_text(outputs["kubeconfig"])
    kubeconfig.chmod(0o600)
    kubectl = built_bin("LAB_MGMT_CONTROL_PLANE_BIN", "kubectl")
    rc = shell_rc(engine.env(), [engine.bin_dir, kubectl], kubeconfig, engine.project)
    (engine.root.parent / SHELL_RC).write_text(rc)
    shown = {key: value for key, value in outputs.items() if "ubeconfig" not in key}
    return "\n".join(
        [
            f"pulumi up of the whole program: rc {first['rc']} in {first['seconds']}s, {first['summary']}",
            f"outputs (kubeconfigs left out): {json.dumps(shown)}",
            f"admin kubeconfig: {kubeconfig}",
            "The box's addresses exist only inside it. make box-shell opens a shell there, with KUBECONFIG,",
            "the CLI's state and PATH set; try: kubectl get nodes, pulumi preview --expect-no-changes.",
            "make box-down stops it.",
        ]
    )


def _serve(root: str) -> None:
    """Inside the box's network namespace: the box, the first `up`, then up until SIGTERM."""

    def down(_signum: int, _frame: object) -> None:
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, down)
    with running(Path(root)) as box:
        first = _observed(box, "up")
        if first["rc"] != 0:
            print(first["output"][-8000:], f"\n{FAILED_MARK}", flush=True)
            return
        print(_usage(box, first, box.engine.outputs()), f"\n{READY_MARK}", flush=True)
        signal.pause()


def _up(root: Path) -> int:
    """Starts the box detached and follows its log until the first `up` has finished."""
    if root.exists():
        print(f"{root} exists: a box is up there, or was left; `make box-down` removes it", file=sys.stderr)
        return 1
    root.mkdir(parents=True)
    with (root / LOG_FILE).open("wb") as log:
        process = subprocess.Popen(
            netns_command(
                [sys.executable, "-m", "e2e.box.box", "--serve", str(root / "box")], [scenarios.PROXMOX_ADDRESS]
            ),
            cwd=REPO,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    (root / PID_FILE).write_text(f"{process.pid}\n")
    print(f"the box is starting (log: {root / LOG_FILE}); the first pulumi up takes a few minutes", flush=True)
    while process.poll() is None:
        text = (root / LOG_FILE).read_text()
        if READY_MARK in text or FAILED_MARK in text:
            break
        time.sleep(2)
    text = (root / LOG_FILE).read_text()
    print(text.split("lab-mgmt-box:")[0][-8000:])
    return 0 if READY_MARK in text else 1


def _shell(root: Path) -> int:
    """`make box-shell`: an interactive shell in the running box's network namespace, set up by the
    `shell_rc` that the box wrote once ready. It replaces this process, so Ctrl-C reaches the shell."""
    rc, pid_file = root / "box" / SHELL_RC, root / PID_FILE
    pid = int(pid_file.read_text()) if pid_file.exists() else 0
    if not (rc.exists() and pid and Path(f"/proc/{pid}/ns/net").exists()):
        print(f"no box ready at {root}: run `make box` first", file=sys.stderr)
        return 1
    # A box started by a user other than root runs in a user namespace of its own (e2e/engine/netns.py).
    own_user = os.readlink(f"/proc/{pid}/ns/user") != os.readlink("/proc/self/ns/user")
    enter = ["nsenter", f"--target={pid}", "--net", *(["--user"] if own_user else [])]
    os.execvp(enter[0], [*enter, "--", "bash", "--rcfile", str(rc), "-i"])  # noqa: S606 - argv, no shell
    return 1


def _down(root: Path) -> int:
    pid_file = root / PID_FILE
    if not pid_file.exists():
        print(f"no box at {root}")
        return 0
    pid = int(pid_file.read_text())
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            os.kill(pid, 0)
            time.sleep(1)
        print(f"box process {pid} still running after 120s", file=sys.stderr)
        return 1
    shutil.rmtree(root)
    print(f"box at {root} stopped and removed")
    return 0


def _what_it_did(name: str, run: dict[str, Any]) -> str:
    return (
        f"{name}: rc {run['rc']}, {run['seconds']}s, {len(run['ssh_sessions'])} SSH sessions, "
        f"{len(run['pve_writes'])} Proxmox VE writes, {len(run['k8s_writes'])} Kubernetes writes"
    )


def _bench(root: Path) -> int:
    """The tests' first run, no-op run and k3s bump, their numbers printed."""
    result = in_new_netns("box.whole_box_k3s_bump", str(root), addresses=[scenarios.PROXMOX_ADDRESS], timeout=1800)
    first, second = result["first_up"], result["second_up"]
    print(f"first pulumi up: rc {first['rc']}, {first['seconds']}s, {first['summary']}")
    print(_what_it_did("no-op pulumi up", second))
    runs = [first, second]
    if "k3s_bump" in result:
        bump = result["k3s_bump"]["up"]
        print(_what_it_did(f"k3s bump to {K3S_BUMP}, pulumi up", bump), f"({len(bump['installs'])} installer runs)")
        runs.append(bump)
    return 0 if len(runs) == 3 and all(run["rc"] == 0 for run in runs) else 1


if __name__ == "__main__":
    command, directory = sys.argv[1], sys.argv[2]
    if command == "--serve":
        _serve(directory)
    else:
        actions = {"up": _up, "shell": _shell, "down": _down, "bench": _bench}
        sys.exit(actions[command](Path(directory).resolve()))
