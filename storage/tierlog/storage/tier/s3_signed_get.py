"""GETs of S3 objects without botocore's per-request machinery.

Profiles of tiered reads (docs/BENCHMARKS.md, ``tier_reads_bench``) found botocore's
own work per request (validating parameters, resolving the endpoint's rules, its event
hooks, building the request and parsing the answer) costing more CPU than moving a 1 MiB
body, and a tier read is mostly such GETs. A GET of an object's bytes needs none of it:
an object's URL is the bucket's URL (resolved once, by botocore, with the store's
addressing style and region) and its quoted key; the request is signed with botocore's
own SigV4 signer and the credentials its chain found (refreshed as botocore refreshes
them), and sent over urllib3's pool of kept-alive connections (what botocore itself
sends over), sized to the requests the store's readers keep in flight.

Failures stay botocore's: an answer other than 200/206 becomes a ``ClientError`` with
the S3 error code of its XML body (its status when it has none), and a failed
connection or a body cut short is urllib3's exception, which ``S3Store`` types and
retries as it does botocore's.
"""

from __future__ import annotations

import os
import re
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, urlsplit, urlunsplit

import urllib3
from botocore.auth import S3SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from botocore.exceptions import ClientError, NoCredentialsError
from botocore.httpsession import get_cert_path
from botocore.utils import get_environ_proxies

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

__all__ = ["SignedGet"]

_ERROR_CODE = re.compile(rb"<Code>([^<]+)</Code>")
_PLACEHOLDER_KEY = "k"


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

    def get(self, full_key: str, byte_range: str, piece_bytes: int | None) -> list[bytes]:
        """The object's bytes (``byte_range`` as the Range header, "" for all of it), read
        off the answer's stream in buffers of ``piece_bytes`` (None: one buffer)."""
        if self._credentials is None:  # as botocore's client would refuse to send it
            raise NoCredentialsError()
        url = self._bucket_url + quote(full_key, safe="/~")
        request = AWSRequest(
            method="GET", url=url, headers={"Range": byte_range} if byte_range else {}
        )
        S3SigV4Auth(self._credentials.get_frozen_credentials(), "s3", self._region).add_auth(
            request
        )
        response = self._pool.request(
            "GET", url, headers=dict(request.headers.items()), preload_content=False
        )
        try:
            if response.status not in (200, 206):
                raise _client_error(response.status, response.read())
            if piece_bytes is None:
                pieces = [response.read()]
            else:
                pieces = []
                while piece := response.read(piece_bytes):
                    pieces.append(piece)
        except BaseException:
            response.close()  # its connection is in an unknown state: not back to the pool
            raise
        response.release_conn()
        return pieces

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


def _client_error(status: int, body: bytes) -> ClientError:
    """The ``ClientError`` botocore raises for an S3 error answer."""
    found = _ERROR_CODE.search(body)
    code = found.group(1).decode(errors="replace") if found else str(status)
    answer: Any = {  # the shape botocore parses an error answer into
        "Error": {"Code": code, "Message": body[:512].decode(errors="replace")},
        "ResponseMetadata": {"HTTPStatusCode": status},
    }
    return ClientError(answer, "GetObject")
