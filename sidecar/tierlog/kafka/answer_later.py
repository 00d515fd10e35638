"""A request whose effects are done and whose answer waits on something else.

A Produce with ``acks=all`` is appended at once and then waits for its in-sync replicas.
Its handler gives the listener that wait (``AnswerLater``) instead of the answer, and the
listener reads the connection's next request meanwhile: a producer's in-flight batches
(``max.in.flight.requests.per.connection``) then reach the log one after another and are
carried to the followers by the same replication round, where Kafka's broker, which mutes
a connection until its answer is sent, appends one and waits a round for each.
"""

from __future__ import annotations

from collections.abc import Coroutine
from dataclasses import dataclass
from typing import Any

from kio.static.protocol import ResponsePayload

__all__ = ["AnswerLater"]


@dataclass(frozen=True)
class AnswerLater:
    answer: Coroutine[Any, Any, ResponsePayload]
