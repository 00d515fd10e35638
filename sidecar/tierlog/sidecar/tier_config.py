"""Where the sidecar's remote tier lives, and how to reach it.

``tierlog.tier.url`` (``--tier-url``) names the object store: ``file:///path`` or
``s3://bucket/prefix`` (``tierlog.storage.tier.url``). Without it the tier is the
directory ``tier`` beside the logs of the first log dir, so a single pod works with
no infrastructure. The ``tierlog.tier.s3.*`` keys say how to reach an S3 bucket; a
``file://`` tier ignores them. Sizes are bytes, times milliseconds, as in Kafka.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tierlog.storage.errors import InvalidConfigError
from tierlog.storage.tier.s3_store import S3Options

__all__ = ["TIER_KEYS", "TierConfig"]

_URL = "tierlog.tier.url"
# Key -> (S3Options field, how to read the value).
_S3_KEYS: dict[str, tuple[str, Callable[[str], Any]]] = {
    "tierlog.tier.s3.endpoint.url": ("endpoint_url", str),
    "tierlog.tier.s3.region": ("region", str),
    "tierlog.tier.s3.path.style.access.enabled": ("path_style", lambda v: _boolean(v)),
    "tierlog.tier.s3.credentials.path": ("credentials_path", Path),
    "tierlog.tier.s3.connect.timeout.ms": ("connect_timeout_s", lambda v: int(v) / 1000),
    "tierlog.tier.s3.read.timeout.ms": ("read_timeout_s", lambda v: int(v) / 1000),
    "tierlog.tier.s3.max.attempts": ("max_attempts", int),
    "tierlog.tier.s3.multipart.threshold.bytes": ("multipart_threshold_bytes", int),
    "tierlog.tier.s3.part.size.bytes": ("part_size_bytes", int),
    "tierlog.tier.s3.upload.concurrency": ("upload_concurrency", int),
    "tierlog.tier.s3.upload.rate.limit.bytes.per.second": ("upload_rate_bytes_per_s", int),
}
TIER_KEYS = frozenset({_URL, *_S3_KEYS})


def _boolean(value: str) -> bool:
    if value.strip().lower() not in ("true", "false"):
        raise ValueError(f"expected true or false, got {value!r}")
    return value.strip().lower() == "true"


@dataclass(frozen=True)
class TierConfig:
    url: str  # file:///... or s3://bucket/prefix
    s3: S3Options = field(default_factory=S3Options)

    @classmethod
    def from_properties(cls, props: Mapping[str, str], first_log_dir: Path) -> TierConfig:
        url = props.get(_URL) or (first_log_dir / "tier").absolute().as_uri()
        options: dict[str, Any] = {}
        for key, (name, read) in _S3_KEYS.items():
            if props.get(key, "").strip():
                try:
                    options[name] = read(props[key].strip())
                except ValueError as error:
                    raise InvalidConfigError(f"{key}: {error}") from None
        return cls(url=url, s3=S3Options(**options))
