"""The state and its passphrase lost, in the box (tests/test_box_lab1_recovery.py): a new stack, on
another laptop's empty backend with a new passphrase, takes over the lab the lost stack made, lab1
with a worker running, typing docs/operations.md "Lost state or passphrase" as it stands but for
the VM's step and the node's line (the box has no VM of the program's; lost_state_page.py): the
stack file as the owner kept it, its old salt taken out, the secrets set again, `adopt` and
`recover`, a previewed run that imports, then adoption off, a previewed run, and the zero-change
preview; then the read-only tokens and CAPMOX's token rotated by the new stack. Before it is lost,
the lost stack updates the InfrastructureProvider CR and the MachineDeployment (a CAPMOX token
rotation, a label kept on the workers), as the owner's adoption step 8 and its later runs did:
applied by an update, not only created, they are co-owned by the lost stack's field manager, which
the new stack's first change of them met (review 4, finding 3). Read around it: every object of
lab1's and the Helm releases on both clusters, before and after (what appeared, went or was
rewritten), each run's plan and writes, and who applied each object. The rest of the lab1 scenario
goes on with the new stack, whose raise of maxSize is such a change of the MachineDeployment.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Any

from components.readonly_access import ACCOUNT, ACCOUNT_NAMESPACE
from e2e.box.box import ROTATED_CAPMOX_SECRET
from e2e.box.scenarios import CAPMOX_SECRET, _lab_secrets, _step
from e2e.box.takeover import keyboard, lost_state_page
from e2e.box.workload import workload_box
from e2e.box.workload.lab1_reads import Workload, get, run
from e2e.box.workload.lab1_state import MADE, changed, identity
from e2e.engine.cli import STACK, Engine
from e2e.engine.control_plane import ControlPlane

NEW_PASSPHRASE = "a-new-passphrase-for-a-new-stack"
STACK_FILE = f"Pulumi.{STACK}.yaml"
# What the operator chart and cert-manager's release live in, beside the autoscaler's.
RELEASE_NAMESPACES = ("cert-manager", "capi-operator-system")
# A label the lost stack keeps on the workers' MachineDeployment: an update of it, nothing rolls.
KEPT_LABEL = ("workloadClusters[0].keptFields.machineDeployment.metadata.labels.team", "lab")


def identities(mgmt: ControlPlane, lab1: Path, cluster: Workload) -> dict[str, dict[str, Any]]:
    """uid, resourceVersion and generation of everything the recovery must leave alone: lab1's
    objects and what Cluster API made of them, lab1's Nodes (uid), the Helm release records and the
    Deployments they made on both clusters, and the read-only tokens."""
    found: dict[str, dict[str, Any]] = {}
    kinds = ("clusters", "proxmoxclusters", "kubeadmcontrolplanes", "proxmoxmachinetemplates")
    for kind in (*kinds, "machinedeployments", "kubeadmconfigtemplates", *MADE):
        for item in get(mgmt, kind, namespace=cluster.namespace)["items"]:
            found[f"{kind}/{item['metadata']['name']}"] = identity(item)
    for item in get(mgmt, "nodes", kubeconfig=lab1)["items"]:
        found[f"nodes/{item['metadata']['name']}"] = {"uid": item["metadata"]["uid"]}
    for namespace, kubeconfig in (
        *((n, None) for n in (*RELEASE_NAMESPACES, cluster.namespace)),
        ("kube-system", lab1),
    ):
        for item in get(mgmt, "secrets", namespace=namespace, selector="owner=helm", kubeconfig=kubeconfig)["items"]:
            found[f"helm-releases/{namespace}/{item['metadata']['name']}"] = identity(item)
        for item in get(mgmt, "deployments", namespace=namespace, kubeconfig=kubeconfig)["items"]:
            found[f"deployments/{namespace}/{item['metadata']['name']}"] = identity(item)
    for where, kubeconfig in (("mgmt", None), ("lab1", lab1)):
        token = get(mgmt, "secret", f"{ACCOUNT}-token-1", namespace=ACCOUNT_NAMESPACE, kubeconfig=kubeconfig)
        found[f"readonly-tokens/{where}"] = identity(token)
    return found


def recover(
    box: workload_box.WorkloadBox, lost: Engine, lab1: Path, cluster: Workload
) -> tuple[Engine, dict[str, Any]]:
    """The new stack, and what each step did: `typed` (each line and its exit code; a run's plan
    and writes too), and what changed on the clusters across the adoption run and across the whole
    recovery."""
    mgmt = box.mgmt
    engine = box.engine(workload_clusters=True, folder="engine-recovered", passphrase=NEW_PASSPHRASE)
    # The owner's stack file as the lost stack last ran with it (kept in git, the old salt and
    # secrets in it), and their SSH key.
    out: dict[str, Any] = {"lost_stack_updated": _updated_by_the_lost_stack(lost, mgmt)}
    shutil.copy2(lost.project / STACK_FILE, engine.project / STACK_FILE)
    shutil.copytree(lost.root / ".ssh", engine.root / ".ssh")
    before = identities(mgmt, lab1, cluster)
    out["began"] = time.time()

    def run_line(line: str) -> dict[str, Any]:
        ran = run(engine, mgmt, *line.split()[1:])
        if line == "pulumi up" and "adopted" not in out:
            out["adopted"] = changed(before, identities(mgmt, lab1, cluster))
        return ran

    # CAPMOX runs with the token the lost stack rotated to, which step 1 sets.
    secrets = _lab_secrets() | {"capmoxTokenSecret": ROTATED_CAPMOX_SECRET}
    out["typed"] = keyboard.type_page(lost_state_page.for_the_lab1_box(), engine, secrets, run=run_line)
    out["recovered"] = changed(before, identities(mgmt, lab1, cluster))
    out["appliers"] = appliers(mgmt, cluster)
    out["ended"] = time.time()
    out["stack_file"] = (engine.project / STACK_FILE).read_text()
    out["rotated_tokens"] = rotated_tokens(engine, mgmt, lab1.parent, cluster.name)
    return engine, out


def _updated_by_the_lost_stack(lost: Engine, mgmt: ControlPlane) -> dict[str, Any]:
    """The lost stack's last run: CAPMOX's token rotated (a new Secret, the InfrastructureProvider
    CR pointed at it) and a label kept on the workers' MachineDeployment."""
    first = capmox_secret(mgmt)
    steps = [
        _step(lost, ("config", "set", "--path", *KEPT_LABEL)),
        _step(lost, ("config", "set", "--secret", "capmoxTokenSecret"), stdin=ROTATED_CAPMOX_SECRET),
    ]
    return {"steps": steps, "up": run(lost, mgmt, "up"), "capmox_secrets": [first, capmox_secret(mgmt)]}


def capmox_secret(mgmt: ControlPlane) -> str:
    """The Secret the InfrastructureProvider CR points CAPMOX at."""
    return str(
        get(mgmt, "infrastructureprovider", "proxmox", namespace="capmox-system")["spec"]["configSecret"]["name"]
    )


def appliers(mgmt: ControlPlane, cluster: Workload) -> dict[str, list[str]]:
    """pulumi-kubernetes's field managers, as `name/operation`, of the objects the lost stack
    updated last and of the control plane, which it only created."""
    objects = {
        "infrastructureprovider": ("proxmox", "capmox-system"),
        "machinedeployment": (cluster.workers, cluster.namespace),
        "kubeadmcontrolplane": (f"{cluster.name}-control-plane", cluster.namespace),
    }
    return {
        kind: sorted(
            f"{entry['manager']}/{entry['operation']}"
            for entry in get(mgmt, kind, name, namespace=namespace)["metadata"]["managedFields"]
            if entry["manager"].startswith("pulumi-kubernetes")
        )
        for kind, (name, namespace) in objects.items()
    }


def rotated_tokens(engine: Engine, mgmt: ControlPlane, folder: Path, workload: str) -> dict[str, Any]:
    """After the recovery, the read-only tokens rotated (readonlyTokenGeneration 2, docs/operations.md
    "Read-only access") and CAPMOX's token rotated back, in one run; and a read through each new
    kubeconfig as the inspector makes it (review 4, finding 4: the imported token's data went into
    the new Secret, and both answered 401), the workload cluster's by its name `workload`. CAPMOX's
    rotation changes the InfrastructureProvider CR the lost stack had updated last."""
    out: dict[str, Any] = {
        "config": [
            engine.pulumi("config", "set", "readonlyTokenGeneration", "2").returncode,
            engine.pulumi("config", "set", "--secret", "capmoxTokenSecret", stdin=CAPMOX_SECRET).returncode,
        ]
    }
    out["up"] = run(engine, mgmt, "up")
    out["capmox_secret"] = capmox_secret(mgmt)
    outputs = engine.outputs()
    out["reads"] = {}
    for name, text in (
        ("lab-mgmt", outputs["readonlyKubeconfig"]),
        (workload, outputs["workloadReadonlyKubeconfigs"][workload]),
    ):
        path = folder / f"{name}-ro.kubeconfig"
        path.write_text(text)
        path.chmod(0o600)
        done = mgmt.kubectl_as(path, "get", "nodes")
        out["reads"][name] = {"rc": done.returncode, "stderr": done.stderr[-300:]}
    return out
