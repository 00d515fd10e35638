"""ApiVersions: the keys and version ranges served (``versions``), nothing more.

A version this broker does not know is answered as Kafka answers it: at v0's shape,
UNSUPPORTED_VERSION with the ranges, so the client can retry at a version both know
(librdkafka and the Java client rely on this).
"""

from __future__ import annotations

from kio.schema.errors import ErrorCode
from kio.static.protocol import ResponsePayload

from tierlog.kafka.codec import build, response_type
from tierlog.kafka.versions import API_VERSIONS, API_VERSIONS_KEY

__all__ = ["api_versions", "unsupported_version"]


def api_versions(version: int) -> ResponsePayload:
    return _answer(version, ErrorCode.none)


def unsupported_version() -> ResponsePayload:
    return _answer(0, ErrorCode.unsupported_version)


def _answer(version: int, error: ErrorCode) -> ResponsePayload:
    keys = [
        {"api_key": key, "min_version": low, "max_version": high}
        for key, (low, high) in sorted(API_VERSIONS.items())
    ]
    return build(
        response_type(API_VERSIONS_KEY, version),
        {"error_code": error, "api_keys": keys, "throttle_time": 0},
    )
