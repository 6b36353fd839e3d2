"""A stand-in for where k3s releases are downloaded from: the installer at its tag
(`/k3s-io/k3s/<tag>/install.sh`, as on raw.githubusercontent.com: e2e/standins/guest/k3s_install_standin.sh), and
the release's `k3s` binary (e2e/standins/guest/k3s_standin.py, reporting the tag as its version) with its
`sha256sum-amd64.txt` (`/k3s-io/k3s/releases/download/<tag>/...`, as on github.com), over HTTPS for
the releases it is given. A box guest made with `hosts` and `trusted` from here resolves
raw.githubusercontent.com and github.com to it and trusts its certificate, so the program's host
script downloads the installer as it would upstream. Every request is recorded; an unknown path or
release is answered 404 and recorded as unknown, so a test can fail on it.
"""

from __future__ import annotations

import hashlib
import os
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from urllib.parse import unquote

from e2e.engine.cli import REPO
from e2e.standins import https_server

HOSTNAMES = ("raw.githubusercontent.com", "github.com")
INSTALLER = Path(__file__).resolve().parent / "k3s_install_standin.sh"


@dataclass
class K3sReleases:
    address: str
    certificate: Path
    requests: list[str] = field(default_factory=list)
    unknown: list[str] = field(default_factory=list)

    @property
    def hosts(self) -> dict[str, str]:
        """For Guests(hosts=...): the names the installer downloads from, at this stand-in."""
        return dict.fromkeys(HOSTNAMES, self.address)


def binary(tag: str) -> bytes:
    """The release's `k3s`: the stand-in with this tag as its version, run by the tests'
    interpreter on the built control plane (both visible in a guest)."""
    control_plane = os.environ["LAB_MGMT_CONTROL_PLANE_BIN"]
    return (
        f"#!/bin/sh\n# k3s {tag}, the lab in a box's stand-in (e2e/standins/guest/k3s_standin.py)\n"
        f"export K3S_STANDIN_VERSION='{tag}' LAB_MGMT_CONTROL_PLANE_BIN='{control_plane}' PYTHONPATH='{REPO}'\n"
        f"exec '{sys.executable}' -m e2e.standins.guest.k3s_standin \"$@\"\n"
    ).encode()


@contextmanager
def serve(tags: Sequence[str], directory: Path, address: str) -> Iterator[K3sReleases]:
    """The releases `tags` at `address`:443 for the block."""
    key, cert = https_server.self_signed_certificate(directory, "k3s-releases", address, HOSTNAMES)
    releases = K3sReleases(address, cert)

    def body(path: str) -> bytes | None:
        parts = path.strip("/").split("/")
        if len(parts) == 4 and parts[:2] == ["k3s-io", "k3s"] and parts[2] in tags and parts[3] == "install.sh":
            return INSTALLER.read_bytes()
        if len(parts) == 6 and parts[:4] == ["k3s-io", "k3s", "releases", "download"] and parts[4] in tags:
            if parts[5] == "k3s":
                return binary(parts[4])
            if parts[5] == "sha256sum-amd64.txt":
                return f"{hashlib.sha256(binary(parts[4])).hexdigest()}  k3s\n".encode()
        return None

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            releases.requests.append(f"GET {self.path}")
            payload = body(unquote(self.path.split("?", 1)[0]))
            if payload is None:
                releases.unknown.append(f"GET {self.path}")
                payload, status = f"the box has no {self.path}\n".encode(), 404
            else:
                status = 200
            self.send_response(status)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, format: str, *args: object) -> None:
            """Requests are recorded above; nothing goes to stderr."""

    with https_server.serving(Handler, (address, 443), key, cert):
        yield releases
