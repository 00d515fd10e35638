"""Deleting a cluster's tier data through the store the brokers write: S3 (MinIO) and files."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tests.support.minio import MinioServer
from tierlog.operator.bucket import delete_tier_data
from tierlog.operator.spec import CredentialsRef, Tier
from tierlog.storage.tier.s3_store import S3Options
from tierlog.storage.tier.url import open_store


def _keys(url: str, options: S3Options | None = None) -> list[str]:
    store = open_store(url, options)
    try:
        return sorted(info.key for info in store.list(""))
    finally:
        store.close()


def _fill(url: str, options: S3Options | None = None) -> None:
    store = open_store(url, options)
    try:
        for index in range(3):
            store.put(f"orders-0/{index:020d}.log", b"segment bytes")
    finally:
        store.close()


@pytest.mark.slow
def test_an_s3_tier_is_emptied_with_the_secrets_keys(
    minio: MinioServer, s3_bucket: str, tmp_path: Path
) -> None:
    url = f"s3://{s3_bucket}/clusters/events"
    keys = tmp_path / "keys"  # how a broker gets them: a mounted Secret
    keys.mkdir()
    (keys / "access_key_id").write_text(minio.access_key_id)
    (keys / "secret_access_key").write_text(minio.secret_access_key)
    options = S3Options(
        region=minio.region, endpoint_url=minio.endpoint_url, path_style=True,
        credentials_path=keys,
    )  # fmt: skip
    _fill(url, options)
    _fill(f"s3://{s3_bucket}/clusters/other", options)  # another cluster's prefix
    tier = Tier(
        url=url,
        endpoint=minio.endpoint_url,
        region=minio.region,
        force_path_style=True,
        credentials=CredentialsRef("s3-keys", "id", "key"),
    )
    secret = {"id": minio.access_key_id, "key": minio.secret_access_key}
    assert asyncio.run(delete_tier_data(tier, secret)) == 3
    assert _keys(url, options) == []
    assert len(_keys(f"s3://{s3_bucket}/clusters/other", options)) == 3
    assert asyncio.run(delete_tier_data(tier, secret)) == 0  # idempotent


def test_a_file_tier_is_emptied(tmp_path: Path) -> None:
    url = (tmp_path / "tier").as_uri()
    _fill(url)
    assert asyncio.run(delete_tier_data(Tier(url=url))) == 3
    assert _keys(url) == []
