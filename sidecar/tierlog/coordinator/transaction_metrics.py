"""Transactions' series: how they end, how many are open, their markers, and the
produce batches KIP-890's verification refused (docs/METRICS.md, "Transactions").

Transactions end where they are coordinated, so the coordinator counts them, by how:
committed or aborted by their producer, or aborted over its head, because it stayed
open past its ``transaction.timeout.ms`` (``timed_out``) or a new producer of its id
called InitProducerId (``fenced``). A transaction the previous coordinator prepared and
this one completes counts as committed or aborted. Each is counted once its
CompleteCommit (CompleteAbort) is acknowledged by ``__transaction_state``.

Markers are counted as the coordinator sends them: written, written again after a
retriable error (a leader moving), dropped (the partition was deleted), or failed (an
error not retried: the transaction stays prepared until the coordinator's next load,
holding every ``read_committed`` consumer of the partitions that missed it; the
``TierlogTransactionMarkersFailing`` alert).

A partition's leader asks the coordinator before the batch that opens a transaction
there is appended (``verifications``), and refuses the batch when the answer is no, or
when a marker voided the verification before the append (both INVALID_TXN_STATE,
Kafka's error for the case), or when the coordinator cannot answer yet
(NOT_ENOUGH_REPLICAS, retried by the producer): refusals by reason.

Transactional ids by state are read at scrape time from the loaded partitions' states
(each copied in one step: the event loop changes them while a metrics thread reads).
Every outcome and state has its series from the start, at zero, so a dashboard panel
and an alert find them before the first transaction.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Mapping
from enum import Enum
from typing import Protocol, TypeVar

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from tierlog.coordinator.transaction_records import TransactionState
from tierlog.coordinator.transaction_state import TransactionsState

__all__ = [
    "CoordinatedTransactions",
    "MarkerOutcome",
    "TransactionMetrics",
    "TransactionOutcome",
]


class TransactionOutcome(Enum):
    COMMITTED = "committed"
    ABORTED = "aborted"  # by its producer's EndTxn, or a predecessor's prepared abort
    TIMED_OUT = "timed_out"  # by the coordinator: open past its transaction.timeout.ms
    FENCED = "fenced"  # by the coordinator: a new producer of its id (InitProducerId)


class MarkerOutcome(Enum):
    WRITTEN = "written"
    RETRIED = "retried"  # refused with a retriable error; written again after a back-off
    DROPPED = "dropped"  # its partition was deleted: nothing left to end
    FAILED = "failed"  # refused for good: the transaction is left prepared


_Family = TypeVar("_Family", CounterMetricFamily, GaugeMetricFamily)

# Refusals every broker may answer, with series from the start.
_REFUSAL_REASONS = ("INVALID_TXN_STATE", "NOT_ENOUGH_REPLICAS")


class CoordinatedTransactions(Protocol):
    def coordinated_partitions(self) -> Mapping[int, TransactionsState | None]:
        """The ``__transaction_state`` partitions led here and their states (None while
        loading); safe to call from a thread other than the event loop's."""
        ...


class TransactionMetrics:
    """The coordinator's hooks (called on the event loop) and the collector a metrics
    thread reads."""

    def __init__(
        self,
        transactions: CoordinatedTransactions,
        clock_ms: Callable[[], int] = lambda: int(time.time() * 1000),
    ) -> None:
        self.transactions = transactions
        self.clock_ms = clock_ms
        self._lock = threading.Lock()  # the counts: written on the loop, read by scrapes
        self._outcomes = dict.fromkeys(TransactionOutcome, 0)
        self._markers = dict.fromkeys(MarkerOutcome, 0)
        self._verifications = 0
        self._refusals = dict.fromkeys(_REFUSAL_REASONS, 0)

    # -- hooks ------------------------------------------------------------------------

    def transaction_ended(self, outcome: TransactionOutcome) -> None:
        with self._lock:
            self._outcomes[outcome] += 1

    def marker_sent(self, outcome: MarkerOutcome) -> None:
        with self._lock:
            self._markers[outcome] += 1

    def verification_asked(self) -> None:
        with self._lock:
            self._verifications += 1

    def verification_refused(self, reason: str) -> None:
        """A produced batch refused for its verification, by Kafka's error name."""
        with self._lock:
            self._refusals[reason] = self._refusals.get(reason, 0) + 1

    # -- the scrape -------------------------------------------------------------------

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            outcomes, markers = dict(self._outcomes), dict(self._markers)
            verifications, refusals = self._verifications, dict(self._refusals)
        yield from self._open_transactions()
        yield _labelled(
            CounterMetricFamily(
                "tierlog_transactions",
                "Transactions ended by this coordinator, by how (committed, aborted by the "
                "producer, aborted for timing out or for a new producer of the id)",
                labels=["outcome"],
            ),
            {outcome.value: count for outcome, count in outcomes.items()},
        )
        yield _labelled(
            CounterMetricFamily(
                "tierlog_transaction_markers",
                "Transaction markers this coordinator sent to partitions' leaders, by outcome",
                labels=["outcome"],
            ),
            {outcome.value: count for outcome, count in markers.items()},
        )
        yield CounterMetricFamily(
            "tierlog_transaction_verifications",
            "Transactions' first batches on a partition led here checked with their "
            "coordinator before the append (KIP-890)",
            value=verifications,
        )
        yield _labelled(
            CounterMetricFamily(
                "tierlog_transaction_verification_refusals",
                "Produced transactional batches refused for their verification, by Kafka "
                "error (INVALID_TXN_STATE: not in the producer's transaction)",
                labels=["reason"],
            ),
            refusals,
        )

    def _open_transactions(self) -> Iterator[Metric]:
        by_state = {state.kafka_name: 0 for state in TransactionState}
        oldest_start_ms: int | None = None
        for state in self.transactions.coordinated_partitions().values():
            for _transactional_id, value in () if state is None else state.items():
                by_state[value.state.kafka_name] += 1
                if value.state is TransactionState.ONGOING and (
                    oldest_start_ms is None or value.start_timestamp_ms < oldest_start_ms
                ):
                    oldest_start_ms = value.start_timestamp_ms
        yield _labelled(
            GaugeMetricFamily(
                "tierlog_transactional_ids",
                "Transactional ids this broker coordinates, by their transaction's state "
                "(Ongoing: open transactions)",
                labels=["state"],
            ),
            by_state,
        )
        age_ms = 0 if oldest_start_ms is None else max(self.clock_ms() - oldest_start_ms, 0)
        yield GaugeMetricFamily(
            "tierlog_transaction_oldest_ongoing_seconds",
            "How long the oldest ongoing transaction coordinated here has been open (0: none)",
            value=age_ms / 1000,
        )


def _labelled(family: _Family, counts: Mapping[str, int]) -> _Family:
    for label, count in counts.items():
        family.add_metric([label], count)
    return family
