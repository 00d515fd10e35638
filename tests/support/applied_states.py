"""Whether a replicated broker has applied a partition state, not only named it.

A broker's Metadata names a partition's state as soon as its replica manager has read
it from the store, and the broker takes the role that state gives it only once a pass
over the store has applied it (as Kafka publishes its metadata image before its
``ReplicaManager`` applies the delta); a pass can take a while, and the reads go on
meanwhile. In between, the broker answers by the state before: LEADER_NOT_AVAILABLE
while it has applied none (a new topic), NOT_LEADER_OR_FOLLOWER naming the old leader
at the new one, UNKNOWN_LEADER_EPOCH to a request naming the new epoch. Clients retry
those; a test that acts through a path that does not (a raw gRPC or Kafka request)
first waits, after Metadata or the store names a state, until ``has_applied`` says so.
"""

from __future__ import annotations

from typing import cast

import grpc

from tierlog.api.errors import LEADER_KEY, REASON_KEY
from tierlog.api.v1 import log_service_pb2, log_service_pb2_grpc

__all__ = ["has_applied"]

# Past any log's end: the fetch reads nothing, and is answered by the checks of leader
# epoch and role alone (then OFFSET_OUT_OF_RANGE, or an empty answer, at the leader).
_PAST_ANY_END = 1 << 62


def has_applied(
    log: log_service_pb2_grpc.LogServiceStub,
    node_id: int,
    topic: str,
    partition: int,
    leader: int,
    leader_epoch: int,
) -> bool:
    """Whether broker ``node_id`` (its LogService ``log``) has taken its role for the
    partition in the state led by ``leader`` in ``leader_epoch``: a fetch naming that
    epoch is served by the leader and refused as NOT_LEADER_OR_FOLLOWER (naming
    ``leader``) by the other replicas, but refused with LEADER_NOT_AVAILABLE or
    UNKNOWN_LEADER_EPOCH by a broker still on the state before (or its connection
    refused, by a broker not up yet)."""
    request = log_service_pb2.FetchRequest(
        topic=topic,
        partition=partition,
        offset=_PAST_ANY_END,
        max_wait_ms=0,
        current_leader_epoch=leader_epoch,
    )
    try:
        log.Fetch(request, timeout=10)
    except grpc.RpcError as error:
        trailing = dict(cast(grpc.Call, error).trailing_metadata() or ())
        reason = trailing.get(REASON_KEY)
        if reason == "OFFSET_OUT_OF_RANGE":
            return node_id == leader
        named = str(trailing.get(LEADER_KEY, "")).partition("@")[0]
        return reason == "NOT_LEADER_OR_FOLLOWER" and node_id != leader and named == str(leader)
    return node_id == leader
