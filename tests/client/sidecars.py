"""What the client tests put around their sidecars (``tests.support.sidecars`` starts them).

A proxy between a client and a sidecar that loses answers or cuts connections is
``tests.support.tcp_fault_proxy.TcpFaultProxy``.
``produce_batches`` stores batches exactly as built (one Produce each), and
``damage_batch`` flips a byte of a stored batch in its segment file, as a failing disk
would.
"""

from __future__ import annotations

from pathlib import Path

import grpc

from tests.support.sidecars import SidecarProcess, free_port, start_sidecar
from tierlog.api.v1 import log_service_pb2, log_service_pb2_grpc
from tierlog.storage.records import SimpleRecord, build_batch, iter_batches

__all__ = [
    "LiveSidecar",
    "damage_batch",
    "free_port",
    "produce_batches",
    "start_sidecar",
]

LiveSidecar = SidecarProcess


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
