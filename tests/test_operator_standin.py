"""The operator stand-in (e2e/standins/cluster/operator_standin.py) withholds Ready only from a CR it could reconcile,
and releases only what it withholds: a fault scenario that names a wrong CR fails at once rather
than passing because nothing was ever withheld."""

from __future__ import annotations

import pytest

from e2e.standins.cluster import playbook_lab
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
