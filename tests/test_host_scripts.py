"""The host scripts (components/scripts/*.sh) run for real under bash, against stand-in commands.

Every command a script calls that would touch the machine (cloud-init, systemctl, apt-get,
dpkg-query, curl, k3s and the k3s installer curl fetches) is a small bash stand-in in
tmp_path/bin, first on PATH. Each one appends its invocation to a log (the variables the script
sets for that one command, as NAME=value, then its name and arguments) and keeps what it changed
(package installed, unit active, k3s version) in tmp_path/state, so that a second run sees what
the first one did. bash, sh and coreutils are the real ones.
"""

from __future__ import annotations

import base64
import os
import re
import shutil
import stat
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

SCRIPTS_DIR = Path(__file__).resolve().parent.parent / "components" / "scripts"
SCRIPTS = sorted(path.name for path in SCRIPTS_DIR.glob("*.sh"))

Call = tuple[str, ...]
"""One logged invocation: NAME=value for the logged variables the caller set, name, arguments."""
FIELD_SEPARATOR = "\x1f"

# Common head of every stand-in: log the invocation, then `state KEY DEFAULT` reads what a test
# or an earlier stand-in call stored, and `unexpected` rejects a call the stand-in does not model.
PRELUDE = r"""#!/usr/bin/env bash
set -euo pipefail
{
  for var in DEBIAN_FRONTEND INSTALL_K3S_VERSION; do
    if [[ -v $var ]]; then printf '%s=%s\037' "$var" "${!var}"; fi
  done
  printf '%s' "${0##*/}"
  if [ $# -gt 0 ]; then printf '\037%s' "$@"; fi
  printf '\n'
} >>"$STUB_LOG"
state() { cat "$STUB_STATE/$1" 2>/dev/null || printf '%s' "$2"; }
unexpected() { echo "${0##*/}: call not modelled by the stand-in" >&2; exit 99; }
"""

CLOUD_INIT = r"""
case "$*" in
  "status --wait") echo "status: done"; exit "$(state cloud-init-rc 0)" ;;
  "status --long") state cloud-init-long "status: done"; exit "$(state cloud-init-rc 0)" ;;
  *) unexpected ;;
esac
"""

SYSTEMCTL = r"""
unit="${!#}"
case "$*" in
  "is-enabled --quiet $unit") [ -e "$STUB_STATE/$unit.enabled" ] || exit 1 ;;
  "is-active --quiet $unit") [ -e "$STUB_STATE/$unit.active" ] || exit 3 ;;
  "enable $unit") touch "$STUB_STATE/$unit.enabled" ;;
  "start $unit" | "restart $unit") touch "$STUB_STATE/$unit.active" ;;
  *) unexpected ;;
esac
"""

DPKG_QUERY = r"""
package="${!#}"
[ "$*" = "-W -f=\${Status} $package" ] || unexpected
if [ -e "$STUB_STATE/$package.installed" ]; then
  printf 'install ok installed'
else
  echo "dpkg-query: no packages found matching $package" >&2
  exit 1
fi
"""

# The qemu-guest-agent unit is static, so is-enabled succeeds as soon as the package is there.
APT_GET = r"""
case " $* " in
  *" update "*) ;;
  *" install "*) touch "$STUB_STATE/${!#}.installed" "$STUB_STATE/${!#}.enabled" ;;
  *) unexpected ;;
esac
"""

# Writes, to the -o file, an installer that logs how it was run and "installs" the k3s stand-in
# (from lib/, into bin/) reporting INSTALL_K3S_VERSION. It runs under the real sh.
CURL = r"""
if [ -e "$STUB_STATE/curl-fails" ]; then
  echo "curl: (22) The requested URL returned error: 404" >&2
  exit 22
fi
out=""
previous=""
for arg in "$@"; do
  if [ "$previous" = -o ]; then out="$arg"; fi
  previous="$arg"
done
[ -n "$out" ] || unexpected
cat >"$out" <<'INSTALLER'
set -eu
{
  if [ -n "${INSTALL_K3S_VERSION+x}" ]; then printf 'INSTALL_K3S_VERSION=%s\037' "$INSTALL_K3S_VERSION"; fi
  printf 'install.sh\037%s\n' "$0"
} >>"$STUB_LOG"
printf '%s' "$INSTALL_K3S_VERSION" >"$STUB_STATE/k3s-version"
cp "$STUB_LIB/k3s" "$STUB_BIN/k3s"
INSTALLER
"""

# Not on PATH until installed. `get nodes` prints the k3s-nodes state from poll k3s-node-from-poll.
K3S = r"""
case "$*" in
  --version) printf 'k3s version %s (1a2b3c4d)\ngo version go1.23.6\n' "$(state k3s-version '')" ;;
  "kubectl get nodes -o name --request-timeout=10s")
    polls=$(($(state k3s-node-polls 0) + 1))
    printf '%s' "$polls" >"$STUB_STATE/k3s-node-polls"
    if [ "$polls" -ge "$(state k3s-node-from-poll 1)" ]; then state k3s-nodes ""; fi
    ;;
  "kubectl create --dry-run=server -o name -f -")
    cat >"$STUB_STATE/k3s-dry-run-input"
    polls=$(($(state k3s-dry-run-polls 0) + 1))
    printf '%s' "$polls" >"$STUB_STATE/k3s-dry-run-polls"
    if [ "$polls" -lt "$(state k3s-webhook-from-poll 1)" ]; then
      echo 'Error from server (InternalError): failed calling webhook "vcoreprovider.kb.io": connection refused' >&2
      exit 1
    fi
    if [ "$(state k3s-webhook-answer created)" = denied ]; then
      printf '%s\n' 'Error from server (Forbidden): admission webhook "vcoreprovider.kb.io"' \
        'denied the request: MoreThanOneExists' >&2
      exit 1
    fi
    echo "coreprovider.operator.cluster.x-k8s.io/webhook-probe created (server dry run)"
    ;;
  "kubectl wait "* | "kubectl -n capi-operator-system wait "*)
    rc="$(state k3s-wait-rc 0)"
    if [ "$rc" -eq 0 ]; then
      echo "node/vm1 condition met"
    else
      echo "error: timed out waiting for the condition on nodes/vm1" >&2
    fi
    exit "$rc"
    ;;
  *) unexpected ;;
esac
"""

# Present so that a call to any of them would be logged (and fail the run), never to be called.
TEARDOWN_COMMANDS = ("k3s-uninstall.sh", "k3s-agent-uninstall.sh", "k3s-killall.sh")

STAND_INS = {
    "cloud-init": CLOUD_INIT,
    "systemctl": SYSTEMCTL,
    "dpkg-query": DPKG_QUERY,
    "apt-get": APT_GET,
    "curl": CURL,
    **dict.fromkeys(TEARDOWN_COMMANDS, ""),
}

VERSION = "v1.35.8+k3s1"
OLD_VERSION = "v1.34.5+k3s1"
INSTALLER_URL = "https://raw.githubusercontent.com/k3s-io/k3s/v1.35.8%2Bk3s1/install.sh"
HOST_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIE8sY2Fr3y0Q0pq6o2m9r9hX9sJ1Wl0a3b4c5d6e7f8g"
K3S_CONFIG = "disable:\n- traefik\ntls-san:\n- 192.168.4.21\nwrite-kubeconfig-mode: '0600'\n"
POLL_INTERVAL_SECONDS = 2

CLOUD_INIT_WAIT = ("cloud-init", "status", "--wait")
CLOUD_INIT_LONG = ("cloud-init", "status", "--long")
AGENT = "qemu-guest-agent"
AGENT_QUERY = ("dpkg-query", "-W", "-f=${Status}", AGENT)
APT_LOCK = ("-o", "DPkg::Lock::Timeout=600")
APT_UPDATE = ("apt-get", *APT_LOCK, "update", "-q")
APT_INSTALL = ("DEBIAN_FRONTEND=noninteractive", "apt-get", *APT_LOCK, "install", "-y", "-q", AGENT)
AGENT_IS_ENABLED = ("systemctl", "is-enabled", "--quiet", AGENT)
AGENT_IS_ACTIVE = ("systemctl", "is-active", "--quiet", AGENT)
AGENT_ENABLE = ("systemctl", "enable", AGENT)
AGENT_START = ("systemctl", "start", AGENT)
K3S_RESTART = ("systemctl", "restart", "k3s")
K3S_VERSION = ("k3s", "--version")
GET_NODES = ("k3s", "kubectl", "get", "nodes", "-o", "name", "--request-timeout=10s")
WAIT_READY = ("k3s", "kubectl", "wait", "--for=condition=Ready", "node", "--all")


@dataclass(frozen=True)
class Result:
    returncode: int
    stdout: str
    stderr: str
    calls: list[Call]


def write_executable(path: Path, text: str) -> None:
    path.write_text(text)
    path.chmod(0o755)


class Host:
    """A stand-in VM under one tmp_path: stand-in commands, their state, the scripts' files."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.bin = root / "bin"
        self.lib = root / "lib"
        self.state = root / "state"
        self.tmp = root / "tmp"
        self.log = root / "calls.log"
        self.host_key_file = root / "etc" / "ssh" / "ssh_host_ed25519_key.pub"
        self.k3s_config_file = root / "etc" / "rancher" / "k3s" / "config.yaml"
        self.kubeconfig_file = root / "etc" / "rancher" / "k3s" / "k3s.yaml"
        for directory in (self.bin, self.lib, self.state, self.tmp):
            directory.mkdir()
        for name, body in STAND_INS.items():
            write_executable(self.bin / name, PRELUDE + body)
        write_executable(self.lib / "k3s", PRELUDE + K3S)
        # The machine's own PATH finds bash and coreutils; a real k3s on it would make "k3s absent"
        # untestable (and must never be run), so directories holding one are left out.
        system_path = [
            directory
            for directory in os.environ.get("PATH", os.defpath).split(os.pathsep)
            if directory and not (Path(directory) / "k3s").exists()
        ]
        self.env = {
            "PATH": os.pathsep.join([str(self.bin), *system_path]),
            "LC_ALL": "C",
            "TMPDIR": str(self.tmp),
            "HOST_KEY_FILE": str(self.host_key_file),
            "K3S_CONFIG_FILE": str(self.k3s_config_file),
            "K3S_KUBECONFIG_FILE": str(self.kubeconfig_file),
            "STUB_LOG": str(self.log),
            "STUB_STATE": str(self.state),
            "STUB_BIN": str(self.bin),
            "STUB_LIB": str(self.lib),
        }

    def set(self, key: str, value: str | int = "") -> None:
        (self.state / key).write_text(str(value))

    def install_k3s(self, version: str) -> None:
        self.set("k3s-version", version)
        shutil.copy(self.lib / "k3s", self.bin / "k3s")

    def installed_k3s(self) -> str | None:
        return (self.state / "k3s-version").read_text() if (self.bin / "k3s").exists() else None

    def run(self, script: str, *args: str) -> Result:
        """`bash <script> args...` as root would run it on the VM; the calls are this run's only."""
        self.log.write_text("")
        process = subprocess.run(
            ["bash", str(SCRIPTS_DIR / script), *args],
            cwd=self.root,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        calls = [tuple(line.split(FIELD_SEPARATOR)) for line in self.log.read_text().splitlines()]
        assert not [call for call in calls if set(call) & set(TEARDOWN_COMMANDS)], calls
        return Result(process.returncode, process.stdout, process.stderr, calls)


@pytest.fixture
def host(tmp_path: Path) -> Host:
    return Host(tmp_path)


def code_lines(script: str) -> list[str]:
    """The script's lines without blank and comment lines."""
    lines = (line.strip() for line in (SCRIPTS_DIR / script).read_text().splitlines())
    return [line for line in lines if line and not line.startswith("#")]


# --- every script -------------------------------------------------------------------------------


def test_scripts_are_found() -> None:
    assert set(SCRIPTS) >= {
        "host_ready.sh",
        "guest_agent.sh",
        "k3s_config.sh",
        "k3s_install.sh",
        "node_ready.sh",
        "read_kubeconfig.sh",
        "operator_ready.sh",
    }


@pytest.mark.parametrize("script", SCRIPTS)
def test_script_is_bash_with_strict_mode_first(script: str) -> None:
    assert (SCRIPTS_DIR / script).read_text().startswith("#!/usr/bin/env bash\n")
    assert code_lines(script)[0] == "set -euo pipefail"


@pytest.mark.parametrize("script", SCRIPTS)
def test_script_passes_shellcheck(script: str) -> None:
    if shutil.which("shellcheck") is None:
        pytest.skip("shellcheck is not on PATH (.ci/run installs it)")
    result = subprocess.run(
        ["shellcheck", "--severity=style", str(SCRIPTS_DIR / script)], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("script", SCRIPTS)
def test_script_never_uninstalls(script: str) -> None:
    assert [line for line in code_lines(script) if re.search(r"uninstall|killall", line, re.IGNORECASE)] == []


# --- host_ready.sh ------------------------------------------------------------------------------


@pytest.mark.parametrize("cloud_init_rc", [0, 2], ids=["done", "done-with-recoverable-errors"])
def test_host_ready_prints_host_key_type_and_key(host: Host, cloud_init_rc: int) -> None:
    host.host_key_file.parent.mkdir(parents=True)
    host.host_key_file.write_text(f"{HOST_KEY} root@vm1\n")
    host.set("cloud-init-rc", cloud_init_rc)

    result = host.run("host_ready.sh")

    assert (result.returncode, result.stdout, result.stderr) == (0, f"{HOST_KEY}\n", "")
    assert result.calls == [CLOUD_INIT_WAIT]


def test_host_ready_fails_with_cloud_init_details_when_cloud_init_failed(host: Host) -> None:
    host.host_key_file.parent.mkdir(parents=True)
    host.host_key_file.write_text(f"{HOST_KEY} root@vm1\n")
    details = "status: error\nextended_status: error - done\nerrors:\n\t- package_update_upgrade_install failed\n"
    host.set("cloud-init-rc", 1)
    host.set("cloud-init-long", details)

    result = host.run("host_ready.sh")

    assert result.returncode == 1
    assert result.stdout == ""
    assert result.stderr == f"cloud-init did not finish cleanly (exit 1):\n{details}"
    assert result.calls == [CLOUD_INIT_WAIT, CLOUD_INIT_LONG]


# --- guest_agent.sh -----------------------------------------------------------------------------


def test_guest_agent_installs_and_starts_then_a_second_run_changes_nothing(host: Host) -> None:
    first = host.run("guest_agent.sh")

    assert (first.returncode, first.stdout) == (0, "qemu-guest-agent running\n"), first.stderr
    assert first.calls == [AGENT_QUERY, APT_UPDATE, APT_INSTALL, AGENT_IS_ENABLED, AGENT_IS_ACTIVE, AGENT_START]

    second = host.run("guest_agent.sh")

    assert (second.returncode, second.stdout) == (0, "qemu-guest-agent running\n"), second.stderr
    assert second.calls == [AGENT_QUERY, AGENT_IS_ENABLED, AGENT_IS_ACTIVE]


@pytest.mark.parametrize(
    ("unit_state", "expected"),
    [
        (("enabled", "active"), [AGENT_QUERY, AGENT_IS_ENABLED, AGENT_IS_ACTIVE]),
        (("enabled",), [AGENT_QUERY, AGENT_IS_ENABLED, AGENT_IS_ACTIVE, AGENT_START]),
        (("active",), [AGENT_QUERY, AGENT_IS_ENABLED, AGENT_ENABLE, AGENT_IS_ACTIVE]),
    ],
    ids=["active", "inactive", "not-enabled"],
)
def test_guest_agent_installed_is_never_reinstalled_and_started_only_when_inactive(
    host: Host, unit_state: tuple[str, ...], expected: list[Call]
) -> None:
    host.set(f"{AGENT}.installed")
    for flag in unit_state:
        host.set(f"{AGENT}.{flag}")

    result = host.run("guest_agent.sh")

    assert (result.returncode, result.stdout) == (0, "qemu-guest-agent running\n"), result.stderr
    assert result.calls == expected


# --- k3s_config.sh ------------------------------------------------------------------------------


@pytest.mark.parametrize("previous", [None, "disable:\n- traefik\n"], ids=["no-file", "other-content"])
@pytest.mark.parametrize("k3s_installed", [True, False], ids=["k3s-installed", "k3s-absent"])
def test_k3s_config_writes_changed_content_and_restarts_only_an_installed_k3s(
    host: Host, previous: str | None, k3s_installed: bool
) -> None:
    config_dir = host.k3s_config_file.parent
    if previous is not None:
        config_dir.mkdir(parents=True)
        host.k3s_config_file.write_text(previous)
        host.k3s_config_file.chmod(0o644)
    if k3s_installed:
        host.install_k3s(VERSION)
    config_b64 = base64.b64encode(K3S_CONFIG.encode()).decode()

    first = host.run("k3s_config.sh", config_b64)

    assert first.returncode == 0, first.stderr
    assert host.k3s_config_file.read_text() == K3S_CONFIG
    assert stat.S_IMODE(host.k3s_config_file.stat().st_mode) == 0o600
    assert stat.S_IMODE(config_dir.stat().st_mode) == 0o755
    assert sorted(path.name for path in config_dir.iterdir()) == ["config.yaml"]  # no staged file left
    if k3s_installed:
        assert (first.calls, first.stdout) == ([K3S_RESTART], "k3s config changed; k3s restarted\n")
    else:
        assert (first.calls, first.stdout) == ([], "k3s config written\n")

    written = host.k3s_config_file.stat()
    second = host.run("k3s_config.sh", config_b64)

    assert (second.returncode, second.stdout, second.calls) == (0, "k3s config unchanged\n", [])
    unchanged = host.k3s_config_file.stat()
    assert (unchanged.st_ino, unchanged.st_mtime_ns) == (written.st_ino, written.st_mtime_ns)
    assert host.k3s_config_file.read_text() == K3S_CONFIG


# --- k3s_install.sh -----------------------------------------------------------------------------


def fetch(installer: str) -> Call:
    """curl downloading the installer at the pinned version's tag into `installer`."""
    return ("curl", "-sSfL", "--retry", "5", "-o", installer, INSTALLER_URL)


def assert_installed_by_pinned_installer(host: Host, result: Result, before: list[Call]) -> None:
    """`before`, then curl fetched the installer at the version's tag into a temporary file, which
    ran with INSTALL_K3S_VERSION set to that version and was removed afterwards."""
    assert result.returncode == 0, result.stderr
    assert len(result.calls) == len(before) + 2, result.calls
    installer = result.calls[len(before)][-2]
    assert result.calls == [
        *before,
        fetch(installer),
        (f"INSTALL_K3S_VERSION={VERSION}", "install.sh", installer),
    ]
    assert Path(installer).parent == host.tmp
    assert list(host.tmp.iterdir()) == []
    assert host.installed_k3s() == VERSION


def test_k3s_install_installs_the_pinned_version_then_a_second_run_does_nothing(host: Host) -> None:
    first = host.run("k3s_install.sh", VERSION)

    assert_installed_by_pinned_installer(host, first, before=[])
    assert first.stdout == f"k3s {VERSION} installed (previously: none)\n"

    second = host.run("k3s_install.sh", VERSION)

    assert (second.returncode, second.stdout) == (0, f"k3s {VERSION} already installed\n"), second.stderr
    assert second.calls == [K3S_VERSION]


def test_k3s_install_upgrades_another_installed_version(host: Host) -> None:
    host.install_k3s(OLD_VERSION)

    result = host.run("k3s_install.sh", VERSION)

    assert_installed_by_pinned_installer(host, result, before=[K3S_VERSION])
    assert result.stdout == f"k3s {VERSION} installed (previously: {OLD_VERSION})\n"


def test_k3s_install_skips_the_same_installed_version(host: Host) -> None:
    host.install_k3s(VERSION)

    result = host.run("k3s_install.sh", VERSION)

    assert (result.returncode, result.stdout) == (0, f"k3s {VERSION} already installed\n"), result.stderr
    assert result.calls == [K3S_VERSION]
    assert host.installed_k3s() == VERSION


def test_k3s_install_stops_when_the_download_fails(host: Host) -> None:
    host.set("curl-fails")

    result = host.run("k3s_install.sh", VERSION)

    assert result.returncode == 22
    assert "The requested URL returned error: 404" in result.stderr
    assert result.stdout == ""
    assert len(result.calls) == 1, result.calls
    assert result.calls == [fetch(result.calls[0][-2])]  # and never the installer
    assert host.installed_k3s() is None
    assert list(host.tmp.iterdir()) == []


# --- node_ready.sh ------------------------------------------------------------------------------


def wait_timeout_seconds(call: Call) -> int:
    match = re.fullmatch(r"--timeout=(\d+)s", call[-1])
    assert match is not None, call
    return int(match[1])


@pytest.mark.parametrize("node_from_poll", [1, 2], ids=["node-registered", "node-registers-late"])
def test_node_ready_waits_for_the_node_within_the_bound(host: Host, node_from_poll: int) -> None:
    host.install_k3s(VERSION)
    host.set("k3s-nodes", "node/vm1\n")
    host.set("k3s-node-from-poll", node_from_poll)
    bound = 60

    result = host.run("node_ready.sh", str(bound))

    assert (result.returncode, result.stdout) == (0, "node/vm1 condition met\n"), result.stderr
    assert result.calls[:-1] == [GET_NODES] * node_from_poll
    assert result.calls[-1][:-1] == WAIT_READY
    # What is left of the bound after the polls (each followed by one sleep), within a second.
    remaining = bound - POLL_INTERVAL_SECONDS * (node_from_poll - 1)
    assert remaining - 2 <= wait_timeout_seconds(result.calls[-1]) <= remaining


def test_node_ready_fails_when_the_node_does_not_become_ready(host: Host) -> None:
    host.install_k3s(VERSION)
    host.set("k3s-nodes", "node/vm1\n")
    host.set("k3s-wait-rc", 1)

    result = host.run("node_ready.sh", "60")

    assert result.returncode == 1
    assert result.stderr == "error: timed out waiting for the condition on nodes/vm1\n"
    assert result.calls[:-1] == [GET_NODES]
    assert result.calls[-1][:-1] == WAIT_READY


def test_node_ready_fails_within_the_bound_when_no_node_registers(host: Host) -> None:
    host.install_k3s(VERSION)
    bound = 2

    started = time.monotonic()
    result = host.run("node_ready.sh", str(bound))
    elapsed = time.monotonic() - started

    assert result.returncode == 1
    assert result.stderr == f"no node registered within {bound}s\n"
    assert len(result.calls) >= 2
    assert set(result.calls) == {GET_NODES}
    # The bound is counted in whole seconds and checked between polls.
    assert bound - 1 <= elapsed < bound + POLL_INTERVAL_SECONDS


# --- read_kubeconfig.sh -------------------------------------------------------------------------


def test_read_kubeconfig_prints_the_file_verbatim(host: Host) -> None:
    kubeconfig = "apiVersion: v1\nclusters:\n- cluster:\n    server: https://127.0.0.1:6443\n  name: default\n\n"
    host.kubeconfig_file.parent.mkdir(parents=True)
    host.kubeconfig_file.write_text(kubeconfig)

    result = host.run("read_kubeconfig.sh")

    assert (result.returncode, result.stdout, result.stderr, result.calls) == (0, kubeconfig, "", [])


def test_read_kubeconfig_fails_when_the_file_is_missing(host: Host) -> None:
    result = host.run("read_kubeconfig.sh")

    assert result.returncode != 0
    assert result.stdout == ""
    assert str(host.kubeconfig_file) in result.stderr


# --- operator_ready.sh --------------------------------------------------------------------------

OPERATOR_CRDS = [
    f"crd/{kind}providers.operator.cluster.x-k8s.io"
    for kind in ("core", "bootstrap", "controlplane", "infrastructure", "ipam")
]
WAIT_ESTABLISHED = ("k3s", "kubectl", "wait", "--for=condition=Established")
WAIT_OPERATOR = ("k3s", "kubectl", "-n", "capi-operator-system", "wait", "--for=condition=Available")
DRY_RUN = ("k3s", "kubectl", "create", "--dry-run=server", "-o", "name", "-f", "-")


def assert_operator_waits(calls: list[Call], bound: int) -> None:
    """Each CRD Established, then the operator's deployment Available, all within the bound."""
    for call, crd in zip(calls[:5], OPERATOR_CRDS, strict=True):
        assert call[:4] == WAIT_ESTABLISHED
        assert call[5] == crd
        assert 1 <= int(call[4].removeprefix("--timeout=").removesuffix("s")) <= bound
    assert calls[5][:6] == WAIT_OPERATOR
    assert calls[5][7:] == ("deployment", "--all")


@pytest.mark.parametrize("answer", ["created", "denied"], ids=["accepted", "denied-is-an-answer-too"])
def test_operator_ready_when_crds_operator_and_webhook_answer(host: Host, answer: str) -> None:
    host.install_k3s(VERSION)
    host.set("k3s-webhook-answer", answer)

    result = host.run("operator_ready.sh", "60")

    assert (result.returncode, result.stdout.splitlines()[-1]) == (0, "cluster-api-operator ready"), result.stderr
    assert_operator_waits(result.calls, 60)
    assert result.calls[6:] == [DRY_RUN]
    sent = (host.state / "k3s-dry-run-input").read_text()
    assert '"kind": "CoreProvider"' in sent
    assert '"namespace": "capi-operator-system"' in sent


def test_operator_ready_polls_until_the_webhook_can_be_called(host: Host) -> None:
    host.install_k3s(VERSION)
    host.set("k3s-webhook-from-poll", 2)

    result = host.run("operator_ready.sh", "60")

    assert result.returncode == 0, result.stderr
    assert result.calls[6:] == [DRY_RUN, DRY_RUN]


def test_operator_ready_fails_within_the_bound_when_the_webhook_never_answers(host: Host) -> None:
    host.install_k3s(VERSION)
    host.set("k3s-webhook-from-poll", 1000)

    result = host.run("operator_ready.sh", "2")

    assert result.returncode == 1
    assert result.stderr.startswith("the operator's webhook did not answer within 2s: ")
    assert "failed calling webhook" in result.stderr
    assert set(result.calls[6:]) == {DRY_RUN}


def test_operator_ready_stops_when_a_crd_is_not_established(host: Host) -> None:
    host.install_k3s(VERSION)
    host.set("k3s-wait-rc", 1)

    result = host.run("operator_ready.sh", "60")

    assert result.returncode == 1
    assert len(result.calls) == 1
    assert result.calls[0][:4] == WAIT_ESTABLISHED
