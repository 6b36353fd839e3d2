"""Taking over a workload cluster that clusterctl made (components.cluster_takeover): lab1 as
`clusterctl generate cluster | kubectl apply` left it (the tests' stand-in template rendered with
the entry's values, each object with kubectl's last-applied-configuration), imported in the
adoption run under clusterctl's names with exactly what clusterctl rendered, and the stack's own
from then on through the record it leaves."""

from __future__ import annotations

import base64
import copy
import gzip
import json
import tarfile
from typing import Any

import harness
import pytest
import yaml
from test_settings import PREFIX, problems

from components import cilium_values, field_manager
from components.adoption import OBJECT_INPUTS, RELEASE_INPUTS
from components.autoscaler_flags import CHART_DEFAULTS, flag_value
from components.cluster_takeover import (
    CILIUM_RELEASE,
    EVERY_RELEASE,
    LAST_APPLIED,
    RECORD_OUTPUT,
    AdoptedClusterMissingError,
    CiliumValuesDroppedError,
    HandMadeAutoscalerFlagsError,
    TakeoverMismatchError,
    WorkerCountOutsideRangeError,
    object_path,
)
from components.cluster_template import substitute, template_variables
from components.hand_made_clusters import STACK_MARK, HandMadeClusterError
from components.settings import SettingsError, WorkloadCluster, parse_settings
from components.settings.workload import NODE_GROUP_KEYS
from e2e.engine import vendor

CUSTOM_RESOURCE_TYPES = tuple(
    f"kubernetes:{prefix}cluster.x-k8s.io/" for prefix in ("", "controlplane.", "bootstrap.", "infrastructure.")
)
PMT = "kubernetes:infrastructure.cluster.x-k8s.io/v1alpha2:ProxmoxMachineTemplate"
MD = "kubernetes:cluster.x-k8s.io/v1beta2:MachineDeployment"
KCP = "kubernetes:controlplane.cluster.x-k8s.io/v1beta2:KubeadmControlPlane"
CLUSTER = "kubernetes:cluster.x-k8s.io/v1beta2:Cluster"
RELEASE = "kubernetes:helm.sh/v3:Release"


def taken_over_entry(**changes: Any) -> dict[str, Any]:
    """lab1 with clusterctl's values: no VLAN and the template's pod CIDR."""
    [lab1] = harness.stack_workload_clusters()
    entry = {key: value for key, value in lab1.items() if key != "vlan"}
    return {**entry, "podCidr": "192.168.0.0/16", "takenOver": True, **changes}


def settings_of(entry: dict[str, Any]) -> WorkloadCluster:
    raw = {
        key.removeprefix(PREFIX): value for key, value in harness.stack_config({"workloadClusters": [entry]}).items()
    }
    return parse_settings(raw).workload.clusters[0]


def clusterctl_lab1(entry: dict[str, Any], worker_count: str = "1") -> dict[str, dict[str, Any]]:
    """API path -> the live object, as `clusterctl generate cluster` rendered the template from the
    entry's values (one sizing for both templates, as clusterctl has) and `kubectl apply` left it."""
    cluster = settings_of(entry)
    variables = {**template_variables(cluster, cluster.workers.sizing), "WORKER_MACHINE_COUNT": worker_count}
    live = {}
    for applied in (o for o in yaml.safe_load_all(substitute(harness.CLUSTER_TEMPLATE.read_text(), variables)) if o):
        applied["metadata"]["namespace"] = cluster.namespace
        running = copy.deepcopy(applied)
        running["metadata"]["annotations"] = {LAST_APPLIED: json.dumps(applied)}
        # kubectl holds what it applied, the MachineDeployment's replicas among it.
        fields: dict[str, Any] = (
            {"f:spec": {"f:replicas": {}}} if applied["kind"] == "MachineDeployment" else {"f:spec": {}}
        )
        running["metadata"]["managedFields"] = [
            {"manager": "kubectl-client-side-apply", "operation": "Update", "fieldsV1": fields}
        ]
        running["status"] = {"observedGeneration": 1}
        live[object_path(applied)] = running
    return live


def made_the_programs(live: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """lab1 after W6: each object applied under the program's field manager, the Cluster marked as
    this stack's."""
    for running in (o for o in live.values() if o.get("apiVersion", "").split("/")[0].endswith("cluster.x-k8s.io")):
        running["metadata"]["managedFields"].append({"manager": field_manager.NAME, "operation": "Apply"})
        if running["kind"] == "Cluster":
            running["metadata"]["annotations"][STACK_MARK] = "organization/lab-mgmt/lab"
    return live


@pytest.fixture(scope="module")
def adopted() -> harness.Run:
    entry = taken_over_entry(adopt=True)
    return harness.run_program({"workloadClusters": [entry]}, live_objects=clusterctl_lab1(entry))


def cluster_objects(run: harness.Run) -> list[harness.Resource]:
    return [r for r in run.resources.values() if r.type.startswith(CUSTOM_RESOURCE_TYPES) and r.name.startswith("lab1")]


def test_each_object_is_imported_under_clusterctls_name_as_it_runs(adopted: harness.Run) -> None:
    imports = {r.plain["kind"] + " " + r.name: r.import_id for r in cluster_objects(adopted)}
    worker, control_plane = (
        next(r.name for r in adopted.of_type(PMT) if r.name.startswith(p))
        for p in ("lab1-worker-", "lab1-control-plane-")
    )
    assert imports == {
        "Cluster lab1-cluster": "default/lab1",
        "ProxmoxCluster lab1-proxmox-cluster": "default/lab1",
        "KubeadmControlPlane lab1-control-plane": "default/lab1-control-plane",
        f"ProxmoxMachineTemplate {control_plane}": "default/lab1-control-plane",
        f"ProxmoxMachineTemplate {worker}": "default/lab1-worker",
        "KubeadmConfigTemplate lab1-worker-config": "default/lab1-worker",
        "MachineDeployment lab1-workers": "default/lab1-workers",
    }
    for resource in cluster_objects(adopted):
        assert resource.ignore_changes == OBJECT_INPUTS, resource.name
        assert resource.plain["metadata"]["name"] == resource.import_id.split("/")[1], resource.name
        assert resource.protect == (resource.type != PMT), resource.name
    assert (
        adopted.get(KCP, "lab1-control-plane").plain["spec"]["machineTemplate"]["spec"]["infrastructureRef"]["name"]
        == "lab1-control-plane"
    )
    assert (
        adopted.get(MD, "lab1-workers").plain["spec"]["template"]["spec"]["infrastructureRef"]["name"] == "lab1-worker"
    )


def test_adopting_declares_nothing_clusterctl_did_not_render_but_the_node_groups_annotations(
    adopted: harness.Run,
) -> None:
    """The node group's annotations are declared, and compared only where the running object has
    them (the owner's hand-installed autoscaler needed them): clusterctl's lab1 has none."""
    deployment = adopted.get(MD, "lab1-workers").plain
    assert sorted(deployment["metadata"]["annotations"]) == sorted([*NODE_GROUP_KEYS, *harness.MANAGED])
    assert "replicas" not in deployment["spec"]
    cluster = adopted.get(CLUSTER, "lab1-cluster").plain
    assert cluster["metadata"]["annotations"] == harness.MANAGED
    assert cluster["spec"]["clusterNetwork"] == {"pods": {"cidrBlocks": ["192.168.0.0/16"]}}


def test_cilium_is_imported_as_it_runs_and_the_autoscaler_is_the_programs(adopted: harness.Run) -> None:
    cilium = adopted.get(RELEASE, "lab1-cilium")
    assert (cilium.import_id, cilium.ignore_changes) == ("kube-system/cilium", RELEASE_INPUTS)
    assert adopted.get(RELEASE, "lab1-autoscaler").import_id == ""


def record_of(run: harness.Run) -> dict[str, dict[str, str]]:
    record, secret = run.outputs[RECORD_OUTPUT]
    assert not secret
    return dict(record)


def test_the_adoption_run_records_the_names_clusterctl_gave(adopted: harness.Run) -> None:
    templates = {r.name: r.plain["metadata"]["name"] for r in adopted.of_type(PMT)}
    assert record_of(adopted) == {"default/lab1": templates}
    assert sorted(templates.values()) == ["lab1-control-plane", "lab1-worker"]


def test_a_cluster_the_program_made_leaves_no_record() -> None:
    assert record_of(harness.run_program()) == {}


def test_after_the_adoption_the_record_keeps_the_names_and_the_cluster_is_the_stacks(adopted: harness.Run) -> None:
    entry = taken_over_entry()
    after = harness.run_program(
        {"workloadClusters": [entry]},
        previous_outputs={RECORD_OUTPUT: record_of(adopted)},
        live_objects=clusterctl_lab1(entry),
    )
    # The seven objects, each read once (components.cluster_takeover.Live): none has been applied
    # by the program yet, so this run makes each its own and checks it again; then lab1's
    # kubeconfig, for Cilium's running values (none here: no lab1-kubeconfig Secret), and the
    # releases on the management cluster, for an autoscaler installed by hand (none).
    seven = [object_path(r.plain) for r in cluster_objects(after)]
    assert sorted(after.cluster_reads[:7]) == sorted(seven)
    assert after.cluster_reads[7:] == ["/api/v1/namespaces/default/secrets/lab1-kubeconfig", EVERY_RELEASE]
    assert record_of(after) == record_of(adopted)
    for resource in cluster_objects(after):
        assert resource.plain["metadata"]["name"] == adopted.get(resource.type, resource.name).plain["metadata"]["name"]
        assert (resource.import_id, resource.ignore_changes) == ("", [])
    # The program's annotations come back: a metadata-only update of these two.
    assert "pulumi.com/waitFor" in after.get(CLUSTER, "lab1-cluster").plain["metadata"]["annotations"]
    assert len(after.get(MD, "lab1-workers").plain["metadata"]["annotations"]) == 8
    # And every object's apply takes its fields from kubectl's manager, at preview too.
    for resource in cluster_objects(after):
        assert resource.plain["metadata"]["annotations"]["pulumi.com/patchForce"] == "true", resource.name
    assert after.get(MD, "lab1-workers").plain["spec"] == adopted.get(MD, "lab1-workers").plain["spec"]


def test_without_the_record_the_taken_over_cluster_is_refused_as_hand_made() -> None:
    entry = taken_over_entry()
    with pytest.raises(HandMadeClusterError, match="kubectl-client-side-apply"):
        harness.run_program({"workloadClusters": [entry]}, live_objects=clusterctl_lab1(entry))


def test_a_sizing_change_after_the_takeover_is_a_new_template_under_its_digested_name(adopted: harness.Run) -> None:
    entry = taken_over_entry(workers={"maxSize": 3, "memoryMib": 32768})
    bigger = harness.run_program({"workloadClusters": [entry]}, previous_outputs={RECORD_OUTPUT: record_of(adopted)})
    names = {r.name: r.plain["metadata"]["name"] for r in bigger.of_type(PMT)}
    worker = next(name for name in names if name.startswith("lab1-worker-"))
    assert names[worker] == worker
    assert "lab1-control-plane" in names.values()
    assert bigger.get(MD, "lab1-workers").plain["spec"]["template"]["spec"]["infrastructureRef"]["name"] == worker
    # The old name stays recorded: the sizing changed back finds clusterctl's template again.
    assert record_of(bigger) == record_of(adopted)


def test_adopting_a_cluster_that_does_not_run_is_refused_naming_the_setting() -> None:
    record = harness.Run()
    with pytest.raises(AdoptedClusterMissingError, match="lab1 has adopt: true, but its Cluster default/lab1 does not"):
        harness.run_program({"workloadClusters": [taken_over_entry(adopt=True)]}, record=record)
    assert cluster_objects(record) == []


def test_settings_that_render_another_cluster_are_refused_naming_each_field() -> None:
    entry = taken_over_entry(adopt=True)
    live = clusterctl_lab1({**entry, "workers": {"maxSize": 3, "cores": 2}})
    # The template has no VLAN variable: an owner who needed one edited the manifest before applying.
    worker = live[
        "/apis/infrastructure.cluster.x-k8s.io/v1alpha2/namespaces/default/proxmoxmachinetemplates/lab1-worker"
    ]
    applied = json.loads(worker["metadata"]["annotations"][LAST_APPLIED])
    applied["spec"]["template"]["spec"]["network"]["networkDevices"][0]["vlan"] = 4
    worker["metadata"]["annotations"][LAST_APPLIED] = json.dumps(applied)
    record = harness.Run()
    with pytest.raises(TakeoverMismatchError) as refused:
        harness.run_program({"workloadClusters": [entry]}, live_objects=live, record=record)
    message = str(refused.value)
    for line in (
        "ProxmoxMachineTemplate lab1-worker: spec.template.spec.network.networkDevices[0].vlan: running 4, "
        "the settings render nothing",
        "ProxmoxMachineTemplate lab1-worker: spec.template.spec.numCores: running 2, the settings render 4",
        "ProxmoxMachineTemplate lab1-control-plane: spec.template.spec.numCores: running 2, the settings render 4",
    ):
        assert line in message
    assert "replicas" not in message
    assert cluster_objects(record) == []


def test_a_live_spec_changed_since_kubectl_apply_is_refused_naming_the_field() -> None:
    """`kubectl patch` changes the live object, not kubectl's record of the last apply: the run with
    adopt off would write the recorded value back (here a Kubernetes downgrade of the control plane)."""
    entry = taken_over_entry(adopt=True)
    live = clusterctl_lab1(entry)
    [control_plane] = [o for o in live.values() if o["kind"] == "KubeadmControlPlane"]
    control_plane["spec"]["version"] = "v1.35.10"
    control_plane["spec"]["rolloutStrategy"] = {"type": "RollingUpdate"}  # the API server's default: not compared
    with pytest.raises(TakeoverMismatchError) as refused:
        harness.run_program({"workloadClusters": [entry]}, live_objects=live)
    differences = str(refused.value).split("\n    ")[1:]
    assert differences == [
        'KubeadmControlPlane lab1-control-plane: spec.version: running "v1.35.10", the settings render "v1.35.9"'
    ]


@pytest.mark.parametrize(
    ("running", "fragment"),
    [
        (
            "5",
            "runs 5 workers (spec.replicas, held by kubectl), outside workers.minSize..maxSize 0..3: the run that "
            "hands kubectl's fields to the program has Cluster API set it to 3, deleting 2 workers. Set "
            "workers.maxSize to 5",
        ),
        ("0", None),
    ],
    ids=["above-maxSize", "inside"],
)
@pytest.mark.parametrize("adopt", [True, False], ids=["adopting", "adopt-off"])
def test_a_worker_count_outside_min_max_is_refused_while_kubectl_holds_it(
    adopted: harness.Run, running: str, fragment: str | None, adopt: bool
) -> None:
    entry = taken_over_entry(adopt=adopt)
    live = clusterctl_lab1(entry, worker_count=running)
    previous = {} if adopt else {RECORD_OUTPUT: record_of(adopted)}
    if fragment is None:
        harness.run_program({"workloadClusters": [entry]}, live_objects=live, previous_outputs=previous)
        return
    with pytest.raises(WorkerCountOutsideRangeError) as refused:
        harness.run_program({"workloadClusters": [entry]}, live_objects=live, previous_outputs=previous)
    assert "lab1's MachineDeployment default/lab1-workers " + fragment in str(refused.value)


def test_a_worker_count_the_autoscaler_holds_is_its_own() -> None:
    """After the takeover nobody but the autoscaler's /scale writes it: any count is left alone."""
    entry = taken_over_entry()
    live = made_the_programs(clusterctl_lab1(entry, worker_count="5"))
    [deployment] = [o for o in live.values() if o["kind"] == "MachineDeployment"]
    deployment["metadata"]["managedFields"] = [{"manager": field_manager.NAME, "operation": "Apply"}]
    adopted = harness.run_program({"workloadClusters": [taken_over_entry(adopt=True)]}, live_objects=live)
    harness.run_program(
        {"workloadClusters": [entry]}, previous_outputs={RECORD_OUTPUT: record_of(adopted)}, live_objects=live
    )


# --- the settings ------------------------------------------------------------------------------------


def workload_problems(entry: dict[str, Any]) -> list[str]:
    with pytest.raises(SettingsError) as error:
        settings_of(entry)
    return problems(error.value)


def test_adopt_needs_takenover_and_protection() -> None:
    entry = taken_over_entry(adopt=True, takenOver=False, protected=False, podCidr="10.244.0.0/16")
    assert workload_problems(entry) == [
        "lab-mgmt:workloadClusters[0].adopt: true needs protected: true: a cluster being taken over is never deleted "
        "by Pulumi",
        "lab-mgmt:workloadClusters[0].adopt: true needs takenOver: true (the cluster was made by clusterctl and "
        "stays as it was made), or, for a cluster lab-mgmt made under a stack whose state is lost, recover=true",
    ]


def test_the_templates_pod_cidr_is_refused_for_a_new_cluster() -> None:
    lines = workload_problems(taken_over_entry(takenOver=False))
    assert lines
    assert all(line.startswith("lab-mgmt:workloadClusters[0].podCidr: 192.168.0.0/16 overlaps") for line in lines)


def test_a_taken_over_cluster_keeps_its_pod_cidr_with_a_warning_naming_the_overlap() -> None:
    raw = {
        key.removeprefix(PREFIX): v
        for key, v in harness.stack_config({"workloadClusters": [taken_over_entry()]}).items()
    }
    settings = parse_settings(raw)
    assert settings.workload.clusters[0].pod_cidr.exploded == "192.168.0.0/16"
    assert settings.warnings
    assert all(w.startswith("lab-mgmt:workloadClusters[0].podCidr: 192.168.0.0/16 overlaps") for w in settings.warnings)
    assert any("vmAddress" in w for w in settings.warnings)


def test_a_taken_over_cluster_declares_no_service_cidr() -> None:
    [line] = workload_problems(taken_over_entry(serviceCidr="10.96.0.0/12"))
    assert line.startswith("lab-mgmt:workloadClusters[0].serviceCidr: must stay unset with takenOver: true")


def test_an_unknown_key_is_still_refused() -> None:
    [line] = workload_problems(taken_over_entry(adopted=True))
    assert line.startswith("lab-mgmt:workloadClusters[0].adopted: is not a setting this program knows")


def test_a_namespace_other_than_default_is_imported_as_it_runs() -> None:
    entry = taken_over_entry(adopt=True, namespace="clusters")
    run = harness.run_program({"workloadClusters": [entry]}, live_objects=clusterctl_lab1(entry))
    namespace = run.get("kubernetes:core/v1:Namespace", "lab1-namespace")
    assert (namespace.import_id, namespace.ignore_changes) == ("clusters", ["metadata", "spec"])
    assert {r.import_id for r in cluster_objects(run)} >= {"clusters/lab1", "clusters/lab1-control-plane"}


def _release_secret(release: dict[str, Any]) -> dict[str, Any]:
    """A deployed release as Helm stores it: its JSON gzipped and base64-encoded, in a Secret's data."""
    stored = base64.b64encode(gzip.compress(json.dumps(release).encode()))
    return {"data": {"release": base64.b64encode(stored).decode()}}


def _with_cilium(live: dict[str, dict[str, Any]], running_values: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """lab1's kubeconfig Secret on the management cluster and, in lab1, Cilium's deployed release."""
    return {
        **live,
        "/api/v1/namespaces/default/secrets/lab1-kubeconfig": {
            "data": {"value": base64.b64encode(b"lab1's admin kubeconfig").decode()}
        },
        CILIUM_RELEASE: {"items": [_release_secret({"name": "cilium", "config": running_values})]},
    }


@pytest.mark.parametrize("adopt", [True, False], ids=["adopting", "adopt-off"])
def test_a_cilium_value_set_by_hand_is_refused_before_the_run_that_would_drop_it(
    adopted: harness.Run, adopt: bool
) -> None:
    """`helm install cilium --set kubeProxyReplacement=true --set ipam.mode=cluster-pool`: the run
    with adopt off would upgrade the release to the program's values and drop both; each is named
    before anything is sent, from the adoption run on."""
    entry = taken_over_entry(adopt=adopt)
    live = _with_cilium(
        clusterctl_lab1(entry), {"kubeProxyReplacement": True, "ipam": {"mode": "cluster-pool"}, "k8sServicePort": 6443}
    )
    previous = {} if adopt else {RECORD_OUTPUT: record_of(adopted)}
    with pytest.raises(CiliumValuesDroppedError) as refused:
        harness.run_program({"workloadClusters": [entry]}, live_objects=live, previous_outputs=previous)
    assert str(refused.value).split("\n    ")[1:] == [
        "kubeProxyReplacement: running true, the program sets nothing",
        'ipam.mode: running "cluster-pool", the program sets "kubernetes"',
        "k8sServicePort: running 6443, the program sets nothing",
    ]
    assert "ciliumValues" in str(refused.value)


def test_a_cilium_value_kept_in_the_entry_goes_with_the_programs(adopted: harness.Run) -> None:
    kept = {"kubeProxyReplacement": True, "k8sServiceHost": "192.168.4.40"}
    entry = taken_over_entry(ciliumValues=kept)
    live = _with_cilium(clusterctl_lab1(entry), {**kept, "ipam": {"mode": "kubernetes"}})
    previous = {RECORD_OUTPUT: record_of(adopted)}
    run = harness.run_program({"workloadClusters": [entry]}, live_objects=live, previous_outputs=previous)
    assert run.get(RELEASE, "lab1-cilium").plain["values"] == {
        **cilium_values.PROGRAM,
        **kept,
    }


def test_the_programs_own_cilium_values_cannot_be_kept_over_it() -> None:
    entry = taken_over_entry(
        ciliumValues={"ipam": {"mode": "cluster-pool"}, "operator": 2, "bpf": {"masquerade": True}}
    )
    assert workload_problems(entry) == [
        "lab-mgmt:workloadClusters[0].ciliumValues.ipam.mode: is the program's own value for Cilium, not one to keep "
        "beside it",
        "lab-mgmt:workloadClusters[0].ciliumValues.operator: is the program's own value for Cilium, not one to keep "
        "beside it",
    ]


def _with_hand_autoscaler(live: dict[str, dict[str, Any]], values: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """`helm install cluster-autoscaler -n kube-system -f values.yaml` on the management cluster."""
    release = {
        "name": "cluster-autoscaler",
        "namespace": "kube-system",
        "chart": {"metadata": {"name": "cluster-autoscaler", "version": "9.59.0"}},
        "config": {"cloudProvider": "clusterapi", "autoDiscovery": {"clusterName": "lab1"}, **values},
    }
    return {**live, EVERY_RELEASE: {"items": [_release_secret(release)]}}


HAND_FLAGS = {"extraArgs": {"scale-down-unneeded-time": "5m", "balance-similar-node-groups": True, "v": 2}}


@pytest.mark.parametrize("adopt", [True, False], ids=["adopting", "adopt-off"])
def test_a_hand_installed_autoscalers_flags_are_named_before_it_goes(adopted: harness.Run, adopt: bool) -> None:
    entry = taken_over_entry(adopt=adopt)
    live = _with_hand_autoscaler(clusterctl_lab1(entry), HAND_FLAGS)
    previous = {} if adopt else {RECORD_OUTPUT: record_of(adopted)}
    with pytest.raises(HandMadeAutoscalerFlagsError) as refused:
        harness.run_program({"workloadClusters": [entry]}, live_objects=live, previous_outputs=previous)
    assert "installed by hand for lab1 (kube-system/cluster-autoscaler)" in str(refused.value)
    assert str(refused.value).split("\n    ")[1:] == [
        "scale-down-unneeded-time: running 5m, the program's release passes 10m (keep it with "
        "autoscaler.scaleDownUnneededTime)",
        "balance-similar-node-groups: running true, the program's release does not pass it (keep it with "
        "autoscaler.extraArgs.balance-similar-node-groups)",
        "v: running 2, the program's release passes 4 (keep it with autoscaler.extraArgs.v)",
    ]


def test_a_hand_installed_autoscaler_with_the_charts_own_flags_is_not_refused() -> None:
    """A values file copied from the chart's values.yaml sets its extraArgs as the chart does: the
    program's release, from the same chart, passes them too (Helm merges extraArgs over them)."""
    entry = taken_over_entry(adopt=True)
    chart_defaults = {"extraArgs": {"logtostderr": True, "stderrthreshold": "info", "v": 4}}
    live = _with_hand_autoscaler(clusterctl_lab1(entry), chart_defaults)
    harness.run_program({"workloadClusters": [entry]}, live_objects=live)


def test_the_chart_defaults_compared_are_the_pinned_charts() -> None:
    with tarfile.open(vendor.checked("cluster-autoscaler-chart-9.59.0.tar.gz")) as archive:
        [member] = [m for m in archive.getmembers() if m.name.count("/") == 1 and m.name.endswith("/values.yaml")]
        values = yaml.safe_load(archive.extractfile(member).read())  # type: ignore[union-attr]
    assert {flag: flag_value(value) for flag, value in values["extraArgs"].items()} == CHART_DEFAULTS


def test_hand_set_flags_kept_in_the_entry_go_with_the_programs_release() -> None:
    kept = {"scaleDownUnneededTime": "5m", "extraArgs": {"balance-similar-node-groups": True, "v": 2}}
    entry = taken_over_entry(adopt=True, autoscaler=kept)
    run = harness.run_program(
        {"workloadClusters": [entry]}, live_objects=_with_hand_autoscaler(clusterctl_lab1(entry), HAND_FLAGS)
    )
    flags = run.get(RELEASE, "lab1-autoscaler").plain["values"]["extraArgs"]
    assert (flags["scale-down-unneeded-time"], flags["balance-similar-node-groups"], flags["v"]) == ("5m", "true", "2")


def test_an_autoscaler_for_another_cluster_or_the_programs_own_is_not_read_as_lab1s() -> None:
    entry = taken_over_entry(adopt=True)
    other = _with_hand_autoscaler(clusterctl_lab1(entry), {**HAND_FLAGS, "autoDiscovery": {"clusterName": "lab2"}})
    harness.run_program({"workloadClusters": [entry]}, live_objects=other)


def test_the_programs_own_flags_cannot_be_kept_beside_it() -> None:
    entry = taken_over_entry(autoscaler={"extraArgs": {"scan-interval": "5s", "kube-client-qps": 5, "v": 4}})
    assert workload_problems(entry) == [
        "lab-mgmt:workloadClusters[0].autoscaler.extraArgs.scan-interval: has its own key: autoscaler.scanInterval",
        "lab-mgmt:workloadClusters[0].autoscaler.extraArgs.kube-client-qps: is the program's own flag for "
        "cluster-autoscaler, not one to keep beside it",
    ]
