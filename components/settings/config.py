"""The stack config machinery that every part of the settings shares.

Where a key is declared (Pulumi.yaml: `KEYS`, `SECRET_KEYS`, `DEFAULTS`), how a raw value reaches
the program (`config_value`), the `Reader` that reads raw values and collects every problem
instead of stopping at the first, `SettingsError`, and the ranges, patterns and checks that more
than one of the package's modules uses. It imports nothing of the package.
"""

from __future__ import annotations

import base64
import binascii
import ipaddress
import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pulumi
import yaml

PROJECT = "lab-mgmt"
REPO_ROOT = Path(__file__).resolve().parent.parent.parent
# libyaml's safe loader where the installed PyYAML has it (the same documents, a fifth of the time
# or less): every run reads Pulumi.yaml here, in the time before anything is registered.
YAML_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _declared_config() -> dict[str, dict[str, Any]]:
    """Pulumi.yaml's config block: every key with its type, default, secrecy and description, the
    one place a setting is declared (the CLI reads the same block)."""
    text = (REPO_ROOT / "Pulumi.yaml").read_text()
    config: dict[str, dict[str, Any]] = yaml.load(text, Loader=YAML_LOADER)["config"]  # noqa: S506 - a safe loader
    return config


_DECLARED = _declared_config()
# Optional, and secret: an ssh-agent serves instead. Pulumi.yaml cannot declare it, as the CLI
# requires a declared key that has no default, and a default would be a plain value.
_UNDECLARED_SECRET_KEYS = ("sshPrivateKey",)
# A list of objects, which Pulumi.yaml cannot declare (a project's config types are string,
# integer, boolean and arrays of those); absent is no workload cluster.
_UNDECLARED_KEYS = ("workloadClusters",)
KEYS = (*_DECLARED, *_UNDECLARED_SECRET_KEYS, *_UNDECLARED_KEYS)
"""Every key the program reads."""
SECRET_KEYS = (*(key for key, spec in _DECLARED.items() if spec.get("secret")), *_UNDECLARED_SECRET_KEYS)
"""The keys set with `pulumi config set --secret`."""
DEFAULTS: dict[str, Any] = {key: spec["default"] for key, spec in _DECLARED.items() if "default" in spec}
"""What the CLI gives the program for a key the stack leaves unset."""


def config_value(value: object) -> str:
    """A config value as the CLI passes it to the program: a string, JSON for a list."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, dict)):
        return json.dumps(value)
    return str(value)


# The ranges the management VM and a workload cluster's machines share.
VMID_RANGE = (100, 999_999_999)
CORES_RANGE = (1, 64)
MEMORY_MIB_RANGE = (1024, 262_144)
DISK_GIB_RANGE = (10, 4096)
VLAN_RANGE = (1, 4094)

# The forms each upstream uses for its releases; anything else (empty, "latest", a branch) is refused.
V_SEMVER = re.compile(r"^v\d+\.\d+\.\d+$")
BARE_SEMVER = re.compile(r"^\d+\.\d+\.\d+$")
# What `pveum user token add` prints as a token's secret.
TOKEN_SECRET = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$", re.IGNORECASE)
DNS_LABEL = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
SSH_KEY_TYPES = (
    "ssh-ed25519",
    "ssh-rsa",
    "ecdsa-sha2-nistp256",
    "ecdsa-sha2-nistp384",
    "ecdsa-sha2-nistp521",
    "sk-ssh-ed25519@openssh.com",
    "sk-ecdsa-sha2-nistp256@openssh.com",
)


class SettingsError(pulumi.RunError, ValueError):
    """The stack config has one or more bad values; the message lists every one. A RunError, so
    the CLI shows the message alone, with no Python traceback above it."""


class Reader:
    """Reads raw config values and collects every problem instead of stopping at the first.

    A bad or missing value is recorded and replaced by a neutral stand-in, so that the readers
    stay simple; parse_settings raises before any stand-in can be used.
    """

    def __init__(self, raw: Mapping[str, str]) -> None:
        self._raw = raw
        self.problems: list[str] = []
        self.warnings: list[str] = []

    def fail(self, key: str, message: str) -> None:
        self.problems.append(f"{PROJECT}:{key}: {message}")

    def warn(self, key: str, message: str) -> None:
        """A value accepted that the owner should know the cost of."""
        self.warnings.append(f"{PROJECT}:{key}: {message}")

    def _value(self, key: str) -> str:
        """The stack's value, or else Pulumi.yaml's default, as the CLI would have given it."""
        value = self._raw.get(key)
        if value is None and key in DEFAULTS:
            return config_value(DEFAULTS[key])
        return value or ""

    def optional(self, key: str) -> str | None:
        return self._value(key).strip() or None

    def verbatim(self, key: str) -> str | None:
        """Unstripped, for a key file whose last newline belongs to its format."""
        value = self._value(key)
        return value if value.strip() else None

    def text(self, key: str) -> str:
        value = self.optional(key)
        if value is None:
            self.fail(key, "is required but not set")
            return ""
        return value

    def integer(self, key: str, bounds: tuple[int, int], what: str) -> int:
        value = self.text(key)
        if not re.fullmatch(r"-?\d+", value):
            if value:
                self.fail(key, f"{value!r} is not a whole number")
            return bounds[0]
        number = int(value)
        if not bounds[0] <= number <= bounds[1]:
            self.fail(key, f"{number} is outside the {what} range {bounds[0]}..{bounds[1]}")
        return number

    def boolean(self, key: str) -> bool:
        value = self.text(key)
        if value.lower() not in ("true", "false"):
            if value:
                self.fail(key, f"{value!r} is not true or false")
            return False
        return value.lower() == "true"

    def matching(self, key: str, pattern: re.Pattern[str], expected: str) -> str:
        value = self.text(key)
        if value and not pattern.fullmatch(value):
            self.fail(key, f"{value!r} is not {expected}")
        return value

    def version(self, key: str, pattern: re.Pattern[str], example: str) -> str:
        value = self.text(key)
        if value.lower() in ("latest", "stable", "main", "master"):
            self.fail(key, f"{value!r} floats; pin a release of the form {example}")
        elif value and not pattern.fullmatch(value):
            self.fail(key, f"{value!r} is not a release of the form {example}")
        return value

    def token_secret(self, key: str) -> str:
        """A Proxmox API token secret; a bad one is refused without echoing it."""
        value = self.text(key)
        if value and not TOKEN_SECRET.fullmatch(value):
            self.fail(key, "is not a Proxmox API token secret (the UUID that `pveum user token add` prints)")
        return value

    def https_url(self, key: str) -> str:
        value = self.text(key)
        url = urlparse(value)
        if value and (url.scheme != "https" or not url.hostname):
            self.fail(key, f"{value!r} is not an https:// URL")
        return value

    def string_list(self, key: str) -> tuple[str, ...] | None:
        """The list, or None when it is missing or not a list (the problem is recorded)."""
        value = self.text(key)
        if not value:
            return None
        try:
            items = json.loads(value)
        except ValueError:
            items = None
        if not isinstance(items, list) or not all(isinstance(i, str) for i in items):
            self.fail(
                key,
                f"{value!r} is not a list of strings; give one entry each "
                f"(pulumi config set --path '{key}[0]' ...), not one comma-separated string",
            )
            return None
        return tuple(i.strip() for i in items)


# --- checks more than one module makes ------------------------------------------------------------


def is_ip_address(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


def is_ssh_public_key(line: str) -> bool:
    parts = line.split()
    if len(parts) < 2 or parts[0] not in SSH_KEY_TYPES:
        return False
    try:
        blob = base64.b64decode(parts[1], validate=True)
    except binascii.Error:
        return False
    # The blob starts with its own key type; a pasted fragment or a mismatched type fails here.
    return blob[4 : 4 + len(parts[0])] == parts[0].encode()


def release(version: str) -> tuple[int, ...]:
    """v1.2.3 as (1, 2, 3), for comparing; () for a value refused on its own."""
    return tuple(int(part) for part in version[1:].split(".")) if V_SEMVER.fullmatch(version) else ()
