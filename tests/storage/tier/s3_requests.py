"""An ``S3Observer`` for tests: what requests the S3 store sent, and how each ended."""

from __future__ import annotations

import threading

__all__ = ["Recorder"]


class Recorder:
    """Keeps every request attempt it hears of, as (operation, error code or None)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.calls: list[tuple[str, str | None]] = []

    def s3_request(self, operation: str, error: str | None) -> None:
        with self.lock:
            self.calls.append((operation, error))

    def count(self, operation: str) -> int:
        return sum(1 for called, _ in self.calls if called == operation)

    def errors(self, operation: str) -> list[str]:
        return [error for called, error in self.calls if called == operation and error]
