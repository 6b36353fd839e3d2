"""The lab in a box through a lab's life. `whole_box_lifecycle(root)` is the scenario that
tests/test_box_whole.py and tests/test_box_lifecycle.py read
(`in_new_netns("management.lifecycle.whole_box_lifecycle", ...)`, run once for both): the README's first run,
`pulumi up` on the empty box (box.py), a second run that must do nothing, then a lab's life: the
bumps, a rebuild from a new image, the program's SSH key rotated, the state lost and the lab taken
over by a new stack, and a `pulumi destroy` that the locks refuse.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

from e2e.box import scenarios
from e2e.box.box import (
    CAPMOX_BUMP,
    CERT_MANAGER_BUMP,
    K3S_BUMP,
    NEXT_IMAGE_PATH,
    ROTATED_CAPMOX_SECRET,
    SIZE_BUMP,
    VMID,
    Box,
    running,
)
from e2e.box.management import floor, lost_state
from e2e.box.observed import K8S_WRITES, PROGRAM_USER, observe, standin_problems
from e2e.engine import control_plane
from e2e.standins.cluster import cainjector_standin, playbook_lab


def _saved_kubeconfigs(box: Box, outputs: dict[str, Any]) -> tuple[Path, Path]:
    """The admin and read-only kubeconfigs as a user saves them from the stack's outputs."""
    admin, readonly = box.engine.root / "lab-mgmt.yaml", box.engine.root / "lab-mgmt-readonly.yaml"
    for path, output in ((admin, "kubeconfig"), (readonly, "readonlyKubeconfig")):
        path.write_text(outputs[output])
        path.chmod(0o600)
    return admin, readonly


def _kubeconfig_use(box: Box, outputs: dict[str, Any]) -> dict[str, Any]:
    """The stack's kubeconfigs as a user saves and uses them: the admin's lists namespaces; the
    read-only one lists pods but may neither read Secrets nor delete."""
    admin, readonly = _saved_kubeconfigs(box, outputs)
    return {
        "namespaces": box.kubectl(admin, "get", "namespaces", "-o", "name"),
        "readonly_pods": box.kubectl(readonly, "get", "pods", "-A", "-o", "name"),
        "readonly_can_get_secrets": box.kubectl(readonly, "auth", "can-i", "get", "secrets", "-A"),
        "readonly_can_delete_namespaces": box.kubectl(readonly, "auth", "can-i", "delete", "namespaces"),
        "readonly_can_delete_pods": box.kubectl(readonly, "auth", "can-i", "delete", "pods", "-A"),
    }


def _admission(box: Box) -> list[dict[str, Any]]:
    """From the API server's audit log, in order: the CA injector's and the program's writes to
    the webhook configurations and to provider CRs (server-side apply creates one by a patch
    answered 201), each with when it was received and answered (RFC 3339 to the microsecond, so
    they compare as text) and how."""
    resources = {*cainjector_standin.KINDS.values(), *(f"{kind.lower()}s" for kind in playbook_lab.PROVIDERS)}
    found = []
    for event in box.cluster.audit():
        ref, user = event.get("objectRef", {}), event.get("user", {}).get("username")
        if (
            user in {control_plane.INJECTOR_USER, PROGRAM_USER}
            and ref.get("resource") in resources
            and event["verb"] in K8S_WRITES
        ):
            found.append(
                {
                    "user": user,
                    "verb": event["verb"],
                    "resource": ref["resource"],
                    "name": ref.get("name", ""),
                    "dry_run": "dryRun=All" in event.get("requestURI", ""),
                    "received": event["requestReceivedTimestamp"],
                    "answered": event["stageTimestamp"],
                    "code": event.get("responseStatus", {}).get("code"),
                }
            )
    return found


def _installed(box: Box) -> dict[str, Any]:
    """The README's first run, `pulumi up` of the whole program on the empty box, the stack's
    kubeconfigs used, then `pulumi preview --expect-no-changes` and a second `pulumi up` with the
    chart repositories out of reach: they need nothing from them."""
    first = observe(box, "up")
    admission = _admission(box)
    outputs = box.engine.outputs() if first["rc"] == 0 else {}
    use = _kubeconfig_use(box, outputs) if outputs else {}
    with box.charts.down():
        no_changes = observe(box, "preview", "--expect-no-changes")
        second = observe(box, "up")
    return {
        "steps": box.steps,
        "first_up": first,
        "outputs": {key: value for key, value in outputs.items() if "ubeconfig" not in key},
        "secret_outputs": box.engine.secret_outputs() if outputs else [],
        "kubeconfig_use": use,
        "no_changes_preview": no_changes,
        "second_up": second,
        # As they are now: a scenario that goes on (whole_box_lifecycle) adds to the live ones.
        "pods_run": list(box.operator.pods_run),
        "providers_reconciled": [f"{entry['kind']}/{entry['name']}" for entry in box.operator.reconciled],
        "admission": admission,
        "webhook_reviews": list(box.webhook.reviews),
        "injected": list(box.injector.injected),
    }


def _change(
    box: Box,
    settings: tuple[tuple[str, str], ...],
    *,
    secrets: tuple[tuple[str, str], ...] = (),
    before_up: Callable[[], None] | None = None,
    last: bool = False,
) -> dict[str, Any]:
    """A change as docs/operations.md makes one: the config set, `pulumi preview` to see what it
    touches and `pulumi up`. The zero-change preview follows only the `last` change of the life:
    each change's preview and up must list exactly its own resources (tests/test_box_lifecycle.py),
    so a change that left a difference behind fails the next change's checks, and a preview in
    between would cost a whole engine run to prove nothing more."""
    steps = [scenarios._step(box.engine, ("config", "set", *setting)) for setting in settings]
    steps += [scenarios._step(box.engine, ("config", "set", "--secret", key), stdin=value) for key, value in secrets]
    preview = observe(box, "preview")
    if before_up is not None:
        before_up()
    result = {"steps": steps, "preview": preview, "up": observe(box, "up")}
    if last:
        result["no_changes_preview"] = observe(box, "preview", "--expect-no-changes")
    return result


def _node_versions(box: Box) -> dict[str, Any]:
    """kubectl with the admin kubeconfig the stack outputs now: each Node's reported version."""
    admin, _ = _saved_kubeconfigs(box, box.engine.outputs())
    return box.kubectl(admin, "get", "nodes", "-o", "jsonpath={.items[*].status.nodeInfo.kubeletVersion}")


def _capmox_config(box: Box) -> dict[str, Any]:
    """The CAPMOX config Secrets there are and the one the InfrastructureProvider points at."""
    admin, _ = _saved_kubeconfigs(box, box.engine.outputs())
    secrets = box.kubectl(admin, "get", "secrets", "-n", "capmox-system", "-o", "name")
    provider = box.kubectl(
        admin,
        "get",
        "infrastructureprovider",
        "proxmox",
        "-n",
        "capmox-system",
        "-o",
        "jsonpath={.spec.configSecret.name}",
    )
    return {
        "secrets": sorted(secrets["stdout"].split()),
        "config_secret": provider["stdout"],
        "errors": [done["stderr"] for done in (secrets, provider) if done["rc"] != 0],
    }


def _reconciled_since(box: Box, count: int) -> list[str]:
    return [f"{entry['kind']}/{entry['name']}@{entry['version']}" for entry in box.operator.reconciled[count:]]


def _k3s_bump(box: Box) -> dict[str, Any]:
    return {**_change(box, (("k3sVersion", K3S_BUMP),)), "node_versions": _node_versions(box)}


def _bumps(box: Box) -> dict[str, Any]:
    """docs/graph.md's bumps, one at a time: k3s, the cert-manager chart, the CAPMOX provider,
    the CAPMOX token rotated, and the VM's size."""
    result: dict[str, Any] = {"k3s": _k3s_bump(box)}
    result["cert_manager"] = _change(box, (("certManagerVersion", CERT_MANAGER_BUMP),))
    reconciled = len(box.operator.reconciled)
    result["capmox"] = _change(box, (("capmoxVersion", CAPMOX_BUMP),))
    result["capmox"]["reconciled"] = _reconciled_since(box, reconciled)
    result["capmox"]["provider_versions"] = box.engine.outputs()["providerVersions"]
    before = _capmox_config(box)
    result["capmox_token"] = _change(box, (), secrets=(("capmoxTokenSecret", ROTATED_CAPMOX_SECRET),))
    result["capmox_token"]["config_before"] = before
    result["capmox_token"]["config_after"] = _capmox_config(box)
    result["size"] = _change(box, (("vmCores", SIZE_BUMP),))
    return result


def _pinned_host_key(box: Box) -> str:
    """The host key the stack recorded at first contact (mgmt-host-ready's output), which every
    later host step pins."""
    done = box.engine.pulumi("stack", "export", "--stack", "lab", "--show-secrets")
    done.check_returncode()
    for resource in json.loads(done.stdout)["deployment"]["resources"]:
        if resource["urn"].endswith("::mgmt-host-ready"):
            stdout = resource["outputs"]["stdout"]
            # A secret output is kept as its plaintext's JSON.
            return str(json.loads(stdout["plaintext"]) if isinstance(stdout, dict) else stdout).strip()
    raise LookupError("no mgmt-host-ready in the stack")


def _guest_host_key(box: Box) -> str:
    """The ed25519 host key VM 201's sshd serves now, as its disk holds it (type and key)."""
    instance = len(box.guests.log_dirs(VMID)) - 1
    key = box.guests.disk_path(VMID, "/etc/ssh/ssh_host_ed25519_key.pub", instance).read_text()
    return " ".join(key.split()[:2])


def _rebuild(box: Box) -> dict[str, Any]:
    """docs/operations.md's "Rebuilding the VM from a new image": the locks lifted alone, the new
    image with the rebuild allowed, then locked again."""
    result: dict[str, Any] = {"host_key_before": _guest_host_key(box), "pinned_before": _pinned_host_key(box)}
    result["unlock"] = _change(box, (("vmProtected", "false"),))
    url, digest = box.images[NEXT_IMAGE_PATH]
    result["rebuild"] = _change(
        box,
        (("imageUrl", url), ("imageSha256", digest), ("vmRebuildFromImage", "true")),
        before_up=box.follow_new_vm,
    )
    result["host_key_after"] = _guest_host_key(box)
    result["pinned_after"] = _pinned_host_key(box)
    outputs = box.engine.outputs()
    result["kubeconfig_use"] = _kubeconfig_use(box, outputs)
    result["vm_protected_output"] = outputs["vmProtected"]
    result["pods_run"] = box.operator.pods_run
    result["providers_reconciled"] = _reconciled_since(box, 0)
    result["lock"] = _change(box, (("vmRebuildFromImage", "false"), ("vmProtected", "true")))
    return result


# Where the guest's disk holds what the host steps write (and the k3s installer, and apt): k3s's
# config, its binary and unit, cloud-init's drop-in, the packages' records.
HOST_STEP_TREES = ("etc", "usr", "var/lib/dpkg")


def _host_files(box: Box) -> dict[str, list[int]]:
    """Every file the current VM has written under HOST_STEP_TREES (its disk's upper layer), with
    its modification time and size: a file written again, even with the same bytes, shows."""
    upper = box.guests.disk_path(VMID, "/", len(box.guests.log_dirs(VMID)) - 1)
    found = {}
    for tree in HOST_STEP_TREES:
        for directory, _, names in os.walk(upper / tree):
            for name in names:
                path = Path(directory, name)
                stat = path.lstat()
                found["/" + str(path.relative_to(upper))] = [stat.st_mtime_ns, stat.st_size]
    return found


def _fingerprint(public_key: Path) -> str:
    """SHA256:... as sshd logs the key a session was accepted with."""
    done = subprocess.run(["ssh-keygen", "-l", "-f", str(public_key)], capture_output=True, text=True, check=True)
    return done.stdout.split()[1]


def _key_rotation(box: Box) -> dict[str, Any]:
    """docs/operations.md's "SSH key of this program" on the same VM: the owner authorizes a new
    key pair for the VM's user over the old key (with the pinned host key, as they would), sets it
    as sshPrivateKey and runs `pulumi up`; what the run wrote on the host, and which key its
    sessions were accepted with."""
    old = box.engine.root / ".ssh" / "id_ed25519"
    new = box.engine.root / ".ssh" / "id_ed25519_rotated"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "owner@laptop", "-f", str(new)], check=True)
    pinned = _pinned_host_key(box)
    known_hosts = box.engine.root / "known_hosts_rotation"
    known_hosts.write_text(f"{box.site.address} {pinned}\n")
    new_public = new.with_suffix(".pub").read_text()
    result: dict[str, Any] = {
        "authorized": scenarios._ssh(
            old, known_hosts, "cat >> ~/.ssh/authorized_keys", stdin=new_public, address=box.site.address
        ),
        "old_fingerprint": _fingerprint(old.with_suffix(".pub")),
        "new_fingerprint": _fingerprint(new.with_suffix(".pub")),
        "pinned": pinned,
    }
    before = _host_files(box)
    result.update(_change(box, (), secrets=(("sshPrivateKey", new.read_text()),), last=True))
    after = _host_files(box)
    result["written"] = sorted(path for path in before.keys() | after.keys() if before.get(path) != after.get(path))
    result["host_files"] = len(after)
    result["pinned_after"] = _pinned_host_key(box)
    result["recorded"] = box.engine.outputs()["sshHostKey"]
    return result


def whole_box_bench(root: str) -> dict[str, Any]:
    """`make bench`'s: the first run, the no-op second one, then the no-op against the engine's
    floor (floor.py: each `pulumi up` in turn, the chart repositories down; then one traced run
    of each), and a k3s bump."""
    with running(Path(root)) as box:
        result = _installed(box)
        if result["second_up"]["rc"] == 0:
            floor_engine = floor.floor_engine(box, box.engine.outputs()["kubeconfig"])
            with box.charts.down():
                result["bench"] = floor.interleaved(floor_engine, lambda: observe(box, "up"))
                result["traced"] = {
                    "floor": floor.traced_up(floor_engine, Path(root) / "grpc-floor.jsonl"),
                    "program": floor.traced_up(box.engine, Path(root) / "grpc-program.jsonl"),
                }
            result["k3s_bump"] = _k3s_bump(box)
        return {**result, **standin_problems(box)}


def whole_box_lifecycle(root: str) -> dict[str, Any]:
    """The first run and the no-op second one (`_installed`), then the bumps, a rebuild from a
    new image, a new SSH key for the program, the state lost and the lab taken over by a new stack
    (lost_state.py), and a `pulumi destroy` of that stack that the locks refuse."""
    with running(Path(root)) as box:
        result = _installed(box)
        if result["second_up"]["rc"] == 0:
            result["bumps"] = _bumps(box)
            result["rebuild"] = _rebuild(box)
            result["key_rotation"] = _key_rotation(box)
            # The state and its passphrase lost: a new stack takes the lab over, and is the one
            # whose destroy the locks refuse.
            result["recovery"] = lost_state.recovered(box)
            result["destroy"] = observe(box, "destroy")
            result["vm_running_after_destroy"] = box.guests.running(VMID)
        return {**result, **standin_problems(box)}
