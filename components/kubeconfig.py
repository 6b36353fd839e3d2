"""Kubeconfig documents: k3s's admin file renamed for the lab, when its client certificate
expires, and token-based read-only ones."""

from __future__ import annotations

import base64
import binascii
from datetime import datetime
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import yaml
from cryptography import x509


class KubeconfigError(ValueError):
    """The text is not the kubeconfig this program expects."""


class CertificateError(KubeconfigError):
    """The user's client-certificate-data is not a PEM X.509 certificate this reader understands."""


PEM_CERTIFICATE = b"-----BEGIN CERTIFICATE-----"
# libyaml's safe loader and dumper where the installed PyYAML has them: the same documents and the
# same text, a tenth of the time. Every run reads and writes kubeconfigs several times before and
# while it registers its resources.
_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_DUMPER: Any = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


def _single(doc: dict[str, Any], section: str) -> dict[str, Any]:
    entries = doc.get(section)
    if not isinstance(entries, list) or len(entries) != 1 or not isinstance(entries[0], dict):
        raise KubeconfigError(f"expected exactly one entry under {section!r}")
    return entries[0]


def _load(text: str) -> dict[str, Any]:
    try:
        doc = yaml.load(text, Loader=_LOADER)  # noqa: S506 - a safe loader
    except yaml.YAMLError as error:
        raise KubeconfigError(f"not a kubeconfig (not YAML: {error})") from error
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
    return yaml.dump(doc, Dumper=_DUMPER, sort_keys=False)


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
    return yaml.dump(doc, Dumper=_DUMPER, sort_keys=False)


def client_certificate_expiry(text: str) -> datetime | None:
    """notAfter of the one user's client certificate, the first in its client-certificate-data
    (k3s puts its client CA after it); None for a user without one (a token)."""
    user = _single(_load(text), "users").get("user")
    data = user.get("client-certificate-data") if isinstance(user, dict) else None
    if data is None:
        return None
    try:
        pem = base64.b64decode(str(data), validate=True)
    except binascii.Error as error:
        raise CertificateError(f"client-certificate-data is not base64 of a PEM text: {error}") from error
    if PEM_CERTIFICATE not in pem:
        raise CertificateError("client-certificate-data holds no PEM CERTIFICATE block")
    try:
        certificate = x509.load_pem_x509_certificate(pem)
    except ValueError as error:
        raise CertificateError(f"the client certificate is not one X.509 can read: {error}") from error
    return certificate.not_valid_after_utc
