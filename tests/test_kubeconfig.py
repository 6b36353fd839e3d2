"""The kubeconfig documents: k3s's admin file renamed for the lab, and token kubeconfigs."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import yaml
from harness import K3S_KUBECONFIG

from components.kubeconfig import KubeconfigError, cluster_endpoint, rename_k3s_kubeconfig, token_kubeconfig


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
