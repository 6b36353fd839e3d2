"""The real IPAM in-cluster provider's manager (cluster-api-ipam-provider-in-cluster v1.1.0 for the
v1.1.1 pin, which no source here serves: docs/testing.md's versions), built by
`e2e/engine/build-engine.sh workload` from the Go module proxy into LAB_MGMT_IPAM_BIN, with its
module's config/ beside that bin/ (e2e/engine/vendor.py `ipam_config`): the CRDs the operator stand-in installs for the
program's IPAMProvider (e2e/standins/cluster/provider_crds.py) and its webhook configurations.

It runs whole, as e2e/controllers/manager.py starts a provider's manager: its webhooks validate
and default the InClusterIPPool CAPMOX makes from the program's ProxmoxCluster (its addresses,
prefix and gateway), and its IPAddressClaim controller gives each claim an IPAddress from that
pool, the lowest free one, and releases it when the claim goes (after the pool's
addressReuseGracePeriodSeconds, which CAPMOX sets to 60).
"""

from __future__ import annotations

from e2e.controllers.manager import Manager
from e2e.engine import vendor


def _webhook_manifests() -> str:
    return (vendor.ipam_config() / "webhook" / "manifests.yaml").read_text()


IN_CLUSTER = Manager(
    vendor.IPAM_BINARY,
    vendor.IPAM_BIN_VARIABLE,
    _webhook_manifests,
    "capi-ipam-in-cluster-",
    9448,
    9439,
    8446,
    "--health-probe-bind-address",
)
