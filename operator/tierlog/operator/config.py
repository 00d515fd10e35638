"""The operator's own settings: what a TierlogCluster leaves to the installation.

Read once from flags (or the environment the chart sets, ``TIERLOG_*``) and passed down.
The brokers' image is the chart's ``image.repository:image.tag``, the one the operator
itself runs, unless a cluster's ``spec.image`` names another: the CRD has no default of
its own, which the API server would write into every cluster at admission and so pin
them to one release whatever the chart installs. The pull policy and pull Secrets follow
the same rule.

The brokers' NetworkPolicy must admit the operator's own gRPC calls (drain, restart
safety, topic admin), so the operator knows where its pods are: its namespace (the
downward API's, ``POD_NAMESPACE``) and the labels the chart gives them.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping
from dataclasses import dataclass, field

__all__ = ["DEFAULT_IMAGE", "BrokerImage", "OperatorConfig", "OperatorPeer", "add_arguments"]

# The published image of this release: the default of a bare ``tierlog-operator``;
# the chart and deploy/base always say which image they install.
DEFAULT_IMAGE = "ghcr.io/tierlog/tierlog:0.1.0"
_PULL_POLICIES = ("Always", "IfNotPresent", "Never")
# deploy/base's namespace, and the labels every install gives the operator's pods.
DEFAULT_NAMESPACE = "tierlog-system"
DEFAULT_POD_LABELS = "app.kubernetes.io/name=tierlog,app.kubernetes.io/component=operator"


def parse_labels(text: str) -> dict[str, str]:
    """``k=v,k2=v2`` as a dict; a pair without ``=`` is an error."""
    labels = {}
    for pair in text.split(","):
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise argparse.ArgumentTypeError(f"expected KEY=VALUE[,KEY=VALUE...], got {text!r}")
        labels[key.strip()] = value.strip()
    return labels


@dataclass(frozen=True)
class BrokerImage:
    """The brokers' image where a cluster's spec does not name one."""

    image: str = DEFAULT_IMAGE
    pull_policy: str = "IfNotPresent"
    pull_secrets: tuple[str, ...] = ()  # Secret names, in each cluster's namespace


@dataclass(frozen=True)
class OperatorPeer:
    """Where the operator's pods are, for the NetworkPolicy in front of the brokers."""

    namespace: str = DEFAULT_NAMESPACE
    pod_labels: Mapping[str, str] = field(default_factory=lambda: parse_labels(DEFAULT_POD_LABELS))


@dataclass(frozen=True)
class OperatorConfig:
    broker_image: BrokerImage = BrokerImage()
    peer: OperatorPeer = OperatorPeer()

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> OperatorConfig:
        secrets = tuple(name for name in args.broker_image_pull_secrets.split(",") if name)
        return cls(
            broker_image=BrokerImage(args.broker_image, args.broker_image_pull_policy, secrets),
            peer=OperatorPeer(args.operator_namespace, args.operator_pod_labels),
        )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags of ``OperatorConfig``; each defaults to its environment variable."""
    parser.add_argument(
        "--broker-image",
        default=os.environ.get("TIERLOG_BROKER_IMAGE") or DEFAULT_IMAGE,
        help="the brokers' image unless a cluster's spec.image names one "
        "($TIERLOG_BROKER_IMAGE; default %(default)s)",
    )
    parser.add_argument(
        "--broker-image-pull-policy",
        choices=_PULL_POLICIES,
        default=os.environ.get("TIERLOG_BROKER_IMAGE_PULL_POLICY") or "IfNotPresent",
        help="the brokers' pull policy unless spec.imagePullPolicy says "
        "($TIERLOG_BROKER_IMAGE_PULL_POLICY; default %(default)s)",
    )
    parser.add_argument(
        "--broker-image-pull-secrets",
        metavar="NAME[,NAME...]",
        default=os.environ.get("TIERLOG_BROKER_IMAGE_PULL_SECRETS", ""),
        help="Secrets (in each cluster's namespace) the brokers pull with unless "
        "spec.imagePullSecrets lists them ($TIERLOG_BROKER_IMAGE_PULL_SECRETS)",
    )
    parser.add_argument(
        "--operator-namespace",
        default=os.environ.get("POD_NAMESPACE") or DEFAULT_NAMESPACE,
        help="the namespace of the operator's pods, admitted by the brokers' NetworkPolicy "
        "($POD_NAMESPACE; default %(default)s)",
    )
    parser.add_argument(
        "--operator-pod-labels",
        metavar="KEY=VALUE[,...]",
        type=parse_labels,
        default=os.environ.get("TIERLOG_OPERATOR_POD_LABELS") or DEFAULT_POD_LABELS,
        help="labels of the operator's pods, admitted by the brokers' NetworkPolicy "
        "($TIERLOG_OPERATOR_POD_LABELS; default %(default)s)",
    )
