"""The guard that keeps the program off a workload cluster someone made by hand.

pulumi-kubernetes creates an object with a forced server-side apply (provider/pkg/await/await.go:
"we currently always upsert the object"), so declaring a cluster whose objects exist already takes
them over silently, and any field that differs from what clusterctl rendered (a machine template,
the control plane's spec) rolls every node. Until such a cluster is taken over on purpose, a run
that declares it stops before any of its objects is sent: the Cluster object is read first, and
one that no Pulumi program ever applied (no `pulumi-kubernetes-*` field manager) is refused,
naming the cluster and the way forward; one that this stack took over is its own
(components.cluster_takeover).
"""

from __future__ import annotations

import base64
import json
import os
import ssl
import tempfile
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pulumi
import yaml

from components.settings import PROJECT

REQUEST_TIMEOUT_SECONDS = 15
PULUMI_FIELD_MANAGER = "pulumi-kubernetes-"
"""How pulumi-kubernetes names its server-side apply field managers (provider.go fieldManagerName)."""
CLUSTER_API_PATH = "/apis/cluster.x-k8s.io/v1beta2/namespaces/{namespace}/clusters/{name}"


class HandMadeClusterError(pulumi.RunError):
    """A declared workload cluster exists and was not made by this program."""


class ManagementClusterUnreadableError(pulumi.RunError):
    """The management cluster did not say whether the cluster exists."""


def refuse_hand_made(namespace: str, name: str, kubeconfig: str) -> None:
    """Raises HandMadeClusterError when the Cluster `namespace/name` exists on the management
    cluster that `kubeconfig` (its admin kubeconfig) reaches, and no Pulumi program applied it."""
    live = read_object(kubeconfig, CLUSTER_API_PATH.format(namespace=namespace, name=name))
    if live is None:
        return
    managers = [str(entry.get("manager", "")) for entry in live.get("metadata", {}).get("managedFields") or []]
    if any(manager.startswith(PULUMI_FIELD_MANAGER) for manager in managers):
        return
    raise HandMadeClusterError(
        f"{PROJECT}:workloadClusters: the Cluster {namespace}/{name} exists on the management cluster, "
        f"made by {', '.join(sorted(set(managers))) or 'an unknown writer'}, not by this program. Declaring it "
        "would apply the program's objects over it (server-side apply takes every field) and can roll its "
        'nodes. Take it over as docs/adoption.md says ("A workload cluster made with clusterctl": '
        "takenOver and adopt in its entry), or leave it out of workloadClusters"
    )


def read_object(kubeconfig: str, path: str) -> dict[str, Any] | None:
    """The object at `path`, or None where the API server answers 404 (no such object, or no
    Cluster API types installed yet)."""
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
            f"the management cluster answered HTTP {error.code} to GET {path}: cannot tell whether the "
            "workload cluster exists already"
        ) from None
    except (OSError, ValueError) as error:
        raise ManagementClusterUnreadableError(
            f"cannot read {path} from the management cluster at {server}: {error}; the run stops rather "
            "than apply a workload cluster over one it could not see"
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
