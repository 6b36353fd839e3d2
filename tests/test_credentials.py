"""Both Proxmox API tokens proven at preview: their format, the one permissions call per token
(wired under mocks, and for real over HTTPS against a loopback stand-in), and the messages,
which name the key, the token id and what is missing, and never a secret."""

from __future__ import annotations

import re
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import harness
import pytest
from test_settings import lab_raw

from components import credentials, proxmox_api
from components.credentials import CredentialsError, TokenRejectedError, read_permissions
from components.settings import SettingsError, parse_settings
from e2e.standins.proxmox import pve_api_standin

PROGRAM_TOKEN = "pulumi@pve!lab-mgmt"
CAPMOX_TOKEN = "capmox@pve!capi"
PROGRAM_SECRET = harness.DUMMY_SECRETS["proxmoxApiTokenSecret"]
CAPMOX_SECRET = harness.DUMMY_SECRETS["capmoxTokenSecret"]
WRONG_SECRET = "deadbeef-0000-4000-8000-000000000000"
# PVETemplateUser on the pool of CAPMOX's templates, which holds lab1's: what Proxmox VE computes on
# the template for a pool's member (never propagated), which components.clone_sources asks for.
[LAB1] = harness.stack_workload_clusters()
ON_THE_TEMPLATE = {f"/vms/{LAB1['templateVmId']}": {"VM.Audit": 0, "VM.Clone": 0}}


def failure(tokens: harness.TokenTable, **overrides: object) -> str:
    """The message of a run that the token check stops, which must register nothing."""
    record = harness.Run()
    with pytest.raises(CredentialsError) as raised:
        harness.run_program(overrides, tokens=tokens, record=record)
    assert [key for key in record.resources if key[0] != "pulumi:pulumi:Stack"] == []
    message = str(raised.value)
    for secret in (PROGRAM_SECRET, CAPMOX_SECRET, WRONG_SECRET):
        assert secret not in message
    return message


def without(privilege: str) -> dict[str, dict[str, int]]:
    return {"/": {p: 1 for p in harness.FULL_PERMISSIONS["/"] if p != privilege}}


# --- format ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "value"),
    [("proxmoxApiTokenSecret", "truthy"), ("capmoxTokenSecret", "x y"), ("capmoxTokenSecret", PROGRAM_SECRET + "0")],
)
def test_a_token_secret_that_is_no_uuid_is_refused_without_echoing_it(key: str, value: str) -> None:
    with pytest.raises(SettingsError) as raised:
        parse_settings(lab_raw(**{key: value}))
    assert f"lab-mgmt:{key}: is not a Proxmox API token secret" in str(raised.value)
    assert value not in str(raised.value)


def test_uuid_token_secrets_pass() -> None:
    settings = parse_settings(lab_raw(proxmoxApiTokenSecret=PROGRAM_SECRET.upper()))
    assert settings.proxmox.api_token_secret == PROGRAM_SECRET.upper()


# --- wiring, under mocks -----------------------------------------------------------------------


def test_each_token_is_checked_once_against_the_configured_endpoint() -> None:
    run = harness.run_program()
    # Both at once: in either order.
    assert sorted(run.permission_calls) == sorted(
        [
            ("https://192.168.0.8:8006/", PROGRAM_TOKEN, PROGRAM_SECRET, True),
            ("https://192.168.0.8:8006/", CAPMOX_TOKEN, CAPMOX_SECRET, True),
        ]
    )


def test_the_check_honours_proxmox_insecure() -> None:
    run = harness.run_program({"proxmoxInsecure": False})
    assert {call[3] for call in run.permission_calls} == {False}


def test_a_rejected_capmox_token_stops_the_run_naming_it() -> None:
    message = failure({(PROGRAM_TOKEN, PROGRAM_SECRET): harness.FULL_PERMISSIONS})
    assert f"lab-mgmt:capmoxTokenSecret (token {CAPMOX_TOKEN}): rejected by https://192.168.0.8:8006/" in message
    assert "proxmoxApiTokenSecret" not in message


def test_a_missing_privilege_of_the_programs_token_is_named() -> None:
    message = failure(
        {
            (PROGRAM_TOKEN, PROGRAM_SECRET): without("VM.Allocate"),
            (CAPMOX_TOKEN, CAPMOX_SECRET): harness.FULL_PERMISSIONS,
        }
    )
    assert message.endswith(f"lab-mgmt:proxmoxApiTokenSecret (token {PROGRAM_TOKEN}): lacks VM.Allocate on /vms/201")


def test_both_tokens_problems_come_in_one_message() -> None:
    message = failure({(PROGRAM_TOKEN, PROGRAM_SECRET): without("Sys.Modify")})
    assert "proxmoxApiTokenSecret (token pulumi@pve!lab-mgmt): lacks Sys.Modify on /" in message
    assert "capmoxTokenSecret (token capmox@pve!capi): rejected" in message


def test_a_role_on_root_without_propagation_fails_naming_each_path_where_it_is_used() -> None:
    """`pveum acl modify / ... -propagate 0` grants on `/` alone: the VM, its storages, the node and
    the bridge, where Proxmox checks the privileges, get none of them."""
    unpropagated = {"/": dict.fromkeys(harness.FULL_PERMISSIONS["/"], 0)}
    message = failure(
        {(PROGRAM_TOKEN, PROGRAM_SECRET): unpropagated, (CAPMOX_TOKEN, CAPMOX_SECRET): harness.FULL_PERMISSIONS}
    )
    for missing in (
        "VM.Allocate on /vms/201",
        "VM.Config.Cloudinit on /vms/201",
        "Datastore.AllocateSpace on /storage/local-lvm",
        "Datastore.AllocateTemplate on /storage/local",
        "Sys.Modify on /nodes/pv1-1",
        "SDN.Use on /sdn/zones/localnetwork/vmbr0/4",
    ):
        assert missing in message
    # What holds on / itself is not missing.
    assert "on /," not in message
    assert not message.endswith(" on /")


def test_privileges_granted_where_they_are_used_pass() -> None:
    """The narrowest grant that works: each privilege on its own path, propagated only where the
    path is a parent (the VLAN below the bridge)."""
    paths = credentials.program_paths(parse_settings(lab_raw()))
    narrow = {path: dict.fromkeys(privileges, 0) for path, privileges in paths.items()}
    bridge = "/sdn/zones/localnetwork/vmbr0"
    narrow[bridge] = narrow.pop(f"{bridge}/4") | {"SDN.Use": 1}
    run = harness.run_program(
        tokens={(PROGRAM_TOKEN, PROGRAM_SECRET): narrow, (CAPMOX_TOKEN, CAPMOX_SECRET): harness.FULL_PERMISSIONS}
    )
    assert len(run.permission_calls) == 2


@pytest.mark.parametrize(
    ("permissions", "path", "held"),
    [
        ({"/": {"VM.Audit": 1}}, "/vms/201", True),
        ({"/": {"VM.Audit": 0}}, "/vms/201", False),
        ({"/": {"VM.Audit": 0}}, "/", True),
        # A deeper entry is what Proxmox computed there: it decides, not the root.
        ({"/": {"VM.Audit": 1}, "/vms": {"VM.Console": 1}}, "/vms/201", False),
        ({"/vms/201": {"VM.Audit": 0}}, "/vms/201", True),
        ({"/vms/2011": {"VM.Audit": 1}}, "/vms/201", False),
    ],
    ids=["propagated", "not-propagated", "on-the-path-itself", "deeper-entry-decides", "exact", "sibling"],
)
def test_where_a_privilege_holds(permissions: credentials.Permissions, path: str, held: bool) -> None:
    assert credentials.holds(permissions, path, "VM.Audit") is held


def test_capmox_least_privilege_layout_passes() -> None:
    """CAPMOX's documented least-privilege ACLs: Sys.Audit on `/`, the rest on its pools and
    storages, whose paths are the owner's choice."""
    least = {
        "/": {"Sys.Audit": 0},
        "/pool/capi": {
            **{p: 0 for p in credentials.CAPMOX_PRIVILEGES if not p.startswith("Datastore.")},
            "VM.GuestAgent.Unrestricted": 0,  # PVEVMAdmin's, on Proxmox VE 9
        },
        "/storage/capi_files": {
            **dict.fromkeys(("Datastore.Allocate", "Datastore.AllocateTemplate", "Datastore.Audit"), 0),
            "Datastore.AllocateSpace": 0,
        },
        **ON_THE_TEMPLATE,
    }
    run = harness.run_program(
        tokens={(PROGRAM_TOKEN, PROGRAM_SECRET): harness.FULL_PERMISSIONS, (CAPMOX_TOKEN, CAPMOX_SECRET): least}
    )
    assert len(run.permission_calls) == 2


@pytest.mark.parametrize("guest_agent", ["VM.Monitor", "VM.GuestAgent.Unrestricted", None])
def test_capmox_token_needs_the_guest_agent_by_either_name(guest_agent: str | None) -> None:
    """CAPMOX asks each VM's guest agent for cloud-init's status: Proxmox VE 8's VM.Monitor or 9's
    VM.GuestAgent.Unrestricted; VM.GuestAgent.Audit alone cannot run the agent's exec."""
    held = dict.fromkeys((*credentials.CAPMOX_ROOT_PRIVILEGES, *credentials.CAPMOX_PRIVILEGES), 0)
    held |= {"VM.GuestAgent.Audit": 0} | ({guest_agent: 0} if guest_agent else {})
    capmox = {"/": held, **ON_THE_TEMPLATE}
    tokens = {(PROGRAM_TOKEN, PROGRAM_SECRET): harness.FULL_PERMISSIONS, (CAPMOX_TOKEN, CAPMOX_SECRET): capmox}
    if guest_agent is not None:
        harness.run_program(tokens=tokens)
        return
    assert failure(tokens).endswith(
        f"lab-mgmt:capmoxTokenSecret (token {CAPMOX_TOKEN}): lacks VM.Monitor or VM.GuestAgent.Unrestricted "
        "(by its name on Proxmox VE 8 or 9)"
    )


def test_capmox_token_without_sys_audit_on_root_fails() -> None:
    nodes_only = {"/nodes": dict(harness.FULL_PERMISSIONS["/"])}
    message = failure(
        {(PROGRAM_TOKEN, PROGRAM_SECRET): harness.FULL_PERMISSIONS, (CAPMOX_TOKEN, CAPMOX_SECRET): nodes_only}
    )
    assert message.endswith(f"lab-mgmt:capmoxTokenSecret (token {CAPMOX_TOKEN}): lacks Sys.Audit on /")


def test_the_check_can_be_skipped() -> None:
    run = harness.run_program({"skipCredentialsCheck": True}, tokens={})
    assert run.permission_calls == []
    assert run.resources


def test_an_unreachable_api_says_how_to_skip(monkeypatch: pytest.MonkeyPatch) -> None:
    def unreachable(endpoint: str, token_id: str, token_secret: str, *, insecure: bool) -> credentials.Permissions:
        raise CredentialsError(f"cannot check token {token_id} at {endpoint}: timed out")

    settings = parse_settings(lab_raw())
    monkeypatch.setattr(credentials, "read_permissions", unreachable)
    with pytest.raises(CredentialsError) as raised:
        credentials.verify_tokens(settings)
    assert "set lab-mgmt:skipCredentialsCheck true to skip this check" in str(raised.value)


def test_both_tokens_are_checked_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """The run waits for the slower of the two round trips, not for both one after the other."""
    both_asking = threading.Barrier(2, timeout=10)

    def waiting_for_the_other(
        endpoint: str, token_id: str, token_secret: str, *, insecure: bool
    ) -> credentials.Permissions:
        both_asking.wait()
        return harness.FULL_PERMISSIONS

    monkeypatch.setattr(credentials, "read_permissions", waiting_for_the_other)
    credentials.verify_tokens(parse_settings(lab_raw()))


# --- the real HTTPS call, against the loopback stand-in -----------------------------------------


@pytest.fixture
def standin(tmp_path: Path) -> Iterator[pve_api_standin.PveApiStandIn]:
    tokens = {(PROGRAM_TOKEN, PROGRAM_SECRET): harness.FULL_PERMISSIONS}
    with pve_api_standin.serve(tokens, tmp_path) as running:
        yield running
    assert running.unknown == [], "the program called the API for something the stand-in does not know"


def test_permissions_are_read_over_https_in_one_call(standin: pve_api_standin.PveApiStandIn) -> None:
    assert read_permissions(standin.url, PROGRAM_TOKEN, PROGRAM_SECRET, insecure=True) == harness.FULL_PERMISSIONS
    assert standin.requests == [("GET", pve_api_standin.PERMISSIONS_PATH)]


def test_a_wrong_secret_is_rejected_over_https(standin: pve_api_standin.PveApiStandIn) -> None:
    with pytest.raises(TokenRejectedError) as raised:
        read_permissions(standin.url, PROGRAM_TOKEN, WRONG_SECRET, insecure=True)
    assert WRONG_SECRET not in str(raised.value)


def test_a_self_signed_certificate_is_refused_unless_insecure(standin: pve_api_standin.PveApiStandIn) -> None:
    with pytest.raises(CredentialsError) as raised:
        read_permissions(standin.url, PROGRAM_TOKEN, PROGRAM_SECRET, insecure=False)
    assert "CERTIFICATE_VERIFY_FAILED" in str(raised.value)
    assert PROGRAM_SECRET not in str(raised.value)


def test_a_silent_api_is_bounded_in_time(monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)  # accepts the connection, never answers
        monkeypatch.setattr(proxmox_api, "REQUEST_TIMEOUT_SECONDS", 0.5)
        with pytest.raises(CredentialsError) as raised:
            read_permissions(
                f"https://127.0.0.1:{listener.getsockname()[1]}/", PROGRAM_TOKEN, PROGRAM_SECRET, insecure=True
            )
    assert "timed out" in str(raised.value)


def test_harness_never_lets_the_program_reach_the_lab() -> None:
    """The mocks runs answer the permissions call themselves: the real function is restored
    after each run and is never what a run called."""
    run = harness.run_program()
    assert credentials.read_permissions is read_permissions
    assert run.permission_calls, "the run must have gone through the stand-in table"


# --- the roles the README creates -----------------------------------------------------------------

README = (Path(__file__).resolve().parent.parent / "README.md").read_text()
# The roles Proxmox VE ships (pveum role list on 8.4 and 9).
PVE_BUILT_IN_ROLES = {
    *("Administrator", "NoAccess", "PVEAdmin", "PVEAuditor", "PVEDatastoreAdmin", "PVEDatastoreUser"),
    *("PVEMappingAdmin", "PVEMappingUser", "PVEPoolAdmin", "PVEPoolUser", "PVESDNAdmin", "PVESDNUser"),
    *("PVESysAdmin", "PVETemplateUser", "PVEUserAdmin", "PVEVMAdmin", "PVEVMUser"),
}


def test_the_readme_creates_the_role_for_proxmox_ve_8_and_9() -> None:
    """Proxmox VE 9 rejects VM.Monitor: its command must leave it out, and both must grant what
    the check requires."""
    pve8, pve9 = (set(privs.split()) for privs in re.findall(r'pveum role add LabMgmt -privs "([^"]+)"', README))
    required = set(credentials.PROGRAM_PRIVILEGES)
    assert pve8 - required == {"VM.Monitor"}
    assert pve9 - required == {"VM.GuestAgent.Audit"}
    assert required <= pve8 & pve9


def test_every_built_in_role_named_exists() -> None:
    source = (Path(credentials.__file__)).read_text()
    named = set(re.findall(r"\bPVE[A-Za-z]+", README + source)) - {"PVEAPIToken"}
    assert named, "the README names the roles CAPMOX needs"
    assert named - PVE_BUILT_IN_ROLES == set()
