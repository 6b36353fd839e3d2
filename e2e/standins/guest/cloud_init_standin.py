"""cloud-init's `status` in a box guest (e2e/standins/guest/guest.py), whose boot does cloud-init's work itself and
writes /run/cloud-init/result.json when the final stage ends: `cloud-init status [--wait] [--long]`
answers from it with cloud-init's exit codes (0 done, 1 errors, 2 done with recoverable errors,
which Proxmox's user-data always causes). Anything else fails with a message and exit 1, never 2,
so that it cannot pass for "done with recoverable errors".
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

from e2e.standins.guest.guest import record_call

RESULT = Path("/run/cloud-init/result.json")
KNOWN_OPTIONS = {"--wait", "--long"}


def status(options: set[str]) -> int:
    while not RESULT.exists():
        if "--wait" not in options:
            print("status: running")
            return 0
        print(".", end="", flush=True)
        time.sleep(0.25)
    if "--wait" in options:
        print()
    result: dict[str, Any] = json.loads(RESULT.read_text())["v1"]
    errors, recoverable = result["errors"], result["recoverable_errors"]
    print("status: error" if errors else "status: done")
    if "--long" in options:
        print("extended_status: " + ("error - done" if errors else "degraded done" if recoverable else "done"))
        print(f"detail: {result['datasource']}")
        print(f"errors: {errors}")
        print("recoverable_errors:")
        for level, messages in recoverable.items():
            print(f"{level}:")
            print("".join(f"\t- {message}\n" for message in messages), end="")
    return 1 if errors else 2 if recoverable else 0


def main() -> int:
    args = sys.argv[1:]
    if not args or args[0] != "status" or not set(args[1:]) <= KNOWN_OPTIONS:
        message = f"cloud-init stand-in: does not know `cloud-init {' '.join(args)}`"
        print(message, file=sys.stderr)
        record_call(["cloud-init", *args], 1, message)
        return 1
    code = status(set(args[1:]))
    record_call(["cloud-init", *args], code)
    return code


if __name__ == "__main__":
    sys.exit(main())
