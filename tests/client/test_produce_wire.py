"""Produce requests written by hand are the ProduceStreamRequest the sidecar reads."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from tierlog.api.v1 import log_service_pb2
from tierlog.client.produce_wire import encode_produce_stream_request

TOPICS = st.text(st.characters(codec="utf-8"), max_size=40)
INT32 = st.integers(-(2**31), 2**31 - 1)
ACKS = st.sampled_from(log_service_pb2.Acks.values())
BATCHES = st.lists(st.binary(max_size=2000), min_size=1, max_size=4)
LEADER_EPOCHS = st.one_of(st.just(-1), st.integers(0, 2**31 - 1))  # -1: not known


@given(TOPICS, INT32, ACKS, BATCHES, LEADER_EPOCHS)
def test_a_request_is_the_generated_message_serialized(
    topic: str,
    partition: int,
    acks: log_service_pb2.Acks.ValueType,
    batches: list[bytes],
    leader_epoch: int,
) -> None:
    encoded = encode_produce_stream_request(topic, partition, acks, batches, leader_epoch)
    expected = log_service_pb2.ProduceStreamRequest(
        produce=log_service_pb2.ProduceRequest(
            topic=topic, partition=partition, acks=acks, record_batches=b"".join(batches)
        )
    )
    if leader_epoch >= 0:
        expected.produce.current_leader_epoch = leader_epoch
    assert encoded == expected.SerializeToString()
    parsed = log_service_pb2.ProduceStreamRequest.FromString(encoded).produce
    assert parsed.WhichOneof("data") == "record_batches"
    assert (parsed.topic, parsed.partition, parsed.acks, parsed.record_batches) == (
        topic,
        partition,
        acks,
        b"".join(batches),
    )
    assert parsed.HasField("current_leader_epoch") == (leader_epoch >= 0)
    assert parsed.current_leader_epoch == max(leader_epoch, 0)
