"""What the box reads out of the upstream archives at run time (e2e/engine/vendor.py): checked
against the digests build-engine.sh checks, each provider's CRDs with the labels upstream's
kustomization adds (e2e/standins/cluster/provider_crds.py), and Cluster API's webhook
configurations pointed at a URL (e2e/controllers/cluster_api.py). Reads ../shared/vendor."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from e2e.controllers import cluster_api, deployed
from e2e.controllers.manager import Manager, webhook_configurations
from e2e.engine import vendor
from e2e.standins.cluster import admission_webhook_standin, provider_crds

REPO = Path(__file__).resolve().parent.parent
CONTRACT = "cluster.x-k8s.io/v1beta2"


def test_build_engine_reads_the_same_digests() -> None:
    script = (REPO / "e2e/engine/build-engine.sh").read_text()
    assert "e2e/engine/vendor-archives.sha256" in script
    assert re.findall(r"\b[0-9a-f]{64}\b", script) == []
    assert vendor.digests()[vendor.CAPMOX_ARCHIVE] == "6e8f6bbe5f4eb0a3fb6c11da7778dcb875db7f4a559600e3ff5378d596eda475"


def test_the_ipam_version_is_the_one_build_engine_builds() -> None:
    script = (REPO / "e2e/engine/build-engine.sh").read_text()
    assert f"\nIPAM_VERSION={vendor.IPAM_VERSION.removeprefix('v')}\n" in script


def test_an_archive_that_is_not_the_pinned_one_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LAB_MGMT_VENDOR", str(tmp_path))
    with pytest.raises(vendor.VendorError, match=re.escape(f"missing {vendor.CAPMOX_ARCHIVE}: put it in {tmp_path}")):
        vendor.members(vendor.CAPMOX_ARCHIVE, "config/crd/bases/")
    (tmp_path / vendor.CLUSTER_API_ARCHIVE).write_bytes(b"tampered")
    with pytest.raises(vendor.VendorError, match=r"has sha256 [0-9a-f]{64}, expected 07180f6b"):
        vendor.members(vendor.CLUSTER_API_ARCHIVE, "config/crd/bases/")


def test_each_provider_gets_its_crds_with_upstream_contract_labels() -> None:
    found = {key: provider_crds.crds(*key) for key in provider_crds.SOURCES}
    assert [len(crds) for crds in found.values()] == [13, 2, 2, 4]
    contracts = {key: {crd["metadata"].get("labels", {}).get(CONTRACT) for crd in crds} for key, crds in found.items()}
    assert contracts == {
        ("CoreProvider", "cluster-api"): {None},
        ("BootstrapProvider", "kubeadm"): {"v1beta2"},
        ("ControlPlaneProvider", "kubeadm"): {"v1beta2"},
        ("InfrastructureProvider", "proxmox"): {"v1alpha2"},
    }
    with pytest.raises(KeyError):
        provider_crds.crds("InfrastructureProvider", "docker")


@pytest.mark.parametrize(
    ("manager", "webhook"),
    [
        (cluster_api.CORE, "default.machinedeployment.cluster.x-k8s.io"),
        (cluster_api.CONTROL_PLANE, "default.kubeadmcontrolplane.controlplane.cluster.x-k8s.io"),
        (cluster_api.BOOTSTRAP, "default.kubeadmconfigtemplate.bootstrap.cluster.x-k8s.io"),
    ],
    ids=lambda value: getattr(value, "binary", ""),
)
def test_the_webhooks_are_called_at_a_url_with_a_ca_bundle(manager: Manager, webhook: str) -> None:
    url = f"https://192.168.4.21:{manager.webhook_port}"
    configurations = webhook_configurations(manager, url, "QUJD")
    names = [c["metadata"]["name"] for c in configurations]
    assert names == [
        f"{manager.prefix}mutating-webhook-configuration",
        f"{manager.prefix}validating-webhook-configuration",
    ]
    webhooks = [webhook for c in configurations for webhook in c["webhooks"]]
    assert webhook in {webhook["name"] for webhook in webhooks}
    for found in webhooks:
        assert set(found["clientConfig"]) == {"url", "caBundle"}
        assert found["clientConfig"]["url"].startswith(f"{url}/")


def test_each_manager_has_ports_of_its_own() -> None:
    ports = [
        port
        for manager in deployed.FOR_PROVIDER.values()
        for port in (manager.webhook_port, manager.health_port, manager.diagnostics_port)
    ]
    assert len(set(ports)) == len(ports)
    assert admission_webhook_standin.PORT not in ports
