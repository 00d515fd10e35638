"""How many Kafka client connections the listener holds, under Kafka's three settings.

- ``max.connections``: connections open at once. At the limit Kafka's acceptor stops
  accepting until one closes (new clients wait in the kernel's listen backlog, and
  time out there if none does); so does this listener.
- ``max.connections.per.ip``: connections open at once from one address. A connection
  over it is closed as soon as it is accepted, with a log line (Kafka's
  ``TooManyConnectionsException``): one client opening sockets in a loop cannot take
  the broker's file descriptors from the others.
- ``max.connections.per.ip.overrides``: ``HOST:COUNT`` pairs, comma separated, for
  addresses with their own per-address limit (``127.0.0.1:200,gateway.local:1000``); a
  host name is resolved once, at start, as Kafka resolves it. ``max.connections.per.ip``
  0 admits only the overridden addresses.

Both limits default to Kafka's: no limit (2^31 - 1).
"""

from __future__ import annotations

import asyncio
import socket
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field

from tierlog.storage.errors import InvalidConfigError

__all__ = ["CONNECTION_QUOTA_KEYS", "ConnectionLimits", "ConnectionQuotas"]

CONNECTION_QUOTA_KEYS = frozenset(
    {"max.connections", "max.connections.per.ip", "max.connections.per.ip.overrides"}
)
_UNLIMITED = 2**31 - 1  # Kafka's Int.MaxValue


@dataclass(frozen=True)
class ConnectionLimits:
    max_connections: int = _UNLIMITED
    max_connections_per_ip: int = _UNLIMITED
    per_ip_overrides: Mapping[str, int] = field(default_factory=dict)  # address -> limit

    @classmethod
    def from_properties(cls, props: Mapping[str, str]) -> ConnectionLimits:
        limits = {key: _count(props, key) for key in ("max.connections", "max.connections.per.ip")}
        overrides = _overrides(props.get("max.connections.per.ip.overrides", ""))
        if limits["max.connections.per.ip"] == 0 and not overrides:
            raise InvalidConfigError(
                "max.connections.per.ip=0 admits nobody without max.connections.per.ip.overrides"
            )
        return cls(limits["max.connections"], limits["max.connections.per.ip"], overrides)

    def per_ip(self, address: str) -> int:
        return self.per_ip_overrides.get(address, self.max_connections_per_ip)


def _count(props: Mapping[str, str], key: str) -> int:
    value = props.get(key, str(_UNLIMITED)).strip()
    if not value.isdigit() or not 0 <= int(value) <= _UNLIMITED:
        raise InvalidConfigError(f"{key} must be a count in 0..{_UNLIMITED}, got {value!r}")
    return int(value)


def _overrides(value: str) -> dict[str, int]:
    """``HOST:COUNT,...`` as address -> count (each address a host name resolves to)."""
    overrides: dict[str, int] = {}
    for entry in filter(None, (part.strip() for part in value.split(","))):
        host, sep, count = entry.rpartition(":")
        host = host.strip("[]")
        if not sep or not host or not count.isdigit():
            raise InvalidConfigError(
                f"max.connections.per.ip.overrides expects HOST:COUNT pairs, got {entry!r}"
            )
        try:
            addresses = {str(info[4][0]) for info in socket.getaddrinfo(host, None)}
        except OSError as error:
            raise InvalidConfigError(
                f"max.connections.per.ip.overrides: cannot resolve {host!r}: {error}"
            ) from None
        for address in addresses:
            overrides[address] = int(count)
    return overrides


class ConnectionQuotas:
    """The connections open, overall and per address, and the wait for a free one."""

    def __init__(self, limits: ConnectionLimits):
        self.limits = limits
        self.open = 0
        self._per_ip: Counter[str] = Counter()
        self._freed: asyncio.Event | None = None  # set when a connection closes at the limit

    async def wait_for_room(self) -> float:
        """Until fewer than ``max.connections`` are open; the seconds it waited."""
        if self.open < self.limits.max_connections:
            return 0.0
        started = time.monotonic()
        while self.open >= self.limits.max_connections:
            self._freed = asyncio.Event()
            await self._freed.wait()
        return time.monotonic() - started

    def admit(self, address: str) -> bool:
        """Counts a connection from ``address`` in, unless its address is at its limit."""
        if self._per_ip[address] >= self.limits.per_ip(address):
            return False
        self._per_ip[address] += 1
        self.open += 1
        return True

    def release(self, address: str) -> None:
        self.open -= 1
        self._per_ip[address] -= 1
        if not self._per_ip[address]:
            del self._per_ip[address]
        if self._freed is not None:
            self._freed.set()
