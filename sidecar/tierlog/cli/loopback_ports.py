"""Loopback ports chosen now and bound by another process a few seconds later.

A broker of a local cluster must know its peers' addresses before any of them listens,
so its ports cannot be the kernel's pick at ``bind`` time. They are chosen below the
kernel's ephemeral range: meanwhile any process's outgoing connection (or ``bind`` to
port 0) on this machine could take a port from that range (seen: ``Address already in
use`` for a broker's metrics port while other tests ran).
"""

from __future__ import annotations

import contextlib
import random
import socket
from pathlib import Path

from tierlog.storage.errors import InvalidConfigError

FIRST_UNPRIVILEGED_PORT = 1024
_EPHEMERAL_RANGE = "/proc/sys/net/ipv4/ip_local_port_range"
_LINUX_EPHEMERAL_START = 32768


def ephemeral_start() -> int:
    """The first port of the kernel's ephemeral range (Linux's default where unreadable)."""
    try:
        return int(Path(_EPHEMERAL_RANGE).read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return _LINUX_EPHEMERAL_START


def free_ports(count: int, within: range | None = None) -> list[int]:
    """``count`` distinct loopback ports free now, in random order from ``within`` (by
    default every unprivileged port below the ephemeral range). They are probed together,
    so no two are equal."""
    if within is None:
        within = range(FIRST_UNPRIVILEGED_PORT, ephemeral_start())
    with contextlib.ExitStack() as stack:
        ports: list[int] = []
        for port in random.sample(within, len(within)):
            probe = stack.enter_context(socket.socket())
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
            ports.append(port)
            if len(ports) == count:
                return ports
    raise InvalidConfigError(
        f"no {count} free loopback ports in {within.start}..{within.stop - 1}: use --base-port"
    )
