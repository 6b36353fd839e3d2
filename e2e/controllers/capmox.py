"""The real CAPMOX manager (cluster-api-provider-proxmox v0.9.0 for the v0.9.1 pin: docs/testing.md's
versions), built by `e2e/engine/build-engine.sh workload` from the archive into LAB_MGMT_CAPMOX_BIN,
running as cluster-api-operator deploys it for the program's InfrastructureProvider: its webhooks
(config/webhook/manifests.yaml of the archive, prefix `capmox-`) and its ProxmoxCluster and
ProxmoxMachine controllers, against the Proxmox VE stand-in at the program's proxmoxEndpoint.

Its credentials are what the operator puts in its Deployment: the provider CR's configSecret
substitutes PROXMOX_URL, PROXMOX_TOKEN and PROXMOX_SECRET into the release's
`capmox-manager-credentials` Secret (config/default/proxmox-credentials-secret.yaml), which the
manager's container reads as the same three variables (manager_credentials_patch.yaml). They are
read from the cluster when the manager starts, so a wrong or missing key in the program's Secret
shows as it would in the lab: a token the Proxmox API refuses, or a manager with no client.
"""

from __future__ import annotations

import base64
import json
from functools import partial

from e2e.controllers.manager import Manager
from e2e.engine import vendor
from e2e.engine.control_plane import ControlPlane

BIN_VARIABLE = "LAB_MGMT_CAPMOX_BIN"
NAMESPACE = "capmox-system"
# The variables the release's credentials Secret substitutes from the configSecret.
CREDENTIALS = ("PROXMOX_URL", "PROXMOX_TOKEN", "PROXMOX_SECRET")


def credentials(cluster: ControlPlane) -> dict[str, str]:
    """The manager's credentials environment from the InfrastructureProvider's configSecret: a
    variable the Secret lacks is empty, as the release's `${PROXMOX_URL=""}` substitutes it."""
    providers = json.loads(cluster.kubectl("get", "infrastructureproviders", "-n", NAMESPACE, "-o", "json").stdout)
    if len(providers["items"]) != 1:
        raise RuntimeError(f"{len(providers['items'])} InfrastructureProviders in {NAMESPACE}, not one")
    config = providers["items"][0]["spec"].get("configSecret") or {}
    if not config.get("name"):
        return dict.fromkeys(CREDENTIALS, "")
    found = cluster.kubectl(
        "get", "secret", config["name"], "-n", config.get("namespace") or NAMESPACE, "-o", "jsonpath={.data}"
    )
    if found.returncode != 0:
        raise RuntimeError(f"the InfrastructureProvider's configSecret: {found.stderr.strip()}")
    data = json.loads(found.stdout or "{}")
    return {key: base64.b64decode(data[key]).decode() if key in data else "" for key in CREDENTIALS}


PROXMOX = Manager(
    "capmox-manager",
    BIN_VARIABLE,
    partial(vendor.member, vendor.CAPMOX_ARCHIVE, "config/webhook/manifests.yaml"),
    "capmox-",
    9443,
    9449,
    8447,
    "--health-probe-bind-address",
    webhook_flags=False,
    environment=credentials,
)
