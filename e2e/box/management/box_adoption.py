"""Adoption in the lab in a box, whole (issue 18): the box (e2e/box/box.py) starts as the Ansible
playbook left the lab, and docs/adoption.md is followed with the real CLI and the program's own
__main__.py, VM and host steps included. tests/test_box_whole_adoption.py runs it
(`in_new_netns("management.box_adoption.adoption_in_the_box", ...)`).

The playbook's lab (playbook_vm.py), at the spec's site or at another (SITES: node, VMID,
address, k3s version).

Then docs/adoption.md's steps 1 to 6, typed as they stand for a lab that runs no workload cluster
(this one runs none, and the stack file is as shipped), with the site's VM in the page's
placeholders (e2e/box/takeover/keyboard.py, doc_script.py): the backups, the settings, the OS
type, the hand-over over SSH, the two gated runs (adoptClusterObjects false, the VM and the node;
then true, the cluster's objects), the checks and `pulumi preview --expect-no-changes`. Between
two of its lines, the runs the page does not make: before the OS type is set, a preview of the VM
as the playbook left it; before step 4, a first run with a k3sVersion other than the installed
one (it must stop with step 2's message and change nothing on the lab) and a preview and gate
targeted at the Kubernetes provider and what it depends on (what --target would do instead of
step 4's first run: the engine plans the Kubernetes imports whatever --target says, and the
preview fails), each with the backend put back after it. Then, adopted, a k3sVersion that is not
the installed one again. Each run records what it made the box do (e2e/box/observed.py), and
around each adoption `up` the guest's files, calls and the Helm releases are read before and
after.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from e2e.box import box, observed, scenarios
from e2e.box.management import handover
from e2e.box.management.playbook_vm import _on_guest, _wait_for_api_server, playbook_left
from e2e.box.takeover import doc_script, keyboard
from e2e.standins.cluster import playbook_lab
from e2e.standins.proxmox import node_shell

# The spec's lab, and a second one the playbook set up with other values: another node, VMID,
# address and k3s version, to which the docs' steps apply the same way.
SITES = {
    "spec": box.SPEC_SITE,
    "other": box.Site(node="pv2-3", vmid=305, address="192.168.7.30", gateway="192.168.7.1", k3s_version=box.K3S_BUMP),
}
# Where the box runs this scenario: at the spec's lab the owner's takeover types docs/adoption.md
# word for word (e2e/box/takeover/, lab1 and all), so this one runs at the other site, where the
# same steps, the runs the page does not make and step 8 (`_converged`) are shown. Step 8 is the
# program's ordinary runs, one item at a time, the same at any site.
RUN_AT = ("other",)
CONVERGED_AT = "other"


# The guest's files whose bytes or times would change with a rewrite, a reinstall or a k3s
# restart (k3s writes k3s.yaml each time its server starts).
WATCHED = (
    "/etc/rancher/k3s/config.yaml",
    "/etc/rancher/k3s/k3s.yaml",
    "/usr/local/bin/k3s",
    "/etc/systemd/system/k3s.service",
    "/etc/systemd/system/k3s.service.env",
    "/usr/lib/systemd/system/qemu-guest-agent.service",
)
# What the guest's own upkeep changes under its disk while it runs: k3s's data (etcd, its logs),
# kubectl's discovery cache, sudo's timestamps.
UPKEEP = ("var/lib/rancher/k3s/server/", "root/.kube/cache/", "root/.kube/http-cache/", "var/lib/sudo/")
# A first run targeted at the Kubernetes provider and everything it depends on (the StackReference,
# the VM and its provider, the host steps), what --target would do instead of adoptClusterObjects
# false. The engine plans imports whatever --target says, so it plans the Kubernetes imports too,
# under a ClusterApi parent it does not create, and the preview fails
# (tests/test_box_whole_adoption.py; docs/adoption.md step 4).
STACK_URN = "urn:pulumi:lab::lab-mgmt::"
NODE_TARGETS = tuple(
    STACK_URN + urn
    for urn in (
        "pulumi:pulumi:Stack::lab-mgmt-lab",
        "pulumi:pulumi:StackReference::last-deployment",
        "homelab:index:ManagementVm::mgmt",
        "homelab:index:ManagementVm$pulumi:providers:proxmoxve::mgmt-proxmox",
        "homelab:index:ManagementVm$proxmoxve:index/vmLegacy:VmLegacy::mgmt-vm",
        "homelab:index:K3sNode::mgmt",
        *(
            f"homelab:index:K3sNode$command:remote:Command::mgmt-{step}"
            for step in (
                "host-ready",
                "keep-host-keys",
                "guest-agent",
                "k3s-config",
                "k3s-install",
                "node-ready",
                "read-kubeconfig",
            )
        ),
        "homelab:index:K3sNode$pulumi:providers:kubernetes::mgmt-kubernetes",
    )
)


def _fingerprints(lab: box.Box) -> dict[str, list[Any]]:
    """sha256 and mtime of each watched file on the guest's disk."""
    found = {}
    for path in WATCHED:
        on_disk = lab.guests.disk_path(lab.site.vmid, path)
        found[path] = (
            [hashlib.sha256(on_disk.read_bytes()).hexdigest(), on_disk.stat().st_mtime_ns]
            if on_disk.exists()
            else ["absent", 0]
        )
    return found


def _disk_files(lab: box.Box) -> dict[str, int]:
    """Every file the guest wrote to its disk (its overlay's upper layer), with its mtime, but for
    the guest's own upkeep."""
    upper = lab.guests.disk_path(lab.site.vmid, "/")
    return {
        str(path.relative_to(upper)): path.lstat().st_mtime_ns
        for path in upper.rglob("*")
        if not path.is_dir() and not str(path.relative_to(upper)).startswith(UPKEEP)
    }


def _changed(before: Mapping[str, object], after: Mapping[str, object]) -> list[str]:
    return sorted(path for path in before.keys() | after.keys() if before.get(path) != after.get(path))


def _guest_calls(lab: box.Box, since: int) -> list[list[str]]:
    """The stand-in commands (systemctl, apt-get, cloud-init) run on the guest after `since`."""
    return [json.loads(line)["argv"] for line in lab.guest_log("calls.log")[since:]]


def _vm_power(lab: box.Box) -> dict[str, Any]:
    """The VM as the node keeps it: running, and since when (a reboot would start it again)."""
    assert lab.pve.vms is not None
    vm = lab.pve.vms.vms[str(lab.site.vmid)]
    return {"status": vm["status"], "started": vm["started"], "guest_running": lab.guests.running(lab.site.vmid)}


def _lab_state(lab: box.Box) -> dict[str, Any]:
    return {
        "objects": playbook_lab.snapshot(lab.cluster),
        "releases": handover._releases(lab.cluster),
        "fingerprints": _fingerprints(lab),
        "files": _disk_files(lab),
        "vm": _vm_power(lab),
        "pve_volumes": sorted(lab.pve.vms.storage.volumes) if lab.pve.vms else [],
    }


def _state_files(lab: box.Box) -> dict[str, str]:
    """sha256 of each file of the stack's backend (the CLI's file:// state)."""
    state = lab.engine.root / "state"
    return {
        str(path.relative_to(state)): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(state.rglob("*"))
        if path.is_file()
    }


@contextmanager
def _state_put_back(lab: box.Box, base: Path, name: str) -> Iterator[dict[str, Any]]:
    """A run the docs' steps do not make: what it leaves in the backend is recorded
    (`state_changed`), then the backend is put back as it was, so that the steps after it run on
    the state the docs' own steps leave."""
    state = lab.engine.root / "state"
    kept = base / f"state-before-{name}"
    shutil.copytree(state, kept, symlinks=True)
    before = _state_files(lab)
    result: dict[str, Any] = {}
    yield result
    result["state_changed"] = _changed(before, _state_files(lab))
    shutil.rmtree(state)
    shutil.copytree(kept, state, symlinks=True)


def _targeted_at_the_node(lab: box.Box, base: Path) -> dict[str, Any]:
    """The first run of the two-run adoption, previewed and gated with NODE_TARGETS."""
    targeted = tuple(f"--target={urn}" for urn in NODE_TARGETS)
    with _state_put_back(lab, base, "targeted") as result:
        result["preview"] = observed.observe(lab, "preview", "--diff", *targeted)
        result["gate"] = scenarios.adoption_gate(lab.engine, base, NODE_TARGETS)
    return result


def _other_k3s_version(lab: box.Box) -> str:
    """A k3s version the box serves that is not the one the playbook installed."""
    return next(version for version in (scenarios.K3S_VERSION, box.K3S_BUMP) if version != lab.site.k3s_version)


def _k3s_differs_before_adoption(lab: box.Box, base: Path) -> dict[str, Any]:
    """Step 4's first run, gated, with a k3sVersion other than the installed one, on the lab as
    the playbook left it: step 2's message, nothing changed on the lab. Then the owner's fix, the
    installed version set, and the stack as if this run had not been made."""
    with _state_put_back(lab, base, "k3s-differs") as result:
        result["k3s_setting"] = scenarios._step(lab.engine, ("config", "set", "k3sVersion", _other_k3s_version(lab)))
        result.update(_gated_run(lab, base, "false"))
    result["put_back"] = [
        scenarios._step(lab.engine, ("config", "set", "k3sVersion", lab.site.k3s_version)),
        scenarios._step(lab.engine, ("config", "rm", "adoptClusterObjects")),
    ]
    return result


# docs/adoption.md steps 4 and 5 as two gated runs: the first leaves the cluster's objects out and
# records the admin kubeconfig, the second takes them with it known.
ADOPTION_RUNS = (("node", "false"), ("cluster", "true"))


def _gated_run(lab: box.Box, base: Path, cluster_objects: str) -> dict[str, Any]:
    """One adoption run the page does not make, as its steps 4 and 5 have theirs: the setting, the
    preview and the gate, and the up only when the gate passes; the lab read before and after it."""
    run: dict[str, Any] = {
        "setting": scenarios._step(lab.engine, ("config", "set", "adoptClusterObjects", cluster_objects))
    }
    run["preview"] = observed.observe(lab, "preview", "--diff")
    run["gate"] = scenarios.adoption_gate(lab.engine, base)
    if run["gate"]["rc"] != 0:
        return run
    return {**run, **_up_watched(lab)}


# The node's storage that takes the backup (the stand-in's `local`, as on a fresh Proxmox VE).
BACKUP_STORAGE = "local"
# docs/adoption.md's lines that this scenario reads around as it types them; the runs of steps 4
# and 5 are named after what their adoptClusterObjects setting takes in.
SETTING_PREFIX = "pulumi config set adoptClusterObjects "
RUN_NAMES = {setting: name for name, setting in ADOPTION_RUNS}
PREVIEW = "pulumi preview --stack lab --diff"
GATE_PREVIEW = "pulumi preview --stack lab --json > preview.json"
GATE = ".venv/bin/python tools/adoption_check.py preview.json"
UP = "pulumi up --stack lab"
NO_CHANGES = "pulumi preview --stack lab --expect-no-changes"


def _adopted(lab: box.Box, base: Path, node: node_shell.NodeShell) -> dict[str, Any]:
    """docs/adoption.md's steps 1 to 6 typed as they stand, for a lab that runs no workload
    cluster, with the site's values in its placeholders; the first line that fails ends it there.
    Between two of its lines, the runs the page does not make: before the OS type is set, a
    preview of the VM as the playbook left it; before step 4, a first run with another k3sVersion
    and a run targeted at the node, each with the backend put back after it."""
    result: dict[str, Any] = {"typed": [], "runs": {}}
    values = {"<your backup storage>": BACKUP_STORAGE} | doc_script.vm_values(lab.site.vmid, lab.site.address)
    for block in doc_script.blocks(until=doc_script.TYPED_UNTIL, workload_clusters=False):
        for line in block.filled(values):
            if block.on_node and line.startswith("qm set "):
                # As the playbook left it, the VM has no OS type: the provider reads it as "", which
                # its own schema refuses, so the import cannot even be planned.
                result["as_left"] = {
                    "preview": observed.observe(lab, "preview"),
                    "gate": scenarios.adoption_gate(lab.engine, base),
                }
            if line.startswith(SETTING_PREFIX) and not result["runs"]:
                result["k3s_differs_before_adoption"] = _k3s_differs_before_adoption(lab, base)
                result["node_first"] = _targeted_at_the_node(lab, base)
            if block.on_node:
                typed = keyboard.node(node, base / "node-root", line)
            else:
                typed = _typed_on_the_laptop(lab, base, line, result)
            result["typed"].append({"step": block.step, "on_node": block.on_node, **typed})
            if typed["rc"]:
                return result
    return result


def _typed_on_the_laptop(lab: box.Box, base: Path, line: str, result: dict[str, Any]) -> dict[str, Any]:
    """One laptop line, and what the scenario reads around it: each adoption run's setting,
    preview, gate and up, the preview expecting no changes, the charts left after the hand-over."""

    def laptop(typed: str) -> dict[str, Any]:
        return keyboard.laptop(lab.engine, typed)

    runs: dict[str, dict[str, Any]] = result["runs"]
    if line.startswith(SETTING_PREFIX):
        setting = laptop(line)
        runs[RUN_NAMES[line.removeprefix(SETTING_PREFIX)]] = {"setting": setting}
        return setting
    run = next(reversed(runs.values()), {})
    if line == PREVIEW:
        preview = run["preview"] = observed.observe_typed(lab, line, laptop)
        return preview
    if line == UP:
        run.update(_watched(lab, lambda: observed.observe_typed(lab, line, laptop)))
        up: dict[str, Any] = run["up"]
        return up
    if line == NO_CHANGES:
        no_changes = result["no_changes_preview"] = observed.observe_typed(lab, line, laptop)
        return no_changes
    typed = laptop(line)
    if line == GATE_PREVIEW:
        saved = lab.engine.project / "preview.json"
        plan = json.loads(saved.read_text()) if typed["rc"] == 0 else {}
        run["gate"] = {
            "preview_rc": typed["rc"],
            "preview_stderr": typed["stderr"],
            "preview_steps": [{"op": step["op"], "urn": step["urn"]} for step in plan.get("steps") or []],
        }
    elif line == GATE:
        run["gate"] |= {"rc": typed["rc"], "output": typed["stdout"] + typed["stderr"]}
    elif "helmchart_handover.sh" in line:
        charts = lab.cluster.kubectl("get", "helmchart", "-n", "kube-system", "-o", "name")
        result["charts_left"] = charts.stdout.split()
    return typed


def _k3s_differs(lab: box.Box) -> dict[str, Any]:
    """A k3sVersion other than the installed one after the adoption, adoption still on: step 2's
    message, nothing changed; then the installed version set back for step 8."""
    setting = scenarios._step(lab.engine, ("config", "set", "k3sVersion", _other_k3s_version(lab)))
    watched = _up_watched(lab)
    put_back = scenarios._step(lab.engine, ("config", "set", "k3sVersion", lab.site.k3s_version))
    return {"setting": setting, **watched, "put_back": put_back}


def _up_watched(lab: box.Box, *args: str) -> dict[str, Any]:
    """`pulumi up` with `args`, watched (`_watched`)."""
    return _watched(lab, lambda: observed.observe(lab, "up", *args))


def _watched(lab: box.Box, observe_up: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """A `pulumi up`, observed, with the lab's state before and after it and the guest's calls
    during it."""
    before = _lab_state(lab)
    calls = len(lab.guest_log("calls.log"))
    up = observe_up()
    after = _lab_state(lab)
    return {
        "up": up,
        "calls_during_up": _guest_calls(lab, calls),
        "before": before,
        "after": after,
        "changed_files": _changed(before["files"], after["files"]),
    }


# docs/adoption.md step 8 on the whole program, in its order: each item's config changes and the
# resources its `--target`s name.
CONVERGENCE: tuple[tuple[str, tuple[tuple[str, ...], ...], tuple[str, ...]], ...] = (
    ("image", (), ("mgmt-image",)),
    ("releases", (), scenarios.RELEASE_RESOURCES),
    ("provider CRs", (), scenarios.PROVIDER_CR_RESOURCES),
    ("namespaces", (), tuple(f"mgmt-ns-{namespace}" for namespace, _, _ in playbook_lab.PROVIDERS.values())),
    ("CAPMOX Secret", (("rm", "capmoxExistingSecret"),), ("mgmt-capmox-credentials", "mgmt-infrastructure-proxmox")),
    ("VM", (), ("mgmt-vm",)),
    ("k3s steps", (), ("mgmt-k3s-config", "mgmt-k3s-install")),
)


def _converged(lab: box.Box) -> dict[str, Any]:
    """Step 8: adoption off, a preview of everything (whose steps give the URNs, as `pulumi stack
    --show-urns` gives the owner those already in the stack), then one targeted preview and up per
    item; after the VM's, the owner's reboot (`qm reboot` on the node) and the wait for SSH and
    the API server; then the preview without targets."""
    result: dict[str, Any] = {"adopt_off": scenarios._step(lab.engine, ("config", "set", "adopt", "false"))}
    result["preview"] = observed.observe(lab, "preview")
    urns = _urns_by_name(result["preview"])
    result["items"] = {}
    for item, settings, names in CONVERGENCE:
        done = [scenarios._step(lab.engine, ("config", *setting)) for setting in settings]
        if settings:
            # What the settings add (the program's own CAPMOX Secret) is in the preview from now on.
            urns |= _urns_by_name(observed.observe(lab, "preview"))
        targets = [f"--target={urns[name]}" for name in names]
        result["items"][item] = {
            "settings": done,
            "preview": observed.observe(lab, "preview", *targets),
            **_up_watched(lab, *targets),
        }
        if item == "VM":
            result["host_key_before_reboot"] = _host_key(lab)
            with lab.rebooting():
                lab.pve.qm_reboot(lab.site.vmid)
                _on_guest(lab, "cloud-init status --wait >/dev/null; true", booting=True)
                _wait_for_api_server(lab)
            result["host_key_after_reboot"] = _host_key(lab)
    result["no_changes_preview"] = observed.observe(lab, "preview", "--expect-no-changes")
    return result


def _urns_by_name(run: dict[str, Any]) -> dict[str, str]:
    """The URN of each resource a preview planned, by its name."""
    return {step["urn"].rsplit("::", 1)[1]: step["urn"] for step in run["steps"]}


def _host_key_file(lab: box.Box) -> Path:
    return lab.guests.disk_path(lab.site.vmid, "/etc/ssh/ssh_host_ed25519_key.pub")


def _host_key(lab: box.Box) -> str:
    return _host_key_file(lab).read_text()


def _adopted_vm(lab: box.Box) -> dict[str, Any]:
    """The VM as the stack holds it after the adoption: its id, node and the address it exports."""
    done = lab.engine.pulumi("stack", "export", "--stack", "lab")
    done.check_returncode()
    vm = next(r for r in json.loads(done.stdout)["deployment"]["resources"] if r["urn"].endswith("::mgmt-vm"))
    return {"id": vm["id"], "node": vm["outputs"]["nodeName"], "address": lab.engine.outputs()["vmAddress"]}


def adoption_in_the_box(root: str, site: str) -> dict[str, Any]:
    """The playbook's lab at one of SITES in the box, docs/adoption.md followed on it, then a k3s
    version that differs from the installed one; at CONVERGED_AT, then step 8."""
    base = Path(root)
    with box.running(base, SITES[site], as_shipped=True) as lab, node_shell.serving(lab.pve, base / "node") as node:
        started = time.monotonic()
        k3s_charts = playbook_left(lab, base)
        keyboard.laptop_as_the_owners(lab.engine, lab.site.address, _host_key_file(lab))
        result: dict[str, Any] = {"setup_seconds": round(time.monotonic() - started, 1), "steps": lab.steps}
        result["adoption"] = _adopted(lab, base, node)
        if "no_changes_preview" in result["adoption"]:
            result["adopted_vm"] = _adopted_vm(lab)
            result["k3s_differs"] = _k3s_differs(lab)
            if site == CONVERGED_AT:
                result["convergence"] = _converged(lab)
        return {**result, **observed.standin_problems(lab), **k3s_charts.problems()}
