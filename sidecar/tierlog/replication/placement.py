"""Which brokers hold the replicas of a new topic's or new partitions' partitions.

Kafka's striped assignment (``AdminUtils.assignReplicasToBrokers``), as a pure function:

- Brokers are laid out in one list that alternates between racks (the first broker of
  each rack, then the second of each...), so neighbours in the list sit on different
  racks. Without racks it is the brokers in id order.
- Partition ``p``'s leader (its first replica, the preferred leader) is the broker at
  ``p + start_index`` in that list: leaderships go round the list, so no broker leads
  more than one partition more than another.
- Its followers sit a shift away from the leader, the shift growing by one each time
  the leaders have gone once round the list, so the followers of one broker's
  leaderships are spread over the others instead of all landing on its neighbour.
- A follower candidate is skipped while it would put a second replica on a rack and
  some rack still holds none: each partition spans as many racks as it can.

A broker without a rack counts as one more rack, the "no rack" one (as Kafka's KRaft
placer does), so brokers of a cluster without racks are placed exactly as Kafka places
brokers without rack information.

The same arguments always give the same answer: Kafka draws the start index and the
first shift at random; callers here pass them (a random pick, or the topic's own).
Partitions added to a topic continue its stripe: with an unchanged set of brokers and
a first shift equal to the start index, ``assign_new_partitions`` gives them the
replicas they would have had if the topic had been created with them.

Brokers that leave (a scale-down) hand their replicas to others with
``replicas_without``: each leaving replica is replaced in its place, so a partition
moves no more replicas than it must (Kafka leaves choosing a plan to its tools).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import TypeVar

from tierlog.api.errors import (
    InvalidPartitionsError,
    InvalidReplicaAssignmentError,
    InvalidReplicationFactorError,
)

__all__ = [
    "Racks",
    "assign_new_partitions",
    "assign_replicas",
    "check_assignment",
    "rack_alternated",
    "replicas_without",
]

Racks = Mapping[int, str | None]  # broker id -> its rack (None: none)
Key = TypeVar("Key")  # what names a partition


def assign_replicas(
    racks: Racks,
    partition_count: int,
    replication_factor: int,
    *,
    start_index: int,
    replica_shift: int | None = None,
    first_partition: int = 0,
) -> dict[int, tuple[int, ...]]:
    """Replicas (leader first) of partitions ``first_partition`` onwards, by partition.

    ``racks`` names every broker that may hold a replica; ``start_index`` places the
    leader of partition 0 in the rack-alternated list (any whole number, taken modulo
    the broker count), ``replica_shift`` the first follower of it (default: the start
    index, as in Kafka when the start is fixed)."""
    if partition_count < 1:
        raise InvalidPartitionsError(f"{partition_count} partitions; a topic has at least 1")
    _check_factor(replication_factor, len(racks))
    if start_index < 0 or first_partition < 0 or (replica_shift or 0) < 0:
        raise ValueError("start_index, replica_shift and first_partition must not be negative")
    brokers = rack_alternated(racks)
    shift = start_index if replica_shift is None else replica_shift
    return {
        p: _replicas_of(p, brokers, racks, replication_factor, start_index, shift)
        for p in range(first_partition, first_partition + partition_count)
    }


def check_assignment(
    racks: Racks, assignment: Sequence[tuple[int, Sequence[int]]]
) -> dict[int, tuple[int, ...]]:
    """A client's own placement of a new topic, as (partition, replicas) pairs in the
    order given, checked as Kafka checks it: partitions numbered 0 up in order, each
    with the same number of replicas, each replica a distinct broker of ``racks``.
    INVALID_REPLICA_ASSIGNMENT otherwise."""
    partitions = [partition for partition, _replicas in assignment]
    if partitions != list(range(len(assignment))) or not assignment:
        raise InvalidReplicaAssignmentError(
            f"partitions {partitions}: an assignment numbers them 0, 1, 2... in order"
        )
    placed = {partition: tuple(replicas) for partition, replicas in assignment}
    if len({len(replicas) for replicas in placed.values()}) != 1:
        raise InvalidReplicaAssignmentError("every partition needs as many replicas")
    for partition, replicas in placed.items():
        if not replicas or len(set(replicas)) != len(replicas):
            raise InvalidReplicaAssignmentError(
                f"partition {partition}: replicas {list(replicas)}: at least one, "
                "each a distinct broker"
            )
        unknown = sorted(set(replicas) - set(racks))
        if unknown:
            raise InvalidReplicaAssignmentError(
                f"partition {partition}: no broker {unknown} (the brokers: {sorted(racks)})"
            )
    return placed


def assign_new_partitions(
    racks: Racks, existing: Sequence[Sequence[int]], total_count: int
) -> dict[int, tuple[int, ...]]:
    """Replicas of the partitions that grow a topic from ``len(existing)`` (its replicas
    by partition) to ``total_count``, as many per partition as partition 0 has, the
    stripe starting where partition 0's leader sits, as in Kafka's CreatePartitions
    (the list's head when that broker is gone)."""
    if not existing or total_count <= len(existing):
        raise InvalidPartitionsError(
            f"a topic of {len(existing)} partitions grows to more, not {total_count}"
        )
    brokers = rack_alternated(racks)
    leader = existing[0][0] if existing[0] else None
    start_index = brokers.index(leader) if leader in brokers else 0
    return assign_replicas(
        racks,
        total_count - len(existing),
        len(existing[0]),
        start_index=start_index,
        first_partition=len(existing),
    )


def replicas_without(
    racks: Racks, current: Mapping[Key, Sequence[int]], leaving: Collection[int]
) -> dict[Key, tuple[int, ...]]:
    """New replicas for the partitions of ``current`` that have one on a ``leaving``
    broker (the others are left out); ``racks`` names the brokers that stay.

    Each leaving replica is replaced where it stands (a leaving preferred leader's
    successor is preferred) by a staying broker holding none of the partition's
    replicas: first one on a rack the partition does not use yet, then the one holding
    the fewest replicas so far (the moves already chosen counted), then the lowest id.
    ``INVALID_REPLICATION_FACTOR`` when a partition has more replicas than stay."""
    load = dict.fromkeys(racks, 0)
    for replicas in current.values():
        for replica in replicas:
            if replica in load:
                load[replica] += 1
    moved: dict[Key, tuple[int, ...]] = {}
    for key, replicas in current.items():
        if not set(replicas) & set(leaving):
            continue
        _check_factor(len(replicas), len(racks))
        target = [r for r in replicas if r not in leaving]
        for place, replica in enumerate(replicas):
            if replica not in leaving:
                continue
            used = {racks[r] for r in target}
            chosen = min(
                (broker for broker in racks if broker not in target),
                key=lambda broker: (racks[broker] in used, load[broker], broker),
            )
            target.insert(place, chosen)
            load[chosen] += 1
        moved[key] = tuple(target)
    return moved


def rack_alternated(racks: Racks) -> list[int]:
    """The brokers in turn by rack (racks in name order, "no rack" last; brokers of a
    rack in id order): rack a's first, rack b's first, ..., rack a's second..."""
    by_rack: dict[str | None, list[int]] = {}
    for broker in sorted(racks):
        by_rack.setdefault(racks[broker], []).append(broker)
    ordered = [by_rack[rack] for rack in sorted(by_rack, key=lambda r: (r is None, r or ""))]
    deepest = max((len(members) for members in ordered), default=0)
    return [members[i] for i in range(deepest) for members in ordered if i < len(members)]


def _check_factor(replication_factor: int, broker_count: int) -> None:
    if replication_factor < 1:
        raise InvalidReplicationFactorError(
            f"replication factor {replication_factor}: a partition has at least 1 replica"
        )
    if replication_factor > broker_count:
        raise InvalidReplicationFactorError(
            f"replication factor {replication_factor} is larger than the "
            f"{broker_count} available brokers: each replica needs a broker of its own"
        )


def _replicas_of(
    partition: int,
    brokers: list[int],
    racks: Racks,
    replication_factor: int,
    start_index: int,
    first_shift: int,
) -> tuple[int, ...]:
    count = len(brokers)
    rack_count = len(set(racks.values()))
    first = (partition + start_index) % count
    # Kafka bumps the shift each time the leaders wrap round the list; writing it as a
    # function of the partition makes partitions added later continue the same stripe.
    # In whole rounds of racks (as Kafka's rack-aware placer): the list alternates
    # racks, so the first candidate stays on the rack after the leader's.
    shift = (first_shift + partition // count) * rack_count
    replicas = [brokers[first]]
    racks_used = {racks[brokers[first]]}
    step = 0
    while len(replicas) < replication_factor:
        # Candidates are every other broker in turn: count - 1 steps visit them all.
        candidate = brokers[(first + 1 + (shift + step) % (count - 1)) % count]
        step += 1
        if candidate in replicas:
            continue
        if racks[candidate] in racks_used and len(racks_used) < rack_count:
            continue  # a rack holding none comes first
        replicas.append(candidate)
        racks_used.add(racks[candidate])
    return tuple(replicas)
