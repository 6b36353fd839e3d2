"""The management side's settings: what builds the management VM and what runs on it.

The Proxmox VE API (ManagementVm's provider and the token check), the VM and its cloud image,
k3s on it, cert-manager, the Cluster API operator and its providers, and the read-only access:
each settings object beside its reader, grouped by the component that reads it.
"""

from __future__ import annotations

import base64
import binascii
import ipaddress
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlparse

from components.settings.config import (
    BARE_SEMVER,
    CORES_RANGE,
    DISK_GIB_RANGE,
    DNS_LABEL,
    MEMORY_MIB_RANGE,
    NAME,
    REPO_ROOT,
    V_SEMVER,
    VLAN_RANGE,
    VMID_RANGE,
    Reader,
    is_ip_address,
    is_ssh_public_key,
    release,
)

GENERATION_RANGE = (1, 1_000_000)
# Up to four hours: a slow link pulling every provider's image; a bound of 0 would fail at once.
PROVIDER_READY_MINUTES_RANGE = (1, 240)
WEBHOOK_MINUTES_RANGE = (1, 60)
SSH_DIAL_ATTEMPTS_RANGE = (5, 1000)

# k3s's form for its releases (config.py holds the other upstreams'); anything else is refused.
K3S_VERSION = re.compile(r"^v\d+\.\d+\.\d+\+k3s\d+$")
# Cluster API v1.12 (capiCoreVersion) supports a management cluster up to Kubernetes 1.35, as it
# does a workload cluster (workload.NEWEST_WORKLOAD_KUBERNETES): k3s v1.36 would upgrade and leave
# Cluster API's controllers on a Kubernetes they do not support.
NEWEST_CAPI_KUBERNETES = (1, 35)
SHA256 = re.compile(r"^[0-9a-f]{64}$")
# How cloud-images.ubuntu.com names a build's directory: its date, maybe a respin number.
DATED_SERIAL = re.compile(r"^(?:release-)?((?:19|20)\d{2}(?:0[1-9]|1[0-2])(?:0[1-9]|[12]\d|3[01])(?:\.\d+)?)$")
TOKEN_ID = re.compile(r"^[^@!\s]+@[^@!\s]+![A-Za-z][A-Za-z0-9._-]*$")
DNS_SUBDOMAIN = re.compile(r"^(?=.{1,253}$)[a-z0-9]([a-z0-9.-]*[a-z0-9])?$")


# --- the Proxmox VE API: ManagementVm's provider and the token check ------------------------------


@dataclass(frozen=True)
class ProxmoxSettings:
    endpoint: str
    insecure: bool
    api_token_id: str
    api_token_secret: str = field(repr=False)
    node: str
    skip_credentials_check: bool


def read_proxmox(r: Reader) -> ProxmoxSettings:
    return ProxmoxSettings(
        endpoint=r.https_url("proxmoxEndpoint"),
        insecure=r.boolean("proxmoxInsecure"),
        api_token_id=r.matching("proxmoxApiTokenId", TOKEN_ID, "an API token id of the form user@realm!tokenname"),
        api_token_secret=r.token_secret("proxmoxApiTokenSecret"),
        node=r.matching("proxmoxNode", DNS_LABEL, "a Proxmox node name"),
        skip_credentials_check=r.boolean("skipCredentialsCheck"),
    )


# --- the VM: ManagementVm, and cloud-init as K3sNode reaches it -----------------------------------


@dataclass(frozen=True)
class VmSettings:
    vm_id: int
    name: str
    cores: int
    memory_mib: int
    disk_gib: int
    bridge: str
    vlan_tag: int | None
    address: ipaddress.IPv4Interface
    gateway: ipaddress.IPv4Address
    dns_servers: tuple[str, ...]
    disk_storage: str
    protected: bool
    rebuild_from_image: bool
    ci_user: str
    ssh_public_keys: tuple[str, ...]


def read_vm(r: Reader) -> VmSettings:
    vlan_text = r.text("vmVlanTag")
    vlan = int(vlan_text) if re.fullmatch(r"[0-9]+", vlan_text) else -1
    if vlan_text and vlan != 0 and not VLAN_RANGE[0] <= vlan <= VLAN_RANGE[1]:
        r.fail("vmVlanTag", f"{vlan_text!r} is not a VLAN id {VLAN_RANGE[0]}..{VLAN_RANGE[1]} (0 for untagged)")
    protected = r.boolean("vmProtected")
    rebuild = r.boolean("vmRebuildFromImage")
    if rebuild and protected:
        r.fail(
            "vmRebuildFromImage",
            "true needs vmProtected=false applied in an earlier `pulumi up` (see docs/operations.md)",
        )
    address = _read_address(r)
    return VmSettings(
        vm_id=r.integer("vmId", VMID_RANGE, "Proxmox VMID"),
        name=r.matching("vmName", DNS_LABEL, "a DNS label (lower case letters, digits, '-')"),
        cores=r.integer("vmCores", CORES_RANGE, "cores"),
        memory_mib=r.integer("vmMemoryMib", MEMORY_MIB_RANGE, "memory MiB"),
        disk_gib=r.integer("vmDiskGib", DISK_GIB_RANGE, "disk GiB"),
        bridge=r.matching("vmBridge", NAME, "a Linux bridge name"),
        vlan_tag=vlan or None,
        address=address or ipaddress.IPv4Interface("192.0.2.1/24"),
        gateway=_read_gateway(r, address),
        dns_servers=_read_list(r, "vmDnsServers", "an IP address of a DNS server", is_ip_address),
        disk_storage=r.matching("vmDiskStorage", NAME, "a storage id"),
        protected=protected,
        rebuild_from_image=rebuild,
        ci_user=r.matching("ciUser", re.compile(r"^[a-z_][a-z0-9_-]*$"), "a Linux user name"),
        ssh_public_keys=_read_list(r, "sshPublicKeys", "an OpenSSH public key line", is_ssh_public_key),
    )


def _read_address(r: Reader) -> ipaddress.IPv4Interface | None:
    text = r.text("vmAddress")
    if not text:
        return None
    if "/" not in text:
        r.fail("vmAddress", f"{text!r} has no prefix length; expected e.g. 192.168.4.21/24")
        return None
    try:
        address = ipaddress.IPv4Interface(text)
    except ValueError:
        r.fail("vmAddress", f"{text!r} is not an IPv4 address with a prefix length, e.g. 192.168.4.21/24")
        return None
    if address.network.prefixlen < 31 and address.ip in (
        address.network.network_address,
        address.network.broadcast_address,
    ):
        r.fail("vmAddress", f"{text!r} is the network or broadcast address of its subnet")
    return address


def _read_gateway(r: Reader, address: ipaddress.IPv4Interface | None) -> ipaddress.IPv4Address:
    text = r.text("vmGateway")
    try:
        gateway = ipaddress.IPv4Address(text)
    except ValueError:
        if text:
            r.fail("vmGateway", f"{text!r} is not an IPv4 address")
        return ipaddress.IPv4Address(0)
    if address is not None and gateway not in address.network:
        r.fail("vmGateway", f"{gateway} is outside the VM's subnet {address.network}")
    elif address is not None and gateway == address.ip:
        r.fail("vmGateway", f"{gateway} is the VM's own address")
    return gateway


def _read_list(r: Reader, key: str, what: str, valid: Callable[[str], bool]) -> tuple[str, ...]:
    items = r.string_list(key)
    if items == ():
        r.fail(key, f"is empty; give at least one {what}")
    for item in items or ():
        if not valid(item):
            r.fail(key, f"{item[:40]!r} is not {what}")
    return items or ()


# --- the cloud image: ManagementVm ----------------------------------------------------------------


@dataclass(frozen=True)
class ImageSettings:
    url: str
    sha256: str
    storage: str

    @property
    def serial(self) -> str | None:
        """The dated build serial a directory of the URL names (`20260926`, `release-20260926`,
        `20260926.1`); None for a floating one (`current`, `release`)."""
        parts = [p for p in urlparse(self.url).path.split("/") if p][:-1]
        return next((match[1] for p in reversed(parts) if (match := DATED_SERIAL.fullmatch(p))), None)

    @property
    def file_name(self) -> str:
        """Proxmox imports only files named *.qcow2 (the Ubuntu .img is qcow2); the serial in the
        URL's path keeps names of two image builds apart."""
        stem = urlparse(self.url).path.rsplit("/", 1)[-1].rsplit(".", 1)[0]
        return f"{stem}-{self.serial}.qcow2"


def read_image(r: Reader) -> ImageSettings:
    url = r.https_url("imageUrl")
    image = ImageSettings(
        url=url,
        sha256=r.matching("imageSha256", SHA256, "a sha256 digest (64 lower-case hex characters)"),
        storage=r.matching("imageStorage", NAME, "a storage id"),
    )
    if url.startswith("https://") and not urlparse(url).path.endswith((".img", ".qcow2")):
        r.fail("imageUrl", f"{url!r} is not a cloud image file (.img or .qcow2)")
    elif url.startswith("https://") and image.serial is None:
        # A floating directory serves another build tomorrow: the pinned checksum would fail, or
        # two builds would share one file name on the storage.
        r.fail("imageUrl", f"{url!r} names no dated serial (e.g. .../noble/20260926/...); pin one, never `current`")
    return image


# --- k3s over SSH: K3sNode ------------------------------------------------------------------------


@dataclass(frozen=True)
class K3sSettings:
    version: str
    ssh_private_key: str | None = field(repr=False)
    kubeconfig_path: Path | None
    ssh_dial_attempts: int
    """How many times each host step dials the VM before it fails."""


def read_k3s(r: Reader) -> K3sSettings:
    private_key = r.verbatim("sshPrivateKey")
    if private_key is not None and "PRIVATE KEY" not in private_key:
        r.fail("sshPrivateKey", "is not a private key in PEM/OpenSSH form (give the key file's whole content)")
    elif private_key is not None and _encrypted(private_key):
        # The host steps get no passphrase to open it: the first of them would fail in `up`, after
        # the VM's import or create, where the preview can refuse it.
        r.fail(
            "sshPrivateKey",
            "is encrypted with a passphrase, which the host steps cannot type: take it out (pulumi config rm "
            "sshPrivateKey) and load the key into your ssh-agent with ssh-add, which every host step uses "
            '(docs/operations.md, "On a Mac")',
        )
    version = r.version("k3sVersion", K3S_VERSION, "v1.35.8+k3s1")
    if K3S_VERSION.fullmatch(version) and release(version.split("+")[0])[:2] > NEWEST_CAPI_KUBERNETES:
        newest = ".".join(map(str, NEWEST_CAPI_KUBERNETES))
        r.fail(
            "k3sVersion",
            f"{version} is newer than Kubernetes {newest}, the newest that Cluster API v1.12 (capiCoreVersion) "
            "supports for the management cluster it runs on: a newer k3s minor waits for a Cluster API bump "
            "(docs/versions.md)",
        )
    return K3sSettings(
        version=version,
        ssh_private_key=private_key,
        kubeconfig_path=_read_kubeconfig_path(r),
        ssh_dial_attempts=r.integer("sshDialAttempts", SSH_DIAL_ATTEMPTS_RANGE, "dial attempts"),
    )


# OpenSSH's own key format (PROTOCOL.key): after the armour, this magic, then the cipher's name as an
# SSH string (a 4-byte length and the name), `none` for a key without a passphrase.
OPENSSH_KEY = re.compile(r"-----BEGIN OPENSSH PRIVATE KEY-----(.*?)-----END OPENSSH PRIVATE KEY-----", re.DOTALL)
OPENSSH_MAGIC = b"openssh-key-v1\0"


def _encrypted(private_key: str) -> bool:
    """Whether the key needs its passphrase to be read: an OpenSSH key whose cipher is not `none`,
    a PEM key with OpenSSL's `Proc-Type: 4,ENCRYPTED` header, or an encrypted PKCS#8 key."""
    if "Proc-Type: 4,ENCRYPTED" in private_key or "BEGIN ENCRYPTED PRIVATE KEY" in private_key:
        return True
    armoured = OPENSSH_KEY.search(private_key)
    try:
        blob = base64.b64decode("".join(armoured.group(1).split())) if armoured else b""
    except binascii.Error:
        return False
    if not blob.startswith(OPENSSH_MAGIC):
        return False
    length = int.from_bytes(blob[len(OPENSSH_MAGIC) : len(OPENSSH_MAGIC) + 4], "big")
    start = len(OPENSSH_MAGIC) + 4
    return blob[start : start + length] != b"none"


def _read_kubeconfig_path(r: Reader) -> Path | None:
    text = r.optional("kubeconfigPath")
    if text is None:
        return None
    try:
        path = Path(text).expanduser()
    except RuntimeError:
        r.fail("kubeconfigPath", f"{text!r} names the home directory of an unknown user")
        return None
    if not path.is_absolute():
        r.fail("kubeconfigPath", f"{text!r} is not an absolute path")
    elif path.resolve() == REPO_ROOT or REPO_ROOT in path.resolve().parents:
        r.fail("kubeconfigPath", f"{text!r} is inside this repository; a kubeconfig must never be committed")
    return path


# --- cert-manager, the operator and its providers: ClusterApi -------------------------------------


@dataclass(frozen=True)
class ProviderVersions:
    """The five Cluster API Operator providers, in the order the operator wants upgrades done."""

    core: str
    bootstrap: str
    control_plane: str
    infrastructure: str
    ipam: str


@dataclass(frozen=True)
class ClusterApiSettings:
    cert_manager_version: str
    operator_version: str
    cert_manager_repo: str
    operator_repo: str
    providers: ProviderVersions
    capmox_token_id: str
    capmox_token_secret: str = field(repr=False)
    existing_capmox_secret: str | None
    """A credentials Secret that someone else made (the playbook's `capmox-variables`): the
    program points CAPMOX at it and makes none of its own."""
    provider_ready_timeout_minutes: int
    """How long `pulumi up` waits for each provider CR to become Ready."""
    operator_webhook_timeout_minutes: int
    """How long `pulumi up` waits for the CA bundle of each of the operator's webhooks."""


def read_cluster_api(r: Reader) -> ClusterApiSettings:
    return ClusterApiSettings(
        cert_manager_version=r.version("certManagerVersion", V_SEMVER, "v1.21.2"),
        operator_version=r.version("capiOperatorVersion", BARE_SEMVER, "0.28.0"),
        cert_manager_repo=r.https_url("certManagerChartRepo"),
        operator_repo=r.https_url("capiOperatorChartRepo"),
        providers=ProviderVersions(
            core=r.version("capiCoreVersion", V_SEMVER, "v1.12.11"),
            bootstrap=r.version("capiBootstrapVersion", V_SEMVER, "v1.12.11"),
            control_plane=r.version("capiControlPlaneVersion", V_SEMVER, "v1.12.11"),
            infrastructure=r.version("capmoxVersion", V_SEMVER, "v0.9.1"),
            ipam=r.version("ipamInClusterVersion", V_SEMVER, "v1.1.1"),
        ),
        capmox_token_id=r.matching("capmoxTokenId", TOKEN_ID, "an API token id of the form user@realm!tokenname"),
        capmox_token_secret=r.token_secret("capmoxTokenSecret"),
        existing_capmox_secret=_read_existing_capmox_secret(r),
        provider_ready_timeout_minutes=r.integer(
            "providerReadyTimeoutMinutes", PROVIDER_READY_MINUTES_RANGE, "minutes"
        ),
        operator_webhook_timeout_minutes=r.integer("operatorWebhookTimeoutMinutes", WEBHOOK_MINUTES_RANGE, "minutes"),
    )


def _read_existing_capmox_secret(r: Reader) -> str | None:
    name = r.optional("capmoxExistingSecret")
    if name is not None and not DNS_SUBDOMAIN.fullmatch(name):
        r.fail("capmoxExistingSecret", f"{name!r} is not a Kubernetes object name")
    return name


# --- read-only access: ReadOnlyAccess, on the management cluster and in each WorkloadCluster ------


@dataclass(frozen=True)
class AccessSettings:
    """The read-only accounts, on the management cluster and on each workload cluster (those of
    `workload.clusters`: one declaration gives a cluster and read-only access to it)."""

    readonly_token_generation: int


def read_access(r: Reader) -> AccessSettings:
    return AccessSettings(
        readonly_token_generation=r.integer("readonlyTokenGeneration", GENERATION_RANGE, "token generation"),
    )
