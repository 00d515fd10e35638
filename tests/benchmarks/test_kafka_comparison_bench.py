"""``in_turn``: the order the benchmark's systems run in, round by round."""

from __future__ import annotations

from tests.benchmarks.kafka_comparison_bench import in_turn


def test_each_round_starts_with_the_next_system_and_keeps_their_cycle() -> None:
    assert [in_turn("ABC", run) for run in range(4)] == [
        ["A", "B", "C"],
        ["B", "C", "A"],
        ["C", "A", "B"],
        ["A", "B", "C"],
    ]


def test_over_as_many_rounds_as_systems_each_takes_each_place_once() -> None:
    systems = ["listener", "Kafka", "gRPC"]
    rounds = [in_turn(systems, run) for run in range(len(systems))]
    for place in range(len(systems)):
        assert sorted(order[place] for order in rounds) == sorted(systems)
    assert in_turn([], 5) == []
