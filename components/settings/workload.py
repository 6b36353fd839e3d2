"""The workload clusters' settings: each cluster that `workloadClusters` declares, and what all share.

`workloadClusters` is a list of objects, which Pulumi.yaml cannot declare; `_Entry` reads it key
by key, naming each key in full in every problem. Each cluster is checked on its own (its
network, its pod and service networks, its sizing, control plane, workers and autoscaler timings,
a takeover's conditions), against the lab's own network (lab_network), and against the other
clusters.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from components import autoscaler_flags, cilium_values, kept_fields
from components.settings.config import (
    BARE_SEMVER,
    CORES_RANGE,
    DISK_GIB_RANGE,
    DNS_LABEL,
    MEMORY_MIB_RANGE,
    NAME,
    V_SEMVER,
    VLAN_RANGE,
    VMID_RANGE,
    Reader,
    is_ip_address,
    is_ssh_public_key,
    release,
)
from components.settings.lab_network import LabNetwork, ipv4_hosts

# --- workload clusters: WorkloadCluster (and its read-only access), Cilium, cluster-autoscaler ----

# Not declared in Pulumi.yaml: a project's config block declares strings, numbers, booleans and
# arrays of those only, never a list of objects. The stack sets it as a list (`--path`).
WORKLOAD_CLUSTERS_KEY = "workloadClusters"
WORKLOAD_DOCS = "docs/operations.md#workload-clusters"
# Cluster API v1.12 (capiCoreVersion; CAPMOX v0.9 is tested with CAPI 1.11 and 1.12 only) supports
# workload clusters up to Kubernetes 1.35: a newer minor waits for a newer Cluster API.
NEWEST_WORKLOAD_KUBERNETES = (1, 35)
CONTROL_PLANE_REPLICAS = (1, 3, 5)
SOCKETS_RANGE = (1, 8)
WORKER_COUNT_RANGE = (0, 100)
IP_PREFIX_RANGE = (1, 32)
CONTROL_PLANE_MINUTES_RANGE = (1, 240)
# What Go's time.ParseDuration takes (cluster-autoscaler's flags), signs left out.
GO_DURATION = re.compile(r"^(?:\d+(?:\.\d+)?(?:ns|us|µs|ms|s|m|h))+$")
BOOT_DEVICE = re.compile(r"^(?:scsi|virtio|sata|ide)\d+$")
INTERFACE = re.compile(r"^[A-Za-z0-9._-]{1,15}$")
# cluster-autoscaler's clusterapi provider reads these on the MachineDeployment.
MIN_SIZE_ANNOTATION = "cluster.x-k8s.io/cluster-api-autoscaler-node-group-min-size"
MAX_SIZE_ANNOTATION = "cluster.x-k8s.io/cluster-api-autoscaler-node-group-max-size"
CAPACITY_ANNOTATION = "capacity.cluster-autoscaler.kubernetes.io/"
# The capacity annotations the program sets, by name, and workers.capacity's key for each.
CAPACITY_KEYS = {"cpu": "cpu", "memory": "memory", "ephemeral-disk": "ephemeralDisk", "maxPods": "maxPods"}
# kubelet's default --max-pods; the autoscaler assumes the same when the annotation is absent.
MAX_PODS = 110
# The node group's annotations the program sets on the MachineDeployment, and the entry's key
# under `workers` that sets each.
NODE_GROUP_KEYS = {
    MIN_SIZE_ANNOTATION: "minSize",
    MAX_SIZE_ANNOTATION: "maxSize",
    **{f"{CAPACITY_ANNOTATION}{name}": f"capacity.{key}" for name, key in CAPACITY_KEYS.items()},
}
# A Kubernetes quantity (resource.Quantity's text form), as the capacity annotations take one.
QUANTITY = re.compile(r"^[0-9]+(?:\.[0-9]+)?(?:[eE][0-9]+|m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?$")
# Image tags of cluster-autoscaler that are known broken for this setup.
BROKEN_AUTOSCALER_TAGS = {
    "v1.35.0": "mis-resolves the infrastructure provider's API version (kubernetes/autoscaler#9439); use v1.35.2",
}
# The management cluster's resources are named `mgmt-*`: a workload cluster's would clash.
RESERVED_CLUSTER_NAMES = ("mgmt",)
# The longest cluster name that every name made from it fits: the autoscaler's Helm release
# `<name>-autoscaler` (Helm refuses release names over 53 characters), which is tighter than the
# label value `<name>-workers` (63, Cluster API's MachineDeployment name label).
HELM_RELEASE_NAME_MAX = 53
CLUSTER_NAME_MAX = HELM_RELEASE_NAME_MAX - len("-autoscaler")


@dataclass(frozen=True)
class MachineSizing:
    """One ProxmoxMachineTemplate's VM: what CAPMOX clones from the template VM."""

    sockets: int
    cores: int
    memory_mib: int
    disk_gib: int

    @property
    def cpus(self) -> int:
        return self.sockets * self.cores


def derived_capacity(sizing: MachineSizing) -> dict[str, str]:
    """The capacity annotations' values (by CAPACITY_KEYS' names) that a worker's sizing gives."""
    return {
        "cpu": str(sizing.cpus),
        "memory": f"{sizing.memory_mib}Mi",
        "ephemeral-disk": f"{sizing.disk_gib}Gi",
        "maxPods": str(MAX_PODS),
    }


@dataclass(frozen=True)
class ControlPlane:
    replicas: int
    sizing: MachineSizing


@dataclass(frozen=True)
class Workers:
    """The one worker MachineDeployment; cluster-autoscaler moves its replicas within min..max."""

    min_size: int
    max_size: int
    sizing: MachineSizing
    capacity: Mapping[str, str]
    """Capacity annotations' values kept over the ones derived from the sizing (CAPACITY_KEYS):
    those an owner gave the hand-installed autoscaler for scale-from-zero."""


@dataclass(frozen=True)
class AutoscalerTimings:
    """cluster-autoscaler's flags of the same names, as Go durations (upstream's defaults), and the
    flags kept beside the program's (components.autoscaler_flags)."""

    scan_interval: str
    scale_down_unneeded_time: str
    scale_down_delay_after_add: str
    max_node_provision_time: str
    extra_args: Mapping[str, str]

    def flags(self) -> dict[str, str]:
        """Every flag the program's release passes (its extraArgs): the four timings, the program's
        own flags and those kept."""
        timings = {
            "scan-interval": self.scan_interval,
            "scale-down-unneeded-time": self.scale_down_unneeded_time,
            "scale-down-delay-after-add": self.scale_down_delay_after_add,
            "max-node-provision-time": self.max_node_provision_time,
        }
        return autoscaler_flags.program_flags(timings, self.extra_args)


@dataclass(frozen=True)
class WorkloadCluster:
    """A workload cluster as CAPMOX's default cluster template takes it (components.cluster_template),
    plus what the template gets wrong for this lab (VLAN, pod and service networks)."""

    name: str
    namespace: str
    template_version: str
    """The CAPMOX release whose cluster template renders this cluster, apart from capmoxVersion:
    a provider bump changes the provider only, and a cluster follows a newer template only when
    its own entry asks for it (the rollout it may bring is named at preview, components.rollouts)."""
    kubernetes_version: str
    control_plane_endpoint: ipaddress.IPv4Address
    """The kube-vip address of the API server."""
    node_ip_ranges: tuple[str, ...]
    """`a.b.c.d-a.b.c.e` ranges or CIDRs, as CAPMOX's ipv4Config.addresses takes them."""
    ip_prefix: int
    gateway: ipaddress.IPv4Address
    dns_servers: tuple[str, ...]
    ssh_public_keys: tuple[str, ...]
    source_node: str
    allowed_nodes: tuple[str, ...]
    template_vm_id: int
    boot_volume_device: str
    bridge: str
    vlan: int | None
    pod_cidr: ipaddress.IPv4Network
    service_cidr: ipaddress.IPv4Network
    vip_interface: str
    """Empty: kube-vip finds the interface itself."""
    control_plane: ControlPlane
    workers: Workers
    autoscaler: AutoscalerTimings
    protected: bool
    """Its Cluster API objects are protected: deleting the Cluster deletes every VM of the
    cluster, so taking it out of the stack takes a run with `protected: false` first."""
    taken_over: bool
    """Made by clusterctl from the same template, then taken over (docs/adoption.md): its networks
    stay as clusterctl made them, which they can no longer leave (the template's pod CIDR, no
    service CIDR declared)."""
    adopt: bool
    """This run imports its running objects and Cilium's release as they are and declares only
    what clusterctl rendered (components.cluster_takeover); on for the adoption run only."""
    recover: bool
    """Adopted (`adopt`) under the stack's `recover`: lab-mgmt made the cluster under a stack whose
    state is lost, so what is imported is what the program makes, the autoscaler's release and the
    read-only access too, and it is declared as the program declares it, not as clusterctl rendered it."""
    cilium_values: Mapping[str, Any]
    """Helm values for Cilium kept beside the program's (components.cilium_values): those an owner
    set when installing it by hand, which the run with adopt off would otherwise drop."""
    kept_fields: Mapping[str, Mapping[str, Any]]
    """Fields of the seven objects kept beside the program's, by role (components.kept_fields):
    those an owner set by hand, which the run that takes kubectl's fields would otherwise remove."""
    template_names: Mapping[str, str] = dataclasses.field(default_factory=dict)
    """Recovering a taken-over cluster: the machine templates' names as it runs them, by
    `controlPlane` and `worker`, where they rolled since the takeover (components.cluster_takeover)."""
    key: str = WORKLOAD_CLUSTERS_KEY
    """The entry's own key, `workloadClusters[i]`, which refusals name."""

    @property
    def node_network(self) -> ipaddress.IPv4Network:
        return ipaddress.IPv4Network(f"{self.gateway}/{self.ip_prefix}", strict=False)


@dataclass(frozen=True)
class WorkloadSettings:
    """The declared workload clusters and what every one of them gets alike."""

    clusters: tuple[WorkloadCluster, ...]
    capmox_release_url: str
    """Where CAPMOX's release assets are, `<url>/<templateVersion>/cluster-template.yaml` among them."""
    cilium_version: str
    cilium_repo: str
    autoscaler_chart_version: str
    autoscaler_image_tag: str
    autoscaler_repo: str
    control_plane_timeout_minutes: int
    """How long `pulumi up` waits for a new cluster's control plane (ControlPlaneInitialized)."""


class _Entry:
    """One object of workloadClusters, or an object inside it, read key by key. Every problem
    names its key in full (`workloadClusters[0].workers.maxSize`); a key nobody read is refused."""

    def __init__(self, r: Reader, path: str, value: Mapping[str, Any]) -> None:
        self.r, self.path, self._value = r, path, value
        self._read: set[str] = set()

    def fail(self, name: str, message: str) -> None:
        self.r.fail(f"{self.path}.{name}", message)

    def warn(self, name: str, message: str) -> None:
        self.r.warn(f"{self.path}.{name}", message)

    def has(self, name: str) -> bool:
        return self._value.get(name) is not None

    def raw(self, name: str, default: Any = None) -> Any:
        self._read.add(name)
        value = self._value.get(name)
        if value is None and default is None:
            self.fail(name, "is required but not set")
        return default if value is None else value

    def text(self, name: str, pattern: re.Pattern[str], expected: str, default: str | None = None) -> str:
        value = self.raw(name, default)
        if value is None:
            return ""
        if not isinstance(value, str) or (value.strip() != default and not pattern.fullmatch(value.strip())):
            self.fail(name, f"{value!r} is not {expected}")
            return default or ""
        return value.strip()

    def integer(self, name: str, bounds: tuple[int, int], what: str, default: int | None = None) -> int:
        value = self.raw(name, default)
        if isinstance(value, str) and re.fullmatch(r"-?[0-9]+", value.strip()):
            value = int(value)
        if value is None or isinstance(value, bool) or not isinstance(value, int):
            if value is not None:
                self.fail(name, f"{value!r} is not a whole number")
            return bounds[0]
        if not bounds[0] <= value <= bounds[1]:
            self.fail(name, f"{value} is outside the {what} range {bounds[0]}..{bounds[1]}")
        return value

    def strings(self, name: str, what: str, valid: Callable[[str], object], default: Any = None) -> tuple[str, ...]:
        value = self.raw(name, default)
        if value is None:
            return ()
        if not isinstance(value, (list, tuple)) or not all(isinstance(i, str) for i in value):
            self.fail(name, f"{value!r} is not a list of strings (one entry each)")
            return ()
        if not value and default is None:
            self.fail(name, f"is empty; give at least one {what}")
        for item in value:
            if not valid(item.strip()):
                self.fail(name, f"{item[:40]!r} is not {what}")
        return tuple(i.strip() for i in value)

    def boolean(self, name: str, default: bool) -> bool:
        value = self.raw(name, default)
        if isinstance(value, str) and value.strip().lower() in ("true", "false"):
            value = value.strip().lower() == "true"
        if not isinstance(value, bool):
            self.fail(name, f"{value!r} is not true or false")
            return default
        return value

    def address(self, name: str) -> ipaddress.IPv4Address | None:
        value = self.raw(name)
        try:
            return ipaddress.IPv4Address(str(value).strip()) if value is not None else None
        except ValueError:
            self.fail(name, f"{value!r} is not an IPv4 address")
            return None

    def network(self, name: str, default: str | None = None) -> ipaddress.IPv4Network | None:
        value = self.raw(name, default)
        try:
            return ipaddress.IPv4Network(str(value).strip()) if value is not None else None
        except ValueError:
            self.fail(name, f"{value!r} is not an IPv4 network with its prefix length (e.g. 10.244.0.0/16)")
            return None

    def entry(self, name: str) -> _Entry:
        value = self.raw(name, {})
        if not isinstance(value, dict):
            self.fail(name, f"{value!r} is not an object")
            value = {}
        return _Entry(self.r, f"{self.path}.{name}", value)

    def done(self) -> None:
        """Refuses the keys nobody read: a misspelt key would otherwise be ignored without a word."""
        for unknown in sorted(set(self._value) - self._read):
            self.fail(unknown, f"is not a setting this program knows; see {WORKLOAD_DOCS}")


def read_workload(r: Reader, lab: LabNetwork, *, recover: bool = False) -> WorkloadSettings:
    """`recover`: the stack's own key (WorkloadCluster.recover)."""
    entries = _workload_entries(r)
    clusters = tuple(_read_workload_cluster(entry, lab, recover=recover) for entry in entries)
    names = [c.name for c in clusters]
    for name in sorted({n for n in names if names.count(n) > 1}):
        r.fail(WORKLOAD_CLUSTERS_KEY, f"declares the cluster {name!r} twice; each cluster name must be unique")
    _check_clusters_apart(list(zip(entries, clusters, strict=True)))
    return WorkloadSettings(
        clusters=clusters,
        capmox_release_url=r.https_url("capmoxReleaseUrl"),
        cilium_version=r.version("ciliumVersion", BARE_SEMVER, "1.19.8"),
        cilium_repo=r.https_url("ciliumChartRepo"),
        autoscaler_chart_version=r.version("clusterAutoscalerChartVersion", BARE_SEMVER, "9.59.0"),
        autoscaler_image_tag=_read_autoscaler_image_tag(r),
        autoscaler_repo=r.https_url("clusterAutoscalerChartRepo"),
        control_plane_timeout_minutes=r.integer(
            "workloadControlPlaneTimeoutMinutes", CONTROL_PLANE_MINUTES_RANGE, "minutes"
        ),
    )


def _read_autoscaler_image_tag(r: Reader) -> str:
    tag = r.version("clusterAutoscalerImageTag", V_SEMVER, "v1.35.2")
    if tag in BROKEN_AUTOSCALER_TAGS:
        r.fail("clusterAutoscalerImageTag", f"{tag} {BROKEN_AUTOSCALER_TAGS[tag]}")
    return tag


def _workload_entries(r: Reader) -> list[_Entry]:
    """workloadClusters as a list of objects; absent or empty is no workload cluster at all."""
    text = r.optional(WORKLOAD_CLUSTERS_KEY)
    try:
        items = json.loads(text) if text is not None else []
    except ValueError:
        items = None
    if not isinstance(items, list):
        r.fail(WORKLOAD_CLUSTERS_KEY, f"is not a list of clusters, each an object; see {WORKLOAD_DOCS}")
        return []
    entries = []
    for index, item in enumerate(items):
        path = f"{WORKLOAD_CLUSTERS_KEY}[{index}]"
        if isinstance(item, dict):
            entries.append(_Entry(r, path, item))
        elif isinstance(item, str):
            r.fail(
                path,
                f"{item!r} names a cluster only; declare the cluster as an object with its settings "
                f"(name, namespace, network, sizing), which also gives it read-only access: see {WORKLOAD_DOCS}",
            )
        else:
            r.fail(path, f"{item!r} is not an object; see {WORKLOAD_DOCS}")
    return entries


def _read_workload_cluster(e: _Entry, lab: LabNetwork, *, recover: bool) -> WorkloadCluster:
    name = e.text("name", DNS_LABEL, "a DNS label (lower case letters, digits, '-')")
    if name in RESERVED_CLUSTER_NAMES:
        e.fail("name", f"{name!r} is the management cluster's own name in this program; pick another")
    network = _read_cluster_network(e)
    cluster = WorkloadCluster(
        name=name,
        namespace=e.text("namespace", DNS_LABEL, "a namespace name", default="default"),
        template_version=e.text("templateVersion", V_SEMVER, "a CAPMOX release of the form v0.9.1"),
        kubernetes_version=_read_workload_kubernetes(e),
        **network,
        ssh_public_keys=e.strings("sshPublicKeys", "an OpenSSH public key line", is_ssh_public_key),
        source_node=e.text("sourceNode", DNS_LABEL, "a Proxmox node name", default=lab.proxmox_node),
        allowed_nodes=e.strings("allowedNodes", "a Proxmox node name", DNS_LABEL.fullmatch, default=[]),
        template_vm_id=e.integer("templateVmId", VMID_RANGE, "Proxmox VMID"),
        boot_volume_device=e.text("bootVolumeDevice", BOOT_DEVICE, "a Proxmox disk like scsi0", default="scsi0"),
        bridge=e.text("bridge", NAME, "a Linux bridge name", default=lab.bridge),
        vip_interface=e.text("vipInterface", INTERFACE, "a network interface name", default=""),
        control_plane=_read_control_plane(e.entry("controlPlane")),
        workers=_read_workers(e.entry("workers")),
        autoscaler=_read_autoscaler_timings(e.entry("autoscaler")),
        protected=e.boolean("protected", default=True),
        taken_over=e.boolean("takenOver", default=False),
        adopt=(adopt := e.boolean("adopt", default=False)),
        recover=recover and adopt,
        cilium_values=_read_cilium_values(e),
        kept_fields=_read_kept_fields(e.entry("keptFields")),
        template_names=_read_template_names(e.entry("templateNames")),
        key=e.path,
    )
    if len(name) > CLUSTER_NAME_MAX:
        e.fail(
            "name",
            f"{name!r} has {len(name)} characters, more than {CLUSTER_NAME_MAX}: the release {name}-autoscaler "
            f"must fit Helm's {HELM_RELEASE_NAME_MAX}",
        )
    _check_pod_and_service_networks(e, cluster, lab)
    _check_lab_hosts(e, cluster, lab)
    _check_taken_over(e, cluster)
    e.done()
    return cluster


def _read_cilium_values(e: _Entry) -> Mapping[str, Any]:
    value = e.raw("ciliumValues", {})
    if not isinstance(value, dict):
        e.fail("ciliumValues", f"{value!r} is not an object of Helm values (ciliumValues.kubeProxyReplacement: true)")
        return {}
    for path in cilium_values.programs_own(value):
        e.fail(f"ciliumValues.{path}", "is the program's own value for Cilium, not one to keep beside it")
    return value


def _read_kept_fields(e: _Entry) -> Mapping[str, Mapping[str, Any]]:
    """keptFields.<role>: `metadata.labels`, `metadata.annotations` (strings) and `spec` of one of
    the seven objects, as the owner set them by hand (components.kept_fields)."""
    kept: dict[str, Mapping[str, Any]] = {}
    for role in kept_fields.ROLES:
        fields = e.entry(role)
        metadata = fields.entry("metadata")
        labels = _read_strings_map(metadata, "labels")
        annotations = _read_strings_map(metadata, "annotations")
        for annotation in annotations:
            if kept_fields.reserved(annotation):
                metadata.fail(
                    f"annotations[{json.dumps(annotation)}]",
                    "is not the owner's to keep: the program or kubectl writes it",
                )
        if role == "machineDeployment":
            for annotation in annotations:
                if annotation in NODE_GROUP_KEYS:
                    metadata.fail(
                        f"annotations[{json.dumps(annotation)}]",
                        f"is the program's own annotation: set workers.{NODE_GROUP_KEYS[annotation]}",
                    )
        metadata.done()
        spec = fields.raw("spec", {})
        if not isinstance(spec, dict):
            fields.fail("spec", f"{spec!r} is not an object of the object's spec fields")
            spec = {}
        fields.done()
        body = {
            **(
                {"metadata": {k: v for k, v in (("labels", labels), ("annotations", annotations)) if v}}
                if labels or annotations
                else {}
            ),
            **({"spec": spec} if spec else {}),
        }
        if body:
            kept[role] = body
    e.done()
    return kept


# A Kubernetes object name (RFC 1123 subdomain), as a machine template's.
OBJECT_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")


def _read_template_names(e: _Entry) -> dict[str, str]:
    """templateNames.controlPlane and .worker: what a recovery imports each machine template as."""
    names = {
        role: e.text(role, OBJECT_NAME, "a Kubernetes object name", default="")
        for role in ("controlPlane", "worker")
        if e.has(role)
    }
    e.done()
    return names


def _read_strings_map(e: _Entry, name: str) -> dict[str, str]:
    """A map of strings (labels, annotations); a number or boolean is its text, as `pulumi config
    set --path` may store one typed."""
    value = e.raw(name, {})
    if not isinstance(value, dict) or any(isinstance(v, (dict, list)) or v is None for v in value.values()):
        e.fail(name, f"{value!r} is not an object of strings")
        return {}
    return {str(k): autoscaler_flags.flag_value(v) for k, v in value.items()}


def _check_lab_hosts(e: _Entry, cluster: WorkloadCluster, lab: LabNetwork) -> None:
    """No node and no VIP on an address the lab's own hosts have (a node given one cuts that host
    off), no VIP on the node network's own or broadcast address; and the pool holds a rollout's
    surge. A range may span those two: the in-cluster IPAM provider never hands them out (its
    pools' allocateReservedIPAddresses is false: api/v1alpha2/inclusterippool_types.go)."""
    network = cluster.node_network
    taken = [*lab.hosts, *ipv4_hosts(cluster.dns_servers, "the DNS server {} (dnsServers)")]
    spans = _spans(cluster.node_ip_ranges)
    for address, what in taken:
        if address == cluster.control_plane_endpoint:
            e.fail("controlPlaneEndpoint", f"{address} is {what}")
        for text, (first, last) in spans:
            # The cluster's own gateway in its ranges is refused once, by _read_cluster_network.
            if first <= address <= last and address != cluster.gateway:
                e.fail("nodeIpRanges", f"{text} contains {what}")
    if network.prefixlen < 31:
        for address, what in ((network.network_address, "network"), (network.broadcast_address, "broadcast")):
            if address == cluster.control_plane_endpoint:
                e.fail("controlPlaneEndpoint", f"{address} is the {what} address of {network} (gateway/ipPrefix)")
    pool = sum(int(last) - int(first) + 1 for _, (first, last) in spans)
    needed = cluster.control_plane.replicas + cluster.workers.max_size + 1
    if spans and pool < needed:
        e.warn(
            "nodeIpRanges",
            f"holds {pool} addresses, fewer than controlPlane.replicas + workers.maxSize + 1 = {needed}: a rollout "
            "makes one machine more before it deletes one, and finds no address for it",
        )


def _check_clusters_apart(clusters: Sequence[tuple[_Entry, WorkloadCluster]]) -> None:
    """No two clusters share an address: two kube-vips announcing one VIP, or one address handed
    to nodes of both, break both clusters."""
    for index, (entry, cluster) in enumerate(clusters):
        spans = _spans(cluster.node_ip_ranges)
        for _, earlier in clusters[:index]:
            earlier_spans = _spans(earlier.node_ip_ranges)
            vip, earlier_vip = cluster.control_plane_endpoint, earlier.control_plane_endpoint
            if vip == earlier_vip or any(first <= vip <= last for _, (first, last) in earlier_spans):
                entry.fail("controlPlaneEndpoint", f"{vip} is an address of the cluster {earlier.name}")
            for text, (first, last) in spans:
                if first <= earlier_vip <= last or any(
                    first <= other_last and other_first <= last for _, (other_first, other_last) in earlier_spans
                ):
                    entry.fail("nodeIpRanges", f"{text} overlaps the addresses of the cluster {earlier.name}")


def _spans(ranges: Sequence[str]) -> list[tuple[str, tuple[ipaddress.IPv4Address, ipaddress.IPv4Address]]]:
    return [(text, span) for text in ranges if (span := _address_span(text))]


def _check_taken_over(e: _Entry, cluster: WorkloadCluster) -> None:
    """What an adoption needs (docs/adoption.md, "A workload cluster made with clusterctl"); that
    adopt needs takenOver or the stack's recover is checked with the stack's keys (components.settings)."""
    if cluster.adopt and not cluster.protected:
        e.fail("adopt", "true needs protected: true: a cluster being taken over is never deleted by Pulumi")
    if cluster.template_names and not (cluster.recover and cluster.taken_over):
        e.fail(
            "templateNames",
            "is read only while recovering a taken-over cluster (recover, adopt and takenOver): the record of a "
            "live stack names the templates",
        )
    if cluster.taken_over and e.has("serviceCidr"):
        # clusterctl's template declares none, so kubeadm took its default; declaring one now
        # would change a running cluster's network.
        e.fail("serviceCidr", "must stay unset with takenOver: true; the cluster runs kubeadm's default 10.96.0.0/12")


def _read_workload_kubernetes(e: _Entry) -> str:
    version = e.text("kubernetesVersion", V_SEMVER, "a Kubernetes release of the form v1.35.9")
    if version and release(version)[:2] > NEWEST_WORKLOAD_KUBERNETES:
        newest = ".".join(map(str, NEWEST_WORKLOAD_KUBERNETES))
        e.fail(
            "kubernetesVersion",
            f"{version} is newer than Kubernetes {newest}, the newest that Cluster API v1.12 "
            "(capiCoreVersion; CAPMOX v0.9 is tested with CAPI 1.11 and 1.12) supports for a workload cluster",
        )
    return version


def _read_cluster_network(e: _Entry) -> dict[str, Any]:
    """The nodes' network (as WorkloadCluster's fields): addresses inside the network that the
    gateway and prefix make, the endpoint outside the nodes' ranges."""
    endpoint = e.address("controlPlaneEndpoint")
    ranges = e.strings("nodeIpRanges", "an address, a range a.b.c.d-a.b.c.e or a CIDR", _address_span)
    prefix = e.integer("ipPrefix", IP_PREFIX_RANGE, "prefix length")
    gateway = e.address("gateway")
    vlan_set = e.raw("vlan", default="")
    vlan = None if vlan_set == "" else e.integer("vlan", VLAN_RANGE, "VLAN id")
    network = ipaddress.IPv4Network(f"{gateway}/{prefix}", strict=False) if gateway else None
    spans = _spans(ranges)
    for text, (first, last) in spans:
        if network is not None and not (first in network and last in network):
            e.fail("nodeIpRanges", f"{text} is outside the nodes' network {network} (gateway/ipPrefix)")
    if gateway is not None and any(first <= gateway <= last for _, (first, last) in spans):
        e.fail("gateway", f"{gateway} is inside nodeIpRanges; a node would be given the gateway's address")
    if endpoint is not None and network is not None and endpoint not in network:
        e.fail(
            "controlPlaneEndpoint", f"{endpoint} is outside the nodes' network {network}; kube-vip announces it there"
        )
    if endpoint is not None and endpoint == gateway:
        # kube-vip would answer ARP for the router's address: every host of the VLAN loses its gateway.
        e.fail("controlPlaneEndpoint", f"{endpoint} is the cluster's gateway (gateway)")
    if endpoint is not None and any(first <= endpoint <= last for _, (first, last) in spans):
        e.fail("controlPlaneEndpoint", f"{endpoint} is inside nodeIpRanges; a node could be given the same address")
    return {
        "control_plane_endpoint": endpoint or ipaddress.IPv4Address(0),
        "node_ip_ranges": ranges,
        "ip_prefix": prefix,
        "gateway": gateway or ipaddress.IPv4Address(0),
        "dns_servers": e.strings("dnsServers", "an IP address of a DNS server", is_ip_address),
        "vlan": vlan,
        "pod_cidr": e.network("podCidr") or _NO_NETWORK,
        "service_cidr": e.network("serviceCidr", default="10.96.0.0/12") or _NO_NETWORK,
    }


# Stands in for a network that was refused (the run stops before it is used); it overlaps nothing.
_NO_NETWORK = ipaddress.IPv4Network("0.0.0.0/32")


def _address_span(text: str) -> tuple[ipaddress.IPv4Address, ipaddress.IPv4Address] | None:
    """The first and last address of `a.b.c.d-a.b.c.e`, of a CIDR or of one address (CAPMOX's
    webhook takes all three); None for anything else."""
    try:
        if "-" in text:
            first, last = (ipaddress.IPv4Address(part.strip()) for part in text.split("-", 1))
        elif "/" in text:
            network = ipaddress.IPv4Network(text)
            first, last = network[0], network[-1]
        else:
            first = last = ipaddress.IPv4Address(text.strip())
    except ValueError:
        return None
    return (first, last) if first <= last else None


def _check_pod_and_service_networks(e: _Entry, cluster: WorkloadCluster, lab: LabNetwork) -> None:
    """Neither the pod nor the service network may overlap the other or the lab: a pod address
    that is also a lab address is routed to the pod, and the host behind it is cut off."""
    taken = [
        *lab.networks,
        (cluster.node_network, f"the cluster's node network {cluster.node_network} (gateway/ipPrefix)"),
        (
            ipaddress.ip_network(cluster.control_plane_endpoint),
            f"the control-plane endpoint {cluster.control_plane_endpoint} (controlPlaneEndpoint)",
        ),
        *(
            (ipaddress.ip_network(d), f"the DNS server {d} (dnsServers)")
            for d in cluster.dns_servers
            if is_ip_address(d)
        ),
    ]
    for key, cidr, example in (
        ("podCidr", cluster.pod_cidr, "10.244.0.0/16"),
        ("serviceCidr", cluster.service_cidr, "10.96.0.0/12"),
    ):
        if cidr == _NO_NETWORK:
            continue
        for network, what in taken:
            if network.version == 4 and cidr.overlaps(network):
                if cluster.taken_over:
                    # Made so by clusterctl's template (192.168.0.0/16), and a running cluster's pod
                    # network cannot move: said, not refused.
                    e.warn(key, f"{cidr} overlaps {what}: a host there is unreachable from the cluster's pods")
                else:
                    e.fail(key, f"{cidr} overlaps {what}; pick e.g. {example}")
    if _NO_NETWORK not in (cluster.pod_cidr, cluster.service_cidr) and cluster.pod_cidr.overlaps(cluster.service_cidr):
        e.fail("serviceCidr", f"{cluster.service_cidr} overlaps podCidr {cluster.pod_cidr}")


def _read_sizing(e: _Entry) -> MachineSizing:
    """CAPMOX's template's own defaults: 2 sockets of 4 cores, 16 GiB, a 100 GiB boot disk."""
    return MachineSizing(
        sockets=e.integer("sockets", SOCKETS_RANGE, "sockets", default=2),
        cores=e.integer("cores", CORES_RANGE, "cores", default=4),
        memory_mib=e.integer("memoryMib", MEMORY_MIB_RANGE, "memory MiB", default=16384),
        disk_gib=e.integer("diskGib", DISK_GIB_RANGE, "disk GiB", default=100),
    )


def _read_control_plane(e: _Entry) -> ControlPlane:
    replicas = e.integer("replicas", (1, 5), "control-plane replicas", default=1)
    if replicas not in CONTROL_PLANE_REPLICAS:
        e.fail("replicas", f"{replicas} is not 1, 3 or 5 (etcd needs an odd number of members)")
    control_plane = ControlPlane(replicas=replicas, sizing=_read_sizing(e))
    e.done()
    return control_plane


def _read_workers(e: _Entry) -> Workers:
    min_size = e.integer("minSize", WORKER_COUNT_RANGE, "worker count", default=0)
    max_size = e.integer("maxSize", (1, WORKER_COUNT_RANGE[1]), "worker count")
    if e.has("maxSize") and max_size < min_size:
        e.fail("maxSize", f"{max_size} is below minSize {min_size}")
    workers = Workers(
        min_size=min_size, max_size=max_size, sizing=_read_sizing(e), capacity=_read_capacity(e.entry("capacity"))
    )
    e.done()
    return workers


def _read_capacity(e: _Entry) -> dict[str, str]:
    """workers.capacity: the capacity annotations' values an owner keeps over the derived ones
    (by the annotation's name), as Kubernetes quantities."""
    capacity = {}
    for name, key in CAPACITY_KEYS.items():
        if not e.has(key):
            continue
        value = autoscaler_flags.flag_value(e.raw(key))
        if QUANTITY.fullmatch(value) is None:
            e.fail(key, f"{value!r} is not a Kubernetes quantity such as 8, 16Gi or 100G")
        capacity[name] = value
    e.done()
    return capacity


def _read_autoscaler_timings(e: _Entry) -> AutoscalerTimings:
    """cluster-autoscaler's own defaults; the lab in a box sets them short."""
    duration = "a Go duration such as 10s, 10m or 1h30m"
    timings = AutoscalerTimings(
        scan_interval=e.text("scanInterval", GO_DURATION, duration, default="10s"),
        scale_down_unneeded_time=e.text("scaleDownUnneededTime", GO_DURATION, duration, default="10m"),
        scale_down_delay_after_add=e.text("scaleDownDelayAfterAdd", GO_DURATION, duration, default="10m"),
        max_node_provision_time=e.text("maxNodeProvisionTime", GO_DURATION, duration, default="15m"),
        extra_args=_read_extra_args(e),
    )
    e.done()
    return timings


def _read_extra_args(e: _Entry) -> Mapping[str, str]:
    """autoscaler.extraArgs: flag -> value, as the chart passes them (`--flag=value`)."""
    value = e.raw("extraArgs", {})
    if not isinstance(value, dict):
        e.fail("extraArgs", f"{value!r} is not an object of flags (extraArgs.balance-similar-node-groups: true)")
        return {}
    flags = {}
    for flag, setting in value.items():
        if isinstance(setting, (dict, list)) or setting is None:
            e.fail(f"extraArgs.{flag}", f"{setting!r} is not a flag's value")
        elif (why := autoscaler_flags.refused_to_keep(flag)) is not None:
            e.fail(f"extraArgs.{flag}", why)
        else:
            flags[flag] = autoscaler_flags.flag_value(setting)
    return flags
