"""``tierlog tier ls|verify`` on a partition tiered to a local-directory store."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.storage.compaction import keyed_batch
from tests.storage.conftest import T0
from tests.storage.tier.test_remote_reader import TP, fill
from tests.storage.tier.uploads import tier_closed_segments
from tests.support.minio import MinioServer
from tierlog.cli.main import main
from tierlog.cli.tier import list_lines
from tierlog.storage.config import LogConfig
from tierlog.storage.log import Log
from tierlog.storage.records import SimpleRecord, build_batch
from tierlog.storage.tier.local_store import LocalDirectoryStore
from tierlog.storage.tier.manifest import PartitionManifest, RemoteSegment, SegmentPart
from tierlog.storage.tier.manifest_store import ManifestWriter, load_view
from tierlog.storage.tier.s3_store import S3Options
from tierlog.storage.tier.url import open_store
from tierlog.tools.tier_verify import DuplicateKey, VerifyReport, verify_partition

CONFIG = LogConfig.from_properties(
    {"segment.bytes": "6000", "index.interval.bytes": "300", "remote.storage.enable": "true"}
)


@dataclasses.dataclass
class TieredPartition:
    store: LocalDirectoryStore
    manifest: PartitionManifest
    log_bytes: int

    @property
    def segments(self) -> tuple[RemoteSegment, ...]:
        return load_view(self.store, TP).all_segments()

    def object_path(self, index: int) -> Path:
        return self.store.root / self.segments[index].key


@pytest.fixture
def tiered(tmp_path: Path) -> Iterator[TieredPartition]:
    log = Log.open(tmp_path / "events-0", CONFIG)
    fill(log, 120)
    log.roll()
    store = LocalDirectoryStore(tmp_path / "tier")
    manifest = tier_closed_segments(store, TP, log)
    yield TieredPartition(store, manifest, sum(s.size for s in log.segments[:-1]))
    log.close()


def verify(tiered: TieredPartition) -> tuple[list[str], VerifyReport]:
    report = VerifyReport()
    return list(verify_partition(tiered.store, TP, report)), report


def test_ls_lists_every_remote_segment_with_its_facts(tiered: TieredPartition) -> None:
    lines = list(list_lines(tiered.store, tiered.manifest))
    assert lines[0].startswith(f"Partition: events-0\tManifestVersion: {tiered.manifest.version}")
    assert len(lines) == 1 + len(tiered.segments)
    for line, segment in zip(lines[1:], tiered.segments, strict=True):
        found = re.match(
            r"baseOffset: (\d+) endOffset: (\d+) logBytes: (\d+) objectBytes: (\d+) "
            r"baseTimestamp: \S+ maxTimestamp: (\d+)\(\S+\) state: finished writerEpoch: (\d+) "
            r"key: (\S+)$",
            line,
        )
        assert found, line
        assert int(found[1]) == segment.base_offset and int(found[2]) == segment.end_offset
        assert int(found[3]) == (tiered.store.root / segment.key).stat().st_size - (
            segment.object_size_bytes - segment.log_size_bytes
        )
        assert int(found[5]) == segment.max_timestamp
        assert found[7] == segment.key and (tiered.store.root / found[7]).exists()


def test_verify_passes_a_healthy_tier(tiered: TieredPartition) -> None:
    lines, report = verify(tiered)
    assert report.exit_code == 0, list(report.summary_lines())
    assert len(lines) == len(tiered.segments) == report.segments
    assert all(line.endswith(": OK") for line in lines)
    assert report.batches == 120


def test_verify_finds_a_flipped_byte_in_a_batch(tiered: TieredPartition) -> None:
    path = tiered.object_path(2)
    data = bytearray(path.read_bytes())
    data[100] ^= 0x40  # inside the first batch's records: only the CRC can tell
    path.write_bytes(data)
    lines, report = verify(tiered)
    assert report.exit_code == 1
    key = tiered.segments[2].key
    assert list(report.problems) == [key]
    assert any("Invalid batches" in problem for problem in report.problems[key])
    assert lines[2].endswith("problem(s)")
    assert all(line.endswith(": OK") for i, line in enumerate(lines) if i != 2)


def test_verify_finds_an_index_entry_pointing_elsewhere(tiered: TieredPartition) -> None:
    segment = tiered.segments[1]
    index = segment.range_of(SegmentPart.OFFSET_INDEX)
    assert index.length >= 16, "the fixture's segments must have index entries"
    path = tiered.object_path(1)
    data = bytearray(path.read_bytes())
    data[index.start + 3] += 1  # the first entry's relative offset, one higher
    path.write_bytes(data)
    _lines, report = verify(tiered)
    assert report.exit_code == 1
    assert any("Index offset" in p or "Mismatches" in p for p in report.problems[segment.key])


def test_verify_finds_a_gap_between_segments(tiered: TieredPartition) -> None:
    doomed = tiered.segments[3]
    writer = ManifestWriter.claim(tiered.store, TP, "test")
    writer.update(lambda m: m.drop([doomed.segment_id]))
    _lines, report = verify(tiered)
    assert report.exit_code == 1
    (after,) = report.problems
    assert "the segment before ends at" in report.problems[after][0]


def test_verify_says_which_object_is_missing(tiered: TieredPartition) -> None:
    tiered.object_path(0).unlink()
    lines, report = verify(tiered)
    assert report.exit_code == 1  # a finding, not "could not check"
    key = tiered.segments[0].key
    assert report.problems == {key: ["the object is missing from the store"]}
    assert report.errors == []
    assert lines[0] == f"{key}: missing"


def test_verify_finds_a_key_twice_in_the_cleaned_range(tmp_path: Path) -> None:
    """Below the manifest's cleaner offset the tier holds one record a key (transactional
    batches aside: the cleaner copies them as they are); a manifest that says a range
    is cleaned when it is not has each repeated key found, as a typed finding."""
    log = Log.open(tmp_path / "events-0", dataclasses.replace(CONFIG, cleanup_policy="compact"))
    for round_ in range(3):  # 3 updates of each of 4 keys, one segment per round
        log.append(keyed_batch([(b"key-%d" % k, b"v%d" % round_) for k in range(4)]))
        log.roll()
    in_transaction = SimpleRecord(b"key-0", b"open", T0, ())
    log.append(build_batch([in_transaction], producer_id=7, producer_epoch=0, base_sequence=0,
                           is_transactional=True))  # fmt: skip
    log.roll()
    store = LocalDirectoryStore(tmp_path / "tier")
    tier_closed_segments(store, TP, log)
    writer = ManifestWriter.claim(store, TP, "test")
    writer.update(lambda m: dataclasses.replace(m, cleaner_offset=13))  # "all cleaned"
    report = VerifyReport()
    list(verify_partition(store, TP, report))

    first, second, third = load_view(store, TP).all_segments()[:3]
    assert report.duplicate_keys[:2] == [
        DuplicateKey(b"key-0", 0, first.key, 4, second.key),
        DuplicateKey(b"key-1", 1, first.key, 5, second.key),
    ]
    found = [(duplicate.key, duplicate.offset) for duplicate in report.duplicate_keys]
    assert found == [(b"key-%d" % k, 4 * r + k) for r in (1, 2) for k in range(4)]
    assert report.exit_code == 1
    assert list(report.problems) == [second.key, third.key]
    assert report.problems[second.key][0] == (
        f"key b'key-0' at offset 4 is in the cleaned range (below 13) already at 0 in {first.key}"
    )

    writer.update(lambda m: dataclasses.replace(m, cleaner_offset=4))  # what it truly is
    healthy = VerifyReport()
    list(verify_partition(store, TP, healthy))
    assert (healthy.duplicate_keys, healthy.exit_code) == ([], 0)
    log.close()


def test_the_command_lists_and_verifies_with_exit_codes(
    tiered: TieredPartition, capsys: pytest.CaptureFixture[str]
) -> None:
    url = tiered.store.url
    assert main(["tier", "ls", "events-0", "--tier-url", url]) == 0
    out = capsys.readouterr().out
    assert out.count("state: finished") == len(tiered.segments)
    args = ["tier", "verify", "--topic", "events", "--partition", "0", "--tier-url", url]
    assert main(args) == 0
    assert "OK" in capsys.readouterr().out
    path = tiered.object_path(0)
    data = bytearray(path.read_bytes())
    data[200] ^= 1
    path.write_bytes(data)
    assert main([*args, "--progress"]) == 1
    assert "Invalid batches" in capsys.readouterr().err


@dataclasses.dataclass
class MinioTiered:
    s3: list[str]  # the sidecar's S3 flags for the bucket
    closed: int  # the log's closed segments, all tiered
    segments: tuple[RemoteSegment, ...]


@pytest.fixture
def minio_tiered(tmp_path: Path, minio: MinioServer, s3_bucket: str) -> MinioTiered:
    """A partition of 40 batches whose closed segments are tiered to a MinIO bucket."""
    credentials = minio.write_credentials(tmp_path / "credentials")
    s3 = [
        "--tier-url", f"s3://{s3_bucket}/tier", "--s3-endpoint-url", minio.endpoint_url,
        "--s3-region", minio.region, "--s3-path-style", "--s3-credentials", str(credentials),
    ]  # fmt: skip
    log = Log.open(tmp_path / "events-0", CONFIG)
    fill(log, 40)
    log.roll()
    store = open_store(s3[1], S3Options(
        endpoint_url=minio.endpoint_url, region=minio.region, path_style=True,
        credentials_path=credentials,
    ))  # fmt: skip
    closed = len(log.segments) - 1
    try:
        tier_closed_segments(store, TP, log)
        return MinioTiered(s3, closed, load_view(store, TP).all_segments())
    finally:
        store.close()
        log.close()


def test_the_command_reads_a_minio_bucket_with_the_sidecars_s3_flags(
    minio_tiered: MinioTiered, capsys: pytest.CaptureFixture[str]
) -> None:
    s3, closed = minio_tiered.s3, minio_tiered.closed
    assert main(["tier", "ls", "events-0", *s3]) == 0
    assert capsys.readouterr().out.count("state: finished") == closed > 1
    assert main(["tier", "verify", "events-0", *s3]) == 0
    assert f"{closed} segment(s), 40 batches: OK" in capsys.readouterr().out


def test_verify_of_a_minio_bucket_finds_a_missing_object_as_a_problem(
    minio_tiered: MinioTiered,
    minio: MinioServer,
    s3_bucket: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """An object deleted behind the manifest's back is a definite finding: exit 1."""
    s3, missing = minio_tiered.s3, minio_tiered.segments[1].key
    minio.client().delete_object(Bucket=s3_bucket, Key=f"tier/{missing}")
    assert main(["tier", "verify", "events-0", *s3]) == 1
    captured = capsys.readouterr()
    assert f"{missing}: missing" in captured.out
    assert f"Problems in {missing}" in captured.err
    assert "the object is missing from the store" in captured.err
    assert "could not check" not in captured.err
