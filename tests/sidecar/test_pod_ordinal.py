"""A broker's id is the ordinal ending its StatefulSet pod's name."""

from __future__ import annotations

import pytest

from tierlog.sidecar.pod_ordinal import pod_ordinal
from tierlog.storage.errors import InvalidConfigError


@pytest.mark.parametrize(
    ("name", "ordinal"), [("demo-0", 0), ("events-2", 2), ("my-big-cluster-63", 63)]
)
def test_the_ordinal_ends_the_name(name: str, ordinal: int) -> None:
    assert pod_ordinal(name) == ordinal


@pytest.mark.parametrize("name", ["demo", "demo-", "demo-x", "demo-01", "demo-1a"])
def test_a_name_without_an_ordinal_is_an_invalid_config(name: str) -> None:
    with pytest.raises(InvalidConfigError, match="no StatefulSet pod name"):
        pod_ordinal(name)
