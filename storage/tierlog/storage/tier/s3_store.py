"""The S3 object store: AWS S3 or any S3-compatible endpoint (MinIO, Ceph...), on boto3.

How it keeps the ``ObjectStore`` promises over a network that fails:

- Integrity: every PUT and every part carries a CRC-32C of its bytes
  (``x-amz-checksum-crc32c``); the server recomputes it and refuses a body that
  changed on the way. The object is visible only once PutObject or
  CompleteMultipartUpload succeeded, so a failed upload leaves nothing readable.
- Large objects (from ``multipart_threshold_bytes``) go up as a multipart upload,
  ``upload_concurrency`` parts at a time, each read from the file when its turn
  comes (memory stays near ``upload_concurrency * part_size_bytes``). A failed upload
  is aborted; if even the abort fails, ``abort_incomplete_uploads`` sweeps it later.
- Retries are ours, not botocore's (its own are switched off), so each attempt is
  counted and bounded: 5xx, ``SlowDown``, timeouts, dropped connections and a
  checksum refused in flight are retried up to ``max_attempts`` with exponential
  backoff and full jitter, then ``ObjectStoreUnavailableError``. A refusal
  (denied, no such bucket) is an ``ObjectStoreError`` at once.
- ``if_absent`` is ``If-None-Match: *``: the server refuses to replace an object.
  If an earlier attempt's answer was lost (timeout) and the retry is refused, the
  object may be our own: it is read back and compared before ``ObjectExistsError``.
- ``upload_rate_bytes_per_s`` is one token bucket per store, drawn on by every upload
  attempt; the sidecar opens one store, so it limits the whole process.

``observer`` hears of every request attempt (operation, error code or None), which is
how the sidecar counts S3 requests and errors by operation without this module
knowing about Prometheus.
"""

from __future__ import annotations

import base64
import builtins
import hashlib
import logging
import random
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, TypeVar

import boto3
import crc32c
import urllib3
from botocore.config import Config
from botocore.credentials import Credentials
from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    ConnectionError,
    HTTPClientError,
    IncompleteReadError,
)

from tierlog.storage.errors import InvalidConfigError
from tierlog.storage.rate_limit import TokenBucket
from tierlog.storage.tier.body import BodyReader
from tierlog.storage.tier.chunk_buffers import Filled, nothing_filled
from tierlog.storage.tier.s3_credentials import read_credentials
from tierlog.storage.tier.s3_signed_get import PAGE_KEYS, SignedGet
from tierlog.storage.tier.store import (
    Body,
    ObjectExistsError,
    ObjectInfo,
    ObjectNotFoundError,
    ObjectStoreError,
    ObjectStoreUnavailableError,
    check_key,
)

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client
    from mypy_boto3_s3.type_defs import CompletedPartTypeDef

__all__ = ["S3Location", "S3Observer", "S3Options", "S3Store", "backoff_s", "crc32c_base64"]

log = logging.getLogger(__name__)

_T = TypeVar("_T")
_MIB = 1 << 20
_DELETE_BATCH = 1000  # DeleteObjects' limit per request
_MAX_PARTS = 10_000  # S3's limit per multipart upload
_MIN_PART_BYTES = 5 * _MIB  # S3's minimum for every part but the last

# Error codes worth another attempt: the server is overloaded or failed, or the body
# was damaged in flight (the retry sends it again from its source).
_RETRYABLE_CODES = frozenset(
    {
        "SlowDown", "Throttling", "ThrottlingException", "RequestTimeout",
        "RequestTimeTooSkewed", "InternalError", "ServiceUnavailable",
        "ConditionalRequestConflict", "BadDigest", "XAmzContentChecksumMismatch",
        "XAmzContentSHA256Mismatch", "IncompleteBody",
    }
)  # fmt: skip
_NOT_FOUND_CODES = frozenset({"NoSuchKey", "NotFound", "404"})
_REFUSED_IF_ABSENT_CODES = frozenset({"PreconditionFailed", "412"})


@dataclass(frozen=True)
class S3Location:
    """Which bucket, and the key prefix the store's keys live under."""

    bucket: str
    prefix: str = ""

    def __post_init__(self) -> None:
        if not self.bucket:
            raise InvalidConfigError("the S3 bucket name is empty")

    @property
    def root(self) -> str:
        """What every object key starts with: ``prefix/``, or nothing."""
        prefix = self.prefix.strip("/")
        return prefix + "/" if prefix else ""

    @property
    def url(self) -> str:
        return f"s3://{self.bucket}/{self.prefix.strip('/')}"


@dataclass(frozen=True)
class S3Options:
    """How to reach the bucket, and how hard to push it."""

    region: str | None = None  # None: boto3's chain (AWS_REGION, config file)
    endpoint_url: str | None = None  # None: AWS; e.g. http://minio:9000
    path_style: bool = False  # bucket in the path, not the host name (MinIO, Ceph)
    credentials_path: Path | None = None  # a file or a Secret directory; None: the chain
    connect_timeout_s: float = 5.0
    read_timeout_s: float = 30.0
    max_attempts: int = 5
    backoff_base_s: float = 0.1  # first retry waits up to this, doubling each time
    backoff_max_s: float = 5.0
    multipart_threshold_bytes: int = 16 * _MIB
    part_size_bytes: int = 16 * _MIB
    upload_concurrency: int = 8  # parts in flight, over all uploads of the store
    upload_rate_bytes_per_s: int | None = None  # None: unlimited
    # Connections kept open to the store, over all requests of the store: above the
    # requests in flight at once (uploads' parts; the remote reader's GETs, twice its
    # threads, and a fetch's partitions read at once), each request beyond it opens a
    # connection of its own and closes it after.
    max_connections: int = 64

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise InvalidConfigError(f"max attempts must be at least 1, got {self.max_attempts}")
        if self.part_size_bytes < _MIN_PART_BYTES:
            raise InvalidConfigError(
                f"the S3 part size must be at least {_MIN_PART_BYTES} bytes, "
                f"got {self.part_size_bytes}"
            )
        if min(self.multipart_threshold_bytes, self.upload_concurrency, self.max_connections) < 1:
            raise InvalidConfigError(
                "the multipart threshold, upload concurrency and connections must be positive"
            )
        if self.upload_rate_bytes_per_s is not None and self.upload_rate_bytes_per_s <= 0:
            raise InvalidConfigError("the S3 upload rate limit must be positive")


class S3Observer(Protocol):
    def s3_request(self, operation: str, error: str | None) -> None:
        """One request attempt ended; ``error`` is the S3 error code or exception name."""


class _Retryable(Exception):
    """An attempt failed in a way another attempt may not (carries the reason)."""

    def __init__(self, reason: str, cause: BaseException):
        super().__init__(reason)
        self.reason = reason
        self.cause = cause


def _error_code(error: ClientError) -> str:
    return str(error.response.get("Error", {}).get("Code", "Unknown"))


def _http_status(error: ClientError) -> int:
    return int(error.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0))


def _multipart_etag(parts: builtins.list[CompletedPartTypeDef]) -> str:
    """S3's ETag of a completed multipart upload: the MD5 of the parts' MD5s, a dash,
    the part count (each part's ETag is its MD5 in quotes)."""
    digests = b"".join(bytes.fromhex(part["ETag"].strip('"')) for part in parts)
    return f'"{hashlib.md5(digests).hexdigest()}-{len(parts)}"'


def crc32c_base64(data: bytes | memoryview) -> str:
    """The checksum as S3 headers carry it: base64 of the big-endian 32-bit CRC-32C."""
    return base64.b64encode(crc32c.crc32c(data).to_bytes(4, "big")).decode()


class S3Store:
    """Objects under ``s3://bucket/prefix/``; one store per process (see the rate limit)."""

    def __init__(
        self,
        location: S3Location,
        options: S3Options = S3Options(),
        *,
        observer: S3Observer | None = None,
        jitter: random.Random | None = None,
    ):
        """``jitter`` draws the backoff's waits (a seeded one makes them known to a test)."""
        self.location = location
        self.options = options
        self.observer = observer
        self.url = location.url
        self._root = location.root
        self._client, credentials = _make_client(options)
        # GETs of bytes, the tier's reads, skip botocore's per-request work.
        self._signed_get = SignedGet(
            self._client,
            location.bucket,
            credentials,
            max_connections=options.max_connections,
            connect_timeout_s=options.connect_timeout_s,
            read_timeout_s=options.read_timeout_s,
        )
        self.list_page_keys = PAGE_KEYS  # keys a listing asks for a page at most
        self._parts = ThreadPoolExecutor(options.upload_concurrency, "s3-part")
        self._rate_limit = (
            TokenBucket(options.upload_rate_bytes_per_s, options.upload_rate_bytes_per_s)
            if options.upload_rate_bytes_per_s
            else None
        )
        self._random = jitter or random.Random()
        self._random_lock = threading.Lock()

    # --- the ObjectStore operations --------------------------------------------------------

    def put(self, key: str, body: Body, *, if_absent: bool = False) -> None:
        check_key(key)
        source = BodyReader(body)
        try:
            if source.size < self.options.multipart_threshold_bytes:
                self._put_whole(key, source, if_absent=if_absent)
            else:
                self._put_multipart(key, source, if_absent=if_absent)
        finally:
            source.close()

    def get(self, key: str, start: int = 0, end: int | None = None) -> bytes:
        check_key(key)
        if end is not None and end <= start:
            self.size(key)  # still a typed error for a missing key
            return b""
        byte_range = "" if start == 0 and end is None else f"bytes={start}-"
        if end is not None:
            byte_range += str(end - 1)
        return self._get(key, lambda full_key: self._signed_get.get(full_key, byte_range), b"")

    def get_into(
        self,
        key: str,
        start: int,
        buffers: Sequence[memoryview],
        on_filled: Filled = nothing_filled,
    ) -> int:
        """As ``get``, the bytes read off the answer's stream straight into ``buffers``,
        ``on_filled`` told of each as it fills. A retry asks for the bytes after the
        buffers filled already: those may be in a reader's hands."""
        check_key(key)
        wanted = sum(len(buffer) for buffer in buffers)
        if not wanted:
            self.size(key)
            return 0
        filled, filled_bytes = 0, 0  # over every attempt

        def mark(_index: int) -> None:
            nonlocal filled, filled_bytes
            filled_bytes += len(buffers[filled])
            filled += 1
            on_filled(filled - 1)

        def send(full_key: str) -> int:
            if filled == len(buffers):  # failed after its last byte: nothing left to ask
                return wanted
            byte_range = f"bytes={start + filled_bytes}-{start + wanted - 1}"
            rest = buffers[filled:]
            return filled_bytes + self._signed_get.get_into(full_key, byte_range, rest, mark)

        # A retry past the object's end (it is shorter than asked) answers no bytes: what
        # landed is what the buffers filled before it hold.
        return max(self._get(key, send, 0), filled_bytes)

    def _get(self, key: str, send: Callable[[str], _T], beyond_the_end: _T) -> _T:
        """One GET (``send`` of the full key), retried; a range starting at or past the
        object's end is ``beyond_the_end`` (no bytes)."""

        def read() -> _T:
            try:
                return send(self._root + key)
            except ClientError as error:
                if _error_code(error) == "InvalidRange":
                    return beyond_the_end
                raise

        return self._call("GetObject", key, read)

    def size(self, key: str) -> int:
        check_key(key)
        answer = self._call(
            "HeadObject",
            key,
            lambda: self._client.head_object(Bucket=self.location.bucket, Key=self._root + key),
        )
        return answer["ContentLength"]

    def list(self, prefix: str) -> Iterator[ObjectInfo]:
        # Page by page with our retries (a paginator's iterator dies with its first error),
        # over the signed GETs' path: botocore's own cost more than the request.
        token, full_prefix = "", self._root + prefix
        while True:
            page = self._call(
                "ListObjectsV2",
                prefix,
                partial(self._signed_get.list_page, full_prefix, token, self.list_page_keys),
            )
            for info in page.objects:
                yield info._replace(key=info.key[len(self._root) :])
            token = page.next_token
            if not token:
                return

    def delete(self, keys: Iterable[str]) -> None:
        batch: builtins.list[str] = []
        for key in keys:
            check_key(key)
            batch.append(key)
            if len(batch) == _DELETE_BATCH:
                self._delete_batch(batch)
                batch = []
        if batch:
            self._delete_batch(batch)

    def _delete_batch(self, keys: builtins.list[str]) -> None:
        answer = self._call(
            "DeleteObjects",
            keys[0],
            lambda: self._client.delete_objects(
                Bucket=self.location.bucket,
                Delete={"Objects": [{"Key": self._root + key} for key in keys], "Quiet": True},
            ),
        )
        refused = answer.get("Errors", [])
        if refused:
            first = refused[0]
            raise ObjectStoreError(
                f"{len(refused)} of {len(keys)} deletes refused, e.g. {first.get('Key')}: "
                f"{first.get('Code')} {first.get('Message')}"
            )

    def abort_incomplete_uploads(self, prefix: str, *, older_than_s: float) -> int:
        """Two listings, united: one of the whole bucket, filtered by ``prefix`` here, and
        one with ``prefix`` as S3's Prefix. On AWS either finds every upload. MinIO
        (minio/minio#20989, "working as intended") answers a Prefix only for the key
        equal to it, and lists the whole bucket only from its memory, which a restart
        empties; so a caller that knows the keys a crashed writer was uploading sweeps
        each by its full key, which MinIO finds on disk. (MinIO also drops uploads older
        than its ``stale_uploads_expiry``, 24 h by default.) The bucket-wide listing is
        why the tier's sweep asks once for the whole store rather than per partition."""
        cutoff = datetime.now(UTC).timestamp() - older_than_s
        stale: dict[str, str] = {}  # upload id -> full key
        for server_prefix in dict.fromkeys(("", self._root + prefix)):  # once if the same
            for full_key, upload_id, initiated_s in self._uploads(server_prefix):
                if full_key.startswith(self._root + prefix) and initiated_s < cutoff:
                    stale[upload_id] = full_key
        for upload_id, full_key in stale.items():
            self._abort(full_key, upload_id)
        return len(stale)

    def _uploads(self, server_prefix: str) -> Iterator[tuple[str, str, float]]:
        """(full key, upload id, initiated) of the multipart uploads S3 lists."""
        key_marker = upload_marker = ""
        while True:
            page = self._call(
                "ListMultipartUploads",
                server_prefix,
                partial(
                    self._client.list_multipart_uploads,
                    Bucket=self.location.bucket,
                    Prefix=server_prefix,
                    KeyMarker=key_marker,
                    UploadIdMarker=upload_marker,
                ),
            )
            for upload in page.get("Uploads", []):
                yield upload["Key"], upload["UploadId"], upload["Initiated"].timestamp()
            if not page.get("IsTruncated"):
                return
            key_marker = page.get("NextKeyMarker", "")
            upload_marker = page.get("NextUploadIdMarker", "")

    def close(self) -> None:
        self._parts.shutdown(wait=True)
        self._signed_get.close()
        self._client.close()

    # --- uploads ----------------------------------------------------------------------------

    def _limit_rate(self, n_bytes: int) -> None:
        if self._rate_limit is not None:
            self._rate_limit.acquire(n_bytes)

    def _put_whole(self, key: str, source: BodyReader, *, if_absent: bool) -> None:
        data = source.read(0, source.size)
        checksum = crc32c_base64(data)
        attempts = 0

        def send() -> None:
            nonlocal attempts
            attempts += 1
            self._limit_rate(len(data))
            if if_absent:
                self._client.put_object(
                    Bucket=self.location.bucket,
                    Key=self._root + key,
                    Body=data,
                    ChecksumCRC32C=checksum,
                    IfNoneMatch="*",
                )
            else:
                self._client.put_object(
                    Bucket=self.location.bucket,
                    Key=self._root + key,
                    Body=data,
                    ChecksumCRC32C=checksum,
                )

        try:
            self._call("PutObject", key, send)
        except ObjectExistsError:
            if attempts > 1 and self._holds(key, data):
                return  # our own earlier attempt landed; its answer was lost
            raise

    def _holds(self, key: str, data: bytes) -> bool:
        try:
            return self.get(key) == data
        except ObjectNotFoundError:
            return False

    def _put_multipart(self, key: str, source: BodyReader, *, if_absent: bool) -> None:
        part_size = max(self.options.part_size_bytes, -(-source.size // _MAX_PARTS))
        full_key = self._root + key
        created = self._call(
            "CreateMultipartUpload",
            key,
            lambda: self._client.create_multipart_upload(
                Bucket=self.location.bucket, Key=full_key, ChecksumAlgorithm="CRC32C"
            ),
        )
        upload_id = created["UploadId"]
        futures: builtins.list[Future[CompletedPartTypeDef]] = []
        try:
            for number, start in enumerate(range(0, source.size, part_size), start=1):
                futures.append(
                    self._parts.submit(
                        self._upload_part, key, upload_id, number, source, start, part_size
                    )
                )
            parts = [future.result() for future in futures]
            self._complete(key, upload_id, parts, if_absent=if_absent)
        except BaseException:
            for future in futures:
                future.cancel()
            for future in futures:  # no part may land after the abort
                if not future.cancelled():
                    future.exception()
            self._abort_quietly(full_key, upload_id)
            raise

    def _upload_part(
        self, key: str, upload_id: str, number: int, source: BodyReader, start: int, part_size: int
    ) -> CompletedPartTypeDef:
        data = source.read(start, part_size)
        checksum = crc32c_base64(data)

        def send() -> str:
            self._limit_rate(len(data))
            answer = self._client.upload_part(
                Bucket=self.location.bucket,
                Key=self._root + key,
                UploadId=upload_id,
                PartNumber=number,
                Body=data,
                ChecksumCRC32C=checksum,
            )
            return answer["ETag"]

        etag = self._call("UploadPart", key, send)
        return {"PartNumber": number, "ETag": etag, "ChecksumCRC32C": checksum}

    def _complete(
        self,
        key: str,
        upload_id: str,
        parts: builtins.list[CompletedPartTypeDef],
        *,
        if_absent: bool,
    ) -> None:
        attempts = 0
        answer_lost = False

        def send() -> None:
            nonlocal attempts, answer_lost
            attempts += 1
            try:
                if if_absent:
                    self._client.complete_multipart_upload(
                        Bucket=self.location.bucket,
                        Key=self._root + key,
                        UploadId=upload_id,
                        MultipartUpload={"Parts": parts},
                        IfNoneMatch="*",
                    )
                else:
                    self._client.complete_multipart_upload(
                        Bucket=self.location.bucket,
                        Key=self._root + key,
                        UploadId=upload_id,
                        MultipartUpload={"Parts": parts},
                    )
            except ClientError as error:
                # A retry after a lost answer finds the upload already completed.
                if attempts > 1 and _error_code(error) == "NoSuchUpload":
                    answer_lost = True
                    return
                raise

        self._call("CompleteMultipartUpload", key, send)
        if answer_lost and self._etag(key) != _multipart_etag(parts):
            raise ObjectStoreError(f"the upload of {key} vanished before it completed")

    def _etag(self, key: str) -> str:
        answer = self._call(
            "HeadObject",
            key,
            lambda: self._client.head_object(Bucket=self.location.bucket, Key=self._root + key),
        )
        return answer["ETag"]

    def _abort(self, full_key: str, upload_id: str) -> None:
        def send() -> None:
            try:
                self._client.abort_multipart_upload(
                    Bucket=self.location.bucket, Key=full_key, UploadId=upload_id
                )
            except ClientError as error:
                if _error_code(error) != "NoSuchUpload":  # already gone: the goal
                    raise

        self._call("AbortMultipartUpload", full_key[len(self._root) :], send)

    def _abort_quietly(self, full_key: str, upload_id: str) -> None:
        try:
            self._abort(full_key, upload_id)
        except ObjectStoreError as error:
            log.warning(
                "cannot abort the failed upload %s of %s (the sweep will): %s",
                upload_id,
                full_key,
                error,
            )

    # --- one request, retried ----------------------------------------------------------------

    def _call(self, operation: str, key: str, attempt: Callable[[], _T]) -> _T:
        """Run ``attempt`` until it succeeds, fails for good, or the attempts run out."""
        for number in range(1, self.options.max_attempts + 1):
            try:
                result = self._attempt(operation, key, attempt)
            except _Retryable as failure:
                if number == self.options.max_attempts:
                    raise ObjectStoreUnavailableError(
                        f"S3 {operation} {key}: {failure.reason} "
                        f"({self.options.max_attempts} attempts)"
                    ) from failure.cause
                time.sleep(self._backoff_s(number))
                continue
            return result
        raise AssertionError("unreachable: the last attempt returns or raises")

    def _attempt(self, operation: str, key: str, attempt: Callable[[], _T]) -> _T:
        """One attempt, reported to the observer, its failure typed."""
        try:
            result = attempt()
        except ClientError as error:
            code = _error_code(error)
            self._observe(operation, code)
            if code in _NOT_FOUND_CODES:
                raise ObjectNotFoundError(f"{key} does not exist") from None
            if code in _REFUSED_IF_ABSENT_CODES:
                raise ObjectExistsError(f"{key} already exists") from None
            if code in _RETRYABLE_CODES or _http_status(error) >= 500:
                raise _Retryable(code, error) from error
            raise ObjectStoreError(f"S3 {operation} {key}: {code}: {error}") from error
        except (
            ConnectionError,
            HTTPClientError,
            IncompleteReadError,
            urllib3.exceptions.HTTPError,
        ) as error:
            self._observe(operation, type(error).__name__)
            raise _Retryable(type(error).__name__, error) from error
        except BotoCoreError as error:  # a client-side misconfiguration: no retry helps
            self._observe(operation, type(error).__name__)
            raise ObjectStoreError(f"S3 {operation} {key}: {error}") from error
        self._observe(operation, None)
        return result

    def _observe(self, operation: str, error: str | None) -> None:
        if self.observer is not None:
            self.observer.s3_request(operation, error)

    def _backoff_s(self, failed_attempts: int) -> float:
        with self._random_lock:
            return backoff_s(
                failed_attempts,
                self.options.backoff_base_s,
                self.options.backoff_max_s,
                self._random,
            )


def backoff_s(failed_attempts: int, base_s: float, max_s: float, jitter: random.Random) -> float:
    """The wait after ``failed_attempts`` failures: full jitter, uniform in
    [0, min(max_s, base_s * 2^(n-1))], so that many writers throttled at once do not
    come back at once, and each failure widens the window."""
    return jitter.uniform(0, min(max_s, base_s * 2 ** (failed_attempts - 1)))


def _make_client(options: S3Options) -> tuple[S3Client, Credentials | None]:
    """The botocore client, and the credentials it signs with (None: none found)."""
    keys = read_credentials(options.credentials_path) if options.credentials_path else None
    session = boto3.session.Session()
    config = Config(
        connect_timeout=options.connect_timeout_s,
        read_timeout=options.read_timeout_s,
        retries={"total_max_attempts": 1},  # ours are counted and bounded in _call
        max_pool_connections=options.max_connections,
        s3={"addressing_style": "path" if options.path_style else "auto"},
        # We send our own CRC-32C; botocore adds none of its own on top.
        request_checksum_calculation="when_required",
        response_checksum_validation="when_required",
    )
    client: S3Client = session.client(
        "s3",
        region_name=options.region,
        endpoint_url=options.endpoint_url,
        config=config,
        aws_access_key_id=keys.access_key_id if keys else None,
        aws_secret_access_key=keys.secret_access_key if keys else None,
        aws_session_token=keys.session_token if keys else None,
    )
    if keys:
        return client, Credentials(keys.access_key_id, keys.secret_access_key, keys.session_token)
    # The chain's credentials, the very object the client signs with (the session keeps
    # it), refreshed when botocore refreshes them.
    return client, session.get_credentials()
