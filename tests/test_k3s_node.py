"""k3s over SSH: the commands, their order and triggers, the pinned host key, secrets, the
Kubernetes provider's identity, and what each kind of change re-runs."""

from __future__ import annotations

import base64
import hashlib
import itertools
import shlex
import stat
import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from harness import (
    DUMMY_SECRETS,
    HOST_KEY,
    K3S_KUBECONFIG,
    SECRET,
    Run,
    changed,
    client_certificate,
    contains_plain,
    k3s_kubeconfig,
    not_after,
    replaced,
    run_program,
)
from pulumi.runtime import rpc

import components.host_script
import components.k3s_node
from components.certificate_renewal import HeldCertificate, renewal_warning
from components.host_script import SCRIPTS_DIR
from components.k3s_node import VersionOrderError, check_k3s_version_order
from components.kubeconfig import rename_k3s_kubeconfig
from components.next_boot import ReachChangedError

COMMAND = "command:remote:Command"
K8S_PROVIDER = ("pulumi:providers:kubernetes", "mgmt-kubernetes")
VM = ("proxmoxve:index/vmLegacy:VmLegacy", "mgmt-vm")
STEPS = ["host-ready", "keep-host-keys", "guest-agent", "k3s-config", "k3s-install", "node-ready", "read-kubeconfig"]
SCRIPTS = {
    "host-ready": "host_ready.sh",
    "keep-host-keys": "keep_host_keys.sh",
    "guest-agent": "guest_agent.sh",
    "k3s-config": "k3s_config.sh",
    "k3s-install": "k3s_install.sh",
    "node-ready": "node_ready.sh",
    "read-kubeconfig": "read_kubeconfig.sh",
}
INSTANCE = "201/BC:24:11:4A:00:01"
K3S_CONFIG = {"disable": ["traefik"], "tls-san": ["192.168.4.21"], "write-kubeconfig-mode": "0600"}
HOST_STEPS = {(COMMAND, f"mgmt-{step}") for step in STEPS}


@pytest.fixture(scope="module")
def lab() -> Run:
    return run_program()


def step(run: Run, name: str) -> dict[str, Any]:
    return run.get(COMMAND, f"mgmt-{name}").plain


def argv(run: Run, name: str) -> list[str]:
    """The command line of a host step: sudo bash -c <script> <script name> args..."""
    return shlex.split(step(run, name)["create"])


def test_every_step_runs_its_own_script_as_root(lab: Run) -> None:
    for name, script in SCRIPTS.items():
        words = argv(lab, name)
        assert words[:3] == ["sudo", "bash", "-c"]
        assert words[3] == (SCRIPTS_DIR / script).read_text()
        assert words[4] == script


def test_step_arguments(lab: Run) -> None:
    assert argv(lab, "host-ready")[5:] == []
    assert argv(lab, "keep-host-keys")[5:] == []
    assert argv(lab, "guest-agent")[5:] == []
    (config_b64,) = argv(lab, "k3s-config")[5:]
    assert yaml.safe_load(base64.b64decode(config_b64)) == K3S_CONFIG
    assert argv(lab, "k3s-install")[5:] == ["v1.35.8+k3s1"]
    assert argv(lab, "node-ready")[5:] == ["300", "v1.35.8+k3s1"]
    assert argv(lab, "read-kubeconfig")[5:] == []


def test_steps_run_in_order(lab: Run) -> None:
    for earlier, later in itertools.pairwise(STEPS):
        assert lab.depends_on(lab.get(COMMAND, f"mgmt-{later}"), lab.get(COMMAND, f"mgmt-{earlier}")), later
    vm = lab.get(*VM)
    assert lab.depends_on(lab.get(COMMAND, "mgmt-host-ready"), vm)


def test_triggers_are_explicit_and_deterministic(lab: Run) -> None:
    digest = hashlib.sha256(yaml.safe_dump(K3S_CONFIG, sort_keys=True).encode()).hexdigest()
    expected = {name: [INSTANCE] for name in STEPS}
    expected["node-ready"] = [INSTANCE, "v1.35.8+k3s1", digest]
    expected["read-kubeconfig"] = [INSTANCE, "v1.35.8+k3s1", digest]
    assert {name: step(lab, name)["triggers"] for name in STEPS} == expected


def test_first_contact_records_the_host_key_and_every_later_step_pins_it(lab: Run) -> None:
    assert "hostKey" not in step(lab, "host-ready")["connection"]
    for name in STEPS[1:]:
        assert step(lab, name)["connection"]["hostKey"] == HOST_KEY, name


# --- first contact with a VM met before ----------------------------------------------------------
ROTATED_KEY = "-----BEGIN OPENSSH PRIVATE KEY-----\nbmV3LWtleQ==\n-----END OPENSSH PRIVATE KEY-----\n"
HOST_READY = (COMMAND, "mgmt-host-ready")


def test_the_pinned_host_key_is_recorded_with_its_vm_instance(lab: Run) -> None:
    record, secret = lab.outputs["sshHostKey"]
    assert secret is False
    assert (record["instanceKey"], record["hostKey"], record["pinned"]) == (INSTANCE, HOST_KEY, False)
    assert DUMMY_SECRETS["sshPrivateKey"] not in str(record)


@pytest.fixture
def edited_host_ready(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An upgrade of the program that edits host_ready.sh."""
    for script in SCRIPTS_DIR.iterdir():
        (tmp_path / script.name).write_text(script.read_text())
    (tmp_path / "host_ready.sh").write_text(SCRIPTS_DIR.joinpath("host_ready.sh").read_text() + "# edited\n")
    monkeypatch.setattr(components.host_script, "SCRIPTS_DIR", tmp_path)


@pytest.mark.parametrize(
    ("overrides", "unset", "edited"),
    [({"sshPrivateKey": ROTATED_KEY}, (), False), ({}, ("sshPrivateKey",), False), ({}, (), True)],
    ids=["new private key", "ssh-agent", "edited host_ready.sh"],
)
def test_first_contact_with_the_same_vm_again_dials_with_the_key_it_pinned(
    lab: Run, overrides: dict[str, Any], unset: tuple[str, ...], edited: bool, request: pytest.FixtureRequest
) -> None:
    """Each of these re-runs mgmt-host-ready on the VM it met before: it dials with the key the
    last deployment pinned for that VM, never trusting whatever answers; later runs keep it so."""
    if edited:
        request.getfixturevalue("edited_host_ready")
    again = run_program(overrides, unset, previous_outputs=deployed(lab))
    assert HOST_READY in changed(lab, again)
    assert step(again, "host-ready")["connection"]["hostKey"] == HOST_KEY
    assert again.outputs["sshHostKey"][0]["pinned"] is True
    for name in STEPS[1:]:
        assert step(again, name)["connection"]["hostKey"] == HOST_KEY, name
    assert changed(again, run_program(overrides, unset, previous_outputs=deployed(again))) == set()


def test_a_run_with_nothing_changed_leaves_first_contact_as_it_was(lab: Run) -> None:
    again = run_program(previous_outputs=deployed(lab))
    assert changed(lab, again) == set()
    assert "hostKey" not in step(again, "host-ready")["connection"]


def test_a_new_vm_is_met_on_first_use_again(lab: Run) -> None:
    rebuilt = run_program(previous_outputs=deployed(lab), vm_mac="BC:24:11:4A:00:02")
    assert "hostKey" not in step(rebuilt, "host-ready")["connection"]
    assert rebuilt.outputs["sshHostKey"][0]["instanceKey"] == "201/BC:24:11:4A:00:02"


def test_a_stack_deployed_before_the_record_changes_nothing_on_upgrade(lab: Run) -> None:
    before = {key: value for key, value in deployed(lab).items() if key != "sshHostKey"}
    assert changed(lab, run_program(previous_outputs=before)) == set()


def test_connection(lab: Run) -> None:
    connection = step(lab, "guest-agent")["connection"]
    assert connection == {
        "host": "192.168.4.21",
        "port": 22,
        "user": "ubuntu",
        "privateKey": DUMMY_SECRETS["sshPrivateKey"],
        "hostKey": HOST_KEY,
        "dialErrorLimit": 60,
        "perDialTimeout": 10,
    }


def test_every_step_dials_as_often_as_the_setting_says() -> None:
    patient = run_program(overrides={"sshDialAttempts": 12})
    for name in STEPS:
        assert step(patient, name)["connection"]["dialErrorLimit"] == 12, name


def test_private_key_is_secret_and_never_plain(lab: Run) -> None:
    for name in STEPS:
        assert set(lab.get(COMMAND, f"mgmt-{name}").inputs["connection"]) == {SECRET}
    for resource in lab.resources.values():
        assert not contains_plain(resource.inputs, "ZHVtbXk="), resource.name


def test_ssh_agent_is_used_when_no_private_key_is_set() -> None:
    run = run_program(unset=("sshPrivateKey",))
    assert "privateKey" not in step(run, "guest-agent")["connection"]


def test_nothing_secret_is_sent_back_or_logged(lab: Run) -> None:
    for name in STEPS:
        inputs = step(lab, name)
        assert inputs["addPreviousOutputInEnv"] is False, name
        # No step undoes anything on the host, whatever happens to the resource.
        assert "delete" not in inputs, name
        assert "environment" not in inputs, name
    kubeconfig = lab.get(COMMAND, "mgmt-read-kubeconfig")
    assert "stdout" in kubeconfig.additional_secret_outputs
    assert kubeconfig.plain["logging"] == "stderr"


def test_kubeconfig_output_is_secret_and_renamed(lab: Run) -> None:
    text, secret = lab.outputs["kubeconfig"]
    assert secret is True
    doc = yaml.safe_load(text)
    assert doc["current-context"] == "lab-mgmt"
    assert doc["clusters"][0]["cluster"]["server"] == "https://192.168.4.21:6443"
    assert doc["users"][0]["user"] == yaml.safe_load(K3S_KUBECONFIG)["users"][0]["user"]


def test_kubernetes_provider_has_a_stable_identity_and_a_secret_kubeconfig(lab: Run) -> None:
    provider = lab.get(*K8S_PROVIDER)
    assert set(provider.inputs["kubeconfig"]) == {SECRET}
    # The identity follows the VM instance only: renewed client certificates (a new kubeconfig
    # text) update the provider in place instead of replacing every object on it.
    assert provider.plain["clusterIdentifier"] == f"lab-mgmt/{INSTANCE}"


def test_kubernetes_objects_use_the_explicit_provider(lab: Run) -> None:
    provider = lab.get(*K8S_PROVIDER)
    # Those inside a workload cluster use that cluster's own provider (test_workload_cluster.py).
    k8s = [
        r
        for r in lab.resources.values()
        if r.type.startswith("kubernetes:") and "WorkloadCluster$pulumi:providers" not in r.provider
    ]
    assert k8s
    for resource in k8s:
        assert resource.provider.startswith(provider.urn + "::"), resource.name


def test_the_objects_on_the_cluster_go_with_the_vm(lab: Run) -> None:
    """A rebuild deletes the VM, and the cluster on its disk with it: the engine then skips the
    delete of each object on the cluster instead of calling the old cluster's API server."""
    vm = lab.get(*VM)
    provider = lab.get(*K8S_PROVIDER)
    # A read (`lab1-admin-kubeconfig`, the Secret Cluster API keeps) takes no options; nothing to delete.
    on_cluster = [
        r
        for r in lab.resources.values()
        if r.provider.startswith(provider.urn + "::") and not r.name.endswith("-admin-kubeconfig")
    ]
    assert len(on_cluster) > 10
    for resource in on_cluster:
        assert resource.deleted_with == vm.urn, resource.name
    assert {r.name for r in lab.resources.values() if r.deleted_with} == {r.name for r in on_cluster}


def test_a_second_run_re_runs_nothing(lab: Run) -> None:
    assert changed(lab, run_program()) == set()


def test_the_deployed_k3s_version_is_a_stack_output(lab: Run) -> None:
    assert lab.outputs["k3sVersion"] == ("v1.35.8+k3s1", False)


@pytest.mark.parametrize("wanted", ["v1.35.8+k3s1", "v1.35.9+k3s1", "v1.35.8+k3s2", "v1.36.0+k3s1", "v1.36.4+k3s1"])
def test_k3s_may_stay_or_go_up_by_a_release_or_one_minor(wanted: str) -> None:
    assert check_k3s_version_order("v1.35.8+k3s1", wanted) == wanted


@pytest.mark.parametrize(
    ("wanted", "problem"),
    [
        (
            "v1.34.5+k3s1",
            "is older: k3s supports no downgrade. Keep v1.35.8+k3s1, or set a newer release of v1.35 or v1.36",
        ),
        ("v1.35.7+k3s3", "is older: k3s supports no downgrade"),
        ("v1.35.8+k3s0", "is older: k3s supports no downgrade"),
    ],
    ids=["older minor", "older patch", "older k3s revision"],
)
def test_k3s_going_down_or_skipping_a_minor_is_refused_before_any_host_step_dials(
    lab: Run, wanted: str, problem: str
) -> None:
    record = Run()
    with pytest.raises(VersionOrderError) as refused:
        run_program({"k3sVersion": wanted}, previous_outputs=deployed(lab), preview=True, record=record)
    message = str(refused.value)
    assert message.startswith(f"lab-mgmt:k3sVersion: the last deployment runs k3s v1.35.8+k3s1, and {wanted} {problem}")
    assert message.endswith("(docs/versions.md)")
    assert not [r for r in record.resources.values() if r.type == COMMAND]


def test_k3s_skipping_a_minor_is_refused_before_any_host_step_dials(lab: Run) -> None:
    """From a stack two minors behind the pin: a minor past Cluster API's range, where a skip from
    the pin would go, the settings refuse first (tests/test_settings.py)."""
    record, previous = Run(), {**deployed(lab), "k3sVersion": "v1.33.4+k3s1"}
    with pytest.raises(VersionOrderError) as refused:
        run_program({"k3sVersion": "v1.35.8+k3s1"}, previous_outputs=previous, preview=True, record=record)
    assert str(refused.value).startswith(
        "lab-mgmt:k3sVersion: the last deployment runs k3s v1.33.4+k3s1, and v1.35.8+k3s1 skips a minor version: "
        "k3s upgrades one minor at a time. Set a v1.34 release, run `pulumi up`"
    )
    assert not [r for r in record.resources.values() if r.type == COMMAND]


@pytest.mark.parametrize(
    ("wanted", "next_series"), [("v1.37.1+k3s1", "v1.36"), ("v2.0.0+k3s1", "v1.36")], ids=["two minors", "next major"]
)
def test_k3s_more_than_one_minor_ahead_is_a_skip(wanted: str, next_series: str) -> None:
    with pytest.raises(VersionOrderError, match=f"skips a minor version: .* Set a {next_series} release"):
        check_k3s_version_order("v1.35.8+k3s1", wanted)


def test_a_stack_that_recorded_no_k3s_version_is_not_checked(lab: Run) -> None:
    """Deployed before the output existed: that run records it."""
    previous = {key: value for key, value in deployed(lab).items() if key != "k3sVersion"}
    run = run_program({"k3sVersion": "v1.33.1+k3s1"}, previous_outputs=previous)
    assert run.outputs["k3sVersion"] == ("v1.33.1+k3s1", False)


# What a k3s restart (a new version or config) re-runs: the wait, and the read of the kubeconfig
# k3s wrote anew when it started, which the provider then takes in place.
AFTER_A_RESTART = {(COMMAND, "mgmt-node-ready"), (COMMAND, "mgmt-read-kubeconfig")}


def test_k3s_bump_reruns_the_install_and_the_wait_only(lab: Run) -> None:
    bumped = run_program({"k3sVersion": "v1.35.9+k3s1"})
    assert changed(lab, bumped) == {(COMMAND, "mgmt-k3s-install"), *AFTER_A_RESTART}
    assert argv(bumped, "k3s-install")[5:] == ["v1.35.9+k3s1"]


def test_k3s_config_change_reruns_the_config_step_and_the_wait_only(lab: Run, monkeypatch: pytest.MonkeyPatch) -> None:
    render = components.k3s_node.render_k3s_config
    monkeypatch.setattr(components.k3s_node, "render_k3s_config", lambda address: render(address) + "debug: true\n")
    assert changed(lab, run_program()) == {(COMMAND, "mgmt-k3s-config"), *AFTER_A_RESTART}


def test_renaming_the_vm_keeps_the_clusters_identity(lab: Run) -> None:
    """A changed cluster_identifier makes pulumi-kubernetes replace every object on the cluster;
    a renamed VM is the same cluster."""
    renamed = run_program({"vmName": "lab-core"})
    assert renamed.get(*K8S_PROVIDER).plain["clusterIdentifier"] == lab.get(*K8S_PROVIDER).plain["clusterIdentifier"]
    assert yaml.safe_load(renamed.outputs["kubeconfig"][0])["current-context"] == "lab-core"


def test_a_new_vm_reruns_every_host_step_and_is_a_new_cluster(lab: Run) -> None:
    rebuilt = run_program(vm_mac="BC:24:11:4A:00:02")
    touched = changed(lab, rebuilt)
    assert {*HOST_STEPS, K8S_PROVIDER} <= touched
    assert rebuilt.get(*K8S_PROVIDER).plain["clusterIdentifier"] == "lab-mgmt/201/BC:24:11:4A:00:02"


def test_kubeconfig_file_is_written_only_when_asked(lab: Run, tmp_path_factory: pytest.TempPathFactory) -> None:
    assert lab.of_type("command:local:Command") == []
    path = tmp_path_factory.mktemp("home") / "kube dir" / "lab-mgmt.yaml"
    run = run_program({"kubeconfigPath": str(path)})
    (writer,) = run.of_type("command:local:Command")
    # Removed when the path changes (the old one), when kubeconfigPath is unset, and on destroy.
    assert writer.plain["delete"] == f"rm -f {shlex.quote(str(path))}"
    # Another path or generation replaces the writer: the old one's delete removes the old file,
    # before the new one writes (on the same path, the other order would remove the file just
    # written). No file there yet: the first write is generation 1.
    assert writer.plain["triggers"] == [str(path), 1]
    assert writer.delete_before_replace is True
    assert set(writer.inputs["stdin"]) == {SECRET}
    assert writer.plain["stdin"] == run.outputs["kubeconfig"][0]
    assert writer.plain["logging"] == "stderr"
    assert writer.plain["addPreviousOutputInEnv"] is False


LOCAL = "command:local:Command"
KUBECONFIG_FILE = (LOCAL, "mgmt-kubeconfig-file")


def local_shell(command: str, stdin: str) -> subprocess.CompletedProcess[str]:
    """`command` as pulumi-command runs a local command on Linux: /bin/sh -c, `stdin` on its stdin."""
    return subprocess.run(["/bin/sh", "-c", command], input=stdin, capture_output=True, text=True, check=False)


def test_the_kubeconfig_file_is_written_over_no_file_the_program_did_not_write(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """Created (first run, a new path or generation), the writer refuses a path where something
    is and leaves it alone; updated (a new kubeconfig), it rewrites its own file in place."""
    path = tmp_path_factory.mktemp("home") / "kube dir" / "config"
    writer = run_program({"kubeconfigPath": str(path)}).get(*KUBECONFIG_FILE).plain
    kubeconfig = writer["stdin"]

    created = local_shell(writer["create"], kubeconfig)
    assert (created.returncode, created.stderr) == (0, "")
    assert path.read_text() == kubeconfig
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    inode = path.stat().st_ino
    updated = local_shell(writer["update"], "renewed\n")
    assert (updated.returncode, path.read_text(), path.stat().st_ino) == (0, "renewed\n", inode)

    refusal = (
        f"lab-mgmt:kubeconfigPath: {path} exists and holds another kubeconfig, and this program writes no file "
        "over one it did not write: move it away or choose another path, then run again (docs/operations.md, "
        "'Outputs'; after a lost state, the lost stack's file of an older kubeconfig: move it away)\n"
    )
    path.write_text("apiVersion: v1\nclusters: []  # someone else's\n")
    refused = local_shell(writer["create"], kubeconfig)
    assert (refused.returncode, refused.stderr) == (1, refusal)
    assert path.read_text() == "apiVersion: v1\nclusters: []  # someone else's\n"
    path.unlink()
    path.symlink_to(path.parent / "elsewhere")
    assert local_shell(writer["create"], kubeconfig).returncode == 1
    assert not (path.parent / "elsewhere").exists()


def test_a_lost_stacks_kubeconfig_file_is_taken_over_as_it_is(tmp_path_factory: pytest.TempPathFactory) -> None:
    """After a lost state the laptop still has the file the lost stack wrote (docs/operations.md,
    "Lost state or passphrase"): holding this very kubeconfig, the new stack's writer takes it over
    and writes nothing; a symlink to the same content is still refused."""
    path = tmp_path_factory.mktemp("home") / "lab-mgmt.yaml"
    writer = run_program({"kubeconfigPath": str(path), "adopt": True, "recover": True}).get(*KUBECONFIG_FILE).plain
    kubeconfig = writer["stdin"]
    path.write_text(kubeconfig)
    path.chmod(0o600)
    inode, written = path.stat().st_ino, path.stat().st_mtime_ns
    taken = local_shell(writer["create"], kubeconfig)
    assert (taken.returncode, taken.stderr) == (0, "")
    assert (path.read_text(), path.stat().st_ino, path.stat().st_mtime_ns) == (kubeconfig, inode, written)
    link = path.parent / "link.yaml"
    link.symlink_to(path)
    assert local_shell(writer["create"].replace(str(path), str(link)), kubeconfig).returncode == 1


def test_the_kubeconfig_file_output_records_path_and_generation(
    lab: Run, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """docs/operations.md, Outputs: `kubeconfigFile`, not secret, only with kubeconfigPath set."""
    assert "kubeconfigFile" not in lab.outputs
    path = tmp_path_factory.mktemp("home") / "lab-mgmt.yaml"
    run = run_program({"kubeconfigPath": str(path)})
    assert run.outputs["kubeconfigFile"] == ({"path": str(path), "generation": 1}, False)


def test_a_kubeconfig_file_that_is_there_is_left_alone(tmp_path_factory: pytest.TempPathFactory) -> None:
    """The run after the one that wrote the file changes nothing, nor does its preview: what
    `pulumi preview --expect-no-changes` checks."""
    path = tmp_path_factory.mktemp("home") / "lab-mgmt.yaml"
    first = run_program({"kubeconfigPath": str(path)})
    path.write_text(K3S_KUBECONFIG)
    second = run_program({"kubeconfigPath": str(path)}, previous_outputs=deployed(first))
    assert changed(first, second) == set()
    assert second.outputs["kubeconfigFile"] == first.outputs["kubeconfigFile"]
    preview = run_program({"kubeconfigPath": str(path)}, previous_outputs=deployed(second), preview=True)
    assert changed(second, preview) == set()


def test_a_kubeconfig_file_deleted_by_hand_is_written_again(tmp_path_factory: pytest.TempPathFactory) -> None:
    path = tmp_path_factory.mktemp("home") / "lab-mgmt.yaml"
    first = run_program({"kubeconfigPath": str(path)})
    path.write_text(K3S_KUBECONFIG)
    second = run_program({"kubeconfigPath": str(path)}, previous_outputs=deployed(first))
    path.unlink()
    preview = run_program({"kubeconfigPath": str(path)}, previous_outputs=deployed(second), preview=True)
    third = run_program({"kubeconfigPath": str(path)}, previous_outputs=deployed(second))
    # New triggers replace the writer (its delete first, then its create writes the file).
    assert changed(second, preview) == changed(second, third) == {KUBECONFIG_FILE}
    assert third.get(*KUBECONFIG_FILE).plain["triggers"] == [str(path), 2]
    assert third.outputs["kubeconfigFile"] == ({"path": str(path), "generation": 2}, False)
    path.write_text(K3S_KUBECONFIG)
    assert changed(third, run_program({"kubeconfigPath": str(path)}, previous_outputs=deployed(third))) == set()


def test_a_stack_deployed_before_generations_keeps_its_kubeconfig_file(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """A stack whose last deployment recorded no generation wrote the file with the path alone
    as its trigger: with the file there, the trigger stays so (nothing to replace) and the run
    records generation 0."""
    path = tmp_path_factory.mktemp("home") / "lab-mgmt.yaml"
    path.write_text(K3S_KUBECONFIG)
    run = run_program({"kubeconfigPath": str(path)}, previous_outputs={"vmAddress": "192.168.4.21"})
    assert run.get(*KUBECONFIG_FILE).plain["triggers"] == [str(path)]
    assert run.outputs["kubeconfigFile"] == ({"path": str(path), "generation": 0}, False)


@pytest.mark.parametrize(("there", "generation"), [(True, 0), (False, 1)], ids=["there", "missing"])
def test_another_kubeconfig_path_counts_its_generations_anew(
    tmp_path_factory: pytest.TempPathFactory, there: bool, generation: int
) -> None:
    home = tmp_path_factory.mktemp("home")
    path = home / "new.yaml"
    if there:
        path.write_text(K3S_KUBECONFIG)
    recorded = {"path": str(home / "old.yaml"), "generation": 3}
    assert components.k3s_node.write_generation(path, recorded) == generation


# --- cloud-init changes between runs -------------------------------------------------------------
NEW_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIE8sY2Fr3y0Q0pq6o2m9r9hX9sJ1Wl0a3b4c5d6e7f8g owner@desk"


def deployed(run: Run) -> dict[str, Any]:
    """The stack outputs of `run` as the next run's StackReference reads them: one exported as
    None is not recorded."""
    return {key: value for key, (value, _) in run.outputs.items() if value is not None}


@pytest.mark.parametrize(
    ("overrides", "keys"),
    [
        ({"sshPublicKeys": [NEW_KEY]}, "lab-mgmt:sshPublicKeys"),
        ({"vmDnsServers": ["1.1.1.1"], "vmGateway": "192.168.4.1"}, "lab-mgmt:vmGateway, lab-mgmt:vmDnsServers"),
        ({"vmAddress": "192.168.4.21/23"}, "lab-mgmt:vmAddress"),
        ({"vmName": "lab-core"}, "lab-mgmt:vmName"),
    ],
    ids=["keys", "network", "prefix", "name"],
)
def test_a_cloud_init_change_warns_of_the_reboot_and_keeps_the_host_steps(
    lab: Run, overrides: dict[str, Any], keys: str, caplog: pytest.LogCaptureFixture
) -> None:
    run = run_program(overrides, previous_outputs=deployed(lab), preview=True)
    (warning,) = [record.getMessage() for record in caplog.records if record.levelname == "WARNING"]
    assert warning.startswith(f"{keys} changed: Proxmox writes the VM's cloud-init drive in this run")
    assert "qm reboot 201" in warning
    assert "keeps the SSH host key (mgmt-keep-host-keys)" in warning
    assert {key for key in changed(lab, run) if key[0] == COMMAND} <= {(COMMAND, "mgmt-k3s-config"), *AFTER_A_RESTART}


def test_the_vm_records_are_what_the_vm_resource_holds(lab: Run, caplog: pytest.LogCaptureFixture) -> None:
    """A `pulumi up --target` that leaves mgmt-vm out keeps the VM's old state: vmCloudInit and
    vmSize record what it holds, not the new settings, so the next run still announces them."""
    vm = lab.get(*VM).plain
    held = {"mgmt-vm": {"cpu": vm["cpu"], "memory": vm["memory"], "initialization": vm["initialization"]}}
    changes = {"vmCores": 4, "sshPublicKeys": [NEW_KEY]}
    targeted = run_program(changes, previous_outputs=deployed(lab), live_outputs=held)
    assert targeted.outputs["vmSize"] == ({"vmCores": 2, "vmMemoryMib": 4096}, False)
    assert targeted.outputs["vmCloudInit"] == lab.outputs["vmCloudInit"]
    assert lab.outputs["vmCloudInit"][0]["sshPublicKeys"] == vm["initialization"]["userAccount"]["keys"]
    caplog.clear()
    run_program(changes, previous_outputs=deployed(targeted), preview=True)
    assert [message.split(" changed: ")[0] for message in warnings(caplog)] == [
        "lab-mgmt:sshPublicKeys",
        "lab-mgmt:vmCores",
    ]


def test_the_cloud_init_record_leaves_the_accounts_secret_password_out(lab: Run) -> None:
    initialization = lab.get(*VM).plain["initialization"]
    account = {
        **initialization["userAccount"],
        "password": {rpc._special_sig_key: rpc._special_secret_sig, "value": "pw"},
    }
    run = run_program(live_outputs={"mgmt-vm": {"initialization": {**initialization, "userAccount": account}}})
    # The same record, and not secret.
    assert run.outputs["vmCloudInit"] == lab.outputs["vmCloudInit"]


def test_the_same_cloud_init_settings_warn_of_nothing(lab: Run, caplog: pytest.LogCaptureFixture) -> None:
    run_program(previous_outputs=deployed(lab), preview=True)
    assert [r.getMessage() for r in caplog.records if r.levelname == "WARNING"] == []


def test_the_first_run_after_adoption_warns_that_the_vm_takes_the_programs_cloud_init(
    caplog: pytest.LogCaptureFixture,
) -> None:
    adopted = run_program({"adopt": True, "capmoxExistingSecret": "capmox-variables"})
    assert adopted.outputs["vmCloudInit"][0] == "adopted: as the playbook left it"
    assert [r.getMessage() for r in caplog.records if r.levelname == "WARNING"] == []
    assert adopted.outputs["vmSize"][0] == "adopted: as the playbook left it"
    run_program({"capmoxExistingSecret": "capmox-variables"}, previous_outputs=deployed(adopted), preview=True)
    cloud_init, size = [record.getMessage() for record in caplog.records if record.levelname == "WARNING"]
    assert "lab-mgmt:sshPublicKeys" in cloud_init
    assert "become the adopted VM's: Proxmox writes" in cloud_init
    assert size.startswith("lab-mgmt:vmCores, lab-mgmt:vmMemoryMib become the adopted VM's: Proxmox holds")


@pytest.mark.parametrize(
    ("overrides", "keys"),
    [
        ({"vmCores": 4}, "lab-mgmt:vmCores"),
        ({"vmCores": 4, "vmMemoryMib": 8192}, "lab-mgmt:vmCores, lab-mgmt:vmMemoryMib"),
    ],
    ids=["cores", "cores and memory"],
)
def test_a_size_change_warns_of_the_reboot_that_the_program_never_does(
    lab: Run, overrides: dict[str, Any], keys: str, caplog: pytest.LogCaptureFixture
) -> None:
    run = run_program(overrides, previous_outputs=deployed(lab), preview=True)
    (warning,) = [record.getMessage() for record in caplog.records if record.levelname == "WARNING"]
    assert warning.startswith(f"{keys} changed: Proxmox holds the new size as a pending change in this run")
    assert "never does by itself: reboot it (qm reboot 201)" in warning
    assert changed(lab, run) == {VM}
    assert run.get(*VM).plain["rebootAfterUpdate"] is False
    assert run.outputs["vmSize"][0] == {"vmCores": 4, "vmMemoryMib": overrides.get("vmMemoryMib", 4096)}


@pytest.mark.parametrize(
    ("overrides", "key"),
    [({"vmAddress": "192.168.4.30/24"}, "vmAddress"), ({"ciUser": "admin"}, "ciUser")],
    ids=["address", "user"],
)
def test_a_new_address_or_user_is_refused_before_any_host_step_dials_it(
    lab: Run, overrides: dict[str, Any], key: str
) -> None:
    record = Run()
    with pytest.raises(ReachChangedError, match=f"^lab-mgmt:{key}: the last deployment has .*Change it with a rebuild"):
        run_program(overrides, previous_outputs=deployed(lab), preview=True, record=record)
    assert not [r for r in record.resources.values() if r.type == COMMAND]


@pytest.mark.parametrize("overrides", [{"vmAddress": "192.168.4.30/24"}, {"ciUser": "admin"}], ids=["address", "user"])
def test_with_a_rebuild_allowed_a_new_address_or_user_replaces_the_vm_even_from_the_same_image(
    overrides: dict[str, Any],
) -> None:
    """The guard lets a new address or user through when a rebuild is allowed: the VM must then
    be a new one, which the same image alone would not make it."""
    # A rebuild is refused while workload clusters are declared (tests/test_settings.py).
    lifted = run_program({"vmProtected": False, "workloadClusters": []})
    allowed = {"vmProtected": False, "vmRebuildFromImage": True, "workloadClusters": []}
    moved = run_program({**allowed, **overrides}, previous_outputs=deployed(lifted))
    assert replaced(lifted, moved) == {VM}
    new_keys = run_program({**allowed, "sshPublicKeys": [NEW_KEY]}, previous_outputs=deployed(lifted))
    assert replaced(lifted, new_keys) == set()


def test_a_rebuild_may_move_the_vm() -> None:
    rebuilt = run_program(
        {"vmAddress": "192.168.4.30/24", "vmProtected": False, "vmRebuildFromImage": True, "workloadClusters": []},
        previous_outputs={"vmAddress": "192.168.4.21", "vmProtected": False},
        vm_mac="BC:24:11:4A:00:02",
    )
    assert step(rebuilt, "host-ready")["connection"]["host"] == "192.168.4.30"


# --- the admin client certificate nearing expiry -------------------------------------------------
READ_KUBECONFIG = (COMMAND, "mgmt-read-kubeconfig")
DIGEST = hashlib.sha256(yaml.safe_dump(K3S_CONFIG, sort_keys=True).encode()).hexdigest()
TODAYS_TRIGGERS = [INSTANCE, "v1.35.8+k3s1", DIGEST]


def warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [record.getMessage() for record in caplog.records if record.levelname == "WARNING"]


def reading(kubeconfig: str) -> dict[str, dict[str, str]]:
    """What mgmt-read-kubeconfig reads on the VM in a run: k3s's admin kubeconfig as it is."""
    return {"mgmt-read-kubeconfig": {"stdout": kubeconfig}}


def test_a_certificate_far_from_expiry_changes_nothing(lab: Run, caplog: pytest.LogCaptureFixture) -> None:
    """The lab's is a year long, as k3s issues it; the last deployment, as any deployed before
    the renewal marker, recorded none: upgrading the program replaces nothing."""
    assert "adminCertificateRenewal" not in deployed(lab)
    run = run_program(previous_outputs=deployed(lab), preview=True)
    assert warnings(caplog) == []
    assert step(run, "read-kubeconfig")["triggers"] == TODAYS_TRIGGERS
    assert changed(lab, run) == set()
    assert run.outputs["adminCertificateRenewal"] == (None, False)


def test_a_certificate_entering_the_renewal_window_is_announced_and_read_once_again(
    caplog: pytest.LogCaptureFixture,
) -> None:
    near = client_certificate(30)
    # The deployment that read it, when it was a year from expiry.
    before = run_program(live_outputs=reading(k3s_kubeconfig(near)))
    assert warnings(caplog) == []
    entering = run_program(previous_outputs=deployed(before), live_outputs=reading(k3s_kubeconfig(near)), preview=True)
    marker = not_after(near).strftime("%Y-%m-%dT%H:%M:%SZ")
    assert changed(before, entering) == {READ_KUBECONFIG}
    assert step(entering, "read-kubeconfig")["triggers"] == [*TODAYS_TRIGGERS, marker]
    assert entering.outputs["adminCertificateRenewal"] == (marker, False)
    (warning,) = warnings(caplog)
    assert f"expires on {not_after(near):%Y-%m-%d %H:%M} UTC, in 30 days." in warning
    assert "k3s renews it only when it starts" in warning
    assert "ssh ubuntu@192.168.4.21 sudo systemctl restart k3s" in warning
    assert "pulumi up --replace 'urn:pulumi:lab::lab-mgmt::homelab:index:K3sNode$command:remote:Command::" in warning
    assert "pulumi up reads it once again (mgmt-read-kubeconfig)" in warning
    assert warning.endswith("(docs/troubleshooting.md, 'The admin kubeconfig's client certificate expires')")


def test_a_certificate_in_the_window_is_read_once_and_announced_in_every_run(caplog: pytest.LogCaptureFixture) -> None:
    """k3s was not restarted: the re-read finds the same certificate, and the next run changes
    nothing, nor does its preview (`--expect-no-changes`), but still says what to do."""
    near = k3s_kubeconfig(client_certificate(30))
    before = run_program(live_outputs=reading(near))
    entered = run_program(previous_outputs=deployed(before), live_outputs=reading(near))
    caplog.clear()
    preview = run_program(previous_outputs=deployed(entered), live_outputs=reading(near), preview=True)
    assert changed(entered, preview) == set()
    assert preview.outputs["adminCertificateRenewal"] == entered.outputs["adminCertificateRenewal"]
    (warning,) = warnings(caplog)
    assert "sudo systemctl restart k3s" in warning
    assert "reads it once again" not in warning


@pytest.mark.parametrize("renewed_by", ["a reboot before the window", "the owner's restart and --replace"])
def test_a_renewed_certificate_keeps_the_marker_and_reads_nothing_again(
    renewed_by: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The renewed certificate is out of the window: the marker stays, so the kubeconfig is not
    read again (no flip-flop), and the warning stops."""
    near, renewed = k3s_kubeconfig(client_certificate(30)), k3s_kubeconfig(client_certificate(365))
    before = run_program(live_outputs=reading(near))
    if renewed_by == "a reboot before the window":
        last = run_program(previous_outputs=deployed(before), live_outputs=reading(renewed))
    else:
        entered = run_program(previous_outputs=deployed(before), live_outputs=reading(near))
        # `pulumi up --replace` runs mgmt-read-kubeconfig again with the triggers it has.
        last = run_program(previous_outputs=deployed(entered), live_outputs=reading(renewed))
    assert last.outputs["kubeconfig"][0] == rename_k3s_kubeconfig(renewed, "192.168.4.21", "lab-mgmt")
    caplog.clear()
    preview = run_program(previous_outputs=deployed(last), live_outputs=reading(renewed), preview=True)
    assert changed(last, preview) == set()
    assert preview.outputs["adminCertificateRenewal"] == last.outputs["adminCertificateRenewal"]
    assert preview.outputs["adminCertificateRenewal"][0] is not None
    assert warnings(caplog) == []


def test_an_unreadable_held_certificate_is_announced_and_changes_nothing(
    lab: Run, caplog: pytest.LogCaptureFixture
) -> None:
    held = deployed(lab)
    data = yaml.safe_load(held["kubeconfig"])["users"][0]["user"]["client-certificate-data"]
    held["kubeconfig"] = held["kubeconfig"].replace(data, base64.b64encode(b"client-cert").decode())
    run = run_program(previous_outputs=held, preview=True)
    assert changed(lab, run) == set()
    (warning,) = warnings(caplog)
    assert "does not show when its client certificate expires (client-certificate-data holds no PEM" in warning
    assert "pulumi up --replace 'urn:pulumi:lab::lab-mgmt::" in warning


def test_an_expired_certificate_is_announced_as_what_fails() -> None:
    expiry = datetime(2026, 12, 1, 4, 0, tzinfo=UTC)
    held = HeldCertificate(expiry + timedelta(days=1), expiry, None, "2026-12-01T04:00:00Z")
    message = renewal_warning(held, urn="urn", ssh="ssh ubuntu@192.168.4.21")
    assert message is not None
    assert message.startswith(
        "The admin kubeconfig's client certificate (output kubeconfig, the Kubernetes provider's) expired on "
        "2026-12-01 04:00 UTC: every call to the cluster fails with Unauthorized. k3s renews it only when it starts"
    )
    assert held.marker == "2026-12-01T04:00:00Z"


@pytest.mark.parametrize(
    ("days_left", "recorded", "marker"),
    [
        # k3s v1.35 renews within 120 days of expiry (CertificateRenewDays), so the window is as long.
        (121, None, None),
        (121, "2025-01-01T00:00:00Z", "2025-01-01T00:00:00Z"),
        (120, None, "2027-03-01T00:00:00Z"),
        (100, None, "2027-03-01T00:00:00Z"),
        (10, "2025-01-01T00:00:00Z", "2027-03-01T00:00:00Z"),
        (-5, None, "2027-03-01T00:00:00Z"),
    ],
)
def test_the_renewal_marker(days_left: int, recorded: str | None, marker: str | None) -> None:
    expiry = datetime(2027, 3, 1, tzinfo=UTC)
    assert HeldCertificate(expiry - timedelta(days=days_left), expiry, None, recorded).marker == marker
