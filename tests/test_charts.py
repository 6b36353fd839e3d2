"""The charts as archives in the project's folder (components/charts.py): fetched from their
repositories only when missing, checked against the digest the repository lists, and a run with
both archives in place asks no repository at all."""

from __future__ import annotations

import hashlib
from pathlib import Path

import harness
import pytest
import yaml

from components import charts
from components.charts import ChartRepositoryError, ChartSource, local_chart

CERT_MANAGER = ("kubernetes:helm.sh/v3:Release", "mgmt-cert-manager")
OPERATOR = ("kubernetes:helm.sh/v3:Release", "mgmt-cluster-api-operator")
JETSTACK = "https://charts.jetstack.io"
OPERATOR_REPO = "https://kubernetes-sigs.github.io/cluster-api-operator"
FIRST_RUN_REQUESTS = [
    f"{JETSTACK}/index.yaml",
    f"{JETSTACK}/charts/cert-manager-v1.21.2.tgz",
    f"{OPERATOR_REPO}/index.yaml",
    f"{OPERATOR_REPO}/charts/cluster-api-operator-0.28.0.tgz",
]
ARCHIVES = ["cert-manager-v1.21.2.tgz", "cluster-api-operator-0.28.0.tgz"]

# The charts alone: CAPMOX's cluster template, fetched the same way for a workload cluster, is
# tested in test_cluster_template.py.
NO_WORKLOAD: dict[str, object] = {"workloadClusters": []}


@pytest.fixture
def fetched(tmp_path: Path) -> harness.Run:
    """A first run in an empty project folder (`tmp_path`): it fetches both charts."""
    return harness.run_program(NO_WORKLOAD, chart_directory=tmp_path)


def test_a_first_run_fetches_each_chart_once_and_keeps_it_with_its_digest(fetched: harness.Run, tmp_path: Path) -> None:
    assert fetched.chart_requests == FIRST_RUN_REQUESTS
    for name in ARCHIVES:
        data = (tmp_path / name).read_bytes()
        assert (tmp_path / f"{name}.sha256").read_text() == hashlib.sha256(data).hexdigest() + "\n"
    assert sorted(path.name for path in tmp_path.iterdir()) == sorted([*ARCHIVES, *(f"{n}.sha256" for n in ARCHIVES)])
    assert fetched.get(*CERT_MANAGER).plain["chart"] == "cert-manager-v1.21.2.tgz"


def test_with_both_archives_in_place_a_run_asks_no_repository_and_needs_none(
    fetched: harness.Run, tmp_path: Path
) -> None:
    again = harness.run_program(NO_WORKLOAD, chart_directory=tmp_path, charts_served={})
    assert again.chart_requests == []
    assert harness.changed(fetched, again) == set()


def test_a_chart_bump_fetches_the_new_chart_alone(fetched: harness.Run, tmp_path: Path) -> None:
    bumped = harness.run_program({**NO_WORKLOAD, "certManagerVersion": "v1.21.3"}, chart_directory=tmp_path)
    assert bumped.chart_requests == [f"{JETSTACK}/index.yaml", f"{JETSTACK}/charts/cert-manager-v1.21.3.tgz"]
    assert bumped.get(*CERT_MANAGER).plain["chart"] == "cert-manager-v1.21.3.tgz"
    # The old archive stays: going back needs no repository either.
    assert (tmp_path / "cert-manager-v1.21.2.tgz").is_file()


def test_an_archive_put_in_place_by_hand_is_taken_as_it_is(tmp_path: Path) -> None:
    for name in ARCHIVES:
        (tmp_path / name).write_bytes(b"pulled by hand")
    run = harness.run_program(NO_WORKLOAD, chart_directory=tmp_path, charts_served={})
    assert run.chart_requests == []
    assert run.get(*OPERATOR).plain["chart"] == "cluster-api-operator-0.28.0.tgz"


def test_an_archive_that_changed_since_it_was_fetched_is_fetched_again(fetched: harness.Run, tmp_path: Path) -> None:
    archive = tmp_path / "cert-manager-v1.21.2.tgz"
    good = archive.read_bytes()
    archive.write_bytes(good[:3])
    again = harness.run_program(NO_WORKLOAD, chart_directory=tmp_path)
    assert again.chart_requests == FIRST_RUN_REQUESTS[:2]
    assert archive.read_bytes() == good


def test_a_missing_chart_whose_repository_is_out_of_reach_stops_the_run_before_anything(tmp_path: Path) -> None:
    record = harness.Run()
    with pytest.raises(ChartRepositoryError) as refused:
        harness.run_program(NO_WORKLOAD, chart_directory=tmp_path, charts_served={}, record=record)
    message = str(refused.value)
    assert message.startswith(f"lab-mgmt:certManagerChartRepo: cannot fetch cert-manager v1.21.2 from {JETSTACK}")
    assert f"cert-manager-v1.21.2.tgz is not in {tmp_path}" in message
    assert f"helm pull cert-manager --repo {JETSTACK} --version v1.21.2" in message
    assert [r.type for r in record.resources.values()] == ["pulumi:pulumi:Stack"]
    assert list(tmp_path.iterdir()) == []


def test_with_skip_credentials_check_a_repository_out_of_reach_warns_and_the_run_goes_on(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    offline = harness.run_program(
        overrides={**NO_WORKLOAD, "skipCredentialsCheck": True}, chart_directory=tmp_path, charts_served={}
    )
    assert offline.chart_requests == [f"{JETSTACK}/index.yaml", f"{OPERATOR_REPO}/index.yaml"]
    assert list(tmp_path.iterdir()) == []
    warnings = [record.getMessage() for record in caplog.records if record.levelname == "WARNING"]
    for repo_key, name in zip(("certManagerChartRepo", "capiOperatorChartRepo"), ARCHIVES, strict=True):
        [warning] = [line for line in warnings if line.startswith(f"lab-mgmt:{repo_key}: cannot fetch")]
        assert f"{name} is not in {tmp_path}" in warning
        assert warning.endswith(
            "skipCredentialsCheck lets this run go on without it; its release cannot be installed until it is there"
        )
    assert offline.get(*CERT_MANAGER).inputs["chart"] == ARCHIVES[0]


def test_a_changed_archive_with_its_repository_out_of_reach_is_refused_naming_it(
    fetched: harness.Run, tmp_path: Path
) -> None:
    (tmp_path / "cluster-api-operator-0.28.0.tgz").write_bytes(b"truncated")
    with pytest.raises(ChartRepositoryError, match="lab-mgmt:capiOperatorChartRepo: cannot fetch") as refused:
        harness.run_program(NO_WORKLOAD, chart_directory=tmp_path, charts_served={})
    assert "cluster-api-operator-0.28.0.tgz is no longer what was fetched" in str(refused.value)


SOURCE = ChartSource("cert-manager", "v1.21.2", "https://charts.mirror.lab/jetstack/", "certManagerChartRepo")


def _repository(monkeypatch: pytest.MonkeyPatch, index: object, archive: bytes) -> list[str]:
    requests: list[str] = []
    served = {
        "https://charts.mirror.lab/jetstack/index.yaml": yaml.safe_dump(index).encode(),
        "https://objects.mirror.lab/cert-manager-v1.21.2.tgz": archive,
    }

    def fetch(url: str) -> bytes:
        requests.append(url)
        return served[url]

    monkeypatch.setattr(charts, "fetch", fetch)
    return requests


def _index(digest: str) -> dict[str, object]:
    entry = {"version": "v1.21.2", "urls": ["https://objects.mirror.lab/cert-manager-v1.21.2.tgz"], "digest": digest}
    return {"entries": {"cert-manager": [{"version": "v1.21.1", "urls": ["old.tgz"]}, entry]}}


def test_the_index_may_list_the_archive_anywhere(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    requests = _repository(monkeypatch, _index(hashlib.sha256(b"chart").hexdigest()), b"chart")
    assert local_chart(SOURCE, tmp_path).file_name == "cert-manager-v1.21.2.tgz"
    assert requests == [
        "https://charts.mirror.lab/jetstack/index.yaml",
        "https://objects.mirror.lab/cert-manager-v1.21.2.tgz",
    ]


def test_an_archive_that_is_not_what_the_index_lists_is_not_kept(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _repository(monkeypatch, _index(hashlib.sha256(b"chart").hexdigest()), b"tampered")
    with pytest.raises(ChartRepositoryError, match=r"lab-mgmt:certManagerChartRepo: .* has sha256 [0-9a-f]{64}, but"):
        local_chart(SOURCE, tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_a_version_the_index_does_not_list_is_named(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    _repository(monkeypatch, {"entries": {"cert-manager": [{"version": "v1.21.1", "urls": ["old.tgz"]}]}}, b"")
    with pytest.raises(ChartRepositoryError, match=r"its index\.yaml lists no cert-manager v1\.21\.2"):
        local_chart(SOURCE, tmp_path)
