"""The JSON merge patch (RFC 7386) that writes a pass's status (pure).

A merge patch merges maps key by key: a key the new status no longer has (an override
removed from a topic's ``config``, a deleted topic in a cluster's ``assignment``) would
stay in the object for ever. So each key a pass writes is written whole: inside it,
what the object has and the pass does not becomes an explicit ``null``, which deletes
it. Top-level keys a pass leaves out stay as they are (a paused pass writes only the
conditions, and the last brokers and plan stay in view). A status whose every key the
object already holds as it is needs no patch at all (``changes_status``): a settled
object's pass writes nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["changes_status", "status_patch"]


def _replacing(before: Any, after: Any) -> Any:
    """``after`` as a merge patch over ``before`` that leaves exactly ``after``."""
    if not isinstance(before, Mapping) or not isinstance(after, Mapping):
        return after
    patch: dict[str, Any] = dict.fromkeys(set(before) - set(after))
    for key, value in after.items():
        patch[key] = _replacing(before.get(key), value)
    return patch


def status_patch(before: Mapping[str, Any] | None, after: Mapping[str, Any]) -> dict[str, Any]:
    """The ``status`` of a merge patch taking ``before`` (the object's status now) to
    ``after`` for the keys ``after`` has."""
    existing = before or {}
    return {key: _replacing(existing.get(key), value) for key, value in after.items()}


def changes_status(before: Mapping[str, Any] | None, after: Mapping[str, Any]) -> bool:
    """Whether writing ``after``'s keys changes the status ``before``."""
    existing = before or {}
    return any(key not in existing or existing[key] != value for key, value in after.items())
