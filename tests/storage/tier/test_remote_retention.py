from __future__ import annotations

from pathlib import Path

from tests.storage.conftest import T0, FakeClock
from tests.storage.tier.test_manifest import remote_segment
from tests.storage.tier.tiering import open_log, produce, tiered_config
from tierlog.storage.config import LogConfig
from tierlog.storage.tier.manifest import SegmentState
from tierlog.storage.tier.remote_retention import remote_segments_to_delete

FINISHED = SegmentState.FINISHED


def test_size_counts_the_tier_and_the_untiered_local_segments(tmp_path: Path) -> None:
    remote = [
        remote_segment(0, 10, state=FINISHED, log_bytes=100),
        remote_segment(10, 20, state=FINISHED, log_bytes=100),
    ]
    log = open_log(tmp_path, FakeClock())
    log.truncate_fully_and_start_at(20)
    produce(log, 2)  # local segments above the tier, not uploaded yet
    local_bytes = sum(s.size for s in log.segments)
    deletion = remote_segments_to_delete(
        remote,
        log.segments,
        tiered_config(retention_bytes=100 + local_bytes),
        log_start_offset=0,
        now_ms=T0,
    )
    assert deletion is not None
    assert [s.base_offset for s in deletion.segments] == [0]
    assert deletion.log_start_offset == 10 and deletion.reason == "retention.bytes"
    log.close()


def test_time_takes_expired_remote_segments_only(tmp_path: Path) -> None:
    remote = [
        remote_segment(0, 10, state=FINISHED, max_timestamp=T0 - 5000),
        remote_segment(10, 20, state=FINISHED, max_timestamp=T0),
    ]
    deletion = remote_segments_to_delete(
        remote, [], tiered_config(retention_ms=1000), log_start_offset=0, now_ms=T0
    )
    assert deletion is not None and [s.base_offset for s in deletion.segments] == [0]


def test_the_log_start_offset_takes_segments_wholly_below_it() -> None:
    remote = [
        remote_segment(0, 10, state=FINISHED),
        remote_segment(10, 20, state=FINISHED),
        remote_segment(20, 30, state=FINISHED),
    ]
    deletion = remote_segments_to_delete(
        remote, [], tiered_config(), log_start_offset=15, now_ms=T0
    )
    assert deletion is not None
    assert [s.base_offset for s in deletion.segments] == [0]
    assert deletion.log_start_offset == 15
    assert (
        remote_segments_to_delete(remote, [], tiered_config(), log_start_offset=0, now_ms=T0)
        is None
    )


def test_a_compact_only_topic_answers_to_the_log_start_alone() -> None:
    remote = [remote_segment(0, 10, state=FINISHED, max_timestamp=0)]
    config = LogConfig.from_properties({"retention.ms": "1", "cleanup.policy": "compact"})
    assert remote_segments_to_delete(remote, [], config, log_start_offset=0, now_ms=T0) is None
