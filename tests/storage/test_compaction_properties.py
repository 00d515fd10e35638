"""Compaction against a model: keyed appends, tombstones, rolls, time, cleanings, reopens.

The model keeps every record ever appended, the time each tombstone was first cleaned
(the first cleaning whose range held it), and the times of all cleanings. After every
step, reading the log from its start must give:

- offsets that strictly increase, each record exactly as it was appended at its offset,
  and the log end where the model's is;
- for every key whose latest record is a value: that record, last among the key's;
- for every key whose latest record is a tombstone: that tombstone, last among the
  key's, until a cleaning ran at or after its horizon (first cleaning +
  ``delete.retention.ms``); from then on nothing at all of the key.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from tests.storage.compaction import compacted, records
from tests.storage.conftest import T0, FakeClock
from tierlog.storage.cleaner import Cleaner
from tierlog.storage.cleaner_manager import cleanable_offsets
from tierlog.storage.log import Log
from tierlog.storage.records import CompressionType, Record, SimpleRecord, build_batch

DELETE_RETENTION_MS = 1000
CONFIG = compacted(segment_bytes=400, delete_retention_ms=DELETE_RETENTION_MS)
KEYS = [b"k%d" % number for number in range(8)]

PAIRS = st.lists(
    st.tuples(st.sampled_from(KEYS), st.none() | st.binary(min_size=1, max_size=20)),
    min_size=1,
    max_size=5,
)
CODECS = st.sampled_from([CompressionType.NONE, CompressionType.GZIP, CompressionType.LZ4])
# From a map that holds one batch at a time to one that holds everything.
BUDGETS = st.sampled_from([1, 600, 1 << 20])


class CompactionMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.root = Path(tempfile.mkdtemp(prefix="tierlog-compaction-"))
        self.directory = self.root / "t-0"
        self.clock = FakeClock(T0)
        self.log = Log.open(self.directory, CONFIG, clock_ms=self.clock)
        self.appended: dict[int, tuple[bytes, bytes | None]] = {}  # offset -> key, value
        self.first_cleaned_ms: dict[int, int] = {}  # tombstone offset -> time
        self.cleanings_ms: list[int] = []
        self.checkpoint: int | None = None
        self.cleaned_to = 0  # below it, the last cleaning left one record per key

    def teardown(self) -> None:
        self.log.close()
        shutil.rmtree(self.root, ignore_errors=True)

    @rule(pairs=PAIRS, codec=CODECS)
    def append(self, pairs: list[tuple[bytes, bytes | None]], codec: CompressionType) -> None:
        batch = build_batch(
            [SimpleRecord(key, value, self.clock()) for key, value in pairs], compression=codec
        )
        info = self.log.append(batch)
        for offset, pair in enumerate(pairs, start=info.first_offset):
            self.appended[offset] = pair

    @rule()
    def roll(self) -> None:
        self.log.roll()

    @rule(ms=st.sampled_from([1, 999, 1000]) | st.integers(0, 1500))
    def advance_clock(self, ms: int) -> None:
        self.clock.advance(ms)

    @rule(budget=BUDGETS)
    def clean(self, budget: int) -> None:
        """Rounds from the checkpoint until the whole cleanable range is clean."""
        now = self.clock()
        first_dirty, stop, _due = cleanable_offsets(self.log, self.checkpoint, now)
        cleaner = Cleaner(budget)
        while True:
            end = cleaner.clean(self.log, first_dirty, stop).end_offset
            self.checkpoint = first_dirty = end
            if end >= stop:
                break
        for offset, (_key, value) in self.appended.items():
            if value is None and offset < stop:
                self.first_cleaned_ms.setdefault(offset, now)
        self.cleanings_ms.append(now)
        self.cleaned_to = stop

    @rule()
    def reopen(self) -> None:
        self.log.close()
        self.log = Log.open(self.directory, CONFIG, clock_ms=self.clock, clean_shutdown=True)

    # -- what a reader sees -----------------------------------------------------------

    def latest(self, below: int | None = None) -> dict[bytes, int]:
        """Key -> offset of its latest record (below ``below``), in the model."""
        return {
            key: offset
            for offset, (key, _value) in sorted(self.appended.items())
            if below is None or offset < below
        }

    def tombstone_may_be_gone(self, offset: int) -> bool:
        cleaned = self.first_cleaned_ms.get(offset)
        if cleaned is None:
            return False
        return any(at >= cleaned + DELETE_RETENTION_MS for at in self.cleanings_ms)

    @invariant()
    def reading_from_the_start_gives_each_key_its_latest_value(self) -> None:
        seen: list[Record] = records(self.log)
        offsets = [record.offset for record in seen]
        assert offsets == sorted(set(offsets))
        for record in seen:
            assert self.appended[record.offset] == (record.key, record.value)
        assert self.log.log_end_offset == len(self.appended)
        last_seen = {record.key: record.offset for record in seen}
        for key, offset in self.latest().items():
            tombstone = self.appended[offset][1] is None
            if tombstone and self.tombstone_may_be_gone(offset):
                assert key not in last_seen, (key, offset)
            else:
                assert last_seen.get(key) == offset, (key, offset)

    @invariant()
    def below_the_last_cleaning_each_key_has_only_its_latest_record(self) -> None:
        latest = self.latest(below=self.cleaned_to)
        for record in records(self.log):
            if record.offset < self.cleaned_to:
                assert record.key is not None
                assert latest[record.key] == record.offset, record


CompactionMachine.TestCase.settings = settings(
    max_examples=60,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
test_compaction_against_the_model = CompactionMachine.TestCase
