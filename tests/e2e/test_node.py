"""``make cluster`` on a running node (what ``make e2e`` does too) is idempotent: it
rebuilds and re-imports the image but leaves every running daemon as it was."""

from __future__ import annotations

import pytest

from tests.e2e.conftest import Node
from tests.support.cluster import daemons
from tests.support.cluster.node import START_ORDER, up

pytestmark = pytest.mark.e2e


def test_up_on_a_running_node_leaves_every_daemon_running(one_node: Node) -> None:
    before = {name: daemons.running_pid(one_node.layout, name) for name in START_ORDER}
    assert None not in before.values(), before

    assert up(one_node.layout) == one_node.image

    after = {name: daemons.running_pid(one_node.layout, name) for name in START_ORDER}
    assert after == before  # kube-proxy used to exit on its rewritten config file
