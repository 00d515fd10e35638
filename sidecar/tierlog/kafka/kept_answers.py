"""Answers written once and sent again for as long as what they say holds.

A Metadata answer of thousands of partitions is the same for every client between two
changes of the cluster's state, and clients ask for it many times a second (a producer's
or admin client's refreshes, every look of a client following a failover). Building
and writing it cost the event loop about 4 ms at 2,000 partitions, most of a Metadata
request's time on the broker: here it is built and written once for each distinct
question (the key) while the state it was built from holds, and each request writes only
its own header (its correlation id, ``codec.frame_body``).

The state is whatever value changes whenever the answer may (versions of the topics and
of the published partition states, compared with ``==``): a new one drops every kept
answer. The key says what the request asked and every other input the answer reads. A
kept answer is therefore never stale, and equals what building it again would give.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass

from kio.schema.errors import ErrorCode
from kio.static.protocol import ResponsePayload

from tierlog.kafka.codec import encode_body
from tierlog.kafka.error_codes import error_codes

__all__ = ["KeptAnswers", "WrittenAnswer", "written"]

# Answers kept for one state: one per kind of question (a client's version and the topics
# it asks for, each listener's addresses). 84 KB each at 2,000 partitions.
KEPT_ANSWERS = 16


@dataclass(frozen=True)
class WrittenAnswer:
    """An answer's body as written, with its error codes, ready to frame for any request."""

    schema: type[ResponsePayload]
    body: tuple[bytes, ...]
    errors: tuple[ErrorCode, ...]


def written(answer: ResponsePayload) -> WrittenAnswer:
    """``answer`` written: its body's buffers as immutable bytes (they are sent again)."""
    body = tuple(bytes(piece) for piece in encode_body(answer))
    return WrittenAnswer(type(answer), body, tuple(error_codes(answer)))


class KeptAnswers:
    """The answers written for the state last seen, by key, the least recently asked
    dropped beyond ``KEPT_ANSWERS``. Used on the event loop only: no lock."""

    def __init__(self) -> None:
        self._state: object = None
        self._answers: OrderedDict[Hashable, WrittenAnswer] = OrderedDict()

    def answer(
        self, state: object, key: Hashable, build: Callable[[], ResponsePayload]
    ) -> WrittenAnswer:
        """The answer kept for ``key`` while ``state`` holds, else ``build``'s, written
        and kept. ``state`` must be read before ``build`` reads what it stands for: an
        answer built from newer inputs is then kept under an older state, never the other
        way round."""
        if state != self._state:
            self._answers.clear()
            self._state = state
        kept = self._answers.get(key)
        if kept is not None:
            self._answers.move_to_end(key)
            return kept
        kept = self._answers[key] = written(build())
        if len(self._answers) > KEPT_ANSWERS:
            self._answers.popitem(last=False)
        return kept
