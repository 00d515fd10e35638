"""The planner the JVM source calls back: ``tierlog.spark.Planner`` implemented in Python.

The JVM's ``format("tierlog")`` scans ask it, through py4j's callback server on the
driver, for their splits and stream offsets; it answers with the Spark-free planning
(``source``, ``stream_offsets``) as JSON. A tierlog error is answered as
``{"error": {"type", "message"}}`` and raised in the JVM with that type name.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, ClassVar

from tierlog.pipeline.bounds import RowBounds
from tierlog.pipeline.filters_json import filters_from_json
from tierlog.pipeline.options import SourceOptions, parse_options
from tierlog.pipeline.pushdown import bounds_from_filters
from tierlog.pipeline.s3_connection import s3_connection
from tierlog.pipeline.source import discover, latest_offsets, plan_batch, plan_stream_range
from tierlog.pipeline.split_json import plan_json
from tierlog.pipeline.stream_offsets import initial_offsets, offsets_from_json, offsets_to_json
from tierlog.storage.errors import TierlogError

__all__ = ["JvmPlanner"]


def _answer(step: Callable[[], Any]) -> str:
    try:
        return json.dumps({"ok": step()})
    except TierlogError as error:
        return json.dumps({"error": {"type": type(error).__name__, "message": str(error)}})


def _options(options_json: str, *, streaming: bool = False) -> SourceOptions:
    return parse_options(json.loads(options_json), streaming=streaming)


def _offsets_text(offsets: dict[str, Any]) -> str:
    return json.dumps(offsets, sort_keys=True)  # equal positions, equal JSON (Spark compares it)


class JvmPlanner:
    """Answers the JVM's planning calls (py4j's callback names the methods)."""

    def planBatch(self, options_json: str, filters_json: str) -> str:  # noqa: N802
        def plan() -> dict[str, Any]:
            options = _options(options_json)
            bounds: RowBounds
            bounds, _ = bounds_from_filters(filters_from_json(filters_json))
            splits = plan_batch(options, bounds)
            return plan_json(splits, options.max_records_per_batch, s3_connection)

        return _answer(plan)

    def initialOffsets(self, options_json: str) -> str:  # noqa: N802
        def offsets() -> str:
            options = _options(options_json, streaming=True)
            histories = discover(options.paths, options.subscription, s3=options.s3)
            return _offsets_text(offsets_to_json(initial_offsets(histories, options)))

        return _answer(offsets)

    def latestOffsets(self, options_json: str) -> str:  # noqa: N802
        def offsets() -> str:
            options = _options(options_json, streaming=True)
            histories = discover(options.paths, options.subscription, s3=options.s3)
            return _offsets_text(offsets_to_json(latest_offsets(histories)))

        return _answer(offsets)

    def planStream(self, options_json: str, start_json: str, end_json: str) -> str:  # noqa: N802
        def plan() -> dict[str, Any]:
            options = _options(options_json, streaming=True)
            start = offsets_from_json(json.loads(start_json))
            end = offsets_from_json(json.loads(end_json))
            splits = plan_stream_range(options, start, end)
            return plan_json(splits, options.max_records_per_batch, s3_connection)

        return _answer(plan)

    class Java:
        implements: ClassVar[list[str]] = ["tierlog.spark.Planner"]
