"""qemu-guest-agent in a box guest (e2e/standins/guest/guest.py): listens on the guest's virtio port (a Unix
socket that the box, as QEMU, connects to) and answers QGA's `guest-ping` and
`guest-network-get-interfaces`, the latter from the guest's real interfaces (`ip -j addr`), as
qemu-ga reads them. Any other command gets QGA's CommandNotFound error. One JSON request a line.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

from e2e.standins.guest.guest import QGA_PORT, VIRTIO_DIR, record_call


def interfaces() -> list[dict[str, Any]]:
    listed = json.loads(subprocess.run(["ip", "-j", "addr"], capture_output=True, text=True, check=True).stdout)
    return [
        {
            "name": link["ifname"],
            "hardware-address": link.get("address", "00:00:00:00:00:00"),
            "ip-addresses": [
                {
                    "ip-address-type": "ipv4" if address["family"] == "inet" else "ipv6",
                    "ip-address": address["local"],
                    "prefix": address["prefixlen"],
                }
                for address in link.get("addr_info", [])
            ],
        }
        for link in listed
    ]


def answer(request: dict[str, Any]) -> dict[str, Any]:
    command = request.get("execute")
    if command == "guest-ping":
        return {"return": {}}
    if command == "guest-network-get-interfaces":
        return {"return": interfaces()}
    return {"error": {"class": "CommandNotFound", "desc": f"The command {command} has not been found"}}


def main() -> int:
    port = Path(VIRTIO_DIR, QGA_PORT)
    if not port.parent.is_dir():
        print(f"qemu-ga stand-in: no virtio port {port.parent}: the VM has no agent device", file=sys.stderr)
        return 1
    port.unlink(missing_ok=True)
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as server:
        server.bind(str(port))
        server.listen()
        while True:
            connection, _ = server.accept()
            with connection, connection.makefile("rwb") as stream:
                for line in stream:
                    request = json.loads(line)
                    reply = answer(request)
                    record_call(["qemu-ga", str(request.get("execute"))], 0 if "return" in reply else 1)
                    stream.write(json.dumps(reply).encode() + b"\n")
                    stream.flush()


if __name__ == "__main__":
    sys.exit(main())
