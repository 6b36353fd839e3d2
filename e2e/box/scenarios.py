"""What the real-engine tests do, each run by e2e.engine.netns in a network namespace of its own. Each
returns what it observed (exit codes, CLI output, the stand-ins' records) for the test to assert.
"""

from __future__ import annotations

import base64
import hashlib
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import quote

from components.host_script import script_command
from components.k3s_node import render_k3s_config
from components.kubeconfig import rename_k3s_kubeconfig
from e2e.box import box_program
from e2e.engine import control_plane
from e2e.engine.cli import PASSPHRASE, PLUGINS, REPO, Engine, built_bin, fresh_engine
from e2e.standins import https_server
from e2e.standins.cluster import (
    admission_webhook_standin,
    cainjector_standin,
    chart_repo_standin,
    operator_standin,
    playbook_lab,
)
from e2e.standins.guest import guest, k3s_release_standin
from e2e.standins.proxmox import pve_api_standin

PROGRAM_TOKEN = "pulumi@pve!lab-mgmt"
CAPMOX_TOKEN = "capmox@pve!capi"
PROGRAM_SECRET = "0f1e2d3c-4b5a-4697-8877-66554433aa11"
CAPMOX_SECRET = "a1b2c3d4-e5f6-4a7b-8c9d-0e1f2a3b4c5d"
PROXMOX_ADDRESS = "192.168.0.8"
PROXMOX_PORT = 8006
VM_ADDRESS = "192.168.4.21"
# The spec does not say where lab1's API server is; any free address of the lab's subnet will do.
LAB1_ADDRESS = "192.168.4.40"


def _readme_first_run(engine: Engine, secrets: dict[str, str]) -> list[dict[str, Any]]:
    """The README's first-run steps, literally: stack init, the public key, the secrets (which
    `pulumi config set --secret KEY` reads from stdin when it is not a terminal)."""
    key = engine.root / ".ssh" / "id_ed25519"
    key.parent.mkdir()
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "owner@laptop", "-f", str(key)], check=True)
    steps = [
        ("stack", "init", "lab"),
        ("config", "set", "--path", "sshPublicKeys[0]", key.with_suffix(".pub").read_text().strip()),
    ]
    ran = [_step(engine, args) for args in steps]
    for name, value in secrets.items():
        ran.append(_step(engine, ("config", "set", "--secret", name), stdin=value))
    ran.append(_step(engine, ("config", "set", "--secret", "sshPrivateKey"), stdin=key.read_text()))
    return ran


def _step(engine: Engine, args: tuple[str, ...], stdin: str | None = None) -> dict[str, Any]:
    done = engine.pulumi(*args, stdin=stdin)
    return {"args": list(args), "rc": done.returncode, "output": done.stdout + done.stderr}


def _lab_secrets() -> dict[str, str]:
    return {"proxmoxApiTokenSecret": PROGRAM_SECRET, "capmoxTokenSecret": CAPMOX_SECRET}


def readme_first_run(root: str) -> dict[str, Any]:
    engine = fresh_engine(Path(root))
    steps = _readme_first_run(engine, _lab_secrets())
    config = engine.pulumi("config", "--json")
    return {
        "steps": steps,
        "stack_file": (engine.project / "Pulumi.lab.yaml").read_text(),
        "config_rc": config.returncode,
        "config": config.stdout,
    }


def readme_first_run_commands() -> list[str]:
    """The README's first run, as a user types it: the first command block under "Configure and
    run"."""
    text = (REPO / "README.md").read_text()
    section = text[text.index("## Configure and run") :]
    block = section[section.index("\n    ") + 1 :]
    return [line.removeprefix("    ") for line in block.split("\n\n", 1)[0].splitlines()]


# What stands in for the user at a prompt, and for the pip install of the requirements (the
# engine's project copy runs in the tests' own virtualenv: no package index is reachable here).
TYPED_SECRETS = {"proxmoxApiTokenSecret": PROGRAM_SECRET, "capmoxTokenSecret": CAPMOX_SECRET}
ALREADY_INSTALLED = "python3 -m venv .venv && .venv/bin/pip install -r requirements.txt"


def newcomer_first_run(root: str, tokens: list[Any]) -> dict[str, Any]:
    """The README's first run word for word, in one shell, on a laptop with an empty HOME (but for
    an SSH key pair and the plugins, which the CLI would download), with only the variables the
    README sets, against the Proxmox VE API stand-in at the lab's address answering from `tokens`
    ([token id, secret, permissions] triples)."""
    engine = fresh_engine(Path(root))
    key = engine.root / ".ssh" / "id_ed25519"
    key.parent.mkdir()
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "owner@laptop", "-f", str(key)], check=True)
    typed = []
    for command in readme_first_run_commands():
        secret = command.removeprefix("pulumi config set --secret ")
        if command == ALREADY_INSTALLED:
            continue
        if command.startswith("export PULUMI_CONFIG_PASSPHRASE="):
            typed.append(f"export PULUMI_CONFIG_PASSPHRASE={PASSPHRASE}")
        elif secret in TYPED_SECRETS:
            typed.append(f"{command} <<<'{TYPED_SECRETS[secret]}'")
        else:
            typed.append(command)
    # A user whose home directory is the new, empty one: the CLI reads it from /etc/passwd
    # (`~` in `pulumi login file://~/...`, and where its plugins live), so the scenario's own
    # mount namespace gets a password database saying so.
    passwd = engine.root.parent / "passwd"
    passwd.write_text(
        "".join(
            f"root:x:0:0:root:{engine.root}:/bin/bash\n" if line.startswith("root:") else line + "\n"
            for line in Path("/etc/passwd").read_text().splitlines()
        )
    )
    as_newcomer = ["unshare", "--mount", "--", "sh", "-c", 'mount --bind "$0" /etc/passwd && exec "$@"', str(passwd)]
    table = {(token_id, secret): permissions for token_id, secret, permissions in tokens}
    with pve_api_standin.serve(table, engine.root, (PROXMOX_ADDRESS, PROXMOX_PORT)) as standin:
        done = subprocess.run(
            [*as_newcomer, "bash", "-euo", "pipefail", "-c", "\n".join(typed)],
            cwd=engine.project,
            env=engine.newcomer_env(),
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
    return {
        "typed": typed,
        "rc": done.returncode,
        "output": done.stdout + done.stderr,
        "requests": standin.requests,
        "state_files": sorted(str(p.relative_to(engine.root)) for p in (engine.root / ".pulumi-state").rglob("*.json")),
    }


def mistakes(root: str) -> dict[str, Any]:
    """The CLI's output for three mistakes a newcomer makes: a bad setting, a Proxmox API that
    cannot be reached (nothing listens at its address), and an adoption whose charts this
    machine's Helm client does not list."""
    engine = fresh_engine(Path(root))
    steps = _readme_first_run(engine, _lab_secrets())
    outputs = {}
    mistakes: dict[str, list[tuple[str, ...]]] = {
        "bad setting": [("vmId", "12")],
        "unreachable API": [("vmId", "201")],
        "adoption without charts": [
            ("skipCredentialsCheck", "true"),
            ("adopt", "true"),
            ("--plaintext", "capmoxExistingSecret", "capmox-variables"),
        ],
    }
    for mistake, settings in mistakes.items():
        steps += [_step(engine, ("config", "set", *setting)) for setting in settings]
        preview = engine.pulumi("preview", "--stack", "lab")
        outputs[mistake] = {"rc": preview.returncode, "output": preview.stdout + preview.stderr}
    return {"steps": steps, "outputs": outputs}


def installed_plugins(root: str) -> dict[str, Any]:
    """What `pulumi plugin ls` lists in a fresh engine's PULUMI_HOME, and whether each installed
    binary is the one e2e/engine/build-engine.sh built."""
    engine = fresh_engine(Path(root))
    listed = engine.pulumi("plugin", "ls", "--json")
    listed.check_returncode()
    plugins = json.loads(listed.stdout)
    return {
        "listed": [[plugin["kind"], plugin["name"], plugin["version"]] for plugin in plugins],
        "built_here": {
            plugin.name: _digest(
                engine.pulumi_home / "plugins" / f"resource-{plugin.name}-v{plugin.version}" / plugin.binary.name
            )
            == _digest(plugin.binary)
            for plugin in PLUGINS
        },
    }


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def documented_config_sets(root: str, commands: list[list[str]]) -> list[dict[str, Any]]:
    """Each `pulumi config set` the docs show, as typed, on a fresh stack; a secret the command
    reads from stdin gets a UUID, as a Proxmox token secret is."""
    engine = fresh_engine(Path(root))
    ran = [_step(engine, ("stack", "init", "lab"))]
    ran += [_step(engine, tuple(command), stdin=PROGRAM_SECRET) for command in commands]
    return ran


def cli_preview(root: str, unset: list[str], settings: dict[str, str]) -> dict[str, Any]:
    """The README's steps, then config changes, then `pulumi preview --stack lab` as typed."""
    engine = fresh_engine(Path(root))
    steps = _readme_first_run(engine, _lab_secrets())
    for key in unset:
        steps.append(_step(engine, ("config", "rm", key)))
    for key, value in settings.items():
        steps.append(_step(engine, ("config", "set", key, value)))
    preview = engine.pulumi("preview", "--stack", "lab")
    return {"steps": steps, "rc": preview.returncode, "output": preview.stdout + preview.stderr}


def program_preview(
    root: str, settings: dict[str, str], secrets: dict[str, str], tokens: list[Any], legacy_layout: bool = False
) -> dict[str, Any]:
    """The README's steps with `secrets`, then `settings`, then `pulumi preview` of the program by
    the CLI, with the Proxmox VE API stand-in at the lab's address answering from `tokens`
    ([token id, secret, permissions] triples)."""
    engine = fresh_engine(Path(root), legacy_layout=legacy_layout)
    steps = _readme_first_run(engine, {**_lab_secrets(), **secrets})
    for key, value in settings.items():
        steps.append(_step(engine, ("config", "set", key, value)))
    table = {(token_id, secret): permissions for token_id, secret, permissions in tokens}
    with pve_api_standin.serve(table, engine.root, (PROXMOX_ADDRESS, PROXMOX_PORT)) as standin:
        preview = engine.run("preview")
    stacks = engine.root / "state" / ".pulumi" / "stacks"
    return {
        "steps": steps,
        "rc": preview.rc,
        "output": preview.output,
        "plan": preview.steps(),
        "warnings": preview.diagnostics("warning"),
        "requests": standin.requests,
        "unknown": standin.unknown,
        "state_files": sorted(str(path.relative_to(stacks)) for path in stacks.rglob("*.json")),
    }


def _k3s_on_path(directory: Path, kubectl: Path, kubeconfig: Path) -> dict[str, str]:
    """`k3s kubectl` as the real kubectl against the box's API server; any other k3s command is
    refused loudly. `python3` is this interpreter, which has PyYAML as Ubuntu's has."""
    directory.mkdir(exist_ok=True)
    (directory / "k3s").write_text(
        "#!/bin/sh\n"
        f'[ "$1" = kubectl ] && shift && exec {kubectl} --kubeconfig={kubeconfig} "$@"\n'
        'echo "k3s stand-in: unknown command: $*" >&2\nexit 99\n'
    )
    (directory / "python3").write_text(f'#!/bin/sh\nexec {sys.executable} "$@"\n')
    for tool in directory.iterdir():
        tool.chmod(0o755)
    # kubectl keeps a discovery cache under $HOME: the box's own directory, not the repository.
    return {"PATH": f"{directory}:/usr/bin:/bin", "HOME": str(directory.parent)}


def _playbook_capmox_data() -> dict[str, str]:
    return {
        "PROXMOX_URL": f"https://{PROXMOX_ADDRESS}:{PROXMOX_PORT}",
        "PROXMOX_TOKEN": CAPMOX_TOKEN,
        "PROXMOX_SECRET": CAPMOX_SECRET,
    }


def _handover(cluster: control_plane.ControlPlane, base: Path, manifests: Path) -> dict[str, Any]:
    """components/scripts/helmchart_handover.sh as docs/adoption.md runs it, with what it asked."""
    env = {
        **_k3s_on_path(base / "bin", cluster.bin_dir / "kubectl", cluster.kubeconfig),
        "K3S_MANIFESTS_DIR": str(manifests),
    }
    script = REPO / "components" / "scripts" / "helmchart_handover.sh"
    audited = len(cluster.audit())
    done = subprocess.run(
        ["bash", str(script), *playbook_lab.HANDED_OVER],
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    return {
        "rc": done.returncode,
        "stdout": done.stdout,
        "stderr": done.stderr,
        "requests": _requests_since(cluster, audited),
    }


def _releases(cluster: control_plane.ControlPlane) -> list[tuple[str, str, str]]:
    listed = cluster.kubectl("get", "secret", "-A", "-l", "owner=helm", "-o", "json").stdout
    return sorted(
        (item["metadata"]["name"], item["metadata"]["uid"], item["metadata"]["resourceVersion"])
        for item in json.loads(listed)["items"]
    )


def helmchart_handover(root: str) -> dict[str, Any]:
    """The playbook's lab on a real API server, then the hand-over script twice."""
    base = Path(root)
    with control_plane.running(base / "control-plane", VM_ADDRESS) as cluster:
        manifests = base / "manifests"
        playbook_lab.lay_out(cluster, manifests, _playbook_capmox_data())
        before = _releases(cluster)
        runs = [_handover(cluster, base, manifests) for _ in range(2)]
        charts = cluster.kubectl("get", "helmchart", "-n", "kube-system", "-o", "name").stdout.split()
        return {
            "runs": runs,
            "charts_left": charts,
            "releases_before": before,
            "releases_after": _releases(cluster),
            "manifests_left": sorted(p.name for p in manifests.iterdir()),
            "handed_over_files": sorted(p.name for p in (base / "manifests-handed-over").iterdir()),
        }


# The operator chart's webhook configurations, calling the webhook server stand-in on the loopback
# of the test's network namespace, where these scenarios run their control plane.
OPERATOR_WEBHOOK_ADDRESS = "127.0.0.1"
CHART_TEMPLATES = {
    "cluster-api-operator": admission_webhook_standin.configurations(
        f"https://{OPERATOR_WEBHOOK_ADDRESS}:{admission_webhook_standin.PORT}"
    )
}
# How long after the webhook configurations appear the CA injector stand-in fills them in.
INJECT_SECONDS = 3.0
# The chart repositories' stand-in serves these at these paths.
CHART_REPOS = {
    "jetstack": [chart_repo_standin.Chart("cert-manager", playbook_lab.PLAYBOOK_CHARTS["cert-manager"][2])],
    "capi-operator": [
        chart_repo_standin.Chart(
            "cluster-api-operator",
            playbook_lab.PLAYBOOK_CHARTS["cluster-api-operator"][2],
            templates=CHART_TEMPLATES["cluster-api-operator"],
        )
    ],
}
WRITES = {"create", "update", "patch", "delete", "deletecollection"}
# The program's resource names (the last part of their URNs) for the adopted objects.
RELEASE_RESOURCES = ("mgmt-cert-manager", "mgmt-cluster-api-operator")
PROVIDER_CR_RESOURCES = (
    "mgmt-core-cluster-api",
    "mgmt-bootstrap-kubeadm",
    "mgmt-controlplane-kubeadm",
    "mgmt-infrastructure-proxmox",
    "mgmt-ipam-in-cluster",
)


@contextmanager
def _operator_webhooks(
    cluster: control_plane.ControlPlane, base: Path
) -> Iterator[tuple[admission_webhook_standin.WebhookStandIn, cainjector_standin.CainjectorStandIn]]:
    """The operator's webhook server that CHART_TEMPLATES call, and cert-manager's CA injector
    making them callable on `cluster`, for the block."""
    with (
        admission_webhook_standin.serve(base, OPERATOR_WEBHOOK_ADDRESS) as webhook,
        cainjector_standin.running(
            cluster, {admission_webhook_standin.CERTIFICATE: webhook.certificate}, INJECT_SECONDS
        ) as injector,
    ):
        yield webhook, injector


def _webhook_standins(
    webhook: admission_webhook_standin.WebhookStandIn, injector: cainjector_standin.CainjectorStandIn
) -> dict[str, Any]:
    """What the webhook and CA injector stand-ins could not answer or do; each must be empty."""
    return {"webhook_unknown": webhook.unknown, "injector_errors": injector.errors}


def _engine_run(
    engine: Engine, cluster: control_plane.ControlPlane, action: str, targets: list[str] | None = None
) -> dict[str, Any]:
    """One `pulumi preview` or `pulumi up` of the box program: each resource's step, the error if
    it failed, and every write the engine (the admin user) sent to the API server."""
    audited = len(cluster.audit())
    started = time.time()
    run = engine.run(action, targets=targets or ())
    writes = [request for request in _requests_since(cluster, audited) if request[0] in WRITES]
    return {
        "action": action,
        "steps": run.steps(),
        "summary": run.summary(),
        "error": run.output if run.rc != 0 else "",
        "writes": writes,
        "warnings": run.diagnostics("warning"),
        "started": started,
        "finished": time.time(),
    }


def _box_engine(base: Path, charts: chart_repo_standin.ChartRepoStandIn, cluster: control_plane.ControlPlane) -> Engine:
    """The engine running the box's program (e2e/box/box_program.py) against `cluster`, trusting the
    chart repositories' stand-in."""
    return fresh_engine(
        base / "engine",
        extra_env={"SSL_CERT_FILE": str(charts.certificate), box_program.KUBECONFIG_VARIABLE: str(cluster.kubeconfig)},
        main=Path(box_program.__file__),
    )


def _adopting(
    base: Path,
    charts: chart_repo_standin.ChartRepoStandIn,
    cluster: control_plane.ControlPlane,
    workload_clusters: list[str],
) -> tuple[Engine, list[dict[str, Any]]]:
    """docs/adoption.md step 2 on a fresh laptop: the README's first run, the Helm client listing
    both chart repositories, the adoption settings; the chart repositories are the stand-in's."""
    engine = _box_engine(base, charts, cluster)
    steps = _readme_first_run(engine, _lab_secrets())
    return engine, steps + adoption_settings(engine, charts, workload_clusters)


def adoption_settings(
    engine: Engine, charts: chart_repo_standin.ChartRepoStandIn, workload_clusters: list[str]
) -> list[dict[str, Any]]:
    """docs/adoption.md step 2 after the README's first run: the Helm client listing both chart
    repositories, and the adoption settings; the chart repositories are the stand-in's."""
    steps = []
    helm = built_bin("LAB_MGMT_HELM_BIN", "helm") / "helm"
    for args in (
        ("repo", "add", "lab-mgmt-cert-manager", f"{charts.url}/jetstack"),
        ("repo", "add", "lab-mgmt-cluster-api-operator", f"{charts.url}/capi-operator"),
        ("repo", "update"),
    ):
        done = subprocess.run(
            [str(helm), *args], env=engine.env(), capture_output=True, text=True, timeout=120, check=False
        )
        steps.append({"args": ["helm", *args], "rc": done.returncode, "output": done.stdout + done.stderr})
    settings: list[tuple[str, ...]] = [
        ("adopt", "true"),
        ("--plaintext", "capmoxExistingSecret", playbook_lab.CAPMOX_SECRET),
        ("certManagerChartRepo", f"{charts.url}/jetstack"),
        ("capiOperatorChartRepo", f"{charts.url}/capi-operator"),
    ]
    # docs/operations.md: read-only access to a workload cluster.
    settings += [("--path", f"workloadClusters[{index}]", cluster) for index, cluster in enumerate(workload_clusters)]
    return steps + [_step(engine, ("config", "set", *setting)) for setting in settings]


def adoption_of_an_incomplete_lab(root: str) -> dict[str, Any]:
    """The adoption preview on a lab that lacks one of the objects the program imports (the
    IPAMProvider): the preview must stop, creating nothing in its place."""
    base = Path(root)
    with (
        control_plane.running(base / "control-plane", VM_ADDRESS) as cluster,
        _operator_webhooks(cluster, base) as (webhook, injector),
    ):
        playbook_lab.lay_out(cluster, base / "manifests", _playbook_capmox_data(), chart_templates=CHART_TEMPLATES)
        cluster.kubectl(
            "delete", f"ipamprovider.{playbook_lab.PROVIDER_GROUP}", "in-cluster", "-n", "capi-ipam-in-cluster-system"
        )
        _handover(cluster, base, base / "manifests")
        with chart_repo_standin.serve(CHART_REPOS, base) as charts:
            engine, steps = _adopting(base, charts, cluster, workload_clusters=[])
            preview = _engine_run(engine, cluster, "preview")
        return {"steps": steps, "preview": preview, **_webhook_standins(webhook, injector)}


def adoption_run(root: str) -> dict[str, Any]:
    """docs/adoption.md's steps on the playbook's lab and lab1, as far as the box goes
    (e2e/box/box_program.py): the hand-over, the Helm client and the stack config, the adoption
    preview and `pulumi up`, then a second preview and up, which must find nothing to do; what
    the read-only kubeconfigs may do; then the convergence runs. Both clusters' objects are read
    before and after, and every write the engine sent is read from their audit logs."""
    base = Path(root)
    with (
        control_plane.running(base / "control-plane", VM_ADDRESS) as cluster,
        control_plane.running(base / "lab1", LAB1_ADDRESS) as lab1,
        operator_standin.running(cluster, playbook_lab.PROVIDER_RESOURCES, OPERATOR_INSTALL_SECONDS) as operator,
        _operator_webhooks(cluster, base) as (webhook, injector),
    ):
        manifests = base / "manifests"
        playbook_lab.lay_out(
            cluster, manifests, _playbook_capmox_data(), lab1.kubeconfig.read_text(), chart_templates=CHART_TEMPLATES
        )
        playbook_lab.lay_out_lab1(lab1)
        cluster.kubectl(
            *("wait", "--for=condition=Ready", ",".join(playbook_lab.PROVIDER_RESOURCES), "--all", "-A"),
            "--timeout=60s",
        )
        handover = _handover(cluster, base, manifests)
        before = playbook_lab.snapshot(cluster)
        lab1_before = playbook_lab.snapshot(lab1, playbook_lab.CORE_KINDS)
        lab1_mark = len(lab1.audit())
        with chart_repo_standin.serve(CHART_REPOS, base) as charts:
            engine, steps = _adopting(base, charts, cluster, workload_clusters=["default/lab1"])
            runs = [_engine_run(engine, cluster, action) for action in ("preview", "up", "preview", "up")]
            outputs = engine.outputs()
            readonly = _readonly_reads(
                cluster,
                base / "readonly.kubeconfig",
                outputs["readonlyKubeconfig"],
                coreproviders=("get", f"coreproviders.{playbook_lab.PROVIDER_GROUP}", "-A"),
            )
            lab1_readonly = _readonly_reads(
                lab1, base / "lab1-readonly.kubeconfig", outputs["workloadReadonlyKubeconfigs"]["lab1"]
            )
            lab1_writes = [request for request in _requests_since(lab1, lab1_mark) if request[0] in WRITES]
            adopted = playbook_lab.snapshot(cluster)
            convergence = _converge(engine, cluster, runs[1]["steps"])
            managed = _manage(engine, cluster, operator)
        return {
            "handover": handover,
            "steps": steps,
            "runs": runs,
            "provider_versions": outputs["providerVersions"],
            "secret_outputs": engine.secret_outputs(),
            "readonly": readonly,
            "lab1_readonly": lab1_readonly,
            "lab1_before": lab1_before,
            "lab1_after": playbook_lab.snapshot(lab1, playbook_lab.CORE_KINDS),
            "lab1_writes": lab1_writes,
            "chart_requests": charts.requests,
            "chart_unknown": charts.unknown,
            "before": before,
            "after": adopted,
            "convergence": convergence,
            "managed": managed,
            "operator_errors": operator.errors,
            **_webhook_standins(webhook, injector),
            "converged": playbook_lab.snapshot(cluster),
        }


# How long the operator stand-in takes to install a provider: long enough to tell a `pulumi up`
# that waits for it from one that does not.
OPERATOR_INSTALL_SECONDS = 5.0
BUMPED_CAPMOX = "v0.9.2"


def _manage(
    engine: Engine, cluster: control_plane.ControlPlane, operator: operator_standin.OperatorStandIn
) -> dict[str, Any]:
    """docs/operations.md on the adopted and converged stack: a provider version bump is one CR
    updated, and `pulumi up` returns once the operator has installed it; two bumps at once are
    refused at preview."""
    steps = [_step(engine, ("config", "set", "capmoxVersion", BUMPED_CAPMOX))]
    preview = _engine_run(engine, cluster, "preview")
    up = _engine_run(engine, cluster, "up")
    versions = engine.outputs()["providerVersions"]
    for setting in ("capiCoreVersion", "capiBootstrapVersion"):
        steps.append(_step(engine, ("config", "set", setting, "v1.12.12")))
    return {
        "steps": steps,
        "preview": preview,
        "up": up,
        "reconciled_during_up": [
            entry for entry in operator.reconciled if up["started"] <= entry["at"] <= up["finished"]
        ],
        "provider_versions": versions,
        "two_bumps": _engine_run(engine, cluster, "preview"),
    }


def fresh_install(root: str) -> dict[str, Any]:
    """The program's own first run on an empty cluster (no adoption), then a second one."""
    base = Path(root)
    with (
        control_plane.running(base / "control-plane", VM_ADDRESS) as cluster,
        operator_standin.running(cluster, playbook_lab.PROVIDER_RESOURCES, OPERATOR_INSTALL_SECONDS) as operator,
        _operator_webhooks(cluster, base) as (webhook, injector),
    ):
        repos = {
            "jetstack": CHART_REPOS["jetstack"],
            "capi-operator": [
                chart_repo_standin.Chart(
                    "cluster-api-operator",
                    playbook_lab.PLAYBOOK_CHARTS["cluster-api-operator"][2],
                    tuple(playbook_lab.provider_crd(kind) for kind in playbook_lab.PROVIDERS),
                    CHART_TEMPLATES["cluster-api-operator"],
                )
            ],
        }
        with chart_repo_standin.serve(repos, base) as charts:
            engine = _box_engine(base, charts, cluster)
            steps = _readme_first_run(engine, _lab_secrets())
            for setting in (
                ("certManagerChartRepo", f"{charts.url}/jetstack"),
                ("capiOperatorChartRepo", f"{charts.url}/capi-operator"),
            ):
                steps.append(_step(engine, ("config", "set", *setting)))
            runs = [_engine_run(engine, cluster, action) for action in ("preview", "up", "preview", "up")]
        return {
            "steps": steps,
            "runs": runs,
            "operator_errors": operator.errors,
            "reconciled": operator.reconciled,
            **_webhook_standins(webhook, injector),
        }


def _readonly_reads(
    cluster: control_plane.ControlPlane, path: Path, kubeconfig: str, **more: tuple[str, ...]
) -> dict[str, Any]:
    """What a read-only kubeconfig of the stack may do: the reads in `more` and listing pods; not
    listing Secrets nor deleting a namespace."""
    path.write_text(kubeconfig)
    path.chmod(0o600)
    attempts = {
        "pods": ("get", "pods", "-A"),
        **more,
        "secrets": ("get", "secrets", "-A"),
        "delete namespace": ("delete", "namespace", "kube-system", "--dry-run=server"),
    }
    results = {}
    for name, args in attempts.items():
        done = cluster.kubectl_as(path, *args)
        results[name] = {"rc": done.returncode, "stderr": done.stderr}
    return results


def _converge(
    engine: Engine, cluster: control_plane.ControlPlane, adoption_steps: list[dict[str, str]]
) -> dict[str, Any]:
    """docs/adoption.md step 8, as far as the box goes (the image and the VM are not in it): adoption
    off, then one targeted run per group, each previewed first, then a preview of everything."""
    urns = {step["urn"].rsplit("::", 1)[1]: step["urn"] for step in adoption_steps}
    secret_urn = urns["mgmt-ns-capmox-system"].replace(
        "kubernetes:core/v1:Namespace::mgmt-ns-capmox-system", "kubernetes:core/v1:Secret::mgmt-capmox-credentials"
    )
    groups = {
        "releases": list(RELEASE_RESOURCES),
        "provider CRs": list(PROVIDER_CR_RESOURCES),
        "namespaces": [f"mgmt-ns-{namespace}" for namespace, _, _ in playbook_lab.PROVIDERS.values()],
    }
    steps = [_step(engine, ("config", "set", "adopt", "false"))]
    runs: dict[str, list[dict[str, Any]]] = {}
    for group, names in groups.items():
        targets = [urns[name] for name in names]
        runs[group] = [_engine_run(engine, cluster, action, targets) for action in ("preview", "up")]
    steps.append(_step(engine, ("config", "rm", "capmoxExistingSecret")))
    targets = [secret_urn, urns["mgmt-infrastructure-proxmox"]]
    runs["CAPMOX Secret"] = [_engine_run(engine, cluster, action, targets) for action in ("preview", "up")]
    runs["everything"] = [_engine_run(engine, cluster, "preview")]
    providers = {
        kind: json.loads(
            cluster.kubectl(
                "get", f"{kind.lower()}.{playbook_lab.PROVIDER_GROUP}", name, "-n", namespace, "-o", "json"
            ).stdout
        )
        for kind, (namespace, name, _) in playbook_lab.PROVIDERS.items()
    }
    webhooks = {
        kind: json.loads(cluster.kubectl("get", kind, name, "-o", "json").stdout)
        for kind, name in admission_webhook_standin.CONFIGURATION_NAMES.items()
    }
    return {"steps": steps, "runs": runs, "providers": providers, "webhook_configurations": webhooks}


def _requests_since(cluster: control_plane.ControlPlane, mark: int) -> list[list[Any]]:
    """What the box's admin (scripts, kubectl, the engine) asked after the audit log's `mark`;
    the API server's own upkeep is left out."""
    return [
        _request(event)
        for event in cluster.audit()[mark:]
        if event.get("user", {}).get("username") == control_plane.ADMIN_USER
        # A preview's server-side dry runs change nothing.
        and "dryRun=All" not in event.get("requestURI", "")
    ]


def _request(event: dict[str, Any]) -> list[Any]:
    """[verb, resource, name, what was sent (patches only)] of an audit event."""
    ref = event.get("objectRef", {})
    sent = event.get("requestObject") if event["verb"] == "patch" else None
    return [event["verb"], ref.get("resource", ""), ref.get("name", ""), sent]


def vm_lifecycle(root: str) -> dict[str, Any]:
    """The program's image and VM (e2e/box/box_vm_program.py) under the real engine and proxmoxve
    plugin, against the Proxmox VE API stand-in at the lab's address, the image served by a
    box-local HTTPS server: a preview, the first `up` (download, create, start), a second `up`,
    more cores, the protection lifted, and `destroy`; each run with the API calls it made
    ([method, path, parameter names])."""
    base = Path(root)
    # The CLI takes engine.run's --event-log only with its debug commands on.
    engine = fresh_engine(
        base / "engine", extra_env={"PULUMI_DEBUG_COMMANDS": "true"}, main=REPO / "e2e" / "box" / "box_vm_program.py"
    )
    steps = _readme_first_run(engine, _lab_secrets())
    image = base / "images" / "noble" / "20260926" / "noble-server-cloudimg-amd64.img"
    image.parent.mkdir(parents=True)
    image.write_bytes(b"QFI\xfb" + bytes(range(256)) * 4096)
    key, cert = https_server.self_signed_certificate(base, "images", "127.0.0.1")
    tokens: dict[tuple[str, str], dict[str, dict[str, int]]] = {(PROGRAM_TOKEN, PROGRAM_SECRET): {}}
    runs: dict[str, dict[str, Any]] = {}
    with (
        https_server.serving_files(base / "images", ("127.0.0.1", 0), key, cert) as files,
        pve_api_standin.serve(tokens, base, (PROXMOX_ADDRESS, PROXMOX_PORT), trusted_certificates=cert) as standin,
    ):
        url = f"https://127.0.0.1:{files.server_address[1]}/{image.relative_to(base / 'images')}"
        digest = hashlib.sha256(image.read_bytes()).hexdigest()
        for name, value in {"skipCredentialsCheck": "true", "imageUrl": url, "imageSha256": digest}.items():
            steps.append(_step(engine, ("config", "set", name, value)))
        runs["preview"] = _vm_run(engine, standin, "preview")
        runs["first up"] = _vm_run(engine, standin, "up")
        runs["second preview"] = _vm_run(engine, standin, "preview", "--diff")
        runs["second up"] = _vm_run(engine, standin, "up")
        steps.append(_step(engine, ("config", "set", "vmCores", "4")))
        runs["cores"] = _vm_run(engine, standin, "up")
        steps.append(_step(engine, ("config", "set", "vmProtected", "false")))
        runs["unprotect"] = _vm_run(engine, standin, "up")
        runs["destroy"] = _vm_run(engine, standin, "destroy", "--yes")
    return {"steps": steps, "runs": runs, "unknown": standin.unknown}


def _vm_run(engine: Engine, standin: pve_api_standin.PveApiStandIn, action: str, *args: str) -> dict[str, Any]:
    mark = len(standin.calls)
    run = engine.run(action, *args)
    return {
        "rc": run.rc,
        "output": run.output,
        "steps": run.steps(),
        "summary": run.summary(),
        "warnings": run.diagnostics("warning"),
        "calls": [[call.method, call.path, list(call.params)] for call in standin.calls[mark:]],
    }


# The VM as a real host (e2e/standins/guest/guest.py) with k3s from the box's releases
# (e2e/standins/guest/k3s_release_standin.py).
GATEWAY = "192.168.4.8"
VMID = 201
K3S_VERSION = "v1.35.8+k3s1"
K3S_BUMP = "v1.35.9+k3s1"
HOST_STEPS = (
    *("host_ready.sh", "keep_host_keys.sh", "guest_agent.sh", "k3s_config.sh"),
    *("k3s_install.sh", "node_ready.sh", "read_kubeconfig.sh"),
)


def _vm_config(keys: list[Path]) -> dict[str, str]:
    """VM 201 as Proxmox hands its config to the box (strings; sshkeys URL-encoded)."""
    return {
        "name": "lab-mgmt",
        "ciuser": "ubuntu",
        "sshkeys": quote("".join(key.with_suffix(".pub").read_text() for key in keys), safe=""),
        "ipconfig0": f"ip={VM_ADDRESS}/24,gw={GATEWAY}",
        "nameserver": "8.8.8.8 2.2.2.2",
        "net0": "virtio=BC:24:11:5E:00:C9,bridge=vmbr0,tag=4",
        "agent": "1",
        "cores": "2",
        "memory": "4096",
    }


def _ssh(
    key: Path,
    known_hosts: Path | None,
    command: str,
    *,
    booting: bool = False,
    stdin: str | None = None,
    address: str = VM_ADDRESS,
) -> dict[str, Any]:
    """One command over real ssh to the VM at `address` as the program's connection makes it: the
    host key unchecked (`known_hosts` None, the first step) or pinned. While `booting`, a refused or
    unrouted connection is dialled again, as the provider does. `stdin` is what the command reads
    (a script for `bash -s`, as docs/adoption.md sends the hand-over)."""
    pinned = ["-o", f"UserKnownHostsFile={known_hosts}", "-o", "StrictHostKeyChecking=yes"] if known_hosts else []
    unpinned = ["-o", "UserKnownHostsFile=/dev/null", "-o", "StrictHostKeyChecking=no"]
    argv = [
        *("ssh", "-F", "/dev/null", "-i", str(key), "-o", "IdentitiesOnly=yes", "-o", "BatchMode=yes"),
        *("-o", "ConnectTimeout=10", *(pinned or unpinned), f"ubuntu@{address}", command),
    ]
    started = time.monotonic()
    while True:
        done = subprocess.run(argv, input=stdin, capture_output=True, text=True, timeout=600, check=False)
        dialled_too_early = done.returncode == 255 and "connect to host" in done.stderr
        if not (booting and dialled_too_early and time.monotonic() - started < 120):
            break
        time.sleep(0.5)
    return {"rc": done.returncode, "stdout": done.stdout, "stderr": done.stderr, "seconds": time.monotonic() - started}


def _host_step(key: Path, known_hosts: Path | None, script: str, *args: str, booting: bool = False) -> dict[str, Any]:
    """A host script as components/host_script.py sends it."""
    return {"script": script, **_ssh(key, known_hosts, script_command(script, *args), booting=booting)}


def _pin(known_hosts: Path, host_ready: dict[str, Any]) -> str:
    host_key = str(host_ready["stdout"]).strip()
    known_hosts.write_text(f"{VM_ADDRESS} {host_key}\n")
    return host_key


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def _calls(guests: guest.Guests, since: int = 0) -> list[list[str]]:
    return [json.loads(line)["argv"] for line in _lines(guests.logs(VMID) / "calls.log")[since:]]


def _node(key: Path, known_hosts: Path) -> dict[str, Any]:
    done = _ssh(key, known_hosts, "sudo k3s kubectl get node lab-mgmt -o json")
    node: dict[str, Any] = json.loads(done["stdout"]) if done["rc"] == 0 else {"error": done["stderr"]}
    return node


def _first_run(guests: guest.Guests, base: Path, key: Path, known_hosts: Path) -> dict[str, Any]:
    """The host scripts in the program's order on a new VM, then kubectl with the program's
    rewrite of the kubeconfig they read."""
    started = time.monotonic()
    guests.start(VMID, _vm_config([key]))
    agent_before = guests.agent_interfaces(VMID)
    steps = [_host_step(key, None, "host_ready.sh", booting=True)]
    host_key = _pin(known_hosts, steps[0])
    steps += [_host_step(key, known_hosts, script, *_step_args(script)) for script in HOST_STEPS[1:]]
    seconds = time.monotonic() - started
    kubeconfig = base / "lab-mgmt.kubeconfig"
    kubeconfig.write_text(rename_k3s_kubeconfig(steps[-1]["stdout"], VM_ADDRESS, "lab-mgmt"))
    kubectl = built_bin("LAB_MGMT_CONTROL_PLANE_BIN", "kubectl") / "kubectl"
    namespaces = subprocess.run(
        [str(kubectl), f"--kubeconfig={kubeconfig}", "get", "namespaces", "-o", "name"],
        env={"PATH": "/usr/bin:/bin", "HOME": str(base)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return {
        "steps": steps,
        "seconds": seconds,
        "host_key": host_key,
        "agent_before": agent_before,
        "agent_after": guests.agent_interfaces(VMID),
        "namespaces": {"rc": namespaces.returncode, "stdout": namespaces.stdout, "stderr": namespaces.stderr},
        "node": _node(key, known_hosts),
    }


def _step_args(script: str, version: str = K3S_VERSION) -> list[str]:
    config_b64 = base64.b64encode(render_k3s_config(VM_ADDRESS).encode()).decode()
    return {"k3s_config.sh": [config_b64], "k3s_install.sh": [version], "node_ready.sh": ["300", version]}.get(
        script, []
    )


def _observed(guests: guest.Guests, key: Path, known_hosts: Path, scripts: list[tuple[str, str]]) -> dict[str, Any]:
    """(script, k3s version) steps on the running VM, with the stand-in calls and installer runs
    they caused."""
    calls, installs = len(_calls(guests)), len(_lines(guests.logs(VMID) / "installer.log"))
    started = time.monotonic()
    steps = [_host_step(key, known_hosts, script, *_step_args(script, version)) for script, version in scripts]
    return {
        "steps": steps,
        "seconds": time.monotonic() - started,
        "calls": _calls(guests, calls),
        "installs": _lines(guests.logs(VMID) / "installer.log")[installs:],
    }


def _reboots(guests: guest.Guests, keys: list[Path], known_hosts: Path) -> dict[str, Any]:
    """A shutdown and start, then a start with another key (a new instance id), then the VM
    destroyed and created again."""
    key, second_key = keys
    guests.stop(VMID)
    agent_stopped = guests.agent_interfaces(VMID)
    started = time.monotonic()
    guests.start(VMID, _vm_config([key]))
    reboot = [
        _host_step(key, None, "host_ready.sh", booting=True),
        # The scenario bumped k3s before it reboots the VM.
        _host_step(key, known_hosts, "node_ready.sh", *_step_args("node_ready.sh", K3S_BUMP)),
    ]
    reboot_seconds = time.monotonic() - started
    guests.stop(VMID)
    guests.start(VMID, _vm_config([key, second_key]))
    new_instance = _host_step(second_key, None, "host_ready.sh", booting=True)
    new_instance_first_key = _ssh(key, None, "true")
    guests.destroy(VMID)
    guests.start(VMID, _vm_config([key]))
    return {
        "agent_stopped": agent_stopped,
        "reboot": reboot,
        "reboot_seconds": reboot_seconds,
        "new_instance": new_instance,
        "new_instance_first_key": new_instance_first_key,
        "recreated": _host_step(key, None, "host_ready.sh", booting=True),
        "recreated_pinned": _ssh(key, known_hosts, "true"),
    }


def box_guest(root: str) -> dict[str, Any]:
    """VM 201 as a real host: the program's host scripts in order over real ssh, again (changing
    nothing), a k3s version bump, a wrong key, a reboot, a new instance id and a re-created VM."""
    base = Path(root)
    key, wrong_key, second_key = (base / name for name in ("id_ed25519", "wrong", "second"))
    for path in (key, wrong_key, second_key):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", path.name, "-f", str(path)], check=True)
    known_hosts = base / "known_hosts"
    guest.add_bridge("vmbr0", f"{GATEWAY}/24")
    with (
        k3s_release_standin.serve([K3S_VERSION, K3S_BUMP], base, GATEWAY) as releases,
        guest.Guests(base / "guests", hosts=releases.hosts, trusted=[releases.certificate]) as guests,
    ):
        result: dict[str, Any] = {"first_run": _first_run(guests, base, key, known_hosts)}
        result["second_run"] = _observed(guests, key, known_hosts, [(script, K3S_VERSION) for script in HOST_STEPS])
        result["wrong_key"] = _ssh(wrong_key, known_hosts, "true")
        result["bump"] = _observed(
            guests, key, known_hosts, [("k3s_install.sh", K3S_BUMP), ("node_ready.sh", K3S_BUMP)]
        )
        result["bump_version"] = _ssh(key, known_hosts, "k3s --version")
        result["bump_node"] = _node(key, known_hosts)
        result["reboots"] = _reboots(guests, [key, second_key], known_hosts)
        result["sshd_log"] = (guests.logs(VMID) / "sshd.log").read_text()
        result["release_requests"] = releases.requests
        result["release_unknown"] = releases.unknown
    return result
