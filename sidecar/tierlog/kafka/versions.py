"""The API keys and versions this listener serves, as ApiVersions advertises them.

Each range starts at Kafka 2.1's versions (KIP-896: Kafka 4 clients need no older ones)
and ends where a handler here implements every field's meaning and a real client test
runs it (docs/KAFKA-PROTOCOL.md says why each range ends where it does). A client
takes the highest version both sides know.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

__all__ = [
    "ADD_OFFSETS_TO_TXN",
    "ADD_PARTITIONS_TO_TXN",
    "ALTER_CONFIGS",
    "ALTER_USER_SCRAM_CREDENTIALS",
    "API_VERSIONS",
    "API_VERSIONS_KEY",
    "CONSUMER_GROUP_DESCRIBE",
    "CONSUMER_GROUP_HEARTBEAT",
    "CREATE_PARTITIONS",
    "CREATE_TOPICS",
    "DELETE_GROUPS",
    "DELETE_RECORDS",
    "DELETE_TOPICS",
    "DESCRIBE_CLIENT_QUOTAS",
    "DESCRIBE_CLUSTER",
    "DESCRIBE_CONFIGS",
    "DESCRIBE_GROUPS",
    "DESCRIBE_LOG_DIRS",
    "DESCRIBE_PRODUCERS",
    "DESCRIBE_TRANSACTIONS",
    "DESCRIBE_USER_SCRAM_CREDENTIALS",
    "ELECT_LEADERS",
    "END_TXN",
    "FETCH",
    "FIND_COORDINATOR",
    "HEARTBEAT",
    "INCREMENTAL_ALTER_CONFIGS",
    "INIT_PRODUCER_ID",
    "JOIN_GROUP",
    "LEAVE_GROUP",
    "LIST_GROUPS",
    "LIST_OFFSETS",
    "LIST_TRANSACTIONS",
    "METADATA",
    "OFFSET_COMMIT",
    "OFFSET_DELETE",
    "OFFSET_FETCH",
    "OFFSET_FOR_LEADER_EPOCH",
    "PRODUCE",
    "SYNC_GROUP",
    "TXN_OFFSET_COMMIT",
    "WRITE_TXN_MARKERS",
]

PRODUCE = 0
FETCH = 1
LIST_OFFSETS = 2
METADATA = 3
OFFSET_COMMIT = 8
OFFSET_FETCH = 9
FIND_COORDINATOR = 10
JOIN_GROUP = 11
HEARTBEAT = 12
LEAVE_GROUP = 13
SYNC_GROUP = 14
DESCRIBE_GROUPS = 15
LIST_GROUPS = 16
SASL_HANDSHAKE = 17
API_VERSIONS_KEY = 18
CREATE_TOPICS = 19
DELETE_TOPICS = 20
DELETE_RECORDS = 21
INIT_PRODUCER_ID = 22
OFFSET_FOR_LEADER_EPOCH = 23
ADD_PARTITIONS_TO_TXN = 24
ADD_OFFSETS_TO_TXN = 25
END_TXN = 26
WRITE_TXN_MARKERS = 27
TXN_OFFSET_COMMIT = 28
DESCRIBE_CONFIGS = 32
ALTER_CONFIGS = 33
DESCRIBE_LOG_DIRS = 35
SASL_AUTHENTICATE = 36
CREATE_PARTITIONS = 37
DELETE_GROUPS = 42
ELECT_LEADERS = 43
INCREMENTAL_ALTER_CONFIGS = 44
OFFSET_DELETE = 47
DESCRIBE_CLIENT_QUOTAS = 48
DESCRIBE_USER_SCRAM_CREDENTIALS = 50
ALTER_USER_SCRAM_CREDENTIALS = 51
DESCRIBE_CLUSTER = 60
DESCRIBE_PRODUCERS = 61
DESCRIBE_TRANSACTIONS = 65
LIST_TRANSACTIONS = 66
CONSUMER_GROUP_HEARTBEAT = 68
CONSUMER_GROUP_DESCRIBE = 69

# api key -> (min version, max version)
API_VERSIONS: Mapping[int, tuple[int, int]] = MappingProxyType(
    {
        PRODUCE: (3, 11),  # v12 is transactions v2 (KIP-890), v13 names topics by id
        # v13 names topics by id, v15 moves replica_id into replica_state, v16 adds the
        # leader's endpoint (KIP-951), v17 a follower's directory id; v18 adds the high
        # watermark a follower knows, a field no consumer sends.
        FETCH: (4, 17),
        # v10 adds a timeout for lookups in the remote tier (KIP-1075); v11 a new
        # special timestamp (KIP-1023's earliest pending upload), not kept here.
        LIST_OFFSETS: (1, 10),
        # Kafka 4 keeps v0-v3 (KIP-896 removed none); v13 (a top-level error code) is
        # the newest.
        METADATA: (0, 13),
        # v2 is KIP-896's floor; v9 is the first a KIP-848 member commits with, v10
        # names topics by id.
        OFFSET_COMMIT: (2, 9),
        # v1 is KIP-896's floor; v8 batches groups, v9 adds KIP-848's member and epoch,
        # v10 names topics by id.
        OFFSET_FETCH: (1, 9),
        # v0 is older than KIP-896's floor; v6 adds share groups' key type (KIP-932),
        # which is refused per key (INVALID_REQUEST) as no share coordinator runs here.
        FIND_COORDINATOR: (1, 6),
        # Classic groups. Each range starts at KIP-896's floor. JoinGroup v9 adds
        # skip_assignment (answered false), the newest kio knows.
        JOIN_GROUP: (2, 9),
        SYNC_GROUP: (1, 5),  # v5 (protocol type and name) is the newest
        HEARTBEAT: (1, 4),  # v4 is the newest
        LEAVE_GROUP: (1, 5),  # v3 batches members (KIP-345), v5 a reason: the newest
        # v6 answers an unknown group GROUP_ID_NOT_FOUND (with a message): the newest.
        DESCRIBE_GROUPS: (1, 6),
        LIST_GROUPS: (1, 5),  # v4 filters by state, v5 by type (KIP-848)
        SASL_HANDSHAKE: (0, 1),  # every version: v0 sends the mechanism's messages bare
        API_VERSIONS_KEY: (0, 4),
        CREATE_TOPICS: (2, 7),  # every version past the floor (v7 answers topic ids)
        DELETE_TOPICS: (1, 6),  # every version past the floor (v6 deletes by topic id)
        DELETE_RECORDS: (0, 2),  # every version
        INIT_PRODUCER_ID: (0, 4),  # v5 changes transactional fencing, v6 adds 2PC (KIP-939)
        OFFSET_FOR_LEADER_EPOCH: (2, 4),  # all versions kio knows past KIP-896's floor
        # The four transaction calls start at v0, as Kafka 4 still serves them (KIP-896
        # kept them): librdkafka 2.12 sends AddPartitionsToTxn and AddOffsetsToTxn only
        # at v0 and EndTxn at v0-v1, and without v0 its transactions cannot start.
        # v4+ batches transactional ids for brokers verifying a produce (KIP-890): never a
        # client's, and tierlog's brokers reach the coordinator over gRPC.
        ADD_PARTITIONS_TO_TXN: (0, 3),
        ADD_OFFSETS_TO_TXN: (0, 3),  # v4 adds TRANSACTION_ABORTABLE (KIP-890)
        # v4 adds TRANSACTION_ABORTABLE, v5 is transactions v2 (an epoch bump per EndTxn,
        # KIP-890 part 2), which the coordinator does not keep.
        END_TXN: (0, 3),
        # v1 alone: KIP-896 removed v0 (Kafka 4.1's admin sends v1, the only version it
        # knows, for ``kafka-transactions abort``); v2 adds each marker's transaction
        # version (KIP-890 part 2's markers), which the coordinator does not keep.
        WRITE_TXN_MARKERS: (1, 1),
        TXN_OFFSET_COMMIT: (0, 3),  # v4 adds TRANSACTION_ABORTABLE (KIP-890)
        DESCRIBE_CONFIGS: (1, 4),  # every version past the floor (v3: types, documentation)
        ALTER_CONFIGS: (0, 2),  # every version
        DESCRIBE_LOG_DIRS: (1, 4),  # v4 adds disk sizes; no client in the tests sends v5
        SASL_AUTHENTICATE: (0, 2),  # every version (v1 adds the session lifetime: 0)
        CREATE_PARTITIONS: (0, 3),  # every version
        DELETE_GROUPS: (0, 2),  # every version (v0 predates KIP-896's floor and stays)
        # Every version: v1 adds a top-level error code, v2 the election type (KIP-460).
        ELECT_LEADERS: (0, 2),
        INCREMENTAL_ALTER_CONFIGS: (0, 1),  # every version
        OFFSET_DELETE: (0, 0),  # the only version
        DESCRIBE_CLIENT_QUOTAS: (0, 1),  # every version (no quotas kept: always none)
        # Users' SCRAM credentials (KIP-554): v0 is the only version of each.
        DESCRIBE_USER_SCRAM_CREDENTIALS: (0, 0),
        ALTER_USER_SCRAM_CREDENTIALS: (0, 0),
        DESCRIBE_CLUSTER: (0, 1),  # v2 adds fenced brokers (KIP-1073), which are not kept
        DESCRIBE_PRODUCERS: (0, 0),  # the only version
        DESCRIBE_TRANSACTIONS: (0, 0),  # the only version
        LIST_TRANSACTIONS: (0, 1),  # v2 adds a transactional id pattern (KIP-1152)
        # v1 has the consumer make its member id (KIP-1082); the newest kio knows.
        CONSUMER_GROUP_HEARTBEAT: (0, 1),
        # v1 adds each member's type; the newest kio knows.
        CONSUMER_GROUP_DESCRIBE: (0, 1),
    }
)
