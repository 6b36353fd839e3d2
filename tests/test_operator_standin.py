"""The operator stand-in (e2e/standins/cluster/operator_standin.py) withholds Ready only from a CR it could reconcile,
and releases only what it withholds: a fault scenario that names a wrong CR fails at once rather
than passing because nothing was ever withheld."""

from __future__ import annotations

import subprocess

import pytest

from e2e.standins.cluster import operator_standin, playbook_lab
from e2e.standins.cluster.operator_standin import OperatorStandIn

INFRASTRUCTURE = ("InfrastructureProvider", "capmox-system", "proxmox")


def _standin() -> OperatorStandIn:
    return OperatorStandIn(0.0, tuple(playbook_lab.PROVIDER_RESOURCES))


def test_a_withheld_cr_is_released_once() -> None:
    standin = _standin()
    standin.withhold(*INFRASTRUCTURE)
    assert standin.withheld == {"InfrastructureProvider/capmox-system/proxmox"}
    standin.release(*INFRASTRUCTURE)
    assert standin.withheld == set()
    with pytest.raises(KeyError, match="InfrastructureProvider/capmox-system/proxmox is not withheld"):
        standin.release(*INFRASTRUCTURE)


def test_a_kind_it_does_not_reconcile_is_refused() -> None:
    with pytest.raises(ValueError, match="not Machine"):
        _standin().withhold("Machine", "default", "lab1-md-0")


class _Cluster:
    """kubectl's answers, in turn, to the stand-in's `kubectl wait`s."""

    def __init__(self, *stderrs: str) -> None:
        self.answers = list(stderrs)
        self.waits = 0

    def kubectl_as(self, kubeconfig: object, *args: str) -> subprocess.CompletedProcess[str]:
        self.waits += 1
        stderr = self.answers.pop(0)
        return subprocess.CompletedProcess(["kubectl", *args], 1 if stderr else 0, "", stderr)


def test_the_crds_wait_again_while_kubectl_reads_their_conditions_as_null_and_not_on_another_error() -> None:
    null = f"error: {operator_standin.NULL_CONDITIONS}, expected []interface{{}}"
    racing = _Cluster(null, null, "")
    assert operator_standin._established(racing, None, ["crd/a"]).returncode == 0  # type: ignore[arg-type]
    assert racing.waits == 3
    refused = _Cluster("error: timed out waiting for the condition on crd/a")
    assert operator_standin._established(refused, None, ["crd/a"]).returncode == 1  # type: ignore[arg-type]
    assert refused.waits == 1
