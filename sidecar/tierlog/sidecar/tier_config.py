"""Where the sidecar's remote tier lives, and how to reach it.

``tierlog.tier.url`` (``--tier-url``) names the object store: ``file:///path`` or
``s3://bucket/prefix`` (``tierlog.storage.tier.url``). Without it the tier is the
directory ``tier`` beside the logs of a log dir, so a single pod works with no
infrastructure: the log dir whose ``tier`` holds files, whatever the order of the log
dirs, or the first when none does (``log_dir_home``). ``tierlog.tier.restore=true``
(``tierlog-sidecar --restore-from-tier``) starts an empty broker from the topics a
lost one left in that tier (``restore``). The ``tierlog.tier.s3.*`` keys
say how to reach an S3 bucket; a ``file://`` tier ignores them. Sizes are bytes, times
milliseconds, as in Kafka.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

from tierlog.sidecar.log_dir_home import home_log_dir
from tierlog.storage.errors import InvalidConfigError
from tierlog.storage.tier.s3_store import S3Options

__all__ = [
    "RESTORE_KEY",
    "TIER_FLAGS",
    "TIER_KEYS",
    "TierConfig",
    "add_tier_arguments",
    "tier_properties",
]

_URL = "tierlog.tier.url"
RESTORE_KEY = "tierlog.tier.restore"
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
    "tierlog.tier.s3.max.connections": ("max_connections", int),
}
TIER_KEYS = frozenset({_URL, RESTORE_KEY, *_S3_KEYS})

# --flag -> the config key it sets, and its help: the sidecar's and ``tierlog tier``'s.
TIER_FLAGS = (
    ("--tier-url", "tierlog.tier.url",
     "file:///path or s3://bucket/prefix (default: the directory tier in the data dir that "
     "holds one, else in the first)"),
    ("--s3-endpoint-url", "tierlog.tier.s3.endpoint.url",
     "an S3-compatible endpoint, e.g. http://minio:9000 (default: AWS)"),
    ("--s3-region", "tierlog.tier.s3.region", "the bucket's region (default: boto3's chain)"),
    ("--s3-credentials", "tierlog.tier.s3.credentials.path",
     "a file of access_key_id=/secret_access_key= lines, or a Secret directory with those "
     "files (default: boto3's credential chain)"),
    ("--s3-upload-rate-limit", "tierlog.tier.s3.upload.rate.limit.bytes.per.second",
     "bytes per second for all uploads of the process (default: unlimited)"),
    ("--s3-part-size", "tierlog.tier.s3.part.size.bytes", "multipart part size in bytes"),
    ("--s3-upload-concurrency", "tierlog.tier.s3.upload.concurrency", "parts uploaded at once"),
)  # fmt: skip
_PATH_STYLE = "tierlog.tier.s3.path.style.access.enabled"


def add_tier_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``--tier-url`` and ``--s3-*`` flags, each setting its ``tierlog.tier.*`` key."""
    tier = parser.add_argument_group(
        "remote tier", "where closed segments are offloaded (each flag has a config key)"
    )
    for flag, key, help_text in TIER_FLAGS:
        tier.add_argument(flag, dest=key, metavar=key.rpartition(".")[2].upper(), help=help_text)
    tier.add_argument(
        "--s3-path-style",
        dest=_PATH_STYLE,
        action="store_const",
        const="true",
        help="address the bucket in the path, not the host name (MinIO, Ceph)",
    )


def tier_properties(args: argparse.Namespace) -> dict[str, str]:
    """The ``tierlog.tier.*`` keys the flags of ``add_tier_arguments`` were given."""
    keys = (*(key for _flag, key, _help in TIER_FLAGS), _PATH_STYLE)
    return {key: getattr(args, key) for key in keys if getattr(args, key) is not None}


def _boolean(value: str) -> bool:
    if value.strip().lower() not in ("true", "false"):
        raise ValueError(f"expected true or false, got {value!r}")
    return value.strip().lower() == "true"


@dataclass(frozen=True)
class TierConfig:
    url: str  # file:///... or s3://bucket/prefix
    s3: S3Options = field(default_factory=S3Options)
    # Create the topics the tier records on an empty data dir, each partition going on
    # from the tier's end (``restore``); refused on a data dir that holds anything.
    restore: bool = False

    @classmethod
    def from_properties(cls, props: Mapping[str, str], log_dirs: Sequence[Path]) -> TierConfig:
        url = props.get(_URL) or _default_url(log_dirs)
        options: dict[str, Any] = {}
        for key, (name, read) in _S3_KEYS.items():
            if props.get(key, "").strip():
                try:
                    options[name] = read(props[key].strip())
                except ValueError as error:
                    raise InvalidConfigError(f"{key}: {error}") from None
        try:
            restore = _boolean(props.get(RESTORE_KEY, "false"))
        except ValueError as error:
            raise InvalidConfigError(f"{RESTORE_KEY}: {error}") from None
        return cls(url=url, s3=S3Options(**options), restore=restore)

    def private_to(self, log_dirs: Sequence[Path]) -> bool:
        """Whether only this broker reads the tier: a directory inside its own log dirs
        (the default). Replicas of a partition can share its tier only when it is not."""
        parsed = urlparse(self.url)
        if parsed.scheme != "file":
            return False
        path = Path(unquote(parsed.path))
        return any(path.is_relative_to(log_dir.absolute()) for log_dir in log_dirs)


def _default_url(log_dirs: Sequence[Path]) -> str:
    """The directory ``tier`` in its log dir (``log_dir_home``) as a file:// URL."""
    return (home_log_dir(log_dirs, "tier", _URL) / "tier").absolute().as_uri()
