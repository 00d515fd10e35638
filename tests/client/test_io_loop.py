"""The producer's I/O loop thread: work handed to it in order, results back, a clean close."""

from __future__ import annotations

import asyncio
import threading

from tierlog.client.io_loop import IoLoop


def test_callbacks_run_on_the_loop_thread_in_the_order_they_were_handed_over() -> None:
    io = IoLoop("test-io")
    seen: list[tuple[int, str]] = []
    for n in range(100):
        io.call_soon(lambda n=n: seen.append((n, threading.current_thread().name)))

    async def answer() -> int:
        return 42

    assert io.run(answer()) == 42  # after every callback handed over before it
    io.close()
    assert seen == [(n, "test-io") for n in range(100)]


def test_close_lets_tasks_finish_and_cancels_those_past_the_timeout() -> None:
    io = IoLoop("test-io")
    finished: list[str] = []
    tasks: list[asyncio.Task[None]] = []  # the loop holds its tasks weakly

    async def quick() -> None:
        await asyncio.sleep(0.05)
        finished.append("quick")

    async def hung() -> None:
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            finished.append("hung cancelled")
            raise

    def start() -> None:
        loop = asyncio.get_running_loop()
        tasks.extend((loop.create_task(quick()), loop.create_task(hung())))

    io.call_soon(start)
    io.close(timeout_s=0.5)
    assert finished == ["quick", "hung cancelled"]
