"""The operator's settings: flags over the environment the chart sets, over defaults."""

from __future__ import annotations

import pytest

from tierlog.operator.config import DEFAULT_IMAGE, BrokerImage, OperatorConfig, OperatorPeer
from tierlog.operator.main import parse_args

_ENVIRONMENT = (
    "TIERLOG_BROKER_IMAGE",
    "TIERLOG_BROKER_IMAGE_PULL_POLICY",
    "TIERLOG_BROKER_IMAGE_PULL_SECRETS",
    "TIERLOG_OPERATOR_POD_LABELS",
    "POD_NAMESPACE",
)


@pytest.fixture(autouse=True)
def _no_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in _ENVIRONMENT:
        monkeypatch.delenv(name, raising=False)


def test_a_bare_operator_uses_the_published_image_and_deploy_bases_namespace() -> None:
    config = OperatorConfig.from_args(parse_args([]))
    assert config.broker_image == BrokerImage(DEFAULT_IMAGE, "IfNotPresent", ())
    assert config.peer == OperatorPeer()
    assert config.peer.namespace == "tierlog-system"
    assert config.peer.pod_labels == {
        "app.kubernetes.io/name": "tierlog",
        "app.kubernetes.io/component": "operator",
    }


def test_the_environment_configures_it_and_flags_win(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TIERLOG_BROKER_IMAGE", "registry.example/tierlog:2")
    monkeypatch.setenv("TIERLOG_BROKER_IMAGE_PULL_POLICY", "Always")
    monkeypatch.setenv("TIERLOG_BROKER_IMAGE_PULL_SECRETS", "one,two")
    monkeypatch.setenv("TIERLOG_OPERATOR_POD_LABELS", "app=ops, tier = control")
    monkeypatch.setenv("POD_NAMESPACE", "ops")
    config = OperatorConfig.from_args(parse_args([]))
    assert config.broker_image == BrokerImage(
        "registry.example/tierlog:2", "Always", ("one", "two")
    )
    assert config.peer == OperatorPeer("ops", {"app": "ops", "tier": "control"})
    flagged = OperatorConfig.from_args(
        parse_args(["--broker-image=other:3", "--operator-namespace=elsewhere"])
    )
    assert (flagged.broker_image.image, flagged.peer.namespace) == ("other:3", "elsewhere")


@pytest.mark.parametrize("flag", ["--operator-pod-labels=app", "--broker-image-pull-policy=Often"])
def test_a_bad_flag_is_refused_at_start(flag: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        parse_args([flag])
    assert exited.value.code == 2
    assert flag.split("=")[0] in capsys.readouterr().err
