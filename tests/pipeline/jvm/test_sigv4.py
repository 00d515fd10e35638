"""SigV4 (pipeline/jvm/.../tierlog/spark/io/SigV4.java) against AWS's published example.

The vector is the "GET Object" example of AWS's Signature Version 4 documentation for
S3 (a single-chunk payload): the documented example keys, date and range, and the
canonical request, its hash and the signature the documentation prints.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.pipeline.jvm.conftest import Jvm

ACCESS_KEY_ID = "AKIAIOSFODNN7EXAMPLE"
SECRET_ACCESS_KEY = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
AMZ_DATE = "20130524T000000Z"
EMPTY_SHA256 = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
CANONICAL_REQUEST = (
    "GET\n"
    "/test.txt\n"
    "\n"
    "host:examplebucket.s3.amazonaws.com\n"
    "range:bytes=0-9\n"
    f"x-amz-content-sha256:{EMPTY_SHA256}\n"
    f"x-amz-date:{AMZ_DATE}\n"
    "\n"
    "host;range;x-amz-content-sha256;x-amz-date\n"
    f"{EMPTY_SHA256}"
)
CANONICAL_REQUEST_SHA256 = "7344ae5b7ee6c3e7e6b0fe0640412a37625d1fbfff95c48bbb2dc43964946972"
SIGNATURE = "f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41"


def example_headers(jvm: Jvm) -> Any:
    headers = jvm.gateway.jvm.java.util.TreeMap()
    headers.put("x-amz-date", AMZ_DATE)  # out of order on purpose: the map sorts
    headers.put("host", "examplebucket.s3.amazonaws.com")
    headers.put("x-amz-content-sha256", EMPTY_SHA256)
    headers.put("range", "bytes=0-9")
    return headers


def test_the_empty_payload_hash_is_sha256_of_nothing(jvm: Jvm) -> None:
    assert jvm.io.SigV4.EMPTY_PAYLOAD_SHA256 == EMPTY_SHA256
    assert jvm.io.SigV4.sha256Hex("") == EMPTY_SHA256


def test_the_canonical_request_of_the_get_object_example(jvm: Jvm) -> None:
    sigv4 = jvm.io.SigV4
    canonical = sigv4.canonicalRequest("GET", "/test.txt", "", example_headers(jvm), EMPTY_SHA256)
    assert canonical == CANONICAL_REQUEST
    assert sigv4.sha256Hex(canonical) == CANONICAL_REQUEST_SHA256


def test_the_string_to_sign_of_the_get_object_example(jvm: Jvm) -> None:
    sigv4 = jvm.io.SigV4
    scope = sigv4.scope(AMZ_DATE, "us-east-1", "s3")
    assert scope == "20130524/us-east-1/s3/aws4_request"
    assert sigv4.stringToSign(AMZ_DATE, scope, CANONICAL_REQUEST_SHA256) == (
        f"AWS4-HMAC-SHA256\n{AMZ_DATE}\n20130524/us-east-1/s3/aws4_request\n"
        f"{CANONICAL_REQUEST_SHA256}"
    )


def test_the_authorization_header_of_the_get_object_example(jvm: Jvm) -> None:
    authorization = jvm.io.SigV4.authorization(
        "GET", "/test.txt", "", example_headers(jvm), EMPTY_SHA256,
        ACCESS_KEY_ID, SECRET_ACCESS_KEY, "us-east-1", "s3", AMZ_DATE,
    )  # fmt: skip
    assert authorization == (
        "AWS4-HMAC-SHA256 "
        f"Credential={ACCESS_KEY_ID}/20130524/us-east-1/s3/aws4_request,"
        "SignedHeaders=host;range;x-amz-content-sha256;x-amz-date,"
        f"Signature={SIGNATURE}"
    )


def test_header_values_are_trimmed_and_inner_spaces_collapsed(jvm: Jvm) -> None:
    headers = jvm.gateway.jvm.java.util.TreeMap()
    headers.put("host", "  h  ")
    headers.put("x-amz-meta-note", "a   b  c ")
    canonical = jvm.io.SigV4.canonicalRequest("GET", "/k", "", headers, EMPTY_SHA256)
    assert "\nhost:h\nx-amz-meta-note:a b c\n" in canonical


@pytest.mark.parametrize(
    ("key", "encoded"),
    [
        ("test.txt", "test.txt"),
        ("a/b/c-d_e.f~g", "a/b/c-d_e.f~g"),  # unreserved characters and '/' stay
        ("a b=c+d", "a%20b%3Dc%2Bd"),  # a space is %20, never '+'
        ("x?y#z%&", "x%3Fy%23z%25%26"),
        ("ünï/☃", "%C3%BCn%C3%AF/%E2%98%83"),  # UTF-8 bytes, upper-case hex
        ("a//b/./c", "a//b/./c"),  # S3 keys are not normalised
    ],
)
def test_keys_are_uri_encoded_once_with_slashes_kept(jvm: Jvm, key: str, encoded: str) -> None:
    assert jvm.io.SigV4.encodeKey(key) == encoded
