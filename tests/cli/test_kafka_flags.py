"""Kafka's spellings of the data commands' flags (issue 34, item 6), typed as a Kafka
user types them: ``configs --topic T`` without ``--entity-type``, ``consume --offset
earliest|latest``, ``produce --broker-list`` and ``--request-required-acks``,
``get-offsets`` with no ``--topic``, ``dump-log --key-decoder-class``. Each command runs
as a process against one real sidecar the module shares (each test its own topic)."""

from __future__ import annotations

import os
import subprocess

import pytest

from tests.support.sidecars import console_script
from tierlog.cli.main import build_parser, main

from .segments import WrittenLog


@pytest.fixture(scope="module")
def server(module_server: str) -> str:
    return module_server


def typed(*args: str, stdin: bytes = b"") -> subprocess.CompletedProcess[str]:
    """``tierlog ARGS`` exactly as typed: no ``--server`` added, none in the environment."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TIERLOG_")}
    ran = subprocess.run(
        [console_script("tierlog"), *args], input=stdin, env=env, capture_output=True, timeout=120
    )
    return subprocess.CompletedProcess(
        ran.args, ran.returncode, ran.stdout.decode(), ran.stderr.decode()
    )


def ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_configs_topic_describe_all_needs_no_entity_type(server: str) -> None:
    ok(typed("topics", "--bootstrap-server", server, "--create", "--topic", "cfg"))
    described = ok(
        typed("configs", "--bootstrap-server", server, "--topic", "cfg", "--describe", "--all")
    )
    assert described.startswith("All configs for topic cfg are:\n")
    assert "  retention.ms=604800000 sensitive=false synonyms={DEFAULT_CONFIG:" in described


def test_consume_offset_earliest_and_latest(server: str) -> None:
    ok(typed("topics", "--bootstrap-server", server, "--create", "--topic", "ends"))
    ok(typed("produce", "--bootstrap-server", server, "--topic", "ends", stdin=b"a\nb\nc\n"))
    earliest = typed(
        "consume", "--bootstrap-server", server, "--topic", "ends", "--partition", "0",
        "--offset", "earliest", "--max-messages", "3",
    )  # fmt: skip
    assert ok(earliest) == "a\nb\nc\n"
    # From the end, the three records are behind it: the command's own --timeout-ms ends it.
    latest = typed(
        "consume", "--bootstrap-server", server, "--topic", "ends", "--partition", "0",
        "--offset", "latest", "--timeout-ms", "1000",
    )  # fmt: skip
    assert ok(latest) == ""
    assert "Processed a total of 0 messages" in latest.stderr


@pytest.mark.parametrize("acks", ["all", "-1", "1"])
def test_produce_broker_list_and_request_required_acks(server: str, acks: str) -> None:
    topic = f"acks{acks.replace('-', 'm')}"
    ok(typed("topics", "--bootstrap-server", server, "--create", "--topic", topic))
    produced = typed(
        "produce", "--broker-list", server, "--topic", topic, "--request-required-acks", acks,
        stdin=b"one\ntwo\n",
    )  # fmt: skip
    ok(produced)
    offsets = typed("get-offsets", "--bootstrap-server", server, "--topic", topic)
    assert ok(offsets) == f"{topic}:0:2\n"


def test_produce_refuses_request_required_acks_kafka_does_not_take(server: str) -> None:
    refused = typed(
        "produce", "--broker-list", server, "--topic", "x", "--request-required-acks", "2"
    )
    assert refused.returncode == 2 and "--request-required-acks" in refused.stderr


def test_get_offsets_without_a_topic_prints_every_topic(server: str) -> None:
    for topic, partitions in (("every-b", "2"), ("every-a", "1")):
        ok(typed("topics", "--bootstrap-server", server, "--create", "--topic", topic,
                 "--partitions", partitions))  # fmt: skip
    ok(typed("produce", "--bootstrap-server", server, "--topic", "every-b", "--partition", "1",
             stdin=b"x\n"))  # fmt: skip
    lines = ok(typed("get-offsets", "--bootstrap-server", server)).splitlines()
    ours = [line for line in lines if line.startswith("every-")]
    assert ours == ["every-a:0:0", "every-b:0:0", "every-b:1:1"]


def test_dump_log_takes_kafkas_decoder_classes(
    written_log: WrittenLog, capsys: pytest.CaptureFixture[str]
) -> None:
    log = str(written_log.log_files[0])
    for package in ("kafka.serializer", "org.apache.kafka.tools.api"):
        status = main([
            "dump-log", "--files", log,
            "--key-decoder-class", f"{package}.DefaultDecoder",
            "--value-decoder-class", f"{package}.StringDecoder",
        ])  # fmt: skip
        assert status == 0
        assert f"key: {b'key-1'.hex()} payload: value-1-" in capsys.readouterr().out


def test_dump_log_refuses_a_decoder_class_it_does_not_have(
    written_log: WrittenLog, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as refused:
        main(["dump-log", "--files", str(written_log.log_files[0]),
              "--value-decoder-class", "com.example.AvroDecoder"])  # fmt: skip
    assert refused.value.code == 2
    assert "com.example.AvroDecoder" in capsys.readouterr().err


def test_produce_compression_codec_is_kafkas_name_for_compression_type(server: str) -> None:
    ok(typed("topics", "--bootstrap-server", server, "--create", "--topic", "zipped"))
    typed_line = f"produce --bootstrap-server {server} --topic zipped --compression-codec gzip"
    ok(typed(*typed_line.split(), stdin=b"a\nb\n"))
    read = f"consume --bootstrap-server {server} --topic zipped --from-beginning --max-messages 2"
    assert ok(typed(*read.split())) == "a\nb\n"


def test_dump_log_data_flags_as_kafka_users_type_them(
    written_log: WrittenLog, capsys: pytest.CaptureFixture[str]
) -> None:
    log = str(written_log.log_files[0])
    status = main([
        "dump-log", "--files", log, "--skip-record-metadata",
        "--key-decoder", "hex", "--value-decoder", "string",
    ])  # fmt: skip
    assert status == 0
    records = [line for line in capsys.readouterr().out.splitlines() if line.startswith("|")]
    assert records[1] == f"| key: {b'key-1'.hex()} payload: value-1-value-1-"  # data only
    index = str(sorted(written_log.directory.glob("*.index"))[0])
    # A batch above --max-message-size is not read by the index check: said, exit 2.
    assert (
        main(["dump-log", "--files", index, "--verify-index-only", "--max-message-size", "10"]) == 2
    )
    assert "above --max-message-size 10; not verified" in capsys.readouterr().err
    # --max-bytes: the first batch (852 bytes) is within 900, the second is not.
    assert main(["dump-log", "--files", log, "--max-bytes", "900"]) == 0
    batches = [line for line in capsys.readouterr().out.splitlines() if line.startswith("base")]
    assert len(batches) == 1 and batches[0].startswith("baseOffset: 0 lastOffset: 19 ")


def test_partitions_reassign_takes_a_kubernetes_store() -> None:
    """Where only acceptance matters (the Kubernetes store itself runs against an API
    server in tests/partition_state): the parser."""
    args = build_parser().parse_args(
        ["partitions", "reassign", "--plan", "move.json", "--verify", "--kubernetes", "ns/prod"]
    )
    assert (args.kubernetes, args.verify, args.state_dir) == ("ns/prod", True, None)
