"""Users' SCRAM credentials (RFC 5802, Kafka's KIP-84 and KIP-554), kept where every
broker reads them.

A credential is what a SCRAM server needs and no more: the salt, the iteration count,
StoredKey = H(HMAC(SaltedPassword, "Client Key")) and ServerKey = HMAC(SaltedPassword,
"Server Key"). The client salts the password itself (AlterUserScramCredentials carries
SaltedPassword, never the password), and the broker keeps neither.

Every user's credentials are one JSON document, changed whole by read-modify-write
under the store's own atomicity (``CredentialDocument``): a file lock on one machine
(beside the topics of ``tierlog cluster up``'s partition-state store, or in a lone
broker's first log dir), a ``resourceVersion`` precondition on Kubernetes. A batch of
changes thus lands at once or not at all, and a broker reads the document at each
authentication, so a change is seen by every broker's next SCRAM login.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Protocol

from tierlog.api.errors import (
    DuplicateResourceError,
    ResourceNotFoundError,
    UnacceptableCredentialError,
    UnsupportedSaslMechanismError,
)
from tierlog.file_lock import exclusive_lock
from tierlog.storage.checkpoints import atomic_write
from tierlog.storage.errors import KafkaStorageError, TierlogError

__all__ = [
    "CREDENTIALS_FILE",
    "CredentialChange",
    "CredentialDocument",
    "FileDocument",
    "ScramCredential",
    "ScramCredentials",
    "ScramMechanism",
    "UserCredentials",
    "credentials_from_json",
    "credentials_to_json",
]

CREDENTIALS_FILE = "tierlog-scram-credentials.json"
_DOCUMENT_VERSION = 1


class ScramMechanism(Enum):
    """The SCRAM mechanisms, by Kafka's number for them (AlterUserScramCredentials')."""

    SCRAM_SHA_256 = 1
    SCRAM_SHA_512 = 2

    @property
    def mechanism_name(self) -> str:
        """Its SASL name, as ``sasl.enabled.mechanisms`` and SaslHandshake spell it."""
        return self.name.replace("_", "-")

    @property
    def hash_name(self) -> str:
        return "sha256" if self is ScramMechanism.SCRAM_SHA_256 else "sha512"

    @classmethod
    def named(cls, name: str) -> ScramMechanism:
        return cls[name.replace("-", "_")]

    def h(self, data: bytes) -> bytes:
        return hashlib.new(self.hash_name, data).digest()

    def hmac(self, key: bytes, data: bytes) -> bytes:
        return hmac.new(key, data, self.hash_name).digest()


# Kafka's bounds on a credential's iterations (KIP-554), for both mechanisms.
MIN_ITERATIONS = 4096
MAX_ITERATIONS = 16384


@dataclass(frozen=True)
class ScramCredential:
    salt: bytes
    iterations: int
    stored_key: bytes
    server_key: bytes

    @classmethod
    def from_salted_password(
        cls, mechanism: ScramMechanism, salt: bytes, iterations: int, salted_password: bytes
    ) -> ScramCredential:
        client_key = mechanism.hmac(salted_password, b"Client Key")
        server_key = mechanism.hmac(salted_password, b"Server Key")
        return cls(salt, iterations, mechanism.h(client_key), server_key)

    @classmethod
    def from_password(
        cls, mechanism: ScramMechanism, password: str, iterations: int, salt: bytes | None = None
    ) -> ScramCredential:
        """What a client's salting makes of ``password`` (RFC 5802's Hi, PBKDF2)."""
        salt = os.urandom(32) if salt is None else salt
        salted = hashlib.pbkdf2_hmac(mechanism.hash_name, password.encode(), salt, iterations)
        return cls.from_salted_password(mechanism, salt, iterations, salted)


# user -> mechanism -> credential
UserCredentials = Mapping[str, Mapping[ScramMechanism, ScramCredential]]


@dataclass(frozen=True)
class CredentialChange:
    """One item of an AlterUserScramCredentials: an upsertion (``salted_password`` set)
    or a deletion (None). ``mechanism`` is Kafka's number, checked here."""

    user: str
    mechanism: int
    iterations: int = 0
    salt: bytes = b""
    salted_password: bytes | None = None


class CredentialDocument(Protocol):
    """One stored document changed atomically: ``change`` gets the text read (None:
    absent) and returns the text to write; no other change lands in between."""

    def read(self) -> str | None: ...

    def update(self, change: Callable[[str | None], str]) -> None: ...


class FileDocument:
    """The document as a file beside its lock file (``file_lock``), replaced atomically:
    processes on one machine take turns, and a crash leaves the old or the new text."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def read(self) -> str | None:
        try:
            return self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        except (OSError, UnicodeDecodeError) as error:
            raise KafkaStorageError(f"cannot read {self.path}: {error}") from error

    def update(self, change: Callable[[str | None], str]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with exclusive_lock(self.path.with_name(self.path.name + ".lock")):
            text = self.read()
            after = change(text)
            if after != text:
                atomic_write(self.path, after)


class ScramCredentials:
    """Every user's SCRAM credentials over one stored document. Its methods block
    (files, HTTP): asyncio callers run them in a thread."""

    def __init__(self, document: CredentialDocument) -> None:
        self.document = document

    def read(self) -> UserCredentials:
        text = self.document.read()
        return {} if text is None else credentials_from_json(text)

    def credential(self, user: str, mechanism: ScramMechanism) -> ScramCredential | None:
        return self.read().get(user, {}).get(mechanism)

    def alter(self, change: Callable[[UserCredentials], UserCredentials]) -> None:
        """Replace every user's credentials with what ``change`` makes of them, at once
        (``change`` may be called again on a fresher read, and may raise to write nothing)."""

        def rewrite(text: str | None) -> str:
            current = {} if text is None else credentials_from_json(text)
            return credentials_to_json(change(current))

        self.document.update(rewrite)

    def apply(self, changes: list[CredentialChange]) -> dict[str, TierlogError | None]:
        """Kafka's AlterUserScramCredentials: each user's changes land together, or none
        of them when one is refused; the outcome per user, in the order first named."""
        if not changes:
            return {}  # nothing to write
        outcomes: dict[str, TierlogError | None] = {}

        def change(current: UserCredentials) -> UserCredentials:
            outcomes.clear()
            users = {user: dict(mechanisms) for user, mechanisms in current.items()}
            by_user: dict[str, list[CredentialChange]] = {}
            for item in changes:
                by_user.setdefault(item.user, []).append(item)
            for user, items in by_user.items():
                try:
                    users[user] = _changed(users.get(user, {}), items)
                    outcomes[user] = None
                except TierlogError as error:
                    outcomes[user] = error
            return users

        self.alter(change)
        return outcomes


def _changed(
    mechanisms: dict[ScramMechanism, ScramCredential], items: list[CredentialChange]
) -> dict[ScramMechanism, ScramCredential]:
    """One user's credentials after ``items`` (all of them, or an error)."""
    changed = dict(mechanisms)
    seen: set[int] = set()
    for item in items:
        if not item.user:
            raise UnacceptableCredentialError("the user name must not be empty")
        if item.mechanism in seen:
            raise DuplicateResourceError(
                "a user's credential cannot be altered twice in one request"
            )
        seen.add(item.mechanism)
        try:
            mechanism = ScramMechanism(item.mechanism)
        except ValueError:
            raise UnsupportedSaslMechanismError(
                f"unknown SCRAM mechanism {item.mechanism}"
            ) from None
        if item.salted_password is None:
            if changed.pop(mechanism, None) is None:
                raise ResourceNotFoundError(
                    f"{item.user} has no {mechanism.mechanism_name} credential to delete"
                )
            continue
        if not MIN_ITERATIONS <= item.iterations <= MAX_ITERATIONS:
            raise UnacceptableCredentialError(
                f"{item.iterations} iterations: {mechanism.mechanism_name} takes "
                f"{MIN_ITERATIONS} to {MAX_ITERATIONS}"
            )
        if not item.salt or not item.salted_password:
            raise UnacceptableCredentialError("the salt and salted password must not be empty")
        changed[mechanism] = ScramCredential.from_salted_password(
            mechanism, item.salt, item.iterations, item.salted_password
        )
    return changed


def credentials_to_json(users: UserCredentials) -> str:
    return json.dumps(
        {
            "version": _DOCUMENT_VERSION,
            "users": {
                user: {
                    mechanism.mechanism_name: {
                        "salt": _b64(credential.salt),
                        "iterations": credential.iterations,
                        "stored_key": _b64(credential.stored_key),
                        "server_key": _b64(credential.server_key),
                    }
                    for mechanism, credential in sorted(
                        mechanisms.items(), key=lambda item: item[0].value
                    )
                }
                for user, mechanisms in sorted(users.items())
                if mechanisms
            },
        },
        indent=1,
    )


def credentials_from_json(text: str) -> dict[str, dict[ScramMechanism, ScramCredential]]:
    try:
        document = json.loads(text)
        if document.get("version") != _DOCUMENT_VERSION:
            raise ValueError(f"unknown version {document.get('version')!r}")
        return {
            str(user): {
                ScramMechanism.named(name): ScramCredential(
                    base64.b64decode(fields["salt"], validate=True),
                    int(fields["iterations"]),
                    base64.b64decode(fields["stored_key"], validate=True),
                    base64.b64decode(fields["server_key"], validate=True),
                )
                for name, fields in mechanisms.items()
            }
            for user, mechanisms in document["users"].items()
        }
    except (ValueError, KeyError, TypeError, AttributeError) as error:
        raise KafkaStorageError(f"not a SCRAM credentials document ({error!r})") from None


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")
