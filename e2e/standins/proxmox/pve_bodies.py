"""Request bodies as the Proxmox VE API stand-in reads them: bpg's forms, go-proxmox's JSON objects
(its Post and Put) and its multipart uploads (UploadReader), each turned into parameters as
Proxmox VE's API server takes them (common.Ask.params).
"""

from __future__ import annotations

import email.parser
import email.policy
import json
import urllib.parse
from typing import Any


def decode_body(content_type: str, raw: bytes) -> tuple[dict[str, Any], bytes | None]:
    """A body's parameters as Proxmox VE takes them (see Ask.params), and an upload's file part:
    a form (bpg), a JSON object (go-proxmox's Post and Put) or a multipart form (go-proxmox's
    UploadReader: its fields, then the file as the part `filename`). ValueError names a body it
    does not know."""
    kind = content_type.split(";", 1)[0].strip().lower()
    if not raw:
        return {}, None
    if kind == "application/x-www-form-urlencoded":
        return dict(urllib.parse.parse_qsl(raw.decode(), keep_blank_values=True)), None
    if kind == "application/json":
        decoded = json.loads(raw)
        if not isinstance(decoded, dict):
            raise ValueError(f"a JSON body that is no object: {raw[:80]!r}")
        return {key: _pve_value(key, value) for key, value in decoded.items()}, None
    if kind == "multipart/form-data":
        message = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(
            f"Content-Type: {content_type}\r\n\r\n".encode() + raw
        )
        params: dict[str, Any] = {}
        file = None
        for part in message.iter_parts():
            name, filename = part.get_param("name", header="content-disposition"), part.get_filename()
            payload = part.get_payload(decode=True)
            if not isinstance(name, str) or not isinstance(payload, bytes):
                raise ValueError(f"a multipart part it cannot read: {part.get('content-disposition')}")
            params[name] = filename if filename is not None else payload.decode()
            file = payload if filename is not None else file
        return params, file
    raise ValueError(f"a {kind or 'typeless'} body")


def _pve_value(key: str, value: object) -> Any:
    """A JSON value as Proxmox VE's schema takes it: booleans as 1/0, numbers as their text, an
    array of strings as a list; anything else is not a parameter a client of the stand-in sends."""
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, int | float | str):
        return str(value)
    if isinstance(value, list) and all(isinstance(item, str) for item in value):
        return value
    raise ValueError(f"JSON parameter {key} as {value!r}")
