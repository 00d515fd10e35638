"""The operator's own settings: what a TierlogCluster leaves to the installation.

Read once from flags (or the environment the chart sets, ``TIERLOG_*``) and passed down.
The brokers' image is the chart's ``image.repository:image.tag``, the one the operator
itself runs, unless a cluster's ``spec.image`` names another: the CRD has no default of
its own, which the API server would write into every cluster at admission and so pin
them to one release whatever the chart installs. The pull policy and pull Secrets follow
the same rule.
"""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass

__all__ = ["DEFAULT_IMAGE", "BrokerImage", "OperatorConfig", "add_arguments"]

# The published image of this release: the default of a bare ``tierlog-operator``;
# the chart and deploy/base always say which image they install.
DEFAULT_IMAGE = "ghcr.io/tierlog/tierlog:0.1.0"
_PULL_POLICIES = ("Always", "IfNotPresent", "Never")


@dataclass(frozen=True)
class BrokerImage:
    """The brokers' image where a cluster's spec does not name one."""

    image: str = DEFAULT_IMAGE
    pull_policy: str = "IfNotPresent"
    pull_secrets: tuple[str, ...] = ()  # Secret names, in each cluster's namespace


@dataclass(frozen=True)
class OperatorConfig:
    broker_image: BrokerImage = BrokerImage()

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> OperatorConfig:
        secrets = tuple(name for name in args.broker_image_pull_secrets.split(",") if name)
        return cls(
            broker_image=BrokerImage(args.broker_image, args.broker_image_pull_policy, secrets)
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
