"""The transaction coordinator: transactional producers' state kept in ``__transaction_state``.

A transactional id belongs to the partition it hashes to (``transaction_topic``), and this
broker coordinates it while it leads that partition (``loaded_partitions``, as the group
coordinator: loaded by replaying the log once per leadership epoch). Every change is
computed by ``transaction_state``'s transitions, written as one record through the
broker's own produce path with acks=all (``Append``), and applied once acknowledged.

Ending a transaction is Kafka's two phases. PrepareCommit (or PrepareAbort) is written
first: from then on the outcome is decided and survives a crash. Then every partition of
the transaction gets its marker, a control batch stamped with the producer's id and epoch
and this coordinator's epoch (the leadership epoch of its ``__transaction_state``
partition, so a deposed coordinator's late markers are refused), through ``WriteMarker``
(an append on this broker or a WriteTxnMarkers call to the partition's leader). Then
CompleteCommit (CompleteAbort) is written. A coordinator that loads a partition finds
the prepared transactions its predecessor did not complete and completes them; an
ongoing one past its ``transaction.timeout.ms`` is aborted at the next epoch, which
fences its producer. While a transactional id's transaction is being completed, its
calls get CONCURRENT_TRANSACTIONS.

Unlike Kafka, EndTxn is answered once the transaction is complete, not once it is
prepared, so a producer that saw its commit acknowledged can read its markers.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Collection, Sequence

from tierlog.api.errors import (
    ConcurrentTransactionsError,
    CoordinatorLoadInProgressError,
    InvalidGroupIdError,
    InvalidRequestError,
    InvalidTransactionTimeoutError,
    LeaderNotAvailableError,
    NotCoordinatorError,
    NotEnoughReplicasError,
    NotLeaderOrFollowerError,
    TransactionalIdNotFoundError,
)
from tierlog.broker.partitions import Leader, Leaders, Partitions
from tierlog.coordinator.coordinator import Append
from tierlog.coordinator.loaded_partitions import Loaded, LoadedPartitions
from tierlog.coordinator.offsets_topic import OFFSETS_TOPIC, partition_for_group
from tierlog.coordinator.transaction_config import TransactionCoordinatorConfig
from tierlog.coordinator.transaction_metrics import (
    MarkerOutcome,
    TransactionMetrics,
    TransactionOutcome,
)
from tierlog.coordinator.transaction_records import (
    NO_PRODUCER_ID,
    TransactionLogKey,
    TransactionLogRecord,
    TransactionLogValue,
    TransactionState,
    encode_transaction_record,
)
from tierlog.coordinator.transaction_state import (
    PREPARED,
    TransactionsState,
    add_partitions,
    check_partition_in_transaction,
    complete,
    end_transaction,
    fence_and_abort,
    init_producer,
    is_retried_rollover,
    load_transactions,
    partitions_of,
)
from tierlog.coordinator.transaction_topic import (
    TRANSACTION_STATE_TOPIC,
    partition_for_transactional_id,
)
from tierlog.storage.errors import TierlogError, UnknownTopicOrPartitionError
from tierlog.storage.log import Log
from tierlog.storage.records import (
    ControlRecordType,
    EndTransactionMarker,
    SimpleRecord,
    build_batch,
    build_end_txn_marker_batch,
    iter_batches,
)
from tierlog.storage.topic_partition import TopicPartition
from tierlog.storage.verification_guards import VerificationGuard

__all__ = [
    "MARKER_RETRIABLE_REASONS",
    "VERIFICATION_RETRIABLE_REASONS",
    "TransactionCoordinator",
    "VerifyElsewhere",
    "WriteMarker",
]

log = logging.getLogger(__name__)

# Appends a marker batch to a partition, on its leader, with acks=all.
WriteMarker = Callable[[TopicPartition, bytes], Awaitable[None]]

# Asks the broker leading a ``__transaction_state`` partition whether a partition is in
# a producer's ongoing transaction (``check_in_transaction`` there): (coordinator
# partition, transactional id, producer id, producer epoch, partition). Raises its answer.
VerifyElsewhere = Callable[[int, str, int, int, TopicPartition], Awaitable[None]]

# A verification failing so is retried by the producer: the coordinator loading, moving,
# unreachable or completing the transaction. Kafka's leader answers these
# NOT_ENOUGH_REPLICAS, which every client retries without refreshing its metadata.
VERIFICATION_RETRIABLE_REASONS = frozenset(
    {
        "CONCURRENT_TRANSACTIONS",
        "NETWORK_EXCEPTION",
        "REQUEST_TIMED_OUT",
        "COORDINATOR_LOAD_IN_PROGRESS",
        "COORDINATOR_NOT_AVAILABLE",
        "LEADER_NOT_AVAILABLE",
        "NOT_COORDINATOR",
    }
)
# Verified (producer id, epoch, partition)s kept, the oldest dropped first.
VERIFIED_CACHE_SIZE = 10_000

# A marker refused with one of these is written again after a back-off: the partition's
# leader is moving, behind, or could not be reached.
MARKER_RETRIABLE_REASONS = frozenset(
    {
        "NOT_LEADER_OR_FOLLOWER",
        "LEADER_NOT_AVAILABLE",
        "FENCED_LEADER_EPOCH",
        "UNKNOWN_LEADER_EPOCH",
        "NOT_ENOUGH_REPLICAS",
        "NOT_ENOUGH_REPLICAS_AFTER_APPEND",
        "REQUEST_TIMED_OUT",
        "KAFKA_STORAGE_ERROR",
        "NETWORK_EXCEPTION",
        "COORDINATOR_NOT_AVAILABLE",
        # A __consumer_offsets partition whose group coordinator is loading or moving.
        "COORDINATOR_LOAD_IN_PROGRESS",
        "NOT_COORDINATOR",
    }
)


class TransactionCoordinator:
    def __init__(
        self,
        partitions: Partitions[Leaders[Leader]],
        config: TransactionCoordinatorConfig,
        append: Append,
        write_marker: WriteMarker,
        new_producer_id: Callable[[], int],
        verify_elsewhere: VerifyElsewhere,
        *,
        follow_interval_s: float = 0.2,
        marker_retry_backoff_s: float = 0.1,
        clock_ms: Callable[[], int] = lambda: int(time.time() * 1000),
    ) -> None:
        self.partitions = partitions
        self.config = config
        self.append = append
        self.write_marker = write_marker
        self.new_producer_id = new_producer_id
        self.verify_elsewhere = verify_elsewhere
        self.follow_interval_s = follow_interval_s
        self.marker_retry_backoff_s = marker_retry_backoff_s
        self.clock_ms = clock_ms
        self._loaded: LoadedPartitions[TransactionsState] = LoadedPartitions(
            partitions,
            TRANSACTION_STATE_TOPIC,
            config.topic_partitions,
            load_transactions,
            on_loaded=self._recover,
        )
        # Transactional ids with a call or a completion in flight (one at a time each).
        self._busy: set[str] = set()
        self._completions: dict[str, asyncio.Task[None]] = {}
        self._tasks: list[asyncio.Task[None]] = []
        # (producer id, epoch, partition) -> the partition's (leader epoch, log end
        # offset) when it was verified; see ``verify_append``.
        self._verified: OrderedDict[tuple[int, int, TopicPartition], tuple[int, int]] = (
            OrderedDict()
        )
        self.metrics = TransactionMetrics(self, clock_ms)  # the sidecar registers it

    # -- running ----------------------------------------------------------------------

    async def start(self) -> None:
        self._tasks = [
            asyncio.create_task(
                self._loaded.follow(self.follow_interval_s), name="txn-coordinator-follow"
            ),
            asyncio.create_task(self._abort_timed_out(), name="txn-coordinator-timeouts"),
        ]

    async def stop(self) -> None:
        tasks = [*self._tasks, *self._completions.values()]
        for task in tasks:
            task.cancel()
        self._loaded.stop()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _abort_timed_out(self) -> None:
        while True:
            await asyncio.sleep(self.config.abort_timed_out_interval_ms / 1000)
            try:
                await self.abort_timed_out_once()
            except TierlogError as error:  # not leading any more, the disk...: next time
                log.warning("aborting timed-out transactions failed: %s: %s", error.reason, error)

    async def abort_timed_out_once(self) -> int:
        """Abort every ongoing transaction open longer than its timeout, fencing its
        producer (the abort is at the next epoch), all at once; how many were aborted."""
        now_ms = self.clock_ms()
        aborts = []
        for loaded in list(self._loaded):
            assert loaded.state is not None
            for transactional_id, value in loaded.state.items():
                expired = value.start_timestamp_ms + value.transaction_timeout_ms < now_ms
                if value.state is not TransactionState.ONGOING or not expired:
                    continue
                if transactional_id in self._busy:
                    continue
                log.info(
                    "transaction of %r (producer %d epoch %d) timed out after %d ms: aborting",
                    transactional_id,
                    value.producer_id,
                    value.producer_epoch,
                    value.transaction_timeout_ms,
                )
                aborts.append(
                    self._abort_over_its_head(
                        loaded, transactional_id, value, TransactionOutcome.TIMED_OUT
                    )
                )
        outcomes = await asyncio.gather(*aborts, return_exceptions=True)
        for outcome in outcomes:
            if isinstance(outcome, TierlogError):
                log.warning("aborting a timed-out transaction: %s: %s", outcome.reason, outcome)
            elif isinstance(outcome, BaseException):
                raise outcome
        return sum(outcome is None for outcome in outcomes)

    # -- leadership and loading -------------------------------------------------------

    def partition_count(self) -> int:
        """``__transaction_state``'s partitions (``transaction.state.log.num.partitions``
        before it exists)."""
        return self._loaded.partition_count()

    def partition_of(self, transactional_id: str) -> int:
        if not transactional_id:
            raise InvalidRequestError("a transactional id cannot be empty")
        return partition_for_transactional_id(transactional_id, self.partition_count())

    def coordinated_partitions(self) -> dict[int, TransactionsState | None]:
        """For the metrics thread: the partitions led here, their states (None: loading)."""
        return self._loaded.led()

    def _state(self, transactional_id: str) -> Loaded[TransactionsState]:
        partition = self.partition_of(transactional_id)
        return self._loaded.loaded(partition, f"transactional id {transactional_id!r}")

    def _recover(self, loaded: Loaded[TransactionsState]) -> None:
        """Complete the transactions the previous coordinator prepared and left."""
        assert loaded.state is not None
        for transactional_id, value in loaded.state.items():
            if value.state in PREPARED:
                self._recover_one(loaded, transactional_id)

    def _recover_one(self, loaded: Loaded[TransactionsState], transactional_id: str) -> None:
        if not self._loaded.is_current(loaded):
            return
        assert loaded.state is not None
        value = loaded.state.get(transactional_id)
        if value is None or value.state not in PREPARED:
            return
        running = self._completions.get(transactional_id)
        if running is not None:  # an earlier leadership's, about to find it lost: then us
            running.add_done_callback(lambda _task: self._recover_one(loaded, transactional_id))
            return
        if transactional_id in self._busy:
            return  # a call is writing it now; it completes what it prepares
        log.info("completing the %s of %r", value.state.name, transactional_id)
        self._busy.add(transactional_id)
        committed = value.state is TransactionState.PREPARE_COMMIT
        outcome = TransactionOutcome.COMMITTED if committed else TransactionOutcome.ABORTED
        self._start_completion(loaded, transactional_id, value, outcome)

    # -- writing ----------------------------------------------------------------------

    async def _write(
        self, loaded: Loaded[TransactionsState], transactional_id: str, value: TransactionLogValue
    ) -> None:
        """Append the id's new value, acks=all; once acknowledged, apply it."""
        record = TransactionLogRecord(TransactionLogKey(transactional_id), value)
        batch = build_batch([SimpleRecord(*encode_transaction_record(record), self.clock_ms())])
        tp = TopicPartition(TRANSACTION_STATE_TOPIC, loaded.partition)
        try:
            await self.append(tp, batch)
        except (NotLeaderOrFollowerError, LeaderNotAvailableError) as error:
            raise NotCoordinatorError(f"transactional id {transactional_id!r}: {error}") from None
        if not self._loaded.is_current(loaded):
            raise NotCoordinatorError(f"{tp}: the leadership changed while writing")
        assert loaded.state is not None
        loaded.state.replay(record)

    def _claim(self, transactional_id: str) -> None:
        if transactional_id in self._busy:
            raise ConcurrentTransactionsError(
                f"{transactional_id!r}: another call or a transaction's completion is in "
                "flight; retry"
            )
        self._busy.add(transactional_id)

    def _start_completion(
        self,
        loaded: Loaded[TransactionsState],
        transactional_id: str,
        value: TransactionLogValue,
        outcome: TransactionOutcome,
    ) -> asyncio.Task[None]:
        """Write the markers of a prepared transaction, then complete it (the id stays
        claimed until then); ``outcome`` is what the metrics count it as."""
        task = asyncio.create_task(self._complete(loaded, transactional_id, value, outcome))
        self._completions[transactional_id] = task

        def done(_task: asyncio.Task[None]) -> None:
            # Before any other callback: whoever waits on the task finds the id free.
            self._busy.discard(transactional_id)
            if self._completions.get(transactional_id) is task:
                del self._completions[transactional_id]

        task.add_done_callback(done)
        return task

    async def _complete(
        self,
        loaded: Loaded[TransactionsState],
        transactional_id: str,
        value: TransactionLogValue,
        outcome: TransactionOutcome,
    ) -> None:
        control = (
            ControlRecordType.COMMIT
            if value.state is TransactionState.PREPARE_COMMIT
            else ControlRecordType.ABORT
        )
        marker = build_end_txn_marker_batch(
            EndTransactionMarker(control, loaded.epoch),
            producer_id=value.producer_id,
            producer_epoch=value.producer_epoch,
            timestamp_ms=self.clock_ms(),
        )
        await asyncio.gather(
            *(self._write_marker(loaded, tp, marker) for tp in sorted(partitions_of(value)))
        )
        await self._write(loaded, transactional_id, complete(value, self.clock_ms()))
        self.metrics.transaction_ended(outcome)

    async def _write_marker(
        self, loaded: Loaded[TransactionsState], tp: TopicPartition, marker: bytes
    ) -> None:
        """The marker appended to ``tp``: retried while its leader is moving, given up on
        a partition deleted meanwhile (as Kafka drops it)."""
        while True:
            if not self._loaded.is_current(loaded):
                raise NotCoordinatorError(f"{tp}: no longer the coordinator of its transaction")
            try:
                await self.write_marker(tp, marker)
                self.metrics.marker_sent(MarkerOutcome.WRITTEN)
                return
            except UnknownTopicOrPartitionError:
                log.warning("%s is gone: its transaction marker is dropped", tp)
                self.metrics.marker_sent(MarkerOutcome.DROPPED)
                return
            except TierlogError as error:
                if error.reason not in MARKER_RETRIABLE_REASONS:
                    log.error("marker to %s: %s: %s; not retried", tp, error.reason, error)
                    self.metrics.marker_sent(MarkerOutcome.FAILED)
                    raise
                log.info("marker to %s: %s: %s; retrying", tp, error.reason, error)
                self.metrics.marker_sent(MarkerOutcome.RETRIED)
            await asyncio.sleep(self.marker_retry_backoff_s)

    async def _abort_over_its_head(
        self,
        loaded: Loaded[TransactionsState],
        transactional_id: str,
        value: TransactionLogValue,
        why: TransactionOutcome,
    ) -> None:
        """Abort an ongoing transaction at the next epoch, fencing its producer."""
        self._claim(transactional_id)
        try:
            prepared = fence_and_abort(value, self.clock_ms())
            await self._write(loaded, transactional_id, prepared)
        except BaseException:
            self._busy.discard(transactional_id)
            raise
        await asyncio.shield(self._start_completion(loaded, transactional_id, prepared, why))

    # -- the calls --------------------------------------------------------------------

    async def init_producer_id(
        self,
        transactional_id: str,
        timeout_ms: int,
        producer_id: int = NO_PRODUCER_ID,
        producer_epoch: int = -1,
    ) -> tuple[int, int]:
        """The producer id and epoch of ``transactional_id``'s next producer: a new id,
        or the id's with the next epoch; an ongoing transaction is aborted first. A
        producer naming its id and epoch (KIP-360, after an abortable error) must be the
        id's current one (``transaction_state.is_retried_rollover``)."""
        if not 0 < timeout_ms <= self.config.max_timeout_ms:
            raise InvalidTransactionTimeoutError(
                f"transaction.timeout.ms {timeout_ms} is not in (0, transaction.max.timeout.ms "
                f"= {self.config.max_timeout_ms}]"
            )
        loaded = self._state(transactional_id)
        assert loaded.state is not None
        current = loaded.state.get(transactional_id)
        if is_retried_rollover(transactional_id, current, producer_id, producer_epoch):
            assert current is not None
            return current.producer_id, current.producer_epoch
        if current is not None and current.state is TransactionState.ONGOING:
            await self._abort_over_its_head(
                loaded, transactional_id, current, TransactionOutcome.FENCED
            )
            current = loaded.state.get(transactional_id)
        self._claim(transactional_id)
        try:
            value = init_producer(
                transactional_id, current, timeout_ms, self.clock_ms(), self.new_producer_id
            )
            await self._write(loaded, transactional_id, value)
        finally:
            self._busy.discard(transactional_id)
        return value.producer_id, value.producer_epoch

    async def add_partitions(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        tps: Sequence[TopicPartition],
    ) -> None:
        """Add ``tps`` to the producer's transaction (beginning it)."""
        loaded = self._state(transactional_id)
        assert loaded.state is not None
        for tp in tps:
            self.partitions.topics.check_partition(tp.topic, tp.partition)
        self._claim(transactional_id)
        try:
            value = add_partitions(
                transactional_id,
                loaded.state.get(transactional_id),
                producer_id,
                producer_epoch,
                tps,
                self.clock_ms(),
            )
            if value is not None:
                await self._write(loaded, transactional_id, value)
        finally:
            self._busy.discard(transactional_id)

    async def add_offsets(
        self, transactional_id: str, producer_id: int, producer_epoch: int, group_id: str
    ) -> None:
        """AddOffsetsToTxn: the group's ``__consumer_offsets`` partition joins the
        producer's transaction, so its marker reaches the group's coordinator."""
        if not group_id:
            raise InvalidGroupIdError("a group id cannot be empty")
        offsets_topic = self.partitions.topics.get(OFFSETS_TOPIC)
        partition = partition_for_group(group_id, offsets_topic.partition_count)
        tp = TopicPartition(OFFSETS_TOPIC, partition)
        await self.add_partitions(transactional_id, producer_id, producer_epoch, [tp])

    async def end_transaction(
        self, transactional_id: str, producer_id: int, producer_epoch: int, *, commit: bool
    ) -> None:
        """Commit or abort the producer's transaction; returns once it is complete."""
        loaded = self._state(transactional_id)
        assert loaded.state is not None
        self._claim(transactional_id)
        try:
            prepared = end_transaction(
                transactional_id,
                loaded.state.get(transactional_id),
                producer_id,
                producer_epoch,
                commit,
                self.clock_ms(),
            )
            if prepared is not None:
                await self._write(loaded, transactional_id, prepared)
        except BaseException:
            self._busy.discard(transactional_id)
            raise
        if prepared is None:  # already ended so: an EndTxn sent again
            self._busy.discard(transactional_id)
            return
        outcome = TransactionOutcome.COMMITTED if commit else TransactionOutcome.ABORTED
        await asyncio.shield(self._start_completion(loaded, transactional_id, prepared, outcome))

    def check_in_transaction(
        self, transactional_id: str, producer_id: int, producer_epoch: int, tp: TopicPartition
    ) -> None:
        """The coordinator's side of a verification (Kafka's AddPartitionsToTxn v4 with
        verifyOnly): ``tp`` is in the producer's ongoing transaction, else
        INVALID_TXN_STATE (``check_partition_in_transaction``); NOT_COORDINATOR or
        COORDINATOR_LOAD_IN_PROGRESS when the id is not (yet) coordinated here."""
        loaded = self._state(transactional_id)
        assert loaded.state is not None
        check_partition_in_transaction(
            transactional_id, loaded.state.get(transactional_id), producer_id, producer_epoch, tp
        )

    async def verify_append(
        self, transactional_id: str, tp: TopicPartition, partition_log: Log, data: bytes
    ) -> VerificationGuard | None:
        """Before a producer's transactional batches are appended to ``tp``, which this
        broker leads, under ``transactional_id`` (Produce names it): the batch that would
        open its transaction there must find ``tp`` in its ongoing transaction, asked of
        the id's coordinator: ``check_in_transaction`` here, or over the brokers' channel
        (``verify_elsewhere``) when another broker coordinates the id.

        Asked once per transaction and partition: once a batch opened the transaction,
        the log says so; and a verified (producer id, epoch, partition) is remembered
        with the partition's leader epoch and end offset, so a batch retried after its
        append failed is not asked again. The entry holds only while nothing was
        appended there since: a marker ends the transaction on ``tp`` (and in
        transactions v1 the next one keeps the epoch), and it moves the end offset.

        Errors as Kafka's leader answers them: a coordinator loading, moving or out of
        reach, or a transaction being completed, NOT_ENOUGH_REPLICAS (retried); another
        epoch INVALID_PRODUCER_EPOCH; a partition not added INVALID_TXN_STATE.

        The answer is the guard to append with (None when no verification was needed):
        it is taken before the coordinator is asked, and a marker for the producer that
        lands here before the append voids it, so the check and the append are one step
        (``storage.verification_guards``)."""
        header = next(iter_batches(data), None)
        if header is None or not header.is_transactional or header.is_control:
            return None
        if not self.config.partition_verification:
            return None
        if partition_log.has_open_transaction(header.producer_id):
            return None  # its transaction on tp was verified by the batch that opened it
        guard = partition_log.verification_guard(header.producer_id)
        key = (header.producer_id, header.producer_epoch, tp)
        position = (partition_log.leader_epoch, partition_log.log_end_offset)
        if self._verified.get(key) == position:
            return guard
        self.metrics.verification_asked()
        try:
            await self._ask_coordinator(transactional_id, key)
        except TierlogError as error:
            if error.reason not in VERIFICATION_RETRIABLE_REASONS:
                self.metrics.verification_refused(error.reason)
                raise
            self.metrics.verification_refused(NotEnoughReplicasError.reason)
            raise NotEnoughReplicasError(
                f"{tp}: cannot verify the transaction yet: {error.reason}: {error}"
            ) from None
        self._verified[key] = position
        self._verified.move_to_end(key)
        while len(self._verified) > VERIFIED_CACHE_SIZE:
            self._verified.popitem(last=False)
        return guard

    async def _ask_coordinator(
        self, transactional_id: str, key: tuple[int, int, TopicPartition]
    ) -> None:
        partition = self.partition_of(transactional_id)
        if self._loaded.leader_epoch(partition) is not None:
            self.check_in_transaction(transactional_id, *key)
        else:
            await self.verify_elsewhere(partition, transactional_id, *key)

    def describe(self, transactional_id: str) -> TransactionLogValue:
        """The id's current value (TRANSACTIONAL_ID_NOT_FOUND for an id unknown here)."""
        loaded = self._state(transactional_id)
        assert loaded.state is not None
        value = loaded.state.get(transactional_id)
        if value is None:
            raise TransactionalIdNotFoundError(f"transactional id {transactional_id!r} is unknown")
        return value

    def list_transactions(
        self,
        states: Collection[TransactionState] = (),
        producer_ids: Collection[int] = (),
        running_longer_than_ms: int = -1,
    ) -> list[tuple[str, TransactionLogValue]]:
        """The transactional ids this broker coordinates (a client asks every broker),
        filtered as Kafka's ListTransactions: by state, by producer id (each when given),
        and to transactions open longer than ``running_longer_than_ms`` (when >= 0).
        COORDINATOR_LOAD_IN_PROGRESS while a partition led here is loading."""
        led = self._loaded.led()
        loading = sorted(partition for partition, state in led.items() if state is None)
        if loading:
            raise CoordinatorLoadInProgressError(
                f"{TRANSACTION_STATE_TOPIC} partitions {loading} are loading; retry"
            )
        now_ms = self.clock_ms()
        listed = []
        for state in led.values():
            assert state is not None
            for transactional_id, value in state.items():
                if states and value.state not in states:
                    continue
                if producer_ids and value.producer_id not in producer_ids:
                    continue
                running_ms = now_ms - value.start_timestamp_ms  # as Kafka: from -1 if none
                if running_longer_than_ms >= 0 and running_ms <= running_longer_than_ms:
                    continue
                listed.append((transactional_id, value))
        return listed
