"""The lab's own network, as the workload clusters must keep clear of it.

The management VM's subnet, address and gateway, the Proxmox VE API's address and the DNS
servers, taken from the management side's settings: no workload cluster's node or VIP may take
one of the lab's hosts, and no pod or service network may overlap one of its networks.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass
from urllib.parse import urlparse

from components.settings.config import is_ip_address
from components.settings.management import ProxmoxSettings, VmSettings


@dataclass(frozen=True)
class LabNetwork:
    """What a workload cluster's defaults and network checks take from the rest of the settings."""

    proxmox_node: str
    bridge: str
    networks: tuple[tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, str], ...]
    """The lab's networks and addresses a pod or service network must not overlap, each described."""
    hosts: tuple[tuple[ipaddress.IPv4Address, str], ...]
    """The lab's own hosts, whose addresses no workload cluster's node or VIP may take, each described."""


def lab_network_of(proxmox: ProxmoxSettings, vm: VmSettings) -> LabNetwork:
    networks: list[tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, str]] = [
        (vm.address.network, f"the management VM's subnet {vm.address.network} (vmAddress)")
    ]
    hosts = [
        (vm.address.ip, f"the management VM's address {vm.address.ip} (vmAddress)"),
        (vm.gateway, f"the lab's gateway {vm.gateway} (vmGateway)"),
    ]
    host = urlparse(proxmox.endpoint).hostname or ""
    if is_ip_address(host):
        networks.append((ipaddress.ip_network(host), f"the Proxmox VE API's address {host} (proxmoxEndpoint)"))
        hosts += ipv4_hosts([host], "the Proxmox VE API's address {} (proxmoxEndpoint)")
    networks += [
        (ipaddress.ip_network(d), f"the DNS server {d} (vmDnsServers)") for d in vm.dns_servers if is_ip_address(d)
    ]
    hosts += ipv4_hosts(vm.dns_servers, "the DNS server {} (vmDnsServers)")
    return LabNetwork(proxmox.node, vm.bridge, tuple(networks), tuple(hosts))


def ipv4_hosts(texts: Sequence[str], what: str) -> list[tuple[ipaddress.IPv4Address, str]]:
    """Each IPv4 address of `texts`, described by `what` with the address in its `{}`."""
    addresses = [ipaddress.ip_address(text) for text in texts if is_ip_address(text)]
    return [(address, what.format(address)) for address in addresses if isinstance(address, ipaddress.IPv4Address)]
