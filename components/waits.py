"""The `pulumi.com/waitFor` annotation for an object that may exist before the program applies it
(an adopted provider CR, the chart's webhook configurations, a taken-over Cluster).

pulumi-kubernetes (v4.25, pkg/await/await.go `Creation`, internal/awaiter.go `Await`) takes the
first object its informer delivers as the state to record, and its informer's first list may be
served from the API server's watch cache a moment behind the apply it just sent. An apply that
changes only metadata leaves the generation as it was, so that stale object is not told apart
(condition/observer.go), and when it already meets the condition, the run records the object
without what it applied: the next run plans an update. Found by the box: the adopted lab's second
run updating the operator's mutating webhook patch. Asking for the wait's own annotation as well
makes only the applied object meet the wait."""

from __future__ import annotations

import json

WAIT_FOR = "pulumi.com/waitFor"
# RFC 9535 bracket notation, which pulumi-kubernetes's JSONPath (github.com/theory/jsonpath) reads.
_APPLIED = f"jsonpath={{.metadata.annotations['{WAIT_FOR}']}}"


def wait_for(condition: str) -> dict[str, str]:
    """The annotation that holds the step until `condition` is met by the object as applied."""
    return {WAIT_FOR: json.dumps([condition, _APPLIED])}
