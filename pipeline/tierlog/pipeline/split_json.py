"""Splits as the JSON the JVM reader takes (``tierlog.spark.read.SplitPlan``).

A split says where its segment's log bytes are: a local ``.log`` file, the object file of
a ``file://`` tier, or the object of an ``s3://`` tier with the connection to reach it;
for a tier, ``base`` is where the log part starts inside the segment object (the split's
positions are within the log part). ``name`` is what an error calls the segment.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from tierlog.pipeline.planner import InputSplit
from tierlog.pipeline.segments import SegmentRef
from tierlog.storage.tier.manifest import SegmentPart
from tierlog.storage.tier.s3_store import S3Options
from tierlog.storage.tier.url import parse_s3_url

__all__ = ["S3Resolver", "plan_json"]

S3Resolver = Callable[[S3Options], dict[str, Any]]


def _source(ref: SegmentRef, s3: S3Resolver) -> dict[str, Any]:
    if ref.store_url is None or ref.tier_segment is None:
        return {"kind": "file", "path": ref.path, "base": 0, "name": ref.path}
    key = ref.tier_segment.key
    base = ref.tier_segment.range_of(SegmentPart.LOG).start
    name = f"{ref.store_url.rstrip('/')}/{key}"
    scheme = urlsplit(ref.store_url).scheme
    if scheme == "file":
        root = Path(unquote(urlsplit(ref.store_url).path))
        return {
            "kind": "file",
            "path": str(root.joinpath(*key.split("/"))),
            "base": base,
            "name": name,
        }
    location = parse_s3_url(ref.store_url)
    return {
        "kind": "s3",
        "bucket": location.bucket,
        "key": location.root + key,
        "base": base,
        "name": name,
        "connection": s3(ref.s3 or S3Options()),
    }


def _split(split: InputSplit, s3: S3Resolver) -> dict[str, Any]:
    return {
        "topic": split.tp.topic,
        "partition": split.tp.partition,
        "source": _source(split.segment, s3),
        "start_position": split.start_position,
        "end_position": split.end_position,
        "start_offset": split.start_offset,
        "end_offset": split.end_offset,
        "aborted": [[t.producer_id, t.first_offset, t.last_offset] for t in split.aborted],
    }


def plan_json(splits: Iterable[InputSplit], batch_rows: int, s3: S3Resolver) -> dict[str, Any]:
    """The plan of a scan: its splits and how many rows a column batch holds at most."""
    return {"batch_rows": batch_rows, "splits": [_split(split, s3) for split in splits]}
