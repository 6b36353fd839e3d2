"""The versions the shipped stack file pins (Pulumi.lab.yaml), read once for the test machinery:
the charts it rebuilds, the provider releases it serves and the images the pod runner runs follow
them, so that a bump of a pin moves all three together or fails loudly where the box cannot follow.
"""

from __future__ import annotations

import yaml

from e2e.engine.cli import REPO

_PINS = yaml.safe_load((REPO / "Pulumi.lab.yaml").read_text())["config"]


def pinned(key: str) -> str:
    """The stack file's value of the program's setting `key` (a version pin)."""
    return str(_PINS[f"lab-mgmt:{key}"])


CERT_MANAGER_VERSION = pinned("certManagerVersion")
OPERATOR_VERSION = pinned("capiOperatorVersion")
IPAM_VERSION = pinned("ipamInClusterVersion")
CAPMOX_VERSION = pinned("capmoxVersion")
# What the releases render for: the management cluster's Kubernetes, as the program's Helm reads it
# from the API server (`helm template` would otherwise take its build's default, here v1.20.0,
# which cert-manager's chart refuses).
KUBE_VERSION = pinned("k3sVersion").split("+", 1)[0]
# The operator Makefile's PROD_REGISTRY and IMAGE_NAME, at RELEASE_TAG (`v<version>`).
OPERATOR_IMAGE = ("registry.k8s.io/capi-operator/cluster-api-operator", f"v{OPERATOR_VERSION}")
