"""k3s's helm-controller, real: k3s-io/helm-controller v0.17.7, the version k3s v1.35.8+k3s1 embeds,
built by `e2e/engine/build-engine.sh helm-controller` from the Go module proxy into
LAB_MGMT_HELM_CONTROLLER_BIN (build-engine.sh says how the version was read).

k3s runs it inside its server process (k3s pkg/server/server.go, where it calls the chart
package's Register): for every namespace, its lease in kube-system, managedBy `helm-controller`,
the Jobs' cluster role `cluster-admin`, an apply that sets no owner references, and the Jobs' image
from k3s's own image list. The module's own main (pkg/controllers/controllers.go) makes the same
call with the same values when given no `--namespace` and the defaults of `--controller-name` and
`--job-cluster-role`; the image is given as k3s gives it. Like k3s's, it creates its CRDs
(helmcharts, helmchartconfigs) at start. It talks to the API server as a user of its own
(HELM_CONTROLLER_USER, a cluster admin as k3s's supervisor is), so that the audit log tells its
writes from the owner's.

It is ready once its log says that its controllers started (after it took the lease); a process
that exits, or is not ready within READY_BOUND_SECONDS, stops the block with the end of its log.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from e2e.engine.cli import built_bin
from e2e.engine.control_plane import HELM_CONTROLLER_USER, ControlPlane, stop

BIN_VARIABLE, BINARY = "LAB_MGMT_HELM_CONTROLLER_BIN", "helm-controller"
# The Jobs' image of k3s v1.35.8+k3s1 (klipper-helm, as e2e/engine/build-engine.sh reads k3s PR #14476).
JOB_IMAGE = "rancher/klipper-helm:v0.13.3-build20260727"
STARTED = "All controllers have been started"
READY_BOUND_SECONDS = 90
# What k3s's helm-controller names itself: the set ID of what it makes is `<it>-chart-registration`.
MANAGED_BY = "helm-controller"


@dataclass(frozen=True)
class RunningHelmController:
    log: Path
    args: tuple[str, ...]
    started_seconds: float

    def log_tail(self, lines: int = 40) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])


@contextmanager
def running(cluster: ControlPlane, directory: Path) -> Iterator[RunningHelmController]:
    """helm-controller against `cluster` as k3s runs it, started and leading, for the block; stopped
    afterwards (as a restarted k3s stops it: its lease is left to expire). Its log is in `directory`."""
    bin_dir = built_bin(BIN_VARIABLE, BINARY)
    directory.mkdir(parents=True, exist_ok=True)
    args = (f"--kubeconfig={cluster.kubeconfig_of(HELM_CONTROLLER_USER)}", f"--default-job-image={JOB_IMAGE}")
    log = directory / f"{BINARY}.log"
    began = time.monotonic()
    with log.open("ab") as output:
        process = subprocess.Popen([str(bin_dir / BINARY), *args], stdout=output, stderr=subprocess.STDOUT)
        try:
            _wait_started(process, log, log.stat().st_size)
            yield RunningHelmController(log, args, round(time.monotonic() - began, 1))
        finally:
            stop(process)


def _wait_started(process: subprocess.Popen[bytes], log: Path, since: int) -> None:
    deadline = time.monotonic() + READY_BOUND_SECONDS
    while time.monotonic() < deadline:
        text = log.read_bytes()[since:].decode(errors="replace")
        if STARTED in text:
            return
        if process.poll() is not None:
            raise RuntimeError(f"helm-controller exited {process.returncode}; its log ({log}):\n{text[-3000:]}")
        time.sleep(0.2)
    raise RuntimeError(f"helm-controller did not start its controllers within {READY_BOUND_SECONDS} s (its log: {log})")
