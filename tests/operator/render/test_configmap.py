"""The ConfigMap: the sidecar's shared broker config, and the partition plan."""

from __future__ import annotations

import dataclasses

from tests.operator.render.conftest import resource
from tierlog.operator.assignment import plan
from tierlog.operator.render.common import Owner
from tierlog.operator.render.configmap import config_map, properties_text, sidecar_properties
from tierlog.operator.spec import ClusterSpec
from tierlog.sidecar.config import SidecarConfig
from tierlog.storage.properties import parse_properties


def test_defaults_give_group_commit_every_second(bare: ClusterSpec) -> None:
    props = sidecar_properties(bare)
    assert props["log.flush.interval.ms"] == "1000"
    assert "log.flush.interval.messages" not in props
    assert props["cluster.id"] == "prod.events"


def test_log_defaults_and_fsync_policy_become_broker_configs(full: ClusterSpec) -> None:
    props = sidecar_properties(full)
    assert props["log.retention.ms"] == "3600000"
    assert props["log.preallocate"] == "true"
    assert props["log.flush.interval.messages"] == "1"


def test_the_sidecar_accepts_the_rendered_config(full: ClusterSpec) -> None:
    """Every key is one the sidecar knows (it refuses unknown keys), with valid values."""
    props = {**sidecar_properties(full), "node.id": "2"}
    config = SidecarConfig.from_properties(props)
    assert config.storage.default_log_config.retention_ms == 3_600_000
    assert config.storage.default_log_config.flush_messages == 1


def test_the_tier_is_where_the_spec_says(full: ClusterSpec) -> None:
    props = sidecar_properties(full)
    assert props["tierlog.tier.url"] == "s3://bucket/prefix"
    assert props["tierlog.tier.s3.endpoint.url"] == "http://minio:9000"
    assert props["tierlog.tier.s3.path.style.access.enabled"] == "true"
    config = SidecarConfig.from_properties({**props, "node.id": "0"})
    assert config.tier is not None
    assert config.tier.url == "s3://bucket/prefix"
    assert config.tier.s3.endpoint_url == "http://minio:9000"
    assert config.tier.s3.path_style is True


def test_properties_are_sorted_and_stable(bare: ClusterSpec) -> None:
    text = properties_text(sidecar_properties(bare))
    lines = [line for line in text.splitlines() if not line.startswith("#")]
    assert lines == sorted(lines)
    assert text == properties_text(sidecar_properties(bare))
    assert parse_properties(text) == sidecar_properties(bare)  # as the sidecar reads it


def test_config_map_carries_both_files(bare: ClusterSpec, owner: Owner) -> None:
    assignment = plan({0: "a:1", 1: "b:1"}, {"t": 2})
    manifest = config_map(bare, owner, assignment)
    assert manifest["metadata"]["name"] == "events-config"
    assert manifest["metadata"]["ownerReferences"][0]["uid"] == "u-1"
    assert set(manifest["data"]) == {"server.properties", "assignment.json"}
    assert '"t": [' in manifest["data"]["assignment.json"]


def test_tier_restore_reaches_every_broker_start_and_the_sidecar_takes_it(
    full: ClusterSpec,
) -> None:
    """``spec.tier.restore`` is a broker config (every start: the sidecar's marker makes a
    restored broker's restart an ordinary one); without it no broker restores."""
    assert full.tier is not None and "tierlog.tier.restore" not in sidecar_properties(full)
    restoring = dataclasses.replace(full, tier=dataclasses.replace(full.tier, restore=True))
    props = sidecar_properties(restoring)
    assert props["tierlog.tier.restore"] == "true"
    assert SidecarConfig.from_properties({**props, "node.id": "1"}).tier_config.restore
    parsed = ClusterSpec.from_resource(
        resource(tier={"url": "s3://bucket/prefix", "restore": True})
    )
    assert parsed.tier is not None and parsed.tier.restore


def test_a_tier_cache_volume_holds_the_chunk_cache_below_its_size(bare: ClusterSpec) -> None:
    """``spec.tier.cache``: the sidecar's chunk cache on its own volume, its byte limit the
    volume's size less the file system's share; without it the cache stays on the data
    volume at the sidecar's default."""
    cached = ClusterSpec.from_resource(
        resource(tier={"url": "s3://bucket/p", "cache": {"size": "20Gi"}})
    )
    props = sidecar_properties(cached)
    assert props["tierlog.remote.cache.dir"] == "/var/cache/tierlog/chunks"
    assert int(props["tierlog.remote.cache.max.bytes"]) == 20 * (1 << 30) * 85 // 100
    reads = SidecarConfig.from_properties({**props, "node.id": "1"}).remote_read_config
    assert str(reads.cache_dir) == "/var/cache/tierlog/chunks"
    assert reads.cache_max_bytes == 20 * (1 << 30) * 85 // 100
    uncached = sidecar_properties(
        ClusterSpec.from_resource(resource(tier={"url": "s3://bucket/p"}))
    )
    assert "tierlog.remote.cache.dir" not in uncached
    assert "tierlog.remote.cache.max.bytes" not in uncached
    assert "tierlog.remote.cache.dir" not in sidecar_properties(bare)
