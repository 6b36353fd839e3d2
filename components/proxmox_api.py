"""One read of the Proxmox VE API with an API token, for the checks made at preview
(components.credentials, components.clone_sources): bounded in time, honouring `proxmoxInsecure`,
and failing with what the API answered, never with a header, so never with a token secret."""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass

REQUEST_TIMEOUT_SECONDS = 10


@dataclass(frozen=True)
class Token:
    endpoint: str
    token_id: str
    token_secret: str
    insecure: bool


class ApiCallError(Exception):
    """A call the API refused (`status`, with Proxmox VE's message, which it sends as the reason
    phrase) or that never got an answer (`status` None: the connection's or TLS's error)."""

    def __init__(self, status: int | None, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def get(token: Token, path: str) -> object:
    """The `data` of `GET /api2/json/<path>` (its segments percent-encoded by the caller)."""
    url = f"{token.endpoint.rstrip('/')}/api2/json/{path}"
    request = urllib.request.Request(  # noqa: S310 - the endpoint is validated as an https:// URL
        url, headers={"Authorization": f"PVEAPIToken={token.token_id}={token.token_secret}"}
    )
    context = _unverified_context() if token.insecure else ssl.create_default_context()
    try:
        with urllib.request.urlopen(request, timeout=REQUEST_TIMEOUT_SECONDS, context=context) as response:  # noqa: S310
            body = json.load(response)
    except urllib.error.HTTPError as error:
        error.close()  # it holds the open response
        raise ApiCallError(error.code, str(error.reason).strip()) from None
    except (OSError, ValueError) as error:
        # URLError, TLS and timeout errors are OSErrors; their text names the cause, never a header.
        raise ApiCallError(None, str(error)) from None
    if not isinstance(body, dict) or "data" not in body:
        raise ApiCallError(None, f"GET {path} was answered without a data member")
    return body["data"]


def segment(value: object) -> str:
    """One path segment, as a node name or VMID goes in a URL."""
    return urllib.parse.quote(str(value), safe="")


def _unverified_context() -> ssl.SSLContext:
    """TLS that checks no certificate (proxmoxInsecure): the default context with no CA bundle
    loaded, which it would not use and which takes some 30 ms to load from the system's."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context
