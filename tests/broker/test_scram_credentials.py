"""Users' SCRAM credentials over a real store document (``tierlog.broker.scram_credentials``):
Kafka's per-user rules for AlterUserScramCredentials, each user's changes all or none,
and one document that every reader of the store sees."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from tierlog.broker.scram_credentials import (
    CredentialChange,
    ScramCredential,
    ScramCredentials,
    ScramMechanism,
)
from tierlog.partition_state.local_store import LocalStateStore

SHA_256, SHA_512 = ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512


def _upsert(user: str, mechanism: int = 1, iterations: int = 8192) -> CredentialChange:
    salted = hashlib.pbkdf2_hmac("sha256", f"{user}-secret".encode(), b"salt", iterations)
    return CredentialChange(user, mechanism, iterations, b"salt", salted)


@pytest.fixture
def store_dir(tmp_path: Path) -> Path:
    return tmp_path / "state"


def _credentials(store_dir: Path) -> ScramCredentials:
    return ScramCredentials(LocalStateStore(store_dir).scram_credentials())


def test_a_credential_is_derived_from_the_salted_password_and_seen_by_every_reader(
    store_dir: Path,
) -> None:
    outcomes = _credentials(store_dir).apply([_upsert("alice"), _upsert("alice", 2)])
    assert outcomes == {"alice": None}
    other_broker = _credentials(store_dir)  # another process's store over the same directory
    stored = other_broker.credential("alice", SHA_256)
    assert stored == ScramCredential.from_password(SHA_256, "alice-secret", 8192, b"salt")
    assert other_broker.credential("alice", SHA_512) is not None
    assert other_broker.credential("bob", SHA_256) is None


@pytest.mark.parametrize(
    ("changes", "reason"),
    [
        ([_upsert("bob", iterations=4095)], "UNACCEPTABLE_CREDENTIAL"),
        ([_upsert("bob", iterations=16385)], "UNACCEPTABLE_CREDENTIAL"),
        ([CredentialChange("bob", 1, 8192, b"", b"x")], "UNACCEPTABLE_CREDENTIAL"),
        ([_upsert("bob", mechanism=3)], "UNSUPPORTED_SASL_MECHANISM"),
        ([_upsert("bob"), CredentialChange("bob", 1)], "DUPLICATE_RESOURCE"),
        ([_upsert("bob", 2), CredentialChange("bob", 1)], "RESOURCE_NOT_FOUND"),
    ],
    ids=["too-few-iterations", "too-many", "empty-salt", "unknown-mechanism", "twice",
         "delete-missing"],
)  # fmt: skip
def test_a_refused_change_refuses_its_users_other_changes_only(
    store_dir: Path, changes: list[CredentialChange], reason: str
) -> None:
    credentials = _credentials(store_dir)
    outcomes = credentials.apply([*changes, _upsert("carol")])
    bob = outcomes["bob"]
    assert bob is not None and bob.reason == reason
    assert outcomes["carol"] is None
    assert set(credentials.read()) == {"carol"}  # none of bob's landed, carol's did


def test_deleting_the_last_mechanism_removes_the_user(store_dir: Path) -> None:
    credentials = _credentials(store_dir)
    credentials.apply([_upsert("alice")])
    assert credentials.apply([CredentialChange("alice", 1)]) == {"alice": None}
    assert credentials.read() == {}
