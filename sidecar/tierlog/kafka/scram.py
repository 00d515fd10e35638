"""The server's side of a SCRAM exchange (RFC 5802, RFC 7677), as pure functions.

Four messages, two from each side::

    client-first  n,[a=authzid],n=user,r=cnonce
    server-first  r=cnonce+snonce,s=salt,i=iterations
    client-final  c=biws,r=cnonce+snonce,p=proof
    server-final  v=signature

AuthMessage is client-first-bare "," server-first "," client-final-without-proof. The
client proves it knows ClientKey (proof = ClientKey XOR HMAC(StoredKey, AuthMessage),
and H(ClientKey) must be StoredKey); the server proves it knows ServerKey (signature =
HMAC(ServerKey, AuthMessage)). As Kafka's SCRAM server: no channel binding (a client
that asks for it is refused), an authorization id other than the user is refused, and
extensions (Kafka's delegation-token ``tokenauth``) are not served. Every failure is a
``SaslFailed`` whose message names no secret; an unknown user and a wrong password read
the same.
"""

from __future__ import annotations

import base64
import binascii
import hmac
from dataclasses import dataclass

from tierlog.broker.scram_credentials import ScramCredential, ScramMechanism
from tierlog.kafka.sasl_mechanisms import SaslFailed

__all__ = [
    "INVALID_CREDENTIALS",
    "ClientFinal",
    "ClientFirst",
    "client_final",
    "client_first",
    "server_final",
    "server_first",
]

INVALID_CREDENTIALS = "SCRAM: invalid user credentials"


@dataclass(frozen=True)
class ClientFirst:
    gs2_header: str  # "n,," or "n,a=authzid,": echoed, base64, in the client-final
    user: str
    nonce: str
    bare: str  # client-first-message-bare, part of the AuthMessage


@dataclass(frozen=True)
class ClientFinal:
    channel_binding: str
    nonce: str
    proof: bytes
    without_proof: str  # part of the AuthMessage


def client_first(message: bytes) -> ClientFirst:
    """The client's first message, read."""
    text = _text(message)
    flag, authzid, bare = _split(text, 3, "client-first")
    if flag != "n":
        raise SaslFailed("SCRAM: channel binding is not supported (gs2 flag must be 'n')")
    attributes = _attributes(bare, "client-first")
    if "m" in attributes or set(attributes) - {"n", "r"}:
        raise SaslFailed("SCRAM: extensions are not supported")
    user = _saslname(attributes.get("n", ""))
    nonce = attributes.get("r", "")
    if not user or not nonce:
        raise SaslFailed("SCRAM: client-first needs a user name (n=) and a nonce (r=)")
    if authzid and _saslname(authzid.removeprefix("a=")) != user:
        raise SaslFailed("SCRAM: the authorization id must be the user name")
    return ClientFirst(f"{flag},{authzid},", user, nonce, bare)


def server_first(first: ClientFirst, credential: ScramCredential, server_nonce: str) -> str:
    """The server's first message: the combined nonce, the user's salt and iterations."""
    salt = base64.b64encode(credential.salt).decode("ascii")
    return f"r={first.nonce}{server_nonce},s={salt},i={credential.iterations}"


def client_final(message: bytes) -> ClientFinal:
    """The client's final message, read."""
    text = _text(message)
    without_proof, comma, proof = text.rpartition(",")
    if not comma or not proof.startswith("p="):
        raise SaslFailed("SCRAM: client-final must end with the proof (p=)")
    attributes = _attributes(without_proof, "client-final")
    try:
        proof_bytes = base64.b64decode(proof[2:], validate=True)
    except binascii.Error:
        raise SaslFailed("SCRAM: the proof is not base64") from None
    return ClientFinal(attributes.get("c", ""), attributes.get("r", ""), proof_bytes, without_proof)


def server_final(
    mechanism: ScramMechanism,
    credential: ScramCredential,
    first: ClientFirst,
    server_first_message: str,
    final: ClientFinal,
) -> str:
    """The server's final message, once the client's proof checks out."""
    expected_binding = base64.b64encode(first.gs2_header.encode()).decode("ascii")
    if final.channel_binding != expected_binding:
        raise SaslFailed("SCRAM: the channel binding does not match the gs2 header")
    if not server_first_message.startswith(f"r={final.nonce},"):
        raise SaslFailed("SCRAM: the nonce is not the one the server sent")
    auth_message = f"{first.bare},{server_first_message},{final.without_proof}".encode()
    client_signature = mechanism.hmac(credential.stored_key, auth_message)
    if len(final.proof) != len(client_signature):
        raise SaslFailed(INVALID_CREDENTIALS)
    client_key = bytes(a ^ b for a, b in zip(final.proof, client_signature, strict=True))
    if not hmac.compare_digest(mechanism.h(client_key), credential.stored_key):
        raise SaslFailed(INVALID_CREDENTIALS)
    signature = mechanism.hmac(credential.server_key, auth_message)
    return "v=" + base64.b64encode(signature).decode("ascii")


def _text(message: bytes) -> str:
    try:
        return message.decode("utf-8")
    except UnicodeDecodeError:
        raise SaslFailed("SCRAM: the message is not UTF-8") from None


def _split(text: str, count: int, what: str) -> list[str]:
    parts = text.split(",", count - 1)
    if len(parts) != count:
        raise SaslFailed(f"SCRAM: a malformed {what} message")
    return parts


def _attributes(text: str, what: str) -> dict[str, str]:
    """``k=value`` pairs, each key one letter (RFC 5802's attribute-value pairs)."""
    attributes: dict[str, str] = {}
    for pair in text.split(","):
        key, equals, value = pair.partition("=")
        if len(key) != 1 or not equals or key in attributes:
            raise SaslFailed(f"SCRAM: a malformed {what} message")
        attributes[key] = value
    return attributes


def _saslname(name: str) -> str:
    """RFC 5802's saslname: "," is sent as "=2C" and "=" as "=3D"; any other "=" is bad."""
    decoded = name.replace("=2C", ",").replace("=3D", "=")
    if "=" in name.replace("=2C", "").replace("=3D", ""):
        raise SaslFailed("SCRAM: a malformed user name")
    return decoded
