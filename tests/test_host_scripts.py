"""The host scripts (components/scripts/*.sh) run for real under bash, against stand-in commands.

Every command a script calls that would touch the machine (cloud-init, systemctl, apt-get,
dpkg-query, curl, k3s and the k3s installer curl fetches) is a small bash stand-in in
tmp_path/bin, first on PATH. Each one appends its invocation to a log (the variables the script
sets for that one command, as NAME=value, then its name and arguments) and keeps what it changed
(package installed, unit active, k3s version) in tmp_path/state, so that a second run sees what
the first one did. bash, sh and coreutils are the real ones.

python3 is real too, not a stand-in: the scripts use it to read YAML, as the VM's python3 does
with python3-yaml (a dependency of cloud-init on Ubuntu). The machine's own python3 may lack
PyYAML, so tmp_path/bin/python3 is a shim that execs the interpreter running the tests (the
project's virtualenv, which has PyYAML). It is not logged: it changes nothing on the machine.
"""

from __future__ import annotations

import base64
import os
import re
import shlex
import shutil
import stat
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

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

# A start keeps its time as systemd shows ExecMainStartTimestamp (state UNIT-started).
SYSTEMCTL = r"""
unit="${!#}"
case "$*" in
  "is-enabled --quiet $unit") [ -e "$STUB_STATE/$unit.enabled" ] || exit 1 ;;
  "is-active --quiet $unit") [ -e "$STUB_STATE/$unit.active" ] || exit 3 ;;
  "enable $unit") touch "$STUB_STATE/$unit.enabled" ;;
  "start $unit" | "restart $unit")
    touch "$STUB_STATE/$unit.active"
    date -u '+%a %Y-%m-%d %H:%M:%S UTC' >"$STUB_STATE/$unit-started"
    ;;
  "show k3s -p ExecMainStartTimestamp --value") state k3s-started "" ;;
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
# (from lib/, into bin/) reporting INSTALL_K3S_VERSION, then (re)starts k3s, as the real one does
# for a new binary. It runs under the real sh.
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
date -u '+%a %Y-%m-%d %H:%M:%S UTC' >"$STUB_STATE/k3s-started"
INSTALLER
"""

# Not on PATH until installed. `get nodes` prints the k3s-nodes state from poll k3s-node-from-poll,
# k3s-nodes-before (what the Node objects said before that) until then.
# A HelmChart NAME in kube-system exists while state helmchart.NAME does; helmchart.NAME.finalizer
# is the helm-controller's finalizer, .unmanaged the annotation that makes the controller leave
# the chart alone, .terminating a delete that a finalizer holds up. A delete the finalizer holds
# up on a chart not annotated leaves helm-delete.NAME: the controller would uninstall the release.
# Each HelmChart call also keeps, in seen.VERB.NAME, the manifest files k3s would see right then.
K3S = r"""
verb="${4:-}"
name="${6:-}"
chart="$STUB_STATE/helmchart.$name"
seen() {
  if [ -d "$K3S_MANIFESTS_DIR" ]; then find "$K3S_MANIFESTS_DIR" -type f -printf '%P\n' | sort; fi \
    >"$STUB_STATE/seen.$verb.$name"
}
must_exist() {
  if [ ! -e "$chart" ]; then
    echo "Error from server (NotFound): helmcharts.helm.cattle.io \"$name\" not found" >&2
    exit 1
  fi
}
case "$*" in
  "kubectl -n kube-system get helmchart $name --ignore-not-found -o name")
    seen
    if [ -e "$chart" ]; then echo "helmchart.helm.cattle.io/$name"; fi
    ;;
  "kubectl -n kube-system annotate helmchart $name helmcharts.helm.cattle.io/unmanaged=true --overwrite")
    seen
    must_exist
    touch "$chart.unmanaged"
    echo "helmchart.helm.cattle.io/$name annotated"
    ;;
  "kubectl -n kube-system patch helmchart $name --type=merge -p {\"metadata\":{\"finalizers\":null}}")
    seen
    must_exist
    rm -f "$chart.finalizer"
    # A chart already being deleted goes as soon as nothing holds it any more.
    if [ -e "$chart.terminating" ]; then rm -f "$chart" "$chart".*; fi
    echo "helmchart.helm.cattle.io/$name patched"
    ;;
  "kubectl -n kube-system delete helmchart $name --ignore-not-found --timeout=60s")
    seen
    [ -e "$chart" ] || exit 0
    if [ -e "$chart.finalizer" ]; then
      touch "$chart.terminating"
      [ -e "$chart.unmanaged" ] || touch "$STUB_STATE/helm-delete.$name"
      echo "error: timed out waiting for the condition on helmcharts/$name" >&2
      exit 1
    fi
    rm -f "$chart" "$chart".*
    echo "helmchart.helm.cattle.io \"$name\" deleted"
    ;;
  --version) printf 'k3s version %s (1a2b3c4d)\ngo version go1.23.6\n' "$(state k3s-version '')" ;;
  "kubectl get nodes --request-timeout=10s -o jsonpath=$NODE_COLUMNS")
    polls=$(($(state k3s-node-polls 0) + 1))
    printf '%s' "$polls" >"$STUB_STATE/k3s-node-polls"
    if [ "$polls" -ge "$(state k3s-node-from-poll 1)" ]; then state k3s-nodes ""; else state k3s-nodes-before ""; fi
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
# How systemd shows a timestamp such as ExecMainStartTimestamp (in UTC here).
SYSTEMD_TIME = "%a %Y-%m-%d %H:%M:%S UTC"

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
# What node_ready.sh asks of each node: name, kubelet version, Ready and its last heartbeat.
NODE_COLUMNS = (
    '{range .items[*]}{.metadata.name}{" "}{.status.nodeInfo.kubeletVersion}{" "}'
    '{.status.conditions[?(@.type=="Ready")].status}{" "}'
    '{.status.conditions[?(@.type=="Ready")].lastHeartbeatTime}{"\\n"}{end}'
)
GET_NODES = ("k3s", "kubectl", "get", "nodes", "--request-timeout=10s", "-o", f"jsonpath={NODE_COLUMNS}")
K3S_STARTED = ("systemctl", "show", "k3s", "-p", "ExecMainStartTimestamp", "--value")


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
        self.cloud_cfg_drop_in = root / "etc" / "cloud" / "cloud.cfg.d" / "99-lab-mgmt-keep-host-keys.cfg"
        self.kubeconfig_file = root / "etc" / "rancher" / "k3s" / "k3s.yaml"
        self.manifests_dir = root / "var" / "lib" / "rancher" / "k3s" / "server" / "manifests"
        self.handed_over_dir = self.manifests_dir.with_name("manifests-handed-over")
        for directory in (self.bin, self.lib, self.state, self.tmp):
            directory.mkdir()
        for name, body in STAND_INS.items():
            write_executable(self.bin / name, PRELUDE + body)
        write_executable(self.lib / "k3s", PRELUDE + K3S)
        self.use_python()
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
            "CLOUD_CFG_DROP_IN": str(self.cloud_cfg_drop_in),
            "K3S_KUBECONFIG_FILE": str(self.kubeconfig_file),
            "K3S_MANIFESTS_DIR": str(self.manifests_dir),
            "STUB_LOG": str(self.log),
            "STUB_STATE": str(self.state),
            "STUB_BIN": str(self.bin),
            "STUB_LIB": str(self.lib),
            "NODE_COLUMNS": NODE_COLUMNS,
        }

    def set(self, key: str, value: str | int = "") -> None:
        (self.state / key).write_text(str(value))

    def use_python(self, *options: str) -> None:
        """python3 on PATH: the tests' own interpreter, run with `options`."""
        command = shlex.join([sys.executable, *options])
        write_executable(self.bin / "python3", f'#!/bin/sh\nexec {command} "$@"\n')

    def add_helmchart(self, name: str, *, unmanaged: bool = False, terminating: bool = False) -> None:
        """A HelmChart in kube-system as the helm-controller leaves it: with its finalizer."""
        self.set(f"helmchart.{name}")
        self.set(f"helmchart.{name}.finalizer")
        if unmanaged:
            self.set(f"helmchart.{name}.unmanaged")
        if terminating:
            self.set(f"helmchart.{name}.terminating")

    def helmcharts(self) -> frozenset[str]:
        """The HelmCharts that exist in kube-system."""
        names = (path.name.removeprefix("helmchart.") for path in self.state.glob("helmchart.*"))
        return frozenset(name for name in names if "." not in name)

    def helm_deletes(self) -> list[str]:
        """The charts whose release the helm-controller would have uninstalled."""
        return sorted(path.name for path in self.state.glob("helm-delete.*"))

    def seen(self, verb: str, name: str) -> list[str]:
        """The manifest files k3s would have seen at the HelmChart call `verb` on `name`."""
        return (self.state / f"seen.{verb}.{name}").read_text().splitlines()

    def install_k3s(self, version: str, *, started: str | None = None) -> None:
        """k3s at `version`, started afterwards (or at `started`, as systemd shows the time)."""
        self.set("k3s-version", version)
        shutil.copy(self.lib / "k3s", self.bin / "k3s")
        self.set("k3s-started", time.strftime(SYSTEMD_TIME, time.gmtime()) if started is None else started)

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
        "keep_host_keys.sh",
        "guest_agent.sh",
        "k3s_config.sh",
        "k3s_install.sh",
        "node_ready.sh",
        "read_kubeconfig.sh",
        "helmchart_handover.sh",
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


# --- keep_host_keys.sh --------------------------------------------------------------------------

KEEP_HOST_KEYS_WRITTEN = "SSH host keys kept across a new cloud-init instance ({} written)\n"
KEEP_HOST_KEYS_UNCHANGED = "SSH host keys kept across a new cloud-init instance (unchanged)\n"


def test_keep_host_keys_turns_ssh_deletekeys_off_then_a_second_run_changes_nothing(host: Host) -> None:
    first = host.run("keep_host_keys.sh")

    assert (first.returncode, first.stdout, first.stderr) == (
        0,
        KEEP_HOST_KEYS_WRITTEN.format(host.cloud_cfg_drop_in),
        "",
    )
    # cloud-init merges every *.cfg of cloud.cfg.d into its system config as YAML.
    assert yaml.safe_load(host.cloud_cfg_drop_in.read_text()) == {"ssh_deletekeys": False}
    assert stat.S_IMODE(host.cloud_cfg_drop_in.stat().st_mode) == 0o644
    assert [path.name for path in host.cloud_cfg_drop_in.parent.iterdir()] == [host.cloud_cfg_drop_in.name]
    assert first.calls == []
    written = host.cloud_cfg_drop_in.stat()

    second = host.run("keep_host_keys.sh")

    assert (second.returncode, second.stdout, second.stderr) == (0, KEEP_HOST_KEYS_UNCHANGED, "")
    after = host.cloud_cfg_drop_in.stat()
    assert (after.st_ino, after.st_mtime_ns) == (written.st_ino, written.st_mtime_ns)


@pytest.mark.parametrize("existing", ["ssh_deletekeys: true\n", ""], ids=["deletekeys-on", "empty"])
def test_keep_host_keys_rewrites_a_drop_in_that_says_otherwise(host: Host, existing: str) -> None:
    host.cloud_cfg_drop_in.parent.mkdir(parents=True)
    host.cloud_cfg_drop_in.write_text(existing)

    result = host.run("keep_host_keys.sh")

    assert (result.returncode, result.stdout) == (0, KEEP_HOST_KEYS_WRITTEN.format(host.cloud_cfg_drop_in))
    assert yaml.safe_load(host.cloud_cfg_drop_in.read_text()) == {"ssh_deletekeys": False}


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

    # k3s started after the file was written: nothing to finish.
    asked = [K3S_STARTED] if k3s_installed else []
    assert (second.returncode, second.stdout, second.calls) == (0, "k3s config unchanged\n", asked)
    unchanged = host.k3s_config_file.stat()
    assert (unchanged.st_ino, unchanged.st_mtime_ns) == (written.st_ino, written.st_mtime_ns)
    assert host.k3s_config_file.read_text() == K3S_CONFIG


# The lab's config.yaml came from an Ansible template: the same settings as K3S_CONFIG, written
# another way. None of these is a change.
SAME_K3S_CONFIG = {
    "ansible-header-indented-double-quoted": (
        '# Ansible managed\n\ndisable:\n  - traefik\ntls-san:\n  - 192.168.4.21\nwrite-kubeconfig-mode: "0600"\n'
    ),
    "flow-lists-other-key-order": 'write-kubeconfig-mode: "0600"\ntls-san: [192.168.4.21]\ndisable: [traefik]\n',
    "document-markers-quoted-keys-comments-no-final-newline": (
        "---\n# {{ ansible_managed }}\n'disable': ['traefik']  # the lab brings its own ingress\n"
        '"tls-san": ["192.168.4.21"]\nwrite-kubeconfig-mode:   \'0600\'\n...'
    ),
    "flow-mapping-crlf": "{disable: [traefik],\r\n tls-san: [192.168.4.21],\r\n write-kubeconfig-mode: '0600'}\r\n",
}

# Settings that mean something else, and files that are no YAML (or not one document of it).
OTHER_K3S_CONFIG = {
    "another-tls-san": 'disable: [traefik]\ntls-san: [192.168.4.21, lab-mgmt.lan]\nwrite-kubeconfig-mode: "0600"\n',
    "unquoted-0600-is-a-number": "disable: [traefik]\ntls-san: [192.168.4.21]\nwrite-kubeconfig-mode: 0600\n",
    "one-more-setting": K3S_CONFIG + "disable-network-policy: true\n",
    "traefik-not-disabled": "tls-san: [192.168.4.21]\nwrite-kubeconfig-mode: '0600'\n",
}
GARBAGE_K3S_CONFIG = {
    "unclosed-flow-list": b"disable: [traefik\ntls-san: 192.168.4.21\n",
    "unrendered-template": b"tls-san: {{ k3s_tls_san }}\n",
    "two-documents": (K3S_CONFIG + "---\n" + K3S_CONFIG).encode(),
    "binary": b"\x00\xff\xfe\x00k3s\x00",
    "empty": b"",
}


def config_b64(text: str = K3S_CONFIG) -> str:
    return base64.b64encode(text.encode()).decode()


def write_existing_k3s_config(host: Host, content: bytes) -> os.stat_result:
    """The file as an earlier tool left it (mode 0644) an hour ago, and its stat."""
    host.k3s_config_file.parent.mkdir(parents=True)
    host.k3s_config_file.write_bytes(content)
    host.k3s_config_file.chmod(0o644)
    an_hour_ago = time.time() - 3600
    os.utime(host.k3s_config_file, (an_hour_ago, an_hour_ago))
    return host.k3s_config_file.stat()


@pytest.mark.parametrize("existing", SAME_K3S_CONFIG.values(), ids=SAME_K3S_CONFIG.keys())
def test_k3s_config_leaves_the_same_settings_written_another_way_alone(host: Host, existing: str) -> None:
    host.install_k3s(VERSION)
    before = write_existing_k3s_config(host, existing.encode())

    result = host.run("k3s_config.sh", config_b64())

    assert (result.returncode, result.stdout, result.stderr) == (0, "k3s config unchanged\n", "")
    assert result.calls == [K3S_STARTED]  # no restart
    assert host.k3s_config_file.read_bytes() == existing.encode()
    after = host.k3s_config_file.stat()
    assert (after.st_ino, after.st_mtime_ns, after.st_mode) == (before.st_ino, before.st_mtime_ns, before.st_mode)


@pytest.mark.parametrize(
    "existing",
    [text.encode() for text in OTHER_K3S_CONFIG.values()] + list(GARBAGE_K3S_CONFIG.values()),
    ids=[*OTHER_K3S_CONFIG, *GARBAGE_K3S_CONFIG],
)
def test_k3s_config_rewrites_other_settings_and_garbage_and_restarts_k3s(host: Host, existing: bytes) -> None:
    host.install_k3s(VERSION)
    before = write_existing_k3s_config(host, existing)

    result = host.run("k3s_config.sh", config_b64())

    assert (result.returncode, result.stdout) == (0, "k3s config changed; k3s restarted\n"), result.stderr
    assert result.calls == [K3S_RESTART]
    assert host.k3s_config_file.read_text() == K3S_CONFIG
    assert stat.S_IMODE(host.k3s_config_file.stat().st_mode) == 0o600
    assert host.k3s_config_file.stat().st_ino != before.st_ino  # replaced by a rename, not rewritten in place
    assert sorted(path.name for path in host.k3s_config_file.parent.iterdir()) == ["config.yaml"]


def test_k3s_config_when_adopting_reports_a_difference_and_changes_nothing(host: Host) -> None:
    host.install_k3s(VERSION)
    existing = OTHER_K3S_CONFIG["another-tls-san"].encode()
    before = write_existing_k3s_config(host, existing)

    result = host.run("k3s_config.sh", config_b64(), "adopt")

    assert result.returncode == 3
    assert "adoption changes nothing on the host" in result.stderr
    assert (result.stdout, result.calls) == ("", [])  # no restart
    assert host.k3s_config_file.read_bytes() == existing
    assert host.k3s_config_file.stat().st_mtime_ns == before.st_mtime_ns


def test_k3s_config_when_adopting_leaves_the_same_settings_alone(host: Host) -> None:
    host.install_k3s(VERSION)
    existing = next(iter(SAME_K3S_CONFIG.values())).encode()
    write_existing_k3s_config(host, existing)

    result = host.run("k3s_config.sh", config_b64(), "adopt")

    assert (result.returncode, result.stdout, result.calls) == (0, "k3s config unchanged\n", [])
    assert host.k3s_config_file.read_bytes() == existing


def an_hour_ago() -> str:
    """An hour ago, as systemd shows a timestamp."""
    return time.strftime(SYSTEMD_TIME, time.gmtime(time.time() - 3600))


@pytest.mark.parametrize("started", [an_hour_ago(), ""], ids=["before-the-write", "not-running"])
def test_k3s_config_finishes_a_restart_that_a_dead_run_left_undone(host: Host, started: str) -> None:
    """The run wrote the file, then died before `systemctl restart k3s`: the retry finds the
    file as wanted, and restarts k3s because it has not started since."""
    host.install_k3s(VERSION, started=started)
    host.k3s_config_file.parent.mkdir(parents=True)
    host.k3s_config_file.write_text(K3S_CONFIG)
    written = host.k3s_config_file.stat()

    retry = host.run("k3s_config.sh", config_b64())

    assert (retry.returncode, retry.stdout) == (
        0,
        "k3s config unchanged, but written after k3s last started; k3s restarted\n",
    )
    assert retry.calls == [K3S_STARTED, K3S_RESTART]
    after = host.k3s_config_file.stat()
    assert (after.st_ino, after.st_mtime_ns) == (written.st_ino, written.st_mtime_ns)

    again = host.run("k3s_config.sh", config_b64())

    assert (again.returncode, again.stdout, again.calls) == (0, "k3s config unchanged\n", [K3S_STARTED])


def test_k3s_config_when_adopting_restarts_nothing_even_after_a_late_write(host: Host) -> None:
    host.install_k3s(VERSION, started=an_hour_ago())
    host.k3s_config_file.parent.mkdir(parents=True)
    host.k3s_config_file.write_text(K3S_CONFIG)

    result = host.run("k3s_config.sh", config_b64(), "adopt")

    assert (result.returncode, result.stdout, result.calls) == (0, "k3s config unchanged\n", [])


@pytest.mark.parametrize("script", ["k3s_config.sh", "k3s_install.sh"])
def test_an_unknown_mode_is_refused_before_anything_runs(host: Host, script: str) -> None:
    first = config_b64() if script == "k3s_config.sh" else VERSION
    result = host.run(script, first, "addopt")
    assert (result.returncode, result.calls) == (2, [])
    assert "unknown mode addopt" in result.stderr


def test_k3s_config_stops_without_touching_anything_when_python3_has_no_yaml(host: Host) -> None:
    host.install_k3s(VERSION)
    existing = OTHER_K3S_CONFIG["another-tls-san"].encode()
    write_existing_k3s_config(host, existing)
    host.use_python("-S")  # no site-packages: no PyYAML

    result = host.run("k3s_config.sh", config_b64())

    assert result.returncode != 0
    assert "No module named 'yaml'" in result.stderr
    assert (result.stdout, result.calls) == ("", [])
    assert host.k3s_config_file.read_bytes() == existing


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
    assert second.calls == [K3S_VERSION, K3S_STARTED]


def test_k3s_install_upgrades_another_installed_version(host: Host) -> None:
    host.install_k3s(OLD_VERSION)

    result = host.run("k3s_install.sh", VERSION)

    assert_installed_by_pinned_installer(host, result, before=[K3S_VERSION])
    assert result.stdout == f"k3s {VERSION} installed (previously: {OLD_VERSION})\n"


def test_k3s_install_skips_the_same_installed_version(host: Host) -> None:
    host.install_k3s(VERSION)

    result = host.run("k3s_install.sh", VERSION)

    assert (result.returncode, result.stdout) == (0, f"k3s {VERSION} already installed\n"), result.stderr
    assert result.calls == [K3S_VERSION, K3S_STARTED]
    assert host.installed_k3s() == VERSION


@pytest.mark.parametrize("started", [an_hour_ago(), ""], ids=["before-the-move", "not-running"])
def test_k3s_install_finishes_a_restart_that_a_dead_run_left_undone(host: Host, started: str) -> None:
    """The installer moved the new binary into place, then the run died before k3s restarted:
    the retry finds the version installed, and restarts k3s because it has not started since."""
    host.install_k3s(VERSION, started=started)

    retry = host.run("k3s_install.sh", VERSION)

    assert (retry.returncode, retry.stdout) == (
        0,
        f"k3s {VERSION} already installed, but after k3s last started; k3s restarted\n",
    )
    assert retry.calls == [K3S_VERSION, K3S_STARTED, K3S_RESTART]

    again = host.run("k3s_install.sh", VERSION)

    assert (again.returncode, again.stdout) == (0, f"k3s {VERSION} already installed\n")
    assert again.calls == [K3S_VERSION, K3S_STARTED]


def test_k3s_install_when_adopting_restarts_nothing_even_after_a_late_install(host: Host) -> None:
    host.install_k3s(VERSION, started=an_hour_ago())

    result = host.run("k3s_install.sh", VERSION, "adopt")

    assert (result.returncode, result.stdout, result.calls) == (0, f"k3s {VERSION} already installed\n", [K3S_VERSION])


def test_k3s_install_when_adopting_reports_another_version_and_installs_nothing(host: Host) -> None:
    host.install_k3s(OLD_VERSION)

    result = host.run("k3s_install.sh", VERSION, "adopt")

    assert result.returncode == 3
    assert f"k3s {OLD_VERSION} is installed and k3sVersion is {VERSION}" in result.stderr
    assert result.calls == [K3S_VERSION]  # asked, nothing fetched or run
    assert host.installed_k3s() == OLD_VERSION


def test_k3s_install_when_adopting_leaves_the_same_version_alone(host: Host) -> None:
    host.install_k3s(VERSION)

    result = host.run("k3s_install.sh", VERSION, "adopt")

    assert (result.returncode, result.stdout, result.calls) == (0, f"k3s {VERSION} already installed\n", [K3S_VERSION])


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


STARTED = "Sat 2026-09-26 10:00:00 UTC"
FRESH = f"vm1 {VERSION} True 2026-09-26T10:00:07Z\n"
NODES_BEFORE = {
    # The Node as the k3s before the restart left it: Ready, heartbeat from before the start.
    "stale-ready": f"vm1 {VERSION} True 2026-09-26T09:59:52Z\n",
    # After an upgrade, the old kubelet's last status: the old version, still Ready.
    "old-version": f"vm1 {OLD_VERSION} True 2026-09-26T10:00:07Z\n",
    "not-ready": f"vm1 {VERSION} False 2026-09-26T10:00:05Z\n",
    "not-registered": "",
}


def test_node_ready_passes_on_a_fresh_heartbeat_of_the_pinned_version(host: Host) -> None:
    host.install_k3s(VERSION)
    host.set("k3s-started", STARTED)
    host.set("k3s-nodes", FRESH)

    result = host.run("node_ready.sh", "60", VERSION)

    assert (result.returncode, result.stdout) == (0, f"every node Ready on k3s {VERSION}\n"), result.stderr
    assert result.calls == [K3S_STARTED, GET_NODES]


@pytest.mark.parametrize("before", NODES_BEFORE.values(), ids=NODES_BEFORE.keys())
def test_node_ready_waits_past_what_the_node_said_before_k3s_started(host: Host, before: str) -> None:
    """A stale Ready (from before the restart, or of the version before an upgrade) is no answer."""
    host.install_k3s(VERSION)
    host.set("k3s-started", STARTED)
    host.set("k3s-nodes-before", before)
    host.set("k3s-nodes", FRESH)
    host.set("k3s-node-from-poll", 2)

    result = host.run("node_ready.sh", "60", VERSION)

    assert result.returncode == 0, result.stderr
    assert result.calls == [K3S_STARTED, GET_NODES, GET_NODES]


@pytest.mark.parametrize(
    ("nodes", "why"),
    [
        (NODES_BEFORE["stale-ready"], "node vm1 is Ready only as of 2026-09-26T09:59:52Z, before k3s started at"),
        (NODES_BEFORE["old-version"], f"node vm1 runs {OLD_VERSION}, not {VERSION}"),
        (NODES_BEFORE["not-ready"], "node vm1 is not Ready (False)"),
        ("", "no node registered"),
    ],
    ids=["stale-ready", "old-version", "not-ready", "not-registered"],
)
def test_node_ready_fails_within_the_bound_naming_why(host: Host, nodes: str, why: str) -> None:
    host.install_k3s(VERSION)
    host.set("k3s-started", STARTED)
    host.set("k3s-nodes", nodes)
    bound = 2

    started = time.monotonic()
    result = host.run("node_ready.sh", str(bound), VERSION)
    elapsed = time.monotonic() - started

    assert result.returncode == 1
    assert result.stderr.startswith(f"not ready within {bound}s: {why}"), result.stderr
    assert result.calls[0] == K3S_STARTED
    assert len(result.calls) >= 3
    assert set(result.calls[1:]) == {GET_NODES}
    # The bound is counted in whole seconds and checked between polls.
    assert bound - 1 <= elapsed < bound + POLL_INTERVAL_SECONDS


def test_node_ready_fails_at_once_when_k3s_is_not_running(host: Host) -> None:
    host.install_k3s(VERSION, started="")

    result = host.run("node_ready.sh", "60", VERSION)

    assert (result.returncode, result.stderr, result.calls) == (1, "k3s is not running\n", [K3S_STARTED])


# --- read_kubeconfig.sh -------------------------------------------------------------------------


# As k3s writes it; every secret-looking value holds FAKE_SECRET, so a test can tell that none of the
# file got out.
FAKE_SECRET = "FAKE-SECRET-do-not-print"
KUBECONFIG_CLUSTERS = f"""clusters:
- cluster:
    certificate-authority-data: {FAKE_SECRET}-ca
    server: https://127.0.0.1:6443
  name: default
"""
KUBECONFIG_USERS = f"""users:
- name: default
  user:
    client-certificate-data: {FAKE_SECRET}-cert
    client-key-data: {FAKE_SECRET}-key
"""
KUBECONFIG_REST = """contexts:
- context:
    cluster: default
    user: default
  name: default
current-context: default
kind: Config
preferences: {}
"""
KUBECONFIG = "apiVersion: v1\n" + KUBECONFIG_CLUSTERS + KUBECONFIG_REST + KUBECONFIG_USERS


@pytest.mark.parametrize(
    "kubeconfig",
    [KUBECONFIG, KUBECONFIG + "\n\n", KUBECONFIG.removesuffix("\n")],
    ids=["as-k3s-writes-it", "trailing-blank-lines", "no-final-newline"],
)
def test_read_kubeconfig_prints_the_file_byte_for_byte(host: Host, kubeconfig: str) -> None:
    host.kubeconfig_file.parent.mkdir(parents=True)
    host.kubeconfig_file.write_bytes(kubeconfig.encode())

    result = subprocess.run(
        ["bash", str(SCRIPTS_DIR / "read_kubeconfig.sh")], env=host.env, capture_output=True, timeout=30, check=False
    )

    assert (result.returncode, result.stdout, result.stderr) == (0, kubeconfig.encode(), b"")


BROKEN_KUBECONFIGS = {
    "empty": "",
    "no-kind-config": KUBECONFIG.replace("kind: Config\n", ""),
    "kind-of-something-else": KUBECONFIG.replace("kind: Config\n", "kind: ConfigMap\n"),
    "no-clusters": "apiVersion: v1\n" + KUBECONFIG_REST + KUBECONFIG_USERS,
    "clusters-empty": "apiVersion: v1\nclusters: []\n" + KUBECONFIG_REST + KUBECONFIG_USERS,
    "no-users": "apiVersion: v1\n" + KUBECONFIG_CLUSTERS + KUBECONFIG_REST,
    "cut-off-before-its-users": KUBECONFIG[: KUBECONFIG.index("users:")] + "users:\n",
    "indented-users-is-not-top-level": KUBECONFIG.replace("users:\n", "  users:\n"),
    "not-a-kubeconfig": f"token: {FAKE_SECRET}\n",
}


@pytest.mark.parametrize("content", BROKEN_KUBECONFIGS.values(), ids=BROKEN_KUBECONFIGS.keys())
def test_read_kubeconfig_refuses_a_broken_file_and_shows_none_of_it(host: Host, content: str) -> None:
    host.kubeconfig_file.parent.mkdir(parents=True)
    host.kubeconfig_file.write_text(content)

    result = host.run("read_kubeconfig.sh")

    assert result.returncode == 1
    assert result.stdout == ""
    assert result.stderr.startswith(f"{host.kubeconfig_file}: ")
    assert result.stderr.endswith("; not printing it\n")
    assert FAKE_SECRET not in result.stderr
    assert [line for line in content.splitlines() if len(line) > 8 and line.strip() in result.stderr] == []
    assert result.calls == []


@pytest.mark.parametrize("kind", ["absent", "directory"])
def test_read_kubeconfig_fails_when_there_is_no_file(host: Host, kind: str) -> None:
    if kind == "directory":
        host.kubeconfig_file.mkdir(parents=True)

    result = host.run("read_kubeconfig.sh")

    assert (result.returncode, result.stdout, result.calls) == (1, "", [])
    assert result.stderr == f"{host.kubeconfig_file}: no such file; not printing it\n"


# --- helmchart_handover.sh ----------------------------------------------------------------------

HANDED_OVER = ("cert-manager", "cluster-api-operator")
KUBE_SYSTEM = ("k3s", "kubectl", "-n", "kube-system")

# What k3s's manifests directory may hold; the files are found by content, whatever their names.
CERT_MANAGER_MANIFEST = """# Ansible managed
apiVersion: v1
kind: Namespace
metadata:
  name: cert-manager
---
apiVersion: helm.cattle.io/v1
kind: HelmChart
metadata:
  name: cert-manager
  namespace: kube-system
spec:
  repo: https://charts.jetstack.io
  chart: cert-manager
  version: v1.21.2
  targetNamespace: cert-manager
  createNamespace: true
  valuesContent: |-
    crds:
      enabled: true
"""
OPERATOR_MANIFEST = (
    '{"apiVersion": "helm.cattle.io/v1", "kind": "HelmChart",\n'
    ' "metadata": {"name": "cluster-api-operator", "namespace": "kube-system"},\n'
    ' "spec": {"repo": "https://kubernetes-sigs.github.io/cluster-api-operator", "chart": "cluster-api-operator",\n'
    '          "version": "0.28.0", "targetNamespace": "capi-operator-system", "createNamespace": true}}\n'
)
HANDED_OVER_MANIFESTS = {"20-cert-manager.yaml": CERT_MANAGER_MANIFEST, "lab/capi-operator.json": OPERATOR_MANIFEST}
# Files that stay: other charts (one that mentions `name: cert-manager` in its values), a
# HelmChartConfig of the same name, a chart of that name in another namespace, and files k3s
# never applies (no YAML extension, a dotfile).
OTHER_MANIFESTS = {
    "traefik.yaml": "apiVersion: helm.cattle.io/v1\nkind: HelmChart\nmetadata:\n  name: traefik\n"
    "  namespace: kube-system\nspec:\n  chart: traefik\n",
    "issuers.yml": "apiVersion: helm.cattle.io/v1\nkind: HelmChart\nmetadata:\n  name: cert-manager-issuers\n"
    "  namespace: kube-system\nspec:\n  chart: issuers\n  valuesContent: |-\n    name: cert-manager\n",
    "cert-manager-config.yaml": "apiVersion: helm.cattle.io/v1\nkind: HelmChartConfig\nmetadata:\n"
    "  name: cert-manager\n  namespace: kube-system\nspec:\n  valuesContent: ''\n",
    "elsewhere.yaml": CERT_MANAGER_MANIFEST.replace("namespace: kube-system", "namespace: lab"),
    "notes.txt": "kind: HelmChart\nname: cert-manager\n",
    ".cert-manager.yaml": CERT_MANAGER_MANIFEST,
}


def write_manifests(host: Host, manifests: dict[str, str]) -> None:
    for relative, content in manifests.items():
        path = host.manifests_dir / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content)


def tree(directory: Path) -> dict[str, str]:
    """Every file under `directory` by relative path, with its content."""
    return {
        str(path.relative_to(directory)): path.read_text() for path in sorted(directory.rglob("*")) if path.is_file()
    }


def handover_get(name: str) -> Call:
    return (*KUBE_SYSTEM, "get", "helmchart", name, "--ignore-not-found", "-o", "name")


def handover_calls(name: str) -> list[Call]:
    """Look, annotate unmanaged, take the finalizer off, delete: in this order and nothing else."""
    return [
        handover_get(name),
        (*KUBE_SYSTEM, "annotate", "helmchart", name, "helmcharts.helm.cattle.io/unmanaged=true", "--overwrite"),
        (*KUBE_SYSTEM, "patch", "helmchart", name, "--type=merge", "-p", '{"metadata":{"finalizers":null}}'),
        (*KUBE_SYSTEM, "delete", "helmchart", name, "--ignore-not-found", "--timeout=60s"),
    ]


def handover_report(name: str, moved: list[str]) -> str:
    """What the script says about one chart it hands over, moving the manifest files `moved`."""
    lines = [f"{name}: HelmChart found in kube-system", f"{name}: annotated helmcharts.helm.cattle.io/unmanaged=true"]
    lines += [f"{name}: no manifest file defines it"] if not moved else []
    lines += [f"{name}: moved {relative} to {relative}" for relative in moved]
    lines += [
        f"{name}: finalizers removed",
        f"{name}: HelmChart deleted; its Helm release and workloads are left as they are",
    ]
    return "".join(f"{line}\n" for line in lines)


def test_helmchart_handover_hands_both_charts_over_in_order_then_a_second_run_does_nothing(host: Host) -> None:
    host.install_k3s(VERSION)
    for name in (*HANDED_OVER, "traefik"):
        host.add_helmchart(name)
    write_manifests(host, {**HANDED_OVER_MANIFESTS, **OTHER_MANIFESTS})

    first = host.run("helmchart_handover.sh", *HANDED_OVER)

    assert first.returncode == 0, first.stderr
    assert first.calls == handover_calls("cert-manager") + handover_calls("cluster-api-operator")
    assert host.helmcharts() == {"traefik"}
    assert host.helm_deletes() == []
    # Exactly the two files that define the charts moved, unchanged, out of k3s's sight.
    assert tree(host.manifests_dir) == OTHER_MANIFESTS
    assert tree(host.handed_over_dir) == HANDED_OVER_MANIFESTS
    assert stat.S_IMODE(host.handed_over_dir.stat().st_mode) == 0o700
    # Moved after the annotation, before the finalizer came off.
    for name, manifest in zip(HANDED_OVER, HANDED_OVER_MANIFESTS, strict=True):
        assert manifest in host.seen("annotate", name)
        assert manifest not in host.seen("patch", name)
    manifests, handed_over = host.manifests_dir, host.handed_over_dir
    expected = handover_report("cert-manager", ["20-cert-manager.yaml"]) + handover_report(
        "cluster-api-operator", ["lab/capi-operator.json"]
    )
    stdout = first.stdout.replace(f"{manifests}/", "").replace(f"{handed_over}/", "")
    assert stdout == expected, first.stdout

    second = host.run("helmchart_handover.sh", *HANDED_OVER)

    assert (second.returncode, second.stderr) == (0, "")
    assert second.stdout == "cert-manager: not present\ncluster-api-operator: not present\n"
    assert second.calls == [handover_get("cert-manager"), handover_get("cluster-api-operator")]
    assert tree(host.manifests_dir) == OTHER_MANIFESTS
    assert tree(host.handed_over_dir) == HANDED_OVER_MANIFESTS


@pytest.mark.parametrize("manifests_dir", [True, False], ids=["other-manifests", "no-manifests-dir"])
def test_helmchart_handover_changes_nothing_on_a_host_without_the_charts(host: Host, manifests_dir: bool) -> None:
    host.install_k3s(VERSION)
    host.add_helmchart("traefik")
    if manifests_dir:
        write_manifests(host, OTHER_MANIFESTS)

    result = host.run("helmchart_handover.sh", *HANDED_OVER)

    assert (result.returncode, result.stderr) == (0, "")
    assert result.stdout == "cert-manager: not present\ncluster-api-operator: not present\n"
    assert result.calls == [handover_get("cert-manager"), handover_get("cluster-api-operator")]
    assert host.helmcharts() == {"traefik"}
    if manifests_dir:
        assert tree(host.manifests_dir) == OTHER_MANIFESTS
    else:
        assert not host.manifests_dir.exists()
    assert not host.handed_over_dir.exists()


def test_helmchart_handover_hands_over_a_chart_no_manifest_defines(host: Host) -> None:
    host.install_k3s(VERSION)
    host.add_helmchart("cert-manager")

    result = host.run("helmchart_handover.sh", "cert-manager")

    assert (result.returncode, result.stdout) == (0, handover_report("cert-manager", [])), result.stderr
    assert result.calls == handover_calls("cert-manager")
    assert (host.helmcharts(), host.helm_deletes()) == (frozenset(), [])
    assert not host.handed_over_dir.exists()


def test_helmchart_handover_moves_the_manifest_of_a_chart_k3s_would_create_again(host: Host) -> None:
    host.install_k3s(VERSION)
    write_manifests(host, {"20-cert-manager.yaml": CERT_MANAGER_MANIFEST})

    result = host.run("helmchart_handover.sh", "cert-manager")

    assert result.returncode == 0, result.stderr
    assert result.calls == [handover_get("cert-manager")]
    assert tree(host.manifests_dir) == {}
    assert tree(host.handed_over_dir) == {"20-cert-manager.yaml": CERT_MANAGER_MANIFEST}
    moved, target = host.manifests_dir / "20-cert-manager.yaml", host.handed_over_dir / "20-cert-manager.yaml"
    assert result.stdout == (
        "cert-manager: HelmChart not present, but k3s would create it again from its manifest\n"
        f"cert-manager: moved {moved} to {target}\n"
    )


def test_helmchart_handover_finishes_a_chart_an_earlier_attempt_left_terminating(host: Host) -> None:
    host.install_k3s(VERSION)
    host.add_helmchart("cert-manager", unmanaged=True, terminating=True)

    result = host.run("helmchart_handover.sh", "cert-manager")

    assert (result.returncode, result.stdout) == (0, handover_report("cert-manager", [])), result.stderr
    assert result.calls == handover_calls("cert-manager")
    assert (host.helmcharts(), host.helm_deletes()) == (frozenset(), [])


def test_helmchart_handover_never_overwrites_a_handed_over_file_and_stops_before_the_delete(host: Host) -> None:
    host.install_k3s(VERSION)
    host.add_helmchart("cert-manager")
    write_manifests(host, {"20-cert-manager.yaml": CERT_MANAGER_MANIFEST})
    host.handed_over_dir.mkdir(parents=True)
    (host.handed_over_dir / "20-cert-manager.yaml").write_text("an earlier hand-over\n")

    result = host.run("helmchart_handover.sh", "cert-manager")

    assert result.returncode == 1
    assert result.stderr == (
        f"cert-manager: {host.handed_over_dir}/20-cert-manager.yaml exists already; not overwriting it\n"
    )
    assert result.calls == handover_calls("cert-manager")[:2]
    # Left unmanaged, so the controller does nothing with it until a re-run finishes the job.
    assert host.helmcharts() == {"cert-manager"}
    assert (host.state / "helmchart.cert-manager.unmanaged").exists()
    assert tree(host.manifests_dir) == {"20-cert-manager.yaml": CERT_MANAGER_MANIFEST}
    assert tree(host.handed_over_dir) == {"20-cert-manager.yaml": "an earlier hand-over\n"}


def test_helmchart_handover_stops_before_any_change_on_a_manifest_that_is_no_yaml(host: Host) -> None:
    host.install_k3s(VERSION)
    host.add_helmchart("cert-manager")
    broken = f"kind: HelmChart\nmetadata: {{name: cert-manager\nspec:\n  valuesContent: 'password: {FAKE_SECRET}'\n"
    write_manifests(host, {"20-cert-manager.yaml": CERT_MANAGER_MANIFEST, "broken.yaml": broken})

    result = host.run("helmchart_handover.sh", "cert-manager")

    assert result.returncode == 1
    assert result.stderr == (
        f"{host.manifests_dir}/broken.yaml: not valid YAML; cannot tell whether it defines cert-manager\n"
    )
    assert (result.stdout, result.calls) == ("", [])
    assert host.helmcharts() == {"cert-manager"}
    assert not (host.state / "helmchart.cert-manager.unmanaged").exists()
    assert tree(host.manifests_dir) == {"20-cert-manager.yaml": CERT_MANAGER_MANIFEST, "broken.yaml": broken}


@pytest.mark.parametrize(
    ("args", "error"),
    [
        ((), f"usage: {SCRIPTS_DIR / 'helmchart_handover.sh'} HELMCHART...\n"),
        (("cert-manager", "Cert_Manager"), "Cert_Manager: not a HelmChart name\n"),
        (("cert-manager", "-n"), "-n: not a HelmChart name\n"),
    ],
    ids=["none", "bad-name", "option"],
)
def test_helmchart_handover_refuses_bad_arguments_before_doing_anything(
    host: Host, args: tuple[str, ...], error: str
) -> None:
    host.install_k3s(VERSION)
    host.add_helmchart("cert-manager")

    result = host.run("helmchart_handover.sh", *args)

    assert (result.returncode, result.stdout, result.stderr, result.calls) == (2, "", error, [])
    assert host.helmcharts() == {"cert-manager"}
