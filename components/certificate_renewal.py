"""The admin kubeconfig's client certificate between runs. k3s gives it a year and renews it only
when k3s starts, within RENEWAL_WINDOW of its expiry; the program never restarts k3s by itself.
So each run reads the certificate that the stack holds (no SSH session), warns while it is in the
window, and has the kubeconfig read again once when it enters the window (a restart outside the
program, such as a reboot, may have renewed it already)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pulumi
import pulumi_command as command

from components.kubeconfig import KubeconfigError, client_certificate_expiry

# k3s renews a client certificate (a year long) that is within 120 days of expiry, and only when
# it starts (CertificateRenewDays, 120 since v1.33.1+k3s1, k3s-io/k3s#12232; 90 before): inside
# this window a restart of k3s gives the admin kubeconfig a new certificate, and the one the stack
# holds is due to stop working.
RENEWAL_WINDOW = timedelta(days=120)
# The stack output that records the notAfter of the held admin certificate last seen entering
# RENEWAL_WINDOW (not secret: a date), which mgmt-read-kubeconfig's triggers carry.
CERTIFICATE_RENEWAL_OUTPUT = "adminCertificateRenewal"


@dataclass(frozen=True)
class HeldCertificate:
    """The admin client certificate in the kubeconfig that the last deployment holds (the
    `kubeconfig` output, which the Kubernetes provider uses), as of `now`. Read from the stack
    itself, so a run with nothing to do opens no SSH session."""

    now: datetime
    expiry: datetime | None
    """Its notAfter; None with no kubeconfig held, a user with a token, or `unreadable`."""
    unreadable: str | None
    """Why its certificate could not be read."""
    recorded: str | None
    """CERTIFICATE_RENEWAL_OUTPUT of the last deployment."""

    @classmethod
    def of(cls, deployment: Mapping[str, Any], now: datetime) -> HeldCertificate:
        text, recorded = deployment.get("kubeconfig"), deployment.get(CERTIFICATE_RENEWAL_OUTPUT)
        expiry, unreadable = None, None
        if isinstance(text, str):
            try:
                expiry = client_certificate_expiry(text)
            except KubeconfigError as error:
                unreadable = str(error)
        return cls(now, expiry, unreadable, recorded if isinstance(recorded, str) else None)

    @property
    def in_window(self) -> bool:
        return self.expiry is not None and self.expiry - self.now <= RENEWAL_WINDOW

    @property
    def marker(self) -> str | None:
        """CERTIFICATE_RENEWAL_OUTPUT of this run, in mgmt-read-kubeconfig's triggers: the held
        certificate's notAfter once it is in the window, else the recorded marker. So the
        kubeconfig is read once when a certificate enters the window; a renewed one (out of the
        window) keeps the marker, and nothing is read again until it nears its own expiry."""
        return _stamp(self.expiry) if self.expiry is not None and self.in_window else self.recorded


def _stamp(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def renewal_warning(held: HeldCertificate, *, urn: str, ssh: str) -> str | None:
    """What the owner is told while the held certificate is in the renewal window (or cannot be
    read); None otherwise. The program never restarts k3s: the owner picks the moment."""
    replace = f"pulumi up --replace '{urn}'"
    if held.unreadable is not None:
        return (
            "The admin kubeconfig the last deployment holds (output kubeconfig) does not show when its "
            f"client certificate expires ({held.unreadable}), so this program cannot warn before it does: "
            f"read the kubeconfig again with {replace}"
        )
    if held.expiry is None or not held.in_window:
        return None
    date = held.expiry.strftime("%Y-%m-%d %H:%M UTC")
    days = math.ceil((held.expiry - held.now) / timedelta(days=1))
    when = (
        f"expired on {date}: every call to the cluster fails with Unauthorized"
        if held.expiry <= held.now
        else f"expires on {date}, in {days} days"
    )
    reread = (
        "Entering that window, pulumi up reads it once again (mgmt-read-kubeconfig), which picks up a "
        "certificate that a restart since the last read renewed. "
        if held.marker != held.recorded
        else ""
    )
    return (
        f"The admin kubeconfig's client certificate (output kubeconfig, the Kubernetes provider's) {when}. "
        f"k3s renews it only when it starts, within {RENEWAL_WINDOW.days} days of expiry, and this program "
        "never restarts k3s by itself: restart it in a window of your choosing "
        f"({ssh} sudo systemctl restart k3s; the API server is away for seconds), then read the renewed "
        f"kubeconfig with {replace}. {reread}(docs/troubleshooting.md, "
        "'The admin kubeconfig's client certificate expires')"
    )


def held_certificate(deployment: pulumi.Output[Mapping[str, Any]]) -> pulumi.Output[HeldCertificate]:
    # One "now" per run, so that the marker and the warning agree.
    now = datetime.now(UTC)
    return pulumi.Output.unsecret(deployment.apply(lambda outputs: HeldCertificate.of(outputs, now)))


def announced(
    held: pulumi.Output[HeldCertificate], read: command.remote.Command, *, ssh: str
) -> pulumi.Output[str | None]:
    """Warns (in every preview and update) as renewal_warning says, naming `read` for the
    --replace; this run's marker."""

    def announce(values: list[Any]) -> str | None:
        certificate: HeldCertificate = values[0]
        if message := renewal_warning(certificate, urn=values[1], ssh=ssh):
            pulumi.log.warn(message)
        return certificate.marker

    return pulumi.Output.all(held, read.urn).apply(announce)
