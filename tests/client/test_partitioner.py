"""Kafka's default partitioner: murmur2 and partitions as Kafka's own jars compute them,
and sticky partitions for records without a key."""

from __future__ import annotations

import importlib.util
import random
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tierlog.client.partitioner import (
    StickyPartitioner,
    murmur2,
    partition_for_key,
    to_positive,
)

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
VECTORS = HERE / "murmur2_vectors.tsv"
VECTORS_PROGRAM = HERE / "java" / "Murmur2Vectors.java"


@dataclass(frozen=True)
class Vector:
    key: bytes
    murmur2: int
    positive: int
    partitions: dict[int, int]  # partition count -> partition


def load_vectors(text: str) -> list[Vector]:
    """Murmur2Vectors.java's output: a header naming the partition counts, then one key per line."""
    header, *lines = text.splitlines()
    counts = [int(n) for n in header.split("partitions:")[1].split(",")]
    vectors = []
    for line in lines:
        key_hex, hash_text, positive_text, partitions_text = line.split("\t")
        partitions = [int(p) for p in partitions_text.split(",")]
        vectors.append(
            Vector(
                key=b"" if key_hex == "-" else bytes.fromhex(key_hex),
                murmur2=int(hash_text),
                positive=int(positive_text),
                partitions=dict(zip(counts, partitions, strict=True)),
            )
        )
    return vectors


COMMITTED = load_vectors(VECTORS.read_text(encoding="utf-8"))


def test_the_committed_vectors_cover_every_tail_length_and_high_bytes() -> None:
    lengths = {len(v.key) % 4 for v in COMMITTED}
    assert lengths == {0, 1, 2, 3}
    assert any(byte >= 0x80 for v in COMMITTED for byte in v.key)
    assert any(v.murmur2 < 0 for v in COMMITTED) and any(v.murmur2 > 0 for v in COMMITTED)
    assert len(COMMITTED) > 70


@pytest.mark.parametrize("vector", COMMITTED, ids=lambda v: v.key.hex() or "empty")
def test_murmur2_and_partition_match_kafka(vector: Vector) -> None:
    assert murmur2(vector.key) == vector.murmur2
    assert to_positive(vector.murmur2) == vector.positive
    for count, partition in vector.partitions.items():
        assert partition_for_key(vector.key, count) == partition


@given(st.binary(max_size=64), st.integers(min_value=1, max_value=2**31 - 1))
def test_hashes_are_signed_int32_and_partitions_in_range(key: bytes, count: int) -> None:
    assert -(2**31) <= murmur2(key) < 2**31
    assert 0 <= partition_for_key(key, count) < count


def test_to_positive_clears_the_sign_bit_rather_than_negating() -> None:
    assert to_positive(-(2**31)) == 0
    assert to_positive(-1) == 2**31 - 1
    assert to_positive(5) == 5


def test_a_topic_has_at_least_one_partition() -> None:
    with pytest.raises(ValueError):
        partition_for_key(b"k", 0)


def _load_bootstrap() -> ModuleType:
    name = "tierlog_tests_bootstrap"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, REPO / "tests" / "tools" / "bootstrap.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@pytest.mark.interop
def test_the_committed_vectors_are_what_kafka_prints() -> None:
    """Re-run Murmur2Vectors.java on Kafka's jars: the committed file is its exact output."""
    bootstrap = _load_bootstrap()
    libs = bootstrap.KAFKA.home / "libs"
    if not libs.is_dir():
        pytest.fail(f"Apache Kafka's jars are not installed in {libs}; run `make tools`")
    done = subprocess.run(
        [str(bootstrap.java_bin("java")), "-cp", f"{libs}/*", str(VECTORS_PROGRAM)],
        capture_output=True,
        encoding="utf-8",
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "kafka-clients-4.1.1.jar" in {p.name for p in libs.iterdir()}
    assert done.stdout == VECTORS.read_text(encoding="utf-8")


# --- sticky partitions for records without a key ----------------------------------------


def test_keyed_records_ignore_the_sticky_partition() -> None:
    partitioner = StickyPartitioner(batch_size=100, rng=random.Random(1))
    for vector in COMMITTED[:10]:
        assert partitioner.partition("t", vector.key, 12) == vector.partitions[12]


def test_null_keys_stick_to_one_partition_until_batch_size_bytes_and_a_full_batch() -> None:
    partitioner = StickyPartitioner(batch_size=100, rng=random.Random(7))
    first = partitioner.partition("t", None, 1000)
    for _ in range(9):
        partitioner.on_sticky_append("t", first, 10, 1000, last_batch_full=False)
        assert partitioner.partition("t", None, 1000) == first
    # 100 bytes, but the batch is not full: Kafka waits for the batch boundary ...
    partitioner.on_sticky_append("t", first, 10, 1000, last_batch_full=False)
    assert partitioner.partition("t", None, 1000) == first
    # ... and moves once it is.
    partitioner.on_sticky_append("t", first, 10, 1000, last_batch_full=True)
    assert partitioner.partition("t", None, 1000) != first


def test_null_keys_move_after_twice_batch_size_even_if_the_batch_is_not_full() -> None:
    partitioner = StickyPartitioner(batch_size=100, rng=random.Random(3))
    first = partitioner.sticky_partition("t", 1000)
    partitioner.on_sticky_append("t", first, 199, 1000, last_batch_full=False)
    assert partitioner.sticky_partition("t", 1000) == first
    partitioner.on_sticky_append("t", first, 1, 1000, last_batch_full=False)
    assert partitioner.sticky_partition("t", 1000) != first


def test_each_topic_has_its_own_sticky_partition_and_a_shrunk_topic_redraws() -> None:
    partitioner = StickyPartitioner(batch_size=100, rng=random.Random(11))
    a = partitioner.sticky_partition("a", 50)
    partitioner.on_sticky_append("b", a, 1000, 50, last_batch_full=True)  # other topic
    assert partitioner.sticky_partition("a", 50) == a
    assert partitioner.sticky_partition("a", a + 1) == a
    assert 0 <= partitioner.sticky_partition("a", 1) == 0


def test_sticky_partitions_spread_uniformly_over_many_switches() -> None:
    partitioner = StickyPartitioner(batch_size=1, rng=random.Random(5))
    counts = [0] * 4
    for _ in range(4000):
        p = partitioner.sticky_partition("t", 4)
        counts[p] += 1
        partitioner.on_sticky_append("t", p, 1, 4, last_batch_full=True)
    assert all(900 < c < 1100 for c in counts), counts
