"""What a workload VM does with the bootstrap data it boots with, where no VM can run here.

cloud-init renders the data (a `## template: jinja` cloud-config, as Cluster API's kubeadm
bootstrap provider writes it) with the VM's meta-data, as CAPMOX's NoCloud ISO gives it
(`instance-id`: the VM's SMBIOS uuid; `local-hostname`: its name), then runs the kubeadm command of
its runcmd with the configuration file that command names (`kubeadm_run`). A worker's
`kubeadm join` first discovers its cluster (`discover`) and stops where kubeadm would: an API
server endpoint that is not the cluster's control-plane endpoint, a bootstrap token the cluster
does not hold (`bootstrap-token-<id>` in kube-system, for authentication, not expired), no CA pin
(caCertHashes) matching the cluster's CA unless the configuration skips the check. What kubeadm
hands the kubelet (`kubelet_arguments`) is the nodeRegistration's kubelet arguments written to
kubeadm-flags.env and split by systemd as a shell splits words, quotes removed: the `provider-id`
the kubelet receives is what the template's quoting makes of it.

Anything the stand-in cannot render or does not know (a jinja block, a variable the meta-data
lacks, no kubeadm command or two) is refused with the name of what it is, never skipped.
"""

from __future__ import annotations

import base64
import datetime
import hashlib
import re
import shlex
from dataclasses import dataclass
from typing import Any

import yaml
from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from e2e.engine.control_plane import ControlPlane
from e2e.standins.workload.objects import Client
from e2e.standins.workload.vm_guest import Boot

HEADER = "## template: jinja\n#cloud-config\n"
_VARIABLE = re.compile(r"\{\{\s*(.*?)\s*\}\}")
_KUBEADM = re.compile(r"^kubeadm (init|join) --config (\S+)")
# cloud-init's jinja names for the meta-data: `ds.meta_data.<key>` with `-` as `_`, and the
# standardized `v1.*` keys.
_V1 = {"v1.instance_id": "instance-id", "v1.local_hostname": "local-hostname"}
TOKEN_TYPE = "bootstrap.kubernetes.io/token"


@dataclass(frozen=True)
class KubeadmRun:
    phase: str
    """init or join"""
    configuration: dict[str, Any]
    """The Init- or JoinConfiguration the command reads (kubeadm.k8s.io)."""


def render(value: str, meta: dict[str, str]) -> dict[str, Any]:
    """The cloud-config cloud-init reads from the bootstrap data `value`, rendered with `meta`."""
    if not value.startswith(HEADER):
        raise ValueError("the bootstrap data is no jinja cloud-config (Cluster API's kubeadm bootstrap writes one)")
    if "{%" in value or "{#" in value:
        raise ValueError("the bootstrap data has a jinja block or comment: the VM stand-in renders variables only")

    def variable(match: re.Match[str]) -> str:
        name = match.group(1)
        key = _V1.get(name) or name.removeprefix("ds.meta_data.").replace("_", "-")
        if not (name in _V1 or name.startswith("ds.meta_data.")) or key not in meta:
            raise ValueError(f"the bootstrap data names {{{{ {name} }}}}, which the VM's meta-data does not give")
        return meta[key]

    rendered: dict[str, Any] = yaml.safe_load(_VARIABLE.sub(variable, value))
    return rendered


def booted(boot: Boot) -> KubeadmRun:
    """What a workload VM runs as it boots: the user-data of CAPMOX's ISO (the bootstrap data the
    bootstrap provider rendered) with the ISO's meta-data (its SMBIOS uuid, its name)."""
    return kubeadm_run(boot.user_data, boot.meta)


def kubeadm_run(value: str, meta: dict[str, str]) -> KubeadmRun:
    """The one kubeadm command the bootstrap data `value` runs, with the configuration it writes."""
    cloud_config = render(value, meta)
    commands = [
        found for command in cloud_config.get("runcmd", []) if (found := _KUBEADM.match(_command_text(command)))
    ]
    if len(commands) != 1:
        raise ValueError(f"the bootstrap data runs {len(commands)} kubeadm commands, not one")
    phase, path = commands[0].groups()
    written = {entry["path"]: entry["content"] for entry in cloud_config.get("write_files", [])}
    if path not in written:
        raise ValueError(f"kubeadm {phase} reads {path}, which the bootstrap data does not write")
    wanted = "InitConfiguration" if phase == "init" else "JoinConfiguration"
    for document in yaml.safe_load_all(written[path]):
        if document and document.get("kind") == wanted:
            return KubeadmRun(phase, document)
    raise ValueError(f"{path} holds no {wanted}")


def discover(lab: Client, join: dict[str, Any]) -> None:
    """What `kubeadm join` checks with token discovery before it starts the kubelet (a
    ValueError saying what kubeadm would stop at)."""
    cluster: ControlPlane = lab.cluster
    token_discovery = join.get("discovery", {}).get("bootstrapToken")
    if not token_discovery:
        raise ValueError("the JoinConfiguration has no bootstrapToken discovery: the VM stand-in knows no other")
    endpoint = f"{cluster.address}:{cluster.port}"
    if token_discovery.get("apiServerEndpoint") != endpoint:
        raise ValueError(
            f"kubeadm join: apiServerEndpoint {token_discovery.get('apiServerEndpoint')!r}, not {endpoint}"
        )
    token_id, _, token_secret = str(token_discovery.get("token", "")).partition(".")
    held = lab.get("secrets", "v1", "kube-system", f"bootstrap-token-{token_id}")
    data = {key: base64.b64decode(text).decode() for key, text in (held or {}).get("data", {}).items()}
    expires = data.get("expiration")
    if (
        held is None
        or held.get("type") != TOKEN_TYPE
        or data.get("token-secret") != token_secret
        or data.get("usage-bootstrap-authentication") != "true"
        or (expires and datetime.datetime.fromisoformat(expires) <= datetime.datetime.now(datetime.UTC))
    ):
        raise ValueError(f"kubeadm join: bootstrap token {token_id!r} is not one {endpoint} accepts")
    pins = set(token_discovery.get("caCertHashes") or [])
    if not pins and token_discovery.get("unsafeSkipCAVerification"):
        return
    if cluster.pki is None:
        raise ValueError(f"{endpoint} was started without kubeadm's CA, which a join pins")
    ca = x509.load_pem_x509_certificate(cluster.pki.ca.read_bytes())
    spki = ca.public_key().public_bytes(Encoding.DER, PublicFormat.SubjectPublicKeyInfo)
    cluster_pin = "sha256:" + hashlib.sha256(spki).hexdigest()
    if cluster_pin not in pins:
        raise ValueError(f"kubeadm join: none of the CA pins {sorted(pins)} is {endpoint}'s CA {cluster_pin}")


def kubelet_arguments(registration: dict[str, Any]) -> dict[str, str]:
    """The arguments the kubelet receives from kubeadm's nodeRegistration.kubeletExtraArgs (v1beta4
    name/value pairs): kubeadm writes them to kubeadm-flags.env as one quoted string, which systemd
    splits into words, removing quotes, as a shell would."""
    line = " ".join(
        f"--{argument['name']}={argument['value']}" for argument in registration.get("kubeletExtraArgs", [])
    )
    return dict(word.removeprefix("--").split("=", 1) for word in shlex.split(line))


def _command_text(command: Any) -> str:
    return command if isinstance(command, str) else " ".join(command)
