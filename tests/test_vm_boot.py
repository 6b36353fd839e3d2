"""The workload VM's boot stand-in (e2e/standins/workload/vm_boot.py) on bootstrap data laid out as
Cluster API v1.12's kubeadm bootstrap provider renders a worker's (bootstrap/kubeadm/internal/
cloudinit/node.go): cloud-init's rendering with the VM's meta-data, the one kubeadm command and its
configuration, what systemd makes of the kubelet arguments, and kubeadm join's discovery checks,
each refusal with what kubeadm or cloud-init would stop at; and the CA a workload control plane
serves from in the box, which the join's pin names (real control planes' objects, not started)."""

from __future__ import annotations

import base64
import datetime
import hashlib
import ipaddress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from e2e.engine import control_plane
from e2e.standins.workload import kubelet, vm_boot

UUID = "3f1c2a9e-7d41-4b7e-9c55-0e8f6c1d2b34"
# The NoCloud meta-data CAPMOX writes on its ISO (pkg/cloudinit/metadata.go), the keys a render reads.
META = {"instance-id": UUID, "local-hostname": "lab1-workers-x"}
TOKEN_ID, TOKEN_SECRET = "abcdef", "0123456789abcdef"
TOKEN = f"{TOKEN_ID}.{TOKEN_SECRET}"
SENTINEL = "echo success > /run/cluster-api/bootstrap-success.complete"

JOIN = """\
## template: jinja
#cloud-config

write_files:
-   path: /run/kubeadm/kubeadm-join-config.yaml
    owner: root:root
    permissions: '0640'
    content: |
      ---
      apiVersion: kubeadm.k8s.io/v1beta4
      discovery:
        bootstrapToken:
          apiServerEndpoint: 192.168.0.30:6443
          caCertHashes:
          - {pin}
          token: {token}
      kind: JoinConfiguration
      nodeRegistration:
        kubeletExtraArgs:
        - name: provider-id
          value: proxmox://'{{{{ ds.meta_data.instance_id }}}}'
        taints:
        - effect: NoSchedule
          key: node.cluster.x-k8s.io/uninitialized
-   path: /run/cluster-api/placeholder
    owner: root:root
    permissions: '0640'
    content: "This placeholder file is used to create the /run/cluster-api sub directory"
runcmd:
  - kubeadm join --config /run/kubeadm/kubeadm-join-config.yaml  && {sentinel}
users:
  - name: root
    sshAuthorizedKeys:
      - "ssh-ed25519 AAAA owner"
"""


def _lab1(where: Path, address: str = "192.168.0.30") -> tuple[control_plane.ControlPlane, x509.Certificate]:
    """lab1's control plane as discovery sees it (its endpoint and the CA it serves from, made as in
    the box), and that CA."""
    pki = control_plane.made_pki(where, address)
    return control_plane.ControlPlane(where, where, address, pki=pki), x509.load_pem_x509_certificate(
        pki.ca.read_bytes()
    )


def _pin(ca: x509.Certificate) -> str:
    spki = ca.public_key().public_bytes(Encoding.DER, PublicFormat.SubjectPublicKeyInfo)
    return "sha256:" + hashlib.sha256(spki).hexdigest()


@dataclass
class _Client:
    cluster: control_plane.ControlPlane
    secrets: dict[str, dict[str, Any]] = field(default_factory=dict)

    def get(self, resource: str, api_version: str, namespace: str, name: str) -> dict[str, Any] | None:
        assert (resource, api_version, namespace) == ("secrets", "v1", "kube-system")
        return self.secrets.get(name)


def _token_secret(held: str = TOKEN_SECRET, expires_in: float = 900, usage: str = "true") -> dict[str, Any]:
    expiration = datetime.datetime.now(datetime.UTC) + datetime.timedelta(seconds=expires_in)
    data = {
        **{"token-id": TOKEN_ID, "token-secret": held, "usage-bootstrap-authentication": usage},
        "expiration": expiration.strftime("%Y-%m-%dT%H:%M:%SZ"),
    }
    return {
        "type": vm_boot.TOKEN_TYPE,
        "data": {key: base64.b64encode(value.encode()).decode() for key, value in data.items()},
    }


def _booted(pin: str) -> vm_boot.KubeadmRun:
    return vm_boot.kubeadm_run(JOIN.format(pin=pin, token=TOKEN, sentinel=SENTINEL), META)


def test_a_worker_joins_with_the_provider_id_its_kubelet_receives_unquoted(tmp_path: Path) -> None:
    lab1, ca = _lab1(tmp_path)
    boot = _booted(_pin(ca))
    assert boot.phase == "join"
    registration = boot.configuration["nodeRegistration"]
    # After cloud-init the quotes are still in kubeadm's configuration; systemd takes them off.
    assert registration["kubeletExtraArgs"] == [{"name": "provider-id", "value": f"proxmox://'{UUID}'"}]
    vm = {"metadata": {"name": "lab1-workers-x"}, "spec": {"providerID": f"proxmox://{UUID}"}}
    node = kubelet.node_of("Machine/lab1/x", vm, registration)
    assert node["spec"]["providerID"] == f"proxmox://{UUID}"
    assert node["spec"]["taints"] == [{"effect": "NoSchedule", "key": "node.cluster.x-k8s.io/uninitialized"}]
    # The provider writes an unset list as null, which kubeadm reads as its default; [] is none.
    default = [{"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}]
    assert kubelet.node_of("x", vm, registration | {"taints": None}, default)["spec"]["taints"] == default
    assert kubelet.node_of("x", vm, registration | {"taints": []}, default)["spec"]["taints"] == []
    # Another VM's providerID: the Machine would never find this Node.
    other = {**vm, "spec": {"providerID": "proxmox://another-uuid"}}
    with pytest.raises(ValueError, match=f"would register providerID 'proxmox://{UUID}', not 'proxmox://another-uuid'"):
        kubelet.node_of("Machine/lab1/x", other, registration)
    vm_boot.discover(_Client(lab1, {"bootstrap-token-abcdef": _token_secret()}), boot.configuration)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("held", "refusal"),
    [
        ({}, "bootstrap token 'abcdef' is not one 192.168.0.30:6443 accepts"),
        ({"bootstrap-token-abcdef": _token_secret(held="ffffffffffffffff")}, "is not one"),
        ({"bootstrap-token-abcdef": _token_secret(expires_in=-5)}, "is not one"),
        ({"bootstrap-token-abcdef": _token_secret(usage="false")}, "is not one"),
    ],
)
def test_kubeadm_join_refuses_a_token_lab1_does_not_accept(tmp_path: Path, held: dict[str, Any], refusal: str) -> None:
    lab1, ca = _lab1(tmp_path)
    with pytest.raises(ValueError, match=refusal):
        vm_boot.discover(_Client(lab1, held), _booted(_pin(ca)).configuration)  # type: ignore[arg-type]


def test_kubeadm_join_refuses_a_pin_of_another_ca_and_another_endpoint(tmp_path: Path) -> None:
    held = {"bootstrap-token-abcdef": _token_secret()}
    lab1, _ = _lab1(tmp_path / "lab1")
    _, other = _lab1(tmp_path / "other")
    with pytest.raises(ValueError, match="none of the CA pins"):
        vm_boot.discover(_Client(lab1, held), _booted(_pin(other)).configuration)  # type: ignore[arg-type]
    elsewhere, ca = _lab1(tmp_path / "elsewhere", "192.168.0.31")
    with pytest.raises(ValueError, match=r"apiServerEndpoint '192.168.0.30:6443', not 192.168.0.31:6443"):
        vm_boot.discover(_Client(elsewhere, held), _booted(_pin(ca)).configuration)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("change", "refusal"),
    [
        (("ds.meta_data.instance_id", "ds.meta_data.public_keys"), r"\{\{ ds.meta_data.public_keys \}\}"),
        (("ds.meta_data.instance_id", "v1.region"), r"\{\{ v1.region \}\}"),
        (("#cloud-config\n", "#cloud-config\n# {% if x %}\n"), "jinja block"),
        (("## template: jinja\n", ""), "no jinja cloud-config"),
        (
            ("  - kubeadm join", "  - kubeadm join --config /run/kubeadm/kubeadm-join-config.yaml\n  - kubeadm join"),
            "2 kubeadm",
        ),
        (("kubeadm-join-config.yaml  &&", "other.yaml  &&"), "reads /run/kubeadm/other.yaml, which the bootstrap data"),
    ],
)
def test_what_the_vm_cannot_render_or_run_is_refused(change: tuple[str, str], refusal: str) -> None:
    value = JOIN.format(pin="sha256:00", token=TOKEN, sentinel=SENTINEL).replace(*change)
    with pytest.raises(ValueError, match=refusal):
        vm_boot.kubeadm_run(value, META)


def test_a_workload_control_plane_serves_from_the_ca_its_workers_pin(tmp_path: Path) -> None:
    """The CA made as kubeadm init makes it (control_plane.made_pki) signs the API server's
    certificate for its address, keeps its key (for `<cluster>-ca`), and is made once: a restart
    serves the same."""
    pki = control_plane.made_pki(tmp_path / "pki", "192.168.0.30")
    assert pki.ca_key is not None
    assert pki.ca_key.read_bytes().startswith(b"-----BEGIN PRIVATE KEY-----")
    ca = x509.load_pem_x509_certificate(pki.ca.read_bytes())
    serving = x509.load_pem_x509_certificate(pki.cert.read_bytes())
    serving.verify_directly_issued_by(ca)
    names = serving.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert ipaddress.ip_address("192.168.0.30") in names.get_values_for_type(x509.IPAddress)
    assert control_plane.made_pki(tmp_path / "pki", "192.168.0.30") == pki
    assert x509.load_pem_x509_certificate(pki.cert.read_bytes()) == serving
