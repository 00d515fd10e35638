from __future__ import annotations

from pathlib import Path

import pytest

from tierlog.storage.errors import InvalidConfigError
from tierlog.storage.tier.s3_credentials import (
    S3Credentials,
    parse_credentials_file,
    read_credentials,
)


def test_a_secret_directory_has_one_file_per_key(tmp_path: Path) -> None:
    (tmp_path / "access_key_id").write_text("AKIA123\n")
    (tmp_path / "secret_access_key").write_text("s3cr3t\n")
    assert read_credentials(tmp_path) == S3Credentials("AKIA123", "s3cr3t")
    (tmp_path / "session_token").write_text("token")
    assert read_credentials(tmp_path).session_token == "token"


def test_a_file_has_name_value_lines(tmp_path: Path) -> None:
    keys = tmp_path / "keys"
    keys.write_text("# rotated monthly\naccess_key_id = AKIA123\nsecret_access_key=s3=cr3t\n")
    assert read_credentials(keys) == S3Credentials("AKIA123", "s3=cr3t")


def test_the_secret_never_shows_in_a_repr() -> None:
    assert "s3cr3t" not in repr(S3Credentials("AKIA123", "s3cr3t", "token"))


@pytest.mark.parametrize(
    "text",
    ["access_key_id = A\n", "secret_access_key = S\n", "access_key_id=A\nsecret_acess_key=S\n",
     "access_key_id A\nsecret_access_key=S\n", "access_key_id=\nsecret_access_key=S\n"],
)  # fmt: skip
def test_a_missing_misspelt_or_empty_key_is_a_config_error(text: str) -> None:
    with pytest.raises(InvalidConfigError, match="keys"):
        parse_credentials_file(text, source="keys")


def test_an_unreadable_path_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(InvalidConfigError, match="missing"):
        read_credentials(tmp_path / "missing")
    with pytest.raises(InvalidConfigError, match="no secret_access_key"):
        (tmp_path / "access_key_id").write_text("A")
        read_credentials(tmp_path)
