"""What one Kafka connection owes its client, written in the order its requests came.

An answer given while none is owed is written at once, as a connection that handles one
request at a time would write it. An answer that waits (a Produce's ``AnswerLater``),
and every answer given while one waits, is queued and written in turn by a task of the
connection's own, so the connection's next request is read meanwhile. At most ``depth``
answers are queued: past that the next request is not read until one is written, which
bounds what one client's pipelining holds.

A failure while an answer is made (a bug) or written (the client went away) closes the
connection; the answers still queued are dropped, as a lost connection drops them: their
batches are stored, and an idempotent producer's retry of them is answered as duplicates.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from kio.schema.errors import ErrorCode

from tierlog.kafka.frames import Frames

__all__ = ["Answered", "OwedAnswers"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Answered:
    api: str
    # The frame's pieces, sent in turn (``codec.encode_response``); None: an acks=0
    # produce, answered with nothing.
    frame: tuple[bytes | bytearray, ...] | None
    errors: tuple[ErrorCode, ...]  # every code the answer carries, NONE included


Answer = Answered | Coroutine[Any, Any, Answered]
# Told of each answer written, with when its request was read and its size in bytes.
Written = Callable[[Answered, float, int], None]


class OwedAnswers:
    def __init__(self, stream: Frames, written: Written, depth: int):
        self._stream = stream
        self._written = written
        self._queue: asyncio.Queue[tuple[Answer, float, int]] = asyncio.Queue(depth)
        self._owed = 0  # queued or being written
        self._writing: asyncio.Task[None] | None = None
        self.failed = False  # an answer could not be made: a bug, logged

    async def give(self, answer: Answer, started: float, bytes_in: int) -> None:
        """Write ``answer`` once every answer given before it is written."""
        if isinstance(answer, Answered) and self._owed == 0:
            await self._write(answer, started, bytes_in)
            return
        if self._writing is None:
            self._writing = asyncio.create_task(self._write_in_turn())
        self._owed += 1
        await self._queue.put((answer, started, bytes_in))

    async def settled(self) -> None:
        """Back once nothing is owed: a request that must see every earlier one answered
        (all but a Produce following a Produce) is handled after this."""
        if self._owed:
            await self._queue.join()

    async def close(self) -> None:
        """Drop what is still owed (the connection is ending)."""
        if self._writing is not None:
            self._writing.cancel()
            await asyncio.gather(self._writing, return_exceptions=True)
        while not self._queue.empty():
            answer, _started, _bytes_in = self._queue.get_nowait()
            if not isinstance(answer, Answered):
                answer.close()

    async def _write_in_turn(self) -> None:
        broken = False  # once the connection is broken, what is owed is only dropped
        while True:
            answer, started, bytes_in = await self._queue.get()
            try:
                if broken:
                    if not isinstance(answer, Answered):
                        answer.close()
                    continue
                answered = answer if isinstance(answer, Answered) else await answer
                await self._write(answered, started, bytes_in)
            except ConnectionError:
                broken = True
            except Exception:  # a bug: this connection ends, the others go on
                log.exception("kafka listener: an answer could not be made")
                self.failed = broken = True
                self._stream.close()
            finally:
                self._owed -= 1
                self._queue.task_done()

    async def _write(self, answered: Answered, started: float, bytes_in: int) -> None:
        if answered.frame is not None:
            for piece in answered.frame:
                self._stream.write(piece)
            await self._stream.drain()
        self._written(answered, started, bytes_in)
