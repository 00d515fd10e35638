"""Kafka's framing over TCP, on the sidecar's event loop.

Each request is a 4-byte big-endian size and that many bytes: a header (api key, api
version, correlation id, client id; v2 adds tagged fields when the API version is
flexible) and the body. Requests on one connection are answered in order
(``owed_answers``). They are handled one at a time, as Kafka's broker handles them, but
for a Produce that follows a Produce: it is appended while the one before it waits for
its in-sync replicas (``answer_later``), so that one replication round carries both.
Connections run side by side.

A connection is closed, with one log line saying why and from where, when it sent no
request for ``connections.max.idle.ms`` (Kafka's 10 minutes), and on what cannot be
answered: a size over ``socket.request.max.bytes`` (or too small for a header), a frame
cut short, an API key not served, a version not served (but ApiVersions, answered at
v0 with the ranges), bytes that do not parse. Other clients never notice.

On a TLS listener (``SSL``, ``SASL_SSL``) each connection's handshake runs in its own
task, so a slow one holds up nobody. On a SASL listener a connection authenticates
before any request but ApiVersions is served (``sasl``). A connection's principal, which
its fetch sessions belong to and its log lines name, is Kafka's: the SASL name on a
``SASL_*`` listener, else the subject of a verified TLS client certificate
(``tls_principal``, under ``ssl.client.auth=required`` or ``requested``), else ANONYMOUS.

Connections are bounded as Kafka bounds them (``connection_quotas``): accepting stops
while ``max.connections`` are open, and a connection over its address's
``max.connections.per.ip`` is closed as soon as it is accepted. Each connection and
request is told to the ``observer`` (the sidecar's metrics).
"""

from __future__ import annotations

import asyncio
import logging
import socket
import ssl
import struct
import time
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from kio.schema.errors import ErrorCode
from kio.static.protocol import RequestPayload, ResponsePayload

from tierlog.kafka.add_offsets_to_txn import add_offsets_to_txn
from tierlog.kafka.add_partitions_to_txn import add_partitions_to_txn
from tierlog.kafka.alter_configs import alter_configs
from tierlog.kafka.alter_user_scram_credentials import alter_user_scram_credentials
from tierlog.kafka.answer_later import AnswerLater
from tierlog.kafka.api_versions import api_versions, unsupported_version
from tierlog.kafka.broker import KafkaBroker
from tierlog.kafka.codec import (
    encode_response,
    frame_body,
    load_version,
    loaded_version,
    read_request,
    request_type,
)
from tierlog.kafka.connection_quotas import ConnectionLimits, ConnectionQuotas
from tierlog.kafka.consumer_group_describe import consumer_group_describe
from tierlog.kafka.consumer_group_heartbeat import consumer_group_heartbeat
from tierlog.kafka.create_partitions import create_partitions
from tierlog.kafka.create_topics import create_topics
from tierlog.kafka.delete_groups import delete_groups
from tierlog.kafka.delete_records import delete_records
from tierlog.kafka.delete_topics import delete_topics
from tierlog.kafka.describe_client_quotas import describe_client_quotas
from tierlog.kafka.describe_cluster import describe_cluster
from tierlog.kafka.describe_configs import describe_configs
from tierlog.kafka.describe_groups import describe_groups
from tierlog.kafka.describe_log_dirs import describe_log_dirs
from tierlog.kafka.describe_producers import describe_producers
from tierlog.kafka.describe_transactions import describe_transactions
from tierlog.kafka.describe_user_scram_credentials import describe_user_scram_credentials
from tierlog.kafka.elect_leaders import elect_leaders
from tierlog.kafka.end_txn import end_txn
from tierlog.kafka.error_codes import error_codes
from tierlog.kafka.fetch import fetch
from tierlog.kafka.find_coordinator import find_coordinator
from tierlog.kafka.frames import SIZE_PREFIX_BYTES, FrameCutShort, Frames
from tierlog.kafka.heartbeat import heartbeat
from tierlog.kafka.incremental_alter_configs import incremental_alter_configs
from tierlog.kafka.init_producer_id import init_producer_id
from tierlog.kafka.join_group import join_group
from tierlog.kafka.kept_answers import WrittenAnswer
from tierlog.kafka.leave_group import leave_group
from tierlog.kafka.list_groups import list_groups
from tierlog.kafka.list_offsets import list_offsets
from tierlog.kafka.list_transactions import list_transactions
from tierlog.kafka.metadata import metadata
from tierlog.kafka.observer import UNOBSERVED, Closed, KafkaObserver, Refused, RequestDone
from tierlog.kafka.offset_commit import offset_commit
from tierlog.kafka.offset_delete import offset_delete
from tierlog.kafka.offset_fetch import offset_fetch
from tierlog.kafka.offset_for_leader_epoch import offset_for_leader_epoch
from tierlog.kafka.owed_answers import Answered, OwedAnswers
from tierlog.kafka.produce import produce
from tierlog.kafka.request_client import serving
from tierlog.kafka.sasl import SaslAuthenticator, SaslOutOfOrder, SaslSettings
from tierlog.kafka.sasl_handshake import sasl_authenticate, sasl_handshake
from tierlog.kafka.sasl_mechanisms import SaslFailed
from tierlog.kafka.sync_group import sync_group
from tierlog.kafka.tls_principal import tls_principal
from tierlog.kafka.txn_offset_commit import txn_offset_commit
from tierlog.kafka.versions import (
    ADD_OFFSETS_TO_TXN,
    ADD_PARTITIONS_TO_TXN,
    ALTER_CONFIGS,
    ALTER_USER_SCRAM_CREDENTIALS,
    API_VERSIONS,
    API_VERSIONS_KEY,
    CONSUMER_GROUP_DESCRIBE,
    CONSUMER_GROUP_HEARTBEAT,
    CREATE_PARTITIONS,
    CREATE_TOPICS,
    DELETE_GROUPS,
    DELETE_RECORDS,
    DELETE_TOPICS,
    DESCRIBE_CLIENT_QUOTAS,
    DESCRIBE_CLUSTER,
    DESCRIBE_CONFIGS,
    DESCRIBE_GROUPS,
    DESCRIBE_LOG_DIRS,
    DESCRIBE_PRODUCERS,
    DESCRIBE_TRANSACTIONS,
    DESCRIBE_USER_SCRAM_CREDENTIALS,
    ELECT_LEADERS,
    END_TXN,
    FETCH,
    FIND_COORDINATOR,
    HEARTBEAT,
    INCREMENTAL_ALTER_CONFIGS,
    INIT_PRODUCER_ID,
    JOIN_GROUP,
    LEAVE_GROUP,
    LIST_GROUPS,
    LIST_OFFSETS,
    LIST_TRANSACTIONS,
    METADATA,
    OFFSET_COMMIT,
    OFFSET_DELETE,
    OFFSET_FETCH,
    OFFSET_FOR_LEADER_EPOCH,
    PRODUCE,
    SASL_AUTHENTICATE,
    SASL_HANDSHAKE,
    SYNC_GROUP,
    TXN_OFFSET_COMMIT,
    WRITE_TXN_MARKERS,
)
from tierlog.kafka.write_txn_markers import write_txn_markers
from tierlog.storage.errors import InvalidConfigError

__all__ = ["KafkaListener", "api_name"]

log = logging.getLogger(__name__)

Handler = Callable[
    [KafkaBroker, RequestPayload, int],
    Awaitable[ResponsePayload | WrittenAnswer | AnswerLater | None],
]

# After a failed accept (the process out of file descriptors) the acceptor waits this
# long before trying again, as asyncio's own servers do, rather than spin.
_ACCEPT_RETRY_S = 1.0

# A header's api key, api version and correlation id.
_HEADER_START = struct.Struct(">hhi")

# Answers one connection may owe before its next request waits to be read: above the
# five in-flight requests of an idempotent producer (Java's and librdkafka's most), and
# small, since each holds its request's place in the answers' order.
_OWED_ANSWERS_MAX = 16


async def _api_versions(
    broker: KafkaBroker, request: RequestPayload, version: int
) -> ResponsePayload:
    return api_versions(version)


async def _metadata(broker: KafkaBroker, request: RequestPayload, version: int) -> WrittenAnswer:
    return metadata(broker, request, version)


_HANDLERS: dict[int, Handler] = {
    PRODUCE: produce,
    FETCH: fetch,
    LIST_OFFSETS: list_offsets,
    METADATA: _metadata,
    OFFSET_COMMIT: offset_commit,
    OFFSET_FETCH: offset_fetch,
    FIND_COORDINATOR: find_coordinator,
    JOIN_GROUP: join_group,
    HEARTBEAT: heartbeat,
    LEAVE_GROUP: leave_group,
    SYNC_GROUP: sync_group,
    DESCRIBE_GROUPS: describe_groups,
    LIST_GROUPS: list_groups,
    SASL_HANDSHAKE: sasl_handshake,
    API_VERSIONS_KEY: _api_versions,
    CREATE_TOPICS: create_topics,
    DELETE_TOPICS: delete_topics,
    DELETE_RECORDS: delete_records,
    INIT_PRODUCER_ID: init_producer_id,
    OFFSET_FOR_LEADER_EPOCH: offset_for_leader_epoch,
    ADD_PARTITIONS_TO_TXN: add_partitions_to_txn,
    ADD_OFFSETS_TO_TXN: add_offsets_to_txn,
    END_TXN: end_txn,
    WRITE_TXN_MARKERS: write_txn_markers,
    TXN_OFFSET_COMMIT: txn_offset_commit,
    DESCRIBE_CONFIGS: describe_configs,
    ALTER_CONFIGS: alter_configs,
    DESCRIBE_LOG_DIRS: describe_log_dirs,
    SASL_AUTHENTICATE: sasl_authenticate,
    CREATE_PARTITIONS: create_partitions,
    DELETE_GROUPS: delete_groups,
    ELECT_LEADERS: elect_leaders,
    INCREMENTAL_ALTER_CONFIGS: incremental_alter_configs,
    OFFSET_DELETE: offset_delete,
    DESCRIBE_CLIENT_QUOTAS: describe_client_quotas,
    DESCRIBE_USER_SCRAM_CREDENTIALS: describe_user_scram_credentials,
    ALTER_USER_SCRAM_CREDENTIALS: alter_user_scram_credentials,
    DESCRIBE_CLUSTER: describe_cluster,
    DESCRIBE_PRODUCERS: describe_producers,
    DESCRIBE_TRANSACTIONS: describe_transactions,
    LIST_TRANSACTIONS: list_transactions,
    CONSUMER_GROUP_HEARTBEAT: consumer_group_heartbeat,
    CONSUMER_GROUP_DESCRIBE: consumer_group_describe,
}


class _Refused(Exception):
    """Why a connection is closed without an answer."""

    def __init__(self, message: str, why: Closed = Closed.INVALID_REQUEST):
        super().__init__(message)
        self.why = why


def api_name(api_key: int) -> str:
    """Kafka's name of an API ("Produce"), as its request metrics label it."""
    low, _high = API_VERSIONS[api_key]
    return request_type(api_key, low).__name__.removesuffix("Request")


class KafkaListener:
    """Bound at construction (so the address to advertise is known, port 0 included),
    serving once ``start`` is given the broker."""

    def __init__(
        self,
        listen: str,
        socket_request_max_bytes: int,
        connections_max_idle_ms: int = 600_000,
        observer: KafkaObserver = UNOBSERVED,
        limits: ConnectionLimits | None = None,
        sasl: SaslSettings | None = None,
        tls: ssl.SSLContext | None = None,
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
        self.observer = observer
        self.quotas = ConnectionQuotas(limits or ConnectionLimits())
        self.sasl = sasl  # None: no authentication (a PLAINTEXT listener)
        self.tls = tls  # None: plaintext (PLAINTEXT, SASL_PLAINTEXT)
        self._broker: KafkaBroker | None = None
        self._accepting: asyncio.Task[None] | None = None
        self._connections: set[asyncio.Task[None]] = set()

    async def start(self, broker: KafkaBroker) -> None:
        self._broker = broker
        self._socket.setblocking(False)
        self._accepting = asyncio.create_task(self._accept())

    async def stop(self) -> None:
        """Stop accepting, then end every connection (their requests are answered or
        dropped: a Kafka client retries on another connection)."""
        if self._accepting is not None:
            self._accepting.cancel()
            await asyncio.gather(self._accepting, return_exceptions=True)
        self._socket.close()
        for task in list(self._connections):
            task.cancel()
        await asyncio.gather(*self._connections, return_exceptions=True)

    async def _accept(self) -> None:
        """Accepts while fewer than ``max.connections`` are open (as Kafka's acceptor,
        which blocks at the limit), closing at once a connection over its address's
        ``max.connections.per.ip``."""
        loop = asyncio.get_running_loop()
        while True:
            blocked_s = await self.quotas.wait_for_room()
            if blocked_s:
                self.observer.kafka_accept_blocked(blocked_s)
            try:
                connection, peer = await loop.sock_accept(self._socket)
            except OSError as error:  # out of file descriptors (EMFILE), most likely
                log.warning(
                    "kafka listener: cannot accept a connection (retrying in %.1f s): %s",
                    _ACCEPT_RETRY_S,
                    error,
                )
                await asyncio.sleep(_ACCEPT_RETRY_S)  # the client waits in the backlog
                continue
            address = peer[0]
            if not self.quotas.admit(address):
                connection.close()
                self.observer.kafka_connection_refused(Refused.MAX_CONNECTIONS_PER_IP)
                log.info(
                    "kafka listener: refusing a connection from %s: %d open from it "
                    "(max.connections.per.ip)",
                    address,
                    self.quotas.limits.per_ip(address),
                )
                continue
            task = asyncio.create_task(self._open(connection, address))
            self._connections.add(task)
            task.add_done_callback(self._connections.discard)

    async def _open(self, connection: socket.socket, address: str) -> None:
        """Serves one accepted connection (after its TLS handshake, on a TLS listener);
        its quota is freed when it ends, however."""
        try:
            # Kafka's acceptor turns Nagle's algorithm off for every connection. asyncio
            # does so only for a socket whose proto is IPPROTO_TCP, and what
            # socket.create_server accepts has proto 0: left on, an answer's last small
            # piece (a Fetch's tail, after its records) waits for the client's delayed
            # ACK, 40 ms, whenever the piece before it is a small one still unacknowledged.
            connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            loop = asyncio.get_running_loop()
            frames = Frames()
            try:
                await loop.connect_accepted_socket(lambda: frames, connection, ssl=self.tls)
            except (OSError, TimeoutError) as error:  # ssl.SSLError is an OSError
                self.observer.kafka_connection_refused(Refused.TLS_HANDSHAKE)
                log.info("kafka listener: TLS handshake with %s failed: %s", address, error)
                return
            await self._serve(frames)
        finally:
            connection.close()
            self.quotas.release(address)

    async def _serve(self, frames: Frames) -> None:
        self.observer.kafka_connection_opened()
        assert frames.transport is not None  # connected
        peer = frames.transport.get_extra_info("peername")
        authenticator = None if self.sasl is None else SaslAuthenticator(self.sasl, peer)
        certified: str | None = None
        owed = OwedAnswers(frames, self._observe, _OWED_ANSWERS_MAX)
        why = Closed.CLIENT
        try:
            certified = _certified(frames.transport, peer)
            while True:
                size = await self._size(frames)
                if size is None:
                    return  # the client closed between requests
                frame = await self._frame(frames, size, authenticator)
                started = time.perf_counter()
                answer: Answered | Coroutine[Any, Any, Answered]
                if authenticator is not None and authenticator.expects_bare_token:
                    answer = await self._bare_token(authenticator, bytes(frame))
                else:
                    if _HEADER_START.unpack_from(frame)[0] != PRODUCE:
                        await owed.settled()
                    principal = _principal(authenticator, certified)
                    answer = await self._answer(frame, authenticator, principal, peer)
                await owed.give(answer, started, len(frame) + SIZE_PREFIX_BYTES)
                if authenticator is not None and authenticator.failure is not None:
                    raise _Refused(authenticator.failure, Closed.AUTHENTICATION)
        except _Refused as refused:
            why = refused.why
            log.warning(
                "kafka listener: closing the connection from %s (User:%s): %s",
                peer, _principal(authenticator, certified) or "ANONYMOUS", refused,
            )  # fmt: skip
        except ConnectionError:
            pass
        except asyncio.CancelledError:
            why = Closed.SHUTDOWN
        except Exception:  # a bug: this client's connection ends, the others go on
            why = Closed.SERVER_ERROR
            log.exception(
                "kafka listener: closing the connection from %s (User:%s)",
                peer, _principal(authenticator, certified) or "ANONYMOUS",
            )  # fmt: skip
        finally:
            await owed.close()
            if owed.failed:
                why = Closed.SERVER_ERROR
            frames.close()
            self.observer.kafka_connection_closed(why)

    async def _size(self, frames: Frames) -> int | None:
        """The next request's size; None when the client closed between requests."""
        try:
            # asyncio.timeout, not wait_for: on 3.11 wait_for wraps the read in a task
            # of its own, and the exception that ends a connection then holds that
            # task in a reference cycle, its memory kept until a full collection.
            async with asyncio.timeout(self.connections_max_idle_ms / 1000):
                return await frames.size()
        except TimeoutError:
            raise _Refused(
                f"idle for {self.connections_max_idle_ms} ms (connections.max.idle.ms)",
                Closed.IDLE,
            ) from None
        except FrameCutShort:
            raise _Refused("a size prefix cut short") from None

    def _observe(self, answered: Answered, started: float, bytes_in: int) -> None:
        failed = tuple(code for code in answered.errors if code != ErrorCode.none)
        self.observer.kafka_request(
            RequestDone(
                api=answered.api,
                outcome=failed[0] if failed else ErrorCode.none,
                errors=failed,
                seconds=time.perf_counter() - started,
                bytes_in=bytes_in,
                bytes_out=0 if answered.frame is None else sum(map(len, answered.frame)),
            )
        )

    async def _frame(
        self, frames: Frames, size: int, authenticator: SaslAuthenticator | None
    ) -> memoryview:
        if size > self.socket_request_max_bytes:
            raise _Refused(
                f"a request of {size} bytes is over socket.request.max.bytes "
                f"({self.socket_request_max_bytes})"
            )
        bare = authenticator is not None and authenticator.expects_bare_token
        if authenticator is not None and not authenticator.complete:
            limit = authenticator.settings.max_receive_bytes
            if size > limit:
                raise _Refused(
                    f"a request of {size} bytes before authentication is over "
                    f"sasl.server.max.receive.size ({limit})",
                    Closed.AUTHENTICATION,
                )
        if size < 0 or (size < _HEADER_START.size and not bare):
            raise _Refused(f"a request of {size} bytes cannot hold a header")
        try:
            return await frames.frame(size)
        except FrameCutShort as cut:
            raise _Refused(f"a request cut short: {cut.received} of {size} bytes") from None

    async def _bare_token(self, authenticator: SaslAuthenticator, message: bytes) -> Answered:
        """Handshake v0's bare mechanism message, answered bare (size and bytes)."""
        try:
            reply = await authenticator.bare_token(message)
        except SaslFailed as failed:
            raise _Refused(f"authentication failed: {failed}", Closed.AUTHENTICATION) from None
        errors = (ErrorCode.none,)
        return Answered(api_name(SASL_AUTHENTICATE), (struct.pack(">i", len(reply)), reply), errors)

    async def _answer(
        self,
        payload: memoryview,
        authenticator: SaslAuthenticator | None,
        principal: str | None,
        peer: object,
    ) -> Answered | Coroutine[Any, Any, Answered]:
        api_key, api_version, correlation_id = _HEADER_START.unpack_from(payload)
        log.debug("kafka listener: api key %d v%d", api_key, api_version)
        served = API_VERSIONS.get(api_key)
        if served is None:
            raise _Refused(f"api key {api_key} is not served")
        low, high = served
        if not low <= api_version <= high:
            if api_key == API_VERSIONS_KEY:
                refusal = unsupported_version()
                return Answered(
                    api_name(api_key),
                    encode_response(correlation_id, refusal),
                    (ErrorCode.unsupported_version,),
                )
            raise _Refused(f"api key {api_key} version {api_version} is not served ({low}-{high})")
        if not loaded_version(api_key, api_version):  # its first request: not on the loop
            await asyncio.to_thread(load_version, api_key, api_version)
        try:
            frame = read_request(payload, api_key, api_version)
        except Exception as error:  # kio raises whatever its readers meet
            raise _Refused(f"api key {api_key} v{api_version} does not parse: {error}") from None
        assert self._broker is not None  # connections are accepted once started
        serving(frame.client_id, peer, principal, _holds_broker_token(authenticator))
        if authenticator is not None:
            _check_session(authenticator, api_key)
        if (
            authenticator is None
            or api_key == API_VERSIONS_KEY
            or (authenticator.complete and not authenticator.begins_reauthentication(api_key))
        ):
            response = await _HANDLERS[api_key](self._broker, frame.body, api_version)
        else:
            try:
                response = await authenticator.answer(frame)
            except SaslOutOfOrder as error:
                raise _Refused(str(error), Closed.AUTHENTICATION) from None
        if isinstance(response, AnswerLater):
            return _encoded_later(api_key, correlation_id, response.answer)
        return _encoded(api_key, correlation_id, response)


def _certified(transport: asyncio.BaseTransport, peer: object) -> str | None:
    """The principal name of the connection's verified TLS client certificate, if any."""
    try:
        certified = tls_principal(transport.get_extra_info("ssl_object"))
    except ValueError as error:
        raise _Refused(
            f"its client certificate's subject: {error}", Closed.AUTHENTICATION
        ) from None
    if certified is not None:
        log.debug("kafka listener: %s authenticated as %r (TLS client certificate)", peer,
                  certified)  # fmt: skip
    return certified


def _principal(authenticator: SaslAuthenticator | None, certified: str | None) -> str | None:
    """The connection's principal name so far (None: ANONYMOUS): on a SASL listener the
    SASL name once authenticated, as Kafka's principal builder ranks them."""
    return certified if authenticator is None else authenticator.principal


def _check_session(authenticator: SaslAuthenticator, api_key: int) -> None:
    """A connection whose SASL session ended is closed at its next request, but for the
    SaslHandshake that renews it (KIP-368), as Kafka's broker closes it."""
    if authenticator.expired and not authenticator.begins_reauthentication(api_key):
        raise _Refused(
            "its SASL session ended (connections.max.reauth.ms) without re-authentication",
            Closed.AUTHENTICATION,
        )


def _holds_broker_token(authenticator: SaslAuthenticator | None) -> bool:
    return authenticator is not None and authenticator.holds_broker_token


def _encoded(
    api_key: int, correlation_id: int, response: ResponsePayload | WrittenAnswer | None
) -> Answered:
    if response is None:
        return Answered(api_name(api_key), None, ())
    if isinstance(response, WrittenAnswer):  # written before, for many requests
        return Answered(
            api_name(api_key),
            frame_body(correlation_id, response.schema, response.body),
            response.errors,
        )
    return Answered(
        api_name(api_key),
        encode_response(correlation_id, response),
        tuple(error_codes(response)),
    )


async def _encoded_later(
    api_key: int, correlation_id: int, answer: Coroutine[Any, Any, ResponsePayload]
) -> Answered:
    return _encoded(api_key, correlation_id, await answer)
