"""Kafka's framing over TCP, on the sidecar's event loop.

Each request is a 4-byte big-endian size and that many bytes: a header (api key, api
version, correlation id, client id; v2 adds tagged fields when the API version is
flexible) and the body. Requests on one connection are handled one at a time and
answered in order, as Kafka's broker mutes a connection while its request is in
flight; connections run side by side.

A connection is closed, with one log line saying why and from where, when it sent no
request for ``connections.max.idle.ms`` (Kafka's 10 minutes), and on what cannot be
answered: a size over ``socket.request.max.bytes`` (or too small for a header), a frame
cut short, an API key not served, a version not served (but ApiVersions, answered at
v0 with the ranges), bytes that do not parse. Other clients never notice.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import struct
from collections.abc import Awaitable, Callable

from kio.static.protocol import RequestPayload, ResponsePayload

from tierlog.kafka.api_versions import api_versions, unsupported_version
from tierlog.kafka.broker import KafkaBroker
from tierlog.kafka.codec import encode_response, read_request
from tierlog.kafka.consumer_group_describe import consumer_group_describe
from tierlog.kafka.consumer_group_heartbeat import consumer_group_heartbeat
from tierlog.kafka.delete_groups import delete_groups
from tierlog.kafka.describe_groups import describe_groups
from tierlog.kafka.fetch import fetch
from tierlog.kafka.find_coordinator import find_coordinator
from tierlog.kafka.heartbeat import heartbeat
from tierlog.kafka.init_producer_id import init_producer_id
from tierlog.kafka.join_group import join_group
from tierlog.kafka.leave_group import leave_group
from tierlog.kafka.list_groups import list_groups
from tierlog.kafka.list_offsets import list_offsets
from tierlog.kafka.metadata import metadata
from tierlog.kafka.offset_commit import offset_commit
from tierlog.kafka.offset_delete import offset_delete
from tierlog.kafka.offset_fetch import offset_fetch
from tierlog.kafka.offset_for_leader_epoch import offset_for_leader_epoch
from tierlog.kafka.produce import produce
from tierlog.kafka.request_client import serving
from tierlog.kafka.sync_group import sync_group
from tierlog.kafka.versions import (
    API_VERSIONS,
    API_VERSIONS_KEY,
    CONSUMER_GROUP_DESCRIBE,
    CONSUMER_GROUP_HEARTBEAT,
    DELETE_GROUPS,
    DESCRIBE_GROUPS,
    FETCH,
    FIND_COORDINATOR,
    HEARTBEAT,
    INIT_PRODUCER_ID,
    JOIN_GROUP,
    LEAVE_GROUP,
    LIST_GROUPS,
    LIST_OFFSETS,
    METADATA,
    OFFSET_COMMIT,
    OFFSET_DELETE,
    OFFSET_FETCH,
    OFFSET_FOR_LEADER_EPOCH,
    PRODUCE,
    SYNC_GROUP,
)
from tierlog.storage.errors import InvalidConfigError

__all__ = ["KafkaListener"]

log = logging.getLogger(__name__)

Handler = Callable[[KafkaBroker, RequestPayload, int], Awaitable[ResponsePayload | None]]

# A header's api key, api version and correlation id.
_HEADER_START = struct.Struct(">hhi")


async def _api_versions(
    broker: KafkaBroker, request: RequestPayload, version: int
) -> ResponsePayload:
    return api_versions(version)


async def _metadata(broker: KafkaBroker, request: RequestPayload, version: int) -> ResponsePayload:
    return metadata(broker, request, version)


_HANDLERS: dict[int, Handler] = {
    API_VERSIONS_KEY: _api_versions,
    METADATA: _metadata,
    PRODUCE: produce,
    FETCH: fetch,
    LIST_OFFSETS: list_offsets,
    INIT_PRODUCER_ID: init_producer_id,
    OFFSET_FOR_LEADER_EPOCH: offset_for_leader_epoch,
    FIND_COORDINATOR: find_coordinator,
    OFFSET_COMMIT: offset_commit,
    OFFSET_FETCH: offset_fetch,
    OFFSET_DELETE: offset_delete,
    CONSUMER_GROUP_HEARTBEAT: consumer_group_heartbeat,
    CONSUMER_GROUP_DESCRIBE: consumer_group_describe,
    JOIN_GROUP: join_group,
    SYNC_GROUP: sync_group,
    HEARTBEAT: heartbeat,
    LEAVE_GROUP: leave_group,
    DESCRIBE_GROUPS: describe_groups,
    LIST_GROUPS: list_groups,
    DELETE_GROUPS: delete_groups,
}


class _Refused(Exception):
    """Why a connection is closed without an answer."""


class KafkaListener:
    """Bound at construction (so the address to advertise is known, port 0 included),
    serving once ``start`` is given the broker."""

    def __init__(
        self, listen: str, socket_request_max_bytes: int, connections_max_idle_ms: int = 600_000
    ):
        host, _sep, port = listen.rpartition(":")
        host = host.strip("[]")
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        try:
            self._socket = socket.create_server((host, int(port)), family=family)
        except OSError as error:
            raise InvalidConfigError(f"cannot serve Kafka on {listen}: {error}") from None
        self.address = f"{listen.rpartition(':')[0]}:{self._socket.getsockname()[1]}"
        self.socket_request_max_bytes = socket_request_max_bytes
        self.connections_max_idle_ms = connections_max_idle_ms
        self._broker: KafkaBroker | None = None
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task[None]] = set()

    async def start(self, broker: KafkaBroker) -> None:
        self._broker = broker
        self._server = await asyncio.start_server(self._serve, sock=self._socket)

    async def stop(self) -> None:
        """Stop accepting, then end every connection (their requests are answered or
        dropped: a Kafka client retries on another connection)."""
        if self._server is None:
            self._socket.close()
            return
        self._server.close()
        for task in list(self._connections):
            task.cancel()
        await asyncio.gather(*self._connections, return_exceptions=True)
        await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        peer = writer.get_extra_info("peername")
        try:
            while True:
                try:
                    size_bytes = await asyncio.wait_for(
                        reader.readexactly(4), self.connections_max_idle_ms / 1000
                    )
                except TimeoutError:
                    raise _Refused(
                        f"idle for {self.connections_max_idle_ms} ms (connections.max.idle.ms)"
                    ) from None
                except asyncio.IncompleteReadError as error:
                    if error.partial:
                        raise _Refused("a size prefix cut short") from None
                    return  # the client closed between requests
                answer = await self._answer(await self._frame(reader, size_bytes), peer)
                if answer is not None:
                    writer.write(answer)
                    await writer.drain()
        except _Refused as why:
            log.warning("kafka listener: closing the connection from %s: %s", peer, why)
        except (ConnectionError, asyncio.CancelledError):
            pass
        except Exception:  # a bug: this client's connection ends, the others go on
            log.exception("kafka listener: closing the connection from %s", peer)
        finally:
            self._connections.discard(task)
            writer.close()

    async def _frame(self, reader: asyncio.StreamReader, size_bytes: bytes) -> bytes:
        size = int.from_bytes(size_bytes, "big", signed=True)
        if size > self.socket_request_max_bytes:
            raise _Refused(
                f"a request of {size} bytes is over socket.request.max.bytes "
                f"({self.socket_request_max_bytes})"
            )
        if size < _HEADER_START.size:
            raise _Refused(f"a request of {size} bytes cannot hold a header")
        try:
            return await reader.readexactly(size)
        except asyncio.IncompleteReadError as error:
            raise _Refused(f"a request cut short: {len(error.partial)} of {size} bytes") from None

    async def _answer(self, payload: bytes, peer: object) -> bytes | None:
        api_key, api_version, correlation_id = _HEADER_START.unpack_from(payload)
        log.debug("kafka listener: api key %d v%d", api_key, api_version)
        served = API_VERSIONS.get(api_key)
        if served is None:
            raise _Refused(f"api key {api_key} is not served")
        low, high = served
        if not low <= api_version <= high:
            if api_key == API_VERSIONS_KEY:
                return encode_response(correlation_id, unsupported_version())
            raise _Refused(f"api key {api_key} version {api_version} is not served ({low}-{high})")
        try:
            frame = read_request(payload, api_key, api_version)
        except Exception as error:  # kio raises whatever its readers meet
            raise _Refused(f"api key {api_key} v{api_version} does not parse: {error}") from None
        assert self._broker is not None  # connections are accepted once started
        serving(frame.client_id, peer)
        response = await _HANDLERS[api_key](self._broker, frame.body, api_version)
        return None if response is None else encode_response(correlation_id, response)
