"""The loop of the stand-ins that act on a cluster as its controllers would (the operator's,
cert-manager's CA injector): one step every two seconds, in a thread of their own, from the moment
their user's kubeconfig exists (it is written once the API server answers, as when the box's k3s
is installed during a run) until the block ends.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from e2e.engine.control_plane import ControlPlane
from e2e.engine.kube_api import Api, ApiError, UnreachableError

# A step reads and writes through the API (e2e/engine/kube_api.py), a few requests; four boxes
# side by side share two cores. A real controller's watch answers sooner; what the tests check is
# what happens in which order, never how soon.
POLL_SECONDS = 2.0


@contextmanager
def looping(
    cluster: ControlPlane,
    user: str,
    step: Callable[[], None],
    errors: list[str],
    doing: str,
    *,
    interval: float = POLL_SECONDS,
) -> Iterator[None]:
    """`step` as `user` on `cluster` every `interval` seconds for the block; an object of a shape
    it does not know (a KeyError or ValueError) is said in `errors` as `cannot <doing>: ...`, never
    skipped in silence. While the API server is not ready no pass runs, and a pass it stops
    answering ends there: a controller's watch, cut off while its API server restarts, acts again
    once it lists anew, never on what a restarted server answers before it serves the CRDs' kinds
    (k3s restarted on the VM)."""
    stop = threading.Event()
    kubeconfig = cluster.kubeconfig_of(user)

    def loop() -> None:
        while not stop.wait(interval):
            if not kubeconfig.exists() or not _ready(kubeconfig):
                continue
            try:
                step()
            except UnreachableError:
                continue
            except (KeyError, ValueError) as unknown:
                errors.append(f"cannot {doing}: {unknown!r}")

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=30)


def refused(errors: list[str], error: ApiError) -> None:
    """An answer a pass did not expect, said in `errors`; an API server gone mid-pass (k3s
    restarted on the VM) is no answer: it ends the pass, and `looping` tries again once the server
    serves, as a cut-off watch lists anew."""
    if isinstance(error, UnreachableError):
        raise error
    errors.append(str(error))


def _ready(kubeconfig: Path) -> bool:
    """Whether the API server serves the CRDs' kinds: the one readiness check that says so, which
    costs it nothing (the whole /readyz asks etcd too)."""
    try:
        code, _ = Api.from_kubeconfig(kubeconfig).call("GET", "/readyz/poststarthook/crd-informer-synced")
    except UnreachableError:
        return False
    return code == 200
