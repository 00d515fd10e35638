"""A producer kept sending from a thread, and what its callbacks reported, for tests
that check the log against it while brokers are killed, restarted or drained."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator

from tierlog.client import RecordFuture

__all__ = ["Acknowledged", "sending_in_background"]


class Acknowledged:
    """Each acknowledged value's ``(partition, offset)`` in ``where``, and every failure;
    the producer's I/O thread writes them while the test reads."""

    def __init__(self) -> None:
        self.changed = threading.Condition()
        self.where: dict[bytes, tuple[int, int]] = {}
        self.failures: list[BaseException] = []

    def track(self, value: bytes) -> Callable[[RecordFuture], None]:
        """The done-callback for the send of ``value``."""

        def done(future: RecordFuture) -> None:
            error = future.exception()
            with self.changed:
                if error is not None:
                    self.failures.append(error)
                else:
                    metadata = future.result()
                    self.where[value] = (metadata.partition, metadata.offset)
                self.changed.notify_all()

        return done

    def wait_for(self, count: int, timeout_s: float = 60) -> None:
        """Until ``count`` values are acknowledged, or a send has failed."""
        with self.changed:
            assert self.changed.wait_for(
                lambda: len(self.where) >= count or bool(self.failures), timeout_s
            ), f"{len(self.where)} acknowledged, waiting for {count}"


@contextlib.contextmanager
def sending_in_background(send_some: Callable[[], None]) -> Iterator[None]:
    """A thread calls ``send_some`` again and again while the block runs; it is stopped
    and joined when the block ends, however it ends."""
    stop = threading.Event()

    def keep_sending() -> None:
        while not stop.is_set():
            send_some()

    sender = threading.Thread(target=keep_sending)
    sender.start()
    try:
        yield
    finally:
        stop.set()
        sender.join()
