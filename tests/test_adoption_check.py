"""tools/adoption_check.py: the gate between the adoption preview and `pulumi up`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tools import adoption_check

STACK = "urn:pulumi:lab::lab-mgmt::"
VM = f"{STACK}homelab:index:ManagementVm$proxmoxve:index/vmLegacy:VmLegacy::mgmt-vm"
RELEASE = f"{STACK}homelab:index:ClusterApi$kubernetes:helm.sh/v3:Release::mgmt-cert-manager"
COMMAND = f"{STACK}homelab:index:K3sNode$command:remote:Command::mgmt-host-ready"
ROLE = f"{STACK}homelab:index:ReadOnlyAccess$kubernetes:rbac.authorization.k8s.io/v1:ClusterRole::mgmt-readonly-role"
NAMESPACE = f"{STACK}homelab:index:ClusterApi$kubernetes:core/v1:Namespace::mgmt-ns-capi-system"
CAPMOX_SECRET = f"{STACK}homelab:index:ClusterApi$kubernetes:core/v1:Secret::mgmt-capmox-credentials"
TOKEN_SECRET = f"{STACK}homelab:index:ReadOnlyAccess$kubernetes:core/v1:Secret::mgmt-readonly-token"
WEBHOOK_WAITS = [
    f"{STACK}homelab:index:ClusterApi$kubernetes:admissionregistration.k8s.io/v1:{kind}WebhookConfigurationPatch"
    f"::mgmt-operator-webhook-{kind.lower()}"
    for kind in ("Validating", "Mutating")
]
# The same type anywhere else is someone else's webhook configuration.
FOREIGN_WEBHOOK_PATCH = (
    f"{STACK}homelab:index:ReadOnlyAccess$kubernetes:admissionregistration.k8s.io/v1:"
    "ValidatingWebhookConfigurationPatch::mgmt-other-webhook"
)
WORKLOAD_TOKEN_SECRET = (
    f"{STACK}homelab:index:WorkloadCluster$homelab:index:ReadOnlyAccess$kubernetes:core/v1:Secret::lab1-readonly-token"
)
GOOD = [
    {"op": "same", "urn": f"{STACK}pulumi:pulumi:Stack::lab-mgmt-lab"},
    {"op": "import", "urn": VM},
    {"op": "import", "urn": RELEASE},
    {"op": "create", "urn": COMMAND},
    {"op": "create", "urn": ROLE},
    {"op": "create", "urn": TOKEN_SECRET},
    {"op": "create", "urn": WORKLOAD_TOKEN_SECRET},
    *({"op": "create", "urn": urn} for urn in WEBHOOK_WAITS),
]


def check(tmp_path: Path, steps: list[dict[str, Any]]) -> int:
    preview = tmp_path / "preview.json"
    preview.write_text(json.dumps({"steps": steps}))
    return adoption_check.main(["adoption_check.py", str(preview)])


def test_imports_and_the_programs_own_objects_pass(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert check(tmp_path, GOOD) == 0
    assert "9 steps" in capsys.readouterr().out


@pytest.mark.parametrize(
    "step",
    [
        {"op": "update", "urn": VM},
        {"op": "replace", "urn": RELEASE},
        {"op": "delete", "urn": ROLE},
        {"op": "create-replacement", "urn": VM},
        {"op": "create", "urn": NAMESPACE},  # exists in the lab: must be imported, not created
        # CAPMOX keeps the playbook's Secret while adopting (capmoxExistingSecret).
        {"op": "create", "urn": CAPMOX_SECRET},
        {"op": "create", "urn": FOREIGN_WEBHOOK_PATCH},
        # A changed wait is a write the adoption run has no business making.
        {"op": "update", "urn": WEBHOOK_WAITS[0]},
    ],
    ids=[
        *("update", "replace", "delete", "create-replacement", "create-existing", "create-capmox-secret"),
        *("create-foreign-webhook-patch", "update-webhook-wait"),
    ],
)
def test_anything_that_would_change_the_lab_fails_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], step: dict[str, str]
) -> None:
    assert check(tmp_path, [*GOOD, step]) == 1
    assert f"{step['op']}: {step['urn']}" in capsys.readouterr().err


def test_an_empty_or_foreign_file_is_no_pass(tmp_path: Path) -> None:
    assert check(tmp_path, []) == 2


def test_a_preview_that_failed_is_no_pass_whatever_it_planned(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Found by the box (tests/test_box_whole_adoption.py): a preview that stops on an error plans
    only the steps before it, all of them harmless; its `diagnostics` carry the error."""
    preview = tmp_path / "preview.json"
    error = "error: proxmoxve:index/vmLegacy:VmLegacy resource 'mgmt-vm' has a problem: expected type"
    preview.write_text(
        json.dumps(
            {
                "steps": GOOD,
                "diagnostics": [{"severity": "info", "message": "x"}, {"severity": "error", "message": error}],
            }
        )
    )
    assert adoption_check.main(["adoption_check.py", str(preview)]) == 1
    assert error in capsys.readouterr().err


def test_a_preview_the_engine_stopped_midway_is_no_pass(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Found by the box: a preview targeted at the node (`--target`) that the engine cancelled
    exited 1 with no error diagnostic; its JSON held the harmless steps before that and, as
    `info#err`, the Python program's traceback (the resource monitor shut down under it)."""
    preview = tmp_path / "preview.json"
    stderr = [
        "Traceback (most recent call last):\n\n",
        '  File ".../pulumi/runtime/resource.py", line 1340, in do_rpc_call\n\n',
        "pulumi.errors.RunError: Resource monitor has terminated, shutting down\n\n",
    ]
    preview.write_text(
        json.dumps(
            {
                "steps": GOOD,
                "diagnostics": [
                    {"severity": "warning", "message": "warning: resource plugin kubernetes is expected ..."},
                    *({"severity": "info#err", "message": line} for line in stderr),
                ],
            }
        )
    )
    assert adoption_check.main(["adoption_check.py", str(preview)]) == 1
    err = capsys.readouterr().err
    assert "this preview failed" in err
    assert "Resource monitor has terminated" in err


def test_the_programs_own_stderr_without_a_traceback_passes(tmp_path: Path) -> None:
    """Lines a program prints on stderr while it runs on are not a failure."""
    preview = tmp_path / "preview.json"
    preview.write_text(
        json.dumps({"steps": GOOD, "diagnostics": [{"severity": "info#err", "message": "fetching chart index\n"}]})
    )
    assert adoption_check.main(["adoption_check.py", str(preview)]) == 0


# --- a workload cluster taken over (docs/adoption.md, "A workload cluster made with clusterctl") ---

WORKLOAD = f"{STACK}homelab:index:WorkloadCluster"
LAB1_WORKER_TEMPLATE = (
    f"{WORKLOAD}$kubernetes:infrastructure.cluster.x-k8s.io/v1alpha2:ProxmoxMachineTemplate::lab1-worker-9cc14bd7"
)
LAB1_DEPLOYMENT = f"{WORKLOAD}$kubernetes:cluster.x-k8s.io/v1beta2:MachineDeployment::lab1-workers"
CILIUM = f"{WORKLOAD}$homelab:index:Cilium$kubernetes:helm.sh/v3:Release::lab1-cilium"
TAKEOVER = [
    {"op": "create", "urn": f"{WORKLOAD}::lab1"},
    {"op": "import", "urn": LAB1_WORKER_TEMPLATE},
    {"op": "import", "urn": LAB1_DEPLOYMENT},
    {"op": "read", "urn": f"{WORKLOAD}$kubernetes:core/v1:Secret::lab1-admin-kubeconfig"},
    {"op": "create", "urn": f"{WORKLOAD}$pulumi:providers:kubernetes::lab1-kubernetes"},
    {"op": "create", "urn": f"{WORKLOAD}$homelab:index:Cilium::lab1"},
    {"op": "import", "urn": CILIUM},
    {"op": "create", "urn": f"{WORKLOAD}$homelab:index:ClusterAutoscaler::lab1"},
    {
        "op": "create",
        "urn": f"{WORKLOAD}$homelab:index:ClusterAutoscaler$kubernetes:helm.sh/v3:Release::lab1-autoscaler",
    },
    {"op": "create", "urn": f"{WORKLOAD}$homelab:index:ReadOnlyAccess::lab1-readonly"},
    {"op": "create", "urn": f"{WORKLOAD}$homelab:index:ReadOnlyAccess$kubernetes:core/v1:Secret::lab1-readonly-token"},
]


def test_a_workload_cluster_taken_over_passes(tmp_path: Path) -> None:
    assert check(tmp_path, [*GOOD, *TAKEOVER]) == 0


@pytest.mark.parametrize("urn", [LAB1_WORKER_TEMPLATE, LAB1_DEPLOYMENT, CILIUM], ids=["template", "md", "cilium"])
def test_a_create_of_what_lab1_runs_fails(tmp_path: Path, capsys: pytest.CaptureFixture[str], urn: str) -> None:
    steps = [step if step["urn"] != urn else {"op": "create", "urn": urn} for step in TAKEOVER]
    assert check(tmp_path, [*GOOD, *steps]) == 1
    assert f"create: {urn}" in capsys.readouterr().err


def test_an_update_names_each_field_that_differs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """As `pulumi preview --json` writes a step (pulumi pkg/display/json.go, PreviewStep)."""
    update = {
        "op": "update",
        "urn": LAB1_WORKER_TEMPLATE,
        "diffReasons": ["spec"],
        "detailedDiff": {
            "spec.template.spec.network.networkDevices[0].vlan": {"kind": "add", "inputDiff": False},
            "spec.template.spec.numCores": {"kind": "update", "inputDiff": False},
        },
    }
    assert check(tmp_path, [*GOOD, *TAKEOVER, update]) == 1
    err = capsys.readouterr().err
    assert f"update: {LAB1_WORKER_TEMPLATE}\n" in err
    assert "    spec.template.spec.network.networkDevices[0].vlan (add)\n" in err
    assert "    spec.template.spec.numCores (update)\n" in err


def test_a_replacement_without_a_detailed_diff_names_its_reasons(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    replace = {
        "op": "replace",
        "urn": LAB1_DEPLOYMENT,
        "diffReasons": ["metadata", "spec"],
        "replaceReasons": ["metadata"],
        "detailedDiff": None,
    }
    assert check(tmp_path, [*GOOD, *TAKEOVER, replace]) == 1
    err = capsys.readouterr().err
    assert "    metadata (replace)\n" in err
    assert "    spec (differs)\n" in err
