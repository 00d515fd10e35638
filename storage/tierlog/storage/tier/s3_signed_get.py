"""GETs of S3 objects, and of a bucket's listing, without botocore's per-request machinery.

Profiles of tiered reads (docs/BENCHMARKS.md, ``tier_reads_bench``) found botocore's
own work per request (validating parameters, resolving the endpoint's rules, its event
hooks, building the request and parsing the answer) costing more CPU than moving a 1 MiB
body, and a tier read is mostly such GETs. A cold reader's first request lists the
partition's manifest heads: through botocore, 4.5 ms of a 64 MiB read's 115 (3.2 of them
CPU), more than the head's GET after it. A GET of an object's bytes needs none of it:
an object's URL is the bucket's URL (resolved once, by botocore, with the store's
addressing style and region) and its quoted key; the request is signed with botocore's
own SigV4 signer and the credentials its chain found (refreshed as botocore refreshes
them), and sent over urllib3's pool of kept-alive connections (what botocore itself
sends over), sized to the requests the store's readers keep in flight. A listing
(ListObjectsV2) is a GET of the bucket's URL with a query, signed the same way, its XML
answer read by ElementTree, keys URL-encoded by the store (``encoding-type=url``, as
botocore asks) so that any key survives XML.

Failures stay botocore's: an answer other than 200/206 becomes a ``ClientError`` with
the S3 error code of its XML body (its status when it has none), and a failed
connection or a body cut short is urllib3's exception, which ``S3Store`` types and
retries as it does botocore's.
"""

from __future__ import annotations

import http.client
import os
import re
import xml.etree.ElementTree as ElementTree
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, unquote_plus, urlsplit, urlunsplit

import urllib3
from botocore.auth import S3SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from botocore.exceptions import ClientError, NoCredentialsError
from botocore.httpsession import get_cert_path
from botocore.utils import get_environ_proxies

from tierlog.storage.tier.chunk_buffers import Filled, fill, nothing_filled
from tierlog.storage.tier.store import ObjectInfo, ObjectStoreError

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

__all__ = ["PAGE_KEYS", "ListedPage", "SignedGet"]

_ERROR_CODE = re.compile(rb"<Code>([^<]+)</Code>")
_PLACEHOLDER_KEY = "k"
PAGE_KEYS = 1000  # the most keys S3 answers a listing's page with


@dataclass(frozen=True)
class ListedPage:
    """One page of a listing: its objects (full keys, in key order), and the token that
    asks for the next page ("" after the last)."""

    objects: list[ObjectInfo]
    next_token: str


class SignedGet:
    """Signed GETs of one bucket's objects over a pool of kept-alive connections."""

    def __init__(
        self,
        client: S3Client,
        bucket: str,
        credentials: Credentials | None,
        *,
        max_connections: int,
        connect_timeout_s: float,
        read_timeout_s: float,
    ):
        """``client``: the store's botocore client, whose endpoint, addressing style and
        region the GETs use; ``credentials`` as its chain found them."""
        self._bucket_url = _bucket_url(client, bucket)
        self._listing_url = _listing_url(self._bucket_url)
        self._region = client.meta.region_name
        self._credentials = credentials
        timeout = urllib3.Timeout(connect=connect_timeout_s, read=read_timeout_s)
        # As botocore sends: through the environment's proxy for the URL (HTTPS_PROXY,
        # NO_PROXY...), verified against AWS_CA_BUNDLE or botocore's bundle. Retries are
        # S3Store's only, counted and bounded.
        ca_certs = os.environ.get("AWS_CA_BUNDLE") or get_cert_path(True)
        proxy = get_environ_proxies(self._bucket_url).get(urlsplit(self._bucket_url).scheme)
        self._pool: urllib3.PoolManager = (
            urllib3.ProxyManager(
                proxy, maxsize=max_connections, retries=False, timeout=timeout, ca_certs=ca_certs
            )
            if proxy
            else urllib3.PoolManager(
                maxsize=max_connections, retries=False, timeout=timeout, ca_certs=ca_certs
            )
        )

    def get(self, full_key: str, byte_range: str) -> bytes:
        """The object's bytes (``byte_range`` as the Range header, "" for all of it)."""
        return _read_all(self._send(self._object_url(full_key), byte_range))

    def list_page(self, full_prefix: str, token: str, page_keys: int = PAGE_KEYS) -> ListedPage:
        """The page of the objects whose keys start with ``full_prefix`` that ``token``
        names ("" for the first), at most ``page_keys`` of them."""
        query = {"encoding-type": "url", "list-type": "2", "max-keys": str(page_keys)}
        query["prefix"] = full_prefix
        if token:
            query["continuation-token"] = token
        # Sorted and quoted as SigV4's canonical query string has them, so the URL sent
        # is the one signed.
        encoded = "&".join(
            f"{name}={quote(value, safe='-_.~')}" for name, value in sorted(query.items())
        )
        return _listed_page(_read_all(self._send(f"{self._listing_url}?{encoded}", "")))

    def get_into(
        self,
        full_key: str,
        byte_range: str,
        buffers: Sequence[memoryview],
        on_filled: Filled = nothing_filled,
    ) -> int:
        """Read the answer's body into ``buffers`` in order, straight off the connection
        (no buffer of its own in between), ``on_filled`` told of each as it fills; the
        bytes that landed, fewer than the buffers hold only when the body is shorter. A
        body cut short of its Content-Length is urllib3's ``IncompleteRead``, as its own
        reads raise it."""
        response = self._send(self._object_url(full_key), byte_range)
        try:
            landed, finished = _read_into(response, buffers, on_filled)
        except BaseException:
            response.close()
            raise
        if finished:
            response.release_conn()
        else:  # bytes left unread: the connection cannot serve another request
            response.close()
        return landed

    def _object_url(self, full_key: str) -> str:
        return self._bucket_url + quote(full_key, safe="/~")

    def _send(self, url: str, byte_range: str) -> urllib3.BaseHTTPResponse:
        """A signed GET of ``url`` sent, its status and headers read: a 200/206 answer
        whose body is still to be read, else the error it is."""
        if self._credentials is None:  # as botocore's client would refuse to send it
            raise NoCredentialsError()
        request = AWSRequest(
            method="GET", url=url, headers={"Range": byte_range} if byte_range else {}
        )
        S3SigV4Auth(self._credentials.get_frozen_credentials(), "s3", self._region).add_auth(
            request
        )
        response = self._pool.request(
            "GET", url, headers=dict(request.headers.items()), preload_content=False
        )
        if response.status in (200, 206):
            return response
        try:
            raise _client_error(response.status, response.read())
        finally:
            response.close()

    def close(self) -> None:
        self._pool.clear()


def _bucket_url(client: S3Client, bucket: str) -> str:
    """The URL the client sends a bucket's object requests to, up to the key (botocore
    decides: path or virtual-host style, the region's endpoint), from a URL it presigns
    for a placeholder key without sending anything."""
    presigned = client.generate_presigned_url(
        "get_object", Params={"Bucket": bucket, "Key": _PLACEHOLDER_KEY}, ExpiresIn=60
    )
    scheme, host, path, _query, _fragment = urlsplit(presigned)
    return urlunsplit((scheme, host, path[: -len(_PLACEHOLDER_KEY)], "", ""))


def _listing_url(bucket_url: str) -> str:
    """The URL a bucket's listing is asked of: the bucket's own, as botocore sends it
    (``/bucket`` in path style, ``/`` on a virtual host)."""
    scheme, host, path, _query, _fragment = urlsplit(bucket_url)
    return urlunsplit((scheme, host, path.rstrip("/") or "/", "", ""))


def _read_all(response: urllib3.BaseHTTPResponse) -> bytes:
    try:
        data = response.read()
    except BaseException:
        response.close()  # its connection is in an unknown state: not back to the pool
        raise
    response.release_conn()
    return data


def _listed_page(body: bytes) -> ListedPage:
    """A ListObjectsV2 answer's objects and next token; an answer that does not parse
    as one is the store's error, as botocore's parser would have it."""
    try:
        root = ElementTree.fromstring(body)
        objects = [
            ObjectInfo(
                unquote_plus(_text(item, "Key")),
                int(_text(item, "Size")),
                datetime.fromisoformat(_text(item, "LastModified")).timestamp(),
            )
            for item in root.iterfind("{*}Contents")
        ]
        truncated = root.findtext("{*}IsTruncated") == "true"
    except (ElementTree.ParseError, ValueError) as error:
        raise ObjectStoreError(
            f"S3 ListObjectsV2: an answer that is not a listing: {error}"
        ) from None
    return ListedPage(
        objects, (root.findtext("{*}NextContinuationToken") or "") if truncated else ""
    )


def _text(item: ElementTree.Element, tag: str) -> str:
    found = item.findtext("{*}" + tag)
    if found is None:
        raise ValueError(f"an object without its {tag}")
    return found


def _client_error(status: int, body: bytes) -> ClientError:
    """The ``ClientError`` botocore raises for an S3 error answer."""
    found = _ERROR_CODE.search(body)
    code = found.group(1).decode(errors="replace") if found else str(status)
    answer: Any = {  # the shape botocore parses an error answer into
        "Error": {"Code": code, "Message": body[:512].decode(errors="replace")},
        "ResponseMetadata": {"HTTPStatusCode": status},
    }
    return ClientError(answer, "GetObject")


def _read_into(
    response: urllib3.BaseHTTPResponse, buffers: Sequence[memoryview], on_filled: Filled
) -> tuple[int, bool]:
    """Fill ``buffers`` from the body of ``response`` through ``http.client``'s own
    ``readinto`` (urllib3's reads into a buffer of its own, then copies): (bytes landed,
    whether the body was read to its end). A connection failing mid-body raises as
    urllib3's reads do: ``ReadTimeoutError``, ``ProtocolError``, ``IncompleteRead``."""
    body: http.client.HTTPResponse | None = getattr(response, "_fp", None)
    if body is None:
        raise urllib3.exceptions.ProtocolError("the answer has no body to read")
    try:
        landed = fill(body.readinto, buffers, on_filled)
    except TimeoutError as error:
        # No pool object at hand: the message names what failed.
        raise urllib3.exceptions.ReadTimeoutError(
            None,  # type: ignore[arg-type]
            "",
            f"read timed out: {error}",
        ) from error
    except (OSError, http.client.HTTPException) as error:
        raise urllib3.exceptions.ProtocolError(f"connection broken: {error!r}", error) from error
    # http.client ends a body cut short as if it were complete: its count says otherwise.
    if landed < sum(len(buffer) for buffer in buffers) and body.length:
        raise urllib3.exceptions.IncompleteRead(landed, body.length)
    return landed, body.isclosed()
