"""What the client tests put around their sidecars (``tests.support.sidecars`` starts them).

``TcpProxy`` sits between a client and a sidecar and can swallow the sidecar's answers,
then cut every connection: a response lost after the batch was stored.
``produce_batches`` stores batches exactly as built (one Produce each), and
``damage_batch`` flips a byte of a stored batch in its segment file, as a failing disk
would.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from pathlib import Path

import grpc

from tests.support.sidecars import SidecarProcess, free_port, start_sidecar
from tierlog.api.v1 import log_service_pb2, log_service_pb2_grpc
from tierlog.storage.records import SimpleRecord, build_batch, iter_batches

__all__ = [
    "LiveSidecar",
    "TcpProxy",
    "damage_batch",
    "free_port",
    "produce_batches",
    "start_sidecar",
]

LiveSidecar = SidecarProcess


class TcpProxy:
    """Forwards 127.0.0.1:``port`` to ``target``; ``hold_responses`` drops what the target
    sends from then on, ``cut`` closes every connection (and forwards again)."""

    def __init__(self, target: str, port: int | None = None) -> None:
        host, _, target_port = target.rpartition(":")
        self.target = (host, int(target_port))
        self._server = socket.create_server(("127.0.0.1", port or 0))
        self.port: int = self._server.getsockname()[1]
        self._holding = threading.Event()
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = []
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.target)
            except OSError:
                client.close()
                continue
            with self._lock:
                self._sockets += [client, upstream]
            threading.Thread(target=self._pipe, args=(client, upstream, False), daemon=True).start()
            threading.Thread(target=self._pipe, args=(upstream, client, True), daemon=True).start()

    def _pipe(self, source: socket.socket, sink: socket.socket, is_response: bool) -> None:
        with contextlib.suppress(OSError):
            while data := source.recv(65536):
                if is_response and self._holding.is_set():
                    continue
                sink.sendall(data)
        for sock in (source, sink):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    def hold_responses(self) -> None:
        self._holding.set()

    def cut(self) -> None:
        with self._lock:
            sockets, self._sockets = self._sockets, []
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()
        self._holding.clear()

    def close(self) -> None:
        self._closed = True
        self._server.close()
        self.cut()


def produce_batches(address: str, topic: str, batches: int, per_batch: int) -> None:
    """``batches`` batches of ``per_batch`` records each to partition 0, values ``b"N"``
    from 0 on, sent as they are: batch ``b`` holds offsets ``b * per_batch`` on."""
    with grpc.insecure_channel(address) as channel:
        stub = log_service_pb2_grpc.LogServiceStub(channel)
        for b in range(batches):
            records = [SimpleRecord(None, b"%d" % (b * per_batch + i)) for i in range(per_batch)]
            stub.Produce(
                log_service_pb2.ProduceRequest(topic=topic, record_batches=build_batch(records))
            )


def damage_batch(partition_dir: Path, base_offset: int, position_in_batch: int) -> None:
    """Flip every bit of one byte of the batch at ``base_offset``, in place in its segment
    (``MAGIC_OFFSET``: a header the sidecar cannot parse; past the header: a record body
    whose CRC no longer matches)."""
    for segment in sorted(partition_dir.glob("*.log")):
        data = segment.read_bytes()
        for header in iter_batches(data):
            if header.base_offset == base_offset:
                with segment.open("r+b") as file:
                    file.seek(header.position + position_in_batch)
                    file.write(bytes([data[header.position + position_in_batch] ^ 0xFF]))
                return
    raise AssertionError(f"no batch at {base_offset} in {partition_dir}")
