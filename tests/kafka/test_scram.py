"""The SCRAM server's pure exchange (``tierlog.kafka.scram``): RFC 7677's own
SCRAM-SHA-256 example, kafka-python's SCRAM client for both mechanisms, and the
messages a server must refuse."""

from __future__ import annotations

import base64

import pytest
from kafka.net.sasl.scram import ScramClient

from tierlog.broker.scram_credentials import ScramCredential, ScramMechanism
from tierlog.kafka.sasl_mechanisms import SaslFailed
from tierlog.kafka.scram import (
    INVALID_CREDENTIALS,
    client_final,
    client_first,
    server_final,
    server_first,
)

SHA_256 = ScramMechanism.SCRAM_SHA_256


def test_rfc_7677_example_is_answered_with_its_server_signature() -> None:
    credential = ScramCredential.from_password(
        SHA_256, "pencil", 4096, base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
    )
    first = client_first(b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO")
    sent = server_first(first, credential, "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0")
    assert sent == (
        "r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
    )
    final = client_final(
        b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
        b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
    )
    answer = server_final(SHA_256, credential, first, sent, final)
    assert answer == "v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="


def _exchange(mechanism: ScramMechanism, stored_password: str, client_password: str) -> str:
    """kafka-python's client against our server; the server-final it accepted."""
    credential = ScramCredential.from_password(mechanism, stored_password, 4096)
    client = ScramClient("alice", client_password, mechanism.mechanism_name)
    first = client_first(client.first_message())
    sent = server_first(first, credential, "server-nonce")
    client.process_server_first_message(sent.encode())
    answer = server_final(mechanism, credential, first, sent, client_final(client.final_message()))
    client.process_server_final_message(answer.encode())  # raises on a wrong signature
    return first.user


@pytest.mark.parametrize("mechanism", list(ScramMechanism))
def test_kafka_pythons_client_authenticates_and_accepts_the_servers_signature(
    mechanism: ScramMechanism,
) -> None:
    assert _exchange(mechanism, "alice-secret", "alice-secret") == "alice"


@pytest.mark.parametrize("mechanism", list(ScramMechanism))
def test_a_wrong_password_fails_the_proof(mechanism: ScramMechanism) -> None:
    with pytest.raises(SaslFailed, match=INVALID_CREDENTIALS):
        _exchange(mechanism, "alice-secret", "not-the-secret")


@pytest.mark.parametrize(
    "message",
    [
        b"p=tls-unique,,n=user,r=abc",  # channel binding asked for
        b"y,,n=user,r=abc",  # a client that could bind: not for SCRAM-SHA-256-PLUS here
        b"n,,m=ext,n=user,r=abc",  # a mandatory extension
        b"n,,n=user,r=abc,tokenauth=true",  # Kafka's delegation tokens: not served
        b"n,,n=,r=abc",
        b"n,,n=user",
        b"n,a=other,n=user,r=abc",  # an authorization id other than the user
        b"n,,n=us=er,r=abc",  # a bare "=" in a saslname
        b"garbage",
        b"\xff\xfe",
    ],
)
def test_bad_client_first_messages_are_refused(message: bytes) -> None:
    with pytest.raises(SaslFailed):
        client_first(message)


def test_a_saslname_is_decoded_and_an_equal_authzid_accepted() -> None:
    first = client_first(b"n,a=a=2Cb=3Dc,n=a=2Cb=3Dc,r=abc")
    assert first.user == "a,b=c"
    assert first.gs2_header == "n,a=a=2Cb=3Dc,"


@pytest.mark.parametrize(
    "message",
    [
        b"c=biws,r=clientserver",  # no proof
        b"c=biws,r=clientserver,p=not base64!",
        b"c=biws,r=someone-elses,p=AAAA",  # not the nonce the server sent
        b"c=eSws,r=clientserver,p=AAAA",  # a channel binding other than the header's
        b"c=biws,r=clientserver,p=AAAA",  # a proof of the wrong length
    ],
)
def test_bad_client_final_messages_are_refused(message: bytes) -> None:
    credential = ScramCredential.from_password(SHA_256, "pencil", 4096)
    first = client_first(b"n,,n=user,r=client")
    sent = server_first(first, credential, "server")
    with pytest.raises(SaslFailed):
        server_final(SHA_256, credential, first, sent, client_final(message))
