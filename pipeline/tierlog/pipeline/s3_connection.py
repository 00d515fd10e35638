"""How the JVM reaches an ``s3://`` tier: the query's S3 options resolved once, on the
driver, into what ``tierlog.spark.io.S3Connection`` takes.

Endpoint, region, path style and timeouts come from ``S3Options`` (the ``s3.*`` options);
the credentials from ``s3.credentials.path``, else boto3's chain (environment, config
files, instance roles), frozen: the executors see exactly what the driver resolved, and a
plan carries them to its tasks as the Python source's splits carried the options.
"""

from __future__ import annotations

from typing import Any

import boto3

from tierlog.pipeline.errors import InvalidOptionError
from tierlog.storage.tier.s3_credentials import S3Credentials, read_credentials
from tierlog.storage.tier.s3_store import S3Options

__all__ = ["s3_connection"]

DEFAULT_REGION = "us-east-1"  # boto3's own when nothing names one


def _credentials(options: S3Options) -> S3Credentials:
    if options.credentials_path is not None:
        return read_credentials(options.credentials_path)
    found = boto3.session.Session().get_credentials()
    frozen = None if found is None else found.get_frozen_credentials()
    if frozen is None or not frozen.access_key or not frozen.secret_key:
        raise InvalidOptionError(
            "no S3 credentials: set s3.credentials.path, or give boto3's chain some "
            "(AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, ~/.aws/credentials, a role)"
        )
    return S3Credentials(frozen.access_key, frozen.secret_key, frozen.token)


def s3_connection(options: S3Options) -> dict[str, Any]:
    """The JSON form of the ``S3Connection`` for ``options``."""
    region = options.region or boto3.session.Session().region_name or DEFAULT_REGION
    credentials = _credentials(options)
    return {
        "endpoint": options.endpoint_url,  # None: AWS's, for the region
        "region": region,
        "access_key_id": credentials.access_key_id,
        "secret_access_key": credentials.secret_access_key,
        "session_token": credentials.session_token,
        "path_style": options.path_style,
        "connect_timeout_ms": round(options.connect_timeout_s * 1000),
        "read_timeout_ms": round(options.read_timeout_s * 1000),
        "max_attempts": options.max_attempts,
    }
