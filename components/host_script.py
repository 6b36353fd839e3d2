"""Shell scripts from components/scripts/, run as root on the VM over SSH.

The script travels inside the command line (`sudo bash -c '<script>' name args...`), so its text
is part of the command's inputs: editing a script re-runs it, and no variable has to cross SSH as
an environment variable (sshd drops those unless AcceptEnv allows them).

Beyond bash and coreutils, `k3s_config.sh` and `helmchart_handover.sh` run python3 with PyYAML
(`python3-yaml`) on the VM. Every Ubuntu cloud image has it: cloud-init, which the image needs to
boot at all, depends on it.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pulumi
import pulumi_command as command

SCRIPTS_DIR = Path(__file__).resolve().parent / "scripts"


def script_command(script: str, *args: str) -> str:
    body = (SCRIPTS_DIR / script).read_text()
    return shlex.join(["sudo", "bash", "-c", body, script, *args])


def host_command(
    name: str,
    script: str,
    args: Sequence[str],
    *,
    connection: pulumi.Input[command.remote.ConnectionArgs],
    triggers: pulumi.Input[Sequence[Any]],
    opts: pulumi.ResourceOptions,
    secret_stdout: bool = False,
) -> command.remote.Command:
    """One idempotent host step. It runs again only when its script, arguments, connection or
    triggers change, never on a plain re-run, and it has no delete command: removing or replacing
    the resource never undoes anything on the host."""
    return command.remote.Command(
        name,
        connection=connection,
        create=script_command(script, *args),
        triggers=triggers,
        # Sending the previous stdout back as environment variables would leak a kubeconfig into
        # the remote environment; nothing here needs it.
        add_previous_output_in_env=False,
        logging=command.remote.Logging.STDERR if secret_stdout else command.remote.Logging.STDOUT_AND_STDERR,
        opts=pulumi.ResourceOptions.merge(
            opts,
            pulumi.ResourceOptions(additional_secret_outputs=["stdout"] if secret_stdout else None),
        ),
    )
