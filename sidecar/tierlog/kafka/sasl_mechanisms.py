"""SASL/PLAIN (RFC 4616) and SASL/OAUTHBEARER (RFC 7628) over tierlog's bearer token.

tierlog has one credential, the broker's bearer token (``tierlog.auth.token.file`` or
``$TIERLOG_AUTH_TOKEN``, which every gRPC call carries as ``authorization: Bearer``).
A Kafka client proves it holds the same token:

- PLAIN: ``[authzid] NUL username NUL password``; the password is the token. The
  username is any non-empty name, kept as the principal in the broker's log; an
  authorization id other than the username is refused, as Kafka's PLAIN server does.
- OAUTHBEARER: the client's first message ``n,[a=authzid],`` then ``^Aauth=Bearer
  TOKEN^A...^A^A``; the token is the bearer token itself (opaque, not a JWT here).
  Extensions are ignored.

Both take one message from the client and answer it with empty bytes, or fail. The
comparison is constant-time.
"""

from __future__ import annotations

import hmac
from collections.abc import Callable

__all__ = ["TOKEN_MECHANISMS", "SaslFailed", "check_oauthbearer", "check_plain"]


class SaslFailed(Exception):
    """The client's message does not authenticate it (the message says why, safely)."""


def check_plain(message: bytes, token: str) -> str:
    """The principal a SASL/PLAIN message authenticates."""
    parts = message.split(b"\0")
    if len(parts) != 3:
        raise SaslFailed("SASL/PLAIN: expected [authzid] NUL username NUL password")
    authzid, username, password = (part.decode(errors="replace") for part in parts)
    if not username or not password:
        raise SaslFailed("SASL/PLAIN: a username and a password are required")
    if authzid and authzid != username:
        raise SaslFailed("SASL/PLAIN: the authorization id must be the username")
    _check(password, token, "SASL/PLAIN: the credentials are not valid")
    return username


def check_oauthbearer(message: bytes, token: str) -> str:
    """The principal a SASL/OAUTHBEARER initial response authenticates (its
    authorization id, or "oauthbearer" when it names none)."""
    text = message.decode(errors="replace")
    header, sep, pairs = text.partition("\x01")
    flags, _comma, rest = header.partition(",")
    authzid, comma, tail = rest.partition(",")
    if not sep or flags != "n" or not comma or tail or not pairs.endswith("\x01\x01"):
        raise SaslFailed("SASL/OAUTHBEARER: not a client initial response (RFC 7628)")
    values = dict(pair.partition("=")[::2] for pair in pairs[:-2].split("\x01") if pair)
    scheme, _space, offered = values.get("auth", "").partition(" ")
    if scheme.lower() != "bearer" or not offered:
        raise SaslFailed("SASL/OAUTHBEARER: no auth=Bearer token")
    _check(offered, token, "SASL/OAUTHBEARER: the token is not valid")
    return authzid.removeprefix("a=") or "oauthbearer"


def _check(offered: str, token: str, why: str) -> None:
    if not hmac.compare_digest(offered.encode(), token.encode()):
        raise SaslFailed(why)


# The mechanisms that check the broker's bearer token, by their SASL names.
TOKEN_MECHANISMS: dict[str, Callable[[bytes, str], str]] = {
    "PLAIN": check_plain,
    "OAUTHBEARER": check_oauthbearer,
}
