"""Every setting of the program, read once from the stack config and validated up front.

A bad value stops `pulumi preview` before any resource is registered, with one line per problem
that names the config key, what is wrong and what is expected.

One module for each concern, each importing only those above it:
- `config`: the stack config machinery (the keys Pulumi.yaml declares, the reader that collects
  every problem, `SettingsError`, the ranges and patterns shared below);
- `management`: the management side (the Proxmox VE API, the VM and its image, k3s, cert-manager,
  the operator and its providers, read-only access);
- `lab_network`: the lab's own network, as the workload clusters must keep clear of it;
- `workload`: the workload clusters and their checks.
This one puts them together (`Settings`, the checks across them, `parse_settings`,
`load_settings`), and is where the rest of the program imports them from.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import pulumi

from components.settings.config import (
    DEFAULTS,
    KEYS,
    PROJECT,
    SECRET_KEYS,
    YAML_LOADER,
    Reader,
    SettingsError,
    config_value,
    release,
)
from components.settings.lab_network import lab_network_of
from components.settings.management import (
    AccessSettings,
    ClusterApiSettings,
    ImageSettings,
    K3sSettings,
    ProviderVersions,
    ProxmoxSettings,
    VmSettings,
    read_access,
    read_cluster_api,
    read_image,
    read_k3s,
    read_proxmox,
    read_vm,
)
from components.settings.workload import (
    WORKLOAD_CLUSTERS_KEY,
    MachineSizing,
    WorkloadCluster,
    WorkloadSettings,
    read_workload,
)

__all__ = [
    "DEFAULTS",
    "KEYS",
    "PROJECT",
    "SECRET_KEYS",
    "YAML_LOADER",
    "ClusterApiSettings",
    "ImageSettings",
    "K3sSettings",
    "MachineSizing",
    "ProviderVersions",
    "ProxmoxSettings",
    "Settings",
    "SettingsError",
    "VmSettings",
    "WorkloadCluster",
    "WorkloadSettings",
    "config_value",
    "load_settings",
    "parse_settings",
]

# --- all of them, once ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Settings:
    proxmox: ProxmoxSettings
    vm: VmSettings
    image: ImageSettings
    k3s: K3sSettings
    cluster_api: ClusterApiSettings
    access: AccessSettings
    workload: WorkloadSettings
    adopt: bool
    """Take the running lab into the stack as it is (docs/adoption.md): import, change nothing."""
    adopt_cluster_objects: bool
    """Whether this run also manages what is on the cluster; false only in the first adoption run."""
    recover: bool
    """Adopting a lab that lab-mgmt made under a stack whose state or passphrase is lost: what the
    program makes is imported under its own names (docs/operations.md, "Lost state or passphrase")."""
    warnings: tuple[str, ...] = ()
    """Values accepted with a cost, each naming its key; shown as the run's warnings."""


def _check_adoption(r: Reader, settings: Settings) -> None:
    """Adoption imports the running lab and changes nothing in that run; settings that would
    make it create or replace something in the same run are refused."""
    for index, cluster in enumerate(settings.workload.clusters):
        if cluster.adopt and not cluster.taken_over and not settings.recover:
            r.fail(
                f"{WORKLOAD_CLUSTERS_KEY}[{index}].adopt",
                "true needs takenOver: true (the cluster was made by clusterctl and stays as it was made), or, for a "
                "cluster lab-mgmt made under a stack whose state is lost, recover=true",
            )
    if not settings.adopt:
        if settings.recover:
            r.fail("recover", "true needs adopt=true: recovering takes the running lab over without changing it")
        if not settings.adopt_cluster_objects:
            # Only the first adoption run leaves them out; a lab the program manages never drops them.
            r.fail(
                "adoptClusterObjects",
                "false needs adopt=true (the first adoption run, docs/adoption.md step 4); "
                "set it back to true (pulumi config rm adoptClusterObjects)",
            )
        return
    if settings.cluster_api.existing_capmox_secret is None and not settings.recover:
        r.fail(
            "adopt",
            "true needs capmoxExistingSecret (the Secret CAPMOX uses now, e.g. capmox-variables); "
            "a new credentials Secret would change the adopted InfrastructureProvider",
        )
    if settings.vm.rebuild_from_image:
        r.fail("adopt", "true cannot go with vmRebuildFromImage=true: adoption must not replace the VM")
    if not settings.vm.protected:
        r.fail("adopt", "true needs vmProtected=true: an adopted lab is never deleted by Pulumi")


def parse_settings(raw: Mapping[str, str]) -> Settings:
    """Build the settings from raw config strings (keys without the project prefix)."""
    r = Reader(raw)
    proxmox, vm = read_proxmox(r), read_vm(r)
    recover = r.boolean("recover")
    settings = Settings(
        proxmox=proxmox,
        vm=vm,
        image=read_image(r),
        k3s=read_k3s(r),
        cluster_api=read_cluster_api(r),
        access=read_access(r),
        workload=read_workload(r, lab_network_of(proxmox, vm), recover=recover),
        adopt=r.boolean("adopt"),
        adopt_cluster_objects=r.boolean("adoptClusterObjects"),
        recover=recover,
        warnings=tuple(r.warnings),
    )
    _check_adoption(r, settings)
    _check_rebuild(r, settings)
    _check_template_versions(r, settings)
    if r.problems:
        raise SettingsError("invalid stack configuration:\n  " + "\n  ".join(r.problems))
    return settings


def _check_rebuild(r: Reader, settings: Settings) -> None:
    """A rebuild replaces the management cluster, and with its provider every workload cluster's
    objects: the old ones are dropped with the VM (deleted_with) while their VMs run on, and the
    new management cluster creates the clusters again on the same addresses."""
    names = [cluster.name for cluster in settings.workload.clusters]
    if settings.vm.rebuild_from_image and names:
        r.fail(
            "vmRebuildFromImage",
            f"true would replace the management VM while workloadClusters declares {', '.join(names)}: their "
            "Cluster API objects would be created afresh on the new management cluster while their VMs still run "
            "(a second cluster on the same addresses). Remove each through Cluster API first (docs/operations.md, "
            '"Removing a workload cluster"), take it out of workloadClusters, then rebuild',
        )


def _check_template_versions(r: Reader, settings: Settings) -> None:
    """A template newer than the running CAPMOX may declare fields its CRDs do not have yet."""
    running = settings.cluster_api.providers.infrastructure
    for index, cluster in enumerate(settings.workload.clusters):
        if release(running) and release(cluster.template_version) > release(running):
            r.fail(
                f"{WORKLOAD_CLUSTERS_KEY}[{index}].templateVersion",
                f"{cluster.template_version} is newer than capmoxVersion {running}: its objects may use fields the "
                "running CAPMOX does not know; bump capmoxVersion first, in a run of its own",
            )


def load_settings() -> Settings:
    """Read the stack's config once. Secret values are read as plain text for validation only;
    every component wraps them in pulumi.Output.secret before they reach a resource."""
    config = pulumi.Config(PROJECT)
    settings = parse_settings({key: value for key in KEYS if (value := config.get(key)) is not None})
    for warning in settings.warnings:
        pulumi.log.warn(warning)
    return settings
