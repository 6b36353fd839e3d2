"""The guard that refuses to declare a workload cluster someone made by hand: it reads the Cluster
from a real HTTPS server on 127.0.0.1 that answers as kube-apiserver does."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest
import yaml

from components.hand_made_clusters import (
    STACK_MARK,
    HandMadeClusterError,
    ManagementClusterUnreadableError,
    read_object,
    refuse_hand_made,
)
from e2e.standins.https_server import self_signed_certificate, serving

TOKEN = "admin-token"
STACK = "organization/lab-mgmt/lab"
CLUSTER_PATH = "/apis/cluster.x-k8s.io/v1beta2/namespaces/default/clusters/lab1"


class ApiServer:
    """What GET of the one path answers: (status, body); every request is recorded."""

    def __init__(self) -> None:
        self.answer: tuple[int, dict[str, Any]] = (404, {"kind": "Status", "code": 404})
        self.requests: list[tuple[str, str | None]] = []


@pytest.fixture
def api(tmp_path: Path) -> Iterator[tuple[ApiServer, str]]:
    state = ApiServer()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            state.requests.append((self.path, self.headers.get("Authorization")))
            status, body = state.answer if self.path == CLUSTER_PATH else (500, {"unexpected": self.path})
            if self.headers.get("Authorization") != f"Bearer {TOKEN}":
                status, body = 401, {"kind": "Status", "code": 401}
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: object) -> None:
            """Quiet."""

    key, cert = self_signed_certificate(tmp_path, "apiserver", "127.0.0.1")
    with serving(Handler, ("127.0.0.1", 0), key, cert) as server:
        kubeconfig = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "mgmt",
                    "cluster": {
                        "server": f"https://127.0.0.1:{server.server_address[1]}",
                        "certificate-authority-data": base64.b64encode(cert.read_bytes()).decode(),
                    },
                }
            ],
            "users": [{"name": "mgmt", "user": {"token": TOKEN}}],
            "contexts": [{"name": "mgmt", "context": {"cluster": "mgmt", "user": "mgmt"}}],
        }
        yield state, yaml.safe_dump(kubeconfig)


# What pulumi-kubernetes 4.29 and later leave on a Cluster they created (a client-side POST under a
# static manager, pkg/await/await.go) once Cluster API's manager has reconciled it.
CREATED_BY_PULUMI = (("pulumi-kubernetes", "Update"), ("manager", "Update"))


def _cluster(*managers: tuple[str, str], mark: str | None = None) -> dict[str, Any]:
    metadata: dict[str, Any] = {
        "name": "lab1",
        "managedFields": [{"manager": manager, "operation": operation} for manager, operation in managers],
    }
    if mark is not None:
        metadata["annotations"] = {STACK_MARK: mark, "other": "kept"}
    return {"metadata": metadata}


def _guard(kubeconfig: str) -> None:
    """The guard on lab1 as the program reads it (cluster_takeover.Live)."""
    live = read_object(kubeconfig, CLUSTER_PATH)
    refuse_hand_made("default", "lab1", live, stack=STACK, kubeconfig_file="~/.kube/lab-mgmt.kubeconfig")


def test_a_cluster_that_does_not_exist_yet_passes(api: tuple[ApiServer, str]) -> None:
    state, kubeconfig = api
    _guard(kubeconfig)
    assert state.requests == [(CLUSTER_PATH, f"Bearer {TOKEN}")]


def test_a_cluster_made_with_kubectl_is_refused_naming_it_its_writers_and_the_way_forward(
    api: tuple[ApiServer, str],
) -> None:
    state, kubeconfig = api
    state.answer = (200, _cluster(("kubectl-client-side-apply", "Update"), ("manager", "Update")))
    with pytest.raises(HandMadeClusterError) as refused:
        _guard(kubeconfig)
    message = str(refused.value)
    assert "lab-mgmt:workloadClusters: the Cluster default/lab1 exists" in message
    assert "kubectl-client-side-apply, manager" in message
    assert "docs/adoption.md" in message
    assert (
        f"kubectl --kubeconfig ~/.kube/lab-mgmt.kubeconfig annotate cluster -n default lab1 {STACK_MARK}={STACK}"
        in (message.replace("\n", " "))
    )


def test_a_cluster_this_stack_created_passes_on_its_mark(api: tuple[ApiServer, str]) -> None:
    state, kubeconfig = api
    state.answer = (200, _cluster(*CREATED_BY_PULUMI, mark=STACK))
    _guard(kubeconfig)


@pytest.mark.parametrize(
    "managers",
    [CREATED_BY_PULUMI, (("pulumi-kubernetes-8a2b4c1d", "Apply"), ("manager", "Update"))],
    ids=["created", "applied"],
)
def test_a_cluster_a_pulumi_program_wrote_without_the_mark_is_refused(
    api: tuple[ApiServer, str], managers: tuple[tuple[str, str], ...]
) -> None:
    """Any Pulumi program leaves these managers: they do not say which stack the cluster is."""
    state, kubeconfig = api
    state.answer = (200, _cluster(*managers))
    with pytest.raises(HandMadeClusterError, match=f"no {STACK_MARK} annotation"):
        _guard(kubeconfig)


def test_a_cluster_another_stack_marked_is_refused_naming_both(api: tuple[ApiServer, str]) -> None:
    state, kubeconfig = api
    state.answer = (200, _cluster(*CREATED_BY_PULUMI, mark="organization/lab-mgmt/other"))
    with pytest.raises(HandMadeClusterError) as refused:
        _guard(kubeconfig)
    assert f"stack organization/lab-mgmt/other ({STACK_MARK}), not of this one ({STACK})" in str(refused.value)


def test_an_answer_that_is_neither_the_object_nor_404_stops_the_run(api: tuple[ApiServer, str]) -> None:
    state, kubeconfig = api
    state.answer = (403, {"kind": "Status", "code": 403})
    with pytest.raises(ManagementClusterUnreadableError, match="HTTP 403"):
        _guard(kubeconfig)


def test_a_management_cluster_out_of_reach_stops_the_run_naming_it() -> None:
    kubeconfig = yaml.safe_dump(
        {
            "clusters": [{"cluster": {"server": "https://127.0.0.1:9", "certificate-authority-data": ""}}],
            "users": [{"user": {"token": TOKEN}}],
        }
    )
    with pytest.raises(ManagementClusterUnreadableError, match=r"https://127\.0\.0\.1:9"):
        _guard(kubeconfig)
