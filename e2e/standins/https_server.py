"""What the HTTPS stand-ins (proxmox/pve_api_standin.py, cluster/chart_repo_standin.py) share: a
throwaway self-signed certificate for the address they answer at, and a threaded server that
runs for a `with` block; also a plain file server over HTTPS (a box-local cloud image mirror)."""

from __future__ import annotations

import ssl
import subprocess
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any


def self_signed_certificate(
    directory: Path, name: str, address: str, hostnames: Sequence[str] = ()
) -> tuple[Path, Path]:
    """(key, certificate), valid a day, for `address` (as CN and IP subject alternative name) and
    any `hostnames` the stand-in answers for."""
    key, cert = directory / f"{name}.key", directory / f"{name}.crt"
    names = ",".join([f"IP:{address}", *(f"DNS:{hostname}" for hostname in hostnames)])
    subprocess.run(
        [
            *("openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"),
            *("-days", "1", "-subj", f"/CN={name}", "-addext", f"subjectAltName={names}"),
            *("-keyout", str(key), "-out", str(cert)),
        ],
        check=True,
        capture_output=True,
    )
    return key, cert


@contextmanager
def serving(
    handler: type[BaseHTTPRequestHandler], address: tuple[str, int], key: Path, cert: Path
) -> Iterator[ThreadingHTTPServer]:
    """`handler` over TLS at `address` (port 0: an ephemeral one, in server_address) for the block."""
    server = ThreadingHTTPServer(address, handler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


@contextmanager
def serving_files(directory: Path, address: tuple[str, int], key: Path, cert: Path) -> Iterator[ThreadingHTTPServer]:
    """The files under `directory` (GET and HEAD), over TLS at `address`, for the block."""

    class Files(SimpleHTTPRequestHandler):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, directory=str(directory), **kwargs)

        def log_message(self, format: str, *args: object) -> None:
            """Quiet: a scenario's output is the CLI's."""

    with serving(Files, address, key, cert) as server:
        yield server
