"""S3Connection (pipeline/jvm/.../tierlog/spark/io/S3Connection.java): the settings value a
Spark driver builds and ships to executors.
"""

from __future__ import annotations

from typing import Any

import pytest
from py4j.protocol import Py4JJavaError

from tests.pipeline.jvm.conftest import Jvm


def make(
    jvm: Jvm,
    endpoint: str | None = "http://minio:9000",
    *,
    region: str = "eu-west-1",
    access_key_id: str = "AKID",
    secret_access_key: str = "the-secret",
    session_token: str | None = None,
    path_style: bool = True,
    connect_timeout_ms: int = 1000,
    read_timeout_ms: int = 2000,
    max_attempts: int = 3,
) -> Any:
    return jvm.io.S3Connection(
        endpoint, region, access_key_id, secret_access_key, session_token, path_style,
        connect_timeout_ms, read_timeout_ms, max_attempts,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("endpoint", "path_style", "url"),
    [
        (None, False, "https://my-bucket.s3.eu-west-1.amazonaws.com/tier/a%20b.log"),
        (None, True, "https://s3.eu-west-1.amazonaws.com/my-bucket/tier/a%20b.log"),
        ("http://minio:9000", True, "http://minio:9000/my-bucket/tier/a%20b.log"),
        ("http://minio:9000/", True, "http://minio:9000/my-bucket/tier/a%20b.log"),
        ("https://s3.example.com", False, "https://my-bucket.s3.example.com/tier/a%20b.log"),
    ],
)
def test_the_object_url_follows_the_endpoint_and_addressing_style(
    jvm: Jvm, endpoint: str | None, path_style: bool, url: str
) -> None:
    connection = make(jvm, endpoint, path_style=path_style)
    assert connection.objectUri("my-bucket", "tier/a b.log").toString() == url


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"endpoint": "minio:9000"}, "the S3 endpoint must be http(s)://host[:port]"),
        ({"endpoint": "http://minio:9000/prefix"}, "the S3 endpoint must be http(s)://host[:port]"),
        ({"region": ""}, "the S3 region is missing"),
        ({"access_key_id": ""}, "the S3 access key id is missing"),
        ({"secret_access_key": ""}, "the S3 secret access key is missing"),
        ({"read_timeout_ms": 0}, "the S3 read timeout must be positive, got 0"),
        ({"max_attempts": 0}, "the S3 max attempts must be positive, got 0"),
    ],
)
def test_bad_settings_are_refused_when_built(
    jvm: Jvm, settings: dict[str, Any], message: str
) -> None:
    with pytest.raises(Py4JJavaError) as failure:
        make(jvm, **settings)
    error = failure.value.java_exception
    assert error.getClass().getName() == "java.lang.IllegalArgumentException"
    assert message in error.getMessage()


def test_the_secret_and_token_stay_out_of_its_text(jvm: Jvm) -> None:
    text = make(jvm, secret_access_key="s3cr3t-value", session_token="t0ken-value").toString()
    assert "AKID" in text and "sessionToken=set" in text
    assert "s3cr3t-value" not in text and "t0ken-value" not in text


def test_it_survives_java_serialization_as_an_equal_value(jvm: Jvm) -> None:
    """How Spark ships it from the driver to executors."""
    java = jvm.gateway.jvm.java
    connection = make(jvm, None, session_token="token", path_style=False)
    buffer = java.io.ByteArrayOutputStream()
    out = java.io.ObjectOutputStream(buffer)
    out.writeObject(connection)
    out.close()
    copy = java.io.ObjectInputStream(
        java.io.ByteArrayInputStream(buffer.toByteArray())
    ).readObject()
    assert copy.equals(connection) and copy.hashCode() == connection.hashCode()
    assert not copy.equals(make(jvm, None, session_token="other", path_style=False))
