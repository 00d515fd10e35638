"""Talking to the brokers' sidecars (``tierlog.client.AdminClient``), one broker per call.

The admin client is blocking gRPC, so each call runs in a thread, with a short request
timeout: a broker that does not answer makes the operator wait and retry, never hang.
Each call takes the broker's ``security`` (TLS and token, ``broker_security.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterable
from typing import TypeVar

from tierlog.client import AdminClient, ChannelSecurity, Cluster
from tierlog.client.admin import AssignmentUpdate, RestartReadiness
from tierlog.operator.spec import TopicSpec
from tierlog.operator.topic_sync import BrokerTopic, TopicChanges
from tierlog.storage.errors import UnknownTopicOrPartitionError

__all__ = [
    "apply_topic",
    "delete_topic",
    "owned_partitions",
    "prepare_restart",
    "read_topic",
    "update_assignment",
]

REQUEST_TIMEOUT_MS = 10_000
_T = TypeVar("_T")


async def _with_admin(
    address: str, security: ChannelSecurity, call: Callable[[AdminClient], _T]
) -> _T:
    def run() -> _T:
        cluster = Cluster([address], request_timeout_ms=REQUEST_TIMEOUT_MS, security=security)
        try:
            with AdminClient(
                address, request_timeout_ms=REQUEST_TIMEOUT_MS, cluster=cluster, broker_only=True
            ) as admin:
                return call(admin)
        finally:
            cluster.close()

    return await asyncio.to_thread(run)


async def prepare_restart(address: str, *, security: ChannelSecurity) -> RestartReadiness:
    return await _with_admin(address, security, lambda admin: admin.prepare_restart())


async def update_assignment(
    address: str, document: str, *, security: ChannelSecurity
) -> AssignmentUpdate:
    """Hand the broker at ``address`` the partition assignment just written to the
    ConfigMap (``assignment.json``), which its volume shows only a minute or so later."""
    return await _with_admin(address, security, lambda admin: admin.update_assignment(document))


async def owned_partitions(
    address: str, topics: Iterable[str], *, security: ChannelSecurity
) -> int:
    """How many partitions of ``topics`` the broker at ``address`` says it owns."""
    names = list(topics)

    def count(admin: AdminClient) -> int:
        existing = [name for name in names if name in admin.list_topics()]
        if not existing:
            return 0
        metadata = admin.metadata(existing)
        return sum(
            owner == metadata.node_id for owners in metadata.leaders.values() for owner in owners
        )

    return await _with_admin(address, security, count)


async def read_topic(address: str, name: str, *, security: ChannelSecurity) -> BrokerTopic:
    def read(admin: AdminClient) -> BrokerTopic:
        try:
            configs = admin.describe_configs(name)
        except UnknownTopicOrPartitionError:
            return BrokerTopic(None)
        overrides = {key: entry.value for key, entry in configs.items() if not entry.is_default}
        return BrokerTopic(admin.list_topics()[name], overrides)

    return await _with_admin(address, security, read)


async def apply_topic(
    address: str, topic: TopicSpec, changes: TopicChanges, *, security: ChannelSecurity
) -> None:
    def apply(admin: AdminClient) -> None:
        if changes.create:
            admin.create_topic(topic.name, topic.partitions, topic.configs)
            return
        if changes.grow_to:
            admin.create_partitions(topic.name, changes.grow_to)
        if changes.set_configs or changes.delete_configs:
            admin.alter_configs(topic.name, changes.set_configs, changes.delete_configs)

    await _with_admin(address, security, apply)


async def delete_topic(address: str, name: str, *, security: ChannelSecurity) -> None:
    """Delete the topic on the broker at ``address``; one it does not have is done too."""

    def delete(admin: AdminClient) -> None:
        with contextlib.suppress(UnknownTopicOrPartitionError):
            admin.delete_topic(name)

    await _with_admin(address, security, delete)
