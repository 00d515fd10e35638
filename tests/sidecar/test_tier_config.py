"""The remote tier's settings: --tier-url and the S3 flags, or their config keys."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.sidecar.conftest import SidecarFactory
from tests.support.fault_proxy import FaultProxy
from tests.support.minio import MinioServer
from tests.support.sidecars import console_script
from tierlog.sidecar.config import SidecarConfig
from tierlog.sidecar.main import build_config, parse_args
from tierlog.sidecar.metrics import SidecarMetrics
from tierlog.storage.errors import InvalidConfigError
from tierlog.storage.tier.s3_store import S3Location, S3Options, S3Store


def test_by_default_the_tier_is_a_directory_in_the_first_data_dir(tmp_path: Path) -> None:
    config = build_config(parse_args(["--data-dir", str(tmp_path / "a"), "--data-dir", "b"]))
    assert config.tier_config.url == (tmp_path / "a" / "tier").as_uri()
    assert config.tier_config.s3 == S3Options()


def test_only_a_tier_outside_the_data_dirs_can_be_shared_by_brokers(tmp_path: Path) -> None:
    data_dirs = (tmp_path / "a", tmp_path / "b")
    default = build_config(parse_args(["--data-dir", str(data_dirs[0]), "--data-dir", "b"]))
    assert default.tier_config.private_to(data_dirs)

    def tier_at(url: str) -> bool:
        args = ["--data-dir", str(data_dirs[0]), "--tier-url", url]
        return build_config(parse_args(args)).tier_config.private_to(data_dirs)

    assert tier_at((data_dirs[1] / "mine").as_uri())
    assert not tier_at((tmp_path / "shared tier").as_uri())
    assert not tier_at("s3://bucket/tier")


def test_flags_set_the_url_and_how_to_reach_s3(tmp_path: Path) -> None:
    args = parse_args(
        [
            "--data-dir", str(tmp_path),
            "--tier-url", "s3://tier-bucket/cluster-a",
            "--s3-endpoint-url", "http://minio:9000",
            "--s3-region", "eu-west-1",
            "--s3-path-style",
            "--s3-credentials", "/etc/tierlog/s3",
            "--s3-upload-rate-limit", "10485760",
            "--s3-part-size", "33554432",
            "--s3-upload-concurrency", "4",
        ]
    )  # fmt: skip
    tier = build_config(args).tier_config
    assert tier.url == "s3://tier-bucket/cluster-a"
    assert tier.s3 == S3Options(
        endpoint_url="http://minio:9000",
        region="eu-west-1",
        path_style=True,
        credentials_path=Path("/etc/tierlog/s3"),
        upload_rate_bytes_per_s=10 * 1024 * 1024,
        part_size_bytes=32 * 1024 * 1024,
        upload_concurrency=4,
    )


def test_config_keys_say_the_same_in_milliseconds_and_bytes(tmp_path: Path) -> None:
    tier = SidecarConfig.from_properties(
        {
            "log.dirs": str(tmp_path),
            "tierlog.tier.url": "s3://b-1/p",
            "tierlog.tier.s3.connect.timeout.ms": "1500",
            "tierlog.tier.s3.read.timeout.ms": "20000",
            "tierlog.tier.s3.max.attempts": "3",
            "tierlog.tier.s3.multipart.threshold.bytes": "8388608",
            "tierlog.tier.s3.path.style.access.enabled": "false",
            "tierlog.tier.s3.max.connections": "96",
        }
    ).tier_config
    assert (tier.s3.connect_timeout_s, tier.s3.read_timeout_s) == (1.5, 20.0)
    assert (tier.s3.max_attempts, tier.s3.multipart_threshold_bytes) == (3, 8 * 1024 * 1024)
    assert tier.s3.path_style is False
    assert tier.s3.max_connections == 96


@pytest.mark.parametrize(
    ("key", "value", "complaint"),
    [
        ("tierlog.tier.s3.upload.concurrency", "many", "upload.concurrency"),
        ("tierlog.tier.s3.path.style.access.enabled", "yes", "true or false"),
        ("tierlog.tier.s3.part.size.bytes", "1024", "part size"),
        ("tierlog.tier.s3.upload.rate.limit.bytes.per.second", "-5", "rate limit"),
        ("tierlog.tier.s3.max.attempts", "0", "attempts"),
        ("tierlog.tier.s3.max.connections", "0", "connections"),
        ("tierlog.tier.s3.regoin", "x", "unknown broker config"),
    ],
)
def test_bad_tier_settings_are_config_errors(
    tmp_path: Path, key: str, value: str, complaint: str
) -> None:
    with pytest.raises(InvalidConfigError, match=complaint):
        SidecarConfig.from_properties({"log.dirs": str(tmp_path), key: value})


def test_a_bad_tier_url_stops_the_sidecar_with_invalid_config(tmp_path: Path) -> None:
    command = [
        console_script("tierlog-sidecar"), "--data-dir", str(tmp_path),
        "--listen", "127.0.0.1:0", "--tier-url", "ftp://tier-bucket/x",
    ]  # fmt: skip
    result = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert "INVALID_CONFIG" in result.stderr and "ftp://tier-bucket/x" in result.stderr


def test_the_sidecar_opens_the_s3_tier_it_is_given(
    tmp_path: Path, minio: MinioServer, s3_bucket: str, sidecar_factory: SidecarFactory
) -> None:
    keys = minio.write_credentials(tmp_path / "s3-keys")
    sidecar = sidecar_factory(
        tmp_path / "data",
        f"tierlog.tier.url=s3://{s3_bucket}/cluster-a",
        f"tierlog.tier.s3.endpoint.url={minio.endpoint_url}",
        f"tierlog.tier.s3.region={minio.region}",
        "tierlog.tier.s3.path.style.access.enabled=true",
        f"tierlog.tier.s3.credentials.path={keys}",
    )
    assert f"remote tier: s3://{s3_bucket}/cluster-a" in sidecar.output
    assert not (tmp_path / "data" / "tier").exists()
    assert sidecar.stop() == 0


def test_s3_requests_and_errors_are_counted_by_operation(
    minio: MinioServer, s3_bucket: str, fault_proxy: FaultProxy, tmp_path: Path
) -> None:
    metrics = SidecarMetrics()
    keys = minio.write_credentials(tmp_path / "s3-keys")
    options = S3Options(
        endpoint_url=fault_proxy.url, region=minio.region, path_style=True,
        credentials_path=keys, backoff_base_s=0.01,
    )  # fmt: skip
    store = S3Store(S3Location(s3_bucket, "p"), options, observer=metrics)
    try:
        fault_proxy.slow_down(2, method="PUT")
        store.put("k", b"v")
        assert store.get("k") == b"v"
    finally:
        store.close()
    sample = metrics.registry.get_sample_value
    assert sample("tierlog_tier_s3_requests_total", {"operation": "PutObject"}) == 3
    assert sample("tierlog_tier_s3_requests_total", {"operation": "GetObject"}) == 1
    errors = {"operation": "PutObject", "error": "SlowDown"}
    assert sample("tierlog_tier_s3_errors_total", errors) == 2


def test_the_restore_flag_sets_its_key_and_a_bad_value_is_refused(tmp_path: Path) -> None:
    data = ["--data-dir", str(tmp_path / "data")]
    assert not build_config(parse_args(data)).tier_config.restore
    assert build_config(parse_args([*data, "--restore-from-tier"])).tier_config.restore
    keyed = build_config(parse_args([*data, "--config", "tierlog.tier.restore=true"]))
    assert keyed.tier_config.restore
    with pytest.raises(InvalidConfigError, match=r"tierlog\.tier\.restore"):
        build_config(parse_args([*data, "--config", "tierlog.tier.restore=yes"]))
    replicated = [*data, "--config", f"tierlog.replication.state.dir={tmp_path / 'state'}"]
    assert build_config(parse_args([*replicated, "--restore-from-tier"])).tier_config.restore
