"""A stand-in for the one Proxmox VE API call the program makes itself: `GET
/api2/json/access/permissions`, over HTTPS with a self-signed certificate, on 127.0.0.1 or, inside
a network namespace that a test made, on the lab's own address.

It answers from its own table of tokens, as Proxmox VE does: 401 for an unknown token id or a
wrong secret, the caller's permissions otherwise. Every request is recorded; any other path or
method is answered 501 naming it and recorded as unknown, so a test can fail on it.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from pathlib import Path

from e2e import https_server

PERMISSIONS_PATH = "/api2/json/access/permissions"


@dataclass
class PveApiStandIn:
    url: str
    certificate: Path
    requests: list[tuple[str, str]] = field(default_factory=list)
    """(method, path) of every request."""
    unknown: list[str] = field(default_factory=list)


@contextmanager
def serve(
    tokens: Mapping[tuple[str, str], Mapping[str, Mapping[str, int]]],
    directory: Path,
    address: tuple[str, int] = ("127.0.0.1", 0),
) -> Iterator[PveApiStandIn]:
    """The stand-in at `address` (an ephemeral loopback port by default), for the block."""
    key, cert = https_server.self_signed_certificate(directory, "pve-standin", address[0])
    standin: PveApiStandIn

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            standin.requests.append(("GET", self.path))
            if self.path.split("?", 1)[0] != PERMISSIONS_PATH:
                self._unknown()
                return
            auth = self.headers.get("Authorization", "")
            token_id, _, secret = auth.removeprefix("PVEAPIToken=").partition("=")
            permissions = tokens.get((token_id, secret)) if auth.startswith("PVEAPIToken=") else None
            if permissions is None:
                self._answer(401, {"data": None})
                return
            self._answer(200, {"data": permissions})

        def do_POST(self) -> None:
            standin.requests.append(("POST", self.path))
            self._unknown()

        def _unknown(self) -> None:
            standin.unknown.append(f"{self.command} {self.path}")
            self._answer(501, {"errors": f"stand-in does not know {self.command} {self.path}"})

        def _answer(self, status: int, body: object) -> None:
            payload = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, format: str, *args: object) -> None:
            """Requests are recorded above; nothing goes to stderr."""

    with https_server.serving(Handler, address, key, cert) as server:
        standin = PveApiStandIn(url=f"https://{address[0]}:{server.server_address[1]}/", certificate=cert)
        yield standin
