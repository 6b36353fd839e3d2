"""Kubeconfig documents: k3s's admin file renamed for the lab, when its client certificate
expires, and token-based read-only ones."""

from __future__ import annotations

import base64
import binascii
import re
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import yaml


class KubeconfigError(ValueError):
    """The text is not the kubeconfig this program expects."""


class CertificateError(KubeconfigError):
    """The user's client-certificate-data is not a PEM X.509 certificate this reader understands."""


_PEM = re.compile(r"-----BEGIN CERTIFICATE-----(.*?)-----END CERTIFICATE-----", re.DOTALL)
# The DER tags on the way to notAfter (RFC 5280, 4.1): SEQUENCE, INTEGER, the explicit [0] that
# holds the version (absent in a v1 certificate), UTCTime and GeneralizedTime.
_SEQUENCE, _INTEGER, _VERSION, _UTC_TIME, _GENERALIZED_TIME = 0x30, 0x02, 0xA0, 0x17, 0x18
# RFC 5280, 4.1.2.5: both in UTC (Z), with seconds; UTCTime has a two-digit year.
_TIME_FORMS = {_UTC_TIME: re.compile(r"(\d{2})(\d{10})Z"), _GENERALIZED_TIME: re.compile(r"(\d{4})(\d{10})Z")}


def _single(doc: dict[str, Any], section: str) -> dict[str, Any]:
    entries = doc.get(section)
    if not isinstance(entries, list) or len(entries) != 1 or not isinstance(entries[0], dict):
        raise KubeconfigError(f"expected exactly one entry under {section!r}")
    return entries[0]


def _load(text: str) -> dict[str, Any]:
    try:
        doc = yaml.safe_load(text)
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


def client_certificate_expiry(text: str) -> datetime | None:
    """notAfter of the one user's client certificate, the first in its client-certificate-data
    (k3s puts its client CA after it); None for a user without one (a token). Read here with no
    X.509 library: the program needs this date and nothing else of the certificate."""
    user = _single(_load(text), "users").get("user")
    data = user.get("client-certificate-data") if isinstance(user, dict) else None
    if data is None:
        return None
    try:
        pem = base64.b64decode(str(data), validate=True).decode("ascii")
    except (binascii.Error, UnicodeDecodeError) as error:
        raise CertificateError(f"client-certificate-data is not base64 of a PEM text: {error}") from error
    match = _PEM.search(pem)
    if match is None:
        raise CertificateError("client-certificate-data holds no PEM CERTIFICATE block")
    try:
        der = base64.b64decode("".join(match.group(1).split()), validate=True)
    except binascii.Error as error:
        raise CertificateError(f"the client certificate's PEM body is not base64: {error}") from error
    return certificate_not_after(der)


def certificate_not_after(der: bytes) -> datetime:
    """notAfter of a DER X.509 certificate: Certificate > tbsCertificate > [version] serialNumber,
    signature, issuer, validity > notBefore, notAfter."""
    certificate, _ = _expect(der, 0, _SEQUENCE)
    tbs, _ = _expect(certificate, 0, _SEQUENCE)
    offset = _expect(tbs, 0, _VERSION)[1] if tbs[:1] == bytes([_VERSION]) else 0
    for tag in (_INTEGER, _SEQUENCE, _SEQUENCE):  # serialNumber, signature, issuer
        offset = _expect(tbs, offset, tag)[1]
    validity, _ = _expect(tbs, offset, _SEQUENCE)
    _, _, after_not_before = _tlv(validity, 0)
    tag, value, _ = _tlv(validity, after_not_before)
    return _time(tag, value)


def _tlv(data: bytes, offset: int) -> tuple[int, bytes, int]:
    """The DER element at `offset`: its tag, its contents and the offset after it."""
    if offset + 2 > len(data):
        raise CertificateError("the client certificate's DER ends early")
    tag, length, offset = data[offset], data[offset + 1], offset + 2
    if length & 0x80:
        count = length & 0x7F
        if not 0 < count <= 4 or offset + count > len(data):
            raise CertificateError("the client certificate's DER has a bad length")
        length, offset = int.from_bytes(data[offset : offset + count], "big"), offset + count
    if offset + length > len(data):
        raise CertificateError("the client certificate's DER ends early")
    return tag, data[offset : offset + length], offset + length


def _expect(data: bytes, offset: int, tag: int) -> tuple[bytes, int]:
    found, contents, end = _tlv(data, offset)
    if found != tag:
        raise CertificateError(f"the client certificate's DER has tag 0x{found:02x} where X.509 has 0x{tag:02x}")
    return contents, end


def _time(tag: int, value: bytes) -> datetime:
    """A validity time as RFC 5280 writes it: UTCTime YYMMDDHHMMSSZ (YY below 50 is 20YY) until
    2049, GeneralizedTime YYYYMMDDHHMMSSZ from 2050."""
    form = _TIME_FORMS.get(tag)
    match = form.fullmatch(value.decode("ascii", "replace")) if form else None
    if match is None:
        raise CertificateError(f"the client certificate's notAfter is not an RFC 5280 time: {value!r}")
    year = int(match.group(1))
    if tag == _UTC_TIME:
        year += 1900 if year >= 50 else 2000
    try:
        return datetime.strptime(f"{year:04d}{match.group(2)}", "%Y%m%d%H%M%S").replace(tzinfo=UTC)
    except ValueError as error:
        raise CertificateError(f"the client certificate's notAfter is not a date: {value!r}") from error
