"""KIP-890's verification guards: what makes "verified, then appended" one step.

Before a producer's first transactional batch on a partition is appended, its leader asks
the transaction coordinator whether the partition is in the producer's ongoing
transaction. The answer can go stale while it travels: the producer may end that
transaction (and its marker land here) before the batch is appended, and the batch would
then open a transaction nobody will end, holding the partition's last stable offset (and
every ``read_committed`` consumer) until the transaction times out. So the leader takes
a guard for the producer before it asks; a marker for that producer drops the guard; the
append goes ahead only while the guard it was given is still the one held (under the
log's lock, in ``Log.append``). A follower keeps none: a leader that becomes one forgets
its guards, and a batch verified before that is refused when appended.
"""

from __future__ import annotations

from collections import OrderedDict

__all__ = ["VerificationGuard", "VerificationGuards"]

# Guards held per log at most: one per producer between its verification and its
# transaction's first append, so a handful; past the bound the oldest is dropped (its
# batch, if it still comes, is refused with a retriable error and verified afresh).
MAX_GUARDS = 1024


class VerificationGuard:
    """An identity: a guard matches only itself."""

    __slots__ = ()


class VerificationGuards:
    """A log's guards by producer id; the caller holds the log's lock."""

    def __init__(self) -> None:
        self._by_producer: OrderedDict[int, VerificationGuard] = OrderedDict()

    def take(self, producer_id: int) -> VerificationGuard:
        """The producer's guard, made if it has none."""
        guard = self._by_producer.get(producer_id)
        if guard is None:
            guard = self._by_producer[producer_id] = VerificationGuard()
            while len(self._by_producer) > MAX_GUARDS:
                self._by_producer.popitem(last=False)
        return guard

    def holds(self, producer_id: int, guard: VerificationGuard) -> bool:
        return self._by_producer.get(producer_id) is guard

    def drop(self, producer_id: int) -> None:
        self._by_producer.pop(producer_id, None)

    def clear(self) -> None:
        self._by_producer.clear()
