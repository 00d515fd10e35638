"""One asyncio loop on a daemon thread: where a producer's streams are written and read.

gRPC's synchronous streams cost two threads each (one drains the request iterator, one
reads the answers) plus the channel's own, and every batch crossed all of them under
one GIL.  On ``grpc.aio`` a stream's writes and reads are tasks of this one loop; other
threads hand it work with ``call_soon`` (a wake-up of the loop, no thread switch until
the loop runs) and wait for a result with ``run``.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

__all__ = ["IoLoop"]

_T = TypeVar("_T")


class IoLoop:
    def __init__(self, name: str) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name=name, daemon=True)
        self._thread.start()

    def call_soon(self, callback: Callable[..., object], *args: Any) -> None:
        """Run ``callback(*args)`` on the loop, in the order of the calls."""
        self._loop.call_soon_threadsafe(callback, *args)

    def run(self, coroutine: Coroutine[Any, Any, _T], timeout_s: float | None = None) -> _T:
        """Run ``coroutine`` on the loop and wait for its result (never from the loop)."""
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(timeout_s)

    def close(self, timeout_s: float = 5.0) -> None:
        """Let the loop's tasks finish (a stream's reader reporting what it had in flight),
        cancel those still running after ``timeout_s``, and stop the loop."""
        self.run(_finish_tasks(timeout_s))
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
        self._loop.close()


async def _finish_tasks(timeout_s: float) -> None:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while tasks := asyncio.all_tasks() - {asyncio.current_task()}:
        remaining = deadline - asyncio.get_running_loop().time()
        if remaining <= 0:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            return
        await asyncio.wait(tasks, timeout=remaining)
