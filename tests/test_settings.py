"""The stack config is read once, validated up front, and turned into immutable typed settings.

A bad value must stop the whole program before any resource is registered, with one line per
problem that names the config key (`lab-mgmt:<key>: <what is wrong>`).
"""

from __future__ import annotations

import base64
import dataclasses
import ipaddress
import re
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import harness
import pytest

from components.settings import (
    DEFAULTS,
    KEYS,
    SECRET_KEYS,
    ProviderVersions,
    Settings,
    SettingsError,
    config_value,
    parse_settings,
)

PREFIX = f"{harness.PROJECT}:"
STACK_TYPE = "pulumi:pulumi:Stack"
IMAGE_URL = "https://cloud-images.ubuntu.com/noble/20260926/noble-server-cloudimg-amd64.img"
SHA = "6a81c37564db9b1ee84e141922625e1d7c5b389b99bb3c572e0243607d5bb4d2"


def lab_raw(**overrides: str) -> dict[str, str]:
    """The lab stack's config as parse_settings takes it: keys without the project prefix."""
    raw = {key.removeprefix(PREFIX): value for key, value in harness.stack_config().items()}
    raw.update(overrides)
    return raw


def problems(error: BaseException) -> list[str]:
    """The problem lines of a SettingsError's message (the first line is a heading)."""
    lines = [line.strip() for line in str(error).splitlines()[1:]]
    assert lines, f"no problem listed in {str(error)!r}"
    assert all(line.startswith(PREFIX) for line in lines), lines
    return lines


def failing_run(
    overrides: Mapping[str, Any], unset: tuple[str, ...] = ()
) -> tuple[pytest.ExceptionInfo[SettingsError], harness.Run]:
    """Runs the whole program, which must raise SettingsError; returns the error and the Run that
    recorded every resource registered before it."""
    run = harness.Run()
    with pytest.raises(SettingsError) as error:
        harness.run_program(overrides=overrides, unset=unset, record=run)
    return error, run


def registered_by_program(run: harness.Run) -> set[tuple[str, str]]:
    """What the program registered: every recorded resource but the stack the runtime registers
    before the program starts."""
    return run.names() - {(STACK_TYPE, f"{harness.PROJECT}-{harness.STACK}")}


def test_recording_sees_the_resources_of_a_good_run() -> None:
    """Guards the checks below: an empty recording means nothing registered, not a blind recorder."""
    recorded = harness.Run()
    returned = harness.run_program(record=recorded)
    assert returned is recorded
    assert (STACK_TYPE, f"{harness.PROJECT}-{harness.STACK}") in returned.names()
    assert registered_by_program(returned)


BAD_INPUTS: list[Any] = [
    pytest.param({}, ("proxmoxNode",), "proxmoxNode", "is required but not set", id="missing-proxmoxNode"),
    pytest.param(
        {},
        ("proxmoxApiTokenSecret",),
        "proxmoxApiTokenSecret",
        "is required but not set",
        id="missing-proxmoxApiTokenSecret",
    ),
    pytest.param({"vmId": 99}, (), "vmId", "99 is outside the Proxmox VMID range 100..999999999", id="vmId-99"),
    pytest.param(
        {"vmId": 1_000_000_000},
        (),
        "vmId",
        "1000000000 is outside the Proxmox VMID range 100..999999999",
        id="vmId-too-big",
    ),
    pytest.param({"vmId": "abc"}, (), "vmId", "'abc' is not a whole number", id="vmId-abc"),
    pytest.param({"vmAddress": "192.168.4.21"}, (), "vmAddress", "no prefix length", id="vmAddress-no-prefix"),
    pytest.param(
        {"vmAddress": "192.168.4.300/24"},
        (),
        "vmAddress",
        "is not an IPv4 address with a prefix length",
        id="vmAddress-octet-300",
    ),
    pytest.param(
        {"vmAddress": "not-an-ip/24"},
        (),
        "vmAddress",
        "is not an IPv4 address with a prefix length",
        id="vmAddress-text",
    ),
    pytest.param(
        {"vmGateway": "192.168.5.1"},
        (),
        "vmGateway",
        "192.168.5.1 is outside the VM's subnet 192.168.4.0/24",
        id="vmGateway-other-subnet",
    ),
    pytest.param(
        {"vmDnsServers": "8.8.8.8, 2.2.2.2"},
        (),
        "vmDnsServers",
        "is not a list of strings",
        id="vmDnsServers-one-string",
    ),
    pytest.param(
        {"vmDnsServers": ["8.8.8.8", "dns.google"]},
        (),
        "vmDnsServers",
        "'dns.google' is not an IP address",
        id="vmDnsServers-hostname",
    ),
    pytest.param(
        {"imageUrl": IMAGE_URL.replace("https://", "http://")},
        (),
        "imageUrl",
        "is not an https:// URL",
        id="imageUrl-http",
    ),
    pytest.param(
        {"imageUrl": IMAGE_URL.replace("20260926", "current")},
        (),
        "imageUrl",
        "names no dated serial (e.g. .../noble/20260926/...); pin one, never `current`",
        id="imageUrl-current",
    ),
    pytest.param(
        {"imageUrl": "https://cloud-images.ubuntu.com/noble/2026/noble-server-cloudimg-amd64.img"},
        (),
        "imageUrl",
        "names no dated serial",
        id="imageUrl-year-only",
    ),
    pytest.param(
        {"imageUrl": "https://cloud-images.ubuntu.com/noble/20261340/noble-server-cloudimg-amd64.img"},
        (),
        "imageUrl",
        "names no dated serial",
        id="imageUrl-no-such-date",
    ),
    pytest.param({"imageSha256": SHA[:8]}, (), "imageSha256", "is not a sha256 digest", id="imageSha256-short"),
    pytest.param({"imageSha256": SHA.upper()}, (), "imageSha256", "is not a sha256 digest", id="imageSha256-uppercase"),
    pytest.param({"imageSha256": "z" * 64}, (), "imageSha256", "is not a sha256 digest", id="imageSha256-nonhex"),
    pytest.param({"imageSha256": SHA[:63]}, (), "imageSha256", "is not a sha256 digest", id="imageSha256-63-chars"),
    pytest.param({"k3sVersion": ""}, (), "k3sVersion", "is required but not set", id="k3sVersion-empty"),
    pytest.param({"k3sVersion": "latest"}, (), "k3sVersion", "'latest' floats", id="k3sVersion-latest"),
    pytest.param(
        {"k3sVersion": "v1.35.8"},
        (),
        "k3sVersion",
        "'v1.35.8' is not a release of the form v1.35.8+k3s1",
        id="k3sVersion-no-k3s-suffix",
    ),
    pytest.param(
        {"certManagerVersion": "1.21.2"},
        (),
        "certManagerVersion",
        "'1.21.2' is not a release of the form v1.21.2",
        id="certManagerVersion-no-v",
    ),
    pytest.param(
        {"capiOperatorVersion": "v0.28.0"},
        (),
        "capiOperatorVersion",
        "'v0.28.0' is not a release of the form 0.28.0",
        id="capiOperatorVersion-with-v",
    ),
    pytest.param({"capiCoreVersion": "latest"}, (), "capiCoreVersion", "'latest' floats", id="capiCoreVersion-latest"),
    pytest.param(
        {"capmoxVersion": "0.9.1"},
        (),
        "capmoxVersion",
        "'0.9.1' is not a release of the form v0.9.1",
        id="capmoxVersion-no-v",
    ),
    pytest.param({"vmCores": 0}, (), "vmCores", "0 is outside the cores range 1..64", id="vmCores-0"),
    pytest.param({"vmCores": -1}, (), "vmCores", "-1 is outside the cores range 1..64", id="vmCores-negative"),
    pytest.param({"vmCores": 1000}, (), "vmCores", "1000 is outside the cores range 1..64", id="vmCores-1000"),
    pytest.param(
        {"vmMemoryMib": 0}, (), "vmMemoryMib", "0 is outside the memory MiB range 1024..262144", id="vmMemoryMib-0"
    ),
    pytest.param(
        {"vmMemoryMib": 10_000_000},
        (),
        "vmMemoryMib",
        "10000000 is outside the memory MiB range 1024..262144",
        id="vmMemoryMib-too-big",
    ),
    pytest.param({"vmDiskGib": 0}, (), "vmDiskGib", "0 is outside the disk GiB range 10..4096", id="vmDiskGib-0"),
    pytest.param({"vmDiskGib": "30G"}, (), "vmDiskGib", "'30G' is not a whole number", id="vmDiskGib-unit"),
    pytest.param(
        {"vmDiskGib": 100_000},
        (),
        "vmDiskGib",
        "100000 is outside the disk GiB range 10..4096",
        id="vmDiskGib-too-big",
    ),
    pytest.param(
        {"proxmoxEndpoint": "http://192.168.0.8:8006/"},
        (),
        "proxmoxEndpoint",
        "is not an https:// URL",
        id="proxmoxEndpoint-http",
    ),
    pytest.param(
        {"proxmoxEndpoint": "192.168.0.8:8006"},
        (),
        "proxmoxEndpoint",
        "is not an https:// URL",
        id="proxmoxEndpoint-no-scheme",
    ),
    pytest.param({"vmVlanTag": 5000}, (), "vmVlanTag", "'5000' is not a VLAN id 1..4094", id="vmVlanTag-5000"),
    pytest.param(
        {"sshPublicKeys": ["not a key"]},
        (),
        "sshPublicKeys",
        "'not a key' is not an OpenSSH public key line",
        id="sshPublicKeys-garbage",
    ),
    pytest.param(
        {"proxmoxApiTokenId": "root@pam"},
        (),
        "proxmoxApiTokenId",
        "is not an API token id of the form user@realm!tokenname",
        id="proxmoxApiTokenId-no-token-name",
    ),
    pytest.param(
        {"vmRebuildFromImage": True, "vmProtected": True, "workloadClusters": []},
        (),
        "vmRebuildFromImage",
        "needs vmProtected=false",
        id="rebuild-while-protected",
    ),
    pytest.param(
        {"kubeconfigPath": "kube.yaml"}, (), "kubeconfigPath", "is not an absolute path", id="kubeconfigPath-relative"
    ),
    pytest.param(
        {"kubeconfigPath": str(harness.REPO / "kube.yaml")},
        (),
        "kubeconfigPath",
        "is inside this repository",
        id="kubeconfigPath-in-repo",
    ),
    pytest.param(
        {"workloadClusters": ["default/lab1"]},
        (),
        "workloadClusters[0]",
        "names a cluster only; declare the cluster as an object",
        id="workloadClusters-string-entry",
    ),
    pytest.param(
        {"workloadClusters": "lab1"},
        (),
        "workloadClusters",
        "is not a list of clusters, each an object",
        id="workloadClusters-not-a-list",
    ),
    pytest.param(
        {"clusterAutoscalerImageTag": "v1.35.0"},
        (),
        "clusterAutoscalerImageTag",
        "kubernetes/autoscaler#9439",
        id="clusterAutoscalerImageTag-v1.35.0",
    ),
    pytest.param({"vmVlanTag": "\u00b2"}, (), "vmVlanTag", "is not a VLAN id", id="vmVlanTag-superscript-digit"),
    pytest.param(
        {"kubeconfigPath": "~nosuchuser-lab-mgmt/kube.yaml"},
        (),
        "kubeconfigPath",
        "home directory of an unknown user",
        id="kubeconfigPath-unknown-user",
    ),
    pytest.param({"vmGateway": "192.168.4.21"}, (), "vmGateway", "is the VM's own address", id="vmGateway-own-address"),
    pytest.param(
        {"providerReadyTimeoutMinutes": 0},
        (),
        "providerReadyTimeoutMinutes",
        "0 is outside the minutes range 1..240",
        id="providerReadyTimeoutMinutes-0",
    ),
    pytest.param(
        {"providerReadyTimeoutMinutes": 241},
        (),
        "providerReadyTimeoutMinutes",
        "241 is outside the minutes range 1..240",
        id="providerReadyTimeoutMinutes-too-big",
    ),
    pytest.param(
        {"providerReadyTimeoutMinutes": "15m"},
        (),
        "providerReadyTimeoutMinutes",
        "'15m' is not a whole number",
        id="providerReadyTimeoutMinutes-unit",
    ),
    pytest.param(
        {"operatorWebhookTimeoutMinutes": 61},
        (),
        "operatorWebhookTimeoutMinutes",
        "61 is outside the minutes range 1..60",
        id="operatorWebhookTimeoutMinutes-too-big",
    ),
    pytest.param(
        {"sshDialAttempts": 4},
        (),
        "sshDialAttempts",
        "4 is outside the dial attempts range 5..1000",
        id="sshDialAttempts-too-few",
    ),
]


@pytest.mark.parametrize(("overrides", "unset", "key", "fragment"), BAD_INPUTS)
def test_bad_input_stops_the_program_before_any_resource(
    overrides: dict[str, Any], unset: tuple[str, ...], key: str, fragment: str
) -> None:
    error, run = failing_run(overrides, unset)
    [line] = problems(error.value)
    assert line.startswith(f"{PREFIX}{key}: "), line
    assert fragment in line, line
    assert registered_by_program(run) == set()
    assert any(entry.name == "load_settings" for entry in error.traceback)


def test_every_problem_is_reported_at_once() -> None:
    overrides = {
        "vmId": 99,
        "vmCores": 0,
        "vmAddress": "192.168.4.21",
        "imageSha256": SHA[:63],
        "k3sVersion": "latest",
        "capmoxVersion": "0.9.1",
        "workloadClusters": ["lab1"],
    }
    error, run = failing_run(overrides, unset=("proxmoxNode",))
    lines = problems(error.value)
    # A workload cluster's problem names its entry (`workloadClusters[0]`).
    keys = sorted(re.split(r"[:\[]", line.removeprefix(PREFIX), maxsplit=1)[0] for line in lines)
    assert keys == sorted([*overrides, "proxmoxNode"])
    assert registered_by_program(run) == set()


def test_problems_at_once_through_parse_settings() -> None:
    raw = lab_raw(vmGateway="192.168.5.1", vmDiskGib="30G", proxmoxEndpoint="http://192.168.0.8:8006/")
    del raw["capmoxTokenSecret"]
    with pytest.raises(SettingsError) as error:
        parse_settings(raw)
    assert problems(error.value) == [
        "lab-mgmt:proxmoxEndpoint: 'http://192.168.0.8:8006/' is not an https:// URL",
        "lab-mgmt:vmDiskGib: '30G' is not a whole number",
        "lab-mgmt:vmGateway: 192.168.5.1 is outside the VM's subnet 192.168.4.0/24",
        "lab-mgmt:capmoxTokenSecret: is required but not set",
    ]


@pytest.fixture
def lab() -> Settings:
    return parse_settings(lab_raw())


def test_lab_vm(lab: Settings) -> None:
    vm = lab.vm
    assert vm.vm_id == 201
    assert vm.name == "lab-mgmt"
    assert vm.cores == 2
    assert vm.memory_mib == 4096
    assert vm.disk_gib == 30
    assert vm.bridge == "vmbr0"
    assert vm.vlan_tag == 4
    assert vm.address == ipaddress.IPv4Interface("192.168.4.21/24")
    assert str(vm.address) == "192.168.4.21/24"
    assert vm.gateway == ipaddress.IPv4Address("192.168.4.8")
    assert vm.dns_servers == ("8.8.8.8", "2.2.2.2")
    assert vm.disk_storage == "local-lvm"
    assert vm.protected is True
    assert vm.rebuild_from_image is False
    assert vm.ci_user == "ubuntu"
    assert len(vm.ssh_public_keys) == 1
    assert vm.ssh_public_keys[0].startswith("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5")


def test_lab_proxmox_and_image(lab: Settings) -> None:
    assert lab.proxmox.endpoint == "https://192.168.0.8:8006/"
    assert lab.proxmox.insecure is True
    assert lab.proxmox.api_token_id == "pulumi@pve!lab-mgmt"
    assert lab.proxmox.node == "pv1-1"
    assert lab.image.url == IMAGE_URL
    assert lab.image.sha256 == SHA
    assert lab.image.storage == "local"
    assert lab.image.file_name.endswith(".qcow2")
    assert "20260926" in lab.image.file_name


@pytest.mark.parametrize(
    ("url", "file_name"),
    [
        (IMAGE_URL, "noble-server-cloudimg-amd64-20260926.qcow2"),
        (
            "https://cloud-images.ubuntu.com/releases/noble/release-20260926/ubuntu-24.04-server-cloudimg-amd64.img",
            "ubuntu-24.04-server-cloudimg-amd64-20260926.qcow2",
        ),
        (IMAGE_URL.replace("20260926", "20260926.1"), "noble-server-cloudimg-amd64-20260926.1.qcow2"),
    ],
    ids=["daily", "release", "respin"],
)
def test_every_dated_serial_form_is_accepted_and_names_the_file(url: str, file_name: str) -> None:
    assert parse_settings(lab_raw(imageUrl=url)).image.file_name == file_name


def test_image_file_name_follows_the_serial() -> None:
    other = parse_settings(lab_raw(imageUrl=IMAGE_URL.replace("20260926", "20261010")))
    assert "20261010" in other.image.file_name
    assert other.image.file_name != parse_settings(lab_raw()).image.file_name


def test_lab_versions(lab: Settings) -> None:
    assert lab.k3s.version == "v1.35.8+k3s1"
    assert lab.k3s.kubeconfig_path is None
    capi = lab.cluster_api
    assert capi.cert_manager_version == "v1.21.2"
    assert capi.operator_version == "0.28.0"
    assert capi.providers == ProviderVersions(
        core="v1.12.11",
        bootstrap="v1.12.11",
        control_plane="v1.12.11",
        infrastructure="v0.9.1",
        ipam="v1.1.1",
    )
    assert capi.capmox_token_id == "capmox@pve!capi"
    assert lab.access.readonly_token_generation == 1
    workload = lab.workload
    assert (workload.cilium_version, workload.autoscaler_chart_version, workload.autoscaler_image_tag) == (
        "1.19.8",
        "9.59.0",
        "v1.35.2",
    )
    assert workload.capmox_release_url == (
        "https://github.com/ionos-cloud/cluster-api-provider-proxmox/releases/download"
    )
    assert workload.control_plane_timeout_minutes == 30


def test_each_provider_cr_is_waited_on_for_15_minutes_unless_set() -> None:
    lab = lab_raw()
    del lab["providerReadyTimeoutMinutes"]
    assert parse_settings(lab).cluster_api.provider_ready_timeout_minutes == 15
    assert parse_settings(lab_raw(providerReadyTimeoutMinutes="1")).cluster_api.provider_ready_timeout_minutes == 1


def test_the_bounds_a_slow_lab_may_need_keep_their_defaults_unless_set() -> None:
    lab = parse_settings(lab_raw())
    assert lab.cluster_api.operator_webhook_timeout_minutes == 5
    assert lab.k3s.ssh_dial_attempts == 60
    custom = parse_settings(lab_raw(operatorWebhookTimeoutMinutes="1", sshDialAttempts="12"))
    assert custom.cluster_api.operator_webhook_timeout_minutes == 1
    assert custom.k3s.ssh_dial_attempts == 12


def test_kubeconfig_path_outside_the_repo_is_kept(tmp_path: Path) -> None:
    path = tmp_path / "lab-mgmt.yaml"
    assert not path.resolve().is_relative_to(harness.REPO)
    assert parse_settings(lab_raw(kubeconfigPath=str(path))).k3s.kubeconfig_path == path


@pytest.mark.parametrize("version", ["v1.36.0+k3s1", "v2.0.0+k3s1"])
def test_k3s_past_the_kubernetes_cluster_api_supports_is_refused(version: str) -> None:
    """k3s would upgrade the node and leave Cluster API's controllers on a Kubernetes they do not
    support; the order check (k3s_node) lets v1.36 through after v1.35."""
    with pytest.raises(SettingsError) as error:
        parse_settings(lab_raw(k3sVersion=version))
    assert problems(error.value) == [
        f"lab-mgmt:k3sVersion: {version} is newer than Kubernetes 1.35, the newest that Cluster API v1.12 "
        "(capiCoreVersion) supports for the management cluster it runs on: a newer k3s minor waits for a Cluster API "
        "bump (docs/versions.md)"
    ]
    assert parse_settings(lab_raw(k3sVersion="v1.35.20+k3s2")).k3s.version == "v1.35.20+k3s2"


def _ssh_keygen(directory: Path, passphrase: str, *options: str) -> str:
    key = directory / f"id_{len(list(directory.iterdir()))}"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", passphrase, "-f", str(key), *options], check=True)
    return key.read_text()


ENCRYPTED_KEY = (
    "lab-mgmt:sshPrivateKey: is encrypted with a passphrase, which the host steps cannot type: take it out "
    "(pulumi config rm sshPrivateKey) and load the key into your ssh-agent with ssh-add, which every host step uses "
    '(docs/operations.md, "On a Mac")'
)


def test_a_key_with_a_passphrase_is_refused_at_preview_naming_the_way_out(tmp_path: Path) -> None:
    """`pulumi config set --secret sshPrivateKey < ~/.ssh/id_ed25519` (the README's first run) with
    the Mac's usual key: the host steps would fail at the first of them, in `up`."""
    with pytest.raises(SettingsError) as error:
        parse_settings(lab_raw(sshPrivateKey=_ssh_keygen(tmp_path, "pass")))
    assert problems(error.value) == [ENCRYPTED_KEY]
    assert parse_settings(lab_raw(sshPrivateKey=_ssh_keygen(tmp_path, ""))).k3s.ssh_private_key is not None


def _openssh_key(cipher: str) -> str:
    """The start of an OpenSSH private key's binary (PROTOCOL.key), armoured: the cipher's name."""
    blob = b"openssh-key-v1\0" + len(cipher).to_bytes(4, "big") + cipher.encode() + b"\0\0\0\x04none"
    armoured = base64.b64encode(blob).decode()
    return f"-----BEGIN OPENSSH PRIVATE KEY-----\n{armoured}\n-----END OPENSSH PRIVATE KEY-----\n"


PEM_ENCRYPTED = (
    "-----BEGIN RSA PRIVATE KEY-----\nProc-Type: 4,ENCRYPTED\n"
    "DEK-Info: AES-128-CBC,00112233445566778899AABBCCDDEEFF\n\nZHVtbXk=\n-----END RSA PRIVATE KEY-----\n"
)


@pytest.mark.parametrize(
    "key",
    [
        _openssh_key("aes256-ctr"),
        _openssh_key("chacha20-poly1305@openssh.com"),
        PEM_ENCRYPTED,
        "-----BEGIN ENCRYPTED PRIVATE KEY-----\nZHVtbXk=\n-----END ENCRYPTED PRIVATE KEY-----\n",
    ],
    ids=["openssh-aes256-ctr", "openssh-chacha20", "pem-proc-type", "pkcs8"],
)
def test_every_form_of_an_encrypted_key_is_refused(key: str) -> None:
    with pytest.raises(SettingsError) as error:
        parse_settings(lab_raw(sshPrivateKey=key))
    assert problems(error.value) == [ENCRYPTED_KEY]


def test_a_key_without_a_passphrase_is_taken() -> None:
    assert parse_settings(lab_raw(sshPrivateKey=_openssh_key("none"))).k3s.ssh_private_key == _openssh_key("none")


def test_settings_are_immutable(lab: Settings) -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        lab.vm.cores = 4  # type: ignore[misc]
    parts: list[Any] = [
        lab,
        lab.proxmox,
        lab.vm,
        lab.image,
        lab.k3s,
        lab.cluster_api,
        lab.cluster_api.providers,
        lab.access,
        lab.workload,
        lab.workload.clusters[0],
        lab.workload.clusters[0].workers,
    ]
    for part in parts:
        for field in dataclasses.fields(part):
            with pytest.raises(dataclasses.FrozenInstanceError):
                setattr(part, field.name, None)
    assert lab.vm.cores == 2
    assert isinstance(lab.vm.dns_servers, tuple)
    assert isinstance(lab.vm.ssh_public_keys, tuple)


def test_settings_never_print_a_secret(lab: Settings) -> None:
    text = repr(lab)
    for key in SECRET_KEYS:
        assert harness.DUMMY_SECRETS[key].strip() not in text, key
    assert "pulumi@pve!lab-mgmt" in text  # the repr itself is still there to read


class _ReadKeys(dict[str, str]):
    """Raw config that records every key the readers ask for."""

    def __init__(self, raw: Mapping[str, str]) -> None:
        super().__init__(raw)
        self.read: set[str] = set()

    def get(self, key: str, default: Any = None) -> Any:
        self.read.add(key)
        return super().get(key, default)


def test_the_readers_read_exactly_the_keys_pulumi_yaml_declares() -> None:
    """Pulumi.yaml is where a setting is declared (its type, default, secrecy and description);
    KEYS, SECRET_KEYS and DEFAULTS come from it. A reader of an undeclared key, or a declared key
    nobody reads, fails here."""
    raw = _ReadKeys(lab_raw())
    parse_settings(raw)
    assert sorted(raw.read) == sorted(KEYS)


def test_pulumi_yaml_defaults_stand_in_for_unset_keys_as_the_cli_gives_them() -> None:
    lab = lab_raw()
    unset = {key for key, value in DEFAULTS.items() if lab[key] == config_value(value)}
    assert unset >= {"kubeconfigPath", "capmoxExistingSecret", "ciliumChartRepo"}
    assert parse_settings({key: value for key, value in lab.items() if key not in unset}) == parse_settings(lab)


def test_the_secret_keys_are_the_ones_the_readme_sets_as_secrets() -> None:
    readme = (harness.REPO / "README.md").read_text()
    assert set(re.findall(r"pulumi config set --secret ([a-z]\w*)", readme)) == set(SECRET_KEYS)
    assert set(harness.DUMMY_SECRETS) == set(SECRET_KEYS)


def test_leaving_the_cluster_objects_out_needs_adoption() -> None:
    """Only the first adoption run leaves the cluster's objects out; a lab the program manages
    never drops them, so the key is refused up front, naming the fix."""
    assert parse_settings(lab_raw()).adopt_cluster_objects is True
    with pytest.raises(SettingsError) as refused:
        parse_settings(lab_raw(adoptClusterObjects="false"))
    assert problems(refused.value) == [
        "lab-mgmt:adoptClusterObjects: false needs adopt=true (the first adoption run, docs/adoption.md step 4); "
        "set it back to true (pulumi config rm adoptClusterObjects)"
    ]
    first_run = lab_raw(adopt="true", capmoxExistingSecret="capmox-variables", adoptClusterObjects="false")
    assert parse_settings(first_run).adopt_cluster_objects is False


# --- workload clusters ---------------------------------------------------------------------------


def lab1_raw(**changes: Any) -> dict[str, str]:
    """The lab's config with lab1's entry changed (a None value removes the key)."""
    [lab1] = harness.stack_workload_clusters()
    lab1.update(changes)
    return lab_raw(workloadClusters=config_value([{k: v for k, v in lab1.items() if v is not None}]))


def test_lab1_is_read_with_the_templates_defaults(lab: Settings) -> None:
    [lab1] = lab.workload.clusters
    assert (lab1.name, lab1.namespace, lab1.kubernetes_version) == ("lab1", "default", "v1.35.9")
    assert (lab1.source_node, lab1.bridge, lab1.vlan) == ("pv1-1", "vmbr0", 4)
    assert lab1.node_network == ipaddress.IPv4Network("192.168.4.0/24")
    assert lab1.dns_servers == ("8.8.8.8", "2.2.2.2")
    assert (str(lab1.pod_cidr), str(lab1.service_cidr)) == ("10.244.0.0/16", "10.96.0.0/12")
    assert lab1.control_plane.replicas == 1
    assert lab1.workers.sizing == lab1.control_plane.sizing
    assert (lab1.workers.sizing.cpus, lab1.workers.sizing.memory_mib, lab1.workers.sizing.disk_gib) == (8, 16384, 100)
    assert (lab1.workers.min_size, lab1.workers.max_size) == (0, 3)
    assert lab1.autoscaler.scale_down_unneeded_time == "10m"


def test_a_cluster_keeps_its_template_release_when_capmox_is_bumped() -> None:
    [lab1] = parse_settings(lab_raw(capmoxVersion="v0.9.2")).workload.clusters
    assert lab1.template_version == "v0.9.1"


def test_no_workload_cluster_when_absent() -> None:
    raw = lab_raw()
    del raw["workloadClusters"]
    assert parse_settings(raw).workload.clusters == ()


WORKLOAD_REFUSALS: list[Any] = [
    pytest.param(
        {"podCidr": "192.168.0.0/16"},
        "workloadClusters[0].podCidr: 192.168.0.0/16 overlaps the management VM's subnet 192.168.4.0/24 "
        "(vmAddress); pick e.g. 10.244.0.0/16",
        id="podCidr-overlaps-the-lab",
    ),
    pytest.param({"podCidr": None}, "workloadClusters[0].podCidr: is required", id="podCidr-missing"),
    pytest.param(
        {"serviceCidr": "10.244.128.0/20"},
        "workloadClusters[0].serviceCidr: 10.244.128.0/20 overlaps podCidr 10.244.0.0/16",
        id="serviceCidr-overlaps-pods",
    ),
    pytest.param({"podCidr": "8.0.0.0/8"}, "podCidr: 8.0.0.0/8 overlaps the DNS server 8.8.8.8 (dnsServers)", id="dns"),
    pytest.param(
        {"nodeIpRanges": ["192.168.4.60-192.168.4.41"]},
        "nodeIpRanges: '192.168.4.60-192.168.4.41' is not an address, a range",
        id="range-backwards",
    ),
    pytest.param(
        {"nodeIpRanges": ["192.168.5.0/28"]}, "is outside the nodes' network 192.168.4.0/24", id="range-outside"
    ),
    pytest.param(
        {"controlPlaneEndpoint": "192.168.4.45"}, "controlPlaneEndpoint: 192.168.4.45 is inside", id="vip-in-range"
    ),
    pytest.param({"gateway": "192.168.5.1"}, "outside the nodes' network 192.168.5.0/24", id="gateway-elsewhere"),
    pytest.param({"nodes": 3}, "workloadClusters[0].nodes: is not a setting this program knows", id="unknown-key"),
    pytest.param({"workers": {"minSize": 1}}, "workloadClusters[0].workers.maxSize: is required", id="maxSize-missing"),
    pytest.param({"workers": {"minSize": 2, "maxSize": 1}}, "maxSize: 1 is below minSize 2", id="max-below-min"),
    pytest.param({"workers": {"maxSize": 3, "cpus": 4}}, "workers.cpus: is not a setting", id="unknown-nested"),
    pytest.param({"controlPlane": {"replicas": 2}}, "replicas: 2 is not 1, 3 or 5", id="even-control-plane"),
    pytest.param({"kubernetesVersion": "v1.36.1"}, "newer than Kubernetes 1.35", id="kubernetes-1.36"),
    pytest.param({"vlan": 0}, "vlan: 0 is outside the VLAN id range", id="vlan-0"),
    pytest.param({"templateVersion": None}, "workloadClusters[0].templateVersion: is required", id="template-missing"),
    pytest.param(
        {"templateVersion": "0.9.1"}, "templateVersion: '0.9.1' is not a CAPMOX release of the form v0.9.1", id="no-v"
    ),
    pytest.param(
        {"templateVersion": "v0.10.0"},
        "workloadClusters[0].templateVersion: v0.10.0 is newer than capmoxVersion v0.9.1: its objects may use "
        "fields the running CAPMOX does not know",
        id="template-newer-than-capmox",
    ),
    pytest.param({"autoscaler": {"scanInterval": "10"}}, "scanInterval: '10' is not a Go duration", id="duration"),
    pytest.param({"sshPublicKeys": ["ssh-ed25519 AAAA"]}, "sshPublicKeys: 'ssh-ed25519 AAAA' is not", id="ssh-key"),
    pytest.param({"name": "mgmt"}, "name: 'mgmt' is the management cluster's", id="name-mgmt"),
    pytest.param(
        {"name": "a" * 43},
        f"workloadClusters[0].name: '{'a' * 43}' has 43 characters, more than 42: the release "
        f"{'a' * 43}-autoscaler must fit Helm's 53",
        id="name-too-long",
    ),
    pytest.param(
        {"nodeIpRanges": ["192.168.4.20-192.168.4.39"]},
        "workloadClusters[0].nodeIpRanges: 192.168.4.20-192.168.4.39 contains the management VM's address "
        "192.168.4.21 (vmAddress)",
        id="range-takes-the-management-vm",
    ),
    pytest.param(
        {"controlPlaneEndpoint": "192.168.4.21"},
        "workloadClusters[0].controlPlaneEndpoint: 192.168.4.21 is the management VM's address 192.168.4.21",
        id="vip-is-the-management-vm",
    ),
    pytest.param(
        {"controlPlaneEndpoint": "192.168.4.8"},
        "workloadClusters[0].controlPlaneEndpoint: 192.168.4.8 is the lab's gateway 192.168.4.8 (vmGateway)",
        id="vip-is-the-gateway",
    ),
    pytest.param(
        {"controlPlaneEndpoint": "192.168.4.255"},
        "controlPlaneEndpoint: 192.168.4.255 is the broadcast address of 192.168.4.0/24",
        id="vip-is-broadcast",
    ),
    pytest.param(
        {"controlPlaneEndpoint": "192.168.4.0"},
        "controlPlaneEndpoint: 192.168.4.0 is the network address of 192.168.4.0/24",
        id="vip-is-the-network",
    ),
]


@pytest.mark.parametrize(("changes", "fragment"), WORKLOAD_REFUSALS)
def test_a_bad_workload_cluster_is_refused_naming_its_key(changes: dict[str, Any], fragment: str) -> None:
    with pytest.raises(SettingsError) as error:
        parse_settings(lab1_raw(**changes))
    assert any(fragment in line for line in problems(error.value)), problems(error.value)


def test_a_second_cluster_on_the_first_one_s_addresses_is_refused_naming_each_key() -> None:
    [lab1] = harness.stack_workload_clusters()
    lab2 = {**lab1, "name": "lab2"}
    with pytest.raises(SettingsError) as error:
        parse_settings(lab_raw(workloadClusters=config_value([lab1, lab2])))
    assert problems(error.value) == [
        f"lab-mgmt:workloadClusters[1].controlPlaneEndpoint: {lab1['controlPlaneEndpoint']} is an address of the "
        "cluster lab1",
        f"lab-mgmt:workloadClusters[1].nodeIpRanges: {lab1['nodeIpRanges'][0]} overlaps the addresses of the cluster "
        "lab1",
    ]


def test_a_second_cluster_on_addresses_of_its_own_is_accepted() -> None:
    [lab1] = harness.stack_workload_clusters()
    lab2 = {
        **lab1,
        "name": "lab2",
        "controlPlaneEndpoint": "192.168.4.70",
        "nodeIpRanges": ["192.168.4.71-192.168.4.80"],
    }
    assert [c.name for c in parse_settings(lab_raw(workloadClusters=config_value([lab1, lab2]))).workload.clusters] == [
        "lab1",
        "lab2",
    ]


def test_single_addresses_are_accepted_as_capmox_takes_them_and_a_small_pool_is_warned_of() -> None:
    settings = parse_settings(lab1_raw(nodeIpRanges=["192.168.4.41", "192.168.4.42"]))
    assert settings.workload.clusters[0].node_ip_ranges == ("192.168.4.41", "192.168.4.42")
    assert settings.warnings == (
        "lab-mgmt:workloadClusters[0].nodeIpRanges: holds 2 addresses, fewer than controlPlane.replicas + "
        "workers.maxSize + 1 = 5: a rollout makes one machine more before it deletes one, and finds no address for it",
    )


def test_a_range_may_span_the_network_s_own_addresses_which_ipam_never_hands_out() -> None:
    settings = parse_settings(lab1_raw(nodeIpRanges=["192.168.4.240/28"], controlPlaneEndpoint="192.168.4.100"))
    assert settings.workload.clusters[0].node_ip_ranges == ("192.168.4.240/28",)


def test_a_name_of_42_characters_is_accepted() -> None:
    assert parse_settings(lab1_raw(name="a" * 42)).workload.clusters[0].name == "a" * 42


def test_a_rebuild_of_the_management_vm_is_refused_while_workload_clusters_are_declared() -> None:
    with pytest.raises(SettingsError) as error:
        parse_settings(lab_raw(vmRebuildFromImage="true", vmProtected="false"))
    [problem] = problems(error.value)
    assert problem.startswith(
        "lab-mgmt:vmRebuildFromImage: true would replace the management VM while workloadClusters declares lab1"
    )
    assert '"Removing a workload cluster"' in problem
    assert parse_settings(
        lab_raw(vmRebuildFromImage="true", vmProtected="false", workloadClusters="[]")
    ).vm.rebuild_from_image


def test_two_clusters_of_one_name_are_refused() -> None:
    [lab1] = harness.stack_workload_clusters()
    with pytest.raises(SettingsError, match="declares the cluster 'lab1' twice"):
        parse_settings(lab_raw(workloadClusters=config_value([lab1, lab1])))
