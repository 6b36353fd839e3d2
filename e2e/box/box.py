"""The lab in a box, whole: the program's own `__main__.py` through the real CLI, language host and
its three provider plugins, against a box that stands in for the lab, in a network namespace:

- the Proxmox VE API stand-in at the lab's address (e2e/standins/proxmox/pve_api_standin.py),
  both tokens holding every privilege the program checks, downloading the cloud image from a
  box-local HTTPS server and telling the guests of each power change;
- VM 201 as a real host (e2e/standins/guest/guest.py) at 192.168.4.21 on bridge vmbr0, installing
  k3s from the box's releases (e2e/standins/guest/k3s_release_standin.py), whose server is a real
  control plane;
- the Helm chart repositories (e2e/standins/cluster/chart_repo_standin.py): the operator's chart
  runs a Deployment;
- the operator stand-in (e2e/standins/cluster/operator_standin.py) against the guest's API server
  once k3s is up: it marks provider CRs Ready and runs the operator's Pods;
- the operator's admission webhook server (e2e/standins/cluster/admission_webhook_standin.py),
  which the guest's API server calls for every provider CR, and cert-manager's CA injector
  (e2e/standins/cluster/cainjector_standin.py), which makes those calls possible a while after
  the operator's chart is installed.

The box is up for a `with` block (`running`): the scenarios of lifecycle.py, box_faults.py and
box_adoption.py run in it, and make_box.py keeps it up for a user (`make box`).
"""

from __future__ import annotations

import hashlib
import subprocess
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from components import credentials
from e2e.box import scenarios
from e2e.box.workload import proxmox_node
from e2e.engine import control_plane
from e2e.engine.cli import Engine, built_bin, fresh_engine
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
from e2e.standins.workload.vm_guest import WorkloadGuests

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
        (
            *credentials.PROGRAM_PRIVILEGES,
            *credentials.CAPMOX_ROOT_PRIVILEGES,
            *credentials.CAPMOX_PRIVILEGES,
            # Proxmox VE 8's name for the guest agent's privilege (the stand-in is 8.4).
            credentials.CAPMOX_GUEST_AGENT[0],
        ),
        1,
    )
}
# CAPMOX's token holds no more than what the program's check asks of it: the real CAPMOX manager
# drives the Proxmox stand-in with it, which refuses a call as Proxmox VE does without the
# privilege, so a privilege CAPMOX uses that the check does not ask for fails the box.
CAPMOX_LEAST_PRIVILEGES = {
    "/": dict.fromkeys(
        (*credentials.CAPMOX_ROOT_PRIVILEGES, *credentials.CAPMOX_PRIVILEGES, credentials.CAPMOX_GUEST_AGENT[0]), 1
    )
}
# The read-only token docs/operations.md has the owner make for the exit criteria (`pveum acl modify
# / -role PVEAuditor`): that role's privileges (pve-access-control PVE/AccessControl.pm, 8.x).
AUDITOR_TOKEN, AUDITOR_SECRET = "auditor@pve!exit-criteria", "0d9c8b7a-6f5e-4d3c-8b2a-192837465564"
AUDITOR_PRIVILEGES = {
    "/": dict.fromkeys(("Datastore.Audit", "Mapping.Audit", "Pool.Audit", "SDN.Audit", "Sys.Audit", "VM.Audit"), 1)
}


def auditor_token_file(path: Path) -> Path:
    """The auditor's token kept as docs/operations.md has the owner keep it: `user@realm!name=secret`
    in a file of mode 0600."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"{AUDITOR_TOKEN}={AUDITOR_SECRET}\n")
    path.chmod(0o600)
    return path


TOKENS = {
    (scenarios.PROGRAM_TOKEN, scenarios.PROGRAM_SECRET): ALL_PRIVILEGES,
    (AUDITOR_TOKEN, AUDITOR_SECRET): AUDITOR_PRIVILEGES,
    (scenarios.CAPMOX_TOKEN, scenarios.CAPMOX_SECRET): CAPMOX_LEAST_PRIVILEGES,
    (scenarios.CAPMOX_TOKEN, ROTATED_CAPMOX_SECRET): CAPMOX_LEAST_PRIVILEGES,
}


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


@dataclass(frozen=True)
class WorkloadParts:
    """What a box with a workload cluster adds (e2e/box/workload/lab1_box.py): charts and CAPMOX's
    release assets to serve, what starts on the management cluster once the operator stand-in
    has installed a provider's real CRDs (the Cluster API manager, for the CoreProvider), and on
    the Proxmox node the templates CAPMOX clones from and the insides of the VMs it clones, which
    pass every other VM on to the management VM's guests."""

    charts: Mapping[str, Sequence[chart_repo_standin.Chart | chart_repo_standin.VendoredChart]]
    release_assets: Mapping[str, bytes]
    on_installed: Callable[[control_plane.ControlPlane, str, str], None]
    guests: WorkloadGuests
    templates: tuple[int, ...]


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
    workload: WorkloadParts | None = None

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
            self.guests, self.site, instance, self.operating, self.webhook, workload=self.workload
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
    """Stand-in cloud images under dated serial directories, as components/settings/management.py
    wants the URL, each with different bytes; their sha256 by path."""
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
    *,
    workload: WorkloadParts | None,
) -> tuple[control_plane.ControlPlane, operator_standin.OperatorStandIn, cainjector_standin.CainjectorStandIn]:
    """The control plane of the site's VM's `instance`-th disk, and the operator stand-in (with
    the providers' real CRDs for a `workload`) and the CA injector (of `webhook`'s certificate) on it
    until `stack` closes."""
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
            real_crds=workload is not None,
            on_installed=partial(workload.on_installed, cluster) if workload else None,
        )
    )
    injector = stack.enter_context(
        cainjector_standin.running(
            cluster, {admission_webhook_standin.CERTIFICATE: webhook.certificate}, INJECT_SECONDS
        )
    )
    return cluster, operator, injector


@contextmanager
def running(
    base: Path, site: Site = SPEC_SITE, workload: WorkloadParts | None = None, *, as_shipped: bool = False
) -> Iterator[Box]:
    """The box, up for the block, with a fresh engine configured as the README's first run and
    pointed at it and at `site`; with `workload` (lab1's machinery) or `as_shipped` (a lab whose
    owner takes the entry out as docs/adoption.md says), Pulumi.lab.yaml's lab1 stays in the stack file.
    Only inside a network namespace of its own (e2e/engine/netns.py) with the Proxmox address on
    loopback."""
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
                guest=workload.guests if workload else guests,
                trusted_certificates=cert,
                node_memory=proxmox_node.NODE_MEMORY,
            )
        )
        if workload:
            workload.guests.others = guests
            proxmox_node.equip(pve, workload.guests, workload.templates)
        charts = stack.enter_context(
            chart_repo_standin.serve(
                {**_chart_repos(), **(workload.charts if workload else {})},
                base,
                workload.release_assets if workload else None,
            )
        )
        operating = stack.enter_context(ExitStack())
        cluster, operator, injector = _operated(guests, site, 0, operating, webhook, workload=workload)
        # Only the chart repositories' certificate: the program trusts the Proxmox API as the lab
        # does (proxmoxInsecure), and the stand-in, not the program, fetches the image.
        engine = fresh_engine(
            base / "engine",
            extra_env={"SSL_CERT_FILE": str(charts.certificate)},
            workload_clusters=bool(workload) or as_shipped,
        )
        steps = scenarios._readme_first_run(engine, scenarios._lab_secrets())
        served = {
            path: (f"https://127.0.0.1:{files.server_address[1]}/{path}", digest) for path, digest in digests.items()
        }
        settings = (
            ("imageUrl", served[IMAGE_PATH][0]),
            ("imageSha256", served[IMAGE_PATH][1]),
            ("certManagerChartRepo", f"{charts.url}/jetstack"),
            ("capiOperatorChartRepo", f"{charts.url}/capi-operator"),
            *site.settings(),
        )
        steps.append(scenarios._set_all(engine, settings))
        yield Box(
            engine,
            *(pve, guests, charts, releases, operator, webhook, injector, cluster, steps, served, operating, site),
            workload,
        )
