"""A StatefulSet pod's ordinal, read off its name (``NAME-ORDINAL``): a broker's id.

Every Kubernetes version names StatefulSet pods so, while the ``apps.kubernetes.io/pod-index``
label that also carries the ordinal appeared only in 1.28; the name works on all of them.
The sidecar gets its pod's name through the downward API (``--node-id-from-pod-name``)
and the operator reads the same from the pods it lists, so both agree by construction.
"""

from __future__ import annotations

import re

from tierlog.storage.errors import InvalidConfigError

__all__ = ["pod_ordinal"]

_ORDINAL = re.compile(r"-(0|[1-9][0-9]*)$")


def pod_ordinal(pod_name: str) -> int:
    """The ordinal that ends a StatefulSet pod's name; ``InvalidConfigError`` otherwise."""
    found = _ORDINAL.search(pod_name)
    if found is None:
        raise InvalidConfigError(
            f"{pod_name!r} is no StatefulSet pod name (NAME-ORDINAL): no broker id in it"
        )
    return int(found.group(1))
