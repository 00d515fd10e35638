"""Who may read and change users' SCRAM credentials over the Kafka listener.

Kept simple: a client that proved it holds the broker's bearer token (SASL PLAIN or
OAUTHBEARER with the token, ``RequestClient.holds_broker_token``) may describe and
alter every user's credentials; any other connection (a SCRAM user, a TLS certificate,
a listener without SASL) is answered CLUSTER_AUTHORIZATION_FAILED, as Kafka answers a
principal without ALTER (DESCRIBE) on the cluster. There are no ACLs to grant it.
"""

from __future__ import annotations

from tierlog.kafka.request_client import current_client

__all__ = ["NOT_AUTHORIZED", "may_manage_credentials"]

NOT_AUTHORIZED = (
    "SCRAM credentials are managed by a client authenticated with the broker's bearer "
    "token (SASL PLAIN or OAUTHBEARER)"
)


def may_manage_credentials() -> bool:
    return current_client().holds_broker_token
