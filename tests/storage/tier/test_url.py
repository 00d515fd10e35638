from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.minio import MinioServer
from tierlog.storage.tier.local_store import LocalDirectoryStore
from tierlog.storage.tier.s3_store import S3Location, S3Options, S3Store
from tierlog.storage.tier.url import InvalidStoreUrlError, open_store, parse_s3_url


def test_a_file_url_opens_a_local_directory_store(tmp_path: Path) -> None:
    store = open_store((tmp_path / "my tier").as_uri())
    assert isinstance(store, LocalDirectoryStore)
    assert store.root == tmp_path / "my tier"
    store.put("k", b"v")
    assert (tmp_path / "my tier" / "k").read_bytes() == b"v"


def test_an_s3_url_names_the_bucket_and_the_prefix() -> None:
    assert parse_s3_url("s3://tier-bucket/clusters/a/") == S3Location("tier-bucket", "clusters/a")
    assert parse_s3_url("s3://tier-bucket") == S3Location("tier-bucket", "")
    assert parse_s3_url("s3://tier.bucket-1/p").url == "s3://tier.bucket-1/p"


def test_an_s3_url_opens_an_s3_store_on_that_bucket(minio: MinioServer, s3_bucket: str) -> None:
    secret = minio.write_credentials(minio.data_dir.parent / "test-url-keys")
    options = S3Options(
        endpoint_url=minio.endpoint_url, region=minio.region, path_style=True,
        credentials_path=secret,
    )  # fmt: skip
    store = open_store(f"s3://{s3_bucket}/tiered", options)
    try:
        assert isinstance(store, S3Store)
        store.put("k", b"v")
        listed = minio.client().list_objects_v2(Bucket=s3_bucket)["Contents"]
        assert [item["Key"] for item in listed] == ["tiered/k"]
    finally:
        store.close()


@pytest.mark.parametrize(
    "url",
    [
        "", "/var/lib/tier", "tier", "http://example.com/tier", "gs://bucket/p",
        "file://host/path", "file:///", "file:relative/path", "file:///tier?x=1",
        "s3://", "s3://Bucket/p", "s3://ab/p", "s3://bucket_name/p", "s3://-bucket/p",
        "s3://bucket/a//b", "s3://bucket/../b", "s3://bucket/p?versionId=1",
    ],
)  # fmt: skip
def test_a_bad_url_is_a_typed_error(url: str) -> None:
    with pytest.raises(InvalidStoreUrlError):
        open_store(url)
