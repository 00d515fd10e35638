"""A real object store with failures injected at chosen calls.

``FaultyStore`` forwards every call to the store it wraps, except that a test can make
a chosen operation fail: before it reaches the store (the request never arrived) or
after (it landed, but the caller hears an error, like a timeout on the response).
The behaviour of the store itself is never imitated.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from functools import partial

from tierlog.storage.tier.store import (
    Body,
    ObjectInfo,
    ObjectStore,
    ObjectStoreUnavailableError,
)

Matcher = Callable[[str, str], bool]  # (operation, key) -> fail this call?


@dataclass
class Fault:
    matches: Matcher
    after: bool = False  # let the call land, then fail
    times: int = 1  # how many matching calls fail (-1: until cleared)
    error: Callable[[str], BaseException] = ObjectStoreUnavailableError


@dataclass
class FaultyStore:
    inner: ObjectStore
    faults: list[Fault] = field(default_factory=list)
    calls: list[tuple[str, str]] = field(default_factory=list)
    url: str = ""

    def __post_init__(self) -> None:
        self.url = self.inner.url

    def fail(self, matches: Matcher, *, after: bool = False, times: int = 1) -> Fault:
        fault = Fault(matches, after=after, times=times)
        self.faults.append(fault)
        return fault

    def outage(self) -> Fault:
        """Every call fails until ``heal`` (the store is down)."""
        return self.fail(lambda _op, _key: True, times=-1)

    def heal(self) -> None:
        self.faults.clear()

    def _call(self, operation: str, key: str, run: Callable[[], object]) -> object:
        self.calls.append((operation, key))
        fault = next((f for f in self.faults if f.times != 0 and f.matches(operation, key)), None)
        if fault is None:
            return run()
        if fault.times > 0:
            fault.times -= 1
        if fault.after:
            run()
        raise fault.error(f"injected failure of {operation} {key}")

    def put(self, key: str, body: Body, *, if_absent: bool = False) -> None:
        self._call("put", key, lambda: self.inner.put(key, body, if_absent=if_absent))

    def get(self, key: str, start: int = 0, end: int | None = None) -> bytes:
        result = self._call("get", key, lambda: self.inner.get(key, start, end))
        assert isinstance(result, bytes)
        return result

    def size(self, key: str) -> int:
        result = self._call("size", key, lambda: self.inner.size(key))
        assert isinstance(result, int)
        return result

    def list(self, prefix: str) -> Iterator[ObjectInfo]:
        found = self._call("list", prefix, lambda: list(self.inner.list(prefix)))
        assert isinstance(found, list)
        return iter(found)

    def delete(self, keys: Iterable[str]) -> None:
        for key in list(keys):
            self._call("delete", key, partial(self.inner.delete, [key]))

    def abort_incomplete_uploads(self, prefix: str, *, older_than_s: float) -> int:
        result = self._call(
            "abort",
            prefix,
            lambda: self.inner.abort_incomplete_uploads(prefix, older_than_s=older_than_s),
        )
        assert isinstance(result, int)
        return result

    def close(self) -> None:
        self.inner.close()
