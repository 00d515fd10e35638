"""The Kubernetes Events a pass asks for, and which of them to post (pure).

Passes run every couple of seconds, so a state that lasts (a restart deferred until
the sidecar is safe, a refused scale-down, a missing CRD) would be reported again on
every pass. Such an event names what its state is about (``state_of``) and is posted
when the state begins: while the same reason stands for the same thing it is not
posted again, and once the state has ended (a pass without it) it is posted anew if
it returns. Events of single steps (a restart, a hand-over) have no ``state_of`` and
are always posted. What stood at the last pass is kept in the operator's memory, so
an operator that restarts reports each standing state once more.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

__all__ = ["Event", "Standing", "to_post"]

Standing = frozenset[tuple[str, str]]  # (reason, state_of) of the states that stood


@dataclass(frozen=True)
class Event:
    warning: bool
    reason: str
    message: str
    state_of: str | None = None  # what a lasting state is about; None for a single step


def to_post(events: Iterable[Event], standing: Standing) -> tuple[list[Event], Standing]:
    """The events to post after a pass whose predecessor left ``standing``, and what
    stands now."""
    events = list(events)
    lasting = [event for event in events if event.state_of is not None]
    now = frozenset((event.reason, event.state_of or "") for event in lasting)
    fresh = [
        event
        for event in events
        if event.state_of is None or (event.reason, event.state_of) not in standing
    ]
    return fresh, now
