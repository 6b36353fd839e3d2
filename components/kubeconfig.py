"""Kubeconfig documents: k3s's admin file renamed for the lab, and token-based read-only ones."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit, urlunsplit

import yaml


class KubeconfigError(ValueError):
    """The text is not the kubeconfig this program expects."""


def _single(doc: dict[str, Any], section: str) -> dict[str, Any]:
    entries = doc.get(section)
    if not isinstance(entries, list) or len(entries) != 1 or not isinstance(entries[0], dict):
        raise KubeconfigError(f"expected exactly one entry under {section!r}")
    return entries[0]


def _load(text: str) -> dict[str, Any]:
    doc = yaml.safe_load(text)
    if not isinstance(doc, dict) or doc.get("kind") != "Config":
        raise KubeconfigError("not a kubeconfig (kind: Config)")
    return doc


def rename_k3s_kubeconfig(text: str, server_host: str, name: str) -> str:
    """k3s writes one cluster, context and user, all called `default`, for https://127.0.0.1:6443.
    Point the server at the VM and call all three `name`; leave everything else untouched."""
    doc = _load(text)
    cluster, context, user = _single(doc, "clusters"), _single(doc, "contexts"), _single(doc, "users")
    server = urlsplit(cluster["cluster"]["server"])
    netloc = f"{server_host}:{server.port}" if server.port else server_host
    cluster["cluster"]["server"] = urlunsplit(server._replace(netloc=netloc))
    cluster["name"] = context["name"] = user["name"] = name
    context["context"]["cluster"] = context["context"]["user"] = name
    doc["current-context"] = name
    return yaml.safe_dump(doc, sort_keys=False)


def cluster_endpoint(text: str) -> tuple[str, str]:
    """The server URL and base64 CA bundle of a one-cluster kubeconfig."""
    cluster = _single(_load(text), "clusters")["cluster"]
    return cluster["server"], cluster["certificate-authority-data"]


def token_kubeconfig(server: str, ca_data: str, token: str, name: str) -> str:
    """A kubeconfig whose user authenticates with a service account token; cluster, context and
    user are all called `name`."""
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": name, "cluster": {"server": server, "certificate-authority-data": ca_data}}],
        "contexts": [{"name": name, "context": {"cluster": name, "user": name}}],
        "current-context": name,
        "users": [{"name": name, "user": {"token": token}}],
        "preferences": {},
    }
    return yaml.safe_dump(doc, sort_keys=False)
