"""k3s on the management VM over SSH, and the admin kubeconfig with its Kubernetes provider."""

from __future__ import annotations

import base64
import hashlib
import json
import re
import shlex
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, cast

import pulumi
import pulumi_command as command
import pulumi_kubernetes as kubernetes
import yaml

from components import adoption
from components.certificate_renewal import CERTIFICATE_RENEWAL_OUTPUT, announced, held_certificate
from components.host_script import host_command, script_command
from components.kubeconfig import rename_k3s_kubeconfig
from components.management_vm import ManagementVm
from components.next_boot import dialed_address
from components.run_records import RunRecords, deployed_output
from components.settings import PROJECT, K3sSettings, VmSettings

# A booting VM refuses or drops SSH for a minute or two: each dial (sshDialAttempts of them) is
# bounded at 10 seconds and spaced by the provider's backoff (up to 5 seconds).
SSH_DIAL_TIMEOUT_SECONDS = 10
NODE_READY_BOUND_SECONDS = 300
# The stack output that records where the admin kubeconfig file is and its write generation, for
# the next run.
KUBECONFIG_FILE_OUTPUT = "kubeconfigFile"
# The stack output that records the SSH host key mgmt-host-ready pinned, with the VM instance it
# belongs to, for the next run's first contact.
SSH_HOST_KEY_OUTPUT = "sshHostKey"
# The stack output that records the k3s version every node ran at the end of the last deployment.
K3S_VERSION_OUTPUT = "k3sVersion"
_K3S_RELEASE = re.compile(r"v(\d+)\.(\d+)\.(\d+)\+k3s(\d+)")


class VersionOrderError(pulumi.RunError):
    """k3sVersion is older than the deployed k3s, or more than one minor version ahead of it."""


def check_k3s_version_order(deployed: Any, wanted: str) -> str:
    """`wanted`, unless k3s cannot get there from `deployed` (the last deployment's
    K3S_VERSION_OUTPUT; none for a stack that has not recorded one): k3s supports no downgrade
    and upgrades one minor version at a time."""
    before = _K3S_RELEASE.fullmatch(deployed) if isinstance(deployed, str) else None
    after = _K3S_RELEASE.fullmatch(wanted)
    if before is None or after is None:
        return wanted
    old, new = (tuple(int(part) for part in match.groups()) for match in (before, after))
    series, next_series = f"v{old[0]}.{old[1]}", f"v{old[0]}.{old[1] + 1}"
    if new < old:
        problem = (
            f"is older: k3s supports no downgrade. Keep {deployed}, or set a newer release of {series} or {next_series}"
        )
    elif new[0] != old[0] or new[1] > old[1] + 1:
        problem = (
            f"skips a minor version: k3s upgrades one minor at a time. Set a {next_series} release, run "
            "`pulumi up`, and go on one minor a run"
        )
    else:
        return wanted
    raise VersionOrderError(
        f"{PROJECT}:k3sVersion: the last deployment runs k3s {deployed}, and {wanted} {problem} (docs/versions.md)"
    )


def first_contact_key(recorded: Any, instance_key: str, reach: str) -> str | None:
    """The host key mgmt-host-ready dials with, from the last deployment's SSH_HOST_KEY_OUTPUT:
    none on a VM instance it did not record (trust on first use); on the same instance, the key
    pinned there once anything else that mgmt-host-ready dials with (`reach`, reach_digest)
    changes, since it then runs again, and from then on; else none, as it had, so a run with
    nothing changed changes nothing."""
    same_vm = isinstance(recorded, Mapping) and recorded.get("instanceKey") == instance_key
    last: Mapping[str, Any] = recorded if same_vm else {}
    host_key = last.get("hostKey")
    if not isinstance(host_key, str) or not host_key:
        return None
    return host_key if last.get("pinned") is True or last.get("reach") != reach else None


def reach_digest(host: str, user: str, private_key: str | None, dial_attempts: int) -> str:
    """Every input of mgmt-host-ready but its host key and triggers, digested: its script, where
    and as whom it dials, with which key (none: the ssh-agent's) and how often. 64 bits of
    SHA-256, which tell nothing about the key."""
    dialed = [script_command("host_ready.sh"), host, user, private_key, dial_attempts, SSH_DIAL_TIMEOUT_SECONDS]
    return hashlib.sha256(json.dumps(dialed).encode()).hexdigest()[:16]


def render_k3s_config(address: str) -> str:
    """/etc/rancher/k3s/config.yaml: no traefik (the lab brings its own ingress, if any), the VM's
    address in the API server certificate, and the admin kubeconfig readable by root only."""
    return yaml.safe_dump(
        {"disable": ["traefik"], "tls-san": [address], "write-kubeconfig-mode": "0600"},
        sort_keys=True,
    )


class K3sNode(pulumi.ComponentResource):
    """Host ready, host keys kept, guest agent, k3s config, k3s at the pinned version, node Ready,
    kubeconfig.

    The first step trusts the VM's SSH host key on first use and prints it; every later step pins
    it, so another machine answering at the VM's address is refused. The next one tells cloud-init
    to keep the host keys at a new instance-id, so a cloud-init change keeps the pinned key right.
    A re-created VM re-runs every step, the first one included, and so is pinned anew. No step has
    a delete command: nothing here ever uninstalls k3s or removes its data.
    """

    connection: command.remote.ConnectionArgs
    """SSH to the VM as the cloud-init user, with the host key pinned."""
    kubeconfig: pulumi.Output[str]
    """Admin kubeconfig (secret), server at the VM's address, names = the VM's name."""
    provider: kubernetes.Provider
    on_cluster: pulumi.ResourceOptions
    certificate_renewal: pulumi.Output[str | None]
    """CERTIFICATE_RENEWAL_OUTPUT: the renewal marker of this run (HeldCertificate.marker)."""
    ssh_host_key: pulumi.Output[dict[str, Any]]
    """SSH_HOST_KEY_OUTPUT: the VM's instance key, the host key pinned for it, the reach_digest of
    this run and whether mgmt-host-ready dialed with the pinned key (first_contact_key)."""
    k3s_version: pulumi.Output[str]
    """K3S_VERSION_OUTPUT: the k3s version every node runs once this run is done."""
    kubeconfig_file: pulumi.Output[dict[str, Any]] | None
    """The kubeconfig file's path and write generation once it is written (KUBECONFIG_FILE_OUTPUT);
    None when kubeconfigPath is unset."""

    def __init__(
        self,
        name: str,
        vm: ManagementVm,
        k3s: K3sSettings,
        vm_settings: VmSettings,
        *,
        adopt: bool,
        records: RunRecords,
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        """`records`: the last deployment's outputs, and where the node's own go for the next run."""
        super().__init__("homelab:index:K3sNode", name, None, opts)
        deployment, ci_user = records.last, vm_settings.ci_user
        # Where the host steps dial the VM: its address, once the last deployment shows they reach it.
        host: pulumi.Input[str] = dialed_address(vm_settings, deployment, adopt=adopt)
        # A run that k3s's version order refuses dials nothing.
        host = _in_version_order(host, k3s.version, deployment)
        host_ready = self._first_contact(name, vm, k3s, ci_user, host=host, deployment=deployment)
        held = held_certificate(deployment)
        read_kubeconfig = self._k3s_steps(
            name, vm.address, k3s.version, after=host_ready, adopt=adopt, renewal=held.apply(lambda h: h.marker)
        )
        # Read once every node is Ready on it (mgmt-node-ready comes before).
        self.k3s_version = read_kubeconfig.id.apply(lambda _: k3s.version)
        self.certificate_renewal = announced(held, read_kubeconfig, ssh=f"ssh {ci_user}@{vm.address}")

        self.kubeconfig = pulumi.Output.secret(
            read_kubeconfig.stdout.apply(lambda text: rename_k3s_kubeconfig(text, vm.address, vm.name))
        )
        self.provider = kubernetes.Provider(
            f"{name}-kubernetes",
            kubeconfig=self.kubeconfig,
            # k3s renews its client certificates, which changes the kubeconfig; only a new VM is a
            # new cluster whose objects must all be created again. Not the VM's name either: a
            # rename is the same cluster. The constant prefix keeps the identity of stacks
            # deployed with the default name as it was.
            cluster_identifier=vm.instance_key.apply(lambda key: f"{PROJECT}/{key}"),
            opts=pulumi.ResourceOptions(parent=self),
        )
        # The cluster lives on the VM's disk: when the VM goes (a rebuild replaces it), so does
        # every object on it, with no call to the API server. Deleting them one by one first,
        # through the provider that is being replaced, failed in the box ("grpc: the client
        # connection is closing") and left the old VM in place.
        self.on_cluster = pulumi.ResourceOptions(provider=self.provider, deleted_with=vm.vm)
        self.kubeconfig_file = _kept_kubeconfig_file(
            f"{name}-kubeconfig-file", k3s.kubeconfig_path, self.kubeconfig, deployment, parent=self
        )
        self.register_outputs({"kubeconfig": self.kubeconfig, CERTIFICATE_RENEWAL_OUTPUT: self.certificate_renewal})
        self._keep(records)

    def _keep(self, records: RunRecords) -> None:
        """What the next run reads of the node."""
        records.keep("kubeconfig", self.kubeconfig)
        # The next run's k3s version order check.
        records.keep(K3S_VERSION_OUTPUT, self.k3s_version)
        # The next run's first contact with the same VM dials with this key.
        records.keep(SSH_HOST_KEY_OUTPUT, self.ssh_host_key)
        # None (no output) until the held admin certificate first nears expiry.
        records.keep(CERTIFICATE_RENEWAL_OUTPUT, self.certificate_renewal)
        # Only with a file to keep: the next run notices the file deleted by hand.
        if self.kubeconfig_file is not None:
            records.keep(KUBECONFIG_FILE_OUTPUT, self.kubeconfig_file)

    def _first_contact(
        self,
        name: str,
        vm: ManagementVm,
        k3s: K3sSettings,
        ci_user: str,
        *,
        host: pulumi.Output[str],
        deployment: pulumi.Output[Mapping[str, Any]],
    ) -> command.remote.Command:
        """mgmt-host-ready, whose output is the host key that self.connection pins from then on.
        It trusts on first use only on a VM instance it has not met: a run that re-runs it on the
        same VM (a new private key, the ssh-agent, an edited host_ready.sh) dials with the key the
        last deployment pinned (SSH_HOST_KEY_OUTPUT, first_contact_key), so no key is ever learnt
        again for it."""
        private_key = pulumi.Output.secret(k3s.ssh_private_key) if k3s.ssh_private_key else None
        reach = pulumi.Output.all(host, private_key).apply(
            lambda values: reach_digest(values[0], ci_user, values[1], k3s.ssh_dial_attempts)
        )
        dial_with = pulumi.Output.all(deployed_output(deployment, SSH_HOST_KEY_OUTPUT), vm.instance_key, reach).apply(
            lambda values: first_contact_key(*values)
        )
        host_ready = host_command(
            f"{name}-host-ready",
            "host_ready.sh",
            [],
            connection=_connection(host, ci_user, private_key, k3s.ssh_dial_attempts, host_key=dial_with),
            triggers=[vm.instance_key],
            opts=pulumi.ResourceOptions(parent=self, depends_on=[vm]),
        )
        host_key = host_ready.stdout.apply(str.strip)
        self.connection = _connection(host, ci_user, private_key, k3s.ssh_dial_attempts, host_key=host_key)
        self._instance_key = vm.instance_key
        # A host's public key is no secret, nor is the digest, though both derive from the
        # private key's Output (the provider marks every output of a command whose connection
        # holds a secret).
        self.ssh_host_key = pulumi.Output.unsecret(
            pulumi.Output.all(vm.instance_key, host_key, reach, dial_with).apply(
                lambda v: {"instanceKey": v[0], "hostKey": v[1], "reach": v[2], "pinned": v[3] is not None}
            )
        )
        return host_ready

    def _k3s_steps(
        self,
        name: str,
        address: str,
        version: str,
        *,
        after: pulumi.Resource,
        adopt: bool,
        renewal: pulumi.Output[str | None],
    ) -> command.remote.Command:
        """From the pinned host key to k3s's admin kubeconfig: the step that reads it, again at a
        new `renewal` marker (HeldCertificate.marker)."""
        config_text = render_k3s_config(address)
        config_digest = hashlib.sha256(config_text.encode()).hexdigest()
        # First after the key is pinned: a cloud-init change (user, keys, name, network) is a new
        # instance at the next reboot, which would otherwise give the VM new host keys.
        keep_host_keys = self.host_step(f"{name}-keep-host-keys", "keep_host_keys.sh", [], after=after, parent=self)
        guest_agent = self.host_step(f"{name}-guest-agent", "guest_agent.sh", [], after=keep_host_keys, parent=self)
        config_b64 = base64.b64encode(config_text.encode()).decode()
        adopting = adoption.script_mode(adopt=adopt)
        k3s_config = self.host_step(
            f"{name}-k3s-config", "k3s_config.sh", [config_b64, *adopting], after=guest_agent, parent=self
        )
        k3s_install = self.host_step(
            f"{name}-k3s-install", "k3s_install.sh", [version, *adopting], after=k3s_config, parent=self
        )
        # A new version or config restarts k3s: wait for the node again after either.
        node_ready = self.host_step(
            f"{name}-node-ready",
            "node_ready.sh",
            [str(NODE_READY_BOUND_SECONDS), version],
            after=k3s_install,
            triggers=[version, config_digest],
            parent=self,
        )
        # k3s writes its admin kubeconfig anew whenever it starts, with a client certificate it
        # renews at start when it is near expiry: read it again after every restart the program
        # causes (a new version or config), as the node wait does, and once when the held
        # certificate enters the renewal window (a restart outside the program may have renewed it).
        return self.host_step(
            f"{name}-read-kubeconfig",
            "read_kubeconfig.sh",
            [],
            after=node_ready,
            triggers=[version, config_digest],
            parent=self,
            optional_trigger=renewal,
            secret_stdout=True,
        )

    def host_step(
        self,
        name: str,
        script: str,
        args: list[str],
        *,
        after: pulumi.Resource,
        parent: pulumi.Resource,
        triggers: Sequence[pulumi.Input[object]] = (),
        optional_trigger: pulumi.Output[Any] | None = None,
        secret_stdout: bool = False,
    ) -> command.remote.Command:
        """A script run on this node over the pinned connection, after `after`; it runs again
        on a new VM and when `triggers` change, or `optional_trigger`, which joins the triggers
        only once it resolves to a value (so a step deployed before it existed keeps its list)."""
        listed: list[pulumi.Input[object]] | pulumi.Output[list[Any]] = [self._instance_key, *triggers]
        if optional_trigger is not None:
            listed = pulumi.Output.all(self._instance_key, *triggers, optional_trigger).apply(
                lambda values: values if values[-1] is not None else values[:-1]
            )
        return host_command(
            name,
            script,
            args,
            connection=self.connection,
            triggers=listed,
            secret_stdout=secret_stdout,
            opts=pulumi.ResourceOptions(parent=parent, depends_on=[after]),
        )


def _in_version_order(
    host: pulumi.Input[str], version: str, deployment: pulumi.Output[Mapping[str, Any]]
) -> pulumi.Output[str]:
    """`host`, once check_k3s_version_order lets `version` follow the deployed one."""
    checked = deployed_output(deployment, K3S_VERSION_OUTPUT).apply(
        lambda deployed: check_k3s_version_order(deployed, version)
    )
    return pulumi.Output.all(host, checked).apply(lambda values: str(values[0]))


def _connection(
    host: pulumi.Input[str],
    user: str,
    private_key: pulumi.Output[str] | None,
    dial_attempts: int,
    *,
    host_key: pulumi.Output[str] | pulumi.Output[str | None],
) -> command.remote.ConnectionArgs:
    """`host_key` resolving to None is sent as no host key: the provider then checks none."""
    return command.remote.ConnectionArgs(
        host=host,
        user=user,
        private_key=private_key,
        host_key=cast("pulumi.Output[str]", host_key),
        dial_error_limit=dial_attempts,
        per_dial_timeout=SSH_DIAL_TIMEOUT_SECONDS,
    )


def _kept_kubeconfig_file(
    name: str,
    path: Path | None,
    kubeconfig: pulumi.Output[str],
    deployment: pulumi.Output[Mapping[str, Any]],
    *,
    parent: pulumi.Resource,
) -> pulumi.Output[dict[str, Any]] | None:
    """The admin kubeconfig file at `path`, written again in a run that finds it gone; what
    KUBECONFIG_FILE_OUTPUT records of it once it is written. Nothing without a path."""
    if path is None:
        return None
    generation = deployed_output(deployment, KUBECONFIG_FILE_OUTPUT).apply(
        lambda recorded: write_generation(path, recorded)
    )
    writer = _kubeconfig_file(name, path, kubeconfig, generation, parent=parent)
    return pulumi.Output.all(writer.id, generation).apply(lambda written: {"path": str(path), "generation": written[1]})


def write_generation(path: Path, recorded: Any) -> int:
    """The kubeconfig file's write generation in this run: the last deployment's for the same
    path (0 without one), one more when the file is not there. The program runs on the machine
    that keeps the file, so it sees a file deleted by hand; nothing else would: the command
    provider never reads the file back."""
    last = recorded if isinstance(recorded, Mapping) and recorded.get("path") == str(path) else {}
    generation = int(last.get("generation") or 0)
    return generation if path.exists() else generation + 1


def _kubeconfig_file(
    name: str,
    path: Path,
    kubeconfig: pulumi.Output[str],
    generation: pulumi.Output[int],
    *,
    parent: pulumi.Resource,
) -> command.local.Command:
    """The admin kubeconfig at `path` on this machine, mode 0600, written again at each new
    `generation` (write_generation). The program writes over no file of anyone else's: created,
    it refuses a path where something else already is, and takes over a regular file that holds
    exactly this kubeconfig (a lost stack's, docs/operations.md "Lost state or passphrase"),
    writing nothing; updated (a new kubeconfig), it rewrites the file it wrote."""
    quoted, directory = shlex.quote(str(path)), shlex.quote(str(path.parent))
    write = f"umask 077 && mkdir -p {directory} && cat > {quoted} && chmod 0600 {quoted}"
    refusal = shlex.quote(
        f"{PROJECT}:kubeconfigPath: {path} exists and holds another kubeconfig, and this program writes no file "
        "over one it did not write: move it away or choose another path, then run again (docs/operations.md, "
        "'Outputs'; after a lost state, the lost stack's file of an older kubeconfig: move it away)"
    )
    same = f"[ -f {quoted} ] && [ ! -L {quoted} ] && cmp -s {quoted} -"
    return command.local.Command(
        name,
        # noclobber (set -C) keeps a file that appears after the check from being overwritten too.
        create=(
            f"if [ -e {quoted} ] || [ -L {quoted} ]; then {same} && exit 0; echo {refusal} >&2; exit 1; fi"
            f" && set -C && {write}"
        ),
        update=write,
        delete=f"rm -f {quoted}",
        # A new path replaces the command, so the old one's delete removes the old file; an
        # update would only write the new one. A new generation (the file went missing) replaces
        # it too, so it writes the file again. Generation 0 is left out: a stack deployed before
        # generations were recorded has only the path there, and its next run changes nothing.
        triggers=generation.apply(lambda number: [str(path), number] if number else [str(path)]),
        stdin=kubeconfig,
        add_previous_output_in_env=False,
        logging=command.local.Logging.STDERR,
        # Delete first: a replacement on the same path (as when the trigger first appears) would
        # otherwise remove the file its replacement has just written.
        opts=pulumi.ResourceOptions(parent=parent, delete_before_replace=True),
    )
