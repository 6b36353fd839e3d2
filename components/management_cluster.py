"""What the program puts on the management cluster once it answers: cert-manager, the operator
and its providers (ClusterApi), read-only access to it, and each workload cluster's Cluster API
objects with read-only access into it. __main__.py
wires this onto the k3s node it built; the lab in a box (e2e/box/box_program.py) wires the very same
onto its own API server, so that what the box proves is what the program does."""

from __future__ import annotations

from collections.abc import Mapping

import pulumi
import pulumi_kubernetes as kubernetes

from components import cluster_takeover, hand_made_clusters, rollouts
from components.charts import ClusterCharts
from components.cluster_api import ClusterApi, ClusterNode
from components.cluster_template import ClusterTemplateError, render_cluster
from components.readonly_access import ReadOnlyAccess
from components.run_records import RunRecords
from components.settings import PROJECT, Settings
from components.settings import WorkloadCluster as WorkloadClusterSettings
from components.workload_cluster import WorkloadCluster

PROVIDER_VERSIONS_OUTPUT = "providerVersions"
"""The providers' versions, which the next run's upgrade order check compares with."""


def manage_cluster(
    settings: Settings,
    node: ClusterNode,
    cluster_charts: ClusterCharts,
    records: RunRecords,
) -> None:
    """`cluster_charts`: components.charts.cluster_charts, which the caller makes sure of before
    it registers anything. `records`: the last deployment's outputs, and where the cluster's own
    go: the read-only kubeconfigs and the providers' versions."""
    cluster_api = ClusterApi(
        "mgmt",
        node,
        settings.cluster_api,
        cluster_charts,
        proxmox_url=settings.proxmox.endpoint,
        protected=settings.vm.protected,
        adopt=settings.adopt,
        recover=settings.recover,
        deployed_versions=records.last_value(PROVIDER_VERSIONS_OUTPUT),
    )
    readonly = ReadOnlyAccess(
        "mgmt-readonly",
        node.on_cluster,
        node.kubeconfig,
        context_name=f"{settings.vm.name}-ro",
        token_generation=settings.access.readonly_token_generation,
        adopt=settings.recover,
    )
    taken_over = records.last_value(cluster_takeover.RECORD_OUTPUT)
    workload_clusters = _workload_clusters(settings, node, cluster_charts, records, providers=cluster_api.providers)
    kubeconfigs = pulumi.Output.all(**{w.name: w.readonly_kubeconfig for w in workload_clusters})
    records.keep("readonlyKubeconfig", readonly.kubeconfig)
    # Workload cluster name -> its read-only kubeconfig, secret as a whole. all() of no outputs is
    # an empty list, not a mapping: dict() makes it one either way.
    records.keep("workloadReadonlyKubeconfigs", pulumi.Output.secret(kubeconfigs.apply(dict)))
    records.keep(PROVIDER_VERSIONS_OUTPUT, cluster_api.provider_versions)
    last_specs = records.last_value(rollouts.ROLLOUT_OUTPUT).apply(lambda last: last or {})
    # Warned of from the settings alone, so that a preview says it whatever it cannot know of the
    # objects; recorded from what the run left running.
    specs = pulumi.Output.all(
        last_specs, pulumi.Output.all(**{w.record_key: w.machine_specs for w in workload_clusters})
    ).apply(lambda args: _announced(args[0], dict(args[1])))
    runs = pulumi.Output.all(**{w.record_key: w.runs_declared for w in workload_clusters}).apply(dict)
    records.keep(
        rollouts.ROLLOUT_OUTPUT,
        pulumi.Output.all(last_specs, specs, runs).apply(
            lambda args: {key: rollouts.recorded(args[0].get(key), now, args[2][key]) for key, now in args[1].items()}
        ),
    )
    kept_names = pulumi.Output.all(**{w.record_key: w.kept_names for w in workload_clusters})
    declared = [cluster_takeover.record_key(cluster) for cluster in settings.workload.clusters]
    records.keep(
        cluster_takeover.RECORD_OUTPUT,
        pulumi.Output.all(taken_over, kept_names).apply(
            lambda args: cluster_takeover.record(args[0], args[1], declared)
        ),
    )


def _workload_clusters(
    settings: Settings,
    node: ClusterNode,
    cluster_charts: ClusterCharts,
    records: RunRecords,
    *,
    providers: list[kubernetes.apiextensions.CustomResource],
) -> list[WorkloadCluster]:
    """Each workload cluster the run declares (_workload_cluster); the first in a namespace
    declares it, the others in it wait for that one's."""
    workload_clusters: list[WorkloadCluster] = []
    namespaces: dict[str, pulumi.Resource | None] = {}
    for cluster in settings.workload.clusters:
        workload = _workload_cluster(
            settings,
            cluster,
            node,
            cluster_charts,
            records,
            providers=providers,
            namespace=namespaces.get(cluster.namespace),
        )
        if workload is not None:
            namespaces.setdefault(cluster.namespace, workload.namespace)
            workload_clusters.append(workload)
    return workload_clusters


def _announced(last: Mapping[str, Mapping[str, str]], now: dict[str, dict[str, str]]) -> dict[str, dict[str, str]]:
    """`now`, once each cluster's rollout has been warned of (components.rollouts)."""
    for key, specs in now.items():
        rollouts.announce(key, last.get(key), specs)
    return now


def _workload_cluster(
    settings: Settings,
    cluster: WorkloadClusterSettings,
    node: ClusterNode,
    cluster_charts: ClusterCharts,
    records: RunRecords,
    *,
    providers: list[kubernetes.apiextensions.CustomResource],
    namespace: pulumi.Resource | None,
) -> WorkloadCluster | None:
    """The cluster's Cluster API objects, once the providers are Ready, and what goes with it.
    None, in a best-effort run (skipCredentialsCheck) that could not fetch CAPMOX's template, for
    a protected cluster: the engine refuses to delete its protected objects, so leaving it out of
    that run can plan nothing worse than a refusal. From the last run's `records`: the clusters it
    took over (components.cluster_takeover) and those it declared (components.rollouts), whatever
    the stack is called now (a `pulumi stack rename` keeps the state, not the name in the mark)."""
    workload_charts = cluster_charts.workload
    template = workload_charts.cluster_templates.get(cluster.template_version) if workload_charts else None
    if workload_charts is None or template is None:
        if settings.proxmox.skip_credentials_check and cluster.protected:
            pulumi.log.warn(
                f"{PROJECT}:workloadClusters: {cluster.name} is left out of this run: CAPMOX's cluster template "
                "could not be fetched (see the warning above)"
            )
            return None
        raise ClusterTemplateError(
            f"{PROJECT}:workloadClusters: CAPMOX's cluster template {cluster.template_version} (templateVersion) "
            f"could not be fetched (see the warning above), so {cluster.name}'s objects cannot be declared; "
            "run again where capmoxReleaseUrl can be reached, or put the file in the project's folder"
        )
    objects = render_cluster(template, cluster)
    takeover = cluster_takeover.Takeover(
        cluster,
        objects,
        node.kubeconfig,
        last_names=records.last_value(cluster_takeover.RECORD_OUTPUT).apply(
            lambda record: (record or {}).get(cluster_takeover.record_key(cluster))
        ),
        held=records.last_value(rollouts.ROLLOUT_OUTPUT).apply(
            lambda record: cluster_takeover.record_key(cluster) in (record or {})
        ),
        stack=hand_made_clusters.this_stack(),
        autoscaler_image_tag=settings.workload.autoscaler_image_tag,
        kubeconfig_file=str(settings.k3s.kubeconfig_path or hand_made_clusters.ADMIN_KUBECONFIG_FILE),
    )
    return WorkloadCluster(
        cluster,
        objects,
        node.provider,
        takeover,
        on_cluster=node.on_cluster,
        charts=workload_charts,
        workload=settings.workload,
        providers=providers,
        token_generation=settings.access.readonly_token_generation,
        namespace=namespace,
    )
