"""The box's Kubernetes API servers over HTTPS from the test process, as one of the users a
control plane (control_plane.py) writes a kubeconfig for: what the stand-ins' loops and the
scenarios' polls read and write every second or two. A kubectl process costs about 60 ms of CPU
to start; four boxes side by side spent a third of the suite's CPU on them (measured with process
accounting, `sa`, on the takeover scenario: 1,301 kubectl runs, 82 of its 209 CPU seconds).
kubectl stays where its own behaviour is the point (client-side apply, `wait`, the owner's steps).
"""

from __future__ import annotations

import base64
import http.client
import json
import ssl
import threading
import time
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MERGE_PATCH = "application/merge-patch+json"
# client-go's default for a request the server asks to retry.
RETRIES = 10
JSON_PATCH = "application/json-patch+json"
# Each thread's connections, by server and CA (see Api._send).
_KEPT = threading.local()
# What discovery said, by (server, apiVersion, kind): a served kind's resource never changes.
_PLURALS: dict[tuple[str, str, str], str] = {}
# By server, each name kubectl takes for a resource (plural, singular, short, plural.group), at
# the group's preferred version: [apiVersion, plural, namespaced].
_NAMES: dict[str, dict[str, tuple[str, str, bool]]] = {}


class ApiError(ValueError):
    """An answer the caller did not expect, with the API server's status and message."""


class UnreachableError(ApiError, OSError):
    """No answer at all (refused, reset, timed out), naming the server: an API server down is a
    fault some scenarios cause on purpose, and what they read is who was refused where."""


@dataclass
class Api:
    """One user of one API server (its kubeconfig's server, bearer token and CA)."""

    server: str
    token: str
    context: ssl.SSLContext

    @classmethod
    def from_kubeconfig(cls, path: Path) -> Api:
        config = json.loads(path.read_text())
        cluster, user = config["clusters"][0]["cluster"], config["users"][0]["user"]
        ca = base64.b64decode(cluster["certificate-authority-data"]).decode()
        context = ssl.create_default_context(cadata=ca)
        context.check_hostname = False
        return cls(cluster["server"], user["token"], context)

    @property
    def ca(self) -> bytes:
        return ssl.DER_cert_to_PEM_cert(self.context.get_ca_certs(binary_form=True)[0]).encode()

    def call(
        self, method: str, path: str, body: Any = None, *, content_type: str = "application/json"
    ) -> tuple[int, dict[str, Any]]:
        """[status, the answer's JSON] whatever the status, once the server stops asking to retry:
        a 429 or 5xx with Retry-After (a new CRD's storage initializing, a restarted server not
        serving every path yet) is waited out and sent again, as client-go, and so kubectl, does."""
        data = None if body is None else json.dumps(body).encode()
        headers = {"Authorization": f"Bearer {self.token}", "Content-Type": content_type}
        for _ in range(RETRIES):
            status, retry_after, answer = self._send(method, path, data, headers)
            if not (status == 429 or status >= 500) or not retry_after:
                break
            time.sleep(min(float(retry_after), 1.0))
        return status, answer

    def _send(
        self, method: str, path: str, data: bytes | None, headers: dict[str, str]
    ) -> tuple[int, str, dict[str, Any]]:
        """One request on this thread's kept-alive connection to the server: a new connection costs
        the API server an RSA signature (a profile of the takeover box's server: 15% of its CPU
        went to TLS handshakes while each request had one). A kept connection the server has
        closed meanwhile is opened again once."""
        key = (self.server, self.ca)
        pool: dict[tuple[str, bytes], http.client.HTTPSConnection] = _KEPT.__dict__.setdefault("connections", {})
        for reused in (key in pool, False):
            if key not in pool:
                address = urllib.parse.urlsplit(self.server)
                pool[key] = http.client.HTTPSConnection(
                    address.hostname or "", address.port, context=self.context, timeout=30
                )
            try:
                pool[key].request(method, path, body=data, headers=headers)
                response = pool[key].getresponse()
                return response.status, response.headers.get("Retry-After", ""), _answer(response.read())
            except (http.client.HTTPException, OSError) as error:
                pool.pop(key).close()
                if not reused:
                    raise UnreachableError(f"{method} {self.server}{path}: {error}") from error
        raise AssertionError("unreachable: the second try raises or returns")

    def must(self, method: str, path: str, body: Any = None, *, content_type: str = "application/json") -> Any:
        """The answer of a call that must succeed; anything else raises, naming the call."""
        code, answer = self.call(method, path, body, content_type=content_type)
        if code not in (200, 201):
            raise ApiError(f"{method} {self.server}{path}: {code} {answer.get('message', '')}")
        return answer

    def get(self, path: str) -> dict[str, Any]:
        found: dict[str, Any] = self.must("GET", path)
        return found

    def find(self, path: str) -> dict[str, Any] | None:
        """The object at `path`, or None where there is none (404)."""
        code, answer = self.call("GET", path)
        if code == 404:
            return None
        if code != 200:
            raise ApiError(f"GET {self.server}{path}: {code} {answer.get('message', '')}")
        return answer

    def preferred(self, group: str) -> str | None:
        """The group's preferred apiVersion, or None where it is not served (no CRD of it yet)."""
        served = self.find(f"/apis/{group}")
        return None if served is None else str(served["preferredVersion"]["groupVersion"])

    def path(self, api_version: str, resource: str, namespace: str | None = None, name: str = "") -> str:
        """The REST path of `resource` (plural) at `api_version`, in `namespace` (or across all),
        of the object `name` if given."""
        root = f"/apis/{api_version}" if "/" in api_version else f"/api/{api_version}"
        where = f"/namespaces/{namespace}" if namespace else ""
        return f"{root}{where}/{resource}" + (f"/{name}" if name else "")

    def plural(self, api_version: str, kind: str) -> str:
        """The resource serving `kind` at `api_version`, as discovery says (kept once read)."""
        key = (self.server, api_version, kind)
        if key not in _PLURALS:
            root = f"/apis/{api_version}" if "/" in api_version else f"/api/{api_version}"
            for resource in self.get(root)["resources"]:
                if "/" not in resource["name"]:
                    _PLURALS[(self.server, api_version, resource["kind"])] = resource["name"]
        if key not in _PLURALS:
            raise ApiError(f"{self.server}: {api_version} serves no {kind}")
        return _PLURALS[key]

    def resolve(self, resource: str) -> tuple[str, str, bool] | None:
        """[apiVersion, plural, namespaced] of `resource` as kubectl names it, at the preferred
        version; None where nothing by that name is served (discovery read again once, as a CRD
        may have come since)."""
        if resource not in _NAMES.get(self.server, {}):
            names: dict[str, tuple[str, str, bool]] = {}
            versions = ["v1"] + [group["preferredVersion"]["groupVersion"] for group in self.get("/apis")["groups"]]
            for api_version in reversed(versions):  # the core group's names win, as kubectl's do
                root = f"/apis/{api_version}" if "/" in api_version else f"/api/{api_version}"
                for served in self.get(root)["resources"]:
                    if "/" in served["name"]:
                        continue
                    found = (api_version, served["name"], served["namespaced"])
                    group = api_version.rpartition("/")[0]
                    aliases = [served["name"], served.get("singularName") or "", *served.get("shortNames", [])]
                    names |= {alias: found for alias in aliases if alias}
                    names[f"{served['name']}.{group}" if group else served["name"]] = found
            _NAMES[self.server] = names
        return _NAMES[self.server].get(resource)

    def read(self, resource: str, name: str = "", *, namespace: str = "default", selector: str = "") -> Any:
        """What `kubectl get resource [name] -n namespace -l selector -o json` prints (the List's
        items with apiVersion and kind; the managed fields too), or None: not found, not served."""
        served = self.resolve(resource)
        if served is None:
            return None
        api_version, plural, namespaced = served
        path = self.path(api_version, plural, namespace if namespaced else None, name)
        found = self.find(path + (f"?{urllib.parse.urlencode({'labelSelector': selector})}" if selector else ""))
        if found is None or name:
            return found
        kind = found["kind"].removesuffix("List")
        items = [{"apiVersion": api_version, "kind": kind, **item} for item in found["items"]]
        return {"apiVersion": "v1", "kind": "List", "items": items}

    def object_path(self, obj: dict[str, Any]) -> str:
        meta = obj["metadata"]
        resource = self.plural(obj["apiVersion"], obj["kind"])
        return self.path(obj["apiVersion"], resource, meta.get("namespace"), meta["name"])

    def items(
        self, api_version: str, resource: str, namespace: str | None = None, **query: str
    ) -> list[dict[str, Any]] | None:
        """Every object of `resource` with apiVersion and kind filled in as kubectl shows them, or
        None where the server does not serve it (its CRD not installed yet)."""
        path = self.path(api_version, resource, namespace) + (f"?{urllib.parse.urlencode(query)}" if query else "")
        listed = self.find(path)
        if listed is None:
            return None
        kind = listed["kind"].removesuffix("List")
        return [{"apiVersion": api_version, "kind": kind, **item} for item in listed["items"]]

    def merge_patch(self, obj: dict[str, Any], body: dict[str, Any], *, subresource: str = "") -> None:
        self.must(
            "PATCH", self.object_path(obj) + (f"/{subresource}" if subresource else ""), body, content_type=MERGE_PATCH
        )

    def json_patch(self, obj: dict[str, Any], operations: list[dict[str, Any]]) -> None:
        self.must("PATCH", self.object_path(obj), operations, content_type=JSON_PATCH)

    def create_or_merge(self, obj: dict[str, Any]) -> None:
        """`obj` created, or merged into the one that exists: a controller's CreateOrUpdate."""
        path = self.object_path(obj)
        code, answer = self.call("PATCH", path, obj, content_type=MERGE_PATCH)
        if code == 404:
            self.must("POST", path.rsplit("/", 1)[0], obj)
        elif code != 200:
            raise ApiError(f"PATCH {self.server}{path}: {code} {answer.get('message', '')}")

    def delete(self, obj: dict[str, Any], *, grace_seconds: int | None = None) -> None:
        """`obj` deleted (with `grace_seconds` where given); gone already is fine."""
        body = (
            None
            if grace_seconds is None
            else {"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": grace_seconds}
        )
        code, answer = self.call("DELETE", self.object_path(obj), body)
        if code not in (200, 202, 404):
            raise ApiError(f"DELETE {self.server}{self.object_path(obj)}: {code} {answer.get('message', '')}")


def _answer(body: bytes) -> dict[str, Any]:
    """The JSON an API server answers, or its plain text as the message (a 404 for a path it does
    not serve at all is `404 page not found`)."""
    try:
        answer: dict[str, Any] = json.loads(body or b"{}")
    except json.JSONDecodeError:
        return {"message": body.decode(errors="replace").strip()}
    return answer
