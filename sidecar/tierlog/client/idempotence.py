"""Idempotent producer bookkeeping: producer id, epoch and sequences, as Kafka's client keeps them.

What the broker relies on: for each partition, a producer's batches carry consecutive
sequences (``base_sequence`` .. ``base_sequence + count - 1``, wrapping from int32 max to
0) under one (producer id, epoch); it stores a batch only if it starts right after the
last one it stored, answers a resent one from its cache of the last 5, and calls any
other ``OUT_OF_ORDER_SEQUENCE_NUMBER``.  What this module implements for the
idempotent (not transactional) producer, following Kafka 3.x/4.x's
``TransactionManager`` and ``Sender``:

- **Stamping** (``stamp``, at drain): a new batch takes the partition's next sequence
  and the current producer id and epoch; the sequence advances by its record count.
  The batch is then *in flight* until it completes or fails for good, and every
  attempt sends the same bytes.
- **Order** (``may_drain``): a retried batch goes out only when it is the first in
  flight for its partition, so retries never overtake; a new batch waits while its
  partition has 5 in flight (the broker's cache), while in-flight batches carry an
  older epoch, or while sequences are unresolved.  Nothing of a partition waiting for
  new sequences (below) goes out.  Unlike Kafka's client, the first batch of an epoch
  on a partition goes alone until it is acknowledged: a broker holding no state of the
  producer takes any sequence (Kafka's rule, for a producer whose state retention
  removed), so a second batch it stored while it refused the first (a new leader that
  had not yet applied its leadership) would leave a gap that no retry of the first can
  fill, and the first would be retried until it expired.
- **Answers**: each attempt of a sent batch is answered through exactly one of
  ``on_success``, ``can_retry``, ``on_failed`` or ``on_expired``; until then its
  request is *out*, and the broker may still store it under the stamp it carries.
- **Retries** (``can_retry``): ``OUT_OF_ORDER_SEQUENCE_NUMBER`` for a batch that is not
  the next after the last acknowledged one is retried as is (an earlier batch's retry
  fills the gap); for the next one, there really is a gap, so the partition asks for
  new sequences and the batch is retried restamped.  ``UNKNOWN_PRODUCER_ID`` (the
  broker lost our state, e.g. its log start passed our last write) is retried under
  new sequences too, or as is when the batch was already restamped.  Otherwise
  Kafka's retriable errors retry.
- **New sequences** (``bump_epoch_if_needed``, before each drain): a partition with a
  gap in its sequences starts them again from 0 under an epoch the broker has stored
  nothing of for it, as the idempotent producer does since KIP-360.  It waits until
  none of its requests is out: a restamped batch must never go out while its old
  stamp may still be stored.  Then its batches waiting to be retried are restamped
  from 0 in their order (same records, new header and CRC), under the producer's
  epoch if the partition's own is older (another partition bumped it) or nothing
  under its epoch may have been stored (every attempt at it was refused, e.g. by a
  full disk), else under epoch + 1.  So a failure episode costs a partition one bump
  at most, and partitions failing together share it.  Other partitions move to a
  new epoch from 0 once their in-flight batches are done.  An epoch at 32767 cannot
  grow: the producer id is dropped and ``needs_producer_id`` asks the transport for
  a new one.
- **Failures** (``on_failed``): a batch that fails for good leaves a gap after it, so
  an ``OUT_OF_ORDER_SEQUENCE_NUMBER``, ``UNKNOWN_PRODUCER_ID`` or any failure the
  broker confirmed (``adjust_sequences``) asks for new sequences.  A batch that
  expired in flight (``delivery.timeout.ms``) may or may not be stored: its partition
  is *unresolved* and takes no new batch until the batches in flight settle; then if
  the last acknowledged sequence reaches the expired one all is well, otherwise the
  partition asks for new sequences.
- ``DUPLICATE_SEQUENCE_NUMBER`` (a duplicate older than the broker's cache) is success
  without an offset; the transport reports it with ``on_success(batch, None)``.

A transactional producer's epoch belongs to its coordinator: where a gap would bump it,
its partitions wait instead; the transaction is aborted (its error is abortable) and
the producer takes the next epoch from the coordinator (``tierlog.client.transactions``,
as Kafka's KIP-360 does for transactional producers). Not here: the InitProducerId round
trip itself (the transport's).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tierlog.client.config import MAX_IN_FLIGHT_FOR_IDEMPOTENCE
from tierlog.client.errors import RETRIABLE_REASONS, IllegalProducerStateError
from tierlog.client.producer_batch import ProducerBatch
from tierlog.storage.records import NO_PRODUCER_EPOCH, NO_PRODUCER_ID
from tierlog.storage.topic_partition import TopicPartition

__all__ = [
    "MAX_PRODUCER_EPOCH",
    "NO_LAST_ACKED_SEQUENCE",
    "SEQUENCE_MODULUS",
    "IdempotenceManager",
    "ProducerIdAndEpoch",
    "increment_sequence",
    "sequence_after",
]

SEQUENCE_MODULUS = 2**31  # sequences wrap from int32 max to 0
MAX_PRODUCER_EPOCH = 2**15 - 1
NO_LAST_ACKED_SEQUENCE = -1


def increment_sequence(sequence: int, increment: int) -> int:
    """Kafka's ``DefaultRecordBatch.incrementSequence``: add, wrapping past int32 max."""
    return (sequence + increment) % SEQUENCE_MODULUS


def sequence_after(sequence: int, reference: int) -> bool:
    """``sequence`` comes after ``reference`` (within half the sequence space, so a
    sequence that wrapped to 0 still counts as later than int32 max)."""
    distance = (sequence - reference) % SEQUENCE_MODULUS
    return 0 < distance < SEQUENCE_MODULUS // 2


@dataclass(frozen=True)
class ProducerIdAndEpoch:
    producer_id: int
    epoch: int

    @property
    def is_valid(self) -> bool:
        return self.producer_id >= 0


NONE = ProducerIdAndEpoch(NO_PRODUCER_ID, NO_PRODUCER_EPOCH)
# Answers after which a batch may or may not have been stored.
_OUTCOME_UNKNOWN = frozenset({"NETWORK_EXCEPTION", "REQUEST_TIMED_OUT"})


@dataclass
class _PartitionState:
    """A partition's sequences under the producer id and epoch they belong to."""

    producer_id_and_epoch: ProducerIdAndEpoch
    next_sequence: int = 0
    last_acked_sequence: int = NO_LAST_ACKED_SEQUENCE
    last_acked_offset: int = -1
    in_flight: list[ProducerBatch] = field(default_factory=list)  # in sequence order
    # Those of ``in_flight`` whose request is out: sent, not yet answered.
    out: set[ProducerBatch] = field(default_factory=set)
    # A batch under this epoch was stored, or its outcome is unknown: starting the
    # sequences again needs a newer epoch.
    may_have_stored: bool = False

    def start_sequences_at_beginning(self, producer_id_and_epoch: ProducerIdAndEpoch) -> None:
        """Restamp the batches in flight from sequence 0 (Kafka's
        ``startSequencesAtBeginning``)."""
        sequence = 0
        for batch in self.in_flight:
            batch.reset_producer_state(
                producer_id_and_epoch.producer_id, producer_id_and_epoch.epoch, sequence
            )
            sequence = increment_sequence(sequence, batch.record_count)
        self.producer_id_and_epoch = producer_id_and_epoch
        self.next_sequence = sequence
        self.last_acked_sequence = NO_LAST_ACKED_SEQUENCE
        self.may_have_stored = False


class IdempotenceManager:
    """One idempotent producer's id, epoch and per-partition sequences."""

    def __init__(
        self,
        max_in_flight_per_partition: int = MAX_IN_FLIGHT_FOR_IDEMPOTENCE,
        *,
        transactional: bool = False,
    ) -> None:
        if not 1 <= max_in_flight_per_partition <= MAX_IN_FLIGHT_FOR_IDEMPOTENCE:
            raise ValueError(
                f"between 1 and {MAX_IN_FLIGHT_FOR_IDEMPOTENCE} batches in flight, "
                f"not {max_in_flight_per_partition}"
            )
        self._max_in_flight = max_in_flight_per_partition
        # A transactional producer's epoch is its coordinator's: never bumped here.
        self._transactional = transactional
        self.producer_id_and_epoch = NONE
        self._partitions: dict[TopicPartition, _PartitionState] = {}
        # Partitions whose sequences must start again under a newer epoch.
        self._partitions_to_rewrite: set[TopicPartition] = set()
        # partition -> the sequence after the last batch that expired in flight
        self._unresolved: dict[TopicPartition, int] = {}

    # --- the producer id ----------------------------------------------------------------

    @property
    def needs_producer_id(self) -> bool:
        """The transport must get one (InitProducerId) before anything is drained."""
        return not self.producer_id_and_epoch.is_valid

    def set_producer_id_and_epoch(self, producer_id: int, epoch: int) -> None:
        """A producer id from the broker: every partition starts again at sequence 0."""
        if producer_id < 0 or not 0 <= epoch <= MAX_PRODUCER_EPOCH:
            raise IllegalProducerStateError(f"invalid producer id {producer_id} epoch {epoch}")
        self.producer_id_and_epoch = ProducerIdAndEpoch(producer_id, epoch)
        self._partitions.clear()
        self._partitions_to_rewrite.clear()
        self._unresolved.clear()

    # --- what the tests and the transport may look at -----------------------------------

    def next_sequence(self, tp: TopicPartition) -> int:
        state = self._partitions.get(tp)
        return 0 if state is None else state.next_sequence

    def last_acked_sequence(self, tp: TopicPartition) -> int:
        state = self._partitions.get(tp)
        return NO_LAST_ACKED_SEQUENCE if state is None else state.last_acked_sequence

    def in_flight(self, tp: TopicPartition) -> tuple[ProducerBatch, ...]:
        state = self._partitions.get(tp)
        return () if state is None else tuple(state.in_flight)

    def has_unresolved_sequence(self, tp: TopicPartition) -> bool:
        return tp in self._unresolved

    @property
    def epoch_bump_required(self) -> bool:
        """Some partition waits to start its sequences again under a newer epoch."""
        return bool(self._partitions_to_rewrite)

    # --- drain ------------------------------------------------------------------------

    def may_drain(self, batch: ProducerBatch) -> bool:
        """Whether ``batch``, first in its partition's queue, may be sent now (Kafka's
        ``shouldStopDrainBatchesForPartition``, negated, plus the in-flight cap)."""
        if self.needs_producer_id:
            return False
        tp = batch.topic_partition
        if tp in self._partitions_to_rewrite:
            return False  # its batches go out restamped, once its requests are answered
        state = self._partitions.get(tp)
        if batch.has_sequence:
            # A retry: only the first in flight goes, so retries keep their order.
            return state is not None and bool(state.in_flight) and state.in_flight[0] is batch
        if state is None:
            return True
        if tp in self._unresolved or len(state.in_flight) >= self._max_in_flight:
            return False
        stale = state.producer_id_and_epoch != self.producer_id_and_epoch
        first_unanswered = state.last_acked_sequence == NO_LAST_ACKED_SEQUENCE
        return not ((stale or first_unanswered) and state.in_flight)

    def stamp(self, batch: ProducerBatch) -> None:
        """Give a drained batch its producer id, epoch and base sequence (Kafka's drain:
        ``setProducerState``, ``incrementSequenceNumber``, ``addInFlightBatch``); its
        request is out from now.  A retry keeps its stamp, and its bytes."""
        if not self.may_drain(batch):
            raise IllegalProducerStateError(f"{batch} may not be sent now")
        tp = batch.topic_partition
        state = self._partitions.get(tp)
        if batch.has_sequence:
            assert state is not None  # may_drain: it is the first in flight
            state.out.add(batch)
            return
        if state is None:
            state = self._partitions[tp] = _PartitionState(self.producer_id_and_epoch)
        elif state.producer_id_and_epoch != self.producer_id_and_epoch:
            state.start_sequences_at_beginning(self.producer_id_and_epoch)  # none in flight
        pid_epoch = self.producer_id_and_epoch
        batch.set_producer_state(pid_epoch.producer_id, pid_epoch.epoch, state.next_sequence)
        state.next_sequence = increment_sequence(state.next_sequence, batch.record_count)
        state.in_flight.append(batch)
        state.out.add(batch)

    # --- outcomes -----------------------------------------------------------------------

    def on_success(self, batch: ProducerBatch, base_offset: int | None) -> None:
        """The broker stored ``batch`` (or had: ``base_offset`` None for a
        ``DUPLICATE_SEQUENCE_NUMBER``)."""
        state = self._remove_in_flight(batch)
        if state is None:
            return
        state.may_have_stored = True
        if state.last_acked_sequence == NO_LAST_ACKED_SEQUENCE or sequence_after(
            batch.last_sequence, state.last_acked_sequence
        ):
            state.last_acked_sequence = batch.last_sequence
        if base_offset is not None:
            last_offset = base_offset + batch.record_count - 1
            state.last_acked_offset = max(state.last_acked_offset, last_offset)

    def can_retry(self, batch: ProducerBatch, reason: str, log_start_offset: int = -1) -> bool:
        """Whether a batch the broker refused with ``reason`` (a Kafka error name) should
        be sent again; may request new sequences (Kafka's ``canRetry``).  The attempt
        is answered: its request is no longer out."""
        tp = batch.topic_partition
        state = self._partitions.get(tp)
        if state is not None and batch in state.out:
            state.out.discard(batch)
            if reason in _OUTCOME_UNKNOWN:
                state.may_have_stored = True
        if reason == "UNKNOWN_PRODUCER_ID":
            if log_start_offset == -1 or batch.sequence_has_been_reset:
                return True
            if state is not None:  # the broker's log start passed what we stored
                state.may_have_stored = True
            self._request_epoch_bump(tp)
            return True
        if reason == "OUT_OF_ORDER_SEQUENCE_NUMBER":
            if tp in self._partitions_to_rewrite:
                return True  # behind the gap already found: goes again restamped
            unresolved = tp in self._unresolved
            if not unresolved and (
                batch.sequence_has_been_reset or not self._is_next_sequence(tp, batch.base_sequence)
            ):
                return True  # not the next one: an earlier retry will fill the gap
            if not unresolved or self._unresolved[tp] == batch.base_sequence:
                self._request_epoch_bump(tp)  # a real gap
            return True
        return reason in RETRIABLE_REASONS

    def on_failed(self, batch: ProducerBatch, reason: str, *, adjust_sequences: bool) -> None:
        """``batch`` failed for good (the error goes to its records' callers).

        ``adjust_sequences``: the broker answered, so it surely did not store the batch
        and later sequences now have a gap.  Without it (a local failure) nothing is known.
        """
        state = self._remove_in_flight(batch)
        if state is not None and not adjust_sequences:
            state.may_have_stored = True
        tp = batch.topic_partition
        if reason in ("OUT_OF_ORDER_SEQUENCE_NUMBER", "UNKNOWN_PRODUCER_ID") or adjust_sequences:
            self._request_epoch_bump(tp)

    def on_expired(self, batch: ProducerBatch) -> None:
        """``batch`` reached ``delivery.timeout.ms`` while in flight (its request out
        with no answer, or waiting to be retried): whether the broker has it is
        unknown until the partition's other batches settle."""
        if not batch.has_sequence:
            return
        state = self._partitions.get(batch.topic_partition)
        if state is not None and batch in state.out:
            state.may_have_stored = True  # its last attempt may yet be stored
        if self._remove_in_flight(batch) is not None:
            tp = batch.topic_partition
            next_sequence = increment_sequence(batch.last_sequence, 1)
            known = self._unresolved.get(tp)
            if known is None or sequence_after(next_sequence, known):
                self._unresolved[tp] = next_sequence

    def bump_epoch_if_needed(self) -> None:
        """Settle unresolved partitions, then start the sequences of the partitions
        that need it, and have none of their requests out, again under a new epoch
        (Kafka's ``maybeResolveSequences`` and ``bumpIdempotentEpochAndResetIdIfNeeded``,
        waiting as its ``maybeUpdateProducerIdAndEpoch`` waits).  Call before each drain."""
        self._maybe_resolve_sequences()
        if self.needs_producer_id:
            return
        ready = [
            (tp, self._partitions[tp])
            for tp in self._partitions_to_rewrite
            if tp in self._partitions and not self._partitions[tp].out
        ]
        self._partitions_to_rewrite &= set(self._partitions)  # those never stamped have none
        if not ready:
            return
        current = self.producer_id_and_epoch
        if any(s.producer_id_and_epoch == current and s.may_have_stored for _tp, s in ready):
            if self._transactional:
                return  # the transaction aborts, and the coordinator gives the next epoch
            if current.epoch >= MAX_PRODUCER_EPOCH:
                self.producer_id_and_epoch = NONE  # needs_producer_id: InitProducerId again
                self._partitions.clear()
                self._partitions_to_rewrite.clear()
                self._unresolved.clear()
                return
            current = ProducerIdAndEpoch(current.producer_id, current.epoch + 1)
            self.producer_id_and_epoch = current
        for tp, state in ready:
            state.start_sequences_at_beginning(current)
            self._partitions_to_rewrite.discard(tp)
            self._unresolved.pop(tp, None)

    # --- internals ----------------------------------------------------------------------

    def _request_epoch_bump(self, tp: TopicPartition) -> None:
        self._partitions_to_rewrite.add(tp)

    def _is_next_sequence(self, tp: TopicPartition, sequence: int) -> bool:
        """``sequence`` follows the last acknowledged one (0 when none was)."""
        return (sequence - self.last_acked_sequence(tp)) % SEQUENCE_MODULUS == 1

    def _remove_in_flight(self, batch: ProducerBatch) -> _PartitionState | None:
        state = self._partitions.get(batch.topic_partition)
        if state is None:
            return None
        for index, in_flight in enumerate(state.in_flight):
            if in_flight is batch:
                del state.in_flight[index]
                state.out.discard(batch)
                return state
        return None

    def _maybe_resolve_sequences(self) -> None:
        for tp in list(self._unresolved):
            state = self._partitions.get(tp)
            if state is not None and state.in_flight:
                continue
            # Settled: if the last acknowledged sequence reaches the end of what was
            # stamped, the expired batch was stored after all; otherwise there is a gap.
            del self._unresolved[tp]
            if state is not None and not self._is_next_sequence(tp, state.next_sequence):
                self._request_epoch_bump(tp)
