"""systemctl in a box guest (e2e/standins/guest/guest.py), which has no systemd: the verbs the host scripts, the
k3s installer and the guest's boot use (daemon-reload, enable, is-enabled, is-active, start, stop,
restart, and `show UNIT -p ExecMainStartTimestamp|ActiveEnterTimestamp [--value]`), on the guest's real unit files. A
started unit's ExecStart runs in a session of its own, its output in /var/log/box/UNIT.log;
Type=notify waits for READY=1 on NOTIFY_SOCKET, as systemd does. Any other verb, option, unit type
or [Service] key fails with a message, exit 1.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from e2e.standins.guest.guest import LOG_DIR, record_call

UNIT_DIRS = ("/etc/systemd/system", "/usr/lib/systemd/system", "/lib/systemd/system")
WANTS = Path("/etc/systemd/system/multi-user.target.wants")
STATE = Path("/run/systemd-standin")
START_BOUND_SECONDS = 120
STOP_BOUND_SECONDS = 90
SERVICE_KEYS = {"Type", "ExecStart", "EnvironmentFile"}
# Keys that only tune what the stand-in does not model (no cgroups, no restarts, no limits).
IGNORED_SERVICE_KEYS = {"KillMode", "Delegate", "Restart", "RestartSec", "TimeoutStartSec", "LimitNOFILE"}
CLEAN_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# A fault the box sets (e2e/box/management/box_faults.py): while HELD/UNIT.VERB exists, `systemctl VERB UNIT`
# waits before it does anything, so that the box can kill the session it runs in between what came
# before it and the restart itself. Bounded: a marker left behind delays, never wedges, a run.
HELD = Path("/run/box-held")


class RefusedError(Exception):
    """What the stand-in does not know, or what systemctl itself refuses; (message, exit code)."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = code


def _name(unit: str) -> str:
    return unit if "." in unit else f"{unit}.service"


def _unit_file(unit: str) -> Path | None:
    return next((Path(d, unit) for d in UNIT_DIRS if Path(d, unit).is_file()), None)


def _sections(path: Path) -> dict[str, dict[str, str]]:
    sections: dict[str, dict[str, str]] = {}
    current = sections.setdefault("", {})
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            current = sections.setdefault(line.strip("[]"), {})
            continue
        key, _, value = line.partition("=")
        current[key.strip()] = value.strip()
    return sections


def _pid(unit: str) -> int | None:
    try:
        pid = int((STATE / f"{unit}.pid").read_text())
        os.kill(pid, 0)
    except (FileNotFoundError, ProcessLookupError):
        return None
    except PermissionError:
        # A user who may not signal root's process may still read its state, as `systemctl show`
        # without sudo does.
        return pid
    return pid


def _start(unit: str) -> None:
    if _pid(unit) is not None:
        return
    path = _unit_file(unit)
    if path is None:
        raise RefusedError(f"Failed to start {unit}: Unit {unit} not found.", 5)
    service = _sections(path).get("Service", {})
    unknown = set(service) - SERVICE_KEYS - IGNORED_SERVICE_KEYS
    if unknown:
        raise RefusedError(f"systemctl stand-in: {path}: does not know [Service] {', '.join(sorted(unknown))}")
    kind = service.get("Type", "simple")
    if kind not in ("simple", "notify"):
        raise RefusedError(f"systemctl stand-in: {path}: does not know Type={kind}")
    env = {"PATH": CLEAN_PATH, "LANG": "C.UTF-8"}
    if "EnvironmentFile" in service:
        optional = service["EnvironmentFile"].startswith("-")
        env_file = Path(service["EnvironmentFile"].lstrip("-"))
        if env_file.exists():
            for line in env_file.read_text().splitlines():
                if line.strip() and not line.startswith("#"):
                    key, _, value = line.partition("=")
                    env[key.strip()] = value.strip().strip("\"'")
        elif not optional:
            raise RefusedError(f"Failed to start {unit}: {env_file} not found.")
    STATE.mkdir(parents=True, exist_ok=True)
    notify = None
    if kind == "notify":
        notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        notify_path = STATE / f"{unit}.notify"
        notify_path.unlink(missing_ok=True)
        notify.bind(str(notify_path))
        env["NOTIFY_SOCKET"] = str(notify_path)
    with Path(LOG_DIR, f"{unit}.log").open("ab") as log:
        process = subprocess.Popen(
            shlex.split(service["ExecStart"].lstrip("-")),
            env=env,
            cwd="/",
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    (STATE / f"{unit}.pid").write_text(str(process.pid))
    # As systemd shows ExecMainStartTimestamp; node_ready.sh waits for a heartbeat newer than it.
    (STATE / f"{unit}.started").write_text(time.strftime("%a %Y-%m-%d %H:%M:%S %Z"))
    if notify is not None:
        _await_ready(unit, process, notify)


def _await_ready(unit: str, process: subprocess.Popen[bytes], notify: socket.socket) -> None:
    notify.settimeout(1)
    deadline = time.monotonic() + START_BOUND_SECONDS
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RefusedError(
                f"Job for {unit} failed: its main process exited {process.returncode}; see {LOG_DIR}/{unit}.log"
            )
        try:
            if b"READY=1" in notify.recv(4096).split(b"\n"):
                return
        except TimeoutError:
            continue
    _stop(unit)
    raise RefusedError(f"Job for {unit} failed: no READY=1 within {START_BOUND_SECONDS}s")


def _stop(unit: str) -> None:
    pid = _pid(unit)
    if pid is not None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGTERM)
        deadline = time.monotonic() + STOP_BOUND_SECONDS
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)
    (STATE / f"{unit}.pid").unlink(missing_ok=True)


def _alive(pid: int) -> bool:
    """Running and not yet a zombie (the guest's PID 1 reaps it)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1][0] != "Z"
    except FileNotFoundError:
        return False


def _enable(unit: str) -> None:
    path = _unit_file(unit)
    if path is None:
        raise RefusedError(f"Failed to enable unit: Unit file {unit} does not exist.")
    wanted_by = _sections(path).get("Install", {}).get("WantedBy")
    if wanted_by is None:
        print(f"The unit files have no installation config (WantedBy=, ...); {unit} is static.", file=sys.stderr)
        return
    if wanted_by != "multi-user.target":
        raise RefusedError(f"systemctl stand-in: does not know WantedBy={wanted_by}")
    WANTS.mkdir(parents=True, exist_ok=True)
    link = WANTS / unit
    if not link.is_symlink():
        link.symlink_to(path)
        print(f"Created symlink {link} → {path}.", file=sys.stderr)


def _is_enabled(unit: str) -> tuple[str, int]:
    path = _unit_file(unit)
    if path is None:
        raise RefusedError(f"Failed to get unit file state for {unit}: No such file or directory")
    if (WANTS / unit).is_symlink():
        return "enabled", 0
    if "Install" not in _sections(path):
        return "static", 0
    return "disabled", 1


def _show_start_time(unit: str) -> str:
    """systemd shows nothing for a unit that is not running."""
    started = STATE / f"{unit}.started"
    return started.read_text() if _pid(unit) is not None and started.exists() else ""


# The start-time properties `systemctl show UNIT -p NAME [--value]` answers: node_ready.sh's, and
# the one docs/adoption.md step 6 has the owner read; for a unit the stand-in starts, both are when
# its process started.
START_TIME_PROPERTIES = ("ExecMainStartTimestamp", "ActiveEnterTimestamp")


def systemctl(args: list[str]) -> int:
    if len(args) in (4, 5) and args[0] == "show" and args[2] == "-p" and args[3] in START_TIME_PROPERTIES:
        if args[4:] not in ([], ["--value"]):
            raise RefusedError(f"systemctl stand-in: does not know `systemctl {' '.join(args)}`")
        started = _show_start_time(_name(args[1]))
        print(started if args[4:] else f"{args[3]}={started}")
        return 0
    quiet = "--quiet" in args or "-q" in args
    words = [arg for arg in args if arg not in ("--quiet", "-q")]
    options = [word for word in words if word.startswith("-")]
    if options:
        raise RefusedError(f"systemctl stand-in: does not know option(s) {' '.join(options)}")
    if words == ["daemon-reload"]:
        return 0
    if len(words) != 2:
        raise RefusedError(f"systemctl stand-in: does not know `systemctl {' '.join(args)}`")
    verb, unit = words[0], _name(words[1])
    if verb in ("is-enabled", "is-active"):
        state, code = _is_enabled(unit) if verb == "is-enabled" else (("active", 0) if _pid(unit) else ("inactive", 3))
        if not quiet:
            print(state)
        return code
    actions = {"start": [_start], "stop": [_stop], "restart": [_stop, _start], "enable": [_enable]}
    if verb not in actions:
        raise RefusedError(f"systemctl stand-in: does not know the verb {verb}")
    _wait_while_held(verb, unit)
    for action in actions[verb]:
        action(unit)
    return 0


def _wait_while_held(verb: str, unit: str) -> None:
    deadline = time.monotonic() + START_BOUND_SECONDS
    while (HELD / f"{unit}.{verb}").exists() and time.monotonic() < deadline:
        time.sleep(0.1)


def main() -> int:
    args = sys.argv[1:]
    try:
        code = systemctl(args)
    except RefusedError as refused:
        print(refused, file=sys.stderr)
        code = refused.code
        record_call(["systemctl", *args], code, str(refused))
        return code
    record_call(["systemctl", *args], code)
    return code


if __name__ == "__main__":
    sys.exit(main())
