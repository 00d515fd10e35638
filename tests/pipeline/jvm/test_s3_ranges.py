"""S3Ranges (pipeline/jvm/.../tierlog/spark/io/S3Ranges.java): ranged reads of objects in a
real MinIO, signed by our SigV4, with the faults a Spark executor meets (a refusal, a
missing key, a range past the end, throttling, a dropped or hung connection, the
server stopped or restarted) and what the reader makes of each.
"""

from __future__ import annotations

import random
import signal
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import boto3
import pytest
from py4j.protocol import Py4JJavaError

from tests.pipeline.jvm.conftest import Jvm
from tests.support.fault_proxy import FaultProxy
from tests.support.minio import MinioServer

CONNECT_TIMEOUT_MS = 2000


def connection(
    jvm: Jvm,
    minio: MinioServer,
    *,
    endpoint: str | None = None,
    access_key_id: str | None = None,
    secret_access_key: str | None = None,
    session_token: str | None = None,
    read_timeout_ms: int = 5000,
    max_attempts: int = 3,
) -> Any:
    """An ``S3Connection`` to the test's MinIO (path style, its root keys unless told)."""
    return jvm.io.S3Connection(
        endpoint or minio.endpoint_url,
        minio.region,
        access_key_id or minio.access_key_id,
        secret_access_key or minio.secret_access_key,
        session_token,
        True,
        CONNECT_TIMEOUT_MS,
        read_timeout_ms,
        max_attempts,
    )


def put(minio: MinioServer, bucket: str, key: str, size: int) -> bytes:
    """An object of ``size`` random bytes, written by boto3."""
    data = random.Random(f"{key}/{size}").randbytes(size)
    minio.client().put_object(Bucket=bucket, Key=key, Body=data)
    return data


def read(jvm: Jvm, s3: Any, bucket: str, key: str, offset: int, length: int) -> bytes:
    """``S3Ranges.read``'s buffer, checked to hold exactly ``length`` bytes from 0."""
    buffer = jvm.io.S3Ranges.read(s3, bucket, key, offset, length)
    assert (buffer.position(), buffer.remaining()) == (0, length)
    return bytes(buffer.array())


def read_error(jvm: Jvm, s3: Any, bucket: str, key: str, offset: int, length: int) -> Any:
    """The Java exception ``S3Ranges.read`` threw."""
    with pytest.raises(Py4JJavaError) as failure:
        jvm.io.S3Ranges.read(s3, bucket, key, offset, length)
    return failure.value.java_exception


def assert_s3_error(error: Any, status: int, code: str, *fragments: str) -> None:
    assert error.getClass().getName() == "tierlog.spark.io.S3ReadException"
    assert (error.statusCode(), error.errorCode()) == (status, code), error.getMessage()
    for fragment in fragments:
        assert fragment in error.getMessage()


# --- reads ----------------------------------------------------------------------------------


def test_ranges_at_the_start_middle_and_end_are_the_objects_bytes(
    jvm: Jvm, minio: MinioServer, s3_bucket: str
) -> None:
    key = "tier/00000000000000000000.log"
    data = put(minio, s3_bucket, key, 1 << 20)
    s3 = connection(jvm, minio)
    for offset, length in [(0, 100), (500_000, 4096), (len(data) - 777, 777), (0, len(data))]:
        assert read(jvm, s3, s3_bucket, key, offset, length) == data[offset : offset + length]


@pytest.mark.parametrize(
    "key",
    [
        "tier/a b/segment with spaces.log",
        "tier/topic=orders/partition=3/ünïcødé ☃.log",
        "tier/odd+chars%&?#~!'()*,;@$[].log",
    ],
)
def test_keys_that_need_encoding_are_read(
    jvm: Jvm, minio: MinioServer, s3_bucket: str, key: str
) -> None:
    data = put(minio, s3_bucket, key, 5000)
    assert read(jvm, connection(jvm, minio), s3_bucket, key, 10, 4000) == data[10:4010]


def test_temporary_credentials_sign_with_their_session_token(
    jvm: Jvm, minio: MinioServer, s3_bucket: str
) -> None:
    data = put(minio, s3_bucket, "tier/k.log", 300)
    credentials = assume_role(minio)
    s3 = connection(
        jvm,
        minio,
        access_key_id=credentials["AccessKeyId"],
        secret_access_key=credentials["SecretAccessKey"],
        session_token=credentials["SessionToken"],
    )
    assert read(jvm, s3, s3_bucket, "tier/k.log", 0, 300) == data

    without_token = connection(
        jvm,
        minio,
        access_key_id=credentials["AccessKeyId"],
        secret_access_key=credentials["SecretAccessKey"],
    )
    error = read_error(jvm, without_token, s3_bucket, "tier/k.log", 0, 300)
    assert_s3_error(error, 403, "InvalidTokenId", "403 InvalidTokenId: The security token")


def assume_role(minio: MinioServer) -> dict[str, Any]:
    """Temporary keys and their session token from MinIO's STS (on the S3 endpoint)."""
    sts = boto3.client(
        "sts",
        endpoint_url=minio.endpoint_url,
        region_name=minio.region,
        aws_access_key_id=minio.access_key_id,
        aws_secret_access_key=minio.secret_access_key,
    )
    answer = sts.assume_role(
        RoleArn="arn:aws:iam::000000000000:role/reader", RoleSessionName="spark"
    )
    return dict(answer["Credentials"])


def test_an_empty_range_reads_nothing(jvm: Jvm, minio: MinioServer, s3_bucket: str) -> None:
    put(minio, s3_bucket, "tier/k.log", 10)
    assert read(jvm, connection(jvm, minio), s3_bucket, "tier/k.log", 3, 0) == b""


def test_reads_reuse_one_kept_alive_connection(
    jvm: Jvm, minio: MinioServer, s3_bucket: str, fault_proxy: FaultProxy
) -> None:
    """Executors read many ranges: each read must not open a connection of its own (a TCP
    handshake, and TLS's on AWS). Ten reads one after the other, ranges of every size,
    go over the one connection the first opened."""
    data = put(minio, s3_bucket, "tier/k.log", 1 << 20)
    s3 = connection(jvm, minio, endpoint=fault_proxy.url)
    for offset, length in [(0, 100), (100, 1 << 19), (5, 1), *[(i * 1000, 999) for i in range(7)]]:
        assert (
            read(jvm, s3, s3_bucket, "tier/k.log", offset, length) == data[offset : offset + length]
        )
    assert (fault_proxy.forwarded, fault_proxy.connections) == (10, 1)


# --- refusals: at once, with S3's error code ------------------------------------------------


def test_a_wrong_secret_is_refused_with_signature_does_not_match(
    jvm: Jvm, minio: MinioServer, s3_bucket: str
) -> None:
    put(minio, s3_bucket, "tier/k.log", 10)
    s3 = connection(jvm, minio, secret_access_key="not-the-secret")
    error = read_error(jvm, s3, s3_bucket, "tier/k.log", 0, 10)
    assert_s3_error(error, 403, "SignatureDoesNotMatch", f"s3://{s3_bucket}/tier/k.log", "403")
    assert "attempts" not in error.getMessage()  # a refusal is not retried


def test_an_unknown_access_key_is_refused(jvm: Jvm, minio: MinioServer, s3_bucket: str) -> None:
    put(minio, s3_bucket, "tier/k.log", 10)
    s3 = connection(jvm, minio, access_key_id="nobody")
    error = read_error(jvm, s3, s3_bucket, "tier/k.log", 0, 10)
    assert_s3_error(error, 403, "InvalidAccessKeyId", f"s3://{s3_bucket}/tier/k.log")


def test_a_missing_key_is_no_such_key(jvm: Jvm, minio: MinioServer, s3_bucket: str) -> None:
    error = read_error(jvm, connection(jvm, minio), s3_bucket, "tier/missing.log", 0, 10)
    assert_s3_error(error, 404, "NoSuchKey", f"s3://{s3_bucket}/tier/missing.log bytes=0-9")


def test_a_missing_bucket_is_no_such_bucket(jvm: Jvm, minio: MinioServer) -> None:
    error = read_error(jvm, connection(jvm, minio), "no-such-bucket-here", "k.log", 0, 10)
    assert_s3_error(error, 404, "NoSuchBucket", "s3://no-such-bucket-here/k.log")


def test_a_range_past_the_end_is_invalid_range(
    jvm: Jvm, minio: MinioServer, s3_bucket: str
) -> None:
    put(minio, s3_bucket, "tier/k.log", 1000)
    error = read_error(jvm, connection(jvm, minio), s3_bucket, "tier/k.log", 1000, 10)
    assert_s3_error(error, 416, "InvalidRange", "bytes=1000-1009", "past the object's end")


def test_a_range_over_the_end_is_a_short_read_not_a_short_buffer(
    jvm: Jvm, minio: MinioServer, s3_bucket: str
) -> None:
    put(minio, s3_bucket, "tier/k.log", 1000)
    error = read_error(jvm, connection(jvm, minio), s3_bucket, "tier/k.log", 990, 20)
    assert_s3_error(
        error, 206, "", "short read: the object is 1000 bytes long, so only 10 of the 20"
    )


@pytest.mark.parametrize(("offset", "length"), [(-1, 10), (0, -1)])
def test_a_negative_range_is_an_illegal_argument(
    jvm: Jvm, minio: MinioServer, offset: int, length: int
) -> None:
    error = read_error(jvm, connection(jvm, minio), "b", "k", offset, length)
    assert error.getClass().getName() == "java.lang.IllegalArgumentException"
    assert "negative S3 range" in error.getMessage()


# --- faults: retried, then given up with the reason -----------------------------------------


def test_throttling_is_retried_until_it_passes(
    jvm: Jvm, minio: MinioServer, s3_bucket: str, fault_proxy: FaultProxy
) -> None:
    data = put(minio, s3_bucket, "tier/k.log", 2000)
    fault_proxy.slow_down(2, method="GET")
    jvm.drain_stderr()
    s3 = connection(jvm, minio, endpoint=fault_proxy.url, max_attempts=3)
    assert read(jvm, s3, s3_bucket, "tier/k.log", 100, 1000) == data[100:1100]
    assert fault_proxy.injected["slow_down"] == 2
    assert "503 SlowDown" in jvm.wait_for_stderr("attempt 2 of 3 failed, retrying")


def test_throttling_past_max_attempts_fails_and_says_so(
    jvm: Jvm, minio: MinioServer, s3_bucket: str, fault_proxy: FaultProxy
) -> None:
    put(minio, s3_bucket, "tier/k.log", 2000)
    fault_proxy.slow_down(3, method="GET")
    s3 = connection(jvm, minio, endpoint=fault_proxy.url, max_attempts=3)
    error = read_error(jvm, s3, s3_bucket, "tier/k.log", 0, 10)
    assert_s3_error(error, 503, "SlowDown", "gave up after 3 attempts", "s3://")
    assert fault_proxy.injected["slow_down"] == 3


def test_a_dropped_connection_is_retried(
    jvm: Jvm, minio: MinioServer, s3_bucket: str, fault_proxy: FaultProxy
) -> None:
    data = put(minio, s3_bucket, "tier/k.log", 2000)
    fault_proxy.drop(1, method="GET")
    s3 = connection(jvm, minio, endpoint=fault_proxy.url, max_attempts=2)
    assert read(jvm, s3, s3_bucket, "tier/k.log", 0, 2000) == data
    assert fault_proxy.injected["drop"] == 1


def test_a_hung_server_times_out_and_is_retried(
    jvm: Jvm, minio: MinioServer, s3_bucket: str, fault_proxy: FaultProxy
) -> None:
    data = put(minio, s3_bucket, "tier/k.log", 2000)
    fault_proxy.stall(1, seconds=60, method="GET")
    jvm.drain_stderr()
    s3 = connection(jvm, minio, endpoint=fault_proxy.url, read_timeout_ms=500, max_attempts=2)
    assert read(jvm, s3, s3_bucket, "tier/k.log", 0, 2000) == data
    assert fault_proxy.injected["stall"] == 1
    line = jvm.wait_for_stderr("attempt 1 of 2 failed")
    assert "no answer within 500 ms" in line


def test_a_body_that_stalls_half_way_times_out_and_is_retried(
    jvm: Jvm, minio: MinioServer, s3_bucket: str, fault_proxy: FaultProxy
) -> None:
    """The read timeout counts from the last bytes that came, not from the request."""
    data = put(minio, s3_bucket, "tier/k.log", 200_000)
    fault_proxy.stall_body(1, seconds=600, method="GET")
    jvm.drain_stderr()
    s3 = connection(jvm, minio, endpoint=fault_proxy.url, read_timeout_ms=500, max_attempts=2)
    assert read(jvm, s3, s3_bucket, "tier/k.log", 0, 200_000) == data
    assert fault_proxy.injected["stall_body"] == 1
    line = jvm.wait_for_stderr("attempt 1 of 2 failed")
    assert "the body stalled for 500 ms" in line


def test_a_stopped_server_is_retried_until_it_answers(
    jvm: Jvm, minio: MinioServer, s3_bucket: str
) -> None:
    """SIGSTOP: connections are still accepted (by the kernel) and never answered."""
    data = put(minio, s3_bucket, "tier/k.log", 3000)
    s3 = connection(jvm, minio, read_timeout_ms=1000, max_attempts=10)
    assert minio.process is not None
    jvm.drain_stderr()
    with ThreadPoolExecutor(1) as pool:
        minio.process.send_signal(signal.SIGSTOP)
        try:
            reading = pool.submit(read, jvm, s3, s3_bucket, "tier/k.log", 0, 3000)
            line = jvm.wait_for_stderr("attempt 1 of 10 failed")
        finally:
            minio.process.send_signal(signal.SIGCONT)
        assert reading.result(timeout=120) == data
    assert "no answer within 1000 ms" in line


def test_an_interrupted_read_ends_at_once(
    fresh_jvm: Jvm, minio: MinioServer, s3_bucket: str
) -> None:
    """Spark interrupts the thread of a task it kills: the read must end then, not after its
    attempts and timeouts (here a minute each against a stopped MinIO). A JVM of its own:
    the interrupted thread keeps its flag set, as Java asks, and py4j would reuse it."""
    put(minio, s3_bucket, "tier/k.log", 10)
    s3 = connection(fresh_jvm, minio, read_timeout_ms=60_000, max_attempts=5)
    assert minio.process is not None
    with ThreadPoolExecutor(1) as pool:
        minio.process.send_signal(signal.SIGSTOP)
        try:
            reading = pool.submit(read_error, fresh_jvm, s3, s3_bucket, "tier/k.log", 0, 10)
            reader = waiting_reader_thread(fresh_jvm)
            reader.interrupt()
            error = reading.result(timeout=30)
        finally:
            minio.process.send_signal(signal.SIGCONT)
    assert error.getClass().getName() == "java.io.InterruptedIOException"
    assert f"interrupted during S3 GET s3://{s3_bucket}/tier/k.log" in error.getMessage()


def test_a_read_interrupted_while_its_body_stalls_ends_at_once(
    fresh_jvm: Jvm, minio: MinioServer, s3_bucket: str, fault_proxy: FaultProxy
) -> None:
    """The blocking HTTP client cannot be interrupted in a socket read (nor disconnected:
    that waits for the read): the task's thread waits for the GET's thread, and an
    interrupt ends that wait, whatever the GET is doing (here half a body, then silence,
    with a minute's read timeout)."""
    put(minio, s3_bucket, "tier/k.log", 200_000)
    fault_proxy.stall_body(1, seconds=600, method="GET")
    read_timeout_ms = 60_000
    s3 = connection(fresh_jvm, minio, endpoint=fault_proxy.url, read_timeout_ms=read_timeout_ms)
    with ThreadPoolExecutor(1) as pool:
        reading = pool.submit(read_error, fresh_jvm, s3, s3_bucket, "tier/k.log", 0, 200_000)
        reader = waiting_reader_thread(fresh_jvm)
        thread_in(fresh_jvm, "RangeGet", "body")  # the GET's thread reads the body
        started = time.monotonic()
        reader.interrupt()
        error = reading.result(timeout=30)
    assert time.monotonic() - started < read_timeout_ms / 1000  # not the read timeout
    assert error.getClass().getName() == "java.io.InterruptedIOException"
    assert f"interrupted during S3 GET s3://{s3_bucket}/tier/k.log" in error.getMessage()


def waiting_reader_thread(jvm: Jvm) -> Any:
    """The JVM thread waiting for a ranged GET (found in the JVM's thread dump)."""
    return thread_in(jvm, "RangeFetch", "await")


def thread_in(jvm: Jvm, class_name: str, method: str, timeout_s: float = 30) -> Any:
    """A JVM thread running ``class_name.method`` (found in the JVM's thread dump)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        stacks = jvm.gateway.jvm.java.lang.Thread.getAllStackTraces()
        for thread in stacks.keySet():
            frames = stacks.get(thread)
            if any(
                frame.getMethodName() == method and class_name in frame.getClassName()
                for frame in frames
            ):
                return thread
    raise AssertionError(f"no thread is in {class_name}.{method}")


def test_a_restarted_server_is_retried_until_it_answers(
    jvm: Jvm, minio: MinioServer, s3_bucket: str
) -> None:
    """Killed, then started again on the same port once the first attempt failed."""
    data = put(minio, s3_bucket, "tier/k.log", 3000)
    s3 = connection(jvm, minio, max_attempts=30)
    jvm.drain_stderr()
    with ThreadPoolExecutor(1) as pool:
        minio.kill()
        try:
            reading = pool.submit(read, jvm, s3, s3_bucket, "tier/k.log", 1000, 2000)
            jvm.wait_for_stderr("attempt 1 of 30 failed")
        finally:
            minio.start()
        assert reading.result(timeout=120) == data[1000:]


def test_a_server_that_stays_down_fails_after_max_attempts(
    jvm: Jvm, minio: MinioServer, s3_bucket: str
) -> None:
    put(minio, s3_bucket, "tier/k.log", 10)
    s3 = connection(jvm, minio, max_attempts=2)
    minio.kill()
    try:
        error = read_error(jvm, s3, s3_bucket, "tier/k.log", 0, 10)
    finally:
        minio.start()
    assert_s3_error(error, 0, "", f"s3://{s3_bucket}/tier/k.log", "gave up after 2 attempts")
    assert "ConnectException" in error.getMessage()
