"""The coordinators' state in Kafka's own schemas: the records of ``__consumer_offsets``.

Issue 19's first building block. A group coordinator keeps committed offsets and group
membership as records of the compacted topic ``__consumer_offsets``, in exactly the
bytes Kafka 4.1 writes, so Kafka's tools read our segments and ours read Kafka's:

- ``protocol_types``: Kafka's message primitives (classic and flexible versions);
- ``record_type``: the int16 record type in front of every key;
- ``offset_records``: committed offsets (``OffsetCommitKey``/``OffsetCommitValue``);
- ``classic_group_records``: a classic group (``GroupMetadataKey``/``GroupMetadataValue``);
- ``consumer_group_records``: a KIP-848 consumer group's epoch, members, target and
  current assignments, regular expressions and (4.0's) partition metadata;
- ``group_records``: any record's key and value to bytes and back (``CoordinatorRecord``);
- ``offsets_topic``: ``__consumer_offsets`` and which of its partitions holds a group;
- ``transaction_records``: the records of ``__transaction_state`` (``TransactionLogKey``/
  ``TransactionLogValue``), and ``transaction_topic``: which of its partitions holds a
  transactional id;
- ``versioned_value``: a value's int16 version and fields, shared by both topics;
- ``errors``: unknown record types and value versions.

Those are pure functions over bytes. Over them, the coordinator itself (issue 19, part 1:
committed offsets; docs/GROUPS.md):

- ``offsets_state``: the offsets one partition holds, as its records say;
- ``loader``: a partition's log replayed into that state;
- ``coordinator``: the partitions led here loaded and unloaded, and the calls (commit,
  fetch, delete, list, describe, expiry) written as records through the produce path;
- ``config``: its broker configs (``offsets.*``, ``offset.metadata.max.bytes``).

The gRPC face is ``tierlog.sidecar.group_service``.
"""
