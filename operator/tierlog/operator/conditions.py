"""Status conditions, Kubernetes style: a type, a status, a reason for machines, a message.

``merge`` keeps a condition's ``lastTransitionTime`` while its status stays the same, so
the time says when it last *changed*, as ``kubectl wait`` and people expect, and stamps
every condition with the generation it describes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["DEGRADED", "PAUSED", "PROGRESSING", "READY", "Condition", "merge"]

READY = "Ready"
PROGRESSING = "Progressing"
DEGRADED = "Degraded"
PAUSED = "ReconciliationPaused"


@dataclass(frozen=True)
class Condition:
    type: str
    status: bool
    reason: str
    message: str = ""


def merge(
    existing: Sequence[Mapping[str, Any]],
    desired: Iterable[Condition],
    generation: int,
    now: str,
) -> list[dict[str, Any]]:
    """The new ``conditions`` list: ``desired`` ones replace their types, others stay."""
    before = {condition["type"]: condition for condition in existing}
    merged = dict(before)
    for condition in desired:
        status = "True" if condition.status else "False"
        previous = before.get(condition.type) or {}
        since = previous.get("lastTransitionTime") if previous.get("status") == status else None
        merged[condition.type] = {
            "type": condition.type,
            "status": status,
            "reason": condition.reason,
            "message": condition.message,
            "lastTransitionTime": since or now,
            "observedGeneration": generation,
        }
    return [dict(merged[kind]) for kind in sorted(merged)]
