"""The lab as the Ansible playbook left it, in the whole box (box.py), for box_adoption.py to
adopt: the VM made on the node as `qm create`/`qm resize`/`qm start` leave it (not through the
API, so the Proxmox VE stand-in recorded none of it), running as a guest; on it qemu-guest-agent,
/etc/rancher/k3s/config.yaml as an Ansible template renders it (a header comment, other
indentation and quoting, the same meaning), k3s at the stack's k3sVersion from the release's
installer, and on its API server what e2e/standins/cluster/playbook_lab.py lays out (the
HelmCharts and their manifest files, the provider objects, capmox-variables, the inspector's
capi-readonly); the HelmCharts installed as the owner's k3s installed them, by its real
helm-controller and its Jobs (e2e/box/management/k3s_charts.py), which run on beside the guest's
k3s for the box's life, rather than inside it: a restart of k3s leaves them running.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any
from urllib.parse import quote

from e2e.box import box, scenarios
from e2e.box.management import handover, k3s_charts
from e2e.controllers import helm_controller
from e2e.standins.cluster import playbook_lab

# The image the playbook's get_url left on the node (the spec), which `qm create` imported.
PLAYBOOK_IMAGE = "local:iso/noble-server-cloudimg-amd64.img"
PLAYBOOK_IMAGE_SIZE = 3 << 30
MANIFESTS = "/var/lib/rancher/k3s/server/manifests"
# The VM's name in the spec's `qm create` line, which cloud-init makes its host name: the node k3s
# registers, where the install Jobs' pods run.
PLAYBOOK_VM_NAME = "lab-mgmt"


def _placed_on_the_guest(lab: box.Box, folder: Path) -> None:
    """The playbook's manifests copied into the guest's manifests folder, where its k3s's deploy
    controller applies them within its 15 s (e2e/standins/guest/k3s_deploy.py)."""
    for manifest in sorted(folder.iterdir()):
        _on_guest(
            lab, f"sudo install -d {MANIFESTS} && sudo tee {MANIFESTS}/{manifest.name} >/dev/null", manifest.read_text()
        )


def ansible_config(address: str) -> str:
    """/etc/rancher/k3s/config.yaml as the playbook's Ansible template rendered it: the settings
    the program writes (components.k3s_node.render_k3s_config), written another way."""
    return f"""# Ansible managed: templates/k3s-config.yaml.j2 modified on 2026-03-14 09:12:40 by owner on laptop
write-kubeconfig-mode: '0600'
tls-san:
    - "{address}"
disable:
""" + "".join(f"    - {name}\n" for name in playbook_lab.K3S_DISABLES)


def _qm_create(public_key: str, site: box.Site) -> dict[str, str]:
    """The spec's `qm create 201 ...` line, at `site`, as its options reach Proxmox VE (net0's bare
    `virtio` is the `model` property, which Proxmox gives a MAC)."""
    return {
        "name": PLAYBOOK_VM_NAME,
        "cores": "2",
        "memory": "4096",
        "net0": "model=virtio,bridge=vmbr0,tag=4",
        "scsihw": "virtio-scsi-pci",
        "scsi0": f"local-lvm:0,import-from={PLAYBOOK_IMAGE}",
        "ide2": "local-lvm:cloudinit",
        "boot": "order=scsi0",
        "serial0": "socket",
        "vga": "serial0",
        "agent": "1",
        "ciuser": "ubuntu",
        "sshkeys": quote(public_key + "\n", safe=""),
        "ipconfig0": f"ip={site.address}/24,gw={site.gateway}",
        "nameserver": "8.8.8.8 2.2.2.2",
    }


def _key(lab: box.Box) -> Path:
    """The owner's key (the README's first run made it): the one the playbook's VM authorises."""
    return lab.engine.root / ".ssh" / "id_ed25519"


def _on_guest(lab: box.Box, command: str, stdin: str | None = None, *, booting: bool = False) -> dict[str, Any]:
    """One command over SSH, as Ansible or the owner runs it; a failure raises."""
    done = scenarios._ssh(_key(lab), None, command, booting=booting, stdin=stdin, address=lab.site.address)
    if done["rc"] != 0:
        raise RuntimeError(f"on the guest: {command}: rc {done['rc']}: {done['stderr']}")
    return done


def _wait_for_api_server(lab: box.Box, bound: float = 180) -> None:
    deadline = time.monotonic() + bound
    while True:
        if lab.cluster.kubeconfig.exists():
            ready = lab.cluster.kubectl_as(lab.cluster.kubeconfig, "get", "--raw", "/readyz")
            if ready.returncode == 0:
                return
        if time.monotonic() > deadline:
            raise RuntimeError(f"the guest's k3s did not answer within {bound}s")
        time.sleep(2)


def playbook_left(lab: box.Box, base: Path) -> k3s_charts.K3sCharts:
    """The lab as the playbook left it (the spec's "What the playbook left on the running lab"),
    made by k3s's helm-controller and its Jobs, with the operator's and the CA injector's stand-ins;
    helm-controller and what runs its Jobs go on for the box's life."""
    public_key = _key(lab).with_suffix(".pub").read_text().strip()
    image = {"content": "iso", "format": "raw", "size": PLAYBOOK_IMAGE_SIZE}
    lab.pve.made_on_node(lab.site.vmid, _qm_create(public_key, lab.site), {PLAYBOOK_IMAGE: image})
    _on_guest(lab, "cloud-init status --wait >/dev/null; true", booting=True)
    _on_guest(
        lab,
        "sudo apt-get -q update && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -q qemu-guest-agent"
        " && sudo systemctl start qemu-guest-agent",
    )
    _on_guest(
        lab,
        "sudo install -d -m 0755 /etc/rancher/k3s && sudo tee /etc/rancher/k3s/config.yaml >/dev/null"
        " && sudo chmod 0600 /etc/rancher/k3s/config.yaml",
        stdin=ansible_config(lab.site.address),
    )
    version = lab.site.k3s_version
    _on_guest(
        lab,
        f"curl -sSfL -o /tmp/install.sh https://raw.githubusercontent.com/k3s-io/k3s/{version.replace('+', '%2B')}"
        f"/install.sh && sudo env INSTALL_K3S_VERSION={version} sh /tmp/install.sh",
    )
    _wait_for_api_server(lab)
    manifests = base / "playbook-manifests"
    machinery = lab.operating.enter_context(
        k3s_charts.serving(lab.cluster, base, box.CHART_TEMPLATES, node=PLAYBOOK_VM_NAME)
    )
    lab.operating.enter_context(helm_controller.running(lab.cluster, base / "helm-controller"))
    playbook_lab.lay_out(
        lab.cluster,
        manifests,
        handover._playbook_capmox_data(),
        k3s=lambda folder: _placed_on_the_guest(lab, folder),
        installed=lambda: machinery.until_installed(playbook_lab.HANDED_OVER),
    )
    lab.cluster.kubectl(
        *("wait", "--for=condition=Ready", ",".join(playbook_lab.PROVIDER_RESOURCES), "--all", "-A"),
        "--timeout=120s",
        timeout=150,
    )
    lab.cluster.kubectl(
        *("wait", "--for=condition=Available", "deployment", "--all", "-n", box.OPERATOR_NAMESPACE),
        "--timeout=120s",
        timeout=150,
    )
    return machinery
