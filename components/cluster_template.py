"""A workload cluster's Cluster API objects: CAPMOX's own default `cluster-template.yaml` of the
release the cluster names (its templateVersion), rendered as `clusterctl generate cluster` renders
it, then patched where the template is wrong for this lab.

The program writes none of these objects by hand, so that a cluster clusterctl made from the same
template (the owner's lab1, taken over in issue 31) has the very objects the program declares. The
template is a release asset of CAPMOX, fetched once into the project's folder by
components.charts (`kept_asset`): there is no index listing its digest, so the first download is
trusted and its sha256 recorded beside it (trust on first use); every later run checks the file
against that record.

The template sizes both ProxmoxMachineTemplates with the same NUM_SOCKETS, NUM_CORES, MEMORY_MIB
and BOOT_VOLUME_SIZE. The program renders it twice, with the control plane's sizing and with the
workers', takes each machine template from its own rendering and everything else from the first;
the two renderings must agree on everything else, or the template changed in a way this module
does not know (it stops, naming the object).
"""

from __future__ import annotations

import copy
import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pulumi
import yaml

from components import kept_fields
from components.settings import MachineSizing, WorkloadCluster
from components.settings.workload import (
    CAPACITY_ANNOTATION,
    MAX_SIZE_ANNOTATION,
    MIN_SIZE_ANNOTATION,
    derived_capacity,
)

DIGEST_LENGTH = 8

# The objects the template renders, by kind, and how many of each.
KINDS = {
    "Cluster": 1,
    "ProxmoxCluster": 1,
    "KubeadmControlPlane": 1,
    "ProxmoxMachineTemplate": 2,
    "MachineDeployment": 1,
    "KubeadmConfigTemplate": 1,
}

# clusterctl's envsubst (drone/envsubst): `${VAR}`, and with a default `${VAR:=d}` and `${VAR:-d}`
# (unset or empty) or `${VAR=d}` and `${VAR-d}` (unset only). A bare `$VAR` is not a variable
# (the template's kube-vip script has shell ones).
_REFERENCE = re.compile(r"\$\{([^}]*)\}")
_EXPRESSION = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)(?:(:?[-=])(.*))?", re.DOTALL)


class ClusterTemplateError(pulumi.RunError):
    """The template cannot be rendered into the objects this program knows (a RunError: the CLI
    shows the message alone)."""


def substitute(text: str, variables: Mapping[str, str | None]) -> str:
    """`text` with every `${...}` replaced as clusterctl does; a variable that is None is unset.
    A variable the template needs with no default and no value, or a form of `${...}` that
    clusterctl's templates do not use, stops the run, naming it."""
    missing: list[str] = []

    def replace(match: re.Match[str]) -> str:
        expression = _EXPRESSION.fullmatch(match[1])
        if expression is None or "${" in (expression[3] or ""):
            raise ClusterTemplateError(f"the cluster template uses {match[0]!r}, which this program cannot render")
        name, operator, default = expression.groups()
        value = variables.get(name)
        if operator is None:
            if value is None:
                missing.append(name)
            return value or ""
        if value is None or (operator.startswith(":") and value == ""):
            return str(default)
        return value

    rendered = _REFERENCE.sub(replace, text)
    if missing:
        raise ClusterTemplateError(
            f"the cluster template needs {', '.join(sorted(set(missing)))}, which this program does not supply "
            "and which have no default; a newer templateVersion may need a new setting"
        )
    return rendered


def template_variables(cluster: WorkloadCluster, sizing: MachineSizing) -> dict[str, str | None]:
    """What clusterctl would take from the environment or clusterctl.yaml, from the settings.
    The lists are written as clusterctl.yaml writes them (`[a,b]`); the SSH keys as YAML strings
    inside the template's brackets, so that a key's comment cannot break the YAML. None leaves
    a variable unset, so the template's default applies, as it does for clusterctl."""
    return {
        "CLUSTER_NAME": cluster.name,
        "KUBERNETES_VERSION": cluster.kubernetes_version,
        "CONTROL_PLANE_MACHINE_COUNT": str(cluster.control_plane.replicas),
        # Only for the rendering: the MachineDeployment's replicas are dropped (patch_machine_deployment).
        "WORKER_MACHINE_COUNT": str(cluster.workers.min_size),
        "CONTROL_PLANE_ENDPOINT_IP": str(cluster.control_plane_endpoint),
        "NODE_IP_RANGES": f"[{','.join(cluster.node_ip_ranges)}]",
        "IP_PREFIX": str(cluster.ip_prefix),
        "GATEWAY": str(cluster.gateway),
        "DNS_SERVERS": f"[{','.join(cluster.dns_servers)}]",
        "VM_SSH_KEYS": ",".join(json.dumps(key) for key in cluster.ssh_public_keys),
        "PROXMOX_SOURCENODE": cluster.source_node,
        "TEMPLATE_VMID": str(cluster.template_vm_id),
        "BOOT_VOLUME_DEVICE": cluster.boot_volume_device,
        "BRIDGE": cluster.bridge,
        "ALLOWED_NODES": f"[{','.join(cluster.allowed_nodes)}]" if cluster.allowed_nodes else None,
        "NUM_SOCKETS": str(sizing.sockets),
        "NUM_CORES": str(sizing.cores),
        "MEMORY_MIB": str(sizing.memory_mib),
        "BOOT_VOLUME_SIZE": str(sizing.disk_gib),
        "VIP_NETWORK_INTERFACE": cluster.vip_interface or None,
    }


def digested_name(name: str, spec: Mapping[str, Any]) -> str:
    """A machine template's name with a digest of its spec: Cluster API's machine templates are
    immutable, so another spec is another template. It is the template's Pulumi name always, and
    its Kubernetes name unless the cluster was taken over with it (components.cluster_takeover)."""
    return f"{name}-{spec_digest(spec, DIGEST_LENGTH)}"


def spec_digest(spec: Any, length: int) -> str:
    """The first `length` hex digits of the sha256 of `spec` as canonical JSON."""
    canonical = json.dumps(spec, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:length]


@dataclass(frozen=True)
class ClusterObjects:
    """The rendered and patched objects of one workload cluster, as plain data."""

    cluster: dict[str, Any]
    proxmox_cluster: dict[str, Any]
    control_plane: dict[str, Any]
    control_plane_template: dict[str, Any]
    worker_template: dict[str, Any]
    worker_config: dict[str, Any]
    machine_deployment: dict[str, Any]
    made_names: dict[str, str] = field(default_factory=dict)
    """Each machine template's digested name -> the name the template gives it, as clusterctl
    named it (`<cluster>-control-plane`, `<cluster>-worker`)."""

    def roles(self) -> dict[str, dict[str, Any]]:
        """The seven objects by their keptFields role (components.kept_fields.ROLES)."""
        return dict(
            zip(
                kept_fields.ROLES,
                (
                    *(self.cluster, self.proxmox_cluster, self.control_plane, self.control_plane_template),
                    *(self.worker_template, self.worker_config, self.machine_deployment),
                ),
                strict=True,
            )
        )

    def resources(self) -> list[dict[str, Any]]:
        """The seven objects."""
        return [
            self.cluster,
            self.proxmox_cluster,
            self.control_plane,
            self.control_plane_template,
            self.worker_template,
            self.worker_config,
            self.machine_deployment,
        ]


def render_cluster(template: str, cluster: WorkloadCluster) -> ClusterObjects:
    """The cluster's objects: rendered with each machine template's own sizing, then patched."""
    control_plane = _split(substitute(template, template_variables(cluster, cluster.control_plane.sizing)))
    workers = _split(substitute(template, template_variables(cluster, cluster.workers.sizing)))
    objects = ClusterObjects(
        cluster=control_plane.one("Cluster"),
        proxmox_cluster=control_plane.one("ProxmoxCluster"),
        control_plane=control_plane.one("KubeadmControlPlane"),
        control_plane_template=control_plane.referenced_template("KubeadmControlPlane"),
        worker_template=workers.referenced_template("MachineDeployment"),
        worker_config=control_plane.one("KubeadmConfigTemplate"),
        machine_deployment=control_plane.one("MachineDeployment"),
    )
    control_plane.check_same_as(workers)
    return _patched(objects, cluster)


@dataclass(frozen=True)
class _Rendering:
    objects: list[dict[str, Any]]

    def of_kind(self, kind: str) -> list[dict[str, Any]]:
        return [o for o in self.objects if o["kind"] == kind]

    def one(self, kind: str) -> dict[str, Any]:
        return copy.deepcopy(self.of_kind(kind)[0])

    def referenced_template(self, referrer: str) -> dict[str, Any]:
        """The ProxmoxMachineTemplate the KubeadmControlPlane or the MachineDeployment names."""
        spec = self.one(referrer)["spec"]
        name = (spec["machineTemplate"] if referrer == "KubeadmControlPlane" else spec["template"])["spec"][
            "infrastructureRef"
        ]["name"]
        found = [t for t in self.of_kind("ProxmoxMachineTemplate") if t["metadata"]["name"] == name]
        if len(found) != 1:
            raise ClusterTemplateError(f"the cluster template's {referrer} names no ProxmoxMachineTemplate {name!r}")
        return copy.deepcopy(found[0])

    def check_same_as(self, other: _Rendering) -> None:
        """Only the machine templates may differ between two sizings."""
        for mine, theirs in zip(self.objects, other.objects, strict=True):
            if mine["kind"] != "ProxmoxMachineTemplate" and mine != theirs:
                raise ClusterTemplateError(
                    f"the cluster template's {mine['kind']} {mine['metadata']['name']} depends on the machine "
                    "sizing, which this program renders per machine template only"
                )


def _split(rendered: str) -> _Rendering:
    """The rendered YAML's objects, which must be exactly the kinds (and counts) of KINDS."""
    try:
        objects = [o for o in yaml.safe_load_all(rendered) if o is not None]
    except yaml.YAMLError as error:
        raise ClusterTemplateError(f"the rendered cluster template is not YAML: {error}") from None
    kinds = sorted(str(o.get("kind")) if isinstance(o, dict) else repr(o) for o in objects)
    expected = sorted(kind for kind, count in KINDS.items() for _ in range(count))
    if kinds != expected:
        raise ClusterTemplateError(
            f"the cluster template renders {kinds}, not the objects this program knows ({expected}); "
            "a templateVersion whose template differs needs the program changed"
        )
    return _Rendering(objects)


def _patched(objects: ClusterObjects, cluster: WorkloadCluster) -> ClusterObjects:
    """What the template gets wrong for this lab, and the machine templates' digested names.
    Of a cluster clusterctl made (takenOver), the networks stay as it rendered them; the fields
    the owner set by hand and keeps (keptFields) are rendered beside the program's."""
    for resource in objects.resources():
        # clusterctl puts them in --target-namespace the same way; the template names none.
        resource["metadata"]["namespace"] = cluster.namespace
    network = objects.cluster["spec"].setdefault("clusterNetwork", {})
    # The template's pod network 192.168.0.0/16 overlaps the lab; Cilium (ipam.mode=kubernetes)
    # takes the node CIDRs from it. The services get theirs (kubeadm's default unless set).
    network["pods"] = {"cidrBlocks": [str(cluster.pod_cidr)]}
    if not cluster.taken_over:
        network["services"] = {"cidrBlocks": [str(cluster.service_cidr)]}
    for template in (objects.control_plane_template, objects.worker_template):
        _set_vlan(template, cluster.vlan)
    _patch_machine_deployment(objects.machine_deployment, cluster)
    _kept(objects, cluster)
    _digest_templates(objects)
    return objects


def _set_vlan(template: dict[str, Any], vlan: int | None) -> None:
    """The template tags no VLAN; the lab's nodes need theirs on net0 (CAPMOX's `vlan`, 1..4094)."""
    if vlan is None:
        return
    devices = template["spec"]["template"]["spec"]["network"]["networkDevices"]
    net0 = [device for device in devices if device.get("name") == "net0"]
    if len(net0) != 1:
        raise ClusterTemplateError(f"the cluster template's {template['metadata']['name']} has no net0 to tag")
    net0[0]["vlan"] = vlan


def _patch_machine_deployment(deployment: dict[str, Any], cluster: WorkloadCluster) -> None:
    spec = deployment["spec"]
    # cluster-autoscaler owns the replicas (through /scale); Cluster API's webhook defaults them to
    # the min size on creation. Never an input: ignoreChanges on it conflicts under server-side
    # apply (pulumi-kubernetes#2542), and patchForce would take it back from the autoscaler.
    spec.pop("replicas", None)
    # The template's `matchLabels:` is null, which the CRD's object type does not allow (the API
    # server prunes it, and Cluster API's webhook fills it in): leave it out, keep the selector.
    if spec.get("selector", {}).get("matchLabels", {}) is None:
        del spec["selector"]["matchLabels"]
    # Rendered while adopting too: the takeover's check compares each with the running one where
    # the owner's hand-installed autoscaler put it there (components.cluster_takeover).
    deployment["metadata"].setdefault("annotations", {}).update(program_annotations(cluster))


def program_annotations(cluster: WorkloadCluster) -> dict[str, str]:
    """The node group's annotations: min and max, and for scale from zero the capacity of a new
    node (CAPMOX publishes none on its templates), derived from the worker sizing unless kept."""
    return {
        MIN_SIZE_ANNOTATION: str(cluster.workers.min_size),
        MAX_SIZE_ANNOTATION: str(cluster.workers.max_size),
        **{
            f"{CAPACITY_ANNOTATION}{name}": value
            for name, value in {**derived_capacity(cluster.workers.sizing), **cluster.workers.capacity}.items()
        },
    }


def _kept(objects: ClusterObjects, cluster: WorkloadCluster) -> None:
    """The entry's keptFields rendered beside the program's fields (components.kept_fields)."""
    for role, fields in cluster.kept_fields.items():
        body = objects.roles()[role]
        try:
            kept_fields.merge(body, fields, f"{cluster.key}.keptFields.{role}")
        except kept_fields.KeptFieldError as error:
            raise ClusterTemplateError(f"{cluster.name}: {error}") from None


def _digest_templates(objects: ClusterObjects) -> None:
    """Each ProxmoxMachineTemplate named after its spec, and its referrer pointed at that name."""
    for template, ref in (
        (objects.control_plane_template, objects.control_plane["spec"]["machineTemplate"]["spec"]),
        (objects.worker_template, objects.machine_deployment["spec"]["template"]["spec"]),
    ):
        made = template["metadata"]["name"]
        name = digested_name(made, template["spec"])
        objects.made_names[name] = made
        template["metadata"]["name"] = name
        ref["infrastructureRef"]["name"] = name
