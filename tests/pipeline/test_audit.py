"""Auditing tiered segments finds flipped bytes, bad indexes and manifest gaps (no JVM)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from tests.pipeline.conftest import SMALL_SEGMENTS, produce, records_for
from tests.pipeline.tiering import tier_closed_segments
from tierlog.pipeline.audit import audit_segment, continuity_problems
from tierlog.storage.checkpoints import TopicPartition
from tierlog.storage.log import Log
from tierlog.storage.records import V2_HEADER_SIZE, parse_header
from tierlog.storage.tier.local_store import LocalDirectoryStore
from tierlog.storage.tier.manifest import RemoteSegment, SegmentPart

TP = TopicPartition("orders", 0)


def tiered(tmp_path: Path) -> tuple[LocalDirectoryStore, tuple[RemoteSegment, ...]]:
    log = Log.open(tmp_path / "logs" / TP.dir_name, SMALL_SEGMENTS)
    produce(log, records_for(1200))
    store = LocalDirectoryStore(tmp_path / "tier")
    manifest = tier_closed_segments(store, TP, log)
    log.close()
    return store, manifest.view().segments


def flip_byte(store: LocalDirectoryStore, segment: RemoteSegment, part_position: int) -> None:
    path = store.root / segment.key
    data = bytearray(path.read_bytes())
    data[part_position] ^= 0x40
    path.write_bytes(bytes(data))


def test_intact_segments_verify(tmp_path: Path) -> None:
    store, segments = tiered(tmp_path)
    audits = [audit_segment(store.url, TP, segment) for segment in segments]
    assert all(audit.ok for audit in audits), [a.problems for a in audits]
    assert sum(audit.batches for audit in audits) > len(audits)
    assert continuity_problems(segments) == []


def test_a_flipped_byte_in_a_batch_fails_its_crc(tmp_path: Path) -> None:
    store, segments = tiered(tmp_path)
    victim = segments[1]
    first_batch = parse_header(store.get(victim.key, 0, V2_HEADER_SIZE))
    flip_byte(store, victim, first_batch.size + V2_HEADER_SIZE + 4)  # the 2nd batch's records

    audits = {s.segment_id: audit_segment(store.url, TP, s) for s in segments}

    assert [sid for sid, audit in audits.items() if not audit.ok] == [victim.segment_id]
    assert any("fails its CRC" in problem for problem in audits[victim.segment_id].problems)


def test_an_index_entry_that_names_no_batch_is_found(tmp_path: Path) -> None:
    store, segments = tiered(tmp_path)
    victim = segments[0]
    index = victim.range_of(SegmentPart.OFFSET_INDEX)
    flip_byte(store, victim, index.start + 8 + 7)  # the second entry's position field

    problems = audit_segment(store.url, TP, victim).problems

    assert any("offset index" in problem for problem in problems)


def test_a_gap_between_manifest_segments_is_reported(tmp_path: Path) -> None:
    _, segments = tiered(tmp_path)
    shifted = dataclasses.replace(segments[1], base_offset=segments[1].base_offset + 1)

    problems = continuity_problems([segments[0], shifted])

    assert len(problems) == 1 and problems[0].startswith("gap")
