"""The guard that keeps the program off a workload cluster someone made by hand, or another stack.

A workload cluster that runs is not the program's to declare until it is taken over on purpose:
its objects exist, so the program's creates would fail with AlreadyExists on some (pulumi-kubernetes
4.29 and later create with a client-side POST, pkg/await/await.go) after others were sent, and any
field that differs from what clusterctl rendered (a machine template, the control plane's spec)
would roll every node once they were updated. So a run that declares a cluster stops before any of
its objects is sent when the Cluster object exists and does not carry this stack's mark
(STACK_MARK, which the program puts on every Cluster it declares: on the create, and on a taken-over
cluster when it becomes the program's), naming the cluster and the way forward. One that this stack
is taking over is its own already (components.cluster_takeover). The mark, not the field managers,
tells: a create leaves the manager `pulumi-kubernetes` that any Pulumi program's create leaves, and
the program's inputs for the Cluster rarely change, so its own manager may never appear.
"""

from __future__ import annotations

import base64
import json
import os
import ssl
import tempfile
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import pulumi
import yaml

from components.settings import PROJECT

REQUEST_TIMEOUT_SECONDS = 15
STACK_MARK = "lab-mgmt.homelab/stack"
"""The annotation on a Cluster that names the stack whose cluster it is: `<org>/<project>/<stack>`."""
CLUSTER_API_PATH = "/apis/cluster.x-k8s.io/v1beta2/namespaces/{namespace}/clusters/{name}"
ADMIN_KUBECONFIG_FILE = "~/.kube/lab-mgmt.kubeconfig"
"""Where the README writes the admin kubeconfig on the owner's laptop, unless kubeconfigPath names another file."""


class HandMadeClusterError(pulumi.RunError):
    """A declared workload cluster exists and was not made by this stack."""


class ManagementClusterUnreadableError(pulumi.RunError):
    """The management cluster did not say whether the cluster exists."""


def this_stack() -> str:
    """The value of STACK_MARK that names the running stack."""
    return f"{pulumi.get_organization()}/{pulumi.get_project()}/{pulumi.get_stack()}"


def marked(metadata: Mapping[str, Any], stack: str) -> dict[str, Any]:
    """`metadata` with STACK_MARK naming `stack`."""
    return {**metadata, "annotations": {**(metadata.get("annotations") or {}), STACK_MARK: stack}}


def refuse_hand_made(
    namespace: str, name: str, live: Mapping[str, Any] | None, *, stack: str, kubeconfig_file: str
) -> None:
    """Raises HandMadeClusterError when the Cluster `namespace/name` runs on the management
    cluster (`live`, as read there) without STACK_MARK naming `stack`; its remedy lines reach the
    management cluster through `kubeconfig_file`, the admin kubeconfig on the owner's laptop."""
    if live is None:
        return
    metadata = live.get("metadata", {})
    owner = (metadata.get("annotations") or {}).get(STACK_MARK)
    if owner == stack:
        return
    where = f"{PROJECT}:workloadClusters: the Cluster {namespace}/{name} exists on the management cluster"
    if owner:
        raise HandMadeClusterError(
            f"{where}, marked as the cluster of the stack {owner} ({STACK_MARK}), not of this one ({stack}), and "
            "this stack's last run did not declare it. Two stacks declaring one cluster would each roll it to their "
            "own settings: declare it in one stack only. If this stack's state holds the cluster all the same "
            f"(`pulumi stack --show-urns | grep {name}-cluster`), taking it out of workloadClusters would delete it "
            "unless it is protected: put this stack's mark on it instead, "
            f"kubectl --kubeconfig {kubeconfig_file} annotate --overwrite cluster -n {namespace} {name} "
            f"{STACK_MARK}={stack}"
        )
    managers = sorted({str(entry.get("manager", "")) for entry in metadata.get("managedFields") or []})
    raise HandMadeClusterError(
        f"{where}, made by {', '.join(managers) or 'an unknown writer'}, not by this stack ({stack}): it has "
        f"no {STACK_MARK} annotation. Declaring it would send the program's objects over it and can roll its "
        'nodes. Take it over as docs/adoption.md says ("A workload cluster made with clusterctl": takenOver '
        "and adopt in its entry), or leave it out of workloadClusters. A cluster this stack created before "
        f"lab-mgmt marked its clusters is marked by hand: kubectl --kubeconfig {kubeconfig_file} annotate cluster "
        f"-n {namespace} {name} {STACK_MARK}={stack}"
    )


def read_object(kubeconfig: str, path: str, *, cluster: str = "the management cluster") -> dict[str, Any] | None:
    """The object at `path` of the `cluster` that `kubeconfig` reaches, or None where the API
    server answers 404 (no such object, or no Cluster API types installed yet)."""
    server, context, headers = _client(kubeconfig)
    request = urllib.request.Request(server.rstrip("/") + path, headers=headers)  # noqa: S310 - the cluster's URL
    try:
        with (
            _tls(context) as ssl_context,
            urllib.request.urlopen(  # noqa: S310
                request, timeout=REQUEST_TIMEOUT_SECONDS, context=ssl_context
            ) as response,
        ):
            body: dict[str, Any] = json.load(response)
            return body
    except urllib.error.HTTPError as error:
        error.close()
        if error.code == 404:
            return None
        raise ManagementClusterUnreadableError(
            f"{cluster} answered HTTP {error.code} to GET {path}: cannot tell what runs there, so the run stops "
            "before it sends anything"
        ) from None
    except (OSError, ValueError) as error:
        raise ManagementClusterUnreadableError(
            f"cannot read {path} from {cluster} at {server}: {error}; the run stops rather than apply over "
            "what it could not see"
        ) from None


def _client(kubeconfig: str) -> tuple[str, dict[str, str], dict[str, str]]:
    """The server URL, the TLS material (base64 PEM, by kubeconfig key) and the request headers of
    a one-cluster kubeconfig whose user has a client certificate or a token."""
    doc = yaml.safe_load(kubeconfig)
    cluster = doc["clusters"][0]["cluster"]
    user = doc["users"][0]["user"]
    tls = {"certificate-authority-data": cluster["certificate-authority-data"]}
    if "token" in user:
        return cluster["server"], tls, {"Authorization": f"Bearer {user['token']}"}
    if "client-certificate-data" in user and "client-key-data" in user:
        tls |= {key: user[key] for key in ("client-certificate-data", "client-key-data")}
        return cluster["server"], tls, {}
    raise ManagementClusterUnreadableError(
        "the management cluster's kubeconfig has neither a token nor a client certificate and key"
    )


@contextmanager
def _tls(material: dict[str, str]) -> Iterator[ssl.SSLContext]:
    """Python's ssl reads a client certificate only from files: they live, mode 0600, for the one
    request."""
    context = ssl.create_default_context(cadata=base64.b64decode(material["certificate-authority-data"]).decode())
    if "client-certificate-data" not in material:
        yield context
        return
    with tempfile.TemporaryDirectory(prefix="lab-mgmt-") as directory:
        paths = {}
        for key in ("client-certificate-data", "client-key-data"):
            paths[key] = os.path.join(directory, key)
            with open(os.open(paths[key], os.O_WRONLY | os.O_CREAT, 0o600), "wb") as file:
                file.write(base64.b64decode(material[key]))
        context.load_cert_chain(paths["client-certificate-data"], paths["client-key-data"])
        yield context
