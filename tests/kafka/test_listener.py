"""How the Kafka listener's connections send: nothing it writes waits for an ACK.

Kafka's acceptor turns Nagle's algorithm off on every connection. Left on, the kernel
holds a segment smaller than the maximum while an earlier small one is unacknowledged,
and a client that only waits for its answers delays its acknowledgements (40 ms on
Linux). Kafka's ``ConsumerPerformance`` met it as a Fetch answer's 3-byte tail held
40-48 ms after its records, a few times a consume (issue 31). Two small answers to
requests sent together show it every time: the second one waits.
"""

from __future__ import annotations

import socket
import statistics
import struct
import time

from tests.kafka.conftest import KafkaSidecar
from tests.kafka.test_connection_limits import _api_versions_request

# Round trips first: a new connection's first segments are acknowledged at once
# (quick-ack mode); one that answers each answer with a request turns to delaying
# its acknowledgements, as a Kafka client's connection does.
ROUND_TRIPS = 5
PAIRS = 5
# Far under the 40 ms a held answer waits for a delayed acknowledgement.
WHOLE_WITHIN_S = 0.025


def _answer(conn: socket.socket) -> None:
    size = struct.unpack(">i", conn.recv(4, socket.MSG_WAITALL))[0]
    assert len(conn.recv(size, socket.MSG_WAITALL)) == size


def _whole_answers(peeked: bytearray, held: int) -> int:
    """How many whole answers the first ``held`` bytes of ``peeked`` hold."""
    count = at = 0
    while at + 4 <= held and at + 4 + struct.unpack_from(">i", peeked, at)[0] <= held:
        at += 4 + struct.unpack_from(">i", peeked, at)[0]
        count += 1
    return count


def _seconds_from_first_bytes_to_both(conn: socket.socket, timeout_s: float = 30) -> float:
    """From when the first answer's bytes are in the receive buffer to when both answers
    are, looked at without reading them (a read would send an acknowledgement)."""
    deadline = time.monotonic() + timeout_s
    first_seen: float | None = None
    peeked = bytearray(1 << 16)
    while time.monotonic() < deadline:
        try:
            held = conn.recv_into(peeked, len(peeked), socket.MSG_PEEK | socket.MSG_DONTWAIT)
        except BlockingIOError:
            held = 0
        now = time.monotonic()
        if held and first_seen is None:
            first_seen = now
        if first_seen is not None and _whole_answers(peeked, held) == 2:
            return now - first_seen
        time.sleep(0.0005)
    raise AssertionError(f"no two whole answers in {timeout_s} s")


def test_an_answer_does_not_wait_for_the_client_to_acknowledge_the_one_before(
    kafka_sidecar: KafkaSidecar,
) -> None:
    with socket.create_connection(("127.0.0.1", kafka_sidecar.kafka_port), timeout=30) as conn:
        for correlation_id in range(ROUND_TRIPS):
            conn.sendall(_api_versions_request(correlation_id))
            _answer(conn)
        waits = []
        for pair in range(PAIRS):
            first = ROUND_TRIPS + 2 * pair
            conn.sendall(_api_versions_request(first) + _api_versions_request(first + 1))
            waits.append(_seconds_from_first_bytes_to_both(conn))
            _answer(conn)
            _answer(conn)
    assert statistics.median(waits) < WHOLE_WITHIN_S, [f"{wait * 1000:.1f} ms" for wait in waits]
