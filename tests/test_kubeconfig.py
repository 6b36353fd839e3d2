"""The kubeconfig documents: k3s's admin file renamed for the lab, its client certificate's expiry,
and token kubeconfigs."""

from __future__ import annotations

import base64
import copy
from datetime import UTC, datetime
from typing import Any

import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import Encoding
from cryptography.x509.oid import NameOID
from harness import CA_DATA, CLIENT_CA, K3S_KUBECONFIG, client_certificate, k3s_kubeconfig, not_after

from components import kubeconfig
from components.kubeconfig import (
    CertificateError,
    KubeconfigError,
    client_certificate_expiry,
    cluster_endpoint,
    rename_k3s_kubeconfig,
    token_kubeconfig,
)


def test_rename_changes_the_server_and_the_names_and_nothing_else() -> None:
    original: dict[str, Any] = yaml.safe_load(K3S_KUBECONFIG)
    renamed = yaml.safe_load(rename_k3s_kubeconfig(K3S_KUBECONFIG, "192.168.4.21", "lab-mgmt"))

    expected = copy.deepcopy(original)
    expected["clusters"][0]["cluster"]["server"] = "https://192.168.4.21:6443"
    expected["clusters"][0]["name"] = "lab-mgmt"
    expected["contexts"][0] = {"name": "lab-mgmt", "context": {"cluster": "lab-mgmt", "user": "lab-mgmt"}}
    expected["users"][0]["name"] = "lab-mgmt"
    expected["current-context"] = "lab-mgmt"
    assert renamed == expected


def test_rename_keeps_the_certificates_byte_for_byte() -> None:
    renamed = rename_k3s_kubeconfig(K3S_KUBECONFIG, "192.168.4.21", "lab-mgmt")
    original = yaml.safe_load(K3S_KUBECONFIG)
    doc = yaml.safe_load(renamed)
    assert doc["users"][0]["user"] == original["users"][0]["user"]
    assert (
        doc["clusters"][0]["cluster"]["certificate-authority-data"]
        == (original["clusters"][0]["cluster"]["certificate-authority-data"])
    )


def test_rename_is_deterministic() -> None:
    first = rename_k3s_kubeconfig(K3S_KUBECONFIG, "192.168.4.21", "lab-mgmt")
    assert rename_k3s_kubeconfig(K3S_KUBECONFIG, "192.168.4.21", "lab-mgmt") == first


@pytest.mark.parametrize(
    "text",
    [
        "not: a kubeconfig\n",
        K3S_KUBECONFIG.replace("clusters:\n", "clusters:\n- cluster: {server: https://x:6443}\n  name: other\n"),
        "kind: Config\nclusters: []\ncontexts: []\nusers: []\n",
    ],
)
def test_rename_refuses_what_k3s_does_not_write(text: str) -> None:
    with pytest.raises(KubeconfigError):
        rename_k3s_kubeconfig(text, "192.168.4.21", "lab-mgmt")


@pytest.mark.skipif(not hasattr(yaml, "CSafeDumper"), reason="PyYAML without libyaml")
def test_the_documents_are_the_same_text_with_libyaml_or_without(monkeypatch: pytest.MonkeyPatch) -> None:
    """A laptop whose PyYAML lacks libyaml must get the same kubeconfig outputs, or its next run
    would change them."""
    token_args = ("https://192.168.4.21:6443", CA_DATA, "eyJhbGciOiJSUzI1NiJ9.e30.c2ln", "lab-mgmt-ro")
    token, renamed = token_kubeconfig(*token_args), rename_k3s_kubeconfig(K3S_KUBECONFIG, "192.168.4.21", "lab-mgmt")
    monkeypatch.setattr(kubeconfig, "_LOADER", yaml.SafeLoader)
    monkeypatch.setattr(kubeconfig, "_DUMPER", yaml.SafeDumper)
    assert token_kubeconfig(*token_args) == token
    assert rename_k3s_kubeconfig(K3S_KUBECONFIG, "192.168.4.21", "lab-mgmt") == renamed


def test_token_kubeconfig() -> None:
    admin = rename_k3s_kubeconfig(K3S_KUBECONFIG, "192.168.4.21", "lab-mgmt")
    server, ca_data = cluster_endpoint(admin)
    doc = yaml.safe_load(token_kubeconfig(server, ca_data, "tok.en", "lab-mgmt-ro"))
    assert doc == {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "lab-mgmt-ro",
                "cluster": {"server": "https://192.168.4.21:6443", "certificate-authority-data": ca_data},
            }
        ],
        "contexts": [{"name": "lab-mgmt-ro", "context": {"cluster": "lab-mgmt-ro", "user": "lab-mgmt-ro"}}],
        "current-context": "lab-mgmt-ro",
        "users": [{"name": "lab-mgmt-ro", "user": {"token": "tok.en"}}],
        "preferences": {},
    }


# --- the admin client certificate's expiry ------------------------------------------------------


def _client_data(text: str) -> str:
    return str(yaml.safe_load(text)["users"][0]["user"]["client-certificate-data"])


@pytest.mark.parametrize("days", [30, 365, 10000], ids=["UTCTime, near", "UTCTime, a year", "GeneralizedTime, 2050+"])
def test_the_client_certificates_expiry_is_its_notafter(days: int) -> None:
    """A notAfter after 2049 is a GeneralizedTime (RFC 5280); the first certificate is the
    admin's, not the CA that k3s puts after it."""
    certificate = client_certificate(days)
    expiry = client_certificate_expiry(k3s_kubeconfig(certificate))
    assert expiry == not_after(certificate)
    assert expiry is not None
    assert (expiry.year >= 2050) is (days == 10000)
    assert not_after(CLIENT_CA) != expiry


def test_the_renamed_kubeconfig_keeps_its_expiry() -> None:
    certificate = client_certificate(30)
    renamed = rename_k3s_kubeconfig(k3s_kubeconfig(certificate), "192.168.4.21", "lab-mgmt")
    assert client_certificate_expiry(renamed) == not_after(certificate)


def test_a_token_kubeconfig_has_no_certificate_expiry() -> None:
    assert client_certificate_expiry(token_kubeconfig("https://192.168.4.21:6443", CA_DATA, "tok.en", "ro")) is None


def _certificate_until(moment: datetime) -> str:
    """A self-signed certificate (PEM) valid until `moment`."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "system:admin")])
    builder = x509.CertificateBuilder(name, name, key.public_key(), 1, datetime(1990, 1, 1, tzinfo=UTC), moment)
    return builder.sign(key, hashes.SHA256()).public_bytes(Encoding.PEM).decode()


@pytest.mark.parametrize("year", [1999, 2049])
def test_a_two_digit_year_from_50_is_in_the_1900s(year: int) -> None:
    """RFC 5280 UTCTime: YY from 50 is 19YY, below 50 is 20YY."""
    moment = datetime(year, 12, 31, 23, 59, 59, tzinfo=UTC)
    certificate = _certificate_until(moment)
    der = x509.load_pem_x509_certificate(certificate.encode()).public_bytes(Encoding.DER)
    assert b"\x17\x0d" + moment.strftime("%y%m%d%H%M%SZ").encode() in der
    assert client_certificate_expiry(k3s_kubeconfig(certificate)) == moment


def _with_client_data(data: str) -> str:
    return K3S_KUBECONFIG.replace(_client_data(K3S_KUBECONFIG), data)


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _pem(der: bytes) -> bytes:
    return b"-----BEGIN CERTIFICATE-----\n" + base64.encodebytes(der) + b"-----END CERTIFICATE-----\n"


# A real client certificate, as DER, and its notAfter as the UTCTime element that holds it.
NEAR = x509.load_pem_x509_certificate(client_certificate(30).encode())
NEAR_DER = NEAR.public_bytes(Encoding.DER)
NEAR_NOT_AFTER = b"\x17\x0d" + NEAR.not_valid_after_utc.strftime("%y%m%d%H%M%SZ").encode()
UNREADABLE = "the client certificate is not one X.509 can read: error parsing asn1 value"


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (_b64(b"client-cert"), "holds no PEM CERTIFICATE block"),
        ("not base64!", "is not base64 of a PEM text"),
        (_b64(b"-----BEGIN CERTIFICATE-----\n%%%\n-----END CERTIFICATE-----\n"), "not one X.509 can read: Unable"),
        (_b64(_pem(NEAR_DER[:-5])), UNREADABLE),
        (_b64(_pem(NEAR_DER.replace(NEAR_NOT_AFTER, NEAR_NOT_AFTER[:4] + b"13" + NEAR_NOT_AFTER[6:]))), UNREADABLE),
        (_b64(_pem(NEAR_DER.replace(NEAR_NOT_AFTER, b"\x04" + NEAR_NOT_AFTER[1:]))), UNREADABLE),
        (_b64(_pem(b"\x31\x00")), UNREADABLE),
    ],
    ids=["not PEM", "not base64", "bad PEM body", "truncated", "no such month", "not a time", "not X.509"],
)
def test_a_client_certificate_that_is_not_one_is_refused_with_what_is_wrong(data: str, message: str) -> None:
    with pytest.raises(CertificateError, match=message):
        client_certificate_expiry(_with_client_data(data))
