"""``spark.read.format("tierlog")`` on the shared local[2] session: the DataFrame is
what the storage engine reads, with the Kafka source's schema, options and filters."""

from __future__ import annotations

import datetime
import json
import sys
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as sf

from tests.pipeline.conftest import (
    SMALL_SEGMENTS,
    TXN_SEGMENTS,
    Row,
    Tier,
    expected_rows,
    file_tier,
    produce,
    records_for,
    write_legacy_then_v2,
    write_log,
    write_transactions,
)
from tests.pipeline.tiering import (
    delete_local_copies,
    tier_closed_segments,
    tier_then_delete_older_half,
)
from tests.storage.conftest import T0, read_all_records
from tests.storage.transactions import TxnWriter
from tierlog.pipeline.bounds import RowBounds
from tierlog.pipeline.options import parse_options
from tierlog.pipeline.source import plan_batch
from tierlog.storage.log import Log
from tierlog.storage.tier.local_store import LocalDirectoryStore
from tierlog.storage.topic_partition import TopicPartition

pytestmark = pytest.mark.slow

TOPIC = "orders"
TP0 = TopicPartition(TOPIC, 0)


def rows_of(frame: DataFrame) -> list[Row]:
    return [
        (
            row.key,
            row.value,
            row.topic,
            row.partition,
            row.offset,
            int(row.timestamp.replace(tzinfo=datetime.UTC).timestamp() * 1000),
            row.timestampType,
        )
        for row in frame.orderBy("partition", "offset").collect()
    ]


def test_the_dataframe_is_what_storage_reads_with_the_kafka_schema(
    spark: SparkSession, tmp_path: Path
) -> None:
    expected = []
    for partition in range(2):
        tp = TopicPartition(TOPIC, partition)
        expected += expected_rows(tp, write_log(tmp_path, tp, 300))
    legacy_tp = TopicPartition(TOPIC, 2)
    expected += expected_rows(legacy_tp, write_legacy_then_v2(tmp_path, legacy_tp, 1))

    frame = spark.read.format("tierlog").option("subscribe", TOPIC).load(str(tmp_path))

    assert frame.schema.simpleString() == (
        "struct<key:binary,value:binary,topic:string,partition:int,offset:bigint,"
        "timestamp:timestamp,timestampType:int>"
    )
    assert [(k, bytes(v) if v else v, *rest) for k, v, *rest in rows_of(frame)] == [
        (k, v, *rest) for k, v, *rest in expected
    ]


def test_headers_and_pushed_filters(spark: SparkSession, tmp_path: Path) -> None:
    for partition in range(3):
        write_log(tmp_path, TopicPartition(TOPIC, partition), 200)

    frame = (
        spark.read.format("tierlog")
        .option("subscribe", TOPIC)
        .option("includeHeaders", "true")
        .option("minPartitions", "6")
        .load(str(tmp_path))
        .where((sf.col("partition") == 1) & (sf.col("offset") >= 150) & (sf.col("offset") < 160))
    )

    rows = frame.orderBy("offset").collect()
    assert [row.offset for row in rows] == list(range(150, 160))
    assert rows[0].headers[0].key == "h" and rows[0].headers[0].value == b"150"
    assert rows[1].headers is None


def test_pushed_filters_shrink_the_scan(spark: SparkSession, tmp_path: Path) -> None:
    """Spark's scan has the input partitions the planner makes for the pushed bounds:
    one for an offset range of one partition, the tail segments for a time bound."""
    for partition in range(3):
        write_log(tmp_path, TopicPartition(TOPIC, partition), 400)
    options = {"path": str(tmp_path), "subscribe": TOPIC}
    frame = spark.read.format("tierlog").options(**options).load()
    since = datetime.datetime.fromtimestamp((T0 + 10 * 350) / 1000, datetime.UTC)

    one_range = frame.where(
        (sf.col("partition") == 1) & (sf.col("offset") >= 150) & (sf.col("offset") < 160)
    )
    recent = frame.where(sf.col("timestamp") >= sf.lit(since))

    def scan_size(query: DataFrame) -> int:
        return query.rdd.getNumPartitions()

    everything = len(plan_batch(parse_options(options)))
    recent_splits = plan_batch(parse_options(options), RowBounds(min_timestamp_ms=T0 + 3500))
    assert scan_size(frame) == everything
    assert scan_size(one_range) == 1
    assert scan_size(recent) == len(recent_splits) < everything
    assert [row.offset for row in one_range.collect()] == list(range(150, 160))
    assert sorted((row.partition, row.offset) for row in recent.collect()) == [
        (p, o) for p in range(3) for o in range(350, 400)
    ]


def test_offsets_json_through_spark(spark: SparkSession, tmp_path: Path) -> None:
    write_log(tmp_path, TopicPartition(TOPIC, 0), 100)
    frame = (
        spark.read.format("tierlog")
        .option("assign", json.dumps({TOPIC: [0]}))
        .option("startingOffsets", json.dumps({TOPIC: {"0": 10}}))
        .option("endingOffsets", json.dumps({TOPIC: {"0": 20}}))
        .load(str(tmp_path))
    )
    assert frame.agg(sf.min("offset"), sf.max("offset"), sf.count("*")).first() == (10, 19, 10)


def test_partitions_spread_over_several_log_dirs(spark: SparkSession, tmp_path: Path) -> None:
    """A broker with two log.dirs keeps each partition in one of them: a query over both
    dirs (as a comma list or a list of paths) reads every partition."""
    log_dirs = [tmp_path / "disk-a", tmp_path / "disk-b"]
    expected = []
    for partition in range(4):
        tp = TopicPartition(TOPIC, partition)
        expected += expected_rows(tp, write_log(log_dirs[partition % 2], tp, 150))
    write_log(log_dirs[1], TopicPartition("other", 0), 20)
    paths = [str(log_dir) for log_dir in log_dirs]

    comma_list = spark.read.format("tierlog").option("path", ",".join(paths))
    path_list = spark.read.format("tierlog")

    assert rows_of(comma_list.option("subscribe", TOPIC).load()) == expected
    assert rows_of(path_list.option("subscribe", TOPIC).load(paths)) == expected


def test_an_s3_tier_plus_the_local_tail_through_spark(
    spark: SparkSession, tmp_path: Path, s3_tier: Tier
) -> None:
    """Every codec and the v1 and v2 formats, tiered to MinIO; then local retention
    deletes the older half of each partition's segments, whose rows only the bucket has."""
    log_dir = tmp_path / "logs"
    legacy_tp = TopicPartition(TOPIC, 1)
    write_legacy_then_v2(log_dir, legacy_tp, 1)
    logs = {tp: Log.open(log_dir / tp.dir_name, SMALL_SEGMENTS) for tp in (TP0, legacy_tp)}
    produce(logs[TP0], records_for(400))
    produce(logs[legacy_tp], records_for(300, start=50))
    store = s3_tier.open()
    try:
        histories = {tp: tier_then_delete_older_half(store, tp, log) for tp, log in logs.items()}
    finally:
        store.close()
    everything = {tp: expected_rows(tp, history.records) for tp, history in histories.items()}

    def rows_read(*paths: str) -> list[Row]:
        reader = spark.read.format("tierlog").option("subscribe", TOPIC)
        return rows_of(reader.options(**s3_tier.options).load(list(paths)))

    assert rows_read(s3_tier.url, str(log_dir)) == [*everything[TP0], *everything[legacy_tp]]
    assert rows_read(s3_tier.url) == [
        row for tp, rows in everything.items() for row in rows if row[4] < histories[tp].tier_end
    ]
    # The splits the data source plans: below the local start, objects in the bucket.
    options = {"path": f"{s3_tier.url},{log_dir}", "subscribe": TOPIC} | s3_tier.options
    splits = plan_batch(parse_options(options))
    for tp, history in histories.items():
        remote = [s for s in splits if s.tp == tp and s.segment.is_remote]
        assert [o for s in remote for o in range(s.start_offset, s.end_offset)] == list(
            range(history.local_start)
        )
        assert all(s.segment.store_url == s3_tier.url for s in remote)


@pytest.fixture(params=["file", pytest.param("s3", marks=pytest.mark.go_tools)])
def tier(request: pytest.FixtureRequest, tmp_path: Path) -> Tier:
    if request.param == "s3":
        s3: Tier = request.getfixturevalue("s3_tier")
        return s3
    return file_tier(tmp_path / "tier")


class MemoryStream:
    """A streaming query of ``format("tierlog")`` into a memory table."""

    def __init__(self, spark: SparkSession, name: str, paths: list[str], options: dict[str, str]):
        self.spark = spark
        self.name = name
        frame = (
            spark.readStream.format("tierlog")
            .option("subscribe", TOPIC)
            .option("startingOffsets", "earliest")
            .option("path", ",".join(paths))
            .options(**options)
            .load()
        )
        self.query = frame.writeStream.format("memory").queryName(name).start()

    def rows(self) -> list[Row]:
        """Every row read so far, once the query has caught up with its paths."""
        self.query.processAllAvailable()
        return rows_of(self.spark.table(self.name))

    def end_offsets(self) -> object:
        progress = self.query.lastProgress
        assert progress is not None
        return json.loads(progress.sources[0].endOffset)


def test_a_stream_over_a_tier_reads_each_newly_tiered_segment(
    spark: SparkSession, tmp_path: Path, tier: Tier
) -> None:
    log = Log.open(tmp_path / "logs" / TP0.dir_name, SMALL_SEGMENTS)
    produce(log, records_for(300))
    store = tier.open()
    stream = MemoryStream(spark, f"tier_{urlsplit(tier.url).scheme}", [tier.url], tier.options)
    try:
        first_end = tier_closed_segments(store, TP0, log).uploaded_end_offset
        assert stream.rows() == expected_rows(TP0, read_all_records(log)[:first_end])

        produce(log, records_for(300, start=300))
        end = tier_closed_segments(store, TP0, log).uploaded_end_offset
        assert end > first_end
        assert stream.rows() == expected_rows(TP0, read_all_records(log)[:end])
        assert stream.end_offsets() == {TOPIC: {"0": end}}
    finally:
        stream.query.stop()
        store.close()
        log.close()


def test_a_stream_goes_on_while_local_retention_deletes_tiered_segments(
    spark: SparkSession, tmp_path: Path
) -> None:
    """Over the tier and the log dir: new local batches are read, the tiered segments'
    local files are deleted while the query runs, and it goes on tailing the log."""
    log_dir = tmp_path / "logs"
    log = Log.open(log_dir / TP0.dir_name, SMALL_SEGMENTS)
    produce(log, records_for(100))
    tier = file_tier(tmp_path / "tier")
    stream = MemoryStream(spark, "retained", [tier.url, str(log_dir)], {})
    try:
        assert [row[4] for row in stream.rows()] == list(range(100))
        produce(log, records_for(200, start=100))
        assert [row[4] for row in stream.rows()] == list(range(300))

        tier_closed_segments(tier.open(), TP0, log)
        before = read_all_records(log)
        segments = log.segments
        log.close()
        delete_local_copies(segments[:-1])
        log = Log.open(log_dir / TP0.dir_name, SMALL_SEGMENTS)
        produce(log, records_for(50, start=300))

        expected = expected_rows(TP0, before + read_all_records(log, 300))
        assert stream.rows() == expected
        assert stream.end_offsets() == {TOPIC: {"0": 350}}
    finally:
        stream.query.stop()
        log.close()


def test_aborted_and_undecided_records_are_not_in_the_dataframe(
    spark: SparkSession, tmp_path: Path
) -> None:
    """read_committed over a file:// tier, the local log, and both: no marker, no record
    of an aborted transaction, nothing at or past the last stable offset."""
    log_dir = tmp_path / "logs"
    log = Log.open(log_dir / TP0.dir_name, TXN_SEGMENTS)
    txns = write_transactions(log, rounds=90)
    store = LocalDirectoryStore(tmp_path / "tier")
    tier_end = tier_closed_segments(store, TP0, log).end_offset
    txns.send(5, 2)  # stays open: undecided
    txns.send_plain(2)
    log.flush()
    stable = txns.open_txns[5]
    committed = sorted(txns.committed)
    assert len(txns.aborted) >= 5 and tier_end < stable

    def offsets(*paths: str) -> list[int]:
        frame = spark.read.format("tierlog").option("subscribe", TOPIC).load(list(paths))
        return [row.offset for row in frame.orderBy("offset").select("offset").collect()]

    tier_stable = min(
        (t.first_offset for t in txns.aborted if t.first_offset < tier_end <= t.last_offset),
        default=tier_end,
    )
    assert offsets(store.url) == [o for o in committed if o < tier_stable]
    assert offsets(str(log_dir)) == [o for o in committed if o < stable]
    assert offsets(store.url, str(log_dir)) == [o for o in committed if o < stable]

    txns.end(5, commit=False)
    log.close()
    assert offsets(store.url, str(log_dir)) == committed


def test_a_stream_waits_for_an_open_transaction(spark: SparkSession, tmp_path: Path) -> None:
    log_dir = tmp_path / "logs"
    log = Log.open(log_dir / TP0.dir_name, TXN_SEGMENTS)
    txns = TxnWriter(log)
    txns.send_plain(3)  # 0-2
    txns.send(1, 2)  # 3-4, open
    txns.send_plain(1)  # 5: waits behind the open transaction
    frame = (
        spark.readStream.format("tierlog")
        .option("subscribe", TOPIC)
        .option("startingOffsets", "earliest")
        .option("path", str(log_dir))
        .load()
    )
    query = frame.writeStream.format("memory").queryName("committed_only").start()
    try:
        query.processAllAvailable()
        seen = [row.offset for row in spark.table("committed_only").orderBy("offset").collect()]
        assert seen == [0, 1, 2]
        txns.end(1, commit=True)  # 6
        query.processAllAvailable()
        seen = [row.offset for row in spark.table("committed_only").orderBy("offset").collect()]
        assert seen == [0, 1, 2, 3, 4, 5]
    finally:
        query.stop()
        log.close()


def test_register_points_a_plain_virtualenvs_workers_at_this_python(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 21: a session started from a virtualenv that is not activated, without
    PYSPARK_PYTHON, has its workers start the ``python3`` on PATH (no tierlog there);
    ``register`` gives them this interpreter instead, and the read works."""
    from tierlog.pipeline import register

    context = spark.sparkContext
    monkeypatch.delenv("PYSPARK_PYTHON")
    monkeypatch.setattr(context, "pythonExec", "python3")  # SparkContext's default
    write_log(tmp_path, TP0, 20)

    register(spark)

    assert context.pythonExec == sys.executable
    assert spark.read.format("tierlog").option("subscribe", TOPIC).load(str(tmp_path)).count() == 20
